"""Training ops: TF's optimizer updates (Apply*, ResourceApply*, SparseApply*,
ResourceSparseApply*), one update rule per optimizer shared by its forms
(machinery in ``_common``).

=====================  =====================================================
module                 optimizers
=====================  =====================================================
``gradient_descent``   GradientDescent, ProximalGradientDescent, Momentum,
                       KerasMomentum
``adagrad``            Adagrad, AdagradV2, ProximalAdagrad, AdagradDA
``rmsprop``            RMSProp, CenteredRMSProp, Adadelta
``adam``               Adam, AdamWithAmsgrad, AdaMax, AddSign, PowerSign
``ftrl``               Ftrl, FtrlV2
=====================  =====================================================
"""

from tfprims.ops.training import gradient_descent  # noqa: F401
from tfprims.ops.training import adagrad  # noqa: F401
from tfprims.ops.training import rmsprop  # noqa: F401
from tfprims.ops.training import adam  # noqa: F401
from tfprims.ops.training import ftrl  # noqa: F401
