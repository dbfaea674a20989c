"""Unsigned 64-bit arithmetic on pairs of uint32 words ``(hi, lo)``.

With ``jax_enable_x64`` off (JAX's default) there is no uint64 dtype, so TF's 64-bit
string hashes (farmhash, SipHash, TF's Hash64) are computed on word pairs: wrapping
add, sub and multiply (modulo 2^64), xor, or, shifts and rotations by static amounts,
comparisons and the remainder by a static modulus. The same code runs with x64 on.
Constants are Python ints.
"""

from __future__ import annotations

import jax.numpy as jnp
from jax import lax

U32 = jnp.uint32
MASK32 = 0xFFFFFFFF
MASK64 = (1 << 64) - 1


def const(value: int, like=None):
  """The pair of a Python int (modulo 2^64), broadcast like ``like``'s words."""
  value &= MASK64
  hi, lo = U32(value >> 32), U32(value & MASK32)
  if like is not None:
    hi, lo = jnp.full_like(like, hi, U32), jnp.full_like(like, lo, U32)
  return hi, lo


def from_u32(x):
  """A uint32 word as the pair ``(0, x)``."""
  return jnp.zeros_like(x, U32), x.astype(U32)


def _c(b, like):
  return const(b) if isinstance(b, int) else b


def xor(a, b):
  b = _c(b, a)
  return a[0] ^ b[0], a[1] ^ b[1]


def or_(a, b):
  b = _c(b, a)
  return a[0] | b[0], a[1] | b[1]


def add(a, b):
  b = _c(b, a)
  lo = a[1] + b[1]
  carry = (lo < a[1]).astype(U32)
  return a[0] + b[0] + carry, lo


def sub(a, b):
  b = _c(b, a)
  borrow = (a[1] < b[1]).astype(U32)
  return a[0] - b[0] - borrow, a[1] - b[1]


def neg(a):
  """Two's complement negation (``0 - a``)."""
  return sub(const(0), a)


def mul32_wide(a, b):
  """The full 64-bit product ``(hi, lo)`` of uint32 words ``a`` and ``b`` (16-bit
  halves: no 64-bit integers needed)."""
  a_lo, a_hi = a & U32(0xFFFF), a >> U32(16)
  b_lo, b_hi = b & U32(0xFFFF), b >> U32(16)
  ll, lh, hl, hh = a_lo * b_lo, a_lo * b_hi, a_hi * b_lo, a_hi * b_hi
  mid = (ll >> U32(16)) + (lh & U32(0xFFFF)) + (hl & U32(0xFFFF))
  hi = hh + (lh >> U32(16)) + (hl >> U32(16)) + (mid >> U32(16))
  return hi, a * b


def mul(a, b):
  """``a * b`` modulo 2^64."""
  b = _c(b, a)
  hi, lo = mul32_wide(a[1], b[1])
  return hi + a[0] * b[1] + a[1] * b[0], lo


def shr(a, k: int):
  """Logical shift right by a static ``k`` in [0, 64)."""
  hi, lo = a
  if k == 0:
    return a
  if k >= 32:
    return jnp.zeros_like(hi), hi >> U32(k - 32) if k > 32 else hi
  return hi >> U32(k), (lo >> U32(k)) | (hi << U32(32 - k))


def shl(a, k: int):
  """Shift left by a static ``k`` in [0, 64)."""
  hi, lo = a
  if k == 0:
    return a
  if k >= 32:
    return lo << U32(k - 32) if k > 32 else lo, jnp.zeros_like(lo)
  return (hi << U32(k)) | (lo >> U32(32 - k)), lo << U32(k)


def rotr(a, k: int):
  """Rotate right by a static ``k``."""
  k %= 64
  if k == 0:
    return a
  return or_(shr(a, k), shl(a, 64 - k))


def rotl(a, k: int):
  """Rotate left by a static ``k``."""
  return rotr(a, 64 - k % 64)


def ge(a, b):
  """``a >= b`` (unsigned)."""
  b = _c(b, a)
  return (a[0] > b[0]) | ((a[0] == b[0]) & (a[1] >= b[1]))


def where(cond, a, b):
  return jnp.where(cond, a[0], b[0]), jnp.where(cond, a[1], b[1])


def mod(a, n: int):
  """``a mod n`` for a static ``n`` in [1, 2^63]: a pair below ``n``.

  ``n <= 2^16``: from the words' remainders (every product fits in 32 bits); larger
  ``n``: binary long division, one bit per step (the remainder stays below 2^63, so
  doubling it cannot overflow)."""
  hi, lo = a
  if n == 1:
    return jnp.zeros_like(hi), jnp.zeros_like(lo)
  if n <= 1 << 16:
    r = ((hi % U32(n)) * U32((1 << 32) % n) + lo % U32(n)) % U32(n)
    return jnp.zeros_like(hi), r
  if n > 1 << 63:
    raise ValueError(f"modulus {n} is larger than 2^63")

  def step(i, r):
    j = 63 - i  # the bit of a shifted in now, from the top
    word = jnp.where(j >= 32, hi, lo)
    bit = (word >> (j % 32).astype(U32)) & U32(1)
    r = or_(shl(r, 1), from_u32(bit))
    return where(ge(r, n), sub(r, n), r)

  zero = jnp.zeros_like(hi)
  return lax.fori_loop(0, 64, step, (zero, zero))
