"""Graph plumbing: constants, placeholders, no-ops and function calls.

None of these has a primitive: the interpreter runs them by their hooks.
``PartitionedCall``/``StatefulPartitionedCall`` inline the called function
(inside ``jax.named_scope(<function name>)``).
"""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np

from tfprims import dtypes, errors
from tfprims.core import structural
from tfprims.interpreter import StringConstant

FAMILY = "graph"


@structural("Const", family=FAMILY, doc="A constant: numpy while it is known at trace time.")
def const(ctx, node, inputs):
  value = node.attr("value")
  if value.dtype.kind in "OSU":
    return [StringConstant(node.name, value)]
  # The force_const_float{32,64}_to_bfloat16 configs (tf2jax's): float constants
  # that would otherwise promote a bfloat16 computation back to float32.
  if (
    value.dtype == np.float32
    and ctx.option("force_const_float32_to_bfloat16")
    or value.dtype == np.float64
    and ctx.option("force_const_float64_to_bfloat16")
  ):
    return [np.asarray(value, dtype=jnp.bfloat16)]
  if value.dtype in dtypes.WIDE_FLOATS:  # kept wide while known (dtypes.is_wide)
    return [np.asarray(value)]
  return [dtypes.canonicalize_value(value, f"Const node '{node.name}'")]


@structural("NoOp", family=FAMILY, doc="Nothing (a control-dependency anchor).")
def _noop(ctx, node, inputs):
  return []


@structural(
  "Placeholder", "_Arg", family=FAMILY, graph_input=True, doc="A graph input, fed by the caller."
)
def _placeholder(ctx, node, inputs):
  raise errors.ConversionError(f"Placeholder '{node.name}' was not fed a value")


@structural(
  "PlaceholderWithDefault",
  family=FAMILY,
  pass_through=True,
  doc="A graph input with a default: its input when not fed.",
)
def _placeholder_with_default(ctx, node, inputs):
  return [inputs[0]]


@structural(
  "PartitionedCall",
  "StatefulPartitionedCall",
  family=FAMILY,
  calls_functions="call",
  doc="A call of a library function, inlined.",
)
def _partitioned_call(ctx, node, inputs):
  return ctx.call(node.attr("f").name, inputs, node)
