"""The Xla* ops: XLA's HLO operations as TF emits them (tf2xla's python wrappers,
``jit_compile`` code paths, Keras' TF backend, jax2tf), one module per group."""

from tfprims.ops.xla import call_module  # noqa: F401
from tfprims.ops.xla import dot_conv  # noqa: F401
from tfprims.ops.xla import slicing  # noqa: F401
from tfprims.ops.xla import misc  # noqa: F401
from tfprims.ops.xla import gather_scatter  # noqa: F401
from tfprims.ops.xla import control_flow  # noqa: F401
from tfprims.ops.xla import reduce  # noqa: F401
from tfprims.ops.xla import sort  # noqa: F401
from tfprims.ops.xla import sharding  # noqa: F401
from tfprims.ops.xla import linalg_rng  # noqa: F401
from tfprims.ops.xla.call_module import (NonDifferentiableModuleError,  # noqa: F401
                                         SerializedModule, XlaCallModule,
                                         XlaCallModuleError, tf_xla_call_module)
