"""Ragged-tensor kernels (family ``ragged``): RaggedTensorToTensor, and the ops whose
output size is the ragged structure's (RaggedGather, RaggedRange) with static
sizes resolved from known row partitions, and RaggedTensorToSparse. The numeric ops
``tf.ragged`` reductions and constructors emit (Cumsum, UnsortedSegment*...) live in
their own families. Semantics: docs/semantics/ragged.md."""

from tfprims.ops.ragged import structure, to_tensor  # noqa: F401
