"""The Xla* ops in real graphs: Keras' slice_update (XlaDynamicUpdateSlice) and the
tf2xla python wrappers (``tensorflow.compiler.tf2xla.python.xla``) inside
tf.functions, converted and compared with TF run under jit_compile: values, grad
(against an equivalent differentiable TF program where TF registers no gradient)
and vmap; the recognised and general reducer paths; typed errors for the ops that
only exist inside TF-XLA clusters."""

import jax
import jax.numpy as jnp
import keras
import numpy as np
import pytest
import tensorflow as tf
from tensorflow.compiler.tf2xla.ops import gen_xla_ops
from tensorflow.compiler.tf2xla.python import xla as tfxla

import tfprims
from helpers import jaxpr_primitives
from tfprims.core import get_op

RNG = np.random.default_rng(0)
TOL = dict(rtol=2e-5, atol=2e-5)


def _ops(tf_fn, *args):
  cf = tf.function(tf_fn).get_concrete_function(*args)
  return {n.op for n in cf.graph.as_graph_def().node}


def _jit_tf(tf_fn, *args):
  return tf.function(tf_fn, jit_compile=True)(*args)


# --- keras.ops.slice_update: XlaDynamicUpdateSlice ----------------------------------------

X = RNG.normal(size=(4, 5)).astype(np.float32)
U = RNG.normal(size=(2, 2)).astype(np.float32)


def keras_update(x, u):
  return tf.tanh(keras.ops.slice_update(x, (1, 2), u)) * 2.0


def tf_update(x, u):
  """The same program with ops TF differentiates."""
  idx = np.stack(np.meshgrid(np.arange(1, 3), np.arange(2, 4), indexing="ij"), -1)
  return tf.tanh(tf.tensor_scatter_nd_update(x, idx, u)) * 2.0


def test_keras_slice_update_values_grad_vmap():
  assert "XlaDynamicUpdateSlice" in _ops(keras_update, X, U)
  f = tfprims.convert_functional(keras_update, X, U)
  np.testing.assert_allclose(f(X, U), keras_update(X, U), **TOL)
  np.testing.assert_allclose(jax.jit(f)(X, U), _jit_tf(keras_update, X, U), **TOL)

  loss = lambda x, u: jnp.sum(f(x, u) ** 2)
  gx, gu = jax.grad(loss, argnums=(0, 1))(X, U)
  xt, ut = tf.constant(X), tf.constant(U)
  with tf.GradientTape() as tape:
    tape.watch([xt, ut])
    y = tf.reduce_sum(tf_update(xt, ut) ** 2)
  ex, eu = tape.gradient(y, [xt, ut])
  np.testing.assert_allclose(gx, ex, **TOL)
  np.testing.assert_allclose(gu, eu, **TOL)
  names = jaxpr_primitives(jax.make_jaxpr(jax.grad(loss, argnums=(0, 1)))(X, U))
  assert {"tf.XlaDynamicUpdateSlice", "tf.XlaDynamicSlice"} <= names

  xs = RNG.normal(size=(3, 4, 5)).astype(np.float32)
  us = RNG.normal(size=(3, 2, 2)).astype(np.float32)
  out = jax.vmap(f)(xs, us)
  for k in range(3):
    np.testing.assert_allclose(out[k], keras_update(xs[k], us[k]), **TOL)
  # shared indices: the batched op is the same TF op with a leading start index
  assert "tf.XlaDynamicUpdateSlice" in jaxpr_primitives(jax.make_jaxpr(jax.vmap(f))(xs, us))


def test_dynamic_slice_clamps_like_xla():
  def fn(x, start):
    return tfxla.dynamic_slice(x, start, [2, 3])

  f = tfprims.convert_functional(fn, X, np.array([0, 0], np.int32))
  for start in ([-3, 1], [3, 4], [1, -1], [9, 9]):
    s = np.array(start, np.int32)
    np.testing.assert_array_equal(jax.jit(f)(X, s), _jit_tf(fn, X, s))


# --- dot_general, conv, einsum --------------------------------------------------------


def _dot_numbers():
  dn = tfxla.DotDimensionNumbers()
  dn.lhs_contracting_dimensions.append(2)
  dn.rhs_contracting_dimensions.append(1)
  dn.lhs_batch_dimensions.append(0)
  dn.rhs_batch_dimensions.append(0)
  return dn


A = RNG.normal(size=(2, 3, 4)).astype(np.float32)
B = RNG.normal(size=(2, 4, 5)).astype(np.float32)


def tf_dot(a, b):
  return tf.sin(tfxla.dot_general(a, b, _dot_numbers(), None))


def test_dot_general_values_grad_vmap():
  assert {"XlaDot", "XlaDotV2"} & _ops(tf_dot, A, B)
  f = tfprims.convert_functional(tf_dot, A, B)
  np.testing.assert_allclose(jax.jit(f)(A, B), _jit_tf(tf_dot, A, B), **TOL)
  loss = lambda a, b: jnp.sum(f(a, b) ** 2)
  ga, gb = jax.grad(loss, argnums=(0, 1))(A, B)
  at, bt = tf.constant(A), tf.constant(B)
  with tf.GradientTape() as tape:
    tape.watch([at, bt])
    y = tf.reduce_sum(tf.sin(tf.einsum("bij,bjk->bik", at, bt)) ** 2)
  ea, eb = tape.gradient(y, [at, bt])
  np.testing.assert_allclose(ga, ea, rtol=1e-4, atol=1e-4)
  np.testing.assert_allclose(gb, eb, rtol=1e-4, atol=1e-4)
  names = jaxpr_primitives(jax.make_jaxpr(jax.grad(loss, argnums=(0, 1)))(A, B))
  assert {"tf.XlaDot", "tf.XlaDotV2"} & names and "dot_general" not in names

  bs = RNG.normal(size=(3,) + B.shape).astype(np.float32)
  out = jax.vmap(f, in_axes=(None, 0))(A, bs)
  for k in range(3):
    np.testing.assert_allclose(out[k], _jit_tf(tf_dot, A, bs[k]), **TOL)
  assert "dot_general" not in jaxpr_primitives(
    jax.make_jaxpr(jax.vmap(f, in_axes=(None, 0)))(A, bs)
  )


IMG = RNG.normal(size=(2, 6, 6, 3)).astype(np.float32)
KER = RNG.normal(size=(3, 3, 3, 4)).astype(np.float32)


def _conv_numbers():
  dn = tfxla.xla_data_pb2.ConvolutionDimensionNumbers()
  dn.input_batch_dimension, dn.input_feature_dimension = 0, 3
  dn.input_spatial_dimensions.extend([1, 2])
  dn.kernel_input_feature_dimension, dn.kernel_output_feature_dimension = 2, 3
  dn.kernel_spatial_dimensions.extend([0, 1])
  dn.output_batch_dimension, dn.output_feature_dimension = 0, 3
  dn.output_spatial_dimensions.extend([1, 2])
  return dn


def tf_conv(x, k):
  return tfxla.conv(
    x,
    k,
    window_strides=[2, 1],
    padding=[[1, 1], [0, 2]],
    lhs_dilation=[1, 1],
    rhs_dilation=[1, 2],
    dimension_numbers=_conv_numbers(),
  )


def test_conv_values_grad_vmap():
  assert {"XlaConv", "XlaConvV2"} & _ops(tf_conv, IMG, KER)
  f = tfprims.convert_functional(tf_conv, IMG, KER)
  np.testing.assert_allclose(jax.jit(f)(IMG, KER), _jit_tf(tf_conv, IMG, KER), rtol=1e-4, atol=1e-4)
  ct = RNG.normal(size=np.shape(f(IMG, KER))).astype(np.float32)
  gx, gk = jax.vjp(f, IMG, KER)[1](ct)
  xt, kt = tf.constant(IMG), tf.constant(KER)
  with tf.GradientTape() as tape:  # the same convolution as tf.nn.conv2d
    tape.watch([xt, kt])
    y = tf.nn.conv2d(
      tf.pad(xt, [[0, 0], [1, 1], [0, 2], [0, 0]]),
      kt,
      strides=[1, 2, 1, 1],
      padding="VALID",
      dilations=[1, 1, 2, 1],
    )
  ex, ek = tape.gradient(y, [xt, kt], output_gradients=tf.constant(ct))
  np.testing.assert_allclose(gx, ex, rtol=1e-4, atol=1e-4)
  np.testing.assert_allclose(gk, ek, rtol=1e-4, atol=1e-4)
  xs = RNG.normal(size=(2,) + IMG.shape).astype(np.float32)
  out = jax.vmap(f, in_axes=(0, None))(xs, KER)
  for k in range(2):
    np.testing.assert_allclose(out[k], _jit_tf(tf_conv, xs[k], KER), rtol=1e-4, atol=1e-4)


# --- gather, scatter, reduce, sort ----------------------------------------------------


def tf_gather(x, idx):
  dn = tfxla.xla_data_pb2.GatherDimensionNumbers()
  dn.offset_dims.append(1)
  dn.collapsed_slice_dims.append(0)
  dn.start_index_map.append(0)
  dn.index_vector_dim = 1
  return tfxla.gather(x, idx, dn, [1, 5])


def test_gather_clamps_and_differentiates():
  idx = np.array([[3], [0], [7], [-2]], np.int32)  # out of range: clamped, as XLA
  f = tfprims.convert_functional(tf_gather, X, idx)
  np.testing.assert_array_equal(jax.jit(f)(X, idx), _jit_tf(tf_gather, X, idx))
  g = jax.grad(lambda x: jnp.sum(f(x, idx) ** 2))(X)
  clamped = np.clip(idx[:, 0], 0, 3)
  expected = np.zeros_like(X)
  np.add.at(expected, clamped, 2 * X[clamped])
  np.testing.assert_allclose(g, expected, **TOL)


def _scatter_numbers():
  dn = tfxla.xla_data_pb2.ScatterDimensionNumbers()
  dn.update_window_dims.append(1)
  dn.inserted_window_dims.append(0)
  dn.scatter_dims_to_operand_dims.append(0)
  dn.index_vector_dim = 1
  return dn


@tf.function(autograph=False)
def _add(a, b):
  return a + b


def tf_scatter_add(x, idx, upd):
  fn = _add.get_concrete_function(tf.TensorSpec([], tf.float32), tf.TensorSpec([], tf.float32))
  return tfxla.scatter(x, idx, upd, fn, _scatter_numbers())


def test_scatter_add_drops_out_of_bounds():
  idx = np.array([[1], [1], [9], [-1], [3]], np.int32)
  upd = RNG.normal(size=(5, 5)).astype(np.float32)
  f = tfprims.convert_functional(tf_scatter_add, X, idx, upd)
  np.testing.assert_allclose(jax.jit(f)(X, idx, upd), _jit_tf(tf_scatter_add, X, idx, upd), **TOL)
  jaxpr = str(jax.make_jaxpr(f)(X, idx, upd))
  assert "tf.XlaScatter" in jaxpr and "update_computation=add" in jaxpr
  w = RNG.normal(size=X.shape).astype(np.float32)
  gx, gu = jax.grad(lambda x, u: jnp.sum(f(x, idx, u) * w), argnums=(0, 1))(X, upd)
  valid = ((idx[:, 0] >= 0) & (idx[:, 0] < 4))[:, None]
  np.testing.assert_allclose(gu, np.where(valid, w[np.clip(idx[:, 0], 0, 3)], 0), **TOL)
  np.testing.assert_allclose(gx, w, **TOL)


def _reducer(fn, dtype=tf.float32):
  spec = tf.TensorSpec([], dtype)
  return tf.function(fn, autograph=False).get_concrete_function(spec, spec)


def test_reduce_simple_and_general_reducers():
  add = _reducer(lambda a, b: a + b)
  select_max = _reducer(lambda a, b: tf.where(a >= b, a, b))

  def sums(x):
    return tfxla.reduce(x, np.float32(0), [1], add)

  def maxes(x):
    return tfxla.reduce(x, np.float32(-np.inf), [0], select_max)

  fs, fm = tfprims.convert_functional(sums, X), tfprims.convert_functional(maxes, X)
  np.testing.assert_allclose(jax.jit(fs)(X), _jit_tf(sums, X), **TOL)
  np.testing.assert_array_equal(jax.jit(fm)(X), _jit_tf(maxes, X))
  assert "reducer=add" in str(jax.make_jaxpr(fs)(X))
  general = str(jax.make_jaxpr(fm)(X))
  assert "tf.XlaReduce" in general and "reducer=<function" in general
  # the recognised reducer differentiates as lax's reduce_sum
  np.testing.assert_allclose(
    jax.grad(lambda x: jnp.sum(fs(x) ** 2))(X),
    2 * np.sum(X, 1, keepdims=True) * np.ones_like(X),
    **TOL,
  )
  xs = RNG.normal(size=(3,) + X.shape).astype(np.float32)
  out = jax.vmap(fm)(xs)
  for k in range(3):
    np.testing.assert_array_equal(out[k], _jit_tf(maxes, xs[k]))


def test_reduce_window_max():
  mx = _reducer(tf.maximum)

  def pool(x):
    return tfxla.reduce_window(x, np.float32(-np.inf), mx, [2, 2], [1, 2], padding=[[0, 1], [1, 0]])

  f = tfprims.convert_functional(pool, X)
  np.testing.assert_array_equal(jax.jit(f)(X), _jit_tf(pool, X))
  g = jax.grad(lambda x: jnp.sum(f(x)))(X)
  assert g.shape == X.shape and np.all(g >= 0) and np.sum(g) == np.size(f(X))


def test_sorts():
  x = np.array([[3.0, -0.0, 0.0, np.nan, -np.inf, 1.0]], np.float32)
  f = tfprims.convert_functional(lambda v: tfxla.sort(v), x)
  np.testing.assert_array_equal(jax.jit(f)(x), _jit_tf(lambda v: tfxla.sort(v), x))
  np.testing.assert_array_equal(np.signbit(f(x)), np.signbit(_jit_tf(tfxla.sort, x)))

  keys = np.array([[2, 1, 2, 0, 1]], np.int32)
  vals = np.arange(5, dtype=np.float32)[None]
  for gt in (False, True):
    cmp = tf.function(
      lambda a, b, c, d, gt=gt: a > b if gt else a < b, autograph=False
    ).get_concrete_function(
      *[tf.TensorSpec([], t) for t in (tf.int32, tf.int32, tf.float32, tf.float32)]
    )

    def vsort(k, v, cmp=cmp):
      return tfxla.variadic_sort([k, v], 1, cmp, True)

    f = tfprims.convert_functional(vsort, keys, vals)
    for ours, theirs in zip(jax.jit(f)(keys, vals), _jit_tf(vsort, keys, vals)):
      np.testing.assert_array_equal(ours, theirs)


# --- ops that only run inside TF-XLA clusters -----------------------------------------


def test_cluster_only_ops_raise_typed_errors():
  def send(x):
    gen_xla_ops.xla_send(x, tensor_name="t")
    return x + 1.0

  def recv(x):
    return x + gen_xla_ops.xla_recv(dtype=tf.float32, tensor_name="t", shape=[2])

  v = np.ones(2, np.float32)
  for fn, op in ((send, "XlaSend"), (recv, "XlaRecv")):
    with pytest.raises(tfprims.UnsupportedOpError, match=f"(?s){op}.*host channels"):
      tfprims.convert(fn, v)
  from tfprims.core import unsupported_hint

  assert "XLA cluster" in unsupported_hint("XlaLaunch")
  assert "XLA cluster" in unsupported_hint("XlaLaunchV2")


# --- XlaSharding under a mesh ----------------------------------------------------------

_SHARDING_SCRIPT = """
import numpy as np, tensorflow as tf, jax
from jax.sharding import AxisType, NamedSharding, PartitionSpec as P
from tensorflow.compiler.tf2xla.python import xla as tfxla
import tfprims

proto = tfxla.xla_data_pb2.OpSharding(type=3, tile_assignment_dimensions=[4, 1],
                                      tile_assignment_devices=[0, 1, 2, 3])

def fn(x):
  return tfxla.sharding(x * 2.0, sharding=proto.SerializeToString())

x = np.arange(32, dtype=np.float32).reshape(8, 4)
f = tfprims.convert_functional(fn, x)
np.testing.assert_array_equal(f(x), 2 * x)   # no mesh: the identity
assert "sharding_constraint" not in jax.jit(f).lower(x).as_text()
mesh = jax.make_mesh((4, 2), ("data", "model"), axis_types=(AxisType.Explicit,) * 2)
with jax.sharding.set_mesh(mesh):
  out = jax.jit(f)(x)
  np.testing.assert_array_equal(out, 2 * x)
  assert out.sharding.is_equivalent_to(NamedSharding(mesh, P("data", None)), 2), out.sharding
  g = jax.jit(jax.grad(lambda v: (f(v) ** 2).sum()))(x)
  np.testing.assert_allclose(g, 8 * x)
auto = jax.make_mesh((4, 2), ("data", "model"), axis_types=(AxisType.Auto,) * 2)
with jax.sharding.set_mesh(auto):
  assert "sharding_constraint" in jax.jit(f).lower(x).as_text()
  out = jax.jit(f)(x)
  np.testing.assert_array_equal(out, 2 * x)
  assert out.sharding.is_equivalent_to(NamedSharding(auto, P("data", None)), 2), out.sharding
print("OK")
"""


def test_sharding_constraint_under_mesh():
  import os
  import subprocess
  import sys

  env = dict(
    os.environ,
    XLA_FLAGS="--xla_force_host_platform_device_count=8",
    JAX_PLATFORMS="cpu",
    TF_CPP_MIN_LOG_LEVEL="3",
  )
  proc = subprocess.run(
    [sys.executable, "-c", _SHARDING_SCRIPT], env=env, capture_output=True, text=True, timeout=300
  )
  assert proc.returncode == 0 and proc.stdout.strip().endswith("OK"), proc.stderr[-3000:]


def test_drawn_reduce_body_follows_the_x64_setting():
  """A spec's general body is cached per canonical dtype: traced once with x64 off (32-bit
  avals), it must not be reused for the 64-bit operands of a later x64 run."""
  op = get_op("XlaVariadicReduceV2")
  inputs = dict(
    inputs=[np.array([1.0, 3.0, 3.0], np.float32), np.array([0, 1, 2], np.int64)],
    init_values=[np.array(-3.0, np.float32), np.array(0, np.int64)],
  )
  for x64, index_dtype in ((False, np.int32), (True, np.int64)):
    with jax.enable_x64(x64):
      operands, params = op.prepare(inputs, dict(dimensions_to_reduce=[0], reducer="argmax"))
      value, index = jax.jit(lambda *a: op(*a, **params))(*operands)
      assert (float(value), int(index), index.dtype) == (3.0, 1, index_dtype)


@pytest.mark.parametrize("kind", ["max", "min", "add"])
def test_reduce_over_an_empty_axis_is_the_init_value_with_its_derivative(kind):
  """Reducing an empty axis gives the init value: its derivative is the init value's
  (TF's equivalent program), not lax's reduce_max JVP, which divides by the count of
  maxima (0 here: NaN)."""
  reducer = _reducer({"max": tf.maximum, "min": tf.minimum, "add": tf.add}[kind])
  equivalent = {
    "max": lambda x, i: tf.maximum(i, tf.reduce_max(x, 0)),
    "min": lambda x, i: tf.minimum(i, tf.reduce_min(x, 0)),
    "add": lambda x, i: i + tf.reduce_sum(x, 0),
  }[kind]
  x, init = np.zeros((0, 2), np.float32), np.float32(-1e6 if kind == "max" else 1e6)

  def reduce(x, i):
    return tfxla.reduce(x, i, [0], reducer)

  f = tfprims.convert_functional(reduce, x, init)
  np.testing.assert_array_equal(jax.jit(f)(x, init), _jit_tf(reduce, x, init))
  xs, inits = tf.constant(x), tf.constant(init)
  with tf.GradientTape() as tape:
    tape.watch([xs, inits])
    y = tf.reduce_sum(equivalent(xs, inits) * [2.0, 3.0])
  tf_dx, tf_dinit = tape.gradient(y, [xs, inits])
  dx, dinit = jax.grad(lambda a, b: jnp.sum(f(a, b) * jnp.array([2.0, 3.0])), (0, 1))(x, init)
  assert dx.shape == x.shape and float(dinit) == float(tf_dinit) == 5.0
  _, t = jax.jvp(f, (x, init), (np.zeros_like(x), np.float32(1.0)))
  np.testing.assert_array_equal(t, [1.0, 1.0])
  _, t = jax.jvp(f, (x, init), (np.ones_like(x), np.float32(0.0)))
  np.testing.assert_array_equal(t, [0.0, 0.0])
