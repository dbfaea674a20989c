"""What the array modules share: the family name and TF's axis check (static params
are read with :mod:`tfprims.ops.shared`, specs draw with :mod:`tfprims.ops.shared_specs`)."""

from __future__ import annotations

FAMILY = "array"


def norm_axis(axis: int, rank: int, what: str = "axis") -> int:
  """``axis`` in ``[-rank, rank)`` made non-negative (else TF's out-of-range error)."""
  axis = int(axis)
  if not -rank <= axis < rank:
    raise ValueError(
      f"{what} {axis} is out of range for a tensor of rank {rank} (expected [{-rank}, {rank}))"
    )
  return axis + rank if axis < 0 else axis
