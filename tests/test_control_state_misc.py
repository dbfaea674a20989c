"""For, SymbolicGradient, the TensorMap ops and the small state/placement ops
(GuaranteeConst, HostConst, DeviceIndex, DisableCopyOnRead, FakeParam, RngSkip),
converted from tf.functions calling tf.raw_ops and compared with TF."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import tensorflow as tf

import tfprims
from tfprims import errors

F32 = tf.float32


@tf.function
def _body(i, x, n):
  return x * 2.0 + tf.cast(i, F32), n + 1


_BODY = _body.get_concrete_function(
  tf.TensorSpec([], tf.int32), tf.TensorSpec([2], F32), tf.TensorSpec([], tf.int32)
)


def _for(x, start, limit, delta):
  return tf.raw_ops.For(
    start=start, limit=limit, delta=delta, input=[x, tf.constant(0)], body=_BODY
  )


@pytest.mark.parametrize("bounds", [(1, 8, 3), (8, 1, -2), (3, 3, 1), (0, 5, 1)])
def test_for_static_trip_count(bounds):
  tf_fn = tf.function(lambda x: _for(x, *bounds))
  fn = tfprims.convert_functional(tf_fn, tf.TensorSpec([2], F32))
  x = np.float32([1.0, -2.0])
  for got, want in zip(fn(x), tf_fn(x)):
    np.testing.assert_array_equal(got, want)
  # TF registers no gradient for For: the loop is x -> 2^n x + c, so
  # d sum(out^2)/dx = 2 * out * 2^n
  n = len(range(*bounds))
  got = jax.grad(lambda x: jnp.sum(fn(x)[0] ** 2))(x)
  np.testing.assert_allclose(got, 2 * np.asarray(tf_fn(x)[0]) * 2.0**n, rtol=1e-6)
  batch = np.stack([x, x + 1.0])
  np.testing.assert_allclose(
    jax.vmap(lambda x: fn(x)[0])(batch), np.stack([tf_fn(b)[0] for b in batch])
  )


def test_for_jaxpr_is_a_tf_while_of_tf_ops():
  fn = tfprims.convert_functional(
    tf.function(lambda x: _for(x, 0, 100, 2)), tf.TensorSpec([2], F32)
  )
  jaxpr = jax.make_jaxpr(fn)(np.zeros(2, np.float32))
  (eqn,) = [e for e in jaxpr.jaxpr.eqns if e.primitive.name == "tf.While"]
  assert eqn.params["length"] == 50
  # the body's ops, and the counter's step (`add`)
  assert {e.primitive.name for e in eqn.params["jaxpr"].jaxpr.eqns} == {
    "tf.Mul",
    "tf.Cast",
    "tf.AddV2",
    "add",
  }


def test_for_traced_bounds():
  tf_fn = tf.function(lambda x, limit, delta: _for(x, 0, limit, delta))
  fn = tfprims.convert_functional(
    tf_fn, tf.TensorSpec([2], F32), tf.TensorSpec([], tf.int32), tf.TensorSpec([], tf.int32)
  )
  x = np.float32([1.0, 2.0])
  for limit, delta in [(4, 1), (7, 2), (0, 1), (-6, -3)]:  # TF-valid bounds
    for got, want in zip(jax.jit(fn)(x, limit, delta), tf_fn(x, limit, delta)):
      np.testing.assert_array_equal(got, want)


def test_for_body_writing_a_variable_is_unrolled():
  v = tf.Variable(0.0)

  @tf.function
  def body(i, x, h):
    tf.raw_ops.AssignAddVariableOp(resource=h, value=tf.cast(i, F32))
    return x + tf.raw_ops.ReadVariableOp(resource=h, dtype=F32), h

  cf = body.get_concrete_function(
    tf.TensorSpec([], tf.int32), tf.TensorSpec([], F32), tf.TensorSpec([], tf.resource)
  )

  @tf.function
  def loop(x):
    return tf.raw_ops.For(start=0, limit=4, delta=1, input=[x, v.handle], body=cf)[0]

  fn, params = tfprims.convert(loop, tf.TensorSpec([], F32))
  out, new = fn(params, np.float32(1.0))
  want = loop(tf.constant(1.0))
  np.testing.assert_allclose(out, want)
  np.testing.assert_allclose(list(new.values())[0], v.numpy())
  assert v.numpy() == 6.0


@pytest.mark.parametrize("bounds", [(0, 3, 0), (5, 0, 1), (0, 5, -1)])
def test_for_invalid_bounds_raise_like_tf(bounds):
  tf_fn = tf.function(lambda x: _for(x, *bounds))
  x = np.zeros(2, np.float32)
  with pytest.raises(tf.errors.InvalidArgumentError, match="Invalid start/limit/delta"):
    tf_fn(x)
  fn = tfprims.convert_functional(tf_fn, tf.TensorSpec([2], F32))
  with pytest.raises(
    errors.RuntimeCheckError, match="Invalid start/limit/delta: " + " ".join(map(str, bounds))
  ):
    fn(x)


@tf.function
def _f(x, y):
  return x * x * y, tf.sin(x)


_F = _f.get_concrete_function(tf.TensorSpec([2], F32), tf.TensorSpec([2], F32))


def test_symbolic_gradient():
  @tf.function
  def grad(x, y, d1, d2):
    return tf.raw_ops.SymbolicGradient(input=[x, y, d1, d2], Tout=[F32, F32], f=_F)

  args = [
    np.float32([1.0, 2.0]),
    np.float32([3.0, -4.0]),
    np.float32([1.0, -1.0]),
    np.float32([0.5, 2.0]),
  ]
  fn = tfprims.convert_functional(grad, *args)
  for got, want in zip(fn(*args), grad(*args)):
    np.testing.assert_allclose(got, want, rtol=1e-6)
  jaxpr = str(jax.make_jaxpr(fn)(*args))
  assert "tf.Cos" in jaxpr and "tf.Mul" in jaxpr
  # the gradient's own gradient (second order) flows through the converted VJP
  gg = jax.grad(lambda x: jnp.sum(fn(x, *args[1:])[0]))(args[0])
  np.testing.assert_allclose(gg, 2 * args[1] * args[2] - np.sin(args[0]) * args[3], rtol=1e-6)


def _map_fn(v):
  t = tf.raw_ops.EmptyTensorMap()
  for key, scale in [(3, 1.0), (1, 2.0), (5, 3.0), (3, 4.0)]:
    t = tf.raw_ops.TensorMapInsert(input_handle=t, key=tf.constant(key), value=v * scale)
  t2 = tf.raw_ops.TensorMapErase(input_handle=t, key=tf.constant(5), value_dtype=F32)
  return (
    tf.raw_ops.TensorMapLookup(input_handle=t, key=tf.constant(1), value_dtype=F32),
    tf.raw_ops.TensorMapLookup(input_handle=t2, key=tf.constant(3), value_dtype=F32),
    tf.raw_ops.TensorMapSize(input_handle=t2),
    tf.raw_ops.TensorMapHasKey(input_handle=t2, key=tf.constant(5)),
    tf.raw_ops.TensorMapHasKey(input_handle=t2, key=tf.constant(1)),
    tf.raw_ops.TensorMapStackKeys(input_handle=t, key_dtype=tf.int32),
  )


def test_tensor_map_ops():
  tf_fn = tf.function(_map_fn)
  v = np.float32([1.0, 2.0])
  fn = tfprims.convert_functional(tf_fn, v)
  got, want = fn(v), tf_fn(v)
  for g, w in zip(got[:5], want[:5]):
    np.testing.assert_array_equal(g, w)
  np.testing.assert_array_equal(np.sort(got[5]), np.sort(want[5]))  # a set of keys
  np.testing.assert_allclose(jax.grad(lambda v: jnp.sum(fn(v)[1]))(v), [4.0, 4.0])
  batched = jax.vmap(lambda v: fn(v)[:2])(np.stack([v, v + 1]))
  np.testing.assert_allclose(batched[0], [2 * v, 2 * (v + 1)])


@pytest.mark.parametrize("op", ["lookup", "erase"])
def test_tensor_map_missing_key_raises_like_tf(op):
  @tf.function
  def f(v):
    t = tf.raw_ops.TensorMapInsert(
      input_handle=tf.raw_ops.EmptyTensorMap(), key=tf.constant(1), value=v
    )
    if op == "lookup":
      return tf.raw_ops.TensorMapLookup(input_handle=t, key=tf.constant(3), value_dtype=F32)
    return tf.raw_ops.TensorMapSize(
      input_handle=tf.raw_ops.TensorMapErase(input_handle=t, key=tf.constant(3), value_dtype=F32)
    )

  v = np.float32(1.0)
  with pytest.raises(tf.errors.InvalidArgumentError) as tf_err:
    f(v)
  fn = tfprims.convert_functional(f, v)
  with pytest.raises(errors.RuntimeCheckError) as err:
    fn(v)
  expected = (
    "Trying to lookup non-existent key" if op == "lookup" else "Trying to erase non-existent item"
  )
  assert expected in str(tf_err.value) and expected in str(err.value)
  assert 'Could not find key "3"' in str(err.value)


def test_tensor_map_traced_key_is_refused():
  @tf.function
  def f(v, k):
    t = tf.raw_ops.TensorMapInsert(input_handle=tf.raw_ops.EmptyTensorMap(), key=k, value=v)
    return tf.raw_ops.TensorMapSize(input_handle=t)

  fn = tfprims.convert_functional(f, np.float32(1.0), np.int32(1))
  with pytest.raises(errors.StaticInputError):
    jax.jit(fn)(np.float32(1.0), np.int32(1))


def test_small_state_ops():
  @tf.function
  def f(x):
    c = tf.raw_ops.GuaranteeConst(input=x * 2.0)
    idx = tf.raw_ops.DeviceIndex(device_names=["GPU", "CPU", "TPU"])
    none = tf.raw_ops.DeviceIndex(device_names=["XPU"])
    return c, idx, none

  x = np.float32([3.0, 4.0])
  fn = tfprims.convert_functional(f, x)
  got, want = fn(x), f(x)
  np.testing.assert_array_equal(got[0], want[0])
  platform = jax.default_backend().upper()
  assert int(got[1]) == {"CPU": 1, "GPU": 0, "TPU": 2}.get(platform, 3)
  if platform == "CPU":  # TF runs on the CPU in these tests, as JAX does
    assert int(got[1]) == int(want[1])
  assert int(got[2]) == int(want[2]) == 1

  def fake():
    g = tf.Graph()
    with g.as_default():
      tf.raw_ops.FakeParam(dtype=F32, shape=[2, 3], name="fake")
    return g.as_graph_def()

  (out,) = tfprims.convert_graph_def(fake(), [], ["fake"])()
  assert out.shape == (2, 3) and out.dtype == np.float32

  def host_const():  # no tf.raw_ops.HostConst: a node in a GraphDef
    g = tf.Graph()
    with g.as_default():
      c = tf.constant([1.0, 2.0], name="c")
    gd = g.as_graph_def()
    gd.node[0].op = "HostConst"
    return gd, c

  gd, _ = host_const()
  (out,) = tfprims.convert_graph_def(gd, [], ["c"])()
  np.testing.assert_array_equal(out, [1.0, 2.0])


def test_rng_skip_and_disable_copy_on_read():
  gen = tf.random.Generator.from_seed(7)

  @tf.function
  def f(delta):
    tf.raw_ops.DisableCopyOnRead(resource=gen.state.handle)
    tf.raw_ops.RngSkip(resource=gen.state.handle, algorithm=tf.constant(1, tf.int64), delta=delta)
    return tf.constant(0)

  fn, params = tfprims.convert(f, tf.TensorSpec([], tf.int64))
  (key,) = params
  before = gen.state.numpy().copy()
  _, new = fn(params, np.int64(3))
  f(tf.constant(3, tf.int64))
  assert not np.array_equal(before, gen.state.numpy())
  np.testing.assert_array_equal(np.asarray(new[key]).astype(np.int64), gen.state.numpy())
  assert gen.state.numpy()[0] == before[0] + 256 * 3
