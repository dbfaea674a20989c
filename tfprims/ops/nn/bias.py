"""BiasAdd, BiasAddV1 and BiasAddGrad.

BiasAdd/BiasAddV1 are linear in (value, bias) jointly and transposed by BiasAddGrad
(the sum over every axis but the channel axis); BiasAddGrad's transpose broadcasts
along the channel axis. vmap keeps the TF names: a batched bias goes into the channels
(BiasAdd over B * C channels), as does a batched BiasAddGrad.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from jax import lax

from tfprims import emit, rules
from tfprims.core import register_op, tfops
from tfprims.ops.nn._common import _batch_into_axis, _channel_axis, _channels_first, _split_axis
from tfprims.ops.shared import merge_batch, split_batch


def _bias_add_build(B, value, bias, *, data_format="NHWC"):
  # A builder (tfprims/emit.py): BiasAdd is in every network, and its lowering emits
  # StableHLO instead of tracing an impl.
  ch = _channel_axis(data_format, value.ndim)
  return B.add(value, B.broadcast_in_dim(bias, value.shape, (ch,)))


def bias_add(value, bias, *, data_format="NHWC"):
  """TF BiasAdd: ``bias`` added along the channel axis (last for NHWC, 1 for NCHW)."""
  return _bias_add_build(emit.LAX, value, bias, data_format=data_format)


def bias_add_grad(out_backprop, *, data_format="NHWC"):
  """TF BiasAddGrad: the sum over every axis but the channel axis."""
  ch = _channel_axis(data_format, out_backprop.ndim)
  axes = tuple(a for a in range(out_backprop.ndim) if a != ch)
  if out_backprop.dtype in (jnp.float16, jnp.bfloat16):  # TF accumulates half types in float32
    return jnp.sum(out_backprop.astype(jnp.float32), axis=axes).astype(out_backprop.dtype)
  return jnp.sum(out_backprop, axis=axes, dtype=out_backprop.dtype)


def _bias_add_transpose(ct, value, bias, *, data_format="NHWC"):
  return [
    ct if rules.U(value) else None,
    tfops.BiasAddGrad(ct, data_format=data_format) if rules.U(bias) else None,
  ]


def _bias_add_grad_transpose(ct, out_backprop, *, data_format="NHWC"):
  shape = rules.shape_of(out_backprop)
  return [lax.broadcast_in_dim(ct, shape, (_channel_axis(data_format, len(shape)),))]


def _bias_add_batching(op):
  """value-only batched: NHWC re-binds with the batch axis in front, NCHW folds it into
  N. A batched bias goes into the channels: BiasAdd over B * C channels."""

  def rule(args, dims, **p):
    (value, bias), (bv, bb) = args, dims
    fmt = p.get("data_format", "NHWC")
    if bb is None:
      if _channels_first(fmt):
        return split_batch(op(merge_batch(value, bv), bias, **p), value.shape[bv]), 0
      return op(jnp.moveaxis(value, bv, 0), bias, **p), 0
    size = bias.shape[bb]
    ch = _channel_axis(fmt, len(rules.unbatched_shape(value, bv)))
    out = op(_batch_into_axis(value, bv, ch, size), _batch_into_axis(bias, bb, 0, size), **p)
    return _split_axis(out, ch, size), ch

  return rule


def _bias_add_grad_batching(args, dims, *, data_format="NHWC"):
  """The batch goes into the channels: BiasAddGrad over B * C channels."""
  (g,), (d,) = args, dims
  size = g.shape[d]
  ch = _channel_axis(data_format, g.ndim - 1)
  out = tfops.BiasAddGrad(_batch_into_axis(g, d, ch, size), data_format=data_format)
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


BiasAdd = register_op(
  "BiasAdd",
  bias_add,
  family="nn",
  attrs=("data_format",),
  linear=True,
  build=_bias_add_build,
  shape_rule=_bias_add_shape,
  transpose=_bias_add_transpose,
  batching=rules.per_op(_bias_add_batching),
  spec=lambda st: st.Spec(_bias_calls(st)),
)

BiasAddV1 = register_op(
  "BiasAddV1",
  bias_add,
  family="nn",
  linear=True,
  build=_bias_add_build,
  transpose=_bias_add_transpose,
  batching=rules.per_op(_bias_add_batching),
  spec=lambda st: st.Spec(_bias_calls(st, with_format=False)),
)

BiasAddGrad = register_op(
  "BiasAddGrad",
  bias_add_grad,
  family="nn",
  attrs=("data_format",),
  linear=True,
  transpose=_bias_add_grad_transpose,
  batching=_bias_add_grad_batching,
  spec=lambda st: st.Spec(
    _bias_calls(st, grad=True),
    rtol={"float16": 1e-2, "bfloat16": 5e-2},
    note="float16/bfloat16 sums: TF accumulates in float32.",
  ),
)
