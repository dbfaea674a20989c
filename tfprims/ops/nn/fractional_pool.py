"""Fractional pooling (NHWC): FractionalMaxPool, FractionalAvgPool and their Grad ops.

The pooling regions come from the row/col pooling sequences (int64, output 1 and 2 of
the forward ops, data inputs of the Grad ops): output cell ``r`` covers input rows
``seq[r] .. seq[r+1] - 1``, or ``.. seq[r+1]`` with ``overlapping`` (clamped to the last
row).

The forward ops declare ``uses_rng``: they take a leading ``uint32[2]`` JAX key (from
the converted function's ``rng=``, like RandomUniform) and draw each sequence as TF's
``GeneratePoolingSequence`` does, from jax.random instead of TF's Philox: ``n_out =
floor(n_in / ratio)`` (in float32); random: ``n_in % n_out`` steps of ``k + 1`` and the
rest of ``k = n_in // n_out``, uniformly shuffled; pseudo-random: ``seq[i] =
ceil(alpha * (i + u)) - 1`` with ``alpha = n_in / n_out`` and ``u`` uniform in
``[0, min((k + 2) / alpha - 1, (n_in + 1 - k) / alpha - (n_out - 1)))``. TF's
``deterministic``, ``seed`` and ``seed2`` are dropped: the key decides the sequences.
Given the sequences the values are TF's kernels': FractionalMaxPool starts from the
dtype's lowest value and takes the max of the region's non-NaN values;
FractionalAvgPool adds the region in T in row-major order and divides by its size in T
(integers truncated).

Derivatives as TF registers them: FractionalAvgPool is linear in ``value`` for a given
key (its JVP re-binds it on the tangent with the same key, so the same sequences; its
transpose is FractionalAvgPoolGrad at the sequences the key draws); FractionalMaxPool's
tangent is ``tf.FractionalMaxPool.tangent`` (the tangent read at each region's first
maximum; TF has no op for it) whose transpose is FractionalMaxPoolGrad. vmap folds the
batch into N when the key is not batched (one draw of the sequences, as one TF call).

The Grad ops express the regions as 0/1 membership matrices ``[out, in]``, so they are
contractions:

* FractionalAvgPoolGrad spreads each ``out_backprop`` value over its region in equal
  shares (``out / cell size``, in float64 for integer T) accumulated in float64 and cast to
  T (integers truncated once, at the end), as TF's kernel.
* FractionalMaxPoolGrad routes each ``out_backprop`` value to its region's first maximum
  (row-major), as TF's kernel; TF raises when ``orig_output`` is not the recomputed max
  pooling (declared as ``check``).

TF registers no gradient for either Grad op: their rules are derived from the impls.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax
from jax.extend.core import Primitive
from jax.interpreters import ad, batching, mlir

from tfprims import derived, dtypes, errors, rules
from tfprims.core import register_op, tfops
from tfprims.ops.nn._common import _lowest
from tfprims.ops.random.basic import RANDOM_SKIPS, wrap_key
from tfprims.ops.shared import merge_batch, split_batch


def _membership(seq, size, overlapping):
  """[out, in] 0/1 matrix of the pooling regions of one spatial axis."""
  seq = seq.astype(jnp.int32)
  start, stop = seq[:-1, None], seq[1:, None]
  idx = jnp.arange(size, dtype=jnp.int32)[None, :]
  end = jnp.minimum(stop if overlapping else stop - 1, size - 1)
  return (idx >= start) & (idx <= end)


def _fractional_avg_pool_grad(
  out_backprop,
  row_pooling_sequence,
  col_pooling_sequence,
  *,
  orig_input_tensor_shape,
  overlapping=False,
):
  """TF FractionalAvgPoolGrad: every out_backprop value shared equally over its pooling
  cell (in T for floats, in float64 for integers), accumulated in float64, cast to T."""
  n, h, w, c = (int(d) for d in orig_input_tensor_shape)
  rows = _membership(row_pooling_sequence, h, overlapping)
  cols = _membership(col_pooling_sequence, w, overlapping)
  acc = dtypes.canonical_dtype(np.float64)
  cell = jnp.sum(rows, 1)[:, None] * jnp.sum(cols, 1)[None, :]
  cell = jnp.maximum(cell, 1)[None, :, :, None]
  if jnp.issubdtype(out_backprop.dtype, jnp.integer):
    share = out_backprop.astype(acc) / cell.astype(acc)  # truncated once, at the end
  else:
    share = out_backprop / cell.astype(out_backprop.dtype)
  share = share.astype(acc)
  ncols = cols.shape[0]

  def add_cell(k, total):
    # cell by cell in TF's loop order (rows outer), so float64 sums round as TF's do
    r, q = k // ncols, k % ncols
    region = (rows[r][:, None] & cols[q][None, :]).astype(acc)
    return total + share[:, r, q, None, None, :] * region[None, :, :, None]

  out = lax.fori_loop(0, rows.shape[0] * ncols, add_cell, jnp.zeros((n, h, w, c), acc))
  return out.astype(out_backprop.dtype).reshape((n, h, w, c))


def _region_values(x, rows, cols):
  """[b, out_r, out_c, in_r * in_c, d] values of x in each region (-inf / min outside)."""
  fill = (
    jnp.array(-jnp.inf, x.dtype)
    if jnp.issubdtype(x.dtype, jnp.floating)
    else jnp.array(jnp.iinfo(x.dtype).min, x.dtype)
  )
  mask = rows[:, None, :, None] & cols[None, :, None, :]  # [R, C, H, W]
  vals = jnp.where(mask[None, ..., None], x[:, None, None], fill)  # [B, R, C, H, W, D]
  b, r, c, h, w, d = vals.shape
  return vals.reshape((b, r, c, h * w, d)), mask.reshape((r, c, h * w))


def _fractional_max_pool_grad(
  orig_input,
  orig_output,
  out_backprop,
  row_pooling_sequence,
  col_pooling_sequence,
  *,
  overlapping=False,
):
  """TF FractionalMaxPoolGrad: each out_backprop value added at its region's first
  maximum (row-major) of orig_input."""
  del orig_output
  b, h, w, d = orig_input.shape
  rows = _membership(row_pooling_sequence, h, overlapping)
  cols = _membership(col_pooling_sequence, w, overlapping)
  vals, _ = _region_values(orig_input, rows, cols)
  arg = jnp.argmax(vals, axis=3)  # [B, R, C, D]
  hit = jnp.arange(h * w)[None, None, None, :, None] == arg[:, :, :, None, :]
  contrib = jnp.where(hit, out_backprop[:, :, :, None, :], jnp.zeros((), out_backprop.dtype))
  return jnp.sum(contrib, axis=(1, 2)).reshape((b, h, w, d)).astype(out_backprop.dtype)


def _max_pool_grad_check(
  orig_input,
  orig_output,
  out_backprop,
  row_pooling_sequence,
  col_pooling_sequence,
  *,
  overlapping=False,
):
  _, h, w, _ = orig_input.shape
  rows = _membership(row_pooling_sequence, h, overlapping)
  cols = _membership(col_pooling_sequence, w, overlapping)
  vals, _ = _region_values(orig_input, rows, cols)
  bad = jnp.any(jnp.max(vals, axis=3) != orig_output)
  return bad, (
    "Input and output tensors of FractionalMaxPoolGrad do not match "
    "(orig_output is not the max pooling of orig_input)"
  )


# --------------------------------------------------------------------------
# Specs: sequences drawn by TF's forward ops
# --------------------------------------------------------------------------

_DTYPES = ("float32", "float64", "int32", "int64")


def _frac_calls(st, op):
  @st.composite
  def draw_call(draw):
    from tfprims.ops.nn._specs import _tf_call

    dtype = draw(st.sampled_from(_DTYPES))
    shape = (
      draw(st.integers(1, 2)),
      draw(st.integers(2, 5)),
      draw(st.integers(2, 5)),
      draw(st.integers(1, 2)),
    )
    dt = st.np_dtype(dtype)
    if dt.kind == "i":
      # distinct values: no ties for the max
      x = (
        np.random.default_rng(draw(st.integers(0, 2**16)))
        .permutation(int(np.prod(shape)))
        .reshape(shape)
        .astype(dt)
        - 5
      )
    else:
      x = np.asarray(
        draw(st.arrays(dt, shape, special=False, min_value=-4.0, max_value=4.0, unique=True))
      )
    ratio = [
      1.0,
      draw(st.sampled_from([1.0, 1.44, 1.73, 2.0])),
      draw(st.sampled_from([1.0, 1.44, 1.73, 2.0])),
      1.0,
    ]
    # integer FractionalAvgPoolGrad with overlapping cells: TF's truncated float64 sums
    # differ from ours by one in some elements (docs/semantics/nn.md)
    overlapping = draw(st.booleans()) and not (op == "AvgPool" and dt.kind == "i")
    fwd = _tf_call(
      "Fractional" + op,
      dict(
        value=x,
        pooling_ratio=ratio,
        pseudo_random=draw(st.booleans()),
        overlapping=overlapping,
        deterministic=True,
        seed=draw(st.integers(1, 100)),
        seed2=draw(st.integers(1, 100)),
      ),
    )
    out, rseq, cseq = (t.numpy() for t in fwd)
    g = (
      draw(st.arrays(dt, out.shape, min_value=-50, max_value=50))
      if dt.kind == "i"
      else draw(st.arrays(dt, out.shape, special=False, min_value=-2.0, max_value=2.0))
    )
    call = dict(
      out_backprop=np.asarray(g),
      row_pooling_sequence=rseq,
      col_pooling_sequence=cseq,
      overlapping=overlapping,
    )
    if op == "AvgPool":
      return dict(orig_input_tensor_shape=np.array(shape, np.int64), **call)
    return dict(orig_input=x, orig_output=out, **call)

  return draw_call()


FractionalAvgPoolGrad = register_op(
  "FractionalAvgPoolGrad",
  _fractional_avg_pool_grad,
  family="nn",
  static=("orig_input_tensor_shape",),
  attrs=("overlapping",),
  spec=lambda st: st.Spec(
    _frac_calls(st, "AvgPool"),
    note=("Pooling sequences drawn by TF's FractionalAvgPool (seeded, deterministic)."),
  ),
)

FractionalMaxPoolGrad = register_op(
  "FractionalMaxPoolGrad",
  _fractional_max_pool_grad,
  family="nn",
  attrs=("overlapping",),
  check=_max_pool_grad_check,
  spec=lambda st: st.Spec(
    _frac_calls(st, "MaxPool"),
    note=(
      "Pooling sequences and orig_output drawn by TF's FractionalMaxPool (seeded, "
      "deterministic); distinct input values (no ties)."
    ),
  ),
)


# --------------------------------------------------------------------------
# Forward ops: FractionalMaxPool, FractionalAvgPool (key operand from rng=)
# --------------------------------------------------------------------------


def _pooled_size(size, ratio):
  """TF's output size: floor(size / ratio) in float32; TF's kernel checks."""
  if ratio < 1:
    raise errors.ConversionError(f"pooling_ratio cannot be smaller than 1, got: {ratio}")
  if ratio > size:
    raise errors.ConversionError(
      f"Pooling ratio is higher than input dimension size: {ratio} > {size}"
    )
  return int(np.floor(np.float32(size) / np.float32(ratio)))


def _out_sizes(shape, pooling_ratio):
  if len(pooling_ratio) != 4:
    raise errors.ConversionError("pooling_ratio field must specify 4 dimensions")
  if pooling_ratio[0] != 1 or pooling_ratio[3] != 1:
    raise errors.ConversionError(
      "Fractional pooling is not yet supported on the batch nor channel dimension"
    )
  return _pooled_size(shape[1], pooling_ratio[1]), _pooled_size(shape[2], pooling_ratio[2])


def _pooling_sequence(key, n_in, n_out, pseudo_random):
  """One axis's cumulative pooling sequence [n_out + 1] (0 .. n_in), drawn as TF's
  GeneratePoolingSequence (steps of k or k + 1, k = n_in // n_out)."""
  k = n_in // n_out
  if pseudo_random:
    alpha = n_in / n_out
    max_u = min((k + 2) / alpha - 1, (n_in + 1 - k) / alpha - (n_out - 1))
    wide = dtypes.canonical_dtype(np.float64)
    u = jax.random.uniform(key, (), dtype=wide) * np.array(max_u, wide)
    i = jnp.arange(1, n_out, dtype=wide)
    inner = (jnp.ceil(np.array(alpha, wide) * (i + u)) - 1).astype(jnp.int32)
    seq = jnp.concatenate([jnp.zeros((1,), jnp.int32), inner, jnp.full((1,), n_in, jnp.int32)])
  else:
    steps = jnp.where(jnp.arange(n_out) < n_in % n_out, k + 1, k).astype(jnp.int32)
    steps = jax.random.permutation(key, steps)
    seq = jnp.concatenate([jnp.zeros((1,), jnp.int32), jnp.cumsum(steps)])
  return seq.astype(dtypes.canonical_dtype(np.int64))


def _sequences(key, shape, pooling_ratio, pseudo_random):
  rows, cols = _out_sizes(shape, pooling_ratio)
  krow, kcol = jax.random.split(wrap_key(key))
  return (
    _pooling_sequence(krow, shape[1], rows, pseudo_random),
    _pooling_sequence(kcol, shape[2], cols, pseudo_random),
  )


def _pool_regions(x, row_seq, col_seq, *, overlapping, mode):
  """TF's fractional pooling kernels given the sequences: ``mode`` "max" (from the
  lowest value, NaN skipped) or "avg" (sum in T, row-major, divided by the count in T)."""
  x = jnp.asarray(x)
  _, h, w, _ = x.shape
  nr, nc = row_seq.shape[0] - 1, col_seq.shape[0] - 1

  def axis(seq, size, n):
    seq = jnp.asarray(seq).astype(jnp.int32)
    start = seq[:-1]
    end = jnp.minimum(seq[1:] - (0 if overlapping else 1), size - 1)
    return start, end, min(size, size // n + 2 + int(overlapping))  # static extent bound

  rstart, rend, rext = axis(row_seq, h, nr)
  cstart, cend, cext = axis(col_seq, w, nc)
  fill = _lowest(x.dtype) if mode == "max" else jnp.zeros((), x.dtype)

  def step(k, carry):
    acc, count = carry
    dr, dc = k // cext, k % cext  # region offsets in TF's (row, col) order
    r, c = rstart + dr, cstart + dc
    valid = (r <= rend)[:, None] & (c <= cend)[None, :]  # [R, C]
    vals = x[:, jnp.minimum(r, h - 1)][:, :, jnp.minimum(c, w - 1)]  # [B, R, C, D]
    if mode == "max":
      keep = valid[None, :, :, None]
      if jnp.issubdtype(x.dtype, jnp.floating):
        keep = keep & ~jnp.isnan(vals)
      return jnp.maximum(acc, jnp.where(keep, vals, fill)), count
    keep = jnp.broadcast_to(valid[None, :, :, None], acc.shape)
    return acc + jnp.where(keep, vals, fill), count + keep.astype(x.dtype)

  # The count is carried at full shape: XLA turns a division by a broadcast into a
  # multiplication by its reciprocal, which is not TF's correctly rounded quotient.
  out_shape = (x.shape[0], nr, nc, x.shape[3])
  init = (
    jnp.full(out_shape, fill, x.dtype),
    jnp.zeros(out_shape if mode == "avg" else (), x.dtype),
  )
  acc, count = lax.fori_loop(0, rext * cext, step, init)
  if mode == "max":
    return acc
  return lax.div(acc, jnp.maximum(count, jnp.ones((), x.dtype)))  # integers: truncated


def _fractional_pool(mode):
  def impl(key, value, *, pooling_ratio, pseudo_random=False, overlapping=False):
    rows, cols = _sequences(key, value.shape, pooling_ratio, pseudo_random)
    return (_pool_regions(value, rows, cols, overlapping=overlapping, mode=mode), rows, cols)

  impl.__doc__ = (
    f"TF Fractional{mode.capitalize()}Pool: {mode} pooling over row/col "
    "regions drawn from the key (TF's sequence distribution)."
  )
  return impl


def _zero_seq_tangents(rows, cols):
  return [rules.zero_tangent(rows), rules.zero_tangent(cols)]


def _max_pool_jvp(primals, tangents, **p):
  key, x = primals
  y, rows, cols = tfops.FractionalMaxPool(key, x, **p)
  t = tangents[1]
  if type(t) is ad.Zero or not jnp.issubdtype(x.dtype, jnp.floating):
    ty = rules.zero_tangent(y)
  else:
    ty = max_pool_tangent_p.bind(x, y, t, rows, cols, overlapping=p.get("overlapping", False))
  return [y, rows, cols], [ty] + _zero_seq_tangents(rows, cols)


def _avg_pool_jvp(primals, tangents, **p):
  """FractionalAvgPool is linear in value for a given key: the same key draws the same
  sequences, so the tangent is the op re-bound on it."""
  key, x = primals
  y, rows, cols = tfops.FractionalAvgPool(key, x, **p)
  t = tangents[1]
  if type(t) is ad.Zero or not jnp.issubdtype(x.dtype, jnp.floating):
    ty = rules.zero_tangent(y)
  else:
    ty = tfops.FractionalAvgPool(key, t, **p)[0]
  return [y, rows, cols], [ty] + _zero_seq_tangents(rows, cols)


def _avg_pool_transpose(cts, key, x, **p):
  """tf.FractionalAvgPoolGrad at the sequences the key draws (those of a
  FractionalAvgPool of zeros with the same key: TF-named)."""
  assert rules.U(x) and not rules.U(key)
  ct = cts[0]
  shape = rules.shape_of(x)
  if type(ct) is ad.Zero:
    return [None, ad.Zero(x.aval)]
  _, rows, cols = tfops.FractionalAvgPool(key, rules.zeros(shape, x.aval.dtype), **p)
  return [
    None,
    tfops.FractionalAvgPoolGrad(
      ct, rows, cols, orig_input_tensor_shape=shape, overlapping=p.get("overlapping", False)
    ),
  ]


def _forward_batching(op, impl):
  """Key unbatched: fold the batch into N (one draw, as one TF call over the batch);
  a batched key draws per member (vmap of the impl)."""
  fallback = derived.vmap_batching(impl, True)

  def rule(args, dims, **p):
    (key, x), (kd, xd) = args, dims
    if kd is not None:
      return fallback(args, dims, **p)
    b = x.shape[xd]
    out, rows, cols = op(key, merge_batch(x, xd), **p)
    return [split_batch(out, b), rows, cols], [0, None, None]

  return rule


def _forward_spec(st, op):
  @st.composite
  def draw_call(draw):
    dtype = draw(st.sampled_from(_DTYPES))
    shape = (
      draw(st.integers(1, 2)),
      draw(st.integers(1, 7)),
      draw(st.integers(1, 7)),
      draw(st.integers(1, 2)),
    )
    dt = st.np_dtype(dtype)
    if dt.kind == "i":
      x = draw(st.arrays(dt, shape, min_value=-100, max_value=100))
    else:
      x = draw(st.arrays(dt, shape, special=False, min_value=-4.0, max_value=4.0))
    ratios = [
      draw(st.sampled_from([r for r in (1.0, 1.2, 1.44, 1.73, 2.0, 2.5, 3.0) if r <= n]))
      for n in shape[1:3]
    ]
    deterministic = draw(st.booleans())  # TF: seeds must be 0 unless deterministic
    return dict(
      value=np.asarray(x),
      pooling_ratio=[1.0, *ratios, 1.0],
      pseudo_random=draw(st.booleans()),
      overlapping=draw(st.booleans()),
      deterministic=deterministic,
      seed=draw(st.integers(0, 100)) * deterministic,
      seed2=draw(st.integers(0, 100)) * deterministic,
    )

  return st.Spec(
    draw_call(),
    skip=dict(
      RANDOM_SKIPS,
      values="random pooling regions (jax.random, not TF's Philox); the pooling at TF's "
      "own sequences and the drawn sequences' properties are checked in "
      "tests/test_fractional_pool.py",
      jvp="random pooling regions differ from TF's; derivatives at given sequences are "
      "checked in tests/test_fractional_pool.py",
      vjp=f"random pooling regions differ from TF's; the VJP (tf.Fractional{op}Grad) is "
      "checked in tests/test_fractional_pool.py",
    ),
    note="deterministic/seed/seed2 dropped: the sequences come from rng=",
  )


_POOL_ATTRS = ("pooling_ratio", "pseudo_random", "overlapping")

FractionalMaxPool = register_op(
  "FractionalMaxPool",
  _fractional_pool("max"),
  family="nn",
  attrs=_POOL_ATTRS,
  uses_rng=True,
  multiple_results=True,
  jvp=_max_pool_jvp,
  batching=rules.per_op(_forward_batching, _fractional_pool("max")),
  spec=lambda st: _forward_spec(st, "MaxPool"),
)

FractionalAvgPool = register_op(
  "FractionalAvgPool",
  _fractional_pool("avg"),
  family="nn",
  attrs=_POOL_ATTRS,
  uses_rng=True,
  multiple_results=True,
  jvp=_avg_pool_jvp,
  transpose=_avg_pool_transpose,
  batching=rules.per_op(_forward_batching, _fractional_pool("avg")),
  spec=lambda st: _forward_spec(st, "AvgPool"),
)


# --------------------------------------------------------------------------
# tf.FractionalMaxPool.tangent: FractionalMaxPool's tangent (no TF op), the
# transpose of FractionalMaxPoolGrad in out_backprop
# --------------------------------------------------------------------------


def _max_pool_tangent(
  orig_input, orig_output, tangent, row_pooling_sequence, col_pooling_sequence, *, overlapping=False
):
  """``tangent`` read at each region's first maximum (row-major) of ``orig_input``."""
  del orig_output
  _, h, w, _ = orig_input.shape
  rows = _membership(row_pooling_sequence, h, overlapping)
  cols = _membership(col_pooling_sequence, w, overlapping)
  vals, _ = _region_values(orig_input, rows, cols)
  arg = jnp.argmax(vals, axis=3)  # [B, R, C, D]
  flat = tangent.reshape((tangent.shape[0], h * w, tangent.shape[3]))
  return jnp.take_along_axis(flat[:, None, None], arg[:, :, :, None, :], axis=3)[:, :, :, 0]


def _max_pool_tangent_batching(args, dims, **p):
  x, y, t, rows, cols = args
  if dims[3] is not None or dims[4] is not None:
    return derived.vmap_batching(_max_pool_tangent, False)(args, dims, **p)
  b = rules.batch_size(args, dims)
  flat = [
    merge_batch(jnp.broadcast_to(a, (b,) + a.shape) if d is None else a, 0 if d is None else d)
    for a, d in zip((x, y, t), dims[:3])
  ]
  return split_batch(max_pool_tangent_p.bind(*flat, rows, cols, **p), b), 0


max_pool_tangent_p = Primitive("tf.FractionalMaxPool.tangent")
max_pool_tangent_p.def_impl(_max_pool_tangent)
max_pool_tangent_p.def_abstract_eval(derived.abstract_eval(_max_pool_tangent, False))
mlir.register_lowering(
  max_pool_tangent_p, mlir.lower_fun(_max_pool_tangent, multiple_results=False)
)
ad.defjvp(
  max_pool_tangent_p,
  None,
  None,
  lambda t, x, y, g, r, c, **p: max_pool_tangent_p.bind(x, y, t, r, c, **p),
)
ad.primitive_transposes[max_pool_tangent_p] = derived.zero_safe_transpose(
  lambda ct, x, y, g, r, c, **p: [
    None,
    None,
    tfops.FractionalMaxPoolGrad(x, y, ct, r, c, **p),
    None,
    None,
  ]
)
batching.primitive_batchers[max_pool_tangent_p] = _max_pool_tangent_batching
