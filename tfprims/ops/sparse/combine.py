"""SparseConcat and SparseSlice (``tf.sparse.concat``, ``tf.sparse.slice``).

SparseConcat's output has as many entries as its inputs together, so only the
shapes are static: TF's kernel reorders each input with ``concat_dim`` first,
concatenates them with offset indices, and reorders the result into row-major order;
tfprims does the same with two stable sorts. SparseSlice keeps the entries inside
``[start, start + size)``, a data-dependent count: its indices are static (an eager
call knows them; under jit traced indices raise StaticInputError naming the node),
its layout computed with numpy and its values gathered.
"""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np
from jax import lax

from tfprims.core import define_op
from tfprims.ops.shared import ints
from tfprims.ops.shared_specs import lazy_hst
from tfprims.ops.sparse._common import (FAMILY, draw_sparse, index_dtype, static_indices,
                                        static_shape)


def _sorted(indices, values, key_order):
  n = indices.shape[0]
  keys = [indices[:, d] for d in key_order]
  out = lax.sort(keys + [jnp.arange(n, dtype=np.int32)], num_keys=len(keys), is_stable=True)
  return indices[out[-1]], values[out[-1]]


# --- SparseConcat ---------------------------------------------------------------------------


def _concat(*operands, shapes, concat_dim):
  """The inputs side by side along ``concat_dim``, entries in row-major order."""
  n = len(shapes)
  if n < 2 or len(operands) != 2 * n:
    raise ValueError(f"SparseConcat needs at least 2 inputs, got {n}")
  dims = [static_shape(s, "shapes") for s in shapes]
  rank = len(dims[0])
  axis = int(concat_dim)
  if not -rank <= axis < rank:
    raise ValueError(f"Concat dimension must be in range [{-rank}, {rank}), got {axis}")
  axis %= rank
  for d in dims[1:]:
    if len(d) != rank or any(a != b for i, (a, b) in enumerate(zip(d, dims[0])) if i != axis):
      raise ValueError(f"All SparseTensors' shapes must match except on the concat "
                       f"dimension; got {dims[0]} and {d}")
  dt = index_dtype()
  order = [axis] + [d for d in range(rank) if d != axis]
  parts_i, parts_v, offset = [], [], 0
  for k in range(n):
    idx, vals = operands[k].astype(dt), operands[n + k]
    if idx.shape[0]:
      idx, vals = _sorted(idx, vals, order)
    parts_i.append(idx.at[:, axis].add(offset))
    parts_v.append(vals)
    offset += dims[k][axis]
  idx, vals = jnp.concatenate(parts_i), jnp.concatenate(parts_v)
  if idx.shape[0]:
    idx, vals = _sorted(idx, vals, range(rank))
  out_shape = tuple(offset if i == axis else s for i, s in enumerate(dims[0]))
  return idx, vals, jnp.asarray(np.asarray(out_shape, np.int64).astype(dt))


def _concat_spec(st):
  hst = lazy_hst()

  @st.composite
  def calls(draw):
    dtype = draw(st.dtypes(("float32", "float64", "int32", "bool")))
    first = draw_sparse(draw, st, dtype)
    rank = len(first[2])
    axis = draw(hst.integers(-rank, rank - 1))
    parts = [first]
    for _ in range(draw(hst.integers(1, 2))):
      idx, vals, shape = draw_sparse(draw, st, dtype, rank=rank)
      shape = np.where(np.arange(rank) == axis % rank, shape, first[2])
      idx = idx[np.all(idx < shape, axis=1)]  # the other dims are the first input's
      parts.append((idx, vals[:idx.shape[0]], shape))
    return {"indices": [p[0] for p in parts], "values": [p[1] for p in parts],
            "shapes": [p[2] for p in parts], "concat_dim": axis}
  return st.Spec(calls(), vmap_variation="scale")


SparseConcat = define_op(
    "SparseConcat", _concat, family=FAMILY, static=("shapes",), attrs=("concat_dim",),
    multiple_results=True, spec=_concat_spec,
    doc="The sparse inputs concatenated along concat_dim, entries in row-major order.")


# --- SparseSlice ----------------------------------------------------------------------------


def _slice(values, *, indices, shape, start, size):
  """The entries inside ``[start, start + size)`` (input order), shifted by start."""
  dims = static_shape(shape, "shape")
  begin, extent = ints(start), ints(size)
  if len(begin) != len(dims) or len(extent) != len(dims):
    raise ValueError("Expected start and size to have the rank of the input shape")
  idx = static_indices(indices, len(dims))
  lo, hi = np.asarray(begin, np.int64), np.asarray(begin, np.int64) + extent
  keep = np.nonzero(np.all((idx >= lo) & (idx < hi), axis=1))[0] if idx.shape[0] else \
      np.zeros((0,), np.int64)
  out_shape = np.maximum(np.minimum(hi, dims) - lo, 0)
  dt = index_dtype()
  return (jnp.asarray((idx[keep] - lo).astype(dt).reshape(-1, len(dims))),
          values[jnp.asarray(keep.astype(np.int32))],
          jnp.asarray(out_shape.astype(dt)))


def _slice_spec(st):
  hst = lazy_hst()

  @st.composite
  def calls(draw):
    dtype = draw(st.dtypes(("float32", "float64", "int32", "complex64")))
    idx, vals, shape = draw_sparse(draw, st, dtype)
    start = np.asarray([draw(hst.integers(0, int(s) + 1)) for s in shape], np.int64)
    size = np.asarray([draw(hst.integers(0, 5)) for _ in shape], np.int64)
    return {"indices": idx, "values": vals, "shape": shape, "start": start, "size": size}
  return st.Spec(calls(), vmap_variation="scale")


SparseSlice = define_op(
    "SparseSlice", _slice, family=FAMILY, static=("indices", "shape", "start", "size"),
    multiple_results=True, spec=_slice_spec,
    doc="The entries inside [start, start + size), their indices shifted by start.")
