"""Joining and splitting: ConcatV2, Pack, Unpack, Split, SplitV.

All five are linear and transpose to each other (ConcatV2 -> SplitV, Split/SplitV
-> ConcatV2, Pack <-> Unpack; symbolic-zero cotangents of the split outputs are
made concrete with ``tf.Fill``). Under vmap the joins broadcast unbatched operands
with ``tf.BroadcastTo``; the axis moves by one. Pack/Unpack of TensorList handles
make and split a vector of lists (``tfprims.ops.tensorlist.batch``).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from tfprims import emit, interpreter, rules
from tfprims.core import register_op, tfops
from tfprims.ops.array._common import FAMILY, norm_axis
from tfprims.ops.shared import VariantTensor, scalar_int, stack_variants
from tfprims.ops.shared_specs import index_array, lazy_hst
from tfprims.ops.tensorlist import batch as list_batch
from tfprims.rules import U


def _concat_impl(*values, axis):
  rank = values[0].ndim
  if rank == 0:
    raise ValueError("ConcatV2: can't concatenate scalars (use tf.stack instead)")
  return jnp.concatenate(values, axis=norm_axis(scalar_int(axis), rank))


def _concat_build(B, *values, axis):
  if values[0].ndim == 0 or len({v.dtype for v in values}) != 1:
    return None  # the impl raises TF's error or promotes
  return B.concatenate(values, norm_axis(scalar_int(axis), values[0].ndim))


def _concat_transpose(ct, *values, axis):
  shapes = [rules.shape_of(v) for v in values]
  ax = norm_axis(scalar_int(axis), len(shapes[0]))
  sizes = tuple(s[ax] for s in shapes)
  parts = (
    tfops.SplitV(ct, size_splits=sizes, axis=ax, num_split=len(sizes)) if len(sizes) > 1 else [ct]
  )
  return [p if U(v) else None for p, v in zip(parts, values)]


def _concat_batch(args, dims, *, axis):
  size = rules.batch_size(args, dims)
  rank = len(rules.unbatched_shape(args[0], dims[0]))
  ax = norm_axis(scalar_int(axis), rank)
  values = [rules.with_batch_axis(a, d, size) for a, d in zip(args, dims)]
  return tfops.ConcatV2(*values, axis=ax + 1), 0


def _concat_shape(*values, axis):
  rank = len(values[0].shape)
  if rank == 0 or len({(v.dtype, len(v.shape)) for v in values}) != 1:
    return None  # the impl raises the error
  ax = norm_axis(scalar_int(axis), rank)
  shape = list(values[0].shape)
  if any(
    tuple(v.shape[:ax]) + tuple(v.shape[ax + 1 :]) != tuple(shape[:ax] + shape[ax + 1 :])
    for v in values
  ):
    return None
  shape[ax] = sum(v.shape[ax] for v in values)
  return jax.ShapeDtypeStruct(tuple(shape), values[0].dtype)


ConcatV2 = register_op(
  "ConcatV2",
  _concat_impl,
  family=FAMILY,
  static=("axis",),
  linear=True,
  build=_concat_build,
  shape_rule=_concat_shape,
  transpose=_concat_transpose,
  batching=_concat_batch,
  spec=lambda st: st.Spec(_concat_calls(st)),
)


def _pack_impl(*values, axis):
  return jnp.stack(values, axis=norm_axis(axis, values[0].ndim + 1))


def _pack_transpose(ct, *values, axis):
  ax = norm_axis(axis, len(rules.shape_of(values[0])) + 1)
  parts = tfops.Unpack(ct, num=len(values), axis=ax)
  return [p if U(v) else None for p, v in zip(parts, values)]


def _pack_batch(args, dims, *, axis):
  size = rules.batch_size(args, dims)
  ax = norm_axis(axis, len(rules.unbatched_shape(args[0], dims[0])) + 1)
  values = [rules.with_batch_axis(a, d, size) for a, d in zip(args, dims)]
  return tfops.Pack(*values, axis=ax + 1), 0


def _pack_interpret(ctx, node, inputs):
  # tf.stack of TensorList handles (a vector of lists): see tfprims.ops.tensorlist.batch.
  if any(list_batch.is_list_value(v) for v in inputs):
    return [list_batch.pack_lists(node, inputs)]
  if any(isinstance(v, VariantTensor) for v in inputs):  # tf.stack of ragged variants
    return [stack_variants(node, inputs)]
  return interpreter.bind_node(ctx, tfops.Pack, node, inputs)


def _unpack_interpret(ctx, node, inputs):
  if list_batch.is_list_value(inputs[0]):
    return list_batch.unpack_lists(node, inputs[0])
  return interpreter.bind_node(ctx, tfops.Unpack, node, inputs)


Pack = register_op(
  "Pack",
  _pack_impl,
  family=FAMILY,
  attrs=("axis",),
  linear=True,
  transpose=_pack_transpose,
  batching=_pack_batch,
  interpret=_pack_interpret,
  spec=lambda st: st.Spec(_pack_calls(st)),
)


def _unpack_impl(value, *, num, axis):
  ax = norm_axis(axis, value.ndim)
  if value.shape[ax] != num:
    raise ValueError(f"Unpack: input dimension {ax} has size {value.shape[ax]}, not num={num}")
  return tuple(lax.index_in_dim(value, i, ax, keepdims=False) for i in range(num))


def _unpack_transpose(cts, x, *, num, axis):
  cts = [rules.instantiate(ct) for ct in cts]
  return [tfops.Pack(*cts, axis=norm_axis(axis, len(rules.shape_of(x))))]


def _unpack_batch(args, dims, *, num, axis):
  (x,), (d,) = args, dims
  ax = norm_axis(axis, x.ndim - 1)
  return list(tfops.Unpack(rules.to_front(x, d), num=num, axis=ax + 1)), [0] * num


Unpack = register_op(
  "Unpack",
  _unpack_impl,
  family=FAMILY,
  attrs=("num", "axis"),
  multiple_results=True,
  linear=True,
  transpose=_unpack_transpose,
  batching=_unpack_batch,
  interpret=_unpack_interpret,
  spec=lambda st: st.Spec(_unpack_calls(st)),
)


def _split_build(B, value, *, axis, num_split):
  ax = norm_axis(scalar_int(axis), value.ndim)
  n = value.shape[ax]
  if num_split <= 0 or n % num_split:
    raise ValueError(
      f"Split: number of ways to split should evenly divide the split "
      f"dimension, but got split_dim {ax} (size = {n}) and num_split {num_split}"
    )
  k = n // num_split
  start, limit = [0] * value.ndim, list(value.shape)
  parts = []
  for i in range(num_split):
    start[ax], limit[ax] = i * k, (i + 1) * k
    parts.append(B.slice(value, tuple(start), tuple(limit)))
  return tuple(parts)


_split_impl = emit.traced(_split_build)


def _split_transpose(cts, x, *, axis, num_split, size_splits=None):
  """Split's and SplitV's transpose: the cotangents concatenated."""
  cts = [rules.instantiate(ct) for ct in cts]
  if num_split == 1:
    return cts
  return [tfops.ConcatV2(*cts, axis=norm_axis(scalar_int(axis), len(rules.shape_of(x))))]


def _split_batch(args, dims, *, axis, num_split):
  (x,), (d,) = args, dims
  ax = norm_axis(scalar_int(axis), x.ndim - 1)
  return list(tfops.Split(rules.to_front(x, d), axis=ax + 1, num_split=num_split)), [0] * num_split


Split = register_op(
  "Split",
  _split_impl,
  family=FAMILY,
  static={"split_dim": "axis"},
  attrs=("num_split",),
  multiple_results=True,
  build=_split_build,
  linear=True,
  transpose=_split_transpose,
  batching=_split_batch,
  spec=lambda st: st.Spec(_split_calls(st)),
)


def _split_sizes(size_splits, n, num_split: int) -> tuple:
  """The pieces' sizes: ints, or symbolic dims of a jax.export (the transpose of a
  concatenation along an axis of unknown size), whose checks are TF's when it runs."""
  sizes = list(rules.sizes(size_splits))
  if len(sizes) != num_split:
    raise ValueError(f"SplitV: size_splits has {len(sizes)} entries, num_split is {num_split}")
  unknown = [i for i, s in enumerate(sizes) if type(s) is int and s == -1]
  if len(unknown) > 1:
    raise ValueError("SplitV: there can only be one -1 in size_splits")
  if any(type(s) is int and s < -1 for s in sizes):
    raise ValueError(f"SplitV: size_splits must be >= -1, got {tuple(sizes)}")
  total = sum(s for i, s in enumerate(sizes) if i not in unknown)
  if unknown:
    if rules.known((total, n)) and total > n:
      raise ValueError(f"SplitV: size_splits {tuple(sizes)} exceed the dimension size {n}")
    sizes[unknown[0]] = n - total
  elif rules.known((total, n)) and total != n:
    raise ValueError(
      f"SplitV: determined shape must either match input shape along "
      f"split_dim exactly if fully specified, or be less than the size of the "
      f"input along split_dim if not fully specified. Got: {total} vs {n}"
    )
  return tuple(sizes)


def _splitv_impl(value, *, size_splits, axis, num_split):
  ax = norm_axis(scalar_int(axis), value.ndim)
  sizes = _split_sizes(size_splits, value.shape[ax], num_split)
  starts = [sum(sizes[:i]) for i in range(num_split + 1)]
  return tuple(lax.slice_in_dim(value, starts[i], starts[i + 1], axis=ax) for i in range(num_split))


def _splitv_batch(args, dims, *, size_splits, axis, num_split):
  (x,), (d,) = args, dims
  ax = norm_axis(scalar_int(axis), x.ndim - 1)
  out = tfops.SplitV(
    rules.to_front(x, d), size_splits=size_splits, axis=ax + 1, num_split=num_split
  )
  return list(out), [0] * num_split


SplitV = register_op(
  "SplitV",
  _splitv_impl,
  family=FAMILY,
  static={"size_splits": "size_splits", "split_dim": "axis"},
  attrs=("num_split",),
  multiple_results=True,
  linear=True,
  transpose=_split_transpose,
  batching=_splitv_batch,
  spec=lambda st: st.Spec(_splitv_calls(st)),
)


# --- property-test strategies (hypothesis is imported lazily) ---------------------


def _same_shape_arrays(draw, st, n, shape, dtype):
  return [draw(st.arrays(dtype, shape)) for _ in range(n)]


def _concat_calls(st):
  hst = lazy_hst()

  @st.composite
  def calls(draw):
    dtype = draw(st.dtypes(st.ALL))
    shape = draw(st.shapes(min_rank=1, max_rank=3))
    axis = draw(hst.integers(-len(shape), len(shape) - 1))
    n = draw(hst.integers(2, 3))
    values = []
    for _ in range(n):
      s = list(shape)
      s[axis] = draw(hst.integers(0, 3))
      values.append(draw(st.arrays(dtype, tuple(s))))
    return {"values": values, "axis": index_array(draw, st, axis)}

  return calls()


def _pack_calls(st):
  hst = lazy_hst()

  @st.composite
  def calls(draw):
    dtype = draw(st.dtypes(st.ALL))
    shape = draw(st.shapes(max_rank=3))
    n = draw(hst.integers(1, 3))
    axis = draw(hst.integers(-len(shape) - 1, len(shape)))
    return {"values": _same_shape_arrays(draw, st, n, shape, dtype), "axis": axis}

  return calls()


def _unpack_calls(st):
  hst = lazy_hst()

  @st.composite
  def calls(draw):
    x = draw(st.arrays(st.dtypes(st.ALL), st.shapes(min_rank=1)))
    axis = draw(hst.integers(-x.ndim, x.ndim - 1))
    return {"value": x, "num": x.shape[axis], "axis": axis}

  return calls()


def _split_calls(st):
  hst = lazy_hst()

  @st.composite
  def calls(draw):
    x = draw(st.arrays(st.dtypes(st.ALL), st.shapes(min_rank=1)))
    axis = draw(hst.integers(-x.ndim, x.ndim - 1))
    n = x.shape[axis]
    num = draw(hst.sampled_from([k for k in range(1, 5) if n % k == 0]))
    return {"split_dim": np.int32(axis), "value": x, "num_split": num}

  return calls()


def _splitv_calls(st):
  hst = lazy_hst()

  @st.composite
  def calls(draw):
    x = draw(st.arrays(st.dtypes(st.ALL), st.shapes(min_rank=1)))
    axis = draw(hst.integers(-x.ndim, x.ndim - 1))
    n = x.shape[axis]
    cuts = sorted(draw(hst.lists(hst.integers(0, n), max_size=3)))
    sizes = [b - a for a, b in zip([0] + cuts, cuts + [n])]
    if len(sizes) > 1 and draw(hst.booleans()):
      sizes[draw(hst.integers(0, len(sizes) - 1))] = -1
    return {
      "value": x,
      "size_splits": index_array(draw, st, sizes, ("int8", "int32", "int64")),
      "split_dim": np.int32(axis),
      "num_split": len(sizes),
    }

  return calls()
