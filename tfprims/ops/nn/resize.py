"""Image resizing (NHWC images): ResizeNearestNeighbor, ResizeBilinear and their gradient
ops. The index tables are numpy constants for known sizes; for symbolic ones (a model
served with unknown height and width, jax.export) the program computes them with the
same float32 arithmetic.

Index arithmetic is TF's, in float32 (align_corners, half_pixel_centers); bilinear
interpolation keeps TF's lerp order (top, bottom, then vertical) and returns float32.
The grad ops are the transposes of the forward impls (``jax.linear_transpose``) and a
scatter-add. JVPs are derived from the impls; vmap folds the batch axis into N.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np

from tfprims import rules
from tfprims.core import define_op
from tfprims.ops.shared import fold_batching
from tfprims.ops.shared_specs import bounded_values


def _resize_scale(xp, in_size, out_size, align_corners):
  f32 = lambda n: xp.asarray(n, xp.float32)
  if not align_corners:
    return f32(in_size) / f32(out_size)
  if type(out_size) is int:
    return f32(in_size - 1) / f32(out_size - 1) if out_size > 1 else f32(in_size) / f32(out_size)
  return xp.where(f32(out_size) > 1, f32(in_size - 1) / f32(out_size - 1),
                  f32(in_size) / f32(out_size))


def _sources(xp, out_size):
  return (xp.arange(out_size, dtype=np.float32) if xp is np
          else jax.lax.iota(np.float32, out_size))


def _nearest_indices(in_size, out_size, align_corners, half_pixel_centers):
  xp = rules.numpy_for((in_size, out_size))  # same float32 arithmetic either way
  scale = _resize_scale(xp, in_size, out_size, align_corners)
  x = _sources(xp, out_size)
  src = (x + np.float32(0.5)) * scale if half_pixel_centers else x * scale
  src = src.astype(np.float32)
  # roundf rounds halves away from zero; sources are >= 0 here.
  idx = xp.floor(src + np.float32(0.5)) if align_corners else xp.floor(src)
  idx = xp.minimum(idx.astype(np.int32), xp.asarray(in_size - 1, np.int32))
  if half_pixel_centers:
    idx = xp.maximum(idx, 0)
  return idx.astype(np.int32)


def _bilinear_weights(in_size, out_size, align_corners, half_pixel_centers):
  xp = rules.numpy_for((in_size, out_size))
  scale = _resize_scale(xp, in_size, out_size, align_corners)
  x = _sources(xp, out_size)
  src = ((x + np.float32(0.5)) * scale - np.float32(0.5) if half_pixel_centers
         else x * scale).astype(np.float32)
  fl = xp.floor(src)
  lower = xp.maximum(fl.astype(np.int32), 0)
  upper = xp.minimum(xp.ceil(src).astype(np.int32), xp.asarray(in_size - 1, np.int32))
  return lower.astype(np.int32), upper.astype(np.int32), (src - fl).astype(np.float32)


def _check_resize(images, size, align_corners, half_pixel_centers):
  if align_corners and half_pixel_centers:
    raise ValueError("align_corners and half_pixel_centers cannot both be true")
  if images.ndim != 4:
    raise ValueError(f"images must be 4-D (NHWC), got shape {images.shape}")
  return rules.sizes(size)


def resize_nearest_neighbor(images, *, size, align_corners=False, half_pixel_centers=False):
  """TF ResizeNearestNeighbor (index arithmetic in float32, like TF)."""
  oh, ow = _check_resize(images, size, align_corners, half_pixel_centers)
  _, h, w, _ = images.shape
  if 0 in (h, w, oh, ow):
    return jnp.zeros((images.shape[0], oh, ow, images.shape[3]), images.dtype)
  out = jnp.take(images, _nearest_indices(h, oh, align_corners, half_pixel_centers), axis=1)
  return jnp.take(out, _nearest_indices(w, ow, align_corners, half_pixel_centers), axis=2)


def resize_bilinear(images, *, size, align_corners=False, half_pixel_centers=False):
  """TF ResizeBilinear: float32 output, TF's lerp order (top, bottom, then vertical)."""
  oh, ow = _check_resize(images, size, align_corners, half_pixel_centers)
  _, h, w, _ = images.shape
  if 0 in (h, w, oh, ow):
    return jnp.zeros((images.shape[0], oh, ow, images.shape[3]), jnp.float32)
  x = images.astype(jnp.float32)
  y0, y1, ly = _bilinear_weights(h, oh, align_corners, half_pixel_centers)
  x0, x1, lx = _bilinear_weights(w, ow, align_corners, half_pixel_centers)
  top, bottom = jnp.take(x, y0, axis=1), jnp.take(x, y1, axis=1)
  tl, tr = jnp.take(top, x0, axis=2), jnp.take(top, x1, axis=2)
  bl, br = jnp.take(bottom, x0, axis=2), jnp.take(bottom, x1, axis=2)
  lx = lx.reshape(1, 1, ow, 1)
  ly = ly.reshape(1, oh, 1, 1)
  t = tl + (tr - tl) * lx
  b = bl + (br - bl) * lx
  return t + (b - t) * ly


def _resize_calls(st, dtypes):
  @st.composite
  def draw_call(draw):
    dtype = draw(st.sampled_from(dtypes))
    shape = draw(st.shapes(min_rank=4, max_rank=4, min_side=1, max_side=4))
    align = draw(st.booleans())
    half = False if align else draw(st.booleans())
    size = np.array([draw(st.integers(1, 7)), draw(st.integers(1, 7))], np.int32)
    return dict(images=draw(bounded_values(st, dtype, shape, bound=8.0)), size=size,
                align_corners=align, half_pixel_centers=half)
  return draw_call()


_RESIZE_ATTRS = ("align_corners", "half_pixel_centers")

ResizeNearestNeighbor = define_op(
    "ResizeNearestNeighbor", resize_nearest_neighbor, family="nn", static=("size",),
    attrs=_RESIZE_ATTRS, batching=fold_batching("ResizeNearestNeighbor"),
    spec=lambda st: st.Spec(_resize_calls(
        st, ("float16", "bfloat16", "float32", "float64", "int8", "uint8", "int16", "uint16",
             "int32", "int64"))))

ResizeBilinear = define_op(
    "ResizeBilinear", resize_bilinear, family="nn", static=("size",), attrs=_RESIZE_ATTRS,
    batching=fold_batching("ResizeBilinear"),
    spec=lambda st: st.Spec(_resize_calls(
        st, ("float16", "bfloat16", "float32", "float64", "int8", "uint8", "int16", "uint16",
             "int32", "int64")), rtol=1e-5, atol=1e-5, grad_oracle="vjp",
        grad_rtol={"float32": 2e-2}, grad_atol={"float32": 2e-2},
        note="TF's forward mode gives a zero tangent for float16/bfloat16 images (float32 "
             "output); the JVP is checked against GradientTape, whose gradient is rounded "
             "to the images' dtype (hence the loose float32 derivative tolerance)."))


def resize_bilinear_grad(grads, original_image, *, align_corners=False,
                         half_pixel_centers=False):
  """TF ResizeBilinearGrad: the transpose of ResizeBilinear (float32 grads), in the
  original image's dtype."""
  oh, ow = grads.shape[1:3]
  f = functools.partial(resize_bilinear, size=(oh, ow), align_corners=align_corners,
                        half_pixel_centers=half_pixel_centers)
  shape = jax.ShapeDtypeStruct(original_image.shape, jnp.float32)
  return jax.linear_transpose(f, shape)(grads.astype(jnp.float32))[0].astype(
      original_image.dtype)


def resize_nearest_neighbor_grad(grads, *, size, align_corners=False, half_pixel_centers=False):
  """TF ResizeNearestNeighborGrad: grads summed into the source pixels (in grads' dtype)."""
  h, w = rules.sizes(size)
  n, gh, gw, c = grads.shape
  if align_corners and half_pixel_centers:
    raise ValueError("align_corners and half_pixel_centers cannot both be true")
  out = jnp.zeros((n, h, w, c), grads.dtype)
  if 0 in (h, w, gh, gw):
    return out
  iy = _nearest_indices(h, gh, align_corners, half_pixel_centers)
  ix = _nearest_indices(w, gw, align_corners, half_pixel_centers)
  return out.at[:, iy[:, None], ix[None, :], :].add(grads)


def _resize_grad_calls(st, op_type, dtypes):
  @st.composite
  def draw_call(draw):
    dtype = draw(st.sampled_from(dtypes))
    n, c = draw(st.integers(1, 2)), draw(st.integers(1, 2))
    orig = (draw(st.integers(1, 5)), draw(st.integers(1, 5)))
    resized = (draw(st.integers(1, 7)), draw(st.integers(1, 7)))
    align = draw(st.booleans())
    attrs = dict(align_corners=align, half_pixel_centers=False if align else draw(st.booleans()))
    if op_type == "ResizeBilinearGrad":
      return dict(grads=draw(bounded_values(st, "float32", (n,) + resized + (c,))),
                  original_image=draw(bounded_values(st, dtype, (n,) + orig + (c,))), **attrs)
    return dict(grads=draw(bounded_values(st, dtype, (n,) + resized + (c,))),
                size=np.array(orig, np.int32), **attrs)
  return draw_call()


ResizeBilinearGrad = define_op(
    "ResizeBilinearGrad", resize_bilinear_grad, family="nn", attrs=_RESIZE_ATTRS,
    batching=fold_batching("ResizeBilinearGrad"),
    spec=lambda st: st.Spec(
        _resize_grad_calls(st, "ResizeBilinearGrad",
                           ("float16", "bfloat16", "float32", "float64")),
        diff_args=("grads",), rtol=1e-5, atol=1e-5,
        note="original_image gives only the shape and dtype."))

ResizeNearestNeighborGrad = define_op(
    "ResizeNearestNeighborGrad", resize_nearest_neighbor_grad, family="nn", static=("size",),
    attrs=_RESIZE_ATTRS, batching=fold_batching("ResizeNearestNeighborGrad"),
    spec=lambda st: st.Spec(_resize_grad_calls(
        st, "ResizeNearestNeighborGrad",
        ("float16", "bfloat16", "float32", "float64", "int8", "uint8", "int32")),
        rtol={"float16": 1e-2, "bfloat16": 5e-2}, atol={"float16": 1e-2, "bfloat16": 5e-2}))
