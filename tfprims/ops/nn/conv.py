"""Convolutions: Conv2D, DepthwiseConv2dNative, Conv3D and their backprop ops.

The three families are closed and bilinear: each JVP applies the op to the tangents,
and each transpose is another member (Conv2D's transposes are Conv2DBackpropInput/
Filter, as in a TF gradient graph), so gradient jaxprs read like TF gradient graphs.
Layouts are convolution dimension numbers, never transposes of NHWC/NCHW data, so jit
compiles to what hand-written ``lax.conv_general_dilated`` code gives; the backprops
are JAX's own transpose formulas with TF's padding. A grouped convolution is one whose
input depth is a multiple of the filter's input depth (TF's oneDNN kernels).

vmap keeps the TF names (:func:`_conv_batching`): a batch on the input (or dy) alone
folds into N, a batch on the filter goes into the channels (one convolution group per
example), so per-example gradients are grouped backprops.

Each op's impl, rules and property spec are here; ``_conv_rules`` makes the rules of a
family member from the op types of its family.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from tfprims import emit, rules
from tfprims.core import register_op, tfops
from tfprims.ops.nn._common import (
  _ONEDNN_DTYPES,
  _batch_into_axis,
  _channel_axis,
  _channels_first,
  _dilate,
  _out_size,
  _pads,
  _spatial_axes,
  _split_axis,
)
from tfprims.ops.nn._specs import _layout_attr, _layout_shape, _tf_accepts
from tfprims.ops.shared import merge_batch, split_batch
from tfprims.ops.shared_specs import bounded_values

# --------------------------------------------------------------------------
# The lax formulas shared by the three families
# --------------------------------------------------------------------------


_FILTER_SPEC = {1: "WIO", 2: "HWIO", 3: "DHWIO"}


def _conv_setup(x_shape, w_shape, strides, padding, explicit_paddings, data_format, dilations):
  rank = len(x_shape)
  nd = rank - 2
  axes = _spatial_axes(data_format, rank)
  s = tuple(int(strides[a]) for a in axes)
  d = tuple(int(dilations[a]) for a in axes)
  pads = _pads(padding, explicit_paddings, [x_shape[a] for a in axes], w_shape[:nd], s, d, axes)
  dn = lax.conv_dimension_numbers(
    tuple(x_shape), tuple(w_shape), (data_format, _FILTER_SPEC[nd], data_format)
  )
  return s, d, pads, dn


def _groups(x_shape, w_shape, data_format):
  in_depth = w_shape[len(x_shape) - 2]
  channels = x_shape[_channel_axis(data_format, len(x_shape))]
  if in_depth == 0 or channels % in_depth:
    raise ValueError(
      f"input depth {channels} is not a multiple of the filter's input depth {in_depth}"
    )
  return channels // in_depth


def _conv_out_shape(
  x_shape,
  w_shape,
  *,
  strides,
  padding,
  explicit_paddings=(),
  data_format,
  dilations,
  out_channels=None,
):
  s, d, pads, dn = _conv_setup(
    x_shape, w_shape, strides, padding, explicit_paddings, data_format, dilations
  )
  nd = len(s)
  out = list(x_shape)
  for i, a in enumerate(_spatial_axes(data_format, len(x_shape))):
    out[a] = _out_size(x_shape[a], w_shape[i], s[i], d[i], pads[i])
  out[_channel_axis(data_format, len(x_shape))] = (
    w_shape[nd + 1] if out_channels is None else out_channels
  )
  return tuple(out)


def _conv_build(
  B, x, w, *, strides, padding, explicit_paddings=(), data_format, dilations, groups=None
):
  s, d, pads, dn = _conv_setup(
    x.shape, w.shape, strides, padding, explicit_paddings, data_format, dilations
  )
  if groups is None:
    groups = _groups(x.shape, w.shape, data_format)
  if not all(type(p) is int for pair in pads for p in pair):
    pads = padding  # symbolic SAME pads (jax.export): lax pads "SAME" as TF does
  return B.conv_general_dilated(
    x, w, s, pads, rhs_dilation=d, dimension_numbers=dn, feature_group_count=groups
  )


def _conv(x, w, **params):
  return _conv_build(emit.LAX, x, w, **params)


def _reshape_axis_out_of(src, size1, x):
  shape = list(x.shape)
  shape[src : src + 1] = [size1, shape[src] // size1]
  return lax.reshape(x, tuple(shape))


def _reshape_axis_into(src, dst, x):
  perm = [i for i in range(x.ndim) if i != src]
  perm.insert(dst, src)
  new_shape = list(np.delete(np.array(x.shape), src))
  new_shape[dst] *= x.shape[src]
  return lax.reshape(x, tuple(int(n) for n in new_shape), tuple(perm))


def _check_out(op_name, g_shape, expected):
  if tuple(g_shape) != tuple(expected):
    raise ValueError(
      f"{op_name}: out_backprop has shape {tuple(g_shape)} but the convolution "
      f"of the given sizes produces {tuple(expected)}"
    )


def _conv_padded(
  lhs,
  rhs,
  strides,
  pads,
  *,
  lhs_dilation,
  rhs_dilation,
  dimension_numbers,
  feature_group_count=1,
  batch_group_count=1,
):
  """``lax.conv_general_dilated``, whose pads must be ints: symbolic pads (a transposed
  convolution of a symbolic image size, jax.export) pad the input explicitly instead,
  with ``lax.pad`` (which takes symbolic and negative pads, and the lhs dilation as
  interior padding)."""
  if rules.known([p for pair in pads for p in pair]):
    return lax.conv_general_dilated(
      lhs,
      rhs,
      strides,
      pads,
      lhs_dilation=lhs_dilation,
      rhs_dilation=rhs_dilation,
      dimension_numbers=dimension_numbers,
      feature_group_count=feature_group_count,
      batch_group_count=batch_group_count,
    )
  config = [(0, 0, 0)] * lhs.ndim
  for axis, (lo, hi), dl in zip(dimension_numbers.lhs_spec[2:], pads, lhs_dilation):
    config[axis] = (lo, hi, dl - 1)
  lhs = lax.pad(lhs, np.zeros((), lhs.dtype), config)
  return lax.conv_general_dilated(
    lhs,
    rhs,
    strides,
    [(0, 0)] * len(pads),
    rhs_dilation=rhs_dilation,
    dimension_numbers=dimension_numbers,
    feature_group_count=feature_group_count,
    batch_group_count=batch_group_count,
  )


def _conv_input_grad(
  w,
  g,
  input_shape,
  *,
  strides,
  padding,
  explicit_paddings=(),
  data_format,
  dilations,
  groups,
  op_name="Conv2DBackpropInput",
):
  """Transpose of the convolution in its input (JAX's own formula, TF's padding)."""
  s, d, pads, dn = _conv_setup(
    input_shape, w.shape, strides, padding, explicit_paddings, data_format, dilations
  )
  _check_out(
    op_name,
    g.shape,
    _conv_out_shape(
      input_shape,
      w.shape,
      strides=strides,
      padding=padding,
      explicit_paddings=explicit_paddings,
      data_format=data_format,
      dilations=dilations,
      out_channels=w.shape[-1],
    ),
  )
  lhs_spec, rhs_spec, out_spec = dn
  k = [w.shape[i] for i in rhs_spec[2:]]
  if groups > 1:
    w = _reshape_axis_out_of(rhs_spec[0], groups, w)
    w = _reshape_axis_into(rhs_spec[0], rhs_spec[1], w)
  trans_dn = lax.ConvDimensionNumbers(out_spec, (rhs_spec[1], rhs_spec[0]) + rhs_spec[2:], lhs_spec)
  in_sp = [input_shape[i] for i in lhs_spec[2:]]
  out_sp = [g.shape[i] for i in out_spec[2:]]
  t_pads = []
  for n, kk, st, dl, (lo, _), o in zip(in_sp, k, s, d, pads, out_sp):
    before = _dilate(kk, dl) - lo - 1
    after = n + _dilate(kk, dl) - 1 - _dilate(o, st) - before
    t_pads.append((before, after))
  rev = lax.rev(w, tuple(rhs_spec[2:]))
  return _conv_padded(
    g,
    rev,
    (1,) * len(s),
    t_pads,
    lhs_dilation=s,
    rhs_dilation=d,
    dimension_numbers=trans_dn,
    feature_group_count=groups,
  )


def _conv_filter_grad(
  x,
  g,
  filter_shape,
  *,
  strides,
  padding,
  explicit_paddings=(),
  data_format,
  dilations,
  groups,
  op_name="Conv2DBackpropFilter",
):
  """Transpose of the convolution in its filter (JAX's own formula, TF's padding)."""
  s, d, pads, dn = _conv_setup(
    x.shape, filter_shape, strides, padding, explicit_paddings, data_format, dilations
  )
  _check_out(
    op_name,
    g.shape,
    _conv_out_shape(
      x.shape,
      filter_shape,
      strides=strides,
      padding=padding,
      explicit_paddings=explicit_paddings,
      data_format=data_format,
      dilations=dilations,
      out_channels=filter_shape[-1],
    ),
  )
  if g.size == 0 or x.size == 0:
    return jnp.zeros(filter_shape, g.dtype)
  lhs_spec, rhs_spec, out_spec = dn
  sw = lambda spec: (spec[1], spec[0]) + spec[2:]
  trans_dn = lax.ConvDimensionNumbers(sw(lhs_spec), sw(out_spec), sw(rhs_spec))
  in_sp = [x.shape[i] for i in lhs_spec[2:]]
  k = [filter_shape[i] for i in rhs_spec[2:]]
  out_sp = [g.shape[i] for i in out_spec[2:]]
  t_pads = [
    (lo, (_dilate(o, st) - n) + (_dilate(kk, dl) - lo - 1))
    for n, kk, st, dl, (lo, _), o in zip(in_sp, k, s, d, pads, out_sp)
  ]
  return _conv_padded(
    x,
    g,
    d,
    t_pads,
    lhs_dilation=(1,) * len(s),
    rhs_dilation=s,
    dimension_numbers=trans_dn,
    batch_group_count=groups,
  )


def _full_input_shape(input_sizes, in_channels, g_shape, data_format):
  """TF accepts input_sizes as the full shape or as the spatial sizes only (symbolic dims
  of a shape-polymorphic export stay symbolic)."""
  sizes = rules.sizes(input_sizes)
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


# --------------------------------------------------------------------------
# Rules shared by the three convolution families
# --------------------------------------------------------------------------


def _conv_rules(family, kind, *, groupable=True):
  """JVP, transpose and batching (``register_op`` keywords) of the member ``kind`` of a
  convolution family: ``family`` maps "fwd", "bi", "bf" to the op types of fwd(x, w),
  bi(w, dy) (input backprop) and bf(x, dy) (filter backprop)."""
  fwd, bi, bf = family["fwd"], family["bi"], family["bf"]
  U, shape_of = rules.U, rules.shape_of
  if kind == "fwd":
    jvp = (
      lambda t, x, w, **p: getattr(tfops, fwd)(t, w, **p),
      lambda t, x, w, **p: getattr(tfops, fwd)(x, t, **p),
    )

    def transpose(ct, x, w, **p):
      return [
        getattr(tfops, bi)(w, ct, input_sizes=shape_of(x), **p) if U(x) else None,
        getattr(tfops, bf)(x, ct, filter_sizes=shape_of(w), **p) if U(w) else None,
      ]
  elif kind == "bi":
    jvp = (
      lambda t, w, dy, **p: getattr(tfops, bi)(t, dy, **p),
      lambda t, w, dy, **p: getattr(tfops, bi)(w, t, **p),
    )

    def transpose(ct, w, dy, *, input_sizes, **p):
      return [
        getattr(tfops, bf)(ct, dy, filter_sizes=shape_of(w), **p) if U(w) else None,
        getattr(tfops, fwd)(ct, w, **p) if U(dy) else None,
      ]
  else:
    jvp = (
      lambda t, x, dy, **p: getattr(tfops, bf)(t, dy, **p),
      lambda t, x, dy, **p: getattr(tfops, bf)(x, t, **p),
    )

    def transpose(ct, x, dy, *, filter_sizes, **p):
      return [
        getattr(tfops, bi)(ct, dy, input_sizes=shape_of(x), **p) if U(x) else None,
        getattr(tfops, fwd)(x, ct, **p) if U(dy) else None,
      ]

  return dict(
    jvp=jvp, transpose=transpose, batching=_conv_batching(family[kind], kind, groupable=groupable)
  )


def _conv_batching(op_type, kind, groupable=True):
  """vmap for a convolution family member, keeping its TF name.

  fwd(x, w): x-only batched folds into N; otherwise the batch goes into the channels:
  w's batch into its output channels, x's (if batched) into the input channels, which
  makes a B-group convolution (one group per example). bi(w, dy) (dy-only batched folds
  into N) and bf(x, dy) likewise: per-example gradients are grouped backprops. Grouped or
  depthwise convolutions, and empty batches, use vmap(impl).
  """

  def rule(args, dims, **p):
    op = getattr(tfops, op_type)
    (a, b), (da, db) = args, dims
    fmt = p["data_format"]
    size = rules.batch_size(args, dims)
    ua, ub = rules.unbatched_shape(a, da), rules.unbatched_shape(b, db)
    rank = len(ua) if kind != "bi" else len(ub)
    ch = _channel_axis(fmt, rank)
    nd = rank - 2
    if kind == "fwd" and db is None:
      return split_batch(op(merge_batch(a, da), b, **p), size), 0
    if kind == "bi" and da is None:
      unb_in = _full_input_shape(p["input_sizes"], ua[-2], ub, fmt)
      q = dict(p, input_sizes=(size * unb_in[0],) + tuple(unb_in[1:]))
      return split_batch(op(a, merge_batch(b, db), **q), size), 0
    if kind == "fwd":
      in_shape, w_shape = ua, ub
    elif kind == "bi":
      w_shape = ua
      in_shape = _full_input_shape(p["input_sizes"], ua[-2], ub, fmt)
    else:
      in_shape, w_shape = ua, tuple(int(v) for v in p["filter_sizes"])
    if not groupable or size == 0 or _groups(in_shape, w_shape, fmt) != 1:
      return rules.vmap_batching(op.impl, op.multiple_results)(args, dims, **p)
    if kind == "fwd":  # x unbatched: an ordinary convolution with B * O output channels
      x = a if da is None else _batch_into_axis(a, da, ch, size)
      out = op(x, _batch_into_axis(b, db, nd + 1, size), **p)
      return _split_axis(out, ch, size), ch
    if kind == "bi":
      shape = list(in_shape)
      shape[ch] *= size
      out = op(
        _batch_into_axis(a, da, nd + 1, size),
        _batch_into_axis(b, db, ch, size),
        **dict(p, input_sizes=tuple(shape)),
      )
      return _split_axis(out, ch, size), ch
    sizes = w_shape[:-1] + (size * w_shape[-1],)
    x = a if da is None else _batch_into_axis(a, da, ch, size)  # x unbatched: no groups
    out = op(x, _batch_into_axis(b, db, ch, size), **dict(p, filter_sizes=sizes))
    return _split_axis(out, nd + 1, size), nd + 1

  return rule


# --------------------------------------------------------------------------
# Specs (hypothesis is imported only when a spec is built)
# --------------------------------------------------------------------------


def _conv_calls(
  st,
  family,
  kind,
  *,
  nd=2,
  depthwise=False,
  dtypes=None,
  explicit=True,
  dilations=True,
  formats=None,
  equal_strides=False,
):
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
    dtype = draw(
      st.sampled_from(
        [d for d in dtypes if d in _ONEDNN_DTYPES] if _channels_first(fmt) else list(dtypes)
      )
    )
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
    padding = draw(
      st.sampled_from(("SAME", "VALID", "EXPLICIT") if explicit else ("SAME", "VALID"))
    )
    epads = [
      (draw(st.integers(0, 2)), draw(st.integers(0, 2))) if padding == "EXPLICIT" else (0, 0)
      for _ in range(nd)
    ]
    sizes = []
    for k, d, (lo, hi) in zip(ks, dils, epads):
      need = 1 if padding == "SAME" else max(1, (k - 1) * d + 1 - lo - hi)
      if nd == 3 and d > 1 and str(dtype) == "bfloat16":
        need = max(need, 2)  # TF's bfloat16 Conv3D segfaults on a dilated axis of size 1
      sizes.append(draw(st.integers(need, max(need, max_side))))
    x_shape = _layout_shape(fmt, n, c, sizes)
    w_shape = tuple(ks) + ((c, o) if depthwise else (cin, o))
    attrs = dict(
      strides=_layout_attr(fmt, strides),
      padding=padding,
      data_format=fmt,
      dilations=_layout_attr(fmt, dils),
    )
    if explicit:
      flat = _layout_attr(fmt, epads, fill=(0, 0))
      attrs["explicit_paddings"] = (
        [v for pair in flat for v in pair] if padding == "EXPLICIT" else []
      )
    y_shape = _conv_out_shape(x_shape, w_shape, out_channels=c * o if depthwise else o, **attrs)
    x, w, dy = (draw(bounded_values(st, dtype, s)) for s in (x_shape, w_shape, y_shape))
    calls = dict(
      fwd=dict(input=x, filter=w, **attrs),
      bi=dict(input_sizes=np.array(x_shape, np.int32), filter=w, out_backprop=dy, **attrs),
      bf=dict(input=x, filter_sizes=np.array(w_shape, np.int32), out_backprop=dy, **attrs),
    )
    needed = ("fwd", "bi", "bf") if dtype in st.FLOATS else (kind,)
    assume(all(_tf_accepts(family[k], calls[k]) for k in needed))
    return calls[kind]

  return draw_call()


_CONV_TOL = dict(
  rtol={"float16": 2e-2, "bfloat16": 5e-2, "float32": 1e-4, "float64": 1e-6},
  atol={"float16": 5e-2, "bfloat16": 2e-1, "float32": 1e-4, "float64": 1e-6},
)

_CONV_NOTE = (
  "TF's CPU kernels take NCHW, grouped filters and most dilation/EXPLICIT "
  "combinations only for float32/bfloat16 (oneDNN); the spec draws what TF's CPU "
  "kernel runs. Empty outputs are not drawn (TF's oneDNN kernel returns wrong shapes)."
)

_CONV2D_ATTRS = ("strides", "padding", "explicit_paddings", "data_format", "dilations")
_CONV3D_ATTRS = ("strides", "padding", "data_format", "dilations")


# --------------------------------------------------------------------------
# Conv2D, Conv2DBackpropInput, Conv2DBackpropFilter
# --------------------------------------------------------------------------


def conv2d(
  input,
  filter,
  *,
  strides,
  padding,
  explicit_paddings=(),
  data_format="NHWC",
  dilations=(1, 1, 1, 1),
):
  """TF Conv2D: NHWC or NCHW input, HWIO filter; grouped when the input depth is a
  multiple of the filter's input depth."""
  return _conv(
    input,
    filter,
    strides=strides,
    padding=padding,
    explicit_paddings=explicit_paddings,
    data_format=data_format,
    dilations=dilations,
  )


def _conv2d_build(
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
  if 0 in input.shape or 0 in filter.shape:
    return None
  return _conv_build(
    B,
    input,
    filter,
    strides=strides,
    padding=padding,
    explicit_paddings=explicit_paddings,
    data_format=data_format,
    dilations=dilations,
  )


def conv2d_backprop_input(
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
  """TF Conv2DBackpropInput: the transpose of Conv2D in its input."""
  shape = _full_input_shape(input_sizes, filter.shape[-2], out_backprop.shape, data_format)
  groups = _groups(shape, filter.shape, data_format)
  return _conv_input_grad(
    filter,
    out_backprop,
    shape,
    strides=strides,
    padding=padding,
    explicit_paddings=explicit_paddings,
    data_format=data_format,
    dilations=dilations,
    groups=groups,
  )


def conv2d_backprop_filter(
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
  """TF Conv2DBackpropFilter: the transpose of Conv2D in its filter."""
  filter_shape = tuple(int(v) for v in filter_sizes)
  groups = _groups(input.shape, filter_shape, data_format)
  return _conv_filter_grad(
    input,
    out_backprop,
    filter_shape,
    strides=strides,
    padding=padding,
    explicit_paddings=explicit_paddings,
    data_format=data_format,
    dilations=dilations,
    groups=groups,
  )


def _conv_shape(input, filter, **params):
  _groups(input.shape, filter.shape, params["data_format"])
  return jax.ShapeDtypeStruct(_conv_out_shape(input.shape, filter.shape, **params), input.dtype)


_C2 = dict(fwd="Conv2D", bi="Conv2DBackpropInput", bf="Conv2DBackpropFilter")

Conv2D = register_op(
  "Conv2D",
  conv2d,
  family="nn",
  attrs=_CONV2D_ATTRS,
  shape_rule=_conv_shape,
  build=_conv2d_build,
  **_conv_rules(_C2, "fwd"),
  spec=lambda st: st.Spec(
    _conv_calls(st, _C2, "fwd", dtypes=("float16", "bfloat16", "float32", "float64", "int32")),
    note=_CONV_NOTE,
    ignore_zero_sign=st.ACCUMULATED_ZERO_SIGN,
    **_CONV_TOL,
  ),
)

Conv2DBackpropInput = register_op(
  "Conv2DBackpropInput",
  conv2d_backprop_input,
  family="nn",
  static=("input_sizes",),
  attrs=_CONV2D_ATTRS,
  **_conv_rules(_C2, "bi"),
  spec=lambda st: st.Spec(
    _conv_calls(st, _C2, "bi", dtypes=("float16", "bfloat16", "float32", "float64", "int32")),
    note=_CONV_NOTE,
    ignore_zero_sign=st.ACCUMULATED_ZERO_SIGN,
    **_CONV_TOL,
  ),
)

Conv2DBackpropFilter = register_op(
  "Conv2DBackpropFilter",
  conv2d_backprop_filter,
  family="nn",
  static=("filter_sizes",),
  attrs=_CONV2D_ATTRS,
  **_conv_rules(_C2, "bf"),
  spec=lambda st: st.Spec(
    _conv_calls(st, _C2, "bf"),
    note=_CONV_NOTE,
    ignore_zero_sign=st.ACCUMULATED_ZERO_SIGN,
    **_CONV_TOL,
  ),
)


# --------------------------------------------------------------------------
# DepthwiseConv2dNative and its backprops
# --------------------------------------------------------------------------


def _depthwise_filter(filter):
  *k, c, m = filter.shape
  return lax.reshape(filter, tuple(k) + (1, c * m))


def depthwise_conv2d_native(
  input,
  filter,
  *,
  strides,
  padding,
  explicit_paddings=(),
  data_format="NHWC",
  dilations=(1, 1, 1, 1),
):
  """TF DepthwiseConv2dNative: filter [H, W, C, M], output channel c * M + m."""
  c = filter.shape[-2]
  return _conv(
    input,
    _depthwise_filter(filter),
    strides=strides,
    padding=padding,
    explicit_paddings=explicit_paddings,
    data_format=data_format,
    dilations=dilations,
    groups=c,
  )


def depthwise_backprop_input(
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
  """TF DepthwiseConv2dNativeBackpropInput."""
  c = filter.shape[-2]
  shape = _full_input_shape(input_sizes, c, out_backprop.shape, data_format)
  return _conv_input_grad(
    _depthwise_filter(filter),
    out_backprop,
    shape,
    strides=strides,
    padding=padding,
    explicit_paddings=explicit_paddings,
    data_format=data_format,
    dilations=dilations,
    groups=c,
    op_name="DepthwiseConv2dNativeBackpropInput",
  )


def depthwise_backprop_filter(
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
  """TF DepthwiseConv2dNativeBackpropFilter."""
  *k, c, m = (int(v) for v in filter_sizes)
  out = _conv_filter_grad(
    input,
    out_backprop,
    tuple(k) + (1, c * m),
    strides=strides,
    padding=padding,
    explicit_paddings=explicit_paddings,
    data_format=data_format,
    dilations=dilations,
    groups=c,
    op_name="DepthwiseConv2dNativeBackpropFilter",
  )
  return lax.reshape(out, tuple(k) + (c, m))


def _depthwise_shape(input, filter, **params):
  return jax.ShapeDtypeStruct(
    _conv_out_shape(
      input.shape, filter.shape, out_channels=filter.shape[-2] * filter.shape[-1], **params
    ),
    input.dtype,
  )


_DW = dict(
  fwd="DepthwiseConv2dNative",
  bi="DepthwiseConv2dNativeBackpropInput",
  bf="DepthwiseConv2dNativeBackpropFilter",
)
_DW_SPEC = dict(
  depthwise=True,
  dilations=False,
  dtypes=("float16", "float32", "float64"),
  formats=("NHWC",),
  equal_strides=True,
)
_DW_NOTE = (
  _CONV_NOTE + " Depthwise: TF's CPU backprop kernels ignore dilations, the "
  "bfloat16 filter backprop and NCHW kernels with unequal strides sometimes return "
  "uninitialised memory, so the spec draws NHWC, equal strides, no dilation, no "
  "bfloat16 (dilated and NCHW forward values are checked in tests/test_ops_nn.py)."
)

DepthwiseConv2dNative = register_op(
  "DepthwiseConv2dNative",
  depthwise_conv2d_native,
  family="nn",
  attrs=_CONV2D_ATTRS,
  shape_rule=_depthwise_shape,
  **_conv_rules(_DW, "fwd", groupable=False),
  spec=lambda st: st.Spec(
    _conv_calls(st, _DW, "fwd", **_DW_SPEC),
    note=_DW_NOTE,
    ignore_zero_sign=st.ACCUMULATED_ZERO_SIGN,
    **_CONV_TOL,
  ),
)

DepthwiseConv2dNativeBackpropInput = register_op(
  "DepthwiseConv2dNativeBackpropInput",
  depthwise_backprop_input,
  family="nn",
  static=("input_sizes",),
  attrs=_CONV2D_ATTRS,
  **_conv_rules(_DW, "bi", groupable=False),
  spec=lambda st: st.Spec(
    _conv_calls(st, _DW, "bi", **_DW_SPEC),
    note=_DW_NOTE,
    ignore_zero_sign=st.ACCUMULATED_ZERO_SIGN,
    **_CONV_TOL,
  ),
)

DepthwiseConv2dNativeBackpropFilter = register_op(
  "DepthwiseConv2dNativeBackpropFilter",
  depthwise_backprop_filter,
  family="nn",
  static=("filter_sizes",),
  attrs=_CONV2D_ATTRS,
  **_conv_rules(_DW, "bf", groupable=False),
  spec=lambda st: st.Spec(
    _conv_calls(st, _DW, "bf", **_DW_SPEC),
    note=_DW_NOTE,
    ignore_zero_sign=st.ACCUMULATED_ZERO_SIGN,
    **_CONV_TOL,
  ),
)


# --------------------------------------------------------------------------
# Conv3D, Conv3DBackpropInputV2, Conv3DBackpropFilterV2
# --------------------------------------------------------------------------


def conv3d(input, filter, *, strides, padding, data_format="NDHWC", dilations=(1,) * 5):
  """TF Conv3D: NDHWC or NCDHW input, DHWIO filter."""
  return _conv(
    input, filter, strides=strides, padding=padding, data_format=data_format, dilations=dilations
  )


def conv3d_backprop_input(
  filter, out_backprop, *, input_sizes, strides, padding, data_format="NDHWC", dilations=(1,) * 5
):
  """TF Conv3DBackpropInputV2."""
  shape = _full_input_shape(input_sizes, filter.shape[-2], out_backprop.shape, data_format)
  return _conv_input_grad(
    filter,
    out_backprop,
    shape,
    strides=strides,
    padding=padding,
    data_format=data_format,
    dilations=dilations,
    groups=_groups(shape, filter.shape, data_format),
    op_name="Conv3DBackpropInputV2",
  )


def conv3d_backprop_filter(
  input, out_backprop, *, filter_sizes, strides, padding, data_format="NDHWC", dilations=(1,) * 5
):
  """TF Conv3DBackpropFilterV2."""
  filter_shape = tuple(int(v) for v in filter_sizes)
  return _conv_filter_grad(
    input,
    out_backprop,
    filter_shape,
    strides=strides,
    padding=padding,
    data_format=data_format,
    dilations=dilations,
    groups=_groups(input.shape, filter_shape, data_format),
    op_name="Conv3DBackpropFilterV2",
  )


_C3 = dict(fwd="Conv3D", bi="Conv3DBackpropInputV2", bf="Conv3DBackpropFilterV2")
# TF's gradients of the Conv3D backprops are Conv3D calls, which return uninitialised
# memory for bfloat16 and some unequal strides (see Conv3D): derivatives are checked
# against central differences of the backprop op itself, whose values are right.
_CONV3D_BACKPROP_NOTE = _CONV_NOTE + (
  " Derivatives vs central differences: TF's own "
  "gradient runs Conv3D, wrong on TF's CPU for bfloat16 "
  "and some unequal strides."
)

Conv3D = register_op(
  "Conv3D",
  conv3d,
  family="nn",
  attrs=_CONV3D_ATTRS,
  **_conv_rules(_C3, "fwd"),
  spec=lambda st: st.Spec(
    _conv_calls(
      st,
      _C3,
      "fwd",
      nd=3,
      explicit=False,
      equal_strides=True,
      dtypes=("float16", "float32", "float64"),
    ),
    note=_CONV_NOTE + " Conv3D: TF's CPU kernels return wrong values (uninitialised "
    "memory) for bfloat16 and for some unequal strides (docs/semantics/nn.md), so "
    "the spec draws neither.",
    ignore_zero_sign=st.ACCUMULATED_ZERO_SIGN,
    **_CONV_TOL,
  ),
)

Conv3DBackpropInputV2 = register_op(
  "Conv3DBackpropInputV2",
  conv3d_backprop_input,
  family="nn",
  static=("input_sizes",),
  attrs=_CONV3D_ATTRS,
  **_conv_rules(_C3, "bi"),
  spec=lambda st: st.Spec(
    _conv_calls(st, _C3, "bi", nd=3, explicit=False),
    grad_oracle="fd",
    note=_CONV3D_BACKPROP_NOTE,
    ignore_zero_sign=st.ACCUMULATED_ZERO_SIGN,
    **_CONV_TOL,
  ),
)

Conv3DBackpropFilterV2 = register_op(
  "Conv3DBackpropFilterV2",
  conv3d_backprop_filter,
  family="nn",
  static=("filter_sizes",),
  attrs=_CONV3D_ATTRS,
  **_conv_rules(_C3, "bf"),
  spec=lambda st: st.Spec(
    _conv_calls(st, _C3, "bf", nd=3, explicit=False),
    grad_oracle="fd",
    note=_CONV3D_BACKPROP_NOTE,
    ignore_zero_sign=st.ACCUMULATED_ZERO_SIGN,
    **_CONV_TOL,
  ),
)
