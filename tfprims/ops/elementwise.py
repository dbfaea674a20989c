"""Elementwise math: unary, binary (TF broadcasting), comparisons, logical, Cast."""

from __future__ import annotations

import jax.numpy as jnp
from jax.interpreters import ad

from tfprims.core import define_op, unbroadcast

U = ad.is_undefined_primal


def _broadcast_to_out(t, *operands):
  """A tangent of one operand, broadcast to the op's output shape."""
  shape = jnp.broadcast_shapes(*(jnp.shape(o) for o in operands))
  return t if t.shape == shape else jnp.broadcast_to(t, shape)


def _shape(x):
  return x.aval.shape if U(x) else jnp.shape(x)


Sin = define_op("Sin", jnp.sin, family="elementwise", batching="elementwise",
                jvp=(lambda t, x: Mul(t, Cos(x)),),
                spec=lambda st: st.Spec(st.unary(st.FLOATS + st.COMPLEX)))
Cos = define_op("Cos", jnp.cos, family="elementwise", batching="elementwise",
                jvp=(lambda t, x: Neg(Mul(t, Sin(x))),),
                spec=lambda st: st.Spec(st.unary(st.FLOATS + st.COMPLEX)))
Neg = define_op("Neg", jnp.negative, family="elementwise", batching="elementwise",
                linear=True, transpose=lambda ct, x: [Neg(ct)],
                spec=lambda st: st.Spec(st.unary(st.FLOATS + st.SIGNED + st.COMPLEX)))


def _mul_transpose(ct, x, y):
  return [unbroadcast(Mul(ct, y), _shape(x)) if U(x) else None,
          unbroadcast(Mul(x, ct), _shape(y)) if U(y) else None]


Mul = define_op(
    "Mul", jnp.multiply, family="elementwise", batching="elementwise",
    jvp=(lambda t, x, y: Mul(t, y), lambda t, x, y: Mul(x, t)),
    transpose=_mul_transpose,
    spec=lambda st: st.Spec(st.binary(st.NUMERIC + st.COMPLEX)))

AddV2 = define_op(
    "AddV2", jnp.add, family="elementwise", batching="elementwise", linear=True,
    transpose=lambda ct, x, y: [unbroadcast(ct, _shape(x)) if U(x) else None,
                                unbroadcast(ct, _shape(y)) if U(y) else None],
    spec=lambda st: st.Spec(st.binary(st.NUMERIC + st.COMPLEX)))
