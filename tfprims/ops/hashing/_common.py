"""The decimal strings of integers as bytes, and TF's three string hashes over them.

An integer tensor's ``AsString`` is never materialized as strings: each element's
decimal form (at most 20 bytes: ``-9223372036854775808``, ``18446744073709551615``)
is laid out as a row of byte values (uint32, zero past its length) with its length,
and the hashes read the row with masks and per-length branches selected by the
length. Every 64-bit quantity is a pair of uint32 words (:mod:`.u64`), so this runs
with ``jax_enable_x64`` off.
"""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np
from jax import lax

from tfprims.ops.hashing import u64

U32 = jnp.uint32
DIGITS = 20  # the most decimal digits of a 64-bit integer
WIDTH = 24  # bytes per row: the longest string (20 with its sign) and room to read past it


# --- integers -> decimal bytes ---------------------------------------------------------------


def to_pair(x):
  """An integer array as the ``(hi, lo)`` words of its 64-bit value (signed types
  sign-extended, unsigned zero-extended: a TF int64 narrowed to int32 when x64 is off
  has the same value)."""
  dt = np.dtype(x.dtype)
  if dt.itemsize == 8:
    return ((x >> 32) & 0xFFFFFFFF).astype(U32), (x & 0xFFFFFFFF).astype(U32)
  if dt.kind == "u":
    return u64.from_u32(x.astype(U32))
  x32 = x.astype(jnp.int32)
  return jnp.where(x32 < 0, U32(0xFFFFFFFF), U32(0)), lax.bitcast_convert_type(x32, U32)


def _divmod(limbs, d: int):
  """``(limbs // d, limbs % d)`` of a number held as 16-bit limbs (most significant
  first, each in a uint32), ``d <= 10^4``: long division, every partial value below
  ``d * 2^16 < 2^32``."""
  out, r = [], jnp.zeros_like(limbs[0])
  for limb in limbs:
    cur = (r << U32(16)) | limb
    out.append(cur // U32(d))
    r = cur % U32(d)
  return out, r


def _select(onehot, values):
  """Per row, the entry of ``values`` (last axis) where ``onehot`` is set (0 if none)."""
  return jnp.max(jnp.where(onehot, values, U32(0)), axis=-1)


def decimal_bytes(x, positive_prefix: str = ""):
  """The bytes of ``printf("%d")`` of each element of integer array ``x`` (``%u`` for
  unsigned types) as uint32 values, shape ``x.shape + (WIDTH,)``, zero past the end,
  and the lengths (int32). ``positive_prefix`` ("+" or " ", printf's flags) leads
  non-negative values of signed types."""
  hi, lo = to_pair(x)
  signed = np.dtype(x.dtype).kind == "i"
  negative = (hi >> U32(31)).astype(bool) if signed else jnp.zeros(hi.shape, bool)
  mag = u64.where(negative, u64.neg((hi, lo)), (hi, lo))
  limbs = [mag[0] >> U32(16), mag[0] & U32(0xFFFF), mag[1] >> U32(16), mag[1] & U32(0xFFFF)]
  groups = []  # 4-digit groups, least significant first
  for _ in range(DIGITS // 4):
    limbs, g = _divmod(limbs, 10_000)
    groups.append(g)
  groups = jnp.stack(groups, axis=-1)[..., None]
  digits = (groups // U32(10) ** jnp.arange(4, dtype=U32)) % U32(10)
  digits = digits.reshape(digits.shape[:-2] + (DIGITS,))  # least significant first
  place = jnp.arange(1, DIGITS + 1, dtype=jnp.int32)
  ndigits = jnp.max(jnp.where(digits != 0, place, 1), axis=-1)
  prefix = negative | (bool(positive_prefix) and signed)
  length = ndigits + prefix.astype(jnp.int32)
  i = jnp.arange(WIDTH, dtype=jnp.int32)
  k = (length[..., None] - 1 - i)[..., None]  # the digit at byte i
  chars = _select(k == jnp.arange(DIGITS, dtype=jnp.int32), digits[..., None, :])
  chars = chars + U32(ord("0"))
  sign = jnp.where(negative, U32(ord("-")), U32(ord(positive_prefix or "-")))
  chars = jnp.where((i == 0) & prefix[..., None], sign[..., None], chars)
  return jnp.where(i < length[..., None], chars, U32(0)), length


# --- reading bytes ---------------------------------------------------------------------------


def words32(b):
  """The little-endian uint32 at every byte offset 0 .. WIDTH - 4 (last axis)."""
  n = WIDTH - 3
  return (
    b[..., 0:n]
    | (b[..., 1 : n + 1] << U32(8))
    | (b[..., 2 : n + 2] << U32(16))
    | (b[..., 3 : n + 3] << U32(24))
  )


def fetch32(words, offset):
  """The uint32 at per-row byte ``offset`` (an int array or a static int) of a row's
  :func:`words32`."""
  if isinstance(offset, int):
    return words[..., offset]
  return _select(offset[..., None] == jnp.arange(words.shape[-1], dtype=jnp.int32), words)


def fetch64(words, offset):
  """The little-endian 64-bit word at byte ``offset``, as a pair."""
  return fetch32(words, offset + 4), fetch32(words, offset)


def fetch_many(words, offsets):
  """:func:`fetch32` at several per-row offsets, in one selection."""
  offsets = jnp.stack(offsets, axis=-1)[..., None]
  hit = offsets == jnp.arange(words.shape[-1], dtype=jnp.int32)
  found = _select(hit, words[..., None, :])
  return [found[..., j] for j in range(found.shape[-1])]


def byte(words, i):
  return fetch32(words, i) & U32(0xFF)


def _len64(n):
  return u64.from_u32(n.astype(U32))


# --- Fingerprint64 (farmhash::Fingerprint64 = farmhashna::Hash64): StringToHashBucketFast ----

K0, K1, K2 = 0xC3A5C85C97CB3127, 0xB492B66FBE98F273, 0x9AE16A3B2F90404F


def _shift_mix(v):
  return u64.xor(v, u64.shr(v, 47))


def _hash_len16(u, v, mul):
  a = _shift_mix(u64.mul(u64.xor(u, v), mul))
  b = _shift_mix(u64.mul(u64.xor(v, a), mul))
  return u64.mul(b, mul)


def fingerprint64(b, n):
  """farmhash's ``Fingerprint64`` of rows of 1..32 bytes (``farmhashna::Hash64``:
  ``HashLen0to16`` and ``HashLen17to32``): each length range's inputs computed, the
  row's selected, one ``HashLen16``."""
  w = words32(b)
  mul = u64.add(u64.const(K2), u64.shl(_len64(n), 1))
  mid, last, w4, w8, w12, w16 = fetch_many(w, [n >> 1, n - 1, n - 4, n - 8, n - 12, n - 16])
  # 1..3 bytes
  y = byte(w, 0) + ((mid & U32(0xFF)) << U32(8))
  z = n.astype(U32) + ((last & U32(0xFF)) << U32(2))
  h3 = u64.mul(_shift_mix(u64.xor(u64.mul(u64.from_u32(y), K2), u64.mul(u64.from_u32(z), K0))), K2)
  # 4..7 bytes: HashLen16(len + (a << 3), Fetch32(s + len - 4), mul)
  u7 = u64.add(_len64(n), u64.shl(u64.from_u32(fetch32(w, 0)), 3))
  v7 = u64.from_u32(w4)
  # 8..16 bytes
  a = u64.add(fetch64(w, 0), K2)
  tail = (w4, w8)
  u16 = u64.add(u64.mul(u64.rotr(tail, 37), mul), a)
  v16 = u64.mul(u64.add(u64.rotr(a, 25), tail), mul)
  # 17..32 bytes
  a = u64.mul(fetch64(w, 0), K1)
  bb = fetch64(w, 8)
  c = u64.mul(tail, mul)
  d = u64.mul((w12, w16), K2)
  u32 = u64.add(u64.add(u64.rotr(u64.add(a, bb), 43), u64.rotr(c, 30)), d)
  v32 = u64.add(u64.add(a, u64.rotr(u64.add(bb, K2), 18)), c)
  u = u64.where(n <= 7, u7, u64.where(n <= 16, u16, u32))
  v = u64.where(n <= 7, v7, u64.where(n <= 16, v16, v32))
  return u64.where(n <= 3, h3, _hash_len16(u, v, mul))


# --- SipHash-2-4 (TF's StrongKeyedHash, highwayhash::SipHash): StringToHashBucketStrong -----


def _sip_round(v):
  v0, v1, v2, v3 = v
  v0 = u64.add(v0, v1)
  v1 = u64.xor(u64.rotl(v1, 13), v0)
  v0 = u64.rotl(v0, 32)
  v2 = u64.add(v2, v3)
  v3 = u64.xor(u64.rotl(v3, 16), v2)
  v0 = u64.add(v0, v3)
  v3 = u64.xor(u64.rotl(v3, 21), v0)
  v2 = u64.add(v2, v1)
  v1 = u64.xor(u64.rotl(v1, 17), v2)
  v2 = u64.rotl(v2, 32)
  return v0, v1, v2, v3


def _rounds(v, count: int):
  for _ in range(count):
    v = _sip_round(v)
  return v


def siphash(b, n, key):
  """SipHash-2-4 with the 128-bit ``key`` (two Python ints) of rows of at most 23 bytes
  (zero past ``n``): blocks ``0 .. n // 8``, the last one holding the remaining bytes
  and the length in its top byte (unrolled and masked: XLA compiles that faster than
  loops)."""
  w = words32(b)
  like = n.astype(U32)
  k0, k1 = u64.const(key[0], like), u64.const(key[1], like)
  v = (
    u64.xor(k0, 0x736F6D6570736575),
    u64.xor(k1, 0x646F72616E646F6D),
    u64.xor(k0, 0x6C7967656E657261),
    u64.xor(k1, 0x7465646279746573),
  )
  length = u64.shl(_len64(n & 0xFF), 56)
  for i in range(3):
    m = fetch64(w, 8 * i)
    m = u64.where(i == n // 8, u64.or_(m, length), m)
    v0, v1, v2, v3 = _rounds((v[0], v[1], v[2], u64.xor(v[3], m)), 2)
    moved = (u64.xor(v0, m), v1, v2, v3)
    v = tuple(u64.where(i <= n // 8, new, old) for new, old in zip(moved, v))
  v0, v1, v2, v3 = v
  v = _rounds((v0, v1, u64.xor(v2, 0xFF), v3), 4)
  return u64.xor(u64.xor(v[0], v[1]), u64.xor(v[2], v[3]))


# --- Hash64 (TF's MurmurHash64A variant, seed 0xDECAFCAFFE): StringToHashBucket -------------

_M = 0xC6A4A7935BD1E995


def hash64(b, n, seed: int = 0xDECAFCAFFE):
  """TF's ``Hash64`` (lib/hash/hash.cc) of rows of at most 23 bytes (zero past ``n``):
  the full 8-byte blocks, the remaining bytes, the final mix (unrolled and masked)."""
  w = words32(b)
  h = u64.xor(u64.const(seed, n.astype(U32)), u64.mul(_len64(n), _M))
  for i in range(3):
    word = fetch64(w, 8 * i)
    k = u64.mul(word, _M)
    k = u64.mul(u64.xor(k, u64.shr(k, 47)), _M)
    full = u64.mul(u64.xor(h, k), _M)
    # the remaining bytes (zero past the end), when there are any
    part = u64.mul(u64.xor(h, word), _M)
    h = u64.where(i < n // 8, full, u64.where((i == n // 8) & (n % 8 != 0), part, h))
  h = u64.xor(h, u64.shr(h, 47))
  h = u64.mul(h, _M)
  return u64.xor(h, u64.shr(h, 47))
