"""jax2tf modules whose reading once failed or crashed: ApproxTopK (its comparator is a
function of the module), rng_bit_generator's 64-bit state with x64 off,
select_and_scatter_add on integers, LAPACK calls on empty matrices. Each is read as
JAX operations and equals the original JAX function."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import tensorflow as tf
from jax import lax
from jax.experimental import jax2tf

import tfprims
from helpers import jaxpr_primitives

RNG = np.random.default_rng(0)


def _read_back(f, *args, with_gradient=False):
  tf_fn = tf.function(jax2tf.convert(f, with_gradient=with_gradient), autograph=False)
  fn = tfprims.convert_functional(
      tf_fn, *[tf.TensorSpec(np.shape(a), tf.as_dtype(np.asarray(a).dtype)) for a in args])
  assert "tf.XlaCallModule" not in jaxpr_primitives(jax.make_jaxpr(fn)(*args))
  return fn


def _equal(got, want):
  for g, w in zip(jax.tree.leaves(got), jax.tree.leaves(want), strict=True):
    np.testing.assert_array_equal(np.asarray(g), np.asarray(w))


@pytest.mark.parametrize("top_k, dim", [(lax.approx_max_k, -1), (lax.approx_min_k, 0)])
def test_approx_top_k_is_read_with_its_comparator(top_k, dim):
  x = RNG.normal(size=(6, 5)).astype(np.float32)
  x[1, 2] = x[3, 2] = x[0, 0]  # ties
  f = lambda x: top_k(x, 2, reduction_dimension=dim)
  fn = _read_back(f, x, with_gradient=True)
  assert "approx_top_k" in jaxpr_primitives(jax.make_jaxpr(fn)(x))
  _equal(fn(x), f(x))
  _equal(jax.jit(fn)(x), f(x))
  batch = np.stack([x, -x])
  _equal(jax.vmap(fn)(batch), jax.vmap(f)(batch))
  loss = lambda g: lambda x: jnp.sum(g(x)[0] ** 2)
  np.testing.assert_allclose(jax.grad(loss(fn))(x), jax.grad(loss(f))(x), rtol=1e-6)


def test_rng_bit_generator_with_a_uint32_key_and_x64_off():
  f = lambda k: lax.rng_bit_generator(k, (3, 2), dtype=np.uint32)
  key = np.array([1, 2, 3, 4], np.uint32)
  fn = _read_back(f, key)
  _equal(fn(key), f(key))   # the next state and the bits
  _equal(jax.jit(fn)(key), f(key))


@pytest.mark.parametrize("dtype", [np.int8, np.int16, np.int32, np.uint16, np.uint32,
                                   np.float32])
def test_select_and_scatter_add_of_every_dtype(dtype):
  # JAX's max-pool gradient primitive, written directly (it has no public wrapper).
  from jax._src.lax.windowed_reductions import _select_and_scatter_add
  x = RNG.integers(0, 4, size=(5, 6)).astype(dtype)   # many ties in each window
  source = RNG.integers(1, 5, size=(3, 6)).astype(dtype)
  f = lambda s, x: _select_and_scatter_add(s, x, lax.ge_p, (3, 2), (2, 1),
                                           ((1, 1), (0, 1)))
  fn = _read_back(f, source, x)
  _equal(fn(source, x), f(source, x))
  _equal(jax.jit(fn)(source, x), f(source, x))


def test_eig_of_empty_matrices_called_eagerly():
  f = lambda a: jnp.linalg.eig(a)
  for a in (np.zeros((0, 0), np.float32), np.zeros((3, 0, 0), np.float32)):
    fn = _read_back(f, a)
    for got, want in zip(fn(a), f(a)):
      assert got.shape == want.shape and got.dtype == want.dtype
    for got, want in zip(jax.jit(fn)(a), f(a)):
      assert got.shape == want.shape


# --- derivatives of modules the reader once could not differentiate -----------------


def _grad_close(got, want, rtol=1e-5, atol=1e-6):
  for g, w in zip(jax.tree.leaves(got), jax.tree.leaves(want), strict=True):
    np.testing.assert_allclose(np.asarray(g), np.asarray(w), rtol=rtol, atol=atol)


_A = np.array([0.5, 1.5, 3.0, 7.0], np.float32)
_X = np.array([0.7, 2.0, 4.0, 6.5], np.float32)


@pytest.mark.parametrize("special", ["gammainc", "gammaincc"])
def test_grad_through_a_while_loop_with_a_data_dependent_trip_count(special):
  # igamma/igammac are series whose length depends on the data: stablehlo.while
  # loops read as tf.While.unbounded (checkpointed reverse mode).
  g = getattr(jax.scipy.special, special)
  f = lambda a, x: jnp.sum(g(a, x) ** 2)
  fn = _read_back(f, _A, _X, with_gradient=True)
  assert "tf.While.unbounded" in jaxpr_primitives(jax.make_jaxpr(fn)(_A, _X))
  _grad_close(fn(_A, _X), f(_A, _X))
  want = jax.grad(f, 1)(_A, _X)
  _grad_close(jax.grad(fn, 1)(_A, _X), want, rtol=1e-4)
  _grad_close(jax.jit(jax.grad(fn, 1))(_A, _X), want, rtol=1e-4)


def test_grad_of_random_gamma_samples_wrt_alpha():
  key = np.asarray(jax.random.key_data(jax.random.key(0)))
  f = lambda k, a: jnp.sum(jax.random.gamma(jax.random.wrap_key_data(k), a) * a)
  fn = _read_back(f, key, _A, with_gradient=True)
  _grad_close(fn(key, _A), f(key, _A))
  want = jax.grad(f, 1)(key, _A)
  _grad_close(jax.grad(fn, 1)(key, _A), want, rtol=1e-4)
  _grad_close(jax.jit(jax.grad(fn, 1))(key, _A), want, rtol=1e-4)


def test_grad_of_cumlogsumexp():
  x = RNG.normal(size=(3, 5)).astype(np.float32)
  f = lambda x: jnp.sum(lax.cumlogsumexp(x, axis=1) ** 2
                        + lax.cumlogsumexp(x, axis=0, reverse=True))
  fn = _read_back(f, x, with_gradient=True)
  _grad_close(fn(x), f(x))
  _grad_close(jax.grad(fn)(x), jax.grad(f)(x))
  _grad_close(jax.jit(jax.grad(fn))(x), jax.grad(f)(x))


def _pool(reducer, init):
  return lambda v: jnp.sum(lax.reduce_window(v, init, reducer, (2, 2), (2, 1), "SAME") ** 2)


@pytest.mark.parametrize("reducer, init", [(lax.max, -jnp.inf), (lax.min, jnp.inf)])
def test_select_and_gather_add_second_order_pool_gradients(reducer, init):
  # jax.jvp of a pool's gradient: the JVP of reduce_window max/min is
  # select_and_gather_add, a 4-operand reduce_window.
  x = RNG.normal(size=(4, 6)).astype(np.float32)
  t = np.cos(x)
  pool = _pool(reducer, init)
  f = lambda v, t: jax.jvp(jax.grad(pool), (v,), (t,))[1]
  fn = _read_back(f, x, t, with_gradient=True)
  _grad_close(fn(x, t), f(x, t))
  _grad_close(jax.jit(fn)(x, t), f(x, t))
  loss = lambda g: (lambda v, t: jnp.sum(g(v, t) ** 2))
  _grad_close(jax.grad(loss(fn), (0, 1))(x, t), jax.grad(loss(f), (0, 1))(x, t))
  # the pool's gradient's gradient (hessian-vector product) read back
  h = lambda v: jax.hessian(pool)(v).reshape(v.size, v.size) @ t.ravel()
  fn = _read_back(h, x, with_gradient=True)
  _grad_close(fn(x), h(x))


# --- jax2tf's recorded gradient differentiates every input ------------------------------

_IDX = np.array([[1], [1], [3]], np.int32)   # repeated: scatter_mul has no VJP in updates
_SCATTER_DN = lax.ScatterDimensionNumbers((), (0,), (0,))
_PARTIAL = {
    "scatter_mul": (lambda x, u: jnp.sum(lax.scatter_mul(x, _IDX, u, _SCATTER_DN) ** 2),
                    (np.array([1., 2., 3., 4.], np.float32),
                     np.array([2., 3., 0.5], np.float32))),
    "clamp_scalar_bound": (lambda x, lo: jnp.sum(lax.clamp(lo, x, 2.5) ** 2),
                           (np.array([1., 2., 3., 4.], np.float32), np.float32(1.5))),
}


@pytest.mark.parametrize("name", sorted(_PARTIAL))
def test_grad_of_only_the_requested_input(name):
  # jax2tf's gradient function takes the VJP in every input, which JAX refuses here:
  # the read-back module is differentiated natively, in the input asked for only.
  f, args = _PARTIAL[name]
  fn = _read_back(f, *args, with_gradient=True)
  _grad_close(fn(*args), f(*args))
  want = jax.grad(f, 0)(*args)
  _grad_close(jax.grad(fn, 0)(*args), want)
  _grad_close(jax.jit(jax.grad(fn, 0))(*args), want)
  xs = np.stack([args[0], args[0] * 0.5])
  _grad_close(jax.vmap(jax.grad(fn, 0), (0, None))(xs, args[1]),
              jax.vmap(jax.grad(f, 0), (0, None))(xs, args[1]))
