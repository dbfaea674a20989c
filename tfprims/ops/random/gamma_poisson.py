"""Gamma, Poisson, binomial and parameterized truncated normal samplers.

* Stateful (``uses_rng``: a leading raw key operand from the call's ``rng=``):
  ``RandomGamma``, ``RandomPoissonV2`` (output shape ``shape + alpha.shape``),
  ``ParameterizedTruncatedNormal`` (parameters per batch: scalars or vectors over
  ``shape[0]``).
* Stateless (key from the seed or key/counter inputs, as ``basic.py``'s):
  ``StatelessRandomGammaV2``/``V3``, ``StatelessRandomPoisson``, ``StatelessRandomBinomial``,
  ``StatelessParameterizedTruncatedNormal`` (parameters broadcast to the trailing dims
  of ``shape``, which must end with their broadcast shape, as TF requires).
* ``RandomGammaGrad``: the implicit-reparameterisation derivative of a gamma sample
  w.r.t. its ``alpha`` (deterministic; TF's values). The gamma samplers' JVP w.r.t.
  ``alpha`` is ``tf.Mul(tf.RandomGammaGrad(alpha, sample), t)``, as TF's gradient.

Numbers come from jax.random (gamma, poisson, binomial, truncated_normal), not TF's
Philox; see docs/semantics/random.md.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax
from jax.interpreters import ad

from tfprims import dtypes as tf_dtypes
from tfprims import errors, rules
from tfprims.core import register_op, tfops
from tfprims.ops.random.basic import (
  _STATELESS_SKIPS,
  FAMILY,
  RANDOM_SKIPS,
  _key_counter_key,
  _key_counter_strategy,
  _out_dtype,
  _seed_strategy,
  seed_key,
  wrap_key,
)
from tfprims.ops.random.stateful import binomial


def _compute_dtype(dtype):
  """Half precision is sampled in float32 (jax.random's samplers want 32 bits)."""
  dtype = jnp.dtype(dtype)
  return jnp.float64 if dtype == jnp.float64 and tf_dtypes.x64_enabled() else jnp.float32


def trailing_batches(op_type, shape, *params):
  """Checks that ``shape`` ends with the broadcast shape of ``params`` (TF: "Shape
  passed in must end with broadcasted shape.") and returns that broadcast shape."""
  bshape = np.broadcast_shapes(*[np.shape(p) for p in params])
  shape = tuple(shape)
  if len(bshape) > len(shape) or shape[len(shape) - len(bshape) :] != tuple(bshape):
    raise errors.ConversionError(
      f"{op_type}: shape {shape} must end with the broadcast shape {tuple(bshape)} of "
      "its parameters (TF: 'Shape passed in must end with broadcasted shape.')"
    )
  return bshape


# --- distributions ----------------------------------------------------------------------


def gamma(key, alpha, shape):
  """Gamma(alpha, 1) samples of ``shape`` (alpha broadcast to its trailing dims). As TF's
  kernel: alpha == 0 gives 0, alpha < 0 or NaN gives NaN."""
  alpha = jnp.asarray(alpha)
  a = jnp.broadcast_to(alpha.astype(_compute_dtype(alpha.dtype)), shape)
  safe = jnp.where(a > 0, a, jnp.ones_like(a))
  g = jax.random.gamma(key, safe, shape, dtype=a.dtype)
  g = jnp.where(a > 0, g, jnp.where(a == 0, jnp.zeros_like(g), jnp.full_like(g, jnp.nan)))
  return g.astype(alpha.dtype)


def poisson(key, lam, shape, dtype):
  """Poisson(lam) counts of ``shape`` as ``dtype`` (lam == 0 gives 0)."""
  lam = jnp.asarray(lam)
  rate = jnp.broadcast_to(lam.astype(_compute_dtype(lam.dtype)), shape)
  wide = tf_dtypes.x64_enabled() and jnp.dtype(_out_dtype(dtype)) in (jnp.int64, jnp.float64)
  counts = jax.random.poisson(key, rate, shape, dtype=jnp.int64 if wide else jnp.int32)
  return counts.astype(_out_dtype(dtype))


def truncated(key, means, stddevs, minvals, maxvals, shape):
  """mean + stddev * z, z ~ N(0, 1) truncated to [(min - mean) / std, (max - mean) / std];
  parameters broadcast to ``shape``."""
  dtype = jnp.asarray(means).dtype
  compute = _compute_dtype(dtype)
  m, s, lo, hi = (
    jnp.broadcast_to(jnp.asarray(p).astype(compute), shape)
    for p in (means, stddevs, minvals, maxvals)
  )
  z = jax.random.truncated_normal(key, (lo - m) / s, (hi - m) / s, shape, dtype=compute)
  return jnp.clip(m + s * z, lo, hi).astype(dtype)


def _per_batch(op_type, shape, *params):
  """ParameterizedTruncatedNormal's parameters (scalars or vectors of length 1 or
  ``shape[0]``) as ``[num_batches, 1]`` columns, broadcast against the samples."""
  if len(shape) == 0:
    raise errors.ConversionError(f"{op_type}: the shape must not be empty (TF rejects it)")
  batches = int(shape[0])
  out = []
  for p in params:
    p = jnp.asarray(p)
    if p.ndim > 1 or (p.ndim == 1 and p.shape[0] not in (1, batches)):
      raise errors.ConversionError(
        f"{op_type}: parameters must be scalars or vectors of length 1 or {batches}; "
        f"got shape {p.shape}"
      )
    out.append(p.reshape(-1, 1))
  return out


def _ptn(key, means, stdevs, minvals, maxvals, *, shape, op_type="ParameterizedTruncatedNormal"):
  shape = tuple(shape)
  cols = _per_batch(op_type, shape, means, stdevs, minvals, maxvals)
  flat = (shape[0], int(np.prod(shape[1:], dtype=np.int64)))
  return truncated(key, *cols, flat).reshape(shape)


# --- RandomGammaGrad --------------------------------------------------------------------


def _gamma_grad(alpha, sample):
  """d sample / d alpha (implicit reparameterisation): ``lax.random_gamma_grad``, the same
  formula as TF's kernel; an infinite sample gives -0 as TF's does."""
  alpha, sample = jnp.broadcast_arrays(jnp.asarray(alpha), jnp.asarray(sample))
  g = lax.random_gamma_grad(alpha, sample)
  return jnp.where(jnp.isposinf(sample) & (alpha > 0), -jnp.zeros_like(g), g)


def _gamma_grad_spec(st):
  @st.composite
  def calls(d):
    dtype = d(st.dtypes(("float32", "float64")))
    shape = d(st.shapes(max_rank=2))
    alpha = d(st.arrays(dtype, shape, special=False, min_value=0.2, max_value=10))
    scale = d(st.arrays(dtype, shape, special=False, min_value=0.3, max_value=3))
    return dict(alpha=alpha, sample=(alpha * scale).astype(dtype))

  return st.Spec(
    calls(),
    skip={
      "jvp": "TF registers no gradient for RandomGammaGrad",
      "vjp": "TF registers no gradient for RandomGammaGrad",
    },
    note="samples drawn in the bulk (alpha * [0.3, 3]): far in the left tail TF's float32 "
    "kernel underflows to 0 where the derivative is not 0",
  )


RandomGammaGrad = register_op(
  "RandomGammaGrad", _gamma_grad, family=FAMILY, batching="elementwise", spec=_gamma_grad_spec
)


def _gamma_jvp(sample_fn):
  """JVP w.r.t. alpha (the last operand): ``tf.RandomGammaGrad(alpha, sample) * t``."""

  def jvp(primals, tangents, **params):
    sample = sample_fn(*primals, **params)
    t = tangents[-1]
    if type(t) is ad.Zero:
      return sample, rules.zero_tangent(sample)
    alpha = primals[-1]
    return sample, tfops.Mul(tfops.RandomGammaGrad(alpha, sample), t)

  return jvp


# --- stateful (rng=) --------------------------------------------------------------------


def _shape_arrays(st, max_rank=2):
  return st.shapes(max_rank=max_rank, max_side=3).map(lambda s: np.asarray(s, np.int32))


def _alpha_spec(st, arg, dtypes, lo, hi, extra=None):
  @st.composite
  def calls(d):
    dtype = d(st.dtypes(dtypes))
    out = {
      "shape": d(_shape_arrays(st)).astype(d(st.dtypes(("int32", "int64")))),
      arg: d(
        st.arrays(
          dtype, d(st.shapes(max_rank=2, max_side=3)), special=False, min_value=lo, max_value=hi
        )
      ),
      "seed": d(st.integers(0, 100)),
    }
    if extra is not None:
      out.update(d(extra))
    return out

  return st.Spec(calls(), skip=RANDOM_SKIPS, examples=0.5)  # rejection-sampling loops


RandomGamma = register_op(
  "RandomGamma",
  lambda key, alpha, *, shape: gamma(wrap_key(key), alpha, tuple(shape) + jnp.shape(alpha)),
  family=FAMILY,
  static=("shape",),
  uses_rng=True,
  jvp=_gamma_jvp(lambda key, alpha, *, shape: tfops.RandomGamma(key, alpha, shape=shape)),
  spec=lambda st: _alpha_spec(st, "alpha", ("float16", "float32", "float64"), 0.1, 10),
)

_COUNT_DTYPES = ("float16", "float32", "float64", "int32", "int64")

RandomPoissonV2 = register_op(
  "RandomPoissonV2",
  lambda key, rate, *, shape, dtype: poisson(
    wrap_key(key), rate, tuple(shape) + jnp.shape(rate), dtype
  ),
  family=FAMILY,
  static=("shape",),
  attrs=("dtype",),
  uses_rng=True,
  spec=lambda st: _alpha_spec(
    st, "rate", _COUNT_DTYPES, 0, 20, st.fixed_dictionaries(dict(dtype=st.dtypes(_COUNT_DTYPES)))
  ),
)


def _ptn_params(st, dtype, batches, per_batch_vectors=True):
  """Means, stddevs > 0 and minvals < maxvals (TF rejects others)."""

  @st.composite
  def draw(d):
    def shape():
      return d(st.sampled_from([(), (1,), (batches,)] if per_batch_vectors else [()]))

    means = d(st.arrays(dtype, shape(), special=False, min_value=-2, max_value=2))
    std = d(st.arrays(dtype, shape(), special=False, min_value=0.5, max_value=2))
    lo = d(st.arrays(dtype, shape(), special=False, min_value=-3, max_value=0))
    width = d(st.arrays(dtype, shape(), special=False, min_value=0.5, max_value=3))
    return dict(means=means, minvals=lo, maxvals=(lo + width).astype(dtype), _std=std)

  return draw()


def _ptn_spec(st):
  @st.composite
  def calls(d):
    dtype = d(st.dtypes(("float16", "float32", "float64")))  # no bfloat16 CPU kernel
    shape = d(st.shapes(min_rank=1, max_rank=3, min_side=1, max_side=3))
    p = d(_ptn_params(st, dtype, shape[0]))
    return dict(
      shape=np.asarray(shape, d(st.dtypes(("int32", "int64")))),
      means=p["means"],
      stdevs=p["_std"],
      minvals=p["minvals"],
      maxvals=p["maxvals"],
      seed=d(st.integers(0, 100)),
    )

  return st.Spec(
    calls(),
    skip=RANDOM_SKIPS,
    note="TF rejects stddev <= 0 and minval >= maxval; tfprims does not check",
  )


ParameterizedTruncatedNormal = register_op(
  "ParameterizedTruncatedNormal",
  lambda key, means, stdevs, minvals, maxvals, *, shape: _ptn(
    wrap_key(key), means, stdevs, minvals, maxvals, shape=shape
  ),
  family=FAMILY,
  static=("shape",),
  uses_rng=True,
  spec=_ptn_spec,
)


# --- stateless -------------------------------------------------------------------------


def _stateless_spec(st, params_fn, *, v3=False, extra=None, shape_dtypes=("int32", "int64")):
  """shape = lead + bshape; params_fn(d, dtype, bshape) -> the parameter inputs."""

  @st.composite
  def calls(d):
    bshape = tuple(d(st.shapes(max_rank=2, max_side=3)))
    lead = tuple(d(st.shapes(max_rank=1, max_side=3)))
    out = dict(shape=np.asarray(lead + bshape, d(st.dtypes(shape_dtypes))))
    out.update(d(params_fn(bshape)))
    if v3:
      out.update({k: d(v) for k, v in _key_counter_strategy(st).items()})
    else:
      out["seed"] = d(_seed_strategy(st))
    if extra is not None:
      out.update(d(extra))
    return out

  return st.Spec(calls(), skip=_STATELESS_SKIPS, examples=0.5)  # rejection-sampling loops


def _positive(st, arg, dtypes, lo, hi):
  def params(bshape):
    @st.composite
    def draw(d):
      return {
        arg: d(st.arrays(d(st.dtypes(dtypes)), bshape, special=False, min_value=lo, max_value=hi))
      }

    return draw()

  return params


def _stateless_gamma(key, alpha, shape):
  trailing_batches("StatelessRandomGamma", shape, alpha)
  return gamma(key, alpha, tuple(shape))


def _sg_v2(seed, alpha, *, shape):
  return _stateless_gamma(seed_key(seed), alpha, shape)


def _sg_v3(key, counter, alg, alpha, *, shape):
  del alg  # accepted and ignored, as the V2 stateless ops' (basic.py)
  return _stateless_gamma(_key_counter_key(key, counter), alpha, shape)


_GAMMA_DTYPES = ("float16", "float32", "float64")

StatelessRandomGammaV2 = register_op(
  "StatelessRandomGammaV2",
  _sg_v2,
  family=FAMILY,
  static=("shape",),
  jvp=_gamma_jvp(
    lambda seed, alpha, *, shape: tfops.StatelessRandomGammaV2(seed, alpha, shape=shape)
  ),
  spec=lambda st: _stateless_spec(st, _positive(st, "alpha", _GAMMA_DTYPES, 0.1, 10)),
)
StatelessRandomGammaV3 = register_op(
  "StatelessRandomGammaV3",
  _sg_v3,
  family=FAMILY,
  static=("shape",),
  jvp=_gamma_jvp(
    lambda key, counter, alg, alpha, *, shape: tfops.StatelessRandomGammaV3(
      key, counter, alg, alpha, shape=shape
    )
  ),
  spec=lambda st: _stateless_spec(st, _positive(st, "alpha", _GAMMA_DTYPES, 0.1, 10), v3=True),
)


def _stateless_poisson(seed, lam, *, shape, dtype):
  trailing_batches("StatelessRandomPoisson", shape, lam)
  return poisson(seed_key(seed), lam, tuple(shape), dtype)


StatelessRandomPoisson = register_op(
  "StatelessRandomPoisson",
  _stateless_poisson,
  family=FAMILY,
  static=("shape",),
  attrs=("dtype",),
  spec=lambda st: _stateless_spec(
    st,
    _positive(st, "lam", _COUNT_DTYPES, 0, 20),
    extra=st.fixed_dictionaries(dict(dtype=st.dtypes(_COUNT_DTYPES))),
  ),
)


def _stateless_binomial(seed, counts, probs, *, shape, dtype):
  trailing_batches("StatelessRandomBinomial", shape, counts, probs)
  return binomial(seed_key(seed), counts, probs, tuple(shape), dtype)


def _binomial_params(st):
  def params(bshape):
    @st.composite
    def draw(d):
      # TF's CPU kernel takes float counts/probs only (int T has no kernel).
      dtype = d(st.dtypes(_GAMMA_DTYPES))
      return dict(
        counts=d(st.arrays(dtype, bshape, special=False, min_value=0, max_value=20)),
        probs=d(
          st.arrays(
            dtype, d(st.sampled_from([(), bshape[-1:]])), special=False, min_value=0, max_value=1
          )
        ),
      )

    return draw()

  return params


StatelessRandomBinomial = register_op(
  "StatelessRandomBinomial",
  _stateless_binomial,
  family=FAMILY,
  static=("shape",),
  attrs=("dtype",),
  spec=lambda st: _stateless_spec(
    st,
    _binomial_params(st),
    shape_dtypes=("int32",),
    extra=st.fixed_dictionaries(dict(dtype=st.dtypes(_COUNT_DTYPES))),
  ),
)


def _stateless_ptn(seed, means, stddevs, minvals, maxvals, *, shape):
  trailing_batches("StatelessParameterizedTruncatedNormal", shape, means, stddevs, minvals, maxvals)
  return truncated(seed_key(seed), means, stddevs, minvals, maxvals, tuple(shape))


def _sptn_params(st):
  def params(bshape):
    @st.composite
    def draw(d):
      dtype = d(st.dtypes(("float16", "float32", "float64")))
      p = d(_ptn_params(st, dtype, 1, per_batch_vectors=False))
      # Each parameter scalar or of the full trailing shape.
      full = lambda x: np.broadcast_to(x, bshape).copy() if d(st.booleans()) else x
      return dict(
        means=full(p["means"]),
        stddevs=full(p["_std"]),
        minvals=full(p["minvals"]),
        maxvals=full(p["maxvals"]),
      )

    return draw()

  return params


StatelessParameterizedTruncatedNormal = register_op(
  "StatelessParameterizedTruncatedNormal",
  _stateless_ptn,
  family=FAMILY,
  static=("shape",),
  spec=lambda st: _stateless_spec(st, _sptn_params(st)),
)
