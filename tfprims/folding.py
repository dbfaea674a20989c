"""Constant folding with numpy: evaluating an op on values known at trace time
without compiling an XLA program.

The interpreter folds every op whose inputs are all known (shape arithmetic,
``Fill``/``Range`` of static sizes, loop-counter bookkeeping...). Folding through
XLA (``jax.ensure_compile_time_eval``) compiles one program per new signature, at
10-80 ms each, which dominated the first trace of recurrent models. Here the op's
impl is traced to a jaxpr once per signature and evaluated with numpy.

Only primitives whose numpy evaluation is bit-identical to XLA's are handled:
data movement for every dtype, and arithmetic on integers and booleans (floats
only compare). Anything else (transcendentals, float arithmetic whose rounding
or NaN/zero-sign rules could differ, integer division by zero, float-to-int
casts) makes :func:`fold` return None and the caller folds with XLA.
tests/test_folding.py compares both on every op's property-spec draws.

Shapes with the symbolic dims of a jax.export shape-polymorphic trace are numpy
object arrays (see Shape): integer rules evaluate them with the dims' own
arithmetic, so ``Reshape(x, Pack(Prod(Shape(x)[1:]), -1))`` still gets a static
(symbolic) shape; :func:`materialize` turns them into program values otherwise.
"""

from __future__ import annotations

import functools
from typing import Any, Mapping, Optional, Sequence

import jax
import numpy as np
from jax.extend.core import Literal

from tfprims import dtypes


class Weight(np.ndarray):
  """A param's value where a jit/make_jaxpr trace closes over it: known at trace time,
  but not a trace-time constant to compute with. Ops on weights fold where numpy is
  exactly XLA (the Reshapes and Squeezes of batch-norm parameters, integer counters)
  and bind otherwise, with the weight as the program's constant: folding their
  float arithmetic with XLA would compile a program per signature. JAX takes the
  array as it is (a constant per object), so a weight read twice is one constant."""


def weight(x) -> Weight:
  """``x`` (a numpy array) marked as a :class:`Weight` (a view, not a copy)."""
  return x if type(x) is Weight else np.asarray(x).view(Weight)


def is_weight(x) -> bool:
  return type(x) is Weight


class _NotFoldable(Exception):
  """These values cannot be folded with numpy (e.g. an integer division by zero)."""


class _NeverFoldable(_NotFoldable):
  """No values of this signature can (a primitive or dtype numpy does not match
  XLA on): remembered, so eager calls do not retry it on every call."""


def _exact(*xs):
  """Arithmetic is bit-identical to XLA's only for integers and booleans."""
  for x in xs:
    if x.dtype.kind not in "iubO":
      raise _NeverFoldable(f"arithmetic on {x.dtype}")


def _arith(fn):
  def rule(*xs, **_):
    _exact(*xs)
    return fn(*xs)

  return rule


def _div(a, b, **_):
  _exact(a, b)
  if np.any(b == 0):
    raise _NotFoldable("integer division by zero")
  if a.dtype.kind == "i" and np.any((a == np.iinfo(a.dtype).min) & (b == -1)):
    raise _NotFoldable("integer division overflow")
  q = np.floor_divide(a, b)  # XLA truncates towards zero: undo numpy's flooring
  return np.where((np.remainder(a, b) != 0) & ((a < 0) != (b < 0)), q + 1, q)


def _rem(a, b, **_):
  _exact(a, b)
  if np.any(b == 0):
    raise _NotFoldable("integer remainder by zero")
  if a.dtype == object or b.dtype == object:
    # Symbolic dims (tf.shape(x)[1] % 4): Python's % is floored, XLA's truncated; they
    # agree for a dividend >= 0 and a divisor > 0 (an undecidable comparison raises).
    if not (np.all(a >= 0) and np.all(b > 0)):
      raise _NotFoldable("remainder of symbolic dims of either sign")
    return np.remainder(a, b)
  return np.fmod(a, b)  # the dividend's sign, as XLA


def _convert(x, *, new_dtype, **_):
  new_dtype = np.dtype(new_dtype)
  if x.dtype == object:
    if new_dtype.kind not in "iu":
      raise _NotFoldable("symbolic dims to a non-integer dtype")
    return x
  if x.dtype.kind in "fc" and (new_dtype.kind not in "fc" or new_dtype.itemsize < x.dtype.itemsize):
    raise _NeverFoldable("float to int or to a narrower float")
  return x.astype(new_dtype)


def _broadcast_in_dim(x, *, shape, broadcast_dimensions, **_):
  expanded = [1] * len(shape)
  for i, d in enumerate(broadcast_dimensions):
    expanded[d] = x.shape[i]
  return np.broadcast_to(x.reshape(expanded), shape)


def _reduce(fn, any_dtype):
  def rule(x, *, axes, **_):
    if not any_dtype:
      _exact(x)
    return fn(x, axis=tuple(axes))

  return rule


def _select_n(which, *cases):
  return np.where(which, cases[1], cases[0]) if which.dtype == np.bool_ else np.choose(which, cases)


def _slice(x, *, start_indices, limit_indices, strides=None, **_):
  strides = strides or (1,) * x.ndim
  return x[tuple(slice(s, e, st) for s, e, st in zip(start_indices, limit_indices, strides))]


def _extreme(np_fn, dim_fn):
  """Elementwise max/min; on symbolic dims (object arrays) JAX's ``max_dim``/``min_dim``,
  which stay symbolic where Python's comparison would be inconclusive (max(b - 2, 0))."""

  def rule(a, b, **_):
    _exact(a, b)
    if a.dtype != object and b.dtype != object:
      return np_fn(a, b)
    return np.frompyfunc(dim_fn, 2, 1)(a, b)

  return rule


_MAX, _MIN = _extreme(np.maximum, jax.core.max_dim), _extreme(np.minimum, jax.core.min_dim)


def _integer_pow(x, *, y, **_):
  _exact(x)
  if y < 0:
    raise _NeverFoldable("negative integer power")
  return x**y  # wraps around like XLA's repeated multiplication


def _iota(*, dtype, shape, dimension, **_):
  return _broadcast_in_dim(
    np.arange(shape[dimension], dtype=dtype), shape=shape, broadcast_dimensions=(dimension,)
  )


_RULES = {
  "add": _arith(np.add),
  "sub": _arith(np.subtract),
  "mul": _arith(np.multiply),
  "neg": _arith(np.negative),
  "abs": _arith(np.abs),
  "max": _MAX,
  "min": _MIN,
  "div": _div,
  "rem": _rem,
  "and": _arith(np.bitwise_and),
  "or": _arith(np.bitwise_or),
  "xor": _arith(np.bitwise_xor),
  "not": _arith(np.invert),
  "lt": np.less,
  "le": np.less_equal,
  "gt": np.greater,
  "ge": np.greater_equal,
  "eq": np.equal,
  "ne": np.not_equal,
  "select_n": _select_n,
  "convert_element_type": _convert,
  "broadcast_in_dim": _broadcast_in_dim,
  "reshape": lambda x, *, new_sizes, **_: x.reshape(new_sizes),
  "squeeze": lambda x, *, dimensions, **_: np.squeeze(x, tuple(dimensions)),
  "iota": _iota,
  "concatenate": lambda *xs, dimension, **_: np.concatenate(xs, axis=dimension),
  "stack": lambda *xs, axis, **_: np.stack(xs, axis=axis),
  "rev": lambda x, *, dimensions, **_: np.flip(x, tuple(dimensions)),
  "sign": _arith(np.sign),
  "clamp": lambda lo, x, hi, **_: _MIN(_MAX(x, lo), hi),
  "integer_pow": _integer_pow,
  "slice": _slice,
  "transpose": lambda x, *, permutation, **_: np.transpose(x, permutation),
  "split": lambda x, *, sizes, axis, **_: np.split(x, np.cumsum(sizes)[:-1], axis=axis),
  "reduce_max": _reduce(np.max, False),
  "reduce_min": _reduce(np.min, False),
  "reduce_sum": _reduce(np.sum, False),
  "reduce_prod": _reduce(np.prod, False),
  "reduce_and": _reduce(np.all, True),
  "reduce_or": _reduce(np.any, True),
  "copy": lambda x, **_: x,
  "copy_p": lambda x, **_: x,
}
_CALLS = ("pjit", "jit", "closed_call")


@functools.lru_cache(maxsize=4096)
def _traced(impl, params: tuple, signature: tuple, x64: bool):
  """The impl's jaxpr for one signature, or None if it cannot be traced
  abstractly (an impl that branches on values folds with XLA)."""
  del x64  # part of the key: the jaxpr's dtypes depend on it
  args = [jax.ShapeDtypeStruct(shape, dtype) for shape, dtype in signature]
  try:
    return jax.make_jaxpr(functools.partial(impl, **dict(params)))(*args)
  except Exception:  # any failure means: fold with XLA instead
    return None


def _eval(jaxpr, consts: Sequence[Any], args: Sequence[np.ndarray], rules=None) -> list:
  """Evaluates ``jaxpr`` with numpy: ``rules`` (default :data:`_RULES`) per primitive;
  object arrays (symbolic dims, tfprims.value_analysis's forms) go through them too."""
  rules = _RULES if rules is None else rules
  env: dict = {}
  read = lambda v: v.val if isinstance(v, Literal) else env[v]
  for var, value in list(zip(jaxpr.constvars, consts)) + list(zip(jaxpr.invars, args)):
    value = np.asarray(value)
    env[var] = value if value.dtype == object else value.astype(var.aval.dtype, copy=False)
  for eqn in jaxpr.eqns:
    ins = [np.asarray(read(v)) for v in eqn.invars]
    name = eqn.primitive.name
    if name in _CALLS:
      inner = eqn.params.get("jaxpr") or eqn.params.get("call_jaxpr")
      outs = _eval(inner.jaxpr, inner.consts, ins, rules)
    else:
      rule = rules.get(name)
      if rule is None:
        raise _NeverFoldable(name)
      out = rule(*ins, **eqn.params)
      outs = list(out) if eqn.primitive.multiple_results else [out]
    for var, out in zip(eqn.outvars, outs):
      out = _symbolic_or_int(np.asarray(out))
      want = np.dtype(var.aval.dtype)
      if out.shape != tuple(var.aval.shape) or (
        out.dtype.kind != want.kind and not (out.dtype == object and want.kind in "iub")
      ):
        raise _NotFoldable(f"{name} gave {out.dtype}{list(out.shape)}")
      if out.dtype == object:  # forms of the rules' own (a ``fit`` gives them the dtype)
        env[var] = out if getattr(rules, "fit", None) is None else rules.fit(out, want)
      else:
        env[var] = out.astype(want, copy=False)
  return [np.asarray(read(v)) for v in jaxpr.outvars]


def _symbolic_or_int(x: np.ndarray) -> np.ndarray:
  """An object array of symbolic dims, or, once no symbol is left, of int64."""
  if x.dtype == object and all(isinstance(v, (int, np.integer)) for v in x.flat):
    return x.astype(np.int64)
  return x


def _gather(operand, indices, *, dimension_numbers, slice_sizes, **_):
  """Gathers of whole slices along one axis (what ``jnp.take`` emits), in range, of
  symbolic dims (other gathers fold with XLA, as before)."""
  if operand.dtype != object:
    raise _NeverFoldable("gather")
  dn = dimension_numbers
  if (
    len(dn.start_index_map) != 1
    or tuple(dn.collapsed_slice_dims) != tuple(dn.start_index_map)
    or dn.operand_batching_dims
    or indices.shape[-1:] != (1,)
  ):
    raise _NeverFoldable("gather")
  axis = dn.start_index_map[0]
  if any(s != (1 if d == axis else operand.shape[d]) for d, s in enumerate(slice_sizes)):
    raise _NeverFoldable("gather")
  idx = indices[..., 0].astype(np.int64)
  if np.any((idx < 0) | (idx >= operand.shape[axis])):
    raise _NotFoldable("gather index out of range")  # XLA clamps or fills: leave it to XLA
  # np.take's dims: operand dims before axis, index dims, operand dims after axis.
  taken = np.take(operand, idx, axis=axis)
  batch = idx.ndim
  perm = [None] * taken.ndim
  for position, d in zip(dn.offset_dims, [d for d in range(operand.ndim) if d != axis]):
    perm[position] = d if d < axis else d - 1 + batch
  index_dims = iter(range(axis, axis + batch))
  return np.transpose(taken, [p if p is not None else next(index_dims) for p in perm])


_RULES["gather"] = _gather


def fold_symbolic(fn, operands: Sequence[Any], params: dict) -> Optional[list]:
  """An op's own numpy rule for symbolic dims (``register_op(symbolic=...)``) on its
  operands: its output (a list of one), or None where the rule cannot decide it."""
  operands = [np.asarray(o) for o in operands]
  try:
    out = _symbolic_or_int(np.asarray(fn(*operands, **params)))
  except Exception:  # comparisons of symbolic dims can be inconclusive
    return None
  if out.dtype == object:
    return [out]
  # every dim cancelled (b // b): the operands' integer type, as the impl's
  ints = [o.dtype for o in operands if o.dtype.kind in "iu"]
  default = np.int64 if jax.config.jax_enable_x64 else np.int32
  return [out.astype(ints[0] if ints else default)] if out.dtype.kind in "iu" else None


def has_symbolic(operands: Sequence[Any]) -> bool:
  """Whether an operand holds symbolic dims (an object array: see Shape)."""
  return any(isinstance(o, np.ndarray) and o.dtype == object for o in operands)


def has_symbolic_param(params: Mapping[str, Any]) -> bool:
  """Whether a param holds a symbolic dim (Fill's or Reshape's shape from ``tf.shape``
  of a shape-polymorphic input): the op's value exists only in the program."""

  def symbolic(v):
    return (isinstance(v, tuple) and any(map(symbolic, v))) or jax.export.is_symbolic_dim(v)

  return any(map(symbolic, params.values()))


def materialize(operands: Sequence[Any]) -> list:
  """Operands with their symbolic dims as values the program computes (JAX lowers a
  dim to its size), typed like the other integer operands (else int32, Shape's
  default)."""
  import jax.numpy as jnp

  ints = [o.dtype for o in operands if isinstance(o, np.ndarray) and o.dtype.kind in "iu"]
  dtype = ints[0] if ints else np.dtype(np.int32)
  return [
    jnp.asarray(o.tolist(), dtype=dtype) if isinstance(o, np.ndarray) and o.dtype == object else o
    for o in operands
  ]


def fold(
  impl, operands: Sequence[Any], params: dict, rules=None, dtypes: Optional[Sequence[Any]] = None
) -> Optional[list]:
  """``impl(*operands, **params)``'s outputs (a list) evaluated with numpy, or
  None when that would not be exactly what XLA computes. ``rules``: the
  primitives' numpy rules (default: :data:`_RULES`); ``dtypes``: the operands'
  dtypes where they are object arrays (default: the default integer type)."""
  if not all(isinstance(o, (np.ndarray, np.generic)) for o in operands):
    return None  # Python scalars are weakly typed: leave them to JAX
  x64 = bool(jax.config.jax_enable_x64)
  # Symbolic dims (object arrays) trace as the default integer type.
  dtypes = dtypes or [np.dtype(np.int64 if x64 else np.int32)] * len(operands)
  key = (
    impl,
    tuple(sorted(params.items())),
    tuple(
      (np.shape(o), np.asarray(o).dtype if np.asarray(o).dtype != object else np.dtype(d))
      for o, d in zip(operands, dtypes)
    ),
    x64,
  )
  try:
    if key in _NEVER:
      return None
    closed = _traced(*key)
  except TypeError:  # unhashable params
    return None
  if closed is None:
    return None
  try:
    with np.errstate(all="ignore"):  # integer wrap-around is XLA's too
      return _eval(closed.jaxpr, closed.consts, operands, rules)
  except _NeverFoldable:
    if len(_NEVER) < 100_000:
      _NEVER.add(key)
    return None
  except (_NotFoldable, ValueError, TypeError, IndexError):
    return None
  except Exception:  # comparisons of symbolic dims can be inconclusive
    if has_symbolic(operands):
      return None
    raise


_NEVER: set = set()  # signatures numpy cannot fold whatever the values


def folds_wide(operands, params) -> bool:
  """Whether known operands fold in 64-bit precision while x64 is off: a wide operand or
  a float64/complex128 dtype attr (``Cast[DstT=float64]``), no weights nor symbolic dims
  (those bind into the 32-bit program)."""
  if dtypes.x64_enabled():
    return False
  wide = any(dtypes.is_wide(o) for o in operands) or any(
    any(
      isinstance(d, np.dtype) and d in dtypes.WIDE_FLOATS
      for d in (v if isinstance(v, tuple) else (v,))
    )
    for v in params.values()
  )
  return (
    wide
    and not any(is_weight(o) for o in operands)
    and not (has_symbolic(operands) or has_symbolic_param(params))
  )


def known_value(value: Any) -> Any:
  """``value`` as numpy when it is known now: a trace-time constant (numpy, a Python
  scalar), or a computed array outside any trace (an eager call); None when traced."""
  if isinstance(value, (np.ndarray, np.generic, int, float, bool, complex)):
    return value
  if isinstance(value, jax.Array) and not isinstance(value, jax.core.Tracer):
    return np.asarray(value)
  return None
