"""RMSProp family: RMSProp, CenteredRMSProp, Adadelta (dense, sparse, ref and
resource forms)."""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np
from jax import lax

from tfprims.ops.training._common import ALL_DTYPES, define_optimizer

_LR = (0.01, 1.0)
_POS = (0.1, 2.0)
_NO_BF16 = ("float16", "float32", "float64", "complex64", "complex128")


def rmsprop(var, ms, mom, lr, rho, momentum, epsilon, grad):
  """ms += (grad**2 - ms) * (1 - rho); mom = mom * momentum + grad * lr /
  sqrt(ms + epsilon); var -= mom."""
  ms = ms + (grad * grad - ms) * (1 - rho)
  mom = mom * momentum + grad * lr / jnp.sqrt(ms + epsilon)
  return var - mom, ms, mom


def centered_rmsprop(var, mg, ms, mom, lr, rho, momentum, epsilon, grad):
  """As RMSProp with the mean gradient mg (mg += (grad - mg) * (1 - rho)) centering
  the denominator: sqrt((ms - mg**2) + epsilon)."""
  ms = ms + (grad * grad - ms) * (1 - rho)
  mg = mg + (grad - mg) * (1 - rho)
  denom = (ms - mg * mg) + epsilon
  mom = mom * momentum + grad * lr / jnp.sqrt(denom)
  return var - mom, mg, ms, mom


def adadelta(var, accum, accum_update, lr, rho, epsilon, grad):
  """accum = rho * accum + (1 - rho) * grad**2; update = sqrt(accum_update + epsilon)
  / sqrt(accum + epsilon) * grad; accum_update = rho * accum_update + (1 - rho) *
  update**2; var -= lr * update."""
  accum = accum * rho + grad * grad * (1 - rho)
  update = jnp.sqrt(accum_update + epsilon) * lax.rsqrt(accum + epsilon) * grad
  accum_update = accum_update * rho + update * update * (1 - rho)
  return var - update * lr, accum, accum_update


# TF's sparse kernels write both rules their own way: ms = ms * rho + grad**2 * (1 -
# rho), Eigen's rsqrt, and the centered denominator ms + epsilon - mg**2. Eigen rounds
# float16 after every operation, which matters where ms - mg**2 cancels; XLA's CPU
# fusions keep float16 intermediates in float32, so the float16 rules are computed in
# float32 with each result rounded to float16 (docs/semantics/training.md).

_HALF_PACKET = 8  # float16 elements per Eigen packet in TF's x86 CPU build


def _per_op_rounding(dtype):
  """(widen, rnd): float16 widened to float32 and each result rounded to float16
  (``lax.reduce_precision``, which XLA keeps); identities for other dtypes."""
  if jnp.dtype(dtype) != np.float16:
    return (lambda x: x), (lambda x: x)
  return (
    (lambda x: jnp.asarray(x).astype(np.float32)),
    (lambda x: lax.reduce_precision(x, exponent_bits=5, mantissa_bits=10)),
  )


def _row_rsqrt(x, rnd, half):
  """Eigen's rsqrt over one row as TF's sparse kernels evaluate it: float16 rows in
  packets of 8 (rsqrt in float32, rounded once) and the elements past the last whole
  packet one by one as 1 / sqrt(x), the square root rounded to float16 first."""
  if not half:
    return lax.rsqrt(x)
  scalar = rnd(1 / rnd(jnp.sqrt(x)))
  packed = x.size // _HALF_PACKET * _HALF_PACKET
  if packed == 0:
    return scalar
  in_packet = np.arange(x.size).reshape(x.shape) < packed
  return jnp.where(in_packet, rnd(lax.rsqrt(x)), scalar)


def sparse_rmsprop(var, ms, mom, lr, rho, momentum, epsilon, grad):
  """RMSProp as TF's sparse kernel writes it (float16 rounded per operation).

  ms = ms * rho + grad**2 * (1 - rho); mom = mom * momentum + rsqrt(ms + epsilon) *
  lr * grad; var -= mom."""
  half = jnp.result_type(var) == np.float16
  widen, r = _per_op_rounding(jnp.result_type(var))
  var, ms, mom, lr, rho, momentum, epsilon, grad = map(
    widen, (var, ms, mom, lr, rho, momentum, epsilon, grad)
  )
  ms = r(r(ms * rho) + r(r(grad * grad) * r(1 - rho)))
  mom = r(r(mom * momentum) + r(r(_row_rsqrt(r(ms + epsilon), r, half) * lr) * grad))
  return r(var - mom), ms, mom


def sparse_centered_rmsprop(var, mg, ms, mom, lr, rho, momentum, epsilon, grad):
  """Centered RMSProp as TF's sparse kernel writes it (float16 rounded per operation).

  ms and mg as sparse RMSProp's ms (mg = mg * rho + grad * (1 - rho)), denominator
  (ms + epsilon) - mg**2, then as sparse RMSProp."""
  half = jnp.result_type(var) == np.float16
  widen, r = _per_op_rounding(jnp.result_type(var))
  var, mg, ms, mom, lr, rho, momentum, epsilon, grad = map(
    widen, (var, mg, ms, mom, lr, rho, momentum, epsilon, grad)
  )
  ms = r(r(ms * rho) + r(r(grad * grad) * r(1 - rho)))
  mg = r(r(mg * rho) + r(grad * r(1 - rho)))
  denom = r(r(ms + epsilon) - r(mg * mg))
  mom = r(r(mom * momentum) + r(r(_row_rsqrt(denom, r, half) * lr) * grad))
  return r(var - mom), mg, ms, mom


_COMMON = {"lr": _LR, "rho": (0.1, 0.99), "momentum": (0.0, 0.99), "epsilon": (1e-3, 0.1)}

define_optimizer(
  "RMSProp",
  rmsprop,
  n_state=3,
  dtypes=ALL_DTYPES,
  ranges=dict(_COMMON, ms=_POS),
  sparse=True,
  sparse_dtypes=_NO_BF16,
  sparse_update=sparse_rmsprop,
)
define_optimizer(
  "CenteredRMSProp",
  centered_rmsprop,
  n_state=4,
  dtypes=ALL_DTYPES,
  ranges=dict(_COMMON, ms=_POS, mg=(-0.2, 0.2)),
  sparse=True,
  sparse_dtypes=_NO_BF16,
  sparse_update=sparse_centered_rmsprop,
)
define_optimizer(
  "Adadelta",
  adadelta,
  n_state=3,
  dtypes=ALL_DTYPES,
  ranges=dict(_COMMON, accum=_POS, accum_update=_POS),
  sparse=True,
  sparse_dtypes=ALL_DTYPES,
)
