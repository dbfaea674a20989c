"""How long ``tfprims.compare`` takes on big graphs, against the goal of docs/compare.md:
within 3x (one eager TF call + one eager tfprims call), in bounded memory.

    python -m benchmarks.compare_big                    # ResNet50 224x224, 12-layer BERT
    python -m benchmarks.compare_big --models resnet50 --size 160 --repeats 2

Per model, in one process: the TF call (the tf.function, as users call it) and the
converted function's eager call (no jit), each first (cold: tfprims compiles each
primitive's executable on first use) and warm (median of ``--repeats``); then
``tfprims.compare`` warm (median); the peak resident memory before and after the
comparison. Prints one JSON object per model.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
os.environ.setdefault("JAX_PLATFORMS", "cpu")

import jax
import numpy as np
import tensorflow as tf

import tfprims


def resnet50(size: int):
  import keras

  keras.utils.set_random_seed(0)
  model = keras.applications.ResNet50(weights=None, input_shape=(size, size, 3), classes=1000)
  return model, np.random.default_rng(0).normal(size=(1, size, size, 3)).astype(np.float32)


def bert(layers: int = 12, tokens: int = 128, hidden: int = 768, heads: int = 12):
  """A BERT-base-shaped encoder: 12 layers, 128 tokens, hidden 768, 12 heads, GELU MLP
  of 3072 (the embeddings left out: the encoder's inputs are its hidden states)."""
  import keras

  keras.utils.set_random_seed(0)
  inp = keras.Input((tokens, hidden))
  h = inp
  for _ in range(layers):
    att = keras.layers.MultiHeadAttention(num_heads=heads, key_dim=hidden // heads)(h, h)
    h = keras.layers.LayerNormalization(epsilon=1e-12)(h + att)
    ff = keras.layers.Dense(hidden)(keras.layers.Dense(4 * hidden, activation="gelu")(h))
    h = keras.layers.LayerNormalization(epsilon=1e-12)(h + ff)
  model = keras.Model(inp, h)
  return model, np.random.default_rng(0).normal(size=(1, tokens, hidden)).astype(np.float32)


def _seconds(fn) -> float:
  start = time.perf_counter()
  jax.block_until_ready(fn())
  return time.perf_counter() - start


def _peak_mib() -> float:
  return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # Linux: KiB


def measure(name: str, model, x, repeats: int) -> dict:
  tf_fn = tf.function(lambda x: model(x, training=False))
  jax_fn, params = tfprims.convert(tf_fn, tf.TensorSpec(x.shape, tf.float32))
  call_tf = lambda: tf_fn(x).numpy()
  call_ours = lambda: jax_fn(params, x)[0]
  tf_first, ours_first = _seconds(call_tf), _seconds(call_ours)
  tf_warm = statistics.median(_seconds(call_tf) for _ in range(repeats))
  ours_warm = statistics.median(_seconds(call_ours) for _ in range(repeats))
  before = _peak_mib()
  times, report = [], None
  for _ in range(repeats):
    start = time.perf_counter()
    report = tfprims.compare(tf_fn, x)
    times.append(time.perf_counter() - start)
  compare_s = statistics.median(times)
  return {
    "model": name,
    "input": list(x.shape),
    "nodes": len({r.node for r in report.nodes}),
    "node_outputs": len(report.nodes),
    "diverged": len(report.diverged),
    "worst_max_rel_err": max(r.max_rel_err for r in report.nodes if r.max_rel_err is not None),
    "tf_call_s": {"first": round(tf_first, 3), "warm": round(tf_warm, 3)},
    "tfprims_eager_call_s": {"first": round(ours_first, 3), "warm": round(ours_warm, 3)},
    "compare_s": round(compare_s, 3),
    "compare_runs_s": [round(t, 3) for t in times],
    "ratio_to_warm_calls": round(compare_s / (tf_warm + ours_warm), 2),
    "peak_rss_mib": {"before_compare": round(before), "after_compare": round(_peak_mib())},
  }


def main(argv=None) -> None:
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument(
    "--models", nargs="+", default=["resnet50", "bert"], choices=["resnet50", "bert"]
  )
  parser.add_argument("--size", type=int, default=224, help="ResNet50 image size")
  parser.add_argument("--layers", type=int, default=12, help="BERT encoder layers")
  parser.add_argument("--repeats", type=int, default=3)
  args = parser.parse_args(argv)
  for name in args.models:
    model, x = resnet50(args.size) if name == "resnet50" else bert(args.layers)
    print(json.dumps(measure(name, model, x, args.repeats)), flush=True)


if __name__ == "__main__":
  main()
