"""The clustering ops (tf.compat.v1's k-means building blocks: NearestNeighbors,
KMC2ChainInitialization, KmeansPlusPlusInitialization) in converted functions with traced
inputs, bit for bit against TF; Timestamp and IsTensorFloat32Enabled at run time; and the
"other" ops tfprims refuses with a reason (GetDeadline, CompositeTensorVariant*)."""

import time

import jax
import numpy as np
import pytest
import tensorflow as tf
from tensorflow.python.framework import ops as tf_ops
from tensorflow.python.ops import gen_clustering_ops

import tfprims
from helpers import jaxpr_primitives


def _grid(rs, shape, high=6):
  """Halves of small integers: distances and sums are exact in float32."""
  return (rs.randint(-high, high + 1, shape) / 2).astype(np.float32)


def test_nearest_neighbors_assignment_step_is_tfs():
  """One k-means assignment step: nearest centers (ties to the lower index) and the
  per-cluster means of the assigned points."""
  rs = np.random.RandomState(0)
  points, centers = _grid(rs, (40, 2), 3), _grid(rs, (6, 2), 3)
  centers[4] = centers[1]  # a tied pair: TF keeps the lower index

  @tf.function(autograph=False)
  def step(points, centers):
    idx, dist = gen_clustering_ops.nearest_neighbors(points, centers, 1)
    top3, dist3 = gen_clustering_ops.nearest_neighbors(points, centers, 3)
    assign = idx[:, 0]
    sums = tf.math.unsorted_segment_sum(points, assign, 6)
    counts = tf.math.unsorted_segment_sum(tf.ones_like(dist[:, 0]), assign, 6)
    return idx, dist, top3, dist3, sums / tf.maximum(counts, 1.0)[:, None]

  spec = (tf.TensorSpec([40, 2], tf.float32), tf.TensorSpec([6, 2], tf.float32))
  fn = tfprims.convert_functional(step, *spec)
  ours = jax.jit(fn)(points, centers)
  theirs = step(points, centers)
  for a, b in zip(ours[:4], theirs[:4]):
    np.testing.assert_array_equal(a, b.numpy())
  np.testing.assert_allclose(ours[4], theirs[4].numpy(), rtol=1e-6)  # XLA's division
  assert 4 not in np.asarray(ours[0])
  assert "tf.NearestNeighbors" in jaxpr_primitives(jax.make_jaxpr(fn)(points, centers))


@pytest.mark.parametrize("x64", [True, False])
@pytest.mark.filterwarnings("ignore::tfprims.PrecisionWarning")  # seeds fit in 32 bits
def test_kmc2_chain_is_tfs(x64):
  rs = np.random.RandomState(1)

  @tf.function(autograph=False)
  def chain(distances, seed):
    return gen_clustering_ops.kmc2_chain_initialization(distances, seed)

  with jax.enable_x64(x64):
    fn = tfprims.convert_functional(
      chain, tf.TensorSpec([50], tf.float32), tf.TensorSpec([], tf.int64)
    )
    for seed in [0, 1, 7, -5, 2**20 + 3]:
      d = rs.rand(50).astype(np.float32)
      assert int(jax.jit(fn)(d, np.int64(seed))) == int(chain(d, np.int64(seed)))


@pytest.mark.parametrize("retries", [-1, 0, 2])
def test_kmeans_plus_plus_seeding_is_tfs(retries):
  rs = np.random.RandomState(2)
  points = _grid(rs, (12, 3))
  points[5] = points[2]  # duplicates: zero distances, redraws

  @tf.function(autograph=False)
  def seeding(points, seed):
    return gen_clustering_ops.kmeans_plus_plus_initialization(points, 5, seed, retries)

  with jax.enable_x64(True):
    fn = tfprims.convert_functional(
      seeding, tf.TensorSpec([12, 3], tf.float32), tf.TensorSpec([], tf.int64)
    )
    jitted = jax.jit(fn)
    for seed in [0, 3, 11]:
      np.testing.assert_array_equal(
        jitted(points, np.int64(seed)), seeding(points, np.int64(seed)).numpy()
      )


def test_timestamp_is_read_when_the_program_runs():
  @tf.function(autograph=False)
  def f(x):
    from tensorflow.python.ops import gen_logging_ops

    return gen_logging_ops.timestamp() + tf.cast(x, tf.float64)

  with jax.enable_x64(True):
    fn = jax.jit(tfprims.convert_functional(f, tf.TensorSpec([], tf.float64)))
    before = time.time()
    first = float(fn(np.float64(0)))
    time.sleep(0.05)
    second = float(fn(np.float64(0)))
    after = time.time()
  assert before <= first < second <= after


def test_tensor_float32_is_off_on_cpu():
  @tf.function(autograph=False)
  def f():
    return tf_ops.get_default_graph().create_op("IsTensorFloat32Enabled", [], [tf.bool]).outputs[0]

  fn = tfprims.convert_functional(f)
  assert jax.default_backend() == "cpu" and bool(jax.jit(fn)()) is False
  assert "tf.IsTensorFloat32Enabled" in jaxpr_primitives(jax.make_jaxpr(fn)())


def _graph_op(op_type, inputs, dtypes, **attrs):
  return tf_ops.get_default_graph().create_op(op_type, inputs, dtypes, attrs=attrs).outputs


@pytest.mark.parametrize(
  "op_type,body,hint",
  [
    ("GetDeadline", lambda: _graph_op("GetDeadline", [], [tf.int64])[0], "no such deadline"),
  ],
)
def test_unconvertible_other_ops_say_why(op_type, body, hint):
  with pytest.raises(tfprims.errors.UnsupportedOpError, match=f"(?s){op_type}.*{hint}"):
    tfprims.convert_functional(tf.function(body, autograph=False))


def test_composite_tensor_variants_say_why():
  from tensorflow.python.ops import composite_tensor_ops

  rt = tf.ragged.constant([[1.0], [2.0, 3.0]])

  @tf.function(autograph=False)
  def f():
    v = composite_tensor_ops.composite_tensor_to_variants(rt)
    return composite_tensor_ops.composite_tensor_from_variant(v, rt._type_spec).values

  with pytest.raises(
    tfprims.errors.UnsupportedOpError, match="(?s)CompositeTensorVariant.*component tensors"
  ):
    tfprims.convert_functional(f)
