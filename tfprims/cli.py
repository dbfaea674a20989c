"""The ``tfprims`` command line.

    tfprims inspect                      # the embedded example CNN
    tfprims inspect --example mlp
    tfprims inspect path/to/saved_model [--signature serving_default] [--full]
    tfprims inspect frozen_graph.pb --inputs x:0 --outputs probs:0
    tfprims ops path/to/saved_model | frozen_graph.pb | --example NAME [--json]
    tfprims export path/to/saved_model OUT_DIR   # a TF-free jax.export artifact
    tfprims compare [SRC | --example NAME] [--json OUT] [--html OUT]  # node by node vs TF

``inspect`` converts a model, then prints a header (model, inputs, outputs,
params), the histogram of TF ops in the converted jaxpr, the jaxpr itself
(abridged unless ``--full``) and how far the converted function's outputs are
from TensorFlow's on an example input.

``ops`` lists the op types a model uses (and its library functions use), with
counts, and which tfprims converts, without converting.

``compare`` runs the model in TF and in tfprims node by node (inside function calls
and loops too) and names the first node whose output differs while its inputs
agree (tfprims.compare; docs/compare.md).

Exit status: 0 when the outputs match TF within the tolerance (``ops``: when
everything converts; ``compare``: when no node diverges), 1 when they do not, 2 on
errors (unsupported ops, unreadable SavedModel, bad arguments...).
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import dataclasses
import os
import sys
import tempfile
import time
from typing import Any, Callable, Optional, TextIO

# Before TensorFlow is imported (tfprims itself imports TF lazily).
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import numpy as np

from tfprims import cli_compare, examples
from tfprims.cli_report import Report, jaxpr_op_counts  # noqa: F401 (re-exported)

PROG = "tfprims"
EXIT_OK, EXIT_MISMATCH, EXIT_ERROR = 0, 1, 2
DEFAULT_TOLERANCE = 1e-5
DEFAULT_MAX_EQUATIONS = 40


class CLIError(Exception):
  """A user error found by the CLI itself (bad path, unknown signature...)."""


# --- argument parsing ---------------------------------------------------------


def build_parser() -> argparse.ArgumentParser:
  parser = argparse.ArgumentParser(
      prog=PROG,
      description="tfprims: TensorFlow functions as JAX functions, one JAX primitive "
                  "(tf.<OpType>) per TF op.",
      epilog="Run 'tfprims COMMAND --help' for a command (inspect, ops, export, compare).")
  from tfprims import __version__
  parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
  sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)

  import textwrap
  listing = "\n".join(
      textwrap.fill(("[default] " if name == examples.DEFAULT else "") + examples.describe(name),
                    width=79, initial_indent=f"  {name:<6}", subsequent_indent=" " * 8)
      for name in examples.names())
  inspect = sub.add_parser(
      "inspect", formatter_class=argparse.RawDescriptionHelpFormatter,
      help="convert a SavedModel signature or an embedded example and show the result",
      description=(
          "Convert a TF function with tfprims and show: a header (model, inputs, outputs,\n"
          "params), the histogram of TF ops in the converted jaxpr, the jaxpr (its\n"
          "primitives are the TF ops: tf.Conv2D, tf.MatMul...) and the largest difference\n"
          "between the converted function's outputs and TensorFlow's on an example input.\n\n"
          "With no SAVEDMODEL_DIR, an embedded example model is used (built in code with\n"
          "Keras, deterministic weights, no download)."),
      epilog=(
          f"examples (--example):\n{listing}\n\n"
          "SavedModel inputs are built from the signature: floats ~ N(0, 1) (seeded),\n"
          "integers and booleans zero; unknown (None) dimensions get --unknown-dim.\n\n"
          "The outputs match when max|jax - tf| <= TOL * max(1, max|tf|) (absolute for\n"
          "outputs of scale <= 1, relative above).\n"
          "Exit status: 0 match, 1 mismatch, 2 error (unsupported op, bad model, ...)."))
  inspect.add_argument("saved_model", nargs="?", metavar="SAVEDMODEL_DIR",
                       help="a TF2 SavedModel directory (tf.saved_model.save), or a frozen "
                            "GraphDef file (.pb binary, .pbtxt text) with --inputs/--outputs")
  inspect.add_argument("--inputs", metavar="NAMES",
                       help="a frozen graph's input tensors, comma-separated (x:0,y:0)")
  inspect.add_argument("--outputs", metavar="NAMES",
                       help="a frozen graph's output tensors, comma-separated")
  inspect.add_argument("--example", choices=examples.names(), metavar="NAME",
                       help=f"an embedded example model: {', '.join(examples.names())} "
                            f"(default: {examples.DEFAULT} when no SAVEDMODEL_DIR)")
  inspect.add_argument("--signature", default="serving_default", metavar="NAME",
                       help="the SavedModel signature to convert (default: %(default)s)")
  inspect.add_argument("--full", action="store_true",
                       help="print the whole jaxpr and every param")
  inspect.add_argument("--max-equations", type=_positive_int, default=DEFAULT_MAX_EQUATIONS,
                       metavar="N", help="equations shown without --full (default: %(default)s)")
  inspect.add_argument("--tolerance", type=float, default=DEFAULT_TOLERANCE, metavar="TOL",
                       help="tolerance of the comparison with TF (default: %(default)g)")
  inspect.add_argument("--unknown-dim", type=_positive_int, default=2, metavar="N",
                       help="size given to unknown (None) input dimensions of a SavedModel "
                            "signature (default: %(default)s)")
  inspect.add_argument("--seed", type=int, default=0,
                       help="seed of the random SavedModel inputs (default: %(default)s)")
  inspect.set_defaults(run=_inspect)
  ops = sub.add_parser(
      "ops", formatter_class=argparse.RawDescriptionHelpFormatter,
      help="list the op types a model uses and whether tfprims converts them",
      description=(
          "Before converting: list the op types of a SavedModel signature, a frozen\n"
          "GraphDef (.pb / .pbtxt) or an embedded example, and of every library function\n"
          "they call, with counts; which tfprims converts, which it does not (with node\n"
          "names), which have data-dependent output shapes, and dtypes no JAX primitive\n"
          "takes (strings, quantized types). Nothing is traced and no variable read."),
      epilog="Exit status: 0 when everything converts, 1 when something does not, 2 on "
             "errors.")
  ops.add_argument("source", nargs="?", metavar="SRC",
                   help="a SavedModel directory or a frozen GraphDef file")
  ops.add_argument("--example", choices=examples.names(), metavar="NAME",
                   help=f"an embedded example instead of SRC (one of {', '.join(examples.names())})")
  ops.add_argument("--signature", default="serving_default", metavar="NAME",
                   help="SavedModel signature (default: serving_default)")
  ops.add_argument("--outputs", metavar="NAMES",
                   help="frozen graph: comma-separated output tensors (default: every node)")
  ops.add_argument("--json", action="store_true", help="print the report as JSON")
  ops.set_defaults(run=_ops)
  export = sub.add_parser(
      "export", help="convert, then write a TensorFlow-free jax.export artifact",
      description=(
          "Convert a SavedModel signature (or an embedded example) and write to OUT:\n"
          "model.jax_exported (jax.export: StableHLO and its calling convention),\n"
          "params.npz and manifest.json. Unknown (None) input dims are symbolic, so one\n"
          "artifact serves every batch size. Load it with tfprims.load_exported(OUT),\n"
          "which needs no TensorFlow."),
      formatter_class=argparse.RawDescriptionHelpFormatter)
  export.add_argument("source", nargs="?", metavar="SRC",
                      help="a SavedModel directory or a frozen GraphDef (.pb/.pbtxt)")
  export.add_argument("out", metavar="OUT", help="the artifact directory to write")
  export.add_argument("--example", choices=examples.names(), metavar="NAME",
                      help="an embedded example instead of SRC")
  export.add_argument("--signature", default="serving_default", metavar="NAME")
  export.add_argument("--inputs", metavar="NAMES",
                      help="frozen graph: comma-separated input Placeholders, in call order")
  export.add_argument("--outputs", metavar="NAMES",
                      help="frozen graph: comma-separated output tensors")
  export.add_argument("--no-batch-polymorphic", dest="batch_polymorphic",
                      action="store_false",
                      help="refuse unknown input dims instead of making them symbolic")
  export.add_argument("--batch", type=_positive_int, metavar="N",
                      help="a concrete batch size instead of a symbolic one (for graphs that "
                           "compute with the batch size, e.g. Keras Dense on 3-D inputs)")
  export.add_argument("--shape", action="append", type=_input_shape, metavar="NAME=D0,D1,...",
                      help="a concrete shape for input NAME, replacing its signature's "
                           "(repeatable; for graphs that need concrete sizes where the "
                           "signature has None)")
  export.add_argument("--constraint", action="append", metavar="EXPR",
                      help="what holds between symbolic dims, e.g. 'batch >= 2' (repeatable; "
                           "for graphs that compare them, as top_k of 2 along the batch "
                           "axis); the artifact checks it when called")
  export.add_argument("--platforms", metavar="LIST",
                      help="comma-separated platforms (cpu,cuda,rocm,tpu); default: this one")
  export.set_defaults(run=_export)
  cli_compare.add_parser(sub, listing, positive_int=_positive_int, run=_compare)
  return parser


def _positive_int(text: str) -> int:
  value = int(text)
  if value < 1:
    raise argparse.ArgumentTypeError(f"must be >= 1, got {value}")
  return value


def _input_shape(text: str) -> tuple:
  name, sep, dims = text.partition("=")
  try:
    shape = tuple(int(d) for d in dims.split(",") if d.strip()) if sep else None
  except ValueError:
    shape = None
  if not name or shape is None or any(d < 0 for d in shape):
    raise argparse.ArgumentTypeError(f"expected NAME=D0,D1,... (sizes >= 0), got {text!r}")
  return name, shape


def main(argv: Optional[list] = None) -> int:
  """Entry point of the ``tfprims`` console script; returns the exit status."""
  parser = build_parser()
  args = parser.parse_args(argv)
  if args.command == "inspect" and args.saved_model and args.example:
    parser.error("inspect: give either SAVEDMODEL_DIR or --example, not both")
  _default_jax_platform()
  out = sys.stdout
  try:
    return args.run(args, out)
  except BrokenPipeError:  # e.g. `tfprims inspect | head`
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    os.close(devnull)
    return EXIT_OK
  except CLIError as e:
    return _fail(f"{PROG} {args.command}: error: {e}")
  except Exception as e:  # noqa: BLE001 (tfprims errors are user-facing; others are bugs)
    from tfprims import errors
    if isinstance(e, errors.TFPrimsError):
      return _fail(f"{PROG} {args.command}: {type(e).__name__}: {e}")
    raise


def _fail(message: str) -> int:
  sys.stdout.flush()
  print(message, file=sys.stderr)
  return EXIT_ERROR


def _default_jax_platform() -> None:
  """CPU unless the user chose (JAX reads JAX_PLATFORMS when it is imported,
  which ``import tfprims`` already did)."""
  if "JAX_PLATFORMS" in os.environ:
    return
  import jax
  try:
    jax.config.update("jax_platforms", "cpu")
  except Exception:  # noqa: BLE001 (backends already initialised: keep them)
    pass


# --- quiet TensorFlow ---------------------------------------------------------


def import_tensorflow():
  """Imports TensorFlow with its C++ start-up chatter (written to the stderr file
  descriptor before logging is configured) swallowed, unless the import fails."""
  if "tensorflow" in sys.modules:
    return sys.modules["tensorflow"]
  with _silenced_stderr_fd() as captured:
    try:
      import tensorflow as tf
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


# --- the inspect command --------------------------------------------------------


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


def _inspect(args, out: TextIO) -> int:
  tf = import_tensorflow()
  if args.saved_model and os.path.isfile(args.saved_model):
    target = _frozen_graph_target(tf, args)
  elif args.inputs or args.outputs:
    raise CLIError("--inputs/--outputs go with a frozen GraphDef file")
  else:
    target = (_saved_model_target(tf, args) if args.saved_model
              else _example_target(tf, args.example or examples.DEFAULT))

  import tfprims
  start = time.perf_counter()
  jax_fn, params = (target.convert() if target.convert is not None
                    else tfprims.convert(target.concrete_fn))
  convert_s = time.perf_counter() - start
  if target.make_inputs is not None:
    target.args, target.kwargs = target.make_inputs()

  report = Report(out, full=args.full, max_equations=args.max_equations)
  report.header(target, jax_fn, params, convert_s)

  closed = _make_jaxpr(jax_fn, params, target)
  report.histogram(closed, _graph_op_counts(target.concrete_fn, target.graph_def))
  report.jaxpr(closed, _input_names(params, target, jax_fn))

  comparison = compare(jax_fn, params, target, args.tolerance)
  report.comparison(comparison)
  return EXIT_OK if comparison.ok else EXIT_MISMATCH


def _ops(args, out: TextIO) -> int:
  if bool(args.source) == bool(args.example):
    raise CLIError("give either SRC or --example")
  import_tensorflow()
  from tfprims import op_report
  if args.example:
    target = _example_target(None, args.example)
    report = op_report.report_concrete_function(target.concrete_fn, source=target.title)
  else:
    report = op_report.report_path(args.source, args.signature,
                                   args.outputs.split(",") if args.outputs else None)
  if args.json:
    import json
    print(json.dumps(report.as_json(), indent=1), file=out)
  else:
    print(report.format(), file=out)
  return EXIT_OK if report.convertible else EXIT_MISMATCH


def _export(args, out: TextIO) -> int:
  if bool(args.source) == bool(args.example):
    raise CLIError("give either SRC or --example")
  import_tensorflow()
  import tfprims
  from tfprims import deploy
  if args.example:
    target = _example_target(None, args.example)
    jax_fn, params = tfprims.convert(target.concrete_fn)
    source = target.title
  elif os.path.isfile(args.source):
    if not (args.inputs and args.outputs):
      raise CLIError("a frozen graph needs --inputs and --outputs")
    from tfprims import op_report
    try:
      graph_def = op_report.read_graph_def(args.source)
    except Exception as e:  # noqa: BLE001 (protobuf raises several kinds)
      raise CLIError(f"{args.source!r} is not a GraphDef file: {e}") from None
    jax_fn = tfprims.convert_graph_def(graph_def, args.inputs.split(","),
                                       args.outputs.split(","))
    params, source = {}, f"frozen graph {args.source}"
  else:
    if not os.path.isdir(args.source):
      raise CLIError(f"{args.source!r} is not a SavedModel directory or a GraphDef file")
    jax_fn, params = tfprims.load_saved_model(args.source, args.signature)
    source = f"SavedModel {args.source} (signature {args.signature!r})"
  manifest = deploy.export(jax_fn, params, args.out, batch_polymorphic=args.batch_polymorphic,
                           batch=args.batch, shapes=dict(args.shape or ()),
                           constraints=args.constraint or (), source=source,
                           platforms=args.platforms.split(",") if args.platforms else None)
  ins = ", ".join(f"{i['name']}: {i['dtype']}{i['shape']}" for i in manifest["inputs"])
  print(f"tfprims export: {source} -> {args.out}\n  inputs: {ins}\n  outputs: "
        + ", ".join(f"{o['name']}: {o['dtype']}{o['shape']}" for o in manifest["outputs"])
        + f"\n  params: {len(manifest['params'])} arrays; platforms: "
        + ",".join(manifest["platforms"]), file=out)
  return EXIT_OK


def _compare(args, out: TextIO) -> int:
  if bool(args.source) == bool(args.example):
    raise CLIError("give either SRC or --example")
  if (args.inputs or args.outputs) and not (args.source and os.path.isfile(args.source)):
    raise CLIError("--inputs/--outputs go with a frozen GraphDef file")
  if args.source and not os.path.exists(args.source):
    raise CLIError(f"{args.source!r} does not exist (expected a SavedModel directory or a "
                   "frozen GraphDef file)")
  import_tensorflow()
  from tfprims.comparison import command
  return command.run(args, out)


def _example_target(tf, name: str) -> Target:
  ex = examples.build(name)
  cf = ex.tf_fn.get_concrete_function(*ex.inputs)
  return Target(title=f"example '{name}'", description=ex.description, concrete_fn=cf,
                call_tf=ex.tf_fn, args=tuple(ex.inputs))


def _saved_model_target(tf, args) -> Target:
  path = args.saved_model
  if not os.path.isdir(path):
    raise CLIError(f"{path!r} is not a directory (expected a SavedModel directory)")
  if not any(os.path.exists(os.path.join(path, f))
             for f in ("saved_model.pb", "saved_model.pbtxt")):
    raise CLIError(f"{path!r} is not a SavedModel: it has no saved_model.pb")
  try:
    restored = tf.saved_model.load(path)
  except Exception as e:  # noqa: BLE001 (TF raises many kinds)
    first = str(e).strip().splitlines()[0] if str(e).strip() else ""
    raise CLIError(f"cannot load the SavedModel {path!r}: {type(e).__name__}: {first}") from None
  signatures = dict(getattr(restored, "signatures", {}) or {})
  if not signatures:
    raise CLIError(f"the SavedModel {path!r} has no signatures; save it with "
                   "tf.saved_model.save(obj, dir, signatures=...) or give the "
                   "tf.function an input_signature")
  if args.signature not in signatures:
    raise CLIError(f"the SavedModel {path!r} has no signature {args.signature!r}; "
                   f"it has: {', '.join(sorted(signatures))} (use --signature NAME)")
  sig = signatures[args.signature]
  sig_args, sig_kwargs = sig.structured_input_signature
  rng = np.random.default_rng(args.seed)
  make = lambda spec: _example_value(spec, rng, args.unknown_dim)  # noqa: E731

  def make_inputs():
    import tree
    return (tuple(tree.map_structure(make, tuple(sig_args))),
            dict(tree.map_structure(make, dict(sig_kwargs))))
  # Keep the restored object alive: the signature's variables belong to it.
  call_tf = lambda *a, _keep=restored, **k: sig(*a, **k)  # noqa: E731
  return Target(title=f"SavedModel {path}", description=f"signature '{args.signature}'",
                concrete_fn=sig, call_tf=call_tf, make_inputs=make_inputs)


def _frozen_graph_target(tf, args) -> Target:
  from tfprims import tf1
  path = args.saved_model
  if not (args.inputs and args.outputs):
    raise CLIError("a frozen graph needs --inputs and --outputs (tensor names, "
                   "comma-separated)")
  inputs, outputs = args.inputs.split(","), args.outputs.split(",")
  try:
    graph_def = tf1.read_graph_def(path)
  except Exception as e:  # noqa: BLE001 (protobuf raises several kinds)
    raise CLIError(str(e)) from None
  graph = tf.Graph()
  with graph.as_default():
    tf.compat.v1.import_graph_def(graph_def, name="")
  try:
    feeds = [graph.get_tensor_by_name(tf1.tensor_name(i)) for i in inputs]
    fetches = [graph.get_tensor_by_name(tf1.tensor_name(o)) for o in outputs]
  except (KeyError, ValueError) as e:
    raise CLIError(f"{path!r}: {e}") from None
  session = tf.compat.v1.Session(graph=graph)
  rng = np.random.default_rng(args.seed)

  def make_inputs():
    specs = [tf.TensorSpec(t.shape, t.dtype) for t in feeds]
    return tuple(_example_value(s, rng, args.unknown_dim) for s in specs), {}

  def call_tf(*values):  # TF1 graph mode: a session runs the imported graph
    return session.run(fetches, dict(zip(feeds, values)))

  def convert():
    return tf1.convert_frozen(graph_def, inputs, outputs, name=os.path.basename(path)), {}
  return Target(title=f"frozen graph {path}",
                description=f"inputs {', '.join(inputs)}; outputs {', '.join(outputs)}",
                concrete_fn=None, call_tf=call_tf, make_inputs=make_inputs,
                convert=convert, graph_def=graph_def)


def _example_value(spec, rng, unknown_dim: int):
  """A deterministic example value for one ``tf.TensorSpec``."""
  import tensorflow as tf
  if not isinstance(spec, tf.TensorSpec):
    return spec  # non-tensor leaves (None, Python values) are passed as they are
  if spec.shape.rank is None:
    shape = (unknown_dim,)
  else:
    shape = tuple(unknown_dim if d is None else d for d in spec.shape.as_list())
  dtype = spec.dtype
  if dtype.is_floating:
    return rng.standard_normal(shape).astype(dtype.as_numpy_dtype)
  if dtype.is_complex:
    return (rng.standard_normal(shape) + 1j * rng.standard_normal(shape)).astype(
        dtype.as_numpy_dtype)
  if dtype.is_integer or dtype.is_bool:
    return np.zeros(shape, dtype.as_numpy_dtype)
  raise CLIError(f"cannot build an example value for input '{spec.name}' of dtype "
                 f"{dtype.name}")


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
  return ([f"param {k}" for k in sorted(params)] +
          [f"input {name}" for name in input_names])


# --- op counts -----------------------------------------------------------------


def _graph_op_counts(concrete_fn, graph_def=None) -> collections.Counter:
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


# --- comparison with TF ----------------------------------------------------------


@dataclasses.dataclass
class OutputDiff:
  name: str
  shape: tuple
  tf_dtype: str
  jax_dtype: str
  max_abs: float          # inf when shapes differ or non-finite values disagree
  scale: float            # max |tf| over finite values
  note: str = ""


@dataclasses.dataclass
class Comparison:
  outputs: list
  tolerance: float
  seconds: float

  @property
  def max_abs(self) -> float:
    return max((o.max_abs for o in self.outputs), default=0.0)

  @property
  def scale(self) -> float:
    return max((o.scale for o in self.outputs), default=0.0)

  @property
  def relative(self) -> float:
    return self.max_abs / self.scale if self.scale > 0 else (
        0.0 if self.max_abs == 0 else float("inf"))

  @property
  def ok(self) -> bool:
    return self.max_abs <= self.tolerance * max(1.0, self.scale)


def compare(jax_fn, params, target: Target, tolerance: float) -> Comparison:
  """Runs the converted function (jitted) and TF on the example inputs."""
  import jax
  import tree
  start = time.perf_counter()
  jax_out = jax.jit(_call_converted(jax_fn))(params, target.args, target.kwargs)
  jax_out = jax.block_until_ready(jax_out)
  seconds = time.perf_counter() - start
  tf = sys.modules["tensorflow"]
  try:
    tf_out = target.call_tf(*target.args, **target.kwargs)
  except (tf.errors.OpError, ValueError, TypeError) as e:
    first = (str(e).strip().splitlines() or [""])[0]
    raise CLIError(f"TensorFlow itself fails on the example inputs ({type(e).__name__}: "
                   f"{first}); for a SavedModel, try another --unknown-dim") from None

  tf_leaves = tree.flatten_with_path(tf_out)
  jax_leaves = tree.flatten(jax_out)
  if len(tf_leaves) != len(jax_leaves):
    raise CLIError(f"TF returned {len(tf_leaves)} outputs but the converted function "
                   f"returned {len(jax_leaves)}")
  diffs = []
  for i, ((path, t), j) in enumerate(zip(tf_leaves, jax_leaves)):
    name = "/".join(str(p) for p in path) or ("output" if len(tf_leaves) == 1 else f"output_{i}")
    diffs.append(_diff(name, np.asarray(t), np.asarray(j)))
  return Comparison(diffs, tolerance, seconds)


def _diff(name: str, t: np.ndarray, j: np.ndarray) -> OutputDiff:
  diff = OutputDiff(name, t.shape, t.dtype.name, j.dtype.name, 0.0, 0.0)
  if t.shape != j.shape:
    diff.max_abs, diff.note = float("inf"), f"shape differs: jax {list(j.shape)}"
    return diff
  if t.dtype.kind in "biu" or t.dtype.kind not in "fc" and j.dtype.kind not in "fc":
    wrong = int(np.count_nonzero(t != j))
    if t.dtype.kind == "b":
      diff.max_abs = float("inf") if wrong else 0.0
    else:
      with np.errstate(over="ignore"):
        delta = np.abs(t.astype(np.float64) - j.astype(np.float64))
      diff.max_abs = float(delta.max()) if delta.size else 0.0
      diff.scale = float(np.abs(t.astype(np.float64)).max()) if t.size else 0.0
    if wrong:
      diff.note = f"{wrong} of {t.size} values differ"
    return diff
  wide = np.complex128 if "c" in (t.dtype.kind, j.dtype.kind) else np.float64
  a, b = t.astype(wide), j.astype(wide)
  same = (a == b) | (np.isnan(a) & np.isnan(b))
  with np.errstate(invalid="ignore", over="ignore"):
    delta = np.where(same, 0.0, np.abs(a - b))
  delta = np.where(np.isnan(delta), np.inf, delta)
  diff.max_abs = float(delta.max()) if delta.size else 0.0
  finite = np.abs(a[np.isfinite(a)])
  diff.scale = float(finite.max()) if finite.size else 0.0
  bad = int(np.count_nonzero(~np.isfinite(delta)))
  if bad:
    diff.note = f"{bad} non-finite value(s) disagree"
  return diff
