"""Audio features: AudioSpectrogram and Mfcc (TF's speech-commands kernels).

* AudioSpectrogram: ``input[samples, channels]`` -> ``[channels, frames,
  fft_length // 2 + 1]``: frames of ``window_size`` samples every ``stride``,
  times TF's periodic Hann window, zero-padded to the next power of two, squared
  magnitudes of their real FFT (or magnitudes). TF computes in double and rounds
  to float; so does the impl where 64-bit types are enabled (x64), else in float32.
* Mfcc: ``spectrogram[channels, frames, bins]`` (squared magnitudes) and a
  ``sample_rate`` scalar -> ``[channels, frames, dct_coefficient_count]``: TF's
  HTK-style mel filterbank (triangles on the square roots, DC excluded), the log
  (floored at 1e-12) and TF's DCT-II. The filterbank is built from the traced
  sample rate with the kernel's formulas, so ``sample_rate`` may be a tensor.

TF registers no gradient for either op: their JVPs are derived from the impls.
Batching folds the batch axis into the channels (TF ops: Transpose, Reshape)
around one call of the op; a batched Mfcc sample rate falls back to vmap of the
impl. docs/semantics/fft.md.
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np

from tfprims import rules
from tfprims.core import register_op, tfops
from tfprims.ops.fft._common import FAMILY


def _compute_dtype():
  """float64 where enabled (TF's kernels compute in double), else float32."""
  return jax.dtypes.canonicalize_dtype(np.float64)


def _next_power_of_two(n: int) -> int:
  return 1 << (n - 1).bit_length()


def _periodic_hann(n: int) -> np.ndarray:
  return 0.5 - 0.5 * np.cos(2 * np.pi * np.arange(n) / n)


def _spectrogram_impl(input, *, window_size, stride, magnitude_squared):
  """Squared-magnitude (or magnitude) spectrogram of each channel of ``input``
  with TF's periodic Hann window and an FFT of the next power of two."""
  if window_size <= 1:
    raise ValueError(f"AudioSpectrogram: window_size must be > 1, got {window_size}")
  if stride <= 0:
    raise ValueError(f"AudioSpectrogram: stride must be > 0, got {stride}")
  if input.ndim != 2:
    raise ValueError(f"AudioSpectrogram: input must be 2-dimensional, got {input.shape}")
  samples, channels = input.shape
  n = _next_power_of_two(window_size)
  frames = 0 if samples < window_size else 1 + (samples - window_size) // stride
  if frames == 0 or channels == 0:
    return jnp.zeros((channels, frames, n // 2 + 1), jnp.float32)
  dt = _compute_dtype()
  idx = np.arange(frames)[:, None] * stride + np.arange(window_size)[None, :]
  x = jnp.transpose(input.astype(dt))[:, idx] * _periodic_hann(window_size).astype(dt)
  spec = jnp.fft.rfft(x, n=n, axis=-1)
  power = (jnp.real(spec) ** 2 + jnp.imag(spec) ** 2).astype(jnp.float32)
  return power if magnitude_squared else jnp.sqrt(power)


def _spectrogram_batch(args, dims, *, window_size, stride, magnitude_squared):
  # [B, samples, C] -> [samples, C * B]: one spectrogram per (channel, example).
  (x,), (d,) = args, dims
  b, s, c = (x.shape[d],) + rules.unbatched_shape(x, d)
  x = rules.transpose(rules.to_front(x, d), (1, 2, 0))
  out = tfops.AudioSpectrogram(
    rules.reshape(x, (s, c * b)),
    window_size=window_size,
    stride=stride,
    magnitude_squared=magnitude_squared,
  )
  frames, bins = rules.shape_of(out)[1:]
  return rules.reshape(out, (c, b, frames, bins)), 1


AudioSpectrogram = register_op(
  "AudioSpectrogram",
  _spectrogram_impl,
  family=FAMILY,
  attrs=("window_size", "stride", "magnitude_squared"),
  batching=_spectrogram_batch,
  spec=lambda st: st.Spec(_spectrogram_calls(st), rtol=1e-5, atol=1e-5),
)


# --- Mfcc ---------------------------------------------------------------------------------

_FILTERBANK_FLOOR = 1e-12


def _mel(f):
  return 1127.0 * jnp.log1p(f / 700.0)


def _mfcc_params(op, length, lower, upper, channels, coefficients):
  if (
    channels < 1
    or length < 2
    or lower < 0
    or upper <= lower
    or coefficients < 1
    or (coefficients > channels)
  ):
    raise ValueError(
      f"{op}: Mfcc initialization failed for channel count {length} (needs >= 2), "
      f"filterbank_channel_count {channels} (>= 1), dct_coefficient_count "
      f"{coefficients} (in [1, filterbank_channel_count]), frequency limits "
      f"[{lower}, {upper}] (0 <= lower < upper)"
    )


def _mfcc_impl(
  spectrogram,
  sample_rate,
  *,
  upper_frequency_limit,
  lower_frequency_limit,
  filterbank_channel_count,
  dct_coefficient_count,
):
  """MFCCs of each frame of a squared-magnitude spectrogram, as TF's Mfcc kernel."""
  if spectrogram.ndim != 3:
    raise ValueError(f"Mfcc: spectrogram must be 3-dimensional, got {spectrogram.shape}")
  if jnp.ndim(sample_rate) != 0:
    raise ValueError("Mfcc: Input sample_rate should be a scalar tensor")
  length = spectrogram.shape[-1]
  # TF's float attrs, widened to double as the kernel does.
  lower = float(np.float32(lower_frequency_limit))
  upper = float(np.float32(upper_frequency_limit))
  nc, nd = int(filterbank_channel_count), int(dct_coefficient_count)
  _mfcc_params("Mfcc", length, lower, upper, nc, nd)
  out_shape = spectrogram.shape[:2] + (nd,)
  if math.prod(out_shape) == 0:
    return jnp.zeros(out_shape, jnp.float32)
  dt = _compute_dtype()
  mel_low, mel_hi = 1127.0 * np.log1p(lower / 700.0), 1127.0 * np.log1p(upper / 700.0)
  centers = mel_low + (mel_hi - mel_low) / (nc + 1) * (np.arange(nc + 1) + 1)
  hz = 0.5 * sample_rate.astype(dt) / (length - 1)
  start = jnp.floor(1.5 + lower / hz)
  end = jnp.floor(upper / hz)
  i = np.arange(length)
  melf = _mel(i.astype(dt) * hz)
  used = (i >= start) & (i <= end)
  # The kernel's band_mapper: the channel whose triangle's right side bin i is on.
  band = jnp.sum(centers[:nc].astype(dt)[None, :] < melf[:, None], axis=1) - 1
  c = centers.astype(dt)
  right = jnp.take(c, band + 1, mode="clip")
  left = jnp.where(band >= 0, jnp.take(c, jnp.maximum(band, 0), mode="clip"), mel_low)
  weights = (right - melf) / (right - left)
  # Each bin adds to two channels only: masks (not a matmul) keep a NaN bin from
  # spreading to every channel, as in the kernel's loop.
  s = jnp.sqrt(spectrogram.astype(dt))[..., :, None]
  w = weights[:, None]
  ch = np.arange(nc)[None, :]
  to_right = used[:, None] & (band[:, None] == ch)
  to_left = used[:, None] & (band[:, None] + 1 == ch)
  zero = jnp.zeros((), dt)
  mel = jnp.sum(jnp.where(to_right, s * w, zero), axis=-2) + jnp.sum(
    jnp.where(to_left, s - s * w, zero), axis=-2
  )
  logs = jnp.log(jnp.where(mel < _FILTERBANK_FLOOR, _FILTERBANK_FLOOR, mel))
  cosines = math.sqrt(2.0 / nc) * np.cos(
    np.arange(nd)[:, None] * (np.pi / nc) * (np.arange(nc)[None, :] + 0.5)
  )
  out = jnp.sum(logs[..., None, :] * cosines.astype(dt), axis=-1)
  # The kernel computes nothing (zeros) when the upper limit's bin is past the input.
  out = jnp.where(end >= length, zero, out)
  return out.astype(jnp.float32)


def _mfcc_check(spectrogram, sample_rate, **_):
  """TF's kernel fails to initialise for a non-positive sample rate."""
  return sample_rate <= 0, "Mfcc initialization failed: Sample rate must be positive"


def _mfcc_batch(args, dims, **params):
  (s, r), (ds, dr) = args, dims
  if dr is not None:
    # A per-example sample rate changes the filterbank: no single TF call covers it.
    return rules.vmap_batching(_mfcc_impl, False)(args, dims, **params)
  b = s.shape[ds]
  c, f, n = rules.unbatched_shape(s, ds)
  out = tfops.Mfcc(rules.reshape(rules.to_front(s, ds), (b * c, f, n)), r, **params)
  return rules.reshape(out, (b, c, f, rules.shape_of(out)[-1])), 0


Mfcc = register_op(
  "Mfcc",
  _mfcc_impl,
  family=FAMILY,
  attrs=(
    "upper_frequency_limit",
    "lower_frequency_limit",
    "filterbank_channel_count",
    "dct_coefficient_count",
  ),
  check=_mfcc_check,
  batching=_mfcc_batch,
  spec=lambda st: st.Spec(_mfcc_calls(st), rtol=1e-5, atol=1e-5),
)


# --- property-test strategies -------------------------------------------------------------


def _spectrogram_calls(st):
  @st.composite
  def calls(draw):
    window = draw(st.integers(2, 12))
    samples = draw(st.integers(0, 40))
    channels = draw(st.integers(0, 3))
    x = st.draw_array(draw, np.dtype(np.float32), (samples, channels), lo=-1.0, hi=1.0, finite=True)
    return {
      "input": x,
      "window_size": window,
      "stride": draw(st.integers(1, 8)),
      "magnitude_squared": draw(st.booleans()),
    }

  return calls()


def _mfcc_calls(st):
  @st.composite
  def calls(draw):
    bins = draw(st.sampled_from([5, 9, 17, 33, 65]))
    shape = (draw(st.integers(0, 2)), draw(st.integers(0, 3)), bins)
    spec = st.draw_array(draw, np.dtype(np.float32), shape, lo=0.0, hi=100.0, finite=True)
    channels = draw(st.integers(1, 24))
    lower = draw(st.sampled_from([0.0, 20.0, 125.0, 300.0]))
    upper = draw(st.sampled_from([1000.0, 3800.0, 4000.0, 7600.0]))
    return {
      "spectrogram": spec,
      "sample_rate": np.int32(draw(st.sampled_from([8000, 16000, 22050, 44100]))),
      "upper_frequency_limit": upper,
      "lower_frequency_limit": lower,
      "filterbank_channel_count": channels,
      "dct_coefficient_count": draw(st.integers(1, channels)),
    }

  return calls()
