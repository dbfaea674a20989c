"""CPU lowerings of pooling: the window reduced one axis at a time.

Registered with :func:`tfprims.core.register_platform_lowering` for ``"cpu"`` only
(GPU/TPU keep pool.py's and pool3d.py's ``lax.reduce_window`` over the whole window);
the ``fast_lowerings`` config turns them off. XLA:CPU runs a reduce_window as a scalar
loop over each output's window; a window spanning several axes is that loop nested,
and one reduce_window per pooled axis (the max over the window's columns, then over
its rows) ran 1.6-2.5x faster and compiled in the same time (benchmarks/NOTES.md,
"Per-platform lowerings").

* MaxPool, MaxPoolV2, MaxPool3D: the same values bit for bit (max is exact in any
  order; NaN never wins, and the result is clamped at the dtype's lowest finite value).

AvgPool and AvgPool3D have none: their default sums each window in TF's order (one
strided slice per window offset, added in turn: pool.window_sums_in_order), which is
as fast as the axis-by-axis sums were (and 2.4x faster than one reduce_window on
8x35x35x192, 3x3 SAME), and whose order decides the result where huge values cancel.

Builders (tfprims/emit.py) returning None where fewer than two axes are pooled (the
default is then already one reduce_window). Their equality with the default lowering
is tested in tests/test_platform_lowerings.py.
"""

from __future__ import annotations

import jax.numpy as jnp

from tfprims.core import register_platform_lowering
from tfprims.ops.nn._common import _lowest, _static_maps
from tfprims.ops.nn.pool import _pool_pads


def _pooled_axes(x, ksize, strides, pads):
  return [a for a in range(x.ndim) if (ksize[a], strides[a], pads[a]) != (1, 1, (0, 0))]


def _axis_by_axis(reduce, x, axes, ksize, strides, pads):
  """``reduce`` (a B.reduce_window_*) over the window, the last pooled axis first."""
  for a in reversed(axes):
    window, step, padding = [1] * x.ndim, [1] * x.ndim, [(0, 0)] * x.ndim
    window[a], step[a], padding[a] = ksize[a], strides[a], pads[a]
    x = reduce(x, window, step, padding)
  return x


def max_pool_cpu(B, input, *, ksize, strides, padding, explicit_paddings=(), data_format="NHWC"):
  """MaxPool (any rank): one max per pooled axis in which NaN never wins, then
  pool.max_pool's clamp at the dtype's lowest finite value. The default clamps the
  input instead; clamping the output gives the same values (the clamp is monotone, and
  a window of NaNs gives the lowest value either way) and spares a clamped copy of the
  input, which cost more than the pooling on ResNet50's stem (8x112x112x64). Declined
  where an explicit padding is as wide as the window: a window of padding alone is
  -inf in the default, unclamped."""
  if not _static_maps(input.shape):
    return None
  pads = _pool_pads(input.shape, ksize, strides, padding, explicit_paddings)
  axes = _pooled_axes(input, ksize, strides, pads)
  if len(axes) < 2 or any(max(pads[a]) >= ksize[a] for a in axes):
    return None
  reduce = lambda x, *a: B.reduce_window_max(x, *a, ignore_nan=True)
  out = _axis_by_axis(reduce, input, axes, ksize, strides, pads)
  if jnp.issubdtype(out.dtype, jnp.floating):
    low = B.full_like(out, _lowest(out.dtype))
    out = B.select(B.ge(out, low), out, low)
  return out


def _without_explicit_paddings(B, input, *, ksize, strides, padding, data_format=None):
  """MaxPoolV2 and MaxPool3D: MaxPool's CPU lowering (they take no explicit paddings)."""
  return max_pool_cpu(B, input, ksize=ksize, strides=strides, padding=padding)


register_platform_lowering("MaxPool", "cpu", build=max_pool_cpu)
for _op_type in ("MaxPoolV2", "MaxPool3D"):
  register_platform_lowering(_op_type, "cpu", build=_without_explicit_paddings)
