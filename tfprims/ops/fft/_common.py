"""What the fft modules share: TF's shape checks for the transformed axes, the
crop/pad of operands to ``fft_length``, TF-named fitting of cotangents and the
batching rule (the helpers of their property-test specs are in ``_specs.py``)."""

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
    raise ValueError(
      f"{op_type}: axes must be successive and ascending, the last one -1 "
      f"(TF's kernel transforms the innermost axes only); got {axes}"
    )
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
      raise ValueError(
        f"{op_type}: Input dimension {len(shape) - k + i} must have length "
        f"of at least {need} but got: {have}"
      )


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
    x = tfops.Pad(
      x, paddings=((0, 0),) * lead + tuple((0, max(n - s, 0)) for s, n in zip(tail, lengths))
    )
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
