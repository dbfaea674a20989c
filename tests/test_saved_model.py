"""SavedModels: restored functions, signatures, ambiguity errors, TF1 SavedModels
(resource and reference variables), Keras exports, and a model saved by another process."""

import json
import os
import subprocess
import sys
import textwrap

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import tensorflow as tf

import tfprims


class Scaler(tf.Module):
  """Several concrete functions, state, and a signature."""

  def __init__(self):
    super().__init__()
    self.w = tf.Variable([1.0, -2.0, 3.0], name="w")
    self.calls = tf.Variable(0.0, trainable=False, name="calls")

  @tf.function
  def f(self, x):
    self.calls.assign_add(1.0)
    return tf.reduce_sum(x * self.w, axis=-1)

  @tf.function(input_signature=[tf.TensorSpec([None, 3], tf.float32, name="x")])
  def serve(self, x):
    return {"y": tf.tanh(x * self.w), "s": tf.reduce_sum(x, axis=-1)}

  @tf.function(input_signature=[tf.TensorSpec([None], tf.float32)])
  def pure(self, x):
    return x * 2.0 + 1.0


@pytest.fixture(scope="module")
def scaler_path(tmp_path_factory):
  m = Scaler()
  m.f(tf.zeros([2, 3]))  # (2, 3)
  m.f(tf.zeros([4, 1, 3]))  # (4, 1, 3)
  path = str(tmp_path_factory.mktemp("scaler") / "model")
  tf.saved_model.save(m, path, signatures={"serving_default": m.serve, "pure": m.pure})
  return path


def test_ambiguous_restored_function_lists_its_signatures(scaler_path):
  restored = tf.saved_model.load(scaler_path)
  with pytest.raises(tfprims.AmbiguousSignatureError) as info:
    tfprims.convert_from_restored(restored.f)
  msg = str(info.value)
  assert "float32[2, 3]" in msg and "float32[4, 1, 3]" in msg
  assert len(info.value.signatures) == 2
  with pytest.raises(
    tfprims.ConversionError, match=r"(?s)no concrete function.*float32\[7, 3\].*float32\[2, 3\]"
  ):
    tfprims.convert_from_restored(restored.f, tf.TensorSpec([7, 3]))


def test_restored_function_chosen_by_spec_matches_tf_and_updates_state(scaler_path):
  restored = tf.saved_model.load(scaler_path)
  fn, params = tfprims.convert_from_restored(restored.f, tf.TensorSpec([2, 3], tf.float32))
  assert {k: s.trainable for k, s in fn.param_specs.items()} == {"w": True, "calls": False}
  x = np.arange(6, dtype=np.float32).reshape(2, 3)
  out, new = fn(params, x)
  np.testing.assert_allclose(out, restored.f(tf.constant(x)).numpy(), rtol=1e-6)
  assert float(new["calls"]) == float(params["calls"]) + 1
  # The same function by example array instead of a spec.
  fn2, _ = tfprims.convert_from_restored(restored.f, x)
  np.testing.assert_allclose(fn2(params, x)[0], out)
  # grad w.r.t. a restored variable vs GradientTape.
  g = jax.grad(lambda p: jnp.sum(fn(p, x)[0]))(params)
  with tf.GradientTape() as tape:
    loss = tf.reduce_sum(restored.f(tf.constant(x)))
  np.testing.assert_allclose(g["w"], tape.gradient(loss, restored.w).numpy(), rtol=1e-6)


def test_load_saved_model_signature_by_name(scaler_path):
  fn, params = tfprims.load_saved_model(scaler_path)
  x = np.random.default_rng(0).normal(size=(5, 3)).astype(np.float32)
  out, new = fn(params, x=x)
  ref = tf.saved_model.load(scaler_path).signatures["serving_default"](x=tf.constant(x))
  assert set(out) == {"y", "s"}
  for k in out:
    np.testing.assert_allclose(out[k], ref[k].numpy(), rtol=1e-6, atol=1e-6)
  assert fn.__name__ == "serving_default"
  assert [s.name for s in fn.input_specs] == ["x"]
  # jit, vmap over examples.
  np.testing.assert_allclose(
    jax.jit(lambda p, x: fn(p, x=x)[0]["y"])(params, x), out["y"], rtol=1e-6
  )
  per = jax.vmap(lambda xi: fn(params, x=xi[None])[0]["y"][0])(x)
  np.testing.assert_allclose(per, out["y"], rtol=1e-6)
  # Signature inputs are keyword-only.
  with pytest.raises(tfprims.InputStructureError):
    fn(params, x)


def test_load_saved_model_errors(scaler_path, tmp_path):
  with pytest.raises(
    tfprims.ConversionError, match=r"no signature 'nope'.*'pure'.*'serving_default'"
  ):
    tfprims.load_saved_model(scaler_path, signature="nope")
  with pytest.raises(tfprims.ConversionError, match="2 signatures"):
    tfprims.load_saved_model(scaler_path, signature=None)
  with pytest.raises(tfprims.ConversionError, match="no SavedModel directory"):
    tfprims.load_saved_model(str(tmp_path / "missing"))


def test_convert_functional_from_restored(scaler_path):
  restored = tf.saved_model.load(scaler_path)
  pure = tfprims.convert_functional_from_restored(restored.signatures["pure"])
  x = np.array([1.0, 2.0], np.float32)
  out = pure(x=x)
  np.testing.assert_allclose(out["output_0"], [3.0, 5.0])
  with pytest.raises(tfprims.ConversionError, match="captures variable"):
    tfprims.convert_functional_from_restored(restored.signatures["serving_default"])


# --- TF1 SavedModels ------------------------------------------------------------------


def _build_tf1_saved_model(path, use_resource):
  with tf.Graph().as_default():
    x = tf.compat.v1.placeholder(tf.float32, [None, 3], name="x")
    ids = tf.compat.v1.placeholder(tf.int32, [None], name="ids")
    w = tf.compat.v1.get_variable(
      "dense/w",
      [3, 2],
      initializer=tf.compat.v1.random_normal_initializer(seed=1),
      use_resource=use_resource,
    )
    b = tf.compat.v1.get_variable(
      "dense/b",
      [2],
      initializer=tf.compat.v1.ones_initializer(),
      use_resource=use_resource,
      trainable=False,
    )
    emb = tf.compat.v1.get_variable(
      "emb",
      [5, 2],
      use_resource=use_resource,
      initializer=tf.compat.v1.random_uniform_initializer(seed=2),
    )
    y = tf.reduce_sum(x[:, :, None] * w, axis=1) + b + tf.nn.embedding_lookup(emb, ids)
    with tf.compat.v1.Session() as sess:
      sess.run(tf.compat.v1.global_variables_initializer())
      builder = tf.compat.v1.saved_model.Builder(path)
      sig = tf.compat.v1.saved_model.predict_signature_def(
        {"x": x, "ids": ids}, {"y": tf.nn.relu(y)}
      )
      builder.add_meta_graph_and_variables(
        sess, ["serve"], signature_def_map={"serving_default": sig}
      )
      builder.save()


@pytest.mark.parametrize("use_resource", [True, False], ids=["resource", "ref"])
def test_tf1_saved_model_converts(tmp_path, use_resource):
  path = str(tmp_path / "tf1")
  _build_tf1_saved_model(path, use_resource)
  fn, params = tfprims.load_saved_model(path)
  assert {k: fn.param_specs[k].trainable for k in params} == {
    "dense/w": True,
    "dense/b": False,
    "emb": True,
  }
  x = np.random.default_rng(0).normal(size=(4, 3)).astype(np.float32)
  ids = np.array([0, 4, 2, 2], np.int32)
  out, new = fn(params, x=x, ids=ids)
  ref = tf.saved_model.load(path).signatures["serving_default"](
    x=tf.constant(x), ids=tf.constant(ids)
  )
  np.testing.assert_allclose(out["y"], ref["y"].numpy(), rtol=1e-6, atol=1e-6)
  for k in params:
    np.testing.assert_array_equal(new[k], params[k])
  # Gradients w.r.t. all variables, including the embedding table.
  g = jax.grad(lambda p: jnp.sum(fn(p, x=x, ids=ids)[0]["y"]))(params)
  assert g["emb"].shape == (5, 2) and float(jnp.abs(g["emb"][1]).sum()) == 0.0
  text = str(jax.make_jaxpr(lambda p: fn(p, x=x, ids=ids)[0])(params))
  assert ("tf.ResourceGather" if use_resource else "tf.GatherV2") in text


def test_tf1_hub_style_module_with_tags(tmp_path):
  """A TF1 "hub module"-style SavedModel: non-default tags and signature names."""
  path = str(tmp_path / "hub")
  with tf.Graph().as_default():
    x = tf.compat.v1.placeholder(tf.float32, [None, 2], name="inputs")
    v = tf.compat.v1.get_variable(
      "module/scale",
      [2],
      use_resource=False,
      initializer=tf.compat.v1.constant_initializer([2.0, 3.0]),
    )
    with tf.compat.v1.Session() as sess:
      sess.run(tf.compat.v1.global_variables_initializer())
      builder = tf.compat.v1.saved_model.Builder(path)
      sig = tf.compat.v1.saved_model.predict_signature_def({"images": x}, {"default": x * v})
      builder.add_meta_graph_and_variables(
        sess, ["train", "hub"], signature_def_map={"default": sig}
      )
      builder.save()
  fn, params = tfprims.load_saved_model(path, signature="default", tags=["train", "hub"])
  out, _ = fn(params, images=np.ones((1, 2), np.float32))
  np.testing.assert_array_equal(out["default"], [[2.0, 3.0]])
  assert params["module/scale"].tolist() == [2.0, 3.0]


# --- another process ------------------------------------------------------------------

_SAVER = textwrap.dedent("""
    import json, sys
    import numpy as np
    import tensorflow as tf

    class Model(tf.Module):   # defined only in this process
      def __init__(self):
        super().__init__()
        rng = np.random.default_rng(0)
        self.w = tf.Variable(rng.normal(size=(4, 3)).astype(np.float32), name="w")
        self.b = tf.Variable(rng.normal(size=(3,)).astype(np.float32), name="b")

      @tf.function(input_signature=[tf.TensorSpec([None, 4], tf.float32, name="x")])
      def __call__(self, x):
        h = tf.reduce_sum(x[:, :, None] * self.w, axis=1) + self.b
        return {"probs": tf.nn.softmax(h), "logits": h}

    path = sys.argv[1]
    m = Model()
    tf.saved_model.save(m, path, signatures=m.__call__)
    x = np.linspace(-1, 1, 8, dtype=np.float32).reshape(2, 4)
    out = m(tf.constant(x))
    json.dump({"x": x.tolist(), "probs": out["probs"].numpy().tolist(),
               "logits": out["logits"].numpy().tolist()}, open(path + ".json", "w"))
""")


def test_saved_model_from_another_process(tmp_path):
  path = str(tmp_path / "other")
  env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3", CUDA_VISIBLE_DEVICES="")
  subprocess.run(
    [sys.executable, "-c", _SAVER, path], check=True, env=env, timeout=300, capture_output=True
  )
  ref = json.load(open(path + ".json"))
  fn, params = tfprims.load_saved_model(path)
  x = np.asarray(ref["x"], np.float32)
  out, _ = fn(params, x=x)
  np.testing.assert_allclose(out["logits"], ref["logits"], rtol=1e-5, atol=1e-6)
  np.testing.assert_allclose(out["probs"], ref["probs"], rtol=1e-5, atol=1e-6)
  assert set(params) == {"w", "b"}


# --- Keras export ---------------------------------------------------------------------


def test_keras_export_round_trip(tmp_path):
  import keras

  keras.utils.set_random_seed(0)
  model = keras.Sequential(
    [
      keras.Input((4,)),
      keras.layers.Dense(3, activation="relu"),
      keras.layers.BatchNormalization(),
      keras.layers.Dense(2),
    ]
  )
  path = str(tmp_path / "keras")
  model.export(path)
  x = np.random.default_rng(0).normal(size=(5, 4)).astype(np.float32)
  ref = model(x, training=False).numpy()

  fn, params = tfprims.load_saved_model(path)
  (out,) = fn(params, **{fn.input_specs[0].name: x})[0].values()
  np.testing.assert_allclose(out, ref, rtol=1e-5, atol=1e-6)
  # Param names are the Keras variable paths, as when converting the live model.
  live_fn, live_params = tfprims.convert(
    tf.function(lambda x: model(x, training=False)), tf.TensorSpec([None, 4])
  )
  assert set(params) == set(live_params) == {v.path for v in model.variables}
  assert {k: s.trainable for k, s in fn.param_specs.items()} == {
    k: s.trainable for k, s in live_fn.param_specs.items()
  }
  # The restored `serve` endpoint has one concrete function: no spec needed.
  restored = tf.saved_model.load(path)
  serve_fn, serve_params = tfprims.convert_from_restored(restored.serve)
  np.testing.assert_allclose(serve_fn(serve_params, x)[0], ref, rtol=1e-5, atol=1e-6)
  # A function of a loaded object that was already garbage-collected: a clear error.
  with pytest.raises(tfprims.ConversionError, match="keep a reference|Keep a reference"):
    tfprims.convert_from_restored(tf.saved_model.load(path).serve)
  # A gradient step on the loaded model's trainable params.
  trainable, rest = tfprims.split_trainable(fn, params)
  loss = lambda t: jnp.sum(
    list(fn(tfprims.merge_params(t, rest), **{fn.input_specs[0].name: x})[0].values())[0] ** 2
  )
  grads = jax.grad(loss)(trainable)
  assert set(grads) == set(trainable) and not any("moving" in k for k in grads)
