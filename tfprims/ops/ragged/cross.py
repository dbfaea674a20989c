"""RaggedCross of int64 features (``tf.ragged.cross_hashed``), bit-exact with TF's
kernel. (Keras 3's ``HashedCrossing`` emits SparseCross, in the sparse family.)

Each batch row's output row is the cartesian product of its features in the inputs,
taken in ``input_order`` (``R`` ragged, ``S`` sparse, ``D`` dense), the last input
varying fastest. A cross folds every feature's int64 value (no feature is hashed)
with ``FingerprintCat64`` from ``hash_key``, modulo ``num_buckets`` (``2^63 - 1``
when 0): :mod:`tfprims.ops.hashing.crosses`, as SparseCross. TF's kernel writes
these hashes whenever ``out_values_type`` is int64 and never reads ``hashed_output``,
so int64 output with ``hashed_output=False`` is the same hash here too. String output
(``tf.ragged.cross``) is refused naming the node, with the split_host_prefix hint.

A ragged feature row is its values between the row splits; a sparse one the entries
TF's reader assigns to it (it advances through the entries while their row is at most
the current one: sorted entries, rows by their first index); a dense one the matrix
row. The output's row splits (the crosses' count per row) are static: the ragged row
splits and the sparse indices and shapes are static params (eager calls know them,
and so do constants; under jit traced ones raise StaticInputError naming the node);
the values are operands, hashed under jit. Semantics: docs/semantics/ragged.md.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from tfprims import core, errors, interpreter, opdefs
from tfprims import dtypes as tf_dtypes
from tfprims.core import register_op
from tfprims.ops.hashing import crosses, edge_values
from tfprims.ops.ragged._common import FAMILY, known_ints, op_error
from tfprims.ops.shared_specs import lazy_hst

_STATIC = {
  "ragged_row_splits": "row_splits",
  "sparse_indices": "sparse_indices",
  "sparse_shape": "sparse_shape",
}
_RANK2 = "tf.ragged.cross only supports inputs with rank=2."
_SAME_BATCH = "inputs must all have the same batch dimension size."


def _check_splits(splits, n_values):
  """TF's RaggedTensorVerifySplits."""
  if splits.ndim != 1:
    raise ValueError(_RANK2)
  if len(splits) == 0:
    raise ValueError("Invalid ragged splits: empty splits")
  if splits[0] != 0:
    raise ValueError(
      f"Invalid ragged splits: first element of ragged splits must be 0 but is {splits[0]}"
    )
  if np.any(np.diff(splits) < 0):
    raise ValueError("Invalid ragged splits: ragged splits must be monotonically increasing")
  if splits[-1] != n_values:
    raise ValueError(
      "Invalid ragged splits: last element of ragged splits must be the number of "
      f"ragged values({n_values}) but is {splits[-1]}"
    )


def _sparse_splits(indices, n_values, batch):
  """The row splits TF's SparseFeatureReader computes: for each row it advances
  through the entries while their row index is at most that row."""
  rows = indices[:n_values, 0] if n_values else np.zeros((0,), np.int64)
  reach = np.maximum.accumulate(rows) if len(rows) else rows
  return np.concatenate([[0], np.searchsorted(reach, np.arange(batch), side="right")])


def cross_layout(row_splits, sparse_indices, sparse_shape, value_sizes, dense_shapes, order):
  """Each cross's position in every input's flat values (an int64 ``[crosses,
  inputs]`` table, inputs in ``order``) and the output row splits (numpy int64).
  ``value_sizes``: the ragged inputs' then the sparse inputs' value counts."""
  n_r, n_s, n_d = len(row_splits), len(sparse_indices), len(dense_shapes)
  if len(order) != n_r + n_s + n_d or any(c not in "RSD" for c in order):
    raise ValueError(f"Invalid input_order {order!r} for {n_r} ragged, {n_s} sparse, {n_d} dense")
  if (order.count("R"), order.count("S")) != (n_r, n_s):
    raise ValueError(f"input_order {order!r} does not match {n_r} ragged and {n_s} sparse inputs")
  splits = [np.asarray(s, np.int64) for s in row_splits]
  for s, n in zip(splits, value_sizes[:n_r]):
    _check_splits(s, n)
  indices, shapes = [], []
  for k, (i, s) in enumerate(zip(sparse_indices, sparse_shape)):
    i, s = np.asarray(i, np.int64), np.asarray(s, np.int64)
    i = i.reshape(0, 2) if i.size == 0 else i  # no entries (a static param: ())
    if i.ndim != 2 or s.ndim != 1 or i.shape[0] < value_sizes[n_r + k]:
      raise ValueError(f"Invalid SparseTensor {k}")
    if s.shape[0] != 2:
      raise ValueError(_RANK2)
    indices.append(i)
    shapes.append(s)
  if any(len(d) != 2 for d in dense_shapes):
    raise ValueError(_RANK2)
  if splits:
    batch = len(splits[0]) - 1
  elif dense_shapes:
    batch = dense_shapes[0][0]
  else:
    batch = int(shapes[0][0]) if shapes else 0
  sizes = [len(s) - 1 for s in splits] + [int(s[0]) for s in shapes]
  if any(b != batch for b in sizes + [d[0] for d in dense_shapes]):
    raise ValueError(_SAME_BATCH)
  starts = {
    "R": iter(splits),
    "S": iter(_sparse_splits(i, n, batch) for i, n in zip(indices, value_sizes[n_r:])),
    "D": iter(np.arange(batch + 1) * d[1] for d in dense_shapes),
  }
  per_input = []  # per input (in order): per batch row, the feature positions
  for c in order:
    s = next(starts[c])
    per_input.append([np.arange(s[b], s[b + 1]) for b in range(batch)])
  positions, counts = crosses.cross_positions(per_input, batch)
  return positions, np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)


def _layout(operands, params):
  n_r, n_s = len(params["row_splits"]), len(params["sparse_indices"])
  for k, v in enumerate(operands[: n_r + n_s]):
    if np.ndim(v) != 1:
      raise ValueError(_RANK2 if k < n_r else f"Invalid SparseTensor {k - n_r}")
  sizes = [int(np.shape(v)[0]) for v in operands[: n_r + n_s]]
  dense = [np.shape(x) for x in operands[n_r + n_s :]]
  return cross_layout(
    params["row_splits"],
    params["sparse_indices"],
    params["sparse_shape"],
    sizes,
    dense,
    params["input_order"],
  )


def _check_output(out_values_type, num_buckets):
  if str(out_values_type) != "int64":  # DT_STRING has no numpy dtype: "string"
    raise ValueError(
      "out_values_type=string crosses features into strings (tf.ragged.cross), "
      "which JAX has no dtype for; run it in TF: tfprims.split_host_prefix(fn, ...) "
      "converts the numeric rest (tf.ragged.cross_hashed converts)"
    )
  crosses.check_num_buckets(int(num_buckets))


def _ragged_cross(
  *operands,
  row_splits,
  sparse_indices,
  sparse_shape,
  input_order,
  hashed_output,
  num_buckets,
  hash_key,
  out_values_type,
  out_row_splits_type,
):
  """Each batch row's crosses of the int64 features in input_order, FingerprintCat64
  folded from hash_key, into num_buckets; and the output row splits."""
  _check_output(out_values_type, num_buckets)
  for v in operands:
    if np.dtype(v.dtype).kind not in "iu":
      raise TypeError(f"only integer features are crossed here, got {v.dtype}")
  params = dict(
    row_splits=row_splits,
    sparse_indices=sparse_indices,
    sparse_shape=sparse_shape,
    input_order=input_order,
  )
  positions, out_splits = _layout(operands, params)
  n_r, n_s = len(row_splits), len(sparse_indices)
  groups = {
    "R": iter(operands[:n_r]),
    "S": iter(operands[n_r : n_r + n_s]),
    "D": iter(operands[n_r + n_s :]),
  }
  feats = [crosses.as_pair(jnp.reshape(next(groups[c]), (-1,))) for c in input_order]
  values = crosses.hash_crosses(feats, positions, int(num_buckets), int(hash_key))
  splits_dtype = tf_dtypes.canonical_dtype(np.dtype(out_row_splits_type))
  return values, jnp.asarray(out_splits.astype(splits_dtype))


def _interpret(ctx, node, inputs):
  """The row splits, sparse indices and shapes read from their known values (eager
  values, constants, or what the value analysis proves), else StaticInputError naming
  the node; a traced result's row splits become constants (the static params decide
  them), so the crossed ragged tensor's structure stays known under jit."""
  try:
    return _run(ctx, node, inputs)
  except errors.Int64OverflowError as e:  # typed, and naming the node
    raise errors.Int64OverflowError(f"{node.op} node '{node.name}': {e}") from None
  except errors.TFPrimsError:
    raise
  except (ValueError, TypeError) as e:
    raise op_error(node, str(e)) from None


def _run(ctx, node, inputs):
  op = core.lookup(node.op)
  attrs = interpreter.AttrView(node)
  _check_output(attrs["out_values_type"], attrs["num_buckets"])  # before the splits
  out_splits_type = tf_dtypes.from_tf(attrs["out_row_splits_type"])
  for t in attrs["ragged_splits_types"] or ():
    if tf_dtypes.from_tf(t) != out_splits_type:
      raise ValueError(
        f"a ragged input's row splits are {tf_dtypes.from_tf(t)}, but out_row_splits_type "
        f"is {out_splits_type} (TF's kernel aborts the process): cast the splits"
      )
  grouped = opdefs.group_inputs(node.op, inputs, attrs)
  for arg in _STATIC:
    known = [known_ints(ctx, v) for v in grouped[arg]]
    if any(k is None for k in known):
      raise errors.StaticInputError(
        node.op, node.name, arg, "the output row splits (the crosses' count per row) come from it"
      )
    grouped[arg] = known
  operands, params = op.prepare(grouped, attrs, node.name)
  outs = list(op.apply(operands, params))
  if isinstance(outs[1], jax.core.Tracer):
    splits = _layout(operands, params)[1].astype(out_splits_type)
    outs[1] = tf_dtypes.canonicalize_value(splits, f"{node.op} node '{node.name}'")
  return outs


def _spec(st):
  hst = lazy_hst()

  @st.composite
  def calls(draw):
    edges = edge_values(np.dtype(np.int64))
    value = hst.one_of(hst.sampled_from(edges), hst.integers(min(edges), max(edges)))

    def values(n):
      return np.asarray(draw(hst.lists(value, min_size=n, max_size=n)), np.int64)

    batch = draw(hst.integers(0, 3))
    order = "".join(draw(hst.lists(hst.sampled_from("RSD"), min_size=1, max_size=3)))
    splits_type = np.dtype(draw(hst.sampled_from(["int32", "int64"])))
    call = {k: [] for k in ("ragged_values", "ragged_row_splits", "sparse_indices")}
    call.update(sparse_values=[], sparse_shape=[], dense_inputs=[])
    for c in order:
      if c == "R":  # rows of 0 to 3 features: empty rows, every row empty
        lengths = draw(hst.lists(hst.integers(0, 3), min_size=batch, max_size=batch))
        splits = np.concatenate([[0], np.cumsum(lengths, dtype=np.int64)])
        call["ragged_row_splits"].append(splits.astype(splits_type))
        call["ragged_values"].append(values(int(splits[-1])))
      elif c == "S":
        width = draw(hst.integers(1, 3))
        flat = draw(hst.lists(hst.integers(0, max(batch * width - 1, 0)), max_size=5, unique=True))
        # sorted by row as a SparseTensor is, or not: TF's reader then stops at the
        # first entry of a later row
        flat = (sorted(flat) if draw(hst.booleans()) else flat) if batch else []
        idx = np.stack(np.unravel_index(np.asarray(flat, np.int64), (batch, width)), 1)
        call["sparse_indices"].append(idx.reshape(-1, 2).astype(np.int64))
        call["sparse_values"].append(values(len(flat)))
        call["sparse_shape"].append(np.asarray([batch, width], np.int64))
      else:
        k = draw(hst.integers(0, 2))
        call["dense_inputs"].append(values(batch * k).reshape(batch, k))
    big = [0, (1 << 62) + 12345] if tf_dtypes.x64_enabled() else []
    return {
      **call,
      "input_order": order,
      "hashed_output": draw(hst.booleans()),  # TF's kernel hashes either way
      "num_buckets": draw(hst.sampled_from([1, 2, 16, 1000, 65537, 1 << 31] + big)),
      "hash_key": draw(hst.sampled_from([0xDECAFCAFFE, 0, (1 << 63) - 1, -5])),
      "out_values_type": np.dtype(np.int64),
      "out_row_splits_type": splits_type,
    }

  # Three rows: a ragged input with an empty row and duplicate values, a sparse one
  # with an empty row, a dense one, in the order "SRD".
  case = {
    "ragged_values": [np.array([7, 7, -(1 << 31), (1 << 31) - 1], np.int64)],
    "ragged_row_splits": [np.array([0, 2, 2, 4], np.int64)],
    "sparse_indices": [np.array([[0, 0], [0, 1], [2, 0]], np.int64)],
    "sparse_values": [np.array([5, 5, -1], np.int64)],
    "sparse_shape": [np.array([3, 2], np.int64)],
    "dense_inputs": [np.array([[100, 0], [-200, 9], [1, 2]], np.int64)],
    "input_order": "SRD",
    "hashed_output": True,
    "num_buckets": 1000,
    "hash_key": 0xDECAFCAFFE,
    "out_values_type": np.dtype(np.int64),
    "out_row_splits_type": np.dtype(np.int64),
  }
  return st.Spec(
    calls(),
    skip={"jvp": _NO_GRAD, "vjp": _NO_GRAD},
    cases=[case],
    note="int64 ragged, sparse and dense features in any input_order, edge values "
    "(extremes, duplicates), empty rows and batches, num_buckets 0 and 1, int32 and "
    "int64 splits; string output is refused",
  )


_NO_GRAD = "integer output: not differentiable (TF registers no gradient)"

RaggedCross = register_op(
  "RaggedCross",
  _ragged_cross,
  family=FAMILY,
  static=_STATIC,
  attrs=(
    "input_order",
    "hashed_output",
    "num_buckets",
    "hash_key",
    "out_values_type",
    "out_row_splits_type",
  ),
  multiple_results=True,
  spec=_spec,
  interpret=_interpret,
  doc="The crosses of each batch row's int64 ragged, sparse and dense features (in "
  "input_order), FingerprintCat64 folded from hash_key into num_buckets (bit-exact).",
)
