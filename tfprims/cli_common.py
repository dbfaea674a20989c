"""What every ``tfprims`` subcommand shares: errors and exit codes, the quiet import
of TensorFlow, what a model path is, ``--import`` and the ``tfprims.ops`` plugins."""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import importlib
import importlib.util
import os
import sys
import tempfile
from typing import Optional, Sequence

# Before TensorFlow is imported (tfprims itself imports TF lazily).
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

PROG = "tfprims"
EXIT_OK, EXIT_MISMATCH, EXIT_ERROR = 0, 1, 2
PLUGIN_GROUP = "tfprims.ops"

SAVED_MODEL, GRAPH_DEF, KERAS = "SavedModel", "GraphDef", "Keras"
MODEL_KINDS = (
  "a SavedModel directory, a frozen GraphDef file (.pb, .pbtxt) or a Keras file (.keras, .h5)"
)


class CLIError(Exception):
  """A user error found by the CLI itself (bad path, unknown signature...)."""


# --- arguments ---------------------------------------------------------------------


def common_arguments() -> argparse.ArgumentParser:
  """The options of every subcommand (a parent parser)."""
  parent = argparse.ArgumentParser(add_help=False)
  parent.add_argument(
    "--import",
    dest="imports",
    action="append",
    default=[],
    metavar="MODULE",
    help="import MODULE first (repeatable), so that its tfprims.register_op "
    "calls (ops tfprims does not convert itself) or Keras custom objects take effect; "
    "a dotted module name (from the current directory or PYTHONPATH) or a .py file. "
    f"Modules named by '{PLUGIN_GROUP}' entry points are imported automatically",
  )
  parent.add_argument(
    "-q",
    "--quiet",
    action="store_true",
    help="no progress on stderr (shown for long work when stderr is a terminal; "
    "TFPRIMS_PROGRESS=1 shows it anywhere, =0 nowhere)",
  )
  return parent


def positive_int(text: str) -> int:
  value = int(text)
  if value < 1:
    raise argparse.ArgumentTypeError(f"must be >= 1, got {value}")
  return value


def input_shape(text: str) -> tuple:
  name, sep, dims = text.partition("=")
  try:
    shape = tuple(int(d) for d in dims.split(",") if d.strip()) if sep else None
  except ValueError:
    shape = None
  if not name or shape is None or any(d < 0 for d in shape):
    raise argparse.ArgumentTypeError(f"expected NAME=D0,D1,... (sizes >= 0), got {text!r}")
  return name, shape


def need_one_source(args, more: str = "") -> None:
  if args.source and args.example:
    raise CLIError("give either SRC or --example NAME, not both")
  if not (args.source or args.example):
    raise CLIError(f"give either SRC or --example NAME{more}")


# --- what a model path is ------------------------------------------------------------


def not_a_model(path: str, why: str) -> CLIError:
  """The one error for a path that is no model tfprims reads."""
  return CLIError(f"{path!r} is not {MODEL_KINDS}: {why}")


def source_kind(path: str) -> str:
  """SAVED_MODEL, GRAPH_DEF or KERAS, by what ``path`` is (raises :func:`not_a_model`)."""
  from tfprims import keras_files

  if os.path.isdir(path):
    if any(os.path.exists(os.path.join(path, f)) for f in ("saved_model.pb", "saved_model.pbtxt")):
      return SAVED_MODEL
    raise not_a_model(path, "it is a directory without saved_model.pb (not a SavedModel)")
  if not os.path.exists(path):
    raise not_a_model(path, "it does not exist")
  if not os.path.isfile(path):
    raise not_a_model(path, "it is neither a regular file nor a directory")
  return KERAS if keras_files.is_keras_file(path) else GRAPH_DEF


def read_graph_def(path: str):
  """The GraphDef in ``path`` (binary or text); :func:`not_a_model` if it is none."""
  from tfprims import errors, tf1

  try:
    return tf1.read_graph_def(path)
  except errors.ConversionError as e:
    detail = str(e).split(" is not a GraphDef file ", 1)[-1]
    raise not_a_model(path, f"it is a file but not a GraphDef {detail}") from None


def frozen_graph_names(args) -> tuple[list, list]:
  """A frozen graph's ``--inputs`` and ``--outputs``, both required."""
  if not (args.inputs and args.outputs):
    raise CLIError("a frozen graph needs --inputs and --outputs (tensor names, comma-separated)")
  return args.inputs.split(","), args.outputs.split(",")


def load_keras_model(path: str):
  """The Keras model in ``path``, Keras' failure as a CLIError."""
  import warnings

  from tfprims import errors, keras_files

  try:
    with warnings.catch_warnings():  # Keras' advice on its legacy formats
      warnings.simplefilter("ignore")
      return keras_files.load_model(path)
  except errors.ConversionError as e:
    raise CLIError(str(e)) from None


# --- quiet TensorFlow ---------------------------------------------------------------


def import_tensorflow():
  """Imports TensorFlow with its C++ start-up chatter (written to the stderr file
  descriptor before logging is configured) swallowed, unless the import fails."""
  from tfprims import errors

  if "tensorflow" in sys.modules:
    return sys.modules["tensorflow"]
  with _silenced_stderr_fd() as captured:
    try:
      tf = errors.import_tensorflow()
      # Creating the eager context probes for GPUs, which logs through absl.
      tf.config.list_logical_devices()
    except BaseException:
      captured.replay = True
      raise
  tf.get_logger().setLevel("ERROR")
  # The comparison with TF wants TF's exact float32 math, not TF32 (on GPUs).
  with contextlib.suppress(Exception):
    tf.config.experimental.enable_tensor_float_32_execution(False)
  with contextlib.suppress(Exception):
    from absl import logging as absl_logging

    absl_logging.set_verbosity(absl_logging.ERROR)
  return tf


@dataclasses.dataclass
class _Captured:
  replay: bool = False


@contextlib.contextmanager
def _silenced_stderr_fd():
  captured = _Captured()
  try:
    fd = sys.stderr.fileno()
  except (AttributeError, OSError, ValueError):
    fd = 2
  sys.stderr.flush()
  saved = os.dup(fd)
  with tempfile.TemporaryFile(mode="w+b") as tmp:
    os.dup2(tmp.fileno(), fd)
    try:
      yield captured
    finally:
      os.dup2(saved, fd)
      os.close(saved)
      if captured.replay:
        tmp.seek(0)
        sys.stderr.write(tmp.read().decode(errors="replace"))


# --- --import and plugins -------------------------------------------------------------


def plugin_entry_points() -> list:
  """The installed ``tfprims.ops`` entry points."""
  from importlib.metadata import entry_points

  try:
    return list(entry_points(group=PLUGIN_GROUP))
  except Exception:  # a broken installation must not stop the CLI
    return []


_LOADED: set = set()


def import_user_modules(modules: Sequence[str], warn=None) -> None:
  """Imports the ``tfprims.ops`` plugins (a failing one is reported through ``warn``
  and skipped) and then ``modules`` (``--import``; a failure raises CLIError).

  An entry point ``name = package.module`` has its module imported; one naming an
  object (``package.module:register``) has it loaded and, when callable, called."""
  plugins = plugin_entry_points()
  if not plugins and not modules:
    return
  import_tensorflow()  # user modules often import TF: keep its start-up quiet
  for ep in plugins:
    if (ep.name, ep.value) in _LOADED:  # cli.main called again in one process
      continue
    _LOADED.add((ep.name, ep.value))
    try:
      obj = ep.load()
      if ep.attr and callable(obj):
        obj()
    except Exception as e:  # report and go on without it
      dist = getattr(getattr(ep, "dist", None), "name", None)
      origin = f" (from {dist})" if dist else ""
      (warn or _warn)(
        f"the {PLUGIN_GROUP} entry point {ep.name!r} = {ep.value!r}{origin} "
        f"failed to load, its ops are not registered: {_describe(e)}"
      )
  for module in modules:
    _import_one(module)


def _import_one(module: str) -> None:
  try:
    if module.endswith(".py") or os.sep in module:
      if not os.path.isfile(module):
        raise CLIError(f"--import {module}: no such file")
      name = os.path.splitext(os.path.basename(module))[0]
      spec = importlib.util.spec_from_file_location(name, module)
      mod = importlib.util.module_from_spec(spec)
      sys.modules[name] = mod
      try:
        spec.loader.exec_module(mod)
      except BaseException:
        del sys.modules[name]
        raise
    else:
      # As `python -m` would: the current directory first, then PYTHONPATH.
      if "" not in sys.path and os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
      importlib.import_module(module)
  except CLIError:
    raise
  except ModuleNotFoundError as e:
    if e.name and (module == e.name or module.startswith(e.name + ".")):
      raise CLIError(
        f"--import {module}: no module named {e.name!r} (on PYTHONPATH or in the current directory)"
      ) from None
    raise CLIError(f"--import {module}: {_describe(e)}") from None
  except (Exception, SystemExit) as e:  # the module is the user's
    raise CLIError(f"--import {module} failed: {_describe(e)}") from None


def _describe(e: BaseException) -> str:
  """``Type: message (file:line)``: where in the user's module it failed."""
  import traceback

  frames = traceback.extract_tb(e.__traceback__)
  ours = os.path.dirname(os.path.abspath(__file__))
  user = [f for f in frames if not f.filename.startswith((ours, "<frozen"))]
  where = f" ({user[-1].filename}:{user[-1].lineno})" if user else ""
  message = (str(e).strip().splitlines() or [""])[0]
  return f"{type(e).__name__}: {message}{where}"


def _warn(message: str) -> None:
  sys.stdout.flush()
  print(f"{PROG}: warning: {message}", file=sys.stderr)


def fail(message: str) -> int:
  sys.stdout.flush()
  print(message, file=sys.stderr)
  return EXIT_ERROR


def parse_names(text: Optional[str]) -> Optional[list]:
  return text.split(",") if text else None
