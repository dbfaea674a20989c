"""Comparing our outputs with TF's: dtype-aware tolerances and :func:`compare`.

Tolerances are ``(rtol, atol)`` per dtype name; a spec may override them
(``Spec.rtol``/``atol``, ``grad_rtol``/``grad_atol``, ``jit_tol``).
"""

from __future__ import annotations

import dataclasses
from typing import Mapping

import jax.numpy as jnp
import numpy as np

from tfprims.testing.spec import Spec

__all__ = [
  "VALUE_TOL",
  "GRAD_TOL",
  "JIT_TOL",
  "FD_TOL",
  "value_tolerance",
  "grad_tolerance",
  "derivative_tolerance",
  "jit_tolerance",
  "Diff",
  "compare",
]

# (rtol, atol) per dtype name. float16/bfloat16 are loose, float64 tight.
VALUE_TOL = {
  "float16": (5e-3, 1e-3),
  "bfloat16": (3e-2, 1e-2),
  "float32": (1e-5, 1e-6),
  "complex64": (1e-5, 1e-6),
  "float64": (1e-11, 1e-13),
  "complex128": (1e-11, 1e-13),
}
# Derivatives go through different formulas in TF and JAX: a little looser.
GRAD_TOL = {
  "float16": (2e-2, 4e-3),
  "bfloat16": (1e-1, 4e-2),
  "float32": (1e-4, 1e-5),
  "complex64": (1e-4, 1e-5),
  "float64": (1e-9, 1e-11),
  "complex128": (1e-9, 1e-11),
}
# jit vs eager run the same lowering: a few ulps at most.
JIT_TOL = {
  "float16": (4e-3, 1e-6),
  "bfloat16": (3e-2, 1e-5),
  "float32": (5e-7, 1e-12),
  "complex64": (5e-7, 1e-12),
  "float64": (1e-15, 1e-300),
  "complex128": (1e-15, 1e-300),
}
# Central differences are only accurate to ~eps**(2/3).
FD_TOL = {
  "float16": (2e-1, 1e-1),
  "bfloat16": (3e-1, 2e-1),
  "float32": (2e-2, 2e-3),
  "complex64": (2e-2, 2e-3),
  "float64": (1e-5, 1e-7),
  "complex128": (1e-5, 1e-7),
}


# --------------------------------------------------------------------------
# dtypes and tolerances


def _is_inexact(dtype) -> bool:
  return bool(jnp.issubdtype(dtype, jnp.inexact))


def _is_complex(dtype) -> bool:
  return bool(jnp.issubdtype(dtype, jnp.complexfloating))


def _resolve(value, dtype_name: str, default: float) -> float:
  if value is None:
    return default
  if isinstance(value, Mapping):
    return float(value.get(dtype_name, default))
  return float(value)


def value_tolerance(spec: Spec, dtype) -> tuple[float, float]:
  name = np.dtype(dtype).name
  rtol, atol = VALUE_TOL.get(name, (0.0, 0.0))
  return _resolve(spec.rtol, name, rtol), _resolve(spec.atol, name, atol)


def grad_tolerance(spec: Spec, dtype) -> tuple[float, float]:
  name = np.dtype(dtype).name
  rtol, atol = GRAD_TOL.get(name, (0.0, 0.0))
  vr, va = value_tolerance(spec, dtype)
  rtol, atol = max(rtol, vr), max(atol, va)
  return (
    _resolve(getattr(spec, "grad_rtol", None), name, rtol),
    _resolve(getattr(spec, "grad_atol", None), name, atol),
  )


def derivative_tolerance(call, diff_idx, out_dtypes):
  """``tol_fn(spec, dtype)`` for derivative comparisons: the loosest of
  ``grad_tolerance`` over the compared dtype, the differentiated inputs' and
  the float outputs' dtypes. An op whose output dtype differs from its inputs'
  (Cast float16 -> float64, Complex, ComplexAbs, BatchMatMulV3...) computes its
  derivatives no more precisely than its least precise dtype allows."""
  dts = {np.asarray(call.operands[i]).dtype for i in diff_idx}
  dts |= {np.dtype(d) for d in out_dtypes}

  def tol(spec, dtype):
    rtol, atol = grad_tolerance(spec, dtype)
    for d in dts:
      r, a = grad_tolerance(spec, d)
      rtol, atol = max(rtol, r), max(atol, a)
    return rtol, atol

  return tol


def jit_tolerance(spec: Spec, dtype) -> tuple[float, float]:
  name = np.dtype(dtype).name
  rtol, atol = JIT_TOL.get(name, (0.0, 0.0))
  tol = getattr(spec, "jit_tol", None)
  if tol is not None:
    return _resolve(tol, name, rtol), _resolve(tol, name, atol)
  return rtol, atol


# --------------------------------------------------------------------------
# Comparison


@dataclasses.dataclass
class Diff:
  ok: bool
  message: str = ""
  max_abs: float = 0.0
  max_rel: float = 0.0


def _fmt(v) -> str:
  if isinstance(v, (complex, np.complexfloating)):
    return f"{complex(v)!r}"
  if isinstance(v, (float, np.floating)):
    return f"{float(v)!r}"
  return repr(v.item() if hasattr(v, "item") else v)


def compare(
  actual,
  expected,
  *,
  rtol: float = 0.0,
  atol: float = 0.0,
  check_dtype: bool = True,
  what: str = "output",
  signed_zeros: bool = False,
) -> Diff:
  """Compares two arrays the way the runner does.

  Shapes (and dtypes when ``check_dtype``) must be equal; ints and bools
  exactly; floats with ``|a - e| <= atol + rtol * |e|``, complex values by
  the magnitudes ``|a - e|`` and ``|e|`` (part by part where a part is not
  finite); NaNs at the same positions (per part) and infinities equal.
  Two complex values that are both not finite, one with a NaN part, agree:
  TF's own complex products that overflow are NaN+NaNj in SIMD lanes and
  C99 infinities (e.g. -inf+infj) in scalar code, depending on position.
  """
  a, e = np.asarray(actual), np.asarray(expected)
  if a.shape != e.shape:
    return Diff(False, f"{what}: shape {a.shape} != expected {e.shape}")
  if check_dtype and a.dtype != e.dtype:
    return Diff(False, f"{what}: dtype {a.dtype} != expected {e.dtype}")
  if a.size == 0:
    return Diff(True)
  if not (_is_inexact(a.dtype) or _is_inexact(e.dtype)):
    bad = a != e
    if not bad.any():
      return Diff(True)
    return Diff(False, _mismatch_message(what, a, e, bad, "exact equality"))
  cplx = _is_complex(a.dtype) or _is_complex(e.dtype)
  if cplx:
    ac, ec = a.astype(np.complex128), e.astype(np.complex128)
    parts = [(ac.real, ec.real), (ac.imag, ec.imag)]
  else:
    parts = [(a.astype(np.float64), e.astype(np.float64))]
  bad = np.zeros(a.shape, bool)
  max_abs = max_rel = 0.0
  tiny = float(jnp.finfo(e.dtype).tiny) if _is_inexact(e.dtype) else 1e-300

  def within(err, ref, where):
    nonlocal bad, max_abs, max_rel
    bad |= where & (err > atol + rtol * ref)
    if where.any():
      max_abs = max(max_abs, float(err[where].max()))
      big = where & (ref >= tiny)
      if big.any():
        max_rel = max(max_rel, float((err[big] / ref[big]).max()))

  with np.errstate(invalid="ignore", over="ignore"):
    # Complex values whose parts are all finite: |a - e| against |e| (a tiny
    # part of a large value may carry the large value's rounding error).
    whole = (np.isfinite(ac) & np.isfinite(ec)) if cplx else np.zeros(a.shape, bool)
    overflowed = np.zeros(a.shape, bool)
    if cplx:
      within(np.where(whole, np.abs(ac - ec), 0.0), np.abs(ec), whole)
      has_nan = lambda z: np.isnan(z.real) | np.isnan(z.imag)
      overflowed = ~np.isfinite(ac) & ~np.isfinite(ec) & (has_nan(ac) | has_nan(ec))
    for pa, pe in parts:
      pa, pe = np.where(overflowed, 0.0, pa), np.where(overflowed, 0.0, pe)
      nan_a, nan_e = np.isnan(pa), np.isnan(pe)
      bad |= nan_a != nan_e
      inf = (np.isinf(pa) | np.isinf(pe)) & ~nan_a & ~nan_e
      bad |= inf & (pa != pe)
      if signed_zeros and not cplx:
        bad |= (pa == 0) & (pe == 0) & (np.signbit(pa) != np.signbit(pe))
      # Parts of complex values with a non-finite part, and real values.
      fin = np.isfinite(pa) & np.isfinite(pe) & ~whole
      within(np.where(fin, np.abs(pa - pe), 0.0), np.abs(pe), fin)
  if not bad.any():
    return Diff(True, max_abs=max_abs, max_rel=max_rel)
  tol = f"rtol={rtol:g}, atol={atol:g}" + (", signed zeros" if signed_zeros else "")
  msg = _mismatch_message(what, a, e, bad, tol)
  msg += f"\n  max abs err {max_abs:.3g}, max rel err {max_rel:.3g} (over finite elements)"
  return Diff(False, msg, max_abs, max_rel)


def _mismatch_message(what, a, e, bad, tol) -> str:
  idx = np.argwhere(bad)
  lines = [
    f"{what}: {len(idx)} of {a.size} elements differ ({tol}); shape {a.shape}, dtype {a.dtype}"
  ]
  for i in idx[:6]:
    i = tuple(int(k) for k in i)
    lines.append(f"  at {i}: got {_fmt(a[i])}, expected {_fmt(e[i])}")
  if len(idx) > 6:
    lines.append("  ...")
  return "\n".join(lines)
