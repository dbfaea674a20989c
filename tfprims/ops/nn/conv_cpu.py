"""CPU lowerings of convolutions that XLA:CPU compiles slowly in their default form.

Registered with :func:`tfprims.core.register_platform_lowering` for ``"cpu"`` only
(GPU/TPU keep conv.py's ``lax.conv_general_dilated`` formulas); the
``fast_lowerings`` config turns them off. Chosen by measurement on XLA:CPU
(docs/performance.md, "Per-platform lowerings"):

* DepthwiseConv2dNative and its input/filter backprops as sums over the kh * kw
  filter taps of strided slices of the padded input (or of the padded, stride-dilated
  cotangent, with the flipped filter) times the tap's weights: XLA:CPU runs a grouped
  convolution with one group per channel one channel at a time, tens of times slower.
  Kernels with more than ``_MAX_TAPS`` taps keep the default, and so does the filter
  backprop of fewer than ``_MIN_FILTER_BACKPROP_CHANNELS`` output channels.
* Conv2D and its backprops with one group per input channel (Keras'
  ``Conv2D(groups=C)``, ConvNeXt's 7x7 convolutions) as the depthwise tap sums: that
  grouped convolution is DepthwiseConv2dNative with the filter reshaped.
* Conv2D and Conv3D with a 1x1(x1) filter and no groups as a ``dot_general`` over
  the channel axis of the (padded, strided) input.

Each impl has its op impl's signature and computes the same values (float16/bfloat16
accumulate in float32); params it does not improve lower the op's own impl. Their
equality with the default lowering is tested in tests/test_platform_lowerings.py.
"""

from __future__ import annotations

import itertools
import math

import numpy as np
from jax import lax

from tfprims.core import register_platform_lowering
from tfprims.ops.nn._common import _channel_axis, _channels_first, _pads, _spatial_axes
from tfprims.ops.nn.conv import (_conv_out_shape, _dilate, _full_input_shape, _groups, conv2d,
                                 conv2d_backprop_filter, conv2d_backprop_input, conv3d,
                                 depthwise_backprop_filter, depthwise_backprop_input,
                                 depthwise_conv2d_native)

#: Depthwise kernels with more taps keep XLA's convolution (one slice per tap).
_MAX_TAPS = 49
#: The filter backprop as tap sums (one reduction over batch and space per tap) lost to
#: XLA's convolution at 32 channels (8x112x112x32: 0.5x) and won from 96 up (1.5-19x).
_MIN_FILTER_BACKPROP_CHANNELS = 64


def _acc_dtype(dtype):
  """Half-precision products are summed in float32 (as XLA:CPU's convolutions do)."""
  dtype = np.dtype(dtype)
  return np.dtype("float32") if dtype.kind == "f" and dtype.itemsize < 4 else dtype


def _geometry(shape, k, strides, padding, explicit_paddings, data_format, dilations):
  axes = _spatial_axes(data_format, len(shape))
  s = tuple(int(strides[a]) for a in axes)
  d = tuple(int(dilations[a]) for a in axes)
  pads = _pads(padding, explicit_paddings, [shape[a] for a in axes], k, s, d, axes)
  return axes, s, d, pads


def _pad(x, axes, pads, interior=None):
  cfg = [(0, 0, 0)] * x.ndim
  for i, (a, (lo, hi)) in enumerate(zip(axes, pads)):
    cfg[a] = (lo, hi, 0 if interior is None else interior[i])
  if all(c == (0, 0, 0) for c in cfg):
    return x
  return lax.pad(x, np.zeros((), x.dtype), cfg)


# The helpers below bind lax primitives only: jnp functions are jitted, and tracing
# each of them at every lowering tripled the lowering time of MobileNetV2.


def _cast(x, dtype):
  return x if x.dtype == dtype else lax.convert_element_type(x, dtype)


def _sum(x, axes):
  return lax.reduce(x, np.zeros((), x.dtype), lax.add, tuple(axes))


def _tap_slice(xp, axes, offsets, strides, out_sizes):
  """xp[..., o + s * t, ...] for t < out size along each spatial axis."""
  start, limit, step = [0] * xp.ndim, list(xp.shape), [1] * xp.ndim
  for a, o, s, n in zip(axes, offsets, strides, out_sizes):
    start[a], limit[a], step[a] = o, o + (n - 1) * s + 1, s
  return lax.slice(xp, start, limit, step)


def _tap_sum(xp, w, axes, ch, strides, dilations, out_sizes, flip=False):
  """sum over taps (i, j) of slice(xp at i*dh, j*dw; strides) * w[i, j] (w: [kh, kw, C])."""
  k = w.shape[:-1]
  acc = None
  for idx in itertools.product(*(range(n) for n in k)):
    tap = tuple(n - 1 - i for n, i in zip(k, idx)) if flip else idx
    sl = _tap_slice(xp, axes, [i * d for i, d in zip(idx, dilations)], strides, out_sizes)
    wt = lax.reshape(lax.slice(w, tap + (0,), tuple(i + 1 for i in tap) + (w.shape[-1],)),
                     (w.shape[-1],))
    term = lax.mul(sl, lax.broadcast_in_dim(wt, sl.shape, (ch,)))
    acc = term if acc is None else lax.add(acc, term)
  return acc


def _repeat_channels(x, ch, m):
  """Channel c * m + j of the result is channel c of x (depthwise channel multiplier)."""
  if m == 1:
    return x
  shape = x.shape[:ch + 1] + (m,) + x.shape[ch + 1:]
  dims = tuple(range(ch + 1)) + tuple(range(ch + 2, x.ndim + 1))
  out = list(x.shape)
  out[ch] *= m
  return lax.reshape(lax.broadcast_in_dim(x, shape, dims), tuple(out))


# --------------------------------------------------------------------------
# DepthwiseConv2dNative and its backprops as tap sums
# --------------------------------------------------------------------------


def depthwise_conv2d_cpu(input, filter, *, strides, padding, explicit_paddings=(),
                         data_format="NHWC", dilations=(1, 1, 1, 1)):
  """DepthwiseConv2dNative as the sum over filter taps of strided input slices."""
  kh, kw, c, m = filter.shape
  p = dict(strides=strides, padding=padding, explicit_paddings=explicit_paddings,
           data_format=data_format, dilations=dilations)
  out_shape = _conv_out_shape(input.shape, filter.shape, out_channels=c * m, **p)
  if kh * kw > _MAX_TAPS or 0 in out_shape or 0 in input.shape:
    return depthwise_conv2d_native(input, filter, **p)
  axes, s, d, pads = _geometry(input.shape, (kh, kw), strides, padding, explicit_paddings,
                               data_format, dilations)
  ch = _channel_axis(data_format, 4)
  acc = _acc_dtype(input.dtype)
  xp = _pad(_repeat_channels(_cast(input, acc), ch, m), axes, pads)
  w = lax.reshape(_cast(filter, acc), (kh, kw, c * m))
  out = _tap_sum(xp, w, axes, ch, s, d, [out_shape[a] for a in axes])
  return _cast(out, input.dtype)


def depthwise_backprop_input_cpu(filter, out_backprop, *, input_sizes, strides, padding,
                                 explicit_paddings=(), data_format="NHWC",
                                 dilations=(1, 1, 1, 1)):
  """DepthwiseConv2dNativeBackpropInput as a tap sum over the padded, stride-dilated
  cotangent with the flipped filter, summed over the channel multiplier."""
  kh, kw, c, m = filter.shape
  p = dict(strides=strides, padding=padding, explicit_paddings=explicit_paddings,
           data_format=data_format, dilations=dilations)
  g = out_backprop
  shape = _full_input_shape(input_sizes, c, g.shape, data_format)
  if kh * kw > _MAX_TAPS or 0 in shape or 0 in g.shape:
    return depthwise_backprop_input(filter, g, input_sizes=input_sizes, **p)
  # The impl checks the cotangent's shape against the convolution's output.
  expected = _conv_out_shape(shape, filter.shape, out_channels=c * m, **p)
  if tuple(g.shape) != tuple(expected):
    return depthwise_backprop_input(filter, g, input_sizes=input_sizes, **p)
  axes, s, d, pads = _geometry(shape, (kh, kw), strides, padding, explicit_paddings,
                               data_format, dilations)
  ch = _channel_axis(data_format, 4)
  t_pads = []
  for a, kk, st, dl, (lo, _) in zip(axes, (kh, kw), s, d, pads):
    before = _dilate(kk, dl) - lo - 1
    t_pads.append((before, shape[a] + _dilate(kk, dl) - 1 - _dilate(g.shape[a], st) - before))
  acc = _acc_dtype(g.dtype)
  gp = _pad(_cast(g, acc), axes, t_pads, interior=[st - 1 for st in s])
  w = lax.reshape(_cast(filter, acc), (kh, kw, c * m))
  out = _tap_sum(gp, w, axes, ch, (1, 1), d, [shape[a] for a in axes], flip=True)
  if m > 1:
    split = list(out.shape)
    split[ch:ch + 1] = [c, m]
    out = _sum(lax.reshape(out, tuple(split)), (ch + 1,))
  return _cast(out, g.dtype)


def depthwise_backprop_filter_cpu(input, out_backprop, *, filter_sizes, strides, padding,
                                  explicit_paddings=(), data_format="NHWC",
                                  dilations=(1, 1, 1, 1)):
  """DepthwiseConv2dNativeBackpropFilter: per tap, the sum over batch and space of the
  tap's input slice times the cotangent."""
  kh, kw, c, m = (int(v) for v in filter_sizes)
  p = dict(strides=strides, padding=padding, explicit_paddings=explicit_paddings,
           data_format=data_format, dilations=dilations)
  g = out_backprop
  expected = _conv_out_shape(input.shape, (kh, kw, c, m), out_channels=c * m, **p)
  if (kh * kw > _MAX_TAPS or c * m < _MIN_FILTER_BACKPROP_CHANNELS or 0 in g.shape
      or 0 in input.shape or tuple(g.shape) != tuple(expected)):
    return depthwise_backprop_filter(input, g, filter_sizes=filter_sizes, **p)
  axes, s, d, pads = _geometry(input.shape, (kh, kw), strides, padding, explicit_paddings,
                               data_format, dilations)
  ch = _channel_axis(data_format, 4)
  acc = _acc_dtype(input.dtype)
  xp = _pad(_repeat_channels(_cast(input, acc), ch, m), axes, pads)
  g = _cast(g, acc)
  others = tuple(a for a in range(4) if a != ch)
  out_sizes = [g.shape[a] for a in axes]
  taps = [lax.reshape(_sum(lax.mul(_tap_slice(xp, axes, (i * d[0], j * d[1]), s, out_sizes),
                                   g), others), (1, c * m))
          for i in range(kh) for j in range(kw)]
  return _cast(lax.reshape(lax.concatenate(taps, 0), (kh, kw, c, m)), input.dtype)


# --------------------------------------------------------------------------
# 1x1 Conv2D / Conv3D as dot_general
# --------------------------------------------------------------------------


def _pointwise(input, filter, *, strides, padding, explicit_paddings, data_format):
  """A 1x1(x1) ungrouped convolution: pad, stride, contract the channel axis."""
  rank = input.ndim
  axes = _spatial_axes(data_format, rank)
  ch = _channel_axis(data_format, rank)
  s = tuple(int(strides[a]) for a in axes)
  pads = _pads(padding, explicit_paddings, [input.shape[a] for a in axes], (1,) * len(axes),
               s, (1,) * len(axes), axes)   # a 1x1 window's dilation changes nothing
  x = _pad(input, axes, pads)
  if any(v > 1 for v in s):
    step = [1] * rank
    for a, v in zip(axes, s):
      step[a] = v
    x = lax.slice(x, (0,) * rank, x.shape, step)
  w = lax.reshape(filter, filter.shape[-2:])
  acc = _acc_dtype(input.dtype)
  out = lax.dot_general(x, w, (((ch,), (0,)), ((), ())),
                        preferred_element_type=acc if acc != input.dtype else None)
  if _channels_first(data_format):
    out = lax.transpose(out, (0, rank - 1) + tuple(range(1, rank - 1)))
  return _cast(out, input.dtype)


def _is_pointwise(input, filter, data_format):
  nd = filter.ndim - 2
  return (math.prod(filter.shape[:nd]) == 1 and 0 not in input.shape and 0 not in filter.shape
          and _groups(input.shape, filter.shape, data_format) == 1)


def _depthwise_multiplier(input_shape, filter_shape, data_format):
  """The channel multiplier m when a Conv2D is depthwise (one group per input channel,
  at most ``_MAX_TAPS`` taps), else None. Its output channel ``g * m + k`` reads input
  channel g, as DepthwiseConv2dNative's with the filter reshaped to [kh, kw, C, m]."""
  kh, kw, in_depth, out = (int(v) for v in filter_shape)
  c = int(input_shape[_channel_axis(data_format, 4)])
  if in_depth != 1 or c < 2 or out % c or kh * kw > _MAX_TAPS:
    return None
  return out // c


def conv2d_cpu(input, filter, *, strides, padding, explicit_paddings=(), data_format="NHWC",
               dilations=(1, 1, 1, 1)):
  """Conv2D: depthwise-grouped as tap sums, a 1x1 ungrouped filter as dot_general, others
  as XLA's convolution."""
  p = dict(strides=strides, padding=padding, explicit_paddings=explicit_paddings,
           data_format=data_format, dilations=dilations)
  m = _depthwise_multiplier(input.shape, filter.shape, data_format)
  if m is not None:
    kh, kw, _, out = filter.shape
    return depthwise_conv2d_cpu(input, lax.reshape(filter, (kh, kw, out // m, m)), **p)
  if not _is_pointwise(input, filter, data_format):
    return conv2d(input, filter, **p)
  return _pointwise(input, filter, strides=strides, padding=padding,
                    explicit_paddings=explicit_paddings, data_format=data_format)


def conv2d_backprop_input_cpu(filter, out_backprop, *, input_sizes, strides, padding,
                              explicit_paddings=(), data_format="NHWC",
                              dilations=(1, 1, 1, 1)):
  """Conv2DBackpropInput: depthwise-grouped as DepthwiseConv2dNativeBackpropInput's tap
  sums, others as the default."""
  p = dict(strides=strides, padding=padding, explicit_paddings=explicit_paddings,
           data_format=data_format, dilations=dilations)
  shape = _full_input_shape(input_sizes, filter.shape[-2], out_backprop.shape, data_format)
  m = _depthwise_multiplier(shape, filter.shape, data_format)
  if m is None:
    return conv2d_backprop_input(filter, out_backprop, input_sizes=input_sizes, **p)
  kh, kw, _, out = filter.shape
  return depthwise_backprop_input_cpu(lax.reshape(filter, (kh, kw, out // m, m)),
                                      out_backprop, input_sizes=tuple(shape), **p)


def conv2d_backprop_filter_cpu(input, out_backprop, *, filter_sizes, strides, padding,
                               explicit_paddings=(), data_format="NHWC",
                               dilations=(1, 1, 1, 1)):
  """Conv2DBackpropFilter: depthwise-grouped as DepthwiseConv2dNativeBackpropFilter's
  tap sums, others as the default."""
  p = dict(strides=strides, padding=padding, explicit_paddings=explicit_paddings,
           data_format=data_format, dilations=dilations)
  m = _depthwise_multiplier(input.shape, filter_sizes, data_format)
  if m is None:
    return conv2d_backprop_filter(input, out_backprop, filter_sizes=filter_sizes, **p)
  kh, kw, _, out = (int(v) for v in filter_sizes)
  grad = depthwise_backprop_filter_cpu(input, out_backprop,
                                       filter_sizes=(kh, kw, out // m, m), **p)
  return lax.reshape(grad, (kh, kw, 1, out))


def conv3d_cpu(input, filter, *, strides, padding, data_format="NDHWC", dilations=(1,) * 5):
  """Conv3D: a 1x1x1 ungrouped filter as dot_general, others as XLA's convolution."""
  if not _is_pointwise(input, filter, data_format):
    return conv3d(input, filter, strides=strides, padding=padding, data_format=data_format,
                  dilations=dilations)
  return _pointwise(input, filter, strides=strides, padding=padding, explicit_paddings=(),
                    data_format=data_format)


register_platform_lowering("DepthwiseConv2dNative", "cpu", depthwise_conv2d_cpu)
register_platform_lowering("DepthwiseConv2dNativeBackpropInput", "cpu",
                           depthwise_backprop_input_cpu)
register_platform_lowering("DepthwiseConv2dNativeBackpropFilter", "cpu",
                           depthwise_backprop_filter_cpu)
register_platform_lowering("Conv2D", "cpu", conv2d_cpu)
register_platform_lowering("Conv2DBackpropInput", "cpu", conv2d_backprop_input_cpu)
register_platform_lowering("Conv2DBackpropFilter", "cpu", conv2d_backprop_filter_cpu)
register_platform_lowering("Conv3D", "cpu", conv3d_cpu)
