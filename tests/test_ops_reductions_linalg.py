"""Reductions and linear algebra: TF-named grad/vmap jaxprs, and behaviour the
generic property runner does not pin down (ties, NaN, integer Mean, MatMul flags)."""

import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import tensorflow as tf

import tfprims  # registers the ops
from tfprims.ops import linalg as L
from tfprims.ops import reductions as R
from helpers import jaxpr_primitives, non_tf_primitives

RNG = np.random.default_rng(0)


def _rand(*shape, dtype=np.float32):
  x = RNG.standard_normal(shape)
  if np.dtype(dtype).kind == "c":
    x = x + 1j * RNG.standard_normal(shape)
  return x.astype(dtype)


def _call(op, inputs, attrs=None):
  """Binds ``op`` the way the graph interpreter does (op-def input names)."""
  operands, params = op.prepare(inputs, attrs or {})
  return op(*operands, **params)


def _tf_grads(fn, *xs):
  ts = [tf.constant(x) for x in xs]
  with tf.GradientTape() as tape:
    for t in ts:
      tape.watch(t)
    y = fn(*ts)
  return [g.numpy() for g in tape.gradient(y, ts)]


# ---------------------------------------------------------------------------
# TF names in grad and vmap jaxprs


def test_grad_of_sum_matmul_is_all_tf():
  x, w = _rand(4, 3), _rand(3, 2)
  f = lambda x, w: R.Sum(
    L.MatMul(x, w, transpose_a=False, transpose_b=False), axis=(0, 1), keep_dims=False
  )
  jaxpr = jax.make_jaxpr(jax.grad(f, argnums=(0, 1)))(x, w)
  assert not non_tf_primitives(jaxpr, allowed={"add_any"})
  assert {"tf.MatMul", "tf.Sum", "tf.BroadcastTo"} <= jaxpr_primitives(jaxpr)
  gx, gw = jax.grad(f, argnums=(0, 1))(x, w)
  tx, tw = _tf_grads(lambda x, w: tf.reduce_sum(tf.raw_ops.MatMul(a=x, b=w)), x, w)
  np.testing.assert_allclose(gx, tx, rtol=1e-6)
  np.testing.assert_allclose(gw, tw, rtol=1e-6)


@pytest.mark.parametrize("name", ["Mean", "Sum", "Max", "Min", "EuclideanNorm"])
def test_grad_of_reductions_is_all_tf(name):
  op = getattr(R, name)
  x = _rand(2, 3, 4)
  f = lambda x: op(op(x, axis=(0, 2), keep_dims=True), axis=(0, 1, 2), keep_dims=False)
  jaxpr = jax.make_jaxpr(jax.grad(f))(x)
  assert not non_tf_primitives(jaxpr, allowed={"add_any"}), jaxpr
  tf_fn = getattr(tf.raw_ops, name)
  (expected,) = _tf_grads(
    lambda x: tf_fn(input=tf_fn(input=x, axis=[0, 2], keep_dims=True), axis=[0, 1, 2]), x
  )
  np.testing.assert_allclose(jax.grad(f)(x), expected, rtol=1e-5, atol=1e-6)


def test_mean_prints_static_axes():
  x = np.ones((2, 3, 4), np.float32)
  # TF's reduction_indices: negative, unsorted, int64 -> a sorted tuple of ints.
  jaxpr = jax.make_jaxpr(
    lambda x: _call(
      R.Mean, {"input": x, "reduction_indices": np.array([-1, 0], np.int64)}, {"keep_dims": False}
    )
  )(x)
  assert "tf.Mean[axis=(0, 2) keep_dims=False]" in str(jaxpr)
  scalar = R.Sum.prepare({"input": x, "reduction_indices": np.array(-2, np.int32)}, {})[1]
  assert scalar == {"axis": (1,), "keep_dims": False}
  with pytest.raises(ValueError, match="duplicate"):
    R.Sum.prepare({"input": x, "reduction_indices": np.array([1, -2])}, {})


@pytest.mark.parametrize("dtype", [np.float32, np.int32])
def test_mean_over_a_symbolic_batch_exports(dtype):
  """A mean over the batch, exported with a symbolic batch size: the count is a
  program value (values as TF's for each batch size)."""

  @tf.function
  def mean(x):
    return tf.reduce_mean(x, axis=0)

  fn = tfprims.convert_functional(mean, tf.TensorSpec([None, 3], dtype))
  arg = jax.ShapeDtypeStruct(jax.export.symbolic_shape("b, 3"), dtype)
  exported = jax.export.export(jax.jit(fn))(arg)
  for b in (1, 4, 7):
    x = (np.arange(3 * b).reshape(b, 3) * 3 - 5).astype(dtype)
    np.testing.assert_allclose(exported.call(x), mean(x).numpy(), rtol=1e-6)


@pytest.mark.parametrize("name", ["Sum", "Mean", "Max", "Prod", "EuclideanNorm", "All"])
def test_vmap_of_reductions_rebinds(name):
  op = getattr(R, name)
  x = _rand(3, 4, 5)
  if name == "All":
    x = x > 0
  f = lambda x: op(x, axis=(-1,), keep_dims=True)
  jaxpr = jax.make_jaxpr(jax.vmap(f, in_axes=1))(x)
  assert f"tf.{name}[axis=(2,) keep_dims=True]" in str(jaxpr)
  assert not non_tf_primitives(jaxpr)
  out = jax.vmap(f, in_axes=1)(x)
  for k in range(4):
    np.testing.assert_allclose(out[k], f(x[:, k]), rtol=1e-6)


def test_vmap_of_matmul_is_batch_matmul_v2():
  x, w = _rand(4, 3), _rand(3, 2)
  xs, ws = _rand(5, 4, 3), _rand(3, 5, 2)
  mm = lambda x, w: L.MatMul(x, w, transpose_a=False, transpose_b=False)
  for in_axes, args in [((0, None), (xs, w)), ((None, 1), (x, ws)), ((0, 1), (xs, ws))]:
    jaxpr = jax.make_jaxpr(jax.vmap(mm, in_axes=in_axes))(*args)
    assert "tf.BatchMatMulV2" in jaxpr_primitives(jaxpr)
    assert not non_tf_primitives(jaxpr), jaxpr
    out = jax.vmap(mm, in_axes=in_axes)(*args)
    for k in range(5):
      ex = [a if ax is None else np.take(a, k, axis=ax) for a, ax in zip(args, in_axes)]
      np.testing.assert_allclose(out[k], np.matmul(*ex), rtol=1e-5)


def test_vmap_of_complex_transposed_matmul():
  # BatchMatMulV2's adj flags conjugate; MatMul's transpose flags must not.
  a, b = _rand(5, 3, 4, dtype=np.complex64), _rand(2, 3, dtype=np.complex64)
  f = lambda a: L.MatMul(a, b, transpose_a=True, transpose_b=True)
  out = jax.vmap(f)(a)
  np.testing.assert_allclose(out, np.matmul(np.swapaxes(a, 1, 2), b.T), rtol=1e-5)


def test_vmap_of_batch_matmul_pads_batch_rank():
  # An unbatched operand with more batch dims than the batched one.
  x, y = _rand(2, 3, 4), _rand(6, 4, 2)
  f = lambda x: L.BatchMatMulV2(x, y, adj_x=False, adj_y=False)
  out = jax.vmap(f)(x)
  assert out.shape == (2, 6, 3, 2)
  for k in range(2):  # atol: 4-term float32 sums that cancel (the shared RNG's draws
    # depend on test order) differ in the last bits of the accumulation order
    np.testing.assert_allclose(
      out[k], tf.raw_ops.BatchMatMulV2(x=x[k], y=y).numpy(), rtol=1e-5, atol=1e-6
    )


# XLA's CPU compiler miscompiles a dot whose operands are both transposed by
# the same cyclic batch permutation: a verifier error, or (after layout
# assignment) a CHECK abort in AlgebraicSimplifier that kills the process. The
# old BatchMatMul batching rule (batch dim to the front of both operands)
# emitted exactly that for in_axes=(2, 2). Run in a subprocess so an abort
# fails the test instead of killing pytest.
_XLA_DOT_TRANSPOSE_REPRO = """
import itertools, sys
import jax, numpy as np
import tfprims
from tfprims.ops import linalg as L

rng = np.random.default_rng(0)
for name, (da, db), (ax, ay) in itertools.product(
    ["BatchMatMul", "BatchMatMulV2"], itertools.product(range(5), repeat=2),
    [(False, False), (True, False)]):
  op = getattr(L, name)
  def shaped(d, rows, cols, adj):
    s = [3, 3] + ([cols, rows] if adj else [rows, cols])
    s.insert(d, 2)
    return rng.standard_normal(s).astype(np.float32)
  x, y = shaped(da, 4, 2, ax), shaped(db, 2, 3, ay)
  f = jax.vmap(lambda a, b: op(a, b, adj_x=ax, adj_y=ay), in_axes=(da, db))
  out = np.asarray(jax.jit(f)(x, y))
  for k in range(2):
    want = np.asarray(op(np.take(x, k, da), np.take(y, k, db), adj_x=ax, adj_y=ay))
    np.testing.assert_allclose(out[k], want, rtol=1e-5, atol=1e-5, err_msg=f"{name} {da} {db}")
print("ok")
"""


def test_vmap_of_batch_matmul_avoids_xla_transpose_bug():
  import subprocess
  import sys

  proc = subprocess.run(
    [sys.executable, "-c", _XLA_DOT_TRANSPOSE_REPRO], capture_output=True, text=True, timeout=300
  )
  assert proc.returncode == 0 and proc.stdout.strip().endswith("ok"), proc.stderr[-3000:]


def test_vmap_of_batch_matmul_in_place_batch_dim_needs_no_input_transpose():
  # in_axes=(2, 2): the vmapped dim is already a batch dim of both operands.
  x, y = _rand(3, 3, 2, 2, 4), _rand(3, 3, 2, 4, 2)
  f = lambda x, y: L.BatchMatMul(x, y, adj_x=False, adj_y=False)
  jaxpr = jax.make_jaxpr(jax.vmap(f, in_axes=(2, 2)))(x, y)
  assert not non_tf_primitives(jaxpr), jaxpr
  eqns = jaxpr.jaxpr.eqns
  assert [e.primitive.name for e in eqns] == ["tf.BatchMatMulV2", "tf.Transpose"], jaxpr
  assert eqns[0].invars == jaxpr.jaxpr.invars
  out = jax.jit(jax.vmap(f, in_axes=(2, 2)))(x, y)
  for k in range(2):
    np.testing.assert_allclose(
      out[k], tf.raw_ops.BatchMatMul(x=x[:, :, k], y=y[:, :, k]).numpy(), rtol=1e-5, atol=1e-6
    )


def test_matmul_lowers_like_jnp():
  x, w = _rand(4, 3), _rand(2, 3)

  def entry(f):
    text = jax.jit(f).lower(x, w).compile().as_text()
    text = text[text.index("ENTRY") :]
    # Instruction names come from the emitting op (tf_MatMul, dot_general): numbered.
    names = {}
    return [
      re.sub(
        r"%[\w.\-]+",
        lambda m: names.setdefault(m.group(0), f"%v{len(names)}"),
        line.split(", metadata=")[0],
      )
      for line in text.splitlines()
      if "=" in line
    ]

  ours = entry(lambda x, w: L.MatMul(x, w, transpose_a=False, transpose_b=True))
  assert ours == entry(lambda x, w: jnp.matmul(x, w.T))


# ---------------------------------------------------------------------------
# MatMul / BatchMatMul gradients vs TF


@pytest.mark.parametrize("dtype", [np.float32, np.complex64])
@pytest.mark.parametrize("ta", [False, True])
@pytest.mark.parametrize("tb", [False, True])
def test_matmul_grads_all_transpose_flags(ta, tb, dtype):
  a = _rand(*((3, 4) if ta else (4, 3)), dtype=dtype)
  b = _rand(*((2, 3) if tb else (3, 2)), dtype=dtype)
  ct = _rand(4, 2, dtype=dtype)
  out, vjp = jax.vjp(lambda a, b: L.MatMul(a, b, transpose_a=ta, transpose_b=tb), a, b)
  ga, gb = vjp(ct)
  jaxpr = jax.make_jaxpr(
    lambda a, b, ct: jax.vjp(lambda a, b: L.MatMul(a, b, transpose_a=ta, transpose_b=tb), a, b)[1](
      ct
    )
  )(a, b, ct)
  assert jaxpr_primitives(jaxpr) == {"tf.MatMul"}
  # TF's gradient is the conjugate of JAX's cotangent convention for complex.
  ta_, tb_ = tf.constant(a), tf.constant(b)
  with tf.GradientTape() as tape:
    tape.watch([ta_, tb_])
    y = tf.raw_ops.MatMul(a=ta_, b=tb_, transpose_a=ta, transpose_b=tb)
  tga, tgb = tape.gradient(y, [ta_, tb_], output_gradients=tf.constant(np.conj(ct)))
  np.testing.assert_allclose(out, y.numpy(), rtol=1e-5)
  np.testing.assert_allclose(ga, np.conj(tga.numpy()), rtol=1e-5, atol=1e-6)
  np.testing.assert_allclose(gb, np.conj(tgb.numpy()), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize(
  "adj_x,adj_y", [(False, False), (True, False), (False, True), (True, True)]
)
def test_batch_matmul_v2_grads_broadcast_and_adjoint(adj_x, adj_y):
  dtype = np.complex64
  x = _rand(*((2, 1, 3, 4) if adj_x else (2, 1, 4, 3)), dtype=dtype)
  y = _rand(*((5, 2, 3) if adj_y else (5, 3, 2)), dtype=dtype)
  ct = _rand(2, 5, 4, 2, dtype=dtype)
  f = lambda x, y: L.BatchMatMulV2(x, y, adj_x=adj_x, adj_y=adj_y)
  out, vjp = jax.vjp(f, x, y)
  gx, gy = vjp(ct)
  assert gx.shape == x.shape and gy.shape == y.shape
  jaxpr = jax.make_jaxpr(lambda x, y, ct: jax.vjp(f, x, y)[1](ct))(x, y, ct)
  assert not non_tf_primitives(jaxpr), jaxpr
  tx, ty = tf.constant(x), tf.constant(y)
  with tf.GradientTape() as tape:
    tape.watch([tx, ty])
    ref = tf.raw_ops.BatchMatMulV2(x=tx, y=ty, adj_x=adj_x, adj_y=adj_y)
  tgx, tgy = tape.gradient(ref, [tx, ty], output_gradients=tf.constant(np.conj(ct)))
  np.testing.assert_allclose(out, ref.numpy(), rtol=1e-5, atol=1e-6)
  np.testing.assert_allclose(gx, np.conj(tgx.numpy()), rtol=1e-5, atol=1e-5)
  np.testing.assert_allclose(gy, np.conj(tgy.numpy()), rtol=1e-5, atol=1e-5)


def test_integer_matmul_wraps_like_tf():
  a = np.array([[2**30, 2**30, 3]], np.int32)
  b = np.array([[2], [2], [-7]], np.int32)
  np.testing.assert_array_equal(
    L.MatMul(a, b, transpose_a=False, transpose_b=False), tf.raw_ops.MatMul(a=a, b=b).numpy()
  )
  x, y = np.array([[100, 100]], np.int8), np.array([[100], [100]], np.int8)
  got = _call(L.BatchMatMulV3, {"x": x, "y": y}, {"Tout": np.dtype("int32")})
  assert got.dtype == np.int32
  np.testing.assert_array_equal(got, tf.raw_ops.BatchMatMulV3(x=x, y=y, Tout=tf.int32).numpy())


def test_einsum_vmap_keeps_tf_name():
  x, y = _rand(4, 2, 3), _rand(3, 5)
  f = lambda x: L.Einsum(x, y, equation="ij,jk->ik")
  jaxpr = jax.make_jaxpr(jax.vmap(f))(x)
  assert "tf.Einsum" in jaxpr_primitives(jaxpr) and not non_tf_primitives(jaxpr)
  np.testing.assert_allclose(jax.vmap(f)(x), np.einsum("bij,jk->bik", x, y), rtol=1e-5)


# ---------------------------------------------------------------------------
# Reductions: TF's ties, NaN, empty and integer semantics


def test_argmax_argmin_ties_and_nan_match_tf():
  nan, inf = np.nan, np.inf
  x = np.array(
    [
      [nan, 1.0, 2.0],
      [3.0, nan, 1.0],
      [2.0, 2.0, nan],
      [nan, nan, nan],
      [-inf, nan, -inf],
      [nan, -inf, -3.0],
      [0.0, -0.0, 0.0],
      [inf, nan, inf],
      [1.0, 3.0, 3.0],
    ],
    np.float32,
  )
  for dtype in (np.float32, np.float16, tf.bfloat16.as_numpy_dtype):
    xx = x.astype(dtype)
    for name in ("ArgMax", "ArgMin"):
      for out_type in (np.int32, np.int64):
        ref = getattr(tf.raw_ops, name)(input=xx, dimension=1, output_type=out_type).numpy()
        got = _call(
          getattr(R, name),
          {"input": xx, "dimension": np.array(-1, np.int32)},
          {"output_type": np.dtype(out_type)},
        )
        np.testing.assert_array_equal(got, ref, err_msg=f"{name} {np.dtype(dtype)}")
        assert got.dtype == np.int32  # int64 narrowed with x64 off
  ints = np.array([[1, 3, 3, 0, 3], [-1, -1, 5, 5, -7]], np.int32)
  for name in ("ArgMax", "ArgMin"):
    ref = getattr(tf.raw_ops, name)(input=ints, dimension=1).numpy()
    np.testing.assert_array_equal(
      getattr(R, name)(ints, dimension=1, output_type=np.dtype("int64")), ref
    )


def test_max_min_gradient_splits_ties_like_tf():
  x = np.array(
    [[1.0, 3.0, 3.0], [2.0, 2.0, 2.0], [np.nan, 1.0, 0.0], [-0.0, 0.0, -1.0]], np.float32
  )
  for name in ("Max", "Min"):
    op, tf_fn = getattr(R, name), getattr(tf.raw_ops, name)
    got = jax.grad(lambda x: jnp.sum(op(x, axis=(1,), keep_dims=False) * jnp.arange(1.0, 5.0)))(x)
    (ref,) = _tf_grads(lambda x: tf.reduce_sum(tf_fn(input=x, axis=1) * tf.range(1.0, 5.0)), x)
    np.testing.assert_allclose(got, ref, equal_nan=True)
    values = op(x, axis=(1,), keep_dims=False)
    np.testing.assert_array_equal(values, tf_fn(input=x, axis=1).numpy())  # NaN propagates


def test_empty_reductions_match_tf():
  for dtype in (np.float32, np.float16, np.int32, np.uint8, np.complex64):
    x = np.zeros((0, 3), dtype)
    for name in ("Sum", "Mean", "Max", "Min", "Prod", "EuclideanNorm"):
      if name in ("Max", "Min") and dtype == np.complex64:
        continue
      ref = getattr(tf.raw_ops, name)(input=x, axis=0).numpy()
      got = np.asarray(getattr(R, name)(x, axis=(0,), keep_dims=False))
      assert got.dtype == ref.dtype
      np.testing.assert_array_equal(got, ref, err_msg=f"{name} {np.dtype(dtype)}")
  for name in ("All", "Any"):
    x = np.zeros((2, 0), bool)
    np.testing.assert_array_equal(
      getattr(R, name)(x, axis=(1,), keep_dims=True),
      getattr(tf.raw_ops, name)(input=x, axis=1, keep_dims=True),
    )


def test_float_prod_order_follows_tf_xla_where_partial_products_leave_the_range():
  # TF's Eigen kernel multiplies in SIMD lanes (its NaN/inf here depends on positions
  # and the packet width); tfprims gives TF-XLA's results (docs/semantics/
  # reductions_linalg.md), and agrees with the kernel where nothing over/underflows.
  xla = tf.function(lambda v: tf.raw_ops.Prod(input=v, axis=0), jit_compile=True)
  for n, pos in [(3, (1, 2)), (20, (1, 3)), (20, (1, 2)), (20, (16, 17)), (40, (1, 17))]:
    x = np.ones(n, np.float32)
    x[0], x[pos[0]], x[pos[1]] = -np.inf, 1e-30, 1e-30
    want = xla(tf.constant(x)).numpy()
    assert want == -np.inf
    for got in (
      R.Prod(x, axis=(0,), keep_dims=False),
      jax.jit(lambda v: R.Prod(v, axis=(0,), keep_dims=False))(x),
    ):
      np.testing.assert_array_equal(got, want)
  x = np.array(
    [
      [-np.inf, 2, -3, 0.5, -0.0],
      [-np.inf, 1e30, -1e-30, 3, 7],
      [1e20, 1e18, -1e-10, 4, -2],
      [np.nan, 1, 2, 3, 4],
    ],
    np.float32,
  )
  for axis in (0, 1):
    want = tf.raw_ops.Prod(input=x, axis=axis).numpy()
    got = np.asarray(R.Prod(x, axis=(axis,), keep_dims=False))
    np.testing.assert_allclose(got, want, rtol=1e-6)
    np.testing.assert_array_equal(np.signbit(got), np.signbit(want))


def _integer_mean_cases():
  i32 = np.iinfo(np.int32)
  yield np.array([[-7, 7, -1, 1], [-5, -5, -5, 6]], np.int32)
  yield np.array([[i32.max] * 3, [i32.min] * 3, [i32.min, -1, i32.max]], np.int32)
  yield np.array([[2**32 - 1] * 3, [5, 0, 1]], np.uint32)
  yield np.array([[127, 127, 1], [-128, -128, -1]], np.int8)
  yield np.array([[255, 255, 1]], np.uint8)
  yield RNG.integers(i32.min, i32.max, (3, 7), dtype=np.int32)


@pytest.mark.parametrize("x64", [False, True])
def test_integer_mean_truncates_like_tf(x64):
  with jax.enable_x64(x64):
    for x in _integer_mean_cases():
      for axis in (0, 1):
        ref = tf.raw_ops.Mean(input=x, axis=axis).numpy()
        np.testing.assert_array_equal(R.Mean(x, axis=(axis,), keep_dims=False), ref, err_msg=str(x))


def test_float16_mean_overflows_like_tf():
  x = np.array([60000, 60000], np.float16)
  assert np.isinf(R.Mean(x, axis=(0,), keep_dims=False))
  assert np.isinf(tf.raw_ops.Mean(input=x, axis=0).numpy())


def test_integer_euclidean_norm_wraps_like_tf():
  cases = [
    np.array([[12, 0], [11, 1], [100, 100], [-3, -4]], np.int8),
    np.array([[200, 200], [181, 1]], np.int16),
    np.array([[40000, 40000], [46339, 304], [46340, 1], [3, 4]], np.int32),
    np.array([[65535, 65535], [65535, 1]], np.uint32),
  ]
  for x in cases:
    ref = tf.raw_ops.EuclideanNorm(input=x, axis=1).numpy()
    np.testing.assert_array_equal(R.EuclideanNorm(x, axis=(1,), keep_dims=False), ref)
    np.testing.assert_array_equal(
      R.EuclideanNorm(x[:1, :1], axis=(), keep_dims=False),
      tf.raw_ops.EuclideanNorm(input=x[:1, :1], axis=[]).numpy(),
    )


def test_complex_euclidean_norm_special_values():
  # An inf part gives (inf, NaN); Eigen's complex sqrt overflows above max/2.
  vals = [
    complex(np.inf, 0),
    complex(-np.inf, 1e30),
    complex(1.4e19, 0),
    3 + 4j,
    complex(np.nan, 1.0),
  ]
  for shape, axis in [((5, 1), 1), ((1, 5), 0), ((5, 2), 1)]:
    x = np.broadcast_to(np.array(vals, np.complex64).reshape(5, 1), (5, shape[1]))
    x = np.ascontiguousarray(x if shape[0] == 5 else x.T)
    got = np.asarray(R.EuclideanNorm(x, axis=(axis,), keep_dims=False))
    ref = tf.raw_ops.EuclideanNorm(input=x, axis=axis).numpy()
    np.testing.assert_array_equal(got.real, ref.real)
    np.testing.assert_array_equal(got.imag, ref.imag)
