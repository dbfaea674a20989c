"""A graph rewrite for sparse tensors filled and reduced by row
(``tf.nn.safe_embedding_lookup_sparse``), applied by :func:`tfprims.pipeline.prepare`.

TF's safe embedding lookup prunes entries (``tf.sparse.retain``: ``Where`` of a mask,
then ``GatherV2`` of the indices and values), fills the empty rows
(``SparseFillEmptyRows``), may ``Unique`` the ids, and reduces the entries per row
(``SegmentSum/Mean``, ``SparseSegmentSum/Mean/SqrtN``). Every one of those sizes depends on
the values, so under jit with traced ids the lookup cannot compile. Its result does not:
one row per row of the dense shape.

Where a ``SparseFillEmptyRows`` node's entries reach nothing but row reductions, its
entries are kept in static sizes instead: the ``N`` input entries (pruned ones marked
with row -1) followed by ``B`` fill entries (row ``r`` where row ``r`` is empty, else
-1), ``B`` the dense shape's first dim. Each reduction becomes ``UnsortedSegmentSum``
with ``B`` segments, which drops rows -1 (TF's rule for negative ids): each row gets
the entries TF's filled tensor gives it, in the same order, so the same sums; a mean
divides by the row's count (at least 1: a filled row has its fill entry), a sqrt-n
by its square root. The retain masks are evaluated on the unpruned entries (an
elementwise mask of pruned entries is the mask of the same entries before pruning).
``Unique`` (ids, idx) before a gather becomes (the ids themselves, ``range(n)``): a
gather of gathered rows reads the same rows either way. The empty-row indicator is
computed from the row counts.

The rewrite applies only when every value derived from the entries is consumed by ops
that treat each entry alone (``_ENTRYWISE``, gathers by them, reshapes keeping the
entry dim) and ends in those row reductions; anything else (a filled tensor returned,
a ``Where`` mask that is not elementwise) leaves the graph as it is (under jit with
traced entries: ``DynamicShapeError`` naming the node, as before).
"""

from __future__ import annotations

import dataclasses
from typing import Optional

import numpy as np

from tfprims import graph as graph_lib

Ref = graph_lib.Ref

# Ops whose output entry i depends only on entry i of their list inputs (the others
# scalar constants).
_ENTRYWISE = frozenset(
  """Identity Cast Neg Abs Sign Sqrt Rsqrt Square Exp Log Reciprocal ZerosLike OnesLike
  LogicalNot Mul RealDiv Div DivNoNan AddV2 Add Sub Pow Maximum Minimum Greater
  GreaterEqual Less LessEqual Equal NotEqual LogicalAnd LogicalOr Select SelectV2""".split()
)
# Reductions that keep entry i's result at i when their axes are constants >= 1 (the
# rows' norms of ``max_norm`` clipping).
_ROW_REDUCTIONS = frozenset("Sum Prod Max Min Mean".split())
_SPARSE_SEGMENT = ("SparseSegmentSum", "SparseSegmentMean", "SparseSegmentSqrtN")


def _producer(graph: graph_lib.Graph, ref: Ref) -> Ref:
  """``ref`` with Identity nodes skipped."""
  node = graph.by_name.get(ref[0])
  while node is not None and node.op == "Identity":
    ref = tuple(node.inputs[0])
    node = graph.by_name.get(ref[0])
  return ref


def _const(graph: graph_lib.Graph, ref: Ref) -> Optional[np.ndarray]:
  """The value of the Const ``ref`` reads (through Identity nodes), else None."""
  node = graph.by_name.get(_producer(graph, tuple(ref))[0])
  if node is None or node.op != "Const":
    return None
  return np.asarray(node.attr("value"))


def _retain(graph: graph_lib.Graph, ref: Ref) -> Optional[tuple[Ref, Ref]]:
  """For ``GatherV2(x, Reshape(Where(mask), [-1]), axis=0)`` (``tf.sparse.retain``):
  (x, mask); else None."""
  node = graph.by_name.get(_producer(graph, ref)[0])
  if node is None or node.op != "GatherV2" or node.attr("batch_dims") != 0:
    return None
  axis = _const(graph, node.inputs[2])
  index = graph.by_name.get(_producer(graph, node.inputs[1])[0])
  if axis is None or axis.size != 1 or int(axis) != 0 or index is None:
    return None
  shape = _const(graph, index.inputs[1]) if index.op == "Reshape" else None
  where = graph.by_name.get(_producer(graph, index.inputs[0])[0]) if shape is not None else None
  if where is None or where.op != "Where" or shape.tolist() != [-1]:
    return None
  if where.attr("T") != np.dtype(bool):
    return None
  return tuple(node.inputs[0]), _producer(graph, tuple(where.inputs[0]))


def _unretain(graph: graph_lib.Graph, ref: Ref) -> tuple[Ref, tuple]:
  """The list a chain of retains gathers from and their masks (innermost first)."""
  masks = []
  while (step := _retain(graph, ref)) is not None:
    ref, mask = step
    masks.insert(0, mask)
  return _producer(graph, ref), tuple(masks)


class _NoMatch(Exception):
  pass


def _list_kinds(graph: graph_lib.Graph, fills) -> tuple[list, list]:
  """The Unique nodes and the row reductions the filled entries reach. Follows the
  entries through the graph in topological order, giving every value derived from
  them a kind ("indices", "x": a list of entries, "seg": their rows, "y"/"idx":
  Unique's values and indices, "xshape"/"yshape": a shape whose first dim is an x or
  y list's); raises _NoMatch where such a value is used otherwise."""
  kinds: dict[Ref, str] = {}
  for fill in fills:
    kinds.update({(fill.name, 0): "indices", (fill.name, 1): "x", (fill.name, 3): "unused"})
  fill_names = {f.name for f in fills}
  uniques, reductions = [], []

  def scalar_const(ref) -> bool:
    value = _const(graph, ref)
    return value is not None and value.ndim == 0

  def axis_zero(ref) -> bool:
    value = _const(graph, ref)
    return value is not None and value.size == 1 and int(value) == 0

  SHAPES = ("xshape", "yshape")
  for node in graph.nodes:
    ins = [tuple(r) for r in node.inputs]
    got = [kinds.get(r) for r in ins]
    if node.name in fill_names or not any(got):
      continue
    op, listed = node.op, [k for k in got if k]
    out: Optional[str] = None
    if "unused" in got:
      raise _NoMatch
    if op == "Identity":
      out = got[0]
    elif op == "StridedSlice" and got == ["indices", None, None, None]:
      spec = [_const(graph, r) for r in ins[1:]]
      masks = [node.attr(k) for k in ("begin_mask", "end_mask", "shrink_axis_mask")]
      masks += [node.attr("ellipsis_mask"), node.attr("new_axis_mask")]
      if any(s is None for s in spec) or [s.tolist() for s in spec] != [[0, 0], [0, 1], [1, 1]]:
        raise _NoMatch
      if masks != [1, 1, 2, 0, 0]:
        raise _NoMatch
      out = "seg"  # indices[:, 0]
    elif op == "Cast" and got == ["seg"]:
      out = "seg"
    elif op in ("SegmentSum", "SegmentMean") and got == ["x", "seg"]:
      reductions.append(node)
    elif op in _SPARSE_SEGMENT and got in (["y", "idx", "seg"], [None, "x", "seg"]):
      reductions.append(node)
    elif op in _ENTRYWISE and len(set(listed)) == 1 and listed[0] in ("x", "y"):
      if not all(k or scalar_const(r) for k, r in zip(got, ins)):
        raise _NoMatch
      out = listed[0]
    elif op in _ROW_REDUCTIONS and got == [got[0], None] and got[0] in ("x", "y"):
      axes = _const(graph, ins[1])
      if axes is None or not axes.size or axes.min() < 1:
        raise _NoMatch
      out = got[0]
    elif op == "Shape" and got[0] in ("x", "y"):
      out = got[0] + "shape"
    elif op == "ConcatV2" and got[0] in SHAPES and not any(got[1:]) and axis_zero(ins[-1]):
      out = got[0]
    elif op == "Reshape" and got[0] in ("x", "y") and got[1] in SHAPES:
      out = got[0]
    elif op == "Fill" and got[0] in SHAPES and not got[1] and scalar_const(ins[1]):
      out = got[0][0]
    elif op in ("GatherV2", "ResourceGather") and node.attr("batch_dims") == 0:
      if op == "GatherV2" and not axis_zero(ins[2]):
        raise _NoMatch
      if got[:2] == ["y", "idx"]:
        out = "x"  # Unique's values' rows, by each entry's idx
      elif got[0] is None and got[1] in ("x", "y"):
        out = got[1]  # rows of a table, by entry
      else:
        raise _NoMatch
    elif op == "Unique" and got == ["x"]:
      uniques.append(node)
      kinds[(node.name, 1)] = "idx"
      out = "y"
    else:
      raise _NoMatch
    if out is not None:
      kinds[(node.name, 0)] = out
  if any(tuple(r) in kinds for r in graph.outputs):
    raise _NoMatch
  return uniques, reductions


class _Builder:
  """Adds the nodes of one rewrite, named under ``prefix``."""

  def __init__(self, prefix: str):
    self.prefix, self.nodes = prefix, []
    self._consts: dict = {}

  def __call__(self, name, op, inputs, **attrs) -> Ref:
    name = f"{self.prefix}/{name}"
    self.nodes.append(graph_lib.new_node(name, op, inputs, **attrs))
    return (name, 0)

  def const(self, value, dtype) -> Ref:
    value = np.asarray(value, dtype)
    key = (value.dtype.str, value.shape, value.tobytes())
    if key not in self._consts:
      self._consts[key] = self(
        f"const_{len(self._consts)}", "Const", [], value=value, dtype=value.dtype
      )
    return self._consts[key]

  def clone(self, name, node: graph_lib.Node, inputs) -> Ref:
    self.nodes.append(node.rewired(inputs))
    self.nodes[-1].name = f"{self.prefix}/{name}"
    return (self.nodes[-1].name, 0)

  def strided_slice(self, name, x, begin, end, **masks) -> Ref:
    refs = [self.const(v, np.int32) for v in (begin, end, [1] * len(begin))]
    return self(name, "StridedSlice", [x, *refs], **masks)


def _lift(graph, b: _Builder, ref: Ref, masks: tuple, memo: dict) -> Ref:
  """``ref`` (a retain's mask) computed on the unpruned entries: the lists it reads
  through retains by ``masks`` read before them; elementwise ops only."""
  ref = _producer(graph, ref)
  if ref in memo:
    return memo[ref]
  step = _retain(graph, ref)
  if step is not None and step[1] in masks:
    memo[ref] = _lift(graph, b, step[0], masks, memo)
    return memo[ref]
  node = graph.by_name.get(ref[0])
  lifted = [_lift(graph, b, tuple(r), masks, memo) for r in node.inputs] if node else []
  if node is None or lifted == [_producer(graph, tuple(r)) for r in node.inputs]:
    memo[ref] = ref
  elif node.op in _ENTRYWISE or node.op in ("Shape", "Fill"):
    memo[ref] = b.clone(f"lift/{node.name}", node, lifted)
  else:
    raise _NoMatch
  return memo[ref]


def _static_fill(graph: graph_lib.Graph, group: list, b: _Builder) -> dict:
  """The nodes replacing the fills of ``group`` (same entries, masks and dense shape):
  returns the refs that replace each fill's outputs, plus "nrows" (the dense shape's
  first dim) and "counts" (kept entries per row, before filling)."""
  indices, masks = _unretain(graph, tuple(group[0].inputs[0]))
  dense_shape = _producer(graph, tuple(group[0].inputs[2]))
  memo: dict = {}
  valid = None
  for mask in masks:
    lifted = _lift(graph, b, mask, masks, memo)
    valid = lifted if valid is None else b(f"valid_{len(b.nodes)}", "LogicalAnd", [valid, lifted])
  i32, i64 = np.int32, np.int64
  minus1 = b.const(-1, i64)
  rows = b.strided_slice(
    "rows", indices, [0, 0], [0, 1], begin_mask=1, end_mask=1, shrink_axis_mask=2
  )
  nrows = b.strided_slice("nrows", dense_shape, [0], [1], shrink_axis_mask=1)
  entries = b("entries", "Shape", [rows], out_type=np.dtype(i32))
  ones = b("ones", "Fill", [entries, b.const(1, i32)])
  if valid is not None:
    rows = b("kept_rows", "SelectV2", [valid, rows, minus1])
  counts = b("counts", "UnsortedSegmentSum", [ones, rows, nrows])
  empty = b("empty", "Equal", [counts, b.const(0, i32)])
  all_rows = b("all_rows", "Range", [b.const(0, i64), nrows, b.const(1, i64)], Tidx=np.dtype(i64))
  fill_rows = b("fill_rows", "SelectV2", [empty, all_rows, minus1])
  width = b.strided_slice(
    "width", b("shape", "Shape", [indices], out_type=np.dtype(i64)), [1], [2], shrink_axis_mask=1
  )
  zero_cols = b(
    "zero_cols",
    "Fill",
    [
      b(
        "zero_cols/dims",
        "Pack",
        [nrows, b("width_1", "Sub", [width, b.const(1, i64)])],
        axis=0,
        N=2,
      ),
      b.const(0, i64),
    ],
  )
  fill_indices = b(
    "fill_indices",
    "ConcatV2",
    [b("fill_rows_2d", "ExpandDims", [fill_rows, b.const(1, i32)]), zero_cols, b.const(1, i32)],
    N=2,
  )
  if valid is not None:
    valid_2d = b("valid_2d", "ExpandDims", [valid, b.const(1, i32)])
    indices = b("kept_indices", "SelectV2", [valid_2d, indices, minus1])
  new_indices = b("indices", "ConcatV2", [indices, fill_indices, b.const(0, i32)], N=2)
  fill_len = b("fill_len", "Reshape", [nrows, b.const([1], i32)])
  out = {"nrows": nrows, "counts": counts}
  for k, fill in enumerate(group):
    (values, values_masks), default = _unretain(graph, tuple(fill.inputs[1])), fill.inputs[3]
    if values_masks != masks:  # values pruned otherwise than their indices
      raise _NoMatch
    if valid is not None:
      values = b(f"kept_values_{k}", "SelectV2", [valid, values, default])
    fill_values = b(f"fill_values_{k}", "Fill", [fill_len, default])
    out[(fill.name, 0)] = new_indices
    out[(fill.name, 1)] = b(f"values_{k}", "ConcatV2", [values, fill_values, b.const(0, i32)], N=2)
    out[(fill.name, 2)] = empty
  return out


def _reduction(b: _Builder, node: graph_lib.Node, fill: dict) -> graph_lib.Node:
  """``node`` (a row reduction of the entries) as ``UnsortedSegmentSum`` over the
  dense shape's rows (and the division of a mean or sqrt-n), named as ``node``."""
  inputs = [tuple(r) for r in node.inputs]
  data, seg = inputs[0], inputs[-1]
  if node.op in _SPARSE_SEGMENT:
    data = b(f"{node.name}/rows", "GatherV2", [data, inputs[1], b.const(0, np.int32)], batch_dims=0)
  if node.op.endswith("Sum"):
    return graph_lib.new_node(node.name, "UnsortedSegmentSum", [data, seg, fill["nrows"]])
  total = b(f"{node.name}/sum", "UnsortedSegmentSum", [data, seg, fill["nrows"]])
  dtype = node.attr("T")
  count = b(f"{node.name}/count", "Maximum", [fill["counts"], b.const(1, np.int32)])
  count = b(f"{node.name}/count_f", "Cast", [count], SrcT=np.dtype(np.int32), DstT=dtype)
  if node.op == "SparseSegmentSqrtN":
    count = b(f"{node.name}/sqrt_count", "Sqrt", [count])
  inner = b.strided_slice(
    f"{node.name}/inner", b(f"{node.name}/shape", "Shape", [total]), [1], [0], end_mask=1
  )
  shape = b(
    f"{node.name}/count_shape",
    "ConcatV2",
    [
      b(f"{node.name}/count_dims", "Shape", [count]),
      b(f"{node.name}/ones", "OnesLike", [inner]),
      b.const(0, np.int32),
    ],
    N=2,
  )
  count = b(f"{node.name}/count_b", "Reshape", [count, shape])
  return graph_lib.new_node(node.name, "RealDiv", [total, count])


def static_fills(graph: graph_lib.Graph) -> graph_lib.Graph:
  """``graph`` with its filled-and-reduced sparse tensors in static sizes (see the
  module doc); the same graph when it has none."""
  groups: dict = {}
  for node in graph.nodes:
    if node.op == "SparseFillEmptyRows":
      base, masks = _unretain(graph, tuple(node.inputs[0]))
      shape = _producer(graph, tuple(node.inputs[2]))
      groups.setdefault((base, masks, shape), []).append(node)
  replaced: dict[str, graph_lib.Node] = {}
  redirect: dict[Ref, Ref] = {}
  added: list = []
  for group in groups.values():
    b = _Builder(f"{group[0].name}/tfprims_static")
    try:
      uniques, reductions = _list_kinds(graph, group)
      fill = _static_fill(graph, group, b)
    except (_NoMatch, RecursionError):
      continue
    redirect.update({k: v for k, v in fill.items() if isinstance(k, tuple)})
    for u in uniques:
      values = tuple(u.inputs[0])
      n = b.strided_slice(
        f"{u.name}/n", b(f"{u.name}/shape", "Shape", [values]), [0], [1], shrink_axis_mask=1
      )
      idx = b(f"{u.name}/idx", "Range", [b.const(0, np.int32), n, b.const(1, np.int32)])
      if u.attr("out_idx") != np.dtype(np.int32):
        idx = b(
          f"{u.name}/idx_cast", "Cast", [idx], SrcT=np.dtype(np.int32), DstT=u.attr("out_idx")
        )
      redirect[(u.name, 0)], redirect[(u.name, 1)] = values, idx
    for node in reductions:
      replaced[node.name] = _reduction(b, node, fill)
    added += b.nodes
  if not replaced:
    return graph

  def target(ref):
    while ref in redirect:  # Unique's values are a fill's values, themselves redirected
      ref = redirect[ref]
    return ref

  nodes = []
  for node in [replaced.get(n.name, n) for n in graph.nodes] + added:
    inputs = [target(tuple(r)) for r in node.inputs]
    nodes.append(node.rewired(inputs, node.control_inputs) if inputs != node.inputs else node)
  return dataclasses.replace(graph, nodes=graph_lib.toposort(nodes, graph.name))
