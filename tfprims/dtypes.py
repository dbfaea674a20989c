"""TF dtypes to numpy dtypes, and the 64-bit policy.

With ``jax_enable_x64`` off JAX computes in 32 bits. tfprims never lets that
change a value silently: 64-bit integers are narrowed only when every value fits
(otherwise :class:`~tfprims.errors.Int64OverflowError`), and float64 values that
overflow float32 raise too. float64 -> float32 rounding is accepted (it is what
JAX does everywhere) and documented in docs/semantics.md. With x64 on, dtypes are
kept exactly.
"""

from __future__ import annotations

import functools
from typing import Any, Optional

import jax
import numpy as np

from tfprims import errors
from tfprims.errors import import_tensorflow

_NARROW = {
  np.dtype("int64"): np.dtype("int32"),
  np.dtype("uint64"): np.dtype("uint32"),
  np.dtype("float64"): np.dtype("float32"),
  np.dtype("complex128"): np.dtype("complex64"),
}


def x64_enabled() -> bool:
  return bool(jax.config.jax_enable_x64)


def canonical_dtype(dtype: Any) -> np.dtype:
  """The dtype JAX computes in for a TF/numpy dtype under the current x64 setting."""
  dtype = np.dtype(dtype)
  if not x64_enabled():
    return _NARROW.get(dtype, dtype)
  return dtype


def canonicalize_value(value: np.ndarray, what: str = "value") -> np.ndarray:
  """Narrows a 64-bit numpy value for x64-off JAX, refusing to change its values."""
  value = np.asarray(value)
  target = canonical_dtype(value.dtype)
  if target == value.dtype:
    return value
  if value.dtype.kind in "iu":
    info = np.iinfo(target)
    if value.size and (value.min() < info.min or value.max() > info.max):
      raise errors.Int64OverflowError(
        f"{what} of dtype {value.dtype} has values outside the {target} range "
        f"[{info.min}, {info.max}] (min {value.min()}, max {value.max()}); JAX "
        "computes in 32 bits unless x64 is on: enable it with "
        "jax.config.update('jax_enable_x64', True)."
      )
    return value.astype(target)
  if value.dtype.kind in "fc":
    with np.errstate(over="ignore"):
      narrowed = value.astype(target)
    finite = np.isfinite(value)
    if np.any(finite & ~np.isfinite(narrowed)):
      raise errors.Int64OverflowError(
        f"{what} of dtype {value.dtype} has finite values beyond the {target} "
        "range that would become inf; enable x64 with "
        "jax.config.update('jax_enable_x64', True)."
      )
    return narrowed
  return value


WIDE_FLOATS = frozenset({np.dtype("float64"), np.dtype("complex128")})


def is_wide(value: Any) -> bool:
  """Whether ``value`` is a float64/complex128 numpy value held while x64 is off: a
  constant, or a value folded from constants. Known values are computed in TF's
  precision (``log(0.0 + 1e-307)``, ctc_loss_dense's "log 0", is -706.9, where float32
  would give ``log(0) = -inf``) and narrowed only where they enter the program
  (:func:`narrow`)."""
  return (
    (type(value) is np.ndarray or isinstance(value, np.generic))
    and value.dtype in WIDE_FLOATS
    and not x64_enabled()
  )


def narrow(value: Any, what: str = "value") -> Any:
  """``value`` as the program holds it (:func:`canonicalize_value` of a wide value;
  anything else as it is)."""
  return canonicalize_value(value, what) if is_wide(value) else value


@functools.lru_cache(maxsize=None)
def from_tf(dtype: Any) -> Optional[np.dtype]:
  """numpy dtype of a TF dtype (``tf.DType``, enum int or name); None if not numeric."""
  tf = import_tensorflow()
  tf_dtype = tf.dtypes.as_dtype(dtype)
  if tf_dtype in (tf.string, tf.resource, tf.variant) or tf_dtype.is_quantized:
    return None
  return np.dtype(tf_dtype.as_numpy_dtype)


def value_from_tf(tensor) -> np.ndarray:
  """The value of an eager TF tensor as a numpy array, without copying it.

  The array is a read-only view of the tensor's buffer (DLPack): converting a
  model makes no copy of its weights, and TF copies on write, so a later
  ``assign`` to the variable does not change it. Dtypes DLPack cannot hand to
  numpy (bfloat16) are copied.
  """
  try:
    return np.from_dlpack(tensor)
  except (RuntimeError, BufferError, TypeError):
    return tensor.numpy()
