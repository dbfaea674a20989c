"""What the ragged ops share: the family name, the known values of row partitions
(numpy, or proven by value analysis under jit) and the error when a node's output
size depends on data that is not known."""

from __future__ import annotations

from typing import Any, Optional

import numpy as np

from tfprims import errors, folding, value_analysis

FAMILY = "ragged"


def known_ints(ctx, value: Any) -> Optional[np.ndarray]:
  """``value``'s elements as numpy when known at trace time: a constant, a value
  folded from constants, a concrete array of an eager call, or a small runtime
  integer the value analysis proves constant; else None."""
  known = folding.known_value(value)
  if known is not None:
    return np.asarray(known)
  found = value_analysis.elements(ctx, value)
  if found is None or any(isinstance(v, value_analysis.Lin) for v in np.asarray(found).flat):
    return None
  return np.asarray(found.tolist() if found.dtype == object else found, dtype=np.dtype(value.dtype))


def unknown_size(node, what: str) -> errors.DynamicShapeError:
  """The typed error of a node whose output size depends on traced values."""
  return errors.DynamicShapeError(
    f"{node.op} node '{node.name}': {what} depends on the values of its row "
    "partitions, which are traced under jit/vmap/grad, so its output shape is unknown. "
    "Give the shape (rt.to_tensor(shape=...)) or build the ragged tensor from "
    "constants; eager calls of the converted function compute it as TF does "
    "(docs/semantics/ragged.md)."
  )


def op_error(node, message: str) -> errors.OpError:
  return errors.OpError(node.op, node.name, message)
