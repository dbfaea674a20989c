"""Recurrent block ops (tfprims/ops/nn/rnn_blocks.py): a TF1-style LSTMBlockCell graph and
a BlockLSTM model converted and compared with TF (outputs, grad, vmap); the derivative
conventions (TF's: cs/h only, clip straight through; BlockLSTMV2 as BlockLSTMGradV2);
steps past seq_len_max; TF names in grad and vmap jaxprs."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import tensorflow as tf
from tensorflow.python.framework import ops as tf_ops

import tfprims
from helpers import jaxpr_primitives
from tfprims.core import get_op

TOL = dict(rtol=1e-4, atol=1e-5)
T, B, N, H = 4, 3, 2, 3


def _rand(*shape, seed=0, scale=1.0):
  return (np.random.default_rng(seed + sum(shape)).normal(size=shape) * scale).astype(np.float32)


def _weights():
  return dict(
    w=_rand(N + H, 4 * H, scale=0.5),
    wci=_rand(H, seed=1),
    wcf=_rand(H, seed=2),
    wco=_rand(H, seed=3),
    b=_rand(4 * H, seed=4),
  )


def _contrib_lstm_cell_grad(op, *grads):
  """TF 1's gradient of LSTMBlockCell (tf.contrib.rnn), which TF 2 no longer registers."""
  x, cs_prev, h_prev, w, wci, wcf, wco, b = op.inputs
  i, cs, f, o, ci, co, _ = op.outputs
  _, cs_grad, _, _, _, _, h_grad = grads
  cs_prev_grad, dicfo, wci_grad, wcf_grad, wco_grad = tf.raw_ops.LSTMBlockCellGrad(
    x=x,
    cs_prev=cs_prev,
    h_prev=h_prev,
    w=w,
    wci=wci,
    wcf=wcf,
    wco=wco,
    b=b,
    i=i,
    cs=cs,
    f=f,
    o=o,
    ci=ci,
    co=co,
    cs_grad=cs_grad,
    h_grad=h_grad,
    use_peephole=op.get_attr("use_peephole"),
  )
  xh = tf.concat([x, h_prev], 1)
  xh_grad = tf.matmul(dicfo, w, transpose_b=True)
  n = x.shape[1]
  return (
    xh_grad[:, :n],
    cs_prev_grad,
    xh_grad[:, n:],
    tf.matmul(xh, dicfo, transpose_a=True),
    wci_grad,
    wcf_grad,
    wco_grad,
    tf.reduce_sum(dicfo, 0),
  )


@pytest.fixture(scope="module", autouse=True)
def _tf1_lstm_cell_gradient():
  """TF 1's gradient, registered only while this module's tests run: registered at import,
  it would reach every test process collecting this module, and the property harness and
  docs/ops.md would then see a gradient plain TF 2 does not have."""
  registry = tf_ops.gradient_registry._registry  # TF's registry offers no unregister
  if "LSTMBlockCell" in registry:
    yield
    return
  tf_ops.RegisterGradient("LSTMBlockCell")(_contrib_lstm_cell_grad)
  yield
  registry.pop("LSTMBlockCell")


def test_tf1_lstm_block_cell_graph():
  """A TF1-style graph: variables and LSTMBlockCell unrolled over time."""
  weights = {k: tf.Variable(v, name=k) for k, v in _weights().items()}

  @tf.function
  def tf_fn(x):
    cs = h = tf.zeros((tf.shape(x)[1], H))
    outs = []
    for t in range(T):
      _, cs, _, _, _, _, h = tf.raw_ops.LSTMBlockCell(
        x=x[t],
        cs_prev=cs,
        h_prev=h,
        forget_bias=1.0,
        cell_clip=0.8,
        use_peephole=True,
        **{k: v.read_value() for k, v in weights.items()},
      )
      outs.append(h)
    return tf.stack(outs)

  fn, params = tfprims.convert(tf_fn, tf.TensorSpec((T, None, N), tf.float32))
  x = _rand(T, B, N, seed=5, scale=2.0)
  want = tf_fn(x).numpy()
  np.testing.assert_allclose(jax.jit(fn)(params, x)[0], want, **TOL)

  ct = _rand(*want.shape, seed=6)
  grads, gx = jax.grad(lambda p, x: jnp.sum(fn(p, x)[0] * ct), argnums=(0, 1))(params, x)
  xt = tf.constant(x)
  variables = [fn.tf_variables[k] for k in params]
  with tf.GradientTape() as tape:
    tape.watch(xt)
    y = tf.reduce_sum(tf_fn(xt) * ct)
  *tf_grads, tf_gx = tape.gradient(y, variables + [xt])
  for k, g in zip(params, tf_grads):
    np.testing.assert_allclose(grads[k], g.numpy(), err_msg=k, **TOL)
  np.testing.assert_allclose(gx, tf_gx.numpy(), **TOL)

  # vmap over single sequences (the batch axis is 1) == per-sequence TF results
  per_seq = jax.vmap(lambda s: fn(params, s[:, None])[0][:, 0], in_axes=1)(x)
  for k in range(B):
    np.testing.assert_allclose(per_seq[k], tf_fn(x[:, k : k + 1]).numpy()[:, 0], **TOL)

  jaxpr = jax.make_jaxpr(jax.grad(lambda p: jnp.sum(fn(p, x)[0])))(params)
  assert {"tf.LSTMBlockCell", "tf.SigmoidGrad", "tf.TanhGrad", "tf.MatMul"} <= jaxpr_primitives(
    jaxpr
  )


@pytest.mark.parametrize("op_type", ["BlockLSTM", "BlockLSTMV2"])
def test_block_lstm_model(op_type):
  """A converted BlockLSTM layer: outputs, jax.grad (vs GradientTape for BlockLSTM; vs
  TF's BlockLSTMGradV2 kernel for V2, whose registered gradient uses V1's gate order)."""
  weights = {k: tf.Variable(v, name=k) for k, v in _weights().items()}
  attrs = dict(cell_clip=0.0, use_peephole=True)
  if op_type == "BlockLSTM":
    attrs["forget_bias"] = 1.0

  @tf.function
  def tf_fn(x):
    zeros = tf.zeros((tf.shape(x)[1], H))
    outs = getattr(tf.raw_ops, op_type)(
      seq_len_max=tf.cast(tf.shape(x)[0], tf.int64),
      x=x,
      cs_prev=zeros,
      h_prev=zeros,
      **{k: v.read_value() for k, v in weights.items()},
      **attrs,
    )
    return outs[6], outs[1]

  fn, params = tfprims.convert(tf_fn, tf.TensorSpec((T, None, N), tf.float32))
  x = _rand(T, B, N, seed=7)
  want_h, want_cs = (t.numpy() for t in tf_fn(x))
  got_h, got_cs = jax.jit(fn)(params, x)[0]
  np.testing.assert_allclose(got_h, want_h, **TOL)
  np.testing.assert_allclose(got_cs, want_cs, **TOL)

  ct_h, ct_cs = _rand(T, B, H, seed=8), _rand(T, B, H, seed=9)
  loss = lambda p, x: jnp.sum(fn(p, x)[0][0] * ct_h) + jnp.sum(fn(p, x)[0][1] * ct_cs)
  grads, gx = jax.grad(loss, argnums=(0, 1))(params, x)
  if op_type == "BlockLSTM":
    xt = tf.constant(x)
    variables = [fn.tf_variables[k] for k in params]
    with tf.GradientTape() as tape:
      tape.watch(xt)
      h, cs = tf_fn(xt)
      y = tf.reduce_sum(h * ct_h) + tf.reduce_sum(cs * ct_cs)
    *tf_grads, tf_gx = tape.gradient(y, variables + [xt])
    want = dict(zip(params, (g.numpy() for g in tf_grads)))
  else:
    w = {k: v.numpy() for k, v in weights.items()}
    zeros = np.zeros((B, H), np.float32)
    inputs = dict(seq_len_max=np.int64(T), x=x, cs_prev=zeros, h_prev=zeros, **w)
    fwd = tf.raw_ops.BlockLSTMV2(**inputs, **attrs)
    grad = tf.raw_ops.BlockLSTMGradV2(
      **inputs,
      **dict(zip("i cs f o ci co h".split(), fwd)),
      cs_grad=ct_cs,
      h_grad=ct_h,
      use_peephole=True,
    )
    tf_gx = grad[0]
    by_name = dict(zip(("w", "wci", "wcf", "wco", "b"), grad[3:]))
    name_of = {id(v): n for n, v in weights.items()}
    want = {k: by_name[name_of[id(fn.tf_variables[k])]].numpy() for k in params}
  for k in params:
    np.testing.assert_allclose(grads[k], want[k], err_msg=k, **TOL)
  np.testing.assert_allclose(gx, np.asarray(tf_gx), **TOL)

  # per-sequence vmap keeps tf.BlockLSTM (the weights are shared)
  jaxpr = jax.make_jaxpr(jax.vmap(lambda s: fn(params, s[:, None])[0][0], in_axes=1))(x)
  assert f"tf.{op_type}" in jaxpr_primitives(jaxpr)


def test_lstm_block_cell_derivative_is_tfs():
  """Only cs and h carry derivatives; the clip passes them straight through
  (LSTMBlockCellGrad ignores it)."""
  w = _weights()
  x, cs_prev, h_prev = _rand(B, N, seed=10), _rand(B, H, seed=11, scale=3), _rand(B, H)
  args = (x, cs_prev, h_prev, w["w"], w["wci"], w["wcf"], w["wco"], w["b"])
  attrs = dict(forget_bias=1.0, cell_clip=0.5, use_peephole=True)
  op = get_op("LSTMBlockCell")
  outs, pullback = jax.vjp(lambda *a: op(*a, **attrs), *args)
  cts = [_rand(*o.shape, seed=20 + k) for k, o in enumerate(outs)]
  ours = pullback(cts)
  tf_args = [tf.constant(a) for a in args]
  with tf.GradientTape() as tape:
    tape.watch(tf_args)
    y = tf.raw_ops.LSTMBlockCell(
      **dict(zip(("x", "cs_prev", "h_prev", "w", "wci", "wcf", "wco", "b"), tf_args)), **attrs
    )
    assert np.abs(y[1].numpy()).max() == pytest.approx(0.5)  # the clip is active
  want = tape.gradient(y, tf_args, output_gradients=[tf.constant(c) for c in cts])
  for a, b in zip(ours, want):
    np.testing.assert_allclose(a, b.numpy(), **TOL)


def test_block_lstm_past_seq_len_max():
  """Steps at or past seq_len_max: cs and h are zero as in TF (which leaves the other
  outputs uninitialised; ours are zero); seq_len_max beyond the time steps runs them all
  (TF's kernel aborts)."""
  w = _weights()
  x = _rand(T, B, N, seed=12)
  cs0, h0 = _rand(B, H, seed=13), _rand(B, H, seed=14)
  inputs = dict(x=x, cs_prev=cs0, h_prev=h0, **w)
  op = get_op("BlockLSTM")
  attrs = dict(forget_bias=1.0, cell_clip=3.0, use_peephole=False)
  want = tf.raw_ops.BlockLSTM(seq_len_max=np.int64(2), **inputs, **attrs)
  ours = op(np.int64(2), *inputs.values(), **attrs)
  for k in (1, 6):
    np.testing.assert_allclose(ours[k], want[k].numpy(), **TOL)
  for o in ours:
    assert not np.any(np.asarray(o)[2:])
  full = op(np.int64(T), *inputs.values(), **attrs)
  beyond = op(np.int64(T + 3), *inputs.values(), **attrs)
  for a, b in zip(full, beyond):
    np.testing.assert_array_equal(a, b)
