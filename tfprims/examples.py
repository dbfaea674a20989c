"""Small example TF models built in code (Keras 3), for the CLI, docs and tests.

    ex = tfprims.examples.build("cnn")
    jax_fn, params = tfprims.convert(ex.tf_fn, *ex.inputs)
    outputs, _ = jax_fn(params, *ex.inputs)      # ~ ex.tf_fn(*ex.inputs)

Every example is deterministic: weights come from seeded initializers (no
global seed is touched) and inputs from ``numpy.random.default_rng``. Layers
and variables have fixed names, so param names are the same in every build.
Nothing is downloaded; building one takes well under a second once TF and
Keras are imported.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable

import numpy as np
from tfprims.errors import import_tensorflow

__all__ = ["Example", "EXAMPLES", "DEFAULT", "build", "describe", "names"]


@dataclasses.dataclass(frozen=True)
class Example:
  """A built example.

  Attributes:
    name: the registry name (``"cnn"``...).
    tf_fn: a ``tf.function`` (with an ``input_signature``) calling the model in
      inference mode; its variables are the model's weights.
    inputs: positional example inputs (numpy arrays): ``tf_fn(*inputs)``.
    description: one line saying what the model is.
    model: the underlying Keras model (or None).
  """

  name: str
  tf_fn: Any
  inputs: tuple
  description: str
  model: Any = None


EXAMPLES: dict[str, Callable[[], Example]] = {}
DEFAULT = "cnn"


def _example(name: str):
  def register(builder: Callable[[], Example]) -> Callable[[], Example]:
    EXAMPLES[name] = builder
    return builder

  return register


def names() -> list[str]:
  """Registered example names, the default first."""
  return sorted(EXAMPLES, key=lambda n: (n != DEFAULT, n))


def describe(name: str) -> str:
  """The one-line description of an example, without building it."""
  return _doc_line(_builder(name))


def build(name: str = DEFAULT) -> Example:
  """Builds the example model ``name`` (see :data:`EXAMPLES`)."""
  return _builder(name)()


def _builder(name: str) -> Callable[[], Example]:
  try:
    return EXAMPLES[name]
  except KeyError:
    raise KeyError(f"unknown example {name!r}; known: {', '.join(names())}") from None


def _doc_line(fn) -> str:
  return " ".join((fn.__doc__ or "").strip().split("\n\n")[0].split())


# --- seeded initializers --------------------------------------------------------


class _Seeds:
  """Hands out distinct fixed seeds, so each weight gets its own stream."""

  def __init__(self, base: int):
    self._next = base

  def __call__(self) -> int:
    self._next += 1
    return self._next


def _kernel(keras, seeds):
  return keras.initializers.GlorotUniform(seed=seeds())


def _small(keras, seeds, mean=0.0, stddev=0.1):
  return keras.initializers.RandomNormal(mean=mean, stddev=stddev, seed=seeds())


def _finish(name, builder, model, input_spec, x) -> Example:
  tf = import_tensorflow()

  def call(x):
    return model(x, training=False)

  call.__name__ = name
  tf_fn = tf.function(call, input_signature=[input_spec], autograph=False)
  return Example(name=name, tf_fn=tf_fn, inputs=(x,), description=_doc_line(builder), model=model)


# --- the examples -----------------------------------------------------------------


@_example("cnn")
def cnn() -> Example:
  """Keras CNN on 28x28x1 images: Conv2D+ReLU, MaxPool, Conv2D+ReLU, BatchNorm
  (inference), GlobalAvgPool, Dense+softmax (10 classes)."""
  import keras

  tf = import_tensorflow()
  L, s = keras.layers, _Seeds(100)
  inputs = keras.Input((28, 28, 1), name="images")
  h = L.Conv2D(
    8,
    3,
    activation="relu",
    name="conv1",
    kernel_initializer=_kernel(keras, s),
    bias_initializer=_small(keras, s),
  )(inputs)
  h = L.MaxPooling2D(2, name="pool1")(h)
  h = L.Conv2D(
    16,
    3,
    activation="relu",
    name="conv2",
    kernel_initializer=_kernel(keras, s),
    bias_initializer=_small(keras, s),
  )(h)
  h = L.BatchNormalization(
    name="bn2",
    gamma_initializer=_small(keras, s, mean=1.0),
    beta_initializer=_small(keras, s),
    moving_mean_initializer=_small(keras, s, stddev=0.2),
    moving_variance_initializer=keras.initializers.RandomUniform(0.5, 1.5, seed=s()),
  )(h)
  h = L.GlobalAveragePooling2D(name="gap")(h)
  outputs = L.Dense(
    10,
    activation="softmax",
    name="logits",
    kernel_initializer=_kernel(keras, s),
    bias_initializer=_small(keras, s),
  )(h)
  model = keras.Model(inputs, outputs, name="cnn")
  x = np.random.default_rng(0).standard_normal((2, 28, 28, 1)).astype(np.float32)
  return _finish("cnn", cnn, model, tf.TensorSpec([None, 28, 28, 1], tf.float32, name="images"), x)


@_example("mlp")
def mlp() -> Example:
  """Keras MLP on 16 features: Dense(32)+ReLU, Dense(32)+tanh, Dense(4) (linear)."""
  import keras

  tf = import_tensorflow()
  L, s = keras.layers, _Seeds(200)
  inputs = keras.Input((16,), name="features")
  h = L.Dense(
    32,
    activation="relu",
    name="dense1",
    kernel_initializer=_kernel(keras, s),
    bias_initializer=_small(keras, s),
  )(inputs)
  h = L.Dense(
    32,
    activation="tanh",
    name="dense2",
    kernel_initializer=_kernel(keras, s),
    bias_initializer=_small(keras, s),
  )(h)
  outputs = L.Dense(
    4, name="out", kernel_initializer=_kernel(keras, s), bias_initializer=_small(keras, s)
  )(h)
  model = keras.Model(inputs, outputs, name="mlp")
  x = np.random.default_rng(1).standard_normal((3, 16)).astype(np.float32)
  return _finish("mlp", mlp, model, tf.TensorSpec([None, 16], tf.float32, name="features"), x)
