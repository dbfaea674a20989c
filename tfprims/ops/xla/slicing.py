"""XlaDynamicSlice, XlaDynamicUpdateSlice, XlaPad and XlaBroadcastHelper.

Dynamic slices clamp their start indices into range as XLA does (``lax.dynamic_slice``
and ``lax.dynamic_update_slice`` clamp the same way), so they never fail on data.
Their derivatives are each other (the transpose of a dynamic slice is a dynamic
update of zeros); batched data with shared start indices is batched by a leading
start index of 0, batched start indices by ``vmap`` of the impl (lax's gather and
scatter). XlaPad's transpose is a negative ``tf.XlaPad`` and a strided slice, and
the padding value's cotangent what the padding received.
"""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np
from jax import lax
from jax.interpreters import ad

from tfprims import rules
from tfprims.core import register_op, tfops
from tfprims.ops.xla import _common
from tfprims.ops.xla._common import FAMILY, INDEX_DTYPES
from tfprims.rules import U


def _starts(indices, shape, sizes):
  """XLA's start indices, clamped into ``[0, dim - size]`` here: lax's own dynamic
  slices wrap negative indices (as numpy) before clamping, XLA does not."""
  return [
    jnp.clip(indices[i], 0, max(d - s, 0)).astype(indices.dtype)
    for i, (d, s) in enumerate(zip(shape, sizes))
  ]


def _with_leading_zero(indices):
  """The start indices of a batched operand: 0 for the batch axis, then ``indices``."""
  return tfops.ConcatV2(np.zeros((1,), rules.dtype_of(indices)), indices, axis=0)


def _instantiate_tangent(t, like):
  if type(t) is ad.Zero:
    return rules.zeros(rules.shape_of(like), rules.dtype_of(like))
  return t


# --- XlaDynamicSlice --------------------------------------------------------------------


def _dynamic_slice_impl(input, start_indices, *, size_indices):
  """``lax.dynamic_slice``: start indices are clamped to ``[0, dim - size]``."""
  return lax.dynamic_slice(
    input, _starts(start_indices, input.shape, size_indices), tuple(size_indices)
  )


def _dynamic_slice_transpose(ct, x, start_indices, *, size_indices):
  zeros = rules.zeros(rules.shape_of(x), rules.dtype_of(x))
  return [tfops.XlaDynamicUpdateSlice(zeros, rules.instantiate(ct), start_indices), None]


def _dynamic_slice_batch(args, dims, *, size_indices):
  (x, idx), (dx, di) = args, dims
  if di is not None:  # per-example starts: lax's batched dynamic slice is a gather
    return rules.vmap_batching(_dynamic_slice_impl, False)(args, dims, size_indices=size_indices)
  size = (rules.shape_of(x)[dx],) + tuple(size_indices)
  return tfops.XlaDynamicSlice(rules.to_front(x, dx), _with_leading_zero(idx), size_indices=size), 0


def _size_canonicalize(params, *operands):
  return dict(params, size_indices=tuple(int(v) for v in np.ravel(params["size_indices"])))


def _dynamic_slice_calls(st):
  @st.composite
  def calls(draw):
    dtype = draw(st.dtypes(st.ALL))
    shape = tuple(draw(st.shapes(max_rank=3)))
    idx = st.np_dtype(draw(st.sampled_from(INDEX_DTYPES)))
    size = [draw(st.integers(0, s)) for s in shape]
    starts = [draw(st.integers(-2, s + 1)) for s in shape]  # out of range: clamped
    return dict(
      input=st.draw_array(draw, dtype, shape),
      start_indices=np.array(starts, idx).reshape(len(shape)),
      size_indices=np.array(size, idx).reshape(len(shape)),
    )

  return calls()


XlaDynamicSlice = register_op(
  "XlaDynamicSlice",
  _dynamic_slice_impl,
  family=FAMILY,
  static=("size_indices",),
  canonicalize=_size_canonicalize,
  jvp=(
    lambda t, x, i, *, size_indices: tfops.XlaDynamicSlice(t, i, size_indices=size_indices),
    None,
  ),
  transpose=_dynamic_slice_transpose,
  batching=_dynamic_slice_batch,
  spec=rules.per_op(
    lambda op: (
      lambda st: st.Spec(
        _dynamic_slice_calls(st),
        oracle=_common.jit_oracle(op.op_type, ("input", "start_indices")),
        grad_oracle="fd",
        note="oracle: the op under tf.function(jit_compile=True); "
        "derivatives against central differences (TF registers no gradient)",
      )
    )
  ),
)


# --- XlaDynamicUpdateSlice ----------------------------------------------------------------


def _dynamic_update_slice_impl(input, update, indices):
  """``lax.dynamic_update_slice``: start indices are clamped to ``[0, dim - size]``."""
  return lax.dynamic_update_slice(
    input, update.astype(input.dtype), _starts(indices, input.shape, update.shape)
  )


def _dynamic_update_slice_jvp(primals, tangents):
  x, u, idx = primals
  tx, tu, _ = tangents
  out = tfops.XlaDynamicUpdateSlice(x, u, idx)
  if type(tx) is ad.Zero and type(tu) is ad.Zero:
    return out, rules.zero_tangent(out)
  return out, tfops.XlaDynamicUpdateSlice(
    _instantiate_tangent(tx, x), _instantiate_tangent(tu, u), idx
  )


def _dynamic_update_slice_transpose(ct, x, u, idx):
  ct = rules.instantiate(ct)
  ushape = rules.shape_of(u)
  cx = cu = None
  if U(x):
    cx = tfops.XlaDynamicUpdateSlice(ct, rules.zeros(ushape, rules.dtype_of(u)), idx)
  if U(u):
    cu = tfops.XlaDynamicSlice(ct, idx, size_indices=ushape)
  return [cx, cu, None]


def _dynamic_update_slice_batch(args, dims):
  (x, u, idx), (dx, du, di) = args, dims
  if di is not None:  # per-example starts: lax's batched update is a scatter
    return rules.vmap_batching(_dynamic_update_slice_impl, False)(args, dims)
  size = rules.batch_size(args, dims)
  return tfops.XlaDynamicUpdateSlice(
    rules.with_batch_axis(x, dx, size), rules.with_batch_axis(u, du, size), _with_leading_zero(idx)
  ), 0


def _dynamic_update_slice_calls(st):
  @st.composite
  def calls(draw):
    dtype = draw(st.dtypes(st.ALL))
    shape = tuple(draw(st.shapes(max_rank=3)))
    idx = st.np_dtype(draw(st.sampled_from(INDEX_DTYPES)))
    ushape = tuple(draw(st.integers(0, s)) for s in shape)
    starts = [draw(st.integers(-2, s + 1)) for s in shape]
    return dict(
      input=st.draw_array(draw, dtype, shape),
      update=st.draw_array(draw, dtype, ushape),
      indices=np.array(starts, idx).reshape(len(shape)),
    )

  return calls()


XlaDynamicUpdateSlice = register_op(
  "XlaDynamicUpdateSlice",
  _dynamic_update_slice_impl,
  family=FAMILY,
  jvp=_dynamic_update_slice_jvp,
  transpose=_dynamic_update_slice_transpose,
  batching=_dynamic_update_slice_batch,
  spec=rules.per_op(
    lambda op: (
      lambda st: st.Spec(
        _dynamic_update_slice_calls(st),
        oracle=_common.jit_oracle(op.op_type, ("input", "update", "indices")),
        grad_oracle="fd",
        note="oracle: the op under tf.function(jit_compile=True); "
        "derivatives against central differences (TF registers no gradient)",
      )
    )
  ),
)


# --- XlaPad -------------------------------------------------------------------------------


def _pad_impl(input, padding_value, *, padding_low, padding_high, padding_interior):
  """``lax.pad``: negative low/high padding crops."""
  config = list(zip(padding_low, padding_high, padding_interior))
  return lax.pad(input, padding_value.astype(input.dtype), config)


def _pad_params(params):
  return {k: params[k] for k in ("padding_low", "padding_high", "padding_interior")}


def _pad_jvp(primals, tangents, **params):
  x, pv = primals
  tx, tpv = tangents
  out = tfops.XlaPad(x, pv, **params)
  if type(tx) is ad.Zero and type(tpv) is ad.Zero:
    return out, rules.zero_tangent(out)
  return out, tfops.XlaPad(_instantiate_tangent(tx, x), _instantiate_tangent(tpv, pv), **params)


def _pad_transpose(ct, x, pv, *, padding_low, padding_high, padding_interior):
  ct = rules.instantiate(ct)
  rank = len(padding_low)
  cx = None
  if U(x) or U(pv):
    unpadded = tfops.XlaPad(
      ct,
      np.zeros((), rules.dtype_of(ct)),
      padding_low=tuple(-v for v in padding_low),
      padding_high=tuple(-v for v in padding_high),
      padding_interior=(0,) * rank,
    )
    if any(padding_interior):
      unpadded = tfops.StridedSlice(
        unpadded,
        begin=(0,) * rank,
        end=rules.shape_of(unpadded),
        strides=tuple(v + 1 for v in padding_interior),
        begin_mask=0,
        end_mask=0,
        ellipsis_mask=0,
        new_axis_mask=0,
        shrink_axis_mask=0,
      )
    cx = unpadded
  cpv = None
  if U(pv):
    axes = tuple(range(rank))
    cpv = tfops.Sub(rules.reduce_sum(ct, axes), rules.reduce_sum(cx, axes))
  return [cx if U(x) else None, cpv]


def _pad_batch(args, dims, *, padding_low, padding_high, padding_interior):
  (x, pv), (dx, dpv) = args, dims
  if dpv is not None:  # a padding value per example: lax's batched pad (a select)
    return rules.vmap_batching(_pad_impl, False)(
      args,
      dims,
      padding_low=padding_low,
      padding_high=padding_high,
      padding_interior=padding_interior,
    )
  return tfops.XlaPad(
    rules.to_front(x, dx),
    pv,
    padding_low=(0,) + padding_low,
    padding_high=(0,) + padding_high,
    padding_interior=(0,) + padding_interior,
  ), 0


def _pad_canonicalize(params, *operands):
  return {k: tuple(int(v) for v in np.ravel(params[k])) for k in params}


def _pad_calls(st):
  @st.composite
  def calls(draw):
    dtype = draw(st.dtypes(st.ALL))
    shape = tuple(draw(st.shapes(max_rank=3, max_side=3)))
    idx = st.np_dtype(draw(st.sampled_from(INDEX_DTYPES)))
    low, high, interior = [], [], []
    for s in shape:
      inner = draw(st.integers(0, 2))
      full = s + max(s - 1, 0) * inner
      lo = draw(st.integers(-min(full, 2), 2))
      hi = draw(st.integers(-min(full + min(lo, 0), 2), 2))
      low.append(lo)
      high.append(hi)
      interior.append(inner)
    rank = len(shape)
    return dict(
      input=st.draw_array(draw, dtype, shape),
      padding_value=st.draw_array(draw, dtype, ()),
      padding_low=np.array(low, idx).reshape(rank),
      padding_high=np.array(high, idx).reshape(rank),
      padding_interior=np.array(interior, idx).reshape(rank),
    )

  return calls()


XlaPad = register_op(
  "XlaPad",
  _pad_impl,
  family=FAMILY,
  static=("padding_low", "padding_high", "padding_interior"),
  canonicalize=_pad_canonicalize,
  jvp=_pad_jvp,
  transpose=_pad_transpose,
  batching=_pad_batch,
  spec=rules.per_op(
    lambda op: (
      lambda st: st.Spec(
        _pad_calls(st),
        oracle=_common.jit_oracle(op.op_type, ("input", "padding_value")),
        grad_oracle="fd",
        note="oracle: the op under tf.function(jit_compile=True); "
        "derivatives against central differences (TF registers no gradient)",
      )
    )
  ),
)


# --- XlaBroadcastHelper ---------------------------------------------------------------------


def _broadcast_shape(small_shape, big_rank, broadcast_dims):
  shape = [1] * big_rank
  for i, d in enumerate(broadcast_dims):
    shape[d] = small_shape[i]
  return tuple(shape)


def _broadcast_helper_impl(lhs, rhs, *, broadcast_dims):
  """The lower-rank operand reshaped to the other's rank: its dim ``i`` at
  ``broadcast_dims[i]`` (increasing), size-1 dims elsewhere; equal ranks or a scalar:
  unchanged."""
  if lhs.ndim == rhs.ndim or not broadcast_dims:  # as TF's kernel: nothing to do
    return lhs, rhs
  if lhs.ndim < rhs.ndim:
    return lhs.reshape(_broadcast_shape(lhs.shape, rhs.ndim, broadcast_dims)), rhs
  return lhs, rhs.reshape(_broadcast_shape(rhs.shape, lhs.ndim, broadcast_dims))


def _broadcast_helper_jvp(primals, tangents, *, broadcast_dims):
  lhs, rhs = primals
  outs = tfops.XlaBroadcastHelper(lhs, rhs, broadcast_dims=broadcast_dims)
  ts = [
    rules.zero_tangent(o) if type(t) is ad.Zero else rules.reshape(t, rules.shape_of(o))
    for t, o in zip(tangents, outs)
  ]
  return outs, ts


def _broadcast_helper_batch(args, dims, *, broadcast_dims):
  (lhs, rhs), (dl, dr) = args, dims
  if not broadcast_dims or np.ndim(lhs) - (dl is not None) == np.ndim(rhs) - (dr is not None):
    return [lhs, rhs], [dl, dr]  # the identity
  size = rules.batch_size(args, dims)
  lhs, rhs = rules.with_batch_axis(lhs, dl, size), rules.with_batch_axis(rhs, dr, size)
  dims = (0,) + tuple(d + 1 for d in broadcast_dims)
  return tfops.XlaBroadcastHelper(lhs, rhs, broadcast_dims=dims), [0, 0]


def _broadcast_helper_calls(st):
  @st.composite
  def calls(draw):
    dtype = draw(st.dtypes(st.NUMERIC + st.COMPLEX))
    big = tuple(draw(st.shapes(max_rank=3)))
    k = draw(st.integers(0, len(big)))
    bdims = sorted(draw(st.permutations(range(len(big))))[:k])
    small = tuple(big[d] for d in bdims)
    idx = st.np_dtype(draw(st.sampled_from(INDEX_DTYPES)))
    a, b = st.draw_array(draw, dtype, big), st.draw_array(draw, dtype, small)
    if draw(st.booleans()):
      a, b = b, a
    return dict(lhs=a, rhs=b, broadcast_dims=np.array(bdims, idx).reshape(k))

  return calls()


XlaBroadcastHelper = register_op(
  "XlaBroadcastHelper",
  _broadcast_helper_impl,
  family=FAMILY,
  multiple_results=True,
  static=("broadcast_dims",),
  canonicalize=lambda p, *o: dict(
    p, broadcast_dims=tuple(int(v) for v in np.ravel(p["broadcast_dims"]))
  ),
  jvp=_broadcast_helper_jvp,
  batching=_broadcast_helper_batch,
  spec=rules.per_op(
    lambda op: (
      lambda st: st.Spec(
        _broadcast_helper_calls(st),
        oracle=_common.jit_oracle(op.op_type, ("lhs", "rhs")),
        grad_oracle="fd",
        note="oracle: the op under tf.function(jit_compile=True); "
        "derivatives against central differences (TF registers no gradient)",
      )
    )
  ),
)
