"""Hypothesis profiles for the property tests, and the max-error record.

Profiles (select with ``HYPOTHESIS_PROFILE``):

* ``default`` / ``ci``: derandomized (reproducible), few examples per op per
  check, no deadline: the whole suite fits CI (~5 s per op).
* ``thorough``: 200 random examples per op per check.
* ``dev``: 20 random examples.

With ``TFPRIMS_MAX_ERRORS=path.json`` set, the largest errors vs TF seen per op,
check and dtype are merged into that JSON file at the end of the session
(``scripts/gen_ops_doc.py`` shows them in docs/ops.md); use it with the
thorough profile, e.g. ``HYPOTHESIS_PROFILE=thorough
TFPRIMS_MAX_ERRORS=property_tests/max_errors.json pytest property_tests``.
With ``TFPRIMS_DRAWN_VALUES=path.json`` the classes of boundary values each op's values
check ran on (NaN of each sign, infinities, -0.0, subnormals, ties, ...) are merged
into that file (``scripts/gen_fidelity_doc.py`` shows them in docs/fidelity.md).
"""

import os

os.environ.setdefault("JAX_PLATFORMS", "cpu")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
# tfprims follows TF's oneDNN CPU kernels where they and Eigen's disagree on edge values
# (TF's default on Intel CPUs; elsewhere TF runs Eigen's): the suites compare with those
# kernels on every x86 CPU. TF_ENABLE_ONEDNN_OPTS=0 compares with Eigen's instead, and
# the tests pinning oneDNN's edge values then fail (tfprims/testing/tf_kernels.py).
os.environ.setdefault("TF_ENABLE_ONEDNN_OPTS", "1")
# The quick (CI) profile compiles thousands of small programs, and XLA:CPU spends most of
# that time in LLVM: at its lowest optimisation level the suite runs ~12% faster. The HLO
# is the same; LLVM then fuses no multiply-add into an FMA and vectorizes no loop (float
# results move by an ulp or two, which float comparisons allow). The thorough profile, and
# any XLA_FLAGS of your own, run XLA's default level (docs/testing.md).
if os.environ.get("HYPOTHESIS_PROFILE", "default") in ("default", "ci"):
  os.environ.setdefault("XLA_FLAGS", "--xla_backend_optimization_level=0")

import hypothesis

from tfprims.testing import calls, report, runner

runner.register_profiles()
PROFILE = os.environ.get("HYPOTHESIS_PROFILE", "default")
hypothesis.settings.load_profile(PROFILE)


def pytest_report_header(config):
  s = hypothesis.settings.default
  return (
    f"tfprims property tests: hypothesis profile {PROFILE!r} "
    f"(max_examples={s.max_examples}, derandomize={s.derandomize})"
  )


def pytest_runtest_teardown(item):
  calls.clear_caches()
  # Written after every test, not once per session: a long thorough run keeps
  # what it measured even when a later op aborts the process.
  path = os.environ.get(report.ERRORS_ENV)
  if path:
    report.write_errors(path, profile=PROFILE)
  path = os.environ.get(report.DRAWN_ENV)
  if path:
    report.write_drawn(path)
