"""Along an axis: ReverseV2 and the scans Cumsum, Cumprod, CumulativeLogsumexp.

ReverseV2 and Cumsum are linear (ReverseV2 transposes to itself, Cumsum to
Cumsum with ``reverse`` flipped); Cumprod's derivatives are derived from its impl
(JAX's exact derivative, where TF's gradient divides by ``x`` and misses the
conjugation for complex inputs). The scans are ``lax.cumsum``/``lax.cumprod``
with ``exclusive`` done by a shift; summation order differs from TF's Eigen scan
(docs/semantics/array.md). CumulativeLogsumexp is TF's sequential scan (its
combine step and its NaN handling, docs/semantics/elementwise.md); its
derivative is a linear recurrence run by ``lax.scan`` (see ``_clse_jvp``).
"""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np
from jax import lax
from jax.interpreters import ad

from tfprims import rules
from tfprims.core import register_op, tfops
from tfprims.ops.array._common import FAMILY, norm_axis
from tfprims.ops.shared import ints, scalar_int
from tfprims.ops.shared_specs import index_array, lazy_hst
from tfprims.errors import import_tensorflow


def _reverse_axes(axis, rank) -> tuple:
  axes = [norm_axis(a, rank) for a in ints(axis)]
  if len(set(axes)) != len(axes):
    raise ValueError(f"ReverseV2: an axis is specified more than once in {ints(axis)}")
  return tuple(sorted(axes))


def _reverse_impl(tensor, *, axis):
  axes = _reverse_axes(axis, tensor.ndim)
  return lax.rev(tensor, axes) if axes else tensor


def _reverse_batch(args, dims, *, axis):
  (x,), (d,) = args, dims
  axes = _reverse_axes(axis, x.ndim - 1)
  return tfops.ReverseV2(rules.to_front(x, d), axis=tuple(a + 1 for a in axes)), 0


ReverseV2 = register_op(
  "ReverseV2",
  _reverse_impl,
  family=FAMILY,
  static=("axis",),
  linear=True,
  transpose=lambda ct, x, *, axis: [tfops.ReverseV2(ct, axis=axis)],
  batching=_reverse_batch,
  spec=lambda st: st.Spec(_reverse_calls(st)),
)


def _scan(x, axis, exclusive, reverse, kind):
  ax = norm_axis(scalar_int(axis), x.ndim)
  n = x.shape[ax]
  fn = lax.cumsum if kind == "sum" else lax.cumprod
  if n == 0:
    return x
  if x.dtype == np.bool_:
    raise TypeError(f"Cum{kind}: bool is not supported")
  out = fn(x, axis=ax, reverse=reverse)
  if exclusive:
    unit = jnp.full(x.shape[:ax] + (1,) + x.shape[ax + 1 :], 0 if kind == "sum" else 1, x.dtype)
    if reverse:
      out = jnp.concatenate([lax.slice_in_dim(out, 1, n, axis=ax), unit], axis=ax)
    else:
      out = jnp.concatenate([unit, lax.slice_in_dim(out, 0, n - 1, axis=ax)], axis=ax)
  return out


def _cumsum_impl(x, *, axis, exclusive, reverse):
  return _scan(x, axis, exclusive, reverse, "sum")


def _cumprod_impl(x, *, axis, exclusive, reverse):
  return _scan(x, axis, exclusive, reverse, "prod")


def _scan_batch(op, args, dims, axis, exclusive, reverse):
  """Re-binds the scan ``op`` with the batch axis in front."""
  (x,), (d,) = args, dims
  ax = norm_axis(scalar_int(axis), x.ndim - 1)
  return op(rules.to_front(x, d), axis=ax + 1, exclusive=exclusive, reverse=reverse), 0


def _cumsum_batch(args, dims, **params):
  return _scan_batch(tfops.Cumsum, args, dims, **params)


def _cumprod_batch(args, dims, **params):
  return _scan_batch(tfops.Cumprod, args, dims, **params)


Cumsum = register_op(
  "Cumsum",
  _cumsum_impl,
  family=FAMILY,
  static=("axis",),
  attrs=("exclusive", "reverse"),
  linear=True,
  transpose=lambda ct, x, *, axis, exclusive, reverse: [
    tfops.Cumsum(ct, axis=axis, exclusive=exclusive, reverse=not reverse)
  ],
  batching=_cumsum_batch,
  spec=rules.per_op(
    lambda op: (
      lambda st: st.Spec(
        _scan_calls(st, op.op_type),
        rtol={"float16": 1e-2, "bfloat16": 5e-2},
        atol={"float16": 0.5, "bfloat16": 2.0},
      )
    )
  ),
)

Cumprod = register_op(
  "Cumprod",
  _cumprod_impl,
  family=FAMILY,
  static=("axis",),
  attrs=("exclusive", "reverse"),
  batching=_cumprod_batch,
  spec=rules.per_op(
    lambda op: (
      lambda st: st.Spec(
        _scan_calls(st, op.op_type),
        rtol={"float16": 1e-2, "bfloat16": 5e-2},
        atol={"float16": 1e-2, "bfloat16": 5e-2},
        grad_oracle="fd",
        note="TF's Cumprod gradient is wrong for complex inputs (no "
        "conjugation): derivatives are checked by central differences",
      )
    )
  ),
)


# --- CumulativeLogsumexp ------------------------------------------------------------


def _tf_logaddexp(acc, t):
  """TF's LogSumExp combine step (scan_ops.h): std::min/max order, so a NaN ``t``
  counts as a copy of ``acc`` (TF's [1, NaN] gives [1, 1 + log 2]) and only a NaN
  accumulator (inf + inf) propagates; -inf + -inf stays -inf."""
  lo = jnp.where(t < acc, t, acc)
  hi = jnp.where(acc < t, t, acc)
  out = jnp.log1p(jnp.exp(lo - hi)) + hi
  return jnp.where(hi < jnp.finfo(acc.dtype).min, hi, out)


def _shift(x, ax, reverse, fill):
  """The exclusive scan from the inclusive one: shifted by one along ``ax``."""
  n = x.shape[ax]
  pad = jnp.full(x.shape[:ax] + (1,) + x.shape[ax + 1 :], fill, x.dtype)
  if reverse:
    return jnp.concatenate([lax.slice_in_dim(x, 1, n, axis=ax), pad], axis=ax)
  return jnp.concatenate([pad, lax.slice_in_dim(x, 0, n - 1, axis=ax)], axis=ax)


def _cumulative_logsumexp(x, *, axis, exclusive, reverse):
  """log(cumsum(exp(x))) along ``axis``: TF's sequential scan, accumulated in x's dtype."""
  ax = norm_axis(scalar_int(axis), x.ndim)
  if x.shape[ax] == 0:
    return x
  xs = jnp.moveaxis(x, ax, 0)
  init = jnp.full(xs.shape[1:], -jnp.inf, x.dtype)
  step = lambda acc, t: (lambda new: (new, new))(_tf_logaddexp(acc, t))
  _, ys = lax.scan(step, init, xs, reverse=reverse)
  ys = jnp.moveaxis(ys, 0, ax)
  return _shift(ys, ax, reverse, -jnp.inf) if exclusive else ys


def _clse_jvp(primals, tangents, *, axis, exclusive, reverse):
  """d y_i = sum_{j <= i} t_j exp(x_j - y_i) (y the inclusive scan), as the linear
  recurrence s_i = exp(y_{i-1} - y_i) s_{i-1} + exp(x_i - y_i) t_i, whose weights
  (TF ops on TF's primal) are at most 1. No TF op runs that recurrence (TF's
  gradient splits the cotangent by sign in log space, which is not linear), so it
  is a ``lax.scan``, transposed by JAX."""
  (x,), (t,) = primals, tangents
  y = tfops.CumulativeLogsumexp(x, axis=axis, exclusive=exclusive, reverse=reverse)
  if type(t) is ad.Zero:
    return y, rules.zero_tangent(y)
  ax = norm_axis(scalar_int(axis), x.ndim)
  if x.shape[ax] == 0:
    return y, t
  inclusive = (
    y
    if not exclusive
    else tfops.CumulativeLogsumexp(x, axis=axis, exclusive=False, reverse=reverse)
  )
  previous = _shift(inclusive, ax, reverse, -jnp.inf)
  decay = tfops.Exp(tfops.Sub(previous, inclusive))  # exp(y_{i-1} - y_i)
  weight = tfops.Exp(tfops.Sub(x, inclusive))  # exp(x_i - y_i)

  def step(s, inputs):
    d, w, ti = inputs
    s = d * s + w * ti
    return s, s

  front = lambda v: jnp.moveaxis(v, ax, 0)
  init = jnp.zeros(front(t).shape[1:], t.dtype)
  _, ts = lax.scan(step, init, (front(decay), front(weight), front(t)), reverse=reverse)
  ts = jnp.moveaxis(ts, 0, ax)
  return y, _shift(ts, ax, reverse, 0) if exclusive else ts


def _clse_batch(args, dims, **params):
  return _scan_batch(tfops.CumulativeLogsumexp, args, dims, **params)


CumulativeLogsumexp = register_op(
  "CumulativeLogsumexp",
  _cumulative_logsumexp,
  family=FAMILY,
  static=("axis",),
  attrs=("exclusive", "reverse"),
  jvp=_clse_jvp,
  batching=_clse_batch,
  spec=lambda st: st.Spec(
    _clse_calls(st),
    oracle=tf_cumulative_logsumexp,
    rtol={"float16": 1e-2, "bfloat16": 5e-2},
    atol={"float16": 1e-2, "bfloat16": 5e-2},
    note="exclusive: TF's inclusive kernel shifted (TF's forward-mode derivative is "
    "NaN at the -inf output); NaN/±inf inputs: tests/test_special.py",
  ),
)


def tf_cumulative_logsumexp(x, axis, exclusive, reverse):
  """The spec's oracle: TF's CumulativeLogsumexp, the exclusive scan taken as TF's
  inclusive one shifted by one (bit for bit TF's exclusive kernel: tested in
  tests/test_special.py). TF's forward-mode derivative of the exclusive kernel
  (ForwardAccumulator, its gradient transposed) is NaN at the -inf output: its
  gradient takes log(grad) - (-inf)."""
  tf = import_tensorflow()
  y = tf.raw_ops.CumulativeLogsumexp(x=x, axis=axis, exclusive=False, reverse=reverse)
  if not exclusive:
    return y
  ax = int(np.asarray(axis)) % len(y.shape)
  n = y.shape[ax]
  if n == 0:
    return y
  pad_shape = list(y.shape)
  pad_shape[ax] = 1
  pad = tf.fill(pad_shape, tf.constant(-np.inf, y.dtype))
  begin, size = [0] * len(y.shape), list(y.shape)
  size[ax] = n - 1
  if reverse:
    begin[ax] = 1
    return tf.concat([tf.slice(y, begin, size), pad], axis=ax)
  return tf.concat([pad, tf.slice(y, begin, size)], axis=ax)


# --- property-test strategies (hypothesis is imported lazily) ---------------------


def _reverse_calls(st):
  hst = lazy_hst()

  @st.composite
  def calls(draw):
    x = draw(st.arrays(st.dtypes(st.ALL), st.shapes()))
    axes = (
      draw(hst.lists(hst.integers(0, max(x.ndim - 1, 0)), unique=True, max_size=x.ndim))
      if x.ndim
      else []
    )
    axes = [a - x.ndim if draw(hst.booleans()) else a for a in axes]
    return {"tensor": x, "axis": index_array(draw, st, np.array(axes, np.int64).reshape(-1))}

  return calls()


def _scan_calls(st, op):
  hst = lazy_hst()

  @st.composite
  def calls(draw):
    dtype = draw(st.dtypes(st.NUMERIC + st.COMPLEX))
    shape = draw(st.shapes(min_rank=1))
    if st.is_inexact(dtype):
      lo, hi = (0.5, 2.0) if op == "Cumprod" else (-100.0, 100.0)
      x = draw(st.arrays(dtype, shape, min_value=lo, max_value=hi, special=False))
    else:
      x = draw(st.arrays(dtype, shape))
    axis = draw(hst.integers(-len(shape), len(shape) - 1))
    return {
      "x": x,
      "axis": index_array(draw, st, axis),
      "exclusive": draw(hst.booleans()),
      "reverse": draw(hst.booleans()),
    }

  return calls()


def _clse_calls(st):
  hst = lazy_hst()

  @st.composite
  def calls(draw):
    dtype = draw(st.dtypes(st.FLOATS))
    shape = draw(st.shapes(min_rank=1))
    # Finite, moderate values: TF's gradient (exp of log-space sums) loses the
    # precision of large |x|; NaN/±inf values are pinned in tests/test_special.py.
    if draw(hst.integers(0, 3)) == 0:
      x = st.draw_array(draw, dtype, shape, ties=True, finite=True)
    else:
      x = draw(st.arrays(dtype, shape, min_value=-10.0, max_value=10.0, special=False))
    axis = draw(hst.integers(-len(shape), len(shape) - 1))
    return {
      "x": x,
      "axis": index_array(draw, st, axis),
      "exclusive": draw(hst.booleans()),
      "reverse": draw(hst.booleans()),
    }

  return calls()
