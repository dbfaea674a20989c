"""``Assert``: TF's assertion op (``tf.debugging.Assert`` and every ``assert_*``,
which put it in the false branch of an ``If``).

It has no outputs. Its condition is checked as every op's declared data check
is (:func:`tfprims.interpreter.run_check`): a condition known when the function
runs (an eager call, constants) that is false raises :class:`RuntimeCheckError`
with TF's message (``assertion failed: [msg] [1 -2 3...]``); a traced one is
checked only with the ``runtime_checks`` config, through ``jax.debug.callback``
when the compiled program runs. With the ``enable_checkify_for_asserts`` config
(tf2jax's) it is also a ``jax.experimental.checkify.check``, seen by functions
wrapped in ``checkify.checkify``.
"""

from __future__ import annotations

from typing import Any, Sequence

import jax
import numpy as np

from tfprims import config, errors, interpreter
from tfprims.core import structural
from tfprims.interpreter import StringConstant

FAMILY = "asserts"


def _element(value) -> str:
  """One element as TF prints it (``%g`` with enough digits to round-trip)."""
  if isinstance(value, (bytes, np.bytes_)):
    return bytes(value).decode("utf-8", "replace")
  if isinstance(value, (str, np.str_)):
    return str(value)
  if isinstance(value, (bool, np.bool_)):
    return "1" if value else "0"
  if isinstance(value, np.floating):
    short, long = (6, 9) if value.dtype.itemsize <= 4 else (15, 17)
    text = f"{float(value):.{short}g}"
    return text if value.dtype.type(text) == value else f"{float(value):.{long}g}"
  if isinstance(value, (np.complexfloating, complex)):
    return f"({_element(np.real(value))},{_element(np.imag(value))})"
  return str(value.item() if isinstance(value, np.generic) else value)


def summarize(value, limit: int) -> str:
  """A tensor as TF's ``SummarizeValue`` prints it: nested brackets per dimension,
  at most ``limit`` elements (all when negative), ``...`` for the rest."""
  array = np.asarray(value)
  flat = array.reshape(-1)
  if array.ndim == 0:
    return _element(flat[0])
  limit = flat.size if limit < 0 else limit
  out: list[str] = []
  index = [0]

  def one_dim(dim: int) -> None:
    if index[0] >= limit:
      return
    if dim == array.ndim - 1:
      for i in range(array.shape[dim]):
        if index[0] >= limit:
          if dim != 0:
            out.append("...")
          return
        if i:
          out.append(" ")
        out.append(_element(flat[index[0]]))
        index[0] += 1
      return
    for _ in range(array.shape[dim]):
      opened = index[0] < limit
      if opened:
        out.append("[")
      one_dim(dim + 1)
      if index[0] < limit or opened:
        out.append("]")

  one_dim(0)
  if flat.size > limit:
    out.append("...")
  return "".join(out)


def message(data: Sequence[Any], limit: int) -> str:
  """TF's message for a failed Assert over the (known) ``data`` values."""
  parts = [summarize(d.value if isinstance(d, StringConstant) else d, limit) for d in data]
  return "assertion failed: " + " ".join(f"[{p}]" for p in parts)


def _traced(value) -> bool:
  return isinstance(value, jax.core.Tracer)


@structural(
  "Assert",
  family=FAMILY,
  doc="Checks its condition (a known false one raises; traced ones with the "
  "runtime_checks or enable_checkify_for_asserts configs); no outputs.",
)
def _assert(ctx, node, inputs):
  cond, data = inputs[0], list(inputs[1:])
  limit = int(node.attr("summarize", 3))
  traced = [k for k, d in enumerate(data) if _traced(d)]

  def text(values) -> str:
    filled = list(data)
    for k, v in zip(traced, values):
      filled[k] = np.asarray(v)
    return message(filled, limit)

  if not _traced(cond):  # known now: raise like TF
    if not bool(np.asarray(cond)):
      # Data traced under a known condition (jit) shows as "?": only its shape is known.
      raise errors.RuntimeCheckError(node.op, node.name, text(["?"] * len(traced)))
    return []
  if ctx.option("enable_checkify_for_asserts"):
    from jax.experimental import checkify

    # Traced values print as numpy prints them (checkify formats them).
    template = [
      ("{}" if np.ndim(d) else "[{}]")
      if _traced(d)
      else "["
      + interpreter.checkify_message(
        summarize(d.value if isinstance(d, StringConstant) else d, limit)
      )
      + "]"
      for d in data
    ]
    checkify.check(
      cond,
      f"{node.op} node '{node.name}': assertion failed: " + " ".join(template),
      *[data[k] for k in traced],
    )
  if config.get_config("runtime_checks"):

    def fail(ok, *values):
      if not bool(ok):
        raise errors.RuntimeCheckError(node.op, node.name, text(values))

    jax.debug.callback(fail, cond, *[data[k] for k in traced])
  return []
