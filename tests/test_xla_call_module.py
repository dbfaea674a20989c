"""jax2tf round trip: JAX -> jax2tf.convert (XlaCallModule) -> tfprims -> JAX.

Values, jit and vmap equal the original JAX function. The module's StableHLO is read
as JAX operations (config ``xla_call_module="read"``, the default): jvp/jacfwd/hessian
are JAX's own; with ``with_gradient=True`` grad/jacrev use jax2tf's gradient function.
Called as one operation (``"opaque"``), forward mode is derived from that gradient
function. Error paths are typed. (tests/test_jax2tf_roundtrip.py: many more functions.)
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import tensorflow as tf
from jax.experimental import jax2tf
from tensorflow.compiler.tf2xla.python import xla as tf2xla

import tfprims
from tfprims.ops import xla
from helpers import jaxpr_primitives

TOL = dict(rtol=2e-5, atol=2e-5)
RNG = np.random.default_rng(0)
X = RNG.normal(size=(4, 3)).astype(np.float32)
PARAMS = {
  "w1": RNG.normal(size=(3, 5)).astype(np.float32),
  "b1": RNG.normal(size=(5,)).astype(np.float32),
  "w2": RNG.normal(size=(5, 2)).astype(np.float32),
}


def mlp(params, x):
  h = jnp.tanh(x @ params["w1"] + params["b1"])
  return jax.nn.log_softmax(h @ params["w2"])


def elementwise(x):
  return jnp.sin(x) * jnp.exp(-x * x) + jax.nn.softplus(x)


def multi(params, x):
  """Several outputs, one of them an integer."""
  y = x @ params["w1"]
  return jnp.sum(y**2), jnp.cos(y), jnp.argmax(y, axis=-1)


def _specs(*args):
  return tuple(
    jax.tree.map(lambda a: tf.TensorSpec(np.shape(a), tf.as_dtype(np.asarray(a).dtype)), a)
    for a in args
  )


def _convert(f, *args, **kwargs):
  tf_fn = tf.function(jax2tf.convert(f, **kwargs), autograph=False)
  return tfprims.convert_functional(tf_fn, *_specs(*args))


def _close(got, want, **tol):
  for g, w in zip(jax.tree.leaves(got), jax.tree.leaves(want), strict=True):
    np.testing.assert_allclose(np.asarray(g), np.asarray(w), **(tol or TOL))


@pytest.fixture
def opaque():
  """XlaCallModule ops called as one operation (the StableHLO is not read)."""
  with tfprims.override_config("xla_call_module", "opaque"):
    yield


@pytest.mark.parametrize("mode", ["read", "opaque"])
@pytest.mark.parametrize(
  "f,args",
  [(mlp, (PARAMS, X)), (elementwise, (X,)), (multi, (PARAMS, X))],
  ids=["mlp", "elementwise", "multi"],
)
def test_values_jit_vmap(f, args, mode):
  with tfprims.override_config("xla_call_module", mode):
    fn = _convert(f, *args)
    names = jaxpr_primitives(jax.make_jaxpr(fn)(*args))
    _values_jit_vmap(fn, f, args)
  if mode == "opaque":
    assert "tf.XlaCallModule" in names
  else:  # the module's operations, as JAX's own
    assert "tf.XlaCallModule" not in names and {"dot_general", "sin"} & names


def _values_jit_vmap(fn, f, args):
  _close(fn(*args), f(*args))
  _close(jax.jit(fn)(*args), f(*args))
  xs = np.stack([X, -X, 2 * X])
  axes = (None,) * (len(args) - 1) + (0,)
  _close(jax.vmap(fn, in_axes=axes)(*args[:-1], xs), jax.vmap(f, in_axes=axes)(*args[:-1], xs))


def test_grad_equals_original():
  fn = _convert(mlp, PARAMS, X)
  loss = lambda f: lambda p, x: jnp.sum(f(p, x)[:, 0] * jnp.arange(4.0))
  want = jax.grad(loss(mlp), argnums=(0, 1))(PARAMS, X)
  _close(jax.grad(loss(fn), argnums=(0, 1))(PARAMS, X), want)
  _close(jax.jit(jax.grad(loss(fn), argnums=(0, 1)))(PARAMS, X), want)
  # per-example gradients: vmap of grad and grad of a vmapped loss
  xs = np.stack([X, X * 0.5])
  _close(
    jax.vmap(jax.grad(loss(fn)), in_axes=(None, 0))(PARAMS, xs),
    jax.vmap(jax.grad(loss(mlp)), in_axes=(None, 0))(PARAMS, xs),
  )
  _close(jax.jacrev(fn)(PARAMS, X), jax.jacrev(mlp)(PARAMS, X))


def test_grad_multiple_outputs_and_elementwise():
  fn = _convert(multi, PARAMS, X)

  def loss(f):
    def scalar(p, x):
      s, c, _ = f(p, x)
      return s + jnp.sum(c * c)

    return scalar

  _close(
    jax.grad(loss(fn), argnums=(0, 1))(PARAMS, X),
    jax.grad(loss(multi), argnums=(0, 1))(PARAMS, X),
    rtol=1e-4,
    atol=1e-4,
  )
  fe = _convert(elementwise, X)
  _close(jax.grad(lambda x: jnp.sum(fe(x)))(X), jax.grad(lambda x: jnp.sum(elementwise(x)))(X))


@pytest.mark.parametrize("mode", ["read", "opaque"])
def test_forward_mode(mode):
  with tfprims.override_config("xla_call_module", mode):
    _forward_mode()


def _forward_mode():
  fn = _convert(mlp, PARAMS, X)
  dx = np.cos(X)
  want = jax.jvp(lambda x: mlp(PARAMS, x), (X,), (dx,))
  _close(jax.jvp(lambda x: fn(PARAMS, x), (X,), (dx,)), want)
  _close(jax.jit(lambda x: jax.jvp(lambda x: fn(PARAMS, x), (x,), (dx,)))(X), want)
  _close(jax.jacfwd(fn, argnums=1)(PARAMS, X), jax.jacfwd(mlp, argnums=1)(PARAMS, X))
  fe = _convert(elementwise, X[0])
  h = lambda f: lambda x: jnp.sum(f(x) ** 2)
  _close(jax.hessian(h(fe))(X[0]), jax.hessian(h(elementwise))(X[0]), rtol=1e-4, atol=1e-4)


def test_second_order_forward_mode_reads_the_module():
  fe = _convert(elementwise, X)
  dx = np.ones_like(X)
  inner = lambda f: lambda x: jax.jvp(f, (x,), (dx,))[1]
  _close(
    jax.jvp(inner(fe), (X,), (dx,)), jax.jvp(inner(elementwise), (X,), (dx,)), rtol=1e-4, atol=1e-4
  )


def test_second_order_forward_mode_raises(opaque):
  fe = _convert(elementwise, X)
  dx = np.ones_like(X)
  inner = lambda x: jax.jvp(fe, (x,), (dx,))[1]
  with pytest.raises(tfprims.TFPrimsError, match="jvp of jvp"):
    jax.jvp(inner, (X,), (dx,))


def test_without_gradient_derivatives_raise():
  fe = _convert(elementwise, X, with_gradient=False)
  _close(fe(X), elementwise(X))
  with pytest.raises(tfprims.PreventGradientError, match="with_gradient"):
    jax.grad(lambda x: jnp.sum(fe(x)))(X)
  with pytest.raises(tfprims.TFPrimsError, match="with_gradient"):
    jax.jvp(fe, (X,), (X,))


def _bare_call(f, x):
  """A tf.function calling tf.raw_ops.XlaCallModule with jax2tf's module, without the
  custom gradient / PreventGradient jax2tf puts around it."""
  graph = (
    tf.function(jax2tf.convert(f, with_gradient=False), autograph=False)
    .get_concrete_function(tf.TensorSpec(x.shape, tf.float32))
    .graph
  )
  op = next(o for o in graph.get_operations() if o.type == "XlaCallModule")
  attrs = {
    k: op.get_attr(k) for k in ("version", "module", "Sout", "Tout", "platforms", "disabled_checks")
  }

  @tf.function(autograph=False)
  def bare(x):
    return tf2xla.call_module([x], **attrs)[0]

  return bare


def test_bare_module_read_has_derivatives():
  x = X[:2, :2]
  f = lambda x: jnp.tanh(x) * 3.0 + 1.0
  fn = tfprims.convert_functional(_bare_call(f, x), tf.TensorSpec(x.shape, tf.float32))
  _close(jax.jvp(fn, (x,), (x,)), jax.jvp(f, (x,), (x,)))
  _close(jax.grad(lambda a: jnp.sum(fn(a)))(x), jax.grad(lambda a: jnp.sum(f(a)))(x))
  _close(
    jax.vmap(jax.grad(lambda a: jnp.sum(fn(a))))(np.stack([x, -x])),
    jax.vmap(jax.grad(lambda a: jnp.sum(f(a))))(np.stack([x, -x])),
  )


def test_bare_module_matches_tf_and_refuses_derivatives(opaque):
  x = X[:2, :2]
  bare = _bare_call(lambda x: jnp.tanh(x) * 3.0 + 1.0, x)
  fn = tfprims.convert_functional(bare, tf.TensorSpec(x.shape, tf.float32))
  _close(fn(x), bare(x).numpy())
  _close(jax.vmap(fn)(np.stack([x, -x])), np.stack([bare(x), bare(-x)]))
  with pytest.raises(xla.NonDifferentiableModuleError, match="with_gradient=True"):
    jax.jvp(fn, (x,), (x,))
  with pytest.raises(xla.NonDifferentiableModuleError, match="reverse-mode"):
    jax.grad(lambda a: jnp.sum(fn(a)))(x)
  wrong = tfprims.convert_functional(bare, tf.TensorSpec((3, 2), tf.float32))
  with pytest.raises(xla.XlaCallModuleError, match="shapes must match"):
    wrong(np.ones((3, 2), np.float32))


def test_polymorphic_shapes_read_at_every_size():
  tf_fn = tf.function(jax2tf.convert(mlp, polymorphic_shapes=[None, "(b, 3)"]), autograph=False)
  fn = tfprims.convert_functional(tf_fn, *_specs(PARAMS), tf.TensorSpec((None, 3), tf.float32))
  for n in (1, 4, 7):
    x = np.resize(X, (n, 3))
    _close(jax.jit(fn)(PARAMS, x), mlp(PARAMS, x))
    _close(
      jax.grad(lambda p: jnp.sum(fn(p, x)))(PARAMS),
      jax.grad(lambda p: jnp.sum(mlp(p, x)))(PARAMS),
      rtol=1e-4,
      atol=1e-4,
    )


def test_polymorphic_shapes_raise(opaque):
  tf_fn = tf.function(jax2tf.convert(elementwise, polymorphic_shapes=["(b, 3)"]), autograph=False)
  with pytest.raises(xla.XlaCallModuleError, match="not static"):
    tfprims.convert_functional(tf_fn, tf.TensorSpec((None, 3), tf.float32))(X)


def test_platforms():
  fe = _convert(elementwise, X, native_serialization_platforms=("cpu", "tpu"))
  _close(fe(X), elementwise(X))  # the platform index argument is passed
  _close(jax.jit(fe)(X), elementwise(X))
  ftpu = _convert(elementwise, X, native_serialization_platforms=("tpu",))
  with pytest.raises(xla.XlaCallModuleError, match="serialized for"):
    ftpu(X)
