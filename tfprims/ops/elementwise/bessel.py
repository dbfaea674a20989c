"""Bessel functions: BesselI0, BesselI0e, BesselI1, BesselI1e, BesselK0, BesselK0e,
BesselK1, BesselK1e, BesselJ0, BesselJ1, BesselY0, BesselY1.

The impls are TF's CPU kernels (Eigen's ports of Cephes, BesselFunctionsImpl.h)
written with jnp: the same Chebyshev series and rational approximations, the
same intervals and the same values at the edges (K*(x <= 0) = inf, Y0(x <= 0) =
-inf, Y1(x < 0) = -inf; float32 Y1(0) is NaN, float64 Y1(0) is -inf, as in TF).
float32 uses Cephes' single-precision algorithms (as TF does) and float64 the
double ones; float16 and bfloat16 are computed in float32 and rounded, as TF's
half kernels do. I0e/I1e are XLA's ``bessel_i0e``/``bessel_i1e`` (ports of the
same Cephes series); I0/I1 are ``exp(|x|) * I0e/I1e``, Eigen's formula.

Derivatives are TF's (``math_grad.py``), written with TF ops: d I0 = I1,
d K0 = -K1, d J0 = -J1, d Y0 = -Y1, and the recurrences TF uses for the others
(with its values at x = 0: 1 for I1, 0.5 for I1e and J1).
"""

from __future__ import annotations

import numpy as np
from jax import lax
import jax.numpy as jnp

from tfprims import rules
from tfprims.core import register_op, tfops
from tfprims.ops.elementwise._common import EW

# ---------------------------------------------------------------------------
# Coefficients (Eigen's BesselFunctionsImpl.h). The single-precision K tables
# are the last 7 (A) and 10 (B) terms of the double ones.

_K0_A = (
  1.374465435613523e-16,
  4.25981614279661e-14,
  1.0349695257633842e-11,
  1.904516377220209e-09,
  2.5347910790261494e-07,
  2.286212103119452e-05,
  0.001264615411446926,
  0.0359799365153615,
  0.3442898999246285,
  -0.5353273932339028,
)
_K0_B = (
  5.300433772686263e-18,
  -1.6475804301524212e-17,
  5.2103915050390274e-17,
  -1.678231096805412e-16,
  5.512055978524319e-16,
  -1.848593377343779e-15,
  6.3400764774050706e-15,
  -2.2275133269916698e-14,
  8.032890775363575e-14,
  -2.9800969231727303e-13,
  1.140340588208475e-12,
  -4.514597883373944e-12,
  1.8559491149547177e-11,
  -7.957489244477107e-11,
  3.577397281400301e-10,
  -1.69753450938906e-09,
  8.574034017414225e-09,
  -4.660489897687948e-08,
  2.766813639445015e-07,
  -1.8317555227191195e-06,
  1.39498137188765e-05,
  -0.00012849549581627802,
  0.0015698838857300533,
  -0.0314481013119645,
  2.4403030820659555,
)
_K1_A = (
  -7.023863479386288e-18,
  -2.427449850519366e-15,
  -6.666901694199329e-13,
  -1.4114883926335278e-10,
  -2.213387630734726e-08,
  -2.4334061415659684e-06,
  -0.0001730288957513052,
  -0.006975723859639864,
  -0.12261118082265715,
  -0.3531559607765449,
  1.5253002273389478,
)
_K1_B = (
  -5.756744483665017e-18,
  1.7940508731475592e-17,
  -5.689462558442859e-17,
  1.838093544366639e-16,
  -6.057047248373319e-16,
  2.038703165624334e-15,
  -7.019837090418314e-15,
  2.4771544244813043e-14,
  -8.976705182324994e-14,
  3.3484196660784293e-13,
  -1.2891739609510289e-12,
  5.13963967348173e-12,
  -2.1299678384275683e-11,
  9.218315187605006e-11,
  -4.1903547593418965e-10,
  2.015049755197033e-09,
  -1.0345762465678097e-08,
  5.7410841254500495e-08,
  -3.5019606030878126e-07,
  2.406484947837217e-06,
  -1.936197974166083e-05,
  0.00019521551847135162,
  -0.002857816859622779,
  0.10392373657681724,
  2.7206261904844427,
)
_J0_PP = (
  0.0007969367292973471,
  0.08283523921074408,
  1.239533716464143,
  5.447250030587687,
  8.74716500199817,
  5.303240382353949,
  1.0,
)
_J0_PQ = (
  0.0009244088105588637,
  0.08562884743544745,
  1.2535274390105895,
  5.470977403304171,
  8.761908832370695,
  5.306052882353947,
  1.0,
)
_J0_QP = (
  -0.011366383889846916,
  -1.2825271867050931,
  -19.553954425773597,
  -93.20601521237683,
  -177.68116798048806,
  -147.07750515495118,
  -51.41053267665993,
  -6.050143506007285,
)
_J0_QQ = (
  1.0,
  64.3178256118178,
  856.4300259769806,
  3882.4018360540163,
  7240.467741956525,
  5930.727011873169,
  2062.0933166032783,
  242.0057402402914,
)
_J0_RP = (-4794432209.782018, 1956174919465.5657, -249248344360967.72, 9708622510473064.0)
_J0_RQ = (
  1.0,
  499.563147152651,
  173785.4016763747,
  48440965.83399621,
  11185553704.535683,
  2112775201154.892,
  310518229857422.56,
  3.1812195594320496e16,
  1.7108629408104315e18,
)
_J1_PP = (
  0.0007621256162081731,
  0.07313970569409176,
  1.1271960812968493,
  5.112079511468076,
  8.424045901417724,
  5.214515986823615,
  1.0,
)
_J1_PQ = (
  0.0005713231280725487,
  0.06884559087544954,
  1.105142326340617,
  5.073863861286015,
  8.399855543276042,
  5.209828486823619,
  1.0,
)
_J1_QP = (
  0.05108625947501766,
  4.982138729512334,
  75.82382841325453,
  366.7796093601508,
  710.8563049989261,
  597.4896124006136,
  211.68875710057213,
  25.207020585802372,
)
_J1_QQ = (
  1.0,
  74.23732770356752,
  1056.4488603826283,
  4986.410583376536,
  9562.318924047562,
  7997.041604473507,
  2826.1927851763908,
  336.0936078106983,
)
_J1_RP = (-899971225.7055594, 452228297998.19403, -72749424522181.83, 3682957328638529.0)
_J1_RQ = (
  1.0,
  620.8364781180543,
  256987.25675774884,
  83514679.14319493,
  22151159547.97925,
  4749141220799.914,
  784369607876235.9,
  8.952223361846274e16,
  5.322786203326801e18,
)
_Y0_YP = (
  15592.436785523574,
  -14663929.59039716,
  5435264770.518765,
  -982136065717.9115,
  87590639439536.7,
  -3466283033847297.0,
  4.4273326857256984e16,
  -1.8495080043698668e16,
)
_Y0_YQ = (
  1.0,
  1041.2835366425984,
  626107.330137135,
  268919633.39381415,
  86400248710.3935,
  20297961275010.555,
  3171577528429750.5,
  2.5059625617265306e17,
)
_Y1_YP = (
  1263204747.9017804,
  -647355876379.1603,
  114509511541823.73,
  -8127702555013251.0,
  2.024394757135949e17,
  -7.788771962659501e17,
)
_Y1_YQ = (
  1.0,
  594.3015923461282,
  235564.09294306856,
  73481194.44597217,
  18760131610.870617,
  3882312774962.3857,
  620557727146953.8,
  6.871410873553005e16,
  3.9727060811656064e18,
)
_J0F_JP = (
  -6.068350350393235e-08,
  6.388945720783375e-06,
  -0.000396964634251094,
  0.01332913422519003,
  -0.1729150680240724,
)
_J0F_MO = (
  -0.0683899966931881,
  0.1864949361379502,
  -0.2145007480346739,
  0.119754936947354,
  -0.003560281861530129,
  -0.0496938265529662,
  -3.355424622293709e-06,
  0.797884571762144,
)
_J0F_PH = (
  32.42077816988247,
  -36.30592630518434,
  17.56221482109099,
  -4.974978466280903,
  1.001973420681837,
  -0.1939906941791308,
  0.06490598792654666,
  -0.1249992184872738,
)
_Y0F_YP = (
  9.454583683980369e-08,
  -9.413212653797057e-06,
  0.0005344486707214273,
  -0.01584289289821316,
  0.1707584643733568,
)
_J1F_JP = (
  -4.878788132172128e-09,
  6.009061827883699e-07,
  -4.541343896997497e-05,
  0.001937383947804541,
  -0.03405537384615824,
)
_J1F_MO1 = (
  0.06913942741265801,
  -0.2284801500053359,
  0.3138238455499697,
  -0.2102302420403875,
  0.005435364690523026,
  0.1493389585089498,
  4.976029650847191e-06,
  0.7978845453073848,
)
_J1F_PH1 = (
  -44.97014141919556,
  50.73465654089319,
  -24.8577410872034,
  7.22297319677024,
  -1.544842782180211,
  0.3503787691653334,
  -0.1637986776941202,
  0.3749989509080821,
)
_Y1F_YP = (
  8.061978323326852e-09,
  -9.496460629917016e-07,
  6.719543806674249e-05,
  -0.002641785726447862,
  0.04202369946500099,
)

_K_F32_TERMS = (7, 10)
_PIO4 = 0.7853981633974483096
_THPIO4 = 2.35619449019234492885
_SQ2OPI = 7.9788456080286535587989e-1
_TWOOPI = 0.636619772367581343075535


def _c(value, x):
  return jnp.asarray(value, x.dtype)


def _polevl(x, coeffs):
  """Horner's rule (Eigen's ppolevl): coeffs[0] * x^n + ... + coeffs[n]."""
  out = _c(coeffs[0], x)
  for c in coeffs[1:]:
    out = out * x + _c(c, x)
  return out


def _chbevl(x, coeffs):
  """Clenshaw's recurrence for a Chebyshev series (Eigen's pchebevl)."""
  b0, b1, b2 = _c(coeffs[0], x), _c(0, x), _c(0, x)
  for c in coeffs[1:]:
    b2, b1 = b1, b0
    b0 = x * b1 + _c(c, x) - b2
  return _c(0.5, x) * (b0 - b2)


def _by_precision(f32, f64):
  """An impl computing float64 with ``f64`` and every other float with ``f32``
  (float16/bfloat16 up-cast to float32 and rounded back, as TF's half kernels)."""

  def impl(x):
    if x.dtype == np.float64:
      return f64(x)
    if x.dtype == np.float32:
      return f32(x)
    return f32(x.astype(np.float32)).astype(x.dtype)

  impl.__doc__ = f64.__doc__
  return impl


def _f64_only(x):
  return x.dtype == np.float64


# ---------------------------------------------------------------------------
# I0, I1 (from XLA's exponentially scaled ones) and K0, K1.


def _i0(x):
  return jnp.exp(jnp.abs(x)) * lax.bessel_i0e(x)


def _i1e(x):
  """XLA's i1e, +0.0 at -0.0 as TF's (Cephes negates the result for x < 0 only)."""
  return jnp.where(x == 0, jnp.zeros((), x.dtype), lax.bessel_i1e(x))


def _i1(x):
  return jnp.exp(jnp.abs(x)) * _i1e(x)


def _k_tables(x, a, b):
  if _f64_only(x):
    return a, b
  return a[-_K_F32_TERMS[0] :], b[-_K_F32_TERMS[1] :]


def _k0_small(x):
  a, _ = _k_tables(x, _K0_A, _K0_B)
  return _chbevl(x * x - _c(2, x), a) - jnp.log(_c(0.5, x) * x) * _i0(x)


def _k1_small(x):
  a, _ = _k_tables(x, _K1_A, _K1_B)
  return _chbevl(x * x - _c(2, x), a) / x + _i1(x) * jnp.log(_c(0.5, x) * x)


def _k_large_scaled(x, table):
  """The large-x series of K0/K1 times exp(x): chbevl(8/x - 2) / sqrt(x)."""
  _, b = _k_tables(x, table, table)
  return _chbevl(_c(8, x) / x - _c(2, x), b) * lax.rsqrt(x)


def _k(small, table, scaled):
  def impl(x):
    le_two = small(x)
    large = _k_large_scaled(x, table)
    if scaled:
      le_two = jnp.exp(x) * le_two
    else:
      large = jnp.exp(-x) * large
    le_two = jnp.where(x <= 0, _c(np.inf, x), le_two)
    return jnp.where(x <= 2, le_two, large)

  return impl


_k0 = _k(_k0_small, _K0_B, scaled=False)
_k0e = _k(_k0_small, _K0_B, scaled=True)
_k1 = _k(_k1_small, _K1_B, scaled=False)
_k1e = _k(_k1_small, _K1_B, scaled=True)


def _same(fn):
  return _by_precision(fn, fn)


# ---------------------------------------------------------------------------
# J0, Y0, J1, Y1: float32 (j0f.c, j1f.c) and float64 (j0.c, j1.c) algorithms.


def _asymptotic_f32(x, mo, ph, phase, trig):
  """Cephes' single-precision large-x form: sqrt(1/x) MO(1/x) trig(x + phase(1/x))."""
  q = _c(1, x) / x
  p = lax.rsqrt(x) * _polevl(q, mo)
  xn = q * _polevl(q * q, ph) - _c(phase, x)
  return p * trig(xn + x)


def _pq_f64(y):
  s = _c(25, y) / (y * y)
  return _polevl(s, _J0_PP) / _polevl(s, _J0_PQ), _polevl(s, _J0_QP) / _polevl(s, _J0_QQ)


def _pq1_f64(y):
  s = _c(25, y) / (y * y)
  return _polevl(s, _J1_PP) / _polevl(s, _J1_PQ), _polevl(s, _J1_QP) / _polevl(s, _J1_QQ)


def _j0_f32(x):
  y = jnp.abs(x)
  z = y * y
  small = jnp.where(
    y < _c(1e-3, y),
    z * _c(-0.25, y) + _c(1, y),
    (z - _c(5.78318596294678452118, y)) * _polevl(z, _J0F_JP),
  )
  return jnp.where(y <= 2, small, _asymptotic_f32(y, _J0F_MO, _J0F_PH, _PIO4, jnp.cos))


def _j0_f64(x):
  """Bessel function of the first kind of order 0 (Cephes j0/j0f)."""
  y = jnp.abs(x)
  z = y * y
  small = jnp.where(
    y < _c(1e-5, y),
    z * _c(-0.25, y) + _c(1, y),
    (z - _c(5.78318596294678452118, y))
    * (z - _c(3.04712623436620863991e1, y))
    * (_polevl(z, _J0_RP) / _polevl(z, _J0_RQ)),
  )
  p, q = _pq_f64(y)
  yn = y - _c(_PIO4, y)
  p = p * jnp.cos(yn) + (_c(-5, y) / y) * (q * jnp.sin(yn))
  return jnp.where(y <= 5, small, p * (_c(_SQ2OPI, y) * lax.rsqrt(y)))


def _y0_f32(x):
  z = x * x
  small = (z - _c(0.43221455686510834878, x)) * _polevl(z, _Y0F_YP) + _c(_TWOOPI, x) * (
    jnp.log(x) * _j0_f32(x)
  )
  small = jnp.where(x <= 0, _c(-np.inf, x), small)
  return jnp.where(x <= 2, small, _asymptotic_f32(x, _J0F_MO, _J0F_PH, _PIO4, jnp.sin))


def _y0_f64(x):
  """Bessel function of the second kind of order 0 (Cephes y0/y0f)."""
  z = x * x
  small = _c(_TWOOPI, x) * jnp.log(x) * _j0_f64(x) + _polevl(z, _Y0_YP) / _polevl(z, _Y0_YQ)
  small = jnp.where(x <= 0, _c(-np.inf, x), small)
  p, q = _pq_f64(x)
  xn = x - _c(_PIO4, x)
  p = p * jnp.sin(xn) + (_c(5, x) / x) * (q * jnp.cos(xn))
  return jnp.where(x <= 5, small, p * (_c(_SQ2OPI, x) * lax.rsqrt(x)))


def _j1_f32(x):
  y = jnp.abs(x)
  z = y * y
  small = (z - _c(1.46819706421238932572e1, x)) * (x * _polevl(z, _J1F_JP))
  large = _asymptotic_f32(y, _J1F_MO1, _J1F_PH1, _THPIO4, jnp.cos)
  large = jnp.where(x < 0, -large, large)  # Eigen: J1 is odd (Cephes is not)
  return jnp.where(y <= 2, small, large)


def _j1_f64(x):
  """Bessel function of the first kind of order 1 (Cephes j1/j1f)."""
  y = jnp.abs(x)
  z = y * y
  small = _polevl(z, _J1_RP) / _polevl(z, _J1_RQ)
  small = small * x * (z - _c(1.46819706421238932572e1, x)) * (z - _c(4.92184563216946036703e1, x))
  p, q = _pq1_f64(y)
  yn = y - _c(_THPIO4, y)
  p = p * jnp.cos(yn) + (_c(-5, y) / y) * (q * jnp.sin(yn))
  large = p * (_c(_SQ2OPI, y) * lax.rsqrt(y))
  large = jnp.where(x < 0, -large, large)
  return jnp.where(y <= 5, small, large)


def _y1_f32(x):
  z = x * x
  small = (z - _c(4.66539330185668857532, x)) * _polevl(z, _Y1F_YP)
  small = small * x + _c(_TWOOPI, x) * (_j1_f32(x) * jnp.log(x) + _c(-1, x) / x)
  small = jnp.where(x < 0, _c(-np.inf, x), small)  # x == 0 gives NaN, as in TF
  return jnp.where(x <= 2, small, _asymptotic_f32(x, _J1F_MO1, _J1F_PH1, _THPIO4, jnp.sin))


def _y1_f64(x):
  """Bessel function of the second kind of order 1 (Cephes y1/y1f)."""
  z = x * x
  small = _polevl(z, _Y1_YP) / _polevl(z, _Y1_YQ)
  small = small * x + _c(_TWOOPI, x) * (_j1_f64(x) * jnp.log(x) + _c(-1, x) / x)
  small = jnp.where(x <= 0, _c(-np.inf, x), small)
  p, q = _pq1_f64(x)
  xn = x - _c(_THPIO4, x)
  p = p * jnp.sin(xn) + (_c(5, x) / x) * (q * jnp.cos(xn))
  return jnp.where(x <= 5, small, p * (_c(_SQ2OPI, x) * lax.rsqrt(x)))


# ---------------------------------------------------------------------------
# The ops. TF's CPU kernels take float16, float32 and float64 (no bfloat16).

_DTYPES = ("float16", "float32", "float64")


def _spec(st, **kw):
  return st.Spec(st.unary_calls(_DTYPES), **kw)


def _where_zero(x, value, expr):
  """TF's ``where(equal(x, 0), value, expr)`` (its fix of 0/0 at x = 0)."""
  return tfops.SelectV2(
    tfops.Equal(x, rules.const(0, x), incompatible_shape_error=True), rules.const(value, x), expr
  )


def _jvp(op, partial):
  """``t * partial(x, y)``: TF's gradient ``grad * partial_x`` as a forward rule."""
  return rules.output_jvp(op, lambda t, y, x: tfops.Mul(t, partial(x, y)))


BesselI0 = register_op(
  "BesselI0",
  _by_precision(_i0, _i0),
  **EW,
  jvp=rules.per_op(_jvp, lambda x, y: tfops.BesselI1(x)),
  doc="Modified Bessel function of the first kind of order 0 (exp(|x|) * I0e(x)).",
  spec=_spec,
)

BesselI0e = register_op(
  "BesselI0e",
  _by_precision(lax.bessel_i0e, lax.bessel_i0e),
  **EW,
  jvp=rules.per_op(_jvp, lambda x, y: tfops.Sub(tfops.BesselI1e(x), tfops.Mul(tfops.Sign(x), y))),
  doc="Exponentially scaled modified Bessel function of order 0, exp(-|x|) I0(x).",
  spec=_spec,
)

BesselI1 = register_op(
  "BesselI1",
  _by_precision(_i1, _i1),
  **EW,
  jvp=rules.per_op(
    _jvp, lambda x, y: _where_zero(x, 1.0, tfops.Sub(tfops.BesselI0(x), tfops.RealDiv(y, x)))
  ),
  doc="Modified Bessel function of the first kind of order 1 (exp(|x|) * I1e(x)).",
  spec=_spec,
)

BesselI1e = register_op(
  "BesselI1e",
  _by_precision(_i1e, _i1e),
  **EW,
  jvp=rules.per_op(
    _jvp,
    lambda x, y: _where_zero(
      x,
      0.5,
      tfops.Sub(tfops.BesselI0e(x), tfops.Mul(y, tfops.AddV2(tfops.Sign(x), tfops.Reciprocal(x)))),
    ),
  ),
  doc="Exponentially scaled modified Bessel function of order 1, exp(-|x|) I1(x).",
  spec=_spec,
)

BesselK0 = register_op(
  "BesselK0",
  _same(_k0),
  **EW,
  jvp=rules.per_op(_jvp, lambda x, y: tfops.Neg(tfops.BesselK1(x))),
  doc="Modified Bessel function of the second kind of order 0 (Cephes k0; inf for x <= 0).",
  spec=_spec,
)

BesselK0e = register_op(
  "BesselK0e",
  _same(_k0e),
  **EW,
  jvp=rules.per_op(_jvp, lambda x, y: tfops.Sub(y, tfops.BesselK1e(x))),
  doc="Exponentially scaled K0, exp(x) K0(x) (Cephes k0e; inf for x <= 0).",
  spec=_spec,
)

BesselK1 = register_op(
  "BesselK1",
  _same(_k1),
  **EW,
  jvp=rules.per_op(_jvp, lambda x, y: tfops.Sub(tfops.Neg(tfops.BesselK0(x)), tfops.RealDiv(y, x))),
  doc="Modified Bessel function of the second kind of order 1 (Cephes k1; inf for x <= 0).",
  spec=_spec,
)

BesselK1e = register_op(
  "BesselK1e",
  _same(_k1e),
  **EW,
  jvp=rules.per_op(
    _jvp,
    lambda x, y: tfops.Sub(
      tfops.Mul(y, tfops.Sub(rules.const(1, x), tfops.Reciprocal(x))), tfops.BesselK0e(x)
    ),
  ),
  doc="Exponentially scaled K1, exp(x) K1(x) (Cephes k1e; inf for x <= 0).",
  spec=_spec,
)

BesselJ0 = register_op(
  "BesselJ0",
  _by_precision(_j0_f32, _j0_f64),
  **EW,
  jvp=rules.per_op(_jvp, lambda x, y: tfops.Neg(tfops.BesselJ1(x))),
  spec=_spec,
)

BesselJ1 = register_op(
  "BesselJ1",
  _by_precision(_j1_f32, _j1_f64),
  **EW,
  jvp=rules.per_op(
    _jvp, lambda x, y: _where_zero(x, 0.5, tfops.Sub(tfops.BesselJ0(x), tfops.RealDiv(y, x)))
  ),
  spec=_spec,
)

BesselY0 = register_op(
  "BesselY0",
  _by_precision(_y0_f32, _y0_f64),
  **EW,
  jvp=rules.per_op(_jvp, lambda x, y: tfops.Neg(tfops.BesselY1(x))),
  spec=_spec,
)

BesselY1 = register_op(
  "BesselY1",
  _by_precision(_y1_f32, _y1_f64),
  **EW,
  jvp=rules.per_op(_jvp, lambda x, y: tfops.Sub(tfops.BesselY0(x), tfops.RealDiv(y, x))),
  spec=_spec,
)
