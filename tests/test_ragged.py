"""Ragged tensors built inside tf.functions from dense inputs (from_row_lengths,
from_row_splits, from_value_rowids, from_tensor, tf.ragged.constant): to_tensor,
gather, range, to_sparse, boolean_mask and the ragged reductions, converted and
compared with TF eagerly and under jit; under jit a size that depends on traced row
partitions is a DynamicShapeError (or StaticInputError) naming the node, and the
same functions jit when the partitions are constants (docs/semantics/ragged.md)."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import tensorflow as tf

import tfprims
from helpers import jaxpr_primitives

F32, I32 = tf.float32, tf.int32
VALUES = np.float32([1.5, -2.0, 3.0, 0.25, 5.0, -6.0])
LENGTHS = np.int32([2, 0, 4])  # an empty row and a row longer than 3


def _spec(a):
  return tf.TensorSpec(np.shape(a), tf.as_dtype(np.asarray(a).dtype))


def _convert(f, *args):
  return tfprims.convert_functional(f, *map(_spec, args))


def _equal(got, want):
  got, want = tf.nest.flatten(got), tf.nest.flatten(want)
  assert len(got) == len(want)
  for g, w in zip(got, want):
    w = np.asarray(w)
    assert np.shape(g) == w.shape, (np.shape(g), w.shape)
    np.testing.assert_array_equal(np.asarray(g).astype(w.dtype), w)


@tf.function
def _dense_patterns(v, lengths, rowids, idx):
  rt = tf.RaggedTensor.from_row_lengths(v, lengths)
  splits = tf.concat([[0], tf.cumsum(lengths)], 0)
  nested = tf.RaggedTensor.from_nested_row_lengths(v, [tf.constant([1, 2]), lengths])
  return {
    "cut": rt.to_tensor(shape=[3, 3]),  # a row cut, one empty
    "padded": tf.RaggedTensor.from_row_splits(v, splits).to_tensor(
      default_value=-1.0, shape=[4, 5]
    ),
    "rowids": tf.RaggedTensor.from_value_rowids(v, rowids, nrows=4).to_tensor(
      default_value=7.0, shape=[None, 5]
    ),
    "rank2": nested.to_tensor(shape=[2, 2, 4]),
    "inner": tf.RaggedTensor.from_row_lengths(tf.reshape(v, [3, 2]), [1, 0, 2]).to_tensor(
      default_value=[8.0, 9.0], shape=[3, 2, 2]
    ),
    "const": tf.ragged.constant([[1.0, 2.0], [], [3.0]]).to_tensor() * v[0],
    "gather_const": tf.gather(tf.ragged.constant([[1, 2], [], [3, 4, 5]]), [2, 0, 2]).to_tensor()
    + idx[0],
    "range_const": tf.ragged.range([0, 5, 3], [4, 5, -3], [1, 2, -2]).to_tensor() + idx[0],
    "row_lengths": rt.row_lengths(),
    "sparse": (lambda sp: (sp.indices, sp.values, sp.dense_shape))(rt.to_sparse()),
  }


def _dense_args():
  return VALUES, LENGTHS, np.int32([0, 0, 2, 2, 2, 3]), np.int32([2, 0])


def test_to_tensor_gather_range_sparse_under_jit():
  # (eager calls of these ops: test_inferred_shapes_eager_exact_and_refused_traced)
  args = _dense_args()
  fn = _convert(_dense_patterns, *args)
  _equal(jax.jit(fn)(*args), _dense_patterns(*args))
  names = {e.primitive.name for e in jax.make_jaxpr(fn)(*args).jaxpr.eqns}
  assert {"tf.RaggedTensorToTensor", "tf.RaggedTensorToSparse"} <= names


@tf.function
def _inferred(v, lengths, idx):
  rt = tf.RaggedTensor.from_row_lengths(v, lengths)
  return (
    rt.to_tensor(),
    tf.gather(rt, idx).to_tensor(),
    tf.ragged.range(lengths, 2 * lengths + 1).to_tensor(),
    tf.ragged.boolean_mask(rt, rt > 0.0).to_tensor(),
  )


@pytest.mark.parametrize(
  "values,lengths", [(VALUES, LENGTHS), (np.zeros(0, np.float32), np.int32([0, 0, 0]))]
)  # all rows empty
def test_inferred_shapes_eager_exact_and_refused_traced(values, lengths):
  args = (values, lengths, np.int32([2, 1, 2]))
  fn = _convert(_inferred, *args)
  _equal(fn(*args), _inferred(*args))
  with pytest.raises(tfprims.DynamicShapeError, match=r"RaggedTensorToTensor node '.*'"):
    jax.jit(fn)(*args)


def test_zero_rows_and_errors_of_tf_on_known_values():
  @tf.function
  def f(v, splits):
    return tf.raw_ops.RaggedTensorToTensor(
      shape=tf.constant(-1, tf.int64),
      values=v,
      default_value=tf.constant(0.0),
      row_partition_tensors=[splits],
      row_partition_types=["ROW_SPLITS"],
    )

  zero = (np.zeros(0, np.float32), np.int32([0]))
  _equal(_convert(f, *zero)(*zero), f(*zero))
  bad = (VALUES, np.int32([0, 4, 2, 6]))
  fn = _convert(f, *bad)
  with pytest.raises(tf.errors.InvalidArgumentError):
    f(*bad)
  with pytest.raises(tfprims.RuntimeCheckError, match="RaggedTensorToTensor node"):
    fn(*bad)
  g = tf.function(lambda i: tf.gather(tf.ragged.constant([[1, 2], [3]]), i).flat_values)
  with pytest.raises(tf.errors.InvalidArgumentError, match=r"indices\[1\] = 5 is not in"):
    g(np.int32([0, 5]))
  with pytest.raises(tfprims.OpError, match=r"RaggedGather node .*indices\[1\] = 5 is not in"):
    _convert(g, np.int32([0, 5]))(np.int32([0, 5]))


def _tape_grad(f, x, *rest):
  xt = tf.constant(x)
  with tf.GradientTape() as tape:
    tape.watch(xt)
    y = f(xt, *rest)
  return tf.convert_to_tensor(tape.gradient(y, xt)).numpy()


@tf.function
def _reductions(v, lengths):
  rt = tf.RaggedTensor.from_row_lengths(v, lengths)
  fixed = tf.RaggedTensor.from_row_lengths(v, tf.constant([1, 2, 3]))  # a constant partition
  w = tf.constant([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0], [7.0, 8.0, 9.0]])
  return (
    tf.reduce_sum(rt.to_tensor(shape=[3, 3]) * w)
    + tf.reduce_sum(tf.reduce_sum(rt, axis=1) * [1.0, 2.0, 3.0])
    + tf.reduce_sum(tf.reduce_max(rt, axis=1) * [0.5, 0.0, 2.0])
  ), (
    tf.reduce_sum(fixed, axis=1),
    tf.reduce_mean(fixed, axis=1),
    tf.reduce_max(fixed, axis=1),
    fixed.to_tensor(),
  )


def test_reductions_and_to_tensor_values_and_grads():
  fn = _convert(_reductions, VALUES, LENGTHS)
  want = _reductions(VALUES, LENGTHS)
  got = fn(VALUES, LENGTHS)
  np.testing.assert_allclose(got[0], want[0], rtol=1e-6)
  _equal(got[1], want[1])
  # the reductions' segment ids are computed in static sizes (tfprims.ops.ragged_patterns):
  # traced lengths jit; so does a constant partition
  got = jax.jit(fn)(VALUES, LENGTHS)
  np.testing.assert_allclose(got[0], want[0], rtol=1e-6)
  _equal(got[1], want[1])
  fixed = _convert(lambda v: _reductions(v, LENGTHS)[1], VALUES)
  _equal(jax.jit(fixed)(VALUES), want[1])
  # grad wrt the values of to_tensor and the reductions, under jit
  w = [
    np.float32([1.0, -2.0, 0.5]),
    np.float32([0.25, 3.0, -1.0]),
    np.float32([2.0, 1.0, 4.0]),
    np.float32(np.arange(9).reshape(3, 3) - 4.0),
  ]

  def loss(v):
    return sum(jnp.sum(o * c) for o, c in zip(fixed(v), w))

  grad = jax.jit(jax.grad(loss))(VALUES)
  # to_tensor's transpose: the cotangent gathered back (TF-named)
  assert {"tf.GatherV2", "tf.RaggedTensorToTensor"} <= jaxpr_primitives(
    jax.make_jaxpr(jax.grad(loss))(VALUES)
  )
  np.testing.assert_allclose(
    grad,
    _tape_grad(
      lambda v, n: tf.add_n([tf.reduce_sum(o * c) for o, c in zip(_reductions(v, n)[1], w)]),
      VALUES,
      LENGTHS,
    ),
    rtol=1e-6,
  )


@tf.function
def _embedding_mean(ids, lengths, table):
  tokens = tf.RaggedTensor.from_row_lengths(ids, lengths)
  return tf.reduce_mean(tf.gather(table, tokens), axis=1)  # (batch, dim); empty rows NaN


def test_token_ids_embedding_lookup_ragged_mean():
  ids, lengths = np.int32([0, 4, 2, 2, 1, 3, 4]), np.int32([2, 0, 1, 4])
  table = np.float32(np.arange(10).reshape(5, 2) * 0.5 - 1.0)
  fn = _convert(_embedding_mean, ids, lengths, table)
  want = _embedding_mean(ids, lengths, table).numpy()
  _equal(fn(ids, lengths, table), want)  # NaN for the empty row, as TF
  _equal(jax.jit(fn)(ids, lengths, table), want)  # traced lengths jit (static segment ids)

  def tf_loss(t, i, n):
    out = _embedding_mean(i, n, t)
    return tf.reduce_sum(tf.where(tf.math.is_nan(out), 0.0, out))

  grad = jax.grad(lambda t: jnp.nansum(fn(ids, lengths, t)))(table)
  np.testing.assert_allclose(grad, _tape_grad(tf_loss, table, ids, lengths), rtol=1e-6)


def test_from_tensor_with_lengths_and_to_tensor_under_vmap():
  @tf.function
  def f(x, lengths):
    rt = tf.RaggedTensor.from_tensor(x, lengths=lengths)
    const = tf.RaggedTensor.from_tensor(x, lengths=tf.constant([3, 0, 2]))
    return (
      rt.flat_values,
      rt.row_splits,
      rt.to_tensor(shape=[3, 4], default_value=-1.0),
      const.flat_values,
      const.to_tensor(),
    )

  x, lengths = np.float32(np.arange(12).reshape(3, 4)), np.int32([1, 0, 4])
  fn = _convert(f, x, lengths)
  _equal(fn(x, lengths), f(x, lengths))
  with pytest.raises(tfprims.DynamicShapeError, match="Where node"):
    jax.jit(fn)(x, lengths)
  g = _convert(lambda a: f(a, lengths)[3:], x)
  _equal(jax.jit(g)(x), f(x, lengths)[3:])
  # vmap over the values of a fixed ragged structure
  h = _convert(
    lambda v: tf.RaggedTensor.from_row_lengths(v, LENGTHS).to_tensor(shape=[3, 4]), VALUES
  )
  xs = np.stack([VALUES, -VALUES])
  _equal(jax.vmap(h)(xs), np.stack([h(VALUES), h(-VALUES)]))
  assert "tf.RaggedTensorToTensor" in jaxpr_primitives(jax.make_jaxpr(jax.vmap(h))(xs))


def test_ragged_counts_and_fill_empty_rows_eager_jit_and_grad():
  ints = np.int32([3, 1, 3, 0, 7, 2])  # a repeat in a row, 7 past the bins
  w = np.float32([0.5, 1.5, -2.0, 3.0, 4.0, 0.25])

  @tf.function
  def f(ints, lengths, w, fv):
    rt = tf.RaggedTensor.from_row_lengths(ints, tf.cast(lengths, tf.int64))
    rw = tf.RaggedTensor.from_row_lengths(w, tf.cast(lengths, tf.int64))
    counted = tf.raw_ops.RaggedCountSparseOutput(
      splits=rt.row_splits, values=rt.values, weights=w, binary_output=False, maxlength=5
    )
    filled = tf.raw_ops.RaggedFillEmptyRows(
      value_rowids=rt.value_rowids(), values=fv, nrows=rt.nrows(), default_value=tf.constant(-1.0)
    )
    return (
      tf.math.bincount(rt, weights=rw, minlength=5, maxlength=5, axis=-1),
      tf.math.bincount(rt, minlength=4, maxlength=4, binary_output=True, axis=-1),
      *counted,
      *filled,
    )

  fn = _convert(f, ints, LENGTHS, w, VALUES)
  want = f(ints, LENGTHS, w, VALUES)
  _equal(fn(ints, LENGTHS, w, VALUES), want)
  # Constant ids and row lengths: jit with the weights and values traced.
  fixed = _convert(lambda w, v: f(ints, LENGTHS, w, v), w, VALUES)
  _equal(jax.jit(fixed)(w, VALUES), want)
  assert {
    "tf.RaggedBincount",
    "tf.RaggedCountSparseOutput",
    "tf.RaggedFillEmptyRows",
  } <= jaxpr_primitives(jax.make_jaxpr(fixed)(w, VALUES))
  # The gradient of the filled values, against TF's (RaggedFillEmptyRowsGrad).
  ct = np.linspace(-1, 1, 7).astype(np.float32)

  def loss(v):
    return jnp.sum(fixed(w, v)[6] * ct)

  x = tf.constant(VALUES)
  with tf.GradientTape() as tape:
    tape.watch(x)
    rowids = np.repeat(np.arange(3), LENGTHS).astype(np.int64)
    y = tf.reduce_sum(
      tf.raw_ops.RaggedFillEmptyRows(
        value_rowids=rowids, values=x, nrows=np.int64(3), default_value=tf.constant(-1.0)
      )[1]
      * ct
    )
  np.testing.assert_allclose(jax.jit(jax.grad(loss))(VALUES), tape.gradient(y, x), rtol=1e-6)
  assert "tf.RaggedFillEmptyRowsGrad" in jaxpr_primitives(jax.make_jaxpr(jax.grad(loss))(VALUES))
  # Traced ids and row lengths: the sizes depend on them.
  with pytest.raises((tfprims.DynamicShapeError, tfprims.StaticInputError), match="node"):
    jax.jit(fn)(ints, LENGTHS, w, VALUES)
