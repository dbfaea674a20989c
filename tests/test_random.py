"""Random ops: distributions vs TF (fixed seeds, so not flaky), determinism, rng handling
and transforms. Values are never compared bitwise: TF uses Philox, tfprims jax.random."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import tensorflow as tf
from scipy import stats

import tfprims
from tfprims import interpreter
from tfprims.ops import random as R

N = 20000
P_MIN = 1e-3  # deterministic (fixed seeds): a pass is a pass every run


def _functional(fn, *specs):
  return tfprims.convert_functional(tf.function(fn, autograph=False), *specs)


def _tf_samples(fn, seed=0):
  tf.random.set_seed(seed)
  return tf.function(fn, autograph=False)().numpy()


def _ks(ours, theirs):
  res = stats.ks_2samp(np.ravel(ours).astype(np.float64), np.ravel(theirs).astype(np.float64))
  assert res.pvalue > P_MIN, res


def _same_counts(ours, theirs, categories):
  """Chi-square test that two integer samples come from one distribution."""
  table = np.array([[np.sum(np.ravel(s) == c) for c in categories] for s in (ours, theirs)])
  table = table[:, table.sum(0) > 0]
  res = stats.chi2_contingency(table)
  assert res.pvalue > P_MIN, (table, res)


# --- stateful ops: key from rng= ----------------------------------------------------

STATEFUL_FLOAT = {
  "RandomUniform": lambda: tf.random.uniform([N]),
  "RandomStandardNormal": lambda: tf.random.normal([N]),
  "TruncatedNormal": lambda: tf.random.truncated_normal([N]),
  "scaled uniform": lambda: tf.random.uniform([N], -3.0, 5.0),
  "scaled normal": lambda: tf.random.normal([N], 2.0, 0.5),
}


@pytest.mark.parametrize("name", sorted(STATEFUL_FLOAT))
def test_stateful_float_distributions_match_tf(name):
  fn = _functional(STATEFUL_FLOAT[name])
  ours = np.asarray(fn(rng=jax.random.key(0)))
  assert ours.shape == (N,) and ours.dtype == np.float32
  _ks(ours, _tf_samples(STATEFUL_FLOAT[name]))


def test_uniform_range_and_truncated_normal_bounds():
  u = _functional(lambda: tf.random.uniform([N]))(rng=jax.random.key(1))
  assert 0 <= float(u.min()) and float(u.max()) < 1
  t = _functional(lambda: tf.random.truncated_normal([N]))(rng=jax.random.key(1))
  assert -2 <= float(t.min()) and float(t.max()) <= 2
  # The truncated normal's variance (0.7737) differs from a normal's: checked exactly.
  assert abs(float(jnp.var(t)) - 0.7737) < 0.03


def test_random_uniform_int_matches_tf():
  f = lambda: tf.random.uniform([N], -3, 7, dtype=tf.int32)
  ours = np.asarray(_functional(f)(rng=jax.random.key(2)))
  assert ours.dtype == np.int32 and ours.min() >= -3 and ours.max() < 7
  _same_counts(ours, _tf_samples(f), range(-3, 7))


def test_multinomial_matches_tf_including_non_finite_logits():
  logits = np.array([[0.0, 1.0, 2.0], [-np.inf, 0.0, 0.0], [np.nan, 1.0, 1.0]], np.float32)
  f = lambda: tf.random.categorical(tf.constant(logits), N // 4)
  ours = np.asarray(_functional(f)(rng=jax.random.key(3)))
  theirs = _tf_samples(f)
  assert ours.shape == theirs.shape == (3, N // 4) and ours.dtype == np.int32
  for row in range(3):
    _same_counts(ours[row], theirs[row], range(4))
  assert set(np.unique(ours[1])) == {1, 2}  # -inf and NaN logits are never drawn
  assert set(np.unique(ours[2])) == {1, 2}
  # A row without a finite logit samples num_classes, as TF's CPU kernel.
  g = lambda: tf.random.categorical(tf.constant([[-np.inf, -np.inf]]), 5)
  np.testing.assert_array_equal(_functional(g)(rng=jax.random.key(0)), _tf_samples(g))


def test_random_shuffle_permutes_the_first_axis():
  x = np.arange(40, dtype=np.float32).reshape(20, 2)
  fn = _functional(lambda x: tf.random.shuffle(x), tf.TensorSpec([20, 2]))
  a, b = fn(x, rng=jax.random.key(0)), fn(x, rng=jax.random.key(1))
  for out in (a, b):
    np.testing.assert_array_equal(np.sort(np.asarray(out)[:, 0]), x[:, 0])
    np.testing.assert_array_equal(np.asarray(out)[:, 1], np.asarray(out)[:, 0] + 1)
  assert not np.array_equal(a, b)
  # Scalars are returned unchanged, as TF.
  s = _functional(lambda x: tf.random.shuffle(x), tf.TensorSpec([]))
  assert float(s(np.float32(3), rng=jax.random.key(0))) == 3.0


@pytest.mark.parametrize("dtype", [tf.float16, tf.bfloat16, tf.float64])
def test_stateful_low_and_high_precision_dtypes(dtype):
  fn = _functional(
    lambda: (tf.random.uniform([500], dtype=dtype), tf.random.normal([500], dtype=dtype))
  )
  u, n = fn(rng=jax.random.key(0))
  want = tfprims.dtypes.canonical_dtype(dtype.as_numpy_dtype)
  assert u.dtype == want and n.dtype == want
  assert 0 <= float(u.min()) and float(u.max()) < 1
  assert abs(float(jnp.mean(n.astype(jnp.float32)))) < 0.2


def test_same_key_same_numbers_and_fresh_keys_per_node():
  fn = _functional(lambda: (tf.random.uniform([8]), tf.random.uniform([8])))
  a1, b1 = fn(rng=jax.random.key(7))
  a2, b2 = fn(rng=jax.random.key(7))
  np.testing.assert_array_equal(a1, a2)
  np.testing.assert_array_equal(b1, b2)
  assert not np.array_equal(a1, b1)  # two nodes, two keys
  a3, _ = fn(rng=jax.random.key(8))
  assert not np.array_equal(a1, a3)
  # Raw uint32[2] keys (jax.random.PRNGKey) work too.
  a4, _ = fn(rng=jax.random.PRNGKey(7))
  np.testing.assert_array_equal(a1, a4)


def test_missing_rng_raises_a_clear_error():
  fn = _functional(lambda: tf.random.uniform([3]))
  with pytest.raises(tfprims.MissingRngError, match=r"RandomUniform node .*rng=jax\.random\.key"):
    fn()
  converted, params = tfprims.convert(
    tf.function(lambda x: x + tf.random.normal([2])), tf.TensorSpec([2])
  )
  with pytest.raises(tfprims.MissingRngError, match="RandomStandardNormal"):
    converted(params, np.zeros(2, np.float32))


def test_jaxpr_keeps_tf_names_with_key_operand():
  fn = _functional(lambda: tf.random.uniform([2, 3]) + tf.random.normal([2, 3]))
  jaxpr = jax.make_jaxpr(lambda k: fn(rng=k))(jax.random.key(0))
  text = str(jaxpr)
  assert "tf.RandomUniform[dtype=float32 shape=(2, 3)]" in text
  assert "tf.RandomStandardNormal[dtype=float32 shape=(2, 3)]" in text
  # The primitive's key operand is raw uint32[2] key data.
  direct = jax.make_jaxpr(lambda k: R.RandomUniform(k, shape=(2,), dtype=np.dtype("float32")))(
    interpreter.key_data(jax.random.key(0))
  )
  assert str(direct.jaxpr.invars[0].aval) == "uint32[2]"


def test_jit_equals_eager_and_vmap_over_keys():
  fn = _functional(lambda x: x * tf.random.uniform([4]), tf.TensorSpec([4]))
  x = np.arange(4, dtype=np.float32)
  key = jax.random.key(0)
  eager = fn(x, rng=key)
  np.testing.assert_array_equal(jax.jit(lambda x, k: fn(x, rng=k))(x, key), eager)
  keys = jax.random.split(jax.random.key(1), 3)
  batched = jax.vmap(lambda k: fn(x, rng=k))(keys)
  for i in range(3):
    np.testing.assert_allclose(batched[i], fn(x, rng=keys[i]), rtol=1e-6)
  assert not np.array_equal(batched[0], batched[1])


def test_grad_through_random_scaling():
  # d/dx sum(x * u) = u: the noise is the same for the same key.
  fn = _functional(lambda x: tf.reduce_sum(x * tf.random.uniform([4])), tf.TensorSpec([4]))
  u = _functional(lambda: tf.random.uniform([4]))
  key = jax.random.key(3)
  g = jax.grad(lambda x: fn(x, rng=key))(np.ones(4, np.float32))
  np.testing.assert_allclose(g, u(rng=key), rtol=1e-6)


def test_rbg_keys_are_accepted():
  fn = _functional(lambda: tf.random.uniform([1000]))
  out = fn(rng=jax.random.key(0, impl="rbg"))
  assert 0 <= float(out.min()) and float(out.max()) < 1 and abs(float(out.mean()) - 0.5) < 0.05


# --- stateless ops: key from TF's seed ------------------------------------------------

STATELESS = {
  "uniform": lambda s: tf.random.stateless_uniform([N], seed=s),
  "normal": lambda s: tf.random.stateless_normal([N], seed=s),
  "truncated_normal": lambda s: tf.random.stateless_truncated_normal([N], seed=s),
  "uniform_scaled": lambda s: tf.random.stateless_uniform([N], seed=s, minval=2.0, maxval=3.0),
}


@pytest.mark.parametrize("name", sorted(STATELESS))
def test_stateless_distributions_match_tf_without_rng(name):
  f = STATELESS[name]
  ours = np.asarray(_functional(lambda: f([3, 4]))())
  theirs = f([3, 4]).numpy()
  assert ours.shape == theirs.shape and ours.dtype == theirs.dtype
  _ks(ours, theirs)


def test_stateless_int_and_categorical_match_tf():
  f = lambda: tf.random.stateless_uniform([N], seed=[1, 2], minval=-2, maxval=5, dtype=tf.int32)
  _same_counts(_functional(f)(), f().numpy(), range(-2, 5))
  logits = tf.constant([[0.0, 1.0, -1.0]])
  g = lambda: tf.random.stateless_categorical(logits, N // 2, seed=[5, 6])
  _same_counts(_functional(g)(), g().numpy(), range(4))


def test_stateless_same_seed_same_numbers_seed_as_runtime_input():
  fn = _functional(
    lambda seed: tf.random.stateless_normal([16], seed=seed), tf.TensorSpec([2], tf.int32)
  )
  a = fn(np.array([1, 2], np.int32))
  np.testing.assert_array_equal(a, fn(np.array([1, 2], np.int32)))
  assert not np.array_equal(a, fn(np.array([1, 3], np.int32)))
  # jit and vmap over seeds agree with per-seed calls.
  seeds = np.array([[1, 2], [1, 3], [9, 9]], np.int32)
  batched = jax.vmap(fn)(seeds)
  jitted = jax.jit(fn)
  for i, s in enumerate(seeds):
    np.testing.assert_array_equal(batched[i], fn(s))
    np.testing.assert_array_equal(jitted(s), fn(s))
  # Constant seeds: the jaxpr shows the V2 ops fed by StatelessRandomGetKeyCounter.
  text = str(jax.make_jaxpr(fn)(np.array([1, 2], np.int32)))
  assert "tf.StatelessRandomGetKeyCounter" in text
  assert "tf.StatelessRandomNormalV2[dtype=float32 shape=(16,)]" in text


def test_v1_and_v2_ops_agree_for_the_same_seed():
  def f():
    v1 = tf.raw_ops.StatelessRandomUniform(shape=[6], seed=tf.constant([4, 5], tf.int64))
    key, counter = tf.raw_ops.StatelessRandomGetKeyCounter(seed=tf.constant([4, 5]))
    v2 = tf.raw_ops.StatelessRandomUniformV2(shape=[6], key=key, counter=counter, alg=1)
    key, counter, alg = tf.raw_ops.StatelessRandomGetKeyCounterAlg(seed=tf.constant([4, 5]))
    v3 = tf.raw_ops.StatelessRandomUniformV2(shape=[6], key=key, counter=counter, alg=alg)
    return v1, v2, v3

  v1, v2, v3 = _functional(f)()
  np.testing.assert_array_equal(v1, v2)
  np.testing.assert_array_equal(v1, v3)


def test_stateless_full_int_and_shuffle():
  def f():
    full = tf.raw_ops.StatelessRandomUniformFullInt(shape=[N], seed=[1, 2], dtype=tf.int32)
    key, counter = tf.raw_ops.StatelessRandomGetKeyCounter(seed=[1, 2])
    shuffled = tf.raw_ops.StatelessShuffle(value=tf.range(10), key=key, counter=counter, alg=1)
    return full, shuffled

  full, shuffled = _functional(f)()
  assert full.dtype == np.int32
  assert float(jnp.mean(full < 0)) == pytest.approx(0.5, abs=0.02)  # sign bit is random
  np.testing.assert_array_equal(np.sort(np.asarray(shuffled)), np.arange(10))
  assert not np.array_equal(shuffled, np.arange(10))


def test_keras_style_seed_variable_drives_stateless_dropout():
  # Keras 3 (TF backend) draws dropout masks with stateless ops seeded from a variable it
  # advances on every call: the state lives in params, so no rng= is needed.
  seed = tf.Variable([7, 0], dtype=tf.int32)

  @tf.function
  def f(x):
    mask = tf.random.stateless_uniform(tf.shape(x), seed=seed) > 0.5
    seed.assign_add([0, 1])
    return tf.where(mask, x, 0.0)

  fn, params = tfprims.convert(f, tf.TensorSpec([64]))
  x = np.ones(64, np.float32)
  out1, p1 = fn(params, x)
  out2, p2 = fn(p1, x)
  np.testing.assert_array_equal(p1[next(iter(p1))], [7, 1])
  assert not np.array_equal(out1, out2)
  np.testing.assert_array_equal(fn(params, x)[0], out1)


def test_int64_seeds_with_x64_match_int32_seeds(x64):
  f32 = _functional(lambda: tf.random.stateless_uniform([5], seed=tf.constant([3, 4], tf.int32)))
  f64 = _functional(lambda: tf.random.stateless_uniform([5], seed=tf.constant([3, 4], tf.int64)))
  np.testing.assert_array_equal(f32(), f64())
  big = _functional(
    lambda: tf.random.stateless_uniform([5], seed=tf.constant([3, 2**40], tf.int64))
  )
  assert not np.array_equal(big(), f64())


@pytest.mark.parametrize(
  "rng, message",
  [
    (0, "got the int 0.*jax.random.key\\(0\\)"),
    (np.zeros(5, np.uint32), "shape \\(5,\\) and dtype uint32"),
    (np.zeros(2, np.int32), "shape \\(2,\\) and dtype int32"),
    ("seed", "got str"),
    (jax.random.split(jax.random.key(0), 3), "array of \\(3,\\) keys"),
  ],
)
def test_bad_rng_is_a_typed_error_naming_rng(rng, message):
  fn = _functional(lambda: tf.random.uniform([2]))
  with pytest.raises(tfprims.InvalidRngError, match="rng must be one JAX key.*" + message) as e:
    fn(rng=rng)
  assert isinstance(e.value, TypeError) and isinstance(e.value, tfprims.TFPrimsError)


def test_both_kinds_of_key_are_accepted():
  fn = _functional(lambda: tf.random.uniform([2]))
  a = fn(rng=jax.random.key(3))
  np.testing.assert_array_equal(a, fn(rng=jax.random.PRNGKey(3)))
  np.testing.assert_array_equal(a, jax.jit(lambda k: fn(rng=k))(jax.random.key(3)))
