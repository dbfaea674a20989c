"""Which of TF's CPU kernels this process runs: oneDNN's or Eigen's.

TF 2.21 on x86 runs float32 (and the NCHW, grouped and dilated convolutions only they
take) through oneDNN where its oneDNN kernels are on: by default on Intel CPUs, with
``TF_ENABLE_ONEDNN_OPTS=1`` elsewhere (the test suites' conftests set it). float16 and
bfloat16 go to oneDNN only on CPUs with AVX512-FP16/BF16; everything else runs Eigen's
kernels. Where the two disagree on edge values (NaN windows, tie order, zero signs,
placeholder shapes) tfprims follows one, documented in docs/semantics/nn.md, and tests
compare those edge values only where TF runs that kernel.
"""

from __future__ import annotations

import functools

import numpy as np

from tfprims import errors


@functools.cache
def onednn(dtype: str = "float32") -> bool:
  """Whether TF runs ``dtype``'s CPU kernels through oneDNN in this process.

  Probed on Softmax of ``[NaN, 1]``: oneDNN's max ignores NaN, so only the NaN entry is
  NaN; Eigen's makes the whole row NaN.
  """
  tf = errors.import_tensorflow()
  row = tf.raw_ops.Softmax(logits=tf.constant([[np.nan, 1.0]], dtype)).numpy()
  return not np.isnan(float(row[0, 1]))
