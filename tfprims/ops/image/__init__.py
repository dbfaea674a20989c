"""Image ops (NHWC): resizing (nearest neighbor, bilinear, bicubic, area), ScaleAndTranslate,
CropAndResize, ImageProjectiveTransformV2/V3, with their TF gradient ops; non-max
suppression, bounding boxes, patches, colour, drawing and glimpses.

* ``resize.py``: ResizeNearestNeighbor, ResizeBilinear, ResizeBicubic, ResizeArea and the
  grad ops ResizeNearestNeighborGrad, ResizeBilinearGrad, ResizeBicubicGrad.
* ``scale_translate.py``: ScaleAndTranslate, ScaleAndTranslateGrad (every TF kernel).
* ``crop_and_resize.py``: CropAndResize, CropAndResizeGradImage, CropAndResizeGradBoxes.
* ``projective.py``: ImageProjectiveTransformV2, ImageProjectiveTransformV3.
* ``nms.py``: NonMaxSuppression, V2-V5, WithOverlaps (greedy NMS, soft-NMS).
* ``combined_nms.py``: CombinedNonMaxSuppression.
* ``boxes.py``: SampleDistortedBoundingBox, V2, StatelessSampleDistortedBoundingBox.
* ``bbox_proposals.py``: GenerateBoundingBoxProposals (TF has only a GPU kernel).
* ``patches.py``: DepthToSpace, SpaceToDepth, ExtractImagePatches, ExtractVolumePatches.
* ``color.py``: RGBToHSV, HSVToRGB, AdjustContrastv2, AdjustHue, AdjustSaturation.
* ``draw.py``: DrawBoundingBoxes, DrawBoundingBoxesV2.
* ``glimpse.py``: ExtractGlimpse, ExtractGlimpseV2.
* ``_common.py``: helpers (TF's float32 roundings under XLA's CPU backend, separable
  resampling); ``_specs.py``: spec helpers.

Semantics choices are written down in docs/semantics/image.md.
"""

from tfprims.ops.image import crop_and_resize, projective, resize, scale_translate
from tfprims.ops.image import bbox_proposals, boxes, combined_nms, nms
from tfprims.ops.image.crop_and_resize import (
  CropAndResize,
  CropAndResizeGradBoxes,
  CropAndResizeGradImage,
)
from tfprims.ops.image.projective import ImageProjectiveTransformV2, ImageProjectiveTransformV3
from tfprims.ops.image.resize import (
  ResizeArea,
  ResizeBicubic,
  ResizeBicubicGrad,
  ResizeBilinear,
  ResizeBilinearGrad,
  ResizeNearestNeighbor,
  ResizeNearestNeighborGrad,
)
from tfprims.ops.image.scale_translate import ScaleAndTranslate, ScaleAndTranslateGrad
from tfprims.ops.image import patches
from tfprims.ops.image import color
from tfprims.ops.image import draw
from tfprims.ops.image import glimpse
