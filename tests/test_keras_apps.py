"""Real models end to end: Keras applications (weights=None), BatchNormalization in
inference and training mode, Dropout in training mode, Conv2DTranspose with
output_padding, and a Sonnet MLP. For each: outputs, jax.grad vs tf.GradientTape,
jax.vmap and jax.jit. float32, tolerance 1e-4 relative to each output's scale.

The Keras applications are heavy (compiling a ResNet50 gradient takes a while on
2 cores): they are marked ``slow`` and run with ``pytest -m slow``.
"""

import functools

import jax
import jax.numpy as jnp
import keras
import numpy as np
import pytest
import tensorflow as tf

import tfprims
from helpers import non_tf_primitives

RTOL = 1e-4


def assert_close(actual, expected, rtol=RTOL, what="", floor=0.0):
  """|actual - expected| <= rtol * max(max|expected|, floor): relative to the output's
  scale (``floor`` for tensors that are zero up to rounding, e.g. the gradient of a
  bias followed by batch normalization)."""
  actual, expected = np.asarray(actual, np.float64), np.asarray(expected, np.float64)
  assert actual.shape == expected.shape, (what, actual.shape, expected.shape)
  scale = max(float(np.abs(expected).max()) if expected.size else 0.0, floor, 1e-30)
  err = float(np.abs(actual - expected).max()) if expected.size else 0.0
  assert err <= rtol * scale, f"{what}: max error {err:.3g} > {rtol} * scale {scale:.3g}"


def _inputs(shape, seed=0):
  return np.random.default_rng(seed).normal(size=shape).astype(np.float32)


def _tf_grads(tf_fn, x, variables, weights, training=None):
  xt = tf.constant(x)
  keys = sorted(variables)
  with tf.GradientTape() as tape:
    tape.watch(xt)
    for k in keys:  # non-trainable variables (moving statistics) too
      tape.watch(variables[k])
    out = tf_fn(xt) if training is None else tf_fn(xt, training)
    loss = tf.reduce_sum(out * weights)
  grads = tape.gradient(loss, [xt] + [variables[k] for k in keys])
  as_np = lambda g, v: (
    np.zeros(v.shape, v.dtype.as_numpy_dtype) if g is None else tf.convert_to_tensor(g).numpy()
  )
  return grads[0].numpy(), {k: as_np(g, variables[k]) for k, g in zip(keys, grads[1:])}


def check_grads(fn, params, tf_fn, x, rtol=RTOL, jit=True):
  """jax.grad (w.r.t. input and every param) vs tf.GradientTape."""
  out = fn(params, x)[0]
  weights = _inputs(out.shape, seed=1)
  loss = lambda p, x: jnp.sum(fn(p, x)[0] * weights)
  grad = jax.grad(loss, argnums=(0, 1))
  g_params, g_x = (jax.jit(grad) if jit else grad)(params, x)
  t_x, t_params = _tf_grads(tf_fn, x, fn.tf_variables, weights)
  # Gradients that vanish up to rounding (a bias followed by batch normalization: float32
  # sums of cancelling terms, whose last bits follow the order of the additions) are
  # compared at 1e-2 of the largest one.
  floor = 1e-2 * max(float(np.abs(t).max()) for t in [t_x, *t_params.values()] if t.size)
  assert_close(g_x, t_x, rtol, "d/dx", floor)
  for k, t in t_params.items():
    assert_close(g_params[k], t, rtol, f"d/d{k}", floor)


def check_vmap(fn, params, tf_fn, x, rtol=RTOL):
  """jax.vmap over examples (each a batch of one) vs the TF batch."""
  per_example = jax.vmap(lambda xi: fn(params, xi[None])[0][0])(x)
  assert_close(per_example, tf_fn(x).numpy(), rtol, "vmap")


# --- Keras applications (slow) ----------------------------------------------------------

APPS = {
  "MobileNetV2": 32,
  "ResNet50": 32,
  "EfficientNetB0": 32,
  "InceptionV3": 75,  # the smallest input it accepts
  "ConvNeXtTiny": 32,
  "MobileNetV3Small": 32,  # cheap extra: hard-swish, squeeze-excite, Rescaling
}


def _calibrate(model, x):
  """weights=None models shrink activations layer after layer (outputs ~1e-12); move
  each BatchNormalization's statistics halfway to those of a real batch (momentum
  0.5 for one training call). Outputs get a healthy scale (~1) and stay
  well-conditioned: pure batch statistics (momentum 0) of the 1x1 late feature maps
  make some channels' variances tiny, and then TF's own jit_compile=True run
  differs from TF by more than 1e-4."""
  bns = [l for l in model._flatten_layers() if isinstance(l, keras.layers.BatchNormalization)]
  momenta = [l.momentum for l in bns]
  for l in bns:
    l.momentum = 0.5
  model(x, training=True)
  for l, m in zip(bns, momenta):
    l.momentum = m


def _app(name):
  size = APPS[name]
  keras.utils.set_random_seed(0)
  kwargs = dict(weights=None, input_shape=(size, size, 3), classes=10, classifier_activation=None)
  model = getattr(keras.applications, name)(**kwargs)
  _calibrate(model, _inputs((16, size, size, 3), seed=3) * 50 + 100)
  tf_fn = tf.function(lambda x: model(x, training=False))
  fn, params = tfprims.convert(tf_fn, tf.TensorSpec([None, size, size, 3]))
  x = (_inputs((2, size, size, 3)) * 50 + 100).astype(np.float32)  # pixel-like values
  return model, tf_fn, fn, params, x


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(APPS))
def test_application(name):
  """Only tf.* primitives; jit outputs, vmap over examples, and jit(grad) w.r.t. the
  input and every param (moving statistics included) vs TF."""
  _, tf_fn, fn, params, x = _app(name)
  ref = tf_fn(x).numpy()
  assert float(np.abs(ref).max()) > 1e-3, "degenerate model output"
  jaxpr = jax.make_jaxpr(lambda p, x: fn(p, x)[0])(params, x)
  assert non_tf_primitives(jaxpr) == set()
  assert_close(jax.jit(lambda p, x: fn(p, x)[0])(params, x), ref, what=name)
  check_vmap(fn, params, tf_fn, x)
  check_grads(fn, params, tf_fn, x)


@pytest.mark.slow
def test_application_training_mode_updates_moving_statistics():
  # Batch statistics of tiny feature maps (1x1 at 32x32 inputs, batch 2) are
  # ill-conditioned: there TF's own jit_compile=True run differs from TF by 3%.
  # At 64x64, batch 4 both TF-vs-TF(XLA) and tfprims-vs-TF are ~4e-5.
  keras.utils.set_random_seed(0)
  model = keras.applications.MobileNetV2(
    weights=None, input_shape=(64, 64, 3), classes=10, classifier_activation=None
  )
  _calibrate(model, _inputs((16, 64, 64, 3), seed=3) * 50 + 100)
  x = (_inputs((4, 64, 64, 3), seed=7) * 50 + 100).astype(np.float32)
  train = tf.function(lambda x: model(x, training=True))
  fn, params = tfprims.convert(train, tf.TensorSpec([None, 64, 64, 3]))
  out, new = jax.jit(lambda p, x: fn(p, x))(params, x)
  ref = train(x).numpy()
  assert_close(out, ref, what="training-mode output")
  moving = [k for k in params if "moving_" in k]
  assert moving
  for k in moving:
    assert not fn.param_specs[k].trainable
    # A batch mean is accurate relative to the activations' spread, not to itself.
    spread = float(np.sqrt(np.max(new[k.replace("moving_mean", "moving_variance")])))
    assert_close(new[k], fn.tf_variables[k].numpy(), RTOL, k, floor=spread)


def test_mobilenet_v2_jaxpr_and_outputs_fast():
  """A quick structural check of one application in the default run."""
  keras.utils.set_random_seed(0)
  model = keras.applications.MobileNetV2(
    weights=None, input_shape=(32, 32, 3), classes=4, classifier_activation=None, alpha=0.35
  )
  tf_fn = tf.function(lambda x: model(x, training=False))
  fn, params = tfprims.convert(tf_fn, tf.TensorSpec([None, 32, 32, 3]))
  x = _inputs((2, 32, 32, 3))
  text = str(jax.make_jaxpr(lambda p, x: fn(p, x)[0])(params, x))
  for name in (
    "tf.Conv2D",
    "tf.DepthwiseConv2dNative",
    "tf.Rsqrt",
    "tf.Relu6",
    "tf.Mean",
    "tf.MatMul",
  ):
    assert name in text, name
  assert_close(jax.jit(lambda p, x: fn(p, x)[0])(params, x), tf_fn(x).numpy())


# --- BatchNormalization ------------------------------------------------------------------


@functools.lru_cache(maxsize=None)
def _bn_model():
  keras.utils.set_random_seed(1)
  model = keras.Sequential(
    [
      keras.Input((6, 6, 3)),
      keras.layers.Conv2D(4, 3, padding="same"),
      keras.layers.BatchNormalization(momentum=0.9, epsilon=1e-3),
      keras.layers.ReLU(),
      keras.layers.Flatten(),
      keras.layers.Dense(5),
      keras.layers.BatchNormalization(),
    ]
  )
  # Non-trivial moving statistics and affine params.
  rng = np.random.default_rng(2)
  for layer in model.layers:
    if isinstance(layer, keras.layers.BatchNormalization):
      n = layer.gamma.shape[0]
      layer.gamma.assign(rng.uniform(0.5, 1.5, n).astype(np.float32))
      layer.beta.assign(rng.normal(size=n).astype(np.float32))
      layer.moving_mean.assign(rng.normal(size=n).astype(np.float32))
      layer.moving_variance.assign(rng.uniform(0.5, 2, n).astype(np.float32))
  return model


@pytest.mark.parametrize("training", [False, True], ids=["inference", "training"])
def test_batch_norm_outputs_grads_vmap_jit(training):
  model = _bn_model()
  tf_fn = tf.function(lambda x: model(x, training=training))
  fn, params = tfprims.convert(tf_fn, tf.TensorSpec([None, 6, 6, 3]))
  x = _inputs((4, 6, 6, 3))
  snapshot = {k: v.numpy() for k, v in fn.tf_variables.items()}
  out, new = fn(params, x)
  ref = tf_fn(x).numpy()  # updates the moving statistics in training mode
  assert_close(out, ref, what="eager")
  assert_close(jax.jit(lambda p, x: fn(p, x)[0])(params, x), ref, what="jit")
  for k, v in fn.tf_variables.items():
    # Moving statistics: exactly TF's update (float32 rounding aside).
    np.testing.assert_allclose(new[k], v.numpy(), rtol=1e-6, atol=1e-7, err_msg=k)
    v.assign(snapshot[k])
  if training:
    assert any(not np.array_equal(new[k], params[k]) for k in params if "moving" in k)
    # Each batch normalizes with its own statistics: vmap over batches.
    xs = np.stack([x, _inputs((4, 6, 6, 3), seed=5)])
    batched = jax.vmap(lambda xb: fn(params, xb)[0])(xs)
    for i in range(2):
      assert_close(batched[i], tf_fn(xs[i]).numpy(), what="vmap")
      for k, v in fn.tf_variables.items():
        v.assign(snapshot[k])
  else:
    assert all(np.array_equal(new[k], params[k]) for k in params)
    check_vmap(fn, params, tf_fn, x)
  check_grads(fn, params, tf_fn, x, rtol=2e-4)
  for k, v in fn.tf_variables.items():
    v.assign(snapshot[k])


# --- Dropout --------------------------------------------------------------------------------


def test_keras_dropout_training_mode():
  """Keras 3 draws dropout masks with stateless ops seeded from a seed-generator
  variable, which the call advances: the state is a (non-trainable) param."""
  keras.utils.set_random_seed(0)
  layer = keras.layers.Dropout(0.25)
  tf_fn = tf.function(lambda x: layer(x, training=True))
  fn, params = tfprims.convert(tf_fn, tf.TensorSpec([None, 400]))
  (seed_key,) = [k for k in params if "seed" in k]
  assert not fn.param_specs[seed_key].trainable
  x = _inputs((3, 400)) + 5.0  # no exact zeros in x
  out, new = fn(params, x)
  tf_fn(x)
  np.testing.assert_array_equal(new[seed_key], fn.tf_variables[seed_key].numpy())
  kept = np.asarray(out) != 0
  assert abs(kept.mean() - 0.75) < 0.03
  np.testing.assert_allclose(np.asarray(out)[kept], x[kept] / 0.75, rtol=1e-6)
  # Same state, same mask; the next state gives a new mask.
  np.testing.assert_array_equal(fn(params, x)[0], out)
  assert not np.array_equal(fn(new, x)[0], out)
  # jit, grad (the mask scaled by 1/(1-rate)), vmap over seed states.
  np.testing.assert_array_equal(jax.jit(lambda p, x: fn(p, x)[0])(params, x), out)
  g = jax.grad(lambda x: jnp.sum(fn(params, x)[0]))(x)
  np.testing.assert_allclose(g, kept / 0.75, rtol=1e-6)
  seeds = np.stack([params[seed_key], new[seed_key]])
  masks = jax.vmap(lambda s: fn(dict(params, **{seed_key: s}), x)[0])(seeds)
  np.testing.assert_array_equal(masks[0], out)
  np.testing.assert_array_equal(masks[1], fn(new, x)[0])


def test_tf_nn_dropout_needs_rng():
  """Stateful TF dropout (tf.nn.dropout without a seed) draws from rng=."""
  f = tf.function(lambda x: tf.nn.dropout(x, rate=0.5))
  fn = tfprims.convert_functional(f, tf.TensorSpec([1000]))
  x = np.ones(1000, np.float32)
  with pytest.raises(tfprims.MissingRngError):
    fn(x)
  a = fn(x, rng=jax.random.key(0))
  np.testing.assert_array_equal(a, fn(x, rng=jax.random.key(0)))
  assert not np.array_equal(a, fn(x, rng=jax.random.key(1)))
  assert set(np.unique(np.asarray(a))) == {0.0, 2.0}
  assert abs(float(jnp.mean(a == 0)) - 0.5) < 0.05
  g = jax.grad(lambda x: jnp.sum(fn(x, rng=jax.random.key(0))))(x)
  np.testing.assert_array_equal(g, a)
  keys = jax.random.split(jax.random.key(2), 3)
  batched = jax.vmap(lambda k: fn(x, rng=k))(keys)
  np.testing.assert_array_equal(batched[1], fn(x, rng=keys[1]))


# --- Conv2DTranspose with output_padding ----------------------------------------------


@pytest.mark.parametrize("padding", ["same", "valid"])
def test_conv2d_transpose_with_output_padding(padding):
  keras.utils.set_random_seed(4)
  model = keras.Sequential(
    [
      keras.Input((5, 5, 3)),
      keras.layers.Conv2DTranspose(
        4, 3, strides=2, padding=padding, output_padding=1, activation="tanh"
      ),
      keras.layers.Conv2DTranspose(
        2, (2, 3), strides=(3, 2), padding=padding, output_padding=(1, 0)
      ),
    ]
  )
  tf_fn = tf.function(lambda x: model(x))
  fn, params = tfprims.convert(tf_fn, tf.TensorSpec([None, 5, 5, 3]))
  x = _inputs((2, 5, 5, 3))
  ref = tf_fn(x).numpy()
  assert "tf.Conv2DBackpropInput" in str(jax.make_jaxpr(lambda p: fn(p, x)[0])(params))
  assert_close(fn(params, x)[0], ref, what="eager")
  assert_close(jax.jit(lambda p, x: fn(p, x)[0])(params, x), ref, what="jit")
  check_vmap(fn, params, tf_fn, x)
  check_grads(fn, params, tf_fn, x)


# --- Sonnet MLP ------------------------------------------------------------------------------


def _sonnet_or_module_mlp():
  """A dm-sonnet MLP when sonnet is installed, else the same MLP as a tf.Module."""
  try:
    import sonnet as snt
  except ImportError:
    snt = None
  tf.random.set_seed(0)
  if snt is not None:
    mlp = snt.nets.MLP([16, 8, 3], activation=tf.nn.gelu)
    mlp(tf.zeros([1, 6]))  # creates the variables
    return mlp, "sonnet"

  class MLP(tf.Module):
    def __init__(self, sizes, n_in):
      super().__init__()
      self.layers = []
      for i, n in enumerate(sizes):
        w = tf.Variable(
          tf.random.truncated_normal([n_in, n], stddev=1 / np.sqrt(n_in)), name=f"linear_{i}/w"
        )
        b = tf.Variable(tf.zeros([n]), name=f"linear_{i}/b")
        self.layers.append((w, b))
        n_in = n

    def __call__(self, x):
      for i, (w, b) in enumerate(self.layers):
        x = tf.matmul(x, w) + b
        if i < len(self.layers) - 1:
          x = tf.nn.gelu(x)
      return x

  return MLP([16, 8, 3], 6), "tf.Module"


def test_sonnet_mlp():
  mlp, kind = _sonnet_or_module_mlp()
  tf_fn = tf.function(lambda x: mlp(x))
  fn, params = tfprims.convert(tf_fn, tf.TensorSpec([None, 6]))
  if kind == "sonnet":
    assert set(params) == {f"mlp/linear_{i}/{p}" for i in range(3) for p in "wb"}
  assert all(s.trainable for s in fn.param_specs.values())
  x = _inputs((5, 6))
  ref = tf_fn(x).numpy()
  assert_close(fn(params, x)[0], ref, what="eager")
  assert_close(jax.jit(lambda p, x: fn(p, x)[0])(params, x), ref, what="jit")
  check_vmap(fn, params, tf_fn, x)
  check_grads(fn, params, tf_fn, x)
  assert non_tf_primitives(jax.make_jaxpr(lambda p: fn(p, x)[0])(params)) == set()
