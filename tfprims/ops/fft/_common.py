"""What the fft modules share: TF's shape checks for the transformed axes, the
crop/pad of operands to ``fft_length``, TF-named fitting of cotangents, the
batching rule, and the helpers of their property-test specs (TF oracles composed
of TF's CPU kernels, call strategies)."""

from __future__ import annotations

import math

import jax.numpy as jnp
import numpy as np
from jax import lax

from tfprims import rules
from tfprims.core import tfops

FAMILY = "fft"


def ints(value) -> tuple:
  """A static param (scalar or tuple) as a flat tuple of Python ints."""
  return tuple(int(v) for v in np.asarray(value, dtype=np.int64).reshape(-1))


def check_rank(op_type: str, rank: int, k: int) -> None:
  if rank < k:
    raise ValueError(f"{op_type}: Input must have rank of at least {k} but got rank {rank}")


def nd_axes(op_type: str, axes, fft_length, rank: int) -> tuple:
  """The transformed axes of an ND op as negative ints. TF's kernel (GPU only)
  accepts only the last ``len(axes)`` axes, successive and ascending."""
  axes, lengths = ints(axes), ints(fft_length)
  k = len(axes)
  if k == 0:
    raise ValueError(f"{op_type}: axes must name at least one axis")
  if len(lengths) != k:
    raise ValueError(f"{op_type}: fft_length must have shape [{k}], but got: {len(lengths)}.")
  check_rank(op_type, rank, k)
  norm = tuple(a + rank if a < 0 else a for a in axes)
  if norm != tuple(range(rank - k, rank)):
    raise ValueError(f"{op_type}: axes must be successive and ascending, the last one -1 "
                     f"(TF's kernel transforms the innermost axes only); got {axes}")
  return tuple(range(-k, 0))


def check_lengths(op_type: str, shape, lengths, *, inverse_real: bool) -> None:
  """TF's real-FFT check: each transformed input dim is at least its fft_length
  (for an inverse real FFT the innermost at least fft_length // 2 + 1); the
  kernel crops, it never pads. Empty dims pass (TF passes empty tensors through)."""
  k = len(lengths)
  for i, n in enumerate(lengths):
    if n < 0:
      raise ValueError(f"{op_type}: fft_length[{i}] must >= 0, but got: {n}")
    need = n // 2 + 1 if inverse_real and i == k - 1 else n
    have = shape[len(shape) - k + i]
    if have != 0 and have < need:
      raise ValueError(f"{op_type}: Input dimension {len(shape) - k + i} must have length "
                       f"of at least {need} but got: {have}")


def fit(x, lengths):
  """``x`` cropped or zero-padded on its last ``len(lengths)`` axes to ``lengths``
  (jax.numpy, for impls)."""
  k = len(lengths)
  lead = x.ndim - k
  x = x[tuple([slice(None)] * lead + [slice(0, n) for n in lengths])]
  pads = [(0, 0, 0)] * lead + [(0, max(n - s, 0), 0) for s, n in zip(x.shape[lead:], lengths)]
  if any(p[1] for p in pads):
    x = lax.pad(x, jnp.zeros((), x.dtype), pads)
  return x


def fit_tf(x, lengths):
  """As :func:`fit`, with ``tf.Pad`` and ``tf.Slice`` (for rules): the transpose of a
  crop is a pad and the other way round."""
  shape = rules.shape_of(x)
  k = len(lengths)
  lead = len(shape) - k
  tail = shape[lead:]
  if any(n > s for s, n in zip(tail, lengths)):
    x = tfops.Pad(x, paddings=((0, 0),) * lead + tuple(
        (0, max(n - s, 0)) for s, n in zip(tail, lengths)))
  if any(n < s for s, n in zip(tail, lengths)):
    x = tfops.Slice(x, begin=(0,) * len(shape), size=shape[:lead] + tuple(lengths))
  return x


def _np_dtype(dtype) -> np.dtype:
  return np.dtype(getattr(dtype, "as_numpy_dtype", dtype))  # a TF dtype in oracles


def complex_of(dtype) -> np.dtype:
  """The complex dtype of a real FFT's spectrum (TF's only kernel pairs)."""
  return np.dtype(np.complex128 if _np_dtype(dtype) == np.float64 else np.complex64)


def real_of(dtype) -> np.dtype:
  """The real dtype of an inverse real FFT's signal."""
  return np.dtype(np.float64 if _np_dtype(dtype) == np.complex128 else np.float32)


def leading_batching(op_type: str, nd: bool = False):
  """Batching of an op transforming trailing axes: the batch axis moved to the front
  and the op re-bound (an ND op's axes made negative, so they still name the
  trailing axes)."""
  def rule(args, dims, **params):
    (x,), (d,) = args, dims
    if nd:
      rank = x.ndim - 1
      params = dict(params, axes=tuple(a - rank if a >= 0 else a for a in ints(params["axes"])))
    return getattr(tfops, op_type)(rules.to_front(x, d), **params), 0
  return rule


def size(lengths) -> int:
  return math.prod(lengths)


# --- property-test helpers (hypothesis and tensorflow are imported when a spec is drawn)


def tf_fft_along(x, axis: int, n: int, kind: str):
  """TF oracle building block: a 1-D ``kind`` ("FFT", "IFFT", "RFFT", "IRFFT") of
  ``x`` along ``axis`` (negative) with length ``n``, by TF's CPU kernels; the
  operand is cropped or zero-padded to the length the kernel needs first."""
  import tensorflow as tf
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
  import tensorflow as tf
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
    x = st.draw_array(draw, dtype, tuple(lead) + tuple(inner), lo=-8.0, hi=8.0,
                      finite=True, cbound=8.0)
    out = {"input": x}
    if with_length:
      lengths = []
      for i, m in enumerate(inner):
        if with_length == "any":
          hi = 5
        elif with_length == "icrop" and i == kk - 1:
          hi = 2 * m - 1   # n // 2 + 1 <= m
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
