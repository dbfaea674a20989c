"""DynamicStitch and ParallelDynamicStitch: ``merged[indices[m][i]] = data[m][i]``.

The output has ``max(indices) + 1`` rows, so the primitive takes that number as a
param, ``size``: ``tf.DynamicStitch[size=5]``. In a graph, the indices must be known
at trace time (the size is computed from them; traced indices raise
``StaticInputError`` unless the ``dynamic_shape_bounds`` config bounds the node,
which then gives ``size``). Rules bind the primitive with traced indices and an
explicit ``size`` (TopKV2's tangent does): indices outside ``[0, size)`` are then
dropped. Duplicate indices: the last one wins (``data[m]`` after ``data[m - 1]``,
row-major within each), as TF's CPU kernels do; rows no index names are zeros.

The op is linear in ``data``: its JVP stitches the tangents, its transpose gathers
the cotangent with ``tf.GatherV2`` at each data element's index, or at -1 (a zero)
where a later duplicate overwrote it. Batching re-binds the op (indices of example
``b`` shifted by ``b * size``). docs/semantics/array.md.
"""

from __future__ import annotations

import functools
import math

import jax.numpy as jnp
import numpy as np
from jax.interpreters import ad

from tfprims import core, errors, folding, interpreter, rules
from tfprims.core import register_op, tfops
from tfprims.ops.array._common import FAMILY
from tfprims.ops.shared_specs import lazy_hst


def _split(operands):
  n = len(operands) // 2
  return operands[:n], operands[n:]


def _row_shape(indices, data) -> tuple:
  """The shape of a merged row; raises TF's errors for inconsistent shapes."""
  rest = None
  for m, (i, d) in enumerate(zip(indices, data)):
    ishape, dshape = tuple(np.shape(i)), tuple(np.shape(d))
    if dshape[: len(ishape)] != ishape:
      raise ValueError(
        f"data[{m}].shape = {list(dshape)} does not start with indices[{m}].shape = {list(ishape)}"
      )
    r = dshape[len(ishape) :]
    if rest is None:
      rest = r
    elif r != rest:
      raise ValueError(
        f"Need data[0].shape[{len(np.shape(indices[0]))}:] = {list(rest)} "
        f"to equal data[{m}].shape[{len(ishape)}:] = {list(r)}"
      )
  return rest


def stitch_size(indices) -> int:
  """TF's output size for known indices: ``max(indices) + 1`` (0 when empty)."""
  flat = np.concatenate([np.asarray(i).reshape(-1) for i in indices]) if indices else []
  if len(flat) and flat.min() < 0:
    raise ValueError(f"indices[{int(np.argmin(flat))}] = {int(flat.min())} is out of range")
  return int(flat.max()) + 1 if len(flat) else 0


def _stitch_impl(*operands, size):
  """``merged[indices[m][...]] = data[m][...]`` into ``size`` rows: the last write
  wins, unnamed rows are zeros, indices outside ``[0, size)`` are dropped."""
  indices, data = _split(operands)
  rest = _row_shape(indices, data)
  dtype = data[0].dtype
  flat_i = jnp.concatenate(
    [jnp.reshape(i, (math.prod(np.shape(i)),)).astype(np.int32) for i in indices]
  )
  flat_d = jnp.concatenate(
    [jnp.reshape(d, (math.prod(np.shape(i)),) + rest) for i, d in zip(indices, data)]
  )
  out = jnp.zeros((size,) + rest, dtype)
  if flat_i.shape[0] == 0 or size == 0:
    return out
  valid = (flat_i >= 0) & (flat_i < size)
  target = jnp.where(valid, flat_i, size)
  order = jnp.arange(flat_i.shape[0], dtype=np.int32)
  last = jnp.full((size + 1,), -1, np.int32).at[target].max(order)
  wins = valid & (last[target] == order)
  return out.at[jnp.where(wins, target, size)].set(flat_d, mode="drop")


def _canonicalize(params, *operands):
  if "size" not in params:
    indices, _ = _split(operands)
    if not all(core.is_concrete(i) for i in indices):
      raise ValueError(
        "the output size is max(indices) + 1: the indices must be known "
        "at trace time, or the size given"
      )
    params = dict(params, size=stitch_size(indices))
  return params


def _interpret(op_type, ctx, node, inputs):
  op = core.lookup(op_type)
  indices, data = _split(inputs)
  # an eager call's indices are known: numpy, as constants are
  indices = [i if folding.known_value(i) is None else folding.known_value(i) for i in indices]
  inputs = [*indices, *data]
  if all(core.is_concrete(i) for i in indices):
    try:
      size = stitch_size(indices)
    except ValueError as e:
      raise errors.OpError(node.op, node.name, str(e)) from None
  else:
    size = interpreter.dynamic_shape_bound(node)
    if size is None:
      raise errors.StaticInputError(
        node.op,
        node.name,
        "indices",
        "the output has max(indices) + 1 rows, so the indices must be known at trace "
        "time; or bound the output with tfprims.update_config('dynamic_shape_bounds', "
        f"{{'{node.name}': rows}})",
      )
  return [op.apply(list(inputs), {"size": size})]


def _jvp(op_type):
  def rule(primals, tangents, *, size):
    indices, _ = _split(primals)
    op = getattr(tfops, op_type)
    out = op(*primals, size=size)
    _, dt = _split(tangents)
    if all(type(t) is ad.Zero for t in dt):
      return out, rules.zero_tangent(out)
    return out, op(*indices, *[rules.instantiate(t) for t in dt], size=size)

  return rule


def _winning_indices(op_type, indices, size):
  """Each data element's index where it is the last write to its row, else -1 (so
  ``tf.GatherV2`` reads a zero there)."""
  offsets = np.cumsum([0] + [math.prod(np.shape(i)) for i in indices])
  positions = [
    np.arange(offsets[m], offsets[m + 1], dtype=np.int32).reshape(np.shape(i))
    for m, i in enumerate(indices)
  ]
  if all(core.is_concrete(i) for i in indices):
    flat = np.concatenate([np.asarray(i).reshape(-1) for i in indices]).astype(np.int64)
    last = {}
    for pos, j in enumerate(flat.tolist()):
      last[j] = pos
    out = []
    for i, p in zip(indices, positions):
      winner = (
        np.vectorize(lambda j, q: last.get(j) == q, otypes=[bool])(np.asarray(i), p)
        if p.size
        else np.zeros(p.shape, bool)
      )
      out.append(np.where(winner, np.asarray(i), -1).astype(np.int32))
    return out
  # Traced indices: stitch the positions; a position that reads itself back won.
  writers = getattr(tfops, op_type)(*indices, *positions, size=size)
  out = []
  for i, p in zip(indices, positions):
    read = tfops.GatherV2(writers, i, axis=0, batch_dims=0)
    won = tfops.Equal(read, p, incompatible_shape_error=True)
    out.append(tfops.SelectV2(won, i, np.full(p.shape, -1, np.int32)))
  return out


def _transpose(op_type):
  def rule(ct, *args, size):
    indices, data = _split(args)
    cts = [None] * len(indices)
    if not any(rules.U(d) for d in data):
      return cts + [None] * len(data)
    for i, d in zip(_winning_indices(op_type, indices, size), data):
      cts.append(tfops.GatherV2(ct, i, axis=0, batch_dims=0) if rules.U(d) else None)
    return cts

  return rule


def _batch(op_type):
  def rule(args, dims, *, size):
    indices, data = _split(args)
    idims, ddims = _split(dims)
    v = rules.batch_size(args, dims)
    op = getattr(tfops, op_type)
    if all(d is None for d in idims):
      # The batch axis goes right after each data's index dims: rows of [V, ...].
      moved = [
        rules.move_axes(rules.with_batch_axis(x, d, v), [0], [np.ndim(i)])
        for i, x, d in zip(indices, data, ddims)
      ]
      return op(*indices, *moved, size=size), 1
    # Example b's rows are b * size + index; out-of-range indices stay out of range.
    shifted = []
    for i, d in zip(indices, idims):
      i = rules.with_batch_axis(i, d, v)
      offset = (np.arange(v, dtype=np.int32) * size).reshape((v,) + (1,) * (np.ndim(i) - 1))
      valid = tfops.LogicalAnd(tfops.GreaterEqual(i, np.int32(0)), tfops.Less(i, np.int32(size)))
      shifted.append(tfops.SelectV2(valid, tfops.AddV2(i, offset), np.int32(-1)))
    stacked = [rules.with_batch_axis(x, d, v) for x, d in zip(data, ddims)]
    out = op(*shifted, *stacked, size=v * size)
    return rules.reshape(out, (v, size) + rules.shape_of(out)[1:]), 0

  return rule


def _define(op_type, doc_order):
  return register_op(
    op_type,
    _stitch_impl,
    family=FAMILY,
    canonicalize=_canonicalize,
    interpret=functools.partial(_interpret, op_type),
    jvp=_jvp(op_type),
    transpose=_transpose(op_type),
    batching=_batch(op_type),
    doc=f"Interleaves the data rows into max(indices) + 1 rows; duplicates: {doc_order}.",
    spec=lambda st: st.Spec(
      _stitch_calls(st),
      note="indices drawn without duplicates (TF's gradient gives every duplicate "
      "the cotangent; ours only the write that wins: tests/test_sort_buckets.py)",
    ),
  )


DynamicStitch = _define("DynamicStitch", "the last one wins")
ParallelDynamicStitch = _define(
  "ParallelDynamicStitch",
  "the last one wins (TF leaves the order unspecified; its CPU kernel also keeps the last)",
)


# --- property-test strategies (hypothesis is imported lazily) ---------------------


def _stitch_calls(st):
  hst = lazy_hst()

  @st.composite
  def calls(draw):
    n = draw(hst.integers(1, 3))
    rest = tuple(draw(st.shapes(max_rank=2, max_side=3)))
    dtype = draw(st.dtypes(st.ALL))
    shapes = [tuple(draw(st.shapes(max_rank=2, max_side=3))) for _ in range(n)]
    total = sum(math.prod(s) for s in shapes)
    gaps = draw(hst.integers(0, 2))
    targets = draw(hst.permutations(range(total + gaps)))[:total]
    indices, data, off = [], [], 0
    for s in shapes:
      k = math.prod(s)
      indices.append(np.asarray(targets[off : off + k], np.int32).reshape(s))
      data.append(draw(st.arrays(dtype, s + rest)))
      off += k
    return {"indices": indices, "data": data}

  return calls()
