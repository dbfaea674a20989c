"""The one conversion pipeline every entry point goes through.

An entry point (a tf.function, ConcreteFunction, restored function, SavedModel
signature, GraphDef, frozen .pb, Session, the tf2jax compat layer, the CLI) only
obtains a GraphDef, the tensors it feeds and fetches, and its params; then
:func:`prepare` turns that into the graph tfprims runs, always by the same passes:

1. the GraphDef as a :class:`tfprims.graph.Graph` pruned to the fetched outputs;
2. TF1 control flow (Switch/Merge, Enter/Exit/NextIteration) rebuilt as If/While
   (:func:`tfprims.ops.control_flow.v1.functionalize`), in the graph and in the library
   functions it calls;
3. lookup tables created in the graph (TF1: ``HashTableV2`` and its initializer)
   resolved to params ``<table>/keys`` and ``<table>/values``
   (:func:`tfprims.ops.lookup_graph.resolve`);
4. the checks, all found before anything is traced and reported in one error:
   fed inputs that are not nodes, graph inputs nothing feeds, unsupported ops
   anywhere in the graph and its function library, and the entry point's own
   problems (:func:`tfprims.interpreter.check_supported`);
5. the x64-narrowing check (64-bit values JAX computes in 32 bits);
6. jax2tf pattern rewrites (``infer_relu_from_jax2tf``);
7. the segment ids of TF's ragged reductions computed in static sizes
   (:func:`tfprims.ops.ragged_patterns.static_segment_ids`), and sparse tensors filled
   and reduced by row (``tf.nn.safe_embedding_lookup_sparse``) kept in static sizes
   (:func:`tfprims.ops.sparse_patterns.static_fills`), so that they jit with traced
   row splits and entries.
"""

from __future__ import annotations

import dataclasses
import warnings
from typing import Any, Callable, Iterable, Mapping, Optional, Sequence

import numpy as np

from tfprims import core, dtypes, errors, graph as graph_lib, interpreter
from tfprims.ops import jax2tf_patterns, lookup_graph, ragged_patterns, sparse_patterns
from tfprims.ops.control_flow import v1 as control_flow_v1
from tfprims.specs import TensorSpec

_WIDE = frozenset(map(np.dtype, ("float64", "complex128", "int64", "uint64")))
_WIDE_FLOATS = frozenset(map(np.dtype, ("float64", "complex128")))


@dataclasses.dataclass(frozen=True)
class Prepared:
  """A graph ready to run: its function library, its inputs' specs (in feed order) and
  the contents of the lookup tables it creates (params by name, not trainable: an
  entry point returns them as params or keeps them as constants)."""

  graph: graph_lib.Graph
  library: graph_lib.Library
  input_specs: tuple[Optional[TensorSpec], ...]
  tables: Mapping[str, np.ndarray] = dataclasses.field(default_factory=dict)

  def table_constants(self) -> dict:
    """The tables' contents as constants of a call (entry points without params),
    narrowed as params are when x64 is off (``Int64OverflowError`` where that would
    change them)."""
    return {
      k: dtypes.canonicalize_value(v, f"lookup table param {k!r}") for k, v in self.tables.items()
    }

  def table_specs(self) -> list[TensorSpec]:
    return [TensorSpec(k, tuple(v.shape), v.dtype, trainable=False) for k, v in self.tables.items()]


def prepare(
  graph_def,
  inputs: Sequence[str],
  outputs: Sequence[str],
  *,
  options: Mapping[str, Any],
  name: str = "graph",
  control_outputs: Sequence[str] = (),
  problems: Iterable[str] = (),
  input_specs: Optional[Sequence[Optional[TensorSpec]]] = None,
  params: Sequence[TensorSpec] = (),
  param_values: Optional[Mapping[str, Any]] = None,
  captured: Optional[Mapping[str, np.ndarray]] = None,
  export_table: Optional[Callable] = None,
) -> Prepared:
  """The graph ready to run, or one error naming everything in the way.

  Args:
    graph_def: the GraphDef (its function library holds nested functions).
    inputs, outputs: the tensors fed and fetched (``"x:0"`` or ``"x"``).
    options: the conversion options (``config.read_at_conversion()``).
    name, control_outputs: the graph's name; nodes run for their effect.
    problems: what the entry point found that keeps the graph from converting.
    input_specs: the inputs' specs as the entry point knows them (None where it
      found a problem); by default the fed Placeholders' dtypes and shapes.
    params, param_values, captured: the params' specs and known values, and the
      captured constants, for the narrowing check (variables the graph creates
      itself, as TF1 graphs do, are checked from their nodes).
    export_table: ``export(node) -> (keys, values)`` or None: the current contents of
      a table the graph creates (a Session's); else its initializer in the graph.
  """
  problems = list(problems)
  library = graph_lib.Library(graph_def.library.function)
  graph = graph_lib.from_graph_def(
    graph_def, inputs, outputs, name=name, control_outputs=control_outputs
  )
  missing = [n for n in graph.inputs if n not in graph.by_name]
  if missing:
    raise errors.ConversionError(
      "; ".join(f"input {n!r} is not a node of the graph" for n in missing)
    )
  if input_specs is None:
    input_specs = [_placeholder_spec(graph.by_name[n]) for n in graph.inputs]
    problems += [
      f"input {s.name!r} is not a numeric tensor" for s in input_specs if s.dtype is None
    ]
  graph = control_flow_v1.functionalize(graph, library)
  _functionalize_functions(graph, library)
  graph, tables = lookup_graph.resolve(
    graph,
    graph_def,
    library,
    problems=problems,
    export=export_table,
    taken=frozenset(s.name for s in params),
  )
  unfed = [
    n.name
    for n in graph.nodes
    if core.declares(n.op, "graph_input") and n.name not in graph.inputs and n.name in graph.needed
  ]
  if unfed:
    raise errors.InputStructureError(
      f"the outputs depend on Placeholders that are not listed as inputs: {unfed}"
    )
  interpreter.check_supported(graph, library, problems)
  prepared = Prepared(graph, library, tuple(input_specs), tables)
  _check_narrowing(
    options,
    graph,
    library,
    [s for s in input_specs if s is not None],
    list(params) + prepared.table_specs(),
    {**(param_values or {}), **tables},
    captured or {},
  )
  if options["infer_relu_from_jax2tf"]:
    jax2tf_patterns.infer_relu([graph, *library.reachable(graph).values()])
  for static_sizes in (ragged_patterns.static_segment_ids, sparse_patterns.static_fills):
    graph = static_sizes(graph)
    for fname, g in library.reachable(graph).items():
      rewritten = static_sizes(g)
      if rewritten is not g:
        library.replace_graph(fname, rewritten)
  return dataclasses.replace(prepared, graph=graph)


def _functionalize_functions(graph, library) -> None:
  """TF1 control flow inside library functions (a TF1 SavedModel's signature called
  from a tf.function) rebuilt in each function's body, as in the graph's."""
  done: set = set()
  while True:
    todo = [
      (name, g)
      for name, g in library.reachable(graph).items()
      if name not in done and control_flow_v1.has_v1_control_flow(g)
    ]
    if not todo:
      return
    for name, g in todo:
      library.replace_graph(name, control_flow_v1.functionalize(g, library))
      done.add(name)


def _placeholder_spec(node: graph_lib.Node) -> TensorSpec:
  """A fed node's spec from its attrs; dtype None when it has no JAX equivalent."""
  dtype = node.attr("dtype", None)
  dtype = node.attr("T", None) if dtype is None else dtype
  return TensorSpec(
    node.name, node.attr("shape", None), dtype if isinstance(dtype, np.dtype) else None
  )


def _check_narrowing(options, graph, library, inputs, params, param_values, captured) -> None:
  """With x64 off, names the 64-bit values JAX will compute in 32 bits where that may
  change them: float64/complex128 and int64 inputs (values unknown), params and
  constants whose values do not survive the narrowing (values known: a seed state
  that fits in 32 bits is not named): a PrecisionWarning, a PrecisionError or
  nothing, as the ``x64_narrowing`` option says."""
  mode = options["x64_narrowing"]
  if mode == "ignore" or dtypes.x64_enabled():
    return

  def named(pairs):
    return [
      f"{name} ({np.dtype(dtype).name})"
      for name, dtype, value in pairs
      if _is_wide(dtype, _WIDE) and (value is None or _changes(value))
    ]

  graph_params = [
    (n.name, n.attr("dtype", None), None)
    for n in graph.nodes
    if n.name in graph.needed and core.declares(n.op, "creates_variable")
  ]
  consts = [(k, v.dtype, v) for k, v in captured.items()]
  for fname, g in [("", graph)] + sorted(library.reachable(graph).items()):
    consts += [
      (f"{fname}/{n.name}" if fname else n.name, n.attr("dtype", None), n.attr("value", None))
      for n in g.nodes
      if n.op == "Const"
    ]
  found = {
    kind: names
    for kind, names in (
      ("inputs", named((s.name, s.dtype, None) for s in inputs)),
      (
        "params",
        named([(s.name, s.dtype, param_values.get(s.name)) for s in params] + graph_params),
      ),
      (
        "constants",
        [n.split(" (")[0] for n in named(c for c in consts if _is_wide(c[1], _WIDE_FLOATS))],
      ),
    )
    if names
  }
  if not found:
    return
  listed = "; ".join(
    f"{kind}: " + ", ".join(names[:6]) + (f" and {len(names) - 6} more" if len(names) > 6 else "")
    for kind, names in found.items()
  )
  message = (
    f"jax_enable_x64 is off, so JAX computes these 64-bit values in 32 bits and "
    f"results may differ from TF's: {listed}. Enable it before converting "
    "(jax.config.update('jax_enable_x64', True)) to get TF's results, or set "
    "tfprims.update_config('x64_narrowing', 'ignore')."
  )
  if mode == "error":
    raise errors.PrecisionError(message)
  warnings.warn(errors.PrecisionWarning(message), stacklevel=5)


def _changes(value) -> bool:
  """Whether a known 64-bit value changes in 32 bits."""
  v = np.asarray(value)
  if v.size == 0:
    return False
  if v.dtype.kind in "iu":
    info = np.iinfo(np.int32 if v.dtype.kind == "i" else np.uint32)
    return bool(v.min() < info.min or v.max() > info.max)
  narrow = np.complex64 if v.dtype.kind == "c" else np.float32
  with np.errstate(over="ignore"):
    return not np.array_equal(v.astype(narrow).astype(v.dtype), v, equal_nan=True)


def _is_wide(dtype, wide) -> bool:
  # Decoded dtype attrs are np.dtypes, or TF's name where numpy has none (resource...).
  return isinstance(dtype, np.dtype) and dtype in wide
