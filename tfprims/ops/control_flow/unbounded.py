"""``tf.While.unbounded``: a loop whose trip count is known only at run time, with
reverse mode.

``lax.while_loop`` has forward-mode derivatives only: JAX cannot transpose its JVP, a
loop over (primal, tangent) states it would have to store without knowing how many.
:func:`while_loop` has ``lax.while_loop``'s signature and meaning and binds
``tf.While.unbounded[cond body]``, whose JVP binds ``tf.While.unbounded_jvp``, a
primitive linear in the tangents:

* evaluated, it is the while loop's JVP (``jax.jvp``: forward mode as before);
* transposed (``jax.grad``, ``jax.vjp``), it runs the loop backwards with checkpoints:
  the trip count ``n`` (the loop once more, counting), snapshots of the carry every
  ``s = ceil(n / B)`` steps into a ``[B, ...]`` buffer per carry leaf (``B``: the
  ``loop_checkpoints`` config), then for ``k = n - 1`` down to ``0`` the carry at step
  ``k`` recomputed from its segment's snapshot (at most ``s - 1`` body steps) and the
  body's VJP there.

Memory: ``B + 2`` carries. Time: two more forward passes, then at most ``n (s - 1) / 2``
recomputed body steps besides the ``n`` VJPs (``n <= B``: none; ``n = 10 B``: about
``4.5 n``). Differentiating the backward pass again (a Hessian) is not supported.
Under ``vmap`` the loop runs until every example is done, finished examples keeping
their carry, and is bound as ``tf.While.unbounded`` again (``grad`` of ``vmap`` works).
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
from jax import lax
from jax.extend.core import ClosedJaxpr, Primitive, jaxpr_as_fun
from jax.interpreters import ad, batching, mlir, xla

from tfprims import config

loop_p = Primitive("tf.While.unbounded")
loop_p.multiple_results = True
loop_jvp_p = Primitive("tf.While.unbounded_jvp")
loop_jvp_p.multiple_results = True


def _inexact(x) -> bool:
  return jnp.issubdtype(jax.typeof(x).dtype, jnp.inexact)


def _hoisted(fn, flat):
  """``fn``'s jaxpr with its closed-over values as leading inputs, and those values."""
  closed = jax.make_jaxpr(fn)(*flat)
  jaxpr = closed.jaxpr
  jaxpr = ClosedJaxpr(
    jaxpr.replace(
      constvars=[],
      invars=[*jaxpr.constvars, *jaxpr.invars],
      debug_info=jaxpr.debug_info.with_unknown_names(),
    ),
    [],
  )
  return jaxpr, list(closed.consts)


def while_loop(cond, body, init):
  """``lax.while_loop(cond, body, init)`` bound as ``tf.While.unbounded`` (reverse
  mode by checkpointed recomputation), or None where it cannot be: a body that
  changes the carry's types or has effects (TF print ops)."""
  flat, tree = jax.tree_util.tree_flatten(init)
  avals = [jax.typeof(x) for x in flat]
  trees = []

  def flat_body(*carry):
    new = jax.tree_util.tree_flatten(body(jax.tree_util.tree_unflatten(tree, carry)))
    trees.append(new[1])
    return new[0]

  def flat_cond(*carry):
    return cond(jax.tree_util.tree_unflatten(tree, carry))

  body_jaxpr, body_consts = _hoisted(flat_body, flat)
  cond_jaxpr, cond_consts = _hoisted(flat_cond, flat)
  if (
    trees[-1] != tree
    or list(body_jaxpr.out_avals) != avals
    or body_jaxpr.effects
    or cond_jaxpr.effects
  ):
    return None
  outs = loop_p.bind(
    *cond_consts,
    *body_consts,
    *flat,
    cond_jaxpr=cond_jaxpr,
    body_jaxpr=body_jaxpr,
    num_cond_consts=len(cond_consts),
    num_body_consts=len(body_consts),
  )
  return jax.tree_util.tree_unflatten(tree, outs)


def _split(args, num_cond_consts, num_body_consts):
  cc = list(args[:num_cond_consts])
  bc = list(args[num_cond_consts : num_cond_consts + num_body_consts])
  return cc, bc, list(args[num_cond_consts + num_body_consts :])


def _run(cond_jaxpr, body_jaxpr, cc, bc, init):
  cond = lambda c: jaxpr_as_fun(cond_jaxpr)(*cc, *c)[0]
  body = lambda c: list(jaxpr_as_fun(body_jaxpr)(*bc, *c))
  return lax.while_loop(cond, body, list(init))


def _impl(*args, cond_jaxpr, body_jaxpr, num_cond_consts, num_body_consts):
  cc, bc, init = _split(args, num_cond_consts, num_body_consts)
  return _run(cond_jaxpr, body_jaxpr, cc, bc, init)


def _diff_indices(values):
  return tuple(i for i, v in enumerate(values) if _inexact(v))


def _jvp(primals, tangents, *, cond_jaxpr, body_jaxpr, num_cond_consts, num_body_consts):
  params = dict(
    cond_jaxpr=cond_jaxpr,
    body_jaxpr=body_jaxpr,
    num_cond_consts=num_cond_consts,
    num_body_consts=num_body_consts,
  )
  out = loop_p.bind(*primals, **params)
  _, bc, init = _split(primals, num_cond_consts, num_body_consts)
  _, tbc, tinit = _split(tangents, num_cond_consts, num_body_consts)
  const_idx, carry_idx = _diff_indices(bc), _diff_indices(init)
  if all(type(tbc[i]) is ad.Zero for i in const_idx) and all(
    type(tinit[i]) is ad.Zero for i in carry_idx
  ):
    return out, [ad.Zero(jax.typeof(o).to_tangent_aval()) for o in out]
  live = [
    ad.instantiate_zeros(t) for t in (*(tbc[i] for i in const_idx), *(tinit[i] for i in carry_idx))
  ]
  t_diff = loop_jvp_p.bind(
    *primals,
    *live,
    const_idx=const_idx,
    carry_idx=carry_idx,
    budget=int(config.get_config("loop_checkpoints")),
    **params,
  )
  t_out = [ad.Zero(jax.typeof(o).to_tangent_aval()) for o in out]
  for i, t in zip(carry_idx, t_diff):
    t_out[i] = t
  return out, t_out


def _jvp_impl(
  *args, cond_jaxpr, body_jaxpr, num_cond_consts, num_body_consts, const_idx, carry_idx, budget
):
  """The loop's JVP (forward mode): ``jax.jvp`` of ``lax.while_loop``."""
  n_primal = len(args) - len(const_idx) - len(carry_idx)
  primals, live = args[:n_primal], args[n_primal:]
  cc, bc, init = _split(primals, num_cond_consts, num_body_consts)
  t_bc, t_init = list(live[: len(const_idx)]), list(live[len(const_idx) :])

  def f(bc_diff, init_diff):
    b, c = list(bc), list(init)
    for i, v in zip(const_idx, bc_diff):
      b[i] = v
    for i, v in zip(carry_idx, init_diff):
      c[i] = v
    out = _run(cond_jaxpr, body_jaxpr, cc, b, c)
    return [out[i] for i in carry_idx]

  _, t_out = jax.jvp(f, ([bc[i] for i in const_idx], [init[i] for i in carry_idx]), (t_bc, t_init))
  return t_out


def _jvp_abstract_eval(*avals, num_cond_consts, num_body_consts, carry_idx, **_):
  init = avals[num_cond_consts + num_body_consts :]
  return [init[i] for i in carry_idx]


def _backward(cc, bc, init, ct_out, *, cond_jaxpr, body_jaxpr, const_idx, carry_idx, budget):
  """The transpose of the loop's JVP: cotangents of the differentiable body consts and
  initial carry leaves, by checkpointed recomputation (module docstring)."""
  cond = lambda c: jaxpr_as_fun(cond_jaxpr)(*cc, *c)[0]
  body = lambda b, c: list(jaxpr_as_fun(body_jaxpr)(*b, *c))

  n = lax.while_loop(
    lambda s: cond(s[1]), lambda s: (s[0] + 1, body(bc, s[1])), (jnp.int32(0), list(init))
  )[0]
  stride = jnp.maximum(1, (n + budget - 1) // budget)
  snaps = [jnp.zeros((budget, *jnp.shape(x)), jax.typeof(x).dtype).at[0].set(x) for x in init]

  def record(k, s):
    state, snaps = s
    state = body(bc, state)
    slot = (k + 1) // stride
    slot = jnp.where(((k + 1) % stride == 0) & (slot < budget), slot, budget)
    return state, [buf.at[slot].set(x, mode="drop") for buf, x in zip(snaps, state)]

  _, snaps = lax.fori_loop(0, n, record, (list(init), snaps))

  def with_diff(values, idx, diff):
    values = list(values)
    for i, v in zip(idx, diff):
      values[i] = v
    return values

  def step_back(j, s):
    ct_carry, ct_consts = s
    k = n - 1 - j
    seg = k // stride
    state = [buf[seg] for buf in snaps]
    state = lax.fori_loop(0, k - seg * stride, lambda _, c: body(bc, c), state)

    def f(bc_diff, carry_diff):
      out = body(with_diff(bc, const_idx, bc_diff), with_diff(state, carry_idx, carry_diff))
      return [out[i] for i in carry_idx]

    _, vjp = jax.vjp(f, [bc[i] for i in const_idx], [state[i] for i in carry_idx])
    d_consts, d_carry = vjp(list(ct_carry))
    return list(d_carry), [a + b for a, b in zip(ct_consts, d_consts)]

  zeros = [jnp.zeros_like(bc[i]) for i in const_idx]
  ct_carry, ct_consts = lax.fori_loop(0, n, step_back, (list(ct_out), zeros))
  return ct_consts, ct_carry


def _jvp_transpose(
  cts, *args, cond_jaxpr, body_jaxpr, num_cond_consts, num_body_consts, const_idx, carry_idx, budget
):
  n_primal = len(args) - len(const_idx) - len(carry_idx)
  primals = args[:n_primal]
  if any(ad.is_undefined_primal(p) for p in primals):
    raise NotImplementedError("tf.While.unbounded_jvp is linear in its tangents only")
  live = args[n_primal:]
  if all(type(ct) is ad.Zero for ct in cts):
    # Nothing flows back: skip the backward loop, whose 0 * (a non-finite partial
    # derivative) would be NaN where TF's gradient (e.g. a tf.custom_gradient that
    # bypasses the loop) is finite.
    return [None] * n_primal + [
      ad.Zero(t.aval) if ad.is_undefined_primal(t) else None for t in live
    ]
  cc, bc, init = _split(primals, num_cond_consts, num_body_consts)
  cts = [ad.instantiate_zeros(ct) for ct in cts]
  ct_consts, ct_carry = _backward(
    cc,
    bc,
    init,
    cts,
    cond_jaxpr=cond_jaxpr,
    body_jaxpr=body_jaxpr,
    const_idx=const_idx,
    carry_idx=carry_idx,
    budget=budget,
  )
  out = [None] * n_primal
  for ct, t in zip([*ct_consts, *ct_carry], live):
    out.append(ct if ad.is_undefined_primal(t) else None)
  return out


def _batch(args, dims, *, cond_jaxpr, body_jaxpr, num_cond_consts, num_body_consts):
  """Every carry batched; the loop runs while any example's condition holds, examples
  that are done keep their carry (a select per step), bound as ``tf.While.unbounded``
  again so that ``grad`` of ``vmap`` has reverse mode too."""
  size = next(a.shape[d] for a, d in zip(args, dims) if d is not None)
  cc, bc, init = _split(args, num_cond_consts, num_body_consts)
  dcc, dbc, dinit = _split(dims, num_cond_consts, num_body_consts)
  init = [
    jnp.broadcast_to(x, (size, *jnp.shape(x))) if d is None else jnp.moveaxis(x, d, 0)
    for x, d in zip(init, dinit)
  ]
  each_cond = jax.vmap(lambda cc, c: jaxpr_as_fun(cond_jaxpr)(*cc, *c)[0], in_axes=(dcc, 0))
  each_body = jax.vmap(lambda bc, c: list(jaxpr_as_fun(body_jaxpr)(*bc, *c)), in_axes=(dbc, 0))

  def body(c):
    running = each_cond(cc, c)
    return [
      jnp.where(running.reshape((size,) + (1,) * (jnp.ndim(x) - 1)), new, x)
      for new, x in zip(each_body(bc, c), c)
    ]

  cond = lambda c: jnp.any(each_cond(cc, c))
  out = while_loop(cond, body, init)
  return (lax.while_loop(cond, body, init) if out is None else out), [0] * len(init)


loop_p.def_impl(functools.partial(xla.apply_primitive, loop_p))
loop_p.def_abstract_eval(
  lambda *avals, num_cond_consts, num_body_consts, **_: list(
    avals[num_cond_consts + num_body_consts :]
  )
)
mlir.register_lowering(loop_p, mlir.lower_fun(_impl, multiple_results=True))
ad.primitive_jvps[loop_p] = _jvp
batching.primitive_batchers[loop_p] = _batch

loop_jvp_p.def_impl(functools.partial(xla.apply_primitive, loop_jvp_p))
loop_jvp_p.def_abstract_eval(_jvp_abstract_eval)
mlir.register_lowering(loop_jvp_p, mlir.lower_fun(_jvp_impl, multiple_results=True))
ad.primitive_transposes[loop_jvp_p] = _jvp_transpose
batching.primitive_batchers[loop_jvp_p] = lambda args, dims, **params: (
  jax.vmap(functools.partial(_jvp_impl, **params), in_axes=list(dims))(*args),
  [0] * len(params["carry_idx"]),
)
