"""FFT and audio ops in real programs, compared with TF: tf.signal FFTs with grads,
an STFT -> log-mel -> MFCC pipeline (outputs, grads, vmap), inverse_stft, and the
policies of docs/semantics/fft.md."""

from __future__ import annotations


import jax
import jax.numpy as jnp
import numpy as np
import pytest
import tensorflow as tf

import tfprims
from tfprims.core import get_op
from helpers import jaxpr_primitives, tape_vjp

RNG = np.random.default_rng(0)


def _randn(*shape, dtype=np.float32):
  return RNG.normal(size=shape).astype(dtype)


def _crandn(*shape, dtype=np.complex64):
  return (RNG.normal(size=shape) + 1j * RNG.normal(size=shape)).astype(dtype)


def _jax_grad(fn, x, ct):
  """TF's gradient convention: conj(vjp(conj(ct))) (the identity for real values)."""
  _, vjp = jax.vjp(fn, x)
  return np.conj(np.asarray(vjp(np.conj(ct))[0]))


def _close(a, b, tol=1e-4):
  a, b = np.asarray(a), np.asarray(b)
  assert a.shape == b.shape and a.dtype == b.dtype, (a.shape, a.dtype, b.shape, b.dtype)
  np.testing.assert_allclose(a, b, rtol=tol, atol=tol * max(1.0, float(np.abs(b).max())))


# --- tf.signal FFTs: values and gradients -------------------------------------------------

_SIGNAL_CASES = [
  # (tf.signal function, input shape, fft_length, complex input)
  ("fft", (3, 8), None, True),
  ("ifft", (2, 3, 5), None, True),
  ("fft2d", (2, 4, 6), None, True),
  ("ifft2d", (4, 5), None, True),
  ("fft3d", (2, 3, 4, 5), None, True),
  ("ifft3d", (3, 4, 2), None, True),
  ("rfft", (3, 8), None, False),
  ("rfft", (3, 8), [5], False),  # shorter: the kernel crops
  ("rfft", (3, 8), [12], False),  # longer: tf.signal pads with a Pad op
  ("irfft", (3, 5), None, True),
  ("irfft", (3, 5), [7], True),  # odd length
  ("irfft", (3, 5), [4], True),  # crops the half spectrum
  ("irfft", (3, 5), [14], True),  # pads it
  ("rfft2d", (2, 4, 6), [3, 6], False),
  ("rfft2d", (2, 4, 6), [6, 9], False),
  ("irfft2d", (2, 4, 4), [4, 5], True),
  ("irfft2d", (4, 4), [3, 10], True),
  ("rfft3d", (2, 3, 4, 5), [3, 4, 5], False),
  ("rfft3d", (3, 4, 5), [2, 5, 6], False),
  ("irfft3d", (2, 3, 4, 3), [3, 4, 4], True),
]


@pytest.mark.parametrize("name,shape,fft_length,is_complex", _SIGNAL_CASES)
def test_tf_signal_ffts_match_tf_with_grads(name, shape, fft_length, is_complex):
  x = _crandn(*shape) if is_complex else _randn(*shape)
  tf_fn = getattr(tf.signal, name)

  def f(x):
    return tf_fn(x) if fft_length is None else tf_fn(x, fft_length=fft_length)

  fn = tfprims.convert_functional(tf.function(f), tf.TensorSpec(shape, tf.as_dtype(x.dtype)))
  expected = f(x).numpy()
  got = fn(x)
  _close(got, expected)
  jaxpr = jax.make_jaxpr(fn)(x)
  op = {"fft": "FFT", "ifft": "IFFT"}.get(name, name.upper().replace("D", "D"))
  assert f"tf.{op}" in jaxpr_primitives(jaxpr), jaxpr_primitives(jaxpr)

  ct = _crandn(*expected.shape) if np.iscomplexobj(expected) else _randn(*expected.shape)
  ours = _jax_grad(fn, x, ct)
  inverse = name.startswith("irfft")
  need = None
  if fft_length is not None:
    need = list(fft_length[:-1]) + [fft_length[-1] // 2 + 1 if inverse else fft_length[-1]]
  cropped = need is not None and any(n < s for n, s in zip(need, shape[-len(need) :]))
  if name in ("rfft3d", "irfft3d") or (name.startswith(("rfft", "irfft")) and cropped):
    # TF registers no gradient for the 3-D real FFTs, and its RFFT/IRFFT gradients
    # are wrong for a cropping call (docs/semantics/fft.md): compare with jnp.fft
    # of the explicitly cropped input.
    k = len(need) if need else 3
    axes = tuple(range(-k, 0))

    def ref_fn(x):  # crops or pads as tf.signal's wrapper and TF's kernel do
      lengths = tuple(fft_length or shape[-k:])
      if inverse:
        return jnp.fft.irfftn(x, s=lengths, axes=axes)
      return jnp.fft.rfftn(x, s=lengths, axes=axes)

    _close(ours, _jax_grad(ref_fn, x, ct))
  else:
    _close(ours, tape_vjp(f, x, ct))


def test_irfft_ignores_the_imaginary_parts_of_dc_and_nyquist_like_tf():
  x = _crandn(2, 5)
  for n in (8, 9):
    fn = tfprims.convert_functional(
      tf.function(lambda x: tf.signal.irfft(x, [n])), tf.TensorSpec([2, 5], tf.complex64)
    )
    _close(fn(x), tf.signal.irfft(x, [n]).numpy())
    y = x.copy()
    y[:, 0] = y[:, 0].real
    if n % 2 == 0:
      y[:, n // 2] = y[:, n // 2].real
    np.testing.assert_array_equal(np.asarray(fn(x)), np.asarray(fn(y)))


def test_rfft_input_shorter_than_fft_length_is_an_error_like_tf():
  with pytest.raises(tf.errors.InvalidArgumentError, match="at least 8"):
    tf.raw_ops.RFFT(input=_randn(2, 5), fft_length=[8])
  with pytest.raises(ValueError, match="must have length of at least 8"):
    get_op("RFFT")(_randn(2, 5), fft_length=(8,))
  with pytest.raises(ValueError, match="must have length of at least 6"):
    get_op("IRFFT")(_crandn(2, 5), fft_length=(10,))


def test_fftnd_accepts_only_the_innermost_axes_like_tfs_kernel():
  x = _crandn(2, 3, 4)
  out = get_op("FFTND")(x, fft_length=(3, 6), axes=(-2, -1))
  _close(out, np.fft.fftn(x, s=(3, 6), axes=(1, 2)).astype(np.complex64))
  with pytest.raises(ValueError, match="successive and ascending"):
    get_op("FFTND")(x, fft_length=(2, 4), axes=(0, 2))
  with pytest.raises(ValueError, match="at least one axis"):
    get_op("IFFTND")(x, fft_length=(), axes=())
  # As a graph node, the axes are canonicalised (negative) and printed.
  node = get_op("RFFTND")
  operands, params = node.prepare(
    {"input": _randn(2, 3, 4), "fft_length": np.array([3, 4]), "axes": np.array([1, 2])}, {}
  )
  assert params["axes"] == (-2, -1)


def test_grad_and_vmap_of_ffts_keep_tf_names():
  x = _randn(3, 8)

  def f(x):
    y = get_op("RFFT")(x, fft_length=(8,))
    z = get_op("IFFT")(get_op("FFT")(y))
    return get_op("IRFFT")(z, fft_length=(8,))

  g = jax.make_jaxpr(jax.grad(lambda x: jnp.sum(f(x) ** 2)))(x)
  names = jaxpr_primitives(g)
  assert {"tf.RFFT", "tf.IRFFT", "tf.FFT", "tf.IFFT", "tf.Real", "tf.Conj"} <= names, names
  assert not any(n in names for n in ("fft", "rfft")), names
  xs = _randn(8, 3)
  v = jax.make_jaxpr(jax.vmap(f, in_axes=1))(xs)
  assert {"tf.RFFT", "tf.IRFFT", "tf.FFT", "tf.IFFT"} <= jaxpr_primitives(v)
  np.testing.assert_allclose(
    jax.vmap(f, in_axes=1)(xs), np.stack([f(xs[:, i]) for i in range(3)]), rtol=1e-5, atol=1e-5
  )


# --- STFT -> log-mel -> MFCC --------------------------------------------------------------


def _mfcc_pipeline(signals):
  stfts = tf.signal.stft(signals, frame_length=64, frame_step=32, fft_length=64)
  spectrograms = tf.abs(stfts)
  mel = tf.signal.linear_to_mel_weight_matrix(
    num_mel_bins=16,
    num_spectrogram_bins=33,
    sample_rate=8000,
    lower_edge_hertz=80.0,
    upper_edge_hertz=3800.0,
  )
  mel_spectrograms = tf.tensordot(spectrograms, mel, 1)
  log_mel = tf.math.log(mel_spectrograms + 1e-6)
  return tf.signal.mfccs_from_log_mel_spectrograms(log_mel)[..., :13]


def test_stft_log_mel_mfcc_pipeline_matches_tf_with_grad_and_vmap():
  x = _randn(2, 512)
  fn = tfprims.convert_functional(
    tf.function(_mfcc_pipeline), tf.TensorSpec([None, 512], tf.float32)
  )
  expected = _mfcc_pipeline(x).numpy()
  _close(fn(x), expected, tol=2e-4)
  jaxpr = jax.make_jaxpr(fn)(x)
  assert "tf.RFFT" in jaxpr_primitives(jaxpr)

  ct = _randn(*expected.shape)
  ours = _jax_grad(fn, x, ct)
  _close(ours, tape_vjp(_mfcc_pipeline, x, ct), tol=5e-4)
  grad_names = jaxpr_primitives(jax.make_jaxpr(lambda x: jax.vjp(fn, x)[1](ct))(x))
  assert {"tf.RFFT", "tf.FFT", "tf.Real"} <= grad_names, grad_names

  # vmap over a batch of single signals vs per-example TF results.
  xs = _randn(3, 1, 512)
  batched = jax.vmap(fn)(xs)
  for i in range(3):
    _close(batched[i], _mfcc_pipeline(xs[i]).numpy(), tol=2e-4)
  assert "tf.RFFT" in jaxpr_primitives(jax.make_jaxpr(jax.vmap(fn))(xs))


def test_inverse_stft_round_trip_matches_tf():
  frame_length, frame_step = 64, 16

  def round_trip(x):
    stft = tf.signal.stft(x, frame_length, frame_step, fft_length=64)
    return tf.signal.inverse_stft(
      stft,
      frame_length,
      frame_step,
      fft_length=64,
      window_fn=tf.signal.inverse_stft_window_fn(frame_step),
    )

  x = _randn(2, 512)
  fn = tfprims.convert_functional(tf.function(round_trip), tf.TensorSpec([2, 512], tf.float32))
  expected = round_trip(x).numpy()
  got = np.asarray(fn(x))
  _close(got, expected)
  # Away from the edges the round trip reconstructs the signal.
  np.testing.assert_allclose(got[:, 64:-64], x[:, 64:-64], atol=1e-4)
  assert {"tf.RFFT", "tf.IRFFT"} <= jaxpr_primitives(jax.make_jaxpr(fn)(x))
  ct = _randn(*expected.shape)
  _close(_jax_grad(fn, x, ct), tape_vjp(round_trip, x, ct))


# --- AudioSpectrogram and Mfcc ------------------------------------------------------------


def _speech_features(audio, sample_rate):
  spec = tf.raw_ops.AudioSpectrogram(
    input=audio, window_size=480, stride=160, magnitude_squared=True
  )
  mfcc = tf.raw_ops.Mfcc(
    spectrogram=spec,
    sample_rate=sample_rate,
    upper_frequency_limit=4000.0,
    lower_frequency_limit=20.0,
    filterbank_channel_count=40,
    dct_coefficient_count=13,
  )
  return spec, mfcc


def _sine(n, freq, rate, channels=1):
  t = np.arange(n) / rate
  return np.stack(
    [np.sin(2 * np.pi * freq * (c + 1) * t) * 0.5 for c in range(channels)], axis=1
  ).astype(np.float32)


def test_audio_spectrogram_and_mfcc_on_a_sine_wave_match_tf():
  audio = _sine(4000, 440.0, 16000, channels=2)
  rate = np.int32(16000)
  fn = tfprims.convert_functional(
    tf.function(_speech_features), tf.TensorSpec([4000, 2], tf.float32), tf.TensorSpec([], tf.int32)
  )  # the sample rate is traced
  spec, mfcc = fn(audio, rate)
  tf_spec, tf_mfcc = (t.numpy() for t in _speech_features(audio, rate))
  assert spec.shape == tf_spec.shape == (2, 23, 257)
  _close(spec, tf_spec, tol=1e-5)
  # Without x64 the FFT runs in float32: the bins far from the tone (1e-8 of its
  # energy) are rounding noise, and so are the logs of the mel bands made of them.
  _close(mfcc, tf_mfcc, tol=2e-2)
  # The 440 Hz tone peaks in its bin (440 / (16000 / 512) ~ bin 14).
  assert int(np.argmax(np.asarray(spec)[0, 3])) == 14
  names = jaxpr_primitives(jax.make_jaxpr(fn)(audio, rate))
  assert {"tf.AudioSpectrogram", "tf.Mfcc"} <= names
  with jax.enable_x64(True):
    spec64, mfcc64 = fn(audio, rate)
  np.testing.assert_allclose(np.asarray(spec64), tf_spec, rtol=1e-6, atol=1e-6)
  np.testing.assert_allclose(np.asarray(mfcc64), tf_mfcc, rtol=1e-6, atol=1e-5)


def test_audio_ops_vmap_fold_the_batch_into_channels_and_match_tf():
  audios = np.stack([_sine(2000, f, 8000) for f in (300.0, 700.0, 1100.0)])

  def f(a):
    spec = get_op("AudioSpectrogram")(a, window_size=256, stride=128, magnitude_squared=False)
    return get_op("Mfcc")(
      spec,
      np.int32(8000),
      upper_frequency_limit=3800.0,
      lower_frequency_limit=20.0,
      filterbank_channel_count=20,
      dct_coefficient_count=10,
    )

  with jax.enable_x64(True):  # TF computes in double (see the sine-wave test)
    out = jax.vmap(f)(audios)
  for i, a in enumerate(audios):
    spec = tf.raw_ops.AudioSpectrogram(input=a, window_size=256, stride=128)
    ref = tf.raw_ops.Mfcc(
      spectrogram=spec,
      sample_rate=8000,
      upper_frequency_limit=3800.0,
      filterbank_channel_count=20,
      dct_coefficient_count=10,
    )
    _close(out[i], ref.numpy(), tol=1e-4)
  names = jaxpr_primitives(jax.make_jaxpr(jax.vmap(f))(audios))
  assert {"tf.AudioSpectrogram", "tf.Mfcc", "tf.Reshape"} <= names, names


def test_mfcc_policies_match_tf():
  spec = np.abs(_randn(1, 3, 33)) * 10
  kw = dict(
    upper_frequency_limit=4000.0,
    lower_frequency_limit=20.0,
    filterbank_channel_count=12,
    dct_coefficient_count=6,
  )
  mfcc = get_op("Mfcc")
  # A NaN outside the filterbank's bins (DC is always excluded) changes nothing,
  # as in TF's loop over the used bins.
  nan_dc = spec.copy()
  nan_dc[..., 0] = np.nan
  _close(
    mfcc(nan_dc, np.int32(16000), **kw),
    tf.raw_ops.Mfcc(spectrogram=nan_dc, sample_rate=16000, **kw).numpy(),
  )
  assert np.isfinite(np.asarray(mfcc(nan_dc, np.int32(16000), **kw))).all()
  # An upper limit past the last bin: TF's kernel computes nothing (zeros).
  low_rate = tf.raw_ops.Mfcc(spectrogram=spec, sample_rate=4000, **kw).numpy()
  np.testing.assert_array_equal(low_rate, 0)
  np.testing.assert_array_equal(np.asarray(mfcc(spec, np.int32(4000), **kw)), low_rate)
  # A non-positive sample rate: TF raises; eager calls check it like TF.
  with pytest.raises(tf.errors.InvalidArgumentError):
    tf.raw_ops.Mfcc(spectrogram=spec, sample_rate=0, **kw)
  fn = tfprims.convert_functional(
    tf.function(lambda s, r: tf.raw_ops.Mfcc(spectrogram=s, sample_rate=r, **kw)),
    tf.TensorSpec([1, 3, 33], tf.float32),
    tf.TensorSpec([], tf.int32),
  )
  with pytest.raises(tfprims.errors.RuntimeCheckError, match="Sample rate must be positive"):
    fn(spec, np.int32(0))
  with pytest.raises(ValueError, match="dct_coefficient_count"):
    mfcc(spec, np.int32(16000), **dict(kw, dct_coefficient_count=13))


# --- AudioMicrofrontend (TFLite micro frontend, fixed point) ----------------------------------


def _tf_microfrontend(audio, **kw):
  from tensorflow.lite.experimental.microfrontend.python.ops import audio_microfrontend_op

  return audio_microfrontend_op.audio_microfrontend(tf.convert_to_tensor(audio), **kw)


@pytest.mark.parametrize(
  "kw",
  [
    dict(),  # the op's defaults
    dict(
      enable_pcan=True, sample_rate=8000, window_size=30, upper_band_limit=3800.0, num_channels=20
    ),
    dict(enable_log=False, smoothing_bits=8),
    dict(
      left_context=2,
      right_context=1,
      frame_stride=3,
      zero_padding=True,
      out_scale=3,
      out_type=tf.float32,
    ),
    dict(left_context=1, right_context=2, out_scale=2),  # clamped context, uint16 //
  ],
)
def test_audio_microfrontend_is_bit_exact_with_tfs_kernel(kw):
  t = np.arange(6000) / 16000
  audio = np.concatenate(
    [
      (np.sin(2 * np.pi * 440 * t) * 8000).astype(np.int16),
      RNG.integers(-20000, 20000, 2000).astype(np.int16),
    ]
  )
  kw = dict(dict(enable_pcan=False), **kw)  # the Python wrapper's default is PCAN on
  expected = _tf_microfrontend(audio, **kw).numpy()
  fn = tfprims.convert_functional(
    tf.function(lambda a: _tf_microfrontend(a, **kw)), tf.TensorSpec([8000], tf.int16)
  )
  with jax.enable_x64(True):
    got = np.asarray(jax.jit(fn)(audio))
  assert got.dtype == expected.dtype and got.shape == expected.shape
  np.testing.assert_array_equal(got, expected)


def test_audio_microfrontend_needs_x64_and_short_audio_gives_no_frames():
  from tfprims.errors import Int64OverflowError

  op = get_op("AudioMicrofrontend")
  audio = RNG.integers(-1000, 1000, 1000).astype(np.int16)
  operands, params = op.prepare({"audio": audio}, {})
  with jax.enable_x64(False):
    with pytest.raises(Int64OverflowError, match="64-bit"):
      op(*operands, **params)
  short = audio[:300]  # shorter than one 25 ms window at 16 kHz
  with jax.enable_x64(True):
    out = np.asarray(op(short, **params))
  np.testing.assert_array_equal(out, _tf_microfrontend(short, enable_pcan=False).numpy())
  assert out.shape == (0, 32)
