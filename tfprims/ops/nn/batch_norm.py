"""Batch normalization: FusedBatchNorm{,V2,V3} and FusedBatchNormGrad{,V2,V3}.

Values follow TF's CPU kernels (docs/semantics/nn.md): training mode computes batch
statistics (batch_variance Bessel-corrected, reserve spaces the batch mean and biased
variance), inference mode echoes mean/variance, everything computed in U (float32).
The forward ops use the derived rules (jax.jvp/vmap of the impl). The grad ops read the
reserve spaces as mean and biased variance, as TF's CPU kernel does; their JVP is TF's
derivative (its registered gradient differentiates ``_BatchNormGrad``: statistics
re-derived from x in training mode, none for the reserve spaces).
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax
from jax.interpreters import ad

from tfprims import rules
from tfprims.core import register_op
from tfprims.ops.nn._common import _ONEDNN_DTYPES, _channel_axis
from tfprims.ops.nn._specs import _layout_shape, _onednn_dtypes, _tf_call
from tfprims.ops.shared_specs import bounded_values


def _fused_batch_norm(
  x,
  scale,
  offset,
  mean,
  variance,
  *,
  epsilon=1e-4,
  exponential_avg_factor=1.0,
  data_format="NHWC",
  is_training=True,
  version=3,
):
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
  if x.size == 0:  # what TF's CPU kernel returns for an empty batch, in both modes
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
    dtype = "float32" if version == 1 else draw(st.sampled_from(_onednn_dtypes(st)))
    n, c = draw(st.integers(1, 3)), draw(st.integers(1, 3))
    spatial = [draw(st.integers(1, 3)) for _ in range(2)]
    shape = _layout_shape(fmt, n, c, spatial)
    u = "float32"
    return dict(
      x=draw(bounded_values(st, dtype, shape, bound=4.0)),
      scale=draw(bounded_values(st, u, (c,))),
      offset=draw(bounded_values(st, u, (c,))),
      mean=draw(bounded_values(st, u, (c,))),
      variance=draw(st.arrays(u, (c,), special=False, min_value=0.0, max_value=4.0)),
      epsilon=draw(st.sampled_from([1e-3, 1e-4, 0.1])),
      exponential_avg_factor=draw(st.sampled_from([1.0, 0.5, 0.1])),
      data_format=fmt,
      is_training=draw(st.booleans()),
    )

  return draw_call()


_FBN_ATTRS = ("epsilon", "exponential_avg_factor", "data_format", "is_training")
_FBN_SKIP = (
  "TF's gradient uses only y's cotangent (side outputs get none) and gives mean/"
  "variance no gradient in inference mode; ours differentiates every output: "
  "tests/test_ops_nn.py checks y's gradients against TF."
)
_FBN_NOTE = (
  "Drawn for float32/bfloat16 4-D x (TF's oneDNN path): TF's Eigen path (float16, "
  "5-D) leaves reserve spaces uninitialised in inference mode and makes "
  "reserve_space_3 a scalar; ours are mean/variance and an empty vector."
)


def _fbn_spec(st, version):
  return st.Spec(
    _fbn_calls(st, version),
    skip={"jvp": _FBN_SKIP, "vjp": _FBN_SKIP},
    rtol={"float32": 1e-4, "bfloat16": 2e-2},
    atol={"float32": 1e-4, "bfloat16": 5e-2},
    note=_FBN_NOTE,
  )


def _fbn_shape(version):
  def rule(x, scale, offset, mean, variance, **params):
    side = jax.ShapeDtypeStruct(scale.shape, scale.dtype)
    reserve_3 = [jax.ShapeDtypeStruct((0,), scale.dtype)] if version == 3 else []
    return [jax.ShapeDtypeStruct(x.shape, x.dtype)] + [side] * 4 + reserve_3

  return rule


FusedBatchNormV3 = register_op(
  "FusedBatchNormV3",
  functools.partial(_fused_batch_norm, version=3),
  family="nn",
  attrs=_FBN_ATTRS,
  multiple_results=True,
  shape_rule=_fbn_shape(3),
  spec=lambda st: _fbn_spec(st, 3),
)

FusedBatchNormV2 = register_op(
  "FusedBatchNormV2",
  functools.partial(_fused_batch_norm, version=2),
  family="nn",
  attrs=_FBN_ATTRS,
  multiple_results=True,
  spec=lambda st: _fbn_spec(st, 2),
)

FusedBatchNorm = register_op(
  "FusedBatchNorm",
  functools.partial(_fused_batch_norm, version=1),
  family="nn",
  attrs=_FBN_ATTRS,
  multiple_results=True,
  spec=lambda st: _fbn_spec(st, 1),
)


def _plus_zero(v):
  """``v`` with -0.0 as +0.0: a sum that starts from +0.0 (XLA rewrites a one-term sum
  as its term, and folds an explicit ``+ 0.0`` away)."""
  return jnp.where(v == 0, jnp.zeros((), v.dtype), v)


def _batch_norm_backprop(
  dy, x, scale, mean, var, *, epsilon, data_format, is_training, batch_stats, onednn=False
):
  """(x_backprop, scale_backprop, offset_backprop) in U. In training mode the statistics
  are ``mean``/``var``, or with ``batch_stats`` the moments of ``x`` (TF's Python
  formula, _BatchNormGrad). ``onednn``: TF's oneDNN kernel's zero signs (its sums start
  from +0.0, its training x_backprop groups ``dy - (mean(dy) + x_c * ...)``); otherwise
  its Eigen kernel's (a one-term sum is the term, ``dy - mean(dy) - x_c * ...``)."""
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
  dy_x = jnp.sum(dy * x_offset, axis=axes)
  if onednn:
    offset_backprop, dy_x = _plus_zero(offset_backprop), _plus_zero(dy_x)
  scale_backprop = dy_x * inv
  if is_training and onednn:
    n = np.array(1.0 / max(x.size // max(x.shape[ch], 1), 1), u)
    x_backprop = bc(scale * inv) * (
      dy - (bc(offset_backprop * n) + x_offset * bc(scale_backprop * inv * n))
    )
  elif is_training:
    dy_offset = dy - bc(jnp.mean(dy, axis=axes))
    m = jnp.mean(dy * x_offset, axis=axes)
    x_backprop = bc(scale * inv) * (dy_offset - bc(m * jnp.square(inv)) * x_offset)
  else:
    x_backprop = dy * bc(scale * inv)
  if x.size == 0:
    x_backprop = jnp.zeros(x.shape, u)
  return x_backprop, scale_backprop, offset_backprop


def _fused_batch_norm_grad(
  y_backprop,
  x,
  scale,
  reserve_space_1,
  reserve_space_2,
  *reserve_space_3,
  epsilon=1e-4,
  data_format="NHWC",
  is_training=True,
):
  """TF FusedBatchNormGrad{,V2,V3}: (x_backprop, scale_backprop, offset_backprop) and two
  empty reserve outputs (scalars, as TF's CPU kernel). reserve_space_1/2 are read as the
  mean and (biased) variance, as TF's CPU kernel does."""
  del reserve_space_3
  # TF's CPU kernel: oneDNN for 4-D float32/bfloat16, Eigen otherwise (float16, 5-D)
  onednn = x.ndim == 4 and np.dtype(x.dtype).name in _ONEDNN_DTYPES
  dx, ds, do = _batch_norm_backprop(
    y_backprop,
    x,
    scale,
    reserve_space_1,
    reserve_space_2,
    epsilon=epsilon,
    data_format=data_format,
    is_training=is_training,
    batch_stats=False,
    onednn=onednn,
  )
  zeros = jnp.zeros((), scale.dtype)
  return (dx.astype(x.dtype), ds, do, zeros, zeros)


def _fused_batch_norm_grad_jvp(op):
  """TF's derivative of the op (its registered gradient differentiates _BatchNormGrad):
  in training mode the statistics are the moments of x, the reserve spaces get none."""

  def rule(primals, tangents, **p):
    out = op(*primals, **p)
    dy, x, scale, rs1, rs2 = primals[:5]
    live = [ad.instantiate_zeros(t) for t in tangents[:3]]
    f = lambda a, b, c: _batch_norm_backprop(
      a, b, c, lax.stop_gradient(rs1), lax.stop_gradient(rs2), batch_stats=True, **p
    )
    _, (tx, ts, to) = jax.jvp(f, (dy, x, scale), tuple(live))
    zero = jnp.zeros((), scale.dtype)
    return out, [tx.astype(x.dtype), ts, to, zero, zero]

  return rule


def _fbn_grad_calls(st, version):
  @st.composite
  def draw_call(draw):
    fmt = draw(st.sampled_from(("NHWC", "NCHW")))
    dtype = "float32" if version == 1 else draw(st.sampled_from(_onednn_dtypes(st)))
    n, c = draw(st.integers(1, 3)), draw(st.integers(1, 3))
    shape = _layout_shape(fmt, n, c, [draw(st.integers(1, 3)) for _ in range(2)])
    u = "float32" if version > 1 else dtype
    x = draw(bounded_values(st, dtype, shape, bound=4.0))
    training = draw(st.booleans())
    call = dict(
      y_backprop=draw(bounded_values(st, dtype, shape)),
      x=x,
      scale=draw(bounded_values(st, u, (c,))),
      reserve_space_1=draw(bounded_values(st, u, (c,))),
      reserve_space_2=draw(st.arrays(u, (c,), special=False, min_value=0.0, max_value=4.0)),
      # epsilon >= 0.1: with a constant channel (variance 0) the derivatives scale like
      # epsilon ** -1.5 times the float32 rounding of the mean, which XLA and TF differ in
      epsilon=draw(st.sampled_from([0.1, 0.5])),
      data_format=fmt,
      is_training=training,
    )
    if training:  # reserve spaces as the forward op saves them (TF's gradient assumes it)
      ones = np.ones((c,), np.float32)
      fwd = _tf_call(
        "FusedBatchNormV3",
        dict(x=x, scale=ones, offset=ones, mean=ones, variance=ones, data_format=fmt),
      )
      call.update(reserve_space_1=fwd[3].numpy(), reserve_space_2=fwd[4].numpy())
    if version == 3:
      call["reserve_space_3"] = np.zeros((0,), np.float32)
    return call

  return draw_call()


def _fbn_grad_spec(st, version):
  return st.Spec(
    _fbn_grad_calls(st, version),
    diff_args=("y_backprop", "x", "scale"),
    rtol={"float32": 1e-4, "bfloat16": 5e-2},
    atol={"float32": 1e-4, "bfloat16": 1e-1},
    note="Values read the reserve spaces as mean and biased variance (TF's CPU "
    "kernel); derivatives are TF's (statistics re-derived from x in "
    "training mode, none for the reserve spaces).",
  )


_FBN_GRAD_ATTRS = ("epsilon", "data_format", "is_training")

FusedBatchNormGradV3 = register_op(
  "FusedBatchNormGradV3",
  _fused_batch_norm_grad,
  family="nn",
  attrs=_FBN_GRAD_ATTRS,
  multiple_results=True,
  jvp=rules.per_op(_fused_batch_norm_grad_jvp),
  spec=lambda st: _fbn_grad_spec(st, 3),
)

FusedBatchNormGradV2 = register_op(
  "FusedBatchNormGradV2",
  _fused_batch_norm_grad,
  family="nn",
  attrs=_FBN_GRAD_ATTRS,
  multiple_results=True,
  jvp=rules.per_op(_fused_batch_norm_grad_jvp),
  spec=lambda st: _fbn_grad_spec(st, 2),
)

FusedBatchNormGrad = register_op(
  "FusedBatchNormGrad",
  _fused_batch_norm_grad,
  family="nn",
  attrs=_FBN_GRAD_ATTRS,
  multiple_results=True,
  jvp=rules.per_op(_fused_batch_norm_grad_jvp),
  spec=lambda st: _fbn_grad_spec(st, 1),
)
