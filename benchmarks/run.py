"""Conversion, trace, compile and run speed of tfprims vs TensorFlow and tf2jax.

    python -m benchmarks                 # every model, batch 1 and 32, plus scaling
    python -m benchmarks --models mlp resnet50 --batches 1 --no-scaling
    python -m benchmarks --quick         # small sizes, a smoke run
    python -m benchmarks --suite realistic   # Keras applications at 224x224, BERT-style
                                             # encoder, LSTM; batch 1 and 8
    JAX_PLATFORMS=cuda python -m benchmarks --suite realistic --device gpu
                                             # the same on a GPU: TF GPU, TF-XLA, tf2jax,
                                             # tfprims -> docs/performance-gpu.md

Writes benchmarks/results/latest.json, benchmarks/results/ratios.png and the
table in docs/performance.md. tf2jax is optional (pip install tf2jax); without it
its columns are skipped with a note.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import platform
import random
import statistics
import sys
import time
import tracemalloc
from pathlib import Path

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
os.environ.setdefault("JAX_PLATFORMS", "cpu")

import jax
import numpy as np
import tensorflow as tf

import tfprims

ROOT = Path(__file__).resolve().parent
RESULTS = ROOT / "results"

try:  # optional competitor
  import tf2jax
except Exception:  # pragma: no cover - depends on the environment
  tf2jax = None


# --- models ------------------------------------------------------------------------


def _keras_app(name, size):
  import keras

  def build():
    keras.utils.set_random_seed(0)
    cls = getattr(keras.applications, name)
    return cls(weights=None, input_shape=(size, size, 3), classes=10)

  return build, (size, size, 3)


def _mlp():
  import keras

  keras.utils.set_random_seed(0)
  return keras.Sequential(
    [
      keras.Input((256,)),
      keras.layers.Dense(512, activation="relu"),
      keras.layers.Dense(512, activation="relu"),
      keras.layers.Dense(10),
    ]
  )


def _lstm():
  import keras

  keras.utils.set_random_seed(0)
  return keras.Sequential([keras.Input((16, 32)), keras.layers.LSTM(64), keras.layers.Dense(10)])


def _transformer():
  import keras

  keras.utils.set_random_seed(0)
  inp = keras.Input((32, 64))
  att = keras.layers.MultiHeadAttention(num_heads=4, key_dim=16)(inp, inp)
  h = keras.layers.LayerNormalization()(inp + att)
  ff = keras.layers.Dense(64)(keras.layers.Dense(128, activation="gelu")(h))
  out = keras.layers.LayerNormalization()(h + ff)
  return keras.Model(inp, out)


def _bert_encoder():
  """A BERT-base-shaped encoder, 4 layers: 128 tokens, hidden 256, 4 heads, GELU MLP."""
  import keras

  keras.utils.set_random_seed(0)
  inp = keras.Input((128, 256))
  h = inp
  for _ in range(4):
    att = keras.layers.MultiHeadAttention(num_heads=4, key_dim=64)(h, h)
    h = keras.layers.LayerNormalization(epsilon=1e-12)(h + att)
    ff = keras.layers.Dense(256)(keras.layers.Dense(1024, activation="gelu")(h))
    h = keras.layers.LayerNormalization(epsilon=1e-12)(h + ff)
  return keras.Model(inp, h)


def _lstm_large():
  import keras

  keras.utils.set_random_seed(0)
  return keras.Sequential(
    [
      keras.Input((64, 128)),
      keras.layers.LSTM(256, return_sequences=True),
      keras.layers.LSTM(256),
      keras.layers.Dense(10),
    ]
  )


MODELS = {
  "mlp": (_mlp, (256,)),
  "lstm": (_lstm, (16, 32)),
  "transformer": (_transformer, (32, 64)),
  "mobilenet_v2": _keras_app("MobileNetV2", 96),
  "resnet50": _keras_app("ResNet50", 64),
  "inception_v3": _keras_app("InceptionV3", 75),
}
REALISTIC = {
  "mobilenet_v2_224": _keras_app("MobileNetV2", 224),
  "mobilenet_v3_small_224": _keras_app("MobileNetV3Small", 224),
  "efficientnet_b0_224": _keras_app("EfficientNetB0", 224),
  "convnext_tiny_224": _keras_app("ConvNeXtTiny", 224),
  "resnet50_224": _keras_app("ResNet50", 224),
  "bert_encoder": (_bert_encoder, (128, 256)),
  "lstm_large": (_lstm_large, (64, 128)),
}
MODELS.update(REALISTIC)
SUITES = {"small": [m for m in MODELS if m not in REALISTIC], "realistic": list(REALISTIC)}
KERAS_APPS = (
  "mobilenet_v2",
  "resnet50",
  "inception_v3",
  "mobilenet_v2_224",
  "mobilenet_v3_small_224",
  "efficientnet_b0_224",
  "convnext_tiny_224",
  "resnet50_224",
)


# --- timing helpers ----------------------------------------------------------------


def _timed(fn):
  gc.collect()  # a collection left over from earlier work is not this step's cost
  start = time.perf_counter()
  out = fn()
  return out, time.perf_counter() - start


def _interleaved_medians(fns, repeats, warmup=2):
  """Median seconds of each of ``fns`` ({name: fn}), called in turn ``repeats`` times:
  a slow spell of the machine hits every contender alike.

  A program's first call after another contender's work pays for waking its threads
  and refilling caches; on the sub-millisecond models that made whichever contender
  came right after TensorFlow up to 2x slower than the other. So the order is shuffled
  each round (seeded: every contender follows each other one equally often in
  expectation), and a contender whose call takes under 20 ms is called twice untimed
  before each timed call, as a program run in a loop is.
  """
  settle = {}
  for name, fn in fns.items():
    for _ in range(warmup):
      start = time.perf_counter()
      fn()
    settle[name] = 2 if time.perf_counter() - start < 0.02 else 0
  rng = random.Random(0)
  names = list(fns)
  times = {name: [] for name in fns}
  for _ in range(repeats):
    rng.shuffle(names)
    for name in names:
      for _ in range(settle[name]):
        fns[name]()
      start = time.perf_counter()
      fns[name]()
      times[name].append(time.perf_counter() - start)
  return {name: statistics.median(ts) for name, ts in times.items()}


def _median_call(fn, repeats, warmup=2):
  for _ in range(warmup):
    fn()
  times = []
  for _ in range(repeats):
    start = time.perf_counter()
    fn()
    times.append(time.perf_counter() - start)
  return statistics.median(times)


def _block(x):
  return jax.tree_util.tree_map(lambda a: a.block_until_ready(), x)


def _with_peak_memory(fn):
  gc.collect()
  tracemalloc.start()
  try:
    out, seconds = _timed(fn)
    _, peak = tracemalloc.get_traced_memory()
  finally:
    tracemalloc.stop()
  return out, seconds, peak


# --- one model -----------------------------------------------------------------------


def _first_result(convert, x):
  """What a user waits for: convert, trace, lower, compile and run once, from JAX's
  caches cleared (the contender's own one-time costs were paid by ``warm_up``)."""
  jax.clear_caches()

  def first():
    f = convert()
    return _block(jax.jit(f)(x))

  return _timed(first)[1]


def _bench_jax(convert, x, repeats):
  """convert() -> f(x) (a JAX function of the input only): its first result and the
  parts, and a function that runs the compiled program once."""
  first_result_s = _first_result(convert, x)
  f, convert_s, convert_peak = _with_peak_memory(convert)
  _, trace_s = _timed(lambda: jax.make_jaxpr(f)(x))
  jitted = jax.jit(f)
  lowered, lower_s = _timed(lambda: jitted.lower(x))
  compiled, compile_s = _timed(lambda: lowered.compile())
  eager_s = _median_call(lambda: _block(f(x)), max(3, repeats // 10), warmup=1)
  # run_s: timed by bench_model, interleaved with the other contenders.
  return {
    "first_result_s": first_result_s,
    "convert_s": convert_s,
    "trace_s": trace_s,
    "lower_s": lower_s,
    "compile_s": compile_s,
    "eager_s": eager_s,
    "convert_peak_bytes": convert_peak,
  }, lambda: _block(compiled(x))


def _bench_jax_contenders(converts, x, repeats):
  """:func:`_bench_jax` of each of ``converts`` ({name: convert}) in two rounds, the
  second in the opposite order, keeping each step's lower time.

  The first compile after another model's work is up to a second slower than the next
  one (ConvNeXtTiny after MobileNetV3Small: 3.35 s, then 2.40 s), whichever contender
  it is; measured once, in a fixed order, it was always charged to the first. A
  contender that fails to convert gets ``{"error": ...}``.
  """
  rows, runs = {}, {}
  for order in (list(converts), list(reversed(converts))):
    for name in order:
      if "error" in rows.get(name, {}):
        continue
      try:
        row, runs[name] = _bench_jax(converts[name], x, repeats)
      except Exception as e:  # tf2jax lacks some ops
        rows[name] = {"error": f"{type(e).__name__}: {str(e)[:200]}"}
        continue
      rows[name] = (
        {k: min(v, rows[name][k]) if k.endswith("_s") else v for k, v in row.items()}
        if name in rows
        else row
      )
  return rows, {name: run for name, run in runs.items() if "error" not in rows[name]}


def bench_model(name, batch, repeats):
  build, shape = MODELS[name]
  model = build()
  x = np.random.default_rng(0).normal(size=(batch,) + shape).astype(np.float32)
  tf_fn = tf.function(lambda x: model(x, training=False))
  spec = tf.TensorSpec((batch,) + shape, tf.float32)
  cf = tf_fn.get_concrete_function(spec)
  weights_bytes = sum(v.numpy().nbytes for v in cf.variables)
  row = {
    "model": name,
    "batch": batch,
    "graph_nodes": len(cf.graph.as_graph_def().node),
    "weights_bytes": weights_bytes,
  }

  def convert_tfprims():
    fn, params = tfprims.convert(cf)
    return lambda x: fn(params, x)[0]

  converts = {"tfprims": convert_tfprims}
  if tf2jax is not None:

    def convert_tf2jax():
      fn, params = tf2jax.convert(tf_fn, spec)
      return lambda x: fn(params, x)[0]

    converts["tf2jax"] = convert_tf2jax
  jax_rows, runs = _bench_jax_contenders(converts, x, repeats)
  row.update(jax_rows)
  if "error" in row["tfprims"]:
    raise RuntimeError(row["tfprims"]["error"])

  xt = tf.constant(x)
  fresh = tf.function(lambda x: model(x, training=False))
  _, tf_first = _timed(lambda: fresh(xt).numpy())
  row["tf"] = {"first_result_s": tf_first}
  xla_fn = tf.function(lambda x: model(x, training=False), jit_compile=True)
  _, first = _timed(lambda: xla_fn(xt).numpy())
  row["tf_xla"] = {"compile_s": first}
  runs.update(tf=lambda: tf_fn(xt).numpy(), tf_xla=lambda: xla_fn(xt).numpy())
  for name, seconds in _interleaved_medians(runs, repeats).items():
    row[name]["run_s"] = seconds

  ours = row["tfprims"]
  row["ratios"] = {
    "run/tf": ours["run_s"] / row["tf"]["run_s"],
    "run/tf_xla": ours["run_s"] / row["tf_xla"]["run_s"],
    "first_result/tf": ours["first_result_s"] / row["tf"]["first_result_s"],
  }
  other = row.get("tf2jax", {})
  if "run_s" in other:
    row["ratios"].update(
      {
        "run/tf2jax": ours["run_s"] / other["run_s"],
        "convert+trace/tf2jax": (ours["convert_s"] + ours["trace_s"])
        / (other["convert_s"] + other["trace_s"]),
        "lower/tf2jax": ours["lower_s"] / other["lower_s"],
        "compile/tf2jax": ours["compile_s"] / other["compile_s"],
        "first_result/tf2jax": ours["first_result_s"] / other["first_result_s"],
        "eager/tf2jax": ours["eager_s"] / other["eager_s"],
      }
    )
  row["convert_peak/weights"] = ours["convert_peak_bytes"] / max(weights_bytes, 1)
  return row


def check_gpu():
  """Refuses to time a GPU run that would not run on the GPU: JAX's default device,
  TF's visible GPUs, and tfprims' program being XLA's default (the fast lowerings are
  registered for CPU only: on a GPU the same model compiles to the same HLO with them
  on or off)."""
  if jax.devices()[0].platform != "gpu":
    sys.exit(
      f"--device gpu: JAX's default device is {jax.devices()[0]} (run with "
      "JAX_PLATFORMS=cuda and a CUDA jaxlib: pip install 'jax[cuda12]')"
    )
  if not tf.config.list_physical_devices("GPU"):
    sys.exit(
      "--device gpu: TensorFlow sees no GPU (a CUDA build of TensorFlow is needed "
      "for the TF columns)"
    )
  build, shape = MODELS["mobilenet_v2"]
  model = build()
  cf = tf.function(lambda x: model(x, training=False)).get_concrete_function(
    tf.TensorSpec((1,) + shape, tf.float32)
  )
  fn, params = tfprims.convert(cf)
  x = np.zeros((1,) + shape, np.float32)
  texts = []
  for fast in (True, False):
    with tfprims.override_config("fast_lowerings", fast):
      texts.append(jax.jit(lambda p, x: fn(p, x)[0]).lower(params, x).as_text())
  if texts[0] != texts[1]:
    sys.exit(
      "--device gpu: tfprims' fast lowerings changed the GPU program (they are "
      "meant for CPU only): not XLA's default"
    )
  print(
    f"GPU: {jax.devices()[0].device_kind}; TF: "
    f"{[d.name for d in tf.config.list_physical_devices('GPU')]}; tfprims' program is "
    "XLA's default",
    flush=True,
  )


def warm_up():
  """Pays the process's one-time costs (JAX's and TF's first trace, jit and
  eager dispatch) on a small model with every contender, so that none of them is
  charged for them by running first."""
  model = _mlp()
  x = np.ones((1, 256), np.float32)
  tf_fn = tf.function(lambda x: model(x, training=False))
  spec = tf.TensorSpec((1, 256), tf.float32)
  converters = [lambda: tfprims.convert(tf_fn.get_concrete_function(spec))]
  if tf2jax is not None:
    converters.append(lambda: tf2jax.convert(tf_fn, spec))
  for convert in converters:
    fn, params = convert()
    f = lambda x: fn(params, x)[0]
    jax.make_jaxpr(f)(x)
    _block(jax.jit(f)(x))
    _block(f(x))
  tf_fn(x)
  tf.function(lambda x: model(x, training=False), jit_compile=True)(x)


# --- scaling -----------------------------------------------------------------------


def _chain(n_nodes):
  """A tf.function whose graph has about ``n_nodes`` nodes (elementwise + matmul chain)."""
  w = tf.constant(np.eye(8, dtype=np.float32) * 0.5)

  @tf.function(autograph=False)
  def f(x):
    h = x
    for _ in range(n_nodes // 4):
      h = tf.tanh(tf.matmul(h, w) + 0.1) * 0.9
    return h

  return f


def bench_scaling(sizes):
  rows = []
  x = np.ones((4, 8), np.float32)
  for n in sizes:
    f = _chain(n)
    spec = tf.TensorSpec([4, 8], tf.float32)
    nodes = len(f.get_concrete_function(spec).graph.as_graph_def().node)
    row = {"nodes": nodes}
    (fn, params), convert_s = _timed(lambda: tfprims.convert(f, spec))
    _, trace_s = _timed(lambda: jax.make_jaxpr(lambda x: fn(params, x)[0])(x))
    row["tfprims"] = {"convert_s": convert_s, "trace_s": trace_s}
    if tf2jax is not None:
      try:
        (g, gp), c2 = _timed(lambda: tf2jax.convert(f, spec))
        _, t2 = _timed(lambda: jax.make_jaxpr(lambda x: g(gp, x)[0])(x))
        row["tf2jax"] = {"convert_s": c2, "trace_s": t2}
      except Exception as e:
        row["tf2jax"] = {"error": f"{type(e).__name__}: {str(e)[:200]}"}
    rows.append(row)
    print(
      f"  scaling {nodes:>6} nodes: tfprims convert {convert_s:.2f}s trace {trace_s:.2f}s"
      + (
        f" | tf2jax convert {row['tf2jax'].get('convert_s', float('nan')):.2f}s "
        f"trace {row['tf2jax'].get('trace_s', float('nan')):.2f}s"
        if "tf2jax" in row
        else ""
      ),
      flush=True,
    )
  fits = {}
  for who in ("tfprims", "tf2jax"):
    pts = [
      (r["nodes"], r[who]["convert_s"] + r[who]["trace_s"])
      for r in rows
      if who in r and "convert_s" in r[who]
    ]
    if len(pts) >= 2:
      n, t = np.log([p[0] for p in pts]), np.log([p[1] for p in pts])
      fits[who] = float(np.polyfit(n, t, 1)[0])
  return {"rows": rows, "exponent": fits}


# --- reporting ---------------------------------------------------------------------


def machine() -> dict:
  device = jax.devices()[0]
  return {
    "platform": platform.platform(),
    "python": platform.python_version(),
    "cpus": os.cpu_count(),
    "processor": platform.processor() or platform.machine(),
    "device": f"{device.platform}: {device.device_kind}",
    "jax": jax.__version__,
    "tensorflow": tf.__version__,
    "tf2jax": getattr(tf2jax, "__version__", None),
    "load_average_1min": os.getloadavg()[0],
  }


def write_chart(rows, path):
  try:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
  except ImportError:
    print("matplotlib not installed: no chart", file=sys.stderr)
    return False
  keys = [
    "run/tf",
    "run/tf_xla",
    "run/tf2jax",
    "convert+trace/tf2jax",
    "lower/tf2jax",
    "compile/tf2jax",
    "first_result/tf2jax",
    "eager/tf2jax",
  ]
  labels = [f"{r['model']}@{r['batch']}" for r in rows]
  fig, ax = plt.subplots(figsize=(max(8, len(rows) * 1.2), 5))
  width = 0.8 / len(keys)
  for i, k in enumerate(keys):
    vals = [r["ratios"].get(k, np.nan) for r in rows]
    ax.bar(np.arange(len(rows)) + i * width, vals, width, label=k)
  ax.axhline(1.0, color="black", linewidth=0.8)
  ax.set_xticks(np.arange(len(rows)) + 0.4)
  ax.set_xticklabels(labels, rotation=30, ha="right")
  ax.set_ylabel("tfprims / other (lower is better)")
  ax.set_yscale("log")
  ax.legend(fontsize=8)
  fig.tight_layout()
  fig.savefig(path, dpi=100)
  return True


# The realistic suite's models that benchmarks/cold_start.py also runs (batch 1).
_COLD_START_MODELS = {
  "mobilenet_v2_224": "mobilenet_v2",
  "efficientnet_b0_224": "efficientnet_b0",
  "bert_encoder": "bert",
}


def _cold_start() -> dict:
  """benchmarks/results/cold_start.json's medians by model (empty when it was not run)."""
  path = RESULTS / "cold_start.json"
  if not path.exists():
    return {}
  return {
    name: {way: r["median"]["to_first_result_s"] for way, r in ways.items()}
    for name, ways in json.loads(path.read_text())["results"].items()
  }


def write_markdown(result, path, chart="ratios.png", notes=True):
  m = result["machine"]
  cold = _cold_start()
  lines = [
    "# Performance",
    "",
    "Generated by `python -m benchmarks` (benchmarks/run.py); numbers are from one run",
    f"on {m.get('device', 'cpu')}, {m['cpus']} CPUs ({m['processor']}, {m['platform']}), "
    f"jax {m['jax']}, "
    f"TensorFlow {m['tensorflow']}, tf2jax {m['tf2jax']}; 1-minute load average "
    f"{m.get('load_average_1min', float('nan')):.1f} at the start, "
    f"{m.get('load_average_1min_end', float('nan')):.1f} at the end.",
    "",
    "Times in ms (run, eager) or s (first result, convert, trace, lower, compile). "
    "First result: convert + trace + lower + compile + first run, from JAX's caches "
    "cleared (TF: a new tf.function's first call). The JAX contenders' first result and "
    "parts are the lower of two rounds run in opposite orders; run times are medians of "
    "shuffled rounds. Ratios < 1 mean tfprims is faster. Cold start/TF (batch 1, from "
    "`python -m benchmarks.cold_start`, fresh processes): the exported artifact's process "
    "start to first result with a warm compilation cache, against TF's SavedModel's.",
    "",
    "| model | batch | nodes | first result s | convert s | trace s | lower s | compile s "
    "| run ms | eager ms | TF ms | TF-XLA ms | tf2jax run ms | run/TF | run/TF-XLA "
    "| run/tf2jax | conv+trace/tf2jax | lower/tf2jax | compile/tf2jax "
    "| first result/tf2jax | first result/TF | cold start/TF | eager/tf2jax |",
    "|" + "---|" * 24,
  ]
  for r in result["models"]:
    o, t2, rat = r["tfprims"], r.get("tf2jax", {}), r["ratios"]
    f = lambda v, s=1.0, d=2: "–" if v is None else f"{v * s:.{d}f}"
    c = cold.get(_COLD_START_MODELS.get(r["model"])) if r["batch"] == 1 else None
    cold_ratio = c["tfprims_warm_cache"] / c["tf_saved_model"] if c else None
    lines.append(
      f"| {r['model']} | {r['batch']} | {r['graph_nodes']} | {f(o.get('first_result_s'))} | "
      f"{f(o['convert_s'])} | {f(o['trace_s'])} | {f(o.get('lower_s'))} | "
      f"{f(o['compile_s'])} | {f(o['run_s'], 1e3)} | {f(o['eager_s'], 1e3)} | "
      f"{f(r['tf']['run_s'], 1e3)} | {f(r['tf_xla']['run_s'], 1e3)} | "
      f"{f(t2.get('run_s'), 1e3) if 'run_s' in t2 else ('error' if t2 else '–')} | "
      f"{f(rat.get('run/tf'))} | {f(rat.get('run/tf_xla'))} | {f(rat.get('run/tf2jax'))} | "
      f"{f(rat.get('convert+trace/tf2jax'))} | {f(rat.get('lower/tf2jax'))} | "
      f"{f(rat.get('compile/tf2jax'))} | {f(rat.get('first_result/tf2jax'))} | "
      f"{f(rat.get('first_result/tf'))} | {f(cold_ratio)} | {f(rat.get('eager/tf2jax'))} |"
    )
  apps = [r["ratios"]["run/tf_xla"] for r in result["models"] if r["model"] in KERAS_APPS]
  if apps:
    lines += ["", f"Median run/TF-XLA over the Keras applications: {statistics.median(apps):.2f}."]
  errors = [
    f"- {r['model']}@{r['batch']}: tf2jax {r['tf2jax']['error']}"
    for r in result["models"]
    if "error" in r.get("tf2jax", {})
  ]
  if errors:
    lines += ["", "tf2jax failures:"] + errors
  sc = result.get("scaling")
  if sc:
    lines += [
      "",
      "## Scaling (synthetic chains)",
      "",
      "| nodes | tfprims convert s | tfprims trace s | tf2jax convert s | tf2jax trace s |",
      "|---|---|---|---|---|",
    ]
    for r in sc["rows"]:
      t2 = r.get("tf2jax", {})
      lines.append(
        f"| {r['nodes']} | {r['tfprims']['convert_s']:.2f} | "
        f"{r['tfprims']['trace_s']:.2f} | {t2.get('convert_s', float('nan')):.2f} | "
        f"{t2.get('trace_s', float('nan')):.2f} |"
      )
    lines += [
      "",
      "Fitted exponent of (convert + trace) time vs nodes: "
      + ", ".join(f"{k} {v:.2f}" for k, v in sc["exponent"].items())
      + " (1.0 = linear).",
    ]
  lines += [
    "",
    "Peak Python memory during conversion / weight bytes: "
    + ", ".join(
      f"{r['model']}@{r['batch']} {r['convert_peak/weights']:.2f}" for r in result["models"]
    ),
    "",
  ]
  if chart:  # None when the run drew none (no matplotlib): no stale chart from an older run
    lines += [f"![ratios](../benchmarks/results/{chart})", ""]
  notes_file = ROOT / "NOTES.md"
  if notes and notes_file.exists():
    lines += [notes_file.read_text()]
  path.write_text("\n".join(lines))


def main(argv=None):
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument(
    "--suite",
    choices=sorted(SUITES),
    default="small",
    help="small: the default models at small sizes (batch 1 and 32); "
    "realistic: 224x224 applications, BERT-style encoder, LSTM "
    "(batch 1 and 8)",
  )
  parser.add_argument("--models", nargs="*", default=None)
  parser.add_argument("--batches", nargs="*", type=int, default=None)
  parser.add_argument("--repeats", type=int, default=20)
  parser.add_argument("--scaling", nargs="*", type=int, default=[1000, 5000, 20000, 50000])
  parser.add_argument("--no-scaling", action="store_true")
  parser.add_argument("--quick", action="store_true", help="mlp only, batch 1, small scaling")
  parser.add_argument("--out", type=Path, default=RESULTS)
  parser.add_argument("--no-docs", action="store_true", help="don't rewrite docs/performance.md")
  parser.add_argument(
    "--device",
    choices=("cpu", "gpu"),
    default="cpu",
    help="gpu: JAX and TF on the GPU (run with JAX_PLATFORMS=cuda); results "
    "in <suite>-gpu.json and docs/performance-gpu.md",
  )
  args = parser.parse_args(argv)
  if args.device == "gpu":
    check_gpu()
  if args.models is None:
    args.models = SUITES[args.suite]
  if args.batches is None:
    args.batches = [1, 8] if args.suite == "realistic" else [1, 32]
  if args.quick:
    args.models, args.batches, args.scaling, args.repeats = ["mlp"], [1], [200, 400], 5
  if tf2jax is None:
    print("note: tf2jax is not installed; its columns are skipped (pip install tf2jax)")
  result = {"machine": machine(), "models": []}
  warm_up()
  for name in args.models:
    for batch in args.batches:
      print(f"{name} batch {batch} ...", flush=True)
      try:
        row = bench_model(name, batch, args.repeats)
      except Exception as e:
        print(f"  failed: {type(e).__name__}: {e}", flush=True)
        continue
      result["models"].append(row)
      print("  " + ", ".join(f"{k} {v:.2f}" for k, v in row["ratios"].items()), flush=True)
  realistic = args.suite == "realistic" and not args.quick
  if not args.no_scaling and not realistic:
    result["scaling"] = bench_scaling(args.scaling)
  args.out.mkdir(parents=True, exist_ok=True)
  result["machine"]["load_average_1min_end"] = os.getloadavg()[0]
  stem = "realistic" if realistic else "latest"
  if args.device == "gpu":
    stem = f"{args.suite}-gpu"
  (args.out / f"{stem}.json").write_text(json.dumps(result, indent=1))
  chart = f"{stem}_ratios.png" if realistic or args.device == "gpu" else "ratios.png"
  drawn = write_chart(result["models"], args.out / chart)
  if not args.no_docs:
    doc = "performance-realistic.md" if realistic else "performance.md"
    if args.device == "gpu":
      doc = "performance-gpu.md"
    write_markdown(
      result, ROOT.parent / "docs" / doc, chart=chart if drawn else None, notes=not realistic
    )
  print(f"wrote {args.out / (stem + '.json')}")
  return result


if __name__ == "__main__":
  main()
