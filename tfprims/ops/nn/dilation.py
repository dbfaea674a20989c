"""Grayscale morphological dilation: Dilation2D, Dilation2DBackpropInput,
Dilation2DBackpropFilter (NHWC input, [H, W, C] filter, per channel).

``out[b, y, x, c] = max over (i, j) of input[b, y*sh + i*rh - pad_top, x*sw + j*rw - pad_left, c]
+ filter[i, j, c]``, over the window positions inside the input. Semantics follow TF's
CPU kernels, which scan the window in row-major order from the dtype's lowest finite
value and keep a candidate only when it is strictly greater:

* NaN never wins; a window without a winner (all NaN or -inf) gives the lowest finite
  value (bfloat16 included);
* ties go to the first position;
* the backprops send each output's gradient to the winner; without one, to the window's
  start clamped into the input (input) and to filter position (0, 0) (filter).

Rules: TF registers Dilation2D's gradient as (Dilation2DBackpropInput,
Dilation2DBackpropFilter) and no gradient for those. The JVP of Dilation2D is
derived: it gathers the tangents at TF's winners (TF has no op for it, so jax.grad shows
lax gathers/scatters rather than the backprop ops); it is the exact transpose of TF's
backprops, defaults included. The backprops are linear in ``out_backprop`` (TF-named
JVPs; their transposes are gathers at the winners, derived). vmap of all three merges
the batch axis into the channels (dilation is per channel), re-binding the TF op.
"""

from __future__ import annotations

import itertools

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax
from jax.interpreters import ad

from tfprims import rules
from tfprims.core import register_op, tfops
from tfprims.ops.nn._common import (
  _batch_into_axis,
  _lowest,
  _out_size,
  _same_pad,
  _split_axis,
)
from tfprims.ops.nn._specs import _tf_accepts, _tf_call
from tfprims.ops.shared_specs import bounded_values


def _geometry(in_shape, f_shape, strides, rates, padding):
  """(pads, out_hw) of the two spatial dims."""
  pads, outs = [], []
  for n, k, s, r in zip(in_shape[1:3], f_shape[:2], strides[1:3], rates[1:3]):
    if padding == "SAME":
      p = _same_pad(n, k, s, r)
    elif padding == "VALID":
      p = (0, 0)
    else:
      raise ValueError(f"Dilation2D: unknown padding {padding!r}")
    pads.append(p)
    outs.append(_out_size(n, k, s, r, p))
  return pads, outs


def _scan(input, filter, strides, rates, padding):
  """TF's window scan: (max, winner offset i*fw + j or -1) per output element."""
  n, h, w, c = input.shape
  fh, fw, _ = filter.shape
  ((pt, pb), (pl, pr)), (oh, ow) = _geometry(input.shape, filter.shape, strides, rates, padding)
  sh, sw, rh, rw = strides[1], strides[2], rates[1], rates[2]
  xp = jnp.pad(input, ((0, 0), (pt, pb), (pl, pr), (0, 0)))
  cur = jnp.full((n, oh, ow, c), _lowest(input.dtype))
  idx = jnp.full((n, oh, ow, c), -1, np.int32)
  if cur.size == 0:
    return cur, idx
  arrays = rules.numpy_for((h, w, oh, ow))  # symbolic image sizes: the program's masks
  ys, xs = arrays.arange(oh) * sh - pt, arrays.arange(ow) * sw - pl
  for i, j in itertools.product(range(fh), range(fw)):
    # Mask of the window positions inside the input (trace-time constants if known).
    inside = ((ys + i * rh >= 0) & (ys + i * rh < h))[:, None] & (
      (xs + j * rw >= 0) & (xs + j * rw < w)
    )[None, :]
    patch = lax.slice(
      xp,
      (0, i * rh, j * rw, 0),
      (n, i * rh + (oh - 1) * sh + 1, j * rw + (ow - 1) * sw + 1, c),
      (1, sh, sw, 1),
    )
    val = patch + filter[i, j]
    take = jnp.asarray(inside[None, :, :, None]) & (val > cur)
    cur = jnp.where(take, val, cur)
    idx = jnp.where(take, np.int32(i * fw + j), idx)
  return cur, idx


def _winners(input, filter, strides, rates, padding):
  """Flat indices into ``input`` and ``filter`` that each output's gradient goes to
  (TF's defaults where a window has no winner)."""
  n, h, w, c = input.shape
  fh, fw, _ = filter.shape
  (pt, _), (pl, _) = _geometry(input.shape, filter.shape, strides, rates, padding)[0]
  _, idx = _scan(input, filter, strides, rates, padding)
  oh, ow = idx.shape[1:3]
  i, j = idx // fw, idx % fw
  xp = rules.numpy_for((n, h, w, oh, ow))  # symbolic sizes: the program's indices
  y0 = (xp.arange(oh) * strides[1] - pt).reshape(1, oh, 1, 1)
  x0 = (xp.arange(ow) * strides[2] - pl).reshape(1, 1, ow, 1)
  none = idx < 0
  yy = jnp.where(none, xp.maximum(y0, 0), y0 + i * rates[1])
  xx = jnp.where(none, xp.maximum(x0, 0), x0 + j * rates[2])
  b = xp.arange(n).reshape(n, 1, 1, 1)
  ch = np.arange(c).reshape(1, 1, 1, c)
  flat_in = ((b * h + yy) * w + xx) * c + ch
  flat_f = jnp.where(none, 0, idx) * c + ch
  return flat_in, flat_f


def dilation2d(input, filter, *, strides, rates, padding):
  """TF Dilation2D."""
  return _scan(input, filter, strides, rates, padding)[0]


def dilation2d_backprop_input(input, filter, out_backprop, *, strides, rates, padding):
  """TF Dilation2DBackpropInput: ``out_backprop`` added at each window's winner."""
  flat_in, _ = _winners(input, filter, strides, rates, padding)
  out = jnp.zeros((input.size,), out_backprop.dtype)
  out = out.at[flat_in.reshape(-1)].add(out_backprop.reshape(-1), mode="drop")
  return out.reshape(input.shape)


def dilation2d_backprop_filter(input, filter, out_backprop, *, strides, rates, padding):
  """TF Dilation2DBackpropFilter: ``out_backprop`` summed at each window's winning
  filter position."""
  _, flat_f = _winners(input, filter, strides, rates, padding)
  out = jnp.zeros((filter.size,), out_backprop.dtype)
  out = out.at[flat_f.reshape(-1)].add(out_backprop.reshape(-1), mode="drop")
  return out.reshape(filter.shape)


def _dilation_jvp(primals, tangents, *, strides, rates, padding):
  """Derived (TF has no op for it): the tangents read at TF's winners."""
  x, f = primals
  tx, tf_ = (ad.instantiate_zeros(t) for t in tangents)
  y = tfops.Dilation2D(x, f, strides=strides, rates=rates, padding=padding)
  flat_in, flat_f = _winners(x, f, strides, rates, padding)
  return y, tx.reshape(-1)[flat_in] + tf_.reshape(-1)[flat_f]


def _backprop_transpose(which):
  """Derived: the transpose of a backprop in ``out_backprop`` reads the cotangent at the
  winners (a gather; TF has no op for it)."""

  def rule(ct, x, f, g, **p):
    flat_in, flat_f = _winners(x, f, **p)
    flat = flat_in if which == "input" else flat_f
    return [None, None, ad.instantiate_zeros(ct).reshape(-1)[flat]]

  return rule


def _channel_batching(op):
  """vmap: the batch axis merged into the channels (the last axis of every operand),
  B-major, and split back from the output's channels."""

  def rule(args, dims, **p):
    b = rules.batch_size(args, dims)
    merged = [
      _batch_into_axis(a, d, np.ndim(a) - (d is not None) - 1, b) for a, d in zip(args, dims)
    ]
    out = op(*merged, **p)
    out = _split_axis(out, out.ndim - 1, b)
    return jnp.moveaxis(out, out.ndim - 2, 0), 0

  return rule


def _dilation_shape(input, filter, *, strides, rates, padding):
  _, (oh, ow) = _geometry(input.shape, filter.shape, strides, rates, padding)
  return jax.ShapeDtypeStruct((input.shape[0], oh, ow, input.shape[3]), input.dtype)


def _dilation_calls(st, op_type, dtypes):
  """Calls of the three ops: windows with ties, NaN and -inf (floats) and padding."""
  from hypothesis import assume
  from hypothesis.extra import numpy as hnp

  @st.composite
  def draw_call(draw):
    dtype = draw(st.sampled_from(dtypes))
    dt = st.np_dtype(dtype)
    n, c = draw(st.integers(1, 2)), draw(st.integers(1, 2))
    fh, fw = draw(st.integers(1, 3)), draw(st.integers(1, 3))
    sh, sw = draw(st.integers(1, 2)), draw(st.integers(1, 2))
    rh, rw = draw(st.integers(1, 2)), draw(st.integers(1, 2))
    padding = draw(st.sampled_from(("SAME", "VALID")))
    h = draw(st.integers((fh - 1) * rh + 1 if padding == "VALID" else 1, 5))
    w = draw(st.integers((fw - 1) * rw + 1 if padding == "VALID" else 1, 5))
    if st.is_float(dt):
      if draw(st.booleans()):
        levels = [0.0, 1.0, 2.0, np.nan, -np.inf]
        x = draw(hnp.arrays(dt, (n, h, w, c), elements=st.sampled_from(levels))).astype(dt)
        f = draw(hnp.arrays(dt, (fh, fw, c), elements=st.sampled_from([0.0, 1.0]))).astype(dt)
      else:
        x = draw(bounded_values(st, dtype, (n, h, w, c)))
        f = draw(bounded_values(st, dtype, (fh, fw, c)))
    else:
      # Small integers: TF's sums overflow (undefined in C++) otherwise.
      x = draw(hnp.arrays(dt, (n, h, w, c), elements=st.integers(0, 50)))
      f = draw(hnp.arrays(dt, (fh, fw, c), elements=st.integers(0, 3)))
    attrs = dict(strides=[1, sh, sw, 1], rates=[1, rh, rw, 1], padding=padding)
    fwd = dict(input=x, filter=f, **attrs)
    assume(_tf_accepts("Dilation2D", fwd))
    if op_type == "Dilation2D":
      return fwd
    y = _tf_call("Dilation2D", fwd).numpy()
    g = (
      draw(bounded_values(st, dtype, y.shape))
      if st.is_float(dt)
      else draw(hnp.arrays(dt, y.shape, elements=st.integers(0, 20)))
    )
    return dict(input=x, filter=f, out_backprop=g, **attrs)

  return draw_call()


_ATTRS = ("strides", "rates", "padding")
_DTYPES = (
  "float16",
  "bfloat16",
  "float32",
  "float64",
  "int8",
  "int16",
  "int32",
  "int64",
  "uint8",
  "uint16",
  "uint32",
  "uint64",
)
_TOL = dict(rtol={"float16": 1e-2, "bfloat16": 2e-2}, atol={"float16": 1e-2, "bfloat16": 2e-2})

Dilation2D = register_op(
  "Dilation2D",
  dilation2d,
  family="nn",
  attrs=_ATTRS,
  shape_rule=_dilation_shape,
  jvp=_dilation_jvp,
  batching=rules.per_op(_channel_batching),
  spec=rules.per_op(
    lambda op: (
      lambda st: st.Spec(
        _dilation_calls(st, op.op_type, _DTYPES),
        sanitize_grads=False,
        **_TOL,
        note="TF's scan: NaN never wins, ties go to the first position, windows without a "
        "winner give the lowest finite value; the gradient follows TF's backprops.",
      )
    )
  ),
)

_BACKPROP_NOTE = (
  "TF registers no gradient: the derivative in out_backprop (linear) is "
  "checked by central differences, the transpose against our JVP."
)

Dilation2DBackpropInput = register_op(
  "Dilation2DBackpropInput",
  dilation2d_backprop_input,
  family="nn",
  attrs=_ATTRS,
  jvp=(None, None, lambda t, x, f, g, **p: tfops.Dilation2DBackpropInput(x, f, t, **p)),
  transpose=_backprop_transpose("input"),
  batching=rules.per_op(_channel_batching),
  spec=rules.per_op(
    lambda op: (
      lambda st: st.Spec(
        _dilation_calls(st, op.op_type, _DTYPES),
        diff_args=("out_backprop",),
        grad_oracle="fd",
        **_TOL,
        note=_BACKPROP_NOTE,
      )
    )
  ),
)

Dilation2DBackpropFilter = register_op(
  "Dilation2DBackpropFilter",
  dilation2d_backprop_filter,
  family="nn",
  attrs=_ATTRS,
  jvp=(None, None, lambda t, x, f, g, **p: tfops.Dilation2DBackpropFilter(x, f, t, **p)),
  transpose=_backprop_transpose("filter"),
  batching=rules.per_op(_channel_batching),
  spec=rules.per_op(
    lambda op: (
      lambda st: st.Spec(
        _dilation_calls(st, op.op_type, _DTYPES),
        diff_args=("out_backprop",),
        grad_oracle="fd",
        **_TOL,
        note=_BACKPROP_NOTE,
      )
    )
  ),
)
