"""What the control-flow ops share: analysis of the functions they run, the call
state saved and restored around traced branches and bodies, and joining the values
two paths produce."""

from __future__ import annotations

import dataclasses
from typing import Any, Optional, Sequence

import jax
import jax.numpy as jnp
import numpy as np

from tfprims import core, errors, graph as graph_lib, rules
from tfprims.interpreter import StringConstant, VariableHandle
from tfprims.ops.control_flow.optional import OptionalValue
from tfprims.ops.tensorlist import TensorList

IMPURE = -1  # value_deps of a node whose value is not a function of the graph inputs


def cache_of(graph: graph_lib.Graph) -> dict:
  """Per-graph memo of the analyses below (graphs are immutable once built)."""
  return graph.__dict__.setdefault("_control_flow_cache", {})


def reachable_ops(library: graph_lib.Library, fnames: Sequence[str]) -> frozenset:
  """The op types of the functions ``fnames`` and of every function they call."""
  ops: set[str] = set()
  for fname in fnames:
    g = library.graph(fname)
    cache = cache_of(g)
    if "ops" not in cache:
      found = {n.op for n in g.nodes}
      for sub in library.reachable(g).values():
        found |= {n.op for n in sub.nodes}
      cache["ops"] = frozenset(found)
    ops |= cache["ops"]
  return frozenset(ops)


def state_keys(ctx, fnames, inputs) -> list[str]:
  """Variables a body/branch may assign: the handles it receives, if any op it runs
  (nested calls included) declares ``writes_state``."""
  if not any(core.declares(op, "writes_state") for op in reachable_ops(ctx.library, fnames)):
    return []
  keys = []
  for v in inputs:
    if isinstance(v, VariableHandle) and v.key not in keys and v.key in ctx.state:
      keys.append(v.key)
  return keys


def uses_rng(ctx, fnames) -> bool:
  """Whether the functions draw from the call's rng (an op declares ``uses_rng``)."""
  return ctx.rng is not None and any(
    core.declares(op, "uses_rng") for op in reachable_ops(ctx.library, fnames)
  )


def as_jax(v):
  """A branch/loop output as a JAX-compatible pytree leaf (or TensorList/Optional)."""
  if isinstance(v, (TensorList, OptionalValue)):
    return v
  if isinstance(v, (np.ndarray, np.generic)):
    return jnp.asarray(v)
  return v


def truth(node, value) -> Any:
  """TF's predicate truth value: a Python bool when decidable at trace time,
  else a traced scalar bool."""
  shape = np.shape(value)
  if shape != ():
    return bool(int(np.prod(shape)) > 0)  # non-scalar: non-empty means True
  if core.is_concrete(value):
    return bool(np.asarray(value))
  if isinstance(value, (VariableHandle, StringConstant, TensorList)):
    raise errors.OpError(node.op, node.name, "predicate is not a numeric tensor")
  value = jnp.asarray(value)
  return value if value.dtype == jnp.bool_ else value != 0


@dataclasses.dataclass
class Saved:
  state: dict
  rng: Any


def save(ctx) -> Saved:
  return Saved(dict(ctx.state), ctx.rng)


def restore(ctx, saved: Saved) -> None:
  ctx.state.clear()
  ctx.state.update(saved.state)
  ctx.rng = saved.rng


def structure_mismatch(a, b) -> Optional[str]:
  """Why two carries (lists of values) differ in a way lax control flow rejects."""
  sa, sb = jax.tree_util.tree_structure(a), jax.tree_util.tree_structure(b)
  if sa != sb:
    return f"structure {sb} differs from {sa}"
  for x, y in zip(jax.tree_util.tree_leaves(a), jax.tree_util.tree_leaves(b)):
    if np.shape(x) != np.shape(y) or jnp.result_type(x) != jnp.result_type(y):
      return (
        f"a value changes from {jnp.result_type(x)}{list(np.shape(x))} to "
        f"{jnp.result_type(y)}{list(np.shape(y))}"
      )
  return None


def join_lists(a, b, node):
  """Value ``a`` made structurally equal to ``b`` where possible (a TensorList
  without items gets zeros shaped like the other's; an empty Optional gets zeros)."""
  if isinstance(a, TensorList) and isinstance(b, TensorList):
    if a.length != b.length:
      raise errors.ControlFlowError(
        f"{node.op} node '{node.name}': a TensorList has {a.length} elements on one "
        f"path and {b.length} on another; list lengths must be known at trace time"
      )
    if a.items is None and b.items is not None:
      shape = np.shape(b.items)
      a = TensorList(
        rules.numpy_for(shape).zeros(shape, b.element_dtype), a.length, a.element_dtype, None
      )
    return a
  if isinstance(a, OptionalValue) and isinstance(b, OptionalValue):
    if a.values is None and b.values is not None:
      return OptionalValue(
        np.asarray(False),
        jax.tree_util.tree_map(
          lambda l: rules.numpy_for(np.shape(l)).zeros(np.shape(l), l.dtype), tuple(b.values)
        ),
      )
    if a.values is not None and b.values is not None:
      return OptionalValue(
        a.has_value, tuple(join_lists(x, y, node) for x, y in zip(a.values, b.values))
      )
  return a


def coerce(values, like, node):
  """``values`` cast to the structure/dtypes of ``like`` (materializing lists)."""
  out = []
  for v, l in zip(values, like):
    if isinstance(l, TensorList):
      if isinstance(v, TensorList):
        v = join_lists(v, l, node)
        if (
          v.items is not None and l.items is not None and jnp.result_type(v.items) != l.items.dtype
        ):
          v = TensorList(
            jnp.asarray(v.items).astype(l.items.dtype), v.length, v.element_dtype, None
          )
    elif isinstance(l, OptionalValue):
      if isinstance(v, OptionalValue):
        v = join_lists(v, l, node)
    elif (
      v is not None
      and l is not None
      and hasattr(l, "dtype")
      and not isinstance(v, (TensorList, OptionalValue))
      and jnp.result_type(v) != l.dtype
    ):
      v = jnp.asarray(v).astype(l.dtype)
    out.append(v)
  return out


# --- analysis of function graphs ---------------------------------------------------------


def resolve_identity(graph: graph_lib.Graph, ref):
  """Follows chains of pass-through ops (Identity...) back from a ref."""
  by_name = graph.by_name
  while ref[0] in by_name and core.declares(by_name[ref[0]].op, "pass_through"):
    node = by_name[ref[0]]
    if ref[1] >= len(node.inputs):
      break
    ref = node.inputs[ref[1]]
  return ref


def value_deps(graph: graph_lib.Graph) -> dict:
  """For each node: the graph inputs (indices) its value depends on, or IMPURE."""
  cache = cache_of(graph)
  if "deps" in cache:
    return cache["deps"]
  index = {name: i for i, name in enumerate(graph.inputs)}
  deps: dict[str, Any] = {}

  def of(ref):
    name = ref[0]
    if name in index:
      return frozenset({index[name]})
    return deps.get(name, IMPURE)

  for node in graph.nodes:
    if node.name in index:
      continue
    op = core.lookup(node.op)
    if op is not None and op.shape_only:
      deps[node.name] = frozenset()
      continue
    if not core.is_pure(node.op):
      deps[node.name] = IMPURE
      continue
    acc: set = set()
    for ref in node.inputs:
      d = of(ref)
      if d is IMPURE:
        acc = None
        break
      acc |= d
    deps[node.name] = IMPURE if acc is None else frozenset(acc)
  cache["deps"] = deps
  return deps


def ref_deps(graph, ref):
  index = {name: i for i, name in enumerate(graph.inputs)}
  if ref[0] in index:
    return frozenset({index[ref[0]]})
  return value_deps(graph).get(ref[0], IMPURE)


def conjuncts(graph: graph_lib.Graph) -> list:
  """The cond function's output split at LogicalAnd (refs)."""
  out, stack = [], [resolve_identity(graph, graph.outputs[0])]
  by_name = graph.by_name
  while stack:
    ref = stack.pop()
    node = by_name.get(ref[0])
    if node is not None and node.op == "LogicalAnd":
      stack.extend(resolve_identity(graph, r) for r in node.inputs)
    else:
      out.append(ref)
  return out


def value_subgraph(graph: graph_lib.Graph, outputs: Sequence) -> graph_lib.Graph:
  """``graph`` restricted to what ``outputs`` compute, without control dependencies."""
  key = ("sub", tuple(outputs))
  cache = cache_of(graph)
  if key not in cache:
    nodes = [n.rewired(n.inputs) for n in graph.nodes]
    cache[key] = graph_lib.Graph(
      name=graph.name, nodes=nodes, inputs=list(graph.inputs), outputs=list(outputs)
    )
  return cache[key]
