"""JAX's persistent compilation cache, on by default where tfprims loads an artifact,
and the executables loaded artifacts keep there (:mod:`tfprims.executables`).

A process that loads an artifact (:func:`tfprims.load_exported`) or runs the ``tfprims``
command line turns on JAX's persistent compilation cache in the directory of the
``compilation_cache`` option (``$TFPRIMS_CACHE_DIR``, else
``$XDG_CACHE_HOME/tfprims/jax``, else ``~/.cache/tfprims/jax``): the first process
compiles the model's program and writes it there, later ones read it instead of
compiling. Converting (:func:`tfprims.convert`) leaves JAX alone unless
:func:`enable_compilation_cache` is called.

Only public ``jax.config`` options are set: ``jax_compilation_cache_dir`` and, while it
has JAX's default of 1 s, ``jax_persistent_cache_min_compile_time_secs`` (0, so that
small programs are cached too). A cache directory the user gave JAX
(``jax.config.update("jax_compilation_cache_dir", ...)``, ``JAX_COMPILATION_CACHE_DIR``)
is never replaced: JAX caches there. JAX's cache is safe for concurrent processes
(each entry is written whole); the directory is created with ``exist_ok``, readable by
its owner only (a compilation cache is trusted code: do not share it with users you
do not trust).
"""

from __future__ import annotations

import os
import shutil
import warnings
from typing import Optional

from tfprims import config, errors

OPTION = "compilation_cache"
_JAX_DEFAULT_MIN_COMPILE_TIME = 1.0
# JAX's file names: an entry KEY-cache, its access time KEY-atime; XLA's GPU autotuning
# results in a subdirectory (jax_persistent_cache_enable_xla_caches).
_ENTRY, _ATIME, _XLA_DIRS = "-cache", "-atime", ("xla_gpu_per_fusion_autotune_cache_dir",)
# tfprims' own entries: the executables of loaded artifacts (tfprims.executables).
EXECUTABLES, EXECUTABLE_SUFFIX = "executables", "-executable"

# What tfprims set in jax.config (None: nothing), to move or undo it, never the user's.
_set_by_tfprims: dict = {"dir": None, "min_compile_time": None}
_warned: set = set()


def enable_compilation_cache() -> Optional[str]:
  """Turns on JAX's persistent compilation cache for this process in the directory of
  the ``compilation_cache`` option (``tfprims.update_config("compilation_cache", PATH)``;
  None: off), so that later processes read compiled programs from disk; returns the
  directory JAX caches programs in (None: none).

  ``tfprims.load_exported`` and the command line call it; conversion does not, so call
  it to cache what converted functions compile. A cache directory already set in JAX by
  the user is left as it is (and returned)."""
  return _apply(config.get_config(OPTION))


def _apply(path: Optional[str]) -> Optional[str]:
  import jax

  current = jax.config.jax_compilation_cache_dir
  ours = _set_by_tfprims["dir"]
  if current is not None and current != ours:
    return current  # the user's own JAX configuration
  if path is None:
    if ours is not None:
      _turn_off()
    return None
  path = os.path.abspath(os.path.expanduser(os.fspath(path)))
  if current == path:
    return path
  try:
    os.makedirs(path, mode=0o700, exist_ok=True)  # concurrent processes: exist_ok
  except OSError as e:
    if path not in _warned:
      _warned.add(path)
      warnings.warn(
        f"tfprims: cannot create the compilation cache directory {path!r} "
        f"({e.strerror or e}); compiling without a persistent cache (set "
        f"{config.CACHE_ENV}, or tfprims.update_config({OPTION!r}, PATH or None))",
        errors.TFPrimsWarning,
        stacklevel=4,
      )
    if ours is not None:
      _turn_off()
    return None
  if ours is not None:
    _reset_jax_cache()
  jax.config.update("jax_compilation_cache_dir", path)
  if (
    _set_by_tfprims["min_compile_time"] is None
    and jax.config.jax_persistent_cache_min_compile_time_secs == _JAX_DEFAULT_MIN_COMPILE_TIME
  ):
    jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.0)
    _set_by_tfprims["min_compile_time"] = 0.0
  _set_by_tfprims["dir"] = path
  return path


def executable_dir() -> Optional[str]:
  """Where loaded artifacts keep their compiled executables (:mod:`tfprims.executables`):
  ``executables/`` in the cache directory while tfprims' cache is on; None while it is
  off or JAX caches in a directory the user set (then JAX's cache alone serves)."""
  ours = _set_by_tfprims["dir"]
  return None if ours is None else os.path.join(ours, EXECUTABLES)


def _turn_off() -> None:
  import jax

  jax.config.update("jax_compilation_cache_dir", None)
  if (
    _set_by_tfprims["min_compile_time"] is not None
    and jax.config.jax_persistent_cache_min_compile_time_secs == _set_by_tfprims["min_compile_time"]
  ):
    jax.config.update("jax_persistent_cache_min_compile_time_secs", _JAX_DEFAULT_MIN_COMPILE_TIME)
  _set_by_tfprims.update(dir=None, min_compile_time=None)
  _reset_jax_cache()


def _reset_jax_cache() -> None:
  """JAX opens its cache once per process: reopen it where the directory now is."""
  from jax.experimental.compilation_cache import compilation_cache

  compilation_cache.reset_cache()


def _option_changed(value) -> None:
  if _set_by_tfprims["dir"] is not None:  # on: follow the option at once
    _apply(value)


config.on_change(OPTION, _option_changed)


# --- what is in a cache directory -------------------------------------------------------


def _files(path: str):
  """JAX's and tfprims' files in cache directory ``path``: (entries, every file of the
  cache)."""
  entries, files = [], []
  try:
    names = os.listdir(path)
  except OSError:
    return entries, files
  for name in names:
    full = os.path.join(path, name)
    if name.endswith(_ENTRY) and os.path.isfile(full):
      entries.append(full)
      files.append(full)
    elif name.endswith(_ATIME) and os.path.isfile(full):
      files.append(full)
    elif name in _XLA_DIRS and os.path.isdir(full):
      for root, _, inner in os.walk(full):
        files.extend(os.path.join(root, f) for f in inner)
    elif name == EXECUTABLES and os.path.isdir(full):
      for f in os.listdir(full):
        if f.endswith((EXECUTABLE_SUFFIX, ".tmp")):
          files.append(os.path.join(full, f))
          if f.endswith(EXECUTABLE_SUFFIX):
            entries.append(os.path.join(full, f))
  return entries, files


def _size(files) -> int:
  total = 0
  for f in files:
    try:
      total += os.path.getsize(f)
    except OSError:  # removed meanwhile by another process
      pass
  return total


def source() -> str:
  """Where the ``compilation_cache`` option's value comes from."""
  value = config.get_config(OPTION)
  env = os.environ.get(config.CACHE_ENV)
  if value != config.default_compilation_cache():
    return "tfprims.update_config"
  if env is not None:
    return f"${config.CACHE_ENV}"
  if os.path.isabs(os.environ.get("XDG_CACHE_HOME", "")):
    return "$XDG_CACHE_HOME/tfprims/jax"
  return "~/.cache/tfprims/jax"


def info() -> dict:
  """The cache: ``path`` (the option's directory, None: off), ``source``, ``entries``,
  ``size_bytes``; ``jax_dir``: JAX's cache directory now, ``jax_dir_set_by``: "tfprims",
  "user" or None; ``jax_enabled`` (jax_enable_compilation_cache)."""
  import jax

  path = config.get_config(OPTION)
  path = None if path is None else os.path.abspath(os.path.expanduser(os.fspath(path)))
  entries, files = _files(path) if path else ([], [])
  jax_dir = jax.config.jax_compilation_cache_dir
  out = {
    "path": path,
    "source": source(),
    "entries": len(entries),
    "size_bytes": _size(files),
    "jax_dir": jax_dir,
    "jax_dir_set_by": (
      None if jax_dir is None else "tfprims" if jax_dir == _set_by_tfprims["dir"] else "user"
    ),
    "jax_enabled": bool(jax.config.jax_enable_compilation_cache),
  }
  if out["jax_dir_set_by"] == "user":
    jax_entries, jax_files = _files(jax_dir)
    out.update(jax_dir_entries=len(jax_entries), jax_dir_size_bytes=_size(jax_files))
  return out


def clear(path: Optional[str] = None) -> tuple:
  """Removes the cache's files (JAX's entries, their access times, XLA's autotuning
  results, tfprims' executables) from ``path`` (default: the option's directory),
  nothing else; returns (entries removed, bytes freed)."""
  path = path if path is not None else config.get_config(OPTION)
  if path is None:
    return 0, 0
  path = os.path.abspath(os.path.expanduser(os.fspath(path)))
  entries, files = _files(path)
  freed = _size(files)
  for f in files:
    try:
      os.remove(f)
    except OSError:  # removed meanwhile by another process
      pass
  for name in _XLA_DIRS + (EXECUTABLES,):
    shutil.rmtree(os.path.join(path, name), ignore_errors=True)
  return len(entries), freed
