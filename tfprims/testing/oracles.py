"""The TF side: ``tf.raw_ops.<Op>`` (or a spec's callable) as the oracle, and
TF's autodiff for derivatives; or, for an op TF does not have, the spec's numpy/JAX
reference (``Spec(oracle=fn)``, :func:`tfprims.testing.calls.is_reference`).

TensorFlow is imported on first use (:func:`_tf`). TF errors on a drawn call
become :class:`_Rejected`: the checks discard such calls and count them.

Functions taking a ``call`` take a :class:`tfprims.testing.calls.Call`; this
module does not import it because calls.py builds on this one (its lazy TF).
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import sys
from typing import Optional, Sequence

import jax.numpy as jnp
import numpy as np

from tfprims import opdefs
from tfprims.testing.comparison import _is_complex
from tfprims.testing.report import OpCheckError
from tfprims.errors import import_tensorflow

__all__ = [
  "raw_ops_renames",
  "tf_outputs",
  "tf_jvp",
  "tf_vjp",
  "tf_central_difference",
  "tf_gradient_status",
]


# --------------------------------------------------------------------------
# Lazy TF


@functools.lru_cache(maxsize=None)
def _tf():
  import logging

  tf = import_tensorflow()
  tf.get_logger().setLevel(logging.ERROR)
  return tf


@functools.lru_cache(maxsize=None)
def raw_ops_renames(op_type: str) -> dict:
  """Op-def argument name -> ``tf.raw_ops.<op_type>`` keyword, where they differ.

  Specs draw (and ``TFOp.prepare`` reads) op-def names, but TF's API defs
  rename some raw_ops keywords (``Sum(reduction_indices=)`` is
  ``tf.raw_ops.Sum(axis=)``, ``Squeeze``'s ``squeeze_dims`` is ``axis``,
  ``Select``'s ``t``/``e`` are ``x``/``y``...). The raw_ops signature lists the
  inputs in op-def order, then the attrs TF does not infer (without defaults
  first), so the two line up by position.
  """
  import inspect

  fn = getattr(_tf().raw_ops, op_type, None)
  od = opdefs.op_def(op_type)
  if fn is None or od is None:
    return {}
  params = [p for p in inspect.signature(fn).parameters if p != "name"]
  inferred = set()
  for arg in od.input_arg:
    inferred |= {arg.type_attr, arg.number_attr, arg.type_list_attr} - {""}
  attrs = [a for a in od.attr if a.name not in inferred]
  attrs = [a for a in attrs if not a.HasField("default_value")] + [
    a for a in attrs if a.HasField("default_value")
  ]
  names = [a.name for a in od.input_arg] + [a.name for a in attrs]
  if len(names) != len(params):
    return {}
  return {n: p for n, p in zip(names, params) if n != p}


def _tf_fn(oracle):
  if callable(oracle):
    return oracle
  tf = _tf()
  try:
    fn = getattr(tf.raw_ops, oracle)
  except AttributeError:
    raise OpCheckError(f"tf.raw_ops has no op {oracle!r}: pass oracle= to check_op") from None
  renames = raw_ops_renames(oracle)
  if not renames:
    return fn
  return lambda **kwargs: fn(**{renames.get(k, k): v for k, v in kwargs.items()})


def _flatten(out) -> list:
  if out is None:
    return []
  if isinstance(out, (list, tuple)):
    flat = []
    for o in out:
      flat.extend(_flatten(o))
    return flat
  return [out]


def _to_numpy(t) -> np.ndarray:
  tf = _tf()
  if isinstance(t, tf.IndexedSlices):
    t = tf.convert_to_tensor(t)
  return np.asarray(t.numpy() if hasattr(t, "numpy") else t)


class _Rejected(Exception):
  """TF rejected the drawn call."""

  def __init__(self, category: str, message: str):
    super().__init__(message)
    self.category = category


def _reject_category(exc) -> str:
  msg = str(exc)
  if type(exc).__name__ == "NotFoundError" and (
    "kernel" in msg.lower() or "Could not find device" in msg
  ):
    return "no CPU kernel"
  return type(exc).__name__


@contextlib.contextmanager
def _tf_errors_as_rejections():
  tf = _tf()
  try:
    yield
  except tf.errors.OpError as e:
    raise _Rejected(_reject_category(e), " ".join(str(e).split())[:400]) from None


# --------------------------------------------------------------------------
# Calling the oracle


def _tf_kwargs(kwargs) -> dict:
  """Inputs as tf.constant: given numpy arrays, TF's eager fast path may convert
  an input to the type attr's *default* dtype (LeakyRelu on a float16 vector
  runs in float32, Conj of complex128 in complex64)."""
  tf = _tf()

  def const(v):
    if isinstance(v, list):
      return [const(x) for x in v]
    if isinstance(v, (np.ndarray, np.generic)):
      return tf.constant(v)
    return v

  return {k: const(v) for k, v in kwargs.items()}


def _call_tf(call, kwargs=None):
  if call.reference:  # numpy/JAX code: the drawn values as they are
    return call.oracle(**(call.kwargs if kwargs is None else kwargs))
  tf = _tf()
  with tf.device("/CPU:0"):
    return _tf_fn(call.oracle)(**_tf_kwargs(call.kwargs if kwargs is None else kwargs))


def tf_outputs(call) -> list:
  """TF's outputs for the call (flat list of numpy arrays); raises _Rejected.

  A reference oracle's (``call.reference``) outputs are numpy or JAX arrays (or TF
  tensors, which :func:`returns_tf` then reports)."""
  if call.reference:
    rejects = (
      _tf_errors_as_rejections() if "tensorflow" in sys.modules else (contextlib.nullcontext())
    )
    with rejects:
      outs = _flatten(_call_tf(call))
    tf_typed = any(_is_tf_value(o) for o in outs)
    _RETURNS_TF[id(call.oracle)] = (call.oracle, tf_typed)
    return [_to_numpy(o) if tf_typed else np.asarray(o) for o in outs]
  with _tf_errors_as_rejections():
    return [_to_numpy(o) for o in _flatten(_call_tf(call))]


# id(reference oracle) -> (the oracle, whether its outputs were TF tensors)
_RETURNS_TF: dict = {}


def _is_tf_value(value) -> bool:
  return type(value).__module__.split(".")[0] == "tensorflow"


def returns_tf(oracle) -> bool:
  """Whether a reference oracle returned TF tensors (TF code run on numpy inputs: TF's
  autodiff is then its derivative oracle)."""
  entry = _RETURNS_TF.get(id(oracle))
  return bool(entry and entry[0] is oracle and entry[1])


# --------------------------------------------------------------------------
# TF autodiff oracles


def _tf_kwargs_with_tensors(call, idx: Sequence[int], values=None):
  tf = _tf()
  kwargs = {k: (list(v) if isinstance(v, list) else v) for k, v in call.kwargs.items()}
  tensors = []
  kwargs = _tf_kwargs(kwargs)
  for n, i in enumerate(idx):
    name, j = call.operand_args[i]
    t = tf.constant(call.operands[i] if values is None else values[n])
    tensors.append(t)
    if j is None:
      kwargs[name] = t
    else:
      kwargs[name][j] = t
  return kwargs, tensors


def tf_jvp(call, diff_idx, out_mask, tangents) -> list:
  tf = _tf()
  kwargs, primals = _tf_kwargs_with_tensors(call, diff_idx)
  with _tf_errors_as_rejections(), tf.device("/CPU:0"):
    with tf.autodiff.ForwardAccumulator(primals, [tf.constant(t) for t in tangents]) as acc:
      outs = _flatten(_call_tf(call, kwargs))
    res = []
    for o, m in zip(outs, out_mask):
      if m:
        t = acc.jvp(o, unconnected_gradients=tf.UnconnectedGradients.ZERO)
        res.append(_to_numpy(t))
  return res


def tf_vjp(call, diff_idx, out_mask, cts) -> list:
  tf = _tf()
  kwargs, primals = _tf_kwargs_with_tensors(call, diff_idx)
  with _tf_errors_as_rejections(), tf.device("/CPU:0"):
    with tf.GradientTape() as tape:
      tape.watch(primals)
      outs = _flatten(_call_tf(call, kwargs))
    fouts = [o for o, m in zip(outs, out_mask) if m]
    grads = tape.gradient(
      fouts,
      primals,
      output_gradients=[tf.constant(c) for c in cts],
      unconnected_gradients=tf.UnconnectedGradients.ZERO,
    )
    return [_to_numpy(g) for g in grads]


def tf_central_difference(
  call, diff_idx, out_mask, tangents, widen: bool = True, step: Optional[float] = None
) -> list:
  """(f(x + h t) - f(x - h t)) / 2h with TF; ``h`` is ``step`` (default: eps**(1/3))
  times the inputs' largest magnitude (at least 1).

  With ``widen``, inputs of the differentiated dtype are cast to float64 /
  complex128 first (when TF accepts that), so float16/bfloat16/float32 calls
  get accurate differences; results are then float64/complex128.
  """
  if widen:
    dts = {np.asarray(call.operands[i]).dtype for i in diff_idx}
    wide_of = lambda d: np.dtype(np.complex128 if _is_complex(d) else np.float64)
    if any(d != wide_of(d) for d in dts):
      ops = [
        np.asarray(o).astype(wide_of(np.asarray(o).dtype)) if np.asarray(o).dtype in dts else o
        for o in call.operands
      ]
      attrs_wide = {
        k: (wide_of(v) if isinstance(v, np.dtype) and v in dts else v)
        for k, v in call.attrs.items()
      }
      wide = dataclasses.replace(call.with_operands(ops))
      wide.kwargs = dict(wide.kwargs, **attrs_wide)
      wide.attrs = attrs_wide
      try:
        return tf_central_difference(
          wide,
          diff_idx,
          out_mask,
          [np.asarray(t).astype(wide_of(np.asarray(t).dtype)) for t in tangents],
          widen=False,
          step=step,
        )
      except _Rejected:
        pass
  xs = [np.asarray(call.operands[i]) for i in diff_idx]
  scale = max([1.0] + [float(np.max(np.abs(x.astype(np.complex128)))) for x in xs if x.size])
  eps = max(float(jnp.finfo(x.dtype).eps) for x in xs)
  h = (eps ** (1.0 / 3.0) if step is None else step) * scale

  def at(sign):
    ops = list(call.operands)
    for i, x, t in zip(diff_idx, xs, tangents):
      wide = np.complex128 if _is_complex(x.dtype) else np.float64
      ops[i] = (x.astype(wide) + sign * h * np.asarray(t).astype(wide)).astype(x.dtype)
    outs = tf_outputs(call.with_operands(ops))
    return [o for o, m in zip(outs, out_mask) if m]

  plus, minus = at(1.0), at(-1.0)
  res = []
  for p, m in zip(plus, minus):
    wide = np.complex128 if _is_complex(p.dtype) else np.float64
    res.append((p.astype(wide) - m.astype(wide)) / (2 * h))
  return res


@functools.lru_cache(maxsize=None)
def tf_gradient_status(op_type: str) -> Optional[str]:
  """None when TF has a gradient for ``op_type``, else why not."""
  try:
    from tensorflow.python.framework import ops as tf_ops

    registry = tf_ops._gradient_registry  # pylint: disable=protected-access
  except (ImportError, AttributeError):
    return None
  try:
    fn = registry.lookup(op_type)
  except LookupError:
    return f"TF registers no gradient for {op_type}"
  if fn is None:
    return f"TF declares {op_type} not differentiable"
  return None
