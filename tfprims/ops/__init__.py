"""Op families, one module each. Importing this package registers every op."""

from tfprims.ops import elementwise  # noqa: F401
from tfprims.ops import activations  # noqa: F401
from tfprims.ops import array  # noqa: F401
from tfprims.ops import reductions  # noqa: F401
from tfprims.ops import linalg  # noqa: F401
from tfprims.ops import nn  # noqa: F401
from tfprims.ops import random  # noqa: F401
from tfprims.ops import tensorlist  # noqa: F401
from tfprims.ops import xla  # noqa: F401
