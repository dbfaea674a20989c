"""DrawBoundingBoxes and DrawBoundingBoxesV2 (NHWC, depth 1, 3 or 4; half and float).

As TF's CPU kernel: box ``b`` of image ``n`` is drawn in colour ``b % num_colors`` over
the boxes before it; its corners are ``int64(float(y) * (height - 1))`` (truncation
toward zero), an inverted box or one entirely outside the image is skipped, and each of
its four edges is drawn only when that edge lies inside the image, clamped to the image
along its length. V1 (and V2 with an empty ``colors``) uses TF's 10-colour default table
(all ones in a 1-channel image).

Rules: linear in the images for fixed boxes and colours: the JVP and its transpose are
``tf.DrawBoundingBoxesV2`` of the tangent / cotangent with black boxes (zeros where the
boxes are drawn). Boxes and colours get no derivative (TF registers no gradient for
either op). Batching folds the vmapped axis into N for the images and boxes; batched
colours: ``vmap`` of the impl.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from tfprims import rules
from tfprims.core import register_op, tfops
from tfprims.ops.image._common import FAMILY

_F32 = jnp.float32

_DEFAULT_COLORS = np.array(
  [
    [1, 1, 0, 1],
    [0, 0, 1, 1],
    [1, 0, 0, 1],
    [0, 1, 0, 1],
    [0.5, 0, 0.5, 1],
    [0.5, 0.5, 0, 1],
    [0.5, 0, 0, 1],
    [0, 0, 0.5, 1],
    [0, 1, 1, 1],
    [1, 0, 1, 1],
  ],
  np.float32,
)


def _default_table(depth):
  table = _DEFAULT_COLORS[:, :depth].copy()
  if depth == 1:
    table[:, 0] = 1
  return table


def _corner(v, size):
  """TF's ``int64(float(v) * (size - 1))``; the product is clipped to +-2**30 first (the
  comparisons that follow are unchanged: images are smaller)."""
  p = jnp.clip(v * np.float32(size - 1), -(2.0**30), 2.0**30)
  return jnp.trunc(p).astype(jnp.int32)


def _draw(images, boxes, table):
  n, h, w, d = images.shape
  nb = boxes.shape[1]
  if nb == 0 or images.size == 0:
    return images
  k = table.shape[0]
  rows = jnp.arange(h, dtype=jnp.int32)[None, :, None]
  cols = jnp.arange(w, dtype=jnp.int32)[None, None, :]
  colors = jnp.asarray(table, _F32)[:, :d].astype(images.dtype)

  def body(bb, canvas):
    box = jax.lax.dynamic_index_in_dim(boxes, bb, axis=1, keepdims=False).astype(_F32)
    e = lambda a: a[:, None, None]
    minr, maxr = e(_corner(box[:, 0], h)), e(_corner(box[:, 2], h))
    minc, maxc = e(_corner(box[:, 1], w)), e(_corner(box[:, 3], w))
    drawn = ~((minr > maxr) | (minc > maxc) | (minr >= h) | (maxr < 0) | (minc >= w) | (maxc < 0))
    in_cols = (cols >= jnp.maximum(minc, 0)) & (cols <= jnp.minimum(maxc, w - 1))
    in_rows = (rows >= jnp.maximum(minr, 0)) & (rows <= jnp.minimum(maxr, h - 1))
    mask = (
      ((rows == minr) & (minr >= 0) & in_cols)
      | ((rows == maxr) & (maxr < h) & in_cols)
      | ((cols == minc) & (minc >= 0) & in_rows)
      | ((cols == maxc) & (maxc < w) & in_rows)
    )
    color = jax.lax.dynamic_index_in_dim(colors, bb % k, axis=0, keepdims=False)
    return jnp.where((drawn & mask)[..., None], color, canvas)

  return jax.lax.fori_loop(0, nb, body, images)


def _check(images, boxes):
  if images.ndim != 4:
    raise ValueError("The rank of the images should be 4")
  if boxes.ndim != 3:
    raise ValueError("The rank of the boxes tensor should be 3")
  if images.shape[0] != boxes.shape[0]:
    raise ValueError("The batch sizes should be the same")
  if images.shape[3] not in (1, 3, 4):
    raise ValueError("Channel depth should be either 1 (GRY), 3 (RGB), or 4 (RGBA)")
  if boxes.shape[2] != 4:
    raise ValueError(
      f"The size of the third dimension of the box must be 4. Received: {boxes.shape[2]}"
    )


def draw_bounding_boxes(images, boxes):
  """TF DrawBoundingBoxes: the default colour table."""
  _check(images, boxes)
  return _draw(images, boxes, _default_table(images.shape[3]))


def draw_bounding_boxes_v2(images, boxes, colors):
  """TF DrawBoundingBoxesV2: ``colors [k, >= depth]``; empty: the default table."""
  _check(images, boxes)
  if colors.ndim != 2:
    raise ValueError(f"colors must be a 2-D matrix {colors.shape}")
  if colors.shape[1] < images.shape[3]:
    raise ValueError(
      f"colors must have equal or more channels than the image provided: {colors.shape}"
    )
  table = _default_table(images.shape[3]) if colors.size == 0 else colors
  return _draw(images, boxes, table)


# --------------------------------------------------------------------------
# Rules
# --------------------------------------------------------------------------


def _black(images):
  return np.zeros((1, rules.shape_of(images)[3]), np.float32)


def _jvp(t, images, boxes, *colors):
  return tfops.DrawBoundingBoxesV2(t, boxes, _black(images))


def _transpose(ct, images, boxes, *colors):
  ct = rules.instantiate(ct)
  out = tfops.DrawBoundingBoxesV2(ct, boxes, _black(images)) if rules.U(images) else None
  return [out, None] + [None] * len(colors)


def _batching(op, impl):
  fallback = rules.vmap_batching(impl, False)

  def rule(args, dims, **params):
    if len(args) == 3 and dims[2] is not None:
      return fallback(args, dims, **params)
    b = rules.batch_size(args, dims)
    folded = []
    for a, d in zip(args[:2], dims[:2]):
      a = rules.with_batch_axis(a, d, b)
      shape = rules.shape_of(a)
      folded.append(rules.reshape(a, (shape[0] * shape[1],) + shape[2:]))
    out = op(*folded, *args[2:], **params)
    shape = rules.shape_of(out)
    return rules.reshape(out, (b, shape[0] // b if b else 0) + shape[1:]), 0

  return rule


# --------------------------------------------------------------------------
# Specs
# --------------------------------------------------------------------------


def _draw_calls(st, v2):
  @st.composite
  def draw_call(draw):
    n, h, w = draw(st.integers(1, 2)), draw(st.integers(1, 4)), draw(st.integers(1, 4))
    depth = draw(st.sampled_from((1, 3, 4)))
    nb = draw(st.integers(0, 4))
    dtype = st.np_dtype(draw(st.sampled_from(("float16", "float32"))))
    # Corners in eighths over [-0.5, 1.5]: on pixels, between them, inverted, outside.
    boxes = np.array(
      [draw(st.integers(-4, 12)) / 8 for _ in range(n * nb * 4)], np.float32
    ).reshape(n, nb, 4)
    call = dict(
      images=draw(st.arrays(dtype, (n, h, w, depth), special=False, min_value=-2, max_value=2)),
      boxes=boxes,
    )
    if v2:
      k = draw(st.integers(0, 3))
      call["colors"] = draw(
        st.arrays(
          np.dtype("float32"),
          (k, depth + draw(st.integers(0, 1))),
          special=False,
          min_value=0,
          max_value=1,
        )
      )
    return call

  return draw_call()


DrawBoundingBoxes = register_op(
  "DrawBoundingBoxes",
  draw_bounding_boxes,
  family=FAMILY,
  jvp=(_jvp, None),
  transpose=_transpose,
  batching=rules.per_op(_batching, draw_bounding_boxes),
  spec=lambda st: st.Spec(
    _draw_calls(st, False),
    grad_oracle="fd",
    diff_args=("images",),
    note="TF registers no gradient: derivatives checked by central differences in the images.",
  ),
)

DrawBoundingBoxesV2 = register_op(
  "DrawBoundingBoxesV2",
  draw_bounding_boxes_v2,
  family=FAMILY,
  jvp=(_jvp, None, None),
  transpose=_transpose,
  batching=rules.per_op(_batching, draw_bounding_boxes_v2),
  spec=lambda st: st.Spec(
    _draw_calls(st, True),
    grad_oracle="fd",
    diff_args=("images",),
    note="TF registers no gradient: derivatives checked by central differences in the images.",
  ),
)
