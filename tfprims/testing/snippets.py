"""Ready-to-run repro scripts for failures.

:func:`snippet` writes a drawn call as a script running it with TF and with
tfprims (per check: values, shapes, JVP, VJP, vmap); :func:`literal` writes
one drawn value as Python source.
"""

from __future__ import annotations

import math
from typing import Optional, Sequence

import numpy as np

from tfprims.testing.calls import Call
from tfprims.testing.oracles import raw_ops_renames

__all__ = ["snippet", "literal"]


def _lit_scalar(v) -> str:
  if isinstance(v, (bool, np.bool_)):
    return repr(bool(v))
  if isinstance(v, (complex, np.complexfloating)):
    v = complex(v)
    return f"complex({_lit_scalar(v.real)}, {_lit_scalar(v.imag)})"
  if isinstance(v, (float, np.floating)):
    v = float(v)
    if math.isnan(v):
      return "np.nan"
    if math.isinf(v):
      return "np.inf" if v > 0 else "-np.inf"
    return repr(v)
  if isinstance(v, (int, np.integer)):
    return str(int(v))
  return repr(v)


def _dtype_lit(dtype) -> str:
  dtype = np.dtype(dtype)
  if dtype.name == "bfloat16":
    return "ml_dtypes.bfloat16"
  return f"np.{dtype.name}" if dtype.name != "bool" else "np.bool_"


def _nested(a: np.ndarray) -> str:
  if a.ndim == 0:
    return _lit_scalar(a.item() if a.dtype.name != "bfloat16" else float(a))
  return "[" + ", ".join(_nested(s) for s in a) + "]"


def literal(value) -> str:
  """Python source for a drawn value (numpy arrays as ``np.array(...)`` with dtype)."""
  if isinstance(value, np.ndarray):
    dt = _dtype_lit(value.dtype)
    if value.size == 0:
      return f"np.zeros({value.shape!r}, dtype={dt})"
    return f"np.array({_nested(value)}, dtype={dt})"
  if isinstance(value, np.generic):
    return literal(np.asarray(value))
  if isinstance(value, np.dtype):
    return (
      "np.dtype(ml_dtypes.bfloat16)" if value.name == "bfloat16" else f"np.dtype({value.name!r})"
    )
  if isinstance(value, list):
    return "[" + ", ".join(literal(v) for v in value) + "]"
  if isinstance(value, tuple):
    return "(" + "".join(literal(v) + ", " for v in value) + ")"
  if isinstance(value, (float, np.floating, int, bool, complex)):
    return _lit_scalar(value)
  return repr(value)


def _uses_bf16(values) -> bool:
  for v in values:
    if isinstance(v, list) and _uses_bf16(v):
      return True
    if isinstance(v, np.ndarray) and v.dtype.name == "bfloat16":
      return True
    if isinstance(v, np.dtype) and v.name == "bfloat16":
      return True
  return False


def snippet(call: Call, check: str = "values", extra: Optional[dict] = None) -> str:
  """A ready-to-run script reproducing the call with TF and with tfprims."""
  extra = extra or {}
  lines = ["import numpy as np"] + ([] if call.reference else ["import tensorflow as tf"])
  if _uses_bf16(list(call.kwargs.values()) + list(extra.values())):
    lines.append("import ml_dtypes")
  lines.append("inputs = dict(")
  for k, v in call.inputs.items():
    lines.append(f"    {k}={literal(v)},")
  lines.append(")")
  lines.append(
    "attrs = dict(" + ", ".join(f"{k}={literal(v)}" for k, v in call.attrs.items()) + ")"
  )
  if call.reference:  # a numpy/JAX reference: the drawn values as they are
    tf_call = "oracle(**inputs, **attrs)"
  else:
    tf_call = f"{_tf_callee_src(call)}(**tf_inputs, **attrs)"
    lines.append(
      "tf_inputs = tf.nest.map_structure(tf.constant, inputs)  "
      "# numpy inputs may be cast to a default dtype"
    )
  if _tf_callee_src(call) == "oracle":
    lines.append(_oracle_import(call.oracle))
  if _tf_callee_src(call) == "raw_op":
    renames = raw_ops_renames(call.oracle)
    lines.append(
      f"raw_op = lambda **kw: tf.raw_ops.{call.oracle_name}(**{{{renames!r}.get(k, k): "
      "v for k, v in kw.items()})  # raw_ops renames op-def arguments"
    )
  lines.append(f"expected = {tf_call}")
  lines += [
    "# tfprims:",
    "import jax",
    'jax.config.update("jax_enable_x64", True)',
    "import tfprims.ops  # registers the ops",
    "from tfprims.core import get_op",
    f"op = get_op({call.op.op_type!r})",
  ]
  if call.spec is None:
    lines.append("operands, params = op.prepare(inputs, attrs)")
  else:  # the primitive takes some of the drawn inputs (Spec.operands)
    lines.append(
      f"operands = [v for k in {list(call.spec.operands)!r} for v in "
      "(inputs[k] if isinstance(inputs[k], list) else [inputs[k]])]"
    )
    lines.append(f"params = {call.params!r}")
  if call.rng_key is not None:
    lines.append(
      f"operands = [{literal(np.asarray(call.rng_key))}] + list(operands)"
      "  # the op's JAX key operand"
    )
  lines.append("f = lambda *a: op(*a, **params)")
  if check in ("values", "shape"):
    lines += ["actual = f(*operands)", "actual_jit = jax.jit(f)(*operands)"]
    if check == "shape":
      lines += [
        "print(jax.eval_shape(f, *operands), [(o.shape, o.dtype) for o in "
        "(expected if isinstance(expected, (list, tuple)) else [expected])])",
        "with jax.enable_x64(False):",
        "  print(jax.eval_shape(f, *[jax.ShapeDtypeStruct(np.shape(o), "
        "jax.dtypes.canonicalize_dtype(np.asarray(o).dtype)) for o in operands]))",
      ]
  elif check == "jit":
    lines += ["eager, jitted = f(*operands), jax.jit(f)(*operands)"]
  elif check in ("jvp", "vjp"):
    d = list(extra["diff"])
    lines += [
      f"diff = {d!r}  # the differentiated operands (indices into operands)",
      f"float_outputs = {list(extra['float_outputs'])!r}",
      "def g(*x):",
      "  args = list(operands)",
      "  for i, v in zip(diff, x):",
      "    args[i] = v",
      "  out = f(*args)",
      "  out = list(out) if isinstance(out, (list, tuple)) else [out]",
      "  return [out[k] for k in float_outputs]",
    ]
    if not call.reference:
      lines.append("xs = [tf.constant(operands[i]) for i in diff]")
    if call.reference:
      lines += _reference_derivative(call, check, extra)
    elif check == "jvp":
      lines += [
        f"tangents = {literal(list(extra['tangents']))}",
        "ours = jax.jvp(g, [operands[i] for i in diff], tangents)[1]",
        "with tf.autodiff.ForwardAccumulator(xs, [tf.constant(t) for t in tangents]) as acc:",
        f"  y = {_tf_call_src(call, d)}",
        "y = list(y) if isinstance(y, (list, tuple)) else [y]",
        "tf_jvp = [acc.jvp(y[k]) for k in float_outputs]",
      ]
    else:
      lines += [
        f"cotangents = {literal(list(extra['cts']))}",
        "_, pullback = jax.vjp(g, *[operands[i] for i in diff])",
        "# TF's gradient is conj(vjp(conj(ct))) (matters for complex only)",
        "ours = [np.conj(c) for c in pullback([np.conj(c) for c in cotangents])]",
        "with tf.GradientTape() as tape:",
        "  tape.watch(xs)",
        f"  y = {_tf_call_src(call, d)}",
        "y = list(y) if isinstance(y, (list, tuple)) else [y]",
        "tf_grads = tape.gradient([y[k] for k in float_outputs], xs, output_gradients=cotangents)",
      ]
  elif check == "vmap":
    lines.append(f"in_axes = {extra['in_axes']!r}")
    lines.append(f"batched = {literal(list(extra['batched']))}")
    lines += [
      "out = jax.vmap(f, in_axes=in_axes)(*batched)",
      "per_example = [f(*[o if a is None else np.take(o, k, axis=a) "
      "for o, a in zip(batched, in_axes)]) for k in range("
      f"{extra['batch']})]",
    ]
  return "\n".join("    " + l for l in lines)


def _reference_derivative(call: Call, check: str, extra: dict) -> list:
  """Snippet lines checking our JVP against the reference's central differences (jvp),
  or our VJP as the transpose of our JVP (vjp)."""
  lines = [
    f"tangents = {literal(list(extra['tangents']))}"
    if check == "jvp"
    else "tangents = [np.ones_like(operands[i]) for i in diff]",
    "ours_jvp = jax.jvp(g, [operands[i] for i in diff], tangents)[1]",
  ]
  if check == "jvp":
    lines += [
      f"where = {[call.operand_args[i] for i in extra['diff']]!r}  # (input, list index)",
      "def shifted(h):  # the reference at inputs + h * tangents, in float64",
      "  kw = {k: (list(v) if isinstance(v, list) else v) for k, v in inputs.items()}",
      "  for (name, j), t in zip(where, tangents):",
      "    x = kw[name] if j is None else kw[name][j]",
      "    x = np.asarray(x, np.float64) + h * np.asarray(t, np.float64)",
      "    if j is None:",
      "      kw[name] = x",
      "    else:",
      "      kw[name][j] = x",
      "  out = oracle(**kw, **attrs)",
      "  out = list(out) if isinstance(out, (list, tuple)) else [out]",
      "  return [np.asarray(out[k], np.float64) for k in float_outputs]",
      "h = 1e-5",
      "central_differences = [(p - m) / (2 * h) for p, m in zip(shifted(h), shifted(-h))]",
    ]
  else:
    lines += [
      f"cotangents = {literal(list(extra['cts']))}",
      "_, pullback = jax.vjp(g, *[operands[i] for i in diff])",
      "ours = [np.conj(c) for c in pullback([np.conj(c) for c in cotangents])]",
      "# <ct, jvp(t)> must equal <vjp(ct), t>",
      "print(sum(np.vdot(c, j) for c, j in zip(cotangents, ours_jvp)), "
      "sum(np.vdot(v, t) for v, t in zip(ours, tangents)))",
    ]
  return lines


def _oracle_import(oracle) -> str:
  """Where a snippet gets a callable oracle from."""
  module, name = getattr(oracle, "__module__", None), getattr(oracle, "__qualname__", "")
  if module and name and "<" not in name:
    return f"from {module} import {name} as oracle"
  return f"oracle = ...  # {oracle!r}: the spec's oracle"


def _tf_call_src(call: Call, diff: Sequence[int]) -> str:
  """``tf.raw_ops.Op(...)`` source with the differentiated operands taken from ``xs``."""
  pos = {call.operand_args[i]: n for n, i in enumerate(diff)}
  parts = []
  for name, value in call.inputs.items():
    if isinstance(value, list):
      if any((name, j) in pos for j in range(len(value))):
        items = [
          f"xs[{pos[(name, j)]}]" if (name, j) in pos else f"tf_inputs[{name!r}][{j}]"
          for j in range(len(value))
        ]
        parts.append(f"{name}=[{', '.join(items)}]")
    elif (name, None) in pos:
      parts.append(f"{name}=xs[{pos[(name, None)]}]")
  return f"{_tf_callee_src(call)}(**dict(tf_inputs, {', '.join(parts)}), **attrs)"


def _tf_callee_src(call) -> str:
  if not isinstance(call.oracle, str):
    return "oracle"
  return "raw_op" if raw_ops_renames(call.oracle) else f"tf.raw_ops.{call.oracle_name}"
