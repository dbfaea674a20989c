"""tf.custom_gradient: reverse mode uses TF's gradient function, forward mode the true
derivative; jvp, grad, jacfwd, hessian, vmap and jit all run. PreventGradient raises."""

import warnings

import jax
import jax.numpy as jnp
import keras
import numpy as np
import pytest
import tensorflow as tf

import tfprims
from helpers import jaxpr_primitives

X = np.array([[0.5, -1.0, 2.0], [0.1, 0.2, -3.0]], np.float32)
TOL = 1e-5


def _convert(f, *args):
  """Converts with an unknown leading (batch) dimension."""
  specs = [tf.TensorSpec((None,) + np.shape(a)[1:], tf.as_dtype(np.asarray(a).dtype)) for a in args]
  return tfprims.convert_functional(f, *specs)


def _tf_grad(f, x):
  xt = tf.constant(x)
  with tf.GradientTape() as tape:
    tape.watch(xt)
    y = tf.reduce_sum(f(xt))
  return tape.gradient(y, xt).numpy()


@tf.custom_gradient
def doubled_softplus(x):
  """softplus whose custom gradient is twice the true one (so the two differ)."""
  e = tf.exp(x)  # an intermediate captured by the gradient function

  def grad(dy):
    return dy * 2.0 * (1.0 - 1.0 / (1.0 + e))

  return tf.math.log1p(e), grad


@tf.function(autograph=False)
def mixed(x):
  return tf.reduce_sum(tf.nn.silu(x) * doubled_softplus(x * 0.5), axis=-1)


def _true_mixed(x):
  return jnp.sum(jax.nn.silu(x) * jnp.log1p(jnp.exp(x * 0.5)), axis=-1)


def test_grad_uses_tf_gradient_function_and_jvp_the_true_derivative():
  fn = _convert(mixed, X)
  np.testing.assert_allclose(fn(X), mixed(X), rtol=TOL, atol=TOL)
  loss = lambda a: jnp.sum(fn(a))
  want = _tf_grad(mixed, X)
  np.testing.assert_allclose(jax.grad(loss)(X), want, rtol=TOL, atol=TOL)
  np.testing.assert_allclose(jax.jit(jax.grad(loss))(X), want, rtol=TOL, atol=TOL)
  # The custom gradient is deliberately not the true derivative...
  true_grad = jax.grad(lambda a: jnp.sum(_true_mixed(a)))(X)
  assert not np.allclose(want, true_grad, atol=1e-3)
  # ...and forward mode follows the forward graph's own derivative.
  t = np.ones_like(X)
  _, tangent = jax.jvp(fn, (X,), (t,))
  np.testing.assert_allclose(tangent, jax.jvp(_true_mixed, (X,), (t,))[1], rtol=TOL, atol=TOL)
  np.testing.assert_allclose(jax.jacfwd(fn)(X), jax.jacfwd(_true_mixed)(X), rtol=TOL, atol=TOL)


def test_grad_jaxpr_is_tf_named():
  fn = _convert(mixed, X)
  jaxpr = jax.make_jaxpr(jax.grad(lambda a: jnp.sum(fn(a))))(X)
  prims = jaxpr_primitives(jaxpr)
  assert "tf.CustomGradient" in prims
  # TF's gradient functions (swish's and ours) show up as TF ops in the backward pass.
  assert {"tf.Sigmoid", "tf.Square", "tf.Exp", "tf.RealDiv"} <= prims


def _tf_hessian(f, x):
  xt = tf.constant(x)
  with tf.GradientTape() as outer:
    outer.watch(xt)
    with tf.GradientTape() as inner:
      inner.watch(xt)
      y = f(xt[None])[0]
    g = inner.gradient(y, xt)
  return outer.jacobian(g, xt).numpy()


def test_second_derivatives_match_tf_nested_tapes():
  fn = _convert(mixed, X)
  x = X[0]
  loss = lambda a: fn(a[None])[0]
  # Reverse over reverse uses TF's gradient function at both levels, like nested tapes.
  np.testing.assert_allclose(
    jax.jacrev(jax.jacrev(loss))(x), _tf_hessian(mixed, x), rtol=1e-4, atol=1e-4
  )
  # hessian (forward over reverse) differentiates TF's gradient function in forward
  # mode, where tangents are the true derivative: with an exact custom gradient (silu)
  # it matches TF too.
  silu = tf.function(lambda x: tf.reduce_sum(tf.nn.silu(x) * x, axis=-1), autograph=False)
  sfn = _convert(silu, X)
  np.testing.assert_allclose(
    jax.hessian(lambda a: sfn(a[None])[0])(x), _tf_hessian(silu, x), rtol=1e-4, atol=1e-4
  )
  assert np.all(np.isfinite(jax.hessian(loss)(x)))


def test_per_example_gradients_both_orders_of_vmap_and_grad():
  fn = _convert(mixed, X)
  want = _tf_grad(mixed, X)
  per_example = jax.vmap(jax.grad(lambda a: jnp.sum(fn(a[None]))))(X)
  np.testing.assert_allclose(per_example, want, rtol=TOL, atol=TOL)
  of_vmap = jax.grad(lambda a: jnp.sum(jax.vmap(lambda r: fn(r[None])[0])(a)))(X)
  np.testing.assert_allclose(of_vmap, want, rtol=TOL, atol=TOL)
  # vmap over params too: a batch of scales, unbatched input.
  scales = np.array([0.5, 1.0, 2.0], np.float32)
  g = jax.vmap(jax.grad(lambda s: jnp.sum(fn(X * s))))(scales)
  for k, s in enumerate(scales):
    np.testing.assert_allclose(g[k], np.sum(_tf_grad(mixed, X * s) * X), rtol=1e-4, atol=1e-4)


def _swish_mlp(depth=10, width=4):
  keras.utils.set_random_seed(0)
  layers = [keras.Input((3,))]
  layers += [keras.layers.Dense(width, activation="silu") for _ in range(depth)]
  layers += [keras.layers.Dense(1)]
  return keras.Sequential(layers)


def test_keras_model_with_ten_swish_activations():
  model = _swish_mlp()
  tf_fn = tf.function(lambda x: model(x))
  fn, params = tfprims.convert(tf_fn, tf.TensorSpec((None, 3)))
  jaxpr = jax.make_jaxpr(lambda p, x: fn(p, x)[0])(params, X)
  assert sum(e.primitive.name == "tf.CustomGradient" for e in jaxpr.jaxpr.eqns) == 10
  np.testing.assert_allclose(fn(params, X)[0], tf_fn(X), rtol=TOL, atol=TOL)

  def loss(p, x):
    return jnp.sum(fn(p, x)[0])

  grads = jax.jit(jax.grad(loss))(params, X)
  with tf.GradientTape() as tape:
    y = tf.reduce_sum(tf_fn(X))
  names = list(params)
  tf_grads = tape.gradient(y, [fn.tf_variables[k] for k in names])
  for k, g in zip(names, tf_grads):
    np.testing.assert_allclose(grads[k], g.numpy(), rtol=1e-4, atol=1e-5, err_msg=k)
  # forward mode, jacfwd and hessian w.r.t. the input all run (and agree with jvp of
  # the same computation written with jax.nn.silu).
  x = X[:1]
  jf = jax.jacfwd(lambda a: fn(params, a)[0])(x)
  jr = jax.jacrev(lambda a: fn(params, a)[0])(x)
  np.testing.assert_allclose(jf, jr, rtol=1e-4, atol=1e-5)  # silu's custom grad is exact
  h = jax.hessian(lambda a: loss(params, a))(x)
  assert h.shape == (1, 3, 1, 3) and np.all(np.isfinite(h))
  np.testing.assert_allclose(h.reshape(3, 3), h.reshape(3, 3).T, rtol=1e-3, atol=1e-4)


def test_custom_gradient_with_variables():
  w = tf.Variable([1.5, -0.5, 2.0], name="w")

  @tf.custom_gradient
  def scaled(x):
    y = x * w

    def grad(dy, variables):
      return dy * w * 3.0, [tf.reduce_sum(dy * x, axis=0) * 0.5]

    return y, grad

  f = tf.function(lambda x: tf.sin(scaled(x)), autograph=False)
  fn, params = tfprims.convert(f, tf.TensorSpec((None, 3)))
  np.testing.assert_allclose(fn(params, X)[0], f(X), rtol=TOL, atol=TOL)
  gp, gx = jax.grad(lambda p, x: jnp.sum(fn(p, x)[0]), argnums=(0, 1))(params, X)
  xt = tf.constant(X)
  with tf.GradientTape() as tape:
    tape.watch(xt)
    y = tf.reduce_sum(f(xt))
  want_x, want_w = tape.gradient(y, [xt, w])
  np.testing.assert_allclose(gx, want_x.numpy(), rtol=TOL, atol=TOL)
  np.testing.assert_allclose(gp["w"], want_w.numpy(), rtol=TOL, atol=TOL)


def test_custom_gradient_with_several_inputs_and_outputs():
  @tf.custom_gradient
  def two(a, b):
    def grad(da, db):
      return da * b + db, da * a * 10.0

    return [a * b, a + b], grad

  @tf.function(autograph=False)
  def f(x):
    p, s = two(x[0], x[1])
    return p * s

  fn = _convert(f, X)
  np.testing.assert_allclose(fn(X), f(X), rtol=TOL, atol=TOL)
  np.testing.assert_allclose(
    jax.grad(lambda a: jnp.sum(fn(a)))(X), _tf_grad(f, X), rtol=TOL, atol=TOL
  )


def test_custom_gradient_inside_a_loop():
  @tf.function(autograph=False)
  def f(x):
    return tf.while_loop(
      lambda i, a: i < 3, lambda i, a: (i + 1, doubled_softplus(a) - 0.5), [0, x]
    )[1]

  fn = _convert(f, X)
  np.testing.assert_allclose(fn(X), f(X), rtol=TOL, atol=TOL)
  np.testing.assert_allclose(
    jax.grad(lambda a: jnp.sum(fn(a)))(X), _tf_grad(f, X), rtol=1e-4, atol=1e-5
  )


def test_unregistered_gradient_function_falls_back_to_autodiff():
  @tf.function(autograph=False)
  def f(x):
    return doubled_softplus(x)

  cf = f.get_concrete_function(tf.TensorSpec((2, 3)))
  gd = cf.graph.as_graph_def()
  for node in gd.node:
    if node.op == "IdentityN":
      node.attr["_gradient_op_type"].s = b"NotRegistered-1"
  fn = tfprims.convert_graph_def(gd, [cf.inputs[0].name], [cf.outputs[0].name])
  with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    g = jax.grad(lambda a: jnp.sum(fn(a)[0]))(X)
  assert any("not in TF's gradient registry" in str(w.message) for w in caught)
  np.testing.assert_allclose(g, jax.nn.sigmoid(X), rtol=TOL, atol=TOL)


def test_gradient_function_with_unsupported_op_fails_only_when_differentiated():
  @tf.custom_gradient
  def odd(x):
    def grad(dy):
      return dy * tf.strings.to_number(tf.strings.as_string(x))

    return x * 2.0, grad

  fn = _convert(tf.function(lambda x: odd(x), autograph=False), X)
  np.testing.assert_allclose(fn(X), X * 2.0)
  np.testing.assert_allclose(jax.jvp(fn, (X,), (X,))[1], X * 2.0)
  with pytest.raises(tfprims.CustomGradientError, match="AsString"):
    jax.grad(lambda a: jnp.sum(fn(a)))(X)


def test_prevent_gradient_raises_on_differentiation():
  @tf.function(autograph=False)
  def f(x):
    return tf.raw_ops.PreventGradient(input=tf.sin(x), message="no grads here") * 2.0

  fn = _convert(f, X)
  np.testing.assert_allclose(fn(X), f(X), rtol=TOL)
  with pytest.raises(tfprims.PreventGradientError, match="no grads here"):
    jax.grad(lambda a: jnp.sum(fn(a)))(X)
  with pytest.raises(tfprims.TFPrimsError):
    jax.jvp(fn, (X,), (X,))
  # Not differentiating through it is fine.
  assert jax.grad(lambda a, b: jnp.sum(fn(b)) + jnp.sum(a))(X, X).shape == X.shape


def test_stop_gradient_matches_tf():
  @tf.function(autograph=False)
  def f(x):
    return tf.stop_gradient(tf.sin(x)) * x + doubled_softplus(tf.stop_gradient(x))

  fn = _convert(f, X)
  np.testing.assert_allclose(
    jax.grad(lambda a: jnp.sum(fn(a)))(X), _tf_grad(f, X), rtol=TOL, atol=TOL
  )
