"""Activations: Relu, Relu6, Elu, Selu, LeakyRelu, Softplus, Softsign, Sigmoid,
Softmax, LogSoftmax, and TF's gradient ops of the elementwise ones.

Impls follow TF's CPU kernels (``tensorflow/core/kernels/relu_op_functor.h``,
``softplus_op.h``, ``softmax_op_functor.h``) formula for formula, so special
values agree: Relu keeps -0.0 and NaN, Elu/Selu use ``exp(x) - 1`` like TF,
Softplus uses TF's ``log(epsilon) + 2`` thresholds. Tanh (and SigmoidGrad) live
in the elementwise package; Gelu is not a TF raw op.

JVPs are written with TF's gradient ops, as TF's own gradients are
(``tensorflow/python/ops/nn_grad.py``): ``Relu -> ReluGrad(t, x)``,
``Elu -> EluGrad(t, y)``, ``Sigmoid -> SigmoidGrad(y, t)``... The gradient ops
are linear in their ``gradients`` input and have TF-named transposes, so grad
jaxprs read like TF. At kinks the derivative is TF's: Relu and Relu6 have 0 at
x == 0 (and at x == 6), LeakyRelu has ``alpha`` at 0, Elu has 1 at 0. Rules
bind every TF op through :data:`tfprims.core.tfops`; property specs draw calls
with ``st.unary_calls``/``st.elementwise_calls``.
"""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np
from jax.interpreters import ad

from tfprims import emit, rules
from tfprims.core import register_op, tfops

_ACT = dict(family="activations", batching="elementwise")

_SELU_SCALE = 1.0507009873554804934193349852946
_SELU_ALPHA = 1.6732632423543772848170429916717


def _c(value, x):
  """An impl constant of ``x``'s dtype."""
  return jnp.asarray(value, x.dtype)


# ---------------------------------------------------------------------------
# Elementwise activations.


# Relu, Relu6 and Sigmoid are builders (tfprims/emit.py): every CNN lowers dozens of
# them, and their lowering emits StableHLO instead of tracing an impl.


def _relu_build(B, x):
  # TF: features.cwiseMax(0): keeps NaN, and -0.0 in its scalar path (its SIMD
  # packets give +0.0; docs/semantics/elementwise.md).
  zero = B.full_like(x, 0)
  return B.select(B.lt(x, zero), zero, x)


def _relu6_build(B, x):
  m = _relu_build(B, x)
  six = B.full_like(m, 6)
  return B.select(B.lt(six, m), six, m)


def _sigmoid_build(B, x):
  return B.logistic(x)


_relu, _relu6, _sigmoid = (emit.traced(b) for b in (_relu_build, _relu6_build, _sigmoid_build))


def _elu(x):
  return jnp.where(x < 0, jnp.exp(x) - _c(1, x), x)


def _selu(x):
  return jnp.where(
    x < 0, _c(_SELU_SCALE * _SELU_ALPHA, x) * (jnp.exp(x) - _c(1, x)), _c(_SELU_SCALE, x) * x
  )


def _alpha(alpha, x):
  """TF float attrs are 32-bit: alpha is float32(alpha) cast to x's dtype."""
  return _c(np.float32(alpha), x)


def _leaky_relu(x, *, alpha):
  return jnp.where(x > 0, x, x * _alpha(alpha, x))


def _softplus_threshold(dtype):
  return float(np.log(float(jnp.finfo(dtype).eps)) + 2)


def _softplus(x):
  th = _c(_softplus_threshold(x.dtype), x)
  e = jnp.exp(x)
  return jnp.where(x > -th, x, jnp.where(x < th, e, jnp.log1p(e)))


def _softsign(x):
  return x / (jnp.abs(x) + _c(1, x))


# Relu/Relu6 specs draw no -0.0 (nor negative subnormals, -0.0 to TF's flushing
# kernels): TF gives -0.0 in scalar code and +0.0 inside SIMD packets, and tfprims the
# scalar -0.0 (pinned in tests/test_ops_elementwise.py).
Relu = register_op(
  "Relu",
  _relu,
  **_ACT,
  build=_relu_build,
  jvp=(lambda t, x: tfops.ReluGrad(t, x),),
  spec=lambda st: st.Spec(st.unary_calls(st.NUMERIC, arg="features", neg_zero=False)),
)

Relu6 = register_op(
  "Relu6",
  _relu6,
  **_ACT,
  build=_relu6_build,
  jvp=(lambda t, x: tfops.Relu6Grad(t, x),),
  spec=lambda st: st.Spec(st.unary_calls(st.NUMERIC, arg="features", neg_zero=False)),
)

Elu = register_op(
  "Elu",
  _elu,
  **_ACT,
  jvp=rules.per_op(rules.output_jvp, lambda t, y, x: tfops.EluGrad(t, y)),
  spec=lambda st: st.Spec(st.unary_calls(st.FLOATS, arg="features")),
)

Selu = register_op(
  "Selu",
  _selu,
  **_ACT,
  jvp=rules.per_op(rules.output_jvp, lambda t, y, x: tfops.SeluGrad(t, y)),
  spec=lambda st: st.Spec(st.unary_calls(st.FLOATS, arg="features")),
)

_ALPHAS = (0.2, 0.0, 0.01, 1.0, -0.5, 2.0)

LeakyRelu = register_op(
  "LeakyRelu",
  _leaky_relu,
  **_ACT,
  attrs=("alpha",),
  jvp=(lambda t, x, *, alpha: tfops.LeakyReluGrad(t, x, alpha=alpha),),
  spec=lambda st: st.Spec(
    st.unary_calls(st.FLOATS, arg="features", attrs={"alpha": st.sampled_from(_ALPHAS)})
  ),
)

Softplus = register_op(
  "Softplus",
  _softplus,
  **_ACT,
  jvp=(lambda t, x: tfops.SoftplusGrad(t, x),),
  spec=lambda st: st.Spec(st.unary_calls(st.FLOATS, arg="features")),
)

Softsign = register_op(
  "Softsign",
  _softsign,
  **_ACT,
  jvp=(lambda t, x: tfops.SoftsignGrad(t, x),),
  # TF has no gradient of SoftsignGrad, so its forward mode fails: compare
  # with tf.GradientTape instead.
  spec=lambda st: st.Spec(st.unary_calls(st.FLOATS, arg="features"), grad_oracle="vjp"),
)

Sigmoid = register_op(
  "Sigmoid",
  _sigmoid,
  **_ACT,
  build=_sigmoid_build,
  jvp=rules.per_op(rules.output_jvp, lambda t, y, x: tfops.SigmoidGrad(y, t)),
  spec=lambda st: st.Spec(st.unary_calls(st.FLOATS + st.COMPLEX, arg="x", cbound=30)),
)

# ---------------------------------------------------------------------------
# Softmax and LogSoftmax over the last axis.


def _softmax(logits):
  if logits.ndim == 0:
    raise ValueError("Softmax: logits must have >= 1 dimension")
  if logits.shape[-1] == 0:
    return logits
  if logits.dtype == jnp.float64:  # TF's Eigen kernel: NaN/+inf make the row NaN
    e = jnp.exp(logits - jnp.max(logits, axis=-1, keepdims=True))
  else:
    # TF's oneDNN kernel (float32/float16/bfloat16): its max starts at the lowest
    # finite value and ignores NaN, and exp of a NaN difference (a NaN logit, +inf -
    # +inf) is +inf, so those entries are NaN (inf / inf) and the rest of their row 0
    # (docs/semantics/elementwise.md).
    low = _c(jnp.finfo(logits.dtype).min, logits)
    m = jnp.max(jnp.where(logits >= low, logits, low), axis=-1, keepdims=True)
    shifted = logits - m
    e = jnp.exp(jnp.where(shifted >= shifted, shifted, _c(np.inf, shifted)))
  return e * (_c(1, e) / jnp.sum(e, axis=-1, keepdims=True))


def _softmax_build(B, logits):
  """_softmax's ops emitted, for float32/float64 (jnp sums half types in float32)."""
  if logits.dtype not in (np.float32, np.float64) or logits.ndim == 0 or not logits.shape[-1]:
    return None
  last, shape = logits.ndim - 1, logits.shape
  keep = tuple(range(last))
  full = lambda v, x: B.full(v, x.shape, x.dtype)
  if logits.dtype == np.float64:
    m = B.reduce_max(logits, (last,))
  else:  # x >= lowest is False for NaN and -inf
    low = full(np.finfo(logits.dtype).min, logits)
    m = B.reduce_max(B.select(B.ge(logits, low), logits, low), (last,))
  shifted = B.sub(logits, B.broadcast_in_dim(m, shape, keep))
  if logits.dtype != np.float64:
    shifted = B.select(B.ge(shifted, shifted), shifted, full(np.inf, shifted))
  e = B.exp(shifted)
  s = B.reduce_sum(e, (last,))
  inv = B.div(full(1, s), s)
  return B.mul(e, B.broadcast_in_dim(inv, shape, keep))


def _log_softmax(logits):
  if logits.ndim == 0:
    raise ValueError("LogSoftmax: logits must have >= 1 dimension")
  if logits.shape[-1] == 0:
    return logits
  shifted = logits - jnp.max(logits, axis=-1, keepdims=True)
  return shifted - jnp.log(jnp.sum(jnp.exp(shifted), axis=-1, keepdims=True))


def _softmax_jvp(primals, tangents):
  # TF's SoftmaxGrad: (t - sum(t * y, -1)) * y.
  (x,), (t,) = primals, tangents
  y = tfops.Softmax(x)
  if type(t) is ad.Zero:
    return y, rules.zero_tangent(y)
  return y, tfops.Mul(tfops.Sub(t, rules.reduce_sum(tfops.Mul(t, y), (-1,), keep_dims=True)), y)


def _log_softmax_jvp(primals, tangents):
  # t - sum(t * softmax, -1); its transpose is TF's gradient
  # ct - sum(ct, -1) * softmax.
  (x,), (t,) = primals, tangents
  y = tfops.LogSoftmax(x)
  if type(t) is ad.Zero:
    return y, rules.zero_tangent(y)
  return y, tfops.Sub(t, rules.reduce_sum(tfops.Mul(t, tfops.Exp(y)), (-1,), keep_dims=True))


def _last_axis_batching(op):
  """Batch axis to the front; the op still works on the last axis."""

  def rule(args, dims):
    (x,), (d,) = args, dims
    if d != 0:
      x = jnp.moveaxis(x, d, 0)
    return op(x), 0

  return rule


def _softmax_spec(st):
  # Rows draw -inf (masking), ±1e30, the dtype's max and, for float32/float64, +inf and
  # NaN: TF's oneDNN float32 kernel gives NaN at NaN/+inf logits and 0 for the rest of
  # their row, its float64 kernel NaN for the row. NaN only in rows of <= 8 (longer rows:
  # oneDNN's SIMD max spreads it to other lanes). float16/bfloat16 run through oneDNN
  # only on CPUs with AVX512-FP16/BF16 (else Eigen's NaN rows): no +inf/NaN drawn there
  # (docs/semantics/elementwise.md).
  @st.composite
  def draw(draw):
    dtype = draw(st.dtypes(st.FLOATS))
    shape = draw(st.shapes(min_rank=1))
    x = st.draw_array(draw, dtype, shape, finite=True)
    if x.size and draw(st.booleans()):
      big = float(jnp.finfo(dtype).max)
      special = [-np.inf, big, -big]
      if np.dtype(dtype) != np.float16:
        special += [1e30, -1e30]
      if np.dtype(dtype) in (np.float32, np.float64):
        special += [np.inf] + [np.nan] * (shape[-1] <= 8)
      # Mixed rows (hypothesis' lists tend to repeat one value).
      rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
      pick = rng.integers(-len(special), len(special), size=shape)
      values = np.array(special + [0.0])[pick].astype(dtype)
      x = np.where(pick >= 0, values, x).astype(dtype)
    return {"logits": x}

  return draw()


Softmax = register_op(
  "Softmax",
  _softmax,
  family="activations",
  jvp=_softmax_jvp,
  build=_softmax_build,
  batching=rules.per_op(_last_axis_batching),
  spec=lambda st: st.Spec(_softmax_spec(st)),
)

LogSoftmax = register_op(
  "LogSoftmax",
  _log_softmax,
  family="activations",
  jvp=_log_softmax_jvp,
  batching=rules.per_op(_last_axis_batching),
  spec=lambda st: st.Spec(_softmax_spec(st)),
)

# ---------------------------------------------------------------------------
# TF's gradient ops (``gradients`` is linear; the other input is the forward
# op's features or outputs). Formulas are the CPU kernels': ReluGrad multiplies
# (so a NaN/inf gradient gives NaN even where features <= 0), the others select.


def _relu_grad(g, f):
  # TF multiplies by the mask (inf/NaN gradients give NaN where it is 0); XLA
  # would rewrite ``g * convert(mask)`` into a select, so write g * 0 out.
  return jnp.where(f > 0, g, g * jnp.zeros((), g.dtype))


def _relu6_grad(g, f):
  return jnp.where((f > 0) & (f < 6), g, g * jnp.zeros((), g.dtype))


def _elu_grad(g, y):
  return jnp.where(y < 0, (y + _c(1, y)) * g, g)


def _selu_grad(g, y):
  return jnp.where(y < 0, g * (y + _c(_SELU_SCALE * _SELU_ALPHA, y)), g * _c(_SELU_SCALE, y))


def _leaky_relu_grad(g, f, *, alpha):
  return jnp.where(f > 0, g, g * _alpha(alpha, g))


def _softplus_grad(g, f):
  return g / (jnp.exp(-f) + _c(1, f))


def _softsign_grad(g, f):
  d = _c(1, f) + jnp.abs(f)
  return g / (d * d)


def _grad_spec(st, dtypes, second="features", **kw):
  return st.elementwise_calls(("gradients", second), dtypes, same_shape=True, **kw)


def _elu_grad_y_jvp(t, g, y):
  """TF's EluGradGrad/SeluGradGrad in ``y``: ``where(y < 0, t * g, 0)``."""
  return tfops.Mul(tfops.Mul(t, g), rules.cast_like(tfops.Less(y, rules.const(0, y)), y))


ReluGrad = register_op(
  "ReluGrad",
  _relu_grad,
  **_ACT,
  jvp=(lambda t, g, f: tfops.ReluGrad(t, f), None),  # TF's ReluGradGrad
  transpose=rules.per_op(rules.linear_transpose, 0),
  spec=lambda st: st.Spec(_grad_spec(st, st.NUMERIC), diff_args=("gradients",)),
)

Relu6Grad = register_op(
  "Relu6Grad",
  _relu6_grad,
  **_ACT,
  jvp=(lambda t, g, f: tfops.Relu6Grad(t, f), None),
  transpose=rules.per_op(rules.linear_transpose, 0),
  spec=lambda st: st.Spec(_grad_spec(st, st.NUMERIC), diff_args=("gradients",)),
)

EluGrad = register_op(
  "EluGrad",
  _elu_grad,
  **_ACT,
  # TF's EluGradGrad: (EluGrad(t, y), where(y < 0, t * g, 0)).
  jvp=(lambda t, g, y: tfops.EluGrad(t, y), _elu_grad_y_jvp),
  transpose=rules.per_op(rules.linear_transpose, 0),
  spec=lambda st: st.Spec(_grad_spec(st, st.FLOATS, second="outputs")),
)

SeluGrad = register_op(
  "SeluGrad",
  _selu_grad,
  **_ACT,
  jvp=(lambda t, g, y: tfops.SeluGrad(t, y), _elu_grad_y_jvp),
  transpose=rules.per_op(rules.linear_transpose, 0),
  spec=lambda st: st.Spec(_grad_spec(st, st.FLOATS, second="outputs")),
)

LeakyReluGrad = register_op(
  "LeakyReluGrad",
  _leaky_relu_grad,
  **_ACT,
  attrs=("alpha",),
  jvp=(lambda t, g, f, *, alpha: tfops.LeakyReluGrad(t, f, alpha=alpha), None),
  transpose=rules.per_op(rules.linear_transpose, 0),
  spec=lambda st: st.Spec(
    _grad_spec(st, st.FLOATS, attrs={"alpha": st.sampled_from(_ALPHAS)}), diff_args=("gradients",)
  ),
)

SoftplusGrad = register_op(
  "SoftplusGrad",
  _softplus_grad,
  **_ACT,
  # TF's SoftplusGradGrad: (SoftplusGrad(t, x), t * g / (exp(-x) + 2 + exp(x))).
  jvp=(
    lambda t, g, f: tfops.SoftplusGrad(t, f),
    lambda t, g, f: tfops.Div(
      tfops.Mul(t, g),
      tfops.AddV2(tfops.AddV2(tfops.Exp(tfops.Neg(f)), rules.const(2, f)), tfops.Exp(f)),
    ),
  ),
  transpose=rules.per_op(rules.linear_transpose, 0),
  spec=lambda st: st.Spec(_grad_spec(st, st.FLOATS)),
)

SoftsignGrad = register_op(
  "SoftsignGrad",
  _softsign_grad,
  **_ACT,
  transpose=rules.per_op(rules.linear_transpose, 0),
  spec=lambda st: st.Spec(_grad_spec(st, st.FLOATS)),
)
