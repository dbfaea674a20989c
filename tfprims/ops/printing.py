"""tf.print: ``StringFormat`` (the template and its tensors) and ``PrintV2``.

A converted ``tf.print`` prints the same template with the same values through
``jax.debug.callback``: at once in an eager call, each time the program runs under
``jit``, and once per batch element under ``vmap`` (unordered with respect to other
callbacks, as ``jax.debug.print``). Tensors are formatted with numpy, abbreviated
to ``summarize`` items at each end of each dimension as TF does; numpy's float
formatting (``1.`` where TF prints ``1``) is the one difference.
"""

from __future__ import annotations

import dataclasses
import sys
from typing import Any

import jax
import numpy as np

from tfprims.core import structural
from tfprims.interpreter import StringConstant

FAMILY = "debug"


@dataclasses.dataclass(frozen=True)
class Format:
  """A StringFormat node's value: its template and the tensors it formats."""

  template: str
  placeholder: str
  summarize: int
  values: tuple


@structural(
  "StringFormat",
  family=FAMILY,
  doc="The template and its tensors, formatted when printed (tf.print).",
)
def _string_format(ctx, node, inputs):
  fmt = Format(
    node.attr("template"), node.attr("placeholder"), int(node.attr("summarize")), tuple(inputs)
  )
  return [StringConstant(node.name, fmt)]


def _format_tensor(value, summarize: int) -> str:
  value = np.asarray(value)
  if summarize < 0:
    return np.array2string(value, separator=" ", threshold=sys.maxsize)
  return np.array2string(value, separator=" ", threshold=2 * summarize, edgeitems=summarize)


def _render(fmt: Format, values) -> str:
  parts = fmt.template.split(fmt.placeholder)
  text = [parts[0]]
  for value, rest in zip(values, parts[1:]):
    text += [_format_tensor(value, fmt.summarize), rest]
  return "".join(text)


@structural("PrintV2", family=FAMILY, doc="Prints its string (tf.print), eagerly or at run time.")
def _print_v2(ctx, node, inputs):
  stream = {"stdout": sys.stdout, "stderr": sys.stderr}.get(node.attr("output_stream"), sys.stderr)
  end = node.attr("end")
  value: Any = inputs[0].value if isinstance(inputs[0], StringConstant) else inputs[0]
  if isinstance(value, Format):
    fmt, values = value, list(value.values)
  else:  # a string constant printed as it is
    text = value.item() if isinstance(value, np.ndarray) and value.ndim == 0 else value
    text = text.decode() if isinstance(text, bytes) else str(text)
    fmt, values = Format(text, "\0", 3, ()), []  # no placeholder in it

  def emit(*vals):
    stream.write(_render(fmt, vals) + end)
    stream.flush()

  jax.debug.callback(emit, *values)  # eager: prints now; traced: when the program runs
  return []
