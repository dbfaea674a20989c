"""The arguments of ``tfprims compare``, and the command (run in
:mod:`tfprims.comparison.command`; Keras files here)."""

from __future__ import annotations

import argparse
from typing import TextIO

from tfprims import examples
from tfprims.cli_common import (
  GRAPH_DEF,
  KERAS,
  MODEL_KINDS,
  CLIError,
  frozen_graph_names,
  import_tensorflow,
  load_keras_model,
  need_one_source,
  positive_int,
  read_graph_def,
  source_kind,
)


def add_parser(sub, parents, listing: str) -> None:
  """Adds ``compare`` to the subcommands ``sub`` (``parents``: the options every
  subcommand has; ``listing`` describes the embedded examples)."""
  compare = sub.add_parser(
    "compare",
    formatter_class=argparse.RawDescriptionHelpFormatter,
    parents=parents,
    help="run a model in TF and in tfprims node by node and find where they diverge",
    description=(
      "Run a SavedModel signature, a frozen GraphDef (.pb/.pbtxt), a Keras file\n"
      "(.keras/.h5) or an embedded example in TensorFlow and in tfprims, node by\n"
      "node (function bodies per call site, loop bodies per iteration), on the same\n"
      "inputs and variables; compare every node's output and print a summary: the\n"
      "first divergence (the first node out of tolerance whose inputs all agree),\n"
      "the outputs, the worst nodes and the error per op type. Random ops are not\n"
      "compared: TF's draw is fed forward. See docs/compare.md."
    ),
    epilog=(
      f"examples (--example):\n{listing}\n\n"
      "Inputs are built from the signature: floats ~ N(0, 1) (seeded), integers and\n"
      "booleans zero; unknown dims get --unknown-dim.\n"
      "Tolerances default per dtype (float32: rtol 1e-4, atol 1e-5); a node agrees when\n"
      "max|tfprims - tf| <= atol + rtol * max|tf| and NaN/inf are where TF has them.\n"
      "Exit status: 0 nothing diverges, 1 something does, 2 error."
    ),
  )
  compare.add_argument(
    "source",
    nargs="?",
    metavar="SRC",
    help=f"{MODEL_KINDS}; a frozen graph needs --inputs/--outputs",
  )
  compare.add_argument(
    "--example",
    choices=examples.names(),
    metavar="NAME",
    help=f"an embedded example instead of SRC ({', '.join(examples.names())})",
  )
  compare.add_argument(
    "--signature",
    default="serving_default",
    metavar="NAME",
    help="the SavedModel signature (default: %(default)s)",
  )
  compare.add_argument(
    "--inputs",
    metavar="NAMES",
    help="a frozen graph's input Placeholders, comma-separated (x:0,y:0)",
  )
  compare.add_argument(
    "--outputs", metavar="NAMES", help="a frozen graph's output tensors, comma-separated"
  )
  compare.add_argument(
    "--rtol",
    type=float,
    metavar="R",
    help="relative tolerance (of max|tf|) for every float tensor (default: per dtype)",
  )
  compare.add_argument(
    "--atol",
    type=float,
    metavar="A",
    help="absolute tolerance for every float tensor (default: per dtype)",
  )
  compare.add_argument(
    "--isolate",
    action="store_true",
    help="feed every tfprims node TF's values of its inputs (judge each op "
    "on TF's inputs, not on errors carried from upstream)",
  )
  compare.add_argument("--json", metavar="OUT", help="write the full report as JSON")
  compare.add_argument(
    "--html",
    metavar="OUT",
    help="write a self-contained HTML report (graph coloured by error, "
    "node table, histograms per op type)",
  )
  compare.add_argument(
    "--model-explorer",
    metavar="OUT",
    help="write the graph with its errors as Google Model Explorer JSON "
    "(and OUT.node_data.json, the errors as a node-data overlay)",
  )
  compare.add_argument(
    "--unknown-dim",
    type=positive_int,
    default=2,
    metavar="N",
    help="size of unknown (None) input dims (default: %(default)s)",
  )
  compare.add_argument(
    "--seed", type=int, default=0, help="seed of the random example inputs (default: %(default)s)"
  )
  compare.set_defaults(run=run)


def run(args, out: TextIO) -> int:
  need_one_source(args)
  kind = source_kind(args.source) if args.source else None
  if (args.inputs or args.outputs) and kind != GRAPH_DEF:
    raise CLIError("--inputs/--outputs go with a frozen GraphDef file")
  import_tensorflow()
  if kind == GRAPH_DEF:
    read_graph_def(args.source)  # a file that is no GraphDef: the CLI's message
    frozen_graph_names(args)
  if kind == KERAS:
    return _keras(args, out)
  from tfprims.comparison import command

  return command.run(args, out)


def _keras(args, out: TextIO) -> int:
  """As :func:`tfprims.comparison.command.run`, for a Keras file."""
  import tfprims.comparison as comparison
  from tfprims import keras_files
  from tfprims.comparison import command, programs

  tf_fn, _ = keras_files.model_function(load_keras_model(args.source))
  fn_args, fn_kwargs = programs.example_inputs(
    tf_fn.get_concrete_function(), args.seed, args.unknown_dim
  )
  program = programs.from_function(tf_fn, fn_args, fn_kwargs, title=f"Keras file {args.source}")
  report = comparison.run(program, rtol=args.rtol, atol=args.atol, isolate=args.isolate)
  return command.write_report(report, args, out)
