"""Max pooling with argmax: MaxPoolWithArgmax, MaxPoolGradWithArgmax,
MaxPoolGradGradWithArgmax (NHWC, TF has no data_format attr).

An argmax is a flat index into the NHWC input: ``((b * H + y) * W + x) * C + c`` with
``include_batch_in_index``, else without the ``b`` term. MaxPoolWithArgmax follows TF's
CPU kernel: each window starts at its first real element and moves to a later one only
when it is strictly greater, so a window whose first element is NaN gives NaN at that
element, other NaNs never win, the first maximum wins ties (-inf included) and values are
not clamped. That is the element TF's MaxPoolGrad routes to (``pool._grad_index``).

The grad ops take the argmax as data: MaxPoolGradWithArgmax scatter-adds ``grad`` at it,
MaxPoolGradGradWithArgmax gathers ``grad`` at it. Indices outside the input (after adding
the example's offset when ``include_batch_in_index`` is false) are dropped by the
scatter and read as 0 by the gather (project policy; TF's CPU kernel aborts the process
on such an index, and has no MaxPoolGradGradWithArgmax kernel); ``check=`` flags them.

Explicit TF-named rules, as TF registers them: MaxPoolWithArgmax's JVP is
MaxPoolGradGradWithArgmax (the tangent at the argmax), MaxPoolGradWithArgmax and
MaxPoolGradGradWithArgmax are linear in ``grad`` and each other's transpose. vmap folds
the batch axis into N; the grad ops' indices are then made global over the folded batch
(``include_batch_in_index=True``, out-of-range ones kept out of range).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from jax.interpreters import ad

from tfprims import dtypes as tfdtypes
from tfprims import rules
from tfprims.core import register_op, tfops
from tfprims.ops.nn._specs import _tf_accepts, _tf_call
from tfprims.ops.nn.pool import _grad_index, _pool_pads
from tfprims.ops.shared import merge_batch, split_batch
from tfprims.ops.shared_specs import bounded_values
from tfprims.errors import import_tensorflow


def max_pool_with_argmax(
  input, *, ksize, strides, padding, Targmax=np.dtype("int64"), include_batch_in_index=False
):
  """TF MaxPoolWithArgmax: the max and its flat index per window (TF's CPU kernel's
  NaN and tie rule)."""
  pads = _pool_pads(input.shape, ksize, strides, padding)
  index = _grad_index(input, ksize, strides, pads)
  out = input.reshape(-1)[index.reshape(-1)].reshape(index.shape)
  dtype = tfdtypes.canonical_dtype(Targmax)
  argmax = index.astype(dtype)
  if not include_batch_in_index and input.shape[0]:
    argmax = argmax % np.array(input.size // input.shape[0], dtype)
  return out, argmax


def _global_index(input, argmax, include_batch_in_index):
  """The argmax as a flat index into ``input`` (the example's offset added)."""
  idx = argmax
  if not include_batch_in_index and input.shape[0]:
    per_example = input.size // input.shape[0]
    example = jnp.arange(argmax.shape[0], dtype=idx.dtype).reshape((-1,) + (1,) * (idx.ndim - 1))
    idx = idx + example * np.array(per_example, idx.dtype)
  return idx


def _in_range(idx, size):
  return (idx >= 0) & (idx < size)


def max_pool_grad_with_argmax(
  input, grad, argmax, *, ksize, strides, padding, include_batch_in_index=False
):
  """TF MaxPoolGradWithArgmax: ``grad`` added at ``argmax``; out-of-range indices are
  dropped."""
  del ksize, strides, padding  # the argmax says where each window's gradient goes
  idx = _global_index(input, argmax, include_batch_in_index).reshape(-1)
  idx = jnp.where(_in_range(idx, input.size), idx, input.size)
  out = jnp.zeros((input.size,), grad.dtype).at[idx].add(grad.reshape(-1), mode="drop")
  return out.reshape(input.shape)


def max_pool_grad_grad_with_argmax(
  input, grad, argmax, *, ksize, strides, padding, include_batch_in_index=False
):
  """TF MaxPoolGradGradWithArgmax: ``grad`` (input-shaped) read at ``argmax``; 0 for
  out-of-range indices."""
  del ksize, strides, padding
  idx = _global_index(input, argmax, include_batch_in_index)
  ok = _in_range(idx, input.size)
  flat = jnp.concatenate([grad.reshape(-1), jnp.zeros((1,), grad.dtype)])
  return jnp.take(flat, jnp.where(ok, idx, input.size), mode="clip")


def _argmax_check(input, grad, argmax, *, include_batch_in_index=False, **_):
  if argmax.size == 0:
    return None
  idx = _global_index(input, argmax, include_batch_in_index)
  return (
    jnp.any(~_in_range(idx, input.size)),
    f"Invalid output gradient index: an argmax is not in [0, {input.size})",
  )


_GRAD_ATTRS = ("ksize", "strides", "padding", "include_batch_in_index")


def _grad_params(p):
  return {k: p[k] for k in _GRAD_ATTRS}


def _with_argmax_jvp(primals, tangents, **p):
  (x,), (t,) = primals, tangents
  y, argmax = tfops.MaxPoolWithArgmax(x, **p)
  ty = tfops.MaxPoolGradGradWithArgmax(x, ad.instantiate_zeros(t), argmax, **_grad_params(p))
  return (y, argmax), (ty, ad.Zero(jax.typeof(argmax).to_tangent_aval()))


def _with_argmax_batching(args, dims, **p):
  """Folds the batch into N; with include_batch_in_index the indices are made relative
  to each batch member again."""
  (x,), (d,) = args, dims
  b = x.shape[d]
  y, argmax = tfops.MaxPoolWithArgmax(merge_batch(x, d), **p)
  y, argmax = split_batch(y, b), split_batch(argmax, b)
  if p.get("include_batch_in_index"):
    member = x.size // b if b else 0
    offset = jnp.arange(b, dtype=argmax.dtype).reshape((b,) + (1,) * (argmax.ndim - 1))
    argmax = argmax - offset * np.array(member, argmax.dtype)
  return (y, argmax), (0, 0)


def _grad_batching(op):
  """Folds the batch into N and makes every index global over the folded batch
  (include_batch_in_index=True); an index out of its member's range stays out of range."""

  def rule(args, dims, **p):
    b = rules.batch_size(args, dims)
    x, g, argmax = [
      jnp.broadcast_to(a, (b,) + a.shape) if d is None else jnp.moveaxis(a, d, 0)
      for a, d in zip(args, dims)
    ]
    member = x[0]
    idx = jax.vmap(lambda a: _global_index(member, a, p["include_batch_in_index"]))(argmax)
    offset = jnp.arange(b, dtype=idx.dtype).reshape((b,) + (1,) * (idx.ndim - 1))
    idx = jnp.where(
      _in_range(idx, member.size),
      idx + offset * np.array(member.size, idx.dtype),
      np.array(-1, idx.dtype),
    )
    out = op(
      merge_batch(x, 0),
      merge_batch(g, 0),
      merge_batch(idx, 0),
      **dict(p, include_batch_in_index=True),
    )
    return split_batch(out, b), 0

  return rule


def tf_max_pool_grad_grad_with_argmax(
  input, grad, argmax, ksize, strides, padding, include_batch_in_index=False
):
  """MaxPoolGradGradWithArgmax written with TF ops (TF has no CPU kernel for it): the
  spec's oracle."""
  tf = import_tensorflow()
  del ksize, strides, padding
  idx = tf.cast(argmax, tf.int64)
  n = int(input.shape[0])
  size = int(np.prod(input.shape))
  if not include_batch_in_index and n:
    idx = idx + tf.reshape(tf.range(n, dtype=tf.int64) * (size // n), (-1, 1, 1, 1))
  ok = (idx >= 0) & (idx < size)
  vals = tf.gather(tf.reshape(grad, [-1]), tf.where(ok, idx, tf.zeros_like(idx)))
  return tf.where(ok, vals, tf.zeros_like(vals))


def _argmax_calls(st, op_type, dtypes):
  """Calls with windows of ties (and NaN/-inf for floats); the grad ops get the argmax of
  TF's MaxPoolWithArgmax for the drawn input."""
  from hypothesis import assume
  from hypothesis.extra import numpy as hnp

  @st.composite
  def draw_call(draw):
    dtype = draw(st.sampled_from(dtypes))
    dt = st.np_dtype(dtype)
    n, c = draw(st.integers(1, 2)), draw(st.integers(1, 3))
    ks = [draw(st.integers(1, 3)) for _ in range(2)]
    ss = [draw(st.integers(1, 3)) for _ in range(2)]
    padding = draw(st.sampled_from(("SAME", "VALID")))
    sizes = [draw(st.integers(k if padding == "VALID" else 1, 4)) for k in ks]
    shape = (n, *sizes, c)
    attrs = dict(
      ksize=[1, *ks, 1],
      strides=[1, *ss, 1],
      padding=padding,
      include_batch_in_index=draw(st.booleans()),
    )
    if draw(st.booleans()):
      levels = [0.0, 1.0, 2.0] + ([np.nan, -np.inf] if st.is_float(dt) else [])
      x = draw(hnp.arrays(dt, shape, elements=st.sampled_from(levels))).astype(dt)
    else:
      x = draw(bounded_values(st, dtype, shape, special=st.is_float(dt)))
    targmax = np.dtype(draw(st.sampled_from(("int32", "int64"))))
    fwd = dict(input=x, Targmax=targmax, **attrs)
    assume(_tf_accepts("MaxPoolWithArgmax", fwd))
    if op_type == "MaxPoolWithArgmax":
      return fwd
    y, argmax = (t.numpy() for t in _tf_call("MaxPoolWithArgmax", fwd))
    if op_type == "MaxPoolGradWithArgmax":
      call = dict(input=x, grad=draw(bounded_values(st, dtype, y.shape)), argmax=argmax, **attrs)
      assume(_tf_accepts(op_type, call))
      return call
    return dict(input=x, grad=draw(bounded_values(st, dtype, shape)), argmax=argmax, **attrs)

  return draw_call()


_DTYPES = (
  "float16",
  "bfloat16",
  "float32",
  "float64",
  "int8",
  "int16",
  "int32",
  "int64",
  "uint8",
  "uint16",
  "uint32",
  "uint64",
)
_TOL = dict(rtol={"float16": 1e-2, "bfloat16": 2e-2}, atol={"float16": 1e-2, "bfloat16": 2e-2})


def _with_argmax_shape(
  input, *, ksize, strides, padding, Targmax=np.dtype("int64"), include_batch_in_index=False
):
  from tfprims.ops.nn._common import _out_size

  pads = _pool_pads(input.shape, ksize, strides, padding)
  shape = tuple(_out_size(n, k, s, 1, q) for n, k, s, q in zip(input.shape, ksize, strides, pads))
  return (
    jax.ShapeDtypeStruct(shape, input.dtype),
    jax.ShapeDtypeStruct(shape, tfdtypes.canonical_dtype(Targmax)),
  )


MaxPoolWithArgmax = register_op(
  "MaxPoolWithArgmax",
  max_pool_with_argmax,
  family="nn",
  multiple_results=True,
  attrs=("ksize", "strides", "Targmax", "padding", "include_batch_in_index"),
  shape_rule=_with_argmax_shape,
  jvp=_with_argmax_jvp,
  batching=_with_argmax_batching,
  spec=rules.per_op(
    lambda op: (
      lambda st: st.Spec(
        _argmax_calls(st, op.op_type, _DTYPES),
        sanitize_grads=False,
        note="NHWC. The first real element, then only strictly greater ones (NaN first: "
        "NaN; ties: the first), as TF's CPU kernel.",
      )
    )
  ),
)

MaxPoolGradWithArgmax = register_op(
  "MaxPoolGradWithArgmax",
  max_pool_grad_with_argmax,
  family="nn",
  attrs=_GRAD_ATTRS,
  check=_argmax_check,
  jvp=(None, lambda t, x, g, a, **p: tfops.MaxPoolGradWithArgmax(x, t, a, **p), None),
  transpose=lambda ct, x, g, a, **p: [None, tfops.MaxPoolGradGradWithArgmax(x, ct, a, **p), None],
  batching=rules.per_op(_grad_batching),
  spec=rules.per_op(
    lambda op: (
      lambda st: st.Spec(
        _argmax_calls(st, op.op_type, _DTYPES),
        diff_args=("grad",),
        grad_oracle="fd",
        **_TOL,
        note="TF's gradient (MaxPoolGradGradWithArgmax) has no CPU kernel: "
        "derivatives are checked by central differences. Out-of-range argmax values "
        "are dropped (TF's CPU kernel aborts).",
      )
    )
  ),
)

MaxPoolGradGradWithArgmax = register_op(
  "MaxPoolGradGradWithArgmax",
  max_pool_grad_grad_with_argmax,
  family="nn",
  attrs=_GRAD_ATTRS,
  check=_argmax_check,
  jvp=(None, lambda t, x, g, a, **p: tfops.MaxPoolGradGradWithArgmax(x, t, a, **p), None),
  transpose=lambda ct, x, g, a, **p: [None, tfops.MaxPoolGradWithArgmax(x, ct, a, **p), None],
  batching=rules.per_op(_grad_batching),
  spec=rules.per_op(
    lambda op: (
      lambda st: st.Spec(
        _argmax_calls(st, op.op_type, _DTYPES),
        diff_args=("grad",),
        oracle=tf_max_pool_grad_grad_with_argmax,
        **_TOL,
        note="TF has no CPU kernel: the oracle is the same gather written "
        "with TF ops (tf.gather at the argmax). Out-of-range argmax values read 0.",
      )
    )
  ),
)
