"""Band and diagonal ops: MatrixBandPart, MatrixDiag, MatrixDiagPart (V1 and V3),
MatrixSetDiagV3.

MatrixBandPart is linear in its input, with itself as JVP and transpose; the
other ops use the derived rules (their impls gather with static indices). The V3
ops take ``k`` (and MatrixDiagV3 its ``num_rows``/``num_cols``) as static params;
``padding_value`` gets no gradient, as in TF.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from tfprims import rules
from tfprims.core import register_op, tfops
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
  return ((lower < 0) | (rows - cols <= lower)) & ((upper < 0) | (cols - rows <= upper))


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


def _layout(xp, d, m, n, max_len, align):
  """Lengths of diagonals ``d`` (an int array) of an m x n matrix, and where each one's
  first element sits in a row of ``max_len`` (``align``: SUPER_SUB, the side that shorter
  super- and subdiagonals are flush with; the main diagonal follows either's LEFT)."""
  length = xp.minimum(m + xp.minimum(d, 0), n - xp.maximum(d, 0))
  sup, sub = align.split("_")
  left = ((d >= 0) & (sup == "LEFT")) | ((d <= 0) & (sub == "LEFT"))
  return length, xp.where(left, 0, max_len - length)


def _check_diagonals(lo, hi, m, n):
  for d in (lo, hi):
    if not (-m < d < n or d == 0):
      raise ValueError(f"diagonal index {d} is out of bounds: it must be between {-m} and {n}")


def _max_len(lo, hi, m, n):
  """The longest of diagonals lo..hi of an m x n matrix."""
  return jax.core.max_dim(0, jax.core.min_dim(m + min(hi, 0), n - max(lo, 0)))


def _from_diagonals(xp, lo, hi, m, n, max_len, align):
  """For each element (r, c) of an m x n matrix: whether it lies on diagonals lo..hi, and
  its index in their [num, max_len] stack flattened."""
  r, c = xp.arange(m)[:, None], xp.arange(n)[None, :]
  d = c - r
  _, offset = _layout(xp, d, m, n, max_len, align)
  valid = (d >= lo) & (d <= hi)
  src = (hi - d) * max_len + c - xp.maximum(d, 0) + offset
  return valid, xp.where(valid, src, 0).astype(np.int32)


def _take_last(x, index):
  """``x[..., index]`` for an int array ``index`` of any shape."""
  flat = jnp.take(x, jnp.asarray(index).reshape(-1), axis=-1)
  return flat.reshape(x.shape[:-1] + tuple(index.shape))


# The index tables below are numpy constants where the sizes are known and the program's
# (jax.numpy on iotas) where one is a symbolic dim of a jax.export (tf.eye(batch)).


def _matrix_diag_part_v3(x, padding_value, *, k, align):
  """Diagonals ``k`` (scalar or [lo, hi]) of the innermost matrices, stacked from
  the highest and padded with ``padding_value`` per ``align``."""
  lo, hi = _diag_range(k)
  m, n = x.shape[-2], x.shape[-1]
  xp = rules.numpy_for((m, n))
  if xp is np:
    _check_diagonals(lo, hi, m, n)
  max_len = _max_len(lo, hi, m, n)
  d = hi - xp.arange(hi - lo + 1)[:, None]
  length, offset = _layout(xp, d, m, n, max_len, align)
  t = xp.arange(max_len)[None, :] - offset
  valid = (t >= 0) & (t < length)
  index = xp.where(valid, (t - xp.minimum(d, 0)) * n + t + xp.maximum(d, 0), 0)
  padding_value = lax.stop_gradient(padding_value)  # TF: no gradient for it
  flat = x.reshape(x.shape[:-2] + (m * n,))
  if xp is np and m * n == 0:
    gathered = jnp.zeros(x.shape[:-2] + index.shape, x.dtype)
  else:
    gathered = _take_last(flat, index.astype(np.int32))
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
  (m,), (n,) = rules.sizes(num_rows), rules.sizes(num_cols)
  if rules.known((m, n)) and m == -1 and n == -1:
    m = n = jax.core.max_dim(min_rows, min_cols)
  elif rules.known((m,)) and m == -1:
    m = min_rows
  elif rules.known((n,)) and n == -1:
    n = min_cols
  xp = rules.numpy_for((m, n, max_len))
  if xp is np:  # TF checks symbolic sizes when the program runs; a jax.export cannot
    if m < min_rows:
      raise ValueError("The number of rows is too small.")
    if n < min_cols:
      raise ValueError("The number of columns is too small.")
    if lo != hi and max_len != _max_len(lo, hi, m, n):
      raise ValueError("The length of diagonal doesn't match the matrix shape.")
  valid, src = _from_diagonals(xp, lo, hi, m, n, max_len, align)
  padding_value = lax.stop_gradient(padding_value)  # TF: no gradient for it
  flat = diag.reshape(diag.shape[:-2] + (num * max_len,))
  if xp is np and num * max_len == 0:
    gathered = jnp.zeros(diag.shape[:-2] + (m, n), diag.dtype)
  else:
    gathered = _take_last(flat, src)
  return jnp.where(valid, gathered, jnp.asarray(padding_value, diag.dtype))


def _matrix_diag(diagonal):
  """MatrixDiag (V1): ``diagonal[..., n]`` -> ``[..., n, n]``, zeros off the diagonal."""
  n = diagonal.shape[-1]
  xp = rules.numpy_for((n,))
  eye = xp.arange(n)[:, None] == xp.arange(n)[None, :]
  return jnp.where(eye, diagonal[..., None, :], jnp.zeros((), diagonal.dtype))


def _matrix_diag_part(x):
  """MatrixDiagPart (V1): the main diagonal, of length min(rows, cols)."""
  return jnp.diagonal(x, axis1=-2, axis2=-1)


def _matrix_set_diag_v3(x, diagonal, *, k, align):
  """``x`` with diagonals ``k`` replaced by ``diagonal`` (aligned per ``align``)."""
  lo, hi = _diag_range(k)
  m, n = x.shape[-2], x.shape[-1]
  xp = rules.numpy_for((m, n))
  diag = diagonal if lo != hi else diagonal[..., None, :]
  num, max_len = hi - lo + 1, _max_len(lo, hi, m, n)
  if xp is np:
    _check_diagonals(lo, hi, m, n)
    if diag.shape[-2:] != (num, max_len) or diag.shape[:-2] != x.shape[:-2]:
      raise ValueError(
        f"diagonal must have shape "
        f"{x.shape[:-2] + ((num,) if lo != hi else ())} + ({max_len},); "
        f"got {diagonal.shape}"
      )
  valid, src = _from_diagonals(xp, lo, hi, m, n, max_len, align)
  if xp is np and not valid.any():
    return x
  flat = diag.reshape(diag.shape[:-2] + (num * max_len,))
  return jnp.where(valid, _take_last(flat, src), x)


# ---------------------------------------------------------------------------
# Specs


def _band_calls(st):
  @st.composite
  def draw(draw):
    dtype = draw(st.dtypes(st.NUMERIC + st.COMPLEX + ("bool",)))
    shape = tuple(draw(st.shapes(min_rank=2, max_rank=4)))
    idx = draw(st.sampled_from(["int32", "int64"]))
    # TF requires num_lower <= rows and num_upper <= cols.
    return {
      "input": draw(st.arrays(dtype, shape)),
      "num_lower": np.array(draw(st.integers(-1, shape[-2])), idx),
      "num_upper": np.array(draw(st.integers(-1, shape[-1])), idx),
    }

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
    return {
      "input": draw(st.arrays(dtype, shape)),
      "k": k,
      "padding_value": draw(st.arrays(dtype, ())),
      "align": draw(st.sampled_from(_ALIGNS)),
    }

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
    return {
      "diagonal": draw(st.arrays(dtype, dshape)),
      "k": k,
      "num_rows": np.array(rows, np.int32),
      "num_cols": np.array(cols, np.int32),
      "padding_value": draw(st.arrays(dtype, ())),
      "align": draw(st.sampled_from(_ALIGNS)),
    }

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
    if lo == hi:  # one diagonal (also for k = [lo, lo]): no num_diags dim
      k = np.array(lo, np.int32) if draw(st.booleans()) else np.array([lo, lo], np.int32)
      dshape = shape[:-2] + (max_len,)
    else:
      k, dshape = np.array([lo, hi], np.int32), shape[:-2] + (hi - lo + 1, max_len)
    return {
      "input": draw(st.arrays(dtype, shape)),
      "diagonal": draw(st.arrays(dtype, dshape)),
      "k": k,
      "align": draw(st.sampled_from(_ALIGNS)),
    }

  return draw()


# ---------------------------------------------------------------------------
# Ops

MatrixBandPart = register_op(
  "MatrixBandPart",
  _band_part,
  family=FAMILY,
  jvp=(lambda t, x, lo, hi: tfops.MatrixBandPart(t, lo, hi), None, None),
  transpose=lambda ct, x, lo, hi: [tfops.MatrixBandPart(ct, lo, hi) if U(x) else None, None, None],
  spec=lambda st: st.Spec(_band_calls(st)),
)

MatrixDiag = register_op(
  "MatrixDiag",
  _matrix_diag,
  family=FAMILY,
  spec=lambda st: st.Spec(
    st.call(
      diagonal=st.arrays(
        st.dtypes(st.NUMERIC + st.COMPLEX + ("bool",)), st.shapes(min_rank=1, max_rank=3)
      )
    )
  ),
)

MatrixDiagPart = register_op(
  "MatrixDiagPart",
  _matrix_diag_part,
  family=FAMILY,
  spec=lambda st: st.Spec(
    st.call(
      input=st.arrays(
        st.dtypes(st.NUMERIC + st.COMPLEX + ("bool",)), st.shapes(min_rank=2, max_rank=4)
      )
    )
  ),
)

MatrixDiagV3 = register_op(
  "MatrixDiagV3",
  _matrix_diag_v3,
  family=FAMILY,
  static=("k", "num_rows", "num_cols"),
  attrs=("align",),
  spec=lambda st: st.Spec(_diag_v3_calls(st)),
)

MatrixDiagPartV3 = register_op(
  "MatrixDiagPartV3",
  _matrix_diag_part_v3,
  family=FAMILY,
  static=("k",),
  attrs=("align",),
  spec=lambda st: st.Spec(_diag_part_v3_calls(st)),
)

MatrixSetDiagV3 = register_op(
  "MatrixSetDiagV3",
  _matrix_set_diag_v3,
  family=FAMILY,
  static=("k",),
  attrs=("align",),
  spec=lambda st: st.Spec(_set_diag_v3_calls(st)),
)
