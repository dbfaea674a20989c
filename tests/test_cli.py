"""The ``tfprims`` command line (``tfprims inspect``) and the embedded examples."""

import os
import re
import subprocess
import sys

os.environ.setdefault("JAX_PLATFORMS", "cpu")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import numpy as np
import pytest
import tensorflow as tf

from tfprims import cli, examples

# An equation line of a printed jaxpr: "  a:f32[2] b:i32[] = tf.Op[...] x y".
EQUATION = re.compile(r"^\s+(?:[a-z_]+:\S+\s+)+= ([\w.\-]+)", re.M)


def section(out: str, title: str) -> str:
  """The text of the ``== title ... ==`` section of the inspect output."""
  start = out.index(f"== {title}")
  end = out.find("\n== ", start + 1)
  return out[start:] if end < 0 else out[start:end]


def histogram(out: str) -> dict:
  rows = re.findall(r"^  (\w+)\s+(\d+)\s+(\d+)$", section(out, "TF ops in the jaxpr"), re.M)
  return {op: (int(jaxpr), int(graph)) for op, jaxpr, graph in rows}


def max_abs_difference(out: str) -> float:
  return float(re.search(r"^max abs difference vs TF: (\S+) ", out, re.M).group(1))


def run(capsys, *argv):
  code = cli.main(list(argv))
  captured = capsys.readouterr()
  return code, captured.out, captured.err


def test_inspect_default_example(capsys):
  code, out, err = run(capsys, "inspect", "--full")
  assert code == 0, err
  assert out.startswith(f"tfprims inspect: example '{examples.DEFAULT}'")
  assert "images: float32[None, 28, 28, 1]" in out
  assert re.search(r"^params: 10 arrays, [\d,]+ values", out, re.M)
  hist = histogram(out)
  # The Keras CNN's ops, each counted in the jaxpr and in the TF graph.
  assert hist["Conv2D"] == (2, 2)
  assert hist["MatMul"] == (1, 1)
  for op in ("Relu", "MaxPool", "Softmax", "BiasAdd"):
    assert hist[op][0] >= 1, op
  assert "non-TF primitives: none" in out
  # Every equation of the (full) jaxpr is a TF primitive, and they are the histogram's.
  prims = EQUATION.findall(section(out, "jaxpr"))
  assert prims and all(p.startswith("tf.") for p in prims), prims
  assert sorted(set(p[3:] for p in prims)) == sorted(hist)
  assert len(prims) == sum(j for j, _ in hist.values())
  assert "more equations" not in out
  assert re.search(r"^\s+[a-z]+ = param conv1/kernel$", out, re.M)
  assert max_abs_difference(out) < 1e-5
  assert re.search(r"^OK: within 1e-05", out, re.M)


def test_inspect_abridges_the_jaxpr(capsys):
  code, out, _ = run(capsys, "inspect", "--max-equations", "5")
  assert code == 0
  jaxpr = section(out, "jaxpr")
  n = int(re.search(r"jaxpr \((\d+) top-level equations\)", jaxpr).group(1))
  assert len(EQUATION.findall(jaxpr)) == 5
  assert f"... {n - 5} more equations (use --full)" in jaxpr


def test_inspect_mlp(capsys):
  code, out, err = run(capsys, "inspect", "--example", "mlp")
  assert code == 0, err
  hist = histogram(out)
  assert hist["MatMul"] == (3, 3)
  assert hist["BiasAdd"] == (3, 3)
  assert "Relu" in hist and "Tanh" in hist
  assert max_abs_difference(out) < 1e-5


class _Dense(tf.Module):
  def __init__(self):
    super().__init__()
    rng = np.random.default_rng(0)
    self.w = tf.Variable(rng.standard_normal((3, 4)).astype(np.float32), name="w")
    self.b = tf.Variable(np.abs(rng.standard_normal((4,))).astype(np.float32), name="b")

  @tf.function(input_signature=[tf.TensorSpec([None, 3], tf.float32, name="x")])
  def __call__(self, x):
    y = tf.nn.relu(tf.matmul(x, self.w) + self.b)
    return {"y": y, "z": tf.matmul(y, self.w, transpose_b=True)}


@pytest.fixture(scope="module")
def dense_saved_model(tmp_path_factory):
  path = tmp_path_factory.mktemp("dense")
  tf.saved_model.save(_Dense(), str(path))
  return str(path)


def test_inspect_saved_model(capsys, dense_saved_model):
  code, out, err = run(capsys, "inspect", dense_saved_model, "--unknown-dim", "5")
  assert code == 0, err
  assert f"SavedModel {dense_saved_model}" in out
  assert "signature 'serving_default'" in out
  assert "x: float32[None, 3]   (example: float32[5, 3])" in out
  assert re.search(r"^  y: float32\[None, 4\]", out, re.M)
  assert re.search(r"^params: 2 arrays, 16 values", out, re.M)
  # The ops live in a library function called by StatefulPartitionedCall.
  assert histogram(out)["MatMul"] == (2, 2)
  assert "StatefulPartitionedCall" in section(out, "TF ops in the jaxpr")
  comparison = section(out, "outputs vs TF")
  assert re.search(r"^  y\s+float32\[5, 4\]", comparison, re.M)
  assert float(re.search(r"relative to the output scale (\S+):", out).group(1)) > 0.1
  assert re.search(r"^  z\s+float32\[5, 3\]", comparison, re.M)
  assert max_abs_difference(out) < 1e-5


def test_unknown_signature_is_a_clean_error(capsys, dense_saved_model):
  code, out, err = run(capsys, "inspect", dense_saved_model, "--signature", "nope")
  assert code == 2
  assert "no signature 'nope'" in err and "serving_default" in err
  assert "Traceback" not in err


def test_not_a_saved_model(capsys, tmp_path):
  code, _, err = run(capsys, "inspect", str(tmp_path))
  assert code == 2 and "not a SavedModel" in err


class _Unique(tf.Module):
  @tf.function(input_signature=[tf.TensorSpec([None], tf.int32)])
  def __call__(self, x):
    return tf.unique(x).y


class _Strings(tf.Module):
  @tf.function(input_signature=[tf.TensorSpec([None], tf.float32)])
  def __call__(self, x):
    return tf.strings.length(tf.strings.as_string(x))


# A string input is split off into a TF host prefix (tests/test_host_prefix.py).


@pytest.mark.parametrize(
  "module, error, mentions",
  [
    (_Unique, "DynamicShapeError", "Unique"),
    (_Strings, "UnsupportedOpError", "AsString"),
  ],
)
def test_unsupported_ops_exit_2_with_one_message(capsys, tmp_path, module, error, mentions):
  tf.saved_model.save(module(), str(tmp_path))
  code, out, err = run(capsys, "inspect", str(tmp_path))
  assert code == 2
  assert err.startswith(f"tfprims inspect: {error}: ")
  assert mentions in err
  assert "Traceback" not in err + out


def test_help(capsys):
  with pytest.raises(SystemExit) as e:
    cli.main(["--help"])
  assert e.value.code == 0
  assert "inspect" in capsys.readouterr().out
  with pytest.raises(SystemExit) as e:
    cli.main(["inspect", "--help"])
  assert e.value.code == 0
  out = capsys.readouterr().out
  for word in (
    "SRC",
    "SavedModel",
    "Keras",
    "--full",
    "--signature",
    "--example",
    "--import",
    "cnn",
    "mlp",
  ):
    assert word in out


def test_bad_arguments_exit_2(capsys):
  for argv in (["inspect", "--example", "nope"], ["inspect", "dir", "--example", "mlp"], []):
    with pytest.raises(SystemExit) as e:
      cli.main(argv)
    assert e.value.code == 2
  capsys.readouterr()


def test_console_script_entry_point():
  from importlib.metadata import entry_points

  (ep,) = [ep for ep in entry_points(group="console_scripts") if ep.name == "tfprims"]
  assert ep.value == "tfprims.cli:main"


def test_python_dash_m_is_quiet():
  env = {k: v for k, v in os.environ.items() if k != "TF_CPP_MIN_LOG_LEVEL"}
  proc = subprocess.run(
    [sys.executable, "-m", "tfprims", "inspect", "--example", "mlp"],
    capture_output=True,
    text=True,
    env=env,
    timeout=120,
  )
  assert proc.returncode == 0, proc.stderr
  assert proc.stdout.startswith("tfprims inspect: example 'mlp'")
  assert proc.stderr == ""


def test_output_differences():
  nan = np.float32("nan")
  same = cli._diff(
    "o", np.array([1.0, nan, np.inf], np.float32), np.array([1.0, nan, np.inf], np.float32)
  )
  assert same.max_abs == 0 and same.scale == 1.0
  off = cli._diff("o", np.array([1.0, 2.0], np.float32), np.array([1.0, nan], np.float32))
  assert off.max_abs == np.inf and "non-finite" in off.note
  shape = cli._diff("o", np.zeros((2, 3)), np.zeros((3, 2)))
  assert shape.max_abs == np.inf and "shape" in shape.note
  ints = cli._diff("o", np.array([1, 5], np.int32), np.array([1, 7], np.int32))
  assert ints.max_abs == 2 and "1 of 2" in ints.note
  # Relative to each output's own scale.
  big = cli.Comparison([cli._diff("o", np.array([1000.0]), np.array([1000.001]))], 1e-5, 0.0)
  assert big.ok
  small = cli.Comparison([cli._diff("o", np.array([0.5]), np.array([0.5001]))], 1e-5, 0.0)
  assert not small.ok
  tiny = cli._diff("p", np.array([1e-3, 2e-3]), np.array([1e-3, 2e-3 + 1e-7]))
  assert not cli.Comparison([tiny], 1e-5, 0.0).ok  # 5e-5 of its scale 2e-3
  both = cli.Comparison([big.outputs[0], tiny], 1e-5, 0.0)
  assert not both.ok and both.worst is tiny and both.scale == 2e-3


@pytest.mark.parametrize("name", examples.names())
def test_examples_are_deterministic(name):
  a, b = examples.build(name), examples.build(name)
  assert a.description == examples.describe(name)
  np.testing.assert_array_equal(a.inputs[0], b.inputs[0])
  np.testing.assert_array_equal(a.tf_fn(*a.inputs).numpy(), b.tf_fn(*b.inputs).numpy())
  names = sorted(v.name for v in a.tf_fn.get_concrete_function().variables)
  assert names == sorted(v.name for v in b.tf_fn.get_concrete_function().variables)
