"""Working with a converted function's params.

Params are a flat ``{variable name: array}`` mapping (see
:func:`tfprims.convert`); ``fn.param_specs[name].trainable`` tells which ones
are trainable and ``fn.tf_variables[name]`` is the ``tf.Variable`` each came
from.
"""

from __future__ import annotations

from typing import Any, Mapping

import numpy as np

from tfprims import errors

__all__ = ["split_trainable", "merge_params", "assign_variables", "trainable_names"]


def trainable_names(fn) -> list[str]:
  """Names of the trainable params of a converted function, in param order."""
  return [k for k, s in fn.param_specs.items() if s.trainable]


def split_trainable(fn, params: Mapping[str, Any]) -> tuple[dict, dict]:
  """Splits params into ``(trainable, non_trainable)`` dicts using the TF
  variables' ``trainable`` flags (e.g. BatchNorm moving statistics and Keras
  seed-generator states are not trainable)."""
  unknown = sorted(set(params) - set(fn.param_specs))
  if unknown:
    raise errors.InputStructureError(f"params {unknown} are not params of {fn!r}")
  trainable, rest = {}, {}
  for k, v in params.items():
    (trainable if fn.param_specs[k].trainable else rest)[k] = v
  return trainable, rest


def merge_params(*parts: Mapping[str, Any]) -> dict:
  """The union of param dicts (e.g. updated trainable params and new_params'
  non-trainable ones); a name present twice raises."""
  out: dict = {}
  for part in parts:
    dup = sorted(set(out) & set(part))
    if dup:
      raise errors.InputStructureError(f"params {dup} given twice")
    out.update(part)
  return out


def assign_variables(fn, params: Mapping[str, Any]) -> None:
  """Writes params back into the TF variables they came from
  (``fn.tf_variables``), casting to each variable's dtype: after this the TF
  function computes with the new values."""
  variables = getattr(fn, "tf_variables", None) or {}
  missing = sorted(set(params) - set(variables))
  if missing:
    raise errors.InputStructureError(
      f"params {missing} have no tf.Variable to write to (only variables captured "
      "by the converted TF function can be assigned)"
    )
  for k, value in params.items():
    var = variables[k]
    value = np.asarray(value)
    want = var.dtype.as_numpy_dtype
    if value.shape != tuple(var.shape):
      raise errors.InputShapeError(
        f"param '{k}' has shape {list(value.shape)}, variable has {var.shape.as_list()}"
      )
    var.assign(value.astype(want, copy=False))
