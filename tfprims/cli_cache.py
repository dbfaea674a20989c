"""``tfprims cache info`` / ``tfprims cache clear``: the persistent compilation cache
(:mod:`tfprims.cache`) that loading an artifact and the command line turn on."""

from __future__ import annotations

import argparse
import json
from typing import TextIO

from tfprims.cli_common import EXIT_OK


def add_parser(sub) -> None:
  cache = sub.add_parser(
    "cache",
    help="the persistent compilation cache: where it is, how big (info), empty it (clear)",
    description=(
      "JAX's persistent compilation cache, which tfprims.load_exported and the tfprims\n"
      "command line turn on: a program compiled once is read from disk by later\n"
      "processes. Its directory: $TFPRIMS_CACHE_DIR (off: TFPRIMS_CACHE_DIR=off), else\n"
      "$XDG_CACHE_HOME/tfprims/jax, else ~/.cache/tfprims/jax. A JAX cache directory\n"
      "set by the user (JAX_COMPILATION_CACHE_DIR, jax.config) is left alone and used."
    ),
    formatter_class=argparse.RawDescriptionHelpFormatter,
  )
  actions = cache.add_subparsers(dest="action", metavar="ACTION", required=True)
  info = actions.add_parser("info", help="the directory, its entries and size")
  info.add_argument("--json", action="store_true", help="print it as JSON")
  actions.add_parser(
    "clear", help="remove the cached programs (JAX's files and tfprims' executables only)"
  )
  cache.set_defaults(run=run)


def _bytes(n: int) -> str:
  for unit in ("B", "KiB", "MiB", "GiB"):
    if n < 1024 or unit == "GiB":
      return f"{n} {unit}" if unit == "B" else f"{n:.1f} {unit}"
    n /= 1024
  return f"{n} B"


def run(args, out: TextIO) -> int:
  from tfprims import cache

  if args.action == "clear":
    info = cache.info()
    if info["path"] is None:
      print(f"compilation cache: off ({info['source']}); nothing to clear", file=out)
    else:
      removed, freed = cache.clear()
      print(
        f"compilation cache: {info['path']}: removed {removed} entries ({_bytes(freed)})", file=out
      )
    if info["jax_dir_set_by"] == "user":
      print(
        f"JAX's own cache directory {info['jax_dir']} (JAX_COMPILATION_CACHE_DIR or "
        "jax.config) is not tfprims': left as it is",
        file=out,
      )
    return EXIT_OK
  info = cache.info()
  if args.json:
    json.dump(info, out, indent=1)
    print(file=out)
    return EXIT_OK
  if info["path"] is None:
    print(f"compilation cache: off ({info['source']})", file=out)
  else:
    print(f"compilation cache: {info['path']} (from {info['source']})", file=out)
    print(f"entries: {info['entries']}, size: {_bytes(info['size_bytes'])}", file=out)
  if info["jax_dir_set_by"] == "user":
    print(
      f"JAX's own cache directory is set (JAX_COMPILATION_CACHE_DIR or jax.config): "
      f"{info['jax_dir']} ({info['jax_dir_entries']} entries, "
      f"{_bytes(info['jax_dir_size_bytes'])}); tfprims leaves it, and programs are "
      "cached there, not in tfprims' directory",
      file=out,
    )
  if not info["jax_enabled"]:
    print("jax_enable_compilation_cache is off: JAX caches nothing", file=out)
  return EXIT_OK
