"""Ops that move a sparse tensor's entries: SparseReorder (row-major order),
SparseReshape and SparseFillEmptyRows (``tf.sparse.reorder``, ``tf.sparse.reshape``,
``tf.sparse.fill_empty_rows``).

SparseReorder sorts stably (entries with equal indices keep their order, as TF's
kernel does) with the index columns as sort keys, so no linearized index can
overflow. SparseReshape linearizes the indices in the index dtype (int32 with x64
off: dense shapes of 2**31 elements or more need x64). SparseFillEmptyRows adds one
entry per empty row, so its indices are static (an eager call knows them; under
jit traced indices raise StaticInputError naming the node): its outputs' layout is
computed with numpy at trace time, and the values are a gather of the values and
the default value (linear: grad and vmap in both).
"""

from __future__ import annotations

import math

import jax.numpy as jnp
import numpy as np
from jax import lax

from tfprims import rules
from tfprims.core import register_op, tfops
from tfprims.ops.shared import ints
from tfprims.ops.shared_specs import lazy_hst
from tfprims.ops.sparse._common import (
  FAMILY,
  draw_sparse,
  index_dtype,
  static_indices,
  static_outputs,
  static_shape,
  values_jvp,
)


# --- SparseReorder --------------------------------------------------------------------------


def _reorder(input_indices, input_values, *, input_shape):
  """The entries in row-major order of their indices (stable)."""
  rank = len(static_shape(input_shape, "input_shape"))
  if input_indices.ndim != 2 or input_indices.shape[1] != rank:
    raise ValueError(f"input_indices must be a matrix [nnz, {rank}]")
  n = input_indices.shape[0]
  if n == 0:
    return input_indices, input_values
  keys = [input_indices[:, d] for d in range(rank)]
  out = lax.sort(keys + [jnp.arange(n, dtype=np.int32)], num_keys=rank, is_stable=True)
  return jnp.stack(out[:rank], axis=1), input_values[out[rank]]


def _reorder_spec(st):
  @st.composite
  def calls(draw):
    dtype = draw(st.dtypes(("float32", "float64", "int32", "complex64", "bool")))
    idx, vals, shape = draw_sparse(draw, st, dtype)
    return {"input_indices": idx, "input_values": vals, "input_shape": shape}

  return st.Spec(calls(), diff_args=("input_values",), vmap_variation="scale")


SparseReorder = register_op(
  "SparseReorder",
  _reorder,
  family=FAMILY,
  static=("input_shape",),
  multiple_results=True,
  spec=_reorder_spec,
  doc="The entries sorted into row-major order of their indices (stable).",
)


# --- SparseReshape --------------------------------------------------------------------------


def reshaped(input_shape, new_shape) -> tuple:
  """TF's SparseReshape output shape: ``new_shape`` with its -1 inferred."""
  dims = static_shape(input_shape, "input_shape")
  want = ints(new_shape)
  total = math.prod(dims)
  unknown = [i for i, d in enumerate(want) if d == -1]
  if len(unknown) > 1:
    raise ValueError("only one output dimension may be -1")
  if any(d < -1 for d in want):
    raise ValueError(
      f"size {[d for d in want if d < -1][0]} must be non-negative, not smaller than -1"
    )
  known = math.prod(d for d in want if d != -1)
  if unknown:
    if known == 0 or total % known:
      raise ValueError(
        f"Input to reshape is a SparseTensor with {total} dense values, "
        f"but the requested shape requires a multiple of {known}"
      )
    want = tuple(total // known if d == -1 else d for d in want)
  if math.prod(want) != total:
    raise ValueError(
      f"Input to reshape is a tensor with {total} dense values, but the "
      f"requested shape has {math.prod(want)}"
    )
  return want


def _reshape(input_indices, *, input_shape, new_shape):
  """The indices linearized in ``input_shape`` and unraveled in the new shape."""
  dims = static_shape(input_shape, "input_shape")
  out = reshaped(input_shape, new_shape)
  dt = index_dtype()
  if input_indices.ndim != 2 or input_indices.shape[1] != len(dims):
    raise ValueError(f"input_indices must be a matrix [nnz, {len(dims)}]")
  idx = input_indices.astype(dt)
  flat = jnp.zeros(idx.shape[:1], dt)
  for d, size in enumerate(dims):
    flat = flat * size + idx[:, d]
  cols = []
  for size in reversed(out):
    cols.append(flat % size if size else flat)
    flat = flat // size if size else flat
  new = jnp.stack(cols[::-1], axis=1) if cols else jnp.zeros(idx.shape[:1] + (0,), dt)
  return new, jnp.asarray(np.asarray(out, np.int64).astype(dt))


def _reshape_spec(st):
  hst = lazy_hst()

  @st.composite
  def calls(draw):
    idx, _, shape = draw_sparse(draw, st, "float32")
    total = int(np.prod(shape))
    rank = draw(hst.integers(1, 3))
    # A random factorisation of total into rank dims, one of them maybe -1.
    dims, rest = [], total
    for _ in range(rank - 1):
      divisors = [d for d in range(1, rest + 1) if rest % d == 0] if rest else [0, 1, 2]
      d = draw(hst.sampled_from(divisors))
      dims.append(d)
      rest = rest // d if d else 0
    dims.append(rest if total else draw(hst.integers(0, 2)) if 0 in dims else 0)
    if draw(hst.booleans()) and all(dims):
      dims[draw(hst.integers(0, rank - 1))] = -1
    return {"input_indices": idx, "input_shape": shape, "new_shape": np.asarray(dims, np.int64)}

  return st.Spec(calls(), vmap_variation="scale")


SparseReshape = register_op(
  "SparseReshape",
  _reshape,
  family=FAMILY,
  static=("input_shape", "new_shape"),
  multiple_results=True,
  spec=_reshape_spec,
  interpret=static_outputs(
    lambda *, input_shape, new_shape: {1: np.asarray(reshaped(input_shape, new_shape), np.int64)}
  ),
  doc="The indices of the same entries in the new dense shape (its -1 inferred).",
)


# --- SparseFillEmptyRows --------------------------------------------------------------------


def fill_layout(indices, dense_shape):
  """TF's SparseFillEmptyRows layout, with numpy: the output indices, each output's
  source (an input position, or nnz for the default value), the empty-row
  indicator and the reverse index map."""
  dims = static_shape(dense_shape, "dense_shape")
  if not dims:
    raise ValueError("dense_shape must be a vector of length at least 1")
  idx = static_indices(indices, len(dims))
  n, rows = idx.shape[0], dims[0]
  if rows == 0 and n:
    raise ValueError(f"Received SparseTensor with dense_shape[0] = 0 but indices.shape[0] = {n}")
  row = idx[:, 0] if n else np.zeros((0,), np.int64)
  bad = np.nonzero((row < 0) | (row >= rows))[0]
  if bad.size:
    raise ValueError(f"indices({int(bad[0])}, 0) is invalid: {int(row[bad[0]])} >= {rows}")
  counts = np.bincount(row, minlength=rows) if rows else np.zeros((0,), np.int64)
  sizes = np.maximum(counts, 1)
  starts = np.cumsum(sizes) - sizes
  within = np.zeros(n, np.int64)
  seen = np.zeros(rows, np.int64)
  for i in range(n):  # each entry keeps its order within its row
    within[i] = seen[row[i]]
    seen[row[i]] += 1
  reverse = starts[row] + within if n else np.zeros((0,), np.int64)
  total = int(sizes.sum())
  out_idx = np.zeros((total, len(dims)), np.int64)
  source = np.full(total, n, np.int64)
  out_idx[reverse] = idx
  source[reverse] = np.arange(n)
  empty = counts == 0
  out_idx[starts[empty], 0] = np.nonzero(empty)[0]
  return out_idx, source, empty, reverse


def _fill_empty_rows(values, default_value, *, indices, dense_shape):
  """The entries of each row in their order, an entry (row, 0, ...) with the default
  value for each empty row; the empty-row indicator; each input's output position."""
  out_idx, source, empty, reverse = fill_layout(indices, dense_shape)
  if default_value.ndim != 0:
    raise ValueError("default_value must be a scalar")
  dt = index_dtype()
  pool = jnp.concatenate([values.reshape(-1), default_value.reshape(1)])
  return (
    jnp.asarray(out_idx.astype(dt)),
    pool[jnp.asarray(source.astype(np.int32))],
    jnp.asarray(empty),
    jnp.asarray(reverse.astype(dt)),
  )


def _fill_known(*, indices, dense_shape):
  """The outputs the layout decides: indices, empty-row indicator, reverse index map."""
  out_idx, _, empty, reverse = fill_layout(indices, dense_shape)
  return {0: out_idx, 2: empty, 3: reverse}


def _fill_spec(st):
  @st.composite
  def calls(draw):
    dtype = draw(st.dtypes(("float32", "float64", "int32", "complex64")))
    idx, vals, shape = draw_sparse(draw, st, dtype)
    return {
      "indices": idx,
      "values": vals,
      "dense_shape": shape,
      "default_value": draw(st.arrays(dtype, ())),
    }

  return st.Spec(calls(), vmap_variation="scale")


def _fill_transpose(cts, values, default_value, *, indices, dense_shape):
  """TF's gradient: SparseFillEmptyRowsGrad of the values' cotangent."""
  _, _, _, reverse = fill_layout(indices, dense_shape)
  d_values, d_default = tfops.SparseFillEmptyRowsGrad(
    np.asarray(reverse, np.int64).astype(index_dtype()), rules.instantiate(cts[1])
  )
  return [d_values, d_default]


SparseFillEmptyRows = register_op(
  "SparseFillEmptyRows",
  _fill_empty_rows,
  family=FAMILY,
  static=("indices", "dense_shape"),
  multiple_results=True,
  spec=_fill_spec,
  interpret=static_outputs(_fill_known),
  jvp=rules.per_op(values_jvp, 2, 1),
  transpose=_fill_transpose,
  doc="A default entry in each empty row; the empty-row indicator and reverse index map.",
)
