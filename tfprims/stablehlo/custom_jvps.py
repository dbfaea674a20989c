"""JAX functions whose derivative is a custom rule, recognized in a module so that
they keep that rule.

A ``jax.custom_jvp`` rule does not survive lowering: StableHLO holds the primal
computation only. Read back as the ``lax`` operations it was lowered from, the
computation is differentiated as JAX differentiates those operations, which
differs from the custom rule where the function has a kink. ``jax.nn.relu`` is
``max(x, 0)``, whose ``lax.max`` derivative at ``x == 0`` splits the tie evenly
(0.5); the rule, and TF's gradient of a jax2tf function (JAX's VJP), give 0.
``jax.nn.relu6`` likewise at 0 and 6.

Both are jitted in JAX, so a module calls them as private functions named after
them (``@relu``, ``@relu_0`` for another signature, ``@relu6``). A call of such a
function whose result is that function's expression of its last argument
(``maximum(x, 0)``, ``minimum(maximum(x, 0), 6)``; the leading arguments are a
shape-polymorphic module's platform index and dimension variables) is read as the
JAX function itself: the same operations, with JAX's rule. A function of another
body keeps being read operation by operation.
"""

from __future__ import annotations

import re
from typing import Callable, Optional

import jax
import jax.numpy as jnp
import numpy as np

from tfprims.stablehlo.reader import constant_value, ir, tensor_type

_BROADCASTS = ("stablehlo.broadcast_in_dim", "stablehlo.dynamic_broadcast_in_dim")


def _producer(value) -> Optional[ir.Operation]:
  owner = value.owner
  return None if isinstance(owner, ir.Block) else owner.operation


def _splat(value, number: float) -> bool:
  """Whether ``value`` is a constant ``number`` of any shape (a scalar constant,
  possibly broadcast)."""
  op = _producer(value)
  if op is not None and op.name in _BROADCASTS:
    op = _producer(op.operands[0])
  if op is None or op.name != "stablehlo.constant":
    return False
  ttype = tensor_type(op.results[0].type)
  if not ttype.static:
    return False
  array = np.asarray(constant_value(op.attributes["value"], ttype))
  return array.size > 0 and bool(np.all(array == number))


def _clamped_below(value, x) -> bool:
  """``value`` is ``maximum(x, 0)``."""
  op = _producer(value)
  return (
    op is not None
    and op.name == "stablehlo.maximum"
    and op.operands[0] == x
    and _splat(op.operands[1], 0)
  )


def _clamped_both(value, x) -> bool:
  """``value`` is ``minimum(maximum(x, 0), 6)``."""
  op = _producer(value)
  return (
    op is not None
    and op.name == "stablehlo.minimum"
    and _clamped_below(op.operands[0], x)
    and _splat(op.operands[1], 6)
  )


# name (as JAX names the jitted function) -> (body check of its result, the function)
_FUNCTIONS: dict[str, tuple[Callable, Callable]] = {
  "relu": (_clamped_below, jax.nn.relu),
  "relu6": (_clamped_both, jax.nn.relu6),
}
_SUFFIX = re.compile(r"_\d+$")


def known_function(func) -> Optional[Callable]:
  """The JAX function (of the last argument) that the module's ``func.func`` is, if
  it is one of those whose derivative is a custom rule; else None."""
  name = _SUFFIX.sub("", ir.StringAttr(func.attributes["sym_name"]).value)
  entry = _FUNCTIONS.get(name)
  if entry is None:
    return None
  block = func.regions[0].blocks[0]
  arguments = list(block.arguments)
  terminator = list(block.operations)[-1].operation
  if not arguments or len(terminator.operands) != 1:
    return None
  x = arguments[-1]
  ttype = tensor_type(x.type)
  if (
    not jnp.issubdtype(ttype.dtype, jnp.floating)
    or x.type != terminator.operands[0].type
    or any(tensor_type(a.type).shape != () for a in arguments[:-1])
  ):
    return None
  check, fn = entry
  return fn if check(terminator.operands[0], x) else None
