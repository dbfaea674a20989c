"""Ragged-tensor kernels (family ``ragged``): RaggedTensorToTensor, and the ops whose
output size is the ragged structure's (RaggedGather, RaggedRange) with static
sizes resolved from known row partitions, RaggedTensorToSparse, and (``count``)
RaggedBincount, RaggedCountSparseOutput, RaggedFillEmptyRows and RaggedFillEmptyRowsGrad,
and (``variant``) RaggedTensorToVariant, RaggedTensorFromVariant and
RaggedTensorToVariantGradient (a ragged tensor as TF variants: tf.map_fn over its rows).
The numeric ops
``tf.ragged`` reductions and constructors emit (Cumsum, UnsortedSegment*...) live in
their own families. Semantics: docs/semantics/ragged.md."""

from tfprims.ops.ragged import count, structure, to_tensor, variant

from tfprims.core import declare_unsupported

declare_unsupported(
  "RaggedCross",
  hint="it hashes crossed string features; run it in TF: tfprims.split_host_prefix(fn, "
  "...) converts the numeric rest",
)
