"""Slicing: Slice, StridedSlice and StridedSliceGrad (StridedSlice's transpose).

``strided_slice_plan`` transcribes TF's ``ValidateStridedSliceOp`` (sparse spec
made dense, begin/end canonicalised and clamped as TF does; see
docs/semantics/array.md). StridedSlice is ``rev`` + one strided ``lax.slice`` +
reshape; StridedSliceGrad places ``dy`` into zeros with ``lax.pad`` (interior
padding for strides). Transposes: Slice -> Pad, StridedSlice <->
StridedSliceGrad. Under vmap, a full-range entry for the batch axis is prepended
to the spec and every mask shifted by one bit. All three are builders
(tfprims/emit.py): lowered without tracing their impls.
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import numpy as np

from tfprims import emit, rules
from tfprims.core import define_op, tfops
from tfprims.ops.array._common import FAMILY, INDEX_DTYPES, ints, lazy_hst


def _slice_bounds(shape, begin, size) -> tuple[tuple, tuple]:
  begin, size = rules.sizes(begin), rules.sizes(size)  # symbolic dims of jax.export kept
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


def _slice_build(B, input, *, begin, size):
  b, s = _slice_bounds(input.shape, begin, size)
  return B.slice(input, b, tuple(i + j for i, j in zip(b, s)))


_slice_impl = emit.traced(_slice_build)


def _slice_transpose(ct, x, *, begin, size):
  shape = rules.shape_of(x)
  b, s = _slice_bounds(shape, begin, size)
  return [tfops.Pad(ct, paddings=tuple((i, n - i - j) for i, j, n in zip(b, s, shape)))]


def _slice_batch(args, dims, *, begin, size):
  (x,), (d,) = args, dims
  return tfops.Slice(rules.to_front(x, d), begin=(0,) + rules.sizes(begin),
                     size=(-1,) + rules.sizes(size)), 0


Slice = define_op(
    "Slice", _slice_impl, family=FAMILY, static=("begin", "size"), linear=True,
    lowering=emit.direct_lowering(_slice_build, _slice_impl),
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
  """TF's ValidateStridedSliceOp (strided_slice_op.cc), for static specs; a dim of
  ``shape`` (or a bound) may be symbolic (jax.export), and so may the plan's sizes."""
  begin, end, strides = rules.sizes(begin), rules.sizes(end), ints(strides)
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
    # n may be a symbolic dim (jax.export): min_dim/max_dim keep the clamps symbolic
    # (and are min/max on ints); a bound the dim leaves undecided raises JAX's error.
    b, e, s, n = d_begin[i], d_end[i], d_strides[i], shape[i]
    if s == 0:
      raise ValueError(f"StridedSlice: strides[{i}] must be non-zero")
    shrink = (d_shrink >> i) & 1
    masks = ((d_bmask >> i) & 1, (d_emask >> i) & 1)
    valid = (0, n) if s > 0 else (-1, n - 1)

    def canonical(x, c, s=s, n=n, masks=masks, valid=valid):
      if masks[c]:
        return valid[c] if s > 0 else valid[(c + 1) & 1]
      x = x + n if x < 0 else x
      return jax.core.min_dim(jax.core.max_dim(x, valid[0]), valid[1])

    if shrink and s <= 0:
      raise ValueError("StridedSlice: only stride 1 allowed on non-range indexing")
    if shrink:
      x = b + n if b < 0 else b
      if not 0 <= x < n:
        raise ValueError(f"StridedSlice: slice index {b} of dimension {i} out of bounds")
      b, e = x, x + 1
    else:
      b, e = canonical(b, 0), canonical(e, 1)
    # ceil(length / s) elements when length runs the way of s, else none
    count = (jax.core.max_dim((e - b) * (1 if s > 0 else -1), 0) + abs(s) - 1) // abs(s)
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


def _apply_plan(B, x, plan: StridedPlan):
  flip = tuple(i for i, (_, c, s) in enumerate(plan.dims) if s < 0 and c > 0)
  if flip:
    x = B.rev(x, flip)
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
  x = B.slice(x, tuple(starts), tuple(limits), tuple(steps))
  return B.reshape(x, plan.final_shape)


def _scatter_plan(B, dy, shape, plan: StridedPlan):
  """The transpose of :func:`_apply_plan`: ``dy`` placed into zeros of ``shape``."""
  dy = B.reshape(dy, tuple(c for _, c, _ in plan.dims))
  config, flip = [], []
  for i, (first, count, step) in enumerate(plan.dims):
    n = shape[i]
    if count == 0:
      config.append((n, 0, 0))
      continue
    if step < 0:
      first, step = n - 1 - first, -step
      flip.append(i)
    last = first + (count - 1) * step
    config.append((first, n - 1 - last, step - 1))
  out = B.pad(dy, 0, config)
  return B.rev(out, tuple(flip)) if flip else out


def _strided_slice_build(B, input, **params):
  return _apply_plan(B, input, _plan_for(input.shape, params))


_strided_slice_impl = emit.traced(_strided_slice_build)


def _strided_slice_transpose(ct, x, **params):
  return [tfops.StridedSliceGrad(ct, shape=rules.shape_of(x), **params)]


def _shift_spec(params):
  """The spec with a full-range entry for a leading batch axis prepended."""
  new = dict(params)
  new["begin"] = (0,) + rules.sizes(params["begin"])
  new["end"] = (0,) + rules.sizes(params["end"])
  new["strides"] = (1,) + ints(params["strides"])
  for m in _MASKS:
    new[m] = params[m] << 1
  new["begin_mask"] |= 1
  new["end_mask"] |= 1
  return new


def _strided_slice_batch(args, dims, **params):
  (x,), (d,) = args, dims
  return tfops.StridedSlice(rules.to_front(x, d), **_shift_spec(params)), 0


StridedSlice = define_op(
    "StridedSlice", _strided_slice_impl, family=FAMILY, static=("begin", "end", "strides"),
    attrs=_MASKS, linear=True,
    lowering=emit.direct_lowering(_strided_slice_build, _strided_slice_impl),
    transpose=_strided_slice_transpose, batching=_strided_slice_batch,
    spec=lambda st: st.Spec(_strided_slice_calls(st)))


def _strided_slice_grad_build(B, dy, *, shape, **params):
  shape = rules.sizes(shape)
  plan = _plan_for(shape, params)
  if tuple(dy.shape) != plan.final_shape:
    raise ValueError(f"StridedSliceGrad: dy has shape {tuple(dy.shape)}, the slice of "
                     f"{shape} has shape {plan.final_shape}")
  return _scatter_plan(B, dy, shape, plan)


_strided_slice_grad_impl = emit.traced(_strided_slice_grad_build)


def _strided_slice_grad_batch(args, dims, *, shape, **params):
  (dy,), (d,) = args, dims
  size = dy.shape[d]
  return tfops.StridedSliceGrad(rules.to_front(dy, d), shape=(size,) + rules.sizes(shape),
                                **_shift_spec(params)), 0


StridedSliceGrad = define_op(
    "StridedSliceGrad", _strided_slice_grad_impl, family=FAMILY,
    static=("shape", "begin", "end", "strides"), attrs=_MASKS, linear=True,
    lowering=emit.direct_lowering(_strided_slice_grad_build, _strided_slice_grad_impl),
    transpose=lambda ct, dy, *, shape, **params: [tfops.StridedSlice(ct, **params)],
    batching=_strided_slice_grad_batch,
    spec=lambda st: st.Spec(_strided_slice_grad_calls(st)))


# --- property-test strategies (hypothesis is imported lazily) ---------------------


def _slice_calls(st):
  hst = lazy_hst()

  @st.composite
  def calls(draw):
    x = draw(st.arrays(st.dtypes(st.ALL), st.shapes()))
    begin, size = [], []
    for n in x.shape:
      b = draw(hst.integers(0, n))
      begin.append(b)
      size.append(draw(hst.integers(-1, n - b)))
    dtype = draw(st.dtypes(INDEX_DTYPES))  # begin and size share the Index attr
    return {"input": x, "begin": np.array(begin, np.int64).astype(dtype),
            "size": np.array(size, np.int64).astype(dtype)}
  return calls()


def _slice_spec_strategy(st):
  """Draws ``(shape, spec_kwargs)`` for StridedSlice: any mask combination TF accepts."""
  hst = lazy_hst()

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
