"""XlaSharding: a sharding annotation (``tfxla.sharding``, DTensor and TPU graphs).

Its ``sharding`` attr is a serialized ``OpSharding``, parsed when a node is
prepared into ``("replicated",)``, ``("tiled", tile_dims, replicated_trailing)``
or ``("other",)``. Without a mesh the op is the identity. Under a mesh
(``jax.sharding.set_mesh``) a replicated or tiled sharding becomes
``lax.with_sharding_constraint`` (``jax.sharding.reshard`` on Explicit meshes): each tiled dimension is given the mesh axes, in
the mesh's order, whose sizes multiply to its tile count (the proto's device order
is not read: the tiles are assumed laid out along the mesh's axes); a tiling no
mesh axes match, and maximal or manual shardings, leave the value unconstrained.
Its derivative is the same annotation on the tangent (as TF's gradient).
"""

from __future__ import annotations


import jax

from tfprims import rules
from tfprims.core import define_op, tfops
from tfprims.ops.xla import _common
from tfprims.ops.xla._common import FAMILY

_REPLICATED, _TILED = 0, 3  # OpSharding.Type


def parse_sharding(value) -> tuple:
  """A serialized ``OpSharding`` -> the op's ``sharding`` param."""
  if isinstance(value, tuple):
    return value
  if not value:
    return ("replicated",)
  p = _common._parse("OpSharding", value)  # noqa: SLF001
  if p.type == _REPLICATED:
    return ("replicated",)
  if p.type != _TILED:
    return ("other",)
  dims = tuple(int(d) for d in p.tile_assignment_dimensions)
  trailing = len(p.last_tile_dims) + (1 if p.replicate_on_last_tile_dim else 0)
  return ("tiled", dims, trailing)


def partition_spec(sharding: tuple, mesh, rank: int):
  """The ``PartitionSpec`` of ``sharding`` on ``mesh`` (None: no constraint)."""
  from jax.sharding import PartitionSpec  # noqa: PLC0415
  if sharding[0] == "replicated":
    return PartitionSpec()
  if sharding[0] != "tiled":
    return None
  dims = sharding[1][:len(sharding[1]) - sharding[2]]
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
  return tfops.XlaSharding(rules.to_front(x, d), sharding=sharding,
                           unspecified_dims=tuple(u + 1 for u in unspecified_dims)), 0


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
      sharding = _common.serialize("OpSharding", type=_TILED,
                                   tile_assignment_dimensions=[1] * max(len(shape), 1),
                                   tile_assignment_devices=[0])
      if not shape:
        sharding = _common.serialize("OpSharding", type=_REPLICATED)
    return dict(input=st.draw_array(draw, dtype, shape), sharding=sharding)
  return calls()


XlaSharding = define_op(
    "XlaSharding", _sharding_impl, family=FAMILY, attrs=("sharding", "unspecified_dims"),
    canonicalize=lambda p, *o: dict(p, sharding=parse_sharding(p["sharding"]),
                                    unspecified_dims=tuple(p["unspecified_dims"])),
    linear=True, transpose=lambda ct, x, **p: [tfops.XlaSharding(ct, **p)],
    batching=_batch,
    spec=lambda st: st.Spec(_calls(st), oracle=_common.jit_oracle("XlaSharding", ("input",)),
                            note="oracle: the op under tf.function(jit_compile=True) (one "
                            "device); meshes are tested in tests/test_xla_ops.py"))

