"""NaN (both signs), ±0, ±inf and ties through TF's sorting and selection kernels:
tf.sort, tf.argsort, tf.math.top_k (TopKV2), NthElement, ApproxTopK and XlaSort
give TF's CPU results bit for bit, eager and under jit (docs/semantics/nn.md, "NaN";
docs/semantics/xla.md); sorts read back from StableHLO honour the comparator's
TOTALORDER comparison (tests/test_stablehlo.py, tests/test_jax2tf_roundtrip.py)."""

import jax
import ml_dtypes
import numpy as np
import pytest
import tensorflow as tf

import tfprims
from tfprims.ops.nn import cpu_sort
from tfprims.ops.xla import _common as xla_common

NEG_NAN = np.copysign(np.nan, -1.0)
# The row: NaN of both signs beside ±inf, ±0 and a tie.
ROW = [np.inf, np.nan, NEG_NAN, -np.inf, 3.0, 0.0, -0.0, 1.0, 1.0]
I32 = np.dtype("int32")


def _bits(a):
  """An array's dtype, shape and bytes: NaN signs and -0.0 compared too."""
  a = np.asarray(a)
  return a.dtype.str, a.shape, a.tobytes()


def _assert_same(got, want):
  got, want = np.asarray(got), np.asarray(want)
  assert _bits(got) == _bits(want), f"\n got {got!r}\nwant {want!r}"


@tf.function
def _sorts(x):
  out = [tf.sort(x), tf.sort(x, direction="DESCENDING")]
  for direction in ("ASCENDING", "DESCENDING"):
    for stable in (True, False):
      out.append(tf.argsort(x, direction=direction, stable=stable))
  for k in (1, 2, 5, x.shape[-1]):
    top = tf.math.top_k(x, k)
    out += [top.values, top.indices]
  return out


@tf.function
def _unsorted_top_k(x):
  out = []
  for k in (1, 2, 5, x.shape[-1]):
    top = tf.math.top_k(x, k, sorted=False)
    out += [top.values, top.indices]
  return out


def _x(dtype, rows):
  row = np.asarray(ROW, np.float64)
  x = np.stack([row, row[::-1], np.roll(row, 3)])[:rows] if rows else row
  return x.astype(dtype)


@pytest.mark.parametrize(
  "dtype,rows", [("float32", 0), ("float32", 3), ("float64", 0), ("float16", 2), ("bfloat16", 0)]
)
def test_sort_argsort_top_k_with_nan_match_tf(dtype, rows):
  with jax.enable_x64(dtype == "float64"):  # else float64 runs in float32
    _sorts_match_tf(ml_dtypes.bfloat16 if dtype == "bfloat16" else np.dtype(dtype), rows)


def _sorts_match_tf(dtype, rows):
  x = _x(dtype, rows)
  fn, params = tfprims.convert(_sorts, tf.TensorSpec(x.shape, tf.as_dtype(x.dtype)))
  want = [t.numpy() for t in _sorts(x)]
  for got, w in zip(jax.tree.leaves(jax.jit(lambda x: fn(params, x))(x)), want, strict=True):
    _assert_same(got, w)
  if dtype == np.float32 and not rows:
    for got, w in zip(jax.tree.leaves(fn(params, x)), want, strict=True):
      _assert_same(got, w)


def test_top_k_sorted_false_is_tf_sorted_order_of_the_same_elements():
  x = _x(np.float32, 3)
  fn, params = tfprims.convert(_unsorted_top_k, tf.TensorSpec(x.shape, tf.float32))
  got = jax.tree.leaves(jax.jit(lambda x: fn(params, x))(x))
  unsorted = _unsorted_top_k(x)
  for i, k in enumerate((1, 2, 5, 9)):
    want = tf.math.top_k(x, k)
    _assert_same(got[2 * i], want.values.numpy())
    _assert_same(got[2 * i + 1], want.indices.numpy())
    np.testing.assert_array_equal(
      np.sort(unsorted[2 * i + 1].numpy(), -1), np.sort(want.indices.numpy(), -1)
    )


@pytest.mark.parametrize("dtype", ["float32", "float64", "float16"])
@pytest.mark.parametrize("n", [9, 40])
def test_top_k_on_random_nan_rows_matches_tf_kernel(dtype, n):
  with jax.enable_x64(dtype == "float64"):
    _random_rows_match_tf(dtype, n)


def _random_rows_match_tf(dtype, n):
  # n = 9 sorts by insertion (k == n) and a heap (1 < k < n); n = 40 by introsort.
  rng = np.random.default_rng(n)
  op = tfprims.get_op("TopKV2")
  pool = np.asarray([np.nan, NEG_NAN, np.inf, -np.inf, 0.0, -0.0, 1.0, 2.0, -1.0])
  for k in (1, 4, n):
    f = jax.jit(lambda x, k=k: op(x, k=k, sorted=True, index_type=I32))
    for trial in range(3):
      x = (
        rng.choice(pool, (4, n))
        if trial
        else np.where(rng.random((4, n)) < 0.3, np.nan, rng.normal(size=(4, n)))
      )
      x = x.astype(dtype)
      x[0] = np.abs(x[0])  # a row whose NaNs are all positive
      want = tf.raw_ops.TopKV2(input=x, k=k)
      got = f(x)
      _assert_same(got[0], want.values.numpy())
      _assert_same(got[1], want.indices.numpy())


def test_top_1_follows_eigens_packets():
  # TF's k == 1 path: Eigen's maximum skips NaN inside packets (8 float32, 4 float64)
  # and ends NaN when the scalar tail's last element is NaN (then index 0).
  op = tfprims.get_op("TopKV2")
  for dtype, n in (("float32", 8), ("float32", 9), ("float64", 4), ("float64", 5), ("float32", 3)):
    x = np.arange(1.0, n + 1).astype(dtype)
    x[-1] = np.nan
    want = tf.raw_ops.TopKV2(input=x, k=1)
    with jax.enable_x64(True):
      got = op(x, k=1, sorted=True, index_type=I32)
      _assert_same(got[1], want.indices.numpy())
      _assert_same(got[0], want.values.numpy())
  assert cpu_sort.packet(np.float32) == 8 and cpu_sort.packet(np.float64) == 4


@pytest.mark.parametrize("reverse", [False, True])
def test_nth_element_with_nan_and_signed_zeros_matches_tf(reverse):
  op = tfprims.get_op("NthElement")
  rows = np.asarray([ROW, ROW[::-1], [0.0, -0.0, 1.0, -0.0, 0.0, 2.0, -1.0, 0.0, 3.0]], np.float32)
  for n in (0, 2, 4, 8):
    want = tf.raw_ops.NthElement(input=rows, n=n, reverse=reverse).numpy()
    _assert_same(jax.jit(lambda x, n=n: op(x, n=n, reverse=reverse))(rows), want)


def test_approx_top_k_is_tf_top_k_with_nan():
  op = tfprims.get_op("ApproxTopK")
  x = _x(np.float32, 2)
  for k in (1, 3, 9):
    want = tf.math.approx_max_k(x, k)
    got = op(
      x,
      k=k,
      reduction_dimension=-1,
      recall_target=0.95,
      is_max_k=True,
      reduction_input_size_override=-1,
      aggregate_to_topk=True,
    )
    _assert_same(got[0], want[0].numpy())
    _assert_same(got[1], want[1].numpy())


def test_xla_sort_is_total_order():
  x = _x(np.float32, 2)
  got = tfprims.get_op("XlaSort")(x)
  _assert_same(got, xla_common.jit_oracle("XlaSort", ("input",))(input=x).numpy())
  values = np.arange(x.size, dtype=np.int32).reshape(x.shape)
  got = tfprims.get_op("XlaKeyValueSort")(x, values)
  want = xla_common.jit_oracle("XlaKeyValueSort", ("keys", "values"))(keys=x, values=values)
  _assert_same(got[0], want[0].numpy())
  _assert_same(got[1], want[1].numpy())


def test_tf_nan_order_off_orders_nan_above_inf_and_compiles_the_fast_path():
  from tfprims.core import get_op

  x = np.array([[np.inf, np.nan, 3.0, -np.inf, 1.0, 1.0]], np.float32)
  op = get_op("TopKV2")
  operands, params = op.prepare({"input": x, "k": np.int32(3)}, {})
  with tfprims.override_config("tf_nan_order", False):
    values, indices = jax.jit(lambda a: op(a, **params))(*operands)
    np.testing.assert_array_equal(np.asarray(indices), [[1, 0, 2]])
  tf_values, tf_indices = tf.math.top_k(x, 3)
  values, indices = jax.jit(lambda a: op(a, **params))(*operands)  # on again: TF's
  np.testing.assert_array_equal(np.asarray(indices), tf_indices.numpy())
