"""Special functions of one argument: Erfinv, Ndtri, Dawsn, Expint, FresnelCos,
FresnelSin, Spence.

Dawsn, Expint, Fresnel* and Spence are TF's CPU kernels
(``special_math_op_misc_impl.h``, Cephes' rational approximations per interval)
written with jnp, with their values at the edges: Expint(x < 0) and
Spence(x < 0) are NaN (TF's domain), Spence(inf) is NaN, Fresnel*(|x| > 36974)
is ±0.5. One TF bug is not copied: TF's Dawsn(x) for x <= -1e9 is +0.5/|x|
(wrong sign); tfprims gives the odd function's -0.5/|x|. Erfinv is XLA's
``erf_inv`` and Ndtri ``jax.scipy.special.ndtri`` (Cephes, as TF): TF computes
Erfinv as ``ndtri(x / 2 + 1/2) / sqrt(2)``, which loses the relative accuracy
of tiny arguments (TF's float32 Erfinv(1e-10) is 0); tfprims keeps it.
See docs/semantics/elementwise.md.

Derivatives are TF's (``math_grad.py``) with TF ops: d Erfinv = sqrt(pi)/2
exp(y^2), d Ndtri = sqrt(2 pi) exp(y^2 / 2), d Dawsn = 1 - 2 x y, d Expint =
exp(x) / x, d FresnelCos/Sin = cos/sin(pi x^2 / 2), d Spence = log(x) / (1 - x)
(-1 at x = 1).
"""

from __future__ import annotations

import jax.numpy as jnp
import jax.scipy.special as jsp
import numpy as np
from jax import lax

from tfprims import rules
from tfprims.core import register_op, tfops
from tfprims.ops.elementwise._common import EW

# ---------------------------------------------------------------------------
# Coefficients (TF's special_math_op_misc_impl.h).

_DAWSN_AN = (
  1.1368149897175597e-11,
  8.492622676674738e-10,
  1.9443420417555306e-08,
  9.531517412544844e-07,
  3.078283098749132e-06,
  0.00035251336852028877,
  -0.0008501498467244109,
  0.04226182230055466,
  -0.09174803717734524,
  1.0,
)
_DAWSN_AD = (
  2.403720730667626e-11,
  1.488646813684934e-09,
  5.212652810105416e-08,
  1.2725847827318697e-06,
  2.324902498207895e-05,
  0.00032552474182605793,
  0.003488058146571626,
  0.027944853119882897,
  0.15887424196012057,
  0.5749186294893204,
  1.0,
)
_DAWSN_BN = (
  0.5089551564179009,
  -0.24475441814269785,
  0.09415123353035344,
  -0.021871125514203903,
  0.003662076123295692,
  -0.0004232091144603888,
  3.5964130479389666e-05,
  -2.1464035171996896e-06,
  9.100107800763914e-08,
  -2.4027452082825098e-09,
  3.592333854409284e-11,
)
_DAWSN_BD = (
  1.0,
  -0.6318398698733682,
  0.2367067882282487,
  -0.053180636700322324,
  0.008480417185862954,
  -0.0009479967684866654,
  7.810255929445524e-05,
  -4.558751532524426e-06,
  1.8910035811142186e-07,
  -4.913246913319206e-09,
  7.184664032357345e-11,
)
_DAWSN_CN = (
  -0.5905928605347732,
  0.6292352427243688,
  -0.17285897538038814,
  0.016483704782518965,
  -0.0004868276130204627,
)
_DAWSN_CD = (
  1.0,
  -2.698200571975449,
  1.7327079904594784,
  -0.3937085822819395,
  0.03442789240412334,
  -0.0009736552260409412,
)
_EI1_A = (
  -5.350447357812543,
  218.50491688166133,
  -4176.572384826693,
  55411.76756393557,
  -331338.13311781443,
  1592627.1633849454,
)
_EI1_B = (
  1.0,
  -52.505479591128626,
  1259.6161867867906,
  -17565.495819735348,
  149306.2117002726,
  -729494.9239640528,
  1592627.1633849454,
)
_EI2_A = (
  0.019818085032596897,
  -1.2716456259849176,
  -2.0881603356812284,
  2.7555445091879367,
  -0.44095070487016,
  0.046656238059358916,
  -0.0015450426796734852,
  7.059980605299618e-05,
)
_EI2_B = (
  1.0,
  1.4764986709149215,
  0.5629177174822436,
  0.16990178978793072,
  0.02291647179034212,
  0.0044501504397287525,
  0.00017274396122065214,
  3.953167195549672e-05,
)
_EI3_A = (
  -1.3732153758712087,
  -0.7084559133740839,
  1.580806855547941,
  -0.2601500427425623,
  0.029946746941137137,
  -0.001038086040188744,
  4.371064420753005e-05,
  2.141783679522603e-06,
)
_EI3_B = (
  1.0,
  0.8585231423622028,
  0.4483285822873995,
  0.07687932158124476,
  0.024498682410218877,
  0.0008832165941927797,
  0.00045909522995113536,
  -4.729848351866523e-06,
  2.66519553739071e-06,
)
_EI4_A = (
  -2.1069346016919166,
  1.7327338696646881,
  -0.2423619178935842,
  0.02322724180937566,
  0.00023728804404931798,
  -8.343219561192553e-05,
  1.3634087956052505e-05,
  -3.655412321999254e-07,
  1.4649417339759612e-08,
  6.17640786371036e-10,
)
_EI4_B = (
  1.0,
  -0.2298062239901678,
  0.11050770414740378,
  -0.015665429666307924,
  0.002761106850817353,
  -0.00020891480122840484,
  1.7085289388076754e-05,
  -4.4593117963566865e-07,
  1.3946349303538475e-08,
  6.150865933977338e-10,
)
_EI5_A = (
  -0.24581193676740204,
  -0.14833822533220778,
  0.07248291795735552,
  -0.013483156873809405,
  0.001342775069788637,
  -7.942465637159712e-05,
  2.644179518984236e-06,
  -4.239473659313765e-08,
)
_EI5_B = (
  1.0,
  -0.10442259084438711,
  -0.26764531281014026,
  0.09695000254621984,
  -0.01601745692712991,
  0.001496414899205908,
  -8.462452563778485e-05,
  2.7289384034767266e-06,
  -4.239462431819542e-08,
)
_EI6_A = (
  0.12125611181054567,
  -0.5823133179043894,
  0.2348887314557017,
  -0.030400343181132484,
  0.0015100821468651906,
  -2.5231370954995714e-05,
)
_EI6_B = (
  1.0,
  -1.002252150365854,
  0.2928709694872224,
  -0.03337004338674008,
  0.0015605448811273888,
  -2.5231370936032347e-05,
)
_EI7_A = (
  -0.7657847078286127,
  0.6886192415566705,
  -0.2132598113545206,
  0.033461075523841935,
  -0.003076541477344756,
  0.00017471193164549074,
  -6.1037116822741705e-06,
  1.218032765428652e-07,
  -1.0860761027932903e-09,
)
_EI7_B = (
  1.0,
  -1.8888028686623086,
  1.066691687211409,
  -0.27519159823063805,
  0.039308526882338234,
  -0.003414684558602365,
  0.00018668443707035555,
  -6.345146083130515e-06,
  1.239754287483207e-07,
  -1.0860761027931265e-09,
)
_FRESNEL_CN = (
  -4.9884311457357354e-08,
  9.504280628298596e-06,
  -0.0006451914356839651,
  0.018884331939670384,
  -0.20552590095501388,
  1.0,
)
_FRESNEL_CD = (
  3.99982968972496e-12,
  9.154392157746574e-10,
  1.2500186247959882e-07,
  1.2226278902417902e-05,
  0.0008680295429417843,
  0.04121420907221998,
  1.0,
)
_FRESNEL_SN = (
  -2991.8191940101983,
  708840.0452577386,
  -62974148.62058625,
  2548908805.7337637,
  -44297951805.96978,
  318016297876.5678,
)
_FRESNEL_SD = (
  1.0,
  281.3762688899943,
  45584.78108065326,
  5173438.887700964,
  419320245.8981112,
  22441179564.534092,
  607366389490.0846,
)
_FRESNEL_FN = (
  0.4215435550436775,
  0.1434079197807589,
  0.011522095507358577,
  0.000345017939782574,
  4.6361374928786735e-06,
  3.055689837902576e-08,
  1.0230451416490724e-10,
  1.7201074326816183e-13,
  1.3428327623306275e-16,
  3.763297112699879e-20,
)
_FRESNEL_FD = (
  1.0,
  0.7515863983533789,
  0.11688892585919138,
  0.0064405152650885865,
  0.00015593440916415301,
  1.8462756734893055e-06,
  1.1269922476399903e-08,
  3.6014002958937136e-11,
  5.887545336215784e-14,
  4.5200143407412973e-17,
  1.2544323709001127e-20,
)
_FRESNEL_GN = (
  0.5044420736433832,
  0.1971028335255234,
  0.018764858409257526,
  0.0006840793809153931,
  1.1513882611188428e-05,
  9.828524436884223e-08,
  4.4534441586175015e-10,
  1.0826804113902088e-12,
  1.375554606332618e-15,
  8.363544356306774e-19,
  1.8695871016278324e-22,
)
_FRESNEL_GD = (
  1.0,
  1.4749575992512833,
  0.33774898912002,
  0.02536037414203388,
  0.0008146791071843061,
  1.2754507566772912e-05,
  1.0431458965757199e-07,
  4.6068072814652043e-10,
  1.1027321506624028e-12,
  1.3879653125957886e-15,
  8.391588162831187e-19,
  1.8695871016278324e-22,
)
_SPENCE_A = (
  4.6512858607399003e-05,
  0.007315890452380947,
  0.13384763957830903,
  0.8796913117545303,
  2.7114985119655346,
  4.256971560081218,
  3.297713409852251,
  1.0,
)
_SPENCE_B = (
  0.0006909904889125533,
  0.02540437639325444,
  0.2829748606025681,
  1.4117259775183106,
  3.6380053334513707,
  5.03278880143317,
  3.547713409852251,
  1.0,
)


def _c(value, x):
  return jnp.asarray(value, x.dtype)


def _polevl(x, coeffs):
  """Horner's rule: coeffs[0] * x^n + ... + coeffs[n]."""
  out = _c(coeffs[0], x)
  for c in coeffs[1:]:
    out = out * x + _c(c, x)
  return out


def _in_float32_or_wider(fn):
  """TF's kernels take float32/float64; float16/bfloat16 are computed in float32."""

  def impl(x):
    if x.dtype in (np.float32, np.float64):
      return fn(x)
    return fn(x.astype(np.float32)).astype(x.dtype)

  impl.__doc__ = fn.__doc__
  return impl


# ---------------------------------------------------------------------------
# Dawsn, Expint, Fresnel, Spence.


def _dawsn(x):
  """Dawson's integral exp(-x^2) * int_0^x exp(t^2) dt (TF's Cephes intervals)."""
  ax = jnp.abs(x)
  one, half = _c(1, x), _c(0.5, x)
  x2 = ax * ax
  r1 = ax * _polevl(x2, _DAWSN_AN) / _polevl(x2, _DAWSN_AD)

  inv = one / ax
  inv2 = inv * inv

  def tail(num, den):
    z = _polevl(inv2, num) / (ax * _polevl(inv2, den))
    return half * (inv2 * z + inv)

  r2 = tail(_DAWSN_BN, _DAWSN_BD)
  r3 = tail(_DAWSN_CN, _DAWSN_CD)
  r = jnp.where(ax < 3.25, r1, jnp.where(ax < 6.25, r2, jnp.where(ax < 1e9, r3, half / ax)))
  return jnp.where(x < 0, -r, r)


_EI_TAIL = (
  (4.0, _EI2_A, _EI2_B),
  (8.0, _EI3_A, _EI3_B),
  (16.0, _EI4_A, _EI4_B),
  (32.0, _EI5_A, _EI5_B),
  (64.0, _EI6_A, _EI6_B),
  (np.inf, _EI7_A, _EI7_B),
)


def _expint(x):
  """The exponential integral Ei(x) for x >= 0; NaN for x < 0, as in TF."""
  one = _c(1, x)
  small = x * (_polevl(x, _EI1_A) / _polevl(x, _EI1_B)) + _c(0.5772156649015329, x) + jnp.log(x)
  out = small
  lo = 2.0
  for hi, num, den in _EI_TAIL:
    # x exp(-x) Ei(x) - 1 = 1/x R(1/x) on [lo, hi)
    w = one / x
    f = w * (_polevl(w, num) / _polevl(w, den)) + one
    out = jnp.where(x >= lo, jnp.exp(x) * w * f, out)
    lo = hi
  return jnp.where(x < 0, _c(np.nan, x), out)


def _fresnel(x, sine):
  """Fresnel integral S(x) (``sine``) or C(x) (TF's Cephes intervals)."""
  ax = jnp.abs(x)
  one, half = _c(1, x), _c(0.5, x)
  pi = _c(np.pi, x)
  x2 = ax * ax
  x4 = x2 * x2
  if sine:
    small = (ax * x2) * _polevl(x4, _FRESNEL_SN) / _polevl(x4, _FRESNEL_SD)
  else:
    small = ax * _polevl(x4, _FRESNEL_CN) / _polevl(x4, _FRESNEL_CD)
  t = one / (pi * x2)
  u = t * t
  f = one - u * (_polevl(u, _FRESNEL_FN) / _polevl(u, _FRESNEL_FD))
  g = t * _polevl(u, _FRESNEL_GN) / _polevl(u, _FRESNEL_GD)
  z = _c(1.5707963267948966, x) * x2
  c, s = jnp.cos(z), jnp.sin(z)
  y = one / (pi * ax)
  large = half - (f * c + g * s) * y if sine else half + (f * s - g * c) * y
  r = jnp.where(x2 < 2.5625, small, large)
  r = jnp.where(ax > 36974, half, r)
  return jnp.where(x < 0, -r, r)


def _fresnel_cos(x):
  """Fresnel cosine integral C(x) = int_0^x cos(pi t^2 / 2) dt."""
  return _fresnel(x, sine=False)


def _fresnel_sin(x):
  """Fresnel sine integral S(x) = int_0^x sin(pi t^2 / 2) dt."""
  return _fresnel(x, sine=True)


def _spence(x):
  """Spence's function (dilogarithm) int_1^x log(t) / (1 - t) dt; NaN for x < 0."""
  one, half = _c(1, x), _c(0.5, x)
  pi2o6 = _c(np.pi * np.pi / 6.0, x)
  y = jnp.where(x < 2, x, one / x)
  w = jnp.where(y > 1.5, one / y - one, jnp.where(y < half, -y, y - one))
  s = -w * (_polevl(w, _SPENCE_A) / _polevl(w, _SPENCE_B))
  z = jnp.log(y)
  s = jnp.where(y < half, -z * jnp.log1p(-y) + pi2o6 - s, s)
  s = jnp.where(x > 1.5, -half * z * z - s, s)
  s = jnp.where(x == 1, _c(0, x), s)
  s = jnp.where(x == 0, pi2o6, s)
  return jnp.where(x < 0, _c(np.nan, x), s)


# ---------------------------------------------------------------------------
# The ops. TF's CPU kernels take float32 and float64 only.

_DTYPES = ("float32", "float64")

# TF's Dawsn has the wrong sign for x <= -1e9 (not copied, not drawn).
_TF_DAWSN_SIGN_BUG_BELOW = -1e9


def _calls(st, lo=None, hi=None, avoid=None):
  """Calls on ``_DTYPES``: half of them with values in [lo, hi] (where the
  function is interesting), half over the whole range (NaN, ±inf, huge...);
  no subnormals (XLA's CPU code reads them as 0, TF's kernels do not)."""
  calls = st.unary_calls(_DTYPES)
  if lo is not None:
    calls = st.one_of(st.unary_calls(_DTYPES, lo=lo, hi=hi), calls)
  calls = calls.map(lambda call: {"x": st.flush_subnormals(call["x"])})
  if avoid is not None:
    calls = calls.map(avoid)
  return calls


def _off_dawsn_bug(call):
  x = call["x"]
  return {"x": np.where(x <= _TF_DAWSN_SIGN_BUG_BELOW, np.asarray(-1e8, x.dtype), x)}


def _off_erfinv_saturation(call):
  """TF's float32 Erfinv gives +-inf for the float32 next to +-1 (x/2 + 1/2 rounds
  to 1); tfprims gives the finite value (docs/semantics/elementwise.md)."""
  x = call["x"]
  if x.dtype != np.float32:
    return call
  edge = np.abs(x) == np.float32(1 - 2.0**-24)
  return {"x": np.where(edge, np.float32(0.5), x)}


def _jvp(op, partial):
  """``t * partial(x, y)`` (TF: ``grad * partial_x``)."""
  return rules.output_jvp(op, lambda t, y, x: tfops.Mul(t, partial(x, y)))


def _erfinv(x):
  """XLA's erf_inv, with TF's +0.0 at x = -0.0 (TF's ndtri(x / 2 + 1/2) / sqrt(2))."""
  return jnp.where(x == 0, jnp.zeros((), x.dtype), lax.erf_inv(x))


Erfinv = register_op(
  "Erfinv",
  _in_float32_or_wider(_erfinv),
  **EW,
  # TF: grad * sqrt(pi) / 2 * exp(erfinv(x)^2)
  jvp=rules.per_op(
    rules.output_jvp,
    lambda t, y, x: tfops.Mul(
      tfops.Mul(t, rules.const(np.sqrt(np.pi) / 2, x)), tfops.Exp(tfops.Square(y))
    ),
  ),
  doc="Inverse error function (XLA's erf_inv; TF computes ndtri(x/2 + 1/2) / sqrt(2)).",
  spec=lambda st: st.Spec(_calls(st, -1.0, 1.0, avoid=_off_erfinv_saturation)),
)

Ndtri = register_op(
  "Ndtri",
  _in_float32_or_wider(jsp.ndtri),
  **EW,
  # TF: grad * sqrt(2 pi) * exp(ndtri(x)^2 / 2)
  jvp=rules.per_op(
    rules.output_jvp,
    lambda t, y, x: tfops.Mul(
      tfops.Mul(t, rules.const(np.sqrt(2 * np.pi), x)),
      tfops.Exp(tfops.RealDiv(tfops.Square(y), rules.const(2, x))),
    ),
  ),
  doc="Inverse of the standard normal CDF (Cephes ndtri, as TF).",
  spec=lambda st: st.Spec(_calls(st, 0.0, 1.0)),
)

Dawsn = register_op(
  "Dawsn",
  _in_float32_or_wider(_dawsn),
  **EW,
  # TF: grad * (1 - 2 x y)
  jvp=rules.per_op(
    _jvp, lambda x, y: tfops.Sub(rules.const(1, x), tfops.Mul(tfops.Mul(rules.const(2, x), x), y))
  ),
  spec=lambda st: st.Spec(
    _calls(st, -10.0, 10.0, avoid=_off_dawsn_bug),
    note="x <= -1e9: TF's kernel has the wrong sign (not drawn)",
  ),
)

Expint = register_op(
  "Expint",
  _in_float32_or_wider(_expint),
  **EW,
  # TF: grad * exp(x) / x
  jvp=rules.per_op(rules.output_jvp, lambda t, y, x: tfops.RealDiv(tfops.Mul(t, tfops.Exp(x)), x)),
  spec=lambda st: st.Spec(_calls(st, 0.0, 100.0)),
)


def _fresnel_jvp(op, trig):
  # TF: grad * trig(pi / 2 * x^2)
  return _jvp(
    op, lambda x, y: getattr(tfops, trig)(tfops.Mul(rules.const(np.pi / 2, x), tfops.Square(x)))
  )


FresnelCos = register_op(
  "FresnelCos",
  _in_float32_or_wider(_fresnel_cos),
  **EW,
  jvp=rules.per_op(_fresnel_jvp, "Cos"),
  spec=lambda st: st.Spec(_calls(st, -10.0, 10.0)),
)

FresnelSin = register_op(
  "FresnelSin",
  _in_float32_or_wider(_fresnel_sin),
  **EW,
  jvp=rules.per_op(_fresnel_jvp, "Sin"),
  spec=lambda st: st.Spec(_calls(st, -10.0, 10.0)),
)

Spence = register_op(
  "Spence",
  _in_float32_or_wider(_spence),
  **EW,
  # TF: grad * where(x == 1, -1, log(x) / (1 - x))
  jvp=rules.per_op(
    _jvp,
    lambda x, y: tfops.SelectV2(
      tfops.Equal(x, rules.const(1, x), incompatible_shape_error=True),
      rules.const(-1, x),
      tfops.RealDiv(tfops.Log(x), tfops.Sub(rules.const(1, x), x)),
    ),
  ),
  spec=lambda st: st.Spec(_calls(st, 0.0, 10.0)),
)
