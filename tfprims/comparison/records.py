"""One record per compared node output, and the recorder that keeps them while the
graph runs (statistics only: the values themselves are dropped after their last use)."""

from __future__ import annotations

import dataclasses
from typing import Optional

from tfprims.comparison import stats

# What a record says about its node output.
OK = "ok"  # within tolerance
DIVERGED = "diverged"  # out of tolerance (or NaN/inf where TF has none)
RANDOM = "random"  # a random op: not compared, TF's value fed forward
INPUT = "input"  # a graph input: the same value on both sides
NOT_COMPARED = "not compared"  # not a numeric tensor, or TF could not run the node

# Statuses in the order a node observed several times (a loop body) keeps the worst of.
SEVERITY = {INPUT: 0, RANDOM: 0, NOT_COMPARED: 1, OK: 2, DIVERGED: 3}


@dataclasses.dataclass
class NodeRecord:
  """One output of one node, compared (see ``docs/compare.md``).

  Attributes:
    node: the node's path: its name, after the call site or loop it runs in
      (``while/body/loop_sigmoid``, ``model/StatefulPartitionedCall/dense/MatMul``).
    op: the op type. output: the output index. shape, dtype: TF's.
    max_abs_err: max ``|tfprims - TF|`` over the elements finite on both sides.
    max_rel_err: ``max_abs_err`` divided by the largest finite ``|TF|`` (normwise).
    ulp: the largest distance in units in the last place (real floats).
    nan_mismatch, inf_mismatch: elements NaN (infinite) on one side only.
    inputs_agree: whether every input of the node agreed each time it ran.
    status: ``"ok"``, ``"diverged"``, ``"random"`` (not compared, TF's value fed
      forward), ``"input"`` or ``"not compared"`` (``note`` says why).
    calls: how many times it ran (iterations of the loops around it, call sites).
    iteration: the first loop iteration (outermost first) at which it diverged.
    inputs: the ``(node path, output)`` each input came from.
  """

  node: str
  op: str
  output: int
  shape: Optional[tuple]
  dtype: str
  status: str
  max_abs_err: Optional[float] = None
  max_rel_err: Optional[float] = None
  ulp: Optional[int] = None
  nan_mismatch: int = 0
  inf_mismatch: int = 0
  inputs_agree: bool = True
  note: str = ""
  calls: int = 1
  iteration: Optional[tuple] = None
  inputs: tuple = ()

  @property
  def diverged(self) -> bool:
    return self.status == DIVERGED

  @property
  def origin(self) -> bool:
    """Out of tolerance while every input agreed (and not a near-tie flip, nor within
    tolerance on TF's inputs): where a difference starts."""
    return (
      self.diverged
      and self.inputs_agree
      and not any(note in self.note for note in (FLIP_NOTE, PROPAGATED_NOTE))
    )

  def as_dict(self) -> dict:
    data = dataclasses.asdict(self)
    data["shape"] = None if self.shape is None else list(self.shape)
    data["iteration"] = None if self.iteration is None else list(self.iteration)
    data["inputs"] = [list(ref) for ref in self.inputs]
    for key in ("max_abs_err", "max_rel_err"):
      data[key] = _json_float(data[key])
    return data


# Why a node out of tolerance whose inputs agree is not where a difference starts.
FLIP_NOTE = (
  "a discrete result (integer or boolean) of float inputs that differ within "
  "tolerance: a near-tie may flip it"
)
PROPAGATED_NOTE = (
  "within tolerance on TF's inputs: it carries (and amplifies) the small differences of its inputs"
)


def _json_float(x: Optional[float]):
  """JSON has no infinities: they are written as strings ("inf")."""
  if x is None or x == x and abs(x) != float("inf"):
    return x
  return str(x)


class Recorder:
  """Collects records in the order nodes first run, merging the runs of a node inside
  loops and repeated calls, and notes the first divergence as it happens."""

  def __init__(self):
    self.records: list[NodeRecord] = []
    self._by_key: dict[tuple, NodeRecord] = {}
    self.first_divergence: Optional[NodeRecord] = None
    self.first_divergence_iteration: Optional[tuple] = None

  def observe(
    self,
    record: NodeRecord,
    diff: Optional[stats.Diff] = None,
    iteration: Optional[tuple] = None,
    not_origin: Optional[str] = None,
  ) -> NodeRecord:
    """Adds one run of a node output (``record`` holds what is known without the
    values; ``diff`` the comparison, if any; ``not_origin`` why a divergence whose
    inputs agree does not start there)."""
    if diff is not None:
      record.status = OK if diff.within else DIVERGED
      record.max_abs_err, record.max_rel_err, record.ulp = (
        diff.max_abs_err,
        diff.max_rel_err,
        diff.ulp,
      )
      record.nan_mismatch, record.inf_mismatch = diff.nan_mismatch, diff.inf_mismatch
      record.note = "; ".join(n for n in (record.note, diff.note) if n)
    if not_origin and record.diverged:
      record.note = "; ".join(n for n in (record.note, not_origin) if n)
    if record.diverged:
      record.iteration = iteration
    key = (record.node, record.output)
    kept = self._by_key.get(key)
    if kept is None:
      self._by_key[key] = kept = record
      self.records.append(record)
    else:
      _merge(kept, record)
    if self.first_divergence is None and record.origin:
      self.first_divergence, self.first_divergence_iteration = kept, iteration
    return kept


def _merge(kept: NodeRecord, new: NodeRecord) -> None:
  """Folds another run of the same node output into ``kept``: the worst errors; the
  iteration and input agreement of the first run that diverged (of every run, while
  none has)."""
  if new.diverged and not kept.diverged:
    kept.iteration, kept.inputs_agree = new.iteration, new.inputs_agree
  elif not kept.diverged:
    kept.inputs_agree = kept.inputs_agree and new.inputs_agree
  kept.calls += 1
  if SEVERITY[new.status] > SEVERITY[kept.status]:
    kept.status = new.status
  for name in ("max_abs_err", "max_rel_err", "ulp"):
    values = [v for v in (getattr(kept, name), getattr(new, name)) if v is not None]
    setattr(kept, name, max(values) if values else None)
  kept.nan_mismatch = max(kept.nan_mismatch, new.nan_mismatch)
  kept.inf_mismatch = max(kept.inf_mismatch, new.inf_mismatch)
  if new.note and new.note not in kept.note:
    kept.note = "; ".join(n for n in (kept.note, new.note) if n)
