"""Binary arithmetic with TF broadcasting: AddV2, Add, Sub, Mul, Div, RealDiv,
DivNoNan, MulNoNan, FloorDiv, FloorMod, TruncateDiv, TruncateMod, Mod, Pow,
Maximum, Minimum, SquaredDifference, Atan2, Xdivy, Xlogy, Xlog1py, NextAfter; and
ClipByValue, AddN.

Transposes sum the cotangent back to each operand's shape (``rules.unbroadcast``).
Integer division and modulo follow TF's rounding; what they do where TF raises
(division by zero, negative integer exponents) is in docs/semantics/elementwise.md.
Where TF defines a gradient at a kink (Maximum/Minimum ties go to x, ClipByValue
at the bounds, Pow's exponent at x <= 0) the rules follow TF.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax
from jax.extend.mlir.dialects import stablehlo as hlo
from jax.interpreters import ad

from tfprims import emit, rules
from tfprims.core import register_op, tfops
from tfprims.ops.elementwise._common import (
  CPLX_MUL_RTOL,
  EW,
  NO_TF_GRAD,
  bcast,
  direct_binary_lowering,
  is_complex,
)

U = rules.U


def _sum_tangents(*parts):
  """The sum (``tf.AddV2``) of the tangent parts that are not None; None if all are."""
  tangent = None
  for part in parts:
    if part is not None:
      tangent = part if tangent is None else tfops.AddV2(tangent, part)
  return tangent


def _tangent_or_zero(out, tangent):
  return rules.zero_tangent(out) if tangent is None else tangent


# ---------------------------------------------------------------------------
# Add, Sub, Mul.


def _add_transpose(ct, x, y):
  return [
    rules.unbroadcast(ct, rules.shape_of(x)) if U(x) else None,
    rules.unbroadcast(ct, rules.shape_of(y)) if U(y) else None,
  ]


AddV2 = register_op(
  "AddV2",
  jnp.add,
  **EW,
  lowering=direct_binary_lowering("add", jnp.add),
  linear=True,
  transpose=_add_transpose,
  spec=lambda st: st.Spec(st.binary_calls(st.NUMERIC + st.COMPLEX, wide=2**30)),
)

Add = register_op(
  "Add",
  jnp.add,
  **EW,
  lowering=direct_binary_lowering("add", jnp.add),
  linear=True,
  transpose=_add_transpose,
  spec=lambda st: st.Spec(
    st.binary_calls(st.FLOATS + st.SIGNED + ("uint8",) + st.COMPLEX, wide=2**30)
  ),
)

Sub = register_op(
  "Sub",
  jnp.subtract,
  **EW,
  lowering=direct_binary_lowering("sub", jnp.subtract),
  linear=True,
  transpose=lambda ct, x, y: [
    rules.unbroadcast(ct, rules.shape_of(x)) if U(x) else None,
    rules.unbroadcast(tfops.Neg(ct), rules.shape_of(y)) if U(y) else None,
  ],
  spec=lambda st: st.Spec(st.binary_calls(st.NUMERIC + st.COMPLEX, wide=2**30)),
)


def _mul_transpose(op):
  """Mul/MulNoNan: ``op(ct, y)`` for x and ``op(x, ct)`` for y, summed back."""

  def rule(ct, x, y):
    return [
      rules.unbroadcast(op(ct, y), rules.shape_of(x)) if U(x) else None,
      rules.unbroadcast(op(x, ct), rules.shape_of(y)) if U(y) else None,
    ]

  return rule


Mul = register_op(
  "Mul",
  jnp.multiply,
  **EW,
  lowering=direct_binary_lowering("mul", jnp.multiply),
  jvp=(lambda t, x, y: tfops.Mul(t, y), lambda t, x, y: tfops.Mul(x, t)),
  transpose=rules.per_op(_mul_transpose),
  spec=lambda st: st.Spec(st.binary_calls(st.NUMERIC + st.COMPLEX, wide=2**15), rtol=CPLX_MUL_RTOL),
)

# ---------------------------------------------------------------------------
# Division.


def _true_div(x, y):
  """``lax.div`` of operands of one shape, divided as TF's kernels divide: XLA
  rewrites a division by a broadcast (or a splat constant: ``x / 255.0``) into a
  product with its reciprocal, 1 ulp off and, where 1 / y is subnormal, 0 or NaN
  (inf / 3.4e38 = inf * 0); a barrier on an inexact divisor keeps the division (the
  loop still fuses)."""
  if jnp.issubdtype(y.dtype, jnp.inexact):
    y = lax.optimization_barrier(y)
  return lax.div(x, y)


def _div(x, y):
  """Integer Div truncates (C semantics); float/complex Div is x / y."""
  return _true_div(*bcast(x, y))


def _div_build(B, x, y):
  """_div's ops emitted (RealDiv: every network with a normalisation lowers it)."""
  if x.dtype != y.dtype or x.dtype == np.bool_:
    return None
  shape = np.broadcast_shapes(x.shape, y.shape)
  x, y = B.broadcast_to(x, shape), B.broadcast_to(y, shape)
  if jnp.issubdtype(y.dtype, jnp.inexact):
    if isinstance(B, emit.Emitter):
      y = emit.Val(hlo.optimization_barrier([y.value]), y.shape, y.dtype)
    else:
      y = lax.optimization_barrier(y)
  return B.div(x, y)


def _div_jvps(op):
  def tx(t, x, y):
    return op(t, y)

  def ty(t, x, y):
    # TF: grad * (-x / y / y), two divisions (TF's x / tiny / tiny is finite where
    # x / (tiny * tiny) is not). Written -(x / y) / y, the same bits: XLA rewrites a
    # quotient divided again, (a / b) / c, into a / (b * c).
    return tfops.Mul(t, op(tfops.Neg(op(x, y)), y))

  return (tx, ty)


def _int_division_check(x, y):
  """TF's CPU kernels reject integer division by zero ("Integer division by
  zero"); floats divide by zero as IEEE does."""
  if jnp.issubdtype(jnp.result_type(y), jnp.integer):
    return jnp.any(y == 0), "Integer division by zero"
  return None


Div = register_op(
  "Div",
  _div,
  **EW,
  check=_int_division_check,
  jvp=rules.per_op(_div_jvps),
  transpose=rules.per_op(rules.linear_transpose, 0),
  spec=lambda st: st.Spec(
    st.binary_calls(st.NUMERIC + st.COMPLEX, per_arg={"y": {"nonzero": True, "cnonzero": True}}),
    rtol=CPLX_MUL_RTOL,
  ),
)

RealDiv = register_op(
  "RealDiv",
  _div,
  **EW,
  build=_div_build,
  jvp=rules.per_op(_div_jvps),
  transpose=rules.per_op(rules.linear_transpose, 0),
  spec=lambda st: st.Spec(
    st.binary_calls(st.FLOATS + st.COMPLEX, per_arg={"y": {"cnonzero": True}}), rtol=CPLX_MUL_RTOL
  ),
)


def _div_no_nan(x, y):
  x, y = bcast(x, y)
  return jnp.where(y == 0, jnp.zeros((), x.dtype), _true_div(x, y))


DivNoNan = register_op(
  "DivNoNan",
  _div_no_nan,
  **EW,
  jvp=rules.per_op(_div_jvps),
  transpose=rules.per_op(rules.linear_transpose, 0),
  spec=lambda st: st.Spec(st.binary_calls(st.FLOATS + st.COMPLEX)),
)


def _mul_no_nan(x, y):
  x, y = bcast(x, y)
  return jnp.where(y == 0, jnp.zeros((), x.dtype), x * y)


# TF's gradients of MulNoNan, SquaredDifference, Xdivy, Xlogy and Xlog1py omit
# the conjugations its complex convention needs, so for complex inputs they are
# not derivatives of the op; the property specs draw real dtypes only and
# tests/test_ops_elementwise.py checks complex values and derivatives.
_CPLX_GRAD_NOTE = (
  "complex inputs: values and derivatives are tested in "
  "tests/test_ops_elementwise.py (TF's complex gradient lacks conj)"
)

MulNoNan = register_op(
  "MulNoNan",
  _mul_no_nan,
  **EW,
  jvp=(lambda t, x, y: tfops.MulNoNan(t, y), lambda t, x, y: tfops.MulNoNan(x, t)),
  transpose=rules.per_op(_mul_transpose),
  spec=lambda st: st.Spec(st.binary_calls(st.FLOATS), note=_CPLX_GRAD_NOTE),
)

# ---------------------------------------------------------------------------
# Integer-style division and modulo.


def _int_floor_div(x, y):
  q = lax.div(x, y)
  if jnp.issubdtype(x.dtype, jnp.unsignedinteger):
    return q
  r = lax.rem(x, y)
  adjust = (r != 0) & ((r < 0) != (y < 0)) & (y != 0)  # x // 0 stays -1
  return jnp.where(adjust, q - jnp.ones((), q.dtype), q)


def _floor_div(x, y):
  x, y = bcast(x, y)
  if jnp.issubdtype(x.dtype, jnp.integer):
    return _int_floor_div(x, y)
  return jnp.floor(_true_div(x, y))  # TF: floor(x / y), not numpy's divmod


def _floor_mod(x, y):
  x, y = bcast(x, y)
  r = lax.rem(x, y)
  if jnp.issubdtype(x.dtype, jnp.unsignedinteger):
    return r
  # TF: trunc_mod != 0 && ((y < 0) != (trunc_mod < 0)) ? trunc_mod + y : trunc_mod
  adjust = (r != 0) & ((y < 0) != (r < 0))
  return jnp.where(adjust, r + y, r)


def _truncate_div(x, y):
  x, y = bcast(x, y)
  if jnp.issubdtype(x.dtype, jnp.integer):
    return lax.div(x, y)
  return jnp.trunc(_true_div(x, y))


def _truncate_mod(x, y):
  x, y = bcast(x, y)
  return lax.rem(x, y)


FloorDiv = register_op(
  "FloorDiv",
  _floor_div,
  **EW,
  check=_int_division_check,
  jvp=rules.per_op(rules.no_grad_jvp),
  symbolic=np.floor_divide,  # Python's //: floored
  spec=lambda st: st.Spec(st.binary_calls(st.NUMERIC, per_arg={"y": {"nonzero": True}})),
)


def _to_out(t, *operands):
  """A tangent of one operand, broadcast to the output shape (plumbing only)."""
  shape = jnp.broadcast_shapes(*(rules.shape_of(o) for o in operands))
  return t if tuple(t.shape) == shape else jnp.broadcast_to(t, shape)


def _floor_mod_jvp(primals, tangents):
  (x, y), (tx, ty) = primals, tangents
  out = tfops.FloorMod(x, y)
  tangent = _sum_tangents(
    _to_out(tx, x, y) if type(tx) is not ad.Zero else None,
    # TF: grad * -floor_div(x, y)
    tfops.Mul(ty, tfops.Neg(tfops.FloorDiv(x, y))) if type(ty) is not ad.Zero else None,
  )
  return out, _tangent_or_zero(out, tangent)


FloorMod = register_op(
  "FloorMod",
  _floor_mod,
  **EW,
  check=_int_division_check,
  jvp=_floor_mod_jvp,
  symbolic=np.remainder,  # Python's %: the divisor's sign, as TF's
  spec=lambda st: st.Spec(st.binary_calls(st.NUMERIC, per_arg={"y": {"nonzero": True}})),
)

TruncateDiv = register_op(
  "TruncateDiv",
  _truncate_div,
  **EW,
  check=_int_division_check,
  jvp=rules.per_op(rules.no_grad_jvp),
  spec=lambda st: st.Spec(st.binary_calls(st.NUMERIC, per_arg={"y": {"nonzero": True}})),
)

_MOD_TYPES = ("float32", "float64", "int32", "int64")

TruncateMod = register_op(
  "TruncateMod",
  _truncate_mod,
  **EW,
  check=_int_division_check,
  spec=lambda st: st.Spec(
    st.binary_calls(_MOD_TYPES, per_arg={"y": {"nonzero": True}}),
    skip={"jvp": NO_TF_GRAD, "vjp": NO_TF_GRAD},
  ),
)

Mod = register_op(
  "Mod",
  _truncate_mod,
  **EW,
  check=_int_division_check,
  spec=lambda st: st.Spec(
    st.binary_calls(_MOD_TYPES, per_arg={"y": {"nonzero": True}}),
    skip={"jvp": NO_TF_GRAD, "vjp": NO_TF_GRAD},
  ),
)

# ---------------------------------------------------------------------------
# Pow.


def _int_pow(x, y):
  """x ** y for y >= 0 by squaring over every bit of y, wrapping like TF's kernel
  (jnp.power stops after 6 bits of y: its 2 ** 64 is 1, TF's is 0, and 3 ** 65 differs)."""

  def body(_, carry):
    acc, base, e = carry
    acc = jnp.where((e & 1) != 0, acc * base, acc)
    return acc, base * base, e >> 1

  bits = jnp.iinfo(y.dtype).bits - 1  # y >= 0: the sign bit is 0
  return lax.fori_loop(0, bits, body, (jnp.ones_like(x), x, y))[0]


def _pow(x, y):
  x, y = bcast(x, y)
  if jnp.issubdtype(x.dtype, jnp.integer):
    # Wraps on overflow like TF. y < 0 raises in TF; here it gives 1 / x**-y
    # truncated toward zero (1 and -1 keep magnitude 1, everything else 0).
    one = jnp.ones((), x.dtype)
    neg = y < 0
    p = _int_pow(x, jnp.where(neg, jnp.zeros((), y.dtype), y))
    odd = (y & 1) != 0
    inv = jnp.where(
      x == one, one, jnp.where(x == -one, jnp.where(odd, -one, one), jnp.zeros((), x.dtype))
    )
    return jnp.where(neg, inv, p)
  if jnp.iscomplexobj(x):
    # TF (C99 cpow, exp(y log x)) at x = 0: 0 for Re(y) > 0 (XLA: NaN), NaN for
    # y = 0 (XLA: 1).
    zero = x == 0
    p = lax.pow(x, y)
    p = jnp.where(zero & (jnp.real(y) > 0), jnp.zeros((), x.dtype), p)
    nan = jnp.asarray(complex(np.nan, np.nan), x.dtype)
    return jnp.where(zero & (y == 0), nan, p)
  return lax.pow(x, y)


def _pow_jvp(primals, tangents):
  """TF's _PowGrad multiplies left to right, ``(grad * y) * pow(x, y - 1)`` and
  ``(grad * z) * log(x)``; a JVP ``(t * a) * b`` transposes to ``(ct * b) * a``, so
  the JVP multiplies by the last factor first and its transpose is TF's gradient in
  TF's order (where a partial product underflows or overflows, the order decides
  0, inf or NaN: (grad * tiny) flushes to 0, 0 * pow(0, tiny - 1) is NaN)."""
  (x, y), (tx, ty) = primals, tangents
  z = tfops.Pow(x, y)
  tangent = None
  if type(tx) is not ad.Zero:
    # TF: grad * y * pow(x, y - 1)
    p = tfops.Pow(x, tfops.Sub(y, rules.const(1, y)))
    tangent = tfops.Mul(tfops.Mul(tx, p), y)
  if type(ty) is not ad.Zero:
    # TF: grad * z * log(x) where x > 0 (x != 0 for complex), else 0.
    pred = (
      tfops.NotEqual(x, rules.const(0, x), incompatible_shape_error=True)
      if is_complex(x)
      else tfops.Greater(x, rules.const(0, x))
    )
    m = rules.cast_like(pred, x)
    safe_x = tfops.AddV2(tfops.MulNoNan(x, m), tfops.Sub(rules.const(1, x), m))
    log_x = tfops.MulNoNan(tfops.Log(safe_x), m)
    tangent = _sum_tangents(tangent, tfops.Mul(tfops.Mul(ty, log_x), z))
  return z, _tangent_or_zero(z, tangent)


def _int_pow_check(x, y):
  if jnp.issubdtype(jnp.result_type(y), jnp.integer):
    return jnp.any(y < 0), "Integers to negative integer powers are not allowed"
  return None


Pow = register_op(
  "Pow",
  _pow,
  **EW,
  jvp=_pow_jvp,
  check=_int_pow_check,
  spec=lambda st: st.Spec(
    st.binary_calls(
      st.FLOATS + st.SIGNED + st.COMPLEX,
      # TF reads a subnormal as 0 inside SIMD packets, as itself in scalar code.
      subnormal=False,
      # Integer exponents up to 70: past 63, jnp.power's 6-bit loop went wrong.
      per_arg={
        "x": {"int_lo": -6, "int_hi": 6, "cbound": 10, "cnonzero": True},
        "y": {"int_lo": 0, "int_hi": 70, "cbound": 5},
      },
    ),
    # complex pow = exp(y log x): a small component of a large result
    # carries the large one's absolute error.
    rtol={"complex64": 1e-4},
    atol={"complex64": 1e-4},
  ),
)

# ---------------------------------------------------------------------------
# Maximum, Minimum, SquaredDifference, Atan2, Xdivy, Xlogy, Xlog1py.


def _chooser_jvp(op, selector):
  """Maximum/Minimum: the gradient goes to x where selector(x, y), else to y."""

  def rule(primals, tangents):
    (x, y), (tx, ty) = primals, tangents
    out = op(x, y)
    pick_x = selector(x, y)
    tangent = None
    if type(tx) is not ad.Zero:
      tangent = tfops.Mul(tx, rules.cast_like(pick_x, out))
    if type(ty) is not ad.Zero:
      tangent = _sum_tangents(
        tangent, tfops.Mul(ty, rules.cast_like(tfops.LogicalNot(pick_x), out))
      )
    return out, _tangent_or_zero(out, tangent)

  return rule


def _chooser(keep_x, lax_op):
  """TF's float Maximum/Minimum: NaN if either operand is NaN, else x where
  ``keep_x(x, y)``, so a tie of -0.0 and +0.0 returns x (TF's scalar code and its
  float16/bfloat16 kernels; its float32/float64 SIMD packets return y, and XLA's
  max/min +0.0/-0.0). Integers: ``lax_op``."""

  def impl(x, y):
    x, y = bcast(x, y)
    if not jnp.issubdtype(x.dtype, jnp.floating):
      return lax_op(x, y)
    return jnp.where(keep_x(x, y) | jnp.isnan(x), x, y)

  return impl


# The sign of a zero result of a tie of -0.0 and +0.0 depends on the element's place in
# TF (docs/semantics/elementwise.md).
_TIE_ZERO_SIGN = (
  "TF's kernels return x for a tie of -0.0 and +0.0 in scalar code "
  "(1-15 float32 elements, the tail of a tensor) and y inside SIMD "
  "packets; tfprims returns x"
)

Maximum = register_op(
  "Maximum",
  _chooser(lambda x, y: x >= y, lax.max),
  **EW,
  jvp=rules.per_op(_chooser_jvp, lambda x, y: tfops.GreaterEqual(x, y)),  # ties go to x
  spec=lambda st: st.Spec(st.binary_calls(st.NUMERIC), ignore_zero_sign=_TIE_ZERO_SIGN),
)

Minimum = register_op(
  "Minimum",
  _chooser(lambda x, y: x <= y, lax.min),
  **EW,
  jvp=rules.per_op(_chooser_jvp, lambda x, y: tfops.LessEqual(x, y)),
  spec=lambda st: st.Spec(st.binary_calls(st.NUMERIC), ignore_zero_sign=_TIE_ZERO_SIGN),
)


def _squared_difference(x, y):
  d = jnp.subtract(x, y)
  return d * jnp.conj(d) if jnp.iscomplexobj(d) else d * d


def _squared_difference_build(B, x, y):
  """_squared_difference's ops emitted, for real operands of one dtype."""
  if x.dtype.kind == "c" or x.dtype != y.dtype:
    return None
  shape = np.broadcast_shapes(x.shape, y.shape)
  d = B.sub(B.broadcast_to(x, shape), B.broadcast_to(y, shape))
  return B.mul(d, d)


def _sqdiff_jvp(primals, tangents):
  (x, y), (tx, ty) = primals, tangents
  out = tfops.SquaredDifference(x, y)
  d = tfops.Sub(x, y)
  if is_complex(d):
    # d conj(d): tangent t conj(d) + d conj(t) for t = tx - ty.
    def part(t):
      return tfops.AddV2(tfops.Mul(t, tfops.Conj(d)), tfops.Mul(d, tfops.Conj(t)))
  else:
    two_d = tfops.Mul(rules.const(2, d), d)  # TF: 2 * grad * (x - y)

    def part(t):
      return tfops.Mul(t, two_d)

  tangent = None
  if type(tx) is not ad.Zero:
    tangent = part(tx)
  if type(ty) is not ad.Zero:
    tangent = _sum_tangents(tangent, tfops.Neg(part(ty)))
  return out, _tangent_or_zero(out, tangent)


SquaredDifference = register_op(
  "SquaredDifference",
  _squared_difference,
  **EW,
  jvp=_sqdiff_jvp,
  build=_squared_difference_build,
  # bfloat16/float16 cotangents summed over broadcast axes cancel (terms of
  # ±200 from inputs clipped to ±100): XLA keeps float32 between fused ops.
  spec=lambda st: st.Spec(
    st.binary_calls(st.FLOATS + ("int32", "int64"), wide=2**14),
    grad_atol={"bfloat16": 2.0, "float16": 0.25},
    note=_CPLX_GRAD_NOTE,
  ),
)


def _atan2_jvp(primals, tangents):
  """TF's _Atan2Grad shares ``grad / (x^2 + y^2)`` between both inputs, so its
  forward mode divides the summed numerator ``t_y x - t_x y`` once: inf, not
  inf + NaN, where ``x^2 + y^2`` underflows (float16 x = 6e-5, y = 0)."""
  (y, x), (ty, tx) = primals, tangents
  out = tfops.Atan2(y, x)
  num = None
  if type(ty) is not ad.Zero:
    num = tfops.Mul(ty, x)
  if type(tx) is not ad.Zero:
    num = _sum_tangents(num, tfops.Mul(tx, tfops.Neg(y)))
  if num is None:
    return out, rules.zero_tangent(out)
  return out, tfops.Div(num, tfops.AddV2(tfops.Square(x), tfops.Square(y)))


Atan2 = register_op(
  "Atan2",
  lambda y, x: jnp.arctan2(y, x),
  **EW,
  jvp=_atan2_jvp,
  # TF reads a subnormal as 0 inside SIMD packets, as itself in scalar code. Where
  # |x| and |y| are both below 2^-63, x^2 + y^2 underflows to 0 and the JVP's
  # numerator t_y x - t_x y is near the subnormal range: XLA fuses it into an FMA
  # whose subnormal result is flushed (TF-XLA too), where TF rounds each product
  # first (inf there, NaN here). x is drawn 0 or |x| >= 2^-63.
  spec=lambda st: st.Spec(
    st.binary_calls(
      st.FLOATS, args=("y", "x"), subnormal=False, per_arg={"x": {"magnitude": (2.0**-63, None)}}
    )
  ),
)


# Xdivy/Xlogy/Xlog1py of x = -0.0 are +0.0 in TF's scalar code (and TF-XLA, tfprims)
# but x itself, -0.0, inside SIMD packets (docs/semantics/elementwise.md).
_X_NO_NEG_ZERO = {"x": {"neg_zero": False}}


def _x_where_zero(x, y, fn):
  x, y = bcast(x, y)
  return jnp.where(x == 0, jnp.zeros((), x.dtype), fn(x, y))


def _nonzero(x):
  """1 where x != 0, else 0, in x's dtype (TF: cast(not_equal(x, 0), dtype))."""
  return rules.cast_like(tfops.NotEqual(x, rules.const(0, x), incompatible_shape_error=True), x)


Xdivy = register_op(
  "Xdivy",
  lambda x, y: _x_where_zero(x, y, _true_div),
  **EW,
  jvp=(
    lambda t, x, y: tfops.Mul(t, tfops.Xdivy(_nonzero(x), y)),
    lambda t, x, y: tfops.Mul(t, tfops.Xdivy(tfops.Neg(x), tfops.Square(y))),
  ),
  spec=lambda st: st.Spec(st.binary_calls(st.FLOATS, per_arg=_X_NO_NEG_ZERO), note=_CPLX_GRAD_NOTE),
)

Xlogy = register_op(
  "Xlogy",
  lambda x, y: _x_where_zero(x, y, lambda a, b: a * jnp.log(b)),
  **EW,
  jvp=(
    lambda t, x, y: tfops.Mul(t, tfops.Xlogy(_nonzero(x), y)),
    lambda t, x, y: tfops.Mul(t, tfops.Xdivy(x, y)),
  ),
  # TF's float32 log of a subnormal y: -inf inside SIMD packets, log(y) in scalar code.
  spec=lambda st: st.Spec(
    st.binary_calls(st.FLOATS, per_arg={"x": _X_NO_NEG_ZERO["x"], "y": {"subnormal": False}}),
    note=_CPLX_GRAD_NOTE,
  ),
)

Xlog1py = register_op(
  "Xlog1py",
  lambda x, y: _x_where_zero(x, y, lambda a, b: a * jnp.log1p(b)),
  **EW,
  jvp=(
    lambda t, x, y: tfops.Mul(t, tfops.Xlog1py(_nonzero(x), y)),
    lambda t, x, y: tfops.Mul(t, tfops.Xdivy(x, tfops.AddV2(y, rules.const(1, y)))),
  ),
  spec=lambda st: st.Spec(st.binary_calls(st.FLOATS, per_arg=_X_NO_NEG_ZERO), note=_CPLX_GRAD_NOTE),
)


def _next_after_jvp(primals, tangents):
  # TF: d/dx1 = 1, d/dx2 = 0.
  (x1, x2), (t1, _) = primals, tangents
  out = tfops.NextAfter(x1, x2)
  if type(t1) is ad.Zero:
    return out, rules.zero_tangent(out)
  return out, rules.broadcast_to(t1, jnp.shape(out))


NextAfter = register_op(
  "NextAfter",
  lambda x1, x2: lax.nextafter(*bcast(x1, x2)),
  **EW,
  jvp=_next_after_jvp,
  doc="The next representable value after x1 in the direction of x2 (C nextafter).",
  spec=lambda st: st.Spec(
    st.binary_calls(("float32", "float64"), args=("x1", "x2"), tie_prob=True)
  ),
)

# ---------------------------------------------------------------------------
# ClipByValue and AddN.


def _clip_by_value(t, lo, hi):
  """TF: ``t.cwiseMin(hi).cwiseMax(lo)`` with C++ ``std::min/max`` semantics:
  a NaN ``t`` stays NaN, NaN bounds are ignored; ``lo > hi`` gives ``lo``.
  Complex values are clipped componentwise (Eigen's complex min/max)."""
  t, lo, hi = bcast(t, lo, hi)
  if jnp.iscomplexobj(t):
    return lax.complex(
      _clip_by_value(jnp.real(t), jnp.real(lo), jnp.real(hi)),
      _clip_by_value(jnp.imag(t), jnp.imag(lo), jnp.imag(hi)),
    )
  m = jnp.where(hi < t, hi, t)
  return jnp.where(m < lo, lo, m)


def _derived_tangent(impl, primals, tangents):
  """The tangent of ``impl`` by ``jax.jvp`` (for the dtypes a TF-named rule skips)."""
  tangents = [ad.instantiate_zeros(t) for t in tangents]
  return jax.jvp(impl, tuple(primals), tuple(tangents))[1]


def _clip_jvp(primals, tangents):
  # TF: the gradient goes to t unless t < lo or t > hi; to lo where t < lo and
  # to hi where t > hi.
  (t, lo, hi), (dt, dlo, dhi) = primals, tangents
  out = tfops.ClipByValue(t, lo, hi)
  if is_complex(t):  # TF has no gradient here (complex Less); clip componentwise
    return out, _derived_tangent(_clip_by_value, primals, tangents)
  below, above = tfops.Less(t, lo), tfops.Greater(t, hi)
  inside = tfops.LogicalNot(tfops.LogicalOr(below, above))
  tangent = None
  for tan, pred in ((dt, inside), (dlo, below), (dhi, above)):
    if type(tan) is not ad.Zero:
      tangent = _sum_tangents(tangent, tfops.Mul(tan, rules.cast_like(pred, out)))
  return out, _tangent_or_zero(out, tangent)


def _clip_spec(st):
  @st.composite
  def draw(draw):
    dtype = draw(st.dtypes(st.FLOATS + st.SIGNED + ("uint8", "uint16") + st.COMPLEX))
    shape = draw(st.shapes())
    bound_shapes = [shape if draw(st.booleans()) else () for _ in range(2)]
    t = st.draw_array(draw, dtype, shape)
    lo = st.draw_array(draw, dtype, bound_shapes[0])
    hi = st.draw_array(draw, dtype, bound_shapes[1])
    return {"t": t, "clip_value_min": lo, "clip_value_max": hi}

  return draw()


ClipByValue = register_op(
  "ClipByValue", _clip_by_value, **EW, jvp=_clip_jvp, spec=lambda st: st.Spec(_clip_spec(st))
)


def _add_n(*xs):
  return functools.reduce(jnp.add, xs)


def _add_n_spec(st):
  @st.composite
  def draw(draw):
    dtype = draw(st.dtypes(st.NUMERIC + st.COMPLEX))
    shape = draw(st.shapes())
    n = draw(st.integers(1, 4))
    return {"inputs": [st.draw_array(draw, dtype, shape, wide=2**20) for _ in range(n)]}

  return draw()


def _add_n_interpret(ctx, node, inputs):
  """Interpreter hook: variant values (TensorLists: TF's gradient code sums a loop's
  list gradients) of one structure add tensor by tensor, as TF's variant AddN;
  tensors take the primitive."""
  from tfprims import errors
  from tfprims.interpreter import bind_node
  from tfprims.ops import tensorlist

  if all(hasattr(x, "shape") and hasattr(x, "dtype") for x in inputs):
    return bind_node(ctx, AddN, node, inputs)
  if any(isinstance(x, tensorlist.TensorList) and tensorlist.is_variant_list(x) for x in inputs):
    return [tensorlist.add_lists(node, inputs)]  # lists of ragged variants: row by row
  trees = {jax.tree_util.tree_structure(x) for x in inputs}
  if len(trees) != 1:
    raise errors.OpError(
      node.op,
      node.name,
      "adds variant values of different structures "
      f"({', '.join(sorted(type(x).__name__ for x in inputs))})",
    )
  return [jax.tree_util.tree_map(lambda *xs: AddN.apply(list(xs), {}), *inputs)]


AddN = register_op(
  "AddN",
  _add_n,
  **EW,
  linear=True,
  interpret=_add_n_interpret,
  transpose=lambda ct, *xs: [ct if U(x) else None for x in xs],
  spec=lambda st: st.Spec(_add_n_spec(st)),
)
