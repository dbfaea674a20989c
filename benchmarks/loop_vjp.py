"""What reverse mode through a loop of unknown trip count costs (tf.While.unbounded,
docs/control_flow.md): time and memory of ``jax.grad`` for several trip counts ``n``
and checkpoint budgets ``B`` (the ``loop_checkpoints`` config), against the same loop
with a static bound (``maximum_iterations``: a scan, which stores every iteration) and
against TF's GradientTape.

    python -m benchmarks.loop_vjp                  # n in 16, 128, 1024; B in 8, 32, 128
    python -m benchmarks.loop_vjp --trips 64 --budgets 4 64 --width 4096

The loop is ``x <- tanh(x @ w) * decay`` until ``step == n`` (the stop is data: a
runtime ``n``), on a carry of ``width`` float32s. Per case: the jitted grad's median
wall time, its ratio to the forward pass and to the bounded loop's grad, and XLA's
temporary memory of the compiled grad (``memory_analysis``). Prints one JSON object
per case.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
os.environ.setdefault("JAX_PLATFORMS", "cpu")

import jax
import numpy as np
import tensorflow as tf

import tfprims


def loop(width: int, bounded: int | None):
  w = np.random.default_rng(0).normal(size=(width, width)).astype(np.float32) / np.sqrt(width)

  @tf.function(autograph=False)
  def f(x, n):
    def body(i, x):
      return i + 1, tf.tanh(tf.matmul(x, w)) * 0.99

    kw = {} if bounded is None else {"maximum_iterations": bounded}
    _, x = tf.while_loop(lambda i, x: i < n, body, (0, x), **kw)
    return tf.reduce_sum(x * x)

  return f


def timed(fn, *args, repeats: int) -> float:
  jax.block_until_ready(fn(*args))
  times = []
  for _ in range(repeats):
    start = time.perf_counter()
    jax.block_until_ready(fn(*args))
    times.append(time.perf_counter() - start)
  return statistics.median(times)


def temp_bytes(fn, *args) -> int:
  analysis = jax.jit(fn).lower(*args).compile().memory_analysis()
  return int(getattr(analysis, "temp_size_in_bytes", -1)) if analysis is not None else -1


def main(argv=None):
  parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
  parser.add_argument("--trips", type=int, nargs="+", default=[16, 128, 1024])
  parser.add_argument("--budgets", type=int, nargs="+", default=[8, 32, 128])
  parser.add_argument("--width", type=int, default=256)
  parser.add_argument("--repeats", type=int, default=5)
  args = parser.parse_args(argv)
  x = np.random.default_rng(1).normal(size=(1, args.width)).astype(np.float32)
  spec = (tf.TensorSpec(x.shape), tf.TensorSpec((), tf.int32))
  unbounded = tfprims.convert_functional(loop(args.width, None), *spec)
  for n in args.trips:
    n32 = np.int32(n)
    bounded = tfprims.convert_functional(loop(args.width, n), *spec)
    forward = timed(jax.jit(unbounded), x, n32, repeats=args.repeats)
    bounded_grad = jax.grad(bounded)
    scan_s = timed(jax.jit(bounded_grad), x, n32, repeats=args.repeats)
    tf_f = loop(args.width, None)

    @tf.function
    def tf_grad(x, n):
      with tf.GradientTape() as tape:
        tape.watch(x)
        y = tf_f(x, n)
      return tape.gradient(y, x)

    tf_s = timed(lambda a, b: tf_grad(a, b).numpy(), x, n32, repeats=args.repeats)
    for budget in args.budgets:
      with tfprims.override_config("loop_checkpoints", budget):
        grad = jax.jit(jax.grad(unbounded))
        grad_s = timed(grad, x, n32, repeats=args.repeats)
        memory = temp_bytes(jax.grad(unbounded), x, n32)
      print(
        json.dumps(
          {
            "trips": n,
            "budget": budget,
            "width": args.width,
            "grad_ms": round(grad_s * 1e3, 3),
            "forward_ms": round(forward * 1e3, 3),
            "grad_over_forward": round(grad_s / forward, 2),
            "grad_over_bounded_scan_grad": round(grad_s / scan_s, 2),
            "grad_over_tf_gradient_tape": round(grad_s / tf_s, 2),
            "temp_bytes": memory,
            "bounded_scan_temp_bytes": temp_bytes(bounded_grad, x, n32),
            "snapshot_bytes": budget * args.width * 4,
          }
        ),
        flush=True,
      )


if __name__ == "__main__":
  main()
