"""The Xla* ops: XLA's HLO operations as TF emits them (tf2xla's python wrappers,
``jit_compile`` code paths, Keras' TF backend, jax2tf), one module per group."""

from tfprims.ops.xla import call_module
from tfprims.ops.xla import dot_conv
from tfprims.ops.xla import slicing
from tfprims.ops.xla import misc
from tfprims.ops.xla import gather_scatter
from tfprims.ops.xla import control_flow
from tfprims.ops.xla import reduce
from tfprims.ops.xla import sort
from tfprims.ops.xla import sharding
from tfprims.ops.xla import linalg_rng
from tfprims.ops.xla.call_module import (
  NonDifferentiableModuleError,
  SerializedModule,
  XlaCallModule,
  XlaCallModuleError,
  tf_xla_call_module,
)
