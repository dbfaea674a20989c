"""Ops whose output shape depends on the values of their inputs: Where (one
argument), Unique, UniqueWithCounts, UniqueV2, UniqueWithCountsV2, ListDiff,
DynamicPartition (the NonMaxSuppression ops live in
:mod:`tfprims.ops.image.nms`).

JAX needs static shapes. When the inputs are known (constants and values folded
from them, or concrete arrays in an eager call) these ops are computed with numpy,
exactly as TF. When an input is traced they raise
:class:`~tfprims.errors.DynamicShapeError` naming the node
(:func:`tfprims.interpreter.check_supported` reports them at conversion), unless
the ``dynamic_shape_bounds`` config bounds the node's output size: then the hook
binds the op's padded primitive (``tf.Where[size=n]``, :mod:`.padded`), whose
output keeps TF's first ``n`` results and pads the rest.
"""

from __future__ import annotations

import functools

import jax
import numpy as np

from tfprims import config, core, dtypes, errors, folding, interpreter
from tfprims.core import register_op
from tfprims.ops.array import padded
from tfprims.ops.array._common import FAMILY

_DATA = "its output size depends on the data"


def _concrete(node, inputs, bounded=False) -> list:
  """The inputs as numpy arrays, or a DynamicShapeError naming the node."""
  if any(isinstance(v, jax.core.Tracer) for v in inputs):
    hint = (
      (
        f" Or bound its output: tfprims.update_config('dynamic_shape_bounds', "
        f"{{'{node.name}': n}}) keeps the first n results, padded "
        "(docs/semantics/array.md)."
      )
      if bounded
      else ""
    )
    raise errors.DynamicShapeError(
      f"{node.op} node '{node.name}': {node_reason(node)}; under jit/vmap/grad its "
      "inputs are traced, so its output shape is unknown. Use a fixed-size "
      "formulation (e.g. tf.where(cond, x, y) with three arguments, or masking "
      "instead of tf.boolean_mask)." + hint
    )
  return [np.asarray(v) for v in inputs]


def node_reason(node) -> str:
  return core.lookup(node.op).dynamic_shape


def _index(values, node, attr="out_idx"):
  return dtypes.canonicalize_value(
    np.asarray(values, node.attr(attr)), f"{node.op} node '{node.name}'"
  )


def bounded_hook(exact, padded_call):
  """The hook of an op with a padded form: ``exact(node, numpy inputs)`` when every
  input is known, else the padded primitive (``padded_call(node, inputs, bound)`` ->
  operands, params) when the config bounds the node, else DynamicShapeError."""

  def interpret(ctx, node, inputs):
    if not any(isinstance(v, jax.core.Tracer) for v in inputs):
      return exact(node, [np.asarray(v) for v in inputs])
    bound = interpreter.dynamic_shape_bound(node)
    if bound is None:
      _concrete(node, inputs, bounded=True)
    op = core.lookup(node.op)
    try:
      operands, params = padded_call(node, inputs, bound)
      if op.check is not None and config.get_config("runtime_checks"):
        interpreter.run_check(op, node, operands, params)
      out = op.apply(operands, params)
    except errors.TFPrimsError:
      raise
    except Exception as e:
      raise errors.OpError(node.op, node.name, f"{type(e).__name__}: {e}") from e
    return list(out) if op.multiple_results else [out]

  return interpret


# --- Where ---------------------------------------------------------------------------------


def _where(node, inputs):
  (x,) = inputs
  if x.ndim == 0:
    raise errors.OpError(node.op, node.name, "WhereOp : Unhandled input dimensions: 0")
  return [dtypes.canonicalize_value(np.argwhere(x).astype(np.int64), f"Where node '{node.name}'")]


Where = register_op(
  "Where",
  padded.where_impl,
  family=FAMILY,
  dynamic_shape="returns the indices of true elements (tf.where with one argument, "
  "tf.boolean_mask): " + _DATA,
  interpret=bounded_hook(_where, lambda node, inputs, n: (list(inputs), {"size": n})),
  doc="The int64 coordinates of the non-zero elements, in row-major order (padded "
  "form: the first size of them, then rows of -1).",
  spec=padded.where_spec,
)


# --- Unique --------------------------------------------------------------------------------


def _unique(x, axis):
  """TF's Unique along ``axis``: values in order of first occurrence, the index of
  each element's value, and the counts. NaNs are all distinct (TF hashes them)."""
  x = np.moveaxis(x, axis, 0)
  rows = x.reshape(x.shape[0], -1)
  keys: dict = {}
  firsts, idx, counts = [], np.empty(rows.shape[0], np.int64), []
  for i, row in enumerate(rows):
    key = tuple(row.tolist())  # NaN keys never match: each NaN float hashes by identity
    j = keys.get(key)
    if j is None:
      j = keys[key] = len(firsts)
      firsts.append(i)
      counts.append(0)
    counts[j] += 1
    idx[i] = j
  y = np.moveaxis(x[np.asarray(firsts, np.int64)], 0, axis)
  return y, idx, np.asarray(counts, np.int64)


def _unique_exact(node, inputs):
  x = inputs[0]
  v2 = node.op.endswith("V2")
  try:
    a = padded.unique_axis(inputs[1], x.ndim) if v2 else 0
  except ValueError as e:
    raise errors.OpError(node.op, node.name, str(e)) from None
  if not v2 and x.ndim != 1:
    raise errors.OpError(node.op, node.name, "unique expects a 1D vector.")
  y, idx, counts = _unique(x, a)
  out = [y, _index(idx, node)]
  return out + [_index(counts, node)] if node.op.startswith("UniqueWithCounts") else out


def _unique_padded(node, inputs, n):
  params = {"size": n, "out_idx": node.attr("out_idx")}
  if node.op.endswith("V2"):
    axis = folding.known_value(inputs[1])
    if axis is None:
      raise errors.StaticInputError(node.op, node.name, "axis")
    params["axis"] = padded.unique_axis(axis, np.ndim(inputs[0]))
  return [inputs[0]], params


def _define_unique(op_type, counts, v2):
  return register_op(
    op_type,
    padded.unique_impl(counts, v2),
    family=FAMILY,
    multiple_results=True,
    attrs=("out_idx",),
    dynamic_shape=_DATA,
    interpret=bounded_hook(_unique_exact, _unique_padded),
    doc=(
      "The distinct " + ("slices along axis" if v2 else "values") + " in order of "
      "first occurrence, each element's index"
      + (" and the counts" if counts else "")
      + " (padded form: the first size values, padded with zeros)."
    ),
    spec=functools.partial(padded.unique_spec, op_type=op_type, counts=counts, v2=v2),
  )


Unique = _define_unique("Unique", False, False)
UniqueWithCounts = _define_unique("UniqueWithCounts", True, False)
UniqueV2 = _define_unique("UniqueV2", False, True)
UniqueWithCountsV2 = _define_unique("UniqueWithCountsV2", True, True)


# --- ListDiff ------------------------------------------------------------------------------


def _list_diff(node, inputs):
  x, y = inputs
  keep = ~np.isin(x, y)
  return [x[keep], _index(np.nonzero(keep)[0], node)]


ListDiff = register_op(
  "ListDiff",
  padded.list_diff_impl,
  family=FAMILY,
  multiple_results=True,
  attrs=("out_idx",),
  dynamic_shape=_DATA,
  interpret=bounded_hook(
    _list_diff, lambda node, inputs, n: (list(inputs), {"size": n, "out_idx": node.attr("out_idx")})
  ),
  doc="The values of x not in y, in order, and their positions in x (padded form: the "
  "first size of them, values padded with zeros and positions with -1).",
  spec=padded.list_diff_spec,
)


# --- DynamicPartition ----------------------------------------------------------------------


def _partition_exact(node, inputs):
  data, partitions = inputs
  num = int(node.attr("num_partitions"))
  if data.shape[: partitions.ndim] != partitions.shape:
    raise errors.OpError(node.op, node.name, "data.shape must start with partitions.shape")
  flat = partitions.reshape(-1)
  bad = np.nonzero((flat < 0) | (flat >= num))[0]
  if bad.size:
    raise errors.OpError(
      node.op, node.name, f"partitions[{int(bad[0])}] = {int(flat[bad[0]])} is not in [0, {num})"
    )
  rows = data.reshape((flat.size,) + data.shape[partitions.ndim :])
  return [rows[flat == i] for i in range(num)]


def _partition_check(data, partitions, *, num_partitions, size):
  return (
    jax.numpy.any((partitions < 0) | (partitions >= num_partitions)),
    f"partitions must be in [0, {num_partitions})",
  )


DynamicPartition = register_op(
  "DynamicPartition",
  padded.partition_impl,
  family=FAMILY,
  multiple_results=True,
  attrs=("num_partitions",),
  dynamic_shape="each partition's size " + _DATA[4:],
  interpret=bounded_hook(
    _partition_exact,
    lambda node, inputs, n: (
      list(inputs),
      {"num_partitions": int(node.attr("num_partitions")), "size": n},
    ),
  ),
  jvp=padded.partition_jvp,
  transpose=padded.partition_transpose,
  batching=padded.partition_batch,
  check=_partition_check,
  doc="The rows of data in each partition, in order (padded form: the first size rows "
  "of each, then zeros).",
  spec=padded.partition_spec,
)
