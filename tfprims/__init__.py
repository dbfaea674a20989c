"""tfprims: TensorFlow functions as JAX functions, one JAX primitive per TF op.

    jax_fn, params = tfprims.convert(tf_fn, tf.TensorSpec([None, 4], tf.float32))
    outputs, new_params = jax_fn(params, x)
    jax.make_jaxpr(lambda x: jax_fn(params, x)[0])(x)   # tf.MatMul, tf.BiasAdd, ...
    tfprims.compare(tf_fn, x).first_divergence          # where it starts to differ from TF
"""

from tfprims import ops as _ops  # noqa: F401  (registers every op)
from tfprims.api import (ConvertedFunction, TensorSpec, convert, convert_functional,
                         convert_graph_def)
from tfprims.comparison import compare, compare_graph_def, compare_saved_model
from tfprims.config import get_config, override_config, update_config
from tfprims.deploy import ExportedModel, load_exported
from tfprims.keras_files import load_keras
from tfprims.core import (TFOp, define_op, get_op, override_batching, override_jvp,
                          override_transpose, primitive, register_op,
                          register_platform_lowering, register_structural, registered_ops,
                          unregister_op)
from tfprims.core import declared_op_types as supported_op_types
from tfprims.errors import (BlockedConversionError, ControlFlowError, ConversionError,
                            CustomGradientError, DynamicShapeError, InputDtypeError,
                            InputError, InputShapeError, InputStructureError,
                            Int64OverflowError, InvalidRngError, MissingInputError,
                            MissingRngError, OpError, PrecisionError, PrecisionWarning,
                            PreventGradientError, ReverseModeLoopError, RuntimeCheckError,
                            StaticInputError, TensorListSizeError, TFPrimsError,
                            TFPrimsWarning,
                            UnknownConfigError, UnsupportedInputError, UnsupportedOpError)
from tfprims.params import assign_variables, merge_params, split_trainable, trainable_names
from tfprims.tf1 import GraphFunction, convert_session, load_frozen_graph
from tfprims.saved_model import (AmbiguousSignatureError, convert_from_restored,
                                 convert_functional_from_restored, load_saved_model)

__version__ = "0.1.0"


def __getattr__(name):
  # tfprims.TFModule: the Flax NNX module (tfprims.flax_module), imported on first use so
  # that `import tfprims` needs no Flax.
  if name == "TFModule":
    from tfprims.flax_module import TFModule
    return TFModule
  raise AttributeError(f"module 'tfprims' has no attribute {name!r}")


def __dir__():
  return sorted([*globals(), "TFModule"])
