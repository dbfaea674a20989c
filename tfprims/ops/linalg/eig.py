"""Eig: eigenvalues and eigenvectors of general (non-Hermitian) matrices.

TF's CPU kernel (Eigen's EigenSolver / ComplexEigenSolver) returns the
eigenvalues in the order its Schur form makes them, which no other algorithm
reproduces. Ours come sorted by real part, then imaginary part (a conjugate
pair of a real matrix: negative imaginary part first), with unit eigenvectors in
the phase gauge of :func:`tfprims.ops.linalg.factorizations.fix_phase`; the spec
applies the same order and gauge to TF's outputs. The impl is
``jnp.linalg.eig`` (XLA implements it on CPU).

The JVP is written out (JAX differentiates only eigenvalues of ``eig``):
``dw = diag(V^-1 dA V)``, ``dV = V (F o (V^-1 dA V))`` with
``F_ij = 1 / (w_j - w_i)`` off the diagonal, then the derivative of the unit
normalisation and the phase gauge. Batching re-binds the op with the batch axis
in front (``rules.leading_batching``).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from jax.interpreters import ad

from tfprims import dtypes as tfdtypes
from tfprims import rules
from tfprims.core import register_op, tfops
from tfprims.ops.linalg import factorizations
from tfprims.ops.linalg._common import FAMILY
from tfprims.errors import import_tensorflow


def _eig_sorted(x, tout):
  """Eigenvalues (sorted by real, then imaginary part) and unit eigenvectors."""
  w, v = jnp.linalg.eig(x)
  order = jnp.lexsort((jnp.imag(w), jnp.real(w)), axis=-1)
  w = jnp.take_along_axis(w, order, axis=-1)
  v = jnp.take_along_axis(v, order[..., None, :], axis=-1)
  return w.astype(tout), v.astype(tout)


def _normalise(v):
  return factorizations.fix_phase(v / jnp.linalg.norm(v, axis=-2, keepdims=True))[0]


def _eig(x, *, compute_v, Tout):
  """Sorted eigenvalues and, with ``compute_v``, gauge-fixed unit eigenvectors
  (without: a scalar zero, where TF's eager kernel returns an uninitialised one)."""
  tout = tfdtypes.canonical_dtype(Tout)
  n, batch = x.shape[-1], x.shape[:-2]
  placeholder = jnp.zeros((), tout)
  if n == 0 or x.size == 0:
    return (
      jnp.zeros(batch + (n,), tout),
      jnp.zeros(batch + (n, n), tout) if compute_v else placeholder,
    )
  w, v = _eig_sorted(x, tout)
  return w, (factorizations.fix_phase(v)[0] if compute_v else placeholder)


def _eig_jvp(primals, tangents, *, compute_v, Tout):
  (x,), (t,) = primals, tangents
  e, vout = tfops.Eig(x, compute_v=compute_v, Tout=Tout)
  if type(t) is ad.Zero or x.size == 0:
    return [e, vout], [jnp.zeros(e.shape, e.dtype), jnp.zeros(vout.shape, vout.dtype)]
  w, v = _eig_sorted(x, e.dtype)
  vinv = jnp.linalg.inv(v)
  m = jnp.matmul(jnp.matmul(vinv, t.astype(e.dtype)), v)
  dw = jnp.diagonal(m, axis1=-2, axis2=-1)
  if not compute_v:
    return [e, vout], [dw, jnp.zeros(vout.shape, vout.dtype)]
  n = x.shape[-1]
  den = w[..., None, :] - w[..., :, None]  # w_j - w_i
  off = ~np.eye(n, dtype=bool)
  f = jnp.where(off, 1 / jnp.where(off, den, jnp.ones((), den.dtype)), jnp.zeros((), den.dtype))
  dv = jnp.matmul(v, f * m)
  _, dvout = jax.jvp(_normalise, (v,), (dv,))
  return [e, vout], [dw, dvout]


# ---------------------------------------------------------------------------
# Spec


def _eig_calls(st):
  """Seeded matrices ``S D S^-1`` with eigenvalues whose real parts are at least
  0.5 apart (a real matrix may have one conjugate pair), ``S`` well conditioned."""

  @st.composite
  def draw(draw):
    dtype = st.np_dtype(draw(st.sampled_from(("float32", "float64", "complex64", "complex128"))))
    batch = tuple(draw(st.shapes(max_rank=2, max_side=3)))
    n = draw(st.integers(0, 4))
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    re = factorizations.separated_spectrum(rng, batch, n, lo=-1.0)
    d = re[..., :, None] * np.eye(n)
    if dtype.kind == "c":
      d = d + 1j * rng.uniform(-1, 1, batch + (n,))[..., :, None] * np.eye(n)
    elif n >= 2 and draw(st.booleans()):  # a conjugate pair a +- bi
      b = rng.uniform(0.5, 1.5, batch)
      d[..., 0, 1], d[..., 1, 0] = b, -b
      d[..., 1, 1] = d[..., 0, 0]
    s = factorizations.random_unitary(rng, batch, n, dtype) + 0.3 * rng.standard_normal(
      batch + (n, n)
    )
    x = s @ d @ np.linalg.inv(s) if n else d
    tout = np.dtype("complex64") if dtype in (np.float32, np.complex64) else np.dtype("complex128")
    return {"input": x.astype(dtype), "Tout": tout, "compute_v": draw(st.booleans())}

  return draw()


def _eig_oracle(input, Tout, compute_v=True):  # TF arg names
  """TF's Eig in our order (real part, then imaginary part) and phase gauge."""
  tf = import_tensorflow()
  e, v = tf.raw_ops.Eig(input=input, Tout=Tout, compute_v=compute_v)
  vals = e.numpy()
  if vals.size == 0:  # nothing to order (TF's gather gradient fails on empty ones)
    return e, v if compute_v else tf.zeros_like(v)
  order = np.lexsort((vals.imag, vals.real), axis=-1)
  e = tf.gather(e, order, axis=-1, batch_dims=len(vals.shape) - 1)
  if not compute_v:  # TF's placeholder is an uninitialised scalar
    return e, tf.zeros_like(v)
  v = tf.gather(v, order, axis=-1, batch_dims=len(vals.shape) - 1)
  return e, factorizations.tf_fix_phase(v)[0]


Eig = register_op(
  "Eig",
  _eig,
  family=FAMILY,
  multiple_results=True,
  attrs=("compute_v", "Tout"),
  jvp=_eig_jvp,
  batching=rules.per_op(rules.leading_batching),
  spec=lambda st: st.Spec(
    _eig_calls(st),
    oracle=_eig_oracle,
    vmap_variation="scale",
    note="eigenvalues sorted by real, then imaginary part, vectors in a fixed phase "
    "gauge, applied to TF's too; drawn with well-separated eigenvalues",
  ),
)
