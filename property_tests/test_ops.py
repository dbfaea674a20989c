"""Every registered op against ``tf.raw_ops.<Op>``: values, shape/dtype, JVP, VJP,
vmap and jit, on calls drawn from the op's spec (see docs/testing.md)."""

import pytest

import tfprims.ops  # noqa: F401  (registers the ops)
from tfprims.core import registered_ops
from tfprims.testing import check_op


@pytest.mark.parametrize("op_type", registered_ops())
def test_op(op_type):
  report = check_op(op_type)
  print(report.summary())
