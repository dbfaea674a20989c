"""Progress on stderr for long work (tfprims.progress): shown where watched, silent
elsewhere, counted by the interpreter, the property-test runner and ``tfprims export``."""

import io
import os
import subprocess
import sys

import numpy as np
import pytest
import tensorflow as tf

import tfprims
from tfprims import cli, progress
from tfprims.testing import check_op


class _Terminal(io.StringIO):
  def isatty(self):
    return True


@pytest.fixture
def immediate(monkeypatch):
  """Progress shown from the first step, a line each step."""
  monkeypatch.setattr(progress, "DELAY_S", 0.0)
  monkeypatch.setattr(progress, "EVERY_S", 0.0)
  monkeypatch.delenv("TFPRIMS_PROGRESS", raising=False)


def _count(total, **kwargs):
  with progress.Progress(total, "work", unit="items", **kwargs) as shown:
    for _ in range(total):
      shown.step()


def test_shown_on_a_terminal_or_when_asked_and_never_when_silenced(immediate, monkeypatch):
  pipe = io.StringIO()
  _count(3, stream=pipe)
  assert pipe.getvalue() == ""  # not a terminal: nothing
  monkeypatch.setenv("TFPRIMS_PROGRESS", "1")
  _count(3, stream=pipe)
  lines = pipe.getvalue().splitlines()
  assert lines[0] == "work: 1/3 items (33%), 0.0 s" and lines[-1].endswith("- done")
  with progress.silenced():  # --quiet beats the environment
    assert not progress.wanted(pipe)
  monkeypatch.setenv("TFPRIMS_PROGRESS", "0")
  assert not progress.wanted(_Terminal())
  monkeypatch.delenv("TFPRIMS_PROGRESS")
  terminal = _Terminal()
  _count(4, stream=terminal)  # a terminal: rich's live bar
  assert "work" in terminal.getvalue() and "4/4" in terminal.getvalue()


def test_short_work_prints_nothing(monkeypatch):
  monkeypatch.setenv("TFPRIMS_PROGRESS", "1")
  pipe = io.StringIO()
  _count(100, stream=pipe)
  with progress.phase("quick", stream=pipe):
    pass
  assert pipe.getvalue() == ""


def test_phase_says_when_it_started_and_how_long_it_took(immediate, monkeypatch):
  monkeypatch.setenv("TFPRIMS_PROGRESS", "1")
  monkeypatch.setattr(progress, "DELAY_S", 0.01)
  pipe = io.StringIO()
  with progress.phase("lowering", stream=pipe):
    import time

    time.sleep(0.2)
  assert pipe.getvalue().splitlines()[0] == "lowering ..."
  assert pipe.getvalue().splitlines()[1].startswith("lowering: done in 0.")


def test_conversion_counts_the_nodes_of_nested_functions(immediate, monkeypatch, capsys):
  @tf.function
  def inner(x):
    return tf.tanh(x) * 2.0

  @tf.function
  def outer(x):
    return inner(x) + 1.0

  fn, params = tfprims.convert(outer, tf.TensorSpec([3], tf.float32))
  x = np.float32([0.5, -1.0, 2.0])
  fn(params, x)
  assert capsys.readouterr().err == ""  # stderr is no terminal under pytest
  monkeypatch.setenv("TFPRIMS_PROGRESS", "1")
  out, _ = fn(params, x)
  np.testing.assert_allclose(out, outer(x).numpy(), rtol=1e-6)
  lines = capsys.readouterr().err.splitlines()
  total = int(lines[0].split("/")[1].split()[0])
  assert lines[0].startswith("tfprims: converting outer: 1/")
  assert (
    lines[-1]
    == f"tfprims: converting outer: {total}/{total} nodes, " + lines[-1].rsplit(", ", 1)[1]
  )  # every node counted, nested ones too
  assert lines[-1].endswith("- done") and total > 4


def test_property_checks_count_their_examples(immediate, monkeypatch, capsys):
  monkeypatch.setenv("TFPRIMS_PROGRESS", "1")
  report = check_op("Sin", checks=["values", "jvp"], max_examples=3)
  assert not report.failed
  err = capsys.readouterr().err
  assert "Sin: property checks: 1/6 examples" in err and "Sin: property checks: 6/6" in err


def test_cli_export_shows_its_phases_and_quiet_silences_them(tmp_path, monkeypatch, capsys):
  # What the console script runs (cli.main() reading sys.argv), with progress shown at once.
  script = (
    "import sys; import tfprims.progress as p; p.DELAY_S = p.EVERY_S = 0.0; "
    "from tfprims import cli; sys.exit(cli.main())"
  )
  env = dict(os.environ, TFPRIMS_PROGRESS="1", JAX_PLATFORMS="cpu", TFPRIMS_CACHE_DIR="off")
  proc = subprocess.run(
    [sys.executable, "-c", script, "export", "--example", "mlp", str(tmp_path / "a")],
    capture_output=True,
    text=True,
    env=env,
    timeout=300,
  )
  assert proc.returncode == 0, proc.stderr
  err = proc.stderr
  assert "Traceback" not in err
  for line in (
    "tfprims export: tracing and lowering mlp ...",
    "tfprims: converting mlp: 1/",
    "tfprims export: serializing with the VJP: done in",
    "tfprims export: writing 6 params: done in",
  ):
    assert line in err, err
  monkeypatch.setattr(progress, "DELAY_S", 0.0)
  monkeypatch.setenv("TFPRIMS_PROGRESS", "1")
  assert cli.main(["export", "--quiet", "--example", "mlp", str(tmp_path / "b")]) == 0
  assert capsys.readouterr().err == ""
