"""Segment reductions: SegmentSum, SegmentMean, SegmentMin, SegmentMax, SegmentProd
(sorted ids) and UnsortedSegmentSum, UnsortedSegmentMin, UnsortedSegmentMax,
UnsortedSegmentProd.

The sorted ops have as many segments as their last id + 1, so their ``segment_ids``
are static (``tf.SegmentSum[segment_ids=(0, 0, 2)]``): traced ids raise
``StaticInputError``; use the Unsorted op with ``num_segments`` for ids computed at
run time. TF's checks of those ids (a sorted, non-negative vector with one id per
row) raise at trace time, as TF raises at run time. The Unsorted ops take ids of
any shape that prefixes the data's; ``num_segments`` is static. Negative ids are
dropped, as in TF; ids >= num_segments (TF's CPU kernel raises) are dropped too,
and ``runtime_checks`` raises like TF.

Empty segments hold TF's values: 0 for the sorted ops (min and max included) and
the sums, 1 for the products, the dtype's highest/lowest finite value for
UnsortedSegmentMin/Max. NaN in min/max follows TF's CPU loop
(``scatter_extremum``). docs/semantics/array.md has the details.

Rules are TF-named: the transposes of SegmentSum/UnsortedSegmentSum are
``tf.GatherV2``; SegmentMean divides by the (static) counts first; Min/Max route
the tangent to the rows equal to the result, ties sharing it evenly; Prod is TF's
gradient (a segment with one zero sends the product of the others to it, two zeros
nothing; for complex data TF omits the conjugation and so do we). Batching moves
a batch of data next to the segment axis; batched ids are offset per example into
``num_segments * batch`` segments.
"""

from __future__ import annotations

import math

import jax.numpy as jnp
import numpy as np
from jax.interpreters import ad

from tfprims import rules
from tfprims.core import register_op, tfops
from tfprims.ops.array import _segment_common as C
from tfprims.ops.array._common import FAMILY
from tfprims.ops.array._segment_specs import draw_data, draw_sorted_ids, inner_shape
from tfprims.ops.shared import scalar_int
from tfprims.ops.shared_specs import lazy_hst

# --- sorted segment ids (static) ------------------------------------------------------------


def _sorted_setup(data, segment_ids):
  if data.ndim < 1:
    raise ValueError("input must be at least rank 1")
  ids = C.static_ids(segment_ids)
  num = C.check_sorted_ids(ids, data.shape[0])
  return ids, num


def _sorted_impl(kind):
  def impl(data, *, segment_ids):
    ids, num = _sorted_setup(data, segment_ids)
    idx = jnp.asarray(C.ids_constant(ids))
    if kind == "prod":
      return C.scatter_prod(data, idx, num, sorted_ids=True)
    counts = np.bincount(ids, minlength=num)[:num]
    if kind in ("sum", "mean"):
      # TF's kernel copies a one-row segment and reduces longer ones from +0.0.
      s = C.scatter_sum(data, idx, num, sorted_ids=True, first=counts == 1)
      return s if kind == "sum" else C.divide_by_count(s, jnp.asarray(counts))
    out = C.scatter_extremum(data, idx, num, kind, sorted_kernel=True)
    empty = (counts == 0).reshape((num,) + (1,) * (data.ndim - 1))
    return jnp.where(empty, np.zeros((), data.dtype), out)

  impl.__doc__ = {
    "sum": "Sums of the rows of each segment (sorted, static ids); empty segments 0.",
    "mean": "Means of the rows of each segment (integers: truncating); empty segments 0.",
    "min": "Minimum of the rows of each segment; empty segments 0 (TF's CPU kernel).",
    "max": "Maximum of the rows of each segment; empty segments 0 (TF's CPU kernel).",
    "prod": "Products of the rows of each segment; empty segments 1.",
  }[kind]
  return impl


def _sorted_gather(ct, segment_ids):
  return tfops.GatherV2(ct, C.ids_constant(C.static_ids(segment_ids)), axis=0, batch_dims=0)


def _segment_sum_transpose(ct, data, *, segment_ids):
  return [_sorted_gather(ct, segment_ids)]


def _segment_mean_transpose(ct, data, *, segment_ids):
  ids = C.static_ids(segment_ids)
  num = int(ids[-1]) + 1 if ids.size else 0
  counts = np.maximum(np.bincount(ids, minlength=num)[:num], 1)
  counts = counts.reshape((num,) + (1,) * (len(rules.shape_of(ct)) - 1))
  return [_sorted_gather(tfops.RealDiv(ct, counts.astype(rules.dtype_of(ct))), segment_ids)]


def _sorted_batching(op):
  """The batch axis goes right after the segment axis (the ids stay as they are),
  and back to the front of the result, where the next op's batching rule wants it."""

  def rule(args, dims, *, segment_ids):
    (x,), (d,) = args, dims
    out = op(rules.move_axes(x, [d], [1]), segment_ids=segment_ids)
    return rules.move_axes(out, [1], [0]), 0

  return rule


# --- unsorted segment ids -----------------------------------------------------------------


def _unsorted_setup(data, segment_ids, num_segments):
  num = scalar_int(num_segments)
  if num < 0:
    raise ValueError(f"Input num_segments == {num} must not be negative.")
  k = segment_ids.ndim
  if tuple(data.shape[:k]) != tuple(segment_ids.shape):
    raise ValueError(
      f"data.shape = {list(data.shape)} does not start with "
      f"segment_ids.shape = {list(segment_ids.shape)}"
    )
  n = math.prod(segment_ids.shape)
  x = jnp.reshape(data, (n,) + data.shape[k:])
  return x, C.drop_invalid(jnp.reshape(segment_ids, (n,)), num), num


def _unsorted_impl(kind):
  def impl(data, segment_ids, *, num_segments):
    x, idx, num = _unsorted_setup(data, segment_ids, num_segments)
    if kind == "sum":
      return C.scatter_sum(x, idx, num)
    if kind == "prod":
      return C.scatter_prod(x, idx, num)
    return C.scatter_extremum(x, idx, num, kind, sorted_kernel=False)

  impl.__doc__ = {
    "sum": "Sums of the entries of each segment (ids of any shape prefixing the data's; "
    "negative and out-of-range ids dropped); empty segments 0.",
    "prod": "Products of the entries of each segment; empty segments 1.",
    "min": "Minimum of each segment; empty segments the dtype's highest finite value.",
    "max": "Maximum of each segment; empty segments the dtype's lowest finite value.",
  }[kind]
  return impl


def _unsorted_check(data, segment_ids, *, num_segments):
  """TF's CPU kernels raise on ids >= num_segments (negative ones are dropped)."""
  num = scalar_int(num_segments)
  return (
    jnp.any(segment_ids >= num),
    f"segment_ids out of range: an id is >= num_segments = {num} (out of range [0, {num}))",
  )


def _unsorted_sum_transpose(ct, data, segment_ids, *, num_segments):
  if not rules.U(data):
    return [None, None]
  # GatherV2 gives zeros for negative and out-of-range ids: what was dropped gets none.
  return [tfops.GatherV2(ct, segment_ids, axis=0, batch_dims=0), None]


def _unsorted_batching(op):
  """A batch of data goes after the ids' axes (and to the front of the result);
  batched ids are offset per example into ``num_segments * batch`` segments, and the
  result reshaped."""

  def rule(args, dims, *, num_segments):
    (x, ids), (dx, di) = args, dims
    num = scalar_int(num_segments)
    if di is None:
      out = op(rules.move_axes(x, [dx], [ids.ndim]), ids, num_segments=num)
      return rules.move_axes(out, [1], [0]), 0
    size = rules.batch_size(args, dims)
    ids_b = C.offset_ids(ids, di, size, num, num)
    out = op(rules.with_batch_axis(x, dx, size), ids_b, num_segments=size * num)
    return rules.reshape(out, (size, num) + tuple(out.shape[1:])), 0

  return rule


# --- shared derivative rules (segment_ids static or an operand) -------------------------------


class _Seg:
  """The TF ops of one family (sorted or unsorted) as the JVP rules need them:
  ``reduce(kind, x)`` (Segment<Kind> / UnsortedSegment<Kind>), ``gather(v)`` (a
  segment's value to each of its rows; zeros for dropped rows) and ``valid``
  (the rows that count, or None)."""

  def __init__(self, ids_operand, params):
    self.params = params
    self.sorted = ids_operand is None
    if self.sorted:
      self.ids = C.ids_constant(C.static_ids(params["segment_ids"]))
    else:
      self.ids = ids_operand

  def reduce(self, kind, x):
    if self.sorted:
      return getattr(tfops, f"Segment{kind}")(x, **self.params)
    return getattr(tfops, f"UnsortedSegment{kind}")(x, self.ids, **self.params)

  def gather(self, v):
    return tfops.GatherV2(v, self.ids, axis=0, batch_dims=0)

  def valid(self, x):
    if self.sorted:
      return None
    ids = self.ids
    dtype = rules.dtype_of(ids)
    num = scalar_int(self.params["num_segments"])
    ok = tfops.LogicalAnd(
      tfops.GreaterEqual(ids, np.zeros((), dtype)), tfops.Less(ids, np.array(num, dtype))
    )
    shape = rules.shape_of(ids)
    return rules.reshape(ok, shape + (1,) * (len(rules.shape_of(x)) - len(shape)))


def _split_args(primals, tangents, sorted_ids):
  if sorted_ids:
    (x,), (t,) = primals, tangents
    return x, None, t
  (x, ids), (t, _) = primals, tangents
  return x, ids, t


def _extremum_jvp(op, sorted_ids):
  """TF's Min/Max gradient: the tangent of a segment is the mean of the tangents of
  its rows equal to the result (``Equal``, ``SegmentSum`` of the indicator)."""

  def rule(primals, tangents, **params):
    x, ids, t = _split_args(primals, tangents, sorted_ids)
    seg = _Seg(ids, params)
    y = op(*primals, **params)
    if type(t) is ad.Zero:
      return y, rules.zero_tangent(y)
    sel = tfops.Equal(x, seg.gather(y), incompatible_shape_error=True)
    valid = seg.valid(x)
    if valid is not None:
      sel = tfops.LogicalAnd(sel, valid)
    count = seg.reduce("Sum", rules.cast_like(sel, x))
    picked = tfops.SelectV2(sel, t, np.zeros((), rules.dtype_of(x)))
    # Segments with no selected row (empty, or a NaN result) get 0, as in TF.
    return y, tfops.RealDiv(
      seg.reduce("Sum", picked), tfops.Maximum(count, np.ones((), rules.dtype_of(x)))
    )

  return rule


def _prod_jvp(op, sorted_ids):
  """TF's SegmentProd/UnsortedSegmentProd gradient written forward: each row's
  partial derivative is the product of the other rows of its segment (the segment's
  product divided by the row without zeros, the product of the non-zero rows for
  the one zero row), and segments with two zeros or more get none. TF does not
  conjugate it for complex data (its GradientTape and ForwardAccumulator agree), so
  neither do we: the tangent is ``t * conj(partial)``."""

  def rule(primals, tangents, **params):
    x, ids, t = _split_args(primals, tangents, sorted_ids)
    seg = _Seg(ids, params)
    y = op(*primals, **params)
    if type(t) is ad.Zero:
      return y, rules.zero_tangent(y)
    dtype = rules.dtype_of(x)
    is_zero = tfops.Equal(x, np.zeros((), dtype), incompatible_shape_error=True)
    zeros = seg.reduce("Sum", tfops.Cast(is_zero, DstT=np.dtype("int32"), Truncate=False))
    non_zero = tfops.SelectV2(is_zero, np.ones((), dtype), x)
    partial = tfops.SelectV2(
      is_zero, seg.gather(seg.reduce("Prod", non_zero)), tfops.RealDiv(seg.gather(y), non_zero)
    )
    if jnp.issubdtype(dtype, jnp.complexfloating):
      partial = tfops.Conj(partial)
    out = seg.reduce("Sum", tfops.Mul(t, partial))
    return y, tfops.SelectV2(tfops.Greater(zeros, np.ones((), np.int32)), np.zeros((), dtype), out)

  return rule


# --- ops ----------------------------------------------------------------------------------

_SORTED = dict(family=FAMILY, static=("segment_ids",))


# TF's forward mode of Mean/Min/Max (its gradient transposed) divides by the count
# of (selected) rows, which is 0 for empty segments: NaN where the tangent is 0
# (central differences side with us). Their JVP is checked against tf.GradientTape.
_FORWARD_NAN = "vjp"


def _sorted_spec(kind, dtypes):
  oracle = _FORWARD_NAN if kind in ("mean", "min", "max") else "forward"
  return lambda st: st.Spec(_sorted_calls(st, kind, dtypes), grad_oracle=oracle)


SegmentSum = register_op(
  "SegmentSum",
  _sorted_impl("sum"),
  **_SORTED,
  linear=True,
  transpose=_segment_sum_transpose,
  batching=rules.per_op(_sorted_batching),
  spec=_sorted_spec("sum", C.WITH_COMPLEX),
)

SegmentMean = register_op(
  "SegmentMean",
  _sorted_impl("mean"),
  **_SORTED,
  linear=True,
  transpose=_segment_mean_transpose,
  batching=rules.per_op(_sorted_batching),
  spec=_sorted_spec("mean", C.WITH_COMPLEX),
)

SegmentMin = register_op(
  "SegmentMin",
  _sorted_impl("min"),
  **_SORTED,
  jvp=rules.per_op(_extremum_jvp, True),
  batching=rules.per_op(_sorted_batching),
  spec=_sorted_spec("min", C.REAL),
)

SegmentMax = register_op(
  "SegmentMax",
  _sorted_impl("max"),
  **_SORTED,
  jvp=rules.per_op(_extremum_jvp, True),
  batching=rules.per_op(_sorted_batching),
  spec=_sorted_spec("max", C.REAL),
)

SegmentProd = register_op(
  "SegmentProd",
  _sorted_impl("prod"),
  **_SORTED,
  jvp=rules.per_op(_prod_jvp, True),
  batching=rules.per_op(_sorted_batching),
  spec=_sorted_spec("prod", C.WITH_COMPLEX),
)

_UNSORTED = dict(family=FAMILY, static=("num_segments",), check=_unsorted_check)


def _unsorted_spec(kind, dtypes, id_types=("int32", "int64")):
  oracle = _FORWARD_NAN if kind in ("min", "max") else "forward"
  return lambda st: st.Spec(_unsorted_calls(st, kind, dtypes, id_types), grad_oracle=oracle)


UnsortedSegmentSum = register_op(
  "UnsortedSegmentSum",
  _unsorted_impl("sum"),
  **_UNSORTED,
  jvp=(
    lambda t, x, ids, *, num_segments: tfops.UnsortedSegmentSum(t, ids, num_segments=num_segments),
    None,
  ),
  transpose=_unsorted_sum_transpose,
  batching=rules.per_op(_unsorted_batching),
  spec=_unsorted_spec("sum", C.WITH_COMPLEX, ("int16", "int32", "int64")),
)

UnsortedSegmentMin = register_op(
  "UnsortedSegmentMin",
  _unsorted_impl("min"),
  **_UNSORTED,
  jvp=rules.per_op(_extremum_jvp, False),
  batching=rules.per_op(_unsorted_batching),
  spec=_unsorted_spec("min", C.REAL),
)

UnsortedSegmentMax = register_op(
  "UnsortedSegmentMax",
  _unsorted_impl("max"),
  **_UNSORTED,
  jvp=rules.per_op(_extremum_jvp, False),
  batching=rules.per_op(_unsorted_batching),
  spec=_unsorted_spec("max", C.REAL),
)

UnsortedSegmentProd = register_op(
  "UnsortedSegmentProd",
  _unsorted_impl("prod"),
  **_UNSORTED,
  jvp=rules.per_op(_prod_jvp, False),
  batching=rules.per_op(_unsorted_batching),
  spec=_unsorted_spec("prod", C.WITH_COMPLEX),
)


# --- property-test strategies -------------------------------------------------------------


def _sorted_calls(st, kind, dtype_names):
  hst = lazy_hst()

  @st.composite
  def calls(draw):
    dtype = draw(st.dtypes(dtype_names))
    n = draw(hst.integers(0, 4))
    inner = inner_shape(draw, st)
    # TF's sorted min/max kernel is vectorised over the rows' trailing elements
    # when they fill a SIMD packet, and skips NaN there: NaN only where it is not.
    nan = kind not in ("min", "max") or math.prod(inner) == 1
    data = draw_data(draw, st, dtype, (n,) + inner, nan=nan)
    return {"data": data, "segment_ids": draw_sorted_ids(draw, st, n)}

  return calls()


def _unsorted_calls(st, kind, dtype_names, id_types):
  hst = lazy_hst()

  @st.composite
  def calls(draw):
    dtype = draw(st.dtypes(dtype_names))
    num = draw(hst.integers(0, 4))
    ids_shape = tuple(draw(st.shapes(max_rank=2, max_side=4)))
    inner = inner_shape(draw, st, max_rank=1 if len(ids_shape) == 2 else 2)
    ids = draw(st.arrays(st.dtypes(id_types), ids_shape, min_value=-1, max_value=max(num - 1, -1)))
    data = draw_data(draw, st, dtype, ids_shape + inner)
    return {
      "data": data,
      "segment_ids": ids,
      "num_segments": np.asarray(num, draw(st.dtypes(("int32", "int64")))),
    }

  return calls()
