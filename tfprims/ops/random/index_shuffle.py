"""``RandomIndexShuffle``: the position of ``index`` in a pseudorandom permutation of
``[0, max_index]`` keyed by a 3-word seed, bit for bit as TF's kernel.

TF's algorithm (tensorflow/core/kernels/random_index_shuffle.cc) is a cycle-walking
Simon block cipher: the block has ``B = max(bits + bits % 2, 16)`` bits, where
``bits = ceil(log2(max_index))``, split in two words of ``W = B / 2`` bits; the round keys
are Simon's key schedule from the seed words (each truncated to 32 bits, then to ``W``
bits); ``index`` is encrypted repeatedly until the result is ``<= max_index``. Here the
block size is per element (``max_index`` is an operand), all in uint64 (uint32 with x64
off, where every value fits 32 bits and ``W <= 16``).
"""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np
from jax import lax

from tfprims import dtypes as tf_dtypes
from tfprims.core import register_op
from tfprims.ops.random.basic import FAMILY

_Z = 0x7369F885192C0EF5  # Simon's z sequence, as TF's key schedule takes it
_C = 0xFFFFFFFC


def _bit_length(x, bits):
  return (bits - lax.clz(x)).astype(x.dtype)


def _index_shuffle(index, seed, max_index, *, rounds):
  index, seed, max_index = jnp.asarray(index), jnp.asarray(seed), jnp.asarray(max_index)
  out_dtype = index.dtype
  wide = tf_dtypes.x64_enabled()
  u = jnp.uint64 if wide else jnp.uint32
  nbits = 64 if wide else 32
  one = u(1)
  idx = index.astype(u)
  mx = max_index.astype(u)
  # Seed words: static_cast<uint32_t> of each element (the low 32 bits).
  words = (seed.astype(u) & u(0xFFFFFFFF)) if wide else seed.astype(u)
  n = max(np.size(index), np.size(max_index), np.size(seed) // 3)
  scalar_out = index.ndim == 0 and max_index.ndim == 0 and seed.ndim == 1
  shape = () if scalar_out else (n,)
  idx, mx = jnp.broadcast_to(idx, shape), jnp.broadcast_to(mx, shape)
  k0, k1, k2 = (jnp.broadcast_to(words[..., j], shape) for j in range(3))

  # ceil(log2(m)) as the bit length of m - 1 (exact; TF's double log2 agrees for
  # max_index < 2**40, see docs/semantics/random.md).
  bits = _bit_length(jnp.where(mx > 0, mx - one, u(0)), nbits)
  block = jnp.maximum(bits + (bits & one), u(16))
  w = block >> one
  mask = jnp.where(w >= u(nbits), ~u(0), (one << w) - one)

  def rotl(x, r):
    return ((x << u(r)) | (x >> (w - u(r)))) & mask

  def rotr(x, r):
    return ((x >> u(r)) | (x << (w - u(r)))) & mask

  def f(x):
    return (rotl(x, 1) & rotl(x, 8)) ^ rotl(x, 2)

  keys = [k0 & mask, k1 & mask, k2 & mask]
  c = u(_C) & mask
  for i in range(3, rounds):
    j = i - 3  # z is shifted right once per key: its bit j, if j < W
    zbit = jnp.where(u(j) < w, u((_Z >> j) & 1) if j < 64 else u(0), u(0))
    keys.append(c ^ zbit ^ keys[i - 3] ^ rotr(keys[i - 1], 3) ^ rotr(keys[i - 1], 4))

  def encrypt(v):
    left, right = (v >> w) & mask, v & mask
    for i in range(0, rounds - 1, 2):
      left = left ^ f(right) ^ keys[i]
      right = right ^ f(left) ^ keys[i + 1]
    return (left << w) | right

  # Cycle walking: a permutation cycle through index <= max_index returns to
  # [0, max_index] within 2**B steps (the cap only stops inputs TF itself never
  # finishes: index > max_index on a cycle above max_index).
  cap = jnp.where(block >= u(nbits), ~u(0), one << block)

  def cond(carry):
    v, steps = carry
    return jnp.any((v > mx) & (steps < cap))

  def body(carry):
    v, steps = carry
    active = (v > mx) & (steps < cap)
    return jnp.where(active, encrypt(v), v), steps + active.astype(u)

  v, _ = lax.while_loop(cond, body, (encrypt(idx), jnp.ones(shape, u)))
  return jnp.where(mx == 0, u(0), v).astype(out_dtype)


_INT_TYPES = ("int32", "uint32", "int64", "uint64")


def _spec(st):
  @st.composite
  def calls(d):
    dtype = d(st.dtypes(_INT_TYPES))
    n = d(st.integers(1, 4))
    vector = d(st.booleans())
    top = d(st.sampled_from([5, 300, 70000, 2**31 - 1]))
    mx = d(st.arrays(dtype, (n,) if vector else (), special=False, min_value=0, max_value=top))
    idx = np.minimum(
      d(st.arrays(dtype, (n,) if vector else (), special=False, min_value=0, max_value=top)), mx
    ).astype(dtype)
    seed_dtype = d(st.dtypes(_INT_TYPES))
    seed_shape = (n, 3) if vector and d(st.booleans()) else (3,)
    lo = 0 if seed_dtype.kind == "u" else -(2**31)
    seed = d(st.arrays(seed_dtype, seed_shape, special=False, min_value=lo, max_value=2**31 - 1))
    return dict(index=idx, seed=seed, max_index=mx, rounds=d(st.sampled_from([4, 6, 8])))

  return st.Spec(calls(), note="index <= max_index (TF's walk may never end otherwise)")


RandomIndexShuffle = register_op(
  "RandomIndexShuffle", _index_shuffle, family=FAMILY, attrs=("rounds",), spec=_spec
)
