"""Property-testing TF ops against TensorFlow: specs, strategies and the runner.

``import tfprims.testing`` is light (no TensorFlow, no Hypothesis); the runner's
modules are imported on first use of one of their names::

    from tfprims.testing import check_op
    check_op("MatMul")                 # raises OpCheckError on failure

    test_my_op = tfprims.testing.property_test("MyOp")   # in a pytest module
"""

from tfprims.testing.spec import CHECKS, GRAD_ORACLES, Spec

# Name -> the submodule defining it, imported on first access.
_LAZY_NAMES = {
  "check_op": "runner",
  "property_test": "runner",
  "run_checks": "runner",
  "temporary_op": "runner",
  "register_profiles": "runner",
  "auto_skips": "runner",
  "OpCheckError": "report",
  "OpReport": "report",
  "CheckResult": "report",
  "CheckFailure": "report",
  "recorded_errors": "report",
  "write_errors": "report",
  "ERRORS_ENV": "report",
  "compare": "comparison",
  "load_spec": "calls",
  "make_call": "calls",
  "prepare_call": "calls",
  "snippet": "snippets",
}

_SUBMODULES = (
  "strategies",
  "report",
  "comparison",
  "oracles",
  "calls",
  "snippets",
  "checks",
  "runner",
)

__all__ = ["CHECKS", "GRAD_ORACLES", "Spec", *_LAZY_NAMES]  # noqa: PLE0604  (str keys)


def __getattr__(name):
  import importlib

  if name in _LAZY_NAMES:
    return getattr(importlib.import_module(f"tfprims.testing.{_LAZY_NAMES[name]}"), name)
  if name in _SUBMODULES:
    return importlib.import_module(f"tfprims.testing.{name}")
  raise AttributeError(f"module 'tfprims.testing' has no attribute {name!r}")
