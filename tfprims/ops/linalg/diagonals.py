"""Band and diagonal ops: MatrixBandPart, MatrixDiag, MatrixDiagPart (V1 and V3),
MatrixSetDiagV3.

MatrixBandPart is linear in its input, with itself as JVP and transpose; the
other ops use the derived rules (their impls gather with static indices). The V3
ops take ``k`` (and MatrixDiagV3 its ``num_rows``/``num_cols``) as static params;
``padding_value`` gets no gradient, as in TF.
"""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np
from jax import lax

from tfprims import rules
from tfprims.core import define_op, tfops
from tfprims.ops.linalg._common import FAMILY

U = rules.U

# ---------------------------------------------------------------------------
# Impls


def _band_mask(shape, num_lower, num_upper):
  m, n = shape[-2], shape[-1]
  rows = lax.broadcasted_iota(np.int32, (m, n), 0)
  cols = lax.broadcasted_iota(np.int32, (m, n), 1)
  lower = jnp.asarray(num_lower).astype(np.int32)
  upper = jnp.asarray(num_upper).astype(np.int32)
  return (((lower < 0) | (rows - cols <= lower)) &
          ((upper < 0) | (cols - rows <= upper)))


def _band_part(x, num_lower, num_upper):
  """Keeps the band ``-num_lower <= col - row <= num_upper`` (negative: whole triangle)."""
  mask = _band_mask(x.shape, num_lower, num_upper)
  return jnp.where(mask, x, jnp.zeros((), x.dtype))


def _diag_range(k):
  ks = np.asarray(k).reshape(-1)
  if ks.size not in (1, 2):
    raise ValueError(f"diagonal index k must be a scalar or a pair, got {k!r}")
  lo, hi = int(ks[0]), int(ks[-1])
  if lo > hi:
    raise ValueError(f"lower diagonal index {lo} must not exceed upper index {hi}")
  return lo, hi


def _left_aligned(d: int, align: str) -> bool:
  sup, sub = align.split("_")
  return (d >= 0 and sup == "LEFT") or (d <= 0 and sub == "LEFT")


def _diag_len(m, n, d):
  return min(m + min(d, 0), n - max(d, 0))


def _matrix_diag_part_v3(x, padding_value, *, k, align):
  """Diagonals ``k`` (scalar or [lo, hi]) of the innermost matrices, stacked from
  the highest and padded with ``padding_value`` per ``align``."""
  lo, hi = _diag_range(k)
  m, n = x.shape[-2], x.shape[-1]
  for d in (lo, hi):
    if not (-m < d < n or d == 0):
      raise ValueError(f"diagonal index {d} is out of bounds: it must be between {-m} "
                       f"and {n}")
  max_len = max(0, min(m + min(hi, 0), n - max(lo, 0)))
  num = hi - lo + 1
  rows = np.zeros((num, max_len), np.int64)
  cols = np.zeros((num, max_len), np.int64)
  valid = np.zeros((num, max_len), bool)
  for i in range(num):
    d = hi - i
    length = max(_diag_len(m, n, d), 0)
    offset = 0 if _left_aligned(d, align) else max_len - length
    for j in range(max_len):
      t = j - offset
      if 0 <= t < length:
        rows[i, j], cols[i, j], valid[i, j] = t - min(d, 0), t + max(d, 0), True
  padding_value = lax.stop_gradient(padding_value)   # TF: no gradient for it
  flat = x.reshape(x.shape[:-2] + (m * n,))
  idx = (rows * n + cols).reshape(-1)
  if m * n == 0:
    gathered = jnp.zeros(x.shape[:-2] + (idx.size,), x.dtype)
  else:
    gathered = jnp.take(flat, jnp.asarray(idx, np.int32), axis=-1)
  gathered = gathered.reshape(x.shape[:-2] + (num, max_len))
  out = jnp.where(valid, gathered, jnp.asarray(padding_value, x.dtype))
  return out[..., 0, :] if lo == hi else out


def _matrix_diag_v3(diagonal, padding_value, *, k, num_rows, num_cols, align):
  """Matrices with ``diagonal`` on diagonals ``k``, ``padding_value`` elsewhere."""
  lo, hi = _diag_range(k)
  diag = diagonal if lo != hi else diagonal[..., None, :]
  num, max_len = diag.shape[-2], diag.shape[-1]
  if num != hi - lo + 1:
    raise ValueError(f"diagonal has {num} diagonals, k={k!r} needs {hi - lo + 1}")
  min_rows = max_len - min(hi, 0)
  min_cols = max_len + max(lo, 0)
  m, n = int(num_rows), int(num_cols)
  if m == -1 and n == -1:
    m = n = max(min_rows, min_cols)
  elif m == -1:
    m = min_rows
  elif n == -1:
    n = min_cols
  if m < min_rows:
    raise ValueError("The number of rows is too small.")
  if n < min_cols:
    raise ValueError("The number of columns is too small.")
  if lo != hi and max_len != max(_diag_len(m, n, d) for d in range(lo, hi + 1)):
    raise ValueError("The length of diagonal doesn't match the matrix shape.")
  src = np.zeros((m, n), np.int64)
  valid = np.zeros((m, n), bool)
  for r in range(m):
    for c in range(n):
      d = c - r
      if lo <= d <= hi:
        i = hi - d
        length = _diag_len(m, n, d)
        offset = 0 if _left_aligned(d, align) else max_len - length
        src[r, c], valid[r, c] = i * max_len + (c - max(d, 0)) + offset, True
  padding_value = lax.stop_gradient(padding_value)   # TF: no gradient for it
  flat = diag.reshape(diag.shape[:-2] + (num * max_len,))
  if num * max_len == 0:
    gathered = jnp.zeros(diag.shape[:-2] + (m * n,), diag.dtype)
  else:
    gathered = jnp.take(flat, jnp.asarray(src.reshape(-1), np.int32), axis=-1)
  gathered = gathered.reshape(diag.shape[:-2] + (m, n))
  return jnp.where(valid, gathered, jnp.asarray(padding_value, diag.dtype))


def _matrix_diag(diagonal):
  """MatrixDiag (V1): ``diagonal[..., n]`` -> ``[..., n, n]``, zeros off the diagonal."""
  n = diagonal.shape[-1]
  eye = np.eye(n, dtype=bool)
  return jnp.where(eye, diagonal[..., None, :], jnp.zeros((), diagonal.dtype))


def _matrix_diag_part(x):
  """MatrixDiagPart (V1): the main diagonal, of length min(rows, cols)."""
  return jnp.diagonal(x, axis1=-2, axis2=-1)


def _matrix_set_diag_v3(x, diagonal, *, k, align):
  """``x`` with diagonals ``k`` replaced by ``diagonal`` (aligned per ``align``)."""
  lo, hi = _diag_range(k)
  m, n = x.shape[-2], x.shape[-1]
  for d in (lo, hi):
    if not (-m < d < n or d == 0):
      raise ValueError(f"diagonal index {d} is out of bounds: it must be between {-m} "
                       f"and {n}")
  diag = diagonal if lo != hi else diagonal[..., None, :]
  num, max_len = hi - lo + 1, max(0, min(m + min(hi, 0), n - max(lo, 0)))
  if diag.shape[-2:] != (num, max_len) or diag.shape[:-2] != x.shape[:-2]:
    raise ValueError(f"diagonal must have shape {x.shape[:-2] + ((num,) if lo != hi else ())}"
                     f" + ({max_len},); got {diagonal.shape}")
  src = np.zeros((m, n), np.int64)
  valid = np.zeros((m, n), bool)
  for r in range(m):
    for c in range(n):
      d = c - r
      if lo <= d <= hi:
        offset = 0 if _left_aligned(d, align) else max_len - _diag_len(m, n, d)
        src[r, c], valid[r, c] = (hi - d) * max_len + (c - max(d, 0)) + offset, True
  if not valid.any():
    return x
  flat = diag.reshape(diag.shape[:-2] + (num * max_len,))
  gathered = jnp.take(flat, jnp.asarray(src.reshape(-1), np.int32), axis=-1)
  return jnp.where(valid, gathered.reshape(x.shape), x)


# ---------------------------------------------------------------------------
# Specs


def _band_calls(st):
  @st.composite
  def draw(draw):
    dtype = draw(st.dtypes(st.NUMERIC + st.COMPLEX + ("bool",)))
    shape = tuple(draw(st.shapes(min_rank=2, max_rank=4)))
    idx = draw(st.sampled_from(["int32", "int64"]))
    # TF requires num_lower <= rows and num_upper <= cols.
    return {"input": draw(st.arrays(dtype, shape)),
            "num_lower": np.array(draw(st.integers(-1, shape[-2])), idx),
            "num_upper": np.array(draw(st.integers(-1, shape[-1])), idx)}
  return draw()


_ALIGNS = ("RIGHT_LEFT", "LEFT_RIGHT", "LEFT_LEFT", "RIGHT_RIGHT")


def _diag_part_v3_calls(st):
  @st.composite
  def draw(draw):
    dtype = draw(st.dtypes(st.NUMERIC + st.COMPLEX + ("bool",)))
    shape = tuple(draw(st.shapes(min_rank=2, max_rank=4, min_side=1)))
    m, n = shape[-2:]
    lo = draw(st.integers(-m + 1, n - 1))
    hi = draw(st.integers(lo, n - 1))
    k = np.array(lo, np.int32) if draw(st.booleans()) and lo == hi else np.array([lo, hi], np.int32)
    return {"input": draw(st.arrays(dtype, shape)), "k": k,
            "padding_value": draw(st.arrays(dtype, ())),
            "align": draw(st.sampled_from(_ALIGNS))}
  return draw()


def _diag_v3_calls(st):
  @st.composite
  def draw(draw):
    dtype = draw(st.dtypes(st.NUMERIC + st.COMPLEX + ("bool",)))
    lo = draw(st.integers(-3, 3))
    hi = draw(st.integers(lo, min(lo + 2, 3)))
    batch = tuple(draw(st.shapes(max_rank=2, max_side=3)))
    max_len = draw(st.integers(1, 3))
    if lo == hi:
      dshape = batch + (max_len,)
      k = np.array(lo, np.int32) if draw(st.booleans()) else np.array([lo, lo], np.int32)
    else:
      dshape = batch + (hi - lo + 1, max_len)
      k = np.array([lo, hi], np.int32)
    min_rows, min_cols = max_len - min(hi, 0), max_len + max(lo, 0)
    rows = draw(st.sampled_from([-1, min_rows, min_rows + 1]))
    cols = draw(st.sampled_from([-1, min_cols, min_cols + 1]))
    return {"diagonal": draw(st.arrays(dtype, dshape)), "k": k,
            "num_rows": np.array(rows, np.int32), "num_cols": np.array(cols, np.int32),
            "padding_value": draw(st.arrays(dtype, ())),
            "align": draw(st.sampled_from(_ALIGNS))}
  return draw()


def _set_diag_v3_calls(st):
  @st.composite
  def draw(draw):
    dtype = draw(st.dtypes(st.NUMERIC + st.COMPLEX + ("bool",)))
    shape = tuple(draw(st.shapes(min_rank=2, max_rank=4, min_side=1)))
    m, n = shape[-2:]
    lo = draw(st.integers(-m + 1, n - 1))
    hi = draw(st.integers(lo, n - 1))
    max_len = max(0, min(m + min(hi, 0), n - max(lo, 0)))
    if lo == hi:   # one diagonal (also for k = [lo, lo]): no num_diags dim
      k = np.array(lo, np.int32) if draw(st.booleans()) else np.array([lo, lo], np.int32)
      dshape = shape[:-2] + (max_len,)
    else:
      k, dshape = np.array([lo, hi], np.int32), shape[:-2] + (hi - lo + 1, max_len)
    return {"input": draw(st.arrays(dtype, shape)), "diagonal": draw(st.arrays(dtype, dshape)),
            "k": k, "align": draw(st.sampled_from(_ALIGNS))}
  return draw()


# ---------------------------------------------------------------------------
# Ops

MatrixBandPart = define_op(
    "MatrixBandPart", _band_part, family=FAMILY,
    jvp=(lambda t, x, lo, hi: tfops.MatrixBandPart(t, lo, hi), None, None),
    transpose=lambda ct, x, lo, hi: [
        tfops.MatrixBandPart(ct, lo, hi) if U(x) else None, None, None],
    spec=lambda st: st.Spec(_band_calls(st)))

MatrixDiag = define_op(
    "MatrixDiag", _matrix_diag, family=FAMILY,
    spec=lambda st: st.Spec(st.call(diagonal=st.arrays(
        st.dtypes(st.NUMERIC + st.COMPLEX + ("bool",)), st.shapes(min_rank=1, max_rank=3)))))

MatrixDiagPart = define_op(
    "MatrixDiagPart", _matrix_diag_part, family=FAMILY,
    spec=lambda st: st.Spec(st.call(input=st.arrays(
        st.dtypes(st.NUMERIC + st.COMPLEX + ("bool",)), st.shapes(min_rank=2, max_rank=4)))))

MatrixDiagV3 = define_op(
    "MatrixDiagV3", _matrix_diag_v3, family=FAMILY,
    static=("k", "num_rows", "num_cols"), attrs=("align",),
    spec=lambda st: st.Spec(_diag_v3_calls(st)))

MatrixDiagPartV3 = define_op(
    "MatrixDiagPartV3", _matrix_diag_part_v3, family=FAMILY, static=("k",), attrs=("align",),
    spec=lambda st: st.Spec(_diag_part_v3_calls(st)))

MatrixSetDiagV3 = define_op(
    "MatrixSetDiagV3", _matrix_set_diag_v3, family=FAMILY, static=("k",), attrs=("align",),
    spec=lambda st: st.Spec(_set_diag_v3_calls(st)))
