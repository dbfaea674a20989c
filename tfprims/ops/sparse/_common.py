"""What the sparse modules share: the family name, static shapes as ints, and the
property specs' sparse-tensor draws."""

from __future__ import annotations

import jax
import numpy as np

from jax.interpreters import ad

from tfprims import core, interpreter, opdefs, rules
from tfprims import dtypes as tfdtypes
from tfprims.ops.shared import ints
from tfprims.ops.shared_specs import lazy_hst

FAMILY = "sparse"
INDEX = np.dtype(np.int64)


def index_dtype():
  """int64 as JAX holds it (int32 with x64 off)."""
  return tfdtypes.canonical_dtype(INDEX)


def static_shape(shape, what="dense_shape") -> tuple:
  """A static dense shape as ints (TF's check: a vector of non-negative sizes)."""
  dims = ints(shape)
  if np.ndim(np.asarray(shape, dtype=object)) != 1 and dims:
    raise ValueError(f"{what} must be a vector")
  if any(d < 0 for d in dims):
    raise ValueError(f"{what} has a negative dimension: {list(dims)}")
  return dims


def static_indices(indices, rank: int) -> np.ndarray:
  """Static indices (a nested tuple param) as an int64 [nnz, rank] array."""
  a = np.asarray(indices, dtype=np.int64)
  if a.size and (a.ndim != 2 or a.shape[1] != rank):
    raise ValueError(f"indices must be a matrix [nnz, {rank}], got shape {list(a.shape)}")
  return a.reshape(-1, rank)


def check_indices(indices, shape) -> tuple:
  """``(bad, message)``: an index outside the dense shape (TF's kernels raise)."""
  import jax.numpy as jnp

  if indices.shape[0] == 0:
    return None
  bound = jnp.asarray(np.asarray(shape, np.int64).astype(indices.dtype))
  bad = jnp.any((indices < 0) | (indices >= bound[None, :]))
  return bad, f"an index is out of bounds for the dense shape {list(shape)}"


# --- property-test draws ------------------------------------------------------------------


def draw_sparse(
  draw,
  st,
  dtype,
  *,
  min_rank=1,
  max_rank=3,
  rank=None,
  max_side=4,
  max_nnz=6,
  canonical=False,
  index_dtypes=("int64",),
):
  """``(indices, values, dense_shape)`` of a drawn sparse tensor: nnz may be 0, rows
  empty; unless ``canonical`` the indices may repeat and be out of row-major order."""
  hst = lazy_hst()
  rank = draw(hst.integers(min_rank, max_rank)) if rank is None else rank
  shape = tuple(draw(hst.integers(0, max_side)) for _ in range(rank))
  size = int(np.prod(shape))
  nnz = draw(hst.integers(0, min(max_nnz, size) if canonical else max_nnz)) if size else 0
  if canonical:
    flat = (
      sorted(draw(hst.lists(hst.integers(0, size - 1), min_size=nnz, max_size=nnz, unique=True)))
      if nnz
      else []
    )
  else:
    flat = draw(hst.lists(hst.integers(0, size - 1), min_size=nnz, max_size=nnz)) if nnz else []
  indices = (
    np.stack(np.unravel_index(np.asarray(flat, np.int64), shape), axis=1)
    if nnz
    else np.zeros((0, rank), np.int64)
  )
  idt = draw(hst.sampled_from(index_dtypes))
  values = draw(st.arrays(dtype, (nnz,)))
  return (indices.astype(idt), values, np.asarray(shape, np.int64))


# --- outputs known from the static params ---------------------------------------------------


def static_outputs(known):
  """An ``interpret`` hook: the node bound as usual, then (when it was traced) the
  outputs ``known(**params)`` computes from the static params alone (output index ->
  numpy: dense shapes, layouts) replaced by those constants, so later ops and a
  sparse output's BCOO shape see them under jit too."""

  def interpret(ctx, node, inputs):
    op = core.lookup(node.op)
    outs = interpreter.bind_node(ctx, op, node, inputs)
    if any(isinstance(o, jax.core.Tracer) for o in outs):
      attrs = interpreter.AttrView(node)
      _, params = op.prepare(opdefs.group_inputs(node.op, inputs, attrs), attrs, node.name)
      for k, v in known(**params).items():
        outs[k] = tfdtypes.canonicalize_value(np.asarray(v), f"{node.op} node '{node.name}'")
    return outs

  return interpret


# --- derivatives that keep TF's gradient ops ------------------------------------------------


def as_param(indices) -> tuple:
  """Static indices (numpy) as a hashable param (nested tuples)."""
  return tuple(tuple(int(v) for v in row) for row in np.asarray(indices, np.int64))


def values_jvp(op, n_linear: int, value_out: int):
  """The JVP of an op linear in its first ``n_linear`` operands (the values) whose
  output ``value_out`` is values and the others index structure: the op applied to
  the tangents, so its transpose (the op's TF gradient op) is used under grad."""

  def jvp(primals, tangents, **params):
    outs = op(*primals, **params)
    zero = [ad.Zero(jax.typeof(o).to_tangent_aval()) for o in outs]
    if all(type(t) is ad.Zero for t in tangents[:n_linear]):
      return outs, zero
    lin = [rules.instantiate(t) for t in tangents[:n_linear]]
    t_outs = op(*lin, *primals[n_linear:], **params)
    zero[value_out] = t_outs[value_out]
    return outs, zero

  return jvp
