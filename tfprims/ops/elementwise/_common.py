"""What the elementwise modules share: the ``define_op`` keywords, broadcasting
of impl operands, direct lowerings, and the vocabulary of their property specs."""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np
from jax.extend.mlir.dialects import stablehlo as hlo
from jax.interpreters import mlir

from tfprims import rules

#: ``define_op`` keywords of every op of the family but Equal/NotEqual.
EW = dict(family="elementwise", batching="elementwise")

# Skip reasons of the property specs.
BOOL_OUT = "boolean output: not differentiable"
INT_ONLY = "integer/boolean op: not differentiable"
NO_TF_GRAD = "TF registers no gradient for this op"

# Complex products round a - b of two products (cancellation): the runner
# compares components, so a small component of a large result needs more room.
CPLX_MUL_RTOL = {"complex64": 1e-4}


def direct_binary_lowering(hlo_op, impl):
  """A lowering emitting ``hlo_op`` on the operands broadcast to the output shape, for
  binary ops whose impl is that StableHLO op on operands of one dtype (AddV2, Sub,
  Mul...). Every CNN lowers dozens of these; tracing the jnp impl per signature was
  most of their lowering time. Other operands (bool, mixed dtypes, symbolic or
  sharded shapes) lower the impl."""
  fallback = mlir.lower_fun(impl, multiple_results=False)

  def rule(ctx, x, y, **params):
    (ax, ay), (out,) = ctx.avals_in, ctx.avals_out
    plain = all(type(d) is int for a in (ax, ay, out) for d in a.shape) and all(
        getattr(a, "sharding", None) is None or a.sharding.mesh.empty for a in (ax, ay, out))
    if params or not plain or ax.dtype != ay.dtype or ax.dtype != out.dtype or (
        ax.dtype == np.bool_):
      return fallback(ctx, x, y, **params)
    return [hlo_op(_broadcast_to(ctx, x, ax, out), _broadcast_to(ctx, y, ay, out))]
  return rule


def _broadcast_to(ctx, value, aval, out):
  if tuple(aval.shape) == tuple(out.shape):
    return value
  dims = range(len(out.shape) - len(aval.shape), len(out.shape))  # numpy: right-aligned
  out_type = mlir.aval_to_ir_type(ctx.module_context, out.update(dtype=aval.dtype))
  return hlo.broadcast_in_dim(out_type, value, mlir.dense_int_array(list(dims)))


def bcast(*xs):
  """Impl operands broadcast to their common shape (TF broadcasting)."""
  shape = jnp.broadcast_shapes(*(jnp.shape(x) for x in xs))
  return [jnp.broadcast_to(x, shape) for x in xs]


def is_complex(x) -> bool:
  """Whether a value, tracer or undefined primal is complex (rules pick TF's
  complex formula by it)."""
  return rules.dtype_of(x).kind == "c"


def conj_symmetric(fn):
  """``fn`` (complex: XLA's) taking the side of a real-axis branch cut from the sign
  of a zero imaginary part, as TF's std::complex kernels (C99) do:
  f(x - 0j) = conj(f(x + 0j)) (Asin, Acos, Acosh). XLA ignores that sign."""
  def impl(x):
    if not jnp.iscomplexobj(x):
      return fn(x)
    flip = (jnp.imag(x) == 0) & jnp.signbit(jnp.imag(x))
    y = fn(jnp.where(flip, jnp.conj(x), x))
    return jnp.where(flip, jnp.conj(y), y)
  return impl


def odd_symmetric(fn):
  """``fn`` (complex: XLA's) taking the side of an imaginary-axis branch cut from
  the sign of a zero real part, as TF's kernels do: f(-0 + iy) = -f(+0 - iy) (Asinh)."""
  def impl(x):
    if not jnp.iscomplexobj(x):
      return fn(x)
    flip = (jnp.real(x) == 0) & jnp.signbit(jnp.real(x))
    y = fn(jnp.where(flip, -x, x))
    return jnp.where(flip, -y, y)
  return impl
