"""Runs the property suite op by op under a Hypothesis profile, surviving crashes.

    python scripts/thorough_run.py [--profile thorough] [--log DIR] [OP ...]

A long thorough run should not lose hours to one native abort (an XLA CHECK
failure kills the pytest process): ops run in pytest sessions of their own
batches; when a session dies, the op it was running is recorded as crashed and
the rest go on. Max errors go to property_tests/max_errors.json (``--errors``; see
property_tests/conftest.py) and the boundary values drawn to
property_tests/drawn_values.json (``--drawn``); a summary (passed/failed/crashed per
op, seconds) goes to DIR/summary.json. ``--shard i/n`` runs every n-th op (n
processes side by side, each with its own ``--log``).
"""

import argparse
import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RESULT = re.compile(r"::test_op\[(.+?)\] (PASSED|FAILED|SKIPPED|ERROR)")
STARTED = re.compile(r"::test_op\[(.+?)\] ")


def all_ops():
  out = subprocess.run(
    [sys.executable, "-c", "from tfprims.core import registered_ops; print(*registered_ops())"],
    capture_output=True,
    text=True,
    check=True,
    cwd=ROOT,
  )
  return out.stdout.split()


def main(argv=None):
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument("ops", nargs="*")
  parser.add_argument("--profile", default="thorough")
  parser.add_argument("--log", default="/tmp/tfprims-thorough")
  parser.add_argument("--batch", type=int, default=20, help="ops per pytest session")
  parser.add_argument(
    "--errors",
    default=str(ROOT / "property_tests" / "max_errors.json"),
    help="where max errors are merged ('' to record none)",
  )
  parser.add_argument(
    "--drawn",
    default=str(ROOT / "property_tests" / "drawn_values.json"),
    help="where drawn boundary values are merged ('' to record none)",
  )
  parser.add_argument("--shard", default="0/1", help="i/n: run ops i, i+n, i+2n, ...")
  args = parser.parse_args(argv)
  shard, shards = (int(v) for v in args.shard.split("/"))
  log = Path(args.log)
  log.mkdir(parents=True, exist_ok=True)
  summary_path = log / "summary.json"
  summary = json.loads(summary_path.read_text()) if summary_path.exists() else {}
  remaining = [op for op in (args.ops or all_ops())[shard::shards] if op not in summary]
  env = dict(
    os.environ,
    HYPOTHESIS_PROFILE=args.profile,
    JAX_PLATFORMS="cpu",
    TF_CPP_MIN_LOG_LEVEL="3",
    TFPRIMS_MAX_ERRORS=args.errors,
    TFPRIMS_DRAWN_VALUES=args.drawn,
  )
  for name in ("TFPRIMS_MAX_ERRORS", "TFPRIMS_DRAWN_VALUES"):
    if not env[name]:
      del env[name]
  session = len(list(log.glob("session*.log")))  # a restart continues the numbering
  while remaining:
    batch, remaining = remaining[: args.batch], remaining[args.batch :]
    session += 1
    out_file = log / f"session{session:03d}.log"
    ids = [f"property_tests/test_ops.py::test_op[{op}]" for op in batch]
    start = time.time()
    with open(out_file, "w") as out:
      proc = subprocess.Popen(
        [
          sys.executable,
          "-m",
          "pytest",
          "-v",
          "-p",
          "no:cacheprovider",
          "--tb=short",
          "--durations=0",
          *ids,
        ],
        stdout=out,
        stderr=subprocess.STDOUT,
        cwd=ROOT,
        env=env,
      )
      rc = proc.wait()
    text = out_file.read_text(errors="replace")
    done = {}
    for op, outcome in RESULT.findall(text):
      done.setdefault(op, outcome.lower())
    for m in re.finditer(r"([\d.]+)s call\s+property_tests/test_ops.py::test_op\[(.+?)\]", text):
      if m.group(2) in done:
        summary.setdefault(m.group(2), {})["seconds"] = float(m.group(1))
    for op, outcome in done.items():
      summary.setdefault(op, {}).update(outcome=outcome, log=out_file.name)
    if rc not in (0, 1):  # the process died: the first op without a result crashed it
      rest = [op for op in batch if op not in done]
      if rest:
        summary[rest[0]] = {"outcome": "crashed", "log": out_file.name, "rc": rc}
        remaining = rest[1:] + remaining
    failed = sorted(o for o, r in summary.items() if r['outcome'] in ('failed', 'error', 'crashed'))
    print(
      f"session {session}: {len(done)} ops in {time.time() - start:.0f}s, rc={rc}; "
      f"{len(remaining)} left; failed so far: {failed}",
      flush=True,
    )
    summary_path.write_text(json.dumps(summary, indent=1, sort_keys=True))
  return 0


if __name__ == "__main__":
  sys.exit(main())
