"""The result of a comparison: its records, the first divergence, and its renderings
(text summary, JSON, HTML, Model Explorer graph)."""

from __future__ import annotations

import dataclasses
import json
import math
from typing import Optional

from tfprims.comparison import records, stats


@dataclasses.dataclass
class OpSummary:
  """The records of one op type: how many, compared, diverged, and the worst error."""

  op: str
  outputs: int
  compared: int
  diverged: int
  max_rel_err: Optional[float]


@dataclasses.dataclass
class Report:
  """Node-by-node comparison of a graph run by TF and by tfprims.

  Attributes:
    title: what was compared.
    nodes: one :class:`~tfprims.comparison.records.NodeRecord` per node output, in
      the order the nodes first ran (a topological order).
    first_divergence: the first record (in that order) out of tolerance while all
      its inputs agreed: the op that introduced a difference. None when nothing
      diverges.
    first_divergence_iteration: the loop iteration (outermost first) at which it
      did, for a node inside loops.
    outputs: the records of the graph's outputs.
    scopes: what runs under each path prefix (function call sites, branches, loop
      bodies), e.g. ``{"while/body": "While body"}``.
    rtol, atol: the tolerances asked for (None: per dtype, see ``tolerances``).
    isolate: whether every tfprims node read TF's inputs.
    seconds: how long the comparison took.
  """

  title: str
  nodes: list
  first_divergence: Optional[records.NodeRecord]
  first_divergence_iteration: Optional[tuple]
  outputs: list
  scopes: dict
  rtol: Optional[float]
  atol: Optional[float]
  isolate: bool
  seconds: float

  @property
  def diverged(self) -> list:
    """The records out of tolerance."""
    return [r for r in self.nodes if r.diverged]

  @property
  def ok(self) -> bool:
    """Nothing diverges."""
    return not self.diverged

  def tolerances(self) -> dict:
    """``{dtype: (rtol, atol)}`` for the inexact dtypes compared."""
    names = sorted(
      {r.dtype for r in self.nodes if r.max_abs_err is not None and stats.is_inexact(r.dtype)}
    )
    return {name: stats.tolerance(name, self.rtol, self.atol) for name in names}

  def by_op(self) -> list:
    """One :class:`OpSummary` per op type, worst first."""
    groups: dict[str, list] = {}
    for record in self.nodes:
      groups.setdefault(record.op, []).append(record)
    summaries = []
    for op, group in groups.items():
      errors = [r.max_rel_err for r in group if r.max_rel_err is not None]
      summaries.append(
        OpSummary(
          op,
          len(group),
          len(errors),
          sum(r.diverged for r in group),
          max(errors) if errors else None,
        )
      )
    return sorted(summaries, key=lambda s: (-s.diverged, -_sortable(s.max_rel_err), s.op))

  def worst(self, n: int = 10) -> list:
    """The ``n`` compared records with the largest relative error."""
    compared = [r for r in self.nodes if r.max_rel_err is not None]
    return sorted(compared, key=lambda r: (-r.diverged, -_sortable(r.max_rel_err)))[:n]

  # --- renderings ----------------------------------------------------------------------

  def summary(self, worst: int = 10) -> str:
    """A short text report: verdict, first divergence, outputs, worst nodes, op types."""
    compared = sum(r.max_rel_err is not None for r in self.nodes)
    lines = [
      f"tfprims compare: {self.title}",
      f"  {len(self.nodes)} node outputs, {compared} compared, "
      f"{len(self.diverged)} out of tolerance ({self._tolerance_text()}; isolate "
      f"{'on' if self.isolate else 'off'}) in {self.seconds:.1f} s",
    ]
    lines.append("first divergence: " + self._first_divergence_text())
    if self.outputs:
      lines.append("outputs:")
      lines += [f"  {_describe(r)}" for r in self.outputs]
    lines.append("worst nodes:")
    lines += _table(
      ["node", "op", "out", "shape", "max_abs_err", "max_rel_err", "ulp", "status"],
      [
        [
          r.node,
          r.op,
          str(r.output),
          _shape(r),
          _num(r.max_abs_err),
          _num(r.max_rel_err),
          _num(r.ulp),
          _status(r),
        ]
        for r in self.worst(worst)
      ],
    )
    lines.append("error per op type:")
    lines += _table(
      ["op", "outputs", "compared", "diverged", "max_rel_err"],
      [
        [s.op, str(s.outputs), str(s.compared), str(s.diverged), _num(s.max_rel_err)]
        for s in self.by_op()
      ],
    )
    skipped = [
      r
      for r in self.nodes
      if r.status == records.NOT_COMPARED and r.note.startswith("TF could not")
    ]
    if skipped:
      lines.append(
        f"TF could not run {len(skipped)} node(s) eagerly (tfprims' values fed "
        f"to TF): " + ", ".join(sorted({r.op for r in skipped}))
      )
    return "\n".join(lines)

  def __str__(self):
    return self.summary()

  def as_dict(self) -> dict:
    """Everything in the report, as JSON-ready data."""
    first = self.first_divergence
    return {
      "title": self.title,
      "ok": self.ok,
      "isolate": self.isolate,
      "rtol": self.rtol,
      "atol": self.atol,
      "tolerances": {k: list(v) for k, v in self.tolerances().items()},
      "seconds": self.seconds,
      "first_divergence": None
      if first is None
      else dict(
        first.as_dict(),
        iteration=None
        if self.first_divergence_iteration is None
        else list(self.first_divergence_iteration),
      ),
      "outputs": [[r.node, r.output] for r in self.outputs],
      "scopes": dict(self.scopes),
      "ops": [dataclasses.asdict(s) for s in self.by_op()],
      "nodes": [r.as_dict() for r in self.nodes],
    }

  def to_json(self, path: Optional[str] = None) -> str:
    """The report as JSON text, written to ``path`` when given."""
    text = json.dumps(self.as_dict(), indent=1, default=_json_default)
    if path is not None:
      with open(path, "w", encoding="utf-8") as f:
        f.write(text)
    return text

  def to_html(self, path: str) -> None:
    """Writes one self-contained HTML file: the graph coloured by error (laid out in
    the page by the vendored dagre), the node table, per-op-type histograms."""
    from tfprims.comparison import html

    html.write(self, path)

  def to_model_explorer(self, path: str) -> None:
    """Writes the graph as Google Model Explorer's JSON graph, with each node's errors
    (and ``<path>.node_data.json``, its errors as a Model Explorer node-data overlay)."""
    from tfprims.comparison import model_explorer

    model_explorer.write(self, path)

  # --- text pieces ---------------------------------------------------------------------

  def _tolerance_text(self) -> str:
    if self.rtol is not None or self.atol is not None:
      return f"rtol {_num(self.rtol)}, atol {_num(self.atol)} (integers exact)"
    tols = self.tolerances()
    if not tols:
      return "exact"
    return "per dtype: " + ", ".join(f"{d} rtol {r:g} atol {a:g}" for d, (r, a) in tols.items())

  def _first_divergence_text(self) -> str:
    first = self.first_divergence
    if first is None:
      if self.diverged:
        return (
          "none: every node out of tolerance has an input that does not agree, or "
          "only carries or amplifies differences within tolerance (see the notes)"
        )
      return "none"
    where = (
      ""
      if self.first_divergence_iteration is None
      else f", iteration {'/'.join(map(str, self.first_divergence_iteration))}"
    )
    return (
      f"{first.node} ({first.op}, output {first.output}{where}): max_abs_err "
      f"{_num(first.max_abs_err)}, max_rel_err {_num(first.max_rel_err)}"
      + (f", NaN mismatches {first.nan_mismatch}" if first.nan_mismatch else "")
      + (f", inf mismatches {first.inf_mismatch}" if first.inf_mismatch else "")
      + "; its inputs agree"
    )


def _describe(r: records.NodeRecord) -> str:
  return (
    f"{r.node}:{r.output} {r.dtype}{_shape(r)} max_abs_err {_num(r.max_abs_err)} "
    f"max_rel_err {_num(r.max_rel_err)} {_status(r)}"
  )


def _status(r: records.NodeRecord) -> str:
  if r.status == records.DIVERGED and r.nan_mismatch + r.inf_mismatch:
    return f"diverged (NaN/inf at {r.nan_mismatch + r.inf_mismatch} elements)"
  return r.status


def _shape(r: records.NodeRecord) -> str:
  return "?" if r.shape is None else "[" + ",".join(map(str, r.shape)) + "]"


def _num(x) -> str:
  if x is None:
    return "-"
  if isinstance(x, int):
    return str(x)
  return f"{x:.3g}"


def _sortable(x) -> float:
  return -1.0 if x is None else (math.inf if x != x else x)


def _table(header: list, rows: list) -> list:
  if not rows:
    return ["  (none)"]
  widths = [max(len(str(c)) for c in column) for column in zip(header, *rows)]
  widths[0] = min(widths[0], 60)

  def line(cells):
    first = cells[0] if len(cells[0]) <= widths[0] else "..." + cells[0][-(widths[0] - 3) :]
    return "  " + "  ".join(
      [first.ljust(widths[0])] + [c.rjust(w) for c, w in zip(cells[1:], widths[1:])]
    )

  return [line(header)] + [line(row) for row in rows]


def _json_default(x):
  if hasattr(x, "item"):
    return x.item()
  raise TypeError(f"not JSON serializable: {type(x).__name__}")
