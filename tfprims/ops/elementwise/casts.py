"""Cast, with TF's ``Truncate`` and its x86 CPU results for float -> int casts of
NaN, ±inf and out-of-range values (docs/semantics/elementwise.md); ToBool;
StochasticCastToInt.

Cast keeps ``DstT`` and ``Truncate`` as params. It is differentiable only between
float/complex types (TF registers no gradient otherwise); its transpose casts
the cotangent back to the input's dtype.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax
from jax.interpreters import ad

from tfprims import rules
from tfprims.core import register_op, tfops
from tfprims.dtypes import canonical_dtype
from tfprims.ops.elementwise._common import EW
from tfprims.errors import import_tensorflow


def _kind(dtype) -> str:
  """numpy's dtype kind, with bfloat16 (kind 'V' in numpy) as 'f'."""
  dtype = np.dtype(dtype)
  return "f" if dtype.name == "bfloat16" else dtype.kind


_MANTISSA = {
  "float64": 52,
  "float32": 23,
  "float16": 10,
  "bfloat16": 7,
  "complex128": 52,
  "complex64": 23,
}


def _truncate_mantissa(x, dst):
  """TF's ``Truncate=True``: zero the input's low mantissa bits that ``dst``
  cannot hold (finite values only), so the conversion rounds toward zero.
  TF does this only for float32/float64 (and complex) inputs."""
  src = np.dtype(x.dtype)
  if src.name not in ("float32", "float64", "complex64", "complex128"):
    return x
  drop = _MANTISSA[src.name] - _MANTISSA.get(np.dtype(dst).name, _MANTISSA[src.name])
  if drop <= 0:
    return x
  if _kind(src) == "c":
    return lax.complex(_truncate_mantissa(jnp.real(x), dst), _truncate_mantissa(jnp.imag(x), dst))
  uint = np.uint64 if src.itemsize == 8 else np.uint32
  mask = np.array(~((1 << drop) - 1) & np.iinfo(uint).max, uint)
  bits = lax.bitcast_convert_type(x, uint) & mask
  return jnp.where(jnp.isfinite(x), lax.bitcast_convert_type(bits, src), x)


def _float_to_int(x, dst):
  """TF (x86 CPU) float -> int: truncate toward zero. NaN, ±inf and values out
  of range give the x86 "integer indefinite" value (INT_MIN) for 32/64-bit
  signed results; unsigned 32/64-bit results wrap values in (-2^(bits-1), 0) and
  give 2^(bits-1) for the other invalid ones (TF's uint64 result; for uint32 TF
  depends on the tensor's size there); 8/16-bit results are the int32 result
  saturated to the range (TF's vectorised path; its scalar path keeps the low
  bits, so TF's result depends on the tensor's size). See the semantics doc."""
  dst = np.dtype(dst)
  if x.dtype in (jnp.float16, jnp.bfloat16):
    x = x.astype(jnp.float32)
  t = jnp.trunc(x)
  nan = jnp.isnan(x)
  bits = 8 * dst.itemsize
  if _kind(dst) == "i" and bits >= 32:
    lo, hi = -(2.0 ** (bits - 1)), 2.0 ** (bits - 1)
    bad = nan | (t < lo) | (t >= hi)
    return jnp.where(bad, jnp.array(np.iinfo(dst).min, dst), lax.convert_element_type(t, dst))
  if _kind(dst) == "u" and bits >= 32:
    signed = np.dtype(f"int{bits}")
    ok = (t >= 0) & (t < 2.0**bits)
    wrap = (t < 0) & (t > -(2.0 ** (bits - 1)))
    safe_t = jnp.where(ok | wrap, t, jnp.zeros((), t.dtype))
    as_unsigned = lax.convert_element_type(safe_t, dst)
    wrapped = lax.convert_element_type(lax.convert_element_type(safe_t, signed), dst)
    invalid = jnp.array(1 << (bits - 1), dst)
    return jnp.where(ok, as_unsigned, jnp.where(wrap, wrapped, invalid))
  # 8/16-bit: the int32 result, saturated.
  bad = nan | (t < -(2.0**31)) | (t >= 2.0**31)
  i32 = jnp.where(
    bad, jnp.array(np.iinfo(np.int32).min, np.int32), lax.convert_element_type(t, np.int32)
  )
  info = np.iinfo(dst)
  return lax.convert_element_type(jnp.clip(i32, int(info.min), int(info.max)), dst)


def _cast(x, *, DstT, Truncate=False):
  dst = canonical_dtype(DstT)
  src = np.dtype(x.dtype)
  if src == dst:
    return x
  if _kind(src) == "c" and _kind(dst) != "c":
    x, src = jnp.real(x), np.dtype(jnp.real(x).dtype)  # TF: the real part (bool too)
  if dst == np.bool_:
    return x != jnp.zeros((), src)
  if _kind(src) == "f" and _kind(dst) in "iu":
    return _float_to_int(x, dst)
  if Truncate and _kind(src) in "fc" and _kind(dst) in "fc":
    x = _truncate_mantissa(x, dst)
  return lax.convert_element_type(x, dst)


def _cast_jvp(primals, tangents, *, DstT, Truncate):
  (x,), (t,) = primals, tangents
  y = tfops.Cast(x, DstT=DstT, Truncate=Truncate)
  if type(t) is ad.Zero or _kind(rules.dtype_of(x)) not in "fc" or _kind(y.dtype) not in "fc":
    return y, rules.zero_tangent(y)  # TF: no gradient unless both types are float/complex
  return y, tfops.Cast(t, DstT=DstT, Truncate=False)


def _cast_transpose(ct, x, *, DstT, Truncate):
  return [tfops.Cast(ct, DstT=x.aval.dtype, Truncate=False)]


def _cast_spec(st):
  @st.composite
  def draw(draw):
    src = draw(st.dtypes(st.ALL))
    dst = draw(st.dtypes(st.ALL))
    shape = draw(st.shapes())
    truncate = draw(st.booleans())
    if src.name == "float64" and truncate:
      truncate = False  # x64 off rounds float64 inputs before the cast sees them
    x = st.draw_array(draw, src, shape, ties=draw(st.integers(0, 3)) == 0)
    if st.kind(src) in "fc" and st.kind(dst) in "iu":
      info = np.iinfo(dst)
      # TF's result is well defined only when trunc(x) fits dst (or for NaN/inf/
      # out-of-range values converted to int32/int64/uint64); 64-bit results
      # must also fit the 32-bit canonical type when x64 is off.
      # (TF's x86 result: INT_MIN for int32/int64, 2^63 for uint64); 64-bit
      # results must also fit the 32-bit canonical type when x64 is off.
      defined = dst.name == "int32" or (
        dst.name in ("int64", "uint64") and jax.config.jax_enable_x64
      )
      if not defined or draw(st.booleans()):
        lo = int(info.min) if info.bits < 64 else -(2**31) + 1
        hi = int(info.max) if info.bits < 64 else 2**31 - 1
        if dst.name == "uint32":
          lo = -(2**31) + 1  # TF wraps negative values into uint32
        t = np.trunc(np.real(x).astype(np.float64))
        x = np.where((t >= lo) & (t <= hi), x, np.zeros((), src)).astype(src)
    return {"x": x, "DstT": dst, "Truncate": truncate}

  return draw()


Cast = register_op(
  "Cast",
  _cast,
  **EW,
  attrs=("DstT", "Truncate"),
  jvp=_cast_jvp,
  transpose=_cast_transpose,
  spec=lambda st: st.Spec(_cast_spec(st)),
)


# ---------------------------------------------------------------------------
# ToBool and StochasticCastToInt.


def _to_bool(x):
  """TF's truth value of a tensor: a scalar is ``x != 0`` (NaN is true); any other
  tensor is true when it has elements."""
  if jnp.ndim(x) == 0:
    return x if x.dtype == np.bool_ else x != jnp.zeros((), x.dtype)
  return jnp.asarray(x.size > 0)


def _to_bool_spec(st):
  @st.composite
  def draw(draw):
    if draw(st.booleans()):  # scalars: TF's kernel takes these dtypes
      dtype = draw(
        st.dtypes(("float32", "float64", "int8", "int16", "int32", "int64", "uint8", "bool"))
      )
      return {"input": st.draw_array(draw, dtype, (), ties=draw(st.booleans()))}
    dtype = draw(st.dtypes(st.ALL))
    return {"input": st.draw_array(draw, dtype, draw(st.shapes(min_rank=1)))}

  return draw()


ToBool = register_op(
  "ToBool",
  _to_bool,
  family="elementwise",
  jvp=rules.per_op(rules.no_grad_jvp),
  spec=lambda st: st.Spec(
    _to_bool_spec(st), skip={"jvp": "boolean output", "vjp": "boolean output"}
  ),
)


def _stochastic_cast_to_int(x, key, counter, alg, *, Tout):
  """Rounds down or up at random, up with probability frac(x) (TF's stateless
  StochasticCastToInt): NaN -> 0, values beyond Tout's range saturate. The
  uniforms are StatelessRandomUniformV2's for the same key and counter."""
  dst = np.dtype(Tout)
  u = tfops.StatelessRandomUniformV2(
    key, counter, alg, shape=tuple(jnp.shape(x)), dtype=np.dtype(x.dtype)
  )
  one = jnp.ones((), x.dtype)
  floor = jnp.floor(x)
  r = jnp.where(x < 0, jnp.floor(x + u), jnp.floor(x + (one - u)))
  r = jnp.where(floor == x, x, r)
  hi = jnp.asarray(float(np.iinfo(dst).max), x.dtype)
  lo = jnp.asarray(float(np.iinfo(dst).min), x.dtype)
  r = jnp.where(x >= hi, hi, jnp.where(x <= lo, lo, r))
  r = jnp.where(jnp.isnan(x), jnp.zeros((), x.dtype), r)
  if x.dtype in (jnp.float16, jnp.bfloat16):
    r = r.astype(jnp.float32)  # exact: |r| <= 2^31 fits, and float16 -> int is not direct
  return lax.convert_element_type(
    jnp.clip(r, float(np.iinfo(dst).min), float(np.iinfo(dst).max)), dst
  )


def tf_stochastic_cast_to_int(input, key, counter, alg, Tout):
  """TF's StochasticCastToInt (not in ``tf.raw_ops``), run eagerly: the spec's oracle."""
  tf = import_tensorflow()
  from tensorflow.python.eager import context, execute

  inputs = [tf.constant(v) for v in (input, key, counter, alg)]
  attrs = ("Tin", inputs[0].dtype.as_datatype_enum, "Tout", tf.as_dtype(Tout).as_datatype_enum)
  return execute.execute(
    b"StochasticCastToInt", 1, inputs=inputs, attrs=attrs, ctx=context.context()
  )[0]


def _stochastic_cast_spec(st):
  @st.composite
  def draw(draw):
    dtype = draw(st.dtypes(st.FLOATS))
    x = st.draw_array(draw, dtype, draw(st.shapes()), lo=-300.0, hi=300.0)
    if draw(st.booleans()):
      x = st.draw_array(draw, dtype, x.shape)  # NaN, ±inf, huge values
    return {
      "input": x,
      "key": draw(st.arrays(np.uint64, (1,), min_value=0, max_value=2**32 - 1)),
      "counter": draw(st.arrays(np.uint64, (2,), min_value=0, max_value=2**32 - 1)),
      "alg": np.asarray(draw(st.sampled_from([1, 3])), np.int32),  # Philox, auto
      "Tout": draw(st.dtypes(("int8", "int16", "int32"))),
    }

  return draw()


_RANDOM = (
  "random rounding: the uniforms are jax.random's (threefry), not TF's Philox; "
  "tests/test_special.py checks the rounding probabilities"
)

StochasticCastToInt = register_op(
  "StochasticCastToInt",
  _stochastic_cast_to_int,
  family="elementwise",
  attrs=("Tout",),
  jvp=rules.per_op(rules.no_grad_jvp),
  spec=lambda st: st.Spec(
    _stochastic_cast_spec(st),
    oracle=tf_stochastic_cast_to_int,
    skip={"values": _RANDOM, "jvp": "integer output", "vjp": "integer output"},
  ),
)
