"""Candidate samplers: ``UniformCandidateSampler``, ``LogUniformCandidateSampler``,
``LearnedUnigramCandidateSampler``, ``ThreadUnsafeUnigramCandidateSampler`` (``uses_rng``)
and ``AllCandidateSampler`` (deterministic); and ``ComputeAccidentalHits``, which finds
the true classes among the sampled candidates (sampled softmax).

Outputs as TF's: ``sampled_candidates`` int64 ``[num_sampled]``, ``true_expected_count``
float32 ``[batch, num_true]``, ``sampled_expected_count`` float32 ``[num_sampled]``. The
expected counts use TF's formula (``range_sampler.cc``): ``p * num_sampled`` when every
draw was kept (``unique=False``, or no draw was rejected), else
``-expm1(num_tries * log1p(-p))`` with ``num_tries`` the number of draws the unique
rejection loop took. ``p`` is ``1 / range_max`` (uniform) or
``log((k + 2) / (k + 1)) / log(range_max + 1)`` (log-uniform).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from tfprims import dtypes as tf_dtypes
from tfprims import errors
from tfprims.core import register_op
from tfprims.ops.array import padded
from tfprims.ops.array.data_dependent import bounded_hook
from tfprims.ops.random.basic import FAMILY, RANDOM_SKIPS, wrap_key
from tfprims.errors import import_tensorflow

_ATTRS = ("num_true", "num_sampled", "unique", "range_max")


def _uniform_prob(k, range_max):
  return jnp.full(jnp.shape(k), 1.0 / range_max, jnp.float32)


def _log_uniform_prob(k, range_max):
  # TF computes in double (float32 with x64 off), then rounds to float32.
  wide = jnp.float64 if tf_dtypes.x64_enabled() else jnp.float32
  k = jnp.asarray(k).astype(wide)
  return (jnp.log((k + 2.0) / (k + 1.0)) / np.log(range_max + 1.0)).astype(jnp.float32)


def _uniform_draw(key, n, range_max):
  return jax.random.randint(key, (n,), 0, range_max, dtype=_int())


def _log_uniform_draw(key, n, range_max):
  # TF: exp(u * log(range_max + 1)) - 1, truncated, modulo range_max.
  u = jax.random.uniform(key, (n,), dtype=jnp.float32)
  value = jnp.floor(jnp.exp(u * np.float32(np.log(range_max + 1.0)))) - 1.0
  return jnp.mod(value.astype(_int()), range_max)


def _int():
  return jnp.int64 if tf_dtypes.x64_enabled() else jnp.int32


def _expected(p, num_sampled, num_tries):
  """TF's ExpectedCountHelper (float32)."""
  stable = -jnp.expm1(num_tries.astype(jnp.float32) * jnp.log1p(-p))
  return jnp.where(num_tries == num_sampled, p * np.float32(num_sampled), stable)


def _unique_draws(key, num_sampled, range_max, draw):
  """Rejection sampling of ``num_sampled`` distinct candidates, one draw at a time (as
  TF); returns them in draw order and the number of draws taken."""

  def cond(c):
    return c[1] < num_sampled

  def body(c):
    out, count, tries = c
    cand = draw(jax.random.fold_in(key, tries), 1, range_max)[0]
    seen = jnp.any((out == cand) & (jnp.arange(num_sampled) < count))
    out = jnp.where(seen, out, out.at[count].set(cand))
    return out, count + (~seen).astype(count.dtype), tries + 1

  init = (jnp.zeros((num_sampled,), _int()), jnp.asarray(0, jnp.int32), jnp.asarray(0, jnp.int32))
  out, _, tries = lax.while_loop(cond, body, init)
  return out, tries


def _sampler(op_type, draw, prob):
  def impl(key, true_classes, *, num_true, num_sampled, unique, range_max):
    if unique and num_sampled > range_max:
      raise errors.ConversionError(
        f"{op_type}: unique sampling of num_sampled={num_sampled} candidates from "
        f"range_max={range_max} (TF rejects it)"
      )
    key = wrap_key(key)
    if unique and num_sampled:
      sampled, tries = _unique_draws(key, num_sampled, range_max, draw)
    else:
      sampled = draw(key, num_sampled, range_max)
      tries = jnp.asarray(num_sampled, jnp.int32)
    true_p = prob(true_classes, range_max)
    sampled_p = prob(sampled, range_max)
    return (
      sampled.astype(_int()),
      _expected(true_p, num_sampled, tries),
      _expected(sampled_p, num_sampled, tries),
    )

  return impl


def _spec(st, with_range=True):
  @st.composite
  def calls(d):
    batch, num_true = d(st.integers(0, 3)), d(st.integers(1, 3))
    range_max = d(st.integers(1, 20))
    unique = d(st.booleans())
    num_sampled = d(st.integers(0, range_max if unique else 6))
    out = dict(
      true_classes=d(
        st.arrays(np.int64, (batch, num_true), special=False, min_value=0, max_value=range_max - 1)
      ),
      num_true=num_true,
      num_sampled=num_sampled,
      unique=unique,
      seed=d(st.integers(0, 100)),
    )
    if with_range:
      out["range_max"] = range_max
    else:
      out["num_sampled"] = range_max  # AllCandidateSampler: classes in [0, num_sampled)
    return out

  return calls()


def _random_spec(st):
  return st.Spec(
    _spec(st),
    skip=dict(
      RANDOM_SKIPS,
      values="random candidates (jax.random, not TF's Philox); the expected "
      "counts of given candidates are checked in "
      "tests/test_random_more.py",
    ),
  )


def _candidate_sampler(op_type, draw, prob):
  return register_op(
    op_type,
    _sampler(op_type, draw, prob),
    family=FAMILY,
    attrs=_ATTRS,
    uses_rng=True,
    multiple_results=True,
    spec=_random_spec,
  )


UniformCandidateSampler = _candidate_sampler(
  "UniformCandidateSampler", _uniform_draw, _uniform_prob
)
LogUniformCandidateSampler = _candidate_sampler(
  "LogUniformCandidateSampler", _log_uniform_draw, _log_uniform_prob
)


# TF's unigram samplers learn their weights from the true classes of the runs of the node
# so far: the kernel starts every class at weight 1 and adds the true classes after
# sampling. A converted function has no kernel-private state, so each call samples as
# TF's first run does: uniformly, with p = 1 / range_max (docs/semantics/random.md).
_UNIGRAM_NOTE = (
  "every call samples as TF's first run of the node (all learned counts "
  "1: uniform over [0, range_max)); the counts TF's kernel accumulates over "
  "later runs are not kept"
)


def _unigram_spec(st):
  spec = _random_spec(st)
  return st.Spec(spec.calls, skip=spec.skip, note=_UNIGRAM_NOTE)


def _unigram_sampler(op_type):
  """TF's learned unigram samplers: both start from TF's all-ones counts, so a node's first
  run (every run here: tfprims keeps no counts between calls) samples uniformly."""
  return register_op(
    op_type,
    _sampler(op_type, _uniform_draw, _uniform_prob),
    family=FAMILY,
    attrs=_ATTRS,
    uses_rng=True,
    multiple_results=True,
    doc="Candidates from TF's learned unigram distribution as at the node's first run "
    "(uniform), with TF's expected counts.",
    spec=_unigram_spec,
  )


LearnedUnigramCandidateSampler = _unigram_sampler("LearnedUnigramCandidateSampler")
ThreadUnsafeUnigramCandidateSampler = _unigram_sampler("ThreadUnsafeUnigramCandidateSampler")


def _all_sampler(true_classes, *, num_true, num_sampled, unique):
  """Every class in [0, num_sampled), each with expected count 1 (deterministic)."""
  return (
    jnp.arange(num_sampled, dtype=_int()),
    jnp.ones(jnp.shape(true_classes), jnp.float32),
    jnp.ones((num_sampled,), jnp.float32),
  )


AllCandidateSampler = register_op(
  "AllCandidateSampler",
  _all_sampler,
  family=FAMILY,
  attrs=("num_true", "num_sampled", "unique"),
  multiple_results=True,
  spec=lambda st: st.Spec(
    _spec(st, with_range=False), note="true classes must lie in [0, num_sampled) (TF raises)"
  ),
)


# --- ComputeAccidentalHits -----------------------------------------------------------------

_FLT_MAX = np.float32(np.finfo(np.float32).max)


def _accidental_hits_exact(node, inputs):
  """TF's kernel on known values: for each true class (row-major) found among the
  sampled candidates, its row, the position of its last occurrence there and -FLT_MAX."""
  true_classes, sampled = (np.asarray(v) for v in inputs)
  num_true = int(node.attr("num_true"))
  if true_classes.ndim != 2 or true_classes.shape[1] != num_true:
    raise errors.OpError(
      node.op,
      node.name,
      f"true_classes must be a matrix of shape "
      f"[batch_size, {num_true}], got {list(true_classes.shape)}",
    )
  if sampled.ndim != 1:
    raise errors.OpError(node.op, node.name, "sampled_candidates must be a vector")
  pos = {int(c): i for i, c in enumerate(sampled.tolist())}  # the last occurrence wins
  hits = [
    (i, pos[int(c)]) for i, row in enumerate(true_classes.tolist()) for c in row if int(c) in pos
  ]
  where = f"ComputeAccidentalHits node '{node.name}'"
  return [
    tf_dtypes.canonicalize_value(np.asarray([h[0] for h in hits], np.int32), where),
    tf_dtypes.canonicalize_value(np.asarray([h[1] for h in hits], np.int64), where),
    np.full((len(hits),), -_FLT_MAX, np.float32),
  ]


def _accidental_hits(true_classes, sampled_candidates, *, num_true, size):
  """The first ``size`` accidental hits in TF's order (true classes row-major): row,
  last position among the sampled candidates, -FLT_MAX; padded with -1, -1, 0."""
  if true_classes.ndim != 2 or true_classes.shape[1] != num_true:
    raise ValueError(
      f"ComputeAccidentalHits: true_classes must be a matrix of shape "
      f"[batch_size, {num_true}], got {list(true_classes.shape)}"
    )
  n = sampled_candidates.shape[0]
  eq = true_classes.reshape(-1)[:, None] == sampled_candidates[None, :]
  last = (n - 1 - jnp.argmax(eq[:, ::-1], axis=1)) if n else jnp.zeros(eq.shape[:1], _int())
  pos = padded.first_positions(jnp.any(eq, axis=1), size)
  found = pos >= 0
  safe = jnp.maximum(pos, 0)
  indices = jnp.where(found, safe // max(num_true, 1), -1).astype(jnp.int32)
  ids = jnp.where(found, last[safe] if last.size else -1, -1).astype(_int())
  weights = jnp.where(found, -_FLT_MAX, np.float32(0))
  return indices, ids, weights


def _accidental_hits_padded(node, inputs, n):
  return list(inputs), {"num_true": int(node.attr("num_true")), "size": n}


def _accidental_hits_spec(st):
  @st.composite
  def calls(d):
    batch, num_true = d(st.integers(0, 4)), d(st.integers(1, 3))
    num_sampled = d(st.integers(0, 6))
    high = d(st.integers(0, 8))
    return dict(
      true_classes=d(
        st.arrays(np.int64, (batch, num_true), special=False, min_value=0, max_value=high)
      ),
      sampled_candidates=d(
        st.arrays(np.int64, (num_sampled,), special=False, min_value=0, max_value=high)
      ),
      num_true=num_true,
      size=d(st.integers(0, batch * num_true + 1)),
    )

  def oracle(true_classes, sampled_candidates, num_true, size):
    tf = import_tensorflow()
    idx, ids, w = tf.raw_ops.ComputeAccidentalHits(
      true_classes=true_classes, sampled_candidates=sampled_candidates, num_true=num_true
    )
    return (padded.fit(idx, size, -1), padded.fit(ids, size, -1), padded.fit(w, size, 0))

  no_grad = "integer and constant outputs (TF registers no gradient)"
  return st.Spec(
    calls(),
    oracle=oracle,
    operands=("true_classes", "sampled_candidates"),
    params=lambda kw: {"num_true": kw["num_true"], "size": kw["size"]},
    skip={"jvp": no_grad, "vjp": no_grad},
    note="padded form: TF's hits padded with -1 (indices, ids) and 0 (weights) or cut to size",
  )


ComputeAccidentalHits = register_op(
  "ComputeAccidentalHits",
  _accidental_hits,
  family=FAMILY,
  multiple_results=True,
  attrs=("num_true",),
  dynamic_shape="returns one entry per true class found among the "
  "sampled candidates: its output size depends on the data",
  interpret=bounded_hook(_accidental_hits_exact, _accidental_hits_padded),
  doc="Each true class found among the sampled candidates: its row, the position of its "
  "last occurrence among them and weight -FLT_MAX (padded form: the first size hits, "
  "then -1, -1, 0).",
  spec=_accidental_hits_spec,
)
