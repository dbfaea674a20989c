"""Batches of TensorLists: TensorListPushBackBatch.

A 1-D variant tensor whose elements are lists (``tf.stack`` of list handles, a
``Pack`` node) is a :class:`TensorListBatch` inside the interpreter: a tuple of
:class:`TensorList` (a pytree, so it crosses control flow like a list). ``Pack``
of lists makes one and ``Unpack`` gives the lists back (array's join_split hooks
call :func:`pack_lists`/:func:`unpack_lists`).

``tf.TensorListPushBackBatch`` appends ``tensor[b]`` to list ``b``. Its primitive
computes on the stacked items ``[batch, length, *element_shape]``, so the lists
of a batch must have one length (TF allows ragged batches; tfprims refuses them
naming the node). It is linear: its transpose splits the cotangent back into the
items and the pushed row (``tf.SplitV`` + ``tf.Squeeze``); under vmap the mapped
axis is folded into the list batch (``tf.Reshape``).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from tfprims import errors, rules
from tfprims.core import register_op, tfops
from tfprims.ops.tensorlist.value import FAMILY, TensorList, as_list
from tfprims.errors import import_tensorflow


@jax.tree_util.register_pytree_node_class
class TensorListBatch:
  """A vector of TensorLists (a 1-D TF variant tensor of list handles)."""

  __slots__ = ("lists",)

  def __init__(self, lists):
    self.lists = tuple(lists)

  def tree_flatten(self):
    return self.lists, None

  @classmethod
  def tree_unflatten(cls, aux, children):
    return cls(children)

  def __repr__(self):
    return f"TensorListBatch({len(self.lists)} lists)"


def is_list_value(value) -> bool:
  """Whether ``value`` is a TensorList or a batch of them (a variant tensor)."""
  return isinstance(value, (TensorList, TensorListBatch))


def pack_lists(node, values) -> TensorListBatch:
  """``Pack`` of list handles (axis 0): the batch of those lists."""
  if node.attr("axis", 0) not in (0, -1):
    raise errors.OpError(node.op, node.name, "packs TensorLists along an axis other than 0")
  return TensorListBatch(as_list(node, v) for v in values)


def unpack_lists(node, value) -> list:
  """``Unpack`` of a batch of lists: the lists."""
  if not isinstance(value, TensorListBatch):
    raise errors.OpError(
      node.op, node.name, "unpacks a TensorList handle that is not a vector of lists"
    )
  num = node.attr("num", len(value.lists))
  if num != len(value.lists):
    raise errors.OpError(
      node.op, node.name, f"unpacks {num} lists from a batch of {len(value.lists)}"
    )
  return list(value.lists)


# --- the primitive ----------------------------------------------------------------------


def _push_back_batch_impl(items, tensor):
  """``items[b]`` (list ``b``'s elements) with ``tensor[b]`` appended."""
  if tensor.shape[:1] != items.shape[:1] or tuple(tensor.shape[1:]) != tuple(items.shape[2:]):
    raise ValueError(
      f"TensorListPushBackBatch: tensor of shape {list(tensor.shape)} for lists "
      f"of items {list(items.shape)}"
    )
  return jnp.concatenate([items, jnp.asarray(tensor, items.dtype)[:, None]], axis=1)


def _push_back_batch_transpose(ct, items, tensor):
  length = rules.shape_of(items)[1]
  head, last = tfops.SplitV(ct, size_splits=(length, 1), axis=1, num_split=2)
  return [
    head if rules.U(items) else None,
    tfops.Squeeze(last, squeeze_dims=(1,)) if rules.U(tensor) else None,
  ]


def _push_back_batch_batching(args, dims):
  (items, tensor), (di, dt) = args, dims
  size = rules.batch_size(args, dims)
  items, tensor = rules.with_batch_axis(items, di, size), rules.with_batch_axis(tensor, dt, size)
  shape = rules.shape_of(items)
  out = tfops.TensorListPushBackBatch(
    rules.reshape(items, (size * shape[1],) + shape[2:]),
    rules.reshape(tensor, (size * shape[1],) + shape[3:]),
  )
  return rules.reshape(out, (size, shape[1], shape[2] + 1) + shape[3:]), 0


def _push_back_batch_interpret(ctx, node, inputs):
  batch, tensor = inputs
  if not isinstance(batch, TensorListBatch):
    raise errors.OpError(
      node.op,
      node.name,
      f"expects a vector of TensorLists (tf.stack of list handles), got {type(batch).__name__}",
    )
  lists = [as_list(node, lst) for lst in batch.lists]
  shape = tuple(np.shape(tensor))
  if not shape or shape[0] != len(lists):
    raise errors.OpError(
      node.op,
      node.name,
      f"Expected tensor.shape[0] == input_handles.size, "
      f"but saw {shape[0] if shape else 'a scalar'} vs. {len(lists)}",
    )
  lengths = sorted({lst.length for lst in lists})
  if len(lengths) > 1:
    raise errors.TensorListSizeError(
      f"{node.op} node '{node.name}' pushes onto lists of different lengths {lengths}; "
      "tfprims stacks a batch of lists densely and needs one length"
    )
  dtype = np.dtype(node.attr("element_dtype"))
  lists = [lst.materialized(shape[1:], node) for lst in lists]
  for lst in lists:
    if lst.element_dtype != dtype:
      raise errors.OpError(
        node.op, node.name, f"a list of {lst.element_dtype} elements, the op pushes {dtype}"
      )
    if tuple(np.shape(lst.items)[1:]) != shape[1:]:
      raise errors.OpError(
        node.op,
        node.name,
        "Tried to append a tensor with incompatible "
        f"shape {list(shape[1:])} to a list of elements "
        f"{list(np.shape(lst.items)[1:])}",
      )
  if not lists:
    return [TensorListBatch(())]
  items = tfops.Pack.apply([lst.items for lst in lists], {"axis": 0})
  out = tfops.TensorListPushBackBatch.apply([items, tensor], {})
  rows = tfops.Unpack.apply([out], {"num": len(lists), "axis": 0})
  return [TensorListBatch(TensorList(r, lengths[0] + 1, dtype, shape[1:]) for r in rows)]


def tf_push_back_batch(input_handles, tensor):
  """The property oracle of ``tf.TensorListPushBackBatch``: ``input_handles`` is drawn
  as the stacked items of the lists (each row becomes a TF list)."""
  tf = import_tensorflow()
  element_shape = tf.constant(input_handles.shape[2:], tf.int32)
  handles = (
    tf.stack(
      [
        tf.raw_ops.TensorListFromTensor(tensor=row, element_shape=element_shape)
        for row in tf.unstack(tf.constant(input_handles))
      ]
    )
    if input_handles.shape[0]
    else tf.zeros((0,), tf.variant)
  )
  out = tf.raw_ops.TensorListPushBackBatch(input_handles=handles, tensor=tensor)
  rows = [
    tf.raw_ops.TensorListStack(
      input_handle=h, element_shape=element_shape, element_dtype=tensor.dtype
    )
    for h in tf.unstack(out)
  ]
  if not rows:
    return tf.zeros((0, input_handles.shape[1] + 1) + input_handles.shape[2:], tensor.dtype)
  return tf.stack(rows)


def _push_back_batch_spec(st):
  @st.composite
  def calls(draw):
    dtype = draw(st.dtypes(st.ALL))
    batch, length = draw(st.integers(1, 3)), draw(st.integers(0, 3))
    element = tuple(draw(st.shapes(max_rank=2, max_side=3)))
    return dict(
      input_handles=draw(st.arrays(dtype, (batch, length) + element)),
      tensor=draw(st.arrays(dtype, (batch,) + element)),
    )

  return st.Spec(
    calls(),
    grad_oracle="fd",
    oracle=tf_push_back_batch,
    operands=("input_handles", "tensor"),
    note="TF declares TensorListPushBackBatch not differentiable; ours is linear "
    "(checked against central differences)",
  )


PushBackBatch = register_op(
  "TensorListPushBackBatch",
  _push_back_batch_impl,
  family=FAMILY,
  linear=True,
  transpose=_push_back_batch_transpose,
  batching=_push_back_batch_batching,
  interpret=_push_back_batch_interpret,
  spec=_push_back_batch_spec,
)
