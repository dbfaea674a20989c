"""Where does a converted function start to differ from TF? Node by node, both sides.

    report = tfprims.compare(tf_fn, x)              # anything tfprims.convert takes
    report.first_divergence                         # the op that introduced a difference
    print(report.summary()); report.to_html("report.html")

    report = tfprims.compare_saved_model("path/to/saved_model")   # example inputs

Every node of the graph runs on TF's eager kernels and on tfprims' primitives, on the
same inputs and variables, inside function calls (per call site) and control flow
(per loop iteration) too; each output is compared and only its error statistics are
kept. See docs/compare.md.
"""

from __future__ import annotations

import time
from typing import Any, Optional, Sequence

from tfprims.comparison import programs, records
from tfprims.comparison.records import NodeRecord
from tfprims.comparison.report import OpSummary, Report
from tfprims.progress import Progress

__all__ = [
  "compare",
  "compare_saved_model",
  "compare_graph_def",
  "Report",
  "NodeRecord",
  "OpSummary",
  "run",
]


def compare(
  fn,
  *args,
  rtol: Optional[float] = None,
  atol: Optional[float] = None,
  rng=None,
  isolate: bool = False,
  **kwargs,
) -> Report:
  """Runs ``fn(*args, **kwargs)`` in TF and in tfprims node by node and compares them.

  Args:
    fn: anything :func:`tfprims.convert` takes: a ``tf.function``, a
      ``ConcreteFunction``, a restored SavedModel function, a Python callable of TF ops.
    *args, **kwargs: the inputs (arrays), as the function takes them.
    rtol, atol: tolerances of every inexact tensor (default: per dtype, the property
      tests' op tolerances times ``stats.PROGRAM_TOL_FACTOR``); integers and
      booleans are compared exactly.
    rng: a JAX key for tfprims' random ops (random ops are not compared: TF's draw is
      fed forward on both sides).
    isolate: feed every tfprims node TF's values of its inputs, so that each op is
      judged on exactly TF's inputs (its own error, not errors carried from upstream).

  Returns:
    a :class:`Report`.
  """
  program = programs.from_function(fn, args, kwargs)
  return run(program, rtol=rtol, atol=atol, rng=rng, isolate=isolate)


def compare_saved_model(
  path: str,
  inputs=None,
  signature: Optional[str] = "serving_default",
  *,
  rtol: Optional[float] = None,
  atol: Optional[float] = None,
  rng=None,
  isolate: bool = False,
  tags=None,
  seed: int = 0,
  unknown_dim: int = 2,
) -> Report:
  """:func:`compare` for a SavedModel signature.

  Args:
    path: the SavedModel directory.
    inputs: the signature's inputs by name (a dict), or None for example inputs
      (floats ~ N(0, 1) drawn with ``seed``, integers and booleans zero; unknown
      dims ``unknown_dim``).
    signature: the signature key (None: the only one).
    tags: MetaGraph tags of a TF1 SavedModel with several MetaGraphs.
  """
  program = programs.from_saved_model(
    path, inputs, signature, tags=tags, seed=seed, unknown_dim=unknown_dim
  )
  return run(program, rtol=rtol, atol=atol, rng=rng, isolate=isolate)


def compare_graph_def(
  graph_def,
  inputs: Sequence[str],
  outputs: Sequence[str],
  values: Sequence[Any],
  *,
  rtol: Optional[float] = None,
  atol: Optional[float] = None,
  rng=None,
  isolate: bool = False,
  title: str = "graph",
) -> Report:
  """:func:`compare` for a (frozen) GraphDef: ``values`` feed the Placeholder tensors
  ``inputs`` (``"x:0"`` or ``"x"``); ``outputs`` name the tensors computed."""
  program = programs.from_graph_def(graph_def, inputs, outputs, values, title)
  return run(program, rtol=rtol, atol=atol, rng=rng, isolate=isolate)


def run(
  program: programs.Program,
  *,
  rtol: Optional[float] = None,
  atol: Optional[float] = None,
  rng=None,
  isolate: bool = False,
  progress_stream=None,
) -> Report:
  """Compares ``program`` (see :mod:`tfprims.comparison.programs`) node by node."""
  from tfprims import interpreter
  from tfprims.comparison import tf_eager, walk

  start = time.perf_counter()
  ctx = interpreter.Context(program.library, dict(program.state), rng=rng, options=program.options)
  recorder = records.Recorder()
  progress = Progress(
    programs.node_count(program), f"tfprims compare {program.title}", stream=progress_stream
  )
  ctx.progress = progress  # nested function bodies count into it
  walker = walk.Walker(
    ctx,
    tf_eager.TFEager(program.graph_variables),
    walk.Settings(rtol, atol, isolate),
    recorder,
    progress,
  )
  feeds = {}
  for name in program.graph.inputs:
    pair = walk.Pair(program.tf_feeds[name], program.ours_feeds[name], (name, 0))
    feeds[name] = pair
    if name in program.user_inputs:
      recorder.observe(
        NodeRecord(
          name, "Placeholder", 0, walk.value_shape(pair), pair.tf.dtype.name, records.INPUT
        )
      )
  with interpreter.gc_paused():
    outputs = walker.run_graph(program.graph, feeds)
    walker.settle()
  progress.finish()
  by_key = {(r.node, r.output): r for r in recorder.records}
  return Report(
    title=program.title,
    nodes=recorder.records,
    first_divergence=recorder.first_divergence,
    first_divergence_iteration=recorder.first_divergence_iteration,
    outputs=[by_key[p.source] for p in outputs if p.source in by_key],
    scopes=walker.scopes,
    rtol=rtol,
    atol=atol,
    isolate=isolate,
    seconds=time.perf_counter() - start,
  )
