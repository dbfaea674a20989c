"""Random crops covering bounding boxes: SampleDistortedBoundingBox,
SampleDistortedBoundingBoxV2 (stateful: ``uses_rng``, the key is the primitive's first
operand) and StatelessSampleDistortedBoundingBox (the key comes from ``seed`` as in the
other stateless random ops, :mod:`tfprims.ops.random`).

TF's CPU kernel makes up to ``max_attempts`` attempts: an aspect ratio uniform in
``aspect_ratio_range``, a height uniform between the rounded heights of the smallest
and largest areas (``area_range`` of the image) at that ratio (capped so the width
fits), ``width = round(height * ratio)`` (adjusted by one row when rounding leaves
the area range), a uniform position inside the image; the first crop of at least one
pixel that covers ``min_object_covered`` of one of the boxes (in pixels, truncated)
wins, else the whole image. Here all attempts are drawn at once from ``jax.random``
and the first valid one is taken: the same distribution and the same invariants as
TF, not TF's Philox numbers (docs/semantics/image.md).

Outputs: ``begin = [y, x, 0]``, ``size = [h, w, -1]`` (in T) and the crop as a
normalised box ``[[[y / H, x / W, (y + h) / H, (x + w) / W]]]``. Boxes outside
[0, 1], which TF rejects, are declared by ``check=``; no boxes without
``use_image_if_no_bounding_boxes`` is an error at trace time (shapes are static).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from tfprims.core import register_op
from tfprims.ops.image._common import FAMILY, stored
from tfprims.ops.random.basic import seed_key, wrap_key

_F32 = jnp.float32


def _lrint(x):
  return jnp.round(x).astype(jnp.int32)  # lrintf: half to even


def _crop_sizes(ar, width, height, min_rel, max_rel, k_height):
  """GenerateRandomCrop's size for each attempt: (ok, crop height, crop width)."""
  wf, hf = width.astype(_F32), height.astype(_F32)
  min_area = stored(stored(np.float32(min_rel) * wf) * hf)
  max_area = stored(stored(np.float32(max_rel) * wf) * hf)
  h0 = _lrint(jnp.sqrt(min_area / ar))
  max_h = _lrint(jnp.sqrt(max_area / ar))
  too_wide = _lrint(max_h.astype(_F32) * ar) > width
  # TF: (original_width + 0.5 - kEps) / aspect_ratio (in double), truncated; the
  # next line's correction keeps round(max_h * ratio) <= width either way.
  alt = ((wf + np.float32(0.5)) / ar).astype(jnp.int32)
  alt = jnp.where(_lrint(alt.astype(_F32) * ar) > width, alt - 1, alt)
  max_h = jnp.minimum(jnp.where(too_wide, alt, max_h), height)
  h = jnp.minimum(h0, max_h)
  extra = jax.random.randint(k_height, ar.shape, 0, jnp.maximum(max_h - h + 1, 1))
  h = jnp.where(h < max_h, h + extra, h)
  w = _lrint(h.astype(_F32) * ar)
  area = (w * h).astype(_F32)
  grow = area < min_area
  h = jnp.where(grow, h + 1, h)
  w = jnp.where(grow, _lrint(h.astype(_F32) * ar), w)
  area = (w * h).astype(_F32)
  shrink = area > max_area
  h = jnp.where(shrink, h - 1, h)
  w = jnp.where(shrink, _lrint(h.astype(_F32) * ar), w)
  area = (w * h).astype(_F32)
  ok = (
    (max_rel > 0)
    & (ar > 0)
    & (width > 0)
    & (height > 0)
    & (min_rel <= max_rel)
    & (area >= min_area)
    & (area <= max_area)
    & (w <= width)
    & (h <= height)
    & (w > 0)
    & (h > 0)
  )
  return ok, h, w


def _rect_area(x0, y0, x1, y1):
  return ((x1 - x0) * (y1 - y0)).astype(_F32)


def _covers(cx0, cy0, cx1, cy1, boxes, min_covered):
  """SatisfiesOverlapConstraints for each attempt ([attempts]) against boxes [n, 4]
  (pixel rectangles x0, y0, x1, y1)."""
  bx0, by0, bx1, by1 = (boxes[None, :, i] for i in range(4))
  c = lambda v: v[:, None]
  px0, py0 = jnp.maximum(c(cx0), bx0), jnp.maximum(c(cy0), by0)
  px1, py1 = jnp.minimum(c(cx1), bx1), jnp.minimum(c(cy1), by1)
  inter = jnp.where((px0 > px1) | (py0 > py1), np.float32(0), _rect_area(px0, py0, px1, py1))
  obj = _rect_area(bx0, by0, bx1, by1)
  covered = (obj >= 1) & (inter / jnp.where(obj >= 1, obj, 1) >= min_covered)
  return (_rect_area(cx0, cy0, cx1, cy1) >= 1) & jnp.any(covered, axis=1)


def sample_crop(
  key,
  image_size,
  bounding_boxes,
  min_object_covered,
  *,
  aspect_ratio_range,
  area_range,
  max_attempts,
  use_image_if_no_bounding_boxes,
):
  """The kernel's DoCompute with a JAX key: (begin, size, bboxes)."""
  t = image_size.dtype
  height = image_size[0].astype(jnp.int32)
  width = image_size[1].astype(jnp.int32)
  boxes = bounding_boxes.reshape(-1, 4).astype(_F32)
  if boxes.shape[0] == 0:
    if not use_image_if_no_bounding_boxes:
      raise ValueError(
        "No bounding boxes provided as input. One must enable "
        "use_image_if_no_bounding_boxes if you wish to not provide any "
        "bounding boxes."
      )
    rects = jnp.stack([jnp.zeros((), jnp.int32), jnp.zeros((), jnp.int32), width, height])[None]
  else:
    wf, hf = width.astype(_F32), height.astype(_F32)
    rects = jnp.stack(
      [boxes[:, 1] * wf, boxes[:, 0] * hf, boxes[:, 3] * wf, boxes[:, 2] * hf], axis=1
    ).astype(jnp.int32)
  k_ar, k_h, k_y, k_x = jax.random.split(key, 4)
  lo_ar, hi_ar = (np.float32(v) for v in aspect_ratio_range)
  ar = stored(jax.random.uniform(k_ar, (max_attempts,), _F32) * (hi_ar - lo_ar)) + lo_ar
  ok, h, w = _crop_sizes(
    ar, width, height, np.float32(area_range[0]), np.float32(area_range[1]), k_h
  )
  y = jnp.where(h < height, jax.random.randint(k_y, ar.shape, 0, jnp.maximum(height - h, 1)), 0)
  x = jnp.where(w < width, jax.random.randint(k_x, ar.shape, 0, jnp.maximum(width - w, 1)), 0)
  good = ok & _covers(x, y, x + w, y + h, rects, jnp.asarray(min_object_covered, _F32))
  first = jnp.argmax(good)
  found = jnp.any(good)
  y, x = jnp.where(found, y[first], 0), jnp.where(found, x[first], 0)
  h, w = jnp.where(found, h[first], height), jnp.where(found, w[first], width)
  cast = lambda v: lax.convert_element_type(jnp.stack(v), t)
  begin = cast([y, x, jnp.zeros((), jnp.int32)])
  size = cast([h, w, jnp.full((), -1, jnp.int32)])
  hf, wf = height.astype(_F32), width.astype(_F32)
  bboxes = jnp.stack(
    [y.astype(_F32) / hf, x.astype(_F32) / wf, (y + h).astype(_F32) / hf, (x + w).astype(_F32) / wf]
  ).reshape(1, 1, 4)
  return begin, size, bboxes


_ATTRS = ("aspect_ratio_range", "area_range", "max_attempts", "use_image_if_no_bounding_boxes")


def _v1(key, image_size, bounding_boxes, *, min_object_covered, **attrs):
  return sample_crop(wrap_key(key), image_size, bounding_boxes, min_object_covered, **attrs)


def _v2(key, image_size, bounding_boxes, min_object_covered, **attrs):
  return sample_crop(wrap_key(key), image_size, bounding_boxes, min_object_covered, **attrs)


def _stateless(image_size, bounding_boxes, min_object_covered, seed, **attrs):
  return sample_crop(seed_key(seed), image_size, bounding_boxes, min_object_covered, **attrs)


def _check_boxes(bounding_boxes, min_object_covered=None):
  """TF's run-time errors: box coordinates outside [0, 1], a negative coverage."""
  bad = jnp.any(~((bounding_boxes >= 0) & (bounding_boxes <= 1)))
  message = "All bounding box coordinates must be in [0.0, 1.0]"
  if min_object_covered is not None:
    bad = bad | (min_object_covered < 0)
    message += " and min_object_covered must be non-negative"
  return bad, message


def _calls(st, version):
  @st.composite
  def draw(d):
    t = np.dtype(d(st.sampled_from(("uint8", "int8", "int16", "int32", "int64"))))
    hw = [d(st.integers(1, 60)), d(st.integers(1, 60))]
    n = d(st.integers(0, 3))
    use_image = True if n == 0 else d(st.booleans())
    boxes = []
    for _ in range(n):
      y0, x0 = d(st.integers(0, 8)) / 8, d(st.integers(0, 8)) / 8
      boxes.append([y0, x0, d(st.integers(int(y0 * 8), 8)) / 8, d(st.integers(int(x0 * 8), 8)) / 8])
    lo = d(st.sampled_from((0.05, 0.1, 0.5)))
    ar_lo = d(st.sampled_from((0.5, 0.75, 1.0)))
    call = dict(
      image_size=np.asarray(hw + [3], t),
      bounding_boxes=np.asarray(boxes, np.float32).reshape(1, n, 4),
      aspect_ratio_range=[ar_lo, ar_lo + d(st.sampled_from((0.0, 0.58, 1.0)))],
      area_range=[lo, d(st.sampled_from((lo, 0.8, 1.0)))],
      max_attempts=d(st.integers(1, 20)),
      use_image_if_no_bounding_boxes=use_image,
    )
    cov = d(st.sampled_from((0.0, 0.1, 0.5, 1.0)))
    if version == 1:
      call.update(min_object_covered=cov, seed=d(st.integers(0, 100)), seed2=0)
    else:
      call["min_object_covered"] = np.float32(cov)
      if version == 2:
        call.update(seed=d(st.integers(0, 100)), seed2=0)
      else:
        call["seed"] = d(
          st.arrays(
            st.dtypes(("int32", "int64")), (2,), special=False, min_value=0, max_value=2**31 - 1
          )
        )
    return call

  return draw()


_SKIP = {
  "values": "random crops from jax.random, not TF's Philox: invariants are tested "
  "in tests/test_image_boxes.py",
  "jvp": "TF registers no gradient (NotDifferentiable)",
  "vjp": "TF registers no gradient (NotDifferentiable)",
}

SampleDistortedBoundingBox = register_op(
  "SampleDistortedBoundingBox",
  _v1,
  family=FAMILY,
  multiple_results=True,
  attrs=("min_object_covered",) + _ATTRS,
  uses_rng=True,
  check=lambda key, image_size, bounding_boxes, **p: _check_boxes(bounding_boxes),
  doc="A random crop (begin, size, normalised box) covering min_object_covered of "
  "one of the boxes, within the area and aspect-ratio ranges; else the image.",
  spec=lambda st: st.Spec(_calls(st, 1), skip=_SKIP, examples=0.5),
)

SampleDistortedBoundingBoxV2 = register_op(
  "SampleDistortedBoundingBoxV2",
  _v2,
  family=FAMILY,
  multiple_results=True,
  attrs=_ATTRS,
  uses_rng=True,
  check=lambda key, image_size, boxes, covered, **p: _check_boxes(boxes, covered),
  doc="SampleDistortedBoundingBox with min_object_covered as an input.",
  spec=lambda st: st.Spec(_calls(st, 2), skip=_SKIP, examples=0.5),
)

StatelessSampleDistortedBoundingBox = register_op(
  "StatelessSampleDistortedBoundingBox",
  _stateless,
  family=FAMILY,
  multiple_results=True,
  attrs=_ATTRS,
  check=lambda image_size, boxes, covered, seed, **p: _check_boxes(boxes, covered),
  doc="SampleDistortedBoundingBox with a key derived from seed (same seed, same crop).",
  spec=lambda st: st.Spec(_calls(st, 3), skip=_SKIP, examples=0.5),
)
