"""``PreventGradient``: the identity, whose derivatives raise ``PreventGradientError``
(a ``LookupError``, as TF raises). jax2tf puts it on the results of functions
converted with ``with_gradient=False``.

With the ``raise_on_prevent_gradient`` config off (read at conversion, as in
tf2jax) the node passes its input through and derivatives flow as the identity's.
"""

from __future__ import annotations

import warnings

from tfprims import errors, interpreter
from tfprims.core import register_op, tfops


def _prevent_gradient(ctx, node, inputs):
  """Binds ``tf.PreventGradient`` (whose derivatives raise); with the
  ``raise_on_prevent_gradient`` config off, passes its input through, derivatives
  included (tf2jax's behaviour), and warns."""
  if ctx.option("raise_on_prevent_gradient"):
    op = tfops.PreventGradient
    operands, params = op.prepare({"input": inputs[0]}, interpreter.AttrView(node), node.name)
    return [op.apply(operands, params)]
  message = node.attr("message", "")
  # Python's warning filters show it once per node and reason.
  warnings.warn(
    f"PreventGradient node '{node.name}' is ignored (raise_on_prevent_gradient is "
    f"off): derivatives flow through it" + (f"; its reason: {message}" if message else ""),
    stacklevel=2,
  )
  return [inputs[0]]


def _prevent_gradient_jvp(primals, tangents, *, message):
  raise errors.PreventGradientError(
    "differentiation through a PreventGradient op"
    + (f": {message}" if message else "")
    + " (TF forbids gradients here, e.g. a jax2tf function converted with "
    "with_gradient=False)"
  )


def _prevent_batch(args, dims, *, message):
  return tfops.PreventGradient(args[0], message=message), dims[0]


PreventGradient = register_op(
  "PreventGradient",
  lambda input, *, message: input,
  family="custom_gradients",
  attrs=("message",),
  linear_values=True,
  jvp=_prevent_gradient_jvp,
  batching=_prevent_batch,
  interpret=_prevent_gradient,
  doc="The identity; differentiating through it raises PreventGradientError.",
  spec=lambda st: st.Spec(
    st.unary(st.ALL, arg="input"),
    skip={
      "jvp": "differentiation raises errors.PreventGradientError (TF raises LookupError)",
      "vjp": "differentiation raises errors.PreventGradientError (TF raises LookupError)",
    },
  ),
)
