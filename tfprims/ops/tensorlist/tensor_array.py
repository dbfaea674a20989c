"""TF1 TensorArrays (TensorArrayV3 and its Read/Write/Gather/Scatter/Size/Close ops)
on the TensorList machinery.

A TensorArrayV3 is a resource with a ``flow`` tensor that every op takes and
returns to order the array's reads and writes. Here the flow output *is* the
array's :class:`TensorList` (a static length, items once written) and the handle
is a :class:`TensorArrayHandle` that carries only the array's dtype and element
shape: a v1 while loop carries the flow as a loop variable (so the list is scan
carry like TF2's TensorLists) and passes the handle in as a loop invariant. The
ops bind the TensorList primitives (``tf.TensorListSetItem``, ``tf.TensorListGetItem``,
``tf.TensorListGather``, ``tf.TensorListScatterIntoExistingList``), so jaxprs and
their grad/vmap rules are those of TF2's TensorArray.

Not supported (typed errors naming the node): arrays that grow
(``dynamic_size=True`` written past their size), and the ops not registered here
(TensorArrayConcatV3/SplitV3, the gradient arrays of tf.gradients graphs) are
reported as unsupported.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Optional

import numpy as np

from tfprims import core, dtypes, errors
from tfprims.core import register_structural
from tfprims.ops.tensorlist import hooks
from tfprims.ops.tensorlist.value import FAMILY, TensorList, as_list, static_int


@dataclasses.dataclass(frozen=True)
class TensorArrayHandle:
  """The handle output of a TensorArrayV3 node (the data travels in its flow)."""

  node: str
  dtype: Any
  element_shape: Optional[tuple]


def _flow(node, value) -> TensorList:
  if isinstance(value, TensorList):
    return value
  raise errors.OpError(
    node.op,
    node.name,
    "its flow input is not a TensorArray's flow (the TensorArray was "
    f"not created by a TensorArrayV3 node in the graph): {type(value).__name__}",
  )


def _new(ctx, node, inputs):
  size = static_int(node, inputs[0], "the TensorArray size")
  dtype = dtypes.canonical_dtype(node.attr("dtype"))
  shape = node.attr("element_shape", None)
  lst = TensorList(None, size, dtype, shape)
  if lst.shape_known:
    lst = lst.materialized()
  return [TensorArrayHandle(node.name, dtype, shape), lst]


def _no_growth(node, lst, index):
  if core.is_concrete(index):
    i = int(np.asarray(index))
    if i >= lst.length:
      raise errors.TensorListSizeError(
        f"{node.op} node '{node.name}' writes element {i} of a TensorArray of size "
        f"{lst.length}: TensorArrays that grow (dynamic_size=True) are not supported; "
        "give the TensorArray its final size"
      )


def _write(ctx, node, inputs):
  handle, index, value, flow = inputs
  lst = _flow(node, flow)
  _no_growth(node, lst, index)
  return hooks.set_item(ctx, node, [lst, index, value])


def _read(ctx, node, inputs):
  handle, index, flow = inputs
  return hooks.get_item(ctx, node, [_flow(node, flow), index, None])


def _gather(ctx, node, inputs):
  handle, indices, flow = inputs
  lst = _flow(node, flow)
  shape = node.attr("element_shape", None)
  if lst.items is None and shape is not None and all(d is not None for d in shape):
    lst = lst.materialized(shape, node)
  return hooks.gather(ctx, node, [lst, indices, None])


def _scatter(ctx, node, inputs):
  handle, indices, value, flow = inputs
  lst = _flow(node, flow)
  idx = np.asarray(indices) if core.is_concrete(indices) else None
  if idx is not None and idx.size and int(idx.max()) >= lst.length:
    raise errors.TensorListSizeError(
      f"{node.op} node '{node.name}' scatters to element {int(idx.max())} of a "
      f"TensorArray of size {lst.length}: TensorArrays that grow are not supported"
    )
  return hooks.scatter_into(ctx, node, [lst, value, indices])


def _size(ctx, node, inputs):
  return [np.asarray(as_list(node, _flow(node, inputs[1])).length, np.int32)]


def _close(ctx, node, inputs):
  return []


for _op, _hook, _doc in [
  ("TensorArrayV3", _new, "A TensorArray: a handle and its flow, the TensorList itself."),
  ("TensorArrayWriteV3", _write, "Writes one element (tf.TensorListSetItem)."),
  ("TensorArrayReadV3", _read, "Reads one element (tf.TensorListGetItem)."),
  ("TensorArrayGatherV3", _gather, "Stacks elements (tf.TensorListGather)."),
  (
    "TensorArrayScatterV3",
    _scatter,
    "Writes rows of a tensor (tf.TensorListScatterIntoExistingList).",
  ),
  ("TensorArraySizeV3", _size, "The static size."),
  ("TensorArrayCloseV3", _close, "Nothing (the array's memory is JAX's)."),
]:
  register_structural(_op, _hook, family=FAMILY, doc=_doc)
