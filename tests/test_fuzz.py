"""The fuzz target (tfprims.testing.fuzz): random compositions of ops vs TF.

A short deterministic slice by default; HYPOTHESIS_PROFILE=thorough runs a long one.
Its own machinery is checked too: a planted wrong op must be found."""

import os

import jax.numpy as jnp
import pytest

from tfprims.testing import fuzz

THOROUGH = os.environ.get("HYPOTHESIS_PROFILE") == "thorough"


@pytest.mark.parametrize("seed", [0, 1] + ([2, 3, 4, 5, 6, 7] if THOROUGH else []))
def test_random_programs_match_tf(seed):
  findings = fuzz.run(seed=seed, cases=150 if THOROUGH else 6)
  assert not findings, "\n\n".join(f.report() for f in findings)


def test_a_wrong_op_is_found_and_reported_with_a_reproducer():
  from tfprims.testing.runner import temporary_op

  # Sin computing cos: the first program using it must fail its value check.
  with temporary_op("Sin", lambda x: jnp.cos(x), batching="elementwise"):
    program = next(
      p
      for p in (fuzz.make_program(11, i) for i in range(200))
      if any("Sin(" in s.source for s in p.steps)
    )
    import numpy as np

    finding = fuzz.check_program(program, np.random.default_rng(0))
  assert finding is not None and finding.check == "values"
  report = finding.report()
  assert "tf.raw_ops.Sin" in report and "tfprims.convert_functional" in report
