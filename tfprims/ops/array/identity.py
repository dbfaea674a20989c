"""Identities: Identity, Snapshot, StopGradient, EnsureShape, CheckNumerics(V2).
(IdentityN, which TF also uses to mark custom gradients, is declared in
tfprims/ops/custom_gradients.py.)

Identity and Snapshot are ``pass_through``: the interpreter passes values
through without an equation; their primitives exist for direct use (linear,
transposed to themselves). StopGradient's JVP is a symbolic zero. EnsureShape
checks once, at trace time. CheckNumerics is the identity; its NaN/Inf check is
a declared ``check`` (eager calls raise like TF; under jit with runtime_checks,
or as a checkify check with enable_checkify_for_asserts) and it stays in jaxprs
so its place is visible (docs/semantics/array.md).
"""

from __future__ import annotations

import jax
from jax.interpreters import ad

from tfprims import emit, rules
from tfprims.core import register_op, tfops
from tfprims.ops.array._common import FAMILY
from tfprims.ops.shared_specs import lazy_hst


def _identity(x):
  return x


def _identity_build(B, x):
  return x


#: Emits nothing: the op's result is its operand's value.
_IDENTITY_LOWERING = emit.direct_lowering(_identity_build, _identity)


def _pass_through(ctx, node, inputs):
  """Interpreter hook: the values flow through without an equation."""
  return list(inputs)


Identity = register_op(
  "Identity",
  _identity,
  family=FAMILY,
  lowering=_IDENTITY_LOWERING,
  linear=True,
  transpose=lambda ct, x: [ct],
  interpret=_pass_through,
  pass_through=True,
  batching=rules.per_op(rules.same_op_batching),
  spec=lambda st: st.Spec(st.unary(st.ALL, arg="input")),
)

Snapshot = register_op(
  "Snapshot",
  _identity,
  family=FAMILY,
  lowering=_IDENTITY_LOWERING,
  linear=True,
  transpose=lambda ct, x: [ct],
  interpret=_pass_through,
  pass_through=True,
  batching=rules.per_op(rules.same_op_batching),
  spec=lambda st: st.Spec(
    st.unary(st.ALL, arg="input"),
    skip={
      "jvp": "TF registers no gradient for Snapshot (ours is the identity's)",
      "vjp": "TF registers no gradient for Snapshot (ours is the identity's)",
    },
  ),
)


def _stop_gradient_jvp(primals, tangents):
  out = tfops.StopGradient(*primals)
  return out, ad.Zero(jax.typeof(out).to_tangent_aval())


StopGradient = register_op(
  "StopGradient",
  _identity,
  family=FAMILY,
  lowering=_IDENTITY_LOWERING,
  linear_values=True,
  jvp=_stop_gradient_jvp,
  batching=rules.per_op(rules.same_op_batching),
  spec=lambda st: st.Spec(st.unary(st.ALL, arg="input")),
)


def _check_shape(x_shape, shape):
  if shape is None:  # unknown rank
    return
  shape = tuple(shape)
  ok = len(shape) == len(x_shape) and all(
    s is None or s == -1 or s == d for s, d in zip(shape, x_shape)
  )
  if not ok:
    want = tuple(None if s in (None, -1) else s for s in shape)
    raise ValueError(
      f"EnsureShape: shape of tensor {tuple(x_shape)} is not compatible with "
      f"expected shape {want} (Expected shape={want}, found {tuple(x_shape)}.)"
    )


def _ensure_shape_impl(input, *, shape):
  """Checked at trace time (shapes are static in JAX)."""
  _check_shape(input.shape, shape)
  return input


def _ensure_shape_batch(args, dims, *, shape):
  (x,), (d,) = args, dims
  shape = None if shape is None else (None,) + tuple(shape)
  return tfops.EnsureShape(rules.to_front(x, d), shape=shape), 0


EnsureShape = register_op(
  "EnsureShape",
  _ensure_shape_impl,
  family=FAMILY,
  attrs=("shape",),
  linear=True,
  transpose=lambda ct, x, *, shape: [tfops.EnsureShape(ct, shape=shape)],
  batching=_ensure_shape_batch,
  spec=lambda st: st.Spec(_ensure_shape_calls(st)),
)


def _check_numerics_impl(tensor, *, message):
  """The identity; TF's NaN/Inf check is the op's declared check (docs/semantics/array.md)."""
  return tensor


def _check_numerics_check(tensor, *, message):
  """TF's kernel raises when the tensor holds NaN or Inf."""
  bad = jax.numpy.any(jax.numpy.logical_not(jax.numpy.isfinite(tensor)))
  if isinstance(bad, jax.core.Tracer):  # decided when the program runs
    return bad, f"{message} : Tensor had NaN or Inf values"
  # Known values: TF's message names what was found (tf2jax's phrase beside it).
  found = [
    k
    for k, f in (("Inf", jax.numpy.isinf), ("NaN", jax.numpy.isnan))
    if bool(jax.numpy.any(f(tensor)))
  ]
  if not found:
    return bad, ""
  return bad, (
    f"{message} : Tensor had {' and '.join(found)} values ("
    + ", ".join(f"Found {k} values" for k in found)
    + ")"
  )


CheckNumerics = register_op(
  "CheckNumerics",
  _check_numerics_impl,
  family=FAMILY,
  attrs=("message",),
  linear=True,
  transpose=lambda ct, x, *, message: [tfops.CheckNumerics(ct, message=message)],
  batching=rules.per_op(rules.same_op_batching),
  check=_check_numerics_check,
  assertion=True,
  spec=lambda st: st.Spec(_check_numerics_calls(st)),
)

CheckNumericsV2 = register_op(
  "CheckNumericsV2",
  _check_numerics_impl,
  family=FAMILY,
  attrs=("message",),
  linear=True,
  transpose=lambda ct, x, *, message: [tfops.CheckNumericsV2(ct, message=message)],
  batching=rules.per_op(rules.same_op_batching),
  check=_check_numerics_check,
  assertion=True,
  spec=lambda st: st.Spec(_check_numerics_calls(st)),
)


# --- property-test strategies (hypothesis is imported lazily) ---------------------


def _ensure_shape_calls(st):
  hst = lazy_hst()

  @st.composite
  def calls(draw):
    x = draw(st.arrays(st.dtypes(st.ALL), st.shapes()))
    shape = (
      None
      if draw(hst.integers(0, 4)) == 0
      else [None if draw(hst.booleans()) else n for n in x.shape]
    )
    return {"input": x, "shape": shape}

  return calls()


def _check_numerics_calls(st):
  @st.composite
  def calls(draw):
    x = draw(st.arrays(st.dtypes(st.FLOATS), st.shapes(), allow_nan=False, allow_inf=False))
    return {"tensor": x, "message": "tfprims"}

  return calls()
