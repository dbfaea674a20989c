"""Linear algebra: MatMul, BatchMatMul (V1/V2/V3), Einsum, band/diagonal ops,
Cholesky, MatrixInverse, MatrixDeterminant, Cross.

MatMul and BatchMatMul/V2 have TF-named rules: JVPs with the same op, transposes
written as TF's gradients are (MatMul with transpose flags, BatchMatMulV2 with
adjoint flags, Sum + Reshape to undo batch broadcasting), and batching that
re-binds ``tf.BatchMatMulV2`` (a vmapped MatMul becomes a BatchMatMulV2; an
unbatched operand is passed as is since BatchMatMulV2 broadcasts batch dims).
Einsum re-binds itself under vmap with an extra label. The other ops use the
derived rules. Semantics chosen where TF raises or is platform-dependent:
docs/semantics/reductions_linalg.md.
"""

from __future__ import annotations

import string

import jax.numpy as jnp
import numpy as np
from jax import lax
from jax.interpreters import ad

from tfprims import dtypes as tfdtypes
from tfprims.core import define_op
from tfprims.ops.reductions import Sum, moveaxis, reshape, tf_op, transpose as tf_transpose

U = ad.is_undefined_primal
FAMILY = "linalg"


def _shape(x):
  return tuple(x.aval.shape) if U(x) else tuple(jnp.shape(x))


def _dtype(x):
  return x.aval.dtype if U(x) else jnp.result_type(x)


def _is_complex(dtype) -> bool:
  return jnp.issubdtype(dtype, jnp.complexfloating)


def _conj(x):
  if not _is_complex(_dtype(x)):
    return x
  return tf_op("Conj", {"input": x}, fallback=lambda: jnp.conj(x))


def _swap_last(x):
  """Swaps the last two axes with tf.Transpose."""
  nd = len(_shape(x))
  return tf_transpose(x, tuple(range(nd - 2)) + (nd - 1, nd - 2))


def _unbroadcast(x, shape):
  """Sums ``x`` down to ``shape`` with tf.Sum + tf.Reshape (batch broadcasting)."""
  shape = tuple(shape)
  xs = _shape(x)
  if xs == shape:
    return x
  lead = len(xs) - len(shape)
  axes = tuple(range(lead)) + tuple(
      lead + i for i, n in enumerate(shape) if n == 1 and xs[lead + i] != 1)
  if axes:
    x = Sum(x, axis=axes, keep_dims=False)
  return reshape(x, shape)


# ---------------------------------------------------------------------------
# MatMul / BatchMatMul


def _matmul(a, b, *, transpose_a, transpose_b):
  """``a @ b`` with plain (not conjugate) transposes; jnp's default precision."""
  return jnp.matmul(a.T if transpose_a else a, b.T if transpose_b else b)


def _matmul_transpose(ct, a, b, *, transpose_a, transpose_b):
  """TF's _MatMulGrad, in MatMul ops (no conjugation: JAX transposes are linear)."""
  ga = gb = None
  if U(a):
    if not transpose_a:
      ga = MatMul(ct, b, transpose_a=False, transpose_b=not transpose_b)
    else:
      ga = MatMul(b, ct, transpose_a=transpose_b, transpose_b=True)
  if U(b):
    if not transpose_b:
      gb = MatMul(a, ct, transpose_a=not transpose_a, transpose_b=False)
    else:
      gb = MatMul(ct, a, transpose_a=True, transpose_b=transpose_a)
  return [ga, gb]


def _matmul_batching(args, dims, *, transpose_a, transpose_b):
  """MatMul under vmap is tf.BatchMatMulV2 (its adj flags conjugate, so complex
  transposed operands are transposed with tf.Transpose first)."""
  (a, b), (da, db) = args, dims
  cplx = _is_complex(_dtype(a))

  def prep(x, d, flag):
    if d is not None and d != 0:
      x = moveaxis(x, d, 0)
    if flag and cplx:
      return _swap_last(x), False
    return x, flag

  a, adj_x = prep(a, da, transpose_a)
  b, adj_y = prep(b, db, transpose_b)
  return BatchMatMulV2(a, b, adj_x=adj_x, adj_y=adj_y), 0


def _adjoint(x, adj):
  return jnp.conj(jnp.swapaxes(x, -1, -2)) if adj else x


def _batch_matmul_v2(x, y, *, adj_x, adj_y):
  """Batched ``adj(x) @ adj(y)`` with numpy broadcasting of the batch dims."""
  return jnp.matmul(_adjoint(x, adj_x), _adjoint(y, adj_y))


def _batch_matmul_v1(x, y, *, adj_x, adj_y):
  """BatchMatMul (V1): both operands of one rank and equal batch dims (no broadcasting)."""
  if x.ndim != y.ndim or x.shape[:-2] != y.shape[:-2]:
    raise ValueError(f"BatchMatMul: In[0] and In[1] must have the same batch dims; got "
                     f"{x.shape} and {y.shape} (BatchMatMulV2 broadcasts them)")
  return _batch_matmul_v2(x, y, adj_x=adj_x, adj_y=adj_y)


def _batch_matmul_v3(x, y, *, adj_x, adj_y, Tout):  # noqa: N803  (TF attr name)
  """BatchMatMulV3: both operands cast to Tout (int8 x int8 -> int32 etc.)."""
  out = np.dtype(tfdtypes.canonical_dtype(Tout))
  return _batch_matmul_v2(x.astype(out), y.astype(out), adj_x=adj_x, adj_y=adj_y)


def _bmm_transpose(get_op, broadcast):
  """TF's _BatchMatMulV2Grad (adjoint flags). TF's gradient is the adjoint; the JAX
  transpose of these (conjugate-)linear maps is conj(TF's formula on conj(ct))."""
  def rule(ct, x, y, *, adj_x, adj_y):
    bmm = lambda a, b, ax=False, ay=False: get_op()(a, b, adj_x=ax, adj_y=ay)  # noqa: E731
    c = _conj(ct)
    gx = gy = None
    if U(x):
      if not adj_x:
        gx = bmm(c, y, False, not adj_y)
      else:
        gx = bmm(y, c, adj_y, True)
      gx = _conj(gx)
      if broadcast:
        gx = _unbroadcast(gx, _shape(x))
    if U(y):
      if not adj_y:
        gy = bmm(x, c, not adj_x, False)
      else:
        gy = bmm(c, x, True, adj_x)
      gy = _conj(gy)
      if broadcast:
        gy = _unbroadcast(gy, _shape(y))
    return [gx, gy]
  return rule


def _bmm_batching(get_op):
  """Re-binds ``get_op()`` (BatchMatMulV2 broadcasts batch dims right-aligned)
  with the vmapped dim as one more batch dim at output batch position ``t``,
  then moves it to the front of the result with tf.Transpose.

  ``t`` is where a batched operand already has its vmapped dim among its batch
  dims (else 0): that operand needs no transpose, and when both operands are
  batched at the same place neither does. An operand whose vmapped dim sits
  elsewhere is moved to ``t`` with tf.Transpose; batched operands with fewer
  batch dims get size-1 dims (tf.Reshape) in front, unbatched ones a size-1 dim
  at ``t`` where they span it. Transposing both operands by one batch
  permutation is what this avoids: XLA's CPU compiler miscompiles a dot whose
  two operands are transposed by the same cyclic batch permutation (a verifier
  error, or a CHECK abort in its AlgebraicSimplifier; the old rule, "batch dim
  to the front of both", emitted exactly that for ``in_axes=(2, 2)``; see
  test_vmap_of_batch_matmul_avoids_xla_transpose_bug).
  """
  def rule(args, dims, **params):
    ranks = [len(_shape(a)) - (d is not None) for a, d in zip(args, dims)]
    batch_rank = max(r - 2 for r in ranks)
    # Output batch positions 0..batch_rank; an operand's k batch dims align right.
    offsets = [batch_rank - (r - 2) for r in ranks]
    in_place = [o + d for d, r, o in zip(dims, ranks, offsets)
                if d is not None and d <= r - 2]
    t = in_place[0] if in_place else 0
    moved = []
    for a, d, o in zip(args, dims, offsets):
      if d is None:
        if t > o:  # it spans position t (its batch dims start at o + 1)
          s = _shape(a)
          a = reshape(a, s[:t - o] + (1,) + s[t - o:])
        moved.append(a)
        continue
      if t >= o:
        if d != t - o:
          a = moveaxis(a, d, t - o)
      else:
        if d != 0:
          a = moveaxis(a, d, 0)
        s = _shape(a)
        a = reshape(a, s[:1] + (1,) * (o - t) + s[1:])
      moved.append(a)
    out = get_op()(*moved, **params)
    return (moveaxis(out, t, 0) if t else out), 0
  return rule


def _jvp_first(get_op):
  return lambda t, x, y, **p: get_op()(t, y, **p)


def _jvp_second(get_op):
  return lambda t, x, y, **p: get_op()(x, t, **p)


# ---------------------------------------------------------------------------
# Einsum


def _split_equation(equation: str):
  equation = equation.replace(" ", "")
  if "->" not in equation:
    raise ValueError(f"Einsum: expecting exactly one '->' in equation {equation!r}")
  ins, out = equation.split("->")
  return ins.split(","), out


def _einsum(*inputs, equation):
  """TF Einsum (explicit ``->``, ellipsis broadcasting) with jnp's default precision."""
  _split_equation(equation)
  return jnp.einsum(equation, *inputs)


def _einsum_batching(args, dims, *, equation):
  """Re-binds tf.Einsum with a fresh label for the batch axis (moved to the front)."""
  ins, out = _split_equation(equation)
  free = [c for c in string.ascii_letters if c not in equation]
  label = free[0]
  new_ins, moved = [], []
  for sub, a, d in zip(ins, args, dims):
    if d is None:
      new_ins.append(sub)
      moved.append(a)
    else:
      new_ins.append(label + sub)
      moved.append(moveaxis(a, d, 0) if d != 0 else a)
  eq = ",".join(new_ins) + "->" + label + out
  return Einsum(*moved, equation=eq), 0


# ---------------------------------------------------------------------------
# Band and diagonal ops


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


# ---------------------------------------------------------------------------
# Decompositions and friends


def _cholesky(x):
  """Cholesky of the Hermitian matrix whose lower triangle is ``x``'s (TF reads only
  the lower triangle). Derivatives are those of the symmetrised input, as TF's
  gradient assumes a symmetric perturbation. Not positive definite: NaN."""
  lower = jnp.tril(x)
  herm = lower + jnp.conj(jnp.swapaxes(jnp.tril(x, -1), -1, -2))
  sym = (x + jnp.conj(jnp.swapaxes(x, -1, -2))) / np.array(2, x.dtype)
  used = sym + lax.stop_gradient(herm - sym)
  return lax.linalg.cholesky(used, symmetrize_input=False)


def _matrix_inverse(x, *, adjoint):
  """Inverse (of the adjoint); a singular matrix gives inf/NaN (TF raises)."""
  return jnp.linalg.inv(_adjoint(x, adjoint))


def _matrix_determinant(x):
  """Determinant; of a 0x0 matrix: 1."""
  if x.shape[-1] == 0:
    return jnp.ones(x.shape[:-2], x.dtype)
  return jnp.linalg.det(x)


def _matrix_solve(matrix, rhs, *, adjoint):
  """Solves ``adj(matrix) @ x = rhs``; equal batch dims (TF does not broadcast).
  A singular matrix gives inf/NaN (TF raises)."""
  if matrix.shape[:-2] != rhs.shape[:-2]:
    raise ValueError(f"MatrixSolve: matrix and rhs must have the same batch dims; got "
                     f"{matrix.shape} and {rhs.shape}")
  if matrix.shape[-1] == 0 or rhs.shape[-1] == 0:
    return jnp.zeros(rhs.shape, rhs.dtype)
  return jnp.linalg.solve(_adjoint(matrix, adjoint), rhs)


def _matrix_triangular_solve(matrix, rhs, *, lower, adjoint):
  """Triangular solve reading only the ``lower`` (or upper) triangle; batch dims
  broadcast (TF >= 2.2). A zero on the diagonal gives inf/NaN, as in TF."""
  batch = jnp.broadcast_shapes(matrix.shape[:-2], rhs.shape[:-2])
  matrix = jnp.broadcast_to(matrix, batch + matrix.shape[-2:])
  rhs = jnp.broadcast_to(rhs, batch + rhs.shape[-2:])
  if matrix.shape[-1] == 0 or rhs.shape[-1] == 0:
    return jnp.zeros(rhs.shape, rhs.dtype)
  return lax.linalg.triangular_solve(matrix, rhs, left_side=True, lower=lower,
                                     transpose_a=adjoint, conjugate_a=adjoint)


def _log_matrix_determinant(x):
  """(sign, log|det|), both of the input dtype; singular: (0, -inf); 0x0: (1, 0)."""
  if x.shape[-1] == 0:
    batch = x.shape[:-2]
    return jnp.ones(batch, x.dtype), jnp.zeros(batch, x.dtype)
  sign, logdet = jnp.linalg.slogdet(x)
  # TF defines no gradient for the sign.
  return lax.stop_gradient(sign).astype(x.dtype), logdet.astype(x.dtype)


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


def _cross(a, b):
  """Cross product over the last axis (size 3); same shapes, no broadcasting (TF)."""
  if a.shape != b.shape or a.shape[-1:] != (3,):
    raise ValueError(f"Cross: both inputs must have one shape [..., 3]; got {a.shape} "
                     f"and {b.shape}")
  a, b = jnp.asarray(a), jnp.asarray(b)  # numpy inputs (constant folding) compute in XLA too
  a0, a1, a2 = a[..., 0], a[..., 1], a[..., 2]
  b0, b1, b2 = b[..., 0], b[..., 1], b[..., 2]
  return jnp.stack([a1 * b2 - a2 * b1, a2 * b0 - a0 * b2, a0 * b1 - a1 * b0], axis=-1)


# ---------------------------------------------------------------------------
# Specs


_MATMUL_DTYPES = ("float16", "bfloat16", "float32", "float64", "int32", "int64",
                  "complex64", "complex128")
_BMM_V2_DTYPES = _MATMUL_DTYPES + ("int16",)
_BMM_V3_COMBOS = (
    ("bfloat16", "bfloat16", "bfloat16"), ("bfloat16", "int8", "bfloat16"),
    ("bfloat16", "uint8", "bfloat16"), ("int8", "bfloat16", "bfloat16"),
    ("uint8", "bfloat16", "bfloat16"), ("float32", "float32", "float32"),
    ("float64", "float64", "float64"), ("int8", "int8", "int32"),
    ("int8", "uint8", "int32"), ("uint8", "int8", "int32"), ("uint8", "uint8", "int32"),
    ("int16", "int16", "int16"), ("int32", "int32", "int32"), ("int64", "int64", "int64"),
    ("complex64", "complex64", "complex64"), ("complex128", "complex128", "complex128"))


def _values(st, dtype, shape):
  """Operand values for products: floats bounded so that no partial sum overflows
  (XLA fuses products into FMAs, TF does not, so near-overflow sums differ), with
  NaN and ±inf sprinkled in; 64-bit ints kept in 32-bit range (x64-off runs)."""
  dtype = st.np_dtype(dtype)
  if dtype.kind in "iu":
    if dtype.itemsize == 8:
      return st.arrays(dtype, shape, min_value=0 if dtype.kind == "u" else -2**15,
                       max_value=2**15)
    return st.arrays(dtype, shape)
  bound = 100.0 if dtype.itemsize == 2 and dtype.name != "bfloat16" else 1e4
  # Complex products with infinities follow each library's own arithmetic (TF's
  # C99 rules vs XLA's plain formulas; XLA's batched and unbatched dots differ
  # too): documented, not tested.
  specials = [np.nan] if dtype.kind == "c" else [np.nan, np.inf, -np.inf]

  @st.composite
  def draw(draw):
    x = draw(st.arrays(dtype, shape, min_value=-bound, max_value=bound)).copy()
    flat = x.reshape(-1)
    if flat.size and draw(st.booleans()):
      for _ in range(draw(st.integers(1, min(2, flat.size)))):
        flat[draw(st.integers(0, flat.size - 1))] = draw(st.sampled_from(specials))
    return x
  return draw()


def _matmul_calls(st):
  @st.composite
  def draw(draw):
    dtype = draw(st.dtypes(_MATMUL_DTYPES))
    m, k, n = (draw(st.integers(0, 4)) for _ in range(3))
    ta, tb = draw(st.booleans()), draw(st.booleans())
    return {"a": draw(_values(st, dtype, (k, m) if ta else (m, k))),
            "b": draw(_values(st, dtype, (n, k) if tb else (k, n))),
            "transpose_a": ta, "transpose_b": tb}
  return draw()


def _bmm_calls(st, dtypes=None, broadcast=True, v3=False):
  @st.composite
  def draw(draw):
    if v3:
      # Mostly same-dtype float combos: TF's gradient of the mixed ones
      # (bfloat16 x int8...) fails, and the runner counts those as rejections.
      floats = [c for c in _BMM_V3_COMBOS if c[0] == c[1] and c[0][0] in "bfc"]
      ta, tb, tout = draw(st.one_of(st.sampled_from(floats), st.sampled_from(_BMM_V3_COMBOS)))
    else:
      ta = tb = draw(st.sampled_from(dtypes))
    m, k, n = (draw(st.integers(0, 3)) for _ in range(3))
    if broadcast:
      bx, by = draw(st.broadcastable_shapes(2, max_rank=2, max_side=3))
    else:
      bx = by = tuple(draw(st.shapes(max_rank=2, max_side=3)))
    ax, ay = draw(st.booleans()), draw(st.booleans())
    call = {"x": draw(_values(st, ta, tuple(bx) + ((k, m) if ax else (m, k)))),
            "y": draw(_values(st, tb, tuple(by) + ((n, k) if ay else (k, n)))),
            "adj_x": ax, "adj_y": ay}
    if v3:
      call["Tout"] = st.np_dtype(tout)
    return call
  return draw()


_EINSUM_DTYPES = ("float16", "bfloat16", "float32", "float64", "int32", "int64",
                  "complex64", "complex128")


def _einsum_calls(st):
  """Random valid equations with 1 or 2 inputs: contractions, outer products,
  transposes, traces/diagonals (repeated labels in a single input), ellipses."""
  @st.composite
  def draw(draw):
    dtype = draw(st.dtypes(_EINSUM_DTYPES))
    n_in = draw(st.sampled_from([1, 2]))
    sizes = {c: draw(st.integers(0, 3)) for c in "abcd"}
    subs = []
    for _ in range(n_in):
      rank = draw(st.integers(0, 3))
      labels = draw(st.lists(st.sampled_from("abcd"), min_size=rank, max_size=rank,
                             unique=n_in == 2))
      subs.append("".join(labels))
    ellipsis = draw(st.booleans())
    ell_shapes = (draw(st.broadcastable_shapes(n_in, max_rank=2, max_side=3))
                  if ellipsis else [()] * n_in)
    present = sorted(set("".join(subs)))
    out = "".join(draw(st.lists(st.sampled_from(present), unique=True))) if present else ""
    if ellipsis:
      spots = [draw(st.integers(0, len(s))) for s in subs]
      subs = [s[:p] + "..." + s[p:] for s, p in zip(subs, spots)]
      at = draw(st.integers(0, len(out)))
      out = out[:at] + "..." + out[at:]
    inputs = []
    for s, ell in zip(subs, ell_shapes):
      shape, i = [], 0
      while i < len(s):
        if s.startswith("...", i):
          shape.extend(ell)
          i += 3
        else:
          shape.append(sizes[s[i]])
          i += 1
      inputs.append(draw(_values(st, dtype, tuple(shape))))
    return {"inputs": inputs, "equation": ",".join(subs) + "->" + out}
  return draw()


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


def _square_calls(st, dtypes, kind, arg="input"):
  """Well-conditioned square matrices: SPD (``kind="spd"``) or near identity."""
  @st.composite
  def draw(draw):
    dtype = st.np_dtype(draw(st.sampled_from(dtypes)))
    batch = tuple(draw(st.shapes(max_rank=2, max_side=3)))
    n = draw(st.integers(0, 4))
    real = np.float32 if dtype in (np.float32, np.complex64) else np.float64
    a = draw(st.arrays(real, batch + (n, n), min_value=-1, max_value=1))
    if dtype.kind == "c":
      a = a + 1j * draw(st.arrays(real, batch + (n, n), min_value=-1, max_value=1))
    if kind == "spd":
      a = a @ np.conj(np.swapaxes(a, -1, -2)) + n * np.eye(n)
    else:
      a = a / 2 + np.eye(n) * draw(st.sampled_from([2.0, -2.0]))
    return {arg: a.astype(dtype)}
  return draw()


_CROSS_FLOATS = [v / 4 for v in range(-8, 9)] + [np.nan, np.inf, -np.inf]


def _cross_calls(st):
  """Floats from a grid whose products and differences are exact in every float
  dtype: XLA may fuse a*b - c*d into an FMA, TF does not (see the semantics doc)."""
  @st.composite
  def draw(draw):
    dtype = draw(st.dtypes(st.NUMERIC))
    shape = tuple(draw(st.shapes(max_rank=2, max_side=3))) + (3,)
    size = int(np.prod(shape))

    def values():
      if dtype.kind in "iu":
        return draw(_values(st, dtype, shape))
      flat = draw(st.lists(st.sampled_from(_CROSS_FLOATS), min_size=size, max_size=size))
      return np.array(flat, np.float32).astype(dtype).reshape(shape)
    return {"a": values(), "b": values()}
  return draw()


def _cholesky_oracle(input):  # noqa: A002  (TF arg name)
  """TF 2.21's CPU Cholesky leaves the strict upper triangle unwritten (garbage at
  times); tf.linalg.cholesky documents zeros there, which is what we return."""
  import tensorflow as tf
  return tf.linalg.band_part(tf.raw_ops.Cholesky(input=input), -1, 0)


def _solve_calls(st, triangular):
  """Well-conditioned systems (|diagonal| >= 1.5, small off-diagonal entries);
  MatrixTriangularSolve's batch dims broadcast."""
  @st.composite
  def draw(draw):
    dtype = st.np_dtype(draw(st.sampled_from(("float32", "float64", "complex64",
                                              "complex128"))))
    real = np.float32 if dtype in (np.float32, np.complex64) else np.float64
    n = draw(st.integers(0, 4))
    if triangular:
      bm, br = draw(st.broadcastable_shapes(2, max_rank=2, max_side=3))
    else:
      bm = br = tuple(draw(st.shapes(max_rank=2, max_side=3)))

    def arr(shape, bound):
      a = draw(st.arrays(real, shape, min_value=-bound, max_value=bound))
      if dtype.kind == "c":
        a = a + 1j * draw(st.arrays(real, shape, min_value=-bound, max_value=bound))
      return a
    diag = draw(st.sampled_from([2.0, -2.0]))
    matrix = arr(tuple(bm) + (n, n), 0.5) + diag * np.eye(n)
    rhs = arr(tuple(br) + (n, draw(st.integers(0, 3))), 4.0)
    call = {"matrix": matrix.astype(dtype), "rhs": rhs.astype(dtype),
            "adjoint": draw(st.booleans())}
    if triangular:
      call["lower"] = draw(st.booleans())
    return call
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


_INVERTIBLE = "TF raises on singular input; specs draw well-conditioned matrices"

# ---------------------------------------------------------------------------
# Ops

MatMul = define_op(
    "MatMul", _matmul, family=FAMILY, attrs=("transpose_a", "transpose_b"),
    jvp=(lambda t, a, b, **p: MatMul(t, b, **p), lambda t, a, b, **p: MatMul(a, t, **p)),
    transpose=_matmul_transpose, batching=_matmul_batching,
    spec=lambda st: st.Spec(_matmul_calls(st)))

BatchMatMulV2 = define_op(
    "BatchMatMulV2", _batch_matmul_v2, family=FAMILY, attrs=("adj_x", "adj_y"),
    jvp=(_jvp_first(lambda: BatchMatMulV2), _jvp_second(lambda: BatchMatMulV2)),
    transpose=_bmm_transpose(lambda: BatchMatMulV2, broadcast=True),
    batching=_bmm_batching(lambda: BatchMatMulV2),
    spec=lambda st: st.Spec(_bmm_calls(st, _BMM_V2_DTYPES)))

BatchMatMul = define_op(
    "BatchMatMul", _batch_matmul_v1, family=FAMILY, attrs=("adj_x", "adj_y"),
    jvp=(_jvp_first(lambda: BatchMatMul), _jvp_second(lambda: BatchMatMul)),
    transpose=_bmm_transpose(lambda: BatchMatMul, broadcast=False),
    # Under vmap an unbatched operand must broadcast: V2 does, with V1's semantics.
    batching=_bmm_batching(lambda: BatchMatMulV2),
    spec=lambda st: st.Spec(_bmm_calls(st, _MATMUL_DTYPES, broadcast=False)))

BatchMatMulV3 = define_op(
    "BatchMatMulV3", _batch_matmul_v3, family=FAMILY, attrs=("adj_x", "adj_y", "Tout"),
    batching=_bmm_batching(lambda: BatchMatMulV3),
    spec=lambda st: st.Spec(_bmm_calls(st, v3=True)))

Einsum = define_op(
    "Einsum", _einsum, family=FAMILY, attrs=("equation",), batching=_einsum_batching,
    spec=lambda st: st.Spec(_einsum_calls(st)))

MatrixBandPart = define_op(
    "MatrixBandPart", _band_part, family=FAMILY,
    jvp=(lambda t, x, lo, hi: MatrixBandPart(t, lo, hi), None, None),
    transpose=lambda ct, x, lo, hi: [MatrixBandPart(ct, lo, hi) if U(x) else None, None, None],
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

Cholesky = define_op(
    "Cholesky", _cholesky, family=FAMILY,
    spec=lambda st: st.Spec(_square_calls(st, ("float32", "float64", "complex64",
                                               "complex128"), "spd"),
                            oracle=_cholesky_oracle, vmap_variation="scale",
                            note="derivatives assume a symmetric perturbation, as TF's"))

MatrixInverse = define_op(
    "MatrixInverse", _matrix_inverse, family=FAMILY, attrs=("adjoint",),
    spec=lambda st: st.Spec(
        st.tuples(_square_calls(st, ("float32", "float64", "complex64", "complex128"),
                                "near_identity"), st.booleans())
        .map(lambda c: dict(c[0], adjoint=c[1])), note=_INVERTIBLE,
        vmap_variation="scale"))

MatrixDeterminant = define_op(
    "MatrixDeterminant", _matrix_determinant, family=FAMILY,
    spec=lambda st: st.Spec(
        _square_calls(st, ("float32", "float64", "complex64", "complex128"), "near_identity"),
        vmap_variation="scale",
        # TF's complex gradient is ct * det * inv(A)^H: det lacks its conjugate (TF
        # bug); ours is the exact derivative, checked against central differences.
        grad_oracle="fd"))

Cross = define_op(
    "Cross", _cross, family=FAMILY, spec=lambda st: st.Spec(_cross_calls(st)))

MatrixSolve = define_op(
    "MatrixSolve", _matrix_solve, family=FAMILY, attrs=("adjoint",),
    spec=lambda st: st.Spec(_solve_calls(st, triangular=False), note=_INVERTIBLE,
                            vmap_variation="scale"))

MatrixTriangularSolve = define_op(
    "MatrixTriangularSolve", _matrix_triangular_solve, family=FAMILY,
    attrs=("lower", "adjoint"),
    spec=lambda st: st.Spec(_solve_calls(st, triangular=True), vmap_variation="scale"))

LogMatrixDeterminant = define_op(
    "LogMatrixDeterminant", _log_matrix_determinant, family=FAMILY, multiple_results=True,
    jvp=lambda primals, tangents: _log_matrix_determinant_jvp(primals, tangents),
    spec=lambda st: st.Spec(
        _square_calls(st, ("float32", "float64", "complex64", "complex128"), "near_identity"),
        vmap_variation="scale"))

def _log_matrix_determinant_jvp(primals, tangents):
  """TF's gradient: the sign has none, log|det| gets tr(inv(A) dA), which for
  complex inputs is the derivative of log(det) (its imaginary part is the phase's;
  the exact derivative of the real log|det| is the real part)."""
  (x,), (t,) = primals, tangents
  sign, logdet = LogMatrixDeterminant(x)
  zeros = jnp.zeros(sign.shape, sign.dtype)
  if type(t) is ad.Zero or x.shape[-1] == 0:
    return [sign, logdet], [zeros, zeros]
  dlog = jnp.trace(jnp.linalg.solve(x, t), axis1=-2, axis2=-1)
  return [sign, logdet], [zeros, dlog.astype(logdet.dtype)]


MatrixSetDiagV3 = define_op(
    "MatrixSetDiagV3", _matrix_set_diag_v3, family=FAMILY, static=("k",), attrs=("align",),
    spec=lambda st: st.Spec(_set_diag_v3_calls(st)))
