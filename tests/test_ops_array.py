"""Array ops: behaviour the generic property runner does not cover.

StridedSlice mask combinations against TF (a table), TF names kept in grad and
vmap jaxprs, GatherV2 gradients against tf.GradientTape and its out-of-range
choice, the interpreter hooks of Shape/Size/Rank/Identity, and the documented
choices of docs/semantics/array.md.
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import tensorflow as tf

import tfprims
from tfprims.ops import array as A
from tfprims.ops.array.bitcast import _BITCAST_TYPES
from helpers import jaxpr_primitives, non_tf_primitives

MASKS = ("begin_mask", "end_mask", "ellipsis_mask", "new_axis_mask", "shrink_axis_mask")


def _values(shape, dtype=np.float32, seed=0):
  rng = np.random.default_rng(seed)
  return rng.standard_normal(shape).astype(dtype)


# (input shape, begin, end, strides, masks): every mask and clamping rule.
STRIDED_CASES = [
  ((5,), [1], [4], [1], {}),
  ((5,), [4], [1], [-1], {}),  # negative stride
  ((5,), [-1], [-6], [-1], {}),  # negative indices
  ((5,), [-10], [10], [2], {}),  # clamped both ends
  ((5,), [10], [-10], [-2], {}),  # clamped, negative stride
  ((5,), [0], [0], [-1], dict(begin_mask=1, end_mask=1)),  # ::-1
  ((5,), [3], [1], [1], {}),  # empty
  ((7,), [1], [6], [3], {}),
  ((4, 3), [1], [3], [1], {}),  # implicit ellipsis
  ((4, 3), [0, 1], [0, 3], [1, 1], dict(begin_mask=1, end_mask=1)),
  ((3, 4), [2, -1], [-4, -5], [-1, -2], {}),
  ((2, 3, 4), [0, 1], [0, 2], [1, 1], dict(ellipsis_mask=1)),  # x[..., 1:2]
  ((2, 3, 4), [1, 0, 1], [2, 0, 3], [1, 1, 1], dict(ellipsis_mask=2)),
  ((2, 3, 4), [0, 0], [1, 0], [1, 1], dict(ellipsis_mask=2)),
  (
    (2, 3),
    [0, 0, 0],
    [0, 0, 0],
    [1, 1, 1],
    dict(new_axis_mask=0b101, begin_mask=2, end_mask=2),
  ),  # x[None, :, None]
  (
    (2, 3, 4),
    [0, 0, 1],
    [0, 0, 2],
    [1, 1, 1],
    dict(ellipsis_mask=1, new_axis_mask=2),
  ),  # x[..., None, 1:2]
  (
    (2, 3, 4),
    [0, 0, 0, 0],
    [0, 0, 0, 0],
    [1, 1, 1, 1],
    dict(begin_mask=1, end_mask=1, ellipsis_mask=2, new_axis_mask=0b1100),
  ),
  ((2, 3, 4), [1], [2], [1], dict(shrink_axis_mask=1)),  # x[1]
  ((2, 3, 4), [-1, -1], [0, 0], [1, 1], dict(shrink_axis_mask=3)),
  (
    (2, 3, 4),
    [1, 0],
    [0, 0],
    [1, -1],
    dict(begin_mask=3, end_mask=2, shrink_axis_mask=1),
  ),  # begin_mask ignored on shrink
  (
    (2, 3),
    [0, 1],
    [0, 2],
    [1, 1],
    dict(new_axis_mask=1, shrink_axis_mask=1),
  ),  # new axis wins over shrink
  (
    (2, 3),
    [0, 1],
    [0, 2],
    [1, 1],
    dict(ellipsis_mask=1, new_axis_mask=1),
  ),  # ellipsis wins over new axis
  ((4, 5), [1], [3], [1], dict(shrink_axis_mask=0b100)),  # bits beyond the spec ignored
  ((3, 0, 2), [0, 0, 0], [3, 0, 2], [1, 1, 1], {}),  # zero-size dim
  ((4,), [], [], [], {}),  # empty spec
  ((), [0], [0], [1], dict(new_axis_mask=1)),  # scalar + new axis
  (
    (2, 3, 4),
    [1, 2],
    [0, 0],
    [1, 2],
    dict(shrink_axis_mask=1, end_mask=2, ellipsis_mask=0),
  ),  # shrink, then stride 2
]


def _tf_strided(x, begin, end, strides, masks, grad=None):
  i = np.int32
  kw = dict(
    begin=np.array(begin, i),
    end=np.array(end, i),
    strides=np.array(strides, i),
    **{m: masks.get(m, 0) for m in MASKS},
  )
  if grad is None:
    return tf.raw_ops.StridedSlice(input=x, **kw).numpy()
  return tf.raw_ops.StridedSliceGrad(shape=np.array(x.shape, i), dy=grad, **kw).numpy()


def _params(begin, end, strides, masks):
  return dict(
    begin=tuple(begin),
    end=tuple(end),
    strides=tuple(strides),
    **{m: masks.get(m, 0) for m in MASKS},
  )


@pytest.mark.parametrize("case", STRIDED_CASES, ids=lambda c: f"{c[0]}-{c[4]}")
def test_strided_slice_matches_tf(case):
  shape, begin, end, strides, masks = case
  x = _values(shape)
  want = _tf_strided(x, begin, end, strides, masks)
  params = _params(begin, end, strides, masks)
  eager = A.StridedSlice(x, **params)
  jitted = jax.jit(lambda v: A.StridedSlice(v, **params))(x)
  np.testing.assert_array_equal(eager, want)
  np.testing.assert_array_equal(jitted, want)
  assert eager.shape == want.shape and jitted.shape == want.shape
  # The transpose is StridedSliceGrad, and both match TF's StridedSliceGrad.
  dy = _values(want.shape, seed=1)
  np.testing.assert_array_equal(
    A.StridedSliceGrad(dy, shape=shape, **params),
    _tf_strided(x, begin, end, strides, masks, grad=dy),
  )
  _, pullback = jax.vjp(lambda v: A.StridedSlice(v, **params), x)
  np.testing.assert_array_equal(
    pullback(dy)[0], _tf_strided(x, begin, end, strides, masks, grad=dy)
  )
  # vmap with the batch axis in the middle: the re-bound spec keeps the semantics.
  if x.ndim:
    xb = np.stack([x, x + 1.0], axis=x.ndim // 2)
    got = jax.vmap(lambda v: A.StridedSlice(v, **params), in_axes=x.ndim // 2)(xb)
    np.testing.assert_array_equal(got[1], _tf_strided(x + 1.0, begin, end, strides, masks))


@pytest.mark.parametrize(
  "begin,end,strides,masks,match",
  [
    ([0, 0], [1, 1], [1, 1], dict(ellipsis_mask=3), "multiple ellipses"),
    ([5], [6], [1], dict(shrink_axis_mask=1), "out of bounds"),
    ([0], [2], [0], {}, "must be non-zero"),
    ([1], [0], [-1], dict(shrink_axis_mask=1), "only stride 1"),
    ([0, 0, 0], [1, 1, 1], [1, 1, 1], {}, "index out of range"),
  ],
)
def test_strided_slice_invalid_specs_raise_like_tf(begin, end, strides, masks, match):
  x = _values((4, 3))
  with pytest.raises(tf.errors.InvalidArgumentError):
    _tf_strided(x, begin, end, strides, masks)
  with pytest.raises(ValueError, match=match):
    A.StridedSlice(x, **_params(begin, end, strides, masks))


def _grad_jaxpr(f, x):
  y = jax.eval_shape(f, x)
  ct = jax.tree.map(lambda s: jnp.ones(s.shape, s.dtype), y)
  return jax.make_jaxpr(lambda x, ct: jax.vjp(f, x)[1](ct))(x, ct)


def test_reshape_transpose_concat_keep_tf_names_under_grad_and_vmap():
  def f(x):
    y = A.Reshape(x, shape=(6, -1))
    z = A.Transpose(y, perm=(1, 0))
    return A.ConcatV2(z, z, axis=0)

  x = _values((2, 3, 4))
  grad = _grad_jaxpr(f, x)
  assert non_tf_primitives(grad, allowed={"add_any"}) == set()
  assert {"tf.Reshape", "tf.Transpose", "tf.SplitV"} <= jaxpr_primitives(grad)

  # The batch axis in the middle: Transpose folds it into its perm, Reshape
  # prepends it; nested vmap too.
  vm = jax.make_jaxpr(jax.vmap(f, in_axes=1))(_values((2, 5, 3, 4)))
  assert non_tf_primitives(vm) == set()
  eqns = vm.jaxpr.eqns
  assert [e.primitive.name for e in eqns] == [
    "tf.Transpose",
    "tf.Reshape",
    "tf.Transpose",
    "tf.ConcatV2",
  ]
  assert eqns[1].params["shape"] == (5, 6, 4)
  assert eqns[3].params["axis"] == 1
  xb = _values((2, 3, 7, 5, 4))
  vv = jax.vmap(jax.vmap(f), in_axes=2)
  assert non_tf_primitives(jax.make_jaxpr(vv)(xb)) == set()
  np.testing.assert_array_equal(vv(xb)[3, 1], f(xb[:, :, 3][1]))
  # grad of vmap and vmap of grad stay TF-named as well.
  gv = _grad_jaxpr(jax.vmap(f, in_axes=1), _values((2, 5, 3, 4)))
  assert non_tf_primitives(gv, allowed={"add_any"}) == set()


def test_data_movement_chain_keeps_tf_names():
  idx = np.array([1, 0, 1], np.int32)

  def g(x):
    a = A.StridedSlice(x, **_params([0, 2], [0, 0], [1, -1], dict(begin_mask=1, end_mask=1)))
    b = A.Tile(a, multiples=(1, 2, 1))
    c = A.Pad(b, paddings=((0, 0), (1, 1), (0, 2)))
    d = A.Slice(c, begin=(0, 1, 0), size=(-1, 2, 2))
    e = A.BroadcastTo(d, shape=(3, 2, 2, 2))
    p = A.Pack(*A.Unpack(e, num=2, axis=1), axis=0)
    r = A.Squeeze(A.ExpandDims(p, axis=0), squeeze_dims=(0,))
    t = A.Split(r, axis=1, num_split=3)
    u = A.SplitV(t[0], size_splits=(1, -1), axis=-1, num_split=2)
    v = A.GatherV2(u[1], idx, axis=2, batch_dims=0)
    w = A.Select(np.array([True, False]), v, A.ReverseV2(v, axis=(2,)))
    y = A.SelectV2(np.array([True, False, True])[:, None], w, np.float32(0))
    return A.Cumsum(A.ReverseV2(y, axis=(0,)), axis=1, exclusive=True, reverse=False)

  x = _values((2, 3, 4))
  vm = jax.make_jaxpr(jax.vmap(g, in_axes=2))(_values((2, 3, 5, 4)))
  assert non_tf_primitives(vm) == set()
  # GatherV2's transpose is tf.ScatterNd: the whole gradient is TF-named.
  grad = _grad_jaxpr(g, x)
  others = non_tf_primitives(grad, allowed={"add_any"})
  assert others <= {"jit"}, others
  assert {
    "tf.StridedSliceGrad",
    "tf.Slice",
    "tf.Pad",
    "tf.Pack",
    "tf.Unpack",
    "tf.ConcatV2",
    "tf.Sum",
    "tf.ScatterNd",
  } <= jaxpr_primitives(grad)
  # And vmap equals the per-example values.
  xb = _values((2, 3, 5, 4), seed=3)
  got = jax.vmap(g, in_axes=2)(xb)
  for k in range(5):
    np.testing.assert_allclose(got[k], g(xb[:, :, k]), rtol=1e-6)


@pytest.mark.parametrize(
  "pshape,indices,axis,batch_dims",
  [
    ((5, 3), [[4, 0], [4, 4]], 0, 0),
    ((2, 5), [3, 3, 0], 1, 0),
    ((2, 4, 3), [1, 1, 2, 0], -2, 0),
    ((3, 4), [[1, 1], [0, 3], [2, 2]], 1, 1),
    ((2, 3, 4, 2), [[[0, 2], [1, 1], [2, 0]], [[1, 1], [0, 0], [2, 2]]], 2, 2),
    ((2, 3, 4), [[3, 0, 3], [1, 1, 1]], 2, -1),
  ],
)
def test_gather_grad_matches_gradient_tape(pshape, indices, axis, batch_dims):
  params = _values(pshape, np.float64)
  indices = np.array(indices, np.int32)
  out = A.GatherV2(params, indices, axis=axis, batch_dims=batch_dims)
  ct = _values(out.shape, np.float64, seed=2)
  p = tf.constant(params)
  with tf.GradientTape() as tape:
    tape.watch(p)
    y = tf.raw_ops.GatherV2(params=p, indices=indices, axis=axis, batch_dims=batch_dims)
  want = tf.convert_to_tensor(tape.gradient(y, p, output_gradients=tf.constant(ct))).numpy()
  np.testing.assert_allclose(out, y.numpy())
  with jax.enable_x64(True):
    _, pullback = jax.vjp(
      lambda v: A.GatherV2(v, indices, axis=axis, batch_dims=batch_dims), params
    )
    np.testing.assert_allclose(pullback(ct)[0], want, rtol=1e-12)
    # Tangents go through tf.GatherV2 itself.
    jvp = jax.make_jaxpr(
      lambda v, t: jax.jvp(
        lambda u: A.GatherV2(u, indices, axis=axis, batch_dims=batch_dims), (v,), (t,)
      )
    )(params, params)
    assert [e.primitive.name for e in jvp.jaxpr.eqns] == ["tf.GatherV2", "tf.GatherV2"]


def test_gather_out_of_range_indices_give_zeros():
  params = _values((3, 2))
  indices = np.array([2, 3, -1, 0, 100], np.int32)
  want = np.stack([params[2], np.zeros(2), np.zeros(2), params[0], np.zeros(2)])
  gather = lambda p: A.GatherV2(p, indices, axis=0, batch_dims=0)
  np.testing.assert_array_equal(gather(params), want)
  np.testing.assert_array_equal(jax.jit(gather)(params), want)
  # TF's CPU kernel raises; the converted op is total (documented).
  with pytest.raises(tf.errors.InvalidArgumentError):
    tf.raw_ops.GatherV2(params=params, indices=indices, axis=0)
  grad = jax.grad(lambda p: jnp.sum(gather(p)))(params)
  np.testing.assert_array_equal(grad, [[1, 1], [0, 0], [1, 1]])
  # A zero-size gathered axis: every index is out of range.
  assert np.array_equal(
    A.GatherV2(np.zeros((0, 2), np.float32), indices, axis=0, batch_dims=0), np.zeros((5, 2))
  )
  # In a converted function, known values raise like TF's CPU kernel; jitted programs
  # give the zeros (and raise with runtime_checks).
  import tfprims

  fn = tfprims.convert_functional(
    tf.function(lambda p, i: tf.gather(p, i)), tf.TensorSpec([3, 2]), tf.TensorSpec([5], tf.int32)
  )
  with pytest.raises(tfprims.RuntimeCheckError, match=r"GatherV2 node .* not in \[0, 3\)"):
    fn(params, indices)
  np.testing.assert_array_equal(jax.jit(fn)(params, indices), want)
  with tfprims.override_config("runtime_checks", True):
    with pytest.raises(Exception, match=r"not in \[0, 3\)"):
      jax.jit(lambda p, i: fn(p, i))(params, indices).block_until_ready()


def test_gather_batching_keeps_tf_names():
  params, indices = _values((3, 4, 2)), np.array([[0, 3], [1, 1], [2, 0]], np.int32)
  f = lambda p, i: A.GatherV2(p, i, axis=1, batch_dims=1)
  for in_axes in [(0, None), (None, 1), (2, 0)]:
    pb = params if in_axes[0] is None else np.stack([params, params * 2], in_axes[0])
    ib = indices if in_axes[1] is None else np.stack([indices, indices[::-1]], in_axes[1])
    jaxpr = jax.make_jaxpr(jax.vmap(f, in_axes=in_axes))(pb, ib)
    assert non_tf_primitives(jaxpr) == set()
    got = jax.vmap(f, in_axes=in_axes)(pb, ib)
    for b in range(2):
      p = pb if in_axes[0] is None else np.take(pb, b, in_axes[0])
      i = ib if in_axes[1] is None else np.take(ib, b, in_axes[1])
      np.testing.assert_array_equal(
        got[b], tf.raw_ops.GatherV2(params=p, indices=i, axis=1, batch_dims=1).numpy()
      )


def test_interpreter_hooks_shape_size_rank_identity():
  @tf.function
  def f(x):
    y = tf.identity(x)
    s = tf.shape(y)
    z = tf.reshape(y, tf.stack([s[0] * s[1], -1]))
    return (
      tf.identity_n([z, y])[0],
      tf.size(x, out_type=tf.int64),
      tf.rank(x),
      tf.shape(x, out_type=tf.int64),
    )

  x = _values((2, 3, 4))
  fn = tfprims.convert_functional(f, tf.TensorSpec([2, 3, 4], tf.float32))
  z, size, rank, shape = fn(x)
  np.testing.assert_array_equal(z, x.reshape(6, 4))
  assert int(size) == 24 and int(rank) == 3 and tuple(np.asarray(shape)) == (2, 3, 4)
  # x64 off: out_type int64 becomes int32 without a JAX warning.
  assert size.dtype == np.int32 and shape.dtype == np.int32 and rank.dtype == np.int32
  prims = jaxpr_primitives(jax.make_jaxpr(fn)(x))
  assert not prims & {
    "tf.Identity",
    "tf.IdentityN",
    "tf.Shape",
    "tf.Size",
    "tf.Rank",
    "tf.StridedSlice",
    "tf.Pack",
    "tf.Mul",
  }, prims
  assert "tf.Reshape" in prims


def test_shape_primitives_for_direct_use():
  x = _values((2, 0, 3))
  assert A.Shape(x, out_type=np.dtype("int64")).dtype == np.int32  # x64 off
  np.testing.assert_array_equal(A.Shape(x, out_type=np.dtype("int32")), [2, 0, 3])
  assert int(A.Size(x, out_type=np.dtype("int32"))) == 0 and int(A.Rank(x)) == 3
  s1, s2 = A.ShapeN(x, x[0], out_type=np.dtype("int32"))
  np.testing.assert_array_equal(s2, [0, 3])
  # Under vmap: the per-example shape (unbatched, so vmap broadcasts it).
  got = jax.vmap(lambda v: A.Shape(v, out_type=np.dtype("int32")))(np.zeros((5, 7, 2)))
  np.testing.assert_array_equal(got, [[7, 2]] * 5)
  with jax.enable_x64(True):
    assert A.Shape(x, out_type=np.dtype("int64")).dtype == np.int64


def test_stop_gradient_zero_tangent_and_kept_in_jaxpr():
  x = _values((3,))
  f = lambda v: jnp.sum(A.StopGradient(v) * v)
  np.testing.assert_allclose(jax.grad(f)(x), x)
  assert "tf.StopGradient" in jaxpr_primitives(jax.make_jaxpr(jax.grad(f))(x))
  _, t = jax.jvp(A.StopGradient, (x,), (np.ones(3, np.float32),))
  np.testing.assert_array_equal(t, np.zeros(3))


def test_ensure_shape_checks_at_trace_time():
  x = _values((2, 3))
  assert A.EnsureShape(x, shape=(None, 3)).shape == (2, 3)
  assert A.EnsureShape(x, shape=None).shape == (2, 3)
  assert jax.vmap(lambda v: A.EnsureShape(v, shape=(-1, 3)))(np.stack([x, x])).shape == (2, 2, 3)
  with pytest.raises(ValueError, match="not compatible"):
    jax.make_jaxpr(lambda v: A.EnsureShape(v, shape=(2, 4)))(x)
  with pytest.raises(tf.errors.InvalidArgumentError):
    tf.raw_ops.EnsureShape(input=x, shape=[2, 4])


def test_check_numerics_passes_values_through():
  x = np.array([1.0, np.nan, np.inf], np.float32)
  with pytest.raises(tf.errors.InvalidArgumentError):
    tf.raw_ops.CheckNumerics(tensor=x, message="m")
  f = lambda v: A.CheckNumerics(v, message="m")
  np.testing.assert_array_equal(f(x), x)
  np.testing.assert_array_equal(jax.jit(f)(x), x)
  assert "tf.CheckNumerics" in jaxpr_primitives(jax.make_jaxpr(f)(x))


@pytest.mark.parametrize(
  "start,limit,delta,dtype",
  [
    (0.1, 30.0, 0.1, np.float32),  # start + i*delta, not accumulated
    (0.1, 30.0, 0.1, np.float16),
    (1e-7, 3e-7, 1e-7, np.float32),  # ceil of a rounded quotient
    (-(2**31), 2**31 - 1, 2**31 - 1, np.int32),  # values wrap like TF's
    (10, 0, -3, np.int32),
    (5, 5, -1, np.int64),
    (-1.5, 2.0, 0.75, np.float64),
  ],
)
def test_range_matches_tf(start, limit, delta, dtype):
  want = tf.raw_ops.Range(
    start=tf.constant(start, dtype),
    limit=tf.constant(limit, dtype),
    delta=tf.constant(delta, dtype),
  ).numpy()
  with jax.enable_x64(True):
    got = A.Range(
      start=dtype(start).item(),
      limit=dtype(limit).item(),
      delta=dtype(delta).item(),
      Tidx=np.dtype(dtype),
    )
    assert got.dtype == want.dtype
    np.testing.assert_array_equal(got, want)


def test_range_invalid_raise():
  for start, limit, delta in [(0, 1, 0), (5, 0, 1), (0, 5, -1)]:
    with pytest.raises(tf.errors.InvalidArgumentError):
      tf.raw_ops.Range(start=tf.constant(start), limit=tf.constant(limit), delta=tf.constant(delta))
    with pytest.raises(ValueError, match="Range"):
      A.Range(start=start, limit=limit, delta=delta, Tidx=np.dtype("int32"))


@pytest.mark.parametrize(
  "in_shape,shape",
  [
    ((0, 6), (0, -1)),
    ((0, 6), (-1, 0)),
    ((0, 6), (-1, 2)),
    ((2, 3), (0, -1)),
    ((2, 3), (-1,)),
    ((4, 6), (3, -1, 2)),
    ((2, 3), (-1, -1)),
    ((2, 3), (4, -1)),
    ((), (-1,)),
  ],
)
def test_reshape_minus_one_like_tf(in_shape, shape):
  x = np.zeros(in_shape, np.float32)
  try:
    want = tf.raw_ops.Reshape(tensor=x, shape=np.array(shape, np.int32)).numpy()
  except tf.errors.InvalidArgumentError:
    with pytest.raises(ValueError, match="Reshape"):
      A.Reshape(x, shape=shape)
    return
  assert A.Reshape(x, shape=shape).shape == want.shape
  xb = np.zeros((3,) + in_shape, np.float32)
  assert jax.vmap(lambda v: A.Reshape(v, shape=shape))(xb).shape == (3,) + want.shape


def test_select_rank1_condition_under_vmap():
  cond = np.array([[True, False, True], [False, False, True]])
  t, e = _values((3, 2)), _values((3, 2), seed=1)
  f = lambda c, a, b: A.Select(c, a, b)
  for in_axes in [(0, None, None), (0, None, 0), (None, 0, None)]:
    cb = cond if in_axes[0] == 0 else cond[0]
    tb = np.stack([t, t + 1]) if in_axes[1] == 0 else t
    eb = np.stack([e, e - 1]) if in_axes[2] == 0 else e
    got = jax.vmap(f, in_axes=in_axes)(cb, tb, eb)
    jaxpr = jax.make_jaxpr(jax.vmap(f, in_axes=in_axes))(cb, tb, eb)
    assert non_tf_primitives(jaxpr) == set()
    for b in range(2):
      c = cb[b] if in_axes[0] == 0 else cb
      tt = tb[b] if in_axes[1] == 0 else tb
      ee = eb[b] if in_axes[2] == 0 else eb
      np.testing.assert_array_equal(got[b], tf.raw_ops.Select(condition=c, x=tt, y=ee).numpy())


def test_padv2_constant_gradient_is_the_padded_sum():
  x, c = _values((2, 2)), np.float32(3.0)
  pads = ((1, 0), (2, 1))
  out = A.PadV2(x, c, paddings=pads)
  np.testing.assert_array_equal(
    out, tf.raw_ops.PadV2(input=x, paddings=np.array(pads), constant_values=c).numpy()
  )
  ct = _values(out.shape, seed=4)
  gx, gc = jax.vjp(lambda a, b: A.PadV2(a, b, paddings=pads), x, c)[1](ct)
  np.testing.assert_array_equal(gx, ct[1:, 2:4])
  np.testing.assert_allclose(gc, ct.sum() - ct[1:, 2:4].sum(), rtol=1e-5)


def test_multi_output_transposes_fill_symbolic_zeros_with_tf_fill():
  x = _values((4, 3))
  f = lambda v: A.Split(v, axis=0, num_split=2)[0]
  grad = _grad_jaxpr(f, x)
  assert non_tf_primitives(grad) == set()
  assert "tf.Fill" in jaxpr_primitives(grad)
  g = jax.vjp(f, x)[1](np.ones((2, 3), np.float32))[0]
  np.testing.assert_array_equal(g, [[1] * 3] * 2 + [[0] * 3] * 2)


# ---------------------------------------------------------------------------
# Bitcast


def _bitcast_input(src, dst, rng):
  """Random bytes viewed as ``src``, shaped [2, 3] (+ the last dim a wider ``dst`` needs)."""
  src, dst = tfprims.dtypes.np.dtype(src), tfprims.dtypes.np.dtype(dst)
  shape = (2, 3) + ((dst.itemsize // src.itemsize,) if src.itemsize < dst.itemsize else ())
  raw = rng.integers(0, 256, size=int(np.prod(shape)) * src.itemsize, dtype=np.uint8)
  return raw.view(src).reshape(shape)


def _bitcast_dtypes():
  import ml_dtypes

  return [np.dtype(ml_dtypes.bfloat16) if n == "bfloat16" else np.dtype(n) for n in _BITCAST_TYPES]


def _same_bits(a, b):
  a, b = np.asarray(a), np.asarray(b)
  assert a.shape == b.shape and a.dtype == b.dtype, (a.shape, a.dtype, b.shape, b.dtype)
  np.testing.assert_array_equal(a.view(np.uint8), b.view(np.uint8))


def test_bitcast_every_type_pair_matches_tf_bit_for_bit(x64):
  # NaN payloads, subnormals and signed zeros included: the bytes must agree.
  rng = np.random.default_rng(0)
  types = _bitcast_dtypes()
  f = jax.jit(lambda x, T, type: A.Bitcast(x, T=T, type=type), static_argnums=(1, 2))
  for src in types:
    for dst in types:
      x = _bitcast_input(src, dst, rng)
      want = tf.raw_ops.Bitcast(input=x, type=tf.as_dtype(dst)).numpy()
      ours, params = A.Bitcast.prepare({"input": x}, {"type": dst})
      _same_bits(A.Bitcast(*ours, **params), want)
      _same_bits(f(x, src, dst), want)


@pytest.mark.parametrize(
  "src,dst,shape",
  [
    ("int8", "int16", (3,)),  # last dim must be 2
    ("int8", "int32", ()),  # a scalar cannot widen
    ("uint8", "complex64", (4,)),  # needs 8
  ],
)
def test_bitcast_rejects_what_tf_rejects(src, dst, shape):
  x = np.zeros(shape, src)
  with pytest.raises(tf.errors.InvalidArgumentError):
    tf.raw_ops.Bitcast(input=x, type=tf.as_dtype(dst))
  with pytest.raises(ValueError, match="last dimension must be"):
    A.Bitcast(x, T=np.dtype(src), type=np.dtype(dst))


def test_bitcast_rejects_bool_like_tf():
  x = np.zeros((2,), np.int8)
  with pytest.raises(tf.errors.InvalidArgumentError):
    tf.raw_ops.Bitcast(input=x, type=tf.bool)
  with pytest.raises(TypeError, match="allowed"):
    A.Bitcast(x, T=np.dtype("int8"), type=np.dtype("bool"))
  with pytest.raises(TypeError, match="allowed"):
    A.Bitcast(np.zeros((2,), bool), T=np.dtype("bool"), type=np.dtype("int8"))


def test_bitcast_in_a_graph_and_its_x64_off_choices():
  # x64 off: int64 <-> uint64 reinterpret the 32-bit values (as Cast would);
  # pairs whose bytes need 64-bit values raise Int64OverflowError at trace time.
  @tf.function
  def f(x):
    return tf.bitcast(x, tf.uint64)

  fn = tfprims.convert(f, tf.TensorSpec([3], tf.int64))[0]
  out = fn({}, np.array([0, 5, 2**31 - 1], np.int64))[0]
  assert out.dtype == np.uint32
  np.testing.assert_array_equal(out, [0, 5, 2**31 - 1])

  @tf.function
  def g(x):
    return tf.bitcast(x, tf.int64)

  gn = tfprims.convert(g, tf.TensorSpec([3], tf.float64))[0]
  with pytest.raises(tfprims.TFPrimsError, match="needs x64"):
    gn({}, np.ones(3))
  with jax.enable_x64(True):
    _same_bits(gn({}, np.ones(3))[0], g(np.ones(3)).numpy())


@pytest.mark.parametrize("axis", [0, 1, 2])
def test_bitcast_vmap_over_the_last_dim_keeps_tf_names(axis):
  x = np.random.default_rng(1).integers(-100, 100, size=(3, 2, 2)).astype(np.int16)
  for dst in ("int8", "int32"):
    f = lambda v: A.Bitcast(v, T=np.dtype("int16"), type=np.dtype(dst))
    # The batch axis stays where it is (JAX moves it to out_axes=0 at the end),
    # except the last one, which Bitcast adds or removes: tf.Transpose first.
    jaxpr = jax.make_jaxpr(jax.vmap(f, in_axes=axis, out_axes=axis if axis < 2 else 0))(x)
    assert not non_tf_primitives(jaxpr), jaxpr
    assert ("tf.Transpose" in jaxpr_primitives(jaxpr)) == (axis == 2)
    out = jax.vmap(f, in_axes=axis)(x)
    for k in range(x.shape[axis]):
      _same_bits(out[k], tf.bitcast(np.take(x, k, axis), tf.as_dtype(dst)).numpy())
