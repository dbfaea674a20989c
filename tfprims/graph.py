"""A normalized view of TF graphs: GraphDefs and FunctionDefs as one node list.

Both kinds of graph become a :class:`Graph` whose node inputs are
``(node_name, output_index)`` pairs, topologically sorted, with attrs decoded on
demand from the op defs.
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Any, Iterable, Mapping, Optional, Sequence

from tfprims import errors, opdefs

Ref = tuple[str, int]

_MISSING = object()


class Node:
  """One TF node: ``name``, ``op``, data ``inputs`` (refs), ``control_inputs`` and attrs
  (``attr_protos``: the AttrValue protos as in the GraphDef; ``attr(name)`` decodes one)."""

  __slots__ = ("name", "op", "inputs", "control_inputs", "attr_protos", "_decoded", "device")

  def __init__(
    self,
    name: str,
    op: str,
    inputs: Sequence[Ref],
    control_inputs: Sequence[str],
    attr_protos: Mapping[str, Any],
    device: str = "",
  ):
    self.name, self.op = name, op
    self.inputs, self.control_inputs = list(inputs), list(control_inputs)
    self.attr_protos = attr_protos
    self._decoded: dict[str, Any] = {}
    self.device = device

  def attr(self, name: str, default: Any = _MISSING) -> Any:
    """The decoded attr (op-def default when absent from the node)."""
    if name not in self._decoded:
      if name in self.attr_protos:
        self._decoded[name] = opdefs.decode_attr(self.attr_protos[name])
      else:
        try:
          self._decoded[name] = opdefs.attr_default(self.op, name)
        except KeyError:
          if default is _MISSING:
            raise errors.OpError(self.op, self.name, f"has no attr {name!r}") from None
          return default
    return self._decoded[name]

  def rewired(self, inputs: Sequence[Ref], control_inputs: Sequence[str] = ()) -> "Node":
    """The same node (op, attrs, device) reading other inputs."""
    return Node(self.name, self.op, inputs, control_inputs, self.attr_protos, self.device)

  @property
  def attrs(self) -> dict[str, Any]:
    """All attrs present on the node, decoded."""
    return {k: self.attr(k) for k in self.attr_protos}

  def __repr__(self):
    return f"<Node {self.name} ({self.op})>"


def new_node(name: str, op: str, inputs: Sequence[Ref] = (), **attrs: Any) -> Node:
  """A node a graph rewrite adds (attrs as Python/numpy values, see
  :func:`tfprims.opdefs.encode_attr`; a ``Const`` needs ``value`` and ``dtype``)."""
  protos = {k: opdefs.encode_attr(v) for k, v in attrs.items()}
  return Node(name, op, [tuple(i) for i in inputs], [], protos)


@dataclasses.dataclass
class Graph:
  """A TF graph or function body as a topologically sorted node list.

  ``inputs`` name the nodes (Placeholders, or function args) fed by the caller;
  ``outputs`` are refs; ``control_outputs`` name nodes that must run (stateful
  ops a function declares as control returns).
  """

  name: str
  nodes: list[Node]
  inputs: list[str]
  outputs: list[Ref]
  output_names: list[str] = dataclasses.field(default_factory=list)
  control_outputs: list[str] = dataclasses.field(default_factory=list)

  @functools.cached_property
  def by_name(self) -> dict[str, Node]:
    return {n.name: n for n in self.nodes}

  @functools.cached_property
  def needed(self) -> frozenset:
    """Names of the nodes the outputs and control outputs depend on."""
    by_name = self.by_name
    needed: set[str] = set()
    stack = [r[0] for r in self.outputs] + list(self.control_outputs)
    while stack:
      name = stack.pop()
      if name in needed or name not in by_name:
        continue
      needed.add(name)
      node = by_name[name]
      stack.extend(r[0] for r in node.inputs)
      stack.extend(node.control_inputs)
    return frozenset(needed)

  @functools.cached_property
  def schedule(self) -> list[tuple[Node, tuple[str, ...]]]:
    """The needed nodes in order, each with the values to drop once it has run
    (those it reads last and that are not outputs), so that evaluating the graph
    holds only live intermediates."""
    order = [n for n in self.nodes if n.name in self.needed]
    last_reader: dict[str, int] = {}
    for i, node in enumerate(order):
      for name, _ in node.inputs:
        last_reader[name] = i
    keep = {name for name, _ in self.outputs}
    drops: list[list[str]] = [[] for _ in order]
    for name, i in last_reader.items():
      if name not in keep:
        drops[i].append(name)
    return [(node, tuple(d)) for node, d in zip(order, drops)]


def parse_ref(ref: str) -> tuple[str, int]:
  name, _, idx = ref.partition(":")
  return name, int(idx) if idx else 0


def _toposort(nodes: list[Node], graph_name: str) -> list[Node]:
  by_name = {n.name: n for n in nodes}
  order, state = [], {}
  for root in nodes:
    if root.name in state:
      continue
    stack = [(root, False)]
    while stack:
      node, expanded = stack.pop()
      if expanded:
        state[node.name] = 2
        order.append(node)
        continue
      if state.get(node.name) == 2:
        continue
      if state.get(node.name) == 1:
        continue
      state[node.name] = 1
      stack.append((node, True))
      for dep in [r[0] for r in node.inputs] + node.control_inputs:
        dep_node = by_name.get(dep)
        if (
          dep_node is not None
          and dep_node.op.endswith("NextIteration")
          and node.op.endswith("Merge")
        ):
          # A TF1 while loop's back edge: the Merge comes first, its NextIteration
          # after the body (tfprims.ops.control_flow.v1 turns the loop into a While).
          continue
        if dep_node is not None and state.get(dep) is None:
          stack.append((dep_node, False))
        elif dep_node is not None and state.get(dep) == 1:
          raise errors.ConversionError(
            f"graph {graph_name!r} has a cycle through node {dep!r} that is not a TF1 "
            "while loop's NextIteration -> Merge edge"
          )
  return order


toposort = _toposort


def from_graph_def(
  graph_def,
  inputs: Sequence[str],
  outputs: Sequence[str],
  name: str = "graph",
  control_outputs: Sequence[str] = (),
) -> Graph:
  """A :class:`Graph` from a GraphDef; ``inputs``/``outputs`` are tensor names."""
  nodes = []
  for nd in graph_def.node:
    data, control = [], []
    for ref in nd.input:
      if ref.startswith("^"):
        control.append(ref[1:])
      else:
        data.append(parse_ref(ref))
    nodes.append(Node(nd.name, nd.op, data, control, nd.attr, nd.device))
  return Graph(
    name=name,
    nodes=_toposort(nodes, name),
    inputs=[parse_ref(i)[0] for i in inputs],
    outputs=[parse_ref(o) for o in outputs],
    output_names=list(outputs),
    control_outputs=list(control_outputs),
  )


def from_function_def(fdef, function_defs: Optional[Mapping[str, Any]] = None) -> Graph:
  """A :class:`Graph` from a FunctionDef (refs ``node:out_arg:i`` made flat);
  ``function_defs`` (the library, by name) gives the outputs of direct calls of
  library functions (Defun-style calls: ``callee:ret_name:0``)."""
  raw = {nd.name: nd for nd in fdef.node_def}
  arg_names = [a.name for a in fdef.signature.input_arg]
  offsets_cache: dict[str, dict[str, int]] = {}

  def resolve(ref: str) -> Ref:
    parts = ref.split(":")
    if len(parts) == 1:
      return parts[0], 0
    if len(parts) == 2:  # only function args are referenced as "arg:i"
      return parts[0], int(parts[1])
    node_name, out_arg, idx = parts
    if node_name not in raw:  # check_supported reports the dangling reference
      return node_name, int(idx)
    if node_name not in offsets_cache:
      nd = raw[node_name]
      attrs = {
        k: opdefs.decode_attr(v) for k, v in nd.attr.items() if k in _arity_attr_names(nd.op)
      }
      offsets = opdefs.output_offsets(nd.op, attrs)
      if not offsets and nd.op in (function_defs or {}):
        # a call of a library function: its outputs are the callee's output args
        offsets = {a.name: i for i, a in enumerate(function_defs[nd.op].signature.output_arg)}
      offsets_cache[node_name] = offsets
    return node_name, offsets_cache[node_name].get(out_arg, 0) + int(idx)

  nodes = []
  for nd in fdef.node_def:
    data, control = [], []
    for ref in nd.input:
      if ref.startswith("^"):
        control.append(ref[1:])
      else:
        data.append(resolve(ref))
    nodes.append(Node(nd.name, nd.op, data, control, nd.attr, nd.device))
  outputs = [resolve(fdef.ret[a.name]) for a in fdef.signature.output_arg]
  control_outputs = [
    fdef.control_ret[k] for k in fdef.signature.control_output if k in fdef.control_ret
  ]
  return Graph(
    name=fdef.signature.name,
    nodes=_toposort(nodes, fdef.signature.name),
    inputs=arg_names,
    outputs=outputs,
    output_names=[a.name for a in fdef.signature.output_arg],
    control_outputs=control_outputs,
  )


@functools.lru_cache(maxsize=None)
def _arity_attr_names(op_type: str) -> frozenset:
  od = opdefs.op_def(op_type)
  if od is None:
    return frozenset()
  return frozenset(
    a.number_attr or a.type_list_attr for a in od.output_arg if a.number_attr or a.type_list_attr
  )


def func_attrs(node: Node) -> list[str]:
  """Names of the library functions a node refers to (via func or list(func) attrs)."""
  names = []
  for proto in node.attr_protos.values():
    # Raw protos: decoding every attr of every node just to find functions is slow.
    kind = proto.WhichOneof("value")
    if kind == "func":
      names.append(proto.func.name)
    elif kind == "list" and proto.list.func:
      names.extend(f.name for f in proto.list.func)
  return names


class Library:
  """The function library of a graph, with functions parsed on first use."""

  def __init__(self, function_defs: Iterable[Any]):
    self._fdefs = {f.signature.name: f for f in function_defs}
    self._graphs: dict[str, Graph] = {}

  def __contains__(self, name: str) -> bool:
    return name in self._fdefs

  def add_graph(self, name: str, graph: "Graph") -> None:
    """Adds a function given as a :class:`Graph` (the bodies tfprims builds when it
    turns TF1 control flow into If/While nodes)."""
    if name in self._fdefs:
      raise errors.ConversionError(f"function {name!r} is already in the library")
    self._fdefs[name] = None
    self._graphs[name] = graph

  def replace_graph(self, name: str, graph: "Graph") -> None:
    """Replaces a function's body by a rewritten one (its TF1 control flow rebuilt)."""
    self.graph(name)  # raises for a function the library lacks
    self._graphs[name] = graph

  def function_def(self, name: str):
    return self._fdefs[name]

  def graph(self, name: str) -> Graph:
    if name not in self._graphs:
      if name not in self._fdefs:
        raise errors.ConversionError(f"function {name!r} is not in the graph's library")
      self._graphs[name] = from_function_def(self._fdefs[name], self._fdefs)
    return self._graphs[name]

  def reachable(self, graph: Graph) -> dict[str, Graph]:
    """Every library function reachable from ``graph`` (nested calls included)."""
    seen: dict[str, Graph] = {}
    stack = [graph]
    while stack:
      g = stack.pop()
      for node in g.nodes:
        names = func_attrs(node)
        if node.op in self._fdefs:  # a direct call of a library function
          names.append(node.op)
        for fname in names:
          if fname not in seen and fname in self._fdefs:
            seen[fname] = self.graph(fname)
            stack.append(seen[fname])
    return seen
