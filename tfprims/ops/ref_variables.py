"""TF1 reference variables and the ops that write them through refs.

A ``VariableV2`` node's output is a ref tensor: inside the interpreter a
:class:`~tfprims.interpreter.RefHandle` keyed by the node name, whose value is the
param of that name (``ctx.state``). Ops whose op def takes a ref input get the
handle, and identities (``Identity``: the ``v/read`` node of every TF1 variable)
forward it, as TF forwards the variable's buffer; every other consumer gets the
variable's value as it is when that consumer runs (the interpreter
dereferences), so a read ordered after a write by a control dependency sees the
written value, as in TF. A writer's output is the variable's ref again; graph
outputs are read after everything ran. Final values come back in ``new_params``.

The writers bind the primitives of their resource forms (docs/semantics/state.md):

* ``Assign`` (no primitive: the value), ``AssignAdd``/``AssignSub`` (``tf.AddV2`` /
  ``tf.Sub``), as ``AssignVariableOp`` & co.;
* ``Scatter{Add,Sub,Mul,Div,Min,Max,Update}`` -> ``tf.ResourceScatter*``;
  ``ScatterNd{Add,Sub,Min,Max,Update}`` -> ``tf.ResourceScatterNd*``;
  ``StridedSliceAssign`` -> ``tf.ResourceStridedSliceAssign`` (their checks,
  out-of-range policy and rules are those ops');
* ``CountUpTo`` / ``ResourceCountUpTo``: the old value, the variable incremented
  (``tf.AddV2``) while below ``limit``;
* ``RefIdentity``, ``RefSelect`` (a known index), ``TemporaryVariable`` /
  ``DestroyTemporaryVariable`` (a variable living for one call, starting at zeros).

``use_locking`` is ignored: a converted call runs its writes in one order.
"""

from __future__ import annotations

import types

import jax.numpy as jnp
import numpy as np

from tfprims import dtypes, errors
from tfprims.core import structural, register_structural, tfops
from tfprims.interpreter import RefHandle, bind_node, deref, run_check
from tfprims.ops.variables import expect_handle

FAMILY = "state"


def _ref(node, value) -> RefHandle:
  return expect_handle(
    node, value, RefHandle, "a TF1 reference variable (a VariableV2 node's output)"
  )


# --- the variables ------------------------------------------------------------------


@structural(
  "VariableV2",
  "Variable",
  family=FAMILY,
  creates_variable=True,
  doc="A TF1 reference variable: a ref to the param named after the node.",
)
def _ref_variable(ctx, node, inputs):
  if node.name not in ctx.state:
    raise errors.ConversionError(
      f"{node.op} node '{node.name}' creates a variable inside the graph and no "
      f"param '{node.name}' holds its value: convert TF1 graphs with "
      "tfprims.convert_session (a tf.compat.v1.Session's variables become params), "
      "tfprims.load_saved_model or tfprims.convert_from_restored"
    )
  return [RefHandle(node.name)]


@structural(
  "TemporaryVariable",
  family=FAMILY,
  doc="A variable living for one call (zeros until assigned; not a param).",
)
def _temporary_variable(ctx, node, inputs):
  # TF leaves the buffer uninitialized; zeros make the result deterministic.
  shape = node.attr("shape")
  if shape is None or any(d is None or d < 0 for d in shape):
    raise errors.OpError(node.op, node.name, f"needs a fully known shape, got {shape}")
  key = f"{node.name}:temporary"
  ctx.state[key] = np.zeros(tuple(shape), dtypes.from_tf(node.attr("dtype")))
  return [RefHandle(key)]


@structural(
  "DestroyTemporaryVariable",
  family=FAMILY,
  writes_state=True,
  doc="The temporary variable's final value; the variable ends.",
)
def _destroy_temporary_variable(ctx, node, inputs):
  ref = _ref(node, inputs[0])
  value = deref(ctx, ref)
  if ref.key.endswith(":temporary"):
    ctx.state.pop(ref.key, None)
  return [value]


@structural(
  "RefIdentity",
  family=FAMILY,
  pass_through=True,
  doc="The same ref (reads through it see the variable when they run).",
)
def _ref_identity(ctx, node, inputs):
  return [_ref(node, inputs[0])]


@structural(
  "RefSelect", family=FAMILY, doc="The index-th ref (the index must be known when tracing)."
)
def _ref_select(ctx, node, inputs):
  index, refs = inputs[0], inputs[1:]
  if not isinstance(index, (np.ndarray, np.generic, int)):
    raise errors.StaticInputError(node.op, node.name, "index")
  i = int(index)
  if not 0 <= i < len(refs):
    raise errors.RuntimeCheckError(
      node.op, node.name, f"index of {i} is out of bounds [0, {len(refs)})"
    )
  return [_ref(node, refs[i])]


# --- writers ----------------------------------------------------------------------


def _write(ctx, node, ref, new):
  # The output ref is the variable: its readers see it as it is when they run.
  ctx.state[ref.key] = new
  return [ref]


@structural(
  "Assign",
  family=FAMILY,
  writes_state=True,
  doc="Sets the variable; its output is the variable's ref.",
)
def _assign(ctx, node, inputs):
  ref, value = _ref(node, inputs[0]), inputs[1]
  old = deref(ctx, ref)
  if node.attr("validate_shape") and np.shape(value) != np.shape(old):
    raise errors.OpError(
      node.op,
      node.name,
      "Assign requires shapes of both tensors to match. lhs shape= "
      f"{list(np.shape(old))} rhs shape= {list(np.shape(value))}",
    )
  return _write(ctx, node, ref, value)


def _assign_update(prim):
  def interpret(ctx, node, inputs):
    ref = _ref(node, inputs[0])
    return _write(ctx, node, ref, getattr(tfops, prim).apply([deref(ctx, ref), inputs[1]], {}))

  return interpret


register_structural(
  "AssignAdd",
  _assign_update("AddV2"),
  family=FAMILY,
  writes_state=True,
  doc="Adds to the variable (tf.AddV2); its output is the variable's ref.",
)
register_structural(
  "AssignSub",
  _assign_update("Sub"),
  family=FAMILY,
  writes_state=True,
  doc="Subtracts from the variable (tf.Sub); its output is the variable's ref.",
)


def _bind_writer(resource_op):
  """A ref writer: the primitive of its resource form on the variable's value."""

  def interpret(ctx, node, inputs):
    ref = _ref(node, inputs[0])
    (new,) = bind_node(
      ctx, getattr(tfops, resource_op), node, [deref(ctx, ref), *inputs[1:]], grouped_as=resource_op
    )
    return _write(ctx, node, ref, new)

  return interpret


for _kind in ("Add", "Sub", "Mul", "Div", "Min", "Max", "Update"):
  register_structural(
    f"Scatter{_kind}",
    _bind_writer(f"ResourceScatter{_kind}"),
    family=FAMILY,
    writes_state=True,
    doc=f"tf.ResourceScatter{_kind} on the variable's value, written back.",
  )
for _kind in ("Add", "Sub", "Min", "Max", "Update"):
  register_structural(
    f"ScatterNd{_kind}",
    _bind_writer(f"ResourceScatterNd{_kind}"),
    family=FAMILY,
    writes_state=True,
    doc=f"tf.ResourceScatterNd{_kind} on the variable's value, written back.",
  )
register_structural(
  "StridedSliceAssign",
  _bind_writer("ResourceStridedSliceAssign"),
  family=FAMILY,
  writes_state=True,
  doc="tf.ResourceStridedSliceAssign on the variable's value, written back.",
)


# --- CountUpTo ----------------------------------------------------------------------


def _count_up_to(ctx, node, old):
  """The new value of a CountUpTo'd variable: old + 1 while old < limit (TF raises
  OutOfRangeError at the limit: a check, so known values and ``runtime_checks``
  raise; otherwise the variable stays at the limit)."""
  limit = int(node.attr("limit"))
  dtype = np.asarray(old).dtype if isinstance(old, (np.ndarray, np.generic)) else old.dtype
  checker = types.SimpleNamespace(
    check=lambda v: (jnp.asarray(v) >= limit, f"Reached limit of {limit}")
  )
  run_check(checker, node, [old], {})
  below = tfops.Less(old, np.asarray(limit, dtype))
  return tfops.SelectV2(below, tfops.AddV2(old, np.ones((), dtype)), old)


@structural(
  "CountUpTo",
  family=FAMILY,
  writes_state=True,
  doc="The variable's value, then the variable incremented (until limit).",
)
def _count_up_to_ref(ctx, node, inputs):
  ref = _ref(node, inputs[0])
  old = deref(ctx, ref)
  ctx.state[ref.key] = _count_up_to(ctx, node, old)
  return [old]


@structural(
  "ResourceCountUpTo",
  family=FAMILY,
  reads_state=True,
  writes_state=True,
  doc="CountUpTo on a resource variable.",
)
def _count_up_to_resource(ctx, node, inputs):
  handle = expect_handle(node, inputs[0])
  old = ctx.state[handle.key]
  ctx.state[handle.key] = _count_up_to(ctx, node, old)
  return [old]
