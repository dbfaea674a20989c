"""``tfprims inspect``: convert a model, print its header, op histogram and jaxpr, and
check it against TensorFlow on an example input (:mod:`tfprims.cli_check`)."""

from __future__ import annotations

import argparse
import collections
import dataclasses
import os
import textwrap
import time
from typing import Any, Callable, Optional, TextIO

import numpy as np

from tfprims import examples
from tfprims.cli_check import compare
from tfprims.cli_common import (
  EXIT_MISMATCH,
  EXIT_OK,
  GRAPH_DEF,
  KERAS,
  MODEL_KINDS,
  CLIError,
  frozen_graph_names,
  import_tensorflow,
  load_keras_model,
  positive_int,
  read_graph_def,
  source_kind,
)
from tfprims.cli_report import Report

DEFAULT_TOLERANCE = 1e-5
DEFAULT_MAX_EQUATIONS = 40


def example_listing() -> str:
  return "\n".join(
    textwrap.fill(
      ("[default] " if name == examples.DEFAULT else "") + examples.describe(name),
      width=79,
      initial_indent=f"  {name:<6}",
      subsequent_indent=" " * 8,
    )
    for name in examples.names()
  )


def add_parser(sub, parents) -> None:
  inspect = sub.add_parser(
    "inspect",
    formatter_class=argparse.RawDescriptionHelpFormatter,
    parents=parents,
    help="convert a model (SavedModel, frozen graph, Keras file) or an embedded example "
    "and show the result",
    description=(
      "Convert a TF function with tfprims and show: a header (model, inputs, outputs,\n"
      "params), the histogram of TF ops in the converted jaxpr, the jaxpr (its\n"
      "primitives are the TF ops: tf.Conv2D, tf.MatMul...) and the largest difference\n"
      "between the converted function's outputs and TensorFlow's on an example input.\n\n"
      "With no SRC, an embedded example model is used (built in code with Keras,\n"
      "deterministic weights, no download)."
    ),
    epilog=(
      f"examples (--example):\n{example_listing()}\n\n"
      "Inputs are built from the signature: floats ~ N(0, 1) (seeded), integers and\n"
      "booleans zero; unknown (None) dimensions get --unknown-dim.\n\n"
      "Each output matches when max|jax - tf| <= TOL * max|tf| (its own scale);\n"
      "integer and boolean outputs must be equal. TF also runs on a second random\n"
      "input: an output that (nearly) does not change is reported as a weak check.\n"
      "Exit status: 0 match, 1 mismatch, 2 error (unsupported op, bad model, ...)."
    ),
  )
  inspect.add_argument(
    "source",
    nargs="?",
    metavar="SRC",
    help=f"{MODEL_KINDS}; a frozen graph needs --inputs/--outputs",
  )
  inspect.add_argument(
    "--inputs", metavar="NAMES", help="a frozen graph's input tensors, comma-separated (x:0,y:0)"
  )
  inspect.add_argument(
    "--outputs", metavar="NAMES", help="a frozen graph's output tensors, comma-separated"
  )
  inspect.add_argument(
    "--example",
    choices=examples.names(),
    metavar="NAME",
    help=f"an embedded example model: {', '.join(examples.names())} "
    f"(default: {examples.DEFAULT} when no SRC)",
  )
  inspect.add_argument(
    "--signature",
    default="serving_default",
    metavar="NAME",
    help="the SavedModel signature to convert (default: %(default)s)",
  )
  inspect.add_argument("--full", action="store_true", help="print the whole jaxpr and every param")
  inspect.add_argument(
    "--max-equations",
    type=positive_int,
    default=DEFAULT_MAX_EQUATIONS,
    metavar="N",
    help="equations shown without --full (default: %(default)s)",
  )
  inspect.add_argument(
    "--tolerance",
    type=float,
    default=DEFAULT_TOLERANCE,
    metavar="TOL",
    help="relative tolerance of the comparison with TF, of each output's "
    "max|tf| (default: %(default)g)",
  )
  inspect.add_argument(
    "--unknown-dim",
    type=positive_int,
    default=2,
    metavar="N",
    help="size given to unknown (None) input dimensions (default: %(default)s)",
  )
  inspect.add_argument(
    "--seed", type=int, default=0, help="seed of the random example inputs (default: %(default)s)"
  )
  inspect.set_defaults(run=run)


@dataclasses.dataclass
class Target:
  """What to convert: a ConcreteFunction, how to call it in TF, example inputs."""

  title: str
  description: str
  concrete_fn: Any
  call_tf: Callable[..., Any]
  args: tuple = ()
  kwargs: dict = dataclasses.field(default_factory=dict)
  # Builds (args, kwargs) once the function is known to convert (SavedModels).
  make_inputs: Optional[Callable[[], tuple]] = None
  # How to convert it when not tfprims.convert(concrete_fn) (frozen graphs), and the
  # GraphDef whose ops the histogram counts.
  convert: Optional[Callable[[], tuple]] = None
  graph_def: Any = None
  unknown_dims: bool = False  # some input dim was None: the inputs use --unknown-dim


def run(args, out: TextIO) -> int:
  if args.source and args.example:
    raise CLIError("give either SRC or --example NAME, not both")
  tf = import_tensorflow()
  kind = source_kind(args.source) if args.source else None
  if (args.inputs or args.outputs) and kind != GRAPH_DEF:
    raise CLIError("--inputs/--outputs go with a frozen GraphDef file")
  if kind == GRAPH_DEF:
    target = frozen_graph_target(tf, args)
  elif kind == KERAS:
    target = keras_target(tf, args)
  elif kind is not None:
    target = saved_model_target(tf, args)
  else:
    target = example_target(tf, args.example or examples.DEFAULT)

  from tfprims import host_prefix

  if target.concrete_fn is not None and host_prefix.has_strings(target.concrete_fn):
    # JAX has no strings: report the split into a TF host prefix and a converted rest.
    print(f"tfprims inspect: {target.title} ({target.description})", file=out)
    print(host_prefix.format_summary(host_prefix.split_summary(target.concrete_fn)), file=out)
    return EXIT_OK

  import tfprims

  start = time.perf_counter()
  jax_fn, params = (
    target.convert() if target.convert is not None else tfprims.convert(target.concrete_fn)
  )
  convert_s = time.perf_counter() - start
  if target.make_inputs is not None:
    target.args, target.kwargs = target.make_inputs()

  report = Report(out, full=args.full, max_equations=args.max_equations)
  report.header(target, jax_fn, params, convert_s)

  closed = _make_jaxpr(jax_fn, params, target)
  report.histogram(closed, graph_op_counts(target.concrete_fn, target.graph_def))
  report.jaxpr(closed, _input_names(params, target, jax_fn))

  comparison = compare(jax_fn, params, target, args.tolerance, seed=args.seed)
  report.comparison(comparison)
  return EXIT_OK if comparison.ok else EXIT_MISMATCH


def example_target(tf, name: str) -> Target:
  del tf
  ex = examples.build(name)
  cf = ex.tf_fn.get_concrete_function(*ex.inputs)
  return Target(
    title=f"example '{name}'",
    description=ex.description,
    concrete_fn=cf,
    call_tf=ex.tf_fn,
    args=tuple(ex.inputs),
  )


def _spec_inputs(specs_args, specs_kwargs, seed: int, unknown_dim: int):
  """A ``make_inputs`` for a signature, and whether it has unknown dims."""
  import tree

  rng = np.random.default_rng(seed)
  from tfprims.comparison.programs import example_value

  make = lambda spec: example_value(spec, rng, unknown_dim)

  def make_inputs():
    return (
      tuple(tree.map_structure(make, tuple(specs_args))),
      dict(tree.map_structure(make, dict(specs_kwargs))),
    )

  leaves = tree.flatten((tuple(specs_args), dict(specs_kwargs)))
  unknown = any(
    getattr(s, "shape", None) is not None and (s.shape.rank is None or None in s.shape.as_list())
    for s in leaves
  )
  return make_inputs, unknown


def saved_model_target(tf, args) -> Target:
  path = args.source
  try:
    restored = tf.saved_model.load(path)
  except Exception as e:  # TF raises many kinds
    first = str(e).strip().splitlines()[0] if str(e).strip() else ""
    raise CLIError(f"cannot load the SavedModel {path!r}: {type(e).__name__}: {first}") from None
  signatures = dict(getattr(restored, "signatures", {}) or {})
  if not signatures:
    raise CLIError(
      f"the SavedModel {path!r} has no signatures; save it with "
      "tf.saved_model.save(obj, dir, signatures=...) or give the "
      "tf.function an input_signature"
    )
  if args.signature not in signatures:
    raise CLIError(
      f"the SavedModel {path!r} has no signature {args.signature!r}; "
      f"it has: {', '.join(sorted(signatures))} (use --signature NAME)"
    )
  sig = signatures[args.signature]
  sig_args, sig_kwargs = sig.structured_input_signature
  make_inputs, unknown = _spec_inputs(sig_args, sig_kwargs, args.seed, args.unknown_dim)
  # Keep the restored object alive: the signature's variables belong to it.
  call_tf = lambda *a, _keep=restored, **k: sig(*a, **k)
  return Target(
    title=f"SavedModel {path}",
    description=f"signature '{args.signature}'",
    concrete_fn=sig,
    call_tf=call_tf,
    make_inputs=make_inputs,
    unknown_dims=unknown,
  )


def keras_target(tf, args) -> Target:
  del tf
  from tfprims import keras_files

  path = args.source
  model = load_keras_model(path)
  tf_fn, specs = keras_files.model_function(model)
  cf = tf_fn.get_concrete_function()
  make_inputs, unknown = _spec_inputs((specs,), {}, args.seed, args.unknown_dim)
  return Target(
    title=f"Keras file {path}",
    description=f"model '{getattr(model, 'name', '?')}' "
    f"({type(model).__name__}), called with training=False",
    concrete_fn=cf,
    call_tf=tf_fn,
    make_inputs=make_inputs,
    unknown_dims=unknown,
  )


def frozen_graph_target(tf, args) -> Target:
  from tfprims import tf1

  path = args.source
  graph_def = read_graph_def(path)
  inputs, outputs = frozen_graph_names(args)
  graph = tf.Graph()
  with graph.as_default():
    tf.compat.v1.import_graph_def(graph_def, name="")
  try:
    feeds = [graph.get_tensor_by_name(tf1.tensor_name(i)) for i in inputs]
    fetches = [graph.get_tensor_by_name(tf1.tensor_name(o)) for o in outputs]
  except (KeyError, ValueError) as e:
    raise CLIError(f"{path!r}: {e}") from None
  session = tf.compat.v1.Session(graph=graph)
  specs = [tf.TensorSpec(t.shape, t.dtype) for t in feeds]
  make_inputs, unknown = _spec_inputs(specs, {}, args.seed, args.unknown_dim)

  def call_tf(*values):  # TF1 graph mode: a session runs the imported graph
    return session.run(fetches, dict(zip(feeds, values)))

  def convert():
    return tf1.convert_frozen(graph_def, inputs, outputs, name=os.path.basename(path)), {}

  return Target(
    title=f"frozen graph {path}",
    description=f"inputs {', '.join(inputs)}; outputs {', '.join(outputs)}",
    concrete_fn=None,
    call_tf=call_tf,
    make_inputs=make_inputs,
    convert=convert,
    graph_def=graph_def,
    unknown_dims=unknown,
  )


def _call_converted(jax_fn):
  def fn(params, args, kwargs):
    return jax_fn(params, *args, **kwargs)[0]

  return fn


def _make_jaxpr(jax_fn, params, target: Target):
  import jax

  return jax.make_jaxpr(_call_converted(jax_fn))(params, target.args, target.kwargs)


def _input_names(params, target: Target, jax_fn) -> list:
  """Names of the jaxpr's inputs in order: ``param <name>`` / ``input <name>``
  (the jaxpr takes the params, sorted by name, then the flat inputs)."""
  import jax

  n_inputs = len(jax.tree_util.tree_leaves((target.args, target.kwargs)))
  input_names = [s.name for s in jax_fn.input_specs]
  if len(input_names) != n_inputs:
    input_names = [f"#{i}" for i in range(n_inputs)]
  return [f"param {k}" for k in sorted(params)] + [f"input {name}" for name in input_names]


def graph_op_counts(concrete_fn, graph_def=None) -> collections.Counter:
  """TF op type -> number of nodes, library functions counted once per call."""
  graph_def = graph_def if graph_def is not None else concrete_fn.graph.as_graph_def()
  functions = {f.signature.name: f for f in graph_def.library.function}
  memo: dict[str, collections.Counter] = {}

  def called(node):
    names = []
    for value in node.attr.values():
      if value.HasField("func"):
        names.append(value.func.name)
      elif value.HasField("list"):
        names.extend(f.name for f in value.list.func)
    if node.op in functions:
      names.append(node.op)
    return names

  def count(nodes, active) -> collections.Counter:
    total: collections.Counter = collections.Counter()
    for node in nodes:
      total[node.op] += 1
      for fname in called(node):
        if fname in functions and fname not in active:
          if fname not in memo:
            memo[fname] = count(functions[fname].node_def, active | {fname})
          total.update(memo[fname])
    return total

  return count(graph_def.node, frozenset())
