"""The property-test declaration an op carries next to its definition."""

from __future__ import annotations

import dataclasses
from typing import Any, Callable, Mapping, Optional, Sequence, Union

CHECKS = ("values", "shape", "jvp", "vjp", "vmap", "jit")
GRAD_ORACLES = ("forward", "vjp", "fd")

Tolerance = Union[None, float, Mapping[str, float]]


@dataclasses.dataclass(frozen=True)
class Spec:
  """How to property-test one op against ``tf.raw_ops.<Op>``.

  Attributes:
    calls: a Hypothesis strategy drawing keyword arguments for
      ``tf.raw_ops.<Op>``: TF inputs as numpy arrays (static inputs too), attrs
      as Python values (dtype attrs as numpy dtypes).
    skip: check name (one of ``CHECKS``) -> the reason it does not apply.
    rtol, atol: value tolerances; a float, or a mapping from dtype name
      (``"float32"``) to float (the dtype of the compared output). Defaults are
      dtype-aware (see ``tfprims.testing.comparison.VALUE_TOL``).
    diff_args: TF input names to differentiate for jvp/vjp/vmap-of-grad
      (default: every non-static input of a float or complex dtype).
    grad_oracle: ``"forward"`` (``tf.autodiff.ForwardAccumulator``), ``"vjp"``
      (``tf.GradientTape``, as a dot-product test for the JVP) or ``"fd"``
      (central differences of TF for the JVP; the VJP is then checked to be the
      transpose of our JVP), for ops whose TF forward mode is known to be wrong
      or missing.
    note: free text shown in docs/ops.md.
    grad_rtol, grad_atol: tolerances of the derivative checks (default: the
      larger of ``comparison.GRAD_TOL`` and the value tolerances).
    jit_tol: relative and absolute tolerance of jit vs eager (default: a few ulps).
    sanitize_grads: derivative checks replace NaN by 0.5 and clip ±inf and huge
      values of float inputs (IEEE overflow is tested by ``values``, not by the
      derivative checks); set False to differentiate the drawn values as they are.
    oracle: what the checks compare with, when not ``tf.raw_ops.<the op's type>``: the
      TF op type to compare with; a function of the drawn keyword arguments returning
      TF tensors (TF code); or, for an op TF does not have (your own op), a numpy or
      JAX reference: called with the drawn numpy arrays and attrs, returning the
      expected output (a tuple or list for several). ``values``, ``shape`` and ``vmap``
      compare with what the reference returns; ``jvp`` with its central differences,
      and ``vjp`` is checked as the transpose of our JVP (as ``grad_oracle="fd"``).
      An op TF does not have, given no oracle, fails every check, saying so.
    vmap_variation: how the vmap check makes the other batch members from the
      drawn call: ``"permute"`` (values shuffled; floats shifted when that
      changes nothing), ``"scale"`` (floats times 0.5**k, ints unchanged: keeps
      positive-definite, symmetric, sorted or sign-constrained inputs valid) or
      ``"none"`` (copies: only the batching mechanics are tested). Members TF
      rejects fall back to copies.
    operands: for ops whose primitive does not take the TF op's inputs one to
      one: the drawn inputs (by name) that are its operands, in order (a list
      input gives one operand per element). The TensorList primitives compute
      on a list's dense items: their specs draw the list as an items array and
      their oracles wrap it in a TF list. None: ``op.prepare`` maps the inputs.
    params: with ``operands``: the drawn kwargs -> the primitive's params
      (default: none).
    fd_step: the relative step of ``grad_oracle="fd"``'s central differences
      (default: eps**(1/3) of the differentiated dtype, which balances truncation
      and rounding error); a piecewise op whose drawn points lie near kinks takes a
      smaller one, so the two evaluations stay on one piece.
    examples: the share of the Hypothesis profile's examples this op's checks
      run (at least 2), for ops each of whose calls compiles a large program
      (recurrent layers scanned over time, unrolled per layer and direction).
    cases: canonical calls (``tf.raw_ops`` kwargs, as ``calls`` draws them) every
      check runs before the drawn ones, in every profile: the op's boundary cases
      that random draws are unlikely to hit (a box spanning the whole image, a
      row of ``-inf`` logits, a window of equal values). TF must accept them.
    ignore_zero_sign: why the ``values`` check does not compare the sign of zero
      outputs (it does by default: ``-0.0`` and ``0.0`` differ), e.g. where TF's
      own sign of zero depends on the platform or the position in a SIMD packet.
  """

  calls: Any
  skip: Mapping[str, str] = dataclasses.field(default_factory=dict)
  rtol: Tolerance = None
  atol: Tolerance = None
  diff_args: Optional[Sequence[str]] = None
  grad_oracle: str = "forward"
  note: str = ""
  grad_rtol: Tolerance = None
  grad_atol: Tolerance = None
  jit_tol: Tolerance = None
  sanitize_grads: bool = True
  oracle: Union[None, str, Callable[..., Any]] = None
  vmap_variation: str = "permute"
  operands: Optional[Sequence[str]] = None
  params: Optional[Callable[[Mapping[str, Any]], Mapping[str, Any]]] = None
  examples: float = 1.0
  fd_step: Optional[float] = None
  cases: Sequence[Mapping[str, Any]] = ()
  ignore_zero_sign: str = ""

  def __post_init__(self):
    unknown = set(self.skip) - set(CHECKS)
    if unknown:
      raise ValueError(f"unknown checks in skip: {sorted(unknown)}; known: {CHECKS}")
    empty = [k for k, v in self.skip.items() if not (isinstance(v, str) and v.strip())]
    if empty:
      raise ValueError(f"skip reasons must be non-empty strings: {empty}")
    if self.vmap_variation not in ("permute", "scale", "none"):
      raise ValueError(
        f"vmap_variation must be 'permute', 'scale' or 'none', got {self.vmap_variation!r}"
      )
    if self.params is not None and self.operands is None:
      raise ValueError("params= needs operands= (op.prepare makes the params otherwise)")
    if not 0 < self.examples <= 1:
      raise ValueError(f"examples must be a share in (0, 1], got {self.examples!r}")
    if not all(isinstance(c, Mapping) for c in self.cases):
      raise ValueError("cases must be a sequence of tf.raw_ops keyword-argument dicts")
    if self.grad_oracle not in GRAD_ORACLES:
      raise ValueError(f"grad_oracle must be one of {GRAD_ORACLES}, got {self.grad_oracle!r}")

  @property
  def skips_everything(self) -> bool:
    return all(c in self.skip for c in CHECKS)
