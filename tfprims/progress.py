"""Progress of long work on stderr: converting (tracing) large graphs, ``tfprims
export``, ``tfprims compare`` and thorough property runs.

Shown only where someone watches: when stderr is a terminal, unless turned off
(``tfprims --quiet``, :func:`silenced`, ``TFPRIMS_PROGRESS=0``); ``TFPRIMS_PROGRESS=1``
shows it on any stream (logs, CI). Work that ends within :data:`DELAY_S` prints
nothing, so small graphs stay silent. On a terminal with ``rich`` installed (it comes
with Keras) a live bar; elsewhere a line every :data:`EVERY_S` seconds.
"""

from __future__ import annotations

import contextlib
import os
import sys
import threading
import time
from typing import Optional, TextIO

DELAY_S = 2.0  # nothing is shown for work shorter than this
EVERY_S = 2.0  # plain lines: one per this many seconds

_silenced = 0


@contextlib.contextmanager
def silenced():
  """No progress while inside (``tfprims --quiet``)."""
  global _silenced
  _silenced += 1
  try:
    yield
  finally:
    _silenced -= 1


def wanted(stream: Optional[TextIO] = None) -> bool:
  """Whether progress goes to ``stream`` (default stderr)."""
  choice = os.environ.get("TFPRIMS_PROGRESS", "").strip().lower()
  if _silenced or choice in ("0", "false", "no", "off"):
    return False
  if choice in ("1", "true", "yes", "on"):
    return True
  stream = sys.stderr if stream is None else stream
  try:
    return stream.isatty()
  except (AttributeError, ValueError):  # closed or not a file
    return False


class Progress:
  """Counts steps of ``total`` (an estimate: loop bodies may run more than once);
  shows ``label`` with the count once the work has lasted :data:`DELAY_S`.

  Use ``step()`` per unit and ``finish()`` at the end (or ``with Progress(...)``).
  Inactive (every call a no-op) when :func:`wanted` says no, unless ``force``.
  """

  def __init__(
    self,
    total: int,
    label: str,
    *,
    unit: str = "nodes",
    stream: Optional[TextIO] = None,
    force: Optional[bool] = None,
  ):
    self.total, self.label, self.unit, self.done = total, label, unit, 0
    self.stream = sys.stderr if stream is None else stream
    self.active = wanted(self.stream) if force is None else force
    self._start = self._last = time.perf_counter()
    self._shown = False
    self._bar = None

  def __enter__(self) -> "Progress":
    return self

  def __exit__(self, *exc) -> None:
    self.finish()

  def step(self, n: int = 1) -> None:
    self.done += n
    if not self.active:
      return
    now = time.perf_counter()
    if now - self._start < DELAY_S:
      return
    if self._bar is None and not self._shown:
      self._bar = _rich_bar(self)
    if self._bar is not None:
      self._bar.update(completed=self.done)
    elif now - self._last >= EVERY_S or not self._shown:
      self._last = now
      self._line()

  def finish(self) -> None:
    """Closes the display; a final line with the time taken, if anything was shown."""
    if self._bar is not None:
      self._bar.close()
      self._bar = None
    elif self._shown:
      self._line(final=True)
    self.active = False

  def _line(self, final: bool = False) -> None:
    self._shown = True
    elapsed = time.perf_counter() - self._start
    # Loop bodies run once per iteration: the count may pass the estimate.
    share = "" if final else f" ({min(100, 100 * self.done // max(self.total, 1))}%)"
    print(
      f"{self.label}: {self.done}/{self.total} {self.unit}{share}, {elapsed:.1f} s"
      + (" - done" if final else ""),
      file=self.stream,
      flush=True,
    )


class _RichBar:
  def __init__(self, progress: Progress, rich_progress):
    self._rich = rich_progress
    self._task = rich_progress.add_task(
      progress.label, total=max(progress.total, progress.done), completed=progress.done
    )
    self._rich.start()

  def update(self, completed: int) -> None:
    task = self._rich.tasks[0]
    self._rich.update(self._task, completed=completed, total=max(task.total or 0, completed))

  def close(self) -> None:
    self._rich.stop()


def _rich_bar(progress: Progress) -> Optional[_RichBar]:
  """A live bar on a terminal, when rich is installed."""
  try:
    if not progress.stream.isatty():
      return None
    from rich.console import Console
    from rich.progress import (
      BarColumn,
      MofNCompleteColumn,
      Progress as RichProgress,
      TextColumn,
      TimeElapsedColumn,
    )
  except (ImportError, AttributeError, ValueError):
    return None
  console = Console(file=progress.stream)
  columns = (
    TextColumn("{task.description}"),
    BarColumn(),
    MofNCompleteColumn(),
    TextColumn(progress.unit),
    TimeElapsedColumn(),
  )
  return _RichBar(progress, RichProgress(*columns, console=console, transient=False))


@contextlib.contextmanager
def phase(label: str, stream: Optional[TextIO] = None):
  """Work of unknown length (lowering, compiling, writing): once it has lasted
  :data:`DELAY_S`, ``label ...`` on stderr, then the time it took when it ends."""
  stream = sys.stderr if stream is None else stream
  if not wanted(stream):
    yield
    return
  start = time.perf_counter()
  announce = threading.Timer(DELAY_S, lambda: print(f"{label} ...", file=stream, flush=True))
  announce.daemon = True
  announce.start()
  try:
    yield
  finally:
    announce.cancel()
    elapsed = time.perf_counter() - start
    if elapsed >= DELAY_S:
      print(f"{label}: done in {elapsed:.1f} s", file=stream, flush=True)
