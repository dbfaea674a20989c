"""``For`` (TF's functional counted loop) and ``SymbolicGradient`` (the gradient of
a library function), run by hooks over the converted library function.

* ``For(start, limit, delta, input, body)``: ``for i in range(start, limit, delta):
  input = body(i, *input)``. Known bounds that TF's kernel refuses ("Invalid
  start/limit/delta": ``delta == 0``, or ``start`` past ``limit`` in ``delta``'s
  direction) raise with its message; traced ones run no iteration. With known bounds
  the trip count is static: the loop is ``tf.While`` (counted.py; it means a
  ``lax.scan``: reverse-differentiable, vmappable); it is unrolled instead when the
  body writes variables, draws random numbers or carries values JAX cannot carry
  (variable handles, TensorLists), up to ``loops.UNROLL_LIMIT`` iterations. With
  traced bounds it is ``lax.while_loop`` (forward mode only, as TF2 While loops
  without a static bound).
* ``SymbolicGradient(input, f)``: ``f``'s inputs ``x`` followed by cotangents of its
  outputs; returns the cotangents of ``x`` through ``jax.vjp`` of the converted ``f``
  (so the ops in the jaxpr are the TF-named transposes of ``f``'s ops). Inputs that
  are not floating point get zeros, as TF's gradients of integer inputs.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from tfprims import core, errors
from tfprims.core import structural
from tfprims.interpreter import VariableHandle
from tfprims.ops.control_flow import counted
from tfprims.ops.control_flow.common import as_jax, state_keys, uses_rng
from tfprims.ops.control_flow.loops import UNROLL_LIMIT

FAMILY = "control_flow"


def _carry_like(outs, like):
  """Body outputs in the dtypes of the loop values (TF requires the same types)."""
  return [jnp.asarray(o, jnp.result_type(v)) for o, v in zip(outs, like)]


@structural(
  "For",
  family=FAMILY,
  calls_functions="for",
  doc="body(i, *input) for i in range(start, limit, delta): tf.While (a counted scan) or unrolled.",
)
def _for(ctx, node, inputs):
  start, limit, delta, *values = inputs
  fname = node.attr("body").name
  n_body = len(ctx.library.graph(fname).inputs)
  if n_body != len(values) + 1:
    raise errors.OpError(
      node.op,
      node.name,
      f"body {fname!r} takes {n_body} inputs; the loop has {len(values)} values plus the counter",
    )
  plain = all(
    not isinstance(v, VariableHandle) and (core.is_concrete(v) or hasattr(v, "dtype"))
    for v in values
  )
  impure = bool(state_keys(ctx, [fname], values)) or uses_rng(ctx, [fname]) or not plain
  if all(core.is_concrete(b) for b in (start, limit, delta)):
    start, limit, delta = (int(np.asarray(b)) for b in (start, limit, delta))
    if not (delta > 0 and start <= limit or delta < 0 and start >= limit):
      raise errors.RuntimeCheckError(
        node.op, node.name, f"Invalid start/limit/delta: {start} {limit} {delta}"
      )
    counters = range(start, limit, delta)
    if not counters:
      return list(values)
    if impure:
      if len(counters) > UNROLL_LIMIT:
        raise errors.OpError(
          node.op,
          node.name,
          f"a body that writes variables, draws "
          f"random numbers or carries handles is unrolled; "
          f"{len(counters)} iterations exceed {UNROLL_LIMIT}",
        )
      for i in counters:
        values = ctx.call(fname, [np.int32(i), *values], node)
      return list(values)
    init = (jnp.asarray(start, jnp.int32), [as_jax(v) for v in values])

    def step(state, _):
      i, carry = state
      return (i + np.int32(delta), _carry_like(ctx.call(fname, [i, *carry], node), carry)), None

    (_, out), _ = counted.scan(step, init, len(counters))
    return list(out)
  if impure:
    raise errors.OpError(
      node.op,
      node.name,
      "a loop with bounds known only at run time "
      "cannot carry variable writes, random draws or handles",
    )
  init = (jnp.asarray(start, jnp.int32), [as_jax(v) for v in values])
  limit, delta = jnp.asarray(limit, jnp.int32), jnp.asarray(delta, jnp.int32)

  def cond(state):
    i, _ = state
    return jnp.where(delta > 0, i < limit, i > limit)

  def body(state):
    i, carry = state
    return i + delta, _carry_like(ctx.call(fname, [i, *carry], node), carry)

  return list(lax.while_loop(cond, body, init)[1])


def _differentiable(x) -> bool:
  return jnp.issubdtype(jnp.result_type(x), jnp.inexact)


@structural(
  "SymbolicGradient",
  family=FAMILY,
  calls_functions=True,
  doc="The gradient of library function f (jax.vjp of its conversion).",
)
def _symbolic_gradient(ctx, node, inputs):
  fname = node.attr("f").name
  if fname not in ctx.library:
    raise errors.UnsupportedInputError(
      f"{node.op} node '{node.name}' differentiates {fname!r}, which is not a library "
      "function (gradients of single ops by name are not supported)"
    )
  n_x = len(ctx.library.graph(fname).inputs)
  xs, dys = list(inputs[:n_x]), list(inputs[n_x:])
  diff = [i for i, x in enumerate(xs) if _differentiable(x)]

  def f(*d):
    args = list(xs)
    for i, v in zip(diff, d):
      args[i] = v
    return [jnp.asarray(o) for o in ctx.call(fname, args, node)]

  outs, vjp = jax.vjp(f, *[jnp.asarray(xs[i]) for i in diff])
  if len(dys) != len(outs):
    raise errors.OpError(
      node.op, node.name, f"{fname!r} has {len(outs)} outputs; got {len(dys)} output gradients"
    )
  cts = [
    jnp.asarray(dy, o.dtype) if _differentiable(o) else np.zeros(o.shape, jax.dtypes.float0)
    for o, dy in zip(outs, dys)
  ]
  grads = dict(zip(diff, vjp(cts)))
  return [
    grads[i]
    if i in grads
    else np.zeros(np.shape(x), np.asarray(x).dtype if core.is_concrete(x) else x.dtype)
    for i, x in enumerate(xs)
  ]
