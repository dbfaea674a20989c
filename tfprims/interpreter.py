"""Evaluates a :class:`~tfprims.graph.Graph` node by node.

Every node runs one way, decided by its op's declaration in the registry
(:mod:`tfprims.core`): its ``interpret(ctx, node, inputs)`` hook if it declares
one, else prepare -> fold (every operand known) or bind its primitive. The
context of the call (function library, variable state, rng key) is passed to
hooks explicitly.

Values are numpy arrays while they are known at trace time (constants, shapes
and everything computed only from them: such nodes are folded) and JAX values
otherwise. Static inputs of an op must be numpy by the time the op runs.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import gc
from typing import Any, Mapping, Optional, Sequence

import jax
import numpy as np

from tfprims import (
  config,
  core,
  dtypes,
  errors,
  folding,
  graph as graph_lib,
  opdefs,
  progress as progress_lib,
  value_analysis,
)


@dataclasses.dataclass(frozen=True)
class VariableHandle:
  """The value a resource-variable handle takes inside the interpreter."""

  key: str


@dataclasses.dataclass(frozen=True)
class RefHandle(VariableHandle):
  """A TF1 reference tensor (the output of ``VariableV2``, ``Assign``, ``RefIdentity``...).

  Ops whose op def takes a ref input (``Assign``, ``ScatterAdd``, ``ApplyAdam``...)
  get the handle and write ``ctx.state[key]``; identity-like ops (``Identity``,
  the ``v/read`` of every TF1 variable) forward it, as TF's forward the
  variable's buffer; every other consumer gets the variable's value as it is when
  that consumer runs (:func:`deref`), so a read ordered after a write by a control
  dependency sees the written value, as in TF. Graph outputs are read last.
  """


def deref(ctx: "Context", value):
  """The value a TF1 ref tensor holds for a consumer running now (other values as
  they are)."""
  return ctx.state[value.key] if type(value) is RefHandle else value


@functools.lru_cache(maxsize=None)
def _keeps_refs(op_type: str) -> bool:
  """Whether ``op_type`` gets TF1 ref tensors as they are: ops taking ref inputs, and
  one-input identities (``pass_through``) that forward them."""
  if opdefs.takes_refs(op_type):
    return True
  op, od = core.lookup(op_type), opdefs.op_def(op_type)
  return (
    op is not None
    and op.pass_through
    and od is not None
    and len(od.input_arg) == 1
    and not (od.input_arg[0].number_attr or od.input_arg[0].type_list_attr)
  )


@dataclasses.dataclass(frozen=True)
class StringConstant:
  """A string tensor: kept only so that ops which never read it can be pruned."""

  node: str
  value: Any


@dataclasses.dataclass(frozen=True)
class TableHandle:
  """A lookup table captured by the function (tfprims.ops.lookup): its contents are
  the params ``<key>/keys`` (sorted) and ``<key>/values``; ``kind`` is TF's table
  kind (``HashTable``, ``MutableHashTable``...)."""

  key: str
  kind: str = "HashTable"
  initialized_by: str = ""  # the function's own initializer node, folded at conversion

  @property
  def keys_param(self) -> str:
    return f"{self.key}/keys"

  @property
  def values_param(self) -> str:
    return f"{self.key}/values"


_OPAQUE = (VariableHandle, StringConstant, TableHandle)  # values no op may take as a tensor


@dataclasses.dataclass(frozen=True)
class LazyValue:
  """A value an op leaves unevaluated for the op types that read it (``readers``):
  e.g. the decimal strings of an integer ``AsString``, which only the string-hash ops
  read (``tfprims.ops.hashing.DecimalStrings``). Pass-through ops forward it, inlined
  function calls pass it in and out; every other consumer is refused, naming both
  nodes."""

  node: str
  op: str
  readers: tuple
  what: str = "a value with no JAX representation"


def _refuse_unreadable(op, node, inputs) -> None:
  """Refuses inputs ``op`` cannot take as tensors: a :class:`LazyValue` it does not read,
  and a handle or string constant (``_OPAQUE``) unless it is an op on handles."""
  takes_opaque = not isinstance(op, core.TFOp) or op.takes_handles
  for value in inputs:
    if isinstance(value, LazyValue):
      if node.op not in value.readers and not (op.pass_through or op.calls_functions == "call"):
        raise errors.UnsupportedInputError(
          f"{node.op} node '{node.name}' reads the output of {value.op} node "
          f"'{value.node}' ({value.what}); only {', '.join(value.readers)} can read it"
        )
    elif not takes_opaque and isinstance(value, _OPAQUE):
      _refuse_opaque(node, value)


@dataclasses.dataclass
class Context:
  """Per-call interpreter state: the function library, variables and rng key, and
  the config options the function was converted with (``options``, from
  :func:`tfprims.config.read_at_conversion`; None: the current ones)."""

  library: graph_lib.Library
  state: dict[str, Any]
  rng: Optional[jax.Array] = None
  options: Optional[Mapping[str, Any]] = None

  node_scopes: bool = dataclasses.field(init=False)  # read once per call: every bind asks
  # Per-call state an op family keeps for itself, under a key it owns (its module's
  # name): e.g. the XlaCallModule modules run as opaque operations.
  family_state: dict = dataclasses.field(default_factory=dict)
  # id -> (value, forms) of small traced integers (tfprims.value_analysis)
  value_forms: dict = dataclasses.field(default_factory=dict)
  # nodes run so far (tfprims.progress), set by the outermost run() where watched
  progress: Optional[progress_lib.Progress] = None

  def __post_init__(self):
    if self.rng is not None:
      check_rng(self.rng)
    self.node_scopes = bool(self.option("node_scopes"))

  def option(self, name: str) -> Any:
    """A config option as this call sees it (see :func:`tfprims.config.resolve`)."""
    return config.resolve(name, self.options)

  def next_key(self, node: graph_lib.Node) -> jax.Array:
    """Fresh raw ``uint32[2]`` key data for a random op, split off the call's
    ``rng``: the key operand of ``uses_rng`` primitives."""
    if self.rng is None:
      raise errors.MissingRngError(
        f"{node.op} node '{node.name}' draws random numbers: PRNG key required for "
        "random ops; call the converted function with rng=jax.random.key(...)."
      )
    self.rng, key = jax.random.split(self.rng)
    return key_data(key)

  def call(self, fname: str, inputs: Sequence[Any], node: Optional[graph_lib.Node] = None) -> list:
    """Runs library function ``fname`` on ``inputs`` (inlined into the trace)."""
    return call_function(self, fname, inputs, node)

  def run(self, graph: graph_lib.Graph, values: Sequence[Any]) -> list:
    """Runs ``graph`` (e.g. a subgraph of a function) on values for its inputs."""
    return run(self, graph, dict(zip(graph.inputs, values)))


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
  if ctx.progress is not None or not progress_lib.wanted():
    return _run(ctx, graph, feeds)
  total = graph.__dict__.get("_progress_total")  # once per graph: eager calls repeat
  if total is None:
    total = graph.__dict__["_progress_total"] = sum(
      node.name not in feeds for node, _ in graph.schedule
    ) + sum(len(g.nodes) for g in ctx.library.reachable(graph).values())
  with progress_lib.Progress(total, f"tfprims: converting {graph.name}") as ctx.progress:
    return _run(ctx, graph, feeds)


def _run(ctx: Context, graph: graph_lib.Graph, feeds: Mapping[str, Any]) -> list:
  env: dict[str, list] = {name: [value] for name, value in feeds.items()}
  for node, drops in graph.schedule:
    if node.name not in env:
      inputs = [_lookup(env, ref, node) for ref in node.inputs]
      env[node.name] = run_node(ctx, node, inputs)
      if ctx.progress is not None:
        ctx.progress.step()
    for name in drops:  # free intermediates after their last use
      env.pop(name, None)
  return [
    dtypes.narrow(deref(ctx, _lookup(env, ref, None)), f"output '{ref[0]}'")
    for ref in graph.outputs
  ]


def _lookup(env, ref, node):
  name, idx = ref
  try:
    return env[name][idx]
  except KeyError:
    raise errors.ConversionError(
      f"node '{node.name if node else '<output>'}' reads '{name}', which was not "
      "computed or fed (a missing input?)"
    ) from None
  except IndexError:
    raise errors.ConversionError(f"'{name}' has no output {idx}") from None


def run_node(ctx: Context, node: graph_lib.Node, inputs: list) -> list:
  """Runs one node: its op's ``interpret`` hook, or prepare -> fold/bind."""
  try:
    op = core.lookup(node.op)
    if not _keeps_refs(node.op):  # TF1 ref tensors: read now (see RefHandle)
      inputs = [deref(ctx, v) for v in inputs]
    if op is None:
      if node.op in ctx.library:  # a direct call of a library function
        return call_function(ctx, node.op, inputs, node)
      raise errors.UnsupportedOpError({node.op: [node.name]})
    _refuse_unreadable(op, node, inputs)
    if op.interpret is not None:  # hooks get the program's dtypes (dtypes.narrow)
      inputs = [dtypes.narrow(v, f"an input of {node.op} node '{node.name}'") for v in inputs]
      return list(op.interpret(ctx, node, inputs))
    return bind_node(ctx, op, node, inputs)
  except errors.TFPrimsError:
    raise
  except Exception as e:  # anything from JAX/numpy: name the node
    if _symbolic(inputs) and _needs_concrete_sizes(e):
      # JAX raises this class (not public) where it cannot decide a comparison of dims
      undecided = type(e).__name__ == "InconclusiveDimensionOperation"
      raise errors.SymbolicShapeError(
        node.op,
        node.name,
        "its inputs have symbolic dims (a shape-polymorphic "
        f"jax.export: {_shapes(inputs)}), and it needs concrete sizes for them; export "
        "with concrete shapes there (tfprims export --batch N or --shape NAME=D0,D1,...; "
        "deploy.export(batch=..., shapes=...))"
        + (
          ", or state what holds between the dims (tfprims export --constraint "
          "'batch >= 2'; deploy.export(constraints=...))"
          if undecided
          else ""
        )
        + f". {type(e).__name__}: {str(e).splitlines()[0]}",
      ) from e
    raise errors.OpError(node.op, node.name, f"{type(e).__name__}: {e}") from e


def _symbolic(values) -> bool:
  return any(type(d) is not int for v in values for d in getattr(v, "shape", ()))


def _shapes(values) -> str:
  return ", ".join(str(tuple(v.shape)) for v in values if hasattr(v, "shape"))


def _needs_concrete_sizes(e: Exception) -> bool:
  """JAX's errors for a value or a comparison that a symbolic dim leaves undecided, or a
  symbolic dim used as a Python int (shape polymorphism's InconclusiveDimensionOperation
  and _DimExpr are not public: matched by name)."""
  return (
    isinstance(e, jax.errors.ConcretizationTypeError)
    or type(e).__name__ == "InconclusiveDimensionOperation"
    or (isinstance(e, TypeError) and "'_DimExpr'" in str(e))
  )


def bind_node(
  ctx: Context, op: core.TFOp, node: graph_lib.Node, inputs: list, grouped_as: Optional[str] = None
) -> list:
  """The default way to run a node of a primitive op: prepare (grouped inputs, attrs)
  -> operands and params (a key in front for a ``uses_rng`` op), the op's checks,
  then fold or bind. A hook that handles only some inputs falls back to it.
  ``grouped_as``: the op type whose op def names ``inputs`` (default: the node's;
  a hook binding another op's primitive, e.g. ``ScatterAdd`` binding
  ``tf.ResourceScatterAdd``, passes that op's)."""
  attrs = AttrView(node)
  grouped = opdefs.group_inputs(grouped_as or node.op, inputs, attrs)
  operands, params = op.prepare(grouped, attrs, node.name)
  if op.uses_rng:
    operands = [ctx.next_key(node)] + operands
  if op.check is not None:
    run_check(op, node, operands, params)
    if op.assertion and ctx.option("enable_checkify_for_asserts"):
      checkify_check(op, node, operands, params)

  def apply() -> list:
    if ctx.node_scopes:
      # The node's name becomes part of the HLO op_name metadata of what it lowers to,
      # so XLA dumps and profiles name TF nodes (conv1/Conv2D), not anonymous fusions.
      with jax.named_scope(node.name):
        out = op.apply(operands, params)
    else:
      out = op.apply(operands, params)
    return list(out) if op.multiple_results else [out]

  # small runtime integers: proven constants fold, others keep their forms
  return value_analysis.bind(ctx, op, operands, params, apply)


def run_check(op, node, operands, params) -> None:
  """Runs ``op.check`` (what TF's kernel rejects on data): on known values (an eager
  call, constants) always, raising as TF does; on traced values only with the
  ``runtime_checks`` config, raising when the compiled program runs (through
  ``jax.debug.callback``)."""
  traced = any(isinstance(o, jax.core.Tracer) or folding.is_weight(o) for o in operands)
  if traced and not config.get_config("runtime_checks"):
    return
  if traced:
    found = op.check(*operands, **params)
  else:  # known values, even inside a trace: compute the check now
    with jax.ensure_compile_time_eval():
      found = op.check(*operands, **params)
  if found is None:  # nothing these dtypes/params can get wrong
    return
  bad, message = found
  if not isinstance(bad, jax.core.Tracer):
    if bool(bad):
      raise errors.RuntimeCheckError(node.op, node.name, message)
    return

  def fail(bad):
    if bool(bad):
      raise errors.RuntimeCheckError(node.op, node.name, message)

  jax.debug.callback(fail, bad)


def checkify_check(op, node, operands, params) -> None:
  """``op.check`` as a ``jax.experimental.checkify.check`` (seen by functions wrapped
  in ``checkify.checkify``), the ``enable_checkify_for_asserts`` config."""
  from jax.experimental import checkify

  found = op.check(*operands, **params)
  if found is not None:
    bad, message = found
    checkify.check(
      jax.numpy.logical_not(bad), checkify_message(f"{node.op} node '{node.name}': {message}")
    )


def checkify_message(text: str) -> str:
  """``text`` as a checkify format string that prints as itself."""
  return text.replace("{", "{{").replace("}", "}}")


def check_rng(rng) -> None:
  """Refuses an ``rng=`` that is not one JAX key (typed, or raw uint32[2] data)."""
  want = (
    "rng must be one JAX key: jax.random.key(seed) (a typed key) or "
    "jax.random.PRNGKey(seed) (uint32[2] key data)"
  )
  if isinstance(rng, (bool, int, float, np.integer, np.floating)):
    raise errors.InvalidRngError(
      f"{want}; got the {type(rng).__name__} {rng!r}. To use a "
      f"number as a seed, pass rng=jax.random.key({rng!r})."
    )
  dtype, shape = getattr(rng, "dtype", None), getattr(rng, "shape", None)
  if dtype is None or shape is None:
    raise errors.InvalidRngError(f"{want}; got {type(rng).__name__}")
  if jax.numpy.issubdtype(dtype, jax.dtypes.prng_key):
    if tuple(shape) != ():
      raise errors.InvalidRngError(
        f"{want}; got an array of {tuple(shape)} keys (use jax.vmap over keys, or "
        "pass one key and let the function split it)"
      )
    return
  if np.dtype(dtype) != np.uint32 or tuple(shape) != (2,):
    raise errors.InvalidRngError(
      f"{want}; got an array of shape {tuple(shape)} and dtype {np.dtype(dtype).name}"
    )


def key_data(key) -> jax.Array:
  """Raw ``uint32[2]`` threefry key data for a JAX key (typed or raw).

  Typed keys of another PRNG implementation (rbg...) are turned into threefry
  data by drawing two words from them.
  """
  if jax.numpy.issubdtype(getattr(key, "dtype", np.dtype("float32")), jax.dtypes.prng_key):
    data = jax.random.key_data(key)
    if data.shape == (2,) and data.dtype == np.uint32:
      return data
    return jax.random.bits(key, (2,), np.uint32)
  data = jax.numpy.asarray(key)
  if data.shape == (2,) and data.dtype == np.uint32:
    return data
  raise TypeError(
    f"rng must be a JAX key (jax.random.key(0) or jax.random.PRNGKey(0)); "
    f"got an array of shape {data.shape} and dtype {data.dtype}"
  )


def _refuse_opaque(node, value):
  if isinstance(value, VariableHandle):
    raise errors.UnsupportedInputError(
      f"{node.op} node '{node.name}' takes a resource variable handle directly; "
      "only ops that read or write variables (ReadVariableOp, AssignVariableOp, "
      "ResourceGather...) may use them"
    )
  if isinstance(value, TableHandle):
    raise errors.UnsupportedInputError(
      f"{node.op} node '{node.name}' takes the lookup table '{value.key}' directly; "
      "only LookupTableFindV2, LookupTableSizeV2 and LookupTableExportV2 may use it"
    )
  raise errors.UnsupportedInputError(
    f"{node.op} node '{node.name}' uses the string constant '{value.node}': "
    "string tensors have no JAX representation; do string processing in TF "
    "before calling the converted function"
  )


class AttrView(Mapping):
  """Lazy mapping of a node's attrs (decoded on access, op-def defaults included)."""

  def __init__(self, node):
    self._node = node

  def __getitem__(self, key):
    return self._node.attr(key)

  def __contains__(self, key):
    return self._node.attr(key, None) is not None

  def __iter__(self):
    return iter(self._node.attr_protos)

  def __len__(self):
    return len(self._node.attr_protos)


def call_function(
  ctx: Context, fname: str, inputs: Sequence[Any], node: Optional[graph_lib.Node] = None
) -> list:
  """Inlines a library function call."""
  g = ctx.library.graph(fname)
  if len(inputs) != len(g.inputs):
    raise errors.ConversionError(
      f"function {fname!r} takes {len(g.inputs)} inputs, got {len(inputs)}"
    )
  feeds = dict(zip(g.inputs, inputs))
  if config.get_config("named_scopes") and any(not core.is_concrete(v) for v in inputs):
    with jax.named_scope(fname):
      return run(ctx, g, feeds)
  return run(ctx, g, feeds)


# --- checks before tracing ---------------------------------------------------------------


def dynamic_shape_bound(node: graph_lib.Node) -> Optional[int]:
  """The output bound the ``dynamic_shape_bounds`` config gives ``node`` (by node
  name, else by op type), or None."""
  bounds = config.get_config("dynamic_shape_bounds") or {}
  bound = bounds.get(node.name, bounds.get(node.op))
  if bound is None:
    return None
  if isinstance(bound, bool) or not isinstance(bound, (int, np.integer)) or bound < 0:
    raise errors.ConversionError(
      f"dynamic_shape_bounds: the bound of {node.op} node "
      f"'{node.name}' must be a non-negative int, got {bound!r}"
    )
  return int(bound)


def check_supported(
  graph: graph_lib.Graph, library: graph_lib.Library, inputs: Sequence[str] = ()
) -> None:
  """Raises one error listing everything that keeps ``graph`` from converting, found
  before anything is traced: unsupported ops in the graph and every library function
  it reaches, calls of functions the library lacks, graph inputs nothing can feed,
  and the unsupported ``inputs`` the caller found (messages)."""
  unsupported: dict[str, list[str]] = {}
  problems: list[str] = []
  for fname, g in [("", graph)] + sorted(library.reachable(graph).items()):
    for node in g.nodes:
      where = f"{fname}/{node.name}" if fname else node.name
      for called in graph_lib.func_attrs(node):
        if called not in library:
          problems.append(
            f"{node.op} node '{where}' calls function {called!r}, which is "
            "not in the graph's function library"
          )
      for ref in node.inputs:
        if ref[0] not in g.by_name and ref[0] not in g.inputs:
          problems.append(
            f"{node.op} node '{where}' reads '{ref[0]}', which is not a node "
            f"of the {'function ' + repr(fname) if fname else 'graph'}"
          )
      op = core.lookup(node.op)
      if op is not None and op.graph_input and node.name not in g.inputs and node.name in g.needed:
        problems.append(
          f"{node.op} node '{where}' is not an input of the "
          f"{'function ' + repr(fname) if fname else 'graph'}, so nothing "
          "can feed it; list it as an input"
        )
      if op is None:
        if node.op not in library:
          unsupported.setdefault(node.op, []).append(where)
        continue
      # a hook may refuse some nodes of its op type by their attrs (AsString of floats):
      # its ``refuses(node)`` returns why (None: the node converts)
      refuses = getattr(op.interpret, "refuses", None)
      if refuses is not None and refuses(node):
        unsupported.setdefault(node.op, []).append(where)
      # Data-dependent-shape ops (Where, Unique...) convert: an eager call computes
      # them on its values; traced, their hooks raise DynamicShapeError naming the node.
  if unsupported or inputs or problems:
    hints = sorted({h for h in map(core.unsupported_hint, unsupported) if h})
    raise errors.blocked_conversion(unsupported, [], list(inputs), hints, problems)
