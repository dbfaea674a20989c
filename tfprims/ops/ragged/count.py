"""Per-row counts and filled rows of a ragged tensor given as row splits (or value
row ids) and flat values: RaggedBincount, RaggedCountSparseOutput (``tf.sparse.bincount``
/ ``tf.math.bincount`` of a RaggedTensor, the Keras count encodings), and
RaggedFillEmptyRows with its gradient RaggedFillEmptyRowsGrad (``tf.ragged``'s
``fill_empty_rows``).

RaggedBincount computes on its operands (the row count is the splits' length, the
number of bins ``size`` is static) and raises like TF on negative values with
``runtime_checks``; the sparse family's ``count_dense`` does the counting.
RaggedCountSparseOutput has one entry per distinct (row, value), a data-dependent
count: its splits and values are static (eager calls know them; under jit traced
ones raise StaticInputError naming the node), as SparseCountSparseOutput's.
RaggedFillEmptyRows adds one entry per empty row: its value row ids and row count are
static (SparseFillEmptyRows's layout on rank-1 indices); the values are a gather of
the values and the default value. RaggedFillEmptyRowsGrad is SparseFillEmptyRowsGrad's
kernel, and RaggedFillEmptyRows' transpose (TF's registered gradient), so grad jaxprs
keep TF's names. Semantics: docs/semantics/ragged.md.
"""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np

import jax

from tfprims import core, interpreter, opdefs, rules
from tfprims import dtypes as tfdtypes
from tfprims.core import register_op, tfops
from tfprims.ops.ragged._common import FAMILY, known_ints, op_error, unknown_size
from tfprims.ops.ragged._specs import draw_lengths, splits_of
from tfprims.ops.shared_specs import lazy_hst
from tfprims.ops.sparse import index_dtype, values_jvp
from tfprims.ops.sparse.count import (
  count_dense,
  count_sparse_layout,
  count_sparse_values,
  draw_count_values,
  draw_weights,
)
from tfprims.ops.sparse.count import draw_lengths as draw_min_max
from tfprims.ops.sparse.grads import (
  fill_grad,
  fill_grad_check,
  fill_grad_jvp,
  fill_grad_spec,
  fill_grad_transpose,
)
from tfprims.ops.sparse.structure import fill_layout


def _row_of(splits, n):
  """Each flat value's row in row splits."""
  items = jnp.arange(n, dtype=splits.dtype)
  return jnp.searchsorted(splits, items, side="right").astype(splits.dtype) - 1


def known_static(names, what, known):
  """The hook of an op whose static inputs ``names`` are row partitions (or values)
  deciding its output size: taken from their known values (constants, eager values,
  or what the value analysis proves, as the other ragged ops), else DynamicShapeError
  naming the node; traced outputs that the static params decide (``known(**params)``)
  become constants."""

  def interpret(ctx, node, inputs):
    op = core.lookup(node.op)
    attrs = interpreter.AttrView(node)
    grouped = opdefs.group_inputs(node.op, inputs, attrs)
    for name in names:
      value = known_ints(ctx, grouped[name])
      if value is None:
        raise unknown_size(node, what)
      grouped[name] = value
    try:
      operands, params = op.prepare(grouped, attrs, node.name)
      outs = list(op.apply(operands, params))
      fixed = known(**params)
    except ValueError as e:
      raise op_error(node, str(e)) from None
    if any(isinstance(o, jax.core.Tracer) for o in outs):
      for k, v in fixed.items():
        outs[k] = tfdtypes.canonicalize_value(np.asarray(v), f"{node.op} node '{node.name}'")
    return outs

  return interpret


def _draw_ragged_values(draw, st):
  hst = lazy_hst()
  lengths = draw_lengths(draw, 1, max_rows=4, max_len=3)[0]
  vals = draw_count_values(draw, int(lengths.sum()), draw(hst.sampled_from(("int32", "int64"))))
  return splits_of(lengths), vals


# --- RaggedBincount -------------------------------------------------------------------------


def _ragged_bincount(splits, values, weights, *, size, binary_output):
  """Per row the sum of the weights (counts; 1 with binary_output) per value in
  [0, size)."""
  n = int(np.asarray(size).reshape(()))
  if n < 0:
    raise ValueError(f"size ({n}) must be non-negative")
  if splits.ndim != 1 or splits.shape[0] < 1:
    raise ValueError("splits must be a non-empty vector")
  if values.ndim != 1:
    raise ValueError("values must be a vector")
  rows = _row_of(splits, values.shape[0])
  return count_dense(
    rows, values, weights, nrows=splits.shape[0] - 1, size=n, binary_output=binary_output
  )


def _ragged_bincount_check(splits, values, weights, **_):
  return jnp.any(values < 0), "Input must be non-negative"


def _ragged_bincount_spec(st):
  hst = lazy_hst()

  @st.composite
  def calls(draw):
    splits, vals = _draw_ragged_values(draw, st)
    return {
      "splits": splits,
      "values": vals,
      "size": np.asarray(draw(hst.integers(0, 6)), vals.dtype),
      "weights": draw_weights(draw, st, len(vals)),
      "binary_output": draw(hst.booleans()),
    }

  return st.Spec(
    calls(),
    vmap_variation="scale",
    grad_oracle="fd",
    examples=0.5,
    note="TF registers no gradient: the derivative in weights is checked by central differences",
  )


RaggedBincount = register_op(
  "RaggedBincount",
  _ragged_bincount,
  family=FAMILY,
  static=("size",),
  attrs=("binary_output",),
  check=_ragged_bincount_check,
  spec=_ragged_bincount_spec,
  doc="Per row of a ragged tensor, the weights (or counts) per value in [0, size).",
)


# --- RaggedCountSparseOutput ----------------------------------------------------------------


def _rcso_layout(splits, values, minlength, maxlength):
  s = np.asarray(splits, np.int64).reshape(-1)
  vals = np.asarray(values, np.int64).reshape(-1)
  if s.size == 0 or s[0] != 0 or np.any(np.diff(s) < 0) or s[-1] != vals.size:
    raise ValueError(
      "Invalid row splits: they must start at 0, not decrease and end at "
      f"the number of values ({vals.size})"
    )
  rows = np.searchsorted(s, np.arange(vals.size), side="right") - 1
  keep, gid, groups, width = count_sparse_layout(
    rows, vals, minlength=minlength, maxlength=maxlength
  )
  return keep, gid, groups, np.asarray([s.size - 1, width], np.int64)


def _rcso(weights, *, splits, values, binary_output, minlength, maxlength):
  """One entry per distinct (row, value): the summed weights (counts; 1 with
  binary_output), values >= maxlength dropped."""
  keep, gid, groups, shape = _rcso_layout(splits, values, minlength, maxlength)
  out = count_sparse_values(
    weights, keep, gid, len(groups), binary_output, len(np.asarray(values).reshape(-1))
  )
  dt = index_dtype()
  return jnp.asarray(groups.astype(dt)), out, jnp.asarray(shape.astype(dt))


def _rcso_known(*, splits, values, binary_output, minlength, maxlength):
  _, _, groups, shape = _rcso_layout(splits, values, minlength, maxlength)
  return {0: groups, 2: shape}


def _rcso_spec(st):
  hst = lazy_hst()

  @st.composite
  def calls(draw):
    splits, vals = _draw_ragged_values(draw, st)
    return {
      "splits": splits,
      "values": vals,
      "weights": draw_weights(draw, st, len(vals)),
      "binary_output": draw(hst.booleans()),
      **draw_min_max(draw),
    }

  return st.Spec(
    calls(),
    vmap_variation="scale",
    grad_oracle="fd",
    examples=0.5,
    note="TF registers no gradient: the derivative in weights is checked by central differences",
  )


RaggedCountSparseOutput = register_op(
  "RaggedCountSparseOutput",
  _rcso,
  family=FAMILY,
  static=("splits", "values"),
  attrs=("binary_output", "minlength", "maxlength"),
  multiple_results=True,
  spec=_rcso_spec,
  interpret=known_static(
    ("splits", "values"), "the number of distinct (row, value) pairs", _rcso_known
  ),
  doc="One entry per distinct (row, value) of a ragged tensor: the summed weights (or "
  "counts, or 1).",
)


# --- RaggedFillEmptyRows / RaggedFillEmptyRowsGrad -------------------------------------------


def _fill_layout(value_rowids, nrows):
  """SparseFillEmptyRows's layout, the row ids as output (TF's kernel returns them
  as a [0, 1] matrix for zero rows)."""
  rowids = np.asarray(value_rowids, np.int64).reshape(-1)
  n = int(np.asarray(nrows).reshape(()))
  out_idx, source, empty, reverse = fill_layout(rowids[:, None], np.asarray([n], np.int64))
  return (out_idx if n == 0 else out_idx[:, 0]), source, empty, reverse


def _fill(values, default_value, *, value_rowids, nrows):
  """The values with the default value in each empty row (rows sorted, each row's
  values in their order): row ids, values, empty-row indicator, reverse index map."""
  out_idx, source, empty, reverse = _fill_layout(value_rowids, nrows)
  if default_value.ndim != 0:
    raise ValueError("default_value must be a scalar")
  if values.ndim != 1 or values.shape[0] != len(reverse):
    raise ValueError("values must be a vector of one value per value row id")
  dt = index_dtype()
  pool = jnp.concatenate([values, default_value.reshape(1)])
  return (
    jnp.asarray(out_idx.astype(dt)),
    pool[jnp.asarray(source.astype(np.int32))],
    jnp.asarray(empty),
    jnp.asarray(reverse.astype(dt)),
  )


def _fill_known(*, value_rowids, nrows):
  out_idx, _, empty, reverse = _fill_layout(value_rowids, nrows)
  return {0: out_idx, 2: empty, 3: reverse}


def _fill_spec(st):
  hst = lazy_hst()

  @st.composite
  def calls(draw):
    dtype = draw(st.dtypes(("float32", "float64", "int32", "complex64")))
    nrows = draw(hst.integers(0, 4))
    n = draw(hst.integers(0, 5)) if nrows else 0
    rowids = draw(hst.lists(hst.integers(0, nrows - 1), min_size=n, max_size=n)) if n else []
    if draw(hst.booleans()):
      rowids = sorted(rowids)  # as a ragged tensor's value_rowids (unsorted ones too)
    return {
      "value_rowids": np.asarray(rowids, np.int64),
      "values": draw(st.arrays(dtype, (n,))),
      "nrows": np.int64(nrows),
      "default_value": draw(st.arrays(dtype, ())),
    }

  return st.Spec(calls(), vmap_variation="scale", examples=0.5)


def _fill_transpose(cts, values, default_value, *, value_rowids, nrows):
  """TF's gradient: RaggedFillEmptyRowsGrad of the values' cotangent."""
  reverse = _fill_layout(value_rowids, nrows)[3]
  return list(
    tfops.RaggedFillEmptyRowsGrad(
      np.asarray(reverse, np.int64).astype(index_dtype()), rules.instantiate(cts[1])
    )
  )


RaggedFillEmptyRows = register_op(
  "RaggedFillEmptyRows",
  _fill,
  family=FAMILY,
  static=("value_rowids", "nrows"),
  multiple_results=True,
  spec=_fill_spec,
  interpret=known_static(("value_rowids", "nrows"), "the number of empty rows", _fill_known),
  jvp=rules.per_op(values_jvp, 2, 1),
  transpose=_fill_transpose,
  doc="A default value in each empty row of a ragged tensor (value row ids); the "
  "empty-row indicator and reverse index map.",
)

RaggedFillEmptyRowsGrad = register_op(
  "RaggedFillEmptyRowsGrad",
  fill_grad,
  family=FAMILY,
  multiple_results=True,
  check=fill_grad_check,
  jvp=rules.per_op(fill_grad_jvp),
  transpose=fill_grad_transpose,
  spec=fill_grad_spec,
  doc="RaggedFillEmptyRows's gradient: the gradient at the reverse index map, and the "
  "sum of the rest for the default value.",
)
