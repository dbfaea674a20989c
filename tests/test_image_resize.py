"""Image ops in real programs: tf.image.resize (every method, antialias on/off, up and
down), Keras augmentation layers in training mode, tf.image.crop_and_resize and
ImageProjectiveTransformV3, converted and compared with TF (outputs, gradients vs
tf.GradientTape, vmap vs per-example results, TF-named jaxprs), plus the policies of
docs/semantics/image.md."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import tensorflow as tf

import tfprims
from helpers import jaxpr_primitives, jitted_op, non_tf_primitives

R = tf.raw_ops
RNG = np.random.default_rng(0)
IMAGES = RNG.normal(size=(2, 5, 6, 3)).astype(np.float32)

METHODS = [
  "bilinear",
  "nearest",
  "bicubic",
  "area",
  "lanczos3",
  "lanczos5",
  "gaussian",
  "mitchellcubic",
]


def _spec(x):
  return tf.TensorSpec(x.shape, tf.as_dtype(x.dtype))


def _tf_grad(f, x, ct):
  x = tf.constant(x)
  with tf.GradientTape() as tape:
    tape.watch(x)
    y = f(x)
  return tape.gradient(y, x, output_gradients=tf.constant(ct)).numpy()


# --- tf.image.resize -------------------------------------------------------------------


@pytest.mark.parametrize("size", [(9, 11), (3, 2)], ids=["up", "down"])
@pytest.mark.parametrize("antialias", [False, True], ids=["plain", "antialias"])
@pytest.mark.parametrize("method", METHODS)
def test_tf_image_resize_matches_tf(method, antialias, size):
  f = tf.function(lambda im: tf.image.resize(im, size, method=method, antialias=antialias))
  fn = tfprims.convert_functional(f, _spec(IMAGES))
  expected = f(IMAGES).numpy()
  np.testing.assert_allclose(fn(IMAGES), expected, rtol=1e-5, atol=2e-6)
  np.testing.assert_allclose(jax.jit(fn)(IMAGES), expected, rtol=1e-5, atol=2e-6)
  # vmap over a stack of batches vs per-batch results
  stack = np.stack([IMAGES, IMAGES[::-1] * 2])
  batched = jax.vmap(fn)(stack)
  for k in range(2):
    np.testing.assert_allclose(batched[k], f(stack[k]).numpy(), rtol=1e-5, atol=4e-6)
  # The jaxprs keep TF names: vmap folds the batch into N around the TF op.
  assert all(p.startswith("tf.") for p in jaxpr_primitives(jax.make_jaxpr(fn)(IMAGES)))
  assert (
    non_tf_primitives(jax.make_jaxpr(jax.vmap(fn))(stack), allowed=("reshape", "transpose"))
    == set()
  )
  ct = RNG.normal(size=expected.shape).astype(np.float32)
  _, pullback = jax.vjp(fn, IMAGES)
  ours = np.asarray(pullback(ct)[0])
  if method == "area":
    # TF has no gradient for ResizeArea; ours is the exact one: <ct, A t> == <A^T ct, t>
    t = RNG.normal(size=IMAGES.shape).astype(np.float32)
    lhs = np.sum(ct * f(t).numpy())  # ResizeArea is linear: its tangent is A t
    np.testing.assert_allclose(np.sum(ours * t), lhs, rtol=1e-5)
    np.testing.assert_allclose(jax.jvp(fn, (IMAGES,), (t,))[1], f(t).numpy(), rtol=1e-5, atol=2e-6)
  else:
    np.testing.assert_allclose(ours, _tf_grad(f, IMAGES, ct), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize(
  "method, op, grad_op",
  [
    ("bicubic", "tf.ResizeBicubic", "tf.ResizeBicubicGrad"),
    ("lanczos3", "tf.ScaleAndTranslate", "tf.ScaleAndTranslateGrad"),
    ("mitchellcubic", "tf.ScaleAndTranslate", "tf.ScaleAndTranslateGrad"),
  ],
)
def test_resize_gradient_and_vmap_jaxprs_are_tf_named(method, op, grad_op):
  f = tf.function(lambda im: tf.image.resize(im, (7, 4), method=method))
  fn = tfprims.convert_functional(f, _spec(IMAGES))
  loss = lambda x: jnp.sum(fn(x) ** 2)
  grad_prims = jaxpr_primitives(jax.make_jaxpr(jax.grad(loss))(IMAGES))
  assert grad_op in grad_prims and op in grad_prims
  per_example = jax.make_jaxpr(jax.vmap(jax.grad(loss)))(np.stack([IMAGES, IMAGES]))
  assert grad_op in jaxpr_primitives(per_example)
  np.testing.assert_allclose(
    jax.grad(loss)(IMAGES), _tf_grad(f, IMAGES, 2 * f(IMAGES).numpy()), rtol=1e-4, atol=1e-5
  )


def test_bicubic_half_images_get_the_float32_gradient():
  # TF gives float16 images no ResizeBicubic gradient (None); ours is the float32
  # resize's gradient, cast (docs/semantics/image.md).
  x16 = IMAGES.astype(np.float16)
  f = lambda x: R.ResizeBicubic(images=x, size=[7, 9], half_pixel_centers=True)
  fn = tfprims.convert_functional(tf.function(f), _spec(x16))
  ct = RNG.normal(size=(2, 7, 9, 3)).astype(np.float32)
  ours = jax.vjp(fn, x16)[1](ct)[0]
  assert ours.dtype == np.float16
  expected = _tf_grad(f, IMAGES, ct)  # TF's float32 gradient
  np.testing.assert_allclose(np.asarray(ours, np.float32), expected, rtol=1e-2, atol=1e-2)
  with tf.GradientTape() as tape:
    xt = tf.constant(x16)
    tape.watch(xt)
    y = f(xt)
  assert tape.gradient(y, xt) is None


def test_scale_and_translate_with_traced_scale_matches_tf():
  @tf.function
  def f(x, scale, translation):
    return R.ScaleAndTranslate(
      images=x,
      size=[8, 4],
      scale=scale,
      translation=translation,
      kernel_type="keyscubic",
      antialias=True,
    )

  fn = tfprims.convert_functional(f, _spec(IMAGES), tf.TensorSpec([2]), tf.TensorSpec([2]))
  for scale, translation in [((1.6, 0.7), (0.3, -0.2)), ((0.9, 1.0), (-1.0, 0.5))]:
    s, t = np.array(scale, np.float32), np.array(translation, np.float32)
    np.testing.assert_allclose(
      jax.jit(fn)(IMAGES, s, t), f(IMAGES, s, t).numpy(), rtol=1e-5, atol=2e-6
    )
  # vmap over the scales (derived batching for a batched scale) vs per-scale results
  ss = np.array([[1.6, 0.7], [0.9, 1.0]], np.float32)
  ts = np.zeros((2, 2), np.float32)
  out = jax.vmap(fn, in_axes=(None, 0, 0))(IMAGES, ss, ts)
  for k in range(2):
    np.testing.assert_allclose(out[k], f(IMAGES, ss[k], ts[k]).numpy(), rtol=1e-5, atol=2e-6)


def test_resampling_sums_are_plus_zero_where_tfs_kernels_are():
  # ResizeBicubicGrad, ScaleAndTranslate and its gradient add taps onto a zeroed output
  # in TF, so an exact zero is +0.0 (a -0.0 input times a weight, a sample outside the
  # image); ResizeBicubic's 4-tap sums have no +0.0 start, so its zero signs are TF's
  # order's and not compared (its spec says why).
  from tfprims.core import get_op

  mixed = np.array([[-0.0, 1.0, -0.0], [-0.0, -0.0, 0.0]], np.float32).reshape(1, 2, 3, 1)
  cases = []
  # one pixel: XLA's contraction with one term is the -0.0 product itself
  for g, image in (
    (-np.zeros((1, 1, 1, 1), np.float32), (1, 1, 1, 1)),
    (mixed, (1, 1, 2, 1)),
    (mixed, (1, 1, 1, 1)),
  ):
    z = np.zeros(image, np.float32)
    for align, half in ((True, False), (False, True), (False, False)):
      cases.append(
        (
          "ResizeBicubicGrad",
          dict(grads=g, original_image=z),
          dict(align_corners=align, half_pixel_centers=half),
        )
      )
    for scale in ((0.25, 1.5), (1.0, 1.0)):  # a 0.25 scale samples outside the image
      st = dict(scale=np.array(scale, np.float32), translation=np.zeros(2, np.float32))
      for kernel in ("box", "lanczos3", "triangle"):
        for antialias in (False, True):
          attrs = dict(kernel_type=kernel, antialias=antialias)
          cases.append(
            ("ScaleAndTranslate", dict(images=g, size=np.array(image[1:3], np.int32), **st), attrs)
          )
          cases.append(("ScaleAndTranslateGrad", dict(grads=g, original_image=z, **st), attrs))
  for name, inputs, attrs in cases:
    want = getattr(R, name)(**inputs, **attrs).numpy()
    op = get_op(name)
    operands, params = op.prepare(inputs, attrs)
    # Jitted with the positions traced (an eager call compiles the same primitive).
    got = np.asarray(jitted_op(op, params)(*operands))
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-7, err_msg=name)
    assert (np.signbit(got) == np.signbit(want))[want == 0].all(), (name, attrs, got, want)


# --- non-finite pixels: TF's kernels sum each output's own taps ----------------------------


def _nonfinite_image(shape, seed, k=3):
  """Normal values with ``k`` pixels set to +inf, -inf and NaN."""
  rng = np.random.default_rng(seed)
  x = rng.normal(size=shape).astype(np.float32)
  flat = x.reshape(-1)
  for i, v in zip(rng.choice(flat.size, k, replace=False), [np.inf, -np.inf, np.nan] * k):
    flat[i] = v
  return x


def _assert_nonfinite_like(got, want, **tol):
  """NaN and ±inf exactly where TF has them (NaN's sign aside), finite values close."""
  got = np.asarray(got)
  for name, test in (("NaN", np.isnan), ("+inf", np.isposinf), ("-inf", np.isneginf)):
    np.testing.assert_array_equal(test(got), test(want), err_msg=f"{name} positions")
  finite = np.isfinite(want)
  np.testing.assert_allclose(got[finite], want[finite], **(tol or dict(rtol=1e-5, atol=1e-5)))


def test_scale_and_translate_nonfinite_pixel_reaches_its_taps_only():
  # TF multiplies every tap of each output's span, the zero-weight ones too (0 * inf
  # is NaN), and nothing else; a dense weight matrix would give NaN everywhere.
  from tfprims.core import get_op

  x = np.array([1, 2, np.inf, 3, 4, 5], np.float32).reshape(1, 1, 6, 1)
  inputs = dict(
    images=x,
    size=np.array([1, 6], np.int32),
    scale=np.ones(2, np.float32),
    translation=np.zeros(2, np.float32),
  )
  attrs = dict(kernel_type="triangle", antialias=True)
  want = R.ScaleAndTranslate(**inputs, **attrs).numpy().ravel()
  np.testing.assert_array_equal(want, [np.nan, np.nan, np.inf, np.nan, 4, 5])
  op = get_op("ScaleAndTranslate")
  operands, params = op.prepare(inputs, attrs)
  np.testing.assert_array_equal(np.asarray(op(*operands, **params)).ravel(), want)


def _nonfinite_calls():
  """(op, inputs, attrs): each resizer's TF kernel up and down, its variants."""
  x = _nonfinite_image((2, 5, 6, 2), 0)
  calls = []
  for size in ((7, 9), (3, 4)):
    g = _nonfinite_image((2,) + size + (2,), 1)
    z = np.zeros_like(x)
    size = np.array(size, np.int32)
    for align, half in ((False, False), (True, False), (False, True)):
      attrs = dict(align_corners=align, half_pixel_centers=half)
      calls.append(("ResizeBicubic", dict(images=x, size=size), attrs))
      calls.append(("ResizeBicubicGrad", dict(grads=g, original_image=z), attrs))
    for align in (False, True):
      calls.append(("ResizeArea", dict(images=x, size=size), dict(align_corners=align)))
    for kernel, antialias in (
      ("lanczos3", True),
      ("triangle", False),
      ("keyscubic", True),
      ("mitchellcubic", False),
      ("box", True),
      ("gaussian", True),
      ("lanczos5", False),
    ):
      st = dict(
        scale=(size / np.array([5, 6])).astype(np.float32),
        translation=np.array([0.25, -0.5], np.float32),
      )
      attrs = dict(kernel_type=kernel, antialias=antialias)
      calls.append(("ScaleAndTranslate", dict(images=x, size=size, **st), attrs))
      calls.append(("ScaleAndTranslateGrad", dict(grads=g, original_image=z, **st), attrs))
  return calls


def test_resizers_keep_tfs_nonfinite_pattern():
  # Random images with ±inf and NaN pixels: NaN, +inf and -inf exactly where TF's
  # kernels put them (each output sums its own taps, one product at a time).
  from tfprims.core import get_op

  for name, inputs, attrs in _nonfinite_calls():
    want = getattr(R, name)(**inputs, **attrs).numpy()
    assert np.isfinite(want).any() and not np.isfinite(want).all(), (name, attrs)
    op = get_op(name)
    operands, params = op.prepare(inputs, attrs)
    # Jitted with the positions traced (an eager call compiles the same primitive).
    got = jitted_op(op, params)(*operands)
    try:
      _assert_nonfinite_like(got, want)
    except AssertionError as e:
      raise AssertionError(f"{name} {attrs} {inputs.get('size')}") from e


@pytest.mark.parametrize("size", [(9, 11), (3, 2)], ids=["up", "down"])
@pytest.mark.parametrize("antialias", [False, True], ids=["plain", "antialias"])
@pytest.mark.parametrize("method", ["bicubic", "lanczos3", "area", "mitchellcubic"])
def test_tf_image_resize_nonfinite_pixels_match_tf(method, antialias, size):
  x = _nonfinite_image(IMAGES.shape, 2)
  f = tf.function(lambda im: tf.image.resize(im, size, method=method, antialias=antialias))
  fn = tfprims.convert_functional(f, _spec(x))
  want = f(x).numpy()
  _assert_nonfinite_like(fn(x), want)
  _assert_nonfinite_like(jax.jit(fn)(x), want)
  # finite images still take the plain contraction's values
  np.testing.assert_allclose(jax.jit(fn)(IMAGES), f(IMAGES).numpy(), rtol=1e-5, atol=2e-6)


# --- Keras augmentation layers (training mode) -------------------------------------------

keras = pytest.importorskip("keras")


# Keras 3 draws with stateless ops seeded from a variable it advances on each call (the
# state is a param). tfprims' random bits are not TF's (docs/semantics/random.md), so
# values are compared with TF on factor ranges that make the draw deterministic, and
# random draws are checked by their properties.

DETERMINISTIC_LAYERS = {
  "RandomRotation": lambda: keras.layers.RandomRotation((0.1, 0.1), seed=1),
  "RandomRotation-nearest-reflect": lambda: keras.layers.RandomRotation(
    (-0.15, -0.15), fill_mode="reflect", interpolation="nearest", seed=5
  ),
  "RandomZoom": lambda: keras.layers.RandomZoom((-0.3, -0.3), (0.2, 0.2), seed=2),
  "RandomZoom-wrap": lambda: keras.layers.RandomZoom((0.4, 0.4), fill_mode="wrap", seed=6),
  "RandomTranslation-nearest": lambda: keras.layers.RandomTranslation(
    (0.2, 0.2), (-0.3, -0.3), fill_mode="nearest", seed=3
  ),
  "RandomTranslation-constant": lambda: keras.layers.RandomTranslation(
    (-0.1, -0.1), (0.25, 0.25), fill_mode="constant", fill_value=2.0, seed=3
  ),
}


@pytest.mark.parametrize("name", sorted(DETERMINISTIC_LAYERS))
def test_keras_augmentation_layers_match_tf_on_fixed_transforms(x64, name):
  layer = DETERMINISTIC_LAYERS[name]()
  f = tf.function(lambda im: layer(im, training=True))
  fn, params = tfprims.convert(f, _spec(IMAGES))
  out, new = fn(params, IMAGES)
  np.testing.assert_allclose(out, f(IMAGES).numpy(), rtol=1e-5, atol=1e-5)
  # the seed state advances as TF's does
  (state,) = [v for v in layer.variables if "seed" in v.path]
  np.testing.assert_array_equal(np.asarray(new[next(iter(new))]), state.numpy())
  prims = jaxpr_primitives(jax.make_jaxpr(lambda q, x: fn(q, x))(params, IMAGES))
  assert "tf.ImageProjectiveTransformV3" in prims
  # per-example vmap of the converted layer
  xs = np.stack([IMAGES, IMAGES[::-1]])
  batched = jax.vmap(lambda x: fn(params, x)[0])(xs)
  for k in range(2):
    np.testing.assert_allclose(batched[k], fn(params, xs[k])[0], rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize(
  "layer_fn",
  [
    lambda: keras.layers.RandomRotation(
      0.25, interpolation="nearest", fill_mode="constant", seed=1
    ),
    lambda: keras.layers.RandomZoom(
      (-0.2, 0.6), interpolation="nearest", fill_mode="constant", seed=2
    ),
    lambda: keras.layers.RandomTranslation(
      0.3, 0.3, interpolation="nearest", fill_mode="constant", seed=3
    ),
  ],
  ids=["RandomRotation", "RandomZoom", "RandomTranslation"],
)
def test_keras_augmentation_layers_random_draws(x64, layer_fn):
  # On a ones image with NEAREST interpolation and a zero fill every output pixel is 0
  # or 1; the draws differ per example and per call (threading the new params), are
  # reproducible from the same params, and jit gives the eager results.
  layer = layer_fn()
  f = tf.function(lambda im: layer(im, training=True))
  x = np.ones((16, 9, 9, 1), np.float32)
  fn, params = tfprims.convert(f, _spec(x))
  out1, p1 = fn(params, x)
  out2, _ = jax.jit(fn)(p1, x)
  for out in (np.asarray(out1), np.asarray(out2)):
    assert set(np.unique(out)) <= {0.0, 1.0}
    assert len({o.tobytes() for o in out}) > 2  # per-example draws
  assert not np.array_equal(out1, out2)  # a new draw per call
  np.testing.assert_array_equal(fn(params, x)[0], out1)
  np.testing.assert_array_equal(jax.jit(fn)(params, x)[0], out1)
  tf_out = f(x).numpy()  # TF's draws have the same kind of values
  assert set(np.unique(tf_out)) <= {0.0, 1.0}
  assert abs(tf_out.mean() - np.asarray(out1).mean()) < 0.25


def test_keras_rotation_gradient_matches_tf(x64):
  # TF's gradient of ImageProjectiveTransformV3 warps the cotangent back with the
  # inverted transforms; ours binds the same ops.
  layer = keras.layers.RandomRotation((0.1, 0.1), seed=7)  # a fixed 36-degree turn
  f = tf.function(lambda im: layer(im, training=True))
  fn, params = tfprims.convert(f, _spec(IMAGES))
  expected = f(IMAGES).numpy()
  np.testing.assert_allclose(fn(params, IMAGES)[0], expected, rtol=1e-5, atol=1e-5)
  ct = RNG.normal(size=expected.shape).astype(np.float32)
  ours = jax.vjp(lambda x: fn(params, x)[0], IMAGES)[1](ct)[0]
  np.testing.assert_allclose(ours, _tf_grad(f, IMAGES, ct), rtol=1e-5, atol=1e-5)
  prims = jaxpr_primitives(jax.make_jaxpr(jax.grad(lambda x: jnp.sum(fn(params, x)[0])))(IMAGES))
  assert {"tf.ImageProjectiveTransformV3", "tf.MatrixInverse"} <= prims


def test_keras_random_flip_flips_about_half(x64):
  layer = keras.layers.RandomFlip("horizontal", seed=11)
  f = tf.function(lambda im: layer(im, training=True))
  x = np.repeat(IMAGES[:1], 200, axis=0)
  fn, params = tfprims.convert(f, _spec(x))
  out = np.asarray(fn(params, x)[0])
  flipped = np.array([np.array_equal(o, x[0, :, ::-1]) for o in out])
  kept = np.array([np.array_equal(o, x[0]) for o in out])
  assert np.all(flipped | kept)
  assert 60 < flipped.sum() < 140


def test_keras_random_crop(x64):
  # Inference mode is a centre crop (static). Training mode slices at a random offset:
  # a StridedSlice whose begin and end are data and whose extent the value analysis
  # proves (x[:, a:a + 3, b:b + 4]): eager and under jit.
  layer = keras.layers.RandomCrop(3, 4, seed=3)
  f = tf.function(lambda im: layer(im, training=False))
  fn, params = tfprims.convert(f, _spec(IMAGES))
  np.testing.assert_allclose(fn(params, IMAGES)[0], f(IMAGES).numpy(), rtol=1e-6)
  g = tf.function(lambda im: layer(im, training=True))
  gn, gparams = tfprims.convert(g, _spec(IMAGES))
  out = np.asarray(gn(gparams, IMAGES)[0])
  windows = [IMAGES[:, i : i + 3, j : j + 4] for i in range(3) for j in range(3)]
  assert any(np.array_equal(out, w) for w in windows)
  jitted = np.asarray(jax.jit(gn)(gparams, IMAGES)[0])
  assert any(np.array_equal(jitted, w) for w in windows)


# --- ImageProjectiveTransformV3 with given transforms -----------------------------------


@pytest.mark.parametrize("fill_mode", ["REFLECT", "WRAP", "CONSTANT", "NEAREST"])
@pytest.mark.parametrize("interpolation", ["NEAREST", "BILINEAR"])
def test_projective_transform_matches_tf(interpolation, fill_mode):
  @tf.function
  def f(x, transforms):
    return R.ImageProjectiveTransformV3(
      images=x,
      transforms=transforms,
      output_shape=[6, 7],
      fill_value=0.5,
      interpolation=interpolation,
      fill_mode=fill_mode,
    )

  fn = tfprims.convert_functional(f, _spec(IMAGES), tf.TensorSpec([2, 8]))
  c, s = np.cos(0.4), np.sin(0.4)
  transforms = np.array(
    [[c, -s, 1.5, s, c, -1.0, 0.0, 0.0], [1.3, 0.2, -2.0, 0.1, 0.8, 0.5, 0.01, -0.02]], np.float32
  )
  expected = f(IMAGES, transforms).numpy()
  np.testing.assert_allclose(fn(IMAGES, transforms), expected, rtol=1e-5, atol=1e-5)
  np.testing.assert_allclose(jax.jit(fn)(IMAGES, transforms), expected, rtol=1e-5, atol=1e-5)
  # vmap with the transforms batched too
  tb = np.stack([transforms, transforms[::-1]])
  xb = np.stack([IMAGES, -IMAGES])
  out = jax.vmap(fn)(xb, tb)
  for k in range(2):
    np.testing.assert_allclose(out[k], f(xb[k], tb[k]).numpy(), rtol=1e-5, atol=1e-5)
  ct = RNG.normal(size=expected.shape).astype(np.float32)
  ours = jax.vjp(lambda x: fn(x, transforms), IMAGES)[1](ct)[0]
  np.testing.assert_allclose(
    ours, _tf_grad(lambda x: f(x, transforms), IMAGES, ct), rtol=1e-4, atol=1e-4
  )


def test_projective_transform_uint8_and_fill_cast():
  x = RNG.integers(0, 256, size=(1, 4, 5, 2)).astype(np.uint8)
  for fill in (-2.0, 300.0, 7.7):
    f = tf.function(
      lambda im: R.ImageProjectiveTransformV3(
        images=im,
        transforms=[[1.0, 0.0, -1.5, 0.0, 1.0, 0.5, 0.0, 0.0]],
        output_shape=[4, 5],
        fill_value=fill,
        interpolation="BILINEAR",
        fill_mode="CONSTANT",
      )
    )
    fn = tfprims.convert_functional(f, _spec(x))
    np.testing.assert_array_equal(fn(x), f(x).numpy())


# --- tf.image.crop_and_resize -------------------------------------------------------------

BOXES = np.array(
  [[0.1, 0.2, 0.7, 0.9], [-0.2, 0.3, 0.5, 1.3], [0.6, 0.6, 0.2, 0.1], [0.25, 0.25, 0.25, 0.75]],
  np.float32,
)
BOX_IND = np.array([1, 0, 1, 0], np.int32)


@pytest.mark.parametrize("method", ["bilinear", "nearest"])
def test_crop_and_resize_matches_tf_with_gradients(method):
  @tf.function
  def f(x, boxes):
    return tf.image.crop_and_resize(
      x, boxes, BOX_IND, (4, 3), method=method, extrapolation_value=-1.0
    )

  fn = tfprims.convert_functional(f, _spec(IMAGES), _spec(BOXES))
  expected = f(IMAGES, BOXES).numpy()
  np.testing.assert_allclose(fn(IMAGES, BOXES), expected, rtol=1e-5, atol=1e-6)
  ct = RNG.normal(size=expected.shape).astype(np.float32)
  gi, gb = jax.vjp(fn, IMAGES, BOXES)[1](ct)
  xi, xb = tf.constant(IMAGES), tf.constant(BOXES)
  with tf.GradientTape() as tape:
    tape.watch([xi, xb])
    y = f(xi, xb)
  ti, tb = tape.gradient(y, [xi, xb], output_gradients=tf.constant(ct))
  np.testing.assert_allclose(gi, ti.numpy(), rtol=1e-5, atol=1e-5)
  np.testing.assert_allclose(gb, tb.numpy(), rtol=1e-4, atol=1e-4)
  prims = jaxpr_primitives(jax.make_jaxpr(jax.grad(lambda x: jnp.sum(fn(x, BOXES))))(IMAGES))
  assert "tf.CropAndResizeGradImage" in prims
  # vmap over images and boxes vs per-example
  xs, bs = np.stack([IMAGES, IMAGES * 3]), np.stack([BOXES, BOXES[::-1]])
  out = jax.vmap(fn)(xs, bs)
  for k in range(2):
    np.testing.assert_allclose(out[k], f(xs[k], bs[k]).numpy(), rtol=1e-5, atol=1e-6)
  assert "tf.CropAndResize" in jaxpr_primitives(jax.make_jaxpr(jax.vmap(fn))(xs, bs))


def test_crop_and_resize_out_of_range_box_index_policy():
  @tf.function
  def f(x, box_ind):
    return tf.image.crop_and_resize(x, BOXES, box_ind, (2, 2))

  fn = tfprims.convert_functional(f, _spec(IMAGES), tf.TensorSpec([4], tf.int32))
  bad = np.array([1, 2, -1, 0], np.int32)
  with pytest.raises(tf.errors.OpError, match="box_index has values outside"):
    f(IMAGES, bad)
  with tfprims.override_config("runtime_checks", False):
    with pytest.raises(tfprims.RuntimeCheckError, match=r"box_index has values outside"):
      fn(IMAGES, bad)  # known values: raises like TF
    out = np.asarray(jax.jit(fn)(IMAGES, bad))  # jitted: zero crops for bad boxes
  good = f(IMAGES, np.array([1, 0, 0, 0], np.int32)).numpy()
  np.testing.assert_allclose(out[[0, 3]], good[[0, 3]], rtol=1e-6)
  np.testing.assert_array_equal(out[[1, 2]], 0)
  with tfprims.override_config("runtime_checks", True):
    # a fresh function: jit caches the trace made above with the checks off
    fn = tfprims.convert_functional(f, _spec(IMAGES), tf.TensorSpec([4], tf.int32))
    with pytest.raises(Exception, match="box_index has values outside"):
      jax.block_until_ready(jax.jit(fn)(IMAGES, bad))
    np.testing.assert_allclose(
      jax.jit(fn)(IMAGES, np.array([1, 0, 0, 0], np.int32)), good, rtol=1e-6
    )
