"""Diagonals, index arithmetic, generators and broadcast shapes: Diag, DiagPart,
UnravelIndex, InvertPermutation, LinSpace, Empty, DeepCopy, BroadcastArgs,
BroadcastGradientArgs.

* Diag and DiagPart are linear and transpose to each other; under vmap they are
  re-bound as ``tf.MatrixDiag``/``tf.MatrixDiagPart`` between ``tf.Reshape``\\ s.
* UnravelIndex (``dims`` is data) transcribes TF's kernel arithmetic; indices at
  or past ``prod(dims)`` (TF raises) wrap around. InvertPermutation (its values
  are data) is a scatter; entries that are no permutation (TF raises) follow a
  documented rule. Both declare a ``check`` for ``runtime_checks``.
* LinSpace takes ``start``/``stop`` as operands and ``num`` static; it is linear
  in ``(start, stop)`` (TF declares it not differentiable; ours is the derivative).
* Empty (``shape`` static, no operands) is zeros whatever ``init`` says: TF's
  uninitialized memory has no value to match. DeepCopy is the identity.
* BroadcastArgs and BroadcastGradientArgs compute on shapes, which are known at
  trace time in converted graphs, so the interpreter folds them (symbolic dims of a
  jax.export too: numpy with JAX's max_dim; BroadcastGradientArgs takes a symbolic
  dim as not 1). BroadcastArgs
  takes its shapes as operands (incompatible dims: documented rule + check);
  BroadcastGradientArgs' output sizes depend on the values, so its shapes are
  static (no operands at all).
See docs/semantics/array.md for the choices.
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from tfprims import dtypes as tfdtypes, rules
from tfprims.core import register_op, tfops
from tfprims.ops.array._common import FAMILY
from tfprims.ops.shared import ints, scalar_int
from tfprims.ops.shared_specs import INDEX_DTYPES, lazy_hst
from tfprims.errors import import_tensorflow

# --- Diag / DiagPart ---------------------------------------------------------------------

_DIAG_DTYPES = ("float16", "float32", "float64", "int32", "int64", "complex64", "complex128")


def _diag_impl(diagonal):
  """The tensor of shape ``s + s`` with ``diagonal`` (of shape ``s``) on its diagonal."""
  if diagonal.ndim == 0:
    raise ValueError("Diag: Input must be at least rank 1, got 0")
  shape = tuple(diagonal.shape)
  return jnp.reshape(jnp.diag(jnp.reshape(diagonal, (-1,))), shape + shape)


def _diag_part_shape(shape) -> tuple:
  k = len(shape) // 2
  if len(shape) % 2 or tuple(shape[:k]) != tuple(shape[k:]):
    raise ValueError(
      f"DiagPart: The rank of the tensor should be even and the first half of "
      f"its dimensions should equal the second half, got shape {list(shape)}"
    )
  return tuple(shape[:k])


def _diag_part_impl(input):
  """The diagonal of a tensor of shape ``s + s`` (shape ``s``)."""
  s = _diag_part_shape(input.shape)
  n = math.prod(s)
  return jnp.reshape(jnp.diagonal(jnp.reshape(input, (n, n))), s)


def _diag_batch(args, dims):
  (x,), (d,) = args, dims
  x = rules.to_front(x, d)
  size, shape = x.shape[0], tuple(x.shape[1:])
  n = math.prod(shape)
  out = tfops.MatrixDiag(rules.reshape(x, (size, n)))
  return rules.reshape(out, (size,) + shape + shape), 0


def _diag_part_batch(args, dims):
  (x,), (d,) = args, dims
  x = rules.to_front(x, d)
  size, s = x.shape[0], _diag_part_shape(x.shape[1:])
  n = math.prod(s)
  out = tfops.MatrixDiagPart(rules.reshape(x, (size, n, n)))
  return rules.reshape(out, (size,) + s), 0


Diag = register_op(
  "Diag",
  _diag_impl,
  family=FAMILY,
  linear=True,
  transpose=lambda ct, x: [tfops.DiagPart(ct)],
  batching=_diag_batch,
  spec=lambda st: st.Spec(
    st.call(
      diagonal=st.arrays(st.dtypes(_DIAG_DTYPES), st.shapes(min_rank=1, max_rank=2, max_side=3))
    )
  ),
)

DiagPart = register_op(
  "DiagPart",
  _diag_part_impl,
  family=FAMILY,
  linear=True,
  # A scalar is its own diagonal (TF's own gradient fails on it: Diag needs rank >= 1).
  transpose=lambda ct, x: [tfops.Diag(ct) if rules.shape_of(x) else ct],
  batching=_diag_part_batch,
  spec=lambda st: st.Spec(_diag_part_calls(st)),
)


# --- UnravelIndex ---------------------------------------------------------------------------


def _unravel_impl(indices, dims):
  """The coordinates of flat ``indices`` in an array of shape ``dims``: TF's kernel
  ``out[k] = (i % stride[k]) / stride[k + 1]`` (C remainder and division, strides
  ``stride[k] = prod(dims[k:])``), so negative indices give TF's negative values and
  indices past ``prod(dims)`` (TF raises) wrap around: docs/semantics/array.md."""
  if indices.ndim > 1:
    raise ValueError(
      f"UnravelIndex: The indices can only be scalar or vector, got {list(indices.shape)}"
    )
  if indices.ndim == 1 and indices.shape[0] == 0:
    raise ValueError("UnravelIndex: received empty tensor indices")
  if dims.ndim != 1:
    raise ValueError(f"UnravelIndex: The indices can only be 1-D, got {list(dims.shape)}")
  k = dims.shape[0]
  one = jnp.ones((1,), dims.dtype)
  strides = jnp.flip(jnp.cumprod(jnp.flip(dims)))  # prod(dims[k:])
  inner = jnp.concatenate([strides[1:], one]) if k else one[:0]  # prod(dims[k+1:])
  shape = (k,) + tuple(indices.shape)
  column = (k,) + (1,) * indices.ndim
  i = jnp.broadcast_to(indices[None], shape)
  outer_s = jnp.broadcast_to(jnp.reshape(strides, column), shape)
  inner_s = jnp.broadcast_to(jnp.reshape(inner, column), shape)
  return lax.div(lax.rem(i, outer_s), inner_s)


def _unravel_check(indices, dims):
  bad = jnp.any(dims <= 0) | jnp.any(indices >= jnp.prod(dims))
  return bad, "index is out of bound as with dims (or dims has a non-positive entry)"


def _unravel_batch(args, dims_):
  (i, d), (di, dd) = args, dims_
  if dd is not None:
    # Batched dims vectors do not arise from graphs (dims are shapes); a TF-named
    # formulation would need per-example strides: vmap of the impl.
    return rules.vmap_batching(_unravel_impl, False)(args, dims_)
  i = rules.to_front(i, di)
  size, rest = i.shape[0], tuple(i.shape[1:])
  flat = tfops.UnravelIndex(rules.reshape(i, (size * math.prod(rest),)), d)
  return rules.reshape(flat, (d.shape[0], size) + rest), 1


UnravelIndex = register_op(
  "UnravelIndex",
  _unravel_impl,
  family=FAMILY,
  batching=_unravel_batch,
  check=_unravel_check,
  spec=lambda st: st.Spec(_unravel_calls(st)),
)


# --- InvertPermutation ----------------------------------------------------------------------


def _invert_permutation_impl(x):
  """``y[x[i]] = i``, a scatter. For entries that make no permutation (TF raises):
  entries outside ``[0, n)`` are dropped, of duplicates the last position wins, and
  positions no entry names are -1 (docs/semantics/array.md)."""
  if x.ndim != 1:
    raise ValueError("InvertPermutation: invert_permutation expects a 1D vector.")
  n = x.shape[0]
  valid = (x >= 0) & (x < n)
  target = jnp.where(valid, x, np.array(n, x.dtype))
  iota = lax.iota(x.dtype, n)
  return jnp.full((n,), -1, x.dtype).at[target].max(iota, mode="drop")


def _invert_permutation_check(x):
  n = x.shape[0]
  valid = (x >= 0) & (x < n)
  counts = jnp.zeros((n,), np.int32).at[jnp.where(valid, x, n)].add(1, mode="drop")
  return jnp.any(~valid) | jnp.any(counts != 1), f"the input is not a permutation of 0..{n - 1}"


def _invert_permutation_batch(args, dims):
  # Each row becomes a block of one flat permutation: entry v*n + x of row v (-1 for an
  # entry outside [0, n), which the flat op drops too); positions back by - v*n.
  (x,), (d,) = args, dims
  x = rules.to_front(x, d)
  size, n = x.shape
  dtype = rules.dtype_of(x)
  offsets = (np.arange(size, dtype=np.int64) * n).astype(dtype).reshape(size, 1)
  minus_one = np.array(-1, dtype)
  valid = tfops.LogicalAnd(
    tfops.GreaterEqual(x, np.array(0, dtype)), tfops.Less(x, np.array(n, dtype))
  )
  flat = tfops.SelectV2(valid, tfops.AddV2(x, offsets), minus_one)
  y = rules.reshape(tfops.InvertPermutation(rules.reshape(flat, (size * n,))), (size, n))
  return tfops.SelectV2(tfops.Equal(y, minus_one), minus_one, tfops.Sub(y, offsets)), 0


InvertPermutation = register_op(
  "InvertPermutation",
  _invert_permutation_impl,
  family=FAMILY,
  batching=_invert_permutation_batch,
  check=_invert_permutation_check,
  spec=lambda st: st.Spec(_invert_permutation_calls(st)),
)


# --- LinSpace -------------------------------------------------------------------------------


def _num(num) -> int:
  n = scalar_int(num)
  if n <= 0:
    raise ValueError(f"LinSpace: Requires num > 0: {n}")
  return n


def _linspace_impl(start, stop, *, num):
  """TF's kernel: ``out[0] = start``, ``out[num - 1] = stop`` and ``start + step * i``
  between, with ``step = (stop - start) / (num - 1)`` computed in the output dtype."""
  n = _num(num)
  if jnp.ndim(start) or jnp.ndim(stop):
    raise ValueError("LinSpace: start and stop must be scalars")
  first = jnp.reshape(start, (1,))
  if n == 1:
    return first
  # XLA would multiply by the rounded reciprocal of a constant divisor (TF divides):
  # the barrier keeps the divisor opaque. (XLA may still contract start + step * i into
  # an FMA: docs/semantics/array.md.)
  step = (stop - start) / lax.optimization_barrier(jnp.asarray(n - 1, start.dtype))
  mid = start + step * lax.iota(start.dtype, n)[1 : n - 1]
  return jnp.concatenate([first, mid, jnp.reshape(stop, (1,))])


def _linspace_weights(n: int, dtype) -> np.ndarray:
  """d out / d stop (d out / d start is one minus it)."""
  return (np.arange(n) / max(n - 1, 1)).astype(dtype)


def _linspace_transpose(ct, start, stop, *, num):
  w1 = _linspace_weights(_num(num), rules.dtype_of(ct))
  ct_stop = rules.reduce_sum(tfops.Mul(ct, w1), (0,))
  ct_start = rules.reduce_sum(tfops.Mul(ct, (1 - w1).astype(w1.dtype)), (0,))
  return [ct_start if rules.U(start) else None, ct_stop if rules.U(stop) else None]


def _linspace_batch(args, dims, *, num):
  # TF's kernel arithmetic with TF ops on [size, 1] start/stop (bit for bit the op's).
  n = _num(num)
  size = rules.batch_size(args, dims)
  start, stop = (
    rules.reshape(rules.with_batch_axis(a, d, size), (size, 1)) for a, d in zip(args, dims)
  )
  if n == 1:
    return start, 0
  dtype = rules.dtype_of(start)
  step = tfops.RealDiv(tfops.Sub(stop, start), np.array(n - 1, dtype))
  mid = tfops.AddV2(start, tfops.Mul(step, np.arange(1, n - 1).astype(dtype)))
  return tfops.ConcatV2(start, mid, stop, axis=1), 0


LinSpace = register_op(
  "LinSpace",
  _linspace_impl,
  family=FAMILY,
  static=("num",),
  linear=True,
  transpose=_linspace_transpose,
  batching=_linspace_batch,
  spec=lambda st: st.Spec(
    _linspace_calls(st),
    grad_oracle="fd",
    note="TF declares LinSpace not differentiable; ours is the "
    "derivative (linear in start and stop), checked against "
    "central differences",
  ),
)


# --- Empty, DeepCopy ------------------------------------------------------------------------


def _empty_impl(*, shape, dtype, init):
  """Zeros of ``shape`` and ``dtype``, with ``init`` or without (TF leaves the memory
  uninitialized then: any value is TF's; zeros are ours)."""
  dims = ints(shape)
  if any(d < 0 for d in dims):
    raise ValueError(f"Empty: Dimension {min(dims)} must be >= 0")
  return jnp.zeros(dims, tfdtypes.canonical_dtype(dtype))


def _no_operands(args, dims, **params):
  raise NotImplementedError("the op has no operands to batch")


def _empty_oracle(shape, dtype, init=False):
  # TF's init=False output is uninitialized memory: compare with init=True.
  tf = import_tensorflow()
  return tf.raw_ops.Empty(shape=shape, dtype=dtype, init=True)


Empty = register_op(
  "Empty",
  _empty_impl,
  family=FAMILY,
  static=("shape",),
  attrs=("dtype", "init"),
  batching=_no_operands,
  spec=lambda st: st.Spec(
    _empty_calls(st),
    oracle=_empty_oracle,
    note="init=False is compared with TF's init=True (TF leaves the "
    "memory uninitialized; ours is zeros)",
  ),
)

DeepCopy = register_op(
  "DeepCopy",
  lambda x: x,
  family=FAMILY,
  linear=True,
  transpose=lambda ct, x: [tfops.DeepCopy(ct)],
  batching=rules.per_op(rules.same_op_batching),
  doc="A copy of x (the identity: JAX values are immutable).",
  spec=lambda st: st.Spec(
    st.unary(st.ALL),
    grad_oracle="fd",
    note="TF registers no gradient for DeepCopy: derivatives are "
    "checked against central differences",
  ),
)


# --- BroadcastArgs, BroadcastGradientArgs -----------------------------------------------------


def _padded(s, rank: int):
  """A shape vector left-padded with ones to ``rank``."""
  if s.ndim != 1:
    raise ValueError(f"BroadcastArgs: In[0] must be a vector.{list(s.shape)}")
  return jnp.concatenate([jnp.ones((rank - s.shape[0],), s.dtype), s])


def _broadcast_args_impl(s0, s1):
  """The broadcast shape of ``s0`` and ``s1``: per dim (after left-padding with ones)
  the other one where one is 1, else the larger (they are equal unless incompatible,
  where TF raises: docs/semantics/array.md)."""
  rank = max(s0.shape[0] if s0.ndim == 1 else 0, s1.shape[0] if s1.ndim == 1 else 0)
  a, b = _padded(s0, rank), _padded(s1, rank)
  return jnp.where(a == 1, b, jnp.where(b == 1, a, jnp.maximum(a, b)))


def _broadcast_args_check(s0, s1):
  rank = max(s0.shape[0], s1.shape[0])
  if any(isinstance(s, np.ndarray) and s.dtype.kind == "O" for s in (s0, s1)):  # symbolic
    a, b = ([1] * (rank - len(s)) + list(s) for s in (s0, s1))
    ints = (int, np.integer)
    bad = any(
      isinstance(x, ints) and isinstance(y, ints) and x != y and 1 not in (x, y)
      for x, y in zip(a, b)
    )
    return np.bool_(bad), "Incompatible shapes"
  a, b = _padded(s0, rank), _padded(s1, rank)
  return jnp.any((a != b) & (a != 1) & (b != 1)), "Incompatible shapes"


def _broadcast_args_batch(args, dims):
  size = rules.batch_size(args, dims)
  s0, s1 = (rules.with_batch_axis(a, d, size) for a, d in zip(args, dims))
  rank = max(rules.shape_of(s0)[1], rules.shape_of(s1)[1])
  dtype = rules.dtype_of(s0)
  one = np.array(1, dtype)
  a, b = (
    tfops.PadV2(s, one, paddings=((0, 0), (rank - rules.shape_of(s)[1], 0))) for s in (s0, s1)
  )
  return tfops.SelectV2(
    tfops.Equal(a, one), b, tfops.SelectV2(tfops.Equal(b, one), a, tfops.Maximum(a, b))
  ), 0


def _broadcast_args_symbolic(s0, s1):
  """The broadcast shape of shapes holding symbolic dims (``tf.shape`` of a
  shape-polymorphic input): a dim of 1 takes the other, equal dims stay, else JAX's
  ``max_dim`` (symbolic dims are assumed compatible, as jax.export assumes)."""
  rank = max(s0.shape[0], s1.shape[0])
  a, b = ([1] * (rank - len(s)) + list(s) for s in (s0, s1))
  out = [
    y if _is_one(x) else x if _is_one(y) else x if x == y else jax.core.max_dim(x, y)
    for x, y in zip(a, b)
  ]
  return np.array(out, dtype=object)


def _is_one(d) -> bool:
  return isinstance(d, (int, np.integer)) and d == 1


BroadcastArgs = register_op(
  "BroadcastArgs",
  _broadcast_args_impl,
  family=FAMILY,
  batching=_broadcast_args_batch,
  symbolic=_broadcast_args_symbolic,
  check=_broadcast_args_check,
  spec=lambda st: st.Spec(_broadcast_args_calls(st)),
)


def broadcast_gradient_args(s0, s1) -> tuple[list, list]:
  """TF's BCast reduction indices: the output dims where each shape (left-padded with
  ones) is 1; none at all when the two shapes are identical. Symbolic dims of a
  jax.export are taken as compatible with any size and as not 1 (jax.export's
  broadcasting assumption)."""
  known = lambda d: isinstance(d, (int, np.integer))
  s0, s1 = rules.sizes(s0), rules.sizes(s1)
  if rules.known(s0) and rules.known(s1):
    s0, s1 = ints(s0), ints(s1)
  rank = max(len(s0), len(s1))
  a, b = (1,) * (rank - len(s0)) + s0, (1,) * (rank - len(s1)) + s1
  for x, y in zip(a, b):
    if known(x) and known(y) and x != y and x != 1 and y != 1:
      raise ValueError(f"BroadcastGradientArgs: Incompatible shapes: {list(s0)} vs. {list(s1)}")
  if len(s0) == len(s1) and all(
    x is y or (known(x) and known(y) and x == y) or (not known(x) and not known(y) and x == y)
    for x, y in zip(s0, s1)
  ):
    return [], []
  return ([i for i in range(rank) if _is_one(a[i])], [i for i in range(rank) if _is_one(b[i])])


def _broadcast_gradient_args_impl(*, s0, s1, T):
  r0, r1 = broadcast_gradient_args(s0, s1)
  dtype = np.dtype(T)
  return tuple(
    jnp.asarray(tfdtypes.canonicalize_value(np.asarray(r, dtype), "BroadcastGradientArgs output"))
    for r in (r0, r1)
  )


BroadcastGradientArgs = register_op(
  "BroadcastGradientArgs",
  _broadcast_gradient_args_impl,
  family=FAMILY,
  static=("s0", "s1"),
  attrs=("T",),
  multiple_results=True,
  batching=_no_operands,
  spec=lambda st: st.Spec(_bga_calls(st)),
)


# --- property-test strategies (hypothesis is imported lazily) ---------------------


def _diag_part_calls(st):
  @st.composite
  def calls(draw):
    # Rank >= 2: TF's own gradient of a scalar DiagPart fails (Diag needs rank >= 1).
    s = tuple(draw(st.shapes(min_rank=1, max_rank=2, max_side=3)))
    return {"input": draw(st.arrays(st.dtypes(_DIAG_DTYPES), s + s))}

  return calls()


def _unravel_calls(st):
  hst = lazy_hst()

  @st.composite
  def calls(draw):
    dtype = draw(st.dtypes(INDEX_DTYPES))
    dims = [draw(hst.integers(1, 4)) for _ in range(draw(hst.integers(1, 3)))]
    total = math.prod(dims)
    shape = () if draw(hst.booleans()) else (draw(hst.integers(1, 4)),)
    # Negative indices too: TF does not check them (its arithmetic decides).
    indices = draw(st.arrays(dtype, shape, min_value=-total, max_value=total - 1))
    return {"indices": indices, "dims": np.array(dims, dtype)}

  return calls()


def _invert_permutation_calls(st):
  hst = lazy_hst()

  @st.composite
  def calls(draw):
    n = draw(hst.integers(0, 6))
    perm = draw(hst.permutations(range(n)))
    return {"x": np.array(perm, draw(st.dtypes(INDEX_DTYPES))).reshape(-1)}

  return calls()


def _linspace_calls(st):
  hst = lazy_hst()

  @st.composite
  def calls(draw):
    dtype = draw(st.dtypes(("float32", "float64")))
    start, stop = draw(st.arrays(dtype, ())), draw(st.arrays(dtype, ()))
    return {
      "start": start,
      "stop": stop,
      "num": np.asarray(draw(hst.integers(1, 6)), draw(st.dtypes(INDEX_DTYPES))),
    }

  return calls()


def _empty_calls(st):
  hst = lazy_hst()

  @st.composite
  def calls(draw):
    shape = np.array(draw(st.shapes()), np.int32).reshape(-1)
    return {"shape": shape, "dtype": draw(st.dtypes(st.ALL)), "init": draw(hst.booleans())}

  return calls()


def _broadcastable_pair(draw, st):
  hst = lazy_hst()
  if draw(hst.integers(0, 3)) == 0:  # identical shapes: TF's special case
    s = tuple(draw(st.shapes()))
    return s, s
  return draw(st.broadcastable_shapes(2))


def _broadcast_args_calls(st):
  @st.composite
  def calls(draw):
    s0, s1 = _broadcastable_pair(draw, st)
    dtype = draw(st.dtypes(INDEX_DTYPES))
    return {"s0": np.array(s0, dtype).reshape(-1), "s1": np.array(s1, dtype).reshape(-1)}

  return calls()


def _bga_calls(st):
  return _broadcast_args_calls(st)
