"""3-D pooling, max-pool-with-argmax, fractional pooling: TF kernels' rules and real programs.

* The 3-D max-pool gradient kernels' own rules (ties, NaN, ±inf, orig_output read as
  given) against tf.raw_ops.
* A Keras Conv3D + MaxPool3D + AveragePooling3D video classifier converted and compared
  with TF: outputs, jax.grad vs tf.GradientTape, jax.vmap vs per-example calls, and
  TF-named grad/vmap jaxprs.
"""

import functools

import jax
import jax.numpy as jnp
import keras
import numpy as np
import pytest
import tensorflow as tf

import tfprims
from helpers import jaxpr_primitives, non_tf_primitives
from tfprims.testing.tf_kernels import onednn

BF16 = tf.bfloat16.as_numpy_dtype


def _ours(op, *args, **params):
  return np.asarray(tfprims.get_op(op)(*[jnp.asarray(a) for a in args], **params))


# --------------------------------------------------------------------------
# 3-D max pooling: the gradient kernels' rules
# --------------------------------------------------------------------------

_WINDOW = dict(ksize=[1, 3, 1, 1, 1], strides=[1, 1, 1, 1, 1], padding="VALID", data_format="NDHWC")


@pytest.mark.parametrize("dtype", [np.float32, BF16])
@pytest.mark.parametrize(
  "window,out",
  [
    ([2, 1, 2], 2),
    ([np.nan, 1, 1], 1),
    ([-np.inf] * 3, -np.inf),
    ([np.inf, np.inf, 1], np.inf),
    ([1, 1 + 5e-6, 0], 1 + 5e-6),
    ([5, 5, 5], 4),
    ([np.nan] * 3, np.nan),
  ],
)
def test_max_pool3d_grad_rules_match_tf(dtype, window, out):
  """MaxPool3DGrad: every element within 1e-5 of the given orig_output gets the
  gradient (so ties all do, ±inf and NaN never); MaxPool3DGradGrad reads the first
  element exactly equal to it."""
  x = np.array(window).reshape(1, 3, 1, 1, 1).astype(dtype)
  y = np.array(out).reshape(1, 1, 1, 1, 1).astype(dtype)
  g = np.array(3.0).reshape(y.shape).astype(dtype)
  gx = np.array([10.0, 20.0, 30.0]).reshape(x.shape).astype(dtype)
  expected = tf.raw_ops.MaxPool3DGrad(orig_input=x, orig_output=y, grad=g, **_WINDOW)
  np.testing.assert_array_equal(_ours("MaxPool3DGrad", x, y, g, **_WINDOW), expected)
  expected = tf.raw_ops.MaxPool3DGradGrad(orig_input=x, orig_output=y, grad=gx, **_WINDOW)
  np.testing.assert_array_equal(_ours("MaxPool3DGradGrad", x, y, gx, **_WINDOW), expected)


def test_max_pool3d_grads_on_tied_overlapping_same_windows():
  rng = np.random.default_rng(0)
  # tfprims follows oneDNN's MaxPool3D; Eigen's (float32 with TF's oneDNN kernels off,
  # bfloat16 on CPUs without AVX512-BF16) keeps the last tie and lets NaN through.
  dtypes = [d for d in (np.float32, BF16) if onednn(np.dtype(d).name)]
  if not dtypes:
    pytest.skip("TF runs Eigen's MaxPool3D here")
  for dtype in dtypes:
    x = rng.choice([0.0, 1.0, 2.0, np.nan, -np.inf], size=(2, 4, 5, 3, 2)).astype(dtype)
    kw = dict(ksize=[1, 3, 2, 3, 1], strides=[1, 2, 1, 2, 1], padding="SAME")
    y = tf.raw_ops.MaxPool3D(input=x, **kw).numpy()
    np.testing.assert_array_equal(_ours("MaxPool3D", x, **kw), y)
    g = rng.normal(size=y.shape).astype(dtype)
    gx = rng.normal(size=x.shape).astype(dtype)
    np.testing.assert_allclose(
      _ours("MaxPool3DGrad", x, y, g, **kw).astype(np.float32),
      tf.raw_ops.MaxPool3DGrad(orig_input=x, orig_output=y, grad=g, **kw)
      .numpy()
      .astype(np.float32),
      rtol=2e-2,
      atol=2e-2,
    )
    np.testing.assert_array_equal(
      _ours("MaxPool3DGradGrad", x, y, gx, **kw),
      tf.raw_ops.MaxPool3DGradGrad(orig_input=x, orig_output=y, grad=gx, **kw),
    )


# --------------------------------------------------------------------------
# A Keras video classifier: Conv3D + MaxPool3D + AveragePooling3D
# --------------------------------------------------------------------------

RTOL, ATOL = 1e-4, 1e-5
SHAPE = (4, 8, 8, 3)  # frames, height, width, channels


@functools.lru_cache(maxsize=None)
def _video_model():
  keras.utils.set_random_seed(0)
  model = keras.Sequential(
    [
      keras.Input(SHAPE),
      keras.layers.Conv3D(4, 3, padding="same", activation="relu"),
      keras.layers.MaxPooling3D((1, 2, 2)),
      keras.layers.Conv3D(6, (2, 3, 3), padding="valid", activation="relu"),
      keras.layers.AveragePooling3D((1, 2, 2), padding="same"),
      keras.layers.MaxPooling3D(2, strides=1, padding="same"),
      keras.layers.GlobalAveragePooling3D(),
      keras.layers.Dense(5, activation="softmax"),
    ]
  )
  tf_fn = tf.function(lambda x: model(x))
  fn, params = tfprims.convert(tf_fn, tf.TensorSpec((None,) + SHAPE, tf.float32))
  return model, tf_fn, fn, params


def _videos(batch=3, seed=0):
  return np.random.default_rng(seed).normal(size=(batch,) + SHAPE).astype(np.float32)


def test_video_classifier_outputs_match_tf():
  _, tf_fn, fn, params = _video_model()
  x = _videos()
  jaxpr = jax.make_jaxpr(lambda p, x: fn(p, x)[0])(params, x)
  assert non_tf_primitives(jaxpr) == set()
  assert {"tf.MaxPool3D", "tf.AvgPool3D", "tf.Conv3D"} <= jaxpr_primitives(jaxpr)
  ref = tf_fn(x).numpy()
  np.testing.assert_allclose(fn(params, x)[0], ref, rtol=RTOL, atol=ATOL)
  np.testing.assert_allclose(
    jax.jit(lambda p, x: fn(p, x)[0])(params, x), ref, rtol=RTOL, atol=ATOL
  )


def test_video_classifier_grad_matches_gradient_tape():
  _, tf_fn, fn, params = _video_model()
  x = _videos()
  weights = np.random.default_rng(1).normal(size=(3, 5)).astype(np.float32)

  def loss(p, x):
    return jnp.sum(fn(p, x)[0] * weights)

  jaxpr = jax.make_jaxpr(jax.grad(loss, argnums=(0, 1)))(params, x)
  names = jaxpr_primitives(jaxpr)
  assert {
    "tf.MaxPool3DGrad",
    "tf.AvgPool3DGrad",
    "tf.Conv3DBackpropInputV2",
    "tf.Conv3DBackpropFilterV2",
  } <= names
  # mul, broadcast_in_dim and reduce_sum come from the jnp loss.
  allowed = ("add_any", "mul", "pjit", "broadcast_in_dim", "reduce_sum")
  assert non_tf_primitives(jaxpr, allowed=allowed) == set()
  g_params, g_x = jax.grad(loss, argnums=(0, 1))(params, x)
  xt = tf.constant(x)
  with tf.GradientTape() as tape:
    tape.watch(xt)
    tf_loss = tf.reduce_sum(tf_fn(xt) * weights)
  variables = fn.tf_variables
  keys = sorted(variables)
  grads = tape.gradient(tf_loss, [xt] + [variables[k] for k in keys])
  np.testing.assert_allclose(g_x, grads[0], rtol=1e-3, atol=1e-6)
  for k, g in zip(keys, grads[1:]):
    np.testing.assert_allclose(g_params[k], g, rtol=1e-3, atol=1e-6, err_msg=k)


def test_video_classifier_vmap_matches_per_example_calls():
  _, tf_fn, fn, params = _video_model()
  xs = _videos(batch=3)[:, None]
  jaxpr = jax.make_jaxpr(jax.vmap(lambda x: fn(params, x)[0]))(xs)
  assert {"tf.MaxPool3D", "tf.AvgPool3D"} <= jaxpr_primitives(jaxpr)
  out = jax.vmap(lambda x: fn(params, x)[0])(xs)
  ref = np.stack([tf_fn(x).numpy() for x in xs])
  np.testing.assert_allclose(out, ref, rtol=RTOL, atol=ATOL)
  # Per-example gradients keep the TF-named pooling gradients.
  grad = jax.vmap(jax.grad(lambda x: jnp.sum(fn(params, x)[0] ** 2)))
  jaxpr = jax.make_jaxpr(grad)(xs)
  assert {"tf.MaxPool3DGrad", "tf.AvgPool3DGrad"} <= jaxpr_primitives(jaxpr)
  per_example = []
  for x in xs:
    xt = tf.constant(x)
    with tf.GradientTape() as tape:
      tape.watch(xt)
      y = tf.reduce_sum(tf_fn(xt) ** 2)
    per_example.append(tape.gradient(y, xt).numpy())
  np.testing.assert_allclose(grad(xs), np.stack(per_example), rtol=1e-3, atol=1e-7)


# --------------------------------------------------------------------------
# Max pooling with argmax
# --------------------------------------------------------------------------


@pytest.mark.parametrize("include_batch", [False, True])
def test_max_pool_with_argmax_program_grad_and_vmap(include_batch):
  """tf.nn.max_pool_with_argmax and its gradient (MaxPoolGradWithArgmax), converted."""

  @tf.function
  def f(x):
    y, argmax = tf.nn.max_pool_with_argmax(x, 3, 2, "SAME", include_batch_in_index=include_batch)
    return tf.nn.relu(y) * 2.0, argmax

  fn = tfprims.convert_functional(f, tf.TensorSpec([None, 5, 6, 2]))
  rng = np.random.default_rng(0)
  x = rng.choice([0.0, 1.0, 2.0, np.nan, -np.inf], size=(2, 5, 6, 2)).astype(np.float32)
  x[1] = rng.normal(size=(5, 6, 2))
  for got, want in zip(fn(x), f(x)):
    np.testing.assert_array_equal(got, want.numpy())
  w = rng.normal(size=(2, 3, 3, 2)).astype(np.float32)
  loss = lambda x: jnp.sum(fn(x)[0] * w)
  assert "tf.MaxPoolGradWithArgmax" in jaxpr_primitives(jax.make_jaxpr(jax.grad(loss))(x))
  xs = np.nan_to_num(x, neginf=-3.0)
  xt = tf.constant(xs)
  with tf.GradientTape() as tape:
    tape.watch(xt)
    tf_loss = tf.reduce_sum(f(xt)[0] * w)
  np.testing.assert_allclose(jax.grad(loss)(xs), tape.gradient(tf_loss, xt), rtol=1e-6)
  # vmap over examples (each a batch of one): indices stay relative to each member.
  ys, argmaxes = jax.vmap(fn)(xs[:, None])
  for i in range(2):
    want_y, want_a = f(xs[i : i + 1])
    np.testing.assert_array_equal(ys[i], want_y.numpy())
    np.testing.assert_array_equal(argmaxes[i], want_a.numpy())
  per_example = jax.vmap(jax.grad(lambda x: jnp.sum(fn(x)[0] * w[:1])))(xs[:, None])
  for i in range(2):
    xt = tf.constant(xs[i : i + 1])
    with tf.GradientTape() as tape:
      tape.watch(xt)
      tf_loss = tf.reduce_sum(f(xt)[0] * w[:1])
    np.testing.assert_allclose(per_example[i], tape.gradient(tf_loss, xt), rtol=1e-6)


@pytest.mark.parametrize("include_batch", [False, True])
def test_argmax_grad_ops_drop_out_of_range_indices(include_batch):
  """Out-of-range argmax values: TF's CPU kernel aborts the process; ours drops them
  (scatter) / reads 0 (gather) under jit, and raises on known values."""
  kw = dict(
    ksize=[1, 2, 2, 1], strides=[1, 2, 2, 1], padding="VALID", include_batch_in_index=include_batch
  )

  @tf.function
  def f(x, g, gx, argmax):
    return (
      tf.raw_ops.MaxPoolGradWithArgmax(input=x, grad=g, argmax=argmax, **kw),
      tf.raw_ops.MaxPoolGradGradWithArgmax(input=x, grad=gx, argmax=argmax, **kw),
    )

  fn = tfprims.convert_functional(
    f,
    tf.TensorSpec([2, 2, 4, 1]),
    tf.TensorSpec([2, 1, 2, 1]),
    tf.TensorSpec([2, 2, 4, 1]),
    tf.TensorSpec([2, 1, 2, 1], tf.int32),
  )
  x = np.arange(16, dtype=np.float32).reshape(2, 2, 4, 1)
  g = np.array([1.0, 2.0, 3.0, 4.0], np.float32).reshape(2, 1, 2, 1)
  gx = 10 * x
  good = tf.nn.max_pool_with_argmax(x, 2, 2, "VALID", include_batch_in_index=include_batch)[1]
  good = good.numpy()
  bad = good.copy()
  bad[0, 0, 1, 0], bad[1, 0, 0, 0] = -1, 16
  good32, bad32 = good.astype(np.int32), bad.astype(np.int32)
  expected_grad = tf.raw_ops.MaxPoolGradWithArgmax(
    input=x, grad=np.where(bad == good, g, 0).astype(np.float32), argmax=good, **kw
  )
  with tfprims.override_config("runtime_checks", False):
    with pytest.raises(tfprims.RuntimeCheckError, match="Invalid output gradient index"):
      fn(x, g, gx, bad32)
    got_grad, got_gg = jax.jit(fn)(x, g, gx, bad32)
  np.testing.assert_array_equal(got_grad, expected_grad.numpy())
  # MaxPoolGradGradWithArgmax has no CPU kernel in TF: the gather by hand.
  flat = gx.reshape(-1)
  offsets = 0 if include_batch else np.arange(2).reshape(2, 1, 1, 1) * 8
  idx = bad + offsets
  expected_gg = np.where((idx >= 0) & (idx < 16), flat[np.clip(idx, 0, 15)], 0)
  np.testing.assert_array_equal(got_gg, expected_gg)
  want = tf.raw_ops.MaxPoolGradWithArgmax(input=x, grad=g, argmax=good, **kw)
  np.testing.assert_array_equal(fn(x, g, gx, good32)[0], want.numpy())


# --------------------------------------------------------------------------
# Morphological dilation
# --------------------------------------------------------------------------


def test_dilation2d_program_grad_and_vmap():
  """tf.nn.dilation2d (SAME, strides and rates), its gradient vs tf.GradientTape (ties
  and NaN windows: TF's routing, defaults included) and vmap over a batched filter."""

  @tf.function
  def f(x, k):
    return tf.nn.dilation2d(
      x, k, strides=[1, 2, 1, 1], padding="SAME", data_format="NHWC", dilations=[1, 1, 2, 1]
    )

  fn = tfprims.convert_functional(f, tf.TensorSpec([2, 5, 6, 2]), tf.TensorSpec([2, 3, 2]))
  rng = np.random.default_rng(0)
  x = rng.choice([0.0, 1.0, 2.0, np.nan, -np.inf], size=(2, 5, 6, 2)).astype(np.float32)
  x[1] = rng.normal(size=(5, 6, 2))
  k = rng.choice([0.0, 0.5], size=(2, 3, 2)).astype(np.float32)
  np.testing.assert_array_equal(fn(x, k), f(x, k).numpy())
  w = rng.normal(size=f(x, k).shape).astype(np.float32)
  xt, kt = tf.constant(x), tf.constant(k)
  with tf.GradientTape() as tape:
    tape.watch([xt, kt])
    tf_loss = tf.reduce_sum(tf.where(tf.math.is_finite(f(xt, kt)), f(xt, kt), 0.0) * w)
  loss = lambda x, k: jnp.sum(jnp.where(jnp.isfinite(fn(x, k)), fn(x, k), 0.0) * w)
  gx, gk = jax.grad(loss, argnums=(0, 1))(x, k)
  want = tape.gradient(tf_loss, [xt, kt])
  np.testing.assert_allclose(gx, want[0], rtol=1e-6)
  np.testing.assert_allclose(gk, want[1], rtol=1e-6)
  # vmap over filters (an ensemble): the batch goes into the channels, TF-named.
  ks = np.stack([k, k + 1.0, -k])
  jaxpr = jax.make_jaxpr(jax.vmap(lambda k: fn(x, k)))(ks)
  assert "tf.Dilation2D" in jaxpr_primitives(jaxpr)
  np.testing.assert_array_equal(
    jax.vmap(lambda k: fn(x, k))(ks), np.stack([f(x, kk).numpy() for kk in ks])
  )


def test_dilation2d_backprops_transposes():
  """The backprops are linear in out_backprop; their derived transposes are exact
  (dot-product test), and grad through a graph holding them works."""
  rng = np.random.default_rng(1)
  x = rng.choice([0.0, 1.0, np.nan], size=(1, 4, 4, 2)).astype(np.float32)
  k = rng.choice([0.0, 1.0], size=(2, 2, 2)).astype(np.float32)
  kw = dict(strides=[1, 1, 1, 1], rates=[1, 1, 1, 1], padding="SAME")
  g = rng.normal(size=(1, 4, 4, 2)).astype(np.float32)
  for op, shape in (("Dilation2DBackpropInput", x.shape), ("Dilation2DBackpropFilter", k.shape)):
    u = rng.normal(size=shape).astype(np.float32)
    f = lambda g, op=op: tfprims.get_op(op)(x, k, g, **kw)
    np.testing.assert_allclose(
      f(g), getattr(tf.raw_ops, op)(input=x, filter=k, out_backprop=g, **kw).numpy(), rtol=1e-6
    )
    (ct,) = jax.linear_transpose(f, g)(u)
    np.testing.assert_allclose(np.vdot(f(g), u), np.vdot(g, ct), rtol=1e-5)


# --------------------------------------------------------------------------
# Convolution variants
# --------------------------------------------------------------------------


def test_conv_layouts_and_groups_tf_cpu_refuses():
  """Conv with CHANNELS_FIRST, groups, or 3-D EXPLICIT padding (TF's CPU Conv refuses or
  aborts): compared with TF's Conv2D / Conv3D on the same convolution."""
  rng = np.random.default_rng(0)
  x = rng.normal(size=(2, 4, 5, 6)).astype(np.float32)  # NCHW
  w = rng.normal(size=(3, 2, 2, 6)).astype(np.float32)  # 2 groups of 2 input channels
  kw = dict(strides=[1, 1, 2, 1], padding="SAME", dilations=[1, 1, 1, 2])
  want = tf.raw_ops.Conv2D(
    input=x, filter=w, data_format="NCHW", **dict(kw, strides=[1, 1, 1, 2], dilations=[1, 1, 2, 1])
  )
  got = _ours(
    "Conv",
    x,
    w,
    strides=(1, 1, 1, 2),
    padding="SAME",
    explicit_paddings=(),
    data_format="CHANNELS_FIRST",
    dilations=(1, 1, 2, 1),
    batch_dims=1,
    groups=2,
  )
  np.testing.assert_allclose(got, want.numpy(), rtol=1e-4, atol=1e-4)
  x3 = rng.normal(size=(1, 2, 3, 4, 4, 2)).astype(np.float32)  # batch_dims=2
  w3 = rng.normal(size=(2, 2, 2, 2, 3)).astype(np.float32)
  pads = [(1, 0), (0, 2), (1, 1)]
  got = _ours(
    "Conv",
    x3,
    w3,
    strides=(1, 1, 1, 1, 1),
    padding="EXPLICIT",
    explicit_paddings=(0, 0, 1, 0, 0, 2, 1, 1, 0, 0),
    data_format="CHANNELS_LAST",
    dilations=(),
    batch_dims=2,
    groups=1,
  )
  xp = np.pad(x3.reshape(2, 3, 4, 4, 2), [(0, 0)] + pads + [(0, 0)])
  want = tf.raw_ops.Conv3D(input=xp, filter=w3, strides=[1] * 5, padding="VALID")
  np.testing.assert_allclose(got, want.numpy().reshape(got.shape), rtol=1e-4, atol=1e-4)
  # Its gradient is the transpose (no TF op for 3-D EXPLICIT: lax formulas).
  f = lambda x: tfprims.get_op("Conv")(
    x,
    w3,
    strides=(1,) * 5,
    padding="EXPLICIT",
    explicit_paddings=(0, 0, 1, 0, 0, 2, 1, 1, 0, 0),
    data_format="CHANNELS_LAST",
    dilations=(),
    batch_dims=2,
    groups=1,
  )
  u = rng.normal(size=got.shape).astype(np.float32)
  (ct,) = jax.linear_transpose(f, x3)(u)
  np.testing.assert_allclose(np.vdot(f(x3), u), np.vdot(x3, ct), rtol=1e-4)


def test_conv_and_fused_convs_grad_jaxprs_are_tf_named():
  rng = np.random.default_rng(1)
  x = rng.normal(size=(2, 5, 5, 2)).astype(np.float32)
  w = rng.normal(size=(3, 3, 2, 3)).astype(np.float32)

  @tf.function
  def f(x, w):
    a = tf.raw_ops.Conv(input=x, filter=w, strides=[1, 1, 1, 1], padding="SAME")
    b = tf.raw_ops.FusedPadConv2D(
      input=x,
      paddings=[[0, 0], [1, 1], [2, 1], [0, 0]],
      filter=w,
      mode="REFLECT",
      strides=[1, 2, 1, 1],
      padding="VALID",
    )
    c = tf.raw_ops.FusedResizeAndPadConv2D(
      input=x,
      size=[6, 4],
      paddings=[[0, 0], [1, 1], [0, 1], [0, 0]],
      filter=w,
      mode="SYMMETRIC",
      strides=[1, 1, 1, 1],
      padding="SAME",
      resize_align_corners=True,
    )
    return tf.reduce_sum(a**2) + tf.reduce_sum(b**2) + tf.reduce_sum(c**2)

  fn = tfprims.convert_functional(f, tf.TensorSpec(x.shape), tf.TensorSpec(w.shape))
  grad = jax.grad(fn, argnums=(0, 1))
  names = jaxpr_primitives(jax.make_jaxpr(grad)(x, w))
  assert {
    "tf.Conv2DBackpropInput",
    "tf.Conv2DBackpropFilter",
    "tf.MirrorPadGrad",
    "tf.ResizeBilinearGrad",
  } <= names
  assert non_tf_primitives(jax.make_jaxpr(grad)(x, w), allowed=("add_any", "pjit")) == set()

  # Batch 2: TF's fused kernels repeat the first image's result, so the reference is the
  # unfused graph (the gradient too: TF registers none for the fused ops).
  @tf.function
  def unfused(x, w):
    a = tf.nn.conv2d(x, w, 1, "SAME")
    b = tf.nn.conv2d(
      tf.pad(x, [[0, 0], [1, 1], [2, 1], [0, 0]], "REFLECT"), w, [1, 2, 1, 1], "VALID"
    )
    r = tf.raw_ops.ResizeBilinear(images=x, size=[6, 4], align_corners=True)
    c = tf.nn.conv2d(tf.pad(r, [[0, 0], [1, 1], [0, 1], [0, 0]], "SYMMETRIC"), w, 1, "SAME")
    return tf.reduce_sum(a**2) + tf.reduce_sum(b**2) + tf.reduce_sum(c**2)

  np.testing.assert_allclose(fn(x, w), unfused(x, w).numpy(), rtol=1e-5)
  xt, wt = tf.constant(x), tf.constant(w)
  with tf.GradientTape() as tape:
    tape.watch([xt, wt])
    y = unfused(xt, wt)
  for got, want in zip(grad(x, w), tape.gradient(y, [xt, wt])):
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)
