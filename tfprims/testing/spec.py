"""The property-test declaration an op carries next to its definition."""

from __future__ import annotations

import dataclasses
from typing import Any, Mapping, Optional, Sequence, Union

CHECKS = ("values", "shape", "jvp", "vjp", "vmap", "jit")


@dataclasses.dataclass(frozen=True)
class Spec:
  """How to property-test one op against ``tf.raw_ops.<Op>``.

  Attributes:
    calls: a Hypothesis strategy drawing keyword arguments for
      ``tf.raw_ops.<Op>``: TF inputs as numpy arrays (static inputs too), attrs
      as Python values (dtype attrs as numpy dtypes).
    skip: check name (one of ``CHECKS``) -> the reason it does not apply.
    rtol, atol: tolerances; a float, or a mapping from dtype name
      (``"float32"``) to float. Defaults are dtype-aware.
    diff_args: TF input names to differentiate for jvp/vjp/vmap-of-grad
      (default: every non-static input of a float or complex dtype).
    grad_oracle: ``"forward"`` (``tf.autodiff.ForwardAccumulator``), ``"vjp"``
      (``tf.GradientTape``) or ``"fd"`` (central differences), for ops whose TF
      forward mode is known to be wrong.
    note: free text shown in docs/ops.md.
  """
  calls: Any
  skip: Mapping[str, str] = dataclasses.field(default_factory=dict)
  rtol: Union[None, float, Mapping[str, float]] = None
  atol: Union[None, float, Mapping[str, float]] = None
  diff_args: Optional[Sequence[str]] = None
  grad_oracle: str = "forward"
  note: str = ""

  def __post_init__(self):
    unknown = set(self.skip) - set(CHECKS)
    if unknown:
      raise ValueError(f"unknown checks in skip: {sorted(unknown)}; known: {CHECKS}")
