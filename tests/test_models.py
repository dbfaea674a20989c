"""Keras models end to end: only tf.* primitives, and every transform matches TF."""

import functools
import re

import jax
import jax.numpy as jnp
import keras
import numpy as np
import pytest
import tensorflow as tf

import tfprims
from helpers import non_tf_primitives

RTOL, ATOL = 1e-5, 1e-5


@functools.lru_cache(maxsize=None)
def _model(kind):
  keras.utils.set_random_seed(0)
  if kind == "mlp":
    model = keras.Sequential(
      [
        keras.Input((8,)),
        keras.layers.Dense(16, activation="relu"),
        keras.layers.Dense(16, activation="tanh"),
        keras.layers.Dense(4, activation="softmax"),
      ]
    )
    shape = (8,)
  else:
    model = keras.Sequential(
      [
        keras.Input((10, 10, 3)),
        keras.layers.Conv2D(4, 3, padding="same", activation="relu"),
        keras.layers.MaxPooling2D(2),
        keras.layers.Conv2D(6, 3, strides=2, padding="valid", activation="relu"),
        keras.layers.Flatten(),
        keras.layers.Dense(5),
      ]
    )
    shape = (10, 10, 3)
  tf_fn = tf.function(lambda x: model(x))
  fn, params = tfprims.convert(tf_fn, tf.TensorSpec((None,) + shape, tf.float32))
  return model, tf_fn, fn, params, shape


def _inputs(shape, batch=3, seed=0):
  return np.random.default_rng(seed).normal(size=(batch,) + shape).astype(np.float32)


MODELS = ["mlp", "cnn"]


@pytest.mark.parametrize("kind", MODELS)
def test_jaxpr_has_only_tf_primitives(kind):
  _, _, fn, params, shape = _model(kind)
  jaxpr = jax.make_jaxpr(lambda p, x: fn(p, x)[0])(params, _inputs(shape))
  assert non_tf_primitives(jaxpr) == set()
  text = str(jaxpr)
  assert "tf.MatMul" in text and "tf.BiasAdd" in text
  if kind == "cnn":
    assert re.search(r"tf\.Conv2D\[[^\]]*padding=SAME", text)
    assert "tf.MaxPool" in text


@pytest.mark.parametrize("kind", MODELS)
def test_outputs_eager_and_jit_match_tf(kind):
  _, tf_fn, fn, params, shape = _model(kind)
  x = _inputs(shape)
  ref = tf_fn(x).numpy()
  np.testing.assert_allclose(fn(params, x)[0], ref, rtol=RTOL, atol=ATOL)
  jitted = jax.jit(lambda p, x: fn(p, x)[0])
  np.testing.assert_allclose(jitted(params, x), ref, rtol=RTOL, atol=ATOL)


@pytest.mark.parametrize("kind", MODELS)
def test_grad_matches_gradient_tape(kind):
  model, tf_fn, fn, params, shape = _model(kind)
  x = _inputs(shape)
  weights = np.random.default_rng(1).normal(size=tf_fn(x).shape).astype(np.float32)

  def loss(p, x):
    return jnp.sum(fn(p, x)[0] * weights)

  g_params, g_x = jax.grad(loss, argnums=(0, 1))(params, x)
  xt = tf.constant(x)
  with tf.GradientTape() as tape:
    tape.watch(xt)
    tf_loss = tf.reduce_sum(tf_fn(xt) * weights)
  variables = fn.tf_variables
  keys = sorted(variables)
  grads = tape.gradient(tf_loss, [xt] + [variables[k] for k in keys])
  np.testing.assert_allclose(g_x, grads[0], rtol=1e-4, atol=1e-5)
  for k, g in zip(keys, grads[1:]):
    np.testing.assert_allclose(g_params[k], g, rtol=1e-4, atol=1e-5, err_msg=k)


@pytest.mark.parametrize("kind", MODELS)
def test_vmap_matches_per_example_tf_calls(kind):
  _, tf_fn, fn, params, shape = _model(kind)
  xs = _inputs(shape, batch=4)[:, None]  # 4 examples, each a batch of one
  out = jax.vmap(lambda x: fn(params, x)[0])(xs)
  ref = np.stack([tf_fn(x).numpy() for x in xs])
  np.testing.assert_allclose(out, ref, rtol=RTOL, atol=ATOL)
  # vmap over the params too (an ensemble of one model): in_axes on a param.
  first = sorted(params)[0]
  stacked = dict(params, **{first: np.stack([params[first], 2 * params[first]])})
  out2 = jax.vmap(
    lambda p: fn(p, xs[0])[0], in_axes=({k: (0 if k == first else None) for k in params},)
  )(stacked)
  np.testing.assert_allclose(out2[0], ref[0], rtol=RTOL, atol=ATOL)


@pytest.mark.parametrize("kind", MODELS)
def test_jvp_matches_forward_accumulator(kind):
  _, tf_fn, fn, params, shape = _model(kind)
  x = _inputs(shape)
  t = _inputs(shape, seed=5)
  _, tangent = jax.jvp(lambda x: fn(params, x)[0], (x,), (t,))
  xt = tf.constant(x)
  with tf.autodiff.ForwardAccumulator(xt, tf.constant(t)) as acc:
    y = tf_fn(xt)
  np.testing.assert_allclose(tangent, acc.jvp(y), rtol=1e-4, atol=1e-5)


def _hlo_computations(lowered) -> str:
  """Optimized HLO without metadata, debug tables and instruction names."""
  text = re.sub(r", metadata=\{[^}]*\}", "", lowered.compile().as_text())
  blocks = [
    b
    for b in text.split("\n\n")
    if not b.startswith("HloModule")
    and not re.match(r"(FileNames|FunctionNames|FileLocations|StackFrames)\n", b)
  ]
  text = "\n\n".join(blocks)
  # Instruction names come from source metadata: number them by first appearance.
  names = {}
  return re.sub(
    r"%?\b[A-Za-z_][\w\-]*\.\d+\b|%[\w.\-]+",
    lambda m: names.setdefault(m.group(0).lstrip("%"), f"v{len(names)}"),
    text,
  )


# The same models written by hand in jnp, with TF's semantics where jax.nn differs:
# TF's Relu keeps -0.0, its float32 Softmax (oneDNN's) takes the max from the lowest
# float over the non-NaN logits, exp(NaN) as inf and multiplies by the reciprocal of the
# sum, and its CPU MaxPool never lets NaN win (values are clamped below at the lowest
# float).
def _relu(x):
  return jnp.where(x < 0, jnp.zeros((), x.dtype), x)


def _softmax(x):
  lowest = np.finfo(np.float32).min
  shifted = x - jnp.max(jnp.where(x >= lowest, x, lowest), axis=-1, keepdims=True)
  e = jnp.exp(jnp.where(shifted >= shifted, shifted, jnp.inf))
  return e * (1 / jnp.sum(e, axis=-1, keepdims=True))


def _jnp_mlp(p, x, names):
  k1, b1, k2, b2, k3, b3 = (p[n] for n in names)
  h = _relu(x @ k1 + b1)
  h = jnp.tanh(h @ k2 + b2)
  return _softmax(h @ k3 + b3)


def _jnp_cnn(p, x, names):
  k1, b1, k2, b2, k3, b3 = (p[n] for n in names)
  dn = ("NHWC", "HWIO", "NHWC")
  h = jax.lax.conv_general_dilated(x, k1, (1, 1), "SAME", dimension_numbers=dn)
  h = _relu(h + b1)
  lowest = np.finfo(np.float32).min
  h = jnp.where(h >= lowest, h, lowest)
  # TF's max pool: a later element wins only if strictly greater (-0.0 before +0.0 wins).
  h = jax.lax.reduce_window(
    h, -jnp.inf, lambda a, b: jax.lax.select(b > a, b, a), (1, 2, 2, 1), (1, 2, 2, 1), "VALID"
  )
  h = jax.lax.conv_general_dilated(h, k2, (2, 2), "VALID", dimension_numbers=dn)
  h = _relu(h + b2)
  h = h.reshape(h.shape[0], -1)
  return h @ k3 + b3


@pytest.mark.parametrize("kind, reference", [("mlp", _jnp_mlp), ("cnn", _jnp_cnn)])
def test_jit_compiles_to_the_same_hlo_as_hand_written_jnp(kind, reference):
  _, tf_fn, fn, params, shape = _model(kind)
  x = _inputs(shape)
  # Keras creates kernel before bias, layer by layer: the variable order of the model.
  names = list(fn.param_specs)
  np.testing.assert_allclose(reference(params, x, names), tf_fn(x), rtol=RTOL, atol=ATOL)
  # The default lowerings (per-platform fast lowerings compile other HLO on purpose:
  # tests/test_platform_lowerings.py compares their values).
  with tfprims.override_config("fast_lowerings", False):
    ours = _hlo_computations(jax.jit(lambda p, x: fn(p, x)[0]).lower(params, x))
    theirs = _hlo_computations(jax.jit(lambda p, x: reference(p, x, names)).lower(params, x))
  assert ours == theirs


@pytest.mark.parametrize("kind", MODELS)
@pytest.mark.parametrize("batch", ["b", 3])
def test_jax_export_round_trip(kind, batch):
  """jax.export with a symbolic batch dimension (shape polymorphism) and with a
  fixed one: the deserialized program matches TF for several batch sizes."""
  _, tf_fn, fn, params, shape = _model(kind)
  dims = jax.export.symbolic_shape(batch) if isinstance(batch, str) else (batch,)
  arg = jax.ShapeDtypeStruct(tuple(dims) + shape, np.float32)
  # (Keras Flatten in the CNN reshapes to a size computed from Shape(x): the symbolic
  # batch is folded through that arithmetic.)
  exported = jax.export.export(jax.jit(lambda p, x: fn(p, x)[0]))(params, arg)
  restored = jax.export.deserialize(exported.serialize())
  for n in (1, 4) if isinstance(batch, str) else (batch,):
    x = _inputs(shape, batch=n, seed=n)
    np.testing.assert_allclose(restored.call(params, x), tf_fn(x).numpy(), rtol=RTOL, atol=ATOL)
