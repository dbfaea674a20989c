"""ImageProjectiveTransformV2 and V3 (NHWC, static output shape; transforms and V3's
fill value are data).

Each output pixel ``(x, y)`` reads the input at ``((a0 x + a1 y + a2) / k, (b0 x + b1 y +
b2) / k)``, ``k = c0 x + c1 y + 1`` (``k == 0`` gives the fill value), with TF's float32
roundings. Fill modes map the position back into the image as TF's MapCoordinate does
(REFLECT, WRAP, NEAREST: clamped; CONSTANT: unchanged). Pixels read outside the image
are the fill value, cast to the image dtype first. NEAREST interpolation rounds halves
away from zero; BILINEAR blends the four neighbours in float32 and casts to the image
dtype (integers truncate, as TF's ``T(...)``).

Rules: linear in the images (V3: with fill value 0): the JVP is the op on the tangent;
the VJP is TF's gradient, the same op applied to the cotangent with the inverted
transforms (``tf.MatrixInverse``), which is not the exact transpose of the forward
warp (see docs/semantics/image.md). Transforms and fill value get no derivative, as in
TF. Batching folds the vmapped axis into N; a batched V3 fill value: ``vmap`` of the
impl.
"""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np

from tfprims import rules
from tfprims.core import register_op, tfops
from tfprims.ops.image._common import FAMILY, stored
from tfprims.ops.shared import merge_batch, split_batch
from tfprims.ops.shared_specs import bounded_values
from tfprims.rules import U

_F32 = jnp.float32
FILL_MODES = ("REFLECT", "WRAP", "CONSTANT", "NEAREST")
INTERPOLATIONS = ("NEAREST", "BILINEAR")


def _trunc(x):
  return jnp.trunc(x)


def map_coordinate(c, size, fill_mode):
  """TF's MapCoordinate<mode>(c, size) in float32."""
  n = np.float32(size)
  if fill_mode == "CONSTANT":
    return c
  if fill_mode == "NEAREST":
    return jnp.clip(c, _F32(0), n - 1)
  if size <= 1:
    out = jnp.where((c < 0) | (c > n - 1), _F32(0), c)
    return jnp.clip(out, _F32(0), n - 1)
  if fill_mode == "REFLECT":
    sz2 = np.float32(2 * size)
    neg = _trunc(-c / sz2) * sz2 + c
    neg = jnp.where(neg < -n, neg + sz2, -neg - 1)
    pos = c - _trunc(c / sz2) * sz2
    pos = jnp.where(pos >= n, (sz2 - pos) - 1, pos)
  elif fill_mode == "WRAP":
    sz = np.float32(size - 1)
    neg = c + (_trunc(-c / sz) + 1) * n
    pos = c - _trunc(c / sz) * n
  else:
    raise ValueError(f"Unknown fill_mode: {fill_mode}")
  out = jnp.where(c < 0, neg, jnp.where(c > n - 1, pos, c))
  return jnp.clip(out, _F32(0), n - 1)


def _fill_as(fill_value, dtype):
  """The fill value cast to the image dtype as TF's ``static_cast<T>(float)`` (integers
  wrap modulo 2^bits)."""
  fill = jnp.asarray(fill_value, _F32)
  if jnp.issubdtype(dtype, jnp.integer):
    wide = jnp.int64 if np.dtype(dtype).itemsize == 8 else jnp.int32
    return fill.astype(wide).astype(dtype)
  return fill.astype(dtype)


def _round_half_away(x):
  """std::round: halves away from zero (negative positions too)."""
  r = jnp.trunc(x)
  return r + jnp.where(jnp.abs(x - r) >= 0.5, jnp.sign(x), _F32(0))


def _transform(images, transforms, fill_value, *, output_shape, interpolation, fill_mode):
  if images.ndim != 4:
    raise ValueError(f"Input images must have rank 4, got shape {images.shape}")
  if (
    transforms.ndim != 2
    or transforms.shape[1] != 8
    or transforms.shape[0] not in (1, images.shape[0])
  ):
    raise ValueError(
      f"Input transform should be num_images x 8 or 1 x 8, got shape {transforms.shape}"
    )
  if interpolation not in INTERPOLATIONS:
    raise ValueError(f"Invalid interpolation {interpolation}")
  if fill_mode not in FILL_MODES:
    raise ValueError(f"Invalid fill_mode {fill_mode}")
  oh, ow = (int(v) for v in output_shape)
  if oh <= 0 or ow <= 0:
    raise ValueError("output dimensions must be positive")
  n, h, w, c = images.shape
  dtype = images.dtype
  fill = _fill_as(fill_value, dtype)
  if n == 0 or c == 0:
    return jnp.zeros((n, oh, ow, c), dtype)
  t = transforms.astype(_F32)[:, :, None, None]  # (n or 1, 8, 1, 1)
  xs = jnp.arange(ow, dtype=_F32)[None, None, :]
  ys = jnp.arange(oh, dtype=_F32)[None, :, None]
  k = (stored(t[:, 6] * xs) + stored(t[:, 7] * ys)) + _F32(1)
  in_x = ((stored(t[:, 0] * xs) + stored(t[:, 1] * ys)) + t[:, 2]) / k
  in_y = ((stored(t[:, 3] * xs) + stored(t[:, 4] * ys)) + t[:, 5]) / k
  x = map_coordinate(in_x, w, fill_mode)
  y = map_coordinate(in_y, h, fill_mode)
  # TF's CPU kernel (2.21) has no separate out-of-image test: neighbours outside the
  # image read the fill value, so a bilinear sample half a pixel out blends with it.
  outside = jnp.broadcast_to(k == 0, (n, oh, ow))[..., None]
  b = jnp.arange(n)[:, None, None]

  def read(yy, xx):
    """images[b, yy, xx] as stored in T, fill outside the image."""
    ok = (yy >= 0) & (yy < h) & (xx >= 0) & (xx < w)
    yi = jnp.clip(yy, 0, h - 1).astype(jnp.int32)
    xi = jnp.clip(xx, 0, w - 1).astype(jnp.int32)
    ok, yi, xi = (jnp.broadcast_to(a, (n, oh, ow)) for a in (ok, yi, xi))
    return jnp.where(ok[..., None], images[b, yi, xi], fill)

  if interpolation == "NEAREST":
    out = read(_round_half_away(y), _round_half_away(x))
  else:
    yf, xf = jnp.floor(y), jnp.floor(x)
    yc, xc = yf + 1, xf + 1
    f = lambda yy, xx: read(yy, xx).astype(_F32)
    wxc, wxf = (xc - x)[..., None], (x - xf)[..., None]
    wyc, wyf = (yc - y)[..., None], (y - yf)[..., None]
    top = stored(wxc * f(yf, xf)) + stored(wxf * f(yf, xc))
    bottom = stored(wxc * f(yc, xf)) + stored(wxf * f(yc, xc))
    val = stored(wyc * top) + stored(wyf * bottom)
    out = (
      val.astype(dtype)
      if not jnp.issubdtype(dtype, jnp.integer)
      else _trunc(val)
      .astype(jnp.int64 if np.dtype(dtype).itemsize == 8 else jnp.int32)
      .astype(dtype)
    )
  return jnp.where(outside, fill, out)


def image_projective_transform_v2(
  images, transforms, *, output_shape, interpolation, fill_mode="CONSTANT"
):
  """TF ImageProjectiveTransformV2 (fill value 0)."""
  return _transform(
    images,
    transforms,
    0.0,
    output_shape=output_shape,
    interpolation=interpolation,
    fill_mode=fill_mode,
  )


def image_projective_transform_v3(
  images, transforms, fill_value, *, output_shape, interpolation, fill_mode="CONSTANT"
):
  """TF ImageProjectiveTransformV3."""
  return _transform(
    images,
    transforms,
    fill_value,
    output_shape=output_shape,
    interpolation=interpolation,
    fill_mode=fill_mode,
  )


# --------------------------------------------------------------------------
# Rules
# --------------------------------------------------------------------------


def inverse_transforms(transforms):
  """TF's gradient's inversion (flat_transforms_to_matrices, MatrixInverse,
  matrices_to_flat_transforms), with TF ops."""
  k = rules.shape_of(transforms)[0]
  m = tfops.Pad(transforms, paddings=((0, 0), (0, 1)))
  m = tfops.AddV2(m, rules.const([0.0] * 8 + [1.0], transforms))
  inv = tfops.MatrixInverse(rules.reshape(m, (k, 3, 3)), adjoint=False)
  flat = rules.reshape(inv, (k, 9))
  flat = tfops.RealDiv(flat, tfops.Slice(flat, begin=(0, 8), size=(k, 1)))
  return tfops.Slice(flat, begin=(0, 0), size=(k, 8))


def _v2_transpose(ct, images, transforms, *, output_shape, interpolation, fill_mode):
  if not U(images):
    return [None, None]
  size = tuple(rules.shape_of(images)[1:3])
  return [
    tfops.ImageProjectiveTransformV2(
      rules.instantiate(ct),
      inverse_transforms(transforms),
      output_shape=size,
      interpolation=interpolation,
      fill_mode=fill_mode,
    ),
    None,
  ]


def _v3_transpose(ct, images, transforms, fill_value, *, output_shape, interpolation, fill_mode):
  if not U(images):
    return [None, None, None]
  size = tuple(rules.shape_of(images)[1:3])
  return [
    tfops.ImageProjectiveTransformV3(
      rules.instantiate(ct),
      inverse_transforms(transforms),
      rules.const(0.0, fill_value),
      output_shape=size,
      interpolation=interpolation,
      fill_mode=fill_mode,
    ),
    None,
    None,
  ]


def _batching(op, impl):
  """Images (B, N, ...) fold into (B * N, ...); transforms are broadcast to (B, N, 8)
  and folded likewise unless unbatched with one row. A batched fill value: derived."""

  def rule(args, dims, **p):
    if len(args) > 2 and dims[2] is not None:
      return rules.vmap_batching(impl, False)(args, dims, **p)
    images, transforms = args[:2]
    di, dt = dims[:2]
    b = rules.batch_size(args, dims)
    if di is None:
      images, di = jnp.broadcast_to(images, (b,) + images.shape), 0
    n = images.shape[1] if di == 0 else jnp.moveaxis(images, di, 0).shape[1]
    if dt is None and transforms.shape[0] == 1:
      folded_t = transforms
    else:
      if dt is None:
        transforms, dt = jnp.broadcast_to(transforms, (b,) + transforms.shape), 0
      transforms = jnp.moveaxis(transforms, dt, 0)
      folded_t = jnp.broadcast_to(transforms, (b, n, 8)).reshape(b * n, 8)
    out = op(merge_batch(images, di), folded_t, *args[2:], **p)
    return split_batch(out, b), 0

  return rule


# --------------------------------------------------------------------------
# Specs
# --------------------------------------------------------------------------

_DTYPES = ("uint8", "int32", "int64", "float16", "bfloat16", "float32", "float64")


def _transform_rows(st, draw, k):
  """Transforms whose inverses are exact in float32 (so TF's gradient, which inverts
  them, reads the same pixels as ours): axis scalings by +-1, 2, 1/2, optional axis
  swap, translations in halves, or a pure projective row in eighths."""
  rows = []
  for _ in range(k):
    if draw(st.integers(0, 3)) == 0:
      rows.append([1, 0, 0, 0, 1, 0, draw(st.integers(-2, 2)) / 8, draw(st.integers(-2, 2)) / 8])
      continue
    sx = draw(st.sampled_from((1.0, -1.0, 2.0, 0.5)))
    sy = draw(st.sampled_from((1.0, -1.0, 2.0, 0.5)))
    tx, ty = draw(st.integers(-6, 6)) / 2, draw(st.integers(-6, 6)) / 2
    if draw(st.booleans()):
      rows.append([sx, 0, tx, 0, sy, ty, 0, 0])
    else:
      rows.append([0, sx, tx, sy, 0, ty, 0, 0])
  return np.array(rows, np.float32)


def _calls(st, v3):
  @st.composite
  def draw_call(draw):
    dtype = draw(st.sampled_from(_DTYPES))
    n, c = draw(st.integers(1, 2)), draw(st.integers(1, 2))
    h, w = draw(st.integers(1, 4)), draw(st.integers(1, 4))
    if st.np_dtype(dtype).kind in "iu":
      images = draw(st.arrays(st.np_dtype(dtype), (n, h, w, c), min_value=0, max_value=200))
    else:
      images = draw(bounded_values(st, dtype, (n, h, w, c), bound=8.0))
    call = dict(
      images=images,
      transforms=_transform_rows(st, draw, draw(st.sampled_from((1, n)))),
      output_shape=np.array([draw(st.integers(1, 5)), draw(st.integers(1, 5))], np.int32),
      interpolation=draw(st.sampled_from(INTERPOLATIONS)),
      fill_mode=draw(st.sampled_from(FILL_MODES)),
    )
    if v3:
      call["fill_value"] = np.float32(draw(st.sampled_from((0.0, 1.5, 7.0))))
    return call

  return draw_call()


_ATTRS = ("interpolation", "fill_mode")
_NOTE = (
  "The VJP is TF's gradient (the warp of the cotangent by the inverted transforms), "
  "not the exact transpose; transforms are drawn with exact inverses."
)

ImageProjectiveTransformV2 = register_op(
  "ImageProjectiveTransformV2",
  image_projective_transform_v2,
  family=FAMILY,
  static=("output_shape",),
  attrs=_ATTRS,
  jvp=(
    lambda t, images, transforms, **p: tfops.ImageProjectiveTransformV2(t, transforms, **p),
    None,
  ),
  transpose=_v2_transpose,
  batching=rules.per_op(_batching, image_projective_transform_v2),
  spec=lambda st: st.Spec(
    _calls(st, v3=False), rtol=1e-5, atol=1e-5, diff_args=("images",), note=_NOTE
  ),
)

ImageProjectiveTransformV3 = register_op(
  "ImageProjectiveTransformV3",
  image_projective_transform_v3,
  family=FAMILY,
  static=("output_shape",),
  attrs=_ATTRS,
  jvp=(
    lambda t, images, transforms, fill_value, **p: tfops.ImageProjectiveTransformV3(
      t, transforms, rules.const(0.0, fill_value), **p
    ),
    None,
    None,
  ),
  transpose=_v3_transpose,
  batching=rules.per_op(_batching, image_projective_transform_v3),
  spec=lambda st: st.Spec(
    _calls(st, v3=True), rtol=1e-5, atol=1e-5, diff_args=("images",), note=_NOTE
  ),
)
