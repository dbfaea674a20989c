"""Shared by the Xla* ops: parsing the serialized XLA protos their attrs carry, and
the property-test oracle (the raw op under ``tf.function(jit_compile=True)``: most
Xla* ops have only XLA kernels).

The protos (``DotDimensionNumbers``, ``ConvolutionDimensionNumbers``,
``GatherDimensionNumbers``, ``ScatterDimensionNumbers``, ``PrecisionConfig``) are
parsed with TF's ``xla_data_pb2`` when an op is prepared (never at import: importing
tfprims imports no TensorFlow), into tuples of ints that are the primitives'
params.
"""

from __future__ import annotations

import functools
import re
from typing import Any

import numpy as np
from tfprims.errors import import_tensorflow

FAMILY = "xla"
INDEX_DTYPES = ("int32", "int64")


def _xla_data_pb2():
  try:
    from tensorflow.compiler.xla import xla_data_pb2
  except ImportError:  # newer TF layouts
    from local_xla.xla import xla_data_pb2
  return xla_data_pb2


def _parse(message: str, value):
  proto = getattr(_xla_data_pb2(), message)()
  if isinstance(value, str):  # the graph decoder turns valid UTF-8 into str
    value = value.encode("utf-8")
  proto.ParseFromString(bytes(value))
  return proto


def _is_parsed(value) -> bool:
  return isinstance(value, tuple)


def dot_dimension_numbers(value) -> tuple:
  """``DotDimensionNumbers`` -> ``((lhs_contracting, rhs_contracting), (lhs_batch,
  rhs_batch))``, ``lax.dot_general``'s form."""
  if _is_parsed(value):
    return value
  p = _parse("DotDimensionNumbers", value)
  return (
    (tuple(p.lhs_contracting_dimensions), tuple(p.rhs_contracting_dimensions)),
    (tuple(p.lhs_batch_dimensions), tuple(p.rhs_batch_dimensions)),
  )


def conv_dimension_numbers(value) -> tuple:
  """``ConvolutionDimensionNumbers`` -> ``(lhs_spec, rhs_spec, out_spec)``, the
  fields of ``lax.ConvDimensionNumbers``: (batch, feature, *spatial) for the input
  and output, (output feature, input feature, *spatial) for the kernel."""
  if _is_parsed(value):
    return value
  p = _parse("ConvolutionDimensionNumbers", value)
  return (
    (p.input_batch_dimension, p.input_feature_dimension, *p.input_spatial_dimensions),
    (
      p.kernel_output_feature_dimension,
      p.kernel_input_feature_dimension,
      *p.kernel_spatial_dimensions,
    ),
    (p.output_batch_dimension, p.output_feature_dimension, *p.output_spatial_dimensions),
  )


def gather_dimension_numbers(value) -> tuple:
  """``GatherDimensionNumbers`` -> ``(offset_dims, collapsed_slice_dims,
  start_index_map, operand_batching_dims, start_indices_batching_dims,
  index_vector_dim)``."""
  if _is_parsed(value):
    return value
  p = _parse("GatherDimensionNumbers", value)
  return (
    tuple(p.offset_dims),
    tuple(p.collapsed_slice_dims),
    tuple(p.start_index_map),
    tuple(p.operand_batching_dims),
    tuple(p.start_indices_batching_dims),
    int(p.index_vector_dim),
  )


def scatter_dimension_numbers(value) -> tuple:
  """``ScatterDimensionNumbers`` -> ``(update_window_dims, inserted_window_dims,
  scatter_dims_to_operand_dims, input_batching_dims, scatter_indices_batching_dims,
  index_vector_dim)``."""
  if _is_parsed(value):
    return value
  p = _parse("ScatterDimensionNumbers", value)
  return (
    tuple(p.update_window_dims),
    tuple(p.inserted_window_dims),
    tuple(p.scatter_dims_to_operand_dims),
    tuple(p.input_batching_dims),
    tuple(p.scatter_indices_batching_dims),
    int(p.index_vector_dim),
  )


_PRECISIONS = ("DEFAULT", "HIGH", "HIGHEST")


def precision_config(value) -> tuple:
  """``PrecisionConfig`` -> the operand precisions by name (``("DEFAULT",
  "HIGHEST")``; ``()`` when unset). The ``algorithm`` field is not kept (see
  docs/semantics/xla.md)."""
  if _is_parsed(value):
    return value
  p = _parse("PrecisionConfig", value)
  return tuple(_PRECISIONS[v] if v < len(_PRECISIONS) else "DEFAULT" for v in p.operand_precision)


def lax_precision(precision: tuple):
  """The ``precision=`` argument of lax.dot_general/conv_general_dilated."""
  from jax import lax

  if not precision:
    return None
  ps = tuple(getattr(lax.Precision, p) for p in precision)
  return ps if len(ps) == 2 else ps[0]


# --- protos for specs and tests ------------------------------------------------------


def serialize(message: str, **fields) -> bytes:
  """A serialized ``xla_data_pb2.<message>`` (spec draws and tests)."""
  proto = getattr(_xla_data_pb2(), message)()
  for k, v in fields.items():
    if isinstance(v, (list, tuple)):
      getattr(proto, k).extend(v)
    else:
      setattr(proto, k, v)
  return proto.SerializeToString()


# --- the oracle ----------------------------------------------------------------------


@functools.lru_cache(maxsize=None)
def _jitted(op_type: str, static_items: tuple, names: tuple):
  tf = import_tensorflow()
  from tensorflow.compiler.tf2xla.ops import gen_xla_ops

  raw = getattr(tf.raw_ops, op_type, None)
  if raw is None:
    snake = re.sub(r"(?<!^)(?=[A-Z])", "_", op_type).lower()  # XlaDotV2 -> xla_dot_v2
    raw = getattr(gen_xla_ops, snake)
  static = {k: _unfreeze(v) for k, v in static_items}

  def fn(*tensors):
    return raw(**static, **dict(zip(names, tensors)))

  return tf.function(fn, jit_compile=True, autograph=False)


def _freeze(v: Any):
  if isinstance(v, np.ndarray):
    return ("__array__", v.dtype.str, v.shape, v.tobytes())
  if isinstance(v, list):
    return ("__list__", tuple(_freeze(x) for x in v))
  return v


def _unfreeze(v: Any):
  if isinstance(v, tuple) and v and v[0] == "__array__":
    return np.frombuffer(v[3], dtype=np.dtype(v[1])).reshape(v[2])
  if isinstance(v, tuple) and v and v[0] == "__list__":
    return [_unfreeze(x) for x in v[1]]
  return v


def jit_oracle(op_type: str, tensor_args: tuple):
  """The oracle of an Xla* op: ``tf.raw_ops.<op_type>`` (or ``gen_xla_ops``) under
  ``tf.function(jit_compile=True)``. ``tensor_args`` are the TF inputs passed as
  tensors; the others (compile-time constant inputs such as window strides, and
  attrs) are baked into the traced function, as XLA needs them constant."""

  def oracle(**kwargs):
    static, tensors = [], []
    for k, v in sorted(kwargs.items()):
      if k in tensor_args:
        continue
      if hasattr(v, "numpy"):
        v = v.numpy()
      static.append((k, _freeze(v)))
    names = tuple(k for k in tensor_args if k in kwargs)
    tensors = [kwargs[k] for k in names]
    tf = import_tensorflow()
    try:
      return _jitted(op_type, tuple(static), names)(*tensors)
    except (TypeError, ValueError) as e:  # refused while tracing (a dtype the op lacks)
      raise tf.errors.InvalidArgumentError(None, None, str(e)) from None

  oracle.__name__ = f"tf_{op_type}"
  oracle.__qualname__ = oracle.__name__
  return oracle


# --- function attrs: XLA computations ---------------------------------------------------

#: The binary computations recognised in reducer/update/comparator functions, by the
#: TF op their single node runs.
SIMPLE_COMPUTATIONS = {
  "Add": "add",
  "AddV2": "add",
  "Mul": "mul",
  "Maximum": "max",
  "Minimum": "min",
  "LogicalAnd": "and",
  "LogicalOr": "or",
}


def classify_computation(ctx, fname: str):
  """What a two-argument library function computes, when it is one simple binary op
  of its arguments (``"add"``, ``"max"``...), the second argument itself
  (``"replace"``, a scatter's assignment), or None (any other computation)."""
  graph = ctx.library.graph(fname)
  if len(graph.inputs) != 2 or len(graph.outputs) != 1:
    return None
  by_name = graph.by_name

  def through_identity(ref):
    node = by_name.get(ref[0])
    while node is not None and node.op in ("Identity", "IdentityN") and node.inputs:
      ref = node.inputs[ref[1]] if node.op == "IdentityN" else node.inputs[0]
      node = by_name.get(ref[0])
    return ref

  ref = through_identity(graph.outputs[0])
  args = [(name, 0) for name in graph.inputs]
  if ref == args[1]:
    return "replace"
  node = by_name.get(ref[0])
  if node is None or node.op not in SIMPLE_COMPUTATIONS or len(node.inputs) != 2:
    return None
  operands = [through_identity(r) for r in node.inputs]
  if sorted(operands) != sorted(args):
    return None
  return SIMPLE_COMPUTATIONS[node.op]


@functools.lru_cache(maxsize=None)
def tf_computation(kind: str, dtype_name: str):
  """A TF concrete function computing ``kind`` on two scalars of ``dtype_name``: the
  function attr of an oracle call drawn with a simple computation."""
  tf = import_tensorflow()
  fns = {
    "add": tf.add,
    "mul": tf.multiply,
    "max": tf.maximum,
    "min": tf.minimum,
    "and": tf.logical_and,
    "or": tf.logical_or,
    "replace": lambda a, b: b,
  }
  fn = fns[kind]
  spec = tf.TensorSpec([], tf.as_dtype(dtype_name))
  return tf.function(lambda a, b: fn(a, b), autograph=False).get_concrete_function(spec, spec)


def with_computations(oracle, functions: dict):
  """An oracle whose drawn computation names (``update_computation="add"``) become
  TF functions of the dtype of the input named in ``functions[attr]``."""

  def wrapped(**kwargs):
    for attr, arg in functions.items():
      if isinstance(kwargs.get(attr), str):
        dtype = kwargs[arg].dtype
        name = dtype.name if hasattr(dtype, "name") else np.dtype(dtype).name
        kwargs[attr] = tf_computation(kwargs[attr], name)
    return oracle(**kwargs)

  wrapped.__name__ = wrapped.__qualname__ = oracle.__name__
  return wrapped


class Computation:
  """A library function converted to a closed jaxpr (``jax.make_jaxpr`` of the
  function's conversion on scalars): the body of a reduce or reduce-window whose
  function is not a simple binary op, kept as a primitive param. Params compare by
  identity; jaxprs show the function's name."""

  __slots__ = ("name", "jaxpr", "__weakref__")  # jax caches by weak reference

  def __init__(self, name: str, jaxpr):
    self.name, self.jaxpr = name, jaxpr

  def __call__(self, *args):
    from jax.extend.core import jaxpr_as_fun

    return jaxpr_as_fun(self.jaxpr)(*args)

  def __repr__(self):
    return f"<function {self.name}>"


def convert_computation(ctx, node, fname: str, dtypes_) -> Computation:
  """``fname`` from the graph's library, converted on scalars of ``dtypes_``."""
  import jax

  avals = [jax.ShapeDtypeStruct((), d) for d in dtypes_]
  closed = jax.make_jaxpr(lambda *a: list(ctx.call(fname, list(a), node)))(*avals)
  return Computation(fname, closed)


def python_computation(name: str, fn, dtypes_) -> Computation:
  """A Python function as a :class:`Computation` (specs draw these by name)."""
  import jax

  avals = [jax.ShapeDtypeStruct((), d) for d in dtypes_]
  return Computation(name, jax.make_jaxpr(lambda *a: list(fn(*a)))(*avals))
