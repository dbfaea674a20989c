"""Losses: SoftmaxCrossEntropyWithLogits, SparseSoftmaxCrossEntropyWithLogits, L2Loss.

Impls follow TF's CPU kernels (``xent_op.h``, ``sparse_xent_op.h``, ``l2loss_op.h``)
formula for formula: ``shifted = logits - max``, ``loss = sum(labels * (log(sum(exp))
- shifted))`` (so a -inf logit with a zero label gives NaN, as TF),
``backprop = exp(shifted) / sum - labels``; L2Loss squares and halves in the input
dtype and sums (float16/bfloat16 sums accumulate in float32).

Derivatives are TF's registered gradients (``nn_grad.py``), not the mathematical
ones where they differ:

* the loss's derivative with respect to the logits is the ``backprop`` output
  (``softmax - labels``, which is the true derivative only when each row of labels
  sums to 1), its derivative with respect to dense labels is ``-log_softmax(logits)``;
* ``backprop``'s derivative with respect to the logits is softmax's Jacobian, with
  respect to the labels it is zero (TF's gradient ignores that path);

so JVPs bind ``tf.Mul``/``tf.Sum``/``tf.Softmax``/``tf.LogSoftmax`` and gradients of any
order read (and agree) like TF's. L2Loss's tangent is ``Sum(Mul(t, x))`` (its gradient
is ``x * ct``). Batching folds the vmapped axis into the op's batch dimension (one
call of the op); L2Loss is batched as the ops its impl is made of
(``Square``, ``Mul``, ``Sum``), reducing every axis but the batch one.

Sparse labels outside ``[0, num_classes)`` make the row's loss and backprop NaN (TF's
GPU kernel and XLA do this; TF's CPU kernel raises): the op declares a ``check`` that
raises TF's error on known values and, with ``runtime_checks``, under jit
(docs/semantics/nn.md).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from jax.interpreters import ad

from tfprims import rules
from tfprims.core import register_op, tfops
from tfprims.errors import import_tensorflow

FAMILY = "nn"
_HALF = (np.dtype("float16"), np.dtype(jnp.bfloat16))


# ---------------------------------------------------------------------------
# SoftmaxCrossEntropyWithLogits


def _xent_shape(fshape, lshape) -> tuple:
  try:
    shape = tuple(jnp.broadcast_shapes(tuple(fshape), tuple(lshape)))  # symbolic dims too
  except ValueError:
    raise ValueError(
      f"SoftmaxCrossEntropyWithLogits: logits {tuple(fshape)} and labels "
      f"{tuple(lshape)} do not broadcast"
    ) from None
  if len(shape) != 2:
    raise ValueError(
      "SoftmaxCrossEntropyWithLogits: logits and labels must be either "
      f"2-dimensional, or broadcasted to be 2-dimensional (got {shape})"
    )
  return shape


def _xent(features, labels):
  """TF's kernel: the loss per row and ``softmax - labels`` (inputs broadcast to 2-D)."""
  shape = _xent_shape(features.shape, labels.shape)
  f = jnp.broadcast_to(features, shape)
  y = jnp.broadcast_to(labels, shape)
  if shape[1] == 0:
    return jnp.zeros(shape[:1], f.dtype), f
  shifted = f - jnp.max(f, axis=1, keepdims=True)
  e = jnp.exp(shifted)
  s = jnp.sum(e, axis=1, keepdims=True)
  loss = jnp.sum(y * (jnp.log(s) - shifted), axis=1)
  # TF's Eigen sum starts from +0.0, so an exact zero loss is +0.0 (XLA rewrites a
  # one-class sum as its term, which may be -0.0, and folds an explicit + 0.0 away)
  loss = jnp.where(loss == 0, jnp.zeros((), loss.dtype), loss)
  return loss, e / s - y


def _xent_jvp(primals, tangents):
  f, y = primals
  tf_, ty = tangents
  loss, backprop = tfops.SoftmaxCrossEntropyWithLogits(f, y)
  shape = rules.shape_of(backprop)
  # Softmax/LogSoftmax of the logits as the kernel sees them (broadcast to 2-D).
  fb = rules.broadcast_to(f, shape)
  t_loss = t_back = None
  if type(tf_) is not ad.Zero:
    # d loss = <backprop, t>; d backprop = softmax's Jacobian applied to t (TF's
    # SoftmaxCrossEntropyWithLogits gradient, grad_grad branch).
    tb = rules.broadcast_to(tf_, shape)
    sm = tfops.Softmax(fb)
    t_loss = rules.reduce_sum(tfops.Mul(backprop, tb), (1,))
    t_back = tfops.Mul(tfops.Sub(tb, rules.reduce_sum(tfops.Mul(tb, sm), (1,), keep_dims=True)), sm)
  if type(ty) is not ad.Zero:
    # d loss / d labels = -log_softmax(logits); TF gives backprop no labels gradient.
    t_y = rules.reduce_sum(
      tfops.Mul(tfops.Neg(tfops.LogSoftmax(fb)), rules.broadcast_to(ty, shape)), (1,)
    )
    t_loss = t_y if t_loss is None else tfops.AddV2(t_loss, t_y)
  return [loss, backprop], [
    rules.zero_tangent(loss) if t_loss is None else t_loss,
    rules.zero_tangent(backprop) if t_back is None else t_back,
  ]


def _to_rows(x, d, size, shape):
  """``x`` (batch axis ``d``, or unbatched) as ``(size * shape[0], shape[1])``: the
  vmapped axis first, broadcast to the per-example 2-D ``shape``, then folded in."""
  x = rules.with_batch_axis(x, d, size)
  x = rules.reshape(x, (size,) + (1,) * (3 - np.ndim(x)) + rules.shape_of(x)[1:])
  x = rules.broadcast_to(x, (size,) + tuple(shape))
  return rules.reshape(x, (size * shape[0], shape[1]))


def _xent_batch(args, dims):
  (f, y), (df, dy) = args, dims
  size = rules.batch_size(args, dims)
  shape = _xent_shape(rules.unbatched_shape(f, df), rules.unbatched_shape(y, dy))
  loss, backprop = tfops.SoftmaxCrossEntropyWithLogits(
    _to_rows(f, df, size, shape), _to_rows(y, dy, size, shape)
  )
  return [rules.reshape(loss, (size, shape[0])), rules.reshape(backprop, (size,) + shape)], [0, 0]


# ---------------------------------------------------------------------------
# SparseSoftmaxCrossEntropyWithLogits


def _sparse_shapes(fshape, lshape):
  if len(fshape) != 2:
    raise ValueError(
      f"SparseSoftmaxCrossEntropyWithLogits: logits must be 2-D, but got shape {list(fshape)}"
    )
  if len(lshape) != 1 or lshape[0] != fshape[0]:
    raise ValueError(
      "SparseSoftmaxCrossEntropyWithLogits: logits and labels must have the "
      f"same first dimension, got logits shape {list(fshape)} and labels "
      f"shape {list(lshape)}"
    )
  if fshape[1] == 0:
    raise ValueError(
      "SparseSoftmaxCrossEntropyWithLogits: Must have at least one class, "
      f"but got logits shape {list(fshape)}"
    )


def _sparse_xent(features, labels):
  """TF's kernel; rows whose label is outside [0, num_classes) are NaN (TF's GPU
  kernel and XLA; the CPU kernel raises: see the op's check)."""
  _sparse_shapes(features.shape, labels.shape)
  n = features.shape[1]
  shifted = features - jnp.max(features, axis=1, keepdims=True)
  e = jnp.exp(shifted)
  s = jnp.sum(e, axis=1, keepdims=True)
  hot = labels[:, None] == jnp.arange(n, dtype=labels.dtype)
  picked = jnp.sum(jnp.where(hot, shifted, jnp.zeros((), shifted.dtype)), axis=1)
  loss = jnp.log(s[:, 0]) - picked
  backprop = e / s - hot.astype(features.dtype)
  valid = (labels >= 0) & (labels < n)
  nan = jnp.array(np.nan, features.dtype)
  return jnp.where(valid, loss, nan), jnp.where(valid[:, None], backprop, nan)


def _sparse_check(features, labels):
  """TF's CPU kernel rejects labels outside [0, num_classes)."""
  n = features.shape[1]
  bad = (labels < 0) | (labels >= n)
  if isinstance(labels, jax.core.Tracer):
    return jnp.any(bad), (
      f"Received a label value outside the valid range of [0, {n}).  "
      "Label values must be in [0, num_classes)"
    )
  values = np.asarray(labels).ravel()
  if not np.asarray(bad).any():
    return False, ""
  # TF reports the smallest label when it is negative, else the largest.
  worst = int(values.min()) if values.min() < 0 else int(values.max())
  return True, (
    f"Received a label value of {worst} which is outside the valid range of "
    f"[0, {n}).  Label values: {' '.join(str(int(v)) for v in values)}"
  )


def _sparse_xent_jvp(primals, tangents):
  f, labels = primals
  tf_ = tangents[0]
  loss, backprop = tfops.SparseSoftmaxCrossEntropyWithLogits(f, labels)
  if type(tf_) is ad.Zero:
    return [loss, backprop], [rules.zero_tangent(loss), rules.zero_tangent(backprop)]
  sm = tfops.Softmax(f)
  t_back = tfops.Mul(
    tfops.Sub(tf_, rules.reduce_sum(tfops.Mul(tf_, sm), (-1,), keep_dims=True)), sm
  )
  return [loss, backprop], [rules.reduce_sum(tfops.Mul(backprop, tf_), (1,)), t_back]


def _sparse_xent_batch(args, dims):
  (f, labels), (df, dl) = args, dims
  size = rules.batch_size(args, dims)
  rows, classes = rules.unbatched_shape(f, df)
  f = rules.reshape(rules.with_batch_axis(f, df, size), (size * rows, classes))
  labels = rules.reshape(rules.with_batch_axis(labels, dl, size), (size * rows,))
  loss, backprop = tfops.SparseSoftmaxCrossEntropyWithLogits(f, labels)
  return [rules.reshape(loss, (size, rows)), rules.reshape(backprop, (size, rows, classes))], [0, 0]


# ---------------------------------------------------------------------------
# L2Loss


def _l2_loss(t):
  """sum(t**2 * 0.5), squared and halved in t's dtype (float16/bfloat16 summed in
  float32, as TF's Eigen reduction)."""
  half = (t * t) * jnp.asarray(0.5, t.dtype)
  if t.dtype in _HALF:
    return jnp.sum(half.astype(jnp.float32)).astype(t.dtype)
  return jnp.sum(half)


def _l2_loss_jvp(primals, tangents):
  (x,), (t,) = primals, tangents
  y = tfops.L2Loss(x)
  if type(t) is ad.Zero:
    return y, rules.zero_tangent(y)
  return y, rules.reduce_sum(tfops.Mul(x, t), range(np.ndim(x)))


def _l2_loss_batch(args, dims):
  # The impl's own ops, TF-named, reducing every axis but the batch axis.
  (x,), (d,) = args, dims
  half = tfops.Mul(tfops.Square(x), np.array(0.5, rules.dtype_of(x)))
  if rules.dtype_of(x) in _HALF:
    half = tfops.Cast(half, DstT=np.dtype("float32"), Truncate=False)
  out = rules.reduce_sum(half, [a for a in range(np.ndim(x)) if a != d])
  if rules.dtype_of(x) in _HALF:
    out = tfops.Cast(out, DstT=rules.dtype_of(x), Truncate=False)
  return out, 0


# ---------------------------------------------------------------------------
# Ops

SoftmaxCrossEntropyWithLogits = register_op(
  "SoftmaxCrossEntropyWithLogits",
  _xent,
  family=FAMILY,
  multiple_results=True,
  jvp=_xent_jvp,
  batching=_xent_batch,
  doc="Softmax cross entropy per row, and its backprop ``softmax(logits) - labels``.",
  spec=lambda st: st.Spec(
    _xent_calls(st),
    oracle=_xent_oracle,
    note="logits and labels broadcast (TF's kernel broadcasts them to 2-D); the oracle "
    "broadcasts explicitly so that TF's gradients have the inputs' shapes",
  ),
)

SparseSoftmaxCrossEntropyWithLogits = register_op(
  "SparseSoftmaxCrossEntropyWithLogits",
  _sparse_xent,
  family=FAMILY,
  multiple_results=True,
  jvp=_sparse_xent_jvp,
  batching=_sparse_xent_batch,
  check=_sparse_check,
  doc="Softmax cross entropy per row against integer labels, and its backprop.",
  spec=lambda st: st.Spec(_sparse_xent_calls(st)),
)

L2Loss = register_op(
  "L2Loss",
  _l2_loss,
  family=FAMILY,
  jvp=_l2_loss_jvp,
  batching=_l2_loss_batch,
  spec=lambda st: st.Spec(_l2_calls(st)),
)


# --- property-test strategies (hypothesis is imported lazily) ---------------------


def _logits(st, draw, dtype, shape):
  # Bounded logits, now and then a special value (NaN/±inf rows are NaN in TF too).
  if draw(st.integers(0, 5)) == 0:
    return st.draw_array(draw, dtype, shape)
  return st.draw_array(draw, dtype, shape, lo=-4.0, hi=4.0)


def _xent_calls(st):
  @st.composite
  def calls(draw):
    dtype = draw(st.dtypes(st.FLOATS))
    rows, classes = draw(st.integers(0, 4)), draw(st.integers(0, 4))
    full = (rows, classes)
    # Each input may have a 1 where the other has the full size, or be a [classes]
    # vector (TF broadcasts them to 2-D).
    fshape, lshape = list(full), list(full)
    mode = draw(st.integers(0, 3))
    if mode == 1:
      fshape[draw(st.integers(0, 1))] = 1
    elif mode == 2:
      lshape[draw(st.integers(0, 1))] = 1
    elif mode == 3:
      lshape = [classes] if draw(st.booleans()) else [1]
    return {
      "features": _logits(st, draw, dtype, tuple(fshape)),
      "labels": st.draw_array(draw, dtype, tuple(lshape), lo=-1.0, hi=2.0),
    }

  return calls()


def _xent_oracle(features, labels):
  tf = import_tensorflow()
  shape = tf.broadcast_static_shape(features.shape, labels.shape)
  return tf.raw_ops.SoftmaxCrossEntropyWithLogits(
    features=tf.broadcast_to(features, shape), labels=tf.broadcast_to(labels, shape)
  )


def _sparse_xent_calls(st):
  @st.composite
  def calls(draw):
    dtype = draw(st.dtypes(st.FLOATS))
    rows, classes = draw(st.integers(0, 4)), draw(st.integers(1, 4))
    labels = draw(
      st.arrays(st.dtypes(("int32", "int64")), (rows,), min_value=0, max_value=classes - 1)
    )
    return {"features": _logits(st, draw, dtype, (rows, classes)), "labels": labels}

  return calls()


def _l2_calls(st):
  @st.composite
  def calls(draw):
    dtype = draw(st.dtypes(st.FLOATS))
    shape = draw(st.shapes())
    lo, hi = (-8.0, 8.0) if dtype in _HALF else (-100.0, 100.0)
    special = draw(st.integers(0, 5)) == 0
    return {
      "t": st.draw_array(draw, dtype, shape, lo=None if special else lo, hi=None if special else hi)
    }

  return calls()
