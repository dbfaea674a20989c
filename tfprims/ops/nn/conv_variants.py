"""Convolution variants: Conv (the generic N-d op), FusedPadConv2D, FusedResizeAndPadConv2D.

* ``Conv``: 2 or 3 spatial dims, ``batch_dims`` leading batch dimensions (folded into
  one), CHANNELS_LAST/CHANNELS_FIRST, dilations, EXPLICIT paddings, ``groups``; the
  formulas are conv.py's (``_conv``).
* ``FusedPadConv2D``: ``Conv2D(MirrorPad(input, paddings, mode), filter)`` (NHWC, no
  dilations).
* ``FusedResizeAndPadConv2D``: ``Conv2D(MirrorPad(ResizeBilinear(input, size), ...))``,
  the resize as TF's ResizeBilinear (float32 arithmetic, legacy pixel centers,
  ``resize_align_corners``), cast back to the input dtype.

TF registers no gradient for any of them. All three are bilinear in (input, filter):
their JVPs apply the op to the tangents, and their transposes are the TF ops of the
unfused graph (Conv2DBackpropInput/Filter or Conv3DBackprop*V2, MirrorPad/MirrorPadGrad,
ResizeBilinear/ResizeBilinearGrad), so jax.grad jaxprs stay TF-named. One exception: Conv
with 3 spatial dims and EXPLICIT padding has no TF backprop op; its transpose uses
conv.py's lax formulas (derived). vmap: a batch on the input alone becomes one more batch
dim (Conv) or folds into N (the fused ops); a batched filter uses vmap(impl) (derived).
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np

from tfprims import rules
from tfprims.core import register_op, tfops
from tfprims.ops.array.pad_tile import mirror_pad
from tfprims.ops.image.resize import resize_bilinear
from tfprims.ops.nn._specs import _tf_accepts
from tfprims.ops.nn.conv import (
  _CONV_TOL,
  _conv,
  _conv_filter_grad,
  _conv_input_grad,
  _conv_out_shape,
  _groups,
)
from tfprims.ops.shared import merge_batch, split_batch
from tfprims.ops.shared_specs import bounded_values

U = rules.U

# --------------------------------------------------------------------------
# Conv
# --------------------------------------------------------------------------

_FORMATS = {
  ("CHANNELS_LAST", 2): "NHWC",
  ("CHANNELS_LAST", 3): "NDHWC",
  ("CHANNELS_FIRST", 2): "NCHW",
  ("CHANNELS_FIRST", 3): "NCDHW",
}


def _conv_params(
  input_shape,
  filter_shape,
  *,
  strides,
  padding,
  explicit_paddings,
  data_format,
  dilations,
  batch_dims,
  groups,
):
  """(flattened input shape, conv.py params) of a Conv call."""
  nd = len(filter_shape) - 2
  if nd not in (2, 3):
    raise ValueError(f"Conv: the input must have 2 or 3 spatial dimensions but got {nd}")
  bd = int(batch_dims)
  if len(input_shape) != bd + nd + 1:
    raise ValueError(
      f"Conv: input rank {len(input_shape)} is not batch_dims ({bd}) + {nd} spatial dims + 1"
    )
  fmt = _FORMATS[(data_format, nd)]
  flat = (math.prod(input_shape[:bd]),) + tuple(input_shape[bd:])
  dil = tuple(int(v) for v in dilations) if len(dilations) else (1,) * (nd + 2)
  if _groups(flat, filter_shape, fmt) != int(groups):
    raise ValueError(
      f"Conv: groups={groups} does not match the input depth / the filter's input depth"
    )
  return flat, dict(
    strides=tuple(int(v) for v in strides),
    padding=padding,
    explicit_paddings=tuple(int(v) for v in explicit_paddings),
    data_format=fmt,
    dilations=dil,
  )


def conv(
  input,
  filter,
  *,
  strides,
  padding,
  explicit_paddings=(),
  data_format="CHANNELS_LAST",
  dilations=(),
  batch_dims=1,
  groups=1,
):
  """TF Conv: ``batch_dims`` leading dims folded into one N, then the 2-D/3-D convolution."""
  flat, q = _conv_params(
    input.shape,
    filter.shape,
    strides=strides,
    padding=padding,
    explicit_paddings=explicit_paddings,
    data_format=data_format,
    dilations=dilations,
    batch_dims=batch_dims,
    groups=groups,
  )
  out = _conv(input.reshape(flat), filter, groups=int(groups), **q)
  return out.reshape(tuple(input.shape[:batch_dims]) + out.shape[1:])


def _conv_op_shape(input, filter, **p):
  flat, q = _conv_params(
    input.shape,
    filter.shape,
    **{**dict(explicit_paddings=(), dilations=(), batch_dims=1, groups=1), **p},
  )
  out = _conv_out_shape(flat, filter.shape, **q)
  return jax.ShapeDtypeStruct(tuple(input.shape[: p.get("batch_dims", 1)]) + out[1:], input.dtype)


def _conv_transpose(ct, x, w, **p):
  bd = p["batch_dims"]
  x_shape, w_shape = rules.shape_of(x), rules.shape_of(w)
  flat, q = _conv_params(x_shape, w_shape, **p)
  ct_shape = rules.shape_of(ct)
  ct = rules.reshape(ct, (flat[0],) + tuple(ct_shape[bd:]))
  nd = len(w_shape) - 2
  q3 = {k: v for k, v in q.items() if k != "explicit_paddings"}
  lax_only = nd == 3 and q["padding"] == "EXPLICIT"  # no TF op: conv.py's lax formulas
  dx = dw = None
  if U(x):
    if lax_only:
      dx = _conv_input_grad(w, ct, flat, groups=int(p["groups"]), **q)
    elif nd == 2:
      dx = tfops.Conv2DBackpropInput(w, ct, input_sizes=flat, **q)
    else:
      dx = tfops.Conv3DBackpropInputV2(w, ct, input_sizes=flat, **q3)
    dx = rules.reshape(dx, x_shape)
  if U(w):
    xf = rules.reshape(x, flat)
    if lax_only:
      dw = _conv_filter_grad(xf, ct, w_shape, groups=int(p["groups"]), **q)
    elif nd == 2:
      dw = tfops.Conv2DBackpropFilter(xf, ct, filter_sizes=w_shape, **q)
    else:
      dw = tfops.Conv3DBackpropFilterV2(xf, ct, filter_sizes=w_shape, **q3)
  return [dx, dw]


def _conv_batching(args, dims, **p):
  """A batch on the input alone is one more leading batch dim; a batched filter uses
  vmap(impl) (derived: a grouped formulation would need TF's grouped Conv)."""
  (x, w), (dx, dw) = args, dims
  if dw is None:
    return tfops.Conv(jnp.moveaxis(x, dx, 0), w, **dict(p, batch_dims=p["batch_dims"] + 1)), 0
  return rules.vmap_batching(conv, False)(args, dims, **p)


# --------------------------------------------------------------------------
# FusedPadConv2D, FusedResizeAndPadConv2D
# --------------------------------------------------------------------------

_NHWC = dict(explicit_paddings=(), data_format="NHWC", dilations=(1, 1, 1, 1))


def _pairs(paddings):
  return tuple((int(a), int(b)) for a, b in np.asarray(paddings).reshape(-1, 2))


def _mirror_pad(x, paddings, mode):
  return tfops.MirrorPad(x, paddings=_pairs(paddings), mode=mode)


def fused_pad_conv2d(input, filter, *, paddings, mode, strides, padding):
  """TF FusedPadConv2D: Conv2D of the mirror-padded input."""
  padded = mirror_pad(input, paddings=_pairs(paddings), mode=mode)
  return _conv(padded, filter, strides=tuple(strides), padding=padding, **_NHWC)


def _resized(input, size, align_corners):
  """TF's fused resize: ResizeBilinear (float32 arithmetic) cast to the input dtype."""
  return resize_bilinear(
    input, size=tuple(int(v) for v in size), align_corners=align_corners
  ).astype(input.dtype)


def fused_resize_and_pad_conv2d(
  input, filter, *, size, paddings, resize_align_corners=False, mode, strides, padding
):
  """TF FusedResizeAndPadConv2D: Conv2D of the mirror-padded bilinear resize."""
  padded = mirror_pad(
    _resized(input, size, resize_align_corners), paddings=_pairs(paddings), mode=mode
  )
  return _conv(padded, filter, strides=tuple(strides), padding=padding, **_NHWC)


def _padded_shape(shape, paddings):
  return tuple(n + a + b for n, (a, b) in zip(shape, _pairs(paddings)))


def _fused_pad_transpose(ct, x, w, *, paddings, mode, strides, padding):
  q = dict(strides=tuple(strides), padding=padding, **_NHWC)
  dx = dw = None
  if U(x):
    g = tfops.Conv2DBackpropInput(
      w, ct, input_sizes=_padded_shape(rules.shape_of(x), paddings), **q
    )
    dx = tfops.MirrorPadGrad(g, paddings=_pairs(paddings), mode=mode)
  if U(w):
    dw = tfops.Conv2DBackpropFilter(
      _mirror_pad(x, paddings, mode), ct, filter_sizes=rules.shape_of(w), **q
    )
  return [dx, dw]


def _fused_resize_transpose(
  ct, x, w, *, size, paddings, resize_align_corners, mode, strides, padding
):
  q = dict(strides=tuple(strides), padding=padding, **_NHWC)
  dx = dw = None
  if U(x):
    n, _, _, c = rules.shape_of(x)
    resized = (n, int(size[0]), int(size[1]), c)
    g = tfops.Conv2DBackpropInput(w, ct, input_sizes=_padded_shape(resized, paddings), **q)
    g = tfops.MirrorPadGrad(g, paddings=_pairs(paddings), mode=mode)
    g = tfops.Cast(g, DstT=np.dtype("float32"), Truncate=False)
    # ResizeBilinearGrad reads only original_image's shape and dtype.
    dx = tfops.ResizeBilinearGrad(
      g,
      rules.zeros(rules.shape_of(x), rules.dtype_of(x)),
      align_corners=resize_align_corners,
      half_pixel_centers=False,
    )
  if U(w):
    r = tfops.ResizeBilinear(
      x,
      size=tuple(int(v) for v in size),
      align_corners=resize_align_corners,
      half_pixel_centers=False,
    )
    r = tfops.Cast(r, DstT=rules.dtype_of(x), Truncate=False)
    dw = tfops.Conv2DBackpropFilter(
      _mirror_pad(r, paddings, mode), ct, filter_sizes=rules.shape_of(w), **q
    )
  return [dx, dw]


def _bilinear_jvp(op):
  """Bilinear: the op applied to each tangent."""
  return (lambda t, x, w, **p: op(t, w, **p), lambda t, x, w, **p: op(x, t, **p))


def _fold_input_batching(op, impl):
  """A batch on the input alone folds into N; a batched filter uses vmap(impl) (derived)."""

  def rule(args, dims, **p):
    (x, w), (dx, dw) = args, dims
    if dw is None:
      b = x.shape[dx]
      return split_batch(op(merge_batch(x, dx), w, **p), b), 0
    return rules.vmap_batching(impl, False)(args, dims, **p)

  return rule


# --------------------------------------------------------------------------
# Specs
# --------------------------------------------------------------------------


def _conv_op_calls(st):
  """Conv calls TF's CPU kernel runs: CHANNELS_LAST, groups 1 (TF refuses the rest), 2 or
  3 spatial dims, 1-2 batch dims; 3-D: equal strides, no bfloat16 (TF's Conv3D CPU bugs,
  docs/semantics/nn.md), no EXPLICIT padding."""
  from hypothesis import assume

  @st.composite
  def draw_call(draw):
    nd = draw(st.sampled_from((2, 2, 3)))
    dtype = draw(
      st.sampled_from(
        ("float16", "bfloat16", "float32", "float64", "int32")
        if nd == 2
        else ("float16", "float32", "float64")
      )
    )
    bd = draw(st.integers(1, 2))
    batch = tuple(draw(st.integers(1, 2)) for _ in range(bd))
    cin, o = draw(st.integers(1, 2)), draw(st.integers(1, 2))
    ks = [draw(st.integers(1, 3)) for _ in range(nd)]
    strides = [draw(st.integers(1, 2)) for _ in range(nd)]
    if nd == 3:
      strides = [strides[0]] * nd
    dils = [draw(st.sampled_from((1, 1, 2))) for _ in range(nd)]
    # TF's CPU Conv aborts the process (a CHECK) on 3-D EXPLICIT padding.
    padding = draw(st.sampled_from(("SAME", "VALID", "EXPLICIT") if nd == 2 else ("SAME", "VALID")))
    epads = [
      (draw(st.integers(0, 2)), draw(st.integers(0, 2))) if padding == "EXPLICIT" else (0, 0)
      for _ in range(nd)
    ]
    need = [
      max(1, (k - 1) * d + 1 - lo - hi) if padding != "SAME" else 1
      for k, d, (lo, hi) in zip(ks, dils, epads)
    ]
    sizes = [draw(st.integers(m, max(m, 5 if nd == 2 else 4))) for m in need]
    x = draw(bounded_values(st, dtype, batch + tuple(sizes) + (cin,)))
    w = draw(bounded_values(st, dtype, tuple(ks) + (cin, o)))
    call = dict(
      input=x,
      filter=w,
      strides=[1, *strides, 1],
      padding=padding,
      dilations=[1, *dils, 1],
      batch_dims=bd,
      data_format="CHANNELS_LAST",
    )
    if padding == "EXPLICIT":
      call["explicit_paddings"] = [0, 0] + [v for pair in epads for v in pair] + [0, 0]
    assume(_tf_accepts("Conv", call))
    return call

  return draw_call()


def _fused_calls(st, op_type):
  from hypothesis import assume

  @st.composite
  def draw_call(draw):
    dtypes = (
      ("float16", "bfloat16", "float32", "float64")
      if op_type == "FusedPadConv2D"
      else ("float16", "float32", "float64")
    )
    dtype = draw(st.sampled_from(dtypes))
    # Batch 1: TF's fused CPU kernels give every image the first image's result.
    n, cin, o = 1, draw(st.integers(1, 2)), draw(st.integers(1, 2))
    h, w = draw(st.integers(1, 4)), draw(st.integers(1, 4))
    call = dict(input=draw(bounded_values(st, dtype, (n, h, w, cin))))
    mode = draw(st.sampled_from(("REFLECT", "SYMMETRIC")))
    if op_type == "FusedResizeAndPadConv2D":
      h, w = draw(st.integers(1, 5)), draw(st.integers(1, 5))
      call["size"] = np.array([h, w], np.int32)
      call["resize_align_corners"] = draw(st.booleans())
    bound = (lambda n: n - 1) if mode == "REFLECT" else (lambda n: n)
    pads = (
      [[0, 0]]
      + [[draw(st.integers(0, min(2, bound(s)))) for _ in range(2)] for s in (h, w)]
      + [[0, 0]]
    )
    ks = [draw(st.integers(1, 3)) for _ in range(2)]
    padding = draw(st.sampled_from(("SAME", "VALID")))
    ph, pw = h + sum(pads[1]), w + sum(pads[2])
    assume(padding == "SAME" or (ks[0] <= ph and ks[1] <= pw))
    call.update(
      paddings=np.array(pads, np.int32),
      filter=draw(bounded_values(st, dtype, tuple(ks) + (cin, o))),
      mode=mode,
      strides=[1, draw(st.integers(1, 2)), draw(st.integers(1, 2)), 1],
      padding=padding,
    )
    assume(_tf_accepts(op_type, call))
    return call

  return draw_call()


_CONV_ATTRS = (
  "strides",
  "padding",
  "explicit_paddings",
  "data_format",
  "dilations",
  "batch_dims",
  "groups",
)
_GRAD_TOL = dict(
  grad_rtol={"float16": 5e-2, "bfloat16": 1e-1, "float32": 1e-3},
  grad_atol={"float16": 5e-2, "bfloat16": 2e-1, "float32": 1e-3},
)

_FUSED_NOTE = (
  "TF registers no gradient: derivatives are checked by central differences. "
  "Batch 1 only: TF's CPU kernel repeats the first image's result for every "
  "image (tfprims computes each)."
)

Conv = register_op(
  "Conv",
  conv,
  family="nn",
  attrs=_CONV_ATTRS,
  shape_rule=_conv_op_shape,
  jvp=rules.per_op(_bilinear_jvp),
  transpose=_conv_transpose,
  batching=_conv_batching,
  spec=lambda st: st.Spec(
    _conv_op_calls(st),
    grad_oracle="fd",
    ignore_zero_sign=st.ACCUMULATED_ZERO_SIGN,
    **_CONV_TOL,
    **_GRAD_TOL,
    note="TF's CPU kernel refuses CHANNELS_FIRST and groups > 1 (tfprims computes them: "
    "unit-tested against Conv2D); TF registers no gradient: derivatives are checked "
    "by central differences.",
  ),
)

FusedPadConv2D = register_op(
  "FusedPadConv2D",
  fused_pad_conv2d,
  family="nn",
  static=("paddings",),
  attrs=("mode", "strides", "padding"),
  jvp=rules.per_op(_bilinear_jvp),
  transpose=_fused_pad_transpose,
  batching=rules.per_op(_fold_input_batching, fused_pad_conv2d),
  spec=rules.per_op(
    lambda op: (
      lambda st: st.Spec(
        _fused_calls(st, op.op_type),
        grad_oracle="fd",
        ignore_zero_sign=st.ACCUMULATED_ZERO_SIGN,
        **_CONV_TOL,
        **_GRAD_TOL,
        note=_FUSED_NOTE,
      )
    )
  ),
)

FusedResizeAndPadConv2D = register_op(
  "FusedResizeAndPadConv2D",
  fused_resize_and_pad_conv2d,
  family="nn",
  static=("size", "paddings"),
  attrs=("resize_align_corners", "mode", "strides", "padding"),
  jvp=rules.per_op(_bilinear_jvp),
  transpose=_fused_resize_transpose,
  batching=rules.per_op(_fold_input_batching, fused_resize_and_pad_conv2d),
  spec=rules.per_op(
    lambda op: (
      lambda st: st.Spec(
        _fused_calls(st, op.op_type),
        grad_oracle="fd",
        ignore_zero_sign=st.ACCUMULATED_ZERO_SIGN,
        **_CONV_TOL,
        **_GRAD_TOL,
        note=_FUSED_NOTE,
      )
    )
  ),
)
