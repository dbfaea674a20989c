"""The strategies of the segment-reduction modules' property specs (``segments``,
``sparse_segments``): segment data with special values and ties, sorted segment ids,
inner shapes."""

from __future__ import annotations

import numpy as np


def draw_data(draw, st, dtype, shape, *, nan=True):
  """Segment data: special values, sometimes few distinct ones (ties for min/max);
  complex parts bounded (products stay finite) and integers of 64 bits in the
  32-bit range (sums and products wrap alike anyway)."""
  if st.kind(dtype) == "c":
    return st.draw_array(draw, dtype, shape, cbound=1.5, ties=draw(st.booleans()))
  if st.kind(dtype) == "f":
    ties = draw(st.integers(0, 3)) == 0
    x = st.draw_array(draw, dtype, shape, ties=ties)
    if not nan:
      x = np.where(np.isnan(x), np.zeros((), dtype), x).astype(dtype)
    return x
  if draw(st.booleans()):
    return st.draw_array(draw, dtype, shape, int_lo=-2 if st.kind(dtype) == "i" else 0, int_hi=3)
  return st.draw_array(draw, dtype, shape)


def draw_sorted_ids(draw, st, n: int, max_id: int = 4) -> np.ndarray:
  """``n`` non-decreasing non-negative ids (with gaps: empty segments)."""
  values = sorted(draw(st.lists(st.integers(0, max_id), min_size=n, max_size=n)))
  return np.asarray(values, dtype=draw(st.dtypes(("int32", "int64"))))


def inner_shape(draw, st, max_rank: int = 2):
  return tuple(draw(st.shapes(max_rank=max_rank, max_side=3)))
