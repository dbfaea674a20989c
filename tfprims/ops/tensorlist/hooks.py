"""The interpreter hooks of the TensorList primitives.

Each hook checks the list input and the indices it can check at trace time,
keeps the list's metadata (length, element dtype and shape), and binds the
op's primitive on the dense items (through :data:`tfprims.core.tfops`). An op
that would grow a list at an index known only at run time raises
:class:`NeedsConcreteIndex` (the while-loop converter unrolls such loops).
"""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np

from tfprims import core, dtypes, errors
from tfprims.core import tfops
from tfprims.ops.shared import VariantTensor
from tfprims.ops.tensorlist.value import (
  NeedsConcreteIndex,
  TensorList,
  as_list,
  check_index,
  decode_shape,
  element_dtype,
  is_variant_list,
  merge_shapes,
  static_int,
  variant_get,
  variant_pop,
  variant_set,
)


def set_item(ctx, node, inputs):
  lst, index, item = as_list(node, inputs[0]), inputs[1], inputs[2]
  if is_variant_list(lst) or isinstance(item, VariantTensor):
    return [variant_set(node, lst, index, item)]
  resize = bool(node.attr("resize_if_index_out_of_bounds", False))
  if core.is_concrete(index):
    i = int(np.asarray(index))
    if i < 0:
      raise errors.OpError(node.op, node.name, f"negative index {i}")
    if i >= lst.length:
      if not resize:
        raise errors.OpError(
          node.op,
          node.name,
          f"index {i} is out of range for a list of {lst.length} "
          "elements (resize_if_index_out_of_bounds is false)",
        )
      lst = _grow(lst, i + 1, np.shape(item))
  elif resize:
    raise NeedsConcreteIndex(
      f"{node.op} node '{node.name}' may grow its list (a TensorArray with "
      "dynamic_size=True) at an index that depends on runtime data; the list length "
      "must be known at trace time. Give the TensorArray a fixed size, or write it "
      "in a loop whose trip count is known at trace time."
    )
  shape = tuple(np.shape(item))
  lst = lst.materialized(shape, node) if lst.items is None else lst
  if tuple(lst.items.shape[1:]) != shape:
    raise errors.OpError(
      node.op,
      node.name,
      f"item of shape {list(shape)} does not match the list's element "
      f"shape {list(lst.items.shape[1:])} (ragged lists are not supported)",
    )
  return [lst.with_items(tfops.TensorListSetItem.apply([lst.items, index, item], {}))]


def _grow(lst: TensorList, size: int, element_shape) -> TensorList:
  if lst.items is None:
    return TensorList(None, size, lst.element_dtype, lst.element_shape)
  return lst.with_items(tfops.TensorListResize.apply([lst.items], {"size": size}))


def get_item(ctx, node, inputs):
  lst, index = as_list(node, inputs[0]), inputs[1]
  if is_variant_list(lst):
    return [variant_get(node, lst, index)]
  check_index(node, lst, index)
  lst = lst.materialized(decode_shape(inputs[2]), node)
  return [tfops.TensorListGetItem.apply([lst.items, index], {})]


def gather(ctx, node, inputs):
  lst, indices = as_list(node, inputs[0]), inputs[1]
  if core.is_concrete(indices):
    idx = np.asarray(indices)
    if idx.size and (idx.min() < 0 or idx.max() >= lst.length):
      raise errors.OpError(
        node.op,
        node.name,
        f"indices {idx.tolist()} out of range for a list of {lst.length} elements",
      )
  lst = lst.materialized(decode_shape(inputs[2]), node)
  return [tfops.TensorListGather.apply([lst.items, indices], {})]


def scatter_into(ctx, node, inputs):
  lst, tensor, indices = as_list(node, inputs[0]), inputs[1], inputs[2]
  if core.is_concrete(indices):
    idx = np.asarray(indices)
    if idx.size and idx.min() < 0:
      raise errors.OpError(node.op, node.name, "negative indices")
    needed = int(idx.max()) + 1 if idx.size else 0
    if needed > lst.length:
      lst = _grow(lst, needed, np.shape(tensor)[1:])
  lst = lst.materialized(tuple(np.shape(tensor)[1:]), node)
  op = tfops.TensorListScatterIntoExistingList
  return [lst.with_items(op.apply([lst.items, tensor, indices], {}))]


def scatter_v2(ctx, node, inputs):
  tensor, indices, element_shape, num = inputs
  num = static_int(node, num, "num_elements")
  if num < 0:
    if not core.is_concrete(indices):
      raise errors.TensorListSizeError(
        f"{node.op} node '{node.name}': the list size is the largest index + 1, and "
        "the indices depend on runtime data; pass num_elements"
      )
    idx = np.asarray(indices)
    num = int(idx.max()) + 1 if idx.size else 0
  dtype = element_dtype(node)
  shape = merge_shapes(decode_shape(element_shape), tuple(np.shape(tensor)[1:]), node)
  items = tfops.TensorListScatterV2.apply([tensor, indices], {"num_elements": num})
  return [TensorList(items, num, dtype, shape)]


def scatter_v1(ctx, node, inputs):
  tensor, indices, element_shape = inputs
  if not core.is_concrete(indices):
    raise errors.TensorListSizeError(
      f"{node.op} node '{node.name}': the list size is the largest index + 1, and the "
      "indices depend on runtime data; use TensorListScatterV2 with num_elements "
      "(tf.TensorArray.scatter on a sized array)"
    )
  idx = np.asarray(indices).reshape(-1)
  if idx.size and idx.min() < 0:
    raise errors.OpError(node.op, node.name, "negative indices")
  if len(idx) != (np.shape(tensor)[0] if np.ndim(tensor) else -1):
    raise errors.OpError(
      node.op, node.name, f"{len(idx)} indices for a tensor of shape {list(np.shape(tensor))}"
    )
  num = int(idx.max()) + 1 if idx.size else 0
  shape = merge_shapes(decode_shape(element_shape), tuple(np.shape(tensor)[1:]), node)
  items = tfops.TensorListScatter.apply([tensor, indices], {"num_elements": num})
  return [TensorList(items, num, element_dtype(node), shape)]


def concat_lists(ctx, node, inputs):
  a, b = as_list(node, inputs[0]), as_list(node, inputs[1])
  if a.element_dtype != b.element_dtype:
    raise errors.OpError(
      node.op, node.name, f"lists of {a.element_dtype} and {b.element_dtype} elements"
    )
  shape = merge_shapes(
    a.element_shape if a.items is None else tuple(a.items.shape[1:]),
    b.element_shape if b.items is None else tuple(b.items.shape[1:]),
    node,
  )
  length = a.length + b.length
  if a.items is None and b.items is None and (shape is None or None in shape):
    return [TensorList(None, length, a.element_dtype, shape)]
  a, b = a.materialized(shape, node), b.materialized(shape, node)
  items = tfops.TensorListConcatLists.apply([a.items, b.items], {})
  return [TensorList(items, length, a.element_dtype, shape)]


def push_back(ctx, node, inputs):
  lst, tensor = as_list(node, inputs[0]), inputs[1]
  shape = tuple(np.shape(tensor))
  if lst.items is None:
    if lst.length == 0:
      merge_shapes(lst.element_shape, shape, node)
      items = (
        jnp.asarray(tensor, lst.element_dtype)[None]
        if not core.is_concrete(tensor)
        else np.asarray(tensor, lst.element_dtype)[None]
      )
      return [TensorList(items, 1, lst.element_dtype, shape)]
    lst = lst.materialized(shape, node)
  return [lst.with_items(tfops.TensorListPushBack.apply([lst.items, tensor], {}))]


def pop_back(ctx, node, inputs):
  lst = as_list(node, inputs[0])
  if is_variant_list(lst):
    return variant_pop(node, lst)
  if lst.length == 0:
    raise errors.OpError(node.op, node.name, "pops from an empty list")
  lst = lst.materialized(decode_shape(inputs[1]), node)
  rest, last = tfops.TensorListPopBack.apply([lst.items], {})
  return [lst.with_items(rest), last]


def concat_v1(ctx, node, inputs):
  """TensorListConcat (V1): element_shape is an attr, there are no leading_dims."""
  return _concat(
    node, as_list(node, inputs[0]), node.attr("element_shape", None), tfops.TensorListConcat
  )


def concat_v2(ctx, node, inputs):
  return _concat(node, as_list(node, inputs[0]), decode_shape(inputs[1]), tfops.TensorListConcatV2)


def _concat(node, lst: TensorList, shape, op):
  lst = lst.materialized(shape, node)
  if len(lst.items.shape) < 2:
    raise errors.OpError(node.op, node.name, "concatenates scalar elements")
  d0 = lst.items.shape[1]
  lengths = np.full((lst.length,), d0, dtypes.canonical_dtype(np.int64))
  return [op.apply([lst.items], {}), lengths]


def resize(ctx, node, inputs):
  lst = as_list(node, inputs[0])
  size = static_int(node, inputs[1], "size")
  if size < 0:
    raise errors.OpError(node.op, node.name, f"negative size {size}")
  if lst.items is None:
    return [TensorList(None, size, lst.element_dtype, lst.element_shape)]
  return [lst.with_items(tfops.TensorListResize.apply([lst.items], {"size": size}))]
