"""What a comparison runs: a converted graph, and the values each side feeds it.

Both sides read the same inputs (the caller's, validated and canonicalized as a
converted function's call does) and the same variables: tfprims reads its params,
TF reads copies of the TF variables made for the comparison, so whatever the graph
assigns leaves the caller's variables as they were.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Mapping, Optional, Sequence

import numpy as np

from tfprims import api, config, core, errors, graph as graph_lib, interpreter, pipeline
from tfprims.errors import import_tensorflow


@dataclasses.dataclass
class Program:
  """A converted graph and its feeds (graph input name -> value) on both sides.

  ``state``: tfprims' params as a call checks them; ``user_inputs``: the graph inputs
  the caller gave; ``graph_variables``: TF's value of each variable the graph creates
  itself (TF1 graphs); ``keep_alive``: TF objects the TF side reads through handles.
  """

  title: str
  graph: graph_lib.Graph
  library: graph_lib.Library
  options: Optional[dict]
  state: dict
  ours_feeds: dict
  tf_feeds: dict
  user_inputs: tuple
  graph_variables: dict = dataclasses.field(default_factory=dict)
  keep_alive: tuple = ()


def from_function(fn, args: tuple, kwargs: dict, title: Optional[str] = None) -> Program:
  """A program for anything :func:`tfprims.convert` takes, called on ``args``/``kwargs``."""
  from tfprims import saved_model

  cf = api.concrete_function(fn, args, kwargs)
  converted, params = saved_model.convert_from_restored(cf)
  return from_converted(
    converted, params, cf, args, kwargs, title or f"function {converted.__name__}"
  )


def from_converted(
  converted: api.ConvertedFunction,
  params: Mapping[str, Any],
  cf,
  args: tuple,
  kwargs: dict,
  title: str,
) -> Program:
  """A program for ``converted`` (of ConcreteFunction ``cf``) called on ``args``/``kwargs``."""
  tf = import_tensorflow()
  flat = converted._flatten_args(args, kwargs)
  input_nodes = converted._input_nodes
  captures = converted._captures
  ours = dict(zip(input_nodes, flat))
  theirs = {
    name: tf.constant(np.asarray(value), dtype=placeholder.dtype)
    for name, value, placeholder in zip(input_nodes, flat, cf.inputs)
  }
  # TF runs on copies of the variables where the graph assigns any, so that comparing
  # leaves the caller's variables as they were.
  writes = _writes_state(converted._graph, converted._library)
  copies = {
    key: tf.Variable(variable, trainable=False) if writes else variable
    for key, variable in converted.tf_variables.items()
  }
  n_args = len(cf.inputs) - len(cf.captured_inputs)
  for placeholder, captured in zip(cf.inputs[n_args:], cf.captured_inputs):
    name = placeholder.op.name
    ours[name] = captures[name]
    handle = captures[name]
    theirs[name] = (
      copies[handle.key].handle if isinstance(handle, interpreter.VariableHandle) else captured
    )
  state = api.check_params(converted.param_specs, params)
  graph_variables, created = _graph_variables(converted._graph, params)
  return Program(
    title=title,
    graph=converted._graph,
    library=converted._library,
    options=converted.options,
    state=state,
    ours_feeds=ours,
    tf_feeds=theirs,
    user_inputs=tuple(input_nodes),
    graph_variables=graph_variables,
    keep_alive=(cf, converted, tuple(copies.values()), created),
  )


def _writes_state(graph, library) -> bool:
  return any(
    core.declares(node.op, "writes_state")
    for g in [graph, *library.reachable(graph).values()]
    for node in g.nodes
  )


def _graph_variables(graph, params) -> tuple[dict, tuple]:
  """TF's values for the variables a TF1 graph creates itself (tfprims reads them
  from params by node name): resource variables as handles of copies, reference
  variables as their values (read only: eager TF has no reference tensors)."""
  tf = import_tensorflow()
  values, created = {}, []
  for node in graph.nodes:
    if core.declares(node.op, "creates_variable") and node.name in params:
      if node.op == "VarHandleOp":
        created.append(tf.Variable(np.asarray(params[node.name]), trainable=False))
        values[node.name] = created[-1].handle
      else:
        values[node.name] = tf.constant(np.asarray(params[node.name]))
  return values, tuple(created)


def from_saved_model(
  path: str, inputs, signature: Optional[str], tags=None, seed: int = 0, unknown_dim: int = 2
) -> Program:
  """A program for a SavedModel signature, called on ``inputs`` (by name; None:
  example inputs made from the signature, see :func:`example_inputs`)."""
  from tfprims import saved_model

  converted, params = saved_model.load_saved_model(path, signature, tags=tags)
  cf = converted.restored_function
  if inputs is None:
    args, kwargs = example_inputs(cf, seed, unknown_dim)
  elif isinstance(inputs, Mapping):
    args, kwargs = (), dict(inputs)
  else:
    args, kwargs = tuple(inputs), {}
  program = from_converted(
    converted, params, cf, args, kwargs, f"SavedModel {path} (signature {converted.__name__!r})"
  )
  program.keep_alive += (converted.saved_model,)
  return program


def example_inputs(cf, seed: int = 0, unknown_dim: int = 2) -> tuple[tuple, dict]:
  """Deterministic inputs for a ConcreteFunction's signature: floats ~ N(0, 1),
  complex likewise, integers and booleans zero; unknown dims ``unknown_dim``."""
  import tree

  rng = np.random.default_rng(seed)
  sig_args, sig_kwargs = cf.structured_input_signature
  make = lambda spec: example_value(spec, rng, unknown_dim)
  return (
    tuple(tree.map_structure(make, tuple(sig_args))),
    dict(tree.map_structure(make, dict(sig_kwargs))),
  )


def example_value(spec, rng, unknown_dim: int):
  """A deterministic value for one ``tf.TensorSpec`` (see :func:`example_inputs`)."""
  tf = import_tensorflow()
  if not isinstance(spec, tf.TensorSpec):
    return spec
  shape = (
    (unknown_dim,)
    if spec.shape.rank is None
    else tuple(unknown_dim if d is None else d for d in spec.shape.as_list())
  )
  dtype = spec.dtype
  if dtype.is_floating:
    return rng.standard_normal(shape).astype(dtype.as_numpy_dtype)
  if dtype.is_complex:
    return (rng.standard_normal(shape) + 1j * rng.standard_normal(shape)).astype(
      dtype.as_numpy_dtype
    )
  if dtype.is_integer or dtype.is_bool:
    return np.zeros(shape, dtype.as_numpy_dtype)
  raise errors.UnsupportedInputError(
    f"input '{spec.name}' is a {dtype.name} tensor: tfprims compares numeric inputs "
    "only (pass inputs= for the others, or do string processing in TF first)"
  )


def from_graph_def(
  graph_def,
  inputs: Sequence[str],
  outputs: Sequence[str],
  values: Sequence[Any],
  title: str = "graph",
) -> Program:
  """A program for a (frozen) GraphDef fed ``values`` for its Placeholders ``inputs``.

  The preparation is :func:`tfprims.convert_graph_def`'s: TF1 control flow becomes
  If/While nodes, and the graph is checked before anything runs."""
  tf = import_tensorflow()
  options = config.read_at_conversion()
  prepared = pipeline.prepare(graph_def, list(inputs), list(outputs), options=options, name=title)
  graph, library = prepared.graph, prepared.library
  if len(values) != len(graph.inputs):
    raise errors.InputStructureError(
      f"expected {len(graph.inputs)} input values ({', '.join(graph.inputs)}), got {len(values)}"
    )
  ours, theirs = {}, {}
  for spec, value in zip(prepared.input_specs, values):
    ours[spec.name] = api.validate_value(spec, value, "input")
    theirs[spec.name] = tf.constant(np.asarray(ours[spec.name]), dtype=spec.dtype)
  return Program(
    title=title,
    graph=graph,
    library=library,
    options=options,
    state={},
    ours_feeds=ours,
    tf_feeds=theirs,
    user_inputs=tuple(graph.inputs),
  )


def node_count(program: Program) -> int:
  """Nodes the graph runs, each library function it reaches counted once (loop
  bodies run once per iteration: the progress count may pass it)."""
  reachable = program.library.reachable(program.graph)
  return len(program.graph.needed) + sum(len(g.nodes) for g in reachable.values())
