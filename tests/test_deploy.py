"""``tfprims export`` and ``tfprims.load_exported``: one TF-free artifact with a symbolic
batch, whose outputs equal TF's SavedModel at several batch sizes."""

import json
import os
import subprocess
import sys
import textwrap

os.environ.setdefault("JAX_PLATFORMS", "cpu")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import jax
import keras
import numpy as np
import pytest
import tensorflow as tf

import tfprims
from tfprims import cli


@pytest.fixture(autouse=True, scope="module")
def _no_persistent_cache():
  """Loading turns on JAX's persistent compilation cache for the whole process: not in
  the test process (tests/test_cache.py tests it in fresh interpreters)."""
  with tfprims.override_config("compilation_cache", None):
    yield


def run(capsys, *argv):
  code = cli.main(list(argv))
  captured = capsys.readouterr()
  return code, captured.out, captured.err


class _Serving(tf.Module):
  def __init__(self, model, shape, name):
    super().__init__()
    self.model = model
    self.serve = tf.function(
      lambda x: {"scores": self.model(x, training=False)},
      input_signature=[tf.TensorSpec([None, *shape], tf.float32, name=name)],
    )


def _transformer():
  keras.utils.set_random_seed(0)
  tokens = keras.Input((16, 8))
  x = keras.layers.MultiHeadAttention(2, 4)(tokens, tokens)
  x = keras.layers.LayerNormalization()(x + tokens)
  x = keras.layers.Dense(16, activation="gelu")(x)
  return keras.Model(tokens, keras.layers.Dense(3)(keras.layers.GlobalAveragePooling1D()(x)))


def _mobilenet():
  keras.utils.set_random_seed(0)
  return keras.applications.MobileNetV2(input_shape=(64, 64, 3), weights=None, classes=5)


@pytest.fixture(scope="module", params=["transformer", "mobilenet_v2"])
def saved(request, tmp_path_factory):
  model, shape, name = {
    "transformer": (_transformer, (16, 8), "tokens"),
    "mobilenet_v2": (_mobilenet, (64, 64, 3), "images"),
  }[request.param]
  root = tmp_path_factory.mktemp(request.param)
  module = _Serving(model(), shape, name)
  tf.saved_model.save(module, str(root / "sm"), signatures={"serving_default": module.serve})
  return root, shape, name


def test_one_artifact_every_batch_size_equals_tf(capsys, saved):
  root, shape, name = saved
  code, out, err = run(capsys, "export", str(root / "sm"), str(root / "art"))
  assert code == 0, err
  assert f"{name}: float32['batch', {', '.join(map(str, shape))}]" in out
  manifest = json.loads((root / "art" / "manifest.json").read_text())
  assert manifest["inputs"][0]["shape"][0] == "batch"
  assert manifest["outputs"][0]["name"] == "scores"
  model = tfprims.load_exported(str(root / "art"))
  served = tf.saved_model.load(str(root / "sm")).signatures["serving_default"]
  for batch in (1, 7, 32):
    x = np.random.default_rng(batch).standard_normal((batch, *shape)).astype(np.float32)
    want = served(**{name: x})["scores"].numpy()
    got = model(x)["scores"]  # positional, in signature order
    assert got.shape == want.shape
    np.testing.assert_allclose(np.asarray(got), want, rtol=1e-4, atol=1e-5)
    np.testing.assert_array_equal(np.asarray(model(**{name: x})["scores"]), np.asarray(got))


def test_loading_needs_no_tensorflow(saved):
  root, shape, name = saved
  if not (root / "art").exists():
    tf_fn, params = tfprims.load_saved_model(str(root / "sm"))
    tfprims.deploy.export(tf_fn, params, str(root / "art"))
  x = np.random.default_rng(5).standard_normal((5, *shape)).astype(np.float32)
  served = tf.saved_model.load(str(root / "sm")).signatures["serving_default"]
  np.save(root / "x.npy", x)
  np.save(root / "want.npy", served(**{name: x})["scores"].numpy())
  script = textwrap.dedent(f"""
      import sys
      class NoTensorFlow:
        def find_spec(self, name, path=None, target=None):
          if name.split(".")[0] == "tensorflow":
            raise ImportError("tensorflow is not installed here")
      sys.meta_path.insert(0, NoTensorFlow())
      import numpy as np, jax
      import tfprims
      model = tfprims.load_exported({str(root / 'art')!r})
      got = np.asarray(model(np.load({str(root / 'x.npy')!r}))["scores"])
      np.testing.assert_allclose(got, np.load({str(root / 'want.npy')!r}), rtol=1e-4, atol=1e-5)
      # Plain JAX reads it too: jax.export plus the params file.
      import json
      manifest = json.load(open({str(root / 'art' / 'manifest.json')!r}))
      exported = open({str(root / 'art' / 'model.jax_exported')!r}, "rb").read()
      exp = jax.export.deserialize(bytearray(exported))
      npz = np.load({str(root / 'art' / 'params.npz')!r})
      params = {{p["name"]: npz[p["key"]] for p in manifest["params"]}}
      plain = np.asarray(exp.call(params, np.load({str(root / 'x.npy')!r}))["scores"])
      np.testing.assert_array_equal(plain, got)
      assert "tensorflow" not in sys.modules
      print("ok")
  """)
  env = dict(os.environ, JAX_PLATFORMS="cpu")
  proc = subprocess.run(
    [sys.executable, "-c", script], capture_output=True, text=True, env=env, timeout=600
  )
  assert proc.returncode == 0 and proc.stdout.strip().endswith("ok"), proc.stderr[-3000:]


def test_bfloat16_params_and_keyword_errors(tmp_path):
  v = tf.Variable(np.arange(4, dtype=np.float32).astype(tf.bfloat16.as_numpy_dtype), name="file")

  @tf.function(input_signature=[tf.TensorSpec([None, 4], tf.bfloat16, name="x")])
  def f(x):
    return x * v

  fn, params = tfprims.convert(f)
  tfprims.deploy.export(fn, params, str(tmp_path))
  model = tfprims.load_exported(str(tmp_path))
  assert model.params["file"].dtype == jax.numpy.bfloat16
  x = np.ones((3, 4), np.float32)
  np.testing.assert_array_equal(
    np.asarray(model(x.astype(jax.numpy.bfloat16)), np.float32),
    np.asarray(f(tf.cast(x, tf.bfloat16)), np.float32),
  )
  with pytest.raises(
    tfprims.InputDtypeError, match="'x' has dtype float32, the artifact takes bfloat16"
  ):
    model(x)  # nothing is cast
  with pytest.raises(TypeError, match="missing inputs"):
    model()
  with pytest.raises(TypeError, match="unknown input 'y'"):
    model(y=x)


def _exported(capsys, root, model, shape, name):
  """``model`` saved as a SavedModel serving ``name`` of [None, *shape] and exported by
  ``tfprims export``: the command's output, the loaded artifact and TF's signature."""
  module = _Serving(model, shape, name)
  tf.saved_model.save(module, str(root / "sm"), signatures={"serving_default": module.serve})
  code, out, err = run(capsys, "export", str(root / "sm"), str(root / "art"))
  assert code == 0, err
  served = tf.saved_model.load(str(root / "sm")).signatures["serving_default"]
  return out, tfprims.load_exported(str(root / "art")), served


def test_shape_arithmetic_on_the_symbolic_batch(capsys, tmp_path):
  """Keras Dense on 3-D inputs (Tensordot: Shape -> GatherV2 -> Prod -> Pack -> Reshape)
  and Flatten compute with tf.shape(x): the symbolic batch flows through that
  arithmetic into the reshapes' static shapes."""
  keras.utils.set_random_seed(1)
  tokens = keras.Input((16, 8))
  x = keras.layers.Dense(16, activation="gelu")(tokens)
  x = keras.layers.Flatten()(x)
  out, model, served = _exported(
    capsys, tmp_path, keras.Model(tokens, keras.layers.Dense(3)(x)), (16, 8), "tokens"
  )
  assert "tokens: float32['batch', 16, 8]" in out
  for batch in (1, 7):
    x = np.random.default_rng(batch).standard_normal((batch, 16, 8)).astype(np.float32)
    np.testing.assert_allclose(
      np.asarray(model(x)["scores"]), served(tokens=x)["scores"].numpy(), rtol=1e-4, atol=1e-5
    )
  # --batch: one concrete size instead.
  code, out, err = run(
    capsys, "export", str(tmp_path / "sm"), str(tmp_path / "art7"), "--batch", "7"
  )
  assert code == 0 and "tokens: float32[7, 16, 8]" in out, err


def _recurrent():
  """LSTM and GRU (While loops, TensorLists, zero states filled from tf.shape(x)[0]) and a
  Cropping1D (a StridedSlice of the symbolic batch's tensor)."""
  keras.utils.set_random_seed(2)
  tokens = keras.Input((12, 6))
  x = keras.layers.LSTM(8, return_sequences=True)(tokens)
  x = keras.layers.Cropping1D((1, 2))(x)
  return keras.Model(tokens, keras.layers.Dense(3)(keras.layers.GRU(5)(x)))


def _convolutional():
  """Batch norm, padding, max and average pools, a depthwise convolution and cropping:
  the ops whose gradients are Pad/Slice/StridedSliceGrad, MaxPoolGrad and backprops."""
  keras.utils.set_random_seed(4)
  images = keras.Input((16, 16, 3))
  x = keras.layers.Conv2D(8, 3, padding="same")(images)
  x = keras.layers.ReLU()(keras.layers.BatchNormalization()(x))
  x = keras.layers.MaxPooling2D(3, strides=2, padding="same")(keras.layers.ZeroPadding2D(1)(x))
  x = keras.layers.DepthwiseConv2D(3, strides=2, padding="same")(x)
  x = keras.layers.AveragePooling2D(2)(keras.layers.Cropping2D(1)(x))
  return keras.Model(images, keras.layers.Dense(3)(keras.layers.GlobalAveragePooling2D()(x)))


def test_recurrent_models_export_with_a_symbolic_batch(capsys, tmp_path):
  """The LSTM's zero state is a Fill of (tf.shape(x)[0], units): built in the program (a
  symbolic size is never folded), its TensorLists allocated there too."""
  out, model, served = _exported(capsys, tmp_path, _recurrent(), (12, 6), "tokens")
  assert "tokens: float32['batch', 12, 6]" in out
  for batch in (1, 5):
    x = np.random.default_rng(batch).standard_normal((batch, 12, 6)).astype(np.float32)
    np.testing.assert_allclose(
      np.asarray(model(x)["scores"]), served(tokens=x)["scores"].numpy(), rtol=1e-4, atol=1e-5
    )


@pytest.mark.parametrize(
  "build, shape",
  [(_convolutional, (16, 16, 3)), (_recurrent, (12, 6))],
  ids=["convolutional", "recurrent"],
)
def test_a_training_step_exports_with_a_symbolic_batch(build, shape):
  """jax.grad of a converted model, exported once for every batch size, equals TF's
  gradients (GradientTape) of the same loss at several sizes: the gradient rules keep
  the symbolic batch in the shapes they pass on (Reshape, BroadcastTo, Fill, Slice,
  StridedSliceGrad, the backprops, MaxPoolGrad)."""
  model = build()
  fn, params = tfprims.convert(
    tf.function(lambda x: model(x, training=False)), tf.TensorSpec([None, *shape], tf.float32)
  )

  def loss(params, x):
    return (fn(params, x)[0] ** 2).sum()

  (b,) = jax.export.symbolic_shape("b")
  exported = jax.export.export(jax.jit(jax.grad(loss, argnums=(0, 1))))(
    params, jax.ShapeDtypeStruct((b, *shape), np.float32)
  )
  variables = {v.path: v for v in model.trainable_variables}
  assert set(variables) <= set(params)
  for batch in (1, 3):
    x = np.random.default_rng(batch).standard_normal((batch, *shape)).astype(np.float32)
    tx = tf.constant(x)
    with tf.GradientTape() as tape:
      tape.watch(tx)
      want_loss = tf.reduce_sum(model(tx, training=False) ** 2)
    want = tape.gradient(want_loss, [tx] + list(variables.values()))
    grad_params, grad_x = exported.call(params, x)
    np.testing.assert_allclose(np.asarray(grad_x), want[0].numpy(), rtol=1e-4, atol=1e-5)
    for name, w in zip(variables, want[1:]):
      np.testing.assert_allclose(
        np.asarray(grad_params[name]), w.numpy(), rtol=1e-4, atol=1e-5, err_msg=name
      )


def test_recurrent_models_export_with_a_symbolic_sequence_length(capsys, tmp_path):
  """Served with [None, None, 6]: the loops' trip count is the symbolic length (a scan of
  that length, TensorLists of that length), so the artifact runs every batch size and
  sequence length, and its training step (jax.grad, exported with both dims symbolic)
  equals TF's gradients."""
  keras.utils.set_random_seed(5)
  tokens = keras.Input((None, 6))
  x = keras.layers.Masking()(tokens)  # all-zero steps are skipped
  x = keras.layers.Bidirectional(keras.layers.LSTM(8, return_sequences=True))(x)
  model = keras.Model(tokens, keras.layers.Dense(3)(keras.layers.GRU(5)(x)))
  out, exported, served = _exported(capsys, tmp_path, model, (None, 6), "tokens")
  assert "tokens: float32['batch', 'tokens_1', 6]" in out
  fn, params = tfprims.load_saved_model(str(tmp_path / "sm"))
  b, t = jax.export.symbolic_shape("b, t")
  grad = jax.export.export(
    jax.jit(jax.grad(lambda x: (fn(params, tokens=x)[0]["scores"] ** 2).sum()))
  )(jax.ShapeDtypeStruct((b, t, 6), np.float32))
  for batch, length in [(1, 4), (3, 11)]:
    x = np.random.default_rng(length).standard_normal((batch, length, 6)).astype(np.float32)
    x[0, -2:] = 0
    np.testing.assert_allclose(
      np.asarray(exported(x)["scores"]), served(tokens=x)["scores"].numpy(), rtol=1e-4, atol=1e-5
    )
    tx = tf.constant(x)
    with tf.GradientTape() as tape:
      tape.watch(tx)
      loss = tf.reduce_sum(model(tx, training=False) ** 2)
    np.testing.assert_allclose(
      np.asarray(grad.call(x)), tape.gradient(loss, tx).numpy(), rtol=1e-4, atol=1e-5
    )


def _diagonals(m, x):
  """MatrixSetDiagV3, MatrixDiagPartV3 and MatrixDiagV3 (two diagonals, a size from the
  batch) on [batch, batch] matrices."""
  b = tf.shape(x)[0]
  two = tf.linalg.diag(tf.stack([x[:, 0], x[:, 1]]), k=(-1, 0), num_rows=b + 1, num_cols=b)
  band = tf.linalg.diag_part(m, k=(-1, 1), padding_value=0.5)
  return tf.linalg.set_diag(m, tf.linalg.diag_part(m) ** 2) + two[1:] + tf.reduce_sum(band)


_ON_THE_BATCH = {
  # tf.range of the batch: a Range of the program; GatherNd bounds it by the batch
  "range_gather_nd": lambda x: tf.gather_nd(
    x, tf.stack([tf.range(tf.shape(x)[0]), tf.zeros([tf.shape(x)[0]], tf.int32)], 1)
  ),
  # a Tile by the batch (a class token repeated per example); a Fill of a batch shape
  "tile_by_batch": lambda x: tf.tile(x[:1], [tf.shape(x)[0], 1]) * x,
  "zeros_of_batch": lambda x: tf.concat([x, tf.zeros([tf.shape(x)[0], 2])], 1),
  # top_k's and sort's tangents gather each row (no stitch table for b rows)
  "top_k": lambda x: tf.math.top_k(x, 3).values,
  "sort": lambda x: tf.sort(x, axis=-1),
  "softmax_cross_entropy": lambda x: tf.nn.softmax_cross_entropy_with_logits(
    tf.one_hot(tf.zeros([tf.shape(x)[0]], tf.int32), 6), x
  ),
  "tensor_scatter": lambda x: tf.tensor_scatter_nd_add(x, [[0, 1]], [1.0]),
  "gather_columns": lambda x: tf.gather(x, [0, 2], axis=1),
  "batched_gather": lambda x: tf.gather(x, tf.argsort(x, axis=1)[:, :2], batch_dims=1),
  "strided_slices": lambda x: x[-1:] + x[::2][:1] + tf.reverse(x, [0])[1:2],
  # a loop over the batch: a scan of symbolic length
  "map_fn": lambda x: tf.map_fn(lambda row: row * tf.reduce_max(row), x),
  # [batch, batch] matrices (contrastive losses): tf.eye of the batch masks the
  # similarities; the diagonal ops' index tables are the program's
  "eye_mask": lambda x: tf.where(tf.eye(tf.shape(x)[0], dtype=tf.bool), 0.0, x @ tf.transpose(x)),
  "diagonals": lambda x: _diagonals(x @ tf.transpose(x), x),
  "one_hot_of_the_batch": lambda x: tf.one_hot(tf.range(tf.shape(x)[0]), tf.shape(x)[0]) @ x,
  # borders of the batch axis: gathers of indices counted from its symbolic end
  "reflect_the_batch": lambda x: tf.pad(x, [[1, 1], [0, 2]], mode="REFLECT"),
  "mirror_the_batch": lambda x: tf.pad(x, [[2, 1], [1, 0]], mode="SYMMETRIC"),
  # sorting along the batch axis: a TopKV2 of k = batch, a sort of the program
  "sort_the_batch": lambda x: tf.sort(x, axis=0, direction="DESCENDING"),
  "argsort_by_a_column": lambda x: tf.gather(x, tf.argsort(x[:, 0])),
  # linspace(0, 1, batch): its Range bound is max(batch - 2, 0)
  "linspace": lambda x: tf.linspace(0.0, 1.0, tf.shape(x)[0])[:, None] * x,
}


@pytest.mark.parametrize("name", sorted(_ON_THE_BATCH))
def test_ops_on_a_symbolic_batch_equal_tf_with_their_gradients(name):
  """Ops whose sizes or indices come from the batch, exported once with a symbolic batch:
  values and input gradients equal TF's at several batch sizes."""
  _export_equals_tf(_ON_THE_BATCH[name], [None, 6], "b", (), [(2, 6), (5, 6)])


def _export_equals_tf(f, signature, symbols, constraints, shapes):
  """``f`` converted for ``signature``, exported with its unknown dims ``symbols`` (and
  ``constraints``), and the gradient of its squared sum too: both equal TF's (values,
  GradientTape) at each of ``shapes``."""
  fn, params = tfprims.convert(tf.function(f), tf.TensorSpec(signature, tf.float32))
  dims = jax.export.symbolic_shape(symbols, constraints=constraints)
  spec = jax.ShapeDtypeStruct(tuple(dims) + tuple(signature[len(dims) :]), np.float32)
  forward = jax.export.export(jax.jit(lambda x: fn(params, x)[0]))(spec)
  grad = jax.export.export(jax.jit(jax.grad(lambda x: (fn(params, x)[0] ** 2).sum())))(spec)
  for shape in shapes:
    x = tf.constant(np.random.default_rng(sum(shape)).standard_normal(shape), tf.float32)
    with tf.GradientTape() as tape:
      tape.watch(x)
      y = f(x)
      loss = tf.reduce_sum(y**2)
    np.testing.assert_allclose(np.asarray(forward.call(x.numpy())), y.numpy(), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(
      np.asarray(grad.call(x.numpy())),
      tf.convert_to_tensor(tape.gradient(loss, x)).numpy(),
      rtol=1e-5,
      atol=1e-5,
    )


def test_an_unknown_image_size_is_symbolic(capsys, tmp_path):
  """A fully convolutional model served for any image size ([None, None, None, 3]): its
  height and width are symbolic too; strided SAME convolutions and pools pad by an amount
  that depends on the size's parity, and the CPU lowerings, which choose by the maps'
  sizes, lower the default instead. The artifact equals TF at several sizes."""
  keras.utils.set_random_seed(3)
  images = keras.Input((None, None, 3))
  x = keras.layers.Conv2D(8, 3, strides=2, padding="same", activation="relu")(images)
  x = keras.layers.DepthwiseConv2D(3, padding="same")(x)
  x = keras.layers.Conv2D(12, 1)(x)
  x = keras.layers.MaxPooling2D(3, strides=2, padding="same")(x)
  x = keras.layers.AveragePooling2D(2, padding="valid")(x)
  scores = keras.layers.Dense(4)(keras.layers.GlobalAveragePooling2D()(x))
  out, model, served = _exported(
    capsys, tmp_path, keras.Model(images, scores), (None, None, 3), "images"
  )
  assert "images: float32['batch', 'images_1', 'images_2', 3]" in out
  for shape in [(1, 17, 23, 3), (3, 32, 32, 3), (2, 45, 20, 3)]:
    x = np.random.default_rng(shape[1]).standard_normal(shape).astype(np.float32)
    np.testing.assert_allclose(
      np.asarray(model(x)["scores"]), served(images=x)["scores"].numpy(), rtol=1e-4, atol=1e-5
    )


@pytest.mark.parametrize("padding", ["same", "valid"])
def test_a_training_step_exports_with_a_symbolic_image_size(padding):
  """jax.grad through strided convolutions, a depthwise convolution, pools and a
  transposed convolution, exported for any batch and image size: the transposed
  convolutions' pads are symbolic there (lax.pad applies them), and equal TF's
  gradients at several sizes."""
  keras.utils.set_random_seed(6)
  images = keras.Input((None, None, 3))
  x = keras.layers.Conv2D(6, 3, strides=2, padding=padding, activation="relu")(images)
  x = keras.layers.DepthwiseConv2D(3, strides=2, padding=padding)(x)
  x = keras.layers.MaxPooling2D(3, strides=2, padding=padding)(
    keras.layers.Conv2DTranspose(4, 3, strides=2, padding=padding)(x)
  )
  x = keras.layers.AveragePooling2D(2, padding=padding)(x)
  model = keras.Model(images, keras.layers.Dense(2)(keras.layers.GlobalMaxPooling2D()(x)))
  fn, params = tfprims.convert(
    tf.function(lambda x: model(x, training=False)),
    tf.TensorSpec([None, None, None, 3], tf.float32),
  )
  b, h, w = jax.export.symbolic_shape("b, h, w")
  grad = jax.export.export(
    jax.jit(jax.grad(lambda p, x: (fn(p, x)[0] ** 2).sum(), argnums=(0, 1)))
  )(params, jax.ShapeDtypeStruct((b, h, w, 3), np.float32))
  variables = {v.path: v for v in model.trainable_variables}
  for shape in [(1, 23, 30, 3), (2, 32, 27, 3)]:
    x = tf.constant(np.random.default_rng(shape[1]).standard_normal(shape), tf.float32)
    with tf.GradientTape() as tape:
      tape.watch(x)
      loss = tf.reduce_sum(model(x, training=False) ** 2)
    want = tape.gradient(loss, [x] + list(variables.values()))
    got_params, got_x = grad.call(params, x.numpy())
    np.testing.assert_allclose(np.asarray(got_x), want[0].numpy(), rtol=1e-4, atol=1e-5)
    for name, g in zip(variables, want[1:]):
      np.testing.assert_allclose(
        np.asarray(got_params[name]), g.numpy(), rtol=1e-4, atol=1e-4, err_msg=name
      )


class _Doubling(keras.layers.Layer):
  """Resizes to twice the (unknown) image size: a size computed from tf.shape."""

  def __init__(self, method):
    super().__init__()
    self.method = method

  def call(self, x):
    return tf.image.resize(x, 2 * tf.shape(x)[1:3], method=self.method)


@pytest.mark.parametrize("interpolation", ["bilinear", "nearest", "bicubic", "area"])
def test_resizing_an_unknown_image_size(capsys, tmp_path, interpolation):
  """A model that resizes any image to 12×12 (Keras Resizing) and to twice its unknown
  size: the resize's index tables are computed by the program from the
  symbolic size, with TF's float32 arithmetic; values equal TF's at several sizes, and
  the gradient exports too."""
  keras.utils.set_random_seed(7)
  images = keras.Input((None, None, 3))
  x = keras.layers.Resizing(12, 12, interpolation=interpolation)(images)
  x = keras.layers.Conv2D(4, 3)(x)
  y = _Doubling(interpolation)(images)
  scores = keras.layers.Dense(2)(
    keras.layers.GlobalAveragePooling2D()(x) + keras.layers.GlobalAveragePooling2D()(y)[:, :1]
  )
  out, model, served = _exported(
    capsys, tmp_path, keras.Model(images, scores), (None, None, 3), "images"
  )
  assert "images: float32['batch', 'images_1', 'images_2', 3]" in out
  fn, params = tfprims.load_saved_model(str(tmp_path / "sm"))
  b, h, w = jax.export.symbolic_shape("b, h, w")
  loss = lambda x: (fn(params, images=x)[0]["scores"] ** 2).sum()
  grad = jax.export.export(jax.jit(jax.grad(loss)))(jax.ShapeDtypeStruct((b, h, w, 3), np.float32))
  for shape in [(1, 5, 31, 3), (2, 24, 17, 3), (1, 12, 12, 3)]:
    x = np.random.default_rng(shape[1]).standard_normal(shape).astype(np.float32)
    np.testing.assert_allclose(
      np.asarray(model(x)["scores"]), served(images=x)["scores"].numpy(), rtol=1e-4, atol=1e-5
    )
    np.testing.assert_allclose(
      np.asarray(grad.call(x)), jax.jit(jax.grad(loss))(x), rtol=1e-4, atol=1e-5
    )


def test_an_op_that_needs_concrete_sizes_names_itself(capsys, tmp_path):
  """ResizeArea with align_corners needs the input's size as an int (its rows reach up
  to twice as many cells past the edge): a symbolic image size is a SymbolicShapeError
  naming the node and the symbolic shapes, not JAX's tracer error."""

  class Resizer(tf.Module):
    @tf.function(input_signature=[tf.TensorSpec([None, None, None, 3], tf.float32)])
    def __call__(self, x):
      return tf.raw_ops.ResizeArea(images=x, size=[6, 5], align_corners=True)

  tf.saved_model.save(Resizer(), str(tmp_path / "sm"))
  code, _, err = run(capsys, "export", str(tmp_path / "sm"), str(tmp_path / "art"))
  assert code == 2 and "SymbolicShapeError: ResizeArea node" in err, err
  assert "symbolic dims" in err and "--batch" in err and "Traceback" not in err
  fn, params = tfprims.load_saved_model(str(tmp_path / "sm"))
  with pytest.raises(tfprims.errors.SymbolicShapeError, match="x_1"):
    tfprims.deploy.export(fn, params, str(tmp_path / "art"))
  # Concrete sizes export; a shape for an input the signature does not have is refused.
  code, out, err = run(
    capsys, "export", str(tmp_path / "sm"), str(tmp_path / "art8"), "--shape", "x=2,8,8,3"
  )
  assert code == 0 and "x: float32[2, 8, 8, 3]" in out, err
  x = np.random.default_rng(0).standard_normal((2, 8, 8, 3)).astype(np.float32)
  (got,) = jax.tree_util.tree_leaves(tfprims.load_exported(str(tmp_path / "art8"))(x))
  np.testing.assert_allclose(np.asarray(got), Resizer()(x).numpy(), rtol=1e-5)
  with pytest.raises(tfprims.errors.InputStructureError, match=r"unknown inputs \['y'\]"):
    tfprims.deploy.export(fn, params, str(tmp_path / "art9"), shapes={"y": (1, 8, 8, 3)})
  with pytest.raises(SystemExit):
    run(capsys, "export", str(tmp_path / "sm"), str(tmp_path / "art9"), "--shape", "x=2,a")


def test_export_errors_are_clean(capsys, tmp_path):
  class Zeros(tf.Module):
    @tf.function(input_signature=[tf.TensorSpec([None, 2, 3], tf.float32)])
    def __call__(self, x):
      return x + tf.zeros([tf.shape(x)[0] * 2, 2, 3])[:1]

  tf.saved_model.save(Zeros(), str(tmp_path / "sm"))
  code, _, err = run(
    capsys, "export", str(tmp_path / "sm"), str(tmp_path / "art"), "--no-batch-polymorphic"
  )
  assert code == 2 and "InputShapeError" in err and "unknown dim 0" in err
  code, _, err = run(capsys, "export", str(tmp_path / "nope"), str(tmp_path / "art"))
  assert code == 2 and "not a SavedModel directory" in err
  with pytest.raises(FileNotFoundError):
    tfprims.load_exported(str(tmp_path / "nope"))
  (tmp_path / "other").mkdir()
  (tmp_path / "other" / "manifest.json").write_text('{"format": "something else"}')
  with pytest.raises(ValueError, match="not a tfprims export artifact"):
    tfprims.load_exported(str(tmp_path / "other"))


def test_frozen_graph_and_multi_platform_artifact(capsys, tmp_path):
  keras.utils.set_random_seed(2)
  model = keras.Sequential([keras.Input((4, 3)), keras.layers.Flatten(), keras.layers.Dense(2)])
  fn = tf.function(lambda x: model(x)).get_concrete_function(
    tf.TensorSpec([None, 4, 3], tf.float32, name="x")
  )
  from tensorflow.python.framework import convert_to_constants

  frozen = convert_to_constants.convert_variables_to_constants_v2(fn).graph.as_graph_def()
  (tmp_path / "g.pb").write_bytes(frozen.SerializeToString())
  output = fn.outputs[0].name
  code, _, err = run(capsys, "export", str(tmp_path / "g.pb"), str(tmp_path / "art"))
  assert code == 2 and "--inputs and --outputs" in err
  code, out, err = run(
    capsys,
    "export",
    str(tmp_path / "g.pb"),
    str(tmp_path / "art"),
    "--inputs",
    "x",
    "--outputs",
    output,
    "--platforms",
    "cpu,cuda",
  )
  assert code == 0, err
  manifest = json.loads((tmp_path / "art" / "manifest.json").read_text())
  assert manifest["platforms"] == ["cpu", "cuda"] and manifest["params"] == []
  assert manifest["outputs"][0]["name"] == output
  loaded = tfprims.load_exported(str(tmp_path / "art"))
  for batch in (1, 6):
    x = np.random.default_rng(batch).standard_normal((batch, 4, 3)).astype(np.float32)
    np.testing.assert_allclose(np.asarray(loaded(x)[0]), model(x).numpy(), rtol=1e-5, atol=1e-6)


def test_constraints_decide_comparisons_of_symbolic_dims(capsys, tmp_path):
  """top_k of 2 along the batch axis and a reflecting pad of 2 of it are valid only for
  batches of at least 2 and 3: with a symbolic batch JAX cannot decide that, and the
  error says how to state it; `--constraint 'batch >= 3'` exports an artifact that
  equals TF and refuses smaller batches when called."""

  class Ranking(tf.Module):
    @tf.function(input_signature=[tf.TensorSpec([None, 4], tf.float32)])
    def __call__(self, x):
      top = tf.math.top_k(tf.transpose(x), 2).values
      return tf.reduce_sum(tf.pad(x, [[2, 0], [0, 0]], mode="REFLECT"), 0) + top[:, 0]

  module = Ranking()
  tf.saved_model.save(module, str(tmp_path / "sm"))
  code, _, err = run(capsys, "export", str(tmp_path / "sm"), str(tmp_path / "art"))
  assert code == 2 and "SymbolicShapeError: TopKV2 node" in err, err
  assert "--constraint 'batch >= 2'" in err and "inconclusive" in err
  code, out, err = run(
    capsys, "export", str(tmp_path / "sm"), str(tmp_path / "art"), "--constraint", "batch >= 3"
  )
  assert code == 0, err
  model = tfprims.load_exported(str(tmp_path / "art"))
  assert model.manifest["constraints"] == ["batch >= 3"]
  for batch in (3, 8):
    x = np.random.default_rng(batch).standard_normal((batch, 4)).astype(np.float32)
    (got,) = jax.tree_util.tree_leaves(model(x))
    np.testing.assert_allclose(np.asarray(got), module(x).numpy(), rtol=1e-6)
  with pytest.raises(ValueError, match="batch >= 3"):
    model(np.zeros((2, 4), np.float32))
  # A constraint on a symbol the inputs do not have, one without symbolic dims and a
  # malformed one are refused.
  fn, params = tfprims.load_saved_model(str(tmp_path / "sm"))
  with pytest.raises(tfprims.errors.InputShapeError, match="symbolic dims are batch"):
    tfprims.deploy.export(fn, params, str(tmp_path / "bad"), constraints=["height >= 3"])
  with pytest.raises(tfprims.errors.InputShapeError, match="batch >="):
    tfprims.deploy.export(fn, params, str(tmp_path / "bad"), constraints=["batch >="])
  with pytest.raises(tfprims.errors.InputShapeError, match="every input dim is concrete"):
    tfprims.deploy.export(fn, params, str(tmp_path / "bad"), batch=4, constraints=["batch >= 3"])


_UNKNOWN_SIZES = {
  # name: (fn, signature, symbols, constraints, shapes): see _export_equals_tf
  # spectrograms of any length: frame counts are floor divisions of the length
  "stft": (
    lambda x: tf.abs(tf.signal.stft(x[..., 0], 8, 4, 8)),
    [None, None, 2],
    "b, t",
    ("t >= 8",),
    [(1, 9, 2), (2, 16, 2)],
  ),
  "frame_pad_end": (
    lambda x: tf.signal.frame(x, 4, 3, pad_end=True, axis=1),
    [None, None, 2],
    "b, t",
    ("t >= 4",),
    [(1, 4, 2), (2, 11, 2)],
  ),
  # an image of any size padded up to a multiple of 4: (4 - h % 4) % 4
  "pad_to_a_multiple": (
    lambda x: tf.pad(
      x, [[0, 0], [0, (4 - tf.shape(x)[1] % 4) % 4], [0, (4 - tf.shape(x)[2] % 4) % 4], [0, 0]]
    ),
    [None, None, None, 3],
    "b, h, w",
    (),
    [(1, 9, 11, 3), (2, 16, 13, 3)],
  ),
  # a crop needs the image to be at least as large: constraints say it is
  # image_gradients concatenates a zero row: its gradient splits an axis of unknown size
  "image_gradients": (
    lambda x: tf.image.image_gradients(x)[0] * tf.image.image_gradients(x)[1],
    [None, None, None, 3],
    "b, h, w",
    (),
    [(1, 9, 11, 3), (2, 4, 6, 3)],
  ),
  # morphology of any image size: window masks and winner indices are the program's
  "dilation_and_erosion": (
    lambda x: (
      tf.nn.dilation2d(
        x, tf.reshape(tf.range(27.0), [3, 3, 3]) / 27.0, [1, 2, 1, 1], "SAME", "NHWC", [1, 1, 2, 1]
      )
      - tf.nn.erosion2d(x, tf.ones([2, 3, 3]), [1, 1, 1, 1], "VALID", "NHWC", [1, 1, 1, 1])[
        :, :1, :1
      ]
    ),
    [None, None, None, 3],
    "b, h, w",
    ("h >= 2", "w >= 3"),
    [(1, 9, 11, 3), (2, 4, 6, 3)],
  ),
  "crop_and_pad_to_bounding_box": (
    lambda x: tf.image.pad_to_bounding_box(
      tf.image.crop_to_bounding_box(x, 1, 1, 3, 3), 1, 2, 5, 6
    ),
    [None, None, None, 3],
    "b, h, w",
    ("h >= 4", "w >= 4"),
    [(1, 8, 6, 3), (2, 4, 12, 3)],
  ),
}


@pytest.mark.parametrize("name", sorted(_UNKNOWN_SIZES))
def test_signal_and_image_idioms_export_for_unknown_sizes(name):
  """Shape arithmetic on unknown lengths and image sizes (floor divisions and remainders
  of them) folds to symbolic dims; with the constraints the graph needs, the exported
  function and its gradient equal TF's at several sizes."""
  _export_equals_tf(*_UNKNOWN_SIZES[name])
