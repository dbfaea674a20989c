"""SparseTensorDenseMatMul: ``op(A) @ op(B)`` for a sparse ``A`` (``sparse_dense_matmul``).

``a_shape`` is static (it decides the output's rows). Duplicate indices add up, as in
TF's kernel; an index outside ``a_shape`` (on which TF raises) adds nothing, and
``runtime_checks`` raises like TF. Rules are TF-named: the op is bilinear in
``a_values`` and ``b``; the transpose for ``b`` is the op with ``adjoint_a`` flipped
(and conjugated values), for ``a_values`` a GatherV2 of the cotangent's rows times
``op(B)``'s rows, summed.
"""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np

from tfprims import rules
from tfprims.core import register_op, tfops
from tfprims.ops.shared_specs import lazy_hst
from tfprims.ops.sparse._common import FAMILY, check_indices, draw_sparse, static_shape

U = rules.U


def _shape2(a_shape):
  dims = static_shape(a_shape, "a_shape")
  if len(dims) != 2:
    raise ValueError(f"Tensor 'a_shape' is not a vector of length 2: {list(dims)}")
  return dims


def _matmul(a_indices, a_values, b, *, a_shape, adjoint_a, adjoint_b):
  """``op(A) @ op(B)``: each entry ``A[r, c] = v`` adds ``v * op(B)[c]`` to row ``r``."""
  m, k = _shape2(a_shape)
  if a_indices.ndim != 2 or a_indices.shape[1] != 2:
    raise ValueError("a_indices must be a matrix [nnz, 2]")
  if b.ndim != 2:
    raise ValueError("Tensor 'b' is not a matrix")
  rows, cols, vals = a_indices[:, 0], a_indices[:, 1], a_values
  if adjoint_a:
    rows, cols, m, k, vals = cols, rows, k, m, jnp.conj(vals)
  bt = jnp.conj(b.T) if adjoint_b else b
  if bt.shape[0] != k:
    raise ValueError(
      f"Cannot multiply A and B because inner dimension does not match: {k} vs. {bt.shape[0]}"
    )
  # Negative indices would count from the end: send them past it, where nothing is added.
  picked = jnp.take(bt, jnp.where(cols < 0, k, cols), axis=0, mode="fill", fill_value=0)
  out = jnp.zeros((m, bt.shape[1]), a_values.dtype)
  return out.at[jnp.where(rows < 0, m, rows)].add(vals[:, None] * picked, mode="drop")


def _conj(x):
  return tfops.Conj(x) if jnp.iscomplexobj(x) else x


def _transpose(ct, a_indices, a_values, b, *, a_shape, adjoint_a, adjoint_b):
  ct = rules.instantiate(ct)
  params = {"a_shape": a_shape, "adjoint_a": adjoint_a, "adjoint_b": adjoint_b}
  ct_values = ct_b = None
  if U(b):  # op(B)'s cotangent is op(A)^T ct
    g = SparseTensorDenseMatMul(
      a_indices, _conj(a_values), ct, **dict(params, adjoint_a=not adjoint_a, adjoint_b=False)
    )
    ct_b = _conj(rules.transpose(g, (1, 0))) if adjoint_b else g
  if U(a_values):  # ct_v[k] = sum_j ct[r_k, j] op(B)[c_k, j] (conjugated for adjoint_a)
    r = rules.reshape(tfops.Slice(a_indices, begin=(0, 0), size=(-1, 1)), (-1,))
    c = rules.reshape(tfops.Slice(a_indices, begin=(0, 1), size=(-1, 1)), (-1,))
    if adjoint_a:
      r, c = c, r
    bt = _conj(rules.transpose(b, (1, 0))) if adjoint_b else b
    prod = tfops.Mul(
      tfops.GatherV2(ct, r, axis=0, batch_dims=0), tfops.GatherV2(bt, c, axis=0, batch_dims=0)
    )
    ct_values = rules.reduce_sum(prod, (1,))
    ct_values = _conj(ct_values) if adjoint_a else ct_values
  return [None, ct_values, ct_b]


def _batching(args, dims, *, a_shape, adjoint_a, adjoint_b):
  """TF-named: a batch of ``b`` alone joins its columns (one product); a batch of the
  sparse operand makes one block-diagonal sparse matrix of the examples' matrices, each
  entry's indices offset by its example's block (an entry outside ``a_shape`` gets
  index -1 instead, which adds nothing, so none lands in another example's block)."""
  (indices, values, b), (di, dv, db) = args, dims
  size = rules.batch_size(args, dims)
  params = {"adjoint_a": adjoint_a, "adjoint_b": adjoint_b}
  m0, k0 = _shape2(a_shape)
  m, k = (k0, m0) if adjoint_a else (m0, k0)
  if di is None and dv is None:  # the columns of the B batch members side by side
    if adjoint_b:  # [size, n, k] -> [size * n, k]
      b = rules.to_front(b, db)
      n = rules.shape_of(b)[1]
      b = rules.reshape(b, (size * n, k))
    else:  # [size, k, n] -> [k, size * n]
      b = rules.move_axes(b, (db,), (1,))
      n = rules.shape_of(b)[2]
      b = rules.reshape(b, (k, size * n))
    out = SparseTensorDenseMatMul(indices, values, b, a_shape=a_shape, **params)
    return rules.reshape(out, (m, size, n)), 1
  indices = rules.with_batch_axis(indices, di, size)  # [size, nnz, 2]
  values = rules.with_batch_axis(values, dv, size)  # [size, nnz]
  idt = rules.dtype_of(indices)
  inside = tfops.All(
    tfops.LogicalAnd(
      tfops.GreaterEqual(indices, np.zeros((), idt)), tfops.Less(indices, np.array([m0, k0], idt))
    ),
    axis=(2,),
    keep_dims=True,
  )
  block = np.arange(size, dtype=idt).reshape(size, 1, 1) * np.array([m0, k0], idt)
  indices = tfops.SelectV2(inside, tfops.AddV2(indices, block), np.full((), -1, idt))
  nnz = rules.shape_of(values)[1]
  indices = rules.reshape(indices, (size * nnz, 2))
  values = rules.reshape(values, (size * nnz,))
  b = rules.with_batch_axis(b, db, size)
  if adjoint_b:  # [size, n, k] -> [n, size * k]
    n = rules.shape_of(b)[1]
    b = rules.reshape(rules.move_axes(b, (0,), (1,)), (n, size * k))
  else:  # [size, k, n] -> [size * k, n]
    n = rules.shape_of(b)[2]
    b = rules.reshape(b, (size * k, n))
  out = SparseTensorDenseMatMul(indices, values, b, a_shape=(size * m0, size * k0), **params)
  return rules.reshape(out, (size, m, n)), 0


def _check(a_indices, a_values, b, *, a_shape, adjoint_a, adjoint_b):
  return check_indices(a_indices, _shape2(a_shape))


def _spec(st):
  hst = lazy_hst()

  @st.composite
  def calls(draw):
    dtype = draw(st.dtypes(("float32", "float64", "complex64", "int32")))
    idx, vals, shape = draw_sparse(draw, st, dtype, rank=2, index_dtypes=("int32", "int64"))
    adjoint_a, adjoint_b = draw(hst.booleans()), draw(hst.booleans())
    k = int(shape[0] if adjoint_a else shape[1])
    n = draw(hst.integers(0, 3))
    b = draw(st.arrays(dtype, (n, k) if adjoint_b else (k, n)))
    return {
      "a_indices": idx,
      "a_values": vals,
      "a_shape": shape,
      "b": b,
      "adjoint_a": adjoint_a,
      "adjoint_b": adjoint_b,
    }

  return st.Spec(calls(), diff_args=("a_values", "b"), vmap_variation="scale")


SparseTensorDenseMatMul = register_op(
  "SparseTensorDenseMatMul",
  _matmul,
  family=FAMILY,
  static=("a_shape",),
  attrs=("adjoint_a", "adjoint_b"),
  check=_check,
  jvp=(
    None,
    lambda t, i, v, b, **p: SparseTensorDenseMatMul(i, t, b, **p),
    lambda t, i, v, b, **p: SparseTensorDenseMatMul(i, v, t, **p),
  ),
  transpose=_transpose,
  batching=_batching,
  spec=_spec,
)
