"""Array ops: reshaping, joining and splitting, slicing, padding, gathering,
selection, filling, shape queries, identities, bitcasts, scans, and the ops whose
output shape depends on data.

=================  ==============================================================
module             ops
=================  ==============================================================
``shape``          Reshape, Transpose, ExpandDims, Squeeze; Shape, ShapeN, Size,
                   Rank (``shape_only``: answered from static shapes)
``join_split``     ConcatV2, Pack, Unpack, Split, SplitV
``slicing``        Slice, StridedSlice, StridedSliceGrad (``strided_slice_plan``)
``pad_tile``       Tile, BroadcastTo, Pad, PadV2, MirrorPad
``gather``         GatherV2, OneHot
``gather_nd``      GatherNd, Gather (v1)
``scatter``        ScatterNd, ScatterNdNonAliasingAdd, TensorScatterAdd/Sub/Min/Max/Update,
                   SparseToDense
``inplace``        InplaceAdd, InplaceSub, InplaceUpdate, TensorStridedSliceUpdate
``select``         Select, SelectV2
``fill``           Fill, ZerosLike, OnesLike, Range (``range_values``)
``identity``       Identity, Snapshot (``pass_through``), StopGradient, EnsureShape,
                   CheckNumerics, CheckNumericsV2
``bitcast``        Bitcast
``scan``           ReverseV2, Cumsum, Cumprod
``space_batch``    SpaceToBatchND, BatchToSpaceND, SpaceToBatch, BatchToSpace
``layout``         DataFormatDimMap, DataFormatVecPermute, Reverse, ReverseSequence,
                   Roll, Concat, ConcatOffset, ParallelConcat, MirrorPadGrad
``misc``           Diag, DiagPart, UnravelIndex, InvertPermutation, LinSpace, Empty,
                   DeepCopy, BroadcastArgs, BroadcastGradientArgs
``data_dependent`` Where (one argument), Unique*, ListDiff:
                   no primitive; computed with numpy when their inputs are known
``buckets``        Bucketize, LowerBound, UpperBound, HistogramFixedWidth, Bincount,
                   DenseBincount
``stitch``         DynamicStitch, ParallelDynamicStitch (``size`` param)
=================  ==============================================================

``_common`` holds what the modules share (the family name, TF's axis check); the
segment modules share ``_segment_common`` (kernels) and ``_segment_specs`` (spec
strategies). Static params are read as ints and specs draw index arrays with the
helpers every family shares (:mod:`tfprims.ops.shared`, :mod:`tfprims.ops.shared_specs`).
Each op's impl, rules and property spec live together in its module.

Shape-deciding inputs (shapes, axes, begin/end/size, paddings, multiples...) are
static: they arrive as params. The data-movement ops are linear, with transposes
written with TF ops (Slice <-> Pad, StridedSlice <-> StridedSliceGrad, ConcatV2 ->
SplitV, Pack <-> Unpack, Tile/BroadcastTo -> Sum + Reshape...), and their batching
rules re-bind TF ops with adjusted params, so grad and vmap jaxprs keep TF names.
Rules reach every op through :data:`tfprims.core.tfops`. Choices where TF raises
at run time (GatherV2 out-of-range indices, CheckNumerics, ReverseSequence lengths,
UnravelIndex, InvertPermutation, BroadcastArgs) are documented in
docs/semantics/array.md.
"""

from tfprims.ops.array import (
  bitcast,
  data_dependent,
  fill,
  gather,
  identity,
  join_split,
  pad_tile,
  scan,
  select,
  shape,
  slicing,
)
from tfprims.ops.array import layout, misc, space_batch
from tfprims.ops.array import gather_nd, inplace, scatter
from tfprims.ops.array import buckets, stitch
from tfprims.ops.array._common import FAMILY
from tfprims.ops.array import segments, sparse_segments
from tfprims.ops.array.bitcast import Bitcast
from tfprims.ops.array.fill import Fill, OnesLike, Range, ZerosLike, range_values
from tfprims.ops.array.gather import GatherV2, OneHot
from tfprims.ops.array.identity import (
  CheckNumerics,
  CheckNumericsV2,
  EnsureShape,
  Identity,
  Snapshot,
  StopGradient,
)
from tfprims.ops.array.join_split import ConcatV2, Pack, Split, SplitV, Unpack
from tfprims.ops.array.pad_tile import BroadcastTo, MirrorPad, Pad, PadV2, Tile
from tfprims.ops.array.scan import Cumprod, Cumsum, ReverseV2
from tfprims.ops.array.select import Select, SelectV2
from tfprims.ops.array.shape import (
  ExpandDims,
  Rank,
  Reshape,
  Shape,
  ShapeN,
  Size,
  Squeeze,
  Transpose,
)
from tfprims.ops.array.slicing import (
  StridedPlan,
  StridedSlice,
  StridedSliceGrad,
  Slice,
  strided_slice_plan,
)
