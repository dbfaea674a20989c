"""Random ops: stateful (key from the call's ``rng=``) and stateless (key from TF's seed).

Every random op is a primitive whose randomness comes from an *operand*, so
jaxprs stay pure and ``jit``/``vmap``/``grad`` compose:

* Stateful ops (``RandomUniform``, ``RandomStandardNormal``, ``TruncatedNormal``,
  ``RandomUniformInt``, ``RandomShuffle``, ``Multinomial``) declare ``uses_rng``:
  they take a leading raw ``uint32[2]`` JAX key operand that the interpreter
  splits off the converted function's ``rng=`` argument, one fresh key per node
  and call: ``tf.RandomUniform[dtype=float32 shape=(2, 3)] key``. TF's
  ``seed``/``seed2`` attrs are dropped: in TF2 they do not make repeated calls
  repeat either. Calling without ``rng=`` raises :class:`tfprims.MissingRngError`.
* Stateless ops (``Stateless*`` V1 with a ``seed`` input, V2 with
  ``key``/``counter``/``alg`` inputs) derive the JAX key from those inputs inside
  the primitive: the same seed gives the same numbers, without ``rng=``.

Numbers come from ``jax.random`` (threefry), not TF's Philox: distributions
match TF, bits do not. See docs/semantics/random.md.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from tfprims import dtypes as tf_dtypes
from tfprims.core import register_op

FAMILY = "random"

RANDOM_FLOATS = ("float16", "bfloat16", "float32", "float64")

# --- keys --------------------------------------------------------------------


def wrap_key(data):
  """The threefry JAX key of raw ``uint32[2]`` key data (a ``uses_rng`` op's key operand)."""
  return jax.random.wrap_key_data(data, impl="threefry2x32")


def _u32(x):
  """An integer array as uint32 words; 64-bit values fold their high half in, so a
  64-bit value that fits 32 bits gives the same word as its 32-bit form."""
  x = jnp.asarray(x)
  if x.dtype.itemsize == 8:
    x = lax.bitcast_convert_type(x, jnp.uint64) if x.dtype != jnp.uint64 else x
    lo = (x & np.uint64(0xFFFFFFFF)).astype(jnp.uint32)
    hi = (x >> np.uint64(32)).astype(jnp.uint32)
    return lo ^ (hi * np.uint32(0x9E3779B9))
  if x.dtype == jnp.uint32:
    return x
  if x.dtype.itemsize == 4:
    return lax.bitcast_convert_type(x, jnp.uint32)
  return x.astype(jnp.uint32)


def seed_key(seed):
  """The JAX key of a V1 stateless op's ``seed`` (shape [2])."""
  return wrap_key(_u32(seed).reshape(2))


def _key_counter_key(key, counter):
  """The JAX key of a V2 stateless op: ``key`` word and the first counter word
  make the key; further non-zero counter words are folded in (so V1 and V2 agree
  for keys and counters made by ``StatelessRandomGetKeyCounter``)."""
  words = jnp.concatenate([_u32(key).reshape(-1), _u32(counter).reshape(-1)])
  base = (
    words[:2]
    if words.shape[0] >= 2
    else jnp.concatenate([words, jnp.zeros((2 - words.shape[0],), jnp.uint32)])
  )
  data = base
  for i in range(2, words.shape[0]):
    folded = jax.random.key_data(jax.random.fold_in(wrap_key(data), words[i]))
    data = jnp.where(words[i] == 0, data, folded)
  return wrap_key(data)


def _out_dtype(dtype):
  return tf_dtypes.canonical_dtype(dtype)


# --- distributions (shared by stateful, stateless V1 and V2 ops) --------------


def _uniform(key, shape, dtype):
  return jax.random.uniform(key, shape, dtype=_out_dtype(dtype))


def _normal(key, shape, dtype):
  return jax.random.normal(key, shape, dtype=_out_dtype(dtype))


def _truncated_normal(key, shape, dtype):
  dt = _out_dtype(dtype)
  return jax.random.truncated_normal(key, -2.0, 2.0, shape, dtype=dt)


def _uniform_int(key, shape, minval, maxval):
  return jax.random.randint(key, shape, minval, maxval, dtype=jnp.asarray(minval).dtype)


def _full_int(key, shape, dtype):
  dt = _out_dtype(dtype)
  unsigned = jnp.dtype(f"uint{dt.itemsize * 8}")
  bits = jax.random.bits(key, shape, unsigned)
  return bits if dt == unsigned else lax.bitcast_convert_type(bits, dt)


def _shuffle(key, value):
  if jnp.ndim(value) == 0:
    return value
  return jax.random.permutation(key, value, axis=0, independent=False)


def _multinomial(key, logits, num_samples, output_dtype):
  """TF's CPU kernel: non-finite logits have probability 0; a row without a
  finite logit samples ``num_classes``."""
  logits = jnp.asarray(logits)
  compute = jnp.float64 if logits.dtype == jnp.float64 else jnp.float32
  logits = logits.astype(compute)
  finite = jnp.isfinite(logits)
  masked = jnp.where(finite, logits, -jnp.inf)
  batch, classes = logits.shape
  samples = jax.random.categorical(key, masked, axis=-1, shape=(num_samples, batch)).T
  samples = jnp.where(jnp.any(finite, axis=-1, keepdims=True), samples, classes)
  return samples.astype(_out_dtype(output_dtype))


# --- stateful ops: leading key operand ----------------------------------------


def _shape_arrays(st, min_side=0):
  return st.shapes(min_side=min_side).map(lambda s: np.asarray(s, dtype=np.int32))


def _stateful_float_spec(st):
  return st.Spec(
    st.call(
      shape=_shape_arrays(st),
      dtype=st.dtypes(RANDOM_FLOATS),
      seed=st.integers(0, 2**31 - 1),
      seed2=st.integers(0, 2**31 - 1),
    ),
    skip=RANDOM_SKIPS,
  )


RANDOM_SKIPS = {
  "values": "random: numbers come from jax.random (threefry), not TF's Philox; "
  "distributions are checked statistically in tests/test_random.py",
  "jvp": "random samples: no tangent to compare with TF",
  "vjp": "random samples: no cotangent to compare with TF",
}


def _define_stateful(op_type, impl, *, static=("shape",), attrs=("dtype",), spec=None):
  return register_op(
    op_type, impl, family=FAMILY, static=static, attrs=attrs, uses_rng=True, spec=spec
  )


RandomUniform = _define_stateful(
  "RandomUniform",
  lambda key, *, shape, dtype: _uniform(wrap_key(key), shape, dtype),
  spec=_stateful_float_spec,
)
RandomStandardNormal = _define_stateful(
  "RandomStandardNormal",
  lambda key, *, shape, dtype: _normal(wrap_key(key), shape, dtype),
  spec=_stateful_float_spec,
)
TruncatedNormal = _define_stateful(
  "TruncatedNormal",
  lambda key, *, shape, dtype: _truncated_normal(wrap_key(key), shape, dtype),
  spec=_stateful_float_spec,
)


def _int_range_spec(st, **extra):
  """minval < maxval of one int dtype (TF raises otherwise)."""

  @st.composite
  def draw(draw_fn):
    dtype = draw_fn(st.dtypes(("int32", "int64")))
    lo = draw_fn(st.integers(-(2**31), 2**31 - 2))
    hi = draw_fn(st.integers(lo + 1, 2**31 - 1))
    out = {k: draw_fn(v) if hasattr(v, "example") else v for k, v in extra.items()}
    out.update(
      shape=draw_fn(_shape_arrays(st)), minval=np.asarray(lo, dtype), maxval=np.asarray(hi, dtype)
    )
    return out

  return draw()


RandomUniformInt = _define_stateful(
  "RandomUniformInt",
  lambda key, minval, maxval, *, shape: _uniform_int(wrap_key(key), shape, minval, maxval),
  attrs=(),
  spec=lambda st: st.Spec(
    _int_range_spec(st, seed=st.integers(0, 100)),
    skip=RANDOM_SKIPS,
    note="minval >= maxval (a TF run-time error) returns minval",
  ),
)


def _values(st):
  return st.arrays(
    st.dtypes(st.NUMERIC + ("bool",)), st.shapes(), special=False, min_value=-100, max_value=100
  )


def _shuffle_spec(st):
  return st.Spec(st.call(value=_values(st), seed=st.integers(0, 100)), skip=RANDOM_SKIPS)


RandomShuffle = _define_stateful(
  "RandomShuffle",
  lambda key, value: _shuffle(wrap_key(key), value),
  static=(),
  attrs=(),
  spec=_shuffle_spec,
)


def _multinomial_spec(st, stateless=False):
  @st.composite
  def draw(d):
    dtype = d(st.dtypes(RANDOM_FLOATS))
    batch = d(st.integers(0, 3))
    classes = d(st.integers(1, 4))
    out = dict(
      logits=d(st.arrays(dtype, (batch, classes), special=False, min_value=-10, max_value=10)),
      num_samples=np.asarray(d(st.integers(0, 4)), np.int32),
      output_dtype=d(st.dtypes(("int32", "int64"))),
    )
    if stateless:
      out["seed"] = d(
        st.arrays(
          st.dtypes(("int32", "int64")), (2,), special=False, min_value=0, max_value=2**31 - 1
        )
      )
    else:
      out["seed"] = d(st.integers(0, 100))
    return out

  return st.Spec(draw(), skip=RANDOM_SKIPS)


Multinomial = _define_stateful(
  "Multinomial",
  lambda key, logits, *, num_samples, output_dtype: _multinomial(
    wrap_key(key), logits, num_samples, output_dtype
  ),
  static=("num_samples",),
  attrs=("output_dtype",),
  spec=_multinomial_spec,
)


# --- stateless V1: seed operand ---------------------------------------------------


def _seed_strategy(st):
  return st.arrays(
    st.dtypes(("int32", "int64")), (2,), special=False, min_value=-(2**31), max_value=2**31 - 1
  )


def _stateless_float_spec(st):
  return st.Spec(
    st.call(shape=_shape_arrays(st), seed=_seed_strategy(st), dtype=st.dtypes(RANDOM_FLOATS)),
    skip=_STATELESS_SKIPS,
  )


_STATELESS_SKIPS = dict(
  RANDOM_SKIPS,
  values=(
    "stateless random: same seed -> same numbers, but from jax.random (threefry), "
    "not TF's Philox; distributions are checked statistically in tests/test_random.py"
  ),
)


def _define(op_type, impl, *, static=("shape",), attrs=("dtype",), spec=None, **kw):
  return register_op(op_type, impl, family=FAMILY, static=static, attrs=attrs, spec=spec, **kw)


StatelessRandomUniform = _define(
  "StatelessRandomUniform",
  lambda seed, *, shape, dtype: _uniform(seed_key(seed), shape, dtype),
  spec=_stateless_float_spec,
)
StatelessRandomNormal = _define(
  "StatelessRandomNormal",
  lambda seed, *, shape, dtype: _normal(seed_key(seed), shape, dtype),
  spec=_stateless_float_spec,
)
StatelessTruncatedNormal = _define(
  "StatelessTruncatedNormal",
  lambda seed, *, shape, dtype: _truncated_normal(seed_key(seed), shape, dtype),
  spec=_stateless_float_spec,
)
StatelessRandomUniformInt = _define(
  "StatelessRandomUniformInt",
  lambda seed, minval, maxval, *, shape: _uniform_int(seed_key(seed), shape, minval, maxval),
  attrs=(),
  spec=lambda st: st.Spec(_int_range_spec(st, seed=_seed_strategy(st)), skip=_STATELESS_SKIPS),
)
StatelessRandomUniformFullInt = _define(
  "StatelessRandomUniformFullInt",
  lambda seed, *, shape, dtype: _full_int(seed_key(seed), shape, dtype),
  spec=lambda st: st.Spec(
    st.call(
      shape=_shape_arrays(st),
      seed=_seed_strategy(st),
      dtype=st.dtypes(("int32", "int64", "uint32", "uint64")),
    ),
    skip=_STATELESS_SKIPS,
  ),
)
StatelessMultinomial = _define(
  "StatelessMultinomial",
  lambda logits, seed, *, num_samples, output_dtype: _multinomial(
    seed_key(seed), logits, num_samples, output_dtype
  ),
  static=("num_samples",),
  attrs=("output_dtype",),
  spec=lambda st: _multinomial_spec(st, stateless=True),
)


# --- stateless V2: key, counter, alg operands ---------------------------------------


def _key_counter_strategy(st):
  words = st.arrays(np.uint64, st.just((1,)), min_value=0, max_value=2**32 - 1)
  counter = st.arrays(np.uint64, st.just((2,)), min_value=0, max_value=2**32 - 1)
  return dict(key=words, counter=counter, alg=st.just(np.asarray(1, np.int32)))


def _v2_float_spec(st):
  return st.Spec(
    st.call(shape=_shape_arrays(st), dtype=st.dtypes(RANDOM_FLOATS), **_key_counter_strategy(st)),
    skip=_STATELESS_SKIPS,
  )


def _v2(fn):
  """A V2 impl ``(key, counter, alg, *rest)`` from a distribution of a JAX key.
  ``alg`` (Philox/ThreeFry/auto) is accepted and ignored: the numbers are
  jax.random's whatever TF algorithm was asked for."""

  def impl(key, counter, alg, *rest, **params):
    del alg
    return fn(_key_counter_key(key, counter), *rest, **params)

  return impl


StatelessRandomUniformV2 = _define(
  "StatelessRandomUniformV2",
  _v2(lambda k, *, shape, dtype: _uniform(k, shape, dtype)),
  spec=_v2_float_spec,
)
StatelessRandomNormalV2 = _define(
  "StatelessRandomNormalV2",
  _v2(lambda k, *, shape, dtype: _normal(k, shape, dtype)),
  spec=_v2_float_spec,
)
StatelessTruncatedNormalV2 = _define(
  "StatelessTruncatedNormalV2",
  _v2(lambda k, *, shape, dtype: _truncated_normal(k, shape, dtype)),
  spec=_v2_float_spec,
)
StatelessRandomUniformIntV2 = _define(
  "StatelessRandomUniformIntV2",
  _v2(lambda k, minval, maxval, *, shape: _uniform_int(k, shape, minval, maxval)),
  attrs=(),
  spec=lambda st: st.Spec(
    _int_range_spec(st, **_key_counter_strategy(st)),
    skip=_STATELESS_SKIPS,
    note="TF's CPU kernels take int32/int64 only",
  ),
)
StatelessRandomUniformFullIntV2 = _define(
  "StatelessRandomUniformFullIntV2",
  _v2(lambda k, *, shape, dtype: _full_int(k, shape, dtype)),
  spec=lambda st: st.Spec(
    st.call(
      shape=_shape_arrays(st),
      dtype=st.dtypes(("int32", "int64", "uint32", "uint64")),
      **_key_counter_strategy(st),
    ),
    skip=_STATELESS_SKIPS,
  ),
)
StatelessShuffle = _define(
  "StatelessShuffle",
  lambda value, key, counter, alg: _shuffle(_key_counter_key(key, counter), value),
  static=(),
  attrs=(),
  spec=lambda st: st.Spec(
    st.call(value=_values(st), **_key_counter_strategy(st)), skip=_STATELESS_SKIPS
  ),
)


def _get_key_counter(seed):
  """key = [seed word 0], counter = [seed word 1, 0] (uint64, or uint32 when x64 is
  off); the V2 ops turn them back into the V1 key of the same seed."""
  words = _u32(jnp.asarray(seed).reshape(2))
  dt = _out_dtype(np.uint64)
  key = words[:1].astype(dt)
  counter = jnp.stack([words[1], jnp.uint32(0)]).astype(dt)
  return key, counter


def _seed_only_spec(st):
  return st.Spec(
    st.call(seed=_seed_strategy(st)),
    skip=dict(
      values="key/counter are tfprims' own scramble of the seed, not TF's Philox one",
      jvp="integer outputs",
      vjp="integer outputs",
    ),
  )


StatelessRandomGetKeyCounter = _define(
  "StatelessRandomGetKeyCounter",
  _get_key_counter,
  static=(),
  attrs=(),
  multiple_results=True,
  spec=_seed_only_spec,
)

_PHILOX = 1  # TF's RNG_ALG_PHILOX: what TF returns on CPU and GPU.

StatelessRandomGetKeyCounterAlg = _define(
  "StatelessRandomGetKeyCounterAlg",
  lambda seed: (*_get_key_counter(seed), jnp.asarray(_PHILOX, jnp.int32)),
  static=(),
  attrs=(),
  multiple_results=True,
  spec=_seed_only_spec,
)
StatelessRandomGetAlg = _define(
  "StatelessRandomGetAlg",
  lambda: jnp.asarray(_PHILOX, jnp.int32),
  static=(),
  attrs=(),
  spec=lambda st: st.Spec(st.call(), note="Philox (1), as TF on CPU/GPU"),
)


# TF draws these from the OS's entropy; here they come from the call's rng= like the other
# stateful ops (so the same rng gives the same integers).
NonDeterministicInts = _define_stateful(
  "NonDeterministicInts",
  lambda key, *, shape, dtype: _full_int(wrap_key(key), shape, dtype),
  spec=lambda st: st.Spec(
    st.call(
      shape=_shape_arrays(st).map(lambda s: s.astype(np.int64)),
      dtype=st.dtypes(("int32", "int64", "uint32", "uint64")),
    ),
    skip=dict(
      RANDOM_SKIPS,
      values="TF's integers come from the OS's entropy; ours from rng= (jax.random bits)",
    ),
  ),
)
