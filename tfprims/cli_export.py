"""``tfprims export``: convert a model and write a TensorFlow-free ``jax.export``
artifact (:mod:`tfprims.deploy`). Everything that can be wrong with the command line
(the platforms, the OUT directory) is checked before converting."""

from __future__ import annotations

import argparse
import difflib
import os
from typing import TextIO

from tfprims import examples
from tfprims.cli_common import (
  EXIT_OK,
  GRAPH_DEF,
  KERAS,
  MODEL_KINDS,
  CLIError,
  frozen_graph_names,
  import_tensorflow,
  input_shape,
  load_keras_model,
  need_one_source,
  positive_int,
  read_graph_def,
  source_kind,
)

# What jax.export lowers for (its `platforms`); "gpu" is a JAX backend, not one of them.
EXPORT_PLATFORMS = ("cpu", "cuda", "rocm", "tpu")


def add_parser(sub, parents) -> None:
  export = sub.add_parser(
    "export",
    parents=parents,
    help="convert, then write a TensorFlow-free jax.export artifact",
    description=(
      "Convert a SavedModel signature, a frozen GraphDef, a Keras file or an embedded\n"
      "example and write to OUT: model.jax_exported (jax.export: StableHLO and its\n"
      "calling convention), params.npz and manifest.json. Unknown (None) input dims\n"
      "are symbolic, so one artifact serves every batch size. Load it with\n"
      "tfprims.load_exported(OUT), which needs no TensorFlow."
    ),
    epilog=(
      "OUT must not exist yet, or be an empty directory; --force writes over an "
      "earlier artifact.\nExit status: 0 written, 2 on errors."
    ),
    formatter_class=argparse.RawDescriptionHelpFormatter,
  )
  export.add_argument(
    "source",
    nargs="?",
    metavar="SRC",
    help=f"{MODEL_KINDS}; a frozen graph needs --inputs/--outputs",
  )
  export.add_argument("out", metavar="OUT", help="the artifact directory to write")
  export.add_argument(
    "--example", choices=examples.names(), metavar="NAME", help="an embedded example instead of SRC"
  )
  export.add_argument(
    "--signature",
    default="serving_default",
    metavar="NAME",
    help="the SavedModel signature to export (default: %(default)s)",
  )
  export.add_argument(
    "--inputs",
    metavar="NAMES",
    help="frozen graph: comma-separated input Placeholders, in call order",
  )
  export.add_argument(
    "--outputs", metavar="NAMES", help="frozen graph: comma-separated output tensors"
  )
  export.add_argument(
    "--no-batch-polymorphic",
    dest="batch_polymorphic",
    action="store_false",
    help="refuse unknown input dims instead of making them symbolic",
  )
  export.add_argument(
    "--batch",
    type=positive_int,
    metavar="N",
    help="a concrete size N for the leading unknown (None) dim of every "
    "input, instead of a symbolic batch (shape arithmetic on a "
    "symbolic batch is folded, so few graphs need this: an op that "
    "needs a concrete size raises SymbolicShapeError naming its node)",
  )
  export.add_argument(
    "--shape",
    action="append",
    type=input_shape,
    metavar="NAME=D0,D1,...",
    help="a concrete shape for input NAME, replacing its signature's "
    "(repeatable; for graphs that need concrete sizes where the "
    "signature has None)",
  )
  export.add_argument(
    "--constraint",
    action="append",
    metavar="EXPR",
    help="what holds between symbolic dims, e.g. 'batch >= 2' (repeatable; "
    "for graphs that compare them, as top_k of 2 along the batch "
    "axis); the artifact checks it when called",
  )
  export.add_argument(
    "--platforms",
    type=platform_list,
    metavar="LIST",
    help=f"comma-separated platforms ({','.join(EXPORT_PLATFORMS)}); default: this machine's",
  )
  export.add_argument("--force", action="store_true", help="write over an existing artifact in OUT")
  export.set_defaults(run=run)


def platform_list(text: str) -> list:
  """``--platforms``: names jax.export knows, each once (an ArgumentTypeError names
  the closest for a typo)."""
  names = [p.strip().lower() for p in text.split(",") if p.strip()]
  if not names:
    raise argparse.ArgumentTypeError("expected a comma-separated list of platforms")
  for name in names:
    if name in EXPORT_PLATFORMS:
      continue
    if name == "gpu":
      hint = "cuda (NVIDIA) or rocm (AMD)"
    else:
      close = difflib.get_close_matches(name, EXPORT_PLATFORMS, n=1, cutoff=0.5)
      hint = close[0] if close else ""
    known = ", ".join(EXPORT_PLATFORMS)
    raise argparse.ArgumentTypeError(
      f"unknown platform {name!r}"
      + (f" (did you mean {hint}?)" if hint else "")
      + f"; jax.export knows: {known}"
    )
  if len(set(names)) < len(names):
    raise argparse.ArgumentTypeError(f"a platform is named twice: {text!r}")
  return names


def _artifact_files() -> tuple:
  from tfprims import deploy

  return deploy.MODEL_FILE, deploy.PARAMS_FILE, deploy.MANIFEST_FILE


def check_out(path: str, force: bool) -> None:
  """That the artifact can be written to ``path``, before converting anything: a new
  directory (its parents are made), an empty one, or with ``force`` one that holds
  only an earlier artifact's files."""
  artifact = set(_artifact_files())
  if os.path.isdir(path):
    entries = os.listdir(path)
    if entries and not force:
      what = "an earlier artifact" if set(entries) <= artifact else "files that are no artifact's"
      raise CLIError(
        f"OUT {path!r} is a directory that is not empty (it holds {what}); "
        "give a new directory, or --force to write over an artifact"
      )
    others = sorted(set(entries) - artifact)
    if others:
      shown = ", ".join(others[:3]) + (", ..." if len(others) > 3 else "")
      raise CLIError(
        f"OUT {path!r} holds files that are no artifact's ({shown}); --force "
        "only writes over an artifact: give a new or empty directory"
      )
    if not os.access(path, os.W_OK | os.X_OK):
      raise CLIError(f"OUT {path!r}: cannot write in this directory (permission denied)")
    return
  if os.path.lexists(path):
    kind = "a file" if os.path.isfile(path) else "not a directory"
    raise CLIError(
      f"OUT {path!r} exists and is {kind}; the artifact is a directory: give a new directory"
    )
  parent = os.path.dirname(os.path.abspath(path))
  while not os.path.exists(parent):
    parent = os.path.dirname(parent)
  if not os.path.isdir(parent):
    raise CLIError(f"OUT {path!r} cannot be made: {parent!r} is a file, not a directory")
  if not os.access(parent, os.W_OK | os.X_OK):
    raise CLIError(f"OUT {path!r} cannot be made: cannot write in {parent!r} (permission denied)")


def run(args, out: TextIO) -> int:
  need_one_source(args)
  kind = source_kind(args.source) if args.source else None
  if (args.inputs or args.outputs) and kind != GRAPH_DEF:
    raise CLIError("--inputs/--outputs go with a frozen GraphDef file")
  check_out(args.out, args.force)
  import_tensorflow()
  import tfprims
  from tfprims import deploy

  if kind == GRAPH_DEF:
    graph_def = read_graph_def(args.source)
    names = frozen_graph_names(args)
  if args.example:
    from tfprims.cli_inspect import example_target

    target = example_target(None, args.example)
    jax_fn, params = tfprims.convert(target.concrete_fn)
    source = target.title
  elif kind == GRAPH_DEF:
    jax_fn = tfprims.convert_graph_def(graph_def, *names)
    params, source = {}, f"frozen graph {args.source}"
  elif kind == KERAS:
    from tfprims import keras_files

    model = load_keras_model(args.source)
    jax_fn, params = tfprims.convert(keras_files.model_function(model)[0])
    source = f"Keras file {args.source}"
  else:
    jax_fn, params = tfprims.load_saved_model(args.source, args.signature)
    source = f"SavedModel {args.source} (signature {args.signature!r})"
  try:
    manifest = deploy.export(
      jax_fn,
      params,
      args.out,
      batch_polymorphic=args.batch_polymorphic,
      batch=args.batch,
      shapes=dict(args.shape or ()),
      constraints=args.constraint or (),
      source=source,
      platforms=args.platforms,
    )
  except OSError as e:
    where = f": {e.filename}" if e.filename else ""
    raise CLIError(
      f"cannot write the artifact to {args.out!r} ({e.strerror or e}{where})"
    ) from None
  ins = ", ".join(f"{i['name']}: {i['dtype']}{i['shape']}" for i in manifest["inputs"])
  print(
    f"tfprims export: {source} -> {args.out}\n  inputs: {ins}\n  outputs: "
    + ", ".join(f"{o['name']}: {o['dtype']}{o['shape']}" for o in manifest["outputs"])
    + f"\n  params: {len(manifest['params'])} arrays; platforms: "
    + ",".join(manifest["platforms"]),
    file=out,
  )
  return EXIT_OK
