"""Unary math: Neg, Abs, Sign, Square, Sqrt, Rsqrt, Exp, Expm1, Log, Log1p, the
trigonometric and hyperbolic functions and their inverses, Floor, Ceil, Round,
Rint, Reciprocal, Inv, Erf, Erfc, Lgamma, Digamma, IsNan, IsInf, IsFinite.

Derivatives are TF's (``math_grad.py``), written with TF ops: Sqrt, Rsqrt,
Reciprocal/Inv and Tanh go through their gradient ops (grad_ops.py), which
conjugate ``y`` for complex types, so the JVPs conjugate it first; Abs has 0 at
0; rounding and the Is* predicates have none.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from tfprims import rules
from tfprims.core import register_op, tfops
from tfprims.ops.elementwise._common import (
  BOOL_OUT,
  CPLX_MUL_RTOL,
  EW,
  REAL_FLOATS,
  conj_symmetric,
  direct_unary_lowering,
  is_complex,
  odd_symmetric,
)

Neg = register_op(
  "Neg",
  jnp.negative,
  **EW,
  lowering=direct_unary_lowering(
    "neg", jnp.negative, REAL_FLOATS + ("int8", "int16", "int32", "int64")
  ),
  linear=True,
  transpose=lambda ct, x: [tfops.Neg(ct)],
  spec=lambda st: st.Spec(st.unary_calls(st.FLOATS + st.SIGNED + st.COMPLEX)),
)

Abs = register_op(
  "Abs",
  jnp.abs,
  **EW,
  jvp=(lambda t, x: tfops.Mul(t, tfops.Sign(x)),),  # TF: grad * sign(x), so 0 at x == 0
  spec=lambda st: st.Spec(st.unary_calls(st.FLOATS + st.SIGNED)),
)


def _sign(x):
  """jnp.sign, with TF's +0.0 for -0.0 (TF computes ``(x > 0) - (x < 0)`` for reals)."""
  if jnp.issubdtype(x.dtype, jnp.floating):
    return jnp.where(x == 0, jnp.zeros((), x.dtype), jnp.sign(x))
  return jnp.sign(x)


Sign = register_op(
  "Sign",
  _sign,
  **EW,
  jvp=rules.per_op(rules.no_grad_jvp),
  spec=lambda st: st.Spec(st.unary_calls(st.FLOATS + st.SIGNED + st.COMPLEX)),
)

Square = register_op(
  "Square",
  lambda x: x * x,
  **EW,
  jvp=(lambda t, x: tfops.Mul(t, tfops.Mul(x, rules.const(2, x))),),
  spec=lambda st: st.Spec(st.unary_calls(st.NUMERIC + st.COMPLEX, wide=2**15), rtol=CPLX_MUL_RTOL),
)


def _conj_if_complex(y):
  """TF's SqrtGrad/RsqrtGrad/ReciprocalGrad kernels conjugate ``y`` for complex
  types; a JVP must not, so it hands them ``conj(y)``."""
  return tfops.Conj(y) if is_complex(y) else y


Sqrt = register_op(
  "Sqrt",
  conj_symmetric(jnp.sqrt),
  **EW,
  jvp=rules.per_op(rules.output_jvp, lambda t, y, x: tfops.SqrtGrad(_conj_if_complex(y), t)),
  spec=lambda st: st.Spec(st.unary_calls(st.FLOATS + st.COMPLEX, cnonzero=True)),
)


def _complex_rsqrt(z):
  """Eigen's complex_rsqrt (TF's kernel): the principal 1/sqrt(z), with the
  result of +0j for a zero imaginary part of either sign (x - 0j included)."""
  x, y = jnp.real(z), jnp.imag(z)
  zero = jnp.zeros((), x.dtype)
  abs_z = jnp.hypot(x, y)
  w = jnp.sqrt(jnp.asarray(0.5, x.dtype) * (jnp.abs(x) + abs_z))
  woz = w / abs_z
  two = jnp.asarray(2, x.dtype)
  sign_im = jnp.where(y < zero, woz, -woz)
  re = jnp.where(x > zero, woz, jnp.abs(y) / (two * w * abs_z))
  im = jnp.where(x > zero, -y / (two * w * abs_z), sign_im)
  re = jnp.where(x == zero, woz, re)
  im = jnp.where(x == zero, sign_im, im)
  inf = jnp.isinf(x) | jnp.isinf(y)
  re = jnp.where(inf, zero, re)
  im = jnp.where(inf, zero, im)
  re = jnp.where(abs_z == zero, jnp.asarray(np.inf, x.dtype), re)
  im = jnp.where(abs_z == zero, jnp.asarray(np.nan, x.dtype), im)
  return lax.complex(re, im)


def _rsqrt(x):
  return _complex_rsqrt(x) if jnp.iscomplexobj(x) else lax.rsqrt(x)


Rsqrt = register_op(
  "Rsqrt",
  _rsqrt,
  **EW,
  lowering=direct_unary_lowering("rsqrt", _rsqrt),
  jvp=rules.per_op(rules.output_jvp, lambda t, y, x: tfops.RsqrtGrad(_conj_if_complex(y), t)),
  spec=lambda st: st.Spec(st.unary_calls(st.FLOATS + st.COMPLEX, cnonzero=True)),
)

Exp = register_op(
  "Exp",
  jnp.exp,
  **EW,
  lowering=direct_unary_lowering("exp", jnp.exp),
  jvp=rules.per_op(rules.output_jvp, lambda t, y, x: tfops.Mul(t, y)),
  spec=lambda st: st.Spec(st.unary_calls(st.FLOATS + st.COMPLEX, cbound=30)),
)

Expm1 = register_op(
  "Expm1",
  jnp.expm1,
  **EW,
  jvp=(lambda t, x: tfops.Mul(t, tfops.Exp(x)),),
  spec=lambda st: st.Spec(st.unary_calls(st.FLOATS + st.COMPLEX, cbound=30)),
)

Log = register_op(
  "Log",
  jnp.log,
  **EW,
  jvp=(lambda t, x: tfops.Mul(t, tfops.Reciprocal(x)),),
  spec=lambda st: st.Spec(st.unary_calls(st.FLOATS + st.COMPLEX, cnonzero=True)),
)


def _log1p(x):
  """log(1 + x); complex -1 gives -inf + NaNj, as TF's x * log(1 + x) / ((1 + x) - 1)."""
  y = jnp.log1p(x)
  if jnp.iscomplexobj(x):
    y = jnp.where(
      x == -1,
      lax.complex(*(jnp.full(jnp.shape(x), v, jnp.real(x).dtype) for v in (-np.inf, np.nan))),
      y,
    )
  return y


Log1p = register_op(
  "Log1p",
  _log1p,
  **EW,
  jvp=(lambda t, x: tfops.Mul(t, tfops.Reciprocal(tfops.AddV2(rules.const(1, x), x))),),
  spec=lambda st: st.Spec(st.unary_calls(st.FLOATS + st.COMPLEX)),
)

# ---------------------------------------------------------------------------
# Trigonometric and hyperbolic functions.

Sin = register_op(
  "Sin",
  jnp.sin,
  **EW,
  jvp=(lambda t, x: tfops.Mul(t, tfops.Cos(x)),),
  spec=lambda st: st.Spec(st.unary_calls(st.FLOATS + st.COMPLEX, cbound=30)),
)

Cos = register_op(
  "Cos",
  jnp.cos,
  **EW,
  jvp=(lambda t, x: tfops.Neg(tfops.Mul(t, tfops.Sin(x))),),
  spec=lambda st: st.Spec(st.unary_calls(st.FLOATS + st.COMPLEX, cbound=30)),
)

Tan = register_op(
  "Tan",
  jnp.tan,
  **EW,
  jvp=(lambda t, x: tfops.Mul(t, tfops.Square(tfops.Reciprocal(tfops.Cos(x)))),),
  spec=lambda st: st.Spec(st.unary_calls(st.FLOATS + st.COMPLEX, cbound=30)),
)


def _one_minus_square(x):
  return tfops.Sub(rules.const(1, x), tfops.Square(x))


Asin = register_op(
  "Asin",
  conj_symmetric(jnp.arcsin),
  **EW,
  jvp=(lambda t, x: tfops.Mul(t, tfops.Reciprocal(tfops.Sqrt(_one_minus_square(x)))),),
  spec=lambda st: st.Spec(st.unary_calls(st.FLOATS + st.COMPLEX)),
)

Acos = register_op(
  "Acos",
  conj_symmetric(jnp.arccos),
  **EW,
  jvp=(lambda t, x: tfops.Mul(t, tfops.Neg(tfops.Reciprocal(tfops.Sqrt(_one_minus_square(x))))),),
  spec=lambda st: st.Spec(st.unary_calls(st.FLOATS + st.COMPLEX)),
)

Atan = register_op(
  "Atan",
  jnp.arctan,
  **EW,
  jvp=(
    lambda t, x: tfops.Mul(t, tfops.Reciprocal(tfops.AddV2(rules.const(1, x), tfops.Square(x)))),
  ),
  spec=lambda st: st.Spec(st.unary_calls(st.FLOATS + st.COMPLEX)),
)

Sinh = register_op(
  "Sinh",
  jnp.sinh,
  **EW,
  jvp=(lambda t, x: tfops.Mul(t, tfops.Cosh(x)),),
  spec=lambda st: st.Spec(st.unary_calls(st.FLOATS + st.COMPLEX, cbound=30)),
)

Cosh = register_op(
  "Cosh",
  jnp.cosh,
  **EW,
  jvp=(lambda t, x: tfops.Mul(t, tfops.Sinh(x)),),
  spec=lambda st: st.Spec(st.unary_calls(st.FLOATS + st.COMPLEX, cbound=30)),
)

Tanh = register_op(
  "Tanh",
  jnp.tanh,
  **EW,
  lowering=direct_unary_lowering("tanh", jnp.tanh),
  jvp=rules.per_op(rules.output_jvp, lambda t, y, x: tfops.TanhGrad(y, t)),
  spec=lambda st: st.Spec(st.unary_calls(st.FLOATS + st.COMPLEX, cbound=30)),
)

Asinh = register_op(
  "Asinh",
  odd_symmetric(jnp.arcsinh),
  **EW,
  jvp=rules.per_op(rules.output_jvp, lambda t, y, x: tfops.Div(t, tfops.Cosh(y))),
  spec=lambda st: st.Spec(st.unary_calls(st.FLOATS + st.COMPLEX)),
)

Acosh = register_op(
  "Acosh",
  conj_symmetric(jnp.arccosh),
  **EW,
  jvp=rules.per_op(rules.output_jvp, lambda t, y, x: tfops.Div(t, tfops.Sinh(y))),
  spec=lambda st: st.Spec(st.unary_calls(st.FLOATS + st.COMPLEX)),
)

Atanh = register_op(
  "Atanh",
  jnp.arctanh,
  **EW,
  jvp=(lambda t, x: tfops.Mul(t, tfops.Reciprocal(_one_minus_square(x))),),
  spec=lambda st: st.Spec(st.unary_calls(st.FLOATS + st.COMPLEX)),
)

# ---------------------------------------------------------------------------
# Rounding.

Floor = register_op(
  "Floor",
  jnp.floor,
  **EW,
  jvp=rules.per_op(rules.no_grad_jvp),
  spec=lambda st: st.Spec(st.unary_calls(st.FLOATS)),
)

Ceil = register_op(
  "Ceil",
  jnp.ceil,
  **EW,
  jvp=rules.per_op(rules.no_grad_jvp),
  spec=lambda st: st.Spec(st.unary_calls(st.FLOATS)),
)

# Half to even, like TF. Integer inputs are returned unchanged (tf.round does
# that in Python; TF 2.21's CPU kernel returns 0 for them, a bug not copied).
Round = register_op(
  "Round",
  lambda x: x if jnp.issubdtype(x.dtype, jnp.integer) else jnp.round(x),
  **EW,
  jvp=rules.per_op(rules.no_grad_jvp),
  spec=lambda st: st.Spec(
    st.unary_calls(st.FLOATS), note="integer inputs: identity (TF's kernel gives 0)"
  ),
)

Rint = register_op(
  "Rint",
  jnp.rint,
  **EW,
  jvp=rules.per_op(rules.no_grad_jvp),
  spec=lambda st: st.Spec(st.unary_calls(("float32", "float64"))),
)

# ---------------------------------------------------------------------------
# Reciprocal, special functions, predicates.


def _reciprocal(x):
  return lax.div(jnp.ones((), x.dtype), x)


Reciprocal = register_op(
  "Reciprocal",
  _reciprocal,
  **EW,
  jvp=rules.per_op(rules.output_jvp, lambda t, y, x: tfops.ReciprocalGrad(_conj_if_complex(y), t)),
  spec=lambda st: st.Spec(st.unary_calls(st.FLOATS + st.COMPLEX, cnonzero=True)),
)

Inv = register_op(
  "Inv",
  _reciprocal,
  **EW,
  jvp=rules.per_op(rules.output_jvp, lambda t, y, x: tfops.InvGrad(_conj_if_complex(y), t)),
  spec=lambda st: st.Spec(st.unary_calls(st.FLOATS + st.COMPLEX, cnonzero=True)),
)

_TWO_OVER_SQRT_PI = 2.0 / np.sqrt(np.pi)

# TF's CPU float64 Erf (Eigen's double erf) is NaN from here on (and at ±inf);
# tfprims gives ±1, as C99 erf and TF's other dtypes do (docs/semantics/elementwise.md).
_TF_ERF_F64_NAN_FROM = 1.3407807830046643e154


def _erf_calls(st):
  def off_tf_nan_region(call):
    x = call["x"]
    if x.dtype == np.float64:
      x = np.where(np.abs(x) >= _TF_ERF_F64_NAN_FROM, np.copysign(1e30, x), x)
    return {"x": x}

  return st.unary_calls(st.FLOATS).map(off_tf_nan_region)


def _erf_jvp(scale):
  """``t * scale * exp(-x^2)`` (Erf: 2 / sqrt(pi); Erfc: its negation)."""
  return (
    lambda t, x: tfops.Mul(
      t, tfops.Mul(rules.const(scale, x), tfops.Exp(tfops.Neg(tfops.Square(x))))
    ),
  )


Erf = register_op(
  "Erf",
  jax.scipy.special.erf,
  **EW,
  lowering=direct_unary_lowering("erf", lax.erf),
  jvp=_erf_jvp(_TWO_OVER_SQRT_PI),
  spec=lambda st: st.Spec(
    _erf_calls(st),
    note="float64 |x| >= 1.34e154 (±inf too): TF's CPU kernel gives NaN, tfprims ±1 (not drawn)",
  ),
)

Erfc = register_op(
  "Erfc",
  jax.scipy.special.erfc,
  **EW,
  lowering=direct_unary_lowering("erfc", lax.erfc),
  jvp=_erf_jvp(-_TWO_OVER_SQRT_PI),
  spec=lambda st: st.Spec(st.unary_calls(st.FLOATS)),
)


def _lgamma(x):
  """XLA's lgamma, exactly 0 at 1 and 2 as TF's."""
  # XLA's float32 approximation has an absolute error near 1e-6 there (its lgamma(1) is
  # 4.8e-7), which an integer division or a comparison with 0 turns into a wrong result.
  zero = (x == 1) | (x == 2)
  return jnp.where(zero, jnp.zeros((), x.dtype), lax.lgamma(x))


Lgamma = register_op(
  "Lgamma",
  _lgamma,
  **EW,
  jvp=(lambda t, x: tfops.Mul(t, tfops.Digamma(x)),),
  # (XLA's float32 lgamma is within 1e-5 of TF's, relative or absolute, so the
  # tolerances cannot see the zeros at 1 and 2: tests/test_ops_elementwise.py pins them.)
  # No subnormals: XLA reads them as 0 (lgamma inf), TF's kernel does not (Lgamma(1e-45)
  # is 103.97 there).
  spec=lambda st: st.Spec(
    st.unary_calls(("float16", "float32", "float64"), subnormal=False), rtol=1e-3, atol=1e-3
  ),
)

Digamma = register_op(
  "Digamma",
  lax.digamma,
  **EW,  # derivative: polygamma(1, x) (derived)
  spec=lambda st: st.Spec(st.unary_calls(("float16", "float32", "float64")), rtol=1e-3, atol=1e-3),
)

IsNan = register_op(
  "IsNan",
  jnp.isnan,
  **EW,
  jvp=rules.per_op(rules.no_grad_jvp),
  spec=lambda st: st.Spec(st.unary_calls(st.FLOATS), skip={"jvp": BOOL_OUT, "vjp": BOOL_OUT}),
)

IsInf = register_op(
  "IsInf",
  jnp.isinf,
  **EW,
  jvp=rules.per_op(rules.no_grad_jvp),
  spec=lambda st: st.Spec(st.unary_calls(st.FLOATS), skip={"jvp": BOOL_OUT, "vjp": BOOL_OUT}),
)

IsFinite = register_op(
  "IsFinite",
  jnp.isfinite,
  **EW,
  jvp=rules.per_op(rules.no_grad_jvp),
  spec=lambda st: st.Spec(st.unary_calls(st.FLOATS), skip={"jvp": BOOL_OUT, "vjp": BOOL_OUT}),
)
