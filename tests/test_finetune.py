"""examples/finetune.py: Optax training of a converted Keras model lowers the loss,
and after writing the params back TF computes what the converted function does."""

import importlib.util
import pathlib

import numpy as np

EXAMPLE = pathlib.Path(__file__).resolve().parents[1] / "examples" / "finetune.py"


def _load():
  spec = importlib.util.spec_from_file_location("finetune_example", EXAMPLE)
  module = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(module)
  return module


def test_finetune_lowers_loss_and_tf_matches_after_write_back():
  finetune = _load()
  result = finetune.main(steps=30, verbose=False)
  losses = result["losses"]
  assert np.mean(losses[-10:]) < 0.5 * np.mean(losses[:3]), losses
  # TF (the Keras model, inference mode) now computes the converted function's outputs.
  assert result["max_diff"] < 1e-5
  assert result["accuracy"] > 0.7
  model, params = result["model"], result["params"]
  by_path = {v.path: v for v in model.variables}
  assert set(params) <= set(by_path)
  for name, value in params.items():
    np.testing.assert_array_equal(np.asarray(value), by_path[name].numpy(), err_msg=name)
  assert any("moving_mean" in k for k in params)  # state was trained along


def test_one_step_gradients_equal_tf():
  """The gradients an Optax step applies are TF's (inference mode: no dropout masks,
  whose random bits differ between TF and JAX)."""
  import jax
  import tensorflow as tf

  import tfprims

  finetune = _load()
  model = finetune.build_model(seed=3)
  spec = tf.TensorSpec([None, finetune.N_FEATURES], tf.float32)
  infer_fn, params = tfprims.convert(tf.function(lambda x: model(x, training=False)), spec)
  trainable, state = tfprims.split_trainable(infer_fn, params)
  x, y = finetune.synthetic_data(32, seed=5)

  def loss_fn(trainable):
    logits, _ = infer_fn(tfprims.merge_params(trainable, state), x)
    return finetune.cross_entropy(logits, y)

  grads = jax.jit(jax.grad(loss_fn))(trainable)
  with tf.GradientTape() as tape:
    logits = model(x, training=False)
    loss = tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(y, logits))
  by_path = {v.path: v for v in model.trainable_variables}
  tf_grads = dict(zip(by_path, tape.gradient(loss, list(by_path.values()))))
  assert set(grads) == set(tf_grads)
  for name, g in grads.items():
    np.testing.assert_allclose(
      np.asarray(g), tf_grads[name].numpy(), rtol=1e-4, atol=1e-6, err_msg=name
    )
