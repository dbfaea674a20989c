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

from tfprims.ops.training import gradient_descent
from tfprims.ops.training import adagrad
from tfprims.ops.training import rmsprop
from tfprims.ops.training import adam
from tfprims.ops.training import ftrl
