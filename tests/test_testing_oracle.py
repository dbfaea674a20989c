"""tfprims.testing for a user's own op (one TF does not have): with no oracle every check
fails, saying to give one; ``Spec(oracle=...)`` takes a numpy or JAX reference that the
checks compare with; a report in which no check ran fails."""

import os

os.environ.setdefault("JAX_PLATFORMS", "cpu")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import hypothesis
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from tfprims.testing import CHECKS, OpCheckError, check_op, run_checks, temporary_op
from tfprims.testing.runner import register_profiles

OP = "TfprimsTestIsru"  # the inverse square root unit: no TF op of this type
# Few examples, derandomized (tests/ runs Hypothesis' default profile).
RUN = dict(max_examples=3, settings=hypothesis.settings(derandomize=True, database=None))


def _reference(x):
  return x / np.sqrt(1 + x * x)


def _spec(oracle=None, **kwargs):
  return lambda s: s.Spec(
    s.unary(("float32", "float64"), min_value=-50, max_value=50), oracle=oracle, **kwargs
  )


def _impl(x):
  return x / jnp.sqrt(1 + x * x)


@pytest.fixture(autouse=True)
def _profiles():
  register_profiles()


def test_without_an_oracle_every_check_fails_saying_what_to_give():
  with temporary_op(OP, _impl, batching="elementwise", spec=_spec()) as op:
    report = check_op(op, **RUN, raise_on_failure=False)
    assert [r.status for r in report.results.values()] == ["failed"] * len(CHECKS)
    with pytest.raises(OpCheckError) as info:
      check_op(op, **RUN)
    with pytest.raises(OpCheckError, match="nothing to compare with"):
      run_checks(op, {"x": np.ones(3, np.float32)})
  message = str(info.value)
  assert f"TensorFlow has no op '{OP}'" in message
  assert "st.Spec(calls, oracle=reference)" in message and f"check_op('{OP}'" in message
  assert "numpy or JAX function" in message
  assert message.count("nothing to compare with") == 1  # one message, not one per check


def test_a_numpy_reference_is_the_oracle():
  with temporary_op(OP, _impl, batching="elementwise", spec=_spec(_reference)) as op:
    report = check_op(op, **RUN)
  for check in CHECKS:
    r = report.results[check]
    assert r.status == "passed" and r.examples > 0, report.summary()


def test_a_jax_reference_and_check_op_oracle():
  jax_reference = lambda x: x * jax.lax.rsqrt(1 + x * x)
  with temporary_op(OP, _impl, batching="elementwise", spec=_spec()) as op:
    report = check_op(op, ["values", "jvp", "vmap"], oracle=jax_reference, **RUN)
  assert {r.status for r in report.results.values()} == {"passed"}, report.summary()


def test_values_are_compared_with_the_reference():
  """An impl 1% off fails ``values`` against the reference, with a snippet that reproduces
  it without TensorFlow."""
  wrong = lambda x: 1.01 * _impl(x)
  with temporary_op(OP, wrong, batching="elementwise", spec=_spec(_reference)) as op:
    with pytest.raises(OpCheckError, match="eager vs the reference") as info:
      check_op(op, ["values"], **RUN)
  message = str(info.value)
  assert "import tensorflow" not in message and "oracle(**inputs, **attrs)" in message


def test_a_wrong_jvp_fails_against_the_references_central_differences():
  def wrong_jvp(primals, tangents):
    (x,), (t,) = primals, tangents
    return _impl(x), t / jnp.sqrt(1 + x * x)  # d/dx is (1 + x**2) ** -1.5

  with temporary_op(OP, _impl, jvp=wrong_jvp, batching="elementwise", spec=_spec(_reference)) as op:
    with pytest.raises(OpCheckError, match="central differences"):
      check_op(op, ["jvp"], **RUN)


def test_a_reference_returning_tf_tensors_uses_tf_autodiff():
  """A TF function as the oracle of an op TF does not have: TF's autodiff is the
  derivative oracle (the report has no central-difference notes; values against TF)."""
  import tensorflow as tf
  from tfprims.testing.oracles import returns_tf

  tf_isru = lambda x: x * tf.math.rsqrt(1 + x * x)
  with temporary_op(OP, _impl, batching="elementwise", spec=_spec(tf_isru)) as op:
    report = check_op(op, ["values", "jvp", "vjp"], **RUN)
  assert {r.status for r in report.results.values()} == {"passed"}, report.summary()
  assert returns_tf(tf_isru) and not returns_tf(_reference)


def test_a_report_in_which_no_check_ran_fails():
  """BitwiseAnd (a TF op) has no float inputs: jvp alone compares nothing."""
  spec = lambda s: s.Spec(s.binary(("int8", "int32")))
  with temporary_op("BitwiseAnd", jnp.bitwise_and, spec=spec) as op:
    with pytest.raises(
      OpCheckError,
      match=r"no check ran, so nothing was compared \(jvp: "
      r"no float inputs\)",
    ):
      check_op(op, ["jvp"], **RUN)
    report = check_op(op, ["values", "jvp"], **RUN)
  assert report.results["jvp"].status == "auto-skipped"  # values ran: the report passes
  # A reference of an integer op: its drawn calls are n/a for jvp (nothing differentiable).
  ints = lambda s: s.Spec(s.unary(("int32",)), oracle=lambda x: x * 2)
  with temporary_op(OP, lambda x: x * 2, batching="elementwise", spec=ints) as op:
    report = check_op(op, ["jvp", "vjp"], **RUN, raise_on_failure=False)
  assert [r.status for r in report.results.values()] == ["failed", "failed"]
  assert "no drawn call applies" in report.results["jvp"].message


def test_a_spec_skipping_every_check_still_passes():
  """Skips the spec declares, with reasons, are not failures."""
  skip = {c: "not comparable" for c in CHECKS}
  with temporary_op(OP, _impl, batching="elementwise", spec=_spec(skip=skip)) as op:
    report = check_op(op, **RUN)
  assert {r.status for r in report.results.values()} == {"skipped"}
