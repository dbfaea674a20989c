"""Shapes: Reshape, Transpose, ExpandDims, Squeeze, and the shape queries Shape,
ShapeN, Size, Rank.

Reshape's target shape resolves one ``-1`` with TF's kernel errors (symbolically
for inputs with the symbolic dims of jax.export shape polymorphism). The four reshapes are
linear: Reshape/Squeeze transpose to Reshape, ExpandDims to Squeeze, Transpose
to the inverse permutation. The shape queries are ``shape_only``: the
interpreter answers them from static shapes through ``interpret`` hooks (numpy
constants, so ``Reshape(x, Shape(y))`` stays static; object arrays holding the
symbolic dims of a shape-polymorphic export); their primitives exist for
direct use and, under vmap, give the per-example value unbatched.
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np

from tfprims import dtypes as tfdtypes, rules
from tfprims.core import register_op, tfops
from tfprims.ops.array._common import FAMILY, norm_axis
from tfprims.ops.shared import ints, scalar_int
from tfprims.ops.shared_specs import INDEX_DTYPES, index_array, lazy_hst


# --- Reshape, Transpose, ExpandDims, Squeeze ----------------------------------------------


def _resolve_shape(in_shape, shape) -> tuple:
  """TF Reshape's target shape with its -1 resolved (errors as TF's kernel)."""
  shape = ints(shape)
  if not all(isinstance(d, (int, np.integer)) for d in in_shape):
    return _resolve_symbolic(in_shape, shape)
  in_shape = tuple(int(d) for d in in_shape)
  size = math.prod(in_shape)
  unknown, product, has_zero = None, 1, False
  for i, s in enumerate(shape):
    if s == -1:
      if unknown is not None:
        raise ValueError(f"Reshape: only one input size may be -1, not both {unknown} and {i}")
      unknown = i
    elif s < 0:
      raise ValueError(f"Reshape: size {i} must be non-negative, not {s}")
    elif s == 0:
      has_zero = True
    else:
      product *= s
  out = list(shape)
  if unknown is not None:
    known_in = math.prod(d for d in in_shape if d > 0 or not has_zero)
    missing = known_in // product
    if product * missing != known_in:
      raise ValueError(
        f"Reshape: input to reshape is a tensor with {size} values, but the "
        f"requested shape requires a multiple of {product}"
      )
    out[unknown] = missing
  if math.prod(out) != size:
    raise ValueError(
      f"Reshape: input to reshape is a tensor with {size} values, but the "
      f"requested shape {tuple(out)} has {math.prod(out)}"
    )
  return tuple(out)


def _resolve_symbolic(in_shape, shape) -> tuple:
  """The -1 of a target shape for an input with symbolic dims (jax.export shape
  polymorphism): the input size over the product of the other sizes, which JAX
  checks divides exactly."""
  if list(shape).count(-1) != 1:
    return tuple(shape)
  known = math.prod(s for s in shape if s != -1)
  if known == 0:
    raise ValueError("Reshape: a -1 next to a zero size is ambiguous for symbolic dims")
  missing = math.prod(in_shape) // known
  return tuple(missing if s == -1 else s for s in shape)


def _static_shape(shape):
  """A shape param: ints resolved by TF rules; symbolic dims (shape polymorphism) kept."""
  flat = shape if isinstance(shape, tuple) else (shape,)
  return all(isinstance(s, (int, np.integer)) for s in flat)


def _reshape_impl(tensor, *, shape):
  if not _static_shape(shape):
    return jnp.reshape(tensor, shape)
  return jnp.reshape(tensor, _resolve_shape(tensor.shape, shape))


def _reshape_build(B, tensor, *, shape):
  return B.reshape(tensor, _resolve_shape(tensor.shape, shape)) if _static_shape(shape) else None


def _reshape_batch(args, dims, *, shape):
  (x,), (d,) = args, dims
  target = _resolve_shape(rules.unbatched_shape(x, d), shape) if _static_shape(shape) else shape
  return tfops.Reshape(rules.to_front(x, d), shape=(x.shape[d],) + tuple(target)), 0


def _reshape_shape(tensor, *, shape):
  if not _static_shape(shape):
    return None
  return jax.ShapeDtypeStruct(tuple(_resolve_shape(tensor.shape, shape)), tensor.dtype)


Reshape = register_op(
  "Reshape",
  _reshape_impl,
  family=FAMILY,
  static=("shape",),
  linear=True,
  build=_reshape_build,
  shape_rule=_reshape_shape,
  transpose=lambda ct, x, *, shape: [tfops.Reshape(ct, shape=rules.shape_of(x))],
  batching=_reshape_batch,
  spec=lambda st: st.Spec(_reshape_calls(st)),
)


def _perm(perm, rank) -> tuple:
  perm = ints(perm)
  if len(perm) != rank:
    raise ValueError(f"Transpose: perm {perm} has {len(perm)} entries for a tensor of rank {rank}")
  perm = tuple(norm_axis(p, rank, "perm entry") for p in perm)
  if sorted(perm) != list(range(rank)):
    raise ValueError(f"Transpose: {perm} is not a permutation of 0..{rank - 1}")
  return perm


def _transpose_impl(x, *, perm):
  return jnp.transpose(x, _perm(perm, x.ndim))


def _transpose_build(B, x, *, perm):
  return B.transpose(x, _perm(perm, x.ndim))


def _transpose_transpose(ct, x, *, perm):
  perm = _perm(perm, len(rules.shape_of(x)))
  return [tfops.Transpose(ct, perm=tuple(int(i) for i in np.argsort(perm)))]


def _transpose_batch(args, dims, *, perm):
  (x,), (d,) = args, dims
  perm = _perm(perm, x.ndim - 1)
  return tfops.Transpose(x, perm=(d,) + tuple(p + (p >= d) for p in perm)), 0


Transpose = register_op(
  "Transpose",
  _transpose_impl,
  family=FAMILY,
  static=("perm",),
  linear=True,
  build=_transpose_build,
  transpose=_transpose_transpose,
  batching=_transpose_batch,
  spec=lambda st: st.Spec(_transpose_calls(st)),
)


def _expand_axis(axis, rank) -> int:
  axis = scalar_int(axis)
  if not -rank - 1 <= axis <= rank:
    raise ValueError(f"ExpandDims: axis {axis} is out of range [{-rank - 1}, {rank}]")
  return axis + rank + 1 if axis < 0 else axis


def _expand_dims_impl(input, *, axis):
  return jnp.expand_dims(input, _expand_axis(axis, input.ndim))


def _expand_dims_build(B, input, *, axis):
  shape = list(input.shape)
  shape.insert(_expand_axis(axis, input.ndim), 1)
  return B.reshape(input, shape)


def _expand_dims_batch(args, dims, *, axis):
  (x,), (d,) = args, dims
  return tfops.ExpandDims(rules.to_front(x, d), axis=_expand_axis(axis, x.ndim - 1) + 1), 0


ExpandDims = register_op(
  "ExpandDims",
  _expand_dims_impl,
  family=FAMILY,
  static={"dim": "axis"},
  linear=True,
  build=_expand_dims_build,
  transpose=lambda ct, x, *, axis: [
    tfops.Squeeze(ct, squeeze_dims=(_expand_axis(axis, len(rules.shape_of(x))),))
  ],
  batching=_expand_dims_batch,
  spec=lambda st: st.Spec(_expand_dims_calls(st)),
)


def _squeeze_axes(shape, squeeze_dims) -> tuple:
  rank = len(shape)
  if not squeeze_dims:
    return tuple(i for i, n in enumerate(shape) if n == 1)
  axes = tuple(sorted({norm_axis(a, rank, "squeeze dim") for a in ints(squeeze_dims)}))
  for a in axes:
    if shape[a] != 1:
      raise ValueError(
        f"Squeeze: can not squeeze dim[{a}], expected a dimension of 1, got {shape[a]}"
      )
  return axes


def _squeeze_impl(input, *, squeeze_dims):
  return jnp.squeeze(input, _squeeze_axes(input.shape, squeeze_dims))


def _squeeze_build(B, input, *, squeeze_dims):
  axes = _squeeze_axes(input.shape, squeeze_dims)
  return B.reshape(input, [n for a, n in enumerate(input.shape) if a not in axes])


def _squeeze_batch(args, dims, *, squeeze_dims):
  (x,), (d,) = args, dims
  axes = _squeeze_axes(rules.unbatched_shape(x, d), squeeze_dims)
  return tfops.Squeeze(rules.to_front(x, d), squeeze_dims=tuple(a + 1 for a in axes)), 0


Squeeze = register_op(
  "Squeeze",
  _squeeze_impl,
  family=FAMILY,
  attrs=("squeeze_dims",),
  linear=True,
  build=_squeeze_build,
  transpose=lambda ct, x, *, squeeze_dims: [tfops.Reshape(ct, shape=rules.shape_of(x))],
  batching=_squeeze_batch,
  spec=lambda st: st.Spec(_squeeze_calls(st)),
)


# --- shape queries: Shape, ShapeN, Size, Rank (values from static shapes) -----------------


def _symbolic(shape) -> bool:
  return not all(isinstance(d, (int, np.integer)) for d in shape)


def _shape_value(x, out_type) -> np.ndarray:
  """The shape as a constant; with symbolic dims (jax.export shape polymorphism) an
  object array of ints and dims, which tfprims.folding carries through the graph's
  shape arithmetic (Shape -> StridedSlice/Pack/Prod -> Reshape) into static params."""
  shape = tuple(np.shape(x))
  if _symbolic(shape):
    return np.array(shape, dtype=object)
  return np.array(shape, dtype=tfdtypes.canonical_dtype(out_type))


def _const_batch(compute, multiple=False):
  def rule(args, dims, **params):
    per_example = [np.zeros(rules.unbatched_shape(a, d), np.bool_) for a, d in zip(args, dims)]
    out = compute(*per_example, **params)
    if multiple:
      return [jnp.asarray(o) for o in out], [None] * len(out)
    return jnp.asarray(out), None

  return rule


def _shape_np(x, *, out_type):
  return _shape_value(x, out_type)


def _shapen_np(*xs, out_type):
  return tuple(_shape_value(x, out_type) for x in xs)


def _size_np(x, *, out_type):
  if _symbolic(np.shape(x)):
    return np.array(math.prod(np.shape(x)), dtype=object)
  return np.array(math.prod(np.shape(x)), dtype=tfdtypes.canonical_dtype(out_type))


def _rank_np(x):
  return np.array(np.ndim(x), dtype=np.int32)


def _shape_interpret(ctx, node, inputs):
  return [_shape_value(inputs[0], node.attr("out_type"))]


def _shapen_interpret(ctx, node, inputs):
  return [_shape_value(x, node.attr("out_type")) for x in inputs]


def _size_interpret(ctx, node, inputs):
  return [_size_np(inputs[0], out_type=node.attr("out_type"))]


def _rank_interpret(ctx, node, inputs):
  return [_rank_np(inputs[0])]


_SHAPE_SKIP = {"jvp": "integer output", "vjp": "integer output"}

Shape = register_op(
  "Shape",
  lambda input, *, out_type: jnp.asarray(_shape_np(input, out_type=out_type)),
  family=FAMILY,
  attrs=("out_type",),
  interpret=_shape_interpret,
  shape_only=True,
  batching=_const_batch(_shape_np),
  spec=rules.per_op(lambda op: lambda st: st.Spec(_shape_calls(st, op.op_type), skip=_SHAPE_SKIP)),
)

ShapeN = register_op(
  "ShapeN",
  lambda *input, out_type: tuple(jnp.asarray(v) for v in _shapen_np(*input, out_type=out_type)),
  family=FAMILY,
  attrs=("out_type",),
  multiple_results=True,
  interpret=_shapen_interpret,
  shape_only=True,
  batching=_const_batch(_shapen_np, multiple=True),
  spec=rules.per_op(lambda op: lambda st: st.Spec(_shape_calls(st, op.op_type), skip=_SHAPE_SKIP)),
)

Size = register_op(
  "Size",
  lambda input, *, out_type: jnp.asarray(_size_np(input, out_type=out_type)),
  family=FAMILY,
  attrs=("out_type",),
  interpret=_size_interpret,
  shape_only=True,
  batching=_const_batch(_size_np),
  spec=rules.per_op(lambda op: lambda st: st.Spec(_shape_calls(st, op.op_type), skip=_SHAPE_SKIP)),
)

Rank = register_op(
  "Rank",
  lambda input: jnp.asarray(_rank_np(input)),
  family=FAMILY,
  interpret=_rank_interpret,
  shape_only=True,
  batching=_const_batch(_rank_np),
  spec=rules.per_op(lambda op: lambda st: st.Spec(_shape_calls(st, op.op_type), skip=_SHAPE_SKIP)),
)


# --- property-test strategies (hypothesis is imported lazily) ---------------------


def _reshape_calls(st):
  hst = lazy_hst()

  @st.composite
  def calls(draw):
    x = draw(st.arrays(st.dtypes(st.ALL), st.shapes()))
    dims = list(x.shape)
    dims = draw(hst.permutations(dims)) if dims else dims
    # Merge neighbours, insert ones.
    out = []
    for d in dims:
      if out and draw(hst.booleans()):
        out[-1] *= d
      else:
        out.append(d)
    for _ in range(draw(hst.integers(0, 2))):
      out.insert(draw(hst.integers(0, len(out))), 1)
    if out and draw(hst.booleans()):
      cand = list(out)
      cand[draw(hst.integers(0, len(cand) - 1))] = -1
      try:
        _resolve_shape(x.shape, cand)
        out = cand
      except ValueError:
        pass
    return {"tensor": x, "shape": index_array(draw, st, out if out else np.zeros((0,), np.int64))}

  return calls()


def _transpose_calls(st):
  hst = lazy_hst()

  @st.composite
  def calls(draw):
    x = draw(st.arrays(st.dtypes(st.ALL), st.shapes()))
    # Non-negative: TF's own Transpose gradient (InvertPermutation) rejects negative perms.
    perm = list(draw(hst.permutations(range(x.ndim))))
    return {"x": x, "perm": index_array(draw, st, np.array(perm, np.int64).reshape(-1))}

  return calls()


def _expand_dims_calls(st):
  hst = lazy_hst()

  @st.composite
  def calls(draw):
    x = draw(st.arrays(st.dtypes(st.ALL), st.shapes(max_rank=3)))
    axis = draw(hst.integers(-x.ndim - 1, x.ndim))
    return {"input": x, "dim": index_array(draw, st, axis)}

  return calls()


def _squeeze_calls(st):
  hst = lazy_hst()

  @st.composite
  def calls(draw):
    shape = list(draw(st.shapes()))
    for _ in range(draw(hst.integers(0, 2))):
      shape.insert(draw(hst.integers(0, len(shape))), 1)
    shape = shape[:5]
    x = draw(st.arrays(st.dtypes(st.ALL), tuple(shape)))
    ones = [i for i, n in enumerate(shape) if n == 1]
    axes = draw(hst.lists(hst.sampled_from(ones), unique=True)) if ones else []
    axes = [a - len(shape) if draw(hst.booleans()) else a for a in axes]
    return {"input": x, "squeeze_dims": axes}

  return calls()


def _shape_calls(st, op):
  hst = lazy_hst()

  @st.composite
  def calls(draw):
    if op == "ShapeN":
      n = draw(hst.integers(1, 3))
      dtype = draw(st.dtypes(st.ALL))
      values = [draw(st.arrays(dtype, st.shapes())) for _ in range(n)]
      return {"input": values, "out_type": draw(st.dtypes(INDEX_DTYPES))}
    out = {"input": draw(st.arrays(st.dtypes(st.ALL), st.shapes()))}
    if op != "Rank":
      out["out_type"] = draw(st.dtypes(INDEX_DTYPES))
    return out

  return calls()
