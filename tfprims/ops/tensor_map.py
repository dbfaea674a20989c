"""TensorMap ops (TF's immutable tensor-keyed maps: EmptyTensorMap, TensorMapInsert,
TensorMapLookup, TensorMapErase, TensorMapHasKey, TensorMapSize, TensorMapStackKeys).

A TF TensorMap is a variant tensor. Inside the interpreter it is a
:class:`TensorMap`: an immutable mapping from keys, which must be known at trace
time (numpy values: the key set is static, like a TensorList's length), to
values, which may be traced. Every op is bookkeeping and binds nothing: a looked-up
value is the inserted value itself, so gradients and vmap flow through it.

Keys compare by value (``3`` and ``3.0`` are different keys only if their dtypes
differ, as TF compares key tensors by dtype and content). ``TensorMapStackKeys``
returns the keys in insertion order; TF returns its hash map's order (a set of
keys either way). Missing keys raise with TF's message. A map cannot be carried
through ``If``/``While`` (a ``TypeError`` from JAX names it).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from tfprims import core, dtypes, errors
from tfprims.core import structural

FAMILY = "state"


class TensorMap:
  """An immutable map: ``entries`` is a tuple of ``(key, value)`` in insertion order,
  keys ``(dtype name, bytes)`` of a concrete numpy key tensor."""

  __slots__ = ("entries",)

  def __init__(self, entries=()):
    self.entries = tuple(entries)

  def index(self, ident) -> int:
    """The position of the key whose identity (see ``_key``) is ``ident``, or -1."""
    for i, ((known, _), _) in enumerate(self.entries):
      if known == ident:
        return i
    return -1

  def __repr__(self):
    return f"TensorMap({len(self.entries)} entries)"


def _map(node, value) -> TensorMap:
  if not isinstance(value, TensorMap):
    raise errors.UnsupportedInputError(
      f"{node.op} node '{node.name}' needs a TensorMap; got {type(value).__name__}"
    )
  return value


def _key(node, key) -> tuple:
  """A hashable identity of a concrete key tensor (dtype, shape and content)."""
  if not core.is_concrete(key):
    raise errors.StaticInputError(node.op, node.name, "key")
  k = np.asarray(key)
  return ((k.dtype.name, k.shape, k.tobytes()), k)


def _describe(k: np.ndarray) -> str:
  return str(k.item() if k.ndim == 0 else k.tolist())


@structural("EmptyTensorMap", family=FAMILY, doc="An empty TensorMap.")
def _empty(ctx, node, inputs):
  return [TensorMap()]


@structural(
  "TensorMapInsert",
  family=FAMILY,
  doc="The map with key set to value (replacing an existing value).",
)
def _insert(ctx, node, inputs):
  m, (ident, k), value = _map(node, inputs[0]), _key(node, inputs[1]), inputs[2]
  entries = list(m.entries)
  i = m.index(ident)
  if i >= 0:
    entries[i] = ((ident, k), value)
  else:
    entries.append(((ident, k), value))
  return [TensorMap(entries)]


def _find(node, m, ident, k, verb, what) -> int:
  i = m.index(ident)
  if i < 0:
    raise errors.RuntimeCheckError(
      node.op,
      node.name,
      f"Trying to {verb} non-existent {what}. Could not find key \"{_describe(k)}\".",
    )
  return i


@structural("TensorMapLookup", family=FAMILY, doc="The value of key (which must be present).")
def _lookup(ctx, node, inputs):
  m, (ident, k) = _map(node, inputs[0]), _key(node, inputs[1])
  value = m.entries[_find(node, m, ident, k, "lookup", "key")][1]
  return [value]


@structural("TensorMapErase", family=FAMILY, doc="The map without key (which must be present).")
def _erase(ctx, node, inputs):
  m, (ident, k) = _map(node, inputs[0]), _key(node, inputs[1])
  i = _find(node, m, ident, k, "erase", "item")
  return [TensorMap(m.entries[:i] + m.entries[i + 1 :])]


@structural("TensorMapHasKey", family=FAMILY, doc="Whether key is in the map.")
def _has_key(ctx, node, inputs):
  m, (ident, _) = _map(node, inputs[0]), _key(node, inputs[1])
  return [np.bool_(m.index(ident) >= 0)]


@structural("TensorMapSize", family=FAMILY, doc="The number of keys (int32).")
def _size(ctx, node, inputs):
  return [np.int32(len(_map(node, inputs[0]).entries))]


@structural(
  "TensorMapStackKeys",
  family=FAMILY,
  doc="The keys stacked (insertion order; TF's is its hash map's).",
)
def _stack_keys(ctx, node, inputs):
  m = _map(node, inputs[0])
  dtype = dtypes.from_tf(node.attr("key_dtype"))
  keys: list[Any] = [k for (_, k), _ in m.entries]
  if not keys:
    return [np.zeros((0,), dtype)]
  return [np.stack([np.asarray(k, dtype) for k in keys])]
