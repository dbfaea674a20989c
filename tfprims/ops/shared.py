"""Runtime helpers several op families share, under public names.

An op family uses another family's code only through that family's public names or
through this module (and :mod:`tfprims.ops.shared_specs`, the shared property-test
helpers); no family imports another's private (underscore) names (checked in
tests/test_layout.py).

* Static params: :func:`ints` and :func:`scalar_int` read a static input as Python ints.
* Batching: :func:`fold_batching`, the rule of ops that treat examples independently
  (pooling, LRN, resize...): the vmapped axis is folded into N around one call of the
  op; :func:`merge_batch` and :func:`split_batch` fold and unfold it.
* Variants: :class:`VariantTensor`, a TF variant tensor whose elements are Python
  values (a ragged tensor's row partitions and values), read only by
  :data:`VARIANT_READERS`.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import jax.numpy as jnp
import numpy as np

from tfprims import errors, interpreter, rules

# --- static params ------------------------------------------------------------------------


def ints(value) -> tuple:
  """A static param (scalar or nested tuple) as a flat tuple of Python ints."""
  try:
    return tuple(int(v) for v in np.asarray(value, dtype=np.int64).reshape(-1))
  except TypeError:  # a symbolic dim (jax.export shape polymorphism) where an int is needed
    raise TypeError(
      f"this static input needs concrete sizes, but {value!r} holds the "
      "symbolic dims of a shape-polymorphic export: export with concrete "
      "shapes (tfprims export --batch N)"
    ) from None


def scalar_int(value) -> int:
  """A static scalar param as a Python int."""
  flat = ints(value)
  if len(flat) != 1:
    raise ValueError(f"expected a scalar, got {value!r}")
  return flat[0]


# --- batching: the vmapped axis folded into N ---------------------------------------------


def merge_batch(a, d):
  """Moves batch axis ``d`` to the front and merges it into N: (B*N, ...)."""
  a = jnp.moveaxis(a, d, 0) if d != 0 else a
  return a.reshape((a.shape[0] * a.shape[1],) + a.shape[2:])


def split_batch(out, b):
  """The inverse of :func:`merge_batch`: (B*N, ...) -> (B, N, ...)."""
  return out.reshape((b, out.shape[0] // b if b else 0) + out.shape[1:])


def fold_batching(op, fix_params=None):
  """vmap by folding the batch axis into N (every operand has N first); unbatched
  operands are broadcast. ``fix_params(params, batch_size)`` adjusts params that
  name the batch (AvgPoolGrad's orig_input_shape)."""

  def rule(args, dims, **p):
    b = rules.batch_size(args, dims)
    flat = []
    for a, d in zip(args, dims):
      if d is None:
        a, d = jnp.broadcast_to(a, (b,) + a.shape), 0
      flat.append(merge_batch(a, d))
    if fix_params is not None:
      p = fix_params(p, b)
    out = op(*flat, **p)
    if isinstance(out, (list, tuple)):
      return [split_batch(o, b) for o in out], [0] * len(out)
    return split_batch(out, b), 0

  return rule


# --- variant tensors kept as Python values --------------------------------------------------

#: The op types that read a :class:`VariantTensor`: the ragged ops that encode and
#: decode it, the TensorList ops that carry its elements (tf.map_fn's lists of rows),
#: and the shape ops (its static shape). Every other consumer is refused naming both
#: nodes (tfprims.interpreter.LazyValue).
VARIANT_READERS = (
  "RaggedTensorFromVariant",
  "RaggedTensorToVariantGradient",
  "TensorListFromTensor",
  "TensorListSetItem",
  "Pack",
  "Shape",
  "Size",
  "Rank",
)


@dataclasses.dataclass(frozen=True, eq=False)
class VariantTensor(interpreter.LazyValue):
  """A TF variant tensor of ``shape`` whose ``elements`` (flat, row-major) are Python
  values: a ragged tensor's components (tfprims.ops.ragged.variant), or None for an
  element of a reserved TensorList that nothing has set yet. It has no JAX
  representation: it passes between the :data:`VARIANT_READERS` (and pass-through
  ops, inlined calls), never into a primitive or a graph output."""

  shape: tuple = ()
  elements: tuple = ()

  @property
  def ndim(self) -> int:
    return len(self.shape)

  def __jax_array__(self):  # a graph output (convert_graph_def): refused, typed
    raise errors.UnsupportedInputError(
      f"the output of {self.op} node '{self.node}' is {self.what}, which has no JAX "
      "value: return the tensors it encodes (RaggedTensorFromVariant's), not the variant"
    )

  def element(self, i: int) -> "VariantTensor":
    """Element ``i`` of a vector, as a scalar variant."""
    return dataclasses.replace(self, shape=(), elements=(self.elements[i],))

  def stacked(self, elements: Any) -> "VariantTensor":
    """A vector of ``elements`` (payloads, or None where unset), of this kind."""
    elements = tuple(elements)
    return dataclasses.replace(self, shape=(len(elements),), elements=elements)


def variant(node, shape: tuple, elements, what: str = "a TF variant tensor") -> VariantTensor:
  """A :class:`VariantTensor` computed by ``node``."""
  return VariantTensor(
    node=node.name,
    op=node.op,
    readers=VARIANT_READERS,
    what=what,
    shape=tuple(shape),
    elements=tuple(elements),
  )


def stack_variants(node, values) -> VariantTensor:
  """``Pack`` (``tf.stack``) of variants of one shape along axis 0."""
  shapes = {getattr(v, "shape", None) for v in values}
  if not all(isinstance(v, VariantTensor) for v in values) or len(shapes) != 1:
    raise errors.OpError(node.op, node.name, "stacks variants with other values or shapes")
  if node.attr("axis", 0) != 0:
    raise errors.OpError(node.op, node.name, "stacks variants along an axis other than 0")
  (shape,) = shapes
  elements = tuple(e for v in values for e in v.elements)
  return dataclasses.replace(values[0], shape=(len(values),) + shape, elements=elements)
