"""Hypothesis strategies for drawing TF op calls.

Op specs receive this module as ``st`` (``spec=lambda st: st.Spec(...)``) so op
modules need not import Hypothesis at import time.
"""

from __future__ import annotations

from typing import Any, Optional, Sequence

import numpy as np
from hypothesis import strategies as hst
from hypothesis.extra import numpy as hnp

from tfprims.testing.spec import Spec  # noqa: F401  (re-exported for specs)

FLOATS = ("float16", "bfloat16", "float32", "float64")
COMPLEX = ("complex64", "complex128")
SIGNED = ("int8", "int16", "int32", "int64")
UNSIGNED = ("uint8", "uint16", "uint32", "uint64")
INTS = SIGNED + UNSIGNED
NUMERIC = FLOATS + INTS
ALL = NUMERIC + COMPLEX + ("bool",)

# Shapes are kept small: compile time, not arithmetic, is what property runs pay for.
MAX_RANK = 4
MAX_SIDE = 4


def np_dtype(name) -> np.dtype:
  if isinstance(name, np.dtype):
    return name
  if name == "bfloat16":
    import ml_dtypes
    return np.dtype(ml_dtypes.bfloat16)
  return np.dtype(name)


def kind(dtype) -> str:
  """numpy's dtype kind, with bfloat16 (numpy kind ``'V'``) as ``'f'``."""
  dtype = np_dtype(dtype)
  return "f" if dtype.name == "bfloat16" else dtype.kind


def is_float(dtype) -> bool:
  """A real floating dtype, bfloat16 included."""
  return kind(dtype) == "f"


def is_inexact(dtype) -> bool:
  """A float (bfloat16 included) or complex dtype."""
  return kind(dtype) in "fc"


def dtypes(names: Sequence[str] = FLOATS) -> hst.SearchStrategy:
  """One of the named dtypes, as ``np.dtype``."""
  return hst.sampled_from([np_dtype(n) for n in names])


def shapes(min_rank: int = 0, max_rank: int = MAX_RANK, min_side: int = 0,
           max_side: int = MAX_SIDE) -> hst.SearchStrategy:
  """Shapes including scalars, size-1 and zero-size dimensions."""
  return hnp.array_shapes(min_dims=min_rank, max_dims=max_rank, min_side=min_side,
                          max_side=max_side)


def broadcastable_shapes(n: int = 2, min_rank: int = 0, max_rank: int = MAX_RANK,
                         min_side: int = 0, max_side: int = MAX_SIDE):
  """``n`` shapes that broadcast together (numpy/TF right-aligned rules)."""
  return hnp.mutually_broadcastable_shapes(
      num_shapes=n, min_dims=min_rank, max_dims=max_rank, min_side=min_side,
      max_side=max_side).map(lambda r: r.input_shapes)


def elements(dtype, *, special: bool = True, min_value=None, max_value=None,
             allow_nan: Optional[bool] = None, allow_inf: Optional[bool] = None):
  """Values of ``dtype``; with ``special`` floats include NaN, ±inf, -0.0 and
  subnormals and integers include their extremes."""
  dtype = np_dtype(dtype)
  if dtype == np.bool_:
    return hst.booleans()
  if dtype.kind in "iu":
    info = np.iinfo(dtype)
    lo = info.min if min_value is None else max(int(min_value), int(info.min))
    hi = info.max if max_value is None else min(int(max_value), int(info.max))
    base = hst.integers(lo, hi)
    if special and min_value is None and max_value is None:
      return hst.one_of(base, hst.sampled_from([int(info.min), int(info.max), 0, 1, -1 if lo < 0 else 0]))
    return base
  if dtype.kind == "c":
    part = np.float32 if dtype == np.complex64 else np.float64
    f = elements(part, special=special, min_value=min_value, max_value=max_value,
                 allow_nan=allow_nan, allow_inf=allow_inf)
    return hst.builds(complex, f, f)
  # Floats (float16/bfloat16 are drawn as float32 and rounded by the array cast).
  width = {2: 16, 4: 32, 8: 64}.get(dtype.itemsize, 32)
  if dtype.name == "bfloat16":
    width = 32
  bounded = min_value is not None or max_value is not None
  nan = (special and not bounded) if allow_nan is None else allow_nan
  inf = (special and not bounded) if allow_inf is None else allow_inf
  if bounded:
    # Hypothesis refuses NaN with bounds; ±inf only where a bound is open.
    nan = False
    inf = inf and (min_value is None or max_value is None)
  min_value, max_value = _representable_bounds(min_value, max_value, width)
  return hst.floats(min_value=min_value, max_value=max_value, allow_nan=nan,
                    allow_infinity=inf, allow_subnormal=special, width=width)


def _representable_bounds(lo, hi, width):
  """Float bounds rounded inward to values representable at ``width`` bits
  (Hypothesis refuses others, e.g. float32 bounds of ±(2**31 - 1))."""
  ftype = {16: np.float16, 32: np.float32, 64: np.float64}[width]
  info = np.finfo(ftype)

  def fit(v, direction):
    if v is None:
      return None
    v = float(v)
    v = min(max(v, float(info.min)), float(info.max))
    f = ftype(v)
    if direction > 0 and float(f) < v:
      f = np.nextafter(f, ftype(np.inf))
    if direction < 0 and float(f) > v:
      f = np.nextafter(f, ftype(-np.inf))
    return float(f)

  return fit(lo, 1), fit(hi, -1)


@hst.composite
def arrays(draw, dtype, shape=None, *, special: bool = True, min_value=None,
           max_value=None, allow_nan: Optional[bool] = None,
           allow_inf: Optional[bool] = None, unique: bool = False):
  """A numpy array; ``dtype`` and ``shape`` may be values or strategies."""
  if isinstance(dtype, hst.SearchStrategy):
    dtype = draw(dtype)
  dtype = np_dtype(dtype)
  if shape is None:
    shape = shapes()
  if isinstance(shape, hst.SearchStrategy):
    shape = draw(shape)
  elems = elements(dtype, special=special, min_value=min_value, max_value=max_value,
                   allow_nan=allow_nan, allow_inf=allow_inf)
  draw_dtype = np.dtype(np.float32) if dtype.name == "bfloat16" else dtype
  value = draw(hnp.arrays(draw_dtype, tuple(shape), elements=elems, unique=unique))
  return value.astype(dtype)


def call(**kwargs) -> hst.SearchStrategy:
  """A dict of ``tf.raw_ops`` keyword arguments; values may be strategies or constants."""
  return hst.fixed_dictionaries(
      {k: v if isinstance(v, hst.SearchStrategy) else hst.just(v) for k, v in kwargs.items()})


def unary(dtype_names: Sequence[str] = FLOATS, arg: str = "x", **elem_kwargs):
  """Calls of a one-input elementwise op."""
  return call(**{arg: arrays(dtypes(dtype_names), shapes(), **elem_kwargs)})


@hst.composite
def binary(draw, dtype_names: Sequence[str] = FLOATS, args: Sequence[str] = ("x", "y"),
           **elem_kwargs):
  """Calls of a two-input broadcasting op, both inputs of one dtype."""
  dtype = draw(dtypes(dtype_names))
  shape_a, shape_b = draw(broadcastable_shapes(2))
  return {args[0]: draw(arrays(dtype, shape_a, **elem_kwargs)),
          args[1]: draw(arrays(dtype, shape_b, **elem_kwargs))}


# Re-exported so specs can build anything else they need.
just = hst.just
sampled_from = hst.sampled_from
integers = hst.integers
booleans = hst.booleans
floats = hst.floats
composite = hst.composite
tuples = hst.tuples
lists = hst.lists
one_of = hst.one_of
fixed_dictionaries = hst.fixed_dictionaries
