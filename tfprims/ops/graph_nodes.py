"""Graph plumbing: constants, placeholders, no-ops and function calls.

None of these has a primitive: the interpreter runs them by their hooks.
``PartitionedCall``/``StatefulPartitionedCall`` inline the called function
(inside ``jax.named_scope(<function name>)``).
"""

from __future__ import annotations

from tfprims import dtypes, errors
from tfprims.core import structural
from tfprims.interpreter import StringConstant

FAMILY = "graph"


@structural("Const", family=FAMILY, doc="A constant: numpy while it is known at trace time.")
def _const(ctx, node, inputs):
  value = node.attr("value")
  if value.dtype.kind in "OSU":
    return [StringConstant(node.name, value)]
  return [dtypes.canonicalize_value(value, f"Const node '{node.name}'")]


@structural("NoOp", family=FAMILY, doc="Nothing (a control-dependency anchor).")
def _noop(ctx, node, inputs):
  return []


@structural("Placeholder", "_Arg", family=FAMILY, graph_input=True,
            doc="A graph input, fed by the caller.")
def _placeholder(ctx, node, inputs):
  raise errors.ConversionError(f"Placeholder '{node.name}' was not fed a value")


@structural("PlaceholderWithDefault", family=FAMILY, pass_through=True,
            doc="A graph input with a default: its input when not fed.")
def _placeholder_with_default(ctx, node, inputs):
  return [inputs[0]]


@structural("PartitionedCall", "StatefulPartitionedCall", family=FAMILY,
            calls_functions=True, doc="A call of a library function, inlined.")
def _partitioned_call(ctx, node, inputs):
  return ctx.call(node.attr("f").name, inputs, node)
