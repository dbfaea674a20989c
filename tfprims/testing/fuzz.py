"""Random compositions of TF ops, converted and compared with TensorFlow.

    python -m tfprims.testing.fuzz --seconds 60 --seed 0      # until time runs out
    python -m tfprims.testing.fuzz --cases 200 --seed 7        # a fixed number of programs

Each case is a small random program — a chain of TF ops over one or two inputs
(elementwise math, broadcasting binary ops, reductions, reshapes, transposes,
slices, concatenation, matmul, softmax, cumulative sums...) — traced as a
``tf.function``, converted with :func:`tfprims.convert_functional`, and checked
against TF's kernels run eagerly (grappler's graph rewrites are not the oracle):

* ``values``: the converted function (eager) against TF, NaN and infinities in
  the same places; inputs draw NaN, ±inf, ±0 and huge/tiny values;
* ``jit``: ``jax.jit`` of the converted function against its eager result;
* ``grad``: ``jax.grad`` of ``sum(output * ct)`` against ``tf.GradientTape``
  (on finite inputs whose outputs are finite);
* ``vmap``: ``jax.vmap`` over two inputs against the two calls.

A case is reproducible from ``(seed, index)``; a finding prints the program as
``tf.raw_ops`` source with its inputs. tests/test_fuzz.py runs a short
deterministic slice (a long one under ``HYPOTHESIS_PROFILE=thorough``).
Programs avoid what docs/semantics documents as TF-inconsistent (TF's CPU kernel
vs TF-XLA): float16/bfloat16 (TF's CPU kernels round intermediates their own
way), complex values, float32 Softmax (oneDNN's kernel zeroes the rest of a
row holding NaN/+inf; TF-XLA and the float64 kernel give NaN) and float64 Erf
(TF's double kernel gives NaN beyond 1.34e154).
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
import time
from typing import Callable, Optional

import numpy as np

from tfprims.testing.comparison import compare
from tfprims.testing.snippets import literal
from tfprims.errors import import_tensorflow

DTYPES = ("float32", "float64")
# Tolerances of whole programs: several roundings compound (vs the per-op runner).
VALUE_TOL = {"float32": (2e-4, 1e-5), "float64": (1e-9, 1e-12)}
GRAD_TOL = {"float32": (2e-3, 1e-4), "float64": (1e-7, 1e-10)}
SPECIAL = (np.nan, np.inf, -np.inf, 0.0, -0.0, 1e30, -1e30, 1e-30)


@dataclasses.dataclass
class Step:
  """One op of a program: ``out = source`` with operands named ``v<i>``."""

  source: str  # Python source using tf.raw_ops, operands as {0}, {1}
  args: tuple  # indices of the operands in the value list
  smooth: bool = True  # differentiable almost everywhere (grad check applies)


@dataclasses.dataclass
class Program:
  seed: int
  index: int
  dtype: str
  shapes: list
  steps: list
  outputs: list

  def source(self) -> str:
    lines = [f"def f({', '.join(f'v{i}' for i in range(len(self.shapes)))}):"]
    n = len(self.shapes)
    for k, step in enumerate(self.steps):
      lines.append(f"  v{n + k} = " + step.source.format(*(f"v{i}" for i in step.args)))
    lines.append("  return " + ", ".join(f"v{i}" for i in self.outputs))
    return "\n".join(lines)

  @property
  def smooth(self) -> bool:
    return all(s.smooth for s in self.steps)


@dataclasses.dataclass
class Finding:
  program: Program
  check: str
  message: str
  inputs: list

  def report(self) -> str:
    values = "\n".join(f"v{i} = {literal(v)}" for i, v in enumerate(self.inputs))
    return (
      f"fuzz case seed={self.program.seed} index={self.program.index}: check "
      f"'{self.check}' failed: {self.message}\n"
      "import numpy as np, tensorflow as tf, jax, tfprims\n"
      f"{self.program.source()}\n{values}\n"
      f"fn = tfprims.convert_functional(tf.function(f), "
      + ", ".join(f"tf.TensorSpec({list(s)}, tf.{self.program.dtype})" for s in self.program.shapes)
      + ")\n"
      f"print(fn({', '.join(f'v{i}' for i in range(len(self.inputs)))}), "
      f"f({', '.join(f'v{i}' for i in range(len(self.inputs)))}))"
    )


# --- programs ------------------------------------------------------------------------------

_UNARY = [  # (source, smooth): ops defined on all of R (or NaN-propagating outside)
  ("tf.raw_ops.Abs(x={0})", False),
  ("tf.raw_ops.Neg(x={0})", True),
  ("tf.raw_ops.Sin(x={0})", True),
  ("tf.raw_ops.Cos(x={0})", True),
  ("tf.raw_ops.Tanh(x={0})", True),
  ("tf.raw_ops.Sigmoid(x={0})", True),
  ("tf.raw_ops.Exp(x={0})", True),
  ("tf.raw_ops.Log(x={0})", True),
  ("tf.raw_ops.Sqrt(x={0})", True),
  ("tf.raw_ops.Square(x={0})", True),
  ("tf.raw_ops.Relu(features={0})", False),
  ("tf.raw_ops.Elu(features={0})", True),
  ("tf.raw_ops.Softplus(features={0})", True),
  ("tf.raw_ops.Floor(x={0})", False),
  ("tf.raw_ops.Round(x={0})", False),
  ("tf.raw_ops.Sign(x={0})", False),
  ("tf.raw_ops.Atan(x={0})", True),
  ("tf.raw_ops.Reciprocal(x={0})", True),
  ("tf.raw_ops.Softsign(features={0})", True),
  ("tf.raw_ops.Relu6(features={0})", False),
  ("tf.raw_ops.Log1p(x={0})", True),
]
_BINARY = [
  ("tf.raw_ops.AddV2(x={0}, y={1})", True),
  ("tf.raw_ops.Sub(x={0}, y={1})", True),
  ("tf.raw_ops.Mul(x={0}, y={1})", True),
  ("tf.raw_ops.RealDiv(x={0}, y={1})", True),
  ("tf.raw_ops.Maximum(x={0}, y={1})", False),
  ("tf.raw_ops.Minimum(x={0}, y={1})", False),
  ("tf.raw_ops.SquaredDifference(x={0}, y={1})", True),
  ("tf.raw_ops.Atan2(y={0}, x={1})", True),
  ("tf.raw_ops.FloorMod(x={0}, y={1})", False),
  ("tf.raw_ops.DivNoNan(x={0}, y={1})", False),
  ("tf.raw_ops.Pow(x={0}, y={1})", True),
]


# TF's float64 Erf kernel gives NaN for |x| >= 1.34e154 and ±inf (docs/semantics/
# elementwise.md): only float32 programs use it.
_FLOAT32_UNARY = [("tf.raw_ops.Erf(x={0})", True)]


class _Builder:
  """Grows a random program from a numpy Generator."""

  def __init__(self, rng: np.random.Generator, dtype: str):
    self.rng, self.dtype = rng, dtype
    self.shapes: list = []
    self.steps: list = []

  def shape(self, max_rank=3):
    return tuple(int(d) for d in self.rng.integers(1, 4, size=self.rng.integers(0, max_rank + 1)))

  def add(self, source, args, shape, smooth=True):
    self.steps.append(Step(source, tuple(args), smooth))
    self.shapes.append(shape)
    return len(self.shapes) - 1

  def pick(self):
    return int(self.rng.integers(len(self.shapes)))

  def step(self):
    rng, i = self.rng, self.pick()
    s = self.shapes[i]
    kind = rng.choice(
      ["unary", "binary", "reduce", "shape", "matmul", "misc"], p=[0.3, 0.3, 0.1, 0.15, 0.05, 0.1]
    )
    if kind == "unary":
      table = _UNARY + (_FLOAT32_UNARY if self.dtype == "float32" else [])
      src, smooth = table[rng.integers(len(table))]
      return self.add(src, [i], s, smooth)
    if kind == "binary":
      j = self.pick()
      t = self.shapes[j]
      try:
        out = tuple(np.broadcast_shapes(s, t))
      except ValueError:
        j, out = i, s
      src, smooth = _BINARY[rng.integers(len(_BINARY))]
      return self.add(src, [i, j], out, smooth)
    if kind == "reduce" and s:
      axes = sorted(int(a) for a in rng.choice(len(s), rng.integers(1, len(s) + 1), replace=False))
      keep = bool(rng.integers(2))
      op = rng.choice(["Sum", "Mean", "Max", "Min", "Prod"])
      out = (
        tuple(1 if k in axes else d for k, d in enumerate(s))
        if keep
        else tuple(d for k, d in enumerate(s) if k not in axes)
      )
      return self.add(
        f"tf.raw_ops.{op}(input={{0}}, axis={axes}, keep_dims={keep})",
        [i],
        out,
        op in ("Sum", "Mean"),
      )
    if kind == "shape" and s:
      choice = rng.integers(5)
      if choice == 0:
        perm = [int(p) for p in rng.permutation(len(s))]
        return self.add(
          f"tf.raw_ops.Transpose(x={{0}}, perm={perm})", [i], tuple(s[p] for p in perm)
        )
      if choice == 1:
        return self.add("tf.raw_ops.Reshape(tensor={0}, shape=[-1])", [i], (int(np.prod(s)),))
      if choice == 2:
        axis = int(rng.integers(len(s)))
        return self.add(f"tf.raw_ops.ReverseV2(tensor={{0}}, axis=[{axis}])", [i], s)
      if choice == 3:
        axis = int(rng.integers(-len(s), len(s)))
        out = list(s)
        out[axis] *= 2
        return self.add(f"tf.raw_ops.ConcatV2(values=[{{0}}, {{0}}], axis={axis})", [i], tuple(out))
      begin = [int(rng.integers(d)) for d in s]
      size = [int(rng.integers(1, d - b + 1)) for d, b in zip(s, begin)]
      return self.add(
        f"tf.raw_ops.Slice(input={{0}}, begin={begin}, size={size})", [i], tuple(size)
      )
    if kind == "matmul" and len(s) == 2:
      return self.add(
        "tf.raw_ops.MatMul(a={0}, b={0}, transpose_a=False, transpose_b=True)", [i], (s[0], s[0])
      )
    if kind == "misc" and s:
      choice = rng.integers(3)
      if choice == 0 and self.dtype == "float64":  # float32: see the module docstring
        return self.add("tf.raw_ops.Softmax(logits={0})", [i], s)
      if choice == 1:
        axis = int(rng.integers(len(s)))
        ex, rev = bool(rng.integers(2)), bool(rng.integers(2))
        return self.add(
          f"tf.raw_ops.Cumsum(x={{0}}, axis={axis}, exclusive={ex}, reverse={rev})", [i], s
        )
      j = self.pick()
      if self.shapes[j] == s:
        return self.add(
          "tf.raw_ops.SelectV2(condition=tf.raw_ops.Greater(x={0}, y=0.0), t={0}, e={1})",
          [i, j],
          s,
          False,
        )
    src, smooth = _UNARY[rng.integers(len(_UNARY))]
    return self.add(src, [i], s, smooth)


def make_program(seed: int, index: int) -> Program:
  rng = np.random.default_rng([seed, index])
  dtype = DTYPES[int(rng.integers(len(DTYPES)))]
  b = _Builder(rng, dtype)
  n_inputs = int(rng.integers(1, 3))
  for _ in range(n_inputs):
    b.shapes.append(b.shape())
  for _ in range(int(rng.integers(2, 7))):
    b.step()
  last = len(b.shapes) - 1
  outputs = [last] if rng.integers(2) or last == n_inputs else [last, last - 1]
  return Program(seed, index, dtype, b.shapes[:n_inputs], b.steps, outputs)


def draw_inputs(program: Program, rng: np.random.Generator, special: bool) -> list:
  out = []
  for shape in program.shapes:
    x = rng.normal(size=shape) * 2.0
    if special:
      mask = rng.random(shape) < 0.2
      x = np.where(mask, rng.choice(SPECIAL, size=shape), x)
    out.append(np.asarray(x, program.dtype))
  return out


# --- checks --------------------------------------------------------------------------------


def _tf_function(program: Program):
  tf = import_tensorflow()
  scope = {"tf": tf}
  exec(program.source(), scope)  # pylint: disable=exec-used  # our own generated source
  return tf.function(scope["f"], autograph=False)


def check_program(program: Program, rng: np.random.Generator) -> Optional[Finding]:
  """Runs the four checks on one program; the first failure, or None."""
  import jax
  import jax.numpy as jnp

  tf = import_tensorflow()

  import tfprims

  f = _tf_function(program)
  specs = [tf.TensorSpec(s, tf.as_dtype(program.dtype)) for s in program.shapes]
  fn = tfprims.convert_functional(f, *specs)
  rtol, atol = VALUE_TOL[program.dtype]

  def fail(check, message, inputs):
    return Finding(program, check, message, inputs)

  inputs = draw_inputs(program, rng, special=True)
  # The oracle runs TF's kernels eagerly: a tf.function call would also run
  # grappler's rewrites, which change NaN results (a Sqrt fused into a Max drops NaN).
  eager = f.python_function
  with np.errstate(all="ignore"):
    want = [np.asarray(t) for t in tf.nest.flatten(eager(*inputs))]
    got = [np.asarray(t) for t in jax.tree_util.tree_leaves(fn(*inputs))]
  for k, (g, w) in enumerate(zip(got, want)):
    d = compare(g, w, rtol=rtol, atol=atol, what=f"output {k}")
    if not d.ok:
      return fail("values", d.message, inputs)
  jitted = [np.asarray(t) for t in jax.tree_util.tree_leaves(jax.jit(fn)(*inputs))]
  for k, (j, g) in enumerate(zip(jitted, got)):
    d = compare(j, g, rtol=rtol, atol=atol, what=f"jit output {k}")
    if not d.ok:
      return fail("jit", d.message, inputs)

  finite = draw_inputs(program, rng, special=False)
  outs = [np.asarray(t) for t in tf.nest.flatten(eager(*finite))]
  if program.smooth and all(np.isfinite(o).all() for o in outs):
    cts = [rng.normal(size=o.shape).astype(program.dtype) for o in outs]
    ts = [tf.constant(x) for x in finite]
    with tf.GradientTape() as tape:
      tape.watch(ts)
      loss = tf.add_n([tf.reduce_sum(o * c) for o, c in zip(tf.nest.flatten(eager(*ts)), cts)])
    tf_grads = tape.gradient(loss, ts)

    def jloss(*xs):
      return sum(jnp.sum(o * c) for o, c in zip(jax.tree_util.tree_leaves(fn(*xs)), cts))

    ours = jax.grad(jloss, argnums=tuple(range(len(finite))))(*finite)
    grtol, gatol = GRAD_TOL[program.dtype]
    for k, (g, w) in enumerate(zip(ours, tf_grads)):
      w = np.zeros_like(finite[k]) if w is None else np.asarray(w)
      if np.isfinite(w).all():
        d = compare(
          np.asarray(g),
          w,
          rtol=grtol,
          atol=gatol * max(1.0, np.abs(w).max(initial=0)),
          what=f"d/dv{k}",
        )
        if not d.ok:
          return fail("grad", d.message, finite)

  other = draw_inputs(program, rng, special=True)
  with np.errstate(all="ignore"):
    batched = jax.vmap(fn)(*[np.stack([a, b]) for a, b in zip(inputs, other)])
    singles = [got, [np.asarray(t) for t in jax.tree_util.tree_leaves(fn(*other))]]
  for k, out in enumerate(jax.tree_util.tree_leaves(batched)):
    for e in range(2):
      d = compare(
        np.asarray(out)[e],
        singles[e][k],
        rtol=rtol,
        atol=atol,
        what=f"vmap output {k}, example {e}",
      )
      if not d.ok:
        return fail("vmap", d.message, inputs if e == 0 else other)
  return None


def run(
  seed: int = 0,
  cases: Optional[int] = None,
  seconds: Optional[float] = None,
  log: Callable[[str], None] = lambda s: None,
) -> list[Finding]:
  """Checks programs ``(seed, 0), (seed, 1), ...`` until ``cases`` are done or
  ``seconds`` have passed; returns the findings."""
  import jax

  if cases is None and seconds is None:
    cases = 20
  findings, start, index = [], time.monotonic(), 0
  with jax.enable_x64(True):
    while (cases is None or index < cases) and (
      seconds is None or time.monotonic() - start < seconds
    ):
      program = make_program(seed, index)
      finding = check_program(program, np.random.default_rng([seed, index, 1]))
      if finding is not None:
        findings.append(finding)
        log(finding.report())
      index += 1
  log(f"{index} programs, {len(findings)} findings, {time.monotonic() - start:.0f} s")
  return findings


def main(argv=None) -> int:
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument("--seed", type=int, default=0)
  parser.add_argument("--cases", type=int)
  parser.add_argument("--seconds", type=float)
  args = parser.parse_args(argv)
  findings = run(
    args.seed,
    args.cases,
    args.seconds or (None if args.cases else 60.0),
    log=lambda s: print(s, flush=True),
  )
  return 1 if findings else 0


if __name__ == "__main__":
  sys.exit(main())
