"""Ragged-tensor kernels (family ``ragged``): RaggedTensorToTensor, and the ops whose
output size is the ragged structure's (RaggedGather, RaggedRange) with static
sizes resolved from known row partitions, RaggedTensorToSparse, and (``count``)
RaggedBincount, RaggedCountSparseOutput, RaggedFillEmptyRows and RaggedFillEmptyRowsGrad.
The numeric ops
``tf.ragged`` reductions and constructors emit (Cumsum, UnsortedSegment*...) live in
their own families. Semantics: docs/semantics/ragged.md."""

from tfprims.ops.ragged import count, structure, to_tensor

from tfprims.core import declare_unsupported

declare_unsupported(
  "RaggedTensorToVariant",
  "RaggedTensorFromVariant",
  "RaggedTensorToVariantGradient",
  hint="a ragged tensor crosses a tf.map_fn or while loop as one variant per row; JAX "
  "arrays have static shapes: pad it first (rt.to_tensor()) and map over the dense "
  "rows, or loop over the flat values with the row splits",
)
declare_unsupported(
  "RaggedCross",
  hint="it hashes crossed string features; run it in TF: tfprims.split_host_prefix(fn, "
  "...) converts the numeric rest",
)
