"""TensorList / TensorArray ops vs TF: values, grads (tf.GradientTape), vmap, jit, errors."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import tensorflow as tf
from tensorflow.python.ops import list_ops

import tfprims
from tfprims.ops import tensorlist
from helpers import jaxpr_primitives

RTOL = ATOL = 1e-6
X = np.arange(12, dtype=np.float32).reshape(4, 3) / 7 - 0.5


def _convert(f, *args, autograph=False):
  specs = [tf.TensorSpec(np.shape(a), tf.as_dtype(np.asarray(a).dtype)) for a in args]
  return tfprims.convert_functional(tf.function(f, autograph=autograph), *specs)


def _check(f, x=X, grad=True, autograph=False):
  """Values (eager and jit), grad of a weighted sum vs TF, vmap vs per-example."""
  fn = _convert(f, x, autograph=autograph)
  want = [np.asarray(t) for t in tf.nest.flatten(f(tf.constant(x)))]
  got = jax.tree_util.tree_leaves(fn(x))
  for g, w in zip(got, want):
    np.testing.assert_allclose(g, w, rtol=RTOL, atol=ATOL)
  for g, w in zip(jax.tree_util.tree_leaves(jax.jit(fn)(x)), want):
    np.testing.assert_allclose(g, w, rtol=RTOL, atol=ATOL)
  if grad:

    def loss(a):
      return sum(
        jnp.sum(o * (1 + jnp.arange(o.size).reshape(o.shape)))
        for o in jax.tree_util.tree_leaves(fn(a))
        if jnp.issubdtype(o.dtype, jnp.floating)
      )

    xt = tf.constant(x)
    with tf.GradientTape() as tape:
      tape.watch(xt)
      y = tf.add_n(
        [
          tf.reduce_sum(o * (1 + np.arange(np.size(o)).reshape(np.shape(o))))
          for o in tf.nest.flatten(f(xt))
          if o.dtype.is_floating
        ]
      )
    np.testing.assert_allclose(
      jax.grad(loss)(x), tape.gradient(y, xt).numpy(), rtol=1e-5, atol=1e-5
    )
  xs = np.stack([x, -x, x * 2])
  vm = jax.vmap(fn)(xs)
  for k in range(3):
    for g, w in zip(jax.tree_util.tree_leaves(vm), tf.nest.flatten(f(tf.constant(xs[k])))):
      np.testing.assert_allclose(g[k], w, rtol=RTOL, atol=ATOL)
  return fn


def test_tensor_array_write_read_stack():
  def f(x):
    ta = tf.TensorArray(tf.float32, size=4, element_shape=[3])
    ta = ta.write(0, x[1] * 2.0).write(2, tf.sin(x[0]))
    return ta.stack(), ta.read(2), ta.read(1), ta.size()

  fn = _check(f)
  prims = jaxpr_primitives(jax.make_jaxpr(fn)(X))
  assert {"tf.TensorListSetItem", "tf.TensorListGetItem"} <= prims


def test_tensor_array_unstack_gather_scatter_concat():
  def f(x):
    ta = tf.TensorArray(tf.float32, size=4).unstack(x)
    g = ta.gather([3, 1, 1])
    ta2 = tf.TensorArray(tf.float32, size=5).scatter([4, 0], tf.cos(x[:2]))
    return g, ta2.stack(), ta.concat()

  _check(f)


def test_tensor_array_split_and_element_shape():
  def f(x):
    ta = tf.TensorArray(tf.float32, size=2, infer_shape=False).split(tf.reshape(x, [12]), [6, 6])
    return ta.stack() * 2.0, ta.element_shape.rank or 0

  fn = _convert(f, X)
  np.testing.assert_allclose(fn(X)[0], f(tf.constant(X))[0])


def test_list_ops_push_pop_resize_length_element_shape():
  def f(x):
    lst = list_ops.empty_tensor_list(element_shape=[3], element_dtype=tf.float32)
    lst = list_ops.tensor_list_push_back(lst, x[0])
    lst = list_ops.tensor_list_push_back(lst, x[1] * 3.0)
    lst = list_ops.tensor_list_push_back(lst, tf.exp(x[2]))
    lst, last = list_ops.tensor_list_pop_back(lst, element_dtype=tf.float32)
    lst = list_ops.tensor_list_resize(lst, 4)
    stacked = list_ops.tensor_list_stack(lst, element_dtype=tf.float32)
    return (
      stacked,
      last,
      list_ops.tensor_list_length(lst),
      list_ops.tensor_list_element_shape(lst, shape_type=tf.int32),
    )

  fn = _check(f)
  assert {"tf.TensorListPushBack", "tf.TensorListPopBack"} <= jaxpr_primitives(
    jax.make_jaxpr(fn)(X)
  )


def test_list_ops_from_tensor_get_set_gather_scatter():
  def f(x):
    lst = list_ops.tensor_list_from_tensor(x, element_shape=[3])
    lst = list_ops.tensor_list_set_item(lst, 1, tf.tanh(x[3]))
    item = list_ops.tensor_list_get_item(lst, 1, element_dtype=tf.float32)
    g = list_ops.tensor_list_gather(lst, [0, 3], element_dtype=tf.float32)
    lst = list_ops.tensor_list_scatter(x[:2] * 5.0, [3, 0], input_handle=lst)
    return item, g, list_ops.tensor_list_stack(lst, element_dtype=tf.float32)

  _check(f)


def test_uninitialized_elements_read_as_zeros():
  def f(x):
    ta = tf.TensorArray(tf.float32, size=3, element_shape=[3])
    return ta.write(1, x[0]).stack()

  _check(f)


def test_dynamic_size_tensor_array_in_a_counted_loop():
  def f(x):
    ta = tf.TensorArray(tf.float32, size=0, dynamic_size=True)
    for i in tf.range(4):
      ta = ta.write(i, x[i] * tf.cast(i + 1, tf.float32))
    return ta.stack()

  fn = _check(f, autograph=True)
  assert "tf.TensorListSetItem" in jaxpr_primitives(jax.make_jaxpr(fn)(X))


def test_tensor_array_in_while_loop_with_traced_index():
  def f(x):
    ta = tf.TensorArray(tf.float32, size=4)

    def body(i, ta, acc):
      acc = acc * 0.5 + x[0] * tf.cast(i, tf.float32)
      return i + 1, ta.write(i, acc), acc

    _, ta, _ = tf.while_loop(lambda i, *_: i < 4, body, [0, ta, tf.zeros(3)])
    return ta.stack()

  fn = _check(f)
  jaxpr = jax.make_jaxpr(fn)(X)
  assert "tf.While" in jaxpr_primitives(jaxpr)


@pytest.mark.parametrize("max_iterations", [None, 6])
def test_tensor_array_with_unknown_element_shape_in_data_dependent_loops(max_iterations):
  """The element shape is found by tracing the body (while_loop, or a scan with an
  early exit when the loop is bounded)."""

  def f(x):
    ta = tf.TensorArray(tf.float32, size=6)

    def body(i, a, ta):
      return [i + 1, a * 0.5, ta.write(i % 6, a)]

    _, a, ta = tf.while_loop(
      lambda i, a, ta: tf.reduce_sum(tf.abs(a)) > 0.1,
      body,
      [0, x[0], ta],
      maximum_iterations=max_iterations,
    )
    return ta.stack(), a

  fn = _check(f)  # reverse mode too: unbounded loops recompute from checkpoints
  prims = jaxpr_primitives(jax.make_jaxpr(fn)(X))
  assert ("tf.While.unbounded" in prims) == (max_iterations is None)


def test_list_size_unknown_at_trace_time_is_a_clear_error():
  def f(x):
    n = tf.cast(tf.reduce_sum(x) > 0, tf.int32) + 2
    return tf.TensorArray(tf.float32, size=n).write(0, x[0]).stack()

  fn = _convert(f, X)
  np.testing.assert_array_equal(fn(X), f(tf.constant(X)).numpy())  # eager: n is known
  with pytest.raises(tfprims.TensorListSizeError, match="num_elements"):
    jax.jit(fn)(X)


def test_growing_list_in_a_dynamic_loop_is_a_clear_error():
  def f(x):
    ta = tf.TensorArray(tf.float32, size=0, dynamic_size=True)

    def body(i, a, ta):
      return i + 1, a * 0.5, ta.write(i, a)

    _, _, ta = tf.while_loop(lambda i, a, ta: tf.reduce_sum(a) > 0.1, body, [0, x[0], ta])
    return ta.stack()

  fn = _convert(f, X)
  with pytest.raises(tfprims.TFPrimsError, match="trace time"):
    fn(np.abs(X))


def test_out_of_range_read_with_a_concrete_index():
  def f(x):
    return tf.TensorArray(tf.float32, size=2).unstack(x[:2]).read(3)

  fn = _convert(f, X)
  with pytest.raises(tfprims.OpError, match="out of range"):
    fn(X)


def test_primitives_rules_directly():
  items = jnp.asarray(X)
  item = jnp.asarray([1.0, 2.0, 3.0])
  # SetItem is linear in (items, item) jointly; GetItem transposes to SetItem.
  f = lambda a, b: tensorlist.SetItem(a, 2, b)
  y, ty = jax.jvp(f, (items, item), (jnp.ones_like(items), jnp.ones_like(item)))
  np.testing.assert_allclose(y, items.at[2].set(item))
  np.testing.assert_allclose(ty, jnp.ones_like(items))
  ga, gb = jax.grad(lambda a, b: jnp.sum(f(a, b) * jnp.arange(12.0).reshape(4, 3)), argnums=(0, 1))(
    items, item
  )
  np.testing.assert_allclose(gb, [6.0, 7.0, 8.0])
  np.testing.assert_allclose(ga[2], 0.0)
  grad_jaxpr = jax.make_jaxpr(jax.grad(lambda a: jnp.sum(tensorlist.GetItem(a, 1))))(items)
  assert "tf.TensorListSetItem" in jaxpr_primitives(grad_jaxpr)
  # PushBack and PopBack are each other's transposes.
  g = jax.grad(lambda a, b: jnp.sum(tensorlist.PushBack(a, b) ** 2), argnums=(0, 1))(items, item)
  np.testing.assert_allclose(g[0], 2 * items)
  np.testing.assert_allclose(g[1], 2 * item)


# --- V1 / rarely emitted variants, built with tf.raw_ops ----------------------------------


def test_scatter_v1_and_concat_v1():
  def f(x):
    lst = tf.raw_ops.TensorListScatter(
      tensor=tf.sin(x[:2]), indices=[3, 1], element_shape=tf.constant([3])
    )
    stacked = tf.raw_ops.TensorListStack(
      input_handle=lst, element_dtype=tf.float32, element_shape=[3]
    )
    lst2 = tf.raw_ops.TensorListFromTensor(
      tensor=tf.reshape(x, [2, 2, 3]) * 2.0, element_shape=tf.constant([2, 3])
    )
    cat, lengths = tf.raw_ops.TensorListConcat(
      input_handle=lst2, element_dtype=tf.float32, element_shape=[2, 3]
    )
    return stacked, cat, lengths

  fn = _check(f)
  prims = jaxpr_primitives(jax.make_jaxpr(fn)(X))
  assert {"tf.TensorListScatter", "tf.TensorListConcat"} <= prims


def test_scatter_v1_with_traced_indices_is_a_clear_error():
  def f(x):
    idx = tf.cast(tf.reduce_sum(x) > 0, tf.int32) + tf.constant([0, 1])
    lst = tf.raw_ops.TensorListScatter(tensor=x[:2], indices=idx, element_shape=tf.constant([3]))
    return tf.raw_ops.TensorListStack(input_handle=lst, element_dtype=tf.float32, element_shape=[3])

  with pytest.raises(tfprims.TensorListSizeError, match="num_elements"):
    _convert(f, X)(X)


def _concat_lists(x):
  a = tf.raw_ops.TensorListFromTensor(tensor=tf.exp(x[:3]), element_shape=tf.constant([3]))
  b = tf.raw_ops.TensorListReserve(
    element_shape=tf.constant([3]), num_elements=2, element_dtype=tf.float32
  )
  b = tf.raw_ops.TensorListSetItem(input_handle=b, index=1, item=x[3] * 4.0)
  ab = tf.raw_ops.TensorListConcatLists(input_a=a, input_b=b, element_dtype=tf.float32)
  ba = tf.raw_ops.TensorListConcatLists(input_a=b, input_b=a, element_dtype=tf.float32)
  return [
    tf.raw_ops.TensorListStack(input_handle=h, element_dtype=tf.float32, element_shape=[3])
    for h in (ab, ba)
  ] + [tf.raw_ops.TensorListLength(input_handle=ab)]


def test_concat_lists_values_vmap_and_tf_gradient_semantics():
  fn = _check(_concat_lists, grad=False)
  assert "tf.TensorListConcatLists" in jaxpr_primitives(jax.make_jaxpr(fn)(X))
  # TF declares TensorListConcatLists not differentiable: no gradient flows through it.
  xt = tf.constant(X)
  with tf.GradientTape() as tape:
    tape.watch(xt)
    y = tf.reduce_sum(_concat_lists(xt)[0]) + tf.reduce_sum(xt)
  want = tape.gradient(y, xt).numpy()
  got = jax.grad(lambda a: jnp.sum(fn(a)[0]) + jnp.sum(a))(X)
  np.testing.assert_allclose(got, want)
  np.testing.assert_allclose(got, np.ones_like(X))


def test_zeros_like_of_a_list_zeroes_its_tensors():
  # TF's gradient code zeroes a loop's list accumulators with ZerosLike (a variant
  # input): the list keeps its length and element shape, every element is zero.
  def f(x):
    lst = list_ops.tensor_list_from_tensor(x, element_shape=[3])
    zeros = tf.raw_ops.ZerosLike(x=lst)
    empty = tf.raw_ops.ZerosLike(x=list_ops.tensor_list_reserve([3], 2, tf.float32))
    stacked = list_ops.tensor_list_stack(zeros, tf.float32, element_shape=[3])
    return (
      stacked,
      list_ops.tensor_list_length(zeros),
      list_ops.tensor_list_stack(empty, tf.float32, element_shape=[3]),
    )

  _check(f, grad=False)


def test_conv_lstm_gradient_tape_training_step_matches_tf():
  # TF's gradient of a Keras LSTM's while loop: ZerosLike and AddN of list
  # accumulators, and a backward loop reserving lists of sizes popped from what the
  # forward loop pushed (constants, so the backward loop unrolls with known sizes).
  keras = pytest.importorskip("keras")
  model = keras.Sequential(
    [
      keras.layers.Input((8, 6, 3)),
      keras.layers.Conv2D(4, 3, padding="same"),
      keras.layers.Reshape((8, 24)),
      keras.layers.LSTM(5),
      keras.layers.Dense(2),
    ]
  )

  @tf.function
  def step(x, y):
    with tf.GradientTape() as tape:
      loss = tf.reduce_mean((model(x, training=True) - y) ** 2)
    return loss, tape.gradient(loss, model.trainable_variables)

  x = np.random.default_rng(0).normal(size=(2, 8, 6, 3)).astype(np.float32)
  y = np.random.default_rng(1).normal(size=(2, 2)).astype(np.float32)
  loss, grads = step(x, y)
  fn, params = tfprims.convert(step, x, y)
  for (got_loss, got_grads), _ in (fn(params, x, y), jax.jit(fn)(params, x, y)):
    np.testing.assert_allclose(got_loss, loss.numpy(), rtol=1e-5)
    assert len(got_grads) == len(grads) == 7
    for g, w in zip(got_grads, grads):
      np.testing.assert_allclose(g, w.numpy(), rtol=1e-4, atol=1e-6)
