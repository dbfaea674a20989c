"""Complex FFTs: FFT, IFFT, FFT2D, IFFT2D, FFT3D, IFFT3D, FFTND, IFFTND.

Each transforms the innermost 1, 2, 3 (or ``len(axes)``) axes; IFFTs divide by
the transform size as TF does. They are linear: the JVP is the op on the
tangent, and the transpose is the same op on the cotangent (the DFT matrix is
symmetric, and so is the IDFT's: JAX transposes without conjugating; TF's
registered gradients, ``ifft(grad) * size`` and ``fft(grad) / size``, are the
same maps in TF's conjugated convention). FFTND/IFFTND crop or zero-pad the
transformed axes to ``fft_length`` (the transpose crops or pads back); TF has
only GPU kernels for them and accepts only the innermost axes, successive and
ascending (docs/semantics/fft.md). Batching moves the batch axis to the front
and re-binds the op.
"""

from __future__ import annotations

import jax.numpy as jnp

from tfprims.core import register_op, tfops
from tfprims.ops.fft._common import FAMILY, check_rank, fit, fit_tf, ints, leading_batching, nd_axes
from tfprims.ops.fft._specs import FFT_ATOL, FFT_RTOL, fft_calls, tf_fftn


def _fft_impl(op_type: str, k: int, inverse: bool):
  def impl(input):
    check_rank(op_type, input.ndim, k)
    if input.size == 0:
      return input
    f = jnp.fft.ifftn if inverse else jnp.fft.fftn
    return f(input, axes=tuple(range(-k, 0))).astype(input.dtype)

  impl.__doc__ = (
    f"{'Inverse ' if inverse else ''}{k}-D discrete Fourier transform of "
    f"the innermost {k} axis{'es' if k > 1 else ''}"
    f"{' (divided by its size)' if inverse else ''}."
  )
  return impl


def _define_fft(op_type: str, k: int, inverse: bool):
  return register_op(
    op_type,
    _fft_impl(op_type, k, inverse),
    family=FAMILY,
    linear=True,
    transpose=lambda ct, x: [getattr(tfops, op_type)(ct)],
    batching=leading_batching(op_type),
    spec=lambda st: st.Spec(
      fft_calls(st, real_input=False, k=k, with_length=""), rtol=FFT_RTOL, atol=FFT_ATOL
    ),
  )


FFT = _define_fft("FFT", 1, False)
IFFT = _define_fft("IFFT", 1, True)
FFT2D = _define_fft("FFT2D", 2, False)
IFFT2D = _define_fft("IFFT2D", 2, True)
FFT3D = _define_fft("FFT3D", 3, False)
IFFT3D = _define_fft("IFFT3D", 3, True)


def _nd_canonicalize(op_type: str):
  def canonicalize(params, input, *_):
    axes = nd_axes(op_type, params["axes"], params["fft_length"], input.ndim)
    return dict(params, axes=axes, fft_length=ints(params["fft_length"]))

  return canonicalize


def _fftnd_impl(op_type: str, inverse: bool):
  def impl(input, *, fft_length, axes):
    axes = nd_axes(op_type, axes, fft_length, input.ndim)
    lengths = ints(fft_length)
    if any(n < 0 for n in lengths):
      raise ValueError(f"{op_type}: fft_length must be >= 0, got {lengths}")
    x = fit(input, lengths)
    if x.size == 0:
      return x
    f = jnp.fft.ifftn if inverse else jnp.fft.fftn
    return f(x, axes=axes).astype(input.dtype)

  impl.__doc__ = (
    f"{'Inverse ' if inverse else ''}N-D discrete Fourier transform of the "
    "innermost axes, each cropped or zero-padded to its fft_length."
  )
  return impl


def _fftnd_transpose(op_type: str):
  def transpose(ct, x, *, fft_length, axes):
    y = getattr(tfops, op_type)(ct, fft_length=fft_length, axes=axes)
    k = len(ints(axes))
    return [fit_tf(y, x.aval.shape[-k:])]

  return transpose


def _fftnd_oracle(kind: str):
  def oracle(input, fft_length, axes, **_):
    return tf_fftn(input, ints(fft_length), kind)

  return oracle


def _define_fftnd(op_type: str, inverse: bool):
  return register_op(
    op_type,
    _fftnd_impl(op_type, inverse),
    family=FAMILY,
    static=("fft_length", "axes"),
    canonicalize=_nd_canonicalize(op_type),
    linear=True,
    transpose=_fftnd_transpose(op_type),
    batching=leading_batching(op_type, nd=True),
    spec=lambda st: st.Spec(
      fft_calls(st, real_input=False, k=None, with_length="any", nd=True),
      rtol=FFT_RTOL,
      atol=FFT_ATOL,
      oracle=_fftnd_oracle("IFFT" if inverse else "FFT"),
      note="TF has GPU kernels only: compared with TF's 1-D CPU kernels applied along each axis",
    ),
  )


FFTND = _define_fftnd("FFTND", False)
IFFTND = _define_fftnd("IFFTND", True)
