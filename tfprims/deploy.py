"""A converted function as a TensorFlow-free artifact: ``tfprims export`` and
:func:`load_exported`.

An artifact is a directory:

* ``model.jax_exported``: the jitted function ``(params, *inputs) -> outputs``,
  serialized with ``jax.export`` (StableHLO plus its calling convention) with its
  VJP; unknown (None) input dims are symbolic, so one artifact serves every batch size;
* ``params.npz``: the params by name (dtypes numpy cannot store natively, such
  as bfloat16, as same-width unsigned integers; the manifest has the dtype);
* ``manifest.json``: the inputs (names, shapes with symbolic dims, dtypes) in
  call order, the outputs, the params, whether the VJP is there, the platforms,
  and the versions.

Loading needs jax and numpy only: ``import tfprims`` and this module import no
TensorFlow, no op families (``tfprims.ops``) and no test tooling on the load path.
Loading turns on JAX's persistent compilation cache (:mod:`tfprims.cache`: the
``compilation_cache`` option), so a later process reads the compiled program from
disk instead of compiling it; a direct call (concrete arrays) runs an executable
compiled once per process and kept in that cache (:mod:`tfprims.executables`), which
a later process loads without tracing the call at all. The loaded artifact
(:class:`ExportedModel`) is a JAX function: jit, vmap and grad go through it, and it
checks its inputs against the manifest (typed errors naming the input, no casts).
Without tfprims, the artifact is read with ``jax.export.deserialize`` and
``numpy.load`` (see README).
"""

from __future__ import annotations

import ast
import dataclasses
import json
import operator
import os
from typing import Any, Mapping, Optional, Sequence

import jax
import numpy as np

from tfprims import cache, errors, executables, progress

FORMAT = "tfprims-export/1"
MODEL_FILE, PARAMS_FILE, MANIFEST_FILE = "model.jax_exported", "params.npz", "manifest.json"


def _storable(value: np.ndarray) -> np.ndarray:
  """``value`` as numpy can save without pickling: extension dtypes (bfloat16,
  float8...) as unsigned integers of the same width."""
  if value.dtype.isbuiltin:
    return value
  return value.view(np.dtype(f"uint{8 * value.dtype.itemsize}"))


def _dims(specs, batch_polymorphic: bool, batch: Optional[int], constraints=()):
  """Shapes for ``jax.export``: a leading None dim is ``batch`` (an int, or one
  symbolic dim shared by the inputs); any other None dim gets its own symbol, and
  ``constraints`` ("batch >= 2") bound the symbols."""
  names: list[str] = []
  layout = []
  for spec in specs:
    if spec.shape is None:
      raise errors.InputShapeError(
        f"input {spec.name!r} has an unknown rank: give its shape (`shapes`)"
      )
    dims = []
    for axis, d in enumerate(spec.shape):
      if d is not None:
        dims.append(int(d))
      elif axis == 0 and batch is not None:
        dims.append(int(batch))
      elif not batch_polymorphic:
        raise errors.InputShapeError(
          f"input {spec.name!r} has an unknown dim {axis} ({spec.shape}): export with "
          "symbolic dims (batch_polymorphic=True), or give a batch size or concrete "
          "shapes (`batch`, `shapes`)"
        )
      else:
        name = "batch" if axis == 0 else f"{_identifier(spec.name)}_{axis}"
        if name not in names:
          names.append(name)
        dims.append(name)
    layout.append(dims)
  if not names:
    if constraints:
      raise errors.InputShapeError(
        f"constraints {list(constraints)} bound symbolic dims, but every input dim is concrete here"
      )
    return [tuple(d) for d in layout]
  for c in constraints:  # JAX would take an unknown name as a new, unbound symbol
    unknown = sorted(_symbols(c) - set(names))
    if unknown:
      raise errors.InputShapeError(
        f"constraint {c!r} names {', '.join(unknown)}, but the symbolic dims are {', '.join(names)}"
      )
  try:
    dims = jax.export.symbolic_shape(", ".join(names), constraints=tuple(constraints))
  except ValueError as e:  # a malformed constraint
    raise errors.InputShapeError(
      f"constraints {list(constraints)}: {str(e).splitlines()[0]} (the symbolic dims "
      f"are {', '.join(names)})"
    ) from None
  symbols = dict(zip(names, dims))
  return [tuple(symbols[d] if isinstance(d, str) else d for d in dims) for dims in layout]


def _output_names(fn, n: int) -> list[str]:
  """Each output's path in the function's output structure ("logits", "0"...), or
  a GraphDef's output tensor names."""
  import tree

  if hasattr(fn, "output_names"):
    return list(fn.output_names)
  paths = [
    path for path, spec in tree.flatten_with_path(fn.structured_outputs) if hasattr(spec, "dtype")
  ]
  if len(paths) != n:
    return [str(i) for i in range(n)]
  return ["/".join(str(p) for p in path) or "output" for path in paths]


def _identifier(name: str) -> str:
  return "".join(c if c.isalnum() else "_" for c in name) or "x"


def export(
  fn,
  params: Mapping[str, Any],
  path: str,
  *,
  batch_polymorphic: bool = True,
  batch: Optional[int] = None,
  shapes: Optional[Mapping[str, Sequence[int]]] = None,
  constraints: Sequence[str] = (),
  platforms: Optional[Sequence[str]] = None,
  source: str = "",
  differentiable: bool = True,
) -> dict:
  """Writes the artifact of a converted function and its params to directory
  ``path``; returns the manifest.

  Args:
    fn, params: what :func:`tfprims.convert` returned, or the function
      :func:`tfprims.convert_graph_def` returned (a frozen graph) and ``{}``.
    batch_polymorphic: unknown (None) input dims become symbolic dims. Shape
      arithmetic on them (``tf.shape(x)`` feeding a reshape, as in Keras Dense on
      3-D inputs and Flatten) is folded symbolically; a static input that needs a
      concrete size raises, naming its node: export with ``batch`` then.
    batch: a concrete size for the leading unknown dim of every input.
    shapes: concrete shapes for some inputs (by input name), replacing their specs'
      (an image size a graph needs concretely, say).
    constraints: what holds between the symbolic dims, in ``jax.export``'s syntax
      ("batch >= 2", "images_1 == images_2"), where the graph needs it decided at trace
      time (``tf.math.top_k`` of 2 along the batch axis, a reflecting pad of 2 of it);
      the artifact checks them when called. The symbols are ``batch`` (a leading
      unknown dim) and ``NAME_AXIS`` (input ``NAME``'s other unknown dims).
    platforms: e.g. ``("cpu", "cuda")``; default: the current backend.
    source: what was converted (recorded in the manifest).
    differentiable: also serialize the function's VJP (``jax.export``'s
      ``vjp_order=1``), so ``jax.grad`` works through the loaded artifact. Where
      the VJP cannot be exported the artifact is written without it and the manifest
      says why (``"vjp": false``, ``"vjp_error"``).
  """
  import tree

  unknown = sorted(set(shapes or ()) - {s.name for s in fn.input_specs})
  if unknown:
    raise errors.InputStructureError(
      f"shapes for unknown inputs {unknown}; the inputs are {[s.name for s in fn.input_specs]}"
    )
  specs = [
    dataclasses.replace(s, shape=tuple(int(d) for d in shapes[s.name]))
    if shapes and s.name in shapes
    else s
    for s in fn.input_specs
  ]
  shapes_in = _dims(specs, batch_polymorphic, batch, constraints)
  if hasattr(fn, "structured_inputs"):  # a ConvertedFunction

    def call(params, *flat):
      args, kwargs = tree.unflatten_as(fn.structured_inputs, list(flat))
      return fn(params, *args, **kwargs)[0]
  else:  # a converted GraphDef: fn(*inputs) -> list of outputs

    def call(params, *flat):
      del params
      return fn(*flat)

  param_structs = {
    k: jax.ShapeDtypeStruct(np.shape(v), np.asarray(v).dtype) for k, v in params.items()
  }
  in_structs = [jax.ShapeDtypeStruct(shape, s.dtype) for shape, s in zip(shapes_in, specs)]
  name = getattr(fn, "__name__", "graph")
  with progress.phase(f"tfprims export: tracing and lowering {name}"):
    exported = jax.export.export(jax.jit(call), platforms=platforms)(param_structs, *in_structs)
  with progress.phase("tfprims export: serializing" + (" with the VJP" if differentiable else "")):
    serialized, vjp_error = _serialize(exported, differentiable)

  os.makedirs(path, exist_ok=True)
  with open(os.path.join(path, MODEL_FILE), "wb") as f:
    f.write(serialized)
  arrays = {k: np.asarray(v) for k, v in params.items()}
  # Keys of their own: a param named like a savez argument ("file") must not clash.
  keys = {k: f"p{i}" for i, k in enumerate(arrays)}
  with progress.phase(f"tfprims export: writing {len(arrays)} params"):
    np.savez(os.path.join(path, PARAMS_FILE), **{keys[k]: _storable(v) for k, v in arrays.items()})
  from tfprims import __version__

  manifest = {
    "format": FORMAT,
    "source": source,
    "function": name,
    "inputs": [
      {
        "name": s.name,
        "shape": [str(d) if not isinstance(d, int) else d for d in shape],
        "dtype": str(s.dtype),
      }
      for s, shape in zip(specs, shapes_in)
    ],
    "outputs": [
      {
        "name": name,
        "shape": [str(d) if not isinstance(d, int) else d for d in a.shape],
        "dtype": str(a.dtype),
      }
      for name, a in zip(_output_names(fn, len(exported.out_avals)), exported.out_avals)
    ],
    "params": [
      {"name": k, "key": keys[k], "shape": list(v.shape), "dtype": str(v.dtype)}
      for k, v in arrays.items()
    ],
    "constraints": list(constraints),
    "vjp": vjp_error is None,
    **({"vjp_error": vjp_error} if vjp_error else {}),
    "platforms": list(exported.platforms),
    "versions": {"tfprims": __version__, "jax": jax.__version__},
  }
  with open(os.path.join(path, MANIFEST_FILE), "w") as f:
    json.dump(manifest, f, indent=1)
  return manifest


def _serialize(exported, differentiable: bool):
  """The serialized artifact, with its VJP where ``differentiable`` and it exports;
  and why it has none (None where it has one)."""
  if not differentiable:
    return exported.serialize(), "exported with differentiable=False"
  try:
    return exported.serialize(vjp_order=1), None
  except Exception as e:  # pylint: disable=broad-except  (any failure to export the VJP)
    first = (str(e).strip().splitlines() or [""])[0]
    return exported.serialize(), f"{type(e).__name__}: {first[:300]}"


_BINARY = {
  ast.Add: operator.add,
  ast.Sub: operator.sub,
  ast.Mult: operator.mul,
  ast.FloorDiv: operator.floordiv,
  ast.Mod: operator.mod,
}
_COMPARE = {ast.GtE: operator.ge, ast.LtE: operator.le, ast.Eq: operator.eq}
_CALLS = {"max": max, "min": min, "floordiv": operator.floordiv, "mod": operator.mod}


def _symbols(constraint: str) -> set:
  """The names a constraint uses (not its functions' names)."""
  try:
    tree = ast.parse(constraint, mode="eval")
  except SyntaxError:
    return set()  # jax.export's parser names the problem
  functions = {id(n.func) for n in ast.walk(tree) if isinstance(n, ast.Call)}
  return {n.id for n in ast.walk(tree) if isinstance(n, ast.Name) and id(n) not in functions}


def _holds(constraint: str, sizes: Mapping[str, int]) -> Optional[bool]:
  """Whether ``constraint`` (jax.export's syntax: "batch >= 3", "max(a, b) == c + 1") holds
  for these sizes of its symbols; None where it is not in that syntax.

  A deserialized artifact called with sizes that break its constraints fails in JAX's
  shape refinement ("Error refining shapes"), so the loaded model checks them first."""

  def value(node):
    if isinstance(node, ast.Constant) and type(node.value) is int:
      return node.value
    if isinstance(node, ast.Name):
      return sizes[node.id]
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
      return -value(node.operand)
    if isinstance(node, ast.BinOp) and type(node.op) in _BINARY:
      return _BINARY[type(node.op)](value(node.left), value(node.right))
    if (
      isinstance(node, ast.Call)
      and isinstance(node.func, ast.Name)
      and node.func.id in _CALLS
      and not node.keywords
    ):
      return _CALLS[node.func.id](*map(value, node.args))
    raise ValueError(ast.dump(node))

  try:
    tree = ast.parse(constraint, mode="eval").body
    if not (isinstance(tree, ast.Compare) and len(tree.ops) == 1 and type(tree.ops[0]) in _COMPARE):
      return None
    return _COMPARE[type(tree.ops[0])](value(tree.left), value(tree.comparators[0]))
  except (SyntaxError, ValueError, KeyError, TypeError, ZeroDivisionError):
    return None


class NoVJPError(errors.TFPrimsError, ValueError):
  """Reverse-mode differentiation of an artifact written without its VJP."""


def _jax_function(exported, vjp_error: Optional[str]):
  """``exported.call`` as a JAX function of ``(params, *inputs)`` that ``jax.vmap``
  batches (the members one after another: the artifact's own dims are what it was
  exported for) and ``jax.grad`` differentiates with the artifact's VJP (batched the
  same way)."""
  from jax import custom_batching

  primal = custom_batching.sequential_vmap(exported.call)
  backward: list = []  # (the VJP's batched call, its Exported), made on first use

  def vjp():
    if not backward:
      if vjp_error is not None:
        raise NoVJPError(
          f"this artifact has no VJP, so jax.grad cannot go through it ({vjp_error})"
        )
      try:
        exp_vjp = exported.vjp()
      except ValueError as e:  # jax.export: "No VJP is available"
        raise NoVJPError(
          f"this artifact has no VJP ({e}): export it again with this "
          "tfprims version (tfprims export) to differentiate it"
        ) from None
      backward.append((custom_batching.sequential_vmap(exp_vjp.call), exp_vjp))
    return backward[0]

  @jax.custom_vjp
  def fn(params, *inputs):
    return primal(params, *inputs)

  def fwd(params, *inputs):
    vjp()
    return primal(params, *inputs), (params, inputs)

  def bwd(residual, cts):
    params, inputs = residual
    flat, tree = jax.tree.flatten((params, *inputs))
    call, exp_vjp = vjp()
    # Integer outputs' cotangents are float0 zeros in the VJP's calling convention.
    cts = [
      np.zeros(np.shape(c), jax.dtypes.float0) if a.dtype == jax.dtypes.float0 else c
      for c, a in zip(jax.tree.leaves(cts), exp_vjp.in_avals[len(flat) :])
    ]
    return tuple(jax.tree.unflatten(tree, call(*flat, *cts)))

  fn.defvjp(fwd, bwd)
  return fn


def _shape_text(dims) -> str:
  return "[" + ", ".join(map(str, dims)) + "]"


class ExportedModel:
  """A loaded artifact, as a JAX function: ``model(*inputs)`` or
  ``model(**inputs_by_name)`` returns the converted function's outputs (same
  structure); ``model.apply(params, *inputs)`` takes the params as its first argument
  (to differentiate with respect to them).

  It composes with JAX's transformations: ``jax.jit``; ``jax.vmap`` over a new leading
  axis (the members run one after another, as ``lax.map``; the artifact's own unknown
  dims are symbolic, so a batch it was exported for is best passed in that dim);
  ``jax.grad`` and ``jax.vjp`` (with the VJP the artifact stores, see :func:`export`;
  forward mode, ``jax.jvp``, is not available). Arrays are passed as they are: device
  arrays stay on their device, and the params are put on the default device once, at
  load. Inputs are checked against the manifest and nothing is cast: another dtype
  raises :class:`~tfprims.InputDtypeError`, a shape that does not fit
  :class:`~tfprims.InputShapeError`, each naming the input (Python scalars and lists
  take the input's dtype where numpy casts them within their kind).

  Attributes: ``path``, ``manifest``, ``exported`` (the ``jax.export.Exported``),
  ``params``, ``input_names``.
  """

  def __init__(self, path: str):
    self.path = path
    cache.enable_compilation_cache()
    with open(os.path.join(path, MANIFEST_FILE)) as f:
      self.manifest = json.load(f)
    if self.manifest.get("format") != FORMAT:
      raise ValueError(
        f"{path!r} is not a tfprims export artifact "
        f"(format {self.manifest.get('format')!r}, expected {FORMAT!r})"
      )
    with open(os.path.join(path, MODEL_FILE), "rb") as f:
      artifact = f.read()
    self.exported = jax.export.deserialize(bytearray(artifact))
    # On the default device once (concrete arrays even when loaded inside a jit trace).
    with (
      np.load(os.path.join(path, PARAMS_FILE), allow_pickle=False) as data,
      jax.ensure_compile_time_eval(),
    ):
      self.params = {
        p["name"]: jax.device_put(data[p["key"]].view(jax.numpy.dtype(p["dtype"])))
        for p in self.manifest["params"]
      }
    self.input_names = [i["name"] for i in self.manifest["inputs"]]
    # The exported function's flat arguments: the params' leaves, then the inputs.
    self._input_avals = self.exported.in_avals[
      len(self.exported.in_avals) - len(self.input_names) :
    ]
    vjp_error = (
      None
      if self.manifest.get("vjp", True)
      else self.manifest.get("vjp_error", "exported without it")
    )
    self._fn = _jax_function(self.exported, vjp_error)
    self._executables = executables.Executables(self._fn, artifact)

  def __call__(self, *args, **kwargs):
    if args and isinstance(args[0], Mapping):
      names = ", ".join(self.input_names)
      raise errors.InputStructureError(
        f"the artifact holds its params (model.params): call it with the inputs only, "
        f"model({names}); model.apply(params, {names}) takes other params"
      )
    return self._run(self.params, self._inputs(args, kwargs))

  def apply(self, params: Mapping[str, Any], *args, **kwargs):
    """The artifact's function with ``params`` (by name, as ``model.params``) instead of
    its own: ``jax.grad(lambda p: loss(model.apply(p, x)))(model.params)``."""
    if not isinstance(params, Mapping):
      names = ", ".join(self.input_names)
      raise errors.InputStructureError(
        f"the first argument of apply is the params (a dict by name, as model.params), "
        f"then the inputs: apply(params, {names}); got {type(params).__name__}. "
        f"model({names}) uses the artifact's own params"
      )
    return self._run(self._params(params), self._inputs(args, kwargs))

  def _run(self, params, inputs):
    """A direct call runs the compiled executable (:mod:`tfprims.executables`); one
    inside a transformation, the function JAX transforms."""
    out = self._executables.call(params, inputs)
    return self._fn(params, *inputs) if out is None else out

  def _params(self, params):
    specs = {p["name"]: p for p in self.manifest["params"]}
    missing, unknown = sorted(set(specs) - set(params)), sorted(set(params) - set(specs))
    if missing or unknown:
      raise errors.InputStructureError(
        "params do not match the artifact's: "
        + "; ".join(
          f"{what} {names}" for what, names in (("missing", missing), ("unknown", unknown)) if names
        )
      )
    out = {}
    for name, spec in specs.items():
      value = params[name]
      want = np.dtype(jax.numpy.dtype(spec["dtype"]))
      if not hasattr(value, "dtype") or np.dtype(value.dtype) != want:
        got = np.dtype(value.dtype).name if hasattr(value, "dtype") else type(value).__name__
        raise errors.InputDtypeError(f"param {name!r} is {got}, the artifact takes {want.name}")
      if tuple(np.shape(value)) != tuple(spec["shape"]):
        raise errors.InputShapeError(
          f"param {name!r} has shape {list(np.shape(value))}, the artifact takes {spec['shape']}"
        )
      out[name] = value
    return out

  def _inputs(self, args, kwargs) -> list:
    """The inputs in call order, checked against the manifest (and its constraints)."""
    names = self.input_names
    if len(args) > len(names):
      raise errors.InputStructureError(
        f"expected at most {len(names)} inputs ({', '.join(names)}), got {len(args)}"
      )
    given = dict(zip(names, args))
    for name, value in kwargs.items():
      if name not in names:
        raise errors.InputStructureError(f"unknown input {name!r}; inputs: {names}")
      if name in given:
        raise errors.InputStructureError(f"input {name!r} given twice")
      given[name] = value
    missing = [n for n in names if n not in given]
    if missing:
      raise errors.InputStructureError(f"missing inputs: {missing} (inputs, in order: {names})")
    sizes: dict = {}
    inputs = [
      self._input(spec, aval, given[spec["name"]], sizes)
      for spec, aval in zip(self.manifest["inputs"], self._input_avals)
    ]
    self._check_constraints({k: v[0] for k, v in sizes.items()})
    return inputs

  @staticmethod
  def _input(spec, aval, value, sizes):
    name, want = spec["name"], np.dtype(aval.dtype)
    if not (hasattr(value, "dtype") and hasattr(value, "shape")):  # Python scalars, lists
      host = np.asarray(value)
      if not np.can_cast(host.dtype, want, "same_kind"):
        raise errors.InputDtypeError(
          f"input {name!r} is {host.dtype.name} data ({type(value).__name__}); the artifact "
          f"takes {want.name}"
        )
      value = host.astype(want)
    elif np.dtype(value.dtype) != want:
      raise errors.InputDtypeError(
        f"input {name!r} has dtype {np.dtype(value.dtype).name}, the artifact takes "
        f"{want.name}: cast it (x.astype({want.name!r})); the artifact does not cast"
      )
    shape, dims = tuple(value.shape), spec["shape"]
    if len(shape) != len(dims):
      raise errors.InputShapeError(
        f"input {name!r} has shape {list(shape)} (rank {len(shape)}), the artifact takes "
        f"{_shape_text(dims)} (rank {len(dims)})"
      )
    for axis, (d, w) in enumerate(zip(shape, dims)):
      if not isinstance(d, int):  # symbolic: jax.export checks it
        continue
      if isinstance(w, int) and d != w:
        raise errors.InputShapeError(
          f"input {name!r} has shape {list(shape)}, the artifact takes {_shape_text(dims)}: "
          f"dim {axis} is {d}, not {w}"
        )
      if isinstance(w, str):
        seen = sizes.setdefault(w, (d, name, axis))
        if seen[0] != d:
          raise errors.InputShapeError(
            f"input {name!r} has {w} = {d} (dim {axis} of {list(shape)}), but input "
            f"{seen[1]!r} has {w} = {seen[0]} (its dim {seen[2]}): inputs sharing a "
            "symbolic dim must agree"
          )
    return value

  def _check_constraints(self, sizes):
    broken = [c for c in self.manifest.get("constraints", ()) if _holds(c, sizes) is False]
    if broken:
      raise errors.InputShapeError(
        f"the inputs' sizes {sizes} break the artifact's constraints {broken} (it was "
        "exported for sizes where they hold: tfprims export --constraint)"
      )

  def __repr__(self):
    ins = ", ".join(f"{i['name']}: {i['dtype']}{i['shape']}" for i in self.manifest["inputs"])
    return f"<tfprims.ExportedModel {self.manifest['function']}({ins})>"


def load_exported(path: str) -> ExportedModel:
  """The artifact ``tfprims export`` (or :func:`export`) wrote to ``path``, as a JAX
  function (see :class:`ExportedModel`); needs no TensorFlow. Turns on JAX's persistent
  compilation cache (the ``compilation_cache`` option; :mod:`tfprims.cache`)."""
  return ExportedModel(path)
