"""What tfprims knows of a tensor before it has a value: :class:`TensorSpec`."""

from __future__ import annotations

import dataclasses
from typing import Any, Optional

import numpy as np


@dataclasses.dataclass(frozen=True)
class TensorSpec:
  """Shape (None for unknown dims) and dtype (TF's, exact) of an input, output or param."""

  name: str
  shape: Optional[tuple]
  dtype: Any
  trainable: Optional[bool] = None

  def __str__(self):
    shape = (
      "?"
      if self.shape is None
      else "[" + ", ".join("None" if d is None else str(d) for d in self.shape) + "]"
    )
    dtype = self.dtype.name if isinstance(self.dtype, np.dtype) else str(self.dtype)
    return f"{self.name}: {dtype}{shape}"
