"""What the elementwise modules share: the ``define_op`` keywords, broadcasting
of impl operands, and the vocabulary of their property specs."""

from __future__ import annotations

import jax.numpy as jnp

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


def bcast(*xs):
  """Impl operands broadcast to their common shape (TF broadcasting)."""
  shape = jnp.broadcast_shapes(*(jnp.shape(x) for x in xs))
  return [jnp.broadcast_to(x, shape) for x in xs]


def is_complex(x) -> bool:
  """Whether a value, tracer or undefined primal is complex (rules pick TF's
  complex formula by it)."""
  return rules.dtype_of(x).kind == "c"
