"""Gradient descent and momentum: GradientDescent, ProximalGradientDescent,
Momentum, KerasMomentum (dense, sparse, ref and resource forms)."""

from __future__ import annotations

import jax.numpy as jnp

from tfprims.ops.training._common import ALL_DTYPES, F32_F64, define_optimizer

_LR = (0.01, 1.0)


def gradient_descent(var, alpha, delta):
  """var - alpha * delta."""
  return (var - alpha * delta,)


def eigen_sign(x):
  """Eigen's (and TF's scalar ``sgn``) sign: +0.0 for both zeros (``jnp.sign`` keeps
  the zero's sign), NaN for NaN."""
  return jnp.where(x == 0, jnp.zeros((), x.dtype), jnp.sign(x))


def proximal(prox, scale, l1, l2):
  """TF's proximal step: soft-thresholding by ``scale * l1`` (when l1 > 0), then
  shrinking by ``1 + scale * l2``. A zero ``prox`` gives +0.0 (Eigen's sign of -0.0
  is +0.0); one shrunk to zero keeps its sign (-1 * 0 is -0.0)."""
  shrunk = eigen_sign(prox) * jnp.maximum(jnp.abs(prox) - scale * l1, 0)
  return jnp.where(l1 > 0, shrunk, prox) / (1 + scale * l2)


def proximal_gradient_descent(var, alpha, l1, l2, delta):
  """var - alpha * delta, then the proximal step with l1/l2 scaled by alpha."""
  return (proximal(var - alpha * delta, alpha, l1, l2),)


def momentum(var, accum, lr, grad, momentum, *, use_nesterov):
  """accum = accum * momentum + grad; var -= lr * accum (Nesterov: var -= lr * grad +
  lr * momentum * accum)."""
  accum = accum * momentum + grad
  if use_nesterov:
    return var - (grad * lr + accum * momentum * lr), accum
  return var - accum * lr, accum


def keras_momentum(var, accum, lr, grad, momentum, *, use_nesterov):
  """Keras' sign convention: accum = accum * momentum - lr * grad; var += accum
  (Nesterov: var += momentum * accum - lr * grad)."""
  accum = accum * momentum - grad * lr
  if use_nesterov:
    return var + (accum * momentum - grad * lr), accum
  return var + accum, accum


_L1L2 = {"l1": [0.0, 0.01, 0.1, 0.5], "l2": [0.0, 0.01, 0.1, 0.5], "alpha": _LR}

define_optimizer(
  "GradientDescent", gradient_descent, n_state=1, dtypes=ALL_DTYPES, ranges={"alpha": _LR}
)
define_optimizer(
  "ProximalGradientDescent",
  proximal_gradient_descent,
  n_state=1,
  dtypes=F32_F64,
  ranges=_L1L2,
  nondiff=("l1", "l2"),
  sparse=True,
  sparse_dtypes=F32_F64,
)
define_optimizer(
  "Momentum",
  momentum,
  n_state=2,
  dtypes=ALL_DTYPES,
  ranges={"lr": _LR, "momentum": (0.0, 0.99)},
  bool_attrs=("use_nesterov",),
  attrs=("use_nesterov",),
  sparse=True,
  sparse_dtypes=ALL_DTYPES,
)
define_optimizer(
  "KerasMomentum",
  keras_momentum,
  n_state=2,
  dtypes=ALL_DTYPES,
  ranges={"lr": _LR, "momentum": (0.0, 0.99)},
  bool_attrs=("use_nesterov",),
  attrs=("use_nesterov",),
  sparse=True,
  sparse_dtypes=ALL_DTYPES,
  resource_only=True,
)
