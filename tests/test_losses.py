"""Losses (nn/losses.py, nn/ctc.py, nn/ctc_decode.py): real programs and policies.

Keras classifier train steps (sparse and dense categorical cross-entropy from
logits) and a CTC speech-model train step converted and compared with TF (loss and
new params after a step), tf.nn cross-entropies and l2_loss with grad and vmap vs TF,
TF's gradient conventions (second derivatives, labels), the out-of-range label and
CTC policies with runtime checks, TF-named grad/vmap jaxprs, and the decoders
against TF (ties included).
"""

import jax
import jax.numpy as jnp
import keras
import numpy as np
import pytest
import tensorflow as tf

import tfprims
from tfprims import errors
from tfprims.core import get_op, lookup
from tests.helpers import jaxpr_primitives

RNG = np.random.default_rng(0)
F32 = tf.float32


def needs_ops(*op_types):
  """The TF programs TF builds around these losses also use ops added on other
  branches (scatters, ConcatOffset...): skip until they are registered."""
  missing = [t for t in op_types if lookup(t) is None]
  return pytest.mark.skipif(bool(missing), reason=f"needs ops not registered here: {missing}")


_SPARSE_CTC_GRAD_OPS = ("ConcatOffset", "InvertPermutation")
_DENSE_CTC_OPS = ("Empty", "ScatterNd", "TensorScatterAdd", "TensorScatterUpdate")


def _close(a, b, rtol=1e-5, atol=1e-5):
  np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=rtol, atol=atol)


def _tree_close(ours, theirs, **kw):
  for a, b in zip(jax.tree_util.tree_leaves(ours), tf.nest.flatten(theirs)):
    _close(a, np.asarray(b), **kw)


@pytest.fixture
def runtime_checks():
  tfprims.update_config("runtime_checks", True)
  yield
  tfprims.update_config("runtime_checks", False)


# ---------------------------------------------------------------------------
# Keras classifier train steps


def _classifier(seed):
  keras.utils.set_random_seed(seed)
  model = keras.Sequential(
    [keras.Input((6,)), keras.layers.Dense(8, activation="relu"), keras.layers.Dense(4)]
  )
  return model


@pytest.mark.parametrize("loss_kind", ["sparse", "dense"])
def test_keras_classifier_train_step_matches_tf(loss_kind):
  model = _classifier(1)
  if loss_kind == "sparse":
    loss_fn = keras.losses.SparseCategoricalCrossentropy(from_logits=True)
    labels = RNG.integers(0, 4, size=(5,)).astype(np.int32)
    label_spec = tf.TensorSpec([5], tf.int32)
  else:
    loss_fn = keras.losses.CategoricalCrossentropy(from_logits=True)
    labels = RNG.dirichlet(np.ones(4), size=5).astype(np.float32)
    label_spec = tf.TensorSpec([5, 4], F32)
  x = RNG.normal(size=(5, 6)).astype(np.float32)
  lr = 0.1

  @tf.function
  def train_step(x, y):
    with tf.GradientTape() as tape:
      loss = loss_fn(y, model(x, training=True))
    grads = tape.gradient(loss, model.trainable_variables)
    for v, g in zip(model.trainable_variables, grads):
      v.assign_sub(lr * g)
    return loss

  fn, params = tfprims.convert(train_step, tf.TensorSpec([5, 6], F32), label_spec)
  expected_op = (
    "SparseSoftmaxCrossEntropyWithLogits"
    if loss_kind == "sparse"
    else "SoftmaxCrossEntropyWithLogits"
  )
  jaxpr = jax.make_jaxpr(lambda p, a, b: fn(p, a, b))(params, x, labels)
  assert f"tf.{expected_op}" in jaxpr_primitives(jaxpr)
  loss, new_params = jax.jit(lambda p, a, b: fn(p, a, b))(params, x, labels)
  tf_loss = train_step(tf.constant(x), tf.constant(labels))  # updates the Keras model
  _close(loss, tf_loss.numpy())
  by_path = {v.path: v for v in model.variables}
  assert set(new_params) == set(params)
  for name, value in new_params.items():
    _close(value, by_path[name].numpy())


# ---------------------------------------------------------------------------
# tf.nn cross-entropies and l2_loss: values, grad and vmap vs TF


def _xent_fns(kind):
  if kind == "sparse":
    tf_fn = tf.function(
      lambda lg, y: tf.nn.sparse_softmax_cross_entropy_with_logits(labels=y, logits=lg)
    )
    specs = (tf.TensorSpec([3, 5], F32), tf.TensorSpec([3], tf.int64))
  else:
    tf_fn = tf.function(lambda lg, y: tf.nn.softmax_cross_entropy_with_logits(labels=y, logits=lg))
    specs = (tf.TensorSpec([3, 5], F32), tf.TensorSpec([3, 5], F32))
  return tf_fn, tfprims.convert_functional(tf_fn, *specs)


def _xent_data(kind, batch=()):
  logits = RNG.normal(size=batch + (3, 5)).astype(np.float32)
  if kind == "sparse":
    return logits, RNG.integers(0, 5, size=batch + (3,)).astype(np.int64)
  return logits, RNG.dirichlet(np.ones(5), size=batch + (3,)).astype(np.float32)


@pytest.mark.parametrize("kind", ["sparse", "dense"])
def test_tf_nn_cross_entropy_values_grad_vmap(kind):
  tf_fn, fn = _xent_fns(kind)
  logits, labels = _xent_data(kind)
  _close(fn(logits, labels), tf_fn(logits, labels))
  ct = RNG.normal(size=(3,)).astype(np.float32)
  argnums = (0,) if kind == "sparse" else (0, 1)
  ours = jax.grad(lambda a, b: jnp.sum(fn(a, b) * ct), argnums=argnums)(logits, labels)
  lg, lb = tf.constant(logits), tf.constant(labels)
  with tf.GradientTape() as tape:
    tape.watch([lg, lb])
    out = tf_fn(lg, lb)
  theirs = tape.gradient(out, [lg, lb][: len(argnums)], output_gradients=tf.constant(ct))
  _tree_close(ours, theirs)
  # vmap over a batch of (logits, labels) vs per-example TF, and per-example gradients
  bl, by = _xent_data(kind, batch=(4,))
  out = jax.vmap(fn)(bl, by)
  for k in range(4):
    _close(out[k], tf_fn(bl[k], by[k]))
  per_ex = jax.vmap(jax.grad(lambda a, b: jnp.sum(fn(a, b))))(bl, by)
  for k in range(4):
    lg = tf.constant(bl[k])
    with tf.GradientTape() as tape:
      tape.watch(lg)
      s = tf.reduce_sum(tf_fn(lg, by[k]))
    _close(per_ex[k], tape.gradient(s, lg))


@pytest.mark.parametrize("kind", ["sparse", "dense"])
def test_cross_entropy_grad_and_vmap_jaxprs_are_tf_named(kind):
  tf_xent, _ = _xent_fns(kind)
  tf_fn = tf.function(lambda lg, y: tf.reduce_sum(tf_xent(lg, y)))
  logits, labels = _xent_data(kind)
  fn = tfprims.convert_functional(
    tf_fn, tf.TensorSpec(logits.shape, F32), tf.TensorSpec(labels.shape, tf.as_dtype(labels.dtype))
  )
  op = (
    "tf.SparseSoftmaxCrossEntropyWithLogits"
    if kind == "sparse"
    else "tf.SoftmaxCrossEntropyWithLogits"
  )
  names = jaxpr_primitives(jax.make_jaxpr(jax.grad(fn))(logits, labels))
  assert op in names and "tf.Mul" in names
  assert not {n for n in names if not n.startswith("tf.")} - {"pjit", "jit"}, names
  bl, by = _xent_data(kind, batch=(2,))
  vmap_jaxpr = jax.make_jaxpr(jax.vmap(jax.grad(fn)))(bl, by)
  names = jaxpr_primitives(vmap_jaxpr)
  eqns = [e for e in vmap_jaxpr.jaxpr.eqns if e.primitive.name == op]
  assert len(eqns) == 1 and eqns[0].invars[0].aval.shape == (6, 5)  # batch folded in
  assert not {n for n in names if not n.startswith("tf.")} - {"pjit", "jit"}, names


def test_l2_loss_values_grad_vmap():
  tf_fn = tf.function(lambda x: tf.nn.l2_loss(x))
  fn = tfprims.convert_functional(tf_fn, tf.TensorSpec([3, 4], F32))
  x = RNG.normal(size=(3, 4)).astype(np.float32)
  _close(fn(x), tf_fn(x))
  xt = tf.constant(x)
  with tf.GradientTape() as tape:
    tape.watch(xt)
    y = tf_fn(xt)
  _close(jax.grad(fn)(x), tape.gradient(y, xt))
  grad_names = jaxpr_primitives(jax.make_jaxpr(jax.grad(fn))(x))
  assert "tf.L2Loss" in grad_names and "tf.Mul" in grad_names
  bx = RNG.normal(size=(5, 3, 4)).astype(np.float32)
  out = jax.vmap(fn)(bx)
  _close(out, [tf_fn(b) for b in bx])
  vnames = jaxpr_primitives(jax.make_jaxpr(jax.vmap(fn))(bx))
  assert not {n for n in vnames if not n.startswith("tf.")} - {"pjit", "jit"}
  # half precision squares and halves in float16 (overflow like TF), sums in float32
  h = np.full((100,), 30, np.float16)
  assert np.asarray(get_op("L2Loss")(h)) == tf.raw_ops.L2Loss(t=h).numpy()


# ---------------------------------------------------------------------------
# TF's gradient conventions


def _tf_second_derivatives(op, logits, labels, w):
  lg, lb = tf.constant(logits), tf.constant(labels)
  with tf.GradientTape(persistent=True) as outer:
    outer.watch([lg, lb])
    with tf.GradientTape() as inner:
      inner.watch(lg)
      loss, _ = getattr(tf.raw_ops, op)(features=lg, labels=lb)
    g = inner.gradient(loss, lg)
    s = tf.reduce_sum(g * w)
  return [
    outer.gradient(s, t, unconnected_gradients="zero")
    for t in ([lg, lb] if labels.dtype.kind == "f" else [lg])
  ]


@pytest.mark.parametrize(
  "op", ["SoftmaxCrossEntropyWithLogits", "SparseSoftmaxCrossEntropyWithLogits"]
)
def test_second_derivatives_are_tfs(op):
  logits = RNG.normal(size=(3, 4)).astype(np.float32)
  labels = (
    RNG.integers(0, 4, size=(3,))
    if op.startswith("Sparse")
    else RNG.uniform(size=(3, 4)).astype(np.float32)
  )  # rows not normalised
  w = RNG.normal(size=(3, 4)).astype(np.float32)
  prim = get_op(op)

  def inner_grad(lg, lb):
    return jax.grad(lambda a: jnp.sum(prim(a, lb)[0]))(lg)

  def s(lg, lb):
    return jnp.sum(inner_grad(lg, lb) * w)

  if op.startswith("Sparse"):
    ours = [jax.grad(s)(logits, labels)]
  else:
    ours = list(jax.grad(s, argnums=(0, 1))(logits, labels))
  theirs = _tf_second_derivatives(op, logits, labels, w)
  for a, b in zip(ours, theirs):
    _close(a, b)
  # The first derivative is TF's backprop output (softmax - labels), which is not the
  # mathematical derivative when label rows do not sum to 1.
  _close(inner_grad(logits, labels), prim(logits, labels)[1])


def test_dense_labels_broadcast_like_tf_and_gradients_are_summed():
  logits = RNG.normal(size=(3, 4)).astype(np.float32)
  for lshape in [(1, 4), (4,)]:
    labels = RNG.uniform(size=lshape).astype(np.float32)
    ours = get_op("SoftmaxCrossEntropyWithLogits")(logits, labels)
    theirs = tf.raw_ops.SoftmaxCrossEntropyWithLogits(features=logits, labels=labels)
    _tree_close(ours, theirs)
    g = jax.grad(lambda y: jnp.sum(get_op("SoftmaxCrossEntropyWithLogits")(logits, y)[0]))(labels)
    # TF returns a [3, 4] gradient for [1, 4] labels; summed down it is ours.
    lb = tf.constant(labels)
    with tf.GradientTape() as tape:
      tape.watch(lb)
      loss, _ = tf.raw_ops.SoftmaxCrossEntropyWithLogits(features=logits, labels=lb)
    tg = tape.gradient(loss, lb).numpy()
    assert g.shape == lshape
    _close(g, tg.reshape((-1,) + tg.shape[-1:]).sum(0).reshape(lshape))


@pytest.mark.parametrize("dtype", [np.float16, np.float32, np.float64])
def test_dense_cross_entropy_zero_loss_is_plus_zero_like_tf(dtype):
  # TF's kernel sums labels * (log(sum(exp)) - shifted) from +0.0: a zero loss is +0.0,
  # also for one class (where XLA's one-term sum would keep -0.0 * 0) and all -0 terms.
  logits = np.array([[0.0], [3.0], [0.0], [1.0]], dtype)
  labels = np.array([[-0.0], [-0.0], [0.0], [-1.0]], dtype)
  rows = (logits, labels), (np.array([[5.0, 5.0]], dtype), np.array([[-0.0, -0.0]], dtype))
  op = get_op("SoftmaxCrossEntropyWithLogits")
  for f, y in rows:
    want = tf.raw_ops.SoftmaxCrossEntropyWithLogits(features=f, labels=y)[0].numpy()
    for got in (op(f, y)[0], jax.jit(op)(f, y)[0]):
      np.testing.assert_array_equal(np.asarray(got), want)
      assert (np.signbit(np.asarray(got)) == np.signbit(want)).all(), (f, y, got, want)


# ---------------------------------------------------------------------------
# Out-of-range sparse labels


def test_sparse_labels_out_of_range_policy_and_checks(runtime_checks):
  logits = RNG.normal(size=(3, 4)).astype(np.float32)
  labels = np.array([1, 4, -1], np.int32)
  op = get_op("SparseSoftmaxCrossEntropyWithLogits")
  loss, backprop = op(logits, labels)  # the primitive itself never raises
  assert np.isfinite(loss[0]) and np.isnan(loss[1:]).all()
  assert np.isnan(backprop[1:]).all() and np.isfinite(backprop[0]).all()
  # TF's XLA kernel gives the same NaN rows.
  xla = tf.function(
    lambda a, b: tf.raw_ops.SparseSoftmaxCrossEntropyWithLogits(features=a, labels=b),
    jit_compile=True,
  )(logits, labels)
  _tree_close((loss, backprop), xla)

  tf_fn = tf.function(
    lambda a, b: tf.nn.sparse_softmax_cross_entropy_with_logits(labels=b, logits=a)
  )
  fn = tfprims.convert_functional(tf_fn, tf.TensorSpec([3, 4], F32), tf.TensorSpec([3], tf.int32))
  for bad, worst in [(labels, -1), (np.array([1, 4, 0], np.int32), 4)]:
    message = f"Received a label value of {worst} which is outside the valid range"
    with pytest.raises(tf.errors.InvalidArgumentError, match=message):
      tf_fn(logits, bad)
    with pytest.raises(errors.RuntimeCheckError, match=message):
      fn(logits, bad)  # eager: raises like TF
  with pytest.raises(Exception, match="outside the valid range"):
    jax.block_until_ready(jax.jit(fn)(logits, labels))  # runtime_checks under jit
  tfprims.update_config("runtime_checks", False)
  out = jax.jit(lambda a, b: fn(a, b))(logits, labels)  # a new trace, without the check
  assert np.isnan(out[1:]).all()


# ---------------------------------------------------------------------------
# CTC


def _ctc_batch(batch=3, t_max=8, num_classes=6, seed=0, blank_last=True):
  rng = np.random.default_rng(seed)
  lo, hi = (0, num_classes - 2) if blank_last else (1, num_classes - 1)
  label_len = rng.integers(1, 4, size=batch).astype(np.int32)
  dense = np.zeros((batch, 3), np.int32)
  for b in range(batch):
    dense[b, : label_len[b]] = rng.integers(lo, hi + 1, size=label_len[b])
  logit_len = rng.integers(label_len * 2 + 1, t_max + 1).astype(np.int32)
  return dense, label_len, logit_len


def _sparse(dense, label_len):
  idx = np.array([[b, t] for b in range(dense.shape[0]) for t in range(label_len[b])], np.int64)
  return idx, dense[idx[:, 0], idx[:, 1]].astype(np.int32)


class _SpeechModel:
  """A small CTC acoustic model: Conv1D + GRU + Dense over features [B, T, 5]."""

  def __init__(self, num_classes, seed=3):
    keras.utils.set_random_seed(seed)
    self.model = keras.Sequential(
      [
        keras.Input((8, 5)),
        keras.layers.Conv1D(6, 3, padding="same", activation="relu"),
        keras.layers.Dense(7, activation="tanh"),
        keras.layers.Dense(num_classes),
      ]
    )


@needs_ops(*_SPARSE_CTC_GRAD_OPS)
@pytest.mark.parametrize("blank_index", [0, -1])
def test_ctc_speech_train_step_sparse_labels(blank_index):
  num_classes, lr = 6, 0.05
  dense, label_len, logit_len = _ctc_batch(blank_last=blank_index == -1)
  idx, vals = _sparse(dense, label_len)
  feats = RNG.normal(size=(3, 8, 5)).astype(np.float32)
  model = _SpeechModel(num_classes).model

  @tf.function
  def train_step(feats, idx, vals, logit_len):
    labels = tf.SparseTensor(idx, vals, dense_shape=[3, 3])
    with tf.GradientTape() as tape:
      logits = model(feats, training=True)
      loss = tf.reduce_mean(
        tf.nn.ctc_loss(
          labels, logits, None, logit_len, logits_time_major=False, blank_index=blank_index
        )
      )
    grads = tape.gradient(loss, model.trainable_variables)
    for v, g in zip(model.trainable_variables, grads):
      v.assign_sub(lr * g)
    return loss

  specs = (
    tf.TensorSpec([3, 8, 5], F32),
    tf.TensorSpec([len(idx), 2], tf.int64),
    tf.TensorSpec([len(idx)], tf.int32),
    tf.TensorSpec([3], tf.int32),
  )
  fn, params = tfprims.convert(train_step, *specs)
  args = (feats, idx, vals, logit_len)
  jaxpr = jax.make_jaxpr(lambda p, *a: fn(p, *a))(params, *args)
  assert "tf.CTCLoss" in jaxpr_primitives(jaxpr)
  loss, new_params = jax.jit(lambda p, *a: fn(p, *a))(params, *args)
  tf_loss = train_step(*[tf.constant(a) for a in args])
  _close(loss, tf_loss.numpy())
  by_path = {v.path: v for v in model.variables}
  for name, value in new_params.items():
    _close(value, by_path[name].numpy())


@needs_ops(*_SPARSE_CTC_GRAD_OPS)
@pytest.mark.parametrize("blank_index", [0, -1])
def test_tf_nn_ctc_loss_sparse_values_and_grad(blank_index):
  dense, label_len, logit_len = _ctc_batch(blank_last=blank_index == -1, seed=4)
  idx, vals = _sparse(dense, label_len)

  def tf_fn(logits, idx, vals, logit_len):
    labels = tf.SparseTensor(idx, vals, dense_shape=[3, 3])
    return tf.nn.ctc_loss(
      labels, logits, None, logit_len, logits_time_major=True, blank_index=blank_index
    )

  tf_fn = tf.function(tf_fn)
  specs = (
    tf.TensorSpec([8, 3, 6], F32),
    tf.TensorSpec([len(idx), 2], tf.int64),
    tf.TensorSpec([len(idx)], tf.int32),
    tf.TensorSpec([3], tf.int32),
  )
  fn = tfprims.convert_functional(tf_fn, *specs)
  logits = RNG.normal(size=(8, 3, 6)).astype(np.float32)
  _close(fn(logits, idx, vals, logit_len), tf_fn(logits, idx, vals, logit_len))
  ct = RNG.normal(size=(3,)).astype(np.float32)
  g = jax.grad(lambda x: jnp.sum(fn(x, idx, vals, logit_len) * ct))(logits)
  x = tf.constant(logits)
  with tf.GradientTape() as tape:
    tape.watch(x)
    out = tf_fn(x, idx, vals, logit_len)
  _close(g, tape.gradient(out, x, output_gradients=tf.constant(ct)))


def test_direct_calls_of_library_functions_return_each_output():
  """ctc_loss_dense's loops (functional_ops.While with Defun bodies) call the body
  through a wrapper FunctionDef that reads the callee's outputs by name
  (``callee:ret_name:0``): each name is its own output (they all used to be output 0)."""
  from tensorflow.python.framework import function

  @function.Defun(F32, F32)
  def inner(a, b):
    return a + b, a * b

  @function.Defun(F32, F32)
  def outer(a, b):
    s, p = inner(a, b)
    return p - s

  f = tf.function(lambda x, y: outer(x, y))
  x, y = np.float32([1, 2]), np.float32([3, 4])
  fn = tfprims.convert_functional(f, tf.TensorSpec([2], F32), tf.TensorSpec([2], F32))
  _close(fn(x, y), f(x, y))


@needs_ops(*_DENSE_CTC_OPS)
@pytest.mark.parametrize("blank_index", [0, -1])
def test_tf_nn_ctc_loss_dense_labels(blank_index):
  """Dense labels run TF's own forward-backward (While loops, scatters), not CTCLoss;
  the converted program agrees with TF, gradients included (x64 on here; x64 off:
  test_tf_nn_ctc_loss_dense_labels_x64_off)."""
  dense, label_len, logit_len = _ctc_batch(blank_last=blank_index == -1, seed=5)
  tf_fn = tf.function(
    lambda lg, y, yl, ll: tf.nn.ctc_loss(
      y, lg, yl, ll, logits_time_major=False, blank_index=blank_index
    )
  )
  specs = (
    tf.TensorSpec([3, 8, 6], F32),
    tf.TensorSpec([3, 3], tf.int32),
    tf.TensorSpec([3], tf.int32),
    tf.TensorSpec([3], tf.int32),
  )
  fn = tfprims.convert_functional(tf_fn, *specs)
  logits = RNG.normal(size=(3, 8, 6)).astype(np.float32)
  args = (dense, label_len, logit_len)
  x = tf.constant(logits)
  with tf.GradientTape() as tape:
    tape.watch(x)
    s = tf.reduce_sum(tf_fn(x, *args))
  with jax.enable_x64(True):
    _close(fn(logits, *args), tf_fn(logits, *args), rtol=1e-4)
    g = jax.grad(lambda x: jnp.sum(fn(x, *args)))(logits)
    _close(g, tape.gradient(s, x), rtol=1e-4)
    # the dense and sparse formulations agree (CTCLoss with the blank moved last)
    idx, vals = _sparse(dense, label_len)
    sparse = get_op("CTCLossV2" if blank_index == 0 else "CTCLoss")
    loss, _ = sparse(
      np.transpose(logits, (1, 0, 2)),
      idx,
      vals,
      logit_len,
      preprocess_collapse_repeated=False,
      ctc_merge_repeated=True,
      ignore_longer_outputs_than_inputs=False,
    )
    _close(fn(logits, *args), loss, rtol=1e-4)


@needs_ops(*_DENSE_CTC_OPS)
def test_keras_ops_ctc_loss_matches_tf():
  dense, label_len, logit_len = _ctc_batch(seed=6, blank_last=False)
  tf_fn = tf.function(lambda y, lg, yl, ll: keras.ops.ctc_loss(y, lg, yl, ll))
  specs = (
    tf.TensorSpec([3, 3], tf.int32),
    tf.TensorSpec([3, 8, 6], F32),
    tf.TensorSpec([3], tf.int32),
    tf.TensorSpec([3], tf.int32),
  )
  fn = tfprims.convert_functional(tf_fn, *specs)
  logits = RNG.normal(size=(3, 8, 6)).astype(np.float32)
  args = (dense, logits, label_len, logit_len)
  with jax.enable_x64(True):  # see test_tf_nn_ctc_loss_dense_labels
    _close(fn(*args), tf_fn(*args), rtol=1e-4)
  _close(fn(*args), tf_fn(*args), rtol=1e-4)  # x64 off too


_DENSE_LABELS = np.array([[1, 2, 3, 2, 0], [4, 5, 1, 0, 0]], np.int32)
_DENSE_CASES = [  # labels, label lengths, logit lengths
  (_DENSE_LABELS, [4, 3], [20, 17]),
  (_DENSE_LABELS, [0, 5], [20, 17]),  # an empty label, a full-length one
  (np.array([[1, 2, 3, 4, 5], [4, 5, 1, 2, 3]], np.int32), [5, 5], [20, 17]),
  (_DENSE_LABELS, [4, 3], [3, 2]),  # too few frames: TF gives ~710
  (np.array([[1, 1, 1, 1, 0], [4, 5, 1, 0, 0]], np.int32), [4, 3], [6, 3]),
]


@needs_ops(*_DENSE_CTC_OPS)
@pytest.mark.filterwarnings("ignore::tfprims.PrecisionWarning")
def test_tf_nn_ctc_loss_dense_labels_x64_off():
  """With x64 off, ctc_loss_dense's "log 0", ``log(cast(0, float64) + 1e-307)`` (-706.9
  cast to float32), used to be computed in float32: 1e-307 is 0 there, log 0 = -inf and
  ``(1 - mask) * log_0`` gave NaN losses and gradients. Known float64 values now fold in
  float64 (dtypes.is_wide). One conversion and one compilation serve every case (the
  lengths are data)."""
  logits = np.random.default_rng(8).uniform(-2, 2, (20, 2, 6)).astype(np.float32)
  tf_fn = tf.function(
    lambda lg, y, yl, ll: tf.nn.ctc_loss(y, lg, yl, ll, logits_time_major=True, blank_index=0)
  )
  specs = (
    tf.TensorSpec([20, 2, 6], F32),
    tf.TensorSpec([2, 5], tf.int32),
    tf.TensorSpec([2], tf.int32),
    tf.TensorSpec([2], tf.int32),
  )
  with jax.enable_x64(False):
    fn = tfprims.convert_functional(tf_fn, *specs)
    value = jax.jit(fn)
    grad = jax.jit(jax.grad(lambda z, *a: jnp.sum(fn(z, *a))))
    for i, (labels, label_len, logit_len) in enumerate(_DENSE_CASES):
      args = (labels, np.array(label_len, np.int32), np.array(logit_len, np.int32))
      x = tf.constant(logits)
      with tf.GradientTape() as tape:
        tape.watch(x)
        expected = tf_fn(x, *args)
      expected_grad = tape.gradient(expected, x)
      assert np.isfinite(expected).all()
      _close(value(logits, *args), expected, rtol=1e-5)
      _close(grad(logits, *args), expected_grad, rtol=1e-4)
      if i == 0:  # eager (op by op)
        _close(fn(logits, *args), expected, rtol=1e-5)


def test_known_float64_values_fold_in_float64_with_x64_off():
  """Constants and what folds from them keep TF's float64 precision with x64 off (a
  value narrowed to float32 only where it enters the program); runtime float64 values
  are float32 (docs/semantics.md)."""
  f = tf.function(
    lambda x: (
      tf.cast(tf.math.log(tf.cast(0, tf.float64) + 1e-307), F32),
      x + tf.cast(tf.constant(1e-300, tf.float64) * 1e300, F32),
      tf.constant(1e-307, tf.float64) * 1e300,
    )
  )
  with jax.enable_x64(False), pytest.warns(tfprims.PrecisionWarning):
    fn = tfprims.convert_functional(f, tf.TensorSpec([], F32))
  with jax.enable_x64(False):
    for out in (fn(np.float32(1)), jax.jit(fn)(np.float32(1))):
      expected = f(np.float32(1))
      assert [o.dtype for o in out] == [jnp.float32] * 3
      _close(out[0], expected[0], rtol=1e-7)  # -706.8936, not -inf
      _close(out[1], expected[1], rtol=1e-7)  # 2, not 1
      _close(out[2], expected[2], rtol=1e-7)  # 1e-7, not 0
    g = tf.function(lambda: tf.constant(1e300, tf.float64) * 10.0)
    with pytest.raises(tfprims.Int64OverflowError, match="would become inf"):
      tfprims.convert_functional(g)()  # narrowed where it leaves: refused


def test_ctc_grad_and_vmap_jaxprs_are_tf_named_and_second_derivative_raises():
  dense, label_len, logit_len = _ctc_batch(seed=7)
  idx, vals = _sparse(dense, label_len)
  op = get_op("CTCLoss")
  attrs = dict(
    preprocess_collapse_repeated=False,
    ctc_merge_repeated=True,
    ignore_longer_outputs_than_inputs=False,
  )
  logits = RNG.normal(size=(8, 3, 6)).astype(np.float32)
  total = get_op("Sum")
  loss = lambda x: total(op(x, idx, vals, logit_len, **attrs)[0], axis=(0,), keep_dims=False)
  names = jaxpr_primitives(jax.make_jaxpr(jax.grad(loss))(logits))
  assert {"tf.CTCLoss", "tf.PreventGradient", "tf.Mul"} <= names
  assert not {n for n in names if not n.startswith("tf.")} - {"pjit", "jit"}, names
  # TF forbids second derivatives (prevent_gradient); so do we, forward or reverse
  x = tf.constant(logits)
  with pytest.raises(LookupError, match="second"):
    with tf.GradientTape() as outer:
      outer.watch(x)
      with tf.GradientTape() as inner:
        inner.watch(x)
        tl, _ = tf.raw_ops.CTCLoss(
          inputs=x, labels_indices=idx, labels_values=vals, sequence_length=logit_len, **attrs
        )
      g = inner.gradient(tl, x)
    outer.gradient(g, x)
  with pytest.raises(errors.PreventGradientError, match="second"):
    jax.hessian(loss)(logits)
  with pytest.raises(errors.PreventGradientError, match="second"):
    jax.grad(lambda x: jnp.vdot(jax.grad(loss)(x), x))(logits)
  # vmap over examples (each with its own labels) folds them into one CTCLoss
  blog = RNG.normal(size=(2, 8, 3, 6)).astype(np.float32)
  bvals = np.stack([vals, (vals + 1) % 5]).astype(np.int32)
  f = lambda x, v: op(x, idx, v, logit_len, **attrs)
  jaxpr = jax.make_jaxpr(jax.vmap(f))(blog, bvals)
  eqns = [e for e in jaxpr.jaxpr.eqns if e.primitive.name == "tf.CTCLoss"]
  assert len(eqns) == 1 and eqns[0].invars[0].aval.shape == (8, 6, 6)
  out = jax.vmap(f)(blog, bvals)
  per_ex_grad = jax.vmap(jax.grad(lambda x, v: jnp.sum(f(x, v)[0])))(blog, bvals)
  for k in range(2):
    tl, tg = tf.raw_ops.CTCLoss(
      inputs=blog[k], labels_indices=idx, labels_values=bvals[k], sequence_length=logit_len, **attrs
    )
    _close(out[0][k], tl)
    _close(out[1][k], tg)
    _close(per_ex_grad[k], tg)


def test_ctc_invalid_data_raises_like_tf_eagerly_and_is_nan_under_jit(runtime_checks):
  logits = RNG.normal(size=(4, 2, 4)).astype(np.float32)
  idx = np.array([[0, 0], [0, 1], [1, 0]], np.int64)
  cases = [  # (values, sequence_length, TF's message)
    (np.array([1, 3, 2], np.int32), [2, 2], None),  # null at the end: fine
    (np.array([3, 1, 2], np.int32), [2, 2], "non-null label"),
    (np.array([1, -1, 2], np.int32), [2, 2], "nonnegative"),
    (np.array([1, 1, 2], np.int32), [1, 2], "Not enough time"),
    (np.array([1, 1, 2], np.int32), [5, 2], r"sequence_length\(0\) <= 4"),
  ]
  tf_fn = tf.function(
    lambda x, i, v, n: tf.raw_ops.CTCLoss(
      inputs=x, labels_indices=i, labels_values=v, sequence_length=n
    )
  )
  fn = tfprims.convert_functional(
    tf_fn,
    tf.TensorSpec([4, 2, 4], F32),
    tf.TensorSpec([3, 2], tf.int64),
    tf.TensorSpec([3], tf.int32),
    tf.TensorSpec([2], tf.int32),
  )
  for vals, n, message in cases:
    n = np.array(n, np.int32)
    if message is None:
      _tree_close(fn(logits, idx, vals, n), tf_fn(logits, idx, vals, n))
      continue
    with pytest.raises(tf.errors.InvalidArgumentError, match=message):
      tf_fn(logits, idx, vals, n)
    with pytest.raises(errors.RuntimeCheckError, match=message):
      fn(logits, idx, vals, n)
    with pytest.raises(Exception, match="invalid labels or sequence lengths"):
      jax.block_until_ready(jax.jit(fn)(logits, idx, vals, n))
  tfprims.update_config("runtime_checks", False)
  loss, grad = jax.jit(lambda *a: fn(*a))(
    logits, idx, np.array([3, 1, 2], np.int32), np.array([2, 2], np.int32)
  )
  assert np.isnan(loss[0]) and np.isfinite(loss[1])
  assert np.isnan(grad[:2, 0]).all() and (grad[2:, 0] == 0).all()
  # unsorted / out-of-range SparseTensor indices: TF rejects them too
  with pytest.raises(errors.RuntimeCheckError, match="out of order"):
    fn(logits, idx[[1, 0, 2]], np.array([1, 1, 2], np.int32), np.array([2, 2], np.int32))


def test_ctc_label_states_are_bounded_by_max_time():
  """Label values (12 here) bound the label length statically, but only max_time (4)
  labels can be emitted: longer entries have no path (skipped with
  ignore_longer_outputs_than_inputs), and the recursion has 2 * 4 + 1 states."""
  rng = np.random.default_rng(8)
  logits = rng.normal(size=(4, 3, 5)).astype(np.float32)
  lengths = [3, 6, 3]
  idx = np.array([[b, t] for b, n in enumerate(lengths) for t in range(n)], np.int64)
  vals = rng.integers(0, 4, size=len(idx)).astype(np.int32)
  seq = np.array([4, 4, 3], np.int32)
  attrs = dict(
    preprocess_collapse_repeated=False,
    ctc_merge_repeated=False,
    ignore_longer_outputs_than_inputs=True,
  )
  op = get_op("CTCLoss")
  _tree_close(
    op(logits, idx, vals, seq, **attrs),
    tf.raw_ops.CTCLoss(
      inputs=logits, labels_indices=idx, labels_values=vals, sequence_length=seq, **attrs
    ),
  )
  text = str(jax.make_jaxpr(lambda x: op.impl(x, idx, vals, seq, **attrs))(logits))
  assert "f32[3,9]" in text and "f32[3,25]" not in text


def test_ctc_loss_v2_refuses_attrs_its_only_kernel_refuses():
  op = get_op("CTCLossV2")
  with pytest.raises(ValueError, match="preprocess_collapse_repeated"):
    op(
      np.zeros((2, 1, 3), np.float32),
      np.array([[0, 0]], np.int64),
      np.array([1], np.int32),
      np.array([2], np.int32),
      preprocess_collapse_repeated=True,
      ctc_merge_repeated=True,
      ignore_longer_outputs_than_inputs=False,
    )


# ---------------------------------------------------------------------------
# Decoders: data-dependent shapes, computed with numpy on known values


def _decode_fn(op, x, seq_len, **attrs):
  @tf.function
  def f():
    return getattr(tf.raw_ops, op)(
      inputs=tf.constant(x), sequence_length=tf.constant(seq_len), **attrs
    )

  return f


def _decode_pair(op, x, seq_len, **attrs):
  f = _decode_fn(op, x, seq_len, **attrs)
  return tfprims.convert_functional(f)(), f()


@pytest.mark.parametrize("ties", [False, True])
def test_decoders_match_tf(ties):
  rng = np.random.default_rng(11)
  for trial in range(40):
    t_max, batch, num_classes = rng.integers(1, 7), rng.integers(1, 4), rng.integers(2, 7)
    x = (
      rng.integers(-1, 2, size=(t_max, batch, num_classes))
      if ties
      else rng.normal(size=(t_max, batch, num_classes))
    )
    x = x.astype(np.float64 if trial % 5 == 0 else np.float32)
    seq_len = rng.integers(1, t_max + 1, size=batch).astype(np.int32)
    merge = bool(trial % 2)
    ours, theirs = _decode_pair(
      "CTCGreedyDecoder",
      x,
      seq_len,
      merge_repeated=merge,
      blank_index=int(rng.integers(-num_classes, num_classes)),
    )
    _tree_close(ours, theirs, rtol=1e-6, atol=1e-6)
    width = int(rng.integers(1, 20))
    ours, theirs = _decode_pair(
      "CTCBeamSearchDecoder", x, seq_len, beam_width=width, top_paths=1, merge_repeated=merge
    )
    for a, b in zip(jax.tree_util.tree_leaves(ours), tf.nest.flatten(theirs)):
      assert np.asarray(a).shape == np.asarray(b).shape
      _close(a, b, rtol=1e-6, atol=1e-6)


def test_beam_search_top_paths_and_wide_beams_match_tf():
  rng = np.random.default_rng(12)
  x = rng.integers(-2, 3, size=(9, 2, 12)).astype(np.float32)  # many ties
  ours, theirs = _decode_pair(
    "CTCBeamSearchDecoder",
    x,
    np.array([9, 6], np.int32),
    beam_width=40,
    top_paths=5,
    merge_repeated=True,
  )
  for a, b in zip(jax.tree_util.tree_leaves(ours), tf.nest.flatten(theirs)):
    assert np.asarray(a).shape == np.asarray(b).shape
    _close(a, b, rtol=1e-6, atol=1e-6)


def test_decoders_on_traced_inputs_are_refused_under_jit():
  assert lookup("CTCGreedyDecoder").dynamic_shape
  assert lookup("CTCBeamSearchDecoder").dynamic_shape
  f = tf.function(lambda x, n: keras.ops.ctc_decode(x, n)[0])
  fn = tfprims.convert_functional(f, tf.TensorSpec([2, 5, 4], F32), tf.TensorSpec([2], tf.int32))
  with pytest.raises(errors.DynamicShapeError, match="CTCGreedyDecoder"):
    jax.jit(fn)(np.zeros((2, 5, 4), np.float32), np.int32([5, 3]))


def test_beam_search_errors_like_tf():
  f = _decode_fn(
    "CTCBeamSearchDecoder",
    np.zeros((1, 1, 3), np.float32),
    np.array([0], np.int32),
    beam_width=3,
    top_paths=2,
  )
  with pytest.raises(tf.errors.InvalidArgumentError, match="Less leaves"):
    f()
  with pytest.raises(errors.RuntimeCheckError, match="Less leaves"):
    tfprims.convert_functional(f)()
