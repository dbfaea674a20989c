"""Banded and tridiagonal ops: BandedTriangularSolve, TridiagonalSolve,
TridiagonalMatMul, and CholeskyGrad and SparseMatMul.

* BandedTriangularSolve: TF's band storage (``K`` rows, ``LEFT_RIGHT``
  alignment: the diagonal is the top row for ``lower``, the bottom one
  otherwise) is expanded to the dense triangle (MatrixDiagV3's impl) and
  solved like MatrixTriangularSolve; batch dims broadcast, as in TF.
* TridiagonalSolve: ``diagonals [..., 3, M]`` (superdiagonal, whose last entry is
  ignored, diagonal, subdiagonal, whose first entry is ignored). Without
  ``partial_pivoting`` the Thomas algorithm (``lax.linalg.tridiagonal_solve``),
  with it a dense LU solve (JAX has no pivoting tridiagonal solver; O(M^3)).
* TridiagonalMatMul: the product with the tridiagonal matrix, by shifts.
* CholeskyGrad: TF's kernel's result, the symmetrised gradient of Cholesky,
  ``sym(L^-H Phi(L^H tril(G)) L^-1)``, from the lower triangles of ``l`` and
  ``grad``.
* SparseMatMul: a dense float32 MatMul of float32/bfloat16 operands (TF's
  ``a_is_sparse``/``b_is_sparse`` are performance hints).

All use the derived rules (``jax.jvp`` of the impl: the exact derivatives); the
solvers batch by re-binding themselves with the batch axis in front
(``rules.leading_batching``).
"""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np
from jax import lax

from tfprims import rules
from tfprims.core import register_op
from tfprims.ops.linalg import decompositions, diagonals
from tfprims.ops.linalg._common import FAMILY
from tfprims.errors import import_tensorflow

# ---------------------------------------------------------------------------
# BandedTriangularSolve


def _band_to_dense(band, lower):
  k, m = band.shape[-2:]
  if k > m:
    raise ValueError(f"BandedTriangularSolve: {k} bands for {m}x{m} matrices")
  ks = (-(k - 1), 0) if lower else (0, k - 1)
  diag = band[..., 0, :] if k == 1 else band
  return diagonals._matrix_diag_v3(
    diag, jnp.zeros((), band.dtype), k=ks, num_rows=m, num_cols=m, align="LEFT_RIGHT"
  )


def _banded_triangular_solve(matrix, rhs, *, lower, adjoint):
  """Solves ``op(A) x = rhs`` for the triangular band matrix ``A`` stored in
  ``matrix [..., K, M]``; a zero on the diagonal gives inf/NaN (TF raises)."""
  if matrix.shape[-2] == 0 or matrix.shape[-1] == 0:
    batch = jnp.broadcast_shapes(matrix.shape[:-2], rhs.shape[:-2])
    return jnp.zeros(batch + rhs.shape[-2:], rhs.dtype)
  dense = _band_to_dense(matrix, lower)
  return decompositions._matrix_triangular_solve(dense, rhs, lower=lower, adjoint=adjoint)


def _banded_check(matrix, rhs, *, lower, adjoint):
  if matrix.shape[-2] == 0 or matrix.shape[-1] == 0:
    return None
  diag = matrix[..., 0 if lower else -1, :]
  return jnp.any(diag == 0), "Input matrix is not invertible."


# ---------------------------------------------------------------------------
# Tridiagonal


def _tridiagonal_parts(diagonals_):
  sup, main, sub = diagonals_[..., 0, :], diagonals_[..., 1, :], diagonals_[..., 2, :]
  m = main.shape[-1]
  idx = np.arange(m)
  zero = jnp.zeros((), main.dtype)
  return jnp.where(idx < m - 1, sup, zero), main, jnp.where(idx > 0, sub, zero)


def _tridiagonal_dense(sup, main, sub):
  m = main.shape[-1]
  rows, cols = np.arange(m)[:, None], np.arange(m)[None, :]
  zero = jnp.zeros((), main.dtype)
  return jnp.where(
    cols == rows,
    main[..., :, None],
    jnp.where(
      cols == rows + 1, sup[..., :, None], jnp.where(cols == rows - 1, sub[..., :, None], zero)
    ),
  )


def _tridiagonal_solve(diagonals_, rhs, *, partial_pivoting, perturb_singular):
  """Solves the tridiagonal system; a singular one gives inf/NaN (TF: NaN, or
  with ``perturb_singular`` a solution of a perturbed system)."""
  if diagonals_.shape[-2] != 3:
    raise ValueError(
      f"TridiagonalSolve: diagonals must have shape [..., 3, M]; got {diagonals_.shape}"
    )
  if diagonals_.shape[:-2] != rhs.shape[:-2]:
    raise ValueError(
      f"TridiagonalSolve: diagonals and rhs must have the same batch dims; "
      f"got {diagonals_.shape} and {rhs.shape}"
    )
  if rhs.shape[-2] == 0 or rhs.shape[-1] == 0:
    return jnp.zeros(rhs.shape, rhs.dtype)
  sup, main, sub = _tridiagonal_parts(diagonals_)
  if not partial_pivoting:
    return lax.linalg.tridiagonal_solve(sub, main, sup, rhs)
  return jnp.linalg.solve(_tridiagonal_dense(sup, main, sub), rhs)


def _tridiagonal_mat_mul(superdiag, maindiag, subdiag, rhs):
  """``T @ rhs`` for the tridiagonal ``T`` of the ``[..., 1, M]`` diagonals
  (superdiag's last and subdiag's first entries are not read)."""
  sup, main, sub = (d[..., 0, :, None] for d in (superdiag, maindiag, subdiag))
  zero_row = jnp.zeros(rhs.shape[:-2] + (1,) + rhs.shape[-1:], rhs.dtype)
  if rhs.shape[-2] == 0:
    return jnp.zeros(jnp.broadcast_shapes(main.shape, rhs.shape), rhs.dtype)
  up = jnp.concatenate([rhs[..., 1:, :], zero_row], axis=-2)  # rhs[i + 1]
  down = jnp.concatenate([zero_row, rhs[..., :-1, :]], axis=-2)  # rhs[i - 1]
  return main * rhs + sup * up + sub * down


# ---------------------------------------------------------------------------
# CholeskyGrad, SparseMatMul


def _cholesky_grad(l, grad):  # TF's name
  """The symmetrised gradient of ``A -> cholesky(A)`` at ``A = L L^H`` for the
  cotangent ``grad``, from the lower triangles of ``l`` and ``grad`` (TF's kernel)."""
  m = l.shape[-1]
  if m == 0:
    return jnp.zeros(l.shape, l.dtype)
  low, g = jnp.tril(l), jnp.tril(grad)
  eye = jnp.broadcast_to(jnp.eye(m, dtype=l.dtype), l.shape)
  l_inv = lax.linalg.triangular_solve(low, eye, left_side=True, lower=True)
  middle = jnp.matmul(jnp.swapaxes(low, -1, -2), g)
  middle = jnp.tril(middle) - 0.5 * jnp.tril(jnp.triu(middle))  # halve the diagonal
  out = jnp.matmul(jnp.matmul(jnp.swapaxes(l_inv, -1, -2), middle), l_inv)
  return 0.5 * (out + jnp.swapaxes(out, -1, -2))


def _sparse_mat_mul(a, b, *, transpose_a, transpose_b, a_is_sparse, b_is_sparse):
  """float32 ``op(a) @ op(b)``; the sparsity flags are hints (ignored)."""
  del a_is_sparse, b_is_sparse
  a, b = a.astype(np.float32), b.astype(np.float32)
  a = a.T if transpose_a else a
  b = b.T if transpose_b else b
  return jnp.matmul(a, b, precision=lax.Precision.HIGHEST)


# ---------------------------------------------------------------------------
# Specs

_DTYPES = ("float32", "float64", "complex64", "complex128")


def _arr(rng, shape, dtype, scale=1.0):
  a = rng.standard_normal(shape) * scale
  if np.dtype(dtype).kind == "c":
    a = a + 1j * rng.standard_normal(shape) * scale
  return a.astype(dtype)


def _banded_calls(st):
  @st.composite
  def draw(draw):
    dtype = st.np_dtype(draw(st.sampled_from(_DTYPES)))
    # TF rejects empty operands (an empty batch or rhs) outright.
    bm, br = (
      tuple(max(d, 1) for d in b) for b in draw(st.broadcastable_shapes(2, max_rank=2, max_side=3))
    )
    m = draw(st.integers(1, 4))
    k = draw(st.integers(1, m))
    lower = draw(st.booleans())
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    band = _arr(rng, tuple(bm) + (k, m), dtype, 0.3)
    diag_row = 0 if lower else k - 1
    band[..., diag_row, :] += rng.choice([-2.0, 2.0], tuple(bm) + (m,)).astype(band.real.dtype)
    rhs = _arr(rng, tuple(br) + (m, draw(st.integers(1, 3))), dtype)
    return {"matrix": band, "rhs": rhs, "lower": lower, "adjoint": draw(st.booleans())}

  return draw()


def _tridiagonal_calls(st, matmul=False):
  @st.composite
  def draw(draw):
    dtype = st.np_dtype(draw(st.sampled_from(_DTYPES)))
    batch = tuple(draw(st.shapes(max_rank=2, max_side=3)))
    m = draw(st.integers(1 if not matmul else 0, 4))
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    diags = _arr(rng, batch + (3, m), dtype)
    if not matmul:  # diagonally dominant: well conditioned, pivoting or not
      diags[..., 1, :] += rng.choice([-4.0, 4.0], batch + (m,)).astype(diags.real.dtype)
    rhs = _arr(rng, batch + (m, draw(st.integers(0, 3))), dtype)
    if matmul:
      return {
        "superdiag": diags[..., 0:1, :],
        "maindiag": diags[..., 1:2, :],
        "subdiag": diags[..., 2:3, :],
        "rhs": rhs,
      }
    pivoting = draw(st.booleans())  # TF: perturb_singular needs partial_pivoting
    return {
      "diagonals": diags,
      "rhs": rhs,
      "partial_pivoting": pivoting,
      "perturb_singular": pivoting and draw(st.booleans()),
    }

  return draw()


def _cholesky_grad_calls(st):
  @st.composite
  def draw(draw):
    dtype = st.np_dtype(draw(st.sampled_from(("float32", "float64"))))
    batch = tuple(draw(st.shapes(max_rank=2, max_side=3)))
    m = draw(st.integers(0, 4))
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    a = rng.standard_normal(batch + (m, m))
    low = np.linalg.cholesky(a @ np.swapaxes(a, -1, -2) + m * np.eye(m)) if m else a
    low = low + np.triu(rng.standard_normal(batch + (m, m)), 1)  # not read
    return {"l": low.astype(dtype), "grad": rng.standard_normal(batch + (m, m)).astype(dtype)}

  return draw()


def _sparse_mat_mul_calls(st):
  @st.composite
  def draw(draw):
    ta, tb = (draw(st.sampled_from(["float32", "bfloat16"])) for _ in range(2))
    m, k, n = (draw(st.integers(0, 4)) for _ in range(3))
    tra, trb = draw(st.booleans()), draw(st.booleans())
    a = draw(st.arrays(ta, (k, m) if tra else (m, k), min_value=-4, max_value=4, special=False))
    b = draw(st.arrays(tb, (n, k) if trb else (k, n), min_value=-4, max_value=4, special=False))
    return {
      "a": a,
      "b": b,
      "transpose_a": tra,
      "transpose_b": trb,
      "a_is_sparse": draw(st.booleans()),
      "b_is_sparse": draw(st.booleans()),
    }

  return draw()


def _tridiagonal_solve_oracle(diagonals, rhs, partial_pivoting=True, perturb_singular=False):
  """TF's TridiagonalSolve; for complex inputs differentiated as TF's autodiff of
  the dense solve (TF's complex gradient is wrong: central differences side
  with ours)."""
  tf = import_tensorflow()
  out = tf.raw_ops.TridiagonalSolve(
    diagonals=diagonals,
    rhs=rhs,
    partial_pivoting=partial_pivoting,
    perturb_singular=perturb_singular,
  )
  if not diagonals.dtype.is_complex or rhs.shape[-1] == 0:
    return out
  m = diagonals.shape[-1]
  dense = (
    tf.linalg.diag(diagonals[..., 1, :])
    + tf.linalg.diag(diagonals[..., 0, : m - 1], k=1)
    + tf.linalg.diag(diagonals[..., 2, 1:], k=-1)
  )
  alt = tf.linalg.solve(dense, rhs)
  return alt + tf.stop_gradient(out - alt)


# ---------------------------------------------------------------------------
# Ops

BandedTriangularSolve = register_op(
  "BandedTriangularSolve",
  _banded_triangular_solve,
  family=FAMILY,
  attrs=("lower", "adjoint"),
  check=_banded_check,
  spec=lambda st: st.Spec(
    _banded_calls(st),
    vmap_variation="scale",
    grad_oracle="fd",
    note="TF raises on a zero diagonal entry (runtime check); TF's "
    "gradient raises or has the wrong shape on many calls: "
    "derivatives checked against central differences",
  ),
)

TridiagonalSolve = register_op(
  "TridiagonalSolve",
  _tridiagonal_solve,
  family=FAMILY,
  attrs=("partial_pivoting", "perturb_singular"),
  batching=rules.per_op(rules.leading_batching),
  spec=lambda st: st.Spec(
    _tridiagonal_calls(st),
    vmap_variation="scale",
    oracle=_tridiagonal_solve_oracle,
    note="diagonally dominant systems; singular ones give NaN "
    "(TF's perturb_singular is not reproduced); complex derivatives "
    "vs TF's autodiff of the dense solve (TF's gradient is wrong)",
  ),
)

TridiagonalMatMul = register_op(
  "TridiagonalMatMul",
  _tridiagonal_mat_mul,
  family=FAMILY,
  batching=rules.per_op(rules.leading_batching),
  spec=lambda st: st.Spec(_tridiagonal_calls(st, matmul=True)),
)

CholeskyGrad = register_op(
  "CholeskyGrad",
  _cholesky_grad,
  family=FAMILY,
  batching=rules.per_op(rules.leading_batching),
  spec=lambda st: st.Spec(
    _cholesky_grad_calls(st),
    vmap_variation="scale",
    grad_oracle="fd",
    note="TF registers no gradient: derivatives checked against central differences",
  ),
)

SparseMatMul = register_op(
  "SparseMatMul",
  _sparse_mat_mul,
  family=FAMILY,
  attrs=("transpose_a", "transpose_b", "a_is_sparse", "b_is_sparse"),
  spec=lambda st: st.Spec(_sparse_mat_mul_calls(st)),
)
