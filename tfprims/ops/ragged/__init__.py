"""Ragged-tensor kernels (family ``ragged``): RaggedTensorToTensor, and the ops whose
output size is the ragged structure's (RaggedGather, RaggedRange) with static
sizes resolved from known row partitions, RaggedTensorToSparse, and (``count``)
RaggedBincount, RaggedCountSparseOutput, RaggedFillEmptyRows and RaggedFillEmptyRowsGrad,
and (``variant``) RaggedTensorToVariant, RaggedTensorFromVariant and
RaggedTensorToVariantGradient (a ragged tensor as TF variants: tf.map_fn over its rows),
and (``cross``) RaggedCross of int64 features (``tf.ragged.cross_hashed``).
The numeric ops
``tf.ragged`` reductions and constructors emit (Cumsum, UnsortedSegment*...) live in
their own families. Semantics: docs/semantics/ragged.md."""

from tfprims.ops.ragged import count, cross, structure, to_tensor, variant
