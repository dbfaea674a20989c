"""Sorting and selection: TopKV2, NthElement, ApproxTopK, InTopK, InTopKV2.

``tf.sort``, ``tf.argsort`` and ``tf.math.top_k`` lower to TopKV2. ``k`` and
NthElement's ``n`` are static. Order: larger first, ties by the lower index,
``-0.0`` equal to ``0.0``. TF's CPU kernels compare with ``<``, which is no order
with NaN: rows with NaN take TF's own steps (:mod:`tfprims.ops.nn.cpu_sort`, under a
``lax.cond`` on "some row has NaN"), so NaNs of either sign and the values around
them land where TF puts them; ``k == 1`` follows TF's Eigen maximum on every row
(docs/semantics/nn.md). ``sorted=False`` returns TF's ``sorted=True`` order (the same
elements; TF's own order is its heap's).

The gradient of TopKV2 and ApproxTopK puts the cotangent back at the selected
positions, as TF's (a ``scatter_nd``). Here the tangent is written so that its
transpose is a gather: each input position's place in the output (or an
out-of-range row) is built with ``tf.DynamicStitch``, the tangent is a
``tf.DynamicStitch`` of the input tangent by those places, and its transpose is
``tf.GatherV2`` (:func:`take_last_axis`). NthElement's derivative is TF's (the
cotangent shared among the elements equal to the result). InTopK/InTopKV2 have no
derivative. Batching re-binds the ops with the batch axis in front (the ops act
on the last axis or on rows).
"""

from __future__ import annotations

import math

import jax.numpy as jnp
import numpy as np
from jax import lax
from jax.interpreters import ad

from tfprims import config
from tfprims import dtypes as tfdtypes
from tfprims import rules
from tfprims.core import register_op, tfops
from tfprims.ops.nn import cpu_sort
from tfprims.errors import import_tensorflow

FAMILY = "nn"
_REAL = (
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


def _int(value) -> int:
  return int(np.asarray(value).reshape(()))


def _size(value):
  """A static size param: an int, or a symbolic dim of a jax.export (a shape's)."""
  (size,) = rules.sizes(value)
  return size


def _key(x):
  """What is compared: -0.0 made 0.0 (TF's ``<`` ties them) and every NaN the same
  positive NaN (above +inf in XLA's total order)."""
  if not jnp.issubdtype(x.dtype, jnp.floating):
    return x
  x = jnp.where(x == 0, jnp.zeros((), x.dtype), x)
  return jnp.where(jnp.isnan(x), jnp.array(np.nan, x.dtype), x)


def top_k_indices(x, k):
  """Indices of the ``k`` largest along the last axis, in order, ties by the lower
  index; NaN is above +inf (TF's order where ``<`` is one: rows without NaN). ``k``
  may be a symbolic dim of a jax.export (``tf.sort`` along the batch axis is a
  TopKV2 of all of it): a sort, then."""
  n, last = x.shape[-1], x.ndim - 1
  if rules.known((k, n)) and (k == 0 or n == 0):
    return jnp.zeros(x.shape[:-1] + (k,), np.int32)
  if rules.known((k,)):
    return lax.top_k(_key(x), k)[1]
  # keys descending, ties by the lower index: (key, -index) ascending, reversed
  iota = lax.broadcasted_iota(np.int32, x.shape, last)
  _, neg = lax.sort((_key(x), -iota), dimension=last, num_keys=2)
  idx = lax.rev(-neg, (last,))
  return idx if k == n else lax.slice_in_dim(idx, 0, k, axis=last)


def _check_k(k, shape) -> None:
  if len(shape) < 1:
    raise ValueError(f"input must be >= 1-D, got shape {list(shape)}")
  if not rules.known((k, shape[-1])):  # symbolic (jax.export): TF's to check as it runs
    return
  if k < 0:
    raise ValueError(f"Need k >= 0, got {k}")
  if shape[-1] < k:
    raise ValueError(f"input must have at least k columns. Had {shape[-1]}, needed {k}")


def take_last_axis(t, idx):
  """``t[..., idx]`` along the last axis for indices distinct within each row (the
  tangent of a top-k), written so that its transpose is ``tf.GatherV2``.

  Rows flattened: ``q[p]`` is the output place of input position ``p``, or
  ``R * k`` (dropped) when ``p`` is not selected, built by ``tf.DynamicStitch``;
  then ``out = tf.DynamicStitch(q, t)`` (linear in ``t``) and the transpose of that
  is ``tf.GatherV2(ct, q)``, whose out-of-range places read zeros.
  """
  shape = rules.shape_of(t)
  n, k = shape[-1], rules.shape_of(idx)[-1]
  if not rules.known(shape):
    # A symbolic row count (jax.export) has no stitch table: a batched gather, whose
    # transpose is a scatter.
    return tfops.GatherV2(t, idx, axis=len(shape) - 1, batch_dims=len(shape) - 1)
  rows = math.prod(shape[:-1])
  if rows * n == 0 or k == 0:
    return rules.zeros(shape[:-1] + (k,), rules.dtype_of(t))
  if rules.dtype_of(idx) != np.int32:
    idx = tfops.Cast(idx, DstT=np.dtype(np.int32), Truncate=False)
  starts = (np.arange(rows, dtype=np.int32) * n)[:, None]
  pos = tfops.AddV2(rules.reshape(idx, (rows, k)), starts)
  places = tfops.DynamicStitch(
    np.arange(rows * n, dtype=np.int32),
    pos,
    np.full((rows * n,), rows * k, np.int32),
    np.arange(rows * k, dtype=np.int32).reshape(rows, k),
    size=rows * n,
  )
  out = tfops.DynamicStitch(places, rules.reshape(t, (rows * n,)), size=rows * k)
  return rules.reshape(out, shape[:-1] + (k,))


# --- TopKV2 -------------------------------------------------------------------------------


def tf_top_k_indices(x, k):
  """TopKV2's indices as TF's CPU kernel gives them: :func:`top_k_indices` where
  ``<`` is an order; for float rows with NaN, TF's own algorithm
  (:mod:`~tfprims.ops.nn.cpu_sort`); ``k == 1``: TF's Eigen maximum. A symbolic
  ``k`` or row length (jax.export) takes :func:`top_k_indices`."""
  n = x.shape[-1]
  if not jnp.issubdtype(x.dtype, jnp.floating) or not rules.known((k, n)) or k == 0:
    return top_k_indices(x, k)
  if k == 1:
    return cpu_sort.top_1(x)[..., None]
  if not config.get_config("tf_nan_order"):
    return top_k_indices(x, k)
  need = jnp.any(jnp.isnan(x), axis=-1)
  return cpu_sort.top_k_rows(x, k, top_k_indices(x, k), need)


def _top_k_impl(input, *, k, sorted, index_type):
  """The ``k`` largest along the last axis and their indices, larger first, ties by
  the lower index, rows with NaN as TF's CPU kernel leaves them (``sorted=False``
  gives the same order)."""
  k = _size(k)
  _check_k(k, input.shape)
  idx = tf_top_k_indices(input, k)
  values = jnp.zeros(idx.shape, input.dtype) if k == 0 else jnp.take_along_axis(input, idx, axis=-1)
  return values, idx.astype(tfdtypes.canonical_dtype(index_type))


def _top_k_canonicalize(params, input, *_):
  params = dict(params, k=_size(params["k"]))
  _check_k(params["k"], np.shape(input))
  return params


def _top_k_jvp(primals, tangents, **params):
  (x,), (t,) = primals, tangents
  values, idx = tfops.TopKV2(x, **params)
  if type(t) is ad.Zero:
    return [values, idx], [rules.zero_tangent(values), rules.zero_tangent(idx)]
  return [values, idx], [take_last_axis(t, idx), rules.zero_tangent(idx)]


def _last_axis_batching(op):
  """For ops on the last axis: the batch axis in front, the op re-bound."""

  def rule(args, dims, **params):
    (x,), (d,) = args, dims
    if d == np.ndim(x) - 1:
      x, d = rules.move_axes(x, [d], [0]), 0
    out = op(x, **params)
    return (out, [d] * len(out)) if isinstance(out, (list, tuple)) else (out, d)

  return rule


TopKV2 = register_op(
  "TopKV2",
  _top_k_impl,
  family=FAMILY,
  static=("k",),
  attrs=("sorted", "index_type"),
  multiple_results=True,
  canonicalize=_top_k_canonicalize,
  jvp=_top_k_jvp,
  batching=rules.per_op(_last_axis_batching),
  spec=lambda st: st.Spec(
    _top_k_calls(st),
    oracle=_sorted_top_k_oracle,
    note="sorted=False compared with TF's sorted=True result (checked to hold the same elements)",
  ),
)


# --- NthElement ---------------------------------------------------------------------------


def _nth_impl(input, *, n, reverse):
  """The ``n``-th smallest (``reverse``: largest) value along the last axis; rows
  with NaN, or whose result is a zero of a sign the row has both of, as TF's
  ``std::nth_element`` leaves them."""
  n = _int(n)
  if n < 0:
    raise ValueError(f"n must be non-negative but is {n}")
  if input.ndim < 1:
    raise ValueError(f"input must be at least rank 1 but is rank {input.ndim}")
  if input.shape[-1] <= n:
    raise ValueError(f"Input must have last dimension > n = {n}")
  pos = input.shape[-1] - 1 - n if reverse else n
  fast = lax.sort(input, dimension=input.ndim - 1)[..., pos]
  if not jnp.issubdtype(input.dtype, jnp.floating) or not config.get_config("tf_nan_order"):
    return fast
  zero = input == 0
  neg = jnp.signbit(input)
  mixed = jnp.any(zero & neg, axis=-1) & jnp.any(zero & ~neg, axis=-1)
  need = jnp.any(jnp.isnan(input), axis=-1) | (mixed & (fast == 0))
  return cpu_sort.nth_rows(input, pos, fast, need)


def _nth_jvp(t, x, *, n, reverse):
  """TF's gradient: the tangent averaged over the elements equal to the result."""
  axis = np.ndim(x) - 1
  y = tfops.NthElement(x, n=n, reverse=reverse)
  eq = tfops.Equal(tfops.ExpandDims(y, axis=axis), x, incompatible_shape_error=True)
  ind = tfops.Cast(eq, DstT=rules.dtype_of(x), Truncate=False)
  weights = tfops.RealDiv(ind, tfops.Sum(ind, axis=(axis,), keep_dims=True))
  return tfops.Sum(tfops.Mul(t, weights), axis=(axis,), keep_dims=False)


NthElement = register_op(
  "NthElement",
  _nth_impl,
  family=FAMILY,
  static=("n",),
  attrs=("reverse",),
  canonicalize=lambda params, *_: dict(params, n=_int(params["n"])),
  jvp=(_nth_jvp,),
  batching=rules.per_op(_last_axis_batching),
  spec=lambda st: st.Spec(_nth_calls(st), examples=0.5),
)


# --- ApproxTopK ---------------------------------------------------------------------------


def _approx_axis(reduction_dimension, rank) -> int:
  d = int(reduction_dimension)
  if not -rank <= d < rank:
    raise ValueError(f"reduction_dimension {d} is out of range for rank {rank}")
  return d % rank


def _approx_impl(
  input,
  *,
  k,
  reduction_dimension,
  recall_target,
  is_max_k,
  reduction_input_size_override,
  aggregate_to_topk,
):
  """The exact top (or bottom, ``is_max_k=False``: the top of ``-input``) ``k`` along
  ``reduction_dimension``, as TopKV2 (TF's CPU kernel of ApproxTopK is TopKV2's,
  NaN included); the approximation attrs are accepted and ignored (an exact answer
  is a valid one)."""
  d = _approx_axis(reduction_dimension, input.ndim)
  x = jnp.moveaxis(input, d, -1)
  _check_k(k, x.shape)
  idx = tf_top_k_indices(x if is_max_k else -x, k)
  values = jnp.take_along_axis(x, idx, axis=-1)
  return jnp.moveaxis(values, -1, d), jnp.moveaxis(idx, -1, d)


def _approx_jvp(primals, tangents, **params):
  (x,), (t,) = primals, tangents
  values, idx = tfops.ApproxTopK(x, **params)
  if type(t) is ad.Zero:
    return [values, idx], [rules.zero_tangent(values), rules.zero_tangent(idx)]
  d = _approx_axis(params["reduction_dimension"], np.ndim(x))
  last = np.ndim(x) - 1
  out = take_last_axis(rules.move_axes(t, [d], [last]), rules.move_axes(idx, [d], [last]))
  return [values, idx], [rules.move_axes(out, [last], [d]), rules.zero_tangent(idx)]


def _approx_batch(args, dims, *, reduction_dimension, **params):
  (x,), (d,) = args, dims
  axis = _approx_axis(reduction_dimension, np.ndim(x) - 1)
  out = tfops.ApproxTopK(rules.to_front(x, d), reduction_dimension=axis + 1, **params)
  return out, [0, 0]


ApproxTopK = register_op(
  "ApproxTopK",
  _approx_impl,
  family=FAMILY,
  multiple_results=True,
  attrs=(
    "k",
    "reduction_dimension",
    "recall_target",
    "is_max_k",
    "reduction_input_size_override",
    "aggregate_to_topk",
  ),
  jvp=_approx_jvp,
  batching=_approx_batch,
  spec=lambda st: st.Spec(
    _approx_calls(st),
    oracle=_approx_oracle,
    note="exact, as TopKV2; TF's CPU kernel only takes is_max_k=True on the last "
    "dimension, other calls are compared with TopKV2",
  ),
)


# --- InTopK, InTopKV2 ---------------------------------------------------------------------


def _in_top_k(predictions, targets, k):
  """Whether each target's prediction is among the ``k`` largest of its row (ties
  count for the target); False for targets out of range and rows with a non-finite
  prediction, as TF's kernel."""
  if predictions.ndim != 2:
    raise ValueError("predictions must be 2-dimensional")
  if targets.ndim != 1:
    raise ValueError("targets must be 1-dimensional")
  rows, classes = predictions.shape
  if targets.shape[0] != rows:
    raise ValueError(
      f"First dimension of predictions {rows} must match length of targets {targets.shape[0]}"
    )
  if classes == 0:
    return jnp.zeros((rows,), bool)
  valid = (targets >= 0) & (targets < classes)
  safe = jnp.where(valid, targets, jnp.zeros((), targets.dtype)).astype(np.int32)
  target = jnp.take_along_axis(predictions, safe[:, None], axis=1)
  finite = jnp.all(jnp.isfinite(predictions), axis=1)
  larger = jnp.sum(predictions > target, axis=1, dtype=np.int32)
  return valid & finite & (larger.astype(jnp.result_type(k)) < k)


def _in_top_k_batch(op):
  """[V, B, C] predictions and [V, B] targets merged into V * B rows."""

  def rule(args, dims, **params):
    size = rules.batch_size(args, dims)
    if len(args) == 3 and dims[2] is not None:
      # A k per example: no single InTopKV2 call computes that.
      return rules.vmap_batching(_in_top_k, False)(args, dims, **params)
    p = rules.with_batch_axis(args[0], dims[0], size)
    t = rules.with_batch_axis(args[1], dims[1], size)
    rows = p.shape[1]
    out = op(
      rules.reshape(p, (size * rows, p.shape[2])),
      rules.reshape(t, (size * rows,)),
      *args[2:],
      **params,
    )
    return rules.reshape(out, (size, rows)), 0

  return rule


_NO_GRAD = "boolean output (TF declares no gradient)"

InTopK = register_op(
  "InTopK",
  lambda predictions, targets, *, k: _in_top_k(predictions, targets, k),
  doc=_in_top_k.__doc__,
  family=FAMILY,
  attrs=("k",),
  jvp=rules.per_op(rules.no_grad_jvp),
  batching=rules.per_op(_in_top_k_batch),
  spec=lambda st: st.Spec(_in_top_k_calls(st, v2=False), skip={"jvp": _NO_GRAD, "vjp": _NO_GRAD}),
)

InTopKV2 = register_op(
  "InTopKV2",
  _in_top_k,
  family=FAMILY,
  jvp=rules.per_op(rules.no_grad_jvp),
  batching=rules.per_op(_in_top_k_batch),
  spec=lambda st: st.Spec(_in_top_k_calls(st, v2=True), skip={"jvp": _NO_GRAD, "vjp": _NO_GRAD}),
)


# --- property-test strategies and oracles (hypothesis and TF are imported lazily) -----


def _hst():
  from hypothesis import strategies as hst

  return hst


_NEG_NAN = float(np.copysign(np.nan, -1.0))

# Where TF's CPU kernels part from a sort: NaN of both signs beside larger and smaller
# values, ±0.0 (equal), ±inf and ties.
_EDGES = [1.0, np.nan, 2.0, _NEG_NAN, 0.0, -0.0, np.inf, -np.inf, 1.0, -1.0]


def _ties(draw, st, dtype, shape, nan=False):
  """Values of ``dtype``, mostly with many ties. Floats: a permutation of
  :data:`_EDGES` (repeated to the size; the first examples Hypothesis draws take
  it), values drawn from it, or any values; NaN only if ``nan``."""
  hst = _hst()
  size = math.prod(shape)
  mode = draw(hst.sampled_from(["edges", "pool", "any"])) if st.is_float(dtype) else "any"
  if mode != "any":
    pool = [v for v in _EDGES if nan or not np.isnan(v)]
    vals = (
      draw(hst.permutations((pool * size)[:size]))
      if mode == "edges"
      else draw(hst.lists(hst.sampled_from(pool), min_size=size, max_size=size))
    )
    return np.asarray(vals, np.float32).astype(dtype).reshape(shape)
  if st.kind(dtype) in "iu" and draw(hst.booleans()):
    vals = draw(hst.lists(hst.integers(0, 3), min_size=size, max_size=size))
    return np.asarray(vals).astype(dtype).reshape(shape)
  kw = {} if nan or not st.is_float(dtype) else {"allow_nan": False}
  if st.kind(dtype) in "iu" and dtype.itemsize == 8:
    kw = {"min_value": 0 if st.kind(dtype) == "u" else -(2**31), "max_value": 2**31 - 1}
  return draw(st.arrays(dtype, shape, **kw))


def _row_shape(draw, st):
  """A shape of rank >= 1, its rows mostly 3 to 5 long (where TF's kernels take
  their different paths: k == 1, 1 < k < n, k == n)."""
  hst = _hst()
  shape = list(
    draw(st.shapes(min_rank=1, max_rank=3, min_side=draw(hst.sampled_from([1, 1, 1, 0]))))
  )
  if shape[-1] and not draw(hst.booleans()):
    shape[-1] = draw(hst.integers(3, 5))
  return tuple(shape)


def _top_k_calls(st):
  hst = _hst()

  @st.composite
  def calls(draw):
    dtype = draw(st.dtypes(draw(hst.sampled_from([st.FLOATS, st.FLOATS, _REAL]))))
    shape = _row_shape(draw, st)
    x = _ties(draw, st, dtype, shape, nan=True)
    n = shape[-1]
    k = draw(hst.sampled_from([n, min(n, 2), min(n, 1), 0, max(n - 1, 0)]))
    # TF's gradient fails for index_type other than int32 (and for no columns).
    index_type = draw(hst.sampled_from(["int32", "int32", "int32", "int16", "int64"]))
    return {
      "input": x,
      "k": np.asarray(k, draw(st.dtypes(("int16", "int32", "int64")))),
      "sorted": draw(hst.booleans()),
      "index_type": np.dtype(index_type),
    }

  return calls()


def _sorted_top_k_oracle(input, k, sorted=True, index_type=np.dtype("int32")):
  """TF's TopKV2 with ``sorted=True``; for ``sorted=False`` (its CPU kernel then
  returns its heap's order) after checking that TF selects the same elements."""
  tf = import_tensorflow()
  values, indices = tf.raw_ops.TopKV2(input=input, k=k, sorted=True, index_type=index_type)
  if not sorted:
    _, unsorted = tf.raw_ops.TopKV2(input=input, k=k, sorted=False, index_type=index_type)
    if not np.array_equal(np.sort(unsorted.numpy(), -1), np.sort(indices.numpy(), -1)):
      raise AssertionError("TF's TopKV2 selects other elements with sorted=False")
  return values, indices


def _nth_calls(st):
  hst = _hst()

  @st.composite
  def calls(draw):
    dtype = draw(st.dtypes(draw(hst.sampled_from([st.FLOATS, st.FLOATS, _REAL]))))
    shape = list(_row_shape(draw, st))
    shape[-1] = max(shape[-1], 1)
    x = _ties(draw, st, dtype, tuple(shape), nan=True)
    return {
      "input": x,
      "n": np.int32(draw(hst.integers(0, shape[-1] - 1))),
      "reverse": draw(hst.booleans()),
    }

  return calls()


def _approx_calls(st):
  hst = _hst()

  @st.composite
  def calls(draw):
    dtype = draw(st.dtypes(("float16", "bfloat16", "float32")))
    shape = tuple(draw(st.shapes(min_rank=1, min_side=draw(hst.sampled_from([1, 1, 1, 0])))))
    rank = len(shape)
    dim = draw(hst.one_of(hst.just(-1), hst.integers(-rank, rank - 1)))
    is_max_k = draw(hst.booleans())
    x = _ties(draw, st, dtype, shape, nan=True)
    return {
      "input": x,
      "k": draw(hst.integers(0, shape[dim])),
      "reduction_dimension": dim,
      "is_max_k": is_max_k,
      "recall_target": draw(hst.sampled_from([0.95, 0.5, 1.0])),
      "reduction_input_size_override": draw(hst.sampled_from([-1, 100])),
      "aggregate_to_topk": draw(hst.booleans()),
    }

  return calls()


def _approx_oracle(input, k, reduction_dimension=-1, is_max_k=True, **attrs):
  """TF's ApproxTopK where its CPU kernel exists (max-k on the last dimension),
  else TopKV2 of the input (negated for min-k) with the dimension moved last."""
  tf = import_tensorflow()
  rank = len(input.shape)
  d = reduction_dimension % rank
  if is_max_k and reduction_dimension == -1:
    return tf.raw_ops.ApproxTopK(
      input=input, k=k, reduction_dimension=reduction_dimension, is_max_k=True, **attrs
    )
  perm = [i for i in range(rank) if i != d] + [d]
  inverse = list(np.argsort(perm))
  x = tf.transpose(input, perm)
  values, indices = tf.raw_ops.TopKV2(input=x if is_max_k else -x, k=k)
  if not is_max_k:
    values = -values
  return tf.transpose(values, inverse), tf.transpose(indices, inverse)


def _in_top_k_calls(st, v2):
  hst = _hst()

  @st.composite
  def calls(draw):
    rows, classes = draw(hst.integers(0, 4)), draw(hst.integers(0, 5))
    p = _ties(draw, st, np.dtype("float32"), (rows, classes), nan=True)
    tdtype = draw(st.dtypes(("int32", "int64")))
    targets = np.asarray(
      draw(hst.lists(hst.integers(-1, classes), min_size=rows, max_size=rows)), tdtype
    )
    k = draw(hst.integers(-1, classes + 1))
    return {"predictions": p, "targets": targets, "k": np.asarray(k, tdtype) if v2 else k}

  return calls()
