"""``tf.nn.safe_embedding_lookup_sparse`` (TF-Recommenders style sparse features) and
other sparse tensors filled and reduced by row, against TF: eagerly and under jit with
traced indices, ids and weights (tfprims/ops/sparse_patterns.py keeps their entries in
static sizes), with gradients with respect to the embedding table, and a
TF-Recommenders style ranking model with sparse features restored from a SavedModel."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import tensorflow as tf

import tfprims
from helpers import jaxpr_primitives

_TABLE = np.random.default_rng(0).normal(size=(10, 3)).astype(np.float32)
# Sorted entries of a [4, 3] batch: row 0 has a duplicate id (7), row 1 is empty, row 2
# has an invalid id (-1) and a zero weight, row 3 a negative weight (pruned unless
# the combiner is "sum"), and the last row (4) is empty.
_IDX = np.array([[0, 0], [0, 1], [0, 2], [2, 0], [2, 1], [3, 0], [3, 1]], np.int64)
_IDS = np.int64([7, 2, 7, -1, 4, 9, 1])
_W = np.float32([1.0, 0.5, 2.0, 1.0, 0.0, 3.0, -0.5])
# Another batch of the same size for the same compiled program: every row pruned but one.
_IDS2 = np.int64([-3, 5, 0, -1, 8, 3, 3])
_W2 = np.float32([2.0, -1.0, 0.0, 1.5, 4.0, 0.25, 0.75])


def _shape(rank):
  return np.int64([5, 3] if rank == 2 else [5, 1, 3])


def _indices(rank):
  return _IDX if rank == 2 else np.insert(_IDX, 1, 0, axis=1)


@pytest.mark.parametrize(
  "weighted, combiner, default_id, rank, max_norm",
  [
    (True, "mean", None, 2, None),
    (True, "sqrtn", 3, 3, 1.0),  # clipped rows
    (True, "sum", None, 2, None),
    (False, "sqrtn", 3, 2, 0.5),
    (False, "mean", None, 2, None),
  ],
)
def test_safe_embedding_lookup_sparse_under_jit_equals_tf(
  weighted, combiner, default_id, rank, max_norm
):
  table = tf.Variable(_TABLE, name="table")

  def lookup(ids, weights=None):
    return tf.nn.safe_embedding_lookup_sparse(
      table, ids, weights, combiner=combiner, default_id=default_id, max_norm=max_norm
    )

  ids_spec = tf.SparseTensorSpec([None] * rank, tf.int64)
  specs = [ids_spec, tf.SparseTensorSpec([None] * rank, tf.float32)] if weighted else [ids_spec]
  f = tf.function(lookup)
  fn, params = tfprims.convert(f, *specs)
  idx, shape = _indices(rank), _shape(rank)

  def tf_args(ids, w, idx=idx):
    sp = [tf.SparseTensor(idx, ids, shape)]
    return sp + [tf.SparseTensor(idx, w, shape)] if weighted else sp

  def call(p, i, ids, w):  # indices, ids and weights traced under jit
    return fn(p, *[(i, v, shape) for v in ([ids, w] if weighted else [ids])])[0]

  jitted = jax.jit(call)
  no_entries = (idx[:0], _IDS[:0], _W[:0])  # every row empty
  for i, ids, w in ((idx, _IDS, _W), (idx, _IDS2, _W2), no_entries):
    want = f(*tf_args(ids, w, i)).numpy()
    np.testing.assert_allclose(jitted(params, i, ids, w), want, rtol=1e-6, atol=1e-7)
    np.testing.assert_allclose(call(params, i, ids, w), want, rtol=1e-6, atol=1e-7)

  prims = jaxpr_primitives(jax.make_jaxpr(call)(params, idx, _IDS, _W))
  assert "tf.UnsortedSegmentSum" in prims
  assert not prims & {"tf.Where", "tf.Unique", "tf.SparseFillEmptyRows"}

  # The table's gradient, under jit, against TF's.
  ct = np.linspace(-1, 1, want.size, dtype=np.float32).reshape(want.shape)
  grad = jax.jit(jax.grad(lambda p: jnp.sum(call(p, idx, _IDS, _W) * ct)))(params)
  with tf.GradientTape() as tape:
    y = tf.reduce_sum(f(*tf_args(_IDS, _W)) * ct)
  want_grad = tf.convert_to_tensor(tape.gradient(y, table))
  np.testing.assert_allclose(grad["table"], want_grad, rtol=1e-5, atol=1e-6)


def test_filled_rows_reduced_by_user_code_jit_and_the_forms_left_alone():
  @tf.function
  def per_row(sp):
    kept = tf.sparse.retain(sp, sp.values > 0)
    filled, empty = tf.sparse.fill_empty_rows(kept, -1.0)
    rows = filled.indices[:, 0]
    means = tf.math.segment_mean(filled.values, rows)
    return tf.math.segment_sum(filled.values * 2.0, rows), means, tf.cast(empty, tf.int32)

  fn = tfprims.convert_functional(per_row, tf.SparseTensorSpec([4, 3], tf.float32))
  idx = _IDX[:5]
  for values in (np.float32([1.0, -2.0, 0.5, 3.0, -1.0]), np.float32([-1, -1, -1, 2, 0])):
    want = [t.numpy() for t in per_row(tf.SparseTensor(idx, values, [4, 3]))]
    got = jax.jit(lambda i, v: fn((i, v, np.int64([4, 3]))))(idx, values)
    for g, w in zip(got, want):
      np.testing.assert_array_equal(g, w)

  # A filled tensor that is returned keeps its data-dependent size: under jit with
  # traced indices, a typed error naming the node (eager calls compute it).
  @tf.function
  def filled(sp):
    return tf.sparse.fill_empty_rows(tf.sparse.retain(sp, sp.values > 0), 0.0)[0].values

  fn = tfprims.convert_functional(filled, tf.SparseTensorSpec([4, 3], tf.float32))
  values = np.float32([1.0, -2.0, 0.5, 3.0, -1.0])
  want = filled(tf.SparseTensor(idx, values, [4, 3])).numpy()
  np.testing.assert_array_equal(fn((idx, values, np.int64([4, 3]))), want)
  with pytest.raises((tfprims.DynamicShapeError, tfprims.StaticInputError), match="Where"):
    jax.jit(lambda i, v: fn((i, v, np.int64([4, 3]))))(idx, values)


class _Ranker(tf.Module):
  """A TF-Recommenders style ranking model: a user's weighted item history and their
  categories as sparse features, each pooled by a safe embedding lookup, and an MLP."""

  def __init__(self):
    rng = np.random.default_rng(1)
    self.items = tf.Variable(rng.normal(0, 0.05, (50, 8)).astype(np.float32), name="items")
    self.cats = tf.Variable(rng.normal(0, 0.05, (12, 4)).astype(np.float32), name="cats")
    self.w1 = tf.Variable(rng.normal(0, 0.3, (14, 16)).astype(np.float32), name="w1")
    self.b1 = tf.Variable(rng.normal(0, 0.01, 16).astype(np.float32), name="b1")
    self.w2 = tf.Variable(rng.normal(0, 0.3, (16, 1)).astype(np.float32), name="w2")

  @tf.function(
    input_signature=[
      tf.SparseTensorSpec([None, None], tf.int64),
      tf.SparseTensorSpec([None, None], tf.float32),
      tf.SparseTensorSpec([None, None], tf.int64),
      tf.TensorSpec([None, 2], tf.float32),
    ]
  )
  def __call__(self, history, history_w, categories, dense):
    h = tf.nn.safe_embedding_lookup_sparse(self.items, history, history_w, combiner="mean")
    c = tf.nn.safe_embedding_lookup_sparse(self.cats, categories, None, combiner="sqrtn")
    x = tf.concat([h, c, dense], axis=1)
    return tf.sigmoid(tf.nn.relu(x @ self.w1 + self.b1) @ self.w2)


def test_recommender_saved_model_with_sparse_features_jit_and_grad(tmp_path):
  tf.saved_model.save(_Ranker(), str(tmp_path))
  restored = tf.saved_model.load(str(tmp_path))
  fn, params = tfprims.convert(restored.__call__)
  shape = np.int64([4, 5])
  hist_idx = np.array([[0, 0], [0, 1], [0, 4], [1, 0], [3, 0], [3, 2]], np.int64)
  hist = np.int64([3, 17, 3, -1, 49, 8])  # a duplicate, an invalid id (row 1 pruned)
  hist_w = np.float32([1.0, 0.25, 2.0, 1.0, 0.5, 0.0])  # a zero weight (pruned)
  cat_idx = np.array([[0, 0], [2, 0], [2, 1]], np.int64)
  cat = np.int64([5, 11, 0])
  dense = np.float32([[0.5, -1.0], [2.0, 0.0], [0.0, 0.25], [-0.5, 1.5]])

  def call(p, hist_idx, hist, hist_w, cat_idx, cat, dense):
    sparse = [(hist_idx, hist, shape), (hist_idx, hist_w, shape), (cat_idx, cat, shape)]
    return fn(p, *sparse, dense)[0]

  tf_args = [
    tf.SparseTensor(hist_idx, hist, shape),
    tf.SparseTensor(hist_idx, hist_w, shape),
    tf.SparseTensor(cat_idx, cat, shape),
    dense,
  ]
  want = restored(*tf_args).numpy()
  args = (hist_idx, hist, hist_w, cat_idx, cat, dense)
  np.testing.assert_allclose(jax.jit(call)(params, *args), want, rtol=1e-5, atol=1e-7)

  # The gradient of every weight (both embedding tables included), under jit.
  grads = jax.jit(jax.grad(lambda p: jnp.sum(call(p, *args))))(params)
  with tf.GradientTape() as tape:
    y = tf.reduce_sum(restored(*tf_args))
  names = ["items", "cats", "w1", "b1", "w2"]
  want_grads = tape.gradient(y, [getattr(restored, n) for n in names])
  assert sorted(grads) == sorted(names)
  for name, w in zip(names, want_grads):
    w = tf.convert_to_tensor(w)
    np.testing.assert_allclose(grads[name], w, rtol=1e-4, atol=1e-7, err_msg=name)
