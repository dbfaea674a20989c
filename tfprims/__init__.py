"""tfprims: TensorFlow functions as JAX functions, one JAX primitive per TF op.

    jax_fn, params = tfprims.convert(tf_fn, tf.TensorSpec([None, 4], tf.float32))
    outputs, new_params = jax_fn(params, x)
    jax.make_jaxpr(lambda x: jax_fn(params, x)[0])(x)   # tf.MatMul, tf.BiasAdd, ...
    tfprims.compare(tf_fn, x).first_divergence          # where it starts to differ from TF

``import tfprims`` is lean: the config and the errors only. Every other name resolves on
first use (``tfprims.convert`` imports the converter and registers every op family,
``tfprims.load_exported`` only the artifact loader), so a deployment that loads an
artifact imports neither TensorFlow nor the op families. The first import of any other
tfprims module (``from tfprims.core import get_op``, ``from tfprims import api``)
registers every op family afterwards, as ``import tfprims`` did before.
"""

import importlib
import importlib.abc
import importlib.machinery
import pkgutil
import sys
import threading

from tfprims.config import get_config, override_config, update_config
from tfprims.errors import (
  BlockedConversionError,
  ControlFlowError,
  ConversionError,
  CustomGradientError,
  DynamicShapeError,
  InputDtypeError,
  InputError,
  InputShapeError,
  InputStructureError,
  Int64OverflowError,
  InvalidRngError,
  MissingDependencyError,
  MissingInputError,
  MissingRngError,
  OpError,
  PrecisionError,
  PrecisionWarning,
  PreventGradientError,
  ReverseModeLoopError,
  RuntimeCheckError,
  StaticInputError,
  TensorListSizeError,
  TFPrimsError,
  TFPrimsWarning,
  UnknownConfigError,
  UnsupportedInputError,
  UnsupportedOpError,
)

__version__ = "0.1.0"

# name -> (module, attribute): resolved on first access.
_LAZY = {
  **{
    n: ("tfprims.api", n)
    for n in (
      "ConvertedFunction",
      "TensorSpec",
      "convert",
      "convert_functional",
      "convert_graph_def",
    )
  },
  **{n: ("tfprims.comparison", n) for n in ("compare", "compare_graph_def", "compare_saved_model")},
  **{n: ("tfprims.deploy", n) for n in ("ExportedModel", "load_exported")},
  "enable_compilation_cache": ("tfprims.cache", "enable_compilation_cache"),
  "load_keras": ("tfprims.keras_files", "load_keras"),
  **{n: ("tfprims.host_prefix", n) for n in ("HostPrefix", "split_host_prefix")},
  **{
    n: ("tfprims.core", n)
    for n in (
      "TFOp",
      "get_op",
      "override_batching",
      "override_jvp",
      "override_transpose",
      "primitive",
      "register_op",
      "register_platform_lowering",
      "register_structural",
      "registered_ops",
      "unregister_op",
    )
  },
  "supported_op_types": ("tfprims.core", "declared_op_types"),
  **{
    n: ("tfprims.params", n)
    for n in ("assign_variables", "merge_params", "split_trainable", "trainable_names")
  },
  **{n: ("tfprims.tf1", n) for n in ("GraphFunction", "convert_session", "load_frozen_graph")},
  **{
    n: ("tfprims.saved_model", n)
    for n in (
      "AmbiguousSignatureError",
      "convert_from_restored",
      "convert_functional_from_restored",
      "load_saved_model",
    )
  },
  # The Flax NNX module: `import tfprims` needs no Flax.
  "TFModule": ("tfprims.flax_module", "TFModule"),
}

__all__ = sorted(
  [
    n
    for n in globals()
    if not n.startswith("_")
    and n[0].isupper()
    or n in ("get_config", "override_config", "update_config")
  ]
  + [n for n in _LAZY if n != "TFModule"]
)


# Packages only some of tfprims needs -> the extra that installs them (pyproject.toml).
_EXTRAS = {"tensorflow": "tf", "hypothesis": "testing", "flax": "flax"}


def __getattr__(name):
  if name in _LAZY:
    module, attr = _LAZY[name]
    try:
      value = getattr(importlib.import_module(module), attr)
    except ModuleNotFoundError as e:
      extra = _EXTRAS.get(e.name)
      if extra is None:
        raise
      raise MissingDependencyError(
        f"tfprims.{name} needs {e.name}, which is not installed: pip install 'tfprims[{extra}]'"
      ) from e
    globals()[name] = value
    return value
  if name.isidentifier() and not name.startswith("_"):  # a submodule: tfprims.deploy
    try:
      return importlib.import_module(f"{__name__}.{name}")
    except ModuleNotFoundError as e:
      if e.name != f"{__name__}.{name}":
        raise
  raise AttributeError(f"module 'tfprims' has no attribute {name!r}")


def __dir__():
  submodules = {m.name for m in pkgutil.iter_modules(__path__) if not m.name.startswith("_")}
  return sorted({*globals(), *_LAZY, *submodules})


# --- the op families, registered once any converter module is imported -----------------

# Modules the artifact path imports: they need no op registered.
_LEAN = frozenset(
  {
    "tfprims.config",
    "tfprims.errors",
    "tfprims.cache",
    "tfprims.deploy",
    "tfprims.executables",
    "tfprims.progress",
  }
)
_OPS = "tfprims.ops"
_importing = threading.local()


class _RegisterOpsAfter(importlib.abc.Loader):
  """A tfprims module's loader that imports ``tfprims.ops`` once the outermost tfprims
  module being imported has run: every module an op family imports at its top
  (tfprims.core, tfprims.interpreter...) is then complete."""

  def __init__(self, loader):
    self._loader = loader

  def __getattr__(self, name):  # get_source, get_filename, get_resource_reader...
    return getattr(self._loader, name)

  def create_module(self, spec):
    return self._loader.create_module(spec)

  def exec_module(self, module):
    depth = getattr(_importing, "depth", 0)
    _importing.depth = depth + 1
    try:
      self._loader.exec_module(module)
    finally:
      _importing.depth = depth
    if depth == 0 and _OPS not in sys.modules:
      importlib.import_module(_OPS)


class _OpsFinder(importlib.abc.MetaPathFinder):
  """Finds tfprims' modules (other than the lean ones) with :class:`_RegisterOpsAfter`
  until the op families are imported; then it leaves ``sys.meta_path``."""

  def find_spec(self, name, path=None, target=None):
    if not name.startswith("tfprims.") or name in _LEAN:
      return None
    if _OPS in sys.modules:
      if self in sys.meta_path:
        sys.meta_path.remove(self)
      return None
    if name == _OPS or name.startswith(_OPS + "."):
      return None
    spec = importlib.machinery.PathFinder.find_spec(name, path, target)
    if spec is not None and hasattr(spec.loader, "exec_module"):
      spec.loader = _RegisterOpsAfter(spec.loader)
    return spec


if _OPS not in sys.modules:
  sys.meta_path.insert(0, _OpsFinder())
