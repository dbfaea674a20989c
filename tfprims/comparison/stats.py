"""How far one tensor computed by tfprims is from TF's: error statistics and tolerances.

Only these statistics are kept of a compared tensor (never the tensor), so that a
comparison of a large model holds just the values still to be read.

The verdict is *normwise*: a tensor agrees when every NaN and infinity is where TF
has it and ``max|ours - tf| <= atol + rtol * scale`` over the finite elements, the
scale being the largest finite ``|tf|`` of the tensor. An elementwise relative
bound (the property harness's, right for one op on drawn values) would flag the
near-zero elements of a whole program's tensors, where the errors carried from
upstream are relative to the tensor's scale, not to each element. For ops that add
their inputs up or copy them (declared ``linear`` or ``pass_through``: Sum, AddV2,
Sub, BiasAdd, Neg, Reshape...; and Mean) the scale is also their inputs' (and it
carries on to their outputs): their rounding errors are relative to the operands,
and a mean of values that nearly cancel is far smaller than its error bound (a
layer norm's row means: 2.6e-5 of their own scale in a 12-layer BERT).
"""

from __future__ import annotations

import dataclasses
import functools
import math
from typing import Callable, Optional

import numpy as np

from tfprims.testing.comparison import VALUE_TOL

# A whole program compares values that went through many ops, each within the op
# tolerance of TF (VALUE_TOL: what one op on drawn values may differ by); 10x the op
# tolerance keeps clean Keras applications and BERT-shaped encoders clean (their
# worst node: 3.6e-6 in ResNet50, 2.6e-5 in a 12-layer BERT; docs/compare.md) and
# still names a wrong op, whose errors are orders of magnitude above it.
PROGRAM_TOL_FACTOR = 10.0

# Real float tensors of at least this many elements get their statistics from one
# compiled XLA pass over both (numpy's passes, one per statistic, took three
# quarters of a ResNet50 comparison); smaller ones from numpy, which has no
# dispatch or compile cost.
FUSED_FROM = 1 << 15

_UINT_OF_SIZE = {2: np.uint16, 4: np.uint32, 8: np.uint64}


def default_tolerance(dtype) -> tuple[float, float]:
  """``(rtol, atol)`` for a whole program's tensors of ``dtype`` (0, 0: exact)."""
  rtol, atol = VALUE_TOL.get(dtype_name(dtype), (0.0, 0.0))
  # Rounded to what they mean: 1e-5 * 10 is 1.0000000000000002e-4 in binary.
  return float(f"{rtol * PROGRAM_TOL_FACTOR:.6g}"), float(f"{atol * PROGRAM_TOL_FACTOR:.6g}")


def tolerance(dtype, rtol: Optional[float], atol: Optional[float]) -> tuple[float, float]:
  """The caller's ``rtol``/``atol`` where given, else the dtype's default; integers
  and booleans are always compared exactly."""
  if not is_inexact(dtype):
    return 0.0, 0.0
  default_rtol, default_atol = default_tolerance(dtype)
  return (
    default_rtol if rtol is None else float(rtol),
    default_atol if atol is None else float(atol),
  )


def dtype_name(dtype) -> str:
  return dtype if isinstance(dtype, str) else np.dtype(dtype).name


@functools.lru_cache(maxsize=None)
def is_inexact(dtype) -> bool:
  """Floating point or complex (bfloat16 and the other ml_dtypes floats included)."""
  return dtype_name(dtype).startswith(("float", "bfloat", "complex"))


@functools.lru_cache(maxsize=None)
def operand_scaled(op_type: str) -> bool:
  """Whether the op's outputs are sums or copies of its inputs (declared
  ``linear_values`` or ``pass_through``), so that its errors are relative to its
  inputs' scale."""
  from tfprims import core

  return core.declares(op_type, "linear_values") or core.declares(op_type, "pass_through")


@dataclasses.dataclass(frozen=True)
class Measured:
  """The statistics of one tensor, before any tolerance.

  ``max_abs_err``: max ``|ours - tf|`` over the elements finite on both sides;
  ``scale``: the largest finite ``|tf|``; ``ulp``: the largest distance in units in
  the last place (real floats; -0 is one below +0), None otherwise;
  ``nan_mismatch``/``inf_mismatch``: elements NaN, or infinite, on one side and not
  the same on the other; ``dtype``: the dtype it is judged in (the narrower of the
  two); ``note``: a shape or dtype difference, or how many integers differ.
  """

  max_abs_err: float
  scale: float
  ulp: Optional[int]
  nan_mismatch: int
  inf_mismatch: int
  dtype: str
  note: str = ""

  @property
  def discrete(self) -> bool:
    return not is_inexact(self.dtype)


@dataclasses.dataclass(frozen=True)
class Diff:
  """A judged comparison: ``max_rel_err`` is ``max_abs_err`` over ``scale``, the scale
  the tolerance was applied to; ``exact``: the same values bit for bit (up to the
  sign of zero); ``within``: within tolerance (the verdict)."""

  max_abs_err: float
  max_rel_err: float
  ulp: Optional[int]
  nan_mismatch: int
  inf_mismatch: int
  scale: float
  exact: bool
  within: bool
  note: str = ""


def compare(
  expected: np.ndarray,
  actual,
  rtol: Optional[float] = None,
  atol: Optional[float] = None,
  operand_scale: float = 0.0,
) -> Diff:
  """Compares tfprims' ``actual`` (a numpy or JAX array) with TF's ``expected``."""
  return judge(measure_later(expected, actual)(), rtol, atol, operand_scale)


def judge(
  measured: Measured,
  rtol: Optional[float] = None,
  atol: Optional[float] = None,
  operand_scale: float = 0.0,
) -> Diff:
  """The verdict on ``measured``: ``rtol``/``atol`` (None: the dtype's default)
  relative to the tensor's scale, or ``operand_scale`` where that is larger."""
  rtol, atol = tolerance(measured.dtype, rtol, atol)
  scale = max(measured.scale, operand_scale)
  max_abs = measured.max_abs_err
  rel = max_abs / scale if scale > 0 else (0.0 if max_abs == 0 else math.inf)
  finite_alike = measured.nan_mismatch == 0 and measured.inf_mismatch == 0
  exact = finite_alike and max_abs == 0
  within = exact if measured.discrete else finite_alike and max_abs <= atol + rtol * scale
  return Diff(
    max_abs,
    rel,
    measured.ulp,
    measured.nan_mismatch,
    measured.inf_mismatch,
    scale,
    exact,
    within,
    measured.note,
  )


def measure_later(expected: np.ndarray, actual) -> Callable[[], Measured]:
  """A function giving the statistics of tfprims' ``actual`` (numpy or JAX) against
  TF's ``expected``. A large float tensor's are computed by a JAX computation that
  runs while the caller goes on (with the next nodes); a small tensor's when asked
  for (reading tfprims' value waits for it). The function waits for them."""
  actual_dtype = np.dtype(actual.dtype)
  # Judged in the narrower dtype: with x64 off, tfprims computes float64 in float32.
  dtype = min(expected.dtype, actual_dtype, key=lambda d: d.itemsize)
  note = (
    "" if expected.dtype == actual_dtype else f"dtype {actual_dtype.name}, TF {expected.dtype.name}"
  )

  def measured(values: tuple, more_note: str = "") -> Measured:
    return Measured(*values, dtype=dtype.name, note="; ".join(n for n in (note, more_note) if n))

  if tuple(expected.shape) != tuple(actual.shape):
    return _ready(
      measured(
        (math.inf, 0.0, None, 0, 0), f"shape {list(actual.shape)}, TF {list(expected.shape)}"
      )
    )
  if expected.size == 0:
    return _ready(measured((0.0, 0.0, None, 0, 0)))
  if not (is_inexact(expected.dtype) or is_inexact(actual_dtype)):
    return _later(lambda e, a: measured(*_discrete_stats(e, a)), expected, actual)
  if np.iscomplexobj(expected) or actual_dtype.kind == "c":
    return _later(lambda e, a: measured(_complex_stats(e, a)), expected, actual)
  expected = expected.astype(dtype, copy=False)
  if expected.size >= FUSED_FROM and (dtype.itemsize <= 4 or _x64()):
    stats = _fused_stats(expected, actual, dtype)
    return lambda: measured(stats())
  return _later(
    lambda e, a: measured(_float_stats(e, a.astype(dtype, copy=False))), expected, actual
  )


def _ready(value):
  return lambda: value


def _later(compute, expected, actual):
  """``compute(expected, actual as numpy)``: now for large tensors (not to hold them),
  when asked for otherwise."""
  if expected.size >= FUSED_FROM:
    return _ready(compute(expected, np.asarray(actual)))
  return lambda: compute(expected, np.asarray(actual))


def _discrete_stats(e: np.ndarray, a: np.ndarray) -> tuple:
  """Integers and booleans: (statistics, note) of an exact comparison."""
  wrong = e != a
  magnitudes = np.abs(e.astype(np.float64))
  scale = float(magnitudes.max())
  if not wrong.any():
    return (0.0, scale, None, 0, 0), ""
  max_abs = float(np.abs(e.astype(np.float64) - a.astype(np.float64)).max())
  return (max_abs, scale, None, 0, 0), f"{int(wrong.sum())} of {wrong.size} values differ"


def _float_stats(e: np.ndarray, a: np.ndarray) -> tuple:
  """(max_abs, scale, ulp, nan_mismatch, inf_mismatch) of two real arrays of one dtype."""
  with np.errstate(invalid="ignore", over="ignore"):
    nan_e, nan_a = np.isnan(e), np.isnan(a)
    finite_e, finite_a = np.isfinite(e), np.isfinite(a)
    both = finite_e & finite_a
    nan_mismatch = int(np.count_nonzero(nan_e != nan_a))
    # Infinities where they are not the same infinity on both sides (NaNs counted above).
    inf_mismatch = int(np.count_nonzero(~both & ~nan_e & ~nan_a & (e != a)))
    # In float64: a - e of finite values may overflow their own dtype.
    errors = np.abs(a[both].astype(np.float64) - e[both].astype(np.float64))
    magnitudes = np.abs(e[finite_e])
  ulp = None
  if e.dtype.itemsize in _UINT_OF_SIZE:
    ordered_e, ordered_a = _ordered(e[both]), _ordered(a[both])
    ulp = (
      int((np.maximum(ordered_e, ordered_a) - np.minimum(ordered_e, ordered_a)).max())
      if ordered_e.size
      else 0
    )
  return (
    float(errors.max()) if errors.size else 0.0,
    float(magnitudes.max()) if magnitudes.size else 0.0,
    ulp,
    nan_mismatch,
    inf_mismatch,
  )


def _ordered(x: np.ndarray) -> np.ndarray:
  """Float bits as unsigned integers that order as the floats do, so that the
  difference of two counts the representable values between them: negative floats'
  bits are inverted, positive ones get the sign bit set."""
  bits = np.ascontiguousarray(x).view(_UINT_OF_SIZE[x.dtype.itemsize])
  sign = bits.dtype.type(1) << bits.dtype.type(8 * x.dtype.itemsize - 1)
  return np.where(bits & sign, ~bits, bits | sign)


def _complex_stats(e: np.ndarray, a: np.ndarray) -> tuple:
  """As :func:`_float_stats`, on magnitudes ``|a - e|`` and ``|e|`` (no ULP)."""
  e, a = e.astype(np.complex128), a.astype(np.complex128)
  with np.errstate(invalid="ignore", over="ignore"):
    nan_e = np.isnan(e.real) | np.isnan(e.imag)
    nan_a = np.isnan(a.real) | np.isnan(a.imag)
    finite_e, finite_a = np.isfinite(e), np.isfinite(a)
    both = finite_e & finite_a
    nan_mismatch = int(np.count_nonzero(nan_e != nan_a))
    inf_mismatch = int(np.count_nonzero(~both & ~nan_e & ~nan_a & (e != a)))
    errors = np.abs(a[both] - e[both])
    magnitudes = np.abs(e[finite_e])
  return (
    float(errors.max()) if errors.size else 0.0,
    float(magnitudes.max()) if magnitudes.size else 0.0,
    None,
    nan_mismatch,
    inf_mismatch,
  )


def _x64() -> bool:
  import jax

  return bool(jax.config.jax_enable_x64)


def _fused_stats(expected: np.ndarray, actual, dtype: np.dtype) -> Callable[[], tuple]:
  """:func:`_float_stats` of large arrays, later: one compiled pass for the usual case,
  where every element is finite on both sides (then no NaN or infinity can be
  misplaced, and finite differences that overflow are left to float64); numpy's full
  statistics otherwise."""
  import jax

  # device_put of a numpy array (TF's value is a view of TF's buffer) does not copy on CPU.
  a = actual if isinstance(actual, jax.Array) else jax.device_put(np.asarray(actual))
  a = a if a.dtype == dtype else a.astype(dtype)
  running = _finite_kernel()(jax.device_put(expected), a)

  def stats() -> tuple:
    max_abs, scale, ulp, finite = (v.item() for v in running)
    if finite and math.isfinite(max_abs):
      return float(max_abs), float(scale), int(ulp), 0, 0
    return _float_stats(expected, np.asarray(a))

  return stats


@functools.lru_cache(maxsize=None)
def _finite_kernel():
  """``(max|a - e|, max|e|, max ULP distance, every element finite)`` of two arrays of
  one shape and real dtype, jitted (compiled once per shape and dtype). (XLA's
  maxima need not propagate NaN: finiteness is a reduction of its own.)"""
  import jax
  import jax.numpy as jnp
  from jax import lax

  def ordered(x):  # as _ordered, without a select: flip all bits of negatives
    bits = lax.bitcast_convert_type(x, _UINT_OF_SIZE[x.dtype.itemsize])
    top = bits.dtype.type(8 * x.dtype.itemsize - 1)
    return bits ^ ((bits.dtype.type(0) - (bits >> top)) | (bits.dtype.type(1) << top))

  def kernel(e, a):
    wide = jnp.float32 if e.dtype.itemsize < 4 else e.dtype
    ordered_e, ordered_a = ordered(e), ordered(a)
    return (
      jnp.max(jnp.abs(a.astype(wide) - e.astype(wide))),
      jnp.max(jnp.abs(e.astype(wide))),
      jnp.max(jnp.maximum(ordered_e, ordered_a) - jnp.minimum(ordered_e, ordered_a)),
      jnp.all(jnp.isfinite(e) & jnp.isfinite(a)),
    )

  return jax.jit(kernel)
