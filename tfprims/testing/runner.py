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
:func:`temporary_op`. The rest of the runner, bottom up:

* :mod:`~tfprims.testing.report`: results, exceptions, the max-error record;
* :mod:`~tfprims.testing.comparison`: tolerances and :func:`compare`;
* :mod:`~tfprims.testing.oracles`: the TF side (raw ops, TF autodiff);
* :mod:`~tfprims.testing.calls`: drawn calls and our primitive run on them;
* :mod:`~tfprims.testing.snippets`: repro scripts;
* :mod:`~tfprims.testing.checks`: the six checks on one drawn call.
"""

from __future__ import annotations

import contextlib
import time
from typing import Any, Callable, Iterable, Mapping, Optional, Union

import hypothesis
import jax
import numpy as np
from hypothesis import strategies as hst

from tfprims import core, opdefs
from tfprims.progress import Progress
from tfprims.testing.calls import _JIT_CACHE, load_spec
from tfprims.testing.checks import (
  REJECT_BUDGET_FACTOR,
  REJECT_BUDGET_MIN,
  _Drawer,
  _one_example,
  _Run,
)
from tfprims.testing.oracles import _tf, tf_gradient_status
from tfprims.testing.report import CheckFailure, CheckResult, OpCheckError, OpReport
from tfprims.testing.spec import CHECKS, Spec

__all__ = [
  "check_op",
  "property_test",
  "run_checks",
  "temporary_op",
  "register_profiles",
  "auto_skips",
]

# After the first failure of a check, at most this many further executions are
# spent shrinking it; then unseen examples pass so Hypothesis stops early.
SHRINK_BUDGET = 150

# The fewest examples a check runs when its spec asks for a share of the profile's.
MIN_EXAMPLES = 2


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

  suppress = [
    HealthCheck.too_slow,
    HealthCheck.filter_too_much,
    HealthCheck.data_too_large,
    HealthCheck.large_base_example,
    HealthCheck.differing_executors,
  ]
  phases = [Phase.explicit, Phase.reuse, Phase.generate, Phase.shrink]
  common = dict(
    deadline=None,
    suppress_health_check=suppress,
    report_multiple_bugs=False,
    phases=phases,
    print_blob=False,
  )
  for name in ("default", "ci"):
    hypothesis.settings.register_profile(
      name, max_examples=6, derandomize=True, database=None, **common
    )
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
      for k, case in enumerate(_cases(run.spec)):
        _run_case(run, k, case)
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
    result.message = (
      f"{run.op.op_type}: check {run.check!r} errored (spec or runner "
      f"problem, not a mismatch): {type(e).__name__}: {e}\n{tb[-2500:]}"
    )
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
      result.message = (
        f"{run.op.op_type}: check {run.check!r}: the spec draws calls TF has "
        f"no CPU kernel for ({kernel[0]} times), e.g.: {kernel[1]}"
      )
    elif _too_many_rejections(run):
      reasons = "; ".join(f"{k} x{v[0]}: {v[1]}" for k, v in run.reject_reasons.items())
      result.status = "failed"
      result.message = (
        f"{run.op.op_type}: check {run.check!r}: TF rejected most drawn calls "
        f"({run.rejected} rejected, {run.examples} checked, "
        f"{run.not_applicable} n/a): {_too_many_rejections(run)}. {reasons}"
      )
    elif run.examples == 0:
      if run.not_applicable:
        result.status = "auto-skipped"
        result.reason = "no drawn call applies: " + ", ".join(run.na_reasons)
      else:
        result.status = "failed"
        result.message = f"{run.op.op_type}: check {run.check!r}: no valid example was drawn"
  return result


def _cases(spec: Spec) -> list:
  """The spec's canonical cases, then those its calls strategy proposes (the edge grid
  of an elementwise op: ``strategies.edge_grid_calls``)."""
  return list(spec.cases) + list(getattr(spec.calls, "canonical_cases", ()))


def _run_case(run: _Run, k: int, kwargs: Mapping[str, Any]):
  """Runs the check on the spec's ``k``-th canonical case (before any drawn call)."""
  rejected = {c: v[0] for c, v in run.reject_reasons.items()}
  budget, run.budget = run.budget, -1  # a discarded case is skipped, not rejected
  try:
    _one_example(run, _Drawer(rng=np.random.default_rng(k)), dict(kwargs))
  finally:
    run.budget = budget
  for category, (n, message) in run.reject_reasons.items():
    if ":" not in category and n > rejected.get(category, 0):
      raise CheckFailure(
        f"{run.op.op_type}: check {run.check!r}: TF refuses the spec's "
        f"canonical case {k} ({category}: {message[:300]})"
      )


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
    return (
      "TF's oracle for this check fails on most calls TF itself accepts, so the check "
      "ran on too few: restrict the spec, choose Spec.grad_oracle, or skip the check "
      "with a reason"
    )
  return ""


def _resolve_op(op_or_name):
  if isinstance(op_or_name, str):
    import tfprims.ops  # noqa: F401  (registers the ops)

    return core.get_op(op_or_name)
  return op_or_name


def check_op(
  op_or_name,
  checks: Optional[Iterable[str]] = None,
  *,
  oracle: Union[None, str, Callable[..., Any]] = None,
  max_examples: Optional[int] = None,
  settings: Optional[hypothesis.settings] = None,
  x64: bool = True,
  spec: Optional[Spec] = None,
  raise_on_failure: bool = True,
) -> OpReport:
  """Property-tests one op against TF; raises :class:`OpCheckError` on failure.

  Args:
    op_or_name: a :class:`~tfprims.core.TFOp` or a registered op type.
    checks: a subset of ``CHECKS`` (default: all not skipped by the spec).
    oracle: the TF op type to compare with (default: the op's type, or the spec's
      oracle), or a callable taking the same keyword arguments: TF code returning TF
      tensors, or for an op TF does not have (a user's own op) a numpy/JAX reference
      returning the expected outputs (see :func:`tfprims.testing.calls.is_reference`).
      With no TF op to compare with and no reference, every check fails, saying so.
    max_examples: examples per check (default: the current Hypothesis profile's,
      times the spec's ``examples`` share).
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
    raise OpCheckError(
      f"{op.op_type} has no spec: pass spec=lambda st: st.Spec(...) to register_op"
    )
  oracle = oracle or getattr(spec, "oracle", None) or op.op_type
  settings = settings or hypothesis.settings()
  if max_examples is None and spec.examples < 1:
    max_examples = max(MIN_EXAMPLES, round(settings.max_examples * spec.examples))
  from hypothesis import HealthCheck

  settings = hypothesis.settings(
    settings,
    deadline=None,
    report_multiple_bugs=False,
    suppress_health_check=list(HealthCheck),
    **({} if max_examples is None else {"max_examples": max_examples}),
  )
  selected = list(checks) if checks is not None else list(CHECKS)
  unknown = set(selected) - set(CHECKS)
  if unknown:
    raise ValueError(f"unknown checks {sorted(unknown)}; known: {CHECKS}")
  auto = auto_skips(op, spec, oracle)
  missing = _missing_oracle(op, oracle)
  results, errored = {}, None
  runs = [c for c in selected if c not in spec.skip and c not in auto]
  shown = Progress(
    len(runs) * settings.max_examples, f"{op.op_type}: property checks", unit="examples"
  )
  for check in selected:
    if errored:
      results[check] = CheckResult(check, "not run", f"after the error in {errored!r}")
      continue
    if check in spec.skip:
      results[check] = CheckResult(check, "skipped", spec.skip[check])
      continue
    if missing:
      results[check] = CheckResult(check, "failed", auto.get(check, ""), message=missing)
      continue
    if check in auto:
      results[check] = CheckResult(check, "auto-skipped", auto[check])
      continue
    run = _Run(op=op, spec=spec, oracle=oracle, check=check, x64=x64, auto=auto, progress=shown)
    results[check] = _run_check(run, settings)
    if results[check].status == "error":
      errored = check
  shown.finish()
  _fail_if_nothing_ran(op, results)
  report = OpReport(op.op_type, results)
  if raise_on_failure and report.failed:
    messages = list(dict.fromkeys(r.message for r in report.failed))
    raise OpCheckError("\n\n".join(messages) + "\n\n" + report.summary(), report)
  return report


def _missing_oracle(op, oracle) -> str:
  """Why nothing can be checked when TF has no op to compare ``op`` with and no
  reference was given ("" when there is an oracle)."""
  if callable(oracle) or hasattr(_tf().raw_ops, oracle):
    return ""
  return (
    f"{op.op_type}: nothing to compare with: TensorFlow has no op {oracle!r} "
    f"(tf.raw_ops.{oracle}), so no check can run, and a check that compares nothing "
    "does not pass. Give a reference: the spec's oracle, "
    f"spec=lambda st: st.Spec(calls, oracle=reference), or check_op({op.op_type!r}, "
    "oracle=reference): a numpy or JAX function taking the drawn keyword arguments "
    "(inputs as numpy arrays, attrs as Python values) and returning the expected "
    "output (a tuple or list for several); or the name of a TF op computing the same "
    "(oracle=\"Softsign\"). See docs/testing.md, \"Testing your own op\"."
  )


def _fail_if_nothing_ran(op, results: dict):
  """A report whose checks all skipped, at least one of them automatically (so not by
  the spec's declared reasons), compared nothing: those checks fail, saying so."""
  if any(r.status in ("passed", "failed", "error") for r in results.values()):
    return
  auto = [r for r in results.values() if r.status == "auto-skipped"]
  if not auto:
    return
  why = "; ".join(f"{r.check}: {r.reason}" for r in auto)
  message = (
    f"{op.op_type}: no check ran, so nothing was compared ({why}). Run checks "
    "that apply to the op (checks=...), make the spec draw calls they apply to, "
    "or declare each skip with its reason in the spec (skip={...})"
  )
  for r in auto:
    r.status, r.message = "failed", message


def run_checks(
  op_or_name,
  kwargs: Mapping[str, Any],
  checks: Optional[Iterable[str]] = None,
  *,
  seed: int = 0,
  oracle=None,
  spec: Optional[Spec] = None,
  x64: bool = True,
) -> dict:
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
  missing = _missing_oracle(op, oracle)
  if missing:
    raise OpCheckError(missing)
  auto = auto_skips(op, spec, oracle)
  out = {}
  with jax.enable_x64(x64):
    for check in checks if checks is not None else CHECKS:
      reason = spec.skip.get(check) or auto.get(check)
      if reason:
        out[check] = f"skipped: {reason}"
        continue
      run = _Run(op=op, spec=spec, oracle=oracle, check=check, x64=x64, budget=10**9, auto=auto)
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
  op = core.register_op(op_type, impl, replace=True, **define_kwargs)
  try:
    yield op
  finally:
    if previous is None:
      core.unregister_op(op_type)
    else:
      core.install_op(previous)
    for key in [k for k in _JIT_CACHE if k[0] is op]:
      del _JIT_CACHE[key]
