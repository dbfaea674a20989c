"""SparseCrossHashed, and SparseCross with ``hashed_output`` (``tf.sparse.cross_hashed``,
Keras ``HashedCrossing``), of int64 features, bit-exact with TF's kernels.

Each batch row's output is the cartesian product of its features in the sparse
inputs (in order) and then the dense inputs, the last input varying fastest. A cross
hashes as TF's ``HashCrosserV2``: the first feature's hash, then
``FingerprintCat64(hash, feature_i)`` for each next one, modulo ``num_buckets`` (or
``2^63 - 1`` when 0); SparseCross (``HashCrosser``) folds every feature, the first
too, from its ``hash_key`` attr, and hashes no feature (each is its int64 value). In
SparseCrossHashed a sparse int64 feature's hash is farmhash ``Fingerprint64`` of
its first 4 bytes (TF's kernel hashes ``sizeof(DataType)`` = 4 bytes of the value:
the low 32 bits, little-endian); a dense int64 feature is its value. The hashing is
:mod:`tfprims.ops.hashing.crosses` (shared with RaggedCross): 64-bit arithmetic on
uint32 word pairs, so x64 off works (values then fit in int32; the bucket is int32,
so ``num_buckets`` must be in ``[1, 2^31]``).

The row of a sparse input's entry is its first index and a row's features are read
from the values at that row's start (TF's kernel assumes the entries sorted by row,
and so does this layout). The output has one entry per cross, a data-dependent count:
the indices and dense shapes are static (eager calls know them; under jit traced ones
raise StaticInputError naming the node); the values are operands (traced values hash
under jit). ``strong_hash`` (SipHash, and for dense inputs a kernel bug that hashes a
pointer made from the value) is refused, and so is SparseCross without
``hashed_output`` (string outputs; the error says to use tfprims.split_host_prefix).
String features never reach JAX: SparseCrossV2 (string outputs) is declared with a
hint; a string feature is refused at conversion as any string tensor is.
"""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np

import jax

from tfprims import core, interpreter, opdefs
from tfprims import dtypes as tf_dtypes
from tfprims.core import register_op
from tfprims.ops.hashing import crosses, edge_values
from tfprims.ops.shared_specs import lazy_hst
from tfprims.ops.sparse._common import FAMILY, index_dtype, static_indices, static_shape


def _ranks(counts):
  """Each entry's position within its row, for rows of ``counts`` entries."""
  return np.arange(int(counts.sum())) - np.repeat(np.cumsum(counts) - counts, counts)


def cross_layout(indices, shapes, dense_shapes):
  """Per output entry, each input's feature position (a flat position in the sparse
  input's values or the dense input), the output indices and dense shape (numpy)."""
  dims = [static_shape(s, "shapes") for s in shapes]
  for d in dims:
    if len(d) != 2:
      raise ValueError(f"Expected a sparse input of rank 2, got shape {list(d)}")
  for s in dense_shapes:
    if len(s) != 2:
      raise ValueError(f"Dense inputs should be a matrix, got shape {list(s)}")
  sizes = [d[0] for d in dims] + [s[0] for s in dense_shapes]
  if not sizes:
    raise ValueError("SparseCrossHashed needs at least one input")
  batch = sizes[0]
  if any(b != batch for b in sizes):
    raise ValueError(f"Expected batch size {batch} for every input, got {sizes}")
  per_input = []  # per input: per batch row, the feature positions
  for idx_in in indices:
    idx = static_indices(idx_in, 2)
    counts = np.bincount(idx[:, 0], minlength=batch) if len(idx) else np.zeros(batch, int)
    if len(idx) and (idx[:, 0].min() < 0 or idx[:, 0].max() >= batch):
      raise ValueError(f"a sparse input's row index is outside the batch size {batch}")
    starts = np.cumsum(counts) - counts
    per_input.append([np.arange(starts[b], starts[b] + counts[b]) for b in range(batch)])
  for s in dense_shapes:
    per_input.append([b * s[1] + np.arange(s[1]) for b in range(batch)])
  positions, counts = crosses.cross_positions(per_input, batch)
  out_idx = np.stack([np.repeat(np.arange(batch), counts), _ranks(counts)], 1).astype(np.int64)
  widest = int(counts.max()) if batch else 0
  return positions, out_idx, np.asarray([batch, widest], np.int64)


def _check(num_buckets, strong_hash):
  if strong_hash:
    raise ValueError("strong_hash=True (SipHash of the features) is not converted")
  crosses.check_num_buckets(num_buckets)


def _hash_crosses(values, dense, indices, shapes, num_buckets, sparse_hash, first):
  """Each batch row's crosses folded with FingerprintCat64 (from ``first``: a key,
  or None to start from the first feature), bucketed: indices, values, shape."""
  for v in (*values, *dense):
    if np.dtype(v.dtype).kind not in "iu":
      raise TypeError(f"only integer features are hashed here, got {v.dtype}")
  positions, out_idx, out_shape = cross_layout(indices, shapes, [x.shape for x in dense])
  feats = [sparse_hash(v.reshape(-1)) for v in values]
  feats += [crosses.as_pair(x.reshape(-1)) for x in dense]
  dt = index_dtype()
  hashed = crosses.hash_crosses(feats, positions, num_buckets, first)
  return (jnp.asarray(out_idx.astype(dt)), hashed, jnp.asarray(out_shape.astype(dt)))


def _cross_hashed(*operands, indices, shapes, num_buckets, strong_hash, salt):
  """Each batch row's feature crosses, hashed (FingerprintCat64) into num_buckets."""
  n = len(shapes)
  num_buckets = int(np.asarray(num_buckets).reshape(()))
  _check(num_buckets, bool(np.asarray(strong_hash).reshape(())))
  return _hash_crosses(
    operands[:n], operands[n:], indices, shapes, num_buckets, crosses.fingerprint_low4, None
  )


def _cross(
  *operands, indices, shapes, hashed_output, num_buckets, hash_key, out_type, internal_type
):
  """With hashed_output: each batch row's crosses, FingerprintCat64 folded from
  hash_key over the int64 features, into num_buckets."""
  if not hashed_output:
    raise ValueError(
      "hashed_output=False crosses features into strings, which JAX has "
      "no dtype for; run it in TF: tfprims.split_host_prefix(fn, ...) "
      "converts the numeric rest"
    )
  _check(int(num_buckets), False)
  n = len(shapes)
  return _hash_crosses(
    operands[:n], operands[n:], indices, shapes, int(num_buckets), crosses.as_pair, int(hash_key)
  )


def _spec(legacy: bool):
  def spec(st):
    return _spec_of(st, legacy)

  return spec


def _spec_of(st, legacy):
  hst = lazy_hst()

  @st.composite
  def calls(draw):
    edges = edge_values(np.dtype(np.int64))
    lo, hi = min(edges), max(edges)
    value = hst.one_of(hst.sampled_from(edges), hst.integers(lo, hi))
    batch = draw(hst.integers(0, 3))
    n_sparse = draw(hst.integers(1 if batch == 0 else 0, 2))
    n_dense = draw(hst.integers(1 if n_sparse == 0 else 0, 2))
    idx, vals, shapes = [], [], []
    for _ in range(n_sparse):
      width = draw(hst.integers(1, 3))
      flat = (
        sorted(draw(hst.lists(hst.integers(0, batch * width - 1), max_size=5, unique=True)))
        if batch
        else []
      )
      i = (
        np.stack(np.unravel_index(np.asarray(flat, np.int64), (batch, width)), 1)
        if flat
        else np.zeros((0, 2), np.int64)
      )
      idx.append(i.astype(np.int64))
      vals.append(
        np.asarray(draw(hst.lists(value, min_size=len(flat), max_size=len(flat))), np.int64)
      )
      shapes.append(np.asarray([batch, width], np.int64))
    dense = []
    for _ in range(n_dense):
      k = draw(hst.integers(0, 2))
      dense.append(
        np.asarray(
          draw(hst.lists(value, min_size=batch * k, max_size=batch * k)), np.int64
        ).reshape(batch, k)
      )
    big = [0, (1 << 62) + 12345] if tf_dtypes.x64_enabled() else []
    buckets = draw(hst.sampled_from([1, 2, 16, 1000, 65537, 1 << 31] + big))
    call = {"indices": idx, "values": vals, "shapes": shapes, "dense_inputs": dense}
    if legacy:
      key = draw(hst.sampled_from([0xDECAFCAFFE, 0, (1 << 63) - 1, -5]))
      return {
        **call,
        "hashed_output": True,
        "num_buckets": buckets,
        "hash_key": key,
        "out_type": np.dtype(np.int64),
        "internal_type": np.dtype(np.int64),
      }
    return {
      **call,
      "num_buckets": np.int64(buckets),
      "strong_hash": np.bool_(False),
      "salt": np.zeros((2,), np.int64),
    }

  # Three rows: two sparse inputs (an empty row in the second) and a dense one.
  case = {
    "indices": [
      np.array([[0, 0], [0, 1], [1, 0], [2, 1]], np.int64),
      np.array([[0, 0], [2, 0], [2, 2]], np.int64),
    ],
    "values": [
      np.array([5, -3, (1 << 31) - 1, -(1 << 31)], np.int64),
      np.array([11, -1, 0], np.int64),
    ],
    "shapes": [np.array([3, 3], np.int64)] * 2,
    "dense_inputs": [np.array([[100, 7], [-200, 9], [1, 2]], np.int64)],
    "num_buckets": np.int64(1000),
    "strong_hash": np.bool_(False),
    "salt": np.zeros((2,), np.int64),
  }
  if legacy:
    case.update(
      num_buckets=1000,
      hashed_output=True,
      hash_key=0xDECAFCAFFE,
      out_type=np.dtype(np.int64),
      internal_type=np.dtype(np.int64),
    )
    del case["strong_hash"], case["salt"]
  return st.Spec(
    calls(),
    examples=0.5,
    skip={"jvp": _NO_GRAD, "vjp": _NO_GRAD},
    cases=[case],
    note="int64 sparse and dense features, edge values (powers of ten, "
    "extremes), empty rows and batches; strong_hash is refused",
  )


def _interpret(ctx, node, inputs):
  """The node bound as usual; under jit its output indices and dense shape (decided by
  the static indices and shapes and the dense inputs' shapes) become constants, so a
  sparse result's BCOO shape is known."""
  op = core.lookup(node.op)
  outs = interpreter.bind_node(ctx, op, node, inputs)
  if any(isinstance(o, jax.core.Tracer) for o in outs):
    attrs = interpreter.AttrView(node)
    operands, params = op.prepare(opdefs.group_inputs(node.op, inputs, attrs), attrs, node.name)
    dense = operands[len(params["shapes"]) :]
    _, out_idx, out_shape = cross_layout(
      params["indices"], params["shapes"], [np.shape(x) for x in dense]
    )
    where = f"{node.op} node '{node.name}'"
    outs[0] = tf_dtypes.canonicalize_value(out_idx, where)
    outs[2] = tf_dtypes.canonicalize_value(out_shape, where)
  return outs


_NO_GRAD = "integer output: not differentiable (TF registers no gradient)"

SparseCrossHashed = register_op(
  "SparseCrossHashed",
  _cross_hashed,
  family=FAMILY,
  static=("indices", "shapes", "num_buckets", "strong_hash", "salt"),
  multiple_results=True,
  spec=_spec(False),
  interpret=_interpret,
  doc="The crosses of each batch row's int64 features, hashed with FingerprintCat64 "
  "into num_buckets (bit-exact with TF).",
)

SparseCross = register_op(
  "SparseCross",
  _cross,
  family=FAMILY,
  static=("indices", "shapes"),
  attrs=("hashed_output", "num_buckets", "hash_key", "out_type", "internal_type"),
  multiple_results=True,
  spec=_spec(True),
  interpret=_interpret,
  doc="With hashed_output (tf.sparse.cross_hashed): each batch row's int64 feature "
  "crosses, FingerprintCat64 folded from hash_key, into num_buckets (bit-exact).",
)
