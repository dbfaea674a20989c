"""A tabular model built from Keras preprocessing layers, exported as a SavedModel and
converted whole: Normalization, IntegerLookup (a lookup table as params), Hashing (the
decimal digits' FarmHash, bit for bit), CategoryEncoding and an Embedding, against
Keras-on-TF, eagerly, under jit and differentiated."""

import jax
import jax.numpy as jnp
import keras
import numpy as np
import tensorflow as tf

import tfprims


def _model():
  rng = np.random.default_rng(3)
  amount = keras.Input((2,), name="amount")
  store = keras.Input((1,), dtype="int64", name="store")
  user = keras.Input((1,), dtype="int64", name="user")
  norm = keras.layers.Normalization()
  norm.adapt(rng.normal(5.0, 2.0, size=(64, 2)).astype(np.float32))
  lookup = keras.layers.IntegerLookup(vocabulary=[10, 20, 30, 40], num_oov_indices=1)
  store_onehot = keras.layers.CategoryEncoding(num_tokens=5, output_mode="one_hot")(lookup(store))
  hashed = keras.layers.Hashing(num_bins=16)(user)
  user_vec = keras.layers.Flatten()(keras.layers.Embedding(16, 3)(hashed))
  x = keras.layers.Concatenate()([norm(amount), store_onehot, user_vec])
  out = keras.layers.Dense(1, activation="sigmoid")(keras.layers.Dense(8, "relu")(x))
  return keras.Model([amount, store, user], out)


def test_preprocessing_model_saved_model_converts_whole(tmp_path, x64):
  # x64 on: the int64 user ids beyond int32 hash as TF hashes them (x64 off names them)
  model = _model()
  path = str(tmp_path / "tabular")
  model.export(path, verbose=False)
  fn, params = tfprims.load_saved_model(path, "serve")
  assert any(k.endswith("/keys") for k in params)  # the IntegerLookup table
  amount = np.float32([[5.0, 1.0], [-3.0, 7.5], [0.0, 0.0], [12.0, 5.0]])
  # in vocabulary, out of it (the OOV index), 0; users across the int64 range
  store = np.int64([[20], [99], [0], [40]])
  user = np.int64([[0], [-1], [np.iinfo(np.int64).max], [1234567890123]])
  want = model([amount, store, user]).numpy()
  loaded = tf.saved_model.load(path)
  inputs = [amount, store, user]
  np.testing.assert_allclose(loaded.serve(inputs).numpy(), want, rtol=1e-6)
  named = dict(amount=amount, store=store, user=user)
  (got,) = jax.tree.leaves(fn(params, **named)[0])
  np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
  (jitted,) = jax.tree.leaves(jax.jit(fn)(params, **named)[0])
  np.testing.assert_allclose(jitted, want, rtol=1e-5, atol=1e-6)

  trainable = {
    k: v for k, v in params.items() if np.asarray(v).dtype.kind == "f" and not k.endswith("/values")
  }

  def loss(p):
    return jnp.sum(jax.tree.leaves(fn({**params, **p}, **named)[0])[0])

  grads = jax.grad(loss)(trainable)
  variables = {v.path: v for v in model.trainable_variables}
  with tf.GradientTape() as tape:
    total = tf.reduce_sum(model(inputs))
  tf_grads = dict(zip(variables, tape.gradient(total, list(variables.values()))))
  matched = 0
  for name, g in grads.items():
    key = next((v for v in tf_grads if name.endswith(v) or v.endswith(name)), None)
    if key is not None:
      np.testing.assert_allclose(
        g, tf.convert_to_tensor(tf_grads[key]).numpy(), rtol=1e-4, atol=1e-6, err_msg=name
      )
      matched += 1
  assert matched >= 3, (sorted(grads), sorted(tf_grads))  # both Dense layers, the embedding
