"""CropAndResize and its gradient ops CropAndResizeGradImage and CropAndResizeGradBoxes
(NHWC, static crop size; boxes and box indices are data).

Sampling positions are TF's (``y1 * (h - 1) + y * (y2 - y1) * (h - 1) / (ch - 1)``, or
the box centre for a 1-pixel crop), in float32 with TF's roundings bit for bit (no FMA
contraction, a true division: see ``_divided``); CropAndResizeGradBoxes scales by
``(y2 - y1) * ((h - 1) / (ch - 1))``, as TF's kernel, which rounds differently (an edge
at 1.0 can be outside there and inside for the crop). Positions outside the image give
``extrapolation_value``. Bilinear sampling lerps the two rows' x-lerps
(TF's order); nearest rounds halves away from zero (``roundf``). Box indices outside
``[0, batch)``, which TF's CPU kernel rejects, give zero crops (and are dropped by the
gradient ops), like a gather; the op declares TF's check.

Rules: the image's JVP is ``tf.CropAndResize`` of the tangent (extrapolation 0), whose
transpose is ``tf.CropAndResizeGradImage``; the boxes' JVP is TF's bilinear box
derivative (also for ``method="nearest"``, as TF's gradient), written with jax.numpy:
its transpose is derived (``tf.CropAndResizeGradBoxes`` computes the same values).
Batching folds the vmapped axis into the batch and the boxes, offsetting box indices.
"""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np

from tfprims import rules
from tfprims.core import register_op, tfops
from tfprims.dtypes import canonical_dtype
from tfprims.ops.image._common import FAMILY, stored
from tfprims.ops.shared_specs import bounded_values
from tfprims.rules import U

_F32 = jnp.float32


def _divided(x, k):
  """``x / k`` rounded once, as TF's float32 division. XLA's algebraic simplifier turns a
  division by a constant into a multiplication by its (rounded) reciprocal, which is
  off by an ulp for many (x, k): ``99 / 13`` gives 7.615385 instead of 7.6153846, so
  ``13 * scale`` is 99.00001 and a box edge at 1.0 samples outside the image. The
  divisor is made data-dependent (NaN where ``x`` is NaN, so the quotient is unchanged)."""
  return x / jnp.where(jnp.isnan(x), jnp.asarray(np.nan, x.dtype), jnp.asarray(k, x.dtype))


def _positions(lo, hi, size, crop, *, grad_boxes=False):
  """(num_boxes, crop) sampling positions along one axis and whether each is inside
  the image: TF's float32 arithmetic, each product and quotient rounded (TF's CPU
  kernels are built without FMA contraction). CropAndResize and CropAndResizeGradImage
  scale by ``(hi - lo) * (size - 1) / (crop - 1)``; CropAndResizeGradBoxes (hence the
  boxes' derivative) by ``(hi - lo) * ((size - 1) / (crop - 1))``, which rounds
  differently. A 1-pixel crop samples the box centre (``0.5 * (lo + hi) * (size - 1)``,
  in double in TF: one rounding)."""
  last = np.float32(size - 1)
  if crop > 1:
    if grad_boxes:
      scale = stored((hi - lo) * (last / np.float32(crop - 1)))
    else:
      scale = _divided(stored((hi - lo) * last), crop - 1)
    steps = jnp.arange(crop, dtype=_F32)
    pos = stored(lo[:, None] * last) + stored(steps[None, :] * scale[:, None])
  else:
    pos = ((lo + hi) * np.float32(0.5 * (size - 1)))[:, None]
  inside = (pos >= 0) & (pos <= last)
  return pos, inside


def _round_half_away(x):
  """roundf for x >= 0 (positions inside the image)."""
  fl = jnp.floor(x)
  return jnp.where(x - fl >= 0.5, fl + 1, fl)


def _sampling(image, boxes, box_ind, crop_size, *, grad_boxes=False):
  """What every op of the family needs: the valid-box mask, safe box indices, the
  positions along y and x and their masks."""
  n, h, w, _ = image if isinstance(image, tuple) else image.shape
  ch, cw = crop_size
  boxes = boxes.astype(_F32)
  valid = (box_ind >= 0) & (box_ind < n)
  safe = jnp.where(valid, box_ind, 0).astype(jnp.int32)
  py, iny = _positions(boxes[:, 0], boxes[:, 2], h, ch, grad_boxes=grad_boxes)
  px, inx = _positions(boxes[:, 1], boxes[:, 3], w, cw, grad_boxes=grad_boxes)
  return valid, safe, py, iny, px, inx


def _corners(img, safe, py, px, h, w):
  """The four corner values (float32) and lerps at each sampling position."""
  top = jnp.clip(jnp.floor(py), 0, h - 1).astype(jnp.int32)
  bottom = jnp.clip(jnp.ceil(py), 0, h - 1).astype(jnp.int32)
  left = jnp.clip(jnp.floor(px), 0, w - 1).astype(jnp.int32)
  right = jnp.clip(jnp.ceil(px), 0, w - 1).astype(jnp.int32)
  b = safe[:, None, None]
  at = lambda yy, xx: img[b, yy[:, :, None], xx[:, None, :]]
  return (
    at(top, left),
    at(top, right),
    at(bottom, left),
    at(bottom, right),
    (py - jnp.floor(py))[:, :, None, None],
    (px - jnp.floor(px))[:, None, :, None],
  )


def _check_args(image, boxes, box_ind, crop_size):
  if image.ndim != 4:
    raise ValueError(f"input image must be 4-D, got shape {image.shape}")
  if boxes.ndim != 2 or boxes.shape[1] != 4:
    raise ValueError(f"boxes must be 2-D [num_boxes, 4], got shape {boxes.shape}")
  if box_ind.shape != (boxes.shape[0],):
    raise ValueError(f"box_index has incompatible shape {box_ind.shape}")
  ch, cw = (int(v) for v in crop_size)
  if ch <= 0 or cw <= 0:
    raise ValueError("crop dimensions must be positive")
  if image.shape[1] <= 0 or image.shape[2] <= 0:
    raise ValueError("image dimensions must be positive")
  return ch, cw


def crop_and_resize(
  image, boxes, box_ind, *, crop_size, method="bilinear", extrapolation_value=0.0
):
  """TF CropAndResize (float32 crops); out-of-range box indices give zeros."""
  ch, cw = _check_args(image, boxes, box_ind, crop_size)
  _, h, w, d = image.shape
  nb = boxes.shape[0]
  if nb == 0 or image.shape[0] == 0:
    return jnp.zeros((nb, ch, cw, d), _F32)
  valid, safe, py, iny, px, inx = _sampling(image, boxes, box_ind, (ch, cw))
  img = image.astype(_F32)
  if method == "bilinear":
    tl, tr, bl, br, ly, lx = _corners(img, safe, py, px, h, w)
    top = tl + (tr - tl) * lx
    bottom = bl + (br - bl) * lx
    out = top + (bottom - top) * ly
  elif method == "nearest":
    yy = jnp.clip(_round_half_away(py), 0, h - 1).astype(jnp.int32)
    xx = jnp.clip(_round_half_away(px), 0, w - 1).astype(jnp.int32)
    out = img[safe[:, None, None], yy[:, :, None], xx[:, None, :]]
  else:
    raise ValueError(f"method must be 'bilinear' or 'nearest', got {method!r}")
  inside = (iny[:, :, None] & inx[:, None, :])[..., None]
  out = jnp.where(inside, out, np.float32(extrapolation_value))
  return jnp.where(valid[:, None, None, None], out, _F32(0))


def crop_and_resize_grad_image(grads, boxes, box_ind, *, image_size, T, method="bilinear"):
  """TF CropAndResizeGradImage: the transpose of CropAndResize in the image. Like TF,
  each contribution is a float32 product cast to T and accumulated in T."""
  n, h, w, d = (int(v) for v in image_size)
  if min(n, h, w, d) <= 0:
    raise ValueError("image dimensions must be positive")
  dtype = canonical_dtype(T)
  nb, ch, cw, _ = grads.shape
  out = jnp.zeros((n, h, w, d), dtype)
  if nb == 0:
    return out
  _, safe, py, iny, px, inx = _sampling((n, h, w, d), boxes, box_ind, (ch, cw))
  valid = (box_ind >= 0) & (box_ind < n)
  keep = (iny[:, :, None] & inx[:, None, :] & valid[:, None, None])[..., None]
  g = jnp.where(keep, grads.astype(_F32), _F32(0))
  b = safe[:, None, None]
  if method == "nearest":
    yy = jnp.clip(_round_half_away(py), 0, h - 1).astype(jnp.int32)
    xx = jnp.clip(_round_half_away(px), 0, w - 1).astype(jnp.int32)
    return out.at[b, yy[:, :, None], xx[:, None, :]].add(g.astype(dtype))
  if method != "bilinear":
    raise ValueError(f"method must be 'bilinear' or 'nearest', got {method!r}")
  top = jnp.clip(jnp.floor(py), 0, h - 1).astype(jnp.int32)[:, :, None]
  bottom = jnp.clip(jnp.ceil(py), 0, h - 1).astype(jnp.int32)[:, :, None]
  left = jnp.clip(jnp.floor(px), 0, w - 1).astype(jnp.int32)[:, None, :]
  right = jnp.clip(jnp.ceil(px), 0, w - 1).astype(jnp.int32)[:, None, :]
  ly = (py - jnp.floor(py))[:, :, None, None]
  lx = (px - jnp.floor(px))[:, None, :, None]
  dtop = stored((1 - ly) * g)
  dbottom = stored(ly * g)
  for yy, xx, v in (
    (top, left, (1 - lx) * dtop),
    (top, right, lx * dtop),
    (bottom, left, (1 - lx) * dbottom),
    (bottom, right, lx * dbottom),
  ):
    out = out.at[b, yy, xx].add(stored(v).astype(dtype))
  return out


def _box_partials(image, boxes, box_ind, crop_size):
  """Per sampling position: the bilinear image derivatives along y and x (TF's
  CropAndResizeGradBoxes formulas; zero outside the image or for a bad box index) and
  the derivatives of the positions in (y1, y2) and (x1, x2)."""
  _, h, w, _ = image.shape
  ch, cw = crop_size
  valid, safe, py, iny, px, inx = _sampling(image, boxes, box_ind, crop_size, grad_boxes=True)
  tl, tr, bl, br, ly, lx = _corners(image.astype(_F32), safe, py, px, h, w)
  gy = (1 - lx) * (bl - tl) + lx * (br - tr)
  gx = (1 - ly) * (tr - tl) + ly * (br - bl)
  mask = (iny[:, :, None] & inx[:, None, :] & valid[:, None, None])[..., None]
  gy, gx = jnp.where(mask, gy, _F32(0)), jnp.where(mask, gx, _F32(0))

  def dpos(size, crop):
    last = np.float32(size - 1)
    if crop > 1:
      step = np.arange(crop, dtype=np.float32) * (last / np.float32(crop - 1))
      return last - step, step
    half = np.full((1,), np.float32(0.5) * last, np.float32)
    return half, half

  dy1, dy2 = dpos(h, ch)
  dx1, dx2 = dpos(w, cw)
  return gy, gx, (dy1, dy2), (dx1, dx2)


def crop_and_resize_grad_boxes(grads, image, boxes, box_ind, *, method="bilinear"):
  """TF CropAndResizeGradBoxes: the bilinear derivative of the crops in the box
  coordinates, contracted with ``grads`` (float32)."""
  if method != "bilinear":
    raise ValueError("method must be 'bilinear'")
  nb, ch, cw, _ = grads.shape
  if nb == 0 or image.shape[0] == 0:
    return jnp.zeros((nb, 4), _F32)
  gy, gx, (dy1, dy2), (dx1, dx2) = _box_partials(image, boxes, box_ind, (ch, cw))
  g = grads.astype(_F32)
  sy = jnp.sum(gy * g, axis=(2, 3))  # (nb, ch)
  sx = jnp.sum(gx * g, axis=(1, 3))  # (nb, cw)
  return jnp.stack([sy @ dy1, sx @ dx1, sy @ dy2, sx @ dx2], axis=1)


# --------------------------------------------------------------------------
# Rules
# --------------------------------------------------------------------------


def _image_jvp(t, image, boxes, box_ind, *, crop_size, method, extrapolation_value):
  return tfops.CropAndResize(
    t, boxes, box_ind, crop_size=crop_size, method=method, extrapolation_value=0.0
  )


def _boxes_jvp(t, image, boxes, box_ind, *, crop_size, method, extrapolation_value):
  """TF's box derivative (bilinear, whatever the method), as jax.numpy: no TF op maps
  a box tangent to a crop tangent (CropAndResizeGradBoxes is its transpose)."""
  if boxes.shape[0] == 0 or image.shape[0] == 0:
    return jnp.zeros((boxes.shape[0],) + tuple(crop_size) + (image.shape[3],), _F32)
  gy, gx, (dy1, dy2), (dx1, dx2) = _box_partials(image, boxes, box_ind, tuple(crop_size))
  t = t.astype(_F32)
  ty = t[:, 0:1] * dy1[None, :] + t[:, 2:3] * dy2[None, :]  # (nb, ch)
  tx = t[:, 1:2] * dx1[None, :] + t[:, 3:4] * dx2[None, :]  # (nb, cw)
  return gy * ty[:, :, None, None] + gx * tx[:, None, :, None]


def _crop_transpose(ct, image, boxes, box_ind, *, crop_size, method, extrapolation_value):
  """The image tangent's transpose: ``tf.CropAndResizeGradImage`` (boxes and indices are
  never linear inputs)."""
  if not U(image):
    return [None, None, None]
  return [
    tfops.CropAndResizeGradImage(
      rules.instantiate(ct),
      boxes,
      box_ind,
      image_size=tuple(rules.shape_of(image)),
      T=rules.dtype_of(image),
      method=method,
    ),
    None,
    None,
  ]


def _grad_image_transpose(ct, grads, boxes, box_ind, *, image_size, T, method):
  crop = tuple(rules.shape_of(grads)[1:3])
  return [
    tfops.CropAndResize(
      rules.instantiate(ct), boxes, box_ind, crop_size=crop, method=method, extrapolation_value=0.0
    )
    if U(grads)
    else None,
    None,
    None,
  ]


def _crop_check(image, boxes, box_ind, **_):
  n = image.shape[0]
  if box_ind.size == 0:
    return None
  return (jnp.any((box_ind < 0) | (box_ind >= n)), "box_index has values outside [0, batch_size)")


def _grad_image_check(grads, boxes, box_ind, *, image_size, **_):
  n = int(image_size[0])
  if box_ind.size == 0:
    return None
  return (jnp.any((box_ind < 0) | (box_ind >= n)), "box_index has values outside [0, batch_size)")


def _grad_boxes_check(grads, image, boxes, box_ind, **_):
  return _crop_check(image, boxes, box_ind)


# Batching: the vmapped axis goes into the image batch (B * N) and the boxes (B * nb);
# box indices are offset by b * N (out-of-range ones stay out of range).


def _fold(x, d, b):
  if d is None:
    x, d = jnp.broadcast_to(x, (b,) + x.shape), 0
  x = jnp.moveaxis(x, d, 0)
  return x.reshape((x.shape[0] * x.shape[1],) + x.shape[2:])


def _fold_indices(box_ind, d, b, n):
  if d is None:
    box_ind, d = jnp.broadcast_to(box_ind, (b,) + box_ind.shape), 0
  box_ind = jnp.moveaxis(box_ind, d, 0)
  offset = (jnp.arange(b, dtype=box_ind.dtype) * n)[:, None]
  ok = (box_ind >= 0) & (box_ind < n)
  return jnp.where(ok, box_ind + offset, -1).reshape(-1).astype(box_ind.dtype)


def _split(x, b):
  return x.reshape((b, x.shape[0] // b) + x.shape[1:])


def _crop_batching(args, dims, **p):
  (image, boxes, box_ind), (di, db, dx) = args, dims
  b = rules.batch_size(args, dims)
  n = rules.unbatched_shape(image, di)[0]
  out = tfops.CropAndResize(
    _fold(image, di, b), _fold(boxes, db, b), _fold_indices(box_ind, dx, b, n), **p
  )
  return _split(out, b), 0


def _grad_image_batching(args, dims, *, image_size, T, method):
  (grads, boxes, box_ind), (dg, db, dx) = args, dims
  b = rules.batch_size(args, dims)
  n = int(image_size[0])
  size = (b * n,) + tuple(int(v) for v in image_size[1:])
  out = tfops.CropAndResizeGradImage(
    _fold(grads, dg, b),
    _fold(boxes, db, b),
    _fold_indices(box_ind, dx, b, n),
    image_size=size,
    T=T,
    method=method,
  )
  return _split(out, b), 0


def _grad_boxes_batching(args, dims, **p):
  (grads, image, boxes, box_ind), (dg, di, db, dx) = args, dims
  b = rules.batch_size(args, dims)
  n = rules.unbatched_shape(image, di)[0]
  out = tfops.CropAndResizeGradBoxes(
    _fold(grads, dg, b),
    _fold(image, di, b),
    _fold(boxes, db, b),
    _fold_indices(box_ind, dx, b, n),
    **p,
  )
  return _split(out, b), 0


# --------------------------------------------------------------------------
# Specs
# --------------------------------------------------------------------------

_IMAGE_DTYPES = (
  "uint8",
  "uint16",
  "int8",
  "int16",
  "int32",
  "int64",
  "float16",
  "float32",
  "float64",
)


def _image_values(st, dtype, shape):
  """Floats in [-8, 8], integers in [0, 100]: sums of products of large integers lose
  float32 digits in an order-dependent way (TF's loop vs our contraction)."""
  if st.np_dtype(dtype).kind in "iu":
    return st.arrays(st.np_dtype(dtype), shape, min_value=0, max_value=100)
  return bounded_values(st, dtype, shape, bound=8.0)


# Box coordinates: exact boundaries (an edge at 0 or 1 samples the first or last pixel
# only if TF's float32 rounding lands on it), eighths over [-0.5, 1.5] (pixel centres,
# halfway ties, outside the image), decimals and thirds that float32 rounds, and uniform
# values. Image and crop sizes are mostly at most 4, sometimes sizes where XLA's
# reciprocal-of-a-constant division and TF's roundings disagree (13 * (99 / 13) and the
# like): (4, 4) with 1/3 or 0.9, (14, 4) with 0.1, (2..5, 7 or 14) with 0.1 or 0.2.
_BOX_VALUES = (0.0, 1.0, 0.5, 0.25, 0.75, 0.1, 0.2, 0.3, 0.9, 1 / 3, 2 / 3)


def _box_coordinate(st):
  return st.one_of(
    st.sampled_from(_BOX_VALUES),
    st.integers(-4, 12).map(lambda k: k / 8),
    st.floats(-0.5, 1.5, width=32),
  )


def _side(st, more):
  return st.one_of(st.integers(1, 4), st.sampled_from(more))


def _crop_calls(st, op_type):
  @st.composite
  def draw_call(draw):
    n, c = draw(st.integers(1, 2)), draw(st.integers(1, 2))
    h, w = draw(_side(st, (5, 14))), draw(_side(st, (5, 14)))
    nb = draw(st.integers(0, 3))
    crop = (draw(_side(st, (7, 14))), draw(_side(st, (7, 14))))
    boxes = np.array(
      [[draw(_box_coordinate(st)) for _ in range(4)] for _ in range(nb)], np.float32
    ).reshape(nb, 4)
    box_ind = np.array([draw(st.integers(0, n - 1)) for _ in range(nb)], np.int32)
    method = draw(st.sampled_from(("bilinear", "nearest")))
    if op_type == "CropAndResize":
      dtype = draw(st.sampled_from(_IMAGE_DTYPES))
      return dict(
        image=draw(_image_values(st, dtype, (n, h, w, c))),
        boxes=boxes,
        box_ind=box_ind,
        crop_size=np.array(crop, np.int32),
        method=method,
        extrapolation_value=draw(st.sampled_from((0.0, 1.5, -2.0))),
      )
    grads = draw(bounded_values(st, "float32", (nb,) + crop + (c,)))
    if op_type == "CropAndResizeGradImage":
      return dict(
        grads=grads,
        boxes=boxes,
        box_ind=box_ind,
        image_size=np.array([n, h, w, c], np.int32),
        T=np.dtype(draw(st.sampled_from(("float16", "float32", "float64")))),
        method=method,
      )
    dtype = draw(st.sampled_from(_IMAGE_DTYPES))
    return dict(
      grads=grads,
      image=draw(_image_values(st, dtype, (n, h, w, c))),
      boxes=boxes,
      box_ind=box_ind,
      method="bilinear",
    )

  return draw_call()


def _crop_cases(op_type):
  """Canonical calls: a whole-image box (and its flip) where 13 * (99 / 13) must be 99
  exactly (image 100, crop 14), and boxes from 0.1 where CropAndResizeGradBoxes' scale
  leaves the last row outside and CropAndResize's keeps it (image 14, crop 4)."""
  rng = np.random.default_rng(0)
  cases = []
  for size, crop, lo in ((100, 14, 0.0), (14, 4, 0.1)):
    boxes = np.array([[lo, lo, 1, 1], [1, 1, lo, lo], [lo, 0, 1, 0.5]], np.float32)
    image = rng.random((1, size, size, 1)).astype(np.float32)
    grads = rng.normal(size=(3, crop, crop, 1)).astype(np.float32)
    common = dict(boxes=boxes, box_ind=np.zeros(3, np.int32))
    for method in ("bilinear", "nearest"):
      if op_type == "CropAndResize":
        cases.append(
          dict(
            common,
            image=image,
            crop_size=np.array([crop, crop], np.int32),
            method=method,
            extrapolation_value=-2.0,
          )
        )
      elif op_type == "CropAndResizeGradImage":
        cases.append(
          dict(
            common,
            grads=grads,
            image_size=np.array([1, size, size, 1], np.int32),
            T=np.dtype("float32"),
            method=method,
          )
        )
    if op_type == "CropAndResizeGradBoxes":
      cases.append(dict(common, grads=grads, image=image, method="bilinear"))
  return cases


CropAndResize = register_op(
  "CropAndResize",
  crop_and_resize,
  family=FAMILY,
  static=("crop_size",),
  attrs=("method", "extrapolation_value"),
  check=_crop_check,
  jvp=(_image_jvp, _boxes_jvp, None),
  transpose=_crop_transpose,
  batching=_crop_batching,
  spec=rules.per_op(
    lambda op: (
      lambda st: st.Spec(
        _crop_calls(st, op.op_type),
        rtol=1e-5,
        atol=1e-5,
        examples=0.5,
        diff_args=("image", "boxes"),
        cases=_crop_cases(op.op_type),
      )
    )
  ),
)

CropAndResizeGradImage = register_op(
  "CropAndResizeGradImage",
  crop_and_resize_grad_image,
  family=FAMILY,
  static=("image_size",),
  attrs=("T", "method"),
  check=_grad_image_check,
  jvp=(
    lambda t, grads, boxes, box_ind, **p: tfops.CropAndResizeGradImage(t, boxes, box_ind, **p),
    None,
    None,
  ),
  transpose=_grad_image_transpose,
  batching=_grad_image_batching,
  spec=rules.per_op(
    lambda op: (
      lambda st: st.Spec(
        _crop_calls(st, op.op_type),
        rtol={"float16": 1e-2},
        atol={"float16": 1e-2},
        diff_args=("grads",),
        cases=_crop_cases(op.op_type),
      )
    )
  ),
)

CropAndResizeGradBoxes = register_op(
  "CropAndResizeGradBoxes",
  crop_and_resize_grad_boxes,
  family=FAMILY,
  attrs=("method",),
  check=_grad_boxes_check,
  batching=_grad_boxes_batching,
  spec=rules.per_op(
    lambda op: (
      lambda st: st.Spec(
        _crop_calls(st, op.op_type),
        rtol=1e-4,
        atol=1e-4,
        diff_args=("grads",),
        cases=_crop_cases(op.op_type),
        note="Sums over the crop in another order than TF's loop.",
      )
    )
  ),
)
