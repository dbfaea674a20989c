"""TF's gradient ops of unary math: SqrtGrad, RsqrtGrad, ReciprocalGrad, InvGrad,
TanhGrad, SigmoidGrad (``y`` is the forward output, ``dy`` the incoming gradient).

They are linear in ``dy`` (transpose: the op with the cotangent as ``dy``); for
complex types the Sqrt/Rsqrt/Reciprocal kernels conjugate ``y`` (Sigmoid/Tanh
ones do not), and all return 0 where dy == 0 (even if y is 0 or inf). TanhGrad
and SigmoidGrad have TF's second-order JVPs (TanhGradGrad, SigmoidGradGrad).
"""

from __future__ import annotations

import jax.numpy as jnp

from tfprims import rules
from tfprims.core import register_op, tfops
from tfprims.ops.elementwise._common import EW, bcast


def _where_dy(dy, value):
  return jnp.where(dy == 0, jnp.zeros((), value.dtype), value)


def _sqrt_grad(y, dy):
  y, dy = bcast(y, dy)
  return _where_dy(dy, jnp.asarray(0.5, dy.dtype) * dy / jnp.conj(y))


def _rsqrt_grad(y, dy):
  y, dy = bcast(y, dy)
  yc = jnp.conj(y)
  return _where_dy(dy, jnp.asarray(-0.5, dy.dtype) * (dy * yc) * (yc * yc))


def _reciprocal_grad(y, dy):
  y, dy = bcast(y, dy)
  yc = jnp.conj(y)
  return _where_dy(dy, -dy * (yc * yc))


def _tanh_grad(y, dy):
  return dy * (jnp.ones((), y.dtype) - y * y)


def _sigmoid_grad(y, dy):
  return (dy * y) * (jnp.ones((), y.dtype) - y)


def _grad_spec(st):
  return st.binary_calls(
    st.FLOATS + st.COMPLEX, args=("y", "dy"), same_shape=True, per_arg={"y": {"cnonzero": True}}
  )


_GRAD_OP = {"jvp": "gradient op", "vjp": "gradient op"}

SqrtGrad = register_op(
  "SqrtGrad",
  _sqrt_grad,
  **EW,
  transpose=rules.per_op(rules.linear_transpose, 1),
  # TF's scalar code computes (0.5 * dy) / y, its SIMD packets dy * (0.5 / y): they
  # disagree (0, inf or NaN) where 0.5 * dy underflows (0 < |dy| < 2^-125) or 0.5 / y
  # does (|y| > 2^125); tfprims computes the scalar formula (and TF-XLA's).
  spec=lambda st: st.Spec(
    st.binary_calls(
      st.FLOATS + st.COMPLEX,
      args=("y", "dy"),
      same_shape=True,
      per_arg={
        "y": {"cnonzero": True, "magnitude": (None, 2.0**125)},
        "dy": {"magnitude": (2.0**-125, None)},
      },
    ),
    skip=_GRAD_OP,
  ),
)

RsqrtGrad = register_op(
  "RsqrtGrad",
  _rsqrt_grad,
  **EW,
  transpose=rules.per_op(rules.linear_transpose, 1),
  spec=lambda st: st.Spec(
    _grad_spec(st),
    skip=_GRAD_OP,
    ignore_zero_sign=(
      "TF's scalar code computes -0.5 * (dy * y) * (y * y), a zero of the product's "
      "sign; its SIMD packets multiply with mul_no_nan, +0.0 wherever y * dy is 0"
    ),
  ),
)

ReciprocalGrad = register_op(
  "ReciprocalGrad",
  _reciprocal_grad,
  **EW,
  transpose=rules.per_op(rules.linear_transpose, 1),
  spec=lambda st: st.Spec(_grad_spec(st), skip=_GRAD_OP),
)

InvGrad = register_op(
  "InvGrad",
  _reciprocal_grad,
  **EW,
  transpose=rules.per_op(rules.linear_transpose, 1),
  spec=lambda st: st.Spec(_grad_spec(st), skip=_GRAD_OP),
)

TanhGrad = register_op(
  "TanhGrad",
  _tanh_grad,
  **EW,
  jvp=(
    lambda t, y, dy: tfops.Mul(t, tfops.Mul(rules.const(-2, y), tfops.Mul(dy, y))),
    lambda t, y, dy: tfops.TanhGrad(y, t),
  ),  # TF's TanhGradGrad
  transpose=rules.per_op(rules.linear_transpose, 1),
  spec=lambda st: st.Spec(_grad_spec(st)),
)

SigmoidGrad = register_op(
  "SigmoidGrad",
  _sigmoid_grad,
  **EW,
  jvp=(
    lambda t, y, dy: tfops.Mul(
      tfops.Mul(t, dy), tfops.Sub(rules.const(1, y), tfops.Mul(rules.const(2, y), y))
    ),
    lambda t, y, dy: tfops.SigmoidGrad(y, t),
  ),
  transpose=rules.per_op(rules.linear_transpose, 1),
  # TF's kernel multiplies in two orders ((dy * y) * (1 - y) for the scalar tail,
  # dy * (y * (1 - y)) for SIMD packets): where an intermediate overflows (y far
  # outside [0, 1]) its result depends on the element's position. y is a
  # sigmoid output: drawn in [0, 1], where both orders agree.
  spec=lambda st: st.Spec(
    st.binary_calls(
      st.FLOATS + st.COMPLEX,
      args=("y", "dy"),
      same_shape=True,
      per_arg={"y": {"lo": 0.0, "hi": 1.0, "cnonzero": True}},
    )
  ),
)
