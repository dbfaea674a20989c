"""Products: MatMul, BatchMatMul (V1/V2/V3), Einsum, Cross.

MatMul and BatchMatMul/V2 have TF-named rules: JVPs with the same op, transposes
written as TF's gradients are (MatMul with transpose flags, BatchMatMulV2 with
adjoint flags, Sum + Reshape to undo batch broadcasting), and batching that
re-binds ``tf.BatchMatMulV2`` (a vmapped MatMul becomes a BatchMatMulV2; an
unbatched operand is passed as is since BatchMatMulV2 broadcasts batch dims).
Einsum re-binds itself under vmap with an extra label. BatchMatMulV3 re-binds
itself under vmap and derives its JVP; Cross uses the derived rules.
"""

from __future__ import annotations

import string

import jax.numpy as jnp
import numpy as np

from tfprims import dtypes as tfdtypes
from tfprims import rules
from tfprims.core import register_op, tfops
from tfprims.ops.linalg._common import FAMILY, adjoint

U = rules.U

# ---------------------------------------------------------------------------
# MatMul / BatchMatMul


def _is_complex(dtype) -> bool:
  return jnp.issubdtype(dtype, jnp.complexfloating)


def _conj(x):
  """``tf.Conj`` of a complex value; real values are their own conjugate."""
  return tfops.Conj(x) if _is_complex(rules.dtype_of(x)) else x


def _swap_last(x):
  """Swaps the last two axes with tf.Transpose."""
  nd = len(rules.shape_of(x))
  return rules.transpose(x, tuple(range(nd - 2)) + (nd - 1, nd - 2))


def _matmul(a, b, *, transpose_a, transpose_b):
  """``a @ b`` with plain (not conjugate) transposes; jnp's default precision."""
  return jnp.matmul(a.T if transpose_a else a, b.T if transpose_b else b)


def _matmul_build(B, a, b, *, transpose_a, transpose_b):
  """_matmul emitted as one dot_general, for float32/float64 operands."""
  if a.dtype not in (np.float32, np.float64) or b.dtype != a.dtype:
    return None
  return B.dot_general(a, b, (((0 if transpose_a else 1,), (1 if transpose_b else 0,)), ((), ())))


def _matmul_transpose(ct, a, b, *, transpose_a, transpose_b):
  """TF's _MatMulGrad, in MatMul ops (no conjugation: JAX transposes are linear)."""
  ga = gb = None
  if U(a):
    if not transpose_a:
      ga = tfops.MatMul(ct, b, transpose_a=False, transpose_b=not transpose_b)
    else:
      ga = tfops.MatMul(b, ct, transpose_a=transpose_b, transpose_b=True)
  if U(b):
    if not transpose_b:
      gb = tfops.MatMul(a, ct, transpose_a=not transpose_a, transpose_b=False)
    else:
      gb = tfops.MatMul(ct, a, transpose_a=True, transpose_b=transpose_a)
  return [ga, gb]


def _matmul_batching(args, dims, *, transpose_a, transpose_b):
  """MatMul under vmap is tf.BatchMatMulV2 (its adj flags conjugate, so complex
  transposed operands are transposed with tf.Transpose first)."""
  (a, b), (da, db) = args, dims
  cplx = _is_complex(rules.dtype_of(a))

  def prep(x, d, flag):
    if d is not None and d != 0:
      x = rules.move_axes(x, [d], [0])
    if flag and cplx:
      return _swap_last(x), False
    return x, flag

  a, adj_x = prep(a, da, transpose_a)
  b, adj_y = prep(b, db, transpose_b)
  return tfops.BatchMatMulV2(a, b, adj_x=adj_x, adj_y=adj_y), 0


def _batch_matmul_v2(x, y, *, adj_x, adj_y):
  """Batched ``adj(x) @ adj(y)`` with numpy broadcasting of the batch dims."""
  return jnp.matmul(adjoint(x, adj_x), adjoint(y, adj_y))


def _batch_matmul_build(B, x, y, *, adj_x, adj_y):
  """_batch_matmul_v2 emitted as one dot_general, for float32/float64 operands with the
  same batch dims (adjoints of reals are transposes)."""
  if (
    x.dtype not in (np.float32, np.float64)
    or y.dtype != x.dtype
    or x.ndim < 2
    or x.ndim != y.ndim
    or x.shape[:-2] != y.shape[:-2]
  ):
    return None
  nb = x.ndim - 2
  return B.dot_general(
    x,
    y,
    (
      ((nb + (0 if adj_x else 1),), (nb + (1 if adj_y else 0),)),
      (tuple(range(nb)), tuple(range(nb))),
    ),
  )


def _batch_matmul_v1(x, y, *, adj_x, adj_y):
  """BatchMatMul (V1): both operands of one rank and equal batch dims (no broadcasting)."""
  if x.ndim != y.ndim or x.shape[:-2] != y.shape[:-2]:
    raise ValueError(
      f"BatchMatMul: In[0] and In[1] must have the same batch dims; got "
      f"{x.shape} and {y.shape} (BatchMatMulV2 broadcasts them)"
    )
  return _batch_matmul_v2(x, y, adj_x=adj_x, adj_y=adj_y)


def _batch_matmul_v3(x, y, *, adj_x, adj_y, Tout):  # TF attr name
  """BatchMatMulV3: both operands cast to Tout (int8 x int8 -> int32 etc.)."""
  out = np.dtype(tfdtypes.canonical_dtype(Tout))
  return _batch_matmul_v2(x.astype(out), y.astype(out), adj_x=adj_x, adj_y=adj_y)


def _bmm_transpose(op, broadcast: bool):
  """TF's _BatchMatMulV2Grad (adjoint flags). TF's gradient is the adjoint; the JAX
  transpose of these (conjugate-)linear maps is conj(TF's formula on conj(ct))."""

  def rule(ct, x, y, *, adj_x, adj_y):
    bmm = lambda a, b, ax=False, ay=False: op(a, b, adj_x=ax, adj_y=ay)
    c = _conj(ct)
    gx = gy = None
    if U(x):
      if not adj_x:
        gx = bmm(c, y, False, not adj_y)
      else:
        gx = bmm(y, c, adj_y, True)
      gx = _conj(gx)
      if broadcast:
        gx = rules.unbroadcast(gx, rules.shape_of(x))
    if U(y):
      if not adj_y:
        gy = bmm(x, c, not adj_x, False)
      else:
        gy = bmm(c, x, True, adj_x)
      gy = _conj(gy)
      if broadcast:
        gy = rules.unbroadcast(gy, rules.shape_of(y))
    return [gx, gy]

  return rule


def _bmm_batching(op):
  """Re-binds ``op`` (BatchMatMulV2 broadcasts batch dims right-aligned)
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
    ranks = [len(rules.shape_of(a)) - (d is not None) for a, d in zip(args, dims)]
    batch_rank = max(r - 2 for r in ranks)
    # Output batch positions 0..batch_rank; an operand's k batch dims align right.
    offsets = [batch_rank - (r - 2) for r in ranks]
    in_place = [o + d for d, r, o in zip(dims, ranks, offsets) if d is not None and d <= r - 2]
    t = in_place[0] if in_place else 0
    moved = []
    for a, d, o in zip(args, dims, offsets):
      if d is None:
        if t > o:  # it spans position t (its batch dims start at o + 1)
          s = rules.shape_of(a)
          a = rules.reshape(a, s[: t - o] + (1,) + s[t - o :])
        moved.append(a)
        continue
      if t >= o:
        if d != t - o:
          a = rules.move_axes(a, [d], [t - o])
      else:
        if d != 0:
          a = rules.move_axes(a, [d], [0])
        s = rules.shape_of(a)
        a = rules.reshape(a, s[:1] + (1,) * (o - t) + s[1:])
      moved.append(a)
    out = op(*moved, **params)
    return (rules.move_axes(out, [t], [0]) if t else out), 0

  return rule


def _bilinear_jvp(op):
  """The JVP rules of a product ``op.op_type(x, y)``: ``op(t, y)`` and ``op(x, t)``."""
  return (lambda t, x, y, **p: op(t, y, **p), lambda t, x, y, **p: op(x, t, **p))


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


def _einsum_build(B, *inputs, equation):
  """_einsum emitted as one dot_general (and a transpose), for two float32/float64
  operands whose labels are batch, contracted or free dims (no ellipsis, repeated
  labels, one-operand sums or broadcast size-1 dims)."""
  ins, out = _split_equation(equation)
  if len(inputs) != 2 or "." in equation:
    return None
  (x, y), (xs, ys) = inputs, ins
  if (
    x.dtype not in (np.float32, np.float64)
    or y.dtype != x.dtype
    or any(len(set(t)) != len(t) for t in (xs, ys, out))
    or any(c not in out and c not in other for t, other in ((xs, ys), (ys, xs)) for c in t)
    or any(x.shape[xs.index(c)] != y.shape[ys.index(c)] for c in xs if c in ys)
  ):
    return None
  batch = [c for c in xs if c in ys and c in out]
  summed = [c for c in xs if c in ys and c not in out]
  dims = (
    ([xs.index(c) for c in summed], [ys.index(c) for c in summed]),
    ([xs.index(c) for c in batch], [ys.index(c) for c in batch]),
  )
  r = B.dot_general(x, y, dims)
  order = batch + [c for c in xs if c not in ys] + [c for c in ys if c not in xs]
  perm = [order.index(c) for c in out]
  return r if perm == sorted(perm) else B.transpose(r, perm)


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
      moved.append(rules.move_axes(a, [d], [0]) if d != 0 else a)
  eq = ",".join(new_ins) + "->" + label + out
  return tfops.Einsum(*moved, equation=eq), 0


# ---------------------------------------------------------------------------
# Cross


def _cross(a, b):
  """Cross product over the last axis (size 3); same shapes, no broadcasting (TF)."""
  if a.shape != b.shape or a.shape[-1:] != (3,):
    raise ValueError(
      f"Cross: both inputs must have one shape [..., 3]; got {a.shape} and {b.shape}"
    )
  a, b = jnp.asarray(a), jnp.asarray(b)  # numpy inputs (constant folding) compute in XLA too
  a0, a1, a2 = a[..., 0], a[..., 1], a[..., 2]
  b0, b1, b2 = b[..., 0], b[..., 1], b[..., 2]
  return jnp.stack([a1 * b2 - a2 * b1, a2 * b0 - a0 * b2, a0 * b1 - a1 * b0], axis=-1)


# ---------------------------------------------------------------------------
# Specs


_MATMUL_DTYPES = (
  "float16",
  "bfloat16",
  "float32",
  "float64",
  "int32",
  "int64",
  "complex64",
  "complex128",
)
_BMM_V2_DTYPES = _MATMUL_DTYPES + ("int16",)
_BMM_V3_COMBOS = (
  ("bfloat16", "bfloat16", "bfloat16"),
  ("bfloat16", "int8", "bfloat16"),
  ("bfloat16", "uint8", "bfloat16"),
  ("int8", "bfloat16", "bfloat16"),
  ("uint8", "bfloat16", "bfloat16"),
  ("float32", "float32", "float32"),
  ("float64", "float64", "float64"),
  ("int8", "int8", "int32"),
  ("int8", "uint8", "int32"),
  ("uint8", "int8", "int32"),
  ("uint8", "uint8", "int32"),
  ("int16", "int16", "int16"),
  ("int32", "int32", "int32"),
  ("int64", "int64", "int64"),
  ("complex64", "complex64", "complex64"),
  ("complex128", "complex128", "complex128"),
)


def _values(st, dtype, shape):
  """Operand values for products: floats bounded so that no partial sum overflows
  (XLA fuses products into FMAs, TF does not, so near-overflow sums differ), with
  NaN and ±inf sprinkled in; 64-bit ints kept in 32-bit range (x64-off runs)."""
  dtype = st.np_dtype(dtype)
  if dtype.kind in "iu":
    if dtype.itemsize == 8:
      return st.arrays(
        dtype, shape, min_value=0 if dtype.kind == "u" else -(2**15), max_value=2**15
      )
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
    return {
      "a": draw(_values(st, dtype, (k, m) if ta else (m, k))),
      "b": draw(_values(st, dtype, (n, k) if tb else (k, n))),
      "transpose_a": ta,
      "transpose_b": tb,
    }

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
    call = {
      "x": draw(_values(st, ta, tuple(bx) + ((k, m) if ax else (m, k)))),
      "y": draw(_values(st, tb, tuple(by) + ((n, k) if ay else (k, n)))),
      "adj_x": ax,
      "adj_y": ay,
    }
    if v3:
      call["Tout"] = st.np_dtype(tout)
    return call

  return draw()


_EINSUM_DTYPES = (
  "float16",
  "bfloat16",
  "float32",
  "float64",
  "int32",
  "int64",
  "complex64",
  "complex128",
)


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
      labels = draw(
        st.lists(st.sampled_from("abcd"), min_size=rank, max_size=rank, unique=n_in == 2)
      )
      subs.append("".join(labels))
    ellipsis = draw(st.booleans())
    ell_shapes = (
      draw(st.broadcastable_shapes(n_in, max_rank=2, max_side=3)) if ellipsis else [()] * n_in
    )
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


# ---------------------------------------------------------------------------
# Ops

MatMul = register_op(
  "MatMul",
  _matmul,
  family=FAMILY,
  attrs=("transpose_a", "transpose_b"),
  build=_matmul_build,
  jvp=rules.per_op(_bilinear_jvp),
  transpose=_matmul_transpose,
  batching=_matmul_batching,
  spec=lambda st: st.Spec(_matmul_calls(st), ignore_zero_sign=st.ACCUMULATED_ZERO_SIGN),
)

BatchMatMulV2 = register_op(
  "BatchMatMulV2",
  _batch_matmul_v2,
  family=FAMILY,
  attrs=("adj_x", "adj_y"),
  build=_batch_matmul_build,
  jvp=rules.per_op(_bilinear_jvp),
  transpose=rules.per_op(_bmm_transpose, broadcast=True),
  batching=rules.per_op(_bmm_batching),
  spec=lambda st: st.Spec(_bmm_calls(st, _BMM_V2_DTYPES)),
)

BatchMatMul = register_op(
  "BatchMatMul",
  _batch_matmul_v1,
  family=FAMILY,
  attrs=("adj_x", "adj_y"),
  jvp=rules.per_op(_bilinear_jvp),
  transpose=rules.per_op(_bmm_transpose, broadcast=False),
  # Under vmap an unbatched operand must broadcast: V2 does, with V1's semantics.
  batching=_bmm_batching(BatchMatMulV2),
  spec=lambda st: st.Spec(_bmm_calls(st, _MATMUL_DTYPES, broadcast=False)),
)

BatchMatMulV3 = register_op(
  "BatchMatMulV3",
  _batch_matmul_v3,
  family=FAMILY,
  attrs=("adj_x", "adj_y", "Tout"),
  batching=rules.per_op(_bmm_batching),
  spec=lambda st: st.Spec(_bmm_calls(st, v3=True)),
)

Einsum = register_op(
  "Einsum",
  _einsum,
  family=FAMILY,
  attrs=("equation",),
  batching=_einsum_batching,
  build=_einsum_build,
  spec=lambda st: st.Spec(_einsum_calls(st)),
)

Cross = register_op("Cross", _cross, family=FAMILY, spec=lambda st: st.Spec(_cross_calls(st)))
