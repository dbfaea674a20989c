"""Compiled executables of a loaded artifact, kept for its direct calls.

``model(x)`` with concrete arrays (not inside ``jax.jit``/``grad``/``vmap``) runs the
artifact's program compiled for the call's shapes and dtypes. Each program is compiled
once per process (kept in memory by avals) and, while tfprims' compilation cache is on
(:mod:`tfprims.cache`), written to ``<cache>/executables/`` as XLA's serialized
executable (``jax.experimental.serialize_executable``). A later process loads it back
instead of compiling, and also skips what even a hit in JAX's persistent cache costs:
deserializing the artifact's module, tracing and lowering the call to compute the
cache key (MobileNetV2: 0.1 s to the first result instead of 0.3 s).

An entry's name is a hash of everything the executable depends on: the artifact's
bytes, the call's avals, the jax and jaxlib versions, the device (platform, kind,
platform version), ``XLA_FLAGS``, ``jax_enable_x64`` and, on CPU, the host's
instruction-set flags (XLA compiles for the CPU it runs on). An entry that does not
load (truncated, written by another build) is removed and the program compiled
again. Writes are atomic (a temporary file renamed), so concurrent processes are
safe. JAX's monitoring events ``/tfprims/executable_cache/hit`` and ``.../miss`` tell
which way a call went.
"""

from __future__ import annotations

import functools
import hashlib
import os
import pickle
import platform
import tempfile
from typing import Callable, Optional

import jax
import jaxlib
import numpy as np

from tfprims import cache

_FORMAT = b"tfprims-executable-1"
HIT, MISS = "/tfprims/executable_cache/hit", "/tfprims/executable_cache/miss"


@functools.lru_cache(maxsize=None)
def _host() -> str:
  """The host CPU's instruction-set flags (Linux), else its processor name."""
  try:
    with open("/proc/cpuinfo") as f:
      for line in f:
        if line.startswith(("flags", "Features")):
          return line.split(":", 1)[1].strip()
  except OSError:
    pass
  return platform.processor() or platform.machine()


def _default_device():
  """The device a direct call runs on; None where the default is set by platform name
  (the general path places it)."""
  device = jax.config.jax_default_device
  if device is None:
    return jax.devices()[0]
  return device if isinstance(device, jax.Device) else None


def _on(device, value) -> bool:
  """Whether ``value`` is host data or a concrete array on ``device`` alone."""
  if isinstance(value, (np.ndarray, np.generic)):
    return True
  if not isinstance(value, jax.Array) or isinstance(value, jax.core.Tracer):
    return False
  try:
    return value.devices() == {device}
  except Exception:  # an array JAX cannot place (deleted): the general path says why
    return False


class Executables:
  """The compiled programs of ``fn`` (an artifact's function of ``(params, *inputs)``)
  by avals; ``artifact`` (its serialized bytes) names its disk entries."""

  def __init__(self, fn: Callable, artifact: bytes):
    self._fn = fn
    self._artifact = hashlib.sha256(artifact).hexdigest()
    self._compiled: dict = {}

  def call(self, params, inputs) -> Optional[object]:
    """``fn(params, *inputs)`` by a compiled executable; None where the call is not a
    direct one on the default device (traced values, other devices or shardings)."""
    device = _default_device()
    leaves, tree = jax.tree.flatten((params, list(inputs)))
    if device is None or not all(_on(device, v) for v in leaves):
      return None
    avals = tuple(
      (tuple(np.shape(v)), np.dtype(v.dtype).str, bool(getattr(v, "weak_type", False)))
      for v in leaves
    )
    key = (tree, avals, device)
    compiled = self._compiled.get(key)
    if compiled is None:
      compiled = self._compiled[key] = self._load_or_compile(params, inputs, tree, avals, device)
    return compiled(params, *inputs)

  def _entry(self, tree, avals, device) -> Optional[str]:
    directory = cache.executable_dir()
    if directory is None:
      return None
    parts = (
      _FORMAT,
      self._artifact,
      str(tree),
      repr(avals),
      jax.__version__,
      jaxlib.__version__,
      device.platform,
      device.device_kind,
      getattr(getattr(device, "client", None), "platform_version", ""),
      os.environ.get("XLA_FLAGS", ""),
      bool(jax.config.jax_enable_x64),
      _host() if device.platform == "cpu" else "",
    )
    digest = hashlib.sha256(repr(parts).encode()).hexdigest()
    return os.path.join(directory, digest + cache.EXECUTABLE_SUFFIX)

  def _load_or_compile(self, params, inputs, tree, avals, device):
    from jax.experimental import serialize_executable

    path = self._entry(tree, avals, device)
    if path is not None and os.path.exists(path):
      try:
        with open(path, "rb") as f:
          fmt, data, in_tree, out_tree = pickle.load(f)
        if fmt != _FORMAT:
          raise ValueError("another format")
        compiled = serialize_executable.deserialize_and_load(data, in_tree, out_tree)
        jax.monitoring.record_event(HIT)
        return compiled
      except Exception:  # truncated, or written by another build: compile it again
        try:
          os.remove(path)
        except OSError:
          pass
    compiled = jax.jit(self._fn).lower(params, *inputs).compile()
    jax.monitoring.record_event(MISS)
    if path is not None:
      _write(path, compiled)
    return compiled


def _write(path: str, compiled) -> None:
  """Writes ``compiled`` to ``path`` whole or not at all (a cache that cannot be written
  only costs the next process a compile)."""
  from jax.experimental import serialize_executable

  tmp = None
  try:
    payload = pickle.dumps((_FORMAT, *serialize_executable.serialize(compiled)))
    os.makedirs(os.path.dirname(path), mode=0o700, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=os.path.dirname(path), suffix=".tmp")
    with os.fdopen(fd, "wb") as f:
      f.write(payload)
    os.replace(tmp, path)
  except Exception:  # an executable XLA cannot serialize, a full or read-only disk
    if tmp is not None and os.path.exists(tmp):
      os.remove(tmp)
