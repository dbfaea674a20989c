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
  "StatefulRandomBinomial": dict(
    shape=[4, 3], counts=[10.0, 2.0, 5.0], probs=[0.5], dtype=tf.int32
  ),
}


def _stateful_fn(op_type, var):
  return tf.function(
    lambda: getattr(tf.raw_ops, op_type)(
      resource=var.handle, algorithm=1, **STATEFUL_CALLS[op_type]
    )
  )


def _state_variable(start):
  # From a tf.constant, not a numpy array: TF's StatefulRandomBinomial kernel, which
  # writes the state in place, often left a numpy-made variable's value where it was
  # (0 to 20 of 20 runs in a process, varying from process to process; made from a
  # constant: none of 80).
  return tf.Variable(tf.constant(start, tf.int64))


@pytest.mark.parametrize("op_type", sorted(STATEFUL_CALLS))
@pytest.mark.parametrize("start", [[5, 0, 7], [-1, 4, 7], [-100, -1, 3]])
@pytest.mark.parametrize("x64_mode", [True, False])
@pytest.mark.filterwarnings("ignore::tfprims.PrecisionWarning")
def test_stateful_ops_advance_the_state_as_tf(op_type, start, x64_mode):
  var = _state_variable(start)  # TF's side runs on its own variable
  expected, tf_state = _stateful_fn(op_type, var)().numpy(), var.numpy()
  assert list(tf_state) != start, "TF's kernel did not advance the state"
  with jax.enable_x64(x64_mode):
    fn, params = tfprims.convert(_stateful_fn(op_type, _state_variable(start)))
    out, new = fn(params)
    assert out.shape == tuple(expected.shape)
    assert out.dtype == tfprims.dtypes.canonical_dtype(expected.dtype)
    key = next(iter(params))
    if x64_mode:
      np.testing.assert_array_equal(new[key], tf_state)
    else:  # 32-bit state: only the low word moves (wrapping), as RngReadAndSkip's
      np.testing.assert_array_equal(
        np.asarray(new[key]), [np.int64(tf_state[0]).astype(np.int32), *start[1:]]
      )
    f = lambda p: fn(p)
    # The jaxpr shows the op by its TF name, taking the state's value.
    assert f"tf.{op_type}" in jaxpr_primitives(jax.make_jaxpr(f)(params))


def _sampling_loop(g):
  @tf.function
  def f():
    draws = []
    for _ in range(3):
      draws.append(
        g.normal([64])
        + g.uniform([64])
        + tf.cast(g.binomial([64], counts=10.0, probs=0.5), tf.float32)
      )
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


@pytest.mark.parametrize(
  "name, draw",
  [
    (
      "normal",
      lambda g: tf.raw_ops.StatefulStandardNormalV2(
        resource=g.state.handle, algorithm=1, shape=[N]
      ),
    ),
    (
      "uniform",
      lambda g: tf.raw_ops.StatefulUniform(resource=g.state.handle, algorithm=1, shape=[N]),
    ),
    (
      "truncated",
      lambda g: tf.raw_ops.StatefulTruncatedNormal(resource=g.state.handle, algorithm=1, shape=[N]),
    ),
  ],
)
def test_stateful_float_distributions_match_tf(name, draw):
  ours, theirs = _generator_samples(draw)
  _ks(ours, theirs)


def test_stateful_int_and_binomial_distributions_match_tf():
  ours, theirs = _generator_samples(lambda g: g.uniform([N], -3, 7, dtype=tf.int32))
  assert ours.min() >= -3 and ours.max() < 7
  _same_counts(ours, theirs)
  ours, theirs = _generator_samples(
    lambda g: g.binomial([N, 2], counts=[8.0, 30.0], probs=[0.3, 0.9])
  )
  for j in range(2):
    _same_counts(ours[:, j], theirs[:, j])
  full, _ = _generator_samples(lambda g: g.uniform_full_int([N], dtype=tf.int32))
  assert float(np.mean(full < 0)) == pytest.approx(0.5, abs=0.02)


def test_stateful_errors_are_typed():
  var = tf.Variable(np.array([1, 2, 3], np.int64))
  f = tf.function(
    lambda: tf.raw_ops.StatefulRandomBinomial(
      resource=var.handle, algorithm=1, shape=[4], counts=[1.0, 2.0], probs=0.5
    )
  )
  with pytest.raises(tfprims.ConversionError, match="must end with the broadcast shape"):
    tfprims.convert(f)[0](tfprims.convert(f)[1])
  f = tf.function(lambda: tf.raw_ops.StatefulUniform(resource=var.handle, algorithm=2, shape=[4]))
  with pytest.raises(tfprims.ConversionError, match="algorithm 2 is not supported"):
    fn, params = tfprims.convert(f)
    fn(params)


# --- gamma, poisson, binomial, parameterized truncated normal ---------------------------


def _functional(fn, *specs):
  return tfprims.convert_functional(tf.function(fn, autograph=False), *specs)


def _tf_stateful(fn, seed=0):
  tf.random.set_seed(seed)
  return tf.function(fn, autograph=False)().numpy()


def test_gamma_and_poisson_match_tf():
  alpha = np.array([0.3, 2.0, 9.0], np.float32)
  f = lambda: tf.random.gamma([N], alpha)
  ours = np.asarray(_functional(f)(rng=jax.random.key(0)))
  theirs = _tf_stateful(f)
  assert ours.shape == (N, 3) and ours.dtype == np.float32
  for j in range(3):
    _ks(ours[:, j], theirs[:, j])
  lam = np.array([0.0, 1.5, 30.0], np.float32)
  f = lambda: tf.random.poisson([N], lam, dtype=tf.int32)
  ours = np.asarray(_functional(f)(rng=jax.random.key(1)))
  theirs = _tf_stateful(f)
  assert ours.dtype == np.int32 and not ours[:, 0].any()
  for j in (1, 2):
    _same_counts(ours[:, j], theirs[:, j])


def test_gamma_edge_alphas_as_tf():
  f = lambda: tf.raw_ops.RandomGamma(shape=[4], alpha=np.array([0.0, -1.0, np.nan], np.float32))
  ours = np.asarray(_functional(f)(rng=jax.random.key(0)))
  np.testing.assert_array_equal(np.isnan(ours), np.isnan(f().numpy()))
  np.testing.assert_array_equal(ours[:, 0], 0.0)


@pytest.mark.parametrize(
  "name, f",
  [
    ("stateless_gamma", lambda: tf.random.stateless_gamma([N, 2], [3, 4], alpha=[0.7, 4.0])),
    (
      "stateless_gamma_beta",
      lambda: tf.random.stateless_gamma([N, 2], [3, 4], alpha=2.0, beta=[1.0, 3.0]),
    ),
    (
      "stateless_ptn",
      lambda: tf.random.stateless_parameterized_truncated_normal(
        [N, 2],
        [5, 6],
        means=[0.0, 1.0],
        stddevs=[1.0, 0.5],
        minvals=[-1.0, 0.0],
        maxvals=[2.0, 3.0],
      ),
    ),
    (
      "ptn",
      lambda: tf.raw_ops.ParameterizedTruncatedNormal(
        shape=[2, N], means=[0.0, 1.0], stdevs=[1.0], minvals=[-1.0, 0.0], maxvals=[2.0, 3.0]
      ),
    ),
  ],
)
def test_continuous_samplers_match_tf(name, f):
  if name == "ptn":
    ours = np.asarray(_functional(f)(rng=jax.random.key(2))).T
    theirs = _tf_stateful(f).T
  else:
    ours, theirs = np.asarray(_functional(f)()), f().numpy()
  assert ours.shape == theirs.shape and ours.dtype == theirs.dtype
  for j in range(2):
    _ks(ours[:, j], theirs[:, j])
  if "ptn" in name:
    assert ours[:, 0].min() >= -1 and ours[:, 0].max() <= 2
    assert ours[:, 1].min() >= 0 and ours[:, 1].max() <= 3


@pytest.mark.parametrize(
  "name, f",
  [
    (
      "stateless_poisson",
      lambda: tf.random.stateless_poisson([N, 2], [1, 2], lam=[0.5, 12.0], dtype=tf.int32),
    ),
    (
      "stateless_binomial",
      lambda: tf.random.stateless_binomial([N, 2], [3, 9], counts=[5.0, 40.0], probs=[0.2, 0.7]),
    ),
  ],
)
def test_discrete_stateless_samplers_match_tf(name, f):
  ours, theirs = np.asarray(_functional(f)()), f().numpy()
  assert ours.shape == theirs.shape and ours.dtype == theirs.dtype
  for j in range(2):
    _same_counts(ours[:, j], theirs[:, j])


def test_stateless_samplers_same_seed_same_numbers_and_vmap_over_seeds():
  fn = _functional(
    lambda seed: tf.random.stateless_gamma([8], seed, alpha=1.5), tf.TensorSpec([2], tf.int32)
  )
  seeds = np.array([[1, 2], [1, 3], [7, 7]], np.int32)
  batched = jax.vmap(fn)(seeds)
  for i, s in enumerate(seeds):
    np.testing.assert_array_equal(batched[i], fn(s))
  assert not np.array_equal(batched[0], batched[1])
  assert "tf.StatelessRandomGammaV3" in str(jax.make_jaxpr(fn)(seeds[0]))  # TF 2.x: V3


def test_random_gamma_grad_values_match_tf(x64):
  rng = np.random.default_rng(0)
  alpha = rng.uniform(0.2, 10, 200)
  sample = alpha * rng.uniform(0.3, 3, 200)
  fn = _functional(
    lambda a, s: tf.raw_ops.RandomGammaGrad(alpha=a, sample=s),
    tf.TensorSpec([200], tf.float64),
    tf.TensorSpec([200], tf.float64),
  )
  np.testing.assert_allclose(
    fn(alpha, sample), tf.raw_ops.RandomGammaGrad(alpha=alpha, sample=sample).numpy(), rtol=1e-11
  )


@pytest.mark.parametrize("stateless", [False, True])
def test_reparameterised_gamma_gradient_matches_tf(stateless):
  """d sample / d alpha is TF's RandomGammaGrad at our own samples; as a statistic,
  d E[sample] / d alpha = 1 (unit scale), as TF's GradientTape gives on its samples."""

  def draw(alpha):
    if stateless:
      return tf.random.stateless_gamma([N, 2], [4, 2], alpha=alpha)
    return tf.random.gamma([N], alpha)

  fn = _functional(draw, tf.TensorSpec([2], tf.float32))
  alpha = np.array([0.8, 5.0], np.float32)
  key = jax.random.key(3)
  call = (lambda a: fn(a)) if stateless else (lambda a: fn(a, rng=key))
  samples = np.asarray(call(alpha))
  grad = jax.grad(lambda a: jnp.sum(call(a)))(alpha)
  per_sample = tf.raw_ops.RandomGammaGrad(
    alpha=np.broadcast_to(alpha, samples.shape), sample=samples
  ).numpy()
  np.testing.assert_allclose(grad, per_sample.sum(0), rtol=1e-4)
  tf.random.set_seed(0)
  a = tf.constant(alpha)
  with tf.GradientTape() as tape:
    tape.watch(a)
    total = tf.reduce_sum(draw(a))
  theirs = tape.gradient(total, a).numpy()
  np.testing.assert_allclose(grad / N, 1.0, atol=0.05)
  np.testing.assert_allclose(theirs / N, 1.0, atol=0.05)
  names = jaxpr_primitives(jax.make_jaxpr(jax.grad(lambda a: jnp.sum(call(a))))(alpha))
  assert "tf.RandomGammaGrad" in names


def test_stateless_trailing_shape_is_checked_as_tf():
  f = lambda: tf.raw_ops.StatelessRandomPoisson(
    shape=[3], seed=[1, 2], lam=np.float32([[1, 2, 3]]), dtype=tf.int32
  )
  with pytest.raises(tf.errors.InvalidArgumentError):
    f()
  with pytest.raises(tfprims.ConversionError, match="must end with the broadcast shape"):
    _functional(f)()


# --- RandomIndexShuffle (bit for bit) ----------------------------------------------------


@pytest.mark.parametrize("max_index, rounds", [(0, 4), (9, 4), (1000, 8), (70000, 6)])
def test_random_index_shuffle_is_tfs_permutation(max_index, rounds, x64):
  n = min(max_index, 2000) + 1
  seed = np.array([7, -3, 2**31 - 5], np.int64)
  f = lambda i: tf.raw_ops.RandomIndexShuffle(
    index=i, seed=seed, max_index=np.int64(max_index), rounds=rounds
  )
  fn = _functional(f, tf.TensorSpec([n], tf.int64))
  idx = np.arange(n, dtype=np.int64)
  ours = np.asarray(fn(idx))
  np.testing.assert_array_equal(ours, f(idx).numpy())
  if n == max_index + 1:  # the whole range: a bijection
    np.testing.assert_array_equal(np.sort(ours), idx)
  np.testing.assert_array_equal(jax.jit(fn)(idx), ours)


def test_random_index_shuffle_vmaps_over_seeds_as_tf():
  f = lambda s: tf.raw_ops.RandomIndexShuffle(index=np.uint32(5), seed=s, max_index=np.uint32(300))
  fn = _functional(f, tf.TensorSpec([3], tf.uint32))
  seeds = np.array([[1, 2, 3], [4, 5, 6], [2**32 - 1, 0, 9]], np.uint32)
  np.testing.assert_array_equal(jax.vmap(fn)(seeds), [f(s).numpy() for s in seeds])
  assert "tf.RandomIndexShuffle" in str(jax.make_jaxpr(fn)(seeds[0]))


# --- candidate samplers ----------------------------------------------------------------


@pytest.mark.parametrize("op_type", ["UniformCandidateSampler", "LogUniformCandidateSampler"])
def test_candidate_samplers_expected_counts_and_ranges(op_type, x64):
  true_classes = np.array([[1, 2], [3, 9], [0, 19]], np.int64)

  def f(unique, num_sampled=5):
    return getattr(tf.raw_ops, op_type)(
      true_classes=true_classes, num_true=2, num_sampled=num_sampled, unique=unique, range_max=20
    )

  # Without unique sampling the true classes' expected counts are deterministic: TF's.
  ours = _functional(lambda: f(False))(rng=jax.random.key(0))
  theirs = f(False)
  np.testing.assert_allclose(ours[1], theirs[1].numpy(), rtol=1e-6)
  assert ours[0].dtype == np.int64 and ours[0].shape == (5,)
  assert 0 <= int(ours[0].min()) and int(ours[0].max()) < 20
  # Unique: distinct candidates; counts from the number of draws, as TF's formula.
  cands, true_count, sampled_count = _functional(lambda: f(True, 20))(rng=jax.random.key(1))
  np.testing.assert_array_equal(np.sort(np.asarray(cands)), np.arange(20))
  assert (np.asarray(true_count) <= 1.0 + 1e-6).all() or op_type == "UniformCandidateSampler"


def test_candidate_sampler_distributions_match_tf():
  def f():
    return tf.raw_ops.LogUniformCandidateSampler(
      true_classes=np.zeros((1, 1), np.int64), num_true=1, num_sampled=N, unique=False, range_max=50
    )[0]

  ours = np.asarray(_functional(f)(rng=jax.random.key(2)))
  _same_counts(ours, _tf_stateful(f))


def test_all_candidate_sampler_as_tf():
  f = lambda: tf.raw_ops.AllCandidateSampler(
    true_classes=np.array([[1], [3]], np.int64), num_true=1, num_sampled=4, unique=True
  )
  for a, b in zip(_functional(f)(), f()):
    np.testing.assert_array_equal(a, b.numpy())


def test_binomial_edge_parameters_like_tf(x64):
  """What TF's binomial kernel decides without sampling is TF's: 0 for counts <= 0 or
  probs <= 0 (-0.0 and negatives), counts (not rounded) for probs >= 1, NaN for NaN
  probs; counts - k for probs > 0.5 keeps a fractional count's fraction; an infinite
  count gives inf, or NaN for probs > 0.5. probs = -0.0 made jax.random.binomial's
  inversion loop run forever (log1p(0) = 0), in a vmap as well as alone."""
  op = tfprims.core.get_op("StatelessRandomBinomial")
  seed = np.array([1, 2], np.int32)
  # jax.random.binomial: floor(0.5) = 0 trials at p = 1, NaN for p < 0 or p > 1.
  c, p = np.full(3, 0.5, np.float32), np.array([1.0, -0.5, 1.5], np.float32)
  np.testing.assert_array_equal(
    op(seed, c, p, shape=(2, 3), dtype=np.dtype(np.float32)),
    tf.raw_ops.StatelessRandomBinomial(
      shape=[2, 3], seed=seed, counts=c, probs=p, dtype=tf.float32
    ),
  )
  probs = np.array([-0.0, 0.0, -0.5, 1.0, 1.5, np.nan])
  for cdt in (np.float16, np.float32, np.float64):
    for out in (np.float32, np.int32):
      for c in (0.0, -0.0, -1.0, 0.5, 5.0, 15.5, np.inf, np.nan):
        if out == np.int32 and not np.isfinite(c):
          continue
        counts = np.full(probs.shape, c, cdt)
        p = probs.astype(cdt) if out == np.float32 else probs[:-1].astype(cdt)
        counts = counts[: p.size]
        expected = tf.raw_ops.StatelessRandomBinomial(
          shape=[4, p.size], seed=seed, counts=counts, probs=p, dtype=out
        ).numpy()
        got = np.asarray(op(seed, counts, p, shape=(4, p.size), dtype=np.dtype(out)))
        np.testing.assert_array_equal(got, expected, err_msg=f"{cdt} {out} counts={c}")
        np.testing.assert_array_equal(np.signbit(got), np.signbit(expected))
  # Sampled: counts - k for p > 0.5 (fraction kept); infinite counts.
  got = np.asarray(
    op(
      seed,
      np.array([15.5, 15.5, np.inf, np.inf], np.float32),
      np.array([0.9, 0.2, 0.2, 0.9], np.float32),
      shape=(500, 4),
      dtype=np.dtype(np.float32),
    )
  )
  assert np.all(got[:, 0] % 1 == 0.5) and np.all(got[:, 1] % 1 == 0)
  assert got[:, 0].min() >= 0.5 and got[:, 1].max() <= 15
  np.testing.assert_array_equal(got[:, 2], np.inf)
  assert np.isnan(got[:, 3]).all()
  # probs -0.0 next to sampled ones, alone and in a vmap: it terminates.
  f = lambda s, p: op(s, np.float32(20.0), p, shape=(3, 2), dtype=np.dtype(np.float32))
  p = np.array([[-0.0, 0.3], [0.3, -0.0], [0.0, 1.0]], np.float32)
  seeds = np.array([[1, 2], [3, 4], [5, 6]], np.int32)
  batched = np.asarray(jax.vmap(f)(seeds, p))
  for i in range(3):
    np.testing.assert_array_equal(batched[i], f(seeds[i], p[i]))
  np.testing.assert_array_equal(batched[[0, 1, 2], :, [0, 1, 0]], 0.0)
  np.testing.assert_array_equal(batched[2, :, 1], 20.0)
