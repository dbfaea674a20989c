"""Property-test spec helpers shared by the image modules."""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np


def with_nonfinite(st, draw, x):
  """A float array ``x`` with, in one draw of three, one to three elements set to
  +inf, -inf or NaN (bounded value draws have none): the resizers' specs check
  which outputs TF's kernels make non-finite."""
  if not jnp.issubdtype(x.dtype, jnp.floating) or x.size == 0 or draw(st.integers(0, 2)):
    return x
  flat = np.array(x).reshape(-1)
  for _ in range(draw(st.integers(1, 3))):
    flat[draw(st.integers(0, flat.size - 1))] = draw(st.sampled_from([np.inf, -np.inf, np.nan]))
  return flat.reshape(x.shape)
