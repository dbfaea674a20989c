"""Bitcast: ``tf.bitcast``, bit for bit.

The bytes of the input (little-endian; complex values as ``[real, imag]``)
reinterpreted as ``type``: equal sizes keep the shape, a narrower ``type`` adds a
last dimension, a wider one needs and removes it. No gradient (TF registers
none; the JVP is a symbolic zero). With x64 off, only ``int64 <-> uint64`` of the
pairs involving a narrowed 64-bit type converts; the others raise
``Int64OverflowError`` (docs/semantics/array.md).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from jax import lax
from jax.interpreters import ad

from tfprims import dtypes as tfdtypes, errors, rules
from tfprims.core import register_op, tfops
from tfprims.ops.array._common import FAMILY


# TF's allowed T/type (the quantized types aside, which tfprims does not represent).
_BITCAST_TYPES = (
  "bfloat16",
  "float16",
  "float32",
  "float64",
  "int64",
  "int32",
  "uint8",
  "uint16",
  "uint32",
  "uint64",
  "int8",
  "int16",
  "complex64",
  "complex128",
)
_WIDE_INTS = ("int64", "uint64")


def _bitcast_dtypes(T, type):  # TF attr names
  src, dst = jnp.dtype(T), jnp.dtype(type)
  for what, d in (("input dtype (T)", src), ("type", dst)):
    if d.name not in _BITCAST_TYPES:
      raise TypeError(
        f"Bitcast: {what} {d.name} is not one TF bitcasts; allowed: {', '.join(_BITCAST_TYPES)}"
      )
  return src, dst


def _bitcast_shape(shape: tuple, src, dst) -> tuple:
  """TF's rule: equal sizes keep the shape; a narrower ``type`` adds a last dim of
  size ``src/dst``; a wider one needs (and removes) a last dim of size ``dst/src``."""
  s, d = src.itemsize, dst.itemsize
  if s == d:
    return shape
  if s > d:
    return shape + (s // d,)
  if not shape or shape[-1] != d // s:
    raise ValueError(
      f"Bitcast: cannot bitcast {src.name} to {dst.name}: the input's last "
      f"dimension must be {d // s} (sizeof({dst.name}) / sizeof({src.name})), "
      f"got shape {shape}"
    )
  return shape[:-1]


def _to_bytes(x):
  """uint8 view of ``x`` with a trailing dim of its item size (complex as real, imag)."""
  if jnp.iscomplexobj(x):
    parts = jnp.stack([jnp.real(x), jnp.imag(x)], axis=-1)
    b = lax.bitcast_convert_type(parts, jnp.uint8)
    return b.reshape(b.shape[:-2] + (b.shape[-2] * b.shape[-1],))
  b = lax.bitcast_convert_type(x, jnp.uint8)
  return b[..., None] if x.dtype.itemsize == 1 else b


def _from_bytes(b, dst):
  """Inverse of ``_to_bytes``: uint8 ``[..., sizeof(dst)]`` -> ``dst[...]``."""
  if jnp.issubdtype(dst, jnp.complexfloating):
    part = jnp.finfo(dst).dtype
    b = b.reshape(b.shape[:-1] + (2, part.itemsize))
    parts = lax.bitcast_convert_type(b, part)
    return lax.complex(parts[..., 0], parts[..., 1])
  if dst.itemsize == 1:
    return lax.bitcast_convert_type(b[..., 0], dst)
  return lax.bitcast_convert_type(b, dst)


def _bitcast(input, *, T, type):  # TF names
  """tf.bitcast: the bytes of ``input`` reinterpreted as ``type`` (little-endian,
  complex as ``[real, imag]``), the last dim added or removed when sizes differ."""
  src, dst = _bitcast_dtypes(T, type)
  if jnp.dtype(input.dtype) != tfdtypes.canonical_dtype(src):
    raise TypeError(f"Bitcast: input has dtype {input.dtype}, but T is {src.name}")
  out_shape = _bitcast_shape(tuple(input.shape), src, dst)
  if tfdtypes.canonical_dtype(src) != src or tfdtypes.canonical_dtype(dst) != dst:
    # x64 off: 64-bit values are held in 32 bits.
    if src.name in _WIDE_INTS and dst.name in _WIDE_INTS:
      return lax.bitcast_convert_type(input, tfdtypes.canonical_dtype(dst))
    raise errors.Int64OverflowError(
      f"Bitcast from {src.name} to {dst.name} needs x64: with x64 off JAX holds "
      f"{src.name if tfdtypes.canonical_dtype(src) != src else dst.name} values in 32 bits, "
      "whose bytes are not TF's; enable it with jax.config.update('jax_enable_x64', True)"
    )
  if src == dst:
    return input
  if src.kind != "c" and dst.kind != "c":
    return lax.bitcast_convert_type(input, dst)
  b = _to_bytes(input)
  return _from_bytes(b.reshape(out_shape + (dst.itemsize,)), dst)


def _bitcast_jvp(primals, tangents, **params):
  out = tfops.Bitcast(*primals, **params)  # TF: not differentiable
  return out, ad.Zero(jax.typeof(out).to_tangent_aval())


def _bitcast_batching(args, dims, *, T, type):
  (x,), (d,) = args, dims
  if jnp.dtype(T).itemsize != jnp.dtype(type).itemsize and d == x.ndim - 1:
    x, d = rules.to_front(x, d), 0  # the last dim is the one added or removed
  return tfops.Bitcast(x, T=T, type=type), d


def _bitcast_calls(st):
  @st.composite
  def draw(draw):
    src, dst = draw(st.dtypes(_BITCAST_TYPES)), draw(st.dtypes(_BITCAST_TYPES))
    shape = tuple(draw(st.shapes()))
    if src.itemsize < dst.itemsize:
      shape = shape[:3] + (dst.itemsize // src.itemsize,)
    return {"input": draw(st.arrays(src, shape)), "type": dst}

  return draw()


Bitcast = register_op(
  "Bitcast",
  _bitcast,
  family=FAMILY,
  attrs=("T", "type"),
  jvp=_bitcast_jvp,
  batching=_bitcast_batching,
  spec=lambda st: st.Spec(_bitcast_calls(st)),
)
