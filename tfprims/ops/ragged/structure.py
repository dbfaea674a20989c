"""The ragged ops whose outputs are ragged structures: RaggedGather (``tf.gather`` on
a ragged tensor), RaggedRange (``tf.ragged.range``) and RaggedTensorToSparse
(``rt.to_sparse()``).

RaggedGather's and RaggedRange's output sizes are the gathered rows' total length
and the ranges' total size: the primitives take them as static params
(``tf.RaggedGather[sizes=...]``, ``tf.RaggedRange[size=...]``), which the nodes'
hooks compute with numpy from the known row splits, indices or range bounds
(eager calls, constants, values the value analysis proves), as TF's kernels do.
Traced, they raise DynamicShapeError naming the node. RaggedTensorToSparse has one
index per value element: its shapes are static.
"""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np
from jax import lax

from tfprims import core, folding, interpreter, opdefs
from tfprims import dtypes as tfdtypes
from tfprims.core import register_op
from tfprims.ops.ragged._common import FAMILY, known_ints, op_error, unknown_size
from tfprims.ops.ragged._specs import gather_spec, range_spec, to_sparse_spec


def row_col(splits, items):
  """The row of each item of a level (indices into it) in row splits, and its column."""
  row = jnp.searchsorted(splits, items, side="right").astype(splits.dtype) - 1
  row = jnp.clip(row, 0, max(splits.shape[0] - 2, 0))
  return row, items - splits[row]


def _rows_of(splits, n):
  return row_col(splits, jnp.arange(n, dtype=splits.dtype))


def _splits_check(*splits, xp=jnp):
  """Row splits TF rejects: empty, not starting at 0 or decreasing (``xp``: jax.numpy
  for the op's check, numpy for known values in a hook)."""
  bad = xp.zeros((), bool)
  for s in splits:
    if s.shape[0] == 0:
      bad = xp.ones((), bool)
      continue
    bad = bad | (s[0] != 0) | xp.any(xp.diff(s) < 0)
  return bad


_BAD_SPLITS = "Invalid row splits: they must start at 0 and not decrease"


# --- RaggedGather ----------------------------------------------------------------------------


def gather(*operands, sizes, PARAMS_RAGGED_RANK, OUTPUT_RAGGED_RANK):
  """The rows ``indices`` of a ragged tensor: their nested row splits and flat values
  (``sizes``: each output level's item count, the last the values')."""
  operands = [jnp.asarray(o) for o in operands]  # known splits may be numpy
  splits, values, indices = operands[:PARAMS_RAGGED_RANK], operands[-2], operands[-1]
  rows = indices.astype(splits[0].dtype)
  out = []
  for s, n in zip(splits, sizes):
    if rows.shape[0] == 0:
      out.append(jnp.zeros((1,), s.dtype))
      rows = jnp.zeros((0,), s.dtype)
      continue
    starts, limits = s[rows], s[rows + 1]
    new = jnp.concatenate([jnp.zeros((1,), s.dtype), jnp.cumsum(limits - starts).astype(s.dtype)])
    out.append(new)
    r, col = _rows_of(new, n)
    rows = starts[r] + col
  return (
    *out,
    jnp.take(values, rows, axis=0)
    if rows.shape[0]
    else jnp.zeros((0,) + values.shape[1:], values.dtype),
  )


def gather_sizes(splits, indices) -> tuple:
  """Each level's gathered item count, with numpy (TF's errors as ValueError)."""
  nrows = splits[0].shape[0] - 1
  bad = np.flatnonzero((indices < 0) | (indices >= nrows))
  if bad.size:
    i = int(bad[0])
    raise ValueError(f"indices[{i}] = {int(indices[i])} is not in [0, {nrows})")
  rows, sizes = indices.astype(np.int64), []
  for s in splits:
    s = s.astype(np.int64)
    starts, limits = s[rows], s[rows + 1]
    sizes.append(int(np.sum(limits - starts)))
    rows = np.concatenate(
      [np.arange(a, b) for a, b in zip(starts, limits)] + [np.zeros(0, np.int64)]
    )
  return tuple(sizes)


def _gather_interpret(ctx, node, inputs):
  op = core.lookup(node.op)
  grouped = opdefs.group_inputs(node.op, inputs, interpreter.AttrView(node))
  splits, values, indices = (
    list(grouped["params_nested_splits"]),
    grouped["params_dense_values"],
    grouped["indices"],
  )
  rank = int(node.attr("PARAMS_RAGGED_RANK"))
  if np.ndim(indices) != 1 or int(node.attr("OUTPUT_RAGGED_RANK")) != rank:
    raise op_error(
      node,
      "tfprims converts RaggedGather of a vector of indices only "
      f"(indices of shape {list(np.shape(indices))})",
    )
  known = [known_ints(ctx, s) for s in splits]
  idx = known_ints(ctx, indices)
  if idx is None or any(k is None for k in known):
    raise unknown_size(node, "the gathered rows' total length")
  try:
    if bool(_splits_check(*known, xp=np)):
      raise ValueError(_BAD_SPLITS)
    sizes = gather_sizes(known, idx)
  except ValueError as e:
    raise op_error(node, str(e)) from None
  params = {"sizes": sizes, "PARAMS_RAGGED_RANK": rank, "OUTPUT_RAGGED_RANK": rank}
  return list(op.apply([*splits, values, indices], params))


def _gather_spec(st):
  return gather_spec(st, gather_sizes)


RaggedGather = register_op(
  "RaggedGather",
  gather,
  family=FAMILY,
  multiple_results=True,
  attrs=("PARAMS_RAGGED_RANK", "OUTPUT_RAGGED_RANK"),
  interpret=_gather_interpret,
  dynamic_shape="the output's size is the gathered rows' total length",
  doc="Rows of a ragged tensor (a vector of indices): the output's nested row splits "
  "and flat values, their sizes a static param.",
  spec=_gather_spec,
)


# --- RaggedRange -----------------------------------------------------------------------------


def range_sizes(starts, limits, deltas, xp):
  empty = ((deltas > 0) & (limits < starts)) | ((deltas < 0) & (limits > starts))
  if np.dtype(starts.dtype).kind in "iu":
    n = (xp.abs(limits - starts) + xp.abs(deltas) - 1) // xp.where(deltas == 0, 1, xp.abs(deltas))
  else:
    n = xp.ceil(xp.abs((limits - starts) / deltas))
  return xp.where(empty, 0, n)


def ragged_range(starts, limits, deltas, *, size, T, Tsplits):
  """TF's RaggedRange: row splits and the values ``start, start + delta, ...`` of each
  row, accumulated as TF's kernel does (``size``: the total)."""
  starts, limits, deltas = jnp.broadcast_arrays(  # numpy operands indexed as jax arrays
    *(jnp.atleast_1d(a) for a in (starts, limits, deltas))
  )
  sdtype = tfdtypes.canonical_dtype(Tsplits)
  splits = jnp.concatenate(
    [jnp.zeros((1,), sdtype), jnp.cumsum(range_sizes(starts, limits, deltas, jnp).astype(sdtype))]
  )
  if size == 0:
    return splits, jnp.zeros((0,), starts.dtype)
  r, k = _rows_of(splits, size)
  if jnp.issubdtype(starts.dtype, jnp.integer):
    return splits, starts[r] + k.astype(starts.dtype) * deltas[r]

  def step(prev, rk):  # value += delta, as TF's loop (not start + k * delta)
    row, col = rk
    v = jnp.where(col == 0, starts[row], prev + deltas[row])
    return v, v

  return splits, lax.scan(step, starts[0], (r, k))[1]


def _range_interpret(ctx, node, inputs):
  op = core.lookup(node.op)
  known = [
    known_ints(ctx, v) if np.dtype(v.dtype).kind in "iu" else _known_float(v) for v in inputs
  ]
  if any(k is None for k in known):
    raise unknown_size(node, "the ranges' total size")
  starts, limits, deltas = known
  if any(np.ndim(a) > 1 for a in known):
    raise op_error(node, "starts, limits and deltas must be scalars or vectors")
  lens = {np.shape(a)[0] for a in known if np.ndim(a) == 1}
  if len(lens) > 1:
    raise op_error(node, "starts, limits and deltas must have the same shape")
  if np.any(deltas == 0):
    raise op_error(node, "Requires delta != 0")
  with np.errstate(all="ignore"):
    sizes = range_sizes(*np.broadcast_arrays(*(np.atleast_1d(a) for a in known)), np)
  params = {
    "size": int(np.sum(sizes.astype(np.int64))),
    "T": node.attr("T"),
    "Tsplits": node.attr("Tsplits"),
  }
  return list(op.apply(list(inputs), params))


def _known_float(value):
  known = folding.known_value(value)
  return None if known is None else np.asarray(known)


def _range_spec(st):
  return range_spec(st, range_sizes)


RaggedRange = register_op(
  "RaggedRange",
  ragged_range,
  family=FAMILY,
  multiple_results=True,
  attrs=("T", "Tsplits"),
  interpret=_range_interpret,
  dynamic_shape="the output's size is the ranges' total size",
  doc="Ranges start, start + delta, ... below limit, one row each: row splits and "
  "values (their total size a static param); floats accumulate as TF's loop.",
  spec=_range_spec,
)


# --- RaggedTensorToSparse ----------------------------------------------------------------------


def to_sparse(*operands):
  """The coordinates of every value element of a ragged tensor, its values (flat)
  and the dense shape (rows, each level's longest row, the inner dims)."""
  operands = [jnp.asarray(o) for o in operands]
  splits, values = operands[:-1], operands[-1]
  index = tfdtypes.canonical_dtype(np.dtype(np.int64))
  inner = values.shape[1:]
  cols = []
  item = jnp.arange(values.shape[0], dtype=index)
  for s in reversed(splits):
    item, col = row_col(s.astype(index), item)
    cols.insert(0, col)
  coords = jnp.stack([item] + cols, axis=1)
  n_inner = int(np.prod(inner))
  coords = jnp.repeat(coords, n_inner, axis=0)
  if inner:
    grid = jnp.asarray(np.stack(np.unravel_index(np.arange(n_inner), inner), 1), index)
    coords = jnp.concatenate([coords, jnp.tile(grid, (values.shape[0], 1))], axis=1)
  widths = [
    jnp.max(jnp.diff(s), initial=0).astype(index) if s.shape[0] > 1 else jnp.zeros((), index)
    for s in splits
  ]
  shape = jnp.stack(
    [jnp.asarray(splits[0].shape[0] - 1, index)] + widths + [jnp.asarray(d, index) for d in inner]
  )
  return coords, values.reshape(-1), shape


RaggedTensorToSparse = register_op(
  "RaggedTensorToSparse",
  to_sparse,
  family=FAMILY,
  multiple_results=True,
  check=lambda *operands: (_splits_check(*operands[:-1]), _BAD_SPLITS),
  doc="A ragged tensor as a sparse one: int64 coordinates of every value element, the "
  "values and the dense shape.",
  spec=to_sparse_spec,
)
