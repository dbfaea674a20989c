"""What the linalg submodules share: the family name and the adjoint of impls."""

from __future__ import annotations

import jax.numpy as jnp

FAMILY = "linalg"


def adjoint(x, adj: bool):
  """The conjugate transpose of the innermost matrices when ``adj`` (impls only)."""
  return jnp.conj(jnp.swapaxes(x, -1, -2)) if adj else x
