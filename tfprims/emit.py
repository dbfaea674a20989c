"""Direct lowerings: an op's StableHLO emitted from its avals, its impl not traced.

``mlir.lower_fun(impl)`` traces the impl at every lowering of a new signature; for the
ops every network lowers dozens of times (convolutions, activations, reshapes) that
tracing was most of the lowering time (benchmarks/NOTES.md, "Lowering cost").

A direct lowering is a *builder* ``build(B, *args, **params)`` written against a small
lax-like namespace ``B``: :data:`LAX` (lax itself, on tracers) or an :class:`Emitter`
(StableHLO ops on :class:`Val`, an IR value with its shape and dtype). Both have the
same methods and both kinds of value have ``shape``/``dtype``/``ndim``, so one body
serves the emitted lowering and the traced one. :func:`direct_lowering` makes the
lowering rule: it emits when every aval is static and unsharded, and otherwise (shape
polymorphism, sharding in types) lowers a traced fallback. A builder returns ``None``
for parameters it does not handle (ops it emitted before deciding are dead code,
dropped by the compiler), and another rule lowers those.
Every op keeps its impl as the reference: the property tests run the lowering (jit)
against TF, and tests/test_emit.py compares emitted and traced lowerings.
"""

from __future__ import annotations

from typing import Callable, Sequence

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax
from jax.extend.mlir.dialects import chlo, stablehlo as hlo
from jax.interpreters import mlir

ir = mlir.ir


class Val:
  """An IR value with its static shape and dtype (what an Emitter computes on)."""

  __slots__ = ("value", "shape", "dtype")

  def __init__(self, value, shape, dtype):
    self.value, self.shape, self.dtype = value, tuple(int(d) for d in shape), np.dtype(dtype)

  @property
  def ndim(self) -> int:
    return len(self.shape)


def _inexact(dtype) -> bool:
  """Float or complex (bfloat16 included, whose numpy kind is "V")."""
  return bool(jnp.issubdtype(dtype, jnp.inexact))


def _compare_type(dtype) -> str:
  if _inexact(dtype):
    return "FLOAT"
  return "SIGNED" if jnp.issubdtype(dtype, jnp.signedinteger) else "UNSIGNED"


def _hlo_compare(x, y, direction: str, dtype):
  return hlo.compare(
    x,
    y,
    hlo.ComparisonDirectionAttr.get(direction),
    compare_type=hlo.ComparisonTypeAttr.get(_compare_type(dtype)),
  )


def _lowest(dtype):
  return -np.inf if _inexact(dtype) else np.iinfo(dtype).min


class Emitter:
  """lax's functions used by direct lowerings, emitting StableHLO at the current
  insertion point. Operands of binary ops have one shape and dtype (lax's rule)."""

  def _type(self, shape, dtype):
    return ir.RankedTensorType.get(list(shape), mlir.dtype_to_ir_type(np.dtype(dtype)))

  def full_like(self, x: Val, value) -> Val:
    return self.full(value, x.shape, x.dtype)

  def full(self, value, shape, dtype) -> Val:
    scalar = mlir.ir_constant(np.array(value, dtype))
    if not shape:
      return Val(scalar, (), dtype)
    return Val(
      hlo.broadcast_in_dim(self._type(shape, dtype), scalar, mlir.dense_int_array([])), shape, dtype
    )

  def broadcast_in_dim(self, x: Val, shape, dims) -> Val:
    dims = tuple(dims)
    if tuple(shape) == x.shape and dims == tuple(range(x.ndim)):
      return x
    return Val(
      hlo.broadcast_in_dim(self._type(shape, x.dtype), x.value, mlir.dense_int_array(list(dims))),
      shape,
      x.dtype,
    )

  def broadcast_to(self, x: Val, shape) -> Val:
    """numpy broadcasting (dims aligned on the right)."""
    return self.broadcast_in_dim(x, shape, range(len(shape) - x.ndim, len(shape)))

  def reshape(self, x: Val, shape) -> Val:
    if tuple(shape) == x.shape:
      return x
    return Val(hlo.reshape(self._type(shape, x.dtype), x.value), shape, x.dtype)

  def transpose(self, x: Val, perm) -> Val:
    shape = tuple(x.shape[p] for p in perm)
    return Val(hlo.transpose(x.value, mlir.dense_int_array(list(perm))), shape, x.dtype)

  def slice(self, x: Val, start, limit, strides=None) -> Val:
    strides = list(strides or [1] * x.ndim)
    shape = [max(0, -(-(hi - lo) // s)) for lo, hi, s in zip(start, limit, strides)]
    return Val(
      hlo.slice(
        x.value,
        mlir.dense_int_array(list(start)),
        mlir.dense_int_array(list(limit)),
        mlir.dense_int_array(strides),
      ),
      shape,
      x.dtype,
    )

  def rev(self, x: Val, dimensions) -> Val:
    return Val(hlo.reverse(x.value, mlir.dense_int_array(list(dimensions))), x.shape, x.dtype)

  def pad(self, x: Val, padding_value, config) -> Val:
    lo, hi, interior = ([c[i] for c in config] for i in range(3))
    shape = [lo_ + hi_ + n + max(n - 1, 0) * i for n, lo_, hi_, i in zip(x.shape, lo, hi, interior)]
    value = mlir.ir_constant(np.array(padding_value, x.dtype))
    return Val(
      hlo.pad(
        x.value,
        value,
        mlir.dense_int_array(lo),
        mlir.dense_int_array(hi),
        mlir.dense_int_array(interior),
      ),
      shape,
      x.dtype,
    )

  def dynamic_slice(self, x: Val, start_indices: Sequence[Val], slice_sizes) -> Val:
    """lax's (starts clamped into range); the starts are scalars of one integer dtype."""
    return Val(
      hlo.dynamic_slice(
        x.value, [i.value for i in start_indices], mlir.dense_int_array(list(slice_sizes))
      ),
      slice_sizes,
      x.dtype,
    )

  def dynamic_update_slice(self, x: Val, update: Val, start_indices: Sequence[Val]) -> Val:
    return Val(
      hlo.dynamic_update_slice(x.value, update.value, [i.value for i in start_indices]),
      x.shape,
      x.dtype,
    )

  def concatenate(self, xs: Sequence[Val], dimension: int) -> Val:
    shape = list(xs[0].shape)
    shape[dimension] = sum(x.shape[dimension] for x in xs)
    return Val(hlo.concatenate([x.value for x in xs], dimension), shape, xs[0].dtype)

  def convert_element_type(self, x: Val, dtype) -> Val:
    dtype = np.dtype(dtype)
    if dtype == x.dtype:
      return x
    if not (_inexact(x.dtype) and _inexact(dtype)):
      raise NotImplementedError("Emitter converts between float types only")  # lax clamps ints
    return Val(hlo.convert(self._type(x.shape, dtype), x.value), x.shape, dtype)

  # Elementwise ------------------------------------------------------------

  def _binary(op, name):
    def method(self, x: Val, y: Val) -> Val:
      if x.shape != y.shape or x.dtype != y.dtype:
        raise TypeError(f"Emitter.{name}: operands {x.shape} {x.dtype}, {y.shape} {y.dtype}")
      return Val(op(x.value, y.value), x.shape, x.dtype)

    method.__name__ = name
    return method

  def _unary(op, name):
    def method(self, x: Val) -> Val:
      return Val(op(x.value), x.shape, x.dtype)

    method.__name__ = name
    return method

  add = _binary(hlo.add, "add")
  sub = _binary(hlo.subtract, "sub")
  mul = _binary(hlo.multiply, "mul")
  div = _binary(hlo.divide, "div")
  max = _binary(hlo.maximum, "max")
  neg = _unary(hlo.negate, "neg")
  exp = _unary(hlo.exponential, "exp")
  rsqrt = _unary(hlo.rsqrt, "rsqrt")
  tanh = _unary(hlo.tanh, "tanh")
  logistic = _unary(hlo.logistic, "logistic")
  erf = _unary(chlo.erf, "erf")  # CHLO: XLA expands it as lax's lowering does
  erfc = _unary(chlo.erfc, "erfc")
  del _binary, _unary

  def _compare(direction):
    def method(self, x: Val, y: Val) -> Val:
      return Val(_hlo_compare(x.value, y.value, direction, x.dtype), x.shape, np.bool_)

    method.__name__ = direction.lower()
    return method

  lt, ge = _compare("LT"), _compare("GE")
  del _compare

  def asarray(self, value) -> Val:
    """A numpy array as a constant."""
    value = np.asarray(value)
    return Val(mlir.ir_constant(value), value.shape, value.dtype)

  def select(self, pred: Val, on_true: Val, on_false: Val) -> Val:
    return Val(hlo.select(pred.value, on_true.value, on_false.value), on_true.shape, on_true.dtype)

  # Reductions and contractions ---------------------------------------------

  def _reduce(self, x: Val, axes, init, combine) -> Val:
    axes = tuple(sorted(axes))
    shape = tuple(n for a, n in enumerate(x.shape) if a not in axes)
    scalar = self._type((), x.dtype)
    op = hlo.ReduceOp(
      [self._type(shape, x.dtype)],
      [x.value],
      [mlir.ir_constant(np.array(init, x.dtype))],
      mlir.dense_int_array(axes),
    )
    body = op.regions[0].blocks.append(scalar, scalar)
    with ir.InsertionPoint(body):
      hlo.return_([combine(*body.arguments)])
    return Val(op.result, shape, x.dtype)

  def reduce_sum(self, x: Val, axes) -> Val:
    return self._reduce(x, axes, 0, hlo.add)

  def reduce_max(self, x: Val, axes) -> Val:
    return self._reduce(x, axes, _lowest(x.dtype), hlo.maximum)

  def _reduce_window(self, x: Val, init, combine, window, strides, padding) -> Val:
    shape = tuple(
      max(0, (n + lo + hi - k) // s + 1)
      for n, k, s, (lo, hi) in zip(x.shape, window, strides, padding)
    )
    scalar = self._type((), x.dtype)
    i64 = ir.IntegerType.get_signless(64)
    op = hlo.ReduceWindowOp(
      [self._type(shape, x.dtype)],
      [x.value],
      [mlir.ir_constant(np.array(init, x.dtype))],
      window_dimensions=mlir.dense_int_array(list(window)),
      window_strides=mlir.dense_int_array(list(strides)),
      padding=ir.DenseElementsAttr.get(np.asarray(padding, np.int64).reshape(x.ndim, 2), type=i64),
    )
    body = op.regions[0].blocks.append(scalar, scalar)
    with ir.InsertionPoint(body):
      hlo.return_([combine(*body.arguments)])
    return Val(op.result, shape, x.dtype)

  def reduce_window_sum(self, x: Val, window, strides, padding) -> Val:
    """lax.reduce_window with lax.add; ``padding`` as (lo, hi) pairs, zeros padded."""
    return self._reduce_window(x, 0, hlo.add, window, strides, padding)

  def reduce_window_max(self, x: Val, window, strides, padding, ignore_nan=False) -> Val:
    """lax.reduce_window with lax.max; pads with -inf (integers: their minimum).
    ``ignore_nan``: NaN never wins over a number (see :func:`_max_ignoring_nan`)."""
    combine = hlo.maximum
    if ignore_nan and _inexact(x.dtype):

      def combine(a, b):  # _max_ignoring_nan's
        return hlo.select(
          hlo.or_(_hlo_compare(b, a, "GT", x.dtype), _hlo_compare(a, a, "NE", x.dtype)), b, a
        )

    return self._reduce_window(x, _lowest(x.dtype), combine, window, strides, padding)

  def dot_general(self, x: Val, y: Val, dimension_numbers, preferred_element_type=None) -> Val:
    (xc, yc), (xb, yb) = dimension_numbers
    dtype = np.dtype(preferred_element_type or x.dtype)
    shape = (
      [x.shape[a] for a in xb]
      + [n for a, n in enumerate(x.shape) if a not in xc and a not in xb]
      + [n for a, n in enumerate(y.shape) if a not in yc and a not in yb]
    )
    dims = hlo.DotDimensionNumbers.get(
      lhs_batching_dimensions=list(xb),
      rhs_batching_dimensions=list(yb),
      lhs_contracting_dimensions=list(xc),
      rhs_contracting_dimensions=list(yc),
    )
    return Val(
      hlo.dot_general(
        self._type(shape, dtype), x.value, y.value, dims, precision_config=_default_precision()
      ),
      shape,
      dtype,
    )

  def conv_general_dilated(
    self,
    x: Val,
    w: Val,
    window_strides,
    padding,
    *,
    rhs_dilation,
    dimension_numbers,
    feature_group_count=1,
  ) -> Val:
    """lax's, with explicit (lo, hi) padding and ``lax.ConvDimensionNumbers``."""
    lhs, rhs, out = dimension_numbers
    spatial = [
      max(0, (x.shape[a] + lo + hi - ((w.shape[b] - 1) * d + 1)) // s + 1)
      for a, b, (lo, hi), s, d in zip(lhs[2:], rhs[2:], padding, window_strides, rhs_dilation)
    ]
    shape = [0] * x.ndim
    shape[out[0]], shape[out[1]] = x.shape[lhs[0]], w.shape[rhs[0]]
    for a, n in zip(out[2:], spatial):
      shape[a] = n
    dims = hlo.ConvDimensionNumbers.get(
      input_batch_dimension=lhs[0],
      input_feature_dimension=lhs[1],
      input_spatial_dimensions=list(lhs[2:]),
      kernel_output_feature_dimension=rhs[0],
      kernel_input_feature_dimension=rhs[1],
      kernel_spatial_dimensions=list(rhs[2:]),
      output_batch_dimension=out[0],
      output_feature_dimension=out[1],
      output_spatial_dimensions=list(out[2:]),
    )
    nd = len(window_strides)
    i64 = ir.IntegerType.get_signless(64)
    pads = ir.DenseElementsAttr.get(np.asarray(padding, np.int64).reshape(nd, 2), type=i64)
    value = hlo.convolution(
      self._type(shape, x.dtype),
      x.value,
      w.value,
      dimension_numbers=dims,
      feature_group_count=mlir.i64_attr(feature_group_count),
      batch_group_count=mlir.i64_attr(1),
      window_strides=mlir.dense_int_array(list(window_strides)),
      padding=pads,
      lhs_dilation=mlir.dense_int_array([1] * nd),
      rhs_dilation=mlir.dense_int_array(list(rhs_dilation)),
      precision_config=_default_precision(),
    )
    return Val(value, shape, x.dtype)


def _default_precision():
  """What lax writes for precision=None (direct lowerings decline when jax's default
  matmul precision is set)."""
  return ir.ArrayAttr.get([hlo.PrecisionAttr.get("DEFAULT")] * 2)


class _Lax:
  """The same namespace on tracers: lax (and lax-only helpers: jnp functions are
  nested jits, whose tracing a lowering should not pay)."""

  broadcast_in_dim = staticmethod(lax.broadcast_in_dim)
  reshape = staticmethod(lambda x, shape: lax.reshape(x, tuple(shape)))
  transpose = staticmethod(lax.transpose)
  slice = staticmethod(lax.slice)
  rev = staticmethod(lax.rev)
  concatenate = staticmethod(lax.concatenate)
  dynamic_slice = staticmethod(lax.dynamic_slice)
  dynamic_update_slice = staticmethod(lax.dynamic_update_slice)
  convert_element_type = staticmethod(
    lambda x, dtype: x if x.dtype == dtype else lax.convert_element_type(x, dtype)
  )
  add, sub, mul, div, max = (staticmethod(f) for f in (lax.add, lax.sub, lax.mul, lax.div, lax.max))
  neg, exp, rsqrt, tanh, logistic, erf, erfc = (
    staticmethod(f)
    for f in (lax.neg, lax.exp, lax.rsqrt, lax.tanh, lax.logistic, lax.erf, lax.erfc)
  )
  lt, ge, select = staticmethod(lax.lt), staticmethod(lax.ge), staticmethod(lax.select)
  asarray = staticmethod(np.asarray)
  dot_general = staticmethod(lax.dot_general)

  @staticmethod
  def conv_general_dilated(
    x, w, window_strides, padding, *, rhs_dilation, dimension_numbers, feature_group_count=1
  ):
    return lax.conv_general_dilated(
      x,
      w,
      window_strides,
      padding,
      rhs_dilation=rhs_dilation,
      dimension_numbers=dimension_numbers,
      feature_group_count=feature_group_count,
    )

  @staticmethod
  def broadcast_to(x, shape):
    shape = tuple(shape)
    if tuple(x.shape) == shape:
      return x
    return lax.broadcast_in_dim(x, shape, tuple(range(len(shape) - x.ndim, len(shape))))

  @staticmethod
  def full(value, shape, dtype):
    return lax.full(tuple(shape), value, dtype)

  @staticmethod
  def full_like(x, value):
    """Keeps x's sharding (explicit-mesh operands), unlike ``full``."""
    return lax.full_like(x, value)

  @staticmethod
  def pad(x, padding_value, config):
    return lax.pad(x, np.array(padding_value, x.dtype), list(config))

  @staticmethod
  def reduce_sum(x, axes):
    return lax.reduce(x, np.array(0, x.dtype), lax.add, tuple(axes))

  @staticmethod
  def reduce_max(x, axes):
    return lax.reduce(x, np.array(_lowest(x.dtype), x.dtype), lax.max, tuple(axes))

  @staticmethod
  def reduce_window_sum(x, window, strides, padding):
    return lax.reduce_window(
      x, np.array(0, x.dtype), lax.add, tuple(window), tuple(strides), tuple(map(tuple, padding))
    )

  @staticmethod
  def reduce_window_max(x, window, strides, padding, ignore_nan=False):
    combine = _max_ignoring_nan if ignore_nan and _inexact(x.dtype) else lax.max
    return lax.reduce_window(
      x,
      np.array(_lowest(x.dtype), x.dtype),
      combine,
      tuple(window),
      tuple(strides),
      tuple(map(tuple, padding)),
    )


def _max_ignoring_nan(a, b):
  """b where it is greater or a is NaN, else a: NaN never wins over a number (a window
  of NaNs gives NaN or the initial -inf)."""
  return lax.select(lax.bitwise_or(lax.gt(b, a), lax.ne(a, a)), b, a)


#: The namespace on tracers.
LAX = _Lax()
#: The emitting namespace (stateless: it writes at MLIR's current insertion point).
_EMITTER = Emitter()


def _static(aval) -> bool:
  """Whether an aval can be emitted: integer dims, no sharding in its type."""
  if not all(type(d) is int for d in aval.shape):
    return False
  sharding = getattr(aval, "sharding", None)
  return sharding is None or sharding.mesh.empty


def direct_lowering(
  build: Callable,
  fallback: Callable,
  *,
  multiple_results: bool = False,
  declined: Callable | None = None,
):
  """The lowering rule emitting ``build(Emitter(), *args, **params)``.

  ``fallback`` (an impl with the op's signature) is lowered by tracing instead when
  an aval is symbolic or sharded or when jax's default matmul precision is set (the
  emitter writes DEFAULT precision); where ``build`` returns None, the lowering rule
  ``declined`` lowers the op (default: ``fallback`` traced). ``build``'s results are
  ``Val``s (a list of them if ``multiple_results``) of the op's output avals.
  """
  traced = mlir.lower_fun(fallback, multiple_results=multiple_results)
  declined = declined or traced

  def rule(ctx, *args, **params):
    if (
      all(_static(a) for a in (*ctx.avals_in, *ctx.avals_out))
      and jax.config.jax_default_matmul_precision is None
    ):
      vals = [Val(v, a.shape, a.dtype) for v, a in zip(args, ctx.avals_in)]
      out = build(_EMITTER, *vals, **params)
      if out is None:
        return declined(ctx, *args, **params)
      outs = out if multiple_results else [out]
      for o, a in zip(outs, ctx.avals_out):
        if o.shape != tuple(a.shape) or o.dtype != a.dtype:
          raise AssertionError(
            f"{build.__name__} emitted {o.shape} {o.dtype}, the op's output is {a.str_short()}"
          )
      return [o.value for o in outs]
    return traced(ctx, *args, **params)

  rule.build = build
  return rule


def traced(build: Callable, default: Callable | None = None) -> Callable:
  """``build`` on :data:`LAX`: an impl with the op's signature; where ``build`` returns
  None, ``default``'s result."""

  def impl(*args, **params):
    out = build(LAX, *args, **params)
    return default(*args, **params) if out is None else out

  impl.__name__ = getattr(build, "__name__", "impl")
  return impl
