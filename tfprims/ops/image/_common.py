"""Helpers shared by the image ops."""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np

FAMILY = "image"


def stored(x):
  """``x`` as a stored float32 value. XLA's CPU backend contracts a multiply feeding
  an add into one fused multiply-add (one rounding instead of two); TF's kernels round
  the product first. Sampling positions decide which pixels are read (and whether a
  sample falls outside the image), so they are computed with TF's two roundings:
  the select on NaN (an identity) keeps the product out of the contraction."""
  return jnp.where(jnp.isnan(x), jnp.asarray(np.nan, x.dtype), x)
