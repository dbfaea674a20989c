"""``tfprims compare``: the command (its arguments are parsed in :mod:`tfprims.cli`)."""

from __future__ import annotations

import os
from typing import TextIO

from tfprims import errors, examples
from tfprims.errors import import_tensorflow

EXIT_OK, EXIT_DIVERGED = 0, 1


def run(args, out: TextIO) -> int:
  """Compares the model ``args`` names, prints the summary, writes the files asked
  for; 0 when nothing diverges, 1 when something does (errors raise)."""
  import tfprims.comparison as comparison

  settings = dict(rtol=args.rtol, atol=args.atol, isolate=args.isolate)
  if args.example:
    ex = examples.build(args.example)
    program = comparison.programs.from_function(
      ex.tf_fn, tuple(ex.inputs), {}, title=f"example '{args.example}'"
    )
  elif os.path.isfile(args.source):
    program = _frozen_graph(args)
  elif os.path.isdir(args.source):
    program = comparison.programs.from_saved_model(
      args.source, None, args.signature, seed=args.seed, unknown_dim=args.unknown_dim
    )
  else:
    raise errors.ConversionError(
      f"{args.source!r} is neither a SavedModel directory nor a GraphDef file"
    )
  return write_report(comparison.run(program, **settings), args, out)


def write_report(report, args, out: TextIO) -> int:
  """Prints the report's summary, writes the files the arguments ask for; the exit
  status."""
  print(report.summary(), file=out)
  for path, write in (
    (args.json, report.to_json),
    (args.html, report.to_html),
    (args.model_explorer, report.to_model_explorer),
  ):
    if path:
      write(path)
      print(f"wrote {path}", file=out)
  return EXIT_OK if report.ok else EXIT_DIVERGED


def _frozen_graph(args):
  """A frozen GraphDef compared on example values for its ``--inputs``."""
  import numpy as np

  tf = import_tensorflow()
  from tfprims import graph as graph_lib, tf1
  from tfprims.comparison import programs

  if not (args.inputs and args.outputs):
    raise errors.InputStructureError(
      "a frozen graph needs --inputs and --outputs (tensor names, comma-separated)"
    )
  graph_def = tf1.read_graph_def(args.source)
  inputs, outputs = args.inputs.split(","), args.outputs.split(",")
  by_name = {node.name: node for node in graph_def.node}
  rng = np.random.default_rng(args.seed)
  values = []
  for name in inputs:
    node = by_name.get(graph_lib.parse_ref(name)[0])
    if node is None:
      raise errors.ConversionError(f"input {name!r} is not a node of {args.source!r}")
    dtype = tf.as_dtype(node.attr["dtype"].type)
    shape = (
      tf.TensorShape(node.attr["shape"].shape) if "shape" in node.attr else tf.TensorShape(None)
    )
    values.append(
      programs.example_value(tf.TensorSpec(shape, dtype, name=name), rng, args.unknown_dim)
    )
  return programs.from_graph_def(
    graph_def, inputs, outputs, values, title=f"frozen graph {args.source}"
  )
