"""Filling: Fill, ZerosLike, OnesLike, Range.

Fill is linear (transpose: ``tf.Sum`` of the cotangent); ZerosLike is linear and transposes
to itself, and of a variant value (a TensorList, an Optional: what TF's gradient code zeroes
for a loop's list accumulators) it is that value with each of its tensors zeroed, as TF's
registered variant ZerosLike; OnesLike's JVP is zero. Range has no operands at all (its
three inputs are static): its value is computed with numpy at trace time by
``range_values``, following TF's kernel (size computed in ``Tidx``, integers wrapping like
TF's; docs/semantics/array.md).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from tfprims import dtypes as tfdtypes, errors, rules
from tfprims.core import register_op, tfops
from tfprims.ops.array._common import FAMILY
from tfprims.ops import tensorlist
from tfprims.ops.shared import VariantTensor
from tfprims.ops.shared_specs import index_array, lazy_hst
from tfprims.errors import import_tensorflow


def _fill_impl(value, *, shape):
  dims = rules.sizes(shape)  # symbolic dims (jax.export) are positive
  if any(isinstance(d, int) and d < 0 for d in dims):
    raise ValueError(f"Fill: dims must be non-negative, got {dims}")
  if jnp.size(value) != 1:
    raise ValueError(f"Fill: value must be a scalar, got shape {jnp.shape(value)}")
  return jnp.broadcast_to(jnp.reshape(value, ()), dims)


def _fill_batch(args, bdims, *, shape):
  (v,), (d,) = args, bdims
  v = rules.to_front(v, d)
  dims = rules.sizes(shape)
  v = tfops.Reshape(v, shape=(v.shape[0],) + (1,) * len(dims))
  return tfops.BroadcastTo(v, shape=(v.shape[0],) + dims), 0


Fill = register_op(
  "Fill",
  _fill_impl,
  family=FAMILY,
  static={"dims": "shape"},
  linear=True,
  transpose=lambda ct, v, *, shape: [
    tfops.Reshape(rules.reduce_sum(ct, tuple(range(ct.ndim))), shape=rules.shape_of(v))
  ],
  batching=_fill_batch,
  spec=lambda st: st.Spec(_fill_calls(st)),
)


def _zeros_like(ctx, node, inputs):
  """Interpreter hook: a variant value (a pytree of tensors: TensorList, Optional)
  keeps its structure with every tensor zeroed (an uninitialized list stays so);
  tensors take the primitive."""
  from tfprims.interpreter import bind_node

  (x,) = inputs
  if hasattr(x, "shape") and hasattr(x, "dtype"):
    return bind_node(ctx, ZerosLike, node, inputs)
  if isinstance(x, tensorlist.TensorList) and tensorlist.is_variant_list(x):
    return [tensorlist.zeros_list(x)]  # TF's gradient of map_fn over ragged rows
  if any(isinstance(t, VariantTensor) for t in jax.tree.leaves(x)):
    raise errors.UnsupportedInputError(
      f"{node.op} node '{node.name}' zeroes variants held as Python values (ragged "
      "rows) that are not a TensorList of them"
    )
  return [jax.tree.map(lambda t: ZerosLike.apply([t], {}), x)]


ZerosLike = register_op(
  "ZerosLike",
  jnp.zeros_like,
  family=FAMILY,
  batching="elementwise",
  linear=True,
  transpose=lambda ct, x: [tfops.ZerosLike(ct)],
  interpret=_zeros_like,
  spec=lambda st: st.Spec(st.unary(st.ALL)),
)

OnesLike = register_op(
  "OnesLike",
  jnp.ones_like,
  family=FAMILY,
  batching="elementwise",
  jvp=(lambda g, x: tfops.ZerosLike(g),),
  spec=lambda st: st.Spec(
    st.unary(st.ALL),
    skip={
      "jvp": "TF registers no gradient for OnesLike",
      "vjp": "TF registers no gradient for OnesLike",
    },
  ),
)


def range_values(start, limit, delta, dtype) -> np.ndarray:
  """TF's RangeOp on static values: size ``ceil(|(limit - start) / delta|)`` computed in
  ``dtype`` (integers: ``(|limit - start| + |delta| - 1) / |delta|``) and values
  ``start + i * delta`` rounded to ``dtype``."""
  dtype = np.dtype(dtype)
  s, l, d = (np.asarray(v).astype(dtype) for v in (start, limit, delta))
  if d == 0:
    raise ValueError("Range: requires delta != 0")
  if d > 0 and s > l:
    raise ValueError(f"Range: requires start <= limit when delta > 0: {s}/{l}")
  if d < 0 and s < l:
    raise ValueError(f"Range: requires start >= limit when delta < 0: {s}/{l}")
  if dtype.kind in "iu":
    si, li, di = int(s), int(l), int(d)
    size = (abs(li - si) + abs(di) - 1) // abs(di)
    values = si + np.arange(size, dtype=object) * di
    bits = dtype.itemsize * 8
    values = np.array(
      [
        ((v + (1 << (bits - 1))) % (1 << bits)) - (1 << (bits - 1))
        if dtype.kind == "i"
        else v % (1 << bits)
        for v in values
      ],
      dtype=np.int64 if dtype.kind == "i" else np.uint64,
    ).astype(dtype)
    return values.reshape(-1)
  with np.errstate(all="ignore"):
    q = np.abs((l - s) / d)
  if not np.isfinite(q) or float(q) > np.iinfo(np.int64).max:
    raise ValueError("Range: requires ((limit - start) / delta) <= max int64")
  size = int(np.ceil(q))
  idx = np.arange(size).astype(dtype)
  with np.errstate(all="ignore"):
    return (s + (idx * d).astype(dtype)).astype(dtype)


def _range_batch(args, dims, **params):
  raise NotImplementedError("Range has no operands to batch")


def _symbolic_range(start, limit, delta, dtype):
  """Range over a symbolic bound (``tf.range(tf.shape(x)[0])`` under a shape-polymorphic
  export): ``start + i * delta`` for ``i`` below ``ceil((limit - start) / delta)``, none
  when that is negative (TF's error for it needs the bound's value)."""
  s, l, d = (rules.sizes(v)[0] for v in (start, limit, delta))
  if not isinstance(d, int) or np.dtype(dtype).kind not in "iu":
    raise TypeError(
      f"Range: a symbolic start or limit needs an integer type and a known "
      f"delta, not delta {d!r} in {np.dtype(dtype).name}"
    )
  if d == 0:
    raise ValueError("Range: requires delta != 0")
  span = l - s if d > 0 else s - l
  size = jax.core.max_dim((span + abs(d) - 1) // abs(d), 0)
  return (
    jnp.asarray(s, dtype) + jnp.asarray(d, dtype) * jax.lax.iota(np.dtype(dtype), size)
  ).astype(dtype)


def _range_impl(*, start, limit, delta, Tidx):
  if any(jax.export.is_symbolic_dim(v) for v in rules.sizes((start, limit, delta))):
    return _symbolic_range(start, limit, delta, tfdtypes.canonical_dtype(Tidx))
  values = range_values(start, limit, delta, Tidx)
  return jnp.asarray(tfdtypes.canonicalize_value(values, "Range output"))


Range = register_op(
  "Range",
  _range_impl,
  family=FAMILY,
  static=("start", "limit", "delta"),
  attrs=("Tidx",),
  batching=_range_batch,
  spec=lambda st: st.Spec(
    _range_calls(st),
    oracle=_range_oracle,
    skip={
      "jvp": "no operands (all inputs are static)",
      "vjp": "no operands (all inputs are static)",
      "vmap": "no operands (all inputs are static)",
    },
  ),
)


# --- property-test strategies (hypothesis is imported lazily) ---------------------


def _range_oracle(start, limit, delta, Tidx=None):
  # Tensors, not numpy values: with numpy inputs tf.raw_ops.Range converts them to
  # its default Tidx (int32). Tidx itself is inferred by TF (drawn for prepare).
  tf = import_tensorflow()
  return tf.raw_ops.Range(
    start=tf.constant(start), limit=tf.constant(limit), delta=tf.constant(delta)
  )


def _fill_calls(st):
  @st.composite
  def calls(draw):
    dims = draw(st.shapes())
    return {
      "dims": index_array(draw, st, np.array(dims, np.int64).reshape(-1)),
      "value": draw(st.arrays(st.dtypes(st.ALL), ())),
    }

  return calls()


def _range_calls(st):
  hst = lazy_hst()

  @st.composite
  def calls(draw):
    name = draw(hst.sampled_from(["int32", "int64", "float32", "float64", "float16", "bfloat16"]))
    dtype = st.np_dtype(name)
    if dtype.kind == "i":
      start, limit = draw(hst.integers(-20, 20)), draw(hst.integers(-20, 20))
      delta = draw(hst.sampled_from([1, 2, 3, 7, -1, -2, -5]))
    else:
      start = draw(hst.sampled_from([0.0, 0.5, -1.25, 3.0, 0.1, -7.3]))
      limit = draw(hst.sampled_from([0.0, 2.0, -3.5, 7.7, 10.0, 0.1]))
      delta = draw(hst.sampled_from([0.5, 1.0, 0.3, 1.7, -0.5, -1.0, -0.7]))
    if (delta > 0 and start > limit) or (delta < 0 and start < limit):
      start, limit = limit, start
    return {
      "start": np.asarray(start).astype(dtype),
      "limit": np.asarray(limit).astype(dtype),
      "delta": np.asarray(delta).astype(dtype),
      "Tidx": dtype,
    }

  return calls()
