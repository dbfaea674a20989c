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

Submodules:

* :mod:`~tfprims.ops.tensorlist.value`: the :class:`TensorList` value,
  :class:`NeedsConcreteIndex`, :class:`UnavailableList`, element-shape helpers
  and the input checks the hooks share;
* :mod:`~tfprims.ops.tensorlist.primitives`: the primitives (SetItem, GetItem,
  Gather, Scatter*, PushBack, PopBack, Concat*, Resize), each with its impl,
  rules, TF oracle and property spec;
* :mod:`~tfprims.ops.tensorlist.hooks`: the primitives' interpreter hooks
  (list metadata, trace-time checks, then a bind on the items);
* :mod:`~tfprims.ops.tensorlist.bookkeeping`: the structural ops;
* :mod:`~tfprims.ops.tensorlist.tensor_array`: TF1's TensorArrayV3 ops, whose flow is
  the list;
* :mod:`~tfprims.ops.tensorlist.batch`: vectors of lists (:class:`TensorListBatch`,
  ``tf.stack`` of list handles) and TensorListPushBackBatch.
"""

from tfprims.ops.tensorlist import batch, bookkeeping, hooks, primitives, value
from tfprims.ops.tensorlist import tensor_array
from tfprims.ops.tensorlist.batch import PushBackBatch, TensorListBatch
from tfprims.ops.tensorlist.primitives import (
  Concat,
  ConcatLists,
  ConcatV2,
  Gather,
  GetItem,
  PopBack,
  PushBack,
  Resize,
  Scatter,
  ScatterInto,
  ScatterV2,
  SetItem,
  tf_concat,
  tf_concat_lists,
  tf_concat_v2,
  tf_gather,
  tf_get_item,
  tf_pop_back,
  tf_push_back,
  tf_resize,
  tf_scatter,
  tf_scatter_into_existing_list,
  tf_scatter_v2,
  tf_set_item,
)
from tfprims.ops.tensorlist.value import (
  FAMILY,
  NeedsConcreteIndex,
  TensorList,
  UnavailableList,
  add_lists,
  decode_shape,
  host_rows,
  is_variant_list,
  merge_shapes,
  zeros_list,
)
