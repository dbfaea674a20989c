"""Ragged reductions (tf.reduce_sum/mean/max(rt, axis=1)) under jit with traced row
splits: the pipeline computes their segment ids in static sizes
(tfprims.ops.ragged_patterns); values and gradients equal TF's, empty rows included
(docs/semantics/ragged.md)."""

import jax
import jax.numpy as jnp
import numpy as np
import tensorflow as tf

import tfprims
from helpers import jaxpr_primitives

F32 = tf.float32


@tf.function
def _reduce(rt):
  return (
    tf.reduce_sum(rt, axis=1),
    tf.reduce_mean(rt, axis=1),
    tf.reduce_max(rt, axis=1),
    tf.math.unsorted_segment_sum(rt.values, rt.value_rowids(), rt.nrows()),
  )


def _tape_grads(rt, w):
  values = tf.constant(rt.flat_values)
  with tf.GradientTape() as tape:
    tape.watch(values)
    outs = _reduce(rt.with_flat_values(values))
    loss = tf.reduce_sum(outs[0] * w[0]) + tf.reduce_sum(
      tf.where(tf.math.is_nan(outs[1]), 0.0, outs[1]) * w[1]
    )
  return tape.gradient(loss, values).numpy()


def test_ragged_reductions_jit_with_traced_splits_equal_tf():
  cases = [
    tf.ragged.constant(
      [[1.5, -2.0], [], [3.0, 0.25, 5.0, -6.0], []], F32, row_splits_dtype=tf.int64
    ),
    tf.ragged.constant([[-1.0], [2.0, 2.0, -7.5]], F32, row_splits_dtype=tf.int64),
    tf.RaggedTensor.from_row_splits(tf.zeros([0], F32), tf.constant([0, 0, 0], tf.int64)),
  ]
  fn = tfprims.convert_functional(_reduce, tf.RaggedTensorSpec([None, None], F32, 1, tf.int64))
  jitted = jax.jit(fn)
  for rt in cases:
    comps = (rt.flat_values.numpy(), rt.row_splits.numpy())
    want = [w.numpy() for w in _reduce(rt)]
    for got in (fn(rt), jitted(comps)):
      for g, w in zip(got, want):  # empty rows: 0, NaN (mean), float32 lowest (max), as TF
        np.testing.assert_allclose(g, w, rtol=1e-6)
  # one compiled program per static size: other row lengths, same shapes, no retrace
  rt = tf.RaggedTensor.from_row_splits(cases[0].flat_values, tf.constant([0, 6, 6, 6, 6], tf.int64))
  for g, w in zip(jitted((rt.flat_values.numpy(), rt.row_splits.numpy())), _reduce(rt)):
    np.testing.assert_allclose(g, w.numpy(), rtol=1e-6)
  # random partitions of 6 values into 4 rows (empty rows, all in one row...), one program
  rng = np.random.default_rng(0)
  for _ in range(8):
    cuts = np.sort(rng.integers(0, 7, 3))
    rt = tf.RaggedTensor.from_row_splits(
      cases[0].flat_values, tf.constant(np.r_[0, cuts, 6], tf.int64)
    )
    for g, w in zip(jitted((rt.flat_values.numpy(), rt.row_splits.numpy())), _reduce(rt)):
      np.testing.assert_allclose(g, w.numpy(), rtol=1e-6)
  prims = jaxpr_primitives(jax.make_jaxpr(fn)(comps))
  assert "tf.UpperBound" in prims and "tf.Where" not in prims
  # gradients of sum and mean wrt the flat values, under jit, vs TF's tape
  rt = cases[0]
  w = [np.float32([1.0, -2.0, 0.5, 3.0]), np.float32([0.25, 3.0, -1.0, 2.0])]
  splits = rt.row_splits.numpy()

  def loss(v):
    out = fn((v, splits))
    return jnp.sum(out[0] * w[0]) + jnp.sum(jnp.where(jnp.isnan(out[1]), 0.0, out[1]) * w[1])

  np.testing.assert_allclose(
    jax.jit(jax.grad(loss))(rt.flat_values.numpy()), _tape_grads(rt, w), rtol=1e-6
  )
