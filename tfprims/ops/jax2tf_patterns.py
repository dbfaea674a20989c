"""Graph rewrites for functions jax2tf serialized as TF graphs (its old, non-native
mode), applied when converting with the ``infer_relu_from_jax2tf`` config (on by
default, as in tf2jax).

jax2tf wrote ``jax.nn.relu(x)`` as ``tf.maximum(x, 0)`` inside a name scope holding
``_relu_``. Values are the same, but the derivative at ``x == 0`` is not: TF's
Maximum sends the gradient to ``x`` on ties (1), JAX's relu has 0. Rewriting the
node to ``Relu`` (same name, first input) gives back the original JAX function's
derivative. Native serialization (``XlaCallModule``, the only mode of current
jax2tf) keeps JAX's own lowering and needs no rewrite.
"""

from __future__ import annotations

from typing import Iterable

import numpy as np

from tfprims import graph as graph_lib


def _zero_const(graph: graph_lib.Graph, ref) -> bool:
  """Whether ``ref`` is a scalar zero Const (possibly through one Cast)."""
  src = graph.by_name.get(ref[0])
  if src is not None and src.op == "Cast" and src.inputs:
    src = graph.by_name.get(src.inputs[0][0])
  if src is None or src.op != "Const":
    return False
  value = src.attr("value")
  return (
    isinstance(value, np.ndarray)
    and value.dtype.kind in "biuf"
    and value.ndim == 0
    and value.item() == 0
  )


def infer_relu(graphs: Iterable[graph_lib.Graph]) -> list[str]:
  """Rewrites jax2tf's ``max(x, 0)`` relus to ``Relu`` nodes, in place; returns the
  names of the rewritten nodes."""
  rewritten = []
  for graph in graphs:
    for node in graph.nodes:
      if (
        node.op == "Maximum"
        and "jax2tf" in node.name
        and "_relu_" in node.name
        and len(node.inputs) == 2
        and _zero_const(graph, node.inputs[1])
      ):
        node.op = "Relu"
        node.inputs = node.inputs[:1]
        rewritten.append(node.name)
  return rewritten
