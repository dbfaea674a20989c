"""SparseReduceSum and SparseReduceMax: a dense reduction of a sparse tensor over
``reduction_axes`` (``tf.sparse.reduce_sum`` / ``reduce_max``), and their sparse-output
forms SparseReduceSumSparse / SparseReduceMaxSparse (``output_is_sparse=True``): one
entry per distinct kept coordinate in row-major order, a data-dependent count, so
their indices are static (layout computed with numpy, values segment-reduced).

``input_shape`` and ``reduction_axes`` are static. Sum: duplicate indices add up,
implicit zeros add nothing. Max: TF reduces the entries given, not the implicit
zeros; an output position no entry reaches is 0 (a group of NaNs is NaN). Entries
outside ``input_shape`` (TF raises) are dropped; ``runtime_checks`` raises like TF.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from tfprims import rules
from tfprims.core import define_op, tfops
from tfprims.ops.shared import ints
from tfprims.ops.shared_specs import lazy_hst
from tfprims.ops.sparse._common import (FAMILY, check_indices, draw_sparse, index_dtype,
                                        static_indices, static_outputs, static_shape)


def _axes(reduction_axes, rank):
  axes = ints(reduction_axes)
  for a in axes:
    if not -rank <= a < rank:
      raise ValueError(f"Invalid reduction dimension {a}, for input with {rank} dimensions.")
  return tuple(sorted({a % rank for a in axes}))


def _flat_targets(input_indices, shape, axes):
  """Each entry's position in the (flattened) output and the output's shape."""
  keep = [d for d in range(len(shape)) if d not in axes]
  out_shape = tuple(shape[d] for d in keep)
  pos = jnp.zeros(input_indices.shape[:1], input_indices.dtype)
  inside = jnp.ones(input_indices.shape[:1], bool)
  for d in range(len(shape)):
    inside &= (input_indices[:, d] >= 0) & (input_indices[:, d] < shape[d])
  for d in keep:
    pos = pos * shape[d] + input_indices[:, d]
  size = int(np.prod(out_shape))
  return jnp.where(inside, pos, size), size, out_shape


def _reduce_impl(kind):
  def impl(input_indices, input_values, *, input_shape, reduction_axes, keep_dims):
    shape = static_shape(input_shape, "input_shape")
    axes = _axes(reduction_axes, len(shape))
    pos, size, out_shape = _flat_targets(input_indices, shape, axes)
    dt = input_values.dtype
    if kind == "sum":
      out = jnp.zeros((size,), dt).at[pos].add(input_values, mode="drop")
    else:
      low = jnp.array(-jnp.inf if jnp.issubdtype(dt, jnp.floating) else jnp.iinfo(dt).min, dt)
      out = jnp.full((size,), low, dt).at[pos].max(input_values, mode="drop")
      hit = jnp.zeros((size,), bool).at[pos].set(True, mode="drop")
      out = jnp.where(hit, out, jnp.zeros((), dt))
    if keep_dims:
      out_shape = tuple(1 if d in axes else s for d, s in enumerate(shape))
    return out.reshape(out_shape)
  impl.__doc__ = f"The dense {kind} of a sparse tensor over reduction_axes."
  return impl


def _sum_transpose(ct, input_indices, *, input_shape, reduction_axes, keep_dims):
  """Each entry's cotangent: the output cotangent at its position (GatherNd)."""
  shape = static_shape(input_shape, "input_shape")
  axes = _axes(reduction_axes, len(shape))
  keep = tuple(d for d in range(len(shape)) if d not in axes)
  ct = rules.reshape(rules.instantiate(ct), tuple(shape[d] for d in keep))
  where = tfops.GatherV2(input_indices, np.asarray(keep, np.int32), axis=1, batch_dims=0)
  return tfops.GatherNd(ct, where, bad_indices_policy="")


def _check(input_indices, input_values, *, input_shape, reduction_axes, keep_dims):
  return check_indices(input_indices, static_shape(input_shape))


def _spec(dtypes):
  def spec(st):
    hst = lazy_hst()

    @st.composite
    def calls(draw):
      dtype = draw(st.dtypes(dtypes))
      idx, vals, shape = draw_sparse(draw, st, dtype)
      rank = len(shape)
      axes = draw(hst.lists(hst.integers(-rank, rank - 1), max_size=rank))
      return {"input_indices": idx, "input_values": vals, "input_shape": shape,
              "reduction_axes": np.asarray(axes, np.int32),
              "keep_dims": draw(hst.booleans())}
    return st.Spec(calls(), diff_args=("input_values",), vmap_variation="scale")
  return spec


SparseReduceSum = define_op(
    "SparseReduceSum", _reduce_impl("sum"), family=FAMILY,
    static=("input_shape", "reduction_axes"), attrs=("keep_dims",), check=_check,
    jvp=(None, lambda t, i, v, **p: SparseReduceSum(i, t, **p)),
    transpose=lambda ct, i, v, **p: [None, _sum_transpose(ct, i, **p)],
    spec=_spec(("float32", "float64", "int32", "int64", "complex64")))

SparseReduceMax = define_op(
    "SparseReduceMax", _reduce_impl("max"), family=FAMILY,
    static=("input_shape", "reduction_axes"), attrs=("keep_dims",), check=_check,
    spec=_spec(("float32", "float64", "int32", "int64")))


# --- the Sparse-output forms ------------------------------------------------------------------


def sparse_reduce_layout(input_indices, input_shape, reduction_axes, keep_dims):
  """SparseReduce*Sparse's layout (numpy): the output indices (the entries' distinct
  kept coordinates, row-major), each entry's output position and the output shape."""
  shape = static_shape(input_shape, "input_shape")
  axes = _axes(reduction_axes, len(shape))
  keep = [d for d in range(len(shape)) if d not in axes]
  idx = static_indices(input_indices, len(shape))
  n = idx.shape[0]
  if n == 0:
    groups, gid = np.zeros((0, len(keep)), np.int64), np.zeros((0,), np.int64)
  elif not keep:
    groups, gid = np.zeros((1, 0), np.int64), np.zeros((n,), np.int64)
  else:
    groups, gid = np.unique(idx[:, keep], axis=0, return_inverse=True)
  if keep_dims:
    full = np.zeros((groups.shape[0], len(shape)), np.int64)
    full[:, keep] = groups
    groups = full
    out_shape = [1 if d in axes else s for d, s in enumerate(shape)]
  else:
    out_shape = [shape[d] for d in keep]
  return groups.astype(np.int64), np.asarray(gid).reshape(-1), np.asarray(out_shape, np.int64)


def _sparse_reduce_impl(kind):
  def impl(input_values, *, input_indices, input_shape, reduction_axes, keep_dims):
    groups, gid, out_shape = sparse_reduce_layout(input_indices, input_shape,
                                                  reduction_axes, keep_dims)
    seg = jax.ops.segment_sum if kind == "sum" else jax.ops.segment_max
    values = seg(input_values, jnp.asarray(gid.astype(np.int32)), num_segments=len(groups))
    dt = index_dtype()
    return jnp.asarray(groups.astype(dt)), values, jnp.asarray(out_shape.astype(dt))
  impl.__doc__ = (f"The {kind} of a sparse tensor over reduction_axes, as a sparse tensor "
                  "(one entry per distinct kept coordinate, row-major).")
  return impl


def _sparse_known(*, input_indices, input_shape, reduction_axes, keep_dims):
  groups, _, out_shape = sparse_reduce_layout(input_indices, input_shape, reduction_axes,
                                              keep_dims)
  return {0: groups, 2: out_shape}


def _define_sparse(kind, dtypes):
  name = f"SparseReduce{kind.capitalize()}Sparse"
  return define_op(
      name, _sparse_reduce_impl(kind), family=FAMILY, multiple_results=True,
      static=("input_indices", "input_shape", "reduction_axes"), attrs=("keep_dims",),
      interpret=static_outputs(_sparse_known), spec=_spec(dtypes),
      doc=f"The {kind} over reduction_axes as a sparse tensor (static indices).")


SparseReduceSumSparse = _define_sparse("sum", ("float32", "float64", "int32", "complex64"))
SparseReduceMaxSparse = _define_sparse("max", ("float32", "float64", "int32"))
