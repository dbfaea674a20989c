"""The space/batch, layout and misc array ops, VariableShape and TensorListPushBackBatch:
what the property runner does not cover. The policies of docs/semantics/array.md
where TF raises (ReverseSequence lengths, UnravelIndex, InvertPermutation,
BroadcastArgs, ConcatOffset) and their runtime checks; TF names in grad and vmap
jaxprs; the ops in converted graphs (folded shape ops, VariableShape, vectors of
TensorLists)."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import tensorflow as tf
from tensorflow.python.ops import list_ops

import tfprims
from tfprims import errors
from tfprims.core import get_op, tfops
from helpers import jaxpr_primitives, non_tf_primitives


def _rand(shape, seed=0, dtype=np.float32):
  return np.random.default_rng(seed).standard_normal(shape).astype(dtype)


def _bind(op_type, inputs, attrs=None):
  op = get_op(op_type)
  operands, params = op.prepare(inputs, attrs or {})
  return op, operands, params


# --- policies where TF raises -------------------------------------------------------------


def test_reverse_sequence_clamps_lengths_and_checks():
  x = np.arange(12, dtype=np.float32).reshape(3, 4)
  op, operands, params = _bind(
    "ReverseSequence",
    {"input": x, "seq_lengths": np.array([9, -2, 3], np.int64)},
    {"seq_dim": 1, "batch_dim": 0},
  )
  out = np.asarray(op(*operands, **params))
  # Longer than the axis: the whole row reversed; negative: unchanged; TF raises.
  np.testing.assert_array_equal(out[0], x[0, ::-1])
  np.testing.assert_array_equal(out[1], x[1])
  expected = tf.raw_ops.ReverseSequence(input=x[2:], seq_lengths=[3], seq_dim=1).numpy()
  np.testing.assert_array_equal(out[2:], expected)
  with pytest.raises(tf.errors.InvalidArgumentError):
    tf.raw_ops.ReverseSequence(input=x, seq_lengths=[9, 1, 3], seq_dim=1)
  bad, _ = get_op("ReverseSequence").check(*operands, **params)
  assert bool(bad)
  ok = [np.asarray(operands[0]), np.array([4, 0, 3], np.int64)]
  assert not bool(get_op("ReverseSequence").check(*ok, **params)[0])


def test_runtime_checks_raise_in_a_converted_function():
  @tf.function
  def f(x, lengths):
    return tf.reverse_sequence(x, lengths, seq_axis=1, batch_axis=0)

  x = _rand((2, 3))
  fn = tfprims.convert_functional(f, x, np.array([1, 2], np.int64))
  bad = np.array([5, 2], np.int64)
  with pytest.raises(errors.RuntimeCheckError, match="ReverseSequence"):
    fn(x, bad)  # known values: raise like TF
  jitted = jax.jit(lambda x, n: fn(x, n))
  np.testing.assert_array_equal(np.asarray(jitted(x, bad))[0], x[0, ::-1])  # clamped
  with tfprims.override_config("runtime_checks", True):
    with pytest.raises(Exception, match="ReverseSequence"):
      jax.jit(lambda x, n: fn(x, n))(x, bad).block_until_ready()
    np.testing.assert_array_equal(
      np.asarray(fn(x, np.array([1, 2], np.int64))), f(x, np.array([1, 2], np.int64)).numpy()
    )


def test_unravel_index_wraps_past_the_end_like_tfs_arithmetic():
  dims = np.array([2, 3], np.int32)
  inside = np.array([0, 4, 5, -1, -4], np.int32)
  op, operands, params = _bind("UnravelIndex", {"indices": inside, "dims": dims})
  np.testing.assert_array_equal(
    np.asarray(op(*operands)), tf.raw_ops.UnravelIndex(indices=inside, dims=dims).numpy()
  )
  # Past prod(dims) TF raises; the formula wraps around modulo prod(dims).
  past = np.array([6, 7, 13], np.int32)
  with pytest.raises(tf.errors.InvalidArgumentError):
    tf.raw_ops.UnravelIndex(indices=past, dims=dims)
  out = np.asarray(tfops.UnravelIndex(past, dims))
  np.testing.assert_array_equal(out, np.stack(np.unravel_index(past % 6, (2, 3))))
  assert bool(get_op("UnravelIndex").check(past, dims)[0])
  assert bool(get_op("UnravelIndex").check(inside, np.array([2, 0], np.int32))[0])
  assert not bool(get_op("UnravelIndex").check(inside, dims)[0])


def test_invert_permutation_of_no_permutation():
  x = np.array([2, 2, 7, -1, 0], np.int32)
  with pytest.raises(tf.errors.InvalidArgumentError):
    tf.raw_ops.InvertPermutation(x=x)
  # Out-of-range entries dropped, the last of duplicates wins, unnamed positions -1.
  np.testing.assert_array_equal(np.asarray(tfops.InvertPermutation(x)), [4, -1, 1, -1, -1])
  assert bool(get_op("InvertPermutation").check(x)[0])
  perm = np.array([3, 0, 4, 1, 2], np.int64)
  assert not bool(get_op("InvertPermutation").check(perm)[0])
  np.testing.assert_array_equal(np.asarray(tfops.InvertPermutation(perm)), np.argsort(perm))


def test_broadcast_args_incompatible_and_concat_offset_mismatch():
  s0, s1 = np.array([2, 0, 3], np.int32), np.array([2, 3], np.int32)
  with pytest.raises(tf.errors.InvalidArgumentError):
    tf.raw_ops.BroadcastArgs(s0=s0, s1=s1)
  np.testing.assert_array_equal(np.asarray(tfops.BroadcastArgs(s0, s1)), [2, 2, 3])
  assert bool(get_op("BroadcastArgs").check(s0, s1)[0])
  assert not bool(get_op("BroadcastArgs").check(s0, np.array([1, 3], np.int32))[0])
  shapes = [np.array([2, 3, 5], np.int32), np.array([2, 7, 6], np.int32)]
  with pytest.raises(tf.errors.InvalidArgumentError):
    tf.raw_ops.ConcatOffset(concat_dim=1, shape=shapes)
  assert bool(get_op("ConcatOffset").check(*shapes, concat_dim=1)[0])
  shapes[1][2] = 5
  assert not bool(get_op("ConcatOffset").check(*shapes, concat_dim=1)[0])
  np.testing.assert_array_equal(
    np.asarray(tfops.ConcatOffset(*shapes, concat_dim=-2)[1]), [0, 3, 0]
  )


def test_broadcast_gradient_args_static_and_errors():
  with pytest.raises(ValueError, match="Incompatible shapes"):
    tfops.BroadcastGradientArgs(s0=(2, 3), s1=(3, 3), T=np.dtype("int32"))
  r0, r1 = tfops.BroadcastGradientArgs(s0=(1, 1), s1=(1, 1), T=np.dtype("int64"))
  assert r0.shape == r1.shape == (0,)  # identical shapes: TF reduces nothing


def test_parallel_concat_rows_past_the_values_are_zeros_and_empty_is_zeros():
  values = [_rand((1, 3), seed=i) for i in range(2)]
  out = np.asarray(tfops.ParallelConcat(*values, shape=(4, 3)))
  np.testing.assert_array_equal(out[:2], np.concatenate(values))
  np.testing.assert_array_equal(out[2:], 0)
  out = tfops.Empty(shape=(2, 3), dtype=np.dtype("float32"), init=False)
  np.testing.assert_array_equal(np.asarray(out), np.zeros((2, 3), np.float32))


def test_data_format_dim_map_beyond_range_is_tfs_arithmetic():
  x = np.arange(-15, 16, dtype=np.int32)
  for src, dst in [("NHWC", "NCHW"), ("NDHWC", "NCDHW"), ("NCHW", "HWCN")]:
    expected = tf.raw_ops.DataFormatDimMap(x=x, src_format=src, dst_format=dst).numpy()
    np.testing.assert_array_equal(
      np.asarray(tfops.DataFormatDimMap(x, src_format=src, dst_format=dst)), expected
    )


def test_linspace_derivative_and_diag_part_of_a_scalar():
  # TF declares LinSpace not differentiable; ours is the derivative of start + step * i.
  f = lambda a, b: tfops.LinSpace(a, b, num=5)
  ja, jb = jax.jacfwd(f, argnums=(0, 1))(np.float32(1.0), np.float32(3.0))
  np.testing.assert_allclose(np.asarray(jb), np.linspace(0, 1, 5), rtol=1e-6)
  np.testing.assert_allclose(np.asarray(ja), 1 - np.linspace(0, 1, 5), rtol=1e-6)
  ga, gb = jax.grad(lambda a, b: jnp.sum(f(a, b) ** 2), argnums=(0, 1))(
    np.float32(1.0), np.float32(3.0)
  )
  w = np.linspace(0, 1, 5)
  y = 1 + 2 * w
  np.testing.assert_allclose(
    [float(ga), float(gb)], [np.sum(2 * y * (1 - w)), np.sum(2 * y * w)], rtol=1e-5
  )
  # Values: TF's endpoints exactly; interior points within one rounding of the product
  # step * i (XLA's FMA skips it), which is not one ulp of the result near zero.
  rng = np.random.default_rng(0)
  for _ in range(50):
    a, b = (rng.standard_normal(2) * 10).astype(np.float32)
    n = int(rng.integers(2, 9))
    ours = np.asarray(tfops.LinSpace(a, b, num=n))
    theirs = tf.raw_ops.LinSpace(start=a, stop=b, num=n).numpy()
    assert ours[0] == theirs[0] and ours[-1] == theirs[-1]
    step = np.float32(b - a) / np.float32(max(n - 1, 1))
    product = np.abs(step * np.arange(n, dtype=np.float32))
    assert np.all(np.abs(ours - theirs) <= np.spacing(product) + np.spacing(np.abs(theirs)))
  # A scalar is its own diagonal (TF's gradient of it fails).
  g = jax.grad(lambda x: tfops.DiagPart(x) * 3.0)(np.float32(2.0))
  assert float(g) == 3.0


# --- TF names under grad and vmap ------------------------------------------------------------


def test_transposes_are_tf_ops():
  cases = [
    (
      "SpaceToBatchND",
      _rand((2, 4, 3)),
      dict(block_shape=(2,), paddings=((0, 2),)),
      "tf.BatchToSpaceND",
    ),
    (
      "BatchToSpaceND",
      _rand((4, 3, 2)),
      dict(block_shape=(2,), crops=((1, 0),)),
      "tf.SpaceToBatchND",
    ),
    (
      "SpaceToBatch",
      _rand((1, 4, 2, 3)),
      dict(paddings=((0, 0), (1, 1)), block_size=2),
      "tf.BatchToSpace",
    ),
    (
      "BatchToSpace",
      _rand((4, 2, 2, 1)),
      dict(crops=((0, 1), (1, 0)), block_size=2),
      "tf.SpaceToBatch",
    ),
    (
      "MirrorPad",
      _rand((3, 4)),
      dict(paddings=((1, 2), (0, 3)), mode="REFLECT"),
      "tf.MirrorPadGrad",
    ),
    (
      "MirrorPadGrad",
      _rand((6, 4)),
      dict(paddings=((1, 2), (0, 0)), mode="SYMMETRIC"),
      "tf.MirrorPad",
    ),
    ("Roll", _rand((3, 4)), dict(shift=(1, -2), axis=(0, 1)), "tf.Roll"),
    ("Reverse", _rand((3, 4)), dict(reverse_dims=(True, False)), "tf.Reverse"),
    ("Diag", _rand((2, 3)), {}, "tf.DiagPart"),
    ("DiagPart", _rand((2, 3, 2, 3)), {}, "tf.Diag"),
    ("DeepCopy", _rand((3,)), {}, "tf.DeepCopy"),
  ]
  for op_type, x, params, transpose in cases:
    op = get_op(op_type)
    y = op(x, **params)
    ct = _rand(y.shape, seed=1)
    jaxpr = jax.make_jaxpr(jax.grad(lambda x: jnp.sum(op(x, **params) * ct)))(x)
    assert transpose in jaxpr_primitives(jaxpr), (op_type, jaxpr)
    # (mul, reduce_sum and broadcast_in_dim are the test's own jnp.sum(y * ct))
    assert not non_tf_primitives(jaxpr, allowed={"mul", "reduce_sum", "broadcast_in_dim"}), (
      op_type,
      jaxpr,
    )
    # The transpose is the adjoint: <op(x), ct> == <x, op^T(ct)>.
    g = jax.grad(lambda x: jnp.sum(op(x, **params) * ct))(x)
    np.testing.assert_allclose(float(jnp.sum(g * x)), float(jnp.sum(y * ct)), rtol=1e-4)


def test_batching_rules_are_tf_ops():
  xs = _rand((3, 2, 4, 2))
  cases = [
    (
      lambda x: tfops.SpaceToBatchND(x, block_shape=(2,), paddings=((1, 1),)),
      xs,
      "tf.SpaceToBatchND",
    ),
    (lambda x: tfops.Diag(x), _rand((3, 2, 2)), "tf.MatrixDiag"),
    (lambda x: tfops.DiagPart(x), _rand((3, 2, 3, 2, 3)), "tf.MatrixDiagPart"),
    (lambda a: tfops.LinSpace(a, np.float32(2.0), num=4), _rand((3,)), "tf.ConcatV2"),
    (lambda x: tfops.Roll(x, shift=(1,), axis=(-1,)), xs, "tf.Roll"),
  ]
  for f, batched, name in cases:
    jaxpr = jax.make_jaxpr(jax.vmap(f))(batched)
    # (a final plain transpose is vmap's out_axes=0 moving a rule's out dim)
    assert name in jaxpr_primitives(jaxpr), jaxpr
    assert not non_tf_primitives(jaxpr, allowed={"transpose"}), jaxpr
    out = jax.vmap(f)(batched)
    for i in range(batched.shape[0]):
      np.testing.assert_allclose(np.asarray(out[i]), np.asarray(f(batched[i])), rtol=1e-6)


def test_reverse_sequence_vmap_over_lengths_folds_into_tf_batch():
  xs = _rand((4, 3, 5))
  lengths = np.array([[1, 5, 3], [0, 2, 4], [5, 5, 5], [2, 1, 0]], np.int32)
  f = lambda x, l: tfops.ReverseSequence(x, l, seq_dim=1, batch_dim=0)
  for in_axes in [(0, 0), (None, 0), (0, None)]:
    xb = xs if in_axes[0] == 0 else xs[0]
    lb = lengths if in_axes[1] == 0 else lengths[0]
    out = jax.vmap(f, in_axes=in_axes)(xb, lb)
    for i in range(4):
      xi = xb[i] if in_axes[0] == 0 else xb
      li = lb[i] if in_axes[1] == 0 else lb
      np.testing.assert_array_equal(
        np.asarray(out[i]), tf.raw_ops.ReverseSequence(input=xi, seq_lengths=li, seq_dim=1).numpy()
      )
    jaxpr = jax.make_jaxpr(jax.vmap(f, in_axes=in_axes))(xb, lb)
    assert "tf.ReverseSequence" in jaxpr_primitives(jaxpr)
    assert not non_tf_primitives(jaxpr, allowed={"transpose"})


def test_int_ops_batching():
  perms = np.array([[2, 0, 1], [0, 1, 2], [1, 2, 0], [2, 9, 2]], np.int32)
  out = jax.vmap(tfops.InvertPermutation)(perms)
  for i in range(4):
    np.testing.assert_array_equal(np.asarray(out[i]), np.asarray(tfops.InvertPermutation(perms[i])))
  assert not non_tf_primitives(jax.make_jaxpr(jax.vmap(tfops.InvertPermutation))(perms))
  s0 = np.array([[2, 1, 3], [1, 1, 1]], np.int32)
  s1 = np.array([4, 1], np.int32)
  out = jax.vmap(tfops.BroadcastArgs, in_axes=(0, None))(s0, s1)
  np.testing.assert_array_equal(np.asarray(out), [[2, 4, 3], [1, 4, 1]])
  idx = np.array([[0, 5, 3], [1, 2, 4]], np.int32)
  out = jax.vmap(tfops.UnravelIndex, in_axes=(0, None), out_axes=1)(idx, np.array([2, 3], np.int32))
  for i in range(2):
    np.testing.assert_array_equal(
      np.asarray(out[:, i]), tf.raw_ops.UnravelIndex(indices=idx[i], dims=[2, 3]).numpy()
    )


# --- in converted graphs ---------------------------------------------------------------------


def test_concat_offset_and_broadcast_gradient_args_fold_in_gradient_graphs():
  # Unknown batch dims: TF's gradients then compute the broadcast axes in the graph.
  @tf.function(input_signature=[tf.TensorSpec([None, 2]), tf.TensorSpec([None, 4])])
  def f(a, b):
    with tf.GradientTape() as tape:
      tape.watch([a, b])
      y = tf.reduce_sum(tf.concat([a * b[:, :1], b], axis=1) ** 2)
    return tape.gradient(y, [a, b])

  a, b = _rand((3, 2)), _rand((3, 4), seed=1)
  graph_ops = {n.op for n in f.get_concrete_function().graph.as_graph_def().node}
  assert {"ConcatOffset", "BroadcastGradientArgs"} <= graph_ops
  fn = tfprims.convert_functional(f, a, b)
  for ours, theirs in zip(fn(a, b), f(a, b)):
    np.testing.assert_allclose(np.asarray(ours), theirs.numpy(), rtol=1e-5)
  names = jaxpr_primitives(jax.make_jaxpr(fn)(a, b))
  assert not {"tf.ConcatOffset", "tf.BroadcastGradientArgs"} & names


def test_variable_shape_is_static():
  v = tf.Variable(_rand((2, 3)))

  @tf.function
  def f(x):
    # The shape read through the handle decides a Reshape: it must be known.
    return tf.reshape(x, tf.raw_ops.VariableShape(input=v.handle)) + v

  x = _rand((6,))
  fn, params = tfprims.convert(f, x)
  np.testing.assert_allclose(np.asarray(fn(params, x)[0]), f(x).numpy())
  jaxpr = jax.make_jaxpr(lambda p, x: fn(p, x)[0])(params, x)
  assert "tf.VariableShape" not in jaxpr_primitives(jaxpr)
  from tfprims.core import lookup

  assert lookup("VariableShape").shape_only and lookup("VariableShape").reads_state


def test_push_back_batch_on_a_vector_of_lists():
  @tf.function
  def f(x, t):
    lists = [list_ops.tensor_list_from_tensor(x[i], element_shape=[2]) for i in range(3)]
    out = tf.raw_ops.TensorListPushBackBatch(input_handles=tf.stack(lists), tensor=t)
    return tf.stack(
      [list_ops.tensor_list_stack(h, tf.float32, element_shape=[2]) for h in tf.unstack(out)]
    )

  x, t = _rand((3, 4, 2)), _rand((3, 2), seed=1)
  fn = tfprims.convert_functional(f, x, t)
  np.testing.assert_array_equal(np.asarray(fn(x, t)), f(x, t).numpy())
  ct = _rand((3, 5, 2), seed=2)
  gx, gt = jax.grad(lambda x, t: jnp.sum(fn(x, t) * ct), argnums=(0, 1))(x, t)
  np.testing.assert_array_equal(np.asarray(gx), ct[:, :4])
  np.testing.assert_array_equal(np.asarray(gt), ct[:, 4])
  jaxpr = jax.make_jaxpr(fn)(x, t)
  assert "tf.TensorListPushBackBatch" in jaxpr_primitives(jaxpr)
  xs = _rand((2, 3, 4, 2), seed=3)
  out = jax.vmap(fn, in_axes=(0, None))(xs, t)
  for i in range(2):
    np.testing.assert_array_equal(np.asarray(out[i]), f(xs[i], t).numpy())


def test_push_back_batch_refuses_ragged_batches():
  @tf.function
  def f(x, t):
    lists = [
      list_ops.tensor_list_from_tensor(x[:1], element_shape=[2]),
      list_ops.tensor_list_from_tensor(x[:3], element_shape=[2]),
    ]
    out = tf.raw_ops.TensorListPushBackBatch(input_handles=tf.stack(lists), tensor=t)
    return list_ops.tensor_list_stack(tf.unstack(out)[0], tf.float32, element_shape=[2])

  x, t = _rand((3, 2)), _rand((2, 2), seed=1)
  with pytest.raises(errors.TensorListSizeError, match="different lengths"):
    tfprims.convert_functional(f, x, t)(x, t)


def test_ops_in_one_converted_graph():
  """Each op as a node of a TF graph (attrs decoded from the GraphDef), against TF."""
  R = tf.raw_ops

  @tf.function
  def f(x, lengths, idx, perm, start):
    v = tf.reshape(x, [1, 4, 6, 1])
    outs = [
      R.ParallelConcat(values=[x[:1], x[1:2]], shape=[2, 6]),
      R.SpaceToBatch(input=v, paddings=[[0, 0], [1, 1]], block_size=2),
      R.BatchToSpace(input=tf.reshape(x, [4, 1, 1, 6]), crops=[[0, 1], [0, 0]], block_size=2),
      R.DataFormatVecPermute(x=tf.shape(v), src_format="NHWC", dst_format="NCHW"),
      R.DataFormatDimMap(x=idx, src_format="NHWC", dst_format="NCHW"),
      R.Reverse(tensor=x, dims=[False, True]),
      R.ReverseSequence(input=x, seq_lengths=lengths, seq_dim=1, batch_dim=0),
      R.Roll(input=x, shift=[2, -1], axis=[1, 0]),
      R.Concat(concat_dim=1, values=[x, x]),
      R.MirrorPadGrad(input=x, paddings=[[1, 1], [2, 1]], mode="REFLECT"),
      R.Diag(diagonal=x[0]),
      R.DiagPart(input=R.Diag(diagonal=x)),
      R.UnravelIndex(indices=idx, dims=[2, 3]),
      R.InvertPermutation(x=perm),
      R.LinSpace(start=start, stop=start * 3.0, num=5),
      R.Empty(shape=[2, 3], dtype=tf.float32, init=True),
      R.DeepCopy(x=x),
      R.BroadcastArgs(s0=tf.shape(x), s1=[1, 6]),
    ]
    return outs

  x = _rand((4, 6))
  args = (
    x,
    np.array([1, 6, 3, 0], np.int64),
    np.array([3, 0, 5], np.int32),
    np.array([2, 0, 3, 1], np.int32),
    np.float32(0.5),
  )
  fn = tfprims.convert_functional(f, *args)
  for i, (ours, theirs) in enumerate(zip(fn(*args), f(*args))):
    np.testing.assert_allclose(np.asarray(ours), theirs.numpy(), rtol=1e-6, err_msg=str(i))
  jaxpr = jax.make_jaxpr(fn)(*args)
  assert not non_tf_primitives(jaxpr)
