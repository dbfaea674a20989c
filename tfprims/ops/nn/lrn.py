"""Local response normalization: LRN and LRNGrad.

Both sum squares over a window of the last axis with ``lax.reduce_window``. LRN follows
TF's CPU kernel: float16 in float16, NaN where a square outside the window is not finite
(TF sums by a band-matrix product) and, for depth > 384 with beta 0.5 or 1, TF's running
sums. LRNGrad is TF's CPU formula (it reads output_image), float16 computed in float32
(TF's kernel rounds to float16 as it goes: values differ where squares pass 65504). JVPs
are derived from the impls; vmap folds the batch axis into N.
"""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np
from jax import lax

from tfprims import rules
from tfprims.core import register_op
from tfprims.ops.nn._specs import _tf_call
from tfprims.ops.shared import fold_batching
from tfprims.ops.shared_specs import bounded_values


# TF's kSingleThreadedLRNDepthCutoff: deeper inputs with beta 0.5 or 1 take running sums.
_RUNNING_SUM_DEPTH = 384


def _band_sums(sq, r):
  """TF's sums of squares over [d - r, d + r]: a matmul by a 0/1 band matrix, so a
  non-finite square outside a position's window still reaches it as inf * 0 = NaN."""
  window = (1,) * (sq.ndim - 1) + (2 * r + 1,)
  pads = [(0, 0)] * (sq.ndim - 1) + [(r, r)]
  wsum = lambda v: lax.reduce_window(v, np.array(0, v.dtype), lax.add, window, (1,) * v.ndim, pads)
  sums = wsum(sq)
  if r >= sq.shape[-1] - 1:  # every window holds the whole row: no zero in the band
    return sums
  bad = jnp.where(jnp.isfinite(sq), np.array(0, sq.dtype), np.array(1, sq.dtype))
  outside = jnp.sum(bad, axis=-1, keepdims=True) - wsum(bad)
  return jnp.where(outside > 0, np.array(np.nan, sq.dtype), sums)


def _running_sums(scaled_sq, r):
  """TF's SingleThreadedLRN sums: per row, ``acc += p[d + r]; out[d] = acc; acc -= p[d - r]``
  in order, rounding at each step (an inf leaving the window makes the rest of the row
  NaN, a huge square leaving it cancels what was added beside it)."""
  shape, depth = scaled_sq.shape, scaled_sq.shape[-1]
  p = jnp.pad(scaled_sq.reshape(-1, depth).T, ((r, r), (0, 0)))
  acc = lax.scan(lambda acc, v: (acc + v, None), jnp.zeros_like(p[0]), p[: 2 * r])[0]

  def step(acc, v):
    new, old = v
    acc = acc + new
    return acc - old, acc

  _, out = lax.scan(step, acc, (p[2 * r :], p[:depth]))
  return out.T.reshape(shape)


def lrn(input, *, depth_radius=5, bias=1.0, alpha=1.0, beta=0.5):
  """TF LRN: input / (bias + alpha * sum of squares over [d - r, d + r]) ** beta,
  over the last axis (bfloat16, which has no TF CPU kernel, in float32), as TF's CPU kernel:
  the sums by a band-matrix product, or by running sums for depth > 384 with beta 0.5
  or 1; the power as ``1 / n``, ``rsqrt(n)`` or ``exp(log(n) * -beta)``."""
  x = input.astype(jnp.float32) if input.dtype == jnp.bfloat16 else input
  r = int(depth_radius)
  f = lambda v: np.array(np.float32(v), x.dtype)
  beta = np.float32(beta)
  if x.shape[-1] > _RUNNING_SUM_DEPTH and beta in (0.5, 1.0):
    norm = f(bias) + _running_sums(x * x * f(alpha), r)
  else:
    norm = _band_sums(x * x, r) * f(alpha) + f(bias)
  if beta == 1.0:
    scale = f(1) / norm
  elif beta == 0.5:
    scale = lax.rsqrt(norm)
  else:
    scale = jnp.exp(jnp.log(norm) * f(-beta))
  return (x * scale).astype(input.dtype)


LRN = register_op(
  "LRN",
  lrn,
  family="nn",
  attrs=("depth_radius", "bias", "alpha", "beta"),
  batching=rules.per_op(fold_batching),
  spec=lambda st: st.Spec(
    _lrn_calls(st), rtol={"float16": 1e-2, "float32": 1e-5}, atol={"float16": 1e-2, "float32": 1e-6}
  ),
)


def lrn_grad(
  input_grads, input_image, output_image, *, depth_radius=5, bias=1.0, alpha=1.0, beta=0.5
):
  """TF LRNGrad, TF's CPU formula (it reads output_image):
  dx_k = g_k * norm_k ** -beta - 2 * alpha * beta * x_k * sum_{|j-k|<=r} g_j * out_j / norm_j
  with norm_j = bias + alpha * sum_{|i-j|<=r} x_i ** 2."""
  half = input_image.dtype in (jnp.float16, jnp.bfloat16)
  cast = (lambda v: v.astype(jnp.float32)) if half else (lambda v: v)
  g, x, y = cast(input_grads), cast(input_image), cast(output_image)
  r = int(depth_radius)
  window = (1,) * (x.ndim - 1) + (2 * r + 1,)
  pads = [(0, 0)] * (x.ndim - 1) + [(r, r)]
  wsum = lambda v: lax.reduce_window(v, np.array(0, v.dtype), lax.add, window, (1,) * v.ndim, pads)
  f = lambda v: np.array(np.float32(v), x.dtype)
  norm = f(bias) + f(alpha) * wsum(x * x)
  out = g * norm ** -f(beta) - f(2.0 * alpha * beta) * x * wsum(g * y / norm)
  out = jnp.where(out == 0, np.array(0, out.dtype), out)  # TF adds into +0.0: never -0.0
  return out.astype(input_image.dtype)


def _lrn_calls(st, grad=False):
  @st.composite
  def draw_call(draw):
    dtype = draw(st.sampled_from(("float16", "float32")))
    shape = draw(st.shapes(min_rank=4, max_rank=4, min_side=1, max_side=4))
    attrs = dict(
      depth_radius=draw(st.integers(0, 3)),
      bias=draw(st.sampled_from([1.0, 0.5, 2.0])),
      alpha=draw(st.sampled_from([1.0, 0.1, 1e-4])),
      beta=draw(st.sampled_from([0.5, 0.75, 1.0])),
    )
    x = draw(bounded_values(st, dtype, shape, bound=3.0))
    if not grad:
      if draw(st.booleans()):  # non-finite squares (300 ** 2 in float16): NaN beyond the window
        with np.errstate(over="ignore"):  # 1e30 is inf in float16
          special = np.array([np.nan, np.inf, -np.inf, 1e30, -1e30, 300, -300], np.float32).astype(
            dtype
          )
        pick = np.array(
          draw(st.lists(st.integers(-12, len(special) - 1), min_size=x.size, max_size=x.size))
        ).reshape(shape)
        x = np.where(pick >= 0, special[np.maximum(pick, 0)], x)
      return dict(input=x, **attrs)
    y = _tf_call("LRN", dict(input=x, **attrs)).numpy()
    return dict(
      input_grads=draw(bounded_values(st, dtype, shape)), input_image=x, output_image=y, **attrs
    )

  return draw_call()


LRNGrad = register_op(
  "LRNGrad",
  lrn_grad,
  family="nn",
  attrs=("depth_radius", "bias", "alpha", "beta"),
  batching=rules.per_op(fold_batching),
  spec=lambda st: st.Spec(
    _lrn_calls(st, grad=True),
    diff_args=("input_grads",),
    rtol={"float16": 2e-2, "float32": 1e-4},
    atol={"float16": 2e-2, "float32": 1e-5},
    note="TF's LRNGrad has no registered gradient (jvp/vjp n/a).",
  ),
)
