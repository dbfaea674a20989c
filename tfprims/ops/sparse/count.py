"""Counting the values of a sparse tensor per row: SparseBincount (dense counts,
``tf.sparse.bincount`` / ``tf.math.bincount`` of a SparseTensor) and
SparseCountSparseOutput (sparse counts: ``tf.sparse.bincount`` with
``axis=-1``, the Keras count encodings of sparse inputs); DenseCountSparseOutput is its
dense-input form (``tf.sparse.bincount`` of a Tensor, rank 1 or 2).

A row is the entry's first index (rank >= 2; one row for rank 1). SparseBincount's
``size`` and dense shape are static (they decide the output shape); values outside
``[0, size)`` are dropped, negative ones too (TF's kernel drops them silently). The
weights are an operand: linear in them (``binary_output`` counts 1 per present bin,
derivative 0).

SparseCountSparseOutput has one entry per distinct (row, value), a data-dependent
count: its indices, values and dense shape are static (eager calls know them; under
jit traced ones raise StaticInputError naming the node), the layout is computed with
numpy and the weights are segment-summed (differentiable, vmappable). Values
``>= maxlength`` (when maxlength >= 0: 0 drops them all) are dropped; negative values
raise as TF does. The output width is ``maxlength`` when not -1, else ``max(largest value + 1,
minlength)`` (1 with no values, as TF's kernel starts from 0).

DenseCountSparseOutput counts a dense [rows, n] tensor (a [n] one as one row): its
values are static as SparseCountSparseOutput's, TF's checks of their shape (rank 1 or
2, at least one row) made on the node's input, the weights (the values' shape, or
empty) an operand.

The ragged forms (RaggedBincount, RaggedCountSparseOutput) reuse ``count_dense`` and
``count_sparse_layout`` with rows from the row splits.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from tfprims.core import register_op
from tfprims.ops.shared_specs import lazy_hst
from tfprims.ops.sparse._common import (
  FAMILY,
  draw_sparse,
  index_dtype,
  static_indices,
  static_outputs,
  static_shape,
)

WEIGHT_DTYPES = ("float32", "float64", "int32", "int64")


def count_dense(rows, values, weights, *, nrows, size, binary_output):
  """Per row the sum of ``weights`` (counts when empty; 1 per present bin with
  ``binary_output``) per value in ``[0, size)``: a [nrows, size] array. Rows outside
  ``[0, nrows)`` and other values are dropped."""
  if weights.size and weights.shape != values.shape:
    raise ValueError(
      "Weights and values must have the same shape. Weight shape: "
      f"{list(weights.shape)}; values shape: {list(values.shape)}"
    )
  wide = nrows * size >= 2**31 and jax.config.jax_enable_x64
  it = np.int64 if wide else np.int32
  v, r = values.reshape(-1), rows.reshape(-1)
  ok = (v >= 0) & (v < size) & (r >= 0) & (r < nrows)
  flat = jnp.where(ok, r.astype(it) * size + v.astype(it), nrows * size)
  w = (
    jnp.ones(v.shape, weights.dtype) if binary_output or weights.size == 0 else weights.reshape(-1)
  )
  out = jnp.zeros((nrows * size,), weights.dtype).at[flat].add(w, mode="drop")
  if binary_output:
    out = (out > 0).astype(weights.dtype)
  return out.reshape(nrows, size)


def count_width(kept_values, minlength, maxlength) -> int:
  """TF's output width of the *CountSparseOutput ops."""
  if maxlength >= 0:
    return int(maxlength)
  top = int(kept_values.max()) if kept_values.size else 0
  return max(top + 1, int(minlength))


def count_sparse_layout(rows, values, *, minlength, maxlength):
  """The *CountSparseOutput layout (numpy): the kept entries, each one's output
  group, the groups' (row, value) pairs in row-major order and the output width."""
  rows, values = np.asarray(rows, np.int64), np.asarray(values, np.int64)
  if values.size and values.min() < 0:
    raise ValueError("Input values must all be non-negative")
  keep = np.nonzero(values < maxlength)[0] if maxlength >= 0 else np.arange(values.size)
  pairs = np.stack([rows[keep], values[keep]], axis=1).reshape(-1, 2)
  if keep.size:
    groups, gid = np.unique(pairs, axis=0, return_inverse=True)
  else:
    groups, gid = np.zeros((0, 2), np.int64), np.zeros((0,), np.int64)
  return keep, np.asarray(gid).reshape(-1), groups, count_width(values[keep], minlength, maxlength)


def count_sparse_values(weights, keep, gid, ngroups, binary_output, nvalues):
  """The groups' values: summed weights (or counts), 1 with ``binary_output``."""
  if weights.size and weights.shape[0] != nvalues:
    raise ValueError(
      "Weights and values must have the same shape. Weight shape: "
      f"{list(weights.shape)}; values shape: [{nvalues}]"
    )
  if binary_output or weights.size == 0:
    counts = jnp.ones((ngroups,), weights.dtype)
    if binary_output:
      return counts
    return jax.ops.segment_sum(
      jnp.ones((keep.size,), weights.dtype), jnp.asarray(gid.astype(np.int32)), num_segments=ngroups
    )
  return jax.ops.segment_sum(
    weights[jnp.asarray(keep.astype(np.int32))],
    jnp.asarray(gid.astype(np.int32)),
    num_segments=ngroups,
  )


def draw_weights(draw, st, n):
  """Weights of ``n`` values, or none (counts)."""
  hst = lazy_hst()
  dtype = draw(hst.sampled_from(WEIGHT_DTYPES))
  if draw(hst.booleans()):
    return np.zeros((0,), dtype)
  return draw(st.arrays(dtype, (n,), special=False))


def draw_count_values(draw, n, dtype):
  """``n`` values to count: small, with repeats, some past the bins."""
  hst = lazy_hst()
  return np.asarray(draw(hst.lists(hst.integers(0, 7), min_size=n, max_size=n)), dtype)


# --- SparseBincount ---------------------------------------------------------------------------


def _rows_of(indices, rank):
  return indices[:, 0] if rank >= 2 else jnp.zeros(indices.shape[:1], indices.dtype)


def _sparse_bincount(indices, values, weights, *, dense_shape, size, binary_output):
  """Per row (the first index; one row for rank 1) the sum of the weights (counts;
  1 with binary_output) per value in [0, size)."""
  dims = static_shape(dense_shape)
  n = int(np.asarray(size).reshape(()))
  if n < 0:
    raise ValueError(f"size ({n}) must be non-negative")
  if not 1 <= len(dims):
    raise ValueError("dense_shape must have rank at least 1")
  if indices.ndim != 2 or indices.shape[1] != len(dims):
    raise ValueError(f"indices must be a matrix [nnz, {len(dims)}]")
  nrows = dims[0] if len(dims) >= 2 else 1
  out = count_dense(
    _rows_of(indices, len(dims)), values, weights, nrows=nrows, size=n, binary_output=binary_output
  )
  return out if len(dims) >= 2 else out[0]


def _sparse_bincount_spec(st):
  hst = lazy_hst()

  @st.composite
  def calls(draw):
    idx, _, shape = draw_sparse(draw, st, "float32", max_rank=2)
    vdt = draw(hst.sampled_from(("int32", "int64")))
    vals = draw_count_values(draw, len(idx), vdt)
    if len(vals) and draw(hst.booleans()):  # negative values (dropped)
      vals[0] = -1
    return {
      "indices": idx.astype(np.int64),
      "values": vals,
      "dense_shape": shape,
      "size": np.asarray(draw(hst.integers(0, 6)), vdt),
      "weights": draw_weights(draw, st, len(idx)),
      "binary_output": draw(hst.booleans()),
    }

  return st.Spec(
    calls(),
    vmap_variation="scale",
    grad_oracle="fd",
    examples=0.5,
    note="TF registers no gradient: the derivative in weights is checked by central differences",
  )


SparseBincount = register_op(
  "SparseBincount",
  _sparse_bincount,
  family=FAMILY,
  static=("dense_shape", "size"),
  attrs=("binary_output",),
  spec=_sparse_bincount_spec,
  doc="Per row of a sparse tensor, the weights (or counts) per value in [0, size).",
)


# --- SparseCountSparseOutput ------------------------------------------------------------------


def _scso_layout(indices, values, dense_shape, minlength, maxlength):
  dims = static_shape(dense_shape)
  if not 1 <= len(dims) <= 3:
    raise ValueError("Indices must be 1, 2 or 3 dimensional")
  idx = static_indices(indices, len(dims))
  vals = np.asarray(values, np.int64).reshape(-1)
  if len(vals) != len(idx):
    raise ValueError("Number of values must match first dimension of indices")
  bad = np.nonzero(np.any((idx < 0) | (idx >= np.asarray(dims)), axis=1))[0]
  if bad.size:
    raise ValueError(f"Invalid index value at {int(bad[0])}: not in the dense shape {list(dims)}")
  rows = idx[:, 0] if len(dims) >= 2 else np.zeros(len(idx), np.int64)
  keep, gid, groups, width = count_sparse_layout(
    rows, vals, minlength=minlength, maxlength=maxlength
  )
  if len(dims) >= 2:
    return keep, gid, groups, np.asarray([dims[0], width], np.int64)
  return keep, gid, groups[:, 1:], np.asarray([width], np.int64)


def _scso(weights, *, indices, values, dense_shape, binary_output, minlength, maxlength):
  """One entry per distinct (row, value): the summed weights (counts; 1 with
  binary_output), values >= maxlength dropped."""
  keep, gid, groups, shape = _scso_layout(indices, values, dense_shape, minlength, maxlength)
  out = count_sparse_values(
    weights, keep, gid, len(groups), binary_output, len(np.asarray(values).reshape(-1))
  )
  dt = index_dtype()
  return jnp.asarray(groups.astype(dt)), out, jnp.asarray(shape.astype(dt))


def _scso_known(*, indices, values, dense_shape, binary_output, minlength, maxlength):
  _, _, groups, shape = _scso_layout(indices, values, dense_shape, minlength, maxlength)
  return {0: groups, 2: shape}


def draw_lengths(draw):
  """minlength / maxlength attrs (-1: none)."""
  hst = lazy_hst()
  return {
    "minlength": draw(hst.sampled_from([-1, 0, 3, 9])),
    "maxlength": draw(hst.sampled_from([-1, 0, 2, 5])),
  }


def _scso_spec(st):
  hst = lazy_hst()

  @st.composite
  def calls(draw):
    idx, _, shape = draw_sparse(draw, st, "float32", max_rank=2)
    vals = draw_count_values(draw, len(idx), draw(hst.sampled_from(("int32", "int64"))))
    return {
      "indices": idx.astype(np.int64),
      "values": vals,
      "dense_shape": shape,
      "weights": draw_weights(draw, st, len(idx)),
      "binary_output": draw(hst.booleans()),
      **draw_lengths(draw),
    }

  return st.Spec(
    calls(),
    vmap_variation="scale",
    grad_oracle="fd",
    examples=0.5,
    note="TF registers no gradient: the derivative in weights is checked by central differences",
  )


SparseCountSparseOutput = register_op(
  "SparseCountSparseOutput",
  _scso,
  family=FAMILY,
  static=("indices", "values", "dense_shape"),
  attrs=("binary_output", "minlength", "maxlength"),
  multiple_results=True,
  spec=_scso_spec,
  interpret=static_outputs(_scso_known),
  doc="One entry per distinct (row, value) of a sparse tensor: the summed weights "
  "(or counts, or 1).",
)


# --- DenseCountSparseOutput -------------------------------------------------------------------


def _dcso_layout(values, minlength, maxlength):
  vals = np.asarray(values, np.int64)
  if vals.ndim not in (1, 2):
    raise ValueError(f"Input must be a 1 or 2-dimensional tensor. Got: {list(vals.shape)}")
  if vals.ndim == 2 and vals.shape[0] == 0:
    raise ValueError("Invalid input: Shapes dimension cannot be 0.")
  nrows = vals.shape[0] if vals.ndim == 2 else 1
  rows = np.repeat(np.arange(nrows, dtype=np.int64), vals.shape[-1])
  keep, gid, groups, width = count_sparse_layout(
    rows, vals.reshape(-1), minlength=minlength, maxlength=maxlength
  )
  if vals.ndim == 2:
    return keep, gid, groups, np.asarray([nrows, width], np.int64), vals.shape
  return keep, gid, groups[:, 1:], np.asarray([width], np.int64), vals.shape


def _dcso(weights, *, values, binary_output, minlength, maxlength):
  """One entry per distinct (row, value) of a dense [rows, n] (or [n]: one row)
  tensor: the summed weights (counts; 1 with binary_output), values >= maxlength
  dropped."""
  keep, gid, groups, shape, vshape = _dcso_layout(values, minlength, maxlength)
  if weights.size and weights.shape != vshape:
    raise ValueError(
      "Weights and data must have the same shape. Weight shape: "
      f"{list(weights.shape)}; data shape: {list(vshape)}"
    )
  n = int(np.prod(vshape))
  out = count_sparse_values(weights.reshape(-1), keep, gid, len(groups), binary_output, n)
  dt = index_dtype()
  return jnp.asarray(groups.astype(dt)), out, jnp.asarray(shape.astype(dt))


def _dcso_known(*, values, binary_output, minlength, maxlength):
  _, _, groups, shape, _ = _dcso_layout(values, minlength, maxlength)
  return {0: groups, 2: shape}


def _dcso_interpret():
  bound = static_outputs(_dcso_known)

  def interpret(ctx, node, inputs):
    # The values become a nested-tuple param, where a [0, n] input would read as [0]:
    # TF's checks of its shape are made on the node's input.
    shape = np.shape(inputs[0])
    if len(shape) not in (1, 2):
      raise ValueError(f"Input must be a 1 or 2-dimensional tensor. Got: {list(shape)}")
    if len(shape) == 2 and shape[0] == 0:
      raise ValueError("Invalid input: Shapes dimension cannot be 0.")
    return bound(ctx, node, inputs)

  return interpret


def _dcso_spec(st):
  hst = lazy_hst()

  @st.composite
  def calls(draw):
    shape = (
      (draw(hst.integers(1, 3)), draw(hst.integers(0, 3)))
      if draw(hst.booleans())
      else (draw(hst.integers(0, 6)),)
    )
    n = int(np.prod(shape))
    vals = draw_count_values(draw, n, draw(hst.sampled_from(("int32", "int64"))))
    weights = draw_weights(draw, st, n)
    return {
      "values": vals.reshape(shape),
      "weights": weights.reshape(shape) if weights.size else weights,
      "binary_output": draw(hst.booleans()),
      **draw_lengths(draw),
    }

  return st.Spec(
    calls(),
    vmap_variation="scale",
    grad_oracle="fd",
    examples=0.5,
    note="TF registers no gradient: the derivative in weights is checked by central differences",
  )


DenseCountSparseOutput = register_op(
  "DenseCountSparseOutput",
  _dcso,
  family=FAMILY,
  static=("values",),
  attrs=("binary_output", "minlength", "maxlength"),
  multiple_results=True,
  spec=_dcso_spec,
  interpret=_dcso_interpret(),
  doc="One entry per distinct (row, value) of a dense tensor (rank 1: one row): the "
  "summed weights (or counts, or 1).",
)
