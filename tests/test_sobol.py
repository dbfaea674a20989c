"""SobolSample (tf.math.sobol_sample) in converted functions: bit for bit against TF with a
traced ``skip``, under jit and vmap, over all 21200 dimensions and 31 index bits, TF's
negated points past index 2**30, and TF's errors."""

import jax
import numpy as np
import pytest
import tensorflow as tf

import tfprims
from helpers import jaxpr_primitives
from tfprims.core import tfops
from tfprims.ops.random import sobol

I32 = tf.int32


def _tf(dim, num_results, skip, dtype):
  return tf.raw_ops.SobolSample(dim=dim, num_results=num_results, skip=skip, dtype=dtype).numpy()


def _bits_equal(ours, theirs):
  ours, theirs = np.asarray(ours), np.asarray(theirs)
  assert ours.dtype == theirs.dtype and ours.shape == theirs.shape
  np.testing.assert_array_equal(ours.view(np.uint8), theirs.view(np.uint8))


@pytest.mark.parametrize("dtype", [tf.float32, tf.float64])
def test_sobol_sample_with_traced_skip_jit_and_vmap(x64, dtype):
  @tf.function
  def f(skip, x):
    points = tf.math.sobol_sample(7, 40, skip=skip, dtype=dtype)
    return points * tf.cast(x, dtype)

  fn = tfprims.convert_functional(f, tf.TensorSpec([], I32), tf.TensorSpec([], tf.float32))
  jitted = jax.jit(fn)
  skips = [0, 1, 999, 2**30 - 20, 2**31 - 50]
  for skip in skips:
    _bits_equal(jitted(np.int32(skip), np.float32(1)), f(skip, 1.0).numpy())
  assert "tf.SobolSample" in jaxpr_primitives(jax.make_jaxpr(fn)(np.int32(3), np.float32(1)))
  # vmap over skip: one batch of points per skip, as TF's.
  batched = jax.jit(jax.vmap(fn, in_axes=(0, None)))(np.array(skips, np.int32), np.float32(1))
  _bits_equal(batched, np.stack([f(s, 1.0).numpy() for s in skips]))


def test_every_dimension_and_index_bit_as_tf(x64):
  # 21200 dimensions (TF's maximum) near the top index: every direction number is used.
  for skip in (2**31 - 8, 12345):
    _bits_equal(
      tfops.SobolSample(np.int32(skip), dim=21200, num_results=5, dtype=np.dtype("float64")),
      _tf(21200, 5, skip, tf.float64),
    )
  _bits_equal(
    tfops.SobolSample(np.int32(2**24 + 7), dim=300, num_results=64, dtype=np.dtype("float32")),
    _tf(300, 64, 2**24 + 7, tf.float32),
  )


def test_points_past_two_to_the_thirty_are_negated_as_tf(x64):
  # TF scales by 1. / (1 << 31) there (an int overflow): -x instead of x, in blocks of
  # 512 points ending at skip + end + 1 >= 2**30.
  skip = 2**30 - 700
  ours = np.asarray(
    tfops.SobolSample(np.int32(skip), dim=3, num_results=1024, dtype=np.dtype("float64"))
  )
  theirs = _tf(3, 1024, skip, tf.float64)
  _bits_equal(ours, theirs)
  assert np.all(ours[:512] > 0) and np.all(ours[512:] < 0)
  small = _tf(3, 4, 2**30 - 5, tf.float32)
  assert np.all(small < 0)
  _bits_equal(
    tfops.SobolSample(np.int32(2**30 - 5), dim=3, num_results=4, dtype=np.dtype("float32")), small
  )


def test_unscrambled_sequence_without_its_first_point(x64):
  # Cross-check of the table against an independent construction: scipy's own.
  from scipy.stats import qmc

  ref = qmc.Sobol(40, scramble=False).random_base2(9)[1:257]
  np.testing.assert_array_equal(
    tfops.SobolSample(np.int32(0), dim=40, num_results=256, dtype=np.dtype("float64")), ref
  )


@pytest.mark.parametrize(
  "dim,num_results,message",
  [
    (0, 3, "dim must be at least one"),
    (21201, 3, "dim must be at most 21200"),
    (2, 0, "num_results must be at least one"),
  ],
)
def test_static_argument_errors_as_tf(dim, num_results, message):
  with pytest.raises(tf.errors.InvalidArgumentError, match=message):
    _tf(dim, num_results, 0, tf.float32)

  @tf.function
  def f(skip):
    return tf.raw_ops.SobolSample(dim=dim, num_results=num_results, skip=skip)

  with pytest.raises(tfprims.errors.OpError, match=message):
    tfprims.convert_functional(f, tf.TensorSpec([], I32))(np.int32(0))
  with pytest.raises(ValueError, match=message):
    tfops.SobolSample(np.int32(0), dim=dim, num_results=num_results, dtype=np.dtype("float32"))


@pytest.mark.parametrize("skip,num_results", [(-1, 3), (2**31 - 4, 3)])
def test_skip_errors_as_tf(skip, num_results):
  with pytest.raises(tf.errors.InvalidArgumentError, match="non-negative|less than"):
    _tf(2, num_results, skip, tf.float32)

  @tf.function
  def f(s):
    return tf.raw_ops.SobolSample(dim=2, num_results=num_results, skip=s)

  fn = tfprims.convert_functional(f, tf.TensorSpec([], I32))
  with pytest.raises(tfprims.RuntimeCheckError, match="skip must be non-negative"):
    fn(np.int32(skip))
  with tfprims.override_config("runtime_checks", True):
    checked = jax.jit(lambda s: fn(s))  # a new trace: the config is read then
    with pytest.raises(Exception, match="num_results\\+skip must be less"):
      jax.block_until_ready(checked(np.int32(skip)))
    jax.block_until_ready(checked(np.int32(5)))
  _bits_equal(fn(np.int32(2**31 - 2 - num_results)), f(2**31 - 2 - num_results).numpy())


def test_shape_deciding_inputs_must_be_static():
  @tf.function
  def f(n):
    return tf.math.sobol_sample(3, n, skip=2)

  fn = tfprims.convert_functional(f, tf.TensorSpec([], I32))
  with pytest.raises(tfprims.StaticInputError, match="input 'num_results'"):
    jax.jit(fn)(np.int32(4))
  # From a shape: static, so it converts.
  g = tf.function(lambda x: tf.math.sobol_sample(2, tf.shape(x)[0], skip=1))
  out = tfprims.convert_functional(g, tf.TensorSpec([5], tf.float32))(np.zeros(5, np.float32))
  _bits_equal(out, _tf(2, 5, 1, tf.float32))


def test_table_is_read_lazily_and_cached():
  sobol._direction_numbers.cache_clear()
  first = sobol._direction_numbers()
  assert first.shape == (21201, 31) and first.dtype == np.uint32
  assert sobol._direction_numbers() is first
