"""The rules an op gets when it declares none: derived from its impl.

* abstract eval: ``jax.make_jaxpr(impl).out_avals`` (keeps weak types, shardings
  and shard_map's varying axes; JAX caches it per avals and params), with two
  cheap shortcuts for plain operands: elementwise ops trace their impl on scalars,
  ops with a ``shape_rule`` compute shapes directly;
* JVP: the tangent from ``jax.jvp(impl)``, the primal from the primitive;
* batching: ``jax.vmap(impl)``, or for elementwise ops the primitive re-bound with
  the batch axis in front.

``match_varying`` is what every bind of a TF primitive goes through inside
shard_map. Nothing here knows about individual ops.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np
from jax.interpreters import ad

_INVARIANT = frozenset()


def _varying_axes(x) -> frozenset:
  aval = getattr(x, "aval", None)  # numpy constants have none, and no varying axes
  axis_type = getattr(aval, "manual_axis_type", None)
  return axis_type.varying if axis_type is not None else _INVARIANT


def match_varying(operands):
  """Inside shard_map, casts operands that vary over fewer manual axes than others
  to varying, as lax's own binary ops do: the transpose of that cast is the psum
  that gives an invariant operand (a replicated weight) an invariant cotangent."""
  if len(operands) < 2:
    return operands
  varying = [_varying_axes(o) for o in operands]
  union = _INVARIANT.union(*varying)
  if not union:
    return operands
  return [
    jax.lax.pcast(o, tuple(sorted(union - v)), to="varying") if union - v else o
    for o, v in zip(operands, varying)
  ]


# --- abstract eval ----------------------------------------------------------------------


def abstract_eval(impl, multiple_results):
  """Output avals by tracing the impl."""

  def rule(*avals, **params):
    out = jax.make_jaxpr(functools.partial(impl, **params))(*avals).out_avals
    return list(out) if multiple_results else out[0]

  return rule


def _plain(aval) -> bool:
  """An aval shortcut rules may handle: unsharded, outside shard_map, with integer
  (not symbolic, jax.export-polymorphic) dims."""
  sharding = getattr(aval, "sharding", None)
  return (sharding is None or sharding.mesh.empty) and all(type(d) is int for d in aval.shape)


def shape_rule_abstract_eval(shape_rule, impl, multiple_results):
  """Output avals from an explicit shape rule: far cheaper than tracing the impl,
  which matters on a model's first trace (each new shape is a new signature)."""
  derive = abstract_eval(impl, multiple_results)

  def rule(*avals, **params):
    out = shape_rule(*avals, **params) if all(_plain(a) for a in avals) else None
    if out is None:
      # Shardings, shard_map's manual axes and symbolic dims must propagate (or the
      # rule declined): trace the impl with the real avals.
      return derive(*avals, **params)
    avals_out = [
      jax.core.ShapedArray(o.shape, o.dtype, weak_type=bool(o.weak_type))
      for o in (out if multiple_results else [out])
    ]
    return avals_out if multiple_results else avals_out[0]

  return rule


def elementwise_abstract_eval(impl, multiple_results):
  """For ops that broadcast elementwise: output shape by broadcasting, dtypes by
  tracing the impl on scalars. One trace per (dtypes, params) serves every shape,
  so a model's first trace does not re-trace AddV2 for each activation size."""
  derive = abstract_eval(impl, multiple_results)

  @functools.lru_cache(maxsize=None)
  def scalar_avals(operand_types, params, x64):  # output dtypes depend on x64
    return derive(
      *(jax.ShapeDtypeStruct((), d, weak_type=w) for d, w in operand_types), **dict(params)
    )

  def rule(*avals, **params):
    if not all(_plain(a) for a in avals):
      # Shardings, shard_map's manual axes and symbolic dims must propagate: trace
      # the impl with the real avals.
      return derive(*avals, **params)
    shape = np.broadcast_shapes(*(a.shape for a in avals))
    out = scalar_avals(
      tuple((a.dtype, a.weak_type) for a in avals),
      tuple(sorted(params.items())),
      bool(jax.config.jax_enable_x64),
    )
    if multiple_results:
      return [o.update(shape=shape) for o in out]
    return out.update(shape=shape)

  return rule


# --- JVP and batching -------------------------------------------------------------------


def jvp(prim, impl):
  """Tangent from ``jax.jvp(impl)``; the primal stays the TF primitive."""

  def rule(primals, tangents, **params):
    live = [i for i, t in enumerate(tangents) if type(t) is not ad.Zero]

    def f(*live_args):
      args = list(primals)
      for i, v in zip(live, live_args):
        args[i] = v
      return impl(*args, **params)

    _, tangent_out = jax.jvp(f, [primals[i] for i in live], [tangents[i] for i in live])
    primal_out = prim.bind(*primals, **params)
    if prim.multiple_results:
      return primal_out, list(tangent_out)
    return primal_out, tangent_out

  return rule


def vmap_batching(impl, multiple_results):
  """Batching by ``jax.vmap(impl)``: always correct, but the batched jaxpr shows
  the impl's lax primitives instead of the TF op."""

  def rule(args, dims, **params):
    out = jax.vmap(functools.partial(impl, **params), in_axes=tuple(dims), out_axes=0)(*args)
    return (list(out), [0] * len(out)) if multiple_results else (out, 0)

  return rule


def elementwise_batching(prim):
  """Batching by re-binding ``prim``: TF (numpy) broadcasting is right-aligned, so
  batched operands get their batch axis in front and are padded to the output rank."""

  def rule(args, dims, **params):
    out_rank = max(np.ndim(a) - (d is not None) for a, d in zip(args, dims))
    moved = []
    for a, d in zip(args, dims):
      if d is None:
        moved.append(a)
        continue
      a = jnp.moveaxis(a, d, 0) if d != 0 else a
      pad = out_rank - (a.ndim - 1)
      if pad:
        a = jax.lax.expand_dims(a, tuple(range(1, 1 + pad)))
      moved.append(a)
    out = prim.bind(*moved, **params)
    return (out, [0] * len(out)) if prim.multiple_results else (out, 0)

  return rule


def zero_safe_transpose(rule):
  """Wraps a transpose rule so a symbolic-zero cotangent yields symbolic zeros."""

  def wrapped(ct, *args, **params):
    if type(ct) is ad.Zero:
      return [ad.Zero(a.aval) if ad.is_undefined_primal(a) else None for a in args]
    return rule(ct, *args, **params)

  return wrapped


# --- rules and specs that need the op being declared ------------------------------------


class PerOp:
  """A rule or spec made for the op being declared (see :func:`per_op`)."""

  def __init__(self, factory, args, kwargs):
    self.factory, self.args, self.kwargs = factory, args, kwargs

  def __repr__(self):
    return f"per_op({getattr(self.factory, '__qualname__', self.factory)!r})"


def per_op(factory, *args, **kwargs) -> PerOp:
  """Marks a ``register_op`` keyword value (``jvp``, one of a ``jvp`` sequence's rules,
  ``transpose``, ``batching``, ``canonicalize``, ``interpret``, ``spec``) as
  ``factory(op, *args, **kwargs)``: register_op calls it with the new TFOp before it
  installs the result, so a factory reaches the op being declared (``op(*operands,
  **params)``; ``op.op_type`` for its name) and no declaration repeats its name."""
  return PerOp(factory, args, kwargs)


def for_op(op, *values) -> list:
  """``values`` with every :func:`per_op` (also inside a sequence of per-operand JVPs)
  made for ``op``."""

  def made(value):
    if isinstance(value, PerOp):
      return value.factory(op, *value.args, **value.kwargs)
    if isinstance(value, (tuple, list)) and any(isinstance(v, PerOp) for v in value):
      return type(value)(made(v) for v in value)
    return value

  return [made(v) for v in values]
