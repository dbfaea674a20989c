"""``XlaCallModule``: a serialized StableHLO module called from a TF graph.

``jax2tf.convert`` (native serialization, the only mode in jax 0.10) turns a JAX
function into one ``XlaCallModule`` op whose ``module`` attr is the function's
StableHLO, serialized as a portable (VHLO bytecode) artifact. ``tf.XlaCallModule``
binds it as a primitive:

* abstract eval: the op's ``Sout``/``Tout`` attrs (static shapes only);
* lowering: the module is deserialized in the caller's MLIR context, its
  functions are merged into the module being lowered
  (``jax.interpreters.mlir.merge_mlir_modules``) and its ``main`` is called;
  with several ``platforms`` the platform index argument is passed, as JAX's own
  ``jax.export`` calling convention requires;
* eager: ``apply_primitive`` (compiled once per signature);
* batching: ``lax.map`` over the batch (the module has fixed shapes, so it runs
  once per example, sequentially);
* differentiation: the module is opaque to JAX. Its JVP emits the tangent as
  ``tf.XlaCallModule.tangent``, a marker whose value and transpose raise
  :class:`NonDifferentiableModuleError`. Under ``jax2tf.convert(...,
  with_gradient=True)`` the module is wrapped in a ``tf.custom_gradient`` whose
  gradient function is another ``XlaCallModule``: reverse mode uses it and never
  reads the marker (tfprims.ops.custom_gradients), and forward mode is derived from
  it too (see there). Without ``with_gradient`` every derivative raises.

Only public JAX APIs are used (``jax.interpreters.mlir``,
``jax.extend.mlir.dialects``).
"""

from __future__ import annotations

import functools
import hashlib
import warnings

import jax
import numpy as np
from jax.extend.core import Primitive
from jax.extend.mlir.dialects import func as func_dialect
from jax.extend.mlir.dialects import stablehlo as hlo
from jax.interpreters import ad, batching, mlir

from tfprims import dtypes, errors, stablehlo
from tfprims.core import register_op, tfops
from tfprims.ops import custom_gradients

from tfprims.ops.xla._common import FAMILY

ir = mlir.ir

# The XlaCallModule calling-convention versions this lowering implements (those
# jax.export writes; >= 9 passes ordered-effect tokens, which we refuse).
MIN_VERSION, MAX_VERSION = 5, 10

# TF's platform names -> JAX's lowering platforms.
_PLATFORMS = {"CPU": "cpu", "CUDA": "cuda", "ROCM": "rocm", "TPU": "tpu"}


class XlaCallModuleError(errors.ConversionError):
  """An XlaCallModule op that tfprims cannot call (polymorphic shapes, tokens,
  custom function_list, a module not serialized for this platform, ...)."""


class NonDifferentiableModuleError(errors.TFPrimsError, LookupError):
  """Differentiating an XlaCallModule op without a custom gradient.

  The embedded StableHLO is opaque to JAX; only ``jax2tf.convert(...,
  with_gradient=True)`` (the default) records a gradient function with it.
  """


class SerializedModule:
  """The ``module`` attr as a primitive param: hashed and compared by content, printed
  short (``<StableHLO 921 bytes 1a2b3c4d>``) so jaxprs stay readable."""

  __slots__ = ("data", "_digest")

  def __init__(self, data: bytes):
    self.data = bytes(data)
    self._digest = hashlib.sha256(self.data).hexdigest()[:8]

  def __eq__(self, other):
    return isinstance(other, SerializedModule) and other.data == self.data

  def __hash__(self):
    return hash(self.data)

  def __repr__(self):
    return f"<StableHLO {len(self.data)} bytes {self._digest}>"


def _where(node) -> str:
  return f"XlaCallModule node '{node.name}'" if node is not None else "an XlaCallModule op"


def _deserialize(context, module: bytes):
  try:
    return hlo.deserialize_portable_artifact(context, module)
  except Exception:  # not a portable artifact: try textual/bytecode MLIR
    return ir.Module.parse(module, context=context)


# --- the primitive ---------------------------------------------------------------------


def _call_impl(*args, module, version, Sout, Tout, platforms):
  """Calls the module's main function on ``args`` (the lowering inlines it)."""
  return tfops.XlaCallModule(
    *args, module=module, version=version, Sout=Sout, Tout=Tout, platforms=platforms
  )


def _abstract_eval(*avals, module, version, Sout, Tout, platforms):
  return [
    jax.core.ShapedArray(shape, dtypes.canonical_dtype(dtype)) for shape, dtype in zip(Sout, Tout)
  ]


def _shape(t):
  try:
    return tuple(ir.RankedTensorType(t).shape)
  except (TypeError, ValueError):
    return None


def _lowering(ctx, *args, module, version, Sout, Tout, platforms):
  mc = ctx.module_context
  sub = _deserialize(mc.context, module.data)
  symtab = ir.SymbolTable(sub.operation)
  callee_type = symtab["main"].type
  name = mlir.merge_mlir_modules(mc.module, "xla_call_module", sub, dst_symtab=mc.symbol_table)
  call_args = []
  if len(platforms) > 1:
    # The module takes the index of the platform it runs on as its first argument.
    lowering = tuple(mc.platforms)
    if len(lowering) != 1:
      raise XlaCallModuleError(
        f"XlaCallModule: multi-platform lowering {lowering} of a module serialized for "
        f"{platforms} is not supported; lower for one platform"
      )
    index = [_PLATFORMS.get(p, p.lower()) for p in platforms].index(lowering[0])
    idx = mlir.ir_constant(np.int32(index))
    if idx.type != callee_type.inputs[0]:
      idx = hlo.convert(callee_type.inputs[0], idx)
    call_args.append(idx)
  params_types = list(callee_type.inputs)[len(call_args) :]
  if len(params_types) != len(args):
    raise XlaCallModuleError(
      f"XlaCallModule: the module takes {len(params_types)} "
      f"arguments, the op has {len(args)} inputs"
    )
  for k, (a, t) in enumerate(zip(args, params_types)):  # 64-bit types, x64 off: convert
    if a.type != t and _shape(t) != _shape(a.type):
      raise XlaCallModuleError(
        f"XlaCallModule: argument {k} has type {a.type}, the module "
        f"expects {t} (shapes must match the serialized module)"
      )
    call_args.append(a if a.type == t else hlo.convert(t, a))
  call = func_dialect.CallOp(list(callee_type.results), ir.FlatSymbolRefAttr.get(name), call_args)
  outs = []
  for r, aval in zip(call.results, ctx.avals_out):
    t = mlir.aval_to_ir_type(mc, aval)
    outs.append(r if r.type == t else hlo.convert(t, r))
  return outs


# --- differentiation: an opaque module has no derivative ----------------------------------

tangent_p = Primitive("tf.XlaCallModule.tangent")
tangent_p.multiple_results = True


def _no_derivative(what: str):
  return NonDifferentiableModuleError(
    f"{what} of an XlaCallModule op (a function serialized by jax2tf): its StableHLO is "
    "opaque to JAX. Convert the JAX function with jax2tf.convert(..., "
    "with_gradient=True) (the default), whose tf.custom_gradient tfprims uses; or "
    "call the original JAX function"
  )


def _tangent_impl(*operands, n_args, wrapped, **params):
  if wrapped:  # only a custom gradient reads it, and it ignores the value
    return [np.zeros(s, dtypes.canonical_dtype(t)) for s, t in zip(params["Sout"], params["Tout"])]
  raise _no_derivative("the forward-mode derivative (jax.jvp, jacfwd)")


def _tangent_abstract_eval(*avals, n_args, wrapped, **params):
  return [a.to_tangent_aval() for a in _abstract_eval(**params)]


def _tangent_lowering(ctx, *args, n_args, wrapped, **params):
  if wrapped:
    return [mlir.ir_constant(np.zeros(a.shape, a.dtype)) for a in ctx.avals_out]
  raise _no_derivative("the forward-mode derivative (jax.jvp, jacfwd)")


def _tangent_transpose(cts, *operands, n_args, wrapped, **params):
  if all(type(c) is ad.Zero for c in cts):  # unused (as under a custom gradient)
    return [ad.Zero(x.aval) if ad.is_undefined_primal(x) else None for x in operands]
  raise _no_derivative("the reverse-mode derivative (jax.grad, vjp)")


def _tangent_batch(args, dims, *, n_args, wrapped, **params):
  # Never evaluated successfully: keep the shapes right, move the batch axis out.
  size = next(a.shape[d] for a, d in zip(args, dims) if d is not None)
  moved = [
    jax.numpy.moveaxis(a, d, 0) if d is not None else jax.numpy.broadcast_to(a, (size,) + a.shape)
    for a, d in zip(args, dims)
  ]
  outs = jax.lax.map(
    lambda xs: tangent_p.bind(*xs, n_args=n_args, wrapped=wrapped, **params), moved
  )
  return list(outs), [0] * len(outs)


tangent_p.def_impl(_tangent_impl)
tangent_p.def_abstract_eval(_tangent_abstract_eval)
mlir.register_lowering(tangent_p, _tangent_lowering)
ad.primitive_transposes[tangent_p] = _tangent_transpose
batching.primitive_batchers[tangent_p] = _tangent_batch


def _jvp(primals, tangents, **params):
  outs = tfops.XlaCallModule(*primals, **params)
  if all(type(t) is ad.Zero for t in tangents):
    return outs, [ad.Zero(jax.typeof(o).to_tangent_aval()) for o in outs]
  # tangent_p is linear in the tangents (its first operands); primals are residuals.
  ts = [ad.instantiate_zeros(t) for t in tangents]
  wrapped = custom_gradients.wraps_module(params["module"].data)
  return outs, tangent_p.bind(*ts, *primals, n_args=len(primals), wrapped=wrapped, **params)


def _tangent_jvp(primals, tangents, *, n_args, wrapped, **params):
  if wrapped:  # a constant (zeros): its derivative is zero
    outs = tangent_p.bind(*primals, n_args=n_args, wrapped=wrapped, **params)
    return outs, [ad.Zero(jax.typeof(o).to_tangent_aval()) for o in outs]
  raise _no_derivative("a higher-order derivative")


ad.primitive_jvps[tangent_p] = _tangent_jvp


# --- batching -------------------------------------------------------------------------


def _batch(args, dims, **params):
  """One module call per example (``lax.map``): the module's shapes are fixed."""
  batched = [i for i, d in enumerate(dims) if d is not None]
  xs = [jax.numpy.moveaxis(args[i], dims[i], 0) for i in batched]

  def one(slices):
    full = list(args)
    for i, s in zip(batched, slices):
      full[i] = s
    return tfops.XlaCallModule(*full, **params)

  outs = jax.lax.map(one, xs)
  return list(outs), [0] * len(outs)


# --- the interpreter hook -----------------------------------------------------------------


def _interpret(ctx, node, inputs):
  where = _where(node)
  version = int(node.attr("version"))
  if not MIN_VERSION <= version <= MAX_VERSION:
    raise XlaCallModuleError(
      f"{where}: calling-convention version {version} is not "
      f"supported (supported: {MIN_VERSION}..{MAX_VERSION})"
    )
  if node.attr("function_list", ()):
    raise XlaCallModuleError(
      f"{where}: modules calling TF functions (function_list, from "
      "jax2tf's call_tf) are not supported"
    )
  if node.attr("has_token_input_output", False):
    raise XlaCallModuleError(
      f"{where}: modules with token inputs/outputs (ordered "
      "effects, host callbacks) are not supported"
    )
  if node.attr("dim_args_spec", ()):
    raise XlaCallModuleError(f"{where}: dimension arguments (dim_args_spec) are not supported")
  platforms = tuple(node.attr("platforms", ()))
  _check_platform(ctx, node, platforms)
  module = bytes(node.attr("module"))
  if ctx.option("xla_call_module") == "read":
    outs = _read(ctx, node, module, platforms, inputs)
    if outs is not None:
      return outs
  custom_gradients.opaque_modules(ctx).add(module)
  sout = tuple(node.attr("Sout"))
  if any(s is None or any(d is None for d in s) for s in sout):
    raise XlaCallModuleError(
      f"{where}: its output shapes {[list(s) if s is not None else None for s in sout]} "
      "are not static (a function converted with jax2tf polymorphic_shapes); "
      "called as one operation it needs static shapes: convert the JAX function for "
      "concrete shapes"
    )
  params = _canonicalize(
    dict(module=module, version=version, Sout=sout, Tout=node.attr("Tout"), platforms=platforms)
  )
  return list(tfops.XlaCallModule(*[jax.numpy.asarray(x) for x in inputs], **params))


_WARNED: set = set()


def _read(ctx, node, module: bytes, platforms, inputs):
  """The module's operations run as JAX operations (tfprims.stablehlo), or None
  when it cannot be read (with a warning naming why, once per module)."""
  index = None
  if len(platforms) > 1:
    names = [_PLATFORMS.get(p, p.lower()) for p in platforms]
    backend = jax.default_backend()
    index = names.index(backend) if backend in names else 0
  why = stablehlo.unreadable(module, inputs, platform_index=index)
  if why is not None:
    if module not in _WARNED:
      _WARNED.add(module)
      warnings.warn(
        f"{_where(node)}: its StableHLO is called as one operation (no "
        f"vmap except one call per example, no derivative of its own): {why}",
        stacklevel=2,
      )
    return None
  if not stablehlo.differentiable(module):  # derivatives from jax2tf's gradient, if any
    custom_gradients.opaque_modules(ctx).add(module)
  outs = stablehlo.call_module(
    module, inputs, platform_index=index, wrapped=custom_gradients.wraps_module(module)
  )
  return [stablehlo.as_jax(o, np.dtype(t)) for o, t in zip(outs, node.attr("Tout"))]


def _check_platform(ctx, node, platforms) -> None:
  """The module must have been serialized for this JAX backend. With the
  ``xlacallmodule_strict_checks`` config off (tf2jax's), a module serialized for one
  other platform runs anyway (its StableHLO is usually portable); a multi-platform
  module takes the index of a platform it was lowered for, so it is still refused."""
  backend = jax.default_backend()
  if not platforms or backend in [_PLATFORMS.get(p, p.lower()) for p in platforms]:
    return
  where = _where(node)
  found = f"Unsupported backend: {backend!r} not in {list(platforms)}"
  if len(platforms) == 1 and not ctx.option("xlacallmodule_strict_checks"):
    warnings.warn(
      f"{where}: {found}; running it anyway (xlacallmodule_strict_checks "
      "is off): it may be slower or fail to compile",
      stacklevel=2,
    )
    return
  fix = f"convert with jax2tf.convert(..., native_serialization_platforms=('{backend}', ...))"
  if len(platforms) == 1:
    fix += ", or run it anyway with tfprims.update_config('xlacallmodule_strict_checks', False)"
  raise XlaCallModuleError(
    f"{where}: {found}: the module was serialized for "
    f"{list(platforms)}, not for this JAX backend; {fix}"
  )


def _canonicalize(params, *args):
  """The attrs of a drawn call (``op.prepare``) as the interpreter hook makes them."""
  module = params["module"]
  if not isinstance(module, SerializedModule):
    module = SerializedModule(module.encode("utf-8") if isinstance(module, str) else bytes(module))
  return dict(
    params,
    module=module,
    version=int(params["version"]),
    Sout=tuple(tuple(int(d) for d in s) for s in params["Sout"]),
    Tout=tuple(np.dtype(t) for t in params["Tout"]),
    platforms=tuple(params["platforms"]),
  )


# --- property spec: modules exported from a few JAX functions ------------------------
# Both sides run the same StableHLO, so the checks test the call itself: merging and
# calling the module, its calling convention, abstract eval, eager/jit, batching.

_SPEC_FUNCTIONS = {
  "sin_cos": (1, lambda x: (jax.numpy.sin(x), jax.numpy.cos(x) * 2)),
  "where": (2, lambda x, y: jax.numpy.where(x > y, x - y, y * 3)),
  "reductions": (
    1,
    lambda x: (
      jax.numpy.sum(x),
      jax.numpy.cumsum(x.reshape(-1)),
      jax.numpy.max(x, initial=0).astype(x.dtype),
    ),
  ),
  "outer": (2, lambda x, y: jax.numpy.outer(x, y)),
}


@functools.lru_cache(maxsize=None)  # every check draws the same few signatures again
def _exported(name: str, shape: tuple, dtype: np.dtype):
  arity, fn = _SPEC_FUNCTIONS[name]
  args = [jax.ShapeDtypeStruct(shape, dtype)] * arity
  return jax.export.export(jax.jit(fn), platforms=["cpu"])(*args)


def _export(name: str, shape: tuple, dtype: np.dtype) -> dict:
  exported = _exported(name, shape, dtype)
  return dict(
    module=exported.mlir_module_serialized,
    version=exported.calling_convention_version,
    Sout=[list(a.shape) for a in exported.out_avals],
    Tout=[np.dtype(a.dtype) for a in exported.out_avals],
    platforms=["CPU"],
    dim_args_spec=[],
    function_list=[],
    has_token_input_output=False,
    disabled_checks=[],
  )


def tf_xla_call_module(**kwargs):
  """The property oracle: TF's ``XlaCallModule`` kernel (not in ``tf.raw_ops``)."""
  from tensorflow.compiler.tf2xla.ops import gen_xla_ops

  return gen_xla_ops.xla_call_module(**kwargs)


_NO_TF_GRADIENT = (
  "TF registers no gradient for a bare XlaCallModule (jax2tf wraps it "
  "in tf.custom_gradient; those gradients are tested in "
  "tests/test_xla_call_module.py)"
)


def _spec(st):
  @st.composite
  def calls(draw):
    name = draw(st.sampled_from(sorted(_SPEC_FUNCTIONS)))
    dtype = draw(st.dtypes(("float32", "float64", "bfloat16", "int32", "uint8")))
    shape = tuple(draw(st.shapes(max_rank=3)))
    arity = _SPEC_FUNCTIONS[name][0]
    return dict(
      args=[draw(st.arrays(dtype, shape)) for _ in range(arity)], **_export(name, shape, dtype)
    )

  return st.Spec(
    calls(), oracle=tf_xla_call_module, skip={"jvp": _NO_TF_GRADIENT, "vjp": _NO_TF_GRADIENT}
  )


XlaCallModule = register_op(
  "XlaCallModule",
  _call_impl,
  family=FAMILY,
  multiple_results=True,
  attrs=("module", "version", "Sout", "Tout", "platforms"),
  canonicalize=_canonicalize,
  abstract_eval=_abstract_eval,
  lowering=_lowering,
  jvp=_jvp,
  batching=_batch,
  interpret=_interpret,
  spec=_spec,
)
