"""Constant folding with numpy (tfprims.folding) gives exactly XLA's result.

For every registered op, on calls drawn from its property spec: where the numpy
fold applies, its outputs equal folding with XLA bit for bit (NaNs in the same
places); where it does not, it must decline (return None), never guess.
"""

import jax
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings

import tfprims
from tfprims import core, dtypes, folding
from tfprims.testing.calls import load_spec, make_call, prepare_call

_OPS = sorted(t for t in tfprims.registered_ops() if core.get_op(t).spec is not None)
_applied: dict = {}


@pytest.mark.parametrize("op_type", _OPS)
def test_numpy_fold_equals_xla_fold(op_type):
  op = core.get_op(op_type)
  spec = load_spec(op)
  if spec is None or spec.calls is None or op.uses_rng:
    pytest.skip("no drawable calls")

  @settings(max_examples=10, deadline=None, derandomize=True, database=None,
            suppress_health_check=list(HealthCheck))
  @given(spec.calls)
  def check(kwargs):
    try:
      call = prepare_call(make_call(op, kwargs, spec.oracle, spec))
      operands, params = call.operands, call.params
    except Exception:  # a call the op rejects: nothing to fold
      return
    # As the interpreter's constants are: in the dtypes JAX computes in.
    with np.errstate(over="ignore"):
      operands = [np.asarray(o).astype(dtypes.canonical_dtype(np.asarray(o).dtype))
                  for o in operands]
    got = folding.fold(op.impl, operands, params)
    if got is None:
      return
    _applied[op_type] = True
    with jax.ensure_compile_time_eval():
      want = op.impl(*operands, **params)
    want = list(want) if op.multiple_results else [want]
    assert len(got) == len(want)
    for g, w in zip(got, want):
      w = np.asarray(w)
      assert g.dtype == w.dtype and g.shape == w.shape, (g.dtype, g.shape, w.dtype, w.shape)
      # bit for bit: -0.0, NaN payloads and bfloat16 included
      assert np.ascontiguousarray(g).tobytes() == np.ascontiguousarray(w).tobytes(), (g, w)

  check()


def test_shape_arithmetic_folds_with_numpy():
  # The ops of shape computations (Keras Flatten, RNN state set-up) must not need XLA.
  for op_type in ("StridedSlice", "Pack", "Prod", "Fill", "ConcatV2", "Range"):
    if op_type in _OPS and op_type not in _applied:
      test_numpy_fold_equals_xla_fold(op_type)
  assert {"Pack", "Fill", "ConcatV2"} <= set(_applied), sorted(_applied)
