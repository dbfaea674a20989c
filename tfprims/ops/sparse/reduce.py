"""SparseReduceSum and SparseReduceMax: a dense reduction of a sparse tensor over
``reduction_axes`` (``tf.sparse.reduce_sum`` / ``reduce_max``), and their sparse-output
forms SparseReduceSumSparse / SparseReduceMaxSparse (``output_is_sparse=True``): one
entry per distinct kept coordinate in row-major order, a data-dependent count, so
their indices are static (layout computed with numpy, values segment-reduced).

``input_shape`` and ``reduction_axes`` are static. Sum: duplicate indices add up,
implicit zeros add nothing. Max: TF reduces the entries given, not the implicit
zeros; an output position no entry reaches is 0. Its kernel folds each group in
index order with ``t < acc ? acc : t``: a NaN counts only when nothing follows it
(``[nan, 0]`` gives 0, ``[0, nan]`` NaN); tfprims folds the same way. Entries
outside ``input_shape`` (TF raises) are dropped; ``runtime_checks`` raises like TF.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from tfprims import rules
from tfprims.core import register_op, tfops
from tfprims.ops.shared import ints
from tfprims.ops.shared_specs import lazy_hst
from tfprims.ops.sparse._common import (
  FAMILY,
  check_indices,
  draw_sparse,
  index_dtype,
  static_indices,
  static_outputs,
  static_shape,
)


def _axes(reduction_axes, rank):
  axes = ints(reduction_axes)
  for a in axes:
    if not -rank <= a < rank:
      raise ValueError(f"Invalid reduction dimension {a}, for input with {rank} dimensions.")
  return tuple(sorted({a % rank for a in axes}))


def _flat_targets(input_indices, shape, axes):
  """Each entry's position in the (flattened) output and the output's shape."""
  keep = [d for d in range(len(shape)) if d not in axes]
  out_shape = tuple(shape[d] for d in keep)
  pos = jnp.zeros(input_indices.shape[:1], input_indices.dtype)
  inside = jnp.ones(input_indices.shape[:1], bool)
  for d in range(len(shape)):
    inside &= (input_indices[:, d] >= 0) & (input_indices[:, d] < shape[d])
  for d in keep:
    pos = pos * shape[d] + input_indices[:, d]
  size = int(np.prod(out_shape))
  return jnp.where(inside, pos, size), size, out_shape


def _reduction_order(input_indices, rank, axes):
  """Each entry's position in TF's reduction order: the kept dims, then the reduced
  ones (its kernel's Reorder), stable."""
  n = input_indices.shape[0]
  if n == 0:
    return jnp.zeros((0,), np.int32)
  dims = [d for d in range(rank) if d not in axes] + list(axes)
  keys = [input_indices[:, d] for d in dims]
  perm = lax.sort(keys + [jnp.arange(n, dtype=np.int32)], num_keys=len(keys), is_stable=True)[-1]
  return jnp.zeros((n,), np.int32).at[perm].set(jnp.arange(n, dtype=np.int32))


def fold_max(values, order, group, num):
  """TF's max of each group, folded in ``order`` as its kernel does
  (``acc = t < acc ? acc : t`` from -inf): a NaN replaces the running max and the
  next value replaces a NaN, so a group is the max of what follows its last NaN (NaN
  when nothing does). Groups without entries get the dtype's lowest value."""
  if not jnp.issubdtype(values.dtype, jnp.floating):
    return jax.ops.segment_max(values, group, num_segments=num)
  nan = jnp.isnan(values)
  last_nan = jax.ops.segment_max(jnp.where(nan, order, -1), group, num_segments=num)
  after = order > jnp.take(last_nan, group, mode="fill", fill_value=-1)
  out = jax.ops.segment_max(jnp.where(after, values, -jnp.inf), group, num_segments=num)
  any_after = jax.ops.segment_max(after.astype(np.int32), group, num_segments=num) > 0
  return jnp.where((last_nan >= 0) & ~any_after, jnp.array(np.nan, values.dtype), out)


def _reduce_impl(kind):
  def impl(input_indices, input_values, *, input_shape, reduction_axes, keep_dims):
    shape = static_shape(input_shape, "input_shape")
    axes = _axes(reduction_axes, len(shape))
    pos, size, out_shape = _flat_targets(input_indices, shape, axes)
    dt = input_values.dtype
    if kind == "sum":
      out = jnp.zeros((size,), dt).at[pos].add(input_values, mode="drop")
    else:
      order = _reduction_order(input_indices, len(shape), axes)
      out = fold_max(input_values, order, pos, size)
      hit = jnp.zeros((size,), bool).at[pos].set(True, mode="drop")
      out = jnp.where(hit, out, jnp.zeros((), dt))
    if keep_dims:
      out_shape = tuple(1 if d in axes else s for d, s in enumerate(shape))
    return out.reshape(out_shape)

  impl.__doc__ = f"The dense {kind} of a sparse tensor over reduction_axes."
  return impl


def _sum_transpose(ct, input_indices, *, input_shape, reduction_axes, keep_dims):
  """Each entry's cotangent: the output cotangent at its position (GatherNd)."""
  shape = static_shape(input_shape, "input_shape")
  axes = _axes(reduction_axes, len(shape))
  keep = tuple(d for d in range(len(shape)) if d not in axes)
  ct = rules.reshape(rules.instantiate(ct), tuple(shape[d] for d in keep))
  where = tfops.GatherV2(input_indices, np.asarray(keep, np.int32), axis=1, batch_dims=0)
  return tfops.GatherNd(ct, where, bad_indices_policy="")


def _check(input_indices, input_values, *, input_shape, reduction_axes, keep_dims):
  return check_indices(input_indices, static_shape(input_shape))


# TF's fold order: a NaN followed by a value gives the value, a NaN last gives NaN.
_NAN_ORDER = (
  {
    "input_indices": np.array([[0], [0], [1], [1]], np.int64),
    "input_values": np.float32([np.nan, 0, 0, np.nan]),
    "input_shape": np.array([2], np.int64),
    "reduction_axes": np.zeros((0,), np.int32),
    "keep_dims": False,
  },
)


def _spec(dtypes, cases=()):
  def spec(st):
    hst = lazy_hst()

    @st.composite
    def calls(draw):
      dtype = draw(st.dtypes(dtypes))
      idx, vals, shape = draw_sparse(draw, st, dtype)
      rank = len(shape)
      axes = draw(hst.lists(hst.integers(-rank, rank - 1), max_size=rank))
      return {
        "input_indices": idx,
        "input_values": vals,
        "input_shape": shape,
        "reduction_axes": np.asarray(axes, np.int32),
        "keep_dims": draw(hst.booleans()),
      }

    return st.Spec(calls(), diff_args=("input_values",), vmap_variation="scale", cases=cases)

  return spec


SparseReduceSum = register_op(
  "SparseReduceSum",
  _reduce_impl("sum"),
  family=FAMILY,
  static=("input_shape", "reduction_axes"),
  attrs=("keep_dims",),
  check=_check,
  jvp=(None, lambda t, i, v, **p: SparseReduceSum(i, t, **p)),
  transpose=lambda ct, i, v, **p: [None, _sum_transpose(ct, i, **p)],
  spec=_spec(("float32", "float64", "int32", "int64", "complex64")),
)

SparseReduceMax = register_op(
  "SparseReduceMax",
  _reduce_impl("max"),
  family=FAMILY,
  static=("input_shape", "reduction_axes"),
  attrs=("keep_dims",),
  check=_check,
  spec=_spec(("float32", "float64", "int32", "int64"), _NAN_ORDER),
)


# --- the Sparse-output forms ------------------------------------------------------------------


def sparse_reduce_layout(input_indices, input_shape, reduction_axes, keep_dims):
  """SparseReduce*Sparse's layout (numpy): the output indices (the entries' distinct
  kept coordinates, row-major), each entry's output position and the output shape."""
  shape = static_shape(input_shape, "input_shape")
  axes = _axes(reduction_axes, len(shape))
  keep = [d for d in range(len(shape)) if d not in axes]
  idx = static_indices(input_indices, len(shape))
  n = idx.shape[0]
  if n == 0:
    groups, gid = np.zeros((0, len(keep)), np.int64), np.zeros((0,), np.int64)
  elif not keep:
    groups, gid = np.zeros((1, 0), np.int64), np.zeros((n,), np.int64)
  else:
    groups, gid = np.unique(idx[:, keep], axis=0, return_inverse=True)
  if keep_dims:
    full = np.zeros((groups.shape[0], len(shape)), np.int64)
    full[:, keep] = groups
    groups = full
    out_shape = [1 if d in axes else s for d, s in enumerate(shape)]
  else:
    out_shape = [shape[d] for d in keep]
  return groups.astype(np.int64), np.asarray(gid).reshape(-1), np.asarray(out_shape, np.int64)


def _sparse_reduce_impl(kind):
  def impl(input_values, *, input_indices, input_shape, reduction_axes, keep_dims):
    groups, gid, out_shape = sparse_reduce_layout(
      input_indices, input_shape, reduction_axes, keep_dims
    )
    gid_ = jnp.asarray(gid.astype(np.int32))
    if kind == "sum":
      values = jax.ops.segment_sum(input_values, gid_, num_segments=len(groups))
    else:
      shape = static_shape(input_shape, "input_shape")
      axes = _axes(reduction_axes, len(shape))
      idx = static_indices(input_indices, len(shape))
      dims = [d for d in range(len(shape)) if d not in axes] + list(axes)
      perm = (
        np.lexsort([idx[:, d] for d in reversed(dims)]) if len(idx) else np.zeros((0,), np.int64)
      )
      order = np.zeros(len(idx), np.int32)
      order[perm] = np.arange(len(idx))
      values = fold_max(input_values, jnp.asarray(order), gid_, len(groups))
    dt = index_dtype()
    return jnp.asarray(groups.astype(dt)), values, jnp.asarray(out_shape.astype(dt))

  impl.__doc__ = (
    f"The {kind} of a sparse tensor over reduction_axes, as a sparse tensor "
    "(one entry per distinct kept coordinate, row-major)."
  )
  return impl


def _sparse_known(*, input_indices, input_shape, reduction_axes, keep_dims):
  groups, _, out_shape = sparse_reduce_layout(input_indices, input_shape, reduction_axes, keep_dims)
  return {0: groups, 2: out_shape}


def _define_sparse(kind, dtypes, cases=()):
  name = f"SparseReduce{kind.capitalize()}Sparse"
  return register_op(
    name,
    _sparse_reduce_impl(kind),
    family=FAMILY,
    multiple_results=True,
    static=("input_indices", "input_shape", "reduction_axes"),
    attrs=("keep_dims",),
    interpret=static_outputs(_sparse_known),
    spec=_spec(dtypes, cases),
    doc=f"The {kind} over reduction_axes as a sparse tensor (static indices).",
  )


SparseReduceSumSparse = _define_sparse("sum", ("float32", "float64", "int32", "complex64"))
SparseReduceMaxSparse = _define_sparse("max", ("float32", "float64", "int32"), _NAN_ORDER)
