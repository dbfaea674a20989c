"""SparseSoftmax, SparseDenseCwiseMul/Add/Div (``tf.sparse.softmax``, ``sp * dense``...) and
SparseTensorDenseAdd (``tf.sparse.add(sp, dense)``: a dense sum, TF-named linear rules).

SparseSoftmax: TF's kernel reorders the entries into row-major order and returns the
softmax of each row's values (over the last dimension) in that order, not the
input's; so does tfprims (a stable sort: entries with equal indices keep their
input order). SparseDenseCwise*: ``values op dense[index]``, the dense operand
broadcast to ``sp_shape`` (right-aligned; only the dense side broadcasts, as in TF).
The implicit zeros stay zero whatever the dense values (TF's documented choice,
even for Add). Integer division truncates, like TF's C++ kernel. An entry whose index
lies outside ``sp_shape`` (negative ones too) makes TF's kernel raise: its result is
NaN (0 for integers) and the dense operand is never read there; ``runtime_checks``
raises like TF (docs/semantics/sparse.md).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from tfprims import rules
from tfprims.core import register_op, tfops
from tfprims.ops.shared_specs import bounded_values, lazy_hst
from tfprims.ops.sparse._common import FAMILY, check_indices, draw_sparse, static_shape

U = rules.U


# --- SparseSoftmax --------------------------------------------------------------------------


def _softmax(sp_indices, sp_values, *, sp_shape):
  """Per row (all but the last index equal), the softmax of its values, the entries
  in row-major order."""
  rank = len(static_shape(sp_shape, "sp_shape"))
  if rank < 2:
    raise ValueError(f"SparseSoftmax needs a tensor of rank >= 2, got rank {rank}")
  if sp_indices.ndim != 2 or sp_indices.shape[1] != rank:
    raise ValueError(f"sp_indices must be a matrix [nnz, {rank}]")
  n = sp_indices.shape[0]
  if n == 0:
    return sp_values
  keys = [sp_indices[:, d] for d in range(rank)]
  out = lax.sort(keys + [jnp.arange(n, dtype=np.int32)], num_keys=rank, is_stable=True)
  values = sp_values[out[rank]]
  lead = jnp.stack(out[: rank - 1], axis=1)
  new = jnp.concatenate([jnp.ones((1,), bool), jnp.any(lead[1:] != lead[:-1], axis=1)])
  group = jnp.cumsum(new.astype(np.int32)) - 1
  top = jax.ops.segment_max(values, group, num_segments=n, indices_are_sorted=True)
  e = jnp.exp(values - top[group])
  total = jax.ops.segment_sum(e, group, num_segments=n, indices_are_sorted=True)
  return e / total[group]


def _softmax_spec(st):
  @st.composite
  def calls(draw):
    dtype = draw(st.dtypes(("float32", "float64")))
    # TF's gradient assumes the entries in row-major order (its documented
    # precondition); unordered entries are tested in tests/test_sparse.py.
    idx, vals, shape = draw_sparse(draw, st, dtype, min_rank=2, canonical=True)
    return {"sp_indices": idx, "sp_values": vals, "sp_shape": shape}

  return st.Spec(
    calls(),
    diff_args=("sp_values",),
    vmap_variation="scale",
    examples=0.5,
    note="indices drawn in row-major order (TF's gradient assumes it)",
  )


SparseSoftmax = register_op(
  "SparseSoftmax",
  _softmax,
  family=FAMILY,
  static=("sp_shape",),
  spec=_softmax_spec,
  doc="The softmax of each row's values (last dimension), entries in row-major order.",
)


# --- SparseDenseCwise* ----------------------------------------------------------------------


def _dense_at(sp_indices, dense, shape):
  """``dense`` broadcast to ``shape`` (right-aligned), read at the entries' indices,
  and which entries lie inside ``shape`` (the others read position 0)."""
  if dense.ndim > len(shape) or any(
    d not in (1, s) for d, s in zip(dense.shape[::-1], shape[::-1])
  ):
    raise ValueError(
      f"SparseDenseBinaryOpShared broadcasts dense to sparse only; got "
      f"incompatible shapes: {list(shape)} vs. {list(dense.shape)}"
    )
  bound = np.asarray(shape, np.int64).astype(sp_indices.dtype)
  inside = jnp.all((sp_indices >= 0) & (sp_indices < bound), axis=1)
  offset = len(shape) - dense.ndim
  zero = jnp.zeros(sp_indices.shape[:1], sp_indices.dtype)
  coords = tuple(
    jnp.where(inside, sp_indices[:, offset + j], 0) if d != 1 else zero
    for j, d in enumerate(dense.shape)
  )
  return (dense[coords] if coords else jnp.broadcast_to(dense, zero.shape)), inside


def _cwise_impl(name, fn):
  def impl(sp_indices, sp_values, dense, *, sp_shape):
    shape = static_shape(sp_shape, "sp_shape")
    if sp_indices.ndim != 2 or sp_indices.shape[1] != len(shape):
      raise ValueError(f"sp_indices must be a matrix [nnz, {len(shape)}]")
    at, inside = _dense_at(sp_indices, dense, shape)
    # Outside the shape (TF raises): NaN, 0 for integers, computed on a divisor of 1 so
    # no derivative there is infinite.
    out = fn(sp_values, jnp.where(inside, at, jnp.ones((), at.dtype)))
    missing = 0 if jnp.issubdtype(out.dtype, jnp.integer) else np.nan
    return jnp.where(inside, out, jnp.asarray(missing, out.dtype))

  impl.__doc__ = f"The entries' values {name} the dense operand (broadcast) at their indices."
  return impl


def _cwise_check(sp_indices, sp_values, dense, *, sp_shape):
  shape = static_shape(sp_shape, "sp_shape")
  found = check_indices(sp_indices, shape)
  if found is None:
    return None
  return found[0], (
    f"Provided indices are out-of-bounds w.r.t. dense side with broadcasted shape {list(shape)}"
  )


def _divide(x, y):
  if jnp.issubdtype(x.dtype, jnp.integer):
    return lax.div(x, y)  # C++ truncation
  return x / y


def _cwise_spec(dtypes, nonzero=False, **kw):
  def spec(st):
    hst = lazy_hst()

    @st.composite
    def calls(draw):
      dtype = draw(st.dtypes(dtypes))
      idx, vals, shape = draw_sparse(draw, st, dtype)
      k = draw(hst.integers(0, len(shape)))
      dshape = tuple(int(s) if draw(hst.booleans()) else 1 for s in shape[len(shape) - k :])
      if nonzero:  # divisors away from 0, so derivatives stay finite
        vals = draw(bounded_values(st, dtype, vals.shape))
        dense = draw(st.arrays(dtype, dshape, min_value=0.5, max_value=4.0, special=False))
        dense = dense * np.where(draw(st.arrays(np.bool_, dshape)), -1, 1).astype(dtype)
      else:
        dense = draw(st.arrays(dtype, dshape))
      return {"sp_indices": idx, "sp_values": vals, "sp_shape": shape, "dense": dense}

    return st.Spec(calls(), diff_args=("sp_values", "dense"), vmap_variation="scale", **kw)

  return spec


_FLOATS = ("float32", "float64")  # TF has no complex kernels
SparseDenseCwiseMul = register_op(
  "SparseDenseCwiseMul",
  _cwise_impl("times", jnp.multiply),
  family=FAMILY,
  static=("sp_shape",),
  check=_cwise_check,
  spec=_cwise_spec(_FLOATS + ("int32",)),
)
SparseDenseCwiseAdd = register_op(
  "SparseDenseCwiseAdd",
  _cwise_impl("plus", jnp.add),
  family=FAMILY,
  static=("sp_shape",),
  check=_cwise_check,
  spec=_cwise_spec(
    _FLOATS + ("int32",),
    grad_oracle="fd",
    note="derivatives vs central differences: TF has no gradient for it",
  ),
)
SparseDenseCwiseDiv = register_op(
  "SparseDenseCwiseDiv",
  _cwise_impl("divided by", _divide),
  family=FAMILY,
  static=("sp_shape",),
  check=_cwise_check,
  spec=_cwise_spec(_FLOATS, nonzero=True),
)


# --- SparseTensorDenseAdd -------------------------------------------------------------------


def _dense_add(a_indices, a_values, b, *, a_shape):
  """``b`` with each entry's value added at its index (duplicates add up)."""
  shape = static_shape(a_shape, "a_shape")
  if tuple(b.shape) != shape:
    raise ValueError(f"Dimension mismatch: a_shape {list(shape)} vs. b.shape {list(b.shape)}")
  if a_indices.ndim != 2 or a_indices.shape[1] != len(shape):
    raise ValueError(f"a_indices must be a matrix [nnz, {len(shape)}]")
  if not shape:
    return b + jnp.sum(a_values)
  b = jnp.asarray(b)  # numpy where folded
  # Negative indices would count from the end: send them past it, where nothing is added.
  at = tuple(jnp.where(a_indices[:, d] < 0, n, a_indices[:, d]) for d, n in enumerate(shape))
  return b.at[at].add(a_values, mode="drop")


def _dense_add_transpose(ct, a_indices, a_values, b, *, a_shape):
  ct = rules.instantiate(ct)
  ct_values = tfops.GatherNd(ct, a_indices, bad_indices_policy="") if U(a_values) else None
  return [None, ct_values, ct if U(b) else None]


def _dense_add_spec(st):
  @st.composite
  def calls(draw):
    dtype = draw(st.dtypes(("float32", "float64", "int32", "complex64")))
    idx, vals, shape = draw_sparse(draw, st, dtype, index_dtypes=("int32", "int64"))
    return {
      "a_indices": idx,
      "a_values": vals,
      "a_shape": shape.astype(idx.dtype),
      "b": draw(st.arrays(dtype, tuple(int(s) for s in shape))),
    }

  return st.Spec(calls(), diff_args=("a_values", "b"), vmap_variation="scale")


SparseTensorDenseAdd = register_op(
  "SparseTensorDenseAdd",
  _dense_add,
  family=FAMILY,
  static=("a_shape",),
  jvp=(
    None,
    lambda t, i, v, b, **p: SparseTensorDenseAdd(i, t, rules.zeros(b.shape, b.dtype), **p),
    lambda t, i, v, b, **p: t,
  ),
  transpose=_dense_add_transpose,
  spec=_dense_add_spec,
  doc="The dense b with the sparse entries added at their indices.",
)
