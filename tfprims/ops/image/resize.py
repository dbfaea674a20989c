"""Bicubic and area resizing (NHWC images, static size): ResizeBicubic,
ResizeBicubicGrad and ResizeArea.

Each resize is separable: the weights TF's CPU kernel gives every (output, input)
row and column pair are computed with numpy at trace time (sizes are static), in
TF's float32 arithmetic (bicubic: TF's 1025-entry coefficient table and its
rounding of the sample offset; area: the coverage of each source cell), and the
image is contracted with the two weight matrices in float32 (rows, then columns, as
TF). The output is float32 for every input dtype, as TF's.

Rules: ResizeBicubic is linear in the images (its transpose is
``tf.ResizeBicubicGrad``, whose transpose is ``tf.ResizeBicubic``); ResizeArea has
no TF gradient op, its transpose contracts with the transposed matrices
(derived). Batching folds the vmapped axis into N.
"""

from __future__ import annotations

import functools

import jax.numpy as jnp
import numpy as np
from jax import lax

from tfprims import rules
from tfprims.core import define_op, tfops
from tfprims.ops.image._common import FAMILY
from tfprims.ops.nn._common import _fold_batching, _values
from tfprims.rules import U
_TABLE = 1024


def resize_scale(in_size, out_size, align_corners) -> np.float32:
  """TF's CalculateResizeScale, in float32."""
  if align_corners and out_size > 1:
    return np.float32(in_size - 1) / np.float32(out_size - 1)
  return np.float32(in_size) / np.float32(out_size)


@functools.lru_cache(maxsize=None)
def _coeffs_table(a: float) -> np.ndarray:
  """TF's bicubic table (InitCoeffsTable): rows (w(x), w(x + 1)) for x = i / 1024,
  evaluated in double from float x and stored as float."""
  x = (np.arange(_TABLE + 1, dtype=np.float64) / _TABLE).astype(np.float32).astype(np.float64)
  w0 = ((a + 2) * x - (a + 3)) * x * x + 1
  x1 = (x.astype(np.float32) + np.float32(1.0)).astype(np.float64)
  w1 = ((a * x1 - 5 * a) * x1 + 8 * a) * x1 - 4 * a
  return np.stack([w0, w1], axis=1).astype(np.float32)


@functools.lru_cache(maxsize=None)
def bicubic_matrix(in_size, out_size, align_corners, half_pixel_centers) -> np.ndarray:
  """(out_size, in_size) float32 weights of TF's ResizeBicubic along one axis.

  half_pixel_centers uses Keys' a = -0.5 and gives out-of-image taps zero weight
  (renormalising the rest); otherwise a = -0.75 and out-of-image taps are clamped
  onto the edge pixel (GetWeightsAndIndices)."""
  m = np.zeros((out_size, in_size), np.float32)
  if in_size == 0 or out_size == 0:
    return m
  keys = bool(half_pixel_centers)
  table = _coeffs_table(-0.5 if keys else -0.75)
  scale = resize_scale(in_size, out_size, align_corners)
  for o in range(out_size):
    if keys:
      src = (np.float32(o) + np.float32(0.5)) * scale - np.float32(0.5)
    else:
      src = np.float32(o) * scale
    loc = int(np.floor(src))
    delta = np.float32(src - np.float32(loc))
    off = int(np.rint(delta * np.float32(_TABLE)))   # lrintf: halves to even
    ws = [table[off, 1], table[off, 0], table[_TABLE - off, 0], table[_TABLE - off, 1]]
    idx = [loc - 1, loc, loc + 1, loc + 2]
    bounded = [min(in_size - 1, max(0, i)) for i in idx]
    if keys:
      ws = [w if b == i else np.float32(0) for w, b, i in zip(ws, bounded, idx)]
      total = np.float32(ws[0] + ws[1] + ws[2] + ws[3])
      if abs(total) >= 1000.0 * np.finfo(np.float32).tiny:
        inv = np.float32(1.0) / total
        ws = [np.float32(w * inv) for w in ws]
    for w, b in zip(ws, bounded):
      m[o, b] += w
  return m


@functools.lru_cache(maxsize=None)
def area_matrix(in_size, out_size, align_corners) -> np.ndarray:
  """(out_size, in_size) float32 coverage of each source cell (TF's ResizeArea, before
  the final 1 / (height_scale * width_scale)); cells past the edge are clamped
  onto it."""
  m = np.zeros((out_size, in_size), np.float32)
  if in_size == 0 or out_size == 0:
    return m
  s = resize_scale(in_size, out_size, align_corners)
  if s == 0:   # align_corners from one pixel: TF's output is that pixel
    m[:, 0] = 1
    return m
  for o in range(out_size):
    lo, hi = np.float32(o) * s, np.float32(o + 1) * s
    for i in range(int(np.floor(lo)), int(np.ceil(hi))):
      if i < lo:
        w = s if i + 1 > hi else np.float32(i + 1) - lo
      else:
        w = hi - np.float32(i) if i + 1 > hi else np.float32(1.0)
      m[o, min(in_size - 1, max(0, i))] += np.float32(w)
  return m


def _area_norm(h, w, oh, ow, align_corners) -> np.float32:
  """TF's 1 / (height_scale * width_scale); a zero scale (align_corners from one
  pixel, whose matrix copies that pixel) counts as 1."""
  sh, sw = resize_scale(h, oh, align_corners), resize_scale(w, ow, align_corners)
  sh, sw = (sh if sh != 0 else np.float32(1)), (sw if sw != 0 else np.float32(1))
  return np.float32(np.float64(1.0) / np.float64(sh * sw))


def _contract(x, my, mx):
  """sum_hw my[o, h] x[n, h, w, c] mx[p, w] in float32: rows first, then columns."""
  hi = lax.Precision.HIGHEST
  y = jnp.einsum("oh,nhwc->nowc", jnp.asarray(my), x, precision=hi)
  return jnp.einsum("pw,nowc->nopc", jnp.asarray(mx), y, precision=hi)


def _check(images, size, align_corners, half_pixel_centers=False):
  if align_corners and half_pixel_centers:
    raise ValueError("If half_pixel_centers is True, align_corners must be False.")
  if images.ndim != 4:
    raise ValueError(f"images must be 4-dimensional, got shape {images.shape}")
  oh, ow = (int(v) for v in size)
  if oh <= 0 or ow <= 0:
    raise ValueError(f"output dimensions must be positive, got {(oh, ow)}")
  return oh, ow


def resize_bicubic(images, *, size, align_corners=False, half_pixel_centers=False):
  """TF ResizeBicubic (float32 output)."""
  oh, ow = _check(images, size, align_corners, half_pixel_centers)
  _, h, w, _ = images.shape
  my = bicubic_matrix(h, oh, align_corners, half_pixel_centers)
  mx = bicubic_matrix(w, ow, align_corners, half_pixel_centers)
  return _contract(images.astype(jnp.float32), my, mx)


def resize_bicubic_grad(grads, original_image, *, align_corners=False,
                        half_pixel_centers=False):
  """TF ResizeBicubicGrad: the transpose of ResizeBicubic, in original_image's dtype."""
  if align_corners and half_pixel_centers:
    raise ValueError("If half_pixel_centers is True, align_corners must be False.")
  _, oh, ow, _ = grads.shape
  _, h, w, _ = original_image.shape
  my = bicubic_matrix(h, oh, align_corners, half_pixel_centers)
  mx = bicubic_matrix(w, ow, align_corners, half_pixel_centers)
  out = _contract(grads.astype(jnp.float32), my.T, mx.T)
  return out.astype(original_image.dtype)


def resize_area(images, *, size, align_corners=False):
  """TF ResizeArea: the area-weighted mean of the covered source cells (float32)."""
  oh, ow = _check(images, size, align_corners)
  _, h, w, _ = images.shape
  my = area_matrix(h, oh, align_corners)
  mx = area_matrix(w, ow, align_corners)
  scale = _area_norm(h, w, oh, ow, align_corners)
  return _contract(images.astype(jnp.float32), my, mx) * scale


# --------------------------------------------------------------------------
# Rules
# --------------------------------------------------------------------------

_GRAD_DTYPES = (np.dtype("float32"), np.dtype("float64"))


def _bicubic_transpose(ct, images, *, size, align_corners, half_pixel_centers):
  """``tf.ResizeBicubicGrad`` (which takes float32/float64 images; a float16 or
  bfloat16 image's cotangent is computed in float32 and cast)."""
  shape, dtype = rules.shape_of(images), rules.dtype_of(images)
  like = rules.zeros(shape, dtype if dtype in _GRAD_DTYPES else np.dtype("float32"))
  g = tfops.ResizeBicubicGrad(rules.instantiate(ct), like, align_corners=align_corners,
                              half_pixel_centers=half_pixel_centers)
  return [g if dtype in _GRAD_DTYPES else rules.cast_like(g, images)]


def _bicubic_grad_transpose(ct, grads, original_image, *, align_corners,
                            half_pixel_centers):
  size = tuple(rules.shape_of(grads)[1:3])
  ct = rules.instantiate(ct)
  return [tfops.ResizeBicubic(ct, size=size, align_corners=align_corners,
                              half_pixel_centers=half_pixel_centers) if U(grads) else None,
          None]


def _area_transpose(ct, images, *, size, align_corners):
  """No TF op is the transpose of ResizeArea (TF has no gradient for it): the
  cotangent is contracted with the transposed matrices (derived, not TF-named)."""
  _, h, w, _ = rules.shape_of(images)
  oh, ow = (int(v) for v in size)
  scale = _area_norm(h, w, oh, ow, align_corners)
  g = _contract(rules.instantiate(ct) * scale, area_matrix(h, oh, align_corners).T,
                area_matrix(w, ow, align_corners).T)
  return [g.astype(rules.dtype_of(images))]


# --------------------------------------------------------------------------
# Specs
# --------------------------------------------------------------------------

_RESIZE_DTYPES = ("float16", "bfloat16", "float32", "float64", "int8", "uint8", "int16",
                  "uint16", "int32", "int64")


def _resize_calls(st, half_pixel=True):
  @st.composite
  def draw_call(draw):
    dtype = draw(st.sampled_from(_RESIZE_DTYPES))
    shape = draw(st.shapes(min_rank=4, max_rank=4, min_side=1, max_side=4))
    align = draw(st.booleans())
    size = np.array([draw(st.integers(1, 7)), draw(st.integers(1, 7))], np.int32)
    # Integers in [-100, 100]: averaging full-range values to about 0 cancels, and
    # our contraction order (not TF's loop) shows in the last float32 digits.
    images = (draw(st.arrays(st.np_dtype(dtype), shape, min_value=0 if
                             st.np_dtype(dtype).kind == "u" else -100, max_value=100))
              if st.np_dtype(dtype).kind in "iu" else draw(_values(st, dtype, shape, bound=8.0)))
    call = dict(images=images, size=size,
                align_corners=align)
    if half_pixel:
      call["half_pixel_centers"] = False if align else draw(st.booleans())
    return call
  return draw_call()


def _bicubic_grad_calls(st):
  @st.composite
  def draw_call(draw):
    dtype = draw(st.sampled_from(("float32", "float64")))
    n, c = draw(st.integers(1, 2)), draw(st.integers(1, 2))
    orig = (draw(st.integers(1, 5)), draw(st.integers(1, 5)))
    resized = (draw(st.integers(1, 7)), draw(st.integers(1, 7)))
    align = draw(st.booleans())
    return dict(grads=draw(_values(st, "float32", (n,) + resized + (c,))),
                original_image=draw(_values(st, dtype, (n,) + orig + (c,))),
                align_corners=align,
                half_pixel_centers=False if align else draw(st.booleans()))
  return draw_call()


_ATTRS = ("align_corners", "half_pixel_centers")

def tf_resize_bicubic(images, size, **attrs):
  """The oracle of ResizeBicubic's spec: TF's op, on float16/bfloat16 images cast to
  float32 first (the kernel reads them as float32, so the values are TF's; TF gives
  half images no gradient, this gives TF's gradient of the float32 resize)."""
  import tensorflow as tf
  images = tf.convert_to_tensor(images)
  if images.dtype in (tf.float16, tf.bfloat16):
    images = tf.cast(images, tf.float32)
  return tf.raw_ops.ResizeBicubic(images=images, size=size, **attrs)


ResizeBicubic = define_op(
    "ResizeBicubic", resize_bicubic, family=FAMILY, static=("size",), attrs=_ATTRS,
    linear=True, transpose=_bicubic_transpose, batching=_fold_batching("ResizeBicubic"),
    spec=lambda st: st.Spec(
        _resize_calls(st), rtol=1e-5, atol=1e-5, oracle=tf_resize_bicubic,
        note="TF gives float16/bfloat16 images no gradient (None); ours is that of the "
             "float32 resize, so the oracle casts half images to float32 before TF's op "
             "(same values)."))

ResizeBicubicGrad = define_op(
    "ResizeBicubicGrad", resize_bicubic_grad, family=FAMILY, attrs=_ATTRS,
    jvp=(lambda t, grads, orig, **p: tfops.ResizeBicubicGrad(t, orig, **p), None),
    transpose=_bicubic_grad_transpose,
    batching=_fold_batching("ResizeBicubicGrad"),
    spec=lambda st: st.Spec(_bicubic_grad_calls(st), diff_args=("grads",), rtol=1e-5,
                            atol=1e-5, note="original_image gives only the shape and dtype."))

ResizeArea = define_op(
    "ResizeArea", resize_area, family=FAMILY, static=("size",), attrs=("align_corners",),
    linear=True, transpose=_area_transpose, batching=_fold_batching("ResizeArea"),
    spec=lambda st: st.Spec(_resize_calls(st, half_pixel=False), rtol=1e-5, atol=1e-5))
