"""TF1 entry points: frozen graph files and ``tf.compat.v1.Session`` graphs.

    fn = tfprims.load_frozen_graph("model.pb", inputs=["x:0"], outputs=["probs:0"])
    probs, = fn(x)                                    # binary or text GraphDef

    fn, params = tfprims.convert_session(sess, inputs=["x:0", "y:0"],
                                         outputs=["loss:0"], targets=["train"])
    (loss,), new_params = fn(params, x, y)            # variables after the step

A session graph's variables (``VariableV2`` reference variables and
``VarHandleOp`` resource variables the fetched tensors and targets need) become
params keyed by node name, read from the session; ops that write them (``Assign``,
``ApplyGradientDescent``...) leave their values in ``new_params``. ``targets``
are ops run for their effect (``sess.run``'s fetched ops: a train op), ordered
as TF's control dependencies order them (docs/semantics/state.md).

Lookup tables the graph creates (``HashTableV2``...) become the params
``<table>/keys`` and ``<table>/values`` (:mod:`tfprims.ops.lookup_graph`): a
Session's exported by running it, a frozen graph's read from its initializer
(constants, or a file of numbers) and kept as constants (docs/semantics/lookup.md).
"""

from __future__ import annotations

import os
from typing import Any, Mapping, Sequence

import jax.numpy as jnp
import numpy as np

from tfprims import api, config, core, dtypes, errors, graph as graph_lib, interpreter, pipeline
from tfprims.errors import import_tensorflow

__all__ = ["GraphFunction", "convert_session", "load_frozen_graph", "read_graph_def"]


def read_graph_def(path: str):
  """A GraphDef from a frozen-graph file, binary (``.pb``) or text (``.pbtxt``): the
  text form is tried when the extension says so or the binary parse fails."""
  errors.import_tensorflow()
  from google.protobuf import message, text_format
  from tensorflow.core.framework import graph_pb2

  if not os.path.isfile(path):
    raise errors.ConversionError(f"no GraphDef file at {path!r}")
  with open(path, "rb") as f:
    data = f.read()
  graph_def = graph_pb2.GraphDef()
  text_first = path.endswith((".pbtxt", ".txt", ".prototxt"))
  parsers = [
    ("text", lambda: text_format.Parse(data.decode("utf-8"), graph_def)),
    ("binary", lambda: graph_def.ParseFromString(data)),
  ]
  problems = []
  for kind, parse in parsers if text_first else parsers[::-1]:
    graph_def.Clear()
    try:
      parse()
      if graph_def.node:
        return graph_def
      problems.append(f"{kind}: no nodes")
    except (message.DecodeError, text_format.ParseError, UnicodeDecodeError) as e:
      problems.append(f"{kind}: {str(e).splitlines()[0] if str(e) else type(e).__name__}")
  raise errors.ConversionError(f"{path!r} is not a GraphDef file ({'; '.join(problems)})")


def load_frozen_graph(path: str, inputs: Sequence[str], outputs: Sequence[str]):
  """Converts a frozen GraphDef file: ``fn(*inputs) -> list of outputs``, as
  :func:`tfprims.convert_graph_def` (inputs: the Placeholder tensors fed, in call
  order; outputs: the tensors returned, ``"name:0"`` or ``"name"``)."""
  graph_def = read_graph_def(path)
  fn = api.convert_graph_def(graph_def, list(inputs), list(outputs))
  fn.graph_def = graph_def
  return fn


class GraphFunction:
  """A converted TF1 graph with variables: ``fn(params, *inputs) -> (outputs, new_params)``
  (outputs a list in the order asked for). ``input_specs``, ``output_specs``,
  ``param_specs`` (by variable node name) as :class:`tfprims.ConvertedFunction`'s."""

  def __init__(
    self,
    graph,
    library,
    input_specs,
    output_specs,
    param_specs,
    options,
    name="graph",
    constants: "pipeline.Prepared | None" = None,
  ):
    self._graph, self._library = graph, library
    self.input_specs, self.output_specs = tuple(input_specs), tuple(output_specs)
    self.structured_outputs = list(self.output_specs)
    self.param_specs = dict(param_specs)
    self.options = options
    self.__name__ = name
    self._constants = constants  # a frozen graph's lookup tables (a Prepared)

  def __repr__(self):
    ins = ", ".join(str(s) for s in self.input_specs)
    return f"<tfprims.GraphFunction {self.__name__}({ins}) with {len(self.param_specs)} params>"

  @property
  def fn(self):
    return self

  @interpreter.gc_paused()
  def __call__(self, params: Mapping[str, Any], *args, rng=None):
    if len(args) != len(self.input_specs):
      raise errors.InputStructureError(
        f"expected {len(self.input_specs)} inputs "
        f"({', '.join(s.name for s in self.input_specs)}), got {len(args)}"
      )
    state = api.check_params(self.param_specs, params, owner="graph")
    if self._constants is not None:
      state = {**self._constants.table_constants(), **state}
    values = [api.validate_value(s, a, "input") for s, a in zip(self.input_specs, args)]
    ctx = interpreter.Context(self._library, state, rng=rng, options=self.options)
    outs = interpreter.run(ctx, self._graph, dict(zip(self._graph.inputs, values)))
    return [jnp.asarray(o) for o in outs], api.params_out(ctx.state, self.param_specs)


def _tensor_spec(name, tensor) -> api.TensorSpec:
  shape = None if tensor.shape.rank is None else tuple(tensor.shape.as_list())
  return api.TensorSpec(name, shape, dtypes.from_tf(tensor.dtype.base_dtype))


def convert_session(
  sess, inputs: Sequence[str], outputs: Sequence[str], targets: Sequence[str] = ()
) -> tuple[GraphFunction, dict]:
  """Converts what ``sess.run(outputs + targets, feed_dict={inputs...})`` computes.

  Returns ``(fn, params)``: ``fn(params, *inputs) -> (outputs, new_params)``, params
  the session's current values of the variables the run needs (by node name).

  Args:
    sess: a ``tf.compat.v1.Session`` with its variables initialized.
    inputs: the tensors fed (Placeholders), in call order (``"x:0"`` or ``"x"``).
    outputs: the tensors returned.
    targets: ops run for their effect (a train op, an update op).
  """
  tf = import_tensorflow()
  tf_graph = sess.graph
  graph_def = tf_graph.as_graph_def()
  options = config.read_at_conversion()

  def export_table(node):
    """A table's contents now, exported by running the session (None where TF cannot:
    an uninitialized table, a finalized graph)."""
    try:
      with tf_graph.as_default():
        keys, values = tf.raw_ops.LookupTableExportV2(
          table_handle=tf_graph.get_tensor_by_name(node.name + ":0"),
          Tkeys=tf.as_dtype(node.attr("key_dtype")),
          Tvalues=tf.as_dtype(node.attr("value_dtype")),
        )
      return sess.run([keys, values])
    except (RuntimeError, tf.errors.OpError):
      return None

  prepared = pipeline.prepare(
    graph_def,
    inputs,
    outputs,
    options=options,
    name="session",
    control_outputs=[graph_lib.parse_ref(t)[0] for t in targets],
    export_table=export_table,
  )
  graph, library, specs = prepared.graph, prepared.library, list(prepared.input_specs)
  variables = [
    n for n in graph.nodes if n.name in graph.needed and core.declares(n.op, "creates_variable")
  ]
  fetches = []
  for node in variables:
    tensor = tf_graph.get_tensor_by_name(node.name + ":0")
    if node.op == "VarHandleOp":
      # The read every TF1 resource variable has; else a new one (not in a finalized graph).
      try:
        tensor = tf_graph.get_tensor_by_name(node.name + "/Read/ReadVariableOp:0")
      except KeyError:
        with tf_graph.as_default():
          tensor = tf.raw_ops.ReadVariableOp(resource=tensor, dtype=node.attr("dtype"))
    fetches.append(tensor)
  values = sess.run(fetches)
  # A graph imported from a GraphDef has no collections: trainability unknown (None).
  listed = tf_graph.get_collection("trainable_variables")
  trainable = {v.op.name for v in listed}
  params, param_specs = {}, {}
  for node, value in zip(variables, values):
    # sess.run gives numpy values (numpy scalars for scalars); bfloat16 & co. included
    value = np.array(value, dtypes.from_tf(node.attr("dtype")))
    params[node.name] = value
    param_specs[node.name] = api.TensorSpec(
      node.name,
      tuple(value.shape),
      dtypes.from_tf(node.attr("dtype")),
      trainable=node.name in trainable if listed else None,
    )
  # the session's lookup tables: params '<table node>/keys' and '/values'
  params.update(prepared.tables)
  param_specs.update((s.name, s) for s in prepared.table_specs())
  output_specs = [_tensor_spec(o, tf_graph.get_tensor_by_name(tensor_name(o))) for o in outputs]
  fn = GraphFunction(graph, library, specs, output_specs, param_specs, options, name="session")
  return fn, params


def tensor_name(ref: str) -> str:
  """``name:index`` for ``name`` or ``name:index``."""
  name, idx = graph_lib.parse_ref(ref)
  return f"{name}:{idx}"


def output_specs_of(graph_def, outputs: Sequence[str]) -> list:
  """The shapes and dtypes TF infers for ``outputs`` of a GraphDef."""
  tf = import_tensorflow()
  g = tf.Graph()
  with g.as_default():
    tf.compat.v1.import_graph_def(graph_def, name="")
  return [_tensor_spec(o, g.get_tensor_by_name(tensor_name(o))) for o in outputs]


def convert_frozen(
  graph_def, inputs: Sequence[str], outputs: Sequence[str], name: str = "graph"
) -> GraphFunction:
  """A frozen GraphDef as a :class:`GraphFunction` without params (what ``tfprims
  inspect`` runs)."""
  options = config.read_at_conversion()
  prepared = pipeline.prepare(graph_def, inputs, outputs, options=options, name=name)
  return GraphFunction(
    prepared.graph,
    prepared.library,
    list(prepared.input_specs),
    output_specs_of(graph_def, outputs),
    {},
    options,
    name=name,
    constants=prepared,
  )
