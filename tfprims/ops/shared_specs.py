"""Property-test spec helpers several op families share, under public names (the
runtime helpers are in :mod:`tfprims.ops.shared`). Hypothesis is imported only when a
spec is built, not by ``import tfprims``.
"""

from __future__ import annotations

import numpy as np

#: The index dtypes TF's shape-like inputs accept.
INDEX_DTYPES = ("int32", "int64")


def lazy_hst():
  """``hypothesis.strategies``, imported when a spec is drawn (not by ``import tfprims``)."""
  from hypothesis import strategies as hst

  return hst


def index_array(draw, st, values, names=INDEX_DTYPES):
  """``values`` as an array of a drawn index dtype."""
  return np.asarray(values, dtype=draw(st.dtypes(names)))


def bounded_values(st, dtype, shape, *, bound=2.0, special=False):
  """Arrays for arithmetic-heavy ops: bounded floats (so float16/bfloat16 sums stay
  comparable) or full-range integers (wrap-around is order independent)."""
  dt = st.np_dtype(dtype)
  if dt.kind in "iu":
    if dt.itemsize == 8:  # keep 64-bit values in the 32-bit range (x64 may be off)
      info = np.iinfo(np.int32 if dt.kind == "i" else np.uint32)
      return st.arrays(dt, shape, min_value=int(info.min), max_value=int(info.max))
    return st.arrays(dt, shape)
  if special:
    return st.arrays(dt, shape)
  return st.arrays(dt, shape, special=False, min_value=-bound, max_value=bound)
