"""Complex numbers: Complex, Conj, Real, Imag, Angle, ComplexAbs.

Complex/Real/Imag/Angle/ComplexAbs: ``Tout`` is decided by the input (float32
<-> complex64, float64 <-> complex128 are the only CPU kernels), so it is not
kept. Complex broadcasts its operands (TF's binary-op broadcasting).
JAX's cotangent convention for C -> R maps: real^T(ct) = ct + 0j,
imag^T(ct) = -i ct (the pairing is Re(u * v), without conjugation).
"""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np
from jax import lax
from jax.interpreters import ad

from tfprims import rules
from tfprims.core import register_op, tfops
from tfprims.ops.elementwise._common import EW, bcast


def _tout(dtype):
  """The ``Tout`` attr of a drawn call: the real type of ``dtype``."""
  return np.dtype(np.float64 if dtype == np.complex128 else np.float32)


def _complex_tout(dtype):
  """The ``Tout`` attr of a drawn Complex call: the complex type of ``dtype``."""
  return np.dtype(np.complex128 if dtype == np.float64 else np.complex64)


def _complex(real, imag):
  """real + i imag, broadcast (tf.complex)."""
  return lax.complex(*bcast(real, imag))


def _complex_transpose(ct, real, imag):
  # JAX pairs a complex cotangent with a tangent by Re(ct * t): complex(x, 0)
  # transposes to Re(ct), complex(0, y) to -Im(ct) (TF's _ComplexGrad returns
  # (real(grad), imag(grad)) in its conjugated convention).
  U = rules.U
  return [
    rules.unbroadcast(tfops.Real(ct), rules.shape_of(real)) if U(real) else None,
    rules.unbroadcast(tfops.Neg(tfops.Imag(ct)), rules.shape_of(imag)) if U(imag) else None,
  ]


Complex = register_op(
  "Complex",
  _complex,
  **EW,
  linear=True,
  transpose=_complex_transpose,
  spec=lambda st: st.Spec(
    st.binary_calls(("float32", "float64"), args=("real", "imag"), attrs={"Tout": _complex_tout})
  ),
)


Conj = register_op(
  "Conj",
  jnp.conj,
  **EW,
  linear=True,
  transpose=lambda ct, x: [tfops.Conj(ct)],
  spec=lambda st: st.Spec(st.unary_calls(st.COMPLEX, arg="input")),
)

Real = register_op(
  "Real",
  jnp.real,
  **EW,
  linear=True,
  transpose=lambda ct, x: [rules.cast_like(ct, x)],
  spec=lambda st: st.Spec(st.unary_calls(st.COMPLEX, arg="input", attrs={"Tout": _tout})),
)

Imag = register_op(
  "Imag",
  jnp.imag,
  **EW,
  linear=True,
  transpose=lambda ct, x: [tfops.Mul(rules.cast_like(ct, x), rules.const(-1j, x))],
  spec=lambda st: st.Spec(st.unary_calls(st.COMPLEX, arg="input", attrs={"Tout": _tout})),
)

Angle = register_op(
  "Angle",
  jnp.angle,
  **EW,
  spec=lambda st: st.Spec(
    st.unary_calls(st.COMPLEX, arg="input", attrs={"Tout": _tout}, cnonzero=True)
  ),
)


def _complex_abs_jvp(primals, tangents):
  # TF: div_no_nan(complex(grad, 0) * x, complex(|x|, 0)): 0 at x == 0.
  # As a JVP of the real-valued |x|: Re(conj(x) t) / |x|, and 0 at x == 0.
  (x,), (t,) = primals, tangents
  y = tfops.ComplexAbs(x)
  if type(t) is ad.Zero:
    return y, rules.zero_tangent(y)
  return y, tfops.DivNoNan(tfops.Real(tfops.Mul(tfops.Conj(x), t)), y)


ComplexAbs = register_op(
  "ComplexAbs",
  jnp.abs,
  **EW,
  jvp=_complex_abs_jvp,
  spec=lambda st: st.Spec(st.unary_calls(st.COMPLEX, arg="x", attrs={"Tout": _tout})),
)
