"""Least squares and structured solvers: MatrixSolveLs.

MatrixSolveLs follows TF's CPU kernel: ``fast`` solves the (regularised) normal
equations by Cholesky (``A^H A`` for tall, ``A A^H`` for wide matrices), the slow
path is the minimum-norm least-squares solution (TF: Eigen's complete orthogonal
decomposition, which ignores ``l2_regularizer``; ours: ``pinv(A) @ b``).
Derivatives are derived (``jax.jvp`` of the impl: the exact ones; TF's gradient
is the same for real ``fast`` calls, wrong for complex ones, and TF has none for
the slow path); ``l2_regularizer``
gets no gradient, as in TF. Batching re-binds the op with the batch axis in
front (``rules.leading_batching``), but for a batched ``l2_regularizer`` (a scalar
per call), which falls back to ``jax.vmap`` of the impl.
"""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np
from jax import lax

from tfprims import derived, rules
from tfprims.core import register_op, tfops
from tfprims.ops.linalg import factorizations
from tfprims.ops.linalg._common import FAMILY, adjoint
from tfprims.errors import import_tensorflow

# ---------------------------------------------------------------------------
# MatrixSolveLs


def _cholesky_solve(g, b):
  """``g^-1 b`` for Hermitian positive definite ``g`` (NaN where it is not: TF raises)."""
  low = jnp.linalg.cholesky(g)
  y = lax.linalg.triangular_solve(low, b, left_side=True, lower=True)
  return lax.linalg.triangular_solve(
    low, y, left_side=True, lower=True, transpose_a=True, conjugate_a=True
  )


def _matrix_solve_ls(matrix, rhs, l2_regularizer, *, fast):
  """Least-squares solutions of ``matrix @ x = rhs`` (see the module docstring);
  a non-positive ``l2_regularizer`` adds nothing, as in TF."""
  m, n = matrix.shape[-2:]
  if matrix.shape[:-2] != rhs.shape[:-2]:
    raise ValueError(
      f"MatrixSolveLs: matrix and rhs must have the same batch dims; got "
      f"{matrix.shape} and {rhs.shape}"
    )
  out_shape = matrix.shape[:-2] + (n, rhs.shape[-1])
  if min(m, n, rhs.shape[-1]) == 0:
    return jnp.zeros(out_shape, matrix.dtype)
  if not fast:
    return jnp.matmul(jnp.linalg.pinv(matrix), rhs)
  l2 = lax.stop_gradient(l2_regularizer)  # TF: no gradient for it
  l2 = jnp.where(l2 > 0, l2, jnp.zeros((), l2.dtype)).astype(matrix.dtype)
  ah = adjoint(matrix, True)
  if m >= n:
    gram = jnp.matmul(ah, matrix) + l2 * jnp.eye(n, dtype=matrix.dtype)
    return _cholesky_solve(gram, jnp.matmul(ah, rhs))
  gram = jnp.matmul(matrix, ah) + l2 * jnp.eye(m, dtype=matrix.dtype)
  return jnp.matmul(ah, _cholesky_solve(gram, rhs))


def _matrix_solve_ls_batch(args, dims, **params):
  size = rules.batch_size(args, dims)
  matrix, rhs = (rules.with_batch_axis(a, d, size) for a, d in zip(args[:2], dims[:2]))
  if dims[2] is not None:
    # One regulariser per call: no TF op takes that. (All operands batched:
    # JAX's triangular_solve batching fails on a batched matrix with an
    # unbatched right-hand side.)
    l2 = rules.to_front(args[2], dims[2])
    return derived.vmap_batching(_matrix_solve_ls, False)([matrix, rhs, l2], [0, 0, 0], **params)
  return tfops.MatrixSolveLs(matrix, rhs, args[2], **params), 0


def _solve_ls_calls(st):
  @st.composite
  def draw(draw):
    call = draw(factorizations._matrix_calls(st, "svd"))
    matrix = call["input"]
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    shape = matrix.shape[:-1] + (draw(st.integers(0, 3)),)
    rhs = rng.standard_normal(shape)
    if matrix.dtype.kind == "c":
      rhs = rhs + 1j * rng.standard_normal(shape)
    return {
      "matrix": matrix,
      "rhs": rhs.astype(matrix.dtype),
      "l2_regularizer": np.array(draw(st.sampled_from([0.0, 0.0, 0.5, 2.0, -1.0])), np.float64),
      "fast": draw(st.booleans()),
    }

  return draw()


def _solve_ls_oracle(matrix, rhs, l2_regularizer, fast=True):
  """TF's MatrixSolveLs, differentiated as TF's autodiff of the same solution
  written with the normal equations (``tf.linalg.solve``) where TF's gradient is
  missing (``fast=False``) or wrong (complex: it transposes ``x z^H`` where the
  adjoint is needed). The drawn matrices have full rank, so the slow path's
  minimum-norm solution is that too. TF's slow path on a matrix with no rows
  returns uninitialised memory: zeros here, as ours."""
  tf = import_tensorflow()
  out = tf.raw_ops.MatrixSolveLs(matrix=matrix, rhs=rhs, l2_regularizer=l2_regularizer, fast=fast)
  m, n = matrix.shape[-2:]
  if min(m, n, rhs.shape[-1]) == 0:
    return tf.zeros_like(out)
  if fast and not matrix.dtype.is_complex:
    return out
  l2 = tf.cast(tf.maximum(l2_regularizer, 0.0) if fast else 0.0, matrix.dtype)
  if m >= n:
    gram = tf.matmul(matrix, matrix, adjoint_a=True) + l2 * tf.eye(n, dtype=matrix.dtype)
    alt = tf.linalg.solve(gram, tf.matmul(matrix, rhs, adjoint_a=True))
  else:
    gram = tf.matmul(matrix, matrix, adjoint_b=True) + l2 * tf.eye(m, dtype=matrix.dtype)
    alt = tf.matmul(matrix, tf.linalg.solve(gram, rhs), adjoint_a=True)
  return alt + tf.stop_gradient(out - alt)


MatrixSolveLs = register_op(
  "MatrixSolveLs",
  _matrix_solve_ls,
  family=FAMILY,
  attrs=("fast",),
  batching=_matrix_solve_ls_batch,
  spec=lambda st: st.Spec(
    _solve_ls_calls(st),
    oracle=_solve_ls_oracle,
    diff_args=("matrix", "rhs"),
    vmap_variation="scale",
    note="well-conditioned matrices; derivatives for fast=False (TF has none) and "
    "complex (TF's is wrong) vs TF's autodiff of the normal-equation solution",
  ),
)
