"""The runner catches deliberately wrong ops and rules (and passes right ones).

Each broken op is registered under a real TF op type (so TF is the oracle) with
``temporary_op``, which restores the registry afterwards.
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from tfprims.core import get_op
from tfprims.testing import strategies as st
from tfprims.testing.calls import load_spec, make_call, prepare_call
from tfprims.testing.comparison import compare, derivative_tolerance, grad_tolerance
from tfprims.testing.oracles import raw_ops_renames, tf_outputs
from tfprims.testing.report import OpCheckError, write_errors
from tfprims.testing.runner import check_op, run_checks, temporary_op
from tfprims.testing.snippets import literal

import tfprims.ops  # noqa: F401

FLOAT_SPEC = lambda s: s.Spec(s.unary(("float32", "float64")))
N = 8  # examples per check: enough for derandomized runs to hit a differing value


def _sin_spec(s):
  return s.Spec(s.unary(("float32", "float64"), min_value=-4, max_value=4))


def test_correct_op_passes():
  with temporary_op("Sin", jnp.sin, spec=_sin_spec) as op:
    report = check_op(op, max_examples=N)
  assert {r.status for r in report.results.values()} == {"passed"}, report.summary()
  assert all(r.examples > 0 for r in report.results.values())


def test_wrong_value_is_caught_with_a_snippet():
  wrong = lambda x: jnp.sin(x) * (1 + 1e-3)
  with temporary_op("Sin", wrong, spec=_sin_spec) as op:
    with pytest.raises(OpCheckError) as info:
      check_op(op, ["values"], max_examples=N)
    msg = str(info.value)
    assert "check 'values' failed" in msg
    assert "tf.raw_ops.Sin(**tf_inputs, **attrs)" in msg
    assert "x=np.array(" in msg and "dtype=np.float" in msg
    # The snippet is ready to run: it reproduces both sides of the mismatch.
    scope = _snippet_scope(info.value)
  x = np.asarray(scope["inputs"]["x"])
  np.testing.assert_allclose(np.asarray(scope["actual"]), np.sin(x) * (1 + 1e-3), rtol=1e-6)
  np.testing.assert_allclose(np.asarray(scope["expected"]), np.sin(x), rtol=1e-6)
  # Shrunk to a small call: one element.
  assert x.size <= 1


def test_wrong_jvp_sign_is_caught():
  cos = get_op("Cos")
  with temporary_op("Sin", jnp.sin, spec=_sin_spec, jvp=(lambda t, x: -t * cos(x),)) as op:
    with pytest.raises(OpCheckError, match="check 'jvp' failed"):
      check_op(op, ["jvp"], max_examples=N)
    with pytest.raises(OpCheckError, match="check 'vjp' failed"):
      check_op(op, ["vjp"], max_examples=N)
    # The forward values are still right.
    check_op(op, ["values", "shape", "jit"], max_examples=N)


def test_wrong_transpose_is_caught():
  # Neg's JVP is itself; a transpose that forgets the sign breaks only the VJP.
  with temporary_op(
    "Neg", jnp.negative, linear=True, transpose=lambda ct, x: [ct], spec=FLOAT_SPEC
  ) as op:
    check_op(op, ["jvp"], max_examples=N)
    with pytest.raises(OpCheckError, match="check 'vjp' failed"):
      check_op(op, ["vjp"], max_examples=N)


def _dropping_batch_rule(args, dims, **params):
  # Forgets the batch axis: computes example 0 only and calls it unbatched.
  (x,), (d,) = args, dims
  return jnp.sin(jnp.take(x, 0, axis=d)), None


def test_batching_rule_dropping_the_batch_axis_is_caught():
  with temporary_op("Sin", jnp.sin, spec=_sin_spec, batching=_dropping_batch_rule) as op:
    with pytest.raises(OpCheckError, match="check 'vmap' failed"):
      check_op(op, ["vmap"], max_examples=N)


def _misplaced_batch_rule(args, dims, **params):
  # Claims the output batch axis is 0 whatever the input's was.
  (x,), _ = args, dims
  return jnp.sin(x), 0


def test_batching_rule_misplacing_the_batch_axis_is_caught():
  spec = lambda s: s.Spec(
    s.call(
      x=s.arrays(
        s.dtypes(("float32",)), s.shapes(min_rank=1, min_side=2), min_value=-4, max_value=4
      )
    )
  )
  with temporary_op("Sin", jnp.sin, spec=spec, batching=_misplaced_batch_rule) as op:
    with pytest.raises(OpCheckError, match="check 'vmap' failed"):
      check_op(op, ["vmap"], max_examples=20)


def _snippet_scope(error: OpCheckError) -> dict:
  src = str(error).split("reproduce:\n", 1)[1].split("\n\n", 1)[0]
  src = "\n".join(l[4:] for l in src.splitlines() if l.startswith("    "))
  scope = {}
  # The snippet turns x64 on globally, as a user's script would: not for later tests.
  x64 = bool(jax.config.jax_enable_x64)
  try:
    exec(compile(src, "<snippet>", "exec"), scope)
  finally:
    jax.config.update("jax_enable_x64", x64)
  return scope


def test_list_primitive_with_a_wrong_transpose_is_caught_and_reproduced():
  # A TensorList primitive takes the list's items (Spec.operands); its oracle
  # wraps them in a TF list. This PopBack transpose drops the last element's
  # cotangent.
  from tfprims.ops import tensorlist

  real = get_op("TensorListPopBack")
  drop_last = lambda cts, items: [
    tensorlist.PushBack(cts[0], jnp.zeros(items.aval.shape[1:], items.aval.dtype))
  ]
  with temporary_op(
    "TensorListPopBack",
    real.impl,
    multiple_results=True,
    linear=True,
    transpose=drop_last,
    spec=real.spec,
  ) as op:
    check_op(op, ["values", "jvp", "vmap"], max_examples=N)
    with pytest.raises(OpCheckError, match="check 'vjp' failed") as info:
      check_op(op, ["vjp"], max_examples=N)
    scope = _snippet_scope(info.value)
  # The snippet imports the oracle and reproduces both sides.
  assert scope["oracle"] is tensorlist.tf_pop_back
  ours, theirs = np.asarray(scope["ours"][0]), np.asarray(scope["tf_grads"][0])
  assert ours.shape == theirs.shape and not np.allclose(ours, theirs)
  np.testing.assert_array_equal(ours[-1], 0)


def test_wrong_dtype_is_caught_by_shape():
  with temporary_op("Sin", lambda x: jnp.sin(x).astype(jnp.float32), spec=_sin_spec) as op:
    with pytest.raises(OpCheckError, match="check 'shape' failed"):
      check_op(op, ["shape"], max_examples=N)


def test_x64_off_dtype_warning_is_caught():
  # A Cast-like op ignoring canonical_dtype warns with x64 off.
  def cast(x, *, DstT):
    return jnp.asarray(x, dtype=DstT)

  spec = lambda s: s.Spec(
    s.call(x=s.arrays("float32", s.shapes(max_rank=1)), DstT=s.just(np.dtype("float64")))
  )
  with temporary_op("Cast", cast, attrs=("DstT",), spec=spec) as op:
    with pytest.raises(OpCheckError, match="x64 off"):
      check_op(op, ["shape"], max_examples=4)


def test_spec_drawing_mostly_invalid_calls_fails():
  # MatMul with independent random shapes: TF rejects most calls.
  spec = lambda s: s.Spec(
    s.call(a=s.arrays("float32", s.shapes(2, 2, 1)), b=s.arrays("float32", s.shapes(2, 2, 1))),
    ignore_zero_sign="not what this test is about",
  )
  with temporary_op(
    "MatMul",
    lambda a, b, transpose_a=False, transpose_b=False: a @ b,
    attrs=("transpose_a", "transpose_b"),
    spec=spec,
  ) as op:
    with pytest.raises(OpCheckError, match="TF rejected most drawn calls"):
      check_op(op, ["values"], max_examples=N)


def test_temporary_op_restores_the_registry():
  before = get_op("Sin")
  with temporary_op("Sin", jnp.cos, spec=_sin_spec) as op:
    assert get_op("Sin") is op
  assert get_op("Sin") is before


def test_run_checks_on_one_call():
  x = np.array([0.5, -1.0, 2.0], np.float32)
  out = run_checks("Sin", {"x": x})
  assert out["values"] == "passed" and out["vmap"] == "passed"
  with temporary_op("Sin", lambda x: jnp.sin(x) + 1e-3, spec=_sin_spec) as op:
    with pytest.raises(AssertionError, match="eager vs TF"):
      run_checks(op, {"x": x}, ["values"])


def test_compare():
  f = np.float32
  assert compare(np.array([1.0, np.nan, np.inf], f), np.array([1.0, np.nan, np.inf], f)).ok
  assert not compare(np.array([np.nan], f), np.array([1.0], f)).ok
  assert not compare(np.array([np.inf], f), np.array([-np.inf], f)).ok
  assert not compare(np.array([1], np.int32), np.array([1], np.int64)).ok
  assert compare(np.array([1 + 1e-7], f), np.array([1.0], f), rtol=1e-5).ok
  assert not compare(np.array([1 + 1e-4], f), np.array([1.0], f), rtol=1e-5).ok
  assert not compare(
    np.array([1 + 1j], np.complex64), np.array([1 + 2j], np.complex64), rtol=1e-5
  ).ok
  assert not compare(np.zeros((2, 1)), np.zeros((1, 2))).ok


def test_literal_round_trips():
  import ml_dtypes

  values = [
    np.array([[1.5, np.nan], [-np.inf, -0.0]], np.float32),
    np.array(3, np.int64),
    np.zeros((0, 2), np.int8),
    np.array([1 + 2j, complex(np.nan, 1)], np.complex64),
    np.array([0.1, 2.0], ml_dtypes.bfloat16),
    np.array([True, False]),
  ]
  for v in values:
    back = eval(literal(v), {"np": np, "ml_dtypes": ml_dtypes})
    assert back.dtype == v.dtype and back.shape == v.shape
    np.testing.assert_array_equal(back, v)


def test_oracle_keeps_input_dtypes():
  # Given numpy arrays, TF's eager fast path runs LeakyRelu on a float16 vector
  # in float32 (its T attr's default); the runner passes tf.constant inputs.
  call = make_call(
    get_op("LeakyRelu"), {"features": np.array([1.0, -2.0], np.float16), "alpha": 0.2}
  )
  (out,) = tf_outputs(call)
  assert out.dtype == np.float16


def test_x64_is_restored_and_checks_auto_skip():
  before = jax.config.jax_enable_x64
  spec = lambda s: s.Spec(s.binary(("int8", "uint16", "int64")))
  with temporary_op("BitwiseAnd", jnp.bitwise_and, spec=spec) as op:
    report = check_op(op, ["values", "jvp", "vjp"], max_examples=3)
  assert jax.config.jax_enable_x64 == before
  assert report.results["values"].status == "passed"
  # Integer-only op def: no derivative checks.
  assert report.results["jvp"].status == "auto-skipped"
  assert "no float inputs" in report.results["jvp"].reason


def test_int_draws_do_not_count_as_jvp_examples():
  # Mul draws ints and floats: the int calls are discarded (n/a) for jvp. The drawn
  # examples come after Mul's canonical case (its float32 edge grid).
  report = check_op("Mul", ["jvp"], max_examples=4)
  r = report.results["jvp"]
  assert r.status == "passed" and r.examples == 4 + 1 and r.not_applicable > 0


def test_ops_taking_a_rng_key_operand():
  # Stateful random ops take a JAX key operand first (op.uses_rng); the runner
  # supplies one and vmap batches it.
  op = get_op("RandomUniform")
  if not op.uses_rng:
    pytest.skip("RandomUniform takes no key operand")
  report = check_op(op, ["shape", "vmap", "jit"], max_examples=2)
  assert {r.status for r in report.results.values()} == {"passed"}, report.summary()


def test_write_errors_merges_per_op(tmp_path):
  import json

  path = str(tmp_path / "errors.json")
  stats = lambda e: {"values": {"float32": {"max_abs": e, "max_rel": e, "examples": 1}}}
  write_errors(path, {"Sin": stats(1e-7), "Cos": stats(2e-7)}, profile="thorough")
  write_errors(path, {"Sin": stats(3e-7)})
  ops = json.loads(open(path).read())["ops"]
  assert ops["Sin"]["values"]["float32"]["max_abs"] == 3e-7  # replaced by the newer run
  assert ops["Cos"]["profile"] == "thorough"  # kept
  assert sorted(p.name for p in tmp_path.iterdir()) == ["errors.json"]


def test_raw_ops_keywords_renamed_generically():
  # Specs draw op-def names; tf.raw_ops renames a few keywords (TF's API defs).
  assert raw_ops_renames("Sum") == {"reduction_indices": "axis"}
  assert raw_ops_renames("Squeeze") == {"squeeze_dims": "axis"}
  assert raw_ops_renames("Split") == {"split_dim": "axis"}
  assert raw_ops_renames("Select") == {"t": "x", "e": "y"}
  assert raw_ops_renames("MatMul") == {}
  report = check_op("Mean", ["values"], max_examples=3)
  assert report.results["values"].status == "passed", report.summary()


def test_complex_values_compared_by_magnitude():
  # A tiny imaginary part of a large value carries the value's rounding error.
  close = compare(
    np.array([1e6 + 1e-3j], np.complex64),
    np.array([1e6 + 2e-3j], np.complex64),
    rtol=1e-5,
    atol=1e-6,
  )
  assert close.ok, close.message
  assert not compare(np.array([1 + 1j]), np.array([1 + 1.1j]), rtol=1e-5, atol=1e-6).ok
  # A part that is not finite: parts compared one by one.
  assert not compare(
    np.array([complex(np.inf, 1)]), np.array([complex(np.inf, 1.5)]), rtol=1e-5, atol=1e-6
  ).ok
  assert not compare(np.array([complex(np.inf, 1)]), np.array([complex(-np.inf, 1)])).ok
  # An overflowed product: TF's CPU kernels give NaN+NaNj in SIMD lanes and -inf+infj in
  # scalar code for the same inputs, so non-finite values with a NaN part agree ...
  c = np.complex64
  nan_inf, inf_inf = c(complex(np.nan, np.inf)), c(complex(-np.inf, np.inf))
  assert compare(np.array([nan_inf, c(complex(np.nan, np.nan))]), np.array([inf_inf, inf_inf])).ok
  # ... but not with a finite value, and real NaN is still not inf.
  assert not compare(np.array([nan_inf]), np.array([c(1e30)])).ok
  assert not compare(np.array([np.nan]), np.array([np.inf])).ok


def test_strategies_treat_bfloat16_as_float():
  assert st.is_float("bfloat16") and st.is_float(st.np_dtype("bfloat16"))
  assert st.kind("bfloat16") == "f" and st.is_inexact("complex64")
  assert not st.is_float("int8") and not st.is_float("complex64")


def test_derivative_tolerance_follows_the_least_precise_dtype():
  call = make_call(
    get_op("Cast"), {"x": np.ones(3, np.float16), "DstT": np.dtype("float64"), "Truncate": False}
  )
  prepare_call(call)
  spec = load_spec(call.op)
  tol = derivative_tolerance(call, [0], [np.dtype("float64")])
  assert tol(spec, np.dtype("float64")) == grad_tolerance(spec, np.dtype("float16"))
  same = derivative_tolerance(call, [], [np.dtype("float64")])
  assert same(spec, np.dtype("float64")) == grad_tolerance(spec, np.dtype("float64"))


def test_spec_examples_share_scales_the_profile():
  import hypothesis

  half = lambda s: s.Spec(s.unary(("float32",), min_value=-4, max_value=4), examples=0.5)
  with temporary_op("Sin", jnp.sin, spec=half) as op:
    scaled = check_op(op, ["values"], settings=hypothesis.settings(max_examples=8))
    explicit = check_op(op, ["values"], max_examples=5)
  assert scaled.results["values"].examples == 4
  assert explicit.results["values"].examples == 5
  with pytest.raises(ValueError, match="share"):
    st.Spec(st.unary(("float32",)), examples=0)


def test_fd_step_keeps_central_differences_on_one_piece():
  from tfprims.testing.oracles import tf_central_difference

  call = prepare_call(make_call(get_op("Abs"), {"x": np.array([2e-3], np.float32)}))
  default = tf_central_difference(call, [0], [True], [np.ones(1, np.float32)], widen=False)
  small = tf_central_difference(call, [0], [True], [np.ones(1, np.float32)], widen=False, step=1e-5)
  assert abs(default[0][0] - 2e-3 / (np.finfo(np.float32).eps ** (1 / 3))) < 1e-3  # straddles 0
  np.testing.assert_allclose(small[0], [1.0], rtol=1e-2)


# --- edge values, signed zeros and canonical cases -------------------------------------


def test_edge_values_hold_the_boundaries_of_each_draw():
  e = st.edge_values("float32")
  assert {np.inf, -np.inf, float(np.finfo(np.float32).max)} <= set(e)
  nans = [v for v in e if np.isnan(v)]
  assert sorted(np.signbit(nans).tolist()) == [False, True]  # NaN of both signs
  zeros = [v for v in e if v == 0]
  assert sorted(np.signbit(zeros).tolist()) == [False, True]
  assert min(abs(v) for v in e if v) == float(np.finfo(np.float32).smallest_subnormal)
  # Bounded draws: the bounds themselves, nothing outside them, no NaN.
  box = st.edge_values("float32", min_value=0, max_value=1)
  assert {0.0, 1.0} <= set(box) and all(0 <= v <= 1 for v in box)
  assert not any(np.isnan(v) for v in st.edge_values("float32", min_value=-1))
  assert np.inf in st.edge_values("float32", min_value=-1, allow_inf=True)
  # Bounds not representable in the dtype are rounded inward.
  assert all(v >= 1e-5 for v in st.edge_values("float16", min_value=1e-5))
  assert {0, 3} <= set(st.edge_values("int32", min_value=0, max_value=3))
  assert {-(2**31), 2**31 - 1} <= set(st.edge_values("int32"))


def test_bug_at_the_domain_boundary_is_found_by_the_draws():
  # Wrong only at exactly 1.0, the edge of the drawn domain: uniform draws miss it.
  spec = lambda s: s.Spec(s.unary(("float32",), min_value=0, max_value=1))
  wrong = lambda x: jnp.where(x == 1, 0.0, jnp.sin(x)).astype(x.dtype)
  with temporary_op("Sin", wrong, spec=spec) as op:
    with pytest.raises(OpCheckError, match="check 'values' failed"):
      check_op(op, ["values"], max_examples=N)


def test_nan_of_either_sign_and_infinities_are_drawn():
  seen = []
  import hypothesis

  hypothesis.settings(max_examples=200, derandomize=True, database=None)(
    hypothesis.given(st.arrays(np.float32, st.shapes(min_rank=1, min_side=1)))(
      lambda a: seen.append(a)
    )
  )()
  values = np.concatenate([a.ravel() for a in seen])
  nan = np.isnan(values)
  assert np.signbit(values[nan]).any() and (~np.signbit(values[nan])).any()
  assert np.isposinf(values).any() and np.isneginf(values).any()
  assert any(len(np.unique(a)) < a.size for a in seen if a.size > 1)  # ties


def test_sign_of_zero_is_compared():
  f = np.float32
  assert compare(np.array([-0.0], f), np.array([0.0], f)).ok
  assert not compare(np.array([-0.0], f), np.array([0.0], f), signed_zeros=True).ok
  assert compare(
    np.array([np.copysign(np.nan, -1)], f), np.array([np.nan], f), signed_zeros=True
  ).ok  # NaN's sign is not a value
  # Neg(+0.0) is -0.0 in TF; 0 - x gives +0.0.
  spec = lambda s: s.Spec(s.call(x=np.zeros(3, np.float32)), cases=[{"x": np.zeros(2, np.float32)}])
  with temporary_op("Neg", lambda x: 0 - x, spec=spec) as op:
    with pytest.raises(OpCheckError, match="signed zeros"):
      check_op(op, ["values"], max_examples=2)
  quiet = lambda s: s.Spec(s.call(x=np.zeros(3, np.float32)), ignore_zero_sign="a test")
  with temporary_op("Neg", lambda x: 0 - x, spec=quiet) as op:
    check_op(op, ["values"], max_examples=2)


def test_canonical_cases_run_in_every_check():
  # Wrong at one point the draws never reach (the spec draws [-1, 1]).
  spec = lambda s: s.Spec(
    s.unary(("float32",), min_value=-1, max_value=1, edges=False),
    cases=[{"x": np.array([3.25], np.float32)}],
  )
  wrong = lambda x: jnp.where(x == 3.25, 0.0, jnp.sin(x)).astype(x.dtype)
  with temporary_op("Sin", wrong, spec=spec) as op:
    with pytest.raises(OpCheckError, match="check 'values' failed") as info:
      check_op(op, ["values", "jit"], max_examples=2, raise_on_failure=True)
    assert "3.25" in str(info.value)
  with temporary_op("Sin", jnp.sin, spec=spec) as op:
    report = check_op(op, ["values"], max_examples=2)
  assert report.results["values"].examples == 3  # the case and two drawn calls
  refused = lambda s: s.Spec(
    s.call(x=np.ones(2, np.float32)), cases=[{"x": np.ones(2, np.int32)}]
  )  # Sin has no int kernel
  with temporary_op("Sin", jnp.sin, spec=refused) as op:
    with pytest.raises(OpCheckError, match="canonical case 0"):
      check_op(op, ["values"], max_examples=2)
