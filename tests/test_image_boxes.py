"""Box ops (tfprims/ops/image/nms.py, combined_nms.py, boxes.py) in real programs:
detection post-processing with padded and combined NMS converted and compared with TF
(jit, vmap), the data-dependent NMS ops on known values and refused on traced ones,
and the invariants and distribution of sample_distorted_bounding_box."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import tensorflow as tf
from scipy import stats

import tfprims
from tfprims import graph as graph_lib
from tfprims import interpreter
from helpers import jaxpr_primitives

F32 = tf.float32
P_MIN = 1e-3  # fixed seeds: deterministic


def _detections(seed, n=12, dtype=np.float32):
  """Clustered boxes (so that NMS suppresses) and distinct scores."""
  rng = np.random.default_rng(seed)
  centres = rng.uniform(0.3, 0.7, (n, 2))
  half = rng.uniform(0.05, 0.25, (n, 2))
  boxes = np.concatenate([centres - half, centres + half], 1)
  flip = rng.random(n) < 0.2  # corners given in either order
  boxes[flip] = boxes[flip][:, [2, 3, 0, 1]]
  scores = (rng.permutation(n) + rng.uniform(0.1, 0.9, n)) / n
  return boxes.astype(dtype), scores.astype(dtype)


def _run_graph(body, *args):
  """The graph of ``body`` run by the interpreter on concrete jax arrays (an eager
  run: values known, no conversion check)."""
  specs = [tf.TensorSpec(a.shape, tf.as_dtype(a.dtype)) for a in args]
  cf = tf.function(body).get_concrete_function(*specs)
  gd = cf.graph.as_graph_def()
  g = graph_lib.from_graph_def(gd, [t.name for t in cf.inputs], [t.name for t in cf.outputs])
  ctx = interpreter.Context(graph_lib.Library(gd.library.function), {})
  return interpreter.run(ctx, g, dict(zip(g.inputs, map(jnp.asarray, args))))


def _assert_same(got, want, rtol=0.0):
  got, want = [np.asarray(g) for g in got], [np.asarray(w) for w in tf.nest.flatten(want)]
  assert len(got) == len(want)
  for g, w in zip(got, want):
    assert g.shape == w.shape and g.dtype == w.dtype, (g, w)
    if rtol and w.dtype.kind == "f":
      np.testing.assert_allclose(g, w, rtol=rtol)
    else:
      np.testing.assert_array_equal(g, w)


# --- padded NMS (static shapes) -----------------------------------------------------------


@tf.function
def _padded_postprocess(boxes, scores):
  idx, n = tf.raw_ops.NonMaxSuppressionV4(
    boxes=boxes,
    scores=scores,
    max_output_size=6,
    iou_threshold=0.4,
    score_threshold=0.2,
    pad_to_max_output_size=True,
  )
  valid = tf.cast(tf.range(6) < n, F32)
  soft_idx, soft_scores, soft_n = tf.raw_ops.NonMaxSuppressionV5(
    boxes=boxes,
    scores=scores,
    max_output_size=8,
    iou_threshold=1.0,
    score_threshold=0.05,
    soft_nms_sigma=0.5,
    pad_to_max_output_size=True,
  )
  return idx, n, tf.gather(boxes, idx) * valid[:, None], soft_idx, soft_scores, soft_n


def test_padded_nms_postprocessing_matches_tf_under_jit_and_vmap():
  spec = (tf.TensorSpec([12, 4], F32), tf.TensorSpec([12], F32))
  fn = tfprims.convert_functional(_padded_postprocess, *spec)
  jitted = jax.jit(fn)
  suppressed = []
  for seed in range(6):
    b, s = _detections(seed)
    want = _padded_postprocess(b, s)
    suppressed.append(int(want[1]) < min(6, int(np.sum(s > 0.2))))
    _assert_same(jitted(b, s), want, rtol=1e-6)
  assert any(suppressed)  # clustered boxes: NMS did suppress
  jaxpr = str(jax.make_jaxpr(fn)(b, s))
  assert "tf.NonMaxSuppressionV4[" in jaxpr and "tf.NonMaxSuppressionV5[" in jaxpr
  assert "max_output_size=6" in jaxpr and "max_output_size=8" in jaxpr
  bs, ss = map(np.stack, zip(*[_detections(seed) for seed in range(10, 13)]))
  batched = jax.vmap(fn)(bs, ss)
  for i in range(3):
    _assert_same([o[i] for o in batched], _padded_postprocess(bs[i], ss[i]), rtol=1e-6)


def test_padded_nms_needs_a_static_max_output_size():
  @tf.function
  def f(boxes, scores, m):
    return tf.raw_ops.NonMaxSuppressionV4(
      boxes=boxes,
      scores=scores,
      max_output_size=m,
      iou_threshold=0.5,
      score_threshold=0.0,
      pad_to_max_output_size=True,
    )

  fn = tfprims.convert_functional(
    f, tf.TensorSpec([4, 4], F32), tf.TensorSpec([4], F32), tf.TensorSpec([], tf.int32)
  )
  b, s = _detections(0, 4)
  with pytest.raises(tfprims.errors.StaticInputError, match="max_output_size"):
    jax.jit(fn)(b, s, np.int32(2))


# --- combined NMS -----------------------------------------------------------------------


@tf.function
def _combined_postprocess(boxes, logits):
  return tf.image.combined_non_max_suppression(
    boxes,
    tf.sigmoid(logits),
    max_output_size_per_class=4,
    max_total_size=7,
    iou_threshold=0.45,
    score_threshold=0.3,
    clip_boxes=True,
  )


def _combined_inputs(seed, batch=2, n=10, classes=3):
  rng = np.random.default_rng(seed)
  boxes = np.stack([_detections(seed * 10 + i, n)[0] for i in range(batch)])
  boxes = (boxes - 0.5) * 1.3 + 0.5  # some boxes leave [0, 1]: clip_boxes matters
  logits = rng.permutation(batch * n * classes).reshape(batch, n, classes) / 10.0 - 2.0
  return boxes[:, :, None, :].astype(np.float32), logits.astype(np.float32)


def test_combined_nms_postprocessing_matches_tf_under_jit_vmap_and_grad():
  b, l = _combined_inputs(0)
  fn = tfprims.convert_functional(
    _combined_postprocess, tf.TensorSpec(b.shape, F32), tf.TensorSpec(l.shape, F32)
  )
  for seed in range(4):
    b, l = _combined_inputs(seed)
    _assert_same(jax.jit(fn)(b, l), _combined_postprocess(b, l), rtol=1e-6)
  stacked = [_combined_inputs(seed) for seed in (5, 6, 7)]
  bs, ls = np.stack([x[0] for x in stacked]), np.stack([x[1] for x in stacked])
  batched = jax.vmap(fn)(bs, ls)
  for i in range(3):
    _assert_same([o[i] for o in batched], _combined_postprocess(bs[i], ls[i]), rtol=1e-6)
  # Batching folds the vmapped axis into the op's batch: one TF-named op.
  jaxpr = jax.make_jaxpr(jax.vmap(fn))(bs, ls)
  assert "tf.CombinedNonMaxSuppression" in jaxpr_primitives(jaxpr)
  assert "while" not in jaxpr_primitives(jaxpr)
  # TF has no gradient; here the scores output is a gather of the inputs.
  grad = jax.grad(lambda lg: jnp.sum(fn(b, lg)[1]))(l)
  scores = np.asarray(jax.nn.sigmoid(l))
  boxes_out, scores_out, classes_out, valid = (np.asarray(o) for o in fn(b, l))
  expect = np.zeros_like(l)
  for i in range(l.shape[0]):
    for k in range(valid[i]):
      hit = np.argwhere(scores[i] == scores_out[i, k])
      assert len(hit) == 1 and hit[0][1] == classes_out[i, k]
      expect[i, hit[0][0], hit[0][1]] = scores_out[i, k] * (1 - scores_out[i, k])
  np.testing.assert_allclose(grad, expect, rtol=1e-5, atol=1e-7)


# --- data-dependent NMS ----------------------------------------------------------------


def test_non_max_suppression_on_constants_folds_to_tf_indices():
  b, s = _detections(3, 16)

  @tf.function
  def f(x):
    idx = tf.image.non_max_suppression(tf.constant(b), tf.constant(s), 10, iou_threshold=0.3)
    soft_idx, soft_scores = tf.image.non_max_suppression_with_scores(
      tf.constant(b), tf.constant(s), 10, iou_threshold=1.0, score_threshold=0.1, soft_nms_sigma=0.5
    )
    return tf.gather(tf.constant(b), idx) * x, soft_idx, soft_scores * x

  fn = tfprims.convert_functional(f, tf.TensorSpec([], F32))
  want = f(np.float32(2))
  assert 0 < want[0].shape[0] < 10  # something was suppressed
  _assert_same(jax.jit(fn)(np.float32(2)), want, rtol=1e-6)


def test_non_max_suppression_on_traced_boxes_is_refused_naming_the_node():
  def body(boxes, scores):
    return tf.image.non_max_suppression(boxes, scores, 5, iou_threshold=0.5)

  spec = (tf.TensorSpec([6, 4], F32), tf.TensorSpec([6], F32))
  fn = tfprims.convert_functional(tf.function(body), *spec)
  b, s = _detections(1, 6)
  with pytest.raises(tfprims.DynamicShapeError, match="NonMaxSuppressionV3"):
    jax.jit(fn)(b, s)
  with pytest.raises(tfprims.DynamicShapeError, match="NonMaxSuppressionV3 node '.*'"):
    jax.jit(lambda x, y: _run_graph(body, x, y))(b, s)
  # ... but an eager run knows the values: TF's result.
  _assert_same(_run_graph(body, b, s), [body(b, s)])


_UNPADDED = {
  "V1": lambda b, s: tf.raw_ops.NonMaxSuppression(
    boxes=b, scores=s, max_output_size=7, iou_threshold=0.3
  ),
  "V2": lambda b, s: tf.raw_ops.NonMaxSuppressionV2(
    boxes=b, scores=s, max_output_size=7, iou_threshold=np.float32(0.5)
  ),
  "V3": lambda b, s: tf.raw_ops.NonMaxSuppressionV3(
    boxes=b,
    scores=s,
    max_output_size=9,
    iou_threshold=np.float16(0.25),
    score_threshold=np.float16(0.3),
  ),
  "V4": lambda b, s: tf.raw_ops.NonMaxSuppressionV4(
    boxes=b,
    scores=s,
    max_output_size=5,
    iou_threshold=np.float32(0.4),
    score_threshold=np.float32(0.2),
  ),
  "V5": lambda b, s: tf.raw_ops.NonMaxSuppressionV5(
    boxes=b,
    scores=s,
    max_output_size=9,
    iou_threshold=tf.cast(0.6, s.dtype),
    score_threshold=tf.cast(0.1, s.dtype),
    soft_nms_sigma=tf.cast(0.4, s.dtype),
  ),
  "WithOverlaps": lambda b, s: tf.raw_ops.NonMaxSuppressionWithOverlaps(
    overlaps=tf.abs(b[:, :1] - tf.transpose(b[:, :1])),
    scores=s[:],
    max_output_size=9,
    overlap_threshold=0.1,
    score_threshold=0.0,
  ),
}


@pytest.mark.parametrize("name", sorted(_UNPADDED))
def test_data_dependent_nms_ops_on_known_values_match_tf(name):
  body = _UNPADDED[name]
  halves = name not in ("V1", "WithOverlaps")
  for seed in range(8):
    dtype = np.float16 if halves and seed % 2 else np.float32
    b, s = _detections(seed, 10, dtype)
    if seed == 7:  # ties, empty boxes and identical boxes
      b[3:6] = b[2]
      b[6] = [0.5, 0.5, 0.5, 0.9]
      s[4:7] = s[3]
    _assert_same(_run_graph(body, b, s), body(b, s), rtol=1e-3 if dtype == np.float16 else 1e-6)


def test_padded_and_exact_forms_agree_with_tf_on_random_boxes():
  from tfprims.ops.image import nms

  rng = np.random.default_rng(7)
  for trial in range(60):
    dt = (np.float32, np.float16)[trial % 2]
    n = int(rng.integers(0, 9))
    b = rng.choice([0, 0.5, 1, 1.5, 2, 3], (n, 4)).astype(dt)
    s = rng.choice([-1, 0, 0.125, 0.25, 0.5, 0.75, 1], n).astype(dt)
    m, iou, thr, sigma = (
      int(rng.integers(0, 8)),
      dt(rng.choice([0, 0.3, 0.5, 1])),
      dt(rng.choice([-2, 0, 0.2])),
      dt(rng.choice([0, 0.5, 1])),
    )
    want = tf.raw_ops.NonMaxSuppressionV5(
      boxes=b,
      scores=s,
      max_output_size=m,
      iou_threshold=iou,
      score_threshold=thr,
      soft_nms_sigma=sigma,
      pad_to_max_output_size=True,
    )
    got = jax.jit(
      lambda *a: nms.NonMaxSuppressionV5(*a, max_output_size=m, pad_to_max_output_size=True)
    )(b, s, iou, thr, sigma)
    _assert_same(got, want, rtol=1e-3)
    k = int(want[2])
    sel, scores = nms.greedy_nms(nms.iou_matrix(b, np).astype(dt), s, m, iou, thr, sigma)
    _assert_same([sel, scores], [want[0][:k], want[1][:k]], rtol=1e-3)


# --- sample_distorted_bounding_box ------------------------------------------------------

_H, _W = 48, 64
_OBJECT = np.float32([[[0.2, 0.25, 0.7, 0.6]]])


def _crop_fn(**kw):
  @tf.function
  def crop(image, boxes):
    return tf.image.sample_distorted_bounding_box(tf.shape(image), boxes, **kw)

  spec = (tf.TensorSpec([_H, _W, 3], F32), tf.TensorSpec([1, 1, 4], F32))
  return crop, tfprims.convert_functional(crop, *spec)


def _check_crops(begin, size, bbox, *, area_range, ratio_range, covered):
  begin, size, bbox = np.asarray(begin), np.asarray(size), np.asarray(bbox)
  assert (begin[:, 2] == 0).all() and (size[:, 2] == -1).all()
  y, x, h, w = begin[:, 0], begin[:, 1], size[:, 0], size[:, 1]
  assert (y >= 0).all() and (x >= 0).all() and (h >= 1).all() and (w >= 1).all()
  assert (y + h <= _H).all() and (x + w <= _W).all()
  np.testing.assert_allclose(
    bbox[:, 0, 0],
    np.stack([y / _H, x / _W, (y + h) / _H, (x + w) / _W], 1).astype(np.float32),
    rtol=1e-6,
  )
  whole = (h == _H) & (w == _W) & (y == 0) & (x == 0)
  area = h * w / (_H * _W)
  assert (area[~whole] >= area_range[0] - 1e-6).all() and (area <= area_range[1] + 1e-6).all()
  ratio = w / h
  assert (ratio[~whole] >= ratio_range[0] - 0.5 / h[~whole]).all()
  assert (ratio[~whole] <= ratio_range[1] + 0.5 / h[~whole]).all()
  oy0, ox0 = int(_OBJECT[0, 0, 0] * _H), int(_OBJECT[0, 0, 1] * _W)
  oy1, ox1 = int(_OBJECT[0, 0, 2] * _H), int(_OBJECT[0, 0, 3] * _W)
  iy = np.clip(np.minimum(y + h, oy1) - np.maximum(y, oy0), 0, None)
  ix = np.clip(np.minimum(x + w, ox1) - np.maximum(x, ox0), 0, None)
  assert (iy * ix / ((oy1 - oy0) * (ox1 - ox0)) >= covered - 1e-6)[~whole].all()
  return area, ratio


def test_sample_distorted_bounding_box_invariants_and_distribution():
  kw = dict(
    min_object_covered=0.3, aspect_ratio_range=(0.5, 2.0), area_range=(0.1, 1.0), max_attempts=50
  )
  crop, fn = _crop_fn(**kw)
  image = np.zeros((_H, _W, 3), np.float32)
  keys = jax.random.split(jax.random.key(0), 400)
  ours = jax.jit(jax.vmap(lambda k: fn(image, _OBJECT, rng=k)))(keys)
  area, ratio = _check_crops(
    *ours, area_range=kw["area_range"], ratio_range=kw["aspect_ratio_range"], covered=0.3
  )
  theirs = [
    tf.image.stateless_sample_distorted_bounding_box([_H, _W, 3], _OBJECT, seed=[i, 7], **kw)
    for i in range(400)
  ]
  t_area, t_ratio = _check_crops(
    *[np.stack([t[j] for t in theirs]) for j in range(3)],
    area_range=kw["area_range"],
    ratio_range=kw["aspect_ratio_range"],
    covered=0.3,
  )
  assert stats.ks_2samp(area, t_area).pvalue > P_MIN
  assert stats.ks_2samp(ratio, t_ratio).pvalue > P_MIN
  # Different keys give different crops; the same key the same one.
  assert len({tuple(r) for r in np.asarray(ours[0])}) > 50
  # (XLA's CPU division may round the normalised box differently in other programs)
  _assert_same(fn(image, _OBJECT, rng=keys[3]), [o[3] for o in ours], rtol=1e-6)


def test_sample_distorted_bounding_box_falls_back_to_the_image_like_tf():
  # No crop of at most half the image covers the whole object: TF returns the image.
  kw = dict(min_object_covered=1.0, area_range=(0.05, 0.1), max_attempts=20)
  crop, fn = _crop_fn(**kw)
  image = np.zeros((_H, _W, 3), np.float32)
  whole = np.float32([[[0.0, 0.0, 1.0, 1.0]]])
  got = fn(image, whole, rng=jax.random.key(1))
  _assert_same(got, crop(image, whole))
  _assert_same(got, [np.int32([0, 0, 0]), np.int32([_H, _W, -1]), np.float32([[[0, 0, 1, 1]]])])


def test_stateless_sample_distorted_bounding_box_is_a_function_of_the_seed():
  @tf.function
  def crop(seed):
    return tf.image.stateless_sample_distorted_bounding_box(
      [_H, _W, 3], _OBJECT, seed=seed, min_object_covered=0.1, area_range=(0.2, 0.9)
    )

  fn = tfprims.convert_functional(crop, tf.TensorSpec([2], tf.int32))
  seeds = np.int32([[s, 3] for s in range(200)])
  out = jax.jit(jax.vmap(fn))(seeds)
  _check_crops(*out, area_range=(0.2, 0.9), ratio_range=(0.75, 1.33), covered=0.1)
  _assert_same(fn(seeds[5]), [o[5] for o in out], rtol=1e-6)
  _assert_same(jax.jit(fn)(seeds[5]), fn(seeds[5]), rtol=1e-6)
  assert len({tuple(r) for r in np.asarray(out[1])}) > 20


def test_sample_distorted_bounding_box_rejects_boxes_outside_the_unit_square():
  with pytest.raises(tfprims.errors.TFPrimsError, match=r"must be in \[0.0, 1.0\]"):
    _run_graph(
      lambda b: tf.raw_ops.StatelessSampleDistortedBoundingBox(
        image_size=[8, 8, 3], bounding_boxes=b, min_object_covered=0.1, seed=[1, 2]
      ),
      np.float32([[[0.1, 0.1, 1.5, 0.5]]]),
    )


def test_nms_thresholds_tf_rejects_raise_on_known_values():
  b, s = _detections(2, 5)
  with pytest.raises(tfprims.errors.RuntimeCheckError, match=r"iou_threshold must be in \[0, 1\]"):
    _run_graph(
      lambda x, y: tf.raw_ops.NonMaxSuppressionV4(
        boxes=x,
        scores=y,
        max_output_size=3,
        iou_threshold=1.5,
        score_threshold=0.0,
        pad_to_max_output_size=True,
      ),
      b,
      s,
    )
  with pytest.raises(tfprims.errors.RuntimeCheckError, match="soft_nms_sigma"):
    _run_graph(
      lambda x, y: tf.raw_ops.NonMaxSuppressionV5(
        boxes=x,
        scores=y,
        max_output_size=3,
        iou_threshold=0.5,
        score_threshold=0.0,
        soft_nms_sigma=-1.0,
        pad_to_max_output_size=True,
      ),
      b,
      s,
    )
  with pytest.raises(tfprims.errors.OpError, match=r"iou_threshold must be in \[0, 1\]"):
    _run_graph(lambda x, y: tf.image.non_max_suppression(x, y, 3, iou_threshold=-0.5), b, s)


def test_padded_nms_nodes_are_static_for_conversion_checks_and_reports():
  from tfprims import op_report

  @tf.function
  def f(boxes, scores):
    padded = tf.raw_ops.NonMaxSuppressionV4(
      boxes=boxes,
      scores=scores,
      max_output_size=3,
      iou_threshold=0.5,
      score_threshold=0.0,
      pad_to_max_output_size=True,
    )
    return padded[0], tf.image.non_max_suppression(boxes, scores, 3)

  spec = (tf.TensorSpec([4, 4], F32), tf.TensorSpec([4], F32))
  graph_def = f.get_concrete_function(*spec).graph.as_graph_def()
  names = {n.op: n.name for n in graph_def.node}
  report = op_report.report_graph_def(graph_def, [names["NonMaxSuppressionV4"]])
  assert report.ops["NonMaxSuppressionV4"].status == op_report.SUPPORTED
  report = op_report.report_graph_def(graph_def)
  assert report.ops["NonMaxSuppressionV3"].status == op_report.DATA_DEPENDENT
  fn = tfprims.convert_functional(f, *spec)  # the V3 node converts: it runs eagerly
  with pytest.raises(tfprims.DynamicShapeError, match="NonMaxSuppressionV3 node"):
    jax.jit(fn)(*[np.zeros(s.shape, np.float32) for s in spec])


# --- CropAndResize: box edges at exactly 0 and 1 -------------------------------------------

# (image size, crop size): 13 * fl(99 / 13) is 99 exactly, but XLA's rewrite of the division
# by the constant 13 into a multiplication by fl(1 / 13) made it 99.00001, outside the
# image; (14, 4) with y1 = 0.1 is where CropAndResizeGradBoxes' own scale arithmetic
# ((y2 - y1) * ((h - 1) / (ch - 1))) puts the last row outside and CropAndResize's keeps it.
_EDGE_SIZES = [(100, 14), (100, 31), (224, 31), (14, 4)]
_EDGE_BOXES = np.array(
  [[0, 0, 1, 1], [1, 1, 0, 0], [0.1, 0.1, 1, 1], [0.25, 0, 1, 0.75]], np.float32
)


@pytest.mark.parametrize("method", ["bilinear", "nearest"])
@pytest.mark.parametrize("size, crop", _EDGE_SIZES)
def test_crop_and_resize_box_edges_at_one_sample_the_last_pixel_like_tf(size, crop, method):
  """The crops (eager and jit) and TF's gradient program (CropAndResizeGradImage and
  CropAndResizeGradBoxes, converted) and jax.grad of the converted crop agree with TF
  on boxes with edges at exactly 0 and 1: the last row/column used to be extrapolated
  (errors ~0.9)."""
  rng = np.random.default_rng(size + crop)
  image = rng.random((1, size, size, 2), np.float32)
  boxes, ind = _EDGE_BOXES, np.zeros(len(_EDGE_BOXES), np.int32)
  ct = rng.normal(size=(len(boxes), crop, crop, 2)).astype(np.float32)
  specs = (tf.TensorSpec(image.shape, F32), tf.TensorSpec(boxes.shape, F32))

  def crops(i, b):
    return tf.image.crop_and_resize(i, b, ind, [crop, crop], method=method)

  @tf.function
  def grads(i, b):
    with tf.GradientTape() as tape:
      tape.watch([i, b])
      out = crops(i, b)
    return tape.gradient(out, [i, b], output_gradients=tf.constant(ct))

  want = crops(image, boxes)
  fn, params = tfprims.convert(tf.function(crops), *specs)
  rtol = 1e-6 if method == "bilinear" else 0.0  # XLA contracts the lerps into FMAs
  _assert_same([fn(params, image, boxes)[0]], [want], rtol)
  _assert_same([jax.jit(lambda i, b: fn(params, i, b)[0])(image, boxes)], [want], rtol)

  want_grads = [w.numpy() for w in grads(image, boxes)]
  grad_fn, grad_params = tfprims.convert(grads, *specs)
  jaxpr = jax.make_jaxpr(lambda i, b: grad_fn(grad_params, i, b))(image, boxes)
  assert {"tf.CropAndResizeGradImage", "tf.CropAndResizeGradBoxes"} <= jaxpr_primitives(jaxpr)
  ours = jax.jit(lambda i, b: grad_fn(grad_params, i, b)[0])(image, boxes)
  theirs = jax.grad(lambda i, b: jnp.sum(fn(params, i, b)[0] * ct), argnums=(0, 1))
  for got in (ours, jax.jit(theirs)(image, boxes)):
    np.testing.assert_allclose(got[0], want_grads[0], rtol=1e-5, atol=1e-5)
    scale = np.abs(want_grads[1]).max()
    np.testing.assert_allclose(got[1], want_grads[1], rtol=1e-4, atol=1e-5 * scale)


def test_non_max_suppression_padded_runs_under_jit():
  # A tiled TF while loop slicing the boxes at a runtime offset (tf.slice with a
  # runtime begin and a static size).
  rng = np.random.default_rng(0)
  xy = rng.uniform(0, 1, size=(2, 40, 2)).astype(np.float32)
  boxes = np.concatenate([xy, xy + rng.uniform(0.05, 0.3, size=xy.shape).astype(np.float32)], -1)
  scores = rng.uniform(size=(2, 40)).astype(np.float32)

  @tf.function
  def f(b, s):
    return tf.image.non_max_suppression_padded(
      b, s, 10, iou_threshold=0.5, pad_to_max_output_size=True
    )

  fn = tfprims.convert_functional(f, tf.TensorSpec(boxes.shape), tf.TensorSpec(scores.shape))
  want = f(boxes, scores)
  for got in (fn(boxes, scores), jax.jit(fn)(boxes, scores)):
    for g, w in zip(got, want):
      np.testing.assert_array_equal(g, w.numpy())
