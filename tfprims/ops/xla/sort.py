"""XlaSort, XlaKeyValueSort and XlaVariadicSort: XLA's Sort.

XlaSort and XlaKeyValueSort sort along the last dimension in ascending total order,
as TF's XLA sort (its ``Lt`` comparator is XLA's ``TOTALORDER``): -NaN < -inf < ...
< -0.0 < 0.0 < ... < inf < NaN (``lax.sort`` by the floats' sign-magnitude integer
key). XlaVariadicSort's ``comparator`` is
a library function: a comparison of the first operand's pair, ``Less(lhs0, rhs0)``
(ascending) or ``Greater(lhs0, rhs0)`` (descending), is recognised and kept as the
param ``comparator=lt``/``gt``; other comparators have no ``lax.sort`` form and are
refused naming the node. Derivatives are derived from ``lax.sort`` (a gather of
the tangents by the sorting permutation); batching re-binds the op with the batch
axis in front.
"""

from __future__ import annotations

import functools

import jax.numpy as jnp
import numpy as np
from jax import lax

from tfprims import errors, rules
from tfprims.core import register_op, tfops
from tfprims.ops.xla import _common
from tfprims.ops.xla._common import FAMILY
from tfprims.errors import import_tensorflow

_NOTE = "oracle: the op under tf.function(jit_compile=True)"


def _total_order(x):
  """Floats as signed integers whose ascending order is XLA's TOTALORDER (the
  sign-magnitude bits, negatives flipped; as the StableHLO reader's
  ``total_order_key``, which this module does not import: it loads MLIR)."""
  int_type = {1: np.int8, 2: np.int16, 4: np.int32, 8: np.int64}[x.dtype.itemsize]
  bits = lax.bitcast_convert_type(x, int_type)
  return jnp.where(bits < 0, bits ^ np.iinfo(int_type).max, bits)


def _sort_impl(input):
  """Sorted along the last dimension in total order (-NaN first, NaN last, -0.0
  before 0.0)."""
  if not jnp.issubdtype(input.dtype, jnp.floating):
    return lax.sort(input, dimension=input.ndim - 1)
  return lax.sort((_total_order(input), input), dimension=input.ndim - 1, num_keys=1)[1]


def _specials(draw, st, x, scale):
  """``x`` (distinct floats, 0.0 among them) with its 0.0 made a NaN of a drawn sign
  or -0.0, where TOTALORDER parts from ``<`` (the first draws too). Values stay
  apart after the derivative checks' sanitizing (NaN -> 0.5, which no value is near
  unless ``scale`` is 0.5: -0.0 then); no ±inf, which would scale the central
  differences' step past the neighbours."""
  flat = x.reshape(-1).copy()
  if (flat == 0).any() and not draw(st.booleans()):
    nan = scale != 0.5 and not draw(st.booleans())
    flat[flat == 0] = np.copysign(np.nan, draw(st.sampled_from([-1.0, 1.0]))) if nan else -0.0
  return flat.reshape(x.shape)


def _sort_calls(st, key_value: bool):
  @st.composite
  def calls(draw):
    dtype = draw(
      st.dtypes(("float32", "float64", "bfloat16", "int32", "int64", "uint8", "int8", "float16"))
    )
    shape = list(draw(st.shapes(min_rank=1, max_rank=3, max_side=4)))
    if not draw(st.booleans()):  # mostly rows of 3 or 4 (the first draws too)
      shape[-1] = max(shape[-1], 3)
    shape = tuple(shape)
    n = int(np.prod(shape))
    if key_value:  # distinct keys: XLA's sort is not stable
      keys = draw(st.permutations(range(n)))
      keys = np.array(keys, np.float64).reshape(shape) - n // 2
      if st.is_float(dtype):
        keys = _specials(draw, st, keys, 1.0)
      vdtype = draw(st.dtypes(("float32", "int32", "bool", "complex64")))
      # small values: central differences step by the largest input, past the keys
      return dict(keys=keys.astype(dtype), values=st.draw_array(draw, vdtype, shape, lo=-3, hi=3))
    if not st.is_float(dtype):
      return dict(input=st.draw_array(draw, dtype, shape))
    # well-separated floats: near ties the derivative is not what central
    # differences see (ties are in tests/test_xla_ops.py)
    x = np.array(draw(st.permutations(range(n))), np.float64).reshape(shape) - n // 2
    scale = draw(st.sampled_from([1.25, 3.0, 0.5]))
    return dict(input=_specials(draw, st, x * scale, scale).astype(dtype))

  return calls()


XlaSort = register_op(
  "XlaSort",
  _sort_impl,
  family=FAMILY,
  batching=lambda args, dims: (tfops.XlaSort(rules.to_front(args[0], dims[0])), 0),
  spec=rules.per_op(
    lambda op: (
      lambda st: st.Spec(
        _sort_calls(st, False),
        grad_oracle="fd",
        oracle=_common.jit_oracle(op.op_type, ("input",)),
        note=_NOTE + "; derivatives against central differences",
      )
    )
  ),
)


def _key_value_sort_impl(keys, values):
  """(keys, values) sorted by the keys along the last dimension, in total order."""
  if not jnp.issubdtype(keys.dtype, jnp.floating):
    return list(lax.sort((keys, values), dimension=keys.ndim - 1, num_keys=1))
  return list(lax.sort((_total_order(keys), keys, values), dimension=keys.ndim - 1, num_keys=1)[1:])


def _key_value_sort_batch(args, dims):
  size = rules.batch_size(args, dims)
  k, v = (rules.with_batch_axis(a, d, size) for a, d in zip(args, dims))
  return tfops.XlaKeyValueSort(k, v), [0, 0]


XlaKeyValueSort = register_op(
  "XlaKeyValueSort",
  _key_value_sort_impl,
  family=FAMILY,
  multiple_results=True,
  batching=_key_value_sort_batch,
  spec=rules.per_op(
    lambda op: (
      lambda st: st.Spec(
        _sort_calls(st, True),
        grad_oracle="fd",
        oracle=_common.jit_oracle(op.op_type, ("keys", "values")),
        note=_NOTE + "; derivatives against central differences",
      )
    )
  ),
)


# --- XlaVariadicSort -------------------------------------------------------------------------


def _variadic_sort_impl(*inputs, dimension, comparator, is_stable):
  """``lax.sort`` by the first operand, ascending (``lt``) or descending (``gt``)."""
  d = int(dimension) % inputs[0].ndim
  if comparator == "lt":
    return list(lax.sort(tuple(inputs), dimension=d, num_keys=1, is_stable=bool(is_stable)))
  # descending and stable: ascending by (key, -position), then reversed
  pos = lax.broadcasted_iota(np.int32, inputs[0].shape, d)
  out = lax.sort((inputs[0], -pos) + tuple(inputs[1:]), dimension=d, num_keys=2, is_stable=False)
  return [lax.rev(o, (d,)) for i, o in enumerate(out) if i != 1]


def _classify_comparator(ctx, fname):
  graph = ctx.library.graph(fname)
  if len(graph.inputs) < 2 or len(graph.outputs) != 1:
    return None
  node = graph.by_name.get(graph.outputs[0][0])
  while node is not None and node.op == "Identity":
    node = graph.by_name.get(node.inputs[0][0])
  if node is None or node.op not in ("Less", "Greater"):
    return None
  if [r for r in node.inputs] != [(graph.inputs[0], 0), (graph.inputs[1], 0)]:
    return None
  return "lt" if node.op == "Less" else "gt"


def _variadic_sort_interpret(ctx, node, inputs):
  fname = node.attr("comparator").name
  kind = _classify_comparator(ctx, fname)
  if kind is None:
    raise errors.OpError(
      "XlaVariadicSort",
      node.name,
      f"its comparator {fname!r} is not Less or Greater of the first "
      "operand's pair, the orders lax.sort has",
    )
  op = tfops.XlaVariadicSort
  operands, params = op.prepare(
    {"inputs": list(inputs[:-1]), "dimension": inputs[-1]},
    dict(node.attrs, comparator=kind),
    node.name,
  )
  return list(op.apply(operands, params))


def _variadic_sort_batch(args, dims, *, dimension, comparator, is_stable):
  size = rules.batch_size(args, dims)
  xs = [rules.with_batch_axis(a, d, size) for a, d in zip(args, dims)]
  d = int(dimension) % (np.ndim(xs[0]) - 1)
  out = tfops.XlaVariadicSort(*xs, dimension=d + 1, comparator=comparator, is_stable=is_stable)
  return out, [0] * len(out)


@functools.lru_cache(maxsize=None)
def _tf_comparator(kind: str, dtype_names: tuple):
  tf = import_tensorflow()
  specs = [tf.TensorSpec([], tf.as_dtype(d)) for d in dtype_names for _ in range(2)]
  fn = (lambda *a: tf.less(a[0], a[1])) if kind == "lt" else (lambda *a: tf.greater(a[0], a[1]))
  return tf.function(fn, autograph=False).get_concrete_function(*specs)


def _variadic_sort_oracle():
  base = _common.jit_oracle("XlaVariadicSort", ("inputs",))

  def oracle(**kwargs):
    names = tuple(x.dtype.name for x in kwargs["inputs"])
    return base(**dict(kwargs, comparator=_tf_comparator(kwargs["comparator"], names)))

  oracle.__name__ = oracle.__qualname__ = base.__name__
  return oracle


def _variadic_sort_calls(st):
  @st.composite
  def calls(draw):
    shape = tuple(draw(st.shapes(min_rank=1, max_rank=3, max_side=4)))
    dim = draw(st.integers(-len(shape), len(shape) - 1))
    stable = draw(st.booleans())
    kdtype = draw(st.dtypes(("float32", "int32", "float64")))
    if stable:  # ties (a few int key values) are ordered by position
      keys = st.draw_array(draw, st.np_dtype("int32"), shape, int_lo=-2, int_hi=2)
    else:  # distinct keys
      keys = (
        np.array(draw(st.permutations(range(int(np.prod(shape))))), np.float64)
        .reshape(shape)
        .astype(kdtype)
      )
    others = [
      st.draw_array(draw, draw(st.dtypes(("float32", "int64", "bool"))), shape, lo=-3, hi=3)
      for _ in range(draw(st.integers(0, 2)))
    ]
    return dict(
      inputs=[keys] + others,
      dimension=np.array(dim, np.int32),
      comparator=draw(st.sampled_from(["lt", "gt"])),
      is_stable=stable,
    )

  return calls()


XlaVariadicSort = register_op(
  "XlaVariadicSort",
  _variadic_sort_impl,
  family=FAMILY,
  multiple_results=True,
  static=("dimension",),
  attrs=("comparator", "is_stable"),
  canonicalize=lambda p, *o: dict(
    p, dimension=int(np.asarray(p["dimension"])), is_stable=bool(p["is_stable"])
  ),
  interpret=_variadic_sort_interpret,
  batching=_variadic_sort_batch,
  spec=lambda st: st.Spec(
    _variadic_sort_calls(st),
    grad_oracle="fd",
    oracle=_variadic_sort_oracle(),
    note=_NOTE + ", the drawn comparator as a TF function; derivatives against central differences",
  ),
)
