"""Neural-network ops: bias, convolutions, pooling, batch norm, LRN, top-k, losses, CTC,
3-D and argmax pooling, dilation, conv variants (every resize op is in
:mod:`tfprims.ops.image`).

Layouts are expressed as convolution dimension numbers / window dims, never by
transposing NHWC or NCHW data, so jit compiles to the program hand-written
``lax.conv_general_dilated`` / ``lax.reduce_window`` code gives. ``SAME``
padding is TF's (the odd pad goes at the end).

What lives where (each op's impl, rules and property spec in one module):

* ``conv.py``: Conv2D, DepthwiseConv2dNative, Conv3D and their backprop ops.
* ``bias.py``: BiasAdd, BiasAddV1, BiasAddGrad.
* ``pool.py``: MaxPool(V2), AvgPool and their grad / grad-grad ops.
* ``pool3d.py``: MaxPool3D, AvgPool3D and their grad / grad-grad ops.
* ``pool_argmax.py``: MaxPoolWithArgmax, MaxPoolGradWithArgmax, MaxPoolGradGradWithArgmax.
* ``dilation.py``: Dilation2D, Dilation2DBackpropInput, Dilation2DBackpropFilter.
* ``conv_variants.py``: Conv (generic N-d), FusedPadConv2D, FusedResizeAndPadConv2D.
* ``batch_norm.py``: FusedBatchNorm{,V2,V3} and FusedBatchNormGrad{,V2,V3}.
* ``lrn.py``: LRN, LRNGrad.
* ``top_k.py``: TopKV2, NthElement, ApproxTopK, InTopK, InTopKV2 (sorting and
  selection; ``tf.sort``/``tf.argsort``/``tf.math.top_k`` lower to TopKV2).
  ``cpu_sort.py``: TF's CPU selection algorithms (libstdc++'s sorts and heaps,
  tsl's TopN, Eigen's row maximum) in ``lax`` loops, for rows with NaN.
* ``losses.py``: SoftmaxCrossEntropyWithLogits, SparseSoftmaxCrossEntropyWithLogits,
  L2Loss.
* ``ctc.py``: CTCLoss, CTCLossV2; ``ctc_decode.py``: CTCGreedyDecoder,
  CTCBeamSearchDecoder (data-dependent output shapes).
* ``rnn_blocks.py``: LSTMBlockCell, GRUBlockCell, BlockLSTM(V2) and their Grad ops.
* ``cudnn_rnn.py``: CudnnRNN(V2, V3), their Backprop ops and the params layout ops
  (ParamsSize, ParamsToCanonical(V2), CanonicalToParams(V2)), in JAX on any backend.
* ``fake_quant.py``: FakeQuantWithMinMaxArgs/Vars/VarsPerChannel and their Gradient ops.
* ``isotonic.py``: IsotonicRegression; ``fractional_pool.py``: FractionalMaxPool,
  FractionalAvgPool (``uses_rng``) and their Grad ops.
* ``conv_cpu.py``: CPU lowerings of DepthwiseConv2dNative and its backprops (tap sums)
  and of 1x1 Conv2D/Conv3D (``dot_general``) and large RGB stems (tap sums per input
  channel), chosen by measurement (config ``fast_lowerings``; docs/performance.md);
  ``pool_cpu.py``: CPU lowerings of MaxPool(V2, 3D) and AvgPool(3D) as one
  reduce_window per pooled axis.
* ``_common.py``: layout and padding helpers, batch axes; ``_specs.py``: spec helpers (TF
  calls, layouts).

Explicit TF-named rules (they bind other ops through ``tfops``):

* Conv2D, DepthwiseConv2dNative, Conv3D and their backprop ops form closed
  bilinear families: each JVP applies the op to the tangents, each transpose is
  another member (Conv2D's transposes are Conv2DBackpropInput/Filter, as in a
  TF gradient graph).
* BiasAdd / BiasAddV1 are linear, transposed by BiasAddGrad.
* AvgPool <-> AvgPoolGrad are each other's transposes.
* MaxPool's JVP is MaxPoolGradGrad (the tangent at each window's first max),
  whose transpose is MaxPoolGrad (and vice versa).
* Batching folds the vmapped axis into N (reshape, op, reshape) where the op
  treats examples independently, and otherwise, for convolutions and BiasAdd(Grad),
  into the channels (one convolution group per example), so vmap and per-example
  gradients keep the TF names.

Semantics choices are written down in docs/semantics/nn.md.
"""

from tfprims.ops.nn import conv, bias, pool, batch_norm, lrn
from tfprims.ops.nn import top_k
from tfprims.ops.nn import losses, ctc, ctc_decode
from tfprims.ops.nn import pool3d
from tfprims.ops.nn import pool_argmax
from tfprims.ops.nn import dilation
from tfprims.ops.nn import conv_variants
from tfprims.ops.nn import conv_cpu, pool_cpu
from tfprims.ops.nn import rnn_blocks
from tfprims.ops.nn import cudnn_rnn
from tfprims.ops.nn import fake_quant
from tfprims.ops.nn import isotonic
from tfprims.ops.nn import fractional_pool
from tfprims.ops.nn.batch_norm import (
  FusedBatchNorm,
  FusedBatchNormGrad,
  FusedBatchNormGradV2,
  FusedBatchNormGradV3,
  FusedBatchNormV2,
  FusedBatchNormV3,
)
from tfprims.ops.nn.bias import BiasAdd, BiasAddGrad, BiasAddV1
from tfprims.ops.nn.conv import (
  Conv2D,
  Conv2DBackpropFilter,
  Conv2DBackpropInput,
  Conv3D,
  Conv3DBackpropFilterV2,
  Conv3DBackpropInputV2,
  DepthwiseConv2dNative,
  DepthwiseConv2dNativeBackpropFilter,
  DepthwiseConv2dNativeBackpropInput,
)
from tfprims.ops.nn.lrn import LRN, LRNGrad
from tfprims.ops.nn.pool import (
  AvgPool,
  AvgPoolGrad,
  MaxPool,
  MaxPoolGrad,
  MaxPoolGradGrad,
  MaxPoolGradGradV2,
  MaxPoolGradV2,
  MaxPoolV2,
)
