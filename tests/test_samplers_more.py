"""The learned unigram candidate samplers and ComputeAccidentalHits in real programs:
sampled softmax with accidental hits removed (tf.nn.sampled_softmax_loss), the samplers'
first-run distribution against TF's samples, accidental hits on known and traced values."""

import jax
import numpy as np
import pytest
import tensorflow as tf
from scipy import stats

import tfprims
from helpers import jaxpr_primitives

N = 20000
P_MIN = 1e-3  # fixed seeds: deterministic


def _functional(fn, *specs):
  return tfprims.convert_functional(tf.function(fn, autograph=False), *specs)


SAMPLERS = ["LearnedUnigramCandidateSampler", "ThreadUnsafeUnigramCandidateSampler"]


@pytest.mark.parametrize("op_type", SAMPLERS)
def test_unigram_samplers_first_run_distribution_and_counts_match_tf(op_type):
  true_classes = np.array([[3, 3], [0, 6]], np.int64)

  def f(num_sampled=N, unique=False):
    return getattr(tf.raw_ops, op_type)(
      true_classes=true_classes,
      num_true=2,
      num_sampled=num_sampled,
      unique=unique,
      range_max=7,
      seed=5,
      seed2=9,
    )

  ours = _functional(f)(rng=jax.random.key(3))
  tf.random.set_seed(0)
  theirs = tf.function(f, autograph=False)()  # a fresh graph: TF's first run
  counts = [np.bincount(np.asarray(s), minlength=7) for s in (ours[0], theirs[0].numpy())]
  assert stats.chi2_contingency(np.array(counts)).pvalue > P_MIN, counts
  # Without unique sampling the expected counts are TF's, exactly.
  np.testing.assert_array_equal(ours[1], theirs[1].numpy())
  np.testing.assert_array_equal(ours[2], theirs[2].numpy())
  assert ours[0].shape == (N,) and set(np.unique(np.asarray(ours[0]))) <= set(range(7))
  # Unique: distinct candidates; the counts follow TF's formula for the draws taken.
  cands, true_count, sampled_count = _functional(lambda: f(7, True))(rng=jax.random.key(4))
  np.testing.assert_array_equal(np.sort(np.asarray(cands)), np.arange(7))
  tries = np.log1p(-np.asarray(sampled_count, np.float64)) / np.log1p(-1 / 7)
  assert tries.min() >= 7 - 1e-3 and np.allclose(tries, np.round(tries[0]), atol=1e-3)
  np.testing.assert_array_equal(true_count, np.full((2, 2), sampled_count[0]))
  assert f"tf.{op_type}" in jaxpr_primitives(
    jax.make_jaxpr(lambda k: _functional(f)(rng=k))(jax.random.key(0))
  )


def test_accidental_hits_on_known_values_are_tfs():
  true_classes = np.array([[1, 4], [2, 2], [7, 0], [4, 1]], np.int64)
  sampled = np.array([4, 9, 2, 4, 1], np.int64)  # 4 twice: the last position wins

  def f():
    return tf.nn.compute_accidental_hits(true_classes, sampled, num_true=2)

  ours = _functional(f)()
  for a, b in zip(ours, f()):
    assert np.asarray(a).dtype == tfprims.dtypes.canonical_dtype(b.dtype.as_numpy_dtype)
    np.testing.assert_array_equal(a, b.numpy())
  assert len(ours[0]) == 6


@pytest.mark.filterwarnings("ignore::tfprims.PrecisionWarning")
def test_accidental_hits_of_traced_candidates_need_a_bound():
  spec = (tf.TensorSpec([2, 1], tf.int64), tf.TensorSpec([3], tf.int64))

  def f(labels, sampled):
    return tf.nn.compute_accidental_hits(labels, sampled, num_true=1)

  labels, sampled = np.array([[2], [5]], np.int64), np.array([5, 5, 1], np.int64)
  with pytest.raises(tfprims.DynamicShapeError, match="ComputeAccidentalHits"):
    jax.jit(_functional(f, *spec))(labels, sampled)
  with tfprims.override_config("dynamic_shape_bounds", {"ComputeAccidentalHits": 3}):
    fn = _functional(f, *spec)
    idx, ids, w = jax.jit(fn)(labels, sampled)
  np.testing.assert_array_equal(idx, [1, -1, -1])
  np.testing.assert_array_equal(ids, [1, -1, -1])
  np.testing.assert_array_equal(w, [-np.finfo(np.float32).max, 0, 0])


@pytest.mark.parametrize("sampler", ["learned", "uniform"])
def test_sampled_softmax_loss_with_accidental_hits_removed_is_tfs(sampler):
  """tf.nn.sampled_softmax_loss with a unigram sampler: TF's loss and gradients for the
  candidates our sampler drew (few classes, so accidental hits are frequent)."""
  batch, dim, num_classes, num_sampled = 5, 3, 6, 4
  rs = np.random.RandomState(0)
  weights = rs.randn(num_classes, dim).astype(np.float32)
  biases = rs.randn(num_classes).astype(np.float32)
  labels = rs.randint(0, num_classes, (batch, 1)).astype(np.int64)

  def draw():
    if sampler == "learned":
      return tf.random.learned_unigram_candidate_sampler(labels, 1, num_sampled, True, num_classes)
    return tf.random.uniform_candidate_sampler(labels, 1, num_sampled, True, num_classes)

  def loss(x, values):
    return tf.nn.sampled_softmax_loss(
      weights,
      biases,
      labels,
      x,
      num_sampled,
      num_classes,
      sampled_values=values,
      remove_accidental_hits=True,
    )

  def f(x):
    values = draw()
    return (loss(x, values),) + tuple(values)

  spec = tf.TensorSpec([batch, dim], tf.float32)
  with tfprims.override_config("dynamic_shape_bounds", {"ComputeAccidentalHits": batch}):
    fn = _functional(f, spec)
    x = rs.randn(batch, dim).astype(np.float32)
    hits = 0
    for seed in range(4):
      key = jax.random.key(seed)
      ours, sampled, true_exp, sampled_exp = jax.jit(fn)(x, rng=key)
      values = tuple(tf.constant(np.asarray(v)) for v in (sampled, true_exp, sampled_exp))
      xt = tf.constant(x)
      with tf.GradientTape() as tape:
        tape.watch(xt)
        theirs = loss(xt, values)
      np.testing.assert_allclose(ours, theirs.numpy(), rtol=1e-5, atol=1e-6)
      grad = jax.grad(lambda v: fn(v, rng=key)[0].sum())(x)
      np.testing.assert_allclose(grad, tape.gradient(theirs, xt).numpy(), rtol=1e-4, atol=1e-6)
      hits += int(np.isin(labels, np.asarray(sampled)).sum())
  assert hits > 0  # the hits path was exercised
