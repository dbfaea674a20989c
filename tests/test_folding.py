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

  prepared = []

  @settings(
    max_examples=10,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=list(HealthCheck),
  )
  @given(spec.calls)
  def check(kwargs):
    try:
      call = prepare_call(make_call(op, kwargs, spec.oracle, spec))
      operands, params = call.operands, call.params
    except Exception:  # a call the op rejects: nothing to fold
      return
    prepared.append(True)
    # As the interpreter's constants are: in the dtypes JAX computes in.
    with np.errstate(over="ignore"):
      operands = [
        np.asarray(o).astype(dtypes.canonical_dtype(np.asarray(o).dtype)) for o in operands
      ]
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
  # Each prepared call was folded and compared, or the fold declined it (never a guess).
  assert prepared, f"{op_type}: the op rejected every drawn call: nothing was checked"


def test_shape_arithmetic_folds_with_numpy():
  # The ops of shape computations (Keras Flatten, RNN state set-up) must not need XLA.
  for op_type in ("StridedSlice", "Pack", "Prod", "Fill", "ConcatV2", "Range"):
    if op_type in _OPS and op_type not in _applied:
      test_numpy_fold_equals_xla_fold(op_type)
  assert {"Pack", "Fill", "ConcatV2"} <= set(_applied), sorted(_applied)


# --- params a trace closes over (tfprims.folding.Weight) -----------------------------------


def _batch_norm_model():
  import tensorflow as tf

  gamma = tf.Variable(np.linspace(0.5, 2.0, 4, dtype=np.float32), name="gamma")
  var = tf.Variable(np.linspace(1.0, 3.0, 4, dtype=np.float32), name="var")
  steps = tf.Variable(np.int32(3), name="steps")

  @tf.function(input_signature=[tf.TensorSpec([2, 4], tf.float32)])
  def f(x):
    # Keras' batch norm shapes its parameters for broadcasting: data movement only.
    scale = tf.reshape(tf.math.rsqrt(var + 1e-3) * tf.reshape(gamma, [1, 4]), [1, 4])
    steps.assign_add(1)  # integer arithmetic on a param: exact in numpy
    return x * scale

  return f


def test_closed_over_params_fold_exact_data_movement_only():
  import tensorflow as tf

  f = _batch_norm_model()
  fn, params = tfprims.convert(f)
  x = np.arange(8, dtype=np.float32).reshape(2, 4)
  closed = jax.make_jaxpr(lambda x: fn(params, x))(x)
  names = [e.primitive.name for e in closed.jaxpr.eqns]
  # gamma's Reshape is folded; rsqrt(var + eps), float arithmetic, runs in the program.
  assert names.count("tf.Reshape") == 1, names
  assert {"tf.Rsqrt", "tf.AddV2", "tf.Mul"} <= set(names)
  # Params passed as arguments are traced: every op is in the jaxpr.
  traced = jax.make_jaxpr(fn)(params, x)
  assert [e.primitive.name for e in traced.jaxpr.eqns].count("tf.Reshape") == 2
  want = f(tf.constant(x)).numpy()
  (out, new_params) = jax.jit(lambda x: fn(params, x))(x)
  np.testing.assert_allclose(out, want, rtol=1e-6)
  assert int(new_params["steps"]) == int(params["steps"]) + 1
  assert all(isinstance(v, jax.Array) for v in new_params.values())
  out_eager, _ = fn(params, x)
  np.testing.assert_allclose(out_eager, want, rtol=1e-6)


def test_a_weight_read_twice_is_one_constant():
  w = folding.weight(np.ones((3,), np.float32))
  closed = jax.make_jaxpr(lambda x: core.tfops.Mul(core.tfops.AddV2(x, w), w))(
    np.ones(3, np.float32)
  )
  assert len(closed.consts) == 1
  # Float arithmetic on weights alone is bound (the program computes it), not
  # folded with XLA; a Reshape is folded into a weight.
  staged = jax.make_jaxpr(lambda: core.get_op("Rsqrt").fold(w))()
  assert [e.primitive.name for e in staged.jaxpr.eqns] == ["tf.Rsqrt"]
  folded = core.get_op("Reshape").fold(w, shape=(1, 3))
  assert folding.is_weight(folded) and folded.shape == (1, 3)
