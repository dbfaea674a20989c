"""``SobolSample``: points of Sobol's low-discrepancy sequence, bit for bit as TF's kernel.

TF's kernel (tensorflow/core/kernels/sobol_op.cc) returns points ``skip + 1`` to
``skip + num_results`` of the unscrambled sequence (point 0, all zeros, is never
returned), built from Joe and Kuo's direction numbers (new-joe-kuo-6.21201: 21201
dimensions, of which TF allows 21200). Point ``n`` is the XOR of the direction numbers
``v_k`` of the bits ``k`` set in the Gray code ``n ^ (n >> 1)``, read as a binary fraction.

The table: scipy (a dependency of jax) ships Joe and Kuo's primitive polynomials and
initial direction numbers (``scipy/stats/_sobol_direction_numbers.npz``). It is read
with numpy at the first trace (scipy itself is not imported) and the remaining direction
numbers follow Joe and Kuo's recurrence (their "Notes on generating Sobol sequences",
2008), as 32-bit fractions: every index below ``2**31`` (TF's bound) is exact.

TF's quirk, kept: the kernel scales by ``1. / (1 << num_digits)`` with ``num_digits``
the bit length of ``skip + end + 1`` (``end``: the end of the block of points a thread
computes); at ``num_digits = 31`` the int shift overflows to ``-2**31``, so every point
of a block ending at ``skip + end + 1 >= 2**30`` comes out negated. TF's blocks are
``max(512, ceil(num_results / threads))`` points; blocks of 512 are modelled, TF's own
when ``num_results <= 512 * threads`` (docs/semantics/random.md).
"""

from __future__ import annotations

import functools
import importlib.util
import os

import jax.numpy as jnp
import numpy as np

from tfprims import dtypes as tf_dtypes
from tfprims.core import register_op
from tfprims.ops.random.basic import FAMILY
from tfprims.ops.shared import scalar_int

_TABLE_DIMS = 21201  # rows of Joe and Kuo's new-joe-kuo-6.21201 table
MAX_DIM = 21200  # TF's kMaxSobolDim: one row fewer than the table
_BITS = 31  # point indices are below 2**31 (TF's num_results + skip bound)
_BLOCK = 512  # TF's kMinBlockSize: points per thread block (see above)
_INT32_MAX = 2**31 - 1


def _table_path() -> str:
  spec = importlib.util.find_spec("scipy")  # finds the package without importing it
  if spec is None or not spec.submodule_search_locations:
    raise ImportError(
      "SobolSample reads Joe and Kuo's direction numbers from scipy "
      "(a dependency of jax), which is not installed"
    )
  return os.path.join(
    list(spec.submodule_search_locations)[0], "stats", "_sobol_direction_numbers.npz"
  )


@functools.lru_cache(maxsize=1)
def _direction_numbers() -> np.ndarray:
  """uint32 ``[21201, 31]``: column ``c`` is direction number ``v_{c+1}`` of each
  dimension as a 32-bit fraction, ``m_{c+1} << (31 - c)``."""
  with np.load(_table_path()) as table:
    poly, vinit = table["poly"].astype(np.int64), table["vinit"].astype(np.int64)
  if poly.shape != (_TABLE_DIMS,) or vinit.shape[0] != _TABLE_DIMS:
    raise ValueError(
      f"unexpected Sobol direction-number table: poly {poly.shape}, vinit {vinit.shape}"
    )
  # Degree s of each primitive polynomial x^s + a_1 x^(s-1) + ... + a_(s-1) x + 1.
  degree = np.zeros(_TABLE_DIMS, np.int64)
  for b in range(1, 63):
    degree[(poly >> b) > 0] = b
  rows = np.arange(_TABLE_DIMS)
  m = np.zeros((_TABLE_DIMS, _BITS), np.int64)
  for c in range(_BITS):
    init = c < degree
    if c < vinit.shape[1]:
      m[init, c] = vinit[init, c]
    # m_k = 2 a_1 m_(k-1) ^ 4 a_2 m_(k-2) ^ ... ^ 2^s m_(k-s) ^ m_(k-s)   (k > s)
    rec = ~init
    back = m[rows, np.maximum(c - degree, 0)]
    value = back ^ (back << degree)
    for i in range(1, int(degree.max())):
      a_i = ((poly >> np.maximum(degree - i, 0)) & 1).astype(bool) & (i < degree)
      if c - i >= 0:
        value = value ^ np.where(a_i, m[:, c - i] << i, 0)
    m[rec, c] = value[rec]
  m[0] = 1  # the first dimension: van der Corput's sequence, every m_k = 1
  if np.any(m >= (np.int64(1) << (np.arange(_BITS) + 1))) or np.any(m % 2 == 0):
    raise ValueError("Sobol direction numbers out of range (corrupt table?)")
  return (m << (_BITS - np.arange(_BITS))).astype(np.uint32)


def _validate(dim: int, num_results: int) -> None:
  if dim < 1:
    raise ValueError("dim must be at least one")
  if dim > MAX_DIM:
    raise ValueError(f"dim must be at most {MAX_DIM}")
  if num_results < 1:
    raise ValueError("num_results must be at least one")


def _canonicalize(params, *_):
  dim, num_results = scalar_int(params["dim"]), scalar_int(params["num_results"])
  _validate(dim, num_results)
  return dict(params, dim=dim, num_results=num_results)


def _sobol(skip, *, dim, num_results, dtype):
  """Points ``skip + 1 .. skip + num_results`` of the unscrambled Sobol sequence in
  ``dim`` dimensions (TF's direction numbers), ``[num_results, dim]``."""
  dim, num_results = int(dim), int(num_results)
  _validate(dim, num_results)
  out_dtype = tf_dtypes.canonical_dtype(dtype)
  table = _direction_numbers()[:dim]
  u = jnp.uint32
  start = jnp.asarray(skip).astype(u) + u(1)
  n = start + jnp.arange(num_results, dtype=u)
  gray = n ^ (n >> u(1))
  acc = jnp.zeros((num_results, dim), u)
  for c in range(_BITS):
    bit = ((gray >> u(c)) & u(1)).astype(bool)
    acc = acc ^ jnp.where(bit[:, None], table[None, :, c], u(0))
  values = acc.astype(out_dtype) * out_dtype.type(2.0**-32)
  # TF's 1 << 31 overflow: blocks of 512 points ending at skip + end + 1 >= 2**30.
  ends = np.minimum((np.arange(num_results) // _BLOCK + 1) * _BLOCK, num_results)
  negated = start + jnp.asarray(ends, u) >= u(2**30)
  return jnp.where(negated[:, None], -values, values)


def _check(skip, *, dim, num_results, dtype):
  skip = jnp.asarray(skip)
  bad = (skip < 0) | (skip >= _INT32_MAX - int(num_results))
  return bad, (f"skip must be non-negative, and num_results+skip must be less than {_INT32_MAX}")


def _spec(st):
  @st.composite
  def calls(d):
    dim = d(
      st.sampled_from([1, 2, 3, 5, 8]) | st.integers(1, 300) | st.integers(MAX_DIM - 40, MAX_DIM)
    )
    small = dim > 300 or d(st.booleans())
    num_results = d(
      st.integers(1, 8)
      if small
      else (st.integers(1, 64) | st.integers(1, 1200 if dim <= 8 else 200))
    )
    top = _INT32_MAX - 1 - num_results
    near = st.integers(2**30 - num_results - 3, 2**30 + 2)
    far = (
      st.integers(0, 2000)
      | st.integers(0, top)
      | st.sampled_from([2**k - 1 for k in range(1, 31)] + [top])
    )
    # TF's blocks differ from 512 above 512 * threads points (see the module doc).
    skip = d(far if num_results > _BLOCK else (far | near))
    skip = min(skip, top)
    if num_results > _BLOCK and 2**30 - num_results - 2 < skip < 2**30:
      skip = 2**30
    return dict(
      dim=np.asarray(dim, np.int32),
      num_results=np.asarray(num_results, np.int32),
      skip=np.asarray(skip, np.int32),
      dtype=d(st.dtypes(("float32", "float64"))),
    )

  return st.Spec(
    calls(),
    rtol=0.0,
    atol=0.0,
    note="bit for bit; skip + num_results + 1 >= 2**30 gives TF's negated "
    "points, modelled for blocks of 512 (TF's blocks when num_results "
    "<= 512 * its CPU threads)",
  )


SobolSample = register_op(
  "SobolSample",
  _sobol,
  family=FAMILY,
  static=("dim", "num_results"),
  attrs=("dtype",),
  canonicalize=_canonicalize,
  check=_check,
  doc="Points skip + 1 .. skip + num_results of the unscrambled Sobol sequence in dim "
  "dimensions (Joe and Kuo's direction numbers), [num_results, dim], bit for bit as TF.",
  spec=_spec,
)
