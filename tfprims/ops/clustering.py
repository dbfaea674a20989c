"""TF's clustering ops (``tf.compat.v1.estimator.experimental.KMeans``, ``gen_clustering_ops``):
``NearestNeighbors``, ``KMC2ChainInitialization`` and ``KmeansPlusPlusInitialization``.

All three are deterministic, as TF's kernels (``clustering_ops.cc``):

* ``NearestNeighbors``: per point the ``k`` centers of smallest
  ``|c|^2 / 2 - <p, c>``, ties to the lower index (TF's ``minCoeff`` for k = 1 and its
  top-n of (distance, index) pairs otherwise); distances ``2 * (|p|^2 / 2 + that)``.
* The two initializations draw from TF's own generator, reproduced here bit for bit:
  ``PhiloxRandom(seed)`` (key = the seed's two 32-bit words, counter 0) read one 32-bit
  word at a time as ``SimplePhilox`` does (``RandFloat``: the word's low 23 bits as the
  mantissa of [1, 2), minus 1; ``Uniform64(n)``: two words, low first, rejection below
  ``(2^64 - 1) % n + 1``, then modulo ``n``). The same seed gives TF's result whenever
  the float arithmetic agrees (the distances and sums are float32 in both; XLA may sum in
  another order, which matters only for values not exactly representable).
"""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np
from jax import lax

from tfprims import dtypes as tf_dtypes
from tfprims.core import register_op

FAMILY = "clustering"

# --- TF's Philox generator (philox_random.h, simple_philox.h) ----------------------------

_M = (0xD2511F53, 0xCD9E8D57)
_W = (0x9E3779B9, 0xBB67AE85)
_U32 = jnp.uint32


def _mulhilo(a: int, b):
  """The high and low 32-bit words of the 64-bit product of the constant ``a`` and
  ``b`` (uint32), from 16-bit halves (no 64-bit integers needed)."""
  a_lo, a_hi = _U32(a & 0xFFFF), _U32(a >> 16)
  b_lo, b_hi = b & _U32(0xFFFF), b >> _U32(16)
  ll, lh, hl, hh = a_lo * b_lo, a_lo * b_hi, a_hi * b_lo, a_hi * b_hi
  mid = (ll >> _U32(16)) + (lh & _U32(0xFFFF)) + (hl & _U32(0xFFFF))
  hi = hh + (lh >> _U32(16)) + (hl >> _U32(16)) + (mid >> _U32(16))
  return hi, b * _U32(a)


def _philox_block(block, key):
  """The four words of Philox4x32-10 at counter ``(block, 0, 0, 0)`` (uint32 arrays);
  round ``r`` uses the key raised ``r`` times."""
  zero = jnp.zeros_like(block, _U32)

  def one_round(r, c):
    k0 = key[0] + _U32(_W[0]) * r.astype(_U32)
    k1 = key[1] + _U32(_W[1]) * r.astype(_U32)
    hi0, lo0 = _mulhilo(_M[0], c[0])
    hi1, lo1 = _mulhilo(_M[1], c[2])
    return (hi1 ^ c[1] ^ k0, lo1, hi0 ^ c[3] ^ k1, lo0)

  c = lax.fori_loop(0, 10, one_round, (block.astype(_U32), zero, zero, zero))
  return jnp.stack(c, axis=-1)


def _key(seed):
  """``PhiloxRandom(uint64 seed)``'s key: the seed's low and high words (a 32-bit seed,
  with x64 off, is sign-extended as TF's int64 would be)."""
  seed = jnp.asarray(seed)
  if seed.dtype.itemsize == 8:
    lo, hi = (seed & 0xFFFFFFFF).astype(_U32), (seed >> 32).astype(_U32)
  else:
    lo = lax.bitcast_convert_type(seed.astype(jnp.int32), _U32)
    hi = jnp.where(seed < 0, _U32(0xFFFFFFFF), _U32(0))
  return lo, hi


def _words(key, start, count: int):
  """Words ``start .. start + count - 1`` of the stream (``start`` may be traced)."""
  pos = start + jnp.arange(count, dtype=jnp.int32)
  blocks = _philox_block((pos // 4).astype(_U32), key)
  return jnp.take_along_axis(blocks, (pos % 4)[:, None], axis=1)[:, 0]


def _word_to_float(w):
  """``Uint32ToFloat``: a float in [0, 1) from the low 23 bits."""
  bits = _U32(127 << 23) | (w & _U32(0x7FFFFF))
  return lax.bitcast_convert_type(bits, jnp.float32) - np.float32(1.0)


def _rand_float(key, pos):
  return _word_to_float(_words(key, pos, 1)[0]), pos + 1


def _mulmod(a, b: int, n: int):
  """``a * b mod n`` for uint32 ``a < n`` and Python ints ``b < n < 2^31``."""
  if n <= 1 << 16:  # the product fits in 32 bits
    return (a * _U32(b)) % _U32(n)
  r = jnp.zeros_like(a)
  for bit in reversed(range(max(b.bit_length(), 1))):
    r = (r + r) % _U32(n)
    if (b >> bit) & 1:
      r = (r + a) % _U32(n)
  return r


def _uniform64(key, pos, n: int):
  """``SimplePhilox::Uniform64(n)`` (``ExactUniformInt``) for a static ``n`` < 2^31."""
  if n & (n - 1) == 0:
    lo = _words(key, pos, 2)[0]
    return (lo & _U32(n - 1)).astype(jnp.int32), pos + 2
  rem = ((1 << 64) - 1) % n + 1  # < n < 2^31: only a zero high word can be below it

  def cond(c):
    w = c[1]
    return (w[1] == 0) & (w[0] < _U32(rem))

  def body(c):
    p = c[0]
    return p + 2, _words(key, p, 2)

  pos, (lo, hi) = lax.while_loop(cond, body, (pos + 2, _words(key, pos, 2)))
  value = (_mulmod(hi % _U32(n), (1 << 32) % n, n) + lo % _U32(n)) % _U32(n)
  return value.astype(jnp.int32), pos


def _index_dtype():
  return tf_dtypes.canonical_dtype(np.dtype(np.int64))


# --- NearestNeighbors ------------------------------------------------------------------------


def _nearest_neighbors(points, centers, *, k):
  """Per point, the ``min(k, num_centers)`` nearest centers (lower index on ties) and
  their squared distances, as TF's kernel computes them."""
  if points.ndim != 2 or centers.ndim != 2:
    raise ValueError("NearestNeighbors: points and centers should be matrices")
  if points.shape[0] == 0:
    raise ValueError("NearestNeighbors: Expected points.rows() > 0.")
  if points.shape[1] != centers.shape[1]:
    raise ValueError(
      f"NearestNeighbors: Expected point_dimensions == center_dimensions: "
      f"{points.shape[1]} vs {centers.shape[1]}."
    )
  if k < 0:
    raise ValueError("NearestNeighbors: Expected k >= 0.")
  k = min(int(k), centers.shape[0])
  half = np.float32(0.5)
  p_half = half * jnp.sum(points * points, axis=1)
  c_half = half * jnp.sum(centers * centers, axis=1)
  partial = c_half[None, :] - jnp.matmul(points, centers.T, precision=lax.Precision.HIGHEST)
  order = jnp.argsort(partial, axis=1, stable=True)[:, :k]  # (distance, index) order
  nearest = jnp.take_along_axis(partial, order, axis=1)
  return (order.astype(_index_dtype()), np.float32(2.0) * (p_half[:, None] + nearest))


def _nearest_spec(st):
  @st.composite
  def calls(d):
    n, m, dim = d(st.integers(1, 5)), d(st.integers(0, 5)), d(st.integers(1, 3))

    # Halves of small integers: exact arithmetic, so ties are real ties.
    def grid(shape):
      return (d(st.arrays(np.int32, shape, special=False, min_value=-4, max_value=4)) / 2).astype(
        np.float32
      )

    return dict(points=grid((n, dim)), centers=grid((m, dim)), k=np.int64(d(st.integers(0, m + 1))))

  return st.Spec(
    calls(),
    note="points and centers on a half-integer grid (exact "
    "distances, so tied centers test TF's lower-index rule)",
  )


NearestNeighbors = register_op(
  "NearestNeighbors",
  _nearest_neighbors,
  family=FAMILY,
  static=("k",),
  multiple_results=True,
  spec=_nearest_spec,
)


# --- KMC2ChainInitialization -----------------------------------------------------------------


def _kmc2(distances, seed):
  """The last state of TF's k-MC^2 Markov chain over the candidates: candidate ``i``
  replaces the state when ``d_i > u_i * d_state`` (``u_i`` TF's Philox floats)."""
  if distances.ndim != 1:
    raise ValueError("KMC2ChainInitialization: Input distances should be a vector.")
  n = distances.shape[0]
  if n == 0:
    raise ValueError("KMC2ChainInitialization: Expected distances_tensor.size() > 0.")
  u = _word_to_float(_words(_key(seed), 0, n - 1)) if n > 1 else jnp.zeros((0,), jnp.float32)

  def step(carry, x):
    index, selected = carry
    i, d, r = x
    take = d > r * selected
    return (jnp.where(take, i, index), jnp.where(take, d, selected)), None

  (index, _), _ = lax.scan(
    step,
    (jnp.asarray(0, jnp.int32), distances[0]),
    (jnp.arange(1, n, dtype=jnp.int32), distances[1:], u),
  )
  return index.astype(_index_dtype())


def _seed(st, d):
  return np.int64(d(st.integers(-(2**40), 2**40)))


def _kmc2_spec(st):
  @st.composite
  def calls(d):
    n = d(st.integers(1, 12))
    return dict(
      distances=d(st.arrays(np.float32, (n,), special=False, min_value=0, max_value=10)),
      seed=_seed(st, d),
    )

  return st.Spec(calls(), note="TF's Philox stream reproduced: the same index as TF")


KMC2ChainInitialization = register_op(
  "KMC2ChainInitialization", _kmc2, family=FAMILY, spec=_kmc2_spec
)


# --- KmeansPlusPlusInitialization ------------------------------------------------------------


def _kmeans_pp(points, seed, *, num_to_sample, num_retries_per_sample):
  """TF's k-means++ seeding: the first center uniformly (``Uniform64``), each next one
  with probability proportional to its squared distance to the chosen centers
  (``RandFloat`` times the total, searched in the running sum; chosen points redrawn;
  when the total is zero, i.e. fewer distinct points than samples, the search falls
  past the end: TF 2.21's kernel then reads past its points (undefined), tfprims takes
  the last point),
  keeping of ``1 + num_retries_per_sample`` draws the one of least total potential."""
  if points.ndim != 2:
    raise ValueError("KmeansPlusPlusInitialization: Input points should be a matrix.")
  n, dim = points.shape
  num_to_sample = int(num_to_sample)
  if n <= 0:
    raise ValueError("KmeansPlusPlusInitialization: Expected points.rows() > 0.")
  if num_to_sample <= 0:
    raise ValueError("KmeansPlusPlusInitialization: Expected num_to_sample > 0.")
  if num_to_sample > n:
    raise ValueError(
      f"KmeansPlusPlusInitialization: Expected num_to_sample <= "
      f"points.rows(). {num_to_sample} vs {n}."
    )
  num_to_sample, retries = int(num_to_sample), int(num_retries_per_sample)
  if retries < 0:
    retries = 2 + int(np.log(num_to_sample))
  key = _key(seed)
  half = np.float32(0.5) * jnp.sum(points * points, axis=1)

  def distances_to(index):
    y = points[index]
    dots = jnp.matmul(points, y, precision=lax.Precision.HIGHEST)
    return (half - dots) + half[index]

  def draw(pos, sampled, cumsum, first):
    if first:
      return _uniform64(key, pos, n)
    total = cumsum[n - 1]

    def one(p):
      # TF 2.21's kernel: an upper bound past the end (a zero total) is taken as the
      # last point (newer TF kernels draw uniformly there instead).
      r, p = _rand_float(key, p)
      index = jnp.searchsorted(cumsum, r * total, side="right", method="compare_all")
      return index.astype(jnp.int32), p

    def taken(c):
      return (c[0] < n) & sampled[jnp.minimum(c[0], n - 1)]

    index, pos = one(pos)
    index, pos = lax.while_loop(taken, lambda c: one(c[1]), (index, pos))
    return jnp.minimum(index, n - 1), pos

  def sample(i, state, first):
    pos, sampled, min_d, out = state
    cumsum = lax.cumsum(min_d)
    if retries == 0:
      index, pos = draw(pos, sampled, cumsum, first)
      min_d = jnp.minimum(min_d, distances_to(index))
    else:

      def retry(_, c):
        pos, best, best_index, best_d = c
        index, pos = draw(pos, sampled, cumsum, first)
        new_d = jnp.minimum(min_d, distances_to(index))
        potential = jnp.sum(new_d)
        better = potential < best
        return (
          pos,
          jnp.where(better, potential, best),
          jnp.where(better, index, best_index),
          jnp.where(better, new_d, best_d),
        )

      init = (pos, jnp.asarray(np.inf, jnp.float32), jnp.asarray(0, jnp.int32), min_d)
      pos, _, index, min_d = lax.fori_loop(0, 1 + retries, retry, init)
    return pos, sampled.at[index].set(True), min_d, out.at[i].set(points[index])

  state = (
    jnp.asarray(0, jnp.int32),
    jnp.zeros((n,), bool),
    jnp.full((n,), np.inf, jnp.float32),
    jnp.zeros((num_to_sample, dim), jnp.float32),
  )
  state = sample(0, state, True)
  if num_to_sample > 1:
    state = lax.fori_loop(1, num_to_sample, lambda i, s: sample(i, s, False), state)
  return state[3]


def _kmeans_pp_spec(st):
  @st.composite
  def calls(d):
    n, dim = d(st.integers(1, 8)), d(st.integers(1, 3))
    grid = d(st.arrays(np.int32, (n, dim), special=False, min_value=-6, max_value=6))
    # Distinct rows: with fewer distinct points than samples TF's kernel reads past the
    # end of its points (undefined).
    points = (np.unique(grid, axis=0) / 2).astype(np.float32)
    points = points[d(st.permutations(range(len(points))))]
    return dict(
      points=points,
      num_to_sample=np.int64(d(st.integers(1, len(points)))),
      seed=_seed(st, d),
      num_retries_per_sample=np.int64(d(st.integers(-1, 3))),
    )

  return st.Spec(
    calls(),
    skip={
      "jvp": "the samples are rows of points chosen by a random search (TF registers no gradient)",
      "vjp": "the samples are rows of points chosen by a random search (TF registers no gradient)",
    },
    note="TF's Philox stream reproduced; distinct points on a half-integer grid (exact "
    "sums, so the same choices as TF)",
  )


KmeansPlusPlusInitialization = register_op(
  "KmeansPlusPlusInitialization",
  _kmeans_pp,
  family=FAMILY,
  static=("num_to_sample", "num_retries_per_sample"),
  spec=_kmeans_pp_spec,
)
