"""Every ```python block of README.md and docs/**/*.md runs as written.

Each page runs in a fresh interpreter, in a fresh temporary directory (blocks write
SavedModels and artifacts there), its blocks in page order. A block runs in a fresh
namespace, unless the line before it is ``<!-- continues -->``: it then builds on the
block before it (the names it defined), as a reader following the page does. A block
that is deliberately not runnable says why on the line before it:
``<!-- not-run: reason -->`` (used sparingly: a partial snippet with placeholders). The
``test_*`` functions a block defines (a block that is a pytest module) are called too,
with the property tests' Hypothesis profile ("ci": few examples, derandomized).
"""

import json
import os
import pathlib
import re
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]

_FENCE = re.compile(r"^(\s*)```(\S*)\s*$")
_NOT_RUN = re.compile(r"^<!--\s*not-run:\s*(.*?)\s*-->$")
_CONTINUES = re.compile(r"^<!--\s*continues\s*-->$")


def blocks(path: pathlib.Path) -> list:
  """The page's python blocks: dicts with the block's first code line (1-based), its
  code (dedented) and ``mode``: "run", "continues" or "not-run" (with ``reason``)."""
  lines = path.read_text().splitlines()
  out, k = [], 0
  while k < len(lines):
    m = _FENCE.match(lines[k])
    if not m:
      k += 1
      continue
    indent, lang = m.group(1), m.group(2)
    end = k + 1
    while end < len(lines) and not (lines[end].strip() == "```" and lines[end].startswith(indent)):
      end += 1
    if lang == "python":
      before = next((lines[j].strip() for j in range(k - 1, -1, -1) if lines[j].strip()), "")
      block = {
        "line": k + 2,
        "code": "\n".join(l[len(indent) :] for l in lines[k + 1 : end]),
        "mode": "run",
      }
      if _NOT_RUN.match(before):
        block.update(mode="not-run", reason=_NOT_RUN.match(before).group(1))
      elif _CONTINUES.match(before):
        block["mode"] = "continues"
      out.append(block)
    k = end + 1
  return out


# Runs one page's blocks (JSON on stdin); exits 1 naming the block that failed.
_DRIVER = r"""
import json, linecache, sys, traceback
page = json.load(sys.stdin)
import hypothesis
from tfprims.testing.runner import register_profiles
register_profiles()
hypothesis.settings.load_profile("ci")
namespace = None
for block in page["blocks"]:
  if block["mode"] == "not-run":
    continue
  if block["mode"] == "run" or namespace is None:
    namespace = {"__name__": "__main__"}
  before = set(namespace)
  try:
    # At the page's line numbers (tracebacks point into the page), the other lines blank
    # in linecache, where inspect (TF's autograph) reads a lambda's source.
    source = "\n" * (block["line"] - 1) + block["code"] + "\n"
    linecache.cache[page["path"]] = (len(source), None, source.splitlines(True), page["path"])
    code = compile(source, page["path"], "exec")
    exec(code, namespace)
    for name in sorted(set(namespace) - before):
      if name.startswith("test_") and callable(namespace[name]):
        namespace[name]()
  except BaseException:
    print(f"FAILED: the block at {page['path']}:{block['line']}", file=sys.stderr)
    traceback.print_exc()
    sys.exit(1)
  print(f"ran the block at line {block['line']}")
"""


def _pages_with_blocks():
  return [p for p in PAGES if blocks(p)]


def test_markers_are_well_formed(tmp_path):
  """A not-run marker gives a reason; a continued block has one before it; no fence is
  left open."""
  for path in PAGES:
    found = blocks(path)
    for k, block in enumerate(found):
      rel = f"{path.relative_to(ROOT)}:{block['line']}"
      if block["mode"] == "not-run":
        assert block["reason"], f"{rel}: <!-- not-run: --> needs a reason"
      if block["mode"] == "continues":
        assert k > 0 and found[k - 1]["mode"] != "not-run", (
          f"{rel}: <!-- continues --> needs a block that runs before it"
        )
    assert path.read_text().count("```") % 2 == 0, f"{path}: a code fence is not closed"
  # The extractor itself, on a page of its own.
  page = tmp_path / "page.md"
  page.write_text(
    "text\n```python\na = 1\n```\n<!-- continues -->\n\n```python\nb = a\n```\n"
    "<!-- not-run: a placeholder -->\n  ```python\n  x(\n  ```\n```bash\nls\n```\n"
  )
  got = blocks(page)
  assert [(b["line"], b["code"], b["mode"]) for b in got] == [
    (3, "a = 1", "run"),
    (8, "b = a", "continues"),
    (12, "x(", "not-run"),
  ]
  assert got[2]["reason"] == "a placeholder"


def _run_page(label, path, cwd):
  page = {"path": label, "blocks": blocks(path)}
  env = dict(
    os.environ,
    JAX_PLATFORMS="cpu",
    TF_CPP_MIN_LOG_LEVEL="3",
    PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
  )
  return subprocess.run(
    [sys.executable, "-c", _DRIVER],
    input=json.dumps(page),
    text=True,
    capture_output=True,
    cwd=cwd,
    env=env,
    timeout=600,
  )


def test_the_driver_runs_tests_and_names_the_failing_block(tmp_path):
  page = tmp_path / "page.md"
  page.write_text(
    "```python\nimport pathlib\ndef test_writes():\n"
    "  pathlib.Path('ran').write_text('yes')\n```\n\n<!-- continues -->\n"
    "```python\nassert pathlib.Path('ran').read_text() == 'yes'\n```\n"
    "```python\nprint('fresh')\npathlib\n```\n"
  )
  proc = _run_page("page.md", page, tmp_path)
  assert proc.returncode == 1
  assert "fresh" in proc.stdout and "ran the block at line 9" in proc.stdout
  assert "FAILED: the block at page.md:12" in proc.stderr
  assert 'File "page.md", line 13' in proc.stderr and "NameError" in proc.stderr


@pytest.mark.parametrize("path", _pages_with_blocks(), ids=lambda p: str(p.relative_to(ROOT)))
def test_page_blocks_run(path, tmp_path):
  proc = _run_page(str(path.relative_to(ROOT)), path, tmp_path)
  assert proc.returncode == 0, proc.stdout[-2000:] + "\n" + proc.stderr[-6000:]
