"""Local response normalization: LRN and LRNGrad.

Both sum squares over a window of the last axis with ``lax.reduce_window``, in float32
for float16/bfloat16 inputs, as TF's CPU kernels do. LRNGrad is TF's CPU formula (it
reads output_image). JVPs are derived from the impls; vmap folds the batch axis into N.
"""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np
from jax import lax

from tfprims.core import define_op
from tfprims.ops.nn._common import _fold_batching, _tf_call, _values


def lrn(input, *, depth_radius=5, bias=1.0, alpha=1.0, beta=0.5):
  """TF LRN: input / (bias + alpha * sum of squares over [d - r, d + r]) ** beta,
  over the last axis (computed in float32 for float16/bfloat16)."""
  x = input.astype(jnp.float32) if input.dtype in (jnp.float16, jnp.bfloat16) else input
  r = int(depth_radius)
  window = (1,) * (x.ndim - 1) + (2 * r + 1,)
  pads = [(0, 0)] * (x.ndim - 1) + [(r, r)]
  sq = lax.reduce_window(x * x, np.array(0, x.dtype), lax.add, window, (1,) * x.ndim, pads)
  f = lambda v: np.array(np.float32(v), x.dtype)
  return (x / (f(bias) + f(alpha) * sq) ** f(beta)).astype(input.dtype)


LRN = define_op(
    "LRN", lrn, family="nn", attrs=("depth_radius", "bias", "alpha", "beta"),
    batching=_fold_batching("LRN"),
    spec=lambda st: st.Spec(
        _lrn_calls(st), rtol={"float16": 1e-2, "float32": 1e-5},
        atol={"float16": 1e-2, "float32": 1e-6}))


def lrn_grad(input_grads, input_image, output_image, *, depth_radius=5, bias=1.0, alpha=1.0,
             beta=0.5):
  """TF LRNGrad, TF's CPU formula (it reads output_image):
  dx_k = g_k * norm_k ** -beta - 2 * alpha * beta * x_k * sum_{|j-k|<=r} g_j * out_j / norm_j
  with norm_j = bias + alpha * sum_{|i-j|<=r} x_i ** 2."""
  half = input_image.dtype in (jnp.float16, jnp.bfloat16)
  cast = (lambda v: v.astype(jnp.float32)) if half else (lambda v: v)
  g, x, y = cast(input_grads), cast(input_image), cast(output_image)
  r = int(depth_radius)
  window = (1,) * (x.ndim - 1) + (2 * r + 1,)
  pads = [(0, 0)] * (x.ndim - 1) + [(r, r)]
  wsum = lambda v: lax.reduce_window(v, np.array(0, v.dtype), lax.add, window, (1,) * v.ndim,
                                     pads)
  f = lambda v: np.array(np.float32(v), x.dtype)
  norm = f(bias) + f(alpha) * wsum(x * x)
  out = g * norm ** -f(beta) - f(2.0 * alpha * beta) * x * wsum(g * y / norm)
  return out.astype(input_image.dtype)


def _lrn_calls(st, grad=False):
  @st.composite
  def draw_call(draw):
    dtype = draw(st.sampled_from(("float16", "float32")))
    shape = draw(st.shapes(min_rank=4, max_rank=4, min_side=1, max_side=4))
    attrs = dict(depth_radius=draw(st.integers(0, 3)), bias=draw(st.sampled_from([1.0, 0.5, 2.0])),
                 alpha=draw(st.sampled_from([1.0, 0.1, 1e-4])),
                 beta=draw(st.sampled_from([0.5, 0.75, 1.0])))
    x = draw(_values(st, dtype, shape, bound=3.0))
    if not grad:
      return dict(input=x, **attrs)
    y = _tf_call("LRN", dict(input=x, **attrs)).numpy()
    return dict(input_grads=draw(_values(st, dtype, shape)), input_image=x, output_image=y,
                **attrs)
  return draw_call()


LRNGrad = define_op(
    "LRNGrad", lrn_grad, family="nn", attrs=("depth_radius", "bias", "alpha", "beta"),
    batching=_fold_batching("LRNGrad"),
    spec=lambda st: st.Spec(_lrn_calls(st, grad=True), diff_args=("input_grads",),
                            rtol={"float16": 2e-2, "float32": 1e-4},
                            atol={"float16": 2e-2, "float32": 1e-5},
                            note="TF's LRNGrad has no registered gradient (jvp/vjp n/a)."))
