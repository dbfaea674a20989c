"""CombinedNonMaxSuppression: per-class greedy NMS over a batch, then the best
``max_total_size`` detections of each batch element (static output shapes:
``max_output_size_per_class`` and ``max_total_size`` are static inputs).

TF's CPU kernel (``BatchedNonMaxSuppressionOp``): for each batch element and class,
hard NMS (IoU > iou_threshold suppresses; boxes ``[:, c]``, or ``[:, 0]`` when
``q == 1``) of the boxes scoring above ``score_threshold`` keeps up to
``min(max_output_size_per_class, num_boxes)`` boxes; the kept (box, score, class)
entries of all classes are sorted by decreasing score and the first
``min(valid, max_total_size)`` are output (``pad_per_class``: the output has
``min(max_total_size, max_output_size_per_class * num_classes)`` rows), boxes clipped
to [0, 1] when ``clip_boxes``, the rest padded with zeros.

Ties: TF's per-class priority queue compares scores only and its final ``std::sort``
is not stable, so the order of equal scores is unspecified in TF. Here equal scores
keep the lower box index within a class, and class-major order across classes.

TF registers no gradient; here the selection is piecewise constant and the outputs
are gathers of the inputs (boxes clipped), which get that derivative. Batching
folds the vmapped axis into the op's batch axis (re-binding
``tf.CombinedNonMaxSuppression``) when the thresholds are not batched.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from tfprims import rules
from tfprims.core import register_op, tfops
from tfprims.ops.image._common import FAMILY
from tfprims.ops.image.nms import iou_matrix


def _per_class(boxes, scores, iou_threshold, score_threshold, size):
  """Hard NMS of one class: (selected indices [size], their number)."""
  n = scores.shape[0]
  cand = scores > score_threshold
  order = jnp.argsort(-jnp.where(cand, scores, -jnp.inf), stable=True)
  iou = iou_matrix(boxes)

  def step(t, state):
    chosen, sel, count = state
    i = order[t]
    suppressed = jnp.any(chosen & (iou[i] > iou_threshold))
    take = cand[i] & (count < size) & ~suppressed
    chosen = chosen.at[i].set(chosen[i] | take)
    sel = jnp.where(take, sel.at[jnp.minimum(count, size - 1)].set(i.astype(jnp.int32)), sel)
    return chosen, sel, count + take.astype(jnp.int32)

  state = (jnp.zeros((n,), bool), jnp.zeros((size,), jnp.int32), jnp.zeros((), jnp.int32))
  _, sel, count = lax.fori_loop(0, n, step, state)
  return sel, count


def _sizes(num_boxes, num_classes, per_class, total, pad_per_class):
  size = min(per_class, num_boxes)
  out = min(total, per_class * num_classes) if pad_per_class else total
  return size, out


def combined_nms(
  boxes,
  scores,
  iou_threshold,
  score_threshold,
  *,
  max_output_size_per_class,
  max_total_size,
  pad_per_class,
  clip_boxes,
):
  if max_output_size_per_class <= 0 or max_total_size <= 0:
    raise ValueError("max_size_per_class must be positive and max_total_size must be > 0")
  batch, n, q, _ = boxes.shape
  c = scores.shape[2]
  size, out = _sizes(n, c, max_output_size_per_class, max_total_size, pad_per_class)
  f32 = jnp.float32
  boxes, scores = boxes.astype(f32), scores.astype(f32)
  iou_threshold, score_threshold = iou_threshold.astype(f32), score_threshold.astype(f32)
  if size == 0:
    sel = jnp.zeros((batch, c, 0), jnp.int32)
    count = jnp.zeros((batch, c), jnp.int32)
  else:
    # [batch, class, num_boxes, 4] boxes of each class; the selection has no derivative
    per_class_boxes = jnp.moveaxis(
      jnp.broadcast_to(boxes, (batch, n, c, 4)) if q == 1 else boxes, 2, 1
    )
    nms = jax.vmap(jax.vmap(_per_class, (0, 0, None, None, None)), (0, 0, None, None, None))
    sel, count = nms(
      lax.stop_gradient(per_class_boxes),
      lax.stop_gradient(jnp.moveaxis(scores, 2, 1)),
      lax.stop_gradient(iou_threshold),
      lax.stop_gradient(score_threshold),
      size,
    )
  # The candidate vector: class-major slots, invalid ones score -inf (as TF's).
  valid = jnp.arange(size)[None, None, :] < count[:, :, None]
  b_ix = jnp.arange(batch)[:, None, None]
  c_ix = jnp.arange(c)[None, :, None]
  cand_scores = jnp.where(valid, scores[b_ix, sel, c_ix], -jnp.inf).reshape(batch, c * size)
  cand_boxes = boxes[b_ix, sel, c_ix if q > 1 else 0].reshape(batch, c * size, 4)
  cand_classes = jnp.broadcast_to(c_ix, (batch, c, size)).astype(f32).reshape(batch, c * size)
  order = jnp.argsort(-lax.stop_gradient(cand_scores), axis=1, stable=True)
  num_valid = jnp.sum(count, axis=1)
  detections = jnp.minimum(num_valid, out).astype(jnp.int32)
  width = max(out, c * size)
  order = jnp.concatenate([order, jnp.zeros((batch, width - c * size), order.dtype)], 1)[:, :out]
  keep = jnp.arange(out)[None, :] < detections[:, None]
  take = lambda x: (
    jnp.take_along_axis(x, order.reshape(order.shape + (1,) * (x.ndim - 2)), axis=1)
    if c * size
    else jnp.zeros((batch, out) + x.shape[2:], f32)
  )
  nmsed_boxes = take(cand_boxes)
  if clip_boxes:
    nmsed_boxes = jnp.clip(nmsed_boxes, 0.0, 1.0)
  nmsed_boxes = jnp.where(keep[:, :, None], nmsed_boxes, 0.0)
  nmsed_scores = jnp.where(keep, take(cand_scores), 0.0)
  nmsed_classes = jnp.where(keep, take(cand_classes), 0.0)
  return nmsed_boxes, nmsed_scores, nmsed_classes, detections


def _batching(args, dims, **params):
  """The vmapped axis folded into the op's batch axis: one tf.CombinedNonMaxSuppression
  over ``vmap size * batch`` elements (per-example thresholds: vmap of the impl)."""
  boxes, scores, iou_threshold, score_threshold = args
  if dims[2] is not None or dims[3] is not None:
    return rules.vmap_batching(combined_nms, True)(args, dims, **params)
  size = rules.batch_size(args, dims)
  boxes = rules.with_batch_axis(boxes, dims[0], size)
  scores = rules.with_batch_axis(scores, dims[1], size)
  fold = lambda x: rules.reshape(x, (size * rules.shape_of(x)[1],) + rules.shape_of(x)[2:])
  outs = tfops.CombinedNonMaxSuppression(
    fold(boxes), fold(scores), iou_threshold, score_threshold, **params
  )
  unfold = lambda x: rules.reshape(x, (size, rules.shape_of(x)[0] // size) + rules.shape_of(x)[1:])
  return [unfold(o) for o in outs], [0, 0, 0, 0]


def _calls(st):
  @st.composite
  def draw(d):
    batch, n = d(st.integers(1, 2)), d(st.integers(1, 5))
    c = d(st.integers(1, 3))
    q = d(st.sampled_from((1, c)))
    grid = (-0.5, 0.0, 0.25, 0.5, 0.75, 1.0, 1.5)
    boxes = np.asarray(
      [d(st.sampled_from(grid)) for _ in range(batch * n * q * 4)], np.float32
    ).reshape(batch, n, q, 4)
    # Distinct scores within each batch element: TF orders equal scores arbitrarily.
    pool = np.linspace(-0.2, 1.0, 25, dtype=np.float32)
    positions = st.lists(st.integers(0, 24), min_size=n * c, max_size=n * c, unique=True)
    scores = np.stack([pool[d(positions)].reshape(n, c) for _ in range(batch)])
    return dict(
      boxes=boxes,
      scores=scores,
      max_output_size_per_class=np.asarray(d(st.integers(1, 6)), np.int32),
      max_total_size=np.asarray(d(st.integers(1, 8)), np.int32),
      iou_threshold=np.float32(d(st.sampled_from((0.0, 0.3, 0.5, 1.0)))),
      score_threshold=np.float32(d(st.sampled_from((-1.0, 0.0, 0.3)))),
      pad_per_class=d(st.booleans()),
      clip_boxes=d(st.booleans()),
    )

  return draw()


CombinedNonMaxSuppression = register_op(
  "CombinedNonMaxSuppression",
  combined_nms,
  family=FAMILY,
  multiple_results=True,
  static=("max_output_size_per_class", "max_total_size"),
  attrs=("pad_per_class", "clip_boxes"),
  batching=_batching,
  check=lambda boxes, scores, iou_threshold, score_threshold, **p: (
    (iou_threshold < 0) | (iou_threshold > 1),
    "iou_threshold must be in [0, 1]",
  ),
  doc="Per-class greedy NMS over a batch, then the top max_total_size detections "
  "(boxes, scores, classes, number valid), zero-padded.",
  spec=lambda st: st.Spec(
    _calls(st),
    skip={"jvp": "TF registers no gradient", "vjp": "TF registers no gradient"},
    note="scores distinct within a batch element (TF orders ties arbitrarily)",
  ),
)
