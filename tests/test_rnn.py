"""Keras recurrent layers end to end: values, jax.grad vs tf.GradientTape, vmap over
sequences vs per-sequence TF results, jit; loops become tf.While with tf.* ops inside."""

import jax
import jax.numpy as jnp
import keras
import numpy as np
import pytest
import tensorflow as tf

import tfprims
from helpers import jaxpr_primitives, non_tf_primitives

RTOL, ATOL = 1e-5, 1e-5
GRAD_TOL = 1e-4


def _layer(kind):
  if kind == "lstm":
    return keras.layers.LSTM(4)
  if kind == "lstm_sequences":
    return keras.layers.LSTM(4, return_sequences=True, go_backwards=True)
  if kind == "gru":
    return keras.layers.GRU(4, return_sequences=True)
  if kind == "simple_rnn":
    return keras.layers.SimpleRNN(4, activation="relu")
  if kind == "bidirectional_lstm":
    return keras.layers.Bidirectional(keras.layers.LSTM(3, return_sequences=True))
  if kind == "conv_lstm2d":
    return keras.layers.ConvLSTM2D(2, 3, padding="same")
  if kind == "stacked":
    return keras.Sequential([keras.layers.GRU(3, return_sequences=True), keras.layers.LSTM(2)])
  raise ValueError(kind)


def _build(kind):
  keras.utils.set_random_seed(0)
  shape = (4, 4, 4, 1) if kind == "conv_lstm2d" else (5, 3)
  model = keras.Sequential([keras.Input(shape), _layer(kind)])
  tf_fn = tf.function(lambda x: model(x))
  fn, params = tfprims.convert(tf_fn, tf.TensorSpec((None,) + shape, tf.float32))
  x = np.random.default_rng(0).normal(size=(3,) + shape).astype(np.float32)
  return model, tf_fn, fn, params, x


def _check(kind):
  model, tf_fn, fn, params, x = _build(kind)
  want = tf_fn(x).numpy()
  out, new_params = jax.jit(fn)(params, x)
  np.testing.assert_allclose(out, want, rtol=RTOL, atol=ATOL)
  assert set(new_params) == set(params)

  # Loops are tf.While (reverse-differentiable) whose bodies are tf.* primitives.
  jaxpr = jax.make_jaxpr(lambda p, x: fn(p, x)[0])(params, x)
  prims = jaxpr_primitives(jaxpr)
  assert "tf.While" in prims and "while" not in prims
  assert non_tf_primitives(jaxpr) == set()

  # grad w.r.t. every weight and the input, vs tf.GradientTape.
  def loss(p, x):
    return jnp.sum(fn(p, x)[0] * jnp.arange(1, want.size + 1).reshape(want.shape) / want.size)

  grads, gx = jax.jit(jax.grad(loss, argnums=(0, 1)))(params, x)
  xt = tf.constant(x)
  weights = [fn.tf_variables[k] for k in params]
  with tf.GradientTape() as tape:
    tape.watch(xt)
    y = tf.reduce_sum(tf_fn(xt) * np.arange(1, want.size + 1).reshape(want.shape) / want.size)
  *tf_grads, tf_gx = tape.gradient(y, weights + [xt])
  for k, g in zip(params, tf_grads):
    np.testing.assert_allclose(grads[k], g.numpy(), rtol=GRAD_TOL, atol=GRAD_TOL, err_msg=k)
  np.testing.assert_allclose(gx, tf_gx.numpy(), rtol=GRAD_TOL, atol=GRAD_TOL)

  # vmap over a batch of single sequences == per-sequence TF results.
  per_seq = jax.jit(jax.vmap(lambda seq: fn(params, seq[None])[0][0]))(x)
  for k in range(x.shape[0]):
    np.testing.assert_allclose(per_seq[k], tf_fn(x[k : k + 1]).numpy()[0], rtol=RTOL, atol=ATOL)
  return fn, params, x


@pytest.mark.parametrize(
  "kind", ["lstm", "lstm_sequences", "gru", "simple_rnn", "bidirectional_lstm"]
)
def test_keras_rnn(kind):
  _check(kind)


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["conv_lstm2d", "stacked"])
def test_keras_rnn_slow(kind):
  _check(kind)


def test_masked_lstm_with_states_and_custom_cell():
  keras.utils.set_random_seed(0)
  x = np.random.default_rng(1).normal(size=(2, 5, 3)).astype(np.float32)
  x[0, 3:] = 0.0  # masked steps

  class SiluCell(keras.layers.Layer):
    state_size = 3

    def build(self, shape):
      self.w = self.add_weight(shape=(3, 3))

    def call(self, inputs, states):
      h = tf.nn.silu(tf.matmul(inputs, self.w) + states[0])  # a custom gradient
      return h, [h]

  inp = keras.Input((5, 3))
  masked = keras.layers.Masking(0.0)(inp)
  out, h, c = keras.layers.LSTM(4, return_state=True)(masked)
  model = keras.Model(inp, [out, h, c, keras.layers.RNN(SiluCell())(inp)])
  tf_fn = tf.function(lambda x: model(x))
  fn, params = tfprims.convert(tf_fn, tf.TensorSpec((None, 5, 3)))
  for got, want in zip(fn(params, x)[0], tf_fn(x)):
    np.testing.assert_allclose(got, want, rtol=RTOL, atol=ATOL)
  grads = jax.grad(lambda p: sum(jnp.sum(o) for o in fn(p, x)[0]))(params)
  with tf.GradientTape() as tape:
    y = tf.add_n([tf.reduce_sum(o) for o in tf_fn(x)])
  tf_grads = tape.gradient(y, [fn.tf_variables[k] for k in params])
  for k, g in zip(params, tf_grads):
    np.testing.assert_allclose(grads[k], g.numpy(), rtol=GRAD_TOL, atol=GRAD_TOL, err_msg=k)


def test_lstm_jaxpr_shows_the_cell_inside_the_loop():
  model, tf_fn, fn, params, x = _build("lstm")
  jaxpr = jax.make_jaxpr(lambda p, x: fn(p, x)[0])(params, x)
  loop = next(e for e in jaxpr.jaxpr.eqns if e.primitive.name == "tf.While")
  assert loop.params["length"] == x.shape[1]  # one iteration per time step
  body = jaxpr_primitives(loop.params["jaxpr"])
  assert {
    "tf.MatMul",
    "tf.Sigmoid",
    "tf.Tanh",
    "tf.TensorListGetItem",
    "tf.TensorListSetItem",
  } <= body


def test_lstm_per_example_gradients_via_vmap_of_grad():
  model, tf_fn, fn, params, x = _build("lstm")
  kernel = next(k for k in params if k.endswith("kernel") and "recurrent" not in k)

  def loss(p, seq):
    return jnp.sum(fn(p, seq[None])[0])

  per_example = jax.vmap(jax.grad(loss), in_axes=(None, 0))(params, x)[kernel]
  for k in range(x.shape[0]):
    with tf.GradientTape() as tape:
      y = tf.reduce_sum(tf_fn(x[k : k + 1]))
    want = tape.gradient(y, fn.tf_variables[kernel]).numpy()
    np.testing.assert_allclose(per_example[k], want, rtol=GRAD_TOL, atol=GRAD_TOL)
