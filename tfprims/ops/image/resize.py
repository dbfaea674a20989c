"""Image resizing (NHWC images): ResizeNearestNeighbor, ResizeBilinear and their gradient
ops; ResizeBicubic, ResizeBicubicGrad and ResizeArea.

Index arithmetic is TF's, in float32 (align_corners, half_pixel_centers). The index and
weight tables are computed with numpy at trace time for known sizes; for symbolic ones
(a model served with unknown height and width, jax.export) the program computes them
with jax.numpy, in the same float32 arithmetic.

Nearest neighbor and bilinear resizes gather source pixels; bilinear interpolation keeps
TF's lerp order (top, bottom, then vertical) and returns float32. Their grad ops are
the transposes of the forward impls (``jax.linear_transpose``) and a scatter-add; JVPs
are derived from the impls.

Bicubic and area resizes are separable: the weights TF's CPU kernel gives every
(output, input) row and column pair (bicubic: TF's 1025-entry coefficient table and its
rounding of the sample offset; area: the coverage of each source cell) make two weight
matrices the image is contracted with in float32 (rows, then columns, as TF). The
output is float32 for every input dtype, as TF's. ResizeBicubic is linear in the images
(its transpose is ``tf.ResizeBicubicGrad``, whose transpose is ``tf.ResizeBicubic``);
ResizeArea has no TF gradient op, its transpose contracts with the transposed matrices
(derived).

Batching folds the vmapped axis into N (every resize op).
"""

from __future__ import annotations

import functools
import operator

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from tfprims import rules
from tfprims.core import register_op, tfops
from tfprims.ops.image._common import FAMILY, separable_resample, tap_counts, weight_counts
from tfprims.ops.image._specs import with_nonfinite
from tfprims.ops.shared import fold_batching
from tfprims.ops.shared_specs import bounded_values
from tfprims.rules import U
from tfprims.errors import import_tensorflow


# --- what every resize shares: kept attrs, index arithmetic -------------------------------

#: The attrs the resize ops keep (ResizeArea: align_corners only).
_RESIZE_ATTRS = ("align_corners", "half_pixel_centers")


def _resize_scale(xp, in_size, out_size, align_corners):
  f32 = lambda n: xp.asarray(n, xp.float32)
  if not align_corners:
    return f32(in_size) / f32(out_size)
  if type(out_size) is int:
    return f32(in_size - 1) / f32(out_size - 1) if out_size > 1 else f32(in_size) / f32(out_size)
  return xp.where(
    f32(out_size) > 1, f32(in_size - 1) / f32(out_size - 1), f32(in_size) / f32(out_size)
  )


def _sources(xp, out_size):
  return xp.arange(out_size, dtype=np.float32) if xp is np else jax.lax.iota(np.float32, out_size)


# --- ResizeNearestNeighbor, ResizeBilinear and their grad ops ---------------------------


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
  src = (
    (x + np.float32(0.5)) * scale - np.float32(0.5) if half_pixel_centers else x * scale
  ).astype(np.float32)
  fl = xp.floor(src)
  lower = xp.maximum(fl.astype(np.int32), 0)
  upper = xp.minimum(xp.ceil(src).astype(np.int32), xp.asarray(in_size - 1, np.int32))
  return lower.astype(np.int32), upper.astype(np.int32), (src - fl).astype(np.float32)


#: TF's kernel message (ImageResizerState), kept verbatim for regexes written against TF.
#: tf2jax's phrase beside it.
_BOTH_TRUE = (
  "If half_pixel_centers is True, align_corners must be False "
  "(align_corners=True and half_pixel_centers=True are not supported)"
)


def _check_resize(images, size, align_corners, half_pixel_centers):
  if align_corners and half_pixel_centers:
    raise ValueError(_BOTH_TRUE)
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


def _nearest_bilinear_calls(st, dtypes):
  @st.composite
  def draw_call(draw):
    dtype = draw(st.sampled_from(dtypes))
    shape = draw(st.shapes(min_rank=4, max_rank=4, min_side=1, max_side=4))
    align = draw(st.booleans())
    half = False if align else draw(st.booleans())
    size = np.array([draw(st.integers(1, 7)), draw(st.integers(1, 7))], np.int32)
    return dict(
      images=draw(bounded_values(st, dtype, shape, bound=8.0)),
      size=size,
      align_corners=align,
      half_pixel_centers=half,
    )

  return draw_call()


ResizeNearestNeighbor = register_op(
  "ResizeNearestNeighbor",
  resize_nearest_neighbor,
  family=FAMILY,
  static=("size",),
  attrs=_RESIZE_ATTRS,
  batching=rules.per_op(fold_batching),
  spec=lambda st: st.Spec(
    _nearest_bilinear_calls(
      st,
      (
        "float16",
        "bfloat16",
        "float32",
        "float64",
        "int8",
        "uint8",
        "int16",
        "uint16",
        "int32",
        "int64",
      ),
    )
  ),
)

ResizeBilinear = register_op(
  "ResizeBilinear",
  resize_bilinear,
  family=FAMILY,
  static=("size",),
  attrs=_RESIZE_ATTRS,
  batching=rules.per_op(fold_batching),
  spec=lambda st: st.Spec(
    _nearest_bilinear_calls(
      st,
      (
        "float16",
        "bfloat16",
        "float32",
        "float64",
        "int8",
        "uint8",
        "int16",
        "uint16",
        "int32",
        "int64",
      ),
    ),
    rtol=1e-5,
    atol=1e-5,
    grad_oracle="vjp",
    grad_rtol={"float32": 2e-2},
    grad_atol={"float32": 2e-2},
    note="TF's forward mode gives a zero tangent for float16/bfloat16 images (float32 "
    "output); the JVP is checked against GradientTape, whose gradient is rounded "
    "to the images' dtype (hence the loose float32 derivative tolerance).",
  ),
)


def resize_bilinear_grad(grads, original_image, *, align_corners=False, half_pixel_centers=False):
  """TF ResizeBilinearGrad: the transpose of ResizeBilinear (float32 grads), in the
  original image's dtype."""
  oh, ow = grads.shape[1:3]
  f = functools.partial(
    resize_bilinear,
    size=(oh, ow),
    align_corners=align_corners,
    half_pixel_centers=half_pixel_centers,
  )
  shape = jax.ShapeDtypeStruct(original_image.shape, jnp.float32)
  return jax.linear_transpose(f, shape)(grads.astype(jnp.float32))[0].astype(original_image.dtype)


def resize_nearest_neighbor_grad(grads, *, size, align_corners=False, half_pixel_centers=False):
  """TF ResizeNearestNeighborGrad: grads summed into the source pixels (in grads' dtype)."""
  h, w = rules.sizes(size)
  n, gh, gw, c = grads.shape
  if align_corners and half_pixel_centers:
    raise ValueError(_BOTH_TRUE)
  out = jnp.zeros((n, h, w, c), grads.dtype)
  if 0 in (h, w, gh, gw):
    return out
  iy = _nearest_indices(h, gh, align_corners, half_pixel_centers)
  ix = _nearest_indices(w, gw, align_corners, half_pixel_centers)
  return out.at[:, iy[:, None], ix[None, :], :].add(grads)


def _nearest_bilinear_grad_calls(st, op_type, dtypes):
  @st.composite
  def draw_call(draw):
    dtype = draw(st.sampled_from(dtypes))
    n, c = draw(st.integers(1, 2)), draw(st.integers(1, 2))
    orig = (draw(st.integers(1, 5)), draw(st.integers(1, 5)))
    resized = (draw(st.integers(1, 7)), draw(st.integers(1, 7)))
    align = draw(st.booleans())
    attrs = dict(align_corners=align, half_pixel_centers=False if align else draw(st.booleans()))
    if op_type == "ResizeBilinearGrad":
      return dict(
        grads=draw(bounded_values(st, "float32", (n,) + resized + (c,))),
        original_image=draw(bounded_values(st, dtype, (n,) + orig + (c,))),
        **attrs,
      )
    return dict(
      grads=draw(bounded_values(st, dtype, (n,) + resized + (c,))),
      size=np.array(orig, np.int32),
      **attrs,
    )

  return draw_call()


ResizeBilinearGrad = register_op(
  "ResizeBilinearGrad",
  resize_bilinear_grad,
  family=FAMILY,
  attrs=_RESIZE_ATTRS,
  batching=rules.per_op(fold_batching),
  spec=rules.per_op(
    lambda op: (
      lambda st: st.Spec(
        _nearest_bilinear_grad_calls(st, op.op_type, ("float16", "bfloat16", "float32", "float64")),
        diff_args=("grads",),
        rtol=1e-5,
        atol=1e-5,
        note="original_image gives only the shape and dtype.",
      )
    )
  ),
)

ResizeNearestNeighborGrad = register_op(
  "ResizeNearestNeighborGrad",
  resize_nearest_neighbor_grad,
  family=FAMILY,
  static=("size",),
  attrs=_RESIZE_ATTRS,
  batching=rules.per_op(fold_batching),
  spec=rules.per_op(
    lambda op: (
      lambda st: st.Spec(
        _nearest_bilinear_grad_calls(
          st, op.op_type, ("float16", "bfloat16", "float32", "float64", "int8", "uint8", "int32")
        ),
        rtol={"float16": 1e-2, "bfloat16": 5e-2},
        atol={"float16": 1e-2, "bfloat16": 5e-2},
      )
    )
  ),
)


# --- ResizeBicubic, ResizeBicubicGrad, ResizeArea ----------------------------------------

_TABLE = 1024


@functools.lru_cache(maxsize=None)
def _coeffs_table(a: float) -> np.ndarray:
  """TF's bicubic table (InitCoeffsTable): rows (w(x), w(x + 1)) for x = i / 1024,
  evaluated in double from float x and stored as float."""
  x = (np.arange(_TABLE + 1, dtype=np.float64) / _TABLE).astype(np.float32).astype(np.float64)
  w0 = ((a + 2) * x - (a + 3)) * x * x + 1
  x1 = (x.astype(np.float32) + np.float32(1.0)).astype(np.float64)
  w1 = ((a * x1 - 5 * a) * x1 + 8 * a) * x1 - 4 * a
  return np.stack([w0, w1], axis=1).astype(np.float32)


def _bicubic_taps(xp, in_size, out_size, align_corners, half_pixel_centers):
  """TF's GetWeightsAndIndices along one axis, every output row at once, with numpy
  (known sizes) or jax.numpy (a symbolic size of a jax.export): the same float32
  arithmetic. Returns the 4 taps' float32 weights and (clamped) input indices.

  half_pixel_centers uses Keys' a = -0.5 and gives out-of-image taps zero weight
  (renormalising the rest); otherwise a = -0.75 and out-of-image taps are clamped
  onto the edge pixel."""
  f32 = np.float32
  keys = bool(half_pixel_centers)
  table = _coeffs_table(-0.5 if keys else -0.75)
  scale = _resize_scale(xp, in_size, out_size, align_corners)
  o = _sources(xp, out_size)
  src = ((o + f32(0.5)) * scale - f32(0.5) if keys else o * scale).astype(f32)
  floor = xp.floor(src)
  delta = (src - floor).astype(f32)
  off = xp.rint(delta * f32(_TABLE)).astype(np.int32)  # lrintf: halves to even
  loc = floor.astype(np.int32)
  near, far = xp.asarray(table[:, 0]), xp.asarray(table[:, 1])
  ws = [far[off], near[off], near[_TABLE - off], far[_TABLE - off]]
  idx = [loc - 1, loc, loc + 1, loc + 2]
  last = xp.asarray(in_size - 1, np.int32)
  bounded = [xp.minimum(xp.maximum(i, 0), last) for i in idx]
  zero = f32(0)
  if keys:
    ws = [xp.where(b == i, w, zero) for w, b, i in zip(ws, bounded, idx)]
    total = (((ws[0] + ws[1]) + ws[2]) + ws[3]).astype(f32)
    normal = xp.abs(total) >= f32(1000.0) * np.finfo(f32).tiny
    inv = f32(1.0) / xp.where(normal, total, f32(1))
    ws = [xp.where(normal, (w * inv).astype(f32), w) for w in ws]
  return ws, bounded


def _bicubic_weights(xp, in_size, out_size, align_corners, half_pixel_centers):
  """(out_size, in_size) float32 weights of TF's ResizeBicubic along one axis (numpy
  or jax.numpy, as :func:`_bicubic_taps`); taps landing on one pixel add up in TF's
  order."""
  ws, bounded = _bicubic_taps(xp, in_size, out_size, align_corners, half_pixel_centers)
  columns = xp.arange(in_size)[None, :]
  m = xp.zeros((out_size, in_size), np.float32)
  for w, b in zip(ws, bounded):
    m = m + xp.where(b[:, None] == columns, w[:, None], np.float32(0))
  return m.astype(np.float32)


def _bicubic_counts(xp, in_size, out_size, align_corners, half_pixel_centers):
  """:func:`tap_counts` of ResizeBicubic along one axis: TF multiplies all 4 taps,
  the zero-weight ones (a sample on a pixel centre, out-of-image taps with
  half_pixel_centers) and each tap clamped onto the edge pixel separately."""
  ws, bounded = _bicubic_taps(xp, in_size, out_size, align_corners, half_pixel_centers)
  columns = xp.arange(in_size)[None, :]
  hits = [b[:, None] == columns for b in bounded]
  count = lambda select: sum(
    xp.where(h & select(w)[:, None], np.float32(1), np.float32(0)) for w, h in zip(ws, hits)
  )
  return tap_counts(count(lambda w: w == w), count(lambda w: w > 0), count(lambda w: w < 0))


@functools.lru_cache(maxsize=None)
def bicubic_matrix(in_size, out_size, align_corners, half_pixel_centers) -> np.ndarray:
  """:func:`_bicubic_weights` for known sizes (a cached numpy table)."""
  if in_size == 0 or out_size == 0:
    return np.zeros((out_size, in_size), np.float32)
  return _bicubic_weights(np, in_size, out_size, align_corners, half_pixel_centers)


@functools.lru_cache(maxsize=None)
def bicubic_counts(in_size, out_size, align_corners, half_pixel_centers):
  """:func:`_bicubic_counts` for known sizes (cached numpy tables)."""
  if in_size == 0 or out_size == 0:
    return tap_counts(*[np.zeros((out_size, in_size), np.float32)] * 3)
  return _bicubic_counts(np, in_size, out_size, align_corners, half_pixel_centers)


def _area_weights(xp, in_size, out_size, align_corners):
  """(out_size, in_size) float32 coverage of each source cell (TF's ResizeArea, before
  the final 1 / (height_scale * width_scale)), numpy or jax.numpy as
  :func:`_bicubic_weights`. Output row o covers [o * s, (o + 1) * s); cells past the
  edge are clamped onto it, adding up in TF's order. Without align_corners float32
  rounding reaches at most one such cell; with it a row reaches up to 2 * in_size
  cells, a count that needs a concrete size."""
  f32 = np.float32
  s = _resize_scale(xp, in_size, out_size, align_corners)
  o = _sources(xp, out_size)[:, None]
  lo, hi = (o * s).astype(f32), ((o + f32(1)) * s).astype(f32)
  past = 2 * operator.index(in_size) + 1 - in_size if align_corners else 1
  cells = _sources(xp, in_size + past)[None, :]
  covered = (cells >= xp.floor(lo)) & (cells < xp.ceil(hi))
  w = xp.where(
    cells < lo,
    xp.where(cells + f32(1) > hi, s, (cells + f32(1) - lo).astype(f32)),
    xp.where(cells + f32(1) > hi, (hi - cells).astype(f32), f32(1)),
  )
  w = xp.where(covered, w.astype(f32), f32(0))
  # static slices of w (lax's take a symbolic size, jax.numpy's indexing does not)
  columns = lambda start, stop: (
    lax.slice_in_dim(w, start, stop, axis=1) if xp is jnp else w[:, start:stop]
  )
  edge = columns(in_size - 1, in_size)
  for k in range(past):
    edge = (edge + columns(in_size + k, in_size + k + 1)).astype(f32)
  m = xp.concatenate([columns(0, in_size - 1), edge], axis=1)
  # align_corners from one pixel (a zero scale): TF's output is that pixel
  first = (xp.arange(in_size)[None, :] == 0).astype(f32)
  return xp.where(s == 0, xp.broadcast_to(first, m.shape), m).astype(f32)


@functools.lru_cache(maxsize=None)
def area_matrix(in_size, out_size, align_corners) -> np.ndarray:
  """:func:`_area_weights` for known sizes (a cached numpy table)."""
  if in_size == 0 or out_size == 0:
    return np.zeros((out_size, in_size), np.float32)
  return _area_weights(np, in_size, out_size, align_corners)


def _area_norm(xp, h, w, oh, ow, align_corners):
  """TF's 1 / (height_scale * width_scale); a zero scale (align_corners from one
  pixel, whose matrix copies that pixel) counts as 1. (TF divides in double: its
  float32 rounding is the float32 division's, as double has more than 2 * 24 + 2 bits.)"""
  f32 = np.float32
  sh = _resize_scale(xp, h, oh, align_corners)
  sw = _resize_scale(xp, w, ow, align_corners)
  sh, sw = xp.where(sh != 0, sh, f32(1)), xp.where(sw != 0, sw, f32(1))
  return (f32(1) / (sh * sw).astype(f32)).astype(f32)


def _per_axis(cached, traced, h, w, oh, ow, *args):
  """``(rows, columns)`` tables: ``cached(in, out, *args)`` for known sizes, else
  ``traced(jnp, in, out, *args)`` (symbolic sizes of a jax.export)."""
  if rules.known((h, w, oh, ow)):
    return cached(h, oh, *args), cached(w, ow, *args)
  return traced(jnp, h, oh, *args), traced(jnp, w, ow, *args)


def _bicubic_tables(h, w, oh, ow, align_corners, half_pixel_centers):
  return _per_axis(
    bicubic_matrix, _bicubic_weights, h, w, oh, ow, align_corners, half_pixel_centers
  )


def _bicubic_tap_counts(h, w, oh, ow, align_corners, half_pixel_centers):
  """The rows' and columns' :func:`tap_counts` of a ResizeBicubic."""
  return _per_axis(bicubic_counts, _bicubic_counts, h, w, oh, ow, align_corners, half_pixel_centers)


def _area_tables(h, w, oh, ow, align_corners):
  """The row and column tables and the normalisation of a ResizeArea."""
  if rules.known((h, w, oh, ow)):
    return (
      area_matrix(h, oh, align_corners),
      area_matrix(w, ow, align_corners),
      _area_norm(np, h, w, oh, ow, align_corners),
    )
  return (
    _area_weights(jnp, h, oh, align_corners),
    _area_weights(jnp, w, ow, align_corners),
    _area_norm(jnp, h, w, oh, ow, align_corners),
  )


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
  oh, ow = rules.sizes(size)  # symbolic dims too (twice tf.shape under jax.export)
  if rules.known((oh, ow)) and (oh <= 0 or ow <= 0):
    raise ValueError(f"output dimensions must be positive, got {(oh, ow)}")
  return oh, ow


def resize_bicubic(images, *, size, align_corners=False, half_pixel_centers=False):
  """TF ResizeBicubic (float32 output)."""
  oh, ow = _check(images, size, align_corners, half_pixel_centers)
  _, h, w, _ = images.shape
  my, mx = _bicubic_tables(h, w, oh, ow, align_corners, half_pixel_centers)
  return separable_resample(
    images.astype(jnp.float32),
    lambda x: _contract(x, my, mx),
    lambda: _bicubic_tap_counts(h, w, oh, ow, align_corners, half_pixel_centers),
  )


def resize_bicubic_grad(grads, original_image, *, align_corners=False, half_pixel_centers=False):
  """TF ResizeBicubicGrad: the transpose of ResizeBicubic, in original_image's dtype."""
  if align_corners and half_pixel_centers:
    raise ValueError("If half_pixel_centers is True, align_corners must be False.")
  _, oh, ow, _ = grads.shape
  _, h, w, _ = original_image.shape
  my, mx = _bicubic_tables(h, w, oh, ow, align_corners, half_pixel_centers)

  def contract(g):
    out = _contract(g, my.T, mx.T)
    # TF's kernel adds every tap onto a zeroed output: an exact zero is +0.0
    return jnp.where(out == 0, jnp.float32(0), out)

  # TF scatters each gradient to its 16 taps (zero weights too): the forward's taps
  counts = lambda: tuple(
    tuple(m.T for m in axis)
    for axis in _bicubic_tap_counts(h, w, oh, ow, align_corners, half_pixel_centers)
  )
  out = separable_resample(grads.astype(jnp.float32), contract, counts)
  return out.astype(original_image.dtype)


def resize_area(images, *, size, align_corners=False):
  """TF ResizeArea: the area-weighted mean of the covered source cells (float32)."""
  oh, ow = _check(images, size, align_corners)
  _, h, w, _ = images.shape
  my, mx, scale = _area_tables(h, w, oh, ow, align_corners)
  # TF reads each covered cell (cells past the edge clamped onto it) with a positive
  # weight: a non-finite cell reaches exactly the outputs whose weight for it is > 0
  return separable_resample(
    images.astype(jnp.float32),
    lambda x: _contract(x, my, mx) * scale,
    lambda: (weight_counts(my != 0, my), weight_counts(mx != 0, mx)),
  )


# --------------------------------------------------------------------------
# Rules
# --------------------------------------------------------------------------

_GRAD_DTYPES = (np.dtype("float32"), np.dtype("float64"))


def _bicubic_transpose(ct, images, *, size, align_corners, half_pixel_centers):
  """``tf.ResizeBicubicGrad`` (which takes float32/float64 images; a float16 or
  bfloat16 image's cotangent is computed in float32 and cast)."""
  shape, dtype = rules.shape_of(images), rules.dtype_of(images)
  like = rules.zeros(shape, dtype if dtype in _GRAD_DTYPES else np.dtype("float32"))
  g = tfops.ResizeBicubicGrad(
    rules.instantiate(ct), like, align_corners=align_corners, half_pixel_centers=half_pixel_centers
  )
  return [g if dtype in _GRAD_DTYPES else rules.cast_like(g, images)]


def _bicubic_grad_transpose(ct, grads, original_image, *, align_corners, half_pixel_centers):
  size = tuple(rules.shape_of(grads)[1:3])
  ct = rules.instantiate(ct)
  return [
    tfops.ResizeBicubic(
      ct, size=size, align_corners=align_corners, half_pixel_centers=half_pixel_centers
    )
    if U(grads)
    else None,
    None,
  ]


def _area_transpose(ct, images, *, size, align_corners):
  """No TF op is the transpose of ResizeArea (TF has no gradient for it): the
  cotangent is contracted with the transposed matrices (derived, not TF-named)."""
  _, h, w, _ = rules.shape_of(images)
  oh, ow = rules.sizes(size)
  my, mx, scale = _area_tables(h, w, oh, ow, align_corners)
  g = _contract(rules.instantiate(ct) * scale, my.T, mx.T)
  return [g.astype(rules.dtype_of(images))]


# --------------------------------------------------------------------------
# Specs
# --------------------------------------------------------------------------

_RESIZE_DTYPES = (
  "float16",
  "bfloat16",
  "float32",
  "float64",
  "int8",
  "uint8",
  "int16",
  "uint16",
  "int32",
  "int64",
)


def _resize_calls(st, half_pixel=True):
  @st.composite
  def draw_call(draw):
    dtype = draw(st.sampled_from(_RESIZE_DTYPES))
    shape = draw(st.shapes(min_rank=4, max_rank=4, min_side=1, max_side=4))
    align = draw(st.booleans())
    size = np.array([draw(st.integers(1, 7)), draw(st.integers(1, 7))], np.int32)
    # Integers in [-100, 100]: averaging full-range values to about 0 cancels, and
    # our contraction order (not TF's loop) shows in the last float32 digits.
    images = (
      draw(
        st.arrays(
          st.np_dtype(dtype),
          shape,
          min_value=0 if st.np_dtype(dtype).kind == "u" else -100,
          max_value=100,
        )
      )
      if st.np_dtype(dtype).kind in "iu"
      else with_nonfinite(st, draw, draw(bounded_values(st, dtype, shape, bound=8.0)))
    )
    call = dict(images=images, size=size, align_corners=align)
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
    return dict(
      grads=with_nonfinite(st, draw, draw(bounded_values(st, "float32", (n,) + resized + (c,)))),
      original_image=draw(bounded_values(st, dtype, (n,) + orig + (c,))),
      align_corners=align,
      half_pixel_centers=False if align else draw(st.booleans()),
    )

  return draw_call()


def _nonfinite_cases(op_type):
  """Canonical calls: +inf, -inf and NaN pixels in rows sampled on pixel centres (the
  zero-weight taps TF multiplies: 0 * inf is NaN) and at the edge."""
  row = np.array([1, 2, np.inf, 3, 4, 5, -np.inf, 6], np.float32)
  image = np.stack([row, np.roll(row, 3), np.where(row == 4, np.nan, row)])[None, :, :, None]
  size = np.array([5, 11], np.int32)
  if op_type == "ResizeBicubicGrad":
    grads = np.tile(row[None, :6], (5, 2))[None, :, :11, None]
    return [
      dict(
        grads=grads,
        original_image=np.zeros((1, 3, 8, 1), np.float32),
        align_corners=False,
        half_pixel_centers=hp,
      )
      for hp in (False, True)
    ]
  if op_type == "ResizeArea":
    return [dict(images=image, size=np.array([2, 3], np.int32), align_corners=False)]
  return [
    dict(images=image, size=size, align_corners=False, half_pixel_centers=hp)
    for hp in (False, True)
  ]


_BICUBIC_ZERO_SIGN = (
  "an exact zero output: TF's kernel sums each output's 4 x 4 taps in order without a "
  "+0.0 start (all taps -0.0 products give -0.0; weights of taps clamped onto one pixel "
  "multiply it separately), ours contracts with the merged weight matrices, whose "
  "accumulation keeps neither order"
)


def tf_resize_bicubic(images, size, **attrs):
  """The oracle of ResizeBicubic's spec: TF's op, on float16/bfloat16 images cast to
  float32 first (the kernel reads them as float32, so the values are TF's; TF gives
  half images no gradient, this gives TF's gradient of the float32 resize)."""
  tf = import_tensorflow()
  images = tf.convert_to_tensor(images)
  if images.dtype in (tf.float16, tf.bfloat16):
    images = tf.cast(images, tf.float32)
  return tf.raw_ops.ResizeBicubic(images=images, size=size, **attrs)


ResizeBicubic = register_op(
  "ResizeBicubic",
  resize_bicubic,
  family=FAMILY,
  static=("size",),
  attrs=_RESIZE_ATTRS,
  linear=True,
  transpose=_bicubic_transpose,
  batching=rules.per_op(fold_batching),
  spec=rules.per_op(
    lambda op: (
      lambda st: st.Spec(
        _resize_calls(st),
        rtol=1e-5,
        atol=1e-5,
        oracle=tf_resize_bicubic,
        ignore_zero_sign=_BICUBIC_ZERO_SIGN,
        cases=_nonfinite_cases(op.op_type),
        note="TF gives float16/bfloat16 images no gradient (None); ours is that of the "
        "float32 resize, so the oracle casts half images to float32 before TF's op "
        "(same values).",
      )
    )
  ),
)

ResizeBicubicGrad = register_op(
  "ResizeBicubicGrad",
  resize_bicubic_grad,
  family=FAMILY,
  attrs=_RESIZE_ATTRS,
  jvp=(lambda t, grads, orig, **p: tfops.ResizeBicubicGrad(t, orig, **p), None),
  transpose=_bicubic_grad_transpose,
  batching=rules.per_op(fold_batching),
  spec=rules.per_op(
    lambda op: (
      lambda st: st.Spec(
        _bicubic_grad_calls(st),
        diff_args=("grads",),
        rtol=1e-5,
        atol=1e-5,
        cases=_nonfinite_cases(op.op_type),
        note="original_image gives only the shape and dtype.",
      )
    )
  ),
)

ResizeArea = register_op(
  "ResizeArea",
  resize_area,
  family=FAMILY,
  static=("size",),
  attrs=("align_corners",),
  linear=True,
  transpose=_area_transpose,
  batching=rules.per_op(fold_batching),
  spec=rules.per_op(
    lambda op: (
      lambda st: st.Spec(
        _resize_calls(st, half_pixel=False),
        rtol=1e-5,
        atol=1e-5,
        cases=_nonfinite_cases(op.op_type),
      )
    )
  ),
)
