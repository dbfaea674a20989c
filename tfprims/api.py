"""The tf2jax-compatible entry points: ``convert``, ``convert_functional``, ...

``convert(tf_fn, *example_args)`` returns ``(jax_fn, params)``:
``jax_fn(params, *args, rng=None, **kwargs) -> (outputs, new_params)`` where
``params`` maps TF variable names to arrays. Calls are validated against the TF
signature before anything is traced.
"""

from __future__ import annotations

import inspect
import keyword
import re
from typing import Any, Callable, Mapping, Optional, Sequence

import jax
import jax.numpy as jnp
import numpy as np
import tree

from tfprims import composites, config, core, dtypes, errors, folding, interpreter, pipeline
from tfprims.specs import TensorSpec
import tfprims.ops  # noqa: F401  (registers every op)
from tfprims.ops import lookup
from tfprims.errors import import_tensorflow


def _path_name(path: Sequence[Any]) -> str:
  if not path:
    return "<input>"
  head, rest = path[0], path[1:]
  return str(head) + "".join(f"[{p!r}]" for p in rest)


class _CallSignature:
  """``__signature__`` of a converted function: the TF signature, with ``params``
  in front (unless functional) and the keyword-only ``rng=None``."""

  def __init__(self, with_params: bool):
    self.with_params = with_params

  def __get__(self, obj, owner=None) -> Optional[inspect.Signature]:
    if obj is None:
      return None
    P = inspect.Parameter
    tf_params = list(obj.signature.parameters.values())
    if any(p.name in ("params", "rng") or p.kind == P.VAR_KEYWORD for p in tf_params):
      return None  # cannot be written as one signature
    front = [P("params", P.POSITIONAL_ONLY)] if self.with_params else []
    return inspect.Signature(front + tf_params + [P("rng", P.KEYWORD_ONLY, default=None)])


class ConvertedFunction:
  """A converted TF function. ``fn(params, *args, rng=None, **kwargs) -> (outputs, new_params)``.

  Attributes:
    signature: the TF function's Python signature (``inspect.Signature``).
    structured_inputs: the TF input signature (nested ``tf.TensorSpec``s).
    structured_outputs: the output structure (nested ``tf.TensorSpec``s; a sparse
      output as a :class:`tfprims.composites.SparseOutputSpec`).
    input_specs / output_specs: flat :class:`TensorSpec` tuples (a sparse or ragged
      input as its components: ``sp.indices``, ``sp.values``, ``sp.dense_shape``).
    param_specs: param name -> :class:`TensorSpec` (with ``trainable``).
    tf_variables: param name -> the ``tf.Variable`` it was read from.
    options: the config options read at conversion, as they were then
      (``tfprims.config.OPTIONS``); every call uses them.
    fn: the function itself (tf2jax's ``AnnotatedFunction.fn``).
  """

  def __init__(
    self,
    *,
    graph,
    library,
    signature,
    structured_inputs,
    input_specs,
    input_nodes,
    param_specs,
    captures,
    output_structure,
    output_specs,
    name,
  ):
    self._graph = graph
    self._library = library
    self.signature = signature
    self.structured_inputs = structured_inputs
    self.input_specs = tuple(input_specs)
    self._input_nodes = tuple(input_nodes)
    self.param_specs = {s.name: s for s in param_specs}
    self._captures = captures  # graph input name -> handle or constant
    self._output_structure = output_structure  # nested structure of output indices
    self.output_specs = tuple(output_specs)
    self.structured_outputs = tree.map_structure(
      lambda i: (
        output_specs[i]
        if isinstance(i, int)
        else i.spec(output_specs)
        if isinstance(i, composites.SparseOutput)
        else i
      ),
      output_structure,
    )
    self.tf_variables: dict[str, Any] = {}
    self.options: Optional[dict] = None  # config read at conversion (config.read_at_conversion)
    self.__name__ = name
    self.__doc__ = f"tfprims conversion of TF function {name!r}."

  def __repr__(self):
    ins = ", ".join(str(s) for s in self.input_specs)
    return f"<tfprims.ConvertedFunction {self.__name__}({ins}) with {len(self.param_specs)} params>"

  __signature__ = _CallSignature(with_params=True)

  @property
  def fn(self):
    """The callable itself (tf2jax's ``AnnotatedFunction.fn``)."""
    return self

  # --- calling ------------------------------------------------------------------

  @interpreter.gc_paused()
  def __call__(self, params: Mapping[str, Any], *args, rng=None, **kwargs):
    state = self._check_params(params)  # first: fn(x) without params is named as such
    flat_args = self._flatten_args(args, kwargs)
    ctx = interpreter.Context(self._library, dict(state), rng=rng, options=self.options)
    feeds = dict(zip(self._input_nodes, flat_args))
    for node_name, capture in self._captures.items():
      feeds[node_name] = capture
    outputs = interpreter.run(ctx, self._graph, feeds)
    known = list(outputs)
    outputs = [jnp.asarray(o) for o in outputs]
    structured = tree.map_structure(
      lambda i: (
        outputs[i]
        if isinstance(i, int)
        else i.build(outputs, known)
        if isinstance(i, composites.SparseOutput)
        else i
      ),
      self._output_structure,
    )
    new_params = params_out(ctx.state, self.param_specs)
    return structured, new_params

  def _flatten_args(self, args, kwargs) -> list:
    unknown = sorted(set(kwargs) - set(self.signature.parameters))
    if unknown:
      raise errors.InputStructureError(
        f"arguments do not match the TF signature {self.signature}: unexpected keyword "
        f"argument(s) {unknown}"
      )
    try:
      bound = self.signature.bind(*args, **kwargs)
    except TypeError as e:
      cls = errors.MissingInputError if "missing" in str(e) else errors.InputStructureError
      raise cls(f"arguments do not match the TF signature {self.signature}: {e}") from None
    bound.apply_defaults()
    sig_args, sig_kwargs = self.structured_inputs
    positional, names = [], []
    keyword = {}
    for name, param in self.signature.parameters.items():
      if name not in bound.arguments:
        continue
      # TF1 signatures take every input by keyword although their parameters
      # are positional-or-keyword: the input signature decides.
      if param.kind == inspect.Parameter.KEYWORD_ONLY or name in sig_kwargs:
        keyword[name] = bound.arguments[name]
      else:
        positional.append(bound.arguments[name])
        names.append(name)

    def where(path) -> str:  # a leaf's path in (args, kwargs), named
      if path[0] == 0 and len(path) > 1 and path[1] < len(names):
        path = (names[path[1]],) + tuple(path[2:])
      else:
        path = tuple(path[1:])
      return _path_name(path)

    user = (tuple(positional), keyword)
    expected = (tuple(sig_args), dict(sig_kwargs))
    try:
      flat_user = tree.flatten_up_to(expected, user, check_types=False)
    except (ValueError, TypeError):
      missing = [where(p) for p in _missing_paths(expected, user)]
      raise (errors.MissingInputError if missing else errors.InputStructureError)(
        f"input structure does not match the TF signature: expected "
        f"{_describe(expected)}, got {_describe(user)}"
        + (f"; missing inputs: {', '.join(missing)}" if missing else "")
      ) from None
    tf = import_tensorflow()
    flat = []
    specs = iter(self.input_specs)
    for (path, exp), value in zip(tree.flatten_with_path(expected), flat_user):
      parts = composites.component_names(exp)
      if parts is not None:
        for part, c in zip(parts, composites.components(exp, value, where(path))):
          spec = next(specs)
          checked = self._check_input(spec, c)
          if part == "dense_shape" and isinstance(exp, tf.SparseTensorSpec):
            checked = composites.known_dense_shape(exp, spec.name, c, checked)
          elif part not in ("values", "flat_values"):
            checked = composites.known_index(spec, c, checked)
          flat.append(checked)
      elif isinstance(exp, tf.TypeSpec):
        flat.append(self._check_input(next(specs), value))
      elif not _same_literal(exp, value):
        raise errors.InputStructureError(
          f"input '{where(path)}': found unexpected literal value {value!r}, expected "
          f"{exp!r}: the TF function was traced with that Python value (convert it "
          "again for another one, or trace it with a tensor)"
        )
    return flat

  def _check_input(self, spec: TensorSpec, value):
    return validate_value(spec, value, "input")

  def _check_params(self, params: Mapping[str, Any]) -> dict:
    return check_params(self.param_specs, params, owner="function")


def check_params(
  param_specs: Mapping[str, TensorSpec], params: Mapping[str, Any], owner: str = "function"
) -> dict:
  """``params`` validated against ``param_specs`` (same keys, exact shapes, dtypes).

  Read-only numpy params (as tfprims.convert returns them) stay numpy in an eager
  call: JAX's dispatch converts numpy operands cheaply. Where a jit/make_jaxpr trace
  closes over numpy params, they become :class:`tfprims.folding.Weight`: only their
  exact data movement is folded; the rest reads them as the program's constants."""
  if not isinstance(params, Mapping):
    raise errors.InputStructureError(
      f"the first argument of the {owner} is its params: a mapping of variable name "
      f"to array (the params tfprims.convert returned; {{}} where it has no variables), "
      f"got {type(params).__name__}: call fn(params, *inputs), or use "
      "tfprims.convert_functional for a function of the inputs alone"
    )
  missing = sorted(set(param_specs) - set(params))
  extra = sorted(set(params) - set(param_specs))
  if missing or extra:
    raise errors.InputStructureError(
      f"params do not match the {owner}'s variables: "
      # tf2jax's phrase too (regexes written against tf2jax match it)
      + (f"missing {missing} (Some parameters are missing, {missing}.)" if missing else "")
      + ("; " if missing and extra else "")
      + (f"unexpected {extra}" if extra else "")
    )
  staging = _staging()
  state = {
    k: validate_value(
      spec, params[k], "param", exact_shape=True, keep_numpy=True, writable_too=staging
    )
    for k, spec in param_specs.items()
  }
  return {
    k: folding.weight(v) if staging and isinstance(v, np.ndarray) else v for k, v in state.items()
  }


def params_out(state: Mapping[str, Any], param_specs) -> dict:
  """The params a call returns: weights as the JAX values (constants) they are."""
  return {
    k: jnp.asarray(state[k]) if folding.is_weight(state[k]) else state[k] for k in param_specs
  }


def _missing_paths(expected, user) -> list[tuple]:
  """Leaves of ``expected`` that ``user`` has nothing for (neither the leaf nor a
  structure above or below it)."""
  have = [p for p, _ in tree.flatten_with_path(user)]
  return [
    path
    for path, _ in tree.flatten_with_path(expected)
    if not any(h[: len(path)] == path or path[: len(h)] == h for h in have)
  ]


def _same_literal(expected, value) -> bool:
  """Whether a call passes the Python value the TF function was traced with."""
  if expected is value:
    return True
  if isinstance(value, jax.core.Tracer) or expected is None or value is None:
    return False
  try:
    return bool(np.all(expected == value)) and np.shape(expected) == np.shape(value)
  except Exception:  # incomparable values differ
    return False


def _staging() -> bool:
  """Whether a jit/make_jaxpr trace is active: there, even a numpy constant
  becomes a tracer when JAX touches it."""
  return isinstance(jnp.asarray(np.float32(0)), jax.core.Tracer)


def _describe(structure) -> str:
  (args, kwargs) = tree.map_structure(
    lambda x: "Tensor" if hasattr(x, "shape") else type(x).__name__, structure
  )
  return f"args={args}, kwargs={kwargs}"


def validate_value(
  spec: TensorSpec,
  value,
  kind: str,
  exact_shape: bool = False,
  keep_numpy: bool = False,
  writable_too: bool = False,
):
  """Checks (and canonicalizes) one input or param against its spec; numpy values
  become JAX arrays unless ``keep_numpy`` and they are read-only (or ``writable_too``)."""
  weak = isinstance(value, (int, float, bool, complex, list, tuple))
  if weak:
    try:
      value = np.asarray(value, dtype=spec.dtype)
    except (TypeError, ValueError) as e:
      raise errors.InputDtypeError(
        f"{kind} '{spec.name}': cannot convert {value!r} to {spec.dtype}: {e}"
      ) from None
  elif not hasattr(value, "shape") or not hasattr(value, "dtype"):
    raise errors.InputDtypeError(
      f"{kind} '{spec.name}' must be an array; got {type(value).__name__}"
    )
  if isinstance(value, np.ndarray) and value.dtype.kind in "OSU":
    raise errors.UnsupportedInputError(
      f"{kind} '{spec.name}' is a string/object array; only numeric inputs are supported"
    )
  want = dtypes.canonical_dtype(spec.dtype)
  got = dtypes.canonical_dtype(value.dtype)
  if got != want:
    if config.get_config("strict_dtype_check"):
      raise errors.InputDtypeError(
        f"{kind} '{spec.name}' has dtype {np.dtype(value.dtype).name}, expected "
        f"{np.dtype(spec.dtype).name} (incompatible {kind} dtype); cast it, or disable "
        "the check with tfprims.update_config('strict_dtype_check', False)"
      )
    # Unchecked, floating values for floating inputs keep their precision (a
    # bfloat16 run of a float32 function, as in tf2jax); the rest are cast.
    if not (jnp.issubdtype(got, jnp.floating) and jnp.issubdtype(want, jnp.floating)):
      value = (
        value.astype(spec.dtype)
        if isinstance(value, np.ndarray)
        else jnp.asarray(value).astype(want)
      )
  if spec.shape is not None:
    shape = tuple(value.shape)
    ok = len(shape) == len(spec.shape) and all(
      e is None or e == s for e, s in zip(spec.shape, shape)
    )
    if not ok and (exact_shape or config.get_config("strict_shape_check")):
      raise errors.InputShapeError(
        f"{kind} '{spec.name}' has shape {list(shape)}, expected {_shape_str(spec.shape)} "
        f"(incompatible {kind} shape)"
        + (
          ""
          if exact_shape
          else "; disable the check with tfprims.update_config('strict_shape_check', False)"
        )
      )
  if isinstance(value, (np.ndarray, np.generic)):
    value = dtypes.canonicalize_value(np.asarray(value), f"{kind} '{spec.name}'")
    # A read-only array (the params tfprims.convert returns, views of TF's
    # buffers) cannot change under us, so it need not be copied now.
    keep = keep_numpy and (writable_too or not value.flags.writeable)
    return value if keep else jnp.asarray(value)
  return value


def _shape_str(shape) -> str:
  return "[" + ", ".join("None" if d is None else str(d) for d in shape) + "]"


# --- building a ConvertedFunction ------------------------------------------------


def concrete_function(tf_fn, args, kwargs):
  tf = import_tensorflow()
  if hasattr(tf_fn, "structured_input_signature") and hasattr(tf_fn, "graph"):
    return tf_fn  # already a ConcreteFunction
  if not hasattr(tf_fn, "get_concrete_function"):
    if not callable(tf_fn):
      raise TypeError(f"expected a tf.function, ConcreteFunction or callable; got {tf_fn!r}")
    tf_fn = tf.function(tf_fn, autograph=False)
  args, kwargs = tree.map_structure(example_spec, (args, kwargs))
  return tf_fn.get_concrete_function(*args, **kwargs)


def example_spec(value):
  """An example argument as TF's tracing takes it: a JAX tracer (``convert`` called
  inside a JAX transformation) becomes a ``tf.TensorSpec`` of its shape and dtype
  (symbolic dimensions become None); anything else is unchanged."""
  if not isinstance(value, jax.core.Tracer):
    return value
  tf = import_tensorflow()
  shape = [d if isinstance(d, int) else None for d in value.shape]
  return tf.TensorSpec(shape, tf.as_dtype(np.dtype(value.dtype)))


def _variable_names(variables) -> dict[int, tuple[str, Any]]:
  """Unique, stable param names for variables, keyed by id(handle).

  A name TF gave one variable only is kept as it is; variables sharing a name get
  ``name``, ``name_2``, ``name_3``... skipping names other variables already have,
  so the set of names does not depend on the order TF lists the captures in.
  """
  bases = [v.name[:-2] if v.name.endswith(":0") else v.name for v in variables]
  counts: dict[str, int] = {}
  for base in bases:
    counts[base] = counts.get(base, 0) + 1
  taken = {base for base in bases if counts[base] == 1}
  names = {}
  for v, base in zip(variables, bases):
    name, n = base, 1
    if counts[base] > 1:
      while name in taken:
        n += 1
        name = f"{base}_{n}"
    taken.add(name)
    names[id(v.handle)] = (name, v)
  return names


def _handle_only_variables(cf) -> list:
  """Variables the function uses through their handles alone (a TF1 optimizer's slots,
  which its ResourceApply* ops update without reading them): TF lists only the
  variables it saw read or assigned in ``cf.variables``, so captured resources it does
  not list are looked up among the live variables by their handle."""
  import gc

  tf = import_tensorflow()
  known = {id(v.handle) for v in cf.variables}
  wanted = {id(c) for c in cf.captured_inputs if c.dtype == tf.resource and id(c) not in known}
  if not wanted:
    return []
  found = []
  for obj in gc.get_objects():
    try:
      if isinstance(obj, tf.Variable) and id(obj.handle) in wanted:
        found.append(obj)
    except Exception:  # variables of other kinds have no eager handle
      continue
  return found


@interpreter.gc_paused()
def from_concrete_function(cf, *, allow_variables: bool = True) -> tuple[ConvertedFunction, dict]:
  """Converts a ``ConcreteFunction``; returns ``(converted_fn, params)``."""
  tf = import_tensorflow()
  options = config.read_at_conversion()
  graph_def = cf.graph.as_graph_def()

  # Everything that keeps the function from converting is collected, then
  # reported in one error with the unsupported ops (interpreter.check_supported).
  problems: list[str] = []
  sig_args, sig_kwargs, parameters = input_signature(cf)
  arg_names = [p.name for p in parameters]
  flat_specs = []
  for path, leaf in tree.flatten_with_path((tuple(sig_args), dict(sig_kwargs))):
    if isinstance(leaf, tf.TypeSpec):
      # Name a positional input after its parameter ("x", "x['a']"), as TF names specs.
      where = path[1:]
      if path[0] == 0 and where and isinstance(where[0], int) and where[0] < len(arg_names):
        where = (arg_names[where[0]],) + tuple(where[1:])
      name = getattr(leaf, "name", None) or _path_name(where)
      specs, leaf_problems = composites.leaf_specs(name, leaf)
      flat_specs.extend(specs)
      problems.extend(leaf_problems)
  n_args = len(cf.inputs) - len(cf.captured_inputs)
  if n_args != len(flat_specs) and not problems:
    raise errors.ConversionError(
      f"cannot match the {len(flat_specs)} TF signature leaves with the graph's "
      f"{n_args} inputs (a composite tensor other than sparse and ragged ones?)"
    )
  input_nodes = [t.op.name for t in cf.inputs[:n_args]]

  var_names = _variable_names(list(cf.variables) + _handle_only_variables(cf))
  captures, param_specs, params, tf_variables = {}, [], {}, {}
  for placeholder, captured in zip(cf.inputs[n_args:], cf.captured_inputs):
    node_name = placeholder.op.name
    if id(captured) in var_names:
      key, variable = var_names[id(captured)]
      if not allow_variables:
        raise errors.ConversionError(
          f"the function captures variable '{key}'; convert_functional needs a "
          "stateless function: use tfprims.convert, which returns the variables "
          "as params"
        )
      np_dtype = dtypes.from_tf(variable.dtype)
      if np_dtype is None:
        problems.append(
          f"variable '{key}' has dtype {variable.dtype.name}, which has no JAX equivalent"
        )
        continue
      captures[node_name] = interpreter.VariableHandle(key)
      tf_variables[key] = variable
      if tf.inside_function():  # a TF trace: variables have no value
        if not options["skip_variables_evaluation_inside_tf_tracing"]:
          raise errors.ConversionError(
            f"unable to evaluate variable '{key}' inside a TF tracing context "
            "(tfprims.convert called inside a tf.function); convert outside it, or "
            "set tfprims.update_config('skip_variables_evaluation_inside_tf_tracing', "
            "True) to get no params (pass them yourself when calling)"
          )
        shape = None if variable.shape.rank is None else tuple(variable.shape.as_list())
      else:
        params[key] = dtypes.value_from_tf(variable.value())
        shape = tuple(params[key].shape)
      param_specs.append(TensorSpec(key, shape, np_dtype, trainable=bool(variable.trainable)))
    elif captured.dtype == tf.resource:
      table = lookup.captured_table(
        placeholder,
        captured,
        taken=set(params) | {k for k, _ in var_names.values()},
        allow=allow_variables,
        problems=problems,
      )
      if table is None:
        problems.append(
          f"the function captures a resource '{node_name}' that is not a variable "
          "nor a lookup table (an iterator or similar); such resources are not "
          "supported"
        )
      elif table is not False:
        captures[node_name], contents = table
        for key, value in contents.items():
          params[key] = value
          param_specs.append(TensorSpec(key, value.shape, value.dtype, trainable=False))
    elif captured.dtype == tf.string:
      captures[node_name] = interpreter.StringConstant(node_name, captured.numpy())
    else:
      captures[node_name] = dtypes.canonicalize_value(
        captured.numpy(), f"captured tensor '{node_name}'"
      )

  # Only the structured outputs are converted: after a GradientTape has
  # differentiated a tf.function, TF appends intermediates to cf.outputs.
  leaves = composites.expand_outputs(tree.flatten(cf.structured_outputs))
  if any(isinstance(x, tf.TensorSpec) for x in leaves):
    # Functions restored from SavedModels describe outputs by spec; cf.outputs
    # holds their tensors in flattening order.
    n_specs = sum(isinstance(x, tf.TensorSpec) for x in leaves)
    out_tensors = list(cf.outputs[:n_specs])
  else:
    out_tensors = list({x.name: x for x in leaves if isinstance(x, tf.Tensor)}.values())
  output_names = [t.name for t in out_tensors]
  index_of = {name: i for i, name in enumerate(output_names)}
  spec_positions = iter(range(len(output_names)))

  def to_index(x):
    if isinstance(x, tf.Tensor):
      return index_of[x.name]
    if isinstance(x, tf.TensorSpec):
      return next(spec_positions)
    if isinstance(x, (tf.SparseTensor, tf.SparseTensorSpec)):
      return composites.SparseOutput(
        tuple(to_index(c) for c in composites.parts_of(x)), composites.static_shape(x)
      )
    if x is None or isinstance(x, (int, float, bool, str)):
      return x
    problems.append(
      f"an output of kind {type(x).__name__} is not supported; return "
      "dense or sparse tensors (a ragged tensor as its flat_values and "
      "row_splits)"
    )
    return None

  output_structure = tree.map_structure(to_index, cf.structured_outputs)
  output_specs = []
  for t in out_tensors:
    np_dtype = dtypes.from_tf(t.dtype)
    if np_dtype is None:
      # "cannot be evaluated": tf2jax's phrase for a resource output.
      problems.append(
        f"output {t.name}{computed_by(t)} is a {t.dtype.name} tensor; "
        "tfprims outputs numeric tensors only (return it from TF, outside "
        "the converted function)"
        + (" (a resource cannot be evaluated)" if t.dtype == tf.resource else "")
      )
    shape = None if t.shape.rank is None else tuple(t.shape.as_list())
    output_specs.append(TensorSpec(t.name, shape, np_dtype or t.dtype.name))

  prepared = pipeline.prepare(
    graph_def,
    [t.name for t in cf.inputs],
    output_names,
    options=options,
    name=tf_function_name(cf),
    control_outputs=[op.name for op in getattr(cf.graph, "control_outputs", [])],
    problems=problems,
    input_specs=flat_specs,
    params=param_specs,
    param_values=params,
    captured={k: v for k, v in captures.items() if isinstance(v, np.ndarray)},
  )
  if prepared.tables:  # tables the graph creates (a TF1 SavedModel's): params too
    if not allow_variables:
      names = sorted({k.rsplit("/", 1)[0] for k in prepared.tables})
      raise errors.ConversionError(
        f"the function reads lookup tables {names}; convert_functional needs a "
        "stateless function: use tfprims.convert, which returns the tables' contents "
        "as params"
      )
    clash = sorted(set(prepared.tables) & set(params))
    if clash:
      raise errors.ConversionError(f"lookup table params {clash} clash with other params")
    params.update(prepared.tables)
    param_specs = param_specs + prepared.table_specs()
  signature = python_signature(sig_args, sig_kwargs, parameters)
  fn = ConvertedFunction(
    graph=prepared.graph,
    library=prepared.library,
    signature=signature,
    structured_inputs=(sig_args, sig_kwargs),
    input_specs=flat_specs,
    input_nodes=input_nodes,
    param_specs=param_specs,
    captures=captures,
    output_structure=output_structure,
    output_specs=output_specs,
    name=tf_function_name(cf),
  )
  fn.tf_variables = tf_variables
  fn.options = options
  return fn, params


def input_signature(cf) -> tuple[tuple, dict, list]:
  """``(args, kwargs, parameters)`` of the TF function's signature. Pruned and wrapped
  TF1 functions (``cf.prune``, ``tf.compat.v1.wrap_function``) have none: their
  inputs are positional, named after their nodes."""
  tf = import_tensorflow()
  if cf.structured_input_signature is not None:
    args, kwargs = cf.structured_input_signature
    return tuple(args), dict(kwargs), list(cf.function_type.parameters.values())
  tensors = cf.inputs[: len(cf.inputs) - len(cf.captured_inputs)]
  names: list[str] = []
  for t in tensors:
    name = re.sub(r"\W", "_", t.op.name)
    name = name if name.isidentifier() and not keyword.iskeyword(name) else f"_{name}"
    while name in names:
      name += "_"
    names.append(name)
  P = inspect.Parameter
  return (
    tuple(tf.TensorSpec(t.shape, t.dtype, name=t.op.name) for t in tensors),
    {},
    [P(n, P.POSITIONAL_ONLY) for n in names],
  )


def computed_by(tensor) -> str:
  """ ", from <op> node '<name>'": the node that computes an output, through the
  pass-through ops (Identity...) that name it; "" when the output's own node does."""
  t = tensor
  while core.declares(t.op.type, "pass_through") and t.value_index < len(t.op.inputs):
    t = t.op.inputs[t.value_index]
  return "" if t is tensor else f", from {t.op.type} node '{t.op.name}'"


def python_signature(sig_args, sig_kwargs, parameters) -> inspect.Signature:
  """The TF function's Python signature. A parameter traced with a Python value
  (not a tensor) defaults to that value: the converted function is specialized
  to it, and calls may leave it out (passing another value raises)."""
  tf = import_tensorflow()
  P = inspect.Parameter
  params = [p for p in parameters if p.kind != P.VAR_KEYWORD]

  def literal(value) -> bool:
    return not any(isinstance(x, tf.TypeSpec) for x in tree.flatten(value))

  defaults = {}
  positional = [p for p in params if p.kind in (P.POSITIONAL_ONLY, P.POSITIONAL_OR_KEYWORD)]
  for i, p in enumerate(positional):  # only trailing positional parameters may default
    if (
      i < len(sig_args)
      and literal(sig_args[i])
      and all(j < len(sig_args) and literal(sig_args[j]) for j in range(i, len(positional)))
    ):
      defaults[p.name] = sig_args[i]
  for p in params:
    if p.kind == P.KEYWORD_ONLY and p.name in sig_kwargs and literal(sig_kwargs[p.name]):
      defaults[p.name] = sig_kwargs[p.name]
  return inspect.Signature(
    [P(p.name, p.kind, default=defaults.get(p.name, P.empty)) for p in params]
  )


# Not `function_name`: autograph converts this module when tfprims.convert runs inside a
# tf.function trace, and that name clashes with its templates.
def tf_function_name(cf) -> str:
  name = getattr(cf, "name", "function")
  name = name.decode() if isinstance(name, bytes) else str(name)
  name = name.removeprefix("__inference_")
  # Drop TF's uniquifying suffix ("f_123").
  head, _, tail = name.rpartition("_")
  return head if head and tail.isdigit() else name


def convert(tf_fn, *args, **kwargs) -> tuple[ConvertedFunction, dict]:
  """Converts a TF function to JAX.

  Args:
    tf_fn: a ``tf.function``, a ``ConcreteFunction`` or a Python callable of TF
      ops (wrapped in ``tf.function``).
    *args, **kwargs: example inputs or ``tf.TensorSpec``s (None dims allowed),
      used to pick the concrete function.

  Returns:
    ``(jax_fn, params)``: ``jax_fn(params, *args, rng=None, **kwargs)`` returns
    ``(outputs, new_params)``; ``params`` maps variable names to numpy arrays.
  """
  cf = concrete_function(tf_fn, args, kwargs)
  return from_concrete_function(cf)


def convert_functional(tf_fn, *args, **kwargs) -> Callable[..., Any]:
  """Converts a stateless TF function: ``jax_fn(*args, rng=None, **kwargs) -> outputs``."""
  cf = concrete_function(tf_fn, args, kwargs)
  fn, _ = from_concrete_function(cf, allow_variables=False)
  return _Functional(fn)


class _Functional:
  """A converted function without params."""

  def __init__(self, fn: ConvertedFunction):
    self.converted = fn
    self.signature = fn.signature
    self.structured_inputs = fn.structured_inputs
    self.structured_outputs = fn.structured_outputs
    self.input_specs, self.output_specs = fn.input_specs, fn.output_specs
    self.__name__ = fn.__name__
    self.__doc__ = fn.__doc__

  __signature__ = _CallSignature(with_params=False)

  @property
  def fn(self):
    """The callable itself (tf2jax's ``AnnotatedFunction.fn``)."""
    return self

  def __call__(self, *args, rng=None, **kwargs):
    return self.converted({}, *args, rng=rng, **kwargs)[0]

  def __repr__(self):
    return repr(self.converted).replace("ConvertedFunction", "functional")


def convert_graph_def(
  graph_def, inputs: Sequence[str], outputs: Sequence[str]
) -> Callable[..., Any]:
  """Converts a (frozen) GraphDef: ``fn(*inputs) -> list of outputs``.

  Args:
    graph_def: a ``tf.compat.v1.GraphDef`` (its function library is used for
      nested functions).
    inputs: names of the Placeholder tensors fed, in call order (``"x:0"`` or ``"x"``).
    outputs: names of the tensors returned.
  """
  options = config.read_at_conversion()
  prepared = pipeline.prepare(graph_def, inputs, outputs, options=options)
  graph, library, specs = prepared.graph, prepared.library, prepared.input_specs

  def fn(*args, rng=None):
    if len(args) != len(specs):
      raise errors.InputStructureError(
        f"expected {len(specs)} inputs ({', '.join(s.name for s in specs)}), got {len(args)}"
      )
    values = [validate_value(s, a, "input") for s, a in zip(specs, args)]
    # the graph's own lookup tables (TF1): their contents as constants
    ctx = interpreter.Context(library, prepared.table_constants(), rng=rng, options=options)
    return [jnp.asarray(o) for o in interpreter.run(ctx, graph, dict(zip(graph.inputs, values)))]

  fn.input_specs = tuple(specs)
  fn.tables = dict(prepared.tables)
  fn.output_names = tuple(outputs)
  return fn
