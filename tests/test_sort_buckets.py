"""Sorting, selection, buckets and counts in real programs (tf.sort, tf.argsort,
tf.math.top_k, a beam-search step, Keras Discretization/CategoryEncoding,
tf.math.bincount, tf.histogram_fixed_width, tf.searchsorted), converted and compared
with TF; and the choices where TF raises, is unspecified or differs
(docs/semantics/nn.md, docs/semantics/array.md)."""

import jax
import jax.numpy as jnp
import keras
import numpy as np
import pytest
import tensorflow as tf

import tfprims
from helpers import jaxpr_primitives, non_tf_primitives

F32 = tf.float32


def _ties(shape, seed=0, values=(0.0, -0.0, 1.0, 2.0, -1.5, 3.25)):
  """Values with many ties (and -0.0 beside 0.0)."""
  rng = np.random.default_rng(seed)
  return rng.choice(np.asarray(values, np.float32), size=shape)


# --- tf.sort, tf.argsort, tf.math.top_k ----------------------------------------------


@tf.function
def _sorts(x, w):
  up = tf.sort(x)
  down = tf.sort(x, direction="DESCENDING")
  order = tf.argsort(x, stable=True)
  rorder = tf.argsort(x, direction="DESCENDING", stable=True)
  top = tf.math.top_k(x, k=3)
  loss = tf.reduce_sum(w * up) + tf.reduce_sum(top.values * w[..., :3] ** 2)
  return up, down, order, rorder, top.values, top.indices, loss


def test_sort_argsort_top_k_match_tf_values_grad_and_vmap():
  spec = (tf.TensorSpec([4, 6], F32), tf.TensorSpec([4, 6], F32))
  fn = tfprims.convert_functional(_sorts, *spec)
  x = _ties((4, 6))
  w = np.random.default_rng(1).normal(size=(4, 6)).astype(np.float32)
  *outs, loss = jax.jit(fn)(x, w)
  *want, want_loss = _sorts(x, w)
  for got, expected in zip(outs, want):  # sorted values, orders, top-k: exact
    np.testing.assert_array_equal(got, expected.numpy())
  # the loss is a float32 sum: equal up to the order of its additions
  np.testing.assert_allclose(loss, want_loss.numpy(), rtol=1e-6)

  # Gradient (TF's scatters the cotangent to the selected positions; ties by index).
  g = jax.grad(lambda x: fn(x, w)[-1])(x)
  xt = tf.constant(x)
  with tf.GradientTape() as tape:
    tape.watch(xt)
    loss = _sorts(xt, w)[-1]
  np.testing.assert_allclose(g, tape.gradient(loss, xt).numpy(), rtol=1e-6)
  jaxpr = jax.make_jaxpr(jax.grad(lambda x: fn(x, w)[-1]))(x)
  assert non_tf_primitives(jaxpr, allowed={"add_any"}) == set()
  assert {"tf.TopKV2", "tf.DynamicStitch", "tf.GatherV2"} <= jaxpr_primitives(jaxpr)

  # vmap over a batch of inputs, compared with TF example by example.
  xs = np.stack([_ties((4, 6), seed=s) for s in range(3)])
  batched = jax.vmap(lambda x: fn(x, w))(xs)
  for i in range(3):
    *want, want_loss = _sorts(xs[i], w)
    for got, expected in zip(batched[:-1], want):
      np.testing.assert_array_equal(got[i], expected.numpy())
    np.testing.assert_allclose(batched[-1][i], want_loss.numpy(), rtol=1e-6)
  vjaxpr = jax.make_jaxpr(jax.vmap(lambda x: fn(x, w)))(xs)
  assert non_tf_primitives(vjaxpr) == set()
  # Per-example gradients: vmap of grad.
  gs = jax.vmap(jax.grad(lambda x: fn(x, w)[-1]))(xs)
  for i in range(3):
    np.testing.assert_allclose(gs[i], jax.grad(lambda x: fn(x, w)[-1])(xs[i]), rtol=1e-6)


def test_sort_of_integers_and_a_batch_axis_in_the_middle():
  @tf.function
  def f(x):
    return tf.sort(x), tf.argsort(x, direction="DESCENDING", stable=True)

  for dtype in (tf.int32, tf.uint8, tf.int64):
    fn = tfprims.convert_functional(f, tf.TensorSpec([3, 5], dtype))
    x = np.random.default_rng(0).integers(0, 4, size=(3, 5)).astype(dtype.as_numpy_dtype)
    for got, want in zip(fn(x), f(x)):
      np.testing.assert_array_equal(got, want.numpy())
  # TopKV2 re-binds itself with the batch axis where it is (not the last axis).
  x = _ties((5, 2, 4))
  out = jax.vmap(
    lambda r: tfprims.get_op("TopKV2")(r, k=2, sorted=True, index_type=np.dtype("int32")),
    in_axes=1,
    out_axes=1,
  )(x)
  want = tf.math.top_k(np.moveaxis(x, 1, 0), 2)
  np.testing.assert_array_equal(np.moveaxis(out[0], 1, 0), want.values.numpy())
  np.testing.assert_array_equal(np.moveaxis(out[1], 1, 0), want.indices.numpy())


def test_top_k_nan_order_is_tf_kernels():
  # TF's CPU kernel compares with `<`: a row with NaN comes out as its std::sort
  # leaves it (docs/semantics/nn.md); ours takes the same steps.
  x = np.float32([1.0, np.nan, 3.0, 3.0, -np.inf, np.nan, 0.0, -0.0, np.inf])
  values, idx = tfprims.get_op("TopKV2")(x, k=9, sorted=True, index_type=np.dtype("int32"))
  np.testing.assert_array_equal(idx, [8, 2, 0, 1, 3, 4, 5, 6, 7])
  np.testing.assert_array_equal(idx, tf.math.top_k(x, 9).indices.numpy())
  np.testing.assert_array_equal(values, x[[8, 2, 0, 1, 3, 4, 5, 6, 7]])
  y = np.float32([1.0, 3.0, 3.0, -np.inf, 0.0, -0.0, np.inf])
  ours = tfprims.get_op("TopKV2")(y, k=7, sorted=True, index_type=np.dtype("int32"))
  np.testing.assert_array_equal(ours[1], tf.math.top_k(y, 7).indices.numpy())


def test_top_k_static_k_errors_like_tf():
  op = tfprims.get_op("TopKV2")
  with pytest.raises(ValueError, match="at least k columns. Had 3, needed 4"):
    op.prepare({"input": np.zeros(3, np.float32), "k": np.int32(4)}, {})
  with pytest.raises(ValueError, match="Need k >= 0"):
    op.prepare({"input": np.zeros(3, np.float32), "k": np.int32(-1)}, {})


def test_approx_top_k_attrs_are_exact():
  x = _ties((3, 7), seed=3)
  op = tfprims.get_op("ApproxTopK")
  kw = dict(recall_target=0.9, reduction_input_size_override=-1, aggregate_to_topk=False)
  v, i = op(x, k=2, reduction_dimension=0, is_max_k=False, **kw)
  want = tf.math.top_k(-x.T, 2)
  np.testing.assert_array_equal(i, want.indices.numpy().T)
  np.testing.assert_array_equal(v, -want.values.numpy().T)
  v, i = op(x, k=4, reduction_dimension=-1, is_max_k=True, **kw)
  tv, ti = tf.math.approx_max_k(x, 4, recall_target=0.9, aggregate_to_topk=False)
  np.testing.assert_array_equal(i, ti.numpy())
  np.testing.assert_array_equal(v, tv.numpy())


def test_in_top_k_out_of_range_and_non_finite_give_false():
  p = np.float32([[0.1, 0.5, 0.5, 0.2], [np.nan, 1, 2, 3], [1, 2, np.inf, 0], [1, 2, 3, 4]])
  targets = np.int64([2, 3, 1, 7])

  @tf.function
  def f(p, t, k):
    return tf.math.in_top_k(t, p, k)

  fn = tfprims.convert_functional(
    f, tf.TensorSpec([4, 4], F32), tf.TensorSpec([4], tf.int64), tf.TensorSpec([], tf.int64)
  )
  for k in (-1, 0, 1, 2, 5):
    np.testing.assert_array_equal(fn(p, targets, np.int64(k)), f(p, targets, k).numpy())
  # Per-example k under vmap falls back to vmap of the impl; shared k re-binds InTopKV2.
  ks = np.int64([1, 3])
  out = jax.vmap(fn, in_axes=(None, None, 0))(p, targets, ks)
  for i, k in enumerate(ks):
    np.testing.assert_array_equal(out[i], f(p, targets, k).numpy())
  ps = np.stack([p, p[::-1]])
  jaxpr = jax.make_jaxpr(jax.vmap(fn, in_axes=(0, None, None)))(ps, targets, np.int64(2))
  assert "tf.InTopKV2" in jaxpr_primitives(jaxpr)


# --- a beam-search step -----------------------------------------------------------------

BATCH, BEAM, VOCAB, STEPS = 2, 3, 7, 4


@tf.function
def _beam_step(logits, scores, seqs):
  """One step of beam search: log-softmax, add to the beam scores, top-k over
  (beam, token), gather the surviving sequences and append the tokens."""
  logp = tf.nn.log_softmax(logits, axis=-1)
  total = tf.reshape(scores[:, :, None] + logp, [BATCH, BEAM * VOCAB])
  best, flat = tf.math.top_k(total, k=BEAM)
  beam, token = flat // VOCAB, flat % VOCAB
  kept = tf.gather(seqs, beam, batch_dims=1)
  return best, tf.concat([kept, token[:, :, None]], axis=2), beam


def test_beam_search_step_matches_tf():
  specs = (
    tf.TensorSpec([BATCH, BEAM, VOCAB], F32),
    tf.TensorSpec([BATCH, BEAM], F32),
    tf.TensorSpec([BATCH, BEAM, STEPS], tf.int32),
  )
  fn = tfprims.convert_functional(_beam_step, *specs)
  rng = np.random.default_rng(0)
  logits = rng.normal(size=(BATCH, BEAM, VOCAB)).astype(np.float32)
  logits[0, 1] = logits[0, 0]  # tied candidates: the lower index wins, as TF
  scores = np.float32([[0.0, -1.0, -1.0], [-0.5, -0.5, -2.0]])
  seqs = rng.integers(0, VOCAB, size=(BATCH, BEAM, STEPS)).astype(np.int32)
  for got, want in zip(jax.jit(fn)(logits, scores, seqs), _beam_step(logits, scores, seqs)):
    np.testing.assert_allclose(got, want.numpy(), rtol=1e-6)

  # d(sum of the kept scores)/d(logits, scores) against TF.
  g = jax.grad(lambda l, s: jnp.sum(fn(l, s, seqs)[0]), argnums=(0, 1))(logits, scores)
  lt, st = tf.constant(logits), tf.constant(scores)
  with tf.GradientTape() as tape:
    tape.watch([lt, st])
    loss = tf.reduce_sum(_beam_step(lt, st, seqs)[0])
  for a, b in zip(g, tape.gradient(loss, [lt, st])):
    np.testing.assert_allclose(a, b.numpy(), rtol=1e-5, atol=1e-6)

  # vmap over independent decoding problems.
  many = rng.normal(size=(3, BATCH, BEAM, VOCAB)).astype(np.float32)
  out = jax.vmap(fn, in_axes=(0, None, None))(many, scores, seqs)
  for i in range(3):
    for got, want in zip(out, _beam_step(many[i], scores, seqs)):
      np.testing.assert_allclose(got[i], want.numpy(), rtol=1e-6)


# --- Keras preprocessing layers ----------------------------------------------------------


def test_keras_discretization():
  layer = keras.layers.Discretization(bin_boundaries=[-1.0, 0.0, 0.5, 2.0])
  f = tf.function(lambda x: layer(x))
  fn = tfprims.convert_functional(f, tf.TensorSpec([None, 3], F32))
  x = np.float32([[-2, -1, -0.0], [0.0, 0.25, 0.5], [1.9, 2.0, np.nan], [np.inf, -np.inf, 7]])
  np.testing.assert_array_equal(jax.jit(fn)(x), f(x).numpy())
  np.testing.assert_array_equal(jax.vmap(fn)(x[:, None]), f(x).numpy()[:, None])
  assert "tf.Bucketize" in str(jax.make_jaxpr(fn)(x))


@pytest.mark.parametrize("mode", ["count", "one_hot", "multi_hot"])
def test_keras_category_encoding(mode):
  layer = keras.layers.CategoryEncoding(num_tokens=6, output_mode=mode)
  shape = [5] if mode == "one_hot" else [4, 3]
  f = tf.function(lambda x: layer(x))
  x = np.random.default_rng(2).integers(0, 6, size=shape).astype(np.int32)
  # tf.math.bincount computes its size from the data, min(max(max(x) + 1, 6), 6): the
  # value analysis proves it is num_tokens (minlength == maxlength), no bound needed
  fn = tfprims.convert_functional(f, tf.TensorSpec(shape, tf.int32))
  np.testing.assert_array_equal(jax.jit(fn)(x), f(x).numpy())
  with tfprims.override_config("dynamic_shape_bounds", {"DenseBincount": 6}):
    fn = tfprims.convert_functional(f, tf.TensorSpec(shape, tf.int32))
    np.testing.assert_array_equal(jax.jit(fn)(x), f(x).numpy())
    xs = np.stack([x, (x + 1) % 6])
    np.testing.assert_array_equal(jax.vmap(fn)(xs), np.stack([f(v).numpy() for v in xs]))


# --- tf.math.bincount, tf.histogram_fixed_width, tf.searchsorted -------------------------


def test_bincount_with_weights_and_lengths():
  @tf.function
  def f(x, w):
    return (
      tf.math.bincount(x, weights=w, minlength=8, maxlength=8),
      tf.math.bincount(x, minlength=8, maxlength=8, binary_output=True),
      tf.math.bincount(x, minlength=8, maxlength=8, axis=-1),
    )

  x = np.int32([[0, 3, 3, 7], [9, 1, 1, 2]])  # 9 >= maxlength: dropped, as TF
  w = np.float32([[1.0, 2.0, 3.0, 4.0], [5.0, 6.0, 7.0, 8.0]])
  with tfprims.override_config("dynamic_shape_bounds", {"DenseBincount": 8}):
    fn = tfprims.convert_functional(f, tf.TensorSpec([2, 4], tf.int32), tf.TensorSpec([2, 4], F32))
    for got, want in zip(jax.jit(fn)(x, w), f(x, w)):
      np.testing.assert_array_equal(got, want.numpy())
    # The weights' derivative (TF registers none): the cotangent gathered at x.
    ct = np.arange(8, dtype=np.float32)
    g = jax.grad(lambda w: jnp.sum(fn(x, w)[0] * ct))(w)
    np.testing.assert_array_equal(g, np.where(x < 8, ct[np.minimum(x, 7)], 0.0))
    pullback = lambda w, c: jax.vjp(lambda w: fn(x, w)[0], w)[1](c)
    jaxpr = jax.make_jaxpr(pullback)(w, ct)
    assert non_tf_primitives(jaxpr) == set() and "tf.GatherV2" in jaxpr_primitives(jaxpr)


def test_bincount_on_constants_needs_no_bound():
  @tf.function
  def f(w):
    return tf.math.bincount(tf.constant([1, 1, 4]), weights=w)

  fn = tfprims.convert_functional(f, tf.TensorSpec([3], F32))
  w = np.float32([0.5, 0.25, 2.0])
  np.testing.assert_array_equal(jax.jit(fn)(w), f(w).numpy())


def test_negative_counts_are_dropped_and_checked_on_request():
  arr, w = np.int32([0, -1, 2, 2]), np.float32([1, 2, 3, 4])
  np.testing.assert_array_equal(tfprims.get_op("Bincount")(arr, w, size=3), [1, 0, 7])
  with pytest.raises(tf.errors.InvalidArgumentError, match="non-negative"):
    tf.raw_ops.Bincount(arr=arr, size=3, weights=w)

  @tf.function
  def f(x):
    return tf.raw_ops.DenseBincount(input=x, size=3, weights=tf.zeros([0]))

  fn = tfprims.convert_functional(f, tf.TensorSpec([4], tf.int32))
  np.testing.assert_array_equal(fn(arr), [1, 0, 2])
  with tfprims.override_config("runtime_checks", True):
    with pytest.raises(tfprims.errors.RuntimeCheckError, match="must be non-negative"):
      fn(arr)
    np.testing.assert_array_equal(fn(np.int32([0, 1, 2, 5])), [1, 1, 1])


def test_histogram_fixed_width():
  @tf.function
  def f(x, r):
    return (
      tf.histogram_fixed_width(x, r, nbins=5),
      tf.histogram_fixed_width(x, r, nbins=3, dtype=tf.int64),
    )

  fn = tfprims.convert_functional(f, tf.TensorSpec([None], F32), tf.TensorSpec([2], F32))
  x = np.float32([-1, 0, 0.2, 0.5, 0.6, 1, 4.9, 5, 6, np.inf, -np.inf, 2.0, 3.0])
  r = np.float32([0, 5])
  with jax.enable_x64(True):
    for got, want in zip(jax.jit(fn)(x, r), f(x, r)):
      np.testing.assert_array_equal(got, want.numpy())
  # Batched by vmap of the impl; compared with TF example by example.
  xs = np.stack([x, x * 0.5 + 1])
  out = jax.vmap(fn, in_axes=(0, None))(xs, r)
  for i in range(2):
    np.testing.assert_array_equal(out[0][i], f(xs[i], r)[0].numpy())
  # NaN: TF raises, and so does an eager call (known values); a jitted program does
  # not count it, unless runtime_checks is on.
  bad = np.float32([1.0, np.nan])
  with pytest.raises(tf.errors.InvalidArgumentError, match="NaN"):
    f(bad, r)
  with pytest.raises(tfprims.errors.RuntimeCheckError, match="NaN"):
    fn(bad, r)
  assert int(jax.jit(fn)(bad, r)[0].sum()) == 1
  with tfprims.override_config("runtime_checks", True):  # read when jit traces
    with pytest.raises(Exception, match="NaN"):
      jax.block_until_ready(jax.jit(lambda *a: fn(*a))(bad, r))


def test_searchsorted_left_right_and_unsorted_rows():
  @tf.function
  def f(s, v):
    return (
      tf.searchsorted(s, v, side="left"),
      tf.searchsorted(s, v, side="right"),
      tf.searchsorted(s, v, side="right", out_type=tf.int64),
    )

  spec = (tf.TensorSpec([2, 5], F32), tf.TensorSpec([2, 4], F32))
  fn = tfprims.convert_functional(*(f,) + spec)
  s = np.float32([[0, 1, 1, 3, 7], [5, 1, 4, 2, 3]])  # the second row is not sorted
  v = np.float32([[1, 2, -0.0, np.nan], [0, 3, 4, 8]])
  for got, want in zip(jax.jit(fn)(s, v), f(s, v)):
    np.testing.assert_array_equal(got, want.numpy())
  vs = np.stack([v, v[:, ::-1]])
  out = jax.vmap(fn, in_axes=(None, 0))(s, vs)
  for i in range(2):
    np.testing.assert_array_equal(out[1][i], f(s, vs[i])[1].numpy())
  assert non_tf_primitives(jax.make_jaxpr(jax.vmap(fn, in_axes=(None, 0)))(s, vs)) == set()


def test_bucketize_checks_its_boundaries():
  with pytest.raises(ValueError, match="Expected sorted boundaries"):
    tfprims.get_op("Bucketize").prepare(
      {"input": np.zeros(2, np.float32)}, {"boundaries": [1.0, 0.0]}
    )
  # ints compare as float32, doubles against the float32 boundaries (TF's kernel).
  op = tfprims.get_op("Bucketize")
  x = np.int32([16777217, 2**31 - 1])
  np.testing.assert_array_equal(
    op(x, boundaries=(16777217.0,)), tf.raw_ops.Bucketize(input=x, boundaries=[16777217.0])
  )
  with jax.enable_x64(True):
    y = np.float64([0.1, 0.1000000001])
    np.testing.assert_array_equal(
      op(y, boundaries=(0.1,)), tf.raw_ops.Bucketize(input=y, boundaries=[0.1])
    )


# --- DynamicStitch ---------------------------------------------------------------------------


def test_dynamic_stitch_duplicates_last_wins_and_our_gradient():
  @tf.function
  def f(a, b):
    return tf.dynamic_stitch([tf.constant([0, 1, 0]), tf.constant([1, 4])], [a, b])

  fn = tfprims.convert_functional(f, tf.TensorSpec([3, 2], F32), tf.TensorSpec([2, 2], F32))
  a = np.arange(6, dtype=np.float32).reshape(3, 2)
  b = -np.arange(4, dtype=np.float32).reshape(2, 2)
  np.testing.assert_array_equal(jax.jit(fn)(a, b), f(a, b).numpy())  # gap row 2: zeros
  assert "tf.DynamicStitch[size=5]" in str(jax.make_jaxpr(fn)(a, b))
  # Ours: only the winning writes get the cotangent. TF's gradient gathers for all.
  ct = np.arange(10, dtype=np.float32).reshape(5, 2) + 1
  ga, gb = jax.vjp(fn, a, b)[1](ct)
  np.testing.assert_array_equal(ga, [[0, 0], [0, 0], ct[0]])
  np.testing.assert_array_equal(gb, [ct[1], ct[4]])
  at, bt = tf.constant(a), tf.constant(b)
  with tf.GradientTape() as tape:
    tape.watch([at, bt])
    y = f(at, bt)
  tf_ga = tf.convert_to_tensor(tape.gradient(y, at, output_gradients=ct)).numpy()
  np.testing.assert_array_equal(tf_ga, [ct[0], ct[1], ct[0]])  # TF: every duplicate
  # ParallelDynamicStitch: TF's CPU kernel also keeps the last write.
  pa = tfprims.get_op("ParallelDynamicStitch")(
    np.int32([0, 1, 0]), np.int32([1]), a[:, 0], b[:1, 0], size=2
  )
  want = tf.raw_ops.ParallelDynamicStitch(indices=[[0, 1, 0], [1]], data=[a[:, 0], b[:1, 0]])
  np.testing.assert_array_equal(pa, want.numpy())


def test_dynamic_stitch_traced_indices_need_a_bound():
  @tf.function
  def f(i, x):
    return tf.dynamic_stitch([i], [x])

  spec = (tf.TensorSpec([3], tf.int32), tf.TensorSpec([3], F32))
  i, x = np.int32([2, 0, 5]), np.float32([1, 2, 3])
  fn = tfprims.convert_functional(f, *spec)
  np.testing.assert_array_equal(fn(i, x), f(i, x).numpy())  # eager: the indices are known
  with pytest.raises(tfprims.StaticInputError, match="DynamicStitch.*'indices'.*bound"):
    jax.jit(fn)(i, x)
  with tfprims.override_config("dynamic_shape_bounds", {"DynamicStitch": 8}):
    fn = tfprims.convert_functional(f, *spec)
    out = jax.jit(fn)(i, x)
  want = f(i, x).numpy()
  np.testing.assert_array_equal(out[: want.shape[0]], want)
  np.testing.assert_array_equal(out[want.shape[0] :], 0)  # padded rows


def test_histogram_bins_at_float32_edges_follow_tf_kernel(x64):
  # x - lo rounds to 5.0 in float32 (the edge of bin 1); TF's kernel keeps it in bin 0.
  x, r = np.float32([5.099999904632568]), np.float32([0.10000000149011612, 10.100000381469727])
  got = tfprims.get_op("HistogramFixedWidth")(x, r, nbins=2, dtype=np.dtype("int32"))
  want = tf.raw_ops.HistogramFixedWidth(values=x, value_range=r, nbins=2)
  np.testing.assert_array_equal(got, want.numpy())
  np.testing.assert_array_equal(want.numpy(), [1, 0])
  # int32 differences do not wrap.
  xi, ri = np.int32([2**31 - 1, -(2**31), 1]), np.int32([-5, 5])
  got = tfprims.get_op("HistogramFixedWidth")(xi, ri, nbins=3, dtype=np.dtype("int32"))
  np.testing.assert_array_equal(
    got, tf.raw_ops.HistogramFixedWidth(values=xi, value_range=ri, nbins=3).numpy()
  )
