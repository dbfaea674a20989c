"""Along an axis: ReverseV2 and the scans Cumsum, Cumprod.

ReverseV2 and Cumsum are linear (ReverseV2 transposes to itself, Cumsum to
Cumsum with ``reverse`` flipped); Cumprod's derivatives are derived from its impl
(JAX's exact derivative, where TF's gradient divides by ``x`` and misses the
conjugation for complex inputs). The scans are ``lax.cumsum``/``lax.cumprod``
with ``exclusive`` done by a shift; summation order differs from TF's Eigen scan
(docs/semantics/array.md).
"""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np
from jax import lax

from tfprims import rules
from tfprims.core import define_op, tfops
from tfprims.ops.array._common import FAMILY, index_array, ints, lazy_hst, norm_axis, scalar_int


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


ReverseV2 = define_op(
    "ReverseV2", _reverse_impl, family=FAMILY, static=("axis",), linear=True,
    transpose=lambda ct, x, *, axis: [tfops.ReverseV2(ct, axis=axis)],
    batching=_reverse_batch,
    spec=lambda st: st.Spec(_reverse_calls(st)))


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
    unit = jnp.full(x.shape[:ax] + (1,) + x.shape[ax + 1:], 0 if kind == "sum" else 1, x.dtype)
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


Cumsum = define_op(
    "Cumsum", _cumsum_impl, family=FAMILY, static=("axis",), attrs=("exclusive", "reverse"),
    linear=True,
    transpose=lambda ct, x, *, axis, exclusive, reverse: [
        tfops.Cumsum(ct, axis=axis, exclusive=exclusive, reverse=not reverse)],
    batching=_cumsum_batch,
    spec=lambda st: st.Spec(_scan_calls(st, "Cumsum"), rtol={"float16": 1e-2, "bfloat16": 5e-2},
                            atol={"float16": 0.5, "bfloat16": 2.0}))

Cumprod = define_op(
    "Cumprod", _cumprod_impl, family=FAMILY, static=("axis",), attrs=("exclusive", "reverse"),
    batching=_cumprod_batch,
    spec=lambda st: st.Spec(_scan_calls(st, "Cumprod"), rtol={"float16": 1e-2, "bfloat16": 5e-2},
                            atol={"float16": 1e-2, "bfloat16": 5e-2}, grad_oracle="fd",
                            note="TF's Cumprod gradient is wrong for complex inputs (no "
                                 "conjugation): derivatives are checked by central differences"))


# --- property-test strategies (hypothesis is imported lazily) ---------------------


def _reverse_calls(st):
  hst = lazy_hst()

  @st.composite
  def calls(draw):
    x = draw(st.arrays(st.dtypes(st.ALL), st.shapes()))
    axes = draw(hst.lists(hst.integers(0, max(x.ndim - 1, 0)), unique=True,
                          max_size=x.ndim)) if x.ndim else []
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
    return {"x": x, "axis": index_array(draw, st, axis), "exclusive": draw(hst.booleans()),
            "reverse": draw(hst.booleans())}
  return calls()
