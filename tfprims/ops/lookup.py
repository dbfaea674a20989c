"""Lookup tables whose contents are known at conversion (``tf.lookup.StaticHashTable``,
``MutableHashTable``, ``DenseHashTable``, the tables of Keras ``IntegerLookup``).

A table the function captures is exported once, eagerly, at conversion
(:func:`capture`): its keys, sorted, and its values, permuted alike, become two params,
``<table>/keys`` and ``<table>/values``, and the captured handle becomes a
:class:`~tfprims.interpreter.TableHandle` naming them. The table ops then read the
params through the handle:

* ``LookupTableFindV2``: a ``tf.LookupTableFindV2[scalar_default=...]`` primitive of
  (sorted keys, values, query keys, default value): a binary search, a key equality and
  a select of the default. Linear in the values and the default (its JVP is the op on
  the tangents, with a transpose rule), so ``jax.grad`` reaches the ``values`` param.
* ``LookupTableSizeV2``: the number of keys (a constant of the params' shape).
* ``LookupTableExportV2``: the keys and values params, sorted by key (TF's order is
  its hash map's, unspecified).

Anonymous tables (``experimental_is_anonymous=True``: ``AnonymousHashTable``...) are
captured the same way; those a function creates itself (its graph holds the creator)
are resolved as a TF1 graph's by :mod:`tfprims.ops.lookup_graph`. Writes
(``LookupTableInsertV2``, ``LookupTableRemoveV2``) and tables created inside a library
function are refused at conversion, naming the node; tables with string keys or values
are refused too (they must run in TF). See docs/semantics/lookup.md.
"""

from __future__ import annotations

import gc
import re
from typing import Any, Optional

import jax.numpy as jnp
import numpy as np
from jax.interpreters import ad

from tfprims import dtypes, errors, opdefs, rules
from tfprims.core import declare_unsupported, register_op, structural, tfops
from tfprims.interpreter import TableHandle
from tfprims.errors import import_tensorflow

FAMILY = "lookup"

# TF's table kinds whose LookupTableFindV2 reads a full-shaped default value
# elementwise; HashTableV2's kernel reads its first element only.
_ELEMENTWISE_DEFAULT = ("MutableHashTable", "MutableHashTableOfTensors", "MutableDenseHashTable")

# --- LookupTableFindV2 -------------------------------------------------------------------


def _out_default(default_value, out_shape, scalar_default):
  if scalar_default and default_value.ndim and default_value.size:
    default_value = default_value.reshape(-1)[0]
  return jnp.broadcast_to(default_value, out_shape)


def _positions(table_keys, keys):
  """Each query key's position in the sorted table and whether it is there."""
  n = table_keys.shape[0]
  flat = keys.reshape(-1)
  pos = jnp.clip(jnp.searchsorted(table_keys, flat), 0, n - 1)
  return pos, jnp.asarray(table_keys)[pos] == flat  # numpy keys, traced queries too


def find_impl(table_keys, table_values, keys, default_value, *, scalar_default):
  """The value of each key in the table (sorted keys, values alike), else the default."""
  value_shape = table_values.shape[1:]
  out_shape = keys.shape + value_shape
  default = _out_default(default_value, out_shape, scalar_default)
  if table_keys.shape[0] == 0 or keys.size == 0:
    return default
  pos, hit = _positions(table_keys, keys)
  found = table_values[pos].reshape(out_shape)
  hit = hit.reshape(keys.shape + (1,) * len(value_shape))
  return jnp.where(hit, found, default)


def _find_jvp(primals, tangents, *, scalar_default):
  table_keys, table_values, keys, default_value = primals
  _, t_values, _, t_default = tangents
  out = tfops.LookupTableFindV2(*primals, scalar_default=scalar_default)
  if type(t_values) is ad.Zero and type(t_default) is ad.Zero:
    return out, rules.zero_tangent(out)
  t_values, t_default = rules.instantiate(t_values), rules.instantiate(t_default)
  return out, tfops.LookupTableFindV2(
    table_keys, t_values, keys, t_default, scalar_default=scalar_default
  )


def _find_transpose(ct, table_keys, table_values, keys, default_value, *, scalar_default):
  """Cotangents of the values (summed over the queries that found each key) and of the
  default (summed over the misses, back to its shape)."""
  U = rules.U
  values_shape = rules.shape_of(table_values)
  default_shape = rules.shape_of(default_value)
  value_rank = len(values_shape) - 1
  n = values_shape[0]
  if n and np.prod(rules.shape_of(keys), dtype=int):
    pos, hit = _positions(table_keys, keys)
    hit = hit.reshape(rules.shape_of(keys) + (1,) * value_rank)
  else:  # nothing found
    pos, hit = None, np.zeros(rules.shape_of(keys) + (1,) * value_rank, bool)
  zero = jnp.zeros((), ct.dtype)
  ct_values = ct_default = None
  if U(table_values):
    ct_values = jnp.zeros(values_shape, ct.dtype)
    if pos is not None:
      rows = jnp.where(hit, ct, zero).reshape((-1,) + values_shape[1:])
      ct_values = ct_values.at[pos].add(rows)
  if U(default_value):
    missed = jnp.where(hit, zero, ct)
    if scalar_default and len(default_shape) and int(np.prod(default_shape)):
      first = jnp.sum(missed)
      ct_default = jnp.zeros((int(np.prod(default_shape)),), ct.dtype).at[0].set(first)
      ct_default = ct_default.reshape(default_shape)
    else:
      ct_default = rules.unbroadcast(missed, default_shape)
  return [None, ct_values, None, ct_default]


def _find_batching(args, dims, *, scalar_default):
  table_keys, table_values, keys, default_value = args
  dk, dv, dq, dd = dims
  if dk is not None or dv is not None:  # a batch of tables: vmap the impl
    return rules.vmap_batching(find_impl, False)(args, dims, scalar_default=scalar_default)
  size = rules.batch_size(args, dims)
  keys = rules.with_batch_axis(keys, dq, size)
  if dd is not None:  # the default made full-shaped per member
    default_value = rules.to_front(default_value, dd)
    out_shape = rules.shape_of(keys) + rules.shape_of(table_values)[1:]
    if scalar_default and np.ndim(default_value) > 1 and default_value.size:
      default_value = default_value.reshape(size, -1)[:, 0]
    d_rank = np.ndim(default_value) - 1
    default_value = default_value.reshape(
      (size,) + (1,) * (len(out_shape) - 1 - d_rank) + default_value.shape[1:]
    )
    default_value = jnp.broadcast_to(default_value, out_shape)
    scalar_default = False
  out = tfops.LookupTableFindV2(
    table_keys, table_values, keys, default_value, scalar_default=scalar_default
  )
  return out, 0


def _table(node, value) -> TableHandle:
  if not isinstance(value, TableHandle):
    raise errors.UnsupportedInputError(
      f"{node.op} node '{node.name}' needs a lookup table captured by the function "
      "(its contents known at conversion); got a value of another kind"
    )
  return value


def _find_interpret(ctx, node, inputs):
  handle, keys, default_value = inputs
  handle = _table(node, handle)
  table_keys, table_values = ctx.state[handle.keys_param], ctx.state[handle.values_param]
  dtype = [np.dtype(x.dtype) for x in (keys, table_keys, default_value, table_values)]
  if dtype[0] != dtype[1] or dtype[2] != dtype[3]:
    raise errors.OpError(
      node.op,
      node.name,
      (
        f"table '{handle.key}' maps {dtype[1].name} to {dtype[3].name}; got keys of "
        f"dtype {dtype[0].name} and a default of dtype {dtype[2].name}"
      ),
    )
  value_shape = tuple(np.shape(table_values)[1:])
  d_shape, full = tuple(np.shape(default_value)), tuple(np.shape(keys)) + value_shape
  if d_shape not in (value_shape, full):  # as TF's kernel
    raise errors.OpError(
      node.op,
      node.name,
      (
        f"Expected shape {list(value_shape)} or {list(full)} for default value, got {list(d_shape)}"
      ),
    )
  return [
    tfops.LookupTableFindV2(
      table_keys,
      table_values,
      keys,
      default_value,
      scalar_default=handle.kind not in _ELEMENTWISE_DEFAULT,
    )
  ]


def _find_oracle(table_keys, table_values, keys, default_value, kind, **_):
  """TF oracle for the property runner: a real (anonymous) table holding the drawn
  contents."""
  tf = import_tensorflow()
  kd, vd = tf.as_dtype(table_keys.dtype), tf.as_dtype(table_values.dtype)
  if kind == "HashTable":
    handle = tf.raw_ops.AnonymousHashTable(key_dtype=kd, value_dtype=vd)
  elif table_values.ndim > 1:
    handle = tf.raw_ops.AnonymousMutableHashTableOfTensors(
      key_dtype=kd, value_dtype=vd, value_shape=table_values.shape[1:]
    )
  else:
    handle = tf.raw_ops.AnonymousMutableHashTable(key_dtype=kd, value_dtype=vd)
  if len(table_keys):  # TF refuses to import nothing; a mutable table starts empty
    tf.raw_ops.LookupTableImportV2(
      table_handle=handle, keys=table_keys, values=tf.convert_to_tensor(table_values)
    )
  return tf.raw_ops.LookupTableFindV2(table_handle=handle, keys=keys, default_value=default_value)


def _find_spec(st):
  @st.composite
  def calls(draw):
    key_dtype = np.dtype(draw(st.sampled_from(["int32", "int64"])))
    value_dtype = np.dtype(
      draw(
        st.sampled_from(  # TF's CPU kernels
          ["float32", "float64", "int32"] + (["int64"] if key_dtype == np.int64 else [])
        )
      )
    )
    value_shape = tuple(draw(st.sampled_from([(), (), (2,), (1,)])))  # TF: vectors
    kind = (
      "MutableHashTable"
      if value_shape
      else draw(st.sampled_from(["HashTable", "MutableHashTable"]))
    )
    info = np.iinfo(key_dtype)
    pool = [info.min, info.max, info.min + 1, info.max - 1, -1, 0, 1, 2, 3, 7]
    n = draw(st.integers(0 if kind != "HashTable" else 1, 5))
    chosen = draw(st.lists(st.sampled_from(pool), min_size=n, max_size=n, unique=True))
    table_keys = np.sort(np.asarray(chosen, key_dtype))
    small = st.is_float(value_dtype) or value_dtype == np.int32
    lo, hi = (-100, 100) if small else (None, None)
    table_values = draw(
      st.arrays(value_dtype, (n,) + value_shape, special=False, min_value=lo, max_value=hi)
    )
    query_shape = tuple(draw(st.shapes(max_rank=2, max_side=4)))
    picks = draw(
      st.lists(
        st.sampled_from(pool),
        min_size=int(np.prod(query_shape)),
        max_size=int(np.prod(query_shape)),
      )
    )
    keys = np.asarray(picks, key_dtype).reshape(query_shape)
    full = query_shape + value_shape
    d_shape = draw(st.sampled_from([(), full]))
    d_shape = value_shape if value_shape and not d_shape else d_shape
    default_value = draw(st.arrays(value_dtype, d_shape, special=False, min_value=lo, max_value=hi))
    return dict(
      table_keys=table_keys,
      table_values=table_values,
      keys=keys,
      default_value=default_value,
      kind=kind,
    )

  i64 = np.iinfo(np.int64)
  cases = [  # an empty table; HashTableV2's full-shaped default; vector values
    dict(
      table_keys=np.zeros([0], np.int64),
      table_values=np.zeros([0], np.float32),
      keys=np.asarray([i64.min, 0, i64.max, 0], np.int64),
      default_value=np.float32(-1.5),
      kind="MutableHashTable",
    ),
    dict(
      table_keys=np.asarray([i64.min, 0, i64.max], np.int64),
      table_values=np.asarray([1, 2, 3], np.float32),
      keys=np.asarray([[i64.max, 5], [i64.min, i64.max]], np.int64),
      default_value=np.asarray([[9, 8], [7, 6]], np.float32),
      kind="HashTable",
    ),
    dict(
      table_keys=np.asarray([1, 3], np.int32),
      table_values=np.asarray([[1, 2], [3, 4]], np.float64),
      keys=np.asarray([3, 2, 3], np.int32),
      default_value=np.asarray([-1.0, -2.0]),
      kind="MutableHashTable",
    ),
  ]
  return st.Spec(
    calls(),
    oracle=_find_oracle,
    cases=cases,
    operands=("table_keys", "table_values", "keys", "default_value"),
    params=lambda kw: {"scalar_default": kw["kind"] == "HashTable"},
    diff_args=("table_values", "default_value"),
    grad_oracle="fd",
    vmap_variation="scale",
    examples=0.5,
    note="drawn as the table's sorted keys and values; the oracle imports them into "
    "an anonymous HashTable/MutableHashTable(OfTensors). TF registers no "
    "gradient (the values live in a resource): derivatives are checked against "
    "central differences of TF in the values and the default",
  )


LookupTableFindV2 = register_op(
  "LookupTableFindV2",
  find_impl,
  family=FAMILY,
  attrs=(),
  jvp=_find_jvp,
  transpose=_find_transpose,
  batching=_find_batching,
  interpret=_find_interpret,
  reads_state=True,
  spec=_find_spec,
  doc="The value of each key in a table known at conversion (sorted keys, values "
  "alike), else the default.",
)


# --- size and export -----------------------------------------------------------------


@structural(
  "LookupTableSizeV2",
  family=FAMILY,
  reads_state=True,
  doc="The number of keys in a table known at conversion (its params' shape).",
)
def _size(ctx, node, inputs):
  handle = _table(node, inputs[0])
  return [np.asarray(np.shape(ctx.state[handle.keys_param])[0], np.int64)]


@structural(
  "LookupTableExportV2",
  family=FAMILY,
  reads_state=True,
  doc="A table's keys and values, sorted by key (TF's order is unspecified).",
)
def _export(ctx, node, inputs):
  handle = _table(node, inputs[0])
  return [ctx.state[handle.keys_param], ctx.state[handle.values_param]]


@structural(
  "LookupTableImportV2",
  "InitializeTableV2",
  family=FAMILY,
  reads_state=True,
  doc="The function's own initializer of a captured table, folded at conversion "
  "(the table's contents are params); other writes are refused.",
)
def _initialize(ctx, node, inputs):
  handle = _table(node, inputs[0])
  if handle.initialized_by != node.name:
    raise errors.UnsupportedInputError(
      f"{node.op} node '{node.name}' writes lookup table '{handle.key}'; tfprims "
      "converts tables read-only (their contents exported at conversion)"
    )
  return []


declare_unsupported(
  "LookupTableInsertV2",
  "LookupTableRemoveV2",
  hint="the function writes a lookup table; tfprims converts tables read-only, "
  "their contents exported at conversion: fill the table in TF before "
  "converting, and write it there",
)


# --- at conversion: a captured table's contents as params ----------------------------------

_CREATORS = {
  "HashTableV2": "HashTable",
  "HashTable": "HashTable",
  "MutableHashTableV2": "MutableHashTable",
  "MutableHashTableOfTensorsV2": "MutableHashTableOfTensors",
  "MutableDenseHashTableV2": "MutableDenseHashTable",
  "AnonymousHashTable": "HashTable",
  "AnonymousMutableHashTable": "MutableHashTable",
  "AnonymousMutableHashTableOfTensors": "MutableHashTableOfTensors",
  "AnonymousMutableDenseHashTable": "MutableDenseHashTable",
}


def table_owner(handle) -> Optional[Any]:
  """The Python lookup table (or restored table resource) whose handle is ``handle``,
  or None."""
  from tensorflow.python.ops import lookup_ops
  from tensorflow.python.trackable import resource

  for obj in gc.get_objects():
    try:
      if isinstance(obj, resource.CapturableResource) and obj.resource_handle is handle:
        break
    except Exception:  # resources of other kinds may have no eager handle
      continue
  else:
    return None
  if isinstance(obj, lookup_ops.LookupInterface) or _created_as(obj)[0] is not None:
    return obj
  return None


def _created_as(owner) -> tuple[Optional[str], dict, Optional[tuple]]:
  """The creating op's kind and attrs, read from a restored resource's
  ``_create_resource`` function (nested calls included), and a dense table's empty
  and deleted keys where they are constants there."""
  create = getattr(owner, "_create_resource", None)
  if create is None:
    return None, {}, None
  try:
    cf = create.get_concrete_function() if hasattr(create, "get_concrete_function") else create
    graph_def = cf.graph.as_graph_def()
  except Exception:  # not a function we can read
    return None, {}, None
  nodes = list(graph_def.node) + [n for f in graph_def.library.function for n in f.node_def]
  consts = {n.name: n for n in nodes if n.op == "Const"}
  for node in nodes:
    if node.op in _CREATORS:
      found = [consts.get(ref.split(":")[0]) for ref in node.input[:2]]
      markers = None
      if _CREATORS[node.op] == "MutableDenseHashTable" and len(found) == 2 and all(found):
        markers = tuple(opdefs.decode_tensor(c.attr["value"].tensor).reshape(-1)[0] for c in found)
        markers += (not node.attr["value_shape"].shape.dim,)  # scalar values
      return _CREATORS[node.op], node.attr, markers
  return None, {}, None


def _describe(owner) -> tuple[str, Any, Any, Any]:
  """(kind, key dtype, value dtype, a dense table's (empty key, deleted key, scalar
  values?) or None)."""
  tf = import_tensorflow()
  from tensorflow.python.ops.lookup_ops import MutableHashTable

  dense = getattr(tf.lookup.experimental, "DenseHashTable", ())
  kind, attrs, markers = _created_as(owner)
  if kind is not None:
    return (
      kind,
      tf.as_dtype(attrs["key_dtype"].type),
      tf.as_dtype(attrs["value_dtype"].type),
      markers,
    )
  key_dtype, value_dtype = (getattr(owner, "key_dtype", None), getattr(owner, "value_dtype", None))
  if isinstance(owner, dense):
    scalar = owner._value_shape.rank == 0  # pylint: disable=protected-access
    return (
      "MutableDenseHashTable",
      key_dtype,
      value_dtype,
      (owner._empty_key, owner._deleted_key, scalar),
    )  # pylint: disable=protected-access
  if isinstance(owner, MutableHashTable):
    return "MutableHashTable", key_dtype, value_dtype, None
  return "HashTable", key_dtype, value_dtype, None  # StaticHashTable and its kin


_DEFAULT_NAMES = ("hash_table", "MutableHashTable", "MutableDenseHashTable", "DenseHashTable")


def table_name(owner, placeholder: str) -> str:
  """A param name for a table: the name it was given, else its captured placeholder's
  scope (``integer_lookup/None_Lookup/LookupTableFindV2/table_handle`` ->
  ``integer_lookup/table``), else TF's default name (``hash_table``), else (restored
  tables have neither) the attribute holding it."""
  name = getattr(owner, "_name", None) or getattr(owner, "name", None)
  name = name if isinstance(name, str) and name else None
  if name is not None and name not in _DEFAULT_NAMES:
    return name
  parts = [
    p
    for p in placeholder.split("/")
    if not re.search(
      r"table_handle|^LookupTable|_Lookup(_\d+)?$|^None_|_Size$|"
      r"_Export$|_lookup_table_export|^unknown(_\d+)?$|_init(_\d+)?$",
      p,
    )
  ]
  if parts:
    return "/".join(parts + ["table"])
  return name or _attribute_name(owner) or "table"


def _attribute_name(owner) -> Optional[str]:
  """The attribute a Python object holds ``owner`` in (a restored SavedModel's
  ``module.table``: its captures are all named 'unknown')."""
  if owner is None:
    return None
  for referrer in gc.get_referrers(owner):
    if isinstance(referrer, dict):
      for attr, value in referrer.items():
        if (
          value is owner
          and isinstance(attr, str)
          and attr.isidentifier()
          and not attr.startswith("_")
        ):
          return attr
  return None


_INITIALIZERS = ("LookupTableImportV2", "InitializeTableV2")


def graph_initializer(placeholder) -> Optional[tuple[str, np.ndarray, np.ndarray]]:
  """``(node name, keys, values)`` of the function's own initializer of a captured
  table (a table created inside a tf.function is lifted out of it, uninitialized, and
  initialized by the function) when its keys and values are constants, else None."""
  tf = import_tensorflow()
  for op in placeholder.consumers():
    if op.type in _INITIALIZERS:
      keys, values = (tf.get_static_value(t) for t in op.inputs[1:3])
      if keys is not None and values is not None:
        return op.name, np.asarray(keys), np.asarray(values)
  return None


def writers(placeholder, initializer: Optional[str]) -> list[str]:
  """The nodes that write a captured table, but for its folded initializer."""
  return [
    f"{op.type} node '{op.name}'"
    for op in placeholder.consumers()
    if op.type
    in _INITIALIZERS
    + ("LookupTableInsertV2", "LookupTableRemoveV2", "InitializeTableFromTextFileV2")
    and op.name != initializer
  ]


def sorted_contents(where: str, keys: np.ndarray, values: np.ndarray) -> dict:
  """Keys sorted, values permuted alike; string contents refused."""
  strings = [what for what, a in (("keys", keys), ("values", values)) if a.dtype.kind in "OSU"]
  if strings:
    raise errors.UnsupportedInputError(
      f"{where} has string {' and '.join(strings)}: string tables have no JAX "
      "representation, so the lookup must run in TF: tfprims.split_host_prefix(fn, ...) "
      "runs it there and converts the numeric rest"
    )
  if keys.ndim != 1:
    raise errors.UnsupportedInputError(
      f"{where} has keys of shape {list(keys.shape[1:])}; tfprims converts tables of scalar keys"
    )
  order = np.argsort(keys, kind="stable")
  return {"keys": np.ascontiguousarray(keys[order]), "values": np.ascontiguousarray(values[order])}


def capture(node_name: str, captured, owner, consumers: str) -> tuple[str, dict]:
  """A captured table's kind and contents: ``(kind, {"keys": sorted keys, "values":
  values alike})`` as numpy; raises ``UnsupportedInputError`` naming the node for
  tables tfprims cannot hold (string keys or values, tables without an owner)."""
  tf = import_tensorflow()
  kind, key_dtype, value_dtype, dense_markers = (
    _describe(owner) if owner is not None else ("HashTable", None, None, None)
  )
  where = f"the lookup table captured as '{node_name}'{consumers}"
  if key_dtype is None or value_dtype is None:
    raise errors.UnsupportedInputError(
      f"{where}: tfprims found no table object owning the handle (to read its key and "
      "value dtypes); keep the table alive while converting"
    )
  strings = [what for what, d in (("keys", key_dtype), ("values", value_dtype)) if d == tf.string]
  if strings:
    raise errors.UnsupportedInputError(
      f"{where} has string {' and '.join(strings)} ({key_dtype.name} -> "
      f"{value_dtype.name}): string tables have no JAX representation, so the lookup "
      "must run in TF: tfprims.split_host_prefix(fn, ...) runs it there and converts the "
      "numeric rest"
    )
  if dtypes.from_tf(key_dtype) is None or dtypes.from_tf(value_dtype) is None:
    raise errors.UnsupportedInputError(
      f"{where} maps {key_dtype.name} to {value_dtype.name}, which has no JAX equivalent"
    )
  keys, values = tf.raw_ops.LookupTableExportV2(
    table_handle=captured, Tkeys=key_dtype, Tvalues=value_dtype
  )
  keys, values = keys.numpy(), values.numpy()
  if dense_markers is not None and (keys.ndim == 1 or keys.shape[1:] == (1,)):
    keys = keys.reshape(-1)  # a dense table exports every bucket: keep the entries
    used = (keys != dense_markers[0]) & (keys != dense_markers[1])
    keys, values = keys[used], values[used]
    if values.ndim == 2 and values.shape[1] == 1 and dense_markers[2]:  # scalar values
      values = values[:, 0]
  return kind, sorted_contents(where, keys, values)


def captured_table(placeholder, captured, *, taken, allow, problems):
  """A resource a ConcreteFunction captures, as tfprims.api converts it: a lookup
  table as ``(TableHandle, {param name: contents})``; None if it is not a table; False
  where it is one that cannot convert (the reason added to ``problems``). ``taken``:
  the param names in use."""
  tf = import_tensorflow()
  users = sorted({op.type for op in placeholder.consumers()})
  owner = table_owner(captured)
  initializer = graph_initializer(placeholder)
  if owner is None and initializer is None and not any(u.startswith("LookupTable") for u in users):
    return None
  node_name = placeholder.op.name
  readers = [f"{op.type} node '{op.name}'" for op in placeholder.consumers()]
  where = f" (read by {', '.join(readers)})" if readers else ""
  name = base = table_name(owner, node_name)
  n = 1
  while f"{name}/keys" in taken or f"{name}/values" in taken:
    n += 1
    name = f"{base}_{n}"
  if not allow:
    problems.append(
      f"the function captures lookup table '{name}'{where}; "
      "convert_functional needs a stateless function: use "
      "tfprims.convert, which returns the table's contents as params"
    )
    return False
  if tf.inside_function():
    problems.append(
      f"unable to export lookup table '{name}'{where} inside a TF tracing "
      "context (tfprims.convert called inside a tf.function); convert "
      "outside it"
    )
    return False
  writes = writers(placeholder, initializer and initializer[0])
  if writes:
    problems.append(
      f"lookup table '{name}' is written by {', '.join(writes)}; tfprims "
      "converts tables read-only (their contents exported at conversion)"
    )
    return False
  try:
    if initializer is not None:  # initialized by the function: its constants
      kind = "HashTable"
      contents = sorted_contents(f"lookup table '{name}'{where}", *initializer[1:])
    else:
      kind, contents = capture(node_name, captured, owner, where)
  except errors.UnsupportedInputError as e:
    problems.append(str(e))
    return False
  handle = TableHandle(name, kind, initializer[0] if initializer else "")
  taken |= {handle.keys_param, handle.values_param}
  return handle, {handle.keys_param: contents["keys"], handle.values_param: contents["values"]}
