"""XlaReduce, XlaVariadicReduce, XlaVariadicReduceV2 and XlaReduceWindow.

Their ``reducer``/``computation`` attr is a library function. The interpreter hook
looks at it: one add, multiply, max or min of its two arguments becomes the param
``reducer=add`` (...), computed with lax's reductions (``reduce_sum``,
``reduce_max``, ``reduce_window_sum``...: the forms XLA and JAX differentiate,
with the init value combined once, as XLA's CPU reduction starts from it);
any other function is converted to a jaxpr (a :class:`_common.Computation` param,
printed with the function's name) and run by ``lax.reduce``/``lax.reduce_window``
as the body. Variadic reductions (argmax-style pairs) always take that path.

Derivatives and batching are derived from the lax impl: reductions with a simple
reducer differentiate as lax's; JAX cannot differentiate a general reduction body.
A reduce window's padding and base-dilation holes contribute nothing (as XLA's CPU
computes it; they are padded explicitly with the reducer's identity so add, max and
min keep lax's monoid forms; multiply runs as a general body).
"""

from __future__ import annotations

import functools

import jax.numpy as jnp
import numpy as np
from jax import lax

from tfprims import dtypes, rules
from tfprims.core import register_op, tfops
from tfprims.ops.xla import _common
from tfprims.ops.xla._common import FAMILY, INDEX_DTYPES
from tfprims.errors import import_tensorflow

_KINDS = ("add", "mul", "max", "min")


def _identity(kind, dtype):
  dtype = np.dtype(dtype)
  if kind in ("add", "mul"):
    return np.array(0 if kind == "add" else 1, dtype)
  if dtype.kind == "f" or dtype.name == "bfloat16":
    return np.array(-np.inf if kind == "max" else np.inf, dtype)
  info = np.iinfo(dtype)
  return np.array(info.min if kind == "max" else info.max, dtype)


_COMBINE = {"add": lax.add, "mul": lax.mul, "max": lax.max, "min": lax.min}


# --- computations drawn by the specs, by name -------------------------------------------

_SPEC_BODIES = {
  # max written as a select: not a simple reducer, so it runs as a general body
  "select_max": (1, lambda a, b: [jnp.where(a >= b, a, b)]),
  # (value, index) pairs: the larger value, the smaller index on ties
  "argmax": (
    2,
    lambda av, ai, bv, bi: [
      jnp.where((av > bv) | ((av == bv) & (ai < bi)), av, bv),
      jnp.where((av > bv) | ((av == bv) & (ai < bi)), ai, bi),
    ],
  ),
}


@functools.lru_cache(maxsize=None)
def spec_computation(name: str, dtypes_: tuple) -> _common.Computation:
  """A drawn general body (``"select_max"``, ``"argmax"``) on scalars of ``dtypes_``."""
  _, fn = _SPEC_BODIES[name]
  return _common.python_computation(name, fn, dtypes_ + dtypes_)


@functools.lru_cache(maxsize=None)
def tf_spec_computation(name: str, dtype_names: tuple):
  """The TF function of a drawn body or simple reducer, for the oracle."""
  tf = import_tensorflow()
  if name in _KINDS:
    return _common.tf_computation(name, dtype_names[0])
  specs = [tf.TensorSpec([], tf.as_dtype(d)) for d in dtype_names * 2]
  if name == "select_max":
    fn = lambda a, b: tf.where(a >= b, a, b)
  else:

    def fn(av, ai, bv, bi):
      take = tf.logical_or(av > bv, tf.logical_and(av == bv, ai < bi))
      return tf.where(take, av, bv), tf.where(take, ai, bi)

  return tf.function(fn, autograph=False).get_concrete_function(*specs)


def _reducer_param(reducer, operands):
  if isinstance(reducer, str) and reducer in _SPEC_BODIES:
    n = len(operands) // 2
    # canonical dtypes key the cache: a body traced with x64 off has 32-bit avals
    return spec_computation(reducer, tuple(dtypes.canonical_dtype(o.dtype) for o in operands[:n]))
  return reducer


def _reducer_of(ctx, node, attr, operands):
  """The param for a node's reducer function: a simple reducer's name or the
  converted function."""
  fname = node.attr(attr).name
  n = len(operands) // 2
  if n == 1:
    kind = _common.classify_computation(ctx, fname)
    if kind in _KINDS:
      return kind
  ds = [
    dtypes.canonical_dtype(np.asarray(o).dtype if not hasattr(o, "aval") else o.dtype)
    for o in operands[:n]
  ]
  return _common.convert_computation(ctx, node, fname, ds + ds)


def _interpret(op, attr, names):
  def hook(ctx, node, inputs):
    groups = _group(node, op.op_type, inputs, names)
    data = list(inputs[:2]) if op.op_type in ("XlaReduce", "XlaReduceWindow") else list(inputs)
    reducer = _reducer_of(ctx, node, attr, data)
    operands, params = op.prepare(groups, dict(node.attrs, **{attr: reducer}), node.name)
    out = op.apply(operands, params)
    return list(out) if op.multiple_results else [out]

  return hook


def _group(node, op_type, inputs, names):
  """The node's inputs by op-def arg name (list args as lists)."""
  if op_type == "XlaReduceWindow" or op_type == "XlaReduce":
    return dict(zip(names, inputs))
  n = len(inputs) // 2
  return {names[0]: list(inputs[:n]), names[1]: list(inputs[n:])}


def _batching(op, impl, multiple_results, attr):
  """vmap of the impl; a general body with per-example init values (which lax's
  general reduce and reduce_window do not batch) runs once per example
  (``lax.map`` of the op)."""
  derived = rules.vmap_batching(impl, multiple_results)

  def rule(args, dims, **params):
    n = len(args) // 2 if op.op_type.startswith("XlaVariadic") else 1
    inits = dims[n : 2 * n]
    general = not isinstance(params[attr], str) or (
      op.op_type == "XlaReduceWindow" and params[attr] == "mul"
    )
    if not general or all(d is None for d in inits):
      return derived(args, dims, **params)
    size = rules.batch_size(args, dims)
    xs = [
      jnp.moveaxis(a, d, 0) if d is not None else jnp.broadcast_to(a, (size,) + a.shape)
      for a, d in zip(args, dims)
    ]
    out = lax.map(lambda ab: op(*ab, **params), tuple(xs))
    return (list(out), [0] * len(out)) if multiple_results else (out, 0)

  return rule


# --- XlaReduce and the variadic reductions ---------------------------------------------------


def _reduce(xs, inits, dims, reducer):
  if not dims:  # XLA returns the operands: the init value is never applied
    return list(xs)
  if isinstance(reducer, str):
    (x,), (init,) = xs, inits
    if any(x.shape[d] == 0 for d in dims):
      # Nothing to reduce: XLA's result is the init value, which alone is differentiated
      # (lax's max/min JVP divides by the count of maxima, 0 here: a NaN tangent).
      kept = tuple(s for i, s in enumerate(x.shape) if i not in dims)
      return [jnp.broadcast_to(init, kept)]
    reduced = lax.reduce(x, _identity(reducer, x.dtype), _COMBINE[reducer], dims)
    return [_COMBINE[reducer](init, reduced)]
  out = lax.reduce(tuple(xs), tuple(inits), lambda a, b: tuple(reducer(*a, *b)), dims)
  return list(out)


def _reduce_impl(input, init_value, *, dimensions_to_reduce, reducer):
  """XLA Reduce: a simple reducer as lax's reduction combined with the init value
  once; any other function as ``lax.reduce``'s body."""
  return _reduce([input], [init_value], tuple(dimensions_to_reduce), reducer)[0]


def _variadic_reduce_impl(*operands, dimensions_to_reduce, reducer):
  """XLA's variadic Reduce (``lax.reduce`` over tuples) with the converted function."""
  n = len(operands) // 2
  return _reduce(list(operands[:n]), list(operands[n:]), tuple(dimensions_to_reduce), reducer)


def _canonicalize(params, *operands):
  return dict(
    params,
    dimensions_to_reduce=tuple(int(d) for d in params["dimensions_to_reduce"]),
    reducer=_reducer_param(params["reducer"], operands),
  )


def _reduce_calls(st):
  @st.composite
  def calls(draw):
    reducer = draw(st.sampled_from(_KINDS))
    dtype = draw(
      st.dtypes(
        ("float32", "float64", "bfloat16", "int32", "int64", "uint8")
        if reducer in ("max", "min")
        else ("float32", "float64", "int32", "int64", "complex64")
      )
    )
    shape = tuple(draw(st.shapes(max_rank=3, max_side=3)))
    dims = sorted(draw(st.permutations(range(len(shape))))[: draw(st.integers(0, len(shape)))])
    bounds = dict(lo=-2, hi=2) if st.is_inexact(dtype) else dict(int_lo=-3, int_hi=3)
    x = st.draw_array(draw, dtype, shape, **bounds)
    if reducer in ("max", "min") and st.is_float(dtype):
      # distinct values: the derivative at ties is not the one central differences see
      x = (
        (np.arange(x.size).reshape(shape) * 0.37 - x.size * 0.1).astype(dtype)
        if draw(st.booleans())
        else x
      )
    # XLA leaves the result implementation-defined unless init is the identity
    return dict(
      input=x, init_value=_identity(reducer, dtype), dimensions_to_reduce=dims, reducer=reducer
    )

  return calls()


def _oracle(op_type, tensor_args, inputs_arg):
  base = _common.jit_oracle(op_type, tensor_args)

  def oracle(**kwargs):
    xs = kwargs[inputs_arg]
    xs = xs if isinstance(xs, list) else [xs]
    names = tuple(x.dtype.name for x in xs)
    kwargs = dict(
      kwargs,
      **{
        k: tf_spec_computation(kwargs[k], names) for k in ("reducer", "computation") if k in kwargs
      },
    )
    return base(**kwargs)

  oracle.__name__ = oracle.__qualname__ = base.__name__
  return oracle


_NOTE = (
  "oracle: the op under tf.function(jit_compile=True), the drawn reducer as a TF "
  "function; derivatives against central differences"
)
_INIT_NOTE = (
  "; init values are the reducer's identity (with others XLA's result is "
  "implementation-defined, see docs/semantics/xla.md)"
)
_NO_GENERAL_GRAD = "JAX does not differentiate a general reduce body (docs/semantics/xla.md)"

XlaReduce = register_op(
  "XlaReduce",
  _reduce_impl,
  family=FAMILY,
  attrs=("dimensions_to_reduce", "reducer"),
  canonicalize=_canonicalize,
  batching=rules.per_op(_batching, _reduce_impl, False, "reducer"),
  interpret=rules.per_op(_interpret, "reducer", ("input", "init_value")),
  spec=rules.per_op(
    lambda op: (
      lambda st: st.Spec(
        _reduce_calls(st),
        grad_oracle="fd",
        note=_NOTE + _INIT_NOTE,
        diff_args=("input",),
        rtol={"bfloat16": 5e-2},
        oracle=_oracle(op.op_type, ("input", "init_value"), "input"),
      )
    )
  ),
)


def _variadic_calls(st, v2: bool):
  @st.composite
  def calls(draw):
    dtype = draw(st.dtypes(("float32", "float64", "int32")))
    shape = tuple(draw(st.shapes(max_rank=3, max_side=3)))
    dims = sorted(draw(st.permutations(range(len(shape))))[: draw(st.integers(0, len(shape)))])
    idx_dtype = dtype if not v2 else st.np_dtype(draw(st.sampled_from(INDEX_DTYPES)))
    values = st.draw_array(
      draw, dtype, shape, **(dict(lo=-2, hi=2) if st.is_float(dtype) else dict(int_lo=-3, int_hi=3))
    )
    index = np.arange(values.size).reshape(shape).astype(idx_dtype)
    inits = [np.array(-3, dtype), np.array(0, idx_dtype)]
    names = ("inputs", "init_values") if v2 else ("input", "init_value")
    return {
      names[0]: [values, index],
      names[1]: inits,
      "dimensions_to_reduce": dims,
      "reducer": "argmax",
    }

  return calls()


def _variadic_spec(st, op_type, v2):
  names = ("inputs", "init_values") if v2 else ("input", "init_value")
  return st.Spec(
    _variadic_calls(st, v2),
    note=_NOTE,
    oracle=_oracle(op_type, names, names[0]),
    skip={"jvp": _NO_GENERAL_GRAD, "vjp": _NO_GENERAL_GRAD},
  )


XlaVariadicReduce = register_op(
  "XlaVariadicReduce",
  _variadic_reduce_impl,
  family=FAMILY,
  multiple_results=True,
  attrs=("dimensions_to_reduce", "reducer"),
  canonicalize=_canonicalize,
  batching=rules.per_op(_batching, _variadic_reduce_impl, True, "reducer"),
  interpret=rules.per_op(_interpret, "reducer", ("input", "init_value")),
  spec=rules.per_op(lambda op: lambda st: _variadic_spec(st, op.op_type, False)),
)

XlaVariadicReduceV2 = register_op(
  "XlaVariadicReduceV2",
  _variadic_reduce_impl,
  family=FAMILY,
  multiple_results=True,
  attrs=("dimensions_to_reduce", "reducer"),
  canonicalize=_canonicalize,
  batching=rules.per_op(_batching, _variadic_reduce_impl, True, "reducer"),
  interpret=rules.per_op(_interpret, "reducer", ("inputs", "init_values")),
  spec=rules.per_op(lambda op: lambda st: _variadic_spec(st, op.op_type, True)),
)


# --- XlaReduceWindow -------------------------------------------------------------------------


def _reduce_window_impl(
  input,
  init_value,
  *,
  window_dimensions,
  window_strides,
  base_dilations,
  window_dilations,
  padding,
  computation,
):
  """XLA ReduceWindow: each window's in-bounds elements folded into the init value
  (padding and base-dilation holes contribute nothing, as on XLA's CPU)."""
  if isinstance(computation, str) and computation != "mul":
    identity = _identity(computation, input.dtype)
    config = [(lo, hi, d - 1) for (lo, hi), d in zip(padding, base_dilations)]
    padded = lax.pad(input, identity, config)
    reduced = lax.reduce_window(
      padded,
      identity,
      _COMBINE[computation],
      window_dimensions,
      window_strides,
      "VALID",
      window_dilation=window_dilations,
    )
    return _COMBINE[computation](init_value, reduced)
  body = (
    _COMBINE[computation] if isinstance(computation, str) else (lambda a, b: computation(a, b)[0])
  )
  return lax.reduce_window(
    input,
    init_value,
    body,
    window_dimensions,
    window_strides,
    padding,
    base_dilation=base_dilations,
    window_dilation=window_dilations,
  )


def _window_canonicalize(params, *operands):
  ints = lambda v: tuple(int(x) for x in np.ravel(v))
  return dict(
    params,
    window_dimensions=ints(params["window_dimensions"]),
    window_strides=ints(params["window_strides"]),
    base_dilations=ints(params["base_dilations"]),
    window_dilations=ints(params["window_dilations"]),
    padding=tuple(tuple(int(v) for v in p) for p in params["padding"]),
    computation=_reducer_param(params["computation"], operands),
  )


def _reduce_window_calls(st):
  @st.composite
  def calls(draw):
    computation = draw(st.sampled_from(_KINDS))
    # multiply runs as a general body (lax has no reduce_window_mul): no derivative
    dtype = draw(
      st.dtypes(("float32", "float64", "int32") if computation != "mul" else ("int32", "int64"))
    )
    shape = tuple(draw(st.shapes(min_rank=1, max_rank=3, min_side=1, max_side=4)))
    rank = len(shape)
    window = [draw(st.integers(1, 3)) for _ in range(rank)]
    strides = [draw(st.integers(1, 2)) for _ in range(rank)]
    bdil = [draw(st.integers(1, 2)) for _ in range(rank)]
    # JAX does not differentiate max/min windows with window dilation
    wdil = [draw(st.integers(1, 2 if computation in ("add", "mul") else 1)) for _ in range(rank)]
    pad = [[draw(st.integers(0, 1)), draw(st.integers(0, 1))] for _ in range(rank)]
    for k in range(rank):
      have = (shape[k] - 1) * bdil[k] + 1 + sum(pad[k])
      pad[k][1] += max(0, (window[k] - 1) * wdil[k] + 1 - have)
    idx = st.np_dtype(draw(st.sampled_from(INDEX_DTYPES)))
    bounds = dict(lo=-2, hi=2) if st.is_float(dtype) else dict(int_lo=-3, int_hi=3)
    x = st.draw_array(draw, dtype, shape, **bounds)
    if computation != "add" and st.is_float(dtype):  # no ties: see _reduce_calls
      x = (np.arange(x.size).reshape(shape) * 0.37 - x.size * 0.1).astype(dtype)
      x = x * (0.5 if computation == "mul" else 1.0)
    return dict(
      input=x,
      init_value=_identity(computation, dtype),
      window_dimensions=np.array(window, idx),
      window_strides=np.array(strides, idx),
      base_dilations=np.array(bdil, idx),
      window_dilations=np.array(wdil, idx),
      padding=np.array(pad, idx).reshape(rank, 2),
      computation=computation,
    )

  return calls()


XlaReduceWindow = register_op(
  "XlaReduceWindow",
  _reduce_window_impl,
  family=FAMILY,
  static=("window_dimensions", "window_strides", "base_dilations", "window_dilations", "padding"),
  attrs=("computation",),
  canonicalize=_window_canonicalize,
  interpret=rules.per_op(
    _interpret,
    "computation",
    (
      "input",
      "init_value",
      "window_dimensions",
      "window_strides",
      "base_dilations",
      "window_dilations",
      "padding",
    ),
  ),
  batching=rules.per_op(_batching, _reduce_window_impl, False, "computation"),
  spec=rules.per_op(
    lambda op: (
      lambda st: st.Spec(
        _reduce_window_calls(st),
        grad_oracle="fd",
        note=_NOTE + _INIT_NOTE,
        diff_args=("input",),
        oracle=_oracle(op.op_type, ("input", "init_value"), "input"),
      )
    )
  ),
)


# --- XlaSelectAndScatter ------------------------------------------------------------------

#: Recognised ``select`` functions (one comparison of the two arguments), by TF op.
_SELECTS = {"GreaterEqual": "ge", "Greater": "gt", "LessEqual": "le", "Less": "lt"}
_COMPARE = {"ge": lax.ge, "gt": lax.gt, "le": lax.le, "lt": lax.lt}


def _classify_select(ctx, fname):
  """``"ge"``... when the select function is one comparison of its arguments in
  order, else None."""
  graph = ctx.library.graph(fname)
  if len(graph.inputs) != 2 or len(graph.outputs) != 1:
    return None
  node = graph.by_name.get(graph.outputs[0][0])
  while node is not None and node.op == "Identity" and node.inputs:
    node = graph.by_name.get(node.inputs[0][0])
  if node is None or node.op not in _SELECTS or len(node.inputs) != 2:
    return None
  if [r[0] for r in node.inputs] != list(graph.inputs):
    return None
  return _SELECTS[node.op]


def _scalar_fn(fn):
  """A function on scalars (a converted computation) applied elementwise."""
  if not isinstance(fn, _common.Computation):
    return fn
  return lambda a, b: jnp.vectorize(lambda x, y: fn(x, y)[0])(a, b)


def _select_and_scatter_impl(
  operand, source, init_value, *, window_dimensions, window_strides, padding, select, scatter
):
  """XLA SelectAndScatter: in each window the element ``select`` keeps (folded in
  window order over in-bounds elements: the current one stays while
  ``select(current, next)``) receives the window's ``source`` value, combined by
  ``scatter`` into an output that starts at ``init_value`` everywhere."""
  rank = operand.ndim
  keep = _COMPARE[select] if isinstance(select, str) else _scalar_fn(select)
  combine = _COMBINE[scatter] if isinstance(scatter, str) else _scalar_fn(scatter)
  padded_shape = tuple(n + lo + hi for n, (lo, hi) in zip(operand.shape, padding))
  valid = lax.pad(jnp.ones(operand.shape, bool), False, [(lo, hi, 0) for lo, hi in padding])
  values = lax.pad(operand, jnp.zeros((), operand.dtype), [(lo, hi, 0) for lo, hi in padding])
  offsets = list(np.ndindex(*window_dimensions))

  def window_slice(x, offset):
    limit = [o + (s - 1) * st + 1 for o, s, st in zip(offset, source.shape, window_strides)]
    return lax.slice(x, offset, limit, window_strides)

  best_val = best_idx = have = None
  for k, offset in enumerate(offsets):
    val, ok = window_slice(values, offset), window_slice(valid, offset)
    if best_val is None:
      best_val, best_idx, have = val, jnp.zeros(source.shape, np.int32), ok
      continue
    take = ok & (~have | ~keep(best_val, val))
    best_val = jnp.where(take, val, best_val)
    best_idx = jnp.where(take, k, best_idx)
    have = have | ok
  out = jnp.broadcast_to(init_value, padded_shape)
  for k, offset in enumerate(offsets):
    hit = have & (best_idx == k)
    config = [
      (o, p - o - (s - 1) * st - 1, st - 1)
      for o, p, s, st in zip(offset, padded_shape, source.shape, window_strides)
    ]
    placed_hit = lax.pad(hit, False, config)
    placed = lax.pad(source, jnp.zeros((), source.dtype), config)
    out = jnp.where(placed_hit, combine(out, placed), out)
  return (
    lax.slice(
      out, [lo for lo, _ in padding], [lo + n for (lo, _), n in zip(padding, operand.shape)]
    )
    if rank
    else out
  )


def _sas_canonicalize(params, operand, *rest):
  ints = lambda v: tuple(int(x) for x in np.ravel(v))
  select, scatter = params["select"], params["scatter"]
  d = np.dtype(operand.dtype)
  if isinstance(select, str) and select not in _COMPARE:
    select = spec_select(select, dtypes.canonical_dtype(d))
  return dict(
    params,
    window_dimensions=ints(params["window_dimensions"]),
    window_strides=ints(params["window_strides"]),
    padding=tuple(tuple(int(v) for v in p) for p in np.reshape(params["padding"], (-1, 2))),
    select=select,
    scatter=scatter,
  )


@functools.lru_cache(maxsize=None)
def spec_select(name: str, dtype) -> _common.Computation:
  """A drawn select written as a general body (``"select_ge"``: ``a >= b`` through a
  select, not a single comparison)."""
  assert name == "select_ge", name
  return _common.python_computation(
    name, lambda a, b: [jnp.where(a >= b, True, False)], (dtype, dtype)
  )


def _sas_interpret(ctx, node, inputs):
  op = tfops.XlaSelectAndScatter
  names = ("operand", "window_dimensions", "window_strides", "padding", "source", "init_value")
  groups = dict(zip(names, inputs))
  d = dtypes.canonical_dtype(
    np.asarray(inputs[0]).dtype if not hasattr(inputs[0], "aval") else inputs[0].dtype
  )
  select = node.attr("select").name
  scatter = node.attr("scatter").name
  sel = _classify_select(ctx, select)
  if sel is None:
    sel = _common.convert_computation(ctx, node, select, (d, d))
  sca = _common.classify_computation(ctx, scatter)
  if sca not in _KINDS:
    sca = _common.convert_computation(ctx, node, scatter, (d, d))
  operands, params = op.prepare(groups, dict(node.attrs, select=sel, scatter=sca), node.name)
  return [op.apply(operands, params)]


def _sas_calls(st):
  @st.composite
  def calls(draw):
    select = draw(st.sampled_from(("ge", "gt", "le", "lt", "select_ge")))
    scatter = draw(st.sampled_from(_KINDS))
    dtype = draw(
      st.dtypes(("float32", "float64", "int32") if scatter != "mul" else ("float32", "int32"))
    )
    shape = tuple(draw(st.shapes(min_rank=1, max_rank=3, min_side=1, max_side=4)))
    rank = len(shape)
    window = [draw(st.integers(1, 3)) for _ in range(rank)]
    strides = [draw(st.integers(1, 2)) for _ in range(rank)]
    pad = [[draw(st.integers(0, 1)), draw(st.integers(0, 1))] for _ in range(rank)]
    for k in range(rank):  # at least one window; every window holds an operand element
      window[k] = min(window[k], shape[k] + pad[k][0] + pad[k][1])
      pad[k] = [min(pad[k][0], window[k] - 1), min(pad[k][1], window[k] - 1)]
    out = tuple(
      (n + lo + hi - w) // s + 1 for n, (lo, hi), w, s in zip(shape, pad, window, strides)
    )
    idx = st.np_dtype(draw(st.sampled_from(INDEX_DTYPES)))
    # distinct operand values: the selection is piecewise constant, ties aside
    perm = np.array(draw(st.permutations(list(range(int(np.prod(shape)))))))
    x = perm.reshape(shape) * (0.37 if st.is_float(dtype) else 1) - perm.size // 2
    src_bounds = dict(lo=-2, hi=2) if st.is_float(dtype) else dict(int_lo=-3, int_hi=3)
    source = st.draw_array(draw, dtype, out, **src_bounds)
    if scatter in ("max", "min") and st.is_float(dtype):  # no ties with init or each other
      order = np.array(draw(st.permutations(list(range(int(np.prod(out)))))))
      source = (order.reshape(out) * 0.31 - order.size * 0.1 + 0.07).astype(dtype)
    return dict(
      operand=x.astype(dtype),
      window_dimensions=np.array(window, idx),
      window_strides=np.array(strides, idx),
      padding=np.array(pad, idx).reshape(rank, 2),
      source=source,
      # any finite init is well defined here (XLA folds each hit into it)
      init_value=np.array(draw(st.sampled_from([0, 1, -1])), dtype),
      select=select,
      scatter=scatter,
    )

  return calls()


@functools.lru_cache(maxsize=None)
def tf_select(name: str, dtype_name: str):
  """The TF function of a drawn select."""
  tf = import_tensorflow()
  fns = {
    "ge": tf.greater_equal,
    "gt": tf.greater,
    "le": tf.less_equal,
    "lt": tf.less,
    "select_ge": lambda a, b: tf.where(a >= b, True, False),
  }
  fn = fns[name]
  spec = tf.TensorSpec([], tf.as_dtype(dtype_name))
  return tf.function(lambda a, b: fn(a, b), autograph=False).get_concrete_function(spec, spec)


def _sas_oracle():
  base = _common.jit_oracle("XlaSelectAndScatter", ("operand", "source", "init_value"))

  def oracle(**kwargs):
    name = kwargs["operand"].dtype.name
    return base(
      **dict(
        kwargs,
        select=tf_select(kwargs["select"], name),
        scatter=_common.tf_computation(kwargs["scatter"], name),
      )
    )

  oracle.__name__ = oracle.__qualname__ = base.__name__
  return oracle


XlaSelectAndScatter = register_op(
  "XlaSelectAndScatter",
  _select_and_scatter_impl,
  family=FAMILY,
  static=("window_dimensions", "window_strides", "padding"),
  attrs=("select", "scatter"),
  canonicalize=_sas_canonicalize,
  interpret=_sas_interpret,
  spec=lambda st: st.Spec(
    _sas_calls(st),
    grad_oracle="fd",
    oracle=_sas_oracle(),
    note="oracle: the op under tf.function(jit_compile=True), the drawn select and "
    "scatter as TF functions; derivatives against central differences (distinct "
    "operand values: the selection is piecewise constant)",
  ),
)
