"""Property-test spec helpers shared by the nn modules: calling ``tf.raw_ops`` with
typed tensors, asking whether TF's CPU kernel runs a call, shapes and attrs of a
layout. TensorFlow is imported only when a spec is built (the value strategy several
families use is :func:`tfprims.ops.shared_specs.bounded_values`).
"""

from __future__ import annotations

import numpy as np

from tfprims.ops.nn._common import _ONEDNN_DTYPES, _channels_first
from tfprims.errors import import_tensorflow


def _tf_call(op_type, kwargs):
  """Runs ``tf.raw_ops.<op_type>`` with numpy inputs as typed tensors (raw ops convert
  bare numpy arrays to a T attr's default dtype: float64 MaxPool inputs would run in
  float32)."""
  tf = import_tensorflow()
  kwargs = {k: tf.constant(v) if isinstance(v, np.ndarray) else v for k, v in kwargs.items()}
  return getattr(tf.raw_ops, op_type)(**kwargs)


def _tf_accepts(op_type, kwargs) -> bool:
  """Whether TF's CPU kernel runs this call (some attr/dtype/layout combinations
  have no CPU kernel); specs drop the calls it refuses."""
  tf = import_tensorflow()
  try:
    _tf_call(op_type, kwargs)
    return True
  except (tf.errors.OpError, ValueError, TypeError):
    return False


def _layout_shape(fmt, n, c, spatial):
  return (n, c) + tuple(spatial) if _channels_first(fmt) else (n,) + tuple(spatial) + (c,)


def _layout_attr(fmt, spatial_values, fill=1):
  spatial_values = list(spatial_values)
  return [fill, fill] + spatial_values if _channels_first(fmt) else [fill] + spatial_values + [fill]


def _onednn_dtypes(st):
  """The dtypes TF runs through its oneDNN kernels here, where tfprims follows those
  kernels' edge values: bfloat16 only on CPUs with AVX512-BF16 (float32 where TF's
  oneDNN kernels are off, so the specs still draw)."""
  return [d for d in _ONEDNN_DTYPES if st.tf_onednn(d)] or ["float32"]
