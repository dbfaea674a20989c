"""Feature crosses hashed as TF's cross kernels do, shared by the sparse family
(SparseCross, SparseCrossHashed) and the ragged family (RaggedCross).

A cross is one feature of each input, the last input varying fastest (numpy's
``meshgrid(..., indexing="ij")`` order, TF's ``NextCombination``); its hash folds the
features with ``FingerprintCat64`` from a key (or from the first feature), then the
remainder by ``num_buckets`` (``2^63 - 1`` when 0). The 64-bit arithmetic runs on
uint32 word pairs (:mod:`tfprims.ops.hashing.u64`), so x64 off works (values then fit
in int32; the bucket is int32, so ``num_buckets`` must be in ``[1, 2^31]``).
"""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np
from jax import lax

from tfprims import errors
from tfprims import dtypes as tf_dtypes
from tfprims.ops.hashing import u64
from tfprims.ops.hashing._common import K2 as _K2, _hash_len16, _shift_mix

_KMUL = 0xC6A4A7935BD1E995
INT64_MAX = (1 << 63) - 1


def fingerprint_low4(x):
  """farmhash ``Fingerprint64`` of the 4 little-endian low bytes of integers."""
  if x.dtype.itemsize == 8:
    lo = (x & 0xFFFFFFFF).astype(jnp.uint32)
  else:
    lo = lax.bitcast_convert_type(x.astype(jnp.int32), jnp.uint32)
  word = u64.from_u32(lo)
  return _hash_len16(u64.add(u64.shl(word, 3), 4), word, u64.const(_K2 + 8, lo))


def as_pair(x):
  """A signed integer as its 64-bit two's complement pair (sign-extended)."""
  if x.dtype.itemsize == 8:
    return (x >> 32).astype(jnp.uint32), (x & 0xFFFFFFFF).astype(jnp.uint32)
  lo = lax.bitcast_convert_type(x.astype(jnp.int32), jnp.uint32)
  return jnp.where(x < 0, jnp.uint32(0xFFFFFFFF), jnp.uint32(0)), lo


def fingerprint_cat64(fp1, fp2):
  """TF's ``FingerprintCat64``."""
  out = u64.xor(fp1, _KMUL)
  out = u64.xor(out, u64.mul(_shift_mix(u64.mul(fp2, _KMUL)), _KMUL))
  out = u64.mul(out, _KMUL)
  out = u64.mul(_shift_mix(out), _KMUL)
  return _shift_mix(out)


def check_num_buckets(num_buckets: int):
  """TF's attr bound (``num_buckets >= 0``) and, with x64 off, the int32 bucket's."""
  if num_buckets < 0:
    raise ValueError(f"num_buckets must be non-negative, got {num_buckets}")
  if not tf_dtypes.x64_enabled() and not 1 <= num_buckets <= 1 << 31:
    raise errors.Int64OverflowError(
      f"num_buckets={num_buckets}: the crossed hash (TF's int64) is int32 with "
      "jax_enable_x64 off, so num_buckets must be in [1, 2^31]; enable x64"
    )


def int64_dtype():
  """int64 as JAX holds it (int32 with x64 off)."""
  return tf_dtypes.canonical_dtype(np.dtype(np.int64))


def _to_int64(pair):
  hi, lo = pair
  out = int64_dtype()
  if out.itemsize == 8:
    return (hi.astype(out) << 32) | lo.astype(out)
  return lax.bitcast_convert_type(lo, jnp.int32)


def cross_positions(per_input, batch: int):
  """``per_input[k][b]``: input k's feature positions in batch row b (numpy). Returns
  each cross's position in every input (an int64 ``[crosses, inputs]`` table, rows in
  order) and each row's cross count."""
  positions, counts = [], np.zeros(batch, np.int64)
  for b in range(batch):
    if not per_input:  # no features: TF's kernel gives no row (the batch size is 0)
      break
    rows = np.stack(np.meshgrid(*[p[b] for p in per_input], indexing="ij"), -1)
    rows = rows.reshape(-1, len(per_input))
    positions.append(rows)
    counts[b] = len(rows)
  if not positions:
    return np.zeros((0, len(per_input)), np.int64), counts
  return np.concatenate(positions).astype(np.int64), counts


def hash_crosses(feats, positions, num_buckets: int, first):
  """The crosses' buckets: ``feats`` (one 64-bit pair of flat features per input)
  gathered at ``positions`` and folded with FingerprintCat64 from ``first`` (a key,
  or None to start from the first feature), modulo ``num_buckets`` (``2^63 - 1`` when
  0); TF's int64 as JAX holds it."""
  if len(positions) == 0:
    return jnp.zeros((0,), int64_dtype())
  at = jnp.asarray(positions[:, 0].astype(np.int32))
  hashed = None if first is None else u64.const(first, at)
  for k, (hi, lo) in enumerate(feats):
    at = jnp.asarray(positions[:, k].astype(np.int32))
    f = (hi[at], lo[at])
    hashed = f if hashed is None else fingerprint_cat64(hashed, f)
  return _to_int64(u64.mod(hashed, num_buckets if num_buckets > 0 else INT64_MAX))
