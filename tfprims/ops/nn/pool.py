"""Pooling: MaxPool, MaxPoolV2, AvgPool and their gradient ops.

Max windows are ``lax.reduce_window`` over the full-rank ksize/strides (NHWC or NCHW),
with TF's SAME padding. Semantics follow TF's CPU kernels: MaxPool never lets NaN win,
keeps the first of equal values (-0.0 before +0.0) and clamps results below at the
dtype's lowest finite value; AvgPool sums each window in TF's order (one strided slice
per window offset) and its SAME windows average only their real elements.

Explicit TF-named rules:

* AvgPool <-> AvgPoolGrad are each other's transposes.
* MaxPool's JVP is MaxPoolGradGrad (the tangent read at each window's first max),
  whose transpose is MaxPoolGrad (and vice versa); the V2 ops (ksize/strides as
  inputs) pair up the same way.
* vmap folds the batch axis into N (:func:`tfprims.ops.shared.fold_batching`).
"""

from __future__ import annotations

import functools
import itertools
import math

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax
from jax.interpreters import ad

from tfprims import rules
from tfprims.core import register_op, tfops
from tfprims.ops.nn._common import _ONEDNN_DTYPES, _lowest, _out_size, _pads
from tfprims.ops.nn._specs import _layout_attr, _layout_shape, _tf_accepts, _tf_call
from tfprims.ops.shared import fold_batching
from tfprims.ops.shared_specs import bounded_values


def _pool_pads(shape, ksize, strides, padding, explicit_paddings=()):
  rank = len(shape)
  return _pads(padding, explicit_paddings, shape, ksize, strides, (1,) * rank, range(rank))


def _check_pool_format(data_format):
  if data_format not in ("NHWC", "NCHW"):
    raise NotImplementedError(f"pooling with data_format={data_format!r} is not supported")


def max_pool(input, *, ksize, strides, padding, explicit_paddings=(), data_format="NHWC"):
  """TF MaxPool. Like TF's CPU kernels, NaNs never win and results are clamped
  below at the dtype's lowest finite value (a window of NaN/-inf gives it)."""
  _check_pool_format(data_format)
  pads = _pool_pads(input.shape, ksize, strides, padding, explicit_paddings)
  x = input
  if jnp.issubdtype(x.dtype, jnp.floating):
    low = _lowest(x.dtype)
    x = jnp.where(x >= low, x, low)
    return lax.reduce_window(
      x, np.array(-np.inf, x.dtype), first_max, tuple(ksize), tuple(strides), pads
    )
  init = np.array(np.iinfo(x.dtype).min, x.dtype)
  return lax.reduce_window(x, init, lax.max, tuple(ksize), tuple(strides), pads)


def first_max(acc, x):
  """The max-pool reducer of TF's kernels (and TF-XLA's): a later element wins only if
  strictly greater, so of -0.0 and +0.0 the first in the window wins (``lax.max``
  gives +0.0). The window's elements come in row-major order."""
  return lax.select(x > acc, x, acc)


def max_pool_v2(input, *, ksize, strides, padding, data_format="NHWC"):
  """TF MaxPoolV2: MaxPool with ksize/strides as inputs."""
  return max_pool(input, ksize=ksize, strides=strides, padding=padding, data_format=data_format)


# The index of "no element": above every flat index, so a scatter drops it and a
# clipped take reads the zero appended after the last element. A constant, not the
# array's size, which is symbolic under a shape-polymorphic export.
_NO_INDEX = np.array(np.iinfo(np.int32).max, np.int32)


def _flat_index(shape):
  return lax.broadcasted_iota(np.int32, (math.prod(shape),), 0).reshape(shape)


def _first_index(shape, ksize, strides, pads):
  """Flat index of each window's first real (unpadded) element, in row-major order."""
  return lax.reduce_window(
    _flat_index(shape), _NO_INDEX, lax.min, tuple(ksize), tuple(strides), pads
  )


def _first_max(value, index, ksize, strides, pads):
  """Per window, the index of the first maximum of ``value`` (ties break on the
  smaller index inside the reducer, so the result does not depend on XLA's
  reduction order); ``value`` must not hold NaN."""

  def reducer(a, b):
    (av, ai), (bv, bi) = a, b
    take_a = (av > bv) | ((av == bv) & (ai < bi))
    return lax.select(take_a, av, bv), lax.select(take_a, ai, bi)

  init = (
    np.array(-np.inf, value.dtype)
    if jnp.issubdtype(value.dtype, jnp.floating)
    else np.array(np.iinfo(value.dtype).min, value.dtype)
  )
  _, out = lax.reduce_window(
    (value, index), (init, _NO_INDEX), reducer, tuple(ksize), tuple(strides), pads
  )
  return out


def _grad_index(x, ksize, strides, pads):
  """The element TF's MaxPoolGrad CPU kernel routes each window's gradient to: it
  starts at the window's first element and moves to a later one only when that is
  strictly greater. So a window whose first element is NaN sends its gradient
  there (NaN compares false); otherwise NaNs are skipped and the first maximum wins
  (-inf and ties included)."""
  index = _flat_index(x.shape)
  if not jnp.issubdtype(x.dtype, jnp.floating):
    return _first_max(x, index, ksize, strides, pads)
  first = _first_index(x.shape, ksize, strides, pads)
  best = _first_max(jnp.where(jnp.isnan(x), -jnp.inf, x), index, ksize, strides, pads)
  return jnp.where(jnp.isnan(x.reshape(-1)[first]), first, best)


def _grad_grad_index(x, ksize, strides, pads):
  """The element TF's MaxPoolGradGrad CPU kernel reads in each window: the first
  one equal to the window's max (MaxPool's output, which never lets NaN win and is
  clamped below at the lowest finite value). A window of NaN/-inf only has none:
  the index is then ``_NO_INDEX`` (read as 0)."""
  index = _flat_index(x.shape)
  if not jnp.issubdtype(x.dtype, jnp.floating):
    return _first_max(x, index, ksize, strides, pads)
  valid = x >= _lowest(x.dtype)  # false for NaN and below the clamp
  return _first_max(
    jnp.where(valid, x, -jnp.inf), jnp.where(valid, index, _NO_INDEX), ksize, strides, pads
  )


def max_pool_grad(
  orig_input,
  orig_output,
  grad,
  *,
  ksize,
  strides,
  padding,
  explicit_paddings=(),
  data_format="NHWC",
):
  """TF MaxPoolGrad: ``grad`` scattered to the element each window routes it to
  (:func:`_grad_index`: TF's CPU kernel, NaN and ties included)."""
  del orig_output  # recomputed from orig_input, as TF's CPU kernel does
  _check_pool_format(data_format)
  pads = _pool_pads(orig_input.shape, ksize, strides, padding, explicit_paddings)
  index = _grad_index(orig_input, ksize, strides, pads)
  # Scattered in the windows' shape: flattening it would need its size to be provably
  # non-negative, which a symbolic VALID pool's is not (jax.export).
  out = (
    jnp.zeros((orig_input.size,), grad.dtype)
    .at[index]
    .add(grad, indices_are_sorted=False, unique_indices=False)
  )
  return out.reshape(orig_input.shape)


def max_pool_grad_grad(
  orig_input,
  orig_output,
  grad,
  *,
  ksize,
  strides,
  padding,
  explicit_paddings=(),
  data_format="NHWC",
):
  """TF MaxPoolGradGrad: ``grad`` (input-shaped) read at each window's first max
  (:func:`_grad_grad_index`), 0 for a window without one. ``explicit_paddings`` is
  not a TF attr of this op; MaxPool's JVP passes it."""
  del orig_output  # recomputed from orig_input
  _check_pool_format(data_format)
  pads = _pool_pads(orig_input.shape, ksize, strides, padding, explicit_paddings)
  index = _grad_grad_index(orig_input, ksize, strides, pads)
  flat = jnp.concatenate([grad.reshape(-1), jnp.zeros((1,), grad.dtype)])
  return jnp.take(flat, index, mode="clip")


def max_pool_grad_grad_v2(
  orig_input, orig_output, grad, *, ksize, strides, padding, data_format="NHWC"
):
  """TF MaxPoolGradGradV2: MaxPoolGradGrad with ksize/strides as inputs."""
  return max_pool_grad_grad(
    orig_input,
    orig_output,
    grad,
    ksize=ksize,
    strides=strides,
    padding=padding,
    data_format=data_format,
  )


def _grad_params(p):
  """Params for tf.MaxPoolGrad (which always has explicit_paddings)."""
  return dict(p, explicit_paddings=p.get("explicit_paddings", ()))


def _gradgrad_params(p):
  """Params for tf.MaxPoolGradGrad: TF's op has no explicit_paddings attr; we add it
  only for EXPLICIT padding."""
  q = dict(p)
  pads = q.pop("explicit_paddings", ())
  if q.get("padding") == "EXPLICIT":
    q["explicit_paddings"] = pads
  return q


def _max_pool_jvp(op):
  """Tangent = tf.MaxPoolGradGrad(x, y, t): t read at each window's first max."""

  def rule(primals, tangents, **p):
    (x,), (t,) = primals, tangents
    y = op(x, **p)
    return y, tfops.MaxPoolGradGrad(x, y, ad.instantiate_zeros(t), **_gradgrad_params(p))

  return rule


def _max_pool_grad_transpose(ct, x, y, g, **p):
  return [None, None, tfops.MaxPoolGradGrad(x, y, ct, **_gradgrad_params(p))]


def _max_pool_grad_grad_transpose(ct, x, y, g, **p):
  return [None, None, tfops.MaxPoolGrad(x, y, ct, **_grad_params(p))]


def _avg_pool_counts(shape, ksize, strides, pads, out_shape):
  """How many real (unpadded) elements each output window averages, of size 1 along the
  axes no window spans (batch, channels; it broadcasts); None where a spanned axis has a
  symbolic size (jax.export). An axis of window 1 is never padded by SAME (the only
  padding AvgPool takes), so it counts 1 even where its pads are symbolic."""
  counts = np.ones((1,) * len(shape), np.float64)
  for a, (n, k, s, (lo, _), o) in enumerate(zip(shape, ksize, strides, pads, out_shape)):
    if k == 1:
      continue
    if type(n) is not int or type(o) is not int:
      return None
    start = np.arange(o) * s - lo
    c = (np.minimum(start + k, n) - np.maximum(start, 0)).astype(np.float64)
    counts = counts * c.reshape((1,) * a + (o,) + (1,) * (len(shape) - a - 1))
  return counts


def avg_pool(value, *, ksize, strides, padding, data_format="NHWC"):
  """TF AvgPool: SAME windows average only their real elements."""
  _check_pool_format(data_format)
  return average_windows(value, ksize, strides, padding)


def avg_pool_acc_dtype(dtype):
  """The dtype TF's CPU AvgPool sums in: float32 for bfloat16 (oneDNN), else the input's
  (float16 sums overflow at 65504, as in TF's Eigen kernel)."""
  return np.dtype("float32") if np.dtype(dtype) == jnp.bfloat16 else np.dtype(dtype)


def window_sums_in_order(value, ksize, strides, pads, *, plus_zero=True):
  """Window sums in TF's CPU order: 0, then the window's elements row-major (the first
  axis slowest), each add rounded (in :func:`avg_pool_acc_dtype`). Where huge values
  cancel, the order decides the result (``1e30 + 2 - 1e30 + 8`` is 8 in TF; a
  ``reduce_window`` gave 0). Padding adds zeros, which change nothing; the sum is
  never -0.0 (TF starts from +0.0; XLA would drop an explicit ``0 + x``): a select
  that ``plus_zero=False`` leaves out, for the linear map AvgPoolGrad transposes.
  Static shapes only."""
  acc = avg_pool_acc_dtype(value.dtype)
  x = lax.pad(value.astype(acc), np.array(0, acc), [(lo, hi, 0) for lo, hi in pads])
  out = [(n - k) // s + 1 for n, k, s in zip(x.shape, ksize, strides)]
  total = None
  for start in itertools.product(*(range(k) for k in ksize)):
    limit = [b + (o - 1) * s + 1 for b, o, s in zip(start, out, strides)]
    part = lax.slice(x, start, limit, tuple(strides))
    total = part if total is None else total + part
  return jnp.where(total == 0, np.array(0, acc), total) if plus_zero else total


def average_windows(value, ksize, strides, padding, *, plus_zero=True):
  """Window means over the real (unpadded) elements, any rank (AvgPool, AvgPool3D),
  summed in TF's order where the shapes are static (``plus_zero``: see
  :func:`window_sums_in_order`)."""
  pads = _pool_pads(value.shape, ksize, strides, padding)
  static = all(type(v) is int for v in tuple(value.shape) + tuple(x for p in pads for x in p))
  if (
    static
    and value.size
    and all(n + lo + hi >= k for n, (lo, hi), k in zip(value.shape, pads, ksize))
  ):
    total = window_sums_in_order(value, ksize, strides, pads, plus_zero=plus_zero)
    counts = _avg_pool_counts(value.shape, ksize, strides, pads, total.shape)
    return (total / counts.astype(total.dtype)).astype(value.dtype)
  total = lax.reduce_window(
    value, np.array(0, value.dtype), lax.add, tuple(ksize), tuple(strides), pads
  )
  if all(type(v) is int and v == 0 for p in pads for v in p):
    return total / math.prod(ksize)
  counts = _avg_pool_counts(value.shape, ksize, strides, pads, total.shape)
  if counts is not None:
    return total / counts.astype(value.dtype)
  # A symbolic image size (jax.export): the window sums of ones, in the program.
  spanned = [k > 1 for k in ksize]
  ones = jnp.ones(tuple(n if w else 1 for n, w in zip(value.shape, spanned)), value.dtype)
  return total / lax.reduce_window(
    ones,
    np.array(0, value.dtype),
    lax.add,
    tuple(ksize),
    tuple(s if w else 1 for s, w in zip(strides, spanned)),
    tuple(p if w else (0, 0) for p, w in zip(pads, spanned)),
  )


def avg_pool_grad(grad, *, orig_input_shape, ksize, strides, padding, data_format="NHWC"):
  """TF AvgPoolGrad: the transpose of AvgPool."""
  shape = rules.sizes(orig_input_shape)
  _check_pool_format(data_format)
  f = functools.partial(
    average_windows, ksize=ksize, strides=strides, padding=padding, plus_zero=False
  )
  out = jax.linear_transpose(f, jax.ShapeDtypeStruct(shape, grad.dtype))(grad)[0]
  return jnp.where(out == 0, jnp.zeros((), out.dtype), out)  # TF adds into +0.0


def _pool_calls(
  st, op_type, dtypes, *, explicit=False, v2=False, special=True, ties=False, huge=False
):
  """Calls of a pooling op or its grad ops. For float dtypes only calls whose TF
  gradient op also runs on CPU are kept (it is the gradient oracle). ``huge`` sprinkles
  values whose window sums cancel (their order decides the result)."""
  from hypothesis import assume
  from hypothesis.extra import numpy as hnp

  avg = op_type.startswith("AvgPool")
  fwd_name = "AvgPool" if avg else ("MaxPoolV2" if v2 else "MaxPool")
  grad_name, gradgrad_name = (
    ("MaxPoolGradV2", "MaxPoolGradGradV2") if v2 else ("MaxPoolGrad", "MaxPoolGradGrad")
  )
  needs = {
    "MaxPool": (fwd_name, grad_name),
    "MaxPoolV2": (fwd_name, grad_name),
    "MaxPoolGrad": (grad_name, gradgrad_name),
    "MaxPoolGradGrad": (gradgrad_name, grad_name),
    "MaxPoolGradV2": (grad_name, gradgrad_name),
    "MaxPoolGradGradV2": (gradgrad_name, grad_name),
    "AvgPool": ("AvgPool", "AvgPoolGrad"),
    "AvgPoolGrad": ("AvgPoolGrad", "AvgPool"),
  }

  @st.composite
  def draw_call(draw):
    fmt = draw(st.sampled_from(("NHWC", "NCHW")))
    dtype = draw(
      st.sampled_from([d for d in dtypes if d in _ONEDNN_DTYPES] if fmt == "NCHW" else list(dtypes))
    )
    n, c = draw(st.integers(1, 2)), draw(st.integers(1, 3))
    ks = [draw(st.integers(2 if huge else 1, 3)) for _ in range(2)]  # huge: 2-D windows
    ss = [draw(st.integers(1, 3)) for _ in range(2)]
    padding = draw(
      st.sampled_from(("SAME", "VALID", "EXPLICIT") if explicit else ("SAME", "VALID"))
    )
    epads = [
      (draw(st.integers(0, k - 1)), draw(st.integers(0, k - 1)))
      if padding == "EXPLICIT"
      else (0, 0)
      for k in ks
    ]
    sizes = [
      draw(st.integers(max(1, k - lo - hi), 5)) if padding != "SAME" else draw(st.integers(1, 5))
      for k, (lo, hi) in zip(ks, epads)
    ]
    shape = _layout_shape(fmt, n, c, sizes)
    attrs = dict(padding=padding, data_format=fmt)
    ksize, strides = _layout_attr(fmt, ks), _layout_attr(fmt, ss)
    if v2:
      attrs.update(ksize=np.array(ksize, np.int32), strides=np.array(strides, np.int32))
    else:
      attrs.update(ksize=ksize, strides=strides)
    gg_attrs = dict(attrs)
    if explicit:
      flat = _layout_attr(fmt, epads, fill=(0, 0))
      attrs["explicit_paddings"] = (
        [v for pair in flat for v in pair] if padding == "EXPLICIT" else []
      )
    # TF's MaxPoolGrad and MaxPoolGradGrad kernels (the gradient and the tangent of
    # MaxPool) pick different elements in windows of NaN/-inf. Where TF has no
    # forward mode — EXPLICIT padding (MaxPoolGradGrad takes no explicit paddings),
    # MaxPoolGradV2 (no gradient of MaxPoolGradGradV2) — the runner's fallback would
    # compare those two kernels with each other, so such calls draw no NaN/-inf.
    nan_windows = padding != "EXPLICIT" and op_type != "MaxPoolGradV2"
    # oneDNN's half-precision MaxPool (CPUs with AVX512-FP16/BF16) gives a window of only
    # NaN/-inf -inf where tfprims keeps the lowest finite value (docs/semantics/nn.md).
    if dtype in ("float16", "bfloat16") and not v2 and st.tf_onednn(dtype):
      nan_windows = False
    if ties and draw(st.booleans()):
      # Tied windows, and (floats) windows of NaN/-inf: which element a max-pool
      # gradient picks there is each TF kernel's own rule.
      levels = [0.0, 1.0, 2.0] + (
        [-0.0, np.nan, -np.inf] if dtype in st.FLOATS and nan_windows else []
      )
      x = draw(hnp.arrays(st.np_dtype(dtype), shape, elements=st.sampled_from(levels))).astype(
        st.np_dtype(dtype)
      )
    else:
      x = draw(bounded_values(st, dtype, shape, special=special and nan_windows))
    if huge and st.is_float(dtype) and draw(st.booleans()):
      with np.errstate(over="ignore"):  # float16: 1e30 is inf
        big = np.array([1e30, -1e30, 3e38, -3e38, 6e4, -6e4], np.float32).astype(x.dtype)
      # Mixed signs and magnitudes in one window (hypothesis' lists tend to repeat one).
      rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
      pick = rng.integers(-len(big), len(big), size=shape)
      x = np.where(pick >= 0, big[np.maximum(pick, 0)], x)
    fwd = dict(value=x, **attrs) if avg else dict(input=x, **attrs)
    assume(_tf_accepts(fwd_name, fwd))
    y = _tf_call(fwd_name, fwd).numpy()
    gy, gx = draw(bounded_values(st, dtype, y.shape)), draw(bounded_values(st, dtype, shape))
    calls = {
      fwd_name: fwd,
      "AvgPoolGrad": dict(orig_input_shape=np.array(shape, np.int32), grad=gy, **attrs),
      grad_name: dict(orig_input=x, orig_output=y, grad=gy, **attrs),
      gradgrad_name: dict(orig_input=x, orig_output=y, grad=gx, **gg_attrs),
    }
    needed = needs[op_type] if dtype in st.FLOATS else needs[op_type][:1]
    assume(all(_tf_accepts(name, calls[name]) for name in needed))
    return calls[needed[0]]

  return draw_call()


_POOL_ATTRS = ("ksize", "strides", "padding", "explicit_paddings", "data_format")
_HALF_TOL = dict(rtol={"float16": 1e-2, "bfloat16": 2e-2}, atol={"float16": 1e-2, "bfloat16": 2e-2})


def _pool_shape(input, *, ksize, strides, padding, explicit_paddings=(), data_format="NHWC"):
  _check_pool_format(data_format)
  pads = _pool_pads(input.shape, ksize, strides, padding, explicit_paddings)
  return jax.ShapeDtypeStruct(
    tuple(_out_size(n, k, s, 1, p) for n, k, s, p in zip(input.shape, ksize, strides, pads)),
    input.dtype,
  )


MaxPool = register_op(
  "MaxPool",
  max_pool,
  family="nn",
  attrs=_POOL_ATTRS,
  shape_rule=_pool_shape,
  jvp=rules.per_op(_max_pool_jvp),
  batching=rules.per_op(fold_batching),
  spec=rules.per_op(
    lambda op: (
      lambda st: st.Spec(
        _pool_calls(
          st,
          op.op_type,
          ("float16", "bfloat16", "float32", "float64") + st.SIGNED + ("uint8", "uint16"),
          explicit=True,
          ties=True,
        ),
        sanitize_grads=False,
        note="NaN never wins and results are clamped below at the lowest finite value, as "
        "TF's CPU kernels do. The gradient (MaxPoolGrad) and the tangent "
        "(MaxPoolGradGrad) follow TF's two kernels, which differ on NaN windows.",
      )
    )
  ),
)

MaxPoolV2 = register_op(
  "MaxPoolV2",
  max_pool_v2,
  family="nn",
  static=("ksize", "strides"),
  attrs=("padding", "data_format"),
  jvp=rules.per_op(_max_pool_jvp),
  batching=rules.per_op(fold_batching),
  spec=rules.per_op(
    lambda op: (
      lambda st: st.Spec(
        _pool_calls(
          st,
          op.op_type,
          ("float16", "bfloat16", "float32", "float64") + st.SIGNED + ("uint8", "uint16"),
          v2=True,
          ties=True,
        )
      )
    )
  ),
)

MaxPoolGrad = register_op(
  "MaxPoolGrad",
  max_pool_grad,
  family="nn",
  attrs=_POOL_ATTRS,
  jvp=(None, None, lambda t, x, y, g, **p: tfops.MaxPoolGrad(x, y, t, **p)),
  transpose=_max_pool_grad_transpose,
  batching=rules.per_op(fold_batching),
  spec=rules.per_op(
    lambda op: (
      lambda st: st.Spec(
        _pool_calls(
          st, op.op_type, ("float16", "bfloat16", "float32", "float64"), special=False, ties=True
        ),
        diff_args=("grad",),
        sanitize_grads=False,
        **_HALF_TOL,
        note="float dtypes only (TF also has integer kernels).",
      )
    )
  ),
)

MaxPoolGradGrad = register_op(
  "MaxPoolGradGrad",
  max_pool_grad_grad,
  family="nn",
  attrs=("ksize", "strides", "padding", "data_format"),
  jvp=(None, None, lambda t, x, y, g, **p: tfops.MaxPoolGradGrad(x, y, t, **p)),
  transpose=_max_pool_grad_grad_transpose,
  batching=rules.per_op(fold_batching),
  spec=rules.per_op(
    lambda op: (
      lambda st: st.Spec(
        _pool_calls(
          st, op.op_type, ("float16", "bfloat16", "float32", "float64"), special=False, ties=True
        ),
        diff_args=("grad",),
        vmap_variation="none",
        sanitize_grads=False,
        note="float dtypes only (TF also has integer kernels). orig_output is ignored "
        "(recomputed); TF's kernel matches it against orig_input, so the vmap check "
        "keeps batch members consistent (copies).",
      )
    )
  ),
)

MaxPoolGradV2 = register_op(
  "MaxPoolGradV2",
  max_pool_grad,
  family="nn",
  static=("ksize", "strides"),
  attrs=("padding", "data_format"),
  jvp=(None, None, lambda t, x, y, g, **p: tfops.MaxPoolGradV2(x, y, t, **p)),
  transpose=lambda ct, x, y, g, **p: [None, None, tfops.MaxPoolGradGradV2(x, y, ct, **p)],
  batching=rules.per_op(fold_batching),
  spec=rules.per_op(
    lambda op: (
      lambda st: st.Spec(
        _pool_calls(
          st,
          op.op_type,
          ("float16", "bfloat16", "float32", "float64"),
          v2=True,
          special=False,
          ties=True,
        ),
        diff_args=("grad",),
        sanitize_grads=False,
        **_HALF_TOL,
        note="float dtypes only.",
      )
    )
  ),
)

MaxPoolGradGradV2 = register_op(
  "MaxPoolGradGradV2",
  max_pool_grad_grad_v2,
  family="nn",
  static=("ksize", "strides"),
  attrs=("padding", "data_format"),
  jvp=(None, None, lambda t, x, y, g, **p: tfops.MaxPoolGradGradV2(x, y, t, **p)),
  transpose=lambda ct, x, y, g, **p: [None, None, tfops.MaxPoolGradV2(x, y, ct, **p)],
  batching=rules.per_op(fold_batching),
  spec=rules.per_op(
    lambda op: (
      lambda st: st.Spec(
        _pool_calls(
          st,
          op.op_type,
          ("float16", "bfloat16", "float32", "float64"),
          v2=True,
          special=False,
          ties=True,
        ),
        diff_args=("grad",),
        vmap_variation="none",
        sanitize_grads=False,
        note="float dtypes only.",
      )
    )
  ),
)

AvgPool = register_op(
  "AvgPool",
  avg_pool,
  family="nn",
  attrs=("ksize", "strides", "padding", "data_format"),
  shape_rule=_pool_shape,
  linear=True,
  transpose=lambda ct, x, **p: [tfops.AvgPoolGrad(ct, orig_input_shape=rules.shape_of(x), **p)],
  batching=rules.per_op(fold_batching),
  spec=rules.per_op(
    lambda op: (
      lambda st: st.Spec(
        _pool_calls(
          st, op.op_type, ("float16", "bfloat16", "float32", "float64"), special=True, huge=True
        ),
        **_HALF_TOL,
      )
    )
  ),
)


def _fix_orig_shape(p, b):
  shape = tuple(p["orig_input_shape"])
  return dict(p, orig_input_shape=(b * shape[0],) + shape[1:])


AvgPoolGrad = register_op(
  "AvgPoolGrad",
  avg_pool_grad,
  family="nn",
  static=("orig_input_shape",),
  attrs=("ksize", "strides", "padding", "data_format"),
  linear=True,
  transpose=lambda ct, g, *, orig_input_shape, **p: [tfops.AvgPool(ct, **p)],
  batching=rules.per_op(fold_batching, _fix_orig_shape),
  spec=rules.per_op(
    lambda op: (
      lambda st: st.Spec(
        _pool_calls(
          st,
          op.op_type,
          ("float16", "bfloat16", "float32", "float64"),
        ),
        **_HALF_TOL,
      )
    )
  ),
)
