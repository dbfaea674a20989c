"""StableHLO operations with regions, as JAX operations: reductions, windowed
reductions, sorts and scatters (whose bodies are recognised as the lax computation
JAX lowered them from, or else run as Python functions), loops and branches, and
calls.

A ``stablehlo.while`` whose trip count is known when the module is read (JAX's
lowering of ``lax.scan`` and of ``fori_loop`` with static bounds: a counter from a
known start, compared ``LT`` with a known limit, stepped by a known amount) becomes
``lax.scan``, so reverse-mode differentiation works as it did for the original
function; other loops (a trip count that depends on data: igamma's series,
``jax.random.gamma``'s rejection sampling) become ``tf.While.unbounded``
(:func:`tfprims.ops.control_flow.unbounded.while_loop`), ``lax.while_loop`` with a
checkpointed reverse mode.
"""

from __future__ import annotations

import numpy as np
from jax import lax
import jax
import jax.numpy as jnp

from tfprims import dtypes
from tfprims.ops.control_flow import unbounded
from tfprims.stablehlo import custom_jvps
from tfprims.stablehlo.reader import (
  Op,
  as_jax,
  constant_value,
  enum_name,
  handler,
  hlo,
  integer,
  ints,
  ir,
  is_known,
  tensor_type,
)
from tfprims.stablehlo.ops import index_vector_last, total_order_key

_MONOIDS = {
  "stablehlo.add": lax.add,
  "stablehlo.maximum": lax.max,
  "stablehlo.minimum": lax.min,
  "stablehlo.multiply": lax.mul,
  "stablehlo.and": lax.bitwise_and,
  "stablehlo.or": lax.bitwise_or,
}


def _body_ops(op: Op, index: int):
  return [o.operation for o in op.op.regions[index].blocks[0].operations]


def binary_body(op: Op, index: int = 0):
  """The operation name of a region ``^bb(%a, %b): return op(%a, %b)`` (either
  operand order), or None."""
  block = op.op.regions[index].blocks[0]
  body = _body_ops(op, index)
  args = list(block.arguments)
  if len(body) != 2 or len(args) != 2:
    return None
  inner, ret = body
  if list(ret.operands) != [inner.result] or set(inner.operands) != set(args):
    return None
  return inner.name


def _reducer(op: Op, inits):
  """The lax computation of a one-operand reduction body, when it is a monoid."""
  name = binary_body(op)
  if len(inits) == 1 and name in _MONOIDS:
    return _MONOIDS[name]
  return None


@handler("stablehlo.reduce")
def _reduce(op: Op, operands):
  n = len(operands) // 2
  xs = [as_jax(x) for x in operands[:n]]
  inits = [
    np.asarray(v).astype(x.dtype) if is_known(v) else as_jax(v, x.dtype)
    for v, x in zip(operands[n:], xs)
  ]
  dims = ints(op.attr("dimensions"))
  monoid = _reducer(op, inits)
  if monoid is not None:
    return [lax.reduce(xs[0], inits[0], monoid, dims)]
  body = op.region(0)
  arg = _arg_reduction(body, xs, operands[:n], dims)
  if arg is not None:
    return arg
  return list(lax.reduce(tuple(xs), tuple(inits), lambda a, b: tuple(body(*a, *b)), dims))


def _arg_reduction(body, xs, operands, dims):
  """JAX's argmax/argmin (a (value, index) reduction over an iota of indices along
  one dimension) as ``lax.argmax``/``argmin`` and the value's max/min, which JAX
  differentiates (the general reduction has no reverse-mode rule). The body is
  recognised by what it computes on probe values: larger (smaller) value wins,
  NaN wins, ties go to the smaller index."""
  if len(xs) != 2 or len(dims) != 1 or not is_known(operands[1]):
    return None
  values, index = xs
  iota = np.asarray(operands[1])
  expected = np.broadcast_to(
    np.arange(iota.shape[dims[0]]).reshape([-1 if i == dims[0] else 1 for i in range(iota.ndim)]),
    iota.shape,
  )
  if iota.dtype.kind not in "iu" or not np.array_equal(iota, expected):
    return None
  dtype = values.dtype
  nan = np.nan if jnp.issubdtype(dtype, jnp.floating) else None

  def probe(a, i, b, j):
    with jax.ensure_compile_time_eval():
      out = body(
        np.array(a, dtype), np.array(i, iota.dtype), np.array(b, dtype), np.array(j, iota.dtype)
      )
      return [np.asarray(o).item() for o in out]

  try:
    larger, smaller = probe(1, 0, 2, 1), probe(2, 0, 1, 1)
    tie = probe(2, 1, 2, 0)
    if larger == [2, 1] and smaller == [2, 0]:
      kind = "max"
    elif larger == [1, 0] and smaller == [1, 1]:
      kind = "min"
    else:
      return None
    if tie[1] != 0:
      return None
    if nan is not None and not (np.isnan(probe(nan, 0, 1, 1)[0]) and probe(1, 0, nan, 1)[1] == 1):
      return None
  except Exception:  # a body the probe cannot run: read it generally
    return None
  index_dtype = dtypes.canonical_dtype(iota.dtype)
  if kind == "max":
    return [lax.reduce_max(values, dims), lax.argmax(values, dims[0], index_dtype)]
  return [lax.reduce_min(values, dims), lax.argmin(values, dims[0], index_dtype)]


def _window(op: Op, rank: int):
  padding = op.attr("padding")
  pads = (
    np.asarray(constant_value(padding, tensor_type(padding.type)))
    if padding is not None
    else np.zeros((rank, 2), int)
  )
  return dict(
    window_dimensions=ints(op.attr("window_dimensions")),
    window_strides=ints(op.attr("window_strides")) or (1,) * rank,
    padding=[tuple(int(p) for p in row) for row in pads],
  )


@handler("stablehlo.reduce_window")
def _reduce_window(op: Op, operands):
  n = len(operands) // 2
  xs = [as_jax(x) for x in operands[:n]]
  inits = [
    np.asarray(v).astype(x.dtype) if is_known(v) else as_jax(v, x.dtype)
    for v, x in zip(operands[n:], xs)
  ]
  window = _window(op, xs[0].ndim)
  dilations = dict(
    base_dilation=ints(op.attr("base_dilations")) or None,
    window_dilation=ints(op.attr("window_dilations")) or None,
  )
  monoid = _reducer(op, inits)
  body = op.region(0)
  if monoid is None and len(xs) == 1 and _is_logaddexp(body, xs[0].dtype):
    monoid = _LOGADDEXP
  cumulative = _cumulative(monoid, xs, inits, window, dilations)
  if cumulative is not None:
    return [cumulative]
  if monoid is _LOGADDEXP:
    monoid = _logaddexp
  if monoid is not None:
    return [lax.reduce_window(xs[0], inits[0], monoid, **window, **dilations)]
  gathered = _select_and_gather(op, xs, inits, window, dilations)
  if gathered is not None:
    return gathered
  out = lax.reduce_window(
    tuple(xs), tuple(inits), lambda a, b: tuple(body(*a, *b)), **window, **dilations
  )
  return list(out)


_LOGADDEXP = "logaddexp"  # the body of JAX's cumlogsumexp


def _logaddexp(a, b):
  return jnp.logaddexp(a, b)


_CUMULATIVE = {
  lax.add: (lax.cumsum, 0),
  lax.mul: (lax.cumprod, 1),
  lax.max: (lax.cummax, -np.inf),
  lax.min: (lax.cummin, np.inf),
  _LOGADDEXP: (lax.cumlogsumexp, -np.inf),
}


def _is_logaddexp(body, dtype) -> bool:
  """Whether a two-argument body computes ``log(exp(a) + exp(b))`` (JAX's
  cumlogsumexp lowering), judged on probe values (infinities and NaN included)."""
  if not jnp.issubdtype(dtype, jnp.floating):
    return False
  a = np.array([0.0, 1.0, -2.0, 3.5, -np.inf, -np.inf, np.inf, np.nan, 2.0, 30.0])
  b = np.array([0.0, -1.5, 5.0, 3.5, 1.0, -np.inf, 1.0, 1.0, np.nan, -4.0])
  try:
    with jax.ensure_compile_time_eval():
      got = np.asarray(body(a.astype(dtype), b.astype(dtype))[0]).astype(np.float64)
  except Exception:  # a body the probe cannot run
    return False
  with np.errstate(all="ignore"):
    want = np.logaddexp(a, b)
  return bool(np.allclose(got, want, rtol=1e-2, atol=1e-2, equal_nan=True))


def _select_and_gather(op: Op, xs, inits, window, dilations):
  """JAX's ``select_and_gather_add`` (the JVP of a max/min pool: each window's
  tangent at its maximum/minimum, a (value, tangent) reduction that keeps the pair
  whose value compares ``GE``/``GT`` (``LE``/``LT``)) as the JVP of
  ``lax.reduce_window`` max/min, which JAX differentiates and transposes; None for
  other bodies."""
  if len(xs) != 2 or not all(is_known(v) for v in inits):
    return None
  block = op.op.regions[0].blocks[0]
  args, body = list(block.arguments), _body_ops(op, 0)
  if len(args) != 4 or len(body) != 4 or body[0].name != "stablehlo.compare":
    return None
  compare, sel_v, sel_t, ret = body
  direction = enum_name(compare.attributes["comparison_direction"])
  if (
    list(compare.operands) != [args[0], args[2]]
    or direction not in _ORDERING
    or sel_v.name != "stablehlo.select"
    or sel_t.name != "stablehlo.select"
    or list(sel_v.operands) != [compare.result, args[0], args[2]]
    or list(sel_t.operands) != [compare.result, args[1], args[3]]
    or list(ret.operands) != [sel_v.result, sel_t.result]
  ):
    return None
  x, t = xs
  if not (jnp.issubdtype(x.dtype, jnp.floating) and x.dtype == t.dtype):
    return None
  largest = direction[0] == "G"
  identity = -np.inf if largest else np.inf
  if not (np.all(np.asarray(inits[0]) == identity) and np.all(np.asarray(inits[1]) == 0)):
    return None
  monoid = lax.max if largest else lax.min
  pool = lambda v: lax.reduce_window(v, np.array(identity, x.dtype), monoid, **window, **dilations)
  return list(jax.jvp(pool, (x,), (t,)))


def _cumulative(monoid, xs, inits, window, dilations):
  """JAX's windowed form of a cumulative sum/product/max/min (a window spanning one
  whole axis, padded before (or after, reversed) by the axis length - 1) as the
  lax cumulative reduction, whose derivative JAX knows (the windowed product has
  none)."""
  if monoid not in _CUMULATIVE or any(v is not None and set(v) != {1} for v in dilations.values()):
    return None
  x, init = xs[0], inits[0]
  fn, identity = _CUMULATIVE[monoid]
  if not is_known(init):
    return None
  if jnp.issubdtype(x.dtype, jnp.integer) and monoid in (lax.max, lax.min):
    info = jnp.iinfo(x.dtype)
    identity = info.min if monoid is lax.max else info.max
  if not np.all(np.asarray(init) == identity):
    return None
  sizes, pads = window["window_dimensions"], window["padding"]
  spanned = [d for d, w in enumerate(sizes) if w != 1]
  if (
    len(spanned) != 1
    or any(s != 1 for s in window["window_strides"])
    or any(p != (0, 0) for d, p in enumerate(pads) if d not in spanned)
  ):
    return None
  d = spanned[0]
  n = x.shape[d]
  if sizes[d] != n or pads[d] not in ((n - 1, 0), (0, n - 1)):
    return None
  return fn(x, axis=d, reverse=pads[d] == (0, n - 1))


_SCATTER_MONOIDS = {
  "stablehlo.add": "add",
  "stablehlo.maximum": "max",
  "stablehlo.minimum": "min",
  "stablehlo.multiply": "multiply",
}


@handler("stablehlo.select_and_scatter")
def _select_and_scatter(op: Op, operands):
  """Each window's selected element (its first maximum: select ``GE``, JAX's max-pool
  gradient; its first minimum: ``LE``, a min pool's) receives the window's ``source``
  value, combined by the scatter monoid (add, max, min, multiply) with ``init``
  (forms other than select ``GE`` scatter ``add``: without padding).
  Floating select-``GE``/``LE`` scatter-adds are the VJP of the window max/min, which
  JAX lowers to the same operation (and differentiates); the rest pick each window's
  position, then scatter into ``init``."""
  x, source, init = operands
  select = _body_ops(op, 0)
  direction = (
    enum_name(select[0].attributes["comparison_direction"])
    if len(select) == 2 and select[0].name == "stablehlo.compare"
    else None
  )
  monoid = _SCATTER_MONOIDS.get(binary_body(op, 1))
  if (
    direction not in ("GE", "LE")
    or monoid is None
    or list(select[0].operands) != list(op.op.regions[0].blocks[0].arguments)
  ):
    raise op.error(
      "only a select GE/LE (first maximum/minimum of each window) and a "
      "scatter add/max/min/multiply are read"
    )
  largest = direction == "GE"
  x, source = as_jax(x), as_jax(source)
  window = _window(op, x.ndim)
  if (direction, monoid) != ("GE", "add") and any(p != (0, 0) for p in window["padding"]):
    # XLA's choice among tied elements next to its own padding differs from the first
    # one (JAX pads explicitly before its min-pool gradients: no padding here).
    raise op.error("a select_and_scatter other than the max-pool gradient with padding")
  zero_init = is_known(init) and np.all(np.asarray(init) == 0)
  if jnp.issubdtype(x.dtype, jnp.floating) and monoid == "add":
    identity = np.array(-np.inf if largest else np.inf, x.dtype)
    _, vjp = jax.vjp(
      lambda v: lax.reduce_window(v, identity, lax.max if largest else lax.min, **window), x
    )
    (out,) = vjp(source.astype(x.dtype))
    if not zero_init:
      out = out + as_jax(init, out.dtype)
    return [out]
  picked = _first_selected(lax.stop_gradient(x), window, largest)
  if monoid == "add" and zero_init:
    base = jnp.zeros(x.size, source.dtype)
  else:
    base = jnp.full(x.size, as_jax(init, source.dtype), source.dtype)
  out = getattr(base.at[picked.ravel()], monoid)(source.ravel(), mode="drop")
  return [out.reshape(x.shape)]


def _first_selected(x, window, largest):
  """The flat position each window of select_and_scatter picks: its first maximum
  (minimum) in window order (the smallest flat position among its maxima: ``GE``
  keeps the element selected so far on ties). Padding is never picked over an
  element (its position is out of range, dropped by the scatter)."""
  positions = jnp.arange(x.size, dtype=jnp.int32).reshape(x.shape)

  def first(a, b):
    (av, ap), (bv, bp) = a, b
    better = (av > bv) if largest else (av < bv)
    take_a = better | ((av == bv) & (ap < bp))
    return lax.select(take_a, av, bv), lax.select(take_a, ap, bp)

  if jnp.issubdtype(x.dtype, jnp.floating):
    worst = np.array(-np.inf if largest else np.inf, x.dtype)
  elif x.dtype == jnp.bool_:
    worst = np.array(not largest)
  else:
    info = jnp.iinfo(x.dtype)
    worst = np.array(info.min if largest else info.max, x.dtype)
  _, picked = lax.reduce_window((x, positions), (worst, np.int32(x.size)), first, **window)
  return picked


_ORDERING = ("LT", "GT", "LE", "GE")


def _sort_keys(op: Op):
  """The keys of a sort comparator: for each key ``k`` (JAX's comparators compare
  operand pairs (2k, 2k+1) lexicographically), the value its ordering ``compare``
  reads on the ``2k`` side, whether it orders descending, and the comparison type
  (``TOTALORDER``, ``FLOAT``, ...; None when the attribute is absent)."""
  block = op.op.regions[0].blocks[0]
  args = list(block.arguments)
  deps = {a: frozenset([i]) for i, a in enumerate(args)}
  keys = {}
  for inner in _body_ops(op, 0):
    sources = frozenset().union(*(deps.get(v, frozenset()) for v in inner.operands))
    for r in inner.results:
      deps[r] = sources
    if inner.name != "stablehlo.compare":
      continue
    direction = enum_name(inner.attributes["comparison_direction"])
    lhs, rhs = inner.operands
    left, right = deps.get(lhs, frozenset()), deps.get(rhs, frozenset())
    if direction not in _ORDERING or len(left) != 1 or len(right) != 1:
      continue
    (i,), (j,) = left, right
    if i // 2 != j // 2 or i == j:
      raise op.error("a comparator that compares different operands")
    kind = (
      enum_name(inner.attributes["compare_type"]) if "compare_type" in inner.attributes else None
    )
    if i // 2 in keys:
      raise op.error("a comparator that orders one operand twice")
    keys[i // 2] = (lhs if i % 2 == 0 else rhs, (direction[0] == "G") == (i % 2 == 0), kind)
  if not keys or sorted(keys) != list(range(len(keys))):
    raise op.error("a comparator that is not one lexicographic order of its operands")
  return [keys[k] for k in range(len(keys))]


def _key_values(op: Op, xs, values):
  """The arrays the comparator compares for ``values`` (ordering operands), when its
  operand pairs are both ``xs``: its region run on whole arrays."""
  env = {}
  op.runner.run_block(
    op.op.regions[0].blocks[0], [x for x in xs for _ in range(2)], op.env, keep=env
  )
  return [env[v] for v in values]


def _probe(dtype):
  special = [np.nan, -np.nan, 0.0, -0.0, 1.0, -1.0, np.inf, -np.inf]
  if jnp.issubdtype(dtype, jnp.floating):
    return np.asarray(special, np.float64).astype(dtype)
  return np.zeros(len(special), dtype)


def _same_bits(a, b) -> bool:
  a, b = np.asarray(a), np.asarray(b)
  return a.dtype == b.dtype and a.shape == b.shape and a.tobytes() == b.tobytes()


def _canonical(x):
  """JAX's sort canonicalization: -0.0 as 0.0, every NaN the positive quiet NaN."""
  x = jnp.where(x == 0, jnp.zeros_like(x), x)
  return jnp.where(jnp.isnan(x), jnp.full_like(x, jnp.nan), x)


def _sort_operand(x, descending, kind, probe, read):
  """A ``lax.sort`` key operand ordering like the comparator's key (``read()``: the
  values it compares, computed from the data when ``probe`` shows neither ``x`` nor
  JAX's canonicalization of it):
  ``x`` itself where the comparator is ``lax.sort``'s own (JAX's canonicalization
  and ``TOTALORDER`` ascending, or a ``FLOAT``/integer ``<``); the total order's
  integer key where it compares raw floats with ``TOTALORDER`` (-NaN < -inf < ... <
  -0 < +0 < ... < inf < +NaN); descending keys inverted."""
  floating = jnp.issubdtype(x.dtype, jnp.floating)
  if floating and kind == "TOTALORDER":
    raw = _probe(x.dtype)
    canonical = np.where(
      np.isnan(raw), np.asarray(np.nan, raw.dtype), np.where(raw == 0, np.zeros((), raw.dtype), raw)
    ).astype(raw.dtype)
    if _same_bits(probe, canonical):
      return _descending_key(x) if descending else x
    u = x if _same_bits(probe, raw) else read()
    key = total_order_key(as_jax(u))
    return ~key if descending else key
  return _descending_key(x) if descending else x


def _descending_key(x):
  """A key whose ascending order is ``x``'s descending order under JAX's float
  comparator (-0 equal to +0, every NaN largest)."""
  if jnp.issubdtype(x.dtype, jnp.floating):
    x = _canonical(x)
  return ~total_order_key(x) if x.dtype != jnp.bool_ else ~x


@handler("stablehlo.sort")
def _sort(op: Op, operands):
  keys = _sort_keys(op)
  stable = op.attr("is_stable")
  xs = tuple(as_jax(x) for x in operands)
  try:
    with jax.ensure_compile_time_eval():
      probes = _key_values(op, [_probe(x.dtype) for x in xs], [v for v, _, _ in keys])
      probes = [np.asarray(p) for p in probes]
  except Exception:  # a region the probe cannot run: read each key from the data
    probes = [None] * len(keys)

  def reader(value):
    return lambda: _key_values(op, xs, [value])[0]

  ordered = [
    _sort_operand(x, desc, kind, p, reader(v)) for x, (v, desc, kind), p in zip(xs, keys, probes)
  ]
  own = all(o is x for o, x in zip(ordered, xs))
  out = lax.sort(
    xs if own else tuple(ordered) + xs,
    dimension=integer(op.attr("dimension")),
    is_stable=bool(stable is not None and ir.BoolAttr(stable).value),
    num_keys=len(keys),
  )
  return list(out) if own else list(out)[len(keys) :]


_SCATTERS = {
  "stablehlo.add": lax.scatter_add,
  "stablehlo.multiply": lax.scatter_mul,
  "stablehlo.minimum": lax.scatter_min,
  "stablehlo.maximum": lax.scatter_max,
}


def _scatter_kind(op: Op):
  block = op.op.regions[0].blocks[0]
  body = _body_ops(op, 0)
  args = list(block.arguments)
  if len(body) == 1 and len(args) == 2 and list(body[0].operands) == [args[1]]:
    return lax.scatter  # return the update: set
  name = binary_body(op)
  if name in _SCATTERS:
    return _SCATTERS[name]
  raise op.error("only set/add/mul/min/max update computations are read")


@handler("stablehlo.scatter")
def _scatter(op: Op, operands):
  if len(operands) != 3:
    raise op.error("variadic scatters are not read")
  fn = _scatter_kind(op)
  x = as_jax(operands[0])
  indices, updates = as_jax(operands[1]), as_jax(operands[2], x.dtype)
  dn = hlo.ScatterDimensionNumbers(op.attr("scatter_dimension_numbers"))
  if dn.index_vector_dim != indices.ndim - 1 and dn.scatter_indices_batching_dims:
    raise op.error("batching dims with an index vector dimension that is not last")
  indices = index_vector_last(indices, dn.index_vector_dim)
  numbers = lax.ScatterDimensionNumbers(
    update_window_dims=tuple(dn.update_window_dims),
    inserted_window_dims=tuple(dn.inserted_window_dims),
    scatter_dims_to_operand_dims=tuple(dn.scattered_dims_to_operand_dims),
    operand_batching_dims=tuple(dn.input_batching_dims),
    scatter_indices_batching_dims=tuple(dn.scatter_indices_batching_dims),
  )
  flag = lambda name: bool(op.attr(name) is not None and ir.BoolAttr(op.attr(name)).value)
  # Out-of-range updates are skipped in StableHLO: lax's FILL_OR_DROP mode.
  return [
    fn(
      x,
      indices,
      updates,
      numbers,
      indices_are_sorted=flag("indices_are_sorted"),
      unique_indices=flag("unique_indices"),
      mode=lax.GatherScatterMode.FILL_OR_DROP,
    )
  ]


# --- loops and branches ----------------------------------------------------------------


def _static_trip_count(op: Op, init):
  """The trip count of a counted loop whose counter, limit and step are known, and
  the counter's position; None otherwise."""
  cond_ops, body_ops = _body_ops(op, 0), _body_ops(op, 1)
  cond_args = list(op.op.regions[0].blocks[0].arguments)
  body_args = list(op.op.regions[1].blocks[0].arguments)
  if len(cond_ops) != 2 or cond_ops[0].name != "stablehlo.compare":
    return None
  compare = cond_ops[0]
  if enum_name(compare.attributes["comparison_direction"]) != "LT":
    return None
  counter, limit = compare.operands
  if counter not in cond_args:
    return None
  k = cond_args.index(counter)
  limit_value = op.env.get(limit) if limit not in cond_args else None
  if limit_value is None:  # the limit may be a constant inside the region
    for inner in cond_ops:
      if inner.name == "stablehlo.constant" and inner.result == limit:
        limit_value = constant_value(inner.attributes["value"], tensor_type(limit.type))
  if limit_value is None or not is_known(limit_value) or not is_known(init[k]):
    return None
  returned = list(body_ops[-1].operands)[k]
  step = None
  for inner in body_ops:
    if inner.name == "stablehlo.add" and inner.result == returned:
      a, b = inner.operands
      other = b if a == body_args[k] else a if b == body_args[k] else None
      if other is not None:
        step = op.env.get(other)
        for c in body_ops:
          if c.name == "stablehlo.constant" and c.result == other:
            step = constant_value(c.attributes["value"], tensor_type(other.type))
  if step is None or not is_known(step) or int(step) <= 0:
    return None
  start, stop, step = int(init[k]), int(limit_value), int(step)
  return max(0, -(-(stop - start) // step)), k


@handler("stablehlo.while")
def _while(op: Op, operands):
  cond, body = op.region(0), op.region(1)
  types = [
    x.dtype if not is_known(x) else dtypes.canonical_dtype(np.asarray(x).dtype) for x in operands
  ]

  def step(state):
    return tuple(as_jax(v, t) for v, t in zip(body(*state), types))

  counted = _static_trip_count(op, operands)
  init = tuple(as_jax(x, t) for x, t in zip(operands, types))
  if counted is not None:
    trips, _ = counted
    out, _ = lax.scan(lambda s, _: (step(s), None), init, None, length=trips)
    return list(out)
  loop_cond = lambda s: jnp.asarray(cond(*s)[0])
  out = unbounded.while_loop(loop_cond, step, init)
  if out is None:  # a body with effects or changing types: forward mode only
    out = lax.while_loop(loop_cond, step, init)
  return list(out)


@handler("stablehlo.case")
def _case(op: Op, operands):
  (index,) = operands
  n = len(op.op.regions)
  branches = [op.region(i) for i in range(n)]
  if is_known(index):
    i = int(index)
    return branches[i if 0 <= i < n else n - 1]()
  index = as_jax(index)
  index = jnp.where((index < 0) | (index >= n), n - 1, index)  # out of range: the last
  types = [(t.shape, dtypes.canonical_dtype(t.dtype)) for t in op.result_types]
  fns = [lambda b=b: tuple(as_jax(v, t[1]) for v, t in zip(b(), types)) for b in branches]
  return list(lax.switch(index, fns))


@handler("stablehlo.if")
def _if(op: Op, operands):
  (pred,) = operands
  on_true, on_false = op.region(0), op.region(1)
  if is_known(pred):
    return (on_true if bool(pred) else on_false)()
  types = [dtypes.canonical_dtype(t.dtype) for t in op.result_types]
  wrap = lambda b: lambda: tuple(as_jax(v, t) for v, t in zip(b(), types))
  return list(lax.cond(as_jax(pred), wrap(on_true), wrap(on_false)))


@handler("func.call")
def _call(op: Op, operands):
  """A call of the module's function; a JAX function whose derivative is a custom
  rule (``jax.nn.relu``: :mod:`tfprims.stablehlo.custom_jvps`) is that function."""
  name = ir.FlatSymbolRefAttr(op.attr("callee")).value
  func = op.runner.module.functions.get(name)
  fn = custom_jvps.known_function(func) if func is not None else None
  if fn is not None and not is_known(operands[-1]):
    return [fn(operands[-1])]
  return op.runner.call(name, operands)


@handler("stablehlo.composite")
def _composite(op: Op, operands):
  """A named group of operations (JAX's ``chlo``-style composites): its decomposition."""
  return op.runner.call(ir.FlatSymbolRefAttr(op.attr("decomposition")).value, operands)
