"""Bitwise and logical ops: Invert, BitwiseAnd, BitwiseOr, BitwiseXor, LeftShift,
RightShift, PopulationCount, LogicalNot, LogicalAnd, LogicalOr.

Integer and boolean ops: no derivative. Shift amounts are clamped to
``[0, bits - 1]`` as TF does (docs/semantics/elementwise.md).
"""

from __future__ import annotations

import jax.numpy as jnp
from jax import lax

from tfprims import rules
from tfprims.core import register_op
from tfprims.ops.elementwise._common import EW, INT_ONLY, bcast

_NO_GRAD = {"jvp": INT_ONLY, "vjp": INT_ONLY}

Invert = register_op(
  "Invert",
  lax.bitwise_not,
  **EW,
  jvp=rules.per_op(rules.no_grad_jvp),
  spec=lambda st: st.Spec(st.unary_calls(st.INTS), skip=_NO_GRAD),
)

BitwiseAnd = register_op(
  "BitwiseAnd",
  jnp.bitwise_and,
  **EW,
  jvp=rules.per_op(rules.no_grad_jvp),
  spec=lambda st: st.Spec(st.binary_calls(st.INTS), skip=_NO_GRAD),
)

BitwiseOr = register_op(
  "BitwiseOr",
  jnp.bitwise_or,
  **EW,
  jvp=rules.per_op(rules.no_grad_jvp),
  spec=lambda st: st.Spec(st.binary_calls(st.INTS), skip=_NO_GRAD),
)

BitwiseXor = register_op(
  "BitwiseXor",
  jnp.bitwise_xor,
  **EW,
  jvp=rules.per_op(rules.no_grad_jvp),
  spec=lambda st: st.Spec(st.binary_calls(st.INTS), skip=_NO_GRAD),
)


def _clamped_shift(x, y):
  """TF clamps the shift amount to [0, bits - 1] (no C undefined behaviour)."""
  x, y = bcast(x, y)
  bits = 8 * x.dtype.itemsize
  return x, jnp.clip(y, 0, bits - 1).astype(x.dtype)


def _left_shift(x, y):
  x, y = _clamped_shift(x, y)
  return lax.shift_left(x, y)


def _right_shift(x, y):
  x, y = _clamped_shift(x, y)
  if jnp.issubdtype(x.dtype, jnp.signedinteger):
    return lax.shift_right_arithmetic(x, y)
  return lax.shift_right_logical(x, y)


def _shift_spec(st, left):
  # Shift amounts: in range, negative or >= the bit width. 64-bit values stay
  # small so that x64-off (32-bit) results equal TF's 64-bit ones.
  return st.binary_calls(
    st.INTS,
    per_arg={"x": {"wide": 2**15}, "y": {"int_lo": -70, "int_hi": 70, "wide": 15 if left else 70}},
  )


LeftShift = register_op(
  "LeftShift",
  _left_shift,
  **EW,
  jvp=rules.per_op(rules.no_grad_jvp),
  spec=lambda st: st.Spec(_shift_spec(st, True), skip=_NO_GRAD),
)

RightShift = register_op(
  "RightShift",
  _right_shift,
  **EW,
  jvp=rules.per_op(rules.no_grad_jvp),
  spec=lambda st: st.Spec(_shift_spec(st, False), skip=_NO_GRAD),
)


def _population_count(x):
  """The number of bits set in each element (two's complement), as uint8."""
  return lax.population_count(x).astype(jnp.uint8)


PopulationCount = register_op(
  "PopulationCount",
  _population_count,
  **EW,
  jvp=rules.per_op(rules.no_grad_jvp),
  spec=lambda st: st.Spec(st.unary_calls(st.INTS), skip=_NO_GRAD),
)

LogicalNot = register_op(
  "LogicalNot",
  jnp.logical_not,
  **EW,
  jvp=rules.per_op(rules.no_grad_jvp),
  spec=lambda st: st.Spec(st.unary_calls(("bool",)), skip=_NO_GRAD),
)

LogicalAnd = register_op(
  "LogicalAnd",
  jnp.logical_and,
  **EW,
  jvp=rules.per_op(rules.no_grad_jvp),
  spec=lambda st: st.Spec(st.binary_calls(("bool",)), skip=_NO_GRAD),
)

LogicalOr = register_op(
  "LogicalOr",
  jnp.logical_or,
  **EW,
  jvp=rules.per_op(rules.no_grad_jvp),
  spec=lambda st: st.Spec(st.binary_calls(("bool",)), skip=_NO_GRAD),
)
