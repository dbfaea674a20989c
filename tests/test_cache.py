"""The persistent compilation cache (tfprims.cache): loading an artifact turns it on in
TFPRIMS_CACHE_DIR, a second process reads the program the first one wrote, a JAX cache
directory the user set is left alone, and ``tfprims cache info`` / ``clear``.

Every case that turns the cache on runs in a fresh interpreter: JAX's configuration is
per process."""

import json
import os
import subprocess
import sys
import textwrap

os.environ.setdefault("JAX_PLATFORMS", "cpu")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import pytest

import tfprims
from tfprims import cli

# Loads the artifact, calls it, prints what JAX did as JSON.
_LOAD = textwrap.dedent("""
    import json, sys
    import numpy as np
    import jax
    events = []
    jax.monitoring.register_event_listener(lambda name, **kw: events.append(name))
    import tfprims
    model = tfprims.load_exported(sys.argv[1])
    y = model(np.ones((3, 16), np.float32))       # a direct call: the executable
    z = jax.jit(model)(np.ones((2, 16), np.float32))   # traced: JAX's cache
    jax.block_until_ready((y, z))
    print(json.dumps({
        "hits": sum(e.endswith("/cache_hits") for e in events),
        "executable_hits": events.count("/tfprims/executable_cache/hit"),
        "executable_misses": events.count("/tfprims/executable_cache/miss"),
        "sum": float(np.abs(np.asarray(y)).sum()),
        "jax_dir": jax.config.jax_compilation_cache_dir,
        "min_time": jax.config.jax_persistent_cache_min_compile_time_secs}))
""")


def _env(**extra):
  env = {
    k: v
    for k, v in os.environ.items()
    if k
    not in (
      "TFPRIMS_CACHE_DIR",
      "JAX_COMPILATION_CACHE_DIR",
      "JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS",
    )
  }
  env.update(JAX_PLATFORMS="cpu", TF_CPP_MIN_LOG_LEVEL="3", **extra)
  return env


def _python(args, env):
  proc = subprocess.run(
    [sys.executable, *args], capture_output=True, text=True, env=env, timeout=300
  )
  assert proc.returncode == 0, proc.stderr[-3000:]
  return proc.stdout


def _entries(path):
  """JAX's entries in cache directory ``path``."""
  return sorted(f for f in os.listdir(path) if f.endswith("-cache")) if path.exists() else []


def _executables(path):
  """tfprims' executables in cache directory ``path``."""
  path = path / "executables"
  return sorted(f for f in os.listdir(path) if f.endswith("-executable")) if path.exists() else []


@pytest.fixture(scope="module")
def artifact(tmp_path_factory):
  out = tmp_path_factory.mktemp("cache") / "art"
  assert cli.main(["export", "--example", "mlp", str(out)]) == 0  # in-process: no cache
  return str(out)


def test_a_second_process_reads_the_program_the_first_wrote(artifact, tmp_path):
  cache_dir = tmp_path / "nested" / "cache"  # created on first use
  env = _env(TFPRIMS_CACHE_DIR=str(cache_dir))
  first = json.loads(_python(["-c", _LOAD, artifact], env))
  assert first["jax_dir"] == str(cache_dir) and first["min_time"] == 0.0
  written, executables = _entries(cache_dir), _executables(cache_dir)
  assert written and len(executables) == 1 and first["hits"] == 0
  assert (first["executable_hits"], first["executable_misses"]) == (0, 1)
  second = json.loads(_python(["-c", _LOAD, artifact], env))
  assert second["hits"] >= 1  # the jitted call: JAX read its program from disk
  assert (second["executable_hits"], second["executable_misses"]) == (1, 0)  # loaded
  assert second["sum"] == first["sum"]
  assert _entries(cache_dir) == written and _executables(cache_dir) == executables

  # A damaged executable is compiled again and replaced.
  entry = cache_dir / "executables" / executables[0]
  entry.write_bytes(entry.read_bytes()[:100])
  third = json.loads(_python(["-c", _LOAD, artifact], env))
  assert (third["executable_hits"], third["executable_misses"]) == (0, 1)
  assert third["sum"] == first["sum"] and entry.stat().st_size > 100


def test_cache_info_and_clear(artifact, tmp_path):
  env = _env(TFPRIMS_CACHE_DIR=str(tmp_path))
  _python(["-c", _LOAD, artifact], env)
  info = json.loads(_python(["-m", "tfprims", "cache", "info", "--json"], env))
  assert info["path"] == str(tmp_path) and info["source"] == "$TFPRIMS_CACHE_DIR"
  assert info["entries"] == len(_entries(tmp_path)) + len(_executables(tmp_path)) >= 2
  assert info["size_bytes"] > 0
  text = _python(["-m", "tfprims", "cache", "info"], env)
  assert f"compilation cache: {tmp_path}" in text and f"entries: {info['entries']}" in text
  (tmp_path / "mine.txt").write_text("not JAX's")
  out = _python(["-m", "tfprims", "cache", "clear"], env)
  assert f"removed {info['entries']} entries" in out
  assert _entries(tmp_path) == _executables(tmp_path) == []
  assert (tmp_path / "mine.txt").exists()  # the cache's files only
  off = _python(["-m", "tfprims", "cache", "info"], _env(TFPRIMS_CACHE_DIR="off"))
  assert "compilation cache: off" in off


def test_the_command_line_caches_what_it_compiles(tmp_path):
  env = _env(TFPRIMS_CACHE_DIR=str(tmp_path / "c"))
  _python(["-m", "tfprims", "inspect", "--example", "mlp"], env)  # runs it: compiles
  assert _entries(tmp_path / "c")


def test_a_jax_cache_dir_the_user_set_is_left_alone(artifact, tmp_path):
  mine, ours = tmp_path / "mine", tmp_path / "ours"
  mine.mkdir()
  env = _env(
    TFPRIMS_CACHE_DIR=str(ours),
    JAX_COMPILATION_CACHE_DIR=str(mine),
    JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS="0",
  )
  loaded = json.loads(_python(["-c", _LOAD, artifact], env))
  assert loaded["jax_dir"] == str(mine)
  assert _entries(mine) and not ours.exists()
  info = json.loads(_python(["-m", "tfprims", "cache", "info", "--json"], env))
  assert info["jax_dir"] == str(mine) and info["jax_dir_set_by"] == "user"
  assert info["jax_dir_entries"] == len(_entries(mine))
  text = _python(["-m", "tfprims", "cache", "info"], env)
  assert "JAX's own cache directory is set" in text and "tfprims leaves it" in text
  # Set in Python before loading: the same.
  script = textwrap.dedent(f"""
      import jax
      jax.config.update("jax_compilation_cache_dir", {str(mine)!r})
      import tfprims
      assert tfprims.enable_compilation_cache() == {str(mine)!r}
      tfprims.load_exported({artifact!r})
      assert jax.config.jax_compilation_cache_dir == {str(mine)!r}
      assert jax.config.jax_persistent_cache_min_compile_time_secs == 1.0   # JAX's own
      print("ok")
  """)
  assert (
    _python(["-c", script], env | {"JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS": "1"})
    .strip()
    .endswith("ok")
  )


def test_the_option_moves_or_stops_the_cache_at_once(artifact, tmp_path):
  script = textwrap.dedent(f"""
      import jax, tfprims
      assert jax.config.jax_compilation_cache_dir is None   # import alone changes nothing
      tfprims.load_exported({artifact!r})
      assert jax.config.jax_compilation_cache_dir == {str(tmp_path / 'a')!r}
      tfprims.update_config("compilation_cache", {str(tmp_path / 'b')!r})
      assert jax.config.jax_compilation_cache_dir == {str(tmp_path / 'b')!r}
      tfprims.update_config("compilation_cache", None)
      assert jax.config.jax_compilation_cache_dir is None
      assert jax.config.jax_persistent_cache_min_compile_time_secs == 1.0
      print("ok")
  """)
  out = _python(["-c", script], _env(TFPRIMS_CACHE_DIR=str(tmp_path / "a")))
  assert out.strip().endswith("ok")


def test_the_option_default_and_an_unwritable_directory(tmp_path, monkeypatch):
  from tfprims import cache, config

  monkeypatch.delenv("TFPRIMS_CACHE_DIR", raising=False)
  monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
  assert config.default_compilation_cache() == str(tmp_path / "tfprims" / "jax")
  monkeypatch.setenv("XDG_CACHE_HOME", "relative/dir")  # ignored, as XDG says
  assert config.default_compilation_cache() == os.path.expanduser("~/.cache/tfprims/jax")
  monkeypatch.setenv("TFPRIMS_CACHE_DIR", "off")
  assert config.default_compilation_cache() is None
  assert "compilation_cache" in config.OPTIONS and config.OPTIONS["compilation_cache"].doc
  blocker = tmp_path / "file"
  blocker.write_text("")
  import jax

  if jax.config.jax_compilation_cache_dir is None:  # nothing set in this process
    with tfprims.override_config("compilation_cache", str(blocker / "cache")):
      with pytest.warns(tfprims.TFPrimsWarning, match="cannot create the compilation cache"):
        assert cache.enable_compilation_cache() is None
    assert jax.config.jax_compilation_cache_dir is None
