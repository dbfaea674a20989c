"""XlaIf and XlaWhile: the functional control flow of tf2xla graphs.

They have If's and While's inputs and function attrs (``then_branch``/``else_branch``,
``cond``/``body``), so they run by the same interpreter hooks: inline when the
predicate is known, else ``lax.cond``; ``lax.while_loop``/``scan`` or unrolled.
"""

from __future__ import annotations

from tfprims import core
from tfprims.core import structural
from tfprims.ops.xla._common import FAMILY


@structural(
  "XlaIf",
  family=FAMILY,
  calls_functions="if",
  doc="Runs then_branch or else_branch, as If: inline, or lax.cond.",
)
def _xla_if(ctx, node, inputs):
  return core.lookup("If").interpret(ctx, node, inputs)


@structural(
  "XlaWhile", family=FAMILY, calls_functions="while", doc="Runs body while cond holds, as While."
)
def _xla_while(ctx, node, inputs):
  return core.lookup("While").interpret(ctx, node, inputs)
