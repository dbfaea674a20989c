"""Real programs with the space/batch and gradient-graph ops, converted and compared
with TF: dilated (atrous) convolutions, which TF writes as SpaceToBatchND -> Conv2D
-> BatchToSpaceND, in outputs, ``jax.grad`` vs ``tf.GradientTape`` and ``jax.vmap``
vs per-example calls; the jitted program they compile to; and a ``tf.GradientTape``
train step of a small Keras transformer (BroadcastGradientArgs and friends), whose
loss and updated variables match TF's."""

import jax
import jax.numpy as jnp
import keras
import numpy as np
import pytest
import tensorflow as tf

import tfprims
from helpers import jaxpr_primitives, non_tf_primitives


def _rand(shape, seed=0):
  return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


def _graph_op_types(concrete) -> set:
  graph_def = concrete.graph.as_graph_def()
  ops = {n.op for n in graph_def.node}
  for f in graph_def.library.function:
    ops |= {n.op for n in f.node_def}
  return ops


def _dilated_conv1d():
  keras.utils.set_random_seed(1)
  return keras.Sequential(
    [
      keras.Input((16, 3)),
      keras.layers.Conv1D(4, 3, padding="causal", dilation_rate=2, activation="tanh"),
      keras.layers.Conv1D(5, 2, padding="causal", dilation_rate=4),
    ]
  )


def _dilated_conv2d():
  keras.utils.set_random_seed(2)
  return keras.Sequential(
    [
      keras.Input((9, 10, 3)),
      keras.layers.Conv2D(4, 3, padding="same", dilation_rate=2, activation="relu"),
      keras.layers.Conv2D(2, (2, 3), padding="valid", dilation_rate=(3, 2)),
    ]
  )


MODELS = {
  "conv1d_causal": (_dilated_conv1d, (2, 16, 3)),
  "conv2d": (_dilated_conv2d, (2, 9, 10, 3)),
}


@pytest.mark.parametrize("name", sorted(MODELS))
def test_dilated_convolution_outputs_and_tf_names(name):
  build, shape = MODELS[name]
  model = build()
  tf_fn = tf.function(model)
  x = _rand(shape)
  assert {"SpaceToBatchND", "BatchToSpaceND"} <= _graph_op_types(
    tf_fn.get_concrete_function(tf.TensorSpec(shape))
  )
  fn, params = tfprims.convert(tf_fn, x)
  np.testing.assert_allclose(np.asarray(fn(params, x)[0]), model(x).numpy(), rtol=1e-5, atol=1e-5)
  jaxpr = jax.make_jaxpr(lambda p, x: fn(p, x)[0])(params, x)
  assert {"tf.SpaceToBatchND", "tf.BatchToSpaceND", "tf.Conv2D"} <= jaxpr_primitives(jaxpr)
  assert not non_tf_primitives(jaxpr)


@pytest.mark.parametrize("name", sorted(MODELS))
def test_dilated_convolution_grad_matches_gradient_tape(name):
  build, shape = MODELS[name]
  model = build()
  tf_fn = tf.function(model)
  x = _rand(shape, seed=3)
  fn, params = tfprims.convert(tf_fn, x)
  ct = _rand(model(x).shape, seed=4)

  def loss(p, x):
    return jnp.sum(fn(p, x)[0] * ct)

  g_params, g_x = jax.grad(loss, argnums=(0, 1))(params, x)
  xt = tf.constant(x)
  with tf.GradientTape() as tape:
    tape.watch(xt)
    y = tf.reduce_sum(model(xt) * ct)
  tf_g = tape.gradient(y, [xt] + list(model.trainable_variables))
  np.testing.assert_allclose(np.asarray(g_x), tf_g[0].numpy(), rtol=1e-4, atol=1e-5)
  by_path = {v.path: g for v, g in zip(model.trainable_variables, tf_g[1:])}
  assert set(by_path) == set(g_params)
  for k, g in g_params.items():
    np.testing.assert_allclose(np.asarray(g), by_path[k].numpy(), rtol=1e-4, atol=1e-5, err_msg=k)
  # The cotangent flows back through the transposes, still TF ops.
  grad_jaxpr = jax.make_jaxpr(jax.grad(loss, argnums=1))(params, x)
  names = jaxpr_primitives(grad_jaxpr)
  assert {"tf.SpaceToBatchND", "tf.BatchToSpaceND", "tf.Conv2DBackpropInput"} <= names


@pytest.mark.parametrize("name", sorted(MODELS))
def test_dilated_convolution_vmap_matches_per_example(name):
  build, shape = MODELS[name]
  model = build()
  x = _rand(shape)
  fn, params = tfprims.convert(tf.function(model), x)
  xs = _rand((3,) + shape, seed=5)
  # Over the inputs, and over the params too (a stack of three models).
  out = jax.vmap(lambda x: fn(params, x)[0])(xs)
  for i in range(3):
    np.testing.assert_allclose(np.asarray(out[i]), model(xs[i]).numpy(), rtol=1e-5, atol=1e-5)
  stacked = {k: np.stack([np.asarray(v) * s for s in (1.0, 0.5, -1.0)]) for k, v in params.items()}
  out = jax.vmap(lambda p, x: fn(p, x)[0])(stacked, xs)
  for i in range(3):
    ref = fn({k: v[i] for k, v in stacked.items()}, xs[i])[0]
    np.testing.assert_allclose(np.asarray(out[i]), np.asarray(ref), rtol=1e-5, atol=1e-5)
  jaxpr = jax.make_jaxpr(jax.vmap(lambda x: fn(params, x)[0]))(xs)
  assert {"tf.SpaceToBatchND", "tf.BatchToSpaceND"} <= jaxpr_primitives(jaxpr)


def test_atrous_conv2d_function():
  w = _rand((3, 3, 3, 4), seed=6)

  @tf.function
  def atrous(x):
    return tf.nn.atrous_conv2d(x, w, rate=2, padding="SAME")

  x = _rand((2, 11, 9, 3), seed=7)
  fn = tfprims.convert_functional(atrous, x)
  np.testing.assert_allclose(np.asarray(fn(x)), atrous(x).numpy(), rtol=1e-5, atol=1e-5)
  xt = tf.constant(x)
  with tf.GradientTape() as tape:
    tape.watch(xt)
    y = tf.reduce_sum(tf.sin(atrous(xt)))
  np.testing.assert_allclose(
    np.asarray(jax.grad(lambda x: jnp.sum(jnp.sin(fn(x))))(x)),
    tape.gradient(y, xt).numpy(),
    rtol=1e-4,
    atol=1e-5,
  )


def test_dilated_convolution_jit_program():
  """What the jitted program is: one XLA convolution per layer with undilated windows,
  between pads and layout copies (XLA does not fold SpaceToBatchND -> conv ->
  BatchToSpaceND back into a dilated convolution; docs/semantics/array.md), and no
  gathers or scatters."""
  model = _dilated_conv1d()
  x = _rand((2, 16, 3))
  fn, params = tfprims.convert(tf.function(model), x)
  hlo = jax.jit(lambda p, x: fn(p, x)[0]).lower(params, x).compile().as_text()
  convs = [line for line in hlo.splitlines() if " convolution(" in line]
  assert len(convs) == 2, convs
  assert " gather(" not in hlo and " scatter(" not in hlo


# --- a GradientTape train step of a small Keras transformer ----------------------------------


def _transformer():
  keras.utils.set_random_seed(0)
  inp = keras.Input((6, 8))
  h = keras.layers.MultiHeadAttention(num_heads=2, key_dim=4)(inp, inp)
  h = keras.layers.LayerNormalization()(h + inp)
  h = keras.layers.Dense(16, activation="relu")(h)
  out = keras.layers.Dense(8)(h)
  return keras.Model(inp, out)


def test_transformer_gradient_tape_train_step_matches_tf():
  model = _transformer()
  lr = 0.05

  @tf.function
  def train_step(x, y):
    with tf.GradientTape() as tape:
      pred = model(x, training=True)
      loss = tf.reduce_mean(tf.square(pred - y))
    grads = tape.gradient(loss, model.trainable_variables)
    for v, g in zip(model.trainable_variables, grads):
      v.assign_sub(lr * g)
    return loss

  x, y = _rand((3, 6, 8), seed=10), _rand((3, 6, 8), seed=11)
  spec = tf.TensorSpec((3, 6, 8))
  assert "BroadcastGradientArgs" in _graph_op_types(train_step.get_concrete_function(spec, spec))
  fn, params = tfprims.convert(train_step, x, y)
  initial = {k: np.array(v) for k, v in params.items()}
  variables = fn.tf_variables
  assert set(variables) == set(params)

  def reset():
    for k, v in variables.items():
      v.assign(initial[k])

  # One step, eagerly: the loss and every updated variable as TF's step.
  loss, new = fn(params, x, y)
  tf_loss = train_step(x, y)
  np.testing.assert_allclose(float(loss), float(tf_loss), rtol=1e-6)
  moved = 0
  for k, v in variables.items():
    np.testing.assert_allclose(np.asarray(new[k]), v.numpy(), rtol=1e-5, atol=1e-7, err_msg=k)
    moved += not np.allclose(initial[k], v.numpy())
  assert moved >= len(variables) - 1  # every variable trains (a bias may stay put)

  # Three jitted steps from the same start, against TF's three steps.
  reset()
  step = jax.jit(fn)
  p = initial
  for i in range(3):
    loss, p = step(p, x, y)
    tf_loss = train_step(x, y)
    np.testing.assert_allclose(float(loss), float(tf_loss), rtol=1e-5, err_msg=f"step {i}")
  for k, v in variables.items():
    np.testing.assert_allclose(np.asarray(p[k]), v.numpy(), rtol=1e-4, atol=1e-6, err_msg=k)

  # The shape arithmetic of TF's gradients (BroadcastGradientArgs...) is folded at trace
  # time: the jaxpr holds the math only, as TF ops.
  jaxpr = jax.make_jaxpr(lambda p: fn(p, x, y))(initial)
  names = jaxpr_primitives(jaxpr)
  assert "tf.BroadcastGradientArgs" not in names and "tf.Shape" not in names
  assert not non_tf_primitives(jaxpr)
  reset()
