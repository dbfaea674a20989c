"""Linear algebra: MatMul, BatchMatMul (V1/V2/V3), Einsum, Cross, band/diagonal ops,
Cholesky, MatrixInverse, MatrixDeterminant, LogMatrixDeterminant, solvers,
factorizations (Svd, Qr, eigendecompositions, Lu), matrix functions.

Submodules, each op with its impl, rules and property spec:

* :mod:`~tfprims.ops.linalg.matmul`: MatMul, BatchMatMul/V2/V3, Einsum, Cross.
  MatMul and BatchMatMul/V2 have TF-named rules: JVPs with the same op,
  transposes written as TF's gradients are (MatMul with transpose flags,
  BatchMatMulV2 with adjoint flags, Sum + Reshape to undo batch broadcasting),
  and batching that re-binds ``tf.BatchMatMulV2`` (a vmapped MatMul becomes a
  BatchMatMulV2; an unbatched operand is passed as is since BatchMatMulV2
  broadcasts batch dims). Einsum re-binds itself under vmap with an extra label.
* :mod:`~tfprims.ops.linalg.diagonals`: MatrixBandPart, MatrixDiag(Part) V1/V3,
  MatrixSetDiagV3.
* :mod:`~tfprims.ops.linalg.decompositions`: Cholesky, MatrixInverse,
  MatrixDeterminant, LogMatrixDeterminant, MatrixSolve, MatrixTriangularSolve.
* :mod:`~tfprims.ops.linalg.factorizations`: Svd, Qr, SelfAdjointEigV2, Lu
  (vectors in one phase gauge); :mod:`~tfprims.ops.linalg.eig`: Eig.
* :mod:`~tfprims.ops.linalg.diag_v2`: MatrixDiagV2, MatrixDiagPartV2,
  MatrixSetDiagV2, MatrixSetDiag, ConjugateTranspose.
* :mod:`~tfprims.ops.linalg.solvers`: MatrixSolveLs; :mod:`~tfprims.ops.linalg.banded`:
  BandedTriangularSolve, TridiagonalSolve, TridiagonalMatMul, CholeskyGrad,
  SparseMatMul.
* :mod:`~tfprims.ops.linalg.matrix_functions`: MatrixSquareRoot, MatrixLogarithm.

Rules bind other ops through :data:`tfprims.core.tfops` and the helpers of
:mod:`tfprims.rules`; ops without explicit rules use the derived ones. Semantics
chosen where TF raises or is platform-dependent: docs/semantics/reductions_linalg.md.
"""

from tfprims.ops.linalg import decompositions, diagonals, matmul
from tfprims.ops.linalg import banded, diag_v2, eig, factorizations, matrix_functions, solvers
from tfprims.ops.linalg._common import FAMILY
from tfprims.ops.linalg.decompositions import (
  Cholesky,
  LogMatrixDeterminant,
  MatrixDeterminant,
  MatrixInverse,
  MatrixSolve,
  MatrixTriangularSolve,
)
from tfprims.ops.linalg.diagonals import (
  MatrixBandPart,
  MatrixDiag,
  MatrixDiagPart,
  MatrixDiagPartV3,
  MatrixDiagV3,
  MatrixSetDiagV3,
)
from tfprims.ops.linalg.matmul import (
  BatchMatMul,
  BatchMatMulV2,
  BatchMatMulV3,
  Cross,
  Einsum,
  MatMul,
)
