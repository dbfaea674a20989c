"""Variables: reads, writes, in-graph (TF1) variables and tf.random.Generator state.

Resource variables captured by a converted function become its *params*; inside
the interpreter a variable is a :class:`~tfprims.interpreter.VariableHandle` whose
value lives in the call's state (``ctx.state``): ``ReadVariableOp`` reads it,
``Assign*VariableOp`` writes it, and the final state comes back as ``new_params``.
Every op that writes a variable declares ``writes_state``, so control flow threads
the variables it writes through branches and loops.

* ``ResourceGather`` (``tf.gather`` / ``tf.nn.embedding_lookup`` on a variable):
  a ``tf.ResourceGather[batch_dims=...]`` primitive over the variable's value,
  whose tangent is ``tf.GatherV2``.
* ``VariableShape``: the shape of a variable through its handle, answered from
  the static shape of its value (``shape_only``, like ``Shape``).
* ``VarHandleOp`` / ``VarIsInitializedOp``: variables created *inside* a graph
  (TF1 SavedModels and hub modules; reference variables, ``VariableV2``, are in
  :mod:`tfprims.ops.ref_variables`).
  Their values come from params keyed by the node name; the SavedModel loaders
  (:mod:`tfprims.saved_model`) read them for you.
* ``RngReadAndSkip``: the state update of ``tf.random.Generator``.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from tfprims import config, dtypes, errors
from tfprims.core import register_op, structural, tfops
from tfprims.interpreter import VariableHandle, bind_node
from tfprims.errors import import_tensorflow

FAMILY = "state"


def expect_handle(
  node, value, kind=VariableHandle, what="a resource variable captured by the function"
):
  """``value`` if it is a ``kind`` handle, else the error naming the node and ``what``."""
  if not isinstance(value, kind):
    raise errors.UnsupportedInputError(
      f"{node.op} node '{node.name}' needs {what}; got a value of another kind"
    )
  return value


# --- reads and writes --------------------------------------------------------------


@structural(
  "ReadVariableOp", family=FAMILY, reads_state=True, doc="The variable's value in the call's state."
)
def _read_variable(ctx, node, inputs):
  return [ctx.state[expect_handle(node, inputs[0]).key]]


def _assign(update):
  def interpret(ctx, node, inputs):
    handle = expect_handle(node, inputs[0])
    old = ctx.state[handle.key]
    new = update(old, inputs[1])
    if np.shape(new) != np.shape(old) and config.get_config("strict_shape_check"):
      raise errors.OpError(
        node.op,
        node.name,
        f"assigns shape {np.shape(new)} to variable '{handle.key}' of shape {np.shape(old)}",
      )
    ctx.state[handle.key] = new
    return []

  return interpret


structural(
  "AssignVariableOp",
  family=FAMILY,
  writes_state=True,
  doc="Sets the variable's value in the call's state.",
)(_assign(lambda old, value: value))
structural(
  "AssignAddVariableOp", family=FAMILY, writes_state=True, doc="Adds to the variable (tf.AddV2)."
)(_assign(lambda old, value: tfops.AddV2.apply([old, value], {})))
structural(
  "AssignSubVariableOp",
  family=FAMILY,
  writes_state=True,
  doc="Subtracts from the variable (tf.Sub).",
)(_assign(lambda old, value: tfops.Sub.apply([old, value], {})))


# --- ResourceGather ---------------------------------------------------------------


def _resource_gather_impl(value, indices, *, batch_dims):
  """``GatherV2(value, indices, axis=batch_dims, batch_dims=batch_dims)`` (TF's own
  definition of ResourceGather); out-of-range indices as GatherV2."""
  return tfops.GatherV2.impl(value, indices, axis=batch_dims, batch_dims=batch_dims)


def _resource_gather_jvp(t, value, indices, *, batch_dims):
  return tfops.GatherV2(t, indices, axis=batch_dims, batch_dims=batch_dims)


def _resource_gather_batching(args, dims, *, batch_dims):
  # Under vmap a gathered variable value is just a batched tensor: GatherV2's own
  # batching rule applies (it re-binds tf.GatherV2).
  out = jax.vmap(
    lambda v, i: tfops.GatherV2(v, i, axis=batch_dims, batch_dims=batch_dims), in_axes=tuple(dims)
  )(*args)
  return out, 0


def _resource_gather_interpret(ctx, node, inputs):
  value = ctx.state[expect_handle(node, inputs[0]).key]
  return bind_node(ctx, tfops.ResourceGather, node, [value, *inputs[1:]])


def _resource_gather_oracle(resource, indices, batch_dims=0, **_):
  """TF oracle for the property runner: the drawn value becomes a real variable."""
  tf = import_tensorflow()
  var = tf.Variable(resource)
  return tf.raw_ops.ResourceGather(
    resource=var.handle, indices=indices, batch_dims=batch_dims, dtype=var.dtype
  )


def _resource_gather_spec(st):
  @st.composite
  def calls(draw):
    dtype = draw(st.dtypes(st.FLOATS + ("int32", "int64")))
    batch_dims = draw(st.integers(0, 1))
    lead = draw(st.integers(1, 3)) if batch_dims else None
    n = draw(st.integers(1, 4))
    tail = draw(st.shapes(max_rank=2, min_side=1, max_side=3))
    shape = ((lead,) if batch_dims else ()) + (n,) + tuple(tail)
    idx_shape = ((lead,) if batch_dims else ()) + tuple(draw(st.shapes(max_rank=2, max_side=3)))
    idx_dtype = draw(st.dtypes(("int32", "int64")))
    return dict(
      resource=draw(st.arrays(dtype, shape, special=False, min_value=-100, max_value=100)),
      indices=draw(st.arrays(idx_dtype, idx_shape, min_value=0, max_value=n - 1)),
      batch_dims=batch_dims,
      dtype=dtype,
    )

  spec = st.Spec(
    calls(),
    skip={
      "jvp": "the TF oracle copies the drawn value into a tf.Variable (no tangent "
      "flows); the tangent is tf.GatherV2, checked by GatherV2's own property "
      "tests, and ResourceGather grads vs GradientTape are in tests/test_state.py",
      "vjp": "as jvp: see tests/test_state.py",
    },
    note="the 'resource' input is drawn as the variable's value; the oracle wraps "
    "it in a tf.Variable",
  )
  object.__setattr__(spec, "oracle", _resource_gather_oracle)
  return spec


def _resource_gather_check(value, indices, *, batch_dims):
  """As GatherV2's: indices outside [0, value.shape[batch_dims]) are rejected."""
  return tfops.GatherV2.check(value, indices, axis=batch_dims, batch_dims=batch_dims)


ResourceGather = register_op(
  "ResourceGather",
  _resource_gather_impl,
  family=FAMILY,
  attrs=("batch_dims",),
  check=_resource_gather_check,
  jvp=(_resource_gather_jvp, None),
  batching=_resource_gather_batching,
  interpret=_resource_gather_interpret,
  reads_state=True,
  spec=_resource_gather_spec,
)


# --- VariableShape ----------------------------------------------------------------


def _variable_shape_impl(value, *, out_type):
  """The shape of the variable's value (a constant: shapes are static)."""
  return jnp.asarray(np.array(np.shape(value), dtypes.canonical_dtype(out_type)))


def _variable_shape_interpret(ctx, node, inputs):
  # Answered from the static shape of the variable's value in the call's state, as a
  # numpy constant (so the shape arithmetic around it folds, like Shape's).
  value = ctx.state[expect_handle(node, inputs[0]).key]
  return [np.array(np.shape(value), dtypes.canonical_dtype(node.attr("out_type")))]


def _variable_shape_batching(args, dims, *, out_type):
  (value,), (d,) = args, dims
  shape = tuple(np.shape(value))
  per_example = shape if d is None else shape[:d] + shape[d + 1 :]
  return jnp.asarray(np.array(per_example, dtypes.canonical_dtype(out_type))), None


def _variable_shape_oracle(input, out_type=np.int32, **_):
  """TF oracle for the property runner: the drawn value becomes a real variable."""
  tf = import_tensorflow()
  return tf.raw_ops.VariableShape(input=tf.Variable(input).handle, out_type=out_type)


def _variable_shape_spec(st):
  @st.composite
  def calls(draw):
    return dict(
      input=draw(st.arrays(st.dtypes(st.ALL), st.shapes())),
      out_type=draw(st.dtypes(("int32", "int64"))),
    )

  spec = st.Spec(
    calls(),
    skip={"jvp": "integer output", "vjp": "integer output"},
    note="the 'input' handle is drawn as the variable's value; the oracle wraps "
    "it in a tf.Variable",
  )
  object.__setattr__(spec, "oracle", _variable_shape_oracle)
  return spec


VariableShape = register_op(
  "VariableShape",
  _variable_shape_impl,
  family=FAMILY,
  attrs=("out_type",),
  interpret=_variable_shape_interpret,
  batching=_variable_shape_batching,
  reads_state=True,
  shape_only=True,
  spec=_variable_shape_spec,
)


# --- variables created inside the graph (TF1) -------------------------------------


def _graph_variable_key(ctx, node) -> str:
  if node.name not in ctx.state:
    raise errors.ConversionError(
      f"{node.op} node '{node.name}' creates a variable inside the graph and no "
      f"param '{node.name}' holds its value: convert TF1 SavedModels with "
      "tfprims.load_saved_model or tfprims.convert_from_restored, which read "
      "such variables into params"
    )
  return node.name


@structural(
  "VarHandleOp",
  family=FAMILY,
  creates_variable=True,
  doc="A variable created in the graph: its value is the param named after the node.",
)
def _var_handle(ctx, node, inputs):
  return [VariableHandle(_graph_variable_key(ctx, node))]


@structural(
  "VarIsInitializedOp",
  "IsVariableInitialized",
  family=FAMILY,
  reads_state=True,
  doc="True: every variable is initialized (its value is a param).",
)
def _is_initialized(ctx, node, inputs):
  return [np.bool_(True)]


# --- tf.random.Generator state ----------------------------------------------------


@structural(
  "RngReadAndSkip",
  family=FAMILY,
  reads_state=True,
  writes_state=True,
  doc="tf.random.Generator's state: returned, then advanced by 256 * delta.",
)
def rng_read_and_skip(ctx, node, inputs):
  """Returns the generator state and advances its 128-bit counter (state[0] low
  64 bits, state[1] high 64 bits) by ``256 * delta``, as TF's Philox kernel."""
  handle = expect_handle(node, inputs[0])
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
