"""Fractional pooling gradients (tfprims/ops/nn/fractional_pool.py): a converted program
with TF's forward op feeding the Grad ops; FractionalMaxPoolGrad's runtime check; integer
FractionalAvgPoolGrad with overlapping cells."""

import jax
import numpy as np
import pytest
import tensorflow as tf

import tfprims
from tfprims.core import get_op

R = tf.raw_ops


def _forward(op, x, overlapping):
  return getattr(R, op)(value=x, pooling_ratio=[1.0, 1.44, 1.73, 1.0], pseudo_random=True,
                        overlapping=overlapping, deterministic=True, seed=7, seed2=3)


@pytest.mark.parametrize("overlapping", [False, True])
def test_grad_ops_in_a_converted_program(overlapping):
  x = np.random.default_rng(0).normal(size=(2, 6, 5, 3)).astype(np.float32)
  out, rows, cols = _forward("FractionalMaxPool", x, overlapping)
  _, arows, acols = _forward("FractionalAvgPool", x, overlapping)

  @tf.function
  def f(x, g, r, c, ar, ac):
    mx = R.FractionalMaxPool(value=x, pooling_ratio=[1.0, 1.44, 1.73, 1.0],
                             pseudo_random=True, overlapping=overlapping, deterministic=True,
                             seed=7, seed2=3)[0]
    return (R.FractionalMaxPoolGrad(orig_input=x, orig_output=mx, out_backprop=g,
                                    row_pooling_sequence=r, col_pooling_sequence=c,
                                    overlapping=overlapping),
            R.FractionalAvgPoolGrad(orig_input_tensor_shape=tf.shape(x, out_type=tf.int64),
                                    out_backprop=g, row_pooling_sequence=ar,
                                    col_pooling_sequence=ac, overlapping=overlapping))

  g = np.random.default_rng(1).normal(size=out.shape).astype(np.float32)
  args = (x, g, rows.numpy(), cols.numpy(), arows.numpy(), acols.numpy())
  want = f(*args)   # TF's forward op computes orig_output; ours is given TF's
  max_grad = get_op("FractionalMaxPoolGrad")(x, out.numpy(), g, rows.numpy(), cols.numpy(),
                                              overlapping=overlapping)
  np.testing.assert_allclose(max_grad, want[0].numpy(), rtol=1e-6, atol=1e-6)

  @tf.function
  def avg_grad(g, r, c):
    return R.FractionalAvgPoolGrad(orig_input_tensor_shape=[2, 6, 5, 3], out_backprop=g,
                                   row_pooling_sequence=r, col_pooling_sequence=c,
                                   overlapping=overlapping)

  fn = tfprims.convert_functional(avg_grad, tf.TensorSpec(out.shape, tf.float32),
                                  tf.TensorSpec([None], tf.int64),
                                  tf.TensorSpec([None], tf.int64))
  got = jax.jit(fn)(g, arows.numpy(), acols.numpy())
  np.testing.assert_allclose(got, want[1].numpy(), rtol=1e-6, atol=1e-6)
  # per-example vmap == TF on each example
  per = jax.vmap(lambda gi: get_op("FractionalAvgPoolGrad")(
      gi[None], arows.numpy(), acols.numpy(), orig_input_tensor_shape=(1, 6, 5, 3),
      overlapping=overlapping)[0])(g)
  for k in range(2):
    np.testing.assert_allclose(per[k], want[1].numpy()[k], rtol=1e-6, atol=1e-6)


def test_max_pool_grad_check_rejects_a_wrong_orig_output():
  x = np.random.default_rng(2).normal(size=(1, 4, 4, 1)).astype(np.float32)
  out, rows, cols = _forward("FractionalMaxPool", x, False)
  wrong = out.numpy() + 1
  g = np.ones(out.shape, np.float32)
  with pytest.raises(tf.errors.InvalidArgumentError):
    R.FractionalMaxPoolGrad(orig_input=x, orig_output=wrong, out_backprop=g,
                            row_pooling_sequence=rows, col_pooling_sequence=cols)
  @tf.function
  def grad(o):
    return R.FractionalMaxPoolGrad(orig_input=x, orig_output=o, out_backprop=g,
                                   row_pooling_sequence=rows, col_pooling_sequence=cols)

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
  want = R.FractionalAvgPoolGrad(orig_input_tensor_shape=np.array(x.shape), out_backprop=g,
                                 row_pooling_sequence=rows, col_pooling_sequence=cols,
                                 overlapping=True).numpy()
  got = np.asarray(get_op("FractionalAvgPoolGrad")(
      g, rows.numpy(), cols.numpy(), orig_input_tensor_shape=x.shape, overlapping=True))
  assert np.abs(got - want).max() <= 1
