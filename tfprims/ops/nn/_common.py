"""Runtime helpers shared by the nn modules: layouts, TF's padding, batch axes.

* Layout and padding: channel/spatial axes of a ``data_format``, TF's SAME padding
  (the odd pad at the end), explicit paddings, output sizes.
* Batching: moving a vmapped axis into the channels and back (the rule that folds it
  into N, for ops that treat examples independently, is
  :func:`tfprims.ops.shared.fold_batching`).

The property-test spec helpers are in ``_specs.py``.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

# --------------------------------------------------------------------------
# Layout and padding
# --------------------------------------------------------------------------


def _channels_first(data_format: str) -> bool:
  return data_format.startswith("NC")


def _spatial_axes(data_format: str, rank: int) -> tuple[int, ...]:
  return tuple(range(2, rank)) if _channels_first(data_format) else tuple(range(1, rank - 1))


def _channel_axis(data_format: str, rank: int) -> int:
  return 1 if _channels_first(data_format) else rank - 1


def _same_pad(size: int, window: int, stride: int, dilation: int = 1) -> tuple[int, int]:
  """TF's SAME padding: out = ceil(size / stride), the odd pad at the end. ``size`` may be
  a symbolic dimension (jax.export): the pads are then symbolic too."""
  eff = (window - 1) * dilation + 1
  out = -(-size // stride)
  total = jax.core.max_dim((out - 1) * stride + eff - size, 0)
  return (total // 2, total - total // 2)


def _dilate(n, d):
  """The size of ``n`` elements dilated by ``d``, written as JAX writes it, so that
  symbolic sizes (jax.export) cancel against the shapes lax computes."""
  return n if d == 1 else jax.core.max_dim(1 + d * (n - 1), 0)


def _static_maps(*shapes) -> bool:
  """Whether every dim but the batch (the first) is a known int. The CPU lowerings pick
  their form by the maps' sizes: with a symbolic image size (jax.export) they decline
  and the op lowers its default."""
  return all(type(n) is int for shape in shapes for n in tuple(shape)[1:])


def _pads(padding, explicit_paddings, sizes, windows, strides, dilations, axes):
  """(lo, hi) pads for the dims ``axes`` (indices into the full-rank attrs)."""
  if padding == "VALID":
    return [(0, 0)] * len(sizes)
  if padding == "SAME":
    return [_same_pad(n, k, s, d) for n, k, s, d in zip(sizes, windows, strides, dilations)]
  if padding == "EXPLICIT":
    return [(int(explicit_paddings[2 * a]), int(explicit_paddings[2 * a + 1])) for a in axes]
  raise ValueError(f"unknown padding {padding!r}")


def _out_size(size, window, stride, dilation, pad):
  eff = (window - 1) * dilation + 1
  span = size + pad[0] + pad[1] - eff
  # span // stride + 1 when span >= 0, else 0 (a span below 0 gives at most 0 here),
  # written without a comparison so that symbolic sizes work
  return jax.core.max_dim(span // stride + 1, 0)


# --------------------------------------------------------------------------
# Batching: the vmapped axis folded into the channels
# --------------------------------------------------------------------------


def _batch_into_axis(a, d, axis, size):
  """Moves batch axis ``d`` (broadcasting if None) just before ``axis`` of the unbatched
  array and merges the two: (..., B * n, ...), B-major."""
  if d is None:
    a, d = jnp.broadcast_to(a, (size,) + a.shape), 0
  a = jnp.moveaxis(a, d, axis)
  return a.reshape(a.shape[:axis] + (a.shape[axis] * a.shape[axis + 1],) + a.shape[axis + 2 :])


def _split_axis(a, axis, size):
  return a.reshape(a.shape[:axis] + (size, a.shape[axis] // size) + a.shape[axis + 1 :])


# --------------------------------------------------------------------------
# TF's CPU kernels
# --------------------------------------------------------------------------

#: The dtypes of TF's oneDNN CPU kernels (the ones that take NCHW, groups, ...;
#: FusedBatchNormGrad computes as they do, the specs draw them).
_ONEDNN_DTYPES = ("bfloat16", "float32")


def _lowest(dtype):
  """The initial value of TF's CPU max pools and morphological dilations: the dtype's
  lowest finite value, as a 0-d array of ``dtype`` (TF's oneDNN half-precision MaxPool,
  on CPUs with AVX512-FP16/BF16, starts at -inf instead: docs/semantics/nn.md)."""
  info = jnp.finfo(dtype) if jnp.issubdtype(dtype, jnp.floating) else jnp.iinfo(dtype)
  return np.array(info.min, dtype)
