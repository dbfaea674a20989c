"""``tf.While``: a TF loop with a trip count known at trace time, as one primitive.

:func:`scan` has ``lax.scan``'s signature and meaning (``step(carry, None) -> (carry,
ys)``, ``ys`` stacked along a new leading axis). It binds ``tf.While[jaxpr length]``,
whose params are the traced step and the trip count, so jaxprs name the TF loop; every
rule but the lowering is ``lax.scan``'s, which the primitive means:

* lowering: one ``stablehlo.while`` written directly (a counter, the carry, one buffer
  per ``ys`` updated in place), the step lowered from its jaxpr. ``lax.scan`` lowers
  by tracing its while-loop form again at every lowering, a quarter of an LSTM's
  lowering time (benchmarks/NOTES.md, "Lowering cost");
* JVP: ``jax.jvp`` of the scan, so ``jax.grad`` sees a ``scan`` and reverse mode works;
* batching: the step vmapped (its carry batched, loop-invariant operands as they are)
  and bound as ``tf.While`` again.

Where the primitive's direct lowering does not apply — a step with effects (TF print
ops), a symbolic trip count or shapes (jax.export), shardings in types, a carry whose
type the step changes (weak types: lax.scan promotes them) — :func:`scan` is
``lax.scan`` itself.
"""

from __future__ import annotations

import functools

import jax
import numpy as np
from jax import lax
from jax.extend.core import ClosedJaxpr, Literal, Primitive, jaxpr_as_fun
from jax.extend.mlir.dialects import stablehlo as hlo
from jax.interpreters import ad, batching, mlir, xla

from tfprims import emit

while_p = Primitive("tf.While")
while_p.multiple_results = True


def _emittable(aval) -> bool:
  return emit._static(aval) and not jax.dtypes.issubdtype(aval.dtype, jax.dtypes.extended)


def scan(step, init, length: int):
  """``lax.scan(step, init, length=length)``, bound as ``tf.While`` where it can be."""
  if type(length) is not int or length >= 2**31:
    return lax.scan(step, init, length=length)
  flat_init, tree = jax.tree_util.tree_flatten(init)
  trees = []

  def flat_step(*carry):
    new, ys = step(jax.tree_util.tree_unflatten(tree, carry), None)
    new_flat, new_tree = jax.tree_util.tree_flatten(new)
    ys_flat, ys_tree = jax.tree_util.tree_flatten(ys)
    trees.append((new_tree, ys_tree))
    return [*new_flat, *ys_flat]

  closed = jax.make_jaxpr(flat_step)(*flat_init)
  new_tree, ys_tree = trees[-1]
  in_avals = [jax.typeof(x) for x in flat_init]
  if (
    new_tree != tree
    or closed.effects
    or list(closed.out_avals[: len(flat_init)]) != in_avals
    or not all(
      map(_emittable, (*in_avals, *closed.out_avals, *(jax.typeof(c) for c in closed.consts)))
    )
  ):
    return lax.scan(step, init, length=length)
  jaxpr = closed.jaxpr  # its consts (closed-over values) become the first operands
  jaxpr = ClosedJaxpr(
    jaxpr.replace(
      constvars=[],
      invars=[*jaxpr.constvars, *jaxpr.invars],
      debug_info=jaxpr.debug_info.with_unknown_names(),
    ),
    [],
  )
  outs = while_p.bind(
    *closed.consts,
    *flat_init,
    jaxpr=jaxpr,
    length=length,
    num_consts=len(closed.consts),
    num_carry=len(flat_init),
  )
  carry, ys = outs[: len(flat_init)], outs[len(flat_init) :]
  return (jax.tree_util.tree_unflatten(tree, carry), jax.tree_util.tree_unflatten(ys_tree, ys))


def _step(jaxpr, consts, carry, num_carry):
  """One iteration: (new carry, this iteration's ys)."""
  outs = jaxpr_as_fun(jaxpr)(*consts, *carry)
  return list(outs[:num_carry]), list(outs[num_carry:])


def _as_scan(*args, jaxpr, length, num_consts, num_carry):
  """The primitive's meaning: ``lax.scan`` of the step."""
  consts, init = args[:num_consts], args[num_consts:]
  carry, ys = lax.scan(lambda c, _: _step(jaxpr, consts, c, num_carry), list(init), length=length)
  return [*carry, *ys]


def _abstract_eval(*avals, jaxpr, length, num_consts, num_carry):
  return [
    *avals[num_consts:],
    *(a.update(shape=(length, *a.shape)) for a in jaxpr.out_avals[num_carry:]),
  ]


def _lowering(ctx, *args, jaxpr, length, num_consts, num_carry):
  """``while i < length: carry, y = step(carry); ys[i] = y; i += 1``, the consts
  carried unchanged (as JAX's own while lowering passes them)."""
  consts, init = args[:num_consts], args[num_consts:]
  ys_avals = ctx.avals_out[num_carry:]
  buffers = [emit.Emitter().full(0, a.shape, a.dtype).value for a in ys_avals]
  if length == 0:
    return [*init, *buffers]
  counter = mlir.ir_constant(np.int32(0))
  operands = [counter, *consts, *init, *buffers]
  types = [op.type for op in operands]
  loop = hlo.WhileOp(types, operands)

  cond = loop.regions[0].blocks.append(*types)
  with mlir.ir.InsertionPoint(cond):
    pred = emit._hlo_compare(cond.arguments[0], mlir.ir_constant(np.int32(length)), "LT", np.int32)
    hlo.return_([pred])

  body = loop.regions[1].blocks.append(*types)
  with mlir.ir.InsertionPoint(body):
    i, *rest = body.arguments
    b_consts, b_carry = rest[:num_consts], rest[num_consts : num_consts + num_carry]
    b_buffers = rest[num_consts + num_carry :]
    outs, _ = mlir.jaxpr_subcomp(
      ctx.module_context,
      jaxpr.jaxpr,
      ctx.name_stack.extend("while"),
      mlir.TokenSet(),
      [],
      *b_consts,
      *b_carry,
      dim_var_values=ctx.dim_var_values,
      const_lowering=ctx.const_lowering,
      outer_traceback=ctx.traceback,
    )
    zero = mlir.ir_constant(np.int32(0))
    new_buffers = []
    for buf, y, a in zip(b_buffers, outs[num_carry:], ys_avals):
      row = hlo.reshape(emit.Emitter()._type((1, *a.shape[1:]), a.dtype), y)
      new_buffers.append(hlo.dynamic_update_slice(buf, row, [i] + [zero] * (len(a.shape) - 1)))
    step = hlo.add(i, mlir.ir_constant(np.int32(1)))
    hlo.return_([step, *b_consts, *outs[:num_carry], *new_buffers])
  return list(loop.results[1 + num_consts :])


def _jvp(primals, tangents, **params):
  """``jax.jvp`` of the scan in the operands with tangents; the others are closed
  over, so the scan carries no tangents for them (weights under a jvp in the input)."""
  live = [i for i, t in enumerate(tangents) if type(t) is not ad.Zero]

  def f(*live_args):
    args = list(primals)
    for i, v in zip(live, live_args):
      args[i] = v
    return _as_scan(*args, **params)

  primal_out, tangent_out = jax.jvp(f, [primals[i] for i in live], [tangents[i] for i in live])
  return list(primal_out), list(tangent_out)


def _depends(jaxpr, batched_in) -> list[bool]:
  """Which outputs of ``jaxpr`` read a batched input (an equation's outputs are
  batched when any of its inputs is: how vmap batches)."""
  batched = {v for v, b in zip(jaxpr.invars, batched_in) if b}

  def reads_batched(v):
    return not isinstance(v, Literal) and v in batched

  for eqn in jaxpr.eqns:
    if any(map(reads_batched, eqn.invars)):
      batched.update(eqn.outvars)
  return list(map(reads_batched, jaxpr.outvars))


def _batch(args, dims, *, jaxpr, length, num_consts, num_carry):
  """The step vmapped and bound as ``tf.While`` again. A carry is batched when its
  initial value is or the step makes it so (to a fixed point, as lax.scan's rule);
  counters and other unbatched carries stay unbatched."""
  size = next(a.shape[d] for a, d in zip(args, dims) if d is not None)
  consts, init = list(args[:num_consts]), args[num_consts:]
  const_dims = list(dims[:num_consts])
  carry_batched = [d is not None for d in dims[num_consts:]]
  while True:
    out = _depends(jaxpr.jaxpr, [d is not None for d in const_dims] + carry_batched)
    new = [a or b for a, b in zip(carry_batched, out[:num_carry])]
    if new == carry_batched:
      break
    carry_batched = new
  ys_batched = out[num_carry:]
  init = [
    a
    if not b
    else jax.numpy.broadcast_to(a, (size, *np.shape(a)))
    if d is None
    else jax.numpy.moveaxis(a, d, 0)
    for a, d, b in zip(init, dims[num_consts:], carry_batched)
  ]
  carry_axes = [0 if b else None for b in carry_batched]

  batched = jax.vmap(
    lambda consts, carry: _step(jaxpr, consts, carry, num_carry),
    in_axes=(const_dims, carry_axes),
    out_axes=(carry_axes, [0 if b else None for b in ys_batched]),
  )
  carry, ys = scan(lambda c, _: batched(consts, c), init, length)
  return [*carry, *ys], carry_axes + [1 if b else None for b in ys_batched]


while_p.def_impl(functools.partial(xla.apply_primitive, while_p))
while_p.def_abstract_eval(_abstract_eval)
mlir.register_lowering(while_p, _lowering)
ad.primitive_jvps[while_p] = _jvp
batching.primitive_batchers[while_p] = _batch
