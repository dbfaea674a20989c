"""What the segment-reduction modules (``segments``, ``sparse_segments``) share: the
scatter kernels with TF's CPU semantics, the checks of static segment ids and the
batching helper that folds a batch into the segment axis (the strategies of their
property specs are in ``_segment_specs.py``).

Out-of-range segment ids and indices are dropped (TF's CPU kernels raise; see
docs/semantics/array.md): kernels scatter with ``mode="drop"`` after mapping
every invalid id to ``num`` (one past the end; negative ids would wrap otherwise).
"""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np
from jax import lax

from tfprims import rules
from tfprims.core import tfops

#: Data types of the segment kernels TF registers on CPU (ints, floats, complex).
REAL = (
  "float16",
  "bfloat16",
  "float32",
  "float64",
  "int8",
  "int16",
  "int32",
  "int64",
  "uint8",
  "uint16",
  "uint32",
  "uint64",
)
WITH_COMPLEX = REAL + ("complex64", "complex128")
HALF = ("float16", "bfloat16")


# --- kernels ------------------------------------------------------------------------------


def wide_ids(ids):
  """Ids as int32 (int64 stays): int16 ids could not hold ``num``."""
  ids = jnp.asarray(ids)
  return ids if ids.dtype == np.dtype("int64") else ids.astype(np.int32)


def drop_invalid(ids, num: int, valid=None):
  """Scatter indices: ids outside ``[0, num)`` (or where ``valid`` is false)
  become ``num``, which ``mode="drop"`` scatters drop."""
  ids = wide_ids(ids)
  ok = (ids >= 0) & (ids < num)
  if valid is not None:
    ok = ok & valid
  return jnp.where(ok, ids, jnp.asarray(num, ids.dtype))


def _gather_rows(x, idx):
  """``x[idx]`` along axis 0 with ``idx`` clipped (rows of dropped ids are ignored)."""
  if x.shape[0] == 0:
    return jnp.zeros(idx.shape + x.shape[1:], x.dtype)
  return jnp.take(x, jnp.clip(idx, 0, x.shape[0] - 1), axis=0)


def scatter_sum(x, idx, num: int, sorted_ids: bool = False, *, first=None):
  """Segment sums with the sign of zero of TF's kernels (docs/semantics/array.md).

  Without ``first``, a sum started from +0.0 (TF's UnsortedSegmentSum and the
  sparse Grad kernels): an exact zero is +0.0. ``first`` (a mask over the segments)
  marks those whose sum starts from its first term instead (TF's sparse segment
  reductions, and the sorted kernels' one-row segments, which copy the row): there
  a sum of -0.0 terms is -0.0. Floats are scattered onto -0.0, the additive identity,
  and exact zeros elsewhere set to +0.0 with a select (XLA folds ``x + 0.0`` to ``x``
  and a one-update scatter into zeros to its update, so an added +0.0 would not
  survive)."""
  real = jnp.issubdtype(x.dtype, jnp.floating)
  out = jnp.full((num,) + x.shape[1:], -0.0 if real else 0, x.dtype)
  out = out.at[idx].add(x, mode="drop", indices_are_sorted=sorted_ids)
  if not real:
    return out
  plus = out == 0
  if first is not None:
    plus = plus & ~jnp.reshape(first, (num,) + (1,) * (x.ndim - 1))
  return jnp.where(plus, jnp.zeros((), x.dtype), out)


def scatter_prod(x, idx, num: int, sorted_ids: bool = False):
  out = jnp.ones((num,) + x.shape[1:], x.dtype)
  return out.at[idx].multiply(x, mode="drop", indices_are_sorted=sorted_ids)


def scatter_count(idx, num: int, dtype):
  """How many (kept) entries each segment has."""
  return jnp.zeros((num,), dtype).at[idx].add(jnp.ones(idx.shape, dtype), mode="drop")


def scatter_extremum(x, idx, num: int, kind: str, *, sorted_kernel: bool):
  """TF's CPU segment min/max over the rows of ``x`` (``idx``: their segments,
  ``num`` past the end for dropped rows).

  Integers: the plain extremum; empty segments hold the dtype's highest (min) or
  lowest (max) value. Floats follow TF's scalar loop ``acc = acc < x ? acc : x``
  (min; ``>`` for max), so a NaN wins only as the last row of its segment and a
  NaN earlier resets the accumulator: the result is the extremum of the rows after
  the segment's last NaN, NaN when the last row is NaN. The accumulator starts at
  the dtype's highest finite value in TF's UnsortedSegmentMin (so ``[inf]`` gives
  it, and empty segments too) and at +inf in SegmentMin (whose empty segments the
  caller sets to 0).
  """
  is_min = kind == "min"
  out_shape = (num,) + x.shape[1:]
  if not jnp.issubdtype(x.dtype, jnp.floating):
    info = jnp.iinfo(x.dtype)
    base = jnp.full(out_shape, info.max if is_min else info.min, x.dtype)
    return base.at[idx].min(x, mode="drop") if is_min else base.at[idx].max(x, mode="drop")
  inf = np.array(np.inf if is_min else -np.inf, x.dtype)
  if num == 0:
    return jnp.zeros(out_shape, x.dtype)
  pos = lax.broadcasted_iota(np.int32, x.shape, 0)
  none = np.int32(-1)
  last_nan = jnp.full(out_shape, none).at[idx].max(jnp.where(jnp.isnan(x), pos, none), mode="drop")
  last_row = jnp.full((num,), none).at[idx].max(jnp.arange(x.shape[0], dtype=np.int32), mode="drop")
  after = pos > _gather_rows(last_nan, idx)
  vals = jnp.where(after, x, inf)
  base = jnp.full(out_shape, inf)
  m = base.at[idx].min(vals, mode="drop") if is_min else base.at[idx].max(vals, mode="drop")
  has_nan = last_nan >= 0
  nan_last = has_nan & (last_nan == last_row.reshape((num,) + (1,) * (x.ndim - 1)))
  if not sorted_kernel:
    fin = jnp.finfo(x.dtype)
    bound = np.array(fin.max if is_min else fin.min, x.dtype)
    m = jnp.where(has_nan, m, jnp.minimum(m, bound) if is_min else jnp.maximum(m, bound))
  return jnp.where(nan_last, np.array(np.nan, x.dtype), m)


def divide_by_count(s, count):
  """A segment sum divided by its count: truncating for integers (TF's Eigen
  mean); empty segments (count 0) stay as they are (0)."""
  count = jnp.maximum(count, 1).reshape(count.shape + (1,) * (s.ndim - 1))
  if jnp.issubdtype(s.dtype, jnp.integer):
    return lax.div(s, count.astype(s.dtype))
  return s / count.astype(s.dtype)


def accumulation_dtype(dtype) -> np.dtype:
  """TF's sparse segment kernels accumulate float16/bfloat16 in float32."""
  dtype = np.dtype(dtype)
  return np.dtype(np.float32) if dtype.name in HALF else dtype


def sparse_reduce(data, indices, seg_idx, num: int, kind: str):
  """``out[s] = reduce(data[indices[i]] for i with segment s)``: ``seg_idx`` are
  scatter indices from :func:`drop_invalid` (or static, already valid); entries
  whose index is outside ``[0, data.shape[0])`` are dropped as well, and dropped
  entries are not counted by the mean and sqrt-n."""
  n = data.shape[0]
  indices = wide_ids(indices)
  ok = (indices >= 0) & (indices < n)
  seg_idx = jnp.where(ok, seg_idx, jnp.asarray(num, seg_idx.dtype))
  acc = accumulation_dtype(data.dtype)
  rows = _gather_rows(data, indices).astype(acc)
  real = jnp.issubdtype(acc, jnp.floating)
  count = scatter_count(seg_idx, num, acc) if real or kind != "sum" else None
  # TF's kernels sum a segment from its first row (a sum of -0.0 is -0.0); empty: +0.0.
  s = scatter_sum(rows, seg_idx, num, first=None if count is None else count > 0)
  if kind != "sum":
    count = jnp.maximum(count, np.ones((), acc)).reshape((num,) + (1,) * (s.ndim - 1))
    s = s / (count if kind == "mean" else jnp.sqrt(count))
  return s.astype(data.dtype)


def sparse_grad(grad, indices, segment_ids, out_rows: int, kind: str):
  """The gradient of a sparse segment reduction (TF's SparseSegment*Grad):
  ``out[indices[i]] += grad[segment_ids[i]] * w`` with ``w`` 1, 1/count or
  1/sqrt(count) of the segment; entries with an index outside ``[0, out_rows)``
  or a segment outside ``[0, grad.shape[0])`` are dropped (and not counted)."""
  num = grad.shape[0]
  indices, segment_ids = wide_ids(indices), wide_ids(segment_ids)
  ok = (indices >= 0) & (indices < out_rows) & (segment_ids >= 0) & (segment_ids < num)
  acc = accumulation_dtype(grad.dtype)
  rows = _gather_rows(grad, segment_ids).astype(acc)
  if kind != "sum":
    count = scatter_count(jnp.where(ok, segment_ids, num), num, acc)
    count = jnp.maximum(count, np.ones((), acc))
    w = 1 / count if kind == "mean" else 1 / jnp.sqrt(count)
    rows = rows * _gather_rows(w, segment_ids).reshape(rows.shape[:1] + (1,) * (rows.ndim - 1))
  out_idx = jnp.where(ok, indices, jnp.asarray(out_rows, indices.dtype))
  return scatter_sum(rows, out_idx, out_rows).astype(grad.dtype)


# --- static segment ids -------------------------------------------------------------------


def static_ids(value) -> np.ndarray:
  """A static ids param (tuple or int) as an int64 numpy array."""
  return np.asarray(value, dtype=np.int64)


def check_sorted_ids(ids: np.ndarray, rows: int, what: str = "input") -> int:
  """TF's checks of sorted segment ids (a vector, one per row of ``what``,
  non-negative, non-decreasing); returns the number of segments, last id + 1."""
  if ids.ndim != 1:
    raise ValueError("segment_ids should be a vector.")
  if ids.shape[0] != rows:
    raise ValueError(f"segment_ids should be the same size as dimension 0 of {what}.")
  if ids.size == 0:
    return 0
  num = int(ids[-1]) + 1
  if ids.min() < 0:
    raise ValueError(
      f"Segment id {int(ids.min())} out of range [0, {num}), possibly "
      "because 'segment_ids' input is not sorted."
    )
  if np.any(np.diff(ids) < 0):
    raise ValueError("segment ids are not increasing")
  return num


def ids_constant(ids: np.ndarray) -> np.ndarray:
  """Static ids as an int32 operand of the TF ops rules bind (GatherV2...)."""
  return ids.astype(np.int32) if ids.size == 0 or ids.max() < 2**31 else ids


# --- batching -----------------------------------------------------------------------------


def offset_ids(ids, d, size: int, stride: int, limit: int):
  """Per-example ids (batched at ``d``, or shared when ``d`` is None) as ids into
  the batch folded into one axis: example ``b``'s ids in ``[0, limit)`` are shifted
  by ``b * stride``, the others become -1 (dropped by the segment kernels).
  Written with TF ops (Cast, GreaterEqual, Less, LogicalAnd, AddV2, SelectV2)."""
  ids = rules.with_batch_axis(ids, d, size)
  dtype = rules.dtype_of(ids)
  wide = dtype if dtype == np.dtype("int64") else np.dtype("int32")
  if dtype != wide:
    ids = tfops.Cast(ids, DstT=wide, Truncate=False)
  rank = len(rules.shape_of(ids))
  offsets = (np.arange(size, dtype=wide) * stride).reshape((size,) + (1,) * (rank - 1))
  valid = tfops.LogicalAnd(
    tfops.GreaterEqual(ids, np.zeros((), wide)), tfops.Less(ids, np.array(limit, wide))
  )
  return tfops.SelectV2(valid, tfops.AddV2(ids, offsets), np.array(-1, wide))


def flatten_batch(x, d, size: int):
  """``x`` with its batch axis (moved or broadcast to the front) merged into axis 0."""
  x = rules.with_batch_axis(x, d, size)
  shape = rules.shape_of(x)
  return rules.reshape(x, (shape[0] * shape[1],) + shape[2:])
