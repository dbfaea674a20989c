"""XlaSharding, the SPMD shape ops and XlaReplicaId.

XlaSharding is a sharding annotation (``tfxla.sharding``, DTensor and TPU graphs).

Its ``sharding`` attr is a serialized ``OpSharding``, parsed when a node is prepared into
``("replicated",)``, ``("tiled", tile_dims, replicated_trailing)`` or ``("other",)``.
Without a mesh the op is the identity. Under a mesh (``jax.sharding.set_mesh``) a replicated
or tiled sharding becomes ``lax.with_sharding_constraint`` (``jax.sharding.reshard`` on
Explicit meshes): each tiled dimension is given the mesh axes, in the mesh's order, whose
sizes multiply to its tile count (the proto's device order is not read: the tiles are
assumed laid out along the mesh's axes); a tiling no mesh axes match, and maximal or manual
shardings, leave the value unconstrained. Its derivative is the same annotation on the
tangent (as TF's gradient).

XlaSpmdFullToShardShape/XlaSpmdShardToFullShape switch a value between its full
shape and one device's shard for manually partitioned code. On one device (the
sharding splits nothing: replicated, manual, or tile counts of 1) both are the
identity, as TF's jit computes them; a sharding that splits the value is
refused when the node is prepared (manual partitioning is ``jax.shard_map``'s
job; TF's CPU jit refuses it too). Each is the other's transpose (TF's gradients).

XlaReplicaId is 0 outside ``jax.shard_map`` (one program is one replica; folded);
inside it, the device's row-major index along the manual mesh axes
(``lax.axis_index``). Under ``pmap`` no named axis is visible to it: 0.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from tfprims import errors, rules
from tfprims.core import register_op, tfops
from tfprims.ops.xla import _common
from tfprims.ops.xla._common import FAMILY
from tfprims.errors import import_tensorflow

_REPLICATED, _TILED, _MANUAL = 0, 3, 4  # OpSharding.Type


def parse_sharding(value) -> tuple:
  """A serialized ``OpSharding`` -> the op's ``sharding`` param."""
  if isinstance(value, tuple):
    return value
  if not value:
    return ("replicated",)
  p = _common._parse("OpSharding", value)
  if p.type == _REPLICATED:
    return ("replicated",)
  if p.type != _TILED:
    return ("other",)
  dims = tuple(int(d) for d in p.tile_assignment_dimensions)
  trailing = len(p.last_tile_dims) + (1 if p.replicate_on_last_tile_dim else 0)
  return ("tiled", dims, trailing)


def partition_spec(sharding: tuple, mesh, rank: int):
  """The ``PartitionSpec`` of ``sharding`` on ``mesh`` (None: no constraint)."""
  from jax.sharding import PartitionSpec

  if sharding[0] == "replicated":
    return PartitionSpec()
  if sharding[0] != "tiled":
    return None
  dims = sharding[1][: len(sharding[1]) - sharding[2]]
  if len(dims) != rank:
    return None
  free = list(zip(mesh.axis_names, mesh.axis_sizes))
  spec = []
  for tiles in dims:
    if tiles == 1:
      spec.append(None)
      continue
    chosen, product = [], 1
    while free and product < tiles:
      name, size = free.pop(0)
      chosen.append(name)
      product *= size
    if product != tiles:
      return None
    spec.append(chosen[0] if len(chosen) == 1 else tuple(chosen))
  return PartitionSpec(*spec)


def _sharding_impl(input, *, sharding, unspecified_dims):
  """The identity; under a mesh, the sharding as a ``with_sharding_constraint``."""
  mesh = jax.sharding.get_abstract_mesh()
  if mesh is None or mesh.empty:
    return input
  spec = partition_spec(sharding, mesh, input.ndim)
  if spec is None:
    return input
  explicit = all(t == jax.sharding.AxisType.Explicit for t in mesh.axis_types)
  # explicit axes: the value's type carries its sharding, which reshard changes
  # (with_sharding_constraint only asserts it there)
  if explicit:
    return jax.sharding.reshard(input, spec)
  return jax.lax.with_sharding_constraint(input, spec)


def _batch(args, dims, *, sharding, unspecified_dims):
  (x,), (d,) = args, dims
  if sharding[0] == "tiled":  # the batch axis in front, not tiled
    sharding = ("tiled", (1,) + tuple(sharding[1]), sharding[2])
  return tfops.XlaSharding(
    rules.to_front(x, d), sharding=sharding, unspecified_dims=tuple(u + 1 for u in unspecified_dims)
  ), 0


def _calls(st):
  @st.composite
  def calls(draw):
    dtype = draw(st.dtypes(st.ALL))
    shape = tuple(draw(st.shapes(max_rank=3)))
    kind = draw(st.sampled_from(["empty", "replicated", "tiled"]))
    if kind == "empty":
      sharding = b""
    elif kind == "replicated":
      sharding = _common.serialize("OpSharding", type=_REPLICATED)
    else:  # one device: every tile count 1
      sharding = _common.serialize(
        "OpSharding",
        type=_TILED,
        tile_assignment_dimensions=[1] * max(len(shape), 1),
        tile_assignment_devices=[0],
      )
      if not shape:
        sharding = _common.serialize("OpSharding", type=_REPLICATED)
    return dict(input=st.draw_array(draw, dtype, shape), sharding=sharding)

  return calls()


XlaSharding = register_op(
  "XlaSharding",
  _sharding_impl,
  family=FAMILY,
  attrs=("sharding", "unspecified_dims"),
  canonicalize=lambda p, *o: dict(
    p, sharding=parse_sharding(p["sharding"]), unspecified_dims=tuple(p["unspecified_dims"])
  ),
  linear=True,
  transpose=lambda ct, x, **p: [tfops.XlaSharding(ct, **p)],
  batching=_batch,
  spec=rules.per_op(
    lambda op: (
      lambda st: st.Spec(
        _calls(st),
        oracle=_common.jit_oracle(op.op_type, ("input",)),
        note="oracle: the op under tf.function(jit_compile=True) (one "
        "device); meshes are tested in tests/test_xla_ops.py",
      )
    )
  ),
)


# --- XlaSpmdFullToShardShape / XlaSpmdShardToFullShape ---------------------------------


def shard_shape(sharding: tuple, full_shape, dim: int) -> tuple:
  """One device's shard of ``full_shape`` under ``sharding`` (tile counts of a tiled
  sharding, rounded up; only ``dim`` when it is >= 0); other shardings keep it."""
  full_shape = tuple(full_shape)
  if sharding[0] != "tiled":
    return full_shape
  tiles = sharding[1][: len(sharding[1]) - sharding[2]]
  if len(tiles) != len(full_shape):
    return full_shape
  return tuple(
    -(-n // t) if dim < 0 or i == dim else n for i, (n, t) in enumerate(zip(full_shape, tiles))
  )


_MANUAL_HINT = (
  "a sharding that splits the value between devices is manual "
  "partitioning (TF's SPMD partitioner); in JAX that is jax.shard_map's job: "
  "convert the per-shard computation and wrap it in jax.shard_map"
)


def _spmd_canonicalize(op):
  def canonicalize(params, input, *rest):  # TF arg name
    sharding = parse_sharding(params["manual_sharding"])
    dim = int(params["dim"])
    shape = tuple(int(d) for d in np.shape(input))
    full = tuple(int(d) for d in params["full_shape"]) if "full_shape" in params else shape
    if shard_shape(sharding, full, dim) != full or shape != full:
      raise errors.ConversionError(
        f"{op.op_type}: full shape {list(full)}, shard shape "
        f"{list(shard_shape(sharding, full, dim))}: {_MANUAL_HINT}"
      )
    out = dict(
      params,
      manual_sharding=sharding,
      dim=dim,
      unspecified_dims=tuple(int(u) for u in params["unspecified_dims"]),
    )
    if "full_shape" in params:
      out["full_shape"] = full
    return out

  return canonicalize


def _full_to_shard_impl(input, *, manual_sharding, dim, unspecified_dims):
  """The shard of one device: the identity (shardings that split the value are
  refused when the node is prepared: shard_map's job)."""
  return input


def _shard_to_full_impl(input, *, manual_sharding, full_shape, dim, unspecified_dims):
  """The full value from one device's shard: the identity (shard shape == full
  shape; shardings that split the value are refused when the node is prepared)."""
  return input


def _batched_params(params, size):
  out = dict(
    params,
    dim=params["dim"] + 1 if params["dim"] >= 0 else -1,
    unspecified_dims=tuple(u + 1 for u in params["unspecified_dims"]),
  )
  s = params["manual_sharding"]
  if s[0] == "tiled":
    out["manual_sharding"] = ("tiled", (1,) + tuple(s[1]), s[2])
  if "full_shape" in params:
    out["full_shape"] = (size,) + tuple(params["full_shape"])
  return out


def _spmd_batch(op):
  def rule(args, dims, **params):
    (x,), (d,) = args, dims
    x = rules.to_front(x, d)
    return op(x, **_batched_params(params, x.shape[0])), 0

  return rule


def _full_to_shard_transpose(ct, x, **params):
  return [tfops.XlaSpmdShardToFullShape(ct, full_shape=tuple(x.aval.shape), **params)]


def _shard_to_full_transpose(ct, x, *, full_shape, **params):
  return [tfops.XlaSpmdFullToShardShape(ct, **params)]


def _spmd_calls(st, full: bool):
  @st.composite
  def calls(draw):
    dtype = draw(st.dtypes(st.ALL))
    shape = tuple(draw(st.shapes(max_rank=3)))
    kind = draw(st.sampled_from(["replicated", "manual", "tiled"]))
    if kind == "replicated" or not shape:
      sharding = _common.serialize("OpSharding", type=_REPLICATED)
    elif kind == "manual":
      sharding = _common.serialize("OpSharding", type=_MANUAL)
    else:  # one device: every tile count 1
      sharding = _common.serialize(
        "OpSharding",
        type=_TILED,
        tile_assignment_dimensions=[1] * len(shape),
        tile_assignment_devices=[0],
      )
    call = dict(
      input=st.draw_array(draw, dtype, shape),
      manual_sharding=sharding,
      dim=draw(st.integers(-1, len(shape) - 1)),
    )
    if full:
      call["full_shape"] = list(shape)
    return call

  return calls()


_SPMD_NOTE = (
  "oracle: the op under tf.function(jit_compile=True) on one device (a "
  "sharding that splits the value is refused, by TF's CPU jit too)"
)

XlaSpmdFullToShardShape = register_op(
  "XlaSpmdFullToShardShape",
  _full_to_shard_impl,
  family=FAMILY,
  attrs=("manual_sharding", "dim", "unspecified_dims"),
  canonicalize=rules.per_op(_spmd_canonicalize),
  linear=True,
  transpose=_full_to_shard_transpose,
  batching=rules.per_op(_spmd_batch),
  spec=rules.per_op(
    lambda op: (
      lambda st: st.Spec(
        _spmd_calls(st, False), note=_SPMD_NOTE, oracle=_common.jit_oracle(op.op_type, ("input",))
      )
    )
  ),
)

XlaSpmdShardToFullShape = register_op(
  "XlaSpmdShardToFullShape",
  _shard_to_full_impl,
  family=FAMILY,
  attrs=("manual_sharding", "full_shape", "dim", "unspecified_dims"),
  canonicalize=rules.per_op(_spmd_canonicalize),
  linear=True,
  transpose=_shard_to_full_transpose,
  batching=rules.per_op(_spmd_batch),
  spec=rules.per_op(
    lambda op: (
      lambda st: st.Spec(
        _spmd_calls(st, True), note=_SPMD_NOTE, oracle=_common.jit_oracle(op.op_type, ("input",))
      )
    )
  ),
)

# --- XlaReplicaId ---------------------------------------------------------------------


def _replica_canonicalize(params):
  """The manual mesh axes in scope (inside ``jax.shard_map``), in mesh order."""
  mesh = jax.sharding.get_abstract_mesh()
  axes = (
    ()
    if mesh is None or mesh.empty
    else tuple(a for a in mesh.axis_names if a in set(mesh.manual_axes))
  )
  return dict(params, axes=axes)


def _replica_id_impl(*, axes):
  """0 outside ``jax.shard_map`` (one program, one replica); inside it, the device's
  position along the manual mesh axes (``lax.axis_index`` of them, row-major)."""
  if not axes:
    return jnp.zeros((), np.int32)
  return jax.lax.axis_index(axes).astype(np.int32)


def _replica_interpret(ctx, node, inputs):
  """Folded to 0 outside ``jax.shard_map``; bound inside it (the device's index is a
  program value there)."""
  op = tfops.XlaReplicaId
  _, params = op.prepare({}, dict(node.attrs), node.name)
  return [op.primitive.bind(**params) if params["axes"] else op.apply([], params)]


def _replica_oracle():
  """One replica: TF's replica id in the default distribution strategy's context
  (TF's CPU jit of XlaReplicaId crashes the process)."""

  def tf_XlaReplicaId():
    tf = import_tensorflow()
    return tf.constant(tf.distribute.get_replica_context().replica_id_in_sync_group, tf.int32)

  return tf_XlaReplicaId


XlaReplicaId = register_op(
  "XlaReplicaId",
  _replica_id_impl,
  family=FAMILY,
  canonicalize=_replica_canonicalize,
  interpret=_replica_interpret,
  spec=lambda st: st.Spec(
    st.just({}),
    oracle=_replica_oracle(),
    skip={
      "vmap": "the op has no operands",
      "jvp": "no operands, an integer output",
      "vjp": "no operands, an integer output",
    },
    note="oracle: TF's replica id in the default strategy (one "
    "replica), as TF's CPU jit of the op crashes; under "
    "jax.shard_map it is lax.axis_index over the manual axes "
    "(tests/test_xla_more.py)",
  ),
)
