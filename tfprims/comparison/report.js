// tfprims compare report: draws the report JSON embedded in the page.
// The graph is laid out by dagre (vendored, loaded before this script); everything
// else is plain DOM/SVG, so the page works offline.
"use strict";

window.addEventListener("error", (event) => {
  // Tests read this attribute: a page that fails to draw says why.
  document.body.dataset.error = String(event.message || event.error);
});

(function () {
  const report = JSON.parse(document.getElementById("report-data").textContent);
  const SVG = "http://www.w3.org/2000/svg";
  // Plumbing drawn only on request: constants and variable reads crowd real graphs.
  const PLUMBING = new Set(["Const", "ReadVariableOp", "VarHandleOp", "NoOp"]);
  const BUDGET = 220;            // boxes drawn at first; larger scopes start collapsed
  const LOG_MIN = -9, LOG_MAX = 0;  // the colour scale: relative errors 1e-9 .. 1
  const RAMP = ["#2c7bb6", "#abd9e9", "#ffffbf", "#fdae61", "#d7191c"];
  const NOT_COMPARED_COLOUR = "#e0e0e0", RANDOM_COLOUR = "#e3d5f5";

  // --- numbers -----------------------------------------------------------------------

  function num(x) {  // the JSON writes infinities and NaN as strings
    if (x === null || x === undefined) return null;
    if (typeof x === "number") return x;
    return {"inf": Infinity, "-inf": -Infinity}[x] ?? NaN;
  }

  function fmt(x) {
    x = num(x);
    if (x === null) return "-";
    if (!Number.isFinite(x)) return String(x);
    if (Number.isInteger(x) && Math.abs(x) < 1e6) return String(x);
    return String(Number(x.toPrecision(3)));  // 0.0001, 1.05e-7
  }

  function rampColour(t) {
    const scaled = Math.min(Math.max(t, 0), 1) * (RAMP.length - 1);
    const i = Math.min(Math.floor(scaled), RAMP.length - 2), f = scaled - i;
    const [a, b] = [RAMP[i], RAMP[i + 1]].map((c) => [1, 3, 5].map((k) => parseInt(c.substr(k, 2), 16)));
    return "rgb(" + a.map((v, k) => Math.round(v + (b[k] - v) * f)).join(",") + ")";
  }

  function errorColour(err) {  // log scale
    if (err === null) return NOT_COMPARED_COLOUR;
    if (!(err > 0)) return err === 0 ? RAMP[0] : RAMP[RAMP.length - 1];
    return rampColour((Math.log10(err) - LOG_MIN) / (LOG_MAX - LOG_MIN));
  }

  // --- model: one box per node (its outputs merged), clusters per path prefix -----------

  const SEVERITY = {"input": 0, "random": 0, "not compared": 1, "ok": 2, "diverged": 3};
  const first = report.first_divergence;
  const nodes = new Map();
  report.nodes.forEach((r, index) => {
    r.index = index;
    let n = nodes.get(r.node);
    if (!n) {
      n = {id: r.node, op: r.op, records: [], inputs: new Set(), err: null, status: r.status};
      nodes.set(r.node, n);
    }
    n.records.push(r);
    r.inputs.forEach(([source]) => n.inputs.add(source));
    const err = num(r.max_rel_err);
    if (err !== null && (n.err === null || !(err <= n.err))) n.err = err;
    if (SEVERITY[r.status] > SEVERITY[n.status]) n.status = r.status;
  });
  const isFirst = (id) => first !== null && first.node === id;

  const state = {showPlumbing: false, collapsed: new Set(), selected: null, clusters: null};

  function visibleNode(n) {
    return state.showPlumbing || !PLUMBING.has(n.op) || isFirst(n.id);
  }

  function prefixes(id) {  // "a/b/c" -> ["a", "a/b"]
    const parts = id.split("/"), out = [];
    for (let i = 1; i < parts.length; i++) out.push(parts.slice(0, i).join("/"));
    return out;
  }

  // Clusters: path prefixes holding at least two visible nodes (a prefix over one node
  // alone would only add a frame).
  function buildClusters() {
    const count = new Map();
    for (const n of nodes.values()) {
      if (!visibleNode(n)) continue;
      for (const p of prefixes(n.id)) count.set(p, (count.get(p) || 0) + 1);
    }
    const clusters = new Map();
    for (const [p, c] of count) {
      if (c >= 2) clusters.set(p, {id: p, size: c, parent: null, childClusters: [], leaves: 0,
                                   err: null, diverged: 0});
    }
    const nearest = (id) => {
      const ps = prefixes(id);
      for (let i = ps.length - 1; i >= 0; i--) if (clusters.has(ps[i])) return ps[i];
      return null;
    };
    for (const c of clusters.values()) {
      c.parent = nearest(c.id);
      if (c.parent !== null) clusters.get(c.parent).childClusters.push(c.id);
    }
    for (const n of nodes.values()) {
      if (!visibleNode(n)) continue;
      n.cluster = nearest(n.id);
      if (n.cluster !== null) clusters.get(n.cluster).leaves += 1;
      for (const p of prefixes(n.id)) {
        const c = clusters.get(p);
        if (!c) continue;
        if (n.err !== null && (c.err === null || !(n.err <= c.err))) c.err = n.err;
        if (n.status === "diverged") c.diverged += 1;
      }
    }
    return clusters;
  }

  function ancestors(clusterId) {
    const out = [];
    for (let c = clusterId; c !== null; c = state.clusters.get(c).parent) out.push(c);
    return out;
  }

  // Start collapsed, then open scopes from the top while the drawing stays small;
  // the scopes around the first divergence are always open.
  function initialCollapse() {
    const clusters = state.clusters;
    state.collapsed = new Set(clusters.keys());
    let shown = 0;
    for (const n of nodes.values()) if (visibleNode(n) && n.cluster === null) shown += 1;
    for (const c of clusters.values()) if (c.parent === null) shown += 1;
    const open = (c) => {
      state.collapsed.delete(c.id);
      shown += c.childClusters.length + c.leaves - 1;
    };
    if (first !== null && nodes.has(first.node) && nodes.get(first.node).cluster !== null) {
      ancestors(nodes.get(first.node).cluster).reverse().forEach((id) => open(clusters.get(id)));
    }
    const queue = [...clusters.values()].filter((c) => c.parent === null);
    while (queue.length) {
      const c = queue.shift();
      if (state.collapsed.has(c.id) && shown + c.childClusters.length + c.leaves - 1 > BUDGET) continue;
      if (state.collapsed.has(c.id)) open(c);
      c.childClusters.forEach((id) => queue.push(clusters.get(id)));
    }
  }

  // The box a node is drawn in: itself, or its outermost collapsed scope.
  function representative(n) {
    let rep = n.id;
    for (let c = n.cluster; c !== null; c = state.clusters.get(c).parent) {
      if (state.collapsed.has(c)) rep = "scope:" + c;
    }
    return rep;
  }

  // --- layout and drawing ------------------------------------------------------------------

  const svg = document.getElementById("graph-svg");
  const view = {x: 0, y: 0, w: 100, h: 100, graphW: 100, graphH: 100};

  function shortName(id) {
    const last = id.split("/").pop();
    return last.length > 26 ? last.slice(0, 24) + "\u2026" : last;
  }

  function boxSize(lines) {
    return {width: Math.max(64, 8 + 6.2 * Math.max(...lines.map((s) => s.length))), height: 30};
  }

  function scopeLabel(id) {
    const what = report.scopes[id];
    return shortName(id) + (what ? " \u2014 " + what : "");
  }

  function layout() {
    const g = new dagre.graphlib.Graph({compound: true});
    g.setGraph({rankdir: "TB", nodesep: 12, ranksep: 26, marginx: 12, marginy: 12});
    g.setDefaultEdgeLabel(() => ({}));
    const repOf = new Map();
    for (const n of nodes.values()) {
      if (!visibleNode(n)) continue;
      const rep = representative(n);
      repOf.set(n.id, rep);
      if (g.hasNode(rep)) continue;
      if (rep === n.id) {
        const lines = [n.op, shortName(n.id)];
        g.setNode(rep, Object.assign({kind: "node", node: n, lines}, boxSize(lines)));
        if (n.cluster !== null) g.setParent(rep, "cluster:" + n.cluster);
      } else {
        const c = state.clusters.get(rep.slice(6));
        const lines = [shortName(c.id) + " (" + c.size + ")", c.diverged ? c.diverged + " diverged" : "collapsed"];
        g.setNode(rep, Object.assign({kind: "collapsed", cluster: c, lines}, boxSize(lines)));
        if (c.parent !== null) g.setParent(rep, "cluster:" + c.parent);
      }
    }
    for (const c of state.clusters.values()) {  // open scopes that show something
      if (state.collapsed.has(c.id) || ancestors(c.id).some((a) => state.collapsed.has(a))) continue;
      g.setNode("cluster:" + c.id, {kind: "cluster", cluster: c, paddingTop: 18});
      if (c.parent !== null) g.setParent("cluster:" + c.id, "cluster:" + c.parent);
    }
    for (const n of nodes.values()) {
      if (!repOf.has(n.id)) continue;
      for (const source of n.inputs) {
        const from = repOf.get(source), to = repOf.get(n.id);
        if (from !== undefined && from !== to && !g.hasEdge(from, to)) {
          g.setEdge(from, to, {bad: nodes.get(source).status === "diverged"});
        }
      }
    }
    for (const id of g.nodes()) {  // a scope left empty (its nodes hidden) is not drawn
      if (g.node(id).kind === "cluster" && g.children(id).length === 0) g.removeNode(id);
    }
    dagre.layout(g);
    return g;
  }

  function el(name, attrs, parent) {
    const e = document.createElementNS(SVG, name);
    for (const [k, v] of Object.entries(attrs || {})) e.setAttribute(k, v);
    if (parent) parent.appendChild(e);
    return e;
  }

  function draw() {
    const g = layout();
    svg.replaceChildren();
    const root = el("g", {id: "graph-root"}, svg);
    const depth = (id) => { let d = 0; for (let p = g.parent(id); p; p = g.parent(p)) d++; return d; };
    const clusterIds = g.nodes().filter((id) => g.node(id).kind === "cluster");
    clusterIds.sort((a, b) => depth(a) - depth(b));
    for (const id of clusterIds) {
      const box = g.node(id), c = box.cluster;
      const loop = /\/(body|cond)$/.test(c.id);
      const grp = el("g", {class: "cluster" + (loop ? " loop" : ""), "data-scope": c.id}, root);
      el("rect", {x: box.x - box.width / 2, y: box.y - box.height / 2, width: box.width, height: box.height}, grp);
      const label = el("text", {x: box.x - box.width / 2 + 6, y: box.y - box.height / 2 + 12}, grp);
      label.textContent = "\u2212 " + scopeLabel(c.id);
      label.addEventListener("click", () => { state.collapsed.add(c.id); draw(); });
    }
    for (const e of g.edges()) {
      const points = g.edge(e).points;
      el("path", {class: "edge" + (g.edge(e).bad ? " bad" : ""),
                  d: "M" + points.map((p) => p.x + "," + p.y).join("L"),
                  "marker-end": "url(#arrow)"}, root);
    }
    const defs = el("defs", {}, svg);
    const marker = el("marker", {id: "arrow", viewBox: "0 0 10 10", refX: 10, refY: 5,
                                 markerWidth: 6, markerHeight: 6, orient: "auto"}, defs);
    el("path", {d: "M0,0L10,5L0,10z", fill: "#8a8a8a"}, marker);
    for (const id of g.nodes()) {
      const box = g.node(id);
      if (box.kind === "cluster") continue;
      const x = box.x - box.width / 2, y = box.y - box.height / 2;
      let cls = "node", fill;
      if (box.kind === "node") {
        const n = box.node;
        fill = n.status === "random" ? RANDOM_COLOUR : errorColour(n.err);
        if (n.status === "diverged") cls += " diverged";
        if (isFirst(n.id)) cls += " first-divergence";
        if (state.selected === n.id) cls += " selected";
      } else {
        fill = errorColour(box.cluster.err);
        cls += " collapsed" + (box.cluster.diverged ? " diverged" : "");
      }
      const grp = el("g", {class: cls, "data-id": id}, root);
      el("rect", {x, y, width: box.width, height: box.height, fill}, grp);
      box.lines.forEach((line, i) => {
        const t = el("text", {x: box.x, y: y + 12 + 11 * i, "text-anchor": "middle",
                              class: i === 0 ? "op" : ""}, grp);
        t.textContent = line;
      });
      const title = el("title", {}, grp);
      if (box.kind === "node") {
        title.textContent = box.node.id + "\n" + box.node.op + "  max_rel_err " + fmt(box.node.err) +
                            "  " + box.node.status;
        grp.addEventListener("click", () => select(box.node.id, false));
        if (isFirst(box.node.id)) {
          const badge = el("text", {x: x, y: y - 4, class: "badge"}, grp);
          badge.textContent = "first divergence";
        }
      } else {
        title.textContent = box.cluster.id + " (" + box.cluster.size + " nodes): click to expand";
        grp.addEventListener("click", () => { state.collapsed.delete(box.cluster.id); draw(); });
      }
    }
    const graph = g.graph();
    view.graphW = graph.width || 100;
    view.graphH = graph.height || 100;
    if (!view.placed) { initialView(); view.placed = true; } else applyView();
  }

  // Readable boxes at first: the whole graph when it fits at a legible scale, else
  // its top (or the first divergence) at that scale; "Fit" shows everything.
  function initialView() {
    fit();
    const box = svg.getBoundingClientRect();
    const legible = box.width > 0 ? box.width / 0.7 : view.w;  // at least 70% scale
    if (view.w <= legible) return;
    const aspect = box.width / Math.max(box.height, 1);
    view.w = legible;
    view.h = legible / aspect;
    view.x = (view.graphW - view.w) / 2;
    view.y = 0;
    applyView();
    if (first !== null) centreOn(first.node);
  }

  function applyView() {
    svg.setAttribute("viewBox", [view.x, view.y, view.w, view.h].join(" "));
  }

  function fit() {
    const box = svg.getBoundingClientRect();
    const aspect = box.width > 0 && box.height > 0 ? box.width / box.height : 1.6;
    view.w = Math.max(view.graphW, view.graphH * aspect);
    view.h = view.w / aspect;
    view.x = (view.graphW - view.w) / 2;
    view.y = 0;
    applyView();
  }

  function centreOn(id) {
    const grp = svg.querySelector('[data-id="' + CSS.escape(id) + '"] rect');
    if (!grp) return;
    const x = +grp.getAttribute("x") + +grp.getAttribute("width") / 2;
    const y = +grp.getAttribute("y") + +grp.getAttribute("height") / 2;
    const box = svg.getBoundingClientRect();
    const aspect = box.width > 0 && box.height > 0 ? box.width / box.height : 1.6;
    view.w = Math.min(view.w, 900);
    view.h = view.w / aspect;
    view.x = x - view.w / 2;
    view.y = y - view.h / 2;
    applyView();
  }

  function enablePanZoom() {
    const container = document.getElementById("graph");
    let drag = null;
    container.addEventListener("wheel", (event) => {
      event.preventDefault();
      const box = svg.getBoundingClientRect();
      const px = view.x + (event.clientX - box.left) / box.width * view.w;
      const py = view.y + (event.clientY - box.top) / box.height * view.h;
      const k = event.deltaY > 0 ? 1.15 : 1 / 1.15;
      view.w *= k; view.h *= k;
      view.x = px - (px - view.x) * k;
      view.y = py - (py - view.y) * k;
      applyView();
    }, {passive: false});
    container.addEventListener("mousedown", (event) => { drag = {x: event.clientX, y: event.clientY}; });
    window.addEventListener("mouseup", () => { drag = null; });
    window.addEventListener("mousemove", (event) => {
      if (!drag) return;
      const box = svg.getBoundingClientRect();
      view.x -= (event.clientX - drag.x) / box.width * view.w;
      view.y -= (event.clientY - drag.y) / box.height * view.h;
      drag = {x: event.clientX, y: event.clientY};
      applyView();
    });
  }

  // --- selection and details ------------------------------------------------------------

  function reveal(id) {  // open the scopes around a node
    const n = nodes.get(id);
    if (!n || n.cluster === null || n.cluster === undefined) return;
    ancestors(n.cluster).forEach((c) => state.collapsed.delete(c));
  }

  function select(id, fromTable) {
    state.selected = id;
    if (nodes.has(id) && !visibleNode(nodes.get(id))) {
      state.showPlumbing = true;
      document.getElementById("show-constants").checked = true;
      state.clusters = buildClusters();
    }
    reveal(id);
    draw();
    if (fromTable) centreOn(id);
    showDetails(id);
    document.querySelectorAll("#node-table tr.selected").forEach((tr) => tr.classList.remove("selected"));
    const row = document.querySelector('#node-table tr[data-node="' + CSS.escape(id) + '"]');
    if (row) {
      row.classList.add("selected");
      if (!fromTable) row.scrollIntoView({block: "nearest"});
    }
  }

  function scopeOf(id) {
    const ps = prefixes(id).reverse();
    for (const p of ps) if (report.scopes[p]) return p + ": " + report.scopes[p];
    return "top level";
  }

  function showDetails(id) {
    const n = nodes.get(id), panel = document.getElementById("details");
    if (!n) { panel.classList.remove("open"); return; }
    panel.replaceChildren();
    const h = document.createElement("h3");
    h.textContent = n.id;
    panel.appendChild(h);
    const info = document.createElement("div");
    info.textContent = n.op + " \u2014 " + scopeOf(n.id);
    panel.appendChild(info);
    for (const r of n.records) {
      const table = document.createElement("table");
      const rows = [["output", r.output], ["status", r.status], ["shape", JSON.stringify(r.shape)],
                    ["dtype", r.dtype], ["max_abs_err", fmt(r.max_abs_err)],
                    ["max_rel_err", fmt(r.max_rel_err)], ["ulp", fmt(r.ulp)],
                    ["NaN mismatch", r.nan_mismatch], ["inf mismatch", r.inf_mismatch],
                    ["inputs agree", r.inputs_agree], ["runs", r.calls],
                    ["first bad iteration", r.iteration ? r.iteration.join("/") : "-"],
                    ["note", r.note || "-"]];
      for (const [k, v] of rows) {
        const tr = table.insertRow();
        tr.insertCell().textContent = k;
        tr.insertCell().textContent = String(v);
      }
      panel.appendChild(table);
    }
    if (n.inputs.size) {
      const inputs = document.createElement("div");
      inputs.textContent = "inputs: ";
      for (const source of n.inputs) {
        const a = document.createElement("a");
        a.href = "#";
        a.textContent = source + " ";
        a.addEventListener("click", (event) => { event.preventDefault(); select(source, true); });
        inputs.appendChild(a);
      }
      panel.appendChild(inputs);
    }
    panel.classList.add("open");
  }

  // --- header -------------------------------------------------------------------------------

  function header() {
    const h = document.getElementById("header");
    const title = document.createElement("h1");
    title.textContent = "tfprims compare: " + report.title;
    h.appendChild(title);
    const diverged = report.nodes.filter((r) => r.status === "diverged").length;
    const compared = report.nodes.filter((r) => r.max_rel_err !== null).length;
    const verdict = document.createElement("div");
    verdict.className = "verdict " + (diverged ? "bad" : "ok");
    verdict.textContent = diverged ? diverged + " of " + compared + " compared outputs out of tolerance"
                                   : "all " + compared + " compared outputs within tolerance";
    h.appendChild(verdict);
    const tol = document.createElement("div");
    const tols = Object.entries(report.tolerances).map(([d, [r, a]]) => d + " rtol " + fmt(r) + " atol " + fmt(a));
    tol.textContent = "tolerances: " + (tols.join(", ") || "exact") + "; isolate " +
                      (report.isolate ? "on" : "off") + "; " + report.seconds.toFixed(1) + " s";
    h.appendChild(tol);
    const box = document.createElement("div");
    box.id = "first-divergence";
    if (first === null) {
      box.className = "none";
      box.textContent = "First divergence: none";
    } else {
      box.dataset.node = first.node;
      const where = first.iteration ? ", iteration " + first.iteration.join("/") : "";
      box.textContent = "First divergence: " + first.node + " (" + first.op + ", output " + first.output +
                        where + "): max_abs_err " + fmt(first.max_abs_err) + ", max_rel_err " +
                        fmt(first.max_rel_err) + "; its inputs agree. ";
      const show = document.createElement("button");
      show.type = "button";
      show.textContent = "show in graph";
      show.addEventListener("click", () => select(first.node, true));
      box.appendChild(show);
    }
    h.appendChild(box);
  }

  function legend() {
    const span = document.getElementById("legend");
    const ramp = document.createElement("span");
    ramp.className = "ramp";
    ramp.style.background = "linear-gradient(to right," + RAMP.join(",") + ")";
    const lo = document.createElement("span"), hi = document.createElement("span");
    lo.textContent = "max_rel_err 1e" + LOG_MIN;
    hi.textContent = "1";
    span.append(lo, ramp, hi);
  }

  // --- node table -----------------------------------------------------------------------------

  const COLUMNS = [
    ["#", (r) => r.index, true], ["node", (r) => r.node], ["op", (r) => r.op],
    ["out", (r) => r.output, true], ["shape", (r) => JSON.stringify(r.shape)],
    ["dtype", (r) => r.dtype], ["max_abs_err", (r) => num(r.max_abs_err), true],
    ["max_rel_err", (r) => num(r.max_rel_err), true], ["ulp", (r) => r.ulp, true],
    ["NaN", (r) => r.nan_mismatch, true], ["inf", (r) => r.inf_mismatch, true],
    ["inputs agree", (r) => String(r.inputs_agree)], ["status", (r) => r.status],
    ["runs", (r) => r.calls, true], ["iteration", (r) => r.iteration ? r.iteration.join("/") : ""],
    ["note", (r) => r.note],
  ];
  const sort = {column: 0, descending: false};

  function compareValues(a, b) {
    const nullA = a === null || a === undefined || Number.isNaN(a);
    const nullB = b === null || b === undefined || Number.isNaN(b);
    if (nullA || nullB) return nullA === nullB ? 0 : (nullA ? 1 : -1);  // blanks last
    return a < b ? -1 : a > b ? 1 : 0;
  }

  function table() {
    const head = document.querySelector("#node-table thead");
    const tr = document.createElement("tr");
    COLUMNS.forEach(([name], i) => {
      const th = document.createElement("th");
      th.textContent = name;
      th.addEventListener("click", () => {
        sort.descending = sort.column === i ? !sort.descending : COLUMNS[i][2] === true && i !== 0;
        sort.column = i;
        fillTable();
      });
      tr.appendChild(th);
    });
    head.appendChild(tr);
    document.getElementById("filter").addEventListener("input", fillTable);
    const wrap = document.createElement("div");
    wrap.className = "table-wrap";
    const t = document.getElementById("node-table");
    t.parentNode.insertBefore(wrap, t);
    wrap.appendChild(t);
    fillTable();
  }

  function fillTable() {
    const text = document.getElementById("filter").value.trim().toLowerCase();
    const key = COLUMNS[sort.column][1];
    let rows = report.nodes.filter((r) => !text ||
        (r.node + " " + r.op + " " + r.status).toLowerCase().includes(text));
    rows = rows.slice().sort((a, b) => {
      const c = compareValues(key(a), key(b));
      return sort.descending ? -c : c;
    });
    document.querySelectorAll("#node-table th").forEach((th, i) => {
      th.className = i === sort.column ? (sort.descending ? "sorted-desc" : "sorted-asc") : "";
    });
    const body = document.querySelector("#node-table tbody");
    const fragment = document.createDocumentFragment();
    for (const r of rows) {
      const tr = document.createElement("tr");
      tr.dataset.node = r.node;
      if (r.status === "diverged") tr.className = "diverged";
      if (first !== null && first.node === r.node && first.output === r.output) tr.className = "first";
      COLUMNS.forEach(([name, value, numeric]) => {
        const td = tr.insertCell();
        const v = value(r);
        td.textContent = numeric ? fmt(v) : (v === null || v === undefined ? "" : String(v));
        if (numeric) td.className = "num";
        if (name === "node") td.className = "name";
      });
      tr.addEventListener("click", () => select(r.node, true));
      fragment.appendChild(tr);
    }
    body.replaceChildren(fragment);
  }

  // --- histograms per op type -----------------------------------------------------------------

  function histograms() {
    const container = document.getElementById("histograms");
    const bins = ["0"].concat([...Array(LOG_MAX - LOG_MIN + 2).keys()].map((i) => i + LOG_MIN - 1));
    const tols = Object.values(report.tolerances).map(([r]) => r).filter((r) => r > 0);
    const tolBin = tols.length ? Math.log10(Math.min(...tols)) : null;
    for (const op of report.ops) {
      const errs = report.nodes.filter((r) => r.op === op.op && r.max_rel_err !== null).map((r) => num(r.max_rel_err));
      if (!errs.length) continue;
      const counts = bins.map(() => 0);
      for (const e of errs) {
        if (e === 0) { counts[0] += 1; continue; }
        const decade = Number.isFinite(e) ? Math.floor(Math.log10(e)) : LOG_MAX;
        counts[1 + Math.min(Math.max(decade, LOG_MIN - 1), LOG_MAX) - (LOG_MIN - 1)] += 1;
      }
      const div = document.createElement("div");
      div.className = "histogram";
      const h = document.createElement("h4");
      h.textContent = op.op + " (" + errs.length + " compared, " + op.diverged + " diverged)";
      div.appendChild(h);
      const W = 16, H = 60, svgH = H + 14;
      const chart = el("svg", {width: W * bins.length + 4, height: svgH, class: "chart"}, div);
      const most = Math.max(...counts);
      counts.forEach((c, i) => {
        const bh = c ? Math.max(2, H * c / most) : 0;
        const colour = i === 0 ? RAMP[0] : errorColour(Math.pow(10, bins[i] + 0.5));
        el("rect", {x: 2 + i * W, y: H - bh, width: W - 2, height: bh, fill: colour}, chart)
            .appendChild(el("title", {})).textContent = c + " outputs with max_rel_err " +
            (i === 0 ? "0" : (i === 1 ? "< 1e" + (LOG_MIN) : "in [1e" + bins[i] + ", 1e" + (bins[i] + 1) + ")"));
        if (i === 0 || (bins[i] % 3 === 0)) {
          const t = el("text", {x: 2 + i * W, y: svgH - 2}, chart);
          t.textContent = i === 0 ? "0" : "1e" + bins[i];
        }
      });
      if (tolBin !== null) {
        const x = 2 + (1 + (tolBin - (LOG_MIN - 1))) * W;
        el("line", {x1: x, x2: x, y1: 0, y2: H, class: "tol"}, chart)
            .appendChild(el("title", {})).textContent = "tolerance (rtol " + Math.min(...tols) + ")";
      }
      container.appendChild(div);
    }
  }

  // --- start ------------------------------------------------------------------------------------

  header();
  legend();
  state.clusters = buildClusters();
  initialCollapse();
  enablePanZoom();
  draw();
  table();
  histograms();
  document.getElementById("expand-all").addEventListener("click", () => { state.collapsed.clear(); draw(); fit(); });
  document.getElementById("collapse-all").addEventListener("click", () => {
    state.collapsed = new Set(state.clusters.keys()); draw(); fit();
  });
  document.getElementById("fit").addEventListener("click", fit);
  document.getElementById("show-constants").addEventListener("change", (event) => {
    state.showPlumbing = event.target.checked;
    const collapsed = state.collapsed;
    state.clusters = buildClusters();
    state.collapsed = new Set([...state.clusters.keys()].filter((id) => collapsed.has(id)));
    draw();
  });
  document.body.dataset.rendered = "true";
})();
