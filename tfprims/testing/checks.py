"""The six checks, run one drawn call at a time.

:func:`_one_example` draws a call (:class:`_Drawer`), gets TF's outputs,
prepares our operands and runs one check function on them: ``values``,
``jit``, ``shape``, ``jvp``, ``vjp`` or ``vmap`` (see :mod:`tfprims.testing.runner`
for what each compares). :class:`_Run` carries a check's state across
Hypothesis examples: the calls discarded (TF rejected them, or the check does
not apply) against the rejection budget, notes, and failures turned into
:class:`~tfprims.testing.report.CheckFailure` with a repro snippet.
"""

from __future__ import annotations

import dataclasses
import hashlib
import warnings
from typing import Any, Optional

import hypothesis
import jax
import numpy as np
from hypothesis import strategies as hst

from tfprims import dtypes as tfp_dtypes
from tfprims import errors
from tfprims.testing.calls import (
  Call,
  _bound,
  _jitted,
  _outs,
  _params_key,
  _random_like,
  _sanitize,
  _vary,
  _vjp_fn,
  make_call,
  ours_eager,
  ours_jit,
  ours_jvp,
  ours_vjp,
  prepare_call,
)
from tfprims.testing.comparison import (
  FD_TOL,
  Diff,
  _is_inexact,
  compare,
  derivative_tolerance,
  grad_tolerance,
  jit_tolerance,
  value_tolerance,
)
from tfprims.testing.oracles import (
  _Rejected,
  returns_tf,
  tf_central_difference,
  tf_jvp,
  tf_outputs,
  tf_vjp,
)
from tfprims.testing.report import _ERRORS, CheckFailure, record_drawn
from tfprims.testing.snippets import snippet
from tfprims.testing.spec import Spec

# Per check run, at most this many TF-rejected / not-applicable draws are
# discarded before further ones are let through as trivial passes.
REJECT_BUDGET_FACTOR = 3
REJECT_BUDGET_MIN = 20


class _Skip(Exception):
  """The example is discarded (over the rejection budget: it passes trivially)."""


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
  auto: dict = dataclasses.field(default_factory=dict)  # auto_skips(op)
  target: int = 0  # max_examples
  progress: Any = None  # tfprims.progress.Progress

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
    text = (
      f"{self.op.op_type}: check {check!r} failed: {message}\n"
      f"  reproduce:\n{snippet(call, check, extra)}"
    )
    raise CheckFailure(text)

  def note(self, text: str):
    if text not in self.notes and len(self.notes) < 10:
      self.notes.append(text)


def _record(run: _Run, check: str, dtype, diff: Diff):
  if not run.record:
    return
  entry = (
    _ERRORS.setdefault(run.op.op_type, {})
    .setdefault(check, {})
    .setdefault(np.dtype(dtype).name, {"max_abs": 0.0, "max_rel": 0.0, "examples": 0})
  )
  entry["max_abs"] = max(entry["max_abs"], diff.max_abs)
  entry["max_rel"] = max(entry["max_rel"], diff.max_rel)
  entry["examples"] += 1


def _compare_lists(
  run,
  call,
  what,
  actual,
  expected,
  tol_fn,
  check_dtype=True,
  record_as=None,
  extra=None,
  labels=None,
  signed_zeros=False,
):
  if len(actual) != len(expected):
    run.fail(call, f"{what}: {len(actual)} outputs, expected {len(expected)}", extra)
  for k, (a, e) in enumerate(zip(actual, expected)):
    rtol, atol = tol_fn(run.spec, np.asarray(e).dtype)
    label = labels[k] if labels else f"output {k}"
    diff = compare(
      a,
      e,
      rtol=rtol,
      atol=atol,
      check_dtype=check_dtype,
      what=f"{what}, {label}",
      signed_zeros=signed_zeros,
    )
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


def _oracle_name(call) -> str:
  return "the reference" if call.reference else "TF"


def _grad_oracle(run: _Run, call) -> str:
  """The spec's ``grad_oracle``; ``"fd"`` for a numpy/JAX reference (no TF autodiff):
  the JVP against its central differences, the VJP as the transpose of that JVP."""
  if call.reference and not returns_tf(call.oracle):
    return "fd"
  return run.spec.grad_oracle


def _check_values(run, call, tf_outs, draw):
  signed = not run.spec.ignore_zero_sign
  eager = _guard(run, call, "our op (eager)", lambda: ours_eager(call))
  _compare_lists(
    run,
    call,
    f"eager vs {_oracle_name(call)}",
    eager,
    tf_outs,
    value_tolerance,
    record_as="values",
    signed_zeros=signed,
  )
  jitted = _guard(run, call, "our op (jit)", lambda: ours_jit(call))
  _compare_lists(
    run, call, f"jit vs {_oracle_name(call)}", jitted, tf_outs, value_tolerance, signed_zeros=signed
  )
  if run.record:
    record_drawn(run.op.op_type, call.operands)


def _check_jit(run, call, tf_outs, draw):
  eager = _guard(run, call, "our op (eager)", lambda: ours_eager(call))
  jitted = _guard(run, call, "our op (jit)", lambda: ours_jit(call))
  _compare_lists(run, call, "jit vs eager", jitted, eager, jit_tolerance)


_SHAPE_WARNINGS: dict = {}

_X64_NARROW = {
  "int64": "int32",
  "uint64": "uint32",
  "float64": "float32",
  "complex128": "complex64",
}


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
        avals = _guard(
          run,
          call,
          f"abstract eval ({mode})",
          lambda: _eval_shape_x64_off_may_refuse(op, c.params, structs(not x64), x64),
        )
      except _NeedsX64:
        continue
    avals = _outs(op, avals)
    got = [(tuple(a.shape), np.dtype(a.dtype)) for a in avals]
    want = expect(not x64)
    if got != want:
      run.fail(call, f"abstract eval ({mode}): got {_sd(got)}, TF gives {_sd(want)}")
    jax_warnings = [
      str(w.message)
      for w in caught
      if "not available" in str(w.message) or "jax_enable_x64" in str(w.message)
    ]
    # JAX caches abstract evals: remember warnings so replays fail the same way.
    key = (op, _params_key(c.params), tuple((s.shape, s.dtype) for s in structs(not x64)), x64)
    if jax_warnings:
      _SHAPE_WARNINGS[key] = jax_warnings
    jax_warnings = _SHAPE_WARNINGS.get(key, jax_warnings)
    if jax_warnings:
      run.fail(
        call,
        f"abstract eval ({mode}) warned: {jax_warnings[0][:300]} (use "
        "tfprims.dtypes.canonical_dtype for output dtypes)",
      )
  del f


class _NeedsX64(Exception):
  pass


def _eval_shape_x64_off_may_refuse(op, params, structs, x64):
  """``jax.eval_shape`` of the op; with x64 off an op may refuse a call with
  ``Int64OverflowError`` when its result cannot be had in 32 bits (Bitcast
  float64 -> int64): that typed refusal is its documented x64-off behaviour."""
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
  return [
    i
    for i, o in enumerate(call.operands)
    if _is_inexact(np.asarray(o).dtype) and (names is None or call.operand_args[i][0] in names)
  ]


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
    raise _Rejected(
      f"TF {what} raised {type(e).__name__}", " ".join(str(e).split())[:300]
    ) from None


def _check_jvp(run, call, tf_outs, draw):
  call, tf_outs, diff_idx, out_mask = _diff_setup(run, call, tf_outs)
  rng = np.random.default_rng(draw.integer(0, 2**31 - 1, "tangent seed"))
  tangents = [_random_like(rng, call.operands[i]) for i in diff_idx]
  extra = {
    "diff": diff_idx,
    "tangents": tangents,
    "float_outputs": [k for k, m in enumerate(out_mask) if m],
  }
  ours = _guard(run, call, "jax.jvp", lambda: ours_jvp(call, diff_idx, out_mask, tangents), extra)
  oracle = _grad_oracle(run, call)
  labels = [f"output {k}" for k, m in enumerate(out_mask) if m]
  if oracle == "fd":
    fd = _oracle(
      run,
      call,
      "central differences",
      lambda: tf_central_difference(call, diff_idx, out_mask, tangents, step=run.spec.fd_step),
      extra,
    )
    for k, (a, e) in enumerate(zip(ours, fd)):
      rtol, atol = FD_TOL.get(np.asarray(a).dtype.name, (0.0, 0.0))
      rtol, atol = (
        max(rtol, grad_tolerance(run.spec, np.asarray(a).dtype)[0]),
        max(atol, grad_tolerance(run.spec, np.asarray(a).dtype)[1]),
      )
      diff = compare(
        a,
        e,
        rtol=rtol,
        atol=atol,
        check_dtype=False,
        what=f"jvp vs {_oracle_name(call)} central differences, {labels[k]}",
      )
      if not diff.ok:
        run.fail(call, diff.message, extra)
    return
  if oracle == "vjp":
    _jvp_dot_test(run, call, tf_outs, diff_idx, out_mask, tangents, ours, rng, extra)
    return
  try:
    expected = _oracle(
      run, call, "ForwardAccumulator", lambda: tf_jvp(call, diff_idx, out_mask, tangents), extra
    )
  except _Rejected as e:
    if not e.category.startswith("TF ForwardAccumulator raised"):
      raise
    # TF's forward mode (a double-backward trick) is broken for this call, e.g.
    # a missing second-order gradient: use GradientTape (dot-product test).
    run.note(
      f"TF ForwardAccumulator failed ({e.category[len('TF ForwardAccumulator raised ') :]}: "
      f"{str(e)[:120]}); the JVP was checked against GradientTape instead"
    )
    _jvp_dot_test(run, call, tf_outs, diff_idx, out_mask, tangents, ours, rng, extra)
    return
  wide = all(np.asarray(call.operands[i]).dtype in (np.float64, np.complex128) for i in diff_idx)
  try:
    _compare_lists(
      run,
      call,
      "jvp vs TF ForwardAccumulator",
      ours,
      expected,
      derivative_tolerance(call, diff_idx, [np.asarray(o).dtype for o in expected]),
      record_as="jvp",
      extra=extra,
      labels=labels,
    )
  except CheckFailure as failure:
    # Cross-check the oracle with central differences (computed in float64
    # when TF accepts it, so meaningful for every dtype).
    if True:
      try:
        fd = tf_central_difference(call, diff_idx, out_mask, tangents)
        dt = np.asarray(ours[0]).dtype if ours else np.dtype("float64")
        rtol, atol = grad_tolerance(run.spec, dt)
        rtol, atol = max(rtol, FD_TOL["float64"][0]), max(atol, FD_TOL["float64"][1])
        ok = lambda xs: all(
          compare(x, y, rtol=rtol, atol=atol, check_dtype=False).ok for x, y in zip(xs, fd)
        )
        verdict = (
          "central differences agree with ours, not TF: if TF's forward mode is "
          "wrong here, set grad_oracle='vjp' or 'fd' in the spec"
          if ok(ours) and not ok(expected)
          else "central differences agree with TF"
          if ok(expected)
          else "central differences agree with neither (non-smooth point?)"
        )
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
      diff = compare(
        e, d, rtol=FD_TOL["float64"][0] * 10, atol=FD_TOL["float64"][1] * 10, check_dtype=False
      )
      finite = np.all(np.isfinite(np.asarray(e))) and np.all(np.isfinite(np.asarray(d)))
      if finite and not diff.ok:
        run.note(
          f"TF's JVP (and ours) differ from central differences on a float64 call "
          f"(output {k}, max abs err {diff.max_abs:.3g}): a non-smooth point, or a "
          "wrong TF gradient"
        )


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
      run.fail(
        call,
        f"jvp dot-product test vs TF GradientTape: <ct, jvp(t)> = {lhs}, <TF vjp(ct), t> = {rhs}",
        extra,
      )
  elif abs(lhs - rhs) > atol + rtol * scale:
    run.fail(
      call,
      f"jvp dot-product test vs TF GradientTape: <ct, jvp(t)> = {lhs!r}, "
      f"<TF vjp(ct), t> = {rhs!r} (rtol={rtol:g}, scale {scale:.3g})",
      extra,
    )


def _check_vjp(run, call, tf_outs, draw):
  call, tf_outs, diff_idx, out_mask = _diff_setup(run, call, tf_outs)
  rng = np.random.default_rng(draw.integer(0, 2**31 - 1, "cotangent seed"))
  cts = [_random_like(rng, o) for o, m in zip(tf_outs, out_mask) if m]
  extra = {"diff": diff_idx, "cts": cts, "float_outputs": [k for k, m in enumerate(out_mask) if m]}
  ours = _guard(run, call, "jax.vjp", lambda: ours_vjp(call, diff_idx, out_mask, cts), extra)
  labels = [f"d/d {call.operand_label(i)}" for i in diff_idx]
  if _grad_oracle(run, call) == "fd":
    # Transpose consistency: <ct, J t> == <J^T ct, t> with our own JVP.
    tangents = [_random_like(rng, call.operands[i]) for i in diff_idx]
    jv = _guard(run, call, "jax.jvp", lambda: ours_jvp(call, diff_idx, out_mask, tangents), extra)
    lhs = sum(
      np.real(np.sum(np.conj(c.astype(np.complex128)) * t.astype(np.complex128)))
      for c, t in zip(cts, jv)
    )
    rhs = sum(
      np.real(np.sum(np.conj(g.astype(np.complex128)) * t.astype(np.complex128)))
      for g, t in zip(ours, tangents)
    )
    scale = (
      sum(
        float(np.sum(np.abs(c.astype(np.complex128) * t.astype(np.complex128))))
        for c, t in zip(cts, jv)
      )
      + 1.0
    )
    rtol, atol = grad_tolerance(run.spec, tf_outs[out_mask.index(True)].dtype)
    if np.isfinite(lhs) and np.isfinite(rhs) and abs(lhs - rhs) > atol + rtol * scale:
      run.fail(
        call,
        f"vjp is not the transpose of our jvp: <ct, jvp(t)> = {lhs!r}, <vjp(ct), t> = {rhs!r}",
        extra,
      )
    return
  expected = _oracle(
    run, call, "GradientTape", lambda: tf_vjp(call, diff_idx, out_mask, cts), extra
  )
  _compare_lists(
    run,
    call,
    "vjp vs TF GradientTape",
    ours,
    expected,
    derivative_tolerance(call, diff_idx, [o.dtype for o, m in zip(tf_outs, out_mask) if m]),
    record_as="vjp",
    extra=extra,
    labels=labels,
  )


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
      ops = [
        _vary(o, rng, k, mode == "floats", how) if a is not None else o
        for o, a in zip(call.operands, axes)
      ]
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
  batched = [
    np.stack([m.operands[i] for m in members], axis=a) if a is not None else o
    for i, (o, a) in enumerate(zip(call.operands, axes))
  ]
  extra = {"in_axes": tuple(axes), "batched": batched, "batch": batch}
  op, params = call.op, call.params
  fn = _jitted(
    op, params, "vmap", tuple(axes), lambda: jax.vmap(_bound(op, params), in_axes=tuple(axes))
  )
  out = _guard(
    run, call, "jax.vmap", lambda: [np.asarray(o) for o in _outs(op, fn(*batched))], extra
  )
  for k, (m, mt) in enumerate(zip(members, member_tf)):
    ours_k = _guard(run, call, "our op (eager)", lambda: ours_eager(m), extra)
    got = [o[k] for o in out]
    _compare_lists(
      run,
      call,
      f"vmap example {k} vs our op on that example",
      got,
      ours_k,
      value_tolerance,
      extra=extra,
    )
    if "values" not in run.spec.skip:
      _compare_lists(
        run, call, f"vmap example {k} vs TF on that example", got, mt, value_tolerance, extra=extra
      )
  # vmap of the VJP.
  if not _grad_applies(run):
    return
  gcall = prepare_call(call.with_operands([_sanitize(o) for o in call.operands]))
  diff_idx = _diff_indices(run.spec, gcall)
  out_mask = [_is_inexact(o.dtype) for o in tf_outs]
  if not diff_idx or not any(out_mask) or gcall.params != call.params:
    return
  gbatched = [
    _sanitize(b) if a is not None else gcall.operands[i]
    for i, (b, a) in enumerate(zip(batched, axes))
  ]
  cts = [
    np.stack([_random_like(rng, o) for _ in range(batch)]) for o, m in zip(tf_outs, out_mask) if m
  ]
  gfn = _jitted(
    op,
    params,
    "vmap-vjp",
    (tuple(axes), tuple(diff_idx), tuple(out_mask)),
    lambda: jax.vmap(_vjp_fn(op, params, diff_idx, out_mask), in_axes=(list(axes), [0] * len(cts))),
  )
  gextra = dict(extra, batched=gbatched)
  gout = _guard(
    run,
    call,
    "jax.vmap of jax.vjp",
    lambda: [np.asarray(g) for g in gfn(list(gbatched), list(cts))],
    gextra,
  )
  for k in range(batch):
    ops_k = [np.take(b, k, axis=a) if a is not None else b for b, a in zip(gbatched, axes)]
    mk = prepare_call(gcall.with_operands(ops_k))
    per = _guard(
      run, call, "jax.vjp", lambda: ours_vjp(mk, diff_idx, out_mask, [c[k] for c in cts]), gextra
    )
    _compare_lists(
      run,
      call,
      f"vmap(vjp) example {k} vs vjp on that example",
      [g[k] for g in gout],
      per,
      grad_tolerance,
      extra=gextra,
      labels=[f"d/d {call.operand_label(i)}" for i in diff_idx],
    )


def _grad_applies(run: _Run) -> bool:
  return "vjp" not in run.spec.skip and "vjp" not in run.auto


_CHECK_FNS = {
  "values": _check_values,
  "shape": _check_shape,
  "jvp": _check_jvp,
  "vjp": _check_vjp,
  "vmap": _check_vmap,
  "jit": _check_jit,
}


def _one_example(run: _Run, drawer: _Drawer, kwargs=None):
  """Runs ``run.check`` on one drawn call."""
  # Counted here, not in the runner's Hypothesis test: derandomized draws are seeded
  # from that function's source, so editing it redraws every op's CI examples.
  if run.progress is not None:
    run.progress.step()
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
