"""Sparse and ragged inputs and sparse outputs of converted functions.

A ``tf.SparseTensorSpec`` input is fed as TF's graph receives it: three component
placeholders (``indices`` int64 [nnz, rank], ``values`` [nnz], ``dense_shape`` int64
[rank]). A call passes a ``tf.SparseTensor``, a ``jax.experimental.sparse.BCOO``
(no batch or dense dimensions) or a tuple ``(indices, values, dense_shape)``. nnz is
a static shape under jit: the arrays passed decide it at trace time. The dense shape
is kept a trace-time constant where it is known (the spec's static shape when fully
defined, a BCOO's shape, a numpy or concrete array), so ops that need it static
(``SparseTensorDenseMatMul``'s ``a_shape``) convert under jit; so are indices (and
ragged row splits) passed as numpy or concrete arrays, which decide the output sizes
of SparseFillEmptyRows, SparseSlice and SparseAdd.

A ``tf.RaggedTensorSpec`` input is fed as its components in TF's flattening order
(``flat_values``, then the row splits from the outermost); a call passes a
``tf.RaggedTensor`` or the tuple ``(flat_values, row_splits, ...)``.

A ``tf.SparseTensor`` output comes back as a ``BCOO``; its shape is the output's
static dense shape when TF knows it, else the computed ``dense_shape`` when it is
concrete (an eager call), else :class:`~tfprims.errors.DynamicShapeError`.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Optional

import numpy as np

from tfprims import dtypes, errors, folding
from tfprims.specs import TensorSpec
from tfprims.errors import import_tensorflow

_SPARSE_PARTS = ("indices", "values", "dense_shape")


def component_names(spec) -> Optional[tuple[str, ...]]:
  """The names of a composite spec's components in TF's flattening order, or None
  for a spec that is not a sparse or ragged tensor spec."""
  tf = import_tensorflow()
  if isinstance(spec, tf.SparseTensorSpec):
    return _SPARSE_PARTS
  if isinstance(spec, tf.RaggedTensorSpec):
    n = len(tf.nest.flatten(spec, expand_composites=True))
    return ("flat_values", "row_splits") + tuple(f"row_splits_{i}" for i in range(1, n - 1))
  return None


def components(spec, value, where: str) -> list:
  """A call's value for a sparse or ragged input, as its component arrays."""
  tf = import_tensorflow()
  names = component_names(spec)
  if isinstance(value, (tf.SparseTensor, tf.RaggedTensor)):
    if isinstance(value, tf.SparseTensor) != isinstance(spec, tf.SparseTensorSpec):
      raise errors.InputStructureError(
        f"input '{where}': expected a {type(spec).__name__[:-4]}, got {type(value).__name__}"
      )
    return [c.numpy() for c in tf.nest.flatten(value, expand_composites=True)]
  if isinstance(spec, tf.SparseTensorSpec) and _is_bcoo(value):
    if value.n_batch or value.n_dense:
      raise errors.InputStructureError(
        f"input '{where}': a BCOO with batch or dense dimensions (n_batch="
        f"{value.n_batch}, n_dense={value.n_dense}); TF's sparse tensors have neither: "
        "pass bcoo_update_layout(mat, n_batch=0, n_dense=0)"
      )
    index_dtype = dtypes.canonical_dtype(np.dtype(np.int64))
    return [value.indices.astype(index_dtype), value.data, np.asarray(value.shape, np.int64)]
  if isinstance(value, (tuple, list)) and len(value) == len(names):
    return list(value)
  kinds = (
    "a tf.SparseTensor, a jax.experimental.sparse.BCOO or a tuple (indices, values, dense_shape)"
    if isinstance(spec, tf.SparseTensorSpec)
    else "a tf.RaggedTensor or a tuple (" + ", ".join(names) + ")"
  )
  raise errors.InputStructureError(
    f"input '{where}' is a {type(spec).__name__[:-4]}: pass {kinds}; got {type(value).__name__}"
  )


def _is_bcoo(value) -> bool:
  try:
    from jax.experimental import sparse
  except ImportError:  # pragma: no cover
    return False
  return isinstance(value, sparse.BCOO)


def _known(raw):
  """A value passed as numpy (lists too) when it is concrete, else None."""
  if isinstance(raw, (list, tuple)):
    try:
      return np.asarray(raw, np.int64)
    except Exception:  # a list holding traced values
      return None
  return folding.known_value(raw)


def known_dense_shape(spec, name: str, raw, checked):
  """A sparse input's ``dense_shape`` as a trace-time constant (numpy) where it is
  known: the value passed when it is concrete (it must agree with the spec's static
  shape), else the spec's shape when fully defined; ``checked`` (the validated
  value) else."""
  static = spec.shape.as_list() if spec.shape.rank is not None else None
  known = _known(raw)
  if (
    known is not None
    and static is not None
    and (
      np.shape(known) != (len(static),)
      or any(s is not None and s != k for s, k in zip(static, np.asarray(known).tolist()))
    )
  ):
    raise errors.InputShapeError(
      f"input '{name}' is {np.asarray(known).tolist()}, but the signature's sparse "
      f"shape is {static}"
    )
  value = known if known is not None else (static if spec.shape.is_fully_defined() else None)
  if value is None:
    return checked
  return dtypes.canonicalize_value(np.asarray(value, np.int64), f"input '{name}'")


def known_index(spec, raw, checked):
  """Sparse indices or ragged row splits as numpy where the value passed is concrete
  (numpy, or a JAX array outside any trace), so the ops whose output sizes they decide
  (SparseFillEmptyRows, SparseSlice, SparseAdd...) convert under jit too; ``checked``
  (the validated value) else."""
  known = _known(raw)
  if known is None or np.shape(known) != tuple(checked.shape):
    return checked
  return dtypes.canonicalize_value(np.asarray(known, spec.dtype), f"input '{spec.name}'")


# --- outputs ---------------------------------------------------------------------------


def parts_of(x) -> list:
  tf = import_tensorflow()
  return tf.nest.flatten(x, expand_composites=True)


def expand_outputs(leaves) -> list:
  """Output leaves with sparse tensors (and their specs) replaced by their components."""
  tf = import_tensorflow()
  out = []
  for x in leaves:
    if isinstance(x, (tf.SparseTensor, tf.SparseTensorSpec)):
      out.extend(parts_of(x))
    else:
      out.append(x)
  return out


def static_shape(x) -> Optional[tuple[int, ...]]:
  """A sparse output's dense shape when TF knows it statically."""
  shape = x.shape
  return tuple(shape.as_list()) if shape.is_fully_defined() else None


@dataclasses.dataclass(frozen=True)
class SparseOutputSpec:
  """A sparse output: its three component specs and its static dense shape (None
  where TF does not know it)."""

  indices: Any
  values: Any
  dense_shape: Any
  shape: Optional[tuple[int, ...]]


class SparseOutput:
  """Where a sparse output's components are among the flat outputs; builds the BCOO."""

  def __init__(self, positions: tuple[int, int, int], shape: Optional[tuple[int, ...]]):
    self.positions = positions
    self.shape = shape

  def __repr__(self):
    return f"SparseOutput{self.positions}"

  def spec(self, output_specs) -> SparseOutputSpec:
    i, v, s = (output_specs[k] for k in self.positions)
    return SparseOutputSpec(i, v, s, self.shape)

  def build(self, outputs, known):
    from jax.experimental import sparse

    i, v, s = self.positions
    shape = self.shape
    if shape is None:
      value = folding.known_value(known[s])
      if value is None:
        raise errors.DynamicShapeError(
          f"a sparse output's dense shape ({outputs[s].shape[0]} dims) is neither "
          "static in TF's graph nor known at trace time (it is computed from traced "
          "values), and a BCOO needs a static shape: give the function a fixed shape "
          "(tf.sparse.reset_shape with a constant shape), or call it eagerly"
        )
      shape = tuple(int(d) for d in np.asarray(value).reshape(-1))
    return sparse.BCOO((outputs[v], outputs[i]), shape=shape)


def _spec_from_tf(name: str, spec) -> tuple[Optional[TensorSpec], Optional[str]]:
  """The :class:`TensorSpec` of a signature leaf, or None and why it is unsupported."""
  tf = errors.import_tensorflow()
  if not isinstance(spec, tf.TensorSpec):
    kind = type(spec).__name__.replace("Spec", "").replace("Tensor", " tensor").strip()
    return None, (
      f"input '{name}' is a {kind or type(spec).__name__} ({type(spec).__name__}); "
      "tfprims converts dense tensors, tf.SparseTensorSpec and tf.RaggedTensorSpec "
      "inputs only: convert it to a dense tf.Tensor in the TF function's caller and "
      "pass that instead"
    )
  np_dtype = dtypes.from_tf(spec.dtype)
  if np_dtype is None:
    return None, (
      f"input '{name}' has dtype {spec.dtype.name}, which has no JAX equivalent"
      + (
        "; tfprims.split_host_prefix(fn, ...) runs the string part in TF and converts "
        "the numeric rest"
        if spec.dtype == tf.string
        else "; do resource handling in TF and pass numeric tensors"
      )
    )
  shape = None if spec.shape.rank is None else tuple(spec.shape.as_list())
  return TensorSpec(name, shape, np_dtype), None


def leaf_specs(name: str, leaf) -> tuple[list, list[str]]:
  """The flat :class:`TensorSpec` s of one signature leaf (a sparse or ragged spec
  gives its components, in TF's flattening order, named ``name.indices``...) and
  the problems found."""
  tf = errors.import_tensorflow()
  parts = component_names(leaf)
  if parts is None:
    spec, problem = _spec_from_tf(name, leaf)
    return [spec], [problem] if problem else []
  components = tf.nest.flatten(leaf, expand_composites=True)
  specs, problems = [], []
  for part, component in zip(parts, components):
    spec, problem = _spec_from_tf(f"{name}.{part}", component)
    specs.append(spec)
    if problem:
      problems.append(problem)
  return specs, problems
