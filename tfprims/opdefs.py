"""Generic decoding driven by TF op defs: attrs, input grouping, output offsets.

The op def is the schema: nothing here knows about individual ops.
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Any, Mapping, Optional, Sequence

import numpy as np

from tfprims.dtypes import from_tf
from tfprims.errors import import_tensorflow


@dataclasses.dataclass(frozen=True)
class FuncAttr:
  """A function-valued attr (``f``, ``body``, ``then_branch``...)."""

  name: str
  attrs: tuple = ()


@functools.lru_cache(maxsize=None)
def op_def(op_type: str):
  """The TF OpDef of ``op_type``, or None if TF does not know it."""
  from tensorflow.python.framework import op_def_registry

  return op_def_registry.get(op_type)


@functools.lru_cache(maxsize=None)
def takes_refs(op_type: str) -> bool:
  """Whether ``op_type`` takes a TF1 reference tensor (``Assign``'s ``ref``...)."""
  od = op_def(op_type)
  return od is not None and any(a.is_ref for a in od.input_arg)


def _decode_dtype(enum: int):
  tf = import_tensorflow()
  np_dtype = from_tf(enum)
  return np_dtype if np_dtype is not None else tf.dtypes.as_dtype(enum).name


def decode_attr(value) -> Any:
  """Decodes an ``AttrValue`` proto to a hashable Python value.

  dtypes -> ``np.dtype`` (or the TF name for string/resource/variant), lists ->
  tuples, strings -> str, shapes -> tuple (None for unknown dims; None for
  unknown rank), tensors -> numpy arrays, functions -> :class:`FuncAttr`.
  """
  kind = value.WhichOneof("value")
  if kind == "s":
    try:
      return value.s.decode("utf-8")
    except UnicodeDecodeError:
      return bytes(value.s)
  if kind in ("i", "f", "b"):
    return getattr(value, kind)
  if kind == "type":
    return _decode_dtype(value.type)
  if kind == "shape":
    return decode_shape(value.shape)
  if kind == "tensor":
    return decode_tensor(value.tensor)
  if kind == "func":
    return FuncAttr(
      value.func.name, tuple(sorted((k, decode_attr(v)) for k, v in value.func.attr.items()))
    )
  if kind == "list":
    lst = value.list
    for field in ("s", "i", "f", "b", "type", "shape", "tensor", "func"):
      items = getattr(lst, field)
      if len(items):
        if field == "s":
          return tuple(x.decode("utf-8", "replace") for x in items)
        if field == "type":
          return tuple(_decode_dtype(x) for x in items)
        if field == "shape":
          return tuple(decode_shape(x) for x in items)
        if field == "func":
          return tuple(FuncAttr(x.name) for x in items)
        if field == "tensor":
          return tuple(decode_tensor(x) for x in items)
        return tuple(items)
    return ()
  if kind == "placeholder":
    return ("placeholder", value.placeholder)
  return None


def encode_attr(value) -> Any:
  """An ``AttrValue`` proto for a value of a node a graph rewrite adds: numpy arrays
  -> tensors, dtypes -> types, lists -> int lists, bools -> b, ints -> i."""
  tf = import_tensorflow()
  if isinstance(value, (np.ndarray, np.generic)):
    return tf.compat.v1.AttrValue(tensor=tf.make_tensor_proto(value))
  if isinstance(value, (np.dtype, type)):
    return tf.compat.v1.AttrValue(type=tf.as_dtype(value).as_datatype_enum)
  if isinstance(value, (list, tuple)):
    return tf.compat.v1.AttrValue(list=tf.compat.v1.AttrValue.ListValue(i=list(value)))
  if isinstance(value, bool):
    return tf.compat.v1.AttrValue(b=value)
  return tf.compat.v1.AttrValue(i=int(value))


# TensorProto value fields of the dtypes whose values numpy reads directly.
_VALUE_FIELDS = {
  np.dtype(np.float32): "float_val",
  np.dtype(np.float64): "double_val",
  np.dtype(np.int32): "int_val",
  np.dtype(np.int64): "int64_val",
  np.dtype(np.bool_): "bool_val",
}


def decode_tensor(proto) -> np.ndarray:
  """A TensorProto as a numpy array (``tf.make_ndarray`` semantics).

  The common encodings (packed ``tensor_content``, or a splatted value of a
  float/int/bool type) are read here directly: ``tf.make_ndarray`` costs tens of
  microseconds per call, which added up on graphs with thousands of constants.
  """
  dtype = from_tf(proto.dtype)
  shape = tuple(d.size for d in proto.tensor_shape.dim)
  if dtype is not None and dtype.kind != "V":  # bfloat16's numpy kind is 'V'
    if proto.tensor_content:
      return np.frombuffer(proto.tensor_content, dtype).reshape(shape)
    field = _VALUE_FIELDS.get(dtype)
    if field is not None:
      values = getattr(proto, field)
      size = int(np.prod(shape))
      if len(values) == size:
        return np.array(values, dtype).reshape(shape)
      if len(values) == 1 or (not values and size):  # TF repeats the last value
        return np.full(shape, values[-1] if values else 0, dtype)
  tf = import_tensorflow()
  return tf.make_ndarray(proto)


def decode_shape(shape_proto) -> Optional[tuple]:
  if shape_proto.unknown_rank:
    return None
  return tuple(None if d.size < 0 else int(d.size) for d in shape_proto.dim)


def attr_default(op_type: str, name: str) -> Any:
  od = op_def(op_type)
  if od is not None:
    for a in od.attr:
      if a.name == name and a.HasField("default_value"):
        return decode_attr(a.default_value)
  raise KeyError(name)


def _arity(arg, attrs: Mapping[str, Any]) -> Optional[int]:
  """How many tensors a (possibly list-valued) arg stands for; None for a single tensor."""
  if arg.number_attr:
    return int(attrs[arg.number_attr])
  if arg.type_list_attr:
    return len(attrs[arg.type_list_attr])
  return None


@functools.lru_cache(maxsize=None)
def _input_args(op_type: str):
  """The op def's input args, and whether any stands for a list of tensors."""
  od = op_def(op_type)
  if od is None:
    return None, False
  args = tuple(od.input_arg)
  return args, any(a.number_attr or a.type_list_attr for a in args)


def group_inputs(op_type: str, inputs: Sequence[Any], attrs: Mapping[str, Any]) -> dict[str, Any]:
  """Splits a node's flat input list by op-def input arg: {arg: value or list}."""
  args, has_lists = _input_args(op_type)
  if args is None:
    return {f"input_{i}": v for i, v in enumerate(inputs)}
  if not has_lists:
    return dict(zip(input_arg_names(op_type), inputs))
  grouped, pos = {}, 0
  for arg in args:
    n = _arity(arg, attrs)
    if n is None:
      grouped[arg.name] = inputs[pos]
      pos += 1
    else:
      grouped[arg.name] = list(inputs[pos : pos + n])
      pos += n
  return grouped


def output_offsets(op_type: str, attrs: Mapping[str, Any]) -> dict[str, int]:
  """Flat output index at which each op-def output arg starts (for FunctionDef refs)."""
  od = op_def(op_type)
  offsets, pos = {}, 0
  if od is None:
    return offsets
  for arg in od.output_arg:
    offsets[arg.name] = pos
    n = _arity(arg, attrs)
    pos += 1 if n is None else n
  return offsets


def infer_type_attr(op_type: str, attr: str, inputs: Mapping[str, Any]) -> Optional[np.dtype]:
  """The dtype a type attr takes from the input it types (None if it types none)."""
  od = op_def(op_type)
  if od is None:
    return None
  for arg in od.input_arg:
    if arg.type_attr == attr and arg.name in inputs:
      value = inputs[arg.name]
      value = value[0] if isinstance(value, list) and value else value
      dtype = getattr(value, "dtype", None)
      return np.dtype(dtype) if dtype is not None else None
  return None


@functools.lru_cache(maxsize=None)
def input_arg_names(op_type: str) -> tuple[str, ...]:
  od = op_def(op_type)
  return tuple(a.name for a in od.input_arg) if od is not None else ()
