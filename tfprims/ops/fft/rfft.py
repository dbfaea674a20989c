"""Real FFTs: RFFT, IRFFT, RFFT2D, IRFFT2D, RFFT3D, IRFFT3D, RFFTND, IRFFTND.

``fft_length`` is static. As TF's kernels, the transformed input axes are
cropped to ``fft_length`` (the innermost to ``fft_length // 2 + 1`` for the
inverse); an input shorter than that is an error (TF's Python wrappers pad, the
kernels do not). The inverse treats its input as the half spectrum of a real
signal: the imaginary parts of the DC (and, for even lengths, Nyquist) bins
are ignored, as TF's DUCC kernel (and XLA's) do. Output dtypes follow the input
(float32 <-> complex64, float64 <-> complex128: the only pairs TF's kernels take,
so ``Tcomplex``/``Treal`` are not kept).

The ops are linear (real-linear for RFFT). Transposes are TF ops, written as JAX
transposes the naive formulas (XLA's own FFT transposes):

* RFFT: ``Real(FFT(Pad(ct)))`` (the half spectrum padded to the full length),
  then padded back over the crop. TF's ``_RFFTGradHelper`` (IRFFT plus masked
  correction terms) is the same map in TF's conjugated convention when nothing
  is cropped, but it has no 3-D version and is wrong for a cropped input.
* IRFFT: ``Conj(RFFT(ct) * mask / size)`` with TF's ``_IRFFTGradHelper`` mask
  ``[1, 2, ..., 2, (1)]``, then padded back over the crop.

Batching moves the batch axis to the front and re-binds the op.
"""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np

from tfprims import rules
from tfprims.core import register_op, tfops
from tfprims.ops.fft._common import (
  FAMILY,
  check_lengths,
  check_rank,
  complex_of,
  fit_tf,
  ints,
  leading_batching,
  nd_axes,
  real_of,
)
from tfprims.ops.fft._specs import FFT_ATOL, FFT_RTOL, fft_calls, tf_fftn
from tfprims.errors import import_tensorflow

_COMPLEX_OP = {1: "FFT", 2: "FFT2D", 3: "FFT3D"}
_REAL_OP = {1: "RFFT", 2: "RFFT2D", 3: "RFFT3D"}


def _lengths(op_type, x, fft_length, axes, k):
  """(transformed rank, lengths) after TF's checks of the drawn params."""
  lengths = ints(fft_length)
  if axes is not None:
    k = len(nd_axes(op_type, axes, fft_length, x.ndim))
  check_rank(op_type, x.ndim, k)
  if len(lengths) != k:
    raise ValueError(f"{op_type}: fft_length must have shape [{k}]")
  return k, lengths


def _rfft_impl(op_type: str, k: int):
  def impl(input, *, fft_length, axes=None):
    kk, lengths = _lengths(op_type, input, fft_length, axes, k)
    check_lengths(op_type, input.shape, lengths, inverse_real=False)
    ctype = complex_of(input.dtype)
    n = lengths[-1]
    out_shape = input.shape[:-kk] + lengths[:-1] + ((n // 2 + 1) if n else 0,)
    if input.size == 0 or 0 in out_shape:
      return jnp.zeros(out_shape, ctype)
    x = input[(Ellipsis,) + tuple(slice(0, m) for m in lengths)]
    return jnp.fft.rfftn(x, axes=tuple(range(-kk, 0))).astype(ctype)

  impl.__doc__ = (
    "Real-input discrete Fourier transform of the innermost axes (cropped "
    "to fft_length): the non-negative frequencies of the innermost."
  )
  return impl


def _irfft_impl(op_type: str, k: int):
  def impl(input, *, fft_length, axes=None):
    kk, lengths = _lengths(op_type, input, fft_length, axes, k)
    check_lengths(op_type, input.shape, lengths, inverse_real=True)
    rtype = real_of(input.dtype)
    out_shape = input.shape[:-kk] + lengths
    if input.size == 0 or 0 in out_shape:
      return jnp.zeros(out_shape, rtype)
    x = input[
      (Ellipsis,) + tuple(slice(0, m) for m in lengths[:-1]) + (slice(0, lengths[-1] // 2 + 1),)
    ]
    return jnp.fft.irfftn(x, s=lengths, axes=tuple(range(-kk, 0))).astype(rtype)

  impl.__doc__ = (
    "Inverse of a real-input discrete Fourier transform: a real signal of "
    "fft_length from its half spectrum (cropped to fit)."
  )
  return impl


def _complex_fft(y, lengths, axes):
  if axes is not None:
    return tfops.FFTND(y, fft_length=lengths, axes=axes)
  return getattr(tfops, _COMPLEX_OP[len(lengths)])(y)


def _rfft_transpose(op_type: str):
  def transpose(ct, x, *, fft_length, axes=None):
    lengths = ints(fft_length)
    shape = x.aval.shape
    if 0 in shape or 0 in lengths:
      return [rules.zeros(shape, x.aval.dtype)]
    cshape = rules.shape_of(ct)
    n, half = lengths[-1], lengths[-1] // 2 + 1
    if n > half:
      ct = tfops.Pad(ct, paddings=((0, 0),) * (len(cshape) - 1) + ((0, n - half),))
    y = tfops.Real(_complex_fft(ct, lengths, axes))
    return [fit_tf(y, shape[-len(lengths) :])]

  return transpose


def _irfft_transpose(op_type: str):
  def transpose(ct, x, *, fft_length, axes=None):
    lengths = ints(fft_length)
    shape = x.aval.shape
    if 0 in shape or 0 in lengths:
      return [rules.zeros(shape, x.aval.dtype)]
    n = lengths[-1]
    odd = n % 2
    half = n // 2 + 1
    mask = np.concatenate([[1.0], np.full(half - 2 + odd, 2.0), np.ones(1 - odd)])
    mask = (mask / float(np.prod(lengths))).astype(x.aval.dtype)
    if axes is not None:
      r = tfops.RFFTND(ct, fft_length=lengths, axes=axes)
    else:
      r = getattr(tfops, _REAL_OP[len(lengths)])(ct, fft_length=lengths)
    y = tfops.Conj(tfops.Mul(r, mask))
    k = len(lengths)
    return [fit_tf(y, shape[-k:])]

  return transpose


def _oracle(op_type: str, k, inverse: bool):
  """TF oracle: the 1-D and 2-D ops by TF's own kernel after cropping the input
  with TF ops (TF's registered gradients are wrong for inputs the kernel crops);
  3-D (no TF gradient) and ND (GPU-only) ones by TF's 1-D kernels axis by axis."""

  def oracle(input, fft_length, axes=None, **_):
    tf = import_tensorflow()
    lengths = ints(fft_length)
    if k in (1, 2):
      x = tf.convert_to_tensor(input)
      crop = lengths[:-1] + ((lengths[-1] // 2 + 1) if inverse else lengths[-1],)
      x = x[(Ellipsis,) + tuple(slice(0, m) for m in crop)]
      if inverse:
        return getattr(tf.raw_ops, op_type)(
          input=x, fft_length=list(lengths), Treal=real_of(input.dtype)
        )
      return getattr(tf.raw_ops, op_type)(
        input=x, fft_length=list(lengths), Tcomplex=complex_of(input.dtype)
      )
    return tf_fftn(input, lengths, "IRFFT" if inverse else "RFFT")

  return oracle


_NOTE_KD = {
  1: "",
  2: "",
  3: "TF registers no gradient for it: compared with TF's 1-D kernels axis by axis",
  None: "TF has GPU kernels only: compared with TF's 1-D CPU kernels axis by axis",
}


def _define(op_type: str, k, inverse: bool):
  nd = k is None
  return register_op(
    op_type,
    (_irfft_impl if inverse else _rfft_impl)(op_type, k),
    family=FAMILY,
    static=("fft_length", "axes") if nd else ("fft_length",),
    canonicalize=(
      lambda params, x, *_: dict(
        params,
        axes=nd_axes(op_type, params["axes"], params["fft_length"], x.ndim),
        fft_length=ints(params["fft_length"]),
      )
    )
    if nd
    else (lambda params, x, *_: dict(params, fft_length=ints(params["fft_length"]))),
    linear=True,
    transpose=(_irfft_transpose if inverse else _rfft_transpose)(op_type),
    batching=leading_batching(op_type, nd=nd),
    spec=lambda st: st.Spec(
      fft_calls(st, real_input=not inverse, k=k, with_length="icrop" if inverse else "crop", nd=nd),
      rtol=FFT_RTOL,
      atol=FFT_ATOL,
      oracle=_oracle(op_type, k, inverse),
      note=" ".join(
        s
        for s in (
          _NOTE_KD[k],
          "inputs longer than fft_length are cropped "
          "by TF ops before TF's kernel (its gradient is wrong "
          "for a cropping call)",
        )
        if s
      ),
    ),
  )


RFFT = _define("RFFT", 1, False)
IRFFT = _define("IRFFT", 1, True)
RFFT2D = _define("RFFT2D", 2, False)
IRFFT2D = _define("IRFFT2D", 2, True)
RFFT3D = _define("RFFT3D", 3, False)
IRFFT3D = _define("IRFFT3D", 3, True)
RFFTND = _define("RFFTND", None, False)
IRFFTND = _define("IRFFTND", None, True)
