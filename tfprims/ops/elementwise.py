"""Elementwise math: unary, binary (TF broadcasting), comparisons, logical, Cast.

Every op here batches with ``batching="elementwise"`` (vmap re-binds the same
``tf.*`` primitive). The derivatives that matter are written with TF ops, as
TF's own gradient functions (``tensorflow/python/ops/math_grad.py``) are, so
``jax.make_jaxpr(jax.grad(f))`` reads like TF: ``tf.Mul``, ``tf.SqrtGrad``,
``tf.TanhGrad``, ... Each TF op used linearly inside a tangent has a transpose
rule that sums the cotangent back to the operand's shape (TF broadcasting).
Where TF defines a gradient at a kink (Abs at 0, Maximum/Minimum ties,
ClipByValue at the bounds, Pow's exponent at x <= 0) the rules follow TF.

Semantics chosen where TF raises at run time or is platform-dependent (integer
division by zero, float->int casts of NaN/inf/out-of-range values, shift
amounts, ...) are in docs/semantics/elementwise.md.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax
from jax.interpreters import ad

from tfprims.core import define_op, get_op
from tfprims.rules import elementwise_batching, unbroadcast
from tfprims.dtypes import canonical_dtype

U = ad.is_undefined_primal

# dtype groups (names as in tfprims.testing.strategies), per TF's CPU kernels.
F = ("float16", "bfloat16", "float32", "float64")
C = ("complex64", "complex128")
SI = ("int8", "int16", "int32", "int64")
UI = ("uint8", "uint16", "uint32", "uint64")
I = SI + UI
ALL = F + I + C + ("bool",)

_BOOL_OUT = "boolean output: not differentiable"
_INT_ONLY = "integer/boolean op: not differentiable"
_NO_TF_GRAD = "TF registers no gradient for this op"
_EW = dict(family="elementwise", batching="elementwise")


# ---------------------------------------------------------------------------
# Rule helpers.


def _shape(x):
  return tuple(x.aval.shape) if U(x) else tuple(jnp.shape(x))


def _dtype(x):
  return np.dtype(x.aval.dtype) if U(x) else np.dtype(jnp.result_type(x))


def _kind(dtype) -> str:
  """numpy's dtype kind, with bfloat16 (kind 'V' in numpy) as 'f'."""
  dtype = np.dtype(dtype)
  return "f" if dtype.name == "bfloat16" else dtype.kind


def _is_complex(x) -> bool:
  return _dtype(x).kind == "c"


def _const(value, like):
  """A constant of ``like``'s dtype (shows as a typed literal in jaxprs)."""
  return np.array(value, dtype=_dtype(like))


def _zero_tangent(out):
  return ad.Zero(jax.typeof(out).to_tangent_aval())


def _no_grad(op_type: str):
  """JVP of an op with zero derivative (TF: no gradient / ``None``)."""
  def rule(primals, tangents, **params):
    out = get_op(op_type)(*primals, **params)
    return out, _zero_tangent(out)
  return rule


def _unary_out_jvp(op_type: str, tangent_fn):
  """Full JVP rule of a unary op whose derivative is written with its output."""
  def rule(primals, tangents, **params):
    (x,), (t,) = primals, tangents
    y = get_op(op_type)(x, **params)
    if type(t) is ad.Zero:
      return y, _zero_tangent(y)
    return y, tangent_fn(t, y, x, **params)
  return rule


def _derived_tangent(impl, primals, tangents):
  """The tangent of ``impl`` by ``jax.jvp`` (for the dtypes a TF-named rule skips)."""
  tangents = [ad.instantiate_zeros(t) for t in tangents]
  return jax.jvp(impl, tuple(primals), tuple(tangents))[1]


def _to_out(t, *operands):
  """A tangent of one operand, broadcast to the output shape (plumbing only)."""
  shape = jnp.broadcast_shapes(*(_shape(o) for o in operands))
  return t if tuple(t.shape) == shape else jnp.broadcast_to(t, shape)


def _mask(pred, like):
  """A boolean TF tensor as 0/1 of ``like``'s dtype (TF: ``cast(pred, dtype)``)."""
  return Cast(pred, DstT=_dtype(like), Truncate=False)


def _binary_linear_x(op_name):
  """Transpose of an op linear in its first operand only (``Div(ct, y)``...)."""
  def rule(ct, x, y, **params):
    assert U(x) and not U(y)
    return [unbroadcast(get_op(op_name)(ct, y, **params), _shape(x)), None]
  return rule


def _tf_sum_last(x):
  """``Sum(x, axis=-1, keep_dims=True)`` with TF's Sum when it is registered."""
  try:
    op = get_op("Sum")
  except KeyError:
    return jnp.sum(x, axis=-1, keepdims=True)
  operands, params = op.prepare(
      {"input": x, "reduction_indices": np.array(jnp.ndim(x) - 1, np.int32)},
      {"keep_dims": True})
  return op(*operands, **params)


# ---------------------------------------------------------------------------
# Spec helpers (Hypothesis is imported by ``st`` only when a spec is built).


_COMPLEX_BOUND = 1e4
_TIES = {"f": [0.0, -0.0, 1.0, -1.0, 2.0, 0.5, np.nan, np.inf, -np.inf],
         "c": [0j, 0.5 + 0j, -0.5j, 1 + 1j, -2 + 0.5j],
         "i": [0, 1, -1, 2, -2, 3], "u": [0, 1, 2, 3], "b": [False, True]}


def _array(st, draw, dtype, shape, *, lo=None, hi=None, int_lo=None, int_hi=None,
           wide=2**31 - 1, cbound=None, cnonzero=False, special=True, nonzero=False,
           finite=False, ties=False):
  """One drawn array of ``dtype`` and ``shape``.

  Floats include NaN/±inf/-0.0/subnormals unless bounded (``lo``/``hi``) or
  ``finite``; float64/complex128 are drawn from float32 values (x64 off rounds
  them to 32 bits anyway). Integers are bounded by ``int_lo``/``int_hi``;
  64-bit ones also by ``±wide`` (x64 off computes in 32 bits, so 64-bit results
  must fit in 32 bits). Complex components are finite, within ``±cbound``
  (default 1e4) and without -0.0: TF's std::complex kernels and XLA's differ
  on non-finite components, overflow (naive |z|) and which side of a branch
  cut a signed zero lands on, so components are never 0 either (except in
  ``ties``); ``cnonzero`` avoids complex 0 (complex division by
  zero: TF nan+nanj, XLA inf+nanj). float16 subnormals are flushed to ±0 (XLA's
  vectorised CPU code flushes them in some ops). ``ties`` draws from a few
  values (ties, NaN, ±inf).
  """
  if ties:
    values = _TIES[_kind(dtype)]
    if finite:
      values = [v for v in values if np.isfinite(v)]
    size = int(np.prod(shape))
    vals = draw(st.lists(st.sampled_from(values), min_size=size, max_size=size))
    x = np.array(vals, dtype=np.complex64 if _kind(dtype) == "c" else
                 np.float32 if _kind(dtype) == "f" else None).reshape(shape)
    if _kind(dtype) == "u":
      x = x.astype(np.int64)
    x = x.astype(dtype)
  elif _kind(dtype) in "iu":
    kw = {}
    lo_i, hi_i = int_lo, int_hi
    if dtype.itemsize == 8:
      lo_i = max(-wide if _kind(dtype) == "i" else 0, lo_i if lo_i is not None else -wide)
      hi_i = min(wide, hi_i if hi_i is not None else wide)
    if lo_i is not None:
      kw["min_value"] = lo_i
    if hi_i is not None:
      kw["max_value"] = hi_i
    x = draw(st.arrays(dtype, shape, special=special, **kw))
  elif _kind(dtype) == "b":
    x = draw(st.arrays(dtype, shape))
  else:
    draw_dtype = {"float64": np.dtype("float32"),
                  "complex128": np.dtype("complex64")}.get(dtype.name, dtype)
    kw = {}
    if _kind(dtype) == "c":
      bound = _COMPLEX_BOUND if cbound is None else cbound
      lo = -bound if lo is None else lo
      hi = bound if hi is None else hi
    if lo is not None:
      kw["min_value"] = lo
    if hi is not None:
      kw["max_value"] = hi
    if finite:
      kw["allow_nan"], kw["allow_inf"] = False, False
    x = draw(st.arrays(draw_dtype, shape, special=special and _kind(dtype) != "c",
                       **kw)).astype(dtype)
    if dtype.name == "float16":
      # XLA's vectorised CPU code flushes float16 subnormals in some ops (a
      # division's result then depends on the array's size); TF does not.
      tiny = np.finfo(np.float16).tiny
      x = np.where(np.abs(x) < tiny, np.copysign(np.float16(0), x), x).astype(dtype)
  if _kind(dtype) == "c" and not ties:
    # No zero components: on branch cuts (Sqrt/Log of negative reals, Asin of
    # reals > 1...) the side taken depends on the sign of a zero imaginary part,
    # which std::complex and XLA treat differently.
    x = (np.where(x.real == 0, 0.25, x.real) + 1j * np.where(x.imag == 0, 0.25, x.imag))
    x = x.astype(dtype)
  if nonzero or (cnonzero and _kind(dtype) == "c"):
    x = np.where(x == 0, np.ones((), dtype), x).astype(dtype)
  return x


def _calls(st, arg_names, dtype_names, *, same_shape=False, attrs=None,
           per_arg=None, tie_prob=True, **array_kw):
  """Calls of an elementwise op: every input of one dtype drawn from
  ``dtype_names``, shapes mutually broadcastable (or equal); ``per_arg`` gives
  extra ``_array`` kwargs per input; ``attrs`` maps attr name -> a strategy, a
  value, or a function of the dtype returning one. Some draws use few distinct
  values (ties, NaN, ±inf) when ``tie_prob``."""
  per_arg = per_arg or {}

  @st.composite
  def draw(draw):
    dtype = draw(st.dtypes(dtype_names))
    if same_shape:
      shape = draw(st.shapes())
      shapes = [shape] * len(arg_names)
    else:
      shapes = draw(st.broadcastable_shapes(len(arg_names)))
    ties = tie_prob and draw(st.integers(0, 3)) == 0
    out = {}
    for name, shape in zip(arg_names, shapes):
      kw = dict(array_kw)
      kw.update(per_arg.get(name, {}))
      if ties and not {"lo", "hi", "int_lo", "int_hi"} & set(kw):
        kw["ties"] = True
      out[name] = _array(st, draw, dtype, shape, **kw)
    for name, value in (attrs or {}).items():
      if callable(value) and not hasattr(value, "example"):
        value = value(dtype)
      out[name] = draw(value) if hasattr(value, "example") else value
    return out
  return draw()


# Complex products round a - b of two products (cancellation): the runner
# compares components, so a small component of a large result needs more room.
_CPLX_MUL_RTOL = {"complex64": 1e-4}


def _unary_spec(st, dtype_names, arg="x", **kw):
  return _calls(st, (arg,), dtype_names, **kw)


def _binary_spec(st, dtype_names, args=("x", "y"), **kw):
  return _calls(st, args, dtype_names, **kw)


# ---------------------------------------------------------------------------
# Unary math.

Neg = define_op(
    "Neg", jnp.negative, **_EW, linear=True, transpose=lambda ct, x: [Neg(ct)],
    spec=lambda st: st.Spec(_unary_spec(st, F + SI + C)))

Abs = define_op(
    "Abs", jnp.abs, **_EW,
    jvp=(lambda t, x: Mul(t, Sign(x)),),   # TF: grad * sign(x), so 0 at x == 0
    spec=lambda st: st.Spec(_unary_spec(st, F + SI)))

Sign = define_op(
    "Sign", jnp.sign, **_EW, jvp=_no_grad("Sign"),
    spec=lambda st: st.Spec(_unary_spec(st, F + SI + C)))

Square = define_op(
    "Square", lambda x: x * x, **_EW,
    jvp=(lambda t, x: Mul(t, Mul(x, _const(2, x))),),
    spec=lambda st: st.Spec(_unary_spec(st, F + I + C, wide=2**15), rtol=_CPLX_MUL_RTOL))

Sqrt = define_op(
    "Sqrt", jnp.sqrt, **_EW,
    # TF's SqrtGrad kernel conjugates y for complex types; a JVP must not.
    jvp=_unary_out_jvp("Sqrt", lambda t, y, x: SqrtGrad(Conj(y) if _is_complex(y) else y, t)),
    spec=lambda st: st.Spec(_unary_spec(st, F + C, cnonzero=True)))

Rsqrt = define_op(
    "Rsqrt", lax.rsqrt, **_EW,
    jvp=_unary_out_jvp("Rsqrt", lambda t, y, x: RsqrtGrad(Conj(y) if _is_complex(y) else y, t)),
    spec=lambda st: st.Spec(_unary_spec(st, F + C, cnonzero=True)))

Exp = define_op(
    "Exp", jnp.exp, **_EW,
    jvp=_unary_out_jvp("Exp", lambda t, y, x: Mul(t, y)),
    spec=lambda st: st.Spec(_unary_spec(st, F + C, cbound=30)))

Expm1 = define_op(
    "Expm1", jnp.expm1, **_EW,
    jvp=(lambda t, x: Mul(t, Exp(x)),),
    spec=lambda st: st.Spec(_unary_spec(st, F + C, cbound=30)))

Log = define_op(
    "Log", jnp.log, **_EW,
    jvp=(lambda t, x: Mul(t, Reciprocal(x)),),
    spec=lambda st: st.Spec(_unary_spec(st, F + C, cnonzero=True)))

Log1p = define_op(
    "Log1p", jnp.log1p, **_EW,
    jvp=(lambda t, x: Mul(t, Reciprocal(AddV2(_const(1, x), x))),),
    spec=lambda st: st.Spec(_unary_spec(st, F + C)))

Sin = define_op(
    "Sin", jnp.sin, **_EW,
    jvp=(lambda t, x: Mul(t, Cos(x)),),
    spec=lambda st: st.Spec(_unary_spec(st, F + C, cbound=30)))

Cos = define_op(
    "Cos", jnp.cos, **_EW,
    jvp=(lambda t, x: Neg(Mul(t, Sin(x))),),
    spec=lambda st: st.Spec(_unary_spec(st, F + C, cbound=30)))

Tan = define_op(
    "Tan", jnp.tan, **_EW,
    jvp=(lambda t, x: Mul(t, Square(Reciprocal(Cos(x)))),),
    spec=lambda st: st.Spec(_unary_spec(st, F + C, cbound=30)))


def _one_minus_square(x):
  return Sub(_const(1, x), Square(x))


Asin = define_op(
    "Asin", jnp.arcsin, **_EW,
    jvp=(lambda t, x: Mul(t, Reciprocal(Sqrt(_one_minus_square(x)))),),
    spec=lambda st: st.Spec(_unary_spec(st, F + C)))

Acos = define_op(
    "Acos", jnp.arccos, **_EW,
    jvp=(lambda t, x: Mul(t, Neg(Reciprocal(Sqrt(_one_minus_square(x))))),),
    spec=lambda st: st.Spec(_unary_spec(st, F + C)))

Atan = define_op(
    "Atan", jnp.arctan, **_EW,
    jvp=(lambda t, x: Mul(t, Reciprocal(AddV2(_const(1, x), Square(x)))),),
    spec=lambda st: st.Spec(_unary_spec(st, F + C)))

Sinh = define_op(
    "Sinh", jnp.sinh, **_EW,
    jvp=(lambda t, x: Mul(t, Cosh(x)),),
    spec=lambda st: st.Spec(_unary_spec(st, F + C, cbound=30)))

Cosh = define_op(
    "Cosh", jnp.cosh, **_EW,
    jvp=(lambda t, x: Mul(t, Sinh(x)),),
    spec=lambda st: st.Spec(_unary_spec(st, F + C, cbound=30)))

Tanh = define_op(
    "Tanh", jnp.tanh, **_EW,
    jvp=_unary_out_jvp("Tanh", lambda t, y, x: TanhGrad(y, t)),
    spec=lambda st: st.Spec(_unary_spec(st, F + C, cbound=30)))

Asinh = define_op(
    "Asinh", jnp.arcsinh, **_EW,
    jvp=_unary_out_jvp("Asinh", lambda t, y, x: Div(t, Cosh(y))),
    spec=lambda st: st.Spec(_unary_spec(st, F + C)))

Acosh = define_op(
    "Acosh", jnp.arccosh, **_EW,
    jvp=_unary_out_jvp("Acosh", lambda t, y, x: Div(t, Sinh(y))),
    spec=lambda st: st.Spec(_unary_spec(st, F + C)))

Atanh = define_op(
    "Atanh", jnp.arctanh, **_EW,
    jvp=(lambda t, x: Mul(t, Reciprocal(_one_minus_square(x))),),
    spec=lambda st: st.Spec(_unary_spec(st, F + C)))

Floor = define_op(
    "Floor", jnp.floor, **_EW, jvp=_no_grad("Floor"),
    spec=lambda st: st.Spec(_unary_spec(st, F)))

Ceil = define_op(
    "Ceil", jnp.ceil, **_EW, jvp=_no_grad("Ceil"),
    spec=lambda st: st.Spec(_unary_spec(st, F)))

# Half to even, like TF. Integer inputs are returned unchanged (tf.round does
# that in Python; TF 2.21's CPU kernel returns 0 for them, a bug not copied).
Round = define_op(
    "Round", lambda x: x if jnp.issubdtype(x.dtype, jnp.integer) else jnp.round(x),
    **_EW, jvp=_no_grad("Round"),
    spec=lambda st: st.Spec(_unary_spec(st, F), note="integer inputs: identity (TF's kernel gives 0)"))

Rint = define_op(
    "Rint", jnp.rint, **_EW, jvp=_no_grad("Rint"),
    spec=lambda st: st.Spec(_unary_spec(st, ("float32", "float64"))))


def _reciprocal(x):
  return lax.div(jnp.ones((), x.dtype), x)


Reciprocal = define_op(
    "Reciprocal", _reciprocal, **_EW,
    jvp=_unary_out_jvp("Reciprocal",
                       lambda t, y, x: ReciprocalGrad(Conj(y) if _is_complex(y) else y, t)),
    spec=lambda st: st.Spec(_unary_spec(st, F + C, cnonzero=True)))

Inv = define_op(
    "Inv", _reciprocal, **_EW,
    jvp=_unary_out_jvp("Inv", lambda t, y, x: InvGrad(Conj(y) if _is_complex(y) else y, t)),
    spec=lambda st: st.Spec(_unary_spec(st, F + C, cnonzero=True)))

_TWO_OVER_SQRT_PI = 2.0 / np.sqrt(np.pi)

# TF's CPU float64 Erf (Eigen's double erf) is NaN from here on (and at ±inf);
# tfprims gives ±1, as C99 erf and TF's other dtypes do (docs/semantics/elementwise.md).
_TF_ERF_F64_NAN_FROM = 1.3407807830046643e+154


def _erf_calls(st):
  def off_tf_nan_region(call):
    x = call["x"]
    if x.dtype == np.float64:
      x = np.where(np.abs(x) >= _TF_ERF_F64_NAN_FROM, np.copysign(1e30, x), x)
    return {"x": x}
  return _unary_spec(st, F).map(off_tf_nan_region)


Erf = define_op(
    "Erf", jax.scipy.special.erf, **_EW,
    jvp=(lambda t, x: Mul(t, Mul(_const(_TWO_OVER_SQRT_PI, x), Exp(Neg(Square(x))))),),
    spec=lambda st: st.Spec(_erf_calls(st), note="float64 |x| >= 1.34e154 (±inf too): TF's "
                            "CPU kernel gives NaN, tfprims ±1 (not drawn)"))

Erfc = define_op(
    "Erfc", jax.scipy.special.erfc, **_EW,
    jvp=(lambda t, x: Mul(t, Mul(_const(-_TWO_OVER_SQRT_PI, x), Exp(Neg(Square(x))))),),
    spec=lambda st: st.Spec(_unary_spec(st, F)))

Lgamma = define_op(
    "Lgamma", lax.lgamma, **_EW,
    jvp=(lambda t, x: Mul(t, Digamma(x)),),
    spec=lambda st: st.Spec(_unary_spec(st, ("float16", "float32", "float64")),
                            rtol=1e-3, atol=1e-3))

Digamma = define_op(
    "Digamma", lax.digamma, **_EW,   # derivative: polygamma(1, x) (derived)
    spec=lambda st: st.Spec(_unary_spec(st, ("float16", "float32", "float64")),
                            rtol=1e-3, atol=1e-3))

IsNan = define_op(
    "IsNan", jnp.isnan, **_EW, jvp=_no_grad("IsNan"),
    spec=lambda st: st.Spec(_unary_spec(st, F), skip={"jvp": _BOOL_OUT, "vjp": _BOOL_OUT}))

IsInf = define_op(
    "IsInf", jnp.isinf, **_EW, jvp=_no_grad("IsInf"),
    spec=lambda st: st.Spec(_unary_spec(st, F), skip={"jvp": _BOOL_OUT, "vjp": _BOOL_OUT}))

IsFinite = define_op(
    "IsFinite", jnp.isfinite, **_EW, jvp=_no_grad("IsFinite"),
    spec=lambda st: st.Spec(_unary_spec(st, F), skip={"jvp": _BOOL_OUT, "vjp": _BOOL_OUT}))

LogicalNot = define_op(
    "LogicalNot", jnp.logical_not, **_EW, jvp=_no_grad("LogicalNot"),
    spec=lambda st: st.Spec(_unary_spec(st, ("bool",)),
                            skip={"jvp": _INT_ONLY, "vjp": _INT_ONLY}))

Invert = define_op(
    "Invert", lax.bitwise_not, **_EW, jvp=_no_grad("Invert"),
    spec=lambda st: st.Spec(_unary_spec(st, I), skip={"jvp": _INT_ONLY, "vjp": _INT_ONLY}))


def _complex_of(ct, like):
  """A real cotangent as a complex value of ``like``'s dtype (TF: Cast)."""
  return Cast(ct, DstT=_dtype(like), Truncate=False)


Conj = define_op(
    "Conj", jnp.conj, **_EW, linear=True, transpose=lambda ct, x: [Conj(ct)],
    spec=lambda st: st.Spec(_unary_spec(st, C, arg="input")))

# Real/Imag/Angle/ComplexAbs: ``Tout`` is decided by the input (complex64 ->
# float32, complex128 -> float64 are the only CPU kernels), so it is not kept.
# JAX's cotangent convention for C -> R maps: real^T(ct) = ct + 0j,
# imag^T(ct) = -i ct (the pairing is Re(u * v), without conjugation).
Real = define_op(
    "Real", jnp.real, **_EW, linear=True,
    transpose=lambda ct, x: [_complex_of(ct, x)],
    spec=lambda st: st.Spec(_unary_spec(st, C, arg="input", attrs={"Tout": _tout})))

Imag = define_op(
    "Imag", jnp.imag, **_EW, linear=True,
    transpose=lambda ct, x: [Mul(_complex_of(ct, x), _const(-1j, x))],
    spec=lambda st: st.Spec(_unary_spec(st, C, arg="input", attrs={"Tout": _tout})))

Angle = define_op(
    "Angle", jnp.angle, **_EW,
    spec=lambda st: st.Spec(_unary_spec(st, C, arg="input", attrs={"Tout": _tout},
                                        cnonzero=True)))


def _complex_abs_jvp(primals, tangents):
  # TF: div_no_nan(complex(grad, 0) * x, complex(|x|, 0)): 0 at x == 0.
  # As a JVP of the real-valued |x|: Re(conj(x) t) / |x|, and 0 at x == 0.
  (x,), (t,) = primals, tangents
  y = ComplexAbs(x)
  if type(t) is ad.Zero:
    return y, _zero_tangent(y)
  return y, DivNoNan(Real(Mul(Conj(x), t)), y)


ComplexAbs = define_op(
    "ComplexAbs", jnp.abs, **_EW, jvp=_complex_abs_jvp,
    spec=lambda st: st.Spec(_unary_spec(st, C, arg="x", attrs={"Tout": _tout})))


def _tout(dtype):
  return np.dtype(np.float64 if dtype == np.complex128 else np.float32)


# ---------------------------------------------------------------------------
# Binary arithmetic (TF broadcasting). Transposes sum back to operand shapes.


def _bcast(*xs):
  shape = jnp.broadcast_shapes(*(jnp.shape(x) for x in xs))
  return [jnp.broadcast_to(x, shape) for x in xs]


def _add_transpose(ct, x, y):
  return [unbroadcast(ct, _shape(x)) if U(x) else None,
          unbroadcast(ct, _shape(y)) if U(y) else None]


_ARITH = F + I + C

AddV2 = define_op(
    "AddV2", jnp.add, **_EW, linear=True, transpose=_add_transpose,
    spec=lambda st: st.Spec(_binary_spec(st, _ARITH, wide=2**30)))

Add = define_op(
    "Add", jnp.add, **_EW, linear=True, transpose=_add_transpose,
    spec=lambda st: st.Spec(_binary_spec(
        st, F + SI + ("uint8",) + C, wide=2**30)))

Sub = define_op(
    "Sub", jnp.subtract, **_EW, linear=True,
    transpose=lambda ct, x, y: [unbroadcast(ct, _shape(x)) if U(x) else None,
                                unbroadcast(Neg(ct), _shape(y)) if U(y) else None],
    spec=lambda st: st.Spec(_binary_spec(st, _ARITH, wide=2**30)))


def _mul_transpose(ct, x, y):
  return [unbroadcast(Mul(ct, y), _shape(x)) if U(x) else None,
          unbroadcast(Mul(x, ct), _shape(y)) if U(y) else None]


Mul = define_op(
    "Mul", jnp.multiply, **_EW,
    jvp=(lambda t, x, y: Mul(t, y), lambda t, x, y: Mul(x, t)),
    transpose=_mul_transpose,
    spec=lambda st: st.Spec(_binary_spec(st, _ARITH, wide=2**15), rtol=_CPLX_MUL_RTOL))


def _div(x, y):
  """Integer Div truncates (C semantics); float/complex Div is x / y."""
  x, y = _bcast(x, y)
  return lax.div(x, y)


_DIV_INT_NONZERO = "integer division by zero raises in TF"


def _div_jvps(op_name):
  def tx(t, x, y):
    return get_op(op_name)(t, y)

  def ty(t, x, y):
    op = get_op(op_name)
    return Mul(t, op(op(Neg(x), y), y))   # TF: grad * (-x / y / y)
  return (tx, ty)


Div = define_op(
    "Div", _div, **_EW, jvp=_div_jvps("Div"), transpose=_binary_linear_x("Div"),
    spec=lambda st: st.Spec(_binary_spec(st, _ARITH, per_arg={"y": {"nonzero": True, "cnonzero": True}}),
                            rtol=_CPLX_MUL_RTOL))

RealDiv = define_op(
    "RealDiv", _div, **_EW, jvp=_div_jvps("RealDiv"), transpose=_binary_linear_x("RealDiv"),
    spec=lambda st: st.Spec(_binary_spec(st, F + C, per_arg={"y": {"cnonzero": True}}),
                            rtol=_CPLX_MUL_RTOL))


def _div_no_nan(x, y):
  x, y = _bcast(x, y)
  return jnp.where(y == 0, jnp.zeros((), x.dtype), lax.div(x, y))


DivNoNan = define_op(
    "DivNoNan", _div_no_nan, **_EW, jvp=_div_jvps("DivNoNan"),
    transpose=_binary_linear_x("DivNoNan"),
    spec=lambda st: st.Spec(_binary_spec(st, F + C)))


def _mul_no_nan(x, y):
  x, y = _bcast(x, y)
  return jnp.where(y == 0, jnp.zeros((), x.dtype), x * y)


def _mul_no_nan_transpose(ct, x, y):
  return [unbroadcast(MulNoNan(ct, y), _shape(x)) if U(x) else None,
          unbroadcast(MulNoNan(x, ct), _shape(y)) if U(y) else None]


# TF's gradients of MulNoNan, SquaredDifference, Xdivy, Xlogy and Xlog1py omit
# the conjugations its complex convention needs, so for complex inputs they are
# not derivatives of the op; the property specs draw real dtypes only and
# tests/test_ops_elementwise.py checks complex values and derivatives.
_CPLX_GRAD_NOTE = ("complex inputs: values and derivatives are tested in "
                   "tests/test_ops_elementwise.py (TF's complex gradient lacks conj)")

MulNoNan = define_op(
    "MulNoNan", _mul_no_nan, **_EW,
    jvp=(lambda t, x, y: MulNoNan(t, y), lambda t, x, y: MulNoNan(x, t)),
    transpose=_mul_no_nan_transpose,
    spec=lambda st: st.Spec(_binary_spec(st, F), note=_CPLX_GRAD_NOTE))


def _int_floor_div(x, y):
  q = lax.div(x, y)
  if jnp.issubdtype(x.dtype, jnp.unsignedinteger):
    return q
  r = lax.rem(x, y)
  adjust = (r != 0) & ((r < 0) != (y < 0)) & (y != 0)    # x // 0 stays -1
  return jnp.where(adjust, q - jnp.ones((), q.dtype), q)


def _floor_div(x, y):
  x, y = _bcast(x, y)
  if jnp.issubdtype(x.dtype, jnp.integer):
    return _int_floor_div(x, y)
  return jnp.floor(lax.div(x, y))   # TF: floor(x / y), not numpy's divmod


def _floor_mod(x, y):
  x, y = _bcast(x, y)
  r = lax.rem(x, y)
  if jnp.issubdtype(x.dtype, jnp.unsignedinteger):
    return r
  # TF: trunc_mod != 0 && ((y < 0) != (trunc_mod < 0)) ? trunc_mod + y : trunc_mod
  adjust = (r != 0) & ((y < 0) != (r < 0))
  return jnp.where(adjust, r + y, r)


def _truncate_div(x, y):
  x, y = _bcast(x, y)
  if jnp.issubdtype(x.dtype, jnp.integer):
    return lax.div(x, y)
  return jnp.trunc(lax.div(x, y))


def _truncate_mod(x, y):
  x, y = _bcast(x, y)
  return lax.rem(x, y)


FloorDiv = define_op(
    "FloorDiv", _floor_div, **_EW, jvp=_no_grad("FloorDiv"),
    spec=lambda st: st.Spec(_binary_spec(st, F + I, per_arg={"y": {"nonzero": True}})))


def _floor_mod_jvp(primals, tangents):
  (x, y), (tx, ty) = primals, tangents
  out = FloorMod(x, y)
  tangent = None
  if type(tx) is not ad.Zero:
    tangent = _to_out(tx, x, y)
  if type(ty) is not ad.Zero:
    t = Mul(ty, Neg(FloorDiv(x, y)))    # TF: grad * -floor_div(x, y)
    tangent = t if tangent is None else AddV2(tangent, t)
  return out, _zero_tangent(out) if tangent is None else tangent


FloorMod = define_op(
    "FloorMod", _floor_mod, **_EW, jvp=_floor_mod_jvp,
    spec=lambda st: st.Spec(_binary_spec(st, F + I, per_arg={"y": {"nonzero": True}})))

TruncateDiv = define_op(
    "TruncateDiv", _truncate_div, **_EW, jvp=_no_grad("TruncateDiv"),
    spec=lambda st: st.Spec(_binary_spec(st, F + I, per_arg={"y": {"nonzero": True}})))

_MOD_TYPES = ("float32", "float64", "int32", "int64")

TruncateMod = define_op(
    "TruncateMod", _truncate_mod, **_EW,
    spec=lambda st: st.Spec(_binary_spec(st, _MOD_TYPES, per_arg={"y": {"nonzero": True}}),
                            skip={"jvp": _NO_TF_GRAD, "vjp": _NO_TF_GRAD}))

Mod = define_op(
    "Mod", _truncate_mod, **_EW,
    spec=lambda st: st.Spec(_binary_spec(st, _MOD_TYPES, per_arg={"y": {"nonzero": True}}),
                            skip={"jvp": _NO_TF_GRAD, "vjp": _NO_TF_GRAD}))


def _pow(x, y):
  x, y = _bcast(x, y)
  if jnp.issubdtype(x.dtype, jnp.integer):
    # Wraps on overflow like TF. y < 0 raises in TF; here it gives 1 / x**-y
    # truncated toward zero (1 and -1 keep magnitude 1, everything else 0).
    one = jnp.ones((), x.dtype)
    neg = y < 0
    p = jnp.power(x, jnp.where(neg, jnp.zeros((), y.dtype), y))
    odd = (y & 1) != 0
    inv = jnp.where(x == one, one,
                    jnp.where(x == -one, jnp.where(odd, -one, one), jnp.zeros((), x.dtype)))
    return jnp.where(neg, inv, p)
  return lax.pow(x, y)


def _pow_jvp(primals, tangents):
  (x, y), (tx, ty) = primals, tangents
  z = Pow(x, y)
  tangent = None
  if type(tx) is not ad.Zero:
    # TF: grad * y * pow(x, y - 1)
    tangent = Mul(tx, Mul(y, Pow(x, Sub(y, _const(1, y)))))
  if type(ty) is not ad.Zero:
    # TF: grad * z * log(x) where x > 0 (x != 0 for complex), else 0.
    pred = (NotEqual(x, _const(0, x), incompatible_shape_error=True) if _is_complex(x)
            else Greater(x, _const(0, x)))
    m = _mask(pred, x)
    safe_x = AddV2(MulNoNan(x, m), Sub(_const(1, x), m))
    log_x = MulNoNan(Log(safe_x), m)
    t = Mul(ty, Mul(z, log_x))
    tangent = t if tangent is None else AddV2(tangent, t)
  return z, _zero_tangent(z) if tangent is None else tangent


Pow = define_op(
    "Pow", _pow, **_EW, jvp=_pow_jvp,
    spec=lambda st: st.Spec(_binary_spec(
        st, F + SI + C, per_arg={"x": {"int_lo": -6, "int_hi": 6, "cbound": 10, "cnonzero": True},
                                 "y": {"int_lo": 0, "int_hi": 11, "cbound": 5}}),
        # complex pow = exp(y log x): a small component of a large result
        # carries the large one's absolute error.
        rtol={"complex64": 1e-4}, atol={"complex64": 1e-4}))


def _chooser_jvp(op_type, selector):
  """Maximum/Minimum: the gradient goes to x where selector(x, y), else to y."""
  def rule(primals, tangents):
    (x, y), (tx, ty) = primals, tangents
    out = get_op(op_type)(x, y)
    pick_x = selector(x, y)
    tangent = None
    if type(tx) is not ad.Zero:
      tangent = Mul(tx, _mask(pick_x, out))
    if type(ty) is not ad.Zero:
      t = Mul(ty, _mask(LogicalNot(pick_x), out))
      tangent = t if tangent is None else AddV2(tangent, t)
    return out, _zero_tangent(out) if tangent is None else tangent
  return rule


_ORDERED = F + I

Maximum = define_op(
    "Maximum", jnp.maximum, **_EW,
    jvp=_chooser_jvp("Maximum", lambda x, y: GreaterEqual(x, y)),   # ties go to x
    spec=lambda st: st.Spec(_binary_spec(st, _ORDERED)))

Minimum = define_op(
    "Minimum", jnp.minimum, **_EW,
    jvp=_chooser_jvp("Minimum", lambda x, y: LessEqual(x, y)),
    spec=lambda st: st.Spec(_binary_spec(st, _ORDERED)))


def _squared_difference(x, y):
  d = jnp.subtract(x, y)
  return d * jnp.conj(d) if jnp.iscomplexobj(d) else d * d


def _sqdiff_jvp(primals, tangents):
  (x, y), (tx, ty) = primals, tangents
  out = SquaredDifference(x, y)
  d = Sub(x, y)
  if _is_complex(d):
    # d conj(d): tangent t conj(d) + d conj(t) for t = tx - ty.
    def part(t):
      return AddV2(Mul(t, Conj(d)), Mul(d, Conj(t)))
  else:
    two_d = Mul(_const(2, d), d)    # TF: 2 * grad * (x - y)

    def part(t):
      return Mul(t, two_d)
  tangent = None
  if type(tx) is not ad.Zero:
    tangent = part(tx)
  if type(ty) is not ad.Zero:
    t = Neg(part(ty))
    tangent = t if tangent is None else AddV2(tangent, t)
  return out, _zero_tangent(out) if tangent is None else tangent


SquaredDifference = define_op(
    "SquaredDifference", _squared_difference, **_EW, jvp=_sqdiff_jvp,
    # bfloat16/float16 cotangents summed over broadcast axes cancel (terms of
    # ±200 from inputs clipped to ±100): XLA keeps float32 between fused ops.
    spec=lambda st: st.Spec(_binary_spec(st, F + ("int32", "int64"), wide=2**14),
                            grad_atol={"bfloat16": 2.0, "float16": 0.25},
                            note=_CPLX_GRAD_NOTE))


def _atan2_jvp(primals, tangents):
  """TF's _Atan2Grad shares ``grad / (x^2 + y^2)`` between both inputs, so its
  forward mode divides the summed numerator ``t_y x - t_x y`` once: inf, not
  inf + NaN, where ``x^2 + y^2`` underflows (float16 x = 6e-5, y = 0)."""
  (y, x), (ty, tx) = primals, tangents
  out = Atan2(y, x)
  num = None
  if type(ty) is not ad.Zero:
    num = Mul(ty, x)
  if type(tx) is not ad.Zero:
    t = Mul(tx, Neg(y))
    num = t if num is None else AddV2(num, t)
  if num is None:
    return out, _zero_tangent(out)
  return out, Div(num, AddV2(Square(x), Square(y)))


Atan2 = define_op(
    "Atan2", lambda y, x: jnp.arctan2(y, x), **_EW, jvp=_atan2_jvp,
    spec=lambda st: st.Spec(_binary_spec(st, F, args=("y", "x"))))


def _x_where_zero(x, y, fn):
  x, y = _bcast(x, y)
  return jnp.where(x == 0, jnp.zeros((), x.dtype), fn(x, y))


def _nonzero(x):
  return _mask(NotEqual(x, _const(0, x), incompatible_shape_error=True), x)


Xdivy = define_op(
    "Xdivy", lambda x, y: _x_where_zero(x, y, lax.div), **_EW,
    jvp=(lambda t, x, y: Mul(t, Xdivy(_nonzero(x), y)),
         lambda t, x, y: Mul(t, Xdivy(Neg(x), Square(y)))),
    spec=lambda st: st.Spec(_binary_spec(st, F), note=_CPLX_GRAD_NOTE))

Xlogy = define_op(
    "Xlogy", lambda x, y: _x_where_zero(x, y, lambda a, b: a * jnp.log(b)), **_EW,
    jvp=(lambda t, x, y: Mul(t, Xlogy(_nonzero(x), y)),
         lambda t, x, y: Mul(t, Xdivy(x, y))),
    spec=lambda st: st.Spec(_binary_spec(st, F), note=_CPLX_GRAD_NOTE))

Xlog1py = define_op(
    "Xlog1py", lambda x, y: _x_where_zero(x, y, lambda a, b: a * jnp.log1p(b)), **_EW,
    jvp=(lambda t, x, y: Mul(t, Xlog1py(_nonzero(x), y)),
         lambda t, x, y: Mul(t, Xdivy(x, AddV2(y, _const(1, y))))),
    spec=lambda st: st.Spec(_binary_spec(st, F), note=_CPLX_GRAD_NOTE))

# ---------------------------------------------------------------------------
# Bitwise and logical.

BitwiseAnd = define_op(
    "BitwiseAnd", jnp.bitwise_and, **_EW, jvp=_no_grad("BitwiseAnd"),
    spec=lambda st: st.Spec(_binary_spec(st, I), skip={"jvp": _INT_ONLY, "vjp": _INT_ONLY}))

BitwiseOr = define_op(
    "BitwiseOr", jnp.bitwise_or, **_EW, jvp=_no_grad("BitwiseOr"),
    spec=lambda st: st.Spec(_binary_spec(st, I), skip={"jvp": _INT_ONLY, "vjp": _INT_ONLY}))

BitwiseXor = define_op(
    "BitwiseXor", jnp.bitwise_xor, **_EW, jvp=_no_grad("BitwiseXor"),
    spec=lambda st: st.Spec(_binary_spec(st, I), skip={"jvp": _INT_ONLY, "vjp": _INT_ONLY}))


def _clamped_shift(x, y):
  """TF clamps the shift amount to [0, bits - 1] (no C undefined behaviour)."""
  x, y = _bcast(x, y)
  bits = 8 * x.dtype.itemsize
  return x, jnp.clip(y, 0, bits - 1).astype(x.dtype)


def _left_shift(x, y):
  x, y = _clamped_shift(x, y)
  return lax.shift_left(x, y)


def _right_shift(x, y):
  x, y = _clamped_shift(x, y)
  if jnp.issubdtype(x.dtype, jnp.signedinteger):
    return lax.shift_right_arithmetic(x, y)
  return lax.shift_right_logical(x, y)


def _shift_spec(st, left):
  # Shift amounts: in range, negative or >= the bit width. 64-bit values stay
  # small so that x64-off (32-bit) results equal TF's 64-bit ones.
  return _binary_spec(st, I, per_arg={"x": {"wide": 2**15},
                                      "y": {"int_lo": -70, "int_hi": 70,
                                            "wide": 15 if left else 70}})


LeftShift = define_op(
    "LeftShift", _left_shift, **_EW, jvp=_no_grad("LeftShift"),
    spec=lambda st: st.Spec(_shift_spec(st, True), skip={"jvp": _INT_ONLY, "vjp": _INT_ONLY}))

RightShift = define_op(
    "RightShift", _right_shift, **_EW, jvp=_no_grad("RightShift"),
    spec=lambda st: st.Spec(_shift_spec(st, False), skip={"jvp": _INT_ONLY, "vjp": _INT_ONLY}))

LogicalAnd = define_op(
    "LogicalAnd", jnp.logical_and, **_EW, jvp=_no_grad("LogicalAnd"),
    spec=lambda st: st.Spec(_binary_spec(st, ("bool",)),
                            skip={"jvp": _INT_ONLY, "vjp": _INT_ONLY}))

LogicalOr = define_op(
    "LogicalOr", jnp.logical_or, **_EW, jvp=_no_grad("LogicalOr"),
    spec=lambda st: st.Spec(_binary_spec(st, ("bool",)),
                            skip={"jvp": _INT_ONLY, "vjp": _INT_ONLY}))

# ---------------------------------------------------------------------------
# Comparisons.


def _broadcastable(*shapes) -> bool:
  try:
    jnp.broadcast_shapes(*shapes)
    return True
  except ValueError:
    return False


def _equality(fn, incompatible_value):
  """Equal/NotEqual: with ``incompatible_shape_error=False`` shapes that do not
  broadcast give a scalar False (Equal) / True (NotEqual), as in TF."""
  def impl(x, y, *, incompatible_shape_error=True):
    if not incompatible_shape_error and not _broadcastable(jnp.shape(x), jnp.shape(y)):
      return jnp.full((), incompatible_value, jnp.bool_)
    return fn(x, y)
  return impl


def _equality_batching(op_type, incompatible_value):
  def rule(args, dims, *, incompatible_shape_error=True):
    (x, y), (dx, dy) = args, dims
    size = x.shape[dx] if dx is not None else y.shape[dy]
    example = [tuple(s for i, s in enumerate(a.shape) if i != d) if d is not None else a.shape
               for a, d in zip(args, dims)]
    if not incompatible_shape_error and not _broadcastable(*example):
      return jnp.full((size,), incompatible_value, jnp.bool_), 0
    prim = get_op(op_type).primitive
    return elementwise_batching(prim)(args, dims,
                                      incompatible_shape_error=incompatible_shape_error)
  return rule


def _equality_spec(st):
  @st.composite
  def draw(draw):
    dtype = draw(st.dtypes(ALL))
    if draw(st.integers(0, 3)) == 0:    # maybe incompatible shapes
      sa, sb = draw(st.shapes()), draw(st.shapes())
    else:
      sa, sb = draw(st.broadcastable_shapes(2))
    flag = draw(st.booleans()) and _broadcastable(sa, sb)
    ties = draw(st.booleans())
    return {"x": _array(st, draw, dtype, sa, ties=ties),
            "y": _array(st, draw, dtype, sb, ties=ties),
            "incompatible_shape_error": flag}
  return draw()


Equal = define_op(
    "Equal", _equality(jnp.equal, False), family="elementwise",
    attrs=("incompatible_shape_error",), jvp=_no_grad("Equal"),
    batching=_equality_batching("Equal", False),
    spec=lambda st: st.Spec(_equality_spec(st), skip={"jvp": _BOOL_OUT, "vjp": _BOOL_OUT}))

NotEqual = define_op(
    "NotEqual", _equality(jnp.not_equal, True), family="elementwise",
    attrs=("incompatible_shape_error",), jvp=_no_grad("NotEqual"),
    batching=_equality_batching("NotEqual", True),
    spec=lambda st: st.Spec(_equality_spec(st), skip={"jvp": _BOOL_OUT, "vjp": _BOOL_OUT}))

Less = define_op(
    "Less", jnp.less, **_EW, jvp=_no_grad("Less"),
    spec=lambda st: st.Spec(_binary_spec(st, _ORDERED), skip={"jvp": _BOOL_OUT, "vjp": _BOOL_OUT}))

LessEqual = define_op(
    "LessEqual", jnp.less_equal, **_EW, jvp=_no_grad("LessEqual"),
    spec=lambda st: st.Spec(_binary_spec(st, _ORDERED), skip={"jvp": _BOOL_OUT, "vjp": _BOOL_OUT}))

Greater = define_op(
    "Greater", jnp.greater, **_EW, jvp=_no_grad("Greater"),
    spec=lambda st: st.Spec(_binary_spec(st, _ORDERED), skip={"jvp": _BOOL_OUT, "vjp": _BOOL_OUT}))

GreaterEqual = define_op(
    "GreaterEqual", jnp.greater_equal, **_EW, jvp=_no_grad("GreaterEqual"),
    spec=lambda st: st.Spec(_binary_spec(st, _ORDERED), skip={"jvp": _BOOL_OUT, "vjp": _BOOL_OUT}))


def _approximate_equal(x, y, *, tolerance):
  # TF's kernel compares with <= (its docs say <): |x - y| <= tolerance.
  # (tolerance is a 32-bit float attr, cast to x's dtype.)
  return jnp.abs(jnp.subtract(x, y)) <= jnp.asarray(np.float32(tolerance), x.dtype)


ApproximateEqual = define_op(
    "ApproximateEqual", _approximate_equal, **_EW, attrs=("tolerance",),
    jvp=_no_grad("ApproximateEqual"),
    spec=lambda st: st.Spec(
        _binary_spec(st, ("float32", "float64"), same_shape=True,
                     attrs={"tolerance": st.sampled_from([1e-5, 0.5, 1.0, 2.0, 0.0])}),
        skip={"jvp": _BOOL_OUT, "vjp": _BOOL_OUT}))

# ---------------------------------------------------------------------------
# Cast.

_MANTISSA = {"float64": 52, "float32": 23, "float16": 10, "bfloat16": 7,
             "complex128": 52, "complex64": 23}


def _truncate_mantissa(x, dst):
  """TF's ``Truncate=True``: zero the input's low mantissa bits that ``dst``
  cannot hold (finite values only), so the conversion rounds toward zero.
  TF does this only for float32/float64 (and complex) inputs."""
  src = np.dtype(x.dtype)
  if src.name not in ("float32", "float64", "complex64", "complex128"):
    return x
  drop = _MANTISSA[src.name] - _MANTISSA.get(np.dtype(dst).name, _MANTISSA[src.name])
  if drop <= 0:
    return x
  if _kind(src) == "c":
    return lax.complex(_truncate_mantissa(jnp.real(x), dst), _truncate_mantissa(jnp.imag(x), dst))
  uint = np.uint64 if src.itemsize == 8 else np.uint32
  mask = np.array(~((1 << drop) - 1) & np.iinfo(uint).max, uint)
  bits = lax.bitcast_convert_type(x, uint) & mask
  return jnp.where(jnp.isfinite(x), lax.bitcast_convert_type(bits, src), x)


def _float_to_int(x, dst):
  """TF (x86 CPU) float -> int: truncate toward zero. NaN, ±inf and values out
  of range give the x86 "integer indefinite" value (INT_MIN) for 32/64-bit
  signed results; unsigned 32/64-bit results wrap values in (-2^(bits-1), 0) and
  give 2^(bits-1) for the other invalid ones (TF's uint64 result; for uint32 TF
  depends on the tensor's size there); 8/16-bit results are the int32 result
  saturated to the range (TF's vectorised path; its scalar path keeps the low
  bits, so TF's result depends on the tensor's size). See the semantics doc."""
  dst = np.dtype(dst)
  if x.dtype in (jnp.float16, jnp.bfloat16):
    x = x.astype(jnp.float32)
  t = jnp.trunc(x)
  nan = jnp.isnan(x)
  bits = 8 * dst.itemsize
  if _kind(dst) == "i" and bits >= 32:
    lo, hi = -2.0 ** (bits - 1), 2.0 ** (bits - 1)
    bad = nan | (t < lo) | (t >= hi)
    return jnp.where(bad, jnp.array(np.iinfo(dst).min, dst), lax.convert_element_type(t, dst))
  if _kind(dst) == "u" and bits >= 32:
    signed = np.dtype(f"int{bits}")
    ok = (t >= 0) & (t < 2.0 ** bits)
    wrap = (t < 0) & (t > -2.0 ** (bits - 1))
    safe_t = jnp.where(ok | wrap, t, jnp.zeros((), t.dtype))
    as_unsigned = lax.convert_element_type(safe_t, dst)
    wrapped = lax.convert_element_type(lax.convert_element_type(safe_t, signed), dst)
    invalid = jnp.array(1 << (bits - 1), dst)
    return jnp.where(ok, as_unsigned, jnp.where(wrap, wrapped, invalid))
  # 8/16-bit: the int32 result, saturated.
  bad = nan | (t < -2.0 ** 31) | (t >= 2.0 ** 31)
  i32 = jnp.where(bad, jnp.array(np.iinfo(np.int32).min, np.int32),
                  lax.convert_element_type(t, np.int32))
  info = np.iinfo(dst)
  return lax.convert_element_type(jnp.clip(i32, int(info.min), int(info.max)), dst)


def _cast(x, *, DstT, Truncate=False):
  dst = canonical_dtype(DstT)
  src = np.dtype(x.dtype)
  if src == dst:
    return x
  if _kind(src) == "c" and _kind(dst) != "c":
    x, src = jnp.real(x), np.dtype(jnp.real(x).dtype)    # TF: the real part (bool too)
  if dst == np.bool_:
    return x != jnp.zeros((), src)
  if _kind(src) == "f" and _kind(dst) in "iu":
    return _float_to_int(x, dst)
  if Truncate and _kind(src) in "fc" and _kind(dst) in "fc":
    x = _truncate_mantissa(x, dst)
  return lax.convert_element_type(x, dst)


_DIFFERENTIABLE_KINDS = "fc"


def _cast_jvp(primals, tangents, *, DstT, Truncate):
  (x,), (t,) = primals, tangents
  y = Cast(x, DstT=DstT, Truncate=Truncate)
  if type(t) is ad.Zero or _kind(_dtype(x)) not in "fc" or _kind(y.dtype) not in "fc":
    return y, _zero_tangent(y)   # TF: no gradient unless both types are float/complex
  return y, Cast(t, DstT=DstT, Truncate=False)


def _cast_transpose(ct, x, *, DstT, Truncate):
  return [Cast(ct, DstT=x.aval.dtype, Truncate=False)]


def _cast_spec(st):
  @st.composite
  def draw(draw):
    src = draw(st.dtypes(ALL))
    dst = draw(st.dtypes(ALL))
    shape = draw(st.shapes())
    truncate = draw(st.booleans())
    if src.name == "float64" and truncate:
      truncate = False    # x64 off rounds float64 inputs before the cast sees them
    x = _array(st, draw, src, shape, ties=draw(st.integers(0, 3)) == 0)
    if _kind(src) in "fc" and _kind(dst) in "iu":
      info = np.iinfo(dst)
      # TF's result is well defined only when trunc(x) fits dst (or for NaN/inf/
      # out-of-range values converted to int32/int64/uint64); 64-bit results
      # must also fit the 32-bit canonical type when x64 is off.
      # (TF's x86 result: INT_MIN for int32/int64, 2^63 for uint64); 64-bit
      # results must also fit the 32-bit canonical type when x64 is off.
      defined = dst.name == "int32" or (dst.name in ("int64", "uint64") and
                                         jax.config.jax_enable_x64)
      if not defined or draw(st.booleans()):
        lo = int(info.min) if info.bits < 64 else -2**31 + 1
        hi = int(info.max) if info.bits < 64 else 2**31 - 1
        if dst.name == "uint32":
          lo = -2**31 + 1      # TF wraps negative values into uint32
        t = np.trunc(np.real(x).astype(np.float64))
        x = np.where((t >= lo) & (t <= hi), x, np.zeros((), src)).astype(src)
    return {"x": x, "DstT": dst, "Truncate": truncate}
  return draw()


Cast = define_op(
    "Cast", _cast, **_EW, attrs=("DstT", "Truncate"), jvp=_cast_jvp,
    transpose=_cast_transpose,
    spec=lambda st: st.Spec(_cast_spec(st)))

# ---------------------------------------------------------------------------
# ClipByValue and AddN.


def _clip_by_value(t, lo, hi):
  """TF: ``t.cwiseMin(hi).cwiseMax(lo)`` with C++ ``std::min/max`` semantics:
  a NaN ``t`` stays NaN, NaN bounds are ignored; ``lo > hi`` gives ``lo``.
  Complex values are clipped componentwise (Eigen's complex min/max)."""
  t, lo, hi = _bcast(t, lo, hi)
  if jnp.iscomplexobj(t):
    return lax.complex(_clip_by_value(jnp.real(t), jnp.real(lo), jnp.real(hi)),
                       _clip_by_value(jnp.imag(t), jnp.imag(lo), jnp.imag(hi)))
  m = jnp.where(hi < t, hi, t)
  return jnp.where(m < lo, lo, m)


def _clip_jvp(primals, tangents):
  # TF: the gradient goes to t unless t < lo or t > hi; to lo where t < lo and
  # to hi where t > hi.
  (t, lo, hi), (dt, dlo, dhi) = primals, tangents
  out = ClipByValue(t, lo, hi)
  if _is_complex(t):   # TF has no gradient here (complex Less); clip componentwise
    return out, _derived_tangent(_clip_by_value, primals, tangents)
  below, above = Less(t, lo), Greater(t, hi)
  tangent = None
  for tan, pred in ((dt, LogicalNot(LogicalOr(below, above))), (dlo, below), (dhi, above)):
    if type(tan) is ad.Zero:
      continue
    part = Mul(tan, _mask(pred, out))
    tangent = part if tangent is None else AddV2(tangent, part)
  return out, _zero_tangent(out) if tangent is None else tangent


def _clip_spec(st):
  @st.composite
  def draw(draw):
    dtype = draw(st.dtypes(F + SI + ("uint8", "uint16") + C))
    shape = draw(st.shapes())
    bound_shapes = [shape if draw(st.booleans()) else () for _ in range(2)]
    t = _array(st, draw, dtype, shape)
    lo = _array(st, draw, dtype, bound_shapes[0])
    hi = _array(st, draw, dtype, bound_shapes[1])
    return {"t": t, "clip_value_min": lo, "clip_value_max": hi}
  return draw()


ClipByValue = define_op(
    "ClipByValue", _clip_by_value, **_EW, jvp=_clip_jvp,
    spec=lambda st: st.Spec(_clip_spec(st)))


def _add_n(*xs):
  return functools.reduce(jnp.add, xs)


def _add_n_spec(st):
  @st.composite
  def draw(draw):
    dtype = draw(st.dtypes(F + I + C))
    shape = draw(st.shapes())
    n = draw(st.integers(1, 4))
    return {"inputs": [_array(st, draw, dtype, shape, wide=2**20)
                       for _ in range(n)]}
  return draw()


AddN = define_op(
    "AddN", _add_n, **_EW, linear=True,
    transpose=lambda ct, *xs: [ct if U(x) else None for x in xs],
    spec=lambda st: st.Spec(_add_n_spec(st)))

# ---------------------------------------------------------------------------
# TF's gradient ops of unary math (``y`` is the forward output, ``dy`` the
# incoming gradient). They are linear in ``dy``; for complex types the
# Sqrt/Rsqrt/Reciprocal kernels conjugate ``y`` (Sigmoid/Tanh ones do not), and
# all return 0 where dy == 0 (even if y is 0 or inf).


def _where_dy(dy, value):
  return jnp.where(dy == 0, jnp.zeros((), value.dtype), value)


def _sqrt_grad(y, dy):
  y, dy = _bcast(y, dy)
  return _where_dy(dy, jnp.asarray(0.5, dy.dtype) * dy / jnp.conj(y))


def _rsqrt_grad(y, dy):
  y, dy = _bcast(y, dy)
  yc = jnp.conj(y)
  return _where_dy(dy, jnp.asarray(-0.5, dy.dtype) * (dy * yc) * (yc * yc))


def _reciprocal_grad(y, dy):
  y, dy = _bcast(y, dy)
  yc = jnp.conj(y)
  return _where_dy(dy, -dy * (yc * yc))


def _tanh_grad(y, dy):
  return dy * (jnp.ones((), y.dtype) - y * y)


def _sigmoid_grad(y, dy):
  return (dy * y) * (jnp.ones((), y.dtype) - y)


def _grad_op_transpose(op_name):
  """Transpose in ``dy`` of ``Op(y, dy)`` (linear in dy): ``Op(y, ct)``."""
  def rule(ct, y, dy):
    assert U(dy) and not U(y)
    return [None, unbroadcast(get_op(op_name)(y, ct), _shape(dy))]
  return rule


def _grad_spec(st):
  return _binary_spec(st, F + C, args=("y", "dy"), same_shape=True,
                      per_arg={"y": {"cnonzero": True}})


SqrtGrad = define_op(
    "SqrtGrad", _sqrt_grad, **_EW, transpose=_grad_op_transpose("SqrtGrad"),
    spec=lambda st: st.Spec(_grad_spec(st), skip={"jvp": "gradient op", "vjp": "gradient op"}))

RsqrtGrad = define_op(
    "RsqrtGrad", _rsqrt_grad, **_EW, transpose=_grad_op_transpose("RsqrtGrad"),
    spec=lambda st: st.Spec(_grad_spec(st), skip={"jvp": "gradient op", "vjp": "gradient op"}))

ReciprocalGrad = define_op(
    "ReciprocalGrad", _reciprocal_grad, **_EW, transpose=_grad_op_transpose("ReciprocalGrad"),
    spec=lambda st: st.Spec(_grad_spec(st), skip={"jvp": "gradient op", "vjp": "gradient op"}))

InvGrad = define_op(
    "InvGrad", _reciprocal_grad, **_EW, transpose=_grad_op_transpose("InvGrad"),
    spec=lambda st: st.Spec(_grad_spec(st), skip={"jvp": "gradient op", "vjp": "gradient op"}))

TanhGrad = define_op(
    "TanhGrad", _tanh_grad, **_EW,
    jvp=(lambda t, y, dy: Mul(t, Mul(_const(-2, y), Mul(dy, y))),   # TF's TanhGradGrad
         lambda t, y, dy: TanhGrad(y, t)),
    transpose=_grad_op_transpose("TanhGrad"),
    spec=lambda st: st.Spec(_grad_spec(st)))

SigmoidGrad = define_op(
    "SigmoidGrad", _sigmoid_grad, **_EW,
    jvp=(lambda t, y, dy: Mul(Mul(t, dy), Sub(_const(1, y), Mul(_const(2, y), y))),
         lambda t, y, dy: SigmoidGrad(y, t)),
    transpose=_grad_op_transpose("SigmoidGrad"),
    # TF's kernel multiplies in two orders ((dy * y) * (1 - y) for the scalar tail,
    # dy * (y * (1 - y)) for SIMD packets): where an intermediate overflows (y far
    # outside [0, 1]) its result depends on the element's position. y is a
    # sigmoid output: drawn in [0, 1], where both orders agree.
    spec=lambda st: st.Spec(_binary_spec(st, F + C, args=("y", "dy"), same_shape=True,
                                         per_arg={"y": {"lo": 0.0, "hi": 1.0,
                                                        "cnonzero": True}})))
