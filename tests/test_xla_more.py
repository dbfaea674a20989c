"""XlaSelectAndScatter, XlaRngBitGenerator, XlaSvd, XlaSelfAdjointEig, the SPMD shape
ops and XlaReplicaId in tf.function graphs, converted and compared with TF under
jit_compile: values, grads (against an equivalent differentiable TF program where
TF registers no gradient) and vmap."""

import os
import subprocess
import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import tensorflow as tf
from tensorflow.compiler.tf2xla.ops import gen_xla_ops
from tensorflow.compiler.tf2xla.python import xla as tfxla

import tfprims
from helpers import jaxpr_primitives

RNG = np.random.default_rng(7)


def _jit_tf(tf_fn, *args):
  return tf.function(tf_fn, jit_compile=True, autograph=False)(*args)


def _scalar_fn(fn, dtype=tf.float32):
  spec = tf.TensorSpec([], dtype)
  return tf.function(fn, autograph=False).get_concrete_function(spec, spec)


# --- XlaSelectAndScatter: max pool's gradient ----------------------------------------------

X = RNG.permutation(2 * 5 * 6 * 3).reshape(2, 5, 6, 3).astype(np.float32) * 0.1
G = RNG.normal(size=(2, 2, 3, 3)).astype(np.float32)
GE, ADD = _scalar_fn(tf.greater_equal), _scalar_fn(tf.add)


def pool_grad(x, g, select=GE):
  return tfxla.select_and_scatter(
    x, [1, 2, 2, 1], [1, 2, 2, 1], [[0, 0]] * 4, g, np.float32(0), select, ADD
  )


def test_select_and_scatter_is_max_pool_gradient():
  f = tfprims.convert_functional(pool_grad, X, G)
  assert "tf.XlaSelectAndScatter" in jaxpr_primitives(jax.make_jaxpr(f)(X, G))
  out = jax.jit(f)(X, G)
  np.testing.assert_array_equal(out, _jit_tf(pool_grad, X, G))
  pooled = tf.nn.max_pool2d(X, 2, 2, "VALID")
  np.testing.assert_allclose(
    out,
    tf.raw_ops.MaxPoolGrad(
      orig_input=X,
      orig_output=pooled,
      grad=G,
      ksize=[1, 2, 2, 1],
      strides=[1, 2, 2, 1],
      padding="VALID",
    ),
    rtol=1e-6,
  )
  # grad w.r.t. the source: MaxPoolGrad's gradient (TF registers none for the Xla op)
  w = RNG.normal(size=X.shape).astype(np.float32)
  ours = jax.grad(lambda g: jnp.sum(f(X, g) * w))(G)
  gt = tf.constant(G)
  with tf.GradientTape() as tape:
    tape.watch(gt)
    y = tf.raw_ops.MaxPoolGrad(
      orig_input=X,
      orig_output=pooled,
      grad=gt,
      ksize=[1, 2, 2, 1],
      strides=[1, 2, 2, 1],
      padding="VALID",
    )
    loss = tf.reduce_sum(y * w)
  np.testing.assert_allclose(ours, tape.gradient(loss, gt), rtol=1e-5, atol=1e-6)
  gs = RNG.normal(size=(3,) + G.shape).astype(np.float32)
  batched = jax.vmap(f, in_axes=(None, 0))(X, gs)
  for k in range(3):
    np.testing.assert_array_equal(batched[k], _jit_tf(pool_grad, X, gs[k]))


def test_select_and_scatter_general_select_and_padding():
  where_ge = _scalar_fn(lambda a, b: tf.where(a >= b, True, False))

  def fn(x, g):
    return tfxla.select_and_scatter(
      x, [3, 2], [2, 1], [[1, 1], [0, 1]], g, np.float32(0.5), where_ge, _scalar_fn(tf.maximum)
    )

  x = -RNG.permutation(20).reshape(4, 5).astype(np.float32)
  g = RNG.normal(size=(2, 5)).astype(np.float32)
  f = tfprims.convert_functional(fn, x, g)
  np.testing.assert_array_equal(jax.jit(f)(x, g), _jit_tf(fn, x, g))


# --- XlaRngBitGenerator ---------------------------------------------------------------------


def uniform(state):
  new, bits = gen_xla_ops.xla_rng_bit_generator(2, state, [3, 4], dtype=tf.uint32)
  mant = tf.bitwise.bitwise_or(tf.bitwise.right_shift(bits, 9), np.uint32(0x3F800000))
  return new, tf.bitcast(mant, tf.float32) - 1.0


def test_rng_bit_generator_bits_match_tf():
  jax.config.update("jax_enable_x64", True)
  try:
    state = np.array([2**63 + 12345, 99], np.uint64)
    f = tfprims.convert_functional(uniform, state)
    new, u = jax.jit(f)(state)
    tf_new, tf_u = _jit_tf(uniform, state)
    np.testing.assert_array_equal(new, tf_new)
    np.testing.assert_array_equal(u, tf_u)
    assert np.all((np.asarray(u) >= 0) & (np.asarray(u) < 1))
    states = np.array([[1, 2], [3, 4], [2**64 - 1, 6]], np.uint64)
    bn, bu = jax.vmap(f)(states)
    for k in range(3):
      tn, tu = _jit_tf(uniform, states[k])
      np.testing.assert_array_equal(bn[k], tn)
      np.testing.assert_array_equal(bu[k], tu)
    for alg in (1, 3):  # Philox, auto-select (XLA's default)
      fn = lambda s, alg=alg: gen_xla_ops.xla_rng_bit_generator(alg, s, [5], dtype=tf.uint64)
      for ours, theirs in zip(tfprims.convert_functional(fn, state)(state), _jit_tf(fn, state)):
        np.testing.assert_array_equal(ours, theirs)
    three = np.array([1, 2, 3], np.uint64)
    with pytest.raises(tfprims.ConversionError, match="two-word"):
      tfprims.convert_functional(
        lambda s: gen_xla_ops.xla_rng_bit_generator(1, s, [2], dtype=tf.uint32), three
      )(three)
  finally:
    jax.config.update("jax_enable_x64", False)


# --- XlaSvd and XlaSelfAdjointEig -----------------------------------------------------------


@pytest.mark.parametrize("shape", [(5, 3), (3, 5), (2, 4, 4)])
def test_svd_values_reconstruction_grad(shape):
  a = RNG.normal(size=shape).astype(np.float32)
  fn = lambda a: tfxla.svd(a, max_iter=100, epsilon=1e-7)
  f = tfprims.convert_functional(fn, a)
  s, u, v = jax.jit(f)(a)
  ts, tu, tv = _jit_tf(fn, a)
  m, n = shape[-2:]
  k = min(m, n)
  assert u.shape == tu.shape and v.shape == tv.shape
  np.testing.assert_allclose(s, ts, rtol=1e-5, atol=1e-6)
  np.testing.assert_allclose(
    (u[..., :k] * s[..., None, :]) @ jnp.swapaxes(v[..., :k], -1, -2), a, atol=1e-5
  )
  for q, d in ((u, m), (v, n)):  # full orthogonal factors
    np.testing.assert_allclose(
      jnp.swapaxes(q, -1, -2) @ q, np.broadcast_to(np.eye(d), q.shape), atol=1e-5
    )
  # the vectors agree with TF's up to each column's sign
  signs = jnp.sign(jnp.sum(v[..., :k] * tv.numpy()[..., :k], axis=-2, keepdims=True))
  np.testing.assert_allclose(v[..., :k] * signs, tv.numpy()[..., :k], atol=1e-4)
  # d(sum s)/da vs TF's Svd gradient (TF registers none for XlaSvd)
  ours = jax.grad(lambda x: jnp.sum(f(x)[0] * jnp.arange(1.0, k + 1)))(a)
  at = tf.constant(a)
  with tf.GradientTape() as tape:
    tape.watch(at)
    loss = tf.reduce_sum(tf.linalg.svd(at, compute_uv=False) * tf.range(1.0, k + 1))
  np.testing.assert_allclose(ours, tape.gradient(loss, at), rtol=1e-4, atol=1e-5)
  if len(shape) == 3:
    vs = jax.vmap(tfprims.convert_functional(fn, a[0]))(a)[0]
    np.testing.assert_allclose(vs, ts, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("lower", [True, False])
def test_self_adjoint_eig_reads_one_triangle(lower):
  a = RNG.normal(size=(3, 4, 4))
  fn = lambda a: tfxla.self_adjoint_eig(a, lower, 100, 1e-12)
  f = tfprims.convert_functional(fn, a)
  jax.config.update("jax_enable_x64", True)
  try:
    w, v = jax.jit(f)(a)
    tw, tv = _jit_tf(fn, a)
    np.testing.assert_allclose(w, tw, rtol=1e-7, atol=1e-8)
    tri = np.tril(a) if lower else np.triu(a)
    sym = tri + np.swapaxes(np.tril(a, -1) if lower else np.triu(a, 1), -1, -2)
    np.testing.assert_allclose((v * w[..., None, :]) @ np.swapaxes(v, -1, -2), sym, atol=1e-10)
    signs = np.sign(np.sum(np.asarray(v) * tv.numpy(), axis=-2, keepdims=True))
    np.testing.assert_allclose(v * signs, tv, atol=1e-6)
    weights = np.arange(1.0, 5.0)
    ours = jax.grad(lambda x: jnp.sum(f(x)[0] * weights))(a)
    at = tf.constant(a)
    with tf.GradientTape() as tape:
      tape.watch(at)
      t = tf.linalg.band_part(at, -1, 0) if lower else tf.linalg.band_part(at, 0, -1)
      s = t - tf.linalg.diag(tf.linalg.diag_part(at))
      loss = tf.reduce_sum(tf.linalg.eigvalsh(t + tf.linalg.matrix_transpose(s)) * weights)
    np.testing.assert_allclose(ours, tape.gradient(loss, at), rtol=1e-6, atol=1e-8)
    f1 = tfprims.convert_functional(fn, a[0])
    np.testing.assert_allclose(jax.vmap(f1)(a)[0], tw, rtol=1e-7, atol=1e-8)
  finally:
    jax.config.update("jax_enable_x64", False)


# --- the SPMD shape ops and XlaReplicaId -------------------------------------------------------


def _sharding(kind, tiles=None):
  if kind == "manual":
    return tfxla.xla_data_pb2.OpSharding(type=4).SerializeToString()
  return tfxla.xla_data_pb2.OpSharding(
    type=3,
    tile_assignment_dimensions=tiles,
    tile_assignment_devices=list(range(int(np.prod(tiles)))),
  ).SerializeToString()


def manual_region(x):
  manual = _sharding("manual")
  shard = gen_xla_ops.xla_spmd_full_to_shard_shape(x, manual_sharding=manual)
  y = tf.tanh(shard) * 2.0
  return gen_xla_ops.xla_spmd_shard_to_full_shape(y, manual_sharding=manual, full_shape=x.shape)


def test_spmd_shape_ops_one_device():
  x = RNG.normal(size=(4, 3)).astype(np.float32)
  f = tfprims.convert_functional(manual_region, x)
  prims = jaxpr_primitives(jax.make_jaxpr(f)(x))
  assert {"tf.XlaSpmdFullToShardShape", "tf.XlaSpmdShardToFullShape"} <= set(prims)
  np.testing.assert_allclose(jax.jit(f)(x), _jit_tf(manual_region, x), rtol=1e-6)

  def tf_grad(xt):  # TF's gradients of the SPMD ops, under jit (XLA-only kernels)
    with tf.GradientTape() as tape:
      tape.watch(xt)
      loss = tf.reduce_sum(manual_region(xt) ** 2)
    return tape.gradient(loss, xt)

  ours = jax.grad(lambda v: jnp.sum(f(v) ** 2))(x)
  np.testing.assert_allclose(ours, _jit_tf(tf_grad, x), rtol=1e-5, atol=1e-6)
  xs = RNG.normal(size=(2, 4, 3)).astype(np.float32)
  np.testing.assert_allclose(
    jax.vmap(tfprims.convert_functional(manual_region, xs[0]))(xs), np.tanh(xs) * 2, rtol=1e-6
  )

  def split(x):
    return gen_xla_ops.xla_spmd_full_to_shard_shape(x, manual_sharding=_sharding("t", [2, 1]))

  with pytest.raises(tfprims.ConversionError, match="shard_map"):
    tfprims.convert_functional(split, x)(x)


def with_replica(x):
  return x + tf.cast(gen_xla_ops.xla_replica_id(), tf.float32)


_REPLICA_SCRIPT = """
import numpy as np, jax, jax.numpy as jnp
from jax.sharding import AxisType, PartitionSpec as P
import tensorflow as tf
from tensorflow.compiler.tf2xla.ops import gen_xla_ops
import tfprims

def fn(x):
  return x + tf.cast(gen_xla_ops.xla_replica_id(), tf.float32)

x = np.zeros((8, 2), np.float32)
f = tfprims.convert_functional(fn, x[:2])
mesh = jax.make_mesh((4, 2), ("data", "model"), axis_types=(AxisType.Auto,) * 2)
g = jax.jit(jax.shard_map(f, mesh=mesh, in_specs=P("data"), out_specs=P("data", "model")))
out = np.asarray(g(x))
assert "tf.XlaReplicaId" in str(jax.make_jaxpr(g)(x))
# shard (i, j): rows 2i..2i+1, columns 2j..2j+1; its id is i * 2 + j
want = (np.arange(8) // 2)[:, None] * 2 + (np.arange(4) // 2)[None, :]
np.testing.assert_array_equal(out, want)
print("OK")
"""


def test_replica_id():
  x = np.ones((2,), np.float32)
  f = tfprims.convert_functional(with_replica, x)
  np.testing.assert_array_equal(jax.jit(f)(x), x)  # one program: replica 0, folded
  env = dict(
    os.environ,
    XLA_FLAGS="--xla_force_host_platform_device_count=8",
    JAX_PLATFORMS="cpu",
    TF_CPP_MIN_LOG_LEVEL="3",
  )
  proc = subprocess.run(
    [sys.executable, "-c", _REPLICA_SCRIPT], env=env, capture_output=True, text=True, timeout=300
  )
  assert proc.returncode == 0 and proc.stdout.strip().endswith("OK"), proc.stderr[-3000:]
