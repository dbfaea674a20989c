"""IsotonicRegression: the non-increasing least-squares fit of each row (last axis), by
pool-adjacent-violators as TF's kernel, with the pools' segment ids.

Each row is scanned left to right with a stack of pools (sum, count) in the output dtype;
a new element is pushed as its own pool and the top two pools are merged while the
lower one's mean is strictly smaller than the upper one's (equal means stay separate
segments, as TF). The derivative is TF's registered gradient: the tangent of an output
is the mean of the input tangents over its segment (``UnsortedSegmentSum`` and
``GatherV2``, so grad jaxprs are TF-named). vmap re-binds the op with the batch axis in
front (rows are independent).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax
from jax.interpreters import ad

from tfprims import dtypes, rules
from tfprims.core import register_op, tfops


def _pav_row(x):
  n = x.shape[0]
  sums = jnp.zeros((n,), x.dtype)
  counts = jnp.zeros((n,), jnp.int32)

  def merge_cond(state):
    _, _, top = state
    prev, last = top - 2, top - 1
    below = jnp.maximum(prev, 0)
    mean_prev = state[0][below] / state[1][below].astype(x.dtype)
    mean_last = state[0][last] / state[1][last].astype(x.dtype)
    return (top >= 2) & (mean_prev < mean_last)

  def merge(state):
    s, c, top = state
    s = s.at[top - 2].add(s[top - 1]).at[top - 1].set(0)
    c = c.at[top - 2].add(c[top - 1]).at[top - 1].set(0)
    return s, c, top - 1

  def push(i, state):
    s, c, top = state
    state = (s.at[top].set(x[i]), c.at[top].set(1), top + 1)
    return lax.while_loop(merge_cond, merge, state)

  sums, counts, _ = lax.fori_loop(0, n, push, (sums, counts, jnp.int32(0)))
  ends = jnp.cumsum(counts)
  segments = jnp.searchsorted(ends, jnp.arange(n, dtype=jnp.int32), side="right")
  segments = segments.astype(jnp.int32)
  means = sums / jnp.maximum(counts, 1).astype(x.dtype)
  return means[segments], segments


def _isotonic_regression(x, *, output_dtype=np.dtype("float32")):
  """TF IsotonicRegression: (output, segments) of the non-increasing fit of every row."""
  shape = x.shape
  output_dtype = dtypes.canonical_dtype(output_dtype)
  if x.size == 0:
    return jnp.zeros(shape, output_dtype), jnp.zeros(shape, jnp.int32)
  rows = x.reshape((-1, shape[-1])).astype(output_dtype)
  out, seg = jax.vmap(_pav_row)(rows)
  return out.reshape(shape), seg.reshape(shape)


def _isotonic_jvp(primals, tangents, **p):
  (x,), (t,) = primals, tangents
  out, segments = tfops.IsotonicRegression(x, **p)
  zero_seg = rules.zero_tangent(segments)
  if type(t) is ad.Zero or out.size == 0:
    return [out, segments], [rules.zero_tangent(out), zero_seg]
  shape = rules.shape_of(x)
  n = shape[-1]
  rows = int(np.prod(shape[:-1], dtype=np.int64))
  # segment ids made global: row * n + segment
  offsets = np.arange(rows, dtype=np.int32).reshape(shape[:-1] + (1,)) * np.int32(n)
  ids = rules.reshape(tfops.AddV2(segments, offsets), (rows * n,))
  sums = tfops.UnsortedSegmentSum(rules.reshape(t, (rows * n,)), ids, num_segments=rows * n)
  counts = tfops.UnsortedSegmentSum(
    np.ones((rows * n,), rules.dtype_of(out)), ids, num_segments=rows * n
  )
  counts = tfops.Maximum(counts, np.ones((), rules.dtype_of(out)))
  mean = tfops.GatherV2(sums, ids, axis=0, batch_dims=0)
  per = tfops.GatherV2(counts, ids, axis=0, batch_dims=0)
  return [out, segments], [rules.reshape(tfops.RealDiv(mean, per), shape), zero_seg]


def _isotonic_batching(args, dims, **p):
  (x,), (d,) = args, dims
  rank = np.ndim(x)
  if d == rank - 1:  # the solved axis must stay last
    x, d = rules.to_front(x, d), 0
  return tfops.IsotonicRegression(x, **p), [d, d]


_PAIRS = (
  ("float32", "float32"),
  ("float64", "float64"),
  ("int32", "float64"),
  ("int16", "float32"),
  ("int8", "float32"),
  ("int64", "float64"),
  ("float16", "float16"),
  ("bfloat16", "bfloat16"),
)


def _iso_calls(st):
  @st.composite
  def draw_call(draw):
    src, out = draw(st.sampled_from(_PAIRS))
    # rank 2, non-empty: TF's gradient (_MeanAggregator) splits rows along axis 0 and
    # mixes the rows of other ranks (tests/test_isotonic.py checks rank 1 and 3 values)
    shape = (draw(st.integers(1, 3)), draw(st.integers(1, 4)))
    dt = st.np_dtype(src)
    if dt.kind in "iu":
      x = draw(st.arrays(dt, shape, min_value=-20, max_value=20))
    else:
      # small integers over 4: means of up to 4 such values are exact in every float
      # dtype, so pools merge at the same comparisons as TF's
      ints = draw(st.arrays(np.dtype("int8"), shape, min_value=-40, max_value=40))
      x = (np.asarray(ints, np.float64) / 4).astype(dt)
    return dict(input=x, output_dtype=st.np_dtype(out))

  return draw_call()


IsotonicRegression = register_op(
  "IsotonicRegression",
  _isotonic_regression,
  family="nn",
  attrs=("output_dtype",),
  multiple_results=True,
  jvp=_isotonic_jvp,
  batching=_isotonic_batching,
  spec=lambda st: st.Spec(
    _iso_calls(st),
    examples=0.5,
    note=(
      "Inputs are multiples of 1/4 so that pool means, and so TF's merge decisions, "
      "are exact; TF's gradient is the segment mean of the output cotangent."
    ),
  ),
)
