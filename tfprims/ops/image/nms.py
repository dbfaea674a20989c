"""Greedy non-maximum suppression: NonMaxSuppression, NonMaxSuppressionV2,
NonMaxSuppressionV3, NonMaxSuppressionWithOverlaps (data-dependent output size) and
NonMaxSuppressionV4/V5 (static with ``pad_to_max_output_size``, else data-dependent).

TF's CPU kernel (``DoNonMaxSuppressionOp``): candidates are the boxes scoring above
``score_threshold``, popped from a priority queue by score (ties: lower index first).
A popped candidate is compared with the boxes selected since it was last compared,
newest first; its score is multiplied by ``exp(-0.5 / sigma * iou**2)`` (soft-NMS,
V5 with ``soft_nms_sigma > 0``) or it is dropped when ``iou > iou_threshold`` (hard
NMS). It is selected if its score did not change, re-queued if it decayed but stays
above the threshold, dropped otherwise. IoU is computed in float32 from boxes
normalised to min/max corners, 0 when either box has no area, then cast to the boxes'
dtype.

* The data-dependent forms are computed with numpy (:func:`greedy_nms`, a port of the
  kernel's loop) when every input is known at trace time, and raise
  :class:`~tfprims.errors.DynamicShapeError` naming the node otherwise.
* ``tf.NonMaxSuppressionV4/V5[max_output_size=m pad_to_max_output_size=True]`` are
  primitives (static ``max_output_size``): a ``lax.while_loop`` over pops, outputs
  padded with zeros as TF.

TF registers no gradient for these ops: indices are piecewise constant and V5's
selected scores get a zero derivative here. Batching is ``vmap`` of the impl (TF's NMS
ops take one set of boxes, so there is no TF-named batched form).
"""

from __future__ import annotations

import heapq

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from tfprims import core, errors, interpreter, rules
from tfprims.core import register_op, structural
from tfprims.ops.image._common import FAMILY, stored

_WHY = (
  "the number of selected boxes depends on the data (NonMaxSuppressionV4/V5 with "
  "pad_to_max_output_size=True have a static shape)"
)


# --- IoU -------------------------------------------------------------------------------


def _mini(xp, a, b):
  return xp.where(b < a, b, a)  # std::min (Eigen::numext::mini on CPU): NaN order as C++


def _maxi(xp, a, b):
  return xp.where(a < b, b, a)


def iou_matrix(boxes, xp=jnp):
  """TF's IOU(i, j) for every pair, float32 ([n, n]); ``xp`` is numpy or jax.numpy."""
  b = boxes.astype(np.float32)
  keep = (lambda x: x) if xp is np else stored  # no FMA contraction: TF rounds each product
  ymin, xmin = _mini(xp, b[:, 0], b[:, 2]), _mini(xp, b[:, 1], b[:, 3])
  ymax, xmax = _maxi(xp, b[:, 0], b[:, 2]), _maxi(xp, b[:, 1], b[:, 3])
  area = keep((ymax - ymin) * (xmax - xmin))
  iy0, ix0 = _maxi(xp, ymin[:, None], ymin[None]), _maxi(xp, xmin[:, None], xmin[None])
  iy1, ix1 = _mini(xp, ymax[:, None], ymax[None]), _mini(xp, xmax[:, None], xmax[None])
  zero = np.float32(0)
  inter = keep(_maxi(xp, iy1 - iy0, zero) * _maxi(xp, ix1 - ix0, zero))
  union = area[:, None] + area[None] - inter
  with np.errstate(all="ignore"):
    iou = inter / union
  empty = (area[:, None] <= 0) | (area[None] <= 0)
  return xp.where(empty, zero, iou).astype(np.float32)


# --- the kernel's loop in numpy (known inputs) ----------------------------------------


def greedy_nms(sim, scores, max_output_size, iou_threshold, score_threshold, sigma=0.0):
  """TF's DoNonMaxSuppressionOp: (selected indices int32, their scores) on numpy
  values; ``sim`` is the [n, n] similarity in the scores' dtype."""
  t = scores.dtype.type
  iou_threshold, score_threshold, sigma = t(iou_threshold), t(score_threshold), t(sigma)
  soft = sigma > 0
  scale = t(t(-0.5) / sigma) if soft else t(0)
  heap = [(-s, int(i), 0) for i, s in enumerate(scores) if s > score_threshold]
  heapq.heapify(heap)
  selected, selected_scores = [], []
  with np.errstate(all="ignore"):
    while len(selected) < max_output_size and heap:
      neg, i, begin = heapq.heappop(heap)
      original = score = t(-neg)
      hard = False
      for j in range(len(selected) - 1, begin - 1, -1):
        s = sim[i, selected[j]]
        weight = t(np.exp(t(t(scale * s) * s)))
        score = t(score * (weight if soft or s <= iou_threshold else t(0)))
        if not soft and s > iou_threshold:
          hard = True
          break
        if score <= score_threshold:
          break
      if hard:
        continue
      if score == original:
        selected.append(i)
        selected_scores.append(score)
      elif score > score_threshold:
        heapq.heappush(heap, (-score, i, len(selected)))
  return (np.asarray(selected, np.int32), np.asarray(selected_scores, scores.dtype).reshape(-1))


# --- the loop in JAX (padded primitives) ------------------------------------------------


def padded_nms(sim, scores, iou_threshold, score_threshold, sigma, size):
  """The same selection under jit: ``size`` (static) outputs, padded with zeros, and the
  number of valid ones. ``sim`` [n, n] and the thresholds in the scores' dtype."""
  n = scores.shape[0]
  dt = scores.dtype
  m = min(size, n)
  soft = sigma > 0
  scale = jnp.where(
    soft, jnp.asarray(-0.5, dt) / jnp.where(soft, sigma, 1).astype(dt), jnp.zeros((), dt)
  )
  zero = jnp.zeros((), dt)

  def pop(state):
    s, alive, begin, sel, sel_s, count = state
    top = jnp.max(jnp.where(alive, s, -jnp.inf))
    i = jnp.argmax(alive & (s == top))
    original, b = s[i], begin[i]

    def compare(k, carry):
      score, done, hard = carry
      j = count - 1 - k
      active = (j >= b) & ~done
      sij = sim[i, sel[jnp.maximum(j, 0)]]
      weight = jnp.exp(scale * sij * sij)
      weight = jnp.where(soft | (sij <= iou_threshold), weight, zero)
      new = jnp.where(active, score * weight, score)
      is_hard = active & ~soft & (sij > iou_threshold)
      done = done | is_hard | (active & (new <= score_threshold))
      return new, done, hard | is_hard

    score, _, hard = lax.fori_loop(
      0, m, compare, (original, jnp.asarray(False), jnp.asarray(False))
    )
    take = ~hard & (score == original)
    requeue = ~hard & ~take & (score > score_threshold)
    sel = jnp.where(take, sel.at[count].set(i.astype(jnp.int32)), sel)
    sel_s = jnp.where(take, sel_s.at[count].set(score), sel_s)
    s = s.at[i].set(jnp.where(requeue, score, original))
    alive = alive.at[i].set(requeue)
    begin = begin.at[i].set(count)
    return s, alive, begin, sel, sel_s, count + take.astype(jnp.int32)

  def more(state):
    return (state[5] < m) & jnp.any(state[1])

  state = (
    scores,
    scores > score_threshold,
    jnp.zeros((n,), jnp.int32),
    jnp.zeros((max(m, 1),), jnp.int32),
    jnp.zeros((max(m, 1),), dt),
    jnp.zeros((), jnp.int32),
  )
  if m > 0:
    state = lax.while_loop(more, pop, state)
  _, _, _, sel, sel_s, count = state
  pad = size - m
  sel = jnp.concatenate([sel[:m], jnp.zeros((pad,), jnp.int32)])
  sel_s = jnp.concatenate([sel_s[:m], jnp.zeros((pad,), dt)])
  return sel, sel_s, count


def _v4_impl(
  boxes, scores, iou_threshold, score_threshold, *, max_output_size, pad_to_max_output_size
):
  _padded_only(pad_to_max_output_size, max_output_size)
  boxes, scores = lax.stop_gradient(boxes), lax.stop_gradient(scores)
  dt = scores.dtype
  sel, _, count = padded_nms(
    iou_matrix(boxes).astype(dt),
    scores,
    iou_threshold.astype(dt),
    score_threshold.astype(dt),
    jnp.zeros((), dt),
    max_output_size,
  )
  return sel, count


def _v5_impl(
  boxes,
  scores,
  iou_threshold,
  score_threshold,
  soft_nms_sigma,
  *,
  max_output_size,
  pad_to_max_output_size,
):
  _padded_only(pad_to_max_output_size, max_output_size)
  boxes, scores = lax.stop_gradient(boxes), lax.stop_gradient(scores)
  dt = scores.dtype
  return padded_nms(
    iou_matrix(boxes).astype(dt),
    scores,
    iou_threshold.astype(dt),
    score_threshold.astype(dt),
    soft_nms_sigma.astype(dt),
    max_output_size,
  )


def _padded_only(pad, max_output_size):
  if not pad:
    raise ValueError(
      "the NonMaxSuppressionV4/V5 primitive is the padded form "
      "(pad_to_max_output_size=True); the unpadded op is data-dependent"
    )
  if max_output_size < 0:
    raise ValueError("output size must be non-negative")


def _v4_check(boxes, scores, iou_threshold, score_threshold, **params):
  return (iou_threshold < 0) | (iou_threshold > 1), "iou_threshold must be in [0, 1]"


def _v5_check(boxes, scores, iou_threshold, score_threshold, soft_nms_sigma, **params):
  return (
    (iou_threshold < 0) | (iou_threshold > 1) | (soft_nms_sigma < 0),
    "iou_threshold must be in [0, 1] and soft_nms_sigma_val must be >= 0",
  )


# --- graph hooks ----------------------------------------------------------------------


def _known(node, inputs):
  """The inputs as numpy arrays, or DynamicShapeError naming the node."""
  if any(isinstance(v, jax.core.Tracer) for v in inputs):
    raise errors.DynamicShapeError(
      f"{node.op} node '{node.name}': {_WHY}; under jit/vmap/grad its inputs are "
      "traced, so its output shape is unknown."
    )
  return [np.asarray(v) for v in inputs]


def _check_common(node, boxes, scores, max_output_size, iou_threshold=None, overlaps=False):
  def fail(msg):
    raise errors.OpError(node.op, node.name, msg)

  if overlaps:
    if boxes.ndim != 2 or boxes.shape[0] != boxes.shape[1]:
      fail(f"overlaps must be square, got shape {boxes.shape}")
  elif boxes.ndim != 2 or boxes.shape[1] != 4:
    fail(f"boxes must be 2-D with 4 columns, got shape {boxes.shape}")
  if scores.ndim != 1 or scores.shape[0] != boxes.shape[0]:
    fail(f"scores has incompatible shape {scores.shape}")
  if np.ndim(max_output_size) != 0:
    fail("max_output_size must be 0-D")
  if int(max_output_size) < 0:
    fail("output size must be non-negative")
  if iou_threshold is not None and not 0 <= iou_threshold <= 1:
    fail("iou_threshold must be in [0, 1]")


def _exact(node, boxes, scores, max_out, iou, score_thr, sigma=0.0, overlaps=False):
  _check_common(node, boxes, scores, max_out, None if overlaps else iou, overlaps)
  if sigma < 0:
    raise errors.OpError(node.op, node.name, "soft_nms_sigma_val must be >= 0")
  dt = scores.dtype
  sim = (boxes.astype(np.float32) if overlaps else iou_matrix(boxes, np)).astype(dt)
  return greedy_nms(sim, scores, int(max_out), iou, score_thr, sigma)


_LOWEST = {
  np.dtype(np.float32): np.finfo(np.float32).min,
  np.dtype(np.float16): np.finfo(np.float16).min,
}


@structural(
  "NonMaxSuppression",
  family=FAMILY,
  dynamic_shape=_WHY,
  doc="Greedy hard NMS (iou_threshold attr, no score threshold): the selected "
  "indices, by decreasing score.",
)
def _nms_v1(ctx, node, inputs):
  boxes, scores, max_out = _known(node, inputs)
  iou = np.float32(node.attr("iou_threshold"))
  return [_exact(node, boxes, scores, max_out, iou, _LOWEST[scores.dtype])[0]]


@structural(
  "NonMaxSuppressionV2",
  family=FAMILY,
  dynamic_shape=_WHY,
  doc="Greedy hard NMS (iou_threshold input, no score threshold).",
)
def _nms_v2(ctx, node, inputs):
  boxes, scores, max_out, iou = _known(node, inputs)
  return [_exact(node, boxes, scores, max_out, iou, _LOWEST[scores.dtype])[0]]


@structural(
  "NonMaxSuppressionV3",
  family=FAMILY,
  dynamic_shape=_WHY,
  doc="Greedy hard NMS of the boxes scoring above score_threshold.",
)
def _nms_v3(ctx, node, inputs):
  boxes, scores, max_out, iou, score_thr = _known(node, inputs)
  return [_exact(node, boxes, scores, max_out, iou, score_thr)[0]]


@structural(
  "NonMaxSuppressionWithOverlaps",
  family=FAMILY,
  dynamic_shape=_WHY,
  doc="Greedy hard NMS with a given [n, n] overlap matrix instead of IoU.",
)
def _nms_overlaps(ctx, node, inputs):
  overlaps, scores, max_out, thr, score_thr = _known(node, inputs)
  return [_exact(node, overlaps, scores, max_out, thr, score_thr, overlaps=True)[0]]


def _padded_hook(v5):
  def interpret(ctx, node, inputs):
    if node.attr("pad_to_max_output_size"):
      return interpreter.bind_node(ctx, core.lookup(node.op), node, inputs)
    values = _known(node, inputs)
    sel, scores = _exact(node, *values[:5], sigma=values[5] if v5 else 0.0)
    count = np.asarray(sel.shape[0], np.int32)
    return [sel, scores, count] if v5 else [sel, count]

  return interpret


def _static_if_padded(node):
  return bool(node.attr("pad_to_max_output_size"))


# --- specs -----------------------------------------------------------------------------

_COORDS = (0.0, 0.5, 1.0, 1.5, 2.0, 3.0)
_SCORES = (-1.0, 0.0, 0.125, 0.25, 0.5, 0.75, 0.875, 1.0)


def _nms_calls(st, v5):
  @st.composite
  def draw(d):
    dtype = np.dtype(d(st.sampled_from(("float32", "float32", "float16"))))
    n = d(st.integers(0, 6))
    boxes = np.asarray(
      [[d(st.sampled_from(_COORDS)) for _ in range(4)] for _ in range(n)], dtype
    ).reshape(n, 4)
    scores = np.asarray([d(st.sampled_from(_SCORES)) for _ in range(n)], dtype)
    tdt = dtype if v5 else np.dtype(d(st.sampled_from(("float32", "float16"))))
    call = dict(
      boxes=boxes,
      scores=scores,
      max_output_size=np.asarray(d(st.integers(0, 7)), np.int32),
      iou_threshold=np.asarray(d(st.sampled_from((0.0, 0.3, 0.5, 1.0))), tdt),
      score_threshold=np.asarray(d(st.sampled_from((-2.0, 0.0, 0.2))), tdt),
      pad_to_max_output_size=True,
    )
    if v5:
      call["soft_nms_sigma"] = np.asarray(d(st.sampled_from((0.0, 0.0, 0.5, 1.0))), dtype)
    return call

  return draw()


_SKIP = {"jvp": "TF registers no gradient for NMS", "vjp": "TF registers no gradient for NMS"}
_NOTE = (
  "pad_to_max_output_size=True (the static form); boxes on a grid so that boxes "
  "overlap, coincide and have no area"
)

NonMaxSuppressionV4 = register_op(
  "NonMaxSuppressionV4",
  _v4_impl,
  family=FAMILY,
  multiple_results=True,
  static=("max_output_size",),
  attrs=("pad_to_max_output_size",),
  dynamic_shape=_WHY + " unless pad_to_max_output_size",
  static_shape_if=_static_if_padded,
  interpret=_padded_hook(False),
  batching=rules.vmap_batching(_v4_impl, True),
  check=_v4_check,
  doc="Greedy hard NMS above score_threshold: indices (padded with 0 to "
  "max_output_size when pad_to_max_output_size) and their number.",
  spec=lambda st: st.Spec(_nms_calls(st, False), skip=_SKIP, note=_NOTE),
)

NonMaxSuppressionV5 = register_op(
  "NonMaxSuppressionV5",
  _v5_impl,
  family=FAMILY,
  multiple_results=True,
  static=("max_output_size",),
  attrs=("pad_to_max_output_size",),
  dynamic_shape=_WHY + " unless pad_to_max_output_size",
  static_shape_if=_static_if_padded,
  interpret=_padded_hook(True),
  batching=rules.vmap_batching(_v5_impl, True),
  check=_v5_check,
  doc="Greedy NMS with soft-NMS (Gaussian decay, soft_nms_sigma > 0): indices, their "
  "(decayed) scores and their number.",
  spec=lambda st: st.Spec(_nms_calls(st, True), skip=_SKIP, note=_NOTE),
)
