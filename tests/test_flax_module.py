"""tfprims.flax_module.TFModule: a converted Keras model trained as a Flax NNX module with
Optax, its BatchNorm statistics updated like TF's, its gradients TF's."""

import os

os.environ.setdefault("JAX_PLATFORMS", "cpu")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import jax
import jax.numpy as jnp
import keras
import numpy as np
import optax
import pytest
import tensorflow as tf

nnx = pytest.importorskip("flax.nnx")

import tfprims  # noqa: E402  (after the flax importorskip)
from tfprims.flax_module import TFModule  # noqa: E402


def _model():
  keras.utils.set_random_seed(0)
  return keras.Sequential(
    [
      keras.Input((6,)),
      keras.layers.Dense(16),
      keras.layers.BatchNormalization(momentum=0.8),
      keras.layers.ReLU(),
      keras.layers.Dropout(0.2),
      keras.layers.Dense(3),
    ]
  )


def _data(n, seed):
  rng = np.random.default_rng(seed)
  y = rng.integers(0, 3, n)
  x = np.eye(3, 6)[y] * 2.0 + rng.standard_normal((n, 6))
  return x.astype(np.float32), y.astype(np.int32)


def _xent(logits, y):
  return -jnp.mean(jnp.take_along_axis(jax.nn.log_softmax(logits), y[:, None], axis=1))


def test_variables_split_into_params_and_batch_stats():
  model = _model()
  fn, params = tfprims.convert(
    tf.function(lambda x: model(x, training=True)), tf.TensorSpec([None, 6], tf.float32)
  )
  module = TFModule(fn, params)
  trainable = {v.path for v in model.trainable_variables}
  assert set(module.params) == trainable
  assert set(module.state) == set(params) - trainable
  assert any("moving_mean" in k for k in module.state)
  assert len(jax.tree.leaves(nnx.state(module, nnx.Param))) == len(trainable)
  assert len(jax.tree.leaves(nnx.state(module, nnx.BatchStat))) == len(module.state)
  # A call in training mode updates the moving statistics as TF's call does.
  x, _ = _data(32, 0)
  before = {k: np.asarray(v[...]) for k, v in module.state.items()}
  module(x)
  model(x, training=True)
  by_path = {v.path: v.numpy() for v in model.variables}
  for k, v in module.state.items():
    if "moving" in k:
      assert not np.allclose(np.asarray(v[...]), before[k]), k
      np.testing.assert_allclose(np.asarray(v[...]), by_path[k], rtol=1e-5, atol=1e-6)


def test_train_with_optax_loss_decreases_and_tf_matches_after_write_back():
  model = _model()
  spec = tf.TensorSpec([None, 6], tf.float32)
  fn, params = tfprims.convert(tf.function(lambda x: model(x, training=True)), spec)
  infer_fn, _ = tfprims.convert(tf.function(lambda x: model(x, training=False)), spec)
  module = TFModule(fn, params)
  optimizer = nnx.Optimizer(module, optax.adam(1e-2), wrt=nnx.Param)

  @nnx.jit
  def train_step(module, optimizer, x, y):
    loss, grads = nnx.value_and_grad(lambda m: _xent(m(x), y))(module)
    optimizer.update(module, grads)
    return loss

  losses = []
  for step in range(40):
    x, y = _data(64, step)
    losses.append(float(train_step(module, optimizer, x, y)))
  assert np.mean(losses[-5:]) < 0.5 * np.mean(losses[:3]), losses
  trained = module.tf_params()
  tfprims.assign_variables(fn, trained)
  x, _ = _data(50, 99)
  ours = np.asarray(infer_fn({k: trained[k] for k in infer_fn.param_specs}, x)[0])
  np.testing.assert_allclose(ours, model(x, training=False).numpy(), rtol=1e-5, atol=1e-5)


def test_gradients_are_tfs():
  model = _model()
  fn, params = tfprims.convert(
    tf.function(lambda x: model(x, training=False)), tf.TensorSpec([None, 6], tf.float32)
  )
  module = TFModule(fn, params)
  x, y = _data(16, 3)
  grads = nnx.grad(lambda m: _xent(m(x), y))(module)
  with tf.GradientTape() as tape:
    loss = tf.reduce_mean(
      tf.nn.sparse_softmax_cross_entropy_with_logits(y, model(x, training=False))
    )
  tf_grads = dict(
    zip([v.path for v in model.trainable_variables], tape.gradient(loss, model.trainable_variables))
  )
  assert set(grads.params) == set(tf_grads)
  for name, g in grads.params.items():
    np.testing.assert_allclose(
      np.asarray(g[...]), tf_grads[name].numpy(), rtol=1e-4, atol=1e-6, err_msg=name
    )


def test_random_ops_draw_from_rngs():
  fn, params = tfprims.convert(
    tf.function(lambda x: tf.nn.dropout(x, rate=0.5)), tf.TensorSpec([1000], tf.float32)
  )
  module = TFModule(fn, params, rngs=nnx.Rngs(0))
  a, b = module(np.ones(1000, np.float32)), module(np.ones(1000, np.float32))
  assert not np.array_equal(np.asarray(a), np.asarray(b))  # a fresh key per call
  assert 350 < int((np.asarray(a) == 0).sum()) < 650
  with pytest.raises(tfprims.MissingRngError):
    TFModule(fn, params)(np.ones(1000, np.float32))


def test_tfmodule_is_a_lazy_top_level_name():
  """tfprims.TFModule is the Flax module, and `import tfprims` imports no Flax until it is
  used (a fresh interpreter: this one has imported flax already)."""
  import subprocess
  import sys
  import textwrap

  assert tfprims.TFModule is TFModule and "TFModule" in dir(tfprims)
  script = textwrap.dedent("""
      import sys
      import tfprims
      assert "flax" not in sys.modules, "import tfprims imported flax"
      from tfprims import TFModule
      assert "flax" in sys.modules and TFModule.__module__ == "tfprims.flax_module"
      try:
        tfprims.NoSuchName
      except AttributeError as e:
        assert "NoSuchName" in str(e)
      else:
        raise AssertionError("tfprims.NoSuchName did not raise")
      print("ok")
  """)
  env = dict(os.environ, JAX_PLATFORMS="cpu", TF_CPP_MIN_LOG_LEVEL="3")
  proc = subprocess.run(
    [sys.executable, "-c", script], capture_output=True, text=True, env=env, timeout=300
  )
  assert proc.returncode == 0 and proc.stdout.strip().endswith("ok"), proc.stderr[-3000:]
