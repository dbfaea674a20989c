"""A converted function as a TensorFlow-free artifact: ``tfprims export`` and
:func:`load_exported`.

An artifact is a directory:

* ``model.jax_exported``: the jitted function ``(params, *inputs) -> outputs``,
  serialized with ``jax.export`` (StableHLO plus its calling convention); unknown
  (None) input dims are symbolic, so one artifact serves every batch size;
* ``params.npz``: the params by name (dtypes numpy cannot store natively, such
  as bfloat16, as same-width unsigned integers; the manifest has the dtype);
* ``manifest.json``: the inputs (names, shapes with symbolic dims, dtypes) in
  call order, the outputs, the params, the platforms, and the versions.

Loading needs jax and numpy only: this module imports no TensorFlow on the
load path, and neither does ``import tfprims``. Without tfprims, the artifact
is read with ``jax.export.deserialize`` and ``numpy.load`` (see README).
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
  from tfprims import errors
  names: list[str] = []
  layout = []
  for spec in specs:
    if spec.shape is None:
      raise errors.InputShapeError(
          f"input {spec.name!r} has an unknown rank: give its shape (`shapes`)")
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
            "shapes (`batch`, `shapes`)")
      else:
        name = "batch" if axis == 0 else f"{_identifier(spec.name)}_{axis}"
        if name not in names:
          names.append(name)
        dims.append(name)
    layout.append(dims)
  if not names:
    if constraints:
      raise errors.InputShapeError(
          f"constraints {list(constraints)} bound symbolic dims, but every input dim is "
          "concrete here")
    return [tuple(d) for d in layout]
  for c in constraints:   # JAX would take an unknown name as a new, unbound symbol
    unknown = sorted(_symbols(c) - set(names))
    if unknown:
      raise errors.InputShapeError(
          f"constraint {c!r} names {', '.join(unknown)}, but the symbolic dims are "
          f"{', '.join(names)}")
  try:
    dims = jax.export.symbolic_shape(", ".join(names), constraints=tuple(constraints))
  except ValueError as e:   # a malformed constraint
    raise errors.InputShapeError(
        f"constraints {list(constraints)}: {str(e).splitlines()[0]} (the symbolic dims "
        f"are {', '.join(names)})") from None
  symbols = dict(zip(names, dims))
  return [tuple(symbols[d] if isinstance(d, str) else d for d in dims) for dims in layout]


def _output_names(fn, n: int) -> list[str]:
  """Each output's path in the function's output structure ("logits", "0"...), or
  a GraphDef's output tensor names."""
  import tree
  if hasattr(fn, "output_names"):
    return list(fn.output_names)
  paths = [path for path, spec in tree.flatten_with_path(fn.structured_outputs)
           if hasattr(spec, "dtype")]
  if len(paths) != n:
    return [str(i) for i in range(n)]
  return ["/".join(str(p) for p in path) or "output" for path in paths]


def _identifier(name: str) -> str:
  return "".join(c if c.isalnum() else "_" for c in name) or "x"


def export(fn, params: Mapping[str, Any], path: str, *, batch_polymorphic: bool = True,
           batch: Optional[int] = None, shapes: Optional[Mapping[str, Sequence[int]]] = None,
           constraints: Sequence[str] = (), platforms: Optional[Sequence[str]] = None,
           source: str = "") -> dict:
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
  """
  import tree

  from tfprims import errors
  unknown = sorted(set(shapes or ()) - {s.name for s in fn.input_specs})
  if unknown:
    raise errors.InputStructureError(
        f"shapes for unknown inputs {unknown}; the inputs are "
        f"{[s.name for s in fn.input_specs]}")
  specs = [dataclasses.replace(s, shape=tuple(int(d) for d in shapes[s.name]))
           if shapes and s.name in shapes else s for s in fn.input_specs]
  shapes_in = _dims(specs, batch_polymorphic, batch, constraints)
  if hasattr(fn, "structured_inputs"):  # a ConvertedFunction
    def call(params, *flat):
      args, kwargs = tree.unflatten_as(fn.structured_inputs, list(flat))
      return fn(params, *args, **kwargs)[0]
  else:  # a converted GraphDef: fn(*inputs) -> list of outputs
    def call(params, *flat):
      del params
      return fn(*flat)

  param_structs = {k: jax.ShapeDtypeStruct(np.shape(v), np.asarray(v).dtype)
                   for k, v in params.items()}
  in_structs = [jax.ShapeDtypeStruct(shape, s.dtype) for shape, s in zip(shapes_in, specs)]
  exported = jax.export.export(jax.jit(call), platforms=platforms)(param_structs, *in_structs)

  os.makedirs(path, exist_ok=True)
  with open(os.path.join(path, MODEL_FILE), "wb") as f:
    f.write(exported.serialize())
  arrays = {k: np.asarray(v) for k, v in params.items()}
  # Keys of their own: a param named like a savez argument ("file") must not clash.
  keys = {k: f"p{i}" for i, k in enumerate(arrays)}
  np.savez(os.path.join(path, PARAMS_FILE), **{keys[k]: _storable(v) for k, v in arrays.items()})
  from tfprims import __version__
  manifest = {
      "format": FORMAT,
      "source": source,
      "function": getattr(fn, "__name__", "graph"),
      "inputs": [{"name": s.name, "shape": [str(d) if not isinstance(d, int) else d
                                            for d in shape], "dtype": str(s.dtype)}
                 for s, shape in zip(specs, shapes_in)],
      "outputs": [{"name": name, "shape": [str(d) if not isinstance(d, int) else d
                                           for d in a.shape], "dtype": str(a.dtype)}
                  for name, a in zip(_output_names(fn, len(exported.out_avals)),
                                     exported.out_avals)],
      "params": [{"name": k, "key": keys[k], "shape": list(v.shape), "dtype": str(v.dtype)}
                 for k, v in arrays.items()],
      "constraints": list(constraints),
      "platforms": list(exported.platforms),
      "versions": {"tfprims": __version__, "jax": jax.__version__},
  }
  with open(os.path.join(path, MANIFEST_FILE), "w") as f:
    json.dump(manifest, f, indent=1)
  return manifest


_BINARY = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul,
           ast.FloorDiv: operator.floordiv, ast.Mod: operator.mod}
_COMPARE = {ast.GtE: operator.ge, ast.LtE: operator.le, ast.Eq: operator.eq}
_CALLS = {"max": max, "min": min, "floordiv": operator.floordiv, "mod": operator.mod}


def _symbols(constraint: str) -> set:
  """The names a constraint uses (not its functions' names)."""
  try:
    tree = ast.parse(constraint, mode="eval")
  except SyntaxError:
    return set()   # jax.export's parser names the problem
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
    if (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
        and node.func.id in _CALLS and not node.keywords):
      return _CALLS[node.func.id](*map(value, node.args))
    raise ValueError(ast.dump(node))
  try:
    tree = ast.parse(constraint, mode="eval").body
    if not (isinstance(tree, ast.Compare) and len(tree.ops) == 1
            and type(tree.ops[0]) in _COMPARE):
      return None
    return _COMPARE[type(tree.ops[0])](value(tree.left), value(tree.comparators[0]))
  except (SyntaxError, ValueError, KeyError, TypeError, ZeroDivisionError):
    return None


class ExportedModel:
  """A loaded artifact: ``model(*inputs)`` or ``model(**inputs_by_name)`` returns the
  converted function's outputs (same structure). Attributes: ``manifest``,
  ``exported`` (the ``jax.export.Exported``), ``params``, ``input_names``."""

  def __init__(self, path: str):
    with open(os.path.join(path, MANIFEST_FILE)) as f:
      self.manifest = json.load(f)
    if self.manifest.get("format") != FORMAT:
      raise ValueError(f"{path!r} is not a tfprims export artifact "
                       f"(format {self.manifest.get('format')!r}, expected {FORMAT!r})")
    with open(os.path.join(path, MODEL_FILE), "rb") as f:
      self.exported = jax.export.deserialize(bytearray(f.read()))
    with np.load(os.path.join(path, PARAMS_FILE), allow_pickle=False) as data:
      self.params = {p["name"]: data[p["key"]].view(jax.numpy.dtype(p["dtype"]))
                     for p in self.manifest["params"]}
    self.input_names = [i["name"] for i in self.manifest["inputs"]]

  def __call__(self, *args, **kwargs):
    names = self.input_names
    if len(args) > len(names):
      raise TypeError(f"expected at most {len(names)} inputs ({', '.join(names)}), "
                      f"got {len(args)}")
    given = dict(zip(names, args))
    for name, value in kwargs.items():
      if name not in names:
        raise TypeError(f"unknown input {name!r}; inputs: {names}")
      if name in given:
        raise TypeError(f"input {name!r} given twice")
      given[name] = value
    missing = [n for n in names if n not in given]
    if missing:
      raise TypeError(f"missing inputs: {missing} (inputs, in order: {names})")
    inputs = [np.asarray(given[i["name"]], dtype=i["dtype"]) for i in self.manifest["inputs"]]
    self._check_constraints(inputs)
    return self.exported.call(self.params, *inputs)

  def _check_constraints(self, inputs):
    sizes = {}
    for spec, x in zip(self.manifest["inputs"], inputs):
      for axis, d in enumerate(spec["shape"]):
        if isinstance(d, str) and axis < x.ndim:
          sizes.setdefault(d, x.shape[axis])
    broken = [c for c in self.manifest.get("constraints", ()) if _holds(c, sizes) is False]
    if broken:
      raise ValueError(
          f"the inputs' sizes {sizes} break the artifact's constraints {broken} (it was "
          "exported for sizes where they hold: tfprims export --constraint)")

  def __repr__(self):
    ins = ", ".join(f"{i['name']}: {i['dtype']}{i['shape']}" for i in self.manifest["inputs"])
    return f"<tfprims.ExportedModel {self.manifest['function']}({ins})>"


def load_exported(path: str) -> ExportedModel:
  """The artifact ``tfprims export`` (or :func:`export`) wrote to ``path``, as a
  callable; needs no TensorFlow."""
  return ExportedModel(path)
