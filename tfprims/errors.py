"""Typed errors raised by tfprims.

Every error a user can trigger derives from :class:`TFPrimsError`, so
``except tfprims.TFPrimsError`` catches all of them. Messages name the TF op type
and node involved and say what the user can do about it.

Each error also derives from the builtin exception tf2jax raises for the same
mistake (ValueError for conversion problems and bad inputs, TypeError for calls
that do not match the signature, LookupError for blocked gradients, KeyError and
ValueError for unknown config options), so code written against tf2jax keeps
catching them (docs/migrating-from-tf2jax.md).
"""

from __future__ import annotations

from typing import Mapping, Sequence


class TFPrimsError(Exception):
  """Base class of every error raised by tfprims."""


class TFPrimsWarning(UserWarning):
  """Base class of the warnings tfprims gives (filter them with ``warnings``)."""


class PrecisionWarning(TFPrimsWarning):
  """64-bit values will be computed in 32 bits because ``jax_enable_x64`` is off."""


class PrecisionError(TFPrimsError, ValueError):
  """A :class:`PrecisionWarning` turned into an error (config ``x64_narrowing="error"``)."""


class UnknownConfigError(TFPrimsError, KeyError, ValueError):
  """A config option tfprims does not know (a KeyError, as from ``get_config``, and a
  ValueError, as tf2jax's ``update_config`` raises)."""

  def __str__(self):  # KeyError would show the message quoted
    return str(self.args[0]) if self.args else ""


class ConversionError(TFPrimsError, ValueError):
  """The TF graph cannot be converted as it is (a ValueError, as in tf2jax)."""


class UnsupportedOpError(ConversionError):
  """The graph (or a function in its library) uses ops tfprims does not know.

  Attributes:
    ops: mapping from op type to the names of the nodes using it, for every
      unsupported op type found anywhere in the graph and its function library.
  """

  def __init__(self, ops: Mapping[str, Sequence[str]]):
    self.ops = {k: tuple(v) for k, v in sorted(ops.items())}
    super().__init__(_unsupported_ops_message(self.ops))


def _unsupported_ops_message(ops: Mapping[str, Sequence[str]]) -> str:
  lines = []
  for op_type, nodes in ops.items():
    shown = ", ".join(nodes[:8]) + (f", ... ({len(nodes)} nodes)" if len(nodes) > 8 else "")
    lines.append(f"  {op_type}: {shown}")
  return (
    f"Unsupported operations in graph ({len(ops)} TF op type(s) tfprims does not "
    "convert):\n"
    + "\n".join(lines)
    + "\nRegister them with tfprims.register_op (see docs/extending.md) or "
    "avoid them in the TF function."
  )


class UnsupportedInputError(ConversionError):
  """A tensor kind tfprims cannot represent in JAX (string, ragged, sparse, resource...)."""


class StaticInputError(ConversionError):
  """A shape-deciding input of a node depends on runtime data.

  tfprims resolves such inputs (Reshape's shape, reduction axes, Slice sizes...)
  at trace time, because JAX needs static shapes.
  """

  def __init__(self, op_type: str, node: str, input_name: str, detail: str = ""):
    self.op_type, self.node, self.input_name = op_type, node, input_name
    super().__init__(
      f"{op_type} node '{node}': input '{input_name}' decides the output shape "
      f"but depends on runtime data{': ' + detail if detail else ''}. JAX needs "
      "static shapes: compute it from constants or from shapes (tf.shape) of "
      "inputs, or give the input a fixed value."
    )


class DynamicShapeError(ConversionError):
  """An op whose output shape depends on the values of its inputs."""


class OpError(ConversionError):
  """An op failed to convert or evaluate; the message names its type and node."""

  def __init__(self, op_type: str, node: str, message: str):
    self.op_type, self.node = op_type, node
    super().__init__(f"{op_type} node '{node}': {message}")


class BlockedConversionError(ConversionError):
  """Everything found at conversion that keeps a graph from converting, in one error.

  Raised as a class that also derives from the error type of each kind of
  blocker present (:class:`UnsupportedOpError`, :class:`DynamicShapeError`,
  :class:`UnsupportedInputError`), so ``except`` clauses written for one kind keep
  catching it, and named after that type when only one kind is present.

  Attributes:
    ops: ``{op type: node names}`` of the unsupported ops (in the graph and every
      library function it reaches).
    dynamic_shapes: ``(op type, node, why)`` of the ops whose output shape depends
      on runtime data.
    inputs: messages about unsupported inputs, captures and outputs.
    problems: messages about the graph itself (a call of a function the library
      lacks, a Placeholder nothing feeds).
  """

  def __init__(
    self,
    ops: Mapping[str, Sequence[str]],
    dynamic_shapes: Sequence[tuple],
    inputs: Sequence[str],
    hints: Sequence[str] = (),
    problems: Sequence[str] = (),
  ):
    self.ops = {k: tuple(v) for k, v in sorted(ops.items())}
    self.dynamic_shapes = tuple(dynamic_shapes)
    self.inputs = tuple(inputs)
    self.problems = tuple(problems)
    parts = []
    if self.problems:
      parts.append("the graph cannot run:\n" + "\n".join(f"  {m}" for m in self.problems))
    if self.inputs:
      parts.append("unsupported inputs:\n" + "\n".join(f"  {m}" for m in self.inputs))
    if self.ops:
      parts.append(_unsupported_ops_message(self.ops) + "".join(f"\nNote: {h}" for h in hints))
    if self.dynamic_shapes:
      parts.append(
        "data-dependent output shapes cannot be converted to JAX (static shapes are "
        "required):\n"
        + "\n".join(f"  {op} node '{node}': {why}" for op, node, why in self.dynamic_shapes)
        + "\nUse a fixed-size formulation instead (e.g. tf.where(cond, x, y) with three "
        "arguments, or masking instead of tf.boolean_mask)."
      )
    Exception.__init__(self, "\n".join(parts))


_BLOCKED_CLASSES: dict = {}


def blocked_conversion(
  ops, dynamic_shapes, inputs, hints=(), problems=()
) -> BlockedConversionError:
  """The :class:`BlockedConversionError` for these blockers (see its docstring)."""
  kinds = tuple(
    k
    for k, present in (
      (UnsupportedInputError, inputs),
      (UnsupportedOpError, ops),
      (DynamicShapeError, dynamic_shapes),
    )
    if present
  )
  key = (kinds, bool(problems))
  cls = _BLOCKED_CLASSES.get(key)
  if cls is None:
    name = kinds[0].__name__ if len(kinds) == 1 and not problems else "BlockedConversionError"
    cls = type(
      name,
      (BlockedConversionError,) + kinds,
      {"__module__": __name__, "__doc__": BlockedConversionError.__doc__},
    )
    _BLOCKED_CLASSES[key] = cls
  return cls(ops, dynamic_shapes, inputs, hints, problems)


class SymbolicShapeError(OpError):
  """An op that needs a concrete size where a shape-polymorphic ``jax.export`` gave its
  inputs symbolic dims: export with concrete shapes for that dim."""


class RuntimeCheckError(OpError, ValueError):
  """A value TF's kernel would reject (an out-of-range index, an integer division by
  zero...): raised by eager calls, and under jit with the ``runtime_checks`` config."""


class InputError(TFPrimsError, ValueError):
  """The converted function was called with inputs that do not match the TF signature."""


class InputStructureError(InputError, TypeError):
  """Missing, extra or differently nested inputs (also a TypeError: Python raises one
  for a call that does not match a function's signature)."""


class MissingInputError(InputStructureError):
  """An input the TF signature needs was not given (tf2jax's ``MissingInputError``)."""


class InputShapeError(InputError):
  """An input's shape is incompatible with the TF signature."""


class InputDtypeError(InputError, TypeError):
  """An input's dtype differs from the TF signature."""


class InvalidRngError(InputError, TypeError):
  """``rng=`` is not one JAX key (``jax.random.key(seed)`` or ``jax.random.PRNGKey(seed)``)."""


class MissingRngError(TFPrimsError, ValueError):
  """The function uses random ops but was called without ``rng=`` (a PRNG key)."""


class Int64OverflowError(ConversionError, OverflowError):
  """A 64-bit value does not fit the 32-bit type JAX uses with x64 disabled."""


class ControlFlowError(ConversionError):
  """A control-flow construct that cannot be expressed with static shapes."""


class ReverseModeLoopError(TFPrimsError, ValueError):
  """Reverse-mode differentiation through a while loop whose trip count is dynamic."""


class TensorListSizeError(ConversionError):
  """A TensorList's length (or element shape) cannot be known at trace time."""


class CustomGradientError(ConversionError):
  """A tf.custom_gradient's gradient function cannot be converted or evaluated."""


class PreventGradientError(TFPrimsError, LookupError):
  """Differentiation through a ``PreventGradient`` op (e.g. jax2tf with_gradient=False)."""


class MissingDependencyError(TFPrimsError, ImportError):
  """A package only part of tfprims needs is not installed (a plain ``pip install
  tfprims`` loads exported artifacts only); the message names the extra."""


def import_tensorflow():
  """``tensorflow``, or a :class:`MissingDependencyError` naming the extra."""
  try:
    import tensorflow
  except ModuleNotFoundError as e:
    if e.name != "tensorflow":
      raise
    raise MissingDependencyError(
      "this needs TensorFlow, which is not installed: pip install 'tfprims[tf]' "
      "(loading exported artifacts needs only jax)"
    ) from e
  return tensorflow
