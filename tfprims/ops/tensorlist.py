"""TensorList ops (TF2's TensorArray): a list is a dense array with a static length.

A TF TensorList is a variant tensor. Inside the interpreter it is a
:class:`TensorList`: ``items`` (an array of shape ``[length, *element_shape]``,
or None while no element has been written and the element shape is not fully
known), a static ``length``, the element dtype and the (possibly partial)
element shape. TensorList is a JAX pytree (its only leaf is ``items``), so a
list is carried through ``lax.scan``/``lax.cond`` like any other value.

Ops that compute on the items bind their own primitive (``tf.TensorListSetItem``,
``tf.TensorListGetItem``, ...) with TF-named JVP and transpose rules; pure
bookkeeping ops (Reserve, Length, ElementShape, Stack, FromTensor) bind nothing.
The list length must be known at trace time (it is an array dimension): an op
whose effect on the length depends on runtime data raises
:class:`errors.TensorListSizeError`.
"""

from __future__ import annotations

from typing import Optional

import jax
import jax.numpy as jnp
import numpy as np
from jax.interpreters import ad

from tfprims import core, dtypes, errors
from tfprims.core import define_op, register_structural, tfops

FAMILY = "tensorlist"
U = ad.is_undefined_primal

# Property specs of the primitives: a list input is drawn as its items
# ([length, *element_shape]) and is the primitive's operand; the oracle wraps it
# in a TF list (TensorListFromTensor) and stacks list outputs back
# (TensorListStack), so the runner compares and differentiates plain arrays,
# TF's list-op gradients included. TF's forward mode cannot see through list
# handles (ForwardAccumulator raises on variants): JVPs are checked against
# GradientTape (a dot-product test).
_GRAD_ORACLE = "vjp"


def _tf():
  import tensorflow as tf  # noqa: PLC0415 (the oracles run only in property tests)
  return tf


def _element_shape(like):
  return _tf().shape(like, out_type="int32")[1:]


def _tf_list(items):
  return _tf().raw_ops.TensorListFromTensor(tensor=items, element_shape=_element_shape(items))


def _tf_stacked(handle, like):
  """A TF list as its items (elements never written read as zeros, like ours)."""
  return _tf().raw_ops.TensorListStack(input_handle=handle, element_shape=_element_shape(like),
                                       element_dtype=like.dtype)


def _draw_items(st, draw, min_length=0, min_rank=0):
  dtype = draw(st.dtypes(st.ALL))
  element_shape = draw(st.shapes(min_rank=min_rank, max_rank=2))
  length = draw(st.integers(min_length, 4))
  return draw(st.arrays(dtype, (length,) + tuple(element_shape)))


def _draw_indices(st, draw, below, unique=False):
  size = draw(st.integers(0, below if unique else 4))
  values = draw(st.lists(st.integers(0, below - 1), min_size=size, max_size=size,
                         unique=unique)) if below else []
  return np.array(values, np.int32)


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
    self.length = int(length)
    # A numpy dtype, or TF's name ("variant") for lists of lists/optionals.
    self.element_dtype = element_dtype if isinstance(element_dtype, str) else \
        np.dtype(element_dtype)
    if items is not None and hasattr(items, "shape"):
      element_shape = tuple(items.shape[1:])
    self.element_shape = None if element_shape is None else tuple(element_shape)

  def tree_flatten(self):
    children = () if self.items is None else (self.items,)
    return children, (self.length, self.element_dtype, self.element_shape,
                      self.items is not None)

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
    return TensorList(items, int(items.shape[0]), self.element_dtype, None)

  def materialized(self, element_shape=None, node=None) -> "TensorList":
    """This list with ``items`` allocated (uninitialized elements are zeros, as in TF)."""
    if self.items is not None:
      return self
    if isinstance(self.element_dtype, str):
      where = f"{node.op} node '{node.name}'" if node is not None else "a TensorList"
      raise errors.TensorListSizeError(f"{where}: lists of {self.element_dtype} elements are "
                                "not supported")
    shape = merge_shapes(self.element_shape, element_shape, node)
    if shape is None or any(d is None for d in shape):
      where = f"{node.op} node '{node.name}'" if node is not None else "a TensorList"
      raise errors.TensorListSizeError(
          f"{where} reads uninitialized elements of a list whose element shape "
          f"({_shape_str(shape)}) is not fully known; write the elements first or "
          "give the TensorArray an element_shape")
    return TensorList(np.zeros((self.length,) + tuple(shape), self.element_dtype),
                      self.length, self.element_dtype, shape)

  def __repr__(self):
    return (f"TensorList(length={self.length}, dtype={self.element_dtype}, "
            f"element_shape={_shape_str(self.element_shape)}, "
            f"items={'None' if self.items is None else type(self.items).__name__})")


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
    raise errors.OpError(node.op if node else "TensorList", node.name if node else "?",
                         f"element shapes {_shape_str(a)} and {_shape_str(b)} differ in rank")
  out = []
  for x, y in zip(a, b):
    if x is not None and y is not None and x != y:
      raise errors.OpError(node.op if node else "TensorList", node.name if node else "?",
                           f"element shapes {_shape_str(a)} and {_shape_str(b)} are incompatible")
    out.append(x if x is not None else y)
  return tuple(out)


class UnavailableList:
  """A list output that cannot be computed (e.g. pushed to in a loop without a static
  trip count); using it raises :class:`errors.TensorListSizeError`."""

  def __init__(self, reason: str):
    self.reason = reason

  def __repr__(self):
    return f"UnavailableList({self.reason!r})"


def _list(node, value) -> TensorList:
  if isinstance(value, UnavailableList):
    raise errors.TensorListSizeError(f"{node.op} node '{node.name}' uses a list that cannot be "
                              f"computed: {value.reason}")
  if not isinstance(value, TensorList):
    raise errors.OpError(node.op, node.name,
                         f"expects a TensorList input, got {type(value).__name__}")
  return value


def _static_int(node, value, what: str) -> int:
  if not core.is_concrete(value):
    raise errors.TensorListSizeError(
        f"{node.op} node '{node.name}': {what} depends on runtime data, but a "
        "TensorList's length must be known at trace time (JAX arrays have static "
        "shapes); compute it from constants or shapes")
  return int(np.asarray(value))


def _dtype(node):
  dtype = node.attr("element_dtype")
  return dtype if isinstance(dtype, str) else dtypes.canonical_dtype(dtype)


def _check_index(node, lst: TensorList, index) -> Optional[int]:
  """The index as an int when concrete (range-checked), None when traced."""
  if not core.is_concrete(index):
    return None
  i = int(np.asarray(index))
  if i < 0 or i >= lst.length:
    raise errors.OpError(node.op, node.name,
                         f"index {i} is out of range for a list of {lst.length} elements")
  return i


def _zeros_like_aval(x):
  aval = x.aval if U(x) else jax.typeof(x)
  return jnp.zeros(aval.shape, aval.dtype)


def _inst(t, like):
  """A tangent/cotangent with symbolic zeros instantiated (``like``: aval holder)."""
  if type(t) is not ad.Zero:
    return t
  if isinstance(like, jax.ShapeDtypeStruct):
    return jnp.zeros(like.shape, like.dtype)
  return _zeros_like_aval(like)


# --- interpreter hooks ----------------------------------------------------------------


def _set_item_interpret(ctx, node, inputs):
  lst, index, item = _list(node, inputs[0]), inputs[1], inputs[2]
  resize = bool(node.attr("resize_if_index_out_of_bounds", False))
  if core.is_concrete(index):
    i = int(np.asarray(index))
    if i < 0:
      raise errors.OpError(node.op, node.name, f"negative index {i}")
    if i >= lst.length:
      if not resize:
        raise errors.OpError(node.op, node.name,
                             f"index {i} is out of range for a list of {lst.length} "
                             "elements (resize_if_index_out_of_bounds is false)")
      lst = _grow(lst, i + 1, np.shape(item))
  elif resize:
    raise NeedsConcreteIndex(
        f"{node.op} node '{node.name}' may grow its list (a TensorArray with "
        "dynamic_size=True) at an index that depends on runtime data; the list length "
        "must be known at trace time. Give the TensorArray a fixed size, or write it "
        "in a loop whose trip count is known at trace time.")
  shape = tuple(np.shape(item))
  lst = lst.materialized(shape, node) if lst.items is None else lst
  if tuple(lst.items.shape[1:]) != shape:
    raise errors.OpError(node.op, node.name,
                         f"item of shape {list(shape)} does not match the list's element "
                         f"shape {list(lst.items.shape[1:])} (ragged lists are not supported)")
  return [lst.with_items(SetItem.apply([lst.items, index, item], {}))]


def _grow(lst: TensorList, size: int, element_shape) -> TensorList:
  if lst.items is None:
    return TensorList(None, size, lst.element_dtype, lst.element_shape)
  return lst.with_items(Resize.apply([lst.items], {"size": size}))


def _get_item_interpret(ctx, node, inputs):
  lst, index = _list(node, inputs[0]), inputs[1]
  _check_index(node, lst, index)
  lst = lst.materialized(decode_shape(inputs[2]), node)
  return [GetItem.apply([lst.items, index], {})]


def _gather_interpret(ctx, node, inputs):
  lst, indices = _list(node, inputs[0]), inputs[1]
  if core.is_concrete(indices):
    idx = np.asarray(indices)
    if idx.size and (idx.min() < 0 or idx.max() >= lst.length):
      raise errors.OpError(node.op, node.name,
                           f"indices {idx.tolist()} out of range for a list of "
                           f"{lst.length} elements")
  lst = lst.materialized(decode_shape(inputs[2]), node)
  return [Gather.apply([lst.items, indices], {})]


def _scatter_into_interpret(ctx, node, inputs):
  lst, tensor, indices = _list(node, inputs[0]), inputs[1], inputs[2]
  if core.is_concrete(indices):
    idx = np.asarray(indices)
    if idx.size and idx.min() < 0:
      raise errors.OpError(node.op, node.name, "negative indices")
    needed = int(idx.max()) + 1 if idx.size else 0
    if needed > lst.length:
      lst = _grow(lst, needed, np.shape(tensor)[1:])
  lst = lst.materialized(tuple(np.shape(tensor)[1:]), node)
  return [lst.with_items(ScatterInto.apply([lst.items, tensor, indices], {}))]


def _scatter_v2_interpret(ctx, node, inputs):
  tensor, indices, element_shape, num = inputs
  num = _static_int(node, num, "num_elements")
  if num < 0:
    if not core.is_concrete(indices):
      raise errors.TensorListSizeError(
          f"{node.op} node '{node.name}': the list size is the largest index + 1, and "
          "the indices depend on runtime data; pass num_elements")
    idx = np.asarray(indices)
    num = int(idx.max()) + 1 if idx.size else 0
  dtype = _dtype(node)
  shape = merge_shapes(decode_shape(element_shape), tuple(np.shape(tensor)[1:]), node)
  items = ScatterV2.apply([tensor, indices], {"num_elements": num})
  return [TensorList(items, num, dtype, shape)]


def _scatter_v1_interpret(ctx, node, inputs):
  tensor, indices, element_shape = inputs
  if not core.is_concrete(indices):
    raise errors.TensorListSizeError(
        f"{node.op} node '{node.name}': the list size is the largest index + 1, and the "
        "indices depend on runtime data; use TensorListScatterV2 with num_elements "
        "(tf.TensorArray.scatter on a sized array)")
  idx = np.asarray(indices).reshape(-1)
  if idx.size and idx.min() < 0:
    raise errors.OpError(node.op, node.name, "negative indices")
  if len(idx) != (np.shape(tensor)[0] if np.ndim(tensor) else -1):
    raise errors.OpError(node.op, node.name,
                         f"{len(idx)} indices for a tensor of shape {list(np.shape(tensor))}")
  num = int(idx.max()) + 1 if idx.size else 0
  shape = merge_shapes(decode_shape(element_shape), tuple(np.shape(tensor)[1:]), node)
  items = Scatter.apply([tensor, indices], {"num_elements": num})
  return [TensorList(items, num, _dtype(node), shape)]


def _concat_lists_interpret(ctx, node, inputs):
  a, b = _list(node, inputs[0]), _list(node, inputs[1])
  if a.element_dtype != b.element_dtype:
    raise errors.OpError(node.op, node.name, f"lists of {a.element_dtype} and "
                         f"{b.element_dtype} elements")
  shape = merge_shapes(a.element_shape if a.items is None else tuple(a.items.shape[1:]),
                       b.element_shape if b.items is None else tuple(b.items.shape[1:]), node)
  length = a.length + b.length
  if a.items is None and b.items is None and (shape is None or None in shape):
    return [TensorList(None, length, a.element_dtype, shape)]
  a, b = a.materialized(shape, node), b.materialized(shape, node)
  return [TensorList(ConcatLists.apply([a.items, b.items], {}), length, a.element_dtype,
                     shape)]


def _push_back_interpret(ctx, node, inputs):
  lst, tensor = _list(node, inputs[0]), inputs[1]
  shape = tuple(np.shape(tensor))
  if lst.items is None:
    if lst.length == 0:
      merge_shapes(lst.element_shape, shape, node)
      items = jnp.asarray(tensor, lst.element_dtype)[None] if not core.is_concrete(tensor) \
          else np.asarray(tensor, lst.element_dtype)[None]
      return [TensorList(items, 1, lst.element_dtype, shape)]
    lst = lst.materialized(shape, node)
  return [lst.with_items(PushBack.apply([lst.items, tensor], {}))]


def _pop_back_interpret(ctx, node, inputs):
  lst = _list(node, inputs[0])
  if lst.length == 0:
    raise errors.OpError(node.op, node.name, "pops from an empty list")
  lst = lst.materialized(decode_shape(inputs[1]), node)
  rest, last = PopBack.apply([lst.items], {})
  return [lst.with_items(rest), last]


def _concat_interpret(ctx, node, inputs):
  lst = _list(node, inputs[0])
  if node.op == "TensorListConcat":  # V1: element_shape is an attr, no leading_dims
    shape, op = node.attr("element_shape", None), Concat
  else:
    shape, op = decode_shape(inputs[1]), ConcatV2
  lst = lst.materialized(shape, node)
  if len(lst.items.shape) < 2:
    raise errors.OpError(node.op, node.name, "concatenates scalar elements")
  d0 = lst.items.shape[1]
  lengths = np.full((lst.length,), d0, dtypes.canonical_dtype(np.int64))
  return [op.apply([lst.items], {}), lengths]


def _resize_interpret(ctx, node, inputs):
  lst = _list(node, inputs[0])
  size = _static_int(node, inputs[1], "size")
  if size < 0:
    raise errors.OpError(node.op, node.name, f"negative size {size}")
  if lst.items is None:
    return [TensorList(None, size, lst.element_dtype, lst.element_shape)]
  return [lst.with_items(Resize.apply([lst.items], {"size": size}))]


# --- primitives computing on the dense items ----------------------------------------


def _set_item_impl(items, index, item):
  """items with row ``index`` replaced by ``item``."""
  return jax.lax.dynamic_update_index_in_dim(items, jnp.asarray(item, items.dtype), index, 0,
                                             allow_negative_indices=False)


def _set_item_jvp(primals, tangents):
  items, index, item = primals
  t_items, _, t_item = tangents
  out = SetItem(items, index, item)
  if type(t_items) is ad.Zero and type(t_item) is ad.Zero:
    return out, ad.Zero(jax.typeof(out).to_tangent_aval())
  return out, SetItem(_inst(t_items, items), index, _inst(t_item, item))


def _set_item_transpose(ct, items, index, item):
  ct_items = SetItem(ct, index, _zeros_like_aval(item)) if U(items) else None
  ct_item = GetItem(ct, index) if U(item) else None
  return [ct_items, None, ct_item]


def tf_set_item(input_handle, index, item):
  """The property oracle of ``tf.TensorListSetItem`` (a list drawn as its items)."""
  return _tf_stacked(_tf().raw_ops.TensorListSetItem(
      input_handle=_tf_list(input_handle), index=index, item=item), input_handle)


def _set_item_spec(st):
  @st.composite
  def calls(draw):
    items = _draw_items(st, draw, min_length=1)
    return dict(input_handle=items, index=np.int32(draw(st.integers(0, len(items) - 1))),
                item=draw(st.arrays(items.dtype, items.shape[1:])))
  return st.Spec(calls(), grad_oracle=_GRAD_ORACLE, oracle=tf_set_item,
                 operands=("input_handle", "index", "item"))


SetItem = define_op(
    "TensorListSetItem", _set_item_impl, family=FAMILY, spec=_set_item_spec,
    jvp=_set_item_jvp, transpose=_set_item_transpose,
    interpret=_set_item_interpret)


def _get_item_impl(items, index):
  """Row ``index`` of items."""
  return jax.lax.dynamic_index_in_dim(items, index, 0, keepdims=False,
                                      allow_negative_indices=False)


def tf_get_item(input_handle, index):
  """The property oracle of ``tf.TensorListGetItem``."""
  return _tf().raw_ops.TensorListGetItem(
      input_handle=_tf_list(input_handle), index=index,
      element_shape=_element_shape(input_handle), element_dtype=input_handle.dtype)


def _get_item_spec(st):
  @st.composite
  def calls(draw):
    items = _draw_items(st, draw, min_length=1)
    return dict(input_handle=items, index=np.int32(draw(st.integers(0, len(items) - 1))))
  return st.Spec(calls(), grad_oracle=_GRAD_ORACLE, oracle=tf_get_item,
                 operands=("input_handle", "index"))


GetItem = define_op(
    "TensorListGetItem", _get_item_impl, family=FAMILY, spec=_get_item_spec,
    jvp=(lambda t, items, index: GetItem(t, index), None),
    transpose=lambda ct, items, index: [
        SetItem(_zeros_like_aval(items), index, ct) if U(items) else None, None],
    interpret=_get_item_interpret)


def _gather_impl(items, indices):
  """Rows ``indices`` of items."""
  return jnp.take(items, indices, axis=0)


def tf_gather(input_handle, indices):
  """The property oracle of ``tf.TensorListGather``."""
  return _tf().raw_ops.TensorListGather(
      input_handle=_tf_list(input_handle), indices=indices,
      element_shape=_element_shape(input_handle), element_dtype=input_handle.dtype)


def _gather_spec(st):
  @st.composite
  def calls(draw):
    items = _draw_items(st, draw)
    return dict(input_handle=items, indices=_draw_indices(st, draw, len(items)))
  # TF's gradient scatters the cotangents back (TensorListScatter), so an element
  # gathered twice gets the last cotangent, not their sum: ours is the derivative,
  # checked against central differences of TF's forward pass.
  return st.Spec(calls(), grad_oracle="fd", oracle=tf_gather,
                 operands=("input_handle", "indices"),
                 note="gradient sums the cotangents of repeated indices (TF keeps the last)")


Gather = define_op(
    "TensorListGather", _gather_impl, family=FAMILY, spec=_gather_spec,
    jvp=(lambda t, items, indices: Gather(t, indices), None),
    transpose=lambda ct, items, indices: [
        _zeros_like_aval(items).at[indices].add(ct) if U(items) else None, None],
    interpret=_gather_interpret)


def _scatter_into_impl(items, tensor, indices):
  """items with rows ``indices`` replaced by ``tensor``."""
  return jnp.asarray(items).at[indices].set(jnp.asarray(tensor).astype(items.dtype))


def _scatter_into_jvp(primals, tangents):
  items, tensor, indices = primals
  t_items, t_tensor, _ = tangents
  out = ScatterInto(items, tensor, indices)
  if type(t_items) is ad.Zero and type(t_tensor) is ad.Zero:
    return out, ad.Zero(jax.typeof(out).to_tangent_aval())
  return out, ScatterInto(_inst(t_items, items), _inst(t_tensor, tensor), indices)


def tf_scatter_into_existing_list(input_handle, tensor, indices):
  """The property oracle of ``tf.TensorListScatterIntoExistingList``."""
  return _tf_stacked(_tf().raw_ops.TensorListScatterIntoExistingList(
      input_handle=_tf_list(input_handle), tensor=tensor, indices=indices), input_handle)


def _scatter_into_spec(st):
  @st.composite
  def calls(draw):
    items = _draw_items(st, draw)
    indices = _draw_indices(st, draw, len(items), unique=True)  # TF: one write per element
    return dict(input_handle=items, indices=indices,
                tensor=draw(st.arrays(items.dtype, (len(indices),) + items.shape[1:])))
  return st.Spec(calls(), grad_oracle=_GRAD_ORACLE, oracle=tf_scatter_into_existing_list,
                 operands=("input_handle", "tensor", "indices"))


ScatterInto = define_op(
    "TensorListScatterIntoExistingList", _scatter_into_impl, family=FAMILY,
    spec=_scatter_into_spec,
    jvp=_scatter_into_jvp,
    transpose=lambda ct, items, tensor, indices: [
        ScatterInto(ct, _zeros_like_aval(tensor), indices) if U(items) else None,
        Gather(ct, indices) if U(tensor) else None, None],
    interpret=_scatter_into_interpret)


def _scatter_v2_impl(tensor, indices, *, num_elements):
  """A list of ``num_elements`` zeros with rows ``indices`` set to ``tensor``."""
  zeros = jnp.zeros((num_elements,) + tuple(tensor.shape[1:]), tensor.dtype)
  return zeros.at[indices].set(tensor)


def tf_scatter_v2(tensor, indices, num_elements):
  """The property oracle of ``tf.TensorListScatterV2``."""
  return _tf_stacked(_tf().raw_ops.TensorListScatterV2(
      tensor=tensor, indices=indices, element_shape=_element_shape(tensor),
      num_elements=num_elements), tensor)


def tf_scatter(tensor, indices):
  """The property oracle of ``tf.TensorListScatter`` (V1: as many elements as the
  largest index + 1)."""
  return _tf_stacked(_tf().raw_ops.TensorListScatter(
      tensor=tensor, indices=indices, element_shape=_element_shape(tensor)), tensor)


def _scatter_spec(v2: bool):
  def spec(st):
    @st.composite
    def calls(draw):
      num = draw(st.integers(1 if not v2 else 0, 5))
      indices = _draw_indices(st, draw, num, unique=True)
      if not v2 and len(indices):
        num = int(indices.max()) + 1
      tensor = draw(st.arrays(st.dtypes(st.ALL), (len(indices),) +
                              tuple(draw(st.shapes(max_rank=2)))))
      return dict(tensor=tensor, indices=indices, **({"num_elements": np.int32(num)}
                                                     if v2 else {}))
    if v2:
      return st.Spec(calls(), grad_oracle=_GRAD_ORACLE, oracle=tf_scatter_v2,
                     operands=("tensor", "indices"),
                     params=lambda kw: {"num_elements": int(kw["num_elements"])})
    return st.Spec(calls(), grad_oracle=_GRAD_ORACLE, oracle=tf_scatter,
                   operands=("tensor", "indices"),
                   params=lambda kw: {"num_elements": int(np.max(kw["indices"]) + 1)
                                      if np.size(kw["indices"]) else 0})
  return spec


ScatterV2 = define_op(
    "TensorListScatterV2", _scatter_v2_impl, family=FAMILY, spec=_scatter_spec(True),
    jvp=(lambda t, tensor, indices, **p: ScatterV2(t, indices, **p), None),
    transpose=lambda ct, tensor, indices, **p: [Gather(ct, indices) if U(tensor) else None,
                                                None],
    interpret=_scatter_v2_interpret)


Scatter = define_op(
    "TensorListScatter", _scatter_v2_impl, family=FAMILY, spec=_scatter_spec(False),
    jvp=(lambda t, tensor, indices, **p: Scatter(t, indices, **p), None),
    transpose=lambda ct, tensor, indices, **p: [Gather(ct, indices) if U(tensor) else None,
                                                None],
    interpret=_scatter_v1_interpret)


def _push_back_impl(items, tensor):
  """items with ``tensor`` appended."""
  return jnp.concatenate([items, jnp.asarray(tensor, items.dtype)[None]], axis=0)


def _pop_back_impl(items):
  """(items without its last row, the last row)."""
  return items[:-1], items[-1]


def tf_push_back(input_handle, tensor):
  """The property oracle of ``tf.TensorListPushBack``."""
  return _tf_stacked(_tf().raw_ops.TensorListPushBack(
      input_handle=_tf_list(input_handle), tensor=tensor), input_handle)


def tf_pop_back(input_handle):
  """The property oracle of ``tf.TensorListPopBack``: (the rest, the last element)."""
  rest, last = _tf().raw_ops.TensorListPopBack(
      input_handle=_tf_list(input_handle), element_shape=_element_shape(input_handle),
      element_dtype=input_handle.dtype)
  return _tf_stacked(rest, input_handle), last


def _push_back_spec(st):
  @st.composite
  def calls(draw):
    items = _draw_items(st, draw)
    return dict(input_handle=items, tensor=draw(st.arrays(items.dtype, items.shape[1:])))
  return st.Spec(calls(), grad_oracle=_GRAD_ORACLE, oracle=tf_push_back,
                 operands=("input_handle", "tensor"))


def _pop_back_spec(st):
  @st.composite
  def calls(draw):
    return dict(input_handle=_draw_items(st, draw, min_length=1))
  return st.Spec(calls(), grad_oracle=_GRAD_ORACLE, oracle=tf_pop_back,
                 operands=("input_handle",))


PushBack = define_op(
    "TensorListPushBack", _push_back_impl, family=FAMILY, spec=_push_back_spec, linear=True,
    transpose=lambda ct, items, tensor: list(PopBack(ct)),
    interpret=_push_back_interpret)

PopBack = define_op(
    "TensorListPopBack", _pop_back_impl, family=FAMILY, spec=_pop_back_spec, linear=True,
    multiple_results=True,
    transpose=lambda cts, items: [PushBack(_inst(cts[0], _rest_aval(items)),
                                          _inst(cts[1], _last_aval(items)))],
    interpret=_pop_back_interpret)


def _rest_aval(items):
  aval = items.aval
  return jax.ShapeDtypeStruct((aval.shape[0] - 1,) + aval.shape[1:], aval.dtype)


def _last_aval(items):
  aval = items.aval
  return jax.ShapeDtypeStruct(aval.shape[1:], aval.dtype)


def _concat_impl(items):
  """The elements concatenated along their first axis."""
  return items.reshape((items.shape[0] * items.shape[1],) + items.shape[2:])


def tf_concat_v2(input_handle):
  """The property oracle of ``tf.TensorListConcatV2`` (its tensor output; the
  lengths output is the interpreter's, from static shapes)."""
  tf = _tf()
  return tf.raw_ops.TensorListConcatV2(
      input_handle=_tf_list(input_handle), element_shape=_element_shape(input_handle),
      leading_dims=tf.constant([], tf.int64), element_dtype=input_handle.dtype)[0]


def tf_concat(input_handle):
  """The property oracle of ``tf.TensorListConcat`` (V1; its tensor output)."""
  return _tf().raw_ops.TensorListConcat(
      input_handle=_tf_list(input_handle), element_dtype=input_handle.dtype,
      element_shape=input_handle.shape[1:])[0]


def _concat_spec(oracle):
  def spec(st):
    @st.composite
    def calls(draw):
      return dict(input_handle=_draw_items(st, draw, min_rank=1))
    return st.Spec(calls(), grad_oracle=_GRAD_ORACLE, oracle=oracle,
                   operands=("input_handle",))
  return spec


ConcatV2 = define_op(
    "TensorListConcatV2", _concat_impl, family=FAMILY, spec=_concat_spec(tf_concat_v2),
    linear=True,
    transpose=lambda ct, items: [ct.reshape(items.aval.shape)],
    interpret=_concat_interpret)


Concat = define_op(
    "TensorListConcat", _concat_impl, family=FAMILY, spec=_concat_spec(tf_concat), linear=True,
    transpose=lambda ct, items: [ct.reshape(items.aval.shape)],
    interpret=_concat_interpret)


def _concat_lists_impl(a, b):
  """The elements of list ``a`` followed by those of list ``b``."""
  return jnp.concatenate([a, jnp.asarray(b, a.dtype)], axis=0)


def _concat_lists_jvp(primals, tangents):
  # TF declares TensorListConcatLists not differentiable (no gradient flows through
  # it); tfprims keeps that: its derivative is zero.
  out = ConcatLists(*primals)
  return out, ad.Zero(jax.typeof(out).to_tangent_aval())


def tf_concat_lists(input_a, input_b):
  """The property oracle of ``tf.TensorListConcatLists``."""
  return _tf_stacked(_tf().raw_ops.TensorListConcatLists(
      input_a=_tf_list(input_a), input_b=_tf_list(input_b), element_dtype=input_a.dtype),
      input_a)


def _concat_lists_spec(st):
  @st.composite
  def calls(draw):
    a = _draw_items(st, draw)
    b = draw(st.arrays(a.dtype, (draw(st.integers(0, 4)),) + a.shape[1:]))
    return dict(input_a=a, input_b=b)
  return st.Spec(calls(), grad_oracle=_GRAD_ORACLE, oracle=tf_concat_lists,
                 operands=("input_a", "input_b"))


ConcatLists = define_op(
    "TensorListConcatLists", _concat_lists_impl, family=FAMILY, spec=_concat_lists_spec,
    jvp=_concat_lists_jvp,
    interpret=_concat_lists_interpret)


def _resize_impl(items, *, size):
  """items truncated or zero-padded to ``size`` rows."""
  n = items.shape[0]
  if size <= n:
    return items[:size]
  return jnp.concatenate([items, jnp.zeros((size - n,) + items.shape[1:], items.dtype)])


def tf_resize(input_handle, size):
  """The property oracle of ``tf.TensorListResize`` (new elements read as zeros)."""
  return _tf_stacked(_tf().raw_ops.TensorListResize(
      input_handle=_tf_list(input_handle), size=size), input_handle)


def _resize_spec(st):
  @st.composite
  def calls(draw):
    return dict(input_handle=_draw_items(st, draw), size=np.int32(draw(st.integers(0, 6))))
  return st.Spec(calls(), grad_oracle=_GRAD_ORACLE, oracle=tf_resize,
                 operands=("input_handle",),
                 params=lambda kw: {"size": int(kw["size"])})


Resize = define_op(
    "TensorListResize", _resize_impl, family=FAMILY, spec=_resize_spec, linear=True,
    transpose=lambda ct, items, *, size: [Resize(ct, size=items.aval.shape[0])],
    interpret=_resize_interpret)


# --- bookkeeping ops (no primitive is bound) ---------------------------------------------


def _reserve_interpret(ctx, node, inputs):
  shape = decode_shape(inputs[0])
  n = _static_int(node, inputs[1], "num_elements")
  if n < 0:
    raise errors.OpError(node.op, node.name, f"negative num_elements {n}")
  lst = TensorList(None, n, _dtype(node), shape)
  return [lst.materialized() if lst.shape_known else lst]


def _empty_interpret(ctx, node, inputs):
  return [TensorList(None, 0, _dtype(node), decode_shape(inputs[0]))]


def _from_tensor_interpret(ctx, node, inputs):
  tensor = inputs[0]
  if np.ndim(tensor) < 1:
    raise errors.OpError(node.op, node.name, "needs a tensor of rank >= 1")
  merge_shapes(decode_shape(inputs[1]), tuple(np.shape(tensor)[1:]), node)
  return [TensorList(tensor, np.shape(tensor)[0], _dtype(node), None)]


def _stack_interpret(ctx, node, inputs):
  lst = _list(node, inputs[0])
  num = node.attr("num_elements", -1)
  if num is not None and num >= 0 and num != lst.length:
    raise errors.OpError(node.op, node.name,
                         f"expected {num} elements, the list has {lst.length}")
  return [lst.materialized(decode_shape(inputs[1]), node).items]


def _length_interpret(ctx, node, inputs):
  return [np.asarray(_list(node, inputs[0]).length, np.int32)]


def _element_shape_interpret(ctx, node, inputs):
  lst = _list(node, inputs[0])
  dtype = dtypes.canonical_dtype(node.attr("shape_type"))
  if lst.element_shape is None:
    return [np.asarray(-1, dtype)]
  return [np.asarray([-1 if d is None else d for d in lst.element_shape], dtype)]


def _split_interpret(ctx, node, inputs):
  tensor, element_shape, lengths = inputs
  if not core.is_concrete(lengths):
    raise errors.TensorListSizeError(
        f"{node.op} node '{node.name}': lengths depend on runtime data")
  lengths = np.asarray(lengths).reshape(-1)
  if lengths.size and (lengths != lengths[0]).any():
    raise errors.OpError(node.op, node.name,
                         f"splits into pieces of different lengths {lengths.tolist()}; "
                         "ragged lists are not supported")
  n = int(lengths.size)
  d = int(lengths[0]) if n else 0
  shape = tuple(np.shape(tensor))
  if n * d != shape[0]:
    raise errors.OpError(node.op, node.name,
                         f"lengths sum to {n * d}, the tensor has {shape[0]} rows")
  items = tfops.Reshape.apply([tensor], {"shape": (n, d) + shape[1:]})
  return [TensorList(items, n, _dtype(node), None)]


def _bookkeeping(op_type: str, hook, doc: str, **traits):
  register_structural(op_type, hook, family=FAMILY, doc=doc, **traits)


_bookkeeping("TensorListReserve", _reserve_interpret,
             "A list of num_elements uninitialized elements (zeros once read).")
_bookkeeping("EmptyTensorList", _empty_interpret, "An empty list.")
_bookkeeping("TensorListFromTensor", _from_tensor_interpret,
             "The list of the tensor's rows (no copy).")
_bookkeeping("TensorListStack", _stack_interpret,
             "The elements stacked: the dense items themselves.")
_bookkeeping("TensorListLength", _length_interpret, "The static length.")
_bookkeeping("TensorListElementShape", _element_shape_interpret,
             "The (partial) element shape; -1 for unknown dims or rank.", shape_only=True)
_bookkeeping("TensorListSplit", _split_interpret,
             "Splits a tensor into equal-length pieces (ragged pieces are refused).")
