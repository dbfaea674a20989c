"""The padded (bounded) forms of the data-dependent-shape ops: jittable impls,
rules and property-test specs of ``tf.Where[size=n]``, ``tf.Unique[size=n]``...
(declared in :mod:`tfprims.ops.array.data_dependent`, whose hooks bind them when
the ``dynamic_shape_bounds`` config bounds a node whose inputs are traced).

Each keeps the first ``size`` results of TF's op, in TF's order, and pads the rest:
index outputs with -1 (out of range, so ``tf.GatherV2`` reads zeros there and
``tf.DynamicStitch`` drops them), value outputs with zeros, counts with 0. Outputs
that do not depend on the data's size (Unique's ``idx``) are exact. The property
specs compare with TF's results padded or cut to ``size`` (``fit``).
"""

from __future__ import annotations

import math

import jax.numpy as jnp
import numpy as np
from jax import lax
from jax.interpreters import ad

from tfprims import dtypes as tfdtypes
from tfprims import rules
from tfprims.core import tfops
from tfprims.ops.shared_specs import lazy_hst
from tfprims.errors import import_tensorflow

_INT64 = np.dtype(np.int64)


def first_positions(mask, size):
  """Positions of the true elements of a 1-D mask, the first ``size``, padded with -1."""
  n = mask.shape[0]
  pos = jnp.nonzero(mask, size=size, fill_value=n)[0] if n else jnp.full((size,), n)
  return jnp.where(pos < n, pos, -1).astype(np.int32)


def _rows(x, pos):
  """Rows ``pos`` of ``x`` (zeros where ``pos`` is -1)."""
  n = x.shape[0]
  if n == 0:
    return jnp.zeros((pos.shape[0],) + x.shape[1:], x.dtype)
  # take() wraps negative indices before filling: point the padding past the end.
  return jnp.take(x, jnp.where(pos < 0, n, pos), axis=0, mode="fill", fill_value=0)


# --- Where ----------------------------------------------------------------------------------


def where_impl(input, *, size):
  """The coordinates of the first ``size`` non-zero elements (row-major), rows past
  the last one filled with -1."""
  if input.ndim == 0:
    raise ValueError("WhereOp : Unhandled input dimensions: 0")
  flat = (input != 0).reshape(-1)
  pos = first_positions(flat, size)
  coords = (
    jnp.stack(jnp.unravel_index(jnp.maximum(pos, 0), input.shape), axis=1)
    if input.size
    else jnp.zeros((size, input.ndim), np.int32)
  )
  coords = jnp.where(pos[:, None] >= 0, coords, -1)
  return coords.astype(tfdtypes.canonical_dtype(_INT64))


# --- Unique ---------------------------------------------------------------------------------


def _key(col):
  """A sort key per element: -0.0 as 0.0, bool as uint8 (equal keys are TF's ==)."""
  if col.dtype == np.bool_:
    return col.astype(np.uint8)
  if jnp.issubdtype(col.dtype, jnp.floating):
    return jnp.where(col == 0, jnp.zeros((), col.dtype), col)
  return col


def unique_rows(x, axis: int, size: int):
  """TF's Unique along ``axis`` (values in order of first occurrence; NaNs all
  distinct; -0.0 equal to 0.0) with the values padded/cut to ``size``: returns
  (values, idx, counts) with ``idx`` exact."""
  xm = jnp.moveaxis(x, axis, 0)
  n = xm.shape[0]
  width = math.prod(xm.shape[1:])
  rows = xm.reshape(n, width)
  if n == 0:
    return (
      jnp.moveaxis(jnp.zeros((size,) + xm.shape[1:], x.dtype), 0, axis),
      jnp.zeros((0,), np.int32),
      jnp.zeros((size,), np.int32),
    )
  iota = jnp.arange(n, dtype=np.int32)
  keys = [_key(rows[:, j]) for j in range(width)]
  # Stable lexicographic sort: equal rows end up adjacent, first occurrence first.
  out = lax.sort(keys + [iota], num_keys=max(width, 1), is_stable=True) if width else [iota]
  perm = out[-1]
  if width:
    srows = jnp.stack(out[:-1], axis=1)
    differs = jnp.any(srows[1:] != srows[:-1], axis=1)  # NaN != NaN: its own group
  else:
    differs = jnp.zeros((n - 1,), bool)
  new = jnp.concatenate([jnp.ones((1,), bool), differs])
  start = lax.cummax(jnp.where(new, iota, 0), axis=0)
  first = jnp.zeros((n,), np.int32).at[perm].set(perm[start])  # each element's first
  is_first = first == iota
  uid = jnp.cumsum(is_first.astype(np.int32)) - 1
  idx = uid[first]
  values = jnp.moveaxis(_rows(xm, first_positions(is_first, size)), 0, axis)
  counts = jnp.zeros((size,), np.int32).at[idx].add(1, mode="drop")
  return values, idx, counts


def unique_axis(axis, rank) -> int:
  """UniqueV2's ``axis`` input (a vector of one element) as a non-negative int."""
  axis = np.asarray(axis).reshape(-1)
  if axis.size != 1:
    raise ValueError(
      "unique expects a 1D vector."
      if axis.size == 0
      else "axis does not support input tensors larger than 1 elements"
    )
  a = int(axis[0])
  if not -rank <= a < rank:
    raise ValueError(f"axis {a} is out of range for rank {rank}")
  return a % rank


def unique_impl(counts: bool, v2: bool):
  def impl(x, *, size, out_idx, axis=0):
    if not v2 and x.ndim != 1:
      raise ValueError("unique expects a 1D vector.")
    values, idx, cnt = unique_rows(x, unique_axis(axis, x.ndim) if v2 else 0, size)
    out = tfdtypes.canonical_dtype(out_idx)
    res = (values, idx.astype(out))
    return res + (cnt.astype(out),) if counts else res

  impl.__doc__ = (
    "The distinct " + ("slices along axis" if v2 else "values") + " in order "
    "of first occurrence, the first size of them (padded with zeros), each "
    "element's index" + (" and the counts (padded with 0)" if counts else "")
  )
  return impl


# --- ListDiff -------------------------------------------------------------------------------


def list_diff_impl(x, y, *, size, out_idx):
  """The first ``size`` values of ``x`` not in ``y`` (padded with zeros) and their
  positions in ``x`` (padded with -1)."""
  if x.ndim != 1 or y.ndim != 1:
    raise ValueError("x and y should be 1D vectors")
  keep = ~jnp.any(x[:, None] == y[None, :], axis=1) if y.shape[0] else jnp.ones(x.shape, bool)
  pos = first_positions(keep, size)
  return _rows(x, pos), pos.astype(tfdtypes.canonical_dtype(out_idx))


# --- DynamicPartition ----------------------------------------------------------------------


def _partition_positions(partitions, num_partitions, size):
  flat = partitions.reshape(-1)
  return [first_positions(flat == i, size) for i in range(num_partitions)]


def partition_impl(data, partitions, *, num_partitions, size):
  """Each partition's rows of ``data``, the first ``size`` of them in order (zeros
  after the last); partitions outside ``[0, num_partitions)`` are in none."""
  if tuple(data.shape[: partitions.ndim]) != tuple(partitions.shape):
    raise ValueError(
      f"data.shape must start with partitions.shape, got data.shape = "
      f"{list(data.shape)}, partitions.shape = {list(partitions.shape)}"
    )
  rows = data.reshape((partitions.size,) + data.shape[partitions.ndim :])
  return [_rows(rows, p) for p in _partition_positions(partitions, num_partitions, size)]


def partition_jvp(primals, tangents, *, num_partitions, size):
  data, partitions = primals
  out = tfops.DynamicPartition(data, partitions, num_partitions=num_partitions, size=size)
  t = tangents[0]
  if type(t) is ad.Zero:
    return out, [rules.zero_tangent(o) for o in out]
  return out, tfops.DynamicPartition(t, partitions, num_partitions=num_partitions, size=size)


def partition_transpose(cts, data, partitions, *, num_partitions, size):
  """The cotangents stitched back to the rows they came from: ``tf.DynamicStitch``
  at the positions ``tf.Where[size]`` finds (its -1 padding is dropped)."""
  if not rules.U(data):
    return [None, None]
  shape = data.aval.shape
  nrows = math.prod(np.shape(partitions))
  flat = rules.reshape(partitions, (nrows,))
  positions = []
  for i in range(num_partitions):
    hit = tfops.Equal(flat, np.asarray(i, rules.dtype_of(flat)), incompatible_shape_error=True)
    coords = tfops.Where(hit, size=size)
    positions.append(
      tfops.Cast(rules.reshape(coords, (size,)), DstT=np.dtype(np.int32), Truncate=False)
    )
  cts = [rules.instantiate(c) for c in cts]
  rows = tfops.DynamicStitch(*positions, *cts, size=nrows)
  return [rules.reshape(rows, shape), None]


def partition_batch(args, dims, *, num_partitions, size):
  (data, partitions), (dd, dp) = args, dims
  if dp is not None:
    # Each example has its own partitions: no single call selects for all of them.
    return rules.vmap_batching(partition_impl, True)(
      args, dims, num_partitions=num_partitions, size=size
    )
  # The batch axis right after the partitioned dims: every output gets it at 1.
  data = rules.move_axes(data, [dd], [np.ndim(partitions)])
  out = tfops.DynamicPartition(data, partitions, num_partitions=num_partitions, size=size)
  return out, [1] * len(out)


# --- property-test specs (hypothesis and TF are imported lazily) ------------------------


def fit(t, size, fill, axis=0):
  """A TF result padded with ``fill`` (or cut) to ``size`` along ``axis``."""
  tf = import_tensorflow()
  n = t.shape[axis]
  if n >= size:
    return tf.gather(t, tf.range(size), axis=axis)
  pad = list(t.shape)
  pad[axis] = size - n
  filler = tf.zeros(pad, t.dtype) if fill == 0 else tf.fill(pad, tf.constant(fill, t.dtype))
  return tf.concat([t, filler], axis=axis)


def _size(draw, n):
  return draw(lazy_hst().integers(0, n + 2))


def where_spec(st):
  from tfprims.ops.array.buckets import _pick

  @st.composite
  def calls(draw):
    dtype = draw(
      st.dtypes(
        (
          "bool",
          "float32",
          "float64",
          "bfloat16",
          "int8",
          "int32",
          "int64",
          "uint8",
          "uint64",
          "complex64",
          "complex128",
        )
      )
    )
    shape = draw(st.shapes(min_rank=1))
    x = _pick(draw, st, dtype, shape, [0, 0, 1] if dtype != np.bool_ else [])
    return {"input": x, "size": _size(draw, x.size)}

  def oracle(input, size):
    tf = import_tensorflow()
    return fit(tf.raw_ops.Where(condition=input), size, -1)

  return st.Spec(
    calls(),
    oracle=oracle,
    operands=("input",),
    params=lambda kw: {"size": kw["size"]},
    skip={"jvp": "integer output", "vjp": "integer output"},
    note="TF's result padded with -1 rows or cut to size",
  )


_UNIQUE_TYPES = (
  "bool",
  "float16",
  "bfloat16",
  "float32",
  "float64",
  "int8",
  "int32",
  "int64",
  "uint8",
  "uint64",
)


def unique_spec(st, op_type, counts, v2):
  from tfprims.ops.array.buckets import _pick

  hst = lazy_hst()

  @st.composite
  def calls(draw):
    dtype = draw(st.dtypes(_UNIQUE_TYPES))
    shape = draw(st.shapes(min_rank=1 if v2 else 1, max_rank=3 if v2 else 1, max_side=5))
    pool = [] if dtype == np.bool_ else [0, 1, 2] + ([-0.0, np.nan] if st.is_float(dtype) else [])
    x = _pick(draw, st, dtype, shape, pool)
    out = {"x": x, "out_idx": np.dtype(draw(hst.sampled_from(["int32", "int64"])))}
    if v2:
      rank = x.ndim
      out["axis"] = np.asarray(
        [draw(hst.integers(-rank, rank - 1))], draw(st.dtypes(("int32", "int64")))
      )
      n = x.shape[int(out["axis"][0]) % rank]
    else:
      n = x.size
    out["size"] = _size(draw, n)
    return out

  def oracle(x, out_idx, size, axis=None):
    tf = import_tensorflow()
    fn = getattr(tf.raw_ops, op_type)
    res = fn(x=x, out_idx=out_idx) if axis is None else fn(x=x, axis=axis, out_idx=out_idx)
    a = 0 if axis is None else int(np.asarray(axis).reshape(-1)[0]) % len(x.shape)
    fitted = [fit(res[0], size, 0, axis=a), res[1]]
    return fitted + [fit(res[2], size, 0)] if counts else fitted

  def params(kw):
    p = {"size": kw["size"], "out_idx": kw["out_idx"]}
    if v2:
      p["axis"] = int(np.asarray(kw["axis"]).reshape(-1)[0])
    return p

  no_grad = f"TF registers no gradient for {op_type}"
  return st.Spec(
    calls(),
    oracle=oracle,
    operands=("x",),
    params=params,
    skip={"jvp": no_grad, "vjp": no_grad},
    note="TF's values padded with zeros (counts with 0) or cut to size",
  )


def list_diff_spec(st):
  from tfprims.ops.array.buckets import _pick

  hst = lazy_hst()

  @st.composite
  def calls(draw):
    dtype = draw(
      st.dtypes(
        ("float16", "bfloat16", "float32", "float64", "int8", "int32", "int64", "uint8", "uint64")
      )
    )
    pool = [0, 1, 2] + ([-0.0, np.nan] if st.is_float(dtype) else [])
    x = _pick(draw, st, dtype, (draw(hst.integers(0, 5)),), pool)
    y = _pick(draw, st, dtype, (draw(hst.integers(0, 4)),), pool)
    return {
      "x": x,
      "y": y,
      "out_idx": np.dtype(draw(hst.sampled_from(["int32", "int64"]))),
      "size": _size(draw, x.size),
    }

  def oracle(x, y, out_idx, size):
    tf = import_tensorflow()
    out, idx = tf.raw_ops.ListDiff(x=x, y=y, out_idx=out_idx)
    return fit(out, size, 0), fit(idx, size, -1)

  return st.Spec(
    calls(),
    oracle=oracle,
    operands=("x", "y"),
    params=lambda kw: {"size": kw["size"], "out_idx": kw["out_idx"]},
    skip={
      "jvp": "TF registers no gradient for ListDiff",
      "vjp": "TF registers no gradient for ListDiff",
    },
    note="TF's values padded with zeros, positions with -1, or cut to size",
  )


def partition_spec(st):
  hst = lazy_hst()

  @st.composite
  def calls(draw):
    num = draw(hst.integers(1, 3))
    pshape = tuple(draw(st.shapes(max_rank=2, max_side=4)))
    rest = tuple(draw(st.shapes(max_rank=2, max_side=3)))
    dtype = draw(st.dtypes(st.ALL))
    partitions = draw(st.arrays("int32", pshape, min_value=0, max_value=num - 1))
    return {
      "data": draw(st.arrays(dtype, pshape + rest)),
      "partitions": partitions,
      "num_partitions": num,
      "size": _size(draw, int(np.prod(pshape))),
    }

  def oracle(data, partitions, num_partitions, size):
    tf = import_tensorflow()
    outs = tf.raw_ops.DynamicPartition(
      data=data, partitions=partitions, num_partitions=num_partitions
    )
    return [fit(o, size, 0) for o in outs]

  return st.Spec(
    calls(),
    oracle=oracle,
    operands=("data", "partitions"),
    params=lambda kw: {"num_partitions": kw["num_partitions"], "size": kw["size"]},
    note="TF's partitions padded with zero rows or cut to size",
  )
