"""Elementwise math: unary, binary (TF broadcasting), comparisons, logical, Cast.

One module per kind of op, each op with its impl, rules and property spec:

* ``unary.py``: Neg, Abs, Sign, Square, Sqrt, Rsqrt, Exp, Expm1, Log, Log1p,
  trigonometric and hyperbolic functions, rounding, Reciprocal/Inv, Erf, Erfc,
  Lgamma, Digamma, IsNan/IsInf/IsFinite;
* ``complex.py``: Complex, Conj, Real, Imag, Angle, ComplexAbs;
* ``arithmetic.py``: AddV2, Add, Sub, Mul, the divisions and modulos, Pow,
  Maximum, Minimum, SquaredDifference, Atan2, Xdivy, Xlogy, Xlog1py, NextAfter,
  ClipByValue, AddN;
* ``bitwise_logical.py``: Invert, Bitwise*, shifts, PopulationCount, Logical*;
* ``comparison.py``: Equal, NotEqual, Less(Equal), Greater(Equal), ApproximateEqual;
* ``casts.py``: Cast, ToBool, StochasticCastToInt;
* ``bessel.py``: BesselI0/I0e/I1/I1e, BesselK0/K0e/K1/K1e, BesselJ0/J1, BesselY0/Y1;
* ``special.py``: Erfinv, Ndtri, Dawsn, Expint, FresnelCos, FresnelSin, Spence;
* ``gamma.py``: Igamma, Igammac, IgammaGradA, Betainc, Zeta, Polygamma;
* ``grad_ops.py``: TF's gradient ops of unary math (SqrtGrad, RsqrtGrad,
  ReciprocalGrad, InvGrad, TanhGrad, SigmoidGrad);
* ``_common.py``: the family's ``register_op`` keywords, impl broadcasting and
  spec vocabulary.

Every op here batches with ``batching="elementwise"`` (vmap re-binds the same
``tf.*`` primitive; Equal/NotEqual add the scalar result of incompatible
shapes). The derivatives that matter are written with TF ops through
:data:`tfprims.core.tfops`, as TF's own gradient functions
(``tensorflow/python/ops/math_grad.py``) are, so ``jax.make_jaxpr(jax.grad(f))``
reads like TF: ``tf.Mul``, ``tf.SqrtGrad``, ``tf.TanhGrad``, ... Each TF op used
linearly inside a tangent has a transpose rule that sums the cotangent back to
the operand's shape (TF broadcasting). Where TF defines a gradient at a kink
(Abs at 0, Maximum/Minimum ties, ClipByValue at the bounds, Pow's exponent at
x <= 0) the rules follow TF.

Semantics chosen where TF raises at run time or is platform-dependent (integer
division by zero, float->int casts of NaN/inf/out-of-range values, shift
amounts, ...) are in docs/semantics/elementwise.md. Property specs draw calls
with ``st.unary_calls``/``st.binary_calls`` (tfprims.testing.strategies).

The ops are importable from this package (``from tfprims.ops.elementwise import
Mul``); rules bind them through ``tfops``.
"""

from tfprims.ops.elementwise import (
  arithmetic,
  bitwise_logical,
  casts,
  comparison,
  complex,
  grad_ops,
  unary,
)
from tfprims.ops.elementwise import bessel, gamma, special
from tfprims.ops.elementwise.arithmetic import (
  Add,
  AddN,
  AddV2,
  Atan2,
  ClipByValue,
  Div,
  DivNoNan,
  FloorDiv,
  FloorMod,
  Maximum,
  Minimum,
  Mod,
  Mul,
  MulNoNan,
  NextAfter,
  Pow,
  RealDiv,
  SquaredDifference,
  Sub,
  TruncateDiv,
  TruncateMod,
  Xdivy,
  Xlog1py,
  Xlogy,
)
from tfprims.ops.elementwise.bessel import (
  BesselI0,
  BesselI0e,
  BesselI1,
  BesselI1e,
  BesselJ0,
  BesselJ1,
  BesselK0,
  BesselK0e,
  BesselK1,
  BesselK1e,
  BesselY0,
  BesselY1,
)
from tfprims.ops.elementwise.bitwise_logical import (
  BitwiseAnd,
  BitwiseOr,
  BitwiseXor,
  Invert,
  LeftShift,
  LogicalAnd,
  LogicalNot,
  LogicalOr,
  PopulationCount,
  RightShift,
)
from tfprims.ops.elementwise.casts import Cast, StochasticCastToInt, ToBool
from tfprims.ops.elementwise.comparison import (
  ApproximateEqual,
  Equal,
  Greater,
  GreaterEqual,
  Less,
  LessEqual,
  NotEqual,
)
from tfprims.ops.elementwise.complex import Angle, Complex, ComplexAbs, Conj, Imag, Real
from tfprims.ops.elementwise.gamma import Betainc, Igamma, IgammaGradA, Igammac, Polygamma, Zeta
from tfprims.ops.elementwise.grad_ops import (
  InvGrad,
  ReciprocalGrad,
  RsqrtGrad,
  SigmoidGrad,
  SqrtGrad,
  TanhGrad,
)
from tfprims.ops.elementwise.special import (
  Dawsn,
  Erfinv,
  Expint,
  FresnelCos,
  FresnelSin,
  Ndtri,
  Spence,
)
from tfprims.ops.elementwise.unary import (
  Abs,
  Acos,
  Acosh,
  Asin,
  Asinh,
  Atan,
  Atanh,
  Ceil,
  Cos,
  Cosh,
  Digamma,
  Erf,
  Erfc,
  Exp,
  Expm1,
  Floor,
  Inv,
  IsFinite,
  IsInf,
  IsNan,
  Lgamma,
  Log,
  Log1p,
  Neg,
  Reciprocal,
  Rint,
  Round,
  Rsqrt,
  Sign,
  Sin,
  Sinh,
  Sqrt,
  Square,
  Tan,
  Tanh,
)
