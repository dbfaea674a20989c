import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
# tfprims follows TF's oneDNN CPU kernels where they and Eigen's disagree on edge values
# (TF's default on Intel CPUs; elsewhere TF runs Eigen's): the suites compare with those
# kernels on every x86 CPU. TF_ENABLE_ONEDNN_OPTS=0 compares with Eigen's instead, and
# the tests pinning oneDNN's edge values then fail (tfprims/testing/tf_kernels.py).
os.environ.setdefault("TF_ENABLE_ONEDNN_OPTS", "1")
os.environ.setdefault("JAX_PLATFORMS", "cpu")
# The quick (CI) profile compiles thousands of small programs, and XLA:CPU spends most of
# that time in LLVM: at its lowest optimisation level the suite runs ~12% faster. The HLO
# is the same; LLVM then fuses no multiply-add into an FMA and vectorizes no loop (float
# results move by an ulp or two, which float comparisons allow). The thorough profile, and
# any XLA_FLAGS of your own, run XLA's default level (docs/testing.md).
if os.environ.get("HYPOTHESIS_PROFILE", "default") in ("default", "ci"):
  os.environ.setdefault("XLA_FLAGS", "--xla_backend_optimization_level=0")
# No persistent compilation cache (tfprims turns one on where artifacts are loaded):
# tests neither read programs an earlier run compiled nor write to ~/.cache. Tests of
# the cache give their subprocesses a cache directory of their own.
os.environ.setdefault("TFPRIMS_CACHE_DIR", "off")

import jax
import pytest


@pytest.fixture(scope="module", autouse=True)
def _release_compiled_programs():
  """Each module's compiled programs are dropped after it: kept for the whole run, they
  exhaust the process's memory mappings (Linux's limit: 65530) and XLA's compiler crashes."""
  yield
  jax.clear_caches()


@pytest.fixture(scope="module", autouse=True)
def _no_leaked_ops():
  """An op a test registers must be gone after its module: a leak changes what later
  tests in the same worker see (docs/ops.md's check counts every registered op)."""
  import tfprims.ops  # noqa: F401  (tfprims' own ops, registered before counting)
  from tfprims import core

  before = core.declared_op_types()
  yield
  leaked = core.declared_op_types() - before
  assert not leaked, f"ops registered and left behind: {sorted(leaked)}"


@pytest.fixture
def x64():
  """Runs a test with jax_enable_x64 on."""
  with jax.enable_x64(True):
    yield
