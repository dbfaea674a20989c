"""Gathers by index vectors and v1 Gather: GatherNd, Gather.

``gather_nd_values`` is the nd gather (``indices [..., K]`` index the leading K
dims of ``params``) shared with ResourceGatherNd through ``tfops.GatherNd.impl``.
Out-of-range index vectors (negative ones included) give zeros, like TF's GPU
kernels and ``bad_indices_policy="IGNORE"``; TF's CPU kernels raise, which the
``check=`` of each op reproduces under ``runtime_checks`` (docs/semantics/array.md).

Rules are TF-named: the transpose of a gather is ``tf.ScatterNd`` (which drops the
out-of-range updates the gather zeroed), the tangent is the same gather of the
tangent, and batching re-binds the gather (``rules.gather_nd_batching``).
"""

from __future__ import annotations

import math

import jax.numpy as jnp
import numpy as np

from tfprims import rules
from tfprims.core import register_op, tfops
from tfprims.ops.array._common import FAMILY
from tfprims.ops.shared_specs import lazy_hst
from tfprims.rules import U

#: bad_indices_policy values TF accepts ("" and "DEFAULT" raise on CPU).
POLICIES = ("", "DEFAULT", "ERROR", "IGNORE")


def _policy(value) -> str:
  value = value.decode() if isinstance(value, bytes) else str(value)
  if value not in POLICIES:
    raise ValueError(f"bad_indices_policy must be one of {POLICIES}, got {value!r}")
  return value


def _dims(shape) -> str:
  return "[" + ",".join(str(int(d)) for d in shape) + "]"


def index_validity(indices, bounds):
  """``indices [n, K]`` -> boolean ``[n]``: every coordinate in ``[0, bounds[k])``."""
  if indices.shape[-1] == 0:
    return jnp.ones(indices.shape[:-1], bool)
  idx = indices.astype(jnp.int32) if indices.dtype.itemsize < 4 else indices
  return jnp.all((idx >= 0) & (idx < sizes_array(bounds, idx.dtype)), axis=-1)


def sizes_array(sizes, dtype):
  """Sizes as an index array: a numpy constant, or a value of the program where a size
  is a symbolic dim (a shape-polymorphic jax.export)."""
  sizes = rules.sizes(sizes)
  return rules.numpy_for(sizes).asarray(sizes, dtype)


def gather_nd_values(params, indices):
  """``params[indices[..., 0], ..., indices[..., K-1]]`` for every index vector;
  zeros for out-of-range vectors (and for any vector into an empty ``params``)."""
  k = indices.shape[-1] if indices.ndim else None
  if k is None:
    raise ValueError("GatherNd: indices must be at least a vector")
  if k > params.ndim:
    raise ValueError(
      f"GatherNd: index innermost dimension length must be <= params rank; "
      f"saw: {k} vs. {params.ndim}"
    )
  lead, tail = tuple(indices.shape[:-1]), tuple(params.shape[k:])
  n = math.prod(lead)
  if n == 0 or params.size == 0 or math.prod(tail) == 0:
    return jnp.zeros(lead + tail, params.dtype)
  if k == 0:
    return jnp.broadcast_to(params, lead + tail)
  idx = jnp.reshape(indices, (n, k))
  valid = index_validity(idx, params.shape[:k])
  safe = jnp.where(valid[:, None], idx, jnp.zeros((), idx.dtype))
  out = params[tuple(safe[:, j] for j in range(k))]
  out = jnp.where(jnp.reshape(valid, (n,) + (1,) * len(tail)), out, jnp.zeros((), out.dtype))
  return jnp.reshape(out, lead + tail)


def gather_nd_check(params, indices, **_):
  """TF's CPU check: every index vector addresses params (which must not be empty)."""
  k = indices.shape[-1]
  n = math.prod(indices.shape[:-1])
  if n and params.size == 0:
    return (
      jnp.asarray(True),
      f"Requested more than 0 entries, but params is empty.  Params shape: {_dims(params.shape)}",
    )
  valid = index_validity(jnp.reshape(indices, (n, k)), params.shape[:k])
  return ~jnp.all(valid), (
    f"indices[i] = [...] does not index into param shape {_dims(params.shape)}"
  )


# --- GatherNd -----------------------------------------------------------------------


def _gather_nd_impl(params, indices, *, bad_indices_policy):
  _policy(bad_indices_policy)
  return gather_nd_values(params, indices)


def _gather_nd_check(params, indices, *, bad_indices_policy):
  if _policy(bad_indices_policy) == "IGNORE":
    return jnp.asarray(False), ""
  return gather_nd_check(params, indices)


def _gather_nd_transpose(ct, params, indices, *, bad_indices_policy):
  assert U(params) and not U(indices)
  return [
    tfops.ScatterNd(
      indices, rules.instantiate(ct), shape=rules.shape_of(params), bad_indices_policy=""
    ),
    None,
  ]


GatherNd = register_op(
  "GatherNd",
  _gather_nd_impl,
  family=FAMILY,
  attrs=("bad_indices_policy",),
  jvp=(
    lambda t, p, i, *, bad_indices_policy: tfops.GatherNd(
      t, i, bad_indices_policy=bad_indices_policy
    ),
    None,
  ),
  transpose=_gather_nd_transpose,
  batching=rules.per_op(rules.gather_nd_batching),
  check=_gather_nd_check,
  spec=lambda st: st.Spec(
    st.nd_gather_calls(("int32", "int64")),
    note="int16 indices (TF's GatherNd takes them, its gradient does not) are "
    "tested in tests/test_gather_scatter.py",
  ),
)


# --- Gather (v1: axis 0, no batch dims) ----------------------------------------------


def _gather_impl(params, indices, *, validate_indices):
  """GatherV2 on axis 0 (``validate_indices`` is ignored: TF's CPU kernel always
  validates); out-of-range indices give zeros."""
  if params.ndim == 0:
    raise ValueError("Gather: params must be at least 1 dimensional")
  return gather_nd_values(params, jnp.expand_dims(indices, -1))


def _gather_check(params, indices, *, validate_indices):
  n = params.shape[0]
  bad = jnp.any((indices < 0) | (indices >= n)) if indices.size else jnp.asarray(False)
  return bad, f"indices[i] = ... is not in [0, {n})"


def _gather_transpose(ct, params, indices, *, validate_indices):
  assert U(params) and not U(indices)
  return [
    tfops.ScatterNd(
      tfops.ExpandDims(indices, axis=-1),
      rules.instantiate(ct),
      shape=rules.shape_of(params),
      bad_indices_policy="",
    ),
    None,
  ]


def _gather_batch(args, dims, *, validate_indices):
  (p, i), (dp, di) = args, dims
  if dp is None:  # indices only: leading index dims
    return tfops.Gather(p, rules.to_front(i, di), validate_indices=validate_indices), 0
  if di is None:  # params only: the batch axis rides along as a row dim
    return (
      tfops.Gather(rules.move_axes(p, [dp], [1]), i, validate_indices=validate_indices),
      np.ndim(i),
    )
  return tfops.GatherV2(rules.to_front(p, dp), rules.to_front(i, di), axis=1, batch_dims=1), 0


Gather = register_op(
  "Gather",
  _gather_impl,
  family=FAMILY,
  attrs=("validate_indices",),
  jvp=(
    lambda t, p, i, *, validate_indices: tfops.Gather(t, i, validate_indices=validate_indices),
    None,
  ),
  transpose=_gather_transpose,
  batching=_gather_batch,
  check=_gather_check,
  spec=lambda st: st.Spec(_gather_calls(st)),
)


# --- property-test strategies (hypothesis is imported lazily) ---------------------


def _gather_calls(st):
  hst = lazy_hst()

  @st.composite
  def calls(draw):
    params = draw(st.arrays(st.dtypes(st.ALL), st.shapes(min_rank=1, max_rank=3)))
    n = params.shape[0]
    ishape = tuple(draw(st.shapes(max_rank=2, max_side=3)))
    if n == 0:
      ishape = (0,) + ishape[1:]
    indices = draw(
      st.arrays(st.dtypes(("int32", "int64")), ishape, min_value=0, max_value=max(n - 1, 0))
    )
    return {"params": params, "indices": indices, "validate_indices": draw(hst.booleans())}

  return calls()
