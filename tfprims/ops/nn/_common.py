"""Helpers shared by the nn modules: layouts, TF's padding, batch folding, spec helpers.

* Layout and padding: channel/spatial axes of a ``data_format``, TF's SAME padding
  (the odd pad at the end), explicit paddings, output sizes.
* Batching: moving a vmapped axis into N or into the channels and back, and
  :func:`_fold_batching`, the rule of ops that treat examples independently (pooling,
  LRN, resize): the batch axis is folded into N around one call of the op.
* Specs: calling ``tf.raw_ops`` with typed tensors, asking whether TF's CPU kernel
  runs a call, value and layout strategies (hypothesis and tensorflow are imported
  only when a spec is built).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from tfprims import rules
from tfprims.core import tfops

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
# Batching: the vmapped axis folded into N or into the channels
# --------------------------------------------------------------------------


def _merge_batch(a, d):
  """Moves batch axis ``d`` to the front and merges it into N: (B*N, ...)."""
  a = jnp.moveaxis(a, d, 0) if d != 0 else a
  return a.reshape((a.shape[0] * a.shape[1],) + a.shape[2:])


def _split_batch(out, b):
  return out.reshape((b, out.shape[0] // b if b else 0) + out.shape[1:])


def _batch_into_axis(a, d, axis, size):
  """Moves batch axis ``d`` (broadcasting if None) just before ``axis`` of the unbatched
  array and merges the two: (..., B * n, ...), B-major."""
  if d is None:
    a, d = jnp.broadcast_to(a, (size,) + a.shape), 0
  a = jnp.moveaxis(a, d, axis)
  return a.reshape(a.shape[:axis] + (a.shape[axis] * a.shape[axis + 1],) + a.shape[axis + 2:])


def _split_axis(a, axis, size):
  return a.reshape(a.shape[:axis] + (size, a.shape[axis] // size) + a.shape[axis + 1:])


def _fold_batching(op_type, fix_params=None):
  """vmap by folding the batch axis into N (every operand has N first); unbatched
  operands are broadcast. ``fix_params(params, batch_size)`` adjusts params that
  name the batch (AvgPoolGrad's orig_input_shape)."""
  def rule(args, dims, **p):
    b = rules.batch_size(args, dims)
    flat = []
    for a, d in zip(args, dims):
      if d is None:
        a, d = jnp.broadcast_to(a, (b,) + a.shape), 0
      flat.append(_merge_batch(a, d))
    if fix_params is not None:
      p = fix_params(p, b)
    out = getattr(tfops, op_type)(*flat, **p)
    if isinstance(out, (list, tuple)):
      return [_split_batch(o, b) for o in out], [0] * len(out)
    return _split_batch(out, b), 0
  return rule


# --------------------------------------------------------------------------
# Spec helpers (hypothesis and tensorflow are imported only when a spec is built)
# --------------------------------------------------------------------------

_ONEDNN_DTYPES = ("bfloat16", "float32")   # the TF CPU kernels that take NCHW, groups, ...


def _tf_call(op_type, kwargs):
  """Runs ``tf.raw_ops.<op_type>`` with numpy inputs as typed tensors (raw ops convert
  bare numpy arrays to a T attr's default dtype: float64 MaxPool inputs would run in
  float32)."""
  import tensorflow as tf
  kwargs = {k: tf.constant(v) if isinstance(v, np.ndarray) else v for k, v in kwargs.items()}
  return getattr(tf.raw_ops, op_type)(**kwargs)


def _tf_accepts(op_type, kwargs) -> bool:
  """Whether TF's CPU kernel runs this call (some attr/dtype/layout combinations
  have no CPU kernel); specs drop the calls it refuses."""
  import tensorflow as tf
  try:
    _tf_call(op_type, kwargs)
    return True
  except (tf.errors.OpError, ValueError, TypeError):
    return False


def _values(st, dtype, shape, *, bound=2.0, special=False):
  """Arrays for arithmetic-heavy ops: bounded floats (so float16/bfloat16 sums stay
  comparable) or full-range integers (wrap-around is order independent)."""
  dt = st.np_dtype(dtype)
  if dt.kind in "iu":
    if dt.itemsize == 8:   # keep 64-bit values in the 32-bit range (x64 may be off)
      info = np.iinfo(np.int32 if dt.kind == "i" else np.uint32)
      return st.arrays(dt, shape, min_value=int(info.min), max_value=int(info.max))
    return st.arrays(dt, shape)
  if special:
    return st.arrays(dt, shape)
  return st.arrays(dt, shape, special=False, min_value=-bound, max_value=bound)


def _layout_shape(fmt, n, c, spatial):
  return (n, c) + tuple(spatial) if _channels_first(fmt) else (n,) + tuple(spatial) + (c,)


def _layout_attr(fmt, spatial_values, fill=1):
  spatial_values = list(spatial_values)
  return ([fill, fill] + spatial_values if _channels_first(fmt)
          else [fill] + spatial_values + [fill])
