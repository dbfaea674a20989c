"""FTRL-proximal: Ftrl, FtrlV2 (l2_shrinkage), with multiply_linear_by_lr (dense,
sparse, ref and resource forms)."""

from __future__ import annotations

import jax.numpy as jnp

from tfprims.ops.training._common import REAL_DTYPES, define_optimizer


def _accum_pow(accum, lr_power):
  # TF's kernels take sqrt when lr_power == -0.5 and pow otherwise.
  return jnp.where(lr_power == -0.5, jnp.sqrt(accum), jnp.power(accum, -lr_power))


def ftrl_v2(var, accum, linear, grad, lr, l1, l2, l2_shrinkage, lr_power, *, multiply_linear_by_lr):
  """FTRL-proximal (TF's ApplyFtrlV2 kernel): accum += grad**2; linear += grad + 2 *
  l2_shrinkage * var - (new_accum**-lr_power - accum**-lr_power) / lr * var; var =
  (l1 * sign(linear) - linear) / (new_accum**-lr_power / lr + 2 * l2) where |linear| >
  l1, else 0 (with multiply_linear_by_lr, linear is kept multiplied by lr)."""
  shrunk = grad + 2 * l2_shrinkage * var
  new_accum = accum + grad * grad
  delta = _accum_pow(new_accum, lr_power) - _accum_pow(accum, lr_power)
  if multiply_linear_by_lr:
    linear = linear + shrunk * lr - delta * var
    x = l1 * lr * jnp.sign(linear) - linear
    y = _accum_pow(new_accum, lr_power) + 2 * l2 * lr
    threshold = l1 * lr
  else:
    linear = linear + shrunk - delta / lr * var
    x = l1 * jnp.sign(linear) - linear
    y = _accum_pow(new_accum, lr_power) / lr + 2 * l2
    threshold = l1
  var = jnp.where(jnp.abs(linear) > threshold, x / y, jnp.zeros_like(var))
  return var, new_accum, linear


def ftrl(var, accum, linear, grad, lr, l1, l2, lr_power, *, multiply_linear_by_lr):
  """FTRL-proximal (TF's ApplyFtrl kernel): FtrlV2 without l2_shrinkage."""
  return ftrl_v2(
    var, accum, linear, grad, lr, l1, l2, 0, lr_power, multiply_linear_by_lr=multiply_linear_by_lr
  )


# l1 > 0: with l1 = 0 the all-zero draws put the new linear exactly on the |linear| > l1
# kink, where central differences see one side's slope (values with l1 = 0 are tested
# by the FtrlOptimizer programs in tests/test_optimizers.py).
_RANGES = {
  "accum": (0.1, 2.0),
  "lr": (0.1, 1.0),
  "l1": [0.01, 0.1, 0.5],
  "l2": [0.0, 0.01, 0.1],
  "l2_shrinkage": [0.0, 0.01, 0.1],
  "lr_power": [-0.5, -0.5, -1.0, -0.25, 0.0],
}
_KW = dict(
  n_state=3,
  dtypes=REAL_DTYPES,
  ranges=_RANGES,
  bool_attrs=("multiply_linear_by_lr",),
  attrs=("multiply_linear_by_lr",),
  # lr_power picks sqrt or pow; TF refuses negative l1/l2 (central differences
  # around 0 would step there).
  nondiff=("lr_power", "l1", "l2", "l2_shrinkage"),
  sparse=True,
  sparse_dtypes=REAL_DTYPES,
)
define_optimizer("Ftrl", ftrl, **_KW)
define_optimizer("FtrlV2", ftrl_v2, **_KW)
