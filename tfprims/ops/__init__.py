"""Every op tfprims converts, one module or package per family; importing this
package registers them all."""

from tfprims.ops import graph_nodes  # noqa: F401
from tfprims.ops import elementwise  # noqa: F401
from tfprims.ops import activations  # noqa: F401
from tfprims.ops import array  # noqa: F401
from tfprims.ops import reductions  # noqa: F401
from tfprims.ops import linalg  # noqa: F401
from tfprims.ops import nn  # noqa: F401
from tfprims.ops import image  # noqa: F401
from tfprims.ops import random  # noqa: F401
from tfprims.ops import tensorlist  # noqa: F401
from tfprims.ops import variables  # noqa: F401
from tfprims.ops import variable_updates  # noqa: F401
from tfprims.ops import ref_variables  # noqa: F401
from tfprims.ops import state_misc  # noqa: F401
from tfprims.ops import functional_ops  # noqa: F401
from tfprims.ops import tensor_map  # noqa: F401
from tfprims.ops import training  # noqa: F401
from tfprims.ops import control_flow  # noqa: F401
from tfprims.ops import custom_gradients  # noqa: F401
from tfprims.ops import prevent_gradient  # noqa: F401
from tfprims.ops import asserts  # noqa: F401
from tfprims.ops import xla  # noqa: F401
from tfprims.ops import printing  # noqa: F401
from tfprims.ops import fft  # noqa: F401
from tfprims.ops import clustering  # noqa: F401
from tfprims.ops import runtime_info  # noqa: F401
from tfprims.ops import lookup  # noqa: F401
from tfprims.ops import lookup_graph  # noqa: F401
from tfprims.ops import ragged  # noqa: F401
from tfprims.ops import hashing  # noqa: F401
from tfprims.ops import sparse  # noqa: F401
