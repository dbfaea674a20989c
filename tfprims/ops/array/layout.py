"""Layout and reordering: DataFormatDimMap, DataFormatVecPermute, Reverse (v1),
ReverseSequence, Roll, Concat (v1), ConcatOffset, ParallelConcat, MirrorPadGrad.

* DataFormatDimMap / DataFormatVecPermute compute on int values (an axis index,
  a shape or stride vector) with the static permutation between the
  ``src_format`` and ``dst_format`` attrs; DimMap transcribes TF's kernel
  arithmetic, out-of-range values included.
* Reverse, Roll, Concat and ParallelConcat are linear data movement with static
  params; transposes: Reverse -> Reverse, Roll -> Roll with negated shifts,
  Concat -> SplitV, ParallelConcat -> Split.
* ReverseSequence takes ``seq_lengths`` as data (an operand); it is linear in
  its input and its own transpose. Lengths outside ``[0, dim size]`` (TF's CPU
  kernel raises) are clamped to that range: docs/semantics/array.md.
* ConcatOffset's inputs are shapes: the interpreter folds it whenever they are
  known (always, with static shapes); its primitive exists for the property tests
  and for direct use.
* MirrorPadGrad folds the mirrored borders of a padded gradient back onto the
  unpadded shape; it is MirrorPad's transpose (and MirrorPad is its transpose).
"""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np
from jax import lax

from tfprims import rules
from tfprims.core import register_op, tfops
from tfprims.ops.array._common import FAMILY, norm_axis
from tfprims.ops.shared import ints, scalar_int
from tfprims.ops.shared_specs import INDEX_DTYPES, index_array, lazy_hst
from tfprims.rules import U

# --- DataFormatDimMap / DataFormatVecPermute ----------------------------------------------


def _check_formats(src: str, dst: str, op: str) -> None:
  if len(src) not in (4, 5):
    raise ValueError(f"{op}: Source format must be of length 4 or 5, received src_format = {src}")
  if len(dst) not in (4, 5):
    raise ValueError(
      f"{op}: Destination format must be of length 4 or 5, received dst_format = {dst}"
    )
  if sorted(src) != sorted(dst) or len(set(src)) != len(src):
    raise ValueError(
      f"{op}: Destination and source format must determine a permutation, got {src} and {dst}"
    )


def _dim_map_impl(x, *, src_format, dst_format):
  """The index in ``dst_format`` of the dimension ``x`` of ``src_format``. TF's kernel:
  ``m = (x + n) % n`` (C remainder); ``m`` in ``[0, n - 1)`` maps that dim, any other
  ``m`` (negative for ``x < -n``) maps the last one."""
  _check_formats(src_format, dst_format, "DataFormatDimMap")
  n = len(src_format)
  table = np.array([dst_format.index(c) for c in src_format], np.dtype(x.dtype))
  m = lax.rem(x + np.array(n, x.dtype), np.array(n, x.dtype))
  idx = jnp.where((m >= 0) & (m < n - 1), m, np.array(n - 1, x.dtype))
  return jnp.take(jnp.asarray(table), idx, mode="clip")


DataFormatDimMap = register_op(
  "DataFormatDimMap",
  _dim_map_impl,
  family=FAMILY,
  attrs=("src_format", "dst_format"),
  batching="elementwise",
  spec=lambda st: st.Spec(_dim_map_calls(st)),
)


def _vec_permutation(shape, src: str, dst: str) -> tuple:
  """The static gather indices of DataFormatVecPermute for an input of ``shape``."""
  op = "DataFormatVecPermute"
  _check_formats(src, dst, op)
  n = len(src)
  if len(shape) not in (1, 2):
    raise ValueError(f"{op}: input must be a vector or 2D tensor, but got shape {list(shape)}")
  sizes = (2, 4) if n == 4 else (3, 5)
  if len(shape) == 1 and shape[0] not in sizes:
    raise ValueError(
      f"{op}: 1D input must be of size {sizes[0]} or {sizes[1]}, but got shape {list(shape)}"
    )
  if len(shape) == 2:
    if shape[0] not in sizes:
      raise ValueError(
        f"{op}: First dimension of 2D input must be of size {sizes[0]} or "
        f"{sizes[1]}, but got shape {list(shape)}"
      )
    if shape[1] != 2:
      raise ValueError(
        f"{op}: Second dimension of 2D input must be of size 2, but got shape {list(shape)}"
      )
  if shape[0] == n:
    return tuple(src.index(c) for c in dst)
  # Spatial dims only: the formats without N and C.
  s, d = src.replace("N", "").replace("C", ""), dst.replace("N", "").replace("C", "")
  if n == 4 and not ("H" in s and "W" in s and sorted(s) == sorted(d)):
    raise ValueError(f"{op}: Format specifier must contain H and W for 2D case")
  if n == 5 and not ("D" in s and "H" in s and "W" in s and sorted(s) == sorted(d)):
    raise ValueError(f"{op}: Format specifier must contain D, H and W for 3D case")
  return tuple(s.index(c) for c in d)


def _vec_permute_impl(x, *, src_format, dst_format):
  """``x`` (a shape-like vector, or ``[n, 2]`` pairs) reordered from ``src_format``
  to ``dst_format``; a vector of only the spatial dims is permuted as such."""
  perm = _vec_permutation(x.shape, src_format, dst_format)
  return jnp.take(x, np.array(perm, np.int32), axis=0)


def _vec_permute_batch(args, dims, *, src_format, dst_format):
  (x,), (d,) = args, dims
  perm = _vec_permutation(rules.unbatched_shape(x, d), src_format, dst_format)
  axis = 1 if d == 0 else 0
  return tfops.GatherV2(x, np.array(perm, np.int32), axis=axis, batch_dims=0), d


DataFormatVecPermute = register_op(
  "DataFormatVecPermute",
  _vec_permute_impl,
  family=FAMILY,
  attrs=("src_format", "dst_format"),
  batching=_vec_permute_batch,
  spec=lambda st: st.Spec(_vec_permute_calls(st)),
)


# --- Reverse (v1) -------------------------------------------------------------------------


def _reverse_dims(dims, rank) -> tuple:
  flags = tuple(bool(v) for v in np.asarray(dims, dtype=bool).reshape(-1))
  if len(flags) != rank:
    raise ValueError(
      f"Reverse: 'dims' must have the same number of values as 'input' has "
      f"dimensions. 'input' has {rank}'dims' has {len(flags)} values"
    )
  return flags


def _reverse_v1_impl(tensor, *, reverse_dims):
  """``tensor`` reversed along the dims flagged true (TF's ``dims`` input; the param
  is renamed: JAX reserves ``dims`` in batching rules)."""
  axes = tuple(i for i, f in enumerate(_reverse_dims(reverse_dims, tensor.ndim)) if f)
  return lax.rev(tensor, axes) if axes else tensor


def _reverse_v1_batch(args, dims, *, reverse_dims):
  (x,), (d,) = args, dims
  flags = _reverse_dims(reverse_dims, x.ndim - 1)
  return tfops.Reverse(x, reverse_dims=flags[:d] + (False,) + flags[d:]), d


Reverse = register_op(
  "Reverse",
  _reverse_v1_impl,
  family=FAMILY,
  static={"dims": "reverse_dims"},
  linear=True,
  transpose=lambda ct, x, *, reverse_dims: [tfops.Reverse(ct, reverse_dims=reverse_dims)],
  batching=_reverse_v1_batch,
  spec=lambda st: st.Spec(_reverse_v1_calls(st)),
)


# --- ReverseSequence ----------------------------------------------------------------------


def _seq_dims(rank, seq_dim, batch_dim) -> tuple[int, int]:
  if seq_dim < 0 or seq_dim >= rank:
    raise ValueError(
      f"ReverseSequence: seq_dim must be < input rank ( {seq_dim} vs. {rank})"
      if seq_dim >= 0
      else f"ReverseSequence: Invalid seq_dim {seq_dim}"
    )
  if batch_dim < 0 or batch_dim >= rank:
    raise ValueError(
      f"ReverseSequence: batch_dim must be < input rank ( {batch_dim} vs. {rank})"
      if batch_dim >= 0
      else f"ReverseSequence: Invalid batch_dim {batch_dim}"
    )
  if seq_dim == batch_dim:
    raise ValueError(f"ReverseSequence: batch_dim == seq_dim == {seq_dim}")
  return seq_dim, batch_dim


def _reverse_sequence_impl(input, seq_lengths, *, seq_dim, batch_dim):
  """Along ``seq_dim``, the first ``seq_lengths[b]`` elements of batch entry ``b``
  reversed. Lengths outside ``[0, input.shape[seq_dim]]`` are clamped to it
  (TF's CPU kernel raises): docs/semantics/array.md."""
  sd, bd = _seq_dims(input.ndim, seq_dim, batch_dim)
  if seq_lengths.shape != (input.shape[bd],):
    raise ValueError(
      f"ReverseSequence: Length of seq_lengths != input.dims({bd}), "
      f"({seq_lengths.shape} vs. {input.shape[bd]})"
    )
  n = input.shape[sd]
  if input.size == 0 or n <= 1:
    return input
  wide = jnp.int64 if seq_lengths.dtype == np.dtype("int64") else jnp.int32
  lengths = jnp.clip(seq_lengths.astype(wide), 0, n)
  shape = [1] * input.ndim
  shape[bd] = input.shape[bd]
  lengths = jnp.reshape(lengths, shape)
  j = lax.broadcasted_iota(wide, tuple(n if i == sd else 1 for i in range(input.ndim)), sd)
  src = jnp.where(j < lengths, lengths - 1 - j, j)
  return jnp.take_along_axis(
    input, jnp.broadcast_to(src, input.shape), axis=sd, mode="promise_in_bounds"
  )


def _reverse_sequence_check(input, seq_lengths, *, seq_dim, batch_dim):
  n = input.shape[seq_dim]
  bad = jnp.any((seq_lengths < 0) | (seq_lengths > n))
  return bad, f"seq_lens must be in [0, input.dims({seq_dim})] = [0, {n}]"


def _reverse_sequence_batch(args, dims, *, seq_dim, batch_dim):
  (x, lengths), (dx, dl) = args, dims
  if dl is None:
    rank = x.ndim - 1
    _seq_dims(rank, seq_dim, batch_dim)
    shift = lambda a: a + (a >= dx)
    return tfops.ReverseSequence(x, lengths, seq_dim=shift(seq_dim), batch_dim=shift(batch_dim)), dx
  # Batched lengths: fold the mapped axis into TF's batch axis.
  size = rules.batch_size(args, dims)
  x = rules.with_batch_axis(x, dx, size)
  shape = rules.shape_of(x)[1:]
  sd, bd = _seq_dims(len(shape), seq_dim, batch_dim)
  x = rules.move_axes(x, (0,), (bd,))
  merged = shape[:bd] + (size * shape[bd],) + shape[bd + 1 :]
  flat = tfops.ReverseSequence(
    rules.reshape(x, merged),
    rules.reshape(rules.to_front(lengths, dl), (size * shape[bd],)),
    seq_dim=sd,
    batch_dim=bd,
  )
  return rules.reshape(flat, shape[:bd] + (size,) + shape[bd:]), bd


ReverseSequence = register_op(
  "ReverseSequence",
  _reverse_sequence_impl,
  family=FAMILY,
  attrs=("seq_dim", "batch_dim"),
  jvp=(lambda t, x, lengths, **p: tfops.ReverseSequence(t, lengths, **p), None),
  transpose=lambda ct, x, lengths, **p: [
    tfops.ReverseSequence(ct, lengths, **p) if U(x) else None,
    None,
  ],
  batching=_reverse_sequence_batch,
  check=_reverse_sequence_check,
  spec=lambda st: st.Spec(_reverse_sequence_calls(st)),
)


# --- Roll ---------------------------------------------------------------------------------


def _roll_plan(shape, shift, axis) -> tuple:
  """((axis, shift mod size), ...) for the axes that move (shifts of an axis named
  twice add up, as in TF)."""
  s, a = ints(shift), ints(axis)
  if len(s) != len(a):
    raise ValueError("Roll: shift and axis must have the same size")
  total = {}
  for k, ax in zip(s, a):
    if not -len(shape) <= ax < len(shape):
      raise ValueError(f"Roll: axis {ax} is out of range")
    ax %= len(shape)
    total[ax] = total.get(ax, 0) + k
  return tuple(
    (ax, k % shape[ax]) for ax, k in sorted(total.items()) if shape[ax] and k % shape[ax]
  )


def _roll_impl(input, *, shift, axis):
  """Elements shifted by ``shift[i]`` positions along ``axis[i]``, wrapping around."""
  if input.ndim == 0:
    raise ValueError("Roll: input must be 1-D or higher")
  for ax, k in _roll_plan(input.shape, shift, axis):
    n = input.shape[ax]
    input = jnp.concatenate(
      [lax.slice_in_dim(input, n - k, n, axis=ax), lax.slice_in_dim(input, 0, n - k, axis=ax)],
      axis=ax,
    )
  return input


def _roll_transpose(ct, x, *, shift, axis):
  return [tfops.Roll(ct, shift=tuple(-k for k in ints(shift)), axis=ints(axis))]


def _roll_batch(args, dims, *, shift, axis):
  (x,), (d,) = args, dims
  rank = x.ndim - 1
  if rank == 0:
    raise ValueError("Roll: input must be 1-D or higher")
  axes = tuple(norm_axis(a, rank) for a in ints(axis))
  return tfops.Roll(x, shift=ints(shift), axis=tuple(a + (a >= d) for a in axes)), d


Roll = register_op(
  "Roll",
  _roll_impl,
  family=FAMILY,
  static=("shift", "axis"),
  linear=True,
  transpose=_roll_transpose,
  batching=_roll_batch,
  spec=lambda st: st.Spec(_roll_calls(st)),
)


# --- Concat (v1), ConcatOffset, ParallelConcat --------------------------------------------


def _concat_v1_impl(*values, concat_dim):
  """The values concatenated along ``concat_dim`` (ConcatV2 with the axis first)."""
  if values[0].ndim == 0:
    raise ValueError("Concat: Can't concatenate scalars (use tf.stack instead)")
  return jnp.concatenate(values, axis=norm_axis(scalar_int(concat_dim), values[0].ndim))


def _concat_v1_transpose(ct, *values, concat_dim):
  shapes = [rules.shape_of(v) for v in values]
  ax = norm_axis(scalar_int(concat_dim), len(shapes[0]))
  sizes = tuple(s[ax] for s in shapes)
  parts = tfops.SplitV(ct, size_splits=sizes, axis=ax, num_split=len(sizes))
  return [p if U(v) else None for p, v in zip(parts, values)]


def _concat_v1_batch(args, dims, *, concat_dim):
  size = rules.batch_size(args, dims)
  ax = norm_axis(scalar_int(concat_dim), len(rules.unbatched_shape(args[0], dims[0])))
  values = [rules.with_batch_axis(a, d, size) for a, d in zip(args, dims)]
  return tfops.Concat(*values, concat_dim=ax + 1), 0


Concat = register_op(
  "Concat",
  _concat_v1_impl,
  family=FAMILY,
  static=("concat_dim",),
  linear=True,
  transpose=_concat_v1_transpose,
  batching=_concat_v1_batch,
  spec=lambda st: st.Spec(_concat_v1_calls(st)),
)


def _concat_offset_impl(*shape, concat_dim):
  """The offset of each input in the concatenation of tensors of these shapes:
  zeros, except the running sum of the ``concat_dim`` sizes before it."""
  rank = shape[0].shape[0] if shape[0].ndim == 1 else -1
  if any(s.shape != (rank,) for s in shape):
    raise ValueError(
      f"ConcatOffset: every shape must be a vector of {rank} elements, got "
      f"{[tuple(s.shape) for s in shape]}"
    )
  ax = scalar_int(concat_dim)
  if not -rank <= ax < rank:
    raise ValueError(f"ConcatOffset: Concat dim is out of range: {ax} vs. {max(rank, 0)}")
  ax %= rank
  sizes = jnp.stack([s[ax] for s in shape])
  starts = jnp.cumsum(sizes) - sizes
  hot = np.arange(rank) == ax
  return tuple(
    jnp.where(hot, starts[i], jnp.zeros((), s.dtype)).astype(s.dtype) for i, s in enumerate(shape)
  )


def _concat_offset_check(*shape, concat_dim):
  ax = scalar_int(concat_dim) % shape[0].shape[0]
  keep = np.arange(shape[0].shape[0]) != ax
  bad = jnp.any(jnp.stack([jnp.any((s != shape[0]) & keep) for s in shape[1:]]))
  return bad, f"All dimensions except {ax} must match"


ConcatOffset = register_op(
  "ConcatOffset",
  _concat_offset_impl,
  family=FAMILY,
  static=("concat_dim",),
  multiple_results=True,
  check=_concat_offset_check,
  # Batched shape vectors do not arise from graphs (shapes are static); vmap of the
  # impl keeps the op usable under vmap without a TF-named formulation.
  batching=rules.vmap_batching(_concat_offset_impl, True),
  spec=lambda st: st.Spec(_concat_offset_calls(st)),
)


def _parallel_concat_impl(*values, shape):
  """The values (each of leading dim 1) stacked into a tensor of ``shape``; rows past
  the values (TF leaves them uninitialized) are zeros."""
  shape = ints(shape)
  for v in values:
    if v.ndim == 0 or v.shape[0] != 1 or tuple(v.shape[1:]) != shape[1:]:
      raise ValueError(
        f"ParallelConcat: value and update shape doesn't match: {list(shape)} vs. {list(v.shape)}"
      )
  if shape[0] < len(values):
    raise ValueError(f"ParallelConcat: {len(values)} values for a first dimension of {shape[0]}")
  out = jnp.concatenate(values, axis=0)
  if shape[0] > len(values):
    out = lax.pad(
      out, jnp.zeros((), out.dtype), [(0, shape[0] - len(values), 0)] + [(0, 0, 0)] * (out.ndim - 1)
    )
  return out


def _parallel_concat_transpose(ct, *values, shape):
  n = len(values)
  parts = tfops.SplitV(ct, size_splits=(1,) * n + (ints(shape)[0] - n,), axis=0, num_split=n + 1)[
    :n
  ]
  return [p if U(v) else None for p, v in zip(parts, values)]


def _parallel_concat_batch(args, dims, *, shape):
  size = rules.batch_size(args, dims)
  values = [
    rules.move_axes(rules.with_batch_axis(a, d, size), (0,), (1,)) for a, d in zip(args, dims)
  ]
  shape = ints(shape)
  return tfops.ParallelConcat(*values, shape=(shape[0], size) + shape[1:]), 1


ParallelConcat = register_op(
  "ParallelConcat",
  _parallel_concat_impl,
  family=FAMILY,
  attrs=("shape",),
  linear=True,
  transpose=_parallel_concat_transpose,
  batching=_parallel_concat_batch,
  spec=lambda st: st.Spec(
    _parallel_concat_calls(st),
    grad_oracle="fd",
    note="TF registers no gradient for ParallelConcat: derivatives "
    "are checked against central differences",
  ),
)


# --- MirrorPadGrad --------------------------------------------------------------------------


def _mirror_paddings(paddings, rank, op) -> tuple:
  flat = ints(paddings)
  if len(flat) != 2 * rank:
    raise ValueError(
      f"{op}: paddings must be a matrix of shape [{rank}, 2], got {len(flat)} values"
    )
  p = tuple((flat[2 * i], flat[2 * i + 1]) for i in range(rank))
  if any(a < 0 or b < 0 for a, b in p):
    raise ValueError(f"{op}: paddings must be non-negative, got {p}")
  return p


def _mirror_pad_grad_impl(input, *, paddings, mode):
  """The transpose of MirrorPad: each padded border element added back onto the element
  it mirrors, then the borders cut off."""
  p = _mirror_paddings(paddings, input.ndim, "MirrorPadGrad")
  offset = {"REFLECT": 1, "SYMMETRIC": 0}[mode]
  x = input
  for ax, (a, b) in enumerate(p):
    n = x.shape[ax] - a - b
    if rules.known((n,)):  # a symbolic dim (jax.export) is TF's to check when it runs
      if n <= 0:
        raise ValueError(
          f"MirrorPadGrad: Total paddings must be less than the input "
          f"dimension size: {a + b} was not less than {x.shape[ax]}"
        )
      if a > n - offset or b > n - offset:
        bound = "less than" if offset else "no greater than"
        raise ValueError(
          f"MirrorPadGrad: paddings must be {bound} the output dimension "
          f"size: {a}, {b} vs {n} ({mode})"
        )
    out = lax.slice_in_dim(x, a, a + n, axis=ax)
    zeros = jnp.zeros((), x.dtype)
    if a:  # input[a - 1 - j] mirrors out[offset + j], j < a
      left = lax.rev(lax.slice_in_dim(x, 0, a, axis=ax), (ax,))
      out = out + lax.pad(
        left, zeros, [(offset, n - offset - a, 0) if i == ax else (0, 0, 0) for i in range(x.ndim)]
      )
    if b:  # input[a + n + j] mirrors out[n - 1 - offset - j], j < b
      right = lax.rev(lax.slice_in_dim(x, a + n, a + n + b, axis=ax), (ax,))
      out = out + lax.pad(
        right, zeros, [(n - offset - b, offset, 0) if i == ax else (0, 0, 0) for i in range(x.ndim)]
      )
    x = out
  return x


def _mirror_pad_grad_batch(args, dims, *, paddings, mode):
  (x,), (d,) = args, dims
  p = _mirror_paddings(paddings, x.ndim - 1, "MirrorPadGrad")
  return tfops.MirrorPadGrad(x, paddings=p[:d] + ((0, 0),) + p[d:], mode=mode), d


MirrorPadGrad = register_op(
  "MirrorPadGrad",
  _mirror_pad_grad_impl,
  family=FAMILY,
  static=("paddings",),
  attrs=("mode",),
  linear=True,
  transpose=lambda ct, x, *, paddings, mode: [tfops.MirrorPad(ct, paddings=paddings, mode=mode)],
  batching=_mirror_pad_grad_batch,
  spec=lambda st: st.Spec(_mirror_pad_grad_calls(st)),
)


# --- property-test strategies (hypothesis is imported lazily) ---------------------

_FORMATS4 = ("NHWC", "NCHW", "HWNC", "HWCN", "WHCN", "NWHC", "CHWN")
_FORMATS5 = ("NDHWC", "NCDHW", "DHWNC", "NCHWD", "CDHWN")


def _dim_map_calls(st):
  hst = lazy_hst()

  @st.composite
  def calls(draw):
    formats = draw(hst.sampled_from([_FORMATS4, _FORMATS5]))
    n = len(formats[0])
    # Beyond [-n, n) too: TF does not check, its arithmetic decides (transcribed).
    x = draw(
      st.arrays(st.dtypes(INDEX_DTYPES), st.shapes(max_rank=2), min_value=-3 * n, max_value=3 * n)
    )
    return {
      "x": x,
      "src_format": draw(hst.sampled_from(formats)),
      "dst_format": draw(hst.sampled_from(formats)),
    }

  return calls()


def _vec_permute_calls(st):
  hst = lazy_hst()

  @st.composite
  def calls(draw):
    formats = draw(hst.sampled_from([_FORMATS4, _FORMATS5]))
    n = len(formats[0])
    first = draw(hst.sampled_from([n, n - 2]))
    shape = (first,) if draw(hst.booleans()) else (first, 2)
    return {
      "x": draw(st.arrays(st.dtypes(INDEX_DTYPES), shape)),
      "src_format": draw(hst.sampled_from(formats)),
      "dst_format": draw(hst.sampled_from(formats)),
    }

  return calls()


def _reverse_v1_calls(st):
  hst = lazy_hst()

  @st.composite
  def calls(draw):
    x = draw(st.arrays(st.dtypes(st.ALL), st.shapes()))
    dims = np.array([draw(hst.booleans()) for _ in range(x.ndim)], np.bool_).reshape(-1)
    return {"tensor": x, "dims": dims}

  return calls()


def _reverse_sequence_calls(st):
  hst = lazy_hst()

  @st.composite
  def calls(draw):
    x = draw(st.arrays(st.dtypes(st.ALL), st.shapes(min_rank=2)))
    sd, bd = draw(hst.permutations(range(x.ndim)))[:2]
    n = x.shape[sd]
    lengths = draw(st.arrays(st.dtypes(INDEX_DTYPES), (x.shape[bd],), min_value=0, max_value=n))
    return {"input": x, "seq_lengths": lengths, "seq_dim": sd, "batch_dim": bd}

  return calls()


def _roll_calls(st):
  hst = lazy_hst()

  @st.composite
  def calls(draw):
    x = draw(st.arrays(st.dtypes(st.ALL), st.shapes(min_rank=1)))
    k = draw(hst.integers(0, 3))
    axes = [draw(hst.integers(-x.ndim, x.ndim - 1)) for _ in range(k)]  # repeats add up
    shifts = [draw(hst.integers(-9, 9)) for _ in range(k)]
    if k == 1 and draw(hst.booleans()):
      axes, shifts = np.array(axes[0]), np.array(shifts[0])  # scalars
    return {"input": x, "shift": index_array(draw, st, shifts), "axis": index_array(draw, st, axes)}

  return calls()


def _concat_v1_calls(st):
  hst = lazy_hst()

  @st.composite
  def calls(draw):
    dtype = draw(st.dtypes(st.ALL))
    shape = list(draw(st.shapes(min_rank=1, max_rank=3)))
    axis = draw(hst.integers(-len(shape), len(shape) - 1))
    values = []
    for _ in range(draw(hst.integers(2, 3))):
      shape[axis] = draw(hst.integers(0, 3))
      values.append(draw(st.arrays(dtype, tuple(shape))))
    return {"concat_dim": np.int32(axis), "values": values}

  return calls()


def _concat_offset_calls(st):
  hst = lazy_hst()

  @st.composite
  def calls(draw):
    base = list(draw(st.shapes(min_rank=1, max_rank=4, max_side=5)))
    axis = draw(hst.integers(-len(base), len(base) - 1))
    dtype = draw(st.dtypes(INDEX_DTYPES))
    shapes = []
    for _ in range(draw(hst.integers(2, 4))):
      base[axis] = draw(hst.integers(0, 5))
      shapes.append(np.array(base, dtype))
    return {"concat_dim": np.int32(axis), "shape": shapes}

  return calls()


def _parallel_concat_calls(st):
  hst = lazy_hst()

  @st.composite
  def calls(draw):
    dtype = draw(st.dtypes(st.ALL))
    inner = tuple(draw(st.shapes(max_rank=2)))
    n = draw(hst.integers(1, 3))
    values = [draw(st.arrays(dtype, (1,) + inner)) for _ in range(n)]
    return {"values": values, "shape": [n, *inner]}

  return calls()


def _mirror_pad_grad_calls(st):
  hst = lazy_hst()

  @st.composite
  def calls(draw):
    mode = draw(hst.sampled_from(["REFLECT", "SYMMETRIC"]))
    offset = mode == "REFLECT"
    out_shape = draw(st.shapes(max_rank=3, min_side=1, max_side=4))
    p = []
    for n in out_shape:
      p.append([draw(hst.integers(0, n - offset)), draw(hst.integers(0, n - offset))])
    shape = tuple(n + a + b for n, (a, b) in zip(out_shape, p))
    dtype = draw(st.dtypes(st.NUMERIC + st.COMPLEX))
    return {
      "input": draw(st.arrays(dtype, shape)),
      "mode": mode,
      "paddings": index_array(draw, st, np.array(p, np.int64).reshape(len(shape), 2)),
    }

  return calls()
