"""Runs a graph twice, node by node, TF's kernels beside tfprims', comparing as it goes.

Every value is a :class:`Pair`: TF's eager tensor and tfprims' value for one node
output. The walker runs calls and control flow itself, on both sides at once
(function calls inlined per call site; ``If``/``Case`` branches; ``While`` and
``For`` loops iteration by iteration), so that every node inside them is compared
where it runs; TF's predicates decide which branch runs and when a loop stops, so
both sides run the same nodes. Every other node runs on TF through
:class:`~tfprims.comparison.tf_eager.TFEager` and on tfprims through
``interpreter.run_node``, exactly as a converted function's eager call runs it.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable, Optional

import jax
import jax.numpy as jnp
import numpy as np

from tfprims import core, dtypes, graph as graph_lib, interpreter
from tfprims.progress import Progress
from tfprims.comparison import records, stats
from tfprims.comparison.tf_eager import TFEager, TFNodeError, numpy_value
from tfprims.errors import import_tensorflow

# Ops never run a second time to check where a difference starts: their results
# depend on (or change) the state of the call.
_NOT_RERUN = ("writes_state", "reads_state", "uses_rng", "calls_functions")

# Node outputs whose comparisons run in the background before they are recorded: the
# statistics of large tensors are computed while the next nodes run (bounded, so
# that only a few of the tensors compared are held).
PENDING = 32


@dataclasses.dataclass
class Pair:
  """One node output on both sides.

  ``tf``: TF's eager tensor (None where TF could not compute it); ``ours``: tfprims'
  value; ``source``: the (node path, output) that produced it; ``agrees``: within
  tolerance (values not compared inherit it from their inputs); ``exact``: bit for
  bit equal (likewise); both None until the comparison is recorded (True for graph
  inputs). ``scale``: the scale its error was judged against (its largest finite
  ``|TF value|``, or its operands' for sums: see :mod:`~tfprims.comparison.stats`)."""

  tf: Any
  ours: Any
  source: tuple
  agrees: Optional[bool] = True
  exact: Optional[bool] = True
  scale: Optional[float] = None


@dataclasses.dataclass
class _Observation:
  """One run of one node output, recorded once its statistics are in (``measured``: a
  function giving them; None where the values are not compared)."""

  node: graph_lib.Node
  record: records.NodeRecord
  pair: Pair
  inputs: list
  iteration: Optional[tuple]
  measured: Optional[Callable[[], stats.Measured]] = None
  same_draw: bool = False  # a random op: TF's draw fed forward on both sides


@dataclasses.dataclass
class Settings:
  rtol: Optional[float] = None
  atol: Optional[float] = None
  isolate: bool = False


class Walker:
  """Runs graphs of one library on both sides, recording every node output."""

  def __init__(
    self,
    ctx: interpreter.Context,
    tf_eager: TFEager,
    settings: Settings,
    recorder: records.Recorder,
    progress: Progress,
  ):
    self.ctx, self.tf, self.settings = ctx, tf_eager, settings
    self.recorder, self.progress = recorder, progress
    self.scopes: dict[str, str] = {}  # path prefix -> what runs there (for reports)
    self._iterations: list[int] = []  # the iteration of each enclosing loop
    self._pending: list[_Observation] = []  # compared, not yet recorded

  # --- graphs --------------------------------------------------------------------------

  def run_graph(
    self, graph: graph_lib.Graph, feeds: dict, scope: str = "", strip: str = ""
  ) -> list:
    """Runs ``graph`` with ``feeds`` (input name -> Pair); returns its output Pairs.
    Its nodes' paths are ``scope`` + their names, less a leading ``strip`` (TF names
    the nodes of a loop body after the loop: ``while/while/x`` reads ``while/x``)."""
    env: dict[str, list] = {name: [pair] for name, pair in feeds.items()}
    for node, drops in graph.schedule:
      if node.name not in env:
        inputs = [env[name][index] for name, index in node.inputs]
        name = node.name[len(strip) :] if strip and node.name.startswith(strip) else node.name
        env[node.name] = self._run_node(node, inputs, scope + name)
      for name in drops:  # keep only the values still to be read
        env.pop(name, None)
    return [env[name][index] for name, index in graph.outputs]

  def _run_node(self, node, inputs: list, path: str) -> list:
    op = core.lookup(node.op)
    kind = "call" if node.op in self.ctx.library else op and op.calls_functions
    if kind == "call":
      fname = node.op if node.op in self.ctx.library else node.attr("f").name
      return self._call(fname, inputs, path + "/", f"call of {fname}", node)
    if kind == "if":
      branch = "then_branch" if _truth(inputs[0]) else "else_branch"
      return self._call(
        node.attr(branch).name,
        inputs[1:],
        f"{path}/{branch[:4]}/",
        f"{node.op} {branch.replace('_', ' ')}",
        node,
      )
    if kind == "case":
      return self._case(node, inputs, path)
    if kind == "while":
      return self._while(node, inputs, path)
    if kind == "for":
      return self._for(node, inputs, path)
    return self._leaf(node, inputs, path)

  def _call(self, fname: str, inputs: list, scope: str, what: str, node) -> list:
    graph = self.ctx.library.graph(fname)
    self.scopes.setdefault(scope.rstrip("/"), what)
    return self.run_graph(graph, dict(zip(graph.inputs, inputs)), scope, node.name + "/")

  def _case(self, node, inputs: list, path: str) -> list:
    branches = [f.name for f in node.attr("branches")]
    index = int(_value(inputs[0]))
    index = index if 0 <= index < len(branches) else len(branches) - 1  # TF: the last
    return self._call(
      branches[index], inputs[1:], f"{path}/branch{index}/", f"{node.op} branch {index}", node
    )

  def _while(self, node, inputs: list, path: str) -> list:
    cond, body = node.attr("cond").name, node.attr("body").name
    values, iteration = list(inputs), 0
    self._iterations.append(0)
    try:
      while True:
        self._iterations[-1] = iteration
        keep_going = self._call(cond, values, f"{path}/cond/", f"{node.op} condition", node)
        if not _truth(keep_going[0]):
          return values
        values = self._call(body, values, f"{path}/body/", f"{node.op} body", node)
        iteration += 1
    finally:
      self._iterations.pop()

  def _for(self, node, inputs: list, path: str) -> list:
    start, limit, delta = (int(_value(p)) for p in inputs[:3])
    values = list(inputs[3:])
    self._iterations.append(0)
    try:
      for iteration, i in enumerate(range(start, limit, delta)):
        self._iterations[-1] = iteration
        index = self._constant(np.int32(i), (path, 0))
        values = self._call(
          node.attr("body").name, [index] + values, f"{path}/body/", "For body", node
        )
      return values
    finally:
      self._iterations.pop()

  def _constant(self, value: np.ndarray, source: tuple) -> Pair:
    tf = import_tensorflow()
    return Pair(tf.constant(value), value, source)

  # --- one node on both sides ----------------------------------------------------------

  def _leaf(self, node, inputs: list, path: str) -> list:
    self.progress.step()
    random = core.declares(node.op, "uses_rng")
    tf_outputs, tf_problem = self._run_tf(node, inputs)
    if random and tf_problem is None:
      # tfprims draws from jax.random, not TF's stream: follow TF's draw from here on.
      ours = [self._ours_from_tf(t, None) for t in tf_outputs]
    else:
      ours = interpreter.run_node(self.ctx, node, [self._ours_input(p) for p in inputs])
    if tf_problem is not None:
      tf_outputs = [self.tf.from_ours(value) for value in ours]
    sources = tuple(p.source for p in inputs)
    pairs = []
    for index, (tf_value, value) in enumerate(zip(tf_outputs, ours)):
      record = records.NodeRecord(
        node=path,
        op=node.op,
        output=index,
        shape=_shape(tf_value, value),
        dtype=_dtype_name(tf_value, value),
        status=records.NOT_COMPARED,
        inputs=sources,
      )
      pair = Pair(tf_value, value, (path, index), agrees=None, exact=None)
      observation = _Observation(node, record, pair, inputs, self._iteration())
      if random and tf_problem is None:
        record.status, record.note = records.RANDOM, "random, not compared: TF's value fed forward"
        observation.same_draw = True
      elif tf_problem is not None:
        record.note = f"TF could not run it ({tf_problem}); tfprims' value fed to TF"
      else:
        self._compare(observation)
      self._pending.append(observation)
      pairs.append(pair)
    if len(self._pending) >= PENDING:
      self.settle()
    return pairs

  def _compare(self, observation: "_Observation") -> None:
    pair, record = observation.pair, observation.record
    # A TF1 reference variable's value is what consumers read now (interpreter.deref).
    expected = numpy_value(pair.tf)
    actual = _ours_array(interpreter.deref(self.ctx, pair.ours))
    if expected is None or actual is None:
      record.note = "not a numeric tensor"
      return
    observation.measured = stats.measure_later(expected, actual)

  def settle(self) -> None:
    """Records the pending observations, in the order their nodes ran."""
    for observation in self._pending:
      self._settle(observation)
    self._pending.clear()

  def _settle(self, observation: "_Observation") -> None:
    record, pair, inputs = observation.record, observation.pair, observation.inputs
    record.inputs_agree = all(p.agrees for p in inputs)
    inputs_exact = all(p.exact for p in inputs)
    measured = observation.measured() if observation.measured is not None else None
    diff, not_origin = None, None
    if measured is not None:
      operand_scale = (
        max((p.scale for p in inputs if p.scale is not None), default=0.0)
        if stats.operand_scaled(record.op)
        else 0.0
      )
      diff = stats.judge(measured, self.settings.rtol, self.settings.atol, operand_scale)
      pair.scale = diff.scale
      if not diff.within and record.inputs_agree and not self.settings.isolate:
        not_origin = self._not_origin(observation, measured, inputs_exact)
    self.recorder.observe(record, diff, observation.iteration, not_origin=not_origin)
    if observation.same_draw:  # both sides go on with the same draw
      pair.agrees = pair.exact = True
    elif diff is None:  # values not compared inherit their inputs' agreement
      pair.agrees, pair.exact = record.inputs_agree, inputs_exact
    else:
      pair.agrees, pair.exact = diff.within, diff.exact

  def _not_origin(self, observation: "_Observation", measured, inputs_exact: bool):
    """Why a node out of tolerance while its inputs agree did not introduce the
    difference, or None if it did: integers or booleans of floats that differ
    (within tolerance) may differ at a near-tie; and an op that is within tolerance
    when it reads TF's exact inputs only carried (and amplified) its inputs' errors."""
    if measured.discrete and not inputs_exact:
      return records.FLIP_NOTE
    node = observation.node
    if inputs_exact or any(core.declares(node.op, prop) for prop in _NOT_RERUN):
      return None
    inputs = [
      self._ours_from_tf(p.tf, p.ours) if p.tf is not None else p.ours for p in observation.inputs
    ]
    value = interpreter.run_node(self.ctx, node, inputs)[observation.record.output]
    actual = _ours_array(interpreter.deref(self.ctx, value))
    isolated = stats.judge(
      stats.measure_later(numpy_value(observation.pair.tf), actual)(),
      self.settings.rtol,
      self.settings.atol,
    )
    return records.PROPAGATED_NOTE if isolated.within else None

  def _run_tf(self, node, inputs: list) -> tuple[list, Optional[str]]:
    try:
      return self.tf.run(node, [p.tf for p in inputs]), None
    except TFNodeError as e:
      return [], str(e)

  def _ours_input(self, pair: Pair):
    """What tfprims' node reads: its own value, or with ``isolate`` TF's."""
    if not self.settings.isolate or pair.tf is None:
      return pair.ours
    return self._ours_from_tf(pair.tf, pair.ours)

  def _ours_from_tf(self, tf_value, like):
    """TF's value as tfprims holds such a value: numpy where tfprims' own is known at
    trace time (static inputs must stay known), a JAX array otherwise."""
    array = numpy_value(tf_value)
    if array is None:
      return like
    array = dtypes.canonicalize_value(array, "a TF value")
    return array if core.is_concrete(like) else jnp.asarray(array)

  def _iteration(self) -> Optional[tuple]:
    return tuple(self._iterations) if self._iterations else None


def _truth(pair: Pair) -> bool:
  """TF's predicate truth: a scalar's value, a non-scalar's non-emptiness."""
  value = np.asarray(_value(pair))
  return bool(value.size > 0) if value.shape != () else bool(value)


def _value(pair: Pair):
  """A predicate's or index's value as TF computed it (tfprims' where TF could not)."""
  return numpy_value(pair.tf) if pair.tf is not None else np.asarray(pair.ours)


def _ours_array(value):
  """tfprims' value as an array (numpy, or JAX: compared where it is), or None where
  it is not a tensor (a variable handle, a TensorList, a string constant)."""
  if isinstance(value, np.generic):
    return np.asarray(value)
  if isinstance(value, (np.ndarray, jax.Array)):
    return value
  return None


def value_shape(pair: Pair) -> Optional[tuple]:
  """The shape of a pair's value (TF's where it has one)."""
  return _shape(pair.tf, pair.ours)


def _shape(tf_value, ours) -> Optional[tuple]:
  for value in (tf_value, ours):
    shape = getattr(value, "shape", None)
    if shape is not None:
      try:
        return tuple(int(d) for d in shape)
      except (TypeError, ValueError):
        continue
  return None


def _dtype_name(tf_value, ours) -> str:
  if tf_value is not None:
    return tf_value.dtype.name
  dtype = getattr(ours, "dtype", None)
  return np.dtype(dtype).name if dtype is not None else type(ours).__name__
