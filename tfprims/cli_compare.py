"""The arguments of ``tfprims compare`` (the command runs in
:mod:`tfprims.comparison.command`)."""

from __future__ import annotations

import argparse
from typing import Callable

from tfprims import examples


def add_parser(sub, listing: str, *, positive_int: Callable[[str], int],
               run: Callable[..., int]) -> None:
  """Adds ``compare`` to the subcommands ``sub``: ``listing`` describes the embedded
  examples, ``positive_int`` parses counts, ``run(args, out)`` runs the command."""
  compare = sub.add_parser(
      "compare", formatter_class=argparse.RawDescriptionHelpFormatter,
      help="run a model in TF and in tfprims node by node and find where they diverge",
      description=(
          "Run a SavedModel signature, a frozen GraphDef (.pb/.pbtxt) or an embedded\n"
          "example in TensorFlow and in tfprims, node by node (function bodies per call\n"
          "site, loop bodies per iteration), on the same inputs and variables; compare\n"
          "every node's output and print a summary: the first divergence (the first\n"
          "node out of tolerance whose inputs all agree), the outputs, the worst nodes\n"
          "and the error per op type. Random ops are not compared: TF's draw is fed\n"
          "forward. See docs/compare.md."),
      epilog=(
          f"examples (--example):\n{listing}\n\n"
          "SavedModel and frozen-graph inputs are built from the signature: floats ~\n"
          "N(0, 1) (seeded), integers and booleans zero; unknown dims get --unknown-dim.\n"
          "Tolerances default per dtype (float32: rtol 1e-4, atol 1e-5); a node agrees when\n"
          "max|tfprims - tf| <= atol + rtol * max|tf| and NaN/inf are where TF has them.\n"
          "Exit status: 0 nothing diverges, 1 something does, 2 error."))
  compare.add_argument("source", nargs="?", metavar="SRC",
                       help="a SavedModel directory, or a frozen GraphDef file with "
                            "--inputs/--outputs")
  compare.add_argument("--example", choices=examples.names(), metavar="NAME",
                       help=f"an embedded example instead of SRC ({', '.join(examples.names())})")
  compare.add_argument("--signature", default="serving_default", metavar="NAME",
                       help="the SavedModel signature (default: %(default)s)")
  compare.add_argument("--inputs", metavar="NAMES",
                       help="a frozen graph's input Placeholders, comma-separated (x:0,y:0)")
  compare.add_argument("--outputs", metavar="NAMES",
                       help="a frozen graph's output tensors, comma-separated")
  compare.add_argument("--rtol", type=float, metavar="R",
                       help="relative tolerance (of max|tf|) for every float tensor "
                            "(default: per dtype)")
  compare.add_argument("--atol", type=float, metavar="A",
                       help="absolute tolerance for every float tensor (default: per dtype)")
  compare.add_argument("--isolate", action="store_true",
                       help="feed every tfprims node TF's values of its inputs (judge each op "
                            "on TF's inputs, not on errors carried from upstream)")
  compare.add_argument("--json", metavar="OUT", help="write the full report as JSON")
  compare.add_argument("--html", metavar="OUT",
                       help="write a self-contained HTML report (graph coloured by error, "
                            "node table, histograms per op type)")
  compare.add_argument("--model-explorer", metavar="OUT",
                       help="write the graph with its errors as Google Model Explorer JSON "
                            "(and OUT.node_data.json, the errors as a node-data overlay)")
  compare.add_argument("--unknown-dim", type=positive_int, default=2, metavar="N",
                       help="size of unknown (None) input dims (default: %(default)s)")
  compare.add_argument("--seed", type=int, default=0,
                       help="seed of the random example inputs (default: %(default)s)")
  compare.set_defaults(run=run)
