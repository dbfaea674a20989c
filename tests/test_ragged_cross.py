"""RaggedCross (tf.ragged.cross_hashed) of int64 ragged, sparse and dense features,
against TF bit for bit: eagerly and under jax.jit with the row splits and sparse
indices as numpy (the values traced); traced row splits raise StaticInputError naming
the node, string crosses (tf.ragged.cross) a typed error with the host-prefix hint
(docs/semantics/ragged.md)."""

import jax
import numpy as np
import pytest
import tensorflow as tf

import tfprims
from helpers import jaxpr_primitives

I32, I64 = tf.int32, tf.int64
BIG, SMALL = 2**63 - 1, -(2**63)


def _flat(rt):
  return tuple(tf.nest.flatten(rt, expand_composites=True))


@tf.function
def _crosses(a, s, d, b):
  """Ragged, sparse and dense features in several orders and bucket counts."""
  return (
    _flat(tf.ragged.cross_hashed([a, s, d], num_buckets=1000))
    + _flat(tf.ragged.cross_hashed([d, a, s]))  # num_buckets=0: modulo 2^63 - 1
    + _flat(tf.ragged.cross_hashed([s, b], num_buckets=1, hash_key=-5))  # int32 splits
    # TF's kernel hashes int64 output whatever hashed_output says
    + tf.raw_ops.RaggedCross(
      ragged_values=[a.values],
      ragged_row_splits=[a.row_splits],
      sparse_indices=[],
      sparse_values=[],
      sparse_shape=[],
      dense_inputs=[d],
      input_order="DR",
      hashed_output=False,
      num_buckets=65537,
      hash_key=BIG,
      out_values_type=I64,
      out_row_splits_type=I64,
    )[:]
  )


def test_cross_hashed_bit_exact_eager_and_jit_traced_splits_refused(x64):
  specs = (
    tf.RaggedTensorSpec([None, None], I64, 1, I64),
    tf.SparseTensorSpec([4, 3], I64),
    tf.TensorSpec([4, 2], I64),
    tf.RaggedTensorSpec([None, None], I64, 1, I32),
  )
  fn = tfprims.convert_functional(_crosses, *specs)
  # row 1: no ragged features (no crosses); row 2: no sparse entries; duplicates and
  # int64 extremes in every input
  a = tf.ragged.constant([[7, 7, SMALL], [], [BIG, 0], [-1]], I64, row_splits_dtype=I64)
  b = tf.ragged.constant([[3], [SMALL, 3], [], [BIG, BIG]], I64, row_splits_dtype=I32)
  s_idx = np.array([[0, 0], [0, 2], [1, 1], [3, 0], [3, 1]], np.int64)
  s_val = np.array([5, 5, 2**31, BIG, -(2**31)], np.int64)
  s = tf.SparseTensor(s_idx, s_val, [4, 3])
  d = np.array([[100, -7], [1, 1], [SMALL, BIG], [0, 9]], np.int64)
  want = [w.numpy() for w in _crosses(a, s, d, b)]
  assert all(len(w) for w in want[::2])  # every result has crosses

  def check(got):
    assert len(got) == len(want)
    for g, w in zip(got, want):
      assert np.asarray(g).dtype == w.dtype
      np.testing.assert_array_equal(np.asarray(g), w)

  check(fn(a, s, d, b))
  a_parts, b_parts = _flat(a), _flat(b)
  a_splits, b_splits = a_parts[1].numpy(), b_parts[1].numpy()

  def jitted(av, sv, dv, bv):
    return fn((av, a_splits), (s_idx, sv, [4, 3]), dv, (bv, b_splits))

  args = (a_parts[0].numpy(), s_val, d, b_parts[0].numpy())
  check(jax.jit(jitted)(*args))
  assert "tf.RaggedCross" in jaxpr_primitives(jax.make_jaxpr(jitted)(*args))
  # traced row splits decide the output's size: refused naming the node
  with pytest.raises(tfprims.StaticInputError, match="RaggedCross node .*ragged_row_splits"):
    jax.jit(lambda av, sp: fn((av, sp), s, d, b))(args[0], a_splits)


@pytest.mark.filterwarnings("ignore::tfprims.PrecisionWarning")  # int64 in 32 bits
def test_string_crosses_refused_and_x64_off_buckets():
  spec = (tf.RaggedTensorSpec([None, None], I64, 1, I64), tf.TensorSpec([2, 1], I64))
  a = tf.ragged.constant([[1, -2], [3]], I64, row_splits_dtype=I64)
  d = np.array([[4], [-5]], np.int64)
  # tf.ragged.cross crosses into strings, which JAX has no dtype for
  f = tf.function(lambda a, d: tf.strings.to_hash_bucket_fast(tf.ragged.cross([a, d]).values, 9))
  with pytest.raises(tfprims.OpError, match="RaggedCross node .*split_host_prefix"):
    tfprims.convert_functional(f, *spec)(a, d)
  # x64 off: int32 values and splits, the same buckets; num_buckets=0 needs x64
  g = tf.function(lambda a, d: _flat(tf.ragged.cross_hashed([a, d], num_buckets=97)))
  got = tfprims.convert_functional(g, *spec)(a, d)
  for x, w in zip(got, g(a, d)):
    assert np.asarray(x).dtype == np.int32
    np.testing.assert_array_equal(np.asarray(x), w.numpy())
  h = tf.function(lambda a, d: tf.ragged.cross_hashed([a, d]).values)
  with pytest.raises(tfprims.Int64OverflowError, match="RaggedCross node .*num_buckets=0"):
    tfprims.convert_functional(h, *spec)(a, d)
  # int32 row splits with int64 output splits abort TF's process: refused
  m = tf.function(
    lambda a, d: tf.raw_ops.RaggedCross(
      ragged_values=[a.values],
      ragged_row_splits=[tf.cast(a.row_splits, I32)],
      sparse_indices=[],
      sparse_values=[],
      sparse_shape=[],
      dense_inputs=[d],
      input_order="RD",
      hashed_output=True,
      num_buckets=5,
      hash_key=3,
      out_values_type=I64,
      out_row_splits_type=I64,
    )[0]
  )
  with pytest.raises(tfprims.OpError, match="RaggedCross node .*out_row_splits_type"):
    tfprims.convert_functional(m, *spec)(a, d)
