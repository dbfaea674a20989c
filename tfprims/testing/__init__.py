"""Property-testing TF ops against TensorFlow: specs, strategies and the runner."""

from tfprims.testing.spec import CHECKS, Spec  # noqa: F401
