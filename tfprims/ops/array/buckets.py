"""Buckets and counts: Bucketize, LowerBound, UpperBound, HistogramFixedWidth,
Bincount, DenseBincount.

The searches (Bucketize, LowerBound, UpperBound) take libstdc++'s halving steps of
``std::upper_bound``/``std::lower_bound``, as TF's CPU kernels call them, so they
agree with TF on unsorted rows and NaN too. Counts drop values outside
``[0, size)``: TF's CPU kernels ignore values ``>= size`` and raise on negative ones
(``check=`` raises like TF with the ``runtime_checks`` config). Bincount and
DenseBincount are linear in ``weights`` (TF registers no gradient): the JVP re-binds
the op on the tangent, the transpose gathers the cotangent with ``tf.GatherV2``,
and Bincount is batched as a 2-D ``tf.DenseBincount``. Choices:
docs/semantics/array.md.
"""

from __future__ import annotations

import math

import jax.numpy as jnp
import numpy as np

from tfprims import config, errors, folding, interpreter, opdefs, rules
from tfprims import dtypes as tfdtypes
from tfprims.core import register_op, tfops
from tfprims.ops.array._common import FAMILY
from tfprims.ops.shared import scalar_int
from tfprims.ops.shared_specs import lazy_hst
from tfprims.rules import U

_NO_GRAD = "integer output: not differentiable (TF registers no gradient)"


# --- searches -------------------------------------------------------------------------


def std_bound(take, m: int, values, *, upper: bool):
  """``std::upper_bound`` (``upper``) or ``std::lower_bound`` of each of ``values``
  in a sequence of length ``m`` read by ``take(positions)``, with libstdc++'s steps:
  halve ``len``, compare with the middle element, go right (``first = mid + 1``) or
  left. The same steps give the same answer on unsorted sequences and NaN."""
  first = jnp.zeros(jnp.shape(values), np.int32)
  if m == 0:
    return first
  length = jnp.full(jnp.shape(values), m, np.int32)
  for _ in range(int(m).bit_length()):
    half = length // 2
    mid = first + half
    pivot = take(jnp.minimum(mid, m - 1))
    right = ~(values < pivot) if upper else (pivot < values)
    live = length > 0
    first = jnp.where(live & right, mid + 1, first)
    length = jnp.where(live, jnp.where(right, length - half - 1, half), 0)
  return first


def _float32_boundaries(boundaries) -> np.ndarray:
  # TF keeps the attr as std::vector<float>.
  return np.asarray(boundaries, np.float64).astype(np.float32).reshape(-1)


def _bucketize_impl(input, *, boundaries):
  """Index of each element's bucket: ``std::upper_bound`` in the float32 boundaries
  (ints are compared as float32, doubles with the boundaries widened, as in TF)."""
  cmp = np.float64 if input.dtype == np.float64 else np.float32
  b = jnp.asarray(_float32_boundaries(boundaries).astype(cmp))
  return std_bound(lambda i: jnp.take(b, i), b.shape[0], input.astype(cmp), upper=True)


def _bucketize_canonicalize(params, *_):
  b = _float32_boundaries(params["boundaries"])
  if np.any(b[1:] < b[:-1]):  # std::is_sorted: NaN compares false, as in TF
    raise ValueError("Bucketize: Expected sorted boundaries")
  return params


Bucketize = register_op(
  "Bucketize",
  _bucketize_impl,
  family=FAMILY,
  attrs=("boundaries",),
  canonicalize=_bucketize_canonicalize,
  batching="elementwise",
  jvp=rules.per_op(rules.no_grad_jvp),
  spec=lambda st: st.Spec(_bucketize_calls(st), skip={"jvp": _NO_GRAD, "vjp": _NO_GRAD}),
)


def _search_impl(upper: bool):
  def impl(sorted_inputs, values, *, out_type):
    for name, x in (("sorted_inputs", sorted_inputs), ("values", values)):
      if x.ndim != 2:
        raise ValueError(f"Shape must be rank 2 but is rank {x.ndim} for `{name}` argument")
    if sorted_inputs.shape[0] != values.shape[0]:
      raise ValueError("Leading dim_size of both tensors must match.")
    out = std_bound(
      lambda i: jnp.take_along_axis(sorted_inputs, i, axis=1),
      sorted_inputs.shape[1],
      values,
      upper=upper,
    )
    return out.astype(tfdtypes.canonical_dtype(out_type))

  impl.__doc__ = (
    f"Per row, ``std::{'upper' if upper else 'lower'}_bound`` of each value "
    "in ``sorted_inputs`` (libstdc++'s steps, so unsorted rows give TF's "
    "answer too)."
  )
  return impl


def _search_batch(op):
  """Rows of every example become rows of one call: [V, B, n] -> [V * B, n]."""

  def rule(args, dims, *, out_type):
    size = rules.batch_size(args, dims)
    s, v = (rules.with_batch_axis(a, d, size) for a, d in zip(args, dims))
    rows = s.shape[1]
    out = op(
      rules.reshape(s, (size * rows, s.shape[2])),
      rules.reshape(v, (size * rows, v.shape[2])),
      out_type=out_type,
    )
    return rules.reshape(out, (size, rows, v.shape[2])), 0

  return rule


LowerBound = register_op(
  "LowerBound",
  _search_impl(False),
  family=FAMILY,
  attrs=("out_type",),
  jvp=rules.per_op(rules.no_grad_jvp),
  batching=rules.per_op(_search_batch),
  spec=lambda st: st.Spec(_search_calls(st), skip={"jvp": _NO_GRAD, "vjp": _NO_GRAD}),
)

UpperBound = register_op(
  "UpperBound",
  _search_impl(True),
  family=FAMILY,
  attrs=("out_type",),
  jvp=rules.per_op(rules.no_grad_jvp),
  batching=rules.per_op(_search_batch),
  spec=lambda st: st.Spec(_search_calls(st), skip={"jvp": _NO_GRAD, "vjp": _NO_GRAD}),
)


# --- histogram --------------------------------------------------------------------------


def _nbins(nbins) -> int:
  n = scalar_int(nbins)
  if n <= 0:
    raise ValueError(f"nbins should be a positive number, but got '{n}'")
  return n


def _histogram_impl(values, value_range, *, nbins, dtype):
  """Counts of ``values`` in ``nbins`` equal bins over ``value_range``, values
  outside it counted in the edge bins: TF's ``(max(x, lo) - lo) / ((hi - lo) / nbins)``
  with both differences taken in double, capped at ``nbins - 1`` and truncated. NaN
  values are not counted (TF raises)."""
  n = _nbins(nbins)
  if value_range.shape != (2,):
    raise ValueError("value_range should be a vector of 2 elements.")
  x = values.reshape(-1)
  lo, hi = value_range[0], value_range[1]
  # TF's CPU kernel gives the results of double differences (exact for ints, no
  # float32 rounding of x - lo: tests/test_sort_buckets.py); x64 off computes in float32.
  wide = np.dtype(np.float64 if tfdtypes.x64_enabled() else np.float32)
  diff = jnp.maximum(x, lo).astype(wide) - lo.astype(wide)
  width = hi.astype(wide) - lo.astype(wide)
  q = jnp.minimum(diff / (width / np.array(n, wide)), np.array(n - 1, wide))
  q = jnp.where(jnp.isnan(q), np.array(n - 1, wide), q)  # inf / inf: an infinite value
  bins = jnp.clip(q, 0, n - 1).astype(np.int32)
  if jnp.issubdtype(x.dtype, jnp.floating):
    bins = jnp.where(jnp.isnan(x), n, bins)
  out = tfdtypes.canonical_dtype(dtype)
  return jnp.zeros((n,), out).at[bins].add(jnp.ones((), out), mode="drop")


def _histogram_check(values, value_range, *, nbins, dtype):
  nan = jnp.any(jnp.isnan(values)) if jnp.issubdtype(values.dtype, jnp.floating) else False
  bad_range = ~(value_range[0] < value_range[1])
  return (
    nan | bad_range,
    "Histogram values must not contain NaN, and value_range should "
    "satisfy value_range[0] < value_range[1]",
  )


HistogramFixedWidth = register_op(
  "HistogramFixedWidth",
  _histogram_impl,
  family=FAMILY,
  static=("nbins",),
  attrs=("dtype",),
  check=_histogram_check,
  jvp=rules.per_op(rules.no_grad_jvp),
  # A histogram per example has no TF-named batched form short of a segment op:
  # vmap of the impl.
  batching=None,
  spec=lambda st: st.Spec(_histogram_calls(st), skip={"jvp": _NO_GRAD, "vjp": _NO_GRAD}),
)


# --- bincount ---------------------------------------------------------------------------


def _size(size) -> int:
  n = scalar_int(size)
  if n < 0:
    raise ValueError(f"size ({n}) must be non-negative")
  return n


def _count_rows(idx, weights, size: int):
  """Per row of ``idx`` [R, N], the sum of ``weights`` [R, N] per value in
  ``[0, size)``; other values are dropped."""
  rows = idx.shape[0]
  valid = (idx >= 0) & (idx < size)
  offsets = (jnp.arange(rows, dtype=np.int64 if rows * size >= 2**31 else np.int32) * size)[:, None]
  flat = jnp.where(valid, idx.astype(offsets.dtype) + offsets, rows * size).reshape(-1)
  out = jnp.zeros((rows * size,), weights.dtype).at[flat].add(weights.reshape(-1), mode="drop")
  return out.reshape(rows, size)


def _bounded_size(op):
  """The hook of Bincount/DenseBincount: a ``size`` computed from the data
  (``tf.math.bincount``: ``max(arr) + 1`` clipped to minlength/maxlength) is taken
  from the ``dynamic_shape_bounds`` config when it bounds the node (the first n
  bins, padded with zero bins: exact with n = maxlength); else StaticInputError."""

  def interpret(ctx, node, inputs):
    attrs = interpreter.AttrView(node)
    grouped = opdefs.group_inputs(node.op, inputs, attrs)
    if folding.known_value(grouped["size"]) is None:  # an eager call knows it
      bound = interpreter.dynamic_shape_bound(node)
      if bound is None:
        raise errors.StaticInputError(
          node.op,
          node.name,
          "size",
          "the number of bins is computed from the data (tf.math.bincount: max(arr) + 1 "
          "clipped to [minlength, maxlength]); bound it with tfprims.update_config("
          f"'dynamic_shape_bounds', {{'{node.name}': maxlength}}) to get the first "
          "maxlength bins",
        )
      grouped["size"] = np.asarray(bound, rules.dtype_of(grouped["size"]))
    operands, params = op.prepare(grouped, attrs, node.name)
    if config.get_config("runtime_checks"):
      interpreter.run_check(op, node, operands, params)
    return [op.apply(operands, params)]

  return interpret


def _bincount_impl(arr, weights, *, size):
  """Sum of ``weights`` (or counts) per value of ``arr`` in ``[0, size)``; other
  values are dropped (TF ignores values >= size and raises on negative ones)."""
  n = _size(size)
  flat = arr.reshape(1, arr.size)
  if weights.size == 0:
    w = jnp.ones(flat.shape, weights.dtype)
  elif weights.size != flat.size:
    raise ValueError("Input indices and weights must have the same size.")
  else:
    w = weights.reshape(1, weights.size)
  return _count_rows(flat, w, n)[0]


def _negative_check(arr, weights, **_):
  return jnp.any(arr < 0), "Input arr must be non-negative!"


def _bincount_jvp(t, arr, weights, *, size):
  if weights.size == 0:
    return rules.zeros((_size(size),), t.dtype)
  return tfops.Bincount(arr, t, size=size)


def _bincount_transpose(ct, arr, weights, *, size):
  if not U(weights):
    return [None, None]
  shape = weights.aval.shape
  if math.prod(shape) == 0:
    return [None, rules.zeros(shape, weights.aval.dtype)]
  flat = rules.reshape(arr, (math.prod(np.shape(arr)),))
  return [None, rules.reshape(tfops.GatherV2(ct, flat, axis=0, batch_dims=0), shape)]


def _rows(x, d, size):
  """``x`` as [V, -1] rows, one per example (broadcast when unbatched)."""
  x = rules.with_batch_axis(x, d, size)
  return rules.reshape(x, (size, math.prod(x.shape[1:])))


def _bincount_batch(args, dims, *, size):
  """Each example's counts are a row of a 2-D ``tf.DenseBincount``."""
  (arr, w), (da, dw) = args, dims
  v = rules.batch_size(args, dims)
  rows = _rows(arr, da, v)
  example_w = rules.unbatched_shape(w, dw)
  weights = np.zeros((0,), rules.dtype_of(w)) if math.prod(example_w) == 0 else _rows(w, dw, v)
  return tfops.DenseBincount(rows, weights, size=size, binary_output=False), 0


Bincount = register_op(
  "Bincount",
  _bincount_impl,
  family=FAMILY,
  static=("size",),
  check=_negative_check,
  interpret=rules.per_op(_bounded_size),
  jvp=(None, _bincount_jvp),
  transpose=_bincount_transpose,
  batching=_bincount_batch,
  spec=lambda st: st.Spec(
    _bincount_calls(st, "arr", ("int32",), max_rank=3, flat=True),
    diff_args=("weights",),
    grad_oracle="fd",
    note="TF registers no gradient: the derivative in weights (a Bincount of the "
    "tangent; the transpose gathers) is checked by central differences",
  ),
)


def _dense_bincount_impl(input, weights, *, size, binary_output):
  """Per row of ``input`` (rank <= 2), the sum of ``weights`` (or counts, or 1 with
  ``binary_output``) per value in ``[0, size)``; other values are dropped."""
  n = _size(size)
  if input.ndim > 2:
    raise ValueError(f"Shape must be at most rank 2 but is rank {input.ndim}")
  if weights.size and weights.shape != input.shape:
    raise ValueError(
      "`weights` must be the same shape as `arr` or a length-0 `Tensor`, "
      "in which case it acts as all weights equal to 1."
    )
  rows = input if input.ndim == 2 else input.reshape(1, input.size)
  if binary_output or weights.size == 0:
    out = _count_rows(rows, jnp.ones(rows.shape, weights.dtype), n)
    if binary_output:
      out = (out > 0).astype(weights.dtype)
  else:
    out = _count_rows(rows, weights.reshape(rows.shape), n)
  return out if input.ndim == 2 else out[0]


def _dense_bincount_jvp(t, input, weights, *, size, binary_output):
  if binary_output or weights.size == 0:
    shape = (input.shape[:1] if input.ndim == 2 else ()) + (_size(size),)
    return rules.zeros(shape, t.dtype)
  return tfops.DenseBincount(input, t, size=size, binary_output=False)


def _dense_bincount_transpose(ct, input, weights, *, size, binary_output):
  if not U(weights):
    return [None, None]
  shape = weights.aval.shape
  if binary_output or math.prod(shape) == 0:
    return [None, rules.zeros(shape, weights.aval.dtype)]
  two_d = np.ndim(input) == 2
  return [None, tfops.GatherV2(ct, input, axis=int(two_d), batch_dims=int(two_d))]


def _dense_bincount_batch(args, dims, *, size, binary_output):
  """The examples' rows stacked: rank 0/1 inputs become rows of a 2-D call, rank 2
  inputs [V, R, N] are merged to [V * R, N]."""
  (x, w), (dx, dw) = args, dims
  v = rules.batch_size(args, dims)
  shape = rules.unbatched_shape(x, dx)
  x = rules.with_batch_axis(x, dx, v)
  rows = v * (shape[0] if len(shape) == 2 else 1)
  flat = rules.reshape(x, (rows, math.prod(shape[1:] if len(shape) == 2 else shape)))
  if math.prod(rules.unbatched_shape(w, dw)) == 0:
    weights = np.zeros((0,), rules.dtype_of(w))
  else:
    weights = rules.reshape(rules.with_batch_axis(w, dw, v), flat.shape)
  out = tfops.DenseBincount(flat, weights, size=size, binary_output=binary_output)
  n = _size(size)
  return rules.reshape(out, (v, shape[0], n) if len(shape) == 2 else (v, n)), 0


DenseBincount = register_op(
  "DenseBincount",
  _dense_bincount_impl,
  family=FAMILY,
  static=("size",),
  attrs=("binary_output",),
  check=_negative_check,
  interpret=rules.per_op(_bounded_size),
  jvp=(None, _dense_bincount_jvp),
  transpose=_dense_bincount_transpose,
  batching=_dense_bincount_batch,
  spec=lambda st: st.Spec(
    _bincount_calls(st, "input", ("int32", "int64"), max_rank=2, binary=True),
    diff_args=("weights",),
    grad_oracle="fd",
    note="TF registers no gradient: the derivative in weights is checked by central differences",
  ),
)


# --- property-test strategies (hypothesis is imported lazily) ---------------------


# NaN of both signs, which the searches' comparisons (``<``) answer false to.
_NANS = [np.nan, float(np.copysign(np.nan, -1.0))]


def _pick(draw, st, dtype, shape, pool):
  """An array of ``dtype``, its elements drawn from ``pool`` or from the dtype's
  range (NaN, ±inf and extremes included)."""
  hst = lazy_hst()
  base = draw(st.arrays(dtype, shape))
  if not pool or base.size == 0:
    return base
  which = draw(st.arrays("bool", shape))
  picks = np.asarray(
    draw(hst.lists(hst.sampled_from(pool), min_size=base.size, max_size=base.size))
  ).reshape(shape)
  return np.where(which, picks.astype(dtype), base).astype(dtype)


def _bucketize_calls(st):
  hst = lazy_hst()

  @st.composite
  def calls(draw):
    dtype = draw(st.dtypes(("int32", "int64", "float32", "float64")))
    bounds = draw(
      hst.lists(
        hst.one_of(
          hst.integers(-4, 4).map(float),
          hst.floats(-5, 5, width=32),
          hst.sampled_from([-np.inf, np.inf, -0.0]),
        ),
        max_size=6,
      )
    )
    bounds = sorted(bounds)
    pool = (
      sorted(set(bounds) | {0.0, 0.5, -3.0}) + _NANS
      if dtype.kind == "f"
      else [int(b) for b in bounds if np.isfinite(b)] + [0, -3, 3]
    )
    x = _pick(draw, st, dtype, draw(st.shapes()), pool)
    if dtype == np.int64:  # x64 off holds int64 in 32 bits
      x = np.clip(x, -(2**31), 2**31 - 1)
    return {"input": x, "boundaries": bounds}

  return calls()


def _search_calls(st):
  hst = lazy_hst()

  @st.composite
  def calls(draw):
    dtype = draw(st.dtypes(st.FLOATS + st.INTS))
    rows = draw(hst.integers(0, 3))
    m, n = draw(hst.integers(0, 6)), draw(hst.integers(0, 4))
    pool = [0, 1, 2, 3] + ([-0.0, 0.5, np.inf, -np.inf] + _NANS if st.is_float(dtype) else [])
    s = _pick(draw, st, dtype, (rows, m), pool)
    if draw(hst.integers(0, 3)):  # mostly sorted rows; unsorted ones follow TF too
      s = np.sort(s, axis=1)
    v = _pick(draw, st, dtype, (rows, n), pool + (s.reshape(-1).tolist()[:3]))
    if dtype.itemsize == 8 and dtype.kind in "iu":
      s, v = (
        np.clip(a, 0 if dtype.kind == "u" else -(2**31), 2**31 - 1).astype(dtype) for a in (s, v)
      )
    return {
      "sorted_inputs": s,
      "values": v,
      "out_type": np.dtype(draw(hst.sampled_from(["int32", "int64"]))),
    }

  return calls()


def _histogram_calls(st):
  hst = lazy_hst()

  @st.composite
  def calls(draw):
    dtype = draw(st.dtypes(("int32", "int64", "float32", "float64")))
    nbins = draw(hst.integers(1, 5))
    if dtype.kind == "f":
      lo = draw(hst.sampled_from([0.0, -1.0, 0.1, -2.5, 1e-3]))
      width = draw(hst.sampled_from([1.0, 0.9, 3.0, 10.0, 1e-3, 7.3]))
      edges = np.asarray([lo + width * i / nbins for i in range(nbins + 1)], dtype)
      near = [np.nextafter(edges, np.asarray(s, dtype)) for s in (-np.inf, np.inf)]
      pool = [float(e) for e in np.concatenate([edges] + near)] + [
        lo - 1.0,
        lo + width + 1.0,
        np.inf,
        -np.inf,
        -0.0,
      ]
      x = _pick(draw, st, dtype, draw(st.shapes()), pool)
      x = np.where(np.isnan(x), 0.5, x).astype(dtype)  # TF raises on NaN
      x = np.where(np.abs(x) > 1e30, np.copysign(np.inf, x), x).astype(dtype)
    else:
      lo = draw(hst.integers(-5, 5))
      width = draw(hst.integers(1, 12))
      x = draw(st.arrays(dtype, draw(st.shapes()), min_value=-(2**20), max_value=2**20))
      pool = [lo + width * i // nbins for i in range(nbins + 1)] + [lo - 1, lo + width]
      x = _pick(draw, st, dtype, x.shape, pool) if x.size else x
      x = np.clip(x, -(2**20), 2**20).astype(dtype)
    value_range = np.array([lo, lo + width], dtype)
    return {
      "values": x,
      "value_range": value_range,
      "nbins": np.int32(nbins),
      "dtype": np.dtype(draw(hst.sampled_from(["int32", "int64"]))),
    }

  return calls()


def _bincount_calls(st, arg, index_dtypes, *, max_rank, flat=False, binary=False):
  hst = lazy_hst()

  @st.composite
  def calls(draw):
    size = draw(hst.integers(0, 5))
    shape = draw(st.shapes(max_rank=max_rank))
    idx = draw(st.arrays(st.dtypes(index_dtypes), shape, min_value=0, max_value=size + 2))
    wtype = draw(st.dtypes(("int32", "int64", "float32", "float64")))
    # Bincount takes weights of the same size; DenseBincount of the same shape.
    kind = draw(
      hst.sampled_from(["empty", "same", "flat"] if flat and shape else ["empty", "same"])
    )
    wshape = {"empty": (0,), "same": shape, "flat": (int(np.prod(shape)),)}[kind]
    bound = (
      {"min_value": -100, "max_value": 100}
      if wtype.kind == "i"
      else {"min_value": -10.0, "max_value": 10.0}
    )
    out = {
      arg: idx,
      "size": np.asarray(size, idx.dtype if arg == "input" else np.int32),
      "weights": draw(st.arrays(wtype, wshape, **bound)),
    }
    if binary:
      out["binary_output"] = draw(hst.booleans())
    return out

  return calls()
