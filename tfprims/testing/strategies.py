"""Hypothesis strategies for drawing TF op calls.

Op specs receive this module as ``st`` (``spec=lambda st: st.Spec(...)``) so op
modules need not import Hypothesis at import time. Specs name dtypes by the
groups below (``st.FLOATS + st.COMPLEX``); calls of elementwise ops and
activations are drawn by :func:`elementwise_calls` (:func:`unary_calls`,
:func:`binary_calls`), their arrays by :func:`draw_array`.
"""

from __future__ import annotations

from typing import Optional, Sequence

import numpy as np
from hypothesis import strategies as hst
from hypothesis.extra import numpy as hnp

from tfprims.testing.spec import Spec  # noqa: F401  (re-exported for specs)
from tfprims.testing.tf_kernels import onednn as tf_onednn  # noqa: F401  (for specs)

FLOATS = ("float16", "bfloat16", "float32", "float64")
COMPLEX = ("complex64", "complex128")
SIGNED = ("int8", "int16", "int32", "int64")
UNSIGNED = ("uint8", "uint16", "uint32", "uint64")
INTS = SIGNED + UNSIGNED
NUMERIC = FLOATS + INTS
ALL = NUMERIC + COMPLEX + ("bool",)

# Shapes are kept small: compile time, not arithmetic, is what property runs pay for.
MAX_RANK = 4
MAX_SIDE = 4


def np_dtype(name) -> np.dtype:
  if isinstance(name, np.dtype):
    return name
  if name == "bfloat16":
    import ml_dtypes

    return np.dtype(ml_dtypes.bfloat16)
  return np.dtype(name)


def kind(dtype) -> str:
  """numpy's dtype kind, with bfloat16 (numpy kind ``'V'``) as ``'f'``."""
  dtype = np_dtype(dtype)
  return "f" if dtype.name == "bfloat16" else dtype.kind


def is_float(dtype) -> bool:
  """A real floating dtype, bfloat16 included."""
  return kind(dtype) == "f"


def is_inexact(dtype) -> bool:
  """A float (bfloat16 included) or complex dtype."""
  return kind(dtype) in "fc"


def dtypes(names: Sequence[str] = FLOATS) -> hst.SearchStrategy:
  """One of the named dtypes, as ``np.dtype``."""
  return hst.sampled_from([np_dtype(n) for n in names])


def shapes(
  min_rank: int = 0, max_rank: int = MAX_RANK, min_side: int = 0, max_side: int = MAX_SIDE
) -> hst.SearchStrategy:
  """Shapes including scalars, size-1 and zero-size dimensions."""
  return hnp.array_shapes(
    min_dims=min_rank, max_dims=max_rank, min_side=min_side, max_side=max_side
  )


def broadcastable_shapes(
  n: int = 2,
  min_rank: int = 0,
  max_rank: int = MAX_RANK,
  min_side: int = 0,
  max_side: int = MAX_SIDE,
):
  """``n`` shapes that broadcast together (numpy/TF right-aligned rules)."""
  return hnp.mutually_broadcastable_shapes(
    num_shapes=n, min_dims=min_rank, max_dims=max_rank, min_side=min_side, max_side=max_side
  ).map(lambda r: r.input_shapes)


def elements(
  dtype,
  *,
  special: bool = True,
  min_value=None,
  max_value=None,
  allow_nan: Optional[bool] = None,
  allow_inf: Optional[bool] = None,
):
  """Values of ``dtype``; with ``special`` floats include NaN, ±inf, -0.0 and
  subnormals and integers include their extremes."""
  dtype = np_dtype(dtype)
  if dtype == np.bool_:
    return hst.booleans()
  if dtype.kind in "iu":
    info = np.iinfo(dtype)
    lo = info.min if min_value is None else max(int(min_value), int(info.min))
    hi = info.max if max_value is None else min(int(max_value), int(info.max))
    base = hst.integers(lo, hi)
    if special and min_value is None and max_value is None:
      edges = [int(info.min), int(info.max), 0, 1, -1 if lo < 0 else 0]
      return hst.one_of(base, hst.sampled_from(edges))
    return base
  if dtype.kind == "c":
    part = np.float32 if dtype == np.complex64 else np.float64
    f = elements(
      part,
      special=special,
      min_value=min_value,
      max_value=max_value,
      allow_nan=allow_nan,
      allow_inf=allow_inf,
    )
    return hst.builds(complex, f, f)
  # Floats (float16/bfloat16 are drawn as float32 and rounded by the array cast).
  width = {2: 16, 4: 32, 8: 64}.get(dtype.itemsize, 32)
  if dtype.name == "bfloat16":
    width = 32
  bounded = min_value is not None or max_value is not None
  nan = (special and not bounded) if allow_nan is None else allow_nan
  inf = (special and not bounded) if allow_inf is None else allow_inf
  if bounded:
    # Hypothesis refuses NaN with bounds; ±inf only where a bound is open.
    nan = False
    inf = inf and (min_value is None or max_value is None)
  min_value, max_value = _representable_bounds(min_value, max_value, width)
  return hst.floats(
    min_value=min_value,
    max_value=max_value,
    allow_nan=nan,
    allow_infinity=inf,
    width=width,
    # None: subnormals wherever the bounds include them
    allow_subnormal=None if special else False,
  )


def _representable_bounds(lo, hi, width):
  """Float bounds rounded inward to values representable at ``width`` bits
  (Hypothesis refuses others, e.g. float32 bounds of ±(2**31 - 1))."""
  ftype = {16: np.float16, 32: np.float32, 64: np.float64}[width]
  info = np.finfo(ftype)

  def fit(v, direction):
    if v is None:
      return None
    v = float(v)
    v = min(max(v, float(info.min)), float(info.max))
    f = ftype(v)
    if direction > 0 and float(f) < v:
      f = np.nextafter(f, ftype(np.inf))
    if direction < 0 and float(f) > v:
      f = np.nextafter(f, ftype(-np.inf))
    return float(f)

  return fit(lo, 1), fit(hi, -1)


# --- edge values ----------------------------------------------------------------------
#
# Real programs live on the edges that uniform draws almost never hit: ±0, ±inf, NaN of
# both signs, subnormals, the dtype's extremes, integer-valued floats, the exact bounds
# of an op's domain (a box coordinate of 1.0, an index at the last position) and ties.
# ``arrays`` draws, for a share of its arrays, a few elements from these values
# ("edges") or the whole array from a pool of two or three values ("ties").

NEG_NAN = float(np.copysign(np.nan, -1.0))

# The ``Spec.ignore_zero_sign`` reason of ops whose outputs are sums (matmuls,
# convolutions, resampling, reductions' gradients): the sign of an exact zero sum
# depends on the kernel's accumulation, which TF does not keep consistent and XLA
# does not keep at all (docs/fidelity.md, "Signed zeros").
ACCUMULATED_ZERO_SIGN = (
  "an exact zero sum: TF's kernels accumulate from +0.0 (gemm, convolutions) or from "
  "the first term (Eigen's reductions: Sum of one -0.0 is -0.0, of two is +0.0); XLA "
  "rewrites a one-term sum as its term and folds x + 0.0, so the sign of a zero sum "
  "follows neither"
)

# How ``arrays`` draws: mostly plain values, a few edges and ties (weights out of 10).
_PLAIN, _EDGES, _TIES_MODE = 4, 4, 2


def edge_values(
  dtype,
  *,
  special: bool = True,
  min_value=None,
  max_value=None,
  allow_nan: Optional[bool] = None,
  allow_inf: Optional[bool] = None,
) -> list:
  """The boundary values of ``dtype`` within the bounds a spec draws from.

  Floats: ±0, ±1, ±2, ±0.5 and the bounds themselves and integers next to them; with
  ``special`` (unbounded) also NaN of both signs, ±inf, ±max, ±tiny and the smallest
  subnormal. Integers: the bounds (or the dtype's extremes), 0 and ±1. Complex and
  bool: none (their special values are drawn by the specs that want them).
  """
  dtype = np_dtype(dtype)
  k = kind(dtype)
  if k in "iu":
    info = np.iinfo(dtype)
    lo = int(info.min) if min_value is None else max(int(min_value), int(info.min))
    hi = int(info.max) if max_value is None else min(int(max_value), int(info.max))
    if min_value is None and max_value is None and not special:
      lo, hi = max(lo, -3), min(hi, 3)
    cands = [lo, hi, 0, 1, -1, lo + 1, hi - 1]
    return sorted({v for v in cands if lo <= v <= hi})
  if k != "f":
    return []
  if dtype.name == "bfloat16":
    import ml_dtypes

    finfo = ml_dtypes.finfo(dtype)
  else:
    finfo = np.finfo(dtype)
  bounded = min_value is not None or max_value is not None
  nan = (special and not bounded) if allow_nan is None else (allow_nan and not bounded)
  inf = (special and not bounded) if allow_inf is None else allow_inf
  lo = -np.inf if min_value is None else float(min_value)
  hi = np.inf if max_value is None else float(max_value)
  cands = [0.0, -0.0, 1.0, -1.0, 2.0, -2.0, 0.5, -0.5]
  for b in (min_value, max_value):
    if b is not None and np.isfinite(b):
      cands.append(float(b))
      if abs(b) < 2**24:
        cands += [np.floor(b), np.ceil(b), np.floor(b) + 1, np.ceil(b) - 1]
  if special and not bounded:
    cands += [
      float(finfo.max),
      -float(finfo.max),
      float(finfo.tiny),
      -float(finfo.tiny),
      float(finfo.smallest_subnormal),
      -float(finfo.smallest_subnormal),
    ]
  out, seen = [], set()
  for v in cands:
    # Rounded to the dtype (bounds inward, as ``elements`` does), kept if inside.
    r = float(np.asarray(v, np.float64).astype(dtype).astype(np.float64))
    if r != v and v in (min_value, max_value):
      r = _representable_bounds(
        v if v == min_value else None,
        v if v == max_value else None,
        {2: 16}.get(dtype.itemsize, 32 if dtype.itemsize == 4 or dtype.name == "bfloat16" else 64),
      )
      r = [x for x in r if x is not None][0]
      r = float(np.asarray(r, np.float64).astype(dtype).astype(np.float64))
    if lo <= r <= hi and np.copysign(1.0, r).tobytes() + np.float64(r).tobytes() not in seen:
      seen.add(np.copysign(1.0, r).tobytes() + np.float64(r).tobytes())
      out.append(r)
  if inf:
    out += ([np.inf] if max_value is None else []) + ([-np.inf] if min_value is None else [])
  if nan:
    out += [np.nan, NEG_NAN]
  return out


@hst.composite
def arrays(
  draw,
  dtype,
  shape=None,
  *,
  special: bool = True,
  min_value=None,
  max_value=None,
  allow_nan: Optional[bool] = None,
  allow_inf: Optional[bool] = None,
  unique: bool = False,
  edges: bool = True,
):
  """A numpy array; ``dtype`` and ``shape`` may be values or strategies.

  With ``edges`` (the default) some arrays get a few elements from
  :func:`edge_values` (within the same bounds and specials) and some are made of
  ties (two or three values, edge values among them); ``unique`` arrays get no
  ties. ``edges=False`` draws plain values only.
  """
  if isinstance(dtype, hst.SearchStrategy):
    dtype = draw(dtype)
  dtype = np_dtype(dtype)
  if shape is None:
    shape = shapes()
  if isinstance(shape, hst.SearchStrategy):
    shape = draw(shape)
  shape = tuple(shape)
  elems = elements(
    dtype,
    special=special,
    min_value=min_value,
    max_value=max_value,
    allow_nan=allow_nan,
    allow_inf=allow_inf,
  )
  draw_dtype = np.dtype(np.float32) if dtype.name == "bfloat16" else dtype
  size = int(np.prod(shape))
  edge = (
    edge_values(
      dtype,
      special=special,
      min_value=min_value,
      max_value=max_value,
      allow_nan=allow_nan,
      allow_inf=allow_inf,
    )
    if edges
    else []
  )
  mode = draw(hst.integers(0, _PLAIN + _EDGES + _TIES_MODE - 1)) if edge and size else 0
  if mode >= _PLAIN + _EDGES and not unique:
    pool = draw(hst.lists(hst.one_of(hst.sampled_from(edge), elems), min_size=1, max_size=3))
    which = draw(hnp.arrays(np.int8, shape, elements=hst.integers(0, len(pool) - 1)))
    return np.asarray(pool, draw_dtype)[which].astype(dtype)
  value = draw(hnp.arrays(draw_dtype, shape, elements=elems, unique=unique))
  if mode >= _PLAIN:
    flat = value.reshape(-1).copy()
    # Half the picks from the non-finite values (when the draw allows them).
    nonfinite = [v for v in edge if not np.isfinite(v)]
    value_of = hst.sampled_from(edge)
    if nonfinite:
      value_of = hst.one_of(hst.sampled_from(nonfinite), value_of)
    picks = draw(
      hst.lists(hst.tuples(hst.integers(0, size - 1), value_of), min_size=1, max_size=min(size, 6))
    )
    for i, v in picks:
      if unique and np.isin(np.asarray(v, draw_dtype), flat).any():
        continue
      flat[i] = v
    value = flat.reshape(shape)
  return value.astype(dtype)


def call(**kwargs) -> hst.SearchStrategy:
  """A dict of ``tf.raw_ops`` keyword arguments; values may be strategies or constants."""
  return hst.fixed_dictionaries(
    {k: v if isinstance(v, hst.SearchStrategy) else hst.just(v) for k, v in kwargs.items()}
  )


def unary(dtype_names: Sequence[str] = FLOATS, arg: str = "x", **elem_kwargs):
  """Calls of a one-input op: plain values from :func:`elements` (elementwise
  math draws TF/XLA-safe values and ties with :func:`unary_calls`)."""
  return call(**{arg: arrays(dtypes(dtype_names), shapes(), **elem_kwargs)})


@hst.composite
def binary(
  draw, dtype_names: Sequence[str] = FLOATS, args: Sequence[str] = ("x", "y"), **elem_kwargs
):
  """Calls of a two-input broadcasting op, both inputs of one dtype, plain values
  from :func:`elements` (see :func:`binary_calls` for elementwise math)."""
  dtype = draw(dtypes(dtype_names))
  shape_a, shape_b = draw(broadcastable_shapes(2))
  return {
    args[0]: draw(arrays(dtype, shape_a, **elem_kwargs)),
    args[1]: draw(arrays(dtype, shape_b, **elem_kwargs)),
  }


# --- calls of elementwise ops (elementwise math and activations) -----------------------
#
# ``unary``/``binary`` above draw plain values; the builders below draw values on
# which TF's CPU kernels and XLA are both well defined (complex components, float16
# subnormals, 64-bit integers under x64 off) and, now and then, from a few tie values.

_COMPLEX_BOUND = 1e4
_TIES = {
  "f": [0.0, -0.0, 1.0, -1.0, 2.0, 0.5, np.nan, np.inf, -np.inf],
  "c": [0j, 0.5 + 0j, -0.5j, 1 + 1j, -2 + 0.5j],
  "i": [0, 1, -1, 2, -2, 3],
  "u": [0, 1, 2, 3],
  "b": [False, True],
}


def draw_array(
  draw,
  dtype,
  shape,
  *,
  lo=None,
  hi=None,
  int_lo=None,
  int_hi=None,
  wide=2**31 - 1,
  cbound=None,
  cnonzero=False,
  special=True,
  nonzero=False,
  finite=False,
  ties=False,
  subnormal=True,
  neg_zero=True,
  magnitude=None,
) -> np.ndarray:
  """One array of ``dtype`` and ``shape``, drawn with ``draw`` (inside a
  :func:`composite`).

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
  values (ties, NaN, ±inf). ``nonzero`` replaces zeros by ones.

  Real floats only, for values on which TF's kernels disagree with themselves (by
  SIMD packet or tail) or with XLA's (which flushes subnormals): ``subnormal=False``
  flushes subnormals to ±0; ``neg_zero=False`` makes -0.0 and negative subnormals
  (-0.0 to a kernel that flushes them) +0.0; ``magnitude=(lo, hi)`` keeps finite
  nonzero magnitudes within [lo, hi] (either may be None): smaller ones become ±0,
  larger ones ±hi.
  """
  if ties:
    values = _TIES[kind(dtype)]
    if finite:
      values = [v for v in values if np.isfinite(v)]
    size = int(np.prod(shape))
    vals = draw(hst.lists(hst.sampled_from(values), min_size=size, max_size=size))
    x = np.array(
      vals, dtype=np.complex64 if kind(dtype) == "c" else np.float32 if kind(dtype) == "f" else None
    ).reshape(shape)
    if kind(dtype) == "u":
      x = x.astype(np.int64)
    x = x.astype(dtype)
  elif kind(dtype) in "iu":
    kw = {}
    lo_i, hi_i = int_lo, int_hi
    if dtype.itemsize == 8:
      lo_i = max(-wide if kind(dtype) == "i" else 0, lo_i if lo_i is not None else -wide)
      hi_i = min(wide, hi_i if hi_i is not None else wide)
    if lo_i is not None:
      kw["min_value"] = lo_i
    if hi_i is not None:
      kw["max_value"] = hi_i
    x = draw(arrays(dtype, shape, special=special, **kw))
  elif kind(dtype) == "b":
    x = draw(arrays(dtype, shape))
  else:
    draw_dtype = {"float64": np.dtype("float32"), "complex128": np.dtype("complex64")}.get(
      dtype.name, dtype
    )
    kw = {}
    if kind(dtype) == "c":
      bound = _COMPLEX_BOUND if cbound is None else cbound
      lo = -bound if lo is None else lo
      hi = bound if hi is None else hi
    if lo is not None:
      kw["min_value"] = lo
    if hi is not None:
      kw["max_value"] = hi
    if finite:
      kw["allow_nan"], kw["allow_inf"] = False, False
    x = draw(arrays(draw_dtype, shape, special=special and kind(dtype) != "c", **kw)).astype(dtype)
    if dtype.name == "float16":
      # XLA's vectorised CPU code flushes float16 subnormals in some ops (a
      # division's result then depends on the array's size); TF does not.
      tiny = np.finfo(np.float16).tiny
      x = np.where(np.abs(x) < tiny, np.copysign(np.float16(0), x), x).astype(dtype)
  if kind(dtype) == "c" and not ties:
    # No zero components: on branch cuts (Sqrt/Log of negative reals, Asin of
    # reals > 1...) the side taken depends on the sign of a zero imaginary part,
    # which std::complex and XLA treat differently.
    x = np.where(x.real == 0, 0.25, x.real) + 1j * np.where(x.imag == 0, 0.25, x.imag)
    x = x.astype(dtype)
  if kind(dtype) == "f":
    x = _restrict_floats(x, subnormal=subnormal, neg_zero=neg_zero, magnitude=magnitude)
  if nonzero or (cnonzero and kind(dtype) == "c"):
    x = np.where(x == 0, np.ones((), dtype), x).astype(dtype)
  return x


def _restrict_floats(x, *, subnormal=True, neg_zero=True, magnitude=None):
  """``draw_array``'s ``subnormal``, ``neg_zero`` and ``magnitude`` on real floats."""
  dtype = x.dtype
  zero = np.zeros((), dtype)
  tiny = float(_finfo(dtype).tiny)
  if not subnormal:
    w = x.astype(np.float64)
    x = np.where(np.abs(w) < tiny, np.copysign(zero, x), x)
  if magnitude is not None:
    lo, hi = magnitude
    w = x.astype(np.float64)
    if lo is not None:
      x = np.where((w != 0) & (np.abs(w) < lo), np.copysign(zero, x), x)
    if hi is not None and hi < float(_finfo(dtype).max):
      x = np.where(np.isfinite(w) & (np.abs(w) > hi), np.copysign(np.asarray(hi, dtype), x), x)
  if not neg_zero:
    w = x.astype(np.float64)
    x = np.where(np.signbit(w) & (np.abs(w) < tiny), zero, x)
  return np.asarray(x, dtype)


def _finfo(dtype):
  if np_dtype(dtype).name == "bfloat16":
    import ml_dtypes

    return ml_dtypes.finfo(dtype)
  return np.finfo(dtype)


def _grid_keeps(values, dtype, kw) -> list:
  """The edge values ``draw_array`` would draw with ``kw``'s ``subnormal``,
  ``neg_zero`` and ``magnitude`` (those it would change are left out of the grid)."""
  if kind(dtype) != "f":
    return values
  arr = np.asarray(values, np.float64).astype(dtype)
  kept = _restrict_floats(
    arr,
    subnormal=kw.get("subnormal", True),
    neg_zero=kw.get("neg_zero", True),
    magnitude=kw.get("magnitude"),
  )
  same = (np.isnan(arr) & np.isnan(kept)) | ((arr == kept) & (np.signbit(arr) == np.signbit(kept)))
  return [v for v, keep in zip(values, same) if keep]


def elementwise_calls(
  arg_names: Sequence[str],
  dtype_names: Sequence[str],
  *,
  same_shape: bool = False,
  attrs: Optional[dict] = None,
  per_arg: Optional[dict] = None,
  tie_prob: bool = True,
  **array_kw,
):
  """Calls of an elementwise op: every input of one dtype drawn from
  ``dtype_names``, shapes mutually broadcastable (or equal); values by
  :func:`draw_array` with ``array_kw``, and ``per_arg`` gives extra kwargs per
  input; ``attrs`` maps attr name -> a strategy, a value, or a function of the
  dtype returning one. Some draws use few distinct values (ties, NaN, ±inf)
  when ``tie_prob``."""
  per_arg = per_arg or {}

  @hst.composite
  def draw(draw):
    dtype = draw(dtypes(dtype_names))
    if same_shape:
      shape = draw(shapes())
      shapes_ = [shape] * len(arg_names)
    else:
      shapes_ = draw(broadcastable_shapes(len(arg_names)))
    ties = tie_prob and draw(hst.integers(0, 3)) == 0
    out = {}
    for name, shape in zip(arg_names, shapes_):
      kw = dict(array_kw)
      kw.update(per_arg.get(name, {}))
      if ties and not {"lo", "hi", "int_lo", "int_hi"} & set(kw):
        kw["ties"] = True
      out[name] = draw_array(draw, dtype, shape, **kw)
    for name, value in (attrs or {}).items():
      if callable(value) and not hasattr(value, "example"):
        value = value(dtype)
      out[name] = draw(value) if hasattr(value, "example") else value
    return out

  strategy = draw()
  strategy.canonical_cases = edge_grid_calls(
    arg_names, dtype_names, attrs=attrs, per_arg=per_arg, **array_kw
  )
  return strategy


def edge_grid_calls(
  arg_names: Sequence[str],
  dtype_names: Sequence[str],
  *,
  attrs: Optional[dict] = None,
  per_arg: Optional[dict] = None,
  **array_kw,
) -> list:
  """The canonical case of an elementwise op: every combination of the inputs'
  :func:`edge_values` (within the bounds ``draw_array``'s keywords give each input,
  without the values its ``subnormal``, ``neg_zero`` and ``magnitude`` would change),
  in float32 (or the op's first float, else integer, dtype). None when an attr is only
  known as a strategy. The runner runs it in every check (``canonical_cases``)."""
  per_arg = per_arg or {}
  floats = [d for d in ("float32", "float64", "float16", "bfloat16") if d in dtype_names]
  ints = [d for d in dtype_names if kind(d) in "iu"]
  if not (floats or ints):
    return []
  dtype = np_dtype((floats or ints)[0])
  grids = []
  for name in arg_names:
    kw = dict(array_kw)
    kw.update(per_arg.get(name, {}))
    if kind(dtype) == "f":
      bounds = dict(min_value=kw.get("lo"), max_value=kw.get("hi"), special=kw.get("special", True))
      if kw.get("finite"):
        bounds.update(allow_nan=False, allow_inf=False)
    else:
      lo, hi = kw.get("int_lo"), kw.get("int_hi")
      if dtype.itemsize == 8:
        wide = kw.get("wide", 2**31 - 1)
        lo = max(-wide if kind(dtype) == "i" else 0, lo if lo is not None else -wide)
        hi = min(wide, hi if hi is not None else wide)
      bounds = dict(min_value=lo, max_value=hi)
    values = _grid_keeps(edge_values(dtype, **bounds), dtype, kw)
    if kw.get("nonzero"):
      values = [v for v in values if v != 0]
    if dtype.name == "float16":  # as draw_array: no float16 subnormals
      values = [v for v in values if not 0 < abs(v) < np.finfo(np.float16).tiny]
    if not values:
      return []
    grids.append(np.asarray(values, np.float64 if kind(dtype) == "f" else np.int64))
  mesh = np.meshgrid(*grids, indexing="ij")
  call = {name: m.ravel().astype(dtype) for name, m in zip(arg_names, mesh)}
  for name, value in (attrs or {}).items():
    if callable(value) and not hasattr(value, "example"):
      value = value(dtype)
    if hasattr(value, "example"):
      return []
    call[name] = value
  return [call]


def unary_calls(dtype_names: Sequence[str], arg: str = "x", **kw):
  """Calls of a one-input elementwise op (:func:`elementwise_calls`)."""
  return elementwise_calls((arg,), dtype_names, **kw)


def binary_calls(dtype_names: Sequence[str], args: Sequence[str] = ("x", "y"), **kw):
  """Calls of a two-input broadcasting op (:func:`elementwise_calls`)."""
  return elementwise_calls(args, dtype_names, **kw)


# Re-exported so specs can build anything else they need.
just = hst.just
sampled_from = hst.sampled_from
integers = hst.integers
booleans = hst.booleans
floats = hst.floats
composite = hst.composite
tuples = hst.tuples
lists = hst.lists
one_of = hst.one_of
fixed_dictionaries = hst.fixed_dictionaries


# --- gather and scatter (coverage: gather-scatter) ------------------------------------
#
# Calls of the nd gathers (GatherNd, ResourceGatherNd) and nd scatters
# (TensorScatter*, ScatterNdNonAliasingAdd, ResourceScatterNd*): ``indices [..., K]``
# index the leading K dims of a tensor.


def draw_nd_indices(
  draw,
  bounds,
  lead,
  k: int,
  index_dtypes=("int32", "int64"),
  *,
  oor: bool = False,
  unique: bool = False,
) -> np.ndarray:
  """``lead + (k,)`` index vectors into the leading ``k`` dims of ``bounds``: in range
  (duplicates likely), all distinct with ``unique`` (``lead`` must then fit), or with
  ``oor`` sometimes out of range or negative."""
  dtype = draw(dtypes(index_dtypes))
  lead = tuple(int(d) for d in lead)
  n = int(np.prod(lead))
  if k == 0:
    return np.zeros(lead + (0,), dtype)
  bounds = [int(b) for b in bounds[:k]]
  if unique:
    flat = draw(hst.permutations(range(int(np.prod(bounds)))))[:n]
    return (
      np.stack(np.unravel_index(np.asarray(flat, np.int64), bounds), -1)
      .reshape(lead + (k,))
      .astype(dtype)
    )
  cols = [
    draw(arrays(dtype, lead, min_value=-2 if oor else 0, max_value=b + 1 if oor else max(b - 1, 0)))
    for b in bounds
  ]
  return np.stack(cols, axis=-1).reshape(lead + (k,)).astype(dtype)


def nd_gather_calls(
  index_dtypes=("int32", "int64"), *, policy: bool = True, params_arg: str = "params"
):
  """Calls of an nd gather: any dtype, in-range indices; with ``policy`` (GatherNd)
  also ``bad_indices_policy`` "" / "ERROR", or "IGNORE" with out-of-range indices."""

  @hst.composite
  def calls(draw):
    params = draw(arrays(dtypes(ALL), shapes(min_rank=1, max_rank=3)))
    if params.size == 0:  # TF raises for any index vector into empty params
      k = draw(hst.integers(1, params.ndim))
      lead = (0,) + tuple(draw(shapes(max_rank=1, max_side=2)))
    else:
      k = draw(hst.integers(0, params.ndim))
      lead = tuple(draw(shapes(max_rank=2, max_side=3)))
    ignore = policy and draw(hst.booleans())
    kw = {
      params_arg: params,
      "indices": draw_nd_indices(draw, params.shape, lead, k, index_dtypes, oor=ignore),
    }
    if policy:
      kw["bad_indices_policy"] = "IGNORE" if ignore else draw(hst.sampled_from(["", "ERROR"]))
    return kw

  return calls()


def nd_scatter_calls(
  dtype_names: Sequence[str],
  *,
  tensor_arg: str = "tensor",
  index_dtypes=("int32", "int64"),
  policy: bool = True,
  unique: bool = False,
  distinct: bool = False,
):
  """Calls of an nd scatter ``op(tensor, indices, updates)``: ``K >= 1`` (TF rejects
  ``K == 0``), updates of shape ``indices.shape[:-1] + tensor.shape[K:]`` (at least
  a vector, as TF requires), duplicate index vectors likely (distinct with
  ``unique``); with ``policy`` also ``bad_indices_policy`` "" or "IGNORE" with
  out-of-range indices. ``distinct``: float values all different, without NaN
  (derivatives by central differences, where ties would be non-smooth points)."""

  @hst.composite
  def calls(draw):
    dtype = np_dtype(draw(dtypes(dtype_names)))
    shape = tuple(draw(shapes(min_rank=1, max_rank=3, min_side=1)))
    k = draw(hst.integers(1, len(shape)))
    max_lead = int(np.prod(shape[:k])) if unique else 3
    lead = tuple(
      draw(shapes(min_rank=1 if k == len(shape) else 0, max_rank=2, max_side=min(3, max_lead)))
    )
    if unique and int(np.prod(lead)) > max_lead:
      lead = (max_lead,)
    ignore = policy and not unique and draw(hst.booleans())
    indices = draw_nd_indices(draw, shape, lead, k, index_dtypes, oor=ignore, unique=unique)
    ushape = lead + shape[k:]
    if distinct and is_float(dtype):
      size = int(np.prod(shape)) + int(np.prod(ushape))
      perm = np.asarray(draw(hst.permutations(range(size))), np.float64)
      values = ((perm - size // 2) * 0.5).astype(dtype)  # exact in every float dtype
      tensor = values[: int(np.prod(shape))].reshape(shape)
      updates = values[int(np.prod(shape)) :].reshape(ushape)
    else:
      tensor = draw(arrays(dtype, shape))
      updates = draw(arrays(dtype, ushape))
    kw = {tensor_arg: tensor, "indices": indices, "updates": updates}
    if policy:
      kw["bad_indices_policy"] = "IGNORE" if ignore else ""
    return kw

  return calls()


# --- added for special functions (coverage: elementwise special functions) -------------


def flush_subnormals(x: np.ndarray) -> np.ndarray:
  """``x`` with float32/float64 subnormals replaced by ±0: XLA's CPU code treats
  subnormal inputs as zero (``log(1e-45)`` is -inf) where TF's kernels do not,
  so specs of functions with a pole or a log at 0 draw none."""
  x = np.asarray(x)
  if kind(x.dtype) != "f" or x.dtype.itemsize < 4:
    return x
  tiny = np.finfo(x.dtype).tiny
  return np.where(np.abs(x) < tiny, np.copysign(np.zeros((), x.dtype), x), x).astype(x.dtype)


# --- Xla* ops (cov-xla-ops) ---------------------------------------------------------------

permutations = hst.permutations
