"""Fractional pooling (tfprims/ops/nn/fractional_pool.py).

Forward ops: the pooling at TF's own sequences equals TF's output exactly; the drawn
sequences have TF's construction and distribution; derivatives at fixed sequences (VJP
= TF's gradient op there, JVP = central differences); vmap; a converted program with
rng=. Grad ops: a converted program with TF's forward op feeding them;
FractionalMaxPoolGrad's runtime check; integer FractionalAvgPoolGrad with overlapping
cells."""

import collections

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import tensorflow as tf

import tfprims
from tfprims.core import get_op
from tfprims.ops.nn import fractional_pool as fp

R = tf.raw_ops


def _forward(op, x, overlapping):
  return getattr(R, op)(
    value=x,
    pooling_ratio=[1.0, 1.44, 1.73, 1.0],
    pseudo_random=True,
    overlapping=overlapping,
    deterministic=True,
    seed=7,
    seed2=3,
  )


@pytest.mark.parametrize("overlapping", [False, True])
def test_grad_ops_in_a_converted_program(overlapping):
  x = np.random.default_rng(0).normal(size=(2, 6, 5, 3)).astype(np.float32)
  out, rows, cols = _forward("FractionalMaxPool", x, overlapping)
  _, arows, acols = _forward("FractionalAvgPool", x, overlapping)

  @tf.function
  def f(x, g, r, c, ar, ac):
    mx = R.FractionalMaxPool(
      value=x,
      pooling_ratio=[1.0, 1.44, 1.73, 1.0],
      pseudo_random=True,
      overlapping=overlapping,
      deterministic=True,
      seed=7,
      seed2=3,
    )[0]
    return (
      R.FractionalMaxPoolGrad(
        orig_input=x,
        orig_output=mx,
        out_backprop=g,
        row_pooling_sequence=r,
        col_pooling_sequence=c,
        overlapping=overlapping,
      ),
      R.FractionalAvgPoolGrad(
        orig_input_tensor_shape=tf.shape(x, out_type=tf.int64),
        out_backprop=g,
        row_pooling_sequence=ar,
        col_pooling_sequence=ac,
        overlapping=overlapping,
      ),
    )

  g = np.random.default_rng(1).normal(size=out.shape).astype(np.float32)
  args = (x, g, rows.numpy(), cols.numpy(), arows.numpy(), acols.numpy())
  want = f(*args)  # TF's forward op computes orig_output; ours is given TF's
  max_grad = get_op("FractionalMaxPoolGrad")(
    x, out.numpy(), g, rows.numpy(), cols.numpy(), overlapping=overlapping
  )
  np.testing.assert_allclose(max_grad, want[0].numpy(), rtol=1e-6, atol=1e-6)

  @tf.function
  def avg_grad(g, r, c):
    return R.FractionalAvgPoolGrad(
      orig_input_tensor_shape=[2, 6, 5, 3],
      out_backprop=g,
      row_pooling_sequence=r,
      col_pooling_sequence=c,
      overlapping=overlapping,
    )

  fn = tfprims.convert_functional(
    avg_grad,
    tf.TensorSpec(out.shape, tf.float32),
    tf.TensorSpec([None], tf.int64),
    tf.TensorSpec([None], tf.int64),
  )
  got = jax.jit(fn)(g, arows.numpy(), acols.numpy())
  np.testing.assert_allclose(got, want[1].numpy(), rtol=1e-6, atol=1e-6)
  # per-example vmap == TF on each example
  per = jax.vmap(
    lambda gi: get_op("FractionalAvgPoolGrad")(
      gi[None],
      arows.numpy(),
      acols.numpy(),
      orig_input_tensor_shape=(1, 6, 5, 3),
      overlapping=overlapping,
    )[0]
  )(g)
  for k in range(2):
    np.testing.assert_allclose(per[k], want[1].numpy()[k], rtol=1e-6, atol=1e-6)


def test_max_pool_grad_check_rejects_a_wrong_orig_output():
  x = np.random.default_rng(2).normal(size=(1, 4, 4, 1)).astype(np.float32)
  out, rows, cols = _forward("FractionalMaxPool", x, False)
  wrong = out.numpy() + 1
  g = np.ones(out.shape, np.float32)
  with pytest.raises(tf.errors.InvalidArgumentError):
    R.FractionalMaxPoolGrad(
      orig_input=x,
      orig_output=wrong,
      out_backprop=g,
      row_pooling_sequence=rows,
      col_pooling_sequence=cols,
    )

  @tf.function
  def grad(o):
    return R.FractionalMaxPoolGrad(
      orig_input=x,
      orig_output=o,
      out_backprop=g,
      row_pooling_sequence=rows,
      col_pooling_sequence=cols,
    )

  fn = tfprims.convert_functional(grad, tf.TensorSpec(out.shape, tf.float32))
  with pytest.raises(tfprims.RuntimeCheckError, match="do not match"):
    fn(wrong)
  np.testing.assert_array_equal(fn(out.numpy()), grad(out).numpy())


def test_integer_avg_pool_grad_with_overlapping_cells_within_one():
  """TF truncates its float64 sums of integer shares; ours differ by at most one."""
  rng = np.random.default_rng(3)
  x = rng.integers(-9, 9, size=(2, 6, 6, 2)).astype(np.int64)
  _, rows, cols = _forward("FractionalAvgPool", x, True)
  g = rng.integers(-50, 50, size=(2, len(rows) - 1, len(cols) - 1, 2)).astype(np.int64)
  want = R.FractionalAvgPoolGrad(
    orig_input_tensor_shape=np.array(x.shape),
    out_backprop=g,
    row_pooling_sequence=rows,
    col_pooling_sequence=cols,
    overlapping=True,
  ).numpy()
  got = np.asarray(
    get_op("FractionalAvgPoolGrad")(
      g, rows.numpy(), cols.numpy(), orig_input_tensor_shape=x.shape, overlapping=True
    )
  )
  assert np.abs(got - want).max() <= 1


# --- forward ops ------------------------------------------------------------------------

RATIOS = [1.0, 1.44, 1.73, 1.0]


def _tf_forward(op, x, **kw):
  out = getattr(R, op)(
    value=tf.constant(x), pooling_ratio=kw.pop("ratio", RATIOS), deterministic=True, **kw
  )
  return [t.numpy() for t in out]


@pytest.mark.parametrize("op", ["FractionalMaxPool", "FractionalAvgPool"])
@pytest.mark.parametrize("dtype", ["float32", "float64", "int32", "int64"])
@pytest.mark.parametrize("overlapping", [False, True])
@pytest.mark.parametrize("pseudo_random", [False, True])
def test_pooling_at_tf_sequences_is_tf_output(x64, op, dtype, overlapping, pseudo_random):
  rng = np.random.default_rng(hash((op, dtype, overlapping, pseudo_random)) % 2**32)
  for seed, shape, ratio in [
    (1, (2, 7, 9, 3), RATIOS),
    (5, (1, 10, 5, 2), [1, 2.6, 1.2, 1]),
    (9, (1, 4, 4, 1), [1, 1.0, 4.0, 1]),
  ]:
    if dtype.startswith("int"):
      x = rng.integers(-1000, 1000, size=shape).astype(dtype)
    else:
      x = rng.normal(size=shape).astype(dtype) * 10
    want, rows, cols = _tf_forward(
      op,
      x,
      ratio=ratio,
      pseudo_random=pseudo_random,
      overlapping=overlapping,
      seed=seed,
      seed2=seed + 1,
    )
    pool = lambda v, r, c: fp._pool_regions(
      v, r, c, overlapping=overlapping, mode=op[10:13].lower()
    )
    for fn in (pool, jax.jit(pool)):
      got = fn(jnp.asarray(x), jnp.asarray(rows), jnp.asarray(cols))
      assert got.dtype == want.dtype
      np.testing.assert_array_equal(np.asarray(got), want)


def test_max_pool_skips_nan_and_starts_from_lowest():
  x = np.array([np.nan, 1, 2, 3, 4, 5, 6, 7, 8], np.float32).reshape(1, 3, 3, 1)
  x[0, 1, 1, 0] = -np.inf
  want, rows, cols = _tf_forward("FractionalMaxPool", x, ratio=[1, 1.5, 1.5, 1], seed=1, seed2=2)
  got = fp._pool_regions(x, rows, cols, overlapping=False, mode="max")
  np.testing.assert_array_equal(np.asarray(got), want)


def _draw(op, key, shape, ratio, pseudo_random, overlapping=False):
  x = np.zeros(shape, np.float32)
  return get_op(op)(
    np.asarray(key, np.uint32),
    x,
    pooling_ratio=tuple(ratio),
    pseudo_random=pseudo_random,
    overlapping=overlapping,
  )


@pytest.mark.parametrize("pseudo_random", [False, True])
@pytest.mark.parametrize(
  "n_in,ratio", [(7, 1.44), (10, 1.73), (23, 2.3), (9, 3.0), (5, 1.0), (12, 2.5)]
)
def test_drawn_sequences_have_tf_construction(pseudo_random, n_in, ratio):
  n_out = int(np.floor(np.float32(n_in) / np.float32(ratio)))
  k = n_in // n_out
  for s in range(20):
    _, rows, cols = _draw(
      "FractionalMaxPool", [s, 7], (1, n_in, 3, 1), [1, ratio, 1, 1], pseudo_random
    )
    rows = np.asarray(rows)
    assert rows.shape == (n_out + 1,) and rows[0] == 0 and rows[-1] == n_in
    steps = np.diff(rows)
    assert set(steps) <= {k, k + 1}
    assert (steps == k + 1).sum() == n_in - k * n_out
    np.testing.assert_array_equal(np.asarray(cols), [0, 1, 2, 3])  # ratio 1


@pytest.mark.parametrize("pseudo_random", [False, True])
def test_drawn_sequences_follow_tf_distribution(pseudo_random):
  """Frequencies of each possible row sequence: ours (jax.random) vs TF's (Philox)."""
  n = 300
  shape, ratio = (1, 10, 2, 1), [1.0, 1.73, 1.0, 1.0]
  x = np.zeros(shape, np.float32)
  theirs = collections.Counter(
    tuple(
      R.FractionalMaxPool(
        value=x,
        pooling_ratio=ratio,
        pseudo_random=pseudo_random,
        deterministic=True,
        seed=s + 1,
        seed2=3 * s + 1,
      )[1].numpy()
    )
    for s in range(n)
  )
  ours = collections.Counter(
    tuple(int(v) for v in _draw("FractionalMaxPool", [s, 11], shape, ratio, pseudo_random)[1])
    for s in range(n)
  )
  assert set(ours) == set(theirs), (ours, theirs)
  for seq in theirs:  # binomial standard error of a frequency, n = 300
    p = theirs[seq] / n
    assert abs(ours[seq] / n - p) < 5 * np.sqrt(p * (1 - p) / n) + 0.02, (seq, ours, theirs)


def test_same_key_same_sequences_other_key_other_sequences():
  a = _draw("FractionalAvgPool", [3, 4], (1, 20, 20, 1), RATIOS, False)
  b = _draw("FractionalAvgPool", [3, 4], (1, 20, 20, 1), RATIOS, False)
  np.testing.assert_array_equal(a[1], b[1])
  others = {
    tuple(np.asarray(_draw("FractionalAvgPool", [s, 5], (1, 20, 20, 1), RATIOS, False)[1]))
    for s in range(8)
  }
  assert len(others) > 1


@pytest.mark.parametrize("op", ["FractionalMaxPool", "FractionalAvgPool"])
@pytest.mark.parametrize("overlapping", [False, True])
def test_vjp_is_tf_gradient_op_at_our_sequences(x64, op, overlapping):
  rng = np.random.default_rng(4)
  x = rng.permutation(2 * 7 * 6 * 3).reshape(2, 7, 6, 3).astype(np.float64) / 7
  key = np.array([9, 1], np.uint32)
  kw = dict(pooling_ratio=tuple(RATIOS), pseudo_random=True, overlapping=overlapping)
  f = lambda v: get_op(op)(key, v, **kw)[0]
  (y, rows, cols) = get_op(op)(key, x, **kw)
  ct = rng.normal(size=y.shape)
  got = jax.vjp(f, x)[1](ct)[0]
  if op == "FractionalMaxPool":
    want = R.FractionalMaxPoolGrad(
      orig_input=x,
      orig_output=np.asarray(y),
      out_backprop=ct,
      row_pooling_sequence=np.asarray(rows),
      col_pooling_sequence=np.asarray(cols),
      overlapping=overlapping,
    )
  else:
    want = R.FractionalAvgPoolGrad(
      orig_input_tensor_shape=np.array(x.shape),
      out_backprop=ct,
      row_pooling_sequence=np.asarray(rows),
      col_pooling_sequence=np.asarray(cols),
      overlapping=overlapping,
    )
  np.testing.assert_allclose(got, want.numpy(), rtol=1e-12, atol=1e-12)
  prims = {e.primitive.name for e in jax.make_jaxpr(jax.grad(lambda v: f(v).sum()))(x).eqns}
  assert f"tf.{op}Grad" in prims
  # JVP: central differences at the same key (same sequences); distinct inputs, so the
  # maxima do not move for a small step
  t = rng.normal(size=x.shape)
  jv = jax.jvp(f, (x,), (t,))[1]
  eps = 1e-6
  fd = (np.asarray(f(x + eps * t)) - np.asarray(f(x - eps * t))) / (2 * eps)
  np.testing.assert_allclose(jv, fd, rtol=1e-6, atol=1e-6)
  # second order: jvp of the vjp (tf.FractionalMaxPool.tangent <-> FractionalMaxPoolGrad)
  jax.jvp(lambda v: jax.grad(lambda u: (f(u) ** 2).sum())(v), (x,), (t,))


@pytest.mark.parametrize("op", ["FractionalMaxPool", "FractionalAvgPool"])
def test_vmap_folds_batch_or_draws_per_key(op):
  x = np.random.default_rng(5).normal(size=(3, 2, 8, 7, 2)).astype(np.float32)
  kw = dict(pooling_ratio=tuple(RATIOS), pseudo_random=False, overlapping=True)
  key = np.array([1, 2], np.uint32)
  out, rows, cols = jax.vmap(lambda v: get_op(op)(key, v, **kw))(x)
  assert rows.shape == (3, 6) and cols.shape == (3, 5)
  for b in range(3):
    want = get_op(op)(key, x[b], **kw)
    for o, w in zip((out[b], rows[b], cols[b]), want):
      np.testing.assert_array_equal(o, w)
  keys = np.array([[1, 2], [3, 4], [5, 6]], np.uint32)
  out, rows, cols = jax.vmap(lambda k, v: get_op(op)(k, v, **kw))(keys, x)
  for b in range(3):
    want = get_op(op)(keys[b], x[b], **kw)
    for o, w in zip((out[b], rows[b], cols[b]), want):
      np.testing.assert_array_equal(o, w)
  jaxpr = jax.make_jaxpr(jax.vmap(lambda v: get_op(op)(key, v, **kw)[0]))(x)
  assert f"tf.{op}" in {e.primitive.name for e in jaxpr.eqns}


def test_converted_program_takes_rng():
  @tf.function
  def f(x):
    out, rows, cols = tf.nn.fractional_max_pool(x, RATIOS, pseudo_random=True, seed=3)
    return out, rows, cols

  x = np.random.default_rng(6).normal(size=(2, 9, 8, 3)).astype(np.float32)
  fn = tfprims.convert_functional(f, tf.TensorSpec(x.shape, tf.float32))
  with pytest.raises(tfprims.MissingRngError):
    fn(x)
  out, rows, cols = jax.jit(fn)(x, rng=jax.random.key(0))
  want, trows, tcols = (t.numpy() for t in f(x))
  assert out.shape == want.shape and rows.shape == trows.shape and cols.shape == tcols.shape
  np.testing.assert_array_equal(out, fp._pool_regions(x, rows, cols, overlapping=False, mode="max"))
  again = jax.jit(fn)(x, rng=jax.random.key(0))
  np.testing.assert_array_equal(again[1], rows)


def test_invalid_ratios_are_rejected():
  x = np.zeros((1, 3, 3, 1), np.float32)
  key = np.array([0, 0], np.uint32)
  for ratio in [(1.0, 0.5, 1.0, 1.0), (1.0, 4.0, 1.0, 1.0), (2.0, 1.0, 1.0, 1.0)]:
    with pytest.raises(tfprims.ConversionError):
      get_op("FractionalAvgPool")(key, x, pooling_ratio=ratio)
