"""Property-test specs of the ragged ops: ragged structures drawn as row lengths per
level (empty rows, all rows empty and zero rows among them), encoded as TF's row
partitions."""

from __future__ import annotations

import numpy as np

from tfprims.ops.shared_specs import lazy_hst

_DTYPES = ("float32", "float64", "int32", "int64", "bool")


def splits_of(lengths) -> np.ndarray:
  return np.concatenate([[0], np.cumsum(lengths, dtype=np.int64)]).astype(np.int64)


def rowids_of(lengths) -> np.ndarray:
  return np.repeat(np.arange(len(lengths), dtype=np.int64), lengths)


def draw_lengths(draw, levels: int, max_rows: int = 4, max_len: int = 4) -> list:
  """Row lengths of each ragged level: the first level has 0..max_rows rows, each
  level's row count is the total length of the level above."""
  hst = lazy_hst()
  nrows = draw(hst.integers(0, max_rows))
  out = []
  for _ in range(levels):
    lengths = draw(hst.lists(hst.integers(0, max_len), min_size=nrows, max_size=nrows))
    if lengths and draw(hst.integers(0, 5)) == 0:
      lengths = [0] * nrows  # every row empty
    out.append(np.asarray(lengths, np.int64))
    nrows = int(sum(lengths))
  return out


def partitions(lengths, rowids: bool, dtype):
  """TF's row partition tensors and types for per-level row lengths."""
  if rowids:
    tensors = [np.asarray(len(lengths[0]), dtype)] + [rowids_of(v).astype(dtype) for v in lengths]
    return tensors, ("FIRST_DIM_SIZE",) + ("VALUE_ROWIDS",) * len(lengths)
  return [splits_of(v).astype(dtype) for v in lengths], ("ROW_SPLITS",) * len(lengths)


def _to_tensor_params(kw, output_shape):
  parts, types = kw["row_partition_tensors"], tuple(kw["row_partition_types"])
  return {
    "shape": output_shape(
      kw["shape"],
      kw["values"].shape,
      parts,
      [np.shape(p)[0] if np.ndim(p) else 0 for p in parts],
      types,
    ),
    "row_partition_types": types,
  }


def _to_tensor_call(
  lengths, rowids, values, default, shape, index_dtype=np.int64, shape_dtype=np.int64
):
  parts, types = partitions(lengths, rowids, index_dtype)
  return {
    "shape": np.asarray(shape, shape_dtype),
    "values": values,
    "default_value": default,
    "row_partition_tensors": parts,
    "row_partition_types": list(types),
  }


def _cases():
  f32 = np.float32
  return [
    # an empty row, a row longer than the given width (cut), value row ids
    _to_tensor_call([np.int64([2, 0, 4])], True, np.arange(1, 7, dtype=f32), f32(-1), [-1, 3]),
    # every row empty, padded to more rows than it has
    _to_tensor_call([np.int64([0, 0])], False, np.zeros(0, f32), f32(1), [3, -1]),
    _to_tensor_call([np.int64([])], True, np.zeros(0, f32), f32(1), -1),  # zero rows
    # ragged rank 2 with an inner dim, default_value broadcast along it
    _to_tensor_call(
      [np.int64([1, 2]), np.int64([2, 0, 3])],
      False,
      np.arange(10, dtype=f32).reshape(5, 2),
      f32([7, 8]),
      [-1, -1, 2, -1],
      np.int32,
      np.int32,
    ),
  ]


def to_tensor_spec(st, output_shape):
  """``output_shape``: :func:`tfprims.ops.ragged.to_tensor.output_shape`."""
  hst = lazy_hst()

  @st.composite
  def calls(draw):
    levels = draw(hst.integers(1, 2))
    lengths = draw_lengths(draw, levels)
    rowids = draw(hst.booleans())
    dtype = draw(st.dtypes(_DTYPES))
    inner = tuple(draw(hst.lists(hst.integers(0, 2), max_size=1)))
    values = draw(st.arrays(dtype, (int(sum(lengths[-1])),) + inner))
    default = draw(st.arrays(dtype, draw(hst.sampled_from([(), inner]))))
    if draw(hst.booleans()):
      shape = -1
    else:
      outer = [draw(hst.sampled_from([-1, -1, 0, 1, 2, 3, 5])) for _ in range(levels + 1)]
      shape = outer + [draw(hst.sampled_from([-1, d])) for d in inner]
    return _to_tensor_call(
      lengths,
      rowids,
      values,
      default,
      shape,
      draw(st.dtypes(("int32", "int64"))),
      draw(st.dtypes(("int32", "int64"))),
    )

  return st.Spec(
    calls(),
    operands=("values", "default_value", "row_partition_tensors"),
    params=lambda kw: _to_tensor_params(kw, output_shape),
    diff_args=("values", "default_value"),
    vmap_variation="scale",
    cases=_cases(),
    examples=0.3,
    grad_oracle="vjp",
    note="drawn ragged ranks 1 and 2, as row splits or value row ids; given shapes cut or pad",
  )


def _gather_params(kw, gather_sizes):
  rank = len(kw["params_nested_splits"])
  return {
    "sizes": gather_sizes(kw["params_nested_splits"], kw["indices"]),
    "PARAMS_RAGGED_RANK": rank,
    "OUTPUT_RAGGED_RANK": rank,
  }


def gather_spec(st, gather_sizes):
  hst = lazy_hst()

  @st.composite
  def calls(draw):
    lengths = draw_lengths(draw, draw(hst.integers(1, 2)))
    nrows = len(lengths[0])
    inner = tuple(draw(hst.lists(hst.integers(0, 2), max_size=1)))
    values = draw(st.arrays(st.dtypes(_DTYPES), (int(sum(lengths[-1])),) + inner))
    index_dtype = draw(st.dtypes(("int32", "int64")))
    indices = draw(hst.lists(hst.integers(0, nrows - 1), max_size=5)) if nrows else []
    return {
      "params_nested_splits": [splits_of(v).astype(index_dtype) for v in lengths],
      "params_dense_values": values,
      "indices": np.asarray(indices, draw(st.dtypes(("int32", "int64")))),
      "OUTPUT_RAGGED_RANK": len(lengths),
    }

  f32 = np.float32
  # ragged rank 2, an empty and a repeated row; zero rows and no indices
  cases = [
    {
      "params_nested_splits": [splits_of([2, 0, 3]), splits_of([1, 0, 2, 1, 1])],
      "params_dense_values": np.arange(5, dtype=f32),
      "indices": np.int32([2, 1, 1, 0]),
      "OUTPUT_RAGGED_RANK": 2,
    },
    {
      "params_nested_splits": [splits_of([])],
      "params_dense_values": np.zeros(0, f32),
      "indices": np.int64([]),
      "OUTPUT_RAGGED_RANK": 1,
    },
  ]
  return st.Spec(
    calls(),
    operands=("params_nested_splits", "params_dense_values", "indices"),
    params=lambda kw: _gather_params(kw, gather_sizes),
    diff_args=("params_dense_values",),
    vmap_variation="scale",
    cases=cases,
    examples=0.3,
    grad_oracle="vjp",
  )


def _range_params(kw, range_sizes):
  arrays = np.broadcast_arrays(*(np.atleast_1d(kw[k]) for k in ("starts", "limits", "deltas")))
  return {
    "size": int(np.sum(range_sizes(*arrays, np).astype(np.int64))),
    "T": np.dtype(kw["starts"].dtype),
    "Tsplits": kw.get("Tsplits", np.dtype(np.int64)),
  }


def range_spec(st, range_sizes):
  hst = lazy_hst()

  @st.composite
  def calls(draw):
    dtype = draw(st.dtypes(("float32", "float64", "int32", "int64")))
    n = draw(hst.integers(0, 4))
    shapes = [draw(hst.sampled_from([(), (n,)])) for _ in range(3)]
    lo, hi = (-20, 20)
    starts = draw(st.arrays(dtype, shapes[0], min_value=lo, max_value=hi, special=False))
    limits = draw(st.arrays(dtype, shapes[1], min_value=lo, max_value=hi, special=False))
    mags = draw(st.arrays(dtype, shapes[2], min_value=1, max_value=7, special=False))
    signs = np.asarray(
      draw(
        hst.lists(
          hst.sampled_from([-1, 1]), min_size=int(np.size(mags)), max_size=int(np.size(mags))
        )
      ),
      dtype,
    ).reshape(shapes[2])
    return {
      "starts": starts,
      "limits": limits,
      "deltas": (mags * signs).astype(dtype),
      "Tsplits": draw(st.dtypes(("int32", "int64"))),
    }

  cases = [
    {
      "starts": np.int64([0, 5, 3]),
      "limits": np.int64([4, 5, -3]),
      "deltas": np.int64([1, 2, -2]),
      "Tsplits": np.dtype(np.int64),
    },
    {
      "starts": np.float32(0.1),
      "limits": np.float32([1.0, 0.0]),
      "deltas": np.float32(0.1),
      "Tsplits": np.dtype(np.int32),
    },
  ]  # accumulated floats
  return st.Spec(
    calls(),
    operands=("starts", "limits", "deltas"),
    params=lambda kw: _range_params(kw, range_sizes),
    diff_args=(),
    vmap_variation="none",
    cases=cases,
    examples=0.3,
    skip={
      "jvp": "the values' derivative is not defined by TF (no gradient)",
      "vjp": "no gradient in TF",
    },
  )


def to_sparse_spec(st):
  hst = lazy_hst()

  @st.composite
  def calls(draw):
    lengths = draw_lengths(draw, draw(hst.integers(1, 2)))
    inner = tuple(draw(hst.lists(hst.integers(0, 2), max_size=1)))
    values = draw(st.arrays(st.dtypes(_DTYPES), (int(sum(lengths[-1])),) + inner))
    index_dtype = draw(st.dtypes(("int32", "int64")))
    return {
      "rt_nested_splits": [splits_of(v).astype(index_dtype) for v in lengths],
      "rt_dense_values": values,
    }

  f32 = np.float32
  cases = [
    {
      "rt_nested_splits": [splits_of([2, 0, 1]), splits_of([1, 0, 2])],
      "rt_dense_values": np.arange(6, dtype=f32).reshape(3, 2),
    },
    {"rt_nested_splits": [splits_of([0, 0])], "rt_dense_values": np.zeros(0, f32)},
  ]
  return st.Spec(
    calls(),
    diff_args=("rt_dense_values",),
    vmap_variation="scale",
    cases=cases,
    examples=0.3,
    grad_oracle="vjp",
  )
