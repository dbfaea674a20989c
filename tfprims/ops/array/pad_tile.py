"""Tiling and padding: Tile, BroadcastTo, Pad, PadV2, MirrorPad.

Tile, BroadcastTo, Pad and PadV2 are linear: Tile -> Reshape + Sum, BroadcastTo
-> Sum + Reshape, Pad/PadV2 -> Slice (PadV2's constant gets the sum of the padded
cotangent, where TF's gradient ignores it: docs/semantics/array.md), MirrorPad ->
MirrorPadGrad (in ``layout``). PadV2 with a batched constant is batched by ``vmap``
of the impl.
"""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np
from jax import lax

from tfprims import emit, rules
from tfprims.core import register_op, tfops
from tfprims.ops.array._common import FAMILY
from tfprims.ops.shared_specs import index_array, lazy_hst
from tfprims.rules import U


def _multiples(multiples, rank) -> tuple:
  m = rules.sizes(multiples)  # tf.shape(x)[0] of a symbolic batch stays symbolic
  if len(m) != rank:
    raise ValueError(
      f"Tile: expected multiples argument to be a vector of length {rank} but got length {len(m)}"
    )
  if any(isinstance(k, int) and k < 0 for k in m):
    raise ValueError(f"Tile: expected multiples to be non-negative, got {m}")
  return m


def _tile_impl(input, *, multiples):
  return jnp.tile(input, _multiples(multiples, input.ndim))


def _tile_transpose(ct, x, *, multiples):
  shape = rules.shape_of(x)
  m = _multiples(multiples, len(shape))
  split = tuple(v for k, n in zip(m, shape) for v in (k, n))
  summed = rules.reduce_sum(tfops.Reshape(ct, shape=split), tuple(range(0, 2 * len(shape), 2)))
  return [rules.reshape(summed, shape)]


def _tile_batch(args, dims, *, multiples):
  (x,), (d,) = args, dims
  return tfops.Tile(rules.to_front(x, d), multiples=(1,) + rules.sizes(multiples)), 0


Tile = register_op(
  "Tile",
  _tile_impl,
  family=FAMILY,
  static=("multiples",),
  linear=True,
  transpose=_tile_transpose,
  batching=_tile_batch,
  spec=lambda st: st.Spec(_tile_calls(st)),
)


def _broadcast_to_impl(input, *, shape):
  shape = rules.sizes(shape)
  if input.ndim > len(shape):
    raise ValueError(
      f"BroadcastTo: rank of input ({input.ndim}) must be no greater than rank "
      f"of output shape ({len(shape)})"
    )
  return jnp.broadcast_to(input, shape)


def _broadcast_to_batch(args, dims, *, shape):
  (x,), (d,) = args, dims
  shape = rules.sizes(shape)
  x = rules.to_front(x, d)
  size, inner = x.shape[0], tuple(x.shape[1:])
  if len(inner) < len(shape):
    x = tfops.Reshape(x, shape=(size,) + (1,) * (len(shape) - len(inner)) + inner)
  return tfops.BroadcastTo(x, shape=(size,) + shape), 0


BroadcastTo = register_op(
  "BroadcastTo",
  _broadcast_to_impl,
  family=FAMILY,
  static=("shape",),
  linear=True,
  transpose=lambda ct, x, *, shape: [rules.unbroadcast(ct, rules.shape_of(x))],
  batching=_broadcast_to_batch,
  spec=lambda st: st.Spec(_broadcast_to_calls(st)),
)


def _paddings(paddings, rank) -> tuple:
  """((low, high), ...) per axis: ints, or symbolic dims of a jax.export (padding an
  image of unknown size up to a multiple of 4 pads by (4 - h % 4) % 4)."""
  p = rules.sizes(paddings)
  if len(p) != 2 * rank:
    raise ValueError(
      f"Pad: the first dimension of paddings must be the rank of inputs "
      f"({rank}), got paddings {paddings}"
    )
  if any(type(v) is int and v < 0 for v in p):
    raise ValueError(f"Pad: paddings must be non-negative, got {p}")
  return tuple(zip(p[0::2], p[1::2]))


def _pad_build(B, input, *runtime_paddings, paddings=None, widths=None):
  if runtime_paddings:  # the runtime form: _positioned_pad
    return None
  return B.pad(input, 0, [(a, b, 0) for a, b in _paddings(paddings, input.ndim)])


# Runtime paddings whose total per dim the value analysis proves constant (TF's
# gradient of tf.slice with a runtime begin pads by [begin, shape - begin - size]):
# ``tf.Pad[widths] x paddings`` places the input into zeros at the runtime offsets.


def _positioned_pad(input, runtime_paddings, *, widths, paddings=None):
  shape = tuple(n + w for n, w in zip(input.shape, widths))
  return lax.dynamic_update_slice(
    jnp.zeros(shape, input.dtype), input, list(runtime_paddings[:, 0])
  )


_pad_impl = emit.traced(_pad_build, default=_positioned_pad)


def _pad_transpose(ct, x, *runtime_paddings, paddings=None, widths=None):
  shape = rules.shape_of(x)
  if runtime_paddings:
    return [tfops.Slice(ct, runtime_paddings[0][:, 0], size=shape), None]
  p = _paddings(paddings, len(shape))
  return [tfops.Slice(ct, begin=tuple(a for a, _ in p), size=shape)]


def _pad_batch(args, dims, *, paddings=None, widths=None):
  x = rules.to_front(args[0], dims[0])
  if widths is None:
    paddings = ((0, 0),) + _paddings(paddings, x.ndim - 1)
    return tfops.Pad(x, paddings=paddings), 0
  if dims[1] is not None:  # paddings per example: jax.vmap's scatter
    return rules.vmap_batching(_positioned_pad, False)(args, dims, widths=widths)
  p = args[1]
  return tfops.Pad(
    x, jnp.concatenate([jnp.zeros((1, 2), p.dtype), p]), widths=(0,) + tuple(widths)
  ), 0


def _pad_check(input, *runtime_paddings, paddings=None, widths=None):
  """Runtime paddings must be non-negative (TF raises)."""
  if not runtime_paddings:
    return None
  return (jnp.any(runtime_paddings[0] < 0), f"Pad: paddings must be non-negative (widths {widths})")


def _pad_interpret(ctx, node, inputs):
  """Known paddings: a param. Runtime ones whose total per dim is proven constant:
  an operand of ``tf.Pad[widths]`` (they only position the input)."""
  from tfprims import value_analysis
  from tfprims.interpreter import bind_node, run_check

  x, paddings = inputs
  forms = value_analysis.forms(ctx, paddings)  # None when known (or not small ints)
  if forms is None or forms.ndim != 2 or forms.shape[1] != 2:
    return bind_node(ctx, Pad, node, inputs)
  widths = [forms[i, 0] + forms[i, 1] for i in range(forms.shape[0])]
  if any(isinstance(w, value_analysis.Lin) for w in widths):
    return bind_node(ctx, Pad, node, inputs)  # refused there: StaticInputError
  params = dict(widths=tuple(int(w) for w in widths))
  run_check(Pad, node, [x, paddings], params)
  return [Pad(x, paddings, **params)]


Pad = register_op(
  "Pad",
  _pad_impl,
  family=FAMILY,
  static=("paddings",),
  linear_values=True,
  build=_pad_build,
  jvp=rules.per_op(rules.positioned_jvp),
  transpose=_pad_transpose,
  batching=_pad_batch,
  check=_pad_check,
  interpret=_pad_interpret,
  spec=rules.per_op(lambda op: lambda st: st.Spec(_pad_calls(st, op.op_type))),
)


def _padv2_impl(input, constant_values, *, paddings):
  p = _paddings(paddings, input.ndim)
  if jnp.ndim(constant_values) != 0:
    raise ValueError("PadV2: constant_values must be a scalar")
  return lax.pad(input, jnp.asarray(constant_values, input.dtype), [(a, b, 0) for a, b in p])


def _padv2_transpose(ct, x, c, *, paddings):
  shape = rules.shape_of(x)
  p = _paddings(paddings, len(shape))
  inner = tfops.Slice(ct, begin=tuple(a for a, _ in p), size=shape)
  ct_x = inner if U(x) else None
  ct_c = None
  if U(c):
    axes = tuple(range(len(shape)))
    ct_c = (
      rules.reduce_sum(ct, axes) - rules.reduce_sum(inner, axes) if axes else jnp.zeros_like(ct)
    )
  return [ct_x, ct_c]


def _padv2_batch(args, dims, *, paddings):
  (x, c), (dx, dc) = args, dims
  if dc is not None:
    return rules.vmap_batching(_padv2_impl, False)(args, dims, paddings=paddings)
  paddings = ((0, 0),) + _paddings(paddings, x.ndim - 1)
  return tfops.PadV2(rules.to_front(x, dx), c, paddings=paddings), 0


PadV2 = register_op(
  "PadV2",
  _padv2_impl,
  family=FAMILY,
  static=("paddings",),
  linear=True,
  transpose=_padv2_transpose,
  batching=_padv2_batch,
  spec=rules.per_op(
    lambda op: (
      lambda st: st.Spec(
        _pad_calls(st, op.op_type),
        diff_args=("input",),
        note="TF's gradient ignores constant_values; ours is the sum of the padded cotangent",
      )
    )
  ),
)


def _reversed_run(x, ax, start, count):
  """x[start], x[start - 1], ..., x[start - count + 1] along ``ax``. Along an axis of
  symbolic size (a shape-polymorphic jax.export's batch) a slice's bounds cannot be
  checked when it is traced, so the run is a gather of those indices there."""
  if rules.known((x.shape[ax],)):
    return lax.rev(lax.slice_in_dim(x, start - count + 1, start + 1, axis=ax), (ax,))
  return jnp.take(x, start - jnp.arange(count), axis=ax, mode="clip")


def mirror_pad(input, *, paddings, mode):
  """The input between its mirrored borders (REFLECT leaves out the edge, SYMMETRIC
  repeats it)."""
  p = _paddings(paddings, input.ndim)
  offset = {"REFLECT": 1, "SYMMETRIC": 0}[mode]
  x = input
  for ax, (a, b) in enumerate(p):
    n = x.shape[ax]
    if rules.known((n,)) and (a > n - offset or b > n - offset):
      bound = "less than" if offset else "no greater than"
      raise ValueError(
        f"MirrorPad: paddings must be {bound} the dimension size: {a}, {b} vs {n} ({mode})"
      )
    low = [_reversed_run(x, ax, offset + a - 1, a)] if a else []
    high = [_reversed_run(x, ax, n - 1 - offset, b)] if b else []
    if a or b:
      x = lax.concatenate(low + [x] + high, ax)
  return x


def _mirror_pad_batch(args, dims, *, paddings, mode):
  (x,), (d,) = args, dims
  paddings = ((0, 0),) + _paddings(paddings, x.ndim - 1)
  return tfops.MirrorPad(rules.to_front(x, d), paddings=paddings, mode=mode), 0


MirrorPad = register_op(
  "MirrorPad",
  mirror_pad,
  family=FAMILY,
  static=("paddings",),
  attrs=("mode",),
  linear=True,
  transpose=lambda ct, x, *, paddings, mode: [
    tfops.MirrorPadGrad(ct, paddings=paddings, mode=mode)
  ],
  batching=_mirror_pad_batch,
  spec=rules.per_op(lambda op: lambda st: st.Spec(_pad_calls(st, op.op_type))),
)


# --- property-test strategies (hypothesis is imported lazily) ---------------------


def _tile_calls(st):
  hst = lazy_hst()

  @st.composite
  def calls(draw):
    x = draw(
      st.arrays(
        st.dtypes(tuple(n for n in st.ALL if n != "uint16")), st.shapes(max_rank=3, max_side=3)
      )
    )
    m = [draw(hst.integers(0, 3)) for _ in range(x.ndim)]
    return {"input": x, "multiples": index_array(draw, st, np.array(m, np.int64).reshape(-1))}

  return calls()


def _broadcast_to_calls(st):
  hst = lazy_hst()

  @st.composite
  def calls(draw):
    target = list(draw(st.shapes()))
    k = draw(hst.integers(0, len(target)))
    in_shape = [1 if draw(hst.booleans()) else n for n in target[len(target) - k :]]
    x = draw(st.arrays(st.dtypes(st.ALL), tuple(in_shape)))
    return {"input": x, "shape": index_array(draw, st, np.array(target, np.int64).reshape(-1))}

  return calls()


def _pad_calls(st, op):
  hst = lazy_hst()

  @st.composite
  def calls(draw):
    dtype = draw(st.dtypes(st.ALL))
    # MirrorPad: no zero-size dims, TF's own gradient (MirrorPadGrad) rejects them.
    x = draw(st.arrays(dtype, st.shapes(max_side=3, min_side=int(op == "MirrorPad"))))
    if op == "MirrorPad":
      mode = draw(hst.sampled_from(["REFLECT", "SYMMETRIC"]))
      hi = [n - (mode == "REFLECT") for n in x.shape]
      p = [[draw(hst.integers(0, max(h, 0))), draw(hst.integers(0, max(h, 0)))] for h in hi]
    else:
      p = [[draw(hst.integers(0, 2)), draw(hst.integers(0, 2))] for _ in x.shape]
    out = {"input": x, "paddings": index_array(draw, st, np.array(p, np.int64).reshape(x.ndim, 2))}
    if op == "PadV2":
      out["constant_values"] = draw(st.arrays(dtype, ()))
    if op == "MirrorPad":
      out["mode"] = mode
    return out

  return calls()
