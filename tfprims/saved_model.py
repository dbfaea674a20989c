"""SavedModels: convert functions of ``tf.saved_model.load`` without the author's code.

    fn, params = tfprims.load_saved_model(path)                  # serving_default
    outputs, new_params = fn(params, x=batch)                    # signature inputs by name

    restored = tf.saved_model.load(path)
    fn, params = tfprims.convert_from_restored(restored.f)       # a restored tf.function
    fn, params = tfprims.convert_from_restored(restored.f, tf.TensorSpec([None, 8]))

A restored ``tf.function`` holds one concrete function per input signature it
was traced with; with several, pass example args/specs to pick one (the error
lists them). TF1 SavedModels (``tf.compat.v1.saved_model.Builder``, TF1 hub
modules) load through the same path; their reference variables (``VariableV2``
nodes inside the graph) become params keyed by the node name.
"""

from __future__ import annotations

import inspect
import os
from typing import Optional, Sequence

from tfprims import api, core, dtypes, errors
from tfprims.errors import import_tensorflow

__all__ = [
  "convert_from_restored",
  "convert_functional_from_restored",
  "load_saved_model",
  "AmbiguousSignatureError",
  "concrete_functions",
]


class AmbiguousSignatureError(errors.ConversionError):
  """A restored function has several concrete functions and none was chosen."""

  def __init__(self, name: str, signatures: Sequence[str]):
    self.signatures = tuple(signatures)
    super().__init__(
      f"restored function {name!r} has {len(signatures)} concrete functions (Found "
      f"{len(signatures)} concrete functions, as tf2jax says); pass "
      "example args or tf.TensorSpecs to pick one, e.g. "
      "tfprims.convert_from_restored(restored.f, tf.TensorSpec([None, 4], tf.float32)). "
      "Available input signatures:\n  " + "\n  ".join(signatures)
    )


def _is_concrete(fn) -> bool:
  return hasattr(fn, "structured_input_signature") and hasattr(fn, "graph")


def concrete_functions(restored_fn) -> list:
  """The concrete functions a restored ``tf.function`` holds (one per traced signature)."""
  if _is_concrete(restored_fn):
    return [restored_fn]
  cfs = getattr(restored_fn, "concrete_functions", None)
  if cfs is None:
    cfs = restored_fn._list_all_concrete_functions_for_serialization()
  return list(cfs)


def _describe_signature(cf) -> str:
  args, kwargs = cf.structured_input_signature

  def spec(s):
    if hasattr(s, "shape") and hasattr(s, "dtype"):
      shape = (
        "?"
        if s.shape.rank is None
        else "[" + ", ".join("None" if d is None else str(d) for d in s.shape.as_list()) + "]"
      )
      return f"{s.dtype.name}{shape}"
    return repr(s)

  import tree

  parts = [str(tree.map_structure(spec, a)) for a in args]
  parts += [f"{k}={tree.map_structure(spec, v)}" for k, v in sorted(kwargs.items())]
  return "(" + ", ".join(parts) + ")"


def _check_alive(cf) -> None:
  try:
    _ = cf.variables  # raises where the restored object was deleted
  except AssertionError as e:
    if "deleted" not in str(e):
      raise
    raise errors.ConversionError(
      "the restored function's variables were deleted: the object returned by "
      "tf.saved_model.load was garbage-collected. Keep a reference to it while "
      "converting: restored = tf.saved_model.load(path); "
      "tfprims.convert_from_restored(restored.f)"
    ) from None


def _describe_args(args, kwargs) -> str:
  tf = import_tensorflow()

  def one(a):
    if isinstance(a, tf.TensorSpec) or hasattr(a, "shape") and hasattr(a, "dtype"):
      shape = list(a.shape) if not isinstance(a, tf.TensorSpec) else a.shape.as_list()
      dtype = a.dtype.name if hasattr(a.dtype, "name") else str(a.dtype)
      return f"{dtype}{shape}"
    return repr(a)

  return ", ".join([one(a) for a in args] + [f"{k}={one(v)}" for k, v in kwargs.items()])


def _pick(restored_fn, args, kwargs):
  if _is_concrete(restored_fn):
    if args or kwargs:
      raise TypeError("a ConcreteFunction has one signature: pass no example args")
    return restored_fn
  if not hasattr(restored_fn, "get_concrete_function") and not hasattr(
    restored_fn, "concrete_functions"
  ):
    raise TypeError(
      f"expected a restored tf.function or ConcreteFunction (an attribute "
      f"of tf.saved_model.load's result); got {type(restored_fn).__name__}"
    )
  name = getattr(restored_fn, "__name__", None) or getattr(restored_fn, "name", "function")
  if args or kwargs:
    try:
      return restored_fn.get_concrete_function(*args, **kwargs)
    except (ValueError, TypeError):
      cfs = concrete_functions(restored_fn)
      raise errors.ConversionError(
        f"restored function {name!r} has no concrete function for these args "
        f"({_describe_args(args, kwargs)}). "
        "Available input signatures:\n  " + "\n  ".join(_describe_signature(c) for c in cfs)
      ) from None
  cfs = concrete_functions(restored_fn)
  if not cfs:
    raise errors.ConversionError(
      f"restored function {name!r} has no concrete functions (it was never traced before saving)"
    )
  if len(cfs) > 1:
    raise AmbiguousSignatureError(name, sorted(_describe_signature(c) for c in cfs))
  return cfs[0]


def _keyword_only_inputs(fn, cf) -> None:
  """Signature functions take their inputs by name only. TF1 signatures report
  positional-or-keyword parameters while their input structure is all keywords:
  make the Python signature say what the structure does."""
  args, kwargs = cf.structured_input_signature
  if not args and kwargs:
    fn.signature = inspect.Signature(
      [inspect.Parameter(k, inspect.Parameter.KEYWORD_ONLY) for k in kwargs]
    )


def convert_from_restored(restored_fn, *args, **kwargs) -> tuple[api.ConvertedFunction, dict]:
  """Converts a function of a loaded SavedModel: ``(jax_fn, params)`` as :func:`tfprims.convert`.

  Args:
    restored_fn: ``restored.f`` (a restored ``tf.function``), a signature
      (``restored.signatures["serving_default"]``) or any ConcreteFunction.
    *args, **kwargs: example inputs or ``tf.TensorSpec``s choosing among the
      restored function's concrete functions (needed when it has several).
  """
  cf = _pick(restored_fn, args, kwargs)
  _check_alive(cf)
  fn, params = api.from_concrete_function(cf)
  _keyword_only_inputs(fn, cf)
  params.update(_read_graph_variables(fn, cf, allow=True))
  fn.restored_function = restored_fn  # keeps the restored object's variables alive
  return fn, params


def convert_functional_from_restored(restored_fn, *args, **kwargs):
  """As :func:`tfprims.convert_functional` for a function of a loaded SavedModel;
  refuses functions that use variables."""
  cf = _pick(restored_fn, args, kwargs)
  _check_alive(cf)
  fn, _ = api.from_concrete_function(cf, allow_variables=False)
  _keyword_only_inputs(fn, cf)
  _read_graph_variables(fn, cf, allow=False)
  return api._Functional(fn)


def load_saved_model(
  path: str, signature: Optional[str] = "serving_default", *, tags=None
) -> tuple[api.ConvertedFunction, dict]:
  """Loads the SavedModel at ``path`` and converts one of its signatures.

  No Python code of the model's author is needed. Signature functions take
  their inputs by name: ``outputs, new_params = fn(params, x=batch)``; outputs
  are the signature's dict.

  Args:
    path: a SavedModel directory (TF2, Keras ``model.export``, or TF1
      ``SavedModelBuilder`` / hub format).
    signature: the signature key; ``None`` picks the only one there is.
    tags: MetaGraph tags for TF1 SavedModels with several MetaGraphs.
  """
  tf = import_tensorflow()
  if not os.path.isdir(path):
    raise errors.ConversionError(f"no SavedModel directory at {path!r}")
  try:
    restored = tf.saved_model.load(path, tags=tags)
  except Exception as e:  # missing, truncated or corrupt files: TF raises many kinds
    raise errors.ConversionError(
      f"cannot load the SavedModel at {path!r}: {type(e).__name__}: "
      f"{str(e).splitlines()[0] if str(e) else ''}"
    ) from e
  signatures = dict(getattr(restored, "signatures", {}) or {})
  if signature is None:
    if len(signatures) != 1:
      raise errors.ConversionError(
        f"the SavedModel has {len(signatures)} signatures ({sorted(signatures)}); "
        "pass signature=<one of them>"
      )
    signature = next(iter(signatures))
  if signature not in signatures:
    functions = sorted(
      k
      for k in dir(restored)
      if not k.startswith("_") and hasattr(getattr(restored, k, None), "concrete_functions")
    )
    hint = (
      f"; restored tf.functions ({functions}) can be converted with "
      "tfprims.convert_from_restored(tf.saved_model.load(path).<name>)"
      if functions
      else ""
    )
    raise errors.ConversionError(
      f"the SavedModel at {path!r} has no signature {signature!r}; available: "
      f"{sorted(signatures)}{hint}"
    )
  fn, params = convert_from_restored(signatures[signature])
  fn.saved_model = restored
  fn.__name__ = signature
  return fn, params


# --- variables created inside the graph (TF1 reference variables) -------------------


def _graph_variable_nodes(fn) -> list:
  graph = fn._graph
  library = fn._library
  nodes = [n for n in graph.nodes if core.declares(n.op, "creates_variable")]
  for g in library.reachable(graph).values():
    inner = [n.name for n in g.nodes if core.declares(n.op, "creates_variable")]
    if inner:
      raise errors.UnsupportedInputError(
        f"variables created inside library function {g.name!r} ({inner}) are not supported"
      )
  return nodes


def _read_graph_variables(fn, cf, *, allow: bool) -> dict:
  """Params for variables created inside the graph (TF1 SavedModels): read their
  current values by running a pruned copy of the loaded function's graph."""
  nodes = _graph_variable_nodes(fn)
  if not nodes:
    return {}
  if not allow:
    raise errors.ConversionError(
      f"the function uses variables {[n.name for n in nodes]}; convert_functional "
      "needs a stateless function: use tfprims.convert_from_restored, which returns "
      "the variables as params"
    )
  tf = import_tensorflow()
  if not hasattr(cf, "prune"):
    raise errors.UnsupportedInputError(
      f"the graph creates variables {[n.name for n in nodes]} inside it; tfprims reads "
      "their values only for functions of TF1 SavedModels loaded with "
      "tf.saved_model.load"
    )
  g = cf.graph
  fetches = []
  with g.as_default():
    for node in nodes:
      tensor = g.get_tensor_by_name(node.name + ":0")
      if node.op == "VarHandleOp":
        fetches.append(tf.raw_ops.ReadVariableOp(resource=tensor, dtype=node.attr("dtype")))
      else:
        fetches.append(tf.identity(tensor))
  values = cf.prune(feeds=[], fetches=fetches)()
  trainable = {v.op.name for v in g.get_collection("trainable_variables") if hasattr(v, "op")}
  params = {}
  for node, value in zip(nodes, values):
    value = dtypes.value_from_tf(value)
    np_dtype = dtypes.from_tf(node.attr("dtype"))
    fn.param_specs[node.name] = api.TensorSpec(
      node.name, tuple(value.shape), np_dtype, trainable=node.name in trainable
    )
    params[node.name] = value
  return params
