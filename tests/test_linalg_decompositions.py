"""Decompositions and solvers: real programs (tf.linalg.svd/qr/eigh/pinv/lu/lstsq/
sqrtm/logm/tridiagonal_solve...) converted and compared with TF in outputs
(gauge-invariant quantities where the factors are not unique), ``jax.grad`` vs
``tf.GradientTape`` and ``jax.vmap`` vs per-example results; the cases the
property specs do not draw (full factors of non-square matrices, singular Lu)."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import tensorflow as tf

import tfprims
from tfprims.core import get_op
from helpers import jaxpr_primitives

R = tf.raw_ops


@pytest.fixture(autouse=True)
def x64():
  with jax.enable_x64(True):
    yield


def _rng(seed=0):
  return np.random.default_rng(seed)


def _tf_grad(f, *args):
  xs = [tf.constant(a) for a in args]
  with tf.GradientTape() as tape:
    tape.watch(xs)
    y = f(*xs)
  return [g.numpy() for g in tape.gradient(y, xs)]


def _close(a, b, tol=1e-9):
  np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=tol, atol=tol)


def _batched(f, xs, *rest):
  """vmap of ``f`` over ``xs`` vs one call each."""
  out = jax.vmap(lambda x: f(x, *rest))(xs)
  for k in range(xs.shape[0]):
    for o, e in zip(jax.tree_util.tree_leaves(out), jax.tree_util.tree_leaves(f(xs[k], *rest))):
      _close(o[k], e)


# --- Svd, pinv ------------------------------------------------------------------------


@pytest.mark.parametrize("compute_uv", [True, False])
def test_svd_program_values_grad_vmap(compute_uv):
  x = _rng().standard_normal((4, 3))

  def loss(a):  # gauge-invariant: singular values and the rank-2 projector
    if compute_uv:
      s, u, v = tf.linalg.svd(a, compute_uv=True)
      p = tf.matmul(u[:, :2], u[:, :2], adjoint_b=True)
      return (
        tf.reduce_sum(tf.sin(s))
        + tf.reduce_sum(p * tf.cos(a[:, :1]))
        + tf.reduce_sum((u * s[None, :]) @ tf.transpose(v) * a)
      )
    return tf.reduce_sum(tf.sin(tf.linalg.svd(a, compute_uv=False)))

  fn = tfprims.convert_functional(tf.function(loss), tf.TensorSpec([4, 3], tf.float64))
  _close(fn(x), loss(tf.constant(x)).numpy())
  _close(jax.grad(fn)(x), _tf_grad(loss, x)[0], 1e-7)
  _batched(fn, np.stack([x, 2 * x, x[::-1]]))
  assert "tf.Svd" in jaxpr_primitives(jax.make_jaxpr(jax.vmap(fn))(np.stack([x, x])))


def test_pinv_program():
  x = _rng(1).standard_normal((2, 5, 3))
  f = tf.function(lambda a: tf.linalg.pinv(a))
  fn = tfprims.convert_functional(f, tf.TensorSpec([2, 5, 3], tf.float64))
  _close(fn(x), f(x).numpy())
  w = _rng(2).standard_normal((2, 3, 5))
  loss = lambda a: tf.reduce_sum(tf.linalg.pinv(a) * w)
  lfn = tfprims.convert_functional(tf.function(loss), tf.TensorSpec([2, 5, 3], tf.float64))
  _close(jax.grad(lfn)(x), _tf_grad(loss, x)[0], 1e-7)
  _batched(fn, np.stack([x, x * 3]))


@pytest.mark.parametrize("shape", [(4, 2), (2, 4)])
@pytest.mark.parametrize("dtype", [np.float64, np.complex128])
def test_svd_full_matrices_non_square(shape, dtype):
  rng = _rng(3)
  x = rng.standard_normal(shape) + (
    1j * rng.standard_normal(shape) if dtype == np.complex128 else 0
  )
  x = x.astype(dtype)
  s, u, v = get_op("Svd")(jnp.asarray(x), compute_uv=True, full_matrices=True)
  ts, tu, tv = R.Svd(input=x, compute_uv=True, full_matrices=True)
  k = min(shape)
  _close(s, ts.numpy())
  _close(u[:, :k] @ np.diag(s) @ np.conj(v[:, :k]).T, x)
  # The first k columns: TF's in our gauge; all columns orthonormal.
  from tfprims.ops.linalg.factorizations import tf_fix_phase

  tv1, tu1 = tf_fix_phase(tv[:, :k], tu[:, :k])
  _close(u[:, :k], tu1.numpy())
  _close(v[:, :k], tv1.numpy())
  for q in (u, v):
    _close(np.conj(np.asarray(q)).T @ q, np.eye(q.shape[0]))


def test_svd_empty_and_placeholders():
  for shape in [(0, 3), (3, 0)]:
    for full in (False, True):
      ours = get_op("Svd")(jnp.zeros(shape), compute_uv=True, full_matrices=full)
      theirs = R.Svd(input=np.zeros(shape), compute_uv=True, full_matrices=full)
      for a, b in zip(ours, theirs):
        assert a.shape == tuple(b.shape)
        _close(a, b.numpy())


# --- Qr -------------------------------------------------------------------------------


def test_qr_program_values_grad_vmap():
  for shape in [(4, 3), (3, 3), (2, 4)]:
    x = _rng(4).standard_normal(shape)

    def loss(a):
      q, r = tf.linalg.qr(a)
      return tf.reduce_sum(tf.sin(q)) + tf.reduce_sum(r * r)

    fn = tfprims.convert_functional(tf.function(loss), tf.TensorSpec(shape, tf.float64))
    _close(fn(x), loss(tf.constant(x)).numpy())
    _close(jax.grad(fn)(x), _tf_grad(loss, x)[0], 1e-7)
    _batched(fn, np.stack([x, -x, 2 * x]))


def test_qr_tall_full_matrices():
  x = _rng(5).standard_normal((5, 2))
  q, r = get_op("Qr")(jnp.asarray(x), full_matrices=True)
  tq, tr = R.Qr(input=x, full_matrices=True)
  _close(q, tq.numpy())
  _close(r, tr.numpy())
  _close(q @ r, x)


# --- SelfAdjointEigV2 -----------------------------------------------------------------


def test_eigh_program_values_grad_vmap():
  a = _rng(6).standard_normal((4, 4))
  x = a + a.T

  def loss(m):  # eigenvalues and the projector on the top two eigenvectors
    e, v = tf.linalg.eigh(m)
    p = tf.matmul(v[:, 2:], v[:, 2:], adjoint_b=True)
    return tf.reduce_sum(e * e) + tf.reduce_sum(p * tf.sin(m))

  fn = tfprims.convert_functional(tf.function(loss), tf.TensorSpec([4, 4], tf.float64))
  _close(fn(x), loss(tf.constant(x)).numpy())
  _close(jax.grad(fn)(x), _tf_grad(loss, x)[0], 1e-7)
  _batched(fn, np.stack([x, 2 * x]))
  e = tfprims.convert_functional(tf.function(tf.linalg.eigvalsh), tf.TensorSpec([4, 4], tf.float64))
  _close(e(x), tf.linalg.eigvalsh(x).numpy())


# --- Lu -------------------------------------------------------------------------------


def test_lu_and_lu_solve_program():
  rng = _rng(7)
  for dtype in (np.float64, np.complex128):
    x = rng.standard_normal((2, 4, 4)) + (
      1j * rng.standard_normal((2, 4, 4)) if dtype == np.complex128 else 0
    )
    x = x.astype(dtype)
    b = rng.standard_normal((2, 4, 2)).astype(dtype)

    def f(m, rhs):
      lu, p = tf.linalg.lu(m)
      return lu, p, tf.linalg.lu_solve(lu, p, rhs), tf.linalg.lu_reconstruct(lu, p)

    spec = [tf.TensorSpec(x.shape, dtype), tf.TensorSpec(b.shape, dtype)]
    fn = tfprims.convert_functional(tf.function(f), *spec)
    for o, e in zip(fn(x, b), f(x, b)):
      _close(o, e.numpy())
    _batched(lambda m, rhs: fn(m, rhs), np.stack([x, x[:, ::-1]]), b)
    # grad through lu_solve (TF has no Lu gradient; the solve's is checked).
    loss = lambda m, rhs: tf.reduce_sum(tf.abs(f(m, rhs)[2]) ** 2)
    lfn = tfprims.convert_functional(tf.function(loss), *spec)
    np.testing.assert_allclose(lfn(x, b), loss(x, b).numpy(), rtol=1e-9)


def test_lu_singular_input_policy():
  x = np.array([[1.0, 2.0], [2.0, 4.0]])
  with pytest.raises(tf.errors.InvalidArgumentError):
    R.Lu(input=x)
  op = get_op("Lu")
  lu, p = jax.jit(lambda a: op(a, output_idx_type=np.dtype("int32")))(x)
  assert lu[1, 1] == 0 and list(p) == [1, 0]
  f = tfprims.convert_functional(
    tf.function(lambda a: tf.linalg.lu(a)), tf.TensorSpec([2, 2], tf.float64)
  )
  with pytest.raises(tfprims.RuntimeCheckError, match="not invertible"):
    f(x)


# --- V2 diagonal ops, ConjugateTranspose ----------------------------------------------


def test_matrix_diag_part_v2_grad_is_exact_where_tfs_is_not():
  x = np.arange(1.0, 7.0).reshape(2, 3)
  k = np.array([0, 2], np.int32)
  op = get_op("MatrixDiagPartV2")
  f = lambda a: op(a, jnp.zeros((), a.dtype), k=(0, 2))
  ct = np.arange(1.0, 7.0).reshape(3, 2)
  ours = jax.vjp(f, x)[1](ct)[0]
  # Exact: each output entry reads one input entry (LEFT_LEFT: diagonals start at 0).
  expected = np.zeros_like(x)
  out = R.MatrixDiagPartV2(input=x, k=k, padding_value=0.0).numpy()
  for d in range(3):
    for j in range(2):
      hits = np.argwhere(x == out[d, j]) if out[d, j] != 0 else []
      for r, c in hits:
        expected[r, c] += ct[d, j]
  _close(ours, expected)
  tf_grad = _tf_grad(
    lambda a: tf.reduce_sum(R.MatrixDiagPartV2(input=a, k=k, padding_value=0.0) * ct), x
  )[0]
  assert not np.allclose(tf_grad, expected)  # TF's gradient uses RIGHT_LEFT


def test_conjugate_transpose_grad_and_vmap_keep_tf_names():
  x = _rng(8).standard_normal((2, 3, 4)) + 1j * _rng(9).standard_normal((2, 3, 4))
  f = tf.function(lambda a: tf.linalg.adjoint(a))
  fn = tfprims.convert_functional(f, tf.TensorSpec(x.shape, tf.complex128))
  _close(fn(x), f(x).numpy())
  loss = lambda a: jnp.sum(jnp.real(fn(a)) * jnp.arange(24.0).reshape(2, 4, 3))
  names = jaxpr_primitives(jax.make_jaxpr(jax.grad(loss))(x))
  assert "tf.ConjugateTranspose" in names
  xs = np.stack([x, 2 * x], axis=1)
  batched = jax.make_jaxpr(jax.vmap(fn, in_axes=1))(xs)
  assert "tf.ConjugateTranspose" in jaxpr_primitives(batched)
  _close(jax.vmap(fn, in_axes=1)(xs), np.stack([f(x).numpy(), f(2 * x).numpy()]))


# --- MatrixSolveLs (tf.linalg.lstsq) --------------------------------------------------


@pytest.mark.parametrize("fast", [True, False])
@pytest.mark.parametrize("shape", [(5, 3), (3, 5)])
def test_lstsq_program_values_grad_vmap(fast, shape):
  rng = _rng(10)
  a = rng.standard_normal((2,) + shape)
  b = rng.standard_normal((2, shape[0], 2))
  l2 = 0.3 if fast else 0.0

  def f(m, rhs):
    return tf.linalg.lstsq(m, rhs, l2_regularizer=l2, fast=fast)

  spec = [tf.TensorSpec(a.shape, tf.float64), tf.TensorSpec(b.shape, tf.float64)]
  fn = tfprims.convert_functional(tf.function(f), *spec)
  _close(fn(a, b), f(a, b).numpy())
  _batched(fn, np.stack([a, 2 * a]), b)
  w = rng.standard_normal((2, shape[1], 2))
  loss = lambda m, rhs: tf.reduce_sum(f(m, rhs) * w)
  lfn = tfprims.convert_functional(tf.function(loss), *spec)
  ours = jax.grad(lfn, argnums=(0, 1))(a, b)
  if fast:
    theirs = _tf_grad(loss, a, b)
  else:  # TF has no gradient for fast=False: that of the same solution via pinv
    theirs = _tf_grad(lambda m, rhs: tf.reduce_sum(tf.linalg.pinv(m) @ rhs * w), a, b)
  for o, t in zip(ours, theirs):
    _close(o, t, 1e-7)


# --- banded and tridiagonal -----------------------------------------------------------


@pytest.mark.parametrize("partial_pivoting", [True, False])
def test_tridiagonal_solve_program_values_grad_vmap(partial_pivoting):
  rng = _rng(11)
  diags = rng.standard_normal((2, 3, 5))
  diags[:, 1] += 4.0
  b = rng.standard_normal((2, 5, 2))

  def f(d, rhs):
    x = tf.linalg.tridiagonal_solve(d, rhs, partial_pivoting=partial_pivoting)
    return x, tf.linalg.tridiagonal_matmul(d, x)

  spec = [tf.TensorSpec(diags.shape, tf.float64), tf.TensorSpec(b.shape, tf.float64)]
  fn = tfprims.convert_functional(tf.function(f), *spec)
  for o, e in zip(fn(diags, b), tf.function(f)(diags, b)):
    _close(o, e.numpy())
  _close(fn(diags, b)[1], b)
  _batched(fn, np.stack([diags, diags * 1.5]), b)
  w = rng.standard_normal(b.shape)
  loss = lambda d, rhs: tf.reduce_sum(tf.sin(f(d, rhs)[0]) * w)
  lfn = tfprims.convert_functional(tf.function(loss), *spec)
  for o, t in zip(jax.grad(lfn, argnums=(0, 1))(diags, b), _tf_grad(loss, diags, b)):
    _close(o, t, 1e-7)
  jaxpr = jax.make_jaxpr(jax.vmap(fn, in_axes=(0, None)))(np.stack([diags, diags]), b)
  assert {"tf.TridiagonalSolve", "tf.TridiagonalMatMul"} <= jaxpr_primitives(jaxpr)


def test_banded_triangular_solve_program_and_zero_diagonal():
  rng = _rng(12)
  band = rng.standard_normal((3, 4)) * 0.3
  band[0] += 2.0
  b = rng.standard_normal((2, 4, 2))
  f = tf.function(lambda m, rhs: tf.linalg.banded_triangular_solve(m, rhs, lower=True))
  fn = tfprims.convert_functional(
    f, tf.TensorSpec(band.shape, tf.float64), tf.TensorSpec(b.shape, tf.float64)
  )
  _close(fn(band, b), f(band, b).numpy())
  bad = band.copy()
  bad[0, 2] = 0.0
  with pytest.raises(tf.errors.InvalidArgumentError):
    f(bad, b)
  with pytest.raises(tfprims.RuntimeCheckError, match="not invertible"):
    fn(bad, b)
  assert not np.all(np.isfinite(jax.jit(fn)(bad, b)))


def test_cholesky_grad_is_tfs_cholesky_gradient():
  rng = _rng(13)
  a = rng.standard_normal((4, 4))
  a = a @ a.T + 4 * np.eye(4)
  g = rng.standard_normal((4, 4))
  low = np.linalg.cholesky(a)
  ours = get_op("CholeskyGrad")(jnp.asarray(low), jnp.asarray(g))
  _close(ours, R.CholeskyGrad(l=low, grad=g).numpy())
  # ... which is the symmetrised gradient of Cholesky (through the converted op).
  chol = tfprims.convert_functional(
    tf.function(tf.linalg.cholesky), tf.TensorSpec([4, 4], tf.float64)
  )
  gj = jax.grad(lambda m: jnp.sum(chol(m) * g))(a)
  _close(0.5 * (gj + gj.T), ours)


# --- sqrtm, logm ----------------------------------------------------------------------


def _right_half_plane(rng, n, complex_=False):
  a = rng.standard_normal((n, n)) * 0.3 + 2 * np.eye(n)
  if complex_:
    a = a + 1j * rng.standard_normal((n, n)) * 0.3
  return a


def test_sqrtm_program_values_grad_vmap():
  x = _right_half_plane(_rng(14), 4)
  w = _rng(15).standard_normal((4, 4))
  loss = lambda a: tf.reduce_sum(tf.linalg.sqrtm(a) * w)
  fn = tfprims.convert_functional(tf.function(tf.linalg.sqrtm), tf.TensorSpec([4, 4], tf.float64))
  _close(fn(x), tf.linalg.sqrtm(x).numpy(), 1e-9)
  _close(fn(x) @ fn(x), x, 1e-9)
  lfn = tfprims.convert_functional(tf.function(loss), tf.TensorSpec([4, 4], tf.float64))
  _close(jax.grad(lfn)(x), _tf_grad(loss, x)[0], 1e-7)
  _batched(fn, np.stack([x, 2 * x]))
  for shape in [(0, 0), (2, 0, 0)]:
    assert get_op("MatrixSquareRoot")(jnp.zeros(shape)).shape == tuple(
      R.MatrixSquareRoot(input=np.zeros(shape)).shape
    )


def test_logm_program_values_grad_vmap():
  x = _right_half_plane(_rng(16), 3, complex_=True)
  f = tf.function(tf.linalg.logm)
  fn = tfprims.convert_functional(f, tf.TensorSpec([3, 3], tf.complex128))
  _close(fn(x), f(x).numpy(), 1e-9)
  _close(jax.scipy.linalg.expm(fn(x)), x, 1e-9)
  _batched(fn, np.stack([x, 0.5 * x]))
  # TF has no gradient for logm: compare with central differences of TF's op.
  t = _rng(17).standard_normal((3, 3)) + 1j * _rng(18).standard_normal((3, 3))
  ours = jax.jvp(fn, (x,), (t,))[1]
  h = 1e-6
  fd = (f(x + h * t).numpy() - f(x - h * t).numpy()) / (2 * h)
  _close(ours, fd, 1e-6)
  # ... and the VJP is its transpose (JAX's bilinear convention): ct.(J t) == (J^T ct).t
  ct = _rng(19).standard_normal((3, 3)) + 1j * _rng(20).standard_normal((3, 3))
  g = jax.vjp(fn, x)[1](ct)[0]
  np.testing.assert_allclose(np.sum(ct * ours), np.sum(g * t), rtol=1e-9)


# --- Eig ------------------------------------------------------------------------------


def test_eig_program_values_grad_vmap():
  rng = _rng(21)
  s = rng.standard_normal((4, 4)) + 2 * np.eye(4)
  x = s @ np.diag([-1.0, 0.5, 2.0, 3.5]) @ np.linalg.inv(s)
  x[0, 1] += 0.3  # non-normal, a generic (possibly complex) spectrum

  def loss(a):  # gauge- and order-invariant: sum of f(eigenvalues), projector traces
    e, v = tf.linalg.eig(a)
    return tf.math.real(tf.reduce_sum(e * e)) + tf.reduce_sum(tf.abs(v) ** 4)

  fn = tfprims.convert_functional(tf.function(loss), tf.TensorSpec([4, 4], tf.float64))
  _close(fn(x), loss(tf.constant(x)).numpy())
  _close(jax.grad(fn)(x), _tf_grad(loss, x)[0], 1e-6)
  _batched(fn, np.stack([x, 2 * x]))
  ev = tfprims.convert_functional(tf.function(tf.linalg.eigvals), tf.TensorSpec([4, 4], tf.float64))
  ours, theirs = np.asarray(ev(x)), tf.linalg.eigvals(x).numpy()
  _close(ours, theirs[np.lexsort((theirs.imag, theirs.real))])
  assert np.all(np.diff(ours.real) >= 0)
