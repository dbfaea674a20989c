"""ExtractGlimpse and ExtractGlimpseV2 (NHWC float32; static glimpse size, offsets are
data).

As TF's CPU kernel (Eigen's GlimpseExtractionOp): each image's offset (y, x) becomes a
pixel corner in float32 arithmetic, then ``int64(...)`` (truncation toward zero); glimpse
pixel ``j`` reads input pixel ``j + offset`` and pixels outside the image get noise.
V1 and V2 differ only in that arithmetic: V1 scales by the image size when
``normalized``, re-centres when ``centered`` (``x / 2 + size / 2``) and always subtracts
half the glimpse; V2 subtracts half the glimpse only when both ``normalized`` and
``centered``, and without ``normalized`` only adds ``size / 2`` when ``centered``.

Noise (``noise`` "uniform", "gaussian", "zero"; empty: ``uniform_noise`` picks uniform
or gaussian): uniform is ``min + U[0, 1) * (max - min)`` over each image, gaussian is
``mean + N(0, 1) * sigma`` per channel clipped to the channel's ``[min, max]``, both
drawn from the op's key (``uses_rng``: jax.random numbers, not TF's); "zero" draws
nothing and the interpreter supplies no key for it (no ``rng=`` needed).

Rules: the input's JVP is the glimpse of the tangent with zero noise (the noise is
treated as constant: TF registers no gradient for either op), whose transpose is
``tf.ExtractGlimpseV2`` of the cotangent back onto the image (the shift by the negated
integer offset, zero noise). Offsets get no derivative (piecewise constant). Batching
folds the vmapped axis into N for zero noise; with noise it vmaps the impl (each batch
member draws the same numbers, as separate calls with that key would).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from tfprims import rules
from tfprims.core import register_op, tfops
from tfprims.interpreter import AttrView, bind_node
from tfprims.ops.image._common import FAMILY

_F32 = jnp.float32
_ZERO_KEY = np.zeros((2,), np.uint32)


def noise_mode(uniform_noise, noise):
  """TF's choice of noise from the two attrs (raises on TF's rejected combinations)."""
  if uniform_noise and noise not in ("", "uniform"):
    raise ValueError("The uniform_noise and noise could not be specified at the same time")
  if noise == "":
    return "uniform" if uniform_noise else "gaussian"
  if noise not in ("uniform", "gaussian", "zero"):
    raise ValueError(f"The noise could only be uniform, gaussian, or zero, got{noise}")
  return noise


def glimpse_corner(offset, in_size, g_size, normalized, centered, version):
  """TF's float32 arithmetic from an offset to the glimpse's integer corner (int32;
  the float value is clipped to +-2**30 first, which keeps every comparison)."""
  x = offset.astype(_F32)
  half_in, half_g = np.float32(in_size / 2.0), np.float32(g_size / 2.0)
  if version == 1:
    if normalized:
      x = x * np.float32(in_size)
    if centered:
      x = x / _F32(2) + half_in
    x = x - half_g
  elif normalized:
    x = x * np.float32(in_size)
    if centered:
      x = x / _F32(2) + half_in - half_g
  elif centered:
    x = x + half_in
  return jnp.trunc(jnp.clip(x, -(2.0**30), 2.0**30)).astype(jnp.int32)


def _noise(key, x, gh, gw, mode):
  n, _, _, c = x.shape
  if mode == "zero":
    return jnp.zeros((n, gh, gw, c), _F32)
  k = jax.random.wrap_key_data(key, impl="threefry2x32")
  if mode == "uniform":
    lo = jnp.min(x, axis=(1, 2, 3), keepdims=True)
    hi = jnp.max(x, axis=(1, 2, 3), keepdims=True)
    return lo + jax.random.uniform(k, (n, gh, gw, c), _F32) * (hi - lo)
  mean = jnp.mean(x, axis=(1, 2), keepdims=True)
  sigma = jnp.sqrt(jnp.mean(jnp.square(x - mean), axis=(1, 2), keepdims=True))
  lo = jnp.min(x, axis=(1, 2), keepdims=True)
  hi = jnp.max(x, axis=(1, 2), keepdims=True)
  return jnp.maximum(jnp.minimum(mean + jax.random.normal(k, (n, gh, gw, c), _F32) * sigma, hi), lo)


def _glimpse(key, x, offsets, size, centered, normalized, uniform_noise, noise, version):
  if x.ndim != 4:
    raise ValueError(f"input must be 4-dimensional (batch_size, height, width, depth) {x.shape}")
  if offsets.ndim != 2 or offsets.shape[0] != x.shape[0] or offsets.shape[1] != 2:
    raise ValueError(f"offsets must be [batch, 2] (y, x), got {offsets.shape}")
  gh, gw = (int(v) for v in size)
  if gh < 0 or gw < 0:
    raise ValueError(f"glimpse size must be non-negative, got {(gh, gw)}")
  mode = noise_mode(uniform_noise, noise)
  n, h, w, c = x.shape
  if n * gh * gw * c == 0:
    return jnp.zeros((n, gh, gw, c), _F32)
  if h == 0 or w == 0:
    raise ValueError("input image must be non-empty")
  oy = glimpse_corner(offsets[:, 0], h, gh, normalized, centered, version)
  ox = glimpse_corner(offsets[:, 1], w, gw, normalized, centered, version)
  rows = jnp.arange(gh, dtype=jnp.int32)[None, :] + oy[:, None]
  cols = jnp.arange(gw, dtype=jnp.int32)[None, :] + ox[:, None]
  inside = ((rows >= 0) & (rows < h))[:, :, None] & ((cols >= 0) & (cols < w))[:, None, :]
  picked = x[
    jnp.arange(n)[:, None, None],
    jnp.clip(rows, 0, h - 1)[:, :, None],
    jnp.clip(cols, 0, w - 1)[:, None, :],
  ].astype(_F32)
  return jnp.where(inside[..., None], picked, _noise(key, x.astype(_F32), gh, gw, mode))


def extract_glimpse(
  key, x, offsets, *, size, centered=True, normalized=True, uniform_noise=True, noise="uniform"
):
  """TF ExtractGlimpse (version 1 offset arithmetic)."""
  return _glimpse(key, x, offsets, size, centered, normalized, uniform_noise, noise, 1)


def extract_glimpse_v2(
  key, x, offsets, *, size, centered=True, normalized=True, uniform_noise=True, noise="uniform"
):
  """TF ExtractGlimpseV2."""
  return _glimpse(key, x, offsets, size, centered, normalized, uniform_noise, noise, 2)


# --------------------------------------------------------------------------
# Rules
# --------------------------------------------------------------------------


def _jvp(op):
  def rule(t, key, x, offsets, **p):
    return op(_ZERO_KEY, t, offsets, **dict(p, uniform_noise=False, noise="zero"))

  return rule


def _transpose(version):
  def rule(ct, key, x, offsets, *, size, centered, normalized, uniform_noise, noise):
    assert rules.U(x) and not rules.U(offsets)
    _, h, w, _ = rules.shape_of(x)
    gh, gw = (int(v) for v in size)
    # The glimpse is a shift by the integer corner; its transpose is the shift back.
    oy = glimpse_corner(offsets[:, 0], h, gh, normalized, centered, version)
    ox = glimpse_corner(offsets[:, 1], w, gw, normalized, centered, version)
    back = -jnp.stack([oy, ox], axis=1).astype(_F32)
    out = tfops.ExtractGlimpseV2(
      _ZERO_KEY,
      rules.instantiate(ct),
      back,
      size=(h, w),
      centered=False,
      normalized=False,
      uniform_noise=False,
      noise="zero",
    )
    return [None, out, None]

  return rule


def _batching(op, impl):
  fallback = rules.vmap_batching(impl, False)

  def rule(args, dims, **p):
    if dims[0] is not None or noise_mode(p["uniform_noise"], p["noise"]) != "zero":
      return fallback(args, dims, **p)
    key, x, offsets = args
    b = rules.batch_size(args, dims)
    folded = []
    for a, d in ((x, dims[1]), (offsets, dims[2])):
      a = rules.with_batch_axis(a, d, b)
      shape = rules.shape_of(a)
      folded.append(rules.reshape(a, (shape[0] * shape[1],) + shape[2:]))
    out = op(key, *folded, **p)
    shape = rules.shape_of(out)
    return rules.reshape(out, (b, shape[0] // b) + shape[1:]), 0

  return rule


def _interpret(ctx, node, inputs):
  """The default binding, except that zero noise takes a constant key instead of one
  split off the call's ``rng`` (TF draws nothing then)."""
  attrs = AttrView(node)
  op = getattr(tfops, node.op)
  if noise_mode(bool(attrs["uniform_noise"]), attrs["noise"]) != "zero":
    return bind_node(ctx, op, node, inputs)
  return bind_node(_ConstantKey(ctx), op, node, inputs)


class _ConstantKey:
  """A view of the interpreter context whose ``next_key`` is a constant key."""

  def __init__(self, ctx):
    self._ctx = ctx

  def next_key(self, node):
    return jnp.asarray(_ZERO_KEY)

  def __getattr__(self, name):
    return getattr(self._ctx, name)


# --------------------------------------------------------------------------
# Specs
# --------------------------------------------------------------------------

_MODES = (
  (True, "uniform"),
  (True, ""),
  (False, ""),
  (False, "uniform"),
  (False, "gaussian"),
  (False, "zero"),
)


def _glimpse_calls(st, version):
  @st.composite
  def draw_call(draw):
    n, c = draw(st.integers(1, 2)), draw(st.integers(1, 2))
    h, w = draw(st.integers(1, 4)), draw(st.integers(1, 4))
    gh, gw = draw(st.integers(1, 4)), draw(st.integers(1, 4))
    centered, normalized = draw(st.booleans()), draw(st.booleans())
    scale = 8 if normalized else 2
    offsets = np.array(
      [draw(st.integers(-2 * scale, 2 * scale)) / scale for _ in range(2 * n)], np.float32
    ).reshape(n, 2)
    uniform_noise, noise = draw(st.sampled_from(_MODES))
    # Random noise is ours, not TF's: where any glimpse pixel falls outside the image
    # the call uses zero noise (noise values are tested in tests/test_image_color.py).
    oy = np.asarray(
      glimpse_corner(jnp.asarray(offsets[:, 0]), h, gh, normalized, centered, version)
    )
    ox = np.asarray(
      glimpse_corner(jnp.asarray(offsets[:, 1]), w, gw, normalized, centered, version)
    )
    # Random noise only for normalized, centered offsets: scaling those toward 0 (the
    # vmap check's variation) keeps an inside glimpse inside.
    outside = np.any(oy < 0) or np.any(oy + gh > h) or np.any(ox < 0) or np.any(ox + gw > w)
    if outside or not (normalized and centered):
      uniform_noise, noise = False, "zero"
    return dict(
      input=draw(
        st.arrays(np.dtype("float32"), (n, h, w, c), special=False, min_value=-4, max_value=4)
      ),
      size=np.array([gh, gw], np.int32),
      offsets=offsets,
      centered=centered,
      normalized=normalized,
      uniform_noise=uniform_noise,
      noise=noise,
    )

  return draw_call()


_ATTRS = ("centered", "normalized", "uniform_noise", "noise")
_NOTE = (
  "TF registers no gradient: derivatives checked by central differences in the "
  "input. Random noise is drawn only where no glimpse pixel is outside the image."
)

ExtractGlimpse = register_op(
  "ExtractGlimpse",
  extract_glimpse,
  family=FAMILY,
  static=("size",),
  attrs=_ATTRS,
  uses_rng=True,
  jvp=(None, rules.per_op(_jvp), None),
  transpose=_transpose(1),
  batching=rules.per_op(_batching, extract_glimpse),
  interpret=_interpret,
  spec=lambda st: st.Spec(
    _glimpse_calls(st, 1),
    grad_oracle="fd",
    diff_args=("input",),
    vmap_variation="scale",
    note=_NOTE,
  ),
)

ExtractGlimpseV2 = register_op(
  "ExtractGlimpseV2",
  extract_glimpse_v2,
  family=FAMILY,
  static=("size",),
  attrs=_ATTRS,
  uses_rng=True,
  jvp=(None, rules.per_op(_jvp), None),
  transpose=_transpose(2),
  batching=rules.per_op(_batching, extract_glimpse_v2),
  interpret=_interpret,
  spec=lambda st: st.Spec(
    _glimpse_calls(st, 2),
    grad_oracle="fd",
    diff_args=("input",),
    vmap_variation="scale",
    note=_NOTE,
  ),
)
