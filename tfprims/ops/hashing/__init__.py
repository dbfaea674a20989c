"""Integer hashing bit-exact with TF: ``AsString`` of an integer tensor feeding
``StringToHashBucketFast`` / ``StringToHashBucketStrong`` / ``StringToHashBucket``
(Keras ``Hashing`` on integer features, ``tf.strings.to_hash_bucket_fast(
tf.strings.as_string(x), n)``).

JAX has no strings, but the decimal form of an integer needs only its digits:

* ``AsString`` of an integer tensor yields a :class:`DecimalStrings` (a
  :class:`tfprims.interpreter.LazyValue`): the integers, kept. Only the three hash ops
  read it; any other consumer is refused naming both nodes. Its attrs: ``precision``,
  ``scientific`` and ``shortest`` are refused (TF rejects them for integers too),
  ``width`` > -1 is refused (not supported), ``fill`` may be printf's flags ``""``,
  ``"-"``, ``"0"``, ``"#"`` (no effect without a width) or ``"+"``, ``" "`` (they lead
  non-negative values of signed types). Other dtypes (floats, bool, complex) are an
  unsupported op, reported at conversion (the hook's ``refuses``).
* Each hash node binds one primitive on the integers with ``source=decimal``
  (``tf.StringToHashBucketFast[num_buckets=16 positive_prefix= source=decimal]``): it
  writes each element's decimal bytes (20 digits extracted by long division on 16-bit
  limbs, the sign, the length) and hashes them as TF's kernels do:
  ``StringToHashBucketFast``: ``Fingerprint64`` (farmhash ``farmhashna::Hash64``);
  ``StringToHashBucketStrong``: SipHash-2-4 keyed by the ``key`` attr's two words
  (``StrongKeyedHash``); ``StringToHashBucket``: TF's ``Hash64`` (MurmurHash64A, seed
  ``0xDECAFCAFFE``); then the remainder by ``num_buckets``.

All 64-bit arithmetic runs on uint32 word pairs (:mod:`tfprims.ops.hashing.u64`), so
x64 off works: a TF int64 input then arrives narrowed to int32 (its values must fit, as
tfprims' x64 policy checks), and is sign-extended, which gives the same decimal
string; the bucket (TF's int64) is int32, so ``num_buckets`` may be at most 2^31.
With x64 on the whole int64/uint64 range is exact. No gradient (TF registers none).
String constants stay :class:`tfprims.interpreter.StringConstant` (not hashed).
:mod:`tfprims.ops.hashing.crosses` holds the feature-cross hashing (FingerprintCat64)
that the sparse and ragged cross ops share.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from tfprims import dtypes as tf_dtypes
from tfprims import errors, interpreter, rules
from tfprims.core import register_op, get_op, structural
from tfprims.ops.hashing import _common, u64
from tfprims.errors import import_tensorflow

FAMILY = "hashing"
HASH_OPS = ("StringToHashBucketFast", "StringToHashBucketStrong", "StringToHashBucket")
_FILL_FLAGS = ("", "-", "0", "#", "+", " ")
_NO_GRAD = "integer output: not differentiable (TF registers no gradient)"


@dataclasses.dataclass(frozen=True)
class DecimalStrings(interpreter.LazyValue):
  """``AsString`` of an integer tensor: the integers (``ints``), read only by the
  string-hash ops as their decimal strings (``positive_prefix``: printf's ``+`` or
  `` `` flag, leading non-negative values of signed types)."""

  ints: Any = None
  positive_prefix: str = ""


# --- AsString ----------------------------------------------------------------------------------


def _refuse(node, message):
  raise errors.OpError(node.op, node.name, message)


@structural(
  "AsString",
  family=FAMILY,
  doc="The decimal strings of an integer tensor, kept as the integers "
  "(DecimalStrings): only the string-hash ops read them.",
)
def _as_string(ctx, node, inputs):
  (x,) = inputs
  dtype = getattr(x, "dtype", None)
  if isinstance(x, interpreter.LazyValue) or dtype is None or np.dtype(dtype).kind not in "iu":
    _refuse(
      node,
      f"AsString of {np.dtype(dtype) if dtype is not None else 'this value'}: "
      "tfprims keeps only the decimal strings of integer tensors (for the "
      f"string-hash ops {', '.join(HASH_OPS)}); strings have no JAX "
      "representation",
    )
  for attr, default in (("precision", -1), ("scientific", False), ("shortest", False)):
    if node.attr(attr, default) != default:
      _refuse(
        node,
        f"AsString's {attr}={node.attr(attr)!r} applies to floats only "
        "(TF rejects it for integers)",
      )
  if node.attr("width", -1) != -1:
    _refuse(
      node,
      f"AsString's width={node.attr('width')} is not supported (only the default -1: no padding)",
    )
  fill = node.attr("fill", "")
  fill = fill.decode() if isinstance(fill, bytes) else fill
  if fill not in _FILL_FLAGS:
    _refuse(
      node,
      f"AsString's fill={fill!r} is not one TF accepts without a width (supported: {_FILL_FLAGS})",
    )
  return [
    DecimalStrings(
      node=node.name,
      op=node.op,
      readers=HASH_OPS,
      what="the decimal strings of integers",
      ints=x,
      positive_prefix=fill if fill in ("+", " ") else "",
    )
  ]


def _refuses(node):
  """Why an AsString node does not convert (None: it does): AsString of anything but
  integers is an unsupported op, found before tracing (check_supported, op reports)."""
  dtype = tf_dtypes.from_tf(node.attr("T"))
  if dtype is not None and dtype.kind in "iu":
    return None
  return (
    f"AsString of {dtype.name if dtype is not None else node.attr('T')}: only the "
    "decimal strings of integer tensors convert (for the string-hash ops)"
  )


_as_string.refuses = _refuses


# --- the hash ops ------------------------------------------------------------------------------


def _check_params(num_buckets, source, positive_prefix):
  if source != "decimal":
    raise ValueError(f"source={source!r}: only 'decimal' (AsString of integers) is computed")
  if positive_prefix not in ("", "+", " "):
    raise ValueError(f"positive_prefix={positive_prefix!r}: only '', '+' or ' '")
  if not 1 <= num_buckets <= (1 << 63) - 1:
    raise ValueError(f"num_buckets must be in [1, 2^63 - 1], got {num_buckets}")
  if not tf_dtypes.x64_enabled() and num_buckets > 1 << 31:
    raise errors.Int64OverflowError(
      f"num_buckets={num_buckets} > 2^31: the bucket (TF's int64) is int32 with "
      "jax_enable_x64 off; enable x64 for more buckets"
    )


def _to_index(pair):
  """A bucket (a pair below 2^63) as TF's int64: int32 with x64 off (below 2^31 there)."""
  hi, lo = pair
  out = tf_dtypes.canonical_dtype(np.dtype(np.int64))
  if out.itemsize == 8:
    return (hi.astype(out) << 32) | lo.astype(out)
  return lax.bitcast_convert_type(lo, jnp.int32)


def _bucket_impl(hash_rows):
  def impl(input, *, num_buckets, source, positive_prefix, **hash_params):
    _check_params(num_buckets, source, positive_prefix)
    if np.dtype(input.dtype).kind not in "iu":
      raise TypeError(f"the hashed decimal strings come from integers, got {input.dtype}")
    rows, lengths = _common.decimal_bytes(input, positive_prefix)
    return _to_index(u64.mod(hash_rows(rows, lengths, **hash_params), num_buckets))

  return impl


def _fast_impl(input, *, num_buckets, source, positive_prefix):
  """``Fingerprint64`` (farmhash) of each integer's decimal string, modulo num_buckets."""
  return _bucket_impl(lambda b, n: _common.fingerprint64(b, n))(
    input, num_buckets=num_buckets, source=source, positive_prefix=positive_prefix
  )


def _strong_impl(input, *, num_buckets, key, source, positive_prefix):
  """SipHash-2-4 keyed by ``key`` of each integer's decimal string, modulo num_buckets."""
  key = tuple(int(k) & u64.MASK64 for k in key)
  if len(key) != 2:
    raise ValueError(f"key must have 2 elements, got {len(key)}")
  return _bucket_impl(lambda b, n: _common.siphash(b, n, key))(
    input, num_buckets=num_buckets, source=source, positive_prefix=positive_prefix
  )


def _legacy_impl(input, *, num_buckets, source, positive_prefix):
  """TF's ``Hash64`` of each integer's decimal string, modulo num_buckets."""
  return _bucket_impl(lambda b, n: _common.hash64(b, n))(
    input, num_buckets=num_buckets, source=source, positive_prefix=positive_prefix
  )


def _params(node, value: DecimalStrings) -> dict:
  params = dict(
    num_buckets=int(node.attr("num_buckets")),
    source="decimal",
    positive_prefix=value.positive_prefix,
  )
  if node.op == "StringToHashBucketStrong":
    params["key"] = tuple(int(k) for k in node.attr("key"))
  return params


def _hash_interpret(ctx, node, inputs):
  """The node on the integers its ``AsString`` input kept (one primitive)."""
  (value,) = inputs
  if not isinstance(value, DecimalStrings):
    raise errors.UnsupportedInputError(
      f"{node.op} node '{node.name}' hashes a string tensor tfprims cannot represent: "
      "only the decimal strings of integers (AsString of an integer tensor) are hashed"
    )
  op = get_op(node.op)
  params = _params(node, value)
  try:
    _check_params(**{k: params[k] for k in ("num_buckets", "source", "positive_prefix")})
  except errors.Int64OverflowError as e:
    raise errors.Int64OverflowError(f"{node.op} node '{node.name}': {e}") from None
  if ctx.node_scopes:
    with jax.named_scope(node.name):
      return [op.apply([value.ints], params)]
  return [op.apply([value.ints], params)]


# --- specs -------------------------------------------------------------------------------------

_INT_DTYPES = ("int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64")


def _bounds(dtype: np.dtype) -> tuple[int, int]:
  """The drawn range: the dtype's, 64-bit ones within 32 bits with x64 off (narrowed)."""
  if dtype.itemsize == 8 and not tf_dtypes.x64_enabled():
    dtype = np.dtype(np.int32 if dtype.kind == "i" else np.uint32)
  info = np.iinfo(dtype)
  return int(info.min), int(info.max)


def edge_values(dtype: np.dtype) -> list[int]:
  """0, ±1, the powers of ten and their neighbours, and the extremes, within range."""
  lo, hi = _bounds(dtype)
  vals = {0, 1, -1, lo, hi, lo + 1, hi - 1}
  for k in range(1, 20):
    p = 10**k
    vals |= {p - 1, p, p + 1, -p + 1, -p, -p - 1}
  return sorted(v for v in vals if lo <= v <= hi)


def _num_buckets(st):
  big = [(1 << 62) + 12345, (1 << 63) - 1] if tf_dtypes.x64_enabled() else []
  return st.sampled_from([1, 2, 16, 1000, 65536, 65537, 1 << 20, (1 << 31) - 1, 1 << 31] + big)


def _calls(st, strong: bool):
  @st.composite
  def calls(d):
    dtype = np.dtype(d(st.sampled_from(_INT_DTYPES)))
    lo, hi = _bounds(dtype)
    edges = edge_values(dtype)
    n = d(st.integers(0, 12))
    values = d(
      st.lists(st.one_of(st.sampled_from(edges), st.integers(lo, hi)), min_size=n, max_size=n)
    )
    shape = (n,) if n % 2 or n == 0 else (2, n // 2)
    kw = dict(
      input=np.array(values, dtype=dtype).reshape(shape),
      num_buckets=d(_num_buckets(st)),
      fill=d(st.sampled_from(_FILL_FLAGS)),
    )
    if strong:
      word = st.integers(-(1 << 63), (1 << 63) - 1)
      kw["key"] = [d(word), d(word)]
    return kw

  return calls()


def _oracle(op_type: str):
  def oracle(input, num_buckets, fill, key=None):
    tf = import_tensorflow()
    strings = tf.strings.as_string(input, fill=fill)
    if op_type == "StringToHashBucketStrong":
      return tf.raw_ops.StringToHashBucketStrong(input=strings, num_buckets=num_buckets, key=key)
    if op_type == "StringToHashBucket":
      return tf.raw_ops.StringToHashBucket(string_tensor=strings, num_buckets=num_buckets)
    return tf.raw_ops.StringToHashBucketFast(input=strings, num_buckets=num_buckets)

  oracle.__name__ = f"{op_type}_of_AsString"
  return oracle


def _spec_params(op_type: str):
  def params(kw):
    out = dict(
      num_buckets=int(kw["num_buckets"]),
      source="decimal",
      positive_prefix=kw["fill"] if kw["fill"] in ("+", " ") else "",
    )
    if op_type == "StringToHashBucketStrong":
      out["key"] = tuple(int(k) for k in kw["key"])
    return out

  return params


def _spec(op):
  def spec(st):
    # one canonical call (each call compiles a program of ~1000 HLO ops: few calls)
    cases = [
      dict(
        input=np.array(edge_values(np.dtype(np.int64)), np.int64),
        num_buckets=16,
        fill="",
        **({"key": [1, 2]} if op.op_type.endswith("Strong") else {}),
      )
    ]
    return st.Spec(
      _calls(st, op.op_type.endswith("Strong")),
      oracle=_oracle(op.op_type),
      operands=("input",),
      params=_spec_params(op.op_type),
      cases=cases,
      examples=0.5,
      skip={"jvp": _NO_GRAD, "vjp": _NO_GRAD},
      note="compared with TF's op on tf.strings.as_string(input, fill=fill) of the "
      "drawn integers (every integer dtype, edge values: powers of ten and their "
      "neighbours, extremes; the whole 64-bit range with x64 on)",
    )

  return spec


StringToHashBucketFast = register_op(
  "StringToHashBucketFast",
  _fast_impl,
  family=FAMILY,
  attrs=("num_buckets",),
  batching="elementwise",
  interpret=_hash_interpret,
  spec=rules.per_op(_spec),
)

StringToHashBucketStrong = register_op(
  "StringToHashBucketStrong",
  _strong_impl,
  family=FAMILY,
  attrs=("num_buckets", "key"),
  batching="elementwise",
  interpret=_hash_interpret,
  spec=rules.per_op(_spec),
)

StringToHashBucket = register_op(
  "StringToHashBucket",
  _legacy_impl,
  family=FAMILY,
  attrs=("num_buckets",),
  batching="elementwise",
  interpret=_hash_interpret,
  spec=rules.per_op(_spec),
)
