"""Scatters by index vectors: ScatterNd, ScatterNdNonAliasingAdd,
TensorScatterAdd/Sub/Min/Max/Update and SparseToDense.

``scatter_nd_values`` combines ``updates`` into a tensor at the index vectors
``indices [..., K]`` (the leading K dims) the way TF's CPU kernels do, updates
applied in order: duplicates accumulate (add, sub), the smallest/largest wins
(min, max: a NaN update never wins, a NaN in the tensor stays), the last one wins
(update); booleans add as OR and subtract as XOR. Out-of-range index vectors
(negative ones included) are dropped, like TF's GPU kernels and
``bad_indices_policy="IGNORE"``; TF's CPU kernels raise, which ``check=``
reproduces under ``runtime_checks`` (docs/semantics/array.md). The variable
writers (ResourceScatterNd*, ResourceScatter*) use these impls through ``tfops``.

Rules are TF-named: add/sub/update are linear in (tensor, updates) with the
scatter of the tangents as JVP and ``tf.GatherNd`` in their transposes (update's
masked to the last writer of each location); min/max take TF's gradient
(``rules.scatter_min_max_jvp``); batching re-binds the op
(``rules.scatter_nd_batching``).
"""

from __future__ import annotations

import math

import jax.numpy as jnp
import numpy as np
from jax.interpreters import ad

from tfprims import rules
from tfprims.core import register_op, tfops
from tfprims.ops.array._common import FAMILY
from tfprims.ops.array.gather_nd import _dims, _policy, index_validity, sizes_array
from tfprims.ops.shared import ints
from tfprims.rules import U


def _validate(op_type, shape, indices, updates_shape):
  """TF's shape checks of the scatter ops (raised at trace time). TF also refuses
  scalar updates (a full index vector into the tensor), ``K == 0`` and index
  vectors into an empty tensor; they are accepted here with their natural meaning
  (transposes of gathers produce them)."""
  if indices.ndim < 1:
    raise ValueError(
      f"{op_type}: Indices shape must have rank at least one. Found:{_dims(indices.shape)}"
    )
  k = indices.shape[-1]
  lead = tuple(indices.shape[:-1])
  if k > len(shape):
    raise ValueError(
      f"{op_type}: Output must have rank >= indices.shape[-1] = {k}; shape is {_dims(shape)}"
    )
  if tuple(updates_shape) != lead + tuple(shape[k:]):
    raise ValueError(
      f"{op_type}: updates must have shape indices.shape[:-1] + "
      f"shape[indices.shape[-1]:] = {_dims(lead + tuple(shape[k:]))}, got "
      f"{_dims(updates_shape)}"
    )


def last_writer(idx, valid, prefix):
  """``idx [n, K]`` -> boolean ``[n]``: the update that writes each location last."""
  n = idx.shape[0]
  cols = tuple(idx[:, j] for j in range(idx.shape[1]))
  pos = jnp.arange(n, dtype=jnp.int32)
  winner = (
    jnp.full(tuple(prefix), -1, jnp.int32).at[cols].max(jnp.where(valid, pos, -1), mode="drop")
  )
  return winner.at[cols].get(mode="clip") == pos


def scatter_nd_values(kind, tensor, indices, updates, op_type="scatter"):
  """``tensor`` with ``updates`` combined in at ``indices [..., K]`` (``kind``: add,
  sub, min, max or update, as TF's CPU kernels); out-of-range vectors are dropped."""
  tensor = jnp.asarray(tensor)
  shape = tuple(tensor.shape)
  _validate(op_type, shape, indices, updates.shape)
  k = indices.shape[-1]
  n = math.prod(indices.shape[:-1])
  if n == 0 or tensor.size == 0:
    return tensor
  if k == 0:  # every update addresses the whole tensor: index a new leading axis
    lead = tuple(indices.shape[:-1])
    out = scatter_nd_values(kind, tensor[None], jnp.zeros(lead + (1,), jnp.int32), updates, op_type)
    return out[0]
  idx = jnp.reshape(indices, (n, k))
  idx = idx.astype(jnp.int32) if idx.dtype.itemsize < 4 else idx
  upd = jnp.reshape(updates, (n,) + shape[k:])
  valid = index_validity(idx, shape[:k])
  if kind == "update":
    valid = valid & last_writer(idx, valid, shape[:k])
  # Invalid (and overwritten) updates get an index past the end: mode="drop" drops them.
  idx = jnp.where(valid[:, None], idx, sizes_array(shape[:k], idx.dtype))
  cols = tuple(idx[:, j] for j in range(k))
  at = tensor.at[cols]
  if kind == "update":
    # Not unique_indices=True: the dropped updates share one past-the-end index, and XLA's
    # CPU scatter, told the indices are unique, may then skip a valid write.
    return at.set(upd, mode="drop")
  if tensor.dtype == np.bool_:
    if kind == "add":  # true + x is true: OR
      return at.max(upd, mode="drop")
    if kind == "sub":  # a - b in bool is a != b: XOR, once per true update
      count = jnp.zeros(shape, jnp.int32).at[cols].add(upd.astype(jnp.int32), mode="drop")
      return tensor ^ (count % 2 == 1)
    raise TypeError(f"{op_type}: bool tensors support add, sub and update only")
  if kind == "add":
    return at.add(upd, mode="drop")
  if kind == "sub":  # x + (-u) is x - u bit for bit (wrapping ints included)
    return at.add(-upd, mode="drop")
  floating = jnp.issubdtype(tensor.dtype, jnp.floating)
  if kind == "min":
    if floating:  # TF keeps x unless u < x: a NaN update never wins
      upd = jnp.where(jnp.isnan(upd), jnp.array(jnp.inf, upd.dtype), upd)
    return at.min(upd, mode="drop")
  if kind == "max":
    if floating:
      upd = jnp.where(jnp.isnan(upd), jnp.array(-jnp.inf, upd.dtype), upd)
    return at.max(upd, mode="drop")
  raise ValueError(f"unknown scatter kind {kind!r}")


def scatter_nd_check(shape, indices, policy=""):
  """TF's CPU check (unless the policy is IGNORE): every index vector is in range."""
  if _policy(policy) == "IGNORE":
    return jnp.asarray(False), ""
  k = indices.shape[-1]
  n = math.prod(indices.shape[:-1])
  if n == 0:
    return jnp.asarray(False), ""
  valid = index_validity(jnp.reshape(indices, (n, k)), shape[:k])
  return ~jnp.all(valid), f"indices[i] = [...] does not index into shape {_dims(shape)}"


# --- ScatterNd -----------------------------------------------------------------------


def _scatter_nd_impl(indices, updates, *, shape, bad_indices_policy):
  _policy(bad_indices_policy)
  zeros = jnp.zeros(rules.sizes(shape), updates.dtype)
  return scatter_nd_values("add", zeros, indices, updates, "ScatterNd")


def _scatter_nd_transpose(ct, indices, updates, *, shape, bad_indices_policy):
  assert U(updates) and not U(indices)
  return [None, tfops.GatherNd(ct, indices, bad_indices_policy="")]


def _scatter_nd_batch(args, dims, *, shape, bad_indices_policy):
  (i, u), (di, du) = args, dims
  size = rules.batch_size(args, dims)
  shape = rules.sizes(shape)
  u = rules.with_batch_axis(u, du, size)
  if di is None:
    k, lead = rules.shape_of(i)[-1], len(rules.shape_of(i)) - 1
    return tfops.ScatterNd(
      i,
      rules.move_axes(u, [0], [lead]),
      shape=shape[:k] + (size,) + shape[k:],
      bad_indices_policy=bad_indices_policy,
    ), k
  return tfops.ScatterNd(
    rules.batch_coordinates(rules.to_front(i, di), size),
    u,
    shape=(size,) + shape,
    bad_indices_policy=bad_indices_policy,
  ), 0


ScatterNd = register_op(
  "ScatterNd",
  _scatter_nd_impl,
  family=FAMILY,
  static=("shape",),
  attrs=("bad_indices_policy",),
  jvp=(
    None,
    lambda t, i, u, *, shape, bad_indices_policy: tfops.ScatterNd(
      i, t, shape=shape, bad_indices_policy=bad_indices_policy
    ),
  ),
  transpose=_scatter_nd_transpose,
  batching=_scatter_nd_batch,
  check=lambda i, u, *, shape, bad_indices_policy: scatter_nd_check(
    rules.sizes(shape), i, bad_indices_policy
  ),
  spec=lambda st: st.Spec(_scatter_nd_calls(st)),
)


# --- TensorScatter*, ScatterNdNonAliasingAdd -------------------------------------------


def _tensor_scatter(
  op_type,
  kind,
  dtype_names,
  *,
  tensor_arg="tensor",
  jvp,
  transpose=None,
  index_dtypes=("int32", "int64"),
  unique=False,
  doc,
):
  def impl(tensor, indices, updates, *, bad_indices_policy):
    _policy(bad_indices_policy)
    return scatter_nd_values(kind, tensor, indices, updates, op_type)

  def check(tensor, indices, updates, *, bad_indices_policy):
    return scatter_nd_check(tuple(tensor.shape), indices, bad_indices_policy)

  return register_op(
    op_type,
    impl,
    family=FAMILY,
    attrs=("bad_indices_policy",),
    doc=doc,
    jvp=jvp,
    transpose=transpose,
    batching=rules.per_op(rules.scatter_nd_batching),
    check=check,
    spec=lambda st: st.Spec(
      st.nd_scatter_calls(
        dtype_names, tensor_arg=tensor_arg, index_dtypes=index_dtypes, unique=unique
      )
    ),
  )


_REAL = (
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
_NUMBERS = _REAL + ("complex64", "complex128")

TensorScatterAdd = _tensor_scatter(
  "TensorScatterAdd",
  "add",
  _NUMBERS,
  jvp=rules.per_op(rules.scatter_linear_jvp),
  transpose=rules.scatter_nd_add_transpose(False),
  doc="tensor with updates added at the index vectors (duplicates accumulate).",
)
TensorScatterSub = _tensor_scatter(
  "TensorScatterSub",
  "sub",
  _NUMBERS,
  jvp=rules.per_op(rules.scatter_linear_jvp),
  transpose=rules.scatter_nd_add_transpose(True),
  doc="tensor with updates subtracted at the index vectors (duplicates accumulate).",
)
TensorScatterMin = _tensor_scatter(
  "TensorScatterMin",
  "min",
  _REAL,
  jvp=rules.per_op(rules.scatter_min_max_jvp),
  doc="tensor with each indexed element the minimum of it and its updates.",
)
TensorScatterMax = _tensor_scatter(
  "TensorScatterMax",
  "max",
  _REAL,
  jvp=rules.per_op(rules.scatter_min_max_jvp),
  doc="tensor with each indexed element the maximum of it and its updates.",
)
# TF's gradient gives every duplicate update the cotangent; only the last writer
# affects the output, so the spec draws distinct index vectors (duplicates: unit tests).
TensorScatterUpdate = _tensor_scatter(
  "TensorScatterUpdate",
  "update",
  _NUMBERS + ("bool",),
  jvp=rules.per_op(rules.scatter_linear_jvp),
  transpose=rules.per_op(rules.scatter_nd_update_transpose),
  unique=True,
  doc="tensor with the indexed slices replaced by updates (the last duplicate wins).",
)
ScatterNdNonAliasingAdd = _tensor_scatter(
  "ScatterNdNonAliasingAdd",
  "add",
  _NUMBERS + ("bool",),
  tensor_arg="input",
  jvp=rules.per_op(rules.scatter_linear_jvp),
  transpose=rules.scatter_nd_add_transpose(False),
  doc="input with updates added at the index vectors (bool: OR).",
)


# --- SparseToDense ------------------------------------------------------------------------


def _sparse_index_matrix(op_type, indices, rank):
  """sparse_indices as ``[N, rank]`` index vectors (TF: a scalar is one index, a
  vector N indices into a vector)."""
  if indices.ndim > 2:
    raise ValueError(
      f"{op_type}: sparse_indices should be a scalar, vector, or matrix, "
      f"got shape {_dims(indices.shape)}"
    )
  matrix = jnp.reshape(indices, (-1, 1)) if indices.ndim < 2 else indices
  if matrix.shape[1] != rank:
    raise ValueError(
      f"{op_type}: output_shape has incorrect number of elements: {rank} "
      f"should be: {matrix.shape[1]}"
    )
  return matrix


def _sparse_to_dense_impl(
  sparse_indices, sparse_values, default_value, *, output_shape, validate_indices
):
  """default_value everywhere but at sparse_indices (the last duplicate wins;
  out-of-range indices are dropped)."""
  shape = ints(output_shape)
  idx = _sparse_index_matrix("SparseToDense", sparse_indices, len(shape))
  n = idx.shape[0]
  if sparse_values.ndim > 1 or (sparse_values.ndim == 1 and sparse_values.shape[0] != n):
    raise ValueError(
      f"SparseToDense: sparse_values has incorrect shape "
      f"{_dims(sparse_values.shape)}, should be [] or [{n}]"
    )
  if default_value.ndim:
    raise ValueError("SparseToDense: default_value should be a scalar")
  out = jnp.full(shape, default_value, sparse_values.dtype)
  values = jnp.broadcast_to(sparse_values, (n,))
  return scatter_nd_values("update", out, idx, values, "SparseToDense")


def _sparse_to_dense_check(
  sparse_indices, sparse_values, default_value, *, output_shape, validate_indices
):
  """TF's CPU checks: indices in bounds; with validate_indices also sorted and unique."""
  shape = ints(output_shape)
  idx = _sparse_index_matrix("SparseToDense", sparse_indices, len(shape))
  if idx.shape[0] == 0:
    return jnp.asarray(False), ""
  bad = ~jnp.all(index_validity(idx, shape))
  if not validate_indices:
    return bad, f"Indices are not valid (out of bounds).  Shape: {_dims(shape)}"
  if idx.shape[0] > 1 and shape:
    wide = idx.astype(jnp.int64 if idx.dtype.itemsize == 8 else jnp.int32)
    # Row-major order of consecutive index vectors: the first differing coordinate.
    diff = wide[1:] - wide[:-1]
    first = jnp.argmax(diff != 0, axis=1)
    step = jnp.take_along_axis(diff, first[:, None], axis=1)[:, 0]
    bad = bad | jnp.any(step <= 0)
  return bad, (
    f"indices[i] = [...] is out of bounds: need 0 <= index < {_dims(shape)}, "
    "or is out of order or repeated (validate_indices: many sparse ops "
    "require sorted indices)"
  )


def _sparse_to_dense_jvp(primals, tangents, **params):
  (i, v, d), (_, tv, td) = primals, tangents
  out = tfops.SparseToDense(i, v, d, **params)
  if type(tv) is ad.Zero and type(td) is ad.Zero:
    return out, rules.zero_tangent(out)
  return out, tfops.SparseToDense(i, rules.instantiate(tv), rules.instantiate(td), **params)


def _sparse_to_dense_transpose(ct, i, v, d, *, output_shape, validate_indices):
  ct = rules.instantiate(ct)
  shape = ints(output_shape)
  dt = rules.dtype_of(ct)
  ishape = rules.shape_of(i)
  idx = i if len(ishape) == 2 else rules.reshape(i, (int(np.prod(ishape)), 1))
  cv = cd = None
  if U(v):
    mask = tfops.Cast(rules.last_writer_mask(idx, shape), DstT=dt, Truncate=False)
    cv = tfops.Mul(tfops.GatherNd(ct, idx, bad_indices_policy=""), mask)
    cv = rules.reshape(rules.reduce_sum(cv, (0,)), ()) if not rules.shape_of(v) else cv
  if U(d):
    written = tfops.SparseToDense(
      i, np.ones((), bool), np.zeros((), bool), output_shape=output_shape, validate_indices=False
    )
    cd = rules.reduce_sum(tfops.SelectV2(written, np.zeros((), dt), ct), range(len(shape)))
  return [None, cv, cd]


def _sparse_to_dense_batch(args, dims, *, output_shape, validate_indices):
  (i, v, d), (di, dv, dd) = args, dims
  size = rules.batch_size(args, dims)
  shape = ints(output_shape)
  n = int(np.prod(rules.unbatched_shape(i, di)[:1] or (1,)))
  i = rules.reshape(rules.with_batch_axis(i, di, size), (size, n, len(shape)))
  i = rules.reshape(rules.batch_coordinates(i, size), (size * n, len(shape) + 1))
  v = rules.with_batch_axis(v, dv, size)
  v = rules.reshape(rules.broadcast_to(rules.reshape(v, (size, -1)), (size, n)), (size * n,))
  new_shape = (size,) + shape
  if dd is None:
    return tfops.SparseToDense(
      i, v, d, output_shape=new_shape, validate_indices=validate_indices
    ), 0
  out = tfops.SparseToDense(
    i, v, np.zeros((), rules.dtype_of(v)), output_shape=new_shape, validate_indices=validate_indices
  )
  written = tfops.SparseToDense(
    i, np.ones((), bool), np.zeros((), bool), output_shape=new_shape, validate_indices=False
  )
  return tfops.SelectV2(
    written, out, rules.reshape(rules.to_front(d, dd), (size,) + (1,) * len(shape))
  ), 0


SparseToDense = register_op(
  "SparseToDense",
  _sparse_to_dense_impl,
  family=FAMILY,
  static=("output_shape",),
  attrs=("validate_indices",),
  jvp=_sparse_to_dense_jvp,
  transpose=_sparse_to_dense_transpose,
  batching=_sparse_to_dense_batch,
  check=_sparse_to_dense_check,
  spec=lambda st: st.Spec(_sparse_to_dense_calls(st)),
)


# --- property-test strategies (hypothesis is imported lazily) ---------------------


def _scatter_nd_calls(st):
  @st.composite
  def calls(draw):
    kw = draw(st.nd_scatter_calls(_NUMBERS + ("bool",), tensor_arg="tensor"))
    shape = kw.pop("tensor").shape
    kw["shape"] = np.asarray(shape, kw["indices"].dtype)
    return kw

  return calls()


def _sparse_to_dense_calls(st):
  from tfprims.ops.shared_specs import lazy_hst

  hst = lazy_hst()

  @st.composite
  def calls(draw):
    shape = tuple(draw(st.shapes(min_rank=1, max_rank=3, min_side=1)))
    total = int(np.prod(shape))
    n = draw(hst.integers(0, min(total, 4)))
    # Sorted distinct positions (TF validates them; its gradient assumes them).
    flat = sorted(draw(hst.permutations(range(total)))[:n])
    itype = draw(st.dtypes(("int32", "int64")))
    idx = np.stack(np.unravel_index(np.asarray(flat, np.int64), shape), -1).reshape(n, len(shape))
    # Index matrices only: TF's gradient gathers with the scalar and vector forms as
    # one index vector (wrong); those forms are tested in tests/test_gather_scatter.py.
    dtype = draw(st.dtypes(st.ALL))
    return {
      "sparse_indices": np.asarray(idx, itype),
      "output_shape": np.asarray(shape, itype),
      "sparse_values": draw(st.arrays(dtype, (n,))),
      "default_value": draw(st.arrays(dtype, ())),
      "validate_indices": draw(hst.booleans()),
    }

  return calls()
