"""StableHLO modules read back as JAX operations.

``jax2tf.convert`` writes a JAX function as one ``XlaCallModule`` op holding the
function's StableHLO. Called as one opaque operation, the module can be neither
differentiated nor batched by JAX. :func:`call_module` instead runs the module's
operations as the JAX operations they were lowered from (``lax.add`` for
``stablehlo.add``, ``lax.scan`` for a counted ``stablehlo.while``, ``lax.linalg``
for JAX's LAPACK custom calls, ...), so ``jax.grad``/``jvp``/``vmap`` of the
converted function work natively and ``make_jaxpr`` shows its operations.

* reader.py: deserializing, types, constants, the block interpreter;
* ops.py: operations without regions;
* regions.py: reductions, sorts, scatters, loops, branches, calls;
* custom_calls.py: the custom calls JAX emits on CPU.

:func:`unreadable` tells whether a module can be read for given input types (it
traces the module once, abstractly); XlaCallModule falls back to the opaque call
when it cannot (docs/jax2tf.md lists what is read).
"""

from __future__ import annotations

import functools
from typing import Any, Optional, Sequence

import jax
import numpy as np

from tfprims.stablehlo import custom_calls, ops, regions  # noqa: F401 (handlers)
from tfprims.stablehlo.reader import (
  HANDLERS,
  Runner,
  StableHLOError,
  as_jax,
  load,
  tensor_type,
  unsupported_operations,
)

__all__ = ["StableHLOError", "as_jax", "call_module", "differentiable", "unreadable", "HANDLERS"]


def call_module(
  data: bytes, args: Sequence[Any], *, platform_index: Optional[int] = None, wrapped: bool = False
) -> list:
  """Runs the module's ``main`` on ``args`` (JAX or numpy values) as JAX operations.
  ``platform_index``: the platform argument of a multi-platform module; ``wrapped``:
  a custom gradient around the call provides its derivatives (operations JAX cannot
  differentiate then have zero tangents, never read, instead of raising)."""
  module = load(bytes(data))
  if "main" not in module.functions:
    raise StableHLOError("the module has no main function")
  inputs = list(args)
  params = list(module.functions["main"].regions[0].blocks[0].arguments)
  if platform_index is not None:
    inputs.insert(0, np.array(platform_index, tensor_type(params[0].type).dtype))
  if len(params) != len(inputs):
    raise StableHLOError(f"the module's main takes {len(params)} arguments, not {len(inputs)}")
  for k, (p, x) in enumerate(zip(params, inputs)):
    want = tensor_type(p.type).shape
    if len(want) != np.ndim(x) or any(w not in (None, d) for w, d in zip(want, np.shape(x))):
      raise StableHLOError(
        f"argument {k} has shape {list(np.shape(x))}, the module expects "
        f"{['?' if w is None else w for w in want]}"
      )
  return Runner(module, wrapped).call("main", inputs)


@functools.lru_cache(maxsize=256)
def _unreadable(data: bytes, avals: tuple, platform_index: Optional[int]) -> Optional[str]:
  module = load(data)
  missing = unsupported_operations(module)
  if missing:
    return "operations without a JAX equivalent: " + ", ".join(missing)
  specs = [jax.ShapeDtypeStruct(shape, dtype) for shape, dtype in avals]
  try:
    jax.make_jaxpr(lambda *a: call_module(data, a, platform_index=platform_index))(*specs)
  except StableHLOError as e:
    return str(e)
  return None


@functools.lru_cache(maxsize=256)
def differentiable(data: bytes) -> bool:
  """Whether every operation of the module is read as a JAX operation that JAX can
  differentiate (not a custom call without a JAX equivalent)."""
  return all(
    custom_calls.has_derivative(op)
    for op in load(bytes(data)).operations()
    if op.name == "stablehlo.custom_call"
  )


def unreadable(
  data: bytes, args: Sequence[Any], *, platform_index: Optional[int] = None
) -> Optional[str]:
  """Why the module cannot be read as JAX operations for inputs like ``args``
  (None when it can). Cached per module and input types."""
  avals = tuple((tuple(np.shape(a)), np.dtype(a.dtype)) for a in args)
  return _unreadable(bytes(data), avals, platform_index)
