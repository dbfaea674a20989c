"""Global conversion options (tf2jax-compatible names)."""

from __future__ import annotations

import contextlib
from typing import Any, Iterator

_DEFAULTS = {
    # Inputs and params must match the TF signature's shapes (None dims match anything).
    "strict_shape_check": True,
    # Array inputs must have the signature's dtype; when off they are cast to it.
    # Python scalars/lists are always cast.
    "strict_dtype_check": True,
    # Wrap each inlined function call in jax.named_scope(<function name>).
    "named_scopes": True,
    # Check what TF's CPU kernels check on data (indices in range, integer division
    # by zero...): eager calls raise RuntimeCheckError naming the node; under jit a
    # failed check raises through jax.debug.callback when the program runs. Off by
    # default: the converted program then computes what docs/semantics describes.
    "runtime_checks": False,
    # Output bounds for ops whose output size depends on data ({node name or op type:
    # n}). When such a node's input is traced (jit, vmap, grad) and a bound applies,
    # the op binds its padded primitive (tf.Where[size=n]...): the output has n rows,
    # TF's first results padded or cut to n (docs/semantics/array.md). Values known at
    # trace time (numpy inputs of an eager call) are still computed exactly. Read at
    # trace time.
    "dynamic_shape_bounds": {},
}
_config = dict(_DEFAULTS)


def get_config(name: str) -> Any:
  """The current value of a config option."""
  if name not in _config:
    raise KeyError(f"unknown tfprims config option {name!r}; known: {sorted(_config)}")
  return _config[name]


def update_config(name: str, value: Any) -> None:
  """Sets a config option globally."""
  get_config(name)
  _config[name] = value


@contextlib.contextmanager
def override_config(name: str, value: Any) -> Iterator[None]:
  """Temporarily sets a config option: ``with tfprims.override_config("strict_shape_check", False):``."""
  previous = get_config(name)
  _config[name] = value
  try:
    yield
  finally:
    _config[name] = previous
