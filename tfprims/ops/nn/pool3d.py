"""3-D pooling: MaxPool3D, AvgPool3D and their gradient ops.

Windows are ``lax.reduce_window`` over the full-rank ksize/strides (NDHWC or NCDHW),
with TF's SAME padding, as in ``pool.py``. MaxPool3D and AvgPool3D values follow the
2-D kernels (NaN never wins, results clamped below at the lowest finite value; SAME
windows average their real elements). The 3-D gradient kernels have their own rules
(measured on TF's CPU kernels, docs/semantics/nn.md "3-D pooling"):

* MaxPool3DGrad sends a window's gradient to *every* element within 1e-5 of the
  given ``orig_output`` (``|x - y| < 1e-5`` in the dtype: ties all receive it, NaN and
  ±inf never do).
* MaxPool3DGradGrad reads the first element (row-major in the window) exactly equal
  to the given ``orig_output``, 0 when there is none.

Both read ``orig_output`` (not recomputed). Each is computed as a static loop over
the window offsets: strided slices of the padded input, a mask, and (Grad) an
interior-padded scatter back.

Explicit TF-named rules (as TF registers the gradients):

* MaxPool3D's JVP is MaxPool3DGradGrad(x, y, t); MaxPool3DGrad and MaxPool3DGradGrad
  are linear in ``grad`` and each other's transpose (so jax.grad of MaxPool3D is
  MaxPool3DGrad).
* AvgPool3D <-> AvgPool3DGrad are each other's transposes.
* vmap folds the batch axis into N (:func:`tfprims.ops.shared.fold_batching`).
"""

from __future__ import annotations

import functools
import itertools

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax
from jax.interpreters import ad

from tfprims import rules
from tfprims.core import register_op, tfops
from tfprims.ops.nn._common import _dilate, _lowest, _out_size
from tfprims.ops.nn._specs import (
  _layout_attr,
  _layout_shape,
  _onednn_dtypes,
  _tf_accepts,
  _tf_call,
)
from tfprims.ops.nn.pool import _pool_pads, average_windows, first_max
from tfprims.ops.shared import fold_batching
from tfprims.ops.shared_specs import bounded_values

_FORMATS = ("NDHWC", "NCDHW")


def _check_format(data_format):
  if data_format not in _FORMATS:
    raise NotImplementedError(f"3-D pooling with data_format={data_format!r} is not supported")


def max_pool3d(input, *, ksize, strides, padding, data_format="NDHWC"):
  """TF MaxPool3D: NaN never wins, results clamped below at the dtype's lowest finite
  value, as TF's oneDNN CPU kernel."""
  _check_format(data_format)
  pads = _pool_pads(input.shape, ksize, strides, padding)
  low = _lowest(input.dtype)
  x = jnp.where(input >= low, input, low)
  return lax.reduce_window(
    x, np.array(-np.inf, x.dtype), first_max, tuple(ksize), tuple(strides), pads
  )


def _offsets(ksize):
  """Window offsets in row-major order (TF's order for "first")."""
  return itertools.product(*(range(k) for k in ksize))


def _window_slice(xp, off, strides, out_shape):
  """The element at offset ``off`` of every window of the padded array ``xp``."""
  start = tuple(off)
  limit = tuple(o + (n - 1) * s + 1 for o, n, s in zip(off, out_shape, strides))
  return lax.slice(xp, start, limit, tuple(strides))


def _padded(x, pads, value):
  return lax.pad(x, np.array(value, x.dtype), [(lo, hi, 0) for lo, hi in pads])


def max_pool3d_grad(orig_input, orig_output, grad, *, ksize, strides, padding, data_format="NDHWC"):
  """TF MaxPool3DGrad: each window's gradient goes to every element with
  ``|x - orig_output| < 1e-5`` (TF's CPU kernel's mask, in the dtype)."""
  _check_format(data_format)
  pads = _pool_pads(orig_input.shape, ksize, strides, padding)
  xp = _padded(orig_input, pads, np.nan)  # padding never matches
  tol = np.array(1e-5, grad.dtype)
  out = jnp.zeros(xp.shape, grad.dtype)
  if grad.size == 0:
    return jnp.zeros(orig_input.shape, grad.dtype)
  for off in _offsets(ksize):
    xs = _window_slice(xp, off, strides, grad.shape)
    contrib = jnp.where(jnp.abs(xs - orig_output) < tol, grad, jnp.zeros((), grad.dtype))
    out = out + lax.pad(
      contrib,
      np.array(0, grad.dtype),
      [(o, L - o - _dilate(n, s), s - 1) for o, L, n, s in zip(off, xp.shape, grad.shape, strides)],
    )
  return lax.slice(
    out, tuple(lo for lo, _ in pads), tuple(lo + n for (lo, _), n in zip(pads, orig_input.shape))
  )


def max_pool3d_grad_grad(
  orig_input, orig_output, grad, *, ksize, strides, padding, data_format="NDHWC"
):
  """TF MaxPool3DGradGrad: ``grad`` (input-shaped) read at each window's first element
  equal to ``orig_output``; 0 where none is."""
  _check_format(data_format)
  pads = _pool_pads(orig_input.shape, ksize, strides, padding)
  xp = _padded(orig_input, pads, np.nan)
  gp = _padded(grad, pads, 0)
  out = jnp.zeros(orig_output.shape, grad.dtype)
  if out.size == 0:
    return out
  for off in reversed(list(_offsets(ksize))):  # the first match is written last
    xs = _window_slice(xp, off, strides, out.shape)
    out = jnp.where(xs == orig_output, _window_slice(gp, off, strides, out.shape), out)
  return out


def avg_pool3d(input, *, ksize, strides, padding, data_format="NDHWC"):
  """TF AvgPool3D: SAME windows average only their real elements."""
  _check_format(data_format)
  return average_windows(input, ksize, strides, padding)


def avg_pool3d_grad(grad, *, orig_input_shape, ksize, strides, padding, data_format="NDHWC"):
  """TF AvgPool3DGrad: the transpose of AvgPool3D."""
  shape = rules.sizes(orig_input_shape)
  _check_format(data_format)
  f = functools.partial(
    average_windows, ksize=ksize, strides=strides, padding=padding, plus_zero=False
  )  # the linear map (no -0.0 select)
  out = jax.linear_transpose(f, jax.ShapeDtypeStruct(shape, grad.dtype))(grad)[0]
  return jnp.where(out == 0, jnp.zeros((), out.dtype), out)  # TF adds into +0.0


def _pool3d_shape(input, *, ksize, strides, padding, data_format="NDHWC"):
  _check_format(data_format)
  pads = _pool_pads(input.shape, ksize, strides, padding)
  return jax.ShapeDtypeStruct(
    tuple(_out_size(n, k, s, 1, p) for n, k, s, p in zip(input.shape, ksize, strides, pads)),
    input.dtype,
  )


def _max_pool3d_jvp(primals, tangents, **p):
  (x,), (t,) = primals, tangents
  y = tfops.MaxPool3D(x, **p)
  return y, tfops.MaxPool3DGradGrad(x, y, ad.instantiate_zeros(t), **p)


def _pool3d_calls(st, op_type, *, ties=False):
  """Calls of a 3-D pooling op or its grad ops (float32/bfloat16: TF's CPU kernels have
  no float16/float64 ones). Only calls TF runs, with their TF gradient op, are kept."""
  from hypothesis import assume
  from hypothesis.extra import numpy as hnp

  avg = op_type.startswith("AvgPool")
  fwd_name = "AvgPool3D" if avg else "MaxPool3D"
  needs = {
    "MaxPool3D": ("MaxPool3D", "MaxPool3DGrad"),
    "MaxPool3DGrad": ("MaxPool3DGrad", "MaxPool3DGradGrad"),
    "MaxPool3DGradGrad": ("MaxPool3DGradGrad", "MaxPool3DGrad"),
    "AvgPool3D": ("AvgPool3D", "AvgPool3DGrad"),
    "AvgPool3DGrad": ("AvgPool3DGrad", "AvgPool3D"),
  }[op_type]

  # tfprims follows TF's oneDNN MaxPool3D; Eigen's (bfloat16 on CPUs without
  # AVX512-BF16) lets NaN through and misreads SAME windows narrower than their stride.
  dtypes = _onednn_dtypes(st) if op_type == "MaxPool3D" else ("float32", "bfloat16")

  @st.composite
  def draw_call(draw):
    # TF's 3-D max-pool grad kernels are NDHWC only.
    fmt = draw(st.sampled_from(("NDHWC", "NCDHW") if avg or op_type == "MaxPool3D" else ("NDHWC",)))
    dtype = draw(st.sampled_from(dtypes))
    n, c = draw(st.integers(1, 2)), draw(st.integers(1, 2))
    ks = [draw(st.integers(1, 3)) for _ in range(3)]
    ss = [draw(st.integers(1, 3)) for _ in range(3)]
    padding = draw(st.sampled_from(("SAME", "VALID")))
    sizes = [draw(st.integers(k if padding == "VALID" else 1, 4)) for k in ks]
    shape = _layout_shape(fmt, n, c, sizes)
    attrs = dict(
      ksize=_layout_attr(fmt, ks), strides=_layout_attr(fmt, ss), padding=padding, data_format=fmt
    )
    if ties and draw(st.booleans()):
      # Tied windows and windows of NaN/±inf: each TF kernel's own routing rule.
      levels = [0.0, 1.0, 2.0, np.nan, -np.inf, np.inf]
      x = draw(hnp.arrays(st.np_dtype(dtype), shape, elements=st.sampled_from(levels))).astype(
        st.np_dtype(dtype)
      )
    else:
      x = draw(bounded_values(st, dtype, shape, special=not avg and op_type == "MaxPool3D"))
    fwd = dict(input=x, **attrs)
    assume(_tf_accepts(fwd_name, fwd))
    y = _tf_call(fwd_name, fwd).numpy()
    gy, gx = draw(bounded_values(st, dtype, y.shape)), draw(bounded_values(st, dtype, shape))
    calls = {
      fwd_name: fwd,
      "AvgPool3DGrad": dict(orig_input_shape=np.array(shape, np.int32), grad=gy, **attrs),
      "MaxPool3DGrad": dict(orig_input=x, orig_output=y, grad=gy, **attrs),
      "MaxPool3DGradGrad": dict(orig_input=x, orig_output=y, grad=gx, **attrs),
    }
    assume(all(_tf_accepts(name, calls[name]) for name in needs))
    return calls[needs[0]]

  return draw_call()


_ATTRS = ("ksize", "strides", "padding", "data_format")
_TOL = dict(rtol={"bfloat16": 2e-2}, atol={"bfloat16": 2e-2})

MaxPool3D = register_op(
  "MaxPool3D",
  max_pool3d,
  family="nn",
  attrs=_ATTRS,
  shape_rule=_pool3d_shape,
  jvp=_max_pool3d_jvp,
  batching=rules.per_op(fold_batching),
  spec=rules.per_op(
    lambda op: (
      lambda st: st.Spec(
        _pool3d_calls(st, op.op_type, ties=True),
        sanitize_grads=False,
        note="float32/bfloat16 (TF's CPU kernels). NaN never wins; results are clamped "
        "below at the lowest finite value. The gradient (MaxPool3DGrad: every element "
        "within 1e-5 of the max) and the tangent (MaxPool3DGradGrad: the first equal "
        "one) follow TF's two kernels.",
      )
    )
  ),
)

MaxPool3DGrad = register_op(
  "MaxPool3DGrad",
  max_pool3d_grad,
  family="nn",
  attrs=_ATTRS,
  jvp=(None, None, lambda t, x, y, g, **p: tfops.MaxPool3DGrad(x, y, t, **p)),
  transpose=lambda ct, x, y, g, **p: [None, None, tfops.MaxPool3DGradGrad(x, y, ct, **p)],
  batching=rules.per_op(fold_batching),
  spec=rules.per_op(
    lambda op: (
      lambda st: st.Spec(
        _pool3d_calls(st, op.op_type, ties=True),
        diff_args=("grad",),
        sanitize_grads=False,
        **_TOL,
        note="NDHWC (TF's CPU kernel). Reads orig_output (not recomputed).",
      )
    )
  ),
)

MaxPool3DGradGrad = register_op(
  "MaxPool3DGradGrad",
  max_pool3d_grad_grad,
  family="nn",
  attrs=_ATTRS,
  jvp=(None, None, lambda t, x, y, g, **p: tfops.MaxPool3DGradGrad(x, y, t, **p)),
  transpose=lambda ct, x, y, g, **p: [None, None, tfops.MaxPool3DGrad(x, y, ct, **p)],
  batching=rules.per_op(fold_batching),
  spec=rules.per_op(
    lambda op: (
      lambda st: st.Spec(
        _pool3d_calls(st, op.op_type, ties=True),
        diff_args=("grad",),
        sanitize_grads=False,
        **_TOL,
        note="NDHWC, float32/bfloat16 (TF's CPU kernel has more dtypes; no differentiable "
        "graph needs them). Reads orig_output (not recomputed).",
      )
    )
  ),
)

AvgPool3D = register_op(
  "AvgPool3D",
  avg_pool3d,
  family="nn",
  attrs=_ATTRS,
  shape_rule=_pool3d_shape,
  linear=True,
  transpose=lambda ct, x, **p: [tfops.AvgPool3DGrad(ct, orig_input_shape=rules.shape_of(x), **p)],
  batching=rules.per_op(fold_batching),
  spec=rules.per_op(lambda op: lambda st: st.Spec(_pool3d_calls(st, op.op_type), **_TOL)),
)


def _fix_orig_shape(p, b):
  shape = tuple(p["orig_input_shape"])
  return dict(p, orig_input_shape=(b * shape[0],) + shape[1:])


AvgPool3DGrad = register_op(
  "AvgPool3DGrad",
  avg_pool3d_grad,
  family="nn",
  static=("orig_input_shape",),
  attrs=_ATTRS,
  linear=True,
  transpose=lambda ct, g, *, orig_input_shape, **p: [tfops.AvgPool3D(ct, **p)],
  batching=rules.per_op(fold_batching, _fix_orig_shape),
  spec=rules.per_op(lambda op: lambda st: st.Spec(_pool3d_calls(st, op.op_type), **_TOL)),
)
