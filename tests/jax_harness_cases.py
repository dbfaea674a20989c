"""jax2tf round-trip cases, one to three for each of JAX's primitive harness groups
(the group names of ``jax._src.internal_test_util.test_harnesses``; the cases are
written here with public APIs, not taken from that file).

Each :class:`Case`: a JAX function and example inputs, and which checks apply
(``grad``: reverse mode in every float input equals the original's, for
differentiable float cases; ``vmap``: a batch of the inputs and their flipped
copies); ``tol`` of values; ``refused``: the typed error tfprims raises for it (with
``why``), listed in docs/control_flow.md. Edge inputs (NaN/inf, int extremes, empty
dimensions) are in cases of their own, without ``grad``.
"""

from __future__ import annotations

import dataclasses
from typing import Callable, Optional

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

f32, i32, u32 = np.float32, np.int32, np.uint32
_RNG = np.random.default_rng(43)
I32_MIN, I32_MAX = np.iinfo(i32).min, np.iinfo(i32).max


@dataclasses.dataclass(frozen=True)
class Case:
  group: str
  name: str
  fn: Callable
  args: tuple
  grad: bool = True
  vmap: bool = True
  tol: float = 5e-5
  # False: JAX has no reverse mode of it (packed apart, grad checked to refuse);
  # "zero": neither has JAX, but the module read back gives a zero gradient
  vjp: object = True
  # CI time: False, a group's further slow case (thorough only); "forward", a slow
  # case whose vmap/grad only the thorough run checks (CI: values, jit, native)
  ci: object = True
  refused: Optional[type] = None
  why: str = ""

  @property
  def id(self) -> str:
    return f"{self.group}:{self.name}"


def _normal(*shape):
  return _RNG.normal(size=shape).astype(f32)


X = _normal(2, 4)  # general floats
UNIT = np.array([[-0.9, -0.5, 0.0, 0.3], [0.6, 0.95, -0.2, 0.1]], f32)  # |x| < 1
POS = np.array([[0.1, 0.5, 1.0, 2.0], [3.5, 0.25, 1.5, 4.0]], f32)  # x > 0
GT1 = POS + 1.0
EDGE = np.array([np.nan, np.inf, -np.inf, 0.0, -0.0, 1.0, -1.0, 2.5], f32)
EDGE2 = np.array([np.nan, np.inf, np.inf, -0.0, 0.0, 1.0, np.nan, -2.5], f32)
INTS = np.array([I32_MIN, -7, -1, 0, 1, 7, 100, I32_MAX], i32)
INTS2 = np.array([-1, 3, -3, 5, I32_MIN, -2, 7, I32_MAX], i32)
SHIFTS = np.array([0, 1, 31, 32, 33, -1, 4, 2], i32)
UINTS = np.array([0, 1, 7, 2**31, 2**32 - 1, 12345, 3, 2**16], u32)
KEY = np.array([0, 42], u32)
A33 = _normal(3, 3)
SPD = (A33 @ A33.T + 3 * np.eye(3)).astype(f32)
LOWER = (np.tril(A33) + 3 * np.eye(3)).astype(f32)
IMG = _normal(1, 5, 5, 2)


def _c(group, name, fn, *args, **flags):
  return Case(group, name, fn, tuple(args), **flags)


def _unary(group, fn, x=X, edge=True, **flags):
  cases = [_c(group, "smooth", fn, x, **flags)]
  if edge:
    cases.append(_c(group, "edge", fn, EDGE, grad=False))
  return cases


def _binary(group, fn, x=X, y=None, ints=False, **flags):
  cases = [_c(group, "float", fn, x, X[::-1] if y is None else y, **flags)]
  cases.append(_c(group, "edge", fn, EDGE, EDGE2, grad=False))
  if ints:
    cases.append(_c(group, "int32", fn, INTS, INTS2, grad=False))
  return cases


def _maxpool(x):
  return lax.reduce_window(x, -jnp.inf, lax.max, (1, 2, 2, 1), (1, 2, 2, 1), "VALID")


def _key(data):
  return jax.random.wrap_key_data(data)


def _solve(matvec, b):  # custom_linear_solve of a diagonal system
  return b / 2.0


CASES: list[Case] = [
  *_unary("abs", jnp.abs),
  _c("abs", "int32", jnp.abs, INTS, grad=False),
  *_unary("acos", jnp.arccos, UNIT),
  *_unary("acosh", jnp.arccosh, GT1),
  *_binary("add", lax.add, ints=True),
  _c("add_any", "grad_twice", lambda x: jax.grad(lambda v: jnp.sum(jnp.sin(v) * v))(x), X),
  _c("and", "int32", lax.bitwise_and, INTS, INTS2, grad=False),
  _c("and", "bool", lambda x, y: jnp.logical_and(x > 0, y > 0), X, X[::-1], grad=False),
  _c("approx_top_k", "max_k", lambda x: lax.approx_max_k(x, 2), X),
  _c("approx_top_k", "min_k", lambda x: lax.approx_min_k(x, 3), X),
  _c("argmax", "float", lambda x: jnp.argmax(x, axis=1), X, grad=False),
  _c("argmax", "nan", lambda x: lax.argmax(x, 0, jnp.int32), EDGE, grad=False),
  _c("argmin", "float", lambda x: jnp.argmin(x, axis=0), X, grad=False),
  _c("argmin", "nan", lambda x: lax.argmin(x, 0, jnp.int32), EDGE2, grad=False),
  *_unary("asin", jnp.arcsin, UNIT),
  *_unary("asinh", jnp.arcsinh),
  *_unary("atan", jnp.arctan),
  *_binary("atan2", jnp.arctan2),
  *_unary("atanh", jnp.arctanh, UNIT),
  *_unary("bessel_i0e", lax.bessel_i0e),
  *_unary("bessel_i1e", lax.bessel_i1e),
  _c(
    "bitcast_convert_type",
    "f32_i32",
    lambda x: lax.bitcast_convert_type(x, jnp.int32),
    EDGE,
    grad=False,
  ),
  _c(
    "bitcast_convert_type",
    "f32_u8",
    lambda x: lax.bitcast_convert_type(x, jnp.uint8),
    X,
    grad=False,
  ),
  _c("broadcast_in_dim", "expand", lambda x: lax.broadcast_in_dim(x, (3, 2, 4), (1, 2)), X),
  _c(
    "broadcast_in_dim",
    "empty",
    lambda x: lax.broadcast_in_dim(x[:0], (2, 0, 4), (1, 2)),
    X,
    grad=False,
  ),
  *_unary("cbrt", lax.cbrt),
  *_unary("ceil", jnp.ceil, grad=False),
  _c("cholesky", "spd", jnp.linalg.cholesky, SPD),
  _c("clamp", "arrays", lambda x, lo: lax.clamp(lo, x, lo + 1.0), X, X[::-1] - 0.5),
  _c("clamp", "edge", lambda x: lax.clamp(-1.0, x, 1.0), EDGE, grad=False),
  _c("complex", "make", lambda x, y: lax.complex(x, y) * (1 + 2j), X, X[::-1]),
  _c("concatenate", "three", lambda x, y: lax.concatenate([x, y, x[:0]], 0), X, X * 2),
  _c("conj", "complex", lambda x, y: lax.conj(lax.complex(x, y)) ** 2, X, X[::-1]),
  _c(
    "conv_general_dilated",
    "nhwc",
    lambda x, k: lax.conv_general_dilated(
      x,
      k,
      (1, 2),
      ((1, 0), (0, 1)),
      rhs_dilation=(1, 2),
      dimension_numbers=("NHWC", "HWIO", "NHWC"),
    ),
    IMG,
    _normal(2, 2, 2, 3),
  ),
  _c(
    "conv_general_dilated",
    "grouped_1d",
    lambda x, k: lax.conv_general_dilated(x, k, (1,), "SAME", feature_group_count=2),
    _normal(1, 4, 6),
    _normal(2, 2, 3),
  ),
  _c(
    "convert_element_type",
    "f32_bf16_i32",
    lambda x: (x.astype(jnp.bfloat16).astype(f32), (x * 10).astype(jnp.int32), (x > 0).astype(f32)),
    X,
    tol=1e-2,
  ),
  _c(
    "convert_element_type",
    "int_wrap",
    lambda x: x.astype(jnp.int8).astype(jnp.uint16),
    INTS,
    grad=False,
  ),
  *_unary("cos", jnp.cos),
  *_unary("cosh", jnp.cosh),
  _c("cumlogsumexp", "axis1", lambda x: lax.cumlogsumexp(x, axis=1), X),
  _c("cumlogsumexp", "reverse", lambda x: lax.cumlogsumexp(x, axis=0, reverse=True), X, ci=False),
  _c("cummax", "axis1", lambda x: lax.cummax(x, axis=1), X),
  _c("cummax", "int_reverse", lambda x: lax.cummax(x, axis=0, reverse=True), INTS, grad=False),
  _c("cummin", "axis0", lambda x: lax.cummin(x, axis=0), X),
  _c("cummin", "nan", lambda x: lax.cummin(x, axis=0), EDGE, grad=False),
  _c("cumprod", "axis1", lambda x: lax.cumprod(x, axis=1), X),
  _c("cumprod", "reverse", lambda x: lax.cumprod(x, axis=0, reverse=True), X, ci=False),
  _c("cumsum", "axis1", lambda x: lax.cumsum(x, axis=1), X),
  _c("cumsum", "int_reverse", lambda x: lax.cumsum(x, axis=0, reverse=True), INTS, grad=False),
  _c(
    "custom_linear_solve",
    "diagonal",
    lambda b: lax.custom_linear_solve(lambda v: 2.0 * v, b, _solve, symmetric=True),
    X,
  ),
  _c("device_put", "identity", lambda x: jax.device_put(x) * 2.0, X),
  *_unary("digamma", jax.scipy.special.digamma, POS),
  *_binary("div", lax.div, y=POS),
  _c("div", "int32", lax.div, INTS, np.array([-1, 3, -3, 5, 7, -2, 7, 1], i32), grad=False),
  _c(
    "dot_general",
    "batched",
    lambda a, b: lax.dot_general(a, b, (((2,), (1,)), ((0,), (0,)))),
    _normal(2, 3, 4),
    _normal(2, 4, 2),
  ),
  _c(
    "dot_general",
    "preferred_f32",
    lambda a, b: lax.dot_general(
      a.astype(jnp.bfloat16),
      b.astype(jnp.bfloat16),
      (((1,), (0,)), ((), ())),
      preferred_element_type=f32,
    ),
    X,
    _normal(4, 3),
    tol=2e-2,
  ),
  _c(
    "dot_general",
    "int",
    lambda a, b: jnp.dot(a, b),
    INTS.reshape(2, 4) % 100,
    INTS2.reshape(4, 2) % 50,
    grad=False,
  ),
  _c(
    "dynamic_slice",
    "in_bounds",
    lambda x, i: lax.dynamic_slice(x, (0, i), (2, 2)),
    X,
    np.array(1, i32),
  ),
  _c(
    "dynamic_slice",
    "clamped",
    lambda x, i: lax.dynamic_slice(x, (i, -i), (1, 3)),
    X,
    np.array(7, i32),
    grad=False,
  ),
  _c(
    "dynamic_update_slice",
    "clamped",
    lambda x, u, i: lax.dynamic_update_slice(x, u, (i, -i)),
    X,
    _normal(1, 3),
    np.array(5, i32),
  ),
  _c("eig", "eigvals", lambda a: jnp.abs(jnp.linalg.eigvals(a)), A33, grad=False),
  _c("eigh", "values", lambda a: jnp.linalg.eigh(a)[0], SPD),
  _c("eigh", "vectors_abs", lambda a: jnp.abs(jnp.linalg.eigh(a)[1]), SPD, grad=False, ci=False),
  *_binary("eq", lax.eq, ints=True, grad=False),
  *_unary("erf", lax.erf),
  *_unary("erf_inv", lax.erf_inv, UNIT),
  *_unary("erfc", lax.erfc),
  *_unary("exp", jnp.exp),
  *_unary("expm1", jnp.expm1),
  _c(
    "fft", "fft_ifft", lambda x: jnp.fft.ifft(jnp.fft.fft(x.astype(jnp.complex64)) * 2), X, ci=False
  ),
  _c("fft", "rfft_irfft", lambda x: (jnp.abs(jnp.fft.rfft(x)), jnp.fft.irfft(x, 6)), X),
  *_unary("floor", jnp.floor, grad=False),
  _c(
    "gather",
    "take_clip",
    lambda x, i: jnp.take(x, i, axis=1, mode="clip"),
    X,
    np.array([3, 0, 9, -2], i32),
  ),
  _c(
    "gather",
    "fill",
    lambda x, i: x.at[i].get(mode="fill", fill_value=-5.0),
    X,
    np.array([1, 2, -3, 0], i32),
  ),
  _c("gather", "empty_index", lambda x: x[jnp.zeros((0,), jnp.int32)], X),
  *_binary("ge", lax.ge, ints=True, grad=False),
  *_binary("gt", lax.gt, ints=True, grad=False),
  _c("igamma", "gammainc", lambda x: jax.scipy.special.gammainc(POS[::-1], x), POS, ci="forward"),
  _c(
    "igammac", "gammaincc", lambda x: jax.scipy.special.gammaincc(POS[::-1], x), POS, ci="forward"
  ),
  _c("imag", "of_complex", lambda x, y: lax.imag(lax.complex(x, y) ** 2), X, X[::-1]),
  _c("integer_pow", "cube_inv", lambda x: (lax.integer_pow(x, 3), lax.integer_pow(x, -2)), POS),
  _c("integer_pow", "int", lambda x: lax.integer_pow(x, 3), INTS, grad=False),
  _c("iota", "plus", lambda x: x + lax.broadcasted_iota(f32, (2, 4), 1), X),
  _c("iota", "int", lambda x: x * lax.iota(jnp.int32, 8), INTS, grad=False),
  _c(
    "iota_2x32_shape",
    "uniform_bits",
    lambda k: jax.random.bits(_key(k), (2, 3), jnp.uint32),
    KEY,
    grad=False,
  ),
  *_unary("is_finite", jnp.isfinite, grad=False),
  *_binary("le", lax.le, ints=True, grad=False),
  *_unary("lgamma", lax.lgamma, POS),
  *_unary("log", jnp.log, POS),
  *_unary("log1p", jnp.log1p, POS),
  *_unary("logistic", jax.nn.sigmoid),
  *_binary("lt", lax.lt, ints=True, grad=False),
  _c("lu", "factor", lambda a: jax.scipy.linalg.lu_factor(a)[0], A33),
  _c("lu", "pivots", lambda a: lax.linalg.lu(a)[1:], A33, grad=False, ci=False),
  *_binary("max", lax.max, ints=True),
  *_binary("min", lax.min, ints=True),
  *_binary("mul", lax.mul, ints=True),
  *_binary("ne", lax.ne, ints=True, grad=False),
  *_unary("neg", lax.neg),
  _c("neg", "int", lax.neg, INTS, grad=False),
  _c("nextafter", "edge", lax.nextafter, EDGE, EDGE2, grad=False, vjp="zero"),
  _c("nextafter", "float", lax.nextafter, X, X[::-1], grad=False, vjp="zero"),
  _c("or", "int32", lax.bitwise_or, INTS, INTS2, grad=False),
  _c("or", "bool", lambda x, y: jnp.logical_or(x > 0, y > 1), X, X[::-1], grad=False),
  _c("pad", "negative_interior", lambda x: lax.pad(x, 1.5, ((1, -1, 1), (-2, 2, 0))), X),
  _c("pad", "reflect", lambda x: jnp.pad(x, ((1, 1), (2, 0)), mode="reflect"), X),
  _c("population_count", "int32", lax.population_count, INTS, grad=False),
  _c("population_count", "uint32", lax.population_count, UINTS, grad=False),
  _c("pow", "float", lax.pow, POS, X),
  _c("pow", "edge", lax.pow, EDGE, EDGE2, grad=False),
  _c("qr", "reduced", lambda a: jnp.abs(jnp.linalg.qr(a)[1]), A33, grad=False),
  _c(
    "random_categorical",
    "logits",
    lambda k, x: jax.random.categorical(_key(k), x, axis=-1),
    KEY,
    X,
    grad=False,
    ci="forward",
  ),
  _c(
    "random_gamma",
    "alpha",
    lambda k, a: jax.random.gamma(_key(k), a),
    KEY,
    POS,
    tol=1e-4,
    grad=False,
    ci=False,
  ),
  _c(
    "random_gamma",
    "alpha_grad",
    lambda k, a: jax.random.gamma(_key(k), a),
    KEY,
    POS,
    tol=1e-4,
    ci=False,
  ),
  _c(
    "random_randint",
    "range",
    lambda k: jax.random.randint(_key(k), (5,), -3, 9),
    KEY,
    grad=False,
    ci="forward",
  ),
  _c(
    "random_randint",
    "extremes",
    lambda k: jax.random.randint(_key(k), (4,), I32_MIN, I32_MAX),
    KEY,
    grad=False,
    ci=False,
  ),
  _c(
    "random_split",
    "split_fold",
    lambda k: jax.random.key_data(jax.random.fold_in(jax.random.split(_key(k), 3)[1], 7)),
    KEY,
    grad=False,
  ),
  _c(
    "random_uniform",
    "uniform_normal",
    lambda k, x: (jax.random.uniform(_key(k), (2, 4)) * x, jax.random.normal(_key(k), (3,))),
    KEY,
    X,
    ci="forward",
  ),
  _c("real", "of_complex", lambda x, y: lax.real(lax.complex(x, y) ** 2), X, X[::-1]),
  _c(
    "reduce",
    "variadic_argmax_pair",
    lambda x: lax.reduce(
      (x, lax.broadcasted_iota(jnp.int32, x.shape, 1)),
      (-jnp.inf, 0),
      lambda a, b: (lax.max(a[0], b[0]), lax.select(a[0] >= b[0], a[1], b[1])),
      (1,),
    ),
    X,
    grad=False,
    vjp=False,
  ),
  _c(
    "reduce",
    "custom_monoid",
    lambda x: lax.reduce(x, 0.0, lambda a, b: a + 2 * b, (0,)),
    X,
    grad=False,
  ),
  _c("reduce_and", "axis", lambda x: jnp.all(x > -1, axis=1), X, grad=False),
  _c("reduce_and", "empty", lambda x: jnp.all(x[:, :0] > 0, axis=1), X, grad=False),
  _c("reduce_max", "axis", lambda x: jnp.max(x, axis=0), X),
  _c(
    "reduce_max",
    "nan_empty",
    lambda x: (jnp.max(x), jnp.max(x[:0], initial=-1.0)),
    EDGE,
    grad=False,
  ),
  _c("reduce_min", "axis", lambda x: jnp.min(x, axis=1), X),
  _c("reduce_min", "int", lambda x: jnp.min(x), INTS, grad=False),
  _c("reduce_or", "axis", lambda x: jnp.any(x > 1, axis=0), X, grad=False),
  _c("reduce_precision", "e5m2", lambda x: lax.reduce_precision(x, 5, 2), X),
  _c("reduce_precision", "edge", lambda x: lax.reduce_precision(x, 4, 3), EDGE, grad=False),
  _c("reduce_prod", "axis", lambda x: jnp.prod(x, axis=1), X),
  _c("reduce_sum", "axes", lambda x: jnp.sum(x, axis=(0, 1)), X),
  _c("reduce_sum", "empty_int", lambda x: (jnp.sum(x[:0]), jnp.sum(x)), INTS, grad=False),
  _c(
    "reduce_window_add",
    "strided",
    lambda x: lax.reduce_window(x, 0.0, lax.add, (1, 2, 2, 1), (1, 1, 2, 1), "SAME"),
    IMG,
  ),
  _c(
    "reduce_window_max",
    "padded",
    lambda x: lax.reduce_window(
      x, -jnp.inf, lax.max, (1, 3, 3, 1), (1, 2, 2, 1), ((0, 0), (1, 1), (1, 1), (0, 0))
    ),
    IMG,
  ),
  _c(
    "reduce_window_min",
    "dilated",
    lambda x: lax.reduce_window(
      x, jnp.inf, lax.min, (2, 2), (1, 1), "VALID", window_dilation=(1, 2)
    ),
    X,
    grad=False,
    vjp=False,
  ),  # JAX: no VJP of a dilated min/max window
  _c(
    "reduce_window_mul",
    "window",
    lambda x: lax.reduce_window(x, 1.0, lax.mul, (1, 2), (1, 1), "VALID"),
    X,
    grad=False,
    vjp=False,
  ),  # JAX: a generic reduce_window has no reverse mode
  _c(
    "regularized_incomplete_beta",
    "betainc",
    lambda x: jax.scipy.special.betainc(POS, POS[::-1], x),
    POS / 5.0,
    tol=1e-4,
    ci="forward",
  ),
  *_binary("rem", lax.rem, y=POS),
  _c("rem", "int32", lax.rem, INTS, np.array([-1, 3, -3, 5, 7, -2, 7, 1], i32), grad=False),
  _c("reshape", "dims", lambda x: lax.reshape(x, (4, 2), dimensions=(1, 0)), X),
  _c("reshape", "empty", lambda x: jnp.reshape(x[:0], (0, 2, 2)), X, grad=False),
  _c("rev", "both", lambda x: lax.rev(x, (0, 1)), X),
  _c(
    "rng_bit_generator",
    "default",
    lambda k: lax.rng_bit_generator(jnp.concatenate([k, k]), (2, 3), dtype=jnp.uint32),
    KEY,
    grad=False,
  ),
  _c(
    "rng_bit_generator",
    "u8",
    lambda k: lax.rng_bit_generator(jnp.concatenate([k, k + 1]), (5,), dtype=jnp.uint8)[1],
    KEY,
    grad=False,
  ),
  *_unary(
    "round",
    lambda x: (
      lax.round(x, lax.RoundingMethod.AWAY_FROM_ZERO),
      lax.round(x, lax.RoundingMethod.TO_NEAREST_EVEN),
    ),
    X * 2.25,
    grad=False,
  ),
  *_unary("rsqrt", lax.rsqrt, POS),
  _c(
    "scatter",
    "set_duplicates_oob",
    lambda x, u: x.at[jnp.array([1, 1, 5])].set(u[:3], mode="drop"),
    X,
    _normal(3, 4),
    grad=False,
  ),
  _c("scatter", "set_unique", lambda x, u: x.at[:, jnp.array([0, 2])].set(u), X, _normal(2, 2)),
  _c("scatter_add", "duplicates", lambda x, u: x.at[jnp.array([0, 0, 1])].add(u), X, _normal(3, 4)),
  _c(
    "scatter_add",
    "int_oob",
    lambda x: x.at[jnp.array([1, 9, 1])].add(x[:3], mode="drop"),
    INTS,
    grad=False,
  ),
  _c("scatter_max", "duplicates", lambda x, u: x.at[jnp.array([1, 1])].max(u), X, _normal(2, 4)),
  _c("scatter_min", "duplicates", lambda x, u: x.at[jnp.array([0, 0])].min(u), X, _normal(2, 4)),
  _c(
    "scatter_mul",
    "unique",
    lambda x, u: x.at[jnp.array([1, 0])].multiply(u, unique_indices=True),
    X,
    _normal(2, 4),
  ),
  _c(
    "scatter_mul",
    "duplicates",
    lambda x, u: x.at[jnp.array([1, 1])].multiply(u),
    X,
    _normal(2, 4),
    grad=False,
    vjp=False,
  ),
  _c(
    "select_and_gather_add",
    "maxpool_jvp",
    lambda x, t: jax.jvp(_maxpool, (x,), (t,))[1],
    IMG,
    _normal(*IMG.shape),
  ),
  _c(
    "select_and_scatter_add",
    "maxpool_grad",
    lambda x: jax.grad(lambda v: jnp.sum(_maxpool(v) ** 2))(x),
    IMG,
  ),
  _c(
    "select_n",
    "three_way",
    lambda i, x: lax.select_n(i, x, x * 2, -x),
    np.array([[0, 1, 2, 0], [2, 2, 1, 0]], i32),
    X,
  ),
  _c("select_n", "bool", lambda x: lax.select_n(x > 0, x, x * x), X),
  _c("shift_left", "int32", lax.shift_left, INTS, SHIFTS, grad=False),
  _c("shift_left", "uint32", lax.shift_left, UINTS, SHIFTS.astype(u32), grad=False),
  _c("shift_right_arithmetic", "int32", lax.shift_right_arithmetic, INTS, SHIFTS, grad=False),
  _c("shift_right_logical", "int32", lax.shift_right_logical, INTS, SHIFTS, grad=False),
  _c(
    "shift_right_logical", "uint32", lax.shift_right_logical, UINTS, SHIFTS.astype(u32), grad=False
  ),
  *_unary("sign", jnp.sign, grad=False),
  _c("sign", "int", jnp.sign, INTS, grad=False),
  *_unary("sin", jnp.sin),
  *_unary("sinh", jnp.sinh),
  _c("slice", "strided", lambda x: lax.slice(x, (0, 1), (2, 4), (1, 2)), X),
  _c("slice", "empty", lambda x: lax.slice(x, (1, 2), (1, 4)), X, grad=False),
  _c("sort", "nan_multi", lambda x, y: lax.sort((x, y), num_keys=1), EDGE, EDGE2, grad=False),
  _c("sort", "float_axis0", lambda x: jnp.sort(x, axis=0), X),
  _c("sort", "int_stable", lambda x: jnp.argsort(x % 4, stable=True), INTS, grad=False),
  *_unary("sqrt", jnp.sqrt, POS),
  _c("squeeze", "dims", lambda x: lax.squeeze(x[:, None, :, None], (1, 3)), X),
  _c("stop_gradient", "mixed", lambda x: lax.stop_gradient(x) * x + x, X),
  _c("sub", "float", lax.sub, X, X[::-1]),
  _c("sub", "int32", lax.sub, INTS, INTS2, grad=False),
  _c("svd", "values", lambda a: jnp.linalg.svd(a, compute_uv=False), A33),
  _c("svd", "full", lambda a: jnp.abs(jnp.linalg.svd(a)[0]), A33, grad=False, ci=False),
  *_unary("tan", jnp.tan, UNIT),
  *_unary("tanh", jnp.tanh),
  _c("top_k", "float", lambda x: lax.top_k(x, 3), X),
  _c("top_k", "nan_ties", lambda x: lax.top_k(x, 5), EDGE, grad=False),
  _c("transpose", "perm", lambda x: lax.transpose(x[None], (2, 0, 1)), X),
  _c(
    "triangular_solve",
    "lower_left",
    lambda a, b: lax.linalg.triangular_solve(a, b, left_side=True, lower=True),
    LOWER,
    _normal(3, 2),
  ),
  _c(
    "triangular_solve",
    "upper_transpose",
    lambda a, b: lax.linalg.triangular_solve(
      a.T, b, left_side=False, lower=False, transpose_a=True
    ),
    LOWER,
    _normal(2, 3),
  ),
  _c(
    "tridiagonal_solve",
    "system",
    lambda dl, d, du, b: lax.linalg.tridiagonal_solve(dl, d, du, b),
    np.array([0.0, 1.0, -0.5], f32),
    np.array([4.0, 5.0, 3.0], f32),
    np.array([0.5, 1.0, 0.0], f32),
    _normal(3, 2),
  ),
  _c("xor", "int32", lax.bitwise_xor, INTS, INTS2, grad=False),
  _c("xor", "bool", lambda x, y: jnp.logical_xor(x > 0, y > 0), X, X[::-1], grad=False),
]

# JAX's primitive harness groups (jax 0.10.2: the group names of test_harnesses)
HARNESS_GROUPS = frozenset(
  """
abs acos acosh add add_any and approx_top_k argmax argmin asin asinh atan atan2 atanh
bessel_i0e bessel_i1e bitcast_convert_type broadcast_in_dim cbrt ceil cholesky clamp complex
concatenate conj conv_general_dilated convert_element_type cos cosh cumlogsumexp cummax
cummin cumprod cumsum custom_linear_solve device_put digamma div dot_general dynamic_slice
dynamic_update_slice eig eigh eq erf erf_inv erfc exp expm1 fft floor gather ge gt igamma
igammac imag integer_pow iota iota_2x32_shape is_finite le lgamma log log1p logistic lt lu
max min mul ne neg nextafter or pad population_count pow qr random_categorical random_gamma
random_randint random_split random_uniform real reduce reduce_and reduce_max reduce_min
reduce_or reduce_precision reduce_prod reduce_sum reduce_window_add reduce_window_max
reduce_window_min reduce_window_mul regularized_incomplete_beta rem reshape rev
rng_bit_generator round rsqrt scatter scatter_add scatter_max scatter_min scatter_mul
select_and_gather_add select_and_scatter_add select_n shift_left shift_right_arithmetic
shift_right_logical sign sin sinh slice sort sqrt squeeze stop_gradient sub svd tan tanh
top_k transpose triangular_solve tridiagonal_solve xor
""".split()
)

BY_ID = {c.id: c for c in CASES}
assert len(BY_ID) == len(CASES), "case ids must be unique"
GROUPS = sorted({c.group for c in CASES})


def _weight(case: Case) -> int:  # linear algebra and samplers convert slower
  return (
    4
    if case.group
    in {
      "eig",
      "eigh",
      "lu",
      "qr",
      "svd",
      "cholesky",
      "random_gamma",
      "igamma",
      "igammac",
      "regularized_incomplete_beta",
    }
    else 1
  )


def chunks(n: int = 12) -> list[list[Case]]:
  """The cases that are read natively, in ``n`` chunks of about equal cost and one
  more of those JAX has no reverse mode of (jax2tf's gradient function of a chunk
  takes the VJP of all its cases)."""
  bins: list[list[Case]] = [[] for _ in range(n)]
  cost = [0] * n
  ready = [
    c if c.ci is True else dataclasses.replace(c, grad=False, vmap=False)
    for c in CASES
    if c.refused is None and c.ci
  ]
  for case in sorted((c for c in ready if c.vjp is True), key=_weight, reverse=True):
    k = cost.index(min(cost))
    bins[k].append(case)
    cost[k] += _weight(case)
  return bins + [[c for c in ready if c.vjp is not True]]
