"""ScaleAndTranslate and ScaleAndTranslateGrad (NHWC, static output size; scale and
translation are data).

Every kernel TF accepts (lanczos1/3/5, gaussian, box, triangle, keyscubic,
mitchellcubic), with or without antialiasing. The weights of each (output, input)
pair are those of TF's ComputeSpansCore, computed with jax.numpy in float32 as a dense
(out, in) matrix per axis: sample at ``(x + 0.5) / scale - translation / scale``, no
sample (a zero row) outside ``[0, in_size]``, taps clipped to the image and
renormalised (a row whose weights sum to about zero stays zero); the kernel is widened
by ``1 / scale`` when antialiasing a downscale. The image is contracted with the row
matrix, then the column matrix, in float32 (TF's order); the output is float32.

Rules: linear in the images (JVP ``tf.ScaleAndTranslate`` of the tangent, transpose
``tf.ScaleAndTranslateGrad``, and the other way round); scale and translation get no
derivative, as in TF. Batching folds the vmapped axis into N when only the images
are batched, and is ``vmap`` of the impl when scale or translation are.
"""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np
from jax import lax

from tfprims import rules
from tfprims.core import register_op, tfops
from tfprims.ops.image._common import FAMILY, separable_resample, stored, weight_counts
from tfprims.ops.image._specs import with_nonfinite
from tfprims.ops.shared import merge_batch, split_batch
from tfprims.ops.shared_specs import bounded_values
from tfprims.rules import U
from tfprims.errors import import_tensorflow

_F32 = jnp.float32
_PI = np.float32(3.14159265359)


def _lanczos(radius):
  r = np.float32(radius)

  def k(x):
    safe = jnp.where(x <= 1e-3, _F32(1), x)
    v = r * jnp.sin(_PI * safe) * jnp.sin(_PI * safe / r) / (_PI * _PI * safe * safe)
    return jnp.where(x > r, _F32(0), jnp.where(x <= np.float32(1e-3), _F32(1), v))

  return k, r


def _gaussian(x):
  # sigma = radius / 3 = 0.5: exp(-x^2 / (2 sigma^2)) = exp(-2 x^2)
  return jnp.where(x >= np.float32(1.5), _F32(0), jnp.exp(-x * x / np.float32(0.5)))


def _box(x):
  return jnp.where(x < 0.5, _F32(1), jnp.where(x == 0.5, _F32(0.5), _F32(0)))


def _triangle(x):
  return jnp.where(x < 1, 1 - x, _F32(0))


def _cubic(x, near, far):
  """A piecewise cubic on [0, 1) and [1, 2) (0 past 2), each Horner step's product
  rounded before its addition as in TF's kernel: XLA's fused multiply-adds would
  leave weights of about 1e-14 where TF's are exactly 0 (x = 1, a tap that an
  infinite pixel then turns into NaN)."""

  def horner(coeffs):
    v = stored(np.float32(coeffs[0]) * x)
    for c in coeffs[1:-1]:
      v = stored((v + np.float32(c)) * x) if c else stored(v * x)
    return v + np.float32(coeffs[-1])

  return jnp.where(x >= 2, _F32(0), jnp.where(x >= 1, horner(far), horner(near)))


def _keys_cubic(x):
  return _cubic(x, near=(1.5, -2.5, 0.0, 1.0), far=(-0.5, 2.5, -4.0, 2.0))


def _mitchell_cubic(x):
  return _cubic(
    x, near=(7.0 / 6.0, -2.0, 0.0, 8.0 / 9.0), far=(-7.0 / 18.0, 2.0, -10.0 / 3.0, 16.0 / 9.0)
  )


KERNELS = {
  "lanczos1": _lanczos(1),
  "lanczos3": _lanczos(3),
  "lanczos5": _lanczos(5),
  "gaussian": (_gaussian, np.float32(1.5)),
  "box": (_box, np.float32(1)),
  "triangle": (_triangle, np.float32(1)),
  "keyscubic": (_keys_cubic, np.float32(2)),
  "mitchellcubic": (_mitchell_cubic, np.float32(2)),
}


def _kernel(kernel_type):
  try:
    return KERNELS[kernel_type]
  except KeyError:
    raise ValueError(f"Unrecognized kernel type: {kernel_type}") from None


def _spans(kernel_type, antialias, out_size, in_size, scale, translate):
  """TF's ComputeSpansCore along one axis (scale and translate are float32 scalars,
  possibly traced): the (out_size, in_size) float32 weights and the boolean mask of
  the taps TF's GatherRows/GatherColumns multiply. Those are ``span_size = min(2 *
  ceil(radius * kernel_scale) + 1, in_size)`` pixels from each output's span start
  (clipped to the image), zero-weight padding past its own span included; an
  output sampled outside the image has start 0 and zero weights."""
  kernel, radius = _kernel(kernel_type)
  scale = jnp.asarray(scale, _F32)
  translate = jnp.asarray(translate, _F32)
  inv_scale = _F32(1) / scale
  inv_translate = stored(-inv_scale * translate)
  kscale = jnp.maximum(inv_scale, _F32(1)) if antialias else _F32(1)
  one_over_kscale = _F32(1) / kscale
  sample = stored((jnp.arange(out_size, dtype=_F32) + _F32(0.5)) * inv_scale) + inv_translate
  reach = stored(radius * kscale)
  start = jnp.clip(jnp.ceil(sample - reach - _F32(0.5)), 0, in_size - 1)
  end = jnp.clip(jnp.floor(sample + reach - _F32(0.5)), 0, in_size - 1) + 1
  src = jnp.arange(in_size, dtype=_F32)
  inside = (src[None, :] >= start[:, None]) & (src[None, :] < end[:, None])
  pos = src[None, :] + _F32(0.5) - sample[:, None]
  w = jnp.where(inside, kernel(jnp.abs(pos * one_over_kscale)), _F32(0))
  total = jnp.sum(w, axis=1, keepdims=True)
  ok = jnp.abs(total) >= np.float32(1000.0) * np.finfo(np.float32).tiny
  w = jnp.where(ok, w * (_F32(1) / jnp.where(ok, total, _F32(1))), _F32(0))
  sampled = (sample >= 0) & (sample <= in_size)
  span = jnp.minimum(_F32(2) * jnp.ceil(reach) + _F32(1), _F32(in_size))
  start = jnp.where(sampled, start, _F32(0))
  taps = (src[None, :] >= start[:, None]) & (src[None, :] < (start + span)[:, None])
  return jnp.where(sampled[:, None], w, _F32(0)), taps


def span_weights(kernel_type, antialias, out_size, in_size, scale, translate):
  """(out_size, in_size) float32 weights of TF's ComputeSpansCore along one axis
  (scale and translate are float32 scalars, possibly traced)."""
  return _spans(kernel_type, antialias, out_size, in_size, scale, translate)[0]


def _grad_taps(w):
  """The taps of TF's ComputeGradSpans for a forward weight matrix ``w`` (out, in),
  as an (in, out) mask: for each input, its nonzero-weight outputs from the first
  one on, over the longest such run of any input (``span_size``), clipped to the
  output; an input no output reads has start 0 and zero weights."""
  out_size = w.shape[0]
  o = jnp.arange(out_size, dtype=_F32)[:, None]
  nonzero = w != 0
  first = jnp.min(jnp.where(nonzero, o, _F32(out_size)), axis=0)
  last = jnp.max(jnp.where(nonzero, o, _F32(-1)), axis=0)
  span = jnp.max(jnp.where(last >= first, last - first + 1, _F32(0)), initial=_F32(0))
  start = jnp.where(last >= first, first, _F32(0))
  return ((o >= start[None, :]) & (o < (start + span)[None, :])).T


def _matrices(kernel_type, antialias, out_hw, in_hw, scale, translation):
  """The rows' and columns' (weights, taps) of :func:`_spans`."""
  scale = jnp.asarray(scale, _F32)
  translation = jnp.asarray(translation, _F32)
  return tuple(
    _spans(kernel_type, antialias, out_hw[a], in_hw[a], scale[a], translation[a]) for a in range(2)
  )


def _contract(x, my, mx):
  """Rows, then columns; an exact zero is +0.0, as TF's span sums start from a zeroed
  output (XLA's one-term contractions would keep a -0.0 product)."""
  hi = lax.Precision.HIGHEST
  y = jnp.einsum("oh,nhwc->nowc", my, x, precision=hi)
  out = jnp.einsum("pw,nowc->nopc", mx, y, precision=hi)
  return jnp.where(out == 0, _F32(0), out)


def _check(images, scale, translation):
  if images.ndim != 4:
    raise ValueError(f"input must be 4-dimensional, got shape {images.shape}")
  if images.shape[1] == 0 or images.shape[2] == 0:
    raise ValueError("input image must be of non-zero size")
  if images.shape[3] == 0:
    raise ValueError("image must have at least one channel")
  for name, t in (("scale", scale), ("translation", translation)):
    if tuple(jnp.shape(t)) != (2,):
      raise ValueError(f"{name} must have two elements, got shape {jnp.shape(t)}")


def scale_and_translate(
  images, scale, translation, *, size, kernel_type="lanczos3", antialias=True
):
  """TF ScaleAndTranslate (float32 output). Non-positive scales, which TF rejects,
  give non-finite or zero rows here."""
  _check(images, scale, translation)
  oh, ow = (int(v) for v in size)
  if oh <= 0 or ow <= 0:
    raise ValueError(f"output dimensions must be positive, got {(oh, ow)}")
  (my, ty), (mx, tx) = _matrices(
    kernel_type, antialias, (oh, ow), images.shape[1:3], scale, translation
  )
  return separable_resample(
    images.astype(_F32),
    lambda x: _contract(x, my, mx),
    lambda: (weight_counts(ty, my), weight_counts(tx, mx)),
  )


def scale_and_translate_grad(
  grads, original_image, scale, translation, *, kernel_type="lanczos3", antialias=True
):
  """TF ScaleAndTranslateGrad: the transpose of ScaleAndTranslate (float32)."""
  _check(original_image, scale, translation)
  (my, _), (mx, _) = _matrices(
    kernel_type, antialias, grads.shape[1:3], original_image.shape[1:3], scale, translation
  )
  out = separable_resample(
    grads.astype(_F32),
    lambda g: _contract(g, my.T, mx.T),
    lambda: (weight_counts(_grad_taps(my), my.T), weight_counts(_grad_taps(mx), mx.T)),
  )
  return out.astype(original_image.dtype)


# --------------------------------------------------------------------------
# Rules
# --------------------------------------------------------------------------


def _forward_transpose(ct, images, scale, translation, *, size, kernel_type, antialias):
  """``tf.ScaleAndTranslateGrad`` (float32 only in TF: other float images get the
  float32 cotangent cast)."""
  shape, dtype = rules.shape_of(images), rules.dtype_of(images)
  like = rules.zeros(shape, np.dtype("float32"))
  g = tfops.ScaleAndTranslateGrad(
    rules.instantiate(ct), like, scale, translation, kernel_type=kernel_type, antialias=antialias
  )
  return [g if dtype == np.float32 else rules.cast_like(g, images), None, None]


def _grad_transpose(ct, grads, original_image, scale, translation, *, kernel_type, antialias):
  size = tuple(rules.shape_of(grads)[1:3])
  out = tfops.ScaleAndTranslate(
    rules.instantiate(ct),
    scale,
    translation,
    size=size,
    kernel_type=kernel_type,
    antialias=antialias,
  )
  return [out if U(grads) else None, None, None, None]


def _batching(op, impl, n_images):
  """The first ``n_images`` operands have N first: fold the batch into N when only
  they are batched; batched scale or translation: ``vmap`` of the impl (derived)."""

  def rule(args, dims, **p):
    if any(d is not None for d in dims[n_images:]):
      return rules.vmap_batching(impl, False)(args, dims, **p)
    b = rules.batch_size(args, dims)
    flat = []
    for a, d in zip(args[:n_images], dims[:n_images]):
      if d is None:
        a, d = jnp.broadcast_to(a, (b,) + a.shape), 0
      flat.append(merge_batch(a, d))
    out = op(*flat, *args[n_images:], **p)
    return split_batch(out, b), 0

  return rule


# --------------------------------------------------------------------------
# Specs
# --------------------------------------------------------------------------

_DTYPES = (
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


def tf_scale_and_translate(images, size, scale, translation, **attrs):
  """The oracle of ScaleAndTranslate's spec: TF's op on float images cast to float32
  (the kernel reads them as float32, so the values are TF's; TF's gradient op takes
  float32 images only, so other float images get TF's float32 gradient, cast)."""
  tf = import_tensorflow()
  images = tf.convert_to_tensor(images)
  if images.dtype in (tf.float16, tf.bfloat16, tf.float64):
    images = tf.cast(images, tf.float32)
  return tf.raw_ops.ScaleAndTranslate(
    images=images, size=size, scale=scale, translation=translation, **attrs
  )


def _st_calls(st, grad):
  @st.composite
  def draw_call(draw):
    n, c = draw(st.integers(1, 2)), draw(st.integers(1, 2))
    in_hw = (draw(st.integers(1, 4)), draw(st.integers(1, 4)))
    out_hw = (draw(st.integers(1, 6)), draw(st.integers(1, 6)))
    # Scales in quarter steps and translations in eighths: exact in float32, so
    # sampling positions and span ends are TF's (taps on kernel edges included).
    scale = np.array([draw(st.integers(1, 12)) / 4 for _ in range(2)], np.float32)
    translation = np.array([draw(st.integers(-12, 12)) / 8 for _ in range(2)], np.float32)
    attrs = dict(kernel_type=draw(st.sampled_from(sorted(KERNELS))), antialias=draw(st.booleans()))
    if grad:
      return dict(
        grads=with_nonfinite(st, draw, draw(bounded_values(st, "float32", (n,) + out_hw + (c,)))),
        original_image=draw(bounded_values(st, "float32", (n,) + in_hw + (c,))),
        scale=scale,
        translation=translation,
        **attrs,
      )
    dtype = draw(st.sampled_from(_DTYPES))
    shape = (n,) + in_hw + (c,)
    # Integers in [0, 100]: full-range values cancel in an order-dependent way.
    images = (
      draw(st.arrays(st.np_dtype(dtype), shape, min_value=0, max_value=100))
      if st.np_dtype(dtype).kind in "iu"
      else with_nonfinite(st, draw, draw(bounded_values(st, dtype, shape, bound=8.0)))
    )
    return dict(
      images=images, size=np.array(out_hw, np.int32), scale=scale, translation=translation, **attrs
    )

  return draw_call()


def _nonfinite_cases(grad):
  """Canonical calls: +inf, -inf and NaN pixels under a triangle kernel sampled on
  pixel centres (TF: [nan, nan, inf, nan, 4, 5] from [1, 2, inf, 3, 4, 5]: the
  zero-weight taps of each span are multiplied) and an antialiased lanczos3
  downscale with outputs sampled outside the image (start 0, zero weights)."""
  row = np.array([1, 2, np.inf, 3, 4, 5], np.float32)
  image = np.stack([row, -row, np.where(row == 4, np.nan, row)])[None, :, :, None]
  cases = []
  for out_hw, scale, translation, kernel in (
    ((3, 6), (1, 1), (0, 0), "triangle"),
    ((2, 3), (0.5, 0.75), (0.5, -1.25), "lanczos3"),
  ):
    common = dict(
      scale=np.array(scale, np.float32),
      translation=np.array(translation, np.float32),
      kernel_type=kernel,
      antialias=True,
    )
    if grad:
      grads = np.resize(np.concatenate([row, -row[::-1]]), out_hw).reshape((1,) + out_hw + (1,))
      cases.append(dict(common, grads=grads, original_image=np.zeros_like(image)))
    else:
      cases.append(dict(common, images=image, size=np.array(out_hw, np.int32)))
  return cases


_ATTRS = ("kernel_type", "antialias")

ScaleAndTranslate = register_op(
  "ScaleAndTranslate",
  scale_and_translate,
  family=FAMILY,
  static=("size",),
  attrs=_ATTRS,
  jvp=(
    lambda t, images, scale, translation, **p: tfops.ScaleAndTranslate(t, scale, translation, **p),
    None,
    None,
  ),
  transpose=_forward_transpose,
  batching=rules.per_op(_batching, scale_and_translate, 1),
  spec=lambda st: st.Spec(
    _st_calls(st, grad=False),
    rtol=1e-5,
    atol=1e-5,
    diff_args=("images",),
    examples=0.5,
    oracle=tf_scale_and_translate,
    cases=_nonfinite_cases(grad=False),
    note="TF's gradient op takes float32 images only: the oracle casts float images "
    "to float32 before TF's op (same values).",
  ),
)

ScaleAndTranslateGrad = register_op(
  "ScaleAndTranslateGrad",
  scale_and_translate_grad,
  family=FAMILY,
  attrs=_ATTRS,
  jvp=(
    lambda t, grads, orig, scale, translation, **p: tfops.ScaleAndTranslateGrad(
      t, orig, scale, translation, **p
    ),
    None,
    None,
    None,
  ),
  transpose=_grad_transpose,
  batching=rules.per_op(_batching, scale_and_translate_grad, 2),
  spec=lambda st: st.Spec(
    _st_calls(st, grad=True),
    rtol=1e-5,
    atol=1e-5,
    examples=0.5,
    diff_args=("grads",),
    cases=_nonfinite_cases(grad=True),
    note="original_image gives only the shape and dtype.",
  ),
)
