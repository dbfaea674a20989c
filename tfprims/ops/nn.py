"""Neural-network ops: bias, convolutions, pooling, batch norm, LRN, resize.

Layouts are expressed as convolution dimension numbers / window dims, never by
transposing NHWC or NCHW data, so jit compiles to the program hand-written
``lax.conv_general_dilated`` / ``lax.reduce_window`` code gives. ``SAME``
padding is TF's (the odd pad goes at the end).

Explicit TF-named rules:

* Conv2D, DepthwiseConv2dNative, Conv3D and their backprop ops form closed
  bilinear families: each JVP applies the op to the tangents, each transpose is
  another member (Conv2D's transposes are Conv2DBackpropInput/Filter, as in a
  TF gradient graph).
* BiasAdd / BiasAddV1 are linear, transposed by BiasAddGrad.
* AvgPool <-> AvgPoolGrad are each other's transposes.
* MaxPool's JVP is MaxPoolGradGrad (the tangent at each window's first max),
  whose transpose is MaxPoolGrad (and vice versa).
* Batching folds the vmapped axis into N (reshape, op, reshape) where the op
  treats examples independently, and otherwise, for convolutions and BiasAdd(Grad),
  into the channels (one convolution group per example), so vmap and per-example
  gradients keep the TF names.

Semantics choices are written down in docs/semantics/nn.md.
"""

from __future__ import annotations

import functools
import math

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax
from jax.interpreters import ad

from tfprims.core import define_op, get_op

U = ad.is_undefined_primal

# --------------------------------------------------------------------------
# Layout and padding helpers
# --------------------------------------------------------------------------


def _shape(x):
  return tuple(x.aval.shape) if U(x) else tuple(jnp.shape(x))


def _channels_first(data_format: str) -> bool:
  return data_format.startswith("NC")


def _spatial_axes(data_format: str, rank: int) -> tuple[int, ...]:
  return tuple(range(2, rank)) if _channels_first(data_format) else tuple(range(1, rank - 1))


def _channel_axis(data_format: str, rank: int) -> int:
  return 1 if _channels_first(data_format) else rank - 1


def _same_pad(size: int, window: int, stride: int, dilation: int = 1) -> tuple[int, int]:
  """TF's SAME padding: out = ceil(size / stride), the odd pad at the end."""
  eff = (window - 1) * dilation + 1
  out = -(-size // stride)
  total = max((out - 1) * stride + eff - size, 0)
  return (total // 2, total - total // 2)


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
  return span // stride + 1 if span >= 0 else 0


# --------------------------------------------------------------------------
# Convolutions
# --------------------------------------------------------------------------

_FILTER_SPEC = {1: "WIO", 2: "HWIO", 3: "DHWIO"}


def _conv_setup(x_shape, w_shape, strides, padding, explicit_paddings, data_format, dilations):
  rank = len(x_shape)
  nd = rank - 2
  axes = _spatial_axes(data_format, rank)
  s = tuple(int(strides[a]) for a in axes)
  d = tuple(int(dilations[a]) for a in axes)
  pads = _pads(padding, explicit_paddings, [x_shape[a] for a in axes], w_shape[:nd], s, d, axes)
  dn = lax.conv_dimension_numbers(tuple(x_shape), tuple(w_shape),
                                  (data_format, _FILTER_SPEC[nd], data_format))
  return s, d, pads, dn


def _groups(x_shape, w_shape, data_format):
  in_depth = w_shape[len(x_shape) - 2]
  channels = x_shape[_channel_axis(data_format, len(x_shape))]
  if in_depth == 0 or channels % in_depth:
    raise ValueError(f"input depth {channels} is not a multiple of the filter's input depth "
                     f"{in_depth}")
  return channels // in_depth


def _conv_out_shape(x_shape, w_shape, *, strides, padding, explicit_paddings=(), data_format,
                    dilations, out_channels=None):
  s, d, pads, dn = _conv_setup(x_shape, w_shape, strides, padding, explicit_paddings,
                               data_format, dilations)
  nd = len(s)
  out = list(x_shape)
  for i, a in enumerate(_spatial_axes(data_format, len(x_shape))):
    out[a] = _out_size(x_shape[a], w_shape[i], s[i], d[i], pads[i])
  out[_channel_axis(data_format, len(x_shape))] = (
      w_shape[nd + 1] if out_channels is None else out_channels)
  return tuple(out)


def _conv(x, w, *, strides, padding, explicit_paddings=(), data_format, dilations, groups=None):
  s, d, pads, dn = _conv_setup(x.shape, w.shape, strides, padding, explicit_paddings,
                               data_format, dilations)
  if groups is None:
    groups = _groups(x.shape, w.shape, data_format)
  return lax.conv_general_dilated(x, w, s, pads, rhs_dilation=d, dimension_numbers=dn,
                                  feature_group_count=groups)


def _dilate(n, d):
  return 0 if n == 0 else 1 + d * (n - 1)


def _reshape_axis_out_of(src, size1, x):
  shape = list(x.shape)
  shape[src:src + 1] = [size1, shape[src] // size1]
  return lax.reshape(x, tuple(shape))


def _reshape_axis_into(src, dst, x):
  perm = [i for i in range(x.ndim) if i != src]
  perm.insert(dst, src)
  new_shape = list(np.delete(np.array(x.shape), src))
  new_shape[dst] *= x.shape[src]
  return lax.reshape(x, tuple(int(n) for n in new_shape), tuple(perm))


def _check_out(op_name, g_shape, expected):
  if tuple(g_shape) != tuple(expected):
    raise ValueError(f"{op_name}: out_backprop has shape {tuple(g_shape)} but the convolution "
                     f"of the given sizes produces {tuple(expected)}")


def _conv_input_grad(w, g, input_shape, *, strides, padding, explicit_paddings=(), data_format,
                     dilations, groups, op_name="Conv2DBackpropInput"):
  """Transpose of the convolution in its input (JAX's own formula, TF's padding)."""
  s, d, pads, dn = _conv_setup(input_shape, w.shape, strides, padding, explicit_paddings,
                               data_format, dilations)
  _check_out(op_name, g.shape, _conv_out_shape(
      input_shape, w.shape, strides=strides, padding=padding,
      explicit_paddings=explicit_paddings, data_format=data_format, dilations=dilations,
      out_channels=w.shape[-1]))
  lhs_spec, rhs_spec, out_spec = dn
  k = [w.shape[i] for i in rhs_spec[2:]]
  if groups > 1:
    w = _reshape_axis_out_of(rhs_spec[0], groups, w)
    w = _reshape_axis_into(rhs_spec[0], rhs_spec[1], w)
  trans_dn = lax.ConvDimensionNumbers(out_spec, (rhs_spec[1], rhs_spec[0]) + rhs_spec[2:],
                                      lhs_spec)
  in_sp = [input_shape[i] for i in lhs_spec[2:]]
  out_sp = [g.shape[i] for i in out_spec[2:]]
  t_pads = []
  for n, kk, st, dl, (lo, _), o in zip(in_sp, k, s, d, pads, out_sp):
    before = _dilate(kk, dl) - lo - 1
    after = n + _dilate(kk, dl) - 1 - _dilate(o, st) - before
    t_pads.append((before, after))
  rev = lax.rev(w, tuple(rhs_spec[2:]))
  return lax.conv_general_dilated(g, rev, (1,) * len(s), t_pads, lhs_dilation=s,
                                  rhs_dilation=d, dimension_numbers=trans_dn,
                                  feature_group_count=groups)


def _conv_filter_grad(x, g, filter_shape, *, strides, padding, explicit_paddings=(), data_format,
                      dilations, groups, op_name="Conv2DBackpropFilter"):
  """Transpose of the convolution in its filter (JAX's own formula, TF's padding)."""
  s, d, pads, dn = _conv_setup(x.shape, filter_shape, strides, padding, explicit_paddings,
                               data_format, dilations)
  _check_out(op_name, g.shape, _conv_out_shape(
      x.shape, filter_shape, strides=strides, padding=padding,
      explicit_paddings=explicit_paddings, data_format=data_format, dilations=dilations,
      out_channels=filter_shape[-1]))
  if g.size == 0 or x.size == 0:
    return jnp.zeros(filter_shape, g.dtype)
  lhs_spec, rhs_spec, out_spec = dn
  sw = lambda spec: (spec[1], spec[0]) + spec[2:]
  trans_dn = lax.ConvDimensionNumbers(sw(lhs_spec), sw(out_spec), sw(rhs_spec))
  in_sp = [x.shape[i] for i in lhs_spec[2:]]
  k = [filter_shape[i] for i in rhs_spec[2:]]
  out_sp = [g.shape[i] for i in out_spec[2:]]
  t_pads = [(lo, (_dilate(o, st) - n) + (_dilate(kk, dl) - lo - 1))
            for n, kk, st, dl, (lo, _), o in zip(in_sp, k, s, d, pads, out_sp)]
  return lax.conv_general_dilated(x, g, d, t_pads, lhs_dilation=(1,) * len(s), rhs_dilation=s,
                                  dimension_numbers=trans_dn, feature_group_count=1,
                                  batch_group_count=groups)


def _full_input_shape(input_sizes, in_channels, g_shape, data_format):
  """TF accepts input_sizes as the full shape or as the spatial sizes only."""
  sizes = tuple(int(v) for v in np.atleast_1d(np.asarray(input_sizes)))
  rank = len(g_shape)
  if len(sizes) == rank:
    return sizes
  if len(sizes) != rank - 2:
    raise ValueError(f"input_sizes must have {rank} or {rank - 2} elements, got {sizes}")
  shape = [0] * rank
  shape[0] = g_shape[0]
  shape[_channel_axis(data_format, rank)] = in_channels
  for a, n in zip(_spatial_axes(data_format, rank), sizes):
    shape[a] = n
  return tuple(shape)


# -- Conv2D / Conv3D -------------------------------------------------------


def conv2d(input, filter, *, strides, padding, explicit_paddings=(), data_format="NHWC",
           dilations=(1, 1, 1, 1)):
  """TF Conv2D: NHWC or NCHW input, HWIO filter; grouped when the input depth is a
  multiple of the filter's input depth."""
  return _conv(input, filter, strides=strides, padding=padding,
               explicit_paddings=explicit_paddings, data_format=data_format, dilations=dilations)


def conv2d_backprop_input(filter, out_backprop, *, input_sizes, strides, padding,
                          explicit_paddings=(), data_format="NHWC", dilations=(1, 1, 1, 1)):
  """TF Conv2DBackpropInput: the transpose of Conv2D in its input."""
  shape = _full_input_shape(input_sizes, filter.shape[-2], out_backprop.shape, data_format)
  groups = _groups(shape, filter.shape, data_format)
  return _conv_input_grad(filter, out_backprop, shape, strides=strides, padding=padding,
                          explicit_paddings=explicit_paddings, data_format=data_format,
                          dilations=dilations, groups=groups)


def conv2d_backprop_filter(input, out_backprop, *, filter_sizes, strides, padding,
                           explicit_paddings=(), data_format="NHWC", dilations=(1, 1, 1, 1)):
  """TF Conv2DBackpropFilter: the transpose of Conv2D in its filter."""
  filter_shape = tuple(int(v) for v in filter_sizes)
  groups = _groups(input.shape, filter_shape, data_format)
  return _conv_filter_grad(input, out_backprop, filter_shape, strides=strides, padding=padding,
                           explicit_paddings=explicit_paddings, data_format=data_format,
                           dilations=dilations, groups=groups)


def _depthwise_filter(filter):
  *k, c, m = filter.shape
  return lax.reshape(filter, tuple(k) + (1, c * m))


def depthwise_conv2d_native(input, filter, *, strides, padding, explicit_paddings=(),
                            data_format="NHWC", dilations=(1, 1, 1, 1)):
  """TF DepthwiseConv2dNative: filter [H, W, C, M], output channel c * M + m."""
  c = filter.shape[-2]
  return _conv(input, _depthwise_filter(filter), strides=strides, padding=padding,
               explicit_paddings=explicit_paddings, data_format=data_format,
               dilations=dilations, groups=c)


def depthwise_backprop_input(filter, out_backprop, *, input_sizes, strides, padding,
                             explicit_paddings=(), data_format="NHWC", dilations=(1, 1, 1, 1)):
  """TF DepthwiseConv2dNativeBackpropInput."""
  c = filter.shape[-2]
  shape = _full_input_shape(input_sizes, c, out_backprop.shape, data_format)
  return _conv_input_grad(_depthwise_filter(filter), out_backprop, shape, strides=strides,
                          padding=padding, explicit_paddings=explicit_paddings,
                          data_format=data_format, dilations=dilations, groups=c,
                          op_name="DepthwiseConv2dNativeBackpropInput")


def depthwise_backprop_filter(input, out_backprop, *, filter_sizes, strides, padding,
                              explicit_paddings=(), data_format="NHWC", dilations=(1, 1, 1, 1)):
  """TF DepthwiseConv2dNativeBackpropFilter."""
  *k, c, m = (int(v) for v in filter_sizes)
  out = _conv_filter_grad(input, out_backprop, tuple(k) + (1, c * m), strides=strides,
                          padding=padding, explicit_paddings=explicit_paddings,
                          data_format=data_format, dilations=dilations, groups=c,
                          op_name="DepthwiseConv2dNativeBackpropFilter")
  return lax.reshape(out, tuple(k) + (c, m))


def conv3d(input, filter, *, strides, padding, data_format="NDHWC", dilations=(1,) * 5):
  """TF Conv3D: NDHWC or NCDHW input, DHWIO filter."""
  return _conv(input, filter, strides=strides, padding=padding, data_format=data_format,
               dilations=dilations)


def conv3d_backprop_input(filter, out_backprop, *, input_sizes, strides, padding,
                          data_format="NDHWC", dilations=(1,) * 5):
  """TF Conv3DBackpropInputV2."""
  shape = _full_input_shape(input_sizes, filter.shape[-2], out_backprop.shape, data_format)
  return _conv_input_grad(filter, out_backprop, shape, strides=strides, padding=padding,
                          data_format=data_format, dilations=dilations,
                          groups=_groups(shape, filter.shape, data_format),
                          op_name="Conv3DBackpropInputV2")


def conv3d_backprop_filter(input, out_backprop, *, filter_sizes, strides, padding,
                           data_format="NDHWC", dilations=(1,) * 5):
  """TF Conv3DBackpropFilterV2."""
  filter_shape = tuple(int(v) for v in filter_sizes)
  return _conv_filter_grad(input, out_backprop, filter_shape, strides=strides, padding=padding,
                           data_format=data_format, dilations=dilations,
                           groups=_groups(input.shape, filter_shape, data_format),
                           op_name="Conv3DBackpropFilterV2")


# -- Rules shared by the three convolution families --------------------------


def _bilinear_conv_rules(fwd, bi, bf):
  """JVPs and transposes for a family (fwd(x, w), bi(w, dy), bf(x, dy)) by op name."""
  F = lambda: get_op(fwd)
  BI = lambda: get_op(bi)
  BF = lambda: get_op(bf)

  fwd_jvp = (lambda t, x, w, **p: F()(t, w, **p), lambda t, x, w, **p: F()(x, t, **p))

  def fwd_transpose(ct, x, w, **p):
    return [BI()(w, ct, input_sizes=_shape(x), **p) if U(x) else None,
            BF()(x, ct, filter_sizes=_shape(w), **p) if U(w) else None]

  bi_jvp = (lambda t, w, dy, **p: BI()(t, dy, **p), lambda t, w, dy, **p: BI()(w, t, **p))

  def bi_transpose(ct, w, dy, *, input_sizes, **p):
    return [BF()(ct, dy, filter_sizes=_shape(w), **p) if U(w) else None,
            F()(ct, w, **p) if U(dy) else None]

  bf_jvp = (lambda t, x, dy, **p: BF()(t, dy, **p), lambda t, x, dy, **p: BF()(x, t, **p))

  def bf_transpose(ct, x, dy, *, filter_sizes, **p):
    return [BI()(ct, dy, input_sizes=_shape(x), **p) if U(x) else None,
            F()(x, ct, **p) if U(dy) else None]

  return dict(fwd=(fwd_jvp, fwd_transpose), bi=(bi_jvp, bi_transpose), bf=(bf_jvp, bf_transpose))


def _vmap_impl(op_type, args, dims, params):
  op = get_op(op_type)
  out = jax.vmap(functools.partial(op.impl, **params), in_axes=tuple(dims), out_axes=0)(*args)
  return (list(out), [0] * len(out)) if op.multiple_results else (out, 0)


def _merge_batch(a, d):
  """Moves batch axis ``d`` to the front and merges it into N: (B*N, ...)."""
  a = jnp.moveaxis(a, d, 0) if d != 0 else a
  return a.reshape((a.shape[0] * a.shape[1],) + a.shape[2:])


def _split_batch(out, b):
  return out.reshape((b, out.shape[0] // b if b else 0) + out.shape[1:])


def _unbatched(a, d):
  return tuple(a.shape) if d is None else tuple(a.shape[:d]) + tuple(a.shape[d + 1:])


def _batch_into_axis(a, d, axis, size):
  """Moves batch axis ``d`` (broadcasting if None) just before ``axis`` of the unbatched
  array and merges the two: (..., B * n, ...), B-major."""
  if d is None:
    a, d = jnp.broadcast_to(a, (size,) + a.shape), 0
  a = jnp.moveaxis(a, d, axis)
  return a.reshape(a.shape[:axis] + (a.shape[axis] * a.shape[axis + 1],) + a.shape[axis + 2:])


def _split_axis(a, axis, size):
  return a.reshape(a.shape[:axis] + (size, a.shape[axis] // size) + a.shape[axis + 1:])


def _conv_batching(op_type, kind, groupable=True):
  """vmap for a convolution family member, keeping its TF name.

  fwd(x, w): x-only batched folds into N; otherwise the batch goes into the channels:
  w's batch into its output channels, x's (if batched) into the input channels, which
  makes a B-group convolution (one group per example). bi(w, dy) (dy-only batched folds
  into N) and bf(x, dy) likewise: per-example gradients are grouped backprops. Grouped or
  depthwise convolutions, and empty batches, use vmap(impl).
  """
  def rule(args, dims, **p):
    op = get_op(op_type)
    (a, b), (da, db) = args, dims
    fmt = p["data_format"]
    size = a.shape[da] if da is not None else b.shape[db]
    ua, ub = _unbatched(a, da), _unbatched(b, db)
    rank = len(ua) if kind != "bi" else len(ub)
    ch = _channel_axis(fmt, rank)
    nd = rank - 2
    if kind == "fwd" and db is None:
      return _split_batch(op(_merge_batch(a, da), b, **p), size), 0
    if kind == "bi" and da is None:
      unb_in = _full_input_shape(p["input_sizes"], ua[-2], ub, fmt)
      q = dict(p, input_sizes=(size * unb_in[0],) + tuple(unb_in[1:]))
      return _split_batch(op(a, _merge_batch(b, db), **q), size), 0
    if kind == "fwd":
      in_shape, w_shape = ua, ub
    elif kind == "bi":
      w_shape = ua
      in_shape = _full_input_shape(p["input_sizes"], ua[-2], ub, fmt)
    else:
      in_shape, w_shape = ua, tuple(int(v) for v in p["filter_sizes"])
    if not groupable or size == 0 or _groups(in_shape, w_shape, fmt) != 1:
      return _vmap_impl(op_type, args, dims, p)
    if kind == "fwd":   # x unbatched: an ordinary convolution with B * O output channels
      x = a if da is None else _batch_into_axis(a, da, ch, size)
      out = op(x, _batch_into_axis(b, db, nd + 1, size), **p)
      return _split_axis(out, ch, size), ch
    if kind == "bi":
      shape = list(in_shape)
      shape[ch] *= size
      out = op(_batch_into_axis(a, da, nd + 1, size), _batch_into_axis(b, db, ch, size),
               **dict(p, input_sizes=tuple(shape)))
      return _split_axis(out, ch, size), ch
    sizes = w_shape[:-1] + (size * w_shape[-1],)
    x = a if da is None else _batch_into_axis(a, da, ch, size)   # x unbatched: no groups
    out = op(x, _batch_into_axis(b, db, ch, size), **dict(p, filter_sizes=sizes))
    return _split_axis(out, nd + 1, size), nd + 1
  return rule


# -- Spec helpers (hypothesis is imported only when a spec is built) ---------

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


def _conv_calls(st, family, kind, *, nd=2, depthwise=False, dtypes=None, explicit=True,
                dilations=True, formats=None, equal_strides=False):
  """Calls of a convolution family's forward op (kind "fwd"), input backprop ("bi") or
  filter backprop ("bf"); ``family`` names the three TF ops. For float dtypes only
  calls whose whole family TF's CPU kernels run are kept (TF's gradients need them)."""
  from hypothesis import assume
  formats = formats or (("NHWC", "NCHW") if nd == 2 else ("NDHWC", "NCDHW"))
  dtypes = dtypes or ("float16", "bfloat16", "float32", "float64")
  max_side = 6 if nd == 2 else 4

  @st.composite
  def draw_call(draw):
    fmt = draw(st.sampled_from(formats))
    dtype = draw(st.sampled_from(
        [d for d in dtypes if d in _ONEDNN_DTYPES] if _channels_first(fmt) else list(dtypes)))
    n = draw(st.integers(1, 2))
    groups = 1 if depthwise or nd == 3 else draw(st.sampled_from((1, 1, 1, 2)))
    cin = draw(st.integers(1, 2))
    c = cin * groups
    o = draw(st.integers(1, 2)) * (1 if depthwise else groups)
    ks = [draw(st.integers(1, 3)) for _ in range(nd)]
    strides = [draw(st.integers(1, 3)) for _ in range(nd)]
    if equal_strides:
      strides = [strides[0]] * nd
    dils = [draw(st.sampled_from((1, 1, 2))) if dilations else 1 for _ in range(nd)]
    padding = draw(st.sampled_from(("SAME", "VALID", "EXPLICIT") if explicit
                                   else ("SAME", "VALID")))
    epads = [(draw(st.integers(0, 2)), draw(st.integers(0, 2))) if padding == "EXPLICIT"
             else (0, 0) for _ in range(nd)]
    sizes = []
    for k, d, (lo, hi) in zip(ks, dils, epads):
      need = 1 if padding == "SAME" else max(1, (k - 1) * d + 1 - lo - hi)
      sizes.append(draw(st.integers(need, max(need, max_side))))
    x_shape = _layout_shape(fmt, n, c, sizes)
    w_shape = tuple(ks) + ((c, o) if depthwise else (cin, o))
    attrs = dict(strides=_layout_attr(fmt, strides), padding=padding, data_format=fmt,
                 dilations=_layout_attr(fmt, dils))
    if explicit:
      flat = _layout_attr(fmt, epads, fill=(0, 0))
      attrs["explicit_paddings"] = ([v for pair in flat for v in pair]
                                    if padding == "EXPLICIT" else [])
    y_shape = _conv_out_shape(x_shape, w_shape, out_channels=c * o if depthwise else o, **attrs)
    x, w, dy = (draw(_values(st, dtype, s)) for s in (x_shape, w_shape, y_shape))
    calls = dict(
        fwd=dict(input=x, filter=w, **attrs),
        bi=dict(input_sizes=np.array(x_shape, np.int32), filter=w, out_backprop=dy, **attrs),
        bf=dict(input=x, filter_sizes=np.array(w_shape, np.int32), out_backprop=dy, **attrs))
    needed = ("fwd", "bi", "bf") if dtype in st.FLOATS else (kind,)
    assume(all(_tf_accepts(family[k], calls[k]) for k in needed))
    return calls[kind]

  return draw_call()


_CONV_TOL = dict(rtol={"float16": 2e-2, "bfloat16": 5e-2, "float32": 1e-4, "float64": 1e-6},
                 atol={"float16": 5e-2, "bfloat16": 2e-1, "float32": 1e-4, "float64": 1e-6})

_CONV_NOTE = ("TF's CPU kernels take NCHW, grouped filters and most dilation/EXPLICIT "
              "combinations only for float32/bfloat16 (oneDNN); the spec draws what TF's CPU "
              "kernel runs. Empty outputs are not drawn (TF's oneDNN kernel returns wrong shapes).")


# -- Registrations -----------------------------------------------------------

_CONV2D_ATTRS = ("strides", "padding", "explicit_paddings", "data_format", "dilations")
_CONV3D_ATTRS = ("strides", "padding", "data_format", "dilations")

_C2 = dict(fwd="Conv2D", bi="Conv2DBackpropInput", bf="Conv2DBackpropFilter")
_DW = dict(fwd="DepthwiseConv2dNative", bi="DepthwiseConv2dNativeBackpropInput",
           bf="DepthwiseConv2dNativeBackpropFilter")
_C3 = dict(fwd="Conv3D", bi="Conv3DBackpropInputV2", bf="Conv3DBackpropFilterV2")

_c2 = _bilinear_conv_rules(**_C2)


def _conv_shape(input, filter, **params):
  _groups(input.shape, filter.shape, params["data_format"])
  return jax.ShapeDtypeStruct(_conv_out_shape(input.shape, filter.shape, **params),
                              input.dtype)


def _depthwise_shape(input, filter, **params):
  return jax.ShapeDtypeStruct(
      _conv_out_shape(input.shape, filter.shape, out_channels=filter.shape[-2] * filter.shape[-1],
                      **params), input.dtype)

Conv2D = define_op(
    "Conv2D", conv2d, family="nn", attrs=_CONV2D_ATTRS, shape_rule=_conv_shape,
    jvp=_c2["fwd"][0], transpose=_c2["fwd"][1], batching=_conv_batching("Conv2D", "fwd"),
    spec=lambda st: st.Spec(
        _conv_calls(st, _C2, "fwd",
                    dtypes=("float16", "bfloat16", "float32", "float64", "int32")),
        note=_CONV_NOTE, **_CONV_TOL))

Conv2DBackpropInput = define_op(
    "Conv2DBackpropInput", conv2d_backprop_input, family="nn", static=("input_sizes",),
    attrs=_CONV2D_ATTRS, jvp=_c2["bi"][0], transpose=_c2["bi"][1],
    batching=_conv_batching("Conv2DBackpropInput", "bi"),
    spec=lambda st: st.Spec(
        _conv_calls(st, _C2, "bi",
                    dtypes=("float16", "bfloat16", "float32", "float64", "int32")),
        note=_CONV_NOTE, **_CONV_TOL))

Conv2DBackpropFilter = define_op(
    "Conv2DBackpropFilter", conv2d_backprop_filter, family="nn", static=("filter_sizes",),
    attrs=_CONV2D_ATTRS, jvp=_c2["bf"][0], transpose=_c2["bf"][1],
    batching=_conv_batching("Conv2DBackpropFilter", "bf"),
    spec=lambda st: st.Spec(_conv_calls(st, _C2, "bf"),
                            note=_CONV_NOTE, **_CONV_TOL))

_dw = _bilinear_conv_rules(**_DW)
_DW_SPEC = dict(depthwise=True, dilations=False, dtypes=("float16", "float32", "float64"),
                formats=("NHWC",), equal_strides=True)
_DW_NOTE = (_CONV_NOTE + " Depthwise: TF's CPU backprop kernels ignore dilations, the "
            "bfloat16 filter backprop and NCHW kernels with unequal strides sometimes return "
            "uninitialised memory, so the spec draws NHWC, equal strides, no dilation, no "
            "bfloat16 (dilated and NCHW forward values are checked in tests/test_ops_nn.py).")

DepthwiseConv2dNative = define_op(
    "DepthwiseConv2dNative", depthwise_conv2d_native, family="nn", attrs=_CONV2D_ATTRS,
    shape_rule=_depthwise_shape, jvp=_dw["fwd"][0], transpose=_dw["fwd"][1],
    batching=_conv_batching("DepthwiseConv2dNative", "fwd", groupable=False),
    spec=lambda st: st.Spec(_conv_calls(st, _DW, "fwd", **_DW_SPEC),
                            note=_DW_NOTE, **_CONV_TOL))

DepthwiseConv2dNativeBackpropInput = define_op(
    "DepthwiseConv2dNativeBackpropInput", depthwise_backprop_input, family="nn",
    static=("input_sizes",), attrs=_CONV2D_ATTRS, jvp=_dw["bi"][0], transpose=_dw["bi"][1],
    batching=_conv_batching("DepthwiseConv2dNativeBackpropInput", "bi", groupable=False),
    spec=lambda st: st.Spec(
        _conv_calls(st, _DW, "bi", **_DW_SPEC),
        note=_DW_NOTE, **_CONV_TOL))

DepthwiseConv2dNativeBackpropFilter = define_op(
    "DepthwiseConv2dNativeBackpropFilter", depthwise_backprop_filter, family="nn",
    static=("filter_sizes",), attrs=_CONV2D_ATTRS, jvp=_dw["bf"][0], transpose=_dw["bf"][1],
    batching=_conv_batching("DepthwiseConv2dNativeBackpropFilter", "bf", groupable=False),
    spec=lambda st: st.Spec(
        _conv_calls(st, _DW, "bf", **_DW_SPEC),
        note=_DW_NOTE, **_CONV_TOL))

_c3 = _bilinear_conv_rules(**_C3)
# TF's gradients of the Conv3D backprops are Conv3D calls, which return uninitialised
# memory for bfloat16 and some unequal strides (see Conv3D): derivatives are checked
# against central differences of the backprop op itself, whose values are right.
_CONV3D_BACKPROP_NOTE = _CONV_NOTE + (" Derivatives vs central differences: TF's own "
                                      "gradient runs Conv3D, wrong on TF's CPU for bfloat16 "
                                      "and some unequal strides.")

Conv3D = define_op(
    "Conv3D", conv3d, family="nn", attrs=_CONV3D_ATTRS,
    jvp=_c3["fwd"][0], transpose=_c3["fwd"][1], batching=_conv_batching("Conv3D", "fwd"),
    spec=lambda st: st.Spec(
        _conv_calls(st, _C3, "fwd", nd=3, explicit=False, equal_strides=True,
                    dtypes=("float16", "float32", "float64")),
        note=_CONV_NOTE + " Conv3D: TF's CPU kernels return wrong values (uninitialised "
             "memory) for bfloat16 and for some unequal strides (docs/semantics/nn.md), so "
             "the spec draws neither.", **_CONV_TOL))

Conv3DBackpropInputV2 = define_op(
    "Conv3DBackpropInputV2", conv3d_backprop_input, family="nn", static=("input_sizes",),
    attrs=_CONV3D_ATTRS, jvp=_c3["bi"][0], transpose=_c3["bi"][1],
    batching=_conv_batching("Conv3DBackpropInputV2", "bi"),
    spec=lambda st: st.Spec(_conv_calls(st, _C3, "bi", nd=3, explicit=False),
                            grad_oracle="fd", note=_CONV3D_BACKPROP_NOTE, **_CONV_TOL))

Conv3DBackpropFilterV2 = define_op(
    "Conv3DBackpropFilterV2", conv3d_backprop_filter, family="nn", static=("filter_sizes",),
    attrs=_CONV3D_ATTRS, jvp=_c3["bf"][0], transpose=_c3["bf"][1],
    batching=_conv_batching("Conv3DBackpropFilterV2", "bf"),
    spec=lambda st: st.Spec(_conv_calls(st, _C3, "bf", nd=3, explicit=False),
                            grad_oracle="fd", note=_CONV3D_BACKPROP_NOTE, **_CONV_TOL))


# --------------------------------------------------------------------------
# BiasAdd
# --------------------------------------------------------------------------


def bias_add(value, bias, *, data_format="NHWC"):
  """TF BiasAdd: ``bias`` added along the channel axis (last for NHWC, 1 for NCHW)."""
  ch = _channel_axis(data_format, value.ndim)
  if ch == value.ndim - 1:
    return value + bias
  return value + lax.broadcast_in_dim(bias, value.shape, (ch,))


def bias_add_grad(out_backprop, *, data_format="NHWC"):
  """TF BiasAddGrad: the sum over every axis but the channel axis."""
  ch = _channel_axis(data_format, out_backprop.ndim)
  axes = tuple(a for a in range(out_backprop.ndim) if a != ch)
  if out_backprop.dtype in (jnp.float16, jnp.bfloat16):   # TF accumulates half types in float32
    return jnp.sum(out_backprop.astype(jnp.float32), axis=axes).astype(out_backprop.dtype)
  return jnp.sum(out_backprop, axis=axes, dtype=out_backprop.dtype)


def _bias_add_transpose(ct, value, bias, *, data_format="NHWC"):
  return [ct if U(value) else None,
          BiasAddGrad(ct, data_format=data_format) if U(bias) else None]


def _bias_add_grad_transpose(ct, out_backprop, *, data_format="NHWC"):
  shape = _shape(out_backprop)
  return [lax.broadcast_in_dim(ct, shape, (_channel_axis(data_format, len(shape)),))]


def _bias_add_batching(op_type):
  """value-only batched: NHWC re-binds with the batch axis in front, NCHW folds it into
  N. A batched bias goes into the channels: BiasAdd over B * C channels."""
  def rule(args, dims, **p):
    (value, bias), (bv, bb) = args, dims
    op = get_op(op_type)
    fmt = p.get("data_format", "NHWC")
    if bb is None:
      if _channels_first(fmt):
        return _split_batch(op(_merge_batch(value, bv), bias, **p), value.shape[bv]), 0
      return op(jnp.moveaxis(value, bv, 0), bias, **p), 0
    size = bias.shape[bb]
    ch = _channel_axis(fmt, len(_unbatched(value, bv)))
    out = op(_batch_into_axis(value, bv, ch, size), _batch_into_axis(bias, bb, 0, size), **p)
    return _split_axis(out, ch, size), ch
  return rule


def _bias_add_grad_batching(args, dims, *, data_format="NHWC"):
  """The batch goes into the channels: BiasAddGrad over B * C channels."""
  (g,), (d,) = args, dims
  size = g.shape[d]
  ch = _channel_axis(data_format, g.ndim - 1)
  out = BiasAddGrad(_batch_into_axis(g, d, ch, size), data_format=data_format)
  return out.reshape(size, -1) if size else jnp.zeros((0, g.shape[ch + (d <= ch)]), g.dtype), 0


def _bias_calls(st, with_format=True, grad=False):
  @st.composite
  def draw_call(draw):
    fmt = draw(st.sampled_from(("NHWC", "NCHW"))) if with_format else "NHWC"
    dtype = draw(st.dtypes(st.NUMERIC + st.COMPLEX))
    shape = draw(st.shapes(min_rank=2, max_rank=5, min_side=0, max_side=3))
    c = shape[_channel_axis(fmt, len(shape))]
    if grad:
      out = dict(out_backprop=draw(st.arrays(dtype, shape)))
    else:
      out = dict(value=draw(st.arrays(dtype, shape)), bias=draw(st.arrays(dtype, (c,))))
    if with_format:
      out["data_format"] = fmt
    return out
  return draw_call()


def _bias_add_shape(value, bias, **params):
  return jax.ShapeDtypeStruct(value.shape, value.dtype)


BiasAdd = define_op(
    "BiasAdd", bias_add, family="nn", attrs=("data_format",), linear=True,
    shape_rule=_bias_add_shape,
    transpose=_bias_add_transpose, batching=_bias_add_batching("BiasAdd"),
    spec=lambda st: st.Spec(_bias_calls(st)))

BiasAddV1 = define_op(
    "BiasAddV1", bias_add, family="nn", linear=True,
    transpose=_bias_add_transpose, batching=_bias_add_batching("BiasAddV1"),
    spec=lambda st: st.Spec(_bias_calls(st, with_format=False)))

BiasAddGrad = define_op(
    "BiasAddGrad", bias_add_grad, family="nn", attrs=("data_format",), linear=True,
    transpose=_bias_add_grad_transpose, batching=_bias_add_grad_batching,
    spec=lambda st: st.Spec(_bias_calls(st, grad=True),
                            rtol={"float16": 1e-2, "bfloat16": 5e-2},
                            note="float16/bfloat16 sums: TF accumulates in float32."))


# --------------------------------------------------------------------------
# Pooling
# --------------------------------------------------------------------------


def _lowest(dtype):
  """The max-pool initial value of TF's CPU kernels: the lowest finite value
  (Eigen's NumTraits<bfloat16>::lowest() is -inf)."""
  dtype = np.dtype(dtype)
  if dtype == jnp.bfloat16:
    return -np.inf
  if dtype.kind == "f":
    return np.finfo(dtype).min
  return np.iinfo(dtype).min


def _pool_pads(shape, ksize, strides, padding, explicit_paddings=()):
  rank = len(shape)
  return _pads(padding, explicit_paddings, shape, ksize, strides, (1,) * rank, range(rank))


def _check_pool_format(data_format):
  if data_format not in ("NHWC", "NCHW"):
    raise NotImplementedError(f"pooling with data_format={data_format!r} is not supported")


def max_pool(input, *, ksize, strides, padding, explicit_paddings=(), data_format="NHWC",
             floor=None):
  """TF MaxPool. Like TF's CPU kernels, NaNs never win and results are clamped
  below at the dtype's lowest finite value (a window of NaN/-inf gives it);
  ``floor`` overrides that value."""
  _check_pool_format(data_format)
  pads = _pool_pads(input.shape, ksize, strides, padding, explicit_paddings)
  x = input
  if jnp.issubdtype(x.dtype, jnp.floating):
    low = np.array(_lowest(x.dtype) if floor is None else floor, x.dtype)
    x = jnp.where(x >= low, x, low)
    init = np.array(-np.inf, x.dtype)
  else:
    init = np.array(np.iinfo(x.dtype).min, x.dtype)
  return lax.reduce_window(x, init, lax.max, tuple(ksize), tuple(strides), pads)


def max_pool_v2(input, *, ksize, strides, padding, data_format="NHWC"):
  """TF MaxPoolV2: MaxPool with ksize/strides as inputs. Its CPU kernel clamps
  bfloat16 at bfloat16's lowest finite value (MaxPool's keeps -inf there)."""
  floor = float(jnp.finfo(jnp.bfloat16).min) if input.dtype == jnp.bfloat16 else None
  return max_pool(input, ksize=ksize, strides=strides, padding=padding,
                  data_format=data_format, floor=floor)


def max_pool_grad(orig_input, orig_output, grad, *, ksize, strides, padding,
                  explicit_paddings=(), data_format="NHWC"):
  """TF MaxPoolGrad: ``grad`` routed to the first max of each window (row-major).

  This is JAX's own max-pool VJP (select-and-scatter, the HLO hand-written JAX code
  gets); XLA's CPU select-and-scatter visits each window in row-major order, which picks
  TF's element (tested with ties)."""
  del orig_output  # recomputed from orig_input, as TF's CPU kernel does
  _, vjp = jax.vjp(functools.partial(max_pool, ksize=ksize, strides=strides, padding=padding,
                                     explicit_paddings=explicit_paddings,
                                     data_format=data_format), orig_input)
  return vjp(grad)[0]


def _first_max_index(x, ksize, strides, pads):
  """Flat index into ``x`` of each window's first maximum in row-major order (TF's
  rule), with the same NaN/-inf clamping as max_pool. Ties break on the smaller index
  inside the reducer, so the result does not depend on XLA's reduction order (JAX's own
  max-pool JVP, select-and-gather, does)."""
  if jnp.issubdtype(x.dtype, jnp.floating):
    low = np.array(_lowest(x.dtype), x.dtype)
    x = jnp.where(x >= low, x, low)
    init = np.array(-np.inf, x.dtype)
  else:
    init = np.array(np.iinfo(x.dtype).min, x.dtype)
  index = lax.reshape(lax.iota(np.int32, x.size), x.shape)

  def first_max(a, b):
    (av, ai), (bv, bi) = a, b
    take_a = (av > bv) | ((av == bv) & (ai < bi))
    return lax.select(take_a, av, bv), lax.select(take_a, ai, bi)

  _, out = lax.reduce_window((x, index), (init, np.array(x.size, np.int32)), first_max,
                             tuple(ksize), tuple(strides), pads)
  return out


def max_pool_grad_grad(orig_input, orig_output, grad, *, ksize, strides, padding,
                       explicit_paddings=(), data_format="NHWC"):
  """TF MaxPoolGradGrad: ``grad`` (input-shaped) read at each window's first max.
  ``explicit_paddings`` is not a TF attr of this op; MaxPool's JVP passes it."""
  del orig_output  # recomputed from orig_input
  _check_pool_format(data_format)
  pads = _pool_pads(orig_input.shape, ksize, strides, padding, explicit_paddings)
  index = _first_max_index(orig_input, ksize, strides, pads)
  flat = jnp.concatenate([grad.reshape(-1), jnp.zeros((1,), grad.dtype)])
  return jnp.take(flat, index, mode="clip")


def _grad_params(p):
  """Params for tf.MaxPoolGrad (which always has explicit_paddings)."""
  return dict(p, explicit_paddings=p.get("explicit_paddings", ()))


def _gradgrad_params(p):
  """Params for tf.MaxPoolGradGrad: TF's op has no explicit_paddings attr; we add it
  only for EXPLICIT padding."""
  q = dict(p)
  pads = q.pop("explicit_paddings", ())
  if q.get("padding") == "EXPLICIT":
    q["explicit_paddings"] = pads
  return q


def _max_pool_jvp(op_type):
  """Tangent = tf.MaxPoolGradGrad(x, y, t): t read at each window's first max."""
  def rule(primals, tangents, **p):
    (x,), (t,) = primals, tangents
    y = get_op(op_type)(x, **p)
    return y, MaxPoolGradGrad(x, y, ad.instantiate_zeros(t), **_gradgrad_params(p))
  return rule


def _max_pool_grad_transpose(ct, x, y, g, **p):
  return [None, None, MaxPoolGradGrad(x, y, ct, **_gradgrad_params(p))]


def _max_pool_grad_grad_transpose(ct, x, y, g, **p):
  return [None, None, MaxPoolGrad(x, y, ct, **_grad_params(p))]


def _avg_pool_counts(shape, ksize, strides, pads, out_shape):
  """How many real (unpadded) elements each output window averages."""
  counts = np.ones((1,) * len(shape), np.float64)
  for a, (n, k, s, (lo, _), o) in enumerate(zip(shape, ksize, strides, pads, out_shape)):
    start = np.arange(o) * s - lo
    c = (np.minimum(start + k, n) - np.maximum(start, 0)).astype(np.float64)
    counts = counts * c.reshape((1,) * a + (o,) + (1,) * (len(shape) - a - 1))
  return counts


def avg_pool(value, *, ksize, strides, padding, data_format="NHWC"):
  """TF AvgPool: SAME windows average only their real elements."""
  _check_pool_format(data_format)
  pads = _pool_pads(value.shape, ksize, strides, padding)
  total = lax.reduce_window(value, np.array(0, value.dtype), lax.add, tuple(ksize),
                            tuple(strides), pads)
  if all(p == (0, 0) for p in pads):
    return total / math.prod(ksize)
  counts = _avg_pool_counts(value.shape, ksize, strides, pads, total.shape)
  return total / counts.astype(value.dtype)


def avg_pool_grad(grad, *, orig_input_shape, ksize, strides, padding, data_format="NHWC"):
  """TF AvgPoolGrad: the transpose of AvgPool."""
  shape = tuple(int(v) for v in orig_input_shape)
  f = functools.partial(avg_pool, ksize=ksize, strides=strides, padding=padding,
                        data_format=data_format)
  return jax.linear_transpose(f, jax.ShapeDtypeStruct(shape, grad.dtype))(grad)[0]


def _fold_batching(op_type, fix_params=None):
  """vmap by folding the batch axis into N (every operand has N first); unbatched
  operands are broadcast."""
  def rule(args, dims, **p):
    b = next(a.shape[d] for a, d in zip(args, dims) if d is not None)
    flat = []
    for a, d in zip(args, dims):
      if d is None:
        a, d = jnp.broadcast_to(a, (b,) + a.shape), 0
      flat.append(_merge_batch(a, d))
    if fix_params is not None:
      p = fix_params(p, b)
    out = get_op(op_type)(*flat, **p)
    if isinstance(out, (list, tuple)):
      return [_split_batch(o, b) for o in out], [0] * len(out)
    return _split_batch(out, b), 0
  return rule


def _pool_calls(st, op_type, dtypes, *, explicit=False, v2=False, special=True, ties=False):
  """Calls of a pooling op or its grad ops. For float dtypes only calls whose TF
  gradient op also runs on CPU are kept (it is the gradient oracle)."""
  from hypothesis import assume
  from hypothesis.extra import numpy as hnp

  avg = op_type.startswith("AvgPool")
  fwd_name = "AvgPool" if avg else ("MaxPoolV2" if v2 else "MaxPool")
  grad_name, gradgrad_name = (("MaxPoolGradV2", "MaxPoolGradGradV2") if v2
                              else ("MaxPoolGrad", "MaxPoolGradGrad"))
  needs = {"MaxPool": (fwd_name, grad_name), "MaxPoolV2": (fwd_name, grad_name),
           "MaxPoolGrad": (grad_name, gradgrad_name), "MaxPoolGradGrad": (gradgrad_name, grad_name),
           "MaxPoolGradV2": (grad_name, gradgrad_name),
           "MaxPoolGradGradV2": (gradgrad_name, grad_name),
           "AvgPool": ("AvgPool", "AvgPoolGrad"), "AvgPoolGrad": ("AvgPoolGrad", "AvgPool")}

  @st.composite
  def draw_call(draw):
    fmt = draw(st.sampled_from(("NHWC", "NCHW")))
    dtype = draw(st.sampled_from(
        [d for d in dtypes if d in _ONEDNN_DTYPES] if fmt == "NCHW" else list(dtypes)))
    n, c = draw(st.integers(1, 2)), draw(st.integers(1, 3))
    ks = [draw(st.integers(1, 3)) for _ in range(2)]
    ss = [draw(st.integers(1, 3)) for _ in range(2)]
    padding = draw(st.sampled_from(("SAME", "VALID", "EXPLICIT") if explicit
                                   else ("SAME", "VALID")))
    epads = [(draw(st.integers(0, k - 1)), draw(st.integers(0, k - 1)))
             if padding == "EXPLICIT" else (0, 0) for k in ks]
    sizes = [draw(st.integers(max(1, k - lo - hi), 5)) if padding != "SAME"
             else draw(st.integers(1, 5)) for k, (lo, hi) in zip(ks, epads)]
    shape = _layout_shape(fmt, n, c, sizes)
    attrs = dict(padding=padding, data_format=fmt)
    ksize, strides = _layout_attr(fmt, ks), _layout_attr(fmt, ss)
    if v2:
      attrs.update(ksize=np.array(ksize, np.int32), strides=np.array(strides, np.int32))
    else:
      attrs.update(ksize=ksize, strides=strides)
    gg_attrs = dict(attrs)
    if explicit:
      flat = _layout_attr(fmt, epads, fill=(0, 0))
      attrs["explicit_paddings"] = ([v for pair in flat for v in pair]
                                    if padding == "EXPLICIT" else [])
    if ties and draw(st.booleans()):
      x = draw(hnp.arrays(st.np_dtype(dtype), shape,
                          elements=st.sampled_from([0.0, 1.0, 2.0]))).astype(st.np_dtype(dtype))
    else:
      x = draw(_values(st, dtype, shape, special=special))
    fwd = dict(value=x, **attrs) if avg else dict(input=x, **attrs)
    assume(_tf_accepts(fwd_name, fwd))
    y = _tf_call(fwd_name, fwd).numpy()
    gy, gx = draw(_values(st, dtype, y.shape)), draw(_values(st, dtype, shape))
    calls = {fwd_name: fwd,
             "AvgPoolGrad": dict(orig_input_shape=np.array(shape, np.int32), grad=gy, **attrs),
             grad_name: dict(orig_input=x, orig_output=y, grad=gy, **attrs),
             gradgrad_name: dict(orig_input=x, orig_output=y, grad=gx, **gg_attrs)}
    needed = needs[op_type] if dtype in st.FLOATS else needs[op_type][:1]
    assume(all(_tf_accepts(name, calls[name]) for name in needed))
    return calls[needed[0]]

  return draw_call()


_POOL_ATTRS = ("ksize", "strides", "padding", "explicit_paddings", "data_format")
_HALF_TOL = dict(rtol={"float16": 1e-2, "bfloat16": 2e-2}, atol={"float16": 1e-2, "bfloat16": 2e-2})

def _pool_shape(input, *, ksize, strides, padding, explicit_paddings=(), data_format="NHWC"):
  _check_pool_format(data_format)
  pads = _pool_pads(input.shape, ksize, strides, padding, explicit_paddings)
  return jax.ShapeDtypeStruct(
      tuple(_out_size(n, k, s, 1, p) for n, k, s, p in zip(input.shape, ksize, strides, pads)),
      input.dtype)


MaxPool = define_op(
    "MaxPool", max_pool, family="nn", attrs=_POOL_ATTRS, shape_rule=_pool_shape,
    jvp=_max_pool_jvp("MaxPool"),
    batching=_fold_batching("MaxPool"),
    spec=lambda st: st.Spec(
        _pool_calls(st, "MaxPool", ("float16", "bfloat16", "float32", "float64") + st.SIGNED
                    + ("uint8", "uint16"), explicit=True, ties=True),

        note="NaN never wins and results are clamped below at the lowest finite value, as "
             "TF's CPU kernels do; gradients go to the first max of each window."))

MaxPoolV2 = define_op(
    "MaxPoolV2", max_pool_v2, family="nn", static=("ksize", "strides"),
    attrs=("padding", "data_format"), jvp=_max_pool_jvp("MaxPoolV2"),
    batching=_fold_batching("MaxPoolV2"),
    spec=lambda st: st.Spec(
        _pool_calls(st, "MaxPoolV2", ("float16", "bfloat16", "float32", "float64") + st.SIGNED
                    + ("uint8", "uint16"), v2=True, ties=True)))

MaxPoolGrad = define_op(
    "MaxPoolGrad", max_pool_grad, family="nn", attrs=_POOL_ATTRS,
    jvp=(None, None, lambda t, x, y, g, **p: MaxPoolGrad(x, y, t, **p)),
    transpose=_max_pool_grad_transpose, batching=_fold_batching("MaxPoolGrad"),
    spec=lambda st: st.Spec(
        _pool_calls(st, "MaxPoolGrad", ("float16", "bfloat16", "float32", "float64"),
                    special=False, ties=True),
        diff_args=("grad",), **_HALF_TOL,
        note="float dtypes only (TF also has integer kernels)."))

MaxPoolGradGrad = define_op(
    "MaxPoolGradGrad", max_pool_grad_grad, family="nn",
    attrs=("ksize", "strides", "padding", "data_format"),
    jvp=(None, None, lambda t, x, y, g, **p: MaxPoolGradGrad(x, y, t, **p)),
    transpose=_max_pool_grad_grad_transpose, batching=_fold_batching("MaxPoolGradGrad"),
    spec=lambda st: st.Spec(
        _pool_calls(st, "MaxPoolGradGrad", ("float16", "bfloat16", "float32", "float64"),
                    special=False, ties=True),
        diff_args=("grad",), vmap_variation="none",
        note="float dtypes only (TF also has integer kernels). orig_output is ignored "
             "(recomputed); TF's kernel matches it against orig_input, so the vmap check "
             "keeps batch members consistent (copies)."))

MaxPoolGradV2 = define_op(
    "MaxPoolGradV2", max_pool_grad, family="nn", static=("ksize", "strides"),
    attrs=("padding", "data_format"),
    jvp=(None, None, lambda t, x, y, g, **p: MaxPoolGradV2(x, y, t, **p)),
    transpose=lambda ct, x, y, g, **p: [None, None, MaxPoolGradGradV2(x, y, ct, **p)],
    batching=_fold_batching("MaxPoolGradV2"),
    spec=lambda st: st.Spec(
        _pool_calls(st, "MaxPoolGradV2", ("float16", "bfloat16", "float32", "float64"),
                    v2=True, special=False, ties=True),
        diff_args=("grad",), **_HALF_TOL, note="float dtypes only."))

MaxPoolGradGradV2 = define_op(
    "MaxPoolGradGradV2", max_pool_grad_grad, family="nn", static=("ksize", "strides"),
    attrs=("padding", "data_format"),
    jvp=(None, None, lambda t, x, y, g, **p: MaxPoolGradGradV2(x, y, t, **p)),
    transpose=lambda ct, x, y, g, **p: [None, None, MaxPoolGradV2(x, y, ct, **p)],
    batching=_fold_batching("MaxPoolGradGradV2"),
    spec=lambda st: st.Spec(
        _pool_calls(st, "MaxPoolGradGradV2", ("float16", "bfloat16", "float32", "float64"),
                    v2=True, special=False, ties=True),
        diff_args=("grad",), vmap_variation="none", note="float dtypes only."))

AvgPool = define_op(
    "AvgPool", avg_pool, family="nn", attrs=("ksize", "strides", "padding", "data_format"),
    shape_rule=_pool_shape, linear=True,
    transpose=lambda ct, x, **p: [AvgPoolGrad(ct, orig_input_shape=_shape(x), **p)],
    batching=_fold_batching("AvgPool"),
    spec=lambda st: st.Spec(
        _pool_calls(st, "AvgPool", ("float16", "bfloat16", "float32", "float64"),
                    special=False), **_HALF_TOL))


def _fix_orig_shape(p, b):
  shape = tuple(p["orig_input_shape"])
  return dict(p, orig_input_shape=(b * shape[0],) + shape[1:])


AvgPoolGrad = define_op(
    "AvgPoolGrad", avg_pool_grad, family="nn", static=("orig_input_shape",),
    attrs=("ksize", "strides", "padding", "data_format"), linear=True,
    transpose=lambda ct, g, *, orig_input_shape, **p: [AvgPool(ct, **p)],
    batching=_fold_batching("AvgPoolGrad", _fix_orig_shape),
    spec=lambda st: st.Spec(
        _pool_calls(st, "AvgPoolGrad", ("float16", "bfloat16", "float32", "float64"),
                    ), **_HALF_TOL))


# --------------------------------------------------------------------------
# Batch normalization
# --------------------------------------------------------------------------


def _fused_batch_norm(x, scale, offset, mean, variance, *, epsilon=1e-4,
                      exponential_avg_factor=1.0, data_format="NHWC", is_training=True,
                      version=3):
  """TF FusedBatchNorm{,V2,V3}: y plus (batch_mean, batch_variance, reserve_space_1,
  reserve_space_2[, reserve_space_3]).

  Inference: y = (x - mean) * rsqrt(variance + epsilon) * scale + offset, and the side
  outputs echo mean/variance. Training: batch statistics (biased variance for y);
  batch_variance is Bessel-corrected (n / max(n - 1, 1)) and both running outputs are
  mixed with the inputs as (1 - f) * old + f * new unless f == 1; reserve spaces hold the
  batch mean and biased variance. reserve_space_3 is empty. Computes in U (float32).
  """
  rank = x.ndim
  ch = _channel_axis(data_format, rank)
  axes = tuple(a for a in range(rank) if a != ch)
  u = scale.dtype
  eps = np.array(np.float32(epsilon), u)
  bc = lambda v: lax.broadcast_in_dim(v, x.shape, (ch,))
  xf = x.astype(u)
  c = x.shape[ch]
  n = x.size // c if c else 0
  if is_training:
    batch_mean = jnp.mean(xf, axis=axes)
    centered = xf - bc(batch_mean)
    batch_var = jnp.mean(jnp.square(centered), axis=axes)
    y = centered * bc(lax.rsqrt(batch_var + eps) * scale) + bc(offset)
    corrected = batch_var * np.array(n / max(n - 1, 1), u)
    f = float(exponential_avg_factor)
    if f == 1.0:
      out_mean, out_var = batch_mean, corrected
    else:
      keep, new = np.array(1.0 - f, u), np.array(f, u)
      out_mean = keep * mean + new * batch_mean
      out_var = keep * variance + new * corrected
    rs1, rs2 = batch_mean, batch_var
  else:
    y = (xf - bc(mean)) * bc(lax.rsqrt(variance + eps) * scale) + bc(offset)
    out_mean, out_var, rs1, rs2 = mean, variance, mean, variance
  if x.size == 0:   # what TF's CPU kernel returns for an empty batch, in both modes
    out_mean = out_var = jnp.full((c,), np.nan, u)
    rs1 = rs2 = jnp.zeros((c,), u)
  outs = [y.astype(x.dtype), out_mean, out_var, rs1, rs2]
  if version == 3:
    outs.append(jnp.zeros((0,), u))
  return tuple(outs)


def _fbn_calls(st, version):
  @st.composite
  def draw_call(draw):
    fmt = draw(st.sampled_from(("NHWC", "NCHW")))
    dtype = "float32" if version == 1 else draw(st.sampled_from(_ONEDNN_DTYPES))
    n, c = draw(st.integers(1, 3)), draw(st.integers(1, 3))
    spatial = [draw(st.integers(1, 3)) for _ in range(2)]
    shape = _layout_shape(fmt, n, c, spatial)
    u = "float32"
    return dict(
        x=draw(_values(st, dtype, shape, bound=4.0)),
        scale=draw(_values(st, u, (c,))), offset=draw(_values(st, u, (c,))),
        mean=draw(_values(st, u, (c,))),
        variance=draw(st.arrays(u, (c,), special=False, min_value=0.0, max_value=4.0)),
        epsilon=draw(st.sampled_from([1e-3, 1e-4, 0.1])),
        exponential_avg_factor=draw(st.sampled_from([1.0, 0.5, 0.1])),
        data_format=fmt, is_training=draw(st.booleans()))
  return draw_call()


_FBN_ATTRS = ("epsilon", "exponential_avg_factor", "data_format", "is_training")
_FBN_SKIP = ("TF's gradient uses only y's cotangent (side outputs get none) and gives mean/"
             "variance no gradient in inference mode; ours differentiates every output: "
             "tests/test_ops_nn.py checks y's gradients against TF.")
_FBN_NOTE = ("Drawn for float32/bfloat16 4-D x (TF's oneDNN path): TF's Eigen path (float16, "
             "5-D) leaves reserve spaces uninitialised in inference mode and makes "
             "reserve_space_3 a scalar; ours are mean/variance and an empty vector.")


def _fbn_spec(st, version):
  return st.Spec(_fbn_calls(st, version), skip={"jvp": _FBN_SKIP, "vjp": _FBN_SKIP},
                 rtol={"float32": 1e-4, "bfloat16": 2e-2}, atol={"float32": 1e-4,
                                                                  "bfloat16": 5e-2},
                 note=_FBN_NOTE)


def _fbn_shape(version):
  def rule(x, scale, offset, mean, variance, **params):
    side = jax.ShapeDtypeStruct(scale.shape, scale.dtype)
    reserve_3 = [jax.ShapeDtypeStruct((0,), scale.dtype)] if version == 3 else []
    return [jax.ShapeDtypeStruct(x.shape, x.dtype)] + [side] * 4 + reserve_3
  return rule


FusedBatchNormV3 = define_op(
    "FusedBatchNormV3", functools.partial(_fused_batch_norm, version=3), family="nn",
    attrs=_FBN_ATTRS, multiple_results=True, shape_rule=_fbn_shape(3),
    spec=lambda st: _fbn_spec(st, 3))

FusedBatchNormV2 = define_op(
    "FusedBatchNormV2", functools.partial(_fused_batch_norm, version=2), family="nn",
    attrs=_FBN_ATTRS, multiple_results=True, spec=lambda st: _fbn_spec(st, 2))

FusedBatchNorm = define_op(
    "FusedBatchNorm", functools.partial(_fused_batch_norm, version=1), family="nn",
    attrs=_FBN_ATTRS, multiple_results=True, spec=lambda st: _fbn_spec(st, 1))


def _batch_norm_backprop(dy, x, scale, mean, var, *, epsilon, data_format, is_training,
                         batch_stats):
  """(x_backprop, scale_backprop, offset_backprop) in U. In training mode the statistics
  are ``mean``/``var``, or with ``batch_stats`` the moments of ``x`` (TF's Python
  formula, _BatchNormGrad)."""
  rank = x.ndim
  ch = _channel_axis(data_format, rank)
  axes = tuple(a for a in range(rank) if a != ch)
  u = scale.dtype
  bc = lambda v: lax.broadcast_in_dim(v, x.shape, (ch,))
  xf, dy = x.astype(u), dy.astype(u)
  eps = np.array(np.float32(epsilon), u)
  if is_training and batch_stats:
    mean = jnp.mean(xf, axis=axes)
    var = jnp.mean(jnp.square(xf - bc(lax.stop_gradient(mean))), axis=axes)
  inv = lax.rsqrt(var + eps)
  x_offset = xf - bc(mean)
  offset_backprop = jnp.sum(dy, axis=axes)
  scale_backprop = jnp.sum(dy * x_offset, axis=axes) * inv
  if is_training:
    dy_offset = dy - bc(jnp.mean(dy, axis=axes))
    m = jnp.mean(dy * x_offset, axis=axes)
    x_backprop = bc(scale * inv) * (dy_offset - bc(m * jnp.square(inv)) * x_offset)
  else:
    x_backprop = dy * bc(scale * inv)
  if x.size == 0:
    x_backprop = jnp.zeros(x.shape, u)
  return x_backprop, scale_backprop, offset_backprop


def _fused_batch_norm_grad(y_backprop, x, scale, reserve_space_1, reserve_space_2,
                           *reserve_space_3, epsilon=1e-4, data_format="NHWC",
                           is_training=True):
  """TF FusedBatchNormGrad{,V2,V3}: (x_backprop, scale_backprop, offset_backprop) and two
  empty reserve outputs (scalars, as TF's CPU kernel). reserve_space_1/2 are read as the
  mean and (biased) variance, as TF's CPU kernel does."""
  del reserve_space_3
  dx, ds, do = _batch_norm_backprop(y_backprop, x, scale, reserve_space_1, reserve_space_2,
                                    epsilon=epsilon, data_format=data_format,
                                    is_training=is_training, batch_stats=False)
  zeros = jnp.zeros((), scale.dtype)
  return (dx.astype(x.dtype), ds, do, zeros, zeros)


def _fused_batch_norm_grad_jvp(op_type):
  """TF's derivative of the op (its registered gradient differentiates _BatchNormGrad):
  in training mode the statistics are the moments of x, the reserve spaces get none."""
  def rule(primals, tangents, **p):
    out = get_op(op_type)(*primals, **p)
    dy, x, scale, rs1, rs2 = primals[:5]
    live = [ad.instantiate_zeros(t) for t in tangents[:3]]
    f = lambda a, b, c: _batch_norm_backprop(
        a, b, c, lax.stop_gradient(rs1), lax.stop_gradient(rs2), batch_stats=True, **p)
    _, (tx, ts, to) = jax.jvp(f, (dy, x, scale), tuple(live))
    zero = jnp.zeros((), scale.dtype)
    return out, [tx.astype(x.dtype), ts, to, zero, zero]
  return rule


def _fbn_grad_calls(st, version):
  @st.composite
  def draw_call(draw):
    fmt = draw(st.sampled_from(("NHWC", "NCHW")))
    dtype = "float32" if version == 1 else draw(st.sampled_from(_ONEDNN_DTYPES))
    n, c = draw(st.integers(1, 3)), draw(st.integers(1, 3))
    shape = _layout_shape(fmt, n, c, [draw(st.integers(1, 3)) for _ in range(2)])
    u = "float32" if version > 1 else dtype
    x = draw(_values(st, dtype, shape, bound=4.0))
    training = draw(st.booleans())
    call = dict(
        y_backprop=draw(_values(st, dtype, shape)), x=x, scale=draw(_values(st, u, (c,))),
        reserve_space_1=draw(_values(st, u, (c,))),
        reserve_space_2=draw(st.arrays(u, (c,), special=False, min_value=0.0, max_value=4.0)),
        # epsilon >= 0.1: with a constant channel (variance 0) the derivatives scale like
        # epsilon ** -1.5 times the float32 rounding of the mean, which XLA and TF differ in
        epsilon=draw(st.sampled_from([0.1, 0.5])), data_format=fmt,
        is_training=training)
    if training:   # reserve spaces as the forward op saves them (TF's gradient assumes it)
      ones = np.ones((c,), np.float32)
      fwd = _tf_call("FusedBatchNormV3", dict(x=x, scale=ones, offset=ones, mean=ones,
                                              variance=ones, data_format=fmt))
      call.update(reserve_space_1=fwd[3].numpy(), reserve_space_2=fwd[4].numpy())
    if version == 3:
      call["reserve_space_3"] = np.zeros((0,), np.float32)
    return call
  return draw_call()


def _fbn_grad_spec(st, version):
  return st.Spec(_fbn_grad_calls(st, version), diff_args=("y_backprop", "x", "scale"),
                 rtol={"float32": 1e-4, "bfloat16": 5e-2}, atol={"float32": 1e-4,
                                                                  "bfloat16": 1e-1},
                 note="Values read the reserve spaces as mean and biased variance (TF's CPU "
                      "kernel); derivatives are TF's (statistics re-derived from x in "
                      "training mode, none for the reserve spaces).")


_FBN_GRAD_ATTRS = ("epsilon", "data_format", "is_training")

FusedBatchNormGradV3 = define_op(
    "FusedBatchNormGradV3", _fused_batch_norm_grad, family="nn", attrs=_FBN_GRAD_ATTRS,
    multiple_results=True, jvp=_fused_batch_norm_grad_jvp("FusedBatchNormGradV3"),
    spec=lambda st: _fbn_grad_spec(st, 3))

FusedBatchNormGradV2 = define_op(
    "FusedBatchNormGradV2", _fused_batch_norm_grad, family="nn", attrs=_FBN_GRAD_ATTRS,
    multiple_results=True, jvp=_fused_batch_norm_grad_jvp("FusedBatchNormGradV2"),
    spec=lambda st: _fbn_grad_spec(st, 2))

FusedBatchNormGrad = define_op(
    "FusedBatchNormGrad", _fused_batch_norm_grad, family="nn", attrs=_FBN_GRAD_ATTRS,
    multiple_results=True, jvp=_fused_batch_norm_grad_jvp("FusedBatchNormGrad"),
    spec=lambda st: _fbn_grad_spec(st, 1))


# --------------------------------------------------------------------------
# LRN
# --------------------------------------------------------------------------


def lrn(input, *, depth_radius=5, bias=1.0, alpha=1.0, beta=0.5):
  """TF LRN: input / (bias + alpha * sum of squares over [d - r, d + r]) ** beta,
  over the last axis (computed in float32 for float16/bfloat16)."""
  x = input.astype(jnp.float32) if input.dtype in (jnp.float16, jnp.bfloat16) else input
  r = int(depth_radius)
  window = (1,) * (x.ndim - 1) + (2 * r + 1,)
  pads = [(0, 0)] * (x.ndim - 1) + [(r, r)]
  sq = lax.reduce_window(x * x, np.array(0, x.dtype), lax.add, window, (1,) * x.ndim, pads)
  f = lambda v: np.array(np.float32(v), x.dtype)
  return (x / (f(bias) + f(alpha) * sq) ** f(beta)).astype(input.dtype)


LRN = define_op(
    "LRN", lrn, family="nn", attrs=("depth_radius", "bias", "alpha", "beta"),
    batching=_fold_batching("LRN"),
    spec=lambda st: st.Spec(
        _lrn_calls(st), rtol={"float16": 1e-2, "float32": 1e-5},
        atol={"float16": 1e-2, "float32": 1e-6}))


def lrn_grad(input_grads, input_image, output_image, *, depth_radius=5, bias=1.0, alpha=1.0,
             beta=0.5):
  """TF LRNGrad, TF's CPU formula (it reads output_image):
  dx_k = g_k * norm_k ** -beta - 2 * alpha * beta * x_k * sum_{|j-k|<=r} g_j * out_j / norm_j
  with norm_j = bias + alpha * sum_{|i-j|<=r} x_i ** 2."""
  half = input_image.dtype in (jnp.float16, jnp.bfloat16)
  cast = (lambda v: v.astype(jnp.float32)) if half else (lambda v: v)
  g, x, y = cast(input_grads), cast(input_image), cast(output_image)
  r = int(depth_radius)
  window = (1,) * (x.ndim - 1) + (2 * r + 1,)
  pads = [(0, 0)] * (x.ndim - 1) + [(r, r)]
  wsum = lambda v: lax.reduce_window(v, np.array(0, v.dtype), lax.add, window, (1,) * v.ndim,
                                     pads)
  f = lambda v: np.array(np.float32(v), x.dtype)
  norm = f(bias) + f(alpha) * wsum(x * x)
  out = g * norm ** -f(beta) - f(2.0 * alpha * beta) * x * wsum(g * y / norm)
  return out.astype(input_image.dtype)


def _lrn_calls(st, grad=False):
  @st.composite
  def draw_call(draw):
    dtype = draw(st.sampled_from(("float16", "float32")))
    shape = draw(st.shapes(min_rank=4, max_rank=4, min_side=1, max_side=4))
    attrs = dict(depth_radius=draw(st.integers(0, 3)), bias=draw(st.sampled_from([1.0, 0.5, 2.0])),
                 alpha=draw(st.sampled_from([1.0, 0.1, 1e-4])),
                 beta=draw(st.sampled_from([0.5, 0.75, 1.0])))
    x = draw(_values(st, dtype, shape, bound=3.0))
    if not grad:
      return dict(input=x, **attrs)
    y = _tf_call("LRN", dict(input=x, **attrs)).numpy()
    return dict(input_grads=draw(_values(st, dtype, shape)), input_image=x, output_image=y,
                **attrs)
  return draw_call()


LRNGrad = define_op(
    "LRNGrad", lrn_grad, family="nn", attrs=("depth_radius", "bias", "alpha", "beta"),
    batching=_fold_batching("LRNGrad"),
    spec=lambda st: st.Spec(_lrn_calls(st, grad=True), diff_args=("input_grads",),
                            rtol={"float16": 2e-2, "float32": 1e-4},
                            atol={"float16": 2e-2, "float32": 1e-5},
                            note="TF's LRNGrad has no registered gradient (jvp/vjp n/a)."))


# --------------------------------------------------------------------------
# Image resizing (NHWC images, static size)
# --------------------------------------------------------------------------


def _resize_scale(in_size, out_size, align_corners):
  if align_corners and out_size > 1:
    return np.float32(in_size - 1) / np.float32(out_size - 1)
  return np.float32(in_size) / np.float32(out_size)


def _nearest_indices(in_size, out_size, align_corners, half_pixel_centers):
  scale = _resize_scale(in_size, out_size, align_corners)
  x = np.arange(out_size, dtype=np.float32)
  src = (x + np.float32(0.5)) * scale if half_pixel_centers else x * scale
  src = src.astype(np.float32)
  # roundf rounds halves away from zero; sources are >= 0 here.
  idx = np.floor(src + np.float32(0.5)) if align_corners else np.floor(src)
  idx = np.minimum(idx.astype(np.int64), in_size - 1)
  if half_pixel_centers:
    idx = np.maximum(idx, 0)
  return idx.astype(np.int32)


def _bilinear_weights(in_size, out_size, align_corners, half_pixel_centers):
  scale = _resize_scale(in_size, out_size, align_corners)
  x = np.arange(out_size, dtype=np.float32)
  src = ((x + np.float32(0.5)) * scale - np.float32(0.5) if half_pixel_centers
         else x * scale).astype(np.float32)
  fl = np.floor(src)
  lower = np.maximum(fl.astype(np.int64), 0)
  upper = np.minimum(np.ceil(src).astype(np.int64), in_size - 1)
  return lower.astype(np.int32), upper.astype(np.int32), (src - fl).astype(np.float32)


def _check_resize(images, size, align_corners, half_pixel_centers):
  if align_corners and half_pixel_centers:
    raise ValueError("align_corners and half_pixel_centers cannot both be true")
  if images.ndim != 4:
    raise ValueError(f"images must be 4-D (NHWC), got shape {images.shape}")
  return tuple(int(v) for v in size)


def resize_nearest_neighbor(images, *, size, align_corners=False, half_pixel_centers=False):
  """TF ResizeNearestNeighbor (index arithmetic in float32, like TF)."""
  oh, ow = _check_resize(images, size, align_corners, half_pixel_centers)
  _, h, w, _ = images.shape
  if 0 in (h, w, oh, ow):
    return jnp.zeros((images.shape[0], oh, ow, images.shape[3]), images.dtype)
  out = jnp.take(images, _nearest_indices(h, oh, align_corners, half_pixel_centers), axis=1)
  return jnp.take(out, _nearest_indices(w, ow, align_corners, half_pixel_centers), axis=2)


def resize_bilinear(images, *, size, align_corners=False, half_pixel_centers=False):
  """TF ResizeBilinear: float32 output, TF's lerp order (top, bottom, then vertical)."""
  oh, ow = _check_resize(images, size, align_corners, half_pixel_centers)
  _, h, w, _ = images.shape
  if 0 in (h, w, oh, ow):
    return jnp.zeros((images.shape[0], oh, ow, images.shape[3]), jnp.float32)
  x = images.astype(jnp.float32)
  y0, y1, ly = _bilinear_weights(h, oh, align_corners, half_pixel_centers)
  x0, x1, lx = _bilinear_weights(w, ow, align_corners, half_pixel_centers)
  top, bottom = jnp.take(x, y0, axis=1), jnp.take(x, y1, axis=1)
  tl, tr = jnp.take(top, x0, axis=2), jnp.take(top, x1, axis=2)
  bl, br = jnp.take(bottom, x0, axis=2), jnp.take(bottom, x1, axis=2)
  lx = lx.reshape(1, 1, ow, 1)
  ly = ly.reshape(1, oh, 1, 1)
  t = tl + (tr - tl) * lx
  b = bl + (br - bl) * lx
  return t + (b - t) * ly


def _resize_calls(st, dtypes):
  @st.composite
  def draw_call(draw):
    dtype = draw(st.sampled_from(dtypes))
    shape = draw(st.shapes(min_rank=4, max_rank=4, min_side=1, max_side=4))
    align = draw(st.booleans())
    half = False if align else draw(st.booleans())
    size = np.array([draw(st.integers(1, 7)), draw(st.integers(1, 7))], np.int32)
    return dict(images=draw(_values(st, dtype, shape, bound=8.0)), size=size,
                align_corners=align, half_pixel_centers=half)
  return draw_call()


_RESIZE_ATTRS = ("align_corners", "half_pixel_centers")

ResizeNearestNeighbor = define_op(
    "ResizeNearestNeighbor", resize_nearest_neighbor, family="nn", static=("size",),
    attrs=_RESIZE_ATTRS, batching=_fold_batching("ResizeNearestNeighbor"),
    spec=lambda st: st.Spec(_resize_calls(
        st, ("float16", "bfloat16", "float32", "float64", "int8", "uint8", "int16", "uint16",
             "int32", "int64"))))

ResizeBilinear = define_op(
    "ResizeBilinear", resize_bilinear, family="nn", static=("size",), attrs=_RESIZE_ATTRS,
    batching=_fold_batching("ResizeBilinear"),
    spec=lambda st: st.Spec(_resize_calls(
        st, ("float16", "bfloat16", "float32", "float64", "int8", "uint8", "int16", "uint16",
             "int32", "int64")), rtol=1e-5, atol=1e-5, grad_oracle="vjp",
        grad_rtol={"float32": 2e-2}, grad_atol={"float32": 2e-2},
        note="TF's forward mode gives a zero tangent for float16/bfloat16 images (float32 "
             "output); the JVP is checked against GradientTape, whose gradient is rounded "
             "to the images' dtype (hence the loose float32 derivative tolerance)."))


def resize_bilinear_grad(grads, original_image, *, align_corners=False,
                         half_pixel_centers=False):
  """TF ResizeBilinearGrad: the transpose of ResizeBilinear (float32 grads), in the
  original image's dtype."""
  oh, ow = grads.shape[1:3]
  f = functools.partial(resize_bilinear, size=(oh, ow), align_corners=align_corners,
                        half_pixel_centers=half_pixel_centers)
  shape = jax.ShapeDtypeStruct(original_image.shape, jnp.float32)
  return jax.linear_transpose(f, shape)(grads.astype(jnp.float32))[0].astype(
      original_image.dtype)


def resize_nearest_neighbor_grad(grads, *, size, align_corners=False, half_pixel_centers=False):
  """TF ResizeNearestNeighborGrad: grads summed into the source pixels (in grads' dtype)."""
  h, w = (int(v) for v in size)
  n, gh, gw, c = grads.shape
  if align_corners and half_pixel_centers:
    raise ValueError("align_corners and half_pixel_centers cannot both be true")
  out = jnp.zeros((n, h, w, c), grads.dtype)
  if 0 in (h, w, gh, gw):
    return out
  iy = _nearest_indices(h, gh, align_corners, half_pixel_centers)
  ix = _nearest_indices(w, gw, align_corners, half_pixel_centers)
  return out.at[:, iy[:, None], ix[None, :], :].add(grads)


def _resize_grad_calls(st, op_type, dtypes):
  @st.composite
  def draw_call(draw):
    dtype = draw(st.sampled_from(dtypes))
    n, c = draw(st.integers(1, 2)), draw(st.integers(1, 2))
    orig = (draw(st.integers(1, 5)), draw(st.integers(1, 5)))
    resized = (draw(st.integers(1, 7)), draw(st.integers(1, 7)))
    align = draw(st.booleans())
    attrs = dict(align_corners=align, half_pixel_centers=False if align else draw(st.booleans()))
    if op_type == "ResizeBilinearGrad":
      return dict(grads=draw(_values(st, "float32", (n,) + resized + (c,))),
                  original_image=draw(_values(st, dtype, (n,) + orig + (c,))), **attrs)
    return dict(grads=draw(_values(st, dtype, (n,) + resized + (c,))),
                size=np.array(orig, np.int32), **attrs)
  return draw_call()


ResizeBilinearGrad = define_op(
    "ResizeBilinearGrad", resize_bilinear_grad, family="nn", attrs=_RESIZE_ATTRS,
    batching=_fold_batching("ResizeBilinearGrad"),
    spec=lambda st: st.Spec(
        _resize_grad_calls(st, "ResizeBilinearGrad",
                           ("float16", "bfloat16", "float32", "float64")),
        diff_args=("grads",), rtol=1e-5, atol=1e-5,
        note="original_image gives only the shape and dtype."))

ResizeNearestNeighborGrad = define_op(
    "ResizeNearestNeighborGrad", resize_nearest_neighbor_grad, family="nn", static=("size",),
    attrs=_RESIZE_ATTRS, batching=_fold_batching("ResizeNearestNeighborGrad"),
    spec=lambda st: st.Spec(_resize_grad_calls(
        st, "ResizeNearestNeighborGrad",
        ("float16", "bfloat16", "float32", "float64", "int8", "uint8", "int32")),
        rtol={"float16": 1e-2, "bfloat16": 5e-2}, atol={"float16": 1e-2, "bfloat16": 5e-2}))
