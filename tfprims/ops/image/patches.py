"""Layout and patch ops: DepthToSpace, SpaceToDepth (NHWC and NCHW), ExtractImagePatches
and ExtractVolumePatches.

All four only move values, so they are exact for every dtype. They are linear: the JVP
is the op on the tangent; the transpose of DepthToSpace is ``tf.SpaceToDepth`` (and the
other way round); the transpose of a patch extraction is TF's own gradient, a
``tf.UnsortedSegmentSum`` of the cotangent by the input pixel each patch element was
read from (padding positions carry id -1 and are dropped). Batching folds the vmapped
axis into N with ``tf.Transpose``/``tf.Reshape`` and re-binds the op.
"""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np

from tfprims import rules
from tfprims.core import register_op, tfops
from tfprims.ops.image._common import FAMILY
from tfprims.rules import U

# --------------------------------------------------------------------------
# DepthToSpace / SpaceToDepth
# --------------------------------------------------------------------------


def _check_layout(x, block_size, data_format):
  if data_format == "NCHW_VECT_C":
    # TF has no CPU kernel for it (nor for NCHW, which we do convert: GPU graphs use it).
    raise NotImplementedError("data_format NCHW_VECT_C is not supported")
  if data_format not in ("NHWC", "NCHW"):
    raise ValueError(f"unknown data_format {data_format!r}")
  if x.ndim != 4:
    raise ValueError(f"input rank should be 4 instead of {x.ndim}")
  if block_size < 2:
    raise ValueError(f"Value for attr 'block_size' of {block_size} must be at least 2")


def depth_to_space(x, *, block_size, data_format="NHWC"):
  """TF DepthToSpace: depth index ``(i * bs + j) * C' + c`` goes to pixel offset (i, j)."""
  _check_layout(x, block_size, data_format)
  bs = int(block_size)
  if data_format == "NHWC":
    n, h, w, c = x.shape
    if c % (bs * bs):
      raise ValueError(f"Input depth dimension {c} should be divisible by: {bs * bs}")
    y = x.reshape(n, h, w, bs, bs, c // (bs * bs)).transpose(0, 1, 3, 2, 4, 5)
    return y.reshape(n, h * bs, w * bs, c // (bs * bs))
  n, c, h, w = x.shape
  if c % (bs * bs):
    raise ValueError(f"Input depth dimension {c} should be divisible by: {bs * bs}")
  y = x.reshape(n, bs, bs, c // (bs * bs), h, w).transpose(0, 3, 4, 1, 5, 2)
  return y.reshape(n, c // (bs * bs), h * bs, w * bs)


def space_to_depth(x, *, block_size, data_format="NHWC"):
  """TF SpaceToDepth: the inverse of DepthToSpace."""
  _check_layout(x, block_size, data_format)
  bs = int(block_size)
  if data_format == "NHWC":
    n, h, w, c = x.shape
    if h % bs or w % bs:
      raise ValueError(f"Image width {w} and height {h} should be divisible by block_size: {bs}")
    y = x.reshape(n, h // bs, bs, w // bs, bs, c).transpose(0, 1, 3, 2, 4, 5)
    return y.reshape(n, h // bs, w // bs, bs * bs * c)
  n, c, h, w = x.shape
  if h % bs or w % bs:
    raise ValueError(f"Image width {w} and height {h} should be divisible by block_size: {bs}")
  y = x.reshape(n, c, h // bs, bs, w // bs, bs).transpose(0, 3, 5, 1, 2, 4)
  return y.reshape(n, bs * bs * c, h // bs, w // bs)


def _fold_into_n(x, d):
  """The batch axis ``d`` moved to the front and merged into N (TF ops)."""
  x = rules.to_front(x, d)
  shape = rules.shape_of(x)
  return rules.reshape(x, (shape[0] * shape[1],) + shape[2:])


def _split_n(out, b):
  shape = rules.shape_of(out)
  return rules.reshape(out, (b, shape[0] // b if b else 0) + shape[1:])


def _fold_batching(op):
  def rule(args, dims, **params):
    (x,), (d,) = args, dims
    b = rules.shape_of(x)[d]
    return _split_n(op(_fold_into_n(x, d), **params), b), 0

  return rule


def _values(st, dtype, shape):
  """Any values (the ops only move them): floats bounded, integers in [0, 100]."""
  dt = st.np_dtype(dtype)
  if dt.kind in "bc":
    return st.arrays(dt, shape)
  if dt.kind in "iu":
    return st.arrays(dt, shape, min_value=0, max_value=100)
  return st.arrays(dt, shape, special=False, min_value=-100, max_value=100)


_LAYOUT_DTYPES = (
  "float16",
  "bfloat16",
  "float32",
  "float64",
  "int8",
  "uint8",
  "int16",
  "uint16",
  "int32",
  "int64",
  "complex64",
  "complex128",
  "bool",
)


def _layout_calls(st, to_space):
  @st.composite
  def draw_call(draw):
    bs = draw(st.integers(2, 3))
    n, c = draw(st.integers(0, 2)), draw(st.integers(1, 2))
    h, w = draw(st.integers(1, 2)), draw(st.integers(1, 2))
    shape = (n, h, w, c * bs * bs) if to_space else (n, h * bs, w * bs, c)
    dtype = draw(st.sampled_from(_LAYOUT_DTYPES))
    return dict(input=draw(_values(st, dtype, shape)), block_size=bs, data_format="NHWC")

  return draw_call()


DepthToSpace = register_op(
  "DepthToSpace",
  depth_to_space,
  family=FAMILY,
  attrs=("block_size", "data_format"),
  linear=True,
  transpose=lambda ct, x, **p: [tfops.SpaceToDepth(rules.instantiate(ct), **p)],
  batching=rules.per_op(_fold_batching),
  spec=lambda st: st.Spec(
    _layout_calls(st, True),
    note="NHWC only: TF's CPU kernels reject NCHW (tested in "
    "tests/test_image_color.py against NHWC with transposes).",
  ),
)

SpaceToDepth = register_op(
  "SpaceToDepth",
  space_to_depth,
  family=FAMILY,
  attrs=("block_size", "data_format"),
  linear=True,
  transpose=lambda ct, x, **p: [tfops.DepthToSpace(rules.instantiate(ct), **p)],
  batching=rules.per_op(_fold_batching),
  spec=lambda st: st.Spec(
    _layout_calls(st, False),
    note="NHWC only: TF's CPU kernels reject NCHW (tested in "
    "tests/test_image_color.py against NHWC with transposes).",
  ),
)


# --------------------------------------------------------------------------
# ExtractImagePatches / ExtractVolumePatches
# --------------------------------------------------------------------------


def _axis_positions(size, k, stride, rate, padding, clamp=True):
  """(out, k) input positions read along one spatial axis (-1: padding), TF's
  windowed-output arithmetic. SAME pads ``max(total, 0) // 2`` before for images;
  Eigen's volume patches do not clamp: a negative total (a stride past the kernel)
  gives ``trunc(total / 2)``, i.e. the windows start inside the volume."""
  eff = (k - 1) * rate + 1
  if padding == "VALID":
    out = max(0, -(-(size - eff + 1) // stride))
    before = 0
  elif padding == "SAME":
    out = -(-size // stride)
    total = (out - 1) * stride + eff - size
    before = max(total, 0) // 2 if clamp else int(total / 2)
  else:
    raise ValueError(f"padding must be SAME or VALID, got {padding!r}")
  pos = np.arange(out)[:, None] * stride + np.arange(k)[None, :] * rate - before
  return np.where((pos >= 0) & (pos < size), pos, -1)


def _patch_sources(spatial, ksizes, strides, rates, padding):
  """For each patch element ``(o_1..o_d, k_1..k_d)`` the flat input pixel it reads
  (-1 for padding), shape ``outs + ks``. Three spatial dims: volume patches."""
  clamp = len(spatial) != 3
  per_axis = [
    _axis_positions(s, k, st, r, padding, clamp)
    for s, k, st, r in zip(spatial, ksizes, strides, rates)
  ]
  d = len(spatial)
  flat = np.zeros(
    tuple(p.shape[0] for p in per_axis) + tuple(p.shape[1] for p in per_axis), np.int64
  )
  bad = np.zeros(flat.shape, bool)
  for i, (p, size) in enumerate(zip(per_axis, spatial)):
    shape = [1] * (2 * d)
    shape[i], shape[d + i] = p.shape
    pi = p.reshape(shape)
    flat = flat * size + np.where(pi < 0, 0, pi)
    bad = bad | (pi < 0)
  return np.where(bad, -1, flat)


def _window_attrs(ksizes, strides, rates, ndim, name):
  for attr, v in (("ksizes", ksizes), ("strides", strides), ("rates", rates)):
    if v is None:
      continue
    if len(v) != ndim or v[0] != 1 or v[-1] != 1:
      raise ValueError(
        f"{name} only supports {attr} across space (a list of {ndim} "
        f"ints with 1 at both ends), got {list(v)}"
      )
    if any(int(x) < 1 for x in v):
      raise ValueError(f"{attr} must be positive, got {list(v)}")
  rates = rates if rates is not None else (1,) * ndim
  return (
    [int(v) for v in ksizes[1:-1]],
    [int(v) for v in strides[1:-1]],
    [int(v) for v in rates[1:-1]],
  )


def _extract(x, ksizes, strides, rates, padding, name):
  ks, ss, rs = _window_attrs(ksizes, strides, rates, x.ndim, name)
  n, spatial, c = x.shape[0], x.shape[1:-1], x.shape[-1]
  src = _patch_sources(spatial, ks, ss, rs, padding)
  outs = src.shape[: len(spatial)]
  flat = x.reshape((n, int(np.prod(spatial)), c))
  if flat.shape[1] == 0 or src.size == 0:
    return jnp.zeros((n,) + outs + (int(np.prod(ks)) * c,), x.dtype)
  vals = flat[:, np.maximum(src, 0).reshape(-1), :]
  vals = jnp.where((src.reshape(-1) >= 0)[None, :, None], vals, jnp.zeros((), x.dtype))
  return vals.reshape((n,) + outs + (int(np.prod(ks)) * c,))


def extract_image_patches(images, *, ksizes, strides, rates, padding):
  """TF ExtractImagePatches: patch depth ordered (row, col, channel); padding reads 0."""
  return _extract(images, ksizes, strides, rates, padding, "ExtractImagePatches")


def extract_volume_patches(x, *, ksizes, strides, padding):
  """TF ExtractVolumePatches: patch depth ordered (plane, row, col, channel)."""
  return _extract(x, ksizes, strides, None, padding, "ExtractVolumePatches")


def _patches_transpose(ct, x, *, ksizes, strides, padding, rates=None):
  """TF's gradient: ``tf.UnsortedSegmentSum`` of the cotangent's patch elements by
  their source pixel (padding ids -1 are dropped), laid back out as NHWC."""
  assert U(x)
  shape = rules.shape_of(x)
  n, spatial, c = shape[0], shape[1:-1], shape[-1]
  ks, ss, rs = _window_attrs(
    ksizes,
    strides,
    rates,
    len(shape),
    "ExtractImagePatches" if rates is not None else "ExtractVolumePatches",
  )
  src = _patch_sources(spatial, ks, ss, rs, padding).reshape(-1)
  ct = rules.instantiate(ct)
  # (N, outs..., K*C) -> (P, N, C) with P = prod(outs) * prod(ks): elements in src order.
  ct = rules.reshape(ct, (n, src.size, c))
  ct = rules.transpose(ct, (1, 0, 2))
  npix = int(np.prod(spatial))
  summed = tfops.UnsortedSegmentSum(ct, src.astype(np.int32), num_segments=npix)
  summed = rules.reshape(summed, tuple(spatial) + (n, c))
  d = len(spatial)
  return [rules.transpose(summed, (d,) + tuple(range(d)) + (d + 1,))]


_PATCH_DTYPES = (
  "float16",
  "bfloat16",
  "float32",
  "float64",
  "int8",
  "uint8",
  "int16",
  "uint16",
  "int32",
  "int64",
  "uint32",
  "uint64",
  "complex64",
  "complex128",
)
_VOLUME_DTYPES = (
  "float16",
  "bfloat16",
  "float32",
  "float64",
  "int8",
  "uint8",
  "int16",
  "uint16",
  "int32",
  "int64",
  "uint32",
  "uint64",
)


def _patch_calls(st, volume):
  @st.composite
  def draw_call(draw):
    d = 3 if volume else 2
    # N >= 1: TF's gradient fails on an empty batch (its segment sum gets [P, 0] data).
    n, c = draw(st.integers(1, 2)), draw(st.integers(1, 2))
    spatial = tuple(draw(st.integers(1, 4 if not volume else 3)) for _ in range(d))
    ks = [1] + [draw(st.integers(1, 3)) for _ in range(d)] + [1]
    ss = [1] + [draw(st.integers(1, 3)) for _ in range(d)] + [1]
    dtype = draw(st.sampled_from(_VOLUME_DTYPES if volume else _PATCH_DTYPES))
    call = dict(ksizes=ks, strides=ss, padding=draw(st.sampled_from(("SAME", "VALID"))))
    if volume:
      call["input"] = draw(_values(st, dtype, (n,) + spatial + (c,)))
    else:
      call["images"] = draw(_values(st, dtype, (n,) + spatial + (c,)))
      call["rates"] = [1] + [draw(st.integers(1, 2)) for _ in range(d)] + [1]
    return call

  return draw_call()


ExtractImagePatches = register_op(
  "ExtractImagePatches",
  extract_image_patches,
  family=FAMILY,
  attrs=("ksizes", "strides", "rates", "padding"),
  linear=True,
  transpose=_patches_transpose,
  batching=rules.per_op(_fold_batching),
  canonicalize=lambda p, *_: {
    **p,
    **{k: tuple(int(v) for v in p[k]) for k in ("ksizes", "strides", "rates")},
  },
  spec=lambda st: st.Spec(_patch_calls(st, False)),
)

ExtractVolumePatches = register_op(
  "ExtractVolumePatches",
  extract_volume_patches,
  family=FAMILY,
  attrs=("ksizes", "strides", "padding"),
  linear=True,
  transpose=_patches_transpose,
  batching=rules.per_op(_fold_batching),
  canonicalize=lambda p, *_: {
    **p,
    **{k: tuple(int(v) for v in p[k]) for k in ("ksizes", "strides")},
  },
  spec=lambda st: st.Spec(_patch_calls(st, True)),
)
