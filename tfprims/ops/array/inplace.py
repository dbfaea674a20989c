"""Updates of rows and slices of a value: InplaceAdd, InplaceSub, InplaceUpdate and
TensorStridedSliceUpdate (on values; the variable writers are in
tfprims/ops/variable_updates.py).

The Inplace ops write rows ``i`` of ``x``; TF's kernel wraps each row index into
``[0, x.shape[0])`` Python-style (``-1`` is the last row, ``n`` the first), so no
index is out of range. Duplicates accumulate (add, sub) or the last one wins
(update). TensorStridedSliceUpdate replaces the slice ``input[begin:end:strides]``
(``strided_slice_plan`` of slicing.py, all masks) by ``value`` broadcast to it.

All four are linear in (x, v) / (input, value): their JVP is the op on the
tangents; transposes use ``tf.Gather`` (rows, taken ``tf.FloorMod`` the row count)
and ``tf.StridedSlice``; TF registers no gradient for the Inplace ops, whose
derivatives are checked against central differences.
"""

from __future__ import annotations

import functools

import jax
import numpy as np
from jax.interpreters import ad
import jax.numpy as jnp

from tfprims import rules
from tfprims.core import register_op, tfops
from tfprims.ops.array._common import FAMILY
from tfprims.ops.array.scatter import scatter_nd_values
from tfprims.ops.array.slicing import (
  _MASKS,
  _shift_spec,
  positioned,
  runtime_params,
  strided_slice_plan,
)
from tfprims.ops.shared_specs import lazy_hst
from tfprims.rules import U

# --- InplaceAdd, InplaceSub, InplaceUpdate ----------------------------------------------


def _inplace(op_type, kind):
  def impl(x, i, v):
    if i.ndim != 1:
      raise ValueError(f"{op_type}: i must be a vector. {list(i.shape)}")
    if x.ndim == 0 or tuple(v.shape) != (i.shape[0],) + tuple(x.shape[1:]):
      raise ValueError(
        f"{op_type}: x and v shape doesn't match: {list(x.shape)} vs. "
        f"{list(v.shape)} (v must be [len(i)] + x.shape[1:])"
      )
    n = x.shape[0]
    if n == 0 or i.shape[0] == 0:
      return x
    rows = jnp.mod(i.astype(jnp.int32), n)  # Python-style: TF's kernel wraps
    return scatter_nd_values(kind, x, rows[:, None], v, op_type)

  impl.__doc__ = {
    "add": "x with v added to rows i (wrapped into range; duplicates add).",
    "sub": "x with v subtracted from rows i (wrapped; duplicates add up).",
    "update": "x with rows i replaced by v (wrapped; the last duplicate wins).",
  }[kind]
  return impl


def _inplace_jvp(op_type):
  def rule(primals, tangents):
    (x, i, v), (tx, _, tv) = primals, tangents
    op = getattr(tfops, op_type)
    out = op(x, i, v)
    if type(tx) is ad.Zero and type(tv) is ad.Zero:
      return out, rules.zero_tangent(out)
    return out, op(rules.instantiate(tx), i, rules.instantiate(tv))

  return rule


def _inplace_transpose(op_type, kind):
  def rule(ct, x, i, v):
    ct = rules.instantiate(ct)
    xshape, vshape, dt = rules.shape_of(x), rules.shape_of(v), rules.dtype_of(v)
    cx = cv = None
    if U(x):
      cx = ct if kind != "update" else getattr(tfops, op_type)(ct, i, rules.zeros(vshape, dt))
    if U(v):
      if xshape[0] == 0:
        cv = rules.zeros(vshape, dt)
      else:
        rows = tfops.FloorMod(i, np.array(xshape[0], rules.dtype_of(i)))
        cv = tfops.Gather(ct, rows, validate_indices=True)
        if kind == "sub":
          cv = tfops.Neg(cv)
        if kind == "update":
          mask = rules.last_writer_mask(tfops.ExpandDims(rows, axis=-1), xshape[:1])
          mask = tfops.Cast(mask, DstT=dt, Truncate=False)
          cv = tfops.Mul(cv, rules.reshape(mask, vshape[:1] + (1,) * (len(vshape) - 1)))
    return [cx, None, cv]

  return rule


def _inplace_batch(op_type):
  def rule(args, dims):
    (x, i, v), (dx, di, dv) = args, dims
    size = rules.batch_size(args, dims)
    op = getattr(tfops, op_type)
    x, v = rules.with_batch_axis(x, dx, size), rules.with_batch_axis(v, dv, size)
    if di is None:  # the batch axis rides along inside each row
      return op(rules.move_axes(x, [0], [1]), i, rules.move_axes(v, [0], [1])), 1
    # Batched rows: index the rows of the whole batch, flattened into one axis.
    xshape, vshape = rules.shape_of(x), rules.shape_of(v)
    n, m = xshape[1], vshape[1]
    if n == 0:
      return x, 0
    dt = rules.dtype_of(i)
    i = tfops.AddV2(
      tfops.FloorMod(rules.to_front(i, di), np.array(n, dt)),
      (np.arange(size, dtype=dt) * n)[:, None],
    )
    out = op(
      rules.reshape(x, (size * n,) + xshape[2:]),
      rules.reshape(i, (size * m,)),
      rules.reshape(v, (size * m,) + vshape[2:]),
    )
    return rules.reshape(out, xshape), 0

  return rule


def _define_inplace(op_type, kind, dtype_names):
  return register_op(
    op_type,
    _inplace(op_type, kind),
    family=FAMILY,
    jvp=_inplace_jvp(op_type),
    transpose=_inplace_transpose(op_type, kind),
    batching=_inplace_batch(op_type),
    spec=lambda st: st.Spec(
      _inplace_calls(st, dtype_names),
      grad_oracle="fd",
      note="TF registers no gradient: derivatives are checked against TF's central differences",
    ),
  )


_NUMBERS = (
  "float16",
  "bfloat16",
  "float32",
  "float64",
  "int8",
  "int16",
  "int32",
  "int64",
  "uint8",
  "uint16",
  "uint32",
  "uint64",
  "complex64",
  "complex128",
)

InplaceAdd = _define_inplace("InplaceAdd", "add", _NUMBERS)
InplaceSub = _define_inplace("InplaceSub", "sub", _NUMBERS)
InplaceUpdate = _define_inplace("InplaceUpdate", "update", _NUMBERS + ("bool",))


# --- TensorStridedSliceUpdate ------------------------------------------------------------


def _slice_update_plan(shape, params):
  plan = strided_slice_plan(
    shape, params["begin"], params["end"], params["strides"], *(params[m] for m in _MASKS)
  )
  ranges = [
    np.arange(first, first + count * step, step, dtype=np.int64)[:count]
    for first, count, step in plan.dims
  ]
  return plan, ranges


def _slice_update_impl(input, value, *positions, **params):
  """input with the strided slice replaced by value (broadcast to the slice's shape).

  Runtime ``positions`` (begin, end): the window they position is cut out with
  ``lax.dynamic_slice``, updated by the static spec, and written back."""
  input = jnp.asarray(input)
  if positions:
    starts, sizes, _ = positioned(input.shape, positions[0], params)
    spec = {k: v for k, v in params.items() if k != "sizes"}
    window = _slice_update_impl(jax.lax.dynamic_slice(input, starts, sizes), value, **spec)
    return jax.lax.dynamic_update_slice(input, window, starts)
  plan, ranges = _slice_update_plan(input.shape, params)
  try:
    value = jnp.broadcast_to(value, plan.final_shape)
  except ValueError:
    raise ValueError(
      f"TensorStridedSliceUpdate: Cannot broadcast value of shape "
      f"{list(value.shape)} to the slice's shape {list(plan.final_shape)}"
    ) from None
  counts = tuple(len(r) for r in ranges)
  if 0 in counts:
    return input
  return input.at[np.ix_(*ranges)].set(jnp.reshape(value, counts), unique_indices=True)


def slice_update_rules(op_type: str):
  """JVP and transpose of a strided-slice update (``op_type``: TensorStridedSliceUpdate,
  or ResourceStridedSliceAssign on a variable's value): linear in (input, value)."""

  def jvp(primals, tangents, **params):
    (x, v, *positions), (tx, tv, *_) = primals, tangents
    op = getattr(tfops, op_type)
    out = op(x, v, *positions, **params)
    if type(tx) is ad.Zero and type(tv) is ad.Zero:
      return out, rules.zero_tangent(out)
    return out, op(rules.instantiate(tx), rules.instantiate(tv), *positions, **params)

  def transpose(ct, x, v, *positions, **params):
    ct = rules.instantiate(ct)
    vshape = rules.shape_of(v)
    cx = (
      getattr(tfops, op_type)(ct, rules.zeros(vshape, rules.dtype_of(ct)), *positions, **params)
      if U(x)
      else None
    )
    cv = rules.unbroadcast(tfops.StridedSlice(ct, *positions, **params), vshape) if U(v) else None
    return [cx, cv] + [None] * len(positions)

  return jvp, transpose


def positioned_update_interpret(op, variable: bool = False):
  """The hook of a strided-slice update (``op``) whose runtime begin/end only
  position (``x[i] = v``, ``x[a:a + 2] = v``): bound with begin and end as operands.
  ``variable``: the first input is a variable's handle, whose value is updated."""
  from tfprims import folding
  from tfprims.interpreter import bind_node, run_check

  def interpret(ctx, node, inputs):
    x, begin, end, strides, value = inputs
    if variable:
      from tfprims.ops.variables import expect_handle

      key = expect_handle(node, x).key
      x = ctx.state[key]
    known = [folding.known_value(v) is not None for v in (begin, end, strides)]
    if all(known) or not known[2]:
      (out,) = bind_node(ctx, op, node, [x, begin, end, strides, value])
    else:
      params = runtime_params(ctx, node, begin, end, strides)
      run_check(tfops.StridedSlice, node, [x, begin, end], params)
      out = op(x, value, begin, end, **params)
    if variable:
      ctx.state[key] = out
      return []
    return [out]

  return interpret


def _slice_update_batch(args, dims, **params):
  if len(args) > 2:  # runtime positions
    if any(d is not None for d in dims[2:]):  # per example: jax.vmap's scatter
      return jax.vmap(functools.partial(_slice_update_impl, **params), in_axes=tuple(dims))(
        *args
      ), 0
    size = rules.batch_size(args, dims)
    (x, v, *positions), (dx, dv, *_) = args, dims
    vshape = rules.unbatched_shape(v, dv)
    # the runtime entries' extents are the spec's placeholders (begin 0, end the extent)
    rank = len(_slice_update_plan(rules.unbatched_shape(x, dx), params)[0].final_shape)
    v = rules.reshape(
      rules.with_batch_axis(v, dv, size), (size,) + (1,) * (rank - len(vshape)) + vshape
    )
    positions = [jnp.concatenate([jnp.zeros((1,), p.dtype), p]) for p in positions]
    return tfops.TensorStridedSliceUpdate(
      rules.with_batch_axis(x, dx, size), v, *positions, **_shift_spec(params)
    ), 0
  (x, v), (dx, dv) = args, dims
  size = rules.batch_size(args, dims)
  plan, _ = _slice_update_plan(rules.unbatched_shape(x, dx), params)
  vshape = rules.unbatched_shape(v, dv)
  v = rules.with_batch_axis(v, dv, size)
  # value broadcasts against the slice from the right: align it under the batch axis.
  v = rules.reshape(v, (size,) + (1,) * (len(plan.final_shape) - len(vshape)) + vshape)
  return tfops.TensorStridedSliceUpdate(
    rules.with_batch_axis(x, dx, size), v, **_shift_spec(params)
  ), 0


_SLICE_UPDATE_RULES = slice_update_rules("TensorStridedSliceUpdate")

TensorStridedSliceUpdate = register_op(
  "TensorStridedSliceUpdate",
  _slice_update_impl,
  family=FAMILY,
  static=("begin", "end", "strides"),
  attrs=_MASKS,
  jvp=_SLICE_UPDATE_RULES[0],
  transpose=_SLICE_UPDATE_RULES[1],
  batching=_slice_update_batch,
  interpret=rules.per_op(positioned_update_interpret),
  spec=lambda st: st.Spec(_slice_update_calls(st)),
)


# --- property-test strategies (hypothesis is imported lazily) ---------------------


def _inplace_calls(st, dtype_names):
  hst = lazy_hst()

  @st.composite
  def calls(draw):
    dtype = draw(st.dtypes(dtype_names))
    shape = tuple(draw(st.shapes(min_rank=1, max_rank=3)))
    m = draw(hst.integers(0, 4))
    n = shape[0]
    i = draw(st.arrays(np.dtype("int32"), (m,), min_value=-2 * n - 1, max_value=2 * n + 1))
    return {
      "x": draw(st.arrays(dtype, shape)),
      "i": i,
      "v": draw(st.arrays(dtype, (m,) + shape[1:])),
    }

  return calls()


def _slice_update_calls(st):
  from tfprims.ops.array.slicing import _slice_spec_strategy

  hst = lazy_hst()

  @st.composite
  def calls(draw):
    shape, kwargs = draw(_slice_spec_strategy(st))
    plan = strided_slice_plan(
      shape, kwargs["begin"], kwargs["end"], kwargs["strides"], *(kwargs[m] for m in _MASKS)
    )
    final = plan.final_shape
    # value: the slice's shape, or a shape broadcasting to it (trailing dims, size 1s).
    drop = draw(hst.integers(0, len(final)))
    vshape = tuple(1 if draw(hst.integers(0, 3)) == 0 else d for d in final[drop:])
    dtype = draw(st.dtypes(st.ALL))
    return {
      "input": draw(st.arrays(dtype, shape)),
      **kwargs,
      "value": draw(st.arrays(dtype, vshape)),
    }

  return calls()
