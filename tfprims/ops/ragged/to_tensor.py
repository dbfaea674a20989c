"""RaggedTensorToTensor (``rt.to_tensor()``): a ragged tensor's row partitions and
flat values scattered into a dense tensor, padded with ``default_value``.

The primitive ``tf.RaggedTensorToTensor[shape=... row_partition_types=...]`` takes
the output shape as a static param. The node's hook resolves it as TF's kernel
does: the ``shape`` input's dims where given (rows and columns past them are
dropped), else the row count and the longest row of each ragged level. The longest
rows depend on the partitions' values: known in eager calls and for partitions
built from constants (or proven constant by value analysis), they are traced under
jit, where an unknown dim raises DynamicShapeError naming the node.
"""

from __future__ import annotations

import math
from typing import Optional, Sequence

import jax.numpy as jnp
import numpy as np

from tfprims import core, errors, interpreter, opdefs, rules
from tfprims.core import register_op, tfops
from tfprims.ops.ragged._common import FAMILY, known_ints, op_error, unknown_size
from tfprims.ops.ragged._specs import to_tensor_spec

_SPLITS, _ROWIDS, _NROWS = "ROW_SPLITS", "VALUE_ROWIDS", "FIRST_DIM_SIZE"


def partition_levels(types: Sequence[str]) -> int:
  """The index of the first partition of a ragged level (after FIRST_DIM_SIZE)."""
  return 1 if types and types[0] == _NROWS else 0


def check_types(types: Sequence[str]) -> None:
  """TF's kernel accepts ROW_SPLITS levels, or FIRST_DIM_SIZE then VALUE_ROWIDS or
  ROW_SPLITS levels (ROW_LENGTHS is declared but not handled)."""
  first = partition_levels(types)
  if not types[first:]:
    raise ValueError("Invalid row_partition_types: no ragged level")
  for i, t in enumerate(types[first:]):
    if t == _ROWIDS and first == 0:
      raise ValueError("Cannot handle type VALUE_ROWIDS without FIRST_DIM_SIZE")
    if t not in (_SPLITS, _ROWIDS):
      raise ValueError(f"Cannot handle partition type {t}")
    if t == _ROWIDS and i and types[first + i - 1] == _SPLITS:
      # the row count of the VALUE_ROWIDS level is then the splits' last value
      raise ValueError(
        "tfprims converts ROW_SPLITS levels followed by ROW_SPLITS ones "
        "and VALUE_ROWIDS levels, not VALUE_ROWIDS after ROW_SPLITS"
      )


def _widest(partition: np.ndarray, kind: str) -> int:
  """The longest row of a level: from row splits, or runs of equal value row ids."""
  p = np.asarray(partition).astype(np.int64).reshape(-1)
  if kind == _SPLITS:
    return int(max(np.max(np.diff(p)), 0)) if p.size > 1 else 0
  if p.size == 0:
    return 0
  breaks = np.flatnonzero(np.diff(p) != 0)
  return int(np.max(np.diff(np.concatenate([[-1], breaks, [p.size - 1]]))))


def output_shape(
  shape,
  values_shape: Sequence[int],
  partitions: Sequence[Optional[np.ndarray]],
  partition_sizes: Sequence[int],
  types: Sequence[str],
) -> tuple:
  """The output shape as TF's kernel computes it; None for a dim that needs the value
  of a partition that is not known. Raises ValueError where TF rejects the shape."""
  check_types(types)
  first = partition_levels(types)
  levels = len(types) - first
  inner = tuple(int(d) for d in values_shape[1:])
  rank = levels + 1 + len(inner)
  shape = np.asarray(shape).astype(np.int64)
  given = [-1] * rank if shape.ndim == 0 and shape == -1 else [int(d) for d in shape.reshape(-1)]
  if len(given) != rank:
    raise ValueError(
      f"rt_input.shape and shape={given} are incompatible: rt_input.rank = "
      f"{rank} but shape.rank = {len(given)}"
    )
  for i, d in enumerate(inner):
    if given[levels + 1 + i] not in (-1, d):
      raise ValueError(
        f"rt_input.shape and shape={given} are incompatible: "
        f"rt_input.shape[{levels + 1 + i}] = {d} but shape[{levels + 1 + i}] "
        f"= {given[levels + 1 + i]}"
      )
  out: list = []
  if given[0] >= 0:
    out.append(given[0])
  elif first:
    out.append(None if partitions[0] is None else int(partitions[0]))
  else:
    out.append(partition_sizes[0] - 1)
  for level in range(levels):
    p, kind = partitions[first + level], types[first + level]
    out.append(
      given[level + 1] if given[level + 1] >= 0 else None if p is None else _widest(p, kind)
    )
  return tuple(out) + inner


def _children(parts, kinds, n_values, level) -> int:
  """How many items the level below ``level`` has (static: an operand's length)."""
  if kinds[level] == _ROWIDS:
    return parts[level].shape[0]
  if level + 1 < len(parts):
    return parts[level + 1].shape[0] - (1 if kinds[level + 1] == _SPLITS else 0)
  return n_values


def flat_positions(parts, kinds, n_values, shape):
  """Each flat value's position in the output flattened over its ragged dims, or -1
  where it falls outside ``shape`` (a row cut off by a given shape)."""
  pos = None
  for level, (p, kind) in enumerate(zip(parts, kinds)):
    width = shape[level + 1]
    j = jnp.arange(_children(parts, kinds, n_values, level), dtype=p.dtype)
    if kind == _SPLITS:
      nrows = p.shape[0] - 1
      row = jnp.searchsorted(p, j, side="right").astype(p.dtype) - 1
      ok = (row >= 0) & (row < nrows)
      start = p[jnp.clip(row, 0, max(nrows, 0))]
    else:
      row, ok = p, p >= 0
      start = jnp.searchsorted(p, p, side="left").astype(p.dtype)
    col = j - start
    if pos is None:
      parent, ok = row, ok & (row < shape[0])
    elif pos.shape[0] == 0:
      parent, ok = row, jnp.zeros_like(ok)
    else:
      parent = pos[jnp.clip(row, 0, pos.shape[0] - 1)]
      ok = ok & (row < pos.shape[0]) & (parent >= 0)
    pos = jnp.where(ok & (col >= 0) & (col < width), parent * width + col, -1)
  return pos


def to_tensor(values, default_value, *partitions, shape, row_partition_types):
  """``values`` placed at their ragged positions in a dense ``shape``, the rest
  ``default_value`` (broadcast to the inner dims)."""
  types = row_partition_types
  first = partition_levels(types)
  values = jnp.asarray(values)  # known partitions may be numpy: index them as jax arrays
  parts, kinds = [jnp.asarray(p) for p in partitions[first:]], types[first:]
  outer = shape[: len(parts) + 1]
  size = math.prod(outer)
  inner = tuple(values.shape[1:])
  out = jnp.broadcast_to(jnp.asarray(default_value, values.dtype), (size,) + inner)
  pos = flat_positions(parts, kinds, values.shape[0], shape)
  out = out.at[jnp.where(pos >= 0, pos, size)].set(values, mode="drop")
  return out.reshape(shape)


def _positions(parts, types, n_values, shape):
  """The flat values' output rows (``size``, past the end, where cut) and the size."""
  first = partition_levels(types)
  size = math.prod(shape[: len(types) - first + 1])
  pos = flat_positions([jnp.asarray(p) for p in parts[first:]], types[first:], n_values, shape)
  return jnp.where(pos >= 0, pos, size), size


def _to_tensor_jvp(primals, tangents, **params):
  """Linear in the values and default_value together: the same op on the tangents."""
  values, default, *parts = primals
  tv, td = (rules.instantiate(t) for t in tangents[:2])
  return (
    tfops.RaggedTensorToTensor(values, default, *parts, **params),
    tfops.RaggedTensorToTensor(tv, td, *parts, **params),
  )


def _to_tensor_transpose(ct, values, default, *parts, shape, row_partition_types):
  """The values' cotangent gathered from their output rows (zero where cut), the
  default's summed over the rows no value fills."""
  ct = rules.instantiate(ct)
  levels = len(row_partition_types) - partition_levels(row_partition_types)
  inner = tuple(shape[levels + 1 :])
  rows, size = _positions(parts, row_partition_types, rules.shape_of(values)[0], shape)
  flat = rules.reshape(ct, (size,) + inner)
  out = [None] * (2 + len(parts))
  if rules.U(values):
    padded = tfops.ConcatV2(flat, rules.zeros((1,) + inner, rules.dtype_of(ct)), axis=0)
    out[0] = tfops.GatherV2(padded, rows, axis=0, batch_dims=0)
  if rules.U(default):
    filled = jnp.zeros((size,), bool).at[rows].set(True, mode="drop")
    unfilled = tfops.SelectV2(
      filled.reshape((size,) + (1,) * len(inner)), rules.zeros((), rules.dtype_of(ct)), flat
    )
    out[1] = rules.unbroadcast(unfilled, rules.shape_of(default))
  return out


_vmapped = rules.vmap_batching(to_tensor, False)


def _to_tensor_batching(args, dims, *, shape, row_partition_types):
  """A batch of values (and defaults) over one ragged structure: the batch axis
  becomes the values' first inner dim of one ``tf.RaggedTensorToTensor``, then moves
  to the front. Batched partitions take ``jax.vmap`` of the impl."""
  values, default, *parts = args
  dv, dd, *dp = dims
  if any(d is not None for d in dp):
    return _vmapped(args, dims, shape=shape, row_partition_types=row_partition_types)
  size = rules.batch_size(args, dims)
  levels = len(row_partition_types) - partition_levels(row_partition_types)
  inner = tuple(shape[levels + 1 :])
  values = rules.move_axes(rules.with_batch_axis(values, dv, size), [0], [1])
  if dd is None:  # unbatched: broadcast along the new inner batch dim as it is
    default = (
      rules.reshape(default, (1,) * (len(inner) + 1 - np.ndim(default)) + rules.shape_of(default))
      if np.ndim(default)
      else default
    )
  else:  # (B, d...) -> (B, 1.., d...) right-aligned under the inner dims
    default = rules.to_front(default, dd)
    dshape = rules.shape_of(default)
    default = rules.reshape(
      default, dshape[:1] + (1,) * (len(inner) + 1 - len(dshape)) + dshape[1:]
    )
  out_shape = tuple(shape[: levels + 1]) + (size,) + inner
  out = tfops.RaggedTensorToTensor(
    values, default, *parts, shape=out_shape, row_partition_types=row_partition_types
  )
  return rules.move_axes(out, [levels + 1], [0]), 0


def partitions_check(values, default_value, *partitions, shape, row_partition_types):
  """What TF's kernel rejects: row splits not starting at 0 or decreasing, value row
  ids negative, unsorted or not below the row count."""
  types = row_partition_types
  first = partition_levels(types)
  bad = jnp.zeros((), bool)
  for level, (p, kind) in enumerate(zip(partitions[first:], types[first:])):
    if p.shape[0] == 0:
      bad = bad | (kind == _SPLITS)
      continue
    bad = bad | jnp.any(jnp.diff(p) < 0)
    if kind == _SPLITS:
      bad = bad | (p[0] != 0)
    else:
      bad = bad | (p[0] < 0)
      if level == 0:
        bad = bad | (p[-1] >= partitions[0])
  return bad, (
    "Invalid row partition: row splits must start at 0 and not decrease; "
    "value row ids must be sorted, non-negative and below the row count"
  )


def _interpret(ctx, node, inputs):
  op = core.lookup(node.op)
  grouped = opdefs.group_inputs(node.op, inputs, interpreter.AttrView(node))
  types = tuple(
    t.decode() if isinstance(t, bytes) else str(t) for t in node.attr("row_partition_types")
  )
  parts = list(grouped["row_partition_tensors"])
  values, default = grouped["values"], grouped["default_value"]
  shape = known_ints(ctx, grouped["shape"])
  if shape is None:
    raise errors.StaticInputError(node.op, node.name, "shape")
  operands = [values, default, *parts]
  params = {"shape": None, "row_partition_types": types}
  interpreter.run_check(op, node, operands, params)
  try:
    out_shape = output_shape(
      shape,
      np.shape(values),
      [known_ints(ctx, p) for p in parts],
      [np.shape(p)[0] if np.ndim(p) else 0 for p in parts],
      types,
    )
  except ValueError as e:
    raise op_error(node, str(e)) from None
  if None in out_shape:
    raise unknown_size(node, "the output's dim " + str(out_shape.index(None)))
  if np.ndim(default) > len(out_shape) - len(types) + partition_levels(types) - 1:
    raise op_error(
      node,
      f"default_value.shape={list(np.shape(default))} and "
      f"rt_input.flat_values.shape={list(np.shape(values))} are incompatible",
    )
  params["shape"] = out_shape
  return [op.apply(operands, params)]


def _spec(st):
  return to_tensor_spec(st, output_shape)


RaggedTensorToTensor = register_op(
  "RaggedTensorToTensor",
  to_tensor,
  family=FAMILY,
  attrs=("row_partition_types",),
  check=partitions_check,
  interpret=_interpret,
  jvp=_to_tensor_jvp,
  transpose=_to_tensor_transpose,
  batching=_to_tensor_batching,
  dynamic_shape="an inferred dim (no shape given) is the longest row of a ragged level",
  doc="A ragged tensor (flat values and row partitions) as a dense tensor of the "
  "static shape param, padded with default_value; rows beyond it are cut.",
  spec=_spec,
)
