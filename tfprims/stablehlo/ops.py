"""StableHLO operations without regions, as JAX operations: elementwise arithmetic,
comparisons, conversions, shapes and slices, gathers, dot products and
convolutions.

Integer and boolean values known when the module is read (constants, static
dimensions and what is computed from them: shape arithmetic) are computed with
numpy, so a module's shape computations stay static; everything else becomes the
``lax`` operation StableHLO was lowered from (JAX emits each of these operations
for exactly one lax primitive), which JAX differentiates and batches natively.
"""

from __future__ import annotations

import numpy as np
from jax import lax
import jax.numpy as jnp

from tfprims import dtypes
from tfprims.stablehlo import reader
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
)


def _exact(values) -> bool:
  """Known integer/boolean values: numpy computes them exactly as XLA would."""
  return all(is_known(v) and np.asarray(v).dtype.kind in "biu" for v in values)


# --- elementwise -----------------------------------------------------------------------


def _np_div(a, b):
  q = np.abs(a) // np.abs(b)  # C division: towards zero
  return np.where((a < 0) != (b < 0), -q, q).astype(a.dtype)


def _np_rem(a, b):
  return (a - _np_div(a, b) * b).astype(a.dtype)


def _int_or_float_pow(x, y):
  if jnp.issubdtype(x.dtype, jnp.integer):
    return jnp.power(x, y)
  return lax.pow(x, y)


_UNARY = {
  "negate": (lax.neg, np.negative),
  "abs": (lax.abs, np.abs),
  "not": (lax.bitwise_not, np.invert),
  "sign": (lax.sign, np.sign),
  "exponential": (lax.exp, None),
  "exponential_minus_one": (lax.expm1, None),
  "log": (lax.log, None),
  "log_plus_one": (lax.log1p, None),
  "logistic": (lax.logistic, None),
  "sqrt": (lax.sqrt, None),
  "rsqrt": (lax.rsqrt, None),
  "cbrt": (lax.cbrt, None),
  "tanh": (lax.tanh, None),
  "sine": (lax.sin, None),
  "cosine": (lax.cos, None),
  "tan": (lax.tan, None),
  "floor": (lax.floor, None),
  "ceil": (lax.ceil, None),
  "is_finite": (lax.is_finite, None),
  "round_nearest_even": (lambda x: lax.round(x, lax.RoundingMethod.TO_NEAREST_EVEN), None),
  "round_nearest_afz": (lambda x: lax.round(x, lax.RoundingMethod.AWAY_FROM_ZERO), None),
  "real": (lax.real, None),
  "imag": (lax.imag, None),
  "count_leading_zeros": (lax.clz, None),
  "popcnt": (lax.population_count, None),
}

_BINARY = {
  "add": (lax.add, np.add),
  "subtract": (lax.sub, np.subtract),
  "multiply": (lax.mul, np.multiply),
  "maximum": (lax.max, np.maximum),
  "minimum": (lax.min, np.minimum),
  "and": (lax.bitwise_and, np.bitwise_and),
  "or": (lax.bitwise_or, np.bitwise_or),
  "xor": (lax.bitwise_xor, np.bitwise_xor),
  "divide": (lax.div, None),
  "remainder": (lax.rem, None),
  "power": (_int_or_float_pow, None),
  "atan2": (lax.atan2, None),
  "shift_left": (lax.shift_left, None),
  "shift_right_arithmetic": (lax.shift_right_arithmetic, None),
  "shift_right_logical": (lax.shift_right_logical, None),
  "complex": (lax.complex, None),
}


def _elementwise(fn, np_fn, name):
  def run(op: Op, operands):
    if np_fn is not None and _exact(operands):
      with np.errstate(all="ignore"):
        return [np.asarray(np_fn(*operands)).astype(op.result_type.dtype)]
    if name in ("divide", "remainder") and _exact(operands) and np.all(operands[1] != 0):
      return [(_np_div if name == "divide" else _np_rem)(*operands)]
    return [fn(*[as_jax(x) for x in operands])]

  return run


for _name, (_fn, _np_fn) in {**_UNARY, **_BINARY}.items():
  handler(f"stablehlo.{_name}")(_elementwise(_fn, _np_fn, _name))


def total_order_key(x):
  """Floats as signed integers ordered like StableHLO's TOTALORDER comparison
  (-NaN < -inf < ... < -0 < +0 < ... < inf < NaN)."""
  if not jnp.issubdtype(x.dtype, jnp.floating):
    return x
  int_type = {1: jnp.int8, 2: jnp.int16, 4: jnp.int32, 8: jnp.int64}[x.dtype.itemsize]
  bits = lax.bitcast_convert_type(x, int_type)
  return jnp.where(bits < 0, bits ^ jnp.iinfo(int_type).max, bits)


_COMPARE = {
  "EQ": (lax.eq, np.equal),
  "NE": (lax.ne, np.not_equal),
  "LT": (lax.lt, np.less),
  "LE": (lax.le, np.less_equal),
  "GT": (lax.gt, np.greater),
  "GE": (lax.ge, np.greater_equal),
}


@handler("stablehlo.compare")
def _compare(op: Op, operands):
  fn, np_fn = _COMPARE[enum_name(op.attr("comparison_direction"))]
  if _exact(operands):
    return [np_fn(*operands)]
  a, b = (as_jax(x) for x in operands)
  kind = op.attr("compare_type")
  if kind is not None and enum_name(kind) == "TOTALORDER":
    a, b = total_order_key(a), total_order_key(b)
  return [fn(a, b)]


@handler("stablehlo.select")
def _select(op: Op, operands):
  if _exact(operands):
    return [np.where(*operands)]
  pred, on_true, on_false = (as_jax(x) for x in operands)
  return [jnp.where(pred, on_true, on_false)]


@handler("stablehlo.clamp")
def _clamp(op: Op, operands):
  if _exact(operands):
    low, x, high = operands
    return [np.minimum(np.maximum(x, low), high)]
  return [lax.clamp(*[as_jax(x) for x in operands])]


@handler("stablehlo.convert")
def _convert(op: Op, operands):
  (x,), dtype = operands, op.result_type.dtype
  if _exact(operands) and dtype.kind in "biuf":
    return [np.asarray(x).astype(dtype)]
  return [lax.convert_element_type(as_jax(x), dtypes.canonical_dtype(dtype))]


@handler("stablehlo.bitcast_convert")
def _bitcast(op: Op, operands):
  return [
    lax.bitcast_convert_type(as_jax(operands[0]), dtypes.canonical_dtype(op.result_type.dtype))
  ]


@handler("stablehlo.reduce_precision")
def _reduce_precision(op: Op, operands):
  return [
    lax.reduce_precision(
      as_jax(operands[0]), integer(op.attr("exponent_bits")), integer(op.attr("mantissa_bits"))
    )
  ]


# --- constants, shapes, slices ---------------------------------------------------------


@handler("stablehlo.constant")
def _constant(op: Op, operands):
  try:
    value = op.attr("value")
  except TypeError:  # the bindings cannot represent some element types (complex)
    value = str(op.op).split("stablehlo.constant", 1)[1].strip()
  return [constant_value(value, op.result_type)]


def _static_shape(op: Op, shape_operand=None) -> tuple:
  if shape_operand is not None:
    if not is_known(shape_operand):
      raise op.error("its output shape depends on values computed at run time")
    return tuple(int(d) for d in np.asarray(shape_operand))
  t = op.result_type
  if not t.static:
    raise op.error(f"its result type {t.shape} is not static")
  return t.shape


@handler("stablehlo.iota", "stablehlo.dynamic_iota")
def _iota(op: Op, operands):
  shape = _static_shape(op, operands[0] if operands else None)
  dim = integer(op.attr("iota_dimension"))
  index = np.arange(shape[dim]).reshape([-1 if i == dim else 1 for i in range(len(shape))])
  return [np.broadcast_to(index, shape).astype(op.result_type.dtype)]


def _broadcast(op: Op, x, shape):
  dims = ints(op.attr("broadcast_dimensions"))
  if is_known(x):
    x = np.asarray(x)
    expanded = [1] * len(shape)
    for d, size in zip(dims, x.shape):
      expanded[d] = size
    return np.broadcast_to(x.reshape(expanded), shape).copy()
  return lax.broadcast_in_dim(as_jax(x), shape, dims)


@handler("stablehlo.broadcast_in_dim")
def _broadcast_in_dim(op: Op, operands):
  return [_broadcast(op, operands[0], _static_shape(op))]


@handler("stablehlo.dynamic_broadcast_in_dim")
def _dynamic_broadcast_in_dim(op: Op, operands):
  return [_broadcast(op, operands[0], _static_shape(op, operands[1]))]


def _reshape(op: Op, x, shape):
  if is_known(x):
    return np.reshape(x, shape)
  return lax.reshape(as_jax(x), shape)


@handler("stablehlo.reshape")
def _reshape_op(op: Op, operands):
  return [_reshape(op, operands[0], _static_shape(op))]


@handler("stablehlo.dynamic_reshape")
def _dynamic_reshape(op: Op, operands):
  return [_reshape(op, operands[0], _static_shape(op, operands[1]))]


@handler("stablehlo.get_dimension_size")
def _dimension_size(op: Op, operands):
  return [np.array(operands[0].shape[integer(op.attr("dimension"))], np.int32)]


@handler("stablehlo.transpose")
def _transpose(op: Op, operands):
  perm = ints(op.attr("permutation"))
  x = operands[0]
  return [np.transpose(x, perm) if is_known(x) else lax.transpose(as_jax(x), perm)]


@handler("stablehlo.slice")
def _slice(op: Op, operands):
  x = operands[0]
  start, limit = ints(op.attr("start_indices")), ints(op.attr("limit_indices"))
  strides = ints(op.attr("strides")) or (1,) * len(start)
  if is_known(x):
    return [np.asarray(x)[tuple(slice(a, b, s) for a, b, s in zip(start, limit, strides))]]
  return [lax.slice(as_jax(x), start, limit, strides)]


def _known_ints(op: Op, value, what: str) -> tuple:
  if not is_known(value):
    raise op.error(f"its {what} depend on values computed at run time")
  return tuple(int(v) for v in np.asarray(value).reshape(-1))


@handler("stablehlo.real_dynamic_slice")
def _real_dynamic_slice(op: Op, operands):
  x, start, limit, strides = operands
  start, limit = _known_ints(op, start, "bounds"), _known_ints(op, limit, "bounds")
  strides = _known_ints(op, strides, "strides")
  if is_known(x):
    return [np.asarray(x)[tuple(slice(a, b, c) for a, b, c in zip(start, limit, strides))]]
  return [lax.slice(as_jax(x), start, limit, strides)]


@handler("stablehlo.dynamic_slice")
def _dynamic_slice(op: Op, operands):
  x, *starts = operands
  # StableHLO clamps the starts into range; lax's default would first wrap negatives
  return [
    lax.dynamic_slice(
      as_jax(x),
      [as_jax(s) for s in starts],
      ints(op.attr("slice_sizes")),
      allow_negative_indices=False,
    )
  ]


@handler("stablehlo.dynamic_update_slice")
def _dynamic_update_slice(op: Op, operands):
  x, update, *starts = operands
  return [
    lax.dynamic_update_slice(
      as_jax(x),
      as_jax(update, np.asarray(x).dtype if is_known(x) else x.dtype),
      [as_jax(s) for s in starts],
      allow_negative_indices=False,
    )
  ]


@handler("stablehlo.concatenate")
def _concatenate(op: Op, operands):
  dim = integer(op.attr("dimension"))
  if all(is_known(x) for x in operands):
    return [np.concatenate(operands, axis=dim)]
  return [lax.concatenate([as_jax(x) for x in operands], dim)]


@handler("stablehlo.pad")
def _pad(op: Op, operands):
  x, value = operands
  config = list(
    zip(
      ints(op.attr("edge_padding_low")),
      ints(op.attr("edge_padding_high")),
      ints(op.attr("interior_padding")),
    )
  )
  x = as_jax(x)
  return [lax.pad(x, as_jax(value, x.dtype), config)]


@handler("stablehlo.dynamic_pad")
def _dynamic_pad(op: Op, operands):
  x, value, low, high, interior = operands
  config = list(zip(*(_known_ints(op, v, "paddings") for v in (low, high, interior))))
  x = as_jax(x)
  return [lax.pad(x, as_jax(value, x.dtype), config)]


@handler("stablehlo.reverse")
def _reverse(op: Op, operands):
  return [lax.rev(as_jax(operands[0]), ints(op.attr("dimensions")))]


@handler("stablehlo.optimization_barrier")
def _barrier(op: Op, operands):
  return list(lax.optimization_barrier(tuple(as_jax(x) for x in operands)))


# --- gather ----------------------------------------------------------------------------


def index_vector_last(indices, index_vector_dim: int):
  """StableHLO's start indices with the index vector as the last dimension (lax's
  convention); ``index_vector_dim == rank`` means vectors of one index."""
  if index_vector_dim == indices.ndim:
    return lax.expand_dims(indices, (indices.ndim,))
  if index_vector_dim != indices.ndim - 1:
    return jnp.moveaxis(indices, index_vector_dim, -1)
  return indices


@handler("stablehlo.gather", "stablehlo.dynamic_gather")
def _gather(op: Op, operands):
  x, indices = (as_jax(v) for v in operands[:2])
  slice_sizes = (
    _known_ints(op, operands[2], "slice sizes")
    if len(operands) == 3
    else ints(op.attr("slice_sizes"))
  )
  dn = hlo.GatherDimensionNumbers(op.attr("dimension_numbers"))
  if dn.index_vector_dim != indices.ndim - 1 and dn.start_indices_batching_dims:
    raise op.error("batching dims with an index vector dimension that is not last")
  indices = index_vector_last(indices, dn.index_vector_dim)
  numbers = lax.GatherDimensionNumbers(
    offset_dims=tuple(dn.offset_dims),
    collapsed_slice_dims=tuple(dn.collapsed_slice_dims),
    start_index_map=tuple(dn.start_index_map),
    operand_batching_dims=tuple(dn.operand_batching_dims),
    start_indices_batching_dims=tuple(dn.start_indices_batching_dims),
  )
  sorted_ = op.attr("indices_are_sorted")
  # StableHLO clamps the start indices into range: lax's CLIP mode.
  return [
    lax.gather(
      x,
      indices,
      numbers,
      slice_sizes,
      indices_are_sorted=bool(sorted_ is not None and ir.BoolAttr(sorted_).value),
      mode=lax.GatherScatterMode.CLIP,
    )
  ]


# --- dot products and convolutions -----------------------------------------------------


def precision(op: Op):
  attr = op.attr("precision_config")
  if attr is None:
    return None
  names = [enum_name(a) for a in ir.ArrayAttr(attr)]
  return tuple(lax.Precision[n] for n in names) if names else None


@handler("stablehlo.dot_general")
def _dot_general(op: Op, operands):
  a, b = (as_jax(x) for x in operands)
  dn = hlo.DotDimensionNumbers(op.attr("dot_dimension_numbers"))
  numbers = (
    (tuple(dn.lhs_contracting_dimensions), tuple(dn.rhs_contracting_dimensions)),
    (tuple(dn.lhs_batching_dimensions), tuple(dn.rhs_batching_dimensions)),
  )
  return [
    lax.dot_general(
      a,
      b,
      numbers,
      precision=precision(op),
      preferred_element_type=dtypes.canonical_dtype(op.result_type.dtype),
    )
  ]


@handler("stablehlo.convolution")
def _convolution(op: Op, operands):
  lhs, rhs = (as_jax(x) for x in operands)
  dn = hlo.ConvDimensionNumbers(op.attr("dimension_numbers"))
  spatial = len(dn.input_spatial_dimensions)
  numbers = lax.ConvDimensionNumbers(
    lhs_spec=(dn.input_batch_dimension, dn.input_feature_dimension, *dn.input_spatial_dimensions),
    rhs_spec=(
      dn.kernel_output_feature_dimension,
      dn.kernel_input_feature_dimension,
      *dn.kernel_spatial_dimensions,
    ),
    out_spec=(
      dn.output_batch_dimension,
      dn.output_feature_dimension,
      *dn.output_spatial_dimensions,
    ),
  )
  reversal = op.attr("window_reversal")
  if reversal is not None:
    flipped = [d for d, r in zip(dn.kernel_spatial_dimensions, reader.bools(reversal)) if r]
    rhs = lax.rev(rhs, flipped) if flipped else rhs
  padding = op.attr("padding")
  pads = (
    np.asarray(constant_value(padding, reader.tensor_type(padding.type)))
    if padding is not None
    else np.zeros((spatial, 2), int)
  )
  groups = op.attr("feature_group_count")
  batch_groups = op.attr("batch_group_count")
  return [
    lax.conv_general_dilated(
      lhs,
      rhs,
      ints(op.attr("window_strides")) or (1,) * spatial,
      [tuple(int(p) for p in row) for row in pads],
      lhs_dilation=ints(op.attr("lhs_dilation")) or None,
      rhs_dilation=ints(op.attr("rhs_dilation")) or None,
      dimension_numbers=numbers,
      feature_group_count=integer(groups) if groups is not None else 1,
      batch_group_count=integer(batch_groups) if batch_groups is not None else 1,
      precision=precision(op),
      preferred_element_type=dtypes.canonical_dtype(op.result_type.dtype),
    )
  ]


# --- random bits and FFT ---------------------------------------------------------------


@handler("stablehlo.rng_bit_generator")
def _rng_bit_generator(op: Op, operands):
  return rng_bit_generator(op, operands[0], op.result_types[1].shape)


def rng_bit_generator(op: Op, key, shape):
  """``lax.rng_bit_generator`` of ``key`` (the op's ``rng_algorithm``), its bits of
  ``shape`` (also the old ``stablehlo.dynamic_rng_bit_generator`` custom call's, whose
  shape is an operand)."""
  algorithm = {
    "DEFAULT": lax.RandomAlgorithm.RNG_DEFAULT,
    "THREE_FRY": lax.RandomAlgorithm.RNG_THREE_FRY,
    "PHILOX": lax.RandomAlgorithm.RNG_PHILOX,
  }[enum_name(op.attr("rng_algorithm"))]
  operands = [key]
  state_type, out = op.result_types
  state = as_jax(operands[0])
  if state.dtype != np.dtype(state_type.dtype):
    # A 64-bit state with x64 off: JAX's module bitcasts its uint32[4] key to
    # uint64[2], which the reader keeps as the uint32 pairs (shape (2, 2)); JAX's
    # rng_bit_generator takes the uint32[4] key itself and bitcasts it the same way.
    state = state.reshape(-1)
  state, bits = lax.rng_bit_generator(
    state, tuple(shape), dtypes.canonical_dtype(out.dtype), algorithm
  )
  return [state.reshape(np.shape(operands[0])), bits]


@handler("stablehlo.fft")
def _fft(op: Op, operands):
  kind = lax.FftType[enum_name(op.attr("fft_type"))]
  return [lax.fft(as_jax(operands[0]), kind, ints(op.attr("fft_length")))]


@handler("stablehlo.triangular_solve")
def _triangular_solve(op: Op, operands):
  """``lax.linalg.triangular_solve`` (JAX emits the operation itself for the dtypes
  LAPACK lacks, bfloat16 and float16; the same operation again, so the same result,
  and JAX's derivatives)."""
  a, b = (as_jax(x) for x in operands)
  flag = lambda name: bool(ir.BoolAttr(op.attr(name)).value)
  transpose = enum_name(op.attr("transpose_a"))
  return [
    lax.linalg.triangular_solve(
      a,
      b,
      left_side=flag("left_side"),
      lower=flag("lower"),
      transpose_a=transpose in ("TRANSPOSE", "ADJOINT"),
      conjugate_a=transpose == "ADJOINT",
      unit_diagonal=flag("unit_diagonal"),
    )
  ]
