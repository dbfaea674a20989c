"""Drawn calls, and our primitive run on them.

A :class:`Call` is one drawn ``tf.raw_ops`` call split into op-def inputs and
attrs (:func:`make_call`), plus the operands and params of our primitive
(:func:`prepare_call`). ``ours_eager``/``ours_jit``/``ours_jvp``/``ours_vjp``
run the primitive on a call; ``_random_like``, ``_sanitize`` and ``_vary`` make
the other values the checks need (tangents, derivative inputs, batch members).
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Any, Mapping, Optional, Sequence

import jax
import jax.numpy as jnp
import numpy as np

from tfprims import core, opdefs
from tfprims.testing import strategies as st_module
from tfprims.testing.comparison import _is_complex, _is_inexact
from tfprims.testing.oracles import _tf
from tfprims.testing.report import CheckFailure, OpCheckError
from tfprims.testing.spec import Spec

__all__ = [
  "Call",
  "load_spec",
  "make_call",
  "is_reference",
  "prepare_call",
  "ours_eager",
  "ours_jit",
  "ours_jvp",
  "ours_vjp",
  "clear_caches",
  "RNG_KEY",
  "DEFAULT_RNG_KEY",
]


# --------------------------------------------------------------------------
# Calls


def load_spec(op) -> Optional[Spec]:
  """The op's :class:`Spec` (``op.spec(strategies)``), or None."""
  if op.spec is None:
    return None
  spec = op.spec(st_module)
  if not isinstance(spec, Spec):
    raise OpCheckError(
      f"{op.op_type}: spec must return tfprims.testing.Spec, got {type(spec).__name__}"
    )
  return spec


def _normalize_input(value):
  if isinstance(value, list):
    return [_normalize_input(v) for v in value]
  if isinstance(value, np.ndarray):
    return value
  if isinstance(value, np.generic):
    return np.asarray(value)
  tf = _tf()
  return np.asarray(tf.convert_to_tensor(value).numpy())


@dataclasses.dataclass
class Call:
  """One drawn call: TF kwargs split into op-def inputs and attrs, plus our
  operands/params from ``op.prepare``."""

  op: Any
  oracle: Any
  kwargs: dict
  inputs: dict
  attrs: dict
  operand_args: list  # (input name, list index or None) per operand
  operands: list = None
  params: dict = None
  rng_key: Any = None  # the JAX key operand of ops with ``uses_rng``
  spec: Optional[Spec] = None  # for ``Spec.operands``/``Spec.params``
  reference: bool = False  # the oracle is a numpy/JAX reference (see is_reference)

  @property
  def oracle_name(self) -> str:
    return (
      self.oracle if isinstance(self.oracle, str) else getattr(self.oracle, "__name__", "oracle")
    )

  def with_operands(self, operands: Sequence[Any]) -> "Call":
    """The same call with new operand values (static inputs and attrs kept)."""
    inputs = {k: (list(v) if isinstance(v, list) else v) for k, v in self.inputs.items()}
    for (name, j), value in zip(self.operand_args, operands):
      if name == RNG_KEY:
        continue
      if j is None:
        inputs[name] = value
      else:
        inputs[name][j] = value
    kwargs = dict(self.kwargs)
    kwargs.update(inputs)
    key = self.rng_key
    for (name, _), value in zip(self.operand_args, operands):
      if name == RNG_KEY:
        key = value
    return dataclasses.replace(
      self, kwargs=kwargs, inputs=inputs, operands=list(operands), rng_key=key
    )

  def operand_label(self, i: int) -> str:
    name, j = self.operand_args[i]
    return name if j is None else f"{name}[{j}]"


#: Operand label of the JAX key that ops with ``op.uses_rng`` take first (not a
#: TF input: the interpreter supplies it from ``rng=``).
RNG_KEY = "<rng key>"
DEFAULT_RNG_KEY = np.array([0, 1234], np.uint32)


def _input_names(op, oracle) -> tuple:
  names = opdefs.input_arg_names(op.op_type)
  if not names and isinstance(oracle, str):
    names = opdefs.input_arg_names(oracle)
  return names


def make_call(op, kwargs: Mapping[str, Any], oracle=None, spec: Optional[Spec] = None) -> Call:
  """Splits drawn ``tf.raw_ops`` kwargs into inputs and attrs (``prepare_call``
  then makes our operands and params)."""
  oracle = oracle or op.op_type
  custom = spec is not None and spec.operands is not None
  names = tuple(spec.operands) if custom else _input_names(op, oracle)
  if names:
    inputs = {k: _normalize_input(kwargs[k]) for k in names if k in kwargs}
    missing = [k for k in names if k not in kwargs]
    if missing:
      raise OpCheckError(f"{op.op_type}: the spec's calls lack inputs {missing}")
  else:  # not a TF op: arrays (and lists of arrays) are inputs
    inputs = {
      k: _normalize_input(v)
      for k, v in kwargs.items()
      if isinstance(v, (np.ndarray, np.generic, list))
    }
  attrs = {k: v for k, v in kwargs.items() if k not in inputs}
  full = dict(kwargs)
  full.update(inputs)
  operand_args = []
  for name in names or tuple(inputs):
    if name in op.static and not custom:
      continue
    value = inputs[name]
    if isinstance(value, list):
      operand_args.extend((name, j) for j in range(len(value)))
    else:
      operand_args.append((name, None))
  rng_key = None
  if op.uses_rng:
    operand_args.insert(0, (RNG_KEY, None))
    rng_key = DEFAULT_RNG_KEY
  return Call(
    op=op,
    oracle=oracle,
    kwargs=full,
    inputs=inputs,
    attrs=attrs,
    operand_args=operand_args,
    rng_key=rng_key,
    spec=spec if custom else None,
    reference=is_reference(op, oracle),
  )


def is_reference(op, oracle) -> bool:
  """Whether ``oracle`` is a reference implementation (numpy or JAX) rather than TF code:
  a callable oracle of an op TF has no op def for (a user's own op). It is called with
  the drawn numpy arrays; the derivative checks use its central differences unless it
  returns TF tensors (then TF's autodiff, as for TF ops)."""
  return callable(oracle) and opdefs.op_def(op.op_type) is None


def prepare_call(call: Call) -> Call:
  """Sets the call's operands and params: ``op.prepare``, or the spec's
  ``operands``/``params`` where the primitive does not take the TF inputs."""
  if call.spec is not None:
    operands = [
      v
      for name in call.spec.operands
      for v in (call.inputs[name] if isinstance(call.inputs[name], list) else [call.inputs[name]])
    ]
    drawn = call.spec.params(call.kwargs) if call.spec.params is not None else {}
    params = {k: core.hashable(v) for k, v in drawn.items()}
  else:
    operands, params = call.op.prepare(call.inputs, call.attrs)
  if call.rng_key is not None:
    operands = [call.rng_key] + list(operands)
  if len(operands) != len(call.operand_args):
    raise CheckFailure(
      f"op.prepare returned {len(operands)} operands; the op def has "
      f"{len(call.operand_args)} non-static input tensors"
    )
  call.operands, call.params = list(operands), dict(params)
  return call


# --------------------------------------------------------------------------
# Our side (jitted callables cached per op/params/kind; JAX caches per shape)

_JIT_CACHE: dict = {}


def clear_caches():
  """Drops the jitted callables and JAX's compiled programs. A long test process that keeps
  them runs out of memory mappings (XLA's CPU code pages; Linux's default limit is 65530
  per process) and XLA's compiler then crashes, so the property tests call this after each op."""
  _JIT_CACHE.clear()
  jax.clear_caches()


def _params_key(params) -> tuple:
  return tuple(sorted(params.items()))


def _jitted(op, params, kind, extra, build):
  key = (op, _params_key(params), kind, extra)
  fn = _JIT_CACHE.get(key)
  if fn is None:
    fn = _JIT_CACHE[key] = jax.jit(build())
  return fn


def _outs(op, out) -> list:
  return list(out) if op.multiple_results else [out]


def _bound(op, params):
  return lambda *operands: op(*operands, **params)


def ours_eager(call: Call) -> list:
  return [np.asarray(o) for o in _outs(call.op, call.op(*call.operands, **call.params))]


def ours_jit(call: Call) -> list:
  fn = _jitted(call.op, call.params, "call", None, lambda: _bound(call.op, call.params))
  return [np.asarray(o) for o in _outs(call.op, fn(*call.operands))]


def _restricted(op, params, diff_idx, out_mask):
  """f(diff operands; all operands) -> the float outputs."""

  def g(operands, *diffs):
    args = list(operands)
    for i, d in zip(diff_idx, diffs):
      args[i] = d
    outs = _outs(op, op(*args, **params))
    return [o for o, m in zip(outs, out_mask) if m]

  return g


def ours_jvp(call, diff_idx, out_mask, tangents) -> list:
  def build():
    g = _restricted(call.op, call.params, diff_idx, out_mask)

    def f(operands, tangents):
      primals = [operands[i] for i in diff_idx]
      return jax.jvp(functools.partial(g, operands), primals, list(tangents))[1]

    return f

  fn = _jitted(call.op, call.params, "jvp", (tuple(diff_idx), tuple(out_mask)), build)
  return [np.asarray(t) for t in fn(list(call.operands), list(tangents))]


def _vjp_fn(op, params, diff_idx, out_mask):
  g = _restricted(op, params, diff_idx, out_mask)

  def f(operands, cts):
    primals = [operands[i] for i in diff_idx]
    _, pullback = jax.vjp(functools.partial(g, operands), *primals)
    # JAX pairs cotangents without conjugation, TF with: TF's gradient is
    # conj(vjp(conj(ct))).
    out = pullback([jnp.conj(c) if jnp.iscomplexobj(c) else c for c in cts])
    return [jnp.conj(c) if jnp.iscomplexobj(c) else c for c in out]

  return f


def ours_vjp(call, diff_idx, out_mask, cts) -> list:
  fn = _jitted(
    call.op,
    call.params,
    "vjp",
    (tuple(diff_idx), tuple(out_mask)),
    lambda: _vjp_fn(call.op, call.params, diff_idx, out_mask),
  )
  return [np.asarray(c) for c in fn(list(call.operands), list(cts))]


# --------------------------------------------------------------------------
# Random values


# Inputs of derivative checks are kept finite and moderate (see Spec.sanitize_grads).
GRAD_INPUT_LIMIT = {"float16": 100.0, "bfloat16": 100.0}
GRAD_INPUT_LIMIT_DEFAULT = 1e6


def _random_like(rng, x) -> np.ndarray:
  x = np.asarray(x)
  if _is_complex(x.dtype):
    v = rng.standard_normal(x.shape) + 1j * rng.standard_normal(x.shape)
  else:
    v = rng.standard_normal(x.shape)
  return np.asarray(v).astype(x.dtype)


def _sanitize(x) -> np.ndarray:
  """Finite, moderate float values for derivative checks (NaN -> 0.5, ±inf and
  huge values clipped)."""
  x = np.asarray(x)
  if not _is_inexact(x.dtype):
    return x
  limit = GRAD_INPUT_LIMIT.get(x.dtype.name, GRAD_INPUT_LIMIT_DEFAULT)

  def fix(p):
    p = np.where(np.isnan(p), 0.5, p)
    return np.clip(p, -limit, limit)

  if _is_complex(x.dtype):
    w = x.astype(np.complex128)
    return (fix(w.real) + 1j * fix(w.imag)).astype(x.dtype)
  return fix(x.astype(np.float64)).astype(x.dtype)


def _vary(x, rng, k: int, floats_only: bool, how: str = "permute") -> np.ndarray:
  """Another batch member: the values permuted (floats shifted when that changes
  nothing); with ``how="scale"`` floats are scaled by 0.5**k instead (keeps
  positive-definiteness, symmetry, order and signs) and ints left alone."""
  x = np.asarray(x)
  if how == "none":
    return x
  if how == "scale":
    if not _is_inexact(x.dtype):
      return x
    wide = np.complex128 if _is_complex(x.dtype) else np.float64
    return (x.astype(wide) * 0.5**k).astype(x.dtype)
  if floats_only and not _is_inexact(x.dtype):
    return x
  flat = x.reshape(-1)
  out = flat[rng.permutation(flat.size)].reshape(x.shape) if flat.size else x
  if _is_inexact(x.dtype) and np.array_equal(out, x, equal_nan=True) and x.size:
    wide = np.complex128 if _is_complex(x.dtype) else np.float64
    out = (x.astype(wide) + 0.5 * k).astype(x.dtype)
  return out
