"""String inputs: the nodes that need strings split off into a TensorFlow host prefix.

JAX has no string dtype. ``split_host_prefix(fn, *specs)`` cuts a TF function in two:

* the *prefix*: every node that produces or consumes a string tensor, every node that
  uses a resource such a node uses (a string-keyed lookup table), and everything they
  need upstream. It runs in TensorFlow, on the host, and returns the numeric tensors
  at the boundary;
* the *rest*: the numeric nodes, converted by :func:`tfprims.api.from_concrete_function`
  with the boundary tensors as its inputs.

Calling convention (docs/strings.md)::

    prefix, jax_fn, params = tfprims.split_host_prefix(fn, *specs)
    numeric = prefix(*args)                     # TF, eager: a tuple of numpy arrays
    outputs, new_params = jax_fn(params, *numeric)   # == fn(*args); jit, grad, vmap

``numeric`` holds, in order, the function's numeric inputs the rest reads (passed
through unchanged) and then the tensors the prefix computes for the rest.
``prefix.tf_function`` is the same prefix as a TF ``ConcreteFunction`` of the flat
inputs (for ``tf.data`` pipelines and serving).

Calls of library functions (``PartitionedCall``/``StatefulPartitionedCall``, the
calls Keras layers and restored SavedModels make) whose bodies touch strings are
inlined first, so that the cut is made node by node; calls that do not are kept as
calls (the converted rest runs them as it runs any call).
"""

from __future__ import annotations

import collections
import dataclasses
import inspect
import keyword
import re
from typing import Any, Optional, Sequence

import numpy as np

from tfprims import api, core, errors, graph as graph_lib, opdefs
from tfprims.errors import import_tensorflow


# --- inlining the calls that touch strings -----------------------------------------------


def _mentions_string(node_def) -> bool:
  """Whether a NodeDef (of a graph or a function body) handles strings, read from its
  attrs and its op def alone (the node's dtypes are not known there)."""
  tf = import_tensorflow()
  string = tf.string.as_datatype_enum
  for proto in node_def.attr.values():
    kind = proto.WhichOneof("value")
    if (kind == "type" and proto.type == string) or (kind == "list" and string in proto.list.type):
      return True
  od = opdefs.op_def(node_def.op)
  return od is not None and any(a.type == string for a in (*od.input_arg, *od.output_arg))


def _string_functions(function_defs) -> set:
  """Names of the library functions whose bodies (or signatures, or the functions
  they reach) handle strings."""
  tf = import_tensorflow()
  string = tf.string.as_datatype_enum
  direct, calls = set(), {}
  for name, fdef in function_defs.items():
    sig = fdef.signature
    if any(a.type == string for a in (*sig.input_arg, *sig.output_arg)) or any(
      _mentions_string(nd) for nd in fdef.node_def
    ):
      direct.add(name)
    calls[name] = {f for nd in fdef.node_def for f in _called(nd) if f in function_defs}
  found, changed = set(direct), True
  while changed:
    changed = False
    for name, callees in calls.items():
      if name not in found and callees & found:
        found.add(name)
        changed = True
  return found


def _called(node_def) -> list:
  names = [node_def.op]
  for proto in node_def.attr.values():
    kind = proto.WhichOneof("value")
    if kind == "func":
      names.append(proto.func.name)
    elif kind == "list":
      names.extend(f.name for f in proto.list.func)
  return names


def _call_target(node_def, function_defs) -> Optional[str]:
  """The function a call node runs (``PartitionedCall``-like ops and direct calls)."""
  if node_def.op in function_defs:
    return node_def.op
  if (
    core.declares(node_def.op, "calls_functions")
    and "f" in node_def.attr
    and node_def.attr["f"].WhichOneof("value") == "func"
  ):
    return node_def.attr["f"].func.name
  return None


def inline_string_calls(graph_def):
  """``graph_def`` with its calls of functions that touch strings replaced by their
  bodies (repeatedly: nested calls too). Each call node becomes an ``IdentityN`` of the
  body's outputs under the call's name, so its readers are unchanged; body nodes are
  named ``<call>/<node>``."""
  tf = import_tensorflow()
  fdefs = {f.signature.name: f for f in graph_def.library.function}
  wanted = _string_functions(fdefs)
  out = tf.compat.v1.GraphDef()
  out.CopyFrom(graph_def)
  while True:
    targets = {nd.name: _call_target(nd, fdefs) for nd in out.node}
    todo = [nd for nd in out.node if targets[nd.name] in wanted]
    if not todo:
      return out
    taken = {nd.name for nd in out.node}
    nodes = []
    for nd in out.node:
      if targets[nd.name] in wanted:
        nodes.extend(_inline_call(nd, fdefs[targets[nd.name]], fdefs, taken))
      else:
        nodes.append(nd)
    del out.node[:]
    out.node.extend(nodes)


def _inline_call(call, fdef, fdefs, taken: set) -> list:
  tf = import_tensorflow()
  body = graph_lib.from_function_def(fdef, fdefs)
  data = [i for i in call.input if not i.startswith("^")]
  control = [i for i in call.input if i.startswith("^")]
  names = {}
  for node in body.nodes:
    name = f"{call.name}/{node.name}"
    while name in taken:
      name += "_"
    taken.add(name)
    names[node.name] = name
  args = dict(zip(body.inputs, data))

  def ref(r) -> str:
    name, index = r
    if name in args:
      return args[name]
    return names[name] if index == 0 else f"{names[name]}:{index}"

  raw = {nd.name: nd for nd in fdef.node_def}
  nodes = []
  for node in body.nodes:
    nd = tf.compat.v1.NodeDef()
    nd.CopyFrom(raw[node.name])
    nd.name = names[node.name]
    del nd.input[:]
    nd.input.extend(ref(r) for r in node.inputs)
    nd.input.extend(
      "^" + (names[c] if c in names else args.get(c, c).split(":")[0]) for c in node.control_inputs
    )
    if not node.inputs:
      nd.input.extend(control)  # the call's control inputs gate the body's roots
    nodes.append(nd)
  result = tf.compat.v1.NodeDef(name=call.name, op="IdentityN" if body.outputs else "NoOp")
  result.input.extend(ref(r) for r in body.outputs)
  result.input.extend("^" + names[c] for c in body.control_outputs if c in names)
  if body.outputs:
    result.attr["T"].list.type.extend(
      call.attr["Tout"].list.type
      if "Tout" in call.attr
      else [a.type for a in fdef.signature.output_arg]
    )
  nodes.append(result)
  return nodes


# --- the cut ---------------------------------------------------------------------------


@dataclasses.dataclass
class _Cut:
  prefix: set  # nodes that need TF (before pruning to what the rest reads)
  sources: set  # nodes without inputs both halves may hold (Const, inputs)
  passed: list  # numeric input placeholders the rest reads
  boundary: list  # (node, index) tensors the prefix computes for the rest
  control: list  # nodes the rest runs for their effect
  ops: dict  # node name -> tf.Operation of a scratch graph (dtypes, shapes)
  tensors: dict  # "node:i" -> tf.Tensor of the scratch graph


def _cut(
  graph_def, inputs: Sequence[str], outputs: Sequence[str], control: Sequence[str], variables: set
) -> _Cut:
  """The smallest prefix: string nodes, the users of the resources they use (other
  than variables), and everything those read, upstream."""
  tf = import_tensorflow()
  with tf.Graph().as_default() as scratch:
    tf.graph_util.import_graph_def(_without_colocation(graph_def), name="")
  ops = {op.name: op for op in scratch.get_operations()}
  readers = collections.defaultdict(list)
  for op in ops.values():
    for t in op.inputs:
      readers[t.op.name].append(op.name)

  def is_string(op) -> bool:
    return any(t.dtype == tf.string for t in (*op.inputs, *op.outputs))

  functions = {f.signature.name for f in graph_def.library.function}
  prefix: set = set()

  def grow(seeds) -> None:  # seeds and everything they need, upstream
    stack = [n for n in seeds if n not in prefix]
    prefix.update(stack)
    while stack:
      op = ops[stack.pop()]
      for t in op.inputs:
        if t.op.name not in prefix:
          prefix.add(t.op.name)
          stack.append(t.op.name)
        if (
          t.dtype == tf.resource
          and t.op.name not in variables
          and not core.declares(t.op.type, "creates_variable")
        ):
          # A table (or another non-variable resource) a prefix node uses: all its
          # users run in TF with it.
          new = [u for u in readers[t.op.name] if u not in prefix]
          prefix.update(new)
          stack.extend(new)

  grow([name for name, op in ops.items() if is_string(op)])
  # What depends on numeric inputs or variables is the model, not preprocessing.
  model = _downstream(
    readers,
    [n for n in inputs if not is_string(ops[n])]
    + [n for n, op in ops.items() if n in variables or core.declares(op.type, "creates_variable")],
  )
  while True:
    # Downstream of the string part, the preprocessing nodes tfprims cannot run on its
    # values (ragged to dense, data-dependent shapes) run in TF too, with what they need.
    below = _downstream(readers, prefix) - prefix
    more = [n for n in below if n not in model and not _convertible(ops[n].type, functions)]
    if not more:
      break
    grow(more)
  sources = {
    name
    for name, op in ops.items()
    if not op.inputs
    and (
      op.type == "Const"
      or name in inputs
      or name in variables
      or core.declares(op.type, "graph_input")
    )
  }
  control = [c for c in control if c not in prefix]
  rest = _upstream(
    ops, [graph_lib.parse_ref(o)[0] for o in outputs] + control, stop=prefix - sources
  )
  passed = [n for n in inputs if n in rest]
  boundary = {}
  order = {name: k for k, name in enumerate(ops)}
  for name in sorted(rest, key=order.__getitem__):
    for t in ops[name].inputs:
      if t.op.name in prefix and t.op.name not in sources:
        boundary[(t.op.name, t.value_index)] = None
  for o in outputs:
    node, index = graph_lib.parse_ref(o)
    if node in prefix and node not in sources:
      boundary[(node, index)] = None
  tensors = {f"{op.name}:{i}": t for op in ops.values() for i, t in enumerate(op.outputs)}
  return _Cut(prefix, sources, passed, list(boundary), control, ops, tensors)


def _downstream(readers, roots) -> set:
  """The roots and every node that reads them, directly or not (data edges)."""
  seen, stack = set(roots), list(roots)
  while stack:
    for user in readers[stack.pop()]:
      if user not in seen:
        seen.add(user)
        stack.append(user)
  return seen


def _convertible(op_type: str, functions) -> bool:
  """Whether the converted rest can run a node of this type on runtime values."""
  if op_type in functions:  # a call of a library function
    return True
  return core.lookup(op_type) is not None and not core.declares(op_type, "dynamic_shape")


def _upstream(ops, roots, stop, control_within=frozenset()) -> set:
  """Nodes the roots read (data edges, and control edges to ``control_within`` nodes:
  a table's initializer), not looking past ``stop`` nodes."""
  seen, stack = set(), list(roots)
  while stack:
    name = stack.pop()
    if name in seen or name in stop:
      continue
    seen.add(name)
    stack.extend(t.op.name for t in ops[name].inputs)
    stack.extend(c.name for c in ops[name].control_inputs if c.name in control_within)
  return seen


def _without_colocation(graph_def, keep: Optional[set] = None, rename=None):
  """A copy of ``graph_def`` (its ``keep`` nodes) without colocation attrs and devices
  (they name nodes the copy may lack), inputs renamed by ``rename(node, ref)``."""
  tf = import_tensorflow()
  out = tf.compat.v1.GraphDef()
  out.versions.CopyFrom(graph_def.versions)
  out.library.CopyFrom(graph_def.library)
  for nd in graph_def.node:
    if keep is not None and nd.name not in keep:
      continue
    new = out.node.add()
    new.CopyFrom(nd)
    new.device = ""
    if "_class" in new.attr:
      del new.attr["_class"]
    if rename is not None:
      refs = [r for r in (rename(nd, i) for i in nd.input) if r is not None]
      del new.input[:]
      new.input.extend(refs)
  return out


# --- the two halves ----------------------------------------------------------------------


class HostPrefix:
  """The TF half of a split function: ``prefix(*args, **kwargs)`` takes the function's
  inputs (as the TF function does) and returns the converted rest's inputs, a tuple of
  numpy arrays.

  Attributes:
    tf_function: the prefix as a TF ``ConcreteFunction`` of the function's flat inputs,
      returning the same tensors (None for the identity).
    input_specs: the flat inputs' ``tf.TensorSpec``s (strings included).
    output_specs: a :class:`tfprims.TensorSpec` per returned array: the numeric inputs
      passed through (named after their inputs), then the boundary tensors (named
      ``node:index`` as in the TF graph).
    nodes: the names of the nodes that run in TF.
    ops: ``{op type: count}`` of those nodes.
    is_identity: True when nothing needs strings (``prefix(*args)`` returns ``args``).
  """

  def __init__(
    self,
    *,
    tf_function,
    signature,
    structured_inputs,
    input_specs,
    output_specs,
    nodes: Sequence[str],
    ops: dict,
    name: str,
  ):
    self.tf_function = tf_function
    self.signature = signature
    self.structured_inputs = structured_inputs
    self.input_specs = tuple(input_specs)
    self.output_specs = tuple(output_specs)
    self.nodes = tuple(nodes)
    self.ops = dict(ops)
    self.is_identity = tf_function is None
    self.__name__ = f"{name}_host_prefix"

  def __repr__(self):
    if self.is_identity:
      return f"<tfprims.HostPrefix {self.__name__}: identity>"
    outs = ", ".join(str(s) for s in self.output_specs)
    return f"<tfprims.HostPrefix {self.__name__}: {len(self.nodes)} TF nodes -> ({outs})>"

  def __call__(self, *args, **kwargs) -> tuple:
    try:
      bound = self.signature.bind(*args, **kwargs)
    except TypeError as e:
      raise errors.InputStructureError(
        f"arguments do not match the TF signature {self.signature}: {e}"
      ) from None
    if self.is_identity:
      if bound.kwargs:
        raise errors.InputStructureError(
          f"pass {sorted(bound.kwargs)} to the converted function itself: nothing needs "
          "strings, so the prefix is the identity of the positional inputs"
        )
      return tuple(bound.args)
    bound.apply_defaults()
    tf = import_tensorflow()
    import tree

    sig_args, sig_kwargs = self.structured_inputs
    positional = [v for k, v in bound.arguments.items() if k not in sig_kwargs][: len(sig_args)]
    keyword = {k: v for k, v in bound.arguments.items() if k in sig_kwargs}
    expected = (tuple(sig_args), dict(sig_kwargs))
    try:
      flat = tree.flatten_up_to(expected, (tuple(positional), keyword), check_types=False)
    except (ValueError, TypeError) as e:
      raise errors.InputStructureError(
        f"inputs do not match the TF signature {self.signature}: {e}"
      ) from None
    values = []
    for spec, value in zip(tree.flatten(expected), flat):
      if isinstance(spec, tf.TypeSpec):
        try:
          values.append(tf.convert_to_tensor(value, dtype=spec.dtype))
        except (TypeError, ValueError) as e:
          raise errors.InputDtypeError(
            f"input '{spec.name}' must be {spec.dtype.name} ({spec}): {e}"
          ) from None
        if not spec.shape.is_compatible_with(values[-1].shape):
          raise errors.InputShapeError(
            f"input '{spec.name}' has shape {values[-1].shape.as_list()}, expected "
            f"{spec.shape} (incompatible input shape)"
          )
    try:
      outputs = self.tf_function(*values)
    except (TypeError, ValueError) as e:  # TF's binding of the inputs to the signature
      raise errors.InputShapeError(
        f"inputs do not match the TF signature's specs {list(self.input_specs)}: "
        f"{str(e).strip().splitlines()[0]}"
      ) from None
    return tuple(np.asarray(t.numpy()) for t in outputs)


def split_host_prefix(tf_fn, *args, **kwargs) -> tuple[HostPrefix, Any, dict]:
  """Splits a TF function whose inputs (or intermediates) are strings into a TF host
  prefix and a converted JAX rest.

  Args:
    tf_fn: a ``tf.function``, a ``ConcreteFunction`` or a Python callable of TF ops.
    *args, **kwargs: example inputs or ``tf.TensorSpec``s (as for ``tfprims.convert``).

  Returns:
    ``(prefix, jax_fn, params)``: ``prefix(*args, **kwargs)`` runs the string nodes in
    TF and returns a tuple of numpy arrays; ``jax_fn(params, *prefix(*args))`` returns
    ``(outputs, new_params)`` as a :class:`tfprims.ConvertedFunction` does, equal to
    ``tf_fn(*args)``. With no strings the prefix is the identity and ``jax_fn, params``
    are ``tfprims.convert``'s.

  Raises:
    UnsupportedInputError: an output of the function is a string tensor.
  """
  tf = import_tensorflow()
  cf = api.concrete_function(tf_fn, args, kwargs)
  name = api.tf_function_name(cf)
  graph_def = inline_string_calls(cf.graph.as_graph_def())
  n_args = len(cf.inputs) - len(cf.captured_inputs)
  inputs = [t.op.name for t in cf.inputs[:n_args]]
  captures = {t.op.name: c for t, c in zip(cf.inputs[n_args:], cf.captured_inputs)}
  by_handle = {id(v.handle): v for v in cf.variables}
  variables = {k: by_handle[id(c)] for k, c in captures.items() if id(c) in by_handle}
  structure, out_names = _outputs(cf)
  control = [op.name for op in getattr(cf.graph, "control_outputs", [])]
  cut = _cut(graph_def, inputs, out_names, control, set(variables))
  strings = [o for o in out_names if cut.tensors[o].dtype == tf.string]
  if strings:
    raise errors.blocked_conversion(
      {},
      (),
      [
        f"output {o}{api.computed_by(cut.tensors[o])} is a string tensor: JAX has no strings, "
        "and a host prefix returns numeric tensors only; return it from a TF function of "
        "its own (or turn it into numbers in TF: a lookup, tf.strings.to_number...)"
        for o in strings
      ],
    )
  sig_args, sig_kwargs, parameters = api.input_signature(cf)
  signature = api.python_signature(sig_args, sig_kwargs, parameters)
  flat_specs = [
    s for s in tf.nest.flatten((tuple(sig_args), dict(sig_kwargs))) if isinstance(s, tf.TypeSpec)
  ]
  if not cut.boundary and all(s.dtype != tf.string for s in flat_specs):
    fn, params = api.from_concrete_function(cf)
    prefix = HostPrefix(
      tf_function=None,
      signature=signature,
      structured_inputs=(sig_args, sig_kwargs),
      input_specs=flat_specs,
      output_specs=fn.input_specs,
      nodes=(),
      ops={},
      name=name,
    )
    return prefix, fn, params

  names = _rest_input_names([(p, 0) for p in cut.passed] + cut.boundary)
  rest_specs = [
    tf.TensorSpec(_shape(cf, cut, ref), cut.tensors[ref].dtype, name=arg)
    for ref, arg in zip(
      [f"{p}:0" for p in cut.passed] + [f"{n}:{i}" for n, i in cut.boundary], names
    )
  ]
  op_types = {nd.name: nd.op for nd in graph_def.node}
  prefix_nodes = _upstream(
    cut.ops,
    [n for n, _ in cut.boundary] + [c for c in control if c in cut.prefix],
    stop=set(),
    control_within=cut.prefix,
  )
  try:
    prefix_cf = _prefix_function(
      graph_def, cut, prefix_nodes, inputs, captures, variables, flat_specs, name
    )
    rest_cf = _rest_function(
      graph_def, cut, rest_specs, captures, variables, structure, out_names, name
    )
  except (TypeError, ValueError) as e:  # TF could not import or trace a half
    raise errors.ConversionError(
      f"cannot split {name!r} into a TF host prefix and a converted rest: {type(e).__name__}: {e}"
    ) from None
  fn, params = api.from_concrete_function(rest_cf)
  nodes = [nd.name for nd in graph_def.node if nd.name in prefix_nodes]
  prefix = HostPrefix(
    tf_function=prefix_cf,
    signature=signature,
    structured_inputs=(sig_args, sig_kwargs),
    input_specs=flat_specs,
    output_specs=fn.input_specs,
    nodes=nodes,
    ops=dict(sorted(collections.Counter(op_types[n] for n in nodes).items())),
    name=name,
  )
  return prefix, fn, params


def _outputs(cf) -> tuple[Any, list]:
  """The output structure (leaves: tensor names or literals) and the tensor names, in
  order, as tfprims.convert reads them."""
  tf = import_tensorflow()
  leaves = tf.nest.flatten(cf.structured_outputs)
  n_specs = sum(isinstance(x, tf.TensorSpec) for x in leaves)
  specs = iter(t.name for t in cf.outputs[:n_specs])
  named = [
    x.name if isinstance(x, tf.Tensor) else next(specs) if isinstance(x, tf.TensorSpec) else x
    for x in leaves
  ]
  names = list(
    dict.fromkeys(
      x for x, leaf in zip(named, leaves) if isinstance(leaf, (tf.Tensor, tf.TensorSpec))
    )
  )
  return tf.nest.pack_sequence_as(cf.structured_outputs, named), names


def _shape(cf, cut, ref: str):
  """A tensor's shape: the function's own graph knows more than a GraphDef imported
  anew (a lookup's shape comes from its table's handle data), where it holds the node."""
  shape = cut.tensors[ref].shape
  try:
    return shape.merge_with(cf.graph.get_tensor_by_name(ref).shape)
  except (KeyError, ValueError):  # an inlined node, or no better shape
    return shape


def _rest_input_names(refs) -> list:
  """Python names for the rest's inputs: an input's own name, or a boundary tensor's
  node name (its last scope) with its output index when not 0."""
  names = []
  for node, index in refs:
    name = re.sub(r"\W", "_", node.rsplit("/", 1)[-1] + (f"_{index}" if index else ""))
    if not name.isidentifier() or keyword.iskeyword(name) or name in ("params", "rng"):
      name = f"_{name}"
    while name in names:
      name += "_"
    names.append(name)
  return names


def _captured(input_map, names, captures, variables) -> None:
  """Maps the captured placeholders among ``names`` to the eager values they capture
  (variables watched, so that the traced function lists them)."""
  tf = import_tensorflow()
  graph = tf.compat.v1.get_default_graph()
  for name, value in captures.items():
    if name in names:
      input_map[f"{name}:0"] = graph.capture(value)
      if name in variables:
        graph.watch_variable(variables[name])


def _prefix_function(graph_def, cut, nodes, inputs, captures, variables, flat_specs, name):
  """The prefix as a ConcreteFunction of the flat inputs: the numeric inputs the rest
  reads, then the boundary tensors."""
  tf = import_tensorflow()
  sub = _without_colocation(graph_def, keep=nodes, rename=lambda nd, ref: _inside(ref, nodes))
  fetches = [f"{n}:{i}" for n, i in cut.boundary]

  def prefix(*flat):
    input_map = {f"{n}:0": t for n, t in zip(inputs, flat) if n in nodes}
    _captured(input_map, nodes, captures, variables)
    computed = (
      tf.graph_util.import_graph_def(
        sub, input_map=input_map, return_elements=fetches, name="host_prefix"
      )
      if fetches
      else []
    )
    passed = [tf.identity(flat[inputs.index(n)]) for n in cut.passed]
    return tuple(passed + list(computed))

  prefix.__name__ = f"{name}_host_prefix"
  return tf.function(prefix, autograph=False).get_concrete_function(*flat_specs)


def _inside(ref: str, nodes) -> Optional[str]:
  """A reference kept when it names one of ``nodes`` (control inputs to others dropped)."""
  return ref if graph_lib.parse_ref(ref.lstrip("^"))[0] in nodes else None


def _rest_function(graph_def, cut, rest_specs, captures, variables, structure, out_names, name):
  """The numeric rest as a ConcreteFunction of the boundary: each tensor the prefix
  computes becomes a Placeholder of the rest's graph."""
  tf = import_tensorflow()
  roots = [graph_lib.parse_ref(o)[0] for o in out_names] + cut.control
  nodes = _upstream(cut.ops, roots, stop=cut.prefix - cut.sources)
  fed = {f"{n}:{i}": f"host_prefix_input_{k}" for k, (n, i) in enumerate(cut.boundary)}

  def rename(nd, ref):
    if ref.startswith("^"):
      return ref if ref[1:] in nodes else None
    name, index = graph_lib.parse_ref(ref)
    return fed.get(f"{name}:{index}", ref)

  sub = _without_colocation(graph_def, keep=nodes, rename=rename)
  for k, (n, i) in enumerate(cut.boundary):
    t = cut.tensors[f"{n}:{i}"]
    ph = sub.node.add(name=f"host_prefix_input_{k}", op="Placeholder")
    ph.attr["dtype"].type = t.dtype.as_datatype_enum
    ph.attr["shape"].shape.CopyFrom(t.shape.as_proto())
  boundary_names = [f"host_prefix_input_{k}" for k in range(len(cut.boundary))]
  fetch = [o for o in out_names if graph_lib.parse_ref(o)[0] in nodes]

  def rest(*args):
    feeds = [f"{n}:0" for n in cut.passed] + [f"{b}:0" for b in boundary_names]
    input_map = dict(zip(feeds, args))
    _captured(input_map, nodes, captures, variables)
    got = (
      dict(
        zip(
          fetch,
          tf.graph_util.import_graph_def(
            sub, input_map=input_map, return_elements=fetch, name="rest"
          ),
        )
      )
      if fetch
      else {}
    )
    for o in out_names:
      if o not in got:  # computed by the prefix: one of the rest's inputs
        got[o] = tf.identity(input_map[fed.get(o, o).split(":")[0] + ":0"])
    return tf.nest.map_structure(lambda x: got.get(x, x) if isinstance(x, str) else x, structure)

  P = inspect.Parameter
  rest.__signature__ = inspect.Signature([P(s.name, P.POSITIONAL_OR_KEYWORD) for s in rest_specs])
  rest.__name__ = name
  return tf.function(rest, autograph=False).get_concrete_function(*rest_specs)


# --- the split, reported (tfprims inspect / tfprims ops) ------------------------------------


def has_strings(cf) -> bool:
  """Whether a ConcreteFunction takes a string input."""
  tf = import_tensorflow()
  n_args = len(cf.inputs) - len(cf.captured_inputs)
  return any(t.dtype == tf.string for t in cf.inputs[:n_args])


def split_summary(cf) -> dict:
  """The split of ``cf`` as the CLI reports it: the prefix's node count, op types and
  boundary tensors, and what the converted rest holds (its params, its inputs)."""
  with _quiet_narrowing():
    prefix, jax_fn, params = split_host_prefix(cf)
  return {
    "prefix_nodes": len(prefix.nodes),
    "prefix_ops": prefix.ops,
    "inputs": [f"{s.name}: {s.dtype.name}{list(s.shape)}" for s in prefix.input_specs],
    "boundary": [str(s) for s in prefix.output_specs],
    "rest_params": len(params),
    "rest_outputs": [str(s) for s in jax_fn.output_specs],
  }


def format_summary(summary: dict) -> str:
  ops = ", ".join(f"{op} x{n}" for op, n in summary["prefix_ops"].items())
  return "\n".join(
    [
      "string inputs: the function is split (tfprims.split_host_prefix, docs/strings.md)",
      f"  inputs: {', '.join(summary['inputs'])}",
      f"  TF host prefix: {summary['prefix_nodes']} nodes ({ops})",
      f"  boundary (inputs of the converted rest): {', '.join(summary['boundary']) or '-'}",
      f"  converted rest: {summary['rest_params']} params; outputs "
      f"{', '.join(summary['rest_outputs'])}",
    ]
  )


def _quiet_narrowing():
  from tfprims import config

  return config.override_config("x64_narrowing", "ignore")
