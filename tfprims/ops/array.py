"""Array ops: reshaping, joining and splitting, slicing, padding, gathering,
selection, shape queries, identities, scans.

Shape-deciding inputs (shapes, axes, begin/end/size, paddings, multiples...)
are static: they arrive as params. The data-movement ops are linear, with
transposes written with TF ops (Slice <-> Pad, StridedSlice <-> StridedSliceGrad,
ConcatV2 -> SplitV, Pack <-> Unpack, Tile/BroadcastTo -> Sum + Reshape...), and
their batching rules re-bind TF ops with adjusted params, so grad and vmap
jaxprs keep TF names. Choices where TF raises at run time (GatherV2 out-of-range
indices, CheckNumerics) are documented in docs/semantics/array.md.
"""

from __future__ import annotations

import functools
import math
from typing import NamedTuple, Sequence

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax
from jax.interpreters import ad

from tfprims import dtypes as tfdtypes, errors
from tfprims import core, rules
from tfprims.core import define_op, get_op

U = ad.is_undefined_primal
FAMILY = "array"

# ---------------------------------------------------------------------------
# Helpers
# ---------------------------------------------------------------------------


def _shape(x) -> tuple:
  return tuple(x.aval.shape) if U(x) else tuple(jnp.shape(x))


def _ints(value) -> tuple:
  """A static param (scalar or nested tuple) as a flat tuple of Python ints."""
  return tuple(int(v) for v in np.asarray(value, dtype=np.int64).reshape(-1))


def _int(value) -> int:
  flat = _ints(value)
  if len(flat) != 1:
    raise ValueError(f"expected a scalar, got {value!r}")
  return flat[0]


def _norm_axis(axis: int, rank: int, what: str = "axis") -> int:
  axis = int(axis)
  if not -rank <= axis < rank:
    raise ValueError(f"{what} {axis} is out of range for a tensor of rank {rank} "
                     f"(expected [{-rank}, {rank}))")
  return axis + rank if axis < 0 else axis


def _batch_size(args, dims) -> int:
  for a, d in zip(args, dims):
    if d is not None:
      return a.shape[d]
  raise ValueError("no batched operand")


def _moved(x, d):
  """``x`` with its batch axis ``d`` moved to the front (by a tf.Transpose)."""
  if d is None or d == 0:
    return x
  perm = (d,) + tuple(i for i in range(x.ndim) if i != d)
  return Transpose(x, perm=perm)


def _batched(x, d, size: int):
  """``x`` with a leading batch axis: moved there, or broadcast when unbatched."""
  if d is None:
    return BroadcastTo(x, shape=(size,) + tuple(jnp.shape(x)))
  return _moved(x, d)


def _per_example_shape(x, d) -> tuple:
  shape = tuple(jnp.shape(x))
  return shape if d is None else shape[:d] + shape[d + 1:]


def _sum(x, axes: Sequence[int], keep_dims: bool = False):
  """A sum over ``axes`` with tf.Sum when the reductions family registered it."""
  axes = tuple(int(a) for a in axes)
  if not axes:
    return x
  return rules.reduce_sum(x, axes, keep_dims)


def _unbroadcast(x, shape):
  """Sums ``x`` down to ``shape`` with tf.Sum + tf.Reshape (transpose of broadcasting)."""
  shape = tuple(shape)
  if tuple(x.shape) == shape:
    return x
  lead = x.ndim - len(shape)
  axes = tuple(range(lead)) + tuple(
      lead + i for i, n in enumerate(shape) if n == 1 and x.shape[lead + i] != 1)
  out = _sum(x, axes)
  return out if tuple(out.shape) == shape else Reshape(out, shape=shape)


def _instantiate(cts):
  """Cotangents with symbolic zeros made concrete by a tf.Fill (keeps TF names)."""
  return [_instantiate1(ct) for ct in cts]


def _instantiate1(ct):
  if type(ct) is ad.Zero:
    return Fill(np.zeros((), ct.aval.dtype), shape=tuple(ct.aval.shape))
  return ct


def _no_batch_rule(op_name):
  def rule(args, dims, **params):
    raise NotImplementedError(f"{op_name} has no operands to batch")
  return rule


def _generic_vmap(impl, multiple_results=False):
  def rule(args, dims, **params):
    out = jax.vmap(functools.partial(impl, **params), in_axes=tuple(dims), out_axes=0)(*args)
    return (list(out), [0] * len(out)) if multiple_results else (out, 0)
  return rule


def _passthrough_batching(prim_getter):
  """Batching for shape-preserving unary ops: re-bind, keep the batch axis where it is."""
  def rule(args, dims, **params):
    op = prim_getter()
    out = op(*args, **params)
    if op.multiple_results:
      return list(out), list(dims)
    return out, dims[0]
  return rule


# ---------------------------------------------------------------------------
# Reshape, Transpose, ExpandDims, Squeeze
# ---------------------------------------------------------------------------


def _resolve_shape(in_shape, shape) -> tuple:
  """TF Reshape's target shape with its -1 resolved (errors as TF's kernel)."""
  shape = _ints(shape)
  in_shape = tuple(int(d) for d in in_shape)
  size = math.prod(in_shape)
  unknown, product, has_zero = None, 1, False
  for i, s in enumerate(shape):
    if s == -1:
      if unknown is not None:
        raise ValueError(f"Reshape: only one input size may be -1, not both {unknown} and {i}")
      unknown = i
    elif s < 0:
      raise ValueError(f"Reshape: size {i} must be non-negative, not {s}")
    elif s == 0:
      has_zero = True
    else:
      product *= s
  out = list(shape)
  if unknown is not None:
    known_in = math.prod(d for d in in_shape if d > 0 or not has_zero)
    missing = known_in // product
    if product * missing != known_in:
      raise ValueError(f"Reshape: input to reshape is a tensor with {size} values, but the "
                       f"requested shape requires a multiple of {product}")
    out[unknown] = missing
  if math.prod(out) != size:
    raise ValueError(f"Reshape: input to reshape is a tensor with {size} values, but the "
                     f"requested shape {tuple(out)} has {math.prod(out)}")
  return tuple(out)


def _static_shape(shape):
  """A shape param: ints resolved by TF rules; symbolic dims (shape polymorphism) kept."""
  flat = shape if isinstance(shape, tuple) else (shape,)
  return all(isinstance(s, (int, np.integer)) for s in flat)


def _reshape_impl(tensor, *, shape):
  if not _static_shape(shape):
    return jnp.reshape(tensor, shape)
  return jnp.reshape(tensor, _resolve_shape(tensor.shape, shape))


def _reshape_batch(args, dims, *, shape):
  (x,), (d,) = args, dims
  target = _resolve_shape(_per_example_shape(x, d), shape) if _static_shape(shape) else shape
  return Reshape(_moved(x, d), shape=(x.shape[d],) + tuple(target)), 0


def _reshape_shape(tensor, *, shape):
  if not _static_shape(shape):
    return None
  return jax.ShapeDtypeStruct(tuple(_resolve_shape(tensor.shape, shape)), tensor.dtype)


Reshape = define_op(
    "Reshape", _reshape_impl, family=FAMILY, static=("shape",), linear=True,
    shape_rule=_reshape_shape,
    transpose=lambda ct, x, *, shape: [Reshape(ct, shape=_shape(x))],
    batching=_reshape_batch,
    spec=lambda st: st.Spec(_reshape_calls(st)))


def _perm(perm, rank) -> tuple:
  perm = _ints(perm)
  if len(perm) != rank:
    raise ValueError(f"Transpose: perm {perm} has {len(perm)} entries for a tensor of rank {rank}")
  perm = tuple(_norm_axis(p, rank, "perm entry") for p in perm)
  if sorted(perm) != list(range(rank)):
    raise ValueError(f"Transpose: {perm} is not a permutation of 0..{rank - 1}")
  return perm


def _transpose_impl(x, *, perm):
  return jnp.transpose(x, _perm(perm, x.ndim))


def _transpose_transpose(ct, x, *, perm):
  perm = _perm(perm, len(_shape(x)))
  return [Transpose(ct, perm=tuple(int(i) for i in np.argsort(perm)))]


def _transpose_batch(args, dims, *, perm):
  (x,), (d,) = args, dims
  perm = _perm(perm, x.ndim - 1)
  return Transpose(x, perm=(d,) + tuple(p + (p >= d) for p in perm)), 0


Transpose = define_op(
    "Transpose", _transpose_impl, family=FAMILY, static=("perm",), linear=True,
    transpose=_transpose_transpose, batching=_transpose_batch,
    spec=lambda st: st.Spec(_transpose_calls(st)))


def _expand_axis(axis, rank) -> int:
  axis = _int(axis)
  if not -rank - 1 <= axis <= rank:
    raise ValueError(f"ExpandDims: axis {axis} is out of range [{-rank - 1}, {rank}]")
  return axis + rank + 1 if axis < 0 else axis


def _expand_dims_impl(input, *, axis):
  return jnp.expand_dims(input, _expand_axis(axis, input.ndim))


def _expand_dims_batch(args, dims, *, axis):
  (x,), (d,) = args, dims
  return ExpandDims(_moved(x, d), axis=_expand_axis(axis, x.ndim - 1) + 1), 0


ExpandDims = define_op(
    "ExpandDims", _expand_dims_impl, family=FAMILY, static={"dim": "axis"}, linear=True,
    transpose=lambda ct, x, *, axis: [
        Squeeze(ct, squeeze_dims=(_expand_axis(axis, len(_shape(x))),))],
    batching=_expand_dims_batch,
    spec=lambda st: st.Spec(_expand_dims_calls(st)))


def _squeeze_axes(shape, squeeze_dims) -> tuple:
  rank = len(shape)
  if not squeeze_dims:
    return tuple(i for i, n in enumerate(shape) if n == 1)
  axes = tuple(sorted({_norm_axis(a, rank, "squeeze dim") for a in _ints(squeeze_dims)}))
  for a in axes:
    if shape[a] != 1:
      raise ValueError(f"Squeeze: can not squeeze dim[{a}], expected a dimension of 1, "
                       f"got {shape[a]}")
  return axes


def _squeeze_impl(input, *, squeeze_dims):
  return jnp.squeeze(input, _squeeze_axes(input.shape, squeeze_dims))


def _squeeze_batch(args, dims, *, squeeze_dims):
  (x,), (d,) = args, dims
  axes = _squeeze_axes(_per_example_shape(x, d), squeeze_dims)
  return Squeeze(_moved(x, d), squeeze_dims=tuple(a + 1 for a in axes)), 0


Squeeze = define_op(
    "Squeeze", _squeeze_impl, family=FAMILY, attrs=("squeeze_dims",), linear=True,
    transpose=lambda ct, x, *, squeeze_dims: [Reshape(ct, shape=_shape(x))],
    batching=_squeeze_batch,
    spec=lambda st: st.Spec(_squeeze_calls(st)))


# ---------------------------------------------------------------------------
# Joining and splitting: ConcatV2, Pack, Unpack, Split, SplitV
# ---------------------------------------------------------------------------


def _concat_impl(*values, axis):
  rank = values[0].ndim
  if rank == 0:
    raise ValueError("ConcatV2: can't concatenate scalars (use tf.stack instead)")
  return jnp.concatenate(values, axis=_norm_axis(_int(axis), rank))


def _concat_transpose(ct, *values, axis):
  shapes = [_shape(v) for v in values]
  ax = _norm_axis(_int(axis), len(shapes[0]))
  sizes = tuple(s[ax] for s in shapes)
  parts = SplitV(ct, size_splits=sizes, axis=ax, num_split=len(sizes)) if len(sizes) > 1 else [ct]
  return [p if U(v) else None for p, v in zip(parts, values)]


def _concat_batch(args, dims, *, axis):
  size = _batch_size(args, dims)
  rank = len(_per_example_shape(args[0], dims[0]))
  ax = _norm_axis(_int(axis), rank)
  values = [_batched(a, d, size) for a, d in zip(args, dims)]
  return ConcatV2(*values, axis=ax + 1), 0


def _concat_shape(*values, axis):
  rank = len(values[0].shape)
  if rank == 0 or len({(v.dtype, len(v.shape)) for v in values}) != 1:
    return None  # the impl raises the error
  ax = _norm_axis(_int(axis), rank)
  shape = list(values[0].shape)
  if any(tuple(v.shape[:ax]) + tuple(v.shape[ax + 1:]) != tuple(shape[:ax] + shape[ax + 1:])
         for v in values):
    return None
  shape[ax] = sum(v.shape[ax] for v in values)
  return jax.ShapeDtypeStruct(tuple(shape), values[0].dtype)


ConcatV2 = define_op(
    "ConcatV2", _concat_impl, family=FAMILY, static=("axis",), linear=True,
    shape_rule=_concat_shape,
    transpose=_concat_transpose, batching=_concat_batch,
    spec=lambda st: st.Spec(_concat_calls(st)))


def _pack_impl(*values, axis):
  return jnp.stack(values, axis=_norm_axis(axis, values[0].ndim + 1))


def _pack_transpose(ct, *values, axis):
  ax = _norm_axis(axis, len(_shape(values[0])) + 1)
  parts = Unpack(ct, num=len(values), axis=ax)
  return [p if U(v) else None for p, v in zip(parts, values)]


def _pack_batch(args, dims, *, axis):
  size = _batch_size(args, dims)
  ax = _norm_axis(axis, len(_per_example_shape(args[0], dims[0])) + 1)
  return Pack(*[_batched(a, d, size) for a, d in zip(args, dims)], axis=ax + 1), 0


Pack = define_op(
    "Pack", _pack_impl, family=FAMILY, attrs=("axis",), linear=True,
    transpose=_pack_transpose, batching=_pack_batch,
    spec=lambda st: st.Spec(_pack_calls(st)))


def _unpack_impl(value, *, num, axis):
  ax = _norm_axis(axis, value.ndim)
  if value.shape[ax] != num:
    raise ValueError(f"Unpack: input dimension {ax} has size {value.shape[ax]}, not num={num}")
  return tuple(lax.index_in_dim(value, i, ax, keepdims=False) for i in range(num))


def _unpack_transpose(cts, x, *, num, axis):
  return [Pack(*_instantiate(cts), axis=_norm_axis(axis, len(_shape(x))))]


def _unpack_batch(args, dims, *, num, axis):
  (x,), (d,) = args, dims
  ax = _norm_axis(axis, x.ndim - 1)
  return list(Unpack(_moved(x, d), num=num, axis=ax + 1)), [0] * num


Unpack = define_op(
    "Unpack", _unpack_impl, family=FAMILY, attrs=("num", "axis"), multiple_results=True,
    linear=True, transpose=_unpack_transpose, batching=_unpack_batch,
    spec=lambda st: st.Spec(_unpack_calls(st)))


def _split_impl(value, *, axis, num_split):
  ax = _norm_axis(_int(axis), value.ndim)
  n = value.shape[ax]
  if num_split <= 0 or n % num_split:
    raise ValueError(f"Split: number of ways to split should evenly divide the split "
                     f"dimension, but got split_dim {ax} (size = {n}) and num_split {num_split}")
  k = n // num_split
  return tuple(lax.slice_in_dim(value, i * k, (i + 1) * k, axis=ax) for i in range(num_split))


def _split_transpose(cts, x, *, axis, num_split):
  if num_split == 1:
    return [_instantiate1(cts[0])]
  return [ConcatV2(*_instantiate(cts), axis=_norm_axis(_int(axis), len(_shape(x))))]


def _split_batch(args, dims, *, axis, num_split):
  (x,), (d,) = args, dims
  ax = _norm_axis(_int(axis), x.ndim - 1)
  return list(Split(_moved(x, d), axis=ax + 1, num_split=num_split)), [0] * num_split


Split = define_op(
    "Split", _split_impl, family=FAMILY, static={"split_dim": "axis"}, attrs=("num_split",),
    multiple_results=True, linear=True, transpose=_split_transpose, batching=_split_batch,
    spec=lambda st: st.Spec(_split_calls(st)))


def _split_sizes(size_splits, n: int, num_split: int) -> tuple:
  sizes = list(_ints(size_splits))
  if len(sizes) != num_split:
    raise ValueError(f"SplitV: size_splits has {len(sizes)} entries, num_split is {num_split}")
  unknown = [i for i, s in enumerate(sizes) if s == -1]
  if len(unknown) > 1:
    raise ValueError("SplitV: there can only be one -1 in size_splits")
  if any(s < -1 for s in sizes):
    raise ValueError(f"SplitV: size_splits must be >= -1, got {tuple(sizes)}")
  known = sum(s for s in sizes if s != -1)
  if unknown:
    if known > n:
      raise ValueError(f"SplitV: size_splits {tuple(sizes)} exceed the dimension size {n}")
    sizes[unknown[0]] = n - known
  elif known != n:
    raise ValueError(f"SplitV: determined shape must either match input shape along "
                     f"split_dim exactly if fully specified, or be less than the size of the "
                     f"input along split_dim if not fully specified. Got: {known} vs {n}")
  return tuple(sizes)


def _splitv_impl(value, *, size_splits, axis, num_split):
  ax = _norm_axis(_int(axis), value.ndim)
  sizes = _split_sizes(size_splits, value.shape[ax], num_split)
  offsets = np.cumsum((0,) + sizes)
  return tuple(lax.slice_in_dim(value, int(offsets[i]), int(offsets[i + 1]), axis=ax)
               for i in range(num_split))


def _splitv_transpose(cts, x, *, size_splits, axis, num_split):
  if num_split == 1:
    return [_instantiate1(cts[0])]
  return [ConcatV2(*_instantiate(cts), axis=_norm_axis(_int(axis), len(_shape(x))))]


def _splitv_batch(args, dims, *, size_splits, axis, num_split):
  (x,), (d,) = args, dims
  ax = _norm_axis(_int(axis), x.ndim - 1)
  out = SplitV(_moved(x, d), size_splits=size_splits, axis=ax + 1, num_split=num_split)
  return list(out), [0] * num_split


SplitV = define_op(
    "SplitV", _splitv_impl, family=FAMILY, static={"size_splits": "size_splits",
                                                   "split_dim": "axis"},
    attrs=("num_split",), multiple_results=True, linear=True, transpose=_splitv_transpose,
    batching=_splitv_batch,
    spec=lambda st: st.Spec(_splitv_calls(st)))


# ---------------------------------------------------------------------------
# Slice, StridedSlice, StridedSliceGrad
# ---------------------------------------------------------------------------


def _slice_bounds(shape, begin, size) -> tuple[tuple, tuple]:
  begin, size = _ints(begin), _ints(size)
  if len(begin) != len(shape) or len(size) != len(shape):
    raise ValueError(f"Slice: expected begin and size of length {len(shape)}, got "
                     f"{begin} and {size}")
  sizes = []
  for b, s, n in zip(begin, size, shape):
    s = n - b if s == -1 else s
    if not (0 <= b <= n and 0 <= s and b + s <= n):
      raise ValueError(f"Slice: expected begin {begin} and size {size} to be within the "
                       f"input shape {tuple(shape)}")
    sizes.append(s)
  return begin, tuple(sizes)


def _slice_impl(input, *, begin, size):
  b, s = _slice_bounds(input.shape, begin, size)
  return lax.slice(input, b, tuple(i + j for i, j in zip(b, s)))


def _slice_transpose(ct, x, *, begin, size):
  shape = _shape(x)
  b, s = _slice_bounds(shape, begin, size)
  return [Pad(ct, paddings=tuple((i, n - i - j) for i, j, n in zip(b, s, shape)))]


def _slice_batch(args, dims, *, begin, size):
  (x,), (d,) = args, dims
  return Slice(_moved(x, d), begin=(0,) + _ints(begin), size=(-1,) + _ints(size)), 0


Slice = define_op(
    "Slice", _slice_impl, family=FAMILY, static=("begin", "size"), linear=True,
    transpose=_slice_transpose, batching=_slice_batch,
    spec=lambda st: st.Spec(_slice_calls(st)))


class StridedPlan(NamedTuple):
  """A StridedSlice spec made dense against an input shape.

  ``dims[i] = (first, count, step)``: input dim ``i`` contributes elements
  ``first, first + step, ...`` (``count`` of them); ``final_shape`` is the
  output shape after new axes are added and shrunk axes removed.
  """
  dims: tuple
  final_shape: tuple


_NEW_AXIS, _SHRINK = -1, -2


def strided_slice_plan(shape, begin, end, strides, begin_mask=0, end_mask=0, ellipsis_mask=0,
                       new_axis_mask=0, shrink_axis_mask=0) -> StridedPlan:
  """TF's ValidateStridedSliceOp (strided_slice_op.cc), for static shapes and specs."""
  begin, end, strides = _ints(begin), _ints(end), _ints(strides)
  if not len(begin) == len(end) == len(strides):
    raise ValueError(f"StridedSlice: begin {begin}, end {end} and strides {strides} must "
                     "have the same length")
  if ellipsis_mask & (ellipsis_mask - 1):
    raise ValueError("StridedSlice: multiple ellipses in slice spec not allowed")
  rank = len(shape)
  sparse_dims = len(begin)
  ellipsis_seen, add_after_ellipsis = False, 0
  for i in range(sparse_dims):
    if ellipsis_seen and (new_axis_mask >> i) & 1:
      add_after_ellipsis += 1
    if (ellipsis_mask >> i) & 1:
      ellipsis_seen = True
  if not ellipsis_seen:
    ellipsis_mask |= 1 << sparse_dims
    sparse_dims += 1

  # Sparse -> dense spec.
  d_begin, d_end, d_strides = [0] * rank, [0] * rank, [1] * rank
  d_bmask = d_emask = d_shrink = 0
  gather = []
  full = 0
  for i in range(sparse_dims):
    bit = 1 << i
    if ellipsis_mask & bit:
      nxt = min(rank - (sparse_dims - i) + 1 + add_after_ellipsis, rank)
      while full < nxt:
        d_begin[full] = d_end[full] = 0
        d_strides[full] = 1
        d_bmask |= 1 << full
        d_emask |= 1 << full
        gather.append(full)
        full += 1
    elif new_axis_mask & bit:
      gather.append(_NEW_AXIS)
    else:
      if full == rank:
        raise ValueError(f"StridedSlice: index out of range using input dim {full}; input "
                         f"has only {rank} dims")
      d_begin[full], d_end[full], d_strides[full] = begin[i], end[i], strides[i]
      if begin_mask & bit:
        d_bmask |= 1 << full
      if end_mask & bit:
        d_emask |= 1 << full
      if shrink_axis_mask & bit:
        gather.append(_SHRINK)
        d_shrink |= 1 << full
      else:
        gather.append(full)
      full += 1

  plan, processing = [], []
  for i in range(rank):
    b, e, s, n = d_begin[i], d_end[i], d_strides[i], int(shape[i])
    if s == 0:
      raise ValueError(f"StridedSlice: strides[{i}] must be non-zero")
    shrink = (d_shrink >> i) & 1
    masks = ((d_bmask >> i) & 1, (d_emask >> i) & 1)
    valid = (0, n) if s > 0 else (-1, n - 1)

    def canonical(x, c, s=s, n=n, masks=masks, valid=valid):
      if masks[c]:
        return valid[c] if s > 0 else valid[(c + 1) & 1]
      x = x + n if x < 0 else x
      return min(max(x, valid[0]), valid[1])

    if shrink and s <= 0:
      raise ValueError("StridedSlice: only stride 1 allowed on non-range indexing")
    if shrink:
      x = b + n if b < 0 else b
      if not 0 <= x < n:
        raise ValueError(f"StridedSlice: slice index {b} of dimension {i} out of bounds")
      b, e = x, x + 1
    else:
      b, e = canonical(b, 0), canonical(e, 1)
    length = e - b
    if length == 0 or (length < 0) != (s < 0):
      count = 0
    else:
      count = length // s + (1 if length % s else 0)
    plan.append((b, count, s))
    processing.append(count)
  final = []
  for g in gather:
    if g >= 0:
      final.append(processing[g])
    elif g == _NEW_AXIS:
      final.append(1)
  return StridedPlan(tuple(plan), tuple(final))


_MASKS = ("begin_mask", "end_mask", "ellipsis_mask", "new_axis_mask", "shrink_axis_mask")


def _plan_for(shape, params) -> StridedPlan:
  return strided_slice_plan(shape, params["begin"], params["end"], params["strides"],
                            *(params[m] for m in _MASKS))


def _apply_plan(x, plan: StridedPlan):
  flip = tuple(i for i, (_, c, s) in enumerate(plan.dims) if s < 0 and c > 0)
  if flip:
    x = lax.rev(x, flip)
  starts, limits, steps = [], [], []
  for i, (first, count, step) in enumerate(plan.dims):
    n = x.shape[i]
    if count == 0:
      starts.append(0), limits.append(0), steps.append(1)
      continue
    if step < 0:
      first, step = n - 1 - first, -step
    starts.append(first)
    limits.append(first + (count - 1) * step + 1)
    steps.append(step)
  x = lax.slice(x, tuple(starts), tuple(limits), tuple(steps))
  return jnp.reshape(x, plan.final_shape)


def _scatter_plan(dy, shape, plan: StridedPlan):
  """The transpose of :func:`_apply_plan`: ``dy`` placed into zeros of ``shape``."""
  dy = jnp.reshape(dy, tuple(c for _, c, _ in plan.dims))
  config, flip = [], []
  for i, (first, count, step) in enumerate(plan.dims):
    n = int(shape[i])
    if count == 0:
      config.append((n, 0, 0))
      continue
    if step < 0:
      first, step = n - 1 - first, -step
      flip.append(i)
    last = first + (count - 1) * step
    config.append((first, n - 1 - last, step - 1))
  out = lax.pad(dy, jnp.zeros((), dy.dtype), config)
  return lax.rev(out, tuple(flip)) if flip else out


def _strided_slice_impl(input, **params):
  return _apply_plan(input, _plan_for(input.shape, params))


def _strided_slice_transpose(ct, x, **params):
  return [StridedSliceGrad(ct, shape=_shape(x), **params)]


def _shift_spec(params):
  """The spec with a full-range entry for a leading batch axis prepended."""
  new = dict(params)
  new["begin"] = (0,) + _ints(params["begin"])
  new["end"] = (0,) + _ints(params["end"])
  new["strides"] = (1,) + _ints(params["strides"])
  for m in _MASKS:
    new[m] = params[m] << 1
  new["begin_mask"] |= 1
  new["end_mask"] |= 1
  return new


def _strided_slice_batch(args, dims, **params):
  (x,), (d,) = args, dims
  return StridedSlice(_moved(x, d), **_shift_spec(params)), 0


StridedSlice = define_op(
    "StridedSlice", _strided_slice_impl, family=FAMILY, static=("begin", "end", "strides"),
    attrs=_MASKS, linear=True, transpose=_strided_slice_transpose,
    batching=_strided_slice_batch,
    spec=lambda st: st.Spec(_strided_slice_calls(st)))


def _strided_slice_grad_impl(dy, *, shape, **params):
  shape = _ints(shape)
  plan = _plan_for(shape, params)
  if tuple(dy.shape) != plan.final_shape:
    raise ValueError(f"StridedSliceGrad: dy has shape {tuple(dy.shape)}, the slice of "
                     f"{shape} has shape {plan.final_shape}")
  return _scatter_plan(dy, shape, plan)


def _strided_slice_grad_batch(args, dims, *, shape, **params):
  (dy,), (d,) = args, dims
  size = dy.shape[d]
  return StridedSliceGrad(_moved(dy, d), shape=(size,) + _ints(shape),
                          **_shift_spec(params)), 0


StridedSliceGrad = define_op(
    "StridedSliceGrad", _strided_slice_grad_impl, family=FAMILY,
    static=("shape", "begin", "end", "strides"), attrs=_MASKS, linear=True,
    transpose=lambda ct, dy, *, shape, **params: [StridedSlice(ct, **params)],
    batching=_strided_slice_grad_batch,
    spec=lambda st: st.Spec(_strided_slice_grad_calls(st)))


# ---------------------------------------------------------------------------
# Tile, BroadcastTo, Pad, PadV2, MirrorPad
# ---------------------------------------------------------------------------


def _multiples(multiples, rank) -> tuple:
  m = _ints(multiples)
  if len(m) != rank:
    raise ValueError(f"Tile: expected multiples argument to be a vector of length {rank} but "
                     f"got length {len(m)}")
  if any(k < 0 for k in m):
    raise ValueError(f"Tile: expected multiples to be non-negative, got {m}")
  return m


def _tile_impl(input, *, multiples):
  return jnp.tile(input, _multiples(multiples, input.ndim))


def _tile_transpose(ct, x, *, multiples):
  shape = _shape(x)
  m = _multiples(multiples, len(shape))
  split = tuple(v for k, n in zip(m, shape) for v in (k, n))
  summed = _sum(Reshape(ct, shape=split), tuple(range(0, 2 * len(shape), 2)))
  return [summed if tuple(summed.shape) == shape else Reshape(summed, shape=shape)]


def _tile_batch(args, dims, *, multiples):
  (x,), (d,) = args, dims
  return Tile(_moved(x, d), multiples=(1,) + _ints(multiples)), 0


Tile = define_op(
    "Tile", _tile_impl, family=FAMILY, static=("multiples",), linear=True,
    transpose=_tile_transpose, batching=_tile_batch,
    spec=lambda st: st.Spec(_tile_calls(st)))


def _broadcast_to_impl(input, *, shape):
  shape = _ints(shape)
  if input.ndim > len(shape):
    raise ValueError(f"BroadcastTo: rank of input ({input.ndim}) must be no greater than rank "
                     f"of output shape ({len(shape)})")
  return jnp.broadcast_to(input, shape)


def _broadcast_to_batch(args, dims, *, shape):
  (x,), (d,) = args, dims
  shape = _ints(shape)
  x = _moved(x, d)
  size, inner = x.shape[0], tuple(x.shape[1:])
  if len(inner) < len(shape):
    x = Reshape(x, shape=(size,) + (1,) * (len(shape) - len(inner)) + inner)
  return BroadcastTo(x, shape=(size,) + shape), 0


BroadcastTo = define_op(
    "BroadcastTo", _broadcast_to_impl, family=FAMILY, static=("shape",), linear=True,
    transpose=lambda ct, x, *, shape: [_unbroadcast(ct, _shape(x))],
    batching=_broadcast_to_batch,
    spec=lambda st: st.Spec(_broadcast_to_calls(st)))


def _paddings(paddings, rank) -> tuple:
  p = np.asarray(paddings, dtype=np.int64).reshape(-1)
  if p.size != 2 * rank:
    raise ValueError(f"Pad: the first dimension of paddings must be the rank of inputs "
                     f"({rank}), got paddings {paddings}")
  p = tuple((int(a), int(b)) for a, b in p.reshape(rank, 2))
  if any(a < 0 or b < 0 for a, b in p):
    raise ValueError(f"Pad: paddings must be non-negative, got {p}")
  return p


def _pad_impl(input, *, paddings):
  p = _paddings(paddings, input.ndim)
  return lax.pad(input, jnp.zeros((), input.dtype), [(a, b, 0) for a, b in p])


def _pad_transpose(ct, x, *, paddings):
  shape = _shape(x)
  p = _paddings(paddings, len(shape))
  return [Slice(ct, begin=tuple(a for a, _ in p), size=shape)]


def _pad_batch(args, dims, *, paddings):
  (x,), (d,) = args, dims
  return Pad(_moved(x, d), paddings=((0, 0),) + _paddings(paddings, x.ndim - 1)), 0


Pad = define_op(
    "Pad", _pad_impl, family=FAMILY, static=("paddings",), linear=True,
    transpose=_pad_transpose, batching=_pad_batch,
    spec=lambda st: st.Spec(_pad_calls(st, "Pad")))


def _padv2_impl(input, constant_values, *, paddings):
  p = _paddings(paddings, input.ndim)
  if jnp.ndim(constant_values) != 0:
    raise ValueError("PadV2: constant_values must be a scalar")
  return lax.pad(input, jnp.asarray(constant_values, input.dtype), [(a, b, 0) for a, b in p])


def _padv2_transpose(ct, x, c, *, paddings):
  shape = _shape(x)
  p = _paddings(paddings, len(shape))
  inner = Slice(ct, begin=tuple(a for a, _ in p), size=shape)
  ct_x = inner if U(x) else None
  ct_c = None
  if U(c):
    axes = tuple(range(len(shape)))
    ct_c = _sum(ct, axes) - _sum(inner, axes) if axes else jnp.zeros_like(ct)
  return [ct_x, ct_c]


def _padv2_batch(args, dims, *, paddings):
  (x, c), (dx, dc) = args, dims
  if dc is not None:
    return _generic_vmap(_padv2_impl)(args, dims, paddings=paddings)
  rank = x.ndim - 1
  return PadV2(_moved(x, dx), c, paddings=((0, 0),) + _paddings(paddings, rank)), 0


PadV2 = define_op(
    "PadV2", _padv2_impl, family=FAMILY, static=("paddings",), linear=True,
    transpose=_padv2_transpose, batching=_padv2_batch,
    spec=lambda st: st.Spec(_pad_calls(st, "PadV2"), diff_args=("input",),
                            note="TF's gradient ignores constant_values; ours is the sum of "
                                 "the padded cotangent"))


def _mirror_pad_impl(input, *, paddings, mode):
  p = _paddings(paddings, input.ndim)
  offset = {"REFLECT": 1, "SYMMETRIC": 0}[mode]
  for i, (a, b) in enumerate(p):
    if a > input.shape[i] - offset or b > input.shape[i] - offset:
      bound = "less than" if offset else "no greater than"
      raise ValueError(f"MirrorPad: paddings must be {bound} the dimension size: {a}, {b} "
                       f"vs {input.shape[i]} ({mode})")
  if not any(a or b for a, b in p):
    return input
  return jnp.pad(input, p, mode=mode.lower())


def _mirror_pad_batch(args, dims, *, paddings, mode):
  (x,), (d,) = args, dims
  return MirrorPad(_moved(x, d), paddings=((0, 0),) + _paddings(paddings, x.ndim - 1),
                   mode=mode), 0


MirrorPad = define_op(
    "MirrorPad", _mirror_pad_impl, family=FAMILY, static=("paddings",), attrs=("mode",),
    batching=_mirror_pad_batch,
    spec=lambda st: st.Spec(_pad_calls(st, "MirrorPad")))


# ---------------------------------------------------------------------------
# GatherV2, OneHot
# ---------------------------------------------------------------------------


def _gather_axes(params_rank, indices_rank, axis, batch_dims) -> tuple[int, int]:
  ax = _norm_axis(_int(axis), params_rank)
  bd = int(batch_dims)
  if bd < 0:
    bd += indices_rank
  if not 0 <= bd <= indices_rank:
    raise ValueError(f"GatherV2: batch_dims {batch_dims} must be in [{-indices_rank}, "
                     f"{indices_rank}]")
  if bd > ax:
    raise ValueError(f"GatherV2: batch_dims ({bd}) must be less than or equal to axis ({ax})")
  return ax, bd


def _gather_impl(params, indices, *, axis, batch_dims):
  """Out-of-range indices (negative ones included) give zeros: see docs/semantics/array.md."""
  ax, bd = _gather_axes(params.ndim, indices.ndim, axis, batch_dims)
  if tuple(params.shape[:bd]) != tuple(indices.shape[:bd]):
    raise ValueError(f"GatherV2: params.shape[:{bd}] {params.shape[:bd]} must equal "
                     f"indices.shape[:{bd}] {indices.shape[:bd]}")
  n = params.shape[ax]
  out_shape = params.shape[:ax] + indices.shape[bd:] + params.shape[ax + 1:]
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
  mask = jnp.reshape(valid, indices.shape[:bd] + (1,) * (ax - bd) + indices.shape[bd:]
                     + (1,) * (params.ndim - ax - 1))
  return jnp.where(mask, out, jnp.zeros((), out.dtype))


def _gather_transpose(ct, params, indices, *, axis, batch_dims):
  if not U(params):
    return [None, None]
  aval = jax.ShapeDtypeStruct(params.aval.shape, params.aval.dtype)
  f = jax.linear_transpose(
      lambda p: _gather_impl(p, indices, axis=axis, batch_dims=batch_dims), aval)
  return [f(ct)[0], None]


def _gather_batch(args, dims, *, axis, batch_dims):
  (p, i), (dp, di) = args, dims
  p_rank = p.ndim - (dp is not None)
  i_rank = i.ndim - (di is not None)
  ax, bd = _gather_axes(p_rank, i_rank, axis, batch_dims)
  if bd == 0 and di is None:
    return GatherV2(_moved(p, dp), i, axis=ax + 1, batch_dims=0), 0
  if bd == 0 and dp is None:
    return GatherV2(p, _moved(i, di), axis=ax, batch_dims=0), ax
  size = _batch_size(args, dims)
  return GatherV2(_batched(p, dp, size), _batched(i, di, size), axis=ax + 1,
                  batch_dims=bd + 1), 0


GatherV2 = define_op(
    "GatherV2", _gather_impl, family=FAMILY, static=("axis",), attrs=("batch_dims",),
    jvp=(lambda t, p, i, *, axis, batch_dims: GatherV2(t, i, axis=axis, batch_dims=batch_dims),
         None),
    transpose=_gather_transpose, batching=_gather_batch,
    spec=lambda st: st.Spec(_gather_calls(st)))


def _one_hot_axis(axis, rank) -> int:
  if axis == -1:
    return rank
  if not 0 <= axis <= rank:
    raise ValueError(f"OneHot: expected axis to be -1 or between [0, {rank}], got {axis}")
  return axis


def _one_hot_impl(indices, on_value, off_value, *, depth, axis):
  depth = _int(depth)
  if depth < 0:
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
    return _generic_vmap(_one_hot_impl)(args, dims, depth=depth, axis=axis)
  ax = _one_hot_axis(axis, i.ndim - 1)
  new_axis = -1 if axis == -1 else ax + 1
  return OneHot(_moved(i, di), on, off, depth=depth, axis=new_axis), 0


OneHot = define_op(
    "OneHot", _one_hot_impl, family=FAMILY, static=("depth",), attrs=("axis",),
    batching=_one_hot_batch,
    spec=lambda st: st.Spec(
        _one_hot_calls(st),
        skip={"jvp": "TF registers no gradient for OneHot",
              "vjp": "TF registers no gradient for OneHot"}))


# ---------------------------------------------------------------------------
# Select, SelectV2
# ---------------------------------------------------------------------------


def _select_condition(c, t_shape):
  """Select's condition reshaped to broadcast (right-aligned) against ``t``."""
  c_shape = tuple(jnp.shape(c))
  if c_shape == tuple(t_shape) or not c_shape:
    return c
  if len(c_shape) == 1 and len(t_shape) > 1 and c_shape[0] == t_shape[0]:
    return jnp.reshape(c, c_shape + (1,) * (len(t_shape) - 1))
  raise ValueError(f"Select: condition of shape {c_shape} must be a scalar, a vector of "
                   f"length {t_shape[0] if t_shape else '?'} or have the shape {tuple(t_shape)} "
                   "of 't'")


def _select_impl(condition, t, e):
  if t.shape != e.shape:
    raise ValueError(f"Select: 't' and 'e' must have the same shapes: {t.shape} vs {e.shape}")
  return jnp.where(_select_condition(condition, t.shape), t, e)


def _select_transpose(ct, c, t, e):
  zeros = ZerosLike(ct)
  return [None, Select(c, ct, zeros) if U(t) else None, Select(c, zeros, ct) if U(e) else None]


def _select_batch(args, dims):
  (c, t, e), (dc, dt, de) = args, dims
  t_shape = _per_example_shape(t, dt)
  c_shape = _per_example_shape(c, dc)
  if dc is not None:
    c = _moved(c, dc)
    if c_shape != t_shape and len(c_shape) <= 1:
      c = Reshape(c, shape=(c.shape[0],) + c_shape + (1,) * (len(t_shape) - len(c_shape)))
  elif c_shape != t_shape and len(c_shape) == 1:
    c = Reshape(c, shape=c_shape + (1,) * (len(t_shape) - 1))
  t = _moved(t, dt) if dt is not None else t
  e = _moved(e, de) if de is not None else e
  return SelectV2(c, t, e), 0


Select = define_op(
    "Select", _select_impl, family=FAMILY,
    jvp=(None, lambda g, c, t, e: Select(c, g, ZerosLike(e)),
         lambda g, c, t, e: Select(c, ZerosLike(t), g)),
    transpose=_select_transpose, batching=_select_batch,
    spec=lambda st: st.Spec(_select_calls(st)))


def _select_v2_transpose(ct, c, t, e):
  zeros = ZerosLike(ct)
  return [None,
          _unbroadcast(SelectV2(c, ct, zeros), _shape(t)) if U(t) else None,
          _unbroadcast(SelectV2(c, zeros, ct), _shape(e)) if U(e) else None]


SelectV2 = define_op(
    "SelectV2", jnp.where, family=FAMILY, batching="elementwise",
    jvp=(None, lambda g, c, t, e: SelectV2(c, g, ZerosLike(e)),
         lambda g, c, t, e: SelectV2(c, ZerosLike(t), g)),
    transpose=_select_v2_transpose,
    spec=lambda st: st.Spec(_select_v2_calls(st)))


# ---------------------------------------------------------------------------
# Fill, ZerosLike, OnesLike, Range
# ---------------------------------------------------------------------------


def _fill_impl(value, *, shape):
  dims = _ints(shape)
  if any(d < 0 for d in dims):
    raise ValueError(f"Fill: dims must be non-negative, got {dims}")
  if jnp.size(value) != 1:
    raise ValueError(f"Fill: value must be a scalar, got shape {jnp.shape(value)}")
  return jnp.broadcast_to(jnp.reshape(value, ()), dims)


def _fill_batch(args, bdims, *, shape):
  (v,), (d,) = args, bdims
  v = _moved(v, d)
  dims = _ints(shape)
  v = Reshape(v, shape=(v.shape[0],) + (1,) * len(dims))
  return BroadcastTo(v, shape=(v.shape[0],) + dims), 0


Fill = define_op(
    "Fill", _fill_impl, family=FAMILY, static={"dims": "shape"}, linear=True,
    transpose=lambda ct, v, *, shape: [
        Reshape(_sum(ct, tuple(range(ct.ndim))), shape=_shape(v))],
    batching=_fill_batch,
    spec=lambda st: st.Spec(_fill_calls(st)))

ZerosLike = define_op(
    "ZerosLike", jnp.zeros_like, family=FAMILY, batching="elementwise", linear=True,
    transpose=lambda ct, x: [ZerosLike(ct)],
    spec=lambda st: st.Spec(st.unary(st.ALL)))

OnesLike = define_op(
    "OnesLike", jnp.ones_like, family=FAMILY, batching="elementwise",
    jvp=(lambda g, x: ZerosLike(g),),
    spec=lambda st: st.Spec(st.unary(st.ALL), skip={
        "jvp": "TF registers no gradient for OnesLike",
        "vjp": "TF registers no gradient for OnesLike"}))


def range_values(start, limit, delta, dtype) -> np.ndarray:
  """TF's RangeOp on static values: size ``ceil(|(limit - start) / delta|)`` computed in
  ``dtype`` (integers: ``(|limit - start| + |delta| - 1) / |delta|``) and values
  ``start + i * delta`` rounded to ``dtype``."""
  dtype = np.dtype(dtype)
  s, l, d = (np.asarray(v).astype(dtype) for v in (start, limit, delta))
  if d == 0:
    raise ValueError("Range: requires delta != 0")
  if d > 0 and s > l:
    raise ValueError(f"Range: requires start <= limit when delta > 0: {s}/{l}")
  if d < 0 and s < l:
    raise ValueError(f"Range: requires start >= limit when delta < 0: {s}/{l}")
  if dtype.kind in "iu":
    si, li, di = int(s), int(l), int(d)
    size = (abs(li - si) + abs(di) - 1) // abs(di)
    values = (si + np.arange(size, dtype=object) * di)
    bits = dtype.itemsize * 8
    values = np.array([((v + (1 << (bits - 1))) % (1 << bits)) - (1 << (bits - 1))
                       if dtype.kind == "i" else v % (1 << bits) for v in values],
                      dtype=np.int64 if dtype.kind == "i" else np.uint64).astype(dtype)
    return values.reshape(-1)
  with np.errstate(all="ignore"):
    q = np.abs((l - s) / d)
  if not np.isfinite(q) or float(q) > np.iinfo(np.int64).max:
    raise ValueError("Range: requires ((limit - start) / delta) <= max int64")
  size = int(np.ceil(q))
  idx = np.arange(size).astype(dtype)
  with np.errstate(all="ignore"):
    return (s + (idx * d).astype(dtype)).astype(dtype)


def _range_impl(*, start, limit, delta, Tidx):
  values = range_values(start, limit, delta, Tidx)
  return jnp.asarray(tfdtypes.canonicalize_value(values, "Range output"))


Range = define_op(
    "Range", _range_impl, family=FAMILY, static=("start", "limit", "delta"), attrs=("Tidx",),
    batching=_no_batch_rule("Range"),
    spec=lambda st: st.Spec(_range_calls(st), oracle=_range_oracle, skip={
        "jvp": "no operands (all inputs are static)", "vjp": "no operands (all inputs are static)",
        "vmap": "no operands (all inputs are static)"}))


# ---------------------------------------------------------------------------
# Shape queries: Shape, ShapeN, Size, Rank (values from static shapes)
# ---------------------------------------------------------------------------


def _shape_value(x, out_type, node=None) -> np.ndarray:
  shape = tuple(np.shape(x))
  if not all(isinstance(d, (int, np.integer)) for d in shape):
    where = f"{node.op} node '{node.name}': " if node is not None else ""
    raise errors.DynamicShapeError(
        f"{where}the graph computes with the shape {shape} of a value whose dimensions are "
        "symbolic (jax.export shape polymorphism); tfprims resolves shape computations "
        "(Shape -> StridedSlice/Pack -> Reshape, as in Keras Flatten) at trace time and "
        "needs concrete sizes there: export with concrete shapes, or convert a TF "
        "function whose shape arithmetic uses static sizes")
  return np.array(shape, dtype=tfdtypes.canonical_dtype(out_type))


def _const_batch(compute, multiple=False):
  def rule(args, dims, **params):
    per_example = [np.zeros(_per_example_shape(a, d), np.bool_) for a, d in zip(args, dims)]
    out = compute(*per_example, **params)
    if multiple:
      return [jnp.asarray(o) for o in out], [None] * len(out)
    return jnp.asarray(out), None
  return rule


def _shape_np(x, *, out_type):
  return _shape_value(x, out_type)


def _shapen_np(*xs, out_type):
  return tuple(_shape_value(x, out_type) for x in xs)


def _size_np(x, *, out_type):
  return np.array(math.prod(np.shape(x)), dtype=tfdtypes.canonical_dtype(out_type))


def _rank_np(x):
  return np.array(np.ndim(x), dtype=np.int32)


def _shape_interpret(ctx, node, inputs):
  return [_shape_value(inputs[0], node.attr("out_type"), node)]


def _shapen_interpret(ctx, node, inputs):
  return [_shape_value(x, node.attr("out_type"), node) for x in inputs]


def _size_interpret(ctx, node, inputs):
  return [_size_np(inputs[0], out_type=node.attr("out_type"))]


def _rank_interpret(ctx, node, inputs):
  return [_rank_np(inputs[0])]


_SHAPE_SKIP = {"jvp": "integer output", "vjp": "integer output"}

Shape = define_op(
    "Shape", lambda input, *, out_type: jnp.asarray(_shape_np(input, out_type=out_type)),
    family=FAMILY, attrs=("out_type",), interpret=_shape_interpret, shape_only=True,
    batching=_const_batch(_shape_np),
    spec=lambda st: st.Spec(_shape_calls(st, "Shape"), skip=_SHAPE_SKIP))

ShapeN = define_op(
    "ShapeN", lambda *input, out_type: tuple(
        jnp.asarray(v) for v in _shapen_np(*input, out_type=out_type)),
    family=FAMILY, attrs=("out_type",), multiple_results=True, interpret=_shapen_interpret, shape_only=True,
    batching=_const_batch(_shapen_np, multiple=True),
    spec=lambda st: st.Spec(_shape_calls(st, "ShapeN"), skip=_SHAPE_SKIP))

Size = define_op(
    "Size", lambda input, *, out_type: jnp.asarray(_size_np(input, out_type=out_type)),
    family=FAMILY, attrs=("out_type",), interpret=_size_interpret, shape_only=True,
    batching=_const_batch(_size_np),
    spec=lambda st: st.Spec(_shape_calls(st, "Size"), skip=_SHAPE_SKIP))

Rank = define_op(
    "Rank", lambda input: jnp.asarray(_rank_np(input)), family=FAMILY,
    interpret=_rank_interpret, shape_only=True, batching=_const_batch(_rank_np),
    spec=lambda st: st.Spec(_shape_calls(st, "Rank"), skip=_SHAPE_SKIP))


# ---------------------------------------------------------------------------
# Identities: Identity, IdentityN, Snapshot, StopGradient, EnsureShape, CheckNumerics
# ---------------------------------------------------------------------------


def _identity(x):
  return x


def _pass_through(ctx, node, inputs):
  """Interpreter hook: the values flow through without an equation."""
  return list(inputs)


Identity = define_op(
    "Identity", _identity, family=FAMILY, linear=True, transpose=lambda ct, x: [ct],
    interpret=_pass_through, pass_through=True,
    batching=_passthrough_batching(lambda: Identity),
    spec=lambda st: st.Spec(st.unary(st.ALL, arg="input")))

Snapshot = define_op(
    "Snapshot", _identity, family=FAMILY, linear=True, transpose=lambda ct, x: [ct],
    interpret=_pass_through, pass_through=True,
    batching=_passthrough_batching(lambda: Snapshot),
    spec=lambda st: st.Spec(st.unary(st.ALL, arg="input"), skip={
        "jvp": "TF registers no gradient for Snapshot (ours is the identity's)",
        "vjp": "TF registers no gradient for Snapshot (ours is the identity's)"}))


def _stop_gradient_jvp(primals, tangents):
  out = StopGradient(*primals)
  return out, ad.Zero(jax.typeof(out).to_tangent_aval())


StopGradient = define_op(
    "StopGradient", _identity, family=FAMILY, jvp=_stop_gradient_jvp,
    batching=_passthrough_batching(lambda: StopGradient),
    spec=lambda st: st.Spec(st.unary(st.ALL, arg="input")))


def _check_shape(x_shape, shape):
  if shape is None:  # unknown rank
    return
  shape = tuple(shape)
  ok = len(shape) == len(x_shape) and all(
      s is None or s == -1 or s == d for s, d in zip(shape, x_shape))
  if not ok:
    want = tuple(None if s in (None, -1) else s for s in shape)
    raise ValueError(f"EnsureShape: shape of tensor {tuple(x_shape)} is not compatible with "
                     f"expected shape {want}")


def _ensure_shape_impl(input, *, shape):
  """Checked at trace time (shapes are static in JAX)."""
  _check_shape(input.shape, shape)
  return input


def _ensure_shape_batch(args, dims, *, shape):
  (x,), (d,) = args, dims
  shape = None if shape is None else (None,) + tuple(shape)
  return EnsureShape(_moved(x, d), shape=shape), 0


EnsureShape = define_op(
    "EnsureShape", _ensure_shape_impl, family=FAMILY, attrs=("shape",), linear=True,
    transpose=lambda ct, x, *, shape: [EnsureShape(ct, shape=shape)],
    batching=_ensure_shape_batch,
    spec=lambda st: st.Spec(_ensure_shape_calls(st)))


def _check_numerics_impl(tensor, *, message):
  """A pass-through: NaN/Inf are not checked (see docs/semantics/array.md)."""
  return tensor


CheckNumerics = define_op(
    "CheckNumerics", _check_numerics_impl, family=FAMILY, attrs=("message",), linear=True,
    transpose=lambda ct, x, *, message: [CheckNumerics(ct, message=message)],
    batching=_passthrough_batching(lambda: CheckNumerics),
    spec=lambda st: st.Spec(_check_numerics_calls(st)))

CheckNumericsV2 = define_op(
    "CheckNumericsV2", _check_numerics_impl, family=FAMILY, attrs=("message",), linear=True,
    transpose=lambda ct, x, *, message: [CheckNumericsV2(ct, message=message)],
    batching=_passthrough_batching(lambda: CheckNumericsV2),
    spec=lambda st: st.Spec(_check_numerics_calls(st)))


# ---------------------------------------------------------------------------
# Bitcast
# ---------------------------------------------------------------------------

# TF's allowed T/type (the quantized types aside, which tfprims does not represent).
_BITCAST_TYPES = ("bfloat16", "float16", "float32", "float64", "int64", "int32", "uint8",
                  "uint16", "uint32", "uint64", "int8", "int16", "complex64", "complex128")
_WIDE_INTS = ("int64", "uint64")


def _bitcast_dtypes(T, type):  # noqa: N803, A002  (TF attr names)
  src, dst = jnp.dtype(T), jnp.dtype(type)
  for what, d in (("input dtype (T)", src), ("type", dst)):
    if d.name not in _BITCAST_TYPES:
      raise TypeError(f"Bitcast: {what} {d.name} is not one TF bitcasts; allowed: "
                      f"{', '.join(_BITCAST_TYPES)}")
  return src, dst


def _bitcast_shape(shape: tuple, src, dst) -> tuple:
  """TF's rule: equal sizes keep the shape; a narrower ``type`` adds a last dim of
  size ``src/dst``; a wider one needs (and removes) a last dim of size ``dst/src``."""
  s, d = src.itemsize, dst.itemsize
  if s == d:
    return shape
  if s > d:
    return shape + (s // d,)
  if not shape or shape[-1] != d // s:
    raise ValueError(f"Bitcast: cannot bitcast {src.name} to {dst.name}: the input's last "
                     f"dimension must be {d // s} (sizeof({dst.name}) / sizeof({src.name})), "
                     f"got shape {shape}")
  return shape[:-1]


def _to_bytes(x):
  """uint8 view of ``x`` with a trailing dim of its item size (complex as real, imag)."""
  if jnp.iscomplexobj(x):
    parts = jnp.stack([jnp.real(x), jnp.imag(x)], axis=-1)
    b = lax.bitcast_convert_type(parts, jnp.uint8)
    return b.reshape(b.shape[:-2] + (b.shape[-2] * b.shape[-1],))
  b = lax.bitcast_convert_type(x, jnp.uint8)
  return b[..., None] if x.dtype.itemsize == 1 else b


def _from_bytes(b, dst):
  """Inverse of ``_to_bytes``: uint8 ``[..., sizeof(dst)]`` -> ``dst[...]``."""
  if jnp.issubdtype(dst, jnp.complexfloating):
    part = jnp.finfo(dst).dtype
    b = b.reshape(b.shape[:-1] + (2, part.itemsize))
    parts = lax.bitcast_convert_type(b, part)
    return lax.complex(parts[..., 0], parts[..., 1])
  if dst.itemsize == 1:
    return lax.bitcast_convert_type(b[..., 0], dst)
  return lax.bitcast_convert_type(b, dst)


def _bitcast(input, *, T, type):  # noqa: A002, N803  (TF names)
  """tf.bitcast: the bytes of ``input`` reinterpreted as ``type`` (little-endian,
  complex as ``[real, imag]``), the last dim added or removed when sizes differ."""
  src, dst = _bitcast_dtypes(T, type)
  if jnp.dtype(input.dtype) != tfdtypes.canonical_dtype(src):
    raise TypeError(f"Bitcast: input has dtype {input.dtype}, but T is {src.name}")
  out_shape = _bitcast_shape(tuple(input.shape), src, dst)
  if tfdtypes.canonical_dtype(src) != src or tfdtypes.canonical_dtype(dst) != dst:
    # x64 off: 64-bit values are held in 32 bits.
    if src.name in _WIDE_INTS and dst.name in _WIDE_INTS:
      return lax.bitcast_convert_type(input, tfdtypes.canonical_dtype(dst))
    raise errors.Int64OverflowError(
        f"Bitcast from {src.name} to {dst.name} needs x64: with x64 off JAX holds "
        f"{src.name if tfdtypes.canonical_dtype(src) != src else dst.name} values in 32 bits, "
        "whose bytes are not TF's; enable it with jax.config.update('jax_enable_x64', True)")
  if src == dst:
    return input
  if src.kind != "c" and dst.kind != "c":
    return lax.bitcast_convert_type(input, dst)
  b = _to_bytes(input)
  return _from_bytes(b.reshape(out_shape + (dst.itemsize,)), dst)


def _bitcast_jvp(primals, tangents, **params):
  out = Bitcast(*primals, **params)   # TF: not differentiable
  return out, ad.Zero(jax.typeof(out).to_tangent_aval())


def _bitcast_batching(args, dims, *, T, type):  # noqa: A002, N803
  (x,), (d,) = args, dims
  if jnp.dtype(T).itemsize != jnp.dtype(type).itemsize and d == x.ndim - 1:
    x, d = _moved(x, d), 0   # the last dim is the one added or removed
  return Bitcast(x, T=T, type=type), d


def _bitcast_calls(st):
  @st.composite
  def draw(draw):
    src, dst = draw(st.dtypes(_BITCAST_TYPES)), draw(st.dtypes(_BITCAST_TYPES))
    shape = tuple(draw(st.shapes()))
    if src.itemsize < dst.itemsize:
      shape = shape[:3] + (dst.itemsize // src.itemsize,)
    return {"input": draw(st.arrays(src, shape)), "type": dst}
  return draw()


Bitcast = define_op(
    "Bitcast", _bitcast, family=FAMILY, attrs=("T", "type"), jvp=_bitcast_jvp,
    batching=_bitcast_batching,
    spec=lambda st: st.Spec(_bitcast_calls(st)))


# ---------------------------------------------------------------------------
# ReverseV2, Cumsum, Cumprod
# ---------------------------------------------------------------------------


def _reverse_axes(axis, rank) -> tuple:
  axes = [_norm_axis(a, rank) for a in _ints(axis)]
  if len(set(axes)) != len(axes):
    raise ValueError(f"ReverseV2: an axis is specified more than once in {_ints(axis)}")
  return tuple(sorted(axes))


def _reverse_impl(tensor, *, axis):
  axes = _reverse_axes(axis, tensor.ndim)
  return lax.rev(tensor, axes) if axes else tensor


def _reverse_batch(args, dims, *, axis):
  (x,), (d,) = args, dims
  axes = _reverse_axes(axis, x.ndim - 1)
  return ReverseV2(_moved(x, d), axis=tuple(a + 1 for a in axes)), 0


ReverseV2 = define_op(
    "ReverseV2", _reverse_impl, family=FAMILY, static=("axis",), linear=True,
    transpose=lambda ct, x, *, axis: [ReverseV2(ct, axis=axis)],
    batching=_reverse_batch,
    spec=lambda st: st.Spec(_reverse_calls(st)))


def _scan(x, axis, exclusive, reverse, kind):
  ax = _norm_axis(_int(axis), x.ndim)
  n = x.shape[ax]
  fn = lax.cumsum if kind == "sum" else lax.cumprod
  if n == 0:
    return x
  if x.dtype == np.bool_:
    raise TypeError(f"Cum{kind}: bool is not supported")
  out = fn(x, axis=ax, reverse=reverse)
  if exclusive:
    unit = jnp.full(x.shape[:ax] + (1,) + x.shape[ax + 1:], 0 if kind == "sum" else 1, x.dtype)
    if reverse:
      out = jnp.concatenate([lax.slice_in_dim(out, 1, n, axis=ax), unit], axis=ax)
    else:
      out = jnp.concatenate([unit, lax.slice_in_dim(out, 0, n - 1, axis=ax)], axis=ax)
  return out


def _cumsum_impl(x, *, axis, exclusive, reverse):
  return _scan(x, axis, exclusive, reverse, "sum")


def _cumprod_impl(x, *, axis, exclusive, reverse):
  return _scan(x, axis, exclusive, reverse, "prod")


def _scan_batch(op_getter):
  def rule(args, dims, *, axis, exclusive, reverse):
    (x,), (d,) = args, dims
    ax = _norm_axis(_int(axis), x.ndim - 1)
    return op_getter()(_moved(x, d), axis=ax + 1, exclusive=exclusive, reverse=reverse), 0
  return rule


Cumsum = define_op(
    "Cumsum", _cumsum_impl, family=FAMILY, static=("axis",), attrs=("exclusive", "reverse"),
    linear=True,
    transpose=lambda ct, x, *, axis, exclusive, reverse: [
        Cumsum(ct, axis=axis, exclusive=exclusive, reverse=not reverse)],
    batching=_scan_batch(lambda: Cumsum),
    spec=lambda st: st.Spec(_scan_calls(st, "Cumsum"), rtol={"float16": 1e-2, "bfloat16": 5e-2},
                            atol={"float16": 0.5, "bfloat16": 2.0}))

Cumprod = define_op(
    "Cumprod", _cumprod_impl, family=FAMILY, static=("axis",), attrs=("exclusive", "reverse"),
    batching=_scan_batch(lambda: Cumprod),
    spec=lambda st: st.Spec(_scan_calls(st, "Cumprod"), rtol={"float16": 1e-2, "bfloat16": 5e-2},
                            atol={"float16": 1e-2, "bfloat16": 5e-2}, grad_oracle="fd",
                            note="TF's Cumprod gradient is wrong for complex inputs (no "
                                 "conjugation): derivatives are checked by central differences"))


# ---------------------------------------------------------------------------
# Property-test strategies (hypothesis is imported lazily, inside the functions)
# ---------------------------------------------------------------------------

_IDX = ("int32", "int64")


def _range_oracle(start, limit, delta, Tidx=None):
  # Tensors, not numpy values: with numpy inputs tf.raw_ops.Range converts them to
  # its default Tidx (int32). Tidx itself is inferred by TF (drawn for prepare).
  import tensorflow as tf
  return tf.raw_ops.Range(start=tf.constant(start), limit=tf.constant(limit),
                          delta=tf.constant(delta))


def _hst():
  from hypothesis import strategies as hst
  return hst


def _idx(draw, st, values, names=_IDX):
  return np.asarray(values, dtype=draw(st.dtypes(names)))


def _reshape_calls(st):
  hst = _hst()

  @st.composite
  def calls(draw):
    x = draw(st.arrays(st.dtypes(st.ALL), st.shapes()))
    dims = list(x.shape)
    dims = draw(hst.permutations(dims)) if dims else dims
    # Merge neighbours, insert ones.
    out = []
    for d in dims:
      if out and draw(hst.booleans()):
        out[-1] *= d
      else:
        out.append(d)
    for _ in range(draw(hst.integers(0, 2))):
      out.insert(draw(hst.integers(0, len(out))), 1)
    if out and draw(hst.booleans()):
      cand = list(out)
      cand[draw(hst.integers(0, len(cand) - 1))] = -1
      try:
        _resolve_shape(x.shape, cand)
        out = cand
      except ValueError:
        pass
    return {"tensor": x, "shape": _idx(draw, st, out if out else np.zeros((0,), np.int64))}
  return calls()


def _transpose_calls(st):
  hst = _hst()

  @st.composite
  def calls(draw):
    x = draw(st.arrays(st.dtypes(st.ALL), st.shapes()))
    # Non-negative: TF's own Transpose gradient (InvertPermutation) rejects negative perms.
    perm = list(draw(hst.permutations(range(x.ndim))))
    return {"x": x, "perm": _idx(draw, st, np.array(perm, np.int64).reshape(-1))}
  return calls()


def _expand_dims_calls(st):
  hst = _hst()

  @st.composite
  def calls(draw):
    x = draw(st.arrays(st.dtypes(st.ALL), st.shapes(max_rank=3)))
    axis = draw(hst.integers(-x.ndim - 1, x.ndim))
    return {"input": x, "dim": _idx(draw, st, axis)}
  return calls()


def _squeeze_calls(st):
  hst = _hst()

  @st.composite
  def calls(draw):
    shape = list(draw(st.shapes()))
    for _ in range(draw(hst.integers(0, 2))):
      shape.insert(draw(hst.integers(0, len(shape))), 1)
    shape = shape[:5]
    x = draw(st.arrays(st.dtypes(st.ALL), tuple(shape)))
    ones = [i for i, n in enumerate(shape) if n == 1]
    axes = draw(hst.lists(hst.sampled_from(ones), unique=True)) if ones else []
    axes = [a - len(shape) if draw(hst.booleans()) else a for a in axes]
    return {"input": x, "squeeze_dims": axes}
  return calls()


def _same_shape_arrays(draw, st, n, shape, dtype):
  return [draw(st.arrays(dtype, shape)) for _ in range(n)]


def _concat_calls(st):
  hst = _hst()

  @st.composite
  def calls(draw):
    dtype = draw(st.dtypes(st.ALL))
    shape = draw(st.shapes(min_rank=1, max_rank=3))
    axis = draw(hst.integers(-len(shape), len(shape) - 1))
    n = draw(hst.integers(2, 3))
    values = []
    for _ in range(n):
      s = list(shape)
      s[axis] = draw(hst.integers(0, 3))
      values.append(draw(st.arrays(dtype, tuple(s))))
    return {"values": values, "axis": _idx(draw, st, axis)}
  return calls()


def _pack_calls(st):
  hst = _hst()

  @st.composite
  def calls(draw):
    dtype = draw(st.dtypes(st.ALL))
    shape = draw(st.shapes(max_rank=3))
    n = draw(hst.integers(1, 3))
    axis = draw(hst.integers(-len(shape) - 1, len(shape)))
    return {"values": _same_shape_arrays(draw, st, n, shape, dtype), "axis": axis}
  return calls()


def _unpack_calls(st):
  hst = _hst()

  @st.composite
  def calls(draw):
    x = draw(st.arrays(st.dtypes(st.ALL), st.shapes(min_rank=1)))
    axis = draw(hst.integers(-x.ndim, x.ndim - 1))
    return {"value": x, "num": x.shape[axis], "axis": axis}
  return calls()


def _split_calls(st):
  hst = _hst()

  @st.composite
  def calls(draw):
    x = draw(st.arrays(st.dtypes(st.ALL), st.shapes(min_rank=1)))
    axis = draw(hst.integers(-x.ndim, x.ndim - 1))
    n = x.shape[axis]
    num = draw(hst.sampled_from([k for k in range(1, 5) if n % k == 0]))
    return {"split_dim": np.int32(axis), "value": x, "num_split": num}
  return calls()


def _splitv_calls(st):
  hst = _hst()

  @st.composite
  def calls(draw):
    x = draw(st.arrays(st.dtypes(st.ALL), st.shapes(min_rank=1)))
    axis = draw(hst.integers(-x.ndim, x.ndim - 1))
    n = x.shape[axis]
    cuts = sorted(draw(hst.lists(hst.integers(0, n), max_size=3)))
    sizes = [b - a for a, b in zip([0] + cuts, cuts + [n])]
    if len(sizes) > 1 and draw(hst.booleans()):
      sizes[draw(hst.integers(0, len(sizes) - 1))] = -1
    return {"value": x, "size_splits": _idx(draw, st, sizes, ("int8", "int32", "int64")),
            "split_dim": np.int32(axis), "num_split": len(sizes)}
  return calls()


def _slice_calls(st):
  hst = _hst()

  @st.composite
  def calls(draw):
    x = draw(st.arrays(st.dtypes(st.ALL), st.shapes()))
    begin, size = [], []
    for n in x.shape:
      b = draw(hst.integers(0, n))
      begin.append(b)
      size.append(draw(hst.integers(-1, n - b)))
    dtype = draw(st.dtypes(_IDX))  # begin and size share the Index attr
    return {"input": x, "begin": np.array(begin, np.int64).astype(dtype),
            "size": np.array(size, np.int64).astype(dtype)}
  return calls()


def _slice_spec_strategy(st):
  """Draws ``(shape, spec_kwargs)`` for StridedSlice: any mask combination TF accepts."""
  hst = _hst()

  @st.composite
  def spec(draw):
    shape = draw(st.shapes(max_rank=4))
    rank = len(shape)
    # Real entries before and after an optional ellipsis; new axes anywhere.
    use_ellipsis = draw(hst.booleans())
    n_before = draw(hst.integers(0, rank))
    n_after = draw(hst.integers(0, rank - n_before)) if use_ellipsis else 0
    dims_before = list(range(n_before))
    dims_after = list(range(rank - n_after, rank))
    entries = [("dim", d) for d in dims_before]
    if use_ellipsis:
      entries.append(("ellipsis", None))
    entries += [("dim", d) for d in dims_after]
    for _ in range(draw(hst.integers(0, 2))):
      entries.insert(draw(hst.integers(0, len(entries))), ("new", None))
    begin, end, strides = [], [], []
    masks = dict.fromkeys(_MASKS, 0)
    for i, (kind, d) in enumerate(entries):
      bit = 1 << i
      if kind == "ellipsis":
        masks["ellipsis_mask"] |= bit
        if draw(hst.booleans()):  # ignored: ellipsis wins
          masks["new_axis_mask"] |= bit
        begin.append(draw(hst.integers(-3, 3)))
        end.append(draw(hst.integers(-3, 3)))
        strides.append(draw(hst.sampled_from([1, 2, -1])))
        continue
      if kind == "new":
        masks["new_axis_mask"] |= bit
        if draw(hst.booleans()):  # ignored: new axis wins
          masks["shrink_axis_mask"] |= bit
        begin.append(draw(hst.integers(-3, 3)))
        end.append(draw(hst.integers(-3, 3)))
        strides.append(draw(hst.sampled_from([1, 2, -1])))
        continue
      n = shape[d]
      if n > 0 and draw(hst.integers(0, 3)) == 0:
        masks["shrink_axis_mask"] |= bit
        begin.append(draw(hst.integers(-n, n - 1)))
        end.append(draw(hst.integers(-n - 2, n + 2)))
        strides.append(draw(hst.integers(1, 3)))
      else:
        begin.append(draw(hst.integers(-n - 2, n + 2)))
        end.append(draw(hst.integers(-n - 2, n + 2)))
        strides.append(draw(hst.sampled_from([1, 2, 3, -1, -2, -3])))
      if draw(hst.integers(0, 2)) == 0:
        masks["begin_mask"] |= bit
      if draw(hst.integers(0, 2)) == 0:
        masks["end_mask"] |= bit
    kwargs = dict(masks)
    dtype = draw(st.dtypes(("int32", "int64")))
    kwargs["begin"] = np.asarray(begin, dtype).reshape(-1)
    kwargs["end"] = np.asarray(end, dtype).reshape(-1)
    kwargs["strides"] = np.asarray(strides, dtype).reshape(-1)
    return tuple(shape), kwargs
  return spec()


def _strided_slice_calls(st):
  @st.composite
  def calls(draw):
    shape, kwargs = draw(_slice_spec_strategy(st))
    return {"input": draw(st.arrays(st.dtypes(st.ALL), shape)), **kwargs}
  return calls()


def _strided_slice_grad_calls(st):
  @st.composite
  def calls(draw):
    shape, kwargs = draw(_slice_spec_strategy(st))
    plan = strided_slice_plan(shape, kwargs["begin"], kwargs["end"], kwargs["strides"],
                              *(kwargs[m] for m in _MASKS))
    dy = draw(st.arrays(st.dtypes(st.ALL), plan.final_shape))
    return {"shape": np.asarray(shape, kwargs["begin"].dtype).reshape(-1), **kwargs, "dy": dy}
  return calls()


def _tile_calls(st):
  hst = _hst()

  @st.composite
  def calls(draw):
    x = draw(st.arrays(st.dtypes(tuple(n for n in st.ALL if n != "uint16")),
                       st.shapes(max_rank=3, max_side=3)))
    m = [draw(hst.integers(0, 3)) for _ in range(x.ndim)]
    return {"input": x, "multiples": _idx(draw, st, np.array(m, np.int64).reshape(-1))}
  return calls()


def _broadcast_to_calls(st):
  hst = _hst()

  @st.composite
  def calls(draw):
    target = list(draw(st.shapes()))
    k = draw(hst.integers(0, len(target)))
    in_shape = [1 if draw(hst.booleans()) else n for n in target[len(target) - k:]]
    x = draw(st.arrays(st.dtypes(st.ALL), tuple(in_shape)))
    return {"input": x, "shape": _idx(draw, st, np.array(target, np.int64).reshape(-1))}
  return calls()


def _pad_calls(st, op):
  hst = _hst()

  @st.composite
  def calls(draw):
    dtype = draw(st.dtypes(st.ALL))
    # MirrorPad: no zero-size dims, TF's own gradient (MirrorPadGrad) rejects them.
    x = draw(st.arrays(dtype, st.shapes(max_side=3, min_side=int(op == "MirrorPad"))))
    if op == "MirrorPad":
      mode = draw(hst.sampled_from(["REFLECT", "SYMMETRIC"]))
      hi = [n - (mode == "REFLECT") for n in x.shape]
      p = [[draw(hst.integers(0, max(h, 0))), draw(hst.integers(0, max(h, 0)))] for h in hi]
    else:
      p = [[draw(hst.integers(0, 2)), draw(hst.integers(0, 2))] for _ in x.shape]
    out = {"input": x, "paddings": _idx(draw, st, np.array(p, np.int64).reshape(x.ndim, 2))}
    if op == "PadV2":
      out["constant_values"] = draw(st.arrays(dtype, ()))
    if op == "MirrorPad":
      out["mode"] = mode
    return out
  return calls()


def _gather_calls(st):
  hst = _hst()

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
    itypes = ("int16", "int32", "int64") if batch_dims == 0 else _IDX
    indices = draw(st.arrays(st.dtypes(itypes), ishape,
                             min_value=0, max_value=max(n - 1, 0)))
    if draw(hst.booleans()):
      axis -= params.ndim
    if batch_dims and draw(hst.booleans()):
      batch_dims -= indices.ndim
    return {"params": params, "indices": indices, "axis": _idx(draw, st, axis),
            "batch_dims": batch_dims}
  return calls()


def _one_hot_calls(st):
  hst = _hst()

  @st.composite
  def calls(draw):
    depth = draw(hst.integers(0, 4))
    itype = draw(st.dtypes(("uint8", "int8", "int32", "int64")))
    lo = 0 if np.dtype(itype).kind == "u" else -2
    indices = draw(st.arrays(itype, st.shapes(max_rank=3), min_value=lo, max_value=depth + 1))
    dtype = draw(st.dtypes(st.ALL))
    return {"indices": indices, "depth": np.int32(depth),
            "on_value": draw(st.arrays(dtype, ())), "off_value": draw(st.arrays(dtype, ())),
            "axis": draw(hst.integers(-1, indices.ndim))}
  return calls()


def _select_calls(st):
  hst = _hst()

  @st.composite
  def calls(draw):
    dtype = draw(st.dtypes(st.ALL))
    shape = draw(st.shapes())
    kind = draw(hst.sampled_from(["same", "scalar", "vector"] if len(shape) > 1
                                 else ["same", "scalar"]))
    cshape = {"same": shape, "scalar": (), "vector": shape[:1]}[kind]
    return {"condition": draw(st.arrays("bool", cshape)), "t": draw(st.arrays(dtype, shape)),
            "e": draw(st.arrays(dtype, shape))}
  return calls()


def _select_v2_calls(st):
  @st.composite
  def calls(draw):
    dtype = draw(st.dtypes(st.ALL))
    sc, st_, se = draw(st.broadcastable_shapes(3))
    return {"condition": draw(st.arrays("bool", sc)), "t": draw(st.arrays(dtype, st_)),
            "e": draw(st.arrays(dtype, se))}
  return calls()


def _fill_calls(st):
  @st.composite
  def calls(draw):
    dims = draw(st.shapes())
    return {"dims": _idx(draw, st, np.array(dims, np.int64).reshape(-1)),
            "value": draw(st.arrays(st.dtypes(st.ALL), ()))}
  return calls()


def _range_calls(st):
  hst = _hst()

  @st.composite
  def calls(draw):
    name = draw(hst.sampled_from(["int32", "int64", "float32", "float64", "float16",
                                  "bfloat16"]))
    dtype = st.np_dtype(name)
    if dtype.kind == "i":
      start, limit = draw(hst.integers(-20, 20)), draw(hst.integers(-20, 20))
      delta = draw(hst.sampled_from([1, 2, 3, 7, -1, -2, -5]))
    else:
      start = draw(hst.sampled_from([0.0, 0.5, -1.25, 3.0, 0.1, -7.3]))
      limit = draw(hst.sampled_from([0.0, 2.0, -3.5, 7.7, 10.0, 0.1]))
      delta = draw(hst.sampled_from([0.5, 1.0, 0.3, 1.7, -0.5, -1.0, -0.7]))
    if (delta > 0 and start > limit) or (delta < 0 and start < limit):
      start, limit = limit, start
    return {"start": np.asarray(start).astype(dtype), "limit": np.asarray(limit).astype(dtype),
            "delta": np.asarray(delta).astype(dtype), "Tidx": dtype}
  return calls()


def _shape_calls(st, op):
  hst = _hst()

  @st.composite
  def calls(draw):
    if op == "ShapeN":
      n = draw(hst.integers(1, 3))
      dtype = draw(st.dtypes(st.ALL))
      values = [draw(st.arrays(dtype, st.shapes())) for _ in range(n)]
      return {"input": values, "out_type": draw(st.dtypes(_IDX))}
    out = {"input": draw(st.arrays(st.dtypes(st.ALL), st.shapes()))}
    if op != "Rank":
      out["out_type"] = draw(st.dtypes(_IDX))
    return out
  return calls()


def _ensure_shape_calls(st):
  hst = _hst()

  @st.composite
  def calls(draw):
    x = draw(st.arrays(st.dtypes(st.ALL), st.shapes()))
    shape = None if draw(hst.integers(0, 4)) == 0 else [
        None if draw(hst.booleans()) else n for n in x.shape]
    return {"input": x, "shape": shape}
  return calls()


def _check_numerics_calls(st):
  @st.composite
  def calls(draw):
    x = draw(st.arrays(st.dtypes(st.FLOATS), st.shapes(), allow_nan=False, allow_inf=False))
    return {"tensor": x, "message": "tfprims"}
  return calls()


def _reverse_calls(st):
  hst = _hst()

  @st.composite
  def calls(draw):
    x = draw(st.arrays(st.dtypes(st.ALL), st.shapes()))
    axes = draw(hst.lists(hst.integers(0, max(x.ndim - 1, 0)), unique=True,
                          max_size=x.ndim)) if x.ndim else []
    axes = [a - x.ndim if draw(hst.booleans()) else a for a in axes]
    return {"tensor": x, "axis": _idx(draw, st, np.array(axes, np.int64).reshape(-1))}
  return calls()


def _scan_calls(st, op):
  hst = _hst()

  @st.composite
  def calls(draw):
    dtype = draw(st.dtypes(st.NUMERIC + st.COMPLEX))
    shape = draw(st.shapes(min_rank=1))
    if st.is_inexact(dtype):
      lo, hi = (0.5, 2.0) if op == "Cumprod" else (-100.0, 100.0)
      x = draw(st.arrays(dtype, shape, min_value=lo, max_value=hi, special=False))
    else:
      x = draw(st.arrays(dtype, shape))
    axis = draw(hst.integers(-len(shape), len(shape) - 1))
    return {"x": x, "axis": _idx(draw, st, axis), "exclusive": draw(hst.booleans()),
            "reverse": draw(hst.booleans())}
  return calls()
