"""The ``tfprims`` command on the paths users take: ``--import`` and ``tfprims.ops``
plugins, Keras files, export's OUT and --platforms, the weak-check warning, one
message for what is not a model, ``ops --supported``.

Each item has one test running the real console script in a subprocess (exit
status, message, no traceback); the rest runs ``cli.main`` in this process."""

import json
import os
import subprocess
import sys
import textwrap

os.environ.setdefault("JAX_PLATFORMS", "cpu")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import numpy as np
import pytest
import tensorflow as tf

import tfprims
from tfprims import cli, cli_check, core

_SCRIPT = os.path.join(os.path.dirname(sys.executable), "tfprims")


def tfprims_cmd(*argv, pythonpath=(), timeout=300):
  """Runs the ``tfprims`` console script (``python -m tfprims`` without one)."""
  cmd = [_SCRIPT] if os.path.exists(_SCRIPT) else [sys.executable, "-m", "tfprims"]
  env = dict(os.environ, JAX_PLATFORMS="cpu")
  env.pop("TF_CPP_MIN_LOG_LEVEL", None)  # the command keeps TF quiet itself
  repo = os.path.dirname(os.path.dirname(os.path.abspath(tfprims.__file__)))
  env["PYTHONPATH"] = os.pathsep.join([*map(str, pythonpath), repo])
  proc = subprocess.run(
    cmd + [str(a) for a in argv], capture_output=True, text=True, env=env, timeout=timeout
  )
  assert "Traceback" not in proc.stderr, proc.stderr[-3000:]
  return proc


def run(capsys, *argv):
  code = cli.main([str(a) for a in argv])
  captured = capsys.readouterr()
  return code, captured.out, captured.err


class _Dense(tf.Module):
  def __init__(self):
    super().__init__()
    self.w = tf.Variable(np.linspace(-1, 1, 12).reshape(3, 4).astype(np.float32), name="w")

  @tf.function(input_signature=[tf.TensorSpec([None, 3], tf.float32, name="x")])
  def __call__(self, x):
    return {"y": tf.nn.relu(tf.matmul(x, self.w))}


@pytest.fixture(scope="module")
def files(tmp_path_factory):
  """A SavedModel, Keras files, a graph of ops tfprims does not convert and the
  modules that register them (one by --import, one by a tfprims.ops entry point)."""
  import keras

  root = tmp_path_factory.mktemp("cli_paths")
  tf.saved_model.save(_Dense(), str(root / "sm"))
  inp = keras.Input((6,), name="features")
  hidden = keras.layers.Dense(5, name="hidden")(inp)
  # Zero kernel: the softmax is 1/4 whatever the input, so any conversion "matches".
  probs = keras.layers.Dense(4, activation="softmax", kernel_initializer="zeros", name="probs")(
    hidden
  )
  model = keras.Model(inp, {"hidden": hidden, "probs": probs}, name="constant_head")
  model.save(str(root / "model.keras"))
  model.save(str(root / "model.h5"))

  graph = tf.Graph()
  with graph.as_default():
    x = tf.compat.v1.placeholder(tf.float32, [None, 3], name="x")
    a = tf.raw_ops.DebugIdentity(input=x, tensor_name="x")
    b = tf.raw_ops.DebugGradientIdentity(input=a)
    tf.identity(b * 2.0, name="y")
  (root / "debug.pbtxt").write_text(str(graph.as_graph_def()))
  mods = root / "mods"
  mods.mkdir()
  (mods / "my_debug_ops.py").write_text(
    textwrap.dedent("""\
      import tfprims
      tfprims.register_op("DebugIdentity", lambda x, *, tensor_name: x, family="debugging",
                          attrs=("tensor_name",), batching="elementwise")
      """)
  )
  (mods / "my_plugin.py").write_text(
    textwrap.dedent("""\
      import tfprims
      tfprims.register_op("DebugGradientIdentity", lambda x: x, family="debugging",
                          batching="elementwise")
      """)
  )
  dist = mods / "my_plugin-0.1.dist-info"
  dist.mkdir()
  (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: my-plugin\nVersion: 0.1\n")
  (dist / "entry_points.txt").write_text("[tfprims.ops]\nmy_plugin = my_plugin\n")
  # Apart from mods: a sys.path entry holding my_plugin's dist-info would register its op
  # in this process for good (the CLI loads entry points).
  broken = root / "broken_mods"
  broken.mkdir()
  (broken / "broken.py").write_text("import tfprims\nraise RuntimeError('half-written')\n")
  return root


# --- 3. --import and the tfprims.ops entry points ------------------------------------------


def test_import_and_plugins_register_ops(files):
  proc = tfprims_cmd(
    "inspect",
    files / "debug.pbtxt",
    "--inputs",
    "x:0",
    "--outputs",
    "y:0",
    "--import",
    "my_debug_ops",
    pythonpath=[files / "mods"],
  )
  assert proc.returncode == 0, proc.stderr
  assert proc.stderr == ""
  hist = proc.stdout.split("== TF ops", 1)[1].split("==", 2)[1]
  assert "DebugIdentity" in hist and "DebugGradientIdentity" in hist  # --import, plugin
  assert "OK: within" in proc.stdout


def test_without_import_the_ops_are_unsupported(capsys, files):
  code, out, _ = run(capsys, "ops", files / "debug.pbtxt")
  assert code == 1
  unsupported = out.split("unsupported (2):", 1)[1].split("supported", 1)[0]
  assert "DebugIdentity" in unsupported and "DebugGradientIdentity" in unsupported


def test_import_errors_exit_2(capsys, files, monkeypatch):
  monkeypatch.syspath_prepend(str(files / "broken_mods"))
  code, _, err = run(capsys, "ops", files / "debug.pbtxt", "--import", "no_such_module_xyz")
  assert code == 2 and "--import no_such_module_xyz: no module named" in err
  code, _, err = run(capsys, "ops", "--supported", "--import", "broken")
  assert code == 2 and "--import broken failed: RuntimeError: half-written" in err
  assert "broken.py:2" in err and "Traceback" not in err
  code, _, err = run(capsys, "ops", "--supported", "--import", files / "nothing.py")
  assert code == 2 and "no such file" in err


def test_a_failing_plugin_warns_and_the_command_goes_on(capsys, monkeypatch):
  from importlib.metadata import EntryPoint

  from tfprims import cli_common

  bad = EntryPoint(name="bad", value="no_such_plugin_xyz", group=cli_common.PLUGIN_GROUP)
  monkeypatch.setattr(cli_common, "plugin_entry_points", lambda: [bad])
  code, out, err = run(capsys, "ops", "--supported")
  assert code == 0 and "Conv2D" in out
  assert "warning: the tfprims.ops entry point 'bad'" in err
  assert "ModuleNotFoundError" in err and "Traceback" not in err


# --- 4. Keras files -------------------------------------------------------------------------


def test_inspect_keras_file_warns_about_a_constant_output(files):
  proc = tfprims_cmd("inspect", files / "model.keras")
  assert proc.returncode == 0, proc.stderr
  out = proc.stdout
  assert out.startswith(f"tfprims inspect: Keras file {files / 'model.keras'}")
  assert "features: float32[None, 6]   (example: float32[2, 6])" in out
  assert "tolerance: max|jax - tf| <= 1e-05 * max|tf|, for each output" in out
  assert "warning: output 'probs' is (nearly) constant" in out
  assert "warning: output 'hidden'" not in out
  assert "OK: within 1e-05 * max|tf| of each output (but see the warning" in out


def test_keras_files_in_every_subcommand(capsys, files, tmp_path):
  for name in ("model.keras", "model.h5"):
    code, out, err = run(capsys, "ops", files / name)
    assert code == 0 and "MatMul" in out and "Softmax" in out, err
  code, out, err = run(capsys, "export", files / "model.h5", tmp_path / "art")
  assert code == 0, err
  assert "features: float32['batch', 6]" in out
  model = tfprims.load_exported(str(tmp_path / "art"))
  x = np.random.default_rng(0).standard_normal((3, 6)).astype(np.float32)
  fn, params = tfprims.load_keras(str(files / "model.keras"))
  want = fn.keras_model(x, training=False)
  got = fn(params, x)[0]
  np.testing.assert_allclose(got["hidden"], want["hidden"], rtol=1e-5, atol=1e-6)
  np.testing.assert_allclose(model(x)["hidden"], want["hidden"], rtol=1e-5, atol=1e-6)
  code, out, err = run(capsys, "compare", files / "model.keras")
  assert code == 0 and "first divergence: none" in out, err
  code, _, err = run(capsys, "inspect", files / "model.keras", "--inputs", "x:0")
  assert code == 2 and "--inputs/--outputs go with a frozen GraphDef file" in err


def test_a_file_keras_cannot_read(capsys, tmp_path):
  bad = tmp_path / "broken.keras"
  bad.write_bytes(b"PK\x03\x04 not really a zip")
  code, _, err = run(capsys, "inspect", bad)
  assert code == 2 and "Keras cannot load" in err and "Traceback" not in err


# --- 5, 6. export: --platforms and OUT, checked before converting --------------------------


def test_export_checks_platforms_and_out_first(files, tmp_path):
  proc = tfprims_cmd("export", files / "sm", tmp_path / "a", "--platforms", "cpu,cud")
  assert proc.returncode == 2
  assert "unknown platform 'cud' (did you mean cuda?)" in proc.stderr
  assert "cpu, cuda, rocm, tpu" in proc.stderr and not (tmp_path / "a").exists()
  existing = tmp_path / "file.txt"
  existing.write_text("keep me")
  proc = tfprims_cmd("export", files / "sm", existing)
  assert proc.returncode == 2
  assert f"OUT '{existing}' exists and is a file" in proc.stderr
  assert existing.read_text() == "keep me"


def test_export_out_and_force(capsys, files, tmp_path):
  with pytest.raises(SystemExit) as e:
    cli.main(["export", str(files / "sm"), str(tmp_path / "a"), "--platforms", "cpu,gpu"])
  assert e.value.code == 2
  assert "did you mean cuda (NVIDIA) or rocm (AMD)?" in capsys.readouterr().err
  art = tmp_path / "art"
  code, out, err = run(capsys, "export", files / "sm", art)
  assert code == 0 and f"-> {art}" in out, err
  code, _, err = run(capsys, "export", files / "sm", art)
  assert code == 2 and "not empty (it holds an earlier artifact)" in err and "--force" in err
  code, out, err = run(capsys, "export", files / "sm", art, "--force", "--platforms", "cpu,cuda")
  assert code == 0 and "platforms: cpu,cuda" in out, err
  assert json.loads((art / "manifest.json").read_text())["platforms"] == ["cpu", "cuda"]
  (art / "notes.txt").write_text("mine")
  code, _, err = run(capsys, "export", files / "sm", art, "--force")
  assert code == 2 and "no artifact's (notes.txt)" in err
  (tmp_path / "file.txt").write_text("")
  code, _, err = run(capsys, "export", files / "sm", tmp_path / "file.txt" / "sub")
  assert code == 2 and "is a file, not a directory" in err


# --- 7. the check against TF: relative to each output, weak when constant ------------------


def test_nearly_constant_outputs_are_weak_checks():
  probs = cli_check._diff(
    "probs", np.full((2, 4), 0.25, np.float32), np.full((2, 4), 0.25, np.float32)
  )
  probs.change = 2e-10
  logits = cli_check._diff("logits", np.array([1.0, -2.0]), np.array([1.0, -2.0]))
  logits.change = 0.5
  c = cli_check.Comparison([probs, logits], 1e-5, 0.0)
  assert c.ok and c.weak == [probs]
  unmeasured = cli_check._diff("u", np.ones(2), np.ones(2))
  assert not unmeasured.weak(1e-5)  # change None: no second input was run
  labels = cli_check._diff("k", np.array([3, 3]), np.array([3, 3]))
  labels.change = 0.0
  assert labels.exact and labels.weak(1e-5)  # an argmax that never moves


def test_tf_without_a_kernel_is_no_unknown_dim_problem(capsys, tmp_path):
  graph = tf.Graph()
  with graph.as_default():
    x = tf.compat.v1.placeholder(tf.float32, [3, None, 2], name="x")
    h0 = tf.zeros(tf.stack([1, tf.shape(x)[1], 2]))
    params = tf.constant(np.linspace(-1, 1, 36).astype(np.float32))
    out = tf.raw_ops.CudnnRNN(
      input=x, input_h=h0, input_c=h0, params=params, rnn_mode="gru", is_training=False
    )[0]
    tf.identity(out, name="y")
  if tf.config.list_physical_devices("GPU"):
    pytest.skip("TF has CudnnRNN's kernel on a GPU")
  (tmp_path / "rnn.pbtxt").write_text(str(graph.as_graph_def()))
  code, _, err = run(
    capsys, "inspect", tmp_path / "rnn.pbtxt", "--inputs", "x:0", "--outputs", "y:0"
  )
  assert code == 2 and "TensorFlow cannot run the model on this machine" in err
  assert "No OpKernel was registered to support Op 'CudnnRNN'" in err
  assert "--unknown-dim" not in err


# --- 11. one message for what is not a model; ops --supported; help ------------------------


def test_one_message_for_what_is_not_a_model(capsys, tmp_path):
  (tmp_path / "empty").mkdir()
  (tmp_path / "junk.bin").write_bytes(b"\x00\x01 junk")
  cases = {
    tmp_path / "missing": "it does not exist",
    tmp_path / "empty": "it is a directory without saved_model.pb",
    tmp_path / "junk.bin": "it is a file but not a GraphDef",
  }
  for path, why in cases.items():
    for argv in (
      ["inspect", path],
      ["ops", path],
      ["export", path, tmp_path / "out"],
      ["compare", path],
    ):
      code, _, err = run(capsys, *argv)
      assert code == 2, (argv, err)
      assert err == (
        f"tfprims {argv[0]}: error: '{path}' is not a SavedModel directory, a "
        f"frozen GraphDef file (.pb, .pbtxt) or a Keras file (.keras, .h5): "
        f"{why}" + err.split(why, 1)[1]
      ), err


def test_ops_supported_lists_every_op_with_its_family():
  proc = tfprims_cmd("ops", "--supported")
  assert proc.returncode == 0, proc.stderr
  lines = proc.stdout.splitlines()
  rows = {line.split()[0]: line.split()[1:] for line in lines[2:] if line.startswith("  ")}
  assert lines[0].startswith(f"tfprims converts {len(rows)} op types")
  assert rows["Conv2D"][:2] == ["nn", "primitive"]
  assert rows["While"][1] == "structural"
  assert set(rows) <= core.declared_op_types() and len(rows) > 500


def test_help_agrees_with_the_code(capsys):
  with pytest.raises(SystemExit):
    cli.main(["export", "--help"])
  text = " ".join(capsys.readouterr().out.split())
  assert "--signature NAME the SavedModel signature to export (default: serving_default)" in text
  assert "leading unknown (None) dim of every input" in text
  assert "Dense on 3-D" not in text  # that folds symbolically (README)
  assert "--force" in text and "--import MODULE" in text
  for command in ("inspect", "ops", "compare"):
    with pytest.raises(SystemExit):
      cli.main([command, "--help"])
    assert "--import MODULE" in capsys.readouterr().out
