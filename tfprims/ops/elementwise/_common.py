"""What the elementwise modules share: the ``register_op`` keywords, broadcasting
of impl operands, direct lowerings, and the vocabulary of their property specs."""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np

from tfprims import emit, rules

#: ``register_op`` keywords of every op of the family but Equal/NotEqual.
EW = dict(family="elementwise", batching="elementwise")

# Skip reasons of the property specs.
BOOL_OUT = "boolean output: not differentiable"
INT_ONLY = "integer/boolean op: not differentiable"
NO_TF_GRAD = "TF registers no gradient for this op"

# Complex products round a - b of two products (cancellation): the runner
# compares components, so a small component of a large result needs more room.
CPLX_MUL_RTOL = {"complex64": 1e-4}


def direct_binary_lowering(name, impl):
  """A lowering emitting the :class:`tfprims.emit.Emitter` op ``name`` (``"add"``,
  ``"mul"``...) on the operands broadcast to the output shape, for binary ops whose
  impl is that lax op on operands of one dtype (AddV2, Sub, Mul...); bool or mixed
  dtypes lower ``impl``. Every CNN lowers dozens of these."""

  def build(B, x, y, **params):
    if params or x.dtype != y.dtype or x.dtype == np.bool_:
      return None
    shape = np.broadcast_shapes(x.shape, y.shape)
    return getattr(B, name)(B.broadcast_to(x, shape), B.broadcast_to(y, shape))

  build.__name__ = f"{name}_build"
  return emit.direct_lowering(build, impl)


REAL_FLOATS = ("float16", "bfloat16", "float32", "float64")


def direct_unary_lowering(name, impl, dtypes=REAL_FLOATS):
  """A lowering emitting the :class:`tfprims.emit.Emitter` op ``name`` (``"neg"``,
  ``"rsqrt"``...) for operands of ``dtypes``, whose impl is that lax op; other
  operands lower ``impl``."""

  def build(B, x):
    return getattr(B, name)(x) if x.dtype.name in dtypes else None

  build.__name__ = f"{name}_build"
  return emit.direct_lowering(build, impl)


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
