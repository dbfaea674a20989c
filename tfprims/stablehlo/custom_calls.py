"""The ``stablehlo.custom_call`` targets JAX itself emits on CPU, as JAX operations:
sharding markers (identities on one device), shape assertions (checked when the
shapes are known), and the LAPACK calls of ``jax.lax.linalg`` that have a public
``lax.linalg`` equivalent (which lowers to the same call, so results are the same).

Any other target (LAPACK's ``geqrf``/``orgqr`` pair behind ``jnp.linalg.qr``, GPU
kernels, ...) becomes the primitive ``stablehlo.custom_call``, which emits the same
call again: it runs and batches (one call per example), but has no derivative —
jax2tf's recorded gradient provides reverse mode where it exists.
"""

from __future__ import annotations

import re

import numpy as np
from jax import lax
import jax.numpy as jnp

import jax
from jax.extend.core import Primitive
from jax.interpreters import ad, batching, mlir, xla

from tfprims import dtypes, errors
from tfprims.stablehlo import ops
from tfprims.stablehlo.reader import Op, as_jax, dictionary, enum_name, handler, ir, is_known

_IDENTITIES = {
  "Sharding",
  "SPMDFullToShardShape",
  "SPMDShardToFullShape",
  "annotate_device_placement",
  "MoveToHost",
  "MoveToDevice",
}
# LAPACK calls with a public lax.linalg equivalent (geqrf/orgqr have none).
_READ = ("getrf", "potrf", "syevd", "heevd", "gesdd", "trsm")
_LAPACK = re.compile(
  r"lapack_[sdcz](getrf|geqrf|orgqr|ungqr|potrf|syevd|heevd|gesdd|trsm)"
  r"_ffi"
)


def target(op) -> str:
  return ir.StringAttr(op.attributes["call_target_name"]).value


def _config(op: Op) -> dict:
  attr = op.attr("mhlo.backend_config")
  try:
    return dictionary(attr) if attr is not None else {}
  except (TypeError, ValueError):
    return {}


def _char(config: dict, key: str, default: str) -> str:
  return chr(int(config[key])) if key in config else default


def _info(ok):
  """LAPACK's ``info`` output: 0 where the factorization succeeded."""
  return jnp.where(ok, 0, 1).astype(jnp.int32)


def _finite(x):
  return jnp.all(jnp.isfinite(x), axis=(-2, -1))


def _lapack(op: Op, kind: str, args):
  config = _config(op)
  types = op.result_types
  if kind == "getrf":
    lu, pivots, _ = lax.linalg.lu(args[0])
    return [lu, (pivots + 1).astype(jnp.int32), _info(_finite(lu))]
  if kind == "potrf":
    a = args[0]
    lower = _char(config, "uplo", "L") == "L"
    source = a if lower else jnp.conj(jnp.swapaxes(a, -1, -2))
    chol = lax.linalg.cholesky(source, symmetrize_input=False)
    # LAPACK leaves the other triangle as it was.
    if lower:
      out = jnp.tril(chol) + jnp.triu(a, 1)
    else:
      out = jnp.triu(jnp.conj(jnp.swapaxes(chol, -1, -2))) + jnp.tril(a, -1)
    return [out, _info(_finite(chol))]
  if kind in ("syevd", "heevd"):
    lower = _char(config, "uplo", "L") == "L"
    v, w = lax.linalg.eigh(args[0], lower=lower, symmetrize_input=False)
    return [v, w, _info(_finite(v))]
  if kind == "gesdd":
    mode = _char(config, "mode", "A")
    a = args[0]
    if mode == "N":
      s = lax.linalg.svd(a, full_matrices=False, compute_uv=False)
      zeros = [jnp.zeros(t.shape, as_jax(np.zeros((), t.dtype)).dtype) for t in types[2:4]]
      return [a, s, *zeros, _info(jnp.all(jnp.isfinite(s), axis=-1))]
    u, s, vh = lax.linalg.svd(a, full_matrices=mode == "A", compute_uv=True)
    return [a, s, u, vh, _info(jnp.all(jnp.isfinite(s), axis=-1))]
  if kind == "trsm":
    a, b = args
    trans = _char(config, "trans_x", "N")
    return [
      lax.linalg.triangular_solve(
        a,
        b,
        left_side=_char(config, "side", "L") == "L",
        lower=_char(config, "uplo", "L") == "L",
        transpose_a=trans in "TC",
        conjugate_a=trans == "C",
        unit_diagonal=_char(config, "diag", "N") == "U",
      )
    ]
  raise op.error(f"LAPACK call {kind}")


def _approx_top_k(op: Op, operands, k=None):
  """``lax.approx_max_k``/``approx_min_k``: JAX's ApproxTopK call (operand, its iota
  along the reduction dimension, the initial value and index; a comparator ``GT``
  for max, ``LT`` for min), re-emitted by JAX with its comparator. ``k``: the old
  ``stablehlo.dynamic_approx_top_k``'s operand (else the ``top_k`` config)."""
  config = _config(op)
  x, index = operands[0], operands[1]
  dim = int(config["reduction_dim"])
  shape = np.shape(index)
  iota = np.arange(shape[dim]).reshape([-1 if d == dim else 1 for d in range(len(shape))])
  if not is_known(index) or not np.array_equal(index, np.broadcast_to(iota, shape)):
    raise op.error("ApproxTopK whose indices are not the iota of the reduction dimension")
  (comparator,) = ir.ArrayAttr(op.attr("called_computations"))
  body = op.runner.module.functions[ir.FlatSymbolRefAttr(comparator).value]
  directions = [
    enum_name(inner.attributes["comparison_direction"])
    for inner in body.regions[0].blocks[0].operations
    if inner.name == "stablehlo.compare"
  ]
  if directions not in (["GT"], ["LT"]):
    raise op.error(f"ApproxTopK with a comparator comparing {directions}")
  top_k = lax.approx_max_k if directions == ["GT"] else lax.approx_min_k
  k = int(config["top_k"]) if k is None else k
  values, indices = top_k(
    as_jax(x),
    k,
    reduction_dimension=dim,
    recall_target=float(config.get("recall_target", 0.95)),
    reduction_input_size_override=int(config.get("reduction_input_size_override", -1)),
    aggregate_to_topk=bool(config.get("aggregate_to_topk", True)),
  )
  return [values, indices.astype(dtypes.canonical_dtype(op.result_types[1].dtype))]


def _known_int(op: Op, value, what: str) -> int:
  if not is_known(value):
    raise op.error(
      f"custom call @{target(op.op)} whose {what} is not known when the module is read"
    )
  return int(value)


def _dynamic(op: Op, name: str, operands):
  """Old shape-polymorphic forms (jax < 0.4.31's lowerings with symbolic dimensions):
  custom calls with dynamic result shapes whose sizes are operands, read when those
  operands are known (the shapes are, once the module is called). Shape operands
  appended by ``indices_of_shape_operands`` are dropped."""
  shape_operands = op.attr("indices_of_shape_operands")
  if shape_operands is not None:
    drop = {int(i) for i in np.asarray(ir.DenseIntElementsAttr(shape_operands))}
    operands = [x for i, x in enumerate(operands) if i not in drop]
  if name == "stablehlo.dynamic_top_k":
    x, k = operands
    values, indices = lax.top_k(as_jax(x), _known_int(op, k, "k"))
    return [values, indices.astype(dtypes.canonical_dtype(op.result_types[1].dtype))]
  if name == "stablehlo.dynamic_approx_top_k":
    return _approx_top_k(op, operands[:4], _known_int(op, operands[4], "k"))
  key, shape = operands
  if not is_known(shape):
    raise op.error(f"custom call @{name} whose shape is not known when the module is read")
  return ops.rng_bit_generator(op, key, [int(d) for d in np.asarray(shape).reshape(-1)])


_DYNAMIC = (
  "stablehlo.dynamic_top_k",
  "stablehlo.dynamic_approx_top_k",
  "stablehlo.dynamic_rng_bit_generator",
)


def has_derivative(op) -> bool:
  """Whether JAX can differentiate this custom call as read (the others become
  :data:`custom_call_p`, which has no derivative)."""
  name = target(op)
  match = _LAPACK.fullmatch(name)
  return (
    name in _IDENTITIES
    or name in ("shape_assertion", "ApproxTopK") + _DYNAMIC
    or bool(match and match.group(1) in _READ)
  )


@handler("stablehlo.custom_call")
def _custom_call(op: Op, operands):
  name = target(op.op)
  if name in _IDENTITIES:
    return operands
  if name == "shape_assertion":
    pred, *values = operands
    if is_known(pred) and not bool(pred) and all(is_known(v) for v in values):
      message = ir.StringAttr(op.attr("error_message")).value
      raise errors.InputShapeError(
        "the shapes of this call do not satisfy the module's shape constraints: "
        + message.format(*[int(v) for v in values])
      )
    return []
  match = _LAPACK.fullmatch(name)
  if match and match.group(1) in _READ:
    return _lapack(op, match.group(1), [as_jax(x) for x in operands])
  if name == "ApproxTopK":
    return _approx_top_k(op, operands)
  if name in _DYNAMIC:
    return _dynamic(op, name, operands)
  called = op.attr("called_computations")
  if called is not None and len(ir.ArrayAttr(called)):
    # Re-emitted alone, the call would name functions its new module lacks (XLA
    # crashes compiling it): the module is called as one operation instead.
    raise op.error(f"custom call @{name} calls functions of its module")
  if (
    name.startswith("lapack_")
    and any(np.size(x) == 0 for x in operands)
    and all(
      t.static and (np.prod(t.shape) == 0 or np.dtype(t.dtype).kind in "iu")
      for t in op.result_types
    )
  ):
    # LAPACK on empty matrices: every result is empty but ``info``, 0 (success). The
    # kernels themselves fail on a leading dimension of 0 (LDA = 0).
    return [jnp.zeros(t.shape, dtypes.canonical_dtype(t.dtype)) for t in op.result_types]
  if op.op.regions and len(op.op.regions[0].blocks):
    raise op.error(f"custom call @{name} has a region")
  attrs = op.op.attributes
  attributes = tuple((attrs[i].name, str(attrs[i].attr)) for i in range(len(attrs)))
  results = tuple((t.shape, t.dtype) for t in op.result_types)
  if any(not t.static for t in op.result_types):
    raise op.error(f"custom call @{name} has dynamic result shapes")
  return custom_call_p.bind(
    *[as_jax(x) for x in operands],
    target=name,
    wrapped=op.runner.wrapped,
    attributes=attributes,
    results=results,
  )


# --- other custom calls: the same call, as a primitive -----------------------------------

custom_call_p = Primitive("stablehlo.custom_call")
custom_call_p.multiple_results = True


class NoDerivativeError(errors.TFPrimsError, LookupError):
  """Differentiating a custom call of a StableHLO module (it has no JAX equivalent)."""


def _abstract_eval(*avals, target, wrapped, attributes, results):
  return [jax.core.ShapedArray(shape, dtypes.canonical_dtype(dtype)) for shape, dtype in results]


def _lowering(ctx, *args, target, wrapped, attributes, results):
  types = [mlir.aval_to_ir_type(ctx.module_context, aval) for aval in ctx.avals_out]
  attrs = {name: ir.Attribute.parse(text) for name, text in attributes}
  call = ir.Operation.create(
    "stablehlo.custom_call", results=types, operands=list(args), attributes=attrs
  )
  return list(call.results)


def _jvp(primals, tangents, *, target, wrapped, **params):
  outs = custom_call_p.bind(*primals, target=target, wrapped=wrapped, **params)
  zeros = [ad.Zero(jax.typeof(o).to_tangent_aval()) for o in outs]
  if wrapped or all(type(t) is ad.Zero for t in tangents):
    return outs, zeros  # wrapped: the custom gradient's derivative is used instead
  raise NoDerivativeError(
    f"the derivative of custom call @{target} in a StableHLO module (from jax2tf): it "
    "has no JAX equivalent. Reverse mode works where jax2tf recorded the function's "
    "gradient (jax2tf.convert(..., with_gradient=True), converted in this process)"
  )


def _batch(args, dims, **params):
  size = next(a.shape[d] for a, d in zip(args, dims) if d is not None)
  moved = [
    jnp.moveaxis(a, d, 0) if d is not None else jnp.broadcast_to(a, (size,) + a.shape)
    for a, d in zip(args, dims)
  ]
  outs = lax.map(lambda xs: custom_call_p.bind(*xs, **params), moved)
  return list(outs), [0] * len(outs)


custom_call_p.def_impl(lambda *args, **params: xla.apply_primitive(custom_call_p, *args, **params))
custom_call_p.def_abstract_eval(_abstract_eval)
mlir.register_lowering(custom_call_p, _lowering)
ad.primitive_jvps[custom_call_p] = _jvp
batching.primitive_batchers[custom_call_p] = _batch
