"""AudioMicrofrontend: the TFLite micro speech frontend, bit for bit.

``audio`` (int16 samples) -> ``[frames, num_channels * (1 + left + right)]``
(uint16 or float32), as the op's CPU kernel
(tensorflow/lite/experimental/microfrontend): per frame of ``window_size`` ms
every ``window_step`` ms, a fixed-point Hann window (12 bits), the frame scaled
up to use 15 bits, a 16-bit fixed-point real FFT (KISS FFT, radix 4 and 2 with
its rounding and per-stage scaling), energies, the 12-bit mel filterbank
(accumulated in 64 bits) and its integer square roots, noise reduction (a
per-channel running estimate: a ``lax.scan`` over frames), PCAN gain control
(the gain LUT's piecewise quadratic), and the integer log; then frames are
stacked with their left/right context, strided, and divided by ``out_scale``.

Every table (window, twiddles, filterbank weights, gain LUT) is computed at
trace time from the attrs with the kernel's float32/double arithmetic; the
per-frame arithmetic is integer arithmetic with the kernel's wrap-arounds.
64-bit integers are needed (the filterbank accumulates in uint64): with x64 off
the op raises Int64OverflowError. TF marks the op not differentiable: it is
integer-valued (no JVP applies). Batching is vmap of the impl (frames of
different examples are independent, but the op takes one 1-D signal).
"""

from __future__ import annotations

import functools
import math

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from tfprims import errors, rules
from tfprims.core import register_op
from tfprims.ops.fft._common import FAMILY

_WINDOW_BITS = 12
_FILTERBANK_BITS = 12
_NOISE_BITS = 14
_PCAN_SNR_BITS = 12
_PCAN_OUTPUT_BITS = 6
_WDF_BITS = 32
_LOG_SCALE_LOG2 = 16
_LOG_SEGMENTS_LOG2 = 7
_LOG_COEFF = 45426
_LOG_LUT = np.array(
  [
    0,
    224,
    442,
    654,
    861,
    1063,
    1259,
    1450,
    1636,
    1817,
    1992,
    2163,
    2329,
    2490,
    2646,
    2797,
    2944,
    3087,
    3224,
    3358,
    3487,
    3611,
    3732,
    3848,
    3960,
    4068,
    4172,
    4272,
    4368,
    4460,
    4549,
    4633,
    4714,
    4791,
    4864,
    4934,
    5001,
    5063,
    5123,
    5178,
    5231,
    5280,
    5326,
    5368,
    5408,
    5444,
    5477,
    5507,
    5533,
    5557,
    5578,
    5595,
    5610,
    5622,
    5631,
    5637,
    5640,
    5641,
    5638,
    5633,
    5626,
    5615,
    5602,
    5586,
    5568,
    5547,
    5524,
    5498,
    5470,
    5439,
    5406,
    5370,
    5332,
    5291,
    5249,
    5203,
    5156,
    5106,
    5054,
    5000,
    4944,
    4885,
    4825,
    4762,
    4697,
    4630,
    4561,
    4490,
    4416,
    4341,
    4264,
    4184,
    4103,
    4020,
    3935,
    3848,
    3759,
    3668,
    3575,
    3481,
    3384,
    3286,
    3186,
    3084,
    2981,
    2875,
    2768,
    2659,
    2549,
    2437,
    2323,
    2207,
    2090,
    1971,
    1851,
    1729,
    1605,
    1480,
    1353,
    1224,
    1094,
    963,
    830,
    695,
    559,
    421,
    282,
    142,
    0,
    0,
  ],
  np.int64,
)

f32 = np.float32


def _msb(x: int) -> int:
  return int(x).bit_length()


# --- trace-time tables (the kernel's *_util.c, float32 where it uses float) -------------


def _freq_to_mel(freq) -> np.float32:
  return f32(1127.0 * math.log1p(float(f32(freq)) / 700.0))


@functools.lru_cache(maxsize=None)
def _tables(
  sample_rate,
  window_size,
  window_step,
  num_channels,
  upper,
  lower,
  smoothing_bits,
  even_smoothing,
  odd_smoothing,
  min_signal_remaining,
  enable_pcan,
  pcan_strength,
  pcan_offset,
  gain_bits,
):
  size = window_size * sample_rate // 1000
  step = window_step * sample_rate // 1000
  if size < 3 or step < 1:
    raise ValueError(
      f"AudioMicrofrontend: a window of {size} samples every {step} "
      "(window_size and window_step are in ms of sample_rate): the "
      "fixed-point FFT needs windows of at least 3 samples"
    )
  arg = f32(math.pi * 2.0 / float(f32(size)))
  coeffs = np.array(
    [
      math.floor(
        float(f32(f32(0.5 - 0.5 * math.cos(float(arg) * (i + 0.5))) * f32(1 << _WINDOW_BITS))) + 0.5
      )
      for i in range(size)
    ],
    np.int64,
  )
  fft_size = 1 << (size - 1).bit_length()
  spectrum = fft_size // 2 + 1

  # Filterbank (filterbank_util.c): dense weights of each output channel.
  nc1 = num_channels + 1
  lower, upper = f32(lower), f32(upper)
  mel_low, mel_hi = _freq_to_mel(lower), _freq_to_mel(upper)
  spacing = f32(f32(mel_hi - mel_low) / f32(nc1))
  centers = [f32(mel_low + f32(spacing * f32(i + 1))) for i in range(nc1)]
  hz = f32(0.5 * sample_rate / float(f32(f32(spectrum) - f32(1))))
  start = int(1.5 + float(f32(lower / hz)))
  weights = np.zeros((nc1, spectrum), np.int64)
  unweights = np.zeros((nc1, spectrum), np.int64)
  end = 0
  freq_start = start
  for chan in range(nc1):
    f = freq_start
    while f < 10 * spectrum + 10 and _freq_to_mel(f32(f32(f) * hz)) <= centers[chan]:
      f += 1
    denom = mel_low if chan == 0 else centers[chan - 1]
    for freq in range(freq_start, f):
      if freq >= spectrum:
        break
      w = f32(f32(centers[chan] - _freq_to_mel(f32(f32(freq) * hz))) / f32(centers[chan] - denom))
      weights[chan, freq] = math.floor(float(f32(w * f32(1 << _FILTERBANK_BITS))) + 0.5)
      unweights[chan, freq] = math.floor((1.0 - float(w)) * (1 << _FILTERBANK_BITS) + 0.5)
    end = max(end, f)
    freq_start = f
  if end >= spectrum:
    raise ValueError(
      "AudioMicrofrontend: failed to populate frontend state (the filterbank's "
      f"end index {end} is above the spectrum size {spectrum}: upper_band_limit "
      "too close to the Nyquist frequency)"
    )
  # Output channel k accumulates channel k + 1's weights and channel k's unweights.
  bank = (weights[1:] + unweights[:-1]).astype(np.int64)

  correction = _msb(fft_size) - 1 - _FILTERBANK_BITS // 2
  smooth = [
    int(f32(f32(even_smoothing) * f32(1 << _NOISE_BITS))),
    int(f32(f32(odd_smoothing) * f32(1 << _NOISE_BITS))),
  ]
  smooth = np.array([smooth[i & 1] for i in range(num_channels)], np.int64) & 0xFFFF
  min_remaining = int(f32(f32(min_signal_remaining) * f32(1 << _NOISE_BITS))) & 0xFFFF

  lut = np.zeros(4 * _WDF_BITS - 3, np.int64)
  snr_shift = 0
  if enable_pcan:
    input_bits = smoothing_bits - correction
    snr_shift = gain_bits - correction - _PCAN_SNR_BITS

    def gain(x):
      xf = f32(f32(x) / f32(1 << input_bits))
      g = f32(f32(1 << gain_bits) * np.power(f32(xf + f32(pcan_offset)), f32(-f32(pcan_strength))))
      return 32767 if g > 32767 else int(np.int16(int(f32(g + f32(0.5)))))

    def i16(v):
      return ((int(v) + 2**15) % 2**16) - 2**15

    lut[0], lut[1] = gain(0), gain(1)
    for interval in range(2, _WDF_BITS + 1):
      x0 = 1 << (interval - 1)
      x1 = x0 + (x0 >> 1)
      x2 = x0 + (x0 - 1) if interval == _WDF_BITS else 2 * x0
      y0, y1, y2 = gain(x0), gain(x1), gain(x2)
      a1 = 4 * (y1 - y0) - (y2 - y0)
      a2 = (y2 - y0) - a1
      base = 4 * interval - 6
      lut[base], lut[base + 1], lut[base + 2] = y0, i16(a1), i16(a2)
  return dict(
    size=size,
    step=step,
    coeffs=coeffs,
    fft_size=fft_size,
    start=start,
    end=end,
    bank=bank,
    correction=correction,
    smooth=smooth,
    min_remaining=min_remaining,
    lut=lut,
    snr_shift=snr_shift,
  )


# --- the 16-bit fixed-point KISS FFT -------------------------------------------------------


def _w16(x):
  """Wraps int32 values to int16's range (C's assignment to an int16)."""
  return x.astype(jnp.int16).astype(jnp.int32)


def _sround(x):
  return _w16((x + (1 << 14)) >> 15)


def _fixdiv(x, k):
  return _sround(x * (32767 // k))


def _cmul(ar, ai, br, bi):
  return _sround(ar * br - ai * bi), _sround(ar * bi + ai * br)


@functools.lru_cache(maxsize=None)
def _kiss_plan(n):
  factors, p, m = [], 4, n
  floor_sqrt = math.floor(math.sqrt(n))
  while True:
    while m % p:
      p = {4: 2, 2: 3}.get(p, p + 2)
      if p > floor_sqrt:
        p = m
    m //= p
    factors.append((p, m))
    if m <= 1:
      break
  if any(p not in (2, 4) for p, _ in factors):
    raise ValueError(f"AudioMicrofrontend: FFT size {2 * n}: only radix 2 and 4 are used")
  phase = [
    -2 * 3.141592653589793238462643383279502884197169399375105820974944 * i / n for i in range(n)
  ]
  tw = (
    np.array([math.floor(0.5 + 32767 * math.cos(ph)) for ph in phase], np.int32),
    np.array([math.floor(0.5 + 32767 * math.sin(ph)) for ph in phase], np.int32),
  )
  return tuple(factors), tw


def _kiss_work(xr, xi, factors, tw, n):
  """kf_work: the DFT of the last axis, one radix stage per level. The kernel's
  ``p`` recursive calls on decimated inputs are one batched call here (the
  decimated sequences stacked on a new axis)."""
  (p, m), rest = factors[0], factors[1:]
  if m == 1:
    parts = [(xr[..., j : j + 1], xi[..., j : j + 1]) for j in range(p)]
  else:

    def decimate(v):
      return jnp.swapaxes(v.reshape(v.shape[:-1] + (m, p)), -1, -2)

    sr, si = _kiss_work(decimate(xr), decimate(xi), rest, tw, n)
    parts = [(sr[..., j, :], si[..., j, :]) for j in range(p)]
  fstride = n // (p * m)
  k = np.arange(m)
  parts = [(_fixdiv(a, p), _fixdiv(b, p)) for a, b in parts]
  if p == 2:
    (ar, ai), (br, bi) = parts
    tr, ti = _cmul(br, bi, tw[0][k * fstride], tw[1][k * fstride])
    out = [(_w16(ar + tr), _w16(ai + ti)), (_w16(ar - tr), _w16(ai - ti))]
  else:
    (f0r, f0i), (f1r, f1i), (f2r, f2i), (f3r, f3i) = parts
    s0 = _cmul(f1r, f1i, tw[0][k * fstride], tw[1][k * fstride])
    s1 = _cmul(f2r, f2i, tw[0][2 * k * fstride], tw[1][2 * k * fstride])
    s2 = _cmul(f3r, f3i, tw[0][3 * k * fstride], tw[1][3 * k * fstride])
    s5 = (_w16(f0r - s1[0]), _w16(f0i - s1[1]))
    g0 = (_w16(f0r + s1[0]), _w16(f0i + s1[1]))
    s3 = (_w16(s0[0] + s2[0]), _w16(s0[1] + s2[1]))
    s4 = (_w16(s0[0] - s2[0]), _w16(s0[1] - s2[1]))
    out = [
      (_w16(g0[0] + s3[0]), _w16(g0[1] + s3[1])),
      (_w16(s5[0] + s4[1]), _w16(s5[1] - s4[0])),
      (_w16(g0[0] - s3[0]), _w16(g0[1] - s3[1])),
      (_w16(s5[0] - s4[1]), _w16(s5[1] + s4[0])),
    ]
  return (
    jnp.concatenate([o[0] for o in out], axis=-1),
    jnp.concatenate([o[1] for o in out], axis=-1),
  )


def _kiss_fftr(x, fft_size):
  """kiss_fftr of int16 frames ``x[..., fft_size]`` (int32 arrays of int16 values):
  the ``fft_size // 2 + 1`` bins as (real, imag)."""
  n = fft_size // 2
  factors, tw = _kiss_plan(n)
  cr, ci = _kiss_work(x[..., 0::2], x[..., 1::2], factors, tw, n)
  phase = [-3.14159265358979323846264338327 * ((i + 1) / n + 0.5) for i in range(n // 2)]
  sr = np.array([math.floor(0.5 + 32767 * math.cos(ph)) for ph in phase], np.int32)
  si = np.array([math.floor(0.5 + 32767 * math.sin(ph)) for ph in phase], np.int32)
  dr, di = _fixdiv(cr[..., :1], 2), _fixdiv(ci[..., :1], 2)
  k = np.arange(1, n // 2 + 1)
  fpk = (_fixdiv(cr[..., k], 2), _fixdiv(ci[..., k], 2))
  fpnk = (_fixdiv(cr[..., n - k], 2), _fixdiv(_w16(-ci[..., n - k]), 2))
  f1 = (_w16(fpk[0] + fpnk[0]), _w16(fpk[1] + fpnk[1]))
  f2 = (_w16(fpk[0] - fpnk[0]), _w16(fpk[1] - fpnk[1]))
  t = _cmul(f2[0], f2[1], sr, si)
  lo = (_w16((f1[0] + t[0]) >> 1), _w16((f1[1] + t[1]) >> 1))  # bins k
  hi = (_w16((f1[0] - t[0]) >> 1), _w16((t[1] - f1[1]) >> 1))  # bins n - k
  # Bin n/2 is written twice; the n - k write comes last.
  mid = n // 2
  real = jnp.concatenate(
    [_w16(dr + di), lo[0][..., : mid - 1], hi[0][..., ::-1], _w16(dr - di)], axis=-1
  )
  imag = jnp.concatenate(
    [jnp.zeros_like(di), lo[1][..., : mid - 1], hi[1][..., ::-1], jnp.zeros_like(di)], axis=-1
  )
  return real, imag


# --- integer helpers ------------------------------------------------------------------------


def _msb_arr(x, bits):
  return bits - lax.clz(x).astype(jnp.int32)


def _isqrt(num, bits):
  """The kernel's Sqrt32/Sqrt64 (bit by bit, rounded up when the remainder allows)."""
  dt = num.dtype
  one = jnp.ones((), dt)
  top = bits - 1
  maxbit = (bits - _msb_arr(num, bits)) | 1
  bit = jnp.where(num == 0, jnp.zeros((), dt), one << jnp.clip(top - maxbit, 0, top).astype(dt))
  iters = (top - maxbit) // 2 + 1

  def body(it, carry):
    num, res, bit = carry
    active = it < iters
    take = active & (num >= res + bit)
    num = jnp.where(take, num - (res + bit), num)
    res = jnp.where(active, jnp.where(take, (res >> one) + bit, res >> one), res)
    bit = jnp.where(active, bit >> (2 * one), bit)
    return num, res, bit

  num, res, _ = lax.fori_loop(0, bits // 2, body, (num, jnp.zeros_like(num), bit))
  cap = (1 << (bits // 2)) - 1
  return jnp.where((num > res) & (res != cap), res + one, res)


def _sqrt64(work):
  small = (work >> np.uint64(32)) == 0
  s32 = _isqrt(jnp.where(small, work, 0).astype(jnp.uint32), 32).astype(jnp.uint64)
  s64 = _isqrt(jnp.where(small, 0, work), 64)
  return jnp.where(small, s32, s64).astype(jnp.uint32)


def _log(x, scale_shift):
  """The kernel's integer natural log (LogScaleApply's Log), for x > 1 (uint32)."""
  integer = (_msb_arr(x, 32) - 1).astype(jnp.uint32)
  frac = (x - (jnp.uint32(1) << integer)).astype(jnp.int32)
  li = integer.astype(jnp.int32)
  frac = jnp.where(
    li < _LOG_SCALE_LOG2,
    frac << jnp.maximum(_LOG_SCALE_LOG2 - li, 0),
    frac >> jnp.maximum(li - _LOG_SCALE_LOG2, 0),
  )
  base = (frac.astype(jnp.uint32) >> (_LOG_SCALE_LOG2 - _LOG_SEGMENTS_LOG2)).astype(jnp.int32)
  lut = jnp.asarray(_LOG_LUT.astype(np.int32))
  c0, c1 = lut[base], lut[base + 1]
  rel = ((c1 - c0) * (frac - base * (1 << (_LOG_SCALE_LOG2 - _LOG_SEGMENTS_LOG2)))) >> 16
  fraction = (frac + c0 + rel).astype(jnp.uint32)
  log2 = (integer << _LOG_SCALE_LOG2) + fraction
  loge = (
    (np.uint64(_LOG_COEFF) * log2.astype(jnp.uint64) + np.uint64(32768)) >> np.uint64(16)
  ).astype(jnp.uint32)
  return ((loge << jnp.uint32(scale_shift)) + jnp.uint32(32768)) >> jnp.uint32(16)


def _wide_dynamic(x, lut):
  """PCAN's WideDynamicFunction: the gain of a noise estimate (int16 result)."""
  lut = jnp.asarray(lut.astype(np.int32))
  interval = _msb_arr(x, 32)
  base = jnp.clip(4 * interval - 6, 0, lut.shape[0] - 3)
  up = jnp.clip(11 - interval, 0, 31).astype(jnp.uint32)
  down = jnp.clip(interval - 11, 0, 31).astype(jnp.uint32)
  frac = (jnp.where(interval < 11, x << up, x >> down) & jnp.uint32(0x3FF)).astype(jnp.int32)
  r = (lut[base + 2] * frac) >> 5
  r = r + (lut[base + 1].astype(jnp.uint32) << jnp.uint32(5)).astype(jnp.int32)
  r = r * frac
  r = ((r + (1 << 14)) >> 15) + lut[base]
  small = lut[jnp.minimum(x, 2).astype(jnp.int32)]
  return _w16(jnp.where(x <= 2, small, r))


# --- the op ---------------------------------------------------------------------------------


def _microfrontend_impl(
  audio,
  *,
  sample_rate,
  window_size,
  window_step,
  num_channels,
  upper_band_limit,
  lower_band_limit,
  smoothing_bits,
  even_smoothing,
  odd_smoothing,
  min_signal_remaining,
  enable_pcan,
  pcan_strength,
  pcan_offset,
  gain_bits,
  enable_log,
  scale_shift,
  left_context,
  right_context,
  frame_stride,
  zero_padding,
  out_scale,
  out_type,
):
  """Filterbank features of int16 audio by the TFLite micro frontend (bit exact)."""
  if audio.ndim != 1:
    raise ValueError(f"AudioMicrofrontend: audio is not a vector (shape {audio.shape})")
  if jax.dtypes.canonicalize_dtype(np.uint64) != np.dtype(np.uint64):
    raise errors.Int64OverflowError(
      "AudioMicrofrontend accumulates its filterbank in 64-bit integers, as TF's kernel: "
      "enable x64 with jax.config.update('jax_enable_x64', True)"
    )
  t = _tables(
    int(sample_rate),
    int(window_size),
    int(window_step),
    int(num_channels),
    float(upper_band_limit),
    float(lower_band_limit),
    int(smoothing_bits),
    float(even_smoothing),
    float(odd_smoothing),
    float(min_signal_remaining),
    bool(enable_pcan),
    float(pcan_strength),
    float(pcan_offset),
    int(gain_bits),
  )
  size, step, nc = t["size"], t["step"], int(num_channels)
  n = audio.shape[0]
  frames = (n - size) // step + 1 if n >= size else 0
  stack = 1 + left_context + right_context
  sampled = (frames - 1) // frame_stride + 1 if frames else 0
  out_dtype = np.dtype(out_type)
  if frames == 0:
    return jnp.zeros((sampled, nc * stack), out_dtype)

  # Window (int16 fixed point) and the scale-up shift of each frame.
  idx = np.arange(frames)[:, None] * step + np.arange(size)[None, :]
  x = audio.astype(jnp.int32)[idx]
  win = _w16((x * jnp.asarray(t["coeffs"].astype(np.int32))) >> _WINDOW_BITS)
  absw = _w16(jnp.where(win < 0, -win, win))
  max_abs = jnp.max(absw, axis=-1, keepdims=True)
  shift = 15 - _msb_arr(jnp.maximum(max_abs, 0).astype(jnp.uint32), 32)
  fft_in = _w16((win & 0xFFFF) << shift)
  fft_in = jnp.pad(fft_in, ((0, 0), (0, t["fft_size"] - size)))
  re, im = _kiss_fftr(fft_in, t["fft_size"])
  # Energies as the kernel stores them: uint32 bits in an int32, widened to uint64.
  energy = (re * re + im * im).astype(jnp.int32).astype(jnp.int64).astype(jnp.uint64)
  bank = jnp.asarray(t["bank"].astype(np.uint64))
  work = jnp.sum(bank[None, :, :] * energy[:, None, :], axis=-1)
  signal = _sqrt64(work) >> shift.astype(jnp.uint32)

  # Noise reduction: a running estimate per channel.
  smooth = jnp.asarray(t["smooth"].astype(np.uint64))
  one_minus = np.uint64(1 << _NOISE_BITS) - smooth
  sbits = jnp.uint32(smoothing_bits)

  def noise_step(estimate, sig):
    up = sig << sbits
    est = (
      (up.astype(jnp.uint64) * smooth + estimate.astype(jnp.uint64) * one_minus)
      >> np.uint64(_NOISE_BITS)
    ).astype(jnp.uint32)
    capped = jnp.minimum(est, up)
    floor = (
      (sig.astype(jnp.uint64) * np.uint64(t["min_remaining"])) >> np.uint64(_NOISE_BITS)
    ).astype(jnp.uint32)
    return est, (jnp.maximum((up - capped) >> sbits, floor), est)

  _, (signal, estimates) = lax.scan(noise_step, jnp.zeros((nc,), jnp.uint32), signal)

  if enable_pcan:
    gain = _wide_dynamic(estimates, t["lut"]).astype(jnp.uint32).astype(jnp.uint64)
    snr = ((signal.astype(jnp.uint64) * gain) >> np.uint64(t["snr_shift"])).astype(jnp.uint32)
    shrink_small = (snr * snr) >> jnp.uint32(2 + 2 * _PCAN_SNR_BITS - _PCAN_OUTPUT_BITS)
    shrink_big = (snr >> jnp.uint32(_PCAN_SNR_BITS - _PCAN_OUTPUT_BITS)) - jnp.uint32(
      1 << _PCAN_OUTPUT_BITS
    )
    signal = jnp.where(snr < (2 << _PCAN_SNR_BITS), shrink_small, shrink_big)

  if enable_log:
    c = t["correction"]
    v = signal >> jnp.uint32(-c) if c < 0 else signal << jnp.uint32(c)
    signal = jnp.where(v > 1, _log(jnp.maximum(v, 2), scale_shift), jnp.uint32(0))
  values = jnp.minimum(signal, jnp.uint32(0xFFFF)).astype(jnp.uint16)
  if out_dtype == np.dtype(np.float32):
    # In float64, then rounded: XLA may turn a float32 division by a constant into a
    # multiplication by its reciprocal (off by an ulp); a uint16 over an int is never
    # near a float32 tie, so this is C's correctly rounded float division.
    values = (values.astype(jnp.float64) / np.float64(out_scale)).astype(jnp.float32)
  else:
    values = (values.astype(jnp.int32) // out_scale).astype(out_dtype)

  # Context stacking and striding (the op kernel's last loop).
  anchors = np.arange(0, frames, frame_stride)
  rows = anchors[:, None] + np.arange(-left_context, right_context + 1)[None, :]
  picked = values[np.clip(rows, 0, frames - 1)]
  if zero_padding:
    inside = ((rows >= 0) & (rows < frames))[..., None]
    picked = jnp.where(inside, picked, jnp.zeros((), out_dtype))
  return picked.reshape(len(anchors), stack * nc)


_ATTRS = (
  "sample_rate",
  "window_size",
  "window_step",
  "num_channels",
  "upper_band_limit",
  "lower_band_limit",
  "smoothing_bits",
  "even_smoothing",
  "odd_smoothing",
  "min_signal_remaining",
  "enable_pcan",
  "pcan_strength",
  "pcan_offset",
  "gain_bits",
  "enable_log",
  "scale_shift",
  "left_context",
  "right_context",
  "frame_stride",
  "zero_padding",
  "out_scale",
  "out_type",
)


def _oracle(audio, **attrs):
  """TF oracle: the op's kernel lives in a library TF loads on demand."""
  from tensorflow.lite.experimental.microfrontend.python.ops import (  # noqa: F401
    audio_microfrontend_op,
  )
  from tensorflow.lite.experimental.microfrontend.ops import gen_audio_microfrontend_op as gen

  return gen.audio_microfrontend(audio, **attrs)


AudioMicrofrontend = register_op(
  "AudioMicrofrontend",
  _microfrontend_impl,
  family=FAMILY,
  attrs=_ATTRS,
  # vmap of the impl: the op takes one signal, and its noise estimate runs across
  # frames, so examples cannot be concatenated into one TF call.
  batching=rules.vmap_batching(_microfrontend_impl, False),
  spec=lambda st: st.Spec(
    _calls(st),
    oracle=_oracle,
    examples=0.5,
    skip={
      "jvp": "integer features: TF marks the op not differentiable",
      "vjp": "integer features: TF marks the op not differentiable",
    },
    note="bit exact; needs x64 (64-bit accumulation)",
  ),
)


def _calls(st):
  @st.composite
  def calls(draw):
    rate = draw(st.sampled_from([8000, 16000]))
    n = draw(st.integers(0, 1200))
    audio = st.draw_array(draw, np.dtype(np.int16), (n,))
    pcan = draw(st.booleans())
    return {
      "audio": audio,
      "sample_rate": rate,
      "window_size": draw(st.sampled_from([10, 25, 30])),
      "window_step": draw(st.sampled_from([5, 10])),
      "num_channels": draw(st.integers(4, 32)),
      "upper_band_limit": draw(st.sampled_from([3000.0, 3800.0])),
      "lower_band_limit": draw(st.sampled_from([125.0, 300.0])),
      "smoothing_bits": draw(st.sampled_from([8, 10])),
      "even_smoothing": 0.025,
      "odd_smoothing": 0.06,
      "min_signal_remaining": 0.05,
      "enable_pcan": pcan,
      "pcan_strength": 0.95,
      "pcan_offset": 80.0,
      "gain_bits": 21,
      "enable_log": draw(st.booleans()),
      "scale_shift": draw(st.sampled_from([6, 7])),
      "left_context": draw(st.integers(0, 2)),
      "right_context": draw(st.integers(0, 2)),
      "frame_stride": draw(st.integers(1, 3)),
      "zero_padding": draw(st.booleans()),
      "out_scale": draw(st.sampled_from([1, 3])),
      "out_type": draw(st.sampled_from([np.dtype(np.uint16), np.dtype(np.float32)])),
    }

  return calls()
