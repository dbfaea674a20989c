"""Sparse segment reductions (``out[s] = reduce(data[indices[i]] for segment_ids[i] == s)``):
SparseSegmentSum, SparseSegmentMean, SparseSegmentSqrtN, their WithNumSegments
variants, and their gradients SparseSegment{Sum,Mean,SqrtN}Grad and ...GradV2.

Without ``num_segments`` the output has last segment id + 1 rows, so
``segment_ids`` is static (TF's checks on it raise at trace time); with it,
``num_segments`` is static and the ids are data. A Grad op's ``output_dim0`` is
static. A GradV2 op returns one row per distinct index (and the sorted distinct
indices): its ``indices`` are static, since they decide that size, and traced
indices raise ``StaticInputError`` (TF's own gradient graphs compute them from the
forward op's inputs: constant in embedding lookups with known ids).

Out-of-range indices and segment ids (and, with ``num_segments``, unsorted ids),
on which TF's CPU kernels raise, drop their entry, which then does not count
towards the mean or sqrt-n either; ``runtime_checks`` raises like TF.
float16/bfloat16 accumulate in float32, like TF's kernels.

Rules are TF's: the transpose of each reduction is its Grad op (with
``output_dim0`` = the data's rows), the transpose of a Grad op is the
WithNumSegments reduction, and the tangent of a GradV2 op is the Grad op on the
positions of the indices among the distinct ones. Batching moves a batch of data
next to the row axis, or folds the batch into the rows with per-example offsets
of indices and segment ids.
"""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np
from jax.interpreters import ad

from tfprims import dtypes as tfdtypes
from tfprims import rules
from tfprims.core import register_op, tfops
from tfprims.ops.array import _segment_common as C
from tfprims.ops.array._common import FAMILY
from tfprims.ops.array._segment_specs import draw_data, draw_sorted_ids, inner_shape
from tfprims.ops.shared import scalar_int
from tfprims.ops.shared_specs import lazy_hst

_NAMES = {"sum": "Sum", "mean": "Mean", "sqrtn": "SqrtN"}


def _check_vectors(indices, segment_ids_shape):
  if indices.ndim != 1:
    raise ValueError("indices should be a vector.")
  if len(segment_ids_shape) != 1:
    raise ValueError("segment_ids should be a vector.")
  if segment_ids_shape[0] != indices.shape[0]:
    raise ValueError("segment_ids and indices should have same size.")


def _check_data(data, what="input"):
  if data.ndim < 1:
    raise ValueError(f"{what} must be at least rank 1")


# --- the reductions -----------------------------------------------------------------------


def _static_num(segment_ids, indices):
  ids = C.static_ids(segment_ids)
  _check_vectors(indices, ids.shape)
  return ids, C.check_sorted_ids(ids, indices.shape[0], "indices")


def _sparse_impl(kind):
  def impl(data, indices, *, segment_ids):
    _check_data(data)
    ids, num = _static_num(segment_ids, indices)
    return C.sparse_reduce(data, indices, jnp.asarray(C.ids_constant(ids)), num, kind)

  impl.__doc__ = _DOCS[kind] + " Sorted static segment ids; last id + 1 rows."
  return impl


def _num_impl(kind):
  def impl(data, indices, segment_ids, *, num_segments):
    _check_data(data)
    _check_vectors(indices, segment_ids.shape)
    num = scalar_int(num_segments)
    if num < 0:
      raise ValueError(f"num_segments must be non-negative, got {num}")
    return C.sparse_reduce(data, indices, C.drop_invalid(segment_ids, num), num, kind)

  impl.__doc__ = _DOCS[kind] + " ``num_segments`` rows."
  return impl


_DOCS = {
  "sum": "Sums of the rows data[indices[i]] of each segment.",
  "mean": "Means of the rows data[indices[i]] of each segment (empty: 0).",
  "sqrtn": "Sums of the rows data[indices[i]] of each segment divided by the square "
  "root of their count (empty: 0).",
}


def _index_bad(indices, n):
  return jnp.any((indices < 0) | (indices >= n))


def _sparse_check(data, indices, *, segment_ids):
  n = data.shape[0]
  return _index_bad(indices, n), f"Bad: indices out of range [0, {n})"


def _num_check(data, indices, segment_ids, *, num_segments):
  n, num = data.shape[0], scalar_int(num_segments)
  unsorted = jnp.any(segment_ids[1:] < segment_ids[:-1]) if segment_ids.shape[0] > 1 else False
  bad = _index_bad(indices, n) | jnp.any(segment_ids < 0) | jnp.any(segment_ids >= num) | unsorted
  return bad, (
    f"Bad: indices out of range [0, {n}), or segment ids negative, not "
    f"increasing, or not < num_segments = {num}"
  )


def _sparse_transpose(kind):
  def rule(ct, data, indices, *, segment_ids):
    if not rules.U(data):
      return [None, None]
    ids = C.ids_constant(C.static_ids(segment_ids))
    grad = getattr(tfops, f"SparseSegment{_NAMES[kind]}Grad")
    return [grad(ct, indices, ids, output_dim0=rules.shape_of(data)[0]), None]

  return rule


def _num_transpose(kind):
  def rule(ct, data, indices, segment_ids, *, num_segments):
    if not rules.U(data):
      return [None, None, None]
    grad = getattr(tfops, f"SparseSegment{_NAMES[kind]}Grad")
    return [grad(ct, indices, segment_ids, output_dim0=rules.shape_of(data)[0]), None, None]

  return rule


def _sparse_batching(op_type, with_num):
  """Batched data alone goes next to the row axis (and the result's batch axis to
  the front, where the next op's batching rule wants it). Batched indices or segment ids:
  the data's batch is folded into its rows (indices offset by the rows), the ids
  offset by the segments, and the result split back."""

  def rule(args, dims, **params):
    op = getattr(tfops, op_type)
    if with_num:
      (x, i, s), (dx, di, ds) = args, dims
      num = scalar_int(params["num_segments"])
      rest = [i, s]
    else:
      (x, i), (dx, di) = args, dims
      ds = None
      ids = C.static_ids(params["segment_ids"])
      num = int(ids[-1]) + 1 if ids.size else 0
      rest = [i]
    if di is None and ds is None:
      out = op(rules.move_axes(x, [dx], [1]), *rest, **params)
      return rules.move_axes(out, [1], [0]), 0
    size = rules.batch_size(args, dims)
    n = rules.unbatched_shape(x, dx)[0]
    k = rules.unbatched_shape(i, di)[0]
    if dx is None:
      xb, ib = x, rules.with_batch_axis(i, di, size)
    else:
      xb, ib = C.flatten_batch(x, dx, size), C.offset_ids(i, di, size, n, n)
    ib = rules.reshape(ib, (size * k,))
    if with_num:
      sb = rules.reshape(C.offset_ids(s, ds, size, num, num), (size * k,))
      out = op(xb, ib, sb, num_segments=size * num)
    else:
      sb = np.concatenate([ids + b * num for b in range(size)])
      out = op(xb, ib, segment_ids=sb)
    return rules.reshape(out, (size, num) + tuple(out.shape[1:])), 0

  return rule


def _reduction_jvp(op_type, with_num):
  def lin(t, data, indices, *rest, **params):
    return getattr(tfops, op_type)(t, indices, *rest, **params)

  return (lin, None, None) if with_num else (lin, None)


# --- the gradients ------------------------------------------------------------------------


def _grad_impl(kind):
  def impl(grad, indices, segment_ids, *, output_dim0):
    _check_data(grad, "grad")
    _check_vectors(indices, segment_ids.shape)
    n = scalar_int(output_dim0)
    if n < 0:
      raise ValueError(f"output_dim0 must be non-negative, got {n}")
    return C.sparse_grad(grad, indices, segment_ids, n, kind)

  impl.__doc__ = (
    f"The dense gradient of SparseSegment{_NAMES[kind]}: output_dim0 rows, "
    "grad[segment_ids[i]] added to row indices[i]"
    + ("." if kind == "sum" else " (scaled by the segment's count).")
  )
  return impl


def _grad_check(grad, indices, segment_ids, *, output_dim0):
  n, num = scalar_int(output_dim0), grad.shape[0]
  bad = _index_bad(indices, n) | _index_bad(segment_ids, num)
  return bad, f"Index out of range [0, {n}), or segment id out of range [0, {num})"


def _grad_transpose(kind):
  def rule(ct, grad, indices, segment_ids, *, output_dim0):
    if not rules.U(grad):
      return [None, None, None]
    red = getattr(tfops, f"SparseSegment{_NAMES[kind]}WithNumSegments")
    return [red(ct, indices, segment_ids, num_segments=rules.shape_of(grad)[0]), None, None]

  return rule


def _grad_batching(op_type):
  """Batched grad alone goes next to the row axis; otherwise the grad (broadcast if
  needed: the counts are per example) is folded into its rows, and the indices and
  segment ids are offset per example."""

  def rule(args, dims, *, output_dim0):
    (g, i, s), (dg, di, ds) = args, dims
    op = getattr(tfops, op_type)
    n = scalar_int(output_dim0)
    if di is None and ds is None:
      return rules.move_axes(op(rules.move_axes(g, [dg], [1]), i, s, output_dim0=n), [1], [0]), 0
    size = rules.batch_size(args, dims)
    num = rules.unbatched_shape(g, dg)[0]
    k = rules.unbatched_shape(i, di)[0]
    sb = rules.reshape(C.offset_ids(s, ds, size, num, num), (size * k,))
    ib = rules.reshape(C.offset_ids(i, di, size, n, n), (size * k,))
    out = op(C.flatten_batch(g, dg, size), ib, sb, output_dim0=size * n)
    return rules.reshape(out, (size, n) + tuple(out.shape[1:])), 0

  return rule


def _grad_jvp(op_type):
  def lin(t, grad, indices, segment_ids, *, output_dim0):
    return getattr(tfops, op_type)(t, indices, segment_ids, output_dim0=output_dim0)

  return (lin, None, None)


# GradV2: indices static.


def _v2_plan(indices, dense_output_dim0):
  """The static indices: (distinct sorted indices, each index's position among them)."""
  idx = C.static_ids(indices)
  if idx.ndim != 1:
    raise ValueError("indices should be a vector.")
  n = scalar_int(dense_output_dim0)
  bad = idx[(idx < 0) | (idx >= n)]
  if bad.size:
    raise ValueError(f"Index {int(bad[0])} out of range [0, {n}).")
  uniq, pos = np.unique(idx, return_inverse=True)
  return uniq, pos.reshape(-1).astype(np.int32)


def _v2_impl(kind):
  def impl(grad, segment_ids, *, indices, dense_output_dim0, Tidx):
    _check_data(grad, "grad")
    uniq, pos = _v2_plan(indices, dense_output_dim0)
    _check_vectors(pos, segment_ids.shape)
    values = C.sparse_grad(grad, jnp.asarray(pos), segment_ids, uniq.size, kind)
    return values, jnp.asarray(uniq.astype(tfdtypes.canonical_dtype(Tidx)))

  impl.__doc__ = (
    f"The sparse gradient of SparseSegment{_NAMES[kind]}: one row per distinct "
    "index (static indices), and the sorted distinct indices."
  )
  return impl


def _v2_check(grad, segment_ids, *, indices, dense_output_dim0, Tidx):
  num = grad.shape[0]
  return _index_bad(segment_ids, num), f"Segment id out of range [0, {num})"


def _v2_jvp(op_type, grad_type):
  """The values are linear in grad: their tangent is the Grad op on the positions of
  the indices among the distinct ones (TF-named, with its own transpose)."""

  def rule(primals, tangents, **params):
    (grad, segment_ids), (t, _) = primals, tangents
    out = getattr(tfops, op_type)(grad, segment_ids, **params)
    zero_idx = rules.zero_tangent(out[1])
    if type(t) is ad.Zero:
      return out, [rules.zero_tangent(out[0]), zero_idx]
    uniq, pos = _v2_plan(params["indices"], params["dense_output_dim0"])
    tv = getattr(tfops, grad_type)(t, pos, segment_ids, output_dim0=uniq.size)
    return out, [tv, zero_idx]

  return rule


def _v2_batching(op_type):
  def rule(args, dims, *, indices, dense_output_dim0, Tidx):
    (g, s), (dg, ds) = args, dims
    op = getattr(tfops, op_type)
    params = dict(indices=indices, dense_output_dim0=dense_output_dim0, Tidx=Tidx)
    if ds is None:
      values, uniq = op(rules.move_axes(g, [dg], [1]), s, **params)
      return [rules.move_axes(values, [1], [0]), uniq], [0, None]
    size = rules.batch_size(args, dims)
    num = rules.unbatched_shape(g, dg)[0]
    n = scalar_int(dense_output_dim0)
    idx = C.static_ids(indices)
    uniq = np.unique(idx)
    # Each example's indices go to their own range of rows; the distinct indices of
    # the batch are then those of each example, offset, in order.
    sb = rules.reshape(C.offset_ids(s, ds, size, num, num), (size * idx.size,))
    values, _ = op(
      C.flatten_batch(g, dg, size),
      sb,
      indices=np.concatenate([idx + b * n for b in range(size)]),
      dense_output_dim0=size * n,
      Tidx=Tidx,
    )
    values = rules.reshape(values, (size, uniq.size) + tuple(values.shape[1:]))
    return [values, jnp.asarray(uniq.astype(tfdtypes.canonical_dtype(Tidx)))], [0, None]

  return rule


# --- ops ----------------------------------------------------------------------------------

_FLOATS = ("float16", "bfloat16", "float32", "float64")


def _define(kind):
  name = _NAMES[kind]
  dtypes = C.REAL if kind == "sum" else _FLOATS
  red, red_num = f"SparseSegment{name}", f"SparseSegment{name}WithNumSegments"
  grad, grad2 = f"SparseSegment{name}Grad", f"SparseSegment{name}GradV2"
  ops = {}
  ops[red] = register_op(
    red,
    _sparse_impl(kind),
    family=FAMILY,
    static=("segment_ids",),
    check=_sparse_check,
    jvp=_reduction_jvp(red, False),
    transpose=_sparse_transpose(kind),
    batching=_sparse_batching(red, False),
    spec=lambda st: st.Spec(_reduction_calls(st, dtypes, False)),
  )
  ops[red_num] = register_op(
    red_num,
    _num_impl(kind),
    family=FAMILY,
    static=("num_segments",),
    check=_num_check,
    jvp=_reduction_jvp(red_num, True),
    transpose=_num_transpose(kind),
    batching=_sparse_batching(red_num, True),
    spec=lambda st: st.Spec(_reduction_calls(st, dtypes, True)),
  )
  ops[grad] = register_op(
    grad,
    _grad_impl(kind),
    family=FAMILY,
    static=("output_dim0",),
    check=_grad_check,
    jvp=_grad_jvp(grad),
    transpose=_grad_transpose(kind),
    batching=_grad_batching(grad),
    spec=lambda st: st.Spec(_grad_calls(st, "output_dim0")),
  )
  ops[grad2] = register_op(
    grad2,
    _v2_impl(kind),
    family=FAMILY,
    static=("indices", "dense_output_dim0"),
    attrs=("Tidx",),
    multiple_results=True,
    check=_v2_check,
    jvp=_v2_jvp(grad2, grad),
    batching=_v2_batching(grad2),
    spec=lambda st: st.Spec(_grad_calls(st, "dense_output_dim0")),
  )
  return ops


_OPS = {k: v for kind in _NAMES for k, v in _define(kind).items()}
SparseSegmentSum = _OPS["SparseSegmentSum"]
SparseSegmentMean = _OPS["SparseSegmentMean"]
SparseSegmentSqrtN = _OPS["SparseSegmentSqrtN"]
SparseSegmentSumWithNumSegments = _OPS["SparseSegmentSumWithNumSegments"]
SparseSegmentMeanWithNumSegments = _OPS["SparseSegmentMeanWithNumSegments"]
SparseSegmentSqrtNWithNumSegments = _OPS["SparseSegmentSqrtNWithNumSegments"]
SparseSegmentSumGrad = _OPS["SparseSegmentSumGrad"]
SparseSegmentMeanGrad = _OPS["SparseSegmentMeanGrad"]
SparseSegmentSqrtNGrad = _OPS["SparseSegmentSqrtNGrad"]
SparseSegmentSumGradV2 = _OPS["SparseSegmentSumGradV2"]
SparseSegmentMeanGradV2 = _OPS["SparseSegmentMeanGradV2"]
SparseSegmentSqrtNGradV2 = _OPS["SparseSegmentSqrtNGradV2"]


# --- property-test strategies -------------------------------------------------------------


def _reduction_calls(st, dtype_names, with_num):
  hst = lazy_hst()

  @st.composite
  def calls(draw):
    dtype = draw(st.dtypes(dtype_names))
    n = draw(hst.integers(0, 4))
    data = draw_data(draw, st, dtype, (n,) + inner_shape(draw, st))
    # No empty indices with data: TF's gradient (its Grad op) is then uninitialised.
    k = draw(hst.integers(1, 4)) if n else 0
    indices = draw(
      st.arrays(st.dtypes(("int32", "int64")), (k,), min_value=0, max_value=max(n - 1, 0))
    )
    ids = draw_sorted_ids(draw, st, k)
    call = {
      "data": data,
      "indices": indices,
      "segment_ids": ids,
      "sparse_gradient": draw(hst.booleans()),
    }
    if with_num:
      num = (int(ids[-1]) + 1 if k else 0) + draw(hst.integers(0, 2))
      call["num_segments"] = np.asarray(num, draw(st.dtypes(("int32", "int64"))))
    return call

  return calls()


def _grad_calls(st, dim_name):
  hst = lazy_hst()

  @st.composite
  def calls(draw):
    dtype = draw(st.dtypes(_FLOATS))
    # TF's Grad kernels leave their output uninitialised for empty indices
    # (docs/semantics/array.md): at least one entry, so at least one segment.
    num = draw(hst.integers(1, 4))
    grad = draw_data(draw, st, dtype, (num,) + inner_shape(draw, st))
    n = draw(hst.integers(1, 4))
    k = draw(hst.integers(1, 4))
    indices = draw(st.arrays(st.dtypes(("int32", "int64")), (k,), min_value=0, max_value=n - 1))
    ids = draw(st.arrays(st.dtypes(("int32", "int64")), (k,), min_value=0, max_value=num - 1))
    return {"grad": grad, "indices": indices, "segment_ids": ids, dim_name: np.asarray(n, np.int32)}

  return calls()
