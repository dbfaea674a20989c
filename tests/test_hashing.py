"""Integer hashing (tfprims/ops/hashing): Keras ``Hashing`` and
``to_hash_bucket*(as_string(x))`` on integer features, bit for bit TF's buckets, with
x64 off (int64 narrowed to int32) and on (the whole int64 range); AsString's refusals.
The ops' own property specs (every integer dtype, edge values, num_buckets 1 .. 2^63 - 1,
fill flags) run in property_tests/test_ops.py."""

import jax
import keras
import numpy as np
import pytest
import tensorflow as tf

import tfprims
from tfprims import errors, op_report
from tfprims.ops.hashing import HASH_OPS, edge_values


def _convert(fn, spec):
  converted, params = tfprims.convert(fn, spec)
  return lambda x: converted(params, x)[0]


def _hash_eqns(g, x):
  jaxpr = jax.make_jaxpr(g)(x).jaxpr
  return [e for e in jaxpr.eqns if e.primitive.name.startswith("tf.StringToHash")]


def _values(dtype, count, seed):
  info = np.iinfo(dtype)
  rng = np.random.default_rng(seed)
  drawn = rng.integers(info.min, info.max, size=count, dtype=dtype, endpoint=True)
  return np.concatenate([np.array(edge_values(np.dtype(dtype)), dtype), drawn])


def test_keras_hashing_on_int64_matches_keras_on_tf_eager_and_jit():
  """x64 off: Keras Hashing(16), its salted (SipHash) variant and the legacy
  to_hash_bucket (of as_string with printf's "+" flag) on int64 features (narrowed to
  int32: values within int32, every edge of that range) equal Keras on TF, eagerly and
  jitted; one primitive per hash node, on the integers, marked source=decimal."""
  fast, strong = keras.layers.Hashing(num_bins=16), keras.layers.Hashing(num_bins=16, salt=[1, 2])

  @tf.function
  def fn(x):
    return (fast(x), strong(x), tf.strings.to_hash_bucket(tf.strings.as_string(x, fill="+"), 7))

  x = _values(np.int32, 40, 0).astype(np.int64)
  with pytest.warns(errors.PrecisionWarning):
    g = _convert(fn, tf.TensorSpec([None], tf.int64))
  want = [o.numpy() for o in fn(tf.constant(x))]
  eqns = _hash_eqns(g, x)
  assert sorted(e.primitive.name for e in eqns) == sorted(
    ["tf.StringToHashBucketFast", "tf.StringToHashBucketStrong", "tf.StringToHashBucket"]
  )
  assert all(e.params["source"] == "decimal" and e.invars[0].aval.dtype == np.int32 for e in eqns)
  assert [e.params["num_buckets"] for e in eqns] == [16, 16, 7]
  assert eqns[1].params["key"] == (1, 2)
  assert [e.params["positive_prefix"] for e in eqns] == ["", "", "+"]
  for got in (g(x), jax.jit(g)(x)):
    assert len(got) == len(want)
    for a, b in zip(got, want):
      assert np.asarray(a).dtype == np.int32
      np.testing.assert_array_equal(np.asarray(a), b)


def test_whole_int64_range_with_x64(x64):
  """x64 on: the whole int64 and uint64 ranges (extremes, powers of ten and their
  neighbours, random draws), num_buckets up to 2^63 - 1, a key of full 64-bit words."""
  big = (1 << 62) + 12345

  @tf.function
  def fn(x, u):
    s, t = tf.strings.as_string(x), tf.strings.as_string(u)
    return (
      tf.strings.to_hash_bucket_fast(s, big),
      tf.strings.to_hash_bucket_strong(s, (1 << 63) - 1, [-5, (1 << 62) + 7]),
      tf.strings.to_hash_bucket(s, 1 << 40),
      tf.strings.to_hash_bucket_fast(t, 1000),
      tf.strings.to_hash_bucket_strong(t, big, [3, -1]),
    )

  x = _values(np.int64, 60, 1)
  u = _values(np.uint64, x.size - len(edge_values(np.dtype(np.uint64))), 2)
  converted, params = tfprims.convert(
    fn, tf.TensorSpec([None], tf.int64), tf.TensorSpec([None], tf.uint64)
  )
  got = jax.jit(lambda a, b: converted(params, a, b)[0])(x, u)
  want = fn(tf.constant(x), tf.constant(u))
  for a, b in zip(got, want):
    assert np.asarray(a).dtype == np.int64
    np.testing.assert_array_equal(np.asarray(a), b.numpy())


def test_as_string_refusals_name_the_nodes():
  """What tfprims does not convert is refused with typed errors naming the nodes: the
  decimal strings read by anything but a hash op (both nodes named; an inlined function
  call passes them on), AsString attrs other than the defaults (width; precision, which
  TF rejects for integers), AsString of floats (an unsupported op at conversion, as
  before), and more buckets than int32 holds with x64 off."""
  spec = tf.TensorSpec([3], tf.int32)
  x = np.array([1, -2, 30], np.int32)

  def refused(fn, *needles, error=errors.ConversionError):
    g = _convert(tf.function(fn), spec)
    with pytest.raises(error) as info:
      jax.make_jaxpr(g)(x)
    for needle in needles:
      assert needle in str(info.value)

  @tf.function
  def inner(strings):
    return tf.strings.to_hash_bucket_fast(strings, 8)

  # an inlined function call passes the decimal strings in
  eqns = _hash_eqns(_convert(tf.function(lambda x: inner(tf.strings.as_string(x))), spec), x)
  assert [e.primitive.name for e in eqns] == ["tf.StringToHashBucketFast"]
  refused(
    lambda x: tf.strings.to_hash_bucket_fast(
      tf.reshape(tf.strings.as_string(x, name="digits"), [3, 1], name="rows"), 8
    ),
    "'rows'",
    "'digits'",
    *HASH_OPS,
    error=errors.UnsupportedInputError,
  )
  refused(
    lambda x: tf.strings.to_hash_bucket_fast(tf.strings.as_string(x, width=4, name="padded"), 8),
    "'padded'",
    "width=4",
  )
  floats = tf.function(
    lambda x: tf.strings.to_hash_bucket_fast(
      tf.strings.as_string(tf.cast(x, tf.float32), name="floats"), 8
    )
  )
  with pytest.raises(errors.UnsupportedOpError) as info:  # found at conversion
    _convert(floats, spec)
  assert info.value.ops == {"AsString": ("floats",)}
  ints = tf.function(lambda x: tf.strings.to_hash_bucket_fast(tf.strings.as_string(x), 8))
  reports = [
    op_report.report_concrete_function(f.get_concrete_function(spec)) for f in (floats, ints)
  ]
  assert reports[0].ops["AsString"].status == op_report.UNSUPPORTED
  assert "float32" in reports[0].ops["AsString"].why
  assert reports[1].convertible
  refused(
    lambda x: tf.strings.to_hash_bucket_fast(tf.strings.as_string(x), 1 << 32, name="many"),
    "'many'",
    "2^31",
  )
  refused(
    lambda x: tf.strings.to_hash_bucket_fast(
      tf.raw_ops.AsString(input=x, precision=2, name="p2"), 8
    ),
    "'p2'",
    "precision",
  )
