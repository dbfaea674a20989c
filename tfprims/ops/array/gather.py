"""Gathering: GatherV2 and OneHot.

GatherV2 writes zeros for out-of-range indices (negative ones included), like
TF's GPU kernel; TF's CPU kernel raises, which a JAX program cannot do on data
(docs/semantics/array.md). Its JVP gathers the tangent with ``tf.GatherV2``; its
transpose is a ``tf.ScatterNd`` (scatter.py) of the cotangent. OneHot with batched
on/off values is batched by ``vmap`` of the impl.
"""

from __future__ import annotations

import functools
import math

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from tfprims import rules
from tfprims.core import register_op, tfops
from tfprims.ops.array._common import FAMILY, norm_axis
from tfprims.ops.shared import scalar_int
from tfprims.ops.shared_specs import INDEX_DTYPES, index_array, lazy_hst
from tfprims.rules import U


def _gather_axes(params_rank, indices_rank, axis, batch_dims) -> tuple[int, int]:
  ax = norm_axis(scalar_int(axis), params_rank)
  bd = int(batch_dims)
  if bd < 0:
    bd += indices_rank
  if not 0 <= bd <= indices_rank:
    raise ValueError(
      f"GatherV2: batch_dims {batch_dims} must be in [{-indices_rank}, {indices_rank}]"
    )
  if bd > ax:
    raise ValueError(f"GatherV2: batch_dims ({bd}) must be less than or equal to axis ({ax})")
  return ax, bd


def _gather_impl(params, indices, *, axis, batch_dims):
  """Out-of-range indices (negative ones included) give zeros: see docs/semantics/array.md."""
  ax, bd = _gather_axes(params.ndim, indices.ndim, axis, batch_dims)
  if tuple(params.shape[:bd]) != tuple(indices.shape[:bd]):
    raise ValueError(
      f"GatherV2: params.shape[:{bd}] {params.shape[:bd]} must equal "
      f"indices.shape[:{bd}] {indices.shape[:bd]}"
    )
  n = params.shape[ax]
  out_shape = params.shape[:ax] + indices.shape[bd:] + params.shape[ax + 1 :]
  if n == 0 or math.prod(out_shape) == 0:
    return jnp.zeros(out_shape, params.dtype)
  valid = (indices >= 0) & (indices < n)
  safe = jnp.where(valid, indices, jnp.zeros((), indices.dtype))

  def take(p, i, axis):
    return jnp.take(p, i, axis=axis, mode="clip")

  f = functools.partial(take, axis=ax - bd)
  for _ in range(bd):
    f = jax.vmap(f)
  out = f(params, safe)
  mask = jnp.reshape(
    valid,
    indices.shape[:bd] + (1,) * (ax - bd) + indices.shape[bd:] + (1,) * (params.ndim - ax - 1),
  )
  return jnp.where(mask, out, jnp.zeros((), out.dtype))


def _coordinates(shape, d, dtype):
  """``shape + (1,)``, holding each element's coordinate along dim ``d``: a constant, or
  a ``tf.Range`` of the program broadcast where a dim is symbolic (a shape-polymorphic
  jax.export)."""
  column = (1,) * d + (shape[d],) + (1,) * (len(shape) - d)
  if rules.known(shape):
    return np.ascontiguousarray(
      np.broadcast_to(np.arange(shape[d], dtype=dtype).reshape(column), shape + (1,))
    )
  iota = tfops.Range(start=0, limit=shape[d], delta=1, Tidx=np.dtype(dtype))
  return rules.broadcast_to(rules.reshape(iota, column), shape + (1,))


def _gather_transpose(ct, params, indices, *, axis, batch_dims):
  """The scatter-add of the cotangent into zeros of params' shape, as ``tf.ScatterNd``
  (which drops the out-of-range indices the gather zeroed): params laid out as
  ``batch + [n] + rest``, each index prefixed with its batch coordinates."""
  if not U(params):
    return [None, None]
  pshape = rules.shape_of(params)
  ishape = rules.shape_of(indices)
  ax, bd = _gather_axes(len(pshape), len(ishape), axis, batch_dims)
  ct = rules.instantiate(ct)
  nj = len(ishape) - bd  # index dims after the batch dims
  mid = list(range(bd, ax))  # params dims between the batch dims and axis
  jdims = list(range(ax, ax + nj))  # where the index dims sit in ct
  tail = list(range(ax + nj, len(rules.shape_of(ct))))
  ct = rules.transpose(ct, list(range(bd)) + jdims + mid + tail)
  idx = tfops.ExpandDims(indices, axis=-1)
  if bd:
    dt = rules.dtype_of(indices)
    coords = [_coordinates(ishape, d, dt) for d in range(bd)]
    idx = tfops.ConcatV2(*coords, idx, axis=len(ishape))
  layout = pshape[:bd] + (pshape[ax],) + pshape[bd:ax] + pshape[ax + 1 :]
  out = tfops.ScatterNd(idx, ct, shape=layout, bad_indices_policy="")
  # layout dims: batch, n, mid, rest -> params' order: batch, mid, n, rest
  order = (
    list(range(bd))
    + [bd + 1 + k for k in range(len(mid))]
    + [bd]
    + list(range(bd + 1 + len(mid), len(pshape)))
  )
  return [rules.transpose(out, order), None]


def _gather_batch(args, dims, *, axis, batch_dims):
  (p, i), (dp, di) = args, dims
  p_rank = p.ndim - (dp is not None)
  i_rank = i.ndim - (di is not None)
  ax, bd = _gather_axes(p_rank, i_rank, axis, batch_dims)
  if bd == 0 and di is None:
    return tfops.GatherV2(rules.to_front(p, dp), i, axis=ax + 1, batch_dims=0), 0
  if bd == 0 and dp is None:
    return tfops.GatherV2(p, rules.to_front(i, di), axis=ax, batch_dims=0), ax
  size = rules.batch_size(args, dims)
  return tfops.GatherV2(
    rules.with_batch_axis(p, dp, size),
    rules.with_batch_axis(i, di, size),
    axis=ax + 1,
    batch_dims=bd + 1,
  ), 0


def _gather_check(params, indices, *, axis, batch_dims):
  """TF's CPU kernel rejects indices outside [0, params.shape[axis])."""
  ax, _ = _gather_axes(params.ndim, indices.ndim, axis, batch_dims)
  n = params.shape[ax]
  if indices.size == 0:
    return None
  return jnp.any((indices < 0) | (indices >= n)), f"indices[i] = ... is not in [0, {n})"


GatherV2 = register_op(
  "GatherV2",
  _gather_impl,
  family=FAMILY,
  static=("axis",),
  attrs=("batch_dims",),
  check=_gather_check,
  jvp=(
    lambda t, p, i, *, axis, batch_dims: tfops.GatherV2(t, i, axis=axis, batch_dims=batch_dims),
    None,
  ),
  transpose=_gather_transpose,
  batching=_gather_batch,
  spec=lambda st: st.Spec(_gather_calls(st)),
)


def _one_hot_axis(axis, rank) -> int:
  if axis == -1:
    return rank
  if not 0 <= axis <= rank:
    raise ValueError(f"OneHot: expected axis to be -1 or between [0, {rank}], got {axis}")
  return axis


def _one_hot_impl(indices, on_value, off_value, *, depth, axis):
  (depth,) = rules.sizes(depth)  # a symbolic dim of a jax.export too (one-hot of the batch)
  if rules.known((depth,)) and depth < 0:
    raise ValueError(f"OneHot: depth must be non-negative, got {depth}")
  ax = _one_hot_axis(axis, indices.ndim)
  wide = jnp.int64 if indices.dtype == np.dtype("int64") else jnp.int32
  iota = lax.broadcasted_iota(wide, (1,) * indices.ndim + (depth,), indices.ndim)
  hot = indices.astype(wide)[..., None] == iota
  out = jnp.where(hot, on_value, off_value)
  return jnp.moveaxis(out, -1, ax) if ax != indices.ndim else out


def _one_hot_batch(args, dims, *, depth, axis):
  (i, on, off), (di, don, doff) = args, dims
  if don is not None or doff is not None:
    return rules.vmap_batching(_one_hot_impl, False)(args, dims, depth=depth, axis=axis)
  ax = _one_hot_axis(axis, i.ndim - 1)
  new_axis = -1 if axis == -1 else ax + 1
  return tfops.OneHot(rules.to_front(i, di), on, off, depth=depth, axis=new_axis), 0


OneHot = register_op(
  "OneHot",
  _one_hot_impl,
  family=FAMILY,
  static=("depth",),
  attrs=("axis",),
  batching=_one_hot_batch,
  spec=lambda st: st.Spec(
    _one_hot_calls(st),
    skip={
      "jvp": "TF registers no gradient for OneHot",
      "vjp": "TF registers no gradient for OneHot",
    },
  ),
)


# --- property-test strategies (hypothesis is imported lazily) ---------------------


def _gather_calls(st):
  hst = lazy_hst()

  @st.composite
  def calls(draw):
    params = draw(st.arrays(st.dtypes(st.ALL), st.shapes(min_rank=1, max_rank=3)))
    axis = draw(hst.integers(0, params.ndim - 1))
    batch_dims = draw(hst.integers(0, axis))
    extra = draw(st.shapes(max_rank=2, max_side=3))
    ishape = params.shape[:batch_dims] + tuple(extra)
    n = params.shape[axis]
    if n == 0:
      ishape = ishape[:batch_dims] + ((0,) if ishape[batch_dims:] else (0,))
      extra = ishape[batch_dims:]
    # int16 indices only without batch_dims: TF's own GatherV2 gradient fails on them.
    itypes = ("int16", "int32", "int64") if batch_dims == 0 else INDEX_DTYPES
    indices = draw(st.arrays(st.dtypes(itypes), ishape, min_value=0, max_value=max(n - 1, 0)))
    if draw(hst.booleans()):
      axis -= params.ndim
    if batch_dims and draw(hst.booleans()):
      batch_dims -= indices.ndim
    return {
      "params": params,
      "indices": indices,
      "axis": index_array(draw, st, axis),
      "batch_dims": batch_dims,
    }

  return calls()


def _one_hot_calls(st):
  hst = lazy_hst()

  @st.composite
  def calls(draw):
    depth = draw(hst.integers(0, 4))
    itype = draw(st.dtypes(("uint8", "int8", "int32", "int64")))
    lo = 0 if np.dtype(itype).kind == "u" else -2
    indices = draw(st.arrays(itype, st.shapes(max_rank=3), min_value=lo, max_value=depth + 1))
    dtype = draw(st.dtypes(st.ALL))
    return {
      "indices": indices,
      "depth": np.int32(depth),
      "on_value": draw(st.arrays(dtype, ())),
      "off_value": draw(st.arrays(dtype, ())),
      "axis": draw(hst.integers(-1, indices.ndim)),
    }

  return calls()
