"""Ops whose output shape depends on the values of their inputs: Where (one
argument), Unique*, ListDiff, and (declared here for now, family "image")
NonMaxSuppressionV3-V5.

JAX needs static shapes, so these have no primitive: they are computed with numpy
when their inputs are known (constants and values folded from them, or concrete
arrays in an eager call), and raise :class:`~tfprims.errors.DynamicShapeError`
naming the node otherwise. :func:`tfprims.interpreter.check_supported` reports
them at conversion when their inputs are not known at trace time.
"""

from __future__ import annotations

import jax
import numpy as np

from tfprims import core, dtypes, errors
from tfprims.core import structural
from tfprims.ops.array._common import FAMILY

_DATA = "its output size depends on the data"


def _concrete(node, inputs) -> list:
  """The inputs as numpy arrays, or a DynamicShapeError naming the node."""
  if any(isinstance(v, jax.core.Tracer) for v in inputs):
    raise errors.DynamicShapeError(
        f"{node.op} node '{node.name}': {node_reason(node)}; under jit/vmap/grad its "
        "inputs are traced, so its output shape is unknown. Use a fixed-size "
        "formulation (e.g. tf.where(cond, x, y) with three arguments, or masking "
        "instead of tf.boolean_mask).")
  return [np.asarray(v) for v in inputs]


def node_reason(node) -> str:
  return core.lookup(node.op).dynamic_shape


def _index(values, node, attr="out_idx"):
  return dtypes.canonicalize_value(np.asarray(values, node.attr(attr)),
                                   f"{node.op} node '{node.name}'")


@structural("Where", family=FAMILY, dynamic_shape="returns the indices of true elements "
            "(tf.where with one argument, tf.boolean_mask): " + _DATA,
            doc="The int64 coordinates of the non-zero elements, in row-major order.")
def _where(ctx, node, inputs):
  (x,) = _concrete(node, inputs)
  return [dtypes.canonicalize_value(np.argwhere(x).astype(np.int64),
                                    f"Where node '{node.name}'")]


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


def _unique_axis(node, axis, x):
  axis = np.asarray(axis).reshape(-1)
  if axis.size == 0:
    return 0, x.reshape(-1)
  a = int(axis[0])
  if not -x.ndim <= a < x.ndim:
    raise errors.OpError(node.op, node.name, f"axis {a} is out of range for rank {x.ndim}")
  return a % x.ndim, x


@structural("Unique", "UniqueWithCounts", family=FAMILY, dynamic_shape=_DATA,
            doc="The distinct values in order of first occurrence, each element's index "
                "(and counts).")
def _unique_1d(ctx, node, inputs):
  (x,) = _concrete(node, inputs)
  y, idx, counts = _unique(x.reshape(-1), 0)
  out = [y, _index(idx, node)]
  return out + [_index(counts, node)] if node.op == "UniqueWithCounts" else out


@structural("UniqueV2", "UniqueWithCountsV2", family=FAMILY, dynamic_shape=_DATA,
            doc="Unique along an axis: distinct slices in order of first occurrence.")
def _unique_v2(ctx, node, inputs):
  x, axis = _concrete(node, inputs)
  a, x = _unique_axis(node, axis, x)
  y, idx, counts = _unique(x, a)
  out = [y, _index(idx, node)]
  return out + [_index(counts, node)] if node.op == "UniqueWithCountsV2" else out


@structural("ListDiff", family=FAMILY, dynamic_shape=_DATA,
            doc="The values of x not in y, in order, and their positions in x.")
def _list_diff(ctx, node, inputs):
  x, y = _concrete(node, inputs)
  keep = ~np.isin(x, y)
  return [x[keep], _index(np.nonzero(keep)[0], node)]


@structural("NonMaxSuppressionV3", "NonMaxSuppressionV4", "NonMaxSuppressionV5",
            family="image", dynamic_shape="the number of selected boxes " + _DATA[4:],
            doc="Greedy non-maximum suppression (not evaluated at trace time yet).")
def _nms(ctx, node, inputs):
  _concrete(node, inputs)
  raise errors.DynamicShapeError(
      f"{node.op} node '{node.name}': evaluating it on values known at trace time is "
      "not supported yet; use NonMaxSuppressionV4/V5 with pad_to_max_output_size=True "
      "in a function whose boxes are inputs")
