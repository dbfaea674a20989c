"""The helpers of the fft modules' property-test specs: TF oracles composed of TF's CPU
kernels, call strategies and value tolerances (tensorflow is imported when a spec is
drawn)."""

from __future__ import annotations

import numpy as np

from tfprims.ops.fft._common import complex_of, real_of
from tfprims.errors import import_tensorflow


def tf_fft_along(x, axis: int, n: int, kind: str):
  """TF oracle building block: a 1-D ``kind`` ("FFT", "IFFT", "RFFT", "IRFFT") of
  ``x`` along ``axis`` (negative) with length ``n``, by TF's CPU kernels; the
  operand is cropped or zero-padded to the length the kernel needs first."""
  tf = import_tensorflow()
  rank = len(x.shape)
  ax = axis % rank
  perm = [i for i in range(rank) if i != ax] + [ax]
  inv = np.argsort(perm).tolist()
  y = tf.transpose(x, perm) if ax != rank - 1 else x
  need = n // 2 + 1 if kind == "IRFFT" else n
  have = int(y.shape[-1])
  if have > need:
    y = y[..., :need]
  elif have < need:
    y = tf.pad(y, [[0, 0]] * (rank - 1) + [[0, need - have]])
  if kind in ("FFT", "IFFT"):
    y = getattr(tf.raw_ops, kind)(input=y)
  elif kind == "RFFT":
    y = tf.raw_ops.RFFT(input=y, fft_length=[n], Tcomplex=complex_of(y.dtype.as_numpy_dtype))
  else:
    y = tf.raw_ops.IRFFT(input=y, fft_length=[n], Treal=real_of(y.dtype.as_numpy_dtype))
  return tf.transpose(y, inv) if ax != rank - 1 else y


def tf_fftn(x, lengths, kind: str):
  """TF oracle of an n-D transform of the last ``len(lengths)`` axes, one axis at a
  time with TF's 1-D CPU kernels (which have TF gradients; TF's ND kernels are
  GPU-only and its 3-D real ones have none). Separable, so equal to the n-D DFT."""
  tf = import_tensorflow()
  x = tf.convert_to_tensor(x)
  k = len(lengths)
  axes = list(range(-k, 0))
  if kind in ("FFT", "IFFT"):
    for ax, n in zip(axes, lengths):
      x = tf_fft_along(x, ax, n, kind)
    return x
  if kind == "RFFT":
    # TF's real kernels crop every transformed axis before transforming.
    x = x[(Ellipsis,) + tuple(slice(0, n) for n in lengths)]
    x = tf_fft_along(x, -1, lengths[-1], "RFFT")
    for ax, n in zip(axes[:-1], lengths[:-1]):
      x = tf_fft_along(x, ax, n, "FFT")
    return x
  x = x[(Ellipsis,) + tuple(slice(0, n) for n in lengths[:-1]) + (slice(0, lengths[-1] // 2 + 1),)]
  for ax, n in zip(axes[:-1], lengths[:-1]):
    x = tf_fft_along(x, ax, n, "IFFT")
  return tf_fft_along(x, -1, lengths[-1], "IRFFT")


def fft_calls(st, *, real_input: bool, k, with_length: str, nd: bool = False):
  """Calls of an FFT op of rank ``k`` (None: drawn 1..3, ND ops).

  ``with_length``: "" (complex FFTs: no fft_length), "crop" (real forward: each
  length at most the input's dim), "icrop" (real inverse: the innermost at most
  2 * dim - 1), "any" (complex ND: pad or crop). Values are finite and bounded
  (FFTs mix every element; non-finite ones make everything NaN in both).
  Transformed dims are never empty (TF's kernel returns uninitialised memory
  for a non-empty output of an empty input, and aborts on fft_length 0);
  leading dims may be.
  """
  hst = st

  @st.composite
  def calls(draw):
    kk = k if k is not None else draw(hst.integers(1, 3))
    lead = draw(st.shapes(max_rank=4 - kk, max_side=3))
    inner = draw(st.shapes(min_rank=kk, max_rank=kk, min_side=1, max_side=4))
    dtype = draw(st.dtypes(("float32", "float64") if real_input else st.COMPLEX))
    x = st.draw_array(
      draw, dtype, tuple(lead) + tuple(inner), lo=-8.0, hi=8.0, finite=True, cbound=8.0
    )
    out = {"input": x}
    if with_length:
      lengths = []
      for i, m in enumerate(inner):
        if with_length == "any":
          hi = 5
        elif with_length == "icrop" and i == kk - 1:
          hi = 2 * m - 1  # n // 2 + 1 <= m
        else:
          hi = m
        lengths.append(draw(hst.integers(1, hi)))
      out["fft_length"] = np.asarray(lengths, np.int32)
    if nd:
      rank = len(lead) + kk
      axes = [rank - kk + i for i in range(kk)]
      if draw(hst.booleans()):
        axes = [a - rank for a in axes]
      out["axes"] = np.asarray(axes, np.int32)
    if real_input and with_length:
      out["Tcomplex"] = complex_of(dtype)
    elif with_length == "icrop":
      out["Treal"] = real_of(dtype)
    return out

  return calls()


#: Value tolerances: FFTs add up to 64 terms of magnitude <= 8.
FFT_RTOL = {"complex64": 1e-5, "float32": 1e-5, "complex128": 1e-12, "float64": 1e-12}
FFT_ATOL = {"complex64": 2e-4, "float32": 2e-4, "complex128": 1e-12, "float64": 1e-12}
