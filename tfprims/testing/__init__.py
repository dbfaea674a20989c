"""Property-testing TF ops against TensorFlow: specs, strategies and the runner.

``import tfprims.testing`` is light (no TensorFlow, no Hypothesis); the runner
is imported on first use of one of its names::

    from tfprims.testing import check_op
    check_op("MatMul")                 # raises OpCheckError on failure

    test_my_op = tfprims.testing.property_test("MyOp")   # in a pytest module
"""

from tfprims.testing.spec import CHECKS, GRAD_ORACLES, Spec  # noqa: F401

_RUNNER_NAMES = (
    "check_op", "property_test", "run_checks", "temporary_op", "OpCheckError",
    "OpReport", "CheckResult", "CheckFailure", "compare", "register_profiles",
    "auto_skips", "recorded_errors", "write_errors", "ERRORS_ENV", "load_spec",
    "make_call", "prepare_call", "snippet",
)

__all__ = ["CHECKS", "GRAD_ORACLES", "Spec", *_RUNNER_NAMES]


def __getattr__(name):
  if name in _RUNNER_NAMES:
    from tfprims.testing import runner
    return getattr(runner, name)
  if name in ("strategies", "runner"):
    import importlib
    return importlib.import_module(f"tfprims.testing.{name}")
  raise AttributeError(f"module 'tfprims.testing' has no attribute {name!r}")
