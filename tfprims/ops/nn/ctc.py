"""CTC losses: CTCLoss (blank = the last class) and CTCLossV2 (blank = 0, TF's cuDNN op).

Both take time-major logits ``[max_time, batch, num_classes]``, the labels as a
SparseTensor's ``indices`` (``[n, 2]``: batch, position) and ``values``, and
``sequence_length``; they return the loss per batch entry and its gradient with
respect to the logits, as TF's kernels (``ctc_loss_calculator.h``) compute them:

* labels: each batch entry's label sequence is its values in array order (the
  position column is ignored, as TF's kernel does once it has validated the
  indices). CTCLoss drops the values from the first one ``>= num_classes - 1`` on
  (after collapsing repeats when ``preprocess_collapse_repeated``).
* the forward-backward recursions run in log space, in TF's order of
  log-sum-exps, with ``lax.scan`` over time; ``ctc_merge_repeated=False`` lets
  label states not repeat and skip between equal labels (TF's kernel);
* ``log(softmax)`` is computed as TF's kernel does (``log(exp(x - max) / sum)``);
* no valid path (loss ``inf``): the gradient is the softmax, as TF's;
  ``sequence_length == 0`` or (``ignore_longer_outputs_than_inputs``) labels longer
  than the sequence: loss and gradient 0;
* the gradient is 0 from ``sequence_length`` on.

What TF's CPU kernel raises on (invalid SparseTensor indices, empty label
sequences, negative labels, a label after a null one, sequence lengths out of
``[0, max_time]``, labels longer than the sequence) is the ops' ``check``; under
jit without ``runtime_checks`` such entries get a NaN loss and gradient rows
(sequence lengths are clipped; see docs/semantics/nn.md).

Derivatives are TF's registered gradient: the loss's tangent is
``Sum(Mul(PreventGradient(gradient), t))`` (so ``jax.grad`` gives
``ct * gradient`` with TF names and a second derivative raises, as TF's
``prevent_gradient`` does); the ``gradient`` output gets no derivative (TF's
gradient function ignores its cotangent). Batching folds the vmapped axis into the
batch dimension (label indices offset per example), so vmap and per-example
gradients run one TF-named CTCLoss.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax
from jax.interpreters import ad

from tfprims import rules
from tfprims.core import register_op, tfops
from tfprims.errors import import_tensorflow

FAMILY = "nn"
_ATTRS = ("preprocess_collapse_repeated", "ctc_merge_repeated", "ignore_longer_outputs_than_inputs")
_NO_SECOND = (
  "Currently there is no way to take the second  derivative of ctc_loss due "
  "to the fused implementation's interaction  with tf.gradients()"
)


# ---------------------------------------------------------------------------
# Labels: the SparseTensor's values as dense per-batch sequences


def _dense_rows(indices, values, batch):
  """Each batch entry's values in array order, ``[batch, n]`` (padded), and their
  counts; entries whose batch index is out of range are dropped."""
  n = values.shape[0]
  b = jnp.asarray(indices)[:, 0]
  ok = (b >= 0) & (b < batch)
  hot = (b[:, None] == jnp.arange(batch, dtype=b.dtype)) & ok[:, None]  # [n, batch]
  hot_i = hot.astype(jnp.int32)
  pos = jnp.sum((jnp.cumsum(hot_i, axis=0) - hot_i) * hot_i, axis=1)  # [n]
  rows = jnp.where(ok, b, batch).astype(jnp.int32)
  dense = jnp.zeros((batch, n), jnp.int32).at[rows, pos].set(values.astype(jnp.int32), mode="drop")
  return dense, jnp.sum(hot_i, axis=0)


def _labels(indices, values, batch, num_classes, *, collapse, null_ends):
  """The label sequences the kernel uses: ``(labels [batch, n], length [batch],
  raw_length [batch], invalid [batch])``; ``invalid`` marks the entries TF's kernel
  rejects for their values."""
  dense, raw_len = _dense_rows(indices, values, batch)
  n = dense.shape[1]
  k = jnp.arange(n, dtype=jnp.int32)
  inside = k[None, :] < raw_len[:, None]
  if not null_ends:  # CTCLossV2 (cuDNN): the values as they are, blank 0 excluded
    invalid = jnp.any(inside & ((dense <= 0) | (dense >= num_classes)), axis=1)
    return dense, raw_len, raw_len, invalid
  prev = jnp.concatenate([jnp.full((batch, 1), -1, jnp.int32), dense[:, :-1]], axis=1)
  kept = inside & ((k[None, :] == 0) | (not collapse) | (dense != prev))
  null = kept & (dense >= num_classes - 1)
  after_null = (jnp.cumsum(null.astype(jnp.int32), axis=1) - null) > 0
  take = kept & ~null & ~after_null
  invalid = jnp.any(kept & ~null & after_null, axis=1) | jnp.any(take & (dense < 0), axis=1)
  length = jnp.sum(take.astype(jnp.int32), axis=1)
  newpos = jnp.where(take, jnp.cumsum(take.astype(jnp.int32), axis=1) - 1, n)
  rows = jnp.broadcast_to(jnp.arange(batch, dtype=jnp.int32)[:, None], (batch, n))
  compact = jnp.zeros((batch, n), jnp.int32).at[rows, newpos].set(dense, mode="drop")
  return compact, length, raw_len, invalid


# ---------------------------------------------------------------------------
# The forward-backward algorithm


def _lse(a, b):
  return jnp.logaddexp(a, b)


def _shift(x, k, fill=-np.inf):
  """``x[..., s - k]`` along the last axis (``fill`` before the start)."""
  pad = jnp.full(x.shape[:-1] + (min(k, x.shape[-1]),), fill, x.dtype)
  return jnp.concatenate([pad, x[..., : x.shape[-1] - pad.shape[-1]]], -1)


def _unshift(x, k, fill=-np.inf):
  """``x[..., s + k]`` along the last axis (``fill`` past the end)."""
  pad = jnp.full(x.shape[:-1] + (min(k, x.shape[-1]),), fill, x.dtype)
  return jnp.concatenate([x[..., pad.shape[-1] :], pad], -1)


def _ctc(inputs, indices, values, seq_len, *, blank, collapse, merge, ignore_longer, null_ends):
  t_max, batch, num_classes = inputs.shape
  if t_max == 0:
    raise ValueError("CTCLoss: Max time or first dimension of input cannot be 0.")
  if batch == 0:
    raise ValueError("CTCLoss: batch_size must not be 0")
  if indices.shape[0] != values.shape[0]:
    raise ValueError(
      "CTCLoss: labels_indices and labels_values must contain the same number of rows"
    )
  if seq_len.shape != (batch,):
    raise ValueError("CTCLoss: len(sequence_length) != batch_size")
  dtype = inputs.dtype
  ninf = jnp.array(-np.inf, dtype)
  labels, length, raw_len, invalid = _labels(
    indices, values, batch, num_classes, collapse=collapse, null_ends=null_ends
  )
  # A path over max_time frames emits at most max_time labels: longer sequences have no
  # valid path, so the states of labels past max_time are never needed (the label
  # bound is the number of label values, often far more than one entry's length).
  n = min(labels.shape[1], t_max)
  labels, too_long = labels[:, :n], length > n
  length = jnp.minimum(length, n)
  n_states = 2 * n + 1
  # l': a blank before each label and at the end.
  s = jnp.arange(n_states, dtype=jnp.int32)
  lab = (
    labels[:, np.clip((np.arange(n_states) - 1) // 2, 0, max(n - 1, 0))]
    if n
    else jnp.zeros((batch, n_states), jnp.int32)
  )
  lprime = jnp.where((s % 2 == 0)[None, :], blank, lab)  # [batch, S]
  valid = s[None, :] < (2 * length + 1)[:, None]
  is_blank = (s % 2 == 0)[None, :]
  stay_ok = jnp.broadcast_to(is_blank | merge, (batch, n_states))
  prev2 = _shift(lprime, 2, -1)
  skip_ok = (s[None, :] >= 2) & ~is_blank & ~(merge & (lprime == prev2))

  # log(softmax) as TF's kernel computes it.
  shifted = jnp.exp(inputs - jnp.max(inputs, axis=2, keepdims=True))
  y = shifted / jnp.sum(shifted, axis=2, keepdims=True)
  logy = jnp.log(y)
  safe = jnp.clip(lprime, 0, num_classes - 1)
  lp = jnp.take_along_axis(logy, jnp.broadcast_to(safe[None], (t_max, batch, n_states)), axis=2)
  lp = jnp.where(valid[None], lp, ninf)  # [T, batch, S]

  alpha0 = jnp.where(s[None, :] < 2, lp[0], ninf)

  def fwd(alpha, lp_t):
    acc = jnp.where(stay_ok, alpha, ninf)
    acc = _lse(acc, _shift(alpha, 1))
    acc = _lse(acc, jnp.where(skip_ok, _shift(alpha, 2), ninf))
    new = jnp.where(valid, lp_t + acc, ninf)
    return new, new

  _, alphas = lax.scan(fwd, alpha0, lp[1:])
  alpha = jnp.concatenate([alpha0[None], alphas], axis=0)  # [T, batch, S]

  t_len = jnp.clip(seq_len, 0, t_max).astype(jnp.int32)
  last = (s[None, :] >= 2 * length[:, None] - 1) & valid
  skip_next = _unshift(skip_ok, 2, False)

  def bwd(beta, xs):
    t, lp_next = xs
    acc = jnp.where(stay_ok, beta + lp_next, ninf)
    acc = _lse(acc, _unshift(beta + lp_next, 1))
    acc = _lse(acc, jnp.where(skip_next, _unshift(beta + lp_next, 2), ninf))
    init = jnp.where(last, jnp.zeros((), dtype), ninf)
    new = jnp.where(
      (t == t_len - 1)[:, None], init, jnp.where((t < t_len - 1)[:, None] & valid, acc, ninf)
    )
    return new, new

  lp_next = jnp.concatenate([lp[1:], jnp.full((1, batch, n_states), ninf, dtype)], axis=0)
  _, beta = lax.scan(
    bwd,
    jnp.full((batch, n_states), ninf, dtype),
    (jnp.arange(t_max, dtype=jnp.int32), lp_next),
    reverse=True,
  )

  ab = alpha + beta
  log_p = jnp.where(too_long, ninf, _logsumexp(ab[0], axis=1))  # [batch]
  # Gradient: softmax - sum over the states of each class of alpha * beta / p.
  m = jnp.max(ab, axis=2, keepdims=True)
  m = jnp.where(jnp.isneginf(m), jnp.zeros((), dtype), m)
  hot = ((lprime[:, :, None] == jnp.arange(num_classes)) & valid[:, :, None]).astype(dtype)
  occupancy = jnp.einsum("tbs,bsc->tbc", jnp.exp(ab - m), hot, precision=lax.Precision.HIGHEST)
  neg = occupancy * jnp.exp(m - log_p[None, :, None])
  no_path = jnp.isneginf(log_p)[None, :, None]
  grad = jnp.where(no_path, y, y - neg)
  live = jnp.arange(t_max)[:, None] < t_len[None, :]  # [T, batch]
  skipped = t_len == 0
  if ignore_longer:
    skipped = skipped | (raw_len > t_len)
  loss = jnp.where(skipped, jnp.zeros((), dtype), -log_p)
  grad = jnp.where((live & ~skipped[None, :])[:, :, None], grad, jnp.zeros((), dtype))
  nan = jnp.array(np.nan, dtype)
  loss = jnp.where(invalid, nan, loss)
  grad = jnp.where((invalid[None, :] & live)[:, :, None], nan, grad)
  return loss, grad


def _logsumexp(x, axis):
  m = jnp.max(x, axis=axis, keepdims=True)
  m = jnp.where(jnp.isfinite(m), m, jnp.zeros((), x.dtype))
  return jnp.squeeze(m, axis) + jnp.log(jnp.sum(jnp.exp(x - m), axis=axis))


def _ctc_loss(
  inputs,
  labels_indices,
  labels_values,
  sequence_length,
  *,
  preprocess_collapse_repeated,
  ctc_merge_repeated,
  ignore_longer_outputs_than_inputs,
):
  """The CTC loss per batch entry and its gradient with respect to the logits (blank =
  the last class)."""
  return _ctc(
    inputs,
    labels_indices,
    labels_values,
    sequence_length,
    blank=inputs.shape[2] - 1,
    collapse=preprocess_collapse_repeated,
    merge=ctc_merge_repeated,
    ignore_longer=ignore_longer_outputs_than_inputs,
    null_ends=True,
  )


def _ctc_loss_v2(
  inputs,
  labels_indices,
  labels_values,
  sequence_length,
  *,
  preprocess_collapse_repeated,
  ctc_merge_repeated,
  ignore_longer_outputs_than_inputs,
):
  """The CTC loss with blank 0 (TF's cuDNN op: default attrs only)."""
  for name, value, default in (
    ("preprocess_collapse_repeated", preprocess_collapse_repeated, False),
    ("ctc_merge_repeated", ctc_merge_repeated, True),
    ("ignore_longer_outputs_than_inputs", ignore_longer_outputs_than_inputs, False),
  ):
    if value != default:
      raise ValueError(
        f"CTCLossV2: GPU CTCLossOp requires {name} to be "
        f"{str(default).lower()} (TF has no other kernel for CTCLossV2)"
      )
  return _ctc(
    inputs,
    labels_indices,
    labels_values,
    sequence_length,
    blank=0,
    collapse=False,
    merge=True,
    ignore_longer=False,
    null_ends=False,
  )


# ---------------------------------------------------------------------------
# What TF's kernels reject


def _invalid(indices, values, seq_len, shape, *, collapse, ignore_longer, null_ends):
  """Whether TF's kernel rejects the data (jnp, also under jit)."""
  t_max, batch, num_classes = shape
  b, t = indices[:, 0], indices[:, 1]
  bad = jnp.any((b < 0) | (b >= batch) | (t < 0))
  if indices.shape[0] > 1:
    later = (b[1:] > b[:-1]) | ((b[1:] == b[:-1]) & (t[1:] > t[:-1]))
    bad = bad | ~jnp.all(later)
  bad = bad | jnp.any((seq_len < 0) | (seq_len > t_max))
  _, _, raw_len, invalid = _labels(
    indices, values, batch, num_classes, collapse=collapse, null_ends=null_ends
  )
  bad = bad | jnp.any(raw_len == 0) | jnp.any(invalid)
  if not ignore_longer:
    bad = bad | jnp.any(raw_len > seq_len)
  return bad


def _message(indices, values, seq_len, shape, *, collapse, ignore_longer, null_ends):
  """TF's error message for known values (its kernel's order of checks)."""
  t_max, batch, num_classes = shape
  indices, values, seq_len = (np.asarray(a) for a in (indices, values, seq_len))
  max_len = int(indices[:, 1].max()) + 1 if len(indices) else 0
  for i, (b, t) in enumerate(indices.tolist()):
    if not (0 <= b < batch and 0 <= t < max_len):
      return (
        f"label SparseTensor is not valid: indices[{i}] = [{b},{t}] is out of "
        f"bounds: need 0 <= index < [{batch},{max_len}]"
      )
    if i and [b, t] == indices[i - 1].tolist():
      return f"label SparseTensor is not valid: indices[{i}] = [{b},{t}] is repeated"
    if i and [b, t] < indices[i - 1].tolist():
      return f"label SparseTensor is not valid: indices[{i}] = [{b},{t}] is out of order"
  for b, n in enumerate(seq_len.tolist()):
    if n > t_max:
      return f"sequence_length({b}) <= {t_max}"
  for b, n in enumerate(seq_len.tolist()):
    if n < 0:
      return f"seq_len({b}) < 0"
  for b in range(batch):
    label = values[indices[:, 0] == b].tolist()
    if not label:
      return f"Labels length is zero in batch {b}"
    if null_ends:
      seen, finished = [], False
      for i, v in enumerate(label):
        if i == 0 or not collapse or v != label[i - 1]:
          if v >= num_classes - 1:
            finished = True
          elif finished:
            return (
              "Saw a non-null label (index >= num_classes - 1) following a null "
              f"label, batch: {b} num_classes: {num_classes} labels: "
              f"{','.join(map(str, label))} labels seen so far: "
              f"{','.join(map(str, seen))}"
            )
          else:
            seen.append(v)
      if any(v < 0 for v in seen):
        return (
          f"All labels must be nonnegative integers, batch: {b} labels: {','.join(map(str, seen))}"
        )
    elif any(v <= 0 or v >= num_classes for v in label):
      return "cuDNN CTCLoss launch failure (labels must be in [1, num_classes))"
    if not ignore_longer and len(label) > seq_len[b]:
      return (
        f"Not enough time for target transition sequence (required: {len(label)}, "
        f"available: {seq_len[b]}){b}You can turn this error into a warning by "
        "using the flag ignore_longer_outputs_than_inputs"
      )
  return "invalid labels or sequence lengths"


def _check(null_ends):
  def check(
    inputs,
    indices,
    values,
    seq_len,
    *,
    preprocess_collapse_repeated,
    ctc_merge_repeated,
    ignore_longer_outputs_than_inputs,
  ):
    kw = dict(
      collapse=preprocess_collapse_repeated and null_ends,
      ignore_longer=ignore_longer_outputs_than_inputs and null_ends,
      null_ends=null_ends,
    )
    if len(inputs.shape) != 3 or indices.ndim != 2 or inputs.shape[1] == 0:
      return None  # the impl raises on shapes
    bad = _invalid(indices, values, seq_len, inputs.shape, **kw)
    if any(isinstance(a, jax.core.Tracer) for a in (indices, values, seq_len)):
      return bad, (
        "invalid labels or sequence lengths: TF's kernel raises "
        "InvalidArgumentError (see docs/semantics/nn.md, CTC losses)"
      )
    if not bool(bad):
      return False, ""
    return True, _message(indices, values, seq_len, inputs.shape, **kw)

  return check


# ---------------------------------------------------------------------------
# Rules


def _jvp(op):
  def rule(primals, tangents, **params):
    loss, grad = op(*primals, **params)
    t = tangents[0]
    if type(t) is ad.Zero:
      return [loss, grad], [rules.zero_tangent(loss), rules.zero_tangent(grad)]
    # TF: grad_inputs = grad_loss[None, :, None] * prevent_gradient(gradient).
    g = tfops.PreventGradient(grad, message=_NO_SECOND)
    # TF's gradient ignores the cotangent of `gradient`: its tangent is 0, but written
    # as ZerosLike(t) (linear in t, not a symbolic or constant zero, which JAX would
    # drop), so that differentiating this rule again, in forward or reverse mode,
    # reaches PreventGradient's JVP and raises, as TF does.
    return [loss, grad], [rules.reduce_sum(tfops.Mul(g, t), (0, 2)), tfops.ZerosLike(t)]

  return rule


def _batching(op):
  """The vmapped axis folded into the op's batch: logits ``[T, k * B, C]``, label
  indices offset by ``k * B`` per example (out-of-range ones kept out of range)."""

  def rule(args, dims, **params):
    x, idx, vals, lens = args
    dx, di, dv, dl = dims
    size = rules.batch_size(args, dims)
    t_max, batch, num_classes = rules.unbatched_shape(x, dx)
    x = rules.move_axes(rules.with_batch_axis(x, dx, size), [0], [1])
    x = rules.reshape(x, (t_max, size * batch, num_classes))
    lens = rules.reshape(rules.with_batch_axis(lens, dl, size), (size * batch,))
    idx = rules.with_batch_axis(idx, di, size)  # [size, n, 2]
    n = rules.shape_of(idx)[1]
    itype = rules.dtype_of(idx)
    offsets = np.zeros((size, 1, 2), itype)
    offsets[:, 0, 0] = np.arange(size) * batch
    lo = np.array([0, np.iinfo(itype).min], itype)
    hi = np.array([batch, np.iinfo(itype).max], itype)
    ok = tfops.All(
      tfops.LogicalAnd(tfops.GreaterEqual(idx, lo), tfops.Less(idx, hi)), axis=(2,), keep_dims=True
    )
    idx = tfops.SelectV2(ok, tfops.AddV2(idx, offsets), np.array(-1, itype))
    idx = rules.reshape(idx, (size * n, 2))
    vals = rules.reshape(rules.with_batch_axis(vals, dv, size), (size * n,))
    loss, grad = op(x, idx, vals, lens, **params)
    return [
      rules.reshape(loss, (size, batch)),
      rules.reshape(grad, (t_max, size, batch, num_classes)),
    ], [0, 1]

  return rule


CTCLoss = register_op(
  "CTCLoss",
  _ctc_loss,
  family=FAMILY,
  attrs=_ATTRS,
  multiple_results=True,
  jvp=rules.per_op(_jvp),
  batching=rules.per_op(_batching),
  check=_check(True),
  spec=rules.per_op(lambda op: lambda st: _ctc_spec(st, op.op_type)),
)

CTCLossV2 = register_op(
  "CTCLossV2",
  _ctc_loss_v2,
  family=FAMILY,
  attrs=_ATTRS,
  multiple_results=True,
  jvp=rules.per_op(_jvp),
  batching=rules.per_op(_batching),
  check=_check(False),
  spec=rules.per_op(lambda op: lambda st: _ctc_spec(st, op.op_type)),
)


# --- property-test strategies (hypothesis is imported lazily) ---------------------


def _ctc_calls(st, v2):
  @st.composite
  def calls(draw):
    dtype = "float32" if v2 else draw(st.sampled_from(("float32", "float64")))
    t_max, batch, num_classes = (
      draw(st.integers(1, 4)),
      draw(st.integers(1, 3)),
      draw(st.integers(2, 5)),
    )
    attrs = dict(
      preprocess_collapse_repeated=False,
      ctc_merge_repeated=True,
      ignore_longer_outputs_than_inputs=False,
    )
    if not v2:
      attrs = {k: draw(st.booleans()) for k in attrs}
    ignore = attrs["ignore_longer_outputs_than_inputs"]
    lo, hi = (1, num_classes - 1) if v2 else (0, num_classes - 2)
    seq_len, indices, values = [], [], []
    for b in range(batch):
      n = draw(st.integers(0 if ignore else 1, t_max))
      seq_len.append(n)
      size = draw(st.integers(1, max(n, 1) + (1 if ignore else 0)))
      label = [draw(st.integers(lo, hi)) for _ in range(size)]
      if not v2 and size > 1 and draw(st.integers(0, 3)) == 0:
        # trailing null labels end the sequence (TF drops them)
        cut = draw(st.integers(1, size - 1))
        label[cut:] = [draw(st.integers(num_classes - 1, num_classes + 1)) for _ in label[cut:]]
      times = (
        sorted(draw(st.lists(st.integers(0, 6), min_size=size, max_size=size, unique=True)))
        if draw(st.booleans())
        else range(size)
      )
      indices += [[b, t] for t in times]
      values += label
    x = st.draw_array(draw, np.dtype(dtype), (t_max, batch, num_classes), lo=-3.0, hi=3.0)
    return dict(
      inputs=x,
      labels_indices=np.array(indices, np.int64).reshape(-1, 2),
      labels_values=np.array(values, np.int32),
      sequence_length=np.array(seq_len, np.int32),
      **attrs,
    )

  return calls()


def _ctc_v2_oracle(inputs, labels_indices, labels_values, sequence_length, **attrs):
  """CTCLossV2 (cuDNN, no CPU kernel) as TF's CPU fallback computes it: CTCLoss with the
  blank class moved last and the labels shifted down (``ctc_ops._ctc_loss_op_standard``)."""
  tf = import_tensorflow()
  x = tf.concat([inputs[:, :, 1:], inputs[:, :, :1]], axis=2)
  loss, grad = tf.raw_ops.CTCLoss(
    inputs=x,
    labels_indices=labels_indices,
    labels_values=labels_values - 1,
    sequence_length=sequence_length,
    **attrs,
  )
  return loss, tf.concat([grad[:, :, -1:], grad[:, :, :-1]], axis=2)


def _ctc_spec(st, op_type):
  v2 = op_type == "CTCLossV2"
  return st.Spec(
    _ctc_calls(st, v2),
    oracle=_ctc_v2_oracle if v2 else None,
    diff_args=["inputs"],
    vmap_variation="scale",
    examples=0.5,
    # TF's log-sum-exps use expf/log1pf, float32 precision for float64 too.
    rtol={"float64": 1e-6},
    atol={"float64": 1e-6},
    grad_rtol={"float64": 1e-6},
    grad_atol={"float64": 1e-6},
    note=(
      "the oracle is CTCLoss on the classes rotated so that the blank is last (TF "
      "has no CPU kernel for CTCLossV2)"
      if v2
      else "float64 is compared at 1e-6: TF's kernel adds log-probabilities with "
      "float32 expf/log1pf"
    ),
  )
