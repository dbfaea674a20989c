"""XlaGather and XlaScatter: XLA's general Gather and Scatter.

Semantics are XLA's: a gather clamps its start indices so that every slice is in
bounds (``lax.gather`` in ``CLIP`` mode); a scatter skips update windows that would
fall out of bounds, negative indices included (``FILL_OR_DROP``). Neither raises
on data, as TF's XLA kernels do not. An ``index_vector_dim`` other than the last
is moved last (lax's convention).

XlaScatter's ``update_computation`` is a library function: add, multiply, max,
min, logical and/or of its two arguments, or its second argument (an assignment),
recognised in the function's graph and kept as a param (``update_computation=add``).
Other computations have no lax scatter form and are refused naming the node. A
multiplying scatter has no derivative (``lax.scatter_mul``'s needs unique indices).

The gather's JVP is ``tf.XlaGather`` of the tangent; its transpose (a scatter-add of
the clamped indices), the scatter's derivatives and both batching rules are derived
from the lax impl (lax's rules rewrite the batching dimension numbers).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from tfprims import errors, rules
from tfprims.core import register_op, tfops
from tfprims.ops.xla import _common
from tfprims.ops.xla._common import FAMILY, INDEX_DTYPES


def _normalize_indices(indices, index_vector_dim, batching_dims):
  """Indices with the index vector last (lax's convention), and the indices'
  batching dims renumbered accordingly."""
  if index_vector_dim == indices.ndim:
    return indices[..., None], batching_dims
  if index_vector_dim != indices.ndim - 1:
    indices = jnp.moveaxis(indices, index_vector_dim, -1)
    batching_dims = tuple(d - (d > index_vector_dim) for d in batching_dims)
  return indices, batching_dims


# --- XlaGather ------------------------------------------------------------------------------


def _gather_impl(operand, start_indices, *, slice_sizes, dimension_numbers, indices_are_sorted):
  """``lax.gather`` in CLIP mode: start indices clamped so slices stay in bounds."""
  offset, collapsed, start_map, operand_bd, indices_bd, ivd = dimension_numbers
  indices, indices_bd = _normalize_indices(start_indices, ivd, indices_bd)
  dn = lax.GatherDimensionNumbers(
    offset_dims=offset,
    collapsed_slice_dims=collapsed,
    start_index_map=start_map,
    operand_batching_dims=operand_bd,
    start_indices_batching_dims=indices_bd,
  )
  return lax.gather(
    operand,
    indices,
    dn,
    tuple(slice_sizes),
    indices_are_sorted=bool(indices_are_sorted),
    mode=lax.GatherScatterMode.CLIP,
  )


def _gather_canonicalize(params, *operands):
  return dict(
    params,
    slice_sizes=tuple(int(v) for v in np.ravel(params["slice_sizes"])),
    dimension_numbers=_common.gather_dimension_numbers(params["dimension_numbers"]),
    indices_are_sorted=bool(params["indices_are_sorted"]),
  )


def _gather_transpose(ct, operand, start_indices, **params):
  aval = jax.ShapeDtypeStruct(operand.aval.shape, operand.aval.dtype)
  f = lambda x: _gather_impl(x, start_indices, **params)
  return [jax.linear_transpose(f, aval)(rules.instantiate(ct))[0], None]


def _gather_calls(st):
  @st.composite
  def calls(draw):
    dtype = draw(st.dtypes(st.NUMERIC + ("bool",)))
    shape = tuple(draw(st.shapes(min_rank=1, max_rank=3, min_side=1, max_side=3)))
    rank = len(shape)
    k = draw(st.integers(1, rank))
    start_map = list(draw(st.permutations(range(rank)))[:k])
    collapsed = sorted(d for d in start_map if draw(st.booleans()))
    sizes = [1 if d in collapsed else draw(st.integers(0, shape[d])) for d in range(rank)]
    batch = tuple(draw(st.shapes(max_rank=2, max_side=3)))
    out_rank = len(batch) + rank - len(collapsed)
    offset = sorted(draw(st.permutations(range(out_rank)))[: rank - len(collapsed)])
    ivd = draw(st.integers(0, len(batch)))
    idx_dtype = st.np_dtype(draw(st.sampled_from(INDEX_DTYPES)))
    bounds = [shape[d] for d in start_map]
    idx = np.stack(
      [st.draw_array(draw, idx_dtype, batch, int_lo=-2, int_hi=b + 1) for b in bounds], axis=-1
    ).astype(idx_dtype)
    idx = np.moveaxis(idx, -1, ivd)
    dn = _common.serialize(
      "GatherDimensionNumbers",
      offset_dims=offset,
      collapsed_slice_dims=collapsed,
      start_index_map=start_map,
      index_vector_dim=ivd,
    )
    return dict(
      operand=st.draw_array(draw, dtype, shape),
      start_indices=idx,
      slice_sizes=np.array(sizes, idx_dtype),
      dimension_numbers=dn,
      indices_are_sorted=False,
    )

  return calls()


XlaGather = register_op(
  "XlaGather",
  _gather_impl,
  family=FAMILY,
  static=("slice_sizes",),
  attrs=("dimension_numbers", "indices_are_sorted"),
  canonicalize=_gather_canonicalize,
  jvp=(lambda t, x, i, **p: tfops.XlaGather(t, i, **p), None),
  transpose=_gather_transpose,
  spec=rules.per_op(
    lambda op: (
      lambda st: st.Spec(
        _gather_calls(st),
        oracle=_common.jit_oracle(op.op_type, ("operand", "start_indices")),
        grad_oracle="fd",
        note="oracle: the op under tf.function(jit_compile=True); "
        "derivatives against central differences (TF registers no gradient)",
      )
    )
  ),
)


# --- XlaScatter ---------------------------------------------------------------------------

_SCATTERS = {
  "add": lax.scatter_add,
  "mul": lax.scatter_mul,
  "max": lax.scatter_max,
  "min": lax.scatter_min,
  "replace": lax.scatter,
  "and": lax.scatter_min,
  "or": lax.scatter_max,
}


def _scatter_impl(
  operand, scatter_indices, updates, *, update_computation, dimension_numbers, indices_are_sorted
):
  """``lax.scatter_<computation>`` in FILL_OR_DROP mode: out-of-bounds windows are
  skipped."""
  window, inserted, to_operand, operand_bd, indices_bd, ivd = dimension_numbers
  indices, indices_bd = _normalize_indices(scatter_indices, ivd, indices_bd)
  dn = lax.ScatterDimensionNumbers(
    update_window_dims=window,
    inserted_window_dims=inserted,
    scatter_dims_to_operand_dims=to_operand,
    operand_batching_dims=operand_bd,
    scatter_indices_batching_dims=indices_bd,
  )
  boolean = operand.dtype == np.bool_
  if boolean:  # and/or as min/max of 0/1
    operand, updates = operand.astype(np.uint8), updates.astype(np.uint8)
  out = _SCATTERS[update_computation](
    operand,
    indices,
    updates,
    dn,
    indices_are_sorted=bool(indices_are_sorted),
    unique_indices=False,
    mode=lax.GatherScatterMode.FILL_OR_DROP,
  )
  return out.astype(np.bool_) if boolean else out


def _scatter_canonicalize(params, *operands):
  return dict(
    params,
    dimension_numbers=_common.scatter_dimension_numbers(params["dimension_numbers"]),
    indices_are_sorted=bool(params["indices_are_sorted"]),
  )


def _scatter_interpret(ctx, node, inputs):
  fname = node.attr("update_computation").name
  kind = _common.classify_computation(ctx, fname)
  if kind is None:
    raise errors.OpError(
      "XlaScatter",
      node.name,
      f"its update_computation {fname!r} is not one of the scatters lax has "
      "(add, multiply, max, min, logical and/or, or assigning the update)",
    )
  op = tfops.XlaScatter
  names = ("operand", "scatter_indices", "updates")
  operands, params = op.prepare(
    dict(zip(names, inputs)), dict(node.attrs, update_computation=kind), node.name
  )
  return [op.apply(operands, params)]


def _scatter_calls(st):
  @st.composite
  def calls(draw):
    kind = draw(st.sampled_from(["add", "mul", "max", "min", "replace"]))
    # multiply: ints only, its derivative is not implemented (docs/semantics/xla.md)
    dtype = draw(
      st.dtypes(
        ("float32", "float64", "bfloat16", "int32", "int64", "uint8", "complex64")
        if kind in ("add", "replace")
        else ("int32", "int64", "uint8")
        if kind == "mul"
        else ("float32", "float64", "int32", "int8", "uint16")
      )
    )
    shape = tuple(draw(st.shapes(min_rank=1, max_rank=3, min_side=1, max_side=3)))
    rank = len(shape)
    k = draw(st.integers(1, rank))
    to_operand = list(draw(st.permutations(range(rank)))[:k])
    inserted = sorted(d for d in to_operand if draw(st.booleans()))
    window_dims_of = [d for d in range(rank) if d not in inserted]
    window = [draw(st.integers(0, shape[d])) for d in window_dims_of]
    space = [shape[d] for d in to_operand]
    batch = tuple(draw(st.shapes(max_rank=2, max_side=3)))
    if kind == "replace" and int(np.prod(batch)) > int(np.prod(space)):
      batch = (1,)
    upd_rank = len(batch) + len(window)
    window_pos = sorted(draw(st.permutations(range(upd_rank)))[: len(window)])
    w, b = iter(window), iter(batch)
    upd_shape = [next(w) if i in window_pos else next(b) for i in range(upd_rank)]
    ivd = draw(st.integers(0, len(batch)))
    idx_dtype = st.np_dtype(draw(st.sampled_from(INDEX_DTYPES)))
    if kind == "replace":  # one update per position: which of several wins is unspecified
      n = int(np.prod(batch))
      flat = draw(
        st.lists(st.integers(0, int(np.prod(space)) - 1), min_size=n, max_size=n, unique=True)
      )
      coords = np.stack(np.unravel_index(np.array(flat, np.int64), space), axis=-1)
      idx = coords.reshape(batch + (k,)).astype(idx_dtype)
    else:
      idx = np.stack(
        [st.draw_array(draw, idx_dtype, batch, int_lo=-1, int_hi=s) for s in space], axis=-1
      ).astype(idx_dtype)
    idx = np.moveaxis(idx, -1, ivd)
    dn = _common.serialize(
      "ScatterDimensionNumbers",
      update_window_dims=window_pos,
      inserted_window_dims=inserted,
      scatter_dims_to_operand_dims=to_operand,
      index_vector_dim=ivd,
    )
    finite = dict(lo=-3, hi=3) if st.is_inexact(dtype) else dict(int_lo=-3, int_hi=3)
    return dict(
      operand=st.draw_array(draw, dtype, shape, **finite),
      scatter_indices=idx,
      updates=st.draw_array(draw, dtype, tuple(upd_shape), **finite),
      update_computation=kind,
      dimension_numbers=dn,
      indices_are_sorted=False,
    )

  return calls()


XlaScatter = register_op(
  "XlaScatter",
  _scatter_impl,
  family=FAMILY,
  attrs=("update_computation", "dimension_numbers", "indices_are_sorted"),
  canonicalize=_scatter_canonicalize,
  interpret=_scatter_interpret,
  spec=rules.per_op(
    lambda op: (
      lambda st: st.Spec(
        _scatter_calls(st),
        oracle=_common.with_computations(
          _common.jit_oracle(op.op_type, ("operand", "scatter_indices", "updates")),
          {"update_computation": "operand"},
        ),
        grad_oracle="fd",
        rtol={"bfloat16": 5e-2},
        note="oracle: the op under tf.function(jit_compile=True), the drawn "
        "update_computation as a TF function; derivatives against central differences",
      )
    )
  ),
)
