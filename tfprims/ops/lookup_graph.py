"""Lookup tables created in a TF1 graph (a GraphDef, frozen ``.pb`` or Session graph):
``HashTableV2`` with ``InitializeTableV2``/``LookupTableImportV2`` of constants or
``InitializeTableFromTextFileV2`` of a file of numbers, and ``MutableHashTable
(OfTensors)V2``/``MutableDenseHashTableV2`` with ``LookupTableImportV2``; and their
anonymous forms (``AnonymousHashTable``..., ``experimental_is_anonymous=True``), in a
TF1 graph or created by a tf.function itself (a mutable or dense table: TF lifts a
static one out, :mod:`tfprims.ops.lookup` captures it). An anonymous table lives for
one run: no Session holds one to export, so its initializer must be one the same run
reaches.

:func:`resolve` (run by :func:`tfprims.pipeline.prepare` for every entry point) finds
each table the fetched tensors read, its contents (a Session's table exported by
running the session; else its initializer in the graph: the table-initializer
collection's ops, ``init_all_tables``' inputs, are in the GraphDef though not
fetched), and returns them as the params ``<table node>/keys`` (sorted) and
``<table node>/values`` (permuted alike) that the TF2 path gives a captured table
(:mod:`tfprims.ops.lookup`): the creating node then yields a
:class:`~tfprims.interpreter.TableHandle` naming them, so ``LookupTableFindV2``, its
gradient, ``LookupTableSizeV2`` and ``LookupTableExportV2`` work unchanged. Tables with
string keys or values, written tables (``LookupTableInsertV2``...), tables initialized
from computed values and unreadable files are refused, naming the node.
See docs/semantics/lookup.md.
"""

from __future__ import annotations

import dataclasses
from typing import Callable, Optional

import numpy as np

from tfprims import errors, graph as graph_lib, opdefs
from tfprims.core import structural
from tfprims.interpreter import TableHandle
from tfprims.ops.lookup import sorted_contents

FAMILY = "lookup"

_KINDS = {
  "HashTableV2": "HashTable",
  "MutableHashTableV2": "MutableHashTable",
  "MutableHashTableOfTensorsV2": "MutableHashTableOfTensors",
  "MutableDenseHashTableV2": "MutableDenseHashTable",
  # experimental_is_anonymous=True: a table that lives as long as its handle (one
  # Session.run in a TF1 graph, one call of a tf.function)
  "AnonymousHashTable": "HashTable",
  "AnonymousMutableHashTable": "MutableHashTable",
  "AnonymousMutableHashTableOfTensors": "MutableHashTableOfTensors",
  "AnonymousMutableDenseHashTable": "MutableDenseHashTable",
}
_TEXT = "InitializeTableFromTextFileV2"
_INITS = ("InitializeTableV2", "LookupTableImportV2", _TEXT)
_WRITES = ("LookupTableInsertV2", "LookupTableRemoveV2")
_KEY_ATTR, _INIT_ATTR = "_tfprims_table", "_tfprims_initializer"  # set by resolve()


@structural(
  *_KINDS,
  family=FAMILY,
  doc="A lookup table created in the graph (TF1, or an anonymous table a tf.function "
  "creates), its contents found at conversion "
  "(constants, a file of numbers, or a Session's table): params "
  "'<node>/keys' and '<node>/values'.",
)
def _create(ctx, node, inputs):
  key = node.attr(_KEY_ATTR, None)
  if key is None:  # resolve() reports these at conversion; a library function's table
    raise errors.UnsupportedInputError(
      f"{node.op} node '{node.name}' creates a lookup table inside a function; create "
      "it outside the tf.function (tfprims exports a captured table's contents at "
      "conversion)"
    )
  return [TableHandle(key, _KINDS[node.op], node.attr(_INIT_ATTR, ""))]


@structural(
  _TEXT,
  family=FAMILY,
  reads_state=True,
  doc="A TF1 graph's initializer of a table from a file, folded at conversion "
  "(the file's contents are the table's params).",
)
def _initialize_from_file(ctx, node, inputs):
  handle = inputs[0]
  if not isinstance(handle, TableHandle) or handle.initialized_by != node.name:
    raise errors.UnsupportedInputError(
      f"{node.op} node '{node.name}' writes a lookup table; tfprims converts tables "
      "read-only (their contents exported at conversion)"
    )
  return []


def _name(ref: str) -> str:
  return graph_lib.parse_ref(ref.lstrip("^"))[0]


def _source(by_def, ref: str) -> str:
  """The node ``ref`` reads, through Identity nodes."""
  name = _name(ref)
  while name in by_def and by_def[name].op == "Identity" and by_def[name].input:
    name = _name(by_def[name].input[0])
  return name


def _const(by_def, ref: str) -> Optional[np.ndarray]:
  node = by_def.get(_source(by_def, ref))
  if node is None or node.op != "Const":
    return None
  return opdefs.decode_tensor(node.attr["value"].tensor)


def _parse(text: str, dtype: np.dtype):
  return int(text) if dtype.kind in "iu" else float(text)


def _read_text(by_def, init, key_dtype, value_dtype) -> tuple[np.ndarray, np.ndarray]:
  """A table's contents from ``InitializeTableFromTextFileV2`` (TF's key_index /
  value_index: a column, -1 the line number plus ``offset``, -2 the whole line);
  raises ``UnsupportedInputError`` naming the node and the file."""
  attr = init.attr
  get = lambda k, d: getattr(attr[k], "i" if k != "delimiter" else "s") if k in attr else d
  key_index, value_index = get("key_index", -2), get("value_index", -1)
  vocab_size, offset = get("vocab_size", -1), get("offset", 0)
  delimiter = get("delimiter", b"\t").decode("utf-8")
  filename = _const(by_def, init.input[1])
  where = f"{init.op} node '{init.name}'"
  if filename is None:
    raise errors.UnsupportedInputError(
      f"{where} reads a file whose name is not a constant of the graph"
    )
  path = filename.item()
  path = path.decode("utf-8") if isinstance(path, bytes) else str(path)
  try:
    with open(path, encoding="utf-8") as f:
      lines = [line.rstrip("\r") for line in f.read().split("\n")]
  except (OSError, UnicodeDecodeError) as e:
    raise errors.UnsupportedInputError(
      f"{where}: cannot read the table's file {path!r} ({e})"
    ) from None
  if lines and lines[-1] == "":
    lines.pop()
  if vocab_size > 0:
    if len(lines) < vocab_size:
      raise errors.UnsupportedInputError(
        f"{where}: file {path!r} has {len(lines)} lines, fewer than vocab_size "
        f"{vocab_size} (TF raises too)"
      )
    lines = lines[:vocab_size]

  def column(i, line, index, dtype):
    if index == -1:
      return i + offset
    text = line if index == -2 else (line.split(delimiter) + [None] * (index + 1))[index]
    if text is None:
      raise errors.UnsupportedInputError(
        f"{where}: line {i} of {path!r} has no column {index} (TF raises too)"
      )
    try:
      return _parse(text, dtype)
    except ValueError:
      raise errors.UnsupportedInputError(
        f"{where}: line {i} of {path!r}: {text!r} is not a {dtype.name} number; "
        "tfprims reads files of numeric keys and values (string tables must run in "
        "TF: tfprims.split_host_prefix)"
      ) from None

  keys = np.asarray([column(i, ln, key_index, key_dtype) for i, ln in enumerate(lines)], key_dtype)
  values = np.asarray(
    [column(i, ln, value_index, value_dtype) for i, ln in enumerate(lines)], value_dtype
  )
  return keys, values


def _contents(tf, by_def, node, inits, export) -> tuple[np.ndarray, np.ndarray]:
  """The table's (keys, values) as TF holds them, entries unique, or raises
  ``UnsupportedInputError`` saying why not."""
  kind = _KINDS[node.op]
  where = f"{node.op} node '{node.name}'"
  key_dtype, value_dtype = node.attr("key_dtype"), node.attr("value_dtype")
  value_shape = tuple(node.attr("value_shape", ()) or ())
  # an anonymous table is created anew by each run: no Session holds one to export
  anonymous = node.op.startswith("Anonymous")
  got = export(node) if export is not None and not anonymous else None
  if got is None and not inits:  # a TF1 SavedModel's table, initialized at load
    got = _eager_export(tf, node)
  if got is None:
    if len(inits) > 1:
      raise errors.UnsupportedInputError(
        f"{where}: lookup table initialized by several nodes ({', '.join(i.name for i in inits)})"
      )
    if not inits and kind == "HashTable":
      raise errors.UnsupportedInputError(
        f"{where}: lookup table has no initializer in the graph (TF raises 'Table not "
        "initialized'); convert the session after running its initializer"
        + (
          " (an anonymous table must be initialized by the run that reads it: make "
          "the lookup depend on its initializer)"
          if anonymous
          else ""
        )
      )
    if not inits:  # a mutable table starts empty
      got = np.zeros([0], key_dtype), np.zeros((0,) + value_shape, value_dtype)
    elif inits[0].op == _TEXT:
      got = _read_text(by_def, inits[0], key_dtype, value_dtype)
    else:
      got = tuple(_const(by_def, ref) for ref in inits[0].input[1:3])
      if any(g is None for g in got):
        raise errors.UnsupportedInputError(
          f"{where}: lookup table initialized by {inits[0].op} node '{inits[0].name}' "
          "from values that are not constants of the graph"
        )
  keys, values = (np.asarray(g) for g in got)
  if kind == "MutableDenseHashTable":  # the export is every bucket: keep the entries
    keys = keys.reshape(-1) if keys.ndim == 2 and keys.shape[1] == 1 else keys
    markers = [_const(by_def, ref) for ref in _def_inputs(by_def, node)[:2]]
    used = np.ones(keys.shape[0], bool)
    for marker in markers:
      if marker is not None:
        used &= keys != marker.reshape(-1)[0]
    keys, values = keys[used], values[used]
  values = values.reshape((keys.shape[0],) + value_shape)
  last = len(keys) - 1 - np.unique(keys[::-1], return_index=True)[1]
  first = np.unique(keys, return_index=True)[1]
  if (
    len(first) < len(keys)
    and kind == "HashTable"
    and not np.array_equal(values[first], values[last])
  ):
    raise errors.UnsupportedInputError(
      f"{where}: lookup table initialized with different values for the same key (TF raises too)"
    )
  return keys[np.sort(last)], values[np.sort(last)]


def _eager_export(tf, node) -> Optional[tuple[np.ndarray, np.ndarray]]:
  """The contents of the table TF holds under the node's ``shared_name`` in this
  process (a TF1 SavedModel's: its initializer ran when it was loaded, outside the
  signature's graph), exported eagerly; None where there is none (outside eager mode,
  no shared name, an uninitialized table)."""
  shared = node.attr("shared_name", "")
  if not shared or node.op == "MutableDenseHashTableV2" or not tf.executing_eagerly():
    return None
  kd, vd = (tf.as_dtype(node.attr(a)) for a in ("key_dtype", "value_dtype"))
  attrs = dict(
    key_dtype=kd,
    value_dtype=vd,
    shared_name=shared,
    container=node.attr("container", ""),
    use_node_name_sharing=node.attr("use_node_name_sharing", False),
  )
  if node.op == "MutableHashTableOfTensorsV2":
    attrs["value_shape"] = node.attr("value_shape", ())
  try:
    handle = getattr(tf.raw_ops, node.op)(**attrs)
    keys, values = tf.raw_ops.LookupTableExportV2(table_handle=handle, Tkeys=kd, Tvalues=vd)
  except (tf.errors.OpError, TypeError, ValueError):
    return None
  return keys.numpy(), values.numpy()


def _def_inputs(by_def, node) -> list[str]:
  nd = by_def.get(node.name)
  return [r for r in nd.input if not r.startswith("^")] if nd is not None else []


def resolve(
  graph: graph_lib.Graph,
  graph_def,
  library: graph_lib.Library,
  *,
  problems: list,
  export: Optional[Callable] = None,
  taken: frozenset = frozenset(),
) -> tuple[graph_lib.Graph, dict]:
  """``(graph, params)``: the tables the graph reads with their contents as params
  (``<node>/keys``, ``<node>/values``; ``<node>_2/...`` where ``taken``, the other
  params' names, has them: a captured table's TF default name), their creating nodes
  marked to yield the handle naming them; what keeps a table from converting is added
  to ``problems``. ``export(node) -> (keys, values) | None``: a Session's table
  contents."""
  for fname, g in sorted(library.reachable(graph).items()):
    problems += [
      f"{n.op} node '{fname}/{n.name}' creates a lookup table inside a "
      "function; create it outside the tf.function (tfprims exports a "
      "captured table's contents at conversion)"
      for n in g.nodes
      if n.op in _KINDS
    ]
  creators = [n for n in graph.nodes if n.op in _KINDS and n.name in graph.needed]
  if not creators:
    return graph, {}
  tf = errors.import_tensorflow()
  by_def = {nd.name: nd for nd in graph_def.node}
  users: dict[str, list] = {}
  for nd in graph_def.node:
    if nd.op in _INITS + _WRITES and nd.input:
      users.setdefault(_source(by_def, nd.input[0]), []).append(nd)
  params, marked = {}, {}
  for node in creators:
    where = f"{node.op} node '{node.name}'"
    dtypes = [node.attr("key_dtype"), node.attr("value_dtype")]
    strings = [what for what, d in zip(("keys", "values"), dtypes) if not isinstance(d, np.dtype)]
    if strings:
      problems.append(
        f"{where} creates a lookup table of string {' and '.join(strings)}: string "
        "tables have no JAX representation, so the lookup must run in TF: "
        "tfprims.split_host_prefix(fn, ...) runs it there and converts the numeric rest"
      )
      continue
    mine = users.get(node.name, [])
    # a Session's table is exported as it is now: only writes the run makes matter
    writes = [
      f"{nd.op} node '{nd.name}'"
      for nd in mine
      if nd.op in _WRITES and (export is None or nd.name in graph.needed)
    ]
    if writes:
      problems.append(
        f"{where}: lookup table written by {', '.join(writes)}; tfprims converts tables read-only"
      )
      continue
    inits = [nd for nd in mine if nd.op in _INITS]
    if node.op.startswith("Anonymous"):  # only what the same run initializes counts
      inits = [nd for nd in inits if nd.name in graph.needed]
    try:
      contents = sorted_contents(
        f"lookup table '{node.name}'", *_contents(tf, by_def, node, inits, export)
      )
    except errors.UnsupportedInputError as e:
      problems.append(str(e))
      continue
    init = inits[0].name if len(inits) == 1 else ""
    key, n = node.name, 1
    while {f"{key}/keys", f"{key}/values"} & (set(taken) | set(params)):
      n += 1
      key = f"{node.name}_{n}"
    attrs = dict(node.attr_protos)
    attrs[_KEY_ATTR] = tf.compat.v1.AttrValue(s=key.encode("utf-8"))
    attrs[_INIT_ATTR] = tf.compat.v1.AttrValue(s=init.encode("utf-8"))
    marked[node.name] = graph_lib.Node(
      node.name, node.op, node.inputs, node.control_inputs, attrs, node.device
    )
    params[f"{key}/keys"], params[f"{key}/values"] = (
      contents["keys"],
      contents["values"],
    )
  if not marked:
    return graph, params
  return dataclasses.replace(graph, nodes=[marked.get(n.name, n) for n in graph.nodes]), params
