"""RaggedTensorToVariant, RaggedTensorFromVariant and RaggedTensorToVariantGradient: a
ragged tensor encoded as TF variants, as ``tf.map_fn`` (and ``tf.data``) pass ragged
rows around.

A variant is no JAX array: inside the interpreter it is a
:class:`tfprims.ops.shared.VariantTensor` whose elements are :class:`RaggedComponents`
(the row splits as numpy, the dense values as they are: numpy or traced). The hooks
move values with TF-named ops (``tf.SplitV``/``tf.Unpack`` to cut rows,
``tf.ConcatV2``/``tf.Pack`` to join them), so ``jax.grad`` and ``jax.vmap`` over the
values go through; the row splits must be known at trace time (an eager call,
constants, numpy splits closed over by a jitted function), since each row is an array
of its own length: traced splits raise :class:`errors.StaticInputError` naming the
node. ``tf.map_fn`` over the rows reads its list of variants at trace-time indices, so
its loop unrolls (tfprims.ops.tensorlist.value.variant_get). Semantics:
docs/semantics/ragged.md.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import numpy as np

from tfprims import dtypes as tfdtypes
from tfprims import errors
from tfprims.core import structural, tfops
from tfprims.ops.ragged._common import FAMILY, known_ints, op_error
from tfprims.ops.shared import VariantTensor, variant

WHAT = "a ragged tensor encoded as a TF variant, kept as its row splits and values"


class RaggedComponents(NamedTuple):
  """One variant element: a ragged tensor's nested row splits (numpy, outermost
  first), its dense values and their TF dtype (``dtype``: the values may be narrowed
  to 32 bits, the dtype TF checks is not)."""

  splits: tuple
  values: Any
  dtype: Any

  def added(self, node, others) -> "RaggedComponents":
    """The sum with ragged tensors of the same row splits (TF's AddN of variants, as
    its gradient code sums a loop's list gradients): values by tf.AddN."""
    for o in others:
      if len(o.splits) != len(self.splits) or any(
        a.shape != b.shape or np.any(a != b) for a, b in zip(o.splits, self.splits)
      ):
        raise op_error(node, "adds ragged variants of different row splits")
    values = tfops.AddN.apply([self.values] + [o.values for o in others], {})
    return self._replace(values=values)


def _known_splits(ctx, node, splits) -> list:
  out = []
  for s in splits:
    known = known_ints(ctx, s)
    if known is None:
      raise errors.StaticInputError(
        node.op,
        node.name,
        "rt_nested_splits",
        "each row a ragged variant holds is an array of its own length, so the row "
        "splits must be known at trace time (call the converted function eagerly, "
        "build the ragged tensor from constants, or close over numpy row splits "
        "under jax.jit) - docs/semantics/ragged.md",
      )
    out.append(known.reshape(-1))
  return out


def _check_splits(node, splits, nvals: int) -> None:
  """TF's checks of nested row splits (RaggedTensorToVariant's messages)."""
  for k, s in enumerate(splits):
    size = nvals if k + 1 == len(splits) else splits[k + 1].shape[0] - 1
    if s.shape[0] == 0 or s[0] != 0:
      problem = "first element of ragged splits must be 0"
    elif np.any(np.diff(s) < 0):
      problem = "ragged splits must be monotonically increasing"
    elif s[-1] != size:
      problem = "last element of ragged splits must be the number of ragged values"
    else:
      continue
    raise errors.RuntimeCheckError(node.op, node.name, f"Invalid ragged splits: {problem}")


def _rows(node, splits, values, dtype) -> list:
  """A ragged tensor's rows (ragged rank one less), as :class:`RaggedComponents`."""
  if not splits:  # ragged rank 0: the rows of the dense values
    if np.ndim(values) == 0:
      raise op_error(node, "batched_input needs values of rank >= 1 for ragged rank 0")
    n = np.shape(values)[0]
    rows = tfops.Unpack.apply([values], {"num": n, "axis": 0}) if n else []
    return [RaggedComponents((), r, dtype) for r in rows]
  lo, hi = splits[0][:-1], splits[0][1:]
  inner = [[] for _ in lo]
  for s in splits[1:]:
    for i, (a, b) in enumerate(zip(lo, hi)):
      inner[i].append(s[a : b + 1] - s[a])
    lo, hi = s[lo], s[hi]
  if not len(lo):
    return []
  sizes = tuple(int(b - a) for a, b in zip(lo, hi))
  params = {"size_splits": sizes, "axis": 0, "num_split": len(sizes)}
  pieces = tfops.SplitV.apply([values], params)
  return [RaggedComponents(tuple(i), p, dtype) for i, p in zip(inner, pieces)]


@structural(
  "RaggedTensorToVariant",
  family=FAMILY,
  doc="A ragged tensor (or each of its rows) as variants: Python values holding its "
  "row splits (known at trace time) and values (tf.SplitV / tf.Unpack).",
)
def _to_variant(ctx, node, inputs):
  *splits, values = inputs
  splits = _known_splits(ctx, node, splits)
  if splits:
    _check_splits(node, splits, np.shape(values)[0] if np.ndim(values) else -1)
  dtype = np.dtype(node.attr("Tvalues"))
  if not node.attr("batched_input"):
    return [variant(node, (), [RaggedComponents(tuple(splits), values, dtype)], WHAT)]
  rows = _rows(node, splits, values, dtype)
  return [variant(node, (len(rows),), rows, WHAT)]


def _components(node, value, unset: bool = False) -> list:
  """The elements of a ragged variant (None for unset ones where ``unset``)."""
  if not isinstance(value, VariantTensor):
    raise op_error(node, f"expects ragged variants, got {type(value).__name__}")
  for e in value.elements:
    if not isinstance(e, RaggedComponents) and not (unset and e is None):
      raise op_error(node, f"expects ragged variants, got {type(e).__name__} elements")
  return list(value.elements)


def _join(node, parts: list, dtype):
  """The values of several elements concatenated along their first dim."""
  if not parts:
    return np.zeros((0,), dtype)  # TF's: no element tells the inner shape
  if len(parts) == 1:
    return parts[0]
  inner = {tuple(np.shape(p)[1:]) for p in parts}
  if len(inner) > 1 or any(np.ndim(p) == 0 for p in parts):
    raise op_error(node, f"joins ragged values of shapes {[list(np.shape(p)) for p in parts]}")
  return tfops.ConcatV2.apply(list(parts), {"axis": 0})


@structural(
  "RaggedTensorFromVariant",
  family=FAMILY,
  doc="The ragged tensor variants encode: the elements' row splits joined with numpy, "
  "their values by tf.ConcatV2.",
)
def _from_variant(ctx, node, inputs):
  (encoded,) = inputs
  elements = _components(node, encoded)
  out_rank, in_rank = node.attr("output_ragged_rank"), node.attr("input_ragged_rank")
  if in_rank == -1:
    in_rank = out_rank - encoded.ndim
  if in_rank < 0 or in_rank + encoded.ndim != out_rank:
    raise op_error(
      node,
      f"output_ragged_rank={out_rank} is not input_ragged_rank={in_rank} plus the "
      f"encoded tensor's rank {encoded.ndim}",
    )
  tf_dtype = np.dtype(node.attr("Tvalues"))
  dtype = tfdtypes.canonical_dtype(tf_dtype)
  split_dtype = tfdtypes.canonical_dtype(node.attr("Tsplits"))
  for e in elements:
    if len(e.splits) != in_rank:
      raise errors.RuntimeCheckError(
        node.op,
        node.name,
        f"Encoded input RaggedTensorVariant has ragged_rank={len(e.splits)}.  Expected "
        f"ragged_rank={in_rank}.",
      )
    if e.dtype != tf_dtype:
      raise errors.RuntimeCheckError(
        node.op, node.name, f"Expected values Tensor dtype: {tf_dtype}, found: {e.dtype}"
      )
  # the variant tensor's own dims: uniform levels, the last one each element's rows
  shape, splits = encoded.shape, []
  for j in range(encoded.ndim - 1):
    splits.append(np.arange(int(np.prod(shape[: j + 1])) + 1) * shape[j + 1])
  if encoded.ndim:
    counts = [
      len(e.splits[0]) - 1 if e.splits else (np.shape(e.values)[0] if np.ndim(e.values) else 1)
      for e in elements
    ]
    splits.append(np.concatenate([[0], np.cumsum(counts, dtype=np.int64)]))
  for k in range(in_rank):  # the elements' own levels, each offset by those before it
    offsets = np.cumsum([0] + [int(e.splits[k][-1]) for e in elements])
    tails = [e.splits[k][1:] + o for e, o in zip(elements, offsets)]
    splits.append(np.concatenate([[0]] + tails))
  values = _join(node, [e.values for e in elements], dtype)  # one element: as it is
  return [np.asarray(s).astype(split_dtype) for s in splits] + [values]


@structural(
  "RaggedTensorToVariantGradient",
  family=FAMILY,
  doc="The gradient of RaggedTensorToVariant: the gradient variants' values joined "
  "(tf.ConcatV2, tf.Pack) in the dense values' shape.",
)
def _to_variant_gradient(ctx, node, inputs):
  encoded, row_splits, dense_shape = inputs
  elements = _components(node, encoded, unset=True)
  shape = known_ints(ctx, dense_shape)
  if shape is None:
    raise errors.StaticInputError(node.op, node.name, "dense_values_shape")
  dtype = tfdtypes.canonical_dtype(node.attr("Tvalues"))
  parts = [None if e is None else e.values for e in elements]
  if any(p is None for p in parts):  # unset (zero) gradients: rows of zeros
    parts = _zero_rows(ctx, node, elements, row_splits, shape, dtype)
  if not encoded.ndim:
    out = parts[0]
  elif np.ndim(row_splits) == 0:  # ragged rank 0, batched: the rows stacked
    out = tfops.Pack.apply(parts, {"axis": 0}) if parts else np.zeros(tuple(shape), dtype)
  else:
    out = _join(node, parts, dtype)
  if tuple(np.shape(out)) != tuple(int(d) for d in shape):
    out = tfops.Reshape.apply([out], {"shape": tuple(int(d) for d in shape)})
  return [out]


def _zero_rows(ctx, node, elements, row_splits, shape, dtype) -> list:
  """The gradient rows with zeros for the unset ones: ragged rank 1 (each row's length
  is its splits' difference) or 0 (one dense row each)."""
  splits = known_ints(ctx, row_splits) if np.ndim(row_splits) else None
  if (
    np.ndim(row_splits)
    and (splits is None or len(splits) != len(elements) + 1)
    or any(e is not None and e.splits for e in elements)
  ):
    raise op_error(node, "unset gradient rows whose lengths the row splits do not give")
  inner = tuple(int(d) for d in shape[1:])
  out = []
  for i, e in enumerate(elements):
    if e is None:
      rows = () if splits is None else (int(splits[i + 1] - splits[i]),)
      out.append(np.zeros(rows + inner, dtype))
    else:
      out.append(e.values)
  return out
