"""Image ops (NHWC): bicubic/area resizing, ScaleAndTranslate, CropAndResize and
ImageProjectiveTransformV2/V3, with their TF gradient ops.

(ResizeNearestNeighbor and ResizeBilinear live in ``tfprims.ops.nn.resize``.)

* ``resize.py``: ResizeBicubic, ResizeBicubicGrad, ResizeArea.
* ``scale_translate.py``: ScaleAndTranslate, ScaleAndTranslateGrad (every TF kernel).
* ``_common.py``: helpers (TF's float32 roundings under XLA's CPU backend).

Semantics choices are written down in docs/semantics/image.md.
"""

from tfprims.ops.image import resize, scale_translate  # noqa: F401,I001
from tfprims.ops.image.resize import ResizeArea, ResizeBicubic, ResizeBicubicGrad  # noqa: F401
from tfprims.ops.image.scale_translate import ScaleAndTranslate, ScaleAndTranslateGrad  # noqa: F401
