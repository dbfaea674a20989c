"""Segment reductions: real programs converted and compared with TF (a graph network
aggregating messages with unsorted_segment_sum/max, segment_sum/mean on constant
ids, a Keras-style embedding bag with tf.sparse.segment_*), TF's empty-segment
values, NaN handling, the out-of-range policy and runtime checks, static-ids
errors, and TF names in grad/vmap jaxprs (docs/semantics/array.md)."""

import jax
import jax.numpy as jnp
import keras
import ml_dtypes
import numpy as np
import pytest
import tensorflow as tf

import tfprims
from tfprims import errors
from tfprims.core import get_op
from helpers import jaxpr_primitives, non_tf_primitives, tape_vjp

R = tf.raw_ops
RTOL, ATOL = 1e-5, 1e-5


def _rng(seed=0):
  return np.random.default_rng(seed)


def _close(actual, expected, rtol=RTOL, atol=ATOL):
  np.testing.assert_allclose(np.asarray(actual), np.asarray(expected), rtol=rtol, atol=atol)


# --- a graph network: messages on edges aggregated to nodes --------------------------------

N, F, E, H = 5, 3, 8, 4
SENDERS = np.array([0, 1, 2, 3, 4, 0, 2, 4], np.int32)
RECEIVERS = np.array([1, 0, 3, 2, 0, 4, 4, 1], np.int32)


def _gnn():
  keras.utils.set_random_seed(0)
  dense = keras.layers.Dense(H, activation="tanh")
  dense.build((None, 3 * F))
  edge_w = tf.Variable(_rng(1).standard_normal((1, F)).astype(np.float32), name="edge_w")

  @tf.function
  def gnn(nodes, senders, receivers):
    msgs = tf.gather(nodes, senders) * edge_w
    n = tf.shape(nodes)[0]
    agg_sum = tf.math.unsorted_segment_sum(msgs, receivers, n)
    agg_max = tf.math.unsorted_segment_max(msgs, receivers, n)
    # A node without incoming edges gets the float's lowest value: clear it.
    agg_max = tf.where(agg_max < -1e30, tf.zeros_like(agg_max), agg_max)
    return dense(tf.concat([nodes, agg_sum, agg_max], -1))

  specs = (
    tf.TensorSpec((N, F), tf.float32),
    tf.TensorSpec((E,), tf.int32),
    tf.TensorSpec((E,), tf.int32),
  )
  fn, params = tfprims.convert(gnn, *specs)
  return gnn, fn, params, [edge_w] + dense.trainable_variables


@pytest.fixture(scope="module")
def gnn():
  return _gnn()


def _nodes(seed=0, batch=None):
  shape = (N, F) if batch is None else (batch, N, F)
  return _rng(seed).standard_normal(shape).astype(np.float32)


def test_gnn_outputs_match_tf(gnn):
  tf_fn, fn, params, _ = gnn
  for seed in range(3):
    x = _nodes(seed)
    out, _ = fn(params, x, SENDERS, RECEIVERS)
    _close(out, tf_fn(x, SENDERS, RECEIVERS))
    jitted = jax.jit(lambda p, x: fn(p, x, SENDERS, RECEIVERS)[0])(params, x)
    _close(jitted, tf_fn(x, SENDERS, RECEIVERS))


def test_gnn_grad_matches_gradient_tape(gnn):
  tf_fn, fn, params, variables = gnn
  x = _nodes(3)

  def loss(p, x):
    return jnp.sum(fn(p, x, SENDERS, RECEIVERS)[0] ** 2)

  g_params, g_x = jax.grad(loss, argnums=(0, 1))(params, x)
  xt = tf.constant(x)
  names, tf_vars = zip(*fn.tf_variables.items())
  assert len(names) == len(variables) == 3
  with tf.GradientTape() as tape:
    tape.watch(xt)
    y = tf.reduce_sum(tf_fn(xt, SENDERS, RECEIVERS) ** 2)
  expected = tape.gradient(y, [xt] + list(tf_vars))
  _close(g_x, expected[0])
  for name, g in zip(names, expected[1:]):
    _close(g_params[name], tf.convert_to_tensor(g))
  names = jaxpr_primitives(jax.make_jaxpr(jax.grad(loss, argnums=(0, 1)))(params, x))
  # The transpose of UnsortedSegmentSum is a GatherV2; Max's tangent is TF-named too.
  assert {
    "tf.UnsortedSegmentSum",
    "tf.UnsortedSegmentMax",
    "tf.GatherV2",
    "tf.Equal",
    "tf.RealDiv",
  } <= names


def test_gnn_vmap_over_graphs_with_shared_edges(gnn):
  tf_fn, fn, params, _ = gnn
  xs = _nodes(4, batch=3)
  f = lambda x: fn(params, x, SENDERS, RECEIVERS)[0]
  out = jax.vmap(f)(xs)
  for k in range(3):
    _close(out[k], tf_fn(xs[k], SENDERS, RECEIVERS))
  jaxpr = jax.make_jaxpr(jax.vmap(f))(xs)
  assert non_tf_primitives(jaxpr) == set()
  assert "tf.UnsortedSegmentMax[num_segments=5]" in str(jaxpr)


def test_gnn_vmap_over_graphs_with_batched_segment_ids(gnn):
  tf_fn, fn, params, _ = gnn
  xs = _nodes(5, batch=3)
  receivers = np.stack([_rng(k).permutation(RECEIVERS) for k in range(3)])
  receivers[1, 2] = -1  # a dropped edge (negative ids are dropped, as in TF)
  f = lambda x, r: fn(params, x, SENDERS, r)[0]
  out = jax.vmap(f)(xs, receivers)
  for k in range(3):
    _close(out[k], tf_fn(xs[k], SENDERS, receivers[k]))
  jaxpr = jax.make_jaxpr(jax.vmap(f))(xs, receivers)
  assert non_tf_primitives(jaxpr) == set()
  # Batched ids are offset per graph into num_segments * batch segments.
  assert "tf.UnsortedSegmentSum[num_segments=15]" in str(jaxpr)
  # The batch axis may sit anywhere, on either operand.
  out_t = jax.vmap(f, in_axes=(1, 0))(np.moveaxis(xs, 0, 1), receivers)
  _close(out_t, out)
  g = jax.vmap(jax.grad(lambda x, r: jnp.sum(f(x, r) ** 2)))(xs, receivers)
  for k in range(3):
    _close(g[k], jax.grad(lambda x: jnp.sum(f(x, receivers[k]) ** 2))(xs[k]))


# --- segment_sum / segment_mean on constant ids --------------------------------------------

IDS = np.array([0, 0, 1, 3, 3, 3], np.int64)  # segment 2 is empty


@tf.function
def _pooled(x):
  return tf.math.segment_sum(x, tf.constant(IDS)) * 2.0 + tf.math.segment_mean(
    x, tf.constant(IDS, tf.int32)
  )


def test_segment_sum_mean_constant_ids():
  x = _rng(2).standard_normal((6, 2)).astype(np.float32)
  fn = tfprims.convert_functional(_pooled, tf.TensorSpec((6, 2), tf.float32))
  _close(fn(x), _pooled(x))
  jaxpr = str(jax.make_jaxpr(fn)(x))
  assert "tf.SegmentSum[segment_ids=(0, 0, 1, 3, 3, 3)]" in jaxpr
  assert "tf.SegmentMean[segment_ids=(0, 0, 1, 3, 3, 3)]" in jaxpr
  loss = lambda x: jnp.sum(jnp.sin(fn(x)))
  xt = tf.constant(x)
  with tf.GradientTape() as tape:
    tape.watch(xt)
    y = tf.reduce_sum(tf.sin(_pooled(xt)))
  _close(jax.grad(loss)(x), tape.gradient(y, xt))
  names = jaxpr_primitives(jax.make_jaxpr(jax.grad(loss))(x))
  assert {"tf.GatherV2", "tf.RealDiv"} <= names
  xs = _rng(3).standard_normal((4, 6, 2)).astype(np.float32)
  out = jax.vmap(fn)(xs)
  for k in range(4):
    _close(out[k], _pooled(xs[k]))
  assert non_tf_primitives(jax.make_jaxpr(jax.vmap(fn))(xs)) == set()


def test_sorted_segment_ids_must_be_known():
  @tf.function
  def f(x, ids):
    return tf.math.segment_sum(x, ids)

  fn = tfprims.convert_functional(f, tf.TensorSpec((3,), tf.float32), tf.TensorSpec((3,), tf.int32))
  # Ids that are function inputs cannot decide the output shape under jit (the
  # Unsorted op with num_segments can); an eager call knows them, as TF eager does.
  x, ids = np.ones(3, np.float32), np.array([0, 0, 2], np.int32)
  np.testing.assert_array_equal(fn(x, ids), f(x, ids).numpy())
  with pytest.raises(errors.StaticInputError, match="segment_ids"):
    jax.jit(fn)(x, ids)


@pytest.mark.parametrize(
  "ids,message",
  [
    ([1, 0, 2], "not increasing"),
    ([-1, 0, 2], "out of range"),
    ([0, 1], "same size as dimension 0"),
  ],
)
def test_sorted_segment_ids_checked_like_tf(ids, message):
  data = np.ones(3, np.float32)
  with pytest.raises(tf.errors.InvalidArgumentError):
    R.SegmentSum(data=data, segment_ids=np.array(ids, np.int32))
  with pytest.raises(ValueError, match=message):
    get_op("SegmentSum")(data, segment_ids=tuple(ids))


# --- an embedding bag (tf.sparse.segment_*) ----------------------------------------------

VOCAB, DIM, BAGS = 7, 3, 3
BAG_IDS = np.array([4, 1, 1, 6, 0, 2, 6], np.int32)
BAG_SEGMENTS = np.array([0, 0, 0, 1, 2, 2, 2], np.int32)
COMBINERS = {
  "sum": tf.sparse.segment_sum,
  "mean": tf.sparse.segment_mean,
  "sqrtn": tf.sparse.segment_sqrt_n,
}


class EmbeddingBag(keras.layers.Layer):
  """Keras-style bag of embeddings: one combined row per bag."""

  def __init__(self, combiner, sparse_gradient=False):
    super().__init__()
    self.combine = COMBINERS[combiner]
    self.sparse_gradient = sparse_gradient
    self.table = self.add_weight(shape=(VOCAB, DIM), initializer="random_normal", name="table")

  def call(self, ids, segments):
    return self.combine(
      self.table, ids, segments, num_segments=BAGS, sparse_gradient=self.sparse_gradient
    )


@pytest.mark.parametrize("combiner", ["sum", "mean", "sqrtn"])
@pytest.mark.parametrize("sparse_gradient", [False, True])
def test_embedding_bag(combiner, sparse_gradient):
  keras.utils.set_random_seed(0)
  layer = EmbeddingBag(combiner, sparse_gradient)
  tf_fn = tf.function(lambda ids, segments: tf.tanh(layer(ids, segments)))
  specs = (tf.TensorSpec((7,), tf.int32), tf.TensorSpec((7,), tf.int32))
  fn, params = tfprims.convert(tf_fn, *specs)
  out, _ = fn(params, BAG_IDS, BAG_SEGMENTS)
  _close(out, tf_fn(BAG_IDS, BAG_SEGMENTS))
  (name,) = params
  loss = lambda p, ids, seg: jnp.sum(fn(p, ids, seg)[0] * np.arange(1, 4)[:, None])
  grad = jax.grad(loss)(params, BAG_IDS, BAG_SEGMENTS)[name]
  with tf.GradientTape() as tape:
    y = tf.reduce_sum(tf_fn(BAG_IDS, BAG_SEGMENTS) * np.arange(1, 4, dtype=np.float32)[:, None])
  _close(grad, tf.convert_to_tensor(tape.gradient(y, layer.table)))
  op = {"sum": "Sum", "mean": "Mean", "sqrtn": "SqrtN"}[combiner]
  names = jaxpr_primitives(jax.make_jaxpr(jax.grad(loss))(params, BAG_IDS, BAG_SEGMENTS))
  assert f"tf.SparseSegment{op}WithNumSegments" in names
  assert f"tf.SparseSegment{op}Grad" in names  # TF's own dense gradient op
  # vmap over batches of bags: ids and bag assignments batched.
  ids_b = np.stack([BAG_IDS, BAG_IDS[::-1], (BAG_IDS + 1) % VOCAB])
  seg_b = np.stack([BAG_SEGMENTS, np.sort(BAG_SEGMENTS[::-1] % 2), BAG_SEGMENTS])
  f = lambda ids, seg: fn(params, ids, seg)[0]
  out_b = jax.vmap(f)(ids_b, seg_b)
  for k in range(3):
    _close(out_b[k], tf_fn(ids_b[k], seg_b[k]))
  assert non_tf_primitives(jax.make_jaxpr(jax.vmap(f))(ids_b, seg_b)) == set()
  gb = jax.vmap(lambda i, s: jax.grad(loss)(params, i, s)[name])(ids_b, seg_b)
  for k in range(3):
    _close(gb[k], jax.grad(loss)(params, ids_b[k], seg_b[k])[name])


def test_sparse_segment_constant_ids_and_grad_v2_graph():
  """tf.sparse.segment_mean with constant segment ids, and a TF gradient graph with
  SparseSegmentMeanGradV2 (sparse_gradient=True) converted as a function."""
  table = _rng(4).standard_normal((VOCAB, DIM)).astype(np.float32)

  @tf.function
  def grad_graph(table, weights):
    with tf.GradientTape() as tape:
      tape.watch(table)
      pooled = tf.sparse.segment_mean(
        table, tf.constant(BAG_IDS), tf.constant(BAG_SEGMENTS), sparse_gradient=True
      )
      # A static shape keeps TF's Mul gradient free of BroadcastGradientArgs.
      pooled = tf.ensure_shape(pooled, (BAGS, DIM))
      y = tf.reduce_sum(pooled * weights)
    return pooled, tf.convert_to_tensor(tape.gradient(y, table))

  specs = (tf.TensorSpec((VOCAB, DIM), tf.float32), tf.TensorSpec((BAGS, DIM), tf.float32))
  fn = tfprims.convert_functional(grad_graph, *specs)
  weights = _rng(5).standard_normal((BAGS, DIM)).astype(np.float32)
  got = fn(table, weights)
  for a, e in zip(got, grad_graph(table, weights)):
    _close(a, e)
  text = str(jax.make_jaxpr(fn)(table, weights))
  assert "tf.SparseSegmentMean[segment_ids=(0, 0, 0, 1, 2, 2, 2)]" in text
  assert "tf.SparseSegmentMeanGradV2[" in text
  # The converted gradient graph is itself differentiable and batchable.
  ws = _rng(6).standard_normal((2, BAGS, DIM)).astype(np.float32)
  out = jax.vmap(lambda w: fn(table, w)[1])(ws)
  for k in range(2):
    _close(out[k], grad_graph(table, ws[k])[1])


# --- TF's values for empty segments ---------------------------------------------------------

EMPTY_DTYPES = ["float32", "float64", "float16", "bfloat16", "int32", "int64", "uint8", "int8"]


def _dtype(name):
  return np.dtype(ml_dtypes.bfloat16) if name == "bfloat16" else np.dtype(name)


@pytest.mark.parametrize("dtype", EMPTY_DTYPES)
def test_empty_segments_identity_values(dtype, x64):
  dt = _dtype(dtype)
  data = np.array([[3, 1], [2, 5], [4, 4]]).astype(dt)
  ids = np.array([1, 1, 4], np.int32)  # segments 0, 2 (and 3, 5 below) are empty
  for op in ["SegmentSum", "SegmentMean", "SegmentMin", "SegmentMax", "SegmentProd"]:
    expected = getattr(R, op)(data=data, segment_ids=ids).numpy()
    got = np.asarray(get_op(op)(data, segment_ids=tuple(ids)))
    np.testing.assert_array_equal(got, expected, err_msg=op)
  for op in [
    "UnsortedSegmentSum",
    "UnsortedSegmentMin",
    "UnsortedSegmentMax",
    "UnsortedSegmentProd",
  ]:
    expected = getattr(R, op)(data=data, segment_ids=ids, num_segments=6).numpy()
    got = np.asarray(get_op(op)(data, ids, num_segments=6))
    np.testing.assert_array_equal(got, expected, err_msg=op)
  if dt.kind == "f" or dtype == "bfloat16":
    for op in [
      "SparseSegmentSumWithNumSegments",
      "SparseSegmentMeanWithNumSegments",
      "SparseSegmentSqrtNWithNumSegments",
    ]:
      expected = getattr(R, op)(
        data=data, indices=np.array([2, 0, 0]), segment_ids=ids, num_segments=6
      ).numpy()
      got = np.asarray(get_op(op)(data, np.array([2, 0, 0]), ids, num_segments=6))
      np.testing.assert_allclose(
        got.astype(np.float64),
        expected.astype(np.float64),
        rtol=1e-2 if dt.itemsize == 2 else 1e-6,
        err_msg=op,
      )


def test_empty_segment_values_in_a_converted_function():
  @tf.function
  def f(x, ids):
    return (
      tf.math.unsorted_segment_max(x, ids, 4),
      tf.math.unsorted_segment_min(x, ids, 4),
      tf.math.unsorted_segment_prod(x, ids, 4),
      tf.math.segment_max(x, [0, 0, 2]),
      tf.math.segment_min(x, [0, 0, 2]),
    )

  fn = tfprims.convert_functional(f, tf.TensorSpec((3,), tf.float32), tf.TensorSpec((3,), tf.int32))
  x, ids = np.array([1, -2, 3], np.float32), np.array([0, 3, 3], np.int32)
  for a, e in zip(jax.jit(fn)(x, ids), f(x, ids)):
    np.testing.assert_array_equal(a, e)
  lowest = np.finfo(np.float32).min
  np.testing.assert_array_equal(jax.jit(fn)(x, ids)[0], [1, lowest, lowest, 3])


# --- NaN and infinities in min/max ---------------------------------------------------------


@pytest.mark.parametrize("op", ["UnsortedSegmentMin", "UnsortedSegmentMax"])
@pytest.mark.parametrize("inner", [1, 4, 16])
def test_unsorted_min_max_nan_like_tf(op, inner):
  rng = _rng(inner)
  values = np.array([np.nan, 1.0, -1.0, 2.0, np.inf, -np.inf], np.float32)
  for _ in range(5):
    x = rng.choice(values, size=(9, inner)).astype(np.float32)
    ids = rng.integers(-1, 3, size=9).astype(np.int32)
    expected = getattr(R, op)(data=x, segment_ids=ids, num_segments=3).numpy()
    got = np.asarray(jax.jit(lambda x, i: get_op(op)(x, i, num_segments=3))(x, ids))
    np.testing.assert_array_equal(got, expected)


@pytest.mark.parametrize("op", ["SegmentMin", "SegmentMax"])
def test_sorted_min_max_nan_like_tf_scalar_rows(op):
  rng = _rng(7)
  values = np.array([np.nan, 1.0, -1.0, np.inf, -np.inf], np.float32)
  for _ in range(10):
    x = rng.choice(values, size=8).astype(np.float32)
    ids = np.sort(rng.integers(0, 4, size=8)).astype(np.int32)
    expected = getattr(R, op)(data=x, segment_ids=ids).numpy()
    np.testing.assert_array_equal(get_op(op)(x, segment_ids=tuple(ids)), expected)


def test_segment_prod_multiplies_rows_in_order_like_unsorted_segment_prod():
  # TF's sorted kernel keeps four partial products (rows j mod 4) for segments of >= 16
  # rows of >= 8 values; its UnsortedSegmentProd, TF-XLA and tfprims go row by row.
  for n, inner, (i, j, k) in [
    (17, 8, (0, 1, 5)),
    (17, 3, (0, 1, 5)),
    (9, 8, (0, 1, 5)),
    (17, 8, (2, 0, 1)),
    (20, 16, (0, 2, 6)),
  ]:
    x = np.ones((n, inner), np.float32)
    x[i], x[j], x[k] = np.inf, 1e-30, 1e-30
    ids = np.zeros(n, np.int32)
    want = R.UnsortedSegmentProd(data=x, segment_ids=ids, num_segments=1).numpy()
    for got in (
      get_op("SegmentProd")(x, segment_ids=tuple(ids)),
      jax.jit(lambda v: get_op("SegmentProd")(v, segment_ids=tuple(ids)))(x),
      get_op("UnsortedSegmentProd")(x, ids, num_segments=1),
    ):
      np.testing.assert_array_equal(got, want)
    sorted_tf = R.SegmentProd(data=x, segment_ids=ids).numpy()
    if n < 16 or inner < 8 or i > min(j, k):  # no interleaving, or NaN in any order
      np.testing.assert_array_equal(sorted_tf, want)


# --- gradients: ties, zeros, complex ------------------------------------------------------


def _our_grad(fn, x, ct):
  _, pullback = jax.vjp(fn, x)
  return np.asarray(pullback(ct)[0])


def test_min_max_ties_share_the_gradient():
  x = np.array([2.0, 2.0, 1.0, 5.0, 5.0, 5.0, -1.0], np.float32)
  ids = np.array([0, 0, 0, 1, 1, 1, 3], np.int32)
  ct = np.array([1.0, 3.0, 7.0, 2.0], np.float32)
  for kind in ["Max", "Min"]:
    ours = _our_grad(lambda v: get_op(f"Segment{kind}")(v, segment_ids=tuple(ids)), x, ct)
    _close(ours, tape_vjp(lambda v: getattr(R, f"Segment{kind}")(data=v, segment_ids=ids), x, ct))
    ours = _our_grad(lambda v: get_op(f"UnsortedSegment{kind}")(v, ids, num_segments=4), x, ct)
    _close(
      ours,
      tape_vjp(
        lambda v: getattr(R, f"UnsortedSegment{kind}")(data=v, segment_ids=ids, num_segments=4),
        x,
        ct,
      ),
    )
  ours = _our_grad(lambda v: get_op("SegmentMax")(v, segment_ids=tuple(ids)), x, ct)
  _close(ours, [0.5, 0.5, 0, 1, 1, 1, 2])


@pytest.mark.parametrize("dtype", ["float32", "complex64"])
def test_prod_gradient_with_zeros_like_tf(dtype):
  x = np.array([0.0, 2.0, 3.0, 0.0, 0.0, 4.0, 1.5, -2.0], dtype)
  if dtype == "complex64":
    x = (x + 1j * np.array([0, 1, -1, 0, 0, 0.5, 0, 2])).astype(dtype)
  ids = np.array([0, 0, 0, 1, 1, 1, 2, 2], np.int32)
  ct = np.array([1.0, 2.0, 3.0], dtype)
  ours = _our_grad(lambda v: get_op("SegmentProd")(v, segment_ids=tuple(ids)), x, ct)
  # JAX's cotangents pair without conjugation, TF's with: compare conj(vjp(conj(ct))).
  conj = np.conj if dtype == "complex64" else (lambda v: v)
  ours = conj(_our_grad(lambda v: get_op("SegmentProd")(v, segment_ids=tuple(ids)), x, conj(ct)))
  _close(ours, tape_vjp(lambda v: R.SegmentProd(data=v, segment_ids=ids), x, ct))
  ours = conj(
    _our_grad(lambda v: get_op("UnsortedSegmentProd")(v, ids, num_segments=3), x, conj(ct))
  )
  _close(
    ours, tape_vjp(lambda v: R.UnsortedSegmentProd(data=v, segment_ids=ids, num_segments=3), x, ct)
  )


# --- out-of-range policy and runtime checks ---------------------------------------------------


def test_unsorted_ids_past_num_segments_are_dropped():
  data = np.array([1.0, 2.0, 4.0, 8.0], np.float32)
  ids = np.array([0, 3, 1, -1], np.int32)
  kept = ids < 2
  for op in ["UnsortedSegmentSum", "UnsortedSegmentMax", "UnsortedSegmentProd"]:
    with pytest.raises(tf.errors.InvalidArgumentError):
      getattr(R, op)(data=data, segment_ids=ids, num_segments=2)
    expected = getattr(R, op)(data=data[kept], segment_ids=ids[kept], num_segments=2)
    np.testing.assert_array_equal(get_op(op)(data, ids, num_segments=2), expected)
  grad = jax.grad(lambda d: jnp.sum(get_op("UnsortedSegmentSum")(d, ids, num_segments=2)))(data)
  np.testing.assert_array_equal(grad, [1, 0, 1, 0])


def test_sparse_out_of_range_entries_are_dropped():
  data = np.arange(8, dtype=np.float32).reshape(4, 2)
  indices = np.array([0, 5, 2, 3], np.int32)  # 5 is out of range
  seg = np.array([0, 0, 1, 7], np.int32)  # 7 >= num_segments
  got = get_op("SparseSegmentMeanWithNumSegments")(data, indices, seg, num_segments=3)
  expected = R.SparseSegmentMeanWithNumSegments(
    data=data, indices=indices[:1], segment_ids=seg[:1], num_segments=3
  ).numpy()
  expected[1] = data[2]
  np.testing.assert_array_equal(got, expected)
  got = get_op("SparseSegmentSumGrad")(data, indices, np.array([0, 0, 9, 1]), output_dim0=4)
  np.testing.assert_array_equal(got, [data[0], [0, 0], [0, 0], data[1]])


def test_runtime_checks_raise_like_tf():
  @tf.function
  def f(x, ids, indices):
    return (
      tf.math.unsorted_segment_sum(x, ids, 2),
      tf.sparse.segment_sum(x, indices, [0, 0, 1, 1]),
    )

  fn = tfprims.convert_functional(
    f, tf.TensorSpec((4,), tf.float32), tf.TensorSpec((4,), tf.int32), tf.TensorSpec((4,), tf.int32)
  )
  x = np.ones(4, np.float32)
  good_ids, bad_ids = np.array([0, 1, -1, 1], np.int32), np.array([0, 2, 1, 1], np.int32)
  good_idx, bad_idx = np.array([0, 1, 2, 3], np.int32), np.array([0, 1, 2, 4], np.int32)
  # Eager calls know the values: they raise like TF's kernels.
  fn(x, good_ids, good_idx)
  with pytest.raises(errors.RuntimeCheckError, match="num_segments"):
    fn(x, bad_ids, good_idx)
  with pytest.raises(errors.RuntimeCheckError, match="indices out of range"):
    fn(x, good_ids, bad_idx)
  jax.block_until_ready(jax.jit(fn)(x, bad_ids, bad_idx))  # jit, checks off: dropped
  with tfprims.override_config("runtime_checks", True):  # read when jit traces
    checked = jax.jit(lambda *a: fn(*a))
    jax.block_until_ready(checked(x, good_ids, good_idx))
    with pytest.raises(Exception, match="num_segments"):
      jax.block_until_ready(checked(x, bad_ids, good_idx))


def test_grad_v2_needs_known_indices():
  op = get_op("SparseSegmentSumGradV2")
  grad, seg = np.ones((2, 3), np.float32), np.array([0, 1, 1], np.int32)
  values, uniq = op(grad, seg, indices=(4, 1, 4), dense_output_dim0=6, Tidx=np.dtype("int32"))
  exp_values, exp_uniq = R.SparseSegmentSumGradV2(
    grad=grad, indices=np.array([4, 1, 4]), segment_ids=seg, dense_output_dim0=6
  )
  np.testing.assert_array_equal(values, exp_values)
  np.testing.assert_array_equal(uniq, exp_uniq)
  with pytest.raises(ValueError, match="out of range"):
    op(grad, seg, indices=(4, 1, 6), dense_output_dim0=6, Tidx=np.dtype("int32"))

  @tf.function
  def f(g, indices, seg):
    return R.SparseSegmentSumGradV2(grad=g, indices=indices, segment_ids=seg, dense_output_dim0=6)[
      0
    ]

  fn = tfprims.convert_functional(
    f,
    tf.TensorSpec((2, 3), tf.float32),
    tf.TensorSpec((3,), tf.int32),
    tf.TensorSpec((3,), tf.int32),
  )
  with pytest.raises(errors.StaticInputError, match="indices"):
    jax.jit(fn)(grad, np.array([4, 1, 4], np.int32), seg)


# --- TF names in derivative and batched jaxprs --------------------------------------------------


def _jaxpr_names(f, *args):
  return jaxpr_primitives(jax.make_jaxpr(f)(*args))


@pytest.mark.parametrize("kind", ["Sum", "Mean", "SqrtN"])
def test_sparse_rules_are_tf_named(kind):
  data = _rng(8).standard_normal((5, 2)).astype(np.float32)
  idx, seg = np.array([4, 0, 4, 1], np.int32), np.array([0, 0, 2, 2], np.int32)
  red = get_op(f"SparseSegment{kind}WithNumSegments")
  f = lambda d: jnp.sum(red(d, idx, seg, num_segments=3) ** 2)
  assert f"tf.SparseSegment{kind}Grad" in _jaxpr_names(jax.grad(f), data)
  grad_op = get_op(f"SparseSegment{kind}Grad")
  g = lambda c: jnp.sum(grad_op(c, idx, seg, output_dim0=5) ** 2)
  assert f"tf.SparseSegment{kind}WithNumSegments" in _jaxpr_names(
    jax.grad(g), np.ones((3, 2), np.float32)
  )
  # vmap with batched data, indices and segment ids: TF ops only.
  datas = np.stack([data, data * 2])
  idxs, segs = np.stack([idx, idx[::-1]]), np.stack([seg, np.array([0, 1, 1, 1], np.int32)])
  batched = lambda d, i, s: red(d, i, s, num_segments=3)
  jaxpr = jax.make_jaxpr(jax.vmap(batched))(datas, idxs, segs)
  assert non_tf_primitives(jaxpr) == set()
  out = jax.vmap(batched)(datas, idxs, segs)
  for k in range(2):
    _close(
      out[k],
      getattr(R, f"SparseSegment{kind}WithNumSegments")(
        data=datas[k], indices=idxs[k], segment_ids=segs[k], num_segments=3
      ),
    )


@pytest.mark.parametrize(
  "op", ["UnsortedSegmentSum", "UnsortedSegmentMin", "UnsortedSegmentMax", "UnsortedSegmentProd"]
)
def test_unsorted_batched_ids_jaxpr_and_values(op):
  data = _rng(9).standard_normal((3, 2, 3)).astype(np.float32)
  ids = np.array([[0, 1], [-1, 3], [2, 2]], np.int32)  # [batch, 2]: per-example ids
  f = lambda d, i: get_op(op)(d, i, num_segments=4)
  jaxpr = jax.make_jaxpr(jax.vmap(f))(data, ids)
  assert non_tf_primitives(jaxpr) == set()
  assert f"tf.{op}[num_segments=12]" in str(jaxpr)
  out = jax.vmap(f)(data, ids)
  for k in range(3):
    np.testing.assert_array_equal(
      out[k], getattr(R, op)(data=data[k], segment_ids=ids[k], num_segments=4)
    )


@pytest.mark.parametrize("kind", ["Sum", "Mean", "SqrtN"])
def test_grad_ops_derivatives(kind):
  """TF registers no gradient for the Grad ops: their rules are checked here as
  transposes (dot-product tests) of the reductions, which the property tests check
  against TF."""
  rng = _rng(10)
  idx = np.array([3, 0, 3, 1, 4], np.int32)
  seg = np.array([1, 0, 1, 1, 2], np.int32)
  grad_op = get_op(f"SparseSegment{kind}Grad")
  v2 = get_op(f"SparseSegment{kind}GradV2")
  red = get_op(f"SparseSegment{kind}WithNumSegments")
  g, ct = rng.standard_normal((3, 2)), rng.standard_normal((5, 2))
  with jax.enable_x64(True):
    out, pullback = jax.vjp(lambda g: grad_op(g, idx, seg, output_dim0=5), g)
    _close(pullback(ct)[0], red(ct, idx, seg, num_segments=3), rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(np.vdot(out, ct), np.vdot(g, red(ct, idx, seg, num_segments=3)))
    params = dict(indices=tuple(idx), dense_output_dim0=5, Tidx=np.dtype("int32"))
    values = lambda g: v2(g, seg, **params)[0]
    t = rng.standard_normal((3, 2))
    _close(jax.jvp(values, (g,), (t,))[1], values(t), rtol=1e-12, atol=1e-12)
    vals, vjp = jax.vjp(values, g)
    ctv = rng.standard_normal(vals.shape)
    np.testing.assert_allclose(np.vdot(vals, ctv), np.vdot(g, vjp(ctv)[0]))
    # The distinct rows of GradV2 are the non-zero rows of Grad.
    dense = np.asarray(grad_op(g, idx, seg, output_dim0=5))
    _close(vals, dense[np.unique(idx)], rtol=1e-12, atol=1e-12)
    assert f"tf.SparseSegment{kind}Grad" in _jaxpr_names(
      lambda g, t: jax.jvp(values, (g,), (t,))[1], g, t
    )
    assert f"tf.SparseSegment{kind}WithNumSegments" in _jaxpr_names(
      jax.grad(lambda g: jnp.sum(values(g) ** 2)), g
    )


# --- the sign of zero sums -----------------------------------------------------------------


def _same_signed(got, expected, msg):
  got, expected = np.asarray(got).astype(np.float64), np.asarray(expected).astype(np.float64)
  np.testing.assert_allclose(got, expected, rtol=1e-2, err_msg=msg)  # 1/sqrt(n) rounds apart
  np.testing.assert_array_equal(np.signbit(got), np.signbit(expected), err_msg=msg)


@pytest.mark.parametrize("dtype", ["float16", "bfloat16", "float32", "float64"])
@pytest.mark.parametrize("inner", [(), (3,)])
def test_zero_sums_signed_like_tf(dtype, inner, x64):
  """TF's sorted SegmentSum/Mean copy a one-row segment and reduce longer ones from
  +0.0; UnsortedSegmentSum and the sparse Grad kernels add to +0.0; the sparse
  reductions sum from a segment's first row (a sum of -0.0 rows is -0.0). Empty
  segments hold +0.0. Eager and under jit (XLA folds x + 0.0 and one-update scatters)."""
  dt, rng = _dtype(dtype), _rng(len(inner))
  # Segments 0: [-0], 1: empty, 2: [-0, -0], 3: [-0, -0, -0], 4: [+0, -0], 5: [-0]
  ids = np.array([0, 2, 2, 3, 3, 3, 4, 4, 5], np.int32)
  for trial in range(2):  # the fixed pattern, then random signs
    signs = (
      np.array([-0.0] * 6 + [0.0, -0.0, -0.0])
      if trial == 0
      else rng.choice([-0.0, 0.0, -0.0, 1.0], size=ids.size)
    )
    data = (signs.reshape((-1,) + (1,) * len(inner)) * np.ones(inner)).astype(dt)
    k, z = ids.size, np.zeros(ids.size, np.int32)
    perm = np.arange(k)[::-1].astype(np.int32)
    # (op, our operands, our params, TF's inputs)
    cases = [
      (op, (data,), dict(segment_ids=tuple(ids)), dict(data=data, segment_ids=ids))
      for op in ("SegmentSum", "SegmentMean")
    ]
    cases.append(
      (
        "UnsortedSegmentSum",
        (data, ids),
        dict(num_segments=7),
        dict(data=data, segment_ids=ids, num_segments=7),
      )
    )
    for kind in ("Sum", "Mean", "SqrtN"):
      red = dict(data=data, indices=perm, segment_ids=ids)
      cases += [
        (f"SparseSegment{kind}", (data, perm), dict(segment_ids=tuple(ids)), red),
        (
          f"SparseSegment{kind}WithNumSegments",
          (data, perm, ids),
          dict(num_segments=7),
          dict(red, num_segments=7),
        ),
        # Every entry to output row 0 (row 1 untouched).
        (
          f"SparseSegment{kind}Grad",
          (data, z, perm),
          dict(output_dim0=2),
          dict(grad=data, indices=z, segment_ids=perm, output_dim0=2),
        ),
        (
          f"SparseSegment{kind}GradV2",
          (data, perm),
          dict(indices=tuple(z), dense_output_dim0=2, Tidx=np.dtype("int32")),
          dict(grad=data, indices=z, segment_ids=perm, dense_output_dim0=2),
        ),
      ]
    for op, args, params, tf_kw in cases:
      first = (lambda r: r[0]) if op.endswith("GradV2") else (lambda r: r)
      expected = first(getattr(R, op)(**tf_kw))
      f = lambda *a: first(get_op(op)(*a, **params))
      _same_signed(f(*args), expected, f"{op}, trial {trial}")
      _same_signed(jax.jit(f)(*args), expected, f"{op} under jit, trial {trial}")
