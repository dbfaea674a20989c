"""IsotonicRegression (tfprims/ops/nn/isotonic.py): tf.nn.isotonic_regression converted and
compared with TF (outputs, segments, grad, vmap); other ranks; TF-named grad jaxprs."""

import jax
import jax.numpy as jnp
import numpy as np
import tensorflow as tf

import tfprims
from helpers import jaxpr_primitives
from tfprims.core import get_op

TOL = dict(rtol=1e-5, atol=1e-6)


def test_tf_nn_isotonic_regression_program():
  @tf.function
  def tf_fn(x):
    up, seg_up = tf.nn.isotonic_regression(x, decreasing=False, axis=0)
    down, seg_down = tf.nn.isotonic_regression(2.0 * x, decreasing=True)
    return up + down, seg_up, seg_down

  fn, params = tfprims.convert(tf_fn, tf.TensorSpec((4, 6), tf.float32))
  x = np.random.default_rng(0).normal(size=(4, 6)).astype(np.float32)
  got, want = jax.jit(fn)(params, x)[0], tf_fn(x)
  np.testing.assert_allclose(got[0], want[0].numpy(), **TOL)
  for a, b in zip(got[1:], want[1:]):
    np.testing.assert_array_equal(a, b.numpy())

  ct = np.random.default_rng(1).normal(size=(4, 6)).astype(np.float32)
  loss = lambda x: jnp.sum(fn(params, x)[0][0] * ct)
  xt = tf.constant(x)
  with tf.GradientTape() as tape:
    tape.watch(xt)
    y = tf.reduce_sum(tf_fn(xt)[0] * ct)
  np.testing.assert_allclose(jax.grad(loss)(x), tape.gradient(y, xt).numpy(), **TOL)
  prims = jaxpr_primitives(jax.make_jaxpr(jax.grad(loss))(x))
  assert {"tf.IsotonicRegression", "tf.UnsortedSegmentSum", "tf.GatherV2"} <= prims

  # vmap over a stack of inputs == TF on each
  xs = np.random.default_rng(2).normal(size=(3, 4, 6)).astype(np.float32)
  batched = jax.vmap(lambda v: fn(params, v)[0][0])(xs)
  for k in range(3):
    np.testing.assert_allclose(batched[k], tf_fn(xs[k])[0].numpy(), **TOL)


def test_other_ranks_and_ties():
  """Rows are the last axis at any rank; equal adjacent means stay separate segments."""
  op = get_op("IsotonicRegression")
  rng = np.random.default_rng(3)
  for x in (
    rng.normal(size=(5,)),
    rng.normal(size=(2, 3, 4)),
    np.array([[1.0, 1.0, 3.0, 3.0, 2.0, 0.0]]),
  ):
    x = x.astype(np.float32)
    out, seg = op(x, output_dtype=np.dtype("float32"))
    want_out, want_seg = tf.raw_ops.IsotonicRegression(input=x)
    np.testing.assert_allclose(out, want_out.numpy(), **TOL)
    np.testing.assert_array_equal(seg, want_seg.numpy())
