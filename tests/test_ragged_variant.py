"""Ragged tensors as TF variants (RaggedTensorToVariant, RaggedTensorFromVariant,
RaggedTensorToVariantGradient): tf.map_fn over the rows of a ragged tensor and the
direct round trip, against TF eagerly, under jit with row splits known at trace time,
under grad and vmap of the flat values; traced splits and variants reaching other ops
or outputs raise typed errors naming the node (docs/semantics/ragged.md)."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import tensorflow as tf

import tfprims
from helpers import jaxpr_primitives

F32, I64 = tf.float32, tf.int64
R = tf.raw_ops
SPEC = tf.RaggedTensorSpec([None, None], F32, 1, I64)
SPEC2 = tf.RaggedTensorSpec([None, None, None], F32, 2, I64)
ROW = tf.RaggedTensorSpec([None], F32, 0, I64)


def _parts(rt):
  return tuple(tf.nest.flatten(rt, expand_composites=True))


@tf.function
def _map_rows(rt):
  """map_fn over the rows: a dense result (fn of each row) and a ragged one."""
  dense = tf.map_fn(lambda r: tf.reduce_sum(tf.sin(r) * r), rt, fn_output_signature=F32)
  lengths = tf.map_fn(lambda r: tf.shape(r)[0], rt, fn_output_signature=tf.int32)
  ragged = tf.map_fn(lambda r: r * 2.0 + 1.0, rt, fn_output_signature=ROW)
  return (dense, lengths) + _parts(ragged)


@tf.function
def _map_rows2(rt):
  """Ragged rank 2: each row is itself ragged."""
  dense = tf.map_fn(lambda r: tf.reduce_sum(r), rt, fn_output_signature=F32)
  spec = tf.RaggedTensorSpec([None, None], F32, 1, I64)
  return (dense,) + _parts(tf.map_fn(lambda r: r * 3.0, rt, fn_output_signature=spec))


def _rt(rows, splits_only=None):
  if splits_only is not None:
    return tf.RaggedTensor.from_row_splits(tf.zeros([0], F32), tf.constant(splits_only, I64))
  return tf.ragged.constant(rows, F32, row_splits_dtype=I64)


def _check(got, want):
  assert len(got) == len(want)
  for g, w in zip(got, want):
    w = w.numpy()
    assert np.shape(g) == w.shape, (np.shape(g), w.shape)
    np.testing.assert_allclose(np.asarray(g), w, rtol=1e-6, atol=1e-6)


def test_map_fn_over_ragged_rows_matches_tf_eager_jit_grad_vmap():
  fn = tfprims.convert_functional(_map_rows, SPEC)
  cases = [
    _rt([[1.5, -2.0], [], [3.0, 0.25, 5.0, -6.0], []]),
    _rt([[0.5]]),
    _rt(None, [0]),  # an empty ragged tensor: no rows
    _rt(None, [0, 0, 0]),  # rows, all empty
  ]
  for rt in cases:  # eager: any row lengths
    _check(fn(rt), _map_rows(rt))
  # under jit, the splits closed over as numpy (trace-time constants): one program per
  # structure, the values traced; the rows are cut by one tf.SplitV
  rt = cases[0]
  values, splits = rt.flat_values.numpy(), rt.row_splits.numpy()
  jitted = jax.jit(lambda v: fn((v, splits)))
  _check(jitted(values), _map_rows(rt))
  _check(jitted(values[::-1].copy()), _map_rows(rt.with_flat_values(values[::-1].copy())))
  prims = jaxpr_primitives(jax.make_jaxpr(lambda v: fn((v, splits)))(values))
  assert {"tf.SplitV", "tf.Sin", "tf.ConcatV2"} <= prims and "while" not in prims
  # the gradient of the dense map_fn result wrt the flat values, vs TF's tape (TF has
  # none through the ragged result: its ZerosLike of the variant list raises); the
  # ragged result (2 r + 1 per row) adds 2 w_rag
  w = np.float32([1.0, -2.0, 0.5, 3.0])
  w_rag = np.linspace(-1.0, 1.0, len(values), dtype=np.float32)
  v = tf.constant(values)
  with tf.GradientTape() as tape:
    tape.watch(v)
    dense = tf.map_fn(
      lambda r: tf.reduce_sum(tf.sin(r) * r), rt.with_flat_values(v), fn_output_signature=F32
    )
    loss = tf.reduce_sum(dense * w)
  want = tape.gradient(loss, v).numpy()

  def jloss(v):
    out = fn((v, splits))
    return jnp.sum(out[0] * w) + jnp.sum(out[2] * w_rag)

  np.testing.assert_allclose(
    jax.jit(jax.grad(jloss))(values), want + 2 * w_rag, rtol=1e-5, atol=1e-6
  )
  # vmap over a batch of flat values sharing the row splits
  batch = np.stack([values, values * 2.0 - 1.0])
  got = jax.vmap(lambda v: fn((v, splits))[0])(batch)
  for b in range(2):
    np.testing.assert_allclose(
      got[b], _map_rows(rt.with_flat_values(batch[b]))[0].numpy(), rtol=1e-6
    )
  # ragged rank 2 (rows that are ragged themselves), eagerly and under jit
  fn2 = tfprims.convert_functional(_map_rows2, SPEC2)
  rt2 = tf.ragged.constant(
    [[[1.0, 2.0], []], [[3.0]], [], [[4.0, 5.0], [6.0]]], F32, 2, row_splits_dtype=I64
  )
  _check(fn2(rt2), _map_rows2(rt2))
  comps = [c.numpy() for c in _parts(rt2)]
  _check(jax.jit(lambda v: fn2((v, *comps[1:])))(comps[0]), _map_rows2(rt2))


@tf.function
def _round_trip(rt):
  v, s = rt.flat_values, rt.row_splits
  batched = R.RaggedTensorToVariant(rt_nested_splits=[s], rt_dense_values=v, batched_input=True)
  one = R.RaggedTensorToVariant(rt_nested_splits=[s], rt_dense_values=v, batched_input=False)
  kw = dict(Tvalues=F32, Tsplits=I64)
  a = R.RaggedTensorFromVariant(
    encoded_ragged=batched, input_ragged_rank=0, output_ragged_rank=1, **kw
  )
  b = R.RaggedTensorFromVariant(
    encoded_ragged=one, input_ragged_rank=-1, output_ragged_rank=1, **kw
  )
  c = R.RaggedTensorFromVariant(  # tf.stack of two scalar variants: ragged rank 2
    encoded_ragged=tf.stack([one, one]), input_ragged_rank=1, output_ragged_rank=2, **kw
  )
  grad = R.RaggedTensorToVariantGradient(
    encoded_ragged_grad=batched, row_splits=s, dense_values_shape=tf.shape(v), Tvalues=F32
  )
  return tuple(a[0]) + (a[1],) + tuple(b[0]) + (b[1],) + tuple(c[0]) + (c[1], grad)


@tf.function
def _dense_rows(x):  # ragged rank 0, batched: the rows of a dense tensor
  batched = R.RaggedTensorToVariant(rt_nested_splits=[], rt_dense_values=x, batched_input=True)
  out = R.RaggedTensorFromVariant(
    encoded_ragged=batched, input_ragged_rank=0, output_ragged_rank=1, Tvalues=F32, Tsplits=I64
  )
  grad = R.RaggedTensorToVariantGradient(
    encoded_ragged_grad=batched, row_splits=0, dense_values_shape=tf.shape(x), Tvalues=F32
  )
  return tuple(out[0]) + (out[1], grad)


@tf.function
def _unset_rows(rt):  # a list of gradient variants only one of whose rows is set
  v, s = rt.flat_values, rt.row_splits
  shape = tf.constant([], tf.int32)
  lst = R.TensorListReserve(element_shape=shape, num_elements=3, element_dtype=tf.variant)
  row = R.RaggedTensorToVariant(
    rt_nested_splits=[], rt_dense_values=v[2:5] * 2, batched_input=False
  )
  lst = R.TensorListSetItem(input_handle=lst, index=2, item=row)
  grads = R.TensorListStack(input_handle=lst, element_shape=shape, element_dtype=tf.variant)
  return R.RaggedTensorToVariantGradient(
    encoded_ragged_grad=grads, row_splits=s, dense_values_shape=tf.shape(v), Tvalues=F32
  )


@tf.function
def _added_lists(rt):  # AddN of lists of ragged variants (a zeroed one too), row by row
  v, s = rt.flat_values, rt.row_splits
  shape = tf.constant([], tf.int32)

  def rows(x):
    b = R.RaggedTensorToVariant(rt_nested_splits=[s], rt_dense_values=x, batched_input=True)
    return R.TensorListFromTensor(tensor=b, element_shape=shape)

  total = R.AddN(inputs=[rows(v), rows(v * 3.0), R.ZerosLike(x=rows(v))])
  grads = R.TensorListStack(input_handle=total, element_shape=shape, element_dtype=tf.variant)
  out = R.RaggedTensorFromVariant(
    encoded_ragged=grads, input_ragged_rank=0, output_ragged_rank=1, Tvalues=F32, Tsplits=I64
  )
  return out[0][0], out[1]


def test_round_trip_and_gradient_op_match_tf():
  fn = tfprims.convert_functional(_round_trip, SPEC)
  for values, splits in [
    (np.float32([1.0, 2.0, 3.0, 4.0, 5.0]), np.int64([0, 2, 2, 5])),
    (np.zeros(0, np.float32), np.int64([0])),  # empty
    (np.zeros(0, np.float32), np.int64([0, 0, 0])),  # empty rows
  ]:
    want = _round_trip(tf.RaggedTensor.from_row_splits(values, splits))
    _check(fn((values, splits)), want)
    _check(jax.jit(lambda v: fn((v, splits)))(values), want)
  rt = tf.RaggedTensor.from_row_splits([1.0, 2.0, 3.0, 4.0, 5.0], tf.constant([0, 2, 2, 5], I64))
  _check([tfprims.convert_functional(_unset_rows, SPEC)(rt)], [_unset_rows(rt)])  # zeros
  _check(tfprims.convert_functional(_added_lists, SPEC)(rt), _added_lists(rt))
  dense = tfprims.convert_functional(_dense_rows, tf.TensorSpec([None, 2], F32))
  for x in (np.arange(6, dtype=np.float32).reshape(3, 2), np.zeros((0, 2), np.float32)):
    _check(dense(x), _dense_rows(x))
  # the gradient of RaggedTensorToVariant's values through the round trip (linear: SplitV
  # then ConcatV2) is the cotangent itself
  values, splits = np.float32([1.0, 2.0, 3.0]), np.int64([0, 1, 3])
  ct = np.float32([0.5, -1.0, 2.0])
  grad = jax.grad(lambda v: jnp.sum(fn((v, splits))[1] * ct))(values)
  np.testing.assert_allclose(grad, ct)


def test_variants_refused_with_typed_errors_naming_the_node():
  fn = tfprims.convert_functional(_map_rows, SPEC)
  rt = _rt([[1.0], [2.0, 3.0]])
  comps = (rt.flat_values.numpy(), rt.row_splits.numpy())
  with pytest.raises(tfprims.errors.StaticInputError, match="RaggedTensorToVariant node"):
    jax.jit(fn)(comps)  # traced row splits: each row's length is unknown
  with pytest.raises(tfprims.errors.RuntimeCheckError, match="monotonically"):
    fn((comps[0], np.int64([0, 2, 1])))  # as TF's InvalidArgumentError

  @tf.function
  def to_variant(v, s):
    return R.RaggedTensorToVariant(rt_nested_splits=[s], rt_dense_values=v, batched_input=True)

  @tf.function
  def zeros(v, s):
    return tf.shape(R.ZerosLike(x=to_variant(v, s)))

  @tf.function
  def as_doubles(v, s):  # TF: "Expected values Tensor dtype: double, found: float"
    return R.RaggedTensorFromVariant(
      encoded_ragged=to_variant(v, s),
      input_ragged_rank=0,
      output_ragged_rank=1,
      Tvalues=tf.float64,
      Tsplits=I64,
    )[1]

  args = (tf.TensorSpec([None], F32), tf.TensorSpec([None], I64))
  with pytest.raises(tf.errors.InvalidArgumentError, match="dtype: double"):
    as_doubles(*comps)
  with pytest.raises(tfprims.errors.RuntimeCheckError, match="dtype: float64"):
    tfprims.convert_functional(as_doubles, *args)(*comps)
  with pytest.raises(tfprims.errors.UnsupportedInputError, match="variant"):
    tfprims.convert_functional(to_variant, *args)  # a variant output, at conversion
  graph_def = to_variant.get_concrete_function(*args).graph.as_graph_def()
  raw = tfprims.convert_graph_def(graph_def, ["v", "s"], ["RaggedTensorToVariant"])
  with pytest.raises(tfprims.errors.UnsupportedInputError, match="RaggedTensorToVariant node"):
    raw(*comps)
  with pytest.raises(tfprims.errors.UnsupportedInputError, match="ZerosLike node.*RaggedTensor"):
    tfprims.convert_functional(zeros, *args)(*comps)


def _taped(f):
  """A tf.function computing ``f`` and TF's own gradient of it wrt the flat values (a
  GradientTape in the graph: TF's backward loop over the rows)."""

  @tf.function
  def taped(rt):
    v = rt.flat_values
    with tf.GradientTape() as tape:
      tape.watch(v)
      y = f(rt.with_flat_values(v))
    return y, tape.gradient(y, v)

  return taped


def test_tf_gradient_of_map_fn_over_ragged_rows_in_the_graph_matches_tf():
  # TF's backward loop pops the rows the forward loop pushed (arrays of different
  # lengths), zeroes and sums lists of ragged variants, and ends in
  # RaggedTensorToVariantGradient: all at trace time, the loops unrolled
  taped = _taped(
    lambda rt: tf.map_fn(lambda r: tf.reduce_sum(tf.sin(r) * r), rt, fn_output_signature=F32)
  )
  fn = tfprims.convert_functional(taped, SPEC)
  cases = [
    _rt([[1.0, 2.0], [], [3.0, -4.0, 5.0]]),
    _rt([[7.0]]),
    _rt(None, [0, 0]),  # one empty row
    _rt(None, [0]),  # no rows
  ]
  for rt in cases:
    _check(fn(rt), taped(rt))
  splits = cases[0].row_splits.numpy()
  _check(jax.jit(lambda v: fn((v, splits)))(cases[0].flat_values.numpy()), taped(cases[0]))
  taped2 = _taped(lambda rt: tf.map_fn(lambda r: tf.reduce_sum(r * r), rt, fn_output_signature=F32))
  rt2 = tf.ragged.constant(
    [[[1.0, 2.0], []], [[3.0]], [], [[4.0, 5.0], [6.0]]], F32, 2, row_splits_dtype=I64
  )
  _check(tfprims.convert_functional(taped2, SPEC2)(rt2), taped2(rt2))
