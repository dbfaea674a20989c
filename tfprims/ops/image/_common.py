"""Runtime helpers shared by the image ops: TF's float32 roundings under XLA's CPU
backend and separable resampling with TF's non-finite pattern (the property-test spec
helpers are in ``_specs.py``)."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

FAMILY = "image"


def stored(x):
  """``x`` as a stored float32 value. XLA's CPU backend contracts a multiply feeding
  an add into one fused multiply-add (one rounding instead of two); TF's kernels round
  the product first. Sampling positions decide which pixels are read (and whether a
  sample falls outside the image), so they are computed with TF's two roundings:
  the select on NaN (an identity) keeps the product out of the contraction."""
  return jnp.where(jnp.isnan(x), jnp.asarray(np.nan, x.dtype), x)


def tap_counts(taps, positive, negative):
  """Per-axis tap indicators of a resampling kernel, (out, in) counts of how many of
  each output's taps read each input: ``taps`` every tap TF's loop multiplies
  (zero-weight ones and ones clamped onto an edge pixel included), ``positive`` and
  ``negative`` those with a weight of that sign. Returns the float32 matrices
  :func:`separable_resample` counts non-finite contributions with: (all taps, taps
  with a nonzero weight, positive minus negative)."""
  f32 = np.float32
  taps, positive, negative = (a.astype(f32) for a in (taps, positive, negative))
  return taps, positive + negative, positive - negative


def weight_counts(taps, weights):
  """:func:`tap_counts` of a kernel with one tap per (output, input) pair: ``taps``
  a boolean (out, in) mask, ``weights`` the weight matrix."""
  xp = jnp if isinstance(taps, jax.Array) or isinstance(weights, jax.Array) else np
  taps = xp.asarray(taps, bool)
  return tap_counts(taps, taps & (weights > 0), taps & (weights < 0))


def separable_resample(x, contract, counts):
  """``contract(x)`` (a separable float32 resampling: rows, then columns) with TF's
  non-finite pattern. TF's kernels sum each output's taps one product at a time, so
  a non-finite pixel reaches only the outputs whose taps read it: an infinity times a
  zero-weight tap is NaN, times a weight keeps or flips its sign, and infinities of
  both signs (or a NaN) make a NaN. A dense contraction would instead multiply it by
  the zeros of every other output's row. When ``x`` holds a non-finite value
  (``lax.cond``: finite images run ``contract`` alone), the finite part contracts the
  image with those values zeroed and each output counts its +inf, -inf and NaN
  contributions by contracting indicator images with ``counts()``: a thunk returning
  ``(rows, columns)``, each :func:`tap_counts` (built only on that branch)."""
  if not jnp.issubdtype(x.dtype, jnp.floating):
    return contract(x)

  def nonfinite(x):
    finite = jnp.isfinite(x)
    out = contract(jnp.where(finite, x, jnp.zeros((), x.dtype)))
    (ty, ay, sy), (tx, ax, sx) = counts()
    hi = lax.Precision.HIGHEST
    count = lambda v, my, mx: jnp.einsum(
      "pw,nowc->nopc",
      mx,
      jnp.einsum("oh,nhwc->nowc", my, v.astype(x.dtype), precision=hi),
      precision=hi,
    )
    inf = jnp.isinf(x)
    reached = count(~finite, ty, tx)  # NaN pixels and infinities, every tap
    weighted = count(inf, ay, ax)  # infinities on nonzero-weight taps
    signed = count(jnp.where(inf, jnp.sign(x), 0), sy, sx)  # +inf minus -inf
    half = np.float32(0.5)
    nan = (reached - weighted > half) | ((weighted + signed > half) & (weighted - signed > half))
    out = jnp.where(weighted + signed > half, jnp.inf, out)
    out = jnp.where(weighted - signed > half, -jnp.inf, out)
    return jnp.where(nan, jnp.nan, out).astype(out.dtype)

  return lax.cond(jnp.any(~jnp.isfinite(x)), nonfinite, contract, x)
