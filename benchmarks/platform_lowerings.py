"""Per-platform lowerings: each fast lowering vs the default one, op by op and on MobileNetV2.

    python -m benchmarks.platform_lowerings              # ops at MobileNet layer shapes
    python -m benchmarks.platform_lowerings --model 8    # + MobileNetV2 224, batch 8
    python -m benchmarks.platform_lowerings --only none --model 2 --train   # its gradient

Each case is compiled twice (``fast_lowerings`` on and off), then the two programs run
alternately (``--repeats`` times each, after one warm-up call); the table gives the
medians and their ratio. docs/performance.md ("Per-platform lowerings") records a run.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
os.environ.setdefault("JAX_PLATFORMS", "cpu")

import jax
import numpy as np

import tfprims
from tfprims.core import tfops


def _attrs(stride=1, padding="SAME", fmt="NHWC", dilation=1):
  spatial = lambda v: (1, 1, v, v) if fmt == "NCHW" else (1, v, v, 1)
  return dict(
    strides=spatial(stride),
    padding=padding,
    explicit_paddings=(),
    data_format=fmt,
    dilations=spatial(dilation),
  )


def _dw_cases():
  rng = np.random.default_rng(0)
  f = lambda *s: rng.normal(size=s).astype(np.float32)
  cases = []
  for n, h, c, s, k in [
    (8, 112, 32, 1, 3),
    (8, 112, 96, 2, 3),
    (8, 56, 144, 1, 3),
    (8, 28, 192, 1, 3),
    (8, 14, 576, 1, 3),
    (8, 7, 960, 1, 3),
    (8, 56, 96, 1, 5),
    (8, 56, 96, 1, 7),
    (8, 28, 96, 1, 9),
  ]:
    a = _attrs(s)
    x, w = f(n, h, h, c), f(k, k, c, 1)
    y = np.asarray(tfops.DepthwiseConv2dNative(x, w, **a))
    name = f"{n}x{h}x{h}x{c} {k}x{k} s{s}"
    cases.append(
      (f"Depthwise {name}", lambda x, w, a=a: tfops.DepthwiseConv2dNative(x, w, **a), (x, w))
    )
    cases.append(
      (
        f"DepthwiseBackpropInput {name}",
        lambda w, g, a=a, sh=x.shape: tfops.DepthwiseConv2dNativeBackpropInput(
          w, g, input_sizes=sh, **a
        ),
        (w, f(*y.shape)),
      )
    )
    cases.append(
      (
        f"DepthwiseBackpropFilter {name}",
        lambda x, g, a=a, sh=w.shape: tfops.DepthwiseConv2dNativeBackpropFilter(
          x, g, filter_sizes=sh, **a
        ),
        (x, f(*y.shape)),
      )
    )
  a = _attrs(1, fmt="NCHW")
  cases.append(
    (
      "Depthwise NCHW 8x32x112x112 3x3 s1",
      lambda x, w, a=a: tfops.DepthwiseConv2dNative(x, w, **a),
      (f(8, 32, 112, 112), f(3, 3, 32, 1)),
    )
  )
  a = _attrs(1)
  cases.append(
    (
      "Depthwise 8x56x56x32 3x3 s1 multiplier 2",
      lambda x, w, a=a: tfops.DepthwiseConv2dNative(x, w, **a),
      (f(8, 56, 56, 32), f(3, 3, 32, 2)),
    )
  )
  return cases


def _pointwise_cases():
  rng = np.random.default_rng(1)
  f = lambda *s: rng.normal(size=s).astype(np.float32)
  cases = []
  for n, h, c, o, s in [
    (8, 56, 256, 64, 1),
    (8, 112, 32, 16, 1),
    (8, 112, 16, 96, 1),
    (8, 14, 384, 64, 1),
    (8, 7, 320, 1280, 1),
    (8, 56, 256, 512, 2),
  ]:
    a = _attrs(s)
    cases.append(
      (
        f"Conv2D 1x1 {n}x{h}x{h}x{c}->{o} s{s}",
        lambda x, w, a=a: tfops.Conv2D(x, w, **a),
        (f(n, h, h, c), f(1, 1, c, o)),
      )
    )
  a = _attrs(1, fmt="NCHW")
  cases.append(
    (
      "Conv2D 1x1 NCHW 8x256x56x56->64",
      lambda x, w, a=a: tfops.Conv2D(x, w, **a),
      (f(8, 256, 56, 56), f(1, 1, 256, 64)),
    )
  )
  for n in (8, 1):  # the RGB stem of MobileNetV2 and EfficientNet (tap sums at batch 8)
    a = _attrs(2)
    cases.append(
      (
        f"Conv2D 3x3 {n}x224x224x3->32 s2",
        lambda x, w, a=a: tfops.Conv2D(x, w, **a),
        (f(n, 224, 224, 3), f(3, 3, 3, 32)),
      )
    )
  a3 = dict(strides=(1,) * 5, padding="SAME", data_format="NDHWC", dilations=(1,) * 5)
  cases.append(
    (
      "Conv3D 1x1x1 4x16x28x28x128->64",
      lambda x, w: tfops.Conv3D(x, w, **a3),
      (f(4, 16, 28, 28, 128), f(1, 1, 1, 128, 64)),
    )
  )
  return cases


def _pool_cases():
  rng = np.random.default_rng(2)
  f = lambda *s: rng.normal(size=s).astype(np.float32)
  cases = []
  for op, n, h, c, k, s, pad in [
    ("MaxPool", 8, 112, 64, 3, 2, "SAME"),  # ResNet50's stem
    ("MaxPool", 1, 112, 64, 3, 2, "SAME"),
    ("MaxPool", 8, 147, 64, 3, 2, "VALID"),  # InceptionV3's
    ("AvgPool", 8, 35, 192, 3, 1, "SAME"),
    ("AvgPool", 8, 17, 768, 3, 1, "SAME"),
    ("MaxPool", 8, 56, 256, 2, 2, "VALID"),
  ]:
    a = dict(ksize=(1, k, k, 1), strides=(1, s, s, 1), padding=pad, data_format="NHWC")
    cases.append(
      (
        f"{op} {n}x{h}x{h}x{c} {k}x{k} s{s} {pad}",
        lambda x, a=a, op=op: getattr(tfops, op)(x, **a),
        (f(n, h, h, c),),
      )
    )
  a3 = dict(ksize=(1, 2, 2, 2, 1), strides=(1, 2, 2, 2, 1), padding="VALID", data_format="NDHWC")
  cases.append(
    (
      "MaxPool3D 4x16x28x28x64 2x2x2 s2",
      lambda x: tfops.MaxPool3D(x, **a3),
      (f(4, 16, 28, 28, 64),),
    )
  )
  return cases


def _compiled(fn, args, fast, times=None):
  with tfprims.override_config("fast_lowerings", fast):
    t = time.perf_counter()
    lowered = jax.jit(fn).lower(*args)
    t1 = time.perf_counter()
    compiled = lowered.compile()
    if times is not None:
      times[fast] = (t1 - t, time.perf_counter() - t1)
    return compiled


def _time(compiled, args, repeats):
  times = []
  for _ in range(repeats):
    t = time.perf_counter()
    jax.block_until_ready(compiled(*args))
    times.append(time.perf_counter() - t)
  return times


def compare(name, fn, args, repeats, times=None):
  """(name, fast ms, default ms, default / fast) with the two runs interleaved;
  ``times`` gets {fast: (trace + lower s, compile s)}."""
  args = jax.device_put(args)  # time the programs, not the copies of numpy inputs
  fast, slow = _compiled(fn, args, True, times), _compiled(fn, args, False, times)
  a, b = np.asarray(fast(*args)), np.asarray(slow(*args))
  assert np.linalg.norm(a - b) <= 1e-4 * np.linalg.norm(b) + 1e-3, name
  tf_, ts = [], []
  for _ in range(repeats):
    tf_ += _time(fast, args, 1)
    ts += _time(slow, args, 1)
  f, s = statistics.median(tf_) * 1e3, statistics.median(ts) * 1e3
  return name, f, s, s / f


def mobilenet(batch, repeats, train=False):
  import keras
  import tensorflow as tf

  keras.utils.set_random_seed(0)
  model = keras.applications.MobileNetV2(weights=None, input_shape=(224, 224, 3))
  fn, params = tfprims.convert(
    tf.function(lambda x: model(x)), tf.TensorSpec((None, 224, 224, 3), tf.float32)
  )
  x = np.random.default_rng(0).normal(size=(batch, 224, 224, 3)).astype(np.float32)
  times = {}
  if train:  # the gradient of a loss in the params: every conv's backprops
    from jax.flatten_util import ravel_pytree

    grad = jax.grad(lambda p, x: (fn(p, x)[0] ** 2).sum())
    out = compare(
      f"MobileNetV2 224 batch {batch} grad",
      lambda p, x: ravel_pytree(grad(p, x))[0],
      (params, x),
      repeats,
      times,
    )
    print(
      f"trace+lower / compile s: fast {times[True][0]:.2f} / {times[True][1]:.2f}, "
      f"default {times[False][0]:.2f} / {times[False][1]:.2f}"
    )
    return out, float("nan")
  out = compare(
    f"MobileNetV2 224 batch {batch}", lambda p, x: fn(p, x)[0], (params, x), repeats, times
  )
  print(
    f"trace+lower / compile s: fast {times[True][0]:.2f} / {times[True][1]:.2f}, "
    f"default {times[False][0]:.2f} / {times[False][1]:.2f}"
  )
  tf_fn = tf.function(lambda x: model(x))
  tf_fn(x)
  ts = []
  for _ in range(repeats):
    t = time.perf_counter()
    tf_fn(x).numpy()
    ts.append(time.perf_counter() - t)
  return out, statistics.median(ts) * 1e3


def main(argv=None):
  ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  ap.add_argument("--repeats", type=int, default=5)
  ap.add_argument(
    "--model",
    type=int,
    nargs="*",
    default=None,
    help="MobileNetV2 batch sizes (none: skip the model)",
  )
  ap.add_argument("--train", action="store_true", help="time the model's gradient instead")
  ap.add_argument("--only", default="", help="substring of the case names to run")
  args = ap.parse_args(argv)
  print(f"load average at start: {os.getloadavg()[0]:.1f}")
  print("| case | fast ms | default ms | default/fast |\n|---|---|---|---|")
  for name, fn, xs in _dw_cases() + _pointwise_cases() + _pool_cases():
    if args.only in name:
      print("| %s | %.2f | %.2f | %.1f |" % compare(name, fn, xs, args.repeats), flush=True)
  for b in args.model or ():
    (name, f, s, r), tf_ms = mobilenet(b, args.repeats, args.train)
    print(f"| {name} | {f:.1f} | {s:.1f} | {r:.1f} | (TensorFlow {tf_ms:.1f} ms)", flush=True)
  print(f"load average at end: {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
  main()
