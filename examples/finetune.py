"""Fine-tune a Keras model in JAX with Optax, then hand the weights back to TensorFlow.

    pip install -e '.[optax]'
    python examples/finetune.py [--steps 60]

1. Convert the model twice with tfprims: in training mode (BatchNormalization
   uses batch statistics and updates its moving averages, Dropout draws masks)
   and in inference mode.
2. Train the trainable params with an Optax chain (global-norm clipping, then
   AdamW) in a jitted step on synthetic data; non-trainable state (moving
   statistics, Keras' dropout seed) comes back from the converted function in
   ``new_params``.
3. Write the trained params into the model's ``tf.Variable``s and check that
   TensorFlow now computes what the converted function computes.
"""

from __future__ import annotations

import argparse
import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import jax
import jax.numpy as jnp
import keras
import numpy as np
import optax
import tensorflow as tf

import tfprims

N_FEATURES, N_CLASSES = 8, 3


def build_model(seed: int = 0) -> keras.Model:
  keras.utils.set_random_seed(seed)
  return keras.Sequential(
    [
      keras.Input((N_FEATURES,)),
      keras.layers.Dense(32),
      keras.layers.BatchNormalization(momentum=0.9),
      keras.layers.ReLU(),
      keras.layers.Dropout(0.1),
      keras.layers.Dense(N_CLASSES),
    ]
  )


def synthetic_data(n: int, seed: int = 0):
  """Samples of three fixed Gaussian blobs, one per class."""
  centers = np.random.default_rng(1234).normal(size=(N_CLASSES, N_FEATURES)) * 0.7
  rng = np.random.default_rng(seed)
  y = rng.integers(0, N_CLASSES, size=n)
  x = centers[y] + rng.normal(size=(n, N_FEATURES))
  return x.astype(np.float32), y.astype(np.int32)


def cross_entropy(logits, labels):
  logp = jax.nn.log_softmax(logits)
  return -jnp.mean(jnp.take_along_axis(logp, labels[:, None], axis=1))


def main(
  steps: int = 60, batch: int = 64, lr: float = 0.01, seed: int = 0, verbose: bool = True
) -> dict:
  model = build_model(seed)
  spec = tf.TensorSpec([None, N_FEATURES], tf.float32)
  train_fn, params = tfprims.convert(tf.function(lambda x: model(x, training=True)), spec)
  infer_fn, _ = tfprims.convert(tf.function(lambda x: model(x, training=False)), spec)

  # Trainable weights get gradients; the rest is state the model updates itself.
  trainable, state = tfprims.split_trainable(train_fn, params)
  if verbose:
    print(f"trainable: {sorted(trainable)}\nstate:     {sorted(state)}")

  def loss_fn(trainable, state, x, y):
    logits, new_params = train_fn(tfprims.merge_params(trainable, state), x)
    new_state = {k: new_params[k] for k in state}
    return cross_entropy(logits, y), new_state

  optimizer = optax.chain(optax.clip_by_global_norm(1.0), optax.adamw(lr, weight_decay=1e-4))

  @jax.jit
  def train_step(trainable, opt_state, state, x, y):
    (loss, state), grads = jax.value_and_grad(loss_fn, has_aux=True)(trainable, state, x, y)
    updates, opt_state = optimizer.update(grads, opt_state, trainable)
    return optax.apply_updates(trainable, updates), opt_state, state, loss

  x_all, y_all = synthetic_data(batch * steps, seed)
  opt_state = optimizer.init(trainable)
  losses = []
  for i in range(steps):
    xb, yb = x_all[i * batch : (i + 1) * batch], y_all[i * batch : (i + 1) * batch]
    trainable, opt_state, state, loss = train_step(trainable, opt_state, state, xb, yb)
    losses.append(float(loss))
    if verbose and (i % 10 == 0 or i == steps - 1):
      print(f"step {i:3d}  loss {losses[-1]:.4f}")

  # Hand the trained weights (and updated moving statistics) back to TensorFlow.
  trained = tfprims.merge_params(trainable, state)
  tfprims.assign_variables(train_fn, trained)

  x_test, y_test = synthetic_data(256, seed + 1)
  infer_params = {k: trained[k] for k in infer_fn.param_specs}
  ours = np.asarray(infer_fn(infer_params, x_test)[0])
  theirs = model(x_test, training=False).numpy()
  max_diff = float(np.abs(ours - theirs).max())
  accuracy = float(np.mean(theirs.argmax(-1) == y_test))
  if verbose:
    print(f"TF after write-back vs converted fn: max |diff| = {max_diff:.2e}")
    print(f"test accuracy (TF model): {accuracy:.3f}")
  return dict(
    losses=losses,
    max_diff=max_diff,
    accuracy=accuracy,
    model=model,
    params=trained,
    infer_fn=infer_fn,
  )


if __name__ == "__main__":
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument("--steps", type=int, default=60)
  parser.add_argument("--lr", type=float, default=0.01)
  args = parser.parse_args()
  main(steps=args.steps, lr=args.lr)
