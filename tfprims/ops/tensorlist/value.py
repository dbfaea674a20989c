"""The TensorList value: what a TF list (a variant tensor) is inside the interpreter.

A :class:`TensorList` holds ``items`` (an array of shape ``[length,
*element_shape]``, or None while no element has been written and the element
shape is not fully known), a static ``length``, the element dtype and the
(possibly partial) element shape. It is a JAX pytree whose only leaf is
``items``, so a list is carried through ``lax.scan``/``lax.cond`` like any other
value. Also here: element-shape helpers, and the checks the interpreter hooks
share (a list input, a static int, a range-checked index).
"""

from __future__ import annotations

from typing import Optional

import jax
import numpy as np

from tfprims import core, dtypes, errors, folding, rules
from tfprims.ops.shared import VariantTensor, variant

FAMILY = "tensorlist"


class NeedsConcreteIndex(errors.TensorListSizeError):
  """A list op needs a trace-time index (e.g. to grow the list) but got a traced one.

  The while-loop converter catches it and unrolls the loop when its trip count
  is static, so the index becomes concrete.
  """


@jax.tree_util.register_pytree_node_class
class TensorList:
  """A TF TensorList inside the interpreter (see the module docstring)."""

  __slots__ = ("items", "length", "element_dtype", "element_shape")

  def __init__(self, items, length: int, element_dtype, element_shape: Optional[tuple]):
    self.items = items
    self.length = rules.sizes(length)[0]  # a symbolic dim under jax.export
    # A numpy dtype, or TF's name ("variant") for lists of lists/optionals.
    self.element_dtype = (
      element_dtype if isinstance(element_dtype, str) else np.dtype(element_dtype)
    )
    if items is not None and hasattr(items, "shape"):
      element_shape = tuple(items.shape[1:])
    self.element_shape = None if element_shape is None else tuple(element_shape)

  def tree_flatten(self):
    children = () if self.items is None else (self.items,)
    return children, (self.length, self.element_dtype, self.element_shape, self.items is not None)

  @classmethod
  def tree_unflatten(cls, aux, children):
    length, dtype, shape, has_items = aux
    obj = object.__new__(cls)
    obj.items = children[0] if has_items else None
    obj.length, obj.element_dtype, obj.element_shape = length, dtype, shape
    return obj

  @property
  def shape_known(self) -> bool:
    return self.element_shape is not None and all(d is not None for d in self.element_shape)

  def with_items(self, items) -> "TensorList":
    return TensorList(items, items.shape[0], self.element_dtype, None)

  def materialized(self, element_shape=None, node=None) -> "TensorList":
    """This list with ``items`` allocated (uninitialized elements are zeros, as in TF)."""
    if isinstance(self.items, VariantTensor):
      where = f"{node.op} node '{node.name}'" if node is not None else "a TensorList"
      raise errors.TensorListSizeError(
        f"{where} reads a list of variant elements ({self.items.what}) as a dense "
        "array; tfprims runs only TensorListFromTensor, GetItem, SetItem, Stack and "
        "Length on such lists"
      )
    if self.items is not None:
      return self
    if isinstance(self.element_dtype, str):
      where = f"{node.op} node '{node.name}'" if node is not None else "a TensorList"
      raise errors.TensorListSizeError(
        f"{where}: lists of {self.element_dtype} elements are not supported"
      )
    shape = merge_shapes(self.element_shape, element_shape, node)
    if shape is None or any(d is None for d in shape):
      where = f"{node.op} node '{node.name}'" if node is not None else "a TensorList"
      raise errors.TensorListSizeError(
        f"{where} reads uninitialized elements of a list whose element shape "
        f"({_shape_str(shape)}) is not fully known; write the elements first or "
        "give the TensorArray an element_shape"
      )
    shape = (self.length,) + tuple(shape)
    return TensorList(
      rules.numpy_for(shape).zeros(shape, self.element_dtype),
      self.length,
      self.element_dtype,
      shape[1:],
    )

  def __repr__(self):
    return (
      f"TensorList(length={self.length}, dtype={self.element_dtype}, "
      f"element_shape={_shape_str(self.element_shape)}, "
      f"items={'None' if self.items is None else type(self.items).__name__})"
    )


def _shape_str(shape) -> str:
  if shape is None:
    return "<unknown rank>"
  return "[" + ", ".join("?" if d is None else str(d) for d in shape) + "]"


def decode_shape(value) -> Optional[tuple]:
  """A TF element_shape tensor (-1 = unknown rank, -1 dims = unknown) as a partial shape."""
  if value is None or not core.is_concrete(value):
    return None
  arr = np.asarray(value)
  if arr.ndim == 0:
    if int(arr) == -1:
      return None
    raise errors.ConversionError(f"invalid TensorList element_shape {arr!r}")
  return tuple(None if int(d) < 0 else int(d) for d in arr.reshape(-1))


def merge_shapes(a: Optional[tuple], b: Optional[tuple], node=None) -> Optional[tuple]:
  if a is None:
    return b
  if b is None:
    return a
  if len(a) != len(b):
    raise errors.OpError(
      node.op if node else "TensorList",
      node.name if node else "?",
      f"element shapes {_shape_str(a)} and {_shape_str(b)} differ in rank",
    )
  out = []
  for x, y in zip(a, b):
    if x is not None and y is not None and x != y:
      raise errors.OpError(
        node.op if node else "TensorList",
        node.name if node else "?",
        f"element shapes {_shape_str(a)} and {_shape_str(b)} are incompatible",
      )
    out.append(x if x is not None else y)
  return tuple(out)


class UnavailableList:
  """A list output that cannot be computed (e.g. pushed to in a loop without a static
  trip count); using it raises :class:`errors.TensorListSizeError`."""

  def __init__(self, reason: str):
    self.reason = reason

  def __repr__(self):
    return f"UnavailableList({self.reason!r})"


def as_list(node, value) -> TensorList:
  """A node's list input, checked (an :class:`UnavailableList` raises its reason)."""
  if isinstance(value, UnavailableList):
    raise errors.TensorListSizeError(
      f"{node.op} node '{node.name}' uses a list that cannot be computed: {value.reason}"
    )
  if not isinstance(value, TensorList):
    raise errors.OpError(
      node.op, node.name, f"expects a TensorList input, got {type(value).__name__}"
    )
  return value


def static_int(node, value, what: str) -> int:
  """A size input that must be known at trace time (it becomes an array dimension).
  Traced, it raises :class:`NeedsConcreteIndex`: inside a loop whose trip count is
  known, the loop unrolls, and the size may be known in each iteration (TF's
  backward loops reserve lists of sizes popped from the forward loop's pushes)."""
  known = folding.known_value(value)
  if known is None:
    raise NeedsConcreteIndex(
      f"{node.op} node '{node.name}': {what} depends on runtime data, but a "
      "TensorList's length must be known at trace time (JAX arrays have static "
      "shapes); compute it from constants or shapes"
    )
  return rules.sizes(known)[0]  # an int, or a symbolic dim (tf.shape(x)[0] under jax.export)


def element_dtype(node):
  """The node's ``element_dtype`` attr: a numpy dtype, or TF's name ("variant")."""
  dtype = node.attr("element_dtype")
  return dtype if isinstance(dtype, str) else dtypes.canonical_dtype(dtype)


def check_index(node, lst: TensorList, index) -> Optional[int]:
  """The index as an int when concrete (range-checked), None when traced."""
  if not core.is_concrete(index):
    return None
  i = int(np.asarray(index))
  if i < 0 or i >= lst.length:
    raise errors.OpError(
      node.op, node.name, f"index {i} is out of range for a list of {lst.length} elements"
    )
  return i


# --- lists of variants (a VariantTensor's elements: tf.map_fn over ragged rows) --------------


def is_variant_list(lst: TensorList) -> bool:
  """A list of :class:`VariantTensor` elements (or of variants none is set yet)."""
  items = lst.items
  return isinstance(items, VariantTensor) or (items is None and lst.element_dtype == "variant")


def _variant_index(node, lst: TensorList, index) -> int:
  """A list of variants is indexed at trace time (its elements are Python values);
  a traced index raises :class:`NeedsConcreteIndex`, so a loop with a static trip
  count unrolls."""
  if not core.is_concrete(index):
    raise NeedsConcreteIndex(
      f"{node.op} node '{node.name}' indexes a list of variant elements (ragged rows) "
      "at an index known only at run time; its elements are trace-time values, so "
      "the index must be known at trace time (a loop with a static trip count unrolls)"
    )
  return check_index(node, lst, index)


def _element(node, lst: TensorList, i: int):
  """Element ``i`` of a list whose items are a VariantTensor: a scalar variant, or the
  array itself in a list of arrays of different shapes (a loop's pushed rows)."""
  if not isinstance(lst.items, VariantTensor) or lst.items.elements[i] is None:
    raise errors.TensorListSizeError(
      f"{node.op} node '{node.name}' reads element {i} of a list of variants, which nothing has set"
    )
  return lst.items.element(i) if lst.element_dtype == "variant" else lst.items.elements[i]


def variant_get(node, lst: TensorList, index):
  """Element ``index`` of a list of variants (a scalar variant)."""
  return _element(node, lst, _variant_index(node, lst, index))


def variant_pop(node, lst: TensorList) -> list:
  """PopBack of a list of variants (or of arrays of different shapes): the rest, the last."""
  if lst.length == 0:
    raise errors.OpError(node.op, node.name, "pops from an empty list")
  last = _element(node, lst, lst.length - 1)
  rest = lst.items.stacked(lst.items.elements[:-1])
  return [TensorList(rest, lst.length - 1, lst.element_dtype, None), last]


def host_rows(node, rows: list, element_dtype) -> TensorList:
  """A list of arrays of different shapes (a loop pushing ragged rows, which TF's
  gradient code accumulates): read back only by PopBack and GetItem."""
  what = "a list of arrays of different shapes (ragged rows)"
  return TensorList(variant(node, (len(rows),), rows, what), len(rows), element_dtype, None)


def zeros_list(lst: TensorList) -> TensorList:
  """ZerosLike of a list of variants: every element unset, which reads as zeros where
  TF's gradient ops read it (RaggedTensorToVariantGradient)."""
  return TensorList(None, lst.length, lst.element_dtype, lst.element_shape)


def add_lists(node, lists) -> TensorList:
  """AddN of lists of variants (TF's gradient code sums a loop's list gradients):
  element by element, unset elements being zeros; set ones add by their ``added``."""
  lists = [as_list(node, x) for x in lists]
  if len({x.length for x in lists}) != 1 or any(not is_variant_list(x) for x in lists):
    raise errors.OpError(node.op, node.name, "adds lists of variants of different lengths")
  out, template = [], None
  for i in range(lists[0].length):
    found = [x.items.elements[i] for x in lists if x.items is not None]
    found = [e for e in found if e is not None]
    template = next((x.items for x in lists if x.items is not None), None)
    out.append(
      None if not found else found[0] if len(found) == 1 else found[0].added(node, found[1:])
    )
  if template is None:
    return zeros_list(lists[0])
  return TensorList(template.stacked(out), lists[0].length, "variant", ())


def variant_set(node, lst: TensorList, index, item) -> TensorList:
  """The list of variants with element ``index`` set to the scalar variant ``item``."""
  if not isinstance(item, VariantTensor) or item.shape != ():
    raise errors.OpError(
      node.op,
      node.name,
      f"sets an element of a list of variants to {type(item).__name__} "
      f"{getattr(item, 'shape', '')}; tfprims keeps scalar variants only",
    )
  i = _variant_index(node, lst, index)
  old = lst.items.elements if isinstance(lst.items, VariantTensor) else (None,) * lst.length
  elements = old[:i] + item.elements + old[i + 1 :]
  return TensorList(item.stacked(elements), lst.length, "variant", ())


def variant_stack(node, lst: TensorList) -> VariantTensor:
  """The elements of a list of variants as a vector variant."""
  items = lst.items
  if items is None:  # unset variants: the readers take them as zeros or refuse them
    return variant(node, (lst.length,), (None,) * lst.length)
  return items
