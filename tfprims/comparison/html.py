"""``Report.to_html``: one self-contained HTML file (no server, no network).

The page carries the report as JSON and draws it in the browser: the graph laid
out by dagre (vendored, MIT: ``vendor/dagre.min.js``, inlined), nodes coloured by
their relative error on a log scale, name scopes and function bodies as collapsible
clusters, the first divergence highlighted; a sortable, filterable node table; and
a histogram of errors per op type. The drawing code is ``report.js`` and
``report.css`` next to this module.
"""

from __future__ import annotations

import html
import json
from importlib import resources

DAGRE_VERSION = "3.1.4"

_PAGE = """<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<title>{title}</title>
<style>{style}</style>
</head>
<body>
<header id="header"></header>
<main>
  <section id="graph-section">
    <div class="toolbar">
      <button id="expand-all" type="button">Expand all</button>
      <button id="collapse-all" type="button">Collapse all</button>
      <button id="fit" type="button">Fit</button>
      <label><input id="show-constants" type="checkbox"> constants and variable reads</label>
      <span id="legend"></span>
    </div>
    <div id="graph"><svg id="graph-svg" xmlns="http://www.w3.org/2000/svg"></svg></div>
    <aside id="details"></aside>
  </section>
  <section id="table-section">
    <h2>Nodes</h2>
    <input id="filter" type="search" placeholder="filter by node, op or status">
    <table id="node-table"><thead></thead><tbody></tbody></table>
  </section>
  <section id="histogram-section">
    <h2>Errors per op type</h2>
    <div id="histograms"></div>
  </section>
</main>
<footer>tfprims compare. Graph layout: dagre {dagre_version} (MIT licence).</footer>
<script type="application/json" id="report-data">{data}</script>
<script>{dagre}</script>
<script>{script}</script>
</body>
</html>
"""


def render(report) -> str:
  """The report as one HTML page."""
  data = report.as_dict()
  # Inside <script>, "</" could close the element: JSON allows writing it "<\\/".
  payload = json.dumps(data, default=_json_default).replace("</", "<\\/")
  return _PAGE.format(
    title=html.escape(f"tfprims compare: {report.title}"),
    style=_asset("report.css"),
    data=payload,
    dagre=_asset("vendor/dagre.min.js"),
    script=_asset("report.js"),
    dagre_version=DAGRE_VERSION,
  )


def write(report, path: str) -> None:
  with open(path, "w", encoding="utf-8") as f:
    f.write(render(report))


def _asset(name: str) -> str:
  return resources.files("tfprims.comparison").joinpath(name).read_text(encoding="utf-8")


def _json_default(x):
  if hasattr(x, "item"):
    return x.item()
  raise TypeError(f"not JSON serializable: {type(x).__name__}")
