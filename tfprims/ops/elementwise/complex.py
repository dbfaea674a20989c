"""Complex numbers: Conj, Real, Imag, Angle, ComplexAbs.

Real/Imag/Angle/ComplexAbs: ``Tout`` is decided by the input (complex64 ->
float32, complex128 -> float64 are the only CPU kernels), so it is not kept.
JAX's cotangent convention for C -> R maps: real^T(ct) = ct + 0j,
imag^T(ct) = -i ct (the pairing is Re(u * v), without conjugation).
"""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np
from jax.interpreters import ad

from tfprims import rules
from tfprims.core import define_op, tfops
from tfprims.ops.elementwise._common import EW


def _tout(dtype):
  """The ``Tout`` attr of a drawn call: the real type of ``dtype``."""
  return np.dtype(np.float64 if dtype == np.complex128 else np.float32)


Conj = define_op(
    "Conj", jnp.conj, **EW, linear=True, transpose=lambda ct, x: [tfops.Conj(ct)],
    spec=lambda st: st.Spec(st.unary_calls(st.COMPLEX, arg="input")))

Real = define_op(
    "Real", jnp.real, **EW, linear=True,
    transpose=lambda ct, x: [rules.cast_like(ct, x)],
    spec=lambda st: st.Spec(st.unary_calls(st.COMPLEX, arg="input", attrs={"Tout": _tout})))

Imag = define_op(
    "Imag", jnp.imag, **EW, linear=True,
    transpose=lambda ct, x: [tfops.Mul(rules.cast_like(ct, x), rules.const(-1j, x))],
    spec=lambda st: st.Spec(st.unary_calls(st.COMPLEX, arg="input", attrs={"Tout": _tout})))

Angle = define_op(
    "Angle", jnp.angle, **EW,
    spec=lambda st: st.Spec(st.unary_calls(st.COMPLEX, arg="input", attrs={"Tout": _tout},
                                           cnonzero=True)))


def _complex_abs_jvp(primals, tangents):
  # TF: div_no_nan(complex(grad, 0) * x, complex(|x|, 0)): 0 at x == 0.
  # As a JVP of the real-valued |x|: Re(conj(x) t) / |x|, and 0 at x == 0.
  (x,), (t,) = primals, tangents
  y = tfops.ComplexAbs(x)
  if type(t) is ad.Zero:
    return y, rules.zero_tangent(y)
  return y, tfops.DivNoNan(tfops.Real(tfops.Mul(tfops.Conj(x), t)), y)


ComplexAbs = define_op(
    "ComplexAbs", jnp.abs, **EW, jvp=_complex_abs_jvp,
    spec=lambda st: st.Spec(st.unary_calls(st.COMPLEX, arg="x", attrs={"Tout": _tout})))
