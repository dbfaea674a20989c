"""TF's side of a comparison: one graph node at a time, on TF's own eager kernels.

TF cannot fetch a value computed inside a function call or a loop body of a graph
it runs, so the comparison walks the graph itself (:mod:`tfprims.comparison.walk`)
and asks TF to run each node that is not a call or control flow, with the node's
own attrs, as ``tf.raw_ops`` would: the same kernels the property tests compare each
op with. (Grappler's fusions of a whole-graph call are not applied: a fused graph's
outputs may differ from these by rounding.)
"""

from __future__ import annotations

import functools
from typing import Any, Mapping, Optional

import numpy as np

from tfprims import core, dtypes, opdefs
from tfprims.errors import import_tensorflow


class TFNodeError(Exception):
  """TF could not run one node eagerly (the comparison records why and goes on)."""


class TFEager:
  """Runs graph nodes with TF's eager kernels.

  Args:
    graph_variables: TF's value for each variable the graph creates itself (by node
      name): a resource handle for ``VarHandleOp``, the value for ``VariableV2``.
  """

  def __init__(self, graph_variables: Mapping[str, Any]):
    tf = import_tensorflow()
    from tensorflow.python.eager import context, execute  # the eager op dispatch

    self._tf, self._context, self._execute = tf, context, execute
    self._graph_variables = graph_variables
    self._constants: dict[int, Any] = {}

  def run(self, node, inputs: list) -> list:
    """TF's outputs of ``node`` on ``inputs`` (eager tensors); raises TFNodeError."""
    if node.op == "Const":
      return [self._constant(node)]
    if core.declares(node.op, "creates_variable"):
      return [self._graph_variable(node)]
    if any(value is None for value in inputs):
      raise TFNodeError("an input TF could not compute")
    od = opdefs.op_def(node.op)
    if od is None:
      raise TFNodeError(f"TF has no op {node.op!r}")
    if any(arg.is_ref for arg in od.input_arg):
      raise TFNodeError("it writes a TF1 reference variable, which eager TF cannot")
    try:
      outputs = self._execute.execute(
        node.op.encode(),
        _num_outputs(node, od),
        inputs=list(inputs),
        attrs=_attrs(node, od),
        ctx=self._context.context(),
      )
    except Exception as e:  # TF raises many kinds; the record says which
      first = (str(e).strip().splitlines() or [""])[0]
      raise TFNodeError(f"{type(e).__name__}: {first}") from e
    return list(outputs) if outputs is not None else []

  def _constant(self, node):
    key = id(node)
    if key not in self._constants:
      proto = node.attr_protos["value"].tensor
      self._constants[key] = self._tf.constant(
        opdefs.decode_tensor(proto), dtype=self._tf.as_dtype(proto.dtype)
      )
    return self._constants[key]

  def _graph_variable(self, node):
    if node.name not in self._graph_variables:
      raise TFNodeError(f"variable '{node.name}' has no value")
    return self._graph_variables[node.name]

  def from_ours(self, value) -> Optional[Any]:
    """tfprims' value as a TF tensor, for a node TF could not run (None: not a tensor)."""
    if not hasattr(value, "dtype") or not hasattr(value, "shape"):
      return None
    try:
      return self._tf.constant(np.asarray(value))
    except (TypeError, ValueError):
      return None


def numpy_value(tf_value) -> Optional[np.ndarray]:
  """A TF tensor's value as numpy, or None where it is not a numeric tensor
  (resource handles, TensorLists, strings)."""
  if tf_value is None or dtypes.from_tf(tf_value.dtype) is None:
    return None
  return dtypes.value_from_tf(tf_value)  # a read-only view of TF's buffer


def _num_outputs(node, od) -> int:
  count = 0
  for arg in od.output_arg:
    if arg.number_attr:
      count += int(node.attr(arg.number_attr))
    elif arg.type_list_attr:
      count += len(node.attr(arg.type_list_attr))
    else:
      count += 1
  return count


def _attrs(node, od) -> tuple:
  """The node's attrs as eager execution takes them (name, value, name, value...):
  those on the node, and the op def's defaults for the ones a function body left out
  (TF strips default-valued attrs from saved functions)."""
  protos = node.attr_protos
  flat: list = []
  for attr in od.attr:
    if attr.name in protos:
      flat += [attr.name, _value(protos[attr.name])]
    elif attr.HasField("default_value") and not _inferred(attr.name, od):
      flat += [attr.name, _value(attr.default_value)]
  return tuple(flat)


@functools.lru_cache(maxsize=None)
def _inferred_attrs(op_type: str) -> frozenset:
  od = opdefs.op_def(op_type)
  return frozenset(
    name
    for arg in od.input_arg
    for name in (arg.type_attr, arg.number_attr, arg.type_list_attr)
    if name
  )


def _inferred(name: str, od) -> bool:
  """Whether eager execution infers attr ``name`` from the inputs."""
  return name in _inferred_attrs(od.name)


def _value(proto) -> Any:
  kind = proto.WhichOneof("value")
  if kind == "list":
    for field in ("s", "i", "f", "b", "type", "shape", "tensor", "func"):
      items = getattr(proto.list, field)
      if len(items):
        return [_scalar(field, item) for item in items]
    return []
  return _scalar(kind, getattr(proto, kind))


def _scalar(kind: str, value) -> Any:
  if kind == "shape":
    return None if value.unknown_rank else [d.size if d.size >= 0 else None for d in value.dim]
  if kind == "tensor":
    return opdefs.decode_tensor(value)
  if kind == "func":
    return value.name  # eager execution finds functions registered under that name
  return value
