"""Adam family and sign methods: Adam, AdamWithAmsgrad, AdaMax, AddSign, PowerSign
(dense, ref and resource forms; TF has no sparse forms of these)."""

from __future__ import annotations

import jax.numpy as jnp

from tfprims.ops.training._common import ALL_DTYPES, REAL_DTYPES, define_optimizer

_LR = (0.01, 1.0)
_POS = (0.1, 2.0)


def _moments(m, v, beta1, beta2, grad):
  return m + (grad - m) * (1 - beta1), v + (grad * grad - v) * (1 - beta2)


def _alpha(lr, beta1_power, beta2_power):
  return lr * jnp.sqrt(1 - beta2_power) / (1 - beta1_power)


def adam(var, m, v, beta1_power, beta2_power, lr, beta1, beta2, epsilon, grad, *, use_nesterov):
  """m, v: moving averages of grad and grad**2; var -= lr_t * m / (sqrt(v) + epsilon)
  with lr_t = lr * sqrt(1 - beta2_power) / (1 - beta1_power) (Nesterov: m replaced by
  beta1 * m + (1 - beta1) * grad)."""
  m, v = _moments(m, v, beta1, beta2, grad)
  alpha = _alpha(lr, beta1_power, beta2_power)
  step = (grad * (1 - beta1) + beta1 * m) if use_nesterov else m
  return var - (step * alpha) / (jnp.sqrt(v) + epsilon), m, v


def adam_amsgrad(var, m, v, vhat, beta1_power, beta2_power, lr, beta1, beta2, epsilon, grad):
  """Adam with vhat = max(vhat, v) in the denominator."""
  m, v = _moments(m, v, beta1, beta2, grad)
  vhat = jnp.maximum(vhat, v)
  alpha = _alpha(lr, beta1_power, beta2_power)
  return var - (m * alpha) / (jnp.sqrt(vhat) + epsilon), m, v, vhat


def adamax(var, m, v, beta1_power, lr, beta1, beta2, epsilon, grad):
  """m: moving average of grad; v = max(beta2 * v, |grad|); var -= lr / (1 -
  beta1_power) * m / (v + epsilon)."""
  m = m + (grad - m) * (1 - beta1)
  v = jnp.maximum(beta2 * v, jnp.abs(grad))
  return var - lr / (1 - beta1_power) * (m / (v + epsilon)), m, v


def add_sign(var, m, lr, alpha, sign_decay, beta, grad):
  """m = beta * m + (1 - beta) * grad; var -= lr * (alpha + sign_decay * sign(grad) *
  sign(m)) * grad."""
  m = m * beta + grad * (1 - beta)
  sign_gm = jnp.sign(grad) * jnp.sign(m)
  return var - lr * (alpha + sign_decay * sign_gm) * grad, m


def power_sign(var, m, lr, logbase, sign_decay, beta, grad):
  """m = beta * m + (1 - beta) * grad; var -= lr * exp(logbase * sign_decay *
  sign(grad) * sign(m)) * grad."""
  m = m * beta + grad * (1 - beta)
  sign_gm = jnp.sign(grad) * jnp.sign(m)
  return var - lr * jnp.exp(logbase * sign_decay * sign_gm) * grad, m


_ADAM = {
  "lr": _LR,
  "beta1": (0.1, 0.99),
  "beta2": (0.1, 0.999),
  "epsilon": (1e-3, 0.1),
  "beta1_power": (0.1, 0.9),
  "beta2_power": (0.1, 0.9),
  "v": _POS,
  "vhat": _POS,
}

define_optimizer(
  "Adam",
  adam,
  n_state=3,
  dtypes=ALL_DTYPES,
  ranges=_ADAM,
  bool_attrs=("use_nesterov",),
  attrs=("use_nesterov",),
)
define_optimizer(
  "AdamWithAmsgrad", adam_amsgrad, n_state=4, dtypes=REAL_DTYPES, ranges=_ADAM, resource_only=True
)
define_optimizer(
  "AdaMax", adamax, n_state=3, dtypes=("float16", "float32", "float64"), ranges=_ADAM
)
_SIGN = {
  "lr": _LR,
  "beta": (0.1, 0.99),
  "sign_decay": (0.1, 1.0),
  "alpha": (0.5, 2.0),
  "logbase": (0.1, 1.0),
}
define_optimizer("AddSign", add_sign, n_state=2, dtypes=REAL_DTYPES, ranges=_SIGN)
define_optimizer("PowerSign", power_sign, n_state=2, dtypes=REAL_DTYPES, ranges=_SIGN)
