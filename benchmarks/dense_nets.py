"""Dense convolution nets on CPU: TF against tfprims, with and without the CPU
lowerings of dense convolutions (tfprims/ops/nn/conv_cpu.py: ``_on_eigen``, the output
one column wider than the input so XLA:CPU runs Eigen's convolution, and
``_side_by_side``).

    python -m benchmarks.dense_nets                     # ResNet50, DenseNet121, InceptionV3
    python -m benchmarks.dense_nets --models ResNet50 --batches 8 --repeats 40

Keras applications (weights=None, 224x224, seeded), batch 1 and 8, all in one process:
TF's ``tf.function`` of the model and three compiled tfprims programs of the same
conversion: with every CPU lowering, without the Eigen route, and without it and the
side by side (every other CPU lowering on in all three). After one warm-up call each,
``--repeats`` rounds call the four in turn; the medians are reported. Writes
benchmarks/results/dense_nets.json.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import statistics
import time
from pathlib import Path
from unittest import mock

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
os.environ.setdefault("JAX_PLATFORMS", "cpu")

import jax
import numpy as np
import tensorflow as tf

import tfprims
from tfprims.ops.nn import conv_cpu

RESULTS = Path(__file__).resolve().parent / "results" / "dense_nets.json"
MODELS = ("ResNet50", "DenseNet121", "InceptionV3")


#: The programs compared with TF: the CPU lowerings each leaves out.
PROGRAMS = {
  "tfprims": (),
  "without Eigen": ("_on_eigen",),
  "without Eigen, side by side": ("_on_eigen", "_side_by_side"),
}


def _compiled(fn, params, x, off):
  jitted = jax.jit(lambda p, x: fn(p, x)[0])
  with contextlib.ExitStack() as stack:
    for name in off:
      stack.enter_context(mock.patch.object(conv_cpu, name, lambda *args, **kwargs: None))
    return jitted.lower(params, x).compile()


def bench(name: str, batch: int, repeats: int) -> dict:
  import keras

  keras.utils.set_random_seed(0)
  model = getattr(keras.applications, name)(weights=None, input_shape=(224, 224, 3))
  x = np.random.default_rng(0).uniform(size=(batch, 224, 224, 3)).astype(np.float32)
  tf_fn = tf.function(lambda x: model(x, training=False))
  fn, params = tfprims.convert(tf_fn, x)
  params, x_jax, x_tf = jax.device_put(params), jax.device_put(x), tf.constant(x)
  want = tf_fn(x_tf).numpy()
  calls = {"TF": lambda: tf_fn(x_tf).numpy()}
  for label, off in PROGRAMS.items():
    compiled = _compiled(fn, params, x_jax, off)
    got = np.asarray(compiled(params, x_jax))
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)
    calls[label] = lambda c=compiled: jax.block_until_ready(c(params, x_jax))
  for call in calls.values():
    call()
  times = {label: [] for label in calls}
  for _ in range(repeats):
    for label, call in calls.items():
      start = time.perf_counter()
      call()
      times[label].append(time.perf_counter() - start)
  ms = {label: statistics.median(t) * 1e3 for label, t in times.items()}
  row = {"model": name, "batch": batch, **{f"{k} ms": round(v, 2) for k, v in ms.items()}}
  for label in calls:
    if label != "TF":
      row[f"{label}/TF"] = round(ms[label] / ms["TF"], 3)
  return row


def main(argv=None):
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument("--models", nargs="*", default=list(MODELS))
  parser.add_argument("--batches", nargs="*", type=int, default=[1, 8])
  parser.add_argument("--repeats", type=int, default=30)
  args = parser.parse_args(argv)
  result = {
    "machine": {
      "platform": platform.platform(),
      "cpus": os.cpu_count(),
      "jax": jax.__version__,
      "tensorflow": tf.__version__,
      "load_average_1min": os.getloadavg()[0],
    },
    "rows": [],
  }
  print("| model | batch | TF ms | " + " | ".join(f"{p} ms | /TF" for p in PROGRAMS) + " |")
  print("|---|---|---|" + "---|---|" * len(PROGRAMS))
  for name in args.models:
    for batch in args.batches:
      r = bench(name, batch, args.repeats)
      result["rows"].append(r)
      cells = " | ".join(f"{r[f'{p} ms']:.1f} | {r[f'{p}/TF']:.2f}" for p in PROGRAMS)
      print(f"| {name} | {batch} | {r['TF ms']:.1f} | {cells} |", flush=True)
  result["machine"]["load_average_1min_end"] = os.getloadavg()[0]
  RESULTS.write_text(json.dumps(result, indent=1) + "\n")


if __name__ == "__main__":
  main()
