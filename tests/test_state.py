"""Variables and state: params naming, assignments in new_params, trainable split,
write-back into tf.Variables, ResourceGather, tf.random.Generator state."""

import jax
import jax.numpy as jnp
import keras
import numpy as np
import pytest
import tensorflow as tf

import tfprims
from helpers import jaxpr_primitives


class Counter(tf.Module):
  def __init__(self):
    self.w = tf.Variable([1.0, 2.0, 3.0], name="w")
    self.total = tf.Variable(0.0, trainable=False, name="total")
    self.steps = tf.Variable(10, trainable=False, name="steps")
    self.unused = tf.Variable([[5.0]], name="unused")

  @tf.function(input_signature=[tf.TensorSpec([3])])
  def __call__(self, x):
    y = tf.reduce_sum(self.w * x) + 0.0 * tf.reduce_sum(self.unused)  # read, never assigned
    self.total.assign_add(y)
    self.steps.assign_sub(1)
    self.w.assign(self.w * 0.5)
    return y


def test_assignments_come_back_in_new_params_and_untouched_params_are_kept():
  m = Counter()
  fn, params = tfprims.convert(m.__call__)
  assert set(params) == {"w", "total", "steps", "unused"}
  x = np.array([1.0, 1.0, 2.0], np.float32)
  y, new = fn(params, x)
  assert float(y) == 9.0
  assert set(new) == set(params)
  np.testing.assert_array_equal(new["w"], [0.5, 1.0, 1.5])
  assert float(new["total"]) == 9.0 and int(new["steps"]) == 9
  np.testing.assert_array_equal(new["unused"], [[5.0]])
  # The same step in TF gives the same state.
  m(tf.constant(x))
  for k, v in fn.tf_variables.items():
    np.testing.assert_array_equal(new[k], v.numpy(), err_msg=k)
  # The original params were not modified.
  np.testing.assert_array_equal(params["w"], [1.0, 2.0, 3.0])


def test_state_threads_through_jit_and_repeated_calls():
  m = Counter()
  fn, params = tfprims.convert(m.__call__)
  step = jax.jit(lambda p, x: fn(p, x))
  x = np.ones(3, np.float32)
  p = params
  for _ in range(3):
    _, p = step(p, x)
    m(tf.constant(x))
  for k, v in fn.tf_variables.items():
    np.testing.assert_allclose(p[k], v.numpy(), rtol=1e-6, err_msg=k)


def test_trainable_flags_split_merge_and_names():
  m = Counter()
  fn, params = tfprims.convert(m.__call__)
  assert {k: s.trainable for k, s in fn.param_specs.items()} == {
    "w": True,
    "total": False,
    "steps": False,
    "unused": True,
  }
  assert tfprims.trainable_names(fn) == ["w", "unused"]
  trainable, rest = tfprims.split_trainable(fn, params)
  assert set(trainable) == {"w", "unused"} and set(rest) == {"total", "steps"}
  assert tfprims.merge_params(trainable, rest).keys() == params.keys()
  with pytest.raises(tfprims.InputStructureError, match="given twice"):
    tfprims.merge_params(trainable, trainable)
  # Gradients only for the trainable part.
  grads = jax.grad(lambda t: fn(tfprims.merge_params(t, rest), np.ones(3, np.float32))[0])(
    trainable
  )
  np.testing.assert_array_equal(grads["w"], np.ones(3))
  np.testing.assert_array_equal(grads["unused"], np.zeros((1, 1)))


def test_assign_variables_writes_params_back_into_tf():
  m = Counter()
  fn, params = tfprims.convert(m.__call__)
  x = np.ones(3, np.float32)
  _, new = fn(params, x)
  tfprims.assign_variables(fn, new)
  np.testing.assert_array_equal(m.w.numpy(), [0.5, 1.0, 1.5])
  assert m.steps.numpy() == 9 and m.steps.dtype == tf.int32
  assert float(m(tf.constant(x))) == float(fn(new, x)[0])
  with pytest.raises(tfprims.InputShapeError):
    tfprims.assign_variables(fn, {"w": np.zeros(4, np.float32)})
  with pytest.raises(tfprims.InputStructureError, match="no tf.Variable"):
    tfprims.assign_variables(fn, {"nope": np.zeros(1)})


def test_variable_names_are_unique_and_stable():
  a = tf.Variable(1.0, name="v")
  b = tf.Variable(2.0, name="v")
  c = tf.Variable(3.0, name="v_1")
  f = tf.function(lambda x: x * a + b - c)
  fn1, p1 = tfprims.convert(f, tf.TensorSpec([]))
  fn2, p2 = tfprims.convert(f, tf.TensorSpec([]))
  assert list(p1) == list(p2)
  assert set(p1) == {"v", "v_1", "v_2"}  # "v_1" is taken by c
  assert {float(v) for v in p1.values()} == {1.0, 2.0, 3.0}
  for k in p1:
    assert float(p1[k]) == float(fn1.tf_variables[k].numpy())


def test_convert_functional_refuses_variables():
  v = tf.Variable(1.0, name="scale")
  with pytest.raises(tfprims.ConversionError, match="captures variable 'scale'.*tfprims.convert"):
    tfprims.convert_functional(tf.function(lambda x: x * v), tf.TensorSpec([]))


def test_params_errors():
  m = Counter()
  fn, params = tfprims.convert(m.__call__)
  x = np.ones(3, np.float32)
  with pytest.raises(tfprims.InputStructureError, match="missing"):
    fn({k: v for k, v in params.items() if k != "w"}, x)
  with pytest.raises(tfprims.InputShapeError):
    fn(dict(params, w=np.ones(4, np.float32)), x)


# --- ResourceGather -------------------------------------------------------------------


@pytest.mark.parametrize("batch_dims", [0, 1])
def test_resource_gather_values_and_grad_match_tf(batch_dims):
  rng = np.random.default_rng(0)
  table = tf.Variable(rng.normal(size=(3, 5, 2)).astype(np.float32), name="table")
  if batch_dims == 0:
    idx = np.array([[0, 2], [1, 1]], np.int32)
  else:
    idx = np.array([[0, 4, 4], [1, 2, 3], [0, 0, 1]], np.int32)

  @tf.function
  def f(i):
    table.value()  # marks the variable as used (sparse_read has no batch_dims)
    return tf.raw_ops.ResourceGather(
      resource=table.handle, indices=i, batch_dims=batch_dims, dtype=tf.float32
    )

  fn, params = tfprims.convert(f, tf.TensorSpec(idx.shape, tf.int32))
  jaxpr = jax.make_jaxpr(lambda p: fn(p, idx)[0])(params)
  assert f"tf.ResourceGather[batch_dims={batch_dims}]" in str(jaxpr)
  out = fn(params, idx)[0]
  np.testing.assert_array_equal(out, f(idx).numpy())
  np.testing.assert_array_equal(jax.jit(lambda p: fn(p, idx)[0])(params), out)

  w = rng.normal(size=out.shape).astype(np.float32)
  g = jax.grad(lambda p: jnp.sum(fn(p, idx)[0] * w))(params)["table"]
  with tf.GradientTape() as tape:
    # TF's own ResourceGather gradient fails for batch_dims > 0 (a Reshape error in
    # _GatherGrad); the dense gather of the variable's value is the same function.
    loss = tf.reduce_sum(tf.gather(table.value(), idx, axis=batch_dims, batch_dims=batch_dims) * w)
  tg = tf.convert_to_tensor(tape.gradient(loss, table))
  np.testing.assert_allclose(g, tg, rtol=1e-6, atol=1e-6)
  # The gradient goes through TF-named primitives only (plus JAX's add_any).
  grad_jaxpr = jax.make_jaxpr(jax.grad(lambda p: jnp.sum(fn(p, idx)[0] * w)))(params)
  assert "tf.ResourceGather" in str(grad_jaxpr)


def test_resource_gather_vmap_over_indices():
  table = tf.Variable(np.arange(12, dtype=np.float32).reshape(6, 2))
  f = tf.function(lambda i: tf.nn.embedding_lookup(table, i))
  fn, params = tfprims.convert(f, tf.TensorSpec([3], tf.int32))
  idx = np.array([[0, 1, 2], [5, 4, 3]], np.int32)
  out = jax.vmap(lambda i: fn(params, i)[0])(idx)
  np.testing.assert_array_equal(out, np.stack([f(i).numpy() for i in idx]))


def test_keras_embedding_end_to_end():
  keras.utils.set_random_seed(0)
  model = keras.Sequential(
    [
      keras.Input((4,), dtype="int32"),
      keras.layers.Embedding(10, 3),
      keras.layers.Flatten(),
      keras.layers.Dense(2),
    ]
  )
  f = tf.function(lambda x: model(x))
  fn, params = tfprims.convert(f, tf.TensorSpec([None, 4], tf.int32))
  x = np.array([[1, 2, 3, 9], [0, 0, 5, 5]], np.int32)
  np.testing.assert_allclose(fn(params, x)[0], f(x).numpy(), rtol=1e-5, atol=1e-6)
  emb = [k for k in params if "embeddings" in k][0]
  g = jax.grad(lambda p: jnp.sum(fn(p, x)[0] ** 2))(params)[emb]
  with tf.GradientTape() as tape:
    loss = tf.reduce_sum(f(x) ** 2)
  tg = tf.convert_to_tensor(tape.gradient(loss, fn.tf_variables[emb]))
  np.testing.assert_allclose(g, tg, rtol=1e-5, atol=1e-6)


def test_resource_gather_property_runner():
  from tfprims.testing import runner

  report = runner.check_op("ResourceGather", max_examples=8)
  assert not report.failed


# --- tf.random.Generator ----------------------------------------------------------------


@pytest.mark.skipif(
  "Bitcast" not in tfprims.registered_ops(),
  reason="tf.random.Generator needs the Bitcast op (array family)",
)
def test_random_generator_state_advances_as_tf():
  gen = tf.random.Generator.from_seed(3)

  @tf.function
  def f():
    return gen.uniform([1000]), gen.normal([4])

  fn, params = tfprims.convert(f)
  (u, n), new = fn(params)
  f()
  key = next(iter(params))
  np.testing.assert_array_equal(new[key], gen.state.numpy())
  assert 0 <= float(u.min()) and float(u.max()) < 1 and abs(float(u.mean()) - 0.5) < 0.05
  (u2, _), _ = fn(new)
  assert not np.array_equal(u, u2)
  # Same state, same numbers (stateless ops underneath: no rng= needed).
  np.testing.assert_array_equal(fn(params)[0][0], u)


def test_is_initialized_and_primitives_in_jaxpr():
  v = tf.Variable([1.0, 2.0])

  @tf.function
  def f(x):
    return x * v + tf.cast(tf.raw_ops.VarIsInitializedOp(resource=v.handle), tf.float32)

  fn, params = tfprims.convert(f, tf.TensorSpec([2]))
  np.testing.assert_array_equal(fn(params, np.ones(2, np.float32))[0], [2.0, 3.0])
  prims = jaxpr_primitives(jax.make_jaxpr(lambda p: fn(p, np.ones(2, np.float32))[0])(params))
  assert prims <= {"tf.Mul", "tf.AddV2", "tf.Cast"}
