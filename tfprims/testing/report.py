"""What a property check reports: results, failures, and the largest errors vs TF.

:func:`~tfprims.testing.check_op` returns an :class:`OpReport` (one
:class:`CheckResult` per check) and raises :class:`OpCheckError`; a check that
fails on one drawn call raises :class:`CheckFailure`. Comparisons with TF
record their largest errors per op, check and dtype (:func:`recorded_errors`),
which :func:`write_errors` merges into a JSON file (see ``ERRORS_ENV``).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
from typing import Optional

__all__ = [
  "OpCheckError",
  "CheckFailure",
  "CheckResult",
  "OpReport",
  "ERRORS_ENV",
  "DRAWN_ENV",
  "recorded_errors",
  "write_errors",
  "edge_classes",
  "record_drawn",
  "write_drawn",
]

#: Environment variable naming a JSON file where the largest errors vs TF are
#: recorded (merged per op) at the end of a pytest session.
ERRORS_ENV = "TFPRIMS_MAX_ERRORS"

#: Environment variable naming a JSON file where the classes of boundary values the
#: values check ran on are recorded per op (docs/fidelity.md shows them).
DRAWN_ENV = "TFPRIMS_DRAWN_VALUES"


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


@dataclasses.dataclass
class CheckResult:
  check: str
  status: str  # "passed", "failed", "error", "skipped", "auto-skipped", "not run"
  reason: str = ""
  examples: int = 0  # calls on which the check ran
  rejected: int = 0  # calls TF rejected
  not_applicable: int = 0  # calls the check does not apply to (e.g. int dtypes)
  seconds: float = 0.0
  message: str = ""
  notes: tuple = ()

  def line(self) -> str:
    extra = f" ({self.reason})" if self.reason else ""
    stats = (
      f" [{self.examples} ok, {self.rejected} rejected by TF, "
      f"{self.not_applicable} n/a, {self.seconds:.1f}s]"
      if self.status in ("passed", "failed")
      else ""
    )
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
# Error records

# Filled by the checks (checks._record); only ever mutated in place, so the
# modules importing it share one record.
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

  def update(data):
    ops = data.setdefault("ops", {})
    for op_type, checks in errors.items():
      entry = {
        c: {
          d: {k: (float(f"{v:.3g}") if isinstance(v, float) else v) for k, v in stats.items()}
          for d, stats in sorted(dtypes.items())
        }
        for c, dtypes in sorted(checks.items())
      }
      if profile:
        entry["profile"] = profile
      ops[op_type] = entry
    data["ops"] = dict(sorted(ops.items()))
    return data

  _merge_json(path, update, indent=1)


def _merge_json(path: str, update, indent):
  """Rewrites the JSON file at ``path`` as ``update(its data)``, under a lock (pytest-xdist
  workers write concurrently)."""
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
    data = update(data)
    tmp = f"{path}.{os.getpid()}.tmp"
    with open(tmp, "w") as f:
      json.dump(data, f, indent=indent, sort_keys=True)
      f.write("\n")
    os.replace(tmp, path)


# --------------------------------------------------------------------------
# Boundary values drawn

# The classes, in the order docs/fidelity.md lists them.
EDGE_CLASSES = (
  "nan",
  "-nan",
  "inf",
  "-inf",
  "-0",
  "subnormal",
  "max",
  "int-valued",
  "ties",
  "int-extremes",
  "empty",
  "length-1",
)

_DRAWN: dict = {}


def edge_classes(arrays) -> set:
  """The boundary-value classes present in ``arrays`` (a call's operands)."""
  import numpy as np
  import ml_dtypes

  out = set()
  for a in arrays:
    a = np.asarray(a)
    if a.size == 0:
      out.add("empty")
      continue
    if 1 in a.shape:
      out.add("length-1")
    if a.dtype.kind in "iu":
      info = np.iinfo(a.dtype)
      if (a == info.min).any() or (a == info.max).any():
        out.add("int-extremes")
      if a.size > 1 and len(np.unique(a)) < a.size:
        out.add("ties")
      continue
    if a.dtype.kind == "c":
      parts = [a.real, a.imag]
    elif a.dtype.kind == "f" or a.dtype == ml_dtypes.bfloat16:
      parts = [a]
    else:
      continue
    for p in parts:
      finfo = ml_dtypes.finfo(p.dtype) if p.dtype == ml_dtypes.bfloat16 else np.finfo(p.dtype)
      f = p.astype(np.float64)
      nan = np.isnan(f)
      if (nan & ~np.signbit(f)).any():
        out.add("nan")
      if (nan & np.signbit(f)).any():
        out.add("-nan")
      if np.isposinf(f).any():
        out.add("inf")
      if np.isneginf(f).any():
        out.add("-inf")
      if ((f == 0) & np.signbit(f)).any():
        out.add("-0")
      finite = np.isfinite(f)
      mag = np.abs(f[finite])
      if ((mag > 0) & (mag < float(finfo.tiny))).any():
        out.add("subnormal")
      if (mag == float(finfo.max)).any():
        out.add("max")
      if ((mag >= 1) & (mag < 2**24) & (mag == np.floor(mag))).any():
        out.add("int-valued")
      vals = f[finite]
      if vals.size > 1 and len(np.unique(vals)) < vals.size:
        out.add("ties")
  return out


def record_drawn(op_type: str, arrays):
  """Adds the classes of ``arrays`` to what ``op_type``'s values check ran on."""
  _DRAWN.setdefault(op_type, set()).update(edge_classes(arrays))


def write_drawn(path: str):
  """Merges the recorded classes into the JSON file at ``path`` (per op: the union)."""
  if not _DRAWN:
    return

  def update(data):
    for op_type, classes in _DRAWN.items():
      data[op_type] = sorted(set(data.get(op_type, ())) | classes, key=EDGE_CLASSES.index)
    return data

  _merge_json(path, update, indent=0)
