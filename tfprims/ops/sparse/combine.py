"""SparseConcat, SparseSlice, SparseAdd and SparseSparseMaximum/Minimum
(``tf.sparse.concat``, ``slice``, ``add``, ``maximum``, ``minimum``).

SparseConcat's output has as many entries as its inputs together, so only the
shapes are static: TF's kernel reorders each input with ``concat_dim`` first,
concatenates them with offset indices, and reorders the result into row-major
order; tfprims does the same with two stable sorts.

SparseAdd merges two sparse tensors as TF's kernel does (both walked in step). On
known values (an eager call) it is computed with numpy, sums of coinciding entries
below ``thresh`` dropped. On traced values its indices are static and, where entries
coincide, ``thresh`` must be at most 0 (else DynamicShapeError naming the node).
SparseSparseMaximum/Minimum merge the same way (static indices), an implicit zero
standing in where one side has no entry.

SparseSlice keeps the entries inside ``[start, start + size)``, a data-dependent
count: its indices are static (an eager call knows them; under jit traced indices
raise StaticInputError naming the node), its layout computed with numpy and its
values gathered.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from tfprims import core, dtypes, errors, folding, rules
from tfprims.core import register_op
from tfprims.ops.shared import ints
from tfprims.ops.shared_specs import lazy_hst
from tfprims.ops.sparse._common import (
  FAMILY,
  as_param,
  draw_sparse,
  index_dtype,
  static_indices,
  static_outputs,
  static_shape,
  values_jvp,
)


def _sorted(indices, values, key_order):
  n = indices.shape[0]
  keys = [indices[:, d] for d in key_order]
  out = lax.sort(keys + [jnp.arange(n, dtype=np.int32)], num_keys=len(keys), is_stable=True)
  return indices[out[-1]], values[out[-1]]


# --- SparseConcat ---------------------------------------------------------------------------


def _concat(*operands, shapes, concat_dim):
  """The inputs side by side along ``concat_dim``, entries in row-major order."""
  n = len(shapes)
  if n < 2 or len(operands) != 2 * n:
    raise ValueError(f"SparseConcat needs at least 2 inputs, got {n}")
  dims = [static_shape(s, "shapes") for s in shapes]
  rank = len(dims[0])
  axis = int(concat_dim)
  if not -rank <= axis < rank:
    raise ValueError(f"Concat dimension must be in range [{-rank}, {rank}), got {axis}")
  axis %= rank
  for d in dims[1:]:
    if len(d) != rank or any(a != b for i, (a, b) in enumerate(zip(d, dims[0])) if i != axis):
      raise ValueError(
        f"All SparseTensors' shapes must match except on the concat "
        f"dimension; got {dims[0]} and {d}"
      )
  dt = index_dtype()
  order = [axis] + [d for d in range(rank) if d != axis]
  parts_i, parts_v, offset = [], [], 0
  for k in range(n):
    idx, vals = jnp.asarray(operands[k]).astype(dt), jnp.asarray(operands[n + k])
    if idx.shape[0]:
      idx, vals = _sorted(idx, vals, order)
    parts_i.append(idx.at[:, axis].add(offset))
    parts_v.append(vals)
    offset += dims[k][axis]
  idx, vals = jnp.concatenate(parts_i), jnp.concatenate(parts_v)
  if idx.shape[0]:
    idx, vals = _sorted(idx, vals, range(rank))
  out_shape = _concat_shape(shapes, concat_dim)
  return idx, vals, jnp.asarray(out_shape.astype(dt))


def _concat_shape(shapes, concat_dim):
  dims = [static_shape(s, "shapes") for s in shapes]
  axis = int(concat_dim) % len(dims[0])
  return np.asarray(
    [sum(d[axis] for d in dims) if i == axis else s for i, s in enumerate(dims[0])], np.int64
  )


def _concat_spec(st):
  hst = lazy_hst()

  @st.composite
  def calls(draw):
    dtype = draw(st.dtypes(("float32", "float64", "int32", "bool")))
    first = draw_sparse(draw, st, dtype)
    rank = len(first[2])
    axis = draw(hst.integers(-rank, rank - 1))
    parts = [first]
    for _ in range(draw(hst.integers(1, 2))):
      idx, vals, shape = draw_sparse(draw, st, dtype, rank=rank)
      shape = np.where(np.arange(rank) == axis % rank, shape, first[2])
      idx = idx[np.all(idx < shape, axis=1)]  # the other dims are the first input's
      parts.append((idx, vals[: idx.shape[0]], shape))
    return {
      "indices": [p[0] for p in parts],
      "values": [p[1] for p in parts],
      "shapes": [p[2] for p in parts],
      "concat_dim": axis,
    }

  return st.Spec(calls(), vmap_variation="scale", examples=0.5)


SparseConcat = register_op(
  "SparseConcat",
  _concat,
  family=FAMILY,
  static=("shapes",),
  attrs=("concat_dim",),
  multiple_results=True,
  spec=_concat_spec,
  interpret=static_outputs(lambda *, shapes, concat_dim: {2: _concat_shape(shapes, concat_dim)}),
  doc="The sparse inputs concatenated along concat_dim, entries in row-major order.",
)


# --- SparseSlice ----------------------------------------------------------------------------


def _slice_layout(indices, shape, start, size):
  """SparseSlice's kept positions, output indices and shape (numpy)."""
  dims = static_shape(shape, "shape")
  begin, extent = ints(start), ints(size)
  if len(begin) != len(dims) or len(extent) != len(dims):
    raise ValueError("Expected start and size to have the rank of the input shape")
  idx = static_indices(indices, len(dims))
  lo, hi = np.asarray(begin, np.int64), np.asarray(begin, np.int64) + extent
  keep = (
    np.nonzero(np.all((idx >= lo) & (idx < hi), axis=1))[0]
    if idx.shape[0]
    else np.zeros((0,), np.int64)
  )
  out_shape = np.maximum(np.minimum(hi, dims) - lo, 0)
  return keep, (idx[keep] - lo).reshape(-1, len(dims)), out_shape


def _slice(values, *, indices, shape, start, size):
  """The entries inside ``[start, start + size)`` (input order), shifted by start."""
  keep, out_idx, out_shape = _slice_layout(indices, shape, start, size)
  dt = index_dtype()
  return (
    jnp.asarray(out_idx.astype(dt)),
    values[jnp.asarray(keep.astype(np.int32))],
    jnp.asarray(out_shape.astype(dt)),
  )


def _slice_known(**params):
  _, out_idx, out_shape = _slice_layout(**params)
  return {0: out_idx, 2: out_shape}


def _slice_spec(st):
  hst = lazy_hst()

  @st.composite
  def calls(draw):
    dtype = draw(st.dtypes(("float32", "float64", "int32", "complex64")))
    idx, vals, shape = draw_sparse(draw, st, dtype)
    start = np.asarray([draw(hst.integers(0, int(s) + 1)) for s in shape], np.int64)
    size = np.asarray([draw(hst.integers(0, 5)) for _ in shape], np.int64)
    return {"indices": idx, "values": vals, "shape": shape, "start": start, "size": size}

  return st.Spec(calls(), vmap_variation="scale")


def _slice_transpose(cts, values, *, indices, shape, start, size):
  """TF's gradient: SparseSliceGrad of the values' cotangent."""
  _, out_idx, _ = _slice_layout(indices, shape, start, size)
  rank = len(static_shape(shape, "shape"))
  return [
    core.tfops.SparseSliceGrad(
      rules.instantiate(cts[1]),
      input_indices=as_param(static_indices(indices, rank)),
      input_start=tuple(ints(start)),
      output_indices=as_param(out_idx),
    )
  ]


SparseSlice = register_op(
  "SparseSlice",
  _slice,
  family=FAMILY,
  static=("indices", "shape", "start", "size"),
  multiple_results=True,
  spec=_slice_spec,
  interpret=static_outputs(_slice_known),
  jvp=rules.per_op(values_jvp, 1, 1),
  transpose=_slice_transpose,
  doc="The entries inside [start, start + size), their indices shifted by start.",
)


# --- SparseAdd ------------------------------------------------------------------------------


def add_layout(a_indices, b_indices, rank):
  """TF's SparseAdd merge (both inputs walked in step, compared lexicographically):
  per output entry its a position and b position (-1: none)."""
  a, b = static_indices(a_indices, rank), static_indices(b_indices, rank)
  pairs, i, j = [], 0, 0
  while i < len(a) and j < len(b):
    ka, kb = tuple(a[i]), tuple(b[j])
    if ka < kb:
      pairs.append((i, -1))
      i += 1
    elif ka == kb:
      pairs.append((i, j))
      i, j = i + 1, j + 1
    else:
      pairs.append((-1, j))
      j += 1
  pairs += [(k, -1) for k in range(i, len(a))] + [(-1, k) for k in range(j, len(b))]
  ia = np.asarray([p[0] for p in pairs], np.int64)
  ib = np.asarray([p[1] for p in pairs], np.int64)
  out = (
    np.where(
      (ia >= 0)[:, None],
      a[np.maximum(ia, 0)] if len(a) else 0,
      b[np.maximum(ib, 0)] if len(b) else 0,
    )
    if pairs
    else np.zeros((0, rank), np.int64)
  )
  return out.reshape(-1, rank).astype(np.int64), ia, ib


def _add_shapes(a_shape, b_shape):
  a, b = static_shape(a_shape, "a_shape"), static_shape(b_shape, "b_shape")
  if a != b:
    raise ValueError(f"Operands do not have the same ranks or shapes: {list(a)} and {list(b)}")
  return a


def _add(a_values, b_values, thresh, *, a_indices, a_shape, b_indices, b_shape):
  """The entries of a and b merged, values added where their indices match (kept
  whatever ``thresh``: a positive one that could drop them needs known values)."""
  dims = _add_shapes(a_shape, b_shape)
  idx, ia, ib = add_layout(a_indices, b_indices, len(dims))
  dt = index_dtype()
  pa = jnp.concatenate([a_values, jnp.zeros((1,), a_values.dtype)])
  pb = jnp.concatenate([b_values, jnp.zeros((1,), b_values.dtype)])
  na, nb = a_values.shape[0], b_values.shape[0]
  va = pa[jnp.asarray(np.where(ia >= 0, ia, na).astype(np.int32))]
  vb = pb[jnp.asarray(np.where(ib >= 0, ib, nb).astype(np.int32))]
  both = jnp.asarray((ia >= 0) & (ib >= 0))
  values = jnp.where(both, va + vb, jnp.where(jnp.asarray(ia >= 0), va, vb))
  return (jnp.asarray(idx.astype(dt)), values, jnp.asarray(np.asarray(dims, np.int64).astype(dt)))


def _add_exact(node, inputs):
  """TF's SparseAdd on known values (numpy): sums below thresh dropped."""
  a_idx, a_val, a_shape, b_idx, b_val, b_shape, thresh = (np.asarray(v) for v in inputs)
  dims = _add_shapes(a_shape, b_shape)
  idx, ia, ib = add_layout(a_idx, b_idx, len(dims))
  va = np.where(ia >= 0, a_val[np.maximum(ia, 0)] if a_val.size else 0, 0)
  vb = np.where(ib >= 0, b_val[np.maximum(ib, 0)] if b_val.size else 0, 0)
  values = (va + vb).astype(a_val.dtype)
  both = (ia >= 0) & (ib >= 0)
  with np.errstate(invalid="ignore"):
    keep = ~both | (np.abs(values) >= thresh)
  name = f"SparseAdd node '{node.name}'"
  return [
    dtypes.canonicalize_value(idx[keep], name),
    values[keep],
    dtypes.canonicalize_value(np.asarray(dims, np.int64), name),
  ]


def _add_interpret(ctx, node, inputs):
  if not any(isinstance(v, jax.core.Tracer) for v in inputs):
    return _add_exact(node, inputs)
  thresh = folding.known_value(inputs[6])
  if thresh is None or np.asarray(thresh) > 0:
    op = core.lookup(node.op)
    try:
      _, params = op.prepare(dict(zip(_ADD_ARGS, inputs)), {}, node.name)
      dims = _add_shapes(params["a_shape"], params["b_shape"])
      _, ia, ib = add_layout(params["a_indices"], params["b_indices"], len(dims))
      clash = bool(np.any((ia >= 0) & (ib >= 0)))
    except ValueError:
      clash = True
    if clash:
      raise errors.DynamicShapeError(
        f"SparseAdd node '{node.name}': with a positive (or traced) thresh, which sums "
        "of coinciding entries are kept depends on the values, which are traced; "
        "use thresh=0 (tf.sparse.add's default)"
      )
  return _add_static(ctx, node, inputs)


def _add_known(*, a_indices, a_shape, b_indices, b_shape):
  dims = _add_shapes(a_shape, b_shape)
  return {0: add_layout(a_indices, b_indices, len(dims))[0], 2: np.asarray(dims, np.int64)}


_add_static = static_outputs(_add_known)


_ADD_ARGS = ("a_indices", "a_values", "a_shape", "b_indices", "b_values", "b_shape", "thresh")


def _add_spec(st):
  hst = lazy_hst()

  @st.composite
  def calls(draw):
    dtype = draw(st.dtypes(("float32", "float64", "int32", "complex64")))
    a_idx, _, shape = draw_sparse(draw, st, dtype, canonical=True)
    b_idx, _, _ = draw_sparse(draw, st, dtype, rank=len(shape), canonical=True)
    b_idx = b_idx[np.all(b_idx < shape, axis=1)]
    if draw(hst.booleans()) and len(a_idx):  # coinciding entries
      b_idx = np.unique(np.concatenate([b_idx, a_idx[::2]]), axis=0)
    real = {"complex64": "float32"}.get(np.dtype(dtype).name, dtype)
    return {
      "a_indices": a_idx,
      "a_values": draw(st.arrays(dtype, (len(a_idx),), special=False)),
      "a_shape": shape,
      "b_indices": b_idx.astype(np.int64),
      "b_values": draw(st.arrays(dtype, (len(b_idx),), special=False)),
      "b_shape": shape,
      "thresh": np.asarray(draw(hst.sampled_from([0, -1])), real),
    }

  # TF's forward mode (ForwardAccumulator through SparseAddGrad) gives zero tangents
  # when b is empty; its GradientTape gradient is right.
  return st.Spec(
    calls(),
    diff_args=("a_values", "b_values"),
    vmap_variation="scale",
    grad_oracle="vjp",
    examples=0.5,
  )


def _add_transpose(cts, a_values, b_values, thresh, *, a_indices, a_shape, b_indices, b_shape):
  """TF's gradient: SparseAddGrad of the sum's values' cotangent (every sum kept: the
  traced form keeps them)."""
  dims = _add_shapes(a_shape, b_shape)
  a, b = static_indices(a_indices, len(dims)), static_indices(b_indices, len(dims))
  total = add_layout(a, b, len(dims))[0]
  ga, gb = core.tfops.SparseAddGrad(
    rules.instantiate(cts[1]),
    a_indices=as_param(a),
    b_indices=as_param(b),
    sum_indices=as_param(total),
  )
  return [ga if rules.U(a_values) else None, gb if rules.U(b_values) else None, None]


SparseAdd = register_op(
  "SparseAdd",
  _add,
  family=FAMILY,
  static=("a_indices", "a_shape", "b_indices", "b_shape"),
  multiple_results=True,
  interpret=_add_interpret,
  spec=_add_spec,
  jvp=rules.per_op(values_jvp, 2, 1),
  transpose=_add_transpose,
  doc="The entries of a and b merged, values added where indices coincide (sums "
  "below thresh dropped on known values).",
)


# --- SparseSparseMaximum / SparseSparseMinimum ------------------------------------------------


def _extreme_impl(fn):
  def impl(a_values, b_values, *, a_indices, a_shape, b_indices, b_shape):
    dims = _add_shapes(a_shape, b_shape)
    idx, ia, ib = add_layout(a_indices, b_indices, len(dims))
    zero = jnp.zeros((1,), a_values.dtype)
    va = jnp.concatenate([a_values, zero])[
      jnp.asarray(np.where(ia >= 0, ia, a_values.shape[0]).astype(np.int32))
    ]
    vb = jnp.concatenate([b_values, zero])[
      jnp.asarray(np.where(ib >= 0, ib, b_values.shape[0]).astype(np.int32))
    ]
    return jnp.asarray(idx.astype(index_dtype())), fn(va, vb)

  impl.__doc__ = (
    "The union of the entries, each the elementwise extreme of a and b "
    "(an implicit zero where one has no entry)."
  )
  return impl


def _extreme_known(*, a_indices, a_shape, b_indices, b_shape):
  dims = _add_shapes(a_shape, b_shape)
  return {0: add_layout(a_indices, b_indices, len(dims))[0]}


def _extreme_spec(st):
  @st.composite
  def calls(draw):
    call = draw(_add_spec(st).calls)
    call.pop("thresh")
    if np.dtype(call["a_values"].dtype).kind == "c":  # TF has real kernels only
      call["a_values"] = call["a_values"].real.copy()
      call["b_values"] = call["b_values"].real.copy()
    # Bounded (float32 central differences), away from the kinks (a value at the
    # implicit 0, equal values of a and b), where central differences average the sides.
    a, b = (np.clip(call[k], -4, 4).astype(call[k].dtype) for k in ("a_values", "b_values"))
    a = np.where(np.abs(a) < 0.25, np.asarray(0.75, a.dtype), a)
    b = np.where(np.abs(b) < 0.25, np.asarray(-0.75, b.dtype), b)
    call["a_values"], call["b_values"] = a, np.where(np.isin(b, a), b + 3, b).astype(b.dtype)
    return call

  # TF's registered gradient raises (it takes the wrong number of arguments).
  return st.Spec(
    calls(),
    vmap_variation="scale",
    examples=0.5,
    grad_oracle="fd",
    note="derivatives vs central differences: TF's gradient function raises",
  )


def _define_extreme(name, fn):
  return register_op(
    name,
    _extreme_impl(fn),
    family=FAMILY,
    static=("a_indices", "a_shape", "b_indices", "b_shape"),
    multiple_results=True,
    interpret=static_outputs(_extreme_known),
    spec=_extreme_spec,
    doc=f"The union of a's and b's entries, each the {name[12:].lower()} of the two "
    "(implicit zeros where one has none), in TF's merge order.",
  )


SparseSparseMaximum = _define_extreme("SparseSparseMaximum", jnp.maximum)
SparseSparseMinimum = _define_extreme("SparseSparseMinimum", jnp.minimum)
