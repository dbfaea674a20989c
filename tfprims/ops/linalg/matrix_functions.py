"""Matrix functions: MatrixSquareRoot, MatrixLogarithm (principal branches).

* MatrixSquareRoot: ``jax.scipy.linalg.sqrtm`` (Schur based, as TF's Eigen
  kernel; real inputs keep the real part). Its JVP solves the Sylvester equation
  ``X dX + dX X = dA`` in Kronecker form (an ``n^2 x n^2`` linear solve: linear
  in the tangent, so JAX transposes it; O(n^4) memory, like TF's gradient).
* MatrixLogarithm (complex only, as TF): ``V diag(log w) V^-1`` from the
  eigendecomposition (TF: Eigen's Schur-Pade algorithm; the same function on
  diagonalizable matrices). Its JVP is the Frechet derivative in the eigenbasis,
  ``V (F o (V^-1 dA V)) V^-1`` with the divided differences
  ``F_ij = (log w_i - log w_j) / (w_i - w_j)`` (``1 / w_i`` on and near the
  diagonal); TF registers no gradient.

Both need JAX's Schur/eigendecomposition, which XLA has on CPU. Batching re-binds
the op with the batch axis in front (``rules.leading_batching``).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import jax.scipy.linalg as jsl
import numpy as np
from jax.interpreters import ad

from tfprims import rules
from tfprims.core import register_op, tfops
from tfprims.ops.linalg import factorizations
from tfprims.ops.linalg._common import FAMILY


def _per_matrix(fn, x):
  """``fn`` on each innermost matrix of ``x`` (the jax.scipy functions take one)."""
  n = x.shape[-1]
  if x.size == 0:
    return jnp.zeros(x.shape, x.dtype)
  flat = x.reshape((-1, n, n))
  return jax.vmap(fn)(flat).reshape(x.shape)


def _matrix_square_root(x):
  """The principal square root (eigenvalues with positive real parts); for a real
  matrix with a negative real eigenvalue there is none: TF and ours give
  garbage/NaN there."""
  out = _per_matrix(jsl.sqrtm, x)
  if not jnp.issubdtype(x.dtype, jnp.complexfloating):
    out = jnp.real(out)
  return out.astype(x.dtype)


def _sylvester_kron(x):
  """The ``n^2 x n^2`` matrix of ``dX -> X dX + dX X`` on row-major vec(dX)."""
  n = x.shape[-1]
  eye = jnp.eye(n, dtype=x.dtype)
  k = jnp.einsum("...ij,kl->...ikjl", x, eye) + jnp.einsum("ij,...lk->...ikjl", eye, x)
  return k.reshape(x.shape[:-2] + (n * n, n * n))


def _matrix_square_root_jvp(primals, tangents):
  (a,), (t,) = primals, tangents
  x = tfops.MatrixSquareRoot(a)
  n = a.shape[-1]
  if type(t) is ad.Zero or n == 0:
    return x, jnp.zeros(x.shape, x.dtype)
  rhs = t.reshape(t.shape[:-2] + (n * n, 1))
  dx = jnp.linalg.solve(_sylvester_kron(x), rhs)
  return x, dx.reshape(x.shape)


def _matrix_logarithm(x):
  """The principal logarithm ``V diag(log w) V^-1``."""
  if x.shape[-1] == 0:
    return x
  w, v = jnp.linalg.eig(x)
  vl = v * jnp.log(w)[..., None, :]
  # X = (V diag(log w)) V^-1, as X^T = V^-T (V diag(log w))^T.
  out = jnp.swapaxes(jnp.linalg.solve(jnp.swapaxes(v, -1, -2), jnp.swapaxes(vl, -1, -2)), -1, -2)
  return out.astype(x.dtype)


def _matrix_logarithm_jvp(primals, tangents):
  (a,), (t,) = primals, tangents
  x = tfops.MatrixLogarithm(a)
  if type(t) is ad.Zero or a.shape[-1] == 0:
    return x, jnp.zeros(x.shape, x.dtype)
  w, v = jnp.linalg.eig(a)
  w, v = w.astype(a.dtype), v.astype(a.dtype)
  lw = jnp.log(w)
  wi, wj = w[..., :, None], w[..., None, :]
  den = wi - wj
  close = jnp.abs(den) <= 1e-6 * jnp.maximum(jnp.abs(wi), jnp.abs(wj))
  safe = jnp.where(close, jnp.ones((), den.dtype), den)
  f = jnp.where(close, 2 / (wi + wj), (lw[..., :, None] - lw[..., None, :]) / safe)
  vinv = jnp.linalg.inv(v)
  inner = jnp.matmul(jnp.matmul(vinv, t), v)
  dx = jnp.matmul(jnp.matmul(v, f * inner), vinv)
  return x, dx


# ---------------------------------------------------------------------------
# Specs


def _function_calls(st, dtypes, min_n=0):
  """Seeded non-normal matrices with well-separated eigenvalues in the right
  half-plane (principal branches well defined and well conditioned)."""

  @st.composite
  def draw(draw):
    dtype = st.np_dtype(draw(st.sampled_from(dtypes)))
    batch = tuple(draw(st.shapes(max_rank=2, max_side=3)))
    n = draw(st.integers(min_n, 4))
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    w = factorizations.separated_spectrum(rng, batch, n, lo=0.5)
    if dtype.kind == "c":
      w = w * np.exp(1j * rng.uniform(-1.0, 1.0, batch + (n,)))
    q = factorizations.random_unitary(rng, batch, n, dtype)
    upper = np.triu(rng.standard_normal(batch + (n, n)) * 0.3, 1)
    if dtype.kind == "c":
      upper = upper + 1j * np.triu(rng.standard_normal(batch + (n, n)) * 0.3, 1)
    t = upper + w[..., None, :] * np.eye(n)  # Schur form
    x = q @ t @ np.conj(np.swapaxes(q, -1, -2))
    return {"input": x.astype(dtype)}

  return draw()


MatrixSquareRoot = register_op(
  "MatrixSquareRoot",
  _matrix_square_root,
  family=FAMILY,
  jvp=_matrix_square_root_jvp,
  batching=rules.per_op(rules.leading_batching),
  # No empty matrices: TF's gradient kills the process on them (SIGFPE);
  # tests/test_linalg_decompositions.py compares their values.
  spec=lambda st: st.Spec(
    _function_calls(st, ("float32", "float64", "complex64", "complex128"), min_n=1),
    vmap_variation="scale",
    grad_oracle="fd",
    rtol={"float64": 1e-9, "complex128": 1e-9},
    atol={"float64": 1e-10, "complex128": 1e-10},
    note="matrices with eigenvalues in the right half-plane; TF's "
    "complex gradient is wrong (conjugated): derivatives checked "
    "against central differences",
  ),
)

MatrixLogarithm = register_op(
  "MatrixLogarithm",
  _matrix_logarithm,
  family=FAMILY,
  jvp=_matrix_logarithm_jvp,
  batching=rules.per_op(rules.leading_batching),
  spec=lambda st: st.Spec(
    _function_calls(st, ("complex64", "complex128")),
    vmap_variation="scale",
    grad_oracle="fd",
    rtol={"complex128": 1e-9},
    atol={"complex128": 1e-10},
    note="eigendecomposition-based (TF: Schur-Pade); TF registers "
    "no gradient: derivatives checked against central differences",
  ),
)
