"""TF Optional variants: TF's gradient rewrite of If/While outputs intermediates as
optionals. An Optional is a pytree: ``has_value`` and its components."""

from __future__ import annotations

import jax
import numpy as np

from tfprims import errors
from tfprims.core import structural

FAMILY = "control_flow"


@jax.tree_util.register_pytree_node_class
class OptionalValue:
  """A TF Optional variant: ``has_value`` (bool) and its components (or None)."""

  def __init__(self, has_value, values):
    self.has_value = has_value
    self.values = None if values is None else tuple(values)

  def tree_flatten(self):
    if self.values is None:
      return (), None
    return (self.has_value,) + self.values, len(self.values)

  @classmethod
  def tree_unflatten(cls, n, children):
    if n is None:
      return cls(np.asarray(False), None)
    return cls(children[0], children[1:])


@structural("OptionalFromValue", family=FAMILY, doc="An Optional holding its inputs.")
def _optional_from_value(ctx, node, inputs):
  return [OptionalValue(np.asarray(True), inputs)]


@structural("OptionalNone", family=FAMILY, doc="An empty Optional.")
def _optional_none(ctx, node, inputs):
  return [OptionalValue(np.asarray(False), None)]


@structural("OptionalHasValue", family=FAMILY, doc="Whether the Optional holds a value.")
def _optional_has_value(ctx, node, inputs):
  return [inputs[0].has_value]


@structural("OptionalGetValue", family=FAMILY, doc="The Optional's components.")
def _optional_get_value(ctx, node, inputs):
  opt = inputs[0]
  if opt.values is None:
    raise errors.OpError(node.op, node.name, "the optional has no value")
  return list(opt.values)
