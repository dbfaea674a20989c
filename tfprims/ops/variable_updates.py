"""Variable writers and nd reads: ResourceScatter{Add,Sub,Mul,Div,Min,Max,Update},
ResourceScatterNd{Add,Sub,Min,Max,Update}, ResourceStridedSliceAssign and
ResourceGatherNd.

Each op is a primitive over the variable's *value* (``tf.ResourceScatterAdd``
takes the value, indices and updates and returns the new value) with an
``interpret`` hook that reads ``ctx.state[handle.key]``, binds the primitive and
writes the result back (``writes_state``: control flow threads the variable, and
``new_params`` carries it). ResourceGatherNd reads (``reads_state``).

The values are those of the array family's ops, reached through ``tfops``:
ResourceScatterNd* are TensorScatter*, ResourceScatter* (rows: axis 0) are
TensorScatter* with ``indices[..., None]`` and the updates broadcast (a scalar
update is allowed), ResourceStridedSliceAssign is TensorStridedSliceUpdate,
ResourceGatherNd is GatherNd. Out-of-range indices are dropped (gathers give
zeros), and known values raise with TF's message (eager calls; under jit with
``runtime_checks``; docs/semantics/state.md).

TF registers no gradient through variable writes; these primitives have
TF-named rules all the same (grads of a converted training step flow through
them), checked against TF's central differences in the property tests.
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax
from jax.interpreters import ad

from tfprims import rules
from tfprims.core import register_op, tfops
from tfprims.interpreter import bind_node
from tfprims.ops.array.inplace import positioned_update_interpret, slice_update_rules
from tfprims.ops.variables import expect_handle
from tfprims.rules import U
from tfprims.errors import import_tensorflow

FAMILY = "state"


def _writer_interpret(ctx, node, inputs):
  """The hook of a variable writer: the variable's value replaces the handle (the
  op's first input), the node runs as any primitive op (checks included), and its
  result is the variable's new value."""
  handle = expect_handle(node, inputs[0])
  (new,) = bind_node(ctx, getattr(tfops, node.op), node, [ctx.state[handle.key], *inputs[1:]])
  ctx.state[handle.key] = new
  return []


def _variable_oracle(op_type, value_arg):
  """TF oracle for the property runner: the drawn value becomes a tf.Variable, the raw
  op writes it, and the variable's new value is the output."""

  def oracle(**kwargs):
    tf = import_tensorflow()
    var = tf.Variable(kwargs.pop(value_arg))
    getattr(tf.raw_ops, op_type)(**{value_arg: var.handle}, **kwargs)
    return var.read_value()

  oracle.__name__ = f"{op_type}_on_a_variable"
  return oracle


_NOTE = (
  "the variable is drawn as its value; the oracle wraps it in a tf.Variable, "
  "applies the raw op and returns the variable's value. TF has no gradient "
  "through variable writes: derivatives are checked against central differences"
)


# --- rows (axis 0): ResourceScatter* -------------------------------------------------


def _rows_setup(op_type, value, indices, updates):
  if value.ndim == 0:
    raise ValueError(f"{op_type}: params must be at least 1-D, got shape []")
  full = tuple(indices.shape) + tuple(value.shape[1:])
  if updates.ndim and tuple(updates.shape) != full:
    raise ValueError(
      f"{op_type}: Must have updates.shape = indices.shape + "
      f"params.shape[1:] or updates.shape = [], got updates.shape "
      f"{list(updates.shape)}, indices.shape {list(indices.shape)}, "
      f"params.shape {list(value.shape)}"
    )
  return jnp.expand_dims(indices, -1), jnp.broadcast_to(updates, full)


def _rows_impl(op_type, kind):
  tensor_op = {
    "add": "TensorScatterAdd",
    "sub": "TensorScatterSub",
    "min": "TensorScatterMin",
    "max": "TensorScatterMax",
    "update": "TensorScatterUpdate",
  }.get(kind)

  def impl(resource, indices, updates):
    idx, upd = _rows_setup(op_type, resource, indices, updates)
    if tensor_op is not None:
      return getattr(tfops, tensor_op).impl(resource, idx, upd, bad_indices_policy="")
    # Mul, Div: in order, like TF (a division multiplies by the reciprocal).
    resource = jnp.asarray(resource)
    n = resource.shape[0]
    flat = jnp.reshape(indices, (-1,))
    flat = flat.astype(jnp.int32) if flat.dtype.itemsize < 4 else flat
    valid = (flat >= 0) & (flat < n)
    rows = jnp.where(valid, flat, np.asarray(n, flat.dtype))
    upd = jnp.reshape(upd, (flat.shape[0],) + resource.shape[1:])
    if kind == "mul":
      return resource.at[rows].multiply(upd, mode="drop")
    if jnp.issubdtype(resource.dtype, jnp.integer):
      # Truncating integer division by the product of the row's updates.
      product = jnp.ones_like(resource).at[rows].multiply(upd, mode="drop")
      return lax.div(resource, product)
    return resource.at[rows].multiply(1 / upd, mode="drop")

  impl.__doc__ = {
    "add": "The variable with updates added to rows indices (duplicates accumulate).",
    "sub": "The variable with updates subtracted from rows indices.",
    "mul": "The variable with rows indices multiplied by updates.",
    "div": "The variable with rows indices divided by updates.",
    "min": "The variable with rows indices the minimum of themselves and updates.",
    "max": "The variable with rows indices the maximum of themselves and updates.",
    "update": "The variable with rows indices replaced by updates (last duplicate wins).",
  }[kind]
  return impl


def _rows_check(kind):
  def check(resource, indices, updates):
    n = resource.shape[0]
    bad = jnp.any((indices < 0) | (indices >= n)) if indices.size else jnp.asarray(False)
    message = f"indices[i] = ... is not in [0, {n})"
    if kind == "div":
      zero = jnp.any(updates == 0) if updates.size else jnp.asarray(False)
      return bad | zero, message + " or updates must not contain 0"
    return bad, message

  return check


def _rows_cotangent(ct, i, u, negate=False, mask=None):
  """The updates' cotangent: ``tf.Gather`` of the rows' cotangent (summed for a
  scalar update)."""
  cu = tfops.Gather(ct, i, validate_indices=True)
  if negate:
    cu = tfops.Neg(cu)
  if mask is not None:
    cu = tfops.Mul(cu, mask)
  if not rules.shape_of(u):
    cu = rules.reduce_sum(cu, range(len(rules.shape_of(cu))))
  return cu


def _rows_add_transpose(negate):
  def rule(ct, x, i, u):
    ct = rules.instantiate(ct)
    return [ct if U(x) else None, None, _rows_cotangent(ct, i, u, negate) if U(u) else None]

  return rule


def _rows_update_transpose(op_type):
  def rule(ct, x, i, u):
    ct = rules.instantiate(ct)
    xshape, dt = rules.shape_of(x), rules.dtype_of(ct)
    cx = cu = None
    if U(x):
      cx = getattr(tfops, op_type)(ct, i, np.zeros((), dt))
    if U(u):
      ishape = rules.shape_of(i)
      mask = rules.last_writer_mask(tfops.ExpandDims(i, axis=-1), xshape[:1])
      mask = rules.reshape(
        tfops.Cast(mask, DstT=dt, Truncate=False), ishape + (1,) * (len(xshape) - 1)
      )
      cu = _rows_cotangent(ct, i, u, mask=mask)
    return [cx, None, cu]

  return rule


def _mul_div_jvp(op_type, kind):
  """ResourceScatterMul: d(x * P) = P tx + x dP, dP the scatter-add of each update's
  tangent times the product of the other updates of its row (computed without
  division by zero: zero updates are counted apart). ResourceScatterDiv (TF refuses
  zero updates): d(x / P) = tx / P - out * scatter_add(tu / u)."""

  def rule(primals, tangents):
    (x, i, u), (tx, _, tu) = primals, tangents
    op = getattr(tfops, op_type)
    out = op(x, i, u)
    zx, zu = type(tx) is ad.Zero, type(tu) is ad.Zero
    if zx and zu:
      return out, rules.zero_tangent(out)
    t = None if zx else op(tx, i, u)  # linear in x: scaled rows
    if not zu:
      dt = rules.dtype_of(x)
      full = rules.shape_of(i) + rules.shape_of(x)[1:]
      uf, tu = rules.broadcast_to(u, full), rules.broadcast_to(tu, full)
      zeros = rules.zeros(rules.shape_of(x), dt)
      if kind == "mul":
        is0 = tfops.Equal(uf, np.zeros((), dt), incompatible_shape_error=True)
        u1 = tfops.SelectV2(is0, np.ones((), dt), uf)
        ones = tfops.Fill(np.ones((), dt), shape=rules.shape_of(x))
        nonzero = tfops.ResourceScatterMul(ones, i, u1)
        zero0 = tfops.Cast(is0, DstT=np.dtype("float32"), Truncate=False)
        count = tfops.ResourceScatterAdd(
          rules.zeros(rules.shape_of(x), np.dtype("float32")), i, zero0
        )
        others = tfops.Sub(tfops.Gather(count, i, validate_indices=True), zero0)
        excl = tfops.SelectV2(
          tfops.Greater(others, np.zeros((), np.float32)),
          np.zeros((), dt),
          tfops.RealDiv(tfops.Gather(nonzero, i, validate_indices=True), u1),
        )
        tu_part = tfops.Mul(x, tfops.ResourceScatterAdd(zeros, i, tfops.Mul(excl, tu)))
      else:
        tu_part = tfops.Neg(
          tfops.Mul(out, tfops.ResourceScatterAdd(zeros, i, tfops.RealDiv(tu, uf)))
        )
      t = tu_part if t is None else tfops.AddV2(t, tu_part)
    return out, t

  return rule


def _mul_div_transpose(op_type):
  """Transpose in the value alone (the op scales rows: it is its own transpose)."""

  def rule(ct, x, i, u):
    assert U(x) and not U(u)
    return [getattr(tfops, op_type)(rules.instantiate(ct), i, u), None, None]

  return rule


# Central differences step h = eps**(1/3) * max|input|, so their truncation error
# (h**2/6 times the third derivative) grows with the input's scale: a row multiplied or
# divided by two updates is cubic in them, and a float64 draw with |x| = 32 was seen off by
# 1.05e-7 (thorough run) while our exact JVP was 0.
_FD_CUBIC_ATOL = {"float64": 1e-6}


def _rows_oracle_spec(op_type, kind, dtype_names):
  def spec(st):
    return st.Spec(
      _rows_calls(st, kind, dtype_names),
      oracle=_variable_oracle(op_type, "resource"),
      grad_oracle="fd",
      note=_NOTE,
      **({"grad_atol": _FD_CUBIC_ATOL} if kind in ("mul", "div") else {}),
    )

  return spec


def _define_rows(op_type, kind, dtype_names):
  linear = kind in ("add", "sub", "update")
  if linear:
    jvp = rules.per_op(rules.scatter_linear_jvp)
    transpose = (
      _rows_update_transpose(op_type) if kind == "update" else _rows_add_transpose(kind == "sub")
    )
  elif kind in ("min", "max"):
    jvp, transpose = rules.per_op(rules.scatter_min_max_jvp, rows=True), None
  else:
    jvp, transpose = _mul_div_jvp(op_type, kind), _mul_div_transpose(op_type)
  return register_op(
    op_type,
    _rows_impl(op_type, kind),
    family=FAMILY,
    jvp=jvp,
    transpose=transpose,
    batching=rules.per_op(rules.scatter_rows_batching),
    check=_rows_check(kind),
    interpret=_writer_interpret,
    writes_state=True,
    spec=_rows_oracle_spec(op_type, kind, dtype_names),
  )


_REAL = (
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
)
_NUMBERS = _REAL + ("complex64", "complex128")

ResourceScatterAdd = _define_rows("ResourceScatterAdd", "add", _NUMBERS)
ResourceScatterSub = _define_rows("ResourceScatterSub", "sub", _NUMBERS)
ResourceScatterMul = _define_rows("ResourceScatterMul", "mul", _NUMBERS)
ResourceScatterDiv = _define_rows("ResourceScatterDiv", "div", _NUMBERS)
ResourceScatterMin = _define_rows("ResourceScatterMin", "min", _REAL)
ResourceScatterMax = _define_rows("ResourceScatterMax", "max", _REAL)
ResourceScatterUpdate = _define_rows("ResourceScatterUpdate", "update", _NUMBERS + ("bool",))


# --- index vectors: ResourceScatterNd* ------------------------------------------------


def _define_nd(op_type, tensor_op, dtype_names):
  kind = tensor_op[len("TensorScatter") :].lower()

  def impl(ref, indices, updates, *, bad_indices_policy):
    return getattr(tfops, tensor_op).impl(
      ref, indices, updates, bad_indices_policy=bad_indices_policy
    )

  impl.__doc__ = f"The variable's value after {tensor_op} (index vectors into its leading dims)."

  def check(ref, indices, updates, *, bad_indices_policy):
    return getattr(tfops, tensor_op).check(
      ref, indices, updates, bad_indices_policy=bad_indices_policy
    )

  if kind in ("min", "max"):
    jvp, transpose = rules.per_op(rules.scatter_min_max_jvp), None
  else:
    jvp = rules.per_op(rules.scatter_linear_jvp)
    transpose = (
      rules.per_op(rules.scatter_nd_update_transpose)
      if kind == "update"
      else rules.scatter_nd_add_transpose(kind == "sub")
    )
  return register_op(
    op_type,
    impl,
    family=FAMILY,
    attrs=("bad_indices_policy",),
    jvp=jvp,
    transpose=transpose,
    batching=rules.per_op(rules.scatter_nd_batching),
    check=check,
    interpret=_writer_interpret,
    writes_state=True,
    spec=lambda st: st.Spec(
      st.nd_scatter_calls(dtype_names, tensor_arg="ref", distinct=kind in ("min", "max")),
      oracle=_variable_oracle(op_type, "ref"),
      grad_oracle="fd",
      note=_NOTE,
    ),
  )


ResourceScatterNdAdd = _define_nd("ResourceScatterNdAdd", "TensorScatterAdd", _NUMBERS + ("bool",))
ResourceScatterNdSub = _define_nd("ResourceScatterNdSub", "TensorScatterSub", _NUMBERS + ("bool",))
ResourceScatterNdMin = _define_nd("ResourceScatterNdMin", "TensorScatterMin", _REAL)
ResourceScatterNdMax = _define_nd("ResourceScatterNdMax", "TensorScatterMax", _REAL)
ResourceScatterNdUpdate = _define_nd(
  "ResourceScatterNdUpdate", "TensorScatterUpdate", _NUMBERS + ("bool",)
)


# --- ResourceStridedSliceAssign ---------------------------------------------------------

_MASKS = ("begin_mask", "end_mask", "ellipsis_mask", "new_axis_mask", "shrink_axis_mask")


def _slice_assign_impl(ref, value, *positions, **params):
  """The variable with its strided slice replaced by value (TensorStridedSliceUpdate).

  ``positions``: a runtime begin and end."""
  return tfops.TensorStridedSliceUpdate.impl(ref, value, *positions, **params)


_SLICE_ASSIGN_JVP, _SLICE_ASSIGN_TRANSPOSE = slice_update_rules("ResourceStridedSliceAssign")


def _slice_assign_batch(args, dims, **params):
  # Under vmap the variable's value is a batched tensor: TensorStridedSliceUpdate's
  # batching rule applies (it re-binds tf.TensorStridedSliceUpdate with a shifted spec).
  out = jax.vmap(lambda *a: tfops.TensorStridedSliceUpdate(*a, **params), in_axes=tuple(dims))(
    *args
  )
  return out, 0


def _slice_assign_spec(st):
  @st.composite
  def calls(draw):
    kw = draw(tfops.TensorStridedSliceUpdate.spec(st).calls)
    kw["ref"] = kw.pop("input")
    return kw

  return st.Spec(
    calls(),
    oracle=_variable_oracle("ResourceStridedSliceAssign", "ref"),
    grad_oracle="fd",
    note=_NOTE,
  )


ResourceStridedSliceAssign = register_op(
  "ResourceStridedSliceAssign",
  _slice_assign_impl,
  family=FAMILY,
  static=("begin", "end", "strides"),
  attrs=_MASKS,
  jvp=_SLICE_ASSIGN_JVP,
  transpose=_SLICE_ASSIGN_TRANSPOSE,
  batching=_slice_assign_batch,
  interpret=rules.per_op(positioned_update_interpret, variable=True),
  writes_state=True,
  spec=_slice_assign_spec,
)


# --- ResourceGatherNd --------------------------------------------------------------------


def _gather_nd_read(ctx, node, inputs):
  value = ctx.state[expect_handle(node, inputs[0]).key]
  return bind_node(ctx, tfops.ResourceGatherNd, node, [value, *inputs[1:]])


def _gather_nd_oracle(resource, indices, **_):
  tf = import_tensorflow()
  var = tf.Variable(resource)
  return tf.raw_ops.ResourceGatherNd(resource=var.handle, indices=indices, dtype=var.dtype)


ResourceGatherNd = register_op(
  "ResourceGatherNd",
  lambda resource, indices: tfops.GatherNd.impl(resource, indices, bad_indices_policy=""),
  family=FAMILY,
  reads_state=True,
  doc="GatherNd of the variable's value (out-of-range index vectors give zeros).",
  jvp=(lambda t, v, i: tfops.GatherNd(t, i, bad_indices_policy=""), None),
  batching=rules.per_op(rules.gather_nd_batching),
  check=lambda v, i: tfops.GatherNd.check(v, i, bad_indices_policy=""),
  interpret=_gather_nd_read,
  spec=lambda st: st.Spec(
    st.nd_gather_calls(policy=False, params_arg="resource"),
    oracle=_gather_nd_oracle,
    skip={
      "jvp": "the TF oracle copies the drawn value into a tf.Variable (no tangent "
      "flows); the tangent is tf.GatherNd, checked by GatherNd's property "
      "tests; grads vs GradientTape are in tests/test_gather_scatter.py",
      "vjp": "as jvp: see tests/test_gather_scatter.py",
    },
    note="the 'resource' input is drawn as the variable's value; the oracle wraps it "
    "in a tf.Variable",
  ),
)


# --- property-test strategies -----------------------------------------------------------


def _rows_calls(st, kind, dtype_names):
  from hypothesis import strategies as hst

  @st.composite
  def calls(draw):
    dtype = st.np_dtype(draw(st.dtypes(dtype_names)))
    shape = (draw(hst.integers(1, 4)),) + tuple(draw(st.shapes(max_rank=2, max_side=3)))
    ishape = tuple(draw(st.shapes(max_rank=2, max_side=3)))
    integer_div = kind == "div" and st.kind(dtype) in "iu"
    if integer_div:  # TF divides in turn; tfprims by the product (see state.md)
      n = math.prod(ishape)
      ishape = (min(n, shape[0]),)
      rows = np.asarray(draw(hst.permutations(range(shape[0]))))[: ishape[0]]
    else:
      rows = draw(st.arrays(np.dtype("int64"), ishape, min_value=0, max_value=shape[0] - 1))
    indices = np.asarray(rows).astype(draw(st.dtypes(("int32", "int64"))))
    full = ishape + shape[1:]
    ushape = () if draw(hst.integers(0, 4)) == 0 else full
    if kind in ("min", "max") and st.is_float(dtype):
      size = math.prod(shape) + math.prod(ushape)
      perm = np.asarray(draw(hst.permutations(range(size))), np.float64)
      values = ((perm - size // 2) * 0.5).astype(dtype)  # distinct: no ties
      value, updates = values[: math.prod(shape)].reshape(shape), values[math.prod(shape) :]
      updates = updates.reshape(ushape)
    elif kind in ("mul", "div"):
      value = draw(st.arrays(dtype, shape, min_value=-100, max_value=100))
      if st.kind(dtype) in "iu":
        hi = 3
        updates = draw(st.arrays(dtype, ushape, min_value=1, max_value=hi))
      else:
        updates = draw(st.arrays(dtype, ushape, min_value=0.5, max_value=4, special=False))
        signs = draw(st.arrays(np.dtype("bool"), ushape))
        updates = np.where(signs, -updates, updates).astype(dtype)
      if kind == "mul" and draw(hst.integers(0, 3)) == 0:  # zeros (allowed for Mul)
        updates = np.where(
          draw(st.arrays(np.dtype("bool"), ushape)), np.zeros((), dtype), updates
        ).astype(dtype)
    else:
      value = draw(st.arrays(dtype, shape))
      updates = draw(st.arrays(dtype, ushape))
    return {"resource": value, "indices": indices, "updates": np.asarray(updates, dtype)}

  return calls()
