"""Sparse and ragged inputs, sparse outputs (as BCOO) and the sparse op family in real
programs, against TF: ``tf.sparse.sparse_dense_matmul`` (eager, jit, gradients),
several sparse ops in one function, a function returning a SparseTensor, and ragged
inputs used through their components (docs/semantics/sparse.md);
``tf.nn.safe_embedding_lookup_sparse`` is in test_sparse_embedding.py. The ops
themselves are property-tested against ``tf.raw_ops`` by property_tests/test_ops.py."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import tensorflow as tf
from jax.experimental import sparse

import tfprims
from helpers import jaxpr_primitives

F32 = tf.float32
R = tf.raw_ops

# Unsorted, a duplicate ((2, 1) twice), an empty row (1), an empty column (3).
_IDX = np.array([[2, 1], [0, 0], [2, 1], [0, 2], [3, 0]], np.int64)
_VAL = np.float32([1.5, -2.0, 0.25, 3.0, -1.0])
_SHAPE = np.array([4, 4], np.int64)
_D = np.arange(12, dtype=np.float32).reshape(4, 3) / 7 - 0.5


def _sp(indices=_IDX, values=_VAL, shape=_SHAPE):
  return tf.SparseTensor(indices, values, shape)


def test_sparse_dense_matmul_eager_jit_and_gradients():
  f = tf.function(lambda sp, d: tf.sparse.sparse_dense_matmul(sp, d))
  fn = tfprims.convert_functional(
    f, tf.SparseTensorSpec([None, 4], F32), tf.TensorSpec([4, 3], F32)
  )
  assert [s.name for s in fn.input_specs] == ["sp.indices", "sp.values", "sp.dense_shape", "d"]
  want = f(_sp(), _D).numpy()
  np.testing.assert_allclose(fn(_sp(), _D), want, rtol=1e-6)  # a tf.SparseTensor
  bcoo = sparse.BCOO((jnp.asarray(_VAL), jnp.asarray(_IDX.astype(np.int32))), shape=(4, 4))
  np.testing.assert_allclose(jax.jit(fn)(bcoo, _D), want, rtol=1e-6)  # a BCOO, under jit
  np.testing.assert_allclose(
    jax.jit(lambda v, d: fn((_IDX, v, _SHAPE), d))(_VAL, _D), want, rtol=1e-6
  )  # components, values traced
  assert "tf.SparseTensorDenseMatMul" in jaxpr_primitives(jax.make_jaxpr(fn)(bcoo, _D))

  # Gradients wrt the dense operand and the sparse values, against TF's.
  ct = np.linspace(-1, 1, 12, dtype=np.float32).reshape(4, 3)

  def loss(v, d):
    return jnp.sum(fn((_IDX, v, _SHAPE), d) * ct)

  g_values, g_dense = jax.jit(jax.grad(loss, argnums=(0, 1)))(_VAL, _D)
  v, d = tf.constant(_VAL), tf.constant(_D)
  with tf.GradientTape() as tape:
    tape.watch([v, d])
    y = tf.reduce_sum(f(tf.SparseTensor(_IDX, v, _SHAPE), d) * ct)
  t_values, t_dense = tape.gradient(y, [v, d])
  np.testing.assert_allclose(g_values, t_values, rtol=1e-5, atol=1e-6)
  np.testing.assert_allclose(g_dense, t_dense, rtol=1e-5, atol=1e-6)
  grad_jaxpr = jax.make_jaxpr(jax.grad(loss, argnums=(0, 1)))(_VAL, _D)
  assert {"tf.SparseTensorDenseMatMul", "tf.GatherV2"} <= jaxpr_primitives(grad_jaxpr)

  with pytest.raises(tfprims.InputShapeError, match=r"sparse shape is \[None, 4\]"):
    fn((_IDX, _VAL, [4, 5]), _D)  # the spec's known dim disagrees
  # A dense shape the function cannot know under jit: a typed error naming the node.
  with pytest.raises(tfprims.StaticInputError, match="SparseTensorDenseMatMul"):
    jax.jit(lambda s: fn((_IDX, _VAL, s), _D))(_SHAPE)


def test_sparse_ops_in_one_function_eager_and_jit():
  dense = np.float32([[1, 2, 3, 4]]) / 4

  @tf.function
  def f(sp):
    return {
      "sum": tf.sparse.reduce_sum(sp, axis=1),
      "max": tf.sparse.reduce_max(sp, axis=0),
      "softmax": tf.sparse.softmax(sp).values,  # row-major order, as TF
      "reorder": tf.sparse.reorder(sp).values,
      "reshape": tf.sparse.reshape(sp, [2, -1]).indices,
      "mul": (sp * dense).values,
      "div": (sp / dense).values,
      "add_dense": tf.sparse.add(sp, tf.ones([4, 4]) * dense),
    }

  fn = tfprims.convert_functional(f, tf.SparseTensorSpec([4, 4], F32))
  idx = np.array([[2, 1], [0, 3], [0, 0], [3, 2], [2, 0]], np.int64)  # unsorted, no dups
  sp = _sp(idx, _VAL)
  want = {k: v.numpy() for k, v in f(sp).items()}
  got = fn(sp)
  jitted = jax.jit(fn)(
    sparse.BCOO((jnp.asarray(_VAL), jnp.asarray(idx.astype(np.int32))), shape=(4, 4))
  )
  for k in want:
    np.testing.assert_allclose(got[k], want[k], rtol=1e-6, err_msg=k)
    np.testing.assert_allclose(jitted[k], want[k], rtol=1e-6, err_msg=k)
  # The spec's static shape is the dense shape: another one is refused.
  with pytest.raises(tfprims.InputShapeError, match="sparse shape"):
    fn((idx, _VAL, np.int64([5, 4])))


def test_sparse_outputs_come_back_as_bcoo():
  @tf.function
  def f(x, sp):
    filled, empty = tf.sparse.fill_empty_rows(sp, -1.0)
    return tf.sparse.from_dense(x), filled, empty

  fn = tfprims.convert_functional(
    f, tf.TensorSpec([3, 4], F32), tf.SparseTensorSpec([None, 4], F32)
  )
  x = np.float32([[0, 1, 0, 0], [0, 0, 0, 0], [3, 0, 0, -4]])
  sp = _sp(_IDX[1:], _VAL[1:])  # no duplicate (to_dense refuses them); row 1 empty

  want_dense, want_filled, want_empty = f(x, sp)
  got_dense, got_filled, got_empty = fn(x, sp)
  assert isinstance(got_dense, sparse.BCOO) and got_dense.shape == (3, 4)  # static in TF
  assert isinstance(got_filled, sparse.BCOO) and got_filled.shape == (4, 4)  # from the value
  for got, want in ((got_dense, want_dense), (got_filled, want_filled)):
    np.testing.assert_array_equal(got.indices, want.indices)
    np.testing.assert_array_equal(got.data, want.values)
    np.testing.assert_array_equal(got.todense(), tf.sparse.to_dense(want))
  np.testing.assert_array_equal(got_empty, want_empty)
  assert fn.structured_outputs[1].shape is None  # TF does not know it statically


def test_sparse_add_concat_slice_reduce_sparse_eager_and_jit():
  @tf.function
  def f(a, b):
    return (
      tf.sparse.add(a, b),
      tf.sparse.concat(1, [a, b]),
      tf.sparse.slice(a, [1, 0], [2, 3]),
      tf.sparse.reduce_sum(b, 0, keepdims=True, output_is_sparse=True),
      tf.sparse.maximum(a, b),
    )

  @tf.function
  def g(a, b):
    return tf.sparse.add(a, b, threshold=1.0).values

  spec = tf.SparseTensorSpec([4, 4], F32)
  fn, gn = (tfprims.convert_functional(h, spec, spec) for h in (f, g))
  a = _sp(np.array([[0, 1], [1, 0], [2, 2], [3, 3]]), np.float32([1, 2, -3, 4]))
  b_idx = np.array([[0, 1], [2, 0], [2, 2], [3, 3]])  # coinciding with a at three
  b = _sp(b_idx, np.float32([-0.5, 5, 2.5, -4]))  # sums: 0.5, -0.5, 0 (dropped)
  want = f(a, b)
  b_vals = np.float32([-0.5, 5, 2.5, -4])
  # Under jit, indices and dense shapes passed as numpy or lists stay known.
  for got in (fn(a, b), jax.jit(lambda v: fn(a, (b_idx.tolist(), v, [4, 4])))(b_vals)):
    for g_sp, w_sp in zip(got, want):
      np.testing.assert_array_equal(g_sp.indices, w_sp.indices)
      np.testing.assert_array_equal(g_sp.data, w_sp.values)
      assert g_sp.shape == tuple(w_sp.dense_shape.numpy())
  np.testing.assert_array_equal(gn(a, b), g(a, b))  # thresh drops small sums (eager)
  with pytest.raises(tfprims.DynamicShapeError, match="SparseAdd node"):
    jax.jit(lambda v: gn(a, (b_idx, v, _SHAPE)))(b_vals)


def test_ragged_inputs_through_their_components():
  @tf.function
  def f(rt, rt2):
    return (
      tf.reduce_sum(rt.values),
      rt.row_lengths(),
      rt.nrows(),
      tf.reduce_sum(rt2.flat_values),
      rt2.values.row_lengths(),
    )

  spec = tf.RaggedTensorSpec([None, None], F32, ragged_rank=1)
  spec2 = tf.RaggedTensorSpec([None, None, None], F32, ragged_rank=2)
  fn = tfprims.convert_functional(f, spec, spec2)
  assert [s.name for s in fn.input_specs] == [
    "rt.flat_values",
    "rt.row_splits",
    "rt2.flat_values",
    "rt2.row_splits",
    "rt2.row_splits_1",
  ]
  rt = tf.ragged.constant([[1.0, 2.0], [], [3.5]], F32)
  rt2 = tf.ragged.constant([[[1.0], [], [2.0, 3.0]], [], [[4.0]]], F32)
  want = [w.numpy() for w in f(rt, rt2)]
  for got in (
    fn(rt, rt2),
    jax.jit(fn)(
      (np.float32([1, 2, 3.5]), np.int64([0, 2, 2, 3])),
      tuple(c.numpy() for c in tf.nest.flatten(rt2, expand_composites=True)),
    ),
  ):
    for g, w in zip(got, want):
      np.testing.assert_allclose(g, w)


def test_composite_input_and_output_errors():
  f = tf.function(lambda sp: tf.sparse.reduce_sum(sp))
  fn = tfprims.convert_functional(f, tf.SparseTensorSpec([3, 3], F32))
  with pytest.raises(tfprims.InputStructureError, match="'sp' is a SparseTensor: pass"):
    fn(np.zeros((3, 3), np.float32))
  with pytest.raises(tfprims.InputShapeError, match=r"sparse shape is \[3, 3\]"):
    fn(([[0, 0]], [1.0], [3, 4]))
  batched = sparse.BCOO(
    (np.ones((2, 1), np.float32), np.zeros((2, 1, 2), np.int32)), shape=(2, 3, 3)
  )  # n_batch=1
  with pytest.raises(tfprims.InputStructureError, match="n_batch=1"):
    fn(batched)
  g = tf.function(lambda rt: rt * 2.0)
  with pytest.raises(tfprims.ConversionError, match="output of kind RaggedTensor"):
    tfprims.convert(g, tf.RaggedTensorSpec([2, None], F32))


def test_sparse_dense_matmul_batching_is_tf_named_and_per_example():
  """vmap over the dense operand (its columns joined) and over the sparse operand (one
  block-diagonal product) equals each example's product; an index outside a_shape adds
  nothing in its own example and reaches no other (an inf in the other's B stays out)."""
  from tfprims.core import get_op

  mm = get_op("SparseTensorDenseMatMul")
  rng = np.random.default_rng(0)
  idx = np.array([[2, 1], [0, 0], [2, 1], [-1, 3], [3, 4]], np.int64)  # two outside [4, 4]
  vals = rng.standard_normal((3, 5)).astype(np.float32)
  idxs = np.stack([idx, idx[::-1], np.roll(idx, 1, axis=0)])
  for adjoint_a, adjoint_b in ((False, False), (True, True), (False, True)):
    p = dict(a_shape=(4, 4), adjoint_a=adjoint_a, adjoint_b=adjoint_b)
    b = rng.standard_normal((3, 2, 4)).astype(np.float32)
    if not adjoint_b:
      b = np.swapaxes(b, 1, 2)
    b[1, 0, 0] = np.inf  # a finite example 0 and 2 need it kept in example 1's block
    one = lambda i, v, bb: mm(i, v, bb, **p)
    for in_axes, args in (
      ((None, None, 0), (idx, vals[0], b)),
      ((None, 0, None), (idx, vals, b[0])),
      ((0, 0, 0), (idxs, vals, b)),
    ):
      fn = jax.vmap(one, in_axes=in_axes)
      got = jax.jit(fn)(*args)
      for k in range(3):
        want = one(*[a if ax is None else a[k] for a, ax in zip(args, in_axes)])
        np.testing.assert_allclose(got[k], want, rtol=1e-6, atol=1e-6)
      assert jaxpr_primitives(jax.make_jaxpr(fn)(*args)) >= {"tf.SparseTensorDenseMatMul"}
      assert "scatter-add" not in jaxpr_primitives(jax.make_jaxpr(fn)(*args))
  # The per-example reference against TF (the last b is an adjoint_b one).
  ok = idx[:3]
  want = tf.sparse.sparse_dense_matmul(
    tf.SparseTensor(ok, vals[0, :3], [4, 4]), b[0], adjoint_b=True
  ).numpy()
  np.testing.assert_allclose(
    mm(ok, vals[0, :3], b[0], a_shape=(4, 4), adjoint_a=False, adjoint_b=True), want, rtol=1e-6
  )


def test_indices_outside_the_dense_shape_add_nothing():
  """docs/semantics/sparse.md: where TF raises on an index outside the dense shape,
  tfprims drops the entry, negative indices included (they must not count from the end)."""
  from tfprims.core import get_op

  idx = np.array([[0, 0], [-1, 1], [1, -1], [2, 0]], np.int64)
  vals = np.float32([1.0, 2.0, 3.0, 4.0])
  b = np.arange(8, dtype=np.float32).reshape(2, 4)
  want = tf.sparse.sparse_dense_matmul(tf.SparseTensor(idx[:1], vals[:1], [2, 2]), b).numpy()
  got = get_op("SparseTensorDenseMatMul")(
    idx, vals, b, a_shape=(2, 2), adjoint_a=False, adjoint_b=False
  )
  np.testing.assert_array_equal(got, want)
  dense = np.zeros((2, 2), np.float32)
  want = tf.sparse.add(tf.SparseTensor(idx[:1], vals[:1], [2, 2]), dense).numpy()
  got = get_op("SparseTensorDenseAdd")(idx, vals, dense, a_shape=(2, 2))
  np.testing.assert_array_equal(got, want)


def test_sparse_dense_cwise_index_outside_the_shape_nan_or_raise_as_tf():
  """docs/semantics/sparse.md: SparseDenseCwiseMul/Add/Div with an index outside
  sp_shape (past the end, negative, in a dimension the dense side broadcasts): TF
  raises; eager calls raise RuntimeCheckError with TF's message, jit gives NaN there
  (0 for integers) and TF's values and gradients elsewhere, runtime_checks raises."""
  from tfprims.core import get_op

  @tf.function
  def f(i, v, d):
    ops = (R.SparseDenseCwiseMul, R.SparseDenseCwiseAdd, R.SparseDenseCwiseDiv)
    return [op(sp_indices=i, sp_values=v, sp_shape=[2, 3], dense=d) for op in ops]

  spec = (tf.TensorSpec([6, 2], tf.int64), tf.TensorSpec([6], F32), tf.TensorSpec([1, 3], F32))
  fn = tfprims.convert_functional(f, *spec)
  bad = np.array([[0, 1], [2, 0], [-1, 1], [1, 3], [1, 2], [9, 0]], np.int64)
  ok = np.array([True, False, False, False, True, False])
  good = np.where(ok[:, None], bad, 0)
  v, d = np.float32([2, 3, 4, 5, 6, 7]), np.float32([[1.5, -2.0, 4.0]])
  for x, y in zip(fn(good, v, d), f(good, v, d)):
    np.testing.assert_allclose(x, y.numpy(), rtol=1e-6)
  with pytest.raises(tf.errors.InvalidArgumentError, match="out-of-bounds"):
    f(bad, v, d)
  with pytest.raises(tfprims.RuntimeCheckError, match="SparseDenseCwiseMul.*out-of-bounds"):
    fn(bad, v, d)
  want = f(bad[ok], v[ok], d)

  def loss(v, d):
    out = fn(bad, v, d)
    return sum(jnp.sum(jnp.where(ok, o, 0.0)) for o in (out[0], out[2])), out

  (_, got), grads = jax.jit(jax.value_and_grad(loss, argnums=(0, 1), has_aux=True))(v, d)
  for x, y in zip(got, want):
    assert np.isnan(np.asarray(x)[~ok]).all()
    np.testing.assert_allclose(np.asarray(x)[ok], y.numpy(), rtol=1e-6)
  with tf.GradientTape() as tape:
    tv, td = tf.constant(v[ok]), tf.constant(d)
    tape.watch([tv, td])
    kw = {"sp_indices": bad[ok], "sp_values": tv, "sp_shape": [2, 3], "dense": td}
    tf_loss = tf.reduce_sum(R.SparseDenseCwiseMul(**kw)) + tf.reduce_sum(
      R.SparseDenseCwiseDiv(**kw)
    )
  tgv, tgd = tape.gradient(tf_loss, [tv, td])
  np.testing.assert_allclose(grads[0][ok], tgv.numpy(), rtol=1e-6)
  np.testing.assert_array_equal(grads[0][~ok], 0)
  np.testing.assert_allclose(grads[1], tgd.numpy(), rtol=1e-6)
  # Integers: 0 where the index is outside.
  vi, di = np.int32([2, 3, 4, 5, 6, 7]), np.int32([[3, -2, 4]])
  got = get_op("SparseDenseCwiseMul")(bad, vi, di, sp_shape=(2, 3))
  np.testing.assert_array_equal(np.asarray(got)[~ok], 0)
  want = R.SparseDenseCwiseMul(sp_indices=bad[ok], sp_values=vi[ok], sp_shape=[2, 3], dense=di)
  np.testing.assert_array_equal(np.asarray(got)[ok], want.numpy())
  with tfprims.override_config("runtime_checks", True):
    checked = jax.jit(fn)
    with pytest.raises(Exception, match="out-of-bounds"):
      jax.block_until_ready(checked(bad, v, d))
    for x, y in zip(checked(good, v, d), f(good, v, d)):
      np.testing.assert_allclose(x, y.numpy(), rtol=1e-6)


def test_split_bincount_and_sparse_counts_eager_and_jit():
  # Unsorted, duplicate values in a row, an empty row (1), values past maxlength (7, 9).
  idx = np.array([[2, 1], [0, 0], [2, 3], [0, 4], [3, 0], [0, 2], [2, 4]], np.int64)
  ints = np.array([1, 5, 2, 7, 0, 5, 9], np.int64)
  shape = np.array([4, 5], np.int64)

  def counts(s, w):
    return (
      tf.sparse.split(sp_input=w, num_split=2, axis=1),
      tf.math.bincount(s, weights=w, minlength=6, maxlength=6, axis=-1),
      tf.math.bincount(s, minlength=6, maxlength=6, binary_output=True, axis=-1),
      tf.sparse.bincount(s, weights=w, minlength=3, axis=-1),
      tf.sparse.bincount(s, maxlength=4, binary_output=True, axis=-1),
    )

  f = tf.function(lambda w: counts(tf.SparseTensor(idx, ints, shape), w))  # known ids
  g = tf.function(counts)  # ids an input
  wspec = tf.SparseTensorSpec([4, 5], F32)
  fn = tfprims.convert_functional(f, wspec)
  gn = tfprims.convert_functional(g, tf.SparseTensorSpec([4, 5], tf.int64), wspec)
  wv = np.float32([0.5, 1.5, -2.0, 3.0, 4.0, 0.25, 1.0])
  w = tf.SparseTensor(idx, wv, shape)
  want = tf.nest.flatten(f(w), expand_composites=True)
  # Eager (ids an input, or constants), and jit with the weights' values traced.
  for got in (
    gn(tf.SparseTensor(idx, ints, shape), w),
    fn(w),
    jax.jit(lambda v: fn((idx, v, shape)))(wv),
  ):
    flat = []
    for x in jax.tree.leaves(got, is_leaf=lambda x: isinstance(x, sparse.BCOO)):
      flat += [x.indices, x.data, np.asarray(x.shape)] if isinstance(x, sparse.BCOO) else [x]
    assert len(flat) == len(want)
    for x, y in zip(flat, want):
      np.testing.assert_allclose(np.asarray(x), y.numpy(), rtol=1e-6)
  jaxpr = jax.make_jaxpr(lambda v: fn((idx, v, shape)))(wv)
  assert {"tf.SparseSplit", "tf.SparseBincount", "tf.SparseCountSparseOutput"} <= jaxpr_primitives(
    jaxpr
  )
  # The counted ids traced: the sizes depend on them.
  with pytest.raises(tfprims.StaticInputError, match="node"):
    jax.jit(lambda v: gn((idx, v, shape), (idx, wv, shape)))(ints)


def test_dense_bincount_sparse_output_eager_and_jit_and_tf_errors():
  """tf.sparse.bincount of a dense tensor (DenseCountSparseOutput): rank 2 (per row)
  and rank 1 (axis=0), duplicates, a value past maxlength, empty rows of columns, as
  TF eager, jit with the weights traced; the counted values traced raise
  StaticInputError; negative values and a [0, n] input raise as TF does."""
  ids = np.array([[3, 1, 3], [0, 7, 7]], np.int64)

  def counts(x, w):
    return (
      tf.sparse.bincount(x, weights=w, axis=-1),
      tf.sparse.bincount(x, maxlength=4, binary_output=True, axis=-1),
      tf.sparse.bincount(x, weights=w, minlength=10, axis=0),
      tf.sparse.bincount(x[:, :0], axis=-1),
      tf.sparse.bincount(x, weights=w, maxlength=0, axis=-1),
    )

  f = tf.function(lambda w: counts(tf.constant(ids), w))  # known ids
  g = tf.function(counts)  # ids an input
  wspec = tf.TensorSpec([2, 3], F32)
  fn = tfprims.convert_functional(f, wspec)
  gn = tfprims.convert_functional(g, tf.TensorSpec([2, 3], tf.int64), wspec)
  w = np.float32([[0.5, 1.5, -2.0], [3.0, 4.0, 0.25]])
  want = tf.nest.flatten(f(w), expand_composites=True)
  for got in (gn(ids, w), fn(w), jax.jit(fn)(w)):
    flat = []
    for x in jax.tree.leaves(got, is_leaf=lambda x: isinstance(x, sparse.BCOO)):
      flat += [x.indices, x.data, np.asarray(x.shape)]
    assert len(flat) == len(want)
    for x, y in zip(flat, want):
      np.testing.assert_allclose(np.asarray(x).reshape(y.shape), y.numpy(), rtol=1e-6)
  assert "tf.DenseCountSparseOutput" in jaxpr_primitives(jax.make_jaxpr(fn)(w))
  with pytest.raises(tfprims.StaticInputError, match="node"):
    jax.jit(lambda v: gn(v, w))(ids)
  neg = ids - 1
  with pytest.raises(tf.errors.InvalidArgumentError, match="must all be non-negative"):
    g(neg, w)
  with pytest.raises(tfprims.errors.OpError, match="DenseCount.*must all be non-negative"):
    gn(neg, w)
  raw = tf.function(
    lambda x: tf.raw_ops.DenseCountSparseOutput(
      values=x, weights=tf.zeros([0]), binary_output=False
    )
  )
  none = np.zeros((0, 3), np.int32)
  with pytest.raises(tf.errors.InvalidArgumentError, match="cannot be 0"):
    raw(none)
  with pytest.raises(tfprims.errors.OpError, match="cannot be 0"):
    tfprims.convert_functional(raw, tf.TensorSpec([0, 3], tf.int32))(none)


def test_grad_through_sparse_add_fill_empty_rows_slice_uses_tf_gradient_ops():
  @tf.function
  def f(a, b):
    filled, _ = tf.sparse.fill_empty_rows(tf.sparse.add(a, b), -1.0)
    return tf.sparse.slice(filled, [1, 0], [3, 4])

  spec = tf.SparseTensorSpec([4, 4], F32)
  fn = tfprims.convert_functional(f, spec, spec)
  a_idx = np.array([[0, 1], [2, 2], [3, 3]], np.int64)  # row 1 empty in the sum
  b_idx = np.array([[0, 1], [2, 0], [3, 3]], np.int64)  # two coinciding with a
  av, bv = np.float32([1, -3, 4]), np.float32([-0.5, 5, 2.5])
  ct = np.float32([0.5, -1.0, 2.0, 3.0, -4.0])

  def loss(x, y):
    out = fn((a_idx, x, _SHAPE), (b_idx, y, _SHAPE))
    return jnp.sum(out.data * ct[: out.data.shape[0]])

  got = jax.jit(jax.grad(loss, argnums=(0, 1)))(av, bv)
  x, y = tf.constant(av), tf.constant(bv)
  with tf.GradientTape() as tape:
    tape.watch([x, y])
    out = f(tf.SparseTensor(a_idx, x, _SHAPE), tf.SparseTensor(b_idx, y, _SHAPE))
    loss_tf = tf.reduce_sum(out.values * ct[: out.values.shape[0]])
  for g, t in zip(got, tape.gradient(loss_tf, [x, y])):
    np.testing.assert_allclose(g, t, rtol=1e-6)
  prims = jaxpr_primitives(jax.make_jaxpr(jax.grad(loss, argnums=(0, 1)))(av, bv))
  assert {"tf.SparseAddGrad", "tf.SparseFillEmptyRowsGrad", "tf.SparseSliceGrad"} <= prims


def test_cross_hashed_int64_features_bit_exact_eager_and_jit():
  @tf.function
  def f(a, b, d):
    return (
      tf.sparse.cross_hashed([a, b, d], num_buckets=1000),
      tf.raw_ops.SparseCrossHashed(
        indices=[a.indices, b.indices],
        values=[a.values, b.values],
        shapes=[a.dense_shape, b.dense_shape],
        dense_inputs=[d],
        num_buckets=65537,
        strong_hash=False,
        salt=[1, 2],
      ),
    )

  i64 = tf.int64
  fn = tfprims.convert_functional(
    f,
    tf.SparseTensorSpec([3, 3], i64),
    tf.SparseTensorSpec([3, 2], i64),
    tf.TensorSpec([3, 2], i64),
  )
  a_idx = np.array([[0, 0], [0, 2], [2, 1]], np.int64)  # row 1 empty: no crosses
  b_idx = np.array([[0, 0], [1, 1], [2, 0], [2, 1]], np.int64)
  av, bv = np.array([5, -3, 2**31 - 1], np.int64), np.array([11, -(2**31), 0, 7], np.int64)
  d = np.array([[100, -7], [1, 2], [9, 10]], np.int64)
  a, b = tf.SparseTensor(a_idx, av, [3, 3]), tf.SparseTensor(b_idx, bv, [3, 2])
  want = tf.nest.flatten(f(a, b, d), expand_composites=True)
  for got in (
    fn(a, b, d),
    jax.jit(lambda x, y, z: fn((a_idx, x, [3, 3]), (b_idx, y, [3, 2]), z))(av, bv, d),
  ):
    flat = []
    for g in jax.tree.leaves(got, is_leaf=lambda x: isinstance(x, sparse.BCOO)):
      flat += [g.indices, g.data, np.asarray(g.shape)] if isinstance(g, sparse.BCOO) else [g]
    assert len(flat) == len(want) == 6
    for g, w in zip(flat, want):
      np.testing.assert_array_equal(np.asarray(g), w.numpy())
  # String crosses have no JAX dtype: refused naming the node.
  g = tf.function(lambda a, b: tf.sparse.cross([a, b]))
  with pytest.raises(tfprims.ConversionError, match="SparseCross"):
    gn = tfprims.convert_functional(
      g, tf.SparseTensorSpec([3, 3], i64), tf.SparseTensorSpec([3, 2], i64)
    )
    gn(a, b)
  # strong_hash (SipHash) is refused with a typed error naming the node.
  h = tf.function(
    lambda a: tf.raw_ops.SparseCrossHashed(
      indices=[a.indices],
      values=[a.values],
      shapes=[a.dense_shape],
      dense_inputs=[],
      num_buckets=10,
      strong_hash=True,
      salt=[1, 2],
    )
  )
  hn = tfprims.convert_functional(h, tf.SparseTensorSpec([3, 3], i64))
  with pytest.raises(tfprims.OpError, match="SparseCrossHashed node .*strong_hash"):
    hn(a)
