"""tf.random.Generator's ops: ``StatefulUniform``, ``StatefulUniformInt``,
``StatefulUniformFullInt``, ``StatefulStandardNormalV2``, ``StatefulTruncatedNormal``,
``StatefulRandomBinomial``.

Each takes the generator's state variable (int64 ``[counter_lo, counter_hi, key]`` for
Philox) and advances its 128-bit counter. The primitive is pure: it takes the state's
*value* and returns ``(sample, new_state)``
(``tf.StatefulUniform[algorithm=1 dtype=float32 shape=(3,)] state``); the interpreter hook
reads the variable from the call's state and writes the new state back, so the state
comes back in ``new_params`` and threads through control flow (``writes_state``).

The key is the state's value (key word and counter words, as the stateless V2 ops make
theirs from ``key``/``counter``); numbers come from jax.random, not Philox. The counter
advances exactly as TF's CPU kernels advance it: by ``256 * num_elements`` for the
uniform/normal/int ops, and by ``256 * (num_batches * 200 * (samples_per_batch + 3) // 4)``
for the binomial (TF reserves 100 draws per output pair).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from tfprims import dtypes as tf_dtypes
from tfprims import errors, rules
from tfprims.core import register_op
from tfprims.interpreter import VariableHandle, bind_node
from tfprims.ops.random.basic import (
  FAMILY,
  RANDOM_FLOATS,
  RANDOM_SKIPS,
  _full_int,
  _key_counter_key,
  _normal,
  _out_dtype,
  _shape_arrays,
  _truncated_normal,
  _uniform,
  _uniform_int,
)
from tfprims.errors import import_tensorflow

_PHILOX, _THREEFRY, _AUTO = 1, 2, 3


def _state_key(state):
  """The JAX key of a Philox state ``[counter_lo, counter_hi, key, ...]``."""
  state = jnp.asarray(state)
  return _key_counter_key(state[2:3], state[0:2])


def advance_counter(state, delta: int):
  """The state with its 128-bit counter (words 0 and 1) advanced by ``delta``, with
  carry, as TF's ``PhiloxRandom::Skip``. With x64 off the state is int32 and only
  word 0 moves (wrapping), as ``RngReadAndSkip`` does."""
  state = jnp.asarray(state)
  if state.dtype.itemsize == 8:
    s = lax.bitcast_convert_type(state, jnp.uint64) if state.dtype != jnp.uint64 else state
    lo = s[0] + np.uint64(delta % 2**64)
    hi = s[1] + (lo < s[0]).astype(jnp.uint64)
    new = jnp.concatenate([jnp.stack([lo, hi]), s[2:]])
    return lax.bitcast_convert_type(new, state.dtype) if state.dtype != jnp.uint64 else new
  inc = (
    np.array(delta % 2**32, np.uint32).view(np.int32)
    if state.dtype == jnp.int32
    else np.array(delta % 2**32, np.uint32)
  )
  return state.at[0].add(inc.astype(state.dtype))


def _check_alg(op_type, algorithm, state_shape):
  if int(algorithm) not in (_PHILOX, _AUTO):
    raise errors.ConversionError(
      f"{op_type}: algorithm {int(algorithm)} is not supported (TF's CPU kernels run "
      "Philox (1) and auto-select (3, Philox) only)"
    )
  if len(state_shape) != 1 or state_shape[0] < 3:
    raise errors.ConversionError(
      f"{op_type}: for the Philox algorithm the state must be a vector of at least 3 "
      f"elements; got shape {tuple(state_shape)}"
    )


def _num_elements(shape):
  return int(np.prod(shape, dtype=np.int64)) if len(shape) else 1


def _stateful(op_type, draw, delta=None):
  """An impl ``(state, *rest, algorithm, shape, **attrs) -> (sample, new_state)``."""

  def impl(state, *rest, algorithm, shape, **attrs):
    _check_alg(op_type, algorithm, jnp.shape(state))
    n = delta(shape, *rest) if delta is not None else 256 * _num_elements(shape)
    out = draw(_state_key(state), *rest, shape=tuple(shape), **attrs)
    return out, advance_counter(state, n)

  return impl


def _interpret(op):
  def interpret(ctx, node, inputs):
    handle = inputs[0]
    if not isinstance(handle, VariableHandle):
      raise errors.UnsupportedInputError(
        f"{node.op} node '{node.name}' needs the generator's state variable captured by "
        "the function; got a value of another kind"
      )
    state = ctx.state[handle.key]
    out, new = bind_node(ctx, op, node, [state, *inputs[1:]])
    ctx.state[handle.key] = new
    return [out]

  return interpret


def _oracle(op_type):
  def oracle(resource, **kwargs):
    """TF oracle for the property runner: the drawn state becomes a real variable; the
    outputs are the sample and the variable's state afterwards."""
    tf = import_tensorflow()
    var = tf.Variable(resource)
    out = getattr(tf.raw_ops, op_type)(resource=var.handle, **kwargs)
    return out, var.read_value()

  oracle.__name__ = f"stateful_oracle_{op_type}"
  return oracle


_SKIPS = dict(
  RANDOM_SKIPS,
  values=(
    "random: numbers come from jax.random (threefry), not TF's Philox; the state advance "
    "is compared with TF's exactly in tests/test_random_more.py, distributions "
    "statistically"
  ),
)


def _state_strategy(st):
  # Values that fit 32 bits, so the x64-off shape check sees no overflow.
  return st.arrays(np.int64, st.just((3,)), min_value=0, max_value=2**31 - 1)


def _spec(st, op_type, extra):
  @st.composite
  def calls(d):
    out = dict(
      resource=d(_state_strategy(st)),
      algorithm=np.asarray(d(st.sampled_from((_PHILOX, _AUTO))), np.int64),
      shape=d(_shape_arrays(st)).astype(d(st.dtypes(("int32", "int64")))),
    )
    out.update(d(extra(st)))
    return out

  spec = st.Spec(
    calls(),
    skip=_SKIPS,
    note="the 'resource' input is drawn as the state's value; the oracle wraps "
    "it in a tf.Variable and also returns the state afterwards",
  )
  object.__setattr__(spec, "oracle", _oracle(op_type))
  return spec


def _define(op_type, draw, extra, *, attrs=("dtype",), delta=None, spec=None):
  return register_op(
    op_type,
    _stateful(op_type, draw, delta),
    family=FAMILY,
    static=("algorithm", "shape"),
    attrs=attrs,
    multiple_results=True,
    interpret=rules.per_op(_interpret),
    reads_state=True,
    writes_state=True,
    spec=spec or (lambda st: _spec(st, op_type, extra)),
  )


def _float_dtype(st):
  return st.fixed_dictionaries(dict(dtype=st.dtypes(RANDOM_FLOATS)))


StatefulUniform = _define(
  "StatefulUniform", lambda k, *, shape, dtype: _uniform(k, shape, dtype), _float_dtype
)
StatefulStandardNormalV2 = _define(
  "StatefulStandardNormalV2", lambda k, *, shape, dtype: _normal(k, shape, dtype), _float_dtype
)
StatefulTruncatedNormal = _define(
  "StatefulTruncatedNormal",
  lambda k, *, shape, dtype: _truncated_normal(k, shape, dtype),
  _float_dtype,
)
StatefulUniformFullInt = _define(
  "StatefulUniformFullInt",
  lambda k, *, shape, dtype: _full_int(k, shape, dtype),
  lambda st: st.fixed_dictionaries(dict(dtype=st.dtypes(("int32", "int64", "uint32", "uint64")))),
)


def _int_range(st):
  @st.composite
  def draw(d):
    dtype = d(st.dtypes(("int32", "int64")))
    lo = d(st.integers(-(2**31), 2**31 - 2))
    hi = d(st.integers(lo + 1, 2**31 - 1))
    return dict(minval=np.asarray(lo, dtype), maxval=np.asarray(hi, dtype))

  return draw()


StatefulUniformInt = _define(
  "StatefulUniformInt",
  lambda k, minval, maxval, *, shape, dtype: _uniform_int(k, shape, minval, maxval),
  _int_range,
)


# --- binomial -------------------------------------------------------------------------


def binomial(key, counts, probs, shape, dtype):
  """Binomial(counts, probs) samples of ``shape`` (which ends with the broadcast shape of
  counts and probs, as TF requires), in float64 for 64-bit parameters (x64 on), else
  float32, then cast to ``dtype``.

  The cases TF's kernel decides without sampling are TF's: 0 where counts <= 0 or
  probs <= 0 (-0.0 and negative values included), counts itself where probs >= 1
  (not rounded: 0.5 stays 0.5), NaN where probs is NaN. Otherwise k ~ Binomial(
  floor(counts), q) with q = min(p, 1 - p), and the sample is k, or counts - k for
  p > 0.5 (as TF: counts not rounded); infinite counts give inf (NaN for p > 0.5, as
  TF). jax.random.binomial only sees q in (0, 0.5] and finite counts: its sampling
  loops run until every element is done, and q = -0.0 (log1p(0) = 0) or an infinite
  count never is (docs/semantics/random.md).
  """
  counts, probs = jnp.asarray(counts), jnp.asarray(probs)
  wide = counts.dtype in (jnp.float64, jnp.int64) and tf_dtypes.x64_enabled()
  compute = jnp.float64 if wide else jnp.float32
  n = jnp.broadcast_to(counts.astype(compute), shape)
  p = jnp.broadcast_to(probs.astype(compute), shape)
  zero = (n <= 0) | (p <= 0)
  full = ~zero & (p >= 1)
  sampled = ~zero & (p > 0) & (p < 1)  # NaN p: none of the three
  finite = jnp.isfinite(n)
  upper = p > 0.5
  q = jnp.where(sampled, jnp.where(upper, 1 - p, p), 0.5)
  trials = jnp.where(sampled & finite, jnp.floor(n), 0)
  k = jax.random.binomial(key, trials, q, shape=shape, dtype=compute)
  k = jnp.where(finite, k, n)
  out = jnp.where(upper, n - k, k)
  out = jnp.where(sampled, out, jnp.where(full, n, np.array(np.nan, compute)))
  out = jnp.where(zero, jnp.zeros((), compute), out)
  return out.astype(_out_dtype(dtype))


def binomial_batches(shape, counts, probs):
  """(num_batches, samples_per_batch) as TF's kernel splits ``shape``: the trailing
  dims are the broadcast shape of counts and probs."""
  bshape = np.broadcast_shapes(np.shape(counts), np.shape(probs))
  shape = tuple(shape)
  if len(bshape) > len(shape) or tuple(shape[len(shape) - len(bshape) :]) != tuple(bshape):
    raise errors.ConversionError(
      f"random binomial: shape {shape} must end with the broadcast shape {bshape} of "
      "counts and probs (TF: 'Shape passed in must end with broadcasted shape.')"
    )
  sample_dims = len(shape) - len(bshape)
  return _num_elements(shape[sample_dims:]), _num_elements(shape[:sample_dims])


def _binomial_delta(shape, counts, probs):
  batches, per_batch = binomial_batches(shape, counts, probs)
  return 256 * (batches * 2 * 100 * (per_batch + 3) // 4)


def _binomial_params(st):
  @st.composite
  def draw(d):
    dtype = d(st.dtypes(("float16", "float32", "float64", "int32", "int64")))
    bshape = d(st.shapes(max_rank=2, min_side=1, max_side=3))
    counts = d(st.arrays(dtype, bshape, special=False, min_value=0, max_value=20))
    probs = d(
      st.arrays(
        dtype,
        d(st.sampled_from([(), bshape[-1:] if bshape else ()])),
        special=False,
        min_value=0,
        max_value=1,
      )
    )
    return dict(
      counts=counts,
      probs=probs,
      dtype=d(st.dtypes(("float16", "float32", "float64", "int32", "int64"))),
      _bshape=bshape,
    )

  return draw()


def _binomial_spec(st):
  @st.composite
  def calls(d):
    params = d(_binomial_params(st))
    bshape = params.pop("_bshape")
    lead = d(st.shapes(max_rank=1, max_side=3))
    return dict(
      resource=d(_state_strategy(st)),
      algorithm=np.asarray(_PHILOX, np.int64),
      # int32 only: TF's kernel reads the shape as int32 and aborts the
      # process (a CHECK failure) on an int64 shape.
      shape=np.asarray(tuple(lead) + tuple(bshape), np.int32),
      **params,
    )

  spec = st.Spec(
    calls(),
    skip=_SKIPS,
    examples=0.5,
    note="the 'resource' input is drawn as the state's value; the oracle wraps "
    "it in a tf.Variable and also returns the state afterwards",
  )
  object.__setattr__(spec, "oracle", _oracle("StatefulRandomBinomial"))
  return spec


StatefulRandomBinomial = _define(
  "StatefulRandomBinomial",
  lambda k, counts, probs, *, shape, dtype: binomial(k, counts, probs, shape, dtype),
  None,
  delta=_binomial_delta,
  spec=_binomial_spec,
)
