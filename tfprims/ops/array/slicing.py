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

import functools
from typing import NamedTuple, Optional

import jax
import jax.numpy as jnp
import numpy as np

from tfprims import emit, errors, folding, rules, value_analysis
from tfprims.core import register_op, tfops
from tfprims.ops.array._common import FAMILY
from tfprims.ops.shared import ints
from tfprims.ops.shared_specs import INDEX_DTYPES, lazy_hst


def _slice_bounds(shape, begin, size) -> tuple[tuple, tuple]:
  begin, size = rules.sizes(begin), rules.sizes(size)  # symbolic dims of jax.export kept
  if len(begin) != len(shape) or len(size) != len(shape):
    raise ValueError(
      f"Slice: expected begin and size of length {len(shape)}, got {begin} and {size}"
    )
  sizes = []
  for b, s, n in zip(begin, size, shape):
    s = n - b if s == -1 else s
    if not (0 <= b <= n and 0 <= s and b + s <= n):
      raise ValueError(
        f"Slice: expected begin {begin} and size {size} to be within the input shape {tuple(shape)}"
      )
    sizes.append(s)
  return begin, tuple(sizes)


def _dynamic_sizes(shape, begin, size) -> tuple:
  """The sizes of a Slice whose ``begin`` is a runtime vector: static, none -1."""
  size = rules.sizes(size)
  if begin.shape != (len(shape),) or len(size) != len(shape):
    raise ValueError(
      f"Slice: expected begin and size of length {len(shape)}, got "
      f"shapes {begin.shape} and {len(size)}"
    )
  if any(not 0 <= s <= n for s, n in zip(size, shape)):
    raise ValueError(f"Slice: size {size} does not fit the input shape {tuple(shape)}")
  return size


def _slice_build(B, input, *dynamic_begin, begin=None, size):
  if dynamic_begin:  # the runtime-begin form: _dynamic_slice
    return None
  b, s = _slice_bounds(input.shape, begin, size)
  return B.slice(input, b, tuple(i + j for i, j in zip(b, s)))


def _dynamic_slice(input, dynamic_begin, *, size, begin=None):
  size = _dynamic_sizes(input.shape, dynamic_begin, size)
  return jax.lax.dynamic_slice(input, list(dynamic_begin), size)


_slice_impl = emit.traced(_slice_build, default=_dynamic_slice)


def _slice_transpose(ct, x, *dynamic_begin, begin=None, size):
  shape = rules.shape_of(x)
  if dynamic_begin:  # ct placed where the slice was read (clamped as it was)
    (b,) = dynamic_begin
    zeros = rules.zeros(shape, ct.dtype)
    return [tfops.XlaDynamicUpdateSlice(zeros, ct, b), None]
  b, s = _slice_bounds(shape, begin, size)
  return [tfops.Pad(ct, paddings=tuple((i, n - i - j) for i, j, n in zip(b, s, shape)))]


def _slice_batch(args, dims, *, begin=None, size):
  x, d = rules.to_front(args[0], dims[0]), dims[0]
  if begin is not None:
    return tfops.Slice(x, begin=(0,) + rules.sizes(begin), size=(-1,) + rules.sizes(size)), 0
  (b,), (db,) = args[1:], dims[1:]
  if db is not None:  # a begin per example: a gather, as jax.vmap makes it
    return jax.vmap(functools.partial(_dynamic_slice, size=size), in_axes=(d, db))(args[0], b), 0
  b = jnp.concatenate([jnp.zeros((1,), b.dtype), b])
  return tfops.Slice(x, b, size=(x.shape[0],) + rules.sizes(size)), 0


def _slice_check(input, *dynamic_begin, begin=None, size):
  """A runtime begin must keep the slice inside the input (TF raises; XLA clamps)."""
  if not dynamic_begin:
    return None
  (b,) = dynamic_begin
  size = np.asarray(_dynamic_sizes(input.shape, b, size), np.int64)
  shape = np.asarray(input.shape, np.int64)
  return (
    jnp.any((b < 0) | (b > jnp.asarray(shape - size, b.dtype))),
    f"Slice: expected begin and size {tuple(size)} to be within the input shape "
    f"{tuple(input.shape)}",
  )


def _slice_interpret(ctx, node, inputs):
  """A runtime ``begin`` with a static ``size`` positions the slice without deciding
  its shape: it binds ``tf.Slice[size=...]`` with begin as an operand
  (``lax.dynamic_slice``). Otherwise begin and size are params."""
  from tfprims.interpreter import bind_node, run_check

  x, begin, size = inputs
  if folding.known_value(begin) is not None or folding.known_value(size) is None:
    return bind_node(ctx, Slice, node, inputs)
  size = rules.sizes(folding.known_value(size))
  if -1 in size:
    raise errors.StaticInputError(
      node.op,
      node.name,
      "begin",
      "size -1 (to the end of a dim) with a runtime begin "
      "makes the output shape depend on begin's value; give the size explicitly",
    )
  params = dict(size=size)
  run_check(Slice, node, [x, begin], params)
  return [Slice(x, begin, **params)]


Slice = register_op(
  "Slice",
  _slice_impl,
  family=FAMILY,
  static=("begin", "size"),
  linear_values=True,
  build=_slice_build,
  jvp=rules.per_op(rules.positioned_jvp),
  transpose=_slice_transpose,
  batching=_slice_batch,
  check=_slice_check,
  interpret=_slice_interpret,
  spec=lambda st: st.Spec(_slice_calls(st)),
)


class StridedPlan(NamedTuple):
  """A StridedSlice spec made dense against an input shape.

  ``dims[i] = (first, count, step)``: input dim ``i`` contributes elements
  ``first, first + step, ...`` (``count`` of them); ``final_shape`` is the
  output shape after new axes are added and shrunk axes removed; ``sources[i]``:
  the spec entry input dim ``i`` takes its begin/end from (None under an
  ellipsis), and whether that entry shrinks it.
  """

  dims: tuple
  final_shape: tuple
  sources: tuple = ()


_NEW_AXIS, _SHRINK = -1, -2


def strided_slice_plan(
  shape,
  begin,
  end,
  strides,
  begin_mask=0,
  end_mask=0,
  ellipsis_mask=0,
  new_axis_mask=0,
  shrink_axis_mask=0,
) -> StridedPlan:
  """TF's ValidateStridedSliceOp (strided_slice_op.cc), for static specs; a dim of
  ``shape`` (or a bound) may be symbolic (jax.export), and so may the plan's sizes."""
  begin, end, strides = rules.sizes(begin), rules.sizes(end), ints(strides)
  if not len(begin) == len(end) == len(strides):
    raise ValueError(
      f"StridedSlice: begin {begin}, end {end} and strides {strides} must have the same length"
    )
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
  sources = [None] * rank
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
        raise ValueError(
          f"StridedSlice: index out of range using input dim {full}; input has only {rank} dims"
        )
      d_begin[full], d_end[full], d_strides[full] = begin[i], end[i], strides[i]
      sources[full] = (i, bool(shrink_axis_mask & bit))
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
  return StridedPlan(tuple(plan), tuple(final), tuple(sources))


_MASKS = ("begin_mask", "end_mask", "ellipsis_mask", "new_axis_mask", "shrink_axis_mask")


def _plan_for(shape, params) -> StridedPlan:
  return strided_slice_plan(
    shape, params["begin"], params["end"], params["strides"], *(params[m] for m in _MASKS)
  )


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


def _strided_slice_build(B, input, *positions, **params):
  if positions:  # the runtime-begin form: _dynamic_strided_slice
    return None
  return _apply_plan(B, input, _plan_for(input.shape, params))


# --- a runtime begin/end that positions without deciding the shape -----------------
#
# ``x[i]``, ``x[:, i]``, ``x[a:a + h]`` with runtime ``i``, ``a``: each entry of the
# spec shrinks its dim (size 1 wherever begin is; end is ignored), has both begin and
# end masked (values ignored), or is a range whose ``end - begin`` the value analysis
# proves constant. The op then binds ``tf.StridedSlice[strides, masks, sizes]`` with
# begin and end as operands (``sizes``: per entry the extent its runtime begin
# positions, -1 where none does): ``lax.dynamic_slice``, then the static plan.


def runtime_spec(params, begin, end) -> Optional[tuple]:
  """``(begin, end, sizes)`` of a spec with runtime values: ``begin``/``end`` hold the
  analysed forms of the runtime inputs (ints where known; None: nothing known).
  ``sizes[i]`` is the extent a runtime begin positions: 1 on a shrunk dim, ``end -
  begin`` on a range with a positive stride where it is constant, -1 on entries whose
  values are known or ignored (masked, ellipsis, new axis), which keep them (0 where
  ignored) in the returned begin and end. None when a runtime value decides the shape."""
  known = lambda v: v is not None and not isinstance(v, value_analysis.Lin)
  at = lambda forms, i: None if forms is None else forms[i]
  b_out, e_out, sizes = [], [], []
  for i, stride in enumerate(params["strides"]):
    bit = 1 << i
    b, e = at(begin, i), at(end, i)
    b_masked, e_masked = params["begin_mask"] & bit, params["end_mask"] & bit
    if params["ellipsis_mask"] & bit or params["new_axis_mask"] & bit:
      b_out.append(0), e_out.append(0), sizes.append(-1)
    elif params["shrink_axis_mask"] & bit:
      if known(b):
        b_out.append(int(b)), e_out.append(int(b) + 1), sizes.append(-1)
      else:
        b_out.append(0), e_out.append(1), sizes.append(1)
    elif (b_masked or known(b)) and (e_masked or known(e)):
      b_out.append(0 if b_masked else int(b)), e_out.append(0 if e_masked else int(e))
      sizes.append(-1)
    else:
      d = None if b_masked or e_masked or b is None or e is None else e - b
      if not isinstance(d, (int, np.integer)) or d < 0 or stride <= 0:
        return None
      b_out.append(0), e_out.append(int(d)), sizes.append(int(d))
  return tuple(b_out), tuple(e_out), tuple(sizes)


def positioned(shape, begin, params):
  """``(starts, slice_sizes, plan)`` of a runtime-positioned StridedSlice: the
  ``lax.dynamic_slice`` starts (TF's wrap of a negative begin) and sizes over
  ``shape`` for the entries ``params["sizes"]`` positions, and the static plan on
  that slice (their begin 0 and end the extent; the other entries as they are)."""
  sizes = params["sizes"]
  spec = {k: params[k] for k in ("begin", "end", "strides", *_MASKS)}
  plan = _plan_for(shape, spec)
  starts, slice_sizes = [], list(shape)
  for dim, source in enumerate(plan.sources):
    if source is not None and sizes[source[0]] >= 0:
      b = begin[source[0]]
      starts.append(jnp.where(b < 0, b + shape[dim], b))
      slice_sizes[dim] = sizes[source[0]]
    else:
      starts.append(jnp.zeros((), begin.dtype))
  slice_sizes = tuple(slice_sizes)
  return starts, slice_sizes, _plan_for(slice_sizes, spec)


def _dynamic_strided_slice(input, begin_operand, end_operand, **params):
  starts, slice_sizes, plan = positioned(input.shape, begin_operand, params)
  return _apply_plan(emit.LAX, jax.lax.dynamic_slice(input, starts, slice_sizes), plan)


_strided_slice_impl = emit.traced(_strided_slice_build, default=_dynamic_strided_slice)


def _strided_slice_transpose(ct, x, *positions, **params):
  shape = rules.shape_of(x)
  if not positions:
    return [tfops.StridedSliceGrad(ct, shape=shape, **params)]
  starts, slice_sizes, _ = positioned(shape, positions[0], params)
  params.pop("sizes")
  placed = tfops.StridedSliceGrad(ct, shape=slice_sizes, **params)
  return [
    tfops.XlaDynamicUpdateSlice(rules.zeros(shape, ct.dtype), placed, jnp.stack(starts)),
    None,
    None,
  ]


def _shift_spec(params):
  """The spec with a full-range entry for a leading batch axis prepended."""
  new = dict(params)
  for name in ("begin", "end"):
    if name in params:
      new[name] = (0,) + rules.sizes(params[name])
  new["strides"] = (1,) + ints(params["strides"])
  if "sizes" in params:  # the dynamic form: the batch entry is masked
    new["sizes"] = (-1,) + tuple(params["sizes"])
  for m in _MASKS:
    new[m] = params[m] << 1
  new["begin_mask"] |= 1
  new["end_mask"] |= 1
  return new


def _strided_slice_batch(args, dims, **params):
  x = rules.to_front(args[0], dims[0])
  if len(args) == 1:
    return tfops.StridedSlice(x, **_shift_spec(params)), 0
  if any(d is not None for d in dims[1:]):  # positions per example: jax.vmap's gather
    return jax.vmap(functools.partial(_dynamic_strided_slice, **params), in_axes=tuple(dims))(
      *args
    ), 0
  positions = [jnp.concatenate([jnp.zeros((1,), p.dtype), p]) for p in args[1:]]
  return tfops.StridedSlice(x, *positions, **_shift_spec(params)), 0


def strided_slice_check(input, *positions, **params):
  """Runtime positions must keep the slice where TF reads it: a shrunk dim's index
  inside the dim, a range inside it without wrapping (TF raises or clips; XLA clamps
  the start)."""
  if not positions:
    return None
  begin, sizes = positions[0], params["sizes"]
  plan = _plan_for(input.shape, params)
  bad = jnp.zeros((), bool)
  for dim, source in enumerate(plan.sources):
    if source is None or sizes[source[0]] < 0:
      continue
    b, n, size = begin[source[0]], input.shape[dim], sizes[source[0]]
    if params["shrink_axis_mask"] >> source[0] & 1:
      bad = bad | (b < -n) | (b >= n)
    else:  # TF's end = begin + size: both must wrap alike and stay inside the dim
      start = jnp.where(b < 0, b + n, b)
      bad = bad | (start < 0) | (start + size > n) | ((b < 0) & (b + size >= 0) & (size > 0))
  return bad, (
    f"StridedSlice: slice index out of bounds for a dim of shape {input.shape} "
    f"(runtime positions of extents {sizes})"
  )


def runtime_params(ctx, node, begin, end, strides, **extra):
  """The dynamic form's params of a (Grad) node with runtime begin/end, or a
  StaticInputError naming the input that decides the shape."""
  from tfprims.interpreter import AttrView

  attrs = AttrView(node)
  params = {m: int(attrs[m]) for m in _MASKS}
  params.update(extra, strides=ints(folding.known_value(strides)))
  spec = runtime_spec(
    params, value_analysis.elements(ctx, begin), value_analysis.elements(ctx, end)
  )
  if spec is None:
    raise errors.StaticInputError(
      node.op,
      node.name,
      "begin" if folding.known_value(begin) is None else "end",
      "runtime begin/end decide no shape only where they index a dim it shrinks (x[i]), "
      "both are masked (x[:, i]) or end - begin is provably constant (x[a:a + 2])",
    )
  params["begin"], params["end"], params["sizes"] = spec
  return params


def _strided_slice_interpret(ctx, node, inputs):
  """Begin/end known at trace time: params. Runtime ones that only position
  (``x[i]``, ``x[a:a + h]``): operands of ``tf.StridedSlice[strides, masks, sizes]``."""
  from tfprims.interpreter import bind_node, run_check

  x, begin, end, strides = inputs
  known = [folding.known_value(v) is not None for v in (begin, end, strides)]
  if all(known) or not known[2]:
    return bind_node(ctx, StridedSlice, node, inputs)
  params = runtime_params(ctx, node, begin, end, strides)
  run_check(StridedSlice, node, [x, begin, end], params)
  return [StridedSlice(x, begin, end, **params)]


StridedSlice = register_op(
  "StridedSlice",
  _strided_slice_impl,
  family=FAMILY,
  static=("begin", "end", "strides"),
  attrs=_MASKS,
  linear_values=True,
  build=_strided_slice_build,
  jvp=rules.per_op(rules.positioned_jvp),
  transpose=_strided_slice_transpose,
  batching=_strided_slice_batch,
  check=strided_slice_check,
  interpret=_strided_slice_interpret,
  spec=lambda st: st.Spec(_strided_slice_calls(st)),
)


def _strided_slice_grad_build(B, dy, *positions, shape, **params):
  if positions:  # the runtime-begin form: _dynamic_strided_slice_grad
    return None
  shape = rules.sizes(shape)
  plan = _plan_for(shape, params)
  if tuple(dy.shape) != plan.final_shape:
    raise ValueError(
      f"StridedSliceGrad: dy has shape {tuple(dy.shape)}, the slice of "
      f"{shape} has shape {plan.final_shape}"
    )
  return _scatter_plan(B, dy, shape, plan)


def _dynamic_strided_slice_grad(dy, begin_operand, end_operand, *, shape, **params):
  shape = rules.sizes(shape)
  starts, slice_sizes, plan = positioned(shape, begin_operand, params)
  placed = _scatter_plan(emit.LAX, dy, slice_sizes, plan)
  return jax.lax.dynamic_update_slice(jnp.zeros(shape, dy.dtype), placed, starts)


_strided_slice_grad_impl = emit.traced(
  _strided_slice_grad_build, default=_dynamic_strided_slice_grad
)


def _strided_slice_grad_batch(args, dims, *, shape, **params):
  dy = rules.to_front(args[0], dims[0])
  size = dy.shape[0]
  if len(args) == 1:
    return tfops.StridedSliceGrad(dy, shape=(size,) + rules.sizes(shape), **_shift_spec(params)), 0
  if any(d is not None for d in dims[1:]):  # positions per example: jax.vmap's scatter
    return jax.vmap(
      functools.partial(_dynamic_strided_slice_grad, shape=shape, **params), in_axes=tuple(dims)
    )(*args), 0
  positions = [jnp.concatenate([jnp.zeros((1,), p.dtype), p]) for p in args[1:]]
  return tfops.StridedSliceGrad(
    dy, *positions, shape=(size,) + rules.sizes(shape), **_shift_spec(params)
  ), 0


def _strided_slice_grad_interpret(ctx, node, inputs):
  """As StridedSlice's hook: runtime begin/end that only position are operands
  (``lax.dynamic_update_slice`` of the placed gradient)."""
  from tfprims.interpreter import bind_node

  shape, begin, end, strides, dy = inputs
  known = [folding.known_value(v) is not None for v in (shape, begin, end, strides)]
  if all(known) or not (known[0] and known[3]):
    return bind_node(ctx, StridedSliceGrad, node, inputs)
  params = runtime_params(
    ctx, node, begin, end, strides, shape=rules.sizes(folding.known_value(shape))
  )
  return [StridedSliceGrad(dy, begin, end, **params)]


def _strided_slice_grad_transpose(ct, dy, *positions, shape, **params):
  return [tfops.StridedSlice(ct, *positions, **params)] + [None] * len(positions)


StridedSliceGrad = register_op(
  "StridedSliceGrad",
  _strided_slice_grad_impl,
  family=FAMILY,
  static=("shape", "begin", "end", "strides"),
  attrs=_MASKS,
  linear_values=True,
  build=_strided_slice_grad_build,
  jvp=rules.per_op(rules.positioned_jvp),
  transpose=_strided_slice_grad_transpose,
  batching=_strided_slice_grad_batch,
  interpret=_strided_slice_grad_interpret,
  spec=lambda st: st.Spec(_strided_slice_grad_calls(st)),
)


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
    return {
      "input": x,
      "begin": np.array(begin, np.int64).astype(dtype),
      "size": np.array(size, np.int64).astype(dtype),
    }

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
    plan = strided_slice_plan(
      shape, kwargs["begin"], kwargs["end"], kwargs["strides"], *(kwargs[m] for m in _MASKS)
    )
    dy = draw(st.arrays(st.dtypes(st.ALL), plan.final_shape))
    return {"shape": np.asarray(shape, kwargs["begin"].dtype).reshape(-1), **kwargs, "dy": dy}

  return calls()
