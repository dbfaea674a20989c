"""Image colour, layout, patch, glimpse and box-drawing ops in real programs:
tf.image colour pipelines (rgb_to_hsv, hsv_to_rgb, adjust_hue/saturation/contrast), a
sub-pixel upsampling model (conv + depth_to_space), tf.image.extract_patches and
extract_volume_patches, tf.image.extract_glimpse and tf.image.draw_bounding_boxes,
converted and compared with TF (outputs, gradients vs tf.GradientTape or central
differences where TF has no gradient, vmap vs per-example results, TF-named jaxprs),
plus the choices of docs/semantics/image.md."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import tensorflow as tf

import tfprims
from helpers import jaxpr_primitives, non_tf_primitives, tape_vjp

R = tf.raw_ops
RNG = np.random.default_rng(0)
RGB = RNG.uniform(0, 1, size=(2, 5, 6, 3)).astype(np.float32)
# Pixels with ties: gray, two equal channels (each order), black, white, saturated.
TIES = np.array(
  [
    [
      [0.5, 0.5, 0.5],
      [0.2, 0.2, 0.7],
      [0.7, 0.2, 0.2],
      [0.2, 0.7, 0.7],
      [0.0, 0.0, 0.0],
      [1.0, 1.0, 1.0],
      [1.0, 0.0, 0.0],
      [0.3, 0.6, 0.3],
    ]
  ],
  np.float32,
)


def _spec(x):
  return tf.TensorSpec(x.shape, tf.as_dtype(x.dtype))


def _central_diff_grad(f, x, ct, eps=1e-3):
  """d<ct, f(x)>/dx by central differences on TF's function (float64 sums)."""
  g = np.zeros(x.size)
  flat = x.reshape(-1)
  for i in range(x.size):
    hi, lo = flat.copy(), flat.copy()
    hi[i] += eps
    lo[i] -= eps
    fh = f(hi.reshape(x.shape)).numpy().astype(np.float64)
    fl = f(lo.reshape(x.shape)).numpy().astype(np.float64)
    g[i] = np.sum(ct * (fh - fl)) / (2 * eps)
  return g.reshape(x.shape)


# --- colour ---------------------------------------------------------------------------


def _color_pipeline(x):
  x = tf.image.adjust_hue(x, 0.13)
  x = tf.image.adjust_saturation(x, 1.4)
  x = tf.image.adjust_contrast(x, 0.8)
  hsv = tf.image.rgb_to_hsv(x)
  return tf.image.hsv_to_rgb(hsv * tf.constant([1.0, 0.5, 0.9]))


def test_color_pipeline_matches_tf_with_jit_and_vmap():
  f = tf.function(_color_pipeline)
  fn = tfprims.convert_functional(f, _spec(RGB))
  expected = f(RGB).numpy()
  np.testing.assert_allclose(fn(RGB), expected, rtol=1e-5, atol=1e-6)
  np.testing.assert_allclose(jax.jit(fn)(RGB), expected, rtol=1e-5, atol=1e-6)
  stack = np.stack([RGB, RGB[:, ::-1] * 0.7, RGB[::-1] ** 2])
  batched = jax.vmap(fn)(stack)
  for k in range(3):
    np.testing.assert_allclose(batched[k], f(stack[k]).numpy(), rtol=1e-5, atol=1e-6)
  prims = jaxpr_primitives(jax.make_jaxpr(fn)(RGB))
  assert {
    "tf.AdjustHue",
    "tf.AdjustSaturation",
    "tf.AdjustContrastv2",
    "tf.RGBToHSV",
    "tf.HSVToRGB",
  } <= prims
  assert all(p.startswith("tf.") for p in prims)
  # Batching moves the batch axis to the front and re-binds the TF ops.
  assert (
    non_tf_primitives(
      jax.make_jaxpr(jax.vmap(fn, in_axes=3))(np.moveaxis(stack, 0, 3)),
      allowed=("reshape", "transpose"),
    )
    == set()
  )


@pytest.mark.parametrize("delta", [-1.0, -0.7, -0.25, 0.0, 0.5, 0.999, 1.0])
def test_adjust_hue_wraps_like_tf(delta):
  images = np.concatenate([RGB[0], np.broadcast_to(TIES, (5, 8, 3))[:, :6]], axis=0)
  expected = R.AdjustHue(images=images, delta=np.float32(delta)).numpy()
  ours = tfprims.get_op("AdjustHue")(images, np.float32(delta))
  np.testing.assert_allclose(ours, expected, rtol=1e-6, atol=1e-7)


@pytest.mark.parametrize(
  "op, scalar",
  [
    ("RGBToHSV", None),
    ("HSVToRGB", None),
    ("AdjustSaturation", 0.0),
    ("AdjustSaturation", 2.5),
    ("AdjustHue", 0.3),
    ("AdjustContrastv2", 1.7),
  ],
)
def test_ties_and_extremes_match_tf(op, scalar):
  """Gray pixels, equal channels, black and white: TF's case splits, ours the same."""
  images = np.concatenate([TIES, TIES[:, ::-1]], axis=0)
  if op == "HSVToRGB":  # hue 0, 1/6 steps, 1 - eps (category 5/6 boundary)
    images = np.array(
      [
        [
          [0.0, 1.0, 1.0],
          [1 / 6, 0.5, 0.5],
          [0.5, 1.0, 0.2],
          [np.float32(1) - np.float32(2**-24), 1.0, 1.0],
        ]
      ],
      np.float32,
    )
  args = (images,) if scalar is None else (images, np.float32(scalar))
  kw = {
    "RGBToHSV": [],
    "HSVToRGB": [],
    "AdjustSaturation": ["scale"],
    "AdjustHue": ["delta"],
    "AdjustContrastv2": ["contrast_factor"],
  }[op]
  expected = getattr(R, op)(images=images, **dict(zip(kw, args[1:]))).numpy()
  np.testing.assert_allclose(tfprims.get_op(op)(*args), expected, rtol=1e-6, atol=1e-7)


@pytest.mark.parametrize("dtype", [np.float16, tf.bfloat16.as_numpy_dtype, np.float64])
def test_rgb_hsv_round_trip_other_dtypes(dtype):
  images = RGB.astype(dtype)
  hsv = R.RGBToHSV(images=images).numpy()
  tol = 1e-2 if dtype != np.float64 else 1e-12
  np.testing.assert_allclose(
    np.asarray(tfprims.get_op("RGBToHSV")(images), np.float64),
    hsv.astype(np.float64),
    rtol=tol,
    atol=tol,
  )
  np.testing.assert_allclose(
    np.asarray(tfprims.get_op("HSVToRGB")(hsv), np.float64),
    R.HSVToRGB(images=hsv).numpy().astype(np.float64),
    rtol=tol,
    atol=tol,
  )


def test_adjust_ops_on_uint8_images():
  """tf.image converts integer images to float and back (saturating)."""
  img = (RGB * 255).astype(np.uint8)
  f = tf.function(
    lambda x: tf.image.adjust_contrast(
      tf.image.adjust_saturation(tf.image.adjust_hue(x, -0.3), 0.6), 1.3
    )
  )
  fn = tfprims.convert_functional(f, _spec(img))
  ours = np.asarray(fn(img))
  expected = f(img).numpy()
  assert ours.dtype == np.uint8
  # The float pipeline agrees to ~1e-6; a value within that of a rounding boundary
  # may round the other way.
  assert np.max(np.abs(ours.astype(int) - expected.astype(int))) <= 1
  assert np.mean(ours == expected) > 0.99


def test_rgb_to_hsv_gradient_matches_tape_including_ties():
  images = np.concatenate([RGB[0, :1], np.broadcast_to(TIES, (1, 8, 3))[:, :6]], axis=0)
  w = tf.constant([0.7, -1.3, 0.4])
  f = tf.function(lambda x: tf.image.rgb_to_hsv(x) * w)
  fn = tfprims.convert_functional(f, _spec(images))
  ct = RNG.normal(size=images.shape).astype(np.float32)
  _, pullback = jax.vjp(fn, images)
  np.testing.assert_allclose(pullback(ct)[0], tape_vjp(f, images, ct), rtol=1e-5, atol=1e-5)
  # vmap of the gradient vs per-example gradients
  stack = np.stack([images, images * 0.5 + 0.1])
  g = jax.vmap(jax.grad(lambda x: jnp.sum(fn(x) * ct)))(stack)
  for k in range(2):
    np.testing.assert_allclose(g[k], tape_vjp(f, stack[k], ct), rtol=1e-5, atol=1e-5)


def test_adjust_contrast_gradient_is_tf_named_and_exact():
  """TF registers no gradient for AdjustContrastv2: ours is the exact one, checked
  against TF's own formula under GradientTape; its transpose is the op itself."""
  f = tf.function(lambda x, c: tf.image.adjust_contrast(x, c))
  fn = tfprims.convert_functional(f, _spec(RGB), tf.TensorSpec((), tf.float32))
  formula = lambda x, c: (
    (x - tf.reduce_mean(x, axis=(-3, -2), keepdims=True)) * c
    + tf.reduce_mean(x, axis=(-3, -2), keepdims=True)
  )
  ct = RNG.normal(size=RGB.shape).astype(np.float32)
  c = np.float32(1.7)
  gx, gc = jax.grad(lambda x, c: jnp.sum(fn(x, c) * ct), argnums=(0, 1))(RGB, c)
  xt, ctf = tf.constant(RGB), tf.constant(c)
  with tf.GradientTape() as tape:
    tape.watch([xt, ctf])
    y = formula(xt, ctf)
  ex, ec = tape.gradient(y, [xt, ctf], output_gradients=tf.constant(ct))
  np.testing.assert_allclose(gx, ex.numpy(), rtol=1e-5, atol=1e-5)
  np.testing.assert_allclose(gc, ec.numpy(), rtol=1e-4)
  grad = jax.make_jaxpr(jax.grad(lambda x, c: jnp.sum(fn(x, c) * ct), argnums=(0, 1)))(RGB, c)
  assert "tf.AdjustContrastv2" in jaxpr_primitives(grad)
  # Only the loss's own jax.numpy ops are not TF-named.
  assert non_tf_primitives(grad, allowed=("mul", "reduce_sum", "broadcast_in_dim")) == set()


@pytest.mark.parametrize("name", ["hue", "saturation"])
def test_adjust_hue_saturation_gradients_match_central_differences(name):
  """TF registers no gradient: ours is the derivative of TF's formulas."""
  x = RGB[0, :2, :3]
  tf_fn = {
    "hue": lambda v: tf.image.adjust_hue(v, 0.21),
    "saturation": lambda v: tf.image.adjust_saturation(v, 0.6),
  }[name]
  fn = tfprims.convert_functional(tf.function(tf_fn), _spec(x))
  ct = RNG.normal(size=x.shape)
  ours = jax.grad(lambda v: jnp.sum(fn(v) * ct))(x)
  np.testing.assert_allclose(ours, _central_diff_grad(tf_fn, x, ct), rtol=2e-2, atol=2e-2)


# --- depth_to_space / space_to_depth: sub-pixel upsampling --------------------------------


def _subpixel_model():
  w = tf.constant(RNG.normal(size=(3, 3, 3, 12)).astype(np.float32) * 0.3)

  @tf.function
  def model(x, w):
    y = tf.nn.conv2d(x, w, 1, "SAME")
    up = tf.nn.depth_to_space(tf.nn.relu(y), 2)  # (N, 2H, 2W, 3)
    down = tf.nn.space_to_depth(up, 2)  # back to (N, H, W, 12)
    return up, tf.reduce_sum(down * y, axis=-1)

  return model, w.numpy()


def test_subpixel_upsampling_matches_tf_grad_and_vmap():
  model, w = _subpixel_model()
  fn = tfprims.convert_functional(model, _spec(RGB), _spec(w))
  up, score = model(RGB, w)
  ours_up, ours_score = fn(RGB, w)
  np.testing.assert_array_equal(ours_up.shape, (2, 10, 12, 3))
  np.testing.assert_allclose(ours_up, up.numpy(), rtol=1e-5, atol=1e-5)
  np.testing.assert_allclose(ours_score, score.numpy(), rtol=1e-4, atol=1e-4)
  ct_up = RNG.normal(size=up.shape).astype(np.float32)
  ct_s = RNG.normal(size=score.shape).astype(np.float32)
  loss = lambda x, w: jnp.sum(fn(x, w)[0] * ct_up) + jnp.sum(fn(x, w)[1] * ct_s)
  gx, gw = jax.grad(loss, argnums=(0, 1))(RGB, w)
  xt, wt = tf.constant(RGB), tf.constant(w)
  with tf.GradientTape() as tape:
    tape.watch([xt, wt])
    a, b = model(xt, wt)
    t = tf.reduce_sum(a * ct_up) + tf.reduce_sum(b * ct_s)
  ex, ew = tape.gradient(t, [xt, wt])
  np.testing.assert_allclose(gx, ex.numpy(), rtol=1e-4, atol=1e-4)
  np.testing.assert_allclose(gw, ew.numpy(), rtol=1e-4, atol=1e-4)
  # The gradient of DepthToSpace is SpaceToDepth and the other way round.
  grad_prims = jaxpr_primitives(jax.make_jaxpr(jax.grad(loss))(RGB, w))
  assert {"tf.DepthToSpace", "tf.SpaceToDepth"} <= grad_prims
  stack = np.stack([RGB, RGB[::-1]])
  batched = jax.vmap(fn, in_axes=(0, None))(stack, w)
  for k in range(2):
    np.testing.assert_allclose(batched[0][k], model(stack[k], w)[0].numpy(), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("op", ["DepthToSpace", "SpaceToDepth"])
def test_nchw_matches_nhwc_through_transposes(op):
  """TF's CPU kernels take NHWC only; NCHW (GPU graphs) must be NHWC conjugated by
  the layout transposes."""
  x = RNG.normal(size=(2, 4, 6, 8)).astype(np.float32)
  expected = np.transpose(getattr(R, op)(input=x, block_size=2).numpy(), (0, 3, 1, 2))
  ours = tfprims.get_op(op)(np.transpose(x, (0, 3, 1, 2)), block_size=2, data_format="NCHW")
  np.testing.assert_array_equal(ours, expected)
  # vmap and the transpose (the other op) in NCHW too.
  ct = RNG.normal(size=expected.shape).astype(np.float32)
  other = {"DepthToSpace": "SpaceToDepth", "SpaceToDepth": "DepthToSpace"}[op]
  _, pullback = jax.vjp(
    lambda v: tfprims.get_op(op)(v, block_size=2, data_format="NCHW"), np.transpose(x, (0, 3, 1, 2))
  )
  np.testing.assert_array_equal(
    pullback(ct)[0], tfprims.get_op(other)(ct, block_size=2, data_format="NCHW")
  )


def test_nchw_vect_c_is_refused():
  with pytest.raises(NotImplementedError, match="NCHW_VECT_C"):
    tfprims.get_op("DepthToSpace")(
      np.zeros((1, 1, 2, 2, 4), np.int8), block_size=2, data_format="NCHW_VECT_C"
    )


# --- patches ---------------------------------------------------------------------------


@pytest.mark.parametrize("padding", ["SAME", "VALID"])
@pytest.mark.parametrize(
  "sizes, strides, rates",
  [((1, 3, 3, 1), (1, 2, 2, 1), (1, 1, 1, 1)), ((1, 2, 3, 1), (1, 1, 2, 1), (1, 2, 1, 1))],
)
def test_extract_patches_matches_tf_with_grad(sizes, strides, rates, padding):
  f = tf.function(lambda x: tf.image.extract_patches(x, sizes, strides, rates, padding))
  fn = tfprims.convert_functional(f, _spec(RGB))
  expected = f(RGB).numpy()
  np.testing.assert_array_equal(fn(RGB), expected)
  ct = RNG.normal(size=expected.shape).astype(np.float32)
  _, pullback = jax.vjp(fn, RGB)
  np.testing.assert_allclose(pullback(ct)[0], tape_vjp(f, RGB, ct), rtol=1e-5, atol=1e-5)
  grad_prims = jaxpr_primitives(jax.make_jaxpr(lambda x, c: jax.vjp(fn, x)[1](c))(RGB, ct))
  assert "tf.UnsortedSegmentSum" in grad_prims
  assert all(p.startswith("tf.") for p in grad_prims)
  stack = np.stack([RGB, RGB * 2])
  batched = jax.vmap(fn)(stack)
  for k in range(2):
    np.testing.assert_array_equal(batched[k], f(stack[k]).numpy())
  assert non_tf_primitives(jax.make_jaxpr(jax.vmap(fn))(stack)) == set()


def test_extract_volume_patches_matches_tf_with_grad():
  x = RNG.normal(size=(1, 4, 5, 3, 2)).astype(np.float32)
  f = tf.function(lambda v: tf.extract_volume_patches(v, [1, 2, 3, 2, 1], [1, 2, 1, 2, 1], "SAME"))
  fn = tfprims.convert_functional(f, _spec(x))
  expected = f(x).numpy()
  np.testing.assert_array_equal(fn(x), expected)
  ct = RNG.normal(size=expected.shape).astype(np.float32)
  _, pullback = jax.vjp(fn, x)
  np.testing.assert_allclose(pullback(ct)[0], tape_vjp(f, x, ct), rtol=1e-5, atol=1e-5)


def test_extract_patches_integer_images_exact():
  img = RNG.integers(0, 65535, size=(1, 5, 4, 2)).astype(np.uint16)
  expected = R.ExtractImagePatches(
    images=img, ksizes=[1, 2, 2, 1], strides=[1, 1, 3, 1], rates=[1, 2, 1, 1], padding="SAME"
  ).numpy()
  ours = tfprims.get_op("ExtractImagePatches")(
    img, ksizes=(1, 2, 2, 1), strides=(1, 1, 3, 1), rates=(1, 2, 1, 1), padding="SAME"
  )
  assert ours.dtype == np.uint16
  np.testing.assert_array_equal(ours, expected)


# --- draw_bounding_boxes ---------------------------------------------------------------

BOXES = np.array(
  [
    [
      [0.1, 0.2, 0.8, 0.9],
      [-0.3, -0.2, 0.5, 0.4],
      [0.6, 0.7, 1.4, 1.3],
      [0.5, 0.5, 0.4, 0.6],
      [1.2, 0.0, 1.5, 1.0],
      [0.0, 0.0, 1.0, 1.0],
      [0.25, 0.4, 0.25, 0.4],
      [-0.19, 0.3, 0.9, 0.99],
    ]
  ]
  * 2,
  np.float32,
)


@pytest.mark.parametrize("dtype", [np.float32, np.float16])
@pytest.mark.parametrize("depth", [1, 3, 4])
def test_draw_bounding_boxes_matches_tf(depth, dtype):
  """Corners truncated toward zero (-0.19 * 5 -> row 0 drawn), inverted and outside
  boxes skipped, edges outside the image not drawn, later boxes over earlier ones."""
  images = RNG.uniform(size=(2, 6, 7, depth)).astype(dtype)
  colors = RNG.uniform(size=(3, 4)).astype(np.float32)
  f = tf.function(lambda im, b: tf.image.draw_bounding_boxes(im, b, colors))
  fn = tfprims.convert_functional(f, _spec(images), _spec(BOXES))
  expected = f(images, BOXES).numpy()
  assert not np.array_equal(expected, images)
  np.testing.assert_array_equal(fn(images, BOXES), expected)
  np.testing.assert_array_equal(jax.jit(fn)(images, BOXES), expected)
  # V1 and V2 without colours: TF's default table.
  np.testing.assert_array_equal(
    tfprims.get_op("DrawBoundingBoxes")(images, BOXES),
    R.DrawBoundingBoxes(images=images, boxes=BOXES).numpy(),
  )
  np.testing.assert_array_equal(
    tfprims.get_op("DrawBoundingBoxesV2")(images, BOXES, np.zeros((0, 4), np.float32)),
    R.DrawBoundingBoxesV2(images=images, boxes=BOXES, colors=np.zeros((0, 4), np.float32)).numpy(),
  )
  stack = np.stack([images, images[::-1]])
  bstack = np.stack([BOXES, BOXES[:, ::-1]])
  batched = jax.vmap(fn)(stack, bstack)
  for k in range(2):
    np.testing.assert_array_equal(batched[k], f(stack[k], bstack[k]).numpy())
  assert (
    non_tf_primitives(jax.make_jaxpr(jax.vmap(fn))(stack, bstack), allowed=("reshape", "transpose"))
    == set()
  )


def test_draw_bounding_boxes_gradient_masks_drawn_pixels():
  """TF registers no gradient; ours passes the cotangent where no box is drawn."""
  images = RNG.uniform(size=(2, 6, 7, 3)).astype(np.float32)
  f = tf.function(lambda im: tf.image.draw_bounding_boxes(im, BOXES, np.ones((1, 3), np.float32)))
  fn = tfprims.convert_functional(f, _spec(images))
  ct = RNG.normal(size=images.shape).astype(np.float32)
  g = jax.grad(lambda x: jnp.sum(fn(x) * ct))(images)
  drawn = f(np.full_like(images, -1.0)).numpy() == 1.0
  np.testing.assert_array_equal(g, np.where(drawn, 0.0, ct))
  assert "tf.DrawBoundingBoxesV2" in jaxpr_primitives(
    jax.make_jaxpr(jax.grad(lambda x: jnp.sum(fn(x) * ct)))(images)
  )


# --- extract_glimpse -------------------------------------------------------------------


@pytest.mark.parametrize(
  "centered, normalized", [(True, True), (True, False), (False, True), (False, False)]
)
@pytest.mark.parametrize("op", ["ExtractGlimpse", "ExtractGlimpseV2"])
def test_glimpse_offsets_match_tf_with_zero_noise(op, centered, normalized):
  x = RNG.normal(size=(3, 7, 6, 2)).astype(np.float32)
  offsets = np.array([[0.3, -0.4], [-2.5, 1.75], [1.0, 3.5]], np.float32)
  if not normalized:
    offsets = offsets * 2
  kw = dict(centered=centered, normalized=normalized, uniform_noise=False, noise="zero")
  f = tf.function(lambda v, o: getattr(R, op)(input=v, size=[4, 3], offsets=o, **kw))
  fn = tfprims.convert_functional(f, _spec(x), _spec(offsets))
  expected = f(x, offsets).numpy()
  np.testing.assert_array_equal(fn(x, offsets), expected)  # no rng needed for zero noise
  ct = RNG.normal(size=expected.shape).astype(np.float32)
  _, pullback = jax.vjp(lambda v: fn(v, offsets), x)
  # The exact transpose of the shift: <ct, G x> == <G^T ct, x>
  t = RNG.normal(size=x.shape).astype(np.float32)
  np.testing.assert_allclose(
    np.sum(pullback(ct)[0] * t), np.sum(ct * f(t, offsets).numpy()), rtol=1e-5
  )
  stack, ostack = np.stack([x, -x]), np.stack([offsets, offsets[::-1]])
  batched = jax.vmap(fn)(stack, ostack)
  for k in range(2):
    np.testing.assert_array_equal(batched[k], f(stack[k], ostack[k]).numpy())


def test_glimpse_v1_and_v2_differ_like_tf():
  """Without `normalized`, V1 still subtracts half the glimpse; V2 does not."""
  x = np.arange(2 * 6 * 6 * 1, dtype=np.float32).reshape(2, 6, 6, 1)
  offsets = np.array([[1.0, 2.0], [2.0, 0.0]], np.float32)
  kw = dict(
    size=[2, 2],
    offsets=offsets,
    centered=False,
    normalized=False,
    uniform_noise=False,
    noise="zero",
  )
  v1 = R.ExtractGlimpse(input=x, **kw).numpy()
  v2 = R.ExtractGlimpseV2(input=x, **kw).numpy()
  assert not np.array_equal(v1, v2)
  params = dict(size=(2, 2), centered=False, normalized=False, uniform_noise=False, noise="zero")
  key = np.zeros(2, np.uint32)
  np.testing.assert_array_equal(tfprims.get_op("ExtractGlimpse")(key, x, offsets, **params), v1)
  np.testing.assert_array_equal(tfprims.get_op("ExtractGlimpseV2")(key, x, offsets, **params), v2)


@pytest.mark.parametrize(
  "noise, uniform_noise", [("uniform", True), ("gaussian", False), ("", False)]
)
def test_glimpse_noise_needs_rng_and_stays_in_range(noise, uniform_noise):
  x = RNG.normal(size=(2, 5, 5, 2)).astype(np.float32)
  offsets = np.array([[0.9, 0.9], [-0.9, 0.5]], np.float32)
  f = tf.function(
    lambda v, o: tf.raw_ops.ExtractGlimpseV2(
      input=v, size=[4, 4], offsets=o, noise=noise, uniform_noise=uniform_noise
    )
  )
  fn = tfprims.convert_functional(f, _spec(x), _spec(offsets))
  with pytest.raises(tfprims.MissingRngError):
    fn(x, offsets)
  ours = np.asarray(fn(x, offsets, rng=jax.random.key(0)))
  zero = R.ExtractGlimpseV2(
    input=x, size=[4, 4], offsets=offsets, noise="zero", uniform_noise=False
  ).numpy()
  # Inside the image: TF's pixels; outside: noise within each image's (channel's) range.
  oy = np.trunc(offsets[:, 0] * 5 / 2 + 2.5 - 2).astype(int)
  ox = np.trunc(offsets[:, 1] * 5 / 2 + 2.5 - 2).astype(int)
  for n in range(2):
    rows = (np.arange(4) + oy[n] >= 0) & (np.arange(4) + oy[n] < 5)
    cols = (np.arange(4) + ox[n] >= 0) & (np.arange(4) + ox[n] < 5)
    inside = rows[:, None] & cols[None, :]
    assert not inside.all()
    np.testing.assert_array_equal(ours[n][inside], zero[n][inside])
    noise_vals = ours[n][~inside]
    # uniform: over the whole image; gaussian: per channel, clipped to its range
    axes = (0, 1, 2) if noise == "uniform" else (0, 1)
    assert np.all(noise_vals >= x[n].min(axis=axes) - 1e-6)
    assert np.all(noise_vals <= x[n].max(axis=axes) + 1e-6)
    assert np.std(noise_vals) > 0
  other = np.asarray(fn(x, offsets, rng=jax.random.key(1)))
  assert not np.array_equal(ours, other)


def test_glimpse_rejects_conflicting_noise_attrs():
  with pytest.raises(ValueError, match="uniform_noise and noise"):
    tfprims.get_op("ExtractGlimpseV2")(
      np.zeros(2, np.uint32),
      np.zeros((1, 2, 2, 1), np.float32),
      np.zeros((1, 2), np.float32),
      size=(1, 1),
      centered=True,
      normalized=True,
      uniform_noise=True,
      noise="gaussian",
    )


def test_volume_patches_same_padding_with_stride_past_kernel():
  """Eigen's volume patches do not clamp a negative SAME padding (TF's image patches
  do): stride 3 over 3 planes with a 1-plane kernel reads plane 1, not plane 0."""
  x = np.arange(1, 4, dtype=np.float32).reshape(1, 3, 1, 1, 1)
  kw = dict(ksizes=[1, 1, 1, 1, 1], strides=[1, 3, 1, 1, 1], padding="SAME")
  expected = R.ExtractVolumePatches(input=x, **kw).numpy()
  assert expected.reshape(-1).tolist() == [2.0]
  np.testing.assert_array_equal(
    tfprims.get_op("ExtractVolumePatches")(
      x, ksizes=(1, 1, 1, 1, 1), strides=(1, 3, 1, 1, 1), padding="SAME"
    ),
    expected,
  )
  img = x.reshape(1, 3, 1, 1)
  np.testing.assert_array_equal(
    tfprims.get_op("ExtractImagePatches")(
      img, ksizes=(1, 1, 1, 1), strides=(1, 3, 1, 1), rates=(1, 1, 1, 1), padding="SAME"
    ),
    R.ExtractImagePatches(
      images=img, ksizes=[1, 1, 1, 1], strides=[1, 3, 1, 1], rates=[1, 1, 1, 1], padding="SAME"
    ).numpy(),
  )
