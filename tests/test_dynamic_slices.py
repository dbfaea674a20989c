"""Slices positioned by runtime values: Slice with a runtime begin and a static size,
StridedSlice/StridedSliceGrad whose runtime begin/end only position shrunk dims
(``x[i]``, ``x[:, i]``). Values under jit, gradients (JAX's and TF's own gradient
graphs), vmap over the data or the index, and TF's out-of-range errors."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import tensorflow as tf

import tfprims
from helpers import jaxpr_primitives

X = (np.arange(60, dtype=np.float32).reshape(3, 4, 5) - 30) / 7
I32 = tf.TensorSpec((), tf.int32)
F32 = tf.float32


def _convert(f):
  f = tf.function(f)
  return f, tfprims.convert_functional(f, tf.TensorSpec(X.shape), I32)


def _check_positioned(f, indices):
  """Eager and jitted values, JAX's gradient vs TF's, vmap over x and over i."""
  tf_f, fn = _convert(f)
  jitted = jax.jit(fn)
  for i in indices:
    want = tf_f(X, np.int32(i)).numpy()
    np.testing.assert_array_equal(fn(X, np.int32(i)), want)
    np.testing.assert_array_equal(jitted(X, np.int32(i)), want)
    xt = tf.constant(X)
    with tf.GradientTape() as tape:
      tape.watch(xt)
      y = tf.reduce_sum(tf_f(xt, np.int32(i)) ** 3)
    grad = jax.jit(jax.grad(lambda x: jnp.sum(fn(x, np.int32(i)) ** 3)))(X)
    np.testing.assert_allclose(grad, tape.gradient(y, xt).numpy(), rtol=1e-6)
  batch = np.int32(indices)
  by_index = jax.jit(jax.vmap(fn, in_axes=(None, 0)))(X, batch)
  by_data = jax.jit(jax.vmap(fn, in_axes=(0, None)))(np.stack([X, -X]), batch[-1])
  for k, i in enumerate(indices):
    np.testing.assert_array_equal(by_index[k], tf_f(X, np.int32(i)).numpy())
  np.testing.assert_array_equal(by_data[1], tf_f(-X, np.int32(indices[-1])).numpy())
  return fn


def test_slice_with_a_runtime_begin_is_a_dynamic_slice():
  fn = _check_positioned(lambda x, i: tf.slice(x, [0, i, 1], [2, 2, 3]) * 2.0, [0, 1, 2])
  jaxpr = str(jax.make_jaxpr(fn)(X, np.int32(1)))
  assert "tf.Slice[size=(2, 2, 3)]" in jaxpr, jaxpr  # begin is an operand
  # the transpose places the cotangent back where it was read, TF-named
  grad_jaxpr = jax.make_jaxpr(jax.grad(lambda x: jnp.sum(fn(x, np.int32(1)))))(X)
  assert "tf.XlaDynamicUpdateSlice" in jaxpr_primitives(grad_jaxpr)


def test_slice_size_minus_one_with_a_runtime_begin_is_refused():
  _, fn = _convert(lambda x, i: tf.slice(x, [0, i, 0], [-1, -1, 2]))
  np.testing.assert_array_equal(fn(X, np.int32(1)), X[:, 1:, :2])  # eager: known values
  with pytest.raises(tfprims.StaticInputError, match="size -1"):
    jax.jit(fn)(X, np.int32(1))


def test_slice_out_of_range_begin_raises_as_tf_or_clamps_under_jit():
  tf_f, fn = _convert(lambda x, i: tf.slice(x, [0, i, 0], [1, 2, 5]))
  with pytest.raises(tf.errors.InvalidArgumentError):
    tf_f(X, np.int32(3))
  with pytest.raises(tfprims.errors.OpError, match="Slice"):
    fn(X, np.int32(3))  # known values: refused as TF does
  # traced: XLA clamps the start (documented), unless runtime_checks is on
  np.testing.assert_array_equal(jax.jit(fn)(X, np.int32(3)), X[:1, 2:4])
  with tfprims.override_config("runtime_checks", True):
    checked = jax.jit(lambda x, i: fn(x, i))
    with pytest.raises(Exception, match="within the input shape"):
      jax.block_until_ready(checked(X, np.int32(3)))
    np.testing.assert_array_equal(checked(X, np.int32(2)), X[:1, 2:4])


@pytest.mark.parametrize(
  "name,f",
  [
    ("x[i]", lambda x, i: x[i]),
    ("x[:, i]", lambda x, i: x[:, i]),
    ("x[..., i]", lambda x, i: x[..., i]),
    ("x[i, :, ::2]", lambda x, i: x[i, :, ::-2]),
    ("x[-1 - i, i]", lambda x, i: x[-1 - i, i]),
    ("x[:, i, newaxis]", lambda x, i: x[:, i, tf.newaxis]),
  ],
  ids=lambda v: v if isinstance(v, str) else "",
)
def test_strided_slice_indexed_by_a_runtime_value(name, f):
  fn = _check_positioned(f, [0, 1, 2])
  assert "tf.StridedSlice" in jaxpr_primitives(jax.make_jaxpr(fn)(X, np.int32(1)))


def test_tf_gradient_graphs_of_runtime_indexing_convert():
  # tape.gradient inside the tf.function: StridedSliceGrad with runtime begin/end
  @tf.function
  def grad_of_index(x, i):
    with tf.GradientTape() as tape:
      tape.watch(x)
      y = tf.reduce_sum((x[:, i] * x[:, 2 - i]) ** 3)
    return tape.gradient(y, x)

  fn = tfprims.convert_functional(grad_of_index, tf.TensorSpec(X.shape), I32)
  for i in range(3):
    np.testing.assert_allclose(
      jax.jit(fn)(X, np.int32(i)), grad_of_index(X, np.int32(i)).numpy(), rtol=1e-6
    )
  by_index = jax.vmap(fn, in_axes=(None, 0))(X, np.int32([0, 2]))
  np.testing.assert_allclose(by_index[1], grad_of_index(X, np.int32(2)).numpy(), rtol=1e-6)
  assert "tf.StridedSliceGrad" in jaxpr_primitives(jax.make_jaxpr(fn)(X, np.int32(1)))
  # and differentiating the converted gradient (StridedSliceGrad's transpose)
  hess = jax.grad(lambda x: jnp.sum(fn(x, np.int32(1)) ** 2))(X)
  xt = tf.constant(X)
  with tf.GradientTape() as tape:
    tape.watch(xt)
    y = tf.reduce_sum(grad_of_index(xt, np.int32(1)) ** 2)
  np.testing.assert_allclose(hess, tape.gradient(y, xt).numpy(), rtol=1e-5)


def test_strided_slice_index_out_of_range():
  tf_f, fn = _convert(lambda x, i: x[:, i])
  with pytest.raises(tf.errors.InvalidArgumentError):
    tf_f(X, np.int32(4))
  with pytest.raises(tfprims.errors.OpError, match="out of bounds"):
    fn(X, np.int32(4))
  np.testing.assert_array_equal(fn(X, np.int32(-4)), X[:, 0])  # TF wraps negatives
  np.testing.assert_array_equal(jax.jit(fn)(X, np.int32(-4)), X[:, 0])
  with tfprims.override_config("runtime_checks", True):
    checked = jax.jit(lambda x, i: fn(x, i))
    with pytest.raises(Exception, match="out of bounds"):
      jax.block_until_ready(checked(X, np.int32(-5)))


def test_runtime_range_slices_that_decide_the_shape_are_refused_by_name():
  _, fn = _convert(lambda x, i: x[:, i:])
  with pytest.raises(tfprims.StaticInputError, match="StridedSlice node .*'begin'"):
    jax.jit(fn)(X, np.int32(1))


def test_greedy_decoding_loop_slices_the_prompt_at_a_runtime_index():
  # keras-hub's generate: a while loop to a runtime stop index reads one token per
  # step with ops.slice(prompt, [0, idx], [batch, 1]) and writes it back.
  emb = np.random.default_rng(0).normal(size=(11, 4)).astype(np.float32)
  proj = np.random.default_rng(1).normal(size=(4, 11)).astype(np.float32)

  @tf.function
  def generate(prompt, start, stop):
    def body(idx, tokens):
      tok = tf.slice(tokens, [0, idx - 1], [2, 1])[:, 0]
      logits = tf.matmul(tf.gather(emb, tok), proj)
      nxt = tf.argmax(logits, axis=-1, output_type=tf.int32)
      tokens = tf.tensor_scatter_nd_update(
        tokens, tf.stack([tf.range(2), tf.fill([2], idx)], axis=1), nxt
      )
      return idx + 1, tokens

    _, out = tf.while_loop(lambda idx, _: idx < stop, body, (start, prompt))
    return out

  prompt = np.int32([[1, 5, 0, 0, 0, 0], [2, 3, 0, 0, 0, 0]])
  fn = tfprims.convert_functional(generate, tf.TensorSpec((2, 6), tf.int32), I32, I32)
  jitted = jax.jit(fn)
  for start, stop in ((2, 6), (2, 4), (1, 5)):
    want = generate(prompt, np.int32(start), np.int32(stop)).numpy()
    np.testing.assert_array_equal(jitted(prompt, np.int32(start), np.int32(stop)), want)


# --- the value analysis: runtime integers proven constant --------------------------------


def test_a_runtime_range_of_constant_extent_is_a_dynamic_slice():
  # x[:, a:a + 2]: begin and end are runtime, end - begin is 2 (value analysis)
  fn = _check_positioned(lambda x, i: x[:, i : i + 2, 1:], [0, 1, 2])
  jaxpr = str(jax.make_jaxpr(fn)(X, np.int32(1)))
  assert "sizes=(-1, 2, -1)" in jaxpr, jaxpr
  _check_positioned(lambda x, i: x[:, i + 1 : i + 3, 1:4:2] * x[:, i : i + 2, 0:3:2], [0, 1])


def test_a_runtime_range_out_of_bounds_clamps_under_jit_or_raises_with_checks():
  tf_f, fn = _convert(lambda x, i: x[:, i : i + 3])
  np.testing.assert_array_equal(fn(X, np.int32(2)), tf_f(X, np.int32(2)).numpy())  # clipped
  np.testing.assert_array_equal(jax.jit(fn)(X, np.int32(2)), X[:, 1:4])  # start clamped
  with tfprims.override_config("runtime_checks", True):
    checked = jax.jit(lambda x, i: fn(x, i))
    with pytest.raises(Exception, match="out of bounds"):
      jax.block_until_ready(checked(X, np.int32(2)))
    np.testing.assert_array_equal(checked(X, np.int32(1)), X[:, 1:4])


def test_shape_arithmetic_that_cancels_is_static():
  @tf.function
  def f(x, n):
    m = n * 3 + 2
    return tf.reshape(x, [m - 3 * n, -1]) + tf.cast(tf.maximum(n, 7) - tf.maximum(n, 7), F32)

  fn = tfprims.convert_functional(f, tf.TensorSpec(X.shape), I32)
  np.testing.assert_array_equal(jax.jit(fn)(X, np.int32(5)), f(X, np.int32(5)).numpy())
  jaxpr = jax.make_jaxpr(fn)(X, np.int32(5))
  assert "tf.Reshape[shape=(2, -1)]" in str(jaxpr)


def test_values_the_analysis_cannot_prove_stay_refused():
  for f in (
    lambda x, n: tf.reshape(x, [n, -1]),
    lambda x, n: tf.reshape(x, [tf.minimum(tf.maximum(n, 2), 3), -1]),
    lambda x, n: x[:, :n],
  ):
    fn = tfprims.convert_functional(tf.function(f), tf.TensorSpec(X.shape), I32)
    with pytest.raises(tfprims.StaticInputError):
      jax.jit(fn)(X, np.int32(2))


def test_bincount_with_equal_min_and_max_length_is_static():
  # size = min(max(max(v) + 1, n), n) = n whatever v holds
  @tf.function
  def f(v, w):
    return (
      tf.math.bincount(v, minlength=6, maxlength=6),
      tf.math.bincount(v, weights=w, minlength=6, maxlength=6),
    )

  fn = tfprims.convert_functional(f, tf.TensorSpec((2, 4), tf.int32), tf.TensorSpec((2, 4)))
  v, w = np.int32([[1, 2, 2, 5], [0, 0, 3, 1]]), np.float32([[1, 2, 3, 4], [5, 6, 7, 8]])
  for got, want in zip(jax.jit(fn)(v, w), f(v, w)):
    np.testing.assert_allclose(got, want.numpy())
  assert "size=6" in str(jax.make_jaxpr(fn)(v, w))


def test_keras_category_encoding_and_random_crops_run_under_jit():
  keras = pytest.importorskip("keras")
  tokens = np.int32([[1, 2, 2], [5, 0, 0]])
  for mode in ("count", "multi_hot", "one_hot"):
    layer = keras.layers.CategoryEncoding(num_tokens=6, output_mode=mode)
    f = tf.function(lambda t: layer(t))
    ids = tokens[:, :1] if mode == "one_hot" else tokens
    fn = tfprims.convert_functional(f, tf.TensorSpec(ids.shape, tf.int32))
    np.testing.assert_array_equal(jax.jit(fn)(ids), f(ids).numpy())
  images = np.random.default_rng(0).normal(size=(2, 10, 12, 3)).astype(np.float32)
  layer = keras.layers.RandomCrop(6, 7, seed=1)
  f = tf.function(lambda t: layer(t, training=True))
  fn, params = tfprims.convert(f, tf.TensorSpec(images.shape))
  out, _ = jax.jit(fn)(params, images)
  # the draw is jax.random's (docs/semantics/random.md): a 6 x 7 window of the images
  windows = [images[:, a : a + 6, b : b + 7] for a in range(5) for b in range(6)]
  assert any(np.array_equal(out, w) for w in windows)
  layer = keras.layers.RandomTranslation(0.2, 0.2, seed=1)
  f = tf.function(lambda t: layer(t, training=True))
  fn, params = tfprims.convert(f, tf.TensorSpec(images.shape))
  assert jax.jit(fn)(params, images)[0].shape == images.shape


def test_tf_gradient_graph_of_a_runtime_slice_pads_by_runtime_amounts():
  # TF's gradient of tf.slice is Pad(dy, [begin, shape - begin - size]): runtime
  # paddings whose total per dim the analysis proves constant -> tf.Pad[widths]
  @tf.function
  def grad_of_slice(x, i):
    with tf.GradientTape() as tape:
      tape.watch(x)
      y = tf.reduce_sum(tf.slice(x, [0, i, 1], [2, 2, 3]) ** 3)
    return tape.gradient(y, x)

  fn = tfprims.convert_functional(grad_of_slice, tf.TensorSpec(X.shape), I32)
  for i in range(3):
    np.testing.assert_allclose(
      jax.jit(fn)(X, np.int32(i)), grad_of_slice(X, np.int32(i)).numpy(), rtol=1e-6
    )
  assert "widths=(1, 2, 2)" in str(jax.make_jaxpr(fn)(X, np.int32(1)))
  by_index = jax.jit(jax.vmap(fn, in_axes=(None, 0)))(X, np.int32([0, 2]))
  by_data = jax.jit(jax.vmap(fn, in_axes=(0, None)))(np.stack([X, -X]), np.int32(2))
  np.testing.assert_allclose(by_index[1], grad_of_slice(X, np.int32(2)).numpy(), rtol=1e-6)
  np.testing.assert_allclose(by_data[1], grad_of_slice(-X, np.int32(2)).numpy(), rtol=1e-6)
  # second order: Pad's transpose is the runtime-begin Slice
  hess = jax.grad(lambda x: jnp.sum(fn(x, np.int32(1)) ** 2))(X)
  xt = tf.constant(X)
  with tf.GradientTape() as tape:
    tape.watch(xt)
    y = tf.reduce_sum(grad_of_slice(xt, np.int32(1)) ** 2)
  np.testing.assert_allclose(hess, tape.gradient(y, xt).numpy(), rtol=1e-5)


def test_keras_style_decoding_with_a_kv_cache_runs_under_jit():
  # keras-hub's cached generate: keras.ops.slice of the prompt and slice_update of a
  # key/value cache (XlaDynamicUpdateSlice) at a runtime index, in a while loop that
  # stops at a runtime length.
  keras = pytest.importorskip("keras")
  if keras.backend.backend() != "tensorflow":
    pytest.skip("keras.ops must build TF ops")
  ops = keras.ops
  rng = np.random.default_rng(0)
  emb = rng.normal(size=(11, 4)).astype(np.float32)
  wq, wk, wv, wo = (rng.normal(size=(4, 4)).astype(np.float32) for _ in range(4))
  proj = rng.normal(size=(4, 11)).astype(np.float32)

  @tf.function
  def generate(prompt, start, stop):
    batch, length = 2, 8
    cache = tf.zeros((batch, 2, length, 4))  # [batch, key/value, position, dim]

    def body(idx, tokens, cache):
      h = tf.gather(emb, ops.slice(tokens, [0, idx - 1], [batch, 1])[:, 0])
      kv = tf.stack([h @ wk, h @ wv], axis=1)[:, :, None, :]
      cache = ops.slice_update(cache, [0, 0, idx - 1, 0], kv)
      scores = tf.einsum("bd,bpd->bp", h @ wq, cache[:, 0])
      scores = tf.where(tf.range(length)[None, :] < idx, scores, -1e9)
      att = tf.einsum("bp,bpd->bd", tf.nn.softmax(scores), cache[:, 1])
      nxt = tf.argmax((att @ wo) @ proj, axis=-1, output_type=tf.int32)
      return idx + 1, ops.slice_update(tokens, [0, idx], nxt[:, None]), cache

    return tf.while_loop(lambda idx, *_: idx < stop, body, (start, prompt, cache))[1]

  prompt = np.int32([[1, 5, 0, 0, 0, 0, 0, 0], [2, 3, 0, 0, 0, 0, 0, 0]])
  fn = tfprims.convert_functional(generate, tf.TensorSpec((2, 8), tf.int32), I32, I32)
  jitted = jax.jit(fn)
  for start, stop in ((2, 8), (2, 5), (1, 7)):
    want = generate(prompt, np.int32(start), np.int32(stop)).numpy()
    np.testing.assert_array_equal(jitted(prompt, np.int32(start), np.int32(stop)), want)
  prims = jaxpr_primitives(jax.make_jaxpr(fn)(prompt, np.int32(2), np.int32(8)))
  assert {"tf.Slice", "tf.XlaDynamicUpdateSlice"} <= prims, prims


def test_strided_slice_updates_at_runtime_positions():
  # TensorStridedSliceUpdate (x[:, i:i + 2] = v) and a variable's slice assignment
  # (w[:, i].assign(v): ResourceStridedSliceAssign) with a runtime i.
  v = np.full((3, 2, 5), 9.0, np.float32)

  @tf.function
  def update(x, v, i):
    return tf.raw_ops.TensorStridedSliceUpdate(
      input=x,
      begin=tf.stack([0, i, 0]),
      end=tf.stack([0, i + 2, 0]),
      strides=[1, 1, 1],
      value=v,
      begin_mask=5,
      end_mask=5,
    )

  fn = tfprims.convert_functional(update, tf.TensorSpec(X.shape), tf.TensorSpec(v.shape), I32)
  for i in range(3):
    np.testing.assert_array_equal(jax.jit(fn)(X, v, np.int32(i)), update(X, v, np.int32(i)).numpy())
  assert "sizes=(-1, 2, -1)" in str(jax.make_jaxpr(fn)(X, v, np.int32(1)))
  grads = jax.jit(jax.grad(lambda x, v: jnp.sum(fn(x, v, np.int32(1)) ** 2), (0, 1)))(X, v)
  xt, vt = tf.constant(X), tf.constant(v)
  with tf.GradientTape() as tape:
    tape.watch([xt, vt])
    y = tf.reduce_sum(update(xt, vt, np.int32(1)) ** 2)
  for g, w in zip(grads, tape.gradient(y, [xt, vt])):
    np.testing.assert_allclose(g, w.numpy(), rtol=1e-6)
  by_index = jax.vmap(fn, in_axes=(None, None, 0))(X, v, np.int32([0, 2]))
  np.testing.assert_array_equal(by_index[1], update(X, v, np.int32(2)).numpy())
  by_data = jax.vmap(fn, in_axes=(0, None, None))(np.stack([X, -X]), v, np.int32(2))
  np.testing.assert_array_equal(by_data[1], update(-X, v, np.int32(2)).numpy())

  w = tf.Variable(X)

  @tf.function
  def assign(row, i):
    w[:, i].assign(row)
    return w[0]

  fn, params = tfprims.convert(assign, tf.TensorSpec((3, 5)), I32)
  out, new = jax.jit(fn)(params, v[:, 0], np.int32(2))
  want = assign(v[:, 0], np.int32(2)).numpy()
  np.testing.assert_array_equal(out, want)
  np.testing.assert_array_equal(list(new.values())[0], w.numpy())


def test_empty_extents_at_runtime_positions():
  for f in (
    lambda x, i: x[:, i:i],
    lambda x, i: tf.slice(x, [0, i, 0], [3, 0, 5]),
    lambda x, i: x[i : i + 1, :0],
  ):
    tf_f, fn = _convert(f)
    for i in (0, 2):
      got, want = jax.jit(fn)(X, np.int32(i)), tf_f(X, np.int32(i)).numpy()
      assert got.shape == want.shape and want.size == 0, (got.shape, want.shape)
