"""More random ops: tf.random.Generator's Stateful* ops (state advance exactly as TF's,
round trips of the state through new_params), gamma/poisson/binomial samplers and the
other random-family ops. Distributions are compared with TF's samples (fixed seeds, so
not flaky); bits only where TF's algorithm is reproduced."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import tensorflow as tf
from scipy import stats

import tfprims
from helpers import jaxpr_primitives

N = 20000
P_MIN = 1e-3  # deterministic (fixed seeds): a pass is a pass every run


def _ks(ours, theirs):
  res = stats.ks_2samp(np.ravel(ours).astype(np.float64), np.ravel(theirs).astype(np.float64))
  assert res.pvalue > P_MIN, res


def _same_counts(ours, theirs):
  """Chi-square test that two integer samples come from one distribution."""
  ours, theirs = np.ravel(ours), np.ravel(theirs)
  cats = np.union1d(ours, theirs)
  table = np.array([[np.sum(s == c) for c in cats] for s in (ours, theirs)])
  table = table[:, table.sum(0) >= 5]
  res = stats.chi2_contingency(table)
  assert res.pvalue > P_MIN, (table, res)


# --- tf.random.Generator ops ----------------------------------------------------------

STATEFUL_CALLS = {
    "StatefulUniform": dict(shape=[2, 3], dtype=tf.float32),
    "StatefulStandardNormalV2": dict(shape=[5], dtype=tf.float64),
    "StatefulTruncatedNormal": dict(shape=[4, 1], dtype=tf.float16),
    "StatefulUniformFullInt": dict(shape=[3], dtype=tf.uint64),
    "StatefulUniformInt": dict(shape=[7], minval=np.int64(-3), maxval=np.int64(9)),
    "StatefulRandomBinomial": dict(shape=[4, 3], counts=[10.0, 2.0, 5.0], probs=[0.5],
                                   dtype=tf.int32),
}


@pytest.mark.parametrize("op_type", sorted(STATEFUL_CALLS))
@pytest.mark.parametrize("start", [[5, 0, 7], [-1, 4, 7], [-100, -1, 3]])
@pytest.mark.parametrize("x64_mode", [True, False])
@pytest.mark.filterwarnings("ignore::tfprims.PrecisionWarning")
def test_stateful_ops_advance_the_state_as_tf(op_type, start, x64_mode):
  kwargs = STATEFUL_CALLS[op_type]

  def make(var):
    return tf.function(lambda: getattr(tf.raw_ops, op_type)(resource=var.handle,
                                                            algorithm=1, **kwargs))

  # TF's side runs on its own variable: after tfprims.convert traced a function, TF's
  # first call of that function was seen not to advance a StatefulRandomBinomial state.
  tf_var = tf.Variable(np.array(start, np.int64))
  expected = make(tf_var)()
  with jax.enable_x64(x64_mode):
    fn, params = tfprims.convert(make(tf.Variable(np.array(start, np.int64))))
    out, new = fn(params)
    assert out.shape == tuple(expected.shape)
    assert out.dtype == tfprims.dtypes.canonical_dtype(expected.dtype.as_numpy_dtype)
    key = next(iter(params))
    if x64_mode:
      np.testing.assert_array_equal(new[key], tf_var.numpy())
    else:  # 32-bit state: only the low word moves (wrapping), as RngReadAndSkip's
      np.testing.assert_array_equal(np.asarray(new[key]),
                                    [np.int64(tf_var.numpy()[0]).astype(np.int32), *start[1:]])
    f = lambda p: fn(p)
  # The jaxpr shows the op by its TF name, taking the state's value.
    assert f"tf.{op_type}" in jaxpr_primitives(jax.make_jaxpr(f)(params))


def _sampling_loop(g):
  @tf.function
  def f():
    draws = []
    for _ in range(3):
      draws.append(g.normal([64]) + g.uniform([64])
                   + tf.cast(g.binomial([64], counts=10.0, probs=0.5), tf.float32))
    return tf.stack(draws)
  return f


def test_generator_sampling_loop_round_trips_its_state(x64):
  fn, params = tfprims.convert(_sampling_loop(tf.random.Generator.from_seed(1)))
  g = tf.random.Generator.from_seed(1)  # TF's run, on a generator of its own
  f = _sampling_loop(g)
  key = next(iter(params))
  out1, new1 = fn(params)
  f()
  np.testing.assert_array_equal(new1[key], g.state.numpy())
  out2, new2 = fn(new1)
  f()
  np.testing.assert_array_equal(new2[key], g.state.numpy())
  assert not np.array_equal(out1, out2)
  assert not np.array_equal(out1[0], out1[1])
  # The same state gives the same numbers (no rng= needed), under jit too.
  np.testing.assert_array_equal(fn(params)[0], out1)
  np.testing.assert_allclose(jax.jit(fn)(new1)[0], out2, rtol=1e-6)  # ulps: fused


def test_generator_state_threads_through_a_while_loop(x64):
  def make(g):
    @tf.function
    def f():
      total = tf.zeros([8])
      for _ in tf.range(5):
        total += g.uniform([8]) + tf.cast(g.binomial([8], counts=3.0, probs=0.5), tf.float32)
      return total
    return f

  fn, params = tfprims.convert(make(tf.random.Generator.from_seed(4)))
  g = tf.random.Generator.from_seed(4)
  key = next(iter(params))
  out, new = fn(params)
  make(g)()
  np.testing.assert_array_equal(new[key], g.state.numpy())
  assert 0 < float(out.min()) and float(out.max()) < 20


def _generator_samples(draw, seed=2):
  g = tf.random.Generator.from_seed(seed)
  fn, params = tfprims.convert(tf.function(lambda: draw(g)))
  return np.asarray(fn(params)[0]), draw(tf.random.Generator.from_seed(seed)).numpy()


@pytest.mark.parametrize("name, draw", [
    ("normal", lambda g: tf.raw_ops.StatefulStandardNormalV2(
        resource=g.state.handle, algorithm=1, shape=[N])),
    ("uniform", lambda g: tf.raw_ops.StatefulUniform(
        resource=g.state.handle, algorithm=1, shape=[N])),
    ("truncated", lambda g: tf.raw_ops.StatefulTruncatedNormal(
        resource=g.state.handle, algorithm=1, shape=[N])),
])
def test_stateful_float_distributions_match_tf(name, draw):
  ours, theirs = _generator_samples(draw)
  _ks(ours, theirs)


def test_stateful_int_and_binomial_distributions_match_tf():
  ours, theirs = _generator_samples(lambda g: g.uniform([N], -3, 7, dtype=tf.int32))
  assert ours.min() >= -3 and ours.max() < 7
  _same_counts(ours, theirs)
  ours, theirs = _generator_samples(lambda g: g.binomial([N, 2], counts=[8.0, 30.0],
                                                         probs=[0.3, 0.9]))
  for j in range(2):
    _same_counts(ours[:, j], theirs[:, j])
  full, _ = _generator_samples(lambda g: g.uniform_full_int([N], dtype=tf.int32))
  assert float(np.mean(full < 0)) == pytest.approx(0.5, abs=0.02)


def test_stateful_errors_are_typed():
  var = tf.Variable(np.array([1, 2, 3], np.int64))
  f = tf.function(lambda: tf.raw_ops.StatefulRandomBinomial(
      resource=var.handle, algorithm=1, shape=[4], counts=[1.0, 2.0], probs=0.5))
  with pytest.raises(tfprims.ConversionError, match="must end with the broadcast shape"):
    tfprims.convert(f)[0](tfprims.convert(f)[1])
  f = tf.function(lambda: tf.raw_ops.StatefulUniform(resource=var.handle, algorithm=2,
                                                    shape=[4]))
  with pytest.raises(tfprims.ConversionError, match="algorithm 2 is not supported"):
    fn, params = tfprims.convert(f)
    fn(params)
