"""Reading a serialized StableHLO module and running its functions on JAX values.

A module is deserialized once (per content) into its own MLIR context. Running a
function walks its block: each operation's operands are looked up in an
environment of values already computed (JAX arrays or tracers, or numpy arrays
for values known when the module is read: constants and what is computed from
them and from static shapes), the operation's handler (tfprims/stablehlo/ops.py)
computes its results, and the terminator's operands are the function's results.
Regions (loop bodies, branches, reduction bodies) run the same way and see the
values of the blocks around them, as StableHLO regions may.

Only public JAX APIs are used (``jax.interpreters.mlir.ir``,
``jax.extend.mlir.dialects.stablehlo``).
"""

from __future__ import annotations

import collections
import functools
import re
from typing import Any, Callable, Mapping, Optional, Sequence

import jax.numpy as jnp
import ml_dtypes
import numpy as np
from jax.extend.mlir.dialects import stablehlo as hlo
from jax.interpreters import mlir

from tfprims import dtypes, errors

ir = mlir.ir


class StableHLOError(errors.ConversionError):
  """A StableHLO module tfprims cannot read as JAX operations (an operation without
  a JAX equivalent, an attribute it does not understand). XlaCallModule then calls
  the module as one opaque operation."""


_ELEMENT_TYPES = {
  "i1": np.bool_,
  "i8": np.int8,
  "i16": np.int16,
  "i32": np.int32,
  "i64": np.int64,
  "ui8": np.uint8,
  "ui16": np.uint16,
  "ui32": np.uint32,
  "ui64": np.uint64,
  "f16": np.float16,
  "bf16": ml_dtypes.bfloat16,
  "f32": np.float32,
  "f64": np.float64,
  "complex<f32>": np.complex64,
  "complex<f64>": np.complex128,
  "f8E4M3FN": ml_dtypes.float8_e4m3fn,
  "f8E5M2": ml_dtypes.float8_e5m2,
  "f8E4M3FNUZ": ml_dtypes.float8_e4m3fnuz,
  "f8E5M2FNUZ": ml_dtypes.float8_e5m2fnuz,
  "f8E4M3B11FNUZ": ml_dtypes.float8_e4m3b11fnuz,
  "i4": ml_dtypes.int4,
  "ui4": ml_dtypes.uint4,
}


def element_dtype(element_type) -> np.dtype:
  name = str(element_type)
  if name not in _ELEMENT_TYPES:
    raise StableHLOError(f"StableHLO element type {name} has no JAX dtype")
  return np.dtype(_ELEMENT_TYPES[name])


class TensorType(collections.namedtuple("TensorType", "shape dtype")):
  """A ranked tensor type: ``shape`` (None for a dynamic dimension) and the dtype
  the module declares (not narrowed for x64-off JAX)."""

  @property
  def static(self) -> bool:
    return all(d is not None for d in self.shape)


def tensor_type(t) -> TensorType:
  try:
    rt = ir.RankedTensorType(t)
  except (TypeError, ValueError) as e:
    raise StableHLOError(
      f"StableHLO type {t} is not a ranked tensor (tokens and tuples are not read)"
    ) from e
  shape = tuple(None if rt.is_dynamic_dim(i) else int(rt.get_dim_size(i)) for i in range(rt.rank))
  return TensorType(shape, element_dtype(rt.element_type))


# --- constants -------------------------------------------------------------------------

_TOKEN = re.compile(r"\(|\)|\[|\]|,|[^\s,\[\]()]+")


def _bits_to_value(token: str, dtype: np.dtype):
  bits = int(token, 16)
  if dtype.kind in "iub":
    return bits
  width = {1: np.uint8, 2: np.uint16, 4: np.uint32, 8: np.uint64}[dtype.itemsize]
  return np.array(bits, width).view(dtype).item()


def _parse_literal(text: str, dtype: np.dtype):
  """The nested list (or scalar) of a ``dense<...>`` literal as Python values:
  ``true``/``false``, numbers, hex bit patterns (NaNs, infinities) and complex
  ``(re,im)`` pairs."""
  part = dtype if dtype.kind != "c" else np.dtype(np.float32 if dtype.itemsize == 8 else np.float64)
  tokens = _TOKEN.findall(text)
  pos = 0

  def scalar(tok):
    if tok in ("true", "false"):
      return tok == "true"
    if tok.startswith("0x"):
      return _bits_to_value(tok, part)
    return float(tok) if part.kind == "f" or part.kind == "V" else int(tok)

  def parse():
    nonlocal pos
    tok = tokens[pos]
    pos += 1
    if tok == "[":
      items = []
      while tokens[pos] != "]":
        items.append(parse())
        if tokens[pos] == ",":
          pos += 1
      pos += 1
      return items
    if tok == "(":
      re_, _, im = tokens[pos], tokens[pos + 1], tokens[pos + 2]
      pos += 4
      return complex(scalar(re_), scalar(im))
    return scalar(tok)

  return parse()


def constant_value(attr, ttype: TensorType) -> np.ndarray:
  """A ``dense<...>`` elements attribute (or its text) as a numpy array of the
  declared type."""
  dtype, shape = ttype.dtype, ttype.shape
  if not isinstance(attr, str) and (dtype.kind in "iub" or dtype in (np.float32, np.float64)):
    try:  # the buffer protocol: fast, and exact for these types
      value = np.array(ir.DenseElementsAttr(attr))
      if value.dtype == dtype:
        return np.broadcast_to(value, shape).copy() if value.shape != shape else value
    except (TypeError, ValueError, RuntimeError):
      pass
  text = str(attr).strip()
  match = re.fullmatch(r"dense<(.*)>\s*:\s*tensor<.*>", text, re.DOTALL)
  if match is None:
    raise StableHLOError(f"StableHLO constant {text[:80]} is not a dense literal")
  body = match.group(1).strip()
  if body.startswith('"0x'):
    raw = bytes.fromhex(body[3:-1])
    value = np.frombuffer(raw, dtype if dtype != np.bool_ else np.uint8).astype(dtype)
    return np.broadcast_to(value, shape).copy() if value.size == 1 else value.reshape(shape)
  value = np.array(_parse_literal(body, dtype), dtype=dtype)
  return np.broadcast_to(value, shape).copy() if value.ndim == 0 else value.reshape(shape)


# --- attributes ------------------------------------------------------------------------


def ints(attr) -> tuple:
  """An ``array<i64: ...>`` or dense integer attribute as a tuple of ints."""
  if attr is None:
    return ()
  try:
    return tuple(int(v) for v in ir.DenseI64ArrayAttr(attr))
  except (TypeError, ValueError):
    return tuple(int(v) for v in np.array(ir.DenseElementsAttr(attr)).reshape(-1))


def bools(attr) -> tuple:
  try:
    return tuple(bool(v) for v in ir.DenseBoolArrayAttr(attr))
  except (TypeError, ValueError):
    return tuple(bool(v) for v in np.array(ir.DenseElementsAttr(attr)).reshape(-1))


def integer(attr) -> int:
  return int(ir.IntegerAttr(attr).value)


def enum_name(attr) -> str:
  """The case of an enum attribute: ``#stablehlo<comparison_direction LT>`` -> LT."""
  return str(attr).rstrip(">").split()[-1]


def dictionary(attr) -> dict:
  """A dictionary attribute's integer/float/string/bool entries."""
  out = {}
  d = ir.DictAttr(attr)
  for i in range(len(d)):
    named = d[i]
    value = named.attr
    for cast, get in (
      (ir.BoolAttr, lambda a: a.value),
      (ir.IntegerAttr, lambda a: a.value),
      (ir.FloatAttr, lambda a: a.value),
      (ir.StringAttr, lambda a: a.value),
    ):
      try:
        out[named.name] = get(cast(value))
        break
      except (TypeError, ValueError):
        continue
  return out


# --- modules ---------------------------------------------------------------------------


class Module:
  """A deserialized module: its context (kept alive), functions by name."""

  def __init__(self, data: bytes):
    self.context = mlir.make_ir_context()
    try:
      self.module = hlo.deserialize_portable_artifact(self.context, data)
    except Exception:  # not a portable artifact: textual or bytecode MLIR
      try:
        self.module = ir.Module.parse(data, context=self.context)
      except Exception as e:
        raise StableHLOError(f"cannot read the StableHLO module: {e}") from e
    self.functions = {}
    for op in self.module.body.operations:
      if op.operation.name == "func.func":
        self.functions[ir.StringAttr(op.attributes["sym_name"]).value] = op

  def operations(self):
    """Every operation in the module (regions included), in order."""

    def walk(op):
      yield op
      for region in op.regions:
        for block in region.blocks:
          for inner in block.operations:
            yield from walk(inner.operation)

    for op in self.module.body.operations:
      yield from walk(op.operation)


@functools.lru_cache(maxsize=64)
def load(data: bytes) -> Module:
  return Module(data)


# --- running blocks --------------------------------------------------------------------

Handler = Callable[["Op", list], Sequence[Any]]
HANDLERS: dict[str, Handler] = {}


def handler(*names: str):
  """Declares the JAX computation of StableHLO operations ``names``."""

  def register(fn):
    for name in names:
      HANDLERS[name] = fn
    return fn

  return register


def is_known(x) -> bool:
  """A value known when the module is read (numpy), not a JAX value."""
  return isinstance(x, (np.ndarray, np.generic))


class Op:
  """What a handler sees of one operation: its attributes, result types, regions,
  and the interpreter (to run regions and called functions)."""

  def __init__(self, op, runner: "Runner", env):
    self.op, self.runner, self.env = op, runner, env
    self.name = op.name

  def attr(self, name: str, default=None):
    attrs = self.op.attributes
    return attrs[name] if name in attrs else default

  @property
  def result_types(self) -> list[TensorType]:
    return [tensor_type(r.type) for r in self.op.results]

  @property
  def result_type(self) -> TensorType:
    return self.result_types[0]

  def region(self, index: int) -> Callable[..., list]:
    """Region ``index`` as a Python function of its block arguments."""
    block = self.op.regions[index].blocks[0]
    return lambda *args: self.runner.run_block(block, list(args), self.env)

  def error(self, message: str) -> StableHLOError:
    return StableHLOError(f"{self.name}: {message}")


class Runner:
  """Runs the functions of one module on JAX values."""

  def __init__(self, module: Module, wrapped: bool = False):
    self.module = module
    # A custom gradient (jax2tf's) provides the module's derivatives: operations JAX
    # cannot differentiate then give zero tangents instead of raising.
    self.wrapped = wrapped

  def call(self, name: str, args: Sequence[Any]) -> list:
    if name not in self.module.functions:
      raise StableHLOError(f"func.call of an unknown function @{name}")
    block = self.module.functions[name].regions[0].blocks[0]
    return self.run_block(block, list(args), None)

  def run_block(
    self, block, args: list, outer: Optional[Mapping], keep: Optional[dict] = None
  ) -> list:
    """The block's results for ``args``; ``keep`` (a dict) receives every value
    it computed."""
    env = collections.ChainMap({}, outer) if outer is not None else collections.ChainMap({})
    if keep is not None:
      env.maps.insert(0, keep)
    arguments = list(block.arguments)
    if len(arguments) != len(args):
      raise StableHLOError(f"a block of {len(arguments)} arguments got {len(args)}")
    for a, v in zip(arguments, args):
      env[a] = v
    for op in block.operations:
      op = op.operation
      operands = [env[v] for v in op.operands]
      if op.name in ("func.return", "stablehlo.return"):
        return operands
      fn = HANDLERS.get(op.name)
      if fn is None:
        raise StableHLOError(f"StableHLO operation {op.name} has no JAX equivalent here")
      outs = fn(Op(op, self, env), operands)
      results = list(op.results)
      if len(outs) != len(results):
        raise StableHLOError(f"{op.name}: {len(outs)} results for {len(results)}")
      for r, v in zip(results, outs):
        env[r] = v
    raise StableHLOError("a block without a terminator")


def as_jax(x, dtype: Optional[np.dtype] = None):
  """A JAX array of the computing dtype (64-bit narrowed when x64 is off)."""
  target = dtypes.canonical_dtype(
    dtype if dtype is not None else np.asarray(x).dtype if is_known(x) else x.dtype
  )
  if is_known(x):
    return jnp.asarray(np.asarray(x).astype(target, copy=False))
  return x if x.dtype == target else x.astype(target)


def unsupported_operations(module: Module) -> list[str]:
  """The operations of ``module`` that no handler reads."""
  missing = []
  for op in module.operations():
    if op.name not in HANDLERS and op.name not in (
      "func.func",
      "func.return",
      "stablehlo.return",
      "builtin.module",
    ):
      if op.name not in missing:
        missing.append(op.name)
  return missing
