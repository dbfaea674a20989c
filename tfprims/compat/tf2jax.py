"""tf2jax's public API on tfprims: ``from tfprims.compat import tf2jax``.

The names and conventions of tf2jax 0.3.x, so that code written for it runs
with that one-line change:

* ``convert(tf_fn, *args, **kwargs) -> (jax_fn, params)`` and
  ``convert_from_restored(restored_fn) -> (jax_fn, params)``: ``params`` maps
  variable names to :class:`Variable` arrays, which carry ``.trainable`` and
  ``.name`` (zero-copy, read-only views of tfprims' params);
  ``jax_fn(params, *args, rng=None, **kwargs) -> (outputs, new_params)``.
* ``convert_functional`` / ``convert_functional_from_restored``: ``jax_fn(*args,
  rng=None, **kwargs) -> outputs``; they refuse functions with variables
  (a ValueError).
* ``get_config`` / ``update_config`` / ``override_config``: tfprims' config,
  which has every tf2jax option (``tfprims.config.OPTIONS``). tfprims keeps its own
  defaults where they differ (``strict_dtype_check`` is on): importing this
  module changes nothing.
* ``AnnotatedFunction``: every converted function is one (``isinstance``), with
  ``.fn``, ``.signature``, ``.structured_inputs`` and ``.structured_outputs``.
* ``MissingInputError``: raised when a call leaves out an input.

Errors derive from the builtins tf2jax raises (ValueError, TypeError,
LookupError), so ``except`` clauses keep working. docs/migrating-from-tf2jax.md
lists every name and option and the few deliberate differences.
"""

from __future__ import annotations

import abc
import inspect
import re
import types
from typing import Any, Callable, Mapping, Optional

import jax
import jax.numpy as jnp
import numpy as np

from tfprims import api, config as _config, errors, saved_model, specs
from tfprims.errors import import_tensorflow

__all__ = [
  "AnnotatedFunction",
  "MissingInputError",
  "Variable",
  "convert",
  "convert_from_restored",
  "convert_functional",
  "convert_functional_from_restored",
  "get_config",
  "override_config",
  "update_config",
]

#: The tf2jax release whose public API this module mirrors.
__version__ = "0.3.8"

get_config = _config.get_config
update_config = _config.update_config
override_config = _config.override_config
#: ``tf2jax.config.override_config(...)`` (as tf2jax's README writes it) works too.
config = types.SimpleNamespace(
  get_config=get_config, update_config=update_config, override_config=override_config
)

MissingInputError = errors.MissingInputError


class Variable(np.ndarray):
  """A param as tf2jax returns it: an array with ``trainable`` and ``name`` (the TF
  variable's, e.g. ``"dense/kernel:0"``). Arrays computed from it keep them."""

  trainable: Optional[bool]
  name: Optional[str]

  def __new__(cls, array, trainable: Optional[bool] = None, name: Optional[str] = None):
    obj = np.asarray(array).view(cls)  # zero-copy: read-only stays read-only
    obj.trainable, obj.name = trainable, name
    return obj

  def __array_finalize__(self, obj):
    if obj is not None:
      self.trainable = getattr(obj, "trainable", None)
      self.name = getattr(obj, "name", None)

  def assign(self, array) -> "Variable":
    """A new :class:`Variable` with this one's metadata and ``array``'s values."""
    return Variable(array, trainable=self.trainable, name=self.name)

  def __repr__(self):
    return (
      f"Variable(name={self.name!r}, trainable={self.trainable!r}, "
      f"numpy={np.array_repr(np.asarray(self))})"
    )


class AnnotatedFunction(abc.ABC):  # noqa: B024  (tf2jax's: a registry for isinstance)
  """A callable with its TF signature and specs, as tf2jax's.

  Every function tfprims converts is an instance (``isinstance(fn,
  AnnotatedFunction)``); constructing one wraps ``fn`` the way tf2jax does.
  """

  def __init__(
    self,
    fn: Callable[..., Any],
    structured_inputs: Any,
    structured_outputs: Any,
    signature: inspect.Signature,
  ):
    self.fn = fn
    self.structured_inputs = structured_inputs
    self.structured_outputs = structured_outputs
    self.__doc__ = getattr(fn, "__doc__", None)
    self.__name__ = getattr(fn, "__name__", "function")
    self.__signature__ = signature

  def __call__(self, *args, **kwargs):
    return self.fn(*args, **kwargs)

  @property
  def signature(self) -> inspect.Signature:
    return self.__signature__


AnnotatedFunction.register(api.ConvertedFunction)
AnnotatedFunction.register(api._Functional)  # pylint: disable=protected-access


def _variables(fn: api.ConvertedFunction, params: Mapping[str, Any]) -> dict:
  out = {}
  for key, value in params.items():
    spec = fn.param_specs.get(key)
    variable = fn.tf_variables.get(key)
    name = getattr(variable, "name", None) or f"{key}:0"
    out[key] = Variable(value, trainable=None if spec is None else spec.trainable, name=name)
  return out


_BFLOAT16_OPTIONS = ("force_const_float32_to_bfloat16", "force_const_float64_to_bfloat16")
_RELAXED: dict = {}


def _relaxed_class(cls):
  """``cls`` whose calls take bfloat16 values for floating inputs (tf2jax's
  ``strict_dtype_check`` is off by default; a function converted with a
  ``force_const_*_to_bfloat16`` option exists to be run in bfloat16)."""
  if cls not in _RELAXED:

    def __call__(self, *args, **kwargs):
      leaves = jax.tree_util.tree_leaves((args, kwargs))
      if any(getattr(x, "dtype", None) == jnp.bfloat16 for x in leaves):
        with _config.override_config("strict_dtype_check", False):
          return super(sub, self).__call__(*args, **kwargs)
      return super(sub, self).__call__(*args, **kwargs)

    sub = type(
      cls.__name__,
      (cls,),
      {"__call__": __call__, "__module__": cls.__module__, "__qualname__": cls.__qualname__},
    )
    _RELAXED[cls] = sub
  return _RELAXED[cls]


def _as_tf2jax(fn):
  """``fn`` with tf2jax's types: output specs as ``tf.TensorSpec``s named by their
  op (``'Identity'``, as ``tf.TensorSpec.from_tensor``), bfloat16 inputs accepted
  where a ``force_const_*_to_bfloat16`` option was on at conversion."""
  tf = import_tensorflow()
  import tree

  def spec(s):
    if not isinstance(s, specs.TensorSpec):
      return s
    try:
      dtype = tf.as_dtype(s.dtype)
    except TypeError:  # a dtype TF has no name for: keep tfprims' spec
      return s
    return tf.TensorSpec(s.shape, dtype, name=re.sub(r":\d+$", "", s.name or "") or None)

  fn.structured_outputs = tree.map_structure(spec, fn.structured_outputs)
  if isinstance(fn, api._Functional):  # pylint: disable=protected-access
    fn.converted.structured_outputs = fn.structured_outputs
  if any(_config.get_config(o) for o in _BFLOAT16_OPTIONS):
    if isinstance(fn, api._Functional):  # pylint: disable=protected-access
      fn.converted.__class__ = _relaxed_class(type(fn.converted))
    else:
      fn.__class__ = _relaxed_class(type(fn))
  return fn


def convert(tf_fn, *args, **kwargs) -> tuple[api.ConvertedFunction, dict]:
  """tf2jax's ``convert``: ``(jax_fn, params)`` with :class:`Variable` params.

  ``args``/``kwargs`` are example values, ``tf.TensorSpec``s or JAX tracers.
  """
  fn, params = api.convert(tf_fn, *args, **kwargs)
  return _as_tf2jax(fn), _variables(fn, params)


def convert_functional(tf_fn, *args, **kwargs):
  """tf2jax's ``convert_functional``: ``jax_fn(*args, rng=None, **kwargs) -> outputs``."""
  return _as_tf2jax(api.convert_functional(tf_fn, *args, **kwargs))


def convert_from_restored(tf_fn, *args, **kwargs) -> tuple[api.ConvertedFunction, dict]:
  """tf2jax's ``convert_from_restored``: a function of a loaded SavedModel with one
  traced signature (example args pick one of several, which tf2jax cannot)."""
  fn, params = saved_model.convert_from_restored(tf_fn, *args, **kwargs)
  return _as_tf2jax(fn), _variables(fn, params)


def convert_functional_from_restored(tf_fn, *args, **kwargs):
  """tf2jax's ``convert_functional_from_restored``."""
  return _as_tf2jax(saved_model.convert_functional_from_restored(tf_fn, *args, **kwargs))
