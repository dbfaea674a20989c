"""The printed report of ``tfprims inspect`` (its sections, the abridged jaxpr)."""

from __future__ import annotations

import collections
import re
from typing import TextIO

import numpy as np


def jaxpr_op_counts(closed_jaxpr) -> collections.Counter:
  """Primitive name -> number of equations, sub-jaxprs included."""
  from jax.extend import core as jex_core

  counts: collections.Counter = collections.Counter()
  stack = [getattr(closed_jaxpr, "jaxpr", closed_jaxpr)]
  while stack:
    jaxpr = stack.pop()
    for eqn in jaxpr.eqns:
      counts[eqn.primitive.name] += 1
    stack.extend(getattr(j, "jaxpr", j) for j in jex_core.subjaxprs(jaxpr))
  return counts


# --- printing --------------------------------------------------------------------


def _spec_str(spec) -> str:
  return str(spec)


def _output_names(jax_fn) -> list:
  """(structure path or "", TensorSpec) for each output, in output order."""
  import tree

  leaves = [
    (path, spec)
    for path, spec in tree.flatten_with_path(jax_fn.structured_outputs)
    if hasattr(spec, "dtype")
  ]
  if len(leaves) != len(jax_fn.output_specs):
    return [("", spec) for spec in jax_fn.output_specs]
  return [("/".join(str(p) for p in path), spec) for path, spec in leaves]


def _array_str(value) -> str:
  return f"{np.dtype(value.dtype).name}{list(np.shape(value))}"


class Report:
  """Writes the sections of ``tfprims inspect``."""

  def __init__(self, out: TextIO, *, full: bool, max_equations: int):
    self.out, self.full, self.max_equations = out, full, max_equations

  def line(self, text: str = "") -> None:
    print(text, file=self.out)

  def section(self, title: str) -> None:
    self.line()
    self.line(f"== {title} ==")

  def header(self, target, jax_fn, params, convert_s: float) -> None:
    self.line(f"tfprims inspect: {target.title}")
    self.line(f"  {target.description}")
    self.line(f"function: {jax_fn.__name__}  (converted in {convert_s:.2f} s)")
    examples_in = {}
    import tree

    flat = [v for v in tree.flatten((target.args, target.kwargs))]
    for spec, value in zip(jax_fn.input_specs, flat):
      examples_in[spec.name] = value
    self.line("inputs:")
    for spec in jax_fn.input_specs:
      value = examples_in.get(spec.name)
      example = f"   (example: {_array_str(value)})" if value is not None else ""
      self.line(f"  {_spec_str(spec)}{example}")
    self.line("outputs:")
    for name, spec in _output_names(jax_fn):
      self.line(
        f"  {name}: {_spec_str(spec).split(': ', 1)[1]}  ({spec.name})"
        if name
        else f"  {_spec_str(spec)}"
      )
    specs = jax_fn.param_specs
    n_values = sum(int(np.size(v)) for v in params.values())
    n_trainable = sum(1 for s in specs.values() if s.trainable)
    nbytes = sum(int(np.asarray(v).nbytes) for v in params.values())
    self.line(
      f"params: {_plural(len(params), 'array')}, {_plural(n_values, 'value')} "
      f"({_bytes(nbytes)}), "
      f"{n_trainable} trainable"
    )
    names = sorted(specs)
    shown = names if self.full else names[:8]
    for name in shown:
      flag = "" if specs[name].trainable in (None, True) else "  (non-trainable)"
      self.line(f"  {_spec_str(specs[name])}{flag}")
    if len(shown) < len(names):
      self.line(f"  ... {len(names) - len(shown)} more (use --full)")

  def histogram(self, closed_jaxpr, graph_counts: collections.Counter) -> None:
    counts = jaxpr_op_counts(closed_jaxpr)
    tf_counts = {k[3:]: v for k, v in counts.items() if k.startswith("tf.")}
    other = {k: v for k, v in counts.items() if not k.startswith("tf.")}
    total = sum(counts.values())
    self.section(
      f"TF ops in the jaxpr ({_plural(sum(tf_counts.values()), 'equation')}, "
      f"{_plural(len(tf_counts), 'op type')})"
    )
    rows = sorted(tf_counts.items(), key=lambda kv: (-kv[1], kv[0]))
    width = max([len(k) for k, _ in rows] + [6])
    self.line(f"  {'TF op':<{width}}  {'jaxpr':>5}  {'graph':>5}")
    for op, n in rows:
      self.line(f"  {op:<{width}}  {n:>5}  {graph_counts.get(op, 0):>5}")
    if other:
      listing = ", ".join(f"{k} {v}" for k, v in sorted(other.items(), key=lambda kv: -kv[1]))
      self.line(f"  non-TF primitives: {listing}")
    else:
      self.line(f"  non-TF primitives: none (all {total} equations are tf.* primitives)")
    absent = sorted((op, n) for op, n in graph_counts.items() if op not in tf_counts)
    if absent:
      self.line("  graph nodes folded at conversion or handled structurally (no equation):")
      self._wrapped(", ".join(f"{op} {n}" for op, n in absent), indent="    ")

  def _wrapped(self, text: str, indent: str, width: int = 88) -> None:
    import textwrap

    for chunk in textwrap.wrap(
      text, width=width, initial_indent=indent, subsequent_indent=indent, break_on_hyphens=False
    ):
      self.line(chunk)

  def jaxpr(self, closed_jaxpr, input_names: list) -> None:
    n_eqns = len(closed_jaxpr.jaxpr.eqns)
    self.section(f"jaxpr ({_plural(n_eqns, 'top-level equation')})")
    text = str(closed_jaxpr.pretty_print(use_color=False))
    legend = _legend(text, input_names)
    if legend:
      self.line("inputs:")
      shown = legend if self.full or len(legend) <= 24 else legend[:16]
      for var, name in shown:
        self.line(f"  {var:>4} = {name}")
      if len(shown) < len(legend):
        self.line(f"  ... {len(legend) - len(shown)} more (use --full)")
    if self.full or n_eqns <= self.max_equations:
      self.line(text)
    else:
      self.line(abridge_jaxpr_text(text, self.max_equations))
      self.line(f"    ... {n_eqns - self.max_equations} more equations (use --full)")

  def comparison(self, c) -> None:
    self.section("outputs vs TF (example input, converted function under jax.jit)")
    width = max([len(o.name) for o in c.outputs] + [6])
    for o in c.outputs:
      dtype = o.tf_dtype if o.tf_dtype == o.jax_dtype else f"{o.tf_dtype}->{o.jax_dtype}"
      note = f"  {o.note}" if o.note else ""
      rel = "" if o.exact else f"  rel {o.relative:.3g}"
      weak = "  (nearly constant)" if o.weak(c.tolerance) else ""
      self.line(
        f"  {o.name:<{width}}  {dtype}{list(o.shape)}  max|diff| {o.max_abs:.3g}  "
        f"max|tf| {o.scale:.3g}{rel}{note}{weak}"
      )
    worst = c.worst
    which = f", output '{worst.name}'" if worst is not None and len(c.outputs) > 1 else ""
    self.line(
      f"max abs difference vs TF: {c.max_abs:.3g} (relative to the output scale "
      f"{c.scale:.3g}: {c.relative:.3g}{which})"
    )
    self.line(
      f"tolerance: max|jax - tf| <= {c.tolerance:g} * max|tf|, for each output "
      "(--tolerance; integers and booleans: equal)"
    )
    for o in c.weak:
      how = (
        f"a second random input changes it by {o.change:.3g}, {o.change / o.scale:.2g} "
        f"of its scale {o.scale:.3g}"
        if o.scale > 0
        else "it is zero for two random inputs"
      )
      self.line(
        f"warning: output '{o.name}' is (nearly) constant: {how}; this comparison "
        "proves little about it (untrained or zero weights? an output that "
        "saturates? compare a layer before it, e.g. the logits)"
      )
    if not c.varied:
      self.line(
        "note: no float inputs to vary, so how much the outputs depend on the "
        "inputs was not measured"
      )
    bad = [o.name for o in c.outputs if not o.ok(c.tolerance)]
    if bad:
      self.line(
        f"MISMATCH: not within {c.tolerance:g} * max|tf|: {', '.join(bad)}   "
        f"[jit compile + run: {c.seconds:.2f} s]"
      )
    else:
      weak = " (but see the warning: a weak check)" if c.weak else ""
      self.line(
        f"OK: within {c.tolerance:g} * max|tf| of each output{weak}   "
        f"[jit compile + run: {c.seconds:.2f} s]"
      )


def _plural(n: int, word: str) -> str:
  return f"{n:,} {word}{'' if n == 1 else 's'}"


def _bytes(n: int) -> str:
  for unit in ("B", "KiB", "MiB", "GiB"):
    if n < 1024 or unit == "GiB":
      return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
    n /= 1024
  return f"{n} B"


_INVAR = re.compile(r"([a-z]+):[a-z0-9]+\[[^\]]*\]")


def _legend(text: str, input_names: list) -> list:
  """(jaxpr variable, input name) pairs, read from the printed ``lambda`` line."""
  head = text.split(" let", 1)[0]
  if ";" not in head:
    return []
  invars = _INVAR.findall(head.split(";", 1)[1])
  if len(invars) != len(input_names):
    return []
  return list(zip(invars, input_names))


def abridge_jaxpr_text(text: str, max_equations: int) -> str:
  """The printed jaxpr cut after ``max_equations`` top-level equations."""
  lines = text.splitlines()
  body = next((i + 1 for i, line in enumerate(lines) if line.rstrip().endswith("let")), 1)
  kept, eqns, indent = lines[:body], 0, None
  for line in lines[body:]:
    stripped = line.lstrip(" ")
    depth = len(line) - len(stripped)
    if indent is None and stripped:
      indent = depth
    starts_eqn = re.match(r"[a-z_]+:", stripped) is not None  # not "] x y" or "in (...)"
    if depth == indent and starts_eqn:
      eqns += 1
      if eqns > max_equations:
        break
    kept.append(line)
  return "\n".join(kept)
