"""The deploy path is lean: ``import tfprims`` then ``tfprims.load_exported(path)(x)``
imports neither TensorFlow, nor tfprims' op families, nor hypothesis; the converter API
still resolves on first use, as before."""

import os
import subprocess
import sys
import textwrap

os.environ.setdefault("JAX_PLATFORMS", "cpu")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import numpy as np
import pytest

import tfprims
from tfprims import cli


def _python(script, **env):
  env = dict(os.environ, JAX_PLATFORMS="cpu", TF_CPP_MIN_LOG_LEVEL="3", **env)
  proc = subprocess.run(
    [sys.executable, "-c", textwrap.dedent(script)],
    capture_output=True,
    text=True,
    env=env,
    timeout=300,
  )
  assert proc.returncode == 0 and proc.stdout.strip().endswith("ok"), proc.stderr[-3000:]


@pytest.fixture(scope="module")
def artifact(tmp_path_factory):
  root = tmp_path_factory.mktemp("lean")
  assert cli.main(["export", "--example", "mlp", str(root / "art")]) == 0
  x = np.random.default_rng(0).standard_normal((3, 16)).astype(np.float32)
  with tfprims.override_config("compilation_cache", None):
    want = np.asarray(tfprims.load_exported(str(root / "art"))(x))
  np.save(root / "x.npy", x)
  np.save(root / "want.npy", want)
  return root


def test_loading_an_artifact_imports_no_tensorflow_no_ops_no_hypothesis(artifact, tmp_path):
  _python(
    f"""
      import sys
      import numpy as np
      import tfprims
      got = tfprims.load_exported({str(artifact / 'art')!r})(np.load({str(artifact / 'x.npy')!r}))
      np.testing.assert_allclose(np.asarray(got), np.load({str(artifact / 'want.npy')!r}),
                                 rtol=1e-6)
      heavy = sorted(m for m in sys.modules if m.split(".")[0] in ("tensorflow", "hypothesis",
                                                                   "keras", "flax")
                     or m == "tfprims.ops" or m.startswith("tfprims.ops."))
      assert not heavy, heavy
      print("ok")
  """,
    TFPRIMS_CACHE_DIR=str(tmp_path),
  )


def test_the_converter_api_resolves_on_first_use():
  _python("""
      import sys
      import tfprims
      assert "tfprims.ops" not in sys.modules and "jax" not in sys.modules
      import tensorflow as tf
      import numpy as np
      f = tf.function(lambda x: tf.sin(x) * 2.0,
                      input_signature=[tf.TensorSpec([None, 3], tf.float32)])
      fn, params = tfprims.convert(f)           # imports the converter and every op
      assert "tfprims.ops" in sys.modules
      x = np.ones((2, 3), np.float32)
      np.testing.assert_allclose(np.asarray(fn(params, x)[0]), f(x).numpy(), rtol=1e-6)
      print("ok")
  """)
  # A converter module imported directly registers every op family, as before.
  _python("""
      from tfprims.core import get_op
      assert get_op("MatMul").primitive.name == "tf.MatMul", get_op("MatMul").primitive.name
      print("ok")
  """)


def test_every_public_name_resolves():
  for name in tfprims.__all__ + ["TFModule"] * ("flax" in sys.modules):
    assert getattr(tfprims, name) is not None, name
  names = dir(tfprims)
  assert {
    "convert",
    "load_exported",
    "TFModule",
    "deploy",
    "core",
    "__version__",
    "enable_compilation_cache",
    "supported_op_types",
  } <= set(names)
  assert tfprims.supported_op_types is tfprims.core.declared_op_types
  assert tfprims.deploy.load_exported is tfprims.load_exported
  with pytest.raises(AttributeError, match="NoSuchName"):
    tfprims.NoSuchName  # noqa: B018


def test_without_tensorflow_the_converters_name_the_extra(tmp_path):
  # A lean install (no TensorFlow): loading a frozen graph, a Keras file or a
  # SavedModel says which extra to install; the command line says it without a traceback.
  script = """
import builtins, sys
real = builtins.__import__
def no_tf(name, *args, **kwargs):
  if name == "tensorflow" or name.startswith("tensorflow."):
    raise ModuleNotFoundError("No module named 'tensorflow'", name="tensorflow")
  return real(name, *args, **kwargs)
builtins.__import__ = no_tf
import tfprims
for load in (lambda: tfprims.load_frozen_graph("m.pb", ["x"], ["y"]),
             lambda: tfprims.load_keras("m.keras")):
  try:
    load()
  except tfprims.MissingDependencyError as e:
    assert "pip install 'tfprims[tf]'" in str(e), e
    assert isinstance(e, ImportError)
  else:
    raise AssertionError("no error")
sys.argv = ["tfprims", "inspect", "m.pb", "--inputs", "x", "--outputs", "y"]
from tfprims import cli
sys.exit(cli.main(sys.argv[1:]))
"""
  (tmp_path / "m.pb").write_bytes(b"")
  (tmp_path / "m.keras").write_bytes(b"")
  out = subprocess.run(
    [sys.executable, "-c", script],
    cwd=tmp_path,
    capture_output=True,
    text=True,
    env=dict(os.environ, JAX_PLATFORMS="cpu"),
    timeout=300,
  )
  assert out.returncode == 2, out.stdout + out.stderr
  assert "MissingDependencyError" in out.stderr and "tfprims[tf]" in out.stderr
  assert "Traceback" not in out.stderr
