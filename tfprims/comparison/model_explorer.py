"""``Report.to_model_explorer``: the compared graph as Google Model Explorer's JSON.

Model Explorer (``pip install ai-edge-model-explorer``) opens a JSON graph file
directly: a graph collection ``{"label", "graphs": [{"id", "nodes": [...]}]}`` whose
nodes have an ``id``, a ``label``, a ``namespace`` (the layers it folds), ``attrs``,
``incomingEdges``, ``outputsMetadata`` and a ``style``; the schema is the package's
``model_explorer.graph_builder`` dataclasses (tests/test_compare.py checks the
output against them when the package is installed). Each node carries its errors
as attributes and is coloured by them; ``<path>.node_data.json`` has the same errors
as a node-data overlay (``model_explorer.node_data_builder``'s format), for
Model Explorer's colouring, stats and sorting by error:

    model-explorer report.json --node_data_paths=report.json.node_data.json
"""

from __future__ import annotations

import json
import math
from typing import Optional

from tfprims.comparison import records

# The report's colour ramp (report.js): blue (exact) .. yellow .. red (relative error 1).
_RAMP = ["#2c7bb6", "#abd9e9", "#ffffbf", "#fdae61", "#d7191c"]
_LOG_MIN, _LOG_MAX = -9.0, 0.0
_NOT_COMPARED = "#e0e0e0"


def graph_collection(report) -> dict:
  """The report's graph as a Model Explorer graph collection (JSON-ready)."""
  nodes = _merged_nodes(report)
  graph_nodes = [_graph_node(path, group, nodes, report) for path, group in nodes.items()]
  return {
    "label": f"tfprims compare: {report.title}",
    "graphs": [{"id": _graph_id(report), "nodes": graph_nodes}],
  }


def node_data(report) -> dict:
  """The errors as Model Explorer node data: ``{graph id: {"results": {node id:
  {"value": log10 max_rel_err}}, ...}}`` (exact outputs at -12)."""
  results = {}
  for path, group in _merged_nodes(report).items():
    error = _worst(group)
    if error is not None:
      results[path] = {"value": _log_error(error)}
  gradient = [{"stop": i / (len(_RAMP) - 1), "bgColor": colour} for i, colour in enumerate(_RAMP)]
  return {
    _graph_id(report): {"name": "log10 max_rel_err", "results": results, "gradient": gradient}
  }


def write(report, path: str) -> None:
  with open(path, "w", encoding="utf-8") as f:
    json.dump(graph_collection(report), f, indent=1)
  with open(path + ".node_data.json", "w", encoding="utf-8") as f:
    json.dump(node_data(report), f, indent=1)


def _graph_id(report) -> str:
  return report.title


def _merged_nodes(report) -> dict:
  """Node path -> its records (one per output), in report order."""
  nodes: dict[str, list] = {}
  for record in report.nodes:
    nodes.setdefault(record.node, []).append(record)
  return nodes


def _graph_node(path: str, group: list, nodes: dict, report) -> dict:
  first = group[0]
  namespace = path.rsplit("/", 1)[0] if "/" in path else ""
  edges = []
  for i, (source, output) in enumerate(first.inputs):
    if source in nodes:  # variables and captured constants are not nodes of the report
      edges.append(
        {"sourceNodeId": source, "sourceNodeOutputId": str(output), "targetNodeInputId": str(i)}
      )
  error = _worst(group)
  status = max((r.status for r in group), key=records.SEVERITY.get)
  attrs = [{"key": "op", "value": first.op}, {"key": "status", "value": status}]
  if report.first_divergence is not None and report.first_divergence.node == path:
    attrs.append({"key": "first_divergence", "value": "true"})
  scope = _scope(path, report.scopes)
  if scope:
    attrs.append({"key": "runs_in", "value": scope})
  return {
    "id": path,
    "label": first.op,
    "namespace": namespace,
    "attrs": attrs,
    "incomingEdges": edges,
    "outputsMetadata": [{"id": str(r.output), "attrs": _output_attrs(r)} for r in group],
    "style": {"backgroundColor": _colour(error, status)},
  }


def _output_attrs(r: records.NodeRecord) -> list:
  values = {
    "tensor_name": f"{r.node}:{r.output}",
    "shape": str(list(r.shape) if r.shape else r.shape),
    "dtype": r.dtype,
    "status": r.status,
    "max_abs_err": _text(r.max_abs_err),
    "max_rel_err": _text(r.max_rel_err),
    "ulp": _text(r.ulp),
    "nan_mismatch": str(r.nan_mismatch),
    "inf_mismatch": str(r.inf_mismatch),
    "inputs_agree": str(r.inputs_agree).lower(),
    "runs": str(r.calls),
  }
  if r.iteration is not None:
    values["first_bad_iteration"] = "/".join(map(str, r.iteration))
  if r.note:
    values["note"] = r.note
  return [{"key": k, "value": v} for k, v in values.items()]


def _scope(path: str, scopes: dict) -> str:
  parts = path.split("/")
  for i in range(len(parts) - 1, 0, -1):
    prefix = "/".join(parts[:i])
    if prefix in scopes:
      return f"{prefix}: {scopes[prefix]}"
  return ""


def _worst(group: list) -> Optional[float]:
  errors = [r.max_rel_err for r in group if r.max_rel_err is not None]
  return max(errors, key=lambda e: math.inf if e != e else e) if errors else None


def _log_error(error: float) -> float:
  if error != error or error == math.inf:
    return 1.0
  return math.log10(error) if error > 0 else -12.0


def _colour(error: Optional[float], status: str) -> str:
  if error is None or status in (records.RANDOM, records.INPUT):
    return _NOT_COMPARED
  t = (_log_error(error) - _LOG_MIN) / (_LOG_MAX - _LOG_MIN)
  scaled = min(max(t, 0.0), 1.0) * (len(_RAMP) - 1)
  i = min(int(scaled), len(_RAMP) - 2)
  a, b = (_rgb(_RAMP[i]), _rgb(_RAMP[i + 1]))
  f = scaled - i
  return "#" + "".join(f"{round(x + (y - x) * f):02x}" for x, y in zip(a, b))


def _rgb(colour: str) -> tuple:
  return tuple(int(colour[k : k + 2], 16) for k in (1, 3, 5))


def _text(x) -> str:
  return "-" if x is None else f"{x:.4g}" if isinstance(x, float) else str(x)
