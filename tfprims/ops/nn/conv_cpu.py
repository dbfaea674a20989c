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
* Conv2D and Conv3D with a 1x1(x1) filter, no groups and more than one output
  position as a ``dot_general`` over the channel axis of the (padded, strided) input
  (one position, a matrix-vector product, compiles slower than the convolution and runs
  no faster); ungrouped Conv2D on maps of at most
  ``_MAX_IM2COL_SIZE`` pixels a side with a dilated filter wider than the map (3x3 on
  2x2) as the same ``dot_general`` over every tap's slice (im2col).
* Ungrouped Conv2D with few input channels (an image model's RGB stem) and at least
  ``_MIN_STEM_OUTPUTS`` outputs as one depthwise tap sum per input channel.
* Ungrouped float32 NHWC Conv2D of stride 1 along the width as XLA's convolution
  padded until its output is wider than its input (a filter of one row: a 1-D
  convolution of the rows), forms XLA:CPU runs with Eigen's convolution (threads share
  the batch) instead of YNNPACK's.
* Other ungrouped NHWC Conv2D on maps of at least ``_MIN_SIDE_BY_SIDE_POSITIONS``
  output positions and at most ``_MAX_SIDE_BY_SIDE_COLUMNS`` columns (or few input
  channels) as XLA's convolution of the batch's images (or bands of an image's rows; a
  symbolic batch: bands) laid side by side in one wide row: XLA:CPU shares a
  convolution's work between threads along the output's width and channels only, so a
  56-wide map of 64 channels ran on one core. Unpadded ones elsewhere get a zero column
  (XLA:CPU's unpadded path is 2-6x slower).
* Here and in the tap sums, taps that read only padding are left out (a 3x3 SAME
  filter on a 1x1 map reads the input with its centre tap alone).

Each is a builder (tfprims/emit.py), ``build(B, *operands, **params)``: emitted as
StableHLO directly (lowering it costs no trace) and traced on lax for symbolic or
sharded shapes. It computes the op's values (float16/bfloat16 accumulate in float32)
and returns None for params it does not improve, which lower the op's own impl. Their
equality with the default lowering is tested in tests/test_platform_lowerings.py.
"""

from __future__ import annotations

import itertools
import math

import jax.numpy as jnp
import numpy as np
from jax import lax

from tfprims.core import register_platform_lowering
from tfprims.ops.nn._common import (
  _channel_axis,
  _channels_first,
  _dilate,
  _pads,
  _spatial_axes,
  _static_maps,
)
from tfprims.ops.nn.conv import _conv_build, _conv_out_shape, _full_input_shape, _groups

#: Depthwise kernels with more taps keep XLA's convolution (one slice per tap).
_MAX_TAPS = 49
#: The filter backprop as tap sums (one reduction over batch and space per tap) lost to
#: XLA's convolution at 32 channels (8x112x112x32: 0.5x) and won from 96 up (1.5-19x).
_MIN_FILTER_BACKPROP_CHANNELS = 64
#: im2col only for maps this small: on InceptionV3's 3x3 maps, 1x7 filters as im2col made
#: the model slower (11 -> 13-14 ms at 75 px, batch 1) though each conv alone was even.
_MAX_IM2COL_SIZE = 2
#: Ungrouped Conv2D with at most this many products per output (kh * kw * in channels;
#: an RGB stem's 3x3x3) as one tap sum per input channel, when it has at least
#: ``_MIN_STEM_OUTPUTS`` outputs: 0.08-0.1 s more to compile than XLA's convolution and
#: 3.5-4x faster a run (8x224x224x3 -> 3x3 s2 -> 32: 3.5-3.8 ms vs 13.6-15.5 ms; at batch
#: 1, 0.4 vs 1.6 ms, which would take hundreds of calls to repay the compile).
_MAX_STEM_PRODUCTS = 27
_MIN_STEM_OUTPUTS = 1 << 21
#: Side by side (:func:`_side_by_side`): up to this many images of a batch in one row (a
#: divisor of the batch), or where the batch has no divisor from 2 to 8 (batch 1, a prime
#: above 8) or is symbolic, its rows cut into up to this many bands of at least
#: ``_MIN_BAND_ROWS`` output rows, for at most ``_MAX_BAND_CHANNELS`` output channels
#: (wider outputs already run on every core; their bands cost compile time: ResNet50 at
#: batch 1, 0.5 -> 0.74 s),
_SIDE_BY_SIDE_IMAGES = 8
_SIDE_BY_SIDE_BANDS = 4
_MIN_BAND_ROWS = 4
_MAX_BAND_CHANNELS = 64
#: for maps of at least this many output positions (14x14); below it the layout changes
#: cost about what they save;
_MIN_SIDE_BY_SIDE_POSITIONS = 196
#: and at most this many output columns, or wider with at most ``_MAX_WIDE_MAP_CHANNELS``
#: input channels: wide maps are split between threads already (1x112x112x64 -> 64: 6.0
#: ms on one core, 3.3 on two), and side by side made batch 8 of 64 channels and more
#: slower (8x112x112x64 -> 64: 32 -> 46 ms, 8x224x224x64 -> 64: 155 -> 198 ms), while
#: of 3 to 32 channels it gained (ResNet50's 7x7 stem on 8x230x230x3: 17 -> 11 ms,
#: InceptionV3's 8x109x109x32 -> 64: 27 -> 19 ms).
_MAX_SIDE_BY_SIDE_COLUMNS = 96
_MAX_WIDE_MAP_CHANNELS = 32


def _acc_dtype(dtype):
  """Half-precision products are summed in float32 (as XLA:CPU's convolutions do)."""
  dtype = np.dtype(dtype)
  half = jnp.issubdtype(dtype, jnp.floating) and dtype.itemsize < 4  # bfloat16's kind is "V"
  return np.dtype("float32") if half else dtype


def _geometry(shape, k, strides, padding, explicit_paddings, data_format, dilations):
  axes = _spatial_axes(data_format, len(shape))
  s = tuple(int(strides[a]) for a in axes)
  d = tuple(int(dilations[a]) for a in axes)
  pads = _pads(padding, explicit_paddings, [shape[a] for a in axes], k, s, d, axes)
  return axes, s, d, pads


def _pad(B, x, axes, pads, interior=None):
  cfg = [(0, 0, 0)] * x.ndim
  for i, (a, (lo, hi)) in enumerate(zip(axes, pads)):
    cfg[a] = (lo, hi, 0 if interior is None else interior[i])
  if all(c == (0, 0, 0) for c in cfg):
    return x
  return B.pad(x, 0, cfg)


def _out_sizes(shape, axes, k, strides, dilations, pads):
  return [
    (shape[a] + lo + hi - _dilate(n, dl)) // st + 1
    for a, n, st, dl, (lo, hi) in zip(axes, k, strides, dilations, pads)
  ]


def _tap_slice(B, xp, axes, offsets, strides, out_sizes):
  """xp[..., o + s * t, ...] for t < out size along each spatial axis."""
  start, limit, step = [0] * xp.ndim, list(xp.shape), [1] * xp.ndim
  for a, o, s, n in zip(axes, offsets, strides, out_sizes):
    start[a], limit[a], step[a] = o, o + (n - 1) * s + 1, s
  return B.slice(xp, start, limit, step)


def _reads_input(offsets, strides, out_sizes, pads, sizes):
  """Whether the tap at these offsets into the padded input reads an input element (not
  padding) at some output position along every spatial axis: a tap that reads only
  padding adds zeros (a 3x3 filter on a 1x1 map has one such tap that does not)."""
  for o, st, m, (lo, _), n in zip(offsets, strides, out_sizes, pads, sizes):
    t = max(0, -(-(lo - o) // st))  # the first output whose read is at or past the input
    if t >= m or o + st * t >= lo + n:
      return False
  return True


def _tap_sum(B, xp, w, axes, ch, strides, dilations, out_sizes, flip=False, unpadded=None):
  """sum over taps (i, j) of slice(xp at i*dh, j*dw; strides) * w[i, j] (w: [kh, kw, C];
  ``flip``: w[kh-1-i, kw-1-j]). ``unpadded``: (pads, sizes) of xp's spatial axes, to
  skip the taps that read only padding (:func:`_reads_input`).

  Each kernel row's input slice is multiplied once by the row's [kw, C] weights,
  broadcast along a taps axis before the channels; a tap is then a slice of that
  product, summed in that shape (the taps axis of size 1, dropped once at the end).
  XLA:CPU's compile time follows the fused ops: two per tap (slice, add) and a few per
  row, where slicing and broadcasting each tap's weights took six per tap. Same
  products, same order of sums.
  """
  k, c = w.shape[:-1], w.shape[-1]
  if flip:
    w = B.rev(w, tuple(range(len(k))))
  last, step, dil, size = axes[-1], strides[-1], dilations[-1], out_sizes[-1]
  axis = lambda a: a + (a >= ch)  # an axis of the data in the product (taps at ch)
  out_shape = list(xp.shape)
  for a, n in zip(axes, out_sizes):
    out_shape[a] = n
  out_shape = tuple(out_shape)
  acc = None
  for row in itertools.product(*(range(n) for n in k[:-1])):
    row_offsets = [i * dl for i, dl in zip(row, dilations)]
    cols = [
      j
      for j in range(k[-1])
      if not unpadded or _reads_input(row_offsets + [j * dil], strides, out_sizes, *unpadded)
    ]
    if not cols:
      continue
    rows = _tap_slice(B, xp, axes[:-1], row_offsets, strides[:-1], out_sizes[:-1])
    shape = tuple(rows.shape[:ch]) + (k[-1],) + tuple(rows.shape[ch:])
    w_row = B.reshape(B.slice(w, row + (0, 0), tuple(i + 1 for i in row) + (k[-1], c)), (k[-1], c))
    prod = B.mul(
      B.broadcast_in_dim(rows, shape, tuple(axis(a) for a in range(rows.ndim))),
      B.broadcast_in_dim(w_row, shape, (ch, ch + 1)),
    )
    for j in cols:  # tap j: index j of the taps axis, its columns from j * dil on
      tap = _tap_slice(B, prod, (ch, axis(last)), (j, j * dil), (1, step), (1, size))
      acc = tap if acc is None else B.add(acc, tap)
  if acc is None:  # every output window lies in the padding
    return B.full(0, out_shape, xp.dtype)
  return B.reshape(acc, out_shape)


def _repeat_channels(B, x, ch, m):
  """Channel c * m + j of the result is channel c of x (depthwise channel multiplier)."""
  if m == 1:
    return x
  shape = x.shape[: ch + 1] + (m,) + x.shape[ch + 1 :]
  dims = tuple(range(ch + 1)) + tuple(range(ch + 2, x.ndim + 1))
  out = list(x.shape)
  out[ch] *= m
  return B.reshape(B.broadcast_in_dim(x, shape, dims), tuple(out))


# --------------------------------------------------------------------------
# DepthwiseConv2dNative and its backprops as tap sums
# --------------------------------------------------------------------------


def depthwise_conv2d_cpu(
  B,
  input,
  filter,
  *,
  strides,
  padding,
  explicit_paddings=(),
  data_format="NHWC",
  dilations=(1, 1, 1, 1),
):
  """DepthwiseConv2dNative as the sum over filter taps of strided input slices."""
  if not _static_maps(input.shape):
    return None
  kh, kw, c, m = filter.shape
  p = dict(
    strides=strides,
    padding=padding,
    explicit_paddings=explicit_paddings,
    data_format=data_format,
    dilations=dilations,
  )
  out_shape = _conv_out_shape(input.shape, filter.shape, out_channels=c * m, **p)
  if kh * kw > _MAX_TAPS or 0 in out_shape or 0 in input.shape:
    return None
  axes, s, d, pads = _geometry(
    input.shape, (kh, kw), strides, padding, explicit_paddings, data_format, dilations
  )
  ch = _channel_axis(data_format, 4)
  acc = _acc_dtype(input.dtype)
  xp = _pad(B, _repeat_channels(B, B.convert_element_type(input, acc), ch, m), axes, pads)
  w = B.reshape(B.convert_element_type(filter, acc), (kh, kw, c * m))
  out = _tap_sum(
    B,
    xp,
    w,
    axes,
    ch,
    s,
    d,
    [out_shape[a] for a in axes],
    unpadded=(pads, [input.shape[a] for a in axes]),
  )
  return B.convert_element_type(out, input.dtype)


def depthwise_backprop_input_cpu(
  B,
  filter,
  out_backprop,
  *,
  input_sizes,
  strides,
  padding,
  explicit_paddings=(),
  data_format="NHWC",
  dilations=(1, 1, 1, 1),
):
  """DepthwiseConv2dNativeBackpropInput as a tap sum over the padded, stride-dilated
  cotangent with the flipped filter, summed over the channel multiplier."""
  if not _static_maps(out_backprop.shape):  # its maps are symbolic where the input's are
    return None
  kh, kw, c, m = filter.shape
  p = dict(
    strides=strides,
    padding=padding,
    explicit_paddings=explicit_paddings,
    data_format=data_format,
    dilations=dilations,
  )
  g = out_backprop
  shape = _full_input_shape(input_sizes, c, g.shape, data_format)
  if kh * kw > _MAX_TAPS or 0 in shape or 0 in g.shape:
    return None
  # The impl checks the cotangent's shape against the convolution's output.
  expected = _conv_out_shape(shape, filter.shape, out_channels=c * m, **p)
  if tuple(g.shape) != tuple(expected):
    return None
  axes, s, d, pads = _geometry(
    shape, (kh, kw), strides, padding, explicit_paddings, data_format, dilations
  )
  ch = _channel_axis(data_format, 4)
  t_pads = []
  for a, kk, st, dl, (lo, _) in zip(axes, (kh, kw), s, d, pads):
    before = _dilate(kk, dl) - lo - 1
    t_pads.append((before, shape[a] + _dilate(kk, dl) - 1 - _dilate(g.shape[a], st) - before))
  acc = _acc_dtype(g.dtype)
  gp = _pad(B, B.convert_element_type(g, acc), axes, t_pads, interior=[st - 1 for st in s])
  w = B.reshape(B.convert_element_type(filter, acc), (kh, kw, c * m))
  out = _tap_sum(B, gp, w, axes, ch, (1, 1), d, [shape[a] for a in axes], flip=True)
  if m > 1:
    split = list(out.shape)
    split[ch : ch + 1] = [c, m]
    out = B.reduce_sum(B.reshape(out, tuple(split)), (ch + 1,))
  return B.convert_element_type(out, g.dtype)


def depthwise_backprop_filter_cpu(
  B,
  input,
  out_backprop,
  *,
  filter_sizes,
  strides,
  padding,
  explicit_paddings=(),
  data_format="NHWC",
  dilations=(1, 1, 1, 1),
):
  """DepthwiseConv2dNativeBackpropFilter: per tap, the sum over batch and space of the
  tap's input slice times the cotangent."""
  if not _static_maps(input.shape, out_backprop.shape):
    return None
  kh, kw, c, m = (int(v) for v in filter_sizes)
  p = dict(
    strides=strides,
    padding=padding,
    explicit_paddings=explicit_paddings,
    data_format=data_format,
    dilations=dilations,
  )
  g = out_backprop
  expected = _conv_out_shape(input.shape, (kh, kw, c, m), out_channels=c * m, **p)
  if (
    kh * kw > _MAX_TAPS
    or c * m < _MIN_FILTER_BACKPROP_CHANNELS
    or 0 in g.shape
    or 0 in input.shape
    or tuple(g.shape) != tuple(expected)
  ):
    return None
  axes, s, d, pads = _geometry(
    input.shape, (kh, kw), strides, padding, explicit_paddings, data_format, dilations
  )
  ch = _channel_axis(data_format, 4)
  acc = _acc_dtype(input.dtype)
  xp = _pad(B, _repeat_channels(B, B.convert_element_type(input, acc), ch, m), axes, pads)
  g = B.convert_element_type(g, acc)
  others = tuple(a for a in range(4) if a != ch)
  out_sizes = [g.shape[a] for a in axes]
  taps = [
    B.reshape(
      B.reduce_sum(B.mul(_tap_slice(B, xp, axes, (i * d[0], j * d[1]), s, out_sizes), g), others),
      (1, c * m),
    )
    for i in range(kh)
    for j in range(kw)
  ]
  return B.convert_element_type(B.reshape(B.concatenate(taps, 0), (kh, kw, c, m)), input.dtype)


# --------------------------------------------------------------------------
# Ungrouped convolutions as one dot_general (im2col)
# --------------------------------------------------------------------------


def _im2col(B, input, filter, *, strides, padding, explicit_paddings, data_format, dilations):
  """An ungrouped convolution as one dot_general: the padded input's strided, dilated
  slice for every filter tap that reads the input (:func:`_reads_input`), concatenated
  along the channel axis (tap-major, as the filter's [taps * in, out] rows), contracted
  with those rows of the filter. A 1x1 filter has one tap: the input itself, padded and
  strided."""
  rank = input.ndim
  k = filter.shape[: rank - 2]
  axes, s, d, pads = _geometry(
    input.shape, k, strides, padding, explicit_paddings, data_format, dilations
  )
  ch = _channel_axis(data_format, rank)
  out_sizes = _out_sizes(input.shape, axes, k, s, d, pads)
  if min(out_sizes) <= 0:
    return None
  xp = _pad(B, input, axes, pads)
  sizes = [input.shape[a] for a in axes]
  offsets = {
    idx: [i * dl for i, dl in zip(idx, d)] for idx in itertools.product(*(range(n) for n in k))
  }
  taps = [idx for idx, o in offsets.items() if _reads_input(o, s, out_sizes, pads, sizes)]
  if not taps:
    return None
  cols = [_tap_slice(B, xp, axes, offsets[idx], s, out_sizes) for idx in taps]
  x = cols[0] if len(cols) == 1 else B.concatenate(cols, ch)
  c_in, c_out = filter.shape[-2:]
  if len(taps) == math.prod(k):
    w = B.reshape(filter, (math.prod(filter.shape[:-1]), c_out))
  else:  # the rows of the taps that read the input
    rows = [
      B.reshape(
        B.slice(filter, idx + (0, 0), tuple(i + 1 for i in idx) + (c_in, c_out)), (c_in, c_out)
      )
      for idx in taps
    ]
    w = rows[0] if len(rows) == 1 else B.concatenate(rows, 0)
  acc = _acc_dtype(input.dtype)
  out = B.dot_general(
    x, w, (((ch,), (0,)), ((), ())), preferred_element_type=acc if acc != input.dtype else None
  )
  if _channels_first(data_format):
    out = B.transpose(out, (0, rank - 1) + tuple(range(1, rank - 1)))
  return B.convert_element_type(out, input.dtype)


def _stem_tap_sums(
  B, input, filter, *, strides, padding, explicit_paddings, data_format, dilations
):
  """An ungrouped Conv2D with few input channels as the sum over them of depthwise tap
  sums: input channel c, broadcast to the output channels, with the filter's [kh, kw, c,
  :] as depthwise weights: every product is a multiply-add along the output channels,
  where XLA:CPU's convolution contracts a depth of three."""
  kh, kw, c_in, c_out = filter.shape
  axes, s, d, pads = _geometry(
    input.shape, (kh, kw), strides, padding, explicit_paddings, data_format, dilations
  )
  ch = _channel_axis(data_format, 4)
  out_sizes = _out_sizes(input.shape, axes, (kh, kw), s, d, pads)
  acc = _acc_dtype(input.dtype)
  xp = _pad(B, B.convert_element_type(input, acc), axes, pads)
  w = B.convert_element_type(filter, acc)
  shape = list(xp.shape)
  shape[ch] = c_out
  out = None
  for c in range(c_in):
    x_c = B.broadcast_in_dim(
      _tap_slice(B, xp, (ch,), (c,), (1,), (1,)), tuple(shape), tuple(range(4))
    )
    w_c = B.reshape(B.slice(w, (0, 0, c, 0), (kh, kw, c + 1, c_out)), (kh, kw, c_out))
    term = _tap_sum(
      B, x_c, w_c, axes, ch, s, d, out_sizes, unpadded=(pads, [input.shape[a] for a in axes])
    )
    out = term if out is None else B.add(out, term)
  return B.convert_element_type(out, input.dtype)


def _as_stem_taps(input, filter, data_format, dilations, strides, padding, explicit_paddings):
  """Whether an ungrouped Conv2D is a large convolution of few input channels (an image
  model's stem from batch 6), faster as :func:`_stem_tap_sums`."""
  kh, kw, c_in, c_out = (int(v) for v in filter.shape)
  if (
    0 in input.shape
    or 0 in filter.shape
    or kh * kw * c_in > _MAX_STEM_PRODUCTS
    or _groups(input.shape, filter.shape, data_format) != 1
  ):
    return False
  out = _conv_out_shape(
    input.shape,
    filter.shape,
    out_channels=c_out,
    strides=strides,
    padding=padding,
    explicit_paddings=explicit_paddings,
    data_format=data_format,
    dilations=dilations,
  )
  # A symbolic batch (one exported program for every batch size) keeps the convolution:
  # its size, and so the better lowering, is not known.
  return all(type(n) is int for n in out) and 0 not in out and math.prod(out) >= _MIN_STEM_OUTPUTS


def _as_dot(input, filter, *, strides, padding, explicit_paddings, data_format, dilations):
  """Whether an ungrouped convolution runs faster as im2col's dot_general: a 1x1(x1)
  filter with more than one output position, or (Conv2D) a filter wider than a map of at
  most ``_MAX_IM2COL_SIZE`` pixels a side, where XLA:CPU's convolution is 3-55x slower
  (ResNet50's last stage at 64 px: 2x2 maps, 3x3 filters, 310 ms against 5.7 ms at batch
  32).

  With one output position (batch 1 on a 1x1 map: a squeeze-excite block, a classifier
  head) the 1x1 filter's dot is a matrix-vector product, which XLA:CPU compiles to code
  of its own: 20-40 ms more to compile than the convolution, a library call, for the
  same run within 0.1 ms."""
  nd = filter.ndim - 2
  if 0 in input.shape or 0 in filter.shape or _groups(input.shape, filter.shape, data_format) != 1:
    return False
  if math.prod(filter.shape[:nd]) == 1:
    out = _conv_out_shape(
      input.shape,
      filter.shape,
      strides=strides,
      padding=padding,
      explicit_paddings=explicit_paddings,
      data_format=data_format,
      dilations=dilations,
    )
    ch = _channel_axis(data_format, input.ndim)
    positions = [n for a, n in enumerate(out) if a != ch]
    return not all(type(n) is int and n == 1 for n in positions)
  axes = _spatial_axes(data_format, input.ndim)
  return (
    nd == 2
    and all(input.shape[a] <= _MAX_IM2COL_SIZE for a in axes)
    and any(_dilate(n, int(dilations[a])) > input.shape[a] for n, a in zip(filter.shape[:nd], axes))
  )


def _depthwise_multiplier(input_shape, filter_shape, data_format):
  """The channel multiplier m when a Conv2D is depthwise (one group per input channel,
  at most ``_MAX_TAPS`` taps), else None. Its output channel ``g * m + k`` reads input
  channel g, as DepthwiseConv2dNative's with the filter reshaped to [kh, kw, C, m]."""
  kh, kw, in_depth, out = (int(v) for v in filter_shape)
  c = int(input_shape[_channel_axis(data_format, 4)])
  if in_depth != 1 or c < 2 or out % c or kh * kw > _MAX_TAPS:
    return None
  return out // c


def conv2d_cpu(
  B,
  input,
  filter,
  *,
  strides,
  padding,
  explicit_paddings=(),
  data_format="NHWC",
  dilations=(1, 1, 1, 1),
):
  """Conv2D: depthwise-grouped as tap sums; ungrouped with a 1x1 filter or a filter wider
  than the input as im2col's dot_general; an RGB stem as tap sums; others as XLA's
  convolution: on Eigen where it takes it, of the pieces side by side on maps of 14x14
  and more, else padded."""
  if not _static_maps(input.shape):
    return None
  p = dict(
    strides=strides,
    padding=padding,
    explicit_paddings=explicit_paddings,
    data_format=data_format,
    dilations=dilations,
  )
  m = _depthwise_multiplier(input.shape, filter.shape, data_format)
  if m is not None:
    kh, kw, _, out = filter.shape
    return depthwise_conv2d_cpu(B, input, B.reshape(filter, (kh, kw, out // m, m)), **p)
  if _as_dot(input, filter, **p):
    return _im2col(B, input, filter, **p)
  if _as_stem_taps(input, filter, **p):
    return _stem_tap_sums(B, input, filter, **p)
  for lowering in (_on_eigen, _side_by_side, _padded_for_speed):
    out = lowering(B, input, filter, **p)
    if out is not None:
      return out
  return None


def _dense_nhwc(input, filter, strides, padding, explicit_paddings, data_format, dilations):
  """The geometry of an ungrouped NHWC Conv2D with a non-empty output, for the lowerings
  of XLA's convolution in another form: the filter's (kh, kw, in, out), the strides,
  dilations and pads of the two spatial axes and the output's (rows, columns); None for
  any other Conv2D."""
  n = input.shape[0]
  if (
    _channels_first(data_format)
    or (type(n) is int and n == 0)
    or 0 in input.shape[1:]
    or 0 in filter.shape
    or _groups(input.shape, filter.shape, data_format) != 1
  ):
    return None
  k = tuple(int(v) for v in filter.shape)
  axes, s, d, pads = _geometry(
    input.shape, k[:2], strides, padding, explicit_paddings, data_format, dilations
  )
  out = _out_sizes(input.shape, axes, k[:2], s, d, pads)
  return None if min(out) <= 0 else (k, s, d, pads, out)


def _on_eigen(B, input, filter, *, strides, padding, explicit_paddings, data_format, dilations):
  """A float32 NHWC convolution of stride 1 along the width in a form XLA:CPU runs with
  Eigen's spatial convolution, which shares the batch between threads, instead of a
  YNNPACK fusion, which takes neither an output wider than its input nor one spatial
  axis: padded on the right until its output is one column wider than its input (one
  more column for SAME, kw for VALID; the extra columns sliced off), or, for a filter of
  one row without row padding, a 1-D convolution of the rows folded into the batch.
  At batch 8, 8x54x54x80 -> 3x3 -> 192 (InceptionV3's) took 37 ms against 43-47 side by
  side on YNNPACK (TF 36-41), 8x56x56x64 -> 64 12 vs 15.5 ms, 8x224x224x64 -> 64 244 vs
  299 ms (TF 249); at batch 1 0.6-0.9x YNNPACK's time. A filter of one row widened
  instead lost (8x12x12x160 -> 1x7 -> 160: 4.4 vs 3.0 ms); as rows it is even with
  YNNPACK alone and 1-2 % faster in InceptionV3."""
  geometry = _dense_nhwc(input, filter, strides, padding, explicit_paddings, data_format, dilations)
  if geometry is None or input.dtype != np.float32:
    return None
  (kh, kw, c, o), (sh, sw), d, ((ph0, ph1), (pw0, pw1)), (ho, wo) = geometry
  n, h, w, _ = input.shape
  if sw != 1:
    return None
  if kh == 1:
    if sh != 1 or ph0 or ph1 or type(n) is not int:
      return None
    y = B.conv_general_dilated(
      B.reshape(input, (n * h, w, c)),
      B.reshape(filter, (kw, c, o)),
      (1,),
      ((pw0, pw1),),
      rhs_dilation=(d[1],),
      dimension_numbers=lax.ConvDimensionNumbers((0, 2, 1), (2, 1, 0), (0, 2, 1)),
    )
    return B.reshape(y, (n, h, wo, o))
  extra = max(w + 1 - wo, 0)
  y = _conv_build(
    B,
    input,
    filter,
    strides=strides,
    padding="EXPLICIT",
    explicit_paddings=(0, 0, ph0, ph1, pw0, pw1 + extra, 0, 0),
    data_format=data_format,
    dilations=dilations,
  )
  if extra:
    y = B.slice(y, (0, 0, 0, 0), (n, ho, wo, o))
  return y


def _side_by_side(B, input, filter, *, strides, padding, explicit_paddings, data_format, dilations):
  """An ungrouped NHWC convolution as one convolution over pieces laid side by side
  along the width: the batch's images, or (batch 1, a prime batch above 8, a symbolic
  batch) bands of rows, each with the rows its windows share with the next repeated.
  XLA:CPU's convolution (a YNNPACK fusion) splits its work between threads by the
  output's width and channels, as measured, not by batch or rows: 8x56x56x64 -> 64
  (ResNet50's 3x3 layers) runs in the same 12 ms on one core as on two, 1x112x112x64 ->
  64 in 6.0 ms on one and 3.3 on two. As one 56x456 row of images the first takes 7.7
  ms on two cores; 8x56x56x128 -> 32 (DenseNet121's) 14 -> 8 ms.

  Each piece keeps its own padding, to a width that is a multiple of the stride (its
  slot), so every output column of the row belongs to one piece and no window reads two;
  the extra columns' outputs, and a last band's rows below the map, are sliced off."""
  geometry = _dense_nhwc(input, filter, strides, padding, explicit_paddings, data_format, dilations)
  if geometry is None:
    return None
  (kh, kw, c, o), (sh, sw), d, ((ph0, ph1), (pw0, pw1)), (ho, wo) = geometry
  n = input.shape[0]
  if ho * wo < _MIN_SIDE_BY_SIDE_POSITIONS or (
    wo > _MAX_SIDE_BY_SIDE_COLUMNS and c > _MAX_WIDE_MAP_CHANNELS
  ):
    return None
  # A symbolic batch (one exported program for every batch size) gets bands only: which
  # numbers of images divide it is not known.
  divides = (lambda g: n % g == 0) if type(n) is int else (lambda g: g == 1)
  images = max(g for g in range(1, _SIDE_BY_SIDE_IMAGES + 1) if divides(g))
  if images > 1 or o > _MAX_BAND_CHANNELS:
    bands = 1
  else:
    bands = max(1, min(_SIDE_BY_SIDE_BANDS, ho // _MIN_BAND_ROWS))
  if images * bands == 1:
    return None
  _, h, w, _ = input.shape
  kh_eff, kw_eff = _dilate(kh, d[0]), _dilate(kw, d[1])
  slot = -(-(w + pw0 + pw1) // sw) * sw
  x = _pad(B, input, (2,), [(pw0, slot - w - pw0)])
  rows, pad_h = h, (ph0, ph1)
  if bands > 1:  # band i computes output rows [i * band, (i + 1) * band)
    band = -(-ho // bands)
    rows = (band - 1) * sh + kh_eff
    height = (bands * band - 1) * sh + kh_eff
    x = _pad(B, x, (1,), [(ph0, max(height - h - ph0, 0))])
    pieces = [
      B.slice(x, (0, i * band * sh, 0, 0), (n, i * band * sh + rows, slot, c)) for i in range(bands)
    ]
    x = B.concatenate([B.reshape(p, (n, 1, rows, slot, c)) for p in pieces], 1)
    pad_h = (0, 0)
  g, row_count = images * bands, n // images  # pieces in a row, rows of pieces
  x = B.reshape(x, (row_count, g, rows, slot, c))
  x = B.reshape(B.transpose(x, (0, 2, 1, 3, 4)), (row_count, rows, g * slot, c))
  # The right pad keeps the row's output at g * slot / sw columns; one more column (its
  # output sliced off) where that pad and the rows' are 0: see _padded_for_speed.
  right = kw_eff - 1 if kw_eff > 1 or any(pad_h) else sw
  y = _conv_build(
    B,
    x,
    filter,
    strides=strides,
    padding="EXPLICIT",
    explicit_paddings=(0, 0, *pad_h, 0, right, 0, 0),
    data_format=data_format,
    dilations=dilations,
  )
  per, band_rows = slot // sw, y.shape[1]
  if y.shape[2] != g * per:
    y = B.slice(y, (0, 0, 0, 0), (row_count, band_rows, g * per, o))
  y = B.reshape(y, (row_count, band_rows, g, per, o))
  y = B.reshape(B.transpose(y, (0, 2, 1, 3, 4)), (n, bands * band_rows, per, o))
  if y.shape[1:3] != (ho, wo):
    y = B.slice(y, (0, 0, 0, 0), (n, ho, wo, o))
  return y


def _padded_for_speed(
  B, input, filter, *, strides, padding, explicit_paddings, data_format, dilations
):
  """An ungrouped convolution without padding as XLA's convolution of the input with
  one zero column after its last spatial axis, the output column that adds (if any)
  sliced off: XLA:CPU runs unpadded convolutions by a path 2-6x slower than padded ones
  (batch 8: a 3x3 filter on 109x109x32, 59 vs 10 ms; ResNet50's 7x7 stride-2 stem on
  230x230x3, 39 vs 10 ms). The column changes no output that is kept."""
  k = tuple(int(n) for n in filter.shape[:2])
  axes, s, d, pads = _geometry(
    input.shape, k, strides, padding, explicit_paddings, data_format, dilations
  )
  if (
    any(lo or hi for lo, hi in pads)
    or 0 in input.shape
    or 0 in filter.shape
    or _groups(input.shape, filter.shape, data_format) != 1
  ):
    return None
  explicit = [0] * (2 * input.ndim)
  explicit[2 * axes[-1] + 1] = 1
  out = _conv_build(
    B,
    input,
    filter,
    strides=strides,
    padding="EXPLICIT",
    explicit_paddings=tuple(explicit),
    data_format=data_format,
    dilations=dilations,
  )
  width = _out_sizes(input.shape, axes, k, s, d, pads)[-1]
  if out.shape[axes[-1]] == width:
    return out
  limit = list(out.shape)
  limit[axes[-1]] = width
  return B.slice(out, (0,) * out.ndim, tuple(limit))


def conv2d_backprop_input_cpu(
  B,
  filter,
  out_backprop,
  *,
  input_sizes,
  strides,
  padding,
  explicit_paddings=(),
  data_format="NHWC",
  dilations=(1, 1, 1, 1),
):
  """Conv2DBackpropInput: depthwise-grouped as DepthwiseConv2dNativeBackpropInput's tap
  sums, others as the default."""
  p = dict(
    strides=strides,
    padding=padding,
    explicit_paddings=explicit_paddings,
    data_format=data_format,
    dilations=dilations,
  )
  shape = _full_input_shape(input_sizes, filter.shape[-2], out_backprop.shape, data_format)
  m = _depthwise_multiplier(shape, filter.shape, data_format)
  if m is None:
    return None
  kh, kw, _, out = filter.shape
  return depthwise_backprop_input_cpu(
    B, B.reshape(filter, (kh, kw, out // m, m)), out_backprop, input_sizes=tuple(shape), **p
  )


def conv2d_backprop_filter_cpu(
  B,
  input,
  out_backprop,
  *,
  filter_sizes,
  strides,
  padding,
  explicit_paddings=(),
  data_format="NHWC",
  dilations=(1, 1, 1, 1),
):
  """Conv2DBackpropFilter: depthwise-grouped as DepthwiseConv2dNativeBackpropFilter's
  tap sums, others as the default."""
  p = dict(
    strides=strides,
    padding=padding,
    explicit_paddings=explicit_paddings,
    data_format=data_format,
    dilations=dilations,
  )
  m = _depthwise_multiplier(input.shape, filter_sizes, data_format)
  if m is None:
    return None
  kh, kw, _, out = (int(v) for v in filter_sizes)
  grad = depthwise_backprop_filter_cpu(
    B, input, out_backprop, filter_sizes=(kh, kw, out // m, m), **p
  )
  return None if grad is None else B.reshape(grad, (kh, kw, 1, out))


def conv3d_cpu(B, input, filter, *, strides, padding, data_format="NDHWC", dilations=(1,) * 5):
  """Conv3D: a 1x1x1 ungrouped filter as dot_general, others as XLA's convolution."""
  if not _static_maps(input.shape):
    return None
  p = dict(
    strides=strides,
    padding=padding,
    explicit_paddings=(),
    data_format=data_format,
    dilations=dilations,
  )
  if not _as_dot(input, filter, **p):
    return None
  return _im2col(B, input, filter, **p)


for _op_type, _build in (
  ("DepthwiseConv2dNative", depthwise_conv2d_cpu),
  ("DepthwiseConv2dNativeBackpropInput", depthwise_backprop_input_cpu),
  ("DepthwiseConv2dNativeBackpropFilter", depthwise_backprop_filter_cpu),
  ("Conv2D", conv2d_cpu),
  ("Conv2DBackpropInput", conv2d_backprop_input_cpu),
  ("Conv2DBackpropFilter", conv2d_backprop_filter_cpu),
  ("Conv3D", conv3d_cpu),
):
  register_platform_lowering(_op_type, "cpu", build=_build)
