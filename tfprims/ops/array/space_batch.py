"""Space <-> batch: SpaceToBatchND, BatchToSpaceND and their 4-D v1 forms
SpaceToBatch, BatchToSpace.

TF expresses dilated (atrous) convolutions as SpaceToBatchND -> Conv2D ->
BatchToSpaceND (Keras ``Conv1D``/``Conv2D`` with ``dilation_rate``,
``tf.nn.atrous_conv2d``). ``block_shape``/``block_size``, ``paddings`` and
``crops`` are static. The ops are pure data movement (zero-pad + reshape +
transpose + reshape, and back with a crop), so they are linear and transpose to
each other: SpaceToBatchND <-> BatchToSpaceND (paddings become crops and back),
SpaceToBatch <-> BatchToSpace. Under vmap the mapped axis becomes an extra
spatial dimension of block 1 placed right after TF's batch axis, so the batched
op is the same TF op (the v1 forms are re-bound as their ND forms).
"""

from __future__ import annotations

import math

import jax.numpy as jnp
import numpy as np
from jax import lax

from tfprims import rules
from tfprims.core import register_op, tfops
from tfprims.ops.array._common import FAMILY
from tfprims.ops.shared import ints
from tfprims.ops.shared_specs import index_array, lazy_hst

_DTYPES = (
  "float16",
  "bfloat16",
  "float32",
  "float64",
  "int8",
  "int16",
  "int32",
  "int64",
  "uint8",
  "uint16",
  "uint32",
  "uint64",
)  # TF's CPU kernels: real numbers


def _pairs(value, m: int, what: str, op: str) -> tuple:
  flat = ints(value)
  if len(flat) != 2 * m:
    raise ValueError(f"{op}: {what} should have shape [{m}, 2], got {len(flat)} values")
  p = tuple((flat[2 * i], flat[2 * i + 1]) for i in range(m))
  if any(a < 0 or b < 0 for a, b in p):
    raise ValueError(f"{op}: {what.capitalize()} must be non-negative, got {p}")
  return p


def _block(block_shape, op: str) -> tuple:
  b = ints(block_shape)
  if any(k < 1 for k in b):
    raise ValueError(f"{op}: All values in block_shape must be positive, got {b}")
  return b


def _check_rank(shape, m: int, op: str) -> None:
  if len(shape) < 1 + m or len(shape) < 2:
    raise ValueError(f"{op}: input rank should be >= {max(1 + m, 2)} instead of {len(shape)}")


def _space_to_batch(x, block, paddings, op="SpaceToBatchND"):
  m = len(block)
  _check_rank(x.shape, m, op)
  padded = [x.shape[1 + i] + a + b for i, (a, b) in enumerate(paddings)]
  for i, (n, k) in enumerate(zip(padded, block)):
    if n % k:
      raise ValueError(f"{op}: padded_shape[{i}]={n} is not divisible by block_shape[{i}]={k}")
  if any(paddings_i != (0, 0) for paddings_i in paddings):
    config = [(0, 0, 0)] + [(a, b, 0) for a, b in paddings] + [(0, 0, 0)] * (x.ndim - 1 - m)
    x = lax.pad(x, jnp.zeros((), x.dtype), config)
  batch, rest = x.shape[0], tuple(x.shape[1 + m :])
  split = [batch]
  for n, k in zip(padded, block):
    split += [n // k, k]
  x = jnp.reshape(x, tuple(split) + rest)
  # [B, n1, k1, ..., nm, km, rest] -> [k1, ..., km, B, n1, ..., nm, rest]
  perm = (
    [2 + 2 * i for i in range(m)]
    + [0]
    + [1 + 2 * i for i in range(m)]
    + list(range(1 + 2 * m, 1 + 2 * m + len(rest)))
  )
  x = jnp.transpose(x, perm)
  return jnp.reshape(
    x, (batch * math.prod(block),) + tuple(n // k for n, k in zip(padded, block)) + rest
  )


def _batch_to_space(x, block, crops, op="BatchToSpaceND"):
  m = len(block)
  _check_rank(x.shape, m, op)
  prod = math.prod(block)
  if x.shape[0] % prod:
    raise ValueError(
      f"{op}: Input batch dimension ({x.shape[0]}) is not divisible by product "
      f"of block sizes ({prod})"
    )
  batch, spatial, rest = x.shape[0] // prod, tuple(x.shape[1 : 1 + m]), tuple(x.shape[1 + m :])
  full = [n * k for n, k in zip(spatial, block)]
  for i, (n, (a, b)) in enumerate(zip(full, crops)):
    if a + b > n:
      raise ValueError(f"{op}: cropped_shape[{i}]={n - a - b} must be non-negative")
  x = jnp.reshape(x, tuple(block) + (batch,) + spatial + rest)
  # [k1, ..., km, B, n1, ..., nm, rest] -> [B, n1, k1, ..., nm, km, rest]
  perm = (
    [m]
    + [v for i in range(m) for v in (m + 1 + i, i)]
    + list(range(1 + 2 * m, 1 + 2 * m + len(rest)))
  )
  x = jnp.reshape(jnp.transpose(x, perm), (batch,) + tuple(full) + rest)
  if any(c != (0, 0) for c in crops):
    x = lax.slice(
      x,
      (0,) + tuple(a for a, _ in crops) + (0,) * len(rest),
      (batch,) + tuple(n - b for n, (_, b) in zip(full, crops)) + rest,
    )
  return x


# --- SpaceToBatchND / BatchToSpaceND ------------------------------------------------------


def _s2b_nd_impl(input, *, block_shape, paddings):
  """Zero-pads the spatial dims, then moves block offsets into the batch (TF's order:
  output batch ``(offset_1, ..., offset_m, b)``, ``b`` fastest)."""
  block = _block(block_shape, "SpaceToBatchND")
  return _space_to_batch(input, block, _pairs(paddings, len(block), "paddings", "SpaceToBatchND"))


def _b2s_nd_impl(input, *, block_shape, crops):
  """Moves block offsets out of the batch into the spatial dims, then crops them."""
  block = _block(block_shape, "BatchToSpaceND")
  return _batch_to_space(input, block, _pairs(crops, len(block), "crops", "BatchToSpaceND"))


def _at_axis_1(x, d):
  """``x`` with its vmapped axis ``d`` moved to axis 1 (right after TF's batch axis)."""
  return rules.move_axes(x, (d,), (1,))


def _s2b_nd_batch(args, dims, *, block_shape, paddings):
  (x,), (d,) = args, dims
  block = ints(block_shape)
  p = _pairs(paddings, len(block), "paddings", "SpaceToBatchND")
  out = tfops.SpaceToBatchND(_at_axis_1(x, d), block_shape=(1,) + block, paddings=((0, 0),) + p)
  return out, 1


def _b2s_nd_batch(args, dims, *, block_shape, crops):
  (x,), (d,) = args, dims
  block = ints(block_shape)
  c = _pairs(crops, len(block), "crops", "BatchToSpaceND")
  return tfops.BatchToSpaceND(_at_axis_1(x, d), block_shape=(1,) + block, crops=((0, 0),) + c), 1


SpaceToBatchND = register_op(
  "SpaceToBatchND",
  _s2b_nd_impl,
  family=FAMILY,
  static=("block_shape", "paddings"),
  linear=True,
  transpose=lambda ct, x, *, block_shape, paddings: [
    tfops.BatchToSpaceND(ct, block_shape=block_shape, crops=paddings)
  ],
  batching=_s2b_nd_batch,
  spec=rules.per_op(lambda op: lambda st: st.Spec(_nd_calls(st, op.op_type))),
)

BatchToSpaceND = register_op(
  "BatchToSpaceND",
  _b2s_nd_impl,
  family=FAMILY,
  static=("block_shape", "crops"),
  linear=True,
  transpose=lambda ct, x, *, block_shape, crops: [
    tfops.SpaceToBatchND(ct, block_shape=block_shape, paddings=crops)
  ],
  batching=_b2s_nd_batch,
  spec=rules.per_op(lambda op: lambda st: st.Spec(_nd_calls(st, op.op_type))),
)


# --- SpaceToBatch / BatchToSpace (v1: 4-D, one block size for both spatial dims) ----------


def _v1_rank(x, op):
  if x.ndim != 4:
    raise ValueError(f"{op}: Input rank should be: 4 instead of: {x.ndim}")


def _s2b_impl(input, *, paddings, block_size):
  """SpaceToBatchND of a 4-D input with block ``[block_size, block_size]``."""
  _v1_rank(input, "SpaceToBatch")
  return _space_to_batch(
    input, (block_size, block_size), _pairs(paddings, 2, "paddings", "SpaceToBatch"), "SpaceToBatch"
  )


def _b2s_impl(input, *, crops, block_size):
  """BatchToSpaceND of a 4-D input with block ``[block_size, block_size]``."""
  _v1_rank(input, "BatchToSpace")
  return _batch_to_space(
    input, (block_size, block_size), _pairs(crops, 2, "crops", "BatchToSpace"), "BatchToSpace"
  )


def _s2b_batch(args, dims, *, paddings, block_size):
  # The batched input is 5-D, which only the ND form takes.
  return _s2b_nd_batch(args, dims, block_shape=(block_size, block_size), paddings=paddings)


def _b2s_batch(args, dims, *, crops, block_size):
  return _b2s_nd_batch(args, dims, block_shape=(block_size, block_size), crops=crops)


SpaceToBatch = register_op(
  "SpaceToBatch",
  _s2b_impl,
  family=FAMILY,
  static=("paddings",),
  attrs=("block_size",),
  linear=True,
  transpose=lambda ct, x, *, paddings, block_size: [
    tfops.BatchToSpace(ct, crops=paddings, block_size=block_size)
  ],
  batching=_s2b_batch,
  spec=rules.per_op(lambda op: lambda st: st.Spec(_v1_calls(st, op.op_type))),
)

BatchToSpace = register_op(
  "BatchToSpace",
  _b2s_impl,
  family=FAMILY,
  static=("crops",),
  attrs=("block_size",),
  linear=True,
  transpose=lambda ct, x, *, crops, block_size: [
    tfops.SpaceToBatch(ct, paddings=crops, block_size=block_size)
  ],
  batching=_b2s_batch,
  spec=rules.per_op(lambda op: lambda st: st.Spec(_v1_calls(st, op.op_type))),
)


# --- property-test strategies (hypothesis is imported lazily) ---------------------


def _draw_layout(draw, hst, m, block_lo=1):
  """Per spatial dim: (block, spatial size, pad/crop before, after) with the padded
  size (SpaceToBatch) or the uncropped size (BatchToSpace) a multiple of the block."""
  dims = []
  for _ in range(m):
    k = draw(hst.integers(block_lo, 3))
    blocks = draw(hst.integers(0, 2))  # padded size / k, or the spatial size
    total = k * blocks
    a = draw(hst.integers(0, total))
    b = draw(hst.integers(0, total - a))
    dims.append((k, blocks, a, b))
  return dims


def _nd_calls(st, op):
  hst = lazy_hst()

  @st.composite
  def calls(draw):
    m = draw(hst.integers(1, 2))
    dims = _draw_layout(draw, hst, m)
    batch = draw(hst.integers(0, 2))
    rest = tuple(draw(st.shapes(max_rank=2 - (m == 2), max_side=3)))
    block = [k for k, _, _, _ in dims]
    pairs = np.array([[a, b] for _, _, a, b in dims], np.int64).reshape(m, 2)
    if op == "SpaceToBatchND":
      spatial = tuple(k * n - a - b for k, n, a, b in dims)
      shape = (batch,) + spatial + rest
    else:
      shape = (batch * math.prod(block),) + tuple(n for _, n, _, _ in dims) + rest
    out = {
      "input": draw(st.arrays(st.dtypes(_DTYPES), shape)),
      "block_shape": index_array(draw, st, np.array(block, np.int64)),
    }
    out["paddings" if op == "SpaceToBatchND" else "crops"] = index_array(draw, st, pairs)
    return out

  return calls()


def _v1_calls(st, op):
  hst = lazy_hst()

  @st.composite
  def calls(draw):
    k = draw(hst.integers(2, 3))  # TF: block_size >= 2
    dims = []
    for _ in range(2):
      n = draw(hst.integers(0, 2))
      a = draw(hst.integers(0, k * n))
      dims.append((n, a, draw(hst.integers(0, k * n - a))))
    pairs = np.array([[a, b] for _, a, b in dims], np.int64).reshape(2, 2)
    batch, depth = draw(hst.integers(0, 2)), draw(hst.integers(0, 2))
    if op == "SpaceToBatch":
      shape = (batch,) + tuple(k * n - a - b for n, a, b in dims) + (depth,)
    else:
      shape = (batch * k * k,) + tuple(n for n, _, _ in dims) + (depth,)
    out = {"input": draw(st.arrays(st.dtypes(_DTYPES), shape)), "block_size": k}
    out["paddings" if op == "SpaceToBatch" else "crops"] = index_array(draw, st, pairs)
    return out

  return calls()
