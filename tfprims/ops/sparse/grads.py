"""The gradient ops TF registers for the sparse ops (SparseAddGrad,
SparseSliceGrad, SparseFillEmptyRowsGrad) and SparseSplit (``tf.sparse.split``).

The *Grad ops are linear in their gradient input. SparseAddGrad and SparseSliceGrad
match entries by their indices, which are static (an eager call knows them; under
jit traced indices raise StaticInputError naming the node): each output entry's
source is computed with numpy as TF's kernel walks the indices (entries matching
nothing get 0), and the values are a gather. SparseFillEmptyRowsGrad takes its
reverse index map as an operand (its output shapes are the operands'): ``d_values``
gathers the gradient at the map, ``d_default_value`` sums the gradient at the
positions the map does not reach.

SparseSplit splits a dimension into ``num_split`` pieces as TF does (the first
``size % num_split`` one longer), each piece's entries in input order. Its indices,
``split_dim`` and dense shape are static; its values are gathered (differentiable and
vmappable).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from jax.interpreters import ad

from tfprims import rules
from tfprims.core import register_op
from tfprims.ops.shared_specs import lazy_hst
from tfprims.ops.sparse._common import (
  FAMILY,
  draw_sparse,
  index_dtype,
  static_indices,
  static_outputs,
  static_shape,
)
from tfprims.ops.sparse.combine import _slice_layout, add_layout

_FLOATS = ("float32", "float64", "int32", "complex64")


def _indices(x, what):
  a = np.asarray(x, dtype=np.int64)
  if a.ndim != 2 and a.size:
    raise ValueError(f"{what} should be a matrix but received shape {list(a.shape)}")
  return (
    a.reshape(a.shape[0] if a.ndim else 0, -1)
    if a.ndim == 2
    else a.reshape(0, a.shape[-1] if a.ndim else 0)
  )


def _gather_or_zero(x, source):
  """``x[source]``, 0 where source is -1 (a numpy int array)."""
  pool = jnp.concatenate([x.reshape(-1), jnp.zeros((1,), x.dtype)])
  return pool[jnp.asarray(np.where(source >= 0, source, x.shape[0]).astype(np.int32))]


def _scatter_back(ct, source, n):
  """The transpose of ``_gather_or_zero``: ``ct`` summed into ``n`` positions."""
  keep = source >= 0
  out = jnp.zeros((n,), ct.dtype)
  if not keep.any():
    return out
  at = jnp.asarray(source[keep].astype(np.int32))
  return out.at[at].add(ct[jnp.asarray(np.nonzero(keep)[0].astype(np.int32))])


# --- SparseAddGrad --------------------------------------------------------------------------


def add_grad_layout(a_indices, b_indices, sum_indices):
  """Each a and b entry's position in the sum (-1: none), as TF's kernel walks the
  three index lists (sorted row-major) in step."""
  a, b, s = (
    _indices(x, w)
    for x, w in ((a_indices, "a_indices"), (b_indices, "b_indices"), (sum_indices, "sum_indices"))
  )
  na, nb, ns = len(a), len(b), len(s)
  amap, bmap = np.full(na, -1, np.int64), np.full(nb, -1, np.int64)
  i = j = k = 0

  def cmp(x, y):
    tx, ty = tuple(int(v) for v in x), tuple(int(v) for v in y)
    return int(tx > ty) - int(tx < ty)

  def step(m, idx, pos, kk):
    c = cmp(idx[pos], s[kk])
    if c == 0:
      m[pos] = kk
      return pos + 1, True
    if c < 0:
      return pos + 1, False
    return pos, True

  while i < na and j < nb and k < ns:
    i, ga = step(amap, a, i, k)
    j, gb = step(bmap, b, j, k)
    if ga and gb:
      k += 1
  while i < na and k < ns:
    i, ga = step(amap, a, i, k)
    k += ga
  while j < nb and k < ns:
    j, gb = step(bmap, b, j, k)
    k += gb
  return amap, bmap


def _add_grad(backprop_val_grad, *, a_indices, b_indices, sum_indices):
  """The sum's gradient sent back to the a and b entries at the same indices."""
  if backprop_val_grad.ndim != 1 or backprop_val_grad.shape[0] != len(_indices(sum_indices, "")):
    raise ValueError("# elements of backprop_val_grad and # rows of sum_indices should match")
  amap, bmap = add_grad_layout(a_indices, b_indices, sum_indices)
  return _gather_or_zero(backprop_val_grad, amap), _gather_or_zero(backprop_val_grad, bmap)


def _add_grad_transpose(cts, backprop_val_grad, *, a_indices, b_indices, sum_indices):
  amap, bmap = add_grad_layout(a_indices, b_indices, sum_indices)
  n = backprop_val_grad.aval.shape[0]
  ca, cb = (rules.instantiate(c) for c in cts)
  return [_scatter_back(ca, amap, n) + _scatter_back(cb, bmap, n)]


def _add_grad_spec(st):
  hst = lazy_hst()

  @st.composite
  def calls(draw):
    dtype = draw(st.dtypes(_FLOATS))
    a_idx, _, shape = draw_sparse(draw, st, dtype, canonical=True)
    b_idx, _, _ = draw_sparse(draw, st, dtype, rank=len(shape), canonical=True)
    b_idx = b_idx[np.all(b_idx < shape, axis=1)]
    if draw(hst.booleans()) and len(a_idx):  # coinciding entries
      b_idx = np.unique(np.concatenate([b_idx, a_idx[::2]]), axis=0)
    s_idx = add_layout(a_idx, b_idx, len(shape))[0]
    if len(s_idx) and draw(hst.booleans()):  # sums dropped by thresh
      s_idx = s_idx[
        np.asarray(draw(hst.lists(hst.booleans(), min_size=len(s_idx), max_size=len(s_idx))))
      ]
    return {
      "backprop_val_grad": draw(st.arrays(dtype, (len(s_idx),))),
      "a_indices": a_idx,
      "b_indices": b_idx.astype(np.int64),
      "sum_indices": s_idx.astype(np.int64),
    }

  return st.Spec(
    calls(),
    vmap_variation="scale",
    grad_oracle="fd",
    note="TF registers no gradient: the derivative (the op is linear) is "
    "checked by central differences",
  )


SparseAddGrad = register_op(
  "SparseAddGrad",
  _add_grad,
  family=FAMILY,
  static=("a_indices", "b_indices", "sum_indices"),
  multiple_results=True,
  linear=True,
  transpose=_add_grad_transpose,
  spec=_add_grad_spec,
  doc="SparseAdd's gradient: the sum's value gradient at each a and b entry's indices.",
)


# --- SparseSliceGrad ------------------------------------------------------------------------


def slice_grad_layout(input_indices, input_start, output_indices):
  """Each input entry's position among the slice's entries (-1: none): the input
  walked in order, an entry taken when its shifted index is the next output's."""
  inp = _indices(input_indices, "input_indices")
  out = _indices(output_indices, "output_indices")
  start = np.asarray(input_start, np.int64).reshape(-1)
  source = np.full(len(inp), -1, np.int64)
  j = 0
  for i in range(len(inp)):
    if j < len(out) and np.array_equal(inp[i] - start, out[j]):
      source[i] = j
      j += 1
  return source


def _slice_grad(backprop_val_grad, *, input_indices, input_start, output_indices):
  """The slice's value gradient at the input entries it kept (0 elsewhere)."""
  return _gather_or_zero(
    backprop_val_grad, slice_grad_layout(input_indices, input_start, output_indices)
  )


def _slice_grad_transpose(ct, backprop_val_grad, *, input_indices, input_start, output_indices):
  source = slice_grad_layout(input_indices, input_start, output_indices)
  return [_scatter_back(ct, source, backprop_val_grad.aval.shape[0])]


def _slice_grad_spec(st):
  hst = lazy_hst()

  @st.composite
  def calls(draw):
    dtype = draw(st.dtypes(_FLOATS))
    idx, _, shape = draw_sparse(draw, st, dtype)
    start = np.asarray([draw(hst.integers(0, int(s) + 1)) for s in shape], np.int64)
    size = np.asarray([draw(hst.integers(0, 5)) for _ in shape], np.int64)
    _, out_idx, _ = _slice_layout(idx, shape, start, size)
    return {
      "backprop_val_grad": draw(st.arrays(dtype, (len(out_idx),))),
      "input_indices": idx.astype(np.int64),
      "input_start": start,
      "output_indices": out_idx.astype(np.int64),
    }

  return st.Spec(
    calls(),
    vmap_variation="scale",
    grad_oracle="fd",
    note="TF registers no gradient: the derivative (the op is linear) is "
    "checked by central differences",
  )


SparseSliceGrad = register_op(
  "SparseSliceGrad",
  _slice_grad,
  family=FAMILY,
  static=("input_indices", "input_start", "output_indices"),
  linear=True,
  transpose=_slice_grad_transpose,
  spec=_slice_grad_spec,
  doc="SparseSlice's gradient: the slice's value gradient at the input entries it kept.",
)


# --- SparseFillEmptyRowsGrad (RaggedFillEmptyRowsGrad binds the same impl) ------------------


def fill_grad(reverse_index_map, grad_values):
  """``grad_values`` at the reverse index map; the sum of the rest (the default's)."""
  if reverse_index_map.ndim != 1 or grad_values.ndim != 1:
    raise ValueError("reverse_index_map and grad_values must be vectors")
  rim = reverse_index_map.astype(np.int32)
  d_values = jnp.take(grad_values, rim, mode="fill", fill_value=0)
  hit = jnp.zeros(grad_values.shape, bool).at[rim].set(True, mode="drop")
  return d_values, jnp.sum(jnp.where(hit, jnp.zeros((), grad_values.dtype), grad_values))


def fill_grad_check(reverse_index_map, grad_values):
  n = grad_values.shape[0]
  return (
    jnp.any((reverse_index_map < 0) | (reverse_index_map >= n)),
    f"Elements in reverse index must be in [0, {n})",
  )


def fill_grad_jvp(op):
  """The op applied to the gradient's tangent (it is linear in it)."""

  def jvp(primals, tangents):
    rim, g = primals
    outs = op(rim, g)
    if type(tangents[1]) is ad.Zero:
      return outs, [ad.Zero(jax.typeof(o).to_tangent_aval()) for o in outs]
    return outs, list(op(rim, tangents[1]))

  return jvp


def fill_grad_transpose(cts, reverse_index_map, grad_values):
  """Each gradient position gets the d_values cotangents of the entries mapped to
  it, the d_default_value cotangent where no entry maps."""
  ct_values, ct_default = (rules.instantiate(c) for c in cts)
  n = grad_values.aval.shape[0]
  rim = reverse_index_map.astype(np.int32)
  out = jnp.zeros((n,), ct_values.dtype).at[rim].add(ct_values, mode="drop")
  hit = jnp.zeros((n,), bool).at[rim].set(True, mode="drop")
  return [None, out + jnp.where(hit, jnp.zeros((), ct_default.dtype), ct_default)]


def fill_grad_spec(st):
  hst = lazy_hst()

  @st.composite
  def calls(draw):
    dtype = draw(st.dtypes(("float32", "float64", "complex64")))
    n = draw(hst.integers(0, 6))
    m = draw(hst.integers(0, 4)) if n else 0
    if draw(hst.booleans()):  # as SparseFillEmptyRows makes it: distinct positions
      rim = draw(hst.permutations(list(range(n))))[:m]
    else:  # repeated positions
      rim = draw(hst.lists(hst.integers(0, n - 1), min_size=m, max_size=m)) if n else []
    return {
      "reverse_index_map": np.asarray(rim, np.int64).reshape(-1),
      "grad_values": draw(st.arrays(dtype, (n,))),
    }

  return st.Spec(
    calls(),
    vmap_variation="scale",
    grad_oracle="fd",
    examples=0.5,
    note="TF registers no gradient: the derivative (linear in grad_values) "
    "is checked by central differences",
  )


SparseFillEmptyRowsGrad = register_op(
  "SparseFillEmptyRowsGrad",
  fill_grad,
  family=FAMILY,
  multiple_results=True,
  check=fill_grad_check,
  jvp=rules.per_op(fill_grad_jvp),
  transpose=fill_grad_transpose,
  spec=fill_grad_spec,
  doc="SparseFillEmptyRows's gradient: the gradient at the reverse index map, and the "
  "sum of the rest for the default value.",
)


# --- SparseSplit ----------------------------------------------------------------------------


def split_layout(split_dim, indices, shape, num_split):
  """Per piece: the input positions it keeps (input order), its indices and shape."""
  dims = static_shape(shape, "shape")
  rank = len(dims)
  axis = int(np.asarray(split_dim).reshape(()))
  if not -rank <= axis < rank:
    raise ValueError(f"Input split_dim should be between -{rank} and {rank}, got {axis}")
  axis %= rank
  n = int(num_split)
  if n < 1:
    raise ValueError(f"num_split must be at least 1, got {n}")
  size = dims[axis]
  if n > size:
    raise ValueError(f"Split requires num_split ({n}) <= dimension size ({size})")
  idx = static_indices(indices, rank)
  if idx.shape[0] and np.any((idx < 0) | (idx >= np.asarray(dims))):
    raise ValueError("an index is out of bounds for the dense shape")
  base, extra = divmod(size, n)
  lengths = [base + (i < extra) for i in range(n)]
  starts = np.cumsum([0] + lengths)
  piece = (
    np.searchsorted(starts, idx[:, axis], side="right") - 1
    if idx.shape[0]
    else np.zeros((0,), np.int64)
  )
  out = []
  for p in range(n):
    keep = np.nonzero(piece == p)[0]
    new = idx[keep].copy()
    new[:, axis] -= starts[p]
    out.append(
      (
        keep,
        new.reshape(-1, rank),
        np.asarray([lengths[p] if d == axis else s for d, s in enumerate(dims)], np.int64),
      )
    )
  return out


def _split(values, *, split_dim, indices, shape, num_split):
  """The pieces' indices, values and shapes (output lists in that order)."""
  pieces = split_layout(split_dim, indices, shape, num_split)
  dt = index_dtype()
  return (
    *(jnp.asarray(p[1].astype(dt)) for p in pieces),
    *(values[jnp.asarray(p[0].astype(np.int32))] for p in pieces),
    *(jnp.asarray(p[2].astype(dt)) for p in pieces),
  )


def _split_known(*, split_dim, indices, shape, num_split):
  pieces = split_layout(split_dim, indices, shape, num_split)
  n = len(pieces)
  out = {k: p[1] for k, p in enumerate(pieces)}
  out.update({2 * n + k: p[2] for k, p in enumerate(pieces)})
  return out


def _split_spec(st):
  hst = lazy_hst()

  @st.composite
  def calls(draw):
    dtype = draw(st.dtypes(("float32", "float64", "int32", "bool")))
    idx, vals, shape = draw_sparse(draw, st, dtype)
    axes = [d for d, s in enumerate(shape) if s > 0]
    if not axes:
      shape = shape.copy()
      shape[0] = 1
      axes = [0]
    axis = draw(hst.sampled_from(axes))
    return {
      "split_dim": np.int64(axis),
      "indices": idx.astype(np.int64),
      "values": vals,
      "shape": shape,
      "num_split": draw(hst.integers(1, int(shape[axis]))),
    }

  return st.Spec(calls(), vmap_variation="scale", examples=0.5)


SparseSplit = register_op(
  "SparseSplit",
  _split,
  family=FAMILY,
  static=("split_dim", "indices", "shape"),
  attrs=("num_split",),
  multiple_results=True,
  spec=_split_spec,
  interpret=static_outputs(_split_known),
  doc="A sparse tensor split along split_dim into num_split pieces (the first "
  "size % num_split one longer), entries in input order.",
)
