"""The TensorList ops that bind no primitive: Reserve, EmptyTensorList, FromTensor,
Stack, Length, ElementShape, Split.

They build or read a :class:`TensorList`'s metadata (static length, element dtype
and shape) or pass its items through, so they are structural ops run by their
interpreter hooks alone.
"""

from __future__ import annotations

import numpy as np

from tfprims import core, dtypes, errors
from tfprims.core import register_structural, tfops
from tfprims.ops.tensorlist.value import (
  FAMILY,
  TensorList,
  as_list,
  decode_shape,
  element_dtype,
  is_variant_list,
  merge_shapes,
  static_int,
  variant_stack,
)


def _reserve_interpret(ctx, node, inputs):
  shape = decode_shape(inputs[0])
  n = static_int(node, inputs[1], "num_elements")
  if n < 0:
    raise errors.OpError(node.op, node.name, f"negative num_elements {n}")
  lst = TensorList(None, n, element_dtype(node), shape)
  # a list of variants (ragged rows) keeps Python values: set one by one
  return [lst.materialized() if lst.shape_known and not is_variant_list(lst) else lst]


def _empty_interpret(ctx, node, inputs):
  return [TensorList(None, 0, element_dtype(node), decode_shape(inputs[0]))]


def _from_tensor_interpret(ctx, node, inputs):
  tensor = inputs[0]
  if np.ndim(tensor) < 1:
    raise errors.OpError(node.op, node.name, "needs a tensor of rank >= 1")
  merge_shapes(decode_shape(inputs[1]), tuple(np.shape(tensor)[1:]), node)
  return [TensorList(tensor, np.shape(tensor)[0], element_dtype(node), None)]


def _stack_interpret(ctx, node, inputs):
  lst = as_list(node, inputs[0])
  num = node.attr("num_elements", -1)
  if num is not None and num >= 0 and num != lst.length:
    raise errors.OpError(node.op, node.name, f"expected {num} elements, the list has {lst.length}")
  if is_variant_list(lst):
    return [variant_stack(node, lst)]
  return [lst.materialized(decode_shape(inputs[1]), node).items]


def _length_interpret(ctx, node, inputs):
  return [np.asarray(as_list(node, inputs[0]).length, np.int32)]


def _element_shape_interpret(ctx, node, inputs):
  lst = as_list(node, inputs[0])
  dtype = dtypes.canonical_dtype(node.attr("shape_type"))
  if lst.element_shape is None:
    return [np.asarray(-1, dtype)]
  return [np.asarray([-1 if d is None else d for d in lst.element_shape], dtype)]


def _split_interpret(ctx, node, inputs):
  tensor, element_shape, lengths = inputs
  if not core.is_concrete(lengths):
    raise errors.TensorListSizeError(
      f"{node.op} node '{node.name}': lengths depend on runtime data"
    )
  lengths = np.asarray(lengths).reshape(-1)
  if lengths.size and (lengths != lengths[0]).any():
    raise errors.OpError(
      node.op,
      node.name,
      f"splits into pieces of different lengths {lengths.tolist()}; ragged lists are not supported",
    )
  n = int(lengths.size)
  d = int(lengths[0]) if n else 0
  shape = tuple(np.shape(tensor))
  if n * d != shape[0]:
    raise errors.OpError(
      node.op, node.name, f"lengths sum to {n * d}, the tensor has {shape[0]} rows"
    )
  items = tfops.Reshape.apply([tensor], {"shape": (n, d) + shape[1:]})
  return [TensorList(items, n, element_dtype(node), None)]


def _bookkeeping(op_type: str, hook, doc: str, **properties):
  register_structural(op_type, hook, family=FAMILY, doc=doc, **properties)


_bookkeeping(
  "TensorListReserve",
  _reserve_interpret,
  "A list of num_elements uninitialized elements (zeros once read).",
)
_bookkeeping("EmptyTensorList", _empty_interpret, "An empty list.")
_bookkeeping(
  "TensorListFromTensor", _from_tensor_interpret, "The list of the tensor's rows (no copy)."
)
_bookkeeping(
  "TensorListStack", _stack_interpret, "The elements stacked: the dense items themselves."
)
_bookkeeping("TensorListLength", _length_interpret, "The static length.")
_bookkeeping(
  "TensorListElementShape",
  _element_shape_interpret,
  "The (partial) element shape; -1 for unknown dims or rank.",
  shape_only=True,
)
_bookkeeping(
  "TensorListSplit",
  _split_interpret,
  "Splits a tensor into equal-length pieces (ragged pieces are refused).",
)
