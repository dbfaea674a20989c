"""The older diagonal ops and ConjugateTranspose: MatrixDiagV2, MatrixDiagPartV2,
MatrixSetDiagV2 (the V3 ops with TF's fixed ``LEFT_LEFT`` alignment: every
diagonal, super or sub, starts at the first position), MatrixSetDiag (V1: the
main diagonal) and ConjugateTranspose (``perm`` static).

The diagonal ops share the V3 impls of :mod:`~tfprims.ops.linalg.diagonals` and,
like them, use the derived rules (their impls gather with static indices;
``padding_value`` gets no gradient, as in TF). ConjugateTranspose is linear (over
the reals): its JVP is itself, its transpose itself with the inverse
permutation, and it batches by re-binding with the batch axis kept in place.
"""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np

from tfprims import rules
from tfprims.core import register_op, tfops
from tfprims.ops.linalg import diagonals as v3
from tfprims.ops.linalg._common import FAMILY
from tfprims.ops.shared import ints
from tfprims.ops.shared_specs import index_array, lazy_hst

_ALIGN = "LEFT_LEFT"  # what the V2 ops do (TF documents V3's align as added later)
# TF's gradients of the V2 ops call matrix_diag/matrix_diag_part/matrix_set_diag
# with V3's default RIGHT_LEFT alignment: wrong where a band's diagonals differ in
# length. Ours are the exact derivatives, checked against central differences
# (of the data inputs: padding_value gets no gradient, as TF's V2/V3 gradients).
_TF_GRAD = (
  "TF's gradients assume RIGHT_LEFT alignment (wrong for bands of unequal "
  "diagonals); derivatives checked against central differences"
)


def _matrix_diag_v2(diagonal, padding_value, *, k, num_rows, num_cols):
  """MatrixDiagV3 with ``LEFT_LEFT`` alignment."""
  return v3._matrix_diag_v3(
    diagonal, padding_value, k=k, num_rows=num_rows, num_cols=num_cols, align=_ALIGN
  )


def _matrix_diag_part_v2(x, padding_value, *, k):
  """MatrixDiagPartV3 with ``LEFT_LEFT`` alignment."""
  return v3._matrix_diag_part_v3(x, padding_value, k=k, align=_ALIGN)


def _matrix_set_diag_v2(x, diagonal, *, k):
  """MatrixSetDiagV3 with ``LEFT_LEFT`` alignment."""
  return v3._matrix_set_diag_v3(x, diagonal, k=k, align=_ALIGN)


def _matrix_set_diag(x, diagonal):
  """``x`` with its main diagonal (``min(rows, cols)`` long) replaced."""
  m, n = x.shape[-2:]
  if diagonal.shape != x.shape[:-2] + (min(m, n),):
    raise ValueError(
      f"MatrixSetDiag: diagonal must have shape {x.shape[:-2] + (min(m, n),)}; got {diagonal.shape}"
    )
  if min(m, n) == 0:
    return x
  return v3._matrix_set_diag_v3(x, diagonal, k=0, align=_ALIGN)


# --- ConjugateTranspose --------------------------------------------------------------


def _perm(perm, rank) -> tuple:
  perm = tuple(int(p) for p in ints(perm))
  if len(perm) != rank:
    raise ValueError(
      f"ConjugateTranspose: perm {perm} has {len(perm)} entries for a tensor of rank {rank}"
    )
  perm = tuple(p + rank if p < 0 else p for p in perm)
  if sorted(perm) != list(range(rank)):
    raise ValueError(f"ConjugateTranspose: {perm} is not a permutation of 0..{rank - 1}")
  return perm


def _conjugate_transpose(x, *, perm):
  y = jnp.transpose(x, _perm(perm, x.ndim))
  return jnp.conj(y) if jnp.issubdtype(x.dtype, jnp.complexfloating) else y


def _conjugate_transpose_transpose(ct, x, *, perm):
  perm = _perm(perm, len(rules.shape_of(x)))
  return [tfops.ConjugateTranspose(ct, perm=tuple(int(i) for i in np.argsort(perm)))]


def _conjugate_transpose_batch(args, dims, *, perm):
  (x,), (d,) = args, dims
  perm = _perm(perm, x.ndim - 1)
  return tfops.ConjugateTranspose(x, perm=(d,) + tuple(p + (p >= d) for p in perm)), 0


# --- Specs ---------------------------------------------------------------------------


def _without_align(calls):
  return calls.map(lambda c: {k: v for k, v in c.items() if k != "align"})


def _set_diag_calls(st):
  @st.composite
  def draw(draw):
    dtype = draw(st.dtypes(st.NUMERIC + st.COMPLEX + ("bool",)))
    shape = tuple(draw(st.shapes(min_rank=2, max_rank=4)))
    dshape = shape[:-2] + (min(shape[-2:]),)
    return {"input": draw(st.arrays(dtype, shape)), "diagonal": draw(st.arrays(dtype, dshape))}

  return draw()


def _conjugate_transpose_calls(st):
  hst = lazy_hst()

  @st.composite
  def calls(draw):
    dtype = draw(st.dtypes(st.COMPLEX + st.ALL))
    # TF's oneDNN kernel aborts the process on float32/bfloat16 scalars.
    rank1 = dtype.name in ("float32", "bfloat16")
    x = draw(st.arrays(dtype, st.shapes(min_rank=1 if rank1 else 0)))
    # Non-negative: TF's gradient (InvertPermutation) rejects negative perms.
    perm = list(draw(hst.permutations(range(x.ndim))))
    return {"x": x, "perm": index_array(draw, st, np.array(perm, np.int64).reshape(-1))}

  return calls()


# --- Ops -----------------------------------------------------------------------------

MatrixDiagV2 = register_op(
  "MatrixDiagV2",
  _matrix_diag_v2,
  family=FAMILY,
  static=("k", "num_rows", "num_cols"),
  spec=lambda st: st.Spec(
    _without_align(v3._diag_v3_calls(st)), grad_oracle="fd", diff_args=("diagonal",), note=_TF_GRAD
  ),
)

MatrixDiagPartV2 = register_op(
  "MatrixDiagPartV2",
  _matrix_diag_part_v2,
  family=FAMILY,
  static=("k",),
  spec=lambda st: st.Spec(
    _without_align(v3._diag_part_v3_calls(st)),
    grad_oracle="fd",
    diff_args=("input",),
    note=_TF_GRAD,
  ),
)

MatrixSetDiagV2 = register_op(
  "MatrixSetDiagV2",
  _matrix_set_diag_v2,
  family=FAMILY,
  static=("k",),
  spec=lambda st: st.Spec(
    _without_align(v3._set_diag_v3_calls(st)), grad_oracle="fd", note=_TF_GRAD
  ),
)

MatrixSetDiag = register_op(
  "MatrixSetDiag", _matrix_set_diag, family=FAMILY, spec=lambda st: st.Spec(_set_diag_calls(st))
)

ConjugateTranspose = register_op(
  "ConjugateTranspose",
  _conjugate_transpose,
  family=FAMILY,
  static=("perm",),
  linear=True,
  transpose=_conjugate_transpose_transpose,
  batching=_conjugate_transpose_batch,
  spec=lambda st: st.Spec(_conjugate_transpose_calls(st)),
)
