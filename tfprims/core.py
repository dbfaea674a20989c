"""The op registry: every TF op type tfprims converts, declared once.

An op is registered in one of two ways, and the interpreter runs it one way:

* :func:`register_op` (also ``tfprims.register_op``): a :class:`TFOp` owning a
  ``jax.extend.core.Primitive`` named ``tf.<OpType>``. A node is run by
  :meth:`TFOp.prepare` (TF inputs and attrs -> operands and params) and
  :meth:`TFOp.apply` (fold when every operand is known, else bind), unless the op
  declares an ``interpret(ctx, node, inputs)`` hook (Shape answers from static
  shapes; TensorList ops keep list metadata). Rules the op does not declare are
  derived from its impl (:mod:`tfprims.derived`).
* :func:`register_structural`: a :class:`StructuralOp`, an op with no primitive
  of its own (Const, Placeholder, function calls, control flow, variable reads
  and writes), run by its ``interpret`` hook.

Both declare *what the op is* as fields (``writes_state``, ``uses_rng``,
``shape_only``, ``pass_through``, ``dynamic_shape``...). Control flow, folding,
:func:`tfprims.interpreter.check_supported`, the property runner and docs/ops.md
ask the registry; nothing keeps lists of op names elsewhere.

Rules refer to other ops through :data:`tfops` (``tfops.Sum(x, axis=(0,),
keep_dims=False)``), which looks the op up at each use: replacing an op
(``register_op(..., replace=True)``) reaches every rule that binds it.

Only public JAX APIs are used.
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Any, Callable, Mapping, Optional, Sequence, Union

import jax
import numpy as np
from jax.extend.core import Primitive
from jax.interpreters import ad, mlir, xla
from jax.interpreters import batching as jax_batching

from tfprims import config, derived, dtypes, emit, errors, folding, opdefs

__all__ = [
  "Op",
  "TFOp",
  "StructuralOp",
  "register_op",
  "register_structural",
  "declare_unsupported",
  "unregister_op",
  "install_op",
  "lookup",
  "get_op",
  "primitive",
  "registered_ops",
  "all_ops",
  "declared_op_types",
  "tfops",
  "override_jvp",
  "override_batching",
  "override_transpose",
  "register_platform_lowering",
  "hashable",
  "is_concrete",
]

_REGISTRY: dict[str, "Op"] = {}
_UNSUPPORTED_HINTS: dict[str, str] = {}

Interpret = Callable[[Any, Any, list], Sequence[Any]]
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
    raise TypeError(
      f"primitive params must be hashable; got {type(value).__name__}: {value!r}"
    ) from None
  return value


def is_concrete(value: Any) -> bool:
  """True for values known at trace time (numpy arrays and Python scalars)."""
  return isinstance(value, (np.ndarray, np.generic, int, float, bool, complex))


# --- declarations ------------------------------------------------------------------------

#: The properties an op declares about itself (fields of :class:`Op`).
PROPERTIES = (
  "writes_state",
  "reads_state",
  "uses_rng",
  "shape_only",
  "pass_through",
  "linear_values",
  "calls_functions",
  "creates_variable",
  "graph_input",
  "dynamic_shape",
)


@dataclasses.dataclass(eq=False, kw_only=True)
class Op:
  """A registered TF op type: what it is, and how a node of it runs.

  Attributes:
    op_type: the TF op type (``"MatMul"``).
    family: the op family (docs and reports).
    interpret: ``interpret(ctx, node, inputs) -> list of outputs``: runs a node
      (``ctx`` is the call's :class:`tfprims.interpreter.Context`, ``node`` a
      :class:`tfprims.graph.Node`, ``inputs`` its flat input values: numpy when
      known at trace time, JAX values otherwise). Required for structural ops;
      optional for primitive ops, whose default is prepare -> fold or bind.
    writes_state: assigns variables through the handles it is given; control
      flow threads those variables through branches and loops, and their final
      values come back in ``new_params``.
    reads_state: reads variables through the handles it is given.
    uses_rng: draws random numbers from the call's ``rng=``. A primitive op takes
      the raw ``uint32[2]`` key data as its first operand, which the interpreter
      splits off ``rng=`` for each node (callers binding it pass their own key).
    shape_only: its outputs depend on the shapes of its inputs, not their values.
    pass_through: its outputs are its inputs (Identity); analyses see through it.
    linear_values: its outputs are sums, means or copies of its inputs (every
      ``linear`` op; Mean, StopGradient): a comparison with TF judges its errors at
      its inputs' scale, where cancellation shows.
    calls_functions: runs library functions, and how: ``"call"`` (the function in
      attr ``f``), ``"if"`` (then/else_branch on its first input), ``"case"``
      (``branches``), ``"while"`` (cond and body), ``"for"``. Analyses treat its
      outputs as opaque; tools that walk into functions (tfprims.compare) follow
      the kind.
    creates_variable: creates a variable in the graph (TF1); its value is a param
      named after the node.
    graph_input: a graph input (Placeholder): its value comes from the caller.
    dynamic_shape: why its output shape depends on data (None: it does not). Such an
      op with a primitive (a :class:`TFOp`) has a padded form: its primitive takes
      the output bound as a param, and its hook binds it when the
      ``dynamic_shape_bounds`` config bounds the node.
    static_shape_if: for a ``dynamic_shape`` op, ``static_shape_if(node)`` is True
      when the node's attrs make its output shape static after all
      (NonMaxSuppressionV4/V5 with ``pad_to_max_output_size``): conversion checks
      let such nodes through.
    check: ``check(*operands, **params) -> (bad, message)`` or None: what TF's
      kernel rejects on data (``bad`` a boolean scalar, true when the values are
      invalid; None when nothing can be wrong for these dtypes/params). Run on
      known values (eager calls) always, and under jit with the ``runtime_checks``
      config; a failure raises RuntimeCheckError naming the node.
    assertion: the op exists to check its input (CheckNumerics): with the
      ``enable_checkify_for_asserts`` config its ``check`` also becomes a
      ``jax.experimental.checkify.check``.
    doc: one line saying what the op computes.
  """

  op_type: str
  family: str = "custom"
  interpret: Optional[Interpret] = None
  writes_state: bool = False
  reads_state: bool = False
  uses_rng: bool = False
  shape_only: bool = False
  pass_through: bool = False
  linear_values: bool = False
  calls_functions: Union[bool, str] = False
  creates_variable: bool = False
  graph_input: bool = False
  dynamic_shape: Optional[str] = None
  static_shape_if: Optional[Callable[[Any], bool]] = None
  check: Optional[Callable[..., Any]] = None
  assertion: bool = False
  doc: str = ""

  @property
  def takes_handles(self) -> bool:
    """Whether the op may receive values that are not tensors (variable handles,
    string constants): the interpreter refuses them for every other op."""
    return self.reads_state or self.writes_state or self.pass_through

  @property
  def properties(self) -> tuple[str, ...]:
    """The declared properties that are set, by name (docs and reports)."""
    return tuple(n for n in PROPERTIES if getattr(self, n))


@dataclasses.dataclass(eq=False, kw_only=True)
class StructuralOp(Op):
  """An op the interpreter runs by its ``interpret`` hook alone: it has no primitive
  (Const, Placeholder, PartitionedCall, If, While, ReadVariableOp...)."""

  def __repr__(self):
    return f"<StructuralOp {self.op_type} ({self.family})>"


@dataclasses.dataclass(eq=False, kw_only=True)
class TFOp(Op):
  """A TF op type bound to its JAX primitive and rules.

  Calling the op binds the primitive: ``MatMul(a, b, transpose_a=False,
  transpose_b=True)``. Params are the kept TF attrs plus the static inputs.
  """

  primitive: Primitive
  impl: Callable[..., Any]
  static: Mapping[str, str]  # TF input arg name -> param name
  attrs: tuple[str, ...]
  multiple_results: bool
  canonicalize: Optional[Callable[..., dict]] = None
  spec: Optional[Callable[[Any], Any]] = None
  shape_rule: Optional[Callable[..., Any]] = None
  symbolic: Optional[Callable[..., Any]] = None  # numpy on symbolic dims: see register_op
  jvp_source: str = "derived"  # "derived", "explicit", "linear" or "override"
  batching_source: str = "derived"  # "derived", "elementwise", "explicit" or "override"
  transpose_source: str = "none"
  lowering: Optional[Callable[..., Any]] = None  # the default MLIR rule (every platform)
  platform_lowerings: dict = dataclasses.field(default_factory=dict)  # platform -> impl
  _defaults: dict = dataclasses.field(default_factory=dict, repr=False)
  _rules: dict = dataclasses.field(default_factory=dict, repr=False)

  @property
  def name(self) -> str:
    return self.primitive.name

  def __call__(self, *operands, **params):
    params = {k: hashable(v) for k, v in params.items()}
    return self.primitive.bind(*derived.match_varying(operands), **params)

  def prepare(
    self, inputs: Mapping[str, Any], attrs: Mapping[str, Any], node: str = "<call>"
  ) -> tuple[list, dict]:
    """Maps TF inputs (by op-def arg name) and attrs to ``(operands, params)``.

    Static inputs must be concrete (numpy); they become params, as do the kept
    attrs (op-def defaults fill missing ones). Used by the graph interpreter and
    the property-test runner alike. The rng key of a ``uses_rng`` op is not a TF
    input: callers put it in front of the operands.
    """
    operands, params = [], {}
    names = opdefs.input_arg_names(self.op_type) or tuple(inputs)
    for arg in names:
      value = inputs[arg]
      if arg in self.static:  # eager calls know their computed values too
        known = [folding.known_value(v) for v in (value if isinstance(value, list) else [value])]
        if any(k is None for k in known):
          raise errors.StaticInputError(self.op_type, node, arg)
        # A list input: one param per element (their shapes may differ).
        params[self.static[arg]] = (
          tuple(hashable(np.asarray(k)) for k in known)
          if isinstance(value, list)
          else hashable(np.asarray(known[0]))
        )
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
    known = all(is_concrete(o) for o in operands)
    if known and folding.folds_wide(operands, params):
      return self._fold_wide(operands, params)
    operands = [dtypes.narrow(o, f"an operand of {self.op_type}") for o in operands]
    if known:
      return self.fold(*operands, **params)
    if folding.has_symbolic(operands):
      # Symbolic dims beside traced values (a loop bound tf.shape(x)[0] under
      # jax.export) are the program's values.
      operands = folding.materialize(operands)
    return self.primitive.bind(*derived.match_varying(operands), **params)

  def fold(self, *operands, **params):
    """Evaluates the op on concrete values at trace time (constant folding): with
    numpy where that is exactly XLA's result (tfprims.folding), else with XLA; on
    weights (:class:`tfprims.folding.Weight`) only with numpy."""
    out = folding.fold(self.impl, operands, params)
    if out is None and self.symbolic is not None and folding.has_symbolic(operands):
      out = folding.fold_symbolic(self.symbolic, operands, params)
    weights = any(folding.is_weight(o) for o in operands)
    if out is None and (
      weights or folding.has_symbolic(operands) or folding.has_symbolic_param(params)
    ):
      # The program computes it: from its constants, or from symbolic dims' values.
      return self.primitive.bind(*derived.match_varying(folding.materialize(operands)), **params)
    if out is None:
      with jax.ensure_compile_time_eval():
        out = self.impl(*operands, **params)
      out = out if self.multiple_results else [out]
    out = [folding.weight(o) if weights else np.asarray(o) for o in out]
    return out if self.multiple_results else out[0]

  def _fold_wide(self, operands, params):
    """Folds in TF's 64-bit precision while x64 is off (see :func:`dtypes.is_wide`):
    float64/complex128 results stay wide, other 64-bit ones are narrowed."""
    with jax.enable_x64(True):
      out = self.fold(*operands, **params)
    outs = [
      o if dtypes.is_wide(o) else dtypes.canonicalize_value(o, f"{self.op_type} result")
      for o in (out if self.multiple_results else [out])
    ]
    return outs if self.multiple_results else outs[0]

  def __repr__(self):
    return f"<TFOp {self.op_type} ({self.family})>"


def _check_new(op_type: str, replace: bool) -> None:
  if op_type in _REGISTRY and not replace:
    raise ValueError(
      f"TF op {op_type!r} is already registered "
      f"({_REGISTRY[op_type]!r}); pass replace=True to redefine it"
    )


def register_op(
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
  build: Optional[Callable[..., Any]] = None,
  lowerings: Optional[Mapping[str, Callable[..., Any]]] = None,
  jvp: JvpRule = None,
  linear: bool = False,
  transpose: Optional[Callable[..., Any]] = None,
  batching: BatchRule = None,
  canonicalize: Optional[Callable[..., dict]] = None,
  interpret: Optional[Interpret] = None,
  spec: Optional[Callable[[Any], Any]] = None,
  doc: Optional[str] = None,
  writes_state: bool = False,
  reads_state: bool = False,
  uses_rng: bool = False,
  shape_only: bool = False,
  pass_through: bool = False,
  linear_values: bool = False,
  dynamic_shape: Optional[str] = None,
  static_shape_if: Optional[Callable[[Any], bool]] = None,
  check: Optional[Callable[..., Any]] = None,
  assertion: bool = False,
  symbolic: Optional[Callable[..., Any]] = None,
  replace: bool = False,
) -> TFOp:
  """Declares a TF op as a JAX primitive named ``tf.<op_type>``.

  Args:
    op_type: the TF op type (``"MatMul"``).
    impl: ``impl(*operands, **params)`` in jax.numpy/lax. Operands are the op's
      non-static TF inputs in op-def order (list inputs flattened; a ``uses_rng``
      op's key first); params are the kept attrs and the static inputs.
    family: the op family (used in docs and reports).
    static: TF input args resolved at trace time and passed as params
      (``("shape",)``, or ``{"reduction_indices": "axis"}`` to rename).
    attrs: TF attrs kept as params (missing ones take the op def's default).
    multiple_results: whether impl returns a tuple of arrays.
    abstract_eval: explicit shape/dtype rule; default derives it from impl (for
      ``batching="elementwise"`` ops: dtypes from impl on scalars, shape by broadcasting).
    shape_rule: ``shape_rule(*avals, **params)`` -> ``jax.ShapeDtypeStruct`` (a
      list with ``multiple_results``), or None to decline: a cheap abstract eval
      for unsharded operands of static shape; others still derive it from impl.
      tests/test_registry.py checks every shape rule against the derived one.
    lowering: an MLIR lowering rule (``mlir.register_lowering`` signature); the
      default lowers ``impl`` with ``mlir.lower_fun``. ``build``: instead, a builder
      (``tfprims/emit.py``) emitting the op's StableHLO with no trace.
    lowerings: ``{platform: fast_impl}``: per-platform lowerings (see
      :func:`register_platform_lowering`), e.g. ``{"cpu": depthwise_as_tap_sums}``.
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
    canonicalize: ``canonicalize(params, *operands) -> params``, applied by
      :meth:`TFOp.prepare` (e.g. to normalise negative axes).
    interpret: ``interpret(ctx, node, inputs) -> list of outputs`` replacing the
      default prepare -> fold/bind for graph nodes (see :class:`Op`).
    spec: ``spec(st) -> tfprims.testing.Spec`` for the property tests (``st`` is
      ``tfprims.testing.strategies``).
    doc: what the op computes, one line (default: the impl's docstring, unless
      the impl is a jax.numpy/lax function); shown in docs/ops.md.
    writes_state, reads_state, uses_rng, shape_only, pass_through, linear_values,
    dynamic_shape, static_shape_if: what the op is (see :class:`Op`); ``linear``
      implies ``linear_values``.
    check: what TF's kernel rejects on the op's data (see :class:`Op`).
    assertion: the op exists to check its input; ``enable_checkify_for_asserts``
      turns its ``check`` into a checkify check (see :class:`Op`).
    symbolic: ``symbolic(*operands, **params)`` with numpy, for operands holding the
      symbolic dims of a jax.export (object arrays) where folding the impl's jaxpr
      cannot decide them: FloorDiv is Python's ``//`` on them, where the impl's
      truncating division needs the dividend's sign. Shape arithmetic then stays
      symbolic (``tf.signal.frame`` of an unknown length).
    replace: allow replacing an already registered op of the same type.
  ``jvp`` (or one rule of it), ``transpose``, ``batching``, ``canonicalize``, ``interpret``
  and ``spec`` may be ``rules.per_op(factory, *args)``: ``factory(op, *args)`` is installed.
  """
  _check_new(op_type, replace)
  # JAX's batching machinery passes ``args``/``dims`` positionally to rules.
  reserved = {"args", "dims"} & (
    set(attrs) | set(static.values() if isinstance(static, Mapping) else static)
  )
  if reserved:
    raise ValueError(
      f"{op_type}: params may not be named {sorted(reserved)} "
      "(JAX reserves them in batching rules); rename them with static={...}"
    )
  if linear and transpose is None:
    raise ValueError(f"{op_type}: linear=True needs a transpose rule")
  prim = Primitive(f"tf.{op_type}")
  prim.multiple_results = multiple_results
  prim.def_impl(functools.partial(xla.apply_primitive, prim))
  if abstract_eval is None:
    if shape_rule is not None:
      abstract_eval = derived.shape_rule_abstract_eval(shape_rule, impl, multiple_results)
    elif batching == "elementwise":
      abstract_eval = derived.elementwise_abstract_eval(impl, multiple_results)
    else:
      abstract_eval = derived.abstract_eval(impl, multiple_results)
  prim.def_abstract_eval(abstract_eval)
  if build is not None:
    if lowering is not None:
      raise TypeError(f"{op_type}: register_op takes one of lowering and build")
    lowering = emit.direct_lowering(build, impl, multiple_results=multiple_results)
  lowering = lowering or mlir.lower_fun(impl, multiple_results=multiple_results)
  mlir.register_lowering(prim, lowering)

  static = dict(static) if isinstance(static, Mapping) else {s: s for s in static}
  op = TFOp(
    op_type=op_type,
    primitive=prim,
    impl=impl,
    family=family,
    static=static,
    attrs=tuple(attrs),
    multiple_results=multiple_results,
    canonicalize=canonicalize,
    interpret=interpret,
    spec=spec,
    doc=_first_line(doc if doc is not None else _own_doc(impl)),
    shape_rule=shape_rule,
    writes_state=writes_state,
    reads_state=reads_state,
    uses_rng=uses_rng,
    shape_only=shape_only,
    pass_through=pass_through,
    linear_values=linear or linear_values,
    dynamic_shape=dynamic_shape,
    static_shape_if=static_shape_if,
    check=check,
    assertion=assertion,
    lowering=lowering,
    symbolic=symbolic,
  )
  jvp, transpose, batching, op.canonicalize, op.interpret, op.spec = derived.for_op(
    op, jvp, transpose, batching, canonicalize, interpret, spec
  )
  if linear:
    ad.deflinear2(prim, transpose)
    op.jvp_source, op.transpose_source = "linear", "explicit"
  else:
    if jvp is None:
      ad.primitive_jvps[prim] = derived.jvp(prim, impl)
    elif callable(jvp):
      ad.primitive_jvps[prim] = jvp
      op.jvp_source = "explicit"
    else:
      ad.defjvp(prim, *jvp)
      op.jvp_source = "explicit"
    if transpose is not None:
      ad.primitive_transposes[prim] = derived.zero_safe_transpose(transpose)
      op.transpose_source = "explicit"

  if batching is None:
    batching_rule = derived.vmap_batching(impl, multiple_results)
  elif batching == "elementwise":
    batching_rule, op.batching_source = derived.elementwise_batching(prim), "elementwise"
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
  for platform, fast_impl in (lowerings or {}).items():
    register_platform_lowering(op_type, platform, fast_impl)
  return op


def register_platform_lowering(
  op_type: str,
  platform: str,
  impl: Optional[Callable[..., Any]] = None,
  *,
  build: Optional[Callable[..., Any]] = None,
) -> None:
  """Lowers ``op_type`` on ``platform`` ("cpu", "cuda", "rocm", "tpu") as ``impl``,
  or as the builder ``build`` (tfprims/emit.py).

  ``impl`` has the op impl's signature and computes the same values in a form that
  platform's compiler runs faster (a depthwise convolution as a sum of shifted
  slices on XLA:CPU); it may call the op's own impl for the params it does not
  improve. ``build(B, *operands, **params)`` computes the same through the lax-like
  namespace ``B``, so it is emitted as StableHLO without tracing (traced for symbolic
  or sharded shapes), and returns None for the params it does not improve: those
  lower the op's own impl. Other platforms keep the default lowering. The rule reads
  the ``fast_lowerings`` config each time it lowers: off, it lowers the default
  impl, so a program compiles to what the naive JAX program gives.
  Registering again for the same platform replaces the previous one.
  """
  op = get_op(op_type)
  if (impl is None) == (build is None):
    raise TypeError("register_platform_lowering takes one of impl and build")
  if build is not None:
    impl = emit.traced(build, default=op.impl)
    fast = emit.direct_lowering(
      build, impl, multiple_results=op.multiple_results, declined=op.lowering
    )
  else:
    fast = mlir.lower_fun(impl, multiple_results=op.multiple_results)
  default = op.lowering

  def rule(ctx, *args, **params):
    if config.get_config("fast_lowerings"):
      return fast(ctx, *args, **params)
    return default(ctx, *args, **params)

  mlir.register_lowering(op.primitive, rule, platform=platform)
  op.platform_lowerings[platform] = impl


def register_structural(
  op_types: Union[str, Sequence[str]],
  interpret: Interpret,
  *,
  family: str,
  doc: str,
  replace: bool = False,
  **properties,
) -> Interpret:
  """Registers op types the interpreter runs by ``interpret(ctx, node, inputs)``
  alone, with no primitive of their own; ``properties`` are :class:`Op`'s declared
  properties (``writes_state=True``...). Returns ``interpret`` (usable as a
  decorator through ``functools.partial``)."""
  unknown = set(properties) - set(PROPERTIES)
  if unknown:
    raise TypeError(f"unknown op properties {sorted(unknown)}; known: {list(PROPERTIES)}")
  for op_type in [op_types] if isinstance(op_types, str) else op_types:
    _check_new(op_type, replace)
    _REGISTRY[op_type] = StructuralOp(
      op_type=op_type, family=family, interpret=interpret, doc=_first_line(doc), **properties
    )
  return interpret


def structural(*op_types: str, family: str, doc: str, **properties):
  """Decorator form of :func:`register_structural`."""
  return lambda fn: register_structural(op_types, fn, family=family, doc=doc, **properties)


def declare_unsupported(*op_types: str, hint: str) -> None:
  """Declares op types tfprims does not convert, with the hint an error shows."""
  for op_type in op_types:
    if op_type in _REGISTRY:
      raise ValueError(f"TF op {op_type!r} is registered; it cannot be declared unsupported")
    _UNSUPPORTED_HINTS[op_type] = hint


def unsupported_hint(op_type: str) -> Optional[str]:
  """The declared hint for an op type tfprims does not convert, if any."""
  return None if op_type in _REGISTRY else _UNSUPPORTED_HINTS.get(op_type)


def _own_doc(impl) -> Optional[str]:
  """The impl's docstring when tfprims (or the library author) wrote the impl; not
  the docstring of a jax.numpy function used as one."""
  while isinstance(impl, functools.partial):
    impl = impl.func
  module = getattr(impl, "__module__", None) or ""
  return None if module.startswith(("jax", "numpy")) else impl.__doc__


def _first_line(text: Optional[str]) -> str:
  return " ".join((text or "").strip().split("\n\n")[0].split())


# --- lookup ------------------------------------------------------------------------------


def lookup(op_type: str) -> Optional[Op]:
  """The declaration of ``op_type`` (primitive or structural), or None."""
  return _REGISTRY.get(op_type)


def unregister_op(op_type: str) -> Op:
  """Removes an op from the registry (graphs using it no longer convert); returns it.

  ``install_op`` (or re-registering its declaration) brings it back; its
  primitive keeps working for code that already holds it.
  """
  if op_type not in _REGISTRY:
    get_op(op_type)  # raises with a hint
  return _REGISTRY.pop(op_type)


def install_op(op: Op) -> None:
  """Puts a previously registered (e.g. unregistered) op back in the registry."""
  _REGISTRY[op.op_type] = op


def get_op(op_type: str) -> TFOp:
  """The :class:`TFOp` registered for ``op_type`` (raises KeyError with a hint)."""
  op = _REGISTRY.get(op_type)
  if isinstance(op, TFOp):
    return op
  if op is not None:
    raise KeyError(
      f"TF op {op_type!r} has no primitive: the interpreter runs it "
      "(tfprims.core.lookup returns its declaration)"
    )
  raise KeyError(
    f"no TF op {op_type!r} is registered; see tfprims.registered_ops() "
    "or register it with tfprims.register_op"
  )


def primitive(op_type: str) -> Primitive:
  """The JAX primitive of a registered TF op: ``tfprims.primitive("MatMul")``."""
  return get_op(op_type).primitive


def registered_ops() -> tuple[str, ...]:
  """Sorted names of the registered TF op types that have a primitive."""
  return tuple(sorted(k for k, v in _REGISTRY.items() if isinstance(v, TFOp)))


def all_ops() -> tuple[TFOp, ...]:
  """The registered ops that have a primitive, sorted by op type."""
  return tuple(_REGISTRY[k] for k in registered_ops())


def declared_op_types() -> frozenset:
  """Every op type the interpreter can run: primitive and structural ops."""
  return frozenset(_REGISTRY)


def declares(op_type: str, prop: str) -> bool:
  """Whether ``op_type`` is registered with the property ``prop`` set."""
  op = _REGISTRY.get(op_type)
  return op is not None and bool(getattr(op, prop))


def is_pure(op_type: str) -> bool:
  """Whether a node of ``op_type`` computes its outputs from its data inputs alone:
  registered, not stateful in TF's op def, and not a graph input, a variable read,
  a random draw or a function call."""
  op = _REGISTRY.get(op_type)
  od = opdefs.op_def(op_type)
  if op is None or od is None or od.is_stateful:
    return False
  return not (
    op.graph_input or op.reads_state or op.uses_rng or op.calls_functions or op.creates_variable
  )


class _OpNamespace:
  """``tfops.MatMul``: the :class:`TFOp` registered as ``MatMul``, looked up at each
  use, so rules bind whatever op is registered when they run."""

  __slots__ = ()

  def __getattr__(self, op_type: str) -> TFOp:
    try:
      return get_op(op_type)
    except KeyError as e:
      raise AttributeError(str(e)) from None

  def __dir__(self):
    return list(registered_ops())


tfops = _OpNamespace()


# --- overriding rules --------------------------------------------------------------------


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
  return _override(op_type, "transpose", ad.primitive_transposes, rule, derived.zero_safe_transpose)


def override_batching(op_type: str, rule: Optional[Callable[..., Any]]) -> Callable[..., Any]:
  """Replaces an op's batching rule ``rule(args, dims, **params) -> (out, out_dims)``.

  ``rule=None`` restores the op's own rule. Returns the rule that was in effect.
  """
  return _override(op_type, "batching", jax_batching.primitive_batchers, rule)
