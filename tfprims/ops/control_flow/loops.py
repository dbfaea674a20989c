"""While/StatelessWhile.

Loop variables the body passes through unchanged are closed over, not carried (they stay
concrete when they are). Variables whose initial value is concrete and whose update depends
only on such variables (loop counters, ``tf.range`` indices) are *static*: when a conjunct
of the loop condition (the condition split at ``LogicalAnd``) depends only on static
variables, the trip count is computed at trace time and the loop becomes ``tf.While`` with
that length (counted.py: it means ``lax.scan``, which JAX can reverse-differentiate).
Remaining (dynamic) conjuncts become an early exit inside the loop (``lax.cond`` per step).
Loops whose body needs trace-time values (a growing TensorArray, an op with a static input
computed from the counter) are unrolled while their condition is known at trace time. A loop
whose condition becomes data-dependent and has no static bound becomes
``tf.While.unbounded`` (unbounded.py: ``lax.while_loop`` with reverse mode by checkpointed
recomputation); a body with effects stays a ``lax.while_loop``, whose reverse mode raises
:class:`errors.ReverseModeLoopError`. Variables the body writes and the rng key are carried
as loop state.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax
from jax.extend.core import Primitive
from jax.interpreters import ad, batching, mlir

from tfprims import core, errors, graph as graph_lib, interpreter, rules
from tfprims.core import structural
from tfprims.interpreter import StringConstant, VariableHandle
from tfprims.ops.control_flow import counted, unbounded
from tfprims.ops.control_flow.common import (
  IMPURE,
  as_jax,
  cache_of,
  coerce,
  conjuncts,
  join_lists,
  ref_deps,
  resolve_identity,
  restore,
  save,
  state_keys,
  structure_mismatch,
  truth,
  uses_rng,
  value_subgraph,
)
from tfprims.ops.control_flow.optional import OptionalValue
from tfprims.ops.tensorlist import (
  NeedsConcreteIndex,
  TensorList,
  UnavailableList,
  host_rows,
  is_variant_list,
)

FAMILY = "control_flow"

# Loops whose trip count is known but whose body needs trace-time values are
# unrolled up to this many iterations.
UNROLL_LIMIT = 1000
# A static trip count is computed by iterating the loop counters at trace time,
# up to this many iterations (beyond: the loop is treated as dynamic).
MAX_STATIC_TRIP_COUNT = 1_000_000


class _Unroll(errors.TFPrimsError):
  """The scan body needs trace-time values: unroll instead (internal)."""

  def __init__(self, reason):
    super().__init__(reason)
    self.reason = reason


class _CondBecameTraced(Exception):
  """An unrolled loop's condition stopped being known at trace time (internal)."""


def _at_most(n, limit: int) -> bool:
  """Whether trip count ``n`` is at most ``limit``; a symbolic count is not."""
  return rules.known((n,)) and n <= limit


class _Rematerialize(Exception):
  """Carried lists gained items inside the body: retry with materialized lists.
  ``init()`` builds them where the loop starts, outside the body's trace: zeros of a
  symbolic size (jax.export) are the program's values, and must be the outer trace's."""

  def __init__(self, init):
    super().__init__("rematerialize")
    self.init = init


def _unrollable(ctx) -> list:
  """One entry per enclosing loop whose scan body is being traced: True when that loop
  could be unrolled instead (so an inner loop whose bound depends on the outer counter
  can ask for it)."""
  return ctx.family_state.setdefault(__name__ + ".unrollable", [])


def _consumers(graph: graph_lib.Graph) -> dict:
  """Input/node name -> names of the nodes reading it (data inputs) or '<output>'."""
  cache = cache_of(graph)
  if "consumers" not in cache:
    users: dict[str, set] = {}
    for n in graph.nodes:
      for ref in n.inputs:
        users.setdefault(ref[0], set()).add(n.name)
    for ref in graph.outputs:
      users.setdefault(ref[0], set()).add("<output>")
    cache["consumers"] = users
  return cache["consumers"]


def _accumulators(body: graph_lib.Graph, cond: graph_lib.Graph) -> dict:
  """Loop vars that are only pushed to (``TensorListPushBack(var, value)`` is the
  body's output and nothing else reads the var): index -> ref of the pushed value.
  TF's gradient rewrite adds such accumulators; they become scan outputs."""
  cache = cache_of(body)
  if "accumulators" in cache:
    return cache["accumulators"]
  found = {}
  users = _consumers(body)
  cond_users = _consumers(cond)
  for i, ref in enumerate(body.outputs):
    node = body.by_name.get(resolve_identity(body, ref)[0])
    name = body.inputs[i]
    if (
      node is not None
      and node.op == "TensorListPushBack"
      and node.inputs[0] == (name, 0)
      and users.get(name, set()) == {node.name}
      and not cond_users.get(cond.inputs[i])
    ):
      found[i] = node.inputs[1]
  cache["accumulators"] = found
  return found


@dataclasses.dataclass
class _Loop:
  ctx: Any
  node: graph_lib.Node
  inputs: list

  def __post_init__(self):
    node, ctx = self.node, self.ctx
    self.cond_name, self.body_name = node.attr("cond").name, node.attr("body").name
    self.cond_g = ctx.library.graph(self.cond_name)
    self.body_g = ctx.library.graph(self.body_name)
    n = len(self.inputs)
    if len(self.body_g.outputs) != n or len(self.body_g.inputs) != n:
      raise errors.OpError(node.op, node.name, "body signature does not match the loop vars")
    cache = cache_of(self.body_g)
    if "invariant" not in cache:
      cache["invariant"] = [
        resolve_identity(self.body_g, ref) == (self.body_g.inputs[i], 0)
        for i, ref in enumerate(self.body_g.outputs)
      ]
    self.invariant = cache["invariant"]
    self.acc = {
      i: r
      for i, r in _accumulators(self.body_g, self.cond_g).items()
      if isinstance(self.inputs[i], TensorList)
    }
    if self.acc:
      key = ("emit", tuple(sorted(self.acc.items())))
      if key not in cache:
        outs = [self.acc.get(i, ref) for i, ref in enumerate(self.body_g.outputs)]
        cache[key] = graph_lib.Graph(
          name=self.body_g.name,
          nodes=self.body_g.nodes,
          inputs=list(self.body_g.inputs),
          outputs=outs,
          control_outputs=list(self.body_g.control_outputs),
        )
      self.body_run = cache[key]
    else:
      self.body_run = self.body_g
    self.keys = state_keys(ctx, [self.cond_name, self.body_name], self.inputs)
    self.use_rng = uses_rng(ctx, [self.body_name])
    self.carried = [i for i in range(n) if not self.invariant[i] and i not in self.acc]
    # Pushes known when the body is traced once for every iteration (a scan) are the
    # same in every iteration: TF's gradient code accumulates list lengths and element
    # shapes that way, and its backward loop reserves lists of those sizes.
    self.constant_pushes: dict = {}
    self.where = f"{node.op} node '{node.name}' (body {self.body_name!r})"

  # --- analysis ----------------------------------------------------------------------------

  def static_vars(self, assume_concrete=()) -> set:
    concrete = [core.is_concrete(v) or i in assume_concrete for i, v in enumerate(self.inputs)]
    fixed = {i for i in range(len(self.inputs)) if self.invariant[i] and concrete[i]}
    static = {i for i in self.carried if concrete[i]}
    while True:
      keep = set()
      for i in static:
        d = ref_deps(self.body_g, self.body_g.outputs[i])
        if d is not IMPURE and d <= (static | fixed):
          keep.add(i)
      if keep == static:
        break
      static = keep
    self.fixed = fixed
    return static

  def _static_conjuncts(self, static):
    known = static | self.fixed
    static_conj, dynamic_conj = [], []
    for ref in conjuncts(self.cond_g):
      d = ref_deps(self.cond_g, ref)
      (static_conj if d is not IMPURE and d <= known else dynamic_conj).append(ref)
    return static_conj, dynamic_conj

  def trip_count(self, static: set):
    """(n, dynamic conjunct refs, final static values); n is None when unbounded."""
    static_conj, dynamic_conj = self._static_conjuncts(static)
    if not static_conj:
      return None, dynamic_conj, None
    order = sorted(static)
    values = list(self.inputs)
    conj = static_conj + dynamic_conj
    fast = self._affine_trip_count(order, static_conj, values)
    if fast is not None:
      return fast[0], dynamic_conj, fast[1]
    cond_sub = value_subgraph(self.cond_g, static_conj)
    body_sub = value_subgraph(self.body_g, [self.body_g.outputs[i] for i in order])
    n = 0
    while True:
      preds = self.ctx.run(cond_sub, values)
      if not all(core.is_concrete(p) and np.shape(p) == () for p in preds):
        return None, conj, None
      if not all(bool(np.asarray(p)) for p in preds):
        break
      if n >= MAX_STATIC_TRIP_COUNT:
        return None, conj, None
      new = self.ctx.run(body_sub, values)
      if not all(core.is_concrete(v) for v in new):
        return None, conj, None
      for i, v in zip(order, new):
        values[i] = v
      n += 1
    return n, dynamic_conj, values

  def _affine_trip_count(self, order, static_conj, values):
    """Closed-form trip count when every static variable is an integer counter
    (``v + c`` / ``c + v`` / ``v - c`` with ``c`` loop-invariant and known) and every
    static conjunct compares such counters or constants (``Less``, ``LessEqual``,
    ``Greater``, ``GreaterEqual``): (n, final values) or None when the pattern does
    not apply. Nothing is folded through XLA: the steps are the constants ``c``."""
    body, cond = self.body_g, self.cond_g
    step = {}
    for i in order:
      v = values[i]
      if not (np.shape(v) == () and np.asarray(v).dtype.kind in "iu"):
        return None
      node = body.by_name.get(resolve_identity(body, body.outputs[i])[0])
      if node is None or node.op not in ("AddV2", "Add", "Sub") or len(node.inputs) != 2:
        return None
      refs = [resolve_identity(body, r) for r in node.inputs]
      self_ref = (body.inputs[i], 0)
      if refs.count(self_ref) != 1 or (node.op == "Sub" and refs[0] != self_ref):
        return None
      other = refs[1] if refs[0] == self_ref else refs[0]
      d = ref_deps(body, other)
      if d is IMPURE or not d <= self.fixed:  # the step must not change between iterations
        return None
      c = self._known_value(body, other, values)
      if not core.is_concrete(c) or np.shape(c) != () or np.asarray(c).dtype.kind not in "iu":
        return None
      step[i] = -int(np.asarray(c)) if node.op == "Sub" else int(np.asarray(c))
    flips = {"Less": False, "LessEqual": False, "Greater": True, "GreaterEqual": True}
    terms = []
    for ref in static_conj:
      node = cond.by_name.get(resolve_identity(cond, ref)[0])
      if node is None or node.op not in flips or ref[1] != 0:
        return None
      terms.append((node, [resolve_identity(cond, r) for r in node.inputs]))
    index = {name: k for k, name in enumerate(cond.inputs)}
    n_max = None
    for node, (a, b) in terms:
      lin = []
      for r in (a, b):
        if r[0] in index and index[r[0]] in step:
          lin.append((int(np.asarray(values[index[r[0]]])), step[index[r[0]]]))
        else:
          d = ref_deps(cond, r)
          if d is IMPURE or d & set(step):
            return None
          c = self._known_value(cond, r, values)
          if not core.is_concrete(c) or np.shape(c) != () or np.asarray(c).dtype.kind not in "iuO":
            return None
          # A bound may be a symbolic dim (tf.shape(x)[0] under jax.export): the trip
          # count is then symbolic, and the loop a scan of that length.
          lin.append((rules.sizes(c)[0], 0))
      if flips[node.op]:
        lin.reverse()
      d0, dd = lin[0][0] - lin[1][0], lin[0][1] - lin[1][1]
      strict = node.op in ("Less", "Greater")  # true while d < 0 (strict) or d <= 0
      if (d0 >= 0) if strict else (d0 > 0):
        k = 0
      elif dd <= 0:
        continue  # never becomes false
      else:
        k = -(d0 // dd) if strict else (-d0) // dd + 1  # ceil(-d0 / dd); floor + 1
      n_max = k if n_max is None else jax.core.min_dim(n_max, k)
    if n_max is None or (type(n_max) is int and n_max > MAX_STATIC_TRIP_COUNT):
      return None
    final = list(values)
    for i in order:
      v = np.asarray(values[i])
      end = int(v) + n_max * step[i]
      if type(end) is not int:  # symbolic: the counter's type holds the dim's size
        final[i] = np.asarray(end, dtype=object)
        continue
      if not np.iinfo(v.dtype).min <= end <= np.iinfo(v.dtype).max:
        return None  # the counter wraps around: iterate instead
      final[i] = np.asarray(end, v.dtype)
    return n_max, final

  def _known_value(self, graph, ref, values):
    """The value of ``ref`` in ``graph`` (an input or a Const read directly; else the
    subgraph computing it is evaluated)."""
    if ref[1] == 0:
      if ref[0] in graph.inputs:
        return values[graph.inputs.index(ref[0])]
      node = graph.by_name.get(ref[0])
      if node is not None and node.op == "Const":
        return interpreter.run_node(self.ctx, node, [])[0]
    return self.ctx.run(value_subgraph(graph, [ref]), values)[0]

  def _bound_depends_on_traced_ints(self) -> bool:
    """Whether the loop would have a static bound if its traced integer scalars
    (e.g. an enclosing loop's counter) were known."""
    ints = {
      i
      for i, v in enumerate(self.inputs)
      if not core.is_concrete(v)
      and hasattr(v, "dtype")
      and np.shape(v) == ()
      and jnp.issubdtype(v.dtype, jnp.integer)
    }
    if not ints:
      return False
    static_conj, _ = self._static_conjuncts(self.static_vars(assume_concrete=ints))
    self.static_vars()  # restore self.fixed
    return bool(static_conj)

  # --- running -----------------------------------------------------------------------------

  def run(self):
    static = self.static_vars()
    n, dynamic_conj, final_static = self.trip_count(static)
    if n is not None:
      if n == 0:
        return self._zero_trip()
      unrollable = not dynamic_conj and _at_most(n, UNROLL_LIMIT)
      _unrollable(self.ctx).append(unrollable)
      try:
        return self.scan(n, dynamic_conj, static, final_static)
      except _Unroll as e:
        if dynamic_conj:
          raise errors.ControlFlowError(
            f"{self.where}: {e.reason}; the loop also has a data-dependent exit "
            "condition, so it cannot be unrolled"
          ) from None
        if not _at_most(n, UNROLL_LIMIT):
          raise errors.ControlFlowError(
            f"{self.where}: {e.reason}; unrolling its {n} iterations exceeds "
            f"tfprims.ops.control_flow.loops.UNROLL_LIMIT={UNROLL_LIMIT}"
          ) from None
      finally:
        _unrollable(self.ctx).pop()
      return self.unroll()
    if self.cond_is_concrete():
      saved = save(self.ctx)
      try:
        return self.unroll()
      except _CondBecameTraced:
        # The condition depends on data after all (x += tf.reduce_max(y)): the
        # iterations traced so far are dropped and the loop runs as a real loop.
        restore(self.ctx, saved)
    enclosing = _unrollable(self.ctx)
    if enclosing and enclosing[-1] and self._bound_depends_on_traced_ints():
      raise _Unroll(
        f"the trip count of the inner loop {self.where} depends on the enclosing loop's variables"
      )
    return self.while_loop()

  def cond_is_concrete(self) -> bool:
    found = []

    def probe():  # traced abstractly, so nothing is emitted into the caller's jaxpr
      found.append(core.is_concrete(self.ctx.run(self.cond_g, self.inputs)[0]))
      return ()

    saved = save(self.ctx)
    try:
      jax.eval_shape(probe)
    except errors.TFPrimsError:
      return False
    finally:
      restore(self.ctx, saved)
    return bool(found and found[0])

  def _run_body(self, values):
    if self.body_run is self.body_g:
      return self.ctx.call(self.body_name, values, self.node)
    return self.ctx.run(self.body_run, values)

  def _body(self, carry_vals, state_vals, rng):
    """One iteration on carried values: (new carry, state, rng, emitted acc values)."""
    ctx = self.ctx
    values = list(self.inputs)
    for i, v in zip(self.carried, carry_vals):
      values[i] = v
    saved = save(ctx)
    try:
      for key, v in zip(self.keys, state_vals):
        ctx.state[key] = v
      if self.use_rng:
        ctx.rng = rng
      try:
        outs = self._run_body(values)
      except (NeedsConcreteIndex, errors.StaticInputError) as e:
        raise _Unroll(str(e)) from None
      new_state = [ctx.state[key] for key in self.keys]
      new_rng = ctx.rng if self.use_rng else None
    finally:
      restore(ctx, saved)
    for i in self.acc:
      self.constant_pushes[i] = np.asarray(outs[i]) if core.is_concrete(outs[i]) else None
    return (
      [outs[i] for i in self.carried],
      new_state,
      new_rng,
      [as_jax(outs[i]) for i in sorted(self.acc)],
    )

  def _cond(self, carry_vals, refs):
    values = list(self.inputs)
    for i, v in zip(self.carried, carry_vals):
      values[i] = v
    sub = value_subgraph(self.cond_g, refs)
    preds = self.ctx.run(sub, values)
    out = True
    for p in preds:
      t = truth(self.node, p)
      if t is False:
        return False
      if t is not True:
        out = t if out is True else out & t
    return out

  def _init(self):
    for i in self.carried:
      if isinstance(self.inputs[i], (VariableHandle, StringConstant)):
        raise errors.OpError(
          self.node.op,
          self.node.name,
          f"loop variable {i} is a resource or string that the body "
          "changes; only numeric tensors and TensorLists can be carried",
        )
    carry = [as_jax(self.inputs[i]) for i in self.carried]
    state = [jnp.asarray(self.ctx.state[k]) for k in self.keys]
    return carry, state, self.ctx.rng if self.use_rng else None

  def _checked(self, init, out):
    """The body output cast to the carry's layout, or an exception saying why not."""
    carry, state, rng, emitted = out
    carry = [as_jax(v) for v in carry]
    rematerialize = False
    for v, l in zip(carry, init[0]):
      if isinstance(v, TensorList) and isinstance(l, TensorList):
        if v.length != l.length or v.element_dtype != l.element_dtype:
          raise _Unroll("a TensorList changes length inside the loop")
        if l.items is None and v.items is not None:
          rematerialize = True
    if rematerialize:
      raise _Rematerialize(
        lambda: ([join_lists(l, v, self.node) for l, v in zip(init[0], carry)], init[1], init[2])
      )
    carry = coerce(carry, init[0], self.node)
    state = [jnp.asarray(s).astype(jnp.result_type(l)) for s, l in zip(state, init[1])]
    why = structure_mismatch(init[0], carry)
    if why:
      raise errors.OpError(
        self.node.op, self.node.name, f"loop body {self.body_name!r} changes a loop variable: {why}"
      )
    return (carry, state, rng), emitted

  def _finish(self, carry, state, rng, final_static=None, static=(), emitted=None):
    outs = list(self.inputs)
    for i, v in zip(self.carried, carry):
      outs[i] = v
    if final_static is not None:
      for i in static:
        outs[i] = final_static[i]
    for k, i in enumerate(sorted(self.acc)):
      outs[i] = self._accumulated(i, None if emitted is None else emitted[k])
    for key, v in zip(self.keys, state):
      self.ctx.state[key] = v
    if self.use_rng:
      self.ctx.rng = rng
    return outs

  def _accumulated(self, i, stacked):
    """The list loop var ``i`` after its pushes (``stacked``: the pushed values)."""
    entry = self.inputs[i]
    constant = self.constant_pushes.get(i)
    if constant is not None and hasattr(stacked, "shape"):  # known: numpy, as pushed
      stacked = np.broadcast_to(constant.astype(stacked.dtype), stacked.shape).copy()
    if stacked is None:
      return UnavailableList(
        f"{self.where} pushes to it in a loop whose trip count is not known at trace time"
      )
    if not hasattr(stacked, "dtype") or isinstance(stacked, (TensorList, OptionalValue)):
      return UnavailableList(f"{self.where} pushes values that are not tensors to it")
    if entry.length == 0:
      return TensorList(stacked, stacked.shape[0], entry.element_dtype, None)
    entry = entry.materialized(tuple(stacked.shape[1:]), self.node)
    return TensorList(
      jnp.concatenate([jnp.asarray(entry.items, stacked.dtype), stacked]),
      entry.length + stacked.shape[0],
      entry.element_dtype,
      None,
    )

  def _zero_trip(self):
    outs = list(self.inputs)
    for i in self.acc:
      outs[i] = self.inputs[i]
    return outs

  def scan(self, n, dynamic_conj, static, final_static):
    if any(self._holds_python_values(i) for i in self.carried):
      raise _Unroll("it carries a list of trace-time values (ragged rows)")
    init = self._init()
    for _ in range(4):
      try:
        return self._scan(n, dynamic_conj, static, final_static, init)
      except _Rematerialize as e:
        init = e.init()
    raise errors.OpError(self.node.op, self.node.name, "loop carry does not settle")

  def _scan(self, n, dynamic_conj, static, final_static, init):
    def step(c, _):
      if dynamic_conj:
        pred = self._cond(c[0], dynamic_conj)
        if pred is False:
          return c, None
        if pred is True:
          return self._checked(init, self._body(*c))[0], None
        return lax.cond(pred, lambda: self._checked(init, self._body(*c))[0], lambda: c), None
      return self._checked(init, self._body(*c))

    if rules.known((n,)):
      (carry, state, rng), emitted = counted.scan(step, init, n)
    else:  # scan takes a symbolic length only from its xs: an empty row per step
      (carry, state, rng), emitted = lax.scan(step, init, jnp.zeros((n, 0), np.int8))
    if dynamic_conj:
      return self._finish(carry, state, rng)
    return self._finish(carry, state, rng, final_static, static, emitted)

  def unroll(self):
    ctx, values = self.ctx, list(self.inputs)
    self.constant_pushes = {}  # each iteration pushes its own values
    pushed = {i: [] for i in self.acc}
    for _ in range(UNROLL_LIMIT + 1):
      pred = truth(self.node, ctx.run(self.cond_g, values)[0])
      if not isinstance(pred, bool):
        raise _CondBecameTraced()
      if not pred:
        for i, items in pushed.items():
          xp = np if all(core.is_concrete(v) for v in items) else jnp
          shapes = sorted({tuple(np.shape(v)) for v in items if hasattr(v, "dtype")})
          values[i] = (
            self.inputs[i]
            if not items
            else host_rows(self.node, items, self.inputs[i].element_dtype)
            if len(shapes) > 1 and self.inputs[i].length == 0  # ragged rows: TF's gradient
            else self._accumulated(
              i,
              xp.stack([xp.asarray(v) for v in items])
              if all(hasattr(v, "dtype") for v in items)
              else items,
            )
          )
        return values
      outs = self._run_body(values)
      for i in self.acc:
        pushed[i].append(outs[i])
        outs[i] = values[i]
      values = outs
    raise errors.ControlFlowError(
      f"{self.where} runs more than tfprims.ops.control_flow.loops.UNROLL_LIMIT={UNROLL_LIMIT} "
      "iterations at trace time"
    )

  def _holds_python_values(self, i) -> bool:
    v = self.inputs[i]
    return isinstance(v, TensorList) and v.items is not None and is_variant_list(v)

  def while_loop(self):
    if any(self._holds_python_values(i) for i in self.carried):
      raise errors.ControlFlowError(
        f"{self.where} carries a list of trace-time values (ragged rows) but its trip "
        "count is not known at trace time, so it cannot be unrolled"
      )
    init = self._init()
    for _ in range(4):
      try:
        return self._while_loop(init)
      except _Rematerialize as e:
        init = e.init()
    raise errors.OpError(self.node.op, self.node.name, "loop carry does not settle")

  def _while_loop(self, init):
    refs = list(self.cond_g.outputs)

    def cond(c):
      return jnp.asarray(self._cond(c[0], refs), jnp.bool_)

    def body(c):
      try:
        return self._checked(init, self._body(*c))[0]
      except _Unroll as e:
        raise errors.ControlFlowError(
          f"{self.where}: {e.reason}; the loop's trip count is not known at trace time, "
          "so it cannot be unrolled"
        ) from None

    out = unbounded.while_loop(cond, body, init)  # reverse mode by checkpoints
    if out is not None:
      return self._finish(*out)
    carry, state, rng = lax.while_loop(cond, body, init)
    carry = jax.tree_util.tree_map(lambda x: _guard(x, self.where), carry)
    state = [_guard(s, self.where) for s in state]
    return self._finish(carry, state, rng)


@structural(
  "While",
  "StatelessWhile",
  family=FAMILY,
  calls_functions="while",
  doc="Runs body while cond holds: tf.While (a counted scan), lax.while_loop, or unrolled.",
)
def _while(ctx, node, inputs):
  return _Loop(ctx, node, list(inputs)).run()


# --- reverse-mode guard for dynamic loops ----------------------------------------------------

_guard_p = Primitive("tf.While.dynamic_trip_count")
_guard_p.def_impl(lambda x, *, where: x)
_guard_p.def_abstract_eval(lambda aval, *, where: aval)
mlir.register_lowering(_guard_p, mlir.lower_fun(lambda x, *, where: x, multiple_results=False))
batching.primitive_batchers[_guard_p] = lambda args, dims, *, where: (
  _guard_p.bind(args[0], where=where),
  dims[0],
)


def _guard_transpose(ct, x, *, where):
  raise errors.ReverseModeLoopError(
    f"{where}: reverse-mode differentiation (jax.grad/vjp) through a while loop "
    "whose trip count is not known at trace time is not possible in JAX. Bound the "
    "loop (tf.while_loop(..., maximum_iterations=N), or a loop counter compared with a "
    "constant), or use forward mode (jax.jvp/jacfwd)."
  )


ad.deflinear2(_guard_p, _guard_transpose)


def _guard(x, where):
  if isinstance(x, (np.ndarray, np.generic)) or not jnp.issubdtype(jnp.result_type(x), jnp.inexact):
    return x
  return _guard_p.bind(x, where=where)
