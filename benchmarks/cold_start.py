"""From process start to first result: a TF SavedModel (``tf.saved_model.load`` and its
first call) against the tfprims artifact of the same model (``tfprims.load_exported``
and its first call), without and with a warm compilation cache (tfprims.cache).

    python -m benchmarks.cold_start                 # MobileNetV2, EfficientNetB0, BERT
    python -m benchmarks.cold_start --repeats 5 --models bert

Each measurement is a fresh interpreter: the wall time from just before the process is
started to the moment its first result is on the host (the child prints the time; its
exit, TensorFlow's teardown included, is not counted). Per model and way: the median of
``--repeats`` runs, and the child's own split (imports, load, first call). "cold" runs
each get an empty cache directory (TFPRIMS_CACHE_DIR); "warm" runs share one that a run
not counted filled. Models: MobileNetV2 and EfficientNetB0 (keras.applications,
weights=None, 224x224, batch 1) and a BERT-shaped encoder built in Keras (4 layers,
width 256, 4 heads, sequence 128, batch 1). Writes benchmarks/results/cold_start.json.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time

HERE = os.path.dirname(os.path.abspath(__file__))
RESULTS = os.path.join(HERE, "results", "cold_start.json")

# Builds the models, writes each as a SavedModel and as a tfprims artifact (run once, in
# its own process: the measured processes must not share its imports).
_BUILD = textwrap.dedent("""
    import os, sys
    import numpy as np
    import keras
    import tensorflow as tf
    import tfprims

    root, names = sys.argv[1], sys.argv[2].split(",")

    def mobilenet():
      keras.utils.set_random_seed(0)
      model = keras.applications.MobileNetV2(input_shape=(224, 224, 3), weights=None)
      return model, tf.TensorSpec([None, 224, 224, 3], tf.float32, name="images")

    def efficientnet():
      keras.utils.set_random_seed(0)
      model = keras.applications.EfficientNetB0(input_shape=(224, 224, 3), weights=None)
      return model, tf.TensorSpec([None, 224, 224, 3], tf.float32, name="images")

    class AddPositions(keras.layers.Layer):
      def build(self, shape):
        self.positions = self.add_weight(shape=tuple(shape[1:]), initializer="normal")
      def call(self, x):
        return x + self.positions

    def bert(layers=4, width=256, heads=4, seq=128, vocab=8000):
      keras.utils.set_random_seed(0)
      ids = keras.Input((seq,), dtype="int32")
      x = AddPositions()(keras.layers.Embedding(vocab, width)(ids))
      x = keras.layers.LayerNormalization()(x)
      for _ in range(layers):
        a = keras.layers.MultiHeadAttention(heads, width // heads)(x, x)
        x = keras.layers.LayerNormalization()(x + a)
        h = keras.layers.Dense(4 * width, activation="gelu")(x)
        x = keras.layers.LayerNormalization()(x + keras.layers.Dense(width)(h))
      pooled = keras.layers.Dense(width, activation="tanh")(x[:, 0])
      model = keras.Model(ids, keras.layers.Dense(2)(pooled))
      return model, tf.TensorSpec([None, seq], tf.int32, name="ids")

    for name in names:
      model, spec = {"mobilenet_v2": mobilenet, "efficientnet_b0": efficientnet,
                     "bert": bert}[name]()
      module = tf.Module()
      module.model = model
      module.serve = tf.function(lambda x: {"out": module.model(x, training=False)},
                                 input_signature=[spec])
      sm = os.path.join(root, name, "saved_model")
      tf.saved_model.save(module, sm, signatures={"serving_default": module.serve})
      fn, params = tfprims.load_saved_model(sm)
      with tfprims.override_config("compilation_cache", None):
        tfprims.deploy.export(fn, params, os.path.join(root, name, "artifact"),
                              differentiable=False)
      shape = [1, *spec.shape[1:]]
      x = (np.random.default_rng(0).integers(0, 8000, shape).astype(np.int32)
           if spec.dtype == tf.int32 else
           np.random.default_rng(0).standard_normal(shape).astype(np.float32))
      np.save(os.path.join(root, name, "x.npy"), x)
      print(name, "built", flush=True)
""")

# The measured processes: print the times (time.time(), comparable with the parent's).
_TF = textwrap.dedent("""
    import sys, time, json
    t_start = time.time()
    import numpy as np
    import tensorflow as tf
    t_import = time.time()
    served = tf.saved_model.load(sys.argv[1] + "/saved_model").signatures["serving_default"]
    t_load = time.time()
    x = np.load(sys.argv[1] + "/x.npy")
    name = list(served.structured_input_signature[1])[0]
    y = served(**{name: tf.constant(x)})["out"].numpy()
    t_first = time.time()
    print(json.dumps({"start": t_start, "import": t_import, "load": t_load, "first": t_first,
                      "checksum": float(np.abs(y).sum())}), flush=True)
""")

_TFPRIMS = textwrap.dedent("""
    import sys, time, json
    t_start = time.time()
    import numpy as np
    import jax
    import tfprims
    t_import = time.time()
    model = tfprims.load_exported(sys.argv[1] + "/artifact")
    t_load = time.time()
    x = np.load(sys.argv[1] + "/x.npy")
    y = np.asarray(model(x)["out"])
    t_first = time.time()
    assert "tensorflow" not in sys.modules
    print(json.dumps({"start": t_start, "import": t_import, "load": t_load, "first": t_first,
                      "checksum": float(np.abs(y).sum())}), flush=True)
""")


def _env(cache_dir=None):
  env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3", JAX_PLATFORMS="cpu", CUDA_VISIBLE_DEVICES="")
  for k in ("JAX_COMPILATION_CACHE_DIR", "TFPRIMS_CACHE_DIR"):
    env.pop(k, None)
  if cache_dir is not None:
    env["TFPRIMS_CACHE_DIR"] = cache_dir
  return env


def _run(script, model_dir, env) -> dict:
  t0 = time.time()
  proc = subprocess.run(
    [sys.executable, "-c", script, model_dir], capture_output=True, text=True, env=env, timeout=600
  )
  if proc.returncode != 0:
    raise RuntimeError(proc.stderr[-3000:])
  times = json.loads(proc.stdout.strip().splitlines()[-1])
  return {
    "to_first_result_s": times["first"] - t0,
    "interpreter_s": times["start"] - t0,
    "imports_s": times["import"] - times["start"],
    "load_s": times["load"] - times["import"],
    "first_call_s": times["first"] - times["load"],
    "checksum": times["checksum"],
  }


def _summary(runs) -> dict:
  keys = ("to_first_result_s", "interpreter_s", "imports_s", "load_s", "first_call_s")
  return {
    "median": {k: round(statistics.median(r[k] for r in runs), 3) for k in keys},
    "runs_to_first_result_s": [round(r["to_first_result_s"], 3) for r in runs],
    "output_abs_sum": runs[0]["checksum"],
  }  # the same model: TF's and tfprims' agree


def main(argv=None):
  parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
  parser.add_argument(
    "--models",
    default="mobilenet_v2,efficientnet_b0,bert",
    help="comma-separated: mobilenet_v2, efficientnet_b0, bert (default: %(default)s)",
  )
  parser.add_argument("--repeats", type=int, default=3, help="runs per way (median)")
  parser.add_argument("--out", default=RESULTS)
  args = parser.parse_args(argv)
  names = [n.strip() for n in args.models.split(",") if n.strip()]

  load_start = os.getloadavg()[0]
  with tempfile.TemporaryDirectory(prefix="tfprims-cold-start-") as root:
    t = time.time()
    build = subprocess.run(
      [sys.executable, "-c", _BUILD, root, ",".join(names)],
      capture_output=True,
      text=True,
      env=_env(),
      timeout=1200,
    )
    if build.returncode != 0:
      raise SystemExit(build.stderr[-3000:])
    print(f"built {', '.join(names)} in {time.time() - t:.0f} s", flush=True)
    results = {}
    for name in names:
      model_dir = os.path.join(root, name)
      warm = os.path.join(root, f"{name}-warm-cache")
      _run(_TFPRIMS, model_dir, _env(warm))  # fills the warm cache (not counted)
      ways = {"tf_saved_model": [], "tfprims_cold_cache": [], "tfprims_warm_cache": []}
      for i in range(args.repeats):  # interleaved: load on the machine hits all alike
        ways["tf_saved_model"].append(_run(_TF, model_dir, _env()))
        ways["tfprims_cold_cache"].append(
          _run(_TFPRIMS, model_dir, _env(os.path.join(root, f"{name}-cold-{i}")))
        )
        ways["tfprims_warm_cache"].append(_run(_TFPRIMS, model_dir, _env(warm)))
      results[name] = {way: _summary(runs) for way, runs in ways.items()}
      for way, s in results[name].items():
        m = s["median"]
        print(
          f"{name:13s} {way:19s} {m['to_first_result_s']:6.2f} s  (imports "
          f"{m['imports_s']:.2f}, load {m['load_s']:.2f}, first call "
          f"{m['first_call_s']:.2f})",
          flush=True,
        )

  import jax

  out = {
    "benchmark": "cold_start",
    "repeats": args.repeats,
    "machine": {
      "platform": platform.platform(),
      "python": platform.python_version(),
      "cpus": os.cpu_count(),
      "jax": jax.__version__,
      "load_average_1min_start": load_start,
      "load_average_1min_end": os.getloadavg()[0],
    },
    "results": results,
  }
  os.makedirs(os.path.dirname(args.out), exist_ok=True)
  with open(args.out, "w") as f:
    json.dump(out, f, indent=1)
  print(f"wrote {args.out}")


if __name__ == "__main__":
  main()
