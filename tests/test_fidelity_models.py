"""Fidelity tier: small real models at a trained network's weight scale, against TF.

Random-init models hide errors: activations shrink layer by layer, a softmax of
near-constant logits is constant, and a wrong gradient drowns in rounding. Here every
weight is redrawn at the scale training leaves it (He-normal kernels, batch-norm
statistics from a real batch, non-trivial affine parameters), inputs are what the
models see in use (pixels in [0, 255) through ``preprocess_input``, padded token ids
with attention masks) and each model is compared with TF on

* the forward pass (eager and ``jax.jit``),
* the gradient of a weighted sum of the outputs with respect to the input and every
  parameter (``jax.jit(jax.grad)`` vs ``tf.GradientTape``),

with errors measured relative to each tensor's scale. The tolerances are those of TF's own
XLA compile (``jit_compile=True``) against TF on these models, with margin (its forward pass
of MobileNetV2 is 2.2e-5 off), and 10x below the input-gradient error of a max-pool gradient
routed to the wrong element of a tied window (1.2e-3). Keras 3 and Keras 2 (tf-keras) layers
are both covered: they lower to different TF ops (e.g. fused batch norm, LSTM kernels).
"""

import functools

import jax
import jax.numpy as jnp
import keras
import numpy as np
import pytest
import tensorflow as tf

import tfprims

# Relative to each tensor's largest magnitude.
FORWARD_RTOL = 5e-5
GRAD_RTOL = 1e-4


def _scale_err(actual, expected):
  actual, expected = np.asarray(actual, np.float64), np.asarray(expected, np.float64)
  assert actual.shape == expected.shape, (actual.shape, expected.shape)
  assert np.isfinite(expected).all()
  scale = float(np.abs(expected).max()) if expected.size else 0.0
  err = float(np.abs(actual - expected).max()) if expected.size else 0.0
  return err, scale


def assert_close(actual, expected, rtol, what, floor=0.0):
  err, scale = _scale_err(actual, expected)
  assert err <= rtol * max(scale, floor, 1e-30), (
    f"{what}: max error {err:.3g} > {rtol:g} * scale {max(scale, floor):.3g}"
  )


def redraw(model, seed):
  """Every weight at a trained network's scale: kernels He-normal (fan-in of the
  kernel's receptive field), biases and betas small, gammas around 1, embeddings
  unit-scale rows, recurrent kernels ~1/sqrt(units)."""
  rng = np.random.default_rng(seed)
  for v in model.weights:
    name, shape = v.name.split("/")[-1].split(":")[0], tuple(v.shape)
    path = v.path if hasattr(v, "path") else v.name
    if "moving_mean" in name or "moving_variance" in name:
      continue  # set from a real batch by calibrate()
    if name in ("gamma", "scale"):
      value = rng.normal(1.0, 0.2, shape)
    elif name in ("beta", "bias") or "bias" in name:
      value = rng.normal(0.0, 0.05, shape)
    elif "embeddings" in name:
      value = rng.normal(0.0, 1.0, shape)
    elif "recurrent" in name:
      value = rng.normal(0.0, 1.0 / np.sqrt(shape[0]), shape)
    elif len(shape) >= 2:
      receptive = int(np.prod(shape[:-2])) if len(shape) > 2 else 1
      fan_in = receptive * (1 if "depthwise" in path else shape[-2])
      value = rng.normal(0.0, np.sqrt(2.0 / fan_in), shape)
    else:
      value = rng.normal(0.0, 0.05, shape)
    v.assign(value.astype(v.dtype if isinstance(v.dtype, str) else v.dtype.name))


def calibrate(model, batch, bn_types):
  """Batch-norm moving statistics from a real batch (one training call, momentum 0)."""
  bns = [l for l in model._flatten_layers() if isinstance(l, bn_types)]
  momenta = [l.momentum for l in bns]
  for l in bns:
    l.momentum = 0.0
  model(batch, training=True)
  for l, m in zip(bns, momenta):
    l.momentum = m


def _tf_grads(tf_fn, inputs, variables, weights):
  xs = [tf.constant(x) for x in inputs]
  keys = sorted(variables)
  with tf.GradientTape() as tape:
    for x in xs:
      if x.dtype.is_floating:
        tape.watch(x)
    for k in keys:  # non-trainable variables (moving statistics) too
      tape.watch(variables[k])
    loss = tf.reduce_sum(tf_fn(*xs) * weights)
  grads = tape.gradient(loss, xs + [variables[k] for k in keys])
  as_np = lambda g, v: (
    np.zeros(v.shape, np.float32) if g is None else tf.convert_to_tensor(g).numpy()
  )
  return (
    [None if g is None else g.numpy() for g in grads[: len(xs)]],
    {k: as_np(g, variables[k]) for k, g in zip(keys, grads[len(xs) :])},
  )


def check_model(tf_fn, inputs, specs, grad_floor=1e-3, no_tf_gradient=()):
  """Forward (eager, jit) and input/param gradients of ``tf_fn`` vs TF. Params whose
  name contains a string of ``no_tf_gradient`` get none from TF (checked) and are not
  compared."""
  fn, params = tfprims.convert(tf_fn, *specs)
  expected = tf_fn(*inputs).numpy()
  err, scale = _scale_err(expected, expected)
  assert scale > 1e-2 and np.std(expected) > 1e-3 * scale, "degenerate model output"
  forward = lambda p, *xs: fn(p, *xs)[0]
  assert_close(forward(params, *inputs), expected, FORWARD_RTOL, "forward (eager)")
  assert_close(jax.jit(forward)(params, *inputs), expected, FORWARD_RTOL, "forward (jit)")

  weights = np.random.default_rng(1).normal(size=expected.shape).astype(np.float32)
  float_args = tuple(i + 1 for i, x in enumerate(inputs) if x.dtype.kind == "f")
  loss = lambda p, *xs: jnp.sum(forward(p, *xs) * weights)
  grads = jax.jit(jax.grad(loss, argnums=(0,) + float_args))(params, *inputs)
  t_inputs, t_params = _tf_grads(tf_fn, inputs, fn.tf_variables, weights)
  # Gradients that vanish up to rounding are compared at grad_floor of the largest.
  largest = max(
    float(np.abs(t).max())
    for t in [*t_params.values(), *(t for t in t_inputs if t is not None)]
    if t.size
  )
  floor = grad_floor * largest
  for i, g in zip(float_args, grads[1:]):
    assert_close(g, t_inputs[i - 1], GRAD_RTOL, f"d/d input {i - 1}", floor)
  for k, t in t_params.items():
    if any(s in k for s in no_tf_gradient):
      assert not t.any(), f"TF gives {k} a gradient"
      continue
    assert_close(grads[0][k], t, GRAD_RTOL, f"d/d {k}", floor)


def _pixels(shape, seed):
  return np.random.default_rng(seed).uniform(0, 255, shape).astype(np.float32)


# --- Keras 3 ------------------------------------------------------------------------------


def _bottleneck(x, filters, stride, name):
  layers = keras.layers
  shortcut = layers.Conv2D(4 * filters, 1, strides=stride, name=f"{name}_0_conv")(x)
  shortcut = layers.BatchNormalization(epsilon=1.001e-5, name=f"{name}_0_bn")(shortcut)
  x = layers.Conv2D(filters, 1, strides=stride, name=f"{name}_1_conv")(x)
  x = layers.BatchNormalization(epsilon=1.001e-5, name=f"{name}_1_bn")(x)
  x = layers.Activation("relu")(x)
  x = layers.Conv2D(filters, 3, padding="same", name=f"{name}_2_conv")(x)
  x = layers.BatchNormalization(epsilon=1.001e-5, name=f"{name}_2_bn")(x)
  x = layers.Activation("relu")(x)
  x = layers.Conv2D(4 * filters, 1, name=f"{name}_3_conv")(x)
  x = layers.BatchNormalization(epsilon=1.001e-5, name=f"{name}_3_bn")(x)
  return layers.Activation("relu")(layers.Add()([shortcut, x]))


def test_resnet_stem_and_bottlenecks_keras3():
  """ResNet50's stem (7x7/2 conv, 3x3/2 max pool over ReLU outputs: tied zeros in
  most windows) and two bottleneck blocks, ``preprocess_input`` inside the graph."""
  layers = keras.layers
  keras.utils.set_random_seed(0)
  inp = keras.Input((64, 64, 3))
  x = layers.Lambda(keras.applications.resnet50.preprocess_input)(inp)
  x = layers.ZeroPadding2D(3)(x)
  x = layers.Conv2D(16, 7, strides=2, name="conv1_conv")(x)
  x = layers.BatchNormalization(epsilon=1.001e-5, name="conv1_bn")(x)
  x = layers.Activation("relu")(x)
  x = layers.ZeroPadding2D(1)(x)
  x = layers.MaxPooling2D(3, strides=2)(x)
  x = _bottleneck(x, 8, 1, "conv2_block1")
  x = _bottleneck(x, 16, 2, "conv3_block1")
  x = layers.GlobalAveragePooling2D()(x)
  model = keras.Model(inp, layers.Dense(10)(x))
  redraw(model, seed=0)
  calibrate(model, _pixels((8, 64, 64, 3), seed=3), keras.layers.BatchNormalization)
  tf_fn = tf.function(lambda x: model(x, training=False))
  check_model(tf_fn, [_pixels((2, 64, 64, 3), seed=4)], [tf.TensorSpec([2, 64, 64, 3])])


def test_mobilenet_v2_keras3():
  """Depthwise convolutions, ReLU6, inverted residuals (keras.applications)."""
  keras.utils.set_random_seed(0)
  model = keras.applications.MobileNetV2(
    weights=None, input_shape=(32, 32, 3), classes=10, classifier_activation=None, alpha=0.35
  )
  redraw(model, seed=1)
  calibrate(
    model,
    keras.applications.mobilenet_v2.preprocess_input(_pixels((8, 32, 32, 3), 5)),
    keras.layers.BatchNormalization,
  )
  tf_fn = tf.function(
    lambda x: model(keras.applications.mobilenet_v2.preprocess_input(x), training=False)
  )
  check_model(tf_fn, [_pixels((2, 32, 32, 3), seed=6)], [tf.TensorSpec([2, 32, 32, 3])])


def test_transformer_encoder_with_padding_mask_keras3():
  """Embedding, multi-head attention with a padding mask (masked logits pushed to
  the dtype's lowest value before the softmax), layer norm, GELU feed-forward."""
  layers = keras.layers
  keras.utils.set_random_seed(0)
  tokens = keras.Input((12,), dtype="int32")
  x = layers.Embedding(50, 32, mask_zero=True)(tokens)
  attn = layers.MultiHeadAttention(num_heads=4, key_dim=8)(x, x)
  x = layers.LayerNormalization()(x + attn)
  ffn = layers.Dense(32)(layers.Dense(64, activation="gelu")(x))
  x = layers.LayerNormalization()(x + ffn)
  model = keras.Model(tokens, layers.Dense(5)(x))
  redraw(model, seed=2)
  ids = np.random.default_rng(7).integers(1, 50, (3, 12)).astype(np.int32)
  ids[0, 8:] = 0  # padding: masked keys
  ids[1, 3:] = 0
  tf_fn = tf.function(lambda t: model(t, training=False))
  check_model(tf_fn, [ids], [tf.TensorSpec([3, 12], tf.int32)])


def test_masked_lstm_and_gru_keras3():
  layers = keras.layers
  keras.utils.set_random_seed(0)
  inp = keras.Input((9, 6))
  x = layers.Masking(mask_value=0.0)(inp)
  x = layers.LSTM(8, return_sequences=True)(x)
  x = layers.GRU(7)(x)
  model = keras.Model(inp, layers.Dense(4)(x))
  redraw(model, seed=3)
  x = np.random.default_rng(8).normal(size=(3, 9, 6)).astype(np.float32)
  x[0, 6:] = 0.0  # masked steps
  tf_fn = tf.function(lambda x: model(x, training=False))
  check_model(tf_fn, [x], [tf.TensorSpec([3, 9, 6])])


# --- Keras 2 (tf-keras) -------------------------------------------------------------------


@functools.lru_cache(maxsize=None)
def _tf_keras():
  return pytest.importorskip("tf_keras")


def test_cnn_with_fused_batch_norm_and_pooling_keras2():
  """tf-keras lowers BatchNormalization to FusedBatchNormV3 and pooling to the V1 ops."""
  k2 = _tf_keras()
  layers = k2.layers
  k2.utils.set_random_seed(0)
  model = k2.Sequential(
    [
      k2.Input((32, 32, 3)),
      layers.Rescaling(1 / 127.5, offset=-1),
      layers.Conv2D(16, 3, padding="same"),
      layers.BatchNormalization(),
      layers.ReLU(),
      layers.MaxPooling2D(2),
      layers.SeparableConv2D(24, 3, padding="same"),
      layers.BatchNormalization(),
      layers.ReLU(),
      layers.AveragePooling2D(2),
      layers.Conv2DTranspose(8, 3, strides=2, padding="same"),
      layers.GlobalMaxPooling2D(),
      layers.Dense(6),
    ]
  )
  redraw(model, seed=4)
  calibrate(model, _pixels((8, 32, 32, 3), seed=9), k2.layers.BatchNormalization)
  tf_fn = tf.function(lambda x: model(x, training=False))
  # TF's gradient of FusedBatchNormV3 gives the moving statistics none in inference
  # mode; ours are the mathematical derivatives (docs/semantics/nn.md).
  check_model(
    tf_fn,
    [_pixels((2, 32, 32, 3), seed=10)],
    [tf.TensorSpec([2, 32, 32, 3])],
    no_tf_gradient=("moving_mean", "moving_variance"),
  )


def test_lstm_and_attention_keras2():
  """tf-keras' LSTM (a While loop of the TF ops, not Keras 3's) and dot-product
  attention with a causal mask."""
  k2 = _tf_keras()
  layers = k2.layers
  k2.utils.set_random_seed(0)
  inp = k2.Input((10, 5))
  seq = layers.LSTM(8, return_sequences=True)(inp)
  att = layers.Attention(use_scale=True)([seq, seq], use_causal_mask=True)
  out = layers.Dense(3)(layers.GlobalAveragePooling1D()(layers.Concatenate()([seq, att])))
  model = k2.Model(inp, out)
  redraw(model, seed=5)
  x = np.random.default_rng(11).normal(size=(2, 10, 5)).astype(np.float32)
  tf_fn = tf.function(lambda x: model(x, training=False))
  check_model(tf_fn, [x], [tf.TensorSpec([2, 10, 5])])
