"""Comparisons: Equal, NotEqual, Less, LessEqual, Greater, GreaterEqual,
ApproximateEqual. Boolean results: no derivative.

Equal/NotEqual keep ``incompatible_shape_error``: with False, shapes that do not
broadcast give a scalar False (Equal) / True (NotEqual), as in TF, and a batch
of that scalar under vmap.
"""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np

from tfprims import rules
from tfprims.core import register_op
from tfprims.ops.elementwise._common import BOOL_OUT, EW

_NO_GRAD = {"jvp": BOOL_OUT, "vjp": BOOL_OUT}


def _broadcastable(*shapes) -> bool:
  try:
    jnp.broadcast_shapes(*shapes)
    return True
  except ValueError:
    return False


def _equality(fn, incompatible_value):
  """Equal/NotEqual: with ``incompatible_shape_error=False`` shapes that do not
  broadcast give a scalar False (Equal) / True (NotEqual), as in TF."""

  def impl(x, y, *, incompatible_shape_error=True):
    if not incompatible_shape_error and not _broadcastable(jnp.shape(x), jnp.shape(y)):
      return jnp.full((), incompatible_value, jnp.bool_)
    return fn(x, y)

  return impl


def _equality_batching(op, incompatible_value):
  def rule(args, dims, *, incompatible_shape_error=True):
    (x, y), (dx, dy) = args, dims
    size = x.shape[dx] if dx is not None else y.shape[dy]
    example = [
      tuple(s for i, s in enumerate(a.shape) if i != d) if d is not None else a.shape
      for a, d in zip(args, dims)
    ]
    if not incompatible_shape_error and not _broadcastable(*example):
      return jnp.full((size,), incompatible_value, jnp.bool_), 0
    prim = op.primitive
    return rules.elementwise_batching(prim)(
      args, dims, incompatible_shape_error=incompatible_shape_error
    )

  return rule


def _equality_spec(st):
  @st.composite
  def draw(draw):
    dtype = draw(st.dtypes(st.ALL))
    if draw(st.integers(0, 3)) == 0:  # maybe incompatible shapes
      sa, sb = draw(st.shapes()), draw(st.shapes())
    else:
      sa, sb = draw(st.broadcastable_shapes(2))
    flag = draw(st.booleans()) and _broadcastable(sa, sb)
    ties = draw(st.booleans())
    return {
      "x": st.draw_array(draw, dtype, sa, ties=ties),
      "y": st.draw_array(draw, dtype, sb, ties=ties),
      "incompatible_shape_error": flag,
    }

  return draw()


Equal = register_op(
  "Equal",
  _equality(jnp.equal, False),
  family="elementwise",
  attrs=("incompatible_shape_error",),
  jvp=rules.per_op(rules.no_grad_jvp),
  batching=rules.per_op(_equality_batching, False),
  spec=lambda st: st.Spec(_equality_spec(st), skip=_NO_GRAD),
)

NotEqual = register_op(
  "NotEqual",
  _equality(jnp.not_equal, True),
  family="elementwise",
  attrs=("incompatible_shape_error",),
  jvp=rules.per_op(rules.no_grad_jvp),
  batching=rules.per_op(_equality_batching, True),
  spec=lambda st: st.Spec(_equality_spec(st), skip=_NO_GRAD),
)

Less = register_op(
  "Less",
  jnp.less,
  **EW,
  jvp=rules.per_op(rules.no_grad_jvp),
  spec=lambda st: st.Spec(st.binary_calls(st.NUMERIC), skip=_NO_GRAD),
)

LessEqual = register_op(
  "LessEqual",
  jnp.less_equal,
  **EW,
  jvp=rules.per_op(rules.no_grad_jvp),
  spec=lambda st: st.Spec(st.binary_calls(st.NUMERIC), skip=_NO_GRAD),
)

Greater = register_op(
  "Greater",
  jnp.greater,
  **EW,
  jvp=rules.per_op(rules.no_grad_jvp),
  spec=lambda st: st.Spec(st.binary_calls(st.NUMERIC), skip=_NO_GRAD),
)

GreaterEqual = register_op(
  "GreaterEqual",
  jnp.greater_equal,
  **EW,
  jvp=rules.per_op(rules.no_grad_jvp),
  spec=lambda st: st.Spec(st.binary_calls(st.NUMERIC), skip=_NO_GRAD),
)


def _approximate_equal(x, y, *, tolerance):
  # TF's kernel compares with <= (its docs say <): |x - y| <= tolerance.
  # (tolerance is a 32-bit float attr, cast to x's dtype.)
  return jnp.abs(jnp.subtract(x, y)) <= jnp.asarray(np.float32(tolerance), x.dtype)


ApproximateEqual = register_op(
  "ApproximateEqual",
  _approximate_equal,
  **EW,
  attrs=("tolerance",),
  jvp=rules.per_op(rules.no_grad_jvp),
  spec=lambda st: st.Spec(
    st.binary_calls(
      ("float32", "float64"),
      same_shape=True,
      attrs={"tolerance": st.sampled_from([1e-5, 0.5, 1.0, 2.0, 0.0])},
    ),
    skip=_NO_GRAD,
  ),
)
