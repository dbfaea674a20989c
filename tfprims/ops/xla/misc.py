"""XlaEinsum, XlaReducePrecision, XlaOptimizationBarrier, and the Xla* ops that only
exist inside a TF-XLA cluster (declared unsupported).

XlaEinsum's derivatives are ``tf.XlaEinsum`` with rearranged equations and its
batching adds a subscript; XlaReducePrecision is differentiated as JAX's
``reduce_precision`` (its tangent is rounded the same way: a straight-through
estimate, TF registers no gradient); XlaOptimizationBarrier passes tangents
through unchanged.
"""

from __future__ import annotations

import string

import jax
import jax.numpy as jnp
from jax import lax
from jax.interpreters import ad

from tfprims import rules
from tfprims.core import declare_unsupported, register_op, tfops
from tfprims.ops.xla import _common
from tfprims.ops.xla._common import FAMILY
from tfprims.rules import U

_JIT_NOTE = "oracle: the op under tf.function(jit_compile=True)"

# --- XlaEinsum ---------------------------------------------------------------------------


def _einsum_impl(a, b, *, equation):
  """``jnp.einsum`` of two operands at full precision (as XLA's Einsum on CPU)."""
  return jnp.einsum(equation, a, b, precision=lax.Precision.HIGHEST, preferred_element_type=a.dtype)


def _split(equation):
  inputs, out = equation.replace(" ", "").split("->")
  a, b = inputs.split(",")
  return a, b, out


def _einsum_jvp(primals, tangents, *, equation):
  a, b = primals
  ta, tb = tangents
  out = tfops.XlaEinsum(a, b, equation=equation)
  terms = []
  if type(ta) is not ad.Zero:
    terms.append(tfops.XlaEinsum(ta, b, equation=equation))
  if type(tb) is not ad.Zero:
    terms.append(tfops.XlaEinsum(a, tb, equation=equation))
  if not terms:
    return out, rules.zero_tangent(out)
  return out, terms[0] if len(terms) == 1 else tfops.AddV2(*terms)


def _transposable(target, other, out):
  """Whether ``einsum(out, other -> target)`` is the transpose: every subscript of
  ``target`` is kept by ``out`` or ``other``, none repeats, no ellipsis."""
  return (
    "." not in target + other + out
    and len(set(target)) == len(target)
    and set(target) <= set(out) | set(other)
  )


def _einsum_transpose(ct, a, b, *, equation):
  sa, sb, so = _split(equation)
  ct = rules.instantiate(ct)
  if U(a):
    if _transposable(sa, sb, so):
      return [tfops.XlaEinsum(ct, b, equation=f"{so},{sb}->{sa}"), None]
    aval = jax.ShapeDtypeStruct(a.aval.shape, a.aval.dtype)
    return [
      jax.linear_transpose(lambda x: _einsum_impl(x, b, equation=equation), aval)(ct)[0],
      None,
    ]
  if _transposable(sb, sa, so):
    return [None, tfops.XlaEinsum(a, ct, equation=f"{sa},{so}->{sb}")]
  aval = jax.ShapeDtypeStruct(b.aval.shape, b.aval.dtype)
  return [None, jax.linear_transpose(lambda y: _einsum_impl(a, y, equation=equation), aval)(ct)[0]]


def _einsum_batch(args, dims, *, equation):
  """A new subscript for the batch axis, in front of the batched operands and the
  output."""
  (a, b), (da, db) = args, dims
  sa, sb, so = _split(equation)
  z = next(c for c in string.ascii_letters if c not in sa + sb + so)
  sa, a = (z + sa, rules.to_front(a, da)) if da is not None else (sa, a)
  sb, b = (z + sb, rules.to_front(b, db)) if db is not None else (sb, b)
  return tfops.XlaEinsum(a, b, equation=f"{sa},{sb}->{z}{so}"), 0


_EINSUMS = (
  "ab,bc->ac",
  "ab,cb->ca",
  "abc,acd->abd",
  "a,a->",
  "a,b->ab",
  "ab,b->a",
  "abc,bd->adc",
  "ab,ab->ab",
  "ab,c->abc",
)


def _einsum_calls(st):
  @st.composite
  def calls(draw):
    equation = draw(st.sampled_from(_EINSUMS))
    sa, sb, _ = _split(equation)
    sizes = {c: draw(st.integers(1, 3)) for c in set(sa + sb)}
    dtype = draw(st.dtypes(("float32", "bfloat16", "complex64")))
    arr = lambda s: st.draw_array(draw, dtype, tuple(sizes[c] for c in s), lo=-4, hi=4)
    return dict(a=arr(sa), b=arr(sb), equation=equation)

  return calls()


_EINSUM_GRAD_NOTE = (
  "; derivatives against central differences: TF's XlaEinsum gradient "
  "does not conjugate the other operand, so its complex gradients are "
  "not the conjugate VJP (docs/semantics/xla.md)"
)

XlaEinsum = register_op(
  "XlaEinsum",
  _einsum_impl,
  family=FAMILY,
  attrs=("equation",),
  jvp=_einsum_jvp,
  transpose=_einsum_transpose,
  batching=_einsum_batch,
  spec=rules.per_op(
    lambda op: (
      lambda st: st.Spec(
        _einsum_calls(st),
        rtol={"bfloat16": 5e-2},
        ignore_zero_sign=st.ACCUMULATED_ZERO_SIGN,
        oracle=_common.jit_oracle(op.op_type, ("a", "b")),
        grad_oracle="fd",
        note=_JIT_NOTE + _EINSUM_GRAD_NOTE,
      )
    )
  ),
)

# --- XlaReducePrecision ----------------------------------------------------------------


def _reduce_precision_impl(operand, *, exponent_bits, mantissa_bits):
  """``lax.reduce_precision``: rounds to the given exponent and mantissa widths."""
  return lax.reduce_precision(
    operand, exponent_bits=int(exponent_bits), mantissa_bits=int(mantissa_bits)
  )


def _reduce_precision_calls(st):
  @st.composite
  def calls(draw):
    dtype = draw(st.dtypes(st.FLOATS))
    bits = {"float16": (5, 10), "bfloat16": (8, 7), "float32": (8, 23), "float64": (11, 52)}[
      dtype.name
    ]
    e = draw(st.integers(2, bits[0]))
    m = draw(st.integers(1, bits[1]))
    return dict(
      operand=st.draw_array(draw, dtype, tuple(draw(st.shapes(max_rank=2)))),
      exponent_bits=e,
      mantissa_bits=m,
    )

  return calls()


_ROUNDING = (
  "TF registers no gradient; the tangent is rounded like the value (JAX's "
  "reduce_precision rule, a straight-through estimate) where the op is "
  "piecewise constant (docs/semantics/xla.md)"
)

XlaReducePrecision = register_op(
  "XlaReducePrecision",
  _reduce_precision_impl,
  family=FAMILY,
  attrs=("exponent_bits", "mantissa_bits"),
  linear=True,
  transpose=lambda ct, x, **p: [tfops.XlaReducePrecision(ct, **p)],
  batching="elementwise",
  spec=rules.per_op(
    lambda op: (
      lambda st: st.Spec(
        _reduce_precision_calls(st),
        oracle=_common.jit_oracle(op.op_type, ("operand",)),
        skip={"jvp": _ROUNDING, "vjp": _ROUNDING},
        note=_JIT_NOTE,
      )
    )
  ),
)

# --- XlaOptimizationBarrier --------------------------------------------------------------


def _barrier_impl(*inputs):
  """``lax.optimization_barrier``: the inputs, with XLA kept from moving work across."""
  return list(lax.optimization_barrier(tuple(inputs)))


def _barrier_jvp(primals, tangents):
  outs = tfops.XlaOptimizationBarrier(*primals)
  ts = [rules.zero_tangent(o) if type(t) is ad.Zero else t for t, o in zip(tangents, outs)]
  return outs, ts


def _barrier_calls(st):
  @st.composite
  def calls(draw):
    n = draw(st.integers(1, 3))
    xs = []
    for _ in range(n):
      dtype = draw(st.dtypes(st.ALL))
      xs.append(st.draw_array(draw, dtype, tuple(draw(st.shapes(max_rank=3)))))
    return dict(input=xs)

  return calls()


XlaOptimizationBarrier = register_op(
  "XlaOptimizationBarrier",
  _barrier_impl,
  family=FAMILY,
  multiple_results=True,
  jvp=_barrier_jvp,
  batching=rules.per_op(rules.same_op_batching),
  spec=rules.per_op(
    lambda op: (
      lambda st: st.Spec(
        _barrier_calls(st),
        oracle=_common.jit_oracle(op.op_type, ("input",)),
        grad_oracle="fd",
        note=_JIT_NOTE + "; derivatives against central differences",
      )
    )
  ),
)

# --- ops that only exist inside a TF-XLA cluster ---------------------------------------

declare_unsupported(
  "XlaLaunch",
  "XlaLaunchV2",
  hint="XlaLaunch runs a function TF compiled into an XLA cluster (auto-clustering or "
  "jit_compile at run time); it appears in graphs rewritten by TF's XLA passes, not "
  "in saved or traced graphs. Convert the graph before XLA rewriting (the "
  "tf.function's concrete function or the SavedModel), where the cluster's ops "
  "are still plain TF ops",
)
declare_unsupported(
  "XlaSend",
  "XlaRecv",
  hint="XlaSend/XlaRecv exchange tensors between XLA computations on different devices "
  "through host channels, which a single JAX program does not have; pass the "
  "values as function inputs and outputs instead",
)
