"""Fractional pooling gradients: FractionalAvgPoolGrad and FractionalMaxPoolGrad (NHWC).

The pooling regions come from the row/col pooling sequences (data inputs, int64, as the
forward ops output them): output cell ``r`` covers input rows ``seq[r] .. seq[r+1] - 1``,
or ``.. seq[r+1]`` with ``overlapping`` (clamped to the last row). The regions are
expressed as 0/1 membership matrices ``[out, in]``, so the ops are contractions:

* FractionalAvgPoolGrad spreads each ``out_backprop`` value over its region in equal
  shares (``out / cell size``, in float64 for integer T) accumulated in float64 and cast to
  T (integers truncated once, at the end), as TF's kernel.
* FractionalMaxPoolGrad routes each ``out_backprop`` value to its region's first maximum
  (row-major), as TF's kernel; TF raises when ``orig_output`` is not the recomputed max
  pooling (declared as ``check``).

TF registers no gradient for either op: their rules are derived from the impls.
"""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np
from jax import lax

from tfprims import dtypes
from tfprims.core import define_op


def _membership(seq, size, overlapping):
  """[out, in] 0/1 matrix of the pooling regions of one spatial axis."""
  seq = seq.astype(jnp.int32)
  start, stop = seq[:-1, None], seq[1:, None]
  idx = jnp.arange(size, dtype=jnp.int32)[None, :]
  end = jnp.minimum(stop if overlapping else stop - 1, size - 1)
  return (idx >= start) & (idx <= end)


def _fractional_avg_pool_grad(out_backprop, row_pooling_sequence, col_pooling_sequence, *,
                              orig_input_tensor_shape, overlapping=False):
  """TF FractionalAvgPoolGrad: every out_backprop value shared equally over its pooling
  cell (in T for floats, in float64 for integers), accumulated in float64, cast to T."""
  n, h, w, c = (int(d) for d in orig_input_tensor_shape)
  rows = _membership(row_pooling_sequence, h, overlapping)
  cols = _membership(col_pooling_sequence, w, overlapping)
  acc = dtypes.canonical_dtype(np.float64)
  cell = jnp.sum(rows, 1)[:, None] * jnp.sum(cols, 1)[None, :]
  cell = jnp.maximum(cell, 1)[None, :, :, None]
  if jnp.issubdtype(out_backprop.dtype, jnp.integer):
    share = out_backprop.astype(acc) / cell.astype(acc)   # truncated once, at the end
  else:
    share = out_backprop / cell.astype(out_backprop.dtype)
  share = share.astype(acc)
  ncols = cols.shape[0]

  def add_cell(k, total):
    # cell by cell in TF's loop order (rows outer), so float64 sums round as TF's do
    r, q = k // ncols, k % ncols
    region = (rows[r][:, None] & cols[q][None, :]).astype(acc)
    return total + share[:, r, q, None, None, :] * region[None, :, :, None]

  out = lax.fori_loop(0, rows.shape[0] * ncols, add_cell, jnp.zeros((n, h, w, c), acc))
  return out.astype(out_backprop.dtype).reshape((n, h, w, c))


def _region_values(x, rows, cols):
  """[b, out_r, out_c, in_r * in_c, d] values of x in each region (-inf / min outside)."""
  fill = (jnp.array(-jnp.inf, x.dtype) if jnp.issubdtype(x.dtype, jnp.floating)
          else jnp.array(jnp.iinfo(x.dtype).min, x.dtype))
  mask = rows[:, None, :, None] & cols[None, :, None, :]            # [R, C, H, W]
  vals = jnp.where(mask[None, ..., None], x[:, None, None], fill)   # [B, R, C, H, W, D]
  b, r, c, h, w, d = vals.shape
  return vals.reshape((b, r, c, h * w, d)), mask.reshape((r, c, h * w))


def _fractional_max_pool_grad(orig_input, orig_output, out_backprop, row_pooling_sequence,
                              col_pooling_sequence, *, overlapping=False):
  """TF FractionalMaxPoolGrad: each out_backprop value added at its region's first
  maximum (row-major) of orig_input."""
  del orig_output
  b, h, w, d = orig_input.shape
  rows = _membership(row_pooling_sequence, h, overlapping)
  cols = _membership(col_pooling_sequence, w, overlapping)
  vals, _ = _region_values(orig_input, rows, cols)
  arg = jnp.argmax(vals, axis=3)                                    # [B, R, C, D]
  hit = jnp.arange(h * w)[None, None, None, :, None] == arg[:, :, :, None, :]
  contrib = jnp.where(hit, out_backprop[:, :, :, None, :], jnp.zeros((), out_backprop.dtype))
  return jnp.sum(contrib, axis=(1, 2)).reshape((b, h, w, d)).astype(out_backprop.dtype)


def _max_pool_grad_check(orig_input, orig_output, out_backprop, row_pooling_sequence,
                         col_pooling_sequence, *, overlapping=False):
  _, h, w, _ = orig_input.shape
  rows = _membership(row_pooling_sequence, h, overlapping)
  cols = _membership(col_pooling_sequence, w, overlapping)
  vals, _ = _region_values(orig_input, rows, cols)
  bad = jnp.any(jnp.max(vals, axis=3) != orig_output)
  return bad, ("Input and output tensors of FractionalMaxPoolGrad do not match "
               "(orig_output is not the max pooling of orig_input)")


# --------------------------------------------------------------------------
# Specs: sequences drawn by TF's forward ops
# --------------------------------------------------------------------------

_DTYPES = ("float32", "float64", "int32", "int64")


def _frac_calls(st, op):
  @st.composite
  def draw_call(draw):
    from tfprims.ops.nn._common import _tf_call
    dtype = draw(st.sampled_from(_DTYPES))
    shape = (draw(st.integers(1, 2)), draw(st.integers(2, 5)), draw(st.integers(2, 5)),
             draw(st.integers(1, 2)))
    dt = st.np_dtype(dtype)
    if dt.kind == "i":
      # distinct values: no ties for the max
      x = np.random.default_rng(draw(st.integers(0, 2**16))).permutation(
          int(np.prod(shape))).reshape(shape).astype(dt) - 5
    else:
      x = np.asarray(draw(st.arrays(dt, shape, special=False, min_value=-4.0, max_value=4.0,
                                    unique=True)))
    ratio = [1.0, draw(st.sampled_from([1.0, 1.44, 1.73, 2.0])),
             draw(st.sampled_from([1.0, 1.44, 1.73, 2.0])), 1.0]
    # integer FractionalAvgPoolGrad with overlapping cells: TF's truncated float64 sums
    # differ from ours by one in some elements (docs/semantics/nn.md)
    overlapping = draw(st.booleans()) and not (op == "AvgPool" and dt.kind == "i")
    fwd = _tf_call("Fractional" + op, dict(
        value=x, pooling_ratio=ratio, pseudo_random=draw(st.booleans()),
        overlapping=overlapping, deterministic=True, seed=draw(st.integers(1, 100)),
        seed2=draw(st.integers(1, 100))))
    out, rseq, cseq = (t.numpy() for t in fwd)
    g = (draw(st.arrays(dt, out.shape, min_value=-50, max_value=50)) if dt.kind == "i" else
         draw(st.arrays(dt, out.shape, special=False, min_value=-2.0, max_value=2.0)))
    call = dict(out_backprop=np.asarray(g), row_pooling_sequence=rseq,
                col_pooling_sequence=cseq, overlapping=overlapping)
    if op == "AvgPool":
      return dict(orig_input_tensor_shape=np.array(shape, np.int64), **call)
    return dict(orig_input=x, orig_output=out, **call)
  return draw_call()


FractionalAvgPoolGrad = define_op(
    "FractionalAvgPoolGrad", _fractional_avg_pool_grad, family="nn",
    static=("orig_input_tensor_shape",), attrs=("overlapping",),
    spec=lambda st: st.Spec(_frac_calls(st, "AvgPool"), note=(
        "Pooling sequences drawn by TF's FractionalAvgPool (seeded, deterministic).")))

FractionalMaxPoolGrad = define_op(
    "FractionalMaxPoolGrad", _fractional_max_pool_grad, family="nn", attrs=("overlapping",),
    check=_max_pool_grad_check,
    spec=lambda st: st.Spec(_frac_calls(st, "MaxPool"), note=(
        "Pooling sequences and orig_output drawn by TF's FractionalMaxPool (seeded, "
        "deterministic); distinct input values (no ties).")))
