"""Keras model files (``.keras``, Keras 3's zip format, and legacy HDF5 ``.h5``) as
converted functions: :func:`load_keras`, and what ``tfprims inspect/ops/export/compare
model.keras`` use.

    fn, params = tfprims.load_keras("model.keras")
    outputs, _ = fn(params, x)              # the model called with training=False

The model is loaded with Keras (``keras.saving.load_model``; an HDF5 file Keras 3
cannot read falls back to ``tf_keras``, the Keras 2 package, when it is installed),
its call is wrapped in a ``tf.function`` whose input signature is the model's inputs
(unknown dims, the batch among them, stay None) and converted with
:func:`tfprims.convert`. Custom layers must be known to Keras before loading
(``keras.saving.register_keras_serializable`` in a module you import first;
``tfprims --import MODULE`` on the command line).
"""

from __future__ import annotations

import os
from typing import Any
from tfprims.errors import import_tensorflow

__all__ = ["KERAS_SUFFIXES", "is_keras_file", "load_model", "model_function", "load_keras"]

KERAS_SUFFIXES = (".keras", ".h5", ".hdf5")
_ZIP, _HDF5 = b"PK\x03\x04", b"\x89HDF\r\n\x1a\n"


def is_keras_file(path: str) -> bool:
  """Whether ``path`` is a file in a Keras format: named ``.keras``/``.h5``/``.hdf5``,
  or starting with the bytes of a zip archive or an HDF5 file."""
  if not os.path.isfile(path):
    return False
  if path.lower().endswith(KERAS_SUFFIXES):
    return True
  with open(path, "rb") as f:
    head = f.read(8)
  return head.startswith(_ZIP) or head == _HDF5


def load_model(path: str):
  """The Keras model in ``path`` (not compiled: no optimizer or loss is restored)."""
  from tfprims import errors

  if not os.path.isfile(path):
    raise errors.ConversionError(f"no Keras file at {path!r}")
  os.environ.setdefault("KERAS_BACKEND", "tensorflow")
  errors.import_tensorflow()
  import keras

  if keras.backend.backend() != "tensorflow":
    raise errors.ConversionError(
      f"Keras runs on the {keras.backend.backend()!r} backend here; tfprims converts "
      "TensorFlow graphs: set KERAS_BACKEND=tensorflow"
    )
  try:
    return keras.saving.load_model(path, compile=False)
  except Exception as e:  # Keras raises many kinds
    first = e
  if path.lower().endswith((".h5", ".hdf5")):  # a Keras 2 file Keras 3 cannot read
    try:
      import tf_keras
    except ImportError:
      tf_keras = None
    if tf_keras is not None:
      try:
        return tf_keras.models.load_model(path, compile=False)
      except Exception:  # report Keras 3's reason, the primary loader
        pass
  message = (str(first).strip().splitlines() or [""])[0]
  raise errors.ConversionError(
    f"Keras cannot load {path!r}: {type(first).__name__}: {message}"
  ) from None


def model_function(model):
  """``model`` called with ``training=False`` as a ``tf.function`` whose input
  signature is the model's inputs: ``(tf_fn, specs)``, ``specs`` the positional
  input signature (one structure: a tensor, a list or a dict of them)."""
  tf = import_tensorflow()
  import tree

  from tfprims import errors

  structure = None
  for attr in ("input", "inputs"):  # a Sequential model may have only `inputs`
    try:
      structure = getattr(model, attr)
    except (AttributeError, ValueError):
      continue
    if structure is not None:
      break
  if structure is None or not tree.flatten(structure):
    raise errors.InputStructureError(
      f"the Keras model {getattr(model, 'name', model)!r} has no known inputs (a "
      "subclassed model that was never built on an input): convert it with "
      "tfprims.convert(tf.function(model), tf.TensorSpec(...))"
    )

  def spec(t) -> Any:
    name = getattr(t, "name", None) or None
    if name is not None:
      name = name.split(":")[0]
    return tf.TensorSpec(tuple(t.shape), tf.as_dtype(t.dtype), name=name)

  specs = tree.map_structure(spec, structure)
  if isinstance(structure, (list, tuple)) and len(structure) == 1:
    specs = specs[0]  # a model of one input takes the tensor itself

  def call(inputs):
    return model(inputs, training=False)

  call.__name__ = _identifier(getattr(model, "name", "") or "keras_model")
  return tf.function(call, input_signature=[specs], autograph=False), specs


def load_keras(path: str):
  """Converts the Keras model saved in ``path`` (``.keras`` or ``.h5``).

  Returns ``(fn, params)`` as :func:`tfprims.convert` does: ``fn(params, x)`` calls
  the model in inference mode (``training=False``) on its inputs (one array, or the
  list/dict of arrays the model takes); ``params`` are its weights by TF variable name.
  Unknown input dims (the batch) stay unknown: ``fn`` takes any size there.
  """
  from tfprims import api

  model = load_model(path)
  tf_fn, _ = model_function(model)
  fn, params = api.convert(tf_fn)
  fn.keras_model = model  # keep the model (its variables back ``params``) alive
  return fn, params


def _identifier(name: str) -> str:
  return "".join(c if c.isalnum() or c == "_" else "_" for c in name)
