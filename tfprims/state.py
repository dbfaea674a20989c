"""Variables and state: resource-variable ops beyond read/assign, TF1 variables,
and helpers to work with a converted function's params.

Params are a flat ``{variable name: array}`` mapping (see
:func:`tfprims.convert`); ``fn.param_specs[name].trainable`` tells which ones
are trainable and ``fn.tf_variables[name]`` is the ``tf.Variable`` each came
from. This module adds:

* ``ResourceGather`` (``tf.gather`` / ``tf.nn.embedding_lookup`` on a variable):
  a ``tf.ResourceGather[batch_dims=...]`` primitive over the variable's value,
  whose tangent is ``tf.GatherV2``.
* ``VarHandleOp`` / ``VariableV2`` / ``VarIsInitializedOp``: variables created
  *inside* a graph (TF1 SavedModels and hub modules with reference variables).
  Their values come from params keyed by the node name; the SavedModel loaders
  (:mod:`tfprims.saved_model`) read them for you.
* ``RngReadAndSkip``: the state update of ``tf.random.Generator``.
* :func:`split_trainable`, :func:`merge_params`, :func:`assign_variables`.
"""

from __future__ import annotations

from typing import Any, Mapping

import jax.numpy as jnp
import numpy as np

from tfprims import core, dtypes, errors, interpreter
from tfprims.core import define_op

__all__ = ["split_trainable", "merge_params", "assign_variables", "trainable_names"]


# --- ResourceGather ---------------------------------------------------------------


def _gather_v2():
  return core.get_op("GatherV2")


def _resource_gather_impl(value, indices, *, batch_dims):
  """``GatherV2(value, indices, axis=batch_dims, batch_dims=batch_dims)`` (TF's own
  definition of ResourceGather); out-of-range indices as GatherV2."""
  return _gather_v2().impl(value, indices, axis=batch_dims, batch_dims=batch_dims)


def _resource_gather_jvp(t, value, indices, *, batch_dims):
  return _gather_v2()(t, indices, axis=batch_dims, batch_dims=batch_dims)


def _resource_gather_batching(args, dims, *, batch_dims):
  # Under vmap a gathered variable value is just a batched tensor: GatherV2's own
  # batching rule applies (it re-binds tf.GatherV2).
  import jax
  gather = _gather_v2()
  out = jax.vmap(lambda v, i: gather(v, i, axis=batch_dims, batch_dims=batch_dims),
                 in_axes=tuple(dims))(*args)
  return out, 0


def _resource_gather_oracle(resource, indices, batch_dims=0, **_):
  """TF oracle for the property runner: the drawn value becomes a real variable."""
  import tensorflow as tf
  var = tf.Variable(resource)
  return tf.raw_ops.ResourceGather(resource=var.handle, indices=indices,
                                   batch_dims=batch_dims, dtype=var.dtype)


def _resource_gather_spec(st):
  @st.composite
  def calls(draw):
    dtype = draw(st.dtypes(st.FLOATS + ("int32", "int64")))
    batch_dims = draw(st.integers(0, 1))
    lead = draw(st.integers(1, 3)) if batch_dims else None
    n = draw(st.integers(1, 4))
    tail = draw(st.shapes(max_rank=2, min_side=1, max_side=3))
    shape = ((lead,) if batch_dims else ()) + (n,) + tuple(tail)
    idx_shape = ((lead,) if batch_dims else ()) + tuple(
        draw(st.shapes(max_rank=2, max_side=3)))
    idx_dtype = draw(st.dtypes(("int32", "int64")))
    return dict(
        resource=draw(st.arrays(dtype, shape, special=False, min_value=-100,
                                max_value=100)),
        indices=draw(st.arrays(idx_dtype, idx_shape, min_value=0, max_value=n - 1)),
        batch_dims=batch_dims, dtype=dtype)
  spec = st.Spec(calls(), skip={
      "jvp": "the TF oracle copies the drawn value into a tf.Variable (no tangent "
             "flows); the tangent is tf.GatherV2, checked by GatherV2's own property "
             "tests, and ResourceGather grads vs GradientTape are in tests/test_state.py",
      "vjp": "as jvp: see tests/test_state.py"},
      note="the 'resource' input is drawn as the variable's value; the oracle wraps "
           "it in a tf.Variable")
  object.__setattr__(spec, "oracle", _resource_gather_oracle)
  return spec


ResourceGather = define_op(
    "ResourceGather", _resource_gather_impl, family="state", attrs=("batch_dims",),
    jvp=(_resource_gather_jvp, None), batching=_resource_gather_batching,
    spec=_resource_gather_spec)


def _handle(node, value) -> interpreter.VariableHandle:
  if not isinstance(value, interpreter.VariableHandle):
    raise errors.UnsupportedInputError(
        f"{node.op} node '{node.name}' needs a resource variable; got a value of "
        "another kind")
  return value


@interpreter.structural("ResourceGather")
def _resource_gather(ctx, node, inputs):
  handle = _handle(node, inputs[0])
  value = ctx.state[handle.key]
  operands, params = ResourceGather.prepare(
      {"resource": value, "indices": inputs[1]}, node.attrs, node.name)
  return [ResourceGather.apply(operands, params)]


# --- variables created inside the graph (TF1) -------------------------------------


def _graph_variable_key(ctx, node) -> str:
  if node.name not in ctx.state:
    raise errors.ConversionError(
        f"{node.op} node '{node.name}' creates a variable inside the graph and no "
        f"param '{node.name}' holds its value: convert TF1 SavedModels with "
        "tfprims.load_saved_model or tfprims.convert_from_restored, which read "
        "such variables into params")
  return node.name


@interpreter.structural("VarHandleOp")
def _var_handle(ctx, node, inputs):
  return [interpreter.VariableHandle(_graph_variable_key(ctx, node))]


@interpreter.structural("VariableV2", "Variable")
def _ref_variable(ctx, node, inputs):
  # A TF1 reference variable: its output *is* the value (read-only here).
  return [ctx.state[_graph_variable_key(ctx, node)]]


@interpreter.structural("VarIsInitializedOp", "IsVariableInitialized")
def _is_initialized(ctx, node, inputs):
  return [np.bool_(True)]


GRAPH_VARIABLE_OPS = ("VarHandleOp", "VariableV2", "Variable")


# --- tf.random.Generator state ----------------------------------------------------


@interpreter.structural("RngReadAndSkip")
def _rng_read_and_skip(ctx, node, inputs):
  """Returns the generator state and advances its 128-bit counter (state[0] low
  64 bits, state[1] high 64 bits) by ``256 * delta``, as TF's Philox kernel."""
  handle = _handle(node, inputs[0])
  state = ctx.state[handle.key]
  delta = inputs[2]
  if dtypes.x64_enabled():
    s = jnp.asarray(state).astype(jnp.uint64)
    inc = jnp.asarray(delta).astype(jnp.uint64) * np.uint64(256)
    lo = s[0] + inc
    hi = s[1] + (lo < s[0]).astype(jnp.uint64)
    new = jnp.concatenate([jnp.stack([lo, hi]), s[2:]]).astype(jnp.asarray(state).dtype)
  else:
    # 32-bit state (x64 off): the counter wraps at 2**31 instead of 2**64.
    s = jnp.asarray(state)
    inc = (jnp.asarray(delta).astype(jnp.uint32) * np.uint32(256)).astype(s.dtype)
    new = s.at[0].add(inc)
  ctx.state[handle.key] = new
  return [state]


# --- params helpers ----------------------------------------------------------------


def trainable_names(fn) -> list[str]:
  """Names of the trainable params of a converted function, in param order."""
  return [k for k, s in fn.param_specs.items() if s.trainable]


def split_trainable(fn, params: Mapping[str, Any]) -> tuple[dict, dict]:
  """Splits params into ``(trainable, non_trainable)`` dicts using the TF
  variables' ``trainable`` flags (e.g. BatchNorm moving statistics and Keras
  seed-generator states are not trainable)."""
  unknown = sorted(set(params) - set(fn.param_specs))
  if unknown:
    raise errors.InputStructureError(f"params {unknown} are not params of {fn!r}")
  trainable, rest = {}, {}
  for k, v in params.items():
    (trainable if fn.param_specs[k].trainable else rest)[k] = v
  return trainable, rest


def merge_params(*parts: Mapping[str, Any]) -> dict:
  """The union of param dicts (e.g. updated trainable params and new_params'
  non-trainable ones); a name present twice raises."""
  out: dict = {}
  for part in parts:
    dup = sorted(set(out) & set(part))
    if dup:
      raise errors.InputStructureError(f"params {dup} given twice")
    out.update(part)
  return out


def assign_variables(fn, params: Mapping[str, Any]) -> None:
  """Writes params back into the TF variables they came from
  (``fn.tf_variables``), casting to each variable's dtype: after this the TF
  function computes with the new values."""
  variables = getattr(fn, "tf_variables", None) or {}
  missing = sorted(set(params) - set(variables))
  if missing:
    raise errors.InputStructureError(
        f"params {missing} have no tf.Variable to write to (only variables captured "
        "by the converted TF function can be assigned)")
  for k, value in params.items():
    var = variables[k]
    value = np.asarray(value)
    want = var.dtype.as_numpy_dtype
    if value.shape != tuple(var.shape):
      raise errors.InputShapeError(
          f"param '{k}' has shape {list(value.shape)}, variable has {var.shape.as_list()}")
    var.assign(value.astype(want, copy=False))
