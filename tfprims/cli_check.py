"""``tfprims inspect``'s check against TensorFlow: the converted function (jitted) and
TF on the same example input, each output compared relative to its own scale, and
how much the outputs depend on the inputs at all (an output that barely moves
between two random inputs matches whatever the conversion did to the rest)."""

from __future__ import annotations

import dataclasses
import re
import sys
import time
from typing import Optional

import numpy as np

from tfprims.cli_common import CLIError

# An output is (nearly) constant when the change two random inputs make to it stays
# below WEAK_FACTOR tolerances: a wrong conversion of what depends on the inputs
# could then hide inside the tolerance.
WEAK_FACTOR = 100.0

_NO_KERNEL = re.compile(r"OpKernel|no kernel|kernel (was )?registered|Could not find device", re.I)


@dataclasses.dataclass
class OutputDiff:
  name: str
  shape: tuple
  tf_dtype: str
  jax_dtype: str
  max_abs: float  # inf when shapes differ or non-finite values disagree
  scale: float  # max |tf| over finite values
  note: str = ""
  exact: bool = False  # integers and booleans: equal or not
  change: Optional[float] = None  # max |tf(x') - tf(x)| for a second random input x'

  @property
  def relative(self) -> float:
    if self.scale > 0:
      return self.max_abs / self.scale
    return 0.0 if self.max_abs == 0 else float("inf")

  def bound(self, tolerance: float) -> float:
    """The largest difference allowed: ``tolerance * max|tf|`` (0 for exact outputs)."""
    return 0.0 if self.exact else tolerance * self.scale

  def ok(self, tolerance: float) -> bool:
    return self.max_abs <= self.bound(tolerance)

  def weak(self, tolerance: float) -> bool:
    """The second input changed this output by (next to) nothing."""
    if self.change is None or self.max_abs == float("inf"):
      return False
    return self.change <= WEAK_FACTOR * self.bound(tolerance)


@dataclasses.dataclass
class Comparison:
  outputs: list
  tolerance: float
  seconds: float
  varied: bool = True  # a second input with other float values was run in TF

  @property
  def worst(self) -> Optional[OutputDiff]:
    return max(self.outputs, key=lambda o: (o.relative, o.max_abs), default=None)

  @property
  def max_abs(self) -> float:
    return max((o.max_abs for o in self.outputs), default=0.0)

  @property
  def scale(self) -> float:
    return self.worst.scale if self.outputs else 0.0

  @property
  def relative(self) -> float:
    return self.worst.relative if self.outputs else 0.0

  @property
  def ok(self) -> bool:
    return all(o.ok(self.tolerance) for o in self.outputs)

  @property
  def weak(self) -> list:
    """The outputs that barely depend on the inputs."""
    return [o for o in self.outputs if o.weak(self.tolerance)]


def compare(jax_fn, params, target, tolerance: float, seed: int = 0) -> Comparison:
  """Runs the converted function (jitted) and TF on ``target``'s example inputs, and
  TF again on a second input (other random floats) to see what the inputs change."""
  import jax
  import tree

  start = time.perf_counter()
  jax_out = jax.jit(_call_converted(jax_fn))(params, target.args, target.kwargs)
  jax_out = jax.block_until_ready(jax_out)
  seconds = time.perf_counter() - start
  tf = sys.modules["tensorflow"]
  try:
    tf_out = target.call_tf(*target.args, **target.kwargs)
  except (tf.errors.OpError, ValueError, TypeError) as e:
    raise _tf_failure(e, getattr(target, "unknown_dims", False)) from None

  tf_leaves = tree.flatten_with_path(tf_out)
  jax_leaves = tree.flatten(jax_out)
  if len(tf_leaves) != len(jax_leaves):
    raise CLIError(
      f"TF returned {len(tf_leaves)} outputs but the converted function returned {len(jax_leaves)}"
    )
  diffs = []
  for i, ((path, t), j) in enumerate(zip(tf_leaves, jax_leaves)):
    name = "/".join(str(p) for p in path) or ("output" if len(tf_leaves) == 1 else f"output_{i}")
    diffs.append(_diff(name, np.asarray(t), np.asarray(j)))

  rng = np.random.default_rng([seed, 1])
  args2, kwargs2, varied = _vary((target.args, target.kwargs), rng)
  if varied:
    try:
      again = tree.flatten(target.call_tf(*args2, **kwargs2))
    except Exception:  # then the dependence on the inputs is not measured
      again = None
    if again is not None and len(again) == len(diffs):
      for d, (_, t), t2 in zip(diffs, tf_leaves, again):
        d.change = _change(np.asarray(t), np.asarray(t2))
  return Comparison(diffs, tolerance, seconds, varied=varied)


def _tf_failure(e: Exception, unknown_dims: bool) -> CLIError:
  lines = [line.strip() for line in str(e).splitlines() if line.strip()]
  generic = ("Graph execution error", "Detected at node")
  kernel = next((line for line in lines if _NO_KERNEL.search(line)), None)
  first = kernel or next((line for line in lines if not line.startswith(generic)), "")
  what = f"{type(e).__name__}: {first[:300]}"
  if kernel is not None:
    return CLIError(
      f"TensorFlow cannot run the model on this machine ({what}): it has no "
      "kernel for an op here, so there is nothing to compare with"
    )
  hint = (
    (
      "; the example inputs give unknown (None) dims the size of --unknown-dim: "
      "another size may suit the model"
    )
    if unknown_dims
    else ""
  )
  return CLIError(f"TensorFlow itself fails on the example inputs ({what}){hint}")


def _vary(inputs, rng):
  """``inputs`` with every float (and complex) array redrawn ~ N(0, 1): (args, kwargs,
  whether anything changed)."""
  import tree

  changed = []

  def redraw(value):
    if not isinstance(value, np.ndarray) or value.dtype.kind not in "fc" or value.size == 0:
      return value
    a = value
    changed.append(True)
    fresh = rng.standard_normal(a.shape)
    if a.dtype.kind == "c":
      fresh = fresh + 1j * rng.standard_normal(a.shape)
    return fresh.astype(a.dtype)

  args, kwargs = tree.map_structure(redraw, inputs)
  return args, kwargs, bool(changed)


def _change(t: np.ndarray, t2: np.ndarray) -> Optional[float]:
  """max |t2 - t| over the values finite in both, or None when not comparable."""
  if t.shape != t2.shape:
    return None
  if t.dtype.kind not in "biufc":
    return float(np.count_nonzero(t != t2))
  wide = np.complex128 if t.dtype.kind == "c" else np.float64
  a, b = t.astype(wide), t2.astype(wide)
  both = np.isfinite(a) & np.isfinite(b)
  moved = int(
    np.count_nonzero(
      (np.isfinite(a) != np.isfinite(b)) | (~both & (a != b) & ~(np.isnan(a) & np.isnan(b)))
    )
  )
  delta = np.abs(a[both] - b[both])
  if moved:
    return float("inf")
  return float(delta.max()) if delta.size else 0.0


def _call_converted(jax_fn):
  def fn(params, args, kwargs):
    return jax_fn(params, *args, **kwargs)[0]

  return fn


def _diff(name: str, t: np.ndarray, j: np.ndarray) -> OutputDiff:
  diff = OutputDiff(name, t.shape, t.dtype.name, j.dtype.name, 0.0, 0.0)
  if t.shape != j.shape:
    diff.max_abs, diff.note = float("inf"), f"shape differs: jax {list(j.shape)}"
    return diff
  if t.dtype.kind in "biu" or t.dtype.kind not in "fc" and j.dtype.kind not in "fc":
    diff.exact = True
    wrong = int(np.count_nonzero(t != j))
    if t.dtype.kind == "b":
      diff.max_abs = float("inf") if wrong else 0.0
    elif t.dtype.kind in "iu":
      with np.errstate(over="ignore"):
        delta = np.abs(t.astype(np.float64) - j.astype(np.float64))
      diff.max_abs = float(delta.max()) if delta.size else 0.0
      diff.scale = float(np.abs(t.astype(np.float64)).max()) if t.size else 0.0
    else:
      diff.max_abs = float("inf") if wrong else 0.0
    if wrong:
      diff.note = f"{wrong} of {t.size} values differ"
    return diff
  wide = np.complex128 if "c" in (t.dtype.kind, j.dtype.kind) else np.float64
  a, b = t.astype(wide), j.astype(wide)
  same = (a == b) | (np.isnan(a) & np.isnan(b))
  with np.errstate(invalid="ignore", over="ignore"):
    delta = np.where(same, 0.0, np.abs(a - b))
  delta = np.where(np.isnan(delta), np.inf, delta)
  diff.max_abs = float(delta.max()) if delta.size else 0.0
  finite = np.abs(a[np.isfinite(a)])
  diff.scale = float(finite.max()) if finite.size else 0.0
  bad = int(np.count_nonzero(~np.isfinite(delta)))
  if bad:
    diff.note = f"{bad} non-finite value(s) disagree"
  return diff
