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
