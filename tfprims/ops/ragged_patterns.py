"""A graph rewrite for TF's ragged reductions (``tf.reduce_sum/mean/max/min/prod(rt,
axis=1)``), applied by :func:`tfprims.pipeline.prepare` to every graph.

TF computes a ragged reduction's segment ids from the row splits with
``ragged_util.repeat(range(nrows), row_lengths)`` (the ``RaggedSplitsToSegmentIds``
name scope): a ``Range`` as long as the longest row and a boolean mask, sizes that
depend on the splits' values, so the reduction does not compile under jit when the
splits are traced. The ids have as many entries as the flat values, a size that
*is* static: where every consumer of the ids is an ``UnsortedSegment*`` op (the
reductions), each consumer gets the ids computed from its own data's length,

    ids = UpperBound([splits], [range(len(data))])[0] - 1

(the row ``r`` with ``splits[r] <= i < splits[r + 1]``, i.e. ``searchsorted(splits[1:],
i, side='right')``), nodes of static size. For a valid ragged tensor (splits from 0 to
the number of values, nondecreasing) the ids are TF's, so the reduction is TF's;
empty rows get the reduction's identity from ``UnsortedSegment*`` as in TF.
"""

from __future__ import annotations

import dataclasses
from typing import Optional

import numpy as np

from tfprims import graph as graph_lib

_SCOPE = "RaggedSplitsToSegmentIds"
_IDS = f"{_SCOPE}/Repeat/boolean_mask/GatherV2"
_REDUCERS = (
  "UnsortedSegmentSum",
  "UnsortedSegmentMax",
  "UnsortedSegmentMin",
  "UnsortedSegmentProd",
)


def _splits_ref(graph: graph_lib.Graph, ids_node: str) -> Optional[graph_lib.Ref]:
  """The row splits the segment ids of ``ids_node`` are computed from: the input of
  the scope's ``strided_slice`` (``splits[1:]``), when it is one."""
  scope = ids_node[: -len(_IDS)]
  node = graph.by_name.get(f"{scope}{_SCOPE}/strided_slice")
  if node is None or node.op != "StridedSlice" or not node.inputs:
    return None
  return tuple(node.inputs[0])


def _segment_ids(
  prefix: str, data: graph_lib.Ref, splits: graph_lib.Ref, dtype: np.dtype
) -> list[graph_lib.Node]:
  """The nodes computing ``UpperBound([splits], [range(len(data))])[0] - 1`` (the last
  one named ``prefix``)."""

  def node(name, op, inputs, **attrs):
    return graph_lib.new_node(f"{prefix}/{name}" if name else prefix, op, inputs, **attrs)

  def const(name, value):
    return node(name, "Const", [], value=value, dtype=value.dtype)

  n = f"{prefix}/"
  return [
    const("zero", np.int32(0)),
    const("one", np.int32(1)),
    const("axis0", np.int32(0)),
    const("one_id", np.asarray(1, dtype)),
    node("shape", "Shape", [data], out_type=np.int32),
    node("nvals", "GatherV2", [(n + "shape", 0), (n + "zero", 0), (n + "axis0", 0)], batch_dims=0),
    node("positions", "Range", [(n + "zero", 0), (n + "nvals", 0), (n + "one", 0)], Tidx=np.int32),
    node("cast", "Cast", [(n + "positions", 0)], SrcT=np.int32, DstT=dtype),
    node("positions_2d", "ExpandDims", [(n + "cast", 0), (n + "zero", 0)]),
    node("splits_2d", "ExpandDims", [splits, (n + "zero", 0)]),
    node("bound", "UpperBound", [(n + "splits_2d", 0), (n + "positions_2d", 0)], out_type=dtype),
    node("bound_1d", "Squeeze", [(n + "bound", 0)], squeeze_dims=[0]),
    node("", "Sub", [(n + "bound_1d", 0), (n + "one_id", 0)]),
  ]


def static_segment_ids(graph: graph_lib.Graph) -> graph_lib.Graph:
  """``graph`` with the segment ids of its ragged reductions computed in static sizes
  (see the module doc); the same graph when it has none."""
  consumers: dict[str, list[graph_lib.Node]] = {}
  for node in graph.nodes:
    for ref in node.inputs:
      if ref[0].endswith(_IDS):
        consumers.setdefault(ref[0], []).append(node)
  todo = {}
  for ids_name, users in consumers.items():
    splits = _splits_ref(graph, ids_name)
    dtype = graph.by_name[ids_name].attr("Tparams", None)
    if splits is None or not isinstance(dtype, np.dtype):
      continue
    if all(
      u.op in _REDUCERS
      and tuple(u.inputs[1]) == (ids_name, 0)
      and (ids_name, 0) not in [tuple(r) for r in u.inputs[:1] + u.inputs[2:]]
      for u in users
    ) and all(o[0] != ids_name for o in graph.outputs):
      todo[ids_name] = (splits, dtype, users)
  if not todo:
    return graph
  replaced: dict[str, graph_lib.Node] = {}
  added: list[graph_lib.Node] = []
  for splits, dtype, users in todo.values():
    for user in users:
      prefix = f"{user.name}/tfprims_static_segment_ids"
      added += _segment_ids(prefix, tuple(user.inputs[0]), splits, dtype)
      inputs = [tuple(r) for r in user.inputs]
      inputs[1] = (prefix, 0)
      replaced[user.name] = user.rewired(inputs, user.control_inputs)
  nodes = [replaced.get(n.name, n) for n in graph.nodes] + added
  return dataclasses.replace(graph, nodes=graph_lib.toposort(nodes, graph.name))
