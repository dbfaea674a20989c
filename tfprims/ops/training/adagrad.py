"""Adagrad family: Adagrad, AdagradV2, ProximalAdagrad, AdagradDA (dense, sparse,
ref and resource forms)."""

from __future__ import annotations

import jax.numpy as jnp
from jax import lax

from tfprims.ops.training._common import ALL_DTYPES, F32_F64, define_optimizer
from tfprims.ops.training.gradient_descent import eigen_sign, proximal

_LR = (0.01, 1.0)
_POS = (0.1, 2.0)


def adagrad(var, accum, lr, grad, *, update_slots):
  """accum += grad**2 (when update_slots); var -= lr * grad / sqrt(accum)."""
  if update_slots:
    accum = accum + grad * grad
  return var - lr * grad * lax.rsqrt(accum), accum


def adagrad_v2(var, accum, lr, epsilon, grad, *, update_slots):
  """accum += grad**2 (when update_slots); var -= lr * grad / (sqrt(accum) + epsilon)."""
  if update_slots:
    accum = accum + grad * grad
  return var - lr * grad / (jnp.sqrt(accum) + epsilon), accum


def proximal_adagrad(var, accum, lr, l1, l2, grad):
  """accum += grad**2; a step of lr / sqrt(accum), then the proximal step with l1/l2
  scaled by that rate."""
  accum = accum + grad * grad
  rate = lr * lax.rsqrt(accum)
  return proximal(var - grad * rate, rate, l1, l2), accum


def adagrad_da(
  var, gradient_accumulator, gradient_squared_accumulator, grad, lr, l1, l2, global_step
):
  """Dual averaging: the accumulators add grad and grad**2; var = -lr * (the
  accumulated gradient soft-thresholded by l1 * global_step) / (l2 * global_step * lr
  + sqrt(squared accumulator))."""
  acc = gradient_accumulator + grad
  sq = gradient_squared_accumulator + grad * grad
  step = jnp.asarray(global_step).astype(jnp.result_type(var))
  denom = l2 * step * lr + jnp.sqrt(sq)
  shrunk = eigen_sign(acc) * jnp.maximum(jnp.abs(acc) - l1 * step, 0)
  return -lr * jnp.where(l1 > 0, shrunk, acc) / denom, acc, sq


define_optimizer(
  "Adagrad",
  adagrad,
  n_state=2,
  dtypes=ALL_DTYPES,
  ranges={"lr": _LR, "accum": _POS},
  bool_attrs=("update_slots",),
  attrs=("update_slots",),
  sparse=True,
  sparse_dtypes=ALL_DTYPES,
)
define_optimizer(
  "AdagradV2",
  adagrad_v2,
  n_state=2,
  dtypes=ALL_DTYPES,
  ranges={"lr": _LR, "accum": _POS, "epsilon": (1e-3, 0.1)},
  bool_attrs=("update_slots",),
  attrs=("update_slots",),
  sparse=True,
  sparse_dtypes=ALL_DTYPES,
)
define_optimizer(
  "ProximalAdagrad",
  proximal_adagrad,
  n_state=2,
  dtypes=F32_F64,
  ranges={"lr": _LR, "accum": _POS, "l1": [0.0, 0.01, 0.1, 0.5], "l2": [0.0, 0.01, 0.1, 0.5]},
  nondiff=("l1", "l2"),
  sparse=True,
  sparse_dtypes=F32_F64,
)
define_optimizer(
  "AdagradDA",
  adagrad_da,
  n_state=3,
  dtypes=F32_F64,
  ranges={
    "lr": _LR,
    "gradient_squared_accumulator": _POS,
    "l1": [0.0, 0.01, 0.1, 0.5],
    "l2": [0.0, 0.01, 0.1, 0.5],
    "global_step": (1, 10),
  },
  nondiff=("l1", "l2"),
  sparse=True,
  sparse_dtypes=F32_F64,
)
