"""What a graph asks of tfprims, found before converting it (``tfprims ops SRC``).

:func:`report_graph_def` reads a GraphDef (a frozen graph, a SavedModel
signature's graph, a tf.function's graph) and its function library and says,
per op type: how many nodes use it and where, whether tfprims converts it, whether
its output shape depends on data, and which dtypes it is used with that a JAX
primitive cannot take (strings, quantized types). Nothing is traced and no
variable is read, so it answers in a fraction of a conversion's time, for models
that do not convert as well as for those that do.
"""

from __future__ import annotations

import collections
import dataclasses
import os
from typing import Any, Optional, Sequence

from tfprims import core
from tfprims import graph as graph_lib
from tfprims.errors import import_tensorflow

SUPPORTED, DATA_DEPENDENT, UNSUPPORTED = "supported", "data-dependent", "unsupported"


@dataclasses.dataclass
class OpUsage:
  """One op type as a graph uses it."""

  op_type: str
  status: str  # SUPPORTED, DATA_DEPENDENT or UNSUPPORTED
  nodes: list[str] = dataclasses.field(default_factory=list)  # "node" or "function/node"
  dtypes: set[str] = dataclasses.field(default_factory=set)  # of its type attrs
  problems: list[str] = dataclasses.field(default_factory=list)
  why: str = ""  # why data-dependent, or the declared hint of an unsupported op

  @property
  def count(self) -> int:
    return len(self.nodes)

  def as_json(self) -> dict[str, Any]:
    return {
      "op": self.op_type,
      "status": self.status,
      "count": self.count,
      "nodes": self.nodes,
      "dtypes": sorted(self.dtypes),
      "problems": self.problems,
      "why": self.why,
    }


@dataclasses.dataclass
class OpsReport:
  """Op types of a graph and of every library function it reaches."""

  source: str
  functions: dict[str, collections.Counter]  # "" is the graph itself
  ops: dict[str, OpUsage]

  def by_status(self, status: str) -> list[OpUsage]:
    return [u for u in self.ops.values() if u.status == status]

  @property
  def convertible(self) -> bool:
    """No unsupported op and no dtype a primitive cannot take. (Data-dependent ops
    still convert when their inputs are known at trace time, or are bounded.)"""
    return not self.by_status(UNSUPPORTED) and not any(u.problems for u in self.ops.values())

  def as_json(self) -> dict[str, Any]:
    return {
      "source": self.source,
      "convertible": self.convertible,
      "functions": {
        name or "<graph>": dict(sorted(c.items())) for name, c in self.functions.items()
      },
      "ops": [u.as_json() for u in self.ops.values()],
    }

  def format(self, max_nodes: int = 5) -> str:
    lines = [
      f"{self.source}: {sum(u.count for u in self.ops.values())} nodes of "
      f"{len(self.ops)} op types in the graph and {len(self.functions) - 1} "
      "library functions"
    ]
    for status in (UNSUPPORTED, DATA_DEPENDENT, SUPPORTED):
      usages = self.by_status(status)
      if not usages:
        continue
      lines.append(f"\n{status} ({len(usages)}):")
      for u in usages:
        dtypes = f"  [{', '.join(sorted(u.dtypes))}]" if u.dtypes else ""
        lines.append(f"  {u.op_type:<32} x{u.count}{dtypes}")
        if status != SUPPORTED or u.problems:
          shown = ", ".join(u.nodes[:max_nodes])
          more = f" (+{u.count - max_nodes} more)" if u.count > max_nodes else ""
          lines.append(f"      nodes: {shown}{more}")
        if u.why:
          lines.append(f"      {u.why}")
        lines.extend(f"      problem: {p}" for p in u.problems)
    lines.append(
      "\nper function: "
      + "; ".join(
        f"{name or '<graph>'}: {sum(c.values())} nodes" for name, c in self.functions.items()
      )
    )
    verdict = (
      "converts" if self.convertible else "does not convert: see unsupported ops and problems above"
    )
    lines.append(f"\nverdict: {verdict}")
    return "\n".join(lines)


def _dtype_names(node: graph_lib.Node) -> set[str]:
  tf = import_tensorflow()
  names = set()
  for proto in node.attr_protos.values():
    kind = proto.WhichOneof("value")
    if kind == "type":
      names.add(tf.dtypes.as_dtype(proto.type).name)
    elif kind == "list" and proto.list.type:
      names.update(tf.dtypes.as_dtype(t).name for t in proto.list.type)
  return names


def _usage(op_type: str, node=None) -> OpUsage:
  op = core.lookup(op_type)
  if op is None:
    return OpUsage(op_type, UNSUPPORTED, why=core.unsupported_hint(op_type) or "")
  if op.dynamic_shape and not (
    op.static_shape_if and node is not None and op.static_shape_if(node)
  ):
    return OpUsage(op_type, DATA_DEPENDENT, why=f"data-dependent output shape: {op.dynamic_shape}")
  return OpUsage(op_type, SUPPORTED)


def report(graph: graph_lib.Graph, library: graph_lib.Library, source: str) -> OpsReport:
  """The report of ``graph`` (its nodes the outputs need) and the library functions
  they reach."""
  top = dataclasses.replace(graph, nodes=[n for n in graph.nodes if n.name in graph.needed])
  functions: dict[str, collections.Counter] = {}
  ops: dict[str, OpUsage] = {}
  for fname, g in [("", top)] + sorted(library.reachable(top).items()):
    functions[fname] = collections.Counter(n.op for n in g.nodes)
    for node in g.nodes:
      if core.lookup(node.op) is None and node.op in library:
        continue  # a call of a library function: counted under its function
      usage = ops.get(node.op) or ops.setdefault(node.op, _usage(node.op, node))
      if usage.status == SUPPORTED and core.declares(node.op, "dynamic_shape"):
        this = _usage(node.op, node)  # a dynamic-shape node that is not static after all
        usage.status, usage.why = this.status, this.why
      # a hook may refuse some nodes of its op type by their attrs (AsString of floats)
      refuses = getattr(getattr(core.lookup(node.op), "interpret", None), "refuses", None)
      why = refuses(node) if refuses is not None else None
      if why and usage.status == SUPPORTED:
        usage.status, usage.why = UNSUPPORTED, why
      usage.nodes.append(f"{fname}/{node.name}" if fname else node.name)
      names = _dtype_names(node)
      usage.dtypes |= names
      # No JAX array holds strings or quantized values, so no primitive takes them
      # (structural ops run on trace-time values: string Consts of Assert messages,
      # tf.print's formats).
      op = core.lookup(node.op)
      bad = sorted(
        d
        for d in names
        if d.startswith(("qint", "quint"))
        or (d == "string" and op is not None and (isinstance(op, core.TFOp) or op.graph_input))
      )
      if bad and usage.status == SUPPORTED:
        usage.problems.append(
          f"node '{usage.nodes[-1]}' uses {', '.join(bad)}: no JAX array holds this dtype"
        )
  order = {UNSUPPORTED: 0, DATA_DEPENDENT: 1, SUPPORTED: 2}
  ops = dict(sorted(ops.items(), key=lambda kv: (order[kv[1].status], kv[0])))
  return OpsReport(source, functions, ops)


def report_graph_def(
  graph_def, outputs: Optional[Sequence[str]] = None, source: str = "graph"
) -> OpsReport:
  """The report of a GraphDef; with ``outputs`` (tensor or node names) only the
  nodes they need count, otherwise every node does."""
  library = graph_lib.Library(graph_def.library.function)
  if outputs is None:
    g = graph_lib.from_graph_def(graph_def, [], [])
    g = dataclasses.replace(g, control_outputs=[n.name for n in g.nodes])
  else:
    g = graph_lib.from_graph_def(graph_def, [], outputs)
  return report(g, library, source)


def report_saved_model(path: str, signature: str = "serving_default") -> OpsReport:
  """The report of one signature of a SavedModel, read from its saved_model.pb
  (no variables are loaded, no function is traced)."""
  from tensorflow.core.protobuf import saved_model_pb2

  from tfprims import errors

  pb = os.path.join(path, "saved_model.pb")
  if not os.path.exists(pb):
    raise errors.ConversionError(f"{path!r} is not a SavedModel directory (no saved_model.pb)")
  model = saved_model_pb2.SavedModel()
  with open(pb, "rb") as f:
    model.ParseFromString(f.read())
  for meta in model.meta_graphs:
    if signature in meta.signature_def:
      sig = meta.signature_def[signature]
      outputs = [t.name for t in sig.outputs.values()]
      return report_graph_def(meta.graph_def, outputs, source=f"{path} (signature {signature!r})")
  known = sorted(k for m in model.meta_graphs for k in m.signature_def)
  raise errors.ConversionError(
    f"SavedModel {path!r} has no signature {signature!r}; its signatures: {known}"
  )


def report_concrete_function(cf, source: str = "function") -> OpsReport:
  """The report of a ``tf.function``'s concrete function."""
  return report_graph_def(cf.graph.as_graph_def(), [t.name for t in cf.outputs], source)


def report_path(
  path: str, signature: str = "serving_default", outputs: Optional[Sequence[str]] = None
) -> OpsReport:
  """The report of a SavedModel directory (one signature) or a frozen-graph file."""
  from tfprims import errors

  if os.path.isdir(path):
    return report_saved_model(path, signature)
  if not os.path.isfile(path):
    raise errors.ConversionError(f"{path!r} does not exist")
  try:
    graph_def = read_graph_def(path)
  except Exception as e:  # protobuf raises several kinds
    raise errors.ConversionError(f"{path!r} is not a GraphDef file: {e}") from None
  return report_graph_def(graph_def, outputs, source=path)


def read_graph_def(path: str):
  """A GraphDef from a frozen-graph file: binary (.pb) or text (.pbtxt)."""
  tf = import_tensorflow()
  from google.protobuf import text_format

  graph_def = tf.compat.v1.GraphDef()
  with open(path, "rb") as f:
    data = f.read()
  if path.endswith((".pbtxt", ".txt")):
    text_format.Parse(data.decode(), graph_def)
  else:
    graph_def.ParseFromString(data)
  return graph_def


# --- what tfprims converts (``tfprims ops --supported``) -------------------------------


def supported_ops() -> list[dict[str, Any]]:
  """Every op type tfprims converts (the registry, ops registered by the user
  included), sorted: op, family, kind ("primitive": a JAX primitive ``tf.<Op>``;
  "structural": the interpreter runs it), data-dependent shape or not, and its doc."""
  rows = []
  for op_type in sorted(core.declared_op_types()):
    op = core.lookup(op_type)
    rows.append(
      {
        "op": op_type,
        "family": op.family,
        "kind": "primitive" if isinstance(op, core.TFOp) else "structural",
        "data_dependent": bool(op.dynamic_shape),
        "doc": op.doc or "",
      }
    )
  return rows


def format_supported(rows: list[dict[str, Any]]) -> str:
  """The table of :func:`supported_ops`, one op a line, and the count per family."""
  width = max([len(r["op"]) for r in rows] + [7])
  fam = max([len(r["family"]) for r in rows] + [6])
  n_prim = sum(r["kind"] == "primitive" for r in rows)
  lines = [
    (
      f"tfprims converts {len(rows)} op types ({n_prim} as JAX primitives tf.<Op>, "
      f"{len(rows) - n_prim} run by the interpreter):"
    ),
    f"  {'op type':<{width}}  {'family':<{fam}}  kind",
  ]
  for r in rows:
    flag = ", data-dependent shape" if r["data_dependent"] else ""
    lines.append(f"  {r['op']:<{width}}  {r['family']:<{fam}}  {r['kind']}{flag}")
  families = collections.Counter(r["family"] for r in rows)
  lines.append("\nper family: " + ", ".join(f"{f} {n}" for f, n in sorted(families.items())))
  return "\n".join(lines)
