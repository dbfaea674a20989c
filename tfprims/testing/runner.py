"""The generic property-test runner: every registered op against ``tf.raw_ops.<Op>``.

For each call drawn from an op's :class:`~tfprims.testing.Spec` (keyword
arguments for ``tf.raw_ops.<Op>``) the runner checks, with TF eager as the
oracle:

``values``  our primitive, eager and under ``jax.jit``, equals TF (dtype-aware
            tolerances; NaN positions and infinities must match exactly).
``shape``   the primitive's abstract eval equals TF's result shape and dtype,
            with x64 on (exact 64-bit dtypes) and with x64 off (canonical dtypes,
            and no JAX "dtype not available" warning).
``jvp``     ``jax.jvp`` through the primitive's JVP rule equals
            ``tf.autodiff.ForwardAccumulator`` (or a ``tf.GradientTape``
            dot-product test / central differences, see ``Spec.grad_oracle``).
``vjp``     ``jax.vjp`` (JVP + transpose rules) equals ``tf.GradientTape``.
``vmap``    ``jax.vmap`` over a batch of 2-3 calls (same shapes, different
            values, drawn ``in_axes`` with some operands unbatched) equals the
            per-example results (ours and TF's); ``vmap`` of the VJP too.
``jit``     ``jax.jit`` equals eager (exact for ints, ulp-tight for floats).

Calls TF rejects (``tf.errors.OpError``) are discarded but counted: a spec
whose calls TF mostly rejects fails. Failures shrink (Hypothesis) and print a
ready-to-run ``tf.raw_ops`` snippet.

Public entry points: :func:`check_op`, :func:`property_test`, :func:`run_checks`,
:func:`temporary_op`.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import hashlib
import json
import math
import os
import time
import warnings
from typing import Any, Callable, Iterable, Mapping, Optional, Sequence, Union

import hypothesis
import jax
import jax.numpy as jnp
import numpy as np
from hypothesis import strategies as hst

from tfprims import core, opdefs
from tfprims.testing import strategies as st_module
from tfprims.testing.spec import CHECKS, Spec

__all__ = [
    "check_op", "property_test", "run_checks", "temporary_op", "OpCheckError",
    "OpReport", "CheckResult", "compare", "register_profiles", "auto_skips",
    "recorded_errors", "write_errors", "ERRORS_ENV", "load_spec", "CheckFailure",
    "make_call", "prepare_call", "snippet",
]

#: Environment variable naming a JSON file where the largest errors vs TF are
#: recorded (merged per op) at the end of a pytest session.
ERRORS_ENV = "TFPRIMS_MAX_ERRORS"

# (rtol, atol) per dtype name. float16/bfloat16 are loose, float64 tight.
VALUE_TOL = {
    "float16": (5e-3, 1e-3), "bfloat16": (3e-2, 1e-2),
    "float32": (1e-5, 1e-6), "complex64": (1e-5, 1e-6),
    "float64": (1e-11, 1e-13), "complex128": (1e-11, 1e-13),
}
# Derivatives go through different formulas in TF and JAX: a little looser.
GRAD_TOL = {
    "float16": (2e-2, 4e-3), "bfloat16": (1e-1, 4e-2),
    "float32": (1e-4, 1e-5), "complex64": (1e-4, 1e-5),
    "float64": (1e-9, 1e-11), "complex128": (1e-9, 1e-11),
}
# jit vs eager run the same lowering: a few ulps at most.
JIT_TOL = {
    "float16": (4e-3, 1e-6), "bfloat16": (3e-2, 1e-5),
    "float32": (5e-7, 1e-12), "complex64": (5e-7, 1e-12),
    "float64": (1e-15, 1e-300), "complex128": (1e-15, 1e-300),
}
# Central differences are only accurate to ~eps**(2/3).
FD_TOL = {
    "float16": (2e-1, 1e-1), "bfloat16": (3e-1, 2e-1),
    "float32": (2e-2, 2e-3), "complex64": (2e-2, 2e-3),
    "float64": (1e-5, 1e-7), "complex128": (1e-5, 1e-7),
}
# Inputs of derivative checks are kept finite and moderate (see Spec.sanitize_grads).
GRAD_INPUT_LIMIT = {"float16": 100.0, "bfloat16": 100.0}
GRAD_INPUT_LIMIT_DEFAULT = 1e6

# After the first failure of a check, at most this many further executions are
# spent shrinking it; then unseen examples pass so Hypothesis stops early.
SHRINK_BUDGET = 150
# Per check run, at most this many TF-rejected / not-applicable draws are
# discarded before further ones are let through as trivial passes.
REJECT_BUDGET_FACTOR = 3
REJECT_BUDGET_MIN = 20


# --------------------------------------------------------------------------
# Results and errors


class OpCheckError(AssertionError):
  """One or more property checks of an op failed (message: each failure with a
  minimal reproducing call)."""

  def __init__(self, message: str, report: Optional["OpReport"] = None):
    super().__init__(message)
    self.report = report


class CheckFailure(AssertionError):
  """A single check failed on a single drawn call."""


class _Skip(Exception):
  """The example is discarded (over the rejection budget: it passes trivially)."""


class _Rejected(Exception):
  """TF rejected the drawn call."""

  def __init__(self, category: str, message: str):
    super().__init__(message)
    self.category = category


@dataclasses.dataclass
class CheckResult:
  check: str
  status: str       # "passed", "failed", "error", "skipped", "auto-skipped", "not run"
  reason: str = ""
  examples: int = 0            # calls on which the check ran
  rejected: int = 0            # calls TF rejected
  not_applicable: int = 0      # calls the check does not apply to (e.g. int dtypes)
  seconds: float = 0.0
  message: str = ""
  notes: tuple = ()

  def line(self) -> str:
    extra = f" ({self.reason})" if self.reason else ""
    stats = (f" [{self.examples} ok, {self.rejected} rejected by TF, "
             f"{self.not_applicable} n/a, {self.seconds:.1f}s]"
             if self.status in ("passed", "failed") else "")
    notes = "".join(f"\n    note: {n}" for n in self.notes)
    return f"{self.check}: {self.status}{extra}{stats}{notes}"


@dataclasses.dataclass
class OpReport:
  op_type: str
  results: dict

  @property
  def failed(self) -> list:
    return [r for r in self.results.values() if r.status in ("failed", "error")]

  def summary(self) -> str:
    return f"{self.op_type}:\n" + "\n".join("  " + r.line() for r in self.results.values())


# --------------------------------------------------------------------------
# Lazy TF


@functools.lru_cache(maxsize=None)
def _tf():
  import logging
  import tensorflow as tf
  tf.get_logger().setLevel(logging.ERROR)
  return tf


@functools.lru_cache(maxsize=None)
def raw_ops_renames(op_type: str) -> dict:
  """Op-def argument name -> ``tf.raw_ops.<op_type>`` keyword, where they differ.

  Specs draw (and ``TFOp.prepare`` reads) op-def names, but TF's API defs
  rename some raw_ops keywords (``Sum(reduction_indices=)`` is
  ``tf.raw_ops.Sum(axis=)``, ``Squeeze``'s ``squeeze_dims`` is ``axis``,
  ``Select``'s ``t``/``e`` are ``x``/``y``...). The raw_ops signature lists the
  inputs in op-def order, then the attrs TF does not infer (without defaults
  first), so the two line up by position.
  """
  import inspect
  fn = getattr(_tf().raw_ops, op_type, None)
  od = opdefs.op_def(op_type)
  if fn is None or od is None:
    return {}
  params = [p for p in inspect.signature(fn).parameters if p != "name"]
  inferred = set()
  for arg in od.input_arg:
    inferred |= {arg.type_attr, arg.number_attr, arg.type_list_attr} - {""}
  attrs = [a for a in od.attr if a.name not in inferred]
  attrs = ([a for a in attrs if not a.HasField("default_value")] +
           [a for a in attrs if a.HasField("default_value")])
  names = [a.name for a in od.input_arg] + [a.name for a in attrs]
  if len(names) != len(params):
    return {}
  return {n: p for n, p in zip(names, params) if n != p}


def _tf_fn(oracle):
  if callable(oracle):
    return oracle
  tf = _tf()
  try:
    fn = getattr(tf.raw_ops, oracle)
  except AttributeError:
    raise OpCheckError(f"tf.raw_ops has no op {oracle!r}: pass oracle= to check_op") from None
  renames = raw_ops_renames(oracle)
  if not renames:
    return fn
  return lambda **kwargs: fn(**{renames.get(k, k): v for k, v in kwargs.items()})


def _tf_callee_src(call) -> str:
  if not isinstance(call.oracle, str):
    return "oracle"
  return "raw_op" if raw_ops_renames(call.oracle) else f"tf.raw_ops.{call.oracle_name}"


def _flatten(out) -> list:
  if out is None:
    return []
  if isinstance(out, (list, tuple)):
    flat = []
    for o in out:
      flat.extend(_flatten(o))
    return flat
  return [out]


def _to_numpy(t) -> np.ndarray:
  tf = _tf()
  if isinstance(t, tf.IndexedSlices):
    t = tf.convert_to_tensor(t)
  return np.asarray(t.numpy() if hasattr(t, "numpy") else t)


def _reject_category(exc) -> str:
  msg = str(exc)
  if type(exc).__name__ == "NotFoundError" and ("kernel" in msg.lower() or
                                               "Could not find device" in msg):
    return "no CPU kernel"
  return type(exc).__name__


@contextlib.contextmanager
def _tf_errors_as_rejections():
  tf = _tf()
  try:
    yield
  except tf.errors.OpError as e:
    raise _Rejected(_reject_category(e), " ".join(str(e).split())[:400]) from None


# --------------------------------------------------------------------------
# dtypes and tolerances


def _dtype(x) -> np.dtype:
  return np.asarray(x).dtype if not hasattr(x, "dtype") else np.dtype(x.dtype)


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
  return (_resolve(getattr(spec, "grad_rtol", None), name, rtol),
          _resolve(getattr(spec, "grad_atol", None), name, atol))


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


def compare(actual, expected, *, rtol: float = 0.0, atol: float = 0.0,
            check_dtype: bool = True, what: str = "output") -> Diff:
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
      # Parts of complex values with a non-finite part, and real values.
      fin = np.isfinite(pa) & np.isfinite(pe) & ~whole
      within(np.where(fin, np.abs(pa - pe), 0.0), np.abs(pe), fin)
  if not bad.any():
    return Diff(True, max_abs=max_abs, max_rel=max_rel)
  msg = _mismatch_message(what, a, e, bad, f"rtol={rtol:g}, atol={atol:g}")
  msg += f"\n  max abs err {max_abs:.3g}, max rel err {max_rel:.3g} (over finite elements)"
  return Diff(False, msg, max_abs, max_rel)


def _mismatch_message(what, a, e, bad, tol) -> str:
  idx = np.argwhere(bad)
  lines = [f"{what}: {len(idx)} of {a.size} elements differ ({tol}); "
           f"shape {a.shape}, dtype {a.dtype}"]
  for i in idx[:6]:
    i = tuple(int(k) for k in i)
    lines.append(f"  at {i}: got {_fmt(a[i])}, expected {_fmt(e[i])}")
  if len(idx) > 6:
    lines.append("  ...")
  return "\n".join(lines)


# --------------------------------------------------------------------------
# Calls


def load_spec(op) -> Optional[Spec]:
  """The op's :class:`Spec` (``op.spec(strategies)``), or None."""
  if op.spec is None:
    return None
  spec = op.spec(st_module)
  if not isinstance(spec, Spec):
    raise OpCheckError(f"{op.op_type}: spec must return tfprims.testing.Spec, got "
                       f"{type(spec).__name__}")
  return spec


def _normalize_input(value):
  if isinstance(value, list):
    return [_normalize_input(v) for v in value]
  if isinstance(value, np.ndarray):
    return value
  if isinstance(value, np.generic):
    return np.asarray(value)
  tf = _tf()
  return np.asarray(tf.convert_to_tensor(value).numpy())


@dataclasses.dataclass
class Call:
  """One drawn call: TF kwargs split into op-def inputs and attrs, plus our
  operands/params from ``op.prepare``."""
  op: Any
  oracle: Any
  kwargs: dict
  inputs: dict
  attrs: dict
  operand_args: list          # (input name, list index or None) per operand
  operands: list = None
  params: dict = None
  rng_key: Any = None         # the JAX key operand of ops with ``uses_rng``
  spec: Optional[Spec] = None  # for ``Spec.operands``/``Spec.params``

  @property
  def oracle_name(self) -> str:
    return self.oracle if isinstance(self.oracle, str) else getattr(
        self.oracle, "__name__", "oracle")

  def with_operands(self, operands: Sequence[Any]) -> "Call":
    """The same call with new operand values (static inputs and attrs kept)."""
    inputs = {k: (list(v) if isinstance(v, list) else v) for k, v in self.inputs.items()}
    for (name, j), value in zip(self.operand_args, operands):
      if name == RNG_KEY:
        continue
      if j is None:
        inputs[name] = value
      else:
        inputs[name][j] = value
    kwargs = dict(self.kwargs)
    kwargs.update(inputs)
    key = self.rng_key
    for (name, _), value in zip(self.operand_args, operands):
      if name == RNG_KEY:
        key = value
    return dataclasses.replace(self, kwargs=kwargs, inputs=inputs, operands=list(operands),
                               rng_key=key)

  def operand_label(self, i: int) -> str:
    name, j = self.operand_args[i]
    return name if j is None else f"{name}[{j}]"


#: Operand label of the JAX key that ops with ``op.uses_rng`` take first (not a
#: TF input: the interpreter supplies it from ``rng=``).
RNG_KEY = "<rng key>"
DEFAULT_RNG_KEY = np.array([0, 1234], np.uint32)


def _input_names(op, oracle) -> tuple:
  names = opdefs.input_arg_names(op.op_type)
  if not names and isinstance(oracle, str):
    names = opdefs.input_arg_names(oracle)
  return names


def make_call(op, kwargs: Mapping[str, Any], oracle=None, spec: Optional[Spec] = None) -> Call:
  """Splits drawn ``tf.raw_ops`` kwargs into inputs and attrs (``prepare_call``
  then makes our operands and params)."""
  oracle = oracle or op.op_type
  custom = spec is not None and spec.operands is not None
  names = tuple(spec.operands) if custom else _input_names(op, oracle)
  if names:
    inputs = {k: _normalize_input(kwargs[k]) for k in names if k in kwargs}
    missing = [k for k in names if k not in kwargs]
    if missing:
      raise OpCheckError(f"{op.op_type}: the spec's calls lack inputs {missing}")
  else:  # not a TF op: arrays (and lists of arrays) are inputs
    inputs = {k: _normalize_input(v) for k, v in kwargs.items()
              if isinstance(v, (np.ndarray, list))}
  attrs = {k: v for k, v in kwargs.items() if k not in inputs}
  full = dict(kwargs)
  full.update(inputs)
  operand_args = []
  for name in (names or tuple(inputs)):
    if name in op.static and not custom:
      continue
    value = inputs[name]
    if isinstance(value, list):
      operand_args.extend((name, j) for j in range(len(value)))
    else:
      operand_args.append((name, None))
  rng_key = None
  if op.uses_rng:
    operand_args.insert(0, (RNG_KEY, None))
    rng_key = DEFAULT_RNG_KEY
  return Call(op=op, oracle=oracle, kwargs=full, inputs=inputs, attrs=attrs,
              operand_args=operand_args, rng_key=rng_key, spec=spec if custom else None)


def prepare_call(call: Call) -> Call:
  """Sets the call's operands and params: ``op.prepare``, or the spec's
  ``operands``/``params`` where the primitive does not take the TF inputs."""
  if call.spec is not None:
    operands = [v for name in call.spec.operands
                for v in (call.inputs[name] if isinstance(call.inputs[name], list)
                          else [call.inputs[name]])]
    drawn = call.spec.params(call.kwargs) if call.spec.params is not None else {}
    params = {k: core.hashable(v) for k, v in drawn.items()}
  else:
    operands, params = call.op.prepare(call.inputs, call.attrs)
  if call.rng_key is not None:
    operands = [call.rng_key] + list(operands)
  if len(operands) != len(call.operand_args):
    raise CheckFailure(f"op.prepare returned {len(operands)} operands; the op def has "
                       f"{len(call.operand_args)} non-static input tensors")
  call.operands, call.params = list(operands), dict(params)
  return call


def _tf_kwargs(kwargs) -> dict:
  """Inputs as tf.constant: given numpy arrays, TF's eager fast path may convert
  an input to the type attr's *default* dtype (LeakyRelu on a float16 vector
  runs in float32, Conj of complex128 in complex64)."""
  tf = _tf()

  def const(v):
    if isinstance(v, list):
      return [const(x) for x in v]
    if isinstance(v, (np.ndarray, np.generic)):
      return tf.constant(v)
    return v

  return {k: const(v) for k, v in kwargs.items()}


def _call_tf(call: Call, kwargs=None):
  tf = _tf()
  with tf.device("/CPU:0"):
    return _tf_fn(call.oracle)(**_tf_kwargs(call.kwargs if kwargs is None else kwargs))


def tf_outputs(call: Call) -> list:
  """TF's outputs for the call (flat list of numpy arrays); raises _Rejected."""
  with _tf_errors_as_rejections():
    return [_to_numpy(o) for o in _flatten(_call_tf(call))]


# --------------------------------------------------------------------------
# Our side (jitted callables cached per op/params/kind; JAX caches per shape)

_JIT_CACHE: dict = {}


def clear_caches():
  _JIT_CACHE.clear()


def _params_key(params) -> tuple:
  return tuple(sorted(params.items()))


def _jitted(op, params, kind, extra, build):
  key = (op, _params_key(params), kind, extra)
  fn = _JIT_CACHE.get(key)
  if fn is None:
    fn = _JIT_CACHE[key] = jax.jit(build())
  return fn


def _outs(op, out) -> list:
  return list(out) if op.multiple_results else [out]


def _bound(op, params):
  return lambda *operands: op(*operands, **params)


def ours_eager(call: Call) -> list:
  return [np.asarray(o) for o in _outs(call.op, call.op(*call.operands, **call.params))]


def ours_jit(call: Call) -> list:
  fn = _jitted(call.op, call.params, "call", None, lambda: _bound(call.op, call.params))
  return [np.asarray(o) for o in _outs(call.op, fn(*call.operands))]


def _restricted(op, params, diff_idx, out_mask):
  """f(diff operands; all operands) -> the float outputs."""
  def g(operands, *diffs):
    args = list(operands)
    for i, d in zip(diff_idx, diffs):
      args[i] = d
    outs = _outs(op, op(*args, **params))
    return [o for o, m in zip(outs, out_mask) if m]
  return g


def ours_jvp(call, diff_idx, out_mask, tangents) -> list:
  def build():
    g = _restricted(call.op, call.params, diff_idx, out_mask)
    def f(operands, tangents):
      primals = [operands[i] for i in diff_idx]
      return jax.jvp(functools.partial(g, operands), primals, list(tangents))[1]
    return f
  fn = _jitted(call.op, call.params, "jvp", (tuple(diff_idx), tuple(out_mask)), build)
  return [np.asarray(t) for t in fn(list(call.operands), list(tangents))]


def _vjp_fn(op, params, diff_idx, out_mask):
  g = _restricted(op, params, diff_idx, out_mask)
  def f(operands, cts):
    primals = [operands[i] for i in diff_idx]
    _, pullback = jax.vjp(functools.partial(g, operands), *primals)
    # JAX pairs cotangents without conjugation, TF with: TF's gradient is
    # conj(vjp(conj(ct))).
    out = pullback([jnp.conj(c) if jnp.iscomplexobj(c) else c for c in cts])
    return [jnp.conj(c) if jnp.iscomplexobj(c) else c for c in out]
  return f


def ours_vjp(call, diff_idx, out_mask, cts) -> list:
  fn = _jitted(call.op, call.params, "vjp", (tuple(diff_idx), tuple(out_mask)),
               lambda: _vjp_fn(call.op, call.params, diff_idx, out_mask))
  return [np.asarray(c) for c in fn(list(call.operands), list(cts))]


# --------------------------------------------------------------------------
# TF autodiff oracles


def _tf_kwargs_with_tensors(call: Call, idx: Sequence[int], values=None):
  tf = _tf()
  kwargs = {k: (list(v) if isinstance(v, list) else v) for k, v in call.kwargs.items()}
  tensors = []
  kwargs = _tf_kwargs(kwargs)
  for n, i in enumerate(idx):
    name, j = call.operand_args[i]
    t = tf.constant(call.operands[i] if values is None else values[n])
    tensors.append(t)
    if j is None:
      kwargs[name] = t
    else:
      kwargs[name][j] = t
  return kwargs, tensors


def tf_jvp(call, diff_idx, out_mask, tangents) -> list:
  tf = _tf()
  kwargs, primals = _tf_kwargs_with_tensors(call, diff_idx)
  with _tf_errors_as_rejections(), tf.device("/CPU:0"):
    with tf.autodiff.ForwardAccumulator(primals, [tf.constant(t) for t in tangents]) as acc:
      outs = _flatten(_call_tf(call, kwargs))
    res = []
    for o, m in zip(outs, out_mask):
      if m:
        t = acc.jvp(o, unconnected_gradients=tf.UnconnectedGradients.ZERO)
        res.append(_to_numpy(t))
  return res


def tf_vjp(call, diff_idx, out_mask, cts) -> list:
  tf = _tf()
  kwargs, primals = _tf_kwargs_with_tensors(call, diff_idx)
  with _tf_errors_as_rejections(), tf.device("/CPU:0"):
    with tf.GradientTape() as tape:
      tape.watch(primals)
      outs = _flatten(_call_tf(call, kwargs))
    fouts = [o for o, m in zip(outs, out_mask) if m]
    grads = tape.gradient(fouts, primals, output_gradients=[tf.constant(c) for c in cts],
                          unconnected_gradients=tf.UnconnectedGradients.ZERO)
    return [_to_numpy(g) for g in grads]


def tf_central_difference(call, diff_idx, out_mask, tangents, widen: bool = True) -> list:
  """(f(x + h t) - f(x - h t)) / 2h with TF.

  With ``widen``, inputs of the differentiated dtype are cast to float64 /
  complex128 first (when TF accepts that), so float16/bfloat16/float32 calls
  get accurate differences; results are then float64/complex128.
  """
  if widen:
    dts = {np.asarray(call.operands[i]).dtype for i in diff_idx}
    wide_of = lambda d: np.dtype(np.complex128 if _is_complex(d) else np.float64)
    if any(d != wide_of(d) for d in dts):
      ops = [np.asarray(o).astype(wide_of(np.asarray(o).dtype))
             if np.asarray(o).dtype in dts else o for o in call.operands]
      attrs_wide = {k: (wide_of(v) if isinstance(v, np.dtype) and v in dts else v)
                    for k, v in call.attrs.items()}
      wide = dataclasses.replace(call.with_operands(ops))
      wide.kwargs = dict(wide.kwargs, **attrs_wide)
      wide.attrs = attrs_wide
      try:
        return tf_central_difference(wide, diff_idx, out_mask,
                                     [np.asarray(t).astype(wide_of(np.asarray(t).dtype))
                                      for t in tangents], widen=False)
      except _Rejected:
        pass
  xs = [np.asarray(call.operands[i]) for i in diff_idx]
  scale = max([1.0] + [float(np.max(np.abs(x.astype(np.complex128)))) for x in xs if x.size])
  eps = max(float(jnp.finfo(x.dtype).eps) for x in xs)
  h = eps ** (1.0 / 3.0) * scale

  def at(sign):
    ops = list(call.operands)
    for i, x, t in zip(diff_idx, xs, tangents):
      wide = np.complex128 if _is_complex(x.dtype) else np.float64
      ops[i] = (x.astype(wide) + sign * h * np.asarray(t).astype(wide)).astype(x.dtype)
    outs = tf_outputs(call.with_operands(ops))
    return [o for o, m in zip(outs, out_mask) if m]

  plus, minus = at(1.0), at(-1.0)
  res = []
  for p, m in zip(plus, minus):
    wide = np.complex128 if _is_complex(p.dtype) else np.float64
    res.append((p.astype(wide) - m.astype(wide)) / (2 * h))
  return res


@functools.lru_cache(maxsize=None)
def tf_gradient_status(op_type: str) -> Optional[str]:
  """None when TF has a gradient for ``op_type``, else why not."""
  try:
    from tensorflow.python.framework import ops as tf_ops
    registry = tf_ops._gradient_registry  # pylint: disable=protected-access
  except (ImportError, AttributeError):
    return None
  try:
    fn = registry.lookup(op_type)
  except LookupError:
    return f"TF registers no gradient for {op_type}"
  if fn is None:
    return f"TF declares {op_type} not differentiable"
  return None


# --------------------------------------------------------------------------
# Random values


def _random_like(rng, x) -> np.ndarray:
  x = np.asarray(x)
  if _is_complex(x.dtype):
    v = rng.standard_normal(x.shape) + 1j * rng.standard_normal(x.shape)
  else:
    v = rng.standard_normal(x.shape)
  return np.asarray(v).astype(x.dtype)


def _sanitize(x) -> np.ndarray:
  """Finite, moderate float values for derivative checks (NaN -> 0.5, ±inf and
  huge values clipped)."""
  x = np.asarray(x)
  if not _is_inexact(x.dtype):
    return x
  limit = GRAD_INPUT_LIMIT.get(x.dtype.name, GRAD_INPUT_LIMIT_DEFAULT)

  def fix(p):
    p = np.where(np.isnan(p), 0.5, p)
    return np.clip(p, -limit, limit)

  if _is_complex(x.dtype):
    w = x.astype(np.complex128)
    return (fix(w.real) + 1j * fix(w.imag)).astype(x.dtype)
  return fix(x.astype(np.float64)).astype(x.dtype)


def _vary(x, rng, k: int, floats_only: bool, how: str = "permute") -> np.ndarray:
  """Another batch member: the values permuted (floats shifted when that changes
  nothing); with ``how="scale"`` floats are scaled by 0.5**k instead (keeps
  positive-definiteness, symmetry, order and signs) and ints left alone."""
  x = np.asarray(x)
  if how == "none":
    return x
  if how == "scale":
    if not _is_inexact(x.dtype):
      return x
    wide = np.complex128 if _is_complex(x.dtype) else np.float64
    return (x.astype(wide) * 0.5 ** k).astype(x.dtype)
  if floats_only and not _is_inexact(x.dtype):
    return x
  flat = x.reshape(-1)
  out = flat[rng.permutation(flat.size)].reshape(x.shape) if flat.size else x
  if _is_inexact(x.dtype) and np.array_equal(out, x, equal_nan=True) and x.size:
    wide = np.complex128 if _is_complex(x.dtype) else np.float64
    out = (x.astype(wide) + 0.5 * k).astype(x.dtype)
  return out


# --------------------------------------------------------------------------
# Snippets


def _lit_scalar(v) -> str:
  if isinstance(v, (bool, np.bool_)):
    return repr(bool(v))
  if isinstance(v, (complex, np.complexfloating)):
    v = complex(v)
    return f"complex({_lit_scalar(v.real)}, {_lit_scalar(v.imag)})"
  if isinstance(v, (float, np.floating)):
    v = float(v)
    if math.isnan(v):
      return "np.nan"
    if math.isinf(v):
      return "np.inf" if v > 0 else "-np.inf"
    return repr(v)
  if isinstance(v, (int, np.integer)):
    return str(int(v))
  return repr(v)


def _dtype_lit(dtype) -> str:
  dtype = np.dtype(dtype)
  if dtype.name == "bfloat16":
    return "ml_dtypes.bfloat16"
  return f"np.{dtype.name}" if dtype.name != "bool" else "np.bool_"


def _nested(a: np.ndarray) -> str:
  if a.ndim == 0:
    return _lit_scalar(a.item() if a.dtype.name != "bfloat16" else float(a))
  return "[" + ", ".join(_nested(s) for s in a) + "]"


def literal(value) -> str:
  """Python source for a drawn value (numpy arrays as ``np.array(...)`` with dtype)."""
  if isinstance(value, np.ndarray):
    dt = _dtype_lit(value.dtype)
    if value.size == 0:
      return f"np.zeros({value.shape!r}, dtype={dt})"
    return f"np.array({_nested(value)}, dtype={dt})"
  if isinstance(value, np.generic):
    return literal(np.asarray(value))
  if isinstance(value, np.dtype):
    return ("np.dtype(ml_dtypes.bfloat16)" if value.name == "bfloat16" else
            f"np.dtype({value.name!r})")
  if isinstance(value, list):
    return "[" + ", ".join(literal(v) for v in value) + "]"
  if isinstance(value, tuple):
    return "(" + "".join(literal(v) + ", " for v in value) + ")"
  if isinstance(value, (float, np.floating, int, bool, complex)):
    return _lit_scalar(value)
  return repr(value)


def _uses_bf16(values) -> bool:
  for v in values:
    if isinstance(v, list) and _uses_bf16(v):
      return True
    if isinstance(v, np.ndarray) and v.dtype.name == "bfloat16":
      return True
    if isinstance(v, np.dtype) and v.name == "bfloat16":
      return True
  return False


def snippet(call: Call, check: str = "values", extra: Optional[dict] = None) -> str:
  """A ready-to-run script reproducing the call with TF and with tfprims."""
  extra = extra or {}
  lines = ["import numpy as np", "import tensorflow as tf"]
  if _uses_bf16(list(call.kwargs.values()) + list(extra.values())):
    lines.append("import ml_dtypes")
  lines.append("inputs = dict(")
  for k, v in call.inputs.items():
    lines.append(f"    {k}={literal(v)},")
  lines.append(")")
  lines.append("attrs = dict(" + ", ".join(f"{k}={literal(v)}" for k, v in call.attrs.items())
               + ")")
  tf_call = f"{_tf_callee_src(call)}(**tf_inputs, **attrs)"
  lines.append("tf_inputs = tf.nest.map_structure(tf.constant, inputs)  "
               "# numpy inputs may be cast to a default dtype")
  if _tf_callee_src(call) == "oracle":
    lines.append(_oracle_import(call.oracle))
  if _tf_callee_src(call) == "raw_op":
    renames = raw_ops_renames(call.oracle)
    lines.append(f"raw_op = lambda **kw: tf.raw_ops.{call.oracle_name}(**{{{renames!r}.get(k, k): "
                 "v for k, v in kw.items()})  # raw_ops renames op-def arguments")
  lines.append(f"expected = {tf_call}")
  lines += [
      "# tfprims:",
      "import jax",
      'jax.config.update("jax_enable_x64", True)',
      "import tfprims.ops  # registers the ops",
      "from tfprims.core import get_op",
      f"op = get_op({call.op.op_type!r})",
  ]
  if call.spec is None:
    lines.append("operands, params = op.prepare(inputs, attrs)")
  else:  # the primitive takes some of the drawn inputs (Spec.operands)
    lines.append(f"operands = [v for k in {list(call.spec.operands)!r} for v in "
                 "(inputs[k] if isinstance(inputs[k], list) else [inputs[k]])]")
    lines.append(f"params = {call.params!r}")
  if call.rng_key is not None:
    lines.append(f"operands = [{literal(np.asarray(call.rng_key))}] + list(operands)"
                 "  # the op's JAX key operand")
  lines.append("f = lambda *a: op(*a, **params)")
  if check in ("values", "shape"):
    lines += ["actual = f(*operands)", "actual_jit = jax.jit(f)(*operands)"]
    if check == "shape":
      lines += ["print(jax.eval_shape(f, *operands), [(o.shape, o.dtype) for o in "
                "(expected if isinstance(expected, (list, tuple)) else [expected])])",
                "with jax.enable_x64(False):",
                "  print(jax.eval_shape(f, *[jax.ShapeDtypeStruct(np.shape(o), "
                "jax.dtypes.canonicalize_dtype(np.asarray(o).dtype)) for o in operands]))"]
  elif check == "jit":
    lines += ["eager, jitted = f(*operands), jax.jit(f)(*operands)"]
  elif check in ("jvp", "vjp"):
    d = list(extra["diff"])
    lines += [
        f"diff = {d!r}  # the differentiated operands (indices into operands)",
        f"float_outputs = {list(extra['float_outputs'])!r}",
        "def g(*x):",
        "  args = list(operands)",
        "  for i, v in zip(diff, x):",
        "    args[i] = v",
        "  out = f(*args)",
        "  out = list(out) if isinstance(out, (list, tuple)) else [out]",
        "  return [out[k] for k in float_outputs]",
        "xs = [tf.constant(operands[i]) for i in diff]",
    ]
    tf_src = _tf_call_src(call, d)
    if check == "jvp":
      lines += [
          f"tangents = {literal(list(extra['tangents']))}",
          "ours = jax.jvp(g, [operands[i] for i in diff], tangents)[1]",
          "with tf.autodiff.ForwardAccumulator(xs, [tf.constant(t) for t in tangents]) as acc:",
          f"  y = {tf_src}",
          "y = list(y) if isinstance(y, (list, tuple)) else [y]",
          "tf_jvp = [acc.jvp(y[k]) for k in float_outputs]",
      ]
    else:
      lines += [
          f"cotangents = {literal(list(extra['cts']))}",
          "_, pullback = jax.vjp(g, *[operands[i] for i in diff])",
          "# TF's gradient is conj(vjp(conj(ct))) (matters for complex only)",
          "ours = [np.conj(c) for c in pullback([np.conj(c) for c in cotangents])]",
          "with tf.GradientTape() as tape:",
          "  tape.watch(xs)",
          f"  y = {tf_src}",
          "y = list(y) if isinstance(y, (list, tuple)) else [y]",
          "tf_grads = tape.gradient([y[k] for k in float_outputs], xs, "
          "output_gradients=cotangents)",
      ]
  elif check == "vmap":
    lines.append(f"in_axes = {extra['in_axes']!r}")
    lines.append(f"batched = {literal(list(extra['batched']))}")
    lines += ["out = jax.vmap(f, in_axes=in_axes)(*batched)",
              "per_example = [f(*[o if a is None else np.take(o, k, axis=a) "
              "for o, a in zip(batched, in_axes)]) for k in range("
              f"{extra['batch']})]"]
  return "\n".join("    " + l for l in lines)


def _oracle_import(oracle) -> str:
  """Where a snippet gets a callable oracle from."""
  module, name = getattr(oracle, "__module__", None), getattr(oracle, "__qualname__", "")
  if module and name and "<" not in name:
    return f"from {module} import {name} as oracle"
  return f"oracle = ...  # {oracle!r}: the spec's oracle"


def _tf_call_src(call: Call, diff: Sequence[int]) -> str:
  """``tf.raw_ops.Op(...)`` source with the differentiated operands taken from ``xs``."""
  pos = {call.operand_args[i]: n for n, i in enumerate(diff)}
  parts = []
  for name, value in call.inputs.items():
    if isinstance(value, list):
      if any((name, j) in pos for j in range(len(value))):
        items = [f"xs[{pos[(name, j)]}]" if (name, j) in pos else f"tf_inputs[{name!r}][{j}]"
                 for j in range(len(value))]
        parts.append(f"{name}=[{', '.join(items)}]")
    elif (name, None) in pos:
      parts.append(f"{name}=xs[{pos[(name, None)]}]")
  return f"{_tf_callee_src(call)}(**dict(tf_inputs, {', '.join(parts)}), **attrs)"


# --------------------------------------------------------------------------
# Drawing


class _Drawer:
  """Draws through Hypothesis (``data``) or a seeded numpy Generator; records
  everything drawn so an example can be fingerprinted."""

  def __init__(self, data=None, rng=None):
    self.data, self.rng, self.record = data, rng, []

  def call(self, strategy):
    """Draws the call, then one seed for everything else the checks choose
    (tangents, batch axes...): every example draws the same way, whatever the
    check does with it."""
    if self.data is None:
      raise ValueError("drawing calls needs Hypothesis data")
    kwargs = self.data.draw(strategy, label="call")
    seed = self.data.draw(hst.integers(0, 2**32 - 1), label="seed")
    self.rng = np.random.default_rng(seed)
    self.record += [kwargs, seed]
    return kwargs

  def integer(self, lo: int, hi: int, label: str) -> int:
    return int(self.rng.integers(lo, hi + 1))

  def fingerprint(self) -> str:
    h = hashlib.sha256()

    def feed(v):
      if isinstance(v, np.ndarray):
        h.update(f"A{v.dtype.str}{v.shape}".encode())
        h.update(np.ascontiguousarray(v).tobytes())
      elif isinstance(v, dict):
        for k in sorted(v):
          h.update(f"K{k}".encode())
          feed(v[k])
      elif isinstance(v, (list, tuple)):
        h.update(f"L{len(v)}".encode())
        for x in v:
          feed(x)
      else:
        h.update(repr(v).encode())

    feed(self.record)
    return h.hexdigest()


# --------------------------------------------------------------------------
# Checks


@dataclasses.dataclass
class _Run:
  """State of one check on one op across Hypothesis examples."""
  op: Any
  spec: Spec
  oracle: Any
  check: str
  x64: bool = True
  examples: int = 0
  rejected: int = 0
  not_applicable: int = 0
  reject_reasons: dict = dataclasses.field(default_factory=dict)
  na_reasons: dict = dataclasses.field(default_factory=dict)
  budget: int = REJECT_BUDGET_MIN
  failing_calls: set = dataclasses.field(default_factory=set)  # call fingerprints
  after_failure: int = 0
  notes: list = dataclasses.field(default_factory=list)
  record: bool = True
  auto: dict = dataclasses.field(default_factory=dict)      # auto_skips(op)
  target: int = 0                                           # max_examples

  def reject(self, exc: _Rejected):
    """Discards a call TF rejects (counted)."""
    self.rejected += 1
    entry = self.reject_reasons.setdefault(exc.category, [0, str(exc)])
    entry[0] += 1
    self._discard()

  def skip_example(self, reason: str):
    """Discards a call the check does not apply to (counted)."""
    self.not_applicable += 1
    self.na_reasons[reason] = self.na_reasons.get(reason, 0) + 1
    self._discard()

  def _discard(self):
    if self.rejected + self.not_applicable <= self.budget:
      hypothesis.reject()
    raise _Skip()

  def fail(self, call: Call, message: str, extra: Optional[dict] = None, check=None):
    check = check or self.check
    text = (f"{self.op.op_type}: check {check!r} failed: {message}\n"
            f"  reproduce:\n{snippet(call, check, extra)}")
    raise CheckFailure(text)

  def note(self, text: str):
    if text not in self.notes and len(self.notes) < 10:
      self.notes.append(text)


def _record(run: _Run, check: str, dtype, diff: Diff):
  if not run.record:
    return
  entry = _ERRORS.setdefault(run.op.op_type, {}).setdefault(check, {}).setdefault(
      np.dtype(dtype).name, {"max_abs": 0.0, "max_rel": 0.0, "examples": 0})
  entry["max_abs"] = max(entry["max_abs"], diff.max_abs)
  entry["max_rel"] = max(entry["max_rel"], diff.max_rel)
  entry["examples"] += 1


def _compare_lists(run, call, what, actual, expected, tol_fn, check_dtype=True,
                   record_as=None, extra=None, labels=None):
  if len(actual) != len(expected):
    run.fail(call, f"{what}: {len(actual)} outputs, expected {len(expected)}", extra)
  for k, (a, e) in enumerate(zip(actual, expected)):
    rtol, atol = tol_fn(run.spec, np.asarray(e).dtype)
    label = labels[k] if labels else f"output {k}"
    diff = compare(a, e, rtol=rtol, atol=atol, check_dtype=check_dtype,
                   what=f"{what}, {label}")
    if not diff.ok:
      run.fail(call, diff.message, extra)
    if record_as and _is_inexact(np.asarray(e).dtype):
      _record(run, record_as, np.asarray(e).dtype, diff)


def _guard(run: _Run, call: Call, what: str, fn, extra=None):
  try:
    return fn()
  except (CheckFailure, _Rejected, _NeedsX64):
    raise
  except hypothesis.errors.UnsatisfiedAssumption:
    raise
  except Exception as e:  # pylint: disable=broad-except
    msg = str(e).strip().splitlines()
    run.fail(call, f"{what} raised {type(e).__name__}: {msg[0][:500] if msg else ''}", extra)


def _check_values(run, call, tf_outs, draw):
  eager = _guard(run, call, "our op (eager)", lambda: ours_eager(call))
  _compare_lists(run, call, "eager vs TF", eager, tf_outs, value_tolerance,
                 record_as="values")
  jitted = _guard(run, call, "our op (jit)", lambda: ours_jit(call))
  _compare_lists(run, call, "jit vs TF", jitted, tf_outs, value_tolerance)


def _check_jit(run, call, tf_outs, draw):
  eager = _guard(run, call, "our op (eager)", lambda: ours_eager(call))
  jitted = _guard(run, call, "our op (jit)", lambda: ours_jit(call))
  _compare_lists(run, call, "jit vs eager", jitted, eager, jit_tolerance)


_SHAPE_WARNINGS: dict = {}

_X64_NARROW = {"int64": "int32", "uint64": "uint32", "float64": "float32",
               "complex128": "complex64"}


def _check_shape(run, call, tf_outs, draw):
  op = call.op
  f = _bound(op, call.params)

  def structs(narrow):
    out = []
    for o in call.operands:
      dt = np.asarray(o).dtype
      if narrow and dt.name in _X64_NARROW:
        dt = np.dtype(_X64_NARROW[dt.name])
      out.append(jax.ShapeDtypeStruct(np.shape(o), dt))
    return out

  def expect(narrow):
    res = []
    for o in tf_outs:
      dt = o.dtype
      if narrow and dt.name in _X64_NARROW:
        dt = np.dtype(_X64_NARROW[dt.name])
      res.append((tuple(o.shape), dt))
    return res

  for x64 in (True, False):
    mode = "x64 on" if x64 else "x64 off"
    with jax.enable_x64(x64), warnings.catch_warnings(record=True) as caught:
      warnings.simplefilter("always")
      c = call if x64 else prepare_call(dataclasses.replace(call))
      try:
        avals = _guard(run, call, f"abstract eval ({mode})",
                       lambda: _eval_shape_x64_off_may_refuse(op, c.params, structs(not x64),
                                                              x64))
      except _NeedsX64:
        continue
    avals = _outs(op, avals)
    got = [(tuple(a.shape), np.dtype(a.dtype)) for a in avals]
    want = expect(not x64)
    if got != want:
      run.fail(call, f"abstract eval ({mode}): got {_sd(got)}, TF gives {_sd(want)}")
    jax_warnings = [str(w.message) for w in caught
                    if "not available" in str(w.message) or "jax_enable_x64" in str(w.message)]
    # JAX caches abstract evals: remember warnings so replays fail the same way.
    key = (op, _params_key(c.params), tuple((s.shape, s.dtype) for s in structs(not x64)), x64)
    if jax_warnings:
      _SHAPE_WARNINGS[key] = jax_warnings
    jax_warnings = _SHAPE_WARNINGS.get(key, jax_warnings)
    if jax_warnings:
      run.fail(call, f"abstract eval ({mode}) warned: {jax_warnings[0][:300]} (use "
               "tfprims.dtypes.canonical_dtype for output dtypes)")
  del f


class _NeedsX64(Exception):
  pass


def _eval_shape_x64_off_may_refuse(op, params, structs, x64):
  """``jax.eval_shape`` of the op; with x64 off an op may refuse a call with
  ``Int64OverflowError`` when its result cannot be had in 32 bits (Bitcast
  float64 -> int64): that typed refusal is its documented x64-off behaviour."""
  from tfprims import errors
  try:
    return jax.eval_shape(_bound(op, params), *structs)
  except errors.Int64OverflowError:
    if x64:
      raise
    raise _NeedsX64() from None


def _sd(pairs) -> str:
  return ", ".join(f"{d.name}{list(s)}" for s, d in pairs)


def _diff_indices(spec, call) -> list:
  names = set(spec.diff_args) if spec.diff_args is not None else None
  return [i for i, o in enumerate(call.operands)
          if _is_inexact(np.asarray(o).dtype)
          and (names is None or call.operand_args[i][0] in names)]


def _diff_setup(run, call, tf_outs):
  """(sanitized call, its TF outputs, diff operand indices, float-output mask)."""
  diff_idx = _diff_indices(run.spec, call)
  out_mask = [_is_inexact(o.dtype) for o in tf_outs]
  if not diff_idx:
    run.skip_example("no float inputs to differentiate")
  if not any(out_mask):
    run.skip_example("no float outputs")
  if getattr(run.spec, "sanitize_grads", True):
    clean = [_sanitize(o) for o in call.operands]
    if any(not np.array_equal(a, b, equal_nan=True) for a, b in zip(clean, call.operands)):
      call = prepare_call(call.with_operands(clean))
      try:
        tf_outs = tf_outputs(call)
      except _Rejected as e:
        run.reject(e)
  return call, tf_outs, diff_idx, out_mask


def _oracle(run, call, what, fn, extra=None):
  """Runs a TF autodiff oracle; its unexpected errors are reported as such."""
  try:
    return fn()
  except (_Rejected, CheckFailure, _Skip, hypothesis.errors.UnsatisfiedAssumption):
    raise
  except Exception as e:  # pylint: disable=broad-except
    # TF's own autodiff code failing (e.g. its gradient of an empty gather):
    # no oracle for this call; discarded and counted like a TF rejection.
    raise _Rejected(f"TF {what} raised {type(e).__name__}",
                    " ".join(str(e).split())[:300]) from None


def _check_jvp(run, call, tf_outs, draw):
  call, tf_outs, diff_idx, out_mask = _diff_setup(run, call, tf_outs)
  rng = np.random.default_rng(draw.integer(0, 2**31 - 1, "tangent seed"))
  tangents = [_random_like(rng, call.operands[i]) for i in diff_idx]
  extra = {"diff": diff_idx, "tangents": tangents,
           "float_outputs": [k for k, m in enumerate(out_mask) if m]}
  ours = _guard(run, call, "jax.jvp", lambda: ours_jvp(call, diff_idx, out_mask, tangents),
                extra)
  oracle = run.spec.grad_oracle
  labels = [f"output {k}" for k, m in enumerate(out_mask) if m]
  if oracle == "fd":
    fd = _oracle(run, call, "central differences",
                 lambda: tf_central_difference(call, diff_idx, out_mask, tangents), extra)
    for k, (a, e) in enumerate(zip(ours, fd)):
      rtol, atol = FD_TOL.get(np.asarray(a).dtype.name, (0.0, 0.0))
      rtol, atol = max(rtol, grad_tolerance(run.spec, np.asarray(a).dtype)[0]), max(
          atol, grad_tolerance(run.spec, np.asarray(a).dtype)[1])
      diff = compare(a, e, rtol=rtol, atol=atol, check_dtype=False,
                     what=f"jvp vs TF central differences, {labels[k]}")
      if not diff.ok:
        run.fail(call, diff.message, extra)
    return
  if oracle == "vjp":
    _jvp_dot_test(run, call, tf_outs, diff_idx, out_mask, tangents, ours, rng, extra)
    return
  try:
    expected = _oracle(run, call, "ForwardAccumulator",
                       lambda: tf_jvp(call, diff_idx, out_mask, tangents), extra)
  except _Rejected as e:
    if not e.category.startswith("TF ForwardAccumulator raised"):
      raise
    # TF's forward mode (a double-backward trick) is broken for this call, e.g.
    # a missing second-order gradient: use GradientTape (dot-product test).
    run.note(f"TF ForwardAccumulator failed ({e.category[len('TF ForwardAccumulator raised '):]}: "
             f"{str(e)[:120]}); the JVP was checked against GradientTape instead")
    _jvp_dot_test(run, call, tf_outs, diff_idx, out_mask, tangents, ours, rng, extra)
    return
  wide = all(np.asarray(call.operands[i]).dtype in (np.float64, np.complex128)
             for i in diff_idx)
  try:
    _compare_lists(run, call, "jvp vs TF ForwardAccumulator", ours, expected,
                   derivative_tolerance(call, diff_idx, [np.asarray(o).dtype for o in expected]),
                   record_as="jvp", extra=extra, labels=labels)
  except CheckFailure as failure:
    # Cross-check the oracle with central differences (computed in float64
    # when TF accepts it, so meaningful for every dtype).
    if True:
      try:
        fd = tf_central_difference(call, diff_idx, out_mask, tangents)
        dt = np.asarray(ours[0]).dtype if ours else np.dtype("float64")
        rtol, atol = grad_tolerance(run.spec, dt)
        rtol, atol = max(rtol, FD_TOL["float64"][0]), max(atol, FD_TOL["float64"][1])
        ok = lambda xs: all(compare(x, y, rtol=rtol, atol=atol, check_dtype=False).ok
                            for x, y in zip(xs, fd))
        verdict = ("central differences agree with ours, not TF: if TF's forward mode is "
                   "wrong here, set grad_oracle='vjp' or 'fd' in the spec"
                   if ok(ours) and not ok(expected) else
                   "central differences agree with TF" if ok(expected) else
                   "central differences agree with neither (non-smooth point?)")
      except _Rejected:
        verdict = "central differences: TF rejected the shifted inputs"
      raise CheckFailure(f"{failure}\n  oracle cross-check: {verdict}") from None
    raise
  if wide:
    # Ours and TF agree; check the oracle itself against central differences.
    # Disagreement is only noted (non-smooth points disagree legitimately).
    try:
      fd = tf_central_difference(call, diff_idx, out_mask, tangents)
    except _Rejected:
      return
    for k, (e, d) in enumerate(zip(expected, fd)):
      diff = compare(e, d, rtol=FD_TOL["float64"][0] * 10, atol=FD_TOL["float64"][1] * 10,
                     check_dtype=False)
      finite = np.all(np.isfinite(np.asarray(e))) and np.all(np.isfinite(np.asarray(d)))
      if finite and not diff.ok:
        run.note(f"TF's JVP (and ours) differ from central differences on a float64 call "
                 f"(output {k}, max abs err {diff.max_abs:.3g}): a non-smooth point, or a "
                 "wrong TF gradient")


def _jvp_dot_test(run, call, tf_outs, diff_idx, out_mask, tangents, ours, rng, extra):
  """<ct, J t> (our JVP) == <J^T ct, t> (TF's GradientTape), real inner products."""
  cts = [_random_like(rng, o) for o, m in zip(tf_outs, out_mask) if m]
  g = _oracle(run, call, "GradientTape", lambda: tf_vjp(call, diff_idx, out_mask, cts), extra)
  c128 = lambda a: np.asarray(a).astype(np.complex128)
  lhs = sum(float(np.real(np.sum(np.conj(c128(c)) * c128(t)))) for c, t in zip(cts, ours))
  rhs = sum(float(np.real(np.sum(np.conj(c128(gg)) * c128(t)))) for gg, t in zip(g, tangents))
  scale = sum(float(np.sum(np.abs(c128(c) * c128(t)))) for c, t in zip(cts, ours)) + 1.0
  out_dtypes = [o.dtype for o, m in zip(tf_outs, out_mask) if m]
  rtol, atol = derivative_tolerance(call, diff_idx, out_dtypes)(run.spec, out_dtypes[0])
  if not (np.isfinite(lhs) and np.isfinite(rhs)):
    if np.isnan(lhs) != np.isnan(rhs):
      run.fail(call, f"jvp dot-product test vs TF GradientTape: <ct, jvp(t)> = {lhs}, "
               f"<TF vjp(ct), t> = {rhs}", extra)
  elif abs(lhs - rhs) > atol + rtol * scale:
    run.fail(call, f"jvp dot-product test vs TF GradientTape: <ct, jvp(t)> = {lhs!r}, "
             f"<TF vjp(ct), t> = {rhs!r} (rtol={rtol:g}, scale {scale:.3g})", extra)


def _check_vjp(run, call, tf_outs, draw):
  call, tf_outs, diff_idx, out_mask = _diff_setup(run, call, tf_outs)
  rng = np.random.default_rng(draw.integer(0, 2**31 - 1, "cotangent seed"))
  cts = [_random_like(rng, o) for o, m in zip(tf_outs, out_mask) if m]
  extra = {"diff": diff_idx, "cts": cts,
           "float_outputs": [k for k, m in enumerate(out_mask) if m]}
  ours = _guard(run, call, "jax.vjp", lambda: ours_vjp(call, diff_idx, out_mask, cts), extra)
  labels = [f"d/d {call.operand_label(i)}" for i in diff_idx]
  if run.spec.grad_oracle == "fd":
    # Transpose consistency: <ct, J t> == <J^T ct, t> with our own JVP.
    tangents = [_random_like(rng, call.operands[i]) for i in diff_idx]
    jv = _guard(run, call, "jax.jvp", lambda: ours_jvp(call, diff_idx, out_mask, tangents),
                extra)
    lhs = sum(np.real(np.sum(np.conj(c.astype(np.complex128)) * t.astype(np.complex128)))
              for c, t in zip(cts, jv))
    rhs = sum(np.real(np.sum(np.conj(g.astype(np.complex128)) * t.astype(np.complex128)))
              for g, t in zip(ours, tangents))
    scale = sum(float(np.sum(np.abs(c.astype(np.complex128) * t.astype(np.complex128))))
                for c, t in zip(cts, jv)) + 1.0
    rtol, atol = grad_tolerance(run.spec, tf_outs[out_mask.index(True)].dtype)
    if np.isfinite(lhs) and np.isfinite(rhs) and abs(lhs - rhs) > atol + rtol * scale:
      run.fail(call, f"vjp is not the transpose of our jvp: <ct, jvp(t)> = {lhs!r}, "
               f"<vjp(ct), t> = {rhs!r}", extra)
    return
  expected = _oracle(run, call, "GradientTape", lambda: tf_vjp(call, diff_idx, out_mask, cts),
                     extra)
  _compare_lists(run, call, "vjp vs TF GradientTape", ours, expected,
                 derivative_tolerance(call, diff_idx, [o.dtype for o, m in zip(tf_outs, out_mask)
                                                       if m]),
                 record_as="vjp", extra=extra, labels=labels)


def _check_vmap(run, call, tf_outs, draw):
  n = len(call.operands)
  if n == 0:
    run.skip_example("no operands to batch")
  batch = draw.integer(2, 3, "batch size")
  axes = []
  for i, o in enumerate(call.operands):
    a = draw.integer(-1, np.ndim(o), f"in_axes[{call.operand_label(i)}]")
    axes.append(None if a < 0 else a)
  if all(a is None for a in axes):
    axes[draw.integer(0, n - 1, "batched operand")] = 0
  rng = np.random.default_rng(draw.integer(0, 2**31 - 1, "batch seed"))
  members, member_tf = [call], [tf_outs]
  for k in range(1, batch):
    chosen = None
    how = getattr(run.spec, "vmap_variation", "permute")
    for mode in ("all", "floats"):
      ops = [_vary(o, rng, k, mode == "floats", how) if a is not None else o
             for o, a in zip(call.operands, axes)]
      cand = prepare_call(call.with_operands(ops))
      if cand.params != call.params:
        continue
      try:
        chosen = (cand, tf_outputs(cand))
        break
      except _Rejected:
        continue
    if chosen is None:
      chosen = (call, tf_outs)
    members.append(chosen[0])
    member_tf.append(chosen[1])
  batched = [np.stack([m.operands[i] for m in members], axis=a) if a is not None else o
             for i, (o, a) in enumerate(zip(call.operands, axes))]
  extra = {"in_axes": tuple(axes), "batched": batched, "batch": batch}
  op, params = call.op, call.params
  fn = _jitted(op, params, "vmap", tuple(axes),
               lambda: jax.vmap(_bound(op, params), in_axes=tuple(axes)))
  out = _guard(run, call, "jax.vmap", lambda: [np.asarray(o) for o in _outs(op, fn(*batched))],
               extra)
  for k, (m, mt) in enumerate(zip(members, member_tf)):
    ours_k = _guard(run, call, "our op (eager)", lambda: ours_eager(m), extra)
    got = [o[k] for o in out]
    _compare_lists(run, call, f"vmap example {k} vs our op on that example", got, ours_k,
                   value_tolerance, extra=extra)
    if "values" not in run.spec.skip:
      _compare_lists(run, call, f"vmap example {k} vs TF on that example", got, mt,
                     value_tolerance, extra=extra)
  # vmap of the VJP.
  if not _grad_applies(run):
    return
  gcall = prepare_call(call.with_operands([_sanitize(o) for o in call.operands]))
  diff_idx = _diff_indices(run.spec, gcall)
  out_mask = [_is_inexact(o.dtype) for o in tf_outs]
  if not diff_idx or not any(out_mask) or gcall.params != call.params:
    return
  gbatched = [_sanitize(b) if a is not None else gcall.operands[i]
              for i, (b, a) in enumerate(zip(batched, axes))]
  cts = [np.stack([_random_like(rng, o) for _ in range(batch)])
         for o, m in zip(tf_outs, out_mask) if m]
  gfn = _jitted(op, params, "vmap-vjp", (tuple(axes), tuple(diff_idx), tuple(out_mask)),
                lambda: jax.vmap(_vjp_fn(op, params, diff_idx, out_mask),
                                 in_axes=(list(axes), [0] * len(cts))))
  gextra = dict(extra, batched=gbatched)
  gout = _guard(run, call, "jax.vmap of jax.vjp",
                lambda: [np.asarray(g) for g in gfn(list(gbatched), list(cts))], gextra)
  for k in range(batch):
    ops_k = [np.take(b, k, axis=a) if a is not None else b for b, a in zip(gbatched, axes)]
    mk = prepare_call(gcall.with_operands(ops_k))
    per = _guard(run, call, "jax.vjp",
                 lambda: ours_vjp(mk, diff_idx, out_mask, [c[k] for c in cts]), gextra)
    _compare_lists(run, call, f"vmap(vjp) example {k} vs vjp on that example",
                   [g[k] for g in gout], per, grad_tolerance, extra=gextra,
                   labels=[f"d/d {call.operand_label(i)}" for i in diff_idx])


def _grad_applies(run: _Run) -> bool:
  return "vjp" not in run.spec.skip and "vjp" not in run.auto


_CHECK_FNS = {
    "values": _check_values, "shape": _check_shape, "jvp": _check_jvp,
    "vjp": _check_vjp, "vmap": _check_vmap, "jit": _check_jit,
}


def _one_example(run: _Run, drawer: _Drawer, kwargs=None):
  """Runs ``run.check`` on one drawn call."""
  if kwargs is None:
    kwargs = drawer.call(run.spec.calls)
  call = make_call(run.op, kwargs, run.oracle, run.spec)
  try:
    try:
      tf_outs = tf_outputs(call)
    except _Rejected as e:
      run.reject(e)
    try:
      prepare_call(call)
    except (CheckFailure, hypothesis.errors.UnsatisfiedAssumption):
      raise
    except Exception as e:  # pylint: disable=broad-except
      run.fail(call, f"op.prepare raised {type(e).__name__}: {e}")
    if not run.x64:
      tf_outs, call = _narrow_for_x64_off(run, call, tf_outs)
    try:
      _CHECK_FNS[run.check](run, call, tf_outs, drawer)
    except _Rejected as e:
      # TF's forward pass ran but a later TF call (autodiff, shifted or batched
      # inputs) was refused: discard, counted.
      run.reject(_Rejected(f"{run.check}: {e.category}", str(e)))
  except _Skip:
    return
  run.examples += 1


def _narrow_for_x64_off(run, call, tf_outs):
  """With x64 off, compare against TF's outputs in canonical dtypes; calls whose
  64-bit inputs do not fit 32 bits do not apply."""
  from tfprims import dtypes as tfp_dtypes, errors
  try:
    for o in call.operands:
      tfp_dtypes.canonicalize_value(o)
  except errors.TFPrimsError:
    run.skip_example("64-bit inputs beyond the 32-bit range (x64 off)")
  narrowed = []
  for o in tf_outs:
    name = _X64_NARROW.get(o.dtype.name)
    narrowed.append(o.astype(name) if name else o)
  return narrowed, call


# --------------------------------------------------------------------------
# Static applicability


def _arg_may_be_float(od, arg) -> bool:
  tf = _tf()

  def inexact(enum):
    d = tf.dtypes.as_dtype(enum)
    return d.is_floating or d.is_complex

  if arg.type:
    return inexact(arg.type)
  if arg.type_attr:
    for a in od.attr:
      if a.name == arg.type_attr:
        allowed = list(a.allowed_values.list.type)
        return not allowed or any(inexact(t) for t in allowed)
  return True


def auto_skips(op, spec: Optional[Spec] = None, oracle=None) -> dict:
  """Checks that cannot apply to ``op`` whatever is drawn: {check: reason}."""
  oracle = oracle or op.op_type
  out = {}
  if not callable(oracle):
    tf = _tf()
    if not hasattr(tf.raw_ops, oracle):
      return {c: f"tf.raw_ops has no {oracle}" for c in CHECKS}
    od = opdefs.op_def(oracle)
    if od is not None:
      ins = [a for a in od.input_arg if a.name not in op.static]
      if not ins and not op.uses_rng:
        out["vmap"] = "no non-static inputs to batch"
      if not any(_arg_may_be_float(od, a) for a in ins):
        out["jvp"] = out["vjp"] = "no float inputs"
      elif not any(_arg_may_be_float(od, a) for a in od.output_arg):
        out["jvp"] = out["vjp"] = "no float outputs"
    grad = tf_gradient_status(oracle)
    if grad and not (spec is not None and spec.grad_oracle == "fd"):
      out.setdefault("jvp", grad)
      out.setdefault("vjp", grad)
  return out


# --------------------------------------------------------------------------
# Running


_PROFILES_REGISTERED = False


def register_profiles():
  """Registers the Hypothesis profiles "default"/"ci" (few examples, derandomized)
  and "thorough" (200 examples per op per check)."""
  global _PROFILES_REGISTERED
  if _PROFILES_REGISTERED:
    return
  from hypothesis import HealthCheck, Phase
  suppress = [HealthCheck.too_slow, HealthCheck.filter_too_much, HealthCheck.data_too_large,
              HealthCheck.large_base_example, HealthCheck.differing_executors]
  phases = [Phase.explicit, Phase.reuse, Phase.generate, Phase.shrink]
  common = dict(deadline=None, suppress_health_check=suppress, report_multiple_bugs=False,
                phases=phases, print_blob=False)
  for name in ("default", "ci"):
    hypothesis.settings.register_profile(name, max_examples=6, derandomize=True,
                                         database=None, **common)
  hypothesis.settings.register_profile("thorough", max_examples=200, **common)
  hypothesis.settings.register_profile("dev", max_examples=20, **common)
  _PROFILES_REGISTERED = True


def _run_check(run: _Run, settings: hypothesis.settings) -> CheckResult:
  start = time.perf_counter()
  run.budget = max(REJECT_BUDGET_MIN, REJECT_BUDGET_FACTOR * settings.max_examples)
  run.target = settings.max_examples

  def test(data):
    drawer = _Drawer(data=data)
    kwargs = drawer.call(run.spec.calls)
    key = drawer.fingerprint()
    if run.failing_calls:
      # Already failed: bound the shrinking cost. Beyond the budget, calls not
      # known to fail pass, so Hypothesis settles on the smallest failure found
      # (whose replay must still fail).
      run.after_failure += 1
      if run.after_failure > SHRINK_BUDGET and key not in run.failing_calls:
        return
    try:
      _one_example(run, drawer, kwargs)
    except CheckFailure:
      run.failing_calls.add(key)
      raise

  test.__name__ = f"test_{run.op.op_type}_{run.check}"
  test.__qualname__ = test.__name__
  wrapped = hypothesis.given(data=hst.data())(test)
  wrapped = settings(wrapped)
  result = CheckResult(run.check, "passed")
  try:
    with jax.enable_x64(run.x64):
      wrapped()
  except CheckFailure as failure:
    result.status, result.message = "failed", str(failure)
  except hypothesis.errors.Unsatisfiable:
    pass  # handled by the counts below
  except Exception as e:  # pylint: disable=broad-except
    # A bad spec (drawing fails, wrong input names) or an error outside our op.
    import traceback
    tb = "".join(traceback.format_exception(type(e), e, e.__traceback__, limit=-4))
    result.status = "error"
    result.message = (f"{run.op.op_type}: check {run.check!r} errored (spec or runner "
                      f"problem, not a mismatch): {type(e).__name__}: {e}\n{tb[-2500:]}")
  result.examples, result.rejected = run.examples, run.rejected
  result.not_applicable = run.not_applicable
  result.seconds = time.perf_counter() - start
  oracle_failures = {k: v for k, v in run.reject_reasons.items() if ":" in k}
  if oracle_failures and result.status == "passed" and not _too_many_rejections(run):
    for k, (n, msg) in oracle_failures.items():
      run.note(f"TF's oracle failed on {n} call(s), not checked ({k}: {msg[:160]})")
  result.notes = tuple(run.notes)
  if result.status == "passed":
    kernel = run.reject_reasons.get("no CPU kernel")
    if kernel:
      result.status = "failed"
      result.message = (f"{run.op.op_type}: check {run.check!r}: the spec draws calls TF has "
                        f"no CPU kernel for ({kernel[0]} times), e.g.: {kernel[1]}")
    elif _too_many_rejections(run):
      reasons = "; ".join(f"{k} x{v[0]}: {v[1]}" for k, v in run.reject_reasons.items())
      result.status = "failed"
      result.message = (f"{run.op.op_type}: check {run.check!r}: TF rejected most drawn calls "
                        f"({run.rejected} rejected, {run.examples} checked, "
                        f"{run.not_applicable} n/a): {_too_many_rejections(run)}. {reasons}")
    elif run.examples == 0:
      if run.not_applicable:
        result.status = "auto-skipped"
        result.reason = "no drawn call applies: " + ", ".join(run.na_reasons)
      else:
        result.status = "failed"
        result.message = f"{run.op.op_type}: check {run.check!r}: no valid example was drawn"
  return result


def _too_many_rejections(run: _Run) -> str:
  """Why the rejections say the spec (or the oracle) is bad; "" if they don't.

  Calls TF's forward op refuses count against every drawn call (n/a calls were
  accepted by TF); failures of the check's own TF oracle (autodiff, shifted or
  batched calls) count against the calls the check ran on.
  """
  forward = sum(v[0] for k, v in run.reject_reasons.items() if ":" not in k)
  oracle = run.rejected - forward
  if forward > run.examples + run.not_applicable:
    return "the spec draws calls TF refuses"
  if oracle > run.examples and run.examples * 2 < run.target:
    return ("TF's oracle for this check fails on most calls TF itself accepts, so the check "
            "ran on too few: restrict the spec, choose Spec.grad_oracle, or skip the check "
            "with a reason")
  return ""


def _resolve_op(op_or_name):
  if isinstance(op_or_name, str):
    import tfprims.ops  # noqa: F401  (registers the ops)
    return core.get_op(op_or_name)
  return op_or_name


def check_op(op_or_name, checks: Optional[Iterable[str]] = None, *,
             oracle: Union[None, str, Callable[..., Any]] = None,
             max_examples: Optional[int] = None,
             settings: Optional[hypothesis.settings] = None,
             x64: bool = True, spec: Optional[Spec] = None,
             raise_on_failure: bool = True) -> OpReport:
  """Property-tests one op against TF; raises :class:`OpCheckError` on failure.

  Args:
    op_or_name: a :class:`~tfprims.core.TFOp` or a registered op type.
    checks: a subset of ``CHECKS`` (default: all not skipped by the spec).
    oracle: the TF op type to compare with (default: the op's type), or a
      callable taking the same keyword arguments and returning TF tensors.
    max_examples: examples per check (default: the current Hypothesis profile's).
    settings: Hypothesis settings to use instead of the current profile.
    x64: run with ``jax_enable_x64`` on (64-bit dtypes compared exactly); the
      shape check always also runs with x64 off.
    spec: use this spec instead of the op's own.
  Returns:
    an :class:`OpReport` (per check: status, examples run, rejections...).
  """
  register_profiles()
  op = _resolve_op(op_or_name)
  spec = spec if spec is not None else load_spec(op)
  if spec is None:
    raise OpCheckError(f"{op.op_type} has no spec: pass spec=lambda st: st.Spec(...) "
                       "to define_op")
  oracle = oracle or getattr(spec, "oracle", None) or op.op_type
  settings = settings or hypothesis.settings()
  from hypothesis import HealthCheck
  settings = hypothesis.settings(
      settings, deadline=None, report_multiple_bugs=False,
      suppress_health_check=list(HealthCheck),
      **({} if max_examples is None else {"max_examples": max_examples}))
  selected = list(checks) if checks is not None else list(CHECKS)
  unknown = set(selected) - set(CHECKS)
  if unknown:
    raise ValueError(f"unknown checks {sorted(unknown)}; known: {CHECKS}")
  auto = auto_skips(op, spec, oracle)
  results, errored = {}, None
  for check in selected:
    if errored:
      results[check] = CheckResult(check, "not run", f"after the error in {errored!r}")
      continue
    if check in spec.skip:
      results[check] = CheckResult(check, "skipped", spec.skip[check])
      continue
    if check in auto:
      results[check] = CheckResult(check, "auto-skipped", auto[check])
      continue
    run = _Run(op=op, spec=spec, oracle=oracle, check=check, x64=x64, auto=auto)
    results[check] = _run_check(run, settings)
    if results[check].status == "error":
      errored = check
  report = OpReport(op.op_type, results)
  if raise_on_failure and report.failed:
    raise OpCheckError("\n\n".join(r.message for r in report.failed) +
                       "\n\n" + report.summary(), report)
  return report


def run_checks(op_or_name, kwargs: Mapping[str, Any], checks: Optional[Iterable[str]] = None,
               *, seed: int = 0, oracle=None, spec: Optional[Spec] = None,
               x64: bool = True) -> dict:
  """Runs the checks on one given call (e.g. inside your own ``@given`` test).

  Extra randomness (tangents, batch axes) comes from ``seed``. Calls TF rejects
  are discarded with ``hypothesis.reject()``. Raises :class:`CheckFailure`
  (an AssertionError) on a mismatch. Returns {check: "passed"/"skipped: why"}.
  """
  op = _resolve_op(op_or_name)
  spec = spec if spec is not None else load_spec(op)
  if spec is None:
    spec = Spec(calls=None)
  oracle = oracle or getattr(spec, "oracle", None) or op.op_type
  auto = auto_skips(op, spec, oracle)
  out = {}
  with jax.enable_x64(x64):
    for check in (checks if checks is not None else CHECKS):
      reason = spec.skip.get(check) or auto.get(check)
      if reason:
        out[check] = f"skipped: {reason}"
        continue
      run = _Run(op=op, spec=spec, oracle=oracle, check=check, x64=x64, budget=10**9,
                 auto=auto)
      _one_example(run, _Drawer(rng=np.random.default_rng(seed)), dict(kwargs))
      out[check] = "passed"
  return out


def property_test(op_type: str, checks: Optional[Iterable[str]] = None, **kwargs):
  """A pytest test function checking one op: ``test_my_op = property_test("MyOp")``."""
  def test():
    check_op(op_type, checks, **kwargs)
  test.__name__ = f"test_{op_type}"
  return test


@contextlib.contextmanager
def temporary_op(op_type: str, impl, **define_kwargs):
  """Registers an op for the duration of a ``with`` block (replacing and then
  restoring any op of that type). Used to test the runner with broken rules."""
  previous = core.get_op(op_type) if op_type in core.registered_ops() else None
  op = core.define_op(op_type, impl, replace=True, **define_kwargs)
  try:
    yield op
  finally:
    if previous is None:
      core.unregister_op(op_type)
    else:
      core.install_op(previous)
    for key in [k for k in _JIT_CACHE if k[0] is op]:
      del _JIT_CACHE[key]


# --------------------------------------------------------------------------
# Error records

_ERRORS: dict = {}


def recorded_errors() -> dict:
  """{op: {check: {dtype: {"max_abs", "max_rel", "examples"}}}} seen so far."""
  return _ERRORS


def write_errors(path: str, errors: Optional[dict] = None, profile: Optional[str] = None):
  """Merges recorded errors into the JSON file at ``path`` (entries of the ops
  recorded here replace older ones); safe with concurrent writers."""
  errors = _ERRORS if errors is None else errors
  if not errors:
    return
  import fcntl
  import tempfile
  os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
  lock_name = hashlib.sha256(os.path.abspath(path).encode()).hexdigest()[:16]
  with open(os.path.join(tempfile.gettempdir(), f"tfprims-errors-{lock_name}.lock"), "w") as lock:
    fcntl.flock(lock, fcntl.LOCK_EX)
    try:
      with open(path) as f:
        data = json.load(f)
    except (FileNotFoundError, json.JSONDecodeError):
      data = {}
    ops = data.setdefault("ops", {})
    for op_type, checks in errors.items():
      entry = {c: {d: {k: (float(f"{v:.3g}") if isinstance(v, float) else v)
                       for k, v in stats.items()}
                   for d, stats in sorted(dtypes.items())}
               for c, dtypes in sorted(checks.items())}
      if profile:
        entry["profile"] = profile
      ops[op_type] = entry
    data["ops"] = dict(sorted(ops.items()))
    tmp = f"{path}.{os.getpid()}.tmp"
    with open(tmp, "w") as f:
      json.dump(data, f, indent=1, sort_keys=True)
      f.write("\n")
    os.replace(tmp, path)
