"""Helpers for writing JVP, transpose and batching rules with TF ops.

Every helper that builds a value binds TF primitives (``tf.Reshape``,
``tf.Transpose``, ``tf.Sum``, ``tf.BroadcastTo``, ``tf.Fill``) through
:data:`tfprims.core.tfops`, so gradient and batched jaxprs keep TF names and a
replaced op is used by every rule. Shapes are read with :func:`shape_of`, which
also works on the undefined primals transpose rules receive.

    from tfprims.core import register_op, tfops
    from tfprims import rules

    Mul = register_op("Mul", jnp.multiply, batching="elementwise",
                    jvp=(lambda t, x, y: tfops.Mul(t, y), lambda t, x, y: tfops.Mul(x, t)),
                    transpose=lambda ct, x, y: [
                        rules.unbroadcast(tfops.Mul(ct, y), rules.shape_of(x)) if U(x) else None,
                        rules.unbroadcast(tfops.Mul(x, ct), rules.shape_of(y)) if U(y) else None])
"""

from __future__ import annotations

from typing import Sequence

import jax
import jax.numpy as jnp
import numpy as np
from jax.interpreters import ad

from tfprims import derived
from tfprims.core import TFOp, tfops

__all__ = [
  "U",
  "shape_of",
  "dtype_of",
  "reshape",
  "transpose",
  "reduce_sum",
  "broadcast_to",
  "unbroadcast",
  "instantiate",
  "zeros",
  "batch_size",
  "to_front",
  "with_batch_axis",
  "unbatched_shape",
  "move_axes",
  "vmap_batching",
  "elementwise_batching",
  "same_op_batching",
  "zero_tangent",
  "const",
  "cast_like",
  "no_grad_jvp",
  "output_jvp",
  "linear_transpose",
  "leading_batching",
  "sizes",
  "known",
  "numpy_for",
  "per_op",
]

U = ad.is_undefined_primal

# Derived rules, for ops that want them explicitly (e.g. a batching rule that
# handles the common case and falls back to vmap(impl)).
vmap_batching = derived.vmap_batching
elementwise_batching = derived.elementwise_batching
# A rule factory's rule for the op being declared: ``jvp=rules.per_op(rules.no_grad_jvp)``
# installs ``rules.no_grad_jvp(op)`` (see register_op).
per_op = derived.per_op


# --- shapes ------------------------------------------------------------------------------


def shape_of(x) -> tuple:
  """The static shape of a value, tracer, or undefined primal."""
  return tuple(x.aval.shape) if U(x) else tuple(jnp.shape(x))


def dtype_of(x) -> np.dtype:
  """The dtype of a value, tracer, or undefined primal."""
  return np.dtype(x.aval.dtype) if U(x) else np.dtype(jnp.result_type(x))


def sizes(shape) -> tuple:
  """A shape (a list, tuple or array of sizes) as a flat tuple of ints; the symbolic dims
  of a shape-polymorphic export (jax.export) stay as they are."""
  return tuple(
    int(d) if isinstance(d, (int, np.integer)) else d
    for d in np.asarray(shape, dtype=object).reshape(-1)
  )


def known(sizes) -> bool:
  """Whether every size is an int: none is a symbolic dim of a jax.export."""
  return all(type(d) is int for d in sizes)


def numpy_for(sizes):
  """numpy where every size is known (arrays built from them are trace-time constants),
  jax.numpy where one is a symbolic dim (jax.export): the program computes them."""
  return np if known(sizes) else jnp


# --- TF-named building blocks -------------------------------------------------------------


def reshape(x, shape: Sequence[int]):
  """``tf.Reshape`` (nothing when the shape is already ``shape``)."""
  shape = sizes(shape)
  return x if shape_of(x) == shape else tfops.Reshape(x, shape=shape)


def transpose(x, perm: Sequence[int]):
  """``tf.Transpose`` (nothing for the identity permutation)."""
  perm = tuple(int(p) for p in perm)
  return x if perm == tuple(range(len(perm))) else tfops.Transpose(x, perm=perm)


def reduce_sum(x, axes: Sequence[int], keep_dims: bool = False):
  """``tf.Sum`` over ``axes`` (nothing for no axes)."""
  axes = tuple(sorted(int(a) % max(np.ndim(x), 1) for a in axes))
  if not axes:
    return x
  return tfops.Sum(x, axis=axes, keep_dims=keep_dims)


def broadcast_to(x, shape: Sequence[int]):
  """``tf.BroadcastTo`` (nothing when the shape is already ``shape``)."""
  shape = sizes(shape)
  return x if shape_of(x) == shape else tfops.BroadcastTo(x, shape=shape)


def unbroadcast(x, shape: Sequence[int]):
  """Sums ``x`` down to ``shape``: the transpose of TF's implicit broadcasting."""
  shape = tuple(shape)
  if shape_of(x) == shape:
    return x
  lead = np.ndim(x) - len(shape)
  axes = tuple(range(lead)) + tuple(
    lead + i for i, n in enumerate(shape) if n == 1 and x.shape[lead + i] != 1
  )
  return reshape(reduce_sum(x, axes), shape)


def zeros(shape: Sequence[int], dtype):
  """Zeros as a ``tf.Fill``."""
  return tfops.Fill(np.zeros((), dtype), shape=sizes(shape))


def instantiate(ct):
  """A cotangent with a symbolic zero made concrete (by a ``tf.Fill``)."""
  if type(ct) is ad.Zero:
    return zeros(ct.aval.shape, ct.aval.dtype)
  return ct


# --- batching ----------------------------------------------------------------------------


def batch_size(args, dims) -> int:
  """The size of the batch axis of the first batched operand."""
  for a, d in zip(args, dims):
    if d is not None:
      return a.shape[d]
  raise ValueError("no batched operand")


def to_front(x, d):
  """``x`` with its batch axis ``d`` moved to the front by a ``tf.Transpose``
  (unchanged when ``d`` is None or 0)."""
  if d is None or d == 0:
    return x
  return tfops.Transpose(x, perm=(d,) + tuple(i for i in range(np.ndim(x)) if i != d))


def with_batch_axis(x, d, size: int):
  """``x`` with a leading batch axis: moved there, or broadcast when ``d`` is None."""
  if d is None:
    return tfops.BroadcastTo(x, shape=(size,) + shape_of(x))
  return to_front(x, d)


def unbatched_shape(x, d) -> tuple:
  """The per-example shape of ``x`` (its shape without batch axis ``d``)."""
  shape = shape_of(x)
  return shape if d is None else shape[:d] + shape[d + 1 :]


def same_op_batching(op: TFOp):
  """Batching for ops that act on each element independently of its position
  (Identity, StopGradient, CheckNumerics...): re-bind the op on the batched
  value; the batch axis stays where it is."""

  def rule(args, dims, **params):
    out = op(*args, **params)
    if op.multiple_results:
      return out, list(dims)
    return out, dims[0]

  return rule


def move_axes(x, source: Sequence[int], destination: Sequence[int]):
  """``jnp.moveaxis`` as one ``tf.Transpose``."""
  rank = np.ndim(x)
  source = [s % rank for s in source]
  destination = [d % rank for d in destination]
  order = [i for i in range(rank) if i not in source]
  for dst, src in sorted(zip(destination, source)):
    order.insert(dst, src)
  return transpose(x, order)


# --- added for elementwise and activations


def zero_tangent(out):
  """The symbolic-zero tangent of ``out`` (a JVP whose op has no derivative there)."""
  return ad.Zero(jax.typeof(out).to_tangent_aval())


def const(value, like) -> np.ndarray:
  """``value`` as a numpy constant of ``like``'s dtype (a typed literal in jaxprs)."""
  return np.array(value, dtype=dtype_of(like))


def cast_like(x, like):
  """``tf.Cast`` of ``x`` to ``like``'s dtype: TF's ``cast(pred, dtype)`` masks
  (a boolean as 0/1), or a real cotangent made complex."""
  return tfops.Cast(x, DstT=dtype_of(like), Truncate=False)


def no_grad_jvp(op: TFOp):
  """JVP of an op TF gives no gradient (piecewise constant, integer or boolean
  results): the op re-bound, with a zero tangent."""

  def rule(primals, tangents, **params):
    out = op(*primals, **params)
    return out, zero_tangent(out)

  return rule


def output_jvp(op: TFOp, tangent_fn):
  """Full JVP rule of a one-operand op whose derivative TF writes with its output
  ``y`` (``tangent_fn(t, y, x, **params)``: ``TanhGrad(y, t)``, ``EluGrad(t, y)``)."""

  def rule(primals, tangents, **params):
    (x,), (t,) = primals, tangents
    y = op(x, **params)
    if type(t) is ad.Zero:
      return y, zero_tangent(y)
    return y, tangent_fn(t, y, x, **params)

  return rule


def linear_transpose(op: TFOp, index: int):
  """Transpose of an op linear in its operand ``index`` alone (``Div`` in ``x``,
  ``SqrtGrad`` in ``dy``, ``ReluGrad`` in ``gradients``): the op re-bound with the
  cotangent in that place, summed back to the operand's shape."""

  def rule(ct, *args, **params):
    assert U(args[index]) and not any(U(a) for i, a in enumerate(args) if i != index)
    operands = list(args)
    operands[index] = ct
    cts = [None] * len(args)
    cts[index] = unbroadcast(op(*operands, **params), shape_of(args[index]))
    return cts

  return rule


# --- gather and scatter (coverage: gather-scatter) ------------------------------------
#
# Batching rules and derivatives shared by the gather/scatter ops of the array family
# (GatherNd, ScatterNd, TensorScatter*) and the variable writers (ResourceScatter*,
# ResourceGatherNd). "nd" ops index the leading K dims of a tensor with the last axis
# of ``indices`` ([..., K]); "rows" ops (Gather, ResourceScatter*) index axis 0.


def batch_coordinates(indices, size: int):
  """``indices [size, ..., K]`` with each example's position in the batch prepended
  as coordinate 0 (``[size, ..., K + 1]``): a numpy iota joined by ``tf.ConcatV2``."""
  shape = shape_of(indices)
  iota = np.arange(size, dtype=dtype_of(indices)).reshape((size,) + (1,) * (len(shape) - 1))
  iota = np.ascontiguousarray(np.broadcast_to(iota, shape[:-1] + (1,)))
  return tfops.ConcatV2(iota, indices, axis=len(shape) - 1)


def gather_nd_batching(op: TFOp):
  """Batching of an nd gather ``op(params, indices)``: batched params alone put the
  batch axis after the K indexed dims; batched indices alone are leading index
  dims; both prepend each example's batch coordinate to its indices."""

  def rule(args, dims, **params):
    (p, i), (dp, di) = args, dims
    if di is None:
      k = shape_of(i)[-1]
      return op(move_axes(p, [dp], [k]), i, **params), len(shape_of(i)) - 1
    i = to_front(i, di)
    if dp is None:
      return op(p, i, **params), 0
    return op(to_front(p, dp), batch_coordinates(i, shape_of(i)[0]), **params), 0

  return rule


def scatter_nd_batching(op: TFOp):
  """Batching of an nd scatter ``op(tensor, indices, updates)`` (TensorScatter*,
  ResourceScatterNd*): with unbatched indices the batch axis goes after the K
  indexed dims of the tensor (and after the index dims of the updates), so each
  update writes a slice holding the whole batch; batched indices get each
  example's batch coordinate prepended. Unbatched operands are broadcast."""

  def rule(args, dims, **params):
    (x, i, u), (dx, di, du) = args, dims
    size = batch_size(args, dims)
    if di is None:
      k, lead = shape_of(i)[-1], len(shape_of(i)) - 1
      x = move_axes(with_batch_axis(x, dx, size), [0], [k])
      u = move_axes(with_batch_axis(u, du, size), [0], [lead])
      return op(x, i, u, **params), k
    return op(
      with_batch_axis(x, dx, size),
      batch_coordinates(to_front(i, di), size),
      with_batch_axis(u, du, size),
      **params,
    ), 0

  return rule


def scatter_rows_batching(op: TFOp):
  """Batching of a scatter into rows (axis 0) ``op(value, indices, updates)``
  (ResourceScatter*; ``updates`` is ``indices.shape + value.shape[1:]`` or a
  scalar): with unbatched indices the batch axis becomes axis 1 of the value;
  batched indices address the rows of the batch flattened into one axis (each
  example's indices offset by its position times the row count; out-of-range
  ones stay out of range, so they are still dropped)."""

  def rule(args, dims, **params):
    (x, i, u), (dx, di, du) = args, dims
    size = batch_size(args, dims)
    ishape, xshape = unbatched_shape(i, di), unbatched_shape(x, dx)
    full = ishape + xshape[1:]
    u = with_batch_axis(u, du, size)
    if shape_of(u)[1:] != full:  # scalar updates: made explicit
      u = broadcast_to(reshape(u, (size,) + (1,) * len(full)), (size,) + full)
    x = with_batch_axis(x, dx, size)
    if di is None:
      return op(move_axes(x, [0], [1]), i, move_axes(u, [0], [len(ishape)]), **params), 1
    rows = xshape[0]
    i = to_front(i, di)
    dt = dtype_of(i)
    offsets = (np.arange(size, dtype=dt) * rows).reshape((size,) + (1,) * len(ishape))
    valid = tfops.LogicalAnd(
      tfops.GreaterEqual(i, np.zeros((), dt)), tfops.Less(i, np.array(rows, dt))
    )
    i = tfops.SelectV2(valid, tfops.AddV2(i, offsets), np.array(-1, dt))
    out = op(reshape(x, (size * rows,) + xshape[1:]), i, u, **params)
    return reshape(out, (size,) + xshape), 0

  return rule


def last_writer_mask(indices, prefix_shape: Sequence[int]):
  """For nd ``indices [..., K]`` into a tensor whose first K dims are ``prefix_shape``:
  a boolean ``indices.shape[:-1]`` mask, true for the update that writes each
  location last (TF's CPU kernels apply updates in order: the last write wins).
  A ``tf.TensorScatterMax`` of update positions, gathered back by ``tf.GatherNd``."""
  lead = shape_of(indices)[:-1]
  pos = np.arange(int(np.prod(lead)), dtype=np.int32).reshape(lead)
  winner = tfops.TensorScatterMax(
    np.full(tuple(prefix_shape), -1, np.int32), indices, pos, bad_indices_policy=""
  )
  return tfops.Equal(
    tfops.GatherNd(winner, indices, bad_indices_policy=""), pos, incompatible_shape_error=True
  )


def scatter_min_max_jvp(op: TFOp, rows: bool = False):
  """JVP of a scatter min/max ``op(x, indices, y)``, TF's gradient of
  TensorScatterMin/Max transposed: each output element's tangent is the mean of the
  tangents of the inputs (``x`` and every update) equal to it, so ties share it.
  ``rows``: the op scatters into axis 0 (ResourceScatterMin/Max; scalar updates are
  broadcast)."""

  def rule(primals, tangents, **params):
    (x, i, y), (tx, _, ty) = primals, tangents
    out = op(x, i, y, **params)
    zx, zy = type(tx) is ad.Zero, type(ty) is ad.Zero
    if zx and zy:
      return out, zero_tangent(out)
    shape, dt = shape_of(x), dtype_of(x)
    if rows:
      full = shape_of(i) + shape[1:]
      i = tfops.ExpandDims(i, axis=-1)
      y = broadcast_to(y, full)
      ty = ty if zy else broadcast_to(ty, full)
    gather = lambda v: tfops.GatherNd(v, i, bad_indices_policy="")
    scatter = lambda v: tfops.ScatterNd(i, v, shape=shape, bad_indices_policy="")
    eq = lambda a, b: tfops.Cast(
      tfops.Equal(a, b, incompatible_shape_error=True), DstT=dt, Truncate=False
    )
    x_ind = eq(x, out)
    y_ind = eq(y, gather(out))
    inv = tfops.Reciprocal(tfops.AddV2(x_ind, scatter(y_ind)))
    t = None
    if not zx:
      t = tfops.Mul(tfops.Mul(x_ind, inv), tx)
    if not zy:
      ts = scatter(tfops.Mul(tfops.Mul(y_ind, gather(inv)), ty))
      t = ts if t is None else tfops.AddV2(t, ts)
    return out, t

  return rule


def scatter_linear_jvp(op: TFOp):
  """JVP of a scatter linear in (tensor, updates): the same scatter of the tangents."""

  def rule(primals, tangents, **params):
    (x, i, u), (tx, _, tu) = primals, tangents
    out = op(x, i, u, **params)
    if type(tx) is ad.Zero and type(tu) is ad.Zero:
      return out, zero_tangent(out)
    return out, op(instantiate(tx), i, instantiate(tu), **params)

  return rule


def scatter_nd_add_transpose(negate: bool):
  """Transpose of an nd scatter-add (-sub): the tensor keeps the cotangent, each
  update gets it gathered back (``tf.GatherNd``; negated for a subtraction)."""

  def rule(ct, x, i, u, **params):
    ct = instantiate(ct)
    cu = None
    if U(u):
      cu = tfops.GatherNd(ct, i, bad_indices_policy="")
      cu = tfops.Neg(cu) if negate else cu
    return [ct if U(x) else None, None, cu]

  return rule


def scatter_nd_update_transpose(op: TFOp):
  """Transpose of an nd scatter-update: the tensor keeps the cotangent where no
  update lands; each location's last writer gets it (earlier duplicates are
  overwritten: they get zero)."""

  def rule(ct, x, i, u, **params):
    ct = instantiate(ct)
    ushape, dt = shape_of(u), dtype_of(u)
    cx = cu = None
    if U(x):
      cx = op(ct, i, zeros(ushape, dt), **params)
    if U(u):
      k = shape_of(i)[-1]
      lead = shape_of(i)[:-1]
      mask = last_writer_mask(i, shape_of(x)[:k])
      mask = reshape(
        tfops.Cast(mask, DstT=dt, Truncate=False), lead + (1,) * (len(ushape) - len(lead))
      )
      cu = tfops.Mul(tfops.GatherNd(ct, i, bad_indices_policy=""), mask)
    return [cx, None, cu]

  return rule


# --- linalg coverage (cov-linalg): decompositions and solvers -----------------------------


def leading_batching(op: TFOp):
  """Batching for ops on the innermost dims of their operands whose leading dims
  are batch dims shared by every operand (decompositions, solvers): each batch axis
  moves to the front (``tf.Transpose``; unbatched operands are broadcast with
  ``tf.BroadcastTo``) and the op is re-bound. Rank-0 outputs (placeholders, such
  as Svd's ``u``/``v`` without ``compute_uv``) come out unbatched, the others
  batched at axis 0."""

  def rule(args, dims, **params):
    size = batch_size(args, dims)
    out = op(*[with_batch_axis(a, d, size) for a, d in zip(args, dims)], **params)
    if isinstance(out, (list, tuple)):
      return out, [0 if np.ndim(o) else None for o in out]
    return out, 0

  return rule


def positioned_jvp(op: TFOp):
  """The JVP rule of an op linear in its first operand and positioned by integer
  operands after it (a runtime slice begin, runtime paddings): the op on the tangent."""

  def jvp(primals, tangents, **params):
    x, *positions = primals
    out = op(x, *positions, **params)
    if type(tangents[0]) is ad.Zero:
      return out, ad.Zero(jax.typeof(out).to_tangent_aval())
    return out, op(tangents[0], *positions, **params)

  return jvp
