"""Compatibility layers for code written against other converters.

    from tfprims.compat import tf2jax      # instead of: import tf2jax

:mod:`tfprims.compat.tf2jax` has tf2jax's public names and conventions
(docs/migrating-from-tf2jax.md). Importing it changes no global setting.
"""

from tfprims.compat import tf2jax  # noqa: F401
