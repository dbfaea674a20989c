"""Evaluates a :class:`~tfprims.graph.Graph` by binding each node's TF primitive.

Values are numpy arrays while they are known at trace time (constants, shapes
and everything computed only from them: such nodes are folded) and JAX values
otherwise. Static inputs of an op must be numpy by the time the op runs.
Function calls (PartitionedCall...) are inlined; resource variables are read and
written in a ``state`` mapping that becomes the converted function's params.
"""

from __future__ import annotations

import contextlib
import dataclasses
import gc
from typing import Any, Callable, Mapping, Optional, Sequence

import jax
import numpy as np

from tfprims import config, core, dtypes, errors, graph as graph_lib, opdefs


@dataclasses.dataclass(frozen=True)
class VariableHandle:
  """The value a resource-variable handle takes inside the interpreter."""
  key: str


@dataclasses.dataclass
class Context:
  """Per-call interpreter state: the function library, variables and rng key."""
  library: graph_lib.Library
  state: dict[str, Any]
  rng: Optional[jax.Array] = None

  def next_key(self, node: graph_lib.Node) -> jax.Array:
    """A fresh JAX key for a random op (split from the call's ``rng``)."""
    if self.rng is None:
      raise errors.MissingRngError(
          f"{node.op} node '{node.name}' draws random numbers: call the converted "
          "function with rng=jax.random.key(...).")
    self.rng, key = jax.random.split(self.rng)
    return key


_CONTEXTS: list[Context] = []


def current_context() -> Context:
  """The context of the graph being interpreted (for op hooks that need the rng
  key or variable state)."""
  if not _CONTEXTS:
    raise RuntimeError("no TF graph is being interpreted")
  return _CONTEXTS[-1]


# Ops the interpreter handles itself: they have no primitive of their own.
Handler = Callable[[Context, graph_lib.Node, list], list]
STRUCTURAL: dict[str, Handler] = {}

# Ops with data-dependent output shapes: JAX cannot represent them.
DYNAMIC_SHAPE_OPS = {
    "Where": "returns the indices of true elements (tf.where with one argument, "
             "tf.boolean_mask): its output size depends on the data",
    "Unique": "its output size depends on the data",
    "UniqueV2": "its output size depends on the data",
    "UniqueWithCounts": "its output size depends on the data",
    "ListDiff": "its output size depends on the data",
    "NonMaxSuppressionV3": "its output size depends on the data",
    "NonMaxSuppressionV4": "its output size depends on the data",
    "NonMaxSuppressionV5": "its output size depends on the data",
}

# Hints for op kinds that are unsupported by design.
UNSUPPORTED_HINTS = {
    "Switch": "TF1 control flow (Switch/Merge): convert a TF2 function (tf.cond/tf.while_loop "
              "in a tf.function) instead",
    "Merge": "TF1 control flow (Switch/Merge): convert a TF2 function instead",
    "Enter": "TF1 control flow: convert a TF2 function instead",
    "Exit": "TF1 control flow: convert a TF2 function instead",
    "HashTableV2": "lookup tables hold strings/state outside the graph; do the lookup in TF "
                   "before calling the converted function",
    "LookupTableFindV2": "lookup tables are not supported; do the lookup in TF beforehand",
    "LookupTableImportV2": "lookup tables are not supported",
    "MutableHashTableV2": "lookup tables are not supported",
}


def structural(*op_types: str):
  def register(fn: Handler) -> Handler:
    for op_type in op_types:
      STRUCTURAL[op_type] = fn
    return fn
  return register


def supported_op_types() -> frozenset:
  return frozenset(core._REGISTRY) | frozenset(STRUCTURAL)


def check_supported(graph: graph_lib.Graph, library: graph_lib.Library) -> None:
  """Raises one error listing every unsupported op (and data-dependent-shape op) in
  ``graph`` and the library functions it reaches, before anything is traced."""
  supported = supported_op_types()
  unsupported: dict[str, list[str]] = {}
  dynamic: list[str] = []
  for fname, g in [("", graph)] + sorted(library.reachable(graph).items()):
    for node in g.nodes:
      if node.op in supported or node.op in library:
        continue
      where = f"{fname}/{node.name}" if fname else node.name
      if node.op in DYNAMIC_SHAPE_OPS:
        dynamic.append(f"{node.op} node '{where}': {DYNAMIC_SHAPE_OPS[node.op]}")
      else:
        unsupported.setdefault(node.op, []).append(where)
  if dynamic:
    raise errors.DynamicShapeError(
        "data-dependent output shapes cannot be converted to JAX (static shapes "
        "are required):\n  " + "\n  ".join(dynamic) +
        "\nUse a fixed-size formulation instead (e.g. tf.where(cond, x, y) with three "
        "arguments, or masking instead of tf.boolean_mask).")
  if unsupported:
    err = errors.UnsupportedOpError(unsupported)
    hints = sorted({UNSUPPORTED_HINTS[o] for o in unsupported if o in UNSUPPORTED_HINTS})
    if hints:
      err.args = (err.args[0] + "\n" + "\n".join("Note: " + h for h in hints),)
    raise err


@contextlib.contextmanager
def gc_paused():
  """Pauses Python's cyclic garbage collector.

  Interpreting a graph allocates a few objects per node, which triggers full
  collections over the whole heap (TF, Keras and JAX hold millions of objects):
  on large graphs those took more time than the conversion itself. The
  interpreter creates almost no reference cycles, so refcounting frees its
  garbage; whatever cycles there are wait for the next collection.
  """
  enabled = gc.isenabled()
  gc.disable()
  try:
    yield
  finally:
    if enabled:
      gc.enable()


def run(ctx: Context, graph: graph_lib.Graph, feeds: Mapping[str, Any]) -> list:
  """Evaluates ``graph`` given values for its inputs (by name); returns its outputs."""
  env: dict[str, list] = {name: [value] for name, value in feeds.items()}
  _CONTEXTS.append(ctx)
  try:
    for node, drops in graph.schedule:
      if node.name not in env:
        inputs = [_lookup(env, ref, node) for ref in node.inputs]
        env[node.name] = _run_node(ctx, node, inputs)
      for name in drops:  # free intermediates after their last use
        env.pop(name, None)
    return [_lookup(env, ref, None) for ref in graph.outputs]
  finally:
    _CONTEXTS.pop()


def _lookup(env, ref, node):
  name, idx = ref
  try:
    return env[name][idx]
  except KeyError:
    raise errors.ConversionError(
        f"node '{node.name if node else '<output>'}' reads '{name}', which was not "
        "computed or fed (a missing input?)") from None
  except IndexError:
    raise errors.ConversionError(f"'{name}' has no output {idx}") from None


def _run_node(ctx: Context, node: graph_lib.Node, inputs: list) -> list:
  try:
    handler = STRUCTURAL.get(node.op)
    if handler is not None:
      return handler(ctx, node, inputs)
    if node.op in ctx.library:
      return call_function(ctx, node.op, inputs, node)
    op = core._REGISTRY.get(node.op)
    if op is None:
      raise errors.UnsupportedOpError({node.op: [node.name]})
    for value in inputs:
      if isinstance(value, _OPAQUE):
        _refuse_opaque(node, value)
    if op.interpret is not None:
      return list(op.interpret(node, inputs))
    attrs = _AttrView(node)
    grouped = opdefs.group_inputs(node.op, inputs, attrs)
    operands, params = op.prepare(grouped, attrs, node.name)
    out = op.apply(operands, params)
    return list(out) if op.multiple_results else [out]
  except errors.TFPrimsError:
    raise
  except Exception as e:  # anything from JAX/numpy: name the node
    raise errors.OpError(node.op, node.name, f"{type(e).__name__}: {e}") from e


def _refuse_opaque(node, value):
  if isinstance(value, VariableHandle):
    raise errors.UnsupportedInputError(
        f"{node.op} node '{node.name}' takes a resource variable handle directly; "
        "only ReadVariableOp/Assign*VariableOp/ResourceGather may use variables")
  raise errors.UnsupportedInputError(
      f"{node.op} node '{node.name}' uses the string constant '{value.node}': "
      "string tensors have no JAX representation; do string processing in TF "
      "before calling the converted function")


class _AttrView(Mapping):
  """Lazy mapping of a node's attrs (decoded on access, op-def defaults included)."""

  def __init__(self, node):
    self._node = node

  def __getitem__(self, key):
    return self._node.attr(key)

  def __contains__(self, key):
    return self._node.attr(key, None) is not None

  def __iter__(self):
    return iter(self._node._attr_protos)

  def __len__(self):
    return len(self._node._attr_protos)


def call_function(ctx: Context, fname: str, inputs: Sequence[Any],
                  node: Optional[graph_lib.Node] = None) -> list:
  """Inlines a library function call."""
  g = ctx.library.graph(fname)
  if len(inputs) != len(g.inputs):
    raise errors.ConversionError(
        f"function {fname!r} takes {len(g.inputs)} inputs, got {len(inputs)}")
  feeds = dict(zip(g.inputs, inputs))
  if config.get_config("named_scopes") and any(
      not core.is_concrete(v) for v in inputs):
    with jax.named_scope(fname):
      return run(ctx, g, feeds)
  return run(ctx, g, feeds)


# --- structural ops -----------------------------------------------------------


@structural("Const")
def _const(ctx, node, inputs):
  value = node.attr("value")
  if value.dtype.kind in "OSU":
    return [StringConstant(node.name, value)]
  return [dtypes.canonicalize_value(value, f"Const node '{node.name}'")]


@dataclasses.dataclass(frozen=True)
class StringConstant:
  """A string tensor: kept only so that ops which never read it can be pruned."""
  node: str
  value: Any


@structural("NoOp")
def _noop(ctx, node, inputs):
  return []


@structural("Placeholder", "PlaceholderWithDefault", "_Arg")
def _placeholder(ctx, node, inputs):
  if node.op == "PlaceholderWithDefault":
    return [inputs[0]]
  raise errors.ConversionError(f"Placeholder '{node.name}' was not fed a value")


@structural("PartitionedCall", "StatefulPartitionedCall")
def _partitioned_call(ctx, node, inputs):
  return call_function(ctx, node.attr("f").name, inputs, node)


@structural("ReadVariableOp")
def _read_variable(ctx, node, inputs):
  handle = _handle(node, inputs[0])
  return [ctx.state[handle.key]]


def _handle(node, value) -> VariableHandle:
  if not isinstance(value, VariableHandle):
    raise errors.UnsupportedInputError(
        f"{node.op} node '{node.name}' needs a resource variable captured by the "
        "function; got a value of another kind")
  return value


def _assign(update):
  def handler(ctx, node, inputs):
    handle = _handle(node, inputs[0])
    old = ctx.state[handle.key]
    new = update(old, inputs[1])
    if np.shape(new) != np.shape(old) and config.get_config("strict_shape_check"):
      raise errors.OpError(node.op, node.name,
                           f"assigns shape {np.shape(new)} to variable '{handle.key}' "
                           f"of shape {np.shape(old)}")
    ctx.state[handle.key] = new
    return []
  return handler


STRUCTURAL["AssignVariableOp"] = _assign(lambda old, value: value)
STRUCTURAL["AssignAddVariableOp"] = _assign(lambda old, value: core.get_op("AddV2").apply(
    [old, value], {}))
STRUCTURAL["AssignSubVariableOp"] = _assign(lambda old, value: core.get_op("Sub").apply(
    [old, value], {}))


_OPAQUE = (VariableHandle, StringConstant)  # values no op may take as a tensor
