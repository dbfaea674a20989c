"""Fake quantization (tfprims/ops/nn/fake_quant.py): a QAT model with trainable min/max
converted and compared with TF (outputs, grads, vmap); TF-named grad jaxprs; 16-bit ties."""

import jax
import jax.numpy as jnp
import numpy as np
import tensorflow as tf

import tfprims
from helpers import jaxpr_primitives
from tfprims.core import get_op

TOL = dict(rtol=1e-5, atol=1e-5)


def test_qat_model_with_trainable_ranges():
  rng = np.random.default_rng(0)
  w = tf.Variable(rng.normal(size=(3, 4)).astype(np.float32), name="w")
  act_min, act_max = tf.Variable(-1.5, name="act_min"), tf.Variable(2.0, name="act_max")
  w_min = tf.Variable(-np.abs(rng.normal(size=4)).astype(np.float32) - 0.2, name="w_min")
  w_max = tf.Variable(np.abs(rng.normal(size=4)).astype(np.float32) + 0.2, name="w_max")

  @tf.function
  def tf_fn(x):
    xq = tf.quantization.fake_quant_with_min_max_vars(x, act_min, act_max, num_bits=8)
    wq = tf.quantization.fake_quant_with_min_max_vars_per_channel(
      w, w_min, w_max, num_bits=4, narrow_range=True
    )
    y = tf.matmul(xq, wq)
    return tf.quantization.fake_quant_with_min_max_args(y, min=-4.0, max=4.0)

  fn, params = tfprims.convert(tf_fn, tf.TensorSpec((None, 3), tf.float32))
  x = (rng.normal(size=(5, 3)) * 2).astype(np.float32)
  np.testing.assert_allclose(jax.jit(fn)(params, x)[0], tf_fn(x).numpy(), **TOL)

  ct = rng.normal(size=(5, 4)).astype(np.float32)
  grads, gx = jax.grad(lambda p, x: jnp.sum(fn(p, x)[0] * ct), argnums=(0, 1))(params, x)
  xt = tf.constant(x)
  variables = [fn.tf_variables[k] for k in params]
  with tf.GradientTape() as tape:
    tape.watch(xt)
    y = tf.reduce_sum(tf_fn(xt) * ct)
  *tf_grads, tf_gx = tape.gradient(y, variables + [xt])
  for k, g in zip(params, tf_grads):
    np.testing.assert_allclose(grads[k], g.numpy(), err_msg=k, **TOL)
  np.testing.assert_allclose(gx, tf_gx.numpy(), **TOL)
  assert any(np.any(np.asarray(grads[k]) != 0) for k in params if "min" in k)

  jaxpr = jax.make_jaxpr(jax.grad(lambda p, x: jnp.sum(fn(p, x)[0] * ct), (0, 1)))(params, x)
  assert {
    "tf.FakeQuantWithMinMaxVarsGradient",
    "tf.FakeQuantWithMinMaxVarsPerChannelGradient",
    "tf.FakeQuantWithMinMaxArgsGradient",
  } <= jaxpr_primitives(jaxpr)

  per_row = jax.vmap(lambda r: fn(params, r[None])[0][0])(x)
  for k in range(x.shape[0]):
    np.testing.assert_allclose(per_row[k], tf_fn(x[k : k + 1]).numpy()[0], **TOL)


def test_sixteen_bits_within_one_level():
  """At 16 bits TF's kernel rounds some exact ties (x / scale + 0.5 an integer in float32)
  to the other level; everything else agrees to float32 rounding."""
  x = np.linspace(-6, 6, 20001).astype(np.float32)
  for lo, hi, narrow in ((-5.300928, 4.520314, True), (-1.4073861, 3.804681, False)):
    attrs = dict(min=lo, max=hi, num_bits=16, narrow_range=narrow)
    want = tf.raw_ops.FakeQuantWithMinMaxArgs(inputs=x, **attrs).numpy()
    got = np.asarray(get_op("FakeQuantWithMinMaxArgs")(x, **attrs))
    step = (hi - lo) / 65535
    assert np.abs(got - want).max() <= step * 1.01
    assert np.mean(np.abs(got - want) > 1e-5) < 0.01


def test_gradient_ops_multiply_by_the_mask_like_tf():
  """Outside the range TF's gradient ops give ``gradients * 0``: NaN for infinite or NaN
  gradients and -0.0 for negative ones (a select would give +0.0 everywhere)."""
  g = np.array([-1.0, np.inf, np.nan, -0.0, 2.0, -3.0], np.float32)
  x = np.array([100, -100, 100, 0.5, 100, 0.25], np.float32)
  cases = [
    ("FakeQuantWithMinMaxArgsGradient", dict(gradients=g, inputs=x), {}),
    (
      "FakeQuantWithMinMaxVarsGradient",
      dict(gradients=g, inputs=x, min=np.float32(-6), max=np.float32(6)),
      {},
    ),
    (
      "FakeQuantWithMinMaxVarsPerChannelGradient",
      dict(
        gradients=g.reshape(3, 2),
        inputs=x.reshape(3, 2),
        min=np.float32([-6, -6]),
        max=np.float32([6, 6]),
      ),
      {},
    ),
  ]
  for op_type, inputs, attrs in cases:
    want = getattr(tf.raw_ops, op_type)(**inputs, **attrs)
    want = [np.asarray(w) for w in (want if isinstance(want, tuple) else [want])]
    op = get_op(op_type)
    operands, params = op.prepare(inputs, attrs)
    for got_all in (op(*operands, **params), jax.jit(lambda *a: op(*a, **params))(*operands)):
      got_all = got_all if isinstance(got_all, (list, tuple)) else [got_all]
      for got, w in zip(got_all, want):
        got = np.asarray(got)
        np.testing.assert_array_equal(np.isnan(got), np.isnan(w), err_msg=op_type)
        finite = ~np.isnan(w)
        np.testing.assert_array_equal(got[finite], w[finite], err_msg=op_type)
        np.testing.assert_array_equal(
          np.signbit(got[finite]), np.signbit(w[finite]), err_msg=op_type
        )
