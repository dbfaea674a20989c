"""Region proposals: GenerateBoundingBoxProposals (TF has only a GPU kernel).

Semantics of TF's GPU kernel (``generate_box_proposals_op.cu.cc``), per image:

* the ``H * W * A`` anchors (``anchors [H, W, 4 * A]``, ``[y1, x1, y2, x2]`` each, shared
  by the images) are ranked by score, descending, ties by the lower ``(h, w, a)`` index
  (CUB's stable radix sort); the first ``min(H * W * A, pre_nms_topn)`` are decoded;
* decoding (``bbox_deltas [N, H, W, 4 * A]`` as ``[dy, dx, dh, dw]``, eq. 2 of
  arXiv:1506.01497 without the ``+ 1``): ``dw, dh`` capped at ``log(1000 / 16)``,
  ``w = x2 - x1``, centre ``x1 + 0.5 w`` moved by ``w * dx``, width ``w * exp(dw)``
  (same for y), then clipped to ``[0, image width]`` / ``[0, image height]``
  (``image_info [N, 5]`` = height, width, scale, ...);
* boxes whose shorter side is below ``min_size * scale`` are dropped (order kept);
* greedy NMS over the rest in rank order: a box is suppressed by a kept earlier one when
  ``intersection > nms_threshold * (area_a + area_b - intersection)`` (float32; boxes
  without area never overlap);
* the first ``post_nms_topn`` kept boxes as ``[y1, x1, y2, x2]`` and their scores,
  zero-padded to ``[N, post_nms_topn, 4]`` / ``[N, post_nms_topn]`` (static shapes).

Products are rounded before the following add (as the reference in the spec computes
them; XLA's CPU backend would fuse them). TF declares the op not differentiable: zero
derivatives. vmap folds a batch of images into ``num_images`` when the anchors and the
scalar inputs are not batched.
"""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np
from jax import lax

from tfprims import errors, rules
from tfprims.core import register_op, tfops
from tfprims.ops.image._common import FAMILY, stored

_XFORM_CLIP = np.float32(np.log(1000.0 / 16.0))  # TF: log(1000 / 16.) stored as float


def _decode(deltas, anchors, info, min_size):
  """Decoded, clipped boxes (x1, y1, x2, y2 arrays) and the min-size keep flags."""
  f = np.float32
  y1, x1, y2, x2 = (anchors[..., i] for i in range(4))
  dy, dx = deltas[..., 0], deltas[..., 1]
  dh = jnp.minimum(deltas[..., 2], _XFORM_CLIP)
  dw = jnp.minimum(deltas[..., 3], _XFORM_CLIP)

  def axis(lo, hi, d, dsize):
    size = hi - lo
    ctr = lo + stored(f(0.5) * size)
    pred_ctr = ctr + stored(size * d)
    half = stored(f(0.5) * stored(size * jnp.exp(dsize)))
    return pred_ctr - half, pred_ctr + half

  x1, x2 = axis(x1, x2, dx, dw)
  y1, y2 = axis(y1, y2, dy, dh)
  img_h, img_w, scale = info[:, None, 0], info[:, None, 1], info[:, None, 2]
  clip = lambda v, hi: jnp.maximum(jnp.minimum(v, hi), f(0))
  x1, x2, y1, y2 = clip(x1, img_w), clip(x2, img_w), clip(y1, img_h), clip(y2, img_h)
  keep = jnp.minimum(x2 - x1, y2 - y1) >= stored(min_size * scale)
  return (x1, y1, x2, y2), keep


def _suppression(x1, y1, x2, y2, threshold):
  """[K, K]: whether box i (earlier) suppresses box j, TF's OverThreshold."""
  area = stored((x2 - x1) * (y2 - y1))
  w = jnp.maximum(jnp.minimum(x2[:, None], x2[None]) - jnp.maximum(x1[:, None], x1[None]), 0)
  h = jnp.maximum(jnp.minimum(y2[:, None], y2[None]) - jnp.maximum(y1[:, None], y1[None]), 0)
  inter = stored(w * h)
  union = area[:, None] + area[None] - inter
  empty = (area[:, None] == 0) | (area[None] == 0)
  return ~empty & (inter > stored(union * threshold))


def _greedy(keep, over):
  """Kept boxes in rank order: each kept unless an earlier kept one suppresses it."""

  def step(i, sel):
    hit = jnp.any(sel & over[:, i])
    return sel.at[i].set(keep[i] & ~hit)

  return lax.fori_loop(0, keep.shape[0], step, jnp.zeros_like(keep))


def _proposals(
  scores,
  bbox_deltas,
  image_info,
  anchors,
  nms_threshold,
  pre_nms_topn,
  min_size,
  *,
  post_nms_topn=300,
):
  """TF GenerateBoundingBoxProposals (its GPU kernel): top pre_nms_topn anchors by score
  decoded with bbox_deltas, clipped, min-size filtered, greedy NMS, the first
  post_nms_topn kept boxes and scores, zero-padded."""
  n, h, w, a = scores.shape
  if post_nms_topn <= 0:
    raise errors.ConversionError("post_nms_topn can't be 0 or less")
  if anchors.ndim != 3 or anchors.shape[2] != 4 * a:
    raise errors.ConversionError(
      f"anchors must be [height, width, 4 * num_anchors] = "
      f"[{h}, {w}, {4 * a}], got {list(anchors.shape)}"
    )
  k = h * w * a
  flat = scores.reshape((n, k))
  order = jnp.argsort(flat, axis=1, descending=True, stable=True)
  sorted_scores = jnp.take_along_axis(flat, order, axis=1)
  deltas = jnp.take_along_axis(bbox_deltas.reshape((n, k, 4)), order[:, :, None], axis=1)
  anchor = anchors.reshape((k, 4))[order]
  (x1, y1, x2, y2), keep = _decode(deltas, anchor, image_info, min_size)
  keep = keep & (jnp.arange(k)[None] < pre_nms_topn)

  def per_image(keep, x1, y1, x2, y2, s):
    sel = _greedy(keep, _suppression(x1, y1, x2, y2, nms_threshold))
    first = jnp.argsort(~sel, stable=True)  # kept boxes first, in order
    m = min(k, post_nms_topn)
    idx, valid = first[:m], jnp.arange(m) < jnp.sum(sel)
    box = jnp.stack([y1[idx], x1[idx], y2[idx], x2[idx]], axis=1)
    box = jnp.where(valid[:, None], box, jnp.float32(0))
    prob = jnp.where(valid, s[idx], jnp.float32(0))
    pad = post_nms_topn - m
    return jnp.pad(box, ((0, pad), (0, 0))), jnp.pad(prob, (0, pad))

  rois, probs = [], []
  for i in range(n):
    r, p = per_image(keep[i], x1[i], y1[i], x2[i], y2[i], sorted_scores[i])
    rois.append(r)
    probs.append(p)
  if not n:
    return (
      jnp.zeros((0, post_nms_topn, 4), jnp.float32),
      jnp.zeros((0, post_nms_topn), jnp.float32),
    )
  return jnp.stack(rois), jnp.stack(probs)


def _check(scores, bbox_deltas, image_info, anchors, nms_threshold, pre_nms_topn, min_size, **p):
  return (
    (nms_threshold < 0) | (nms_threshold > 1) | (pre_nms_topn <= 0),
    "nms_threshold should be between 0 and 1 and pre_nms_topn greater than 0",
  )


def _no_grad_jvp(primals, tangents, **p):
  outs = tfops.GenerateBoundingBoxProposals(*primals, **p)
  return outs, [rules.zero_tangent(o) for o in outs]


def _batching(args, dims, **p):
  """A batch of calls folded into num_images when only the per-image inputs vary."""
  if any(d is not None for d in dims[3:]):
    return rules.vmap_batching(_proposals, True)(args, dims, **p)
  b = rules.batch_size(args, dims)
  flat = []
  for x, d in zip(args[:3], dims[:3]):
    x = rules.with_batch_axis(x, d, b)
    flat.append(x.reshape((b * x.shape[1],) + x.shape[2:]))
  rois, probs = tfops.GenerateBoundingBoxProposals(*flat, *args[3:], **p)
  return [rois.reshape((b, -1) + rois.shape[1:]), probs.reshape((b, -1) + probs.shape[1:])], [0, 0]


# --- spec: a numpy reference (TF has no CPU kernel) ----------------------------------------


def reference(
  scores, bbox_deltas, image_info, anchors, nms_threshold, pre_nms_topn, min_size, post_nms_topn=300
):
  """The GPU kernel's steps in numpy float32, box by box (the spec's oracle)."""
  f = np.float32
  scores, deltas, info, anchors = (
    np.asarray(v, f) for v in (scores, bbox_deltas, image_info, anchors)
  )
  thr, pre, msize = (
    f(np.asarray(nms_threshold)),
    int(np.asarray(pre_nms_topn)),
    f(np.asarray(min_size)),
  )
  n, h, w, a = scores.shape
  k = h * w * a
  rois = np.zeros((n, post_nms_topn, 4), f)
  probs = np.zeros((n, post_nms_topn), f)
  clip = f(np.log(1000.0 / 16.0))
  for i in range(n):
    flat = scores[i].reshape(k)
    order = sorted(range(k), key=lambda j: -flat[j])[: min(k, pre)]  # stable
    cands = []
    for j in order:
      ay1, ax1, ay2, ax2 = anchors.reshape(k, 4)[j]
      dy, dx, dh, dw = deltas[i].reshape(k, 4)[j]
      dw, dh = min(dw, clip), min(dh, clip)
      bw = f(ax2 - ax1)
      cx = f(f(ax1 + f(f(0.5) * bw)) + f(bw * dx))
      pw = f(bw * f(np.exp(dw)))
      x1, x2 = f(cx - f(f(0.5) * pw)), f(cx + f(f(0.5) * pw))
      bh = f(ay2 - ay1)
      cy = f(f(ay1 + f(f(0.5) * bh)) + f(bh * dy))
      ph = f(bh * f(np.exp(dh)))
      y1, y2 = f(cy - f(f(0.5) * ph)), f(cy + f(f(0.5) * ph))
      ih, iw = info[i, 0], info[i, 1]
      x1, x2 = (max(min(v, iw), f(0)) for v in (x1, x2))
      y1, y2 = (max(min(v, ih), f(0)) for v in (y1, y2))
      if min(f(x2 - x1), f(y2 - y1)) >= f(msize * info[i, 2]):
        cands.append(((x1, y1, x2, y2), flat[j]))
    kept = []
    for box, s in cands:
      if all(not _over(kb, box, thr) for kb, _ in kept):
        kept.append((box, s))
    for r, ((x1, y1, x2, y2), s) in enumerate(kept[:post_nms_topn]):
      rois[i, r] = (y1, x1, y2, x2)
      probs[i, r] = s
  return rois, probs


def _over(a, b, thr):
  f = np.float32
  area = lambda q: f(f(q[2] - q[0]) * f(q[3] - q[1]))
  aa, ba = area(a), area(b)
  if aa == 0 or ba == 0:
    return False
  iw = max(f(min(a[2], b[2]) - max(a[0], b[0])), f(0))
  ih = max(f(min(a[3], b[3]) - max(a[1], b[1])), f(0))
  inter = f(iw * ih)
  return inter > f(f(f(aa + ba) - inter) * thr)


def _oracle(**kwargs):
  return reference(**{k: (v.numpy() if hasattr(v, "numpy") else v) for k, v in kwargs.items()})


def _calls(st):
  @st.composite
  def draw(d):
    n, h, w, a = (
      d(st.integers(1, 2)),
      d(st.integers(1, 3)),
      d(st.integers(1, 3)),
      d(st.integers(1, 3)),
    )
    grid = lambda vals, shape: np.asarray(
      [d(st.sampled_from(vals)) for _ in range(int(np.prod(shape)))], np.float32
    ).reshape(shape)
    corner = grid((0.0, 1.0, 2.0, 4.0, 6.0), (h, w, a, 2))
    size = grid((1.0, 2.0, 4.0, 8.0), (h, w, a, 2))
    anchors = np.concatenate([corner, corner + size], axis=-1).reshape(h, w, 4 * a)
    deltas = grid((-0.5, -0.25, 0.0, 0.125, 0.25, 0.5, 5.0), (n, h, w, 4 * a))
    info = np.stack(
      [
        np.asarray(
          [
            d(st.sampled_from((6.0, 8.0, 16.0))),
            d(st.sampled_from((6.0, 8.0, 16.0))),
            d(st.sampled_from((0.5, 1.0, 2.0))),
            1.0,
            1.0,
          ],
          np.float32,
        )
        for _ in range(n)
      ]
    )
    return dict(
      scores=grid((0.125, 0.25, 0.5, 0.75, 0.875, 1.0, 2.0), (n, h, w, a)),
      bbox_deltas=deltas,
      image_info=info,
      anchors=anchors,
      nms_threshold=np.float32(d(st.sampled_from((0.0, 0.3, 0.5, 0.7, 1.0)))),
      pre_nms_topn=np.int32(d(st.integers(1, h * w * a + 2))),
      min_size=np.float32(d(st.sampled_from((0.0, 1.0, 2.0, 4.0)))),
      post_nms_topn=d(st.integers(1, 6)),
    )

  return draw()


_NO_GRAD = "TF declares GenerateBoundingBoxProposals not differentiable (zero derivatives)"

GenerateBoundingBoxProposals = register_op(
  "GenerateBoundingBoxProposals",
  _proposals,
  family=FAMILY,
  attrs=("post_nms_topn",),
  multiple_results=True,
  check=_check,
  batching=_batching,
  jvp=_no_grad_jvp,
  spec=lambda st: st.Spec(
    _calls(st),
    oracle=_oracle,
    skip={"jvp": _NO_GRAD, "vjp": _NO_GRAD},
    note="TF has no CPU kernel: the oracle is a numpy reference of its GPU kernel's "
    "steps (tfprims/ops/image/bbox_proposals.py: reference); anchors, deltas "
    "and scores on grids (ties, suppression, clipping, min-size drops and "
    "exp(dw) beyond the clip all occur)",
  ),
)
