"""Selection: Select (v1) and SelectV2.

Select takes a condition that is a scalar, a vector matching the first dimension
of ``t``/``e`` (selects whole rows), or of ``t``'s shape; SelectV2 broadcasts all
three (numpy rules). Under vmap Select is re-bound as ``tf.SelectV2`` with the
condition reshaped to broadcast. JVPs and transposes select the tangent or
cotangent against ``tf.ZerosLike`` (SelectV2's cotangents summed down to the
operand shapes).
"""

from __future__ import annotations

import jax.numpy as jnp

from tfprims import rules
from tfprims.core import register_op, tfops
from tfprims.ops.array._common import FAMILY
from tfprims.ops.shared_specs import lazy_hst
from tfprims.rules import U


def _select_condition(c, t_shape):
  """Select's condition reshaped to broadcast (right-aligned) against ``t``."""
  c_shape = tuple(jnp.shape(c))
  if c_shape == tuple(t_shape) or not c_shape:
    return c
  if len(c_shape) == 1 and len(t_shape) > 1 and c_shape[0] == t_shape[0]:
    return jnp.reshape(c, c_shape + (1,) * (len(t_shape) - 1))
  raise ValueError(
    f"Select: condition of shape {c_shape} must be a scalar, a vector of "
    f"length {t_shape[0] if t_shape else '?'} or have the shape {tuple(t_shape)} "
    "of 't'"
  )


def _select_impl(condition, t, e):
  if t.shape != e.shape:
    raise ValueError(f"Select: 't' and 'e' must have the same shapes: {t.shape} vs {e.shape}")
  return jnp.where(_select_condition(condition, t.shape), t, e)


def _select_transpose(ct, c, t, e):
  zeros = tfops.ZerosLike(ct)
  return [
    None,
    tfops.Select(c, ct, zeros) if U(t) else None,
    tfops.Select(c, zeros, ct) if U(e) else None,
  ]


def _select_batch(args, dims):
  (c, t, e), (dc, dt, de) = args, dims
  t_shape = rules.unbatched_shape(t, dt)
  c_shape = rules.unbatched_shape(c, dc)
  if dc is not None:
    c = rules.to_front(c, dc)
    if c_shape != t_shape and len(c_shape) <= 1:
      ones = (1,) * (len(t_shape) - len(c_shape))
      c = tfops.Reshape(c, shape=(c.shape[0],) + c_shape + ones)
  elif c_shape != t_shape and len(c_shape) == 1:
    c = tfops.Reshape(c, shape=c_shape + (1,) * (len(t_shape) - 1))
  return tfops.SelectV2(c, rules.to_front(t, dt), rules.to_front(e, de)), 0


Select = register_op(
  "Select",
  _select_impl,
  family=FAMILY,
  jvp=(
    None,
    lambda g, c, t, e: tfops.Select(c, g, tfops.ZerosLike(e)),
    lambda g, c, t, e: tfops.Select(c, tfops.ZerosLike(t), g),
  ),
  transpose=_select_transpose,
  batching=_select_batch,
  spec=lambda st: st.Spec(_select_calls(st)),
)


def _select_v2_transpose(ct, c, t, e):
  zeros = tfops.ZerosLike(ct)
  return [
    None,
    rules.unbroadcast(tfops.SelectV2(c, ct, zeros), rules.shape_of(t)) if U(t) else None,
    rules.unbroadcast(tfops.SelectV2(c, zeros, ct), rules.shape_of(e)) if U(e) else None,
  ]


SelectV2 = register_op(
  "SelectV2",
  jnp.where,
  family=FAMILY,
  batching="elementwise",
  jvp=(
    None,
    lambda g, c, t, e: tfops.SelectV2(c, g, tfops.ZerosLike(e)),
    lambda g, c, t, e: tfops.SelectV2(c, tfops.ZerosLike(t), g),
  ),
  transpose=_select_v2_transpose,
  spec=lambda st: st.Spec(_select_v2_calls(st)),
)


# --- property-test strategies (hypothesis is imported lazily) ---------------------


def _select_calls(st):
  hst = lazy_hst()

  @st.composite
  def calls(draw):
    dtype = draw(st.dtypes(st.ALL))
    shape = draw(st.shapes())
    kind = draw(
      hst.sampled_from(["same", "scalar", "vector"] if len(shape) > 1 else ["same", "scalar"])
    )
    cshape = {"same": shape, "scalar": (), "vector": shape[:1]}[kind]
    return {
      "condition": draw(st.arrays("bool", cshape)),
      "t": draw(st.arrays(dtype, shape)),
      "e": draw(st.arrays(dtype, shape)),
    }

  return calls()


def _select_v2_calls(st):
  @st.composite
  def calls(draw):
    dtype = draw(st.dtypes(st.ALL))
    sc, st_, se = draw(st.broadcastable_shapes(3))
    return {
      "condition": draw(st.arrays("bool", sc)),
      "t": draw(st.arrays(dtype, st_)),
      "e": draw(st.arrays(dtype, se)),
    }

  return calls()
