"""``tfprims ops``: the op types a model uses and whether tfprims converts them (read
from the graph, nothing traced), or with ``--supported`` every op type it converts."""

from __future__ import annotations

import argparse
import json
from typing import TextIO

from tfprims import examples
from tfprims.cli_common import (
  EXIT_MISMATCH,
  EXIT_OK,
  GRAPH_DEF,
  KERAS,
  MODEL_KINDS,
  CLIError,
  import_tensorflow,
  load_keras_model,
  need_one_source,
  parse_names,
  read_graph_def,
  source_kind,
)


def add_parser(sub, parents) -> None:
  ops = sub.add_parser(
    "ops",
    formatter_class=argparse.RawDescriptionHelpFormatter,
    parents=parents,
    help="list the op types a model uses and whether tfprims converts them "
    "(--supported: every op type tfprims converts)",
    description=(
      "Before converting: list the op types of a SavedModel signature, a frozen\n"
      "GraphDef (.pb / .pbtxt), a Keras file (.keras / .h5) or an embedded example,\n"
      "and of every library function they call, with counts; which tfprims converts,\n"
      "which it does not (with node names), which have data-dependent output shapes,\n"
      "and dtypes no JAX primitive takes (strings, quantized types). Nothing is\n"
      "traced and no variable read (a Keras model is loaded and traced once).\n\n"
      "With --supported: every op type tfprims converts, with its family (ops that\n"
      "--import or a tfprims.ops plugin registers included)."
    ),
    epilog="Exit status: 0 when everything converts, 1 when something does not, 2 on errors.",
  )
  ops.add_argument("source", nargs="?", metavar="SRC", help=MODEL_KINDS)
  ops.add_argument(
    "--example",
    choices=examples.names(),
    metavar="NAME",
    help=f"an embedded example instead of SRC (one of {', '.join(examples.names())})",
  )
  ops.add_argument(
    "--supported",
    action="store_true",
    help="list every op type tfprims converts, with its family, instead",
  )
  ops.add_argument(
    "--signature",
    default="serving_default",
    metavar="NAME",
    help="SavedModel signature (default: %(default)s)",
  )
  ops.add_argument(
    "--outputs",
    metavar="NAMES",
    help="frozen graph: comma-separated output tensors (default: every node)",
  )
  ops.add_argument("--json", action="store_true", help="print the report as JSON")
  ops.set_defaults(run=run)


def run(args, out: TextIO) -> int:
  from tfprims import op_report

  if args.supported:
    if args.source or args.example:
      raise CLIError("--supported lists what tfprims converts; it takes no SRC or --example")
    rows = op_report.supported_ops()
    print(json.dumps(rows, indent=1) if args.json else op_report.format_supported(rows), file=out)
    return EXIT_OK
  need_one_source(args, " (or --supported: every op type tfprims converts)")
  kind = source_kind(args.source) if args.source else None
  if args.outputs and kind != GRAPH_DEF:
    raise CLIError("--outputs goes with a frozen GraphDef file")
  tf = import_tensorflow()
  load_cf = None  # the function itself, loaded only to split off a string prefix
  if args.example:
    from tfprims.cli_inspect import example_target

    target = example_target(None, args.example)
    load_cf = lambda: target.concrete_fn
    report = op_report.report_concrete_function(target.concrete_fn, source=target.title)
  elif kind == KERAS:
    from tfprims import keras_files

    model = load_keras_model(args.source)
    tf_fn, _ = keras_files.model_function(model)
    load_cf = tf_fn.get_concrete_function
    report = op_report.report_concrete_function(
      tf_fn.get_concrete_function(), source=f"Keras file {args.source}"
    )
  elif kind == GRAPH_DEF:
    report = op_report.report_graph_def(
      read_graph_def(args.source), parse_names(args.outputs), source=args.source
    )
  else:
    report = op_report.report_saved_model(args.source, args.signature)
    keep: list = []  # the restored object owns the signature's variables

    def load_cf():
      keep.append(tf.saved_model.load(args.source))
      return keep[-1].signatures[args.signature]

  split = _string_split(report, load_cf)
  if args.json:
    print(json.dumps(dict(report.as_json(), host_prefix=split), indent=1), file=out)
  else:
    print(report.format(), file=out)
    if split is not None:
      from tfprims import host_prefix

      print(
        "\n"
        + (
          host_prefix.format_summary(split)
          if "error" not in split
          else f"string inputs: no host prefix split: {split['error']}"
        ),
        file=out,
      )
  ok = report.convertible or (split is not None and "error" not in split)
  return EXIT_OK if ok else EXIT_MISMATCH


def _string_split(report, load_cf):
  """For a function with string inputs: its split into a TF host prefix and a converted
  rest (``tfprims.host_prefix.split_summary``), or ``{"error": why}``; else None."""
  if (
    report.convertible
    or load_cf is None
    or not any("string" in u.dtypes for u in report.ops.values())
  ):
    return None
  from tfprims import errors, host_prefix

  cf = load_cf()
  if not host_prefix.has_strings(cf):
    return None
  try:
    return host_prefix.split_summary(cf)
  except errors.TFPrimsError as e:
    return {"error": f"{type(e).__name__}: {e}"}
