"""Colour ops: RGBToHSV, HSVToRGB, AdjustContrastv2, AdjustHue, AdjustSaturation.

Each follows its TF CPU kernel's arithmetic and tie-breaking: RGBToHSV/HSVToRGB are
TF's Eigen expressions in the image dtype (half/bfloat16/float/double); AdjustHue
works on (hue in [0, 6), min, max) with TF's case split and wraps the hue by repeated
+-6; AdjustSaturation uses its own HSV round trip (hue category from ``int(6 h)``,
category 6 giving black plus ``m``) in float32. AdjustHue/AdjustSaturation/
AdjustContrastv2 have float32 CPU kernels only; half images (TF's GPU kernels) are
computed in float32 and rounded.

Rules: RGBToHSV's JVP is TF's gradient (its piecewise partial derivatives with TF's
tie-breaking masks), written with jax.numpy (TF has no op for it). AdjustContrastv2 is
linear in the images and self-adjoint: JVP and transpose re-bind ``tf.AdjustContrastv2``;
the factor's tangent is ``(x - mean) * t`` with TF ops. HSVToRGB, AdjustHue and
AdjustSaturation, which TF does not differentiate, get the derivative of the impl.
Batching moves the batch axis to the front and re-binds; a batched scalar (delta,
scale, factor) falls back to ``vmap`` of the impl.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from jax.interpreters import ad

from tfprims import rules
from tfprims.core import register_op, tfops
from tfprims.ops.image._common import FAMILY, stored

_F32 = jnp.float32


def _channels(images, min_rank=1):
  if images.ndim < min_rank:
    raise ValueError(f"input must be at least {min_rank}-D, got shape {images.shape}")
  if images.shape[-1] != 3:
    raise ValueError(f"input must have 3 channels but instead has {images.shape[-1]} channels.")
  return images[..., 0], images[..., 1], images[..., 2]


def rgb_to_hsv(images):
  """TF RGBToHSV (colorspaces_op.h), in the image dtype."""
  r, g, b = _channels(images)
  dt = images.dtype
  c = lambda v: jnp.asarray(v, dt)
  v = jnp.maximum(jnp.maximum(r, g), b)
  rng = v - jnp.minimum(jnp.minimum(r, g), b)
  s = jnp.where(v > 0, rng / jnp.where(v > 0, v, c(1)), c(0))
  norm = (c(1) / rng) * (c(1) / c(6))
  # stored(): TF rounds each product before the sum (XLA would fuse a multiply-add).
  h = jnp.where(
    r == v,
    norm * (g - b),
    jnp.where(g == v, stored(norm * (b - r)) + c(2) / c(6), stored(norm * (r - g)) + c(4) / c(6)),
  )
  h = jnp.where(rng > 0, h, c(0))
  h = jnp.where(h < 0, h + c(1), h)
  return jnp.stack([h, s, v], axis=-1)


def hsv_to_rgb(images):
  """TF HSVToRGB (colorspaces_op.h), in the image dtype."""
  h, s, v = _channels(images)
  dt = images.dtype
  c = lambda x: jnp.asarray(x, dt)
  dh = stored(h * c(6))
  dr = jnp.clip(jnp.abs(dh - c(3)) - c(1), c(0), c(1))
  dg = jnp.clip(-jnp.abs(dh - c(2)) + c(2), c(0), c(1))
  db = jnp.clip(-jnp.abs(dh - c(4)) + c(2), c(0), c(1))
  one_s = -s + c(1)
  return jnp.stack(
    [(one_s + stored(s * dr)) * v, (one_s + stored(s * dg)) * v, (one_s + stored(s * db)) * v],
    axis=-1,
  )


def _recip(x):
  """TF's _CustomReciprocal: 1/x, 0 where x is 0."""
  safe = jnp.where(x == 0, jnp.ones_like(x), x)
  return jnp.where(x == 0, jnp.zeros_like(x), 1 / safe)


def _rgb_to_hsv_partials(images, out):
  """TF's _RGBToHSVGrad partials ``d(h, s, v)/d(r, g, b)`` with its masks (ties
  broken R > G > B)."""
  r, g, b = images[..., 0], images[..., 1], images[..., 2]
  s, v = out[..., 1], out[..., 2]
  dt = images.dtype
  f = lambda m: m.astype(dt)
  rb, gb, bb = f((r >= b) & (r >= g)), f((g > r) & (g >= b)), f((b > r) & (b > g))
  rs, gs, bs = f((r < b) & (r < g)), f((g <= r) & (g < b)), f((b <= r) & (b <= g))
  pos = lambda x: f(x > 0)
  ds_dr = pos(r) * (rb * (gs * g + bs * b) * _recip(r * r) - rs * _recip(gb * g + bb * b))
  ds_dg = pos(g) * (gb * (rs * r + bs * b) * _recip(g * g) - gs * _recip(rb * r + bb * b))
  ds_db = pos(b) * (bb * (gs * g + rs * r) * _recip(b * b) - bs * _recip(gb * g + rb * r))
  inv = _recip(s * s) * _recip(v * v)
  sq = lambda x: _recip(x * x)
  dh_dr = (
    -(pos(r) * rb * (g - b) * inv)
    + pos(g) * gb * rs * (b - g) * sq(r - g)
    - pos(g) * gb * bs * _recip(g - b)
    + pos(b) * bb * rs * (b - g) * sq(b - r)
    + pos(b) * bb * gs * _recip(b - g)
  )
  dh_dg = (
    -(pos(g) * gb * (b - r) * inv)
    + pos(r) * rb * gs * (r - b) * sq(r - g)
    + pos(r) * rb * bs * _recip(r - b)
    + pos(b) * bb * gs * (r - b) * sq(b - g)
    - pos(b) * bb * rs * _recip(b - r)
  )
  dh_db = (
    -(pos(b) * bb * (r - g) * inv)
    + pos(r) * rb * bs * (g - r) * sq(r - b)
    - pos(r) * rb * gs * _recip(r - g)
    + pos(g) * gb * bs * (g - r) * sq(g - b)
    + pos(g) * gb * rs * _recip(g - r)
  )
  k = jnp.asarray(60.0 / 360.0, dt)
  return ((dh_dr * k, dh_dg * k, dh_db * k), (ds_dr, ds_dg, ds_db), (rb, gb, bb))


def _rgb_to_hsv_jvp(primals, tangents):
  (x,), (t,) = primals, tangents
  out = tfops.RGBToHSV(x)
  if type(t) is ad.Zero:
    return out, rules.zero_tangent(out)
  rows = _rgb_to_hsv_partials(x, out)
  tr, tg, tb = t[..., 0], t[..., 1], t[..., 2]
  dot = lambda row: row[0] * tr + row[1] * tg + row[2] * tb
  return out, jnp.stack([dot(rows[0]), dot(rows[1]), dot(rows[2])], axis=-1)


# --------------------------------------------------------------------------
# AdjustHue / AdjustSaturation (float32 kernels)
# --------------------------------------------------------------------------


def _wrap(x, below, above, step):
  """TF's ``while (x < below) x += step; while (x >= above) x -= step;`` elementwise.
  The loops run on the value without derivative; ``x - stop_gradient(x)`` (exactly 0)
  carries the tangent through, whose derivative is 1."""
  v = jax.lax.stop_gradient(x)
  v = jax.lax.while_loop(
    lambda v: jnp.any(v < below), lambda v: jnp.where(v < below, v + step, v), v
  )
  v = jax.lax.while_loop(
    lambda v: jnp.any(v >= above), lambda v: jnp.where(v >= above, v - step, v), v
  )
  return v + (x - jax.lax.stop_gradient(x))


def _hue_float(images, delta):
  r, g, b = (images[..., i].astype(_F32) for i in range(3))
  rg = r < g
  # Categories as TF's rgb_to_hv_range (equal components go to the else branches).
  cat = jnp.where(
    rg, jnp.where(b < r, 1, jnp.where(b > g, 3, 2)), jnp.where(b < g, 0, jnp.where(b > r, 4, 5))
  )
  vmax = jnp.where(rg, jnp.where(b > g, b, g), jnp.where(b > r, b, r))
  vmin = jnp.where(rg, jnp.where(b < r, b, r), jnp.where(b < g, b, g))
  vmid = jnp.where(
    rg, jnp.where(b < r, r, jnp.where(b > g, g, b)), jnp.where(b < g, g, jnp.where(b > r, r, b))
  )
  same = vmax == vmin
  ratio = (vmid - vmin) / jnp.where(same, _F32(1), vmax - vmin)
  h = cat.astype(_F32) + jnp.where(cat % 2 == 0, ratio, 1 - ratio)
  h = jnp.where(same, _F32(0), h)
  h = h + stored(delta.astype(_F32) * _F32(6))
  h = _wrap(h, _F32(0), _F32(6), _F32(6))
  hc = h.astype(jnp.int32)
  ratio = h - hc.astype(_F32)
  ratio = jnp.where(hc % 2 == 0, ratio, 1 - ratio)
  vmid = vmin + stored(ratio * (vmax - vmin))
  # (r, g, b) per category 0..5 as (max, mid, min) picks.
  table = [
    (vmax, vmid, vmin),
    (vmid, vmax, vmin),
    (vmin, vmax, vmid),
    (vmin, vmid, vmax),
    (vmid, vmin, vmax),
    (vmax, vmin, vmid),
  ]
  out = []
  for ch in range(3):
    val = table[5][ch]
    for k in range(5):
      val = jnp.where(hc == k, table[k][ch], val)
    out.append(val)
  return jnp.stack(out, axis=-1)


def adjust_hue(images, delta):
  """TF AdjustHue (CPU kernel, float32 arithmetic)."""
  _channels(images, 3)
  if jnp.ndim(delta) != 0:
    raise ValueError(f"delta must be scalar: {jnp.shape(delta)}")
  if images.size == 0:
    return images
  return _hue_float(images, delta).astype(images.dtype)


def adjust_saturation(images, scale):
  """TF AdjustSaturation (CPU kernel, float32 arithmetic)."""
  _channels(images, 3)
  if jnp.ndim(scale) != 0:
    raise ValueError(f"scale must be scalar: {jnp.shape(scale)}")
  if images.size == 0:
    return images
  r, g, b = (images[..., i].astype(_F32) for i in range(3))
  vv = jnp.maximum(r, jnp.maximum(g, b))
  rng = vv - jnp.minimum(r, jnp.minimum(g, b))
  s = jnp.where(vv > 0, rng / jnp.where(vv > 0, vv, _F32(1)), _F32(0))
  norm = _F32(1) / (_F32(6) * rng)
  hh = jnp.where(
    r == vv,
    norm * (g - b),
    jnp.where(
      g == vv, stored(norm * (b - r)) + _F32(2.0 / 6.0), stored(norm * (r - g)) + _F32(4.0 / 6.0)
    ),
  )
  hh = jnp.where(rng <= 0, _F32(0), hh)
  hh = jnp.where(hh < 0, hh + 1, hh)
  s = jnp.minimum(_F32(1), jnp.maximum(_F32(0), s * scale.astype(_F32)))
  c = stored(s * vv)
  m = vv - c
  dh = stored(hh * _F32(6))
  cat = dh.astype(jnp.int32)
  fm = _wrap(jnp.where(dh <= 0, dh + 2, dh), _F32(-np.inf), _F32(2), _F32(2))
  x = stored(c * (1 - jnp.abs(fm - 1)))
  zero = jnp.zeros_like(c)
  table = [(c, x, zero), (x, c, zero), (zero, c, x), (zero, x, c), (x, zero, c), (c, zero, x)]
  out = []
  for ch in range(3):
    val = zero
    for k in range(6):
      val = jnp.where(cat == k, table[k][ch], val)
    out.append(val + m)
  return jnp.stack(out, axis=-1).astype(images.dtype)


def adjust_contrast(images, contrast_factor):
  """TF AdjustContrastv2: ``(x - mean) * factor + mean``, the mean over height and width
  of each channel (float32)."""
  if images.ndim < 3:
    raise ValueError(f"input must be at least 3-D, got shape {images.shape}")
  if jnp.ndim(contrast_factor) != 0:
    raise ValueError("contrast_factor must be scalar")
  x = images.astype(_F32)
  mean = jnp.mean(x, axis=(-3, -2), keepdims=True)
  return (stored((x - mean) * contrast_factor.astype(_F32)) + mean).astype(images.dtype)


# --------------------------------------------------------------------------
# Rules
# --------------------------------------------------------------------------


def _front_batching(op, impl):
  """Batch axis to the front and re-bind (images only batched); a batched scalar
  operand (delta, scale, factor) is vmapped through the impl: the op takes scalars."""
  fallback = rules.vmap_batching(impl, False)

  def rule(args, dims, **params):
    if any(d is not None for d in dims[1:]):
      return fallback(args, dims, **params)
    return op(rules.to_front(args[0], dims[0]), *args[1:], **params), 0

  return rule


def _contrast_factor_jvp(t, images, factor):
  x = (
    images
    if images.dtype == np.float32
    else tfops.Cast(images, DstT=np.dtype("float32"), Truncate=False)
  )
  mean = tfops.Mean(x, axis=(x.ndim - 3, x.ndim - 2), keep_dims=True)
  out = tfops.Mul(tfops.Sub(x, mean), t)
  return (
    out
    if images.dtype == np.float32
    else tfops.Cast(out, DstT=np.dtype(images.dtype), Truncate=False)
  )


# --------------------------------------------------------------------------
# Specs
# --------------------------------------------------------------------------


def _separated_rgb(st, draw, shape):
  """RGB pixels (float32) whose components are at least 0.05 apart, in a drawn order
  per pixel: away from the gray/equal-component kinks, where TF's piecewise formulas
  have no derivative (ties are tested in tests/test_image_color.py)."""
  lo = draw(st.arrays(np.dtype("float32"), shape, special=False, min_value=0, max_value=0.5))
  gaps = draw(
    st.arrays(np.dtype("float32"), shape + (2,), special=False, min_value=0.05, max_value=0.25)
  )
  perm = draw(st.arrays(np.dtype("int32"), shape, min_value=0, max_value=5))
  sorted_px = np.stack([lo, lo + gaps[..., 0], lo + gaps[..., 0] + gaps[..., 1]], axis=-1)
  orders = np.array([[0, 1, 2], [0, 2, 1], [1, 0, 2], [1, 2, 0], [2, 0, 1], [2, 1, 0]])
  return np.take_along_axis(sorted_px, orders[perm], axis=-1).astype(np.float32)


def _hsv_off_kinks(st, draw, shape, dtype):
  """HSV pixels whose hue is at least 0.05 / 6 away from a multiple of 1/6 (HSVToRGB's
  kinks, where central differences cannot be compared; tested in the unit tests)."""
  k = draw(st.arrays(np.dtype("int32"), shape, min_value=0, max_value=5))
  frac = draw(st.arrays(np.dtype("float64"), shape, special=False, min_value=0.05, max_value=0.95))
  sv = draw(st.arrays(np.dtype("float64"), shape + (2,), special=False, min_value=0, max_value=1))
  return np.concatenate([((k + frac) / 6)[..., None], sv], axis=-1).astype(st.np_dtype(dtype))


def _image_calls(
  st, dtypes, scalar=None, lo=0.0, hi=1.0, min_rank=1, separated=False, hsv=False, grid=False
):
  @st.composite
  def draw_call(draw):
    rank = draw(st.integers(min_rank, 4))
    shape = tuple(draw(st.integers(0 if rank > min_rank else 1, 3)) for _ in range(rank - 1))
    dtype = draw(st.sampled_from(dtypes))
    if separated:
      call = dict(images=_separated_rgb(st, draw, shape))
    elif hsv:
      call = dict(images=_hsv_off_kinks(st, draw, shape, dtype))
    elif grid and dtype in ("float16", "bfloat16"):
      # Eighths: TF's half-precision RGBToHSV gradient overflows (inf/NaN) for
      # near-gray or dark pixels, where ours (computed in float32 by XLA) is finite.
      call = dict(
        images=draw(st.arrays(np.dtype("int32"), shape + (3,), min_value=0, max_value=8)).astype(
          st.np_dtype(dtype)
        )
        / 8
      )
    else:
      call = dict(
        images=draw(
          st.arrays(st.np_dtype(dtype), shape + (3,), special=False, min_value=lo, max_value=hi)
        )
      )
      if grid:  # TF's RGBToHSV gradient overflows for tiny values (1e-38): those are 0
        call["images"][np.abs(call["images"]) < 1e-3] = 0
    if callable(scalar):
      call.update(scalar(st, draw, call["images"]))
    elif scalar is not None:
      name, slo, shi = scalar
      call[name] = np.float32(draw(st.floats(slo, shi, width=32)))
    return call

  return draw_call()


# AdjustHue and AdjustSaturation are piecewise: their specs keep every drawn pixel a
# margin away from the kinks, and their central differences take a step small enough
# not to cross it (Spec.fd_step; the kinks themselves are tested in
# tests/test_image_color.py).
_KINK_MARGIN = 0.08
_KINK_FD_STEP = 3e-4


def _hue_delta(st, draw, images):
  """``delta`` with ``6 * delta`` within 0.08 of an integer. ``_separated_rgb``'s pixels
  have hue fractions in [1/6, 5/6] (the middle component at least 0.05 from the
  others, at most 0.25 each), so every adjusted hue stays ``_KINK_MARGIN`` from
  AdjustHue's category kinks at the integers."""
  k = draw(st.integers(-6, 5))
  offset = draw(st.floats(-_KINK_MARGIN, _KINK_MARGIN))
  return dict(delta=np.float32((k + offset) / 6))


def _saturation_scale(st, draw, images):
  """``scale`` keeping every pixel's scaled saturation ``_KINK_MARGIN`` from 1, where
  TF clips it (pixels with at least one darker component have saturation > 0)."""
  scale = draw(st.floats(0.0625, 2.5, width=32))
  x = images.astype(np.float64).reshape(-1, 3)
  vmax = x.max(axis=-1)
  sat = (vmax - x.min(axis=-1)) / vmax
  if sat.size and np.any(np.abs(sat * scale - 1) < _KINK_MARGIN):
    scale = (1 - 2 * _KINK_MARGIN) / sat.max()
  return dict(scale=np.float32(scale))


RGBToHSV = register_op(
  "RGBToHSV",
  rgb_to_hsv,
  family=FAMILY,
  jvp=_rgb_to_hsv_jvp,
  batching=rules.per_op(_front_batching, rgb_to_hsv),
  spec=lambda st: st.Spec(
    _image_calls(st, ("float16", "bfloat16", "float32", "float64"), grid=True),
    grad_rtol={"float32": 1e-3},
    grad_atol={"float32": 1e-3},
    note="Values in [0, 1]; derivatives near gray pixels are large.",
  ),
)

HSVToRGB = register_op(
  "HSVToRGB",
  hsv_to_rgb,
  family=FAMILY,
  batching=rules.per_op(_front_batching, hsv_to_rgb),
  spec=lambda st: st.Spec(
    _image_calls(st, ("float16", "bfloat16", "float32", "float64"), hsv=True), grad_oracle="fd"
  ),
)

AdjustContrastv2 = register_op(
  "AdjustContrastv2",
  adjust_contrast,
  family=FAMILY,
  jvp=(lambda t, x, f: tfops.AdjustContrastv2(t, f), _contrast_factor_jvp),
  transpose=lambda ct, x, f: [
    tfops.AdjustContrastv2(rules.instantiate(ct), f) if rules.U(x) else None,
    None,
  ],
  batching=rules.per_op(_front_batching, adjust_contrast),
  spec=lambda st: st.Spec(
    _image_calls(st, ("float32",), ("contrast_factor", -2.0, 3.0), lo=-2.0, hi=2.0, min_rank=3),
    rtol=1e-5,
    atol=1e-5,
    grad_oracle="fd",
  ),
)

AdjustHue = register_op(
  "AdjustHue",
  adjust_hue,
  family=FAMILY,
  batching=rules.per_op(_front_batching, adjust_hue),
  spec=lambda st: st.Spec(
    _image_calls(st, ("float32",), _hue_delta, min_rank=3, separated=True),
    rtol=1e-5,
    atol=1e-5,
    grad_oracle="fd",
    fd_step=_KINK_FD_STEP,
  ),
)

AdjustSaturation = register_op(
  "AdjustSaturation",
  adjust_saturation,
  family=FAMILY,
  batching=rules.per_op(_front_batching, adjust_saturation),
  spec=lambda st: st.Spec(
    _image_calls(st, ("float32",), _saturation_scale, min_rank=3, separated=True),
    rtol=1e-5,
    atol=1e-5,
    grad_oracle="fd",
    fd_step=_KINK_FD_STEP,
  ),
)
