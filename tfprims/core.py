"""TF ops as JAX primitives: one declaration per op.

``define_op`` turns an op declaration (TF op type, an impl written with
jax.numpy/lax, which TF inputs are static, which TF attrs are kept) into a
:class:`TFOp` owning a ``jax.extend.core.Primitive`` named ``tf.<OpType>`` with

* eager impl: ``apply_primitive`` (compiled and cached per shape and params);
* abstract eval: ``jax.make_jaxpr(impl).out_avals`` unless given (keeps weak
  types, shardings and shard_map's varying axes);
* lowering: ``mlir.lower_fun(impl)``, so jit gives the XLA program jnp would;
* JVP: ``jax.jvp(impl)`` unless given; ``linear=True`` ops get
  ``ad.deflinear2`` with their transpose;
* batching: ``jax.vmap(impl)`` unless given; ``batching="elementwise"``
  re-binds the same primitive so vmapped jaxprs keep the TF name.

Only public JAX APIs are used.
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Any, Callable, Mapping, Optional, Sequence, Union

import jax
import jax.numpy as jnp
import numpy as np
from jax.extend.core import Primitive
from jax.interpreters import ad, mlir, xla
from jax.interpreters import batching as jax_batching

from tfprims import errors, folding, opdefs

__all__ = [
    "TFOp", "define_op", "register_op", "unregister_op", "primitive", "get_op", "registered_ops",
    "override_jvp", "override_batching", "override_transpose", "hashable",
    "elementwise_batching", "unbroadcast",
]

_REGISTRY: dict[str, "TFOp"] = {}

JvpRule = Union[None, Callable[..., Any], Sequence[Optional[Callable[..., Any]]]]
BatchRule = Union[None, str, Callable[..., Any]]


def hashable(value: Any) -> Any:
  """Normalises a param value to something JAX can hash and print nicely.

  numpy arrays/lists become (nested) tuples of Python scalars, dtype-likes
  become ``np.dtype``; dicts and other unhashable values are rejected.
  """
  if isinstance(value, (str, bool, int, float, type(None), np.dtype, bytes)):
    return value
  if isinstance(value, np.generic):
    return value.item()
  if isinstance(value, np.ndarray):
    return value.item() if value.ndim == 0 else tuple(hashable(v) for v in value)
  if isinstance(value, (list, tuple)):
    return tuple(hashable(v) for v in value)
  if isinstance(value, type) and issubclass(value, np.generic):
    return np.dtype(value)
  if hasattr(value, "dtype") and hasattr(value, "shape"):  # a concrete jax Array
    return hashable(np.asarray(value))
  try:
    hash(value)
  except TypeError:
    raise TypeError(f"primitive params must be hashable; got {type(value).__name__}: "
                    f"{value!r}") from None
  return value


def is_concrete(value: Any) -> bool:
  """True for values known at trace time (numpy arrays and Python scalars)."""
  return isinstance(value, (np.ndarray, np.generic, int, float, bool, complex))


@dataclasses.dataclass(eq=False)
class TFOp:
  """A TF op type bound to its JAX primitive and rules.

  Calling the op binds the primitive: ``MatMul(a, b, transpose_a=False,
  transpose_b=True)``. Params are the kept TF attrs plus the static inputs.
  """
  op_type: str
  primitive: Primitive
  impl: Callable[..., Any]
  family: str
  static: Mapping[str, str]            # TF input arg name -> param name
  attrs: tuple[str, ...]
  multiple_results: bool
  canonicalize: Optional[Callable[..., dict]]
  interpret: Optional[Callable[..., Any]]
  spec: Optional[Callable[[Any], Any]]
  doc: str
  shape_rule: Optional[Callable[..., Any]] = None
  jvp_source: str = "derived"          # "derived", "explicit", "linear" or "override"
  batching_source: str = "derived"     # "derived", "elementwise", "explicit" or "override"
  transpose_source: str = "none"
  _defaults: dict = dataclasses.field(default_factory=dict, repr=False)
  _rules: dict = dataclasses.field(default_factory=dict, repr=False)
  uses_rng: bool = False

  @property
  def name(self) -> str:
    return self.primitive.name

  def __call__(self, *operands, **params):
    params = {k: hashable(v) for k, v in params.items()}
    return self.primitive.bind(*_match_varying(operands), **params)

  def prepare(self, inputs: Mapping[str, Any], attrs: Mapping[str, Any],
              node: str = "<call>") -> tuple[list, dict]:
    """Maps TF inputs (by op-def arg name) and attrs to ``(operands, params)``.

    Static inputs must be concrete (numpy); they become params, as do the kept
    attrs (op-def defaults fill missing ones). Used by the graph interpreter and
    the property-test runner alike.
    """
    operands, params = [], {}
    names = opdefs.input_arg_names(self.op_type) or tuple(inputs)
    for arg in names:
      value = inputs[arg]
      if arg in self.static:
        values = value if isinstance(value, list) else [value]
        if not all(is_concrete(v) for v in values):
          raise errors.StaticInputError(self.op_type, node, arg)
        params[self.static[arg]] = opdefs.to_param(
            [np.asarray(v) for v in value] if isinstance(value, list) else value)
      elif isinstance(value, list):
        operands.extend(value)
      else:
        operands.append(value)
    for name in self.attrs:
      if name in attrs:
        params[name] = hashable(attrs[name])
        continue
      inferred = opdefs.infer_type_attr(self.op_type, name, inputs)
      if inferred is not None:  # a type attr: the dtype of the input it types
        params[name] = inferred
        continue
      try:
        params[name] = hashable(opdefs.attr_default(self.op_type, name))
      except KeyError:
        raise errors.OpError(self.op_type, node, f"missing attr {name!r}") from None
    if self.canonicalize is not None:
      params = self.canonicalize(params, *operands)
    return operands, params

  def apply(self, operands: Sequence[Any], params: Mapping[str, Any]):
    """Folds when every operand is concrete, binds the primitive otherwise
    (``params`` as :meth:`prepare` made them: already hashable)."""
    if all(is_concrete(o) for o in operands):
      return self.fold(*operands, **params)
    return self.primitive.bind(*_match_varying(operands), **params)

  def fold(self, *operands, **params):
    """Evaluates the op on concrete values at trace time (constant folding): with
    numpy where that is exactly XLA's result (tfprims.folding), else with XLA."""
    out = folding.fold(self.impl, operands, params)
    if out is None:
      with jax.ensure_compile_time_eval():
        out = self.impl(*operands, **params)
      out = out if self.multiple_results else [out]
    out = [np.asarray(o) for o in out]
    return out if self.multiple_results else out[0]

  def __repr__(self):
    return f"<TFOp {self.op_type} ({self.family})>"


_INVARIANT = frozenset()


def _varying_axes(x) -> frozenset:
  aval = getattr(x, "aval", None)  # numpy constants have none, and no varying axes
  axis_type = getattr(aval, "manual_axis_type", None)
  return axis_type.varying if axis_type is not None else _INVARIANT


def _match_varying(operands):
  """Inside shard_map, casts operands that vary over fewer manual axes than others
  to varying, as lax's own binary ops do: the transpose of that cast is the psum
  that gives an invariant operand (a replicated weight) an invariant cotangent."""
  if len(operands) < 2:
    return operands
  varying = [_varying_axes(o) for o in operands]
  union = _INVARIANT.union(*varying)
  if not union:
    return operands
  return [jax.lax.pcast(o, tuple(sorted(union - v)), to="varying") if union - v else o
          for o, v in zip(operands, varying)]


def _default_abstract_eval(impl, multiple_results):
  def abstract_eval(*avals, **params):
    out = jax.make_jaxpr(functools.partial(impl, **params))(*avals).out_avals
    return list(out) if multiple_results else out[0]
  return abstract_eval


def _plain(aval) -> bool:
  """An aval shortcut rules may handle: unsharded, outside shard_map, with integer
  (not symbolic, jax.export-polymorphic) dims."""
  sharding = getattr(aval, "sharding", None)
  return ((sharding is None or sharding.mesh.empty)
          and all(type(d) is int for d in aval.shape))


def _shape_rule_abstract_eval(shape_rule, derive, multiple_results):
  """Output avals from an explicit shape rule: far cheaper than tracing the impl,
  which matters on a model's first trace (each new shape is a new signature)."""
  def abstract_eval(*avals, **params):
    out = shape_rule(*avals, **params) if all(_plain(a) for a in avals) else None
    if out is None:
      # Shardings, shard_map's manual axes and symbolic dims must propagate (or the
      # rule declined): trace the impl with the real avals.
      return derive(*avals, **params)
    avals_out = [jax.core.ShapedArray(o.shape, o.dtype, weak_type=bool(o.weak_type))
                 for o in (out if multiple_results else [out])]
    return avals_out if multiple_results else avals_out[0]
  return abstract_eval


def _elementwise_abstract_eval(impl, multiple_results):
  """For ops that broadcast elementwise: output shape by broadcasting, dtypes by
  tracing the impl on scalars. One trace per (dtypes, params) serves every shape,
  so a model's first trace does not re-trace AddV2 for each activation size."""
  derive = _default_abstract_eval(impl, multiple_results)

  @functools.lru_cache(maxsize=None)
  def scalar_avals(operand_types, params, x64):  # output dtypes depend on x64
    return derive(*(jax.ShapeDtypeStruct((), d, weak_type=w) for d, w in operand_types),
                  **dict(params))

  def abstract_eval(*avals, **params):
    if not all(_plain(a) for a in avals):
      # Shardings, shard_map's manual axes and symbolic dims must propagate: trace
      # the impl with the real avals.
      return derive(*avals, **params)
    shape = np.broadcast_shapes(*(a.shape for a in avals))
    out = scalar_avals(tuple((a.dtype, a.weak_type) for a in avals),
                       tuple(sorted(params.items())), bool(jax.config.jax_enable_x64))
    if multiple_results:
      return [o.update(shape=shape) for o in out]
    return out.update(shape=shape)
  return abstract_eval


def _generic_jvp(prim, impl):
  """Tangent from ``jax.jvp(impl)``; the primal stays the TF primitive."""
  def rule(primals, tangents, **params):
    live = [i for i, t in enumerate(tangents) if type(t) is not ad.Zero]

    def f(*live_args):
      args = list(primals)
      for i, v in zip(live, live_args):
        args[i] = v
      return impl(*args, **params)

    _, tangent_out = jax.jvp(f, [primals[i] for i in live], [tangents[i] for i in live])
    primal_out = prim.bind(*primals, **params)
    if prim.multiple_results:
      return primal_out, list(tangent_out)
    return primal_out, tangent_out
  return rule


def _generic_batching(impl, multiple_results):
  def rule(args, dims, **params):
    out = jax.vmap(functools.partial(impl, **params), in_axes=tuple(dims), out_axes=0)(*args)
    return (list(out), [0] * len(out)) if multiple_results else (out, 0)
  return rule


def elementwise_batching(prim):
  """Batching by re-binding ``prim``: TF (numpy) broadcasting is right-aligned, so
  batched operands get their batch axis in front and are padded to the output rank."""
  def rule(args, dims, **params):
    out_rank = max(np.ndim(a) - (d is not None) for a, d in zip(args, dims))
    moved = []
    for a, d in zip(args, dims):
      if d is None:
        moved.append(a)
        continue
      a = jnp.moveaxis(a, d, 0) if d != 0 else a
      pad = out_rank - (a.ndim - 1)
      if pad:
        a = jax.lax.expand_dims(a, tuple(range(1, 1 + pad)))
      moved.append(a)
    out = prim.bind(*moved, **params)
    return (out, [0] * len(out)) if prim.multiple_results else (out, 0)
  return rule


def call_op(op_type: str, inputs: Mapping[str, Any], attrs: Optional[Mapping[str, Any]] = None):
  """Binds the registered TF op ``op_type`` given its inputs by op-def arg name
  (static inputs as numpy values) and attrs, as a graph node would: for rules
  written with TF ops."""
  op = get_op(op_type)
  operands, params = op.prepare(inputs, attrs or {})
  return op(*operands, **params)


def unbroadcast(x, shape):
  """Sums ``x`` down to ``shape`` (the transpose of TF's implicit broadcasting),
  with tf.Sum and tf.Reshape so gradient jaxprs keep TF names."""
  shape = tuple(shape)
  if tuple(x.shape) == shape:
    return x
  lead = x.ndim - len(shape)
  axes = tuple(range(lead)) + tuple(
      lead + i for i, n in enumerate(shape) if n == 1 and x.shape[lead + i] != 1)
  if axes:
    x = call_op("Sum", {"input": x, "reduction_indices": np.asarray(axes, np.int32)},
                {"keep_dims": False})
  if tuple(x.shape) != shape:
    x = call_op("Reshape", {"tensor": x, "shape": np.asarray(shape, np.int64)})
  return x


def _zero_safe_transpose(rule):
  """Wraps a transpose rule so a symbolic-zero cotangent yields symbolic zeros."""
  def wrapped(ct, *args, **params):
    if type(ct) is ad.Zero:
      return [ad.Zero(a.aval) if ad.is_undefined_primal(a) else None for a in args]
    return rule(ct, *args, **params)
  return wrapped


def define_op(
    op_type: str,
    impl: Callable[..., Any],
    *,
    family: str = "custom",
    static: Union[Sequence[str], Mapping[str, str]] = (),
    attrs: Sequence[str] = (),
    multiple_results: bool = False,
    abstract_eval: Optional[Callable[..., Any]] = None,
    shape_rule: Optional[Callable[..., Any]] = None,
    lowering: Optional[Callable[..., Any]] = None,
    jvp: JvpRule = None,
    linear: bool = False,
    transpose: Optional[Callable[..., Any]] = None,
    batching: BatchRule = None,
    canonicalize: Optional[Callable[..., dict]] = None,
    interpret: Optional[Callable[..., Any]] = None,
    spec: Optional[Callable[[Any], Any]] = None,
    replace: bool = False,
) -> TFOp:
  """Declares a TF op as a JAX primitive named ``tf.<op_type>``.

  Args:
    op_type: the TF op type (``"MatMul"``).
    impl: ``impl(*operands, **params)`` in jax.numpy/lax. Operands are the op's
      non-static TF inputs in op-def order (list inputs flattened); params are
      the kept attrs and the static inputs.
    family: the op family (used in docs and reports).
    static: TF input args resolved at trace time and passed as params
      (``("shape",)``, or ``{"reduction_indices": "axis"}`` to rename).
    attrs: TF attrs kept as params (missing ones take the op def's default).
    multiple_results: whether impl returns a tuple of arrays.
    abstract_eval: explicit shape/dtype rule; default derives it from impl (for
      ``batching="elementwise"`` ops: dtypes from impl on scalars, shape by broadcasting).
    shape_rule: ``shape_rule(*avals, **params)`` -> ``jax.ShapeDtypeStruct`` (a
      list with ``multiple_results``), or None to decline: a cheap abstract eval
      for unsharded operands of static shape; others still derive it from impl. tests/test_registry.py
      checks every shape rule against the derived abstract eval.
    lowering: an MLIR lowering rule (``mlir.register_lowering`` signature); the
      default lowers ``impl`` with ``mlir.lower_fun``.
    jvp: ``None`` derives the tangent with ``jax.jvp(impl)``; a sequence gives one
      rule per operand (``ad.defjvp``: ``rule(t, *primals, **params)``, ``None``
      for non-differentiable operands); a callable is the full
      ``rule(primals, tangents, **params)``.
    linear: the op is linear in all operands jointly; its JVP applies the op to
      the tangents and ``transpose`` is required.
    transpose: ``rule(ct, *args, **params)`` returning one cotangent (or None)
      per operand; symbolic-zero cotangents are handled for you.
    batching: ``None`` derives it with ``jax.vmap(impl)``; ``"elementwise"``
      re-binds the primitive with batch axes in front; a callable is a
      ``rule(args, dims, **params) -> (out, out_dim)``.
    canonicalize: ``canonicalize(params, *operand_avals) -> params``, applied by
      the graph interpreter before binding (e.g. to normalise negative axes).
    interpret: an interpreter hook ``interpret(node, inputs) -> list of outputs``
      replacing the default prepare/fold/bind (for Shape, Identity, ...); ``node``
      is a :class:`tfprims.graph.Node` (``node.name``, ``node.op``,
      ``node.attr(name)``), ``inputs`` the flat list of input values (numpy
      arrays when concrete, JAX values otherwise).
    spec: ``spec(st) -> tfprims.testing.Spec`` for the property tests (``st`` is
      ``tfprims.testing.strategies``).
    replace: allow replacing an already registered op of the same type.
  """
  if op_type in _REGISTRY and not replace:
    raise ValueError(f"TF op {op_type!r} is already registered; pass replace=True "
                     "to redefine it")
  # JAX's batching machinery passes ``args``/``dims`` positionally to rules.
  reserved = {"args", "dims"} & (set(attrs) | set(
      static.values() if isinstance(static, Mapping) else static))
  if reserved:
    raise ValueError(f"{op_type}: params may not be named {sorted(reserved)} "
                     "(JAX reserves them in batching rules); rename them with static={...}")
  if linear and transpose is None:
    raise ValueError(f"{op_type}: linear=True needs a transpose rule")
  prim = Primitive(f"tf.{op_type}")
  prim.multiple_results = multiple_results
  prim.def_impl(functools.partial(xla.apply_primitive, prim))
  if abstract_eval is None:
    if shape_rule is not None:
      abstract_eval = _shape_rule_abstract_eval(
          shape_rule, _default_abstract_eval(impl, multiple_results), multiple_results)
    else:
      abstract_eval = (_elementwise_abstract_eval if batching == "elementwise"
                       else _default_abstract_eval)(impl, multiple_results)
  prim.def_abstract_eval(abstract_eval)
  mlir.register_lowering(prim, lowering or mlir.lower_fun(impl, multiple_results=multiple_results))

  static = dict(static) if isinstance(static, Mapping) else {s: s for s in static}
  op = TFOp(op_type=op_type, primitive=prim, impl=impl, family=family, static=static,
            attrs=tuple(attrs), multiple_results=multiple_results,
            canonicalize=canonicalize, interpret=interpret, spec=spec,
            doc=(impl.__doc__ or "").strip(), shape_rule=shape_rule)

  if linear:
    ad.deflinear2(prim, transpose)
    op.jvp_source, op.transpose_source = "linear", "explicit"
  else:
    if jvp is None:
      ad.primitive_jvps[prim] = _generic_jvp(prim, impl)
    elif callable(jvp):
      ad.primitive_jvps[prim] = jvp
      op.jvp_source = "explicit"
    else:
      ad.defjvp(prim, *jvp)
      op.jvp_source = "explicit"
    if transpose is not None:
      ad.primitive_transposes[prim] = _zero_safe_transpose(transpose)
      op.transpose_source = "explicit"

  if batching is None:
    batching_rule = _generic_batching(impl, multiple_results)
  elif batching == "elementwise":
    batching_rule, op.batching_source = elementwise_batching(prim), "elementwise"
  elif callable(batching):
    batching_rule, op.batching_source = batching, "explicit"
  else:
    raise ValueError(f"{op_type}: unknown batching {batching!r}")
  jax_batching.primitive_batchers[prim] = batching_rule

  op._defaults = {
      "jvp": (ad.primitive_jvps.get(prim), op.jvp_source),
      "transpose": (ad.primitive_transposes.get(prim), op.transpose_source),
      "batching": (batching_rule, op.batching_source),
  }
  op._rules = {kind: rule for kind, (rule, _) in op._defaults.items()}
  _REGISTRY[op_type] = op
  return op


# The public name for library authors adding their own ops.
register_op = define_op


def unregister_op(op_type: str) -> TFOp:
  """Removes an op from the registry (graphs using it no longer convert); returns it.

  ``define_op(..., replace=True)`` or re-registering the returned op's declaration
  brings it back; its primitive keeps working for code that already holds it.
  """
  return _REGISTRY.pop(get_op(op_type).op_type)


def install_op(op: TFOp) -> None:
  """Puts a previously registered (e.g. unregistered) :class:`TFOp` back in the registry."""
  _REGISTRY[op.op_type] = op


def get_op(op_type: str) -> TFOp:
  """The :class:`TFOp` registered for ``op_type`` (raises KeyError with a hint)."""
  try:
    return _REGISTRY[op_type]
  except KeyError:
    raise KeyError(f"no TF op {op_type!r} is registered; see tfprims.registered_ops() "
                   "or register it with tfprims.register_op") from None


def primitive(op_type: str) -> Primitive:
  """The JAX primitive of a registered TF op: ``tfprims.primitive("MatMul")``."""
  return get_op(op_type).primitive


def registered_ops() -> tuple[str, ...]:
  """Sorted names of all registered TF op types."""
  return tuple(sorted(_REGISTRY))


def all_ops() -> tuple[TFOp, ...]:
  return tuple(_REGISTRY[k] for k in sorted(_REGISTRY))


def _override(op_type: str, kind: str, table, rule, wrap=lambda r: r):
  # JAX's batcher table is write-only, so each op tracks the rules it installed.
  op = get_op(op_type)
  previous = op._rules[kind]
  if rule is None:
    installed, source = op._defaults[kind]
  else:
    installed, source = wrap(rule), "override"
  if installed is None:
    if previous is not None:
      del table[op.primitive]
  else:
    table[op.primitive] = installed
  op._rules[kind] = installed
  setattr(op, f"{kind}_source", source)
  return previous


def override_jvp(op_type: str, rule: Optional[Callable[..., Any]]) -> Callable[..., Any]:
  """Replaces an op's JVP rule ``rule(primals, tangents, **params) -> (out, tangent)``.

  ``rule=None`` restores the op's own rule. Returns the rule that was in effect.
  """
  return _override(op_type, "jvp", ad.primitive_jvps, rule)


def override_transpose(op_type: str, rule: Optional[Callable[..., Any]]) -> Callable[..., Any]:
  """Replaces an op's transpose rule ``rule(ct, *args, **params)`` (None restores)."""
  return _override(op_type, "transpose", ad.primitive_transposes, rule, _zero_safe_transpose)


def override_batching(op_type: str, rule: Optional[Callable[..., Any]]) -> Callable[..., Any]:
  """Replaces an op's batching rule ``rule(args, dims, **params) -> (out, out_dims)``.

  ``rule=None`` restores the op's own rule. Returns the rule that was in effect.
  """
  return _override(op_type, "batching", jax_batching.primitive_batchers, rule)
