"""RMSProp family: RMSProp, CenteredRMSProp, Adadelta (dense, sparse, ref and
resource forms)."""

from __future__ import annotations

import jax.numpy as jnp
from jax import lax

from tfprims.ops.training._common import ALL_DTYPES, define_optimizer

_LR = (0.01, 1.0)
_POS = (0.1, 2.0)
_NO_BF16 = ("float16", "float32", "float64", "complex64", "complex128")


def rmsprop(var, ms, mom, lr, rho, momentum, epsilon, grad):
  """ms += (grad**2 - ms) * (1 - rho); mom = mom * momentum + lr * grad /
  sqrt(ms + epsilon); var -= mom."""
  ms = ms + (grad * grad - ms) * (1 - rho)
  mom = mom * momentum + lax.rsqrt(ms + epsilon) * lr * grad
  return var - mom, ms, mom


def centered_rmsprop(var, mg, ms, mom, lr, rho, momentum, epsilon, grad):
  """As RMSProp with the mean gradient mg (mg += (grad - mg) * (1 - rho)) centering
  the denominator: sqrt(ms - mg**2 + epsilon)."""
  ms = ms + (grad * grad - ms) * (1 - rho)
  mg = mg + (grad - mg) * (1 - rho)
  denom = (ms - mg * mg) + epsilon
  mom = mom * momentum + lax.rsqrt(denom) * lr * grad
  return var - mom, mg, ms, mom


def adadelta(var, accum, accum_update, lr, rho, epsilon, grad):
  """accum = rho * accum + (1 - rho) * grad**2; update = sqrt(accum_update + epsilon)
  / sqrt(accum + epsilon) * grad; accum_update = rho * accum_update + (1 - rho) *
  update**2; var -= lr * update."""
  accum = accum * rho + grad * grad * (1 - rho)
  update = jnp.sqrt(accum_update + epsilon) * lax.rsqrt(accum + epsilon) * grad
  accum_update = accum_update * rho + update * update * (1 - rho)
  return var - update * lr, accum, accum_update


_COMMON = {"lr": _LR, "rho": (0.1, 0.99), "momentum": (0.0, 0.99), "epsilon": (1e-3, 0.1)}

define_optimizer("RMSProp", rmsprop, n_state=3, dtypes=ALL_DTYPES,
                 ranges=dict(_COMMON, ms=_POS), sparse=True, sparse_dtypes=_NO_BF16)
define_optimizer("CenteredRMSProp", centered_rmsprop, n_state=4, dtypes=ALL_DTYPES,
                 ranges=dict(_COMMON, ms=_POS, mg=(-0.2, 0.2)), sparse=True,
                 sparse_dtypes=_NO_BF16)
define_optimizer("Adadelta", adadelta, n_state=3, dtypes=ALL_DTYPES,
                 ranges=dict(_COMMON, accum=_POS, accum_update=_POS), sparse=True,
                 sparse_dtypes=ALL_DTYPES)
