"""GenerateBoundingBoxProposals (tfprims/ops/image/bbox_proposals.py).

TF has only a GPU kernel, so the oracle is the numpy reference of its steps
(``bbox_proposals.reference``): checked here on random calls (eager and jit), and on a
hand-worked call that pins the kernel's semantics independently of the reference
(decoding, the log(1000/16) cap, clipping, min_size scaled by the image scale,
pre_nms_topn, NMS, zero padding). vmap folds images; converted programs; the checks."""

import jax
import numpy as np
import pytest
import tensorflow as tf

import tfprims
from tfprims.core import get_op
from tfprims.ops.image import bbox_proposals as bp

OP = get_op("GenerateBoundingBoxProposals")


def _random_call(rng, n=2, h=4, w=5, a=3):
  corner = rng.uniform(0, 30, size=(h, w, a, 2)).astype(np.float32)
  size = rng.uniform(1, 20, size=(h, w, a, 2)).astype(np.float32)
  anchors = np.concatenate([corner, corner + size], -1).reshape(h, w, 4 * a)
  deltas = rng.normal(scale=0.3, size=(n, h, w, 4 * a)).astype(np.float32)
  deltas[..., 3::4] += rng.choice([0.0, 6.0], size=deltas[..., 3::4].shape, p=[0.9, 0.1])
  info = np.stack(
    [[rng.uniform(20, 40), rng.uniform(20, 40), rng.choice([0.5, 1, 2]), 1, 1] for _ in range(n)]
  ).astype(np.float32)
  return dict(
    scores=rng.uniform(size=(n, h, w, a)).astype(np.float32),
    bbox_deltas=deltas,
    image_info=info,
    anchors=anchors,
    nms_threshold=np.float32(rng.choice([0.0, 0.3, 0.5, 0.7, 1.0])),
    pre_nms_topn=np.int32(rng.integers(1, h * w * a + 5)),
    min_size=np.float32(rng.choice([0.0, 1.0, 3.0])),
  )


def _ours(call, post, jit=False):
  args = [
    call[k]
    for k in (
      "scores",
      "bbox_deltas",
      "image_info",
      "anchors",
      "nms_threshold",
      "pre_nms_topn",
      "min_size",
    )
  ]
  fn = lambda *a: OP(*a, post_nms_topn=post)
  return [np.asarray(o) for o in (jax.jit(fn) if jit else fn)(*args)]


def test_tf_has_no_cpu_kernel():
  rng = np.random.default_rng(0)
  call = _random_call(rng)
  with pytest.raises((tf.errors.NotFoundError, tf.errors.InvalidArgumentError)):
    with tf.device("/CPU:0"):
      tf.raw_ops.GenerateBoundingBoxProposals(post_nms_topn=4, **call)


@pytest.mark.parametrize("seed", range(12))
def test_random_calls_match_reference(seed):
  rng = np.random.default_rng(seed)
  call = _random_call(
    rng,
    n=int(rng.integers(1, 3)),
    h=int(rng.integers(1, 5)),
    w=int(rng.integers(1, 5)),
    a=int(rng.integers(1, 4)),
  )
  post = int(rng.integers(1, 40))
  want = bp.reference(post_nms_topn=post, **call)
  for jit in (False, True):
    rois, probs = _ours(call, post, jit)
    assert rois.shape == want[0].shape and probs.shape == want[1].shape
    np.testing.assert_array_equal(probs, want[1])
    np.testing.assert_allclose(rois, want[0], rtol=1e-6, atol=1e-5)


def test_hand_worked_call():
  # one image 1 x 3 cells, one anchor each; image 10 high, 20 wide, scale 2
  anchors = np.array([[[0, 0, 4, 4], [0, 1, 4, 5], [5, 5, 6, 6]]], np.float32)
  scores = np.array([[[[0.5], [0.9], [0.7]]]], np.float32)
  deltas = np.zeros((1, 1, 3, 4), np.float32)
  deltas[0, 0, 0] = [0.25, 0.0, 0.0, 0.0]  # box 0 moved down by a quarter height
  deltas[0, 0, 2] = [0.0, 0.0, 0.0, 10.0]  # box 2: dw capped at log(1000/16)
  info = np.array([[10, 20, 2, 0, 0]], np.float32)
  call = dict(
    scores=scores,
    bbox_deltas=deltas,
    image_info=info,
    anchors=anchors,
    nms_threshold=np.float32(0.5),
    pre_nms_topn=np.int32(3),
    min_size=np.float32(0.5),
  )
  rois, probs = _ours(call, 5)
  # rank: box1 (0.9), box2 (0.7), box0 (0.5). box2: width 1 * 62.5 = 62.5 around
  # x = 5.5 -> [-25.75, 36.75] clipped to [0, 20]; height 1 (>= 0.5 * 2) kept.
  # box0: [1, 0, 5, 4] overlaps box1 [0, 1, 4, 5]: inter 3 * 3 = 9, union 23 -> 0.39 < 0.5
  want_rois = np.array(
    [[0, 1, 4, 5], [5, 0, 6, 20], [1, 0, 5, 4], [0, 0, 0, 0], [0, 0, 0, 0]], np.float32
  )
  np.testing.assert_allclose(rois[0], want_rois, atol=1e-5)
  np.testing.assert_array_equal(probs[0], np.float32([0.9, 0.7, 0.5, 0, 0]))
  # a lower threshold suppresses box0 (IoU 0.39 > 0.3)
  rois, probs = _ours(dict(call, nms_threshold=np.float32(0.3)), 5)
  np.testing.assert_array_equal(probs[0], np.float32([0.9, 0.7, 0, 0, 0]))
  # min_size 0.6 scaled by 2 = 1.2 drops box2 (height 1); pre_nms_topn 1 keeps box1 only
  _, probs = _ours(dict(call, min_size=np.float32(0.6)), 5)
  np.testing.assert_array_equal(probs[0], np.float32([0.9, 0.5, 0, 0, 0]))
  _, probs = _ours(dict(call, pre_nms_topn=np.int32(1)), 2)
  np.testing.assert_array_equal(probs[0], np.float32([0.9, 0]))
  for c in (call, dict(call, nms_threshold=np.float32(0.3)), dict(call, min_size=np.float32(0.6))):
    np.testing.assert_allclose(_ours(c, 5)[0], bp.reference(post_nms_topn=5, **c)[0], atol=1e-5)


def test_vmap_folds_images():
  rng = np.random.default_rng(3)
  calls = [_random_call(rng, n=2) for _ in range(3)]
  base = calls[0]
  per = {k: np.stack([c[k] for c in calls]) for k in ("scores", "bbox_deltas", "image_info")}
  fn = lambda s, d, i: OP(
    s,
    d,
    i,
    base["anchors"],
    base["nms_threshold"],
    base["pre_nms_topn"],
    base["min_size"],
    post_nms_topn=7,
  )
  rois, probs = jax.vmap(fn)(per["scores"], per["bbox_deltas"], per["image_info"])
  for b in range(3):
    want = fn(per["scores"][b], per["bbox_deltas"][b], per["image_info"][b])
    np.testing.assert_array_equal(rois[b], want[0])
    np.testing.assert_array_equal(probs[b], want[1])
  jaxpr = jax.make_jaxpr(jax.vmap(fn))(per["scores"], per["bbox_deltas"], per["image_info"])
  assert "tf.GenerateBoundingBoxProposals" in {e.primitive.name for e in jaxpr.eqns}
  # batched thresholds: per-call vmap
  thr = np.array([0.0, 0.5, 1.0], np.float32)
  out = jax.vmap(
    lambda t: OP(
      base["scores"],
      base["bbox_deltas"],
      base["image_info"],
      base["anchors"],
      t,
      base["pre_nms_topn"],
      base["min_size"],
      post_nms_topn=7,
    )[1]
  )(thr)
  for b in range(3):
    np.testing.assert_array_equal(
      out[b], bp.reference(post_nms_topn=7, **dict(base, nms_threshold=thr[b]))[1]
    )


def test_converted_program_and_checks():
  rng = np.random.default_rng(4)
  call = _random_call(rng)

  @tf.function
  def f(scores, deltas, thr):
    return tf.raw_ops.GenerateBoundingBoxProposals(
      scores=scores,
      bbox_deltas=deltas,
      image_info=call["image_info"],
      anchors=call["anchors"],
      nms_threshold=thr,
      pre_nms_topn=call["pre_nms_topn"],
      min_size=call["min_size"],
      post_nms_topn=6,
    )

  fn = tfprims.convert_functional(
    f,
    tf.TensorSpec(call["scores"].shape, tf.float32),
    tf.TensorSpec(call["bbox_deltas"].shape, tf.float32),
    tf.TensorSpec([], tf.float32),
  )
  rois, probs = jax.jit(fn)(call["scores"], call["bbox_deltas"], np.float32(0.5))
  want = bp.reference(post_nms_topn=6, **dict(call, nms_threshold=np.float32(0.5)))
  np.testing.assert_array_equal(probs, want[1])
  np.testing.assert_allclose(rois, want[0], rtol=1e-6, atol=1e-5)
  with pytest.raises(tfprims.RuntimeCheckError, match="nms_threshold"):
    fn(call["scores"], call["bbox_deltas"], np.float32(1.5))
  # not differentiable (TF declares it so): zero gradients
  g = jax.grad(lambda d: fn(call["scores"], d, np.float32(0.5))[0].sum())(call["bbox_deltas"])
  np.testing.assert_array_equal(g, 0)
