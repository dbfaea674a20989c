"""jax2tf round trips: JAX function -> jax2tf.convert (one XlaCallModule op) ->
tf.function -> tfprims. The module's StableHLO is read as JAX operations, so values,
jit, vmap, jvp and grad equal the original function's; with a symbolic batch
dimension the converted function runs at every batch size.
"""

import warnings

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import tensorflow as tf
from jax.experimental import jax2tf

import tfprims
from helpers import jaxpr_primitives
from jax_functions import FUNCTIONS

TOL = dict(rtol=5e-5, atol=5e-5)
# Forward mode through a custom call with no JAX equivalent (LAPACK's QR) raises.
NO_JVP = {"qr"}
# Reverse mode: the original has none (a while loop with a data-dependent trip count),
# or bfloat16 cotangents round differently.
NO_GRAD = {"while_data", "half"}


def _spec(a, batch=False):
  shape = (None,) + np.shape(a)[1:] if batch else np.shape(a)
  return tf.TensorSpec(shape, tf.as_dtype(np.asarray(a).dtype))


def _close(got, want, **tol):
  for g, w in zip(jax.tree.leaves(got), jax.tree.leaves(want), strict=True):
    g, w = np.asarray(g), np.asarray(w)
    if g.dtype.kind == "V" or w.dtype.kind == "V":  # bfloat16
      g, w = g.astype(np.float32), w.astype(np.float32)
    np.testing.assert_allclose(g, w, **(tol or TOL))


def _loss(fn, args, i):
  def loss(v):
    outs = jax.tree.leaves(fn(*args[:i], v, *args[i + 1 :]))
    return sum(
      jnp.sum(jnp.real(o).astype(jnp.float32)) * (k + 1)
      for k, o in enumerate(outs)
      if jnp.issubdtype(o.dtype, jnp.inexact)
    )

  return loss


@pytest.mark.parametrize("name", sorted(FUNCTIONS))
def test_round_trip(name):
  f, args, checks = FUNCTIONS[name]
  tf_fn = tf.function(jax2tf.convert(f), autograph=False)
  fn = tfprims.convert_functional(tf_fn, *[_spec(a) for a in args])
  assert "tf.XlaCallModule" not in jaxpr_primitives(jax.make_jaxpr(fn)(*args))
  want = f(*args)
  tol = dict(rtol=checks["tol"], atol=checks["tol"]) if "tol" in checks else {}
  _close(fn(*args), want, **tol)
  _close(jax.jit(fn)(*args), want, **tol)
  i = next((k for k, a in enumerate(args) if np.asarray(a).dtype.kind == "f"), None)
  if i is None:
    return
  batch = np.stack([args[i], np.cos(args[i])])
  one = lambda g: lambda v: g(*args[:i], v, *args[i + 1 :])
  _close(jax.vmap(one(fn))(batch), jax.vmap(one(f))(batch), **tol)
  floats = [o for o in jax.tree.leaves(want) if jnp.issubdtype(o.dtype, jnp.inexact)]
  if not floats:
    return
  tangent = np.sin(args[i]) + 0.5
  if name not in NO_JVP:
    _close(
      jax.jvp(_loss(fn, args, i), (args[i],), (tangent,)),
      jax.jvp(_loss(f, args, i), (args[i],), (tangent,)),
      rtol=3e-4,
      atol=3e-4,
    )
  if name not in NO_GRAD:
    _close(
      jax.grad(_loss(fn, args, i))(args[i]),
      jax.grad(_loss(f, args, i))(args[i]),
      rtol=3e-4,
      atol=3e-4,
    )


@pytest.mark.parametrize("name", ["mlp", "cnn", "transformer", "flax", "smooth", "sorting"])
def test_symbolic_batch(name):
  f, args, _ = FUNCTIONS[name]
  poly = ["(b, ...)"] + [None] * (len(args) - 1)
  tf_fn = tf.function(jax2tf.convert(f, polymorphic_shapes=poly), autograph=False)
  fn = tfprims.convert_functional(tf_fn, _spec(args[0], batch=True), *[_spec(a) for a in args[1:]])
  jitted = jax.jit(fn)
  for n in (1, 5):
    x = np.resize(args[0], (n,) + np.shape(args[0])[1:])
    _close(jitted(x, *args[1:]), f(x, *args[1:]))
  xs = np.stack([args[0], args[0] * 0.5])
  _close(jax.vmap(lambda x: fn(x, *args[1:]))(xs), jax.vmap(lambda x: f(x, *args[1:]))(xs))


def test_saved_model_round_trip(tmp_path):
  f, args, _ = FUNCTIONS["cnn"]
  module = tf.Module()
  module.f = tf.function(
    jax2tf.convert(f), autograph=False, input_signature=[_spec(a) for a in args]
  )
  tf.saved_model.save(module, str(tmp_path))
  restored = tf.saved_model.load(str(tmp_path))
  fn = tfprims.convert_functional(restored.f, *[_spec(a) for a in args])
  _close(jax.jit(fn)(*args), f(*args))
  loss = lambda g: lambda x: jnp.sum(g(x, args[1]) ** 2)
  _close(jax.grad(loss(fn))(args[0]), jax.grad(loss(f))(args[0]), rtol=3e-4, atol=3e-4)
  _close(
    jax.vmap(jax.grad(loss(fn)))(np.stack([args[0]] * 2)),
    jax.vmap(jax.grad(loss(f)))(np.stack([args[0]] * 2)),
    rtol=3e-4,
    atol=3e-4,
  )


# Functions with kinks, at inputs on them: the derivative there is the original's
# (jax.nn.relu's custom rule gives 0 at 0; lax.max, which it is read back as, splits
# the tie: 0.5) and, with_gradient=True, TF's gradient of the jax2tf function.
_AT_KINKS = np.array([-6.0, -3.0, -1.0, 0.0, 1.0, 3.0, 6.0, 0.5], np.float32)
_OTHER = np.array([-6.0, 0.0, -1.0, 0.0, 2.0, 3.0, 5.0, 0.5], np.float32)
KINKS = {
  "relu": jax.nn.relu,
  "relu6": jax.nn.relu6,
  "hard_sigmoid": jax.nn.hard_sigmoid,
  "relu_in_expression": lambda x: jnp.sqrt(jax.nn.relu(x) + 1.0) * 2.0,
  "abs": jnp.abs,
  "maximum_minimum": lambda x: jnp.maximum(x, _OTHER) + 3.0 * jnp.minimum(x, _OTHER),
  "maximum_zero": lambda x: jnp.maximum(x, 0.0),
  "clip": lambda x: jnp.clip(x, -1.0, 1.0),
  "hard_tanh": jax.nn.hard_tanh,
  "leaky_relu": lambda x: jax.nn.leaky_relu(x, 0.1),
  "where": lambda x: jnp.where(x > 0, x, 0.2 * x) + jnp.where(x >= 1, x * x, -x),
}


def _exact(got, want):
  # rounding apart (a tie split evenly is off by 0.5)
  np.testing.assert_allclose(np.asarray(got), np.asarray(want), rtol=1e-6, atol=1e-7)


@pytest.mark.parametrize("with_gradient", [True, False])
@pytest.mark.parametrize("name", sorted(KINKS))
def test_derivatives_at_kinks(name, with_gradient):
  f, x = KINKS[name], _AT_KINKS
  tf_fn = tf.function(jax2tf.convert(f, with_gradient=with_gradient), autograph=False)
  # with_gradient=False: TF forbids gradients (PreventGradient); JAX's are the reference.
  with (
    tfprims.override_config("raise_on_prevent_gradient", with_gradient),
    warnings.catch_warnings(),
  ):
    warnings.simplefilter("ignore")
    fn = tfprims.convert_functional(tf_fn, _spec(x))
  loss = lambda g: lambda v: jnp.sum(g(v))
  want = jax.grad(loss(f))(x)
  _exact(jax.grad(loss(fn))(x), want)
  _exact(jax.jit(jax.grad(loss(fn)))(x), want)
  _exact(jax.vmap(jax.grad(loss(fn)))(x[None])[0], want)
  t = np.linspace(1.0, 2.0, x.size, dtype=np.float32)
  _exact(jax.jvp(fn, (x,), (t,))[1], jax.jvp(f, (x,), (t,))[1])
  if with_gradient:
    v = tf.constant(x)
    with tf.GradientTape() as tape:
      tape.watch(v)
      y = tf.reduce_sum(tf_fn(v))
    _exact(tape.gradient(y, v).numpy(), want)


# Sorts with NaN of both signs, ±inf, ±0 and ties: the comparators' TOTALORDER
# comparisons are kept (lax.top_k's sort compares raw values: +NaN first, -NaN last).
_NAN_ROW = np.array(
  [np.inf, np.nan, np.copysign(np.nan, -1.0), -np.inf, 3.0, 0.0, -0.0, 1.0, 1.0], np.float32
)
_SORTS = {
  "top_k": lambda x: jax.lax.top_k(x, 5),
  "sort": jnp.sort,
  "argsort": jnp.argsort,
  "sort_two_keys": lambda x: jax.lax.sort((x, x[::-1], jnp.arange(9)), num_keys=2),
}


@pytest.mark.parametrize("name", sorted(_SORTS))
def test_sorts_with_nan_equal_jax(name):
  f = _SORTS[name]
  with warnings.catch_warnings():
    warnings.simplefilter("ignore", DeprecationWarning)  # native_serialization=
    tf_fn = tf.function(jax2tf.convert(f, native_serialization=True), autograph=False)
  fn = tfprims.convert_functional(tf_fn, _spec(_NAN_ROW))
  want = [np.asarray(w) for w in jax.tree.leaves(jax.jit(f)(_NAN_ROW))]
  for got in (fn(_NAN_ROW), jax.jit(fn)(_NAN_ROW)):
    got = [np.asarray(g) for g in jax.tree.leaves(got)]
    assert [(g.dtype, g.tobytes()) for g in got] == [(w.dtype, w.tobytes()) for w in want]
