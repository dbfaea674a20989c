"""What the array modules share: static params read as Python ints, TF's axis
check, and the helpers their property-test strategies use."""

from __future__ import annotations

import numpy as np

FAMILY = "array"


def ints(value) -> tuple:
  """A static param (scalar or nested tuple) as a flat tuple of Python ints."""
  try:
    return tuple(int(v) for v in np.asarray(value, dtype=np.int64).reshape(-1))
  except TypeError:  # a symbolic dim (jax.export shape polymorphism) where an int is needed
    raise TypeError(f"this static input needs concrete sizes, but {value!r} holds the "
                    "symbolic dims of a shape-polymorphic export: export with concrete "
                    "shapes (tfprims export --batch N)") from None


def scalar_int(value) -> int:
  """A static scalar param as a Python int."""
  flat = ints(value)
  if len(flat) != 1:
    raise ValueError(f"expected a scalar, got {value!r}")
  return flat[0]


def norm_axis(axis: int, rank: int, what: str = "axis") -> int:
  """``axis`` in ``[-rank, rank)`` made non-negative (else TF's out-of-range error)."""
  axis = int(axis)
  if not -rank <= axis < rank:
    raise ValueError(f"{what} {axis} is out of range for a tensor of rank {rank} "
                     f"(expected [{-rank}, {rank}))")
  return axis + rank if axis < 0 else axis


# --- property-test helpers ----------------------------------------------------------------

#: The index dtypes TF's shape-like inputs accept.
INDEX_DTYPES = ("int32", "int64")


def lazy_hst():
  """``hypothesis.strategies``, imported when a spec is drawn (not by ``import tfprims``)."""
  from hypothesis import strategies as hst
  return hst


def index_array(draw, st, values, names=INDEX_DTYPES):
  """``values`` as an array of a drawn index dtype."""
  return np.asarray(values, dtype=draw(st.dtypes(names)))
