"""Incomplete gamma and beta functions, Hurwitz zeta and polygamma: Igamma,
Igammac, IgammaGradA, Betainc, Zeta, Polygamma.

The impls are TF's CPU kernels (Eigen's ports of Cephes igam/igamc, incbet,
zeta and polygamma, SpecialFunctionsImpl.h) written with jnp: the same series
and continued fractions, iteration limits, convergence tests and edge values.
Eigen's scalar loops with early exit become one ``lax.while_loop`` over all
elements, each element frozen once it meets Eigen's ``break`` (so the loop
always ends: XLA's own ``lax.igamma`` does not return for a = x = 1e30). Eigen's
float and double variants of Betainc differ and are both kept. ``lgamma`` and
``digamma`` are XLA's (TF calls the C library's ``lgamma``): results agree to a
few ulps of ``lgamma``, which large arguments amplify.

Edge values (TF's, kept): Igamma(a, 0) = 0 for every a (NaN a too), Igamma/
Igammac are NaN for x < 0 or a <= 0; Zeta(1, q) = inf, Zeta(x < 1, q) = NaN,
Zeta(x, q <= 0 integer) is inf for even x, NaN otherwise; Polygamma(n, x) is
NaN unless n is a non-negative integer; Betainc is NaN for a <= 0, b <= 0 or x
outside [0, 1]. TF's double Zeta loops |q| times for q < -9 with integer x;
tfprims stops after 10^4 terms there.

Derivatives are TF's (``math_grad.py``) with TF ops: Igamma's is IgammaGradA in
``a`` and exp(-x + (a - 1) log x - lgamma(a)) in ``x`` (Igammac: their
negations); Betainc's is x^(a-1) (1-x)^(b-1) / B(a, b) in ``x`` and zero in
``a``, ``b``; Zeta's is -x Zeta(x + 1, q) in ``q`` and zero in ``x``;
Polygamma's is Polygamma(n + 1, x) in ``x`` and zero in ``n``. The zeros are
TF's (it returns no gradient there), not derivatives: docs/semantics/elementwise.md.
IgammaGradA (no TF gradient) differentiates in ``x`` only (exact, TF-named);
its derivative in ``a`` raises.
"""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np
from jax import lax
from jax.interpreters import ad

from tfprims import rules
from tfprims.core import register_op, tfops
from tfprims.ops.elementwise._common import EW, bcast

# ---------------------------------------------------------------------------
# Eigen's constants and the element-wise loop.


def _c(value, x):
  return jnp.asarray(value, x.dtype)


def _f64(x) -> bool:
  return x.dtype == np.float64


def _machep(x):
  return float(np.finfo(x.dtype).eps) / 2


def _big(x):
  eps = float(np.finfo(x.dtype).eps)
  return 1.0 / eps if _f64(x) else 2.0 / eps


def _biginv(x):
  eps = float(np.finfo(x.dtype).eps)
  return eps if _f64(x) else eps / 2


def _iterate(body, state, active, max_iters):
  """Eigen's per-element loop with ``break``, for all elements at once.

  ``body(i, state) -> (new_state, done)``; an active element takes the new state
  and stops after the iteration where ``done`` holds (Eigen's ``break`` comes
  after the updates); the loop ends when no element is active or after
  ``max_iters`` iterations.
  """

  def cond(carry):
    i, act, _ = carry
    return (i < max_iters) & jnp.any(act)

  def step(carry):
    i, act, st = carry
    new, done = body(i, st)
    st = tuple(jnp.where(act, n, o) for n, o in zip(new, st))
    return i + 1, act & ~done, st

  init = (jnp.asarray(0, np.int32), active, tuple(state))
  return lax.while_loop(cond, step, init)[2]


def _in_float32_or_wider(fn):
  """Operands broadcast; float16/bfloat16 (no TF CPU kernel) computed in float32."""

  def impl(*xs, **params):
    dtype = xs[0].dtype
    if dtype in (np.float32, np.float64):
      return fn(*bcast(*xs), **params)
    return fn(*bcast(*(x.astype(np.float32) for x in xs)), **params).astype(dtype)

  impl.__doc__ = fn.__doc__
  return impl


# ---------------------------------------------------------------------------
# Incomplete gamma (Eigen's igamma_series_impl, igammac_cf_impl).


def _main_term(a, x):
  """x^a e^-x / Gamma(a), 0 where its log underflows or is NaN."""
  logax = a * jnp.log(x) - x - lax.lgamma(a)
  under = (logax < -np.log(np.finfo(a.dtype).max)) | jnp.isnan(logax)
  return jnp.where(under, _c(0, a), jnp.exp(logax))


def _series(a, x, active, deriv):
  """P(a, x) by its power series (``deriv``: dP/da)."""
  ax = _main_term(a, x)
  active = active & (ax != 0)
  ax = ax / a
  one, zero, eps = _c(1, a), _c(0, a), _machep(a)

  def body(i, st):
    r, c, ans, dc_da, dans_da = st
    r = r + one
    term = x / r
    dterm_da = -x / (r * r)
    dc_da = term * dc_da + dterm_da * c
    dans_da = dans_da + dc_da
    c = c * term
    ans = ans + c
    done = (jnp.abs(dc_da) <= eps * jnp.abs(dans_da)) if deriv else (c <= eps * ans)
    return (r, c, ans, dc_da, dans_da), done

  n = (500 if _f64(a) else 200) if deriv else 2000
  init = (a, one + zero * a, one + zero * a, zero * a, zero * a)
  _, _, ans, _, dans_da = _iterate(body, init, active, n)
  if deriv:
    dlogax_da = jnp.log(x) - lax.digamma(a + one)
    out = ans * (ax * dlogax_da) + dans_da * ax
  else:
    out = ans * ax
  return jnp.where(ax == 0, zero, out)


def _continued_fraction(a, x, active, deriv):
  """Q(a, x) by its continued fraction (``deriv``: dQ/da)."""
  ax = _main_term(a, x)
  zero_out = jnp.isinf(x) | (ax == 0)
  active = active & ~zero_out
  one, zero, two, eps = _c(1, a), _c(0, a), _c(2, a), _machep(a)
  big, biginv = _big(a), _biginv(a)
  y = one - a
  z = x + y + one
  pkm1, qkm1 = x + one, z * x
  ans = pkm1 / qkm1
  dqkm1 = -x
  dans = (zero - ans * dqkm1) / qkm1

  def body(i, st):
    c, y, z, pkm2, pkm1, qkm2, qkm1, dpkm2, dpkm1, dqkm2, dqkm1, ans, dans = st
    c, y, z = c + one, y + one, z + two
    yc = y * c
    pk = pkm1 * z - pkm2 * yc
    qk = qkm1 * z - qkm2 * yc
    dpk = dpkm1 * z - pkm1 - dpkm2 * yc + pkm2 * c
    dqk = dqkm1 * z - qkm1 - dqkm2 * yc + qkm2 * c
    nonzero = qk != 0
    new_ans = pk / qk
    new_dans = (dpk - new_ans * dqk) / qk
    if deriv:
      done = nonzero & (jnp.abs(new_dans - dans) <= eps)
    else:
      done = nonzero & (jnp.abs(ans - new_ans) <= eps * jnp.abs(new_ans))
    ans = jnp.where(nonzero, new_ans, ans)
    dans = jnp.where(nonzero, new_dans, dans)
    scale = jnp.where(jnp.abs(pk) > big, _c(biginv, a), one)
    return (
      c,
      y,
      z,
      pkm1 * scale,
      pk * scale,
      qkm1 * scale,
      qk * scale,
      dpkm1 * scale,
      dpk * scale,
      dqkm1 * scale,
      dqk * scale,
      ans,
      dans,
    ), done

  zeros = zero * a
  init = (zeros, y, z, one + zeros, pkm1, x + zeros, qkm1, zeros, zeros, zeros, dqkm1, ans, dans)
  n = (500 if _f64(a) else 200) if deriv else 2000
  out = _iterate(body, init, active, n)
  ans, dans = out[-2], out[-1]
  if deriv:
    dlogax_da = jnp.log(x) - lax.digamma(a)
    res = ans * (ax * dlogax_da) + dans * ax
  else:
    res = ans * ax
  return jnp.where(zero_out, zero, res)


def _domain(a, x):
  return (x < 0) | (a <= 0) | jnp.isnan(a) | jnp.isnan(x)


def _igamma_generic(a, x, deriv):
  nan = _c(np.nan, a)
  bad = _domain(a, x)
  use_cf = (x > 1) & (x > a)
  valid = ~bad & (x != 0)
  cf = _continued_fraction(a, x, valid & use_cf, deriv)
  series = _series(a, x, valid & ~use_cf, deriv)
  out = jnp.where(use_cf, -cf if deriv else _c(1, a) - cf, series)
  out = jnp.where(bad, nan, out)
  return jnp.where(x == 0, _c(0, a), out)


def _igamma(a, x):
  """Regularized lower incomplete gamma function P(a, x)."""
  return _igamma_generic(a, x, deriv=False)


def _igamma_grad_a(a, x):
  """Derivative of P(a, x) in a (Eigen's igamma_der_a)."""
  return _igamma_generic(a, x, deriv=True)


def _igammac(a, x):
  """Regularized upper incomplete gamma function Q(a, x) = 1 - P(a, x)."""
  bad = _domain(a, x)
  use_series = (x < 1) | (x < a)
  series = _series(a, x, ~bad & use_series, deriv=False)
  cf = _continued_fraction(a, x, ~bad & ~use_series, deriv=False)
  out = jnp.where(use_series, _c(1, a) - series, cf)
  return jnp.where(bad, _c(np.nan, a), out)


# ---------------------------------------------------------------------------
# Hurwitz zeta (Eigen's zeta_impl: direct sum, then Euler-Maclaurin) and polygamma.

# Euler-Maclaurin coefficients (2k)! / B_2k.
_ZETA_A = (
  12.0,
  -720.0,
  30240.0,
  -1209600.0,
  47900160.0,
  -1.8924375803183791606e9,
  7.47242496e10,
  -2.950130727918164224e12,
  1.1646782814350067249e14,
  -4.5979787224074726105e15,
  1.8152105401943546773e17,
  -7.1661652561756670113e18,
)

# TF's double loop runs while a <= 9 (|q| terms for very negative q): capped here.
_ZETA_MAX_TERMS = 10_000


def _zeta(x, q):
  """Hurwitz zeta function sum_k (q + k)^-x."""
  one, zero, half, eps = _c(1, x), _c(0, x), _c(0.5, x), _machep(x)
  q_int = q == jnp.floor(q)
  x_even = jnp.round(half * x) == half * x
  special = jnp.where(x == 1, _c(np.inf, x), _c(np.nan, x))
  is_special = (x <= 1) | ((q <= 0) & (q_int | (x != jnp.floor(x))))
  special = jnp.where((x > 1) & (q <= 0) & q_int & x_even, _c(np.inf, x), special)

  s = jnp.power(q, -x)
  f64 = _f64(x)

  def body(i, st):
    a, b, s, _ = st
    a = a + one
    b = jnp.power(a, -x)
    s = s + b
    converged = jnp.abs(b / s) < eps
    more = ((i + 1 < 9) | (a <= 9)) if f64 else (i + 1 < 9)
    return (a, b, s, converged), converged | ~more

  a, b, s, converged = _iterate(
    body, (q, zero * s, s, jnp.zeros(s.shape, bool)), ~is_special, _ZETA_MAX_TERMS if f64 else 9
  )
  # Euler-Maclaurin tail (skipped where the sum converged or its last term is 0).
  live = ~converged & (b != 0)
  w = a
  s_tail = s + b * w / (x - one) - half * b
  s = jnp.where(live, s_tail, s)
  a, k = one + zero * s, zero * s
  for coeff in _ZETA_A:
    a = a * (x + k)
    b = b / w
    t = a * b / _c(coeff, x)
    s_next = s + t
    s = jnp.where(live, s_next, s)
    live = live & ~(jnp.abs(t / s_next) < eps)
    k = k + one
    a = a * (x + k)
    b = b / w
    k = k + one
  return jnp.where(is_special, special, s)


def _polygamma(n, x):
  """Polygamma function psi^(n)(x) = (-1)^(n+1) n! zeta(n + 1, x); digamma for n = 0."""
  one = _c(1, x)
  nplus = n + one
  factorial = jnp.exp(lax.lgamma(nplus))
  sign = jnp.where(
    jnp.isinf(nplus), one, jnp.where(jnp.fmod(nplus, _c(2, x)) == 0, one, -one)
  )  # C pow(-1, n + 1)
  out = sign * factorial * _zeta(nplus, x)
  out = jnp.where(n == 0, lax.digamma(x), out)
  return jnp.where((jnp.floor(n) != n) | (n < 0), _c(np.nan, x), out)


# ---------------------------------------------------------------------------
# Regularized incomplete beta (Eigen's betainc_impl<float> and <double>).


def _incbeta_cfe(a, b, x, small):
  """Eigen's incbeta_cfe: the continued fraction of incbet (two expansions)."""
  one, zero, two = _c(1, a), _c(0, a), _c(2, a)
  f64 = _f64(a)
  eps = _machep(a)
  thresh = 3 * eps if f64 else eps
  big, biginv = _c(_big(a), a), _c(_biginv(a), a)
  k26 = jnp.where(small, one, -one)
  k2 = jnp.where(small, a + b, b - one)
  k6 = jnp.where(small, b - one, a + b)
  x = jnp.where(small, x, x / (one - x))
  zeros = zero * a

  def body(i, st):
    k1, k2, k3, k4, k5, k6, k7, k8, pkm2, pkm1, qkm2, qkm1, ans = st
    xk = -(x * k1 * k2) / (k3 * k4)
    pk, qk = pkm1 + pkm2 * xk, qkm1 + qkm2 * xk
    pkm2, pkm1, qkm2, qkm1 = pkm1, pk, qkm1, qk
    xk = (x * k5 * k6) / (k7 * k8)
    pk, qk = pkm1 + pkm2 * xk, qkm1 + qkm2 * xk
    pkm2, pkm1, qkm2, qkm1 = pkm1, pk, qkm1, qk
    nonzero = qk != 0
    r = pk / qk
    done = nonzero & (jnp.abs(ans - r) < jnp.abs(r) * thresh)
    ans = jnp.where(nonzero, r, ans)
    k1, k2, k3, k4 = k1 + one, k2 + k26, k3 + two, k4 + two
    k5, k6, k7, k8 = k5 + one, k6 - k26, k7 + two, k8 + two
    down = jnp.where(jnp.abs(qk) + jnp.abs(pk) > big, biginv, one)
    pkm2, pkm1, qkm2, qkm1 = pkm2 * down, pkm1 * down, qkm2 * down, qkm1 * down
    up = jnp.where((jnp.abs(qk) < biginv) | (jnp.abs(pk) < biginv), big, one)
    pkm2, pkm1, qkm2, qkm1 = pkm2 * up, pkm1 * up, qkm2 * up, qkm1 * up
    return (k1, k2, k3, k4, k5, k6, k7, k8, pkm2, pkm1, qkm2, qkm1, ans), done

  init = (
    a,
    k2,
    a,
    a + one,
    one + zeros,
    k6,
    a + one,
    a + two,
    zeros,
    one + zeros,
    one + zeros,
    one + zeros,
    one + zeros,
  )
  return _iterate(body, init, jnp.ones(a.shape, bool), 300 if f64 else 100)[-1]


def _log_beta_ratio(a, b):
  """lgamma(a + b) - lgamma(a) - lgamma(b), in Eigen's order."""
  return lax.lgamma(a + b) - lax.lgamma(a) - lax.lgamma(b)


def _incbps_f32(a, b, x):
  """Eigen's float incbps: power series for b > 10 and |b x / a| < 0.3."""
  one, zero, eps = _c(1, a), _c(0, a), _machep(a)
  y = a * jnp.log(x) + (b - one) * jnp.log1p(-x) - jnp.log(a)
  y = y - (lax.lgamma(a) + lax.lgamma(b))
  y = y + lax.lgamma(a + b)
  t = x / (one - x)

  def body(i, st):
    a, b, u, s = st
    b = b - one
    stop = b == 0
    a_next = a + one
    u_next = u * (t * b / a_next)
    s_next = s + u_next
    return (
      (jnp.where(stop, a, a_next), b, jnp.where(stop, u, u_next), jnp.where(stop, s, s_next)),
      stop | ~(jnp.abs(u_next) > eps),
    )

  _, _, _, s = _iterate(body, (a, b, one + zero * a, zero * a), jnp.ones(a.shape, bool), 10_000)
  return jnp.exp(y) * (one + s)


def _betainc_f32(aa, bb, xx):
  one = _c(1, aa)

  def incbsa(aa, bb, xx):
    onemx = one - xx
    rev = xx > aa / (aa + bb)
    a, b = jnp.where(rev, bb, aa), jnp.where(rev, aa, bb)
    t, x = jnp.where(rev, xx, onemx), jnp.where(rev, onemx, xx)
    use_ps = (b > 10) & (jnp.abs(b * x / a) < 0.3)
    ps = _incbps_f32(a, b, x)
    small = x * (a + b - _c(2, a)) / (a - one) < one
    ans = _incbeta_cfe(a, b, x, small)
    t = jnp.where(small, b, b - one) * jnp.log(t)
    t = t + (a * jnp.log(x) + lax.lgamma(a + b) - lax.lgamma(a) - lax.lgamma(b))
    t = jnp.exp(t + jnp.log(ans / a))
    out = jnp.where(use_ps, ps, t)
    return jnp.where(rev, one - out, out)

  small_a = aa <= 1
  ans = incbsa(jnp.where(small_a, aa + one, aa), bb, xx)
  t = (
    aa * jnp.log(xx)
    + bb * jnp.log1p(-xx)
    + lax.lgamma(aa + bb)
    - lax.lgamma(aa + one)
    - lax.lgamma(bb)
  )
  return jnp.where(small_a, ans + jnp.exp(t), ans)


def _incbps_f64(a, b, x):
  """Eigen's double incbps: power series for b x <= 1 and x <= 0.95."""
  one, zero, eps = _c(1, a), _c(0, a), _machep(a)
  ai = one / a
  u = (one - b) * x
  v = u / (a + one)
  z = eps * ai

  def body(i, st):
    n, t, v, s = st
    u = (n - b) * x / n
    t = t * u
    v = t / (a + n)
    return (n + one, t, v, s + v), ~(jnp.abs(v) > z)

  _, _, _, s = _iterate(body, (_c(2, a) + zero * a, u, v, zero * a), jnp.abs(v) > z, 10_000)
  s = s + v + ai
  return jnp.exp(_log_beta_ratio(a, b) + a * jnp.log(x) + jnp.log(s))


def _betainc_f64(aa, bb, xx):
  one, eps = _c(1, aa), _machep(aa)
  direct_ps = (bb * xx <= 1) & (xx <= 0.95)
  w = one - xx
  rev = xx > aa / (aa + bb)
  a, b = jnp.where(rev, bb, aa), jnp.where(rev, aa, bb)
  xc, x = jnp.where(rev, xx, w), jnp.where(rev, w, xx)
  rev_ps = rev & (b * x <= 1) & (x <= 0.95)
  ps_a, ps_b, ps_x = (
    jnp.where(direct_ps, aa, a),
    jnp.where(direct_ps, bb, b),
    jnp.where(direct_ps, xx, x),
  )
  ps = _incbps_f64(ps_a, ps_b, ps_x)
  small = x * (a + b - _c(2, a)) - (a - one) < 0
  cfe = _incbeta_cfe(a, b, x, small)
  w = jnp.where(small, cfe, cfe / xc)
  y = a * jnp.log(x)
  t = b * jnp.log(xc)
  y = y + (t + lax.lgamma(a + b) - lax.lgamma(a) - lax.lgamma(b))
  t = jnp.exp(y + jnp.log(w / a))
  t = jnp.where(rev_ps, ps, t)
  t = jnp.where(rev, jnp.where(t <= eps, one - _c(eps, aa), one - t), t)
  return jnp.where(direct_ps, ps, t)


def _betainc(a, b, x):
  """Regularized incomplete beta function I_x(a, b)."""
  nan = _c(np.nan, a)
  inside = (x > 0) & (x < 1)
  # Harmless values where the result is decided above (the loops run on every
  # element); NaN a or b stay NaN, as in TF.
  sa = jnp.where(inside & ~(a <= 0), a, _c(1, a))
  sb = jnp.where(inside & ~(b <= 0), b, _c(1, a))
  sx = jnp.where(inside, x, _c(0.5, a))
  out = _betainc_f64(sa, sb, sx) if _f64(a) else _betainc_f32(sa, sb, sx)
  out = jnp.where(x == 0, _c(0, a), jnp.where(x == 1, _c(1, a), jnp.where(inside, out, nan)))
  return jnp.where((a <= 0) | (b <= 0), nan, out)


# ---------------------------------------------------------------------------
# The ops (TF's CPU kernels: float32 and float64).

_DTYPES = ("float32", "float64")


def _sum(*parts):
  """The sum (``tf.AddV2``) of the tangent parts that are not None."""
  parts = [p for p in parts if p is not None]
  out = parts[0] if parts else None
  for p in parts[1:]:
    out = tfops.AddV2(out, p)
  return out


def _binary_jvp(op, partials):
  """Full JVP of a two-operand op: ``sum_i t_i * partials[i](*primals, y)``
  (``None``: TF's missing gradient, i.e. zero)."""

  def rule(primals, tangents):
    y = op(*primals)
    parts = [
      tfops.Mul(t, p(*primals, y)) if p is not None and type(t) is not ad.Zero else None
      for t, p in zip(tangents, partials)
    ]
    tangent = _sum(*parts)
    return y, rules.zero_tangent(y) if tangent is None else tangent

  return rule


def _igamma_x_partial(a, x, y=None):
  """d/dx P(a, x) = exp(-x + (a - 1) log x - lgamma(a)) (TF's _IgammaGrad)."""
  return tfops.Exp(
    tfops.Sub(
      tfops.AddV2(tfops.Neg(x), tfops.Mul(tfops.Sub(a, rules.const(1, a)), tfops.Log(x))),
      tfops.Lgamma(a),
    )
  )


Igamma = register_op(
  "Igamma",
  _in_float32_or_wider(_igamma),
  **EW,
  jvp=rules.per_op(_binary_jvp, (lambda a, x, y: tfops.IgammaGradA(a, x), _igamma_x_partial)),
  spec=lambda st: st.Spec(_gamma_calls(st), rtol=_GAMMA_RTOL, examples=0.5),
)

Igammac = register_op(
  "Igammac",
  _in_float32_or_wider(_igammac),
  **EW,
  jvp=rules.per_op(
    _binary_jvp,
    (
      lambda a, x, y: tfops.Neg(tfops.IgammaGradA(a, x)),
      lambda a, x, y: tfops.Neg(_igamma_x_partial(a, x)),
    ),
  ),
  spec=lambda st: st.Spec(_gamma_calls(st), rtol=_GAMMA_RTOL, examples=0.5),
)


def _igamma_grad_a_jvp(primals, tangents):
  """No TF gradient. In x: d/dx dP/da = d/da dP/dx = dP/dx (log x - digamma(a));
  in a (the second derivative of P in a) tfprims has none and raises."""
  (a, x), (ta, tx) = primals, tangents
  y = tfops.IgammaGradA(a, x)
  if type(ta) is not ad.Zero:
    raise NotImplementedError(
      "IgammaGradA: no derivative in `a` (TF registers no gradient for IgammaGradA)"
    )
  if type(tx) is ad.Zero:
    return y, rules.zero_tangent(y)
  return y, tfops.Mul(
    tx, tfops.Mul(_igamma_x_partial(a, x), tfops.Sub(tfops.Log(x), tfops.Digamma(a)))
  )


IgammaGradA = register_op(
  "IgammaGradA",
  _in_float32_or_wider(_igamma_grad_a),
  **EW,
  jvp=_igamma_grad_a_jvp,
  spec=lambda st: st.Spec(
    _gamma_calls(st), rtol=_GAMMA_RTOL, note="derivative: in x only (TF has none)"
  ),
)

Zeta = register_op(
  "Zeta",
  _in_float32_or_wider(_zeta),
  **EW,
  # TF: none in x; -x * zeta(x + 1, q) in q.
  jvp=rules.per_op(
    _binary_jvp,
    (
      None,
      lambda x, q, y: tfops.Mul(tfops.Neg(x), tfops.Zeta(tfops.AddV2(x, rules.const(1, x)), q)),
    ),
  ),
  spec=lambda st: st.Spec(_zeta_calls(st), note="derivative in x: zero, as TF"),
)

Polygamma = register_op(
  "Polygamma",
  _in_float32_or_wider(_polygamma),
  **EW,
  # TF: none in n; polygamma(n + 1, x) in x.
  jvp=rules.per_op(
    _binary_jvp, (None, lambda n, x, y: tfops.Polygamma(tfops.AddV2(n, rules.const(1, n)), x))
  ),
  spec=lambda st: st.Spec(
    _polygamma_calls(st), rtol={"float32": 1e-4}, note="derivative in n: zero, as TF"
  ),
)


def _betainc_jvp(primals, tangents):
  """TF's _BetaincGrad: none in a and b (zero); in x, x^(a-1) (1-x)^(b-1) / B(a, b)
  as exp(xlog1py(b - 1, -x) + xlogy(a - 1, x) - log_beta)."""
  (a, b, x), (_, _, tx) = primals, tangents
  y = tfops.Betainc(a, b, x)
  if type(tx) is ad.Zero:
    return y, rules.zero_tangent(y)
  one = rules.const(1, x)
  log_beta = tfops.Sub(
    tfops.AddV2(tfops.Lgamma(a), tfops.Lgamma(b)), tfops.Lgamma(tfops.AddV2(a, b))
  )
  partial = tfops.Exp(
    tfops.Sub(
      tfops.AddV2(
        tfops.Xlog1py(tfops.Sub(b, one), tfops.Neg(x)), tfops.Xlogy(tfops.Sub(a, one), x)
      ),
      log_beta,
    )
  )
  return y, tfops.Mul(tx, partial)


Betainc = register_op(
  "Betainc",
  _in_float32_or_wider(_betainc),
  **EW,
  jvp=_betainc_jvp,
  spec=lambda st: st.Spec(
    _betainc_calls(st),
    rtol={"float32": 5e-4, "float64": 1e-10},
    atol={"float32": 1e-5},
    note="derivative in a, b: zero, as TF; float32 results carry "
    "lgamma's rounding (TF's and tfprims' differ by ~1e-4)",
  ),
)


# ---------------------------------------------------------------------------
# Property-test calls: mostly values where the functions are interesting, now and
# then TF's edge values (0, ±1, 2, 0.5, NaN, ±inf) for an operand.

# float32 results carry the rounding of lgamma(a) (C's lgammaf in TF, XLA's here).
_GAMMA_RTOL = {"float32": 1e-4}


def _calls(st, ranges, same_or_scalar=False, integer=(), finite=()):
  """Calls drawing each operand in ``ranges`` (name -> (lo, hi)) or, one time in
  four, from the edge values (without ±inf for ``finite`` operands: the
  derivative checks turn inf into 1e6, where lgamma's rounding decides the
  result); ``integer`` operands are mostly whole numbers; ``same_or_scalar``:
  each operand has the drawn shape or is a scalar (Betainc's kernel)."""
  names = tuple(ranges)

  @st.composite
  def draw(d):
    dtype = d(st.dtypes(_DTYPES))
    if same_or_scalar:
      shape = d(st.shapes())
      shapes = [shape if d(st.booleans()) else () for _ in names]
    else:
      shapes = d(st.broadcastable_shapes(len(names)))
    out = {}
    for name, shape in zip(names, shapes):
      lo, hi = ranges[name]
      if d(st.integers(0, 3)) == 0:
        value = st.draw_array(d, dtype, shape, ties=True, finite=name in finite)
      elif name in integer and d(st.integers(0, 3)) > 0:
        value = st.draw_array(d, np.dtype(np.int32), shape, int_lo=int(lo), int_hi=int(hi))
      else:
        value = st.draw_array(d, dtype, shape, lo=lo, hi=hi)
      out[name] = st.flush_subnormals(np.asarray(value).astype(dtype))
    return out

  return draw()


def _gamma_calls(st):
  return _calls(st, {"a": (0.0, 50.0), "x": (0.0, 100.0)}, finite=("a",))


def _zeta_calls(st):
  return _calls(st, {"x": (1.0, 30.0), "q": (-20.0, 50.0)}, integer=("x", "q"))


def _polygamma_calls(st):
  return _calls(st, {"a": (0.0, 8.0), "x": (-20.0, 50.0)}, integer=("a",))


def _betainc_calls(st):
  return _calls(
    st,
    {"a": (0.0, 100.0), "b": (0.0, 100.0), "x": (0.0, 1.0)},
    same_or_scalar=True,
    finite=("a", "b"),
  )
