"""Reductions: Sum, Mean, Prod, Max, Min, All, Any, EuclideanNorm, ArgMax, ArgMin.

Reduction axes are static: ``tf.Sum[axis=(0, 1) keep_dims=False]``. The
``canonicalize`` hook (run by ``TFOp.prepare``) turns TF's ``reduction_indices``
(scalar or vector, negative allowed, empty = no-op) into a sorted tuple of
non-negative ints; the impls accept any TF-valid form too. Batching re-binds
the same primitive with the axes shifted, so vmapped jaxprs keep ``tf.Sum`` etc.
Sum and Mean are linear with TF-named transposes (Reshape + BroadcastTo); Max
and Min have TF's gradient (ties share the gradient evenly). Semantics chosen
where TF is platform-dependent: docs/semantics/reductions_linalg.md.
"""

from __future__ import annotations

import math

import jax.numpy as jnp
import numpy as np
from jax import lax
from jax.interpreters import ad

from tfprims import dtypes as tfdtypes
from tfprims import rules
from tfprims.core import register_op, tfops

# ---------------------------------------------------------------------------
# Axes.


def normalize_axes(axis, ndim: int) -> tuple[int, ...]:
  """TF ``reduction_indices`` (int or sequence) -> sorted non-negative tuple.

  Raises ValueError like TF's "Invalid reduction dimension" / "duplicate" errors.
  """
  axes = (axis,) if isinstance(axis, (int, np.integer)) else tuple(axis)
  out = []
  for a in axes:
    a = int(a)
    if not -ndim <= a < ndim:
      raise ValueError(f"Invalid reduction dimension ({a} for input with {ndim} dimension(s)")
    a %= ndim
    if a in out:
      raise ValueError(f"Invalid reduction arguments: Axes contains duplicate dimension: {a}")
    out.append(a)
  return tuple(sorted(out))


def _canonicalize_axes(params, x, *_):
  params = dict(params)
  params["axis"] = normalize_axes(params["axis"], jnp.ndim(x))
  return params


def _canonicalize_dimension(params, x, *_):
  params = dict(params)
  ndim = jnp.ndim(x)
  dim = int(params["dimension"])
  if not -ndim <= dim < ndim:
    raise ValueError(f"Expected dimension in the range [{-ndim}, {ndim}), but got {dim}")
  params["dimension"] = dim % ndim
  return params


def _kept_shape(shape, axes):
  return tuple(1 if i in axes else d for i, d in enumerate(shape))


def _out_shape(shape, axes, keep_dims):
  if keep_dims:
    return _kept_shape(shape, axes)
  return tuple(d for i, d in enumerate(shape) if i not in axes)


def _count(shape, axes):
  """How many elements each output reduces: an int, or an expression in the symbolic
  dims of a shape-polymorphic jax.export trace (those are >= 1)."""
  return math.prod(shape[a] for a in axes)


def _count_value(n, dtype):
  """The count as a constant of ``dtype``; a symbolic count is a program value."""
  return np.array(n, dtype) if isinstance(n, int) else jnp.asarray(n, dtype)


def _keep(out, axes, keep_dims):
  return lax.expand_dims(out, axes) if keep_dims and axes else out


# ---------------------------------------------------------------------------
# Impls.


def _sum(x, *, axis, keep_dims):
  """Sum; integer sums wrap in the input dtype like TF's."""
  axes = normalize_axes(axis, x.ndim)
  dtype = x.dtype if jnp.issubdtype(x.dtype, jnp.integer) else None
  return jnp.sum(x, axis=axes, dtype=dtype, keepdims=keep_dims)


def _prod(x, *, axis, keep_dims):
  axes = normalize_axes(axis, x.ndim)
  dtype = x.dtype if jnp.issubdtype(x.dtype, jnp.integer) else None
  return jnp.prod(x, axis=axes, dtype=dtype, keepdims=keep_dims)


def _max(x, *, axis, keep_dims):
  """Max; NaN propagates; an empty reduction gives -inf (the dtype's min for ints)."""
  axes = normalize_axes(axis, x.ndim)
  return _keep(lax.reduce_max(x, axes), axes, keep_dims)


def _min(x, *, axis, keep_dims):
  axes = normalize_axes(axis, x.ndim)
  return _keep(lax.reduce_min(x, axes), axes, keep_dims)


def _all(x, *, axis, keep_dims):
  axes = normalize_axes(axis, x.ndim)
  return jnp.all(x, axis=axes, keepdims=keep_dims)


def _any(x, *, axis, keep_dims):
  axes = normalize_axes(axis, x.ndim)
  return jnp.any(x, axis=axes, keepdims=keep_dims)


def _int_mean(x, axes, keep_dims, n):
  """TF's integer Mean: sum in 64 bits, divide truncating toward zero."""
  dtype = x.dtype
  signed = jnp.issubdtype(dtype, jnp.signedinteger)
  if tfdtypes.x64_enabled() or dtype.itemsize < 4:
    if tfdtypes.x64_enabled():
      acc = np.dtype(np.int64 if signed else np.uint64)
    else:
      acc = np.dtype(np.int32 if signed else np.uint32)  # exact for n < 2**16
    s = jnp.sum(x.astype(acc), axis=axes, dtype=acc, keepdims=keep_dims)
    return lax.div(s, _count_value(n, acc)).astype(dtype)
  # 32-bit ints without x64: the 64-bit sum S is never formed. With
  # x = n*q + r (floor division, 0 <= r < n): floor(S/n) = sum(q) + sum(r)//n,
  # where sum(q) may wrap but the result fits in int32 so wrapping cancels;
  # sum(r) < n**2 is exact in uint32 for n < 2**16.
  nn = _count_value(n, dtype)
  q = jnp.floor_divide(x, nn)
  r = (x - q * nn).astype(np.uint32)
  qs = jnp.sum(q, axis=axes, dtype=dtype, keepdims=keep_dims)
  rs = jnp.sum(r, axis=axes, dtype=np.uint32, keepdims=keep_dims)
  nu = _count_value(n, np.uint32)
  floor = qs + lax.div(rs, nu).astype(dtype)
  if not signed:
    return floor
  inexact = lax.rem(rs, nu) != 0
  return jnp.where((floor < 0) & inexact, floor + np.array(1, dtype), floor)


def _mean(x, *, axis, keep_dims):
  """Mean. Floats: sum in the input dtype then divide (float16 sums that
  overflow give inf, as in TF); ints: TF's 64-bit sum and truncating division;
  empty reductions give NaN for floats and 0 for ints and complex."""
  axes = normalize_axes(axis, x.ndim)
  n = _count(x.shape, axes)
  out_shape = _out_shape(x.shape, axes, keep_dims)
  if n == 0:
    fill = np.nan if jnp.issubdtype(x.dtype, jnp.floating) else 0
    return jnp.full(out_shape, fill, x.dtype)
  if jnp.issubdtype(x.dtype, jnp.integer):
    return _int_mean(x, axes, keep_dims, n)
  s = jnp.sum(x, axis=axes, keepdims=keep_dims)
  return s / _count_value(n, x.dtype)


def _mean_build(B, x, *, axis, keep_dims):
  """_mean's ops emitted, for float32/float64 (jnp sums half types in float32)."""
  axes = normalize_axes(axis, x.ndim)
  n = _count(x.shape, axes)
  if x.dtype not in (np.float32, np.float64) or n == 0:
    return None
  s = B.reduce_sum(x, axes)
  return B.reshape(B.div(s, B.full(n, s.shape, x.dtype)), _out_shape(x.shape, axes, keep_dims))


def _isqrt_unsigned(u):
  """floor(sqrt(u)) exactly, for an unsigned integer array."""
  fdt = np.float64 if u.dtype.itemsize == 8 else np.float32
  r = jnp.floor(jnp.sqrt(u.astype(fdt))).astype(u.dtype)
  one = np.array(1, u.dtype)
  # The float estimate is off by at most one; fix it with overflow-free divisions.
  too_big = (r > 0) & (r > lax.div(u, jnp.maximum(r, one)))
  r = jnp.where(too_big, r - one, r)
  small_enough = (r + one) <= lax.div(u, r + one)
  return jnp.where(small_enough, r + one, r)


def _complex_norm(x, axes, keep_dims):
  """TF's complex norm sqrt(sum(x * conj(x))), special values included: an
  infinite part gives (inf, NaN) (the product's imaginary part is inf - inf),
  and the sum is square-rooted with Eigen's complex sqrt, which overflows to inf
  for sums above max/2. (A NaN part beside an inf or an overflowing square gives
  inf or NaN in TF depending on its kernel's path; we give NaN.)"""
  a, b = jnp.real(x), jnp.imag(x)
  aa, bb, ab = a * a, b * b, a * b
  to_inf = (jnp.isinf(a) | jnp.isinf(b)) & ~(jnp.isnan(a) | jnp.isnan(b))
  re = jnp.where(to_inf, np.array(np.inf, a.dtype), aa + bb)
  sr = jnp.sum(re, axis=axes, keepdims=keep_dims)
  si = jnp.sum(ab - ab, axis=axes, keepdims=keep_dims)  # 0, or NaN beside inf/NaN
  half = np.array(0.5, a.dtype)
  return lax.complex(jnp.sqrt(half * (sr + sr)), si * np.array(0, a.dtype))


def _euclidean_norm(x, *, axis, keep_dims):
  """sqrt(sum(x * conj(x))). Integers follow TF's CPU kernel: squares and sum
  wrap in the input dtype, then floor(sqrt()); a negative (wrapped) sum is the
  x86 cast of NaN: 0 for 8/16-bit, the dtype's min for 32/64-bit ints."""
  axes = normalize_axes(axis, x.ndim)
  if jnp.issubdtype(x.dtype, jnp.complexfloating):
    return _complex_norm(x, axes, keep_dims)
  if jnp.issubdtype(x.dtype, jnp.integer):
    s = jnp.sum(x * x, axis=axes, dtype=x.dtype, keepdims=keep_dims)
    if _count(x.shape, axes) == 1:
      s = lax.optimization_barrier(s)  # keep XLA from assuming x * x >= 0
    unsigned = np.dtype(f"uint{8 * x.dtype.itemsize}")
    r = _isqrt_unsigned(s.astype(unsigned)).astype(x.dtype)
    if jnp.issubdtype(x.dtype, jnp.signedinteger):
      nan_as_int = np.iinfo(x.dtype).min if x.dtype.itemsize >= 4 else 0
      r = jnp.where(s < 0, np.array(nan_as_int, x.dtype), r)
    return r
  s = jnp.sum(x * x, axis=axes, keepdims=keep_dims)
  if _count(x.shape, axes) == 1:
    # XLA rewrites sqrt(x * x) to |x|; TF's squares underflow (tiny x -> 0).
    s = lax.optimization_barrier(s)
  return jnp.sqrt(s)


def _arg_chooser(kind):
  def impl(x, *, dimension, output_type):
    dim = normalize_axes(dimension, x.ndim)[0]
    if x.shape[dim] == 0:
      raise ValueError(f"Reduction axis {dim} is empty in shape {list(x.shape)}")
    if jnp.issubdtype(x.dtype, jnp.floating):
      # TF's CPU kernel skips NaN (it never compares greater/less than anything).
      x = jnp.where(jnp.isnan(x), np.array(-np.inf if kind == "max" else np.inf, x.dtype), x)
    fn = jnp.argmax if kind == "max" else jnp.argmin
    return fn(x, axis=dim).astype(tfdtypes.canonical_dtype(output_type))

  impl.__doc__ = (
    f"Index of the first {kind}imum; NaN is skipped (index 0 when the "
    "whole row is NaN), as in TF's CPU kernel."
  )
  return impl


# ---------------------------------------------------------------------------
# Rules.


def _reduce_transpose(ct, x, *, axis, keep_dims, scale=None):
  """Transpose of a sum over ``axis``: Reshape to the kept-dims shape, BroadcastTo."""
  shape = x.aval.shape
  axes = normalize_axes(axis, len(shape))
  if scale is not None:
    ct = scale(ct)
  if not keep_dims:
    ct = rules.reshape(ct, _kept_shape(shape, axes))
  return [rules.broadcast_to(ct, shape)]


def _mean_transpose(ct, x, *, axis, keep_dims):
  shape = x.aval.shape
  n = _count(shape, normalize_axes(axis, len(shape)))
  if isinstance(n, int) and n <= 1:
    return _reduce_transpose(ct, x, axis=axis, keep_dims=keep_dims)
  # TF divides by the count (RealDiv, whose transpose gives grad-of-grad).
  return _reduce_transpose(
    ct,
    x,
    axis=axis,
    keep_dims=keep_dims,
    scale=lambda c: tfops.RealDiv(c, _count_value(n, c.dtype)),
  )


def _mean_jvp(t, x, *, axis, keep_dims):
  """Mean of the tangent; an empty reduction has a zero tangent (as in TF), not NaN."""
  if _count(x.shape, normalize_axes(axis, x.ndim)) == 0:
    return jnp.zeros(_out_shape(x.shape, normalize_axes(axis, x.ndim), keep_dims), t.dtype)
  return tfops.Mean(t, axis=axis, keep_dims=keep_dims)


def _reduction_batching(op):
  """Re-binds ``op`` with the batch axis moved to the front and the axes shifted."""

  def rule(args, dims, *, axis, **params):
    (x,), (d,) = args, dims
    if d != 0:
      x = rules.move_axes(x, [d], [0])
    axes = tuple(a + 1 for a in normalize_axes(axis, x.ndim - 1))
    return op(x, axis=axes, **params), 0

  return rule


def _arg_batching(op):
  def rule(args, dims, *, dimension, **params):
    (x,), (d,) = args, dims
    if d != 0:
      x = rules.move_axes(x, [d], [0])
    dim = normalize_axes(dimension, x.ndim - 1)[0] + 1
    return op(x, dimension=dim, **params), 0

  return rule


def _chooser_jvp(op):
  """TF's Max/Min gradient: the tangent is averaged over the tied extrema
  (indicators / count), so a NaN in the slice gives NaN."""

  def rule(primals, tangents, *, axis, keep_dims):
    (x,), (t,) = primals, tangents
    y = op(x, axis=axis, keep_dims=keep_dims)
    if type(t) is ad.Zero:
      return y, t
    axes = normalize_axes(axis, x.ndim)
    y_kept = y if keep_dims else rules.reshape(y, _kept_shape(x.shape, axes))
    eq = tfops.Equal(x, y_kept, incompatible_shape_error=True)
    ind = tfops.Cast(eq, DstT=np.dtype(x.dtype), Truncate=False)
    count = tfops.Sum(ind, axis=axes, keep_dims=True)
    weights = tfops.RealDiv(ind, count)
    return y, tfops.Sum(tfops.Mul(t, weights), axis=axes, keep_dims=keep_dims)

  return rule


def _euclidean_norm_jvp(primals, tangents, *, axis, keep_dims):
  """TF's gradient: x / norm (NaN where the norm is 0), i.e. the tangent is
  sum(conj(x) / norm * t). For complex inputs this is TF's formula, which also
  maps imaginary tangents (the exact derivative of the real-valued norm would
  keep only the real part). An empty reduction has a zero tangent."""
  (x,), (t,) = primals, tangents
  y = tfops.EuclideanNorm(x, axis=axis, keep_dims=keep_dims)
  if type(t) is ad.Zero:
    return y, t
  axes = normalize_axes(axis, x.ndim)
  if _count(x.shape, axes) == 0:
    return y, jnp.zeros(y.shape, y.dtype)
  y_kept = y if keep_dims else rules.reshape(y, _kept_shape(x.shape, axes))
  if jnp.issubdtype(x.dtype, jnp.complexfloating):
    x = tfops.Conj(x)
  weights = tfops.RealDiv(x, y_kept)
  return y, tfops.Sum(tfops.Mul(t, weights), axis=axes, keep_dims=keep_dims)


# ---------------------------------------------------------------------------
# Specs (hypothesis is only imported when a spec is built).


def _wide_bounds(dtype, bound):
  """Value bounds keeping 64-bit results in 32-bit range (x64 off computes in 32 bits)."""
  if dtype.name in ("float16", "bfloat16") and bound is not None:
    # Products of up to ~50 values stay finite in float16 (1.25**48 < 65504): an
    # overflowing half product makes inf * 0 NaNs whose places depend on the order TF's
    # and XLA's gradients multiply in.
    return {"min_value": -1.25 * bound, "max_value": 1.25 * bound}
  if dtype.name in ("int64", "uint64") and bound is not None:
    return {"min_value": 0 if dtype.name == "uint64" else -bound, "max_value": bound}
  if dtype.name == "int64":
    return {"min_value": -(2**31), "max_value": 2**31 - 1}
  if dtype.name == "uint64":
    return {"min_value": 0, "max_value": 2**32 - 1}
  return {}


def _axis_strategy(st, rank):
  """TF reduction_indices: a scalar or a vector (maybe empty), negative axes too."""

  @st.composite
  def draw(draw):
    idx = np.dtype(draw(st.sampled_from(["int32", "int64"])))
    if rank and draw(st.booleans()):
      return np.array(draw(st.integers(-rank, rank - 1)), idx)
    axes = draw(st.lists(st.integers(0, rank - 1), unique=True, max_size=rank)) if rank else []
    negs = draw(st.lists(st.booleans(), min_size=len(axes), max_size=len(axes)))
    return np.array([a - rank if neg else a for a, neg in zip(axes, negs)], idx)

  return draw()


def reduction_calls(st, dtype_names, wide_bound=None, complex_kwargs=None):
  """Calls of a reduction: input of any small shape, reduction_indices, keep_dims."""

  @st.composite
  def draw(draw):
    dtype = draw(st.dtypes(dtype_names))
    shape = draw(st.shapes())
    kwargs = _wide_bounds(dtype, wide_bound)
    if dtype.kind == "c":
      kwargs.update(complex_kwargs or {})
    x = draw(st.arrays(dtype, shape, **kwargs))
    return {
      "input": x,
      "reduction_indices": draw(_axis_strategy(st, len(shape))),
      "keep_dims": draw(st.booleans()),
    }

  return draw()


def reduction_spec(st, op_type, dtype_names, wide_bound=None, complex_kwargs=None, **kwargs):
  """Calls with op-def names (``reduction_indices``); the runner passes it to
  ``tf.raw_ops.<op_type>`` as ``axis`` (``tfprims.testing.oracles.raw_ops_renames``)."""
  return st.Spec(reduction_calls(st, dtype_names, wide_bound, complex_kwargs), **kwargs)


_TIE_VALUES = {
  "f": [0.0, -0.0, 1.0, -1.0, np.nan, float(np.copysign(np.nan, -1.0)), np.inf, -np.inf],
  "i": [0, 1, -1, 2],
  "u": [0, 1, 2],
  "b": [False, True],
}


def _tie_array(st, dtype, shape):
  """Arrays with few distinct values (ties, NaN, ±inf)."""
  size = int(np.prod(shape))
  kind = st.kind(dtype)
  values = _TIE_VALUES[kind]
  return st.lists(st.sampled_from(values), min_size=size, max_size=size).map(
    lambda v: np.array(v, dtype=np.float32 if kind == "f" else None).astype(dtype).reshape(shape)
  )


def arg_calls(st, output_types):
  @st.composite
  def draw(draw):
    dtype = draw(st.dtypes(st.NUMERIC + ("bool",)))
    shape = list(draw(st.shapes(min_rank=1)))
    dim = draw(st.integers(-len(shape), len(shape) - 1))
    shape[dim] = max(shape[dim], 1)
    shape = tuple(shape)
    if dtype.kind == "b" or draw(st.booleans()):
      x = draw(_tie_array(st, dtype, shape))
    else:
      x = draw(st.arrays(dtype, shape, **_wide_bounds(dtype, None)))
    idx = np.dtype(draw(st.sampled_from(["int32", "int64"])))
    return {
      "input": x,
      "dimension": np.array(dim, idx),
      "output_type": np.dtype(draw(st.sampled_from(output_types))),
    }

  return draw()


_NO_GRAD_INT = "integer/boolean op: not differentiable"

# ---------------------------------------------------------------------------
# Ops.

_RED = dict(
  family="reductions",
  static={"reduction_indices": "axis"},
  attrs=("keep_dims",),
  canonicalize=_canonicalize_axes,
)

Sum = register_op(
  "Sum",
  _sum,
  **_RED,
  linear=True,
  transpose=_reduce_transpose,
  batching=rules.per_op(_reduction_batching),
  spec=rules.per_op(
    lambda op: lambda st: reduction_spec(st, op.op_type, st.NUMERIC + st.COMPLEX, wide_bound=2**22)
  ),
)

Mean = register_op(
  "Mean",
  _mean,
  **_RED,
  linear_values=True,
  build=_mean_build,
  jvp=(_mean_jvp,),
  transpose=_mean_transpose,
  batching=rules.per_op(_reduction_batching),
  spec=rules.per_op(lambda op: lambda st: reduction_spec(st, op.op_type, st.NUMERIC + st.COMPLEX)),
)

Prod = register_op(
  "Prod",
  _prod,
  **_RED,
  batching=rules.per_op(_reduction_batching),
  # Complex products reaching inf follow each library's complex arithmetic (TF:
  # C99 Annex G; XLA: plain formulas, batched and unbatched differing): complex
  # factors are drawn with |z| < 1.
  spec=rules.per_op(
    lambda op: (
      lambda st: reduction_spec(
        st,
        op.op_type,
        st.NUMERIC + st.COMPLEX,
        wide_bound=1,
        complex_kwargs={"min_value": -0.7, "max_value": 0.7},
      )
    )
  ),
)

Max = register_op(
  "Max",
  _max,
  **_RED,
  jvp=rules.per_op(_chooser_jvp),
  batching=rules.per_op(_reduction_batching),
  spec=rules.per_op(lambda op: lambda st: reduction_spec(st, op.op_type, st.NUMERIC)),
)

Min = register_op(
  "Min",
  _min,
  **_RED,
  jvp=rules.per_op(_chooser_jvp),
  batching=rules.per_op(_reduction_batching),
  spec=rules.per_op(lambda op: lambda st: reduction_spec(st, op.op_type, st.NUMERIC)),
)

All = register_op(
  "All",
  _all,
  **_RED,
  batching=rules.per_op(_reduction_batching),
  spec=rules.per_op(
    lambda op: (
      lambda st: reduction_spec(
        st, op.op_type, ("bool",), skip={"jvp": _NO_GRAD_INT, "vjp": _NO_GRAD_INT}
      )
    )
  ),
)

Any = register_op(
  "Any",
  _any,
  **_RED,
  batching=rules.per_op(_reduction_batching),
  spec=rules.per_op(
    lambda op: (
      lambda st: reduction_spec(
        st, op.op_type, ("bool",), skip={"jvp": _NO_GRAD_INT, "vjp": _NO_GRAD_INT}
      )
    )
  ),
)

EuclideanNorm = register_op(
  "EuclideanNorm",
  _euclidean_norm,
  **_RED,
  jvp=_euclidean_norm_jvp,
  batching=rules.per_op(_reduction_batching),
  spec=rules.per_op(
    lambda op: (
      lambda st: reduction_spec(
        st,
        op.op_type,
        st.NUMERIC + st.COMPLEX,
        wide_bound=2**11,
        # TF's result for a NaN part beside an inf depends on its kernel's path.
        complex_kwargs={"allow_nan": False},
        # TF's forward mode linearises its gradient x / (norm / ct) in ct, which
        # gives NaN (its own GradientTape gives inf) where x**2 underflows to 0.
        grad_oracle="vjp",
      )
    )
  ),
)

_ARG = dict(
  family="reductions",
  static=("dimension",),
  attrs=("output_type",),
  canonicalize=_canonicalize_dimension,
)

ArgMax = register_op(
  "ArgMax",
  _arg_chooser("max"),
  **_ARG,
  batching=rules.per_op(_arg_batching),
  spec=lambda st: st.Spec(
    arg_calls(st, ("int16", "uint16", "int32", "int64")),
    skip={"jvp": "integer output", "vjp": "integer output"},
  ),
)

ArgMin = register_op(
  "ArgMin",
  _arg_chooser("min"),
  **_ARG,
  batching=rules.per_op(_arg_batching),
  spec=lambda st: st.Spec(
    arg_calls(st, ("int32", "int64")), skip={"jvp": "integer output", "vjp": "integer output"}
  ),
)
