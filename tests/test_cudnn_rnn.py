"""cuDNN RNN ops (tfprims/ops/nn/cudnn_rnn.py): Keras 2-style graphs calling CudnnRNNV3
(TF has no CPU kernel, so they cannot run in TF here) converted and compared with Keras'
LSTM/GRU layers computed on CPU from the same weights: unidirectional and bidirectional,
two layers, sequence lengths (masks), jax.grad against TF's gradient of the Keras layers,
vmap; the params layout ops' round trips; unsupported modes raise typed errors."""

import jax
import jax.numpy as jnp
import keras
import numpy as np
import pytest
import tensorflow as tf

import tfprims
from tfprims import errors
from helpers import jaxpr_primitives
from tfprims.core import get_op

TOL = dict(rtol=2e-4, atol=2e-5)
B, T, N, H = 3, 5, 4, 3
LENGTHS = np.array([5, 2, 4], np.int32)


def _rand(*shape, seed=0, scale=1.0):
  return (np.random.default_rng(seed).normal(size=shape) * scale).astype(np.float32)


def _mask():
  return np.arange(T)[None, :] < LENGTHS[:, None]


def _cells(layer):
  """The LSTM/GRU cells of a (possibly Bidirectional) Keras layer, forward first."""
  if isinstance(layer, keras.layers.Bidirectional):
    return [layer.forward_layer.cell, layer.backward_layer.cell]
  return [layer.cell]


def _keras2_params(cells, mode):
  """The params blob as Keras 2's cuDNN path builds it, with TF ops: per cell the
  kernel's and recurrent kernel's gate blocks transposed and flattened, then the biases
  (LSTM: zero input biases, Keras' bias as the recurrent ones; GRU: Keras' input and
  recurrent biases). GRU gates are swapped from Keras' (z, r, h) to cuDNN's (r, z, h)."""
  weights, biases = [], []
  for cell in cells:
    g = 4 if mode == "lstm" else 3
    w = tf.split(cell.kernel, g, axis=1) + tf.split(cell.recurrent_kernel, g, axis=1)
    if mode == "lstm":
      b = tf.split(tf.concat([tf.zeros_like(cell.bias), cell.bias], 0), 2 * g)
    else:
      b = tf.split(tf.reshape(cell.bias, [-1]), 2 * g)
      w[0], w[1], w[3], w[4] = w[1], w[0], w[4], w[3]
      b[0], b[1], b[3], b[4] = b[1], b[0], b[4], b[3]
    weights += [tf.reshape(tf.transpose(m), [-1]) for m in w]
    biases += b
  return tf.concat(weights + biases, 0)


def _build(mode, bidirectional, layers):
  rnn = keras.layers.LSTM if mode == "lstm" else keras.layers.GRU
  out = []
  for k in range(layers):
    layer = rnn(
      H, return_sequences=True, return_state=True, seed=k, bias_initializer="random_normal"
    )
    if bidirectional:
      layer = keras.layers.Bidirectional(layer)
    layer.build((B, T, N if k == 0 else H * (1 + bidirectional)))
    out.append(layer)
  return out


def _keras_forward(keras_layers, x, mask):
  """Keras' CPU computation: (sequence output, final h per layer and direction)."""
  hs, seq = [], x
  for layer in keras_layers:
    res = layer(seq, mask=mask)
    seq = res[0]
    states = res[1:]  # (h[, c]) per direction
    step = len(states) // len(_cells(layer))
    hs += [states[i * step] for i in range(len(_cells(layer)))]
  return seq, tf.stack(hs)


def _tf_graph(keras_layers, mode, bidirectional, time_major=False):
  """A Keras 2-style graph: params built in the graph, one CudnnRNNV3 for all layers."""
  cells = [c for layer in keras_layers for c in _cells(layer)]

  @tf.function
  def fn(x, lengths):
    batch = tf.shape(x)[0]
    zeros = tf.zeros((len(cells), batch, H))
    out, h, c, _, _ = tf.raw_ops.CudnnRNNV3(
      input=tf.transpose(x, [1, 0, 2]) if time_major else x,
      input_h=zeros,
      input_c=zeros,
      params=_keras2_params(cells, mode),
      sequence_lengths=lengths,
      rnn_mode=mode,
      direction="bidirectional" if bidirectional else "unidirectional",
      is_training=True,
      time_major=time_major,
    )
    return (tf.transpose(out, [1, 0, 2]) if time_major else out), h

  return fn


CASES = [
  ("lstm", False, 1),
  ("gru", False, 1),
  ("lstm", True, 2),
  ("gru", True, 2),
  ("lstm", False, 2),
]


@pytest.mark.parametrize("mode,bidirectional,layers", CASES)
def test_keras_graph_matches_keras_layers(mode, bidirectional, layers):
  keras_layers = _build(mode, bidirectional, layers)
  tf_fn = _tf_graph(keras_layers, mode, bidirectional, time_major=layers == 2)
  fn, params = tfprims.convert(
    tf_fn, tf.TensorSpec((None, T, N), tf.float32), tf.TensorSpec((None,), tf.int32)
  )
  x = _rand(B, T, N, seed=1)
  mask = _mask()
  out, h = jax.jit(fn)(params, x, LENGTHS)[0]
  want_out, want_h = _keras_forward(keras_layers, x, mask)
  np.testing.assert_allclose(np.asarray(out)[mask], want_out.numpy()[mask], **TOL)
  np.testing.assert_allclose(h, want_h.numpy(), **TOL)
  assert not np.any(np.asarray(out)[~mask])  # cuDNN: zeros past each sequence's length

  # jax.grad (params and x) == TF's gradient of the Keras layers on the valid steps
  ct = _rand(B, T, H * (1 + bidirectional), seed=2) * mask[:, :, None]
  ct_h = _rand(*want_h.shape, seed=3)
  loss = lambda p, x: (
    jnp.sum(fn(p, x, LENGTHS)[0][0] * ct) + jnp.sum(fn(p, x, LENGTHS)[0][1] * ct_h)
  )
  grads, gx = jax.grad(loss, argnums=(0, 1))(params, x)
  xt = tf.constant(x)
  variables = [fn.tf_variables[k] for k in params]
  with tf.GradientTape() as tape:
    tape.watch(xt)
    o, hh = _keras_forward(keras_layers, xt, mask)
    y = tf.reduce_sum(o * ct) + tf.reduce_sum(hh * ct_h)
  *tf_grads, tf_gx = tape.gradient(y, variables + [xt])
  for k, g in zip(params, tf_grads):
    np.testing.assert_allclose(grads[k], g.numpy(), err_msg=k, rtol=1e-3, atol=1e-4)
  np.testing.assert_allclose(gx, tf_gx.numpy(), rtol=1e-3, atol=1e-4)
  jaxpr = jax.make_jaxpr(jax.grad(loss))(params, x)
  assert {"tf.CudnnRNNV3", "tf.CudnnRNNBackpropV3"} <= jaxpr_primitives(jaxpr)

  # vmap over single sequences == the batched call
  per_seq = jax.vmap(lambda s, n: fn(params, s[None], n[None])[0][0][0])(x, LENGTHS)
  np.testing.assert_allclose(per_seq, out, **TOL)


@pytest.mark.parametrize("mode", ["lstm", "gru", "rnn_tanh", "rnn_relu"])
@pytest.mark.parametrize("direction", ["unidirectional", "bidirectional"])
def test_params_layout_round_trip(mode, direction):
  attrs = dict(rnn_mode=mode, input_mode="linear_input", direction=direction)
  static = dict(num_layers=2, num_units=H, input_size=N)
  size = int(get_op("CudnnRNNParamsSize")(S=np.dtype("int32"), num_proj=0, **static, **attrs))
  g = {"lstm": 4, "gru": 3}.get(mode, 1)
  d = 2 if direction == "bidirectional" else 1
  assert size == d * g * (H * N + H * H + 2 * H) + d * g * (H * d * H + H * H + 2 * H)
  p = _rand(size, seed=4)
  n = 2 * d * 2 * g
  for v2 in (False, True):
    counts = dict(num_params_weights=n, num_params_biases=n) if v2 else dict(num_params=n)
    extra = dict(num_proj=0) if v2 else {}
    suffix = "V2" if v2 else ""
    parts = get_op("CudnnRNNParamsToCanonical" + suffix)(p, **static, **counts, **attrs, **extra)
    assert parts[0].shape == (H, N) and parts[n].shape == (H,)
    back = get_op("CudnnRNNCanonicalToParams" + suffix)(
      *parts, **static, **counts, **attrs, **extra
    )
    np.testing.assert_array_equal(back, p)


def test_unsupported_modes_raise_typed_errors():
  x, h = _rand(2, 1, H), _rand(1, 1, H)
  p = np.zeros((4 * (H * H + H * H + 2 * H),), np.float32)
  op = get_op("CudnnRNNV3")
  base = dict(rnn_mode="lstm", direction="unidirectional", time_major=True)
  with pytest.raises(errors.ConversionError, match="skip_input"):
    op(x, h, h, p, np.array([2], np.int32), input_mode="skip_input", num_proj=0, **base)
  with pytest.raises(errors.ConversionError, match="num_proj"):
    op(x, h, h, p, np.array([2], np.int32), input_mode="linear_input", num_proj=2, **base)
