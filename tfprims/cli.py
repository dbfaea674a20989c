"""The ``tfprims`` command line.

    tfprims inspect                      # the embedded example CNN
    tfprims inspect --example mlp
    tfprims inspect SRC [--signature serving_default] [--full]
    tfprims inspect frozen_graph.pb --inputs x:0 --outputs probs:0
    tfprims ops SRC | --example NAME [--json]     # the op types a model uses
    tfprims ops --supported                       # every op type tfprims converts
    tfprims export SRC OUT               # a TF-free jax.export artifact
    tfprims compare [SRC | --example NAME] [--json OUT] [--html OUT]  # node by node vs TF
    tfprims cache info | clear           # the persistent compilation cache

SRC is a SavedModel directory, a frozen GraphDef file (.pb, .pbtxt; with --inputs and
--outputs) or a Keras file (.keras, .h5). Every subcommand takes ``--import MODULE``
(repeatable): the module is imported first, so ops it registers
(``tfprims.register_op``) convert; modules named by ``tfprims.ops`` entry points
are imported automatically.

``inspect`` converts a model, then prints a header (model, inputs, outputs,
params), the histogram of TF ops in the converted jaxpr, the jaxpr itself
(abridged unless ``--full``) and how far the converted function's outputs are
from TensorFlow's on an example input.

``ops`` lists the op types a model uses (and its library functions use), with
counts, and which tfprims converts, without converting.

``compare`` runs the model in TF and in tfprims node by node (inside function calls
and loops too) and names the first node whose output differs while its inputs
agree (tfprims.compare; docs/compare.md).

The command line (``main()`` as the console script runs it) turns on JAX's persistent
compilation cache (:mod:`tfprims.cache`; ``tfprims cache info``); ``main(argv)`` called
from Python leaves JAX's configuration alone, as conversion does.

Exit status: 0 when the outputs match TF within the tolerance (``ops``: when
everything converts; ``compare``: when no node diverges), 1 when they do not, 2 on
errors (unsupported ops, unreadable model, bad arguments...). docs/cli.md has more.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
from typing import Optional

from tfprims import cli_cache, cli_compare, cli_export, cli_inspect, cli_ops, progress
from tfprims.cli_check import Comparison, OutputDiff, _diff, compare  # noqa: F401 (re-exported)
from tfprims.cli_common import EXIT_OK, PROG, CLIError, common_arguments, fail, import_user_modules
from tfprims.cli_inspect import DEFAULT_MAX_EQUATIONS, DEFAULT_TOLERANCE, Target  # noqa: F401
from tfprims.cli_report import Report, jaxpr_op_counts  # noqa: F401 (re-exported)


def build_parser() -> argparse.ArgumentParser:
  parser = argparse.ArgumentParser(
    prog=PROG,
    description="tfprims: TensorFlow functions as JAX functions, one JAX primitive "
    "(tf.<OpType>) per TF op.",
    epilog="Run 'tfprims COMMAND --help' for a command (inspect, ops, export, compare, cache).",
  )
  from tfprims import __version__

  parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
  sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
  parents = [common_arguments()]
  cli_inspect.add_parser(sub, parents)
  cli_ops.add_parser(sub, parents)
  cli_export.add_parser(sub, parents)
  cli_compare.add_parser(sub, parents, cli_inspect.example_listing())
  cli_cache.add_parser(sub)
  return parser


def main(argv: Optional[list] = None) -> int:
  """Entry point of the ``tfprims`` console script; returns the exit status."""
  parser = build_parser()
  args = parser.parse_args(argv)
  if getattr(args, "source", None) and getattr(args, "example", None):
    parser.error(f"{args.command}: give either SRC or --example NAME, not both")
  _default_jax_platform()
  if argv is None and args.command != "cache":  # the console script
    from tfprims import cache

    cache.enable_compilation_cache()
  out = sys.stdout
  try:
    if hasattr(args, "imports"):  # not `cache`: it needs no TensorFlow
      import_user_modules(args.imports)
    with progress.silenced() if getattr(args, "quiet", False) else contextlib.nullcontext():
      return args.run(args, out)
  except BrokenPipeError:  # e.g. `tfprims inspect | head`
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    os.close(devnull)
    return EXIT_OK
  except CLIError as e:
    return fail(f"{PROG} {args.command}: error: {e}")
  except Exception as e:  # tfprims errors are user-facing; others are bugs
    from tfprims import errors

    if isinstance(e, errors.TFPrimsError):
      return fail(f"{PROG} {args.command}: {type(e).__name__}: {e}")
    raise


def _default_jax_platform() -> None:
  """CPU unless the user chose (JAX reads JAX_PLATFORMS when it is imported,
  which ``import tfprims`` already did)."""
  if "JAX_PLATFORMS" in os.environ:
    return
  import jax

  try:
    jax.config.update("jax_platforms", "cpu")
  except Exception:  # backends already initialised: keep them
    pass
