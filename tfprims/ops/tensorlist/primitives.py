"""The TensorList primitives: ops that compute on a list's dense items.

Each binds its own primitive (``tf.TensorListSetItem``, ``tf.TensorListGetItem``,
...) on the items ``[length, *element_shape]``, with TF-named JVP and transpose
rules, and is run by its interpreter hook (:mod:`~tfprims.ops.tensorlist.hooks`),
which keeps the list's metadata.

Property specs: a list input is drawn as its items and is the primitive's
operand; the oracle wraps it in a TF list (TensorListFromTensor) and stacks list
outputs back (TensorListStack), so the runner compares and differentiates plain
arrays, TF's list-op gradients included. TF's forward mode cannot see through
list handles (ForwardAccumulator raises on variants): JVPs are checked against
GradientTape (a dot-product test).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from jax.interpreters import ad

from tfprims.core import register_op, tfops
from tfprims.ops.tensorlist import hooks
from tfprims.ops.tensorlist.value import FAMILY
from tfprims.errors import import_tensorflow

U = ad.is_undefined_primal

_GRAD_ORACLE = "vjp"  # see the module docstring

# --- oracles and spec helpers ----------------------------------------------------------


def _tf():
  tf = import_tensorflow()  # the oracles run only in property tests
  return tf


def _element_shape(like):
  return _tf().shape(like, out_type="int32")[1:]


def _tf_list(items):
  return _tf().raw_ops.TensorListFromTensor(tensor=items, element_shape=_element_shape(items))


def _tf_stacked(handle, like):
  """A TF list as its items (elements never written read as zeros, like ours)."""
  return _tf().raw_ops.TensorListStack(
    input_handle=handle, element_shape=_element_shape(like), element_dtype=like.dtype
  )


def _draw_items(st, draw, min_length=0, min_rank=0):
  dtype = draw(st.dtypes(st.ALL))
  element_shape = draw(st.shapes(min_rank=min_rank, max_rank=2))
  length = draw(st.integers(min_length, 4))
  return draw(st.arrays(dtype, (length,) + tuple(element_shape)))


def _draw_indices(st, draw, below, unique=False):
  size = draw(st.integers(0, below if unique else 4))
  values = (
    draw(st.lists(st.integers(0, below - 1), min_size=size, max_size=size, unique=unique))
    if below
    else []
  )
  return np.array(values, np.int32)


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


# --- the primitives, each with its impl, rules, oracle and spec -------------------------


def _set_item_impl(items, index, item):
  """items with row ``index`` replaced by ``item``."""
  return jax.lax.dynamic_update_index_in_dim(
    items, jnp.asarray(item, items.dtype), index, 0, allow_negative_indices=False
  )


def _set_item_build(B, items, index, item):
  if index.ndim or item.dtype != items.dtype:
    return None
  zeros = [B.full(0, (), index.dtype)] * (items.ndim - 1)
  return B.dynamic_update_slice(items, B.reshape(item, (1,) + tuple(item.shape)), [index] + zeros)


def _set_item_jvp(primals, tangents):
  items, index, item = primals
  t_items, _, t_item = tangents
  out = tfops.TensorListSetItem(items, index, item)
  if type(t_items) is ad.Zero and type(t_item) is ad.Zero:
    return out, ad.Zero(jax.typeof(out).to_tangent_aval())
  return out, tfops.TensorListSetItem(_inst(t_items, items), index, _inst(t_item, item))


def _set_item_transpose(ct, items, index, item):
  ct_items = tfops.TensorListSetItem(ct, index, _zeros_like_aval(item)) if U(items) else None
  ct_item = tfops.TensorListGetItem(ct, index) if U(item) else None
  return [ct_items, None, ct_item]


def tf_set_item(input_handle, index, item):
  """The property oracle of ``tf.TensorListSetItem`` (a list drawn as its items)."""
  return _tf_stacked(
    _tf().raw_ops.TensorListSetItem(input_handle=_tf_list(input_handle), index=index, item=item),
    input_handle,
  )


def _set_item_spec(st):
  @st.composite
  def calls(draw):
    items = _draw_items(st, draw, min_length=1)
    return dict(
      input_handle=items,
      index=np.int32(draw(st.integers(0, len(items) - 1))),
      item=draw(st.arrays(items.dtype, items.shape[1:])),
    )

  return st.Spec(
    calls(),
    grad_oracle=_GRAD_ORACLE,
    oracle=tf_set_item,
    operands=("input_handle", "index", "item"),
  )


SetItem = register_op(
  "TensorListSetItem",
  _set_item_impl,
  family=FAMILY,
  spec=_set_item_spec,
  build=_set_item_build,
  jvp=_set_item_jvp,
  transpose=_set_item_transpose,
  interpret=hooks.set_item,
)


def _get_item_impl(items, index):
  """Row ``index`` of items."""
  return jax.lax.dynamic_index_in_dim(items, index, 0, keepdims=False, allow_negative_indices=False)


def _get_item_build(B, items, index):
  if index.ndim:
    return None
  zeros = [B.full(0, (), index.dtype)] * (items.ndim - 1)
  row = B.dynamic_slice(items, [index] + zeros, (1,) + tuple(items.shape[1:]))
  return B.reshape(row, items.shape[1:])


def tf_get_item(input_handle, index):
  """The property oracle of ``tf.TensorListGetItem``."""
  return _tf().raw_ops.TensorListGetItem(
    input_handle=_tf_list(input_handle),
    index=index,
    element_shape=_element_shape(input_handle),
    element_dtype=input_handle.dtype,
  )


def _get_item_spec(st):
  @st.composite
  def calls(draw):
    items = _draw_items(st, draw, min_length=1)
    return dict(input_handle=items, index=np.int32(draw(st.integers(0, len(items) - 1))))

  return st.Spec(
    calls(), grad_oracle=_GRAD_ORACLE, oracle=tf_get_item, operands=("input_handle", "index")
  )


GetItem = register_op(
  "TensorListGetItem",
  _get_item_impl,
  family=FAMILY,
  spec=_get_item_spec,
  build=_get_item_build,
  jvp=(lambda t, items, index: tfops.TensorListGetItem(t, index), None),
  transpose=lambda ct, items, index: [
    tfops.TensorListSetItem(_zeros_like_aval(items), index, ct) if U(items) else None,
    None,
  ],
  interpret=hooks.get_item,
)


def _gather_impl(items, indices):
  """Rows ``indices`` of items."""
  return jnp.take(items, indices, axis=0)


def tf_gather(input_handle, indices):
  """The property oracle of ``tf.TensorListGather``."""
  return _tf().raw_ops.TensorListGather(
    input_handle=_tf_list(input_handle),
    indices=indices,
    element_shape=_element_shape(input_handle),
    element_dtype=input_handle.dtype,
  )


def _gather_spec(st):
  @st.composite
  def calls(draw):
    items = _draw_items(st, draw)
    return dict(input_handle=items, indices=_draw_indices(st, draw, len(items)))

  # TF's gradient scatters the cotangents back (TensorListScatter), so an element
  # gathered twice gets the last cotangent, not their sum: ours is the derivative,
  # checked against central differences of TF's forward pass.
  return st.Spec(
    calls(),
    grad_oracle="fd",
    oracle=tf_gather,
    operands=("input_handle", "indices"),
    note="gradient sums the cotangents of repeated indices (TF keeps the last)",
  )


Gather = register_op(
  "TensorListGather",
  _gather_impl,
  family=FAMILY,
  spec=_gather_spec,
  jvp=(lambda t, items, indices: tfops.TensorListGather(t, indices), None),
  transpose=lambda ct, items, indices: [
    _zeros_like_aval(items).at[indices].add(ct) if U(items) else None,
    None,
  ],
  interpret=hooks.gather,
)


def _scatter_into_impl(items, tensor, indices):
  """items with rows ``indices`` replaced by ``tensor``."""
  return jnp.asarray(items).at[indices].set(jnp.asarray(tensor).astype(items.dtype))


def _scatter_into_jvp(primals, tangents):
  items, tensor, indices = primals
  t_items, t_tensor, _ = tangents
  out = tfops.TensorListScatterIntoExistingList(items, tensor, indices)
  if type(t_items) is ad.Zero and type(t_tensor) is ad.Zero:
    return out, ad.Zero(jax.typeof(out).to_tangent_aval())
  return out, tfops.TensorListScatterIntoExistingList(
    _inst(t_items, items), _inst(t_tensor, tensor), indices
  )


def tf_scatter_into_existing_list(input_handle, tensor, indices):
  """The property oracle of ``tf.TensorListScatterIntoExistingList``."""
  return _tf_stacked(
    _tf().raw_ops.TensorListScatterIntoExistingList(
      input_handle=_tf_list(input_handle), tensor=tensor, indices=indices
    ),
    input_handle,
  )


def _scatter_into_spec(st):
  @st.composite
  def calls(draw):
    items = _draw_items(st, draw)
    indices = _draw_indices(st, draw, len(items), unique=True)  # TF: one write per element
    return dict(
      input_handle=items,
      indices=indices,
      tensor=draw(st.arrays(items.dtype, (len(indices),) + items.shape[1:])),
    )

  return st.Spec(
    calls(),
    grad_oracle=_GRAD_ORACLE,
    oracle=tf_scatter_into_existing_list,
    operands=("input_handle", "tensor", "indices"),
  )


ScatterInto = register_op(
  "TensorListScatterIntoExistingList",
  _scatter_into_impl,
  family=FAMILY,
  spec=_scatter_into_spec,
  jvp=_scatter_into_jvp,
  transpose=lambda ct, items, tensor, indices: [
    tfops.TensorListScatterIntoExistingList(ct, _zeros_like_aval(tensor), indices)
    if U(items)
    else None,
    tfops.TensorListGather(ct, indices) if U(tensor) else None,
    None,
  ],
  interpret=hooks.scatter_into,
)


def _scatter_v2_impl(tensor, indices, *, num_elements):
  """A list of ``num_elements`` zeros with rows ``indices`` set to ``tensor``."""
  zeros = jnp.zeros((num_elements,) + tuple(tensor.shape[1:]), tensor.dtype)
  return zeros.at[indices].set(tensor)


def tf_scatter_v2(tensor, indices, num_elements):
  """The property oracle of ``tf.TensorListScatterV2``."""
  return _tf_stacked(
    _tf().raw_ops.TensorListScatterV2(
      tensor=tensor,
      indices=indices,
      element_shape=_element_shape(tensor),
      num_elements=num_elements,
    ),
    tensor,
  )


def tf_scatter(tensor, indices):
  """The property oracle of ``tf.TensorListScatter`` (V1: as many elements as the
  largest index + 1)."""
  return _tf_stacked(
    _tf().raw_ops.TensorListScatter(
      tensor=tensor, indices=indices, element_shape=_element_shape(tensor)
    ),
    tensor,
  )


def _scatter_spec(v2: bool):
  def spec(st):
    @st.composite
    def calls(draw):
      num = draw(st.integers(1 if not v2 else 0, 5))
      indices = _draw_indices(st, draw, num, unique=True)
      if not v2 and len(indices):
        num = int(indices.max()) + 1
      tensor = draw(
        st.arrays(st.dtypes(st.ALL), (len(indices),) + tuple(draw(st.shapes(max_rank=2))))
      )
      return dict(tensor=tensor, indices=indices, **({"num_elements": np.int32(num)} if v2 else {}))

    if v2:
      return st.Spec(
        calls(),
        grad_oracle=_GRAD_ORACLE,
        oracle=tf_scatter_v2,
        operands=("tensor", "indices"),
        params=lambda kw: {"num_elements": int(kw["num_elements"])},
      )
    return st.Spec(
      calls(),
      grad_oracle=_GRAD_ORACLE,
      oracle=tf_scatter,
      operands=("tensor", "indices"),
      params=lambda kw: {
        "num_elements": int(np.max(kw["indices"]) + 1) if np.size(kw["indices"]) else 0
      },
    )

  return spec


ScatterV2 = register_op(
  "TensorListScatterV2",
  _scatter_v2_impl,
  family=FAMILY,
  spec=_scatter_spec(True),
  jvp=(lambda t, tensor, indices, **p: tfops.TensorListScatterV2(t, indices, **p), None),
  transpose=lambda ct, tensor, indices, **p: [
    tfops.TensorListGather(ct, indices) if U(tensor) else None,
    None,
  ],
  interpret=hooks.scatter_v2,
)


Scatter = register_op(
  "TensorListScatter",
  _scatter_v2_impl,
  family=FAMILY,
  spec=_scatter_spec(False),
  jvp=(lambda t, tensor, indices, **p: tfops.TensorListScatter(t, indices, **p), None),
  transpose=lambda ct, tensor, indices, **p: [
    tfops.TensorListGather(ct, indices) if U(tensor) else None,
    None,
  ],
  interpret=hooks.scatter_v1,
)


def _push_back_impl(items, tensor):
  """items with ``tensor`` appended."""
  return jnp.concatenate([items, jnp.asarray(tensor, items.dtype)[None]], axis=0)


def _pop_back_impl(items):
  """(items without its last row, the last row)."""
  return items[:-1], items[-1]


def _rest_aval(items):
  aval = items.aval
  return jax.ShapeDtypeStruct((aval.shape[0] - 1,) + aval.shape[1:], aval.dtype)


def _last_aval(items):
  aval = items.aval
  return jax.ShapeDtypeStruct(aval.shape[1:], aval.dtype)


def tf_push_back(input_handle, tensor):
  """The property oracle of ``tf.TensorListPushBack``."""
  return _tf_stacked(
    _tf().raw_ops.TensorListPushBack(input_handle=_tf_list(input_handle), tensor=tensor),
    input_handle,
  )


def tf_pop_back(input_handle):
  """The property oracle of ``tf.TensorListPopBack``: (the rest, the last element)."""
  rest, last = _tf().raw_ops.TensorListPopBack(
    input_handle=_tf_list(input_handle),
    element_shape=_element_shape(input_handle),
    element_dtype=input_handle.dtype,
  )
  return _tf_stacked(rest, input_handle), last


def _push_back_spec(st):
  @st.composite
  def calls(draw):
    items = _draw_items(st, draw)
    return dict(input_handle=items, tensor=draw(st.arrays(items.dtype, items.shape[1:])))

  return st.Spec(
    calls(), grad_oracle=_GRAD_ORACLE, oracle=tf_push_back, operands=("input_handle", "tensor")
  )


def _pop_back_spec(st):
  @st.composite
  def calls(draw):
    return dict(input_handle=_draw_items(st, draw, min_length=1))

  return st.Spec(calls(), grad_oracle=_GRAD_ORACLE, oracle=tf_pop_back, operands=("input_handle",))


PushBack = register_op(
  "TensorListPushBack",
  _push_back_impl,
  family=FAMILY,
  spec=_push_back_spec,
  linear=True,
  transpose=lambda ct, items, tensor: list(tfops.TensorListPopBack(ct)),
  interpret=hooks.push_back,
)

PopBack = register_op(
  "TensorListPopBack",
  _pop_back_impl,
  family=FAMILY,
  spec=_pop_back_spec,
  linear=True,
  multiple_results=True,
  transpose=lambda cts, items: [
    tfops.TensorListPushBack(_inst(cts[0], _rest_aval(items)), _inst(cts[1], _last_aval(items)))
  ],
  interpret=hooks.pop_back,
)


def _concat_impl(items):
  """The elements concatenated along their first axis."""
  return items.reshape((items.shape[0] * items.shape[1],) + items.shape[2:])


def tf_concat_v2(input_handle):
  """The property oracle of ``tf.TensorListConcatV2`` (its tensor output; the
  lengths output is the interpreter's, from static shapes)."""
  tf = _tf()
  return tf.raw_ops.TensorListConcatV2(
    input_handle=_tf_list(input_handle),
    element_shape=_element_shape(input_handle),
    leading_dims=tf.constant([], tf.int64),
    element_dtype=input_handle.dtype,
  )[0]


def tf_concat(input_handle):
  """The property oracle of ``tf.TensorListConcat`` (V1; its tensor output)."""
  return _tf().raw_ops.TensorListConcat(
    input_handle=_tf_list(input_handle),
    element_dtype=input_handle.dtype,
    element_shape=input_handle.shape[1:],
  )[0]


def _concat_spec(oracle):
  def spec(st):
    @st.composite
    def calls(draw):
      return dict(input_handle=_draw_items(st, draw, min_rank=1))

    return st.Spec(calls(), grad_oracle=_GRAD_ORACLE, oracle=oracle, operands=("input_handle",))

  return spec


ConcatV2 = register_op(
  "TensorListConcatV2",
  _concat_impl,
  family=FAMILY,
  spec=_concat_spec(tf_concat_v2),
  linear=True,
  transpose=lambda ct, items: [ct.reshape(items.aval.shape)],
  interpret=hooks.concat_v2,
)


Concat = register_op(
  "TensorListConcat",
  _concat_impl,
  family=FAMILY,
  spec=_concat_spec(tf_concat),
  linear=True,
  transpose=lambda ct, items: [ct.reshape(items.aval.shape)],
  interpret=hooks.concat_v1,
)


def _concat_lists_impl(a, b):
  """The elements of list ``a`` followed by those of list ``b``."""
  return jnp.concatenate([a, jnp.asarray(b, a.dtype)], axis=0)


def _concat_lists_jvp(primals, tangents):
  # TF declares TensorListConcatLists not differentiable (no gradient flows through
  # it); tfprims keeps that: its derivative is zero.
  out = tfops.TensorListConcatLists(*primals)
  return out, ad.Zero(jax.typeof(out).to_tangent_aval())


def tf_concat_lists(input_a, input_b):
  """The property oracle of ``tf.TensorListConcatLists``."""
  return _tf_stacked(
    _tf().raw_ops.TensorListConcatLists(
      input_a=_tf_list(input_a), input_b=_tf_list(input_b), element_dtype=input_a.dtype
    ),
    input_a,
  )


def _concat_lists_spec(st):
  @st.composite
  def calls(draw):
    a = _draw_items(st, draw)
    b = draw(st.arrays(a.dtype, (draw(st.integers(0, 4)),) + a.shape[1:]))
    return dict(input_a=a, input_b=b)

  return st.Spec(
    calls(), grad_oracle=_GRAD_ORACLE, oracle=tf_concat_lists, operands=("input_a", "input_b")
  )


ConcatLists = register_op(
  "TensorListConcatLists",
  _concat_lists_impl,
  family=FAMILY,
  spec=_concat_lists_spec,
  jvp=_concat_lists_jvp,
  interpret=hooks.concat_lists,
)


def _resize_impl(items, *, size):
  """items truncated or zero-padded to ``size`` rows."""
  n = items.shape[0]
  if size <= n:
    return items[:size]
  return jnp.concatenate([items, jnp.zeros((size - n,) + items.shape[1:], items.dtype)])


def tf_resize(input_handle, size):
  """The property oracle of ``tf.TensorListResize`` (new elements read as zeros)."""
  return _tf_stacked(
    _tf().raw_ops.TensorListResize(input_handle=_tf_list(input_handle), size=size), input_handle
  )


def _resize_spec(st):
  @st.composite
  def calls(draw):
    return dict(input_handle=_draw_items(st, draw), size=np.int32(draw(st.integers(0, 6))))

  return st.Spec(
    calls(),
    grad_oracle=_GRAD_ORACLE,
    oracle=tf_resize,
    operands=("input_handle",),
    params=lambda kw: {"size": int(kw["size"])},
  )


Resize = register_op(
  "TensorListResize",
  _resize_impl,
  family=FAMILY,
  spec=_resize_spec,
  linear=True,
  transpose=lambda ct, items, *, size: [tfops.TensorListResize(ct, size=items.aval.shape[0])],
  interpret=hooks.resize,
)
