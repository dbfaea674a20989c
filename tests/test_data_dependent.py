"""Ops with data-dependent output shapes (Where, Unique*, ListDiff, DynamicPartition):
computed exactly on values known at trace time (constants; an eager call of the converted
function), refused with a DynamicShapeError naming the node on traced values (under jit:
they never block the conversion), and, bounded with the ``dynamic_shape_bounds`` config, run
as padded primitives under jit/vmap/grad (docs/semantics/array.md)."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import tensorflow as tf

import tfprims
from tfprims import graph as graph_lib
from tfprims import interpreter
from helpers import jaxpr_primitives, non_tf_primitives

F32 = tf.float32
NAN = np.nan

_X = np.float32([3, 1, NAN, -0.0, 3, 0.0, NAN, 2, 1])
_M = np.float32([[0, 1, 1, 0], [0, 1, 1, 0], [2, -0.0, 1, NAN]])


def _programs():
  """name -> (body(x) building the op on x, x): the op on a constant or an input."""
  return {
    "where": (lambda x: tf.where(x > 1.0), _M),
    "where_nan": (lambda x: tf.where(x), _M),  # NaN is non-zero
    "unique": (lambda x: tf.unique(x), _X),
    "unique_with_counts": (lambda x: tf.unique_with_counts(x, out_idx=tf.int64), _X),
    "unique_v2": (lambda x: tf.raw_ops.UniqueV2(x=x, axis=[0]), _M.T),
    "unique_v2_axis1": (lambda x: tf.raw_ops.UniqueV2(x=x, axis=[-1]), _M),
    "unique_counts_v2": (lambda x: tf.raw_ops.UniqueWithCountsV2(x=x, axis=[1]), _M),
    "list_diff": (lambda x: tf.raw_ops.ListDiff(x=x, y=tf.constant([NAN, -0.0, 1.0])), _X),
    "dynamic_partition": (
      lambda x: tf.dynamic_partition(x, tf.constant([1, 0, 2, 1, 1, 0, 2, 2, 0]), 3),
      _X,
    ),
  }


def _flat(out):
  return [np.asarray(o) for o in tf.nest.flatten(out)]


@pytest.mark.parametrize("name", sorted(_programs()))
def test_on_constants_computed_at_trace_time(name):
  body, x = _programs()[name]

  @tf.function
  def f(scale):
    return tf.nest.map_structure(
      lambda t: t if t.dtype.is_integer else t * scale, body(tf.constant(x))
    )

  fn = tfprims.convert_functional(f, tf.TensorSpec([], F32))
  got, want = _flat(jax.jit(fn)(np.float32(2))), _flat(f(np.float32(2)))
  assert len(got) == len(want)
  for g, w in zip(got, want):
    np.testing.assert_array_equal(g, w)


def _interpret_eagerly(body, x):
  """The graph of ``body`` run by the interpreter on a concrete jax array (no
  tracing), bypassing check_supported as an eager run does."""
  cf = tf.function(body).get_concrete_function(tf.TensorSpec(x.shape, tf.as_dtype(x.dtype)))
  gd = cf.graph.as_graph_def()
  g = graph_lib.from_graph_def(gd, [t.name for t in cf.inputs], [t.name for t in cf.outputs])
  ctx = interpreter.Context(graph_lib.Library(gd.library.function), {})
  return interpreter.run(ctx, g, {g.inputs[0]: jnp.asarray(x)})


@pytest.mark.parametrize("name", sorted(_programs()))
def test_on_concrete_arrays_in_an_eager_run(name):
  body, x = _programs()[name]
  got, want = _interpret_eagerly(body, x), _flat(body(tf.constant(x)))
  assert len(got) == len(want)
  for g, w in zip(got, want):
    np.testing.assert_array_equal(np.asarray(g), w)


@pytest.mark.parametrize("name", sorted(_programs()))
def test_eager_calls_of_converted_functions_compute_them_as_tf(name):
  # The conversion does not refuse them: an eager call knows its values.
  body, x = _programs()[name]
  f = tf.function(body)
  fn = tfprims.convert_functional(f, tf.TensorSpec(x.shape, F32))
  got, want = _flat(fn(x)), _flat(f(x))
  assert len(got) == len(want)
  for g, w in zip(got, want):  # int64 indices are int32 with x64 off
    assert g.dtype.kind == w.dtype.kind, (g.dtype, w.dtype)
    np.testing.assert_array_equal(g, w)


_RUNTIME_SIZES = {
  "boolean_mask": (lambda x, n: tf.boolean_mask(x, x > tf.cast(n, F32)), tfprims.DynamicShapeError),
  "range": (lambda x, n: tf.range(n, 3 * n, 2), tfprims.StaticInputError),
  "segment_sum": (
    lambda x, n: tf.math.segment_sum(x, tf.constant([0, 0, 1, 1, 1, 2, 2, 3, 3]) * n),
    tfprims.StaticInputError,
  ),
  "bincount": (
    lambda x, n: tf.math.bincount(tf.cast(x[:4], tf.int32) * 0 + n),
    tfprims.StaticInputError,
  ),
}


@pytest.mark.parametrize("name", sorted(_RUNTIME_SIZES))
def test_sizes_from_runtime_values_run_eagerly_and_are_refused_traced(name):
  body, error = _RUNTIME_SIZES[name]
  f = tf.function(body)
  x = np.float32([3, 1, 5, 0, 3, 0, 4, 2, 1])
  fn = tfprims.convert_functional(f, tf.TensorSpec(x.shape, F32), tf.TensorSpec([], tf.int32))
  for n in (1, 2):
    got, want = _flat(fn(x, np.int32(n))), _flat(f(x, np.int32(n)))
    for g, w in zip(got, want):
      np.testing.assert_array_equal(g, w)
  with pytest.raises(error, match="node '"):
    jax.jit(fn)(x, np.int32(1))


@pytest.mark.parametrize("name", sorted(_programs()))
def test_traced_inputs_are_refused_naming_the_node(name):
  body, x = _programs()[name]
  spec = tf.TensorSpec(x.shape, F32)
  fn = tfprims.convert_functional(tf.function(body), spec)  # converts: eager calls run it
  with pytest.raises(tfprims.DynamicShapeError, match="depends on the data|depends on"):
    jax.jit(fn)(x)
  # The hook names the node and says how to bound it.
  with pytest.raises(tfprims.DynamicShapeError, match="node '.*'.*dynamic_shape_bounds"):
    jax.jit(lambda v: _interpret_eagerly(body, v))(x)


def test_errors_of_tf_on_known_values():
  with pytest.raises(tfprims.errors.OpError, match="partitions\\[1\\] = 5 is not in"):
    _interpret_eagerly(
      lambda x: tf.dynamic_partition(x, tf.constant([0, 5, 1]), 2), np.float32([1, 2, 3])
    )
  with pytest.raises(tfprims.errors.OpError, match="WhereOp : Unhandled input dimensions: 0"):
    _interpret_eagerly(lambda x: tf.raw_ops.Where(condition=x), np.float32(1))


# --- bounded (padded) forms -------------------------------------------------------------


def _padded(want, n, fill, axis=0):
  want = np.asarray(want)
  k = want.shape[axis]
  cut = np.take(want, np.arange(min(k, n)), axis=axis)
  pad = list(want.shape)
  pad[axis] = max(n - k, 0)
  return np.concatenate([cut, np.full(pad, fill, want.dtype)], axis=axis)


def test_bounded_where_and_gather_under_jit_and_vmap():
  @tf.function
  def f(x):
    idx = tf.where(x > 0.0)
    return idx, tf.gather(x, idx[:, 0]) * 2.0

  spec = tf.TensorSpec([6], F32)
  x = np.float32([1, -2, 3, 0, 5, -1])
  with tfprims.override_config("dynamic_shape_bounds", {"Where": 4}):
    fn = tfprims.convert_functional(f, spec)
    idx, vals = jax.jit(fn)(x)
    jaxpr = jax.make_jaxpr(fn)(x)
    xs = np.stack([x, -x])
    bidx, bvals = jax.vmap(fn)(xs)
  ti, tv = f(x)
  np.testing.assert_array_equal(idx, _padded(ti.numpy(), 4, -1))
  # The -1 rows gather zeros: TF's values, then zeros.
  np.testing.assert_array_equal(vals, _padded(tv.numpy(), 4, 0))
  assert "tf.Where[size=4]" in str(jaxpr) and non_tf_primitives(jaxpr) == set()
  for i in range(2):
    ti, tv = f(xs[i])
    np.testing.assert_array_equal(bidx[i], _padded(ti.numpy(), 4, -1))
    np.testing.assert_array_equal(bvals[i], _padded(tv.numpy(), 4, 0))
  # Fewer slots than results: the first ones are kept.
  with tfprims.override_config("dynamic_shape_bounds", {"Where": 2}):
    fn = tfprims.convert_functional(f, spec)
    idx, _ = jax.jit(fn)(x)
    # An eager call with numpy inputs knows every value: TF's exact result.
    exact, _ = fn(x)
  np.testing.assert_array_equal(idx, f(x)[0].numpy()[:2])
  np.testing.assert_array_equal(exact, f(x)[0].numpy())


def test_bounded_unique_by_node_name_rebuilds_its_input():
  @tf.function
  def f(x):
    y, idx, counts = tf.unique_with_counts(x)
    return y, idx, counts, tf.gather(y, idx)

  x = np.float32([3, 1, 3, -0.0, 0.0, 2, 1])
  cf = f.get_concrete_function(tf.TensorSpec([7], F32))
  name = next(n.name for n in cf.graph.as_graph_def().node if n.op == "UniqueWithCounts")
  with tfprims.override_config("dynamic_shape_bounds", {name: 6}):
    fn = tfprims.convert_functional(f, tf.TensorSpec([7], F32))
    y, idx, counts, back = jax.jit(fn)(x)
  ty, tidx, tcounts, tback = f(x)
  np.testing.assert_array_equal(y, _padded(ty.numpy(), 6, 0))
  np.testing.assert_array_equal(idx, tidx.numpy())  # exact
  np.testing.assert_array_equal(counts, _padded(tcounts.numpy(), 6, 0))
  np.testing.assert_array_equal(back, tback.numpy())


def test_bounded_unique_v2_and_list_diff():
  m = np.float32([[1, 2, 1, 3], [4, 5, 4, 6]])

  @tf.function
  def f(x, a):
    return (tf.raw_ops.UniqueV2(x=x, axis=[1]), tf.raw_ops.ListDiff(x=a, y=tf.constant([2.0, NAN])))

  a = np.float32([1, 2, NAN, 3, 2])
  spec = (tf.TensorSpec([2, 4], F32), tf.TensorSpec([5], F32))
  with tfprims.override_config("dynamic_shape_bounds", {"UniqueV2": 5, "ListDiff": 4}):
    (y, idx), (out, pos) = jax.jit(tfprims.convert_functional(f, *spec))(m, a)
  (ty, tidx), (tout, tpos) = f(m, a)
  np.testing.assert_array_equal(y, _padded(ty.numpy(), 5, 0, axis=1))
  np.testing.assert_array_equal(idx, tidx.numpy())
  np.testing.assert_array_equal(out, _padded(tout.numpy(), 4, 0))
  np.testing.assert_array_equal(pos, _padded(tpos.numpy(), 4, -1))


def test_bounded_dynamic_partition_grad_and_vmap():
  @tf.function
  def f(x, p):
    parts = tf.dynamic_partition(x, p, 2)
    return parts[0] * 2.0, parts[1] ** 2

  spec = (tf.TensorSpec([5, 2], F32), tf.TensorSpec([5], tf.int32))
  x = np.arange(10, dtype=np.float32).reshape(5, 2)
  p = np.int32([1, 0, 1, 1, 0])
  with tfprims.override_config("dynamic_shape_bounds", {"DynamicPartition": 4}):
    fn = tfprims.convert_functional(f, *spec)
    a, b = jax.jit(fn)(x, p)
    loss = lambda x: jnp.sum(fn(x, p)[0]) + jnp.sum(fn(x, p)[1])
    g = jax.grad(loss)(x)
    grad_jaxpr = jax.make_jaxpr(jax.grad(lambda x: fn(x, p)[1].sum()))(x)
    xs = np.stack([x, x[::-1]])
    ba, bb = jax.vmap(fn, in_axes=(0, None))(xs, p)
    vjaxpr = jax.make_jaxpr(jax.vmap(fn, in_axes=(0, None)))(xs, p)
  ta, tb = f(x, p)
  np.testing.assert_array_equal(a, _padded(ta.numpy(), 4, 0))
  np.testing.assert_array_equal(b, _padded(tb.numpy(), 4, 0))
  xt = tf.constant(x)
  with tf.GradientTape() as tape:
    tape.watch(xt)
    ta, tb = f(xt, p)
    tloss = tf.reduce_sum(ta) + tf.reduce_sum(tb)
  np.testing.assert_array_equal(g, tape.gradient(tloss, xt).numpy())
  assert {"tf.DynamicStitch", "tf.Where"} <= jaxpr_primitives(grad_jaxpr)
  for i in range(2):
    ta, tb = f(xs[i], p)
    np.testing.assert_array_equal(ba[i], _padded(ta.numpy(), 4, 0))
    np.testing.assert_array_equal(bb[i], _padded(tb.numpy(), 4, 0))
  assert "tf.DynamicPartition" in jaxpr_primitives(vjaxpr)


def test_bounded_dynamic_partition_checks_its_partitions_on_request():
  @tf.function
  def f(x, p):
    return tf.dynamic_partition(x, p, 2)

  spec = (tf.TensorSpec([3], F32), tf.TensorSpec([3], tf.int32))
  x, p = np.float32([1, 2, 3]), np.int32([0, 2, 1])
  with tfprims.override_config("dynamic_shape_bounds", {"DynamicPartition": 3}):
    fn = tfprims.convert_functional(f, *spec)
    a, b = jax.jit(fn)(x, p)  # the out-of-range row is in no partition
    np.testing.assert_array_equal(a, [1, 0, 0])
    np.testing.assert_array_equal(b, [3, 0, 0])
    with pytest.raises(tfprims.errors.OpError, match="partitions\\[1\\] = 2 is not in"):
      fn(x, p)  # known values: TF's error
    with tfprims.override_config("runtime_checks", True):
      checked = jax.jit(lambda x, p: fn(x, p))  # a new trace: the config is read then
      with pytest.raises(Exception, match="partitions must be in"):
        jax.block_until_ready(checked(x, p))
      jax.block_until_ready(checked(x, np.int32([0, 1, 1])))


def test_bounds_must_be_non_negative_ints():
  with tfprims.override_config("dynamic_shape_bounds", {"Where": 2.5}):
    fn = tfprims.convert_functional(tf.function(lambda x: tf.where(x)), tf.TensorSpec([3], F32))
    with pytest.raises(tfprims.ConversionError, match="non-negative int"):
      jax.jit(fn)(np.float32([1, 0, 2]))
