"""FFTs and audio features.

Submodules, each op with its impl, rules and property spec:

* :mod:`~tfprims.ops.fft.fft`: FFT, IFFT, FFT2D, IFFT2D, FFT3D, IFFT3D, FFTND, IFFTND.
* :mod:`~tfprims.ops.fft.rfft`: RFFT, IRFFT, RFFT2D, IRFFT2D, RFFT3D, IRFFT3D,
  RFFTND, IRFFTND.
* :mod:`~tfprims.ops.fft.audio`: AudioSpectrogram, Mfcc.
* :mod:`~tfprims.ops.fft.microfrontend`: AudioMicrofrontend (the TFLite micro
  frontend, fixed point, bit exact).
* ``_common.py``: shape checks, fitting to ``fft_length``, batching; ``_specs.py``: the
  specs' TF oracles and call strategies.

Rules bind other ops through :data:`tfprims.core.tfops`. Semantics chosen where TF
raises or has no CPU kernel: docs/semantics/fft.md.
"""

from tfprims.ops.fft import audio, fft, microfrontend, rfft
from tfprims.ops.fft._common import FAMILY
from tfprims.ops.fft.fft import FFT, FFT2D, FFT3D, FFTND, IFFT, IFFT2D, IFFT3D, IFFTND
from tfprims.ops.fft.rfft import IRFFT, IRFFT2D, IRFFT3D, IRFFTND, RFFT, RFFT2D, RFFT3D, RFFTND
from tfprims.ops.fft.audio import AudioSpectrogram, Mfcc
from tfprims.ops.fft.microfrontend import AudioMicrofrontend
