"""``tf.custom_gradient`` (PreventGradient, which blocks gradients, is in
:mod:`tfprims.ops.prevent_gradient`).

TF marks a custom gradient with ``IdentityN(ys..., xs..., variable values...)``
carrying a ``_gradient_op_type`` attr; the gradient function is registered in
TF's gradient registry under that name. tfprims binds two primitives there:

* ``tf.CustomGradient`` (operands: every IdentityN input; results: the ys): the
  identity on ``ys``. Its JVP keeps forward mode exact: the tangent of ``ys`` is
  the forward graph's own derivative, passed through
* ``tf.CustomGradientTangent`` (operands: ``dys``, ``dxs``, then the primal values
  as residuals), whose value is ``dys`` and whose *transpose* is TF's gradient
  function: the cotangent of ``ys`` goes to ``xs`` through the converted gradient
  function and none goes back to the ops that computed ``ys``, exactly as in TF.

So ``jax.jvp``/``jacfwd`` use the true derivative and ``jax.grad``/``vjp`` the
custom one, and ``hessian`` = jacfwd(jacrev) differentiates the converted
gradient function. Both primitives batch by recording the batched operands;
the gradient function is vmapped when it runs.

The gradient function is traced with TF (``tf.function``) and converted the
first time a gradient is taken. Tensors it captures from the forward graph are
taken from the IdentityN inputs, or recomputed from them with the forward
graph's own ops.
"""

from __future__ import annotations

import dataclasses
import functools
import threading
import warnings
from typing import Any, Optional, Sequence

import jax
import jax.numpy as jnp
import numpy as np
from jax.extend.core import Primitive
from jax.interpreters import ad, batching, mlir

from tfprims import config, core, dtypes, errors, graph as graph_lib, interpreter, pipeline, rules
from tfprims.core import register_op
from tfprims.interpreter import StringConstant, VariableHandle
from tfprims.errors import import_tensorflow


# --- the gradient function ----------------------------------------------------------------


def _closure(fn) -> dict:
  cells = fn.__closure__ or ()
  return {name: cell.cell_contents for name, cell in zip(fn.__code__.co_freevars, cells)}


def _registry_lookup(name: str):
  from tensorflow.python.framework import ops

  try:
    return ops.gradient_registry.lookup(name)
  except LookupError:
    return None


def _tape_closure(fn) -> dict:
  """The variables of TF's ``_graph_mode_decorator`` closure (flat_result_len, result,
  variables), or {} for gradient functions registered otherwise."""
  try:
    tape = _closure(fn).get("tape_grad_fn")
    return _closure(tape) if tape is not None else {}
  except (AttributeError, ValueError):
    return {}


def num_results(name: str) -> Optional[int]:
  """How many leading IdentityN inputs are the custom-gradient function's results."""
  fn = _registry_lookup(name)
  if fn is None:
    return None
  n = _tape_closure(fn).get("flat_result_len")
  return int(n) if n is not None else None


def _tensor_key(t) -> tuple:
  return (id(t.graph), t.op.name, t.value_index)


def _sanitize_input_name(name: str) -> str:
  return "__tfprims_cg_in_" + name.replace(":", "_").replace("/", "_")


def _feed_graph(
  graph_def, feeds: Sequence[str], outputs: Sequence[str], name: str
) -> graph_lib.Graph:
  """A Graph computing ``outputs`` with the tensors ``feeds`` ("op:i") as its inputs."""
  g = graph_lib.from_graph_def(graph_def, [], list(outputs), name=name)
  replace = {graph_lib.parse_ref(t): _sanitize_input_name(t) for t in feeds}
  nodes = []
  for n in g.nodes:
    inputs = [(replace[r], 0) if r in replace else r for r in n.inputs]
    nodes.append(n.rewired(inputs))
  for t in feeds:
    nodes.insert(0, graph_lib.Node(_sanitize_input_name(t), "Placeholder", [], [], {}))
  outs = [replace.get(graph_lib.parse_ref(o), None) for o in outputs]
  out_refs = [(o, 0) if o is not None else graph_lib.parse_ref(t) for o, t in zip(outs, outputs)]
  return graph_lib.Graph(
    name=name, nodes=nodes, inputs=[_sanitize_input_name(t) for t in feeds], outputs=out_refs
  )


@dataclasses.dataclass(eq=False)
class GradFn:
  """A TF gradient function converted to a function of (dys, inputs) -> dxs.

  Hashed by identity: one per custom-gradient node, used as a primitive param.
  """

  name: str  # the _gradient_op_type
  node: str
  num_results: int
  num_inputs: int  # IdentityN inputs (results + args + variable values)
  options: Optional[dict] = None  # the config the forward function was converted with
  _built: Any = None
  _failed: Any = None  # the CustomGradientError building it raised
  _lock: Any = dataclasses.field(default_factory=threading.Lock)

  def __hash__(self):
    return id(self)

  def __repr__(self):
    return self.name

  def _build(self):
    tf = import_tensorflow()
    fn = _registry_lookup(self.name)
    where = f"IdentityN node '{self.node}' (tf.custom_gradient {self.name!r})"
    if fn is None:
      raise errors.CustomGradientError(
        f"{where}: the gradient function is not in TF's gradient registry (a loaded "
        "SavedModel keeps custom gradients only when saved with "
        "tf.saved_model.SaveOptions(experimental_custom_gradients=True))"
      )
    info = _tape_closure(fn)
    op = _find_op(info, self.name)
    if op is None:
      raise errors.CustomGradientError(f"{where}: cannot find the forward TF op")
    # The forward op's own (possibly partial) shapes: the converted gradient
    # function then works for every batch size, like the forward graph.
    specs = [tf.TensorSpec.from_tensor(t) for t in op.inputs]
    try:
      cf = tf.function(lambda *dys: fn(None, *dys), autograph=False).get_concrete_function(*specs)
    except Exception as e:  # the user's gradient function failed to trace
      raise errors.CustomGradientError(
        f"{where}: tracing the gradient function failed: {type(e).__name__}: {e}"
      ) from e
    n_args = len(cf.inputs) - len(cf.captured_inputs)
    op_inputs = {_tensor_key(t): k for k, t in enumerate(op.inputs)}
    variables = list(info.get("variables", ()))
    n_vars = len(variables)
    captures = []  # (placeholder node name, kind, payload)
    recompute = []  # forward tensors to recompute from the IdentityN inputs
    for internal, external in zip(cf.inputs[n_args:], cf.captured_inputs):
      pname = internal.op.name
      if external.dtype == tf.resource:
        idx = next((j for j, v in enumerate(variables) if v.handle is external), None)
        if idx is None:
          raise errors.CustomGradientError(
            f"{where}: the gradient function uses a resource that is not one of the "
            "variables of the custom-gradient function"
          )
        captures.append((pname, "var", self.num_inputs - n_vars + idx))
      elif hasattr(external, "numpy"):
        captures.append(
          (
            pname,
            "const",
            dtypes.canonicalize_value(external.numpy(), f"constant captured by {self.name}"),
          )
        )
      elif _tensor_key(external) in op_inputs:
        captures.append((pname, "input", op_inputs[_tensor_key(external)]))
      else:
        captures.append((pname, "recompute", len(recompute)))
        recompute.append(external)
    recompute_graph = recompute_lib = None
    if recompute:
      fwd = recompute[0].graph
      gd = _graph_def(fwd)
      recompute_graph = _feed_graph(
        gd, [t.name for t in op.inputs], [t.name for t in recompute], f"{self.name}_recompute"
      )
      recompute_lib = graph_lib.Library(gd.library.function)
      try:
        interpreter.check_supported(recompute_graph, recompute_lib)
      except errors.TFPrimsError as e:
        raise errors.CustomGradientError(f"{where}: recomputing forward values: {e}") from e
      unfed = [
        n.name
        for n in recompute_graph.nodes
        if n.op == "Placeholder"
        and n.name in recompute_graph.needed
        and n.name not in recompute_graph.inputs
      ]
      if unfed:
        raise errors.CustomGradientError(
          f"{where}: the gradient function captures forward tensors "
          f"({', '.join(t.name for t in recompute)}) that depend on values which are not "
          f"inputs of the custom-gradient function ({', '.join(unfed)}); pass them as "
          "arguments of the decorated function"
        )
    try:
      # The forward graph's narrowing was reported at conversion.
      prepared = pipeline.prepare(
        cf.graph.as_graph_def(),
        [t.name for t in cf.inputs],
        [t.name for t in cf.outputs],
        options={**config.read_at_conversion(), **(self.options or {}), "x64_narrowing": "ignore"},
        name=self.name,
        input_specs=(),
      )  # fed by tfprims: cotangents, captures
    except errors.TFPrimsError as e:
      raise errors.CustomGradientError(f"{where}: its gradient function: {e}") from e
    graph, library = prepared.graph, prepared.library
    # Structured outputs: [None] * num_results + one per input (None = no gradient).
    flat_out = iter(range(len(cf.outputs)))
    out_index = [
      None if o is None else next(flat_out)
      for o in tf.nest.flatten(cf.structured_outputs, expand_composites=False)
    ]
    if len(out_index) != self.num_inputs:
      raise errors.CustomGradientError(
        f"{where}: the gradient function returns {len(out_index)} values for "
        f"{self.num_inputs} inputs"
      )
    self._built = dict(
      graph=graph,
      library=library,
      n_args=n_args,
      captures=captures,
      recompute_graph=recompute_graph,
      recompute_lib=recompute_lib,
      arg_names=[t.op.name for t in cf.inputs[:n_args]],
      out_index=out_index,
    )

  def __call__(self, dys: Sequence[Any], values: Sequence[Any]) -> list:
    """Cotangents of all IdentityN inputs (None: zero) given the cotangents of the
    results (``dys``) and the forward values of all IdentityN inputs."""
    with self._lock:
      if self._failed is not None:  # tracing it again would fail again
        raise self._failed
      if self._built is None:
        try:
          _outside_jax(self._build)
        except errors.CustomGradientError as e:
          self._failed = e
          raise
    b = self._built
    feeds = {}
    for k, name in enumerate(b["arg_names"]):
      feeds[name] = dys[k] if k < len(dys) else jnp.zeros_like(values[k])
    state = {}
    recomputed = None
    for pname, kind, payload in b["captures"]:
      if kind == "var":
        key = f"__tfprims_cg_var_{payload}"
        state[key] = values[payload]
        feeds[pname] = VariableHandle(key)
      elif kind == "const":
        feeds[pname] = payload
      elif kind == "input":
        feeds[pname] = values[payload]
      else:
        if recomputed is None:
          rctx = interpreter.Context(b["recompute_lib"], {}, options=self.options)
          rg = b["recompute_graph"]
          recomputed = interpreter.run(rctx, rg, dict(zip(rg.inputs, values)))
        feeds[pname] = recomputed[payload]
    ctx = interpreter.Context(b["library"], state, options=self.options)
    outs = interpreter.run(ctx, b["graph"], feeds)
    return [None if i is None else outs[i] for i in b["out_index"]]


def _outside_jax(fn):
  """Runs ``fn`` in a fresh thread: JAX's trace state is per thread, and gradient
  functions that call JAX themselves (jax2tf's) refuse to trace inside a JAX
  transformation, which is where gradients are first taken."""
  result = []

  def run():
    try:
      result.append((True, fn()))
    except BaseException as e:  # re-raised in the caller's thread
      result.append((False, e))

  t = threading.Thread(target=run, name="tfprims-custom-gradient")
  t.start()
  t.join()
  ok, value = result[0]
  if not ok:
    raise value
  return value


def _find_op(info, name):
  graphs = []
  for t in tf_nest_flatten(info.get("result")):
    g = getattr(t, "graph", None)
    if g is not None and g not in graphs:
      graphs.append(g)
  for g in graphs:
    for op in g.get_operations():
      if op.type == "IdentityN":
        try:
          if op.get_attr("_gradient_op_type").decode() == name:
            return op
        except ValueError:
          continue
  return None


def tf_nest_flatten(x):
  tf = import_tensorflow()
  return tf.nest.flatten(x, expand_composites=True) if x is not None else []


@functools.lru_cache(maxsize=64)
def _graph_def_cached(graph_id, graph):
  return graph.as_graph_def()


def _graph_def(graph):
  return _graph_def_cached(id(graph), graph)


_GRAD_FNS: dict[tuple, GradFn] = {}


def opaque_modules(ctx) -> set:
  """The XlaCallModule modules this call ran as one opaque operation (not read as JAX
  operations): jax2tf's custom gradients around them derive forward mode from the
  gradient function."""
  return ctx.family_state.setdefault(__name__ + ".opaque_modules", set())


def grad_fn_for(
  name: str, node: str, num_results: int, num_inputs: int, options: Optional[dict] = None
) -> GradFn:
  key = (name, num_results, num_inputs, tuple(sorted((options or {}).items())))
  if key not in _GRAD_FNS:
    _GRAD_FNS[key] = GradFn(
      name, node, num_results, num_inputs, dict(options) if options is not None else None
    )
  return _GRAD_FNS[key]


# --- jax2tf: custom gradients around XlaCallModule ops ----------------------------------------

_SCANNED: set = set()
_JAX2TF_NAMES: dict[str, set] = {}  # gradient name -> the modules it wraps
_JAX2TF_MODULES: set = set()


def _producing_module(t):
  """The ``module`` attr of the XlaCallModule op computing ``t`` (through the
  Identity/Cast ops jax2tf adds around it), or None."""
  for _ in range(8):
    op = t.op
    if op.type == "XlaCallModule":
      return bytes(op.get_attr("module"))
    if op.type not in ("Identity", "Cast", "IdentityN") or not op.inputs:
      return None
    t = op.inputs[t.value_index if op.type == "IdentityN" else 0]
  return None


def _scan_jax2tf() -> None:
  """Finds the custom gradients jax2tf registered (forward results computed by an
  XlaCallModule op), scanning each registered gradient name once."""
  from tensorflow.python.framework import ops

  for name in ops.gradient_registry.list():
    if name in _SCANNED:
      continue
    _SCANNED.add(name)
    fn = _registry_lookup(name)
    info = _tape_closure(fn) if fn is not None else {}
    n = info.get("flat_result_len")
    op = _find_op(info, name) if n is not None else None
    if op is None:
      continue
    modules = [_producing_module(t) for t in list(op.inputs)[: int(n)]]
    if any(m is not None for m in modules):
      _JAX2TF_NAMES[name] = {m for m in modules if m is not None}
      _JAX2TF_MODULES.update(_JAX2TF_NAMES[name])


def wraps_module(module: bytes) -> bool:
  """Whether a jax2tf ``tf.custom_gradient`` registered in this process wraps an
  XlaCallModule op with this module (so the op's own derivative is never needed)."""
  if module not in _JAX2TF_MODULES:
    _scan_jax2tf()
  return module in _JAX2TF_MODULES


def is_jax2tf(name: str) -> bool:
  """Whether the custom gradient ``name`` wraps XlaCallModule ops (jax2tf's)."""
  if name not in _SCANNED:
    _scan_jax2tf()
  return name in _JAX2TF_NAMES


# --- primitives ------------------------------------------------------------------------------


custom_gradient_p = Primitive("tf.CustomGradient")
custom_gradient_p.multiple_results = True
tangent_p = Primitive("tf.CustomGradientTangent")
tangent_p.multiple_results = True


def _cg_impl(*values, grad, n_y, float_mask, batch, forward):
  return list(values[:n_y])


custom_gradient_p.def_impl(_cg_impl)
custom_gradient_p.def_abstract_eval(lambda *avals, **p: list(avals[: p["n_y"]]))
mlir.register_lowering(custom_gradient_p, mlir.lower_fun(_cg_impl, multiple_results=True))


def _cg_jvp(primals, tangents, *, grad, n_y, float_mask, batch, forward):
  ys = custom_gradient_p.bind(
    *primals, grad=grad, n_y=n_y, float_mask=float_mask, batch=batch, forward=forward
  )
  fy = [i for i in range(n_y) if float_mask[i]]
  fx = [i for i in range(n_y, len(primals)) if float_mask[i]]
  if all(type(tangents[i]) is ad.Zero for i in fy + fx):
    return ys, [ad.Zero(jax.typeof(y).to_tangent_aval()) for y in ys]
  dys = [ad.instantiate_zeros(tangents[i]) for i in fy]
  dxs = [ad.instantiate_zeros(tangents[i]) for i in fx]
  # Tangent layout per batch level: (dys, dxs) follow their primals' layout.
  tbatch = tuple(
    tuple(level[i] for i in fy) + tuple(level[i] for i in fx) + tuple(level) for level in batch
  )
  touts = tangent_p.bind(
    *dys, *dxs, *primals, grad=grad, n_y=n_y, float_mask=float_mask, batch=tbatch, forward=forward
  )
  it = iter(touts)
  return ys, [
    next(it) if float_mask[i] else ad.Zero(jax.typeof(ys[i]).to_tangent_aval()) for i in range(n_y)
  ]


ad.primitive_jvps[custom_gradient_p] = _cg_jvp


def _move_front(args, dims):
  moved, flags = [], []
  for a, d in zip(args, dims):
    if d is None:
      moved.append(a)
      flags.append(False)
    else:
      moved.append(jnp.moveaxis(a, d, 0) if d != 0 else a)
      flags.append(True)
  return moved, tuple(flags)


def _cg_batch(args, dims, *, grad, n_y, float_mask, batch, forward):
  moved, flags = _move_front(args, dims)
  out = custom_gradient_p.bind(
    *moved, grad=grad, n_y=n_y, float_mask=float_mask, batch=batch + (flags,), forward=forward
  )
  return out, [0 if f else None for f in flags[:n_y]]


batching.primitive_batchers[custom_gradient_p] = _cg_batch


def _tangent_impl(*operands, grad, n_y, float_mask, batch, forward):
  n_fy = sum(float_mask[:n_y])
  if forward == "graph":
    return list(operands[:n_fy])
  return _forward_from_grad(grad, n_y, float_mask, batch, operands)


def _forward_from_grad(grad, n_y, float_mask, batch, operands):
  """The tangent of ys as the transpose of the gradient function applied to dxs.

  The gradient function maps the cotangents of ys to those of xs linearly
  (``ct -> J^T ct``); the derivative of that map with respect to ``ct``, pulled back
  from ``dxs``, is ``J dxs``. This is what TF's ForwardAccumulator computes; it needs the
  gradient function to be differentiable itself (jax2tf's is: it carries its own
  custom gradient).
  """
  n_fy, n_lin = sum(float_mask[:n_y]), sum(float_mask)
  dxs, values = list(operands[n_fy:n_lin]), list(operands[n_lin:])
  fy = [i for i in range(n_y) if float_mask[i]]
  dx_shapes = [np.shape(d) for d in dxs]

  def lin(cts):
    grads = _apply_grad(grad, n_y, float_mask, batch, cts, values, dx_shapes)
    return [
      jnp.zeros(s, jnp.result_type(d)) if g is None else g for g, s, d in zip(grads, dx_shapes, dxs)
    ]

  # Cotangents of ys are laid out (batched) like the ys' tangents, the first operands.
  ct0 = [jnp.zeros(np.shape(operands[k]), jnp.result_type(values[i])) for k, i in enumerate(fy)]
  _, pullback = jax.vjp(lin, ct0)
  (out,) = pullback(dxs)
  return list(out)


tangent_p.def_impl(_tangent_impl)
tangent_p.def_abstract_eval(lambda *avals, **p: list(avals[: sum(p["float_mask"][: p["n_y"]])]))
mlir.register_lowering(tangent_p, mlir.lower_fun(_tangent_impl, multiple_results=True))


def _tangent_jvp(primals, tangents, *, grad, n_y, float_mask, batch, forward):
  params = dict(grad=grad, n_y=n_y, float_mask=float_mask, batch=batch, forward=forward)
  out = tangent_p.bind(*primals, **params)
  n_lin = sum(float_mask)
  lin_t = tangents[:n_lin]
  zero_out = [ad.Zero(jax.typeof(o).to_tangent_aval()) for o in out]
  residual_t = [t for t in tangents[n_lin:] if type(t) is not ad.Zero]
  if residual_t and forward == "grad":
    # J(x) dx also varies with x: that term is not available (a marker that raises
    # if its value is ever needed, e.g. jvp of jvp; hessian never reads it).
    ts = [ad.instantiate_zeros(t) for t in tangents]
    return out, unavailable_p.bind(*out, *ts, n_out=len(out), what=str(grad))
  if all(type(t) is ad.Zero for t in lin_t):
    return out, zero_out
  lin_t = [ad.instantiate_zeros(t) for t in lin_t]
  return out, tangent_p.bind(*lin_t, *primals[n_lin:], **params)


ad.primitive_jvps[tangent_p] = _tangent_jvp


def _tangent_batch(args, dims, *, grad, n_y, float_mask, batch, forward):
  moved, flags = _move_front(args, dims)
  n_fy = sum(float_mask[:n_y])
  out = tangent_p.bind(
    *moved, grad=grad, n_y=n_y, float_mask=float_mask, batch=batch + (flags,), forward=forward
  )
  return out, [0 if f else None for f in flags[:n_fy]]


batching.primitive_batchers[tangent_p] = _tangent_batch


def _apply_grad(grad, n_y, float_mask, batch, cts, values, dx_shapes):
  """Cotangents of the float inputs' tangents (dxs), running the gradient function
  under one vmap per batch level. ``dx_shapes``: the shapes the results must have."""
  fy = [i for i in range(n_y) if float_mask[i]]
  fx = [i for i in range(n_y, len(float_mask)) if float_mask[i]]
  if not batch:
    dys = [jnp.zeros(np.shape(values[i]), jnp.result_type(values[i])) for i in range(n_y)]
    for i, ct in zip(fy, cts):
      dys[i] = ct
    grads = grad(dys, values)
    out = []
    for i, shape in zip(fx, dx_shapes):
      g = grads[i]
      if g is not None:
        g = jnp.asarray(g).astype(jnp.result_type(values[i]))
        g = g if g.shape == tuple(shape) else jnp.broadcast_to(g, shape)
      out.append(g)
    return out
  level = batch[-1]
  n_fy, n_fx = len(fy), len(fx)
  ct_axes = [0 if f else None for f in level[:n_fy]]
  dx_flags = level[n_fy : n_fy + n_fx]
  val_axes = [0 if f else None for f in level[n_fy + n_fx :]]
  inner_shapes = [tuple(s[1:]) if f else tuple(s) for s, f in zip(dx_shapes, dx_flags)]
  if not any(a == 0 for a in ct_axes + val_axes):
    res = _apply_grad(grad, n_y, float_mask, batch[:-1], cts, values, inner_shapes)
    return [
      r if r is None or not f else jnp.broadcast_to(r[None], s)
      for r, f, s in zip(res, dx_flags, dx_shapes)
    ]
  nones = []

  def one(c, v):
    res = _apply_grad(grad, n_y, float_mask, batch[:-1], c, v, inner_shapes)
    nones[:] = [r is None for r in res]
    return [jnp.zeros((), jnp.float32) if r is None else r for r in res]

  res = jax.vmap(one, in_axes=(ct_axes, val_axes), out_axes=0)(list(cts), list(values))
  return [
    None if is_none else (r if batched else jnp.sum(r, axis=0))
    for r, is_none, batched in zip(res, nones, dx_flags)
  ]


def _tangent_transpose(cts, *operands, grad, n_y, float_mask, batch, forward):
  n_fy = sum(float_mask[:n_y])
  n_lin = sum(float_mask)
  lin, values = operands[:n_lin], operands[n_lin:]
  if any(ad.is_undefined_primal(v) for v in values):
    raise errors.CustomGradientError(f"tf.custom_gradient {grad}: its residuals are linear")
  if all(type(c) is ad.Zero for c in cts):
    return [ad.Zero(x.aval) if ad.is_undefined_primal(x) else None for x in lin] + [None] * len(
      values
    )
  cts = [ad.instantiate_zeros(c) for c in cts]
  dx_shapes = [x.aval.shape for x in lin[n_fy:]]
  try:
    dxs = _apply_grad(grad, n_y, float_mask, batch, cts, list(values), dx_shapes)
  except errors.CustomGradientError:
    if forward != "graph" or not is_jax2tf(grad.name):
      raise
    # jax2tf's gradient function differentiates every input, and JAX cannot
    # differentiate some (scatter_mul's updates with repeated indices, ...): the
    # module, read as JAX operations, is differentiated natively instead (the same
    # derivative), w.r.t. only the inputs asked for.
    return [
      (c if k < n_fy else ad.Zero(x.aval)) if ad.is_undefined_primal(x) else None
      for k, (x, c) in enumerate(zip(lin, cts + [None] * len(lin)))
    ] + [None] * len(values)
  out = []
  for k, x in enumerate(lin):
    if not ad.is_undefined_primal(x):
      out.append(None)
    elif k < n_fy:
      out.append(ad.Zero(x.aval))  # no gradient flows to the ops computing ys (as in TF)
    else:
      g = dxs[k - n_fy]
      out.append(ad.Zero(x.aval) if g is None else g)
  return out + [None] * len(values)


ad.primitive_transposes[tangent_p] = _tangent_transpose


# A derivative that is not available; fine as long as nothing reads its value.
unavailable_p = Primitive("tf.CustomGradientTangent.unavailable")
unavailable_p.multiple_results = True


def _unavailable_error(what):
  return errors.CustomGradientError(
    f"tf.custom_gradient {what}: this derivative needs the forward-mode derivative of "
    "the Jacobian-vector product derived from the gradient function (e.g. jvp of jvp of "
    "a jax2tf function); use reverse mode for the inner derivative (jax.hessian, "
    "jacfwd(jacrev(f)) and jacrev(jacrev(f)) work)"
  )


def _unavailable_impl(*args, n_out, what):
  raise _unavailable_error(what)


def _unavailable_lowering(ctx, *args, n_out, what):
  raise _unavailable_error(what)


def _unavailable_transpose(cts, *args, n_out, what):
  if all(type(c) is ad.Zero for c in cts):
    return [ad.Zero(a.aval) if ad.is_undefined_primal(a) else None for a in args]
  raise _unavailable_error(what)


def _unavailable_batch(args, dims, *, n_out, what):
  size = next(a.shape[d] for a, d in zip(args, dims) if d is not None)
  moved = [
    jnp.moveaxis(a, d, 0) if d is not None else jnp.broadcast_to(a, (size,) + a.shape)
    for a, d in zip(args, dims)
  ]
  return unavailable_p.bind(*moved, n_out=n_out, what=what), [0] * n_out


unavailable_p.def_impl(_unavailable_impl)
unavailable_p.def_abstract_eval(
  lambda *avals, n_out, what: [a.to_tangent_aval() for a in avals[:n_out]]
)
mlir.register_lowering(unavailable_p, _unavailable_lowering)
ad.primitive_transposes[unavailable_p] = _unavailable_transpose
ad.primitive_jvps[unavailable_p] = lambda primals, tangents, **p: (_ for _ in ()).throw(
  _unavailable_error(p["what"])
)
batching.primitive_batchers[unavailable_p] = _unavailable_batch


# --- IdentityN: the identity, and the marker of tf.custom_gradient -------------------------


_warned: set = set()


def _identity_n(ctx, node, inputs):
  """Passes its inputs through; a node carrying ``_gradient_op_type`` (TF's
  marker of a tf.custom_gradient) binds ``tf.CustomGradient`` instead."""
  name = node.attr("_gradient_op_type", None)
  if not name or all(core.is_concrete(v) for v in inputs):
    return list(inputs)
  if not ctx.option("convert_custom_gradient"):
    return list(inputs)  # the config says: differentiate the forward graph
  if any(
    isinstance(v, (VariableHandle, StringConstant)) or not hasattr(v, "dtype") for v in inputs
  ):
    return list(inputs)
  n_y = num_results(name)
  if n_y is None:
    if name not in _warned:
      _warned.add(name)
      warnings.warn(
        f"IdentityN node '{node.name}': the gradient function {name!r} of this "
        "tf.custom_gradient is not in TF's gradient registry; JAX will differentiate "
        "the forward computation instead",
        stacklevel=2,
      )
    return list(inputs)
  values = [jnp.asarray(v) for v in inputs]
  float_mask = tuple(bool(jnp.issubdtype(v.dtype, jnp.inexact)) for v in values)
  grad = grad_fn_for(name, node.name, n_y, len(values), ctx.options)
  # Where jax2tf's forward computation (XlaCallModule) was called as one operation,
  # opaque to JAX, forward mode is derived from the gradient function; modules read as
  # JAX operations are differentiated natively.
  opaque = is_jax2tf(name) and bool(_JAX2TF_NAMES[name] & opaque_modules(ctx))
  forward = "grad" if opaque else "graph"
  ys = custom_gradient_p.bind(
    *values, grad=grad, n_y=n_y, float_mask=float_mask, batch=(), forward=forward
  )
  return list(ys) + list(inputs[n_y:])


def _identity_n_spec(st):
  @st.composite
  def calls(draw):
    n = draw(st.integers(1, 3))
    return {"input": [draw(st.arrays(st.dtypes(st.ALL), st.shapes())) for _ in range(n)]}

  return st.Spec(calls())


IdentityN = register_op(
  "IdentityN",
  lambda *input: tuple(input),
  family="array",
  multiple_results=True,
  linear=True,
  transpose=lambda cts, *xs: [rules.instantiate(ct) for ct in cts],
  interpret=_identity_n,
  pass_through=True,
  batching=rules.per_op(rules.same_op_batching),
  doc="Its inputs, unchanged (with _gradient_op_type: a tf.custom_gradient).",
  spec=_identity_n_spec,
)
