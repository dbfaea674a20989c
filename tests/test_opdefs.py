"""Attr decoding: TensorProtos decode exactly as tf.make_ndarray does."""

import numpy as np
import pytest
import tensorflow as tf
from hypothesis import given, settings, strategies as st
from hypothesis.extra import numpy as hnp

from tfprims import opdefs

_DTYPES = [
  np.float32,
  np.float64,
  np.int32,
  np.int64,
  np.bool_,
  np.float16,
  np.uint8,
  np.int8,
  np.complex64,
]


def _protos(value):
  yield tf.make_tensor_proto(value)  # packed tensor_content where TF packs
  proto = tf.make_tensor_proto(value)
  if proto.tensor_content:  # the same values in the typed field, unpacked
    unpacked = tf.make_tensor_proto(value)
    unpacked.tensor_content = b""
    field = opdefs._VALUE_FIELDS.get(value.dtype)
    if field is not None:
      getattr(unpacked, field).extend(value.ravel().tolist())
      yield unpacked


@settings(max_examples=60, deadline=None)
@given(
  st.sampled_from(_DTYPES).flatmap(
    lambda d: hnp.arrays(d, hnp.array_shapes(min_dims=0, max_dims=3, min_side=0, max_side=4))
  )
)
def test_decode_tensor_matches_make_ndarray(value):
  for proto in _protos(value):
    got, want = opdefs.decode_tensor(proto), tf.make_ndarray(proto)
    assert got.dtype == want.dtype and got.shape == want.shape
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("dtype", [tf.float32, tf.int64, tf.bool, tf.bfloat16, tf.float16])
@pytest.mark.parametrize("shape", [[], [3], [2, 0], [2, 3]])
def test_splatted_constants(dtype, shape):
  # tf.fill-style constants store one value for the whole tensor; none means zeros.
  for value in (1, 0):
    proto = tf.make_tensor_proto(
      bool(value) if dtype == tf.bool else value, dtype=dtype, shape=shape
    )
    assert not proto.tensor_content
    got, want = opdefs.decode_tensor(proto), tf.make_ndarray(proto)
    assert got.dtype == want.dtype and got.shape == want.shape
    np.testing.assert_array_equal(got, want)
  empty = tf.make_tensor_proto(np.zeros(shape, dtype.as_numpy_dtype), dtype=dtype)
  empty.ClearField("tensor_content")
  for f in ("float_val", "int64_val", "bool_val", "half_val"):
    empty.ClearField(f)
  np.testing.assert_array_equal(opdefs.decode_tensor(empty), tf.make_ndarray(empty))
