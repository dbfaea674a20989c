"""TF's sparse-tensor ops, a ``SparseTensor`` given as its components (``indices``
int64 [nnz, rank], ``values`` [nnz], ``dense_shape`` int64 [rank]):

=================  ==============================================================
module             ops
=================  ==============================================================
``matmul``         SparseTensorDenseMatMul
``reduce``         SparseReduceSum, SparseReduceMax, SparseReduceSumSparse,
                   SparseReduceMaxSparse
``structure``      SparseReorder, SparseReshape, SparseFillEmptyRows
``combine``        SparseConcat, SparseSlice, SparseAdd, SparseSparseMaximum,
                   SparseSparseMinimum
``cwise``          SparseSoftmax, SparseDenseCwiseMul, SparseDenseCwiseAdd,
                   SparseDenseCwiseDiv, SparseTensorDenseAdd
``grads``          SparseAddGrad, SparseSliceGrad, SparseFillEmptyRowsGrad,
                   SparseSplit
``count``          SparseBincount, SparseCountSparseOutput,
                   DenseCountSparseOutput
``cross``          SparseCrossHashed, SparseCross (hashed_output; int64 features)
=================  ==============================================================

Dense shapes (``a_shape``, ``input_shape``, ``sp_shape``...) are static: they decide
the output shapes. Where an output's size depends on the indices' values
(SparseFillEmptyRows adds one entry per empty row, SparseSlice and SparseAdd keep
some entries) the indices are static too: eager calls know them, and under jit
traced indices raise :class:`~tfprims.errors.StaticInputError` naming the node.
Outputs that the static params decide (dense shapes, those ops' indices) are
trace-time constants under jit too (``_common.static_outputs``). The values are always
operands: every op is differentiable and vmappable in them. Semantics and choices
where TF raises at run time (out-of-range indices) are in docs/semantics/sparse.md.
SparseToDense lives with the scatter ops (:mod:`tfprims.ops.array.scatter`), the
SparseSegment* reductions in :mod:`tfprims.ops.array.sparse_segments`.
"""

from tfprims.ops.sparse import combine, count, cross, cwise, grads, matmul, reduce, structure
from tfprims.ops.sparse._common import FAMILY, index_dtype, static_outputs, values_jvp
from tfprims.ops.sparse.matmul import SparseTensorDenseMatMul

from tfprims.core import declare_unsupported

declare_unsupported(
  "SparseCrossV2",
  hint="it crosses features into strings; run it in TF: tfprims.split_host_prefix(fn, "
  "...) converts the numeric rest (SparseCross with hashed_output and "
  "SparseCrossHashed of int64 features convert)",
)
