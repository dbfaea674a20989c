"""Fake quantization (quantization-aware training): FakeQuantWithMinMaxArgs, ...Vars,
...VarsPerChannel and their Gradient ops.

Values are TF's functors (fake_quant_ops_functor.h) in float32: ``[min, max]`` nudged so
that zero is exactly representable on the grid of ``2**num_bits`` levels (one fewer with
``narrow_range``), inputs clamped to the nudged range and rounded to the grid with
``floor(x / scale + 0.5)``. Derivatives are TF's straight-through estimator: the input's
tangent passes where ``nudged_min <= x <= nudged_max``; min's (max's) tangent reaches the
elements below (above) the range. The forward JVPs bind the Gradient op for the input
part (the Gradient ops are linear in ``gradients``, with transposes written with
themselves), so grad jaxprs show TF's gradient op.
"""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np
from jax.interpreters import ad

from tfprims import derived, rules
from tfprims.core import register_op, tfops

_F32 = np.float32


def _nudge(mn, mx, num_bits, narrow_range):
  """TF's Nudge: (nudged_min, nudged_max, scale) in float32."""
  qmin = _F32(1 if narrow_range else 0)
  qmax = _F32((1 << num_bits) - 1)
  mn, mx = jnp.asarray(mn, _F32), jnp.asarray(mx, _F32)
  scale = (mx - mn) / (qmax - qmin)
  zp_from_min = qmin - mn / scale
  # std::round (half away from zero) of a value clamped to [qmin, qmax] (>= 0)
  low = jnp.floor(zp_from_min)
  rounded = low + (zp_from_min - low >= _F32(0.5)).astype(_F32)
  zp = jnp.where(zp_from_min < qmin, qmin, jnp.where(zp_from_min > qmax, qmax, rounded))
  return (qmin - zp) * scale, (qmax - zp) * scale, scale


def _quantize(x, nmin, nmax, scale):
  clamped = jnp.maximum(jnp.minimum(x, nmax), nmin)
  inv = _F32(1.0) / scale
  return jnp.floor((clamped - nmin) * inv + _F32(0.5)) * scale + nmin


def _fq_args(inputs, *, min=-6.0, max=6.0, num_bits=8, narrow_range=False):
  """TF FakeQuantWithMinMaxArgs: inputs quantized to the nudged [min, max] grid."""
  return _quantize(inputs, *_nudge(min, max, num_bits, narrow_range))


def _fq_args_grad(gradients, inputs, *, min=-6.0, max=6.0, num_bits=8, narrow_range=False):
  """TF FakeQuantWithMinMaxArgsGradient: gradients where inputs lie in the nudged range."""
  nmin, nmax, _ = _nudge(min, max, num_bits, narrow_range)
  return _masked(gradients, (inputs >= nmin) & (inputs <= nmax))


def _masked(gradients, mask):
  """``gradients * mask`` as TF's kernels compute it (not a select): outside the mask an
  infinite or NaN gradient gives NaN and a negative one -0.0. (XLA rewrites a product
  with a converted mask as a select, so the product outside it is written out.)"""
  return jnp.where(mask, gradients, gradients * jnp.zeros((), gradients.dtype))


def _fq_vars(inputs, mn, mx, *, num_bits=8, narrow_range=False):
  """TF FakeQuantWithMinMaxVars (scalar min/max) and ...PerChannel ([d] min/max along
  the last axis): inputs quantized to the nudged grid."""
  return _quantize(inputs, *_nudge(mn, mx, num_bits, narrow_range))


def _masks(inputs, mn, mx, num_bits, narrow_range):
  nmin, nmax, _ = _nudge(mn, mx, num_bits, narrow_range)
  return (inputs >= nmin) & (inputs <= nmax), inputs < nmin, inputs > nmax


def _fq_vars_grad(gradients, inputs, mn, mx, *, num_bits=8, narrow_range=False):
  """TF FakeQuantWithMinMaxVars(PerChannel)Gradient: (gradients inside the nudged range,
  the sum of those below it, the sum of those above it), per channel for PerChannel."""
  inside, below, above = _masks(inputs, mn, mx, num_bits, narrow_range)
  axes = tuple(range(inputs.ndim - mn.ndim))
  return (
    _masked(gradients, inside),
    jnp.sum(_masked(gradients, below), axis=axes),
    jnp.sum(_masked(gradients, above), axis=axes),
  )


# --------------------------------------------------------------------------
# Rules
# --------------------------------------------------------------------------


def _args_grad_transpose(ct, gradients, inputs, **p):
  # a diagonal 0/1 mask: its own transpose
  return [tfops.FakeQuantWithMinMaxArgsGradient(ct, inputs, **p), None]


def _mask_like(mask, x):
  return tfops.Cast(mask, DstT=rules.dtype_of(x), Truncate=False)


def _vars_jvp(op):
  grad_op = op.op_type + "Gradient"

  def rule(primals, tangents, **p):
    x, mn, mx = primals
    out = op(x, mn, mx, **p)
    tx, tmin, tmax = tangents
    terms = []
    if type(tx) is not ad.Zero:
      terms.append(getattr(tfops, grad_op)(tx, x, mn, mx, **p)[0])
    if type(tmin) is not ad.Zero or type(tmax) is not ad.Zero:
      _, below, above = _masks(x, mn, mx, **p)
      shape = rules.shape_of(x)
      for t, mask in ((tmin, below), (tmax, above)):
        if type(t) is not ad.Zero:
          terms.append(tfops.Mul(tfops.BroadcastTo(t, shape=shape), _mask_like(mask, x)))
    if not terms:
      return out, rules.zero_tangent(out)
    tangent = terms[0]
    for t in terms[1:]:
      tangent = tfops.AddV2(tangent, t)
    return out, tangent

  return rule


def _vars_grad_transpose(op):
  """The Gradient op is linear in ``gradients``: its transpose maps the cotangents of
  (backprops, backprop_wrt_min, backprop_wrt_max) back through the three masks."""

  def rule(cts, gradients, inputs, mn, mx, **p):
    c_x, c_min, c_max = cts
    shape = rules.shape_of(inputs)
    terms = []
    if type(c_x) is not ad.Zero:
      terms.append(op(c_x, inputs, mn, mx, **p)[0])
    if type(c_min) is not ad.Zero or type(c_max) is not ad.Zero:
      _, below, above = _masks(inputs, mn, mx, **p)
      for c, mask in ((c_min, below), (c_max, above)):
        if type(c) is not ad.Zero:
          terms.append(tfops.Mul(tfops.BroadcastTo(c, shape=shape), _mask_like(mask, inputs)))
    if not terms:
      return [None, None, None, None]
    total = terms[0]
    for t in terms[1:]:
      total = tfops.AddV2(total, t)
    return [total, None, None, None]

  return rule


def _vars_batching(op, per_channel):
  """vmap: a batched input alone re-binds the op (min/max are scalars, or per channel
  along the last axis, which the batch axis moved to the front leaves last); batched
  min/max fall back to jax.vmap of the impl."""
  fallback = derived.vmap_batching(_fq_vars, False)

  def rule(args, dims, **p):
    (x, mn, mx), (dx, dmin, dmax) = args, dims
    if dmin is not None or dmax is not None:
      return fallback(args, dims, **p)
    if per_channel:
      x, dx = rules.to_front(x, dx), 0
    return op(x, mn, mx, **p), dx

  return rule


# --------------------------------------------------------------------------
# Specs
# --------------------------------------------------------------------------


def _range(draw, st, shape=()):
  lo = np.asarray(
    draw(st.arrays("float32", shape, special=False, min_value=-6.0, max_value=0.0)), np.float32
  )
  width = np.asarray(
    draw(st.arrays("float32", shape, special=False, min_value=0.5, max_value=12.0)), np.float32
  )
  return lo, (lo + width).astype(np.float32)


def _fq_calls(st, kind, grad):
  @st.composite
  def draw_call(draw):
    shape = draw(
      st.shapes(
        min_rank=1 if kind == "channel" else 0,
        max_rank=3,
        min_side=1 if kind == "channel" else 0,
        max_side=4,
      )
    )
    call = dict(
      inputs=draw(st.arrays("float32", shape, special=False, min_value=-8.0, max_value=8.0)),
      # 16 bits: TF's kernel rounds some ties to the other level
      # (tests/test_rnn_blocks.py)
      num_bits=draw(st.sampled_from([8, 2, 4, 5])),
      narrow_range=draw(st.booleans()),
    )
    if kind == "args":
      lo, hi = _range(draw, st)
      call.update(min=float(lo), max=float(hi))
    else:
      lo, hi = _range(draw, st, (shape[-1],) if kind == "channel" else ())
      call.update(min=lo, max=hi)
    if grad:
      call = dict(
        gradients=draw(st.arrays("float32", shape, special=False, min_value=-2.0, max_value=2.0)),
        **call,
      )
    return call

  return draw_call()


_NOTE = (
  "Derivatives: TF's straight-through estimator (the Gradient op's masks). TF's "
  "ForwardAccumulator gives zero tangents (its double-backward trick meets the "
  "Gradient op, which has no TF gradient): the JVP is checked against GradientTape."
)
_FQ_ATTRS = ("num_bits", "narrow_range")

FakeQuantWithMinMaxArgs = register_op(
  "FakeQuantWithMinMaxArgs",
  _fq_args,
  family="nn",
  attrs=("min", "max", "num_bits", "narrow_range"),
  batching="elementwise",
  jvp=rules.per_op(
    rules.output_jvp, lambda t, y, x, **p: tfops.FakeQuantWithMinMaxArgsGradient(t, x, **p)
  ),
  spec=lambda st: st.Spec(_fq_calls(st, "args", False), note=_NOTE, grad_oracle="vjp"),
)

FakeQuantWithMinMaxArgsGradient = register_op(
  "FakeQuantWithMinMaxArgsGradient",
  _fq_args_grad,
  family="nn",
  attrs=("min", "max", "num_bits", "narrow_range"),
  batching="elementwise",
  jvp=(lambda t, g, x, **p: tfops.FakeQuantWithMinMaxArgsGradient(t, x, **p), None),
  transpose=_args_grad_transpose,
  spec=lambda st: st.Spec(_fq_calls(st, "args", True), diff_args=("gradients",)),
)

FakeQuantWithMinMaxVars = register_op(
  "FakeQuantWithMinMaxVars",
  _fq_vars,
  family="nn",
  attrs=_FQ_ATTRS,
  jvp=rules.per_op(_vars_jvp),
  batching=rules.per_op(_vars_batching, False),
  spec=lambda st: st.Spec(_fq_calls(st, "vars", False), note=_NOTE, grad_oracle="vjp"),
)

FakeQuantWithMinMaxVarsPerChannel = register_op(
  "FakeQuantWithMinMaxVarsPerChannel",
  _fq_vars,
  family="nn",
  attrs=_FQ_ATTRS,
  jvp=rules.per_op(_vars_jvp),
  batching=rules.per_op(_vars_batching, True),
  spec=lambda st: st.Spec(_fq_calls(st, "channel", False), note=_NOTE, grad_oracle="vjp"),
)


def _vars_grad_jvp(op):
  def rule(primals, tangents, **p):
    out = op(*primals, **p)
    tg = tangents[0]
    if type(tg) is ad.Zero:
      return out, [rules.zero_tangent(o) for o in out]
    return out, list(op(tg, *primals[1:], **p))

  return rule


FakeQuantWithMinMaxVarsGradient = register_op(
  "FakeQuantWithMinMaxVarsGradient",
  _fq_vars_grad,
  family="nn",
  attrs=_FQ_ATTRS,
  multiple_results=True,
  jvp=rules.per_op(_vars_grad_jvp),
  transpose=rules.per_op(_vars_grad_transpose),
  spec=lambda st: st.Spec(_fq_calls(st, "vars", True), diff_args=("gradients",)),
)

FakeQuantWithMinMaxVarsPerChannelGradient = register_op(
  "FakeQuantWithMinMaxVarsPerChannelGradient",
  _fq_vars_grad,
  family="nn",
  attrs=_FQ_ATTRS,
  multiple_results=True,
  jvp=rules.per_op(_vars_grad_jvp),
  transpose=rules.per_op(_vars_grad_transpose),
  spec=lambda st: st.Spec(_fq_calls(st, "channel", True), diff_args=("gradients",)),
)
