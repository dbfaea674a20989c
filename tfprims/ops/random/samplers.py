"""Candidate samplers: ``UniformCandidateSampler``, ``LogUniformCandidateSampler``
(``uses_rng``) and ``AllCandidateSampler`` (deterministic).

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
from tfprims.core import define_op
from tfprims.ops.random.basic import _RANDOM_SKIPS, FAMILY, _wrap

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

  init = (jnp.zeros((num_sampled,), _int()), jnp.asarray(0, jnp.int32),
          jnp.asarray(0, jnp.int32))
  out, _, tries = lax.while_loop(cond, body, init)
  return out, tries


def _sampler(op_type, draw, prob):
  def impl(key, true_classes, *, num_true, num_sampled, unique, range_max):
    if unique and num_sampled > range_max:
      raise errors.ConversionError(
          f"{op_type}: unique sampling of num_sampled={num_sampled} candidates from "
          f"range_max={range_max} (TF rejects it)")
    key = _wrap(key)
    if unique and num_sampled:
      sampled, tries = _unique_draws(key, num_sampled, range_max, draw)
    else:
      sampled = draw(key, num_sampled, range_max)
      tries = jnp.asarray(num_sampled, jnp.int32)
    true_p = prob(true_classes, range_max)
    sampled_p = prob(sampled, range_max)
    return (sampled.astype(_int()), _expected(true_p, num_sampled, tries),
            _expected(sampled_p, num_sampled, tries))
  return impl


def _spec(st, with_range=True):
  @st.composite
  def calls(d):
    batch, num_true = d(st.integers(0, 3)), d(st.integers(1, 3))
    range_max = d(st.integers(1, 20))
    unique = d(st.booleans())
    num_sampled = d(st.integers(0, range_max if unique else 6))
    out = dict(true_classes=d(st.arrays(np.int64, (batch, num_true), special=False,
                                        min_value=0, max_value=range_max - 1)),
               num_true=num_true, num_sampled=num_sampled, unique=unique,
               seed=d(st.integers(0, 100)))
    if with_range:
      out["range_max"] = range_max
    else:
      out["num_sampled"] = range_max  # AllCandidateSampler: classes in [0, num_sampled)
    return out
  return calls()


def _random_spec(st):
  return st.Spec(_spec(st), skip=dict(
      _RANDOM_SKIPS, values="random candidates (jax.random, not TF's Philox); the expected "
                            "counts of given candidates are checked in "
                            "tests/test_random_more.py"))


UniformCandidateSampler = define_op(
    "UniformCandidateSampler",
    _sampler("UniformCandidateSampler", _uniform_draw, _uniform_prob),
    family=FAMILY, attrs=_ATTRS, uses_rng=True, multiple_results=True, spec=_random_spec)
LogUniformCandidateSampler = define_op(
    "LogUniformCandidateSampler",
    _sampler("LogUniformCandidateSampler", _log_uniform_draw, _log_uniform_prob),
    family=FAMILY, attrs=_ATTRS, uses_rng=True, multiple_results=True, spec=_random_spec)


def _all_sampler(true_classes, *, num_true, num_sampled, unique):
  """Every class in [0, num_sampled), each with expected count 1 (deterministic)."""
  return (jnp.arange(num_sampled, dtype=_int()),
          jnp.ones(jnp.shape(true_classes), jnp.float32),
          jnp.ones((num_sampled,), jnp.float32))


AllCandidateSampler = define_op(
    "AllCandidateSampler", _all_sampler, family=FAMILY,
    attrs=("num_true", "num_sampled", "unique"), multiple_results=True,
    spec=lambda st: st.Spec(_spec(st, with_range=False),
                            note="true classes must lie in [0, num_sampled) (TF raises)"))
