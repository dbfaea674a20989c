"""If/StatelessIf and Case/StatelessCase.

A predicate (or branch index) known at trace time runs the taken branch inline;
otherwise ``lax.cond`` / ``lax.switch`` (TF's out-of-range Case index selects the
last branch). Variables a branch writes and the rng key are threaded through the
branches as their state.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from tfprims import core, errors
from tfprims.core import structural
from tfprims.interpreter import StringConstant, VariableHandle
from tfprims.ops.control_flow.common import (
  as_jax,
  coerce,
  join_lists,
  restore,
  save,
  state_keys,
  truth,
  uses_rng,
)

FAMILY = "control_flow"


@structural(
  "If",
  "StatelessIf",
  family=FAMILY,
  calls_functions="if",
  doc="Runs then_branch or else_branch: inline, or lax.cond.",
)
def _if(ctx, node, inputs):
  pred = truth(node, inputs[0])
  branches = [node.attr("else_branch").name, node.attr("then_branch").name]
  if isinstance(pred, bool):
    return ctx.call(branches[int(pred)], inputs[1:], node)
  return _switch(ctx, node, pred.astype(jnp.int32), branches, inputs[1:])


@structural(
  "Case",
  "StatelessCase",
  family=FAMILY,
  calls_functions="case",
  doc="Runs one of its branches: inline, or lax.switch.",
)
def _case(ctx, node, inputs):
  index = inputs[0]
  branches = [f.name for f in node.attr("branches")]
  n = len(branches)
  if core.is_concrete(index):
    i = int(np.asarray(index))
    return ctx.call(branches[i if 0 <= i < n else n - 1], inputs[1:], node)
  index = jnp.asarray(index).astype(jnp.int32)
  index = jnp.where((index < 0) | (index >= n), n - 1, index)  # TF: out of range -> last
  return _switch(ctx, node, index, branches, inputs[1:])


def _switch(ctx, node, index, branches, args):
  keys = state_keys(ctx, branches, args)
  use_rng = uses_rng(ctx, branches)
  statics: dict[int, list] = {}

  def make(k, like=None):
    def branch():
      saved = save(ctx)
      try:
        outs = ctx.call(branches[k], args, node)
        state = [ctx.state[key] for key in keys]
        rng = ctx.rng if use_rng else None
      finally:
        restore(ctx, saved)
      static = [o if isinstance(o, (VariableHandle, StringConstant)) else None for o in outs]
      statics[k] = static
      dyn = [None if s is not None else as_jax(o) for o, s in zip(outs, static)]
      if like is not None:
        dyn = coerce(dyn, like, node)
      return dyn, [jnp.asarray(s) for s in state], rng

    return branch

  like = None
  if any(t == "variant" for t in node.attr("Tout", ())):
    # Lists may be materialized on one path only: find each branch's output
    # structure first, then make them agree.
    shapes = [jax.eval_shape(make(k))[0] for k in range(len(branches))]
    like = shapes[0]
    for other in shapes[1:]:
      like = [join_lists(a, b, node) for a, b in zip(like, other)]
    like = [join_lists(a, b, node) for a, b in zip(like, shapes[0])]
  fns = [make(k, like) for k in range(len(branches))]
  try:
    outs, state, rng = lax.switch(index, fns)
  except TypeError as e:
    raise errors.OpError(
      node.op, node.name, f"branches return values of different types: {e}"
    ) from None
  first = statics[0]
  for s in statics.values():
    if any((a is None) != (b is None) or (a is not None and a != b) for a, b in zip(first, s)):
      raise errors.OpError(
        node.op, node.name, "branches return different resources or string constants"
      )
  for key, value in zip(keys, state):
    ctx.state[key] = value
  if use_rng:
    ctx.rng = rng
  return [s if s is not None else o for o, s in zip(outs, first)]
