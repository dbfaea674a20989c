"""Decompositions and friends: Cholesky, MatrixInverse, MatrixDeterminant,
LogMatrixDeterminant, MatrixSolve, MatrixTriangularSolve.

All use the derived rules (jnp/lax.linalg impls), but LogMatrixDeterminant, whose
JVP is TF's gradient (the sign gets none). Cholesky reads only the lower
triangle, its derivatives those of the symmetrised input. Where TF raises on
singular input these give inf/NaN; the specs draw well-conditioned matrices.
"""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np
from jax import lax
from jax.interpreters import ad

from tfprims.core import register_op, tfops
from tfprims.ops.linalg import _common
from tfprims.ops.linalg._common import FAMILY
from tfprims.errors import import_tensorflow

# ---------------------------------------------------------------------------
# Impls and rules


def _cholesky(x):
  """Cholesky of the Hermitian matrix whose lower triangle is ``x``'s (TF reads only
  the lower triangle). Derivatives are those of the symmetrised input, as TF's
  gradient assumes a symmetric perturbation. Not positive definite: NaN."""
  lower = jnp.tril(x)
  herm = lower + jnp.conj(jnp.swapaxes(jnp.tril(x, -1), -1, -2))
  sym = (x + jnp.conj(jnp.swapaxes(x, -1, -2))) / np.array(2, x.dtype)
  used = sym + lax.stop_gradient(herm - sym)
  return lax.linalg.cholesky(used, symmetrize_input=False)


def _matrix_inverse(x, *, adjoint):
  """Inverse (of the adjoint); a singular matrix gives inf/NaN (TF raises)."""
  return jnp.linalg.inv(_common.adjoint(x, adjoint))


def _matrix_determinant(x):
  """Determinant; of a 0x0 matrix: 1."""
  if x.shape[-1] == 0:
    return jnp.ones(x.shape[:-2], x.dtype)
  return jnp.linalg.det(x)


def _matrix_solve(matrix, rhs, *, adjoint):
  """Solves ``adj(matrix) @ x = rhs``; equal batch dims (TF does not broadcast).
  A singular matrix gives inf/NaN (TF raises)."""
  if matrix.shape[:-2] != rhs.shape[:-2]:
    raise ValueError(
      f"MatrixSolve: matrix and rhs must have the same batch dims; got "
      f"{matrix.shape} and {rhs.shape}"
    )
  if matrix.shape[-1] == 0 or rhs.shape[-1] == 0:
    return jnp.zeros(rhs.shape, rhs.dtype)
  return jnp.linalg.solve(_common.adjoint(matrix, adjoint), rhs)


def _matrix_triangular_solve(matrix, rhs, *, lower, adjoint):
  """Triangular solve reading only the ``lower`` (or upper) triangle; batch dims
  broadcast (TF >= 2.2). A zero on the diagonal gives inf/NaN, as in TF."""
  batch = jnp.broadcast_shapes(matrix.shape[:-2], rhs.shape[:-2])
  matrix = jnp.broadcast_to(matrix, batch + matrix.shape[-2:])
  rhs = jnp.broadcast_to(rhs, batch + rhs.shape[-2:])
  if matrix.shape[-1] == 0 or rhs.shape[-1] == 0:
    return jnp.zeros(rhs.shape, rhs.dtype)
  return lax.linalg.triangular_solve(
    matrix, rhs, left_side=True, lower=lower, transpose_a=adjoint, conjugate_a=adjoint
  )


def _log_matrix_determinant(x):
  """(sign, log|det|), both of the input dtype; singular: (0, -inf); 0x0: (1, 0)."""
  if x.shape[-1] == 0:
    batch = x.shape[:-2]
    return jnp.ones(batch, x.dtype), jnp.zeros(batch, x.dtype)
  sign, logdet = jnp.linalg.slogdet(x)
  # TF defines no gradient for the sign.
  return lax.stop_gradient(sign).astype(x.dtype), logdet.astype(x.dtype)


def _log_matrix_determinant_jvp(primals, tangents):
  """TF's gradient: the sign has none, log|det| gets tr(inv(A) dA), which for
  complex inputs is the derivative of log(det) (its imaginary part is the phase's;
  the exact derivative of the real log|det| is the real part)."""
  (x,), (t,) = primals, tangents
  sign, logdet = tfops.LogMatrixDeterminant(x)
  zeros = jnp.zeros(sign.shape, sign.dtype)
  if type(t) is ad.Zero or x.shape[-1] == 0:
    return [sign, logdet], [zeros, zeros]
  dlog = jnp.trace(jnp.linalg.solve(x, t), axis1=-2, axis2=-1)
  return [sign, logdet], [zeros, dlog.astype(logdet.dtype)]


# ---------------------------------------------------------------------------
# Specs


def _square_calls(st, dtypes, kind, arg="input"):
  """Well-conditioned square matrices: SPD (``kind="spd"``) or near identity."""

  @st.composite
  def draw(draw):
    dtype = st.np_dtype(draw(st.sampled_from(dtypes)))
    batch = tuple(draw(st.shapes(max_rank=2, max_side=3)))
    n = draw(st.integers(0, 4))
    real = np.float32 if dtype in (np.float32, np.complex64) else np.float64
    a = draw(st.arrays(real, batch + (n, n), min_value=-1, max_value=1))
    if dtype.kind == "c":
      a = a + 1j * draw(st.arrays(real, batch + (n, n), min_value=-1, max_value=1))
    if kind == "spd":
      a = a @ np.conj(np.swapaxes(a, -1, -2)) + n * np.eye(n)
    else:
      a = a / 2 + np.eye(n) * draw(st.sampled_from([2.0, -2.0]))
    return {arg: a.astype(dtype)}

  return draw()


def _cholesky_oracle(input):  # TF arg name
  """TF 2.21's CPU Cholesky leaves the strict upper triangle unwritten (garbage at
  times); tf.linalg.cholesky documents zeros there, which is what we return."""
  tf = import_tensorflow()
  return tf.linalg.band_part(tf.raw_ops.Cholesky(input=input), -1, 0)


def _solve_calls(st, triangular):
  """Well-conditioned systems (|diagonal| >= 1.5, small off-diagonal entries);
  MatrixTriangularSolve's batch dims broadcast."""

  @st.composite
  def draw(draw):
    dtype = st.np_dtype(draw(st.sampled_from(("float32", "float64", "complex64", "complex128"))))
    real = np.float32 if dtype in (np.float32, np.complex64) else np.float64
    n = draw(st.integers(0, 4))
    if triangular:
      bm, br = draw(st.broadcastable_shapes(2, max_rank=2, max_side=3))
    else:
      bm = br = tuple(draw(st.shapes(max_rank=2, max_side=3)))

    def arr(shape, bound):
      a = draw(st.arrays(real, shape, min_value=-bound, max_value=bound))
      if dtype.kind == "c":
        a = a + 1j * draw(st.arrays(real, shape, min_value=-bound, max_value=bound))
      return a

    diag = draw(st.sampled_from([2.0, -2.0]))
    matrix = arr(tuple(bm) + (n, n), 0.5) + diag * np.eye(n)
    rhs = arr(tuple(br) + (n, draw(st.integers(0, 3))), 4.0)
    call = {
      "matrix": matrix.astype(dtype),
      "rhs": rhs.astype(dtype),
      "adjoint": draw(st.booleans()),
    }
    if triangular:
      call["lower"] = draw(st.booleans())
    return call

  return draw()


_INVERTIBLE = "TF raises on singular input; specs draw well-conditioned matrices"

# ---------------------------------------------------------------------------
# Ops

Cholesky = register_op(
  "Cholesky",
  _cholesky,
  family=FAMILY,
  spec=lambda st: st.Spec(
    _square_calls(st, ("float32", "float64", "complex64", "complex128"), "spd"),
    oracle=_cholesky_oracle,
    vmap_variation="scale",
    note="derivatives assume a symmetric perturbation, as TF's",
  ),
)

MatrixInverse = register_op(
  "MatrixInverse",
  _matrix_inverse,
  family=FAMILY,
  attrs=("adjoint",),
  spec=lambda st: st.Spec(
    st.tuples(
      _square_calls(st, ("float32", "float64", "complex64", "complex128"), "near_identity"),
      st.booleans(),
    ).map(lambda c: dict(c[0], adjoint=c[1])),
    note=_INVERTIBLE,
    vmap_variation="scale",
  ),
)

MatrixDeterminant = register_op(
  "MatrixDeterminant",
  _matrix_determinant,
  family=FAMILY,
  spec=lambda st: st.Spec(
    _square_calls(st, ("float32", "float64", "complex64", "complex128"), "near_identity"),
    vmap_variation="scale",
    # TF's complex gradient is ct * det * inv(A)^H: det lacks its conjugate (TF
    # bug); ours is the exact derivative, checked against central differences.
    grad_oracle="fd",
  ),
)

LogMatrixDeterminant = register_op(
  "LogMatrixDeterminant",
  _log_matrix_determinant,
  family=FAMILY,
  multiple_results=True,
  jvp=_log_matrix_determinant_jvp,
  spec=lambda st: st.Spec(
    _square_calls(st, ("float32", "float64", "complex64", "complex128"), "near_identity"),
    vmap_variation="scale",
  ),
)

MatrixSolve = register_op(
  "MatrixSolve",
  _matrix_solve,
  family=FAMILY,
  attrs=("adjoint",),
  spec=lambda st: st.Spec(
    _solve_calls(st, triangular=False), note=_INVERTIBLE, vmap_variation="scale"
  ),
)

MatrixTriangularSolve = register_op(
  "MatrixTriangularSolve",
  _matrix_triangular_solve,
  family=FAMILY,
  attrs=("lower", "adjoint"),
  spec=lambda st: st.Spec(_solve_calls(st, triangular=True), vmap_variation="scale"),
)
