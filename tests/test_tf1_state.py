"""TF1 graphs: reference variables and their writers, train steps of
tf.compat.v1.train optimizers, frozen .pb files, tfprims.convert_session and
``tfprims inspect`` on a frozen graph.

The graphs are built in TF1 graph mode in a subprocess (tests/tf1_state_build.py:
graph mode is process-global), which also records TF's results.
"""

import os
import subprocess
import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import tensorflow as tf

import tfprims
from tfprims import config, errors, pipeline, tf1

HERE = os.path.dirname(__file__)


@pytest.fixture(scope="session")
def built(tmp_path_factory):
  out = tmp_path_factory.mktemp("tf1_state")
  env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3", JAX_PLATFORMS="cpu")
  proc = subprocess.run(
    [sys.executable, os.path.join(HERE, "tf1_state_build.py"), str(out)],
    capture_output=True,
    text=True,
    env=env,
    timeout=600,
  )
  assert proc.returncode == 0, proc.stderr[-3000:]
  return str(out)


def _session(built, name):
  """A session over the built graph, its variables initialized (the "init" op)."""
  graph_def = tf1.read_graph_def(os.path.join(built, name + ".pb"))
  g = tf.Graph()
  with g.as_default():
    tf.compat.v1.import_graph_def(graph_def, name="")
  sess = tf.compat.v1.Session(graph=g)
  sess.run("init")
  return sess


@pytest.mark.parametrize("opt", ["sgd", "momentum"])
def test_train_steps_match_tf(built, opt):
  ref = np.load(os.path.join(built, f"train_{opt}.npz"))
  sess = _session(built, f"train_{opt}")
  fn, params = tfprims.convert_session(sess, ["x:0", "y:0"], ["loss:0"], targets=["train"])
  names = sorted(ref["names"])
  assert sorted(params) == names
  step = jax.jit(fn)
  for i in range(3):  # chained steps: new_params feed the next one
    (loss,), params = step(params, ref["x"] + i, ref["y"] - i)
    np.testing.assert_allclose(loss, ref[f"loss_{i}"], rtol=1e-6)
    for n in names:
      np.testing.assert_allclose(
        params[n], ref[f"var_{i}/{n}"], rtol=1e-5, atol=1e-6, err_msg=f"step {i}, variable {n}"
      )
  assert int(params["global_step"]) == 3
  # an ensemble: vmap over stacked params takes one step per member
  _, start = tfprims.convert_session(
    _session(built, f"train_{opt}"), ["x", "y"], ["loss"], targets=["train"]
  )
  other = {k: np.asarray(v) + (0.5 if k != "global_step" else 0) for k, v in start.items()}
  stacked = jax.tree_util.tree_map(lambda a, b: np.stack([a, b]), start, other)
  (losses,), new = jax.vmap(fn, in_axes=(0, None, None))(stacked, ref["x"], ref["y"])
  for member, p in enumerate((start, other)):
    (loss,), one = fn(p, ref["x"], ref["y"])
    np.testing.assert_allclose(losses[member], loss, rtol=1e-6)
    for n in names:
      np.testing.assert_allclose(new[n][member], one[n], rtol=1e-6, atol=1e-7)
  jaxpr = str(jax.make_jaxpr(lambda p: fn(p, ref["x"], ref["y"]))(params))
  assert ("tf.ApplyGradientDescent" if opt == "sgd" else "tf.ApplyMomentum") in jaxpr


def test_loss_gradient_wrt_params(built):
  """jax.grad of the converted loss (no train op) is the gradient TF's optimizer applied."""
  ref = np.load(os.path.join(built, "train_sgd.npz"))
  sess = _session(built, "train_sgd")
  fn, params = tfprims.convert_session(sess, ["x", "y"], ["loss"])
  assert sorted(params) == ["b", "w"]  # the loss alone needs no global step
  grads = jax.grad(lambda p: fn(p, ref["x"], ref["y"])[0][0])(params)
  new_w = params["w"] - 0.1 * grads["w"]
  np.testing.assert_allclose(new_w, ref["var_0/w"], rtol=1e-5, atol=1e-6)


def test_state_ops_in_control_dependency_order(built):
  ref = np.load(os.path.join(built, "state_ops.npz"))
  sess = _session(built, "state_ops")
  fetches = list(ref["fetches"])
  fn, params = tfprims.convert_session(sess, ["x"], fetches)
  ops = {n.op for n in sess.graph.as_graph_def().node}
  assert {
    "Assign",
    "AssignAdd",
    "AssignSub",
    "ScatterUpdate",
    "ScatterNdAdd",
    "ScatterAdd",
    "ScatterMul",
    "StridedSliceAssign",
    "CountUpTo",
  } <= ops
  for i, run in enumerate([fn, jax.jit(fn)]):  # the second run continues from the first
    outs, params = run(params, ref["x"] + i)
    for f, o in zip(fetches, outs):
      np.testing.assert_allclose(o, ref[f"run{i}/{f}"], err_msg=f"run {i}: {f}")
    for n in ("v", "m", "c"):
      np.testing.assert_allclose(params[n], ref[f"run{i}/var/{n}"], err_msg=f"run {i}: {n}")
  jaxpr = str(jax.make_jaxpr(lambda p, x: fn(p, x))(params, ref["x"]))
  for name in (
    "tf.ResourceScatterUpdate",
    "tf.ResourceScatterNdAdd",
    "tf.ResourceScatterAdd",
    "tf.ResourceScatterMul",
    "tf.ResourceStridedSliceAssign",
  ):
    assert name in jaxpr


def test_count_up_to_raises_at_its_limit(built):
  sess = _session(built, "state_ops")
  fn, params = tfprims.convert_session(sess, ["x"], ["cnt:0"])
  params = dict(params, c=np.int32(2))  # the limit
  with pytest.raises(errors.RuntimeCheckError, match="Reached limit of 2"):
    fn(params, np.zeros(5, np.float32))
  # under jit (no runtime checks) the variable stays at its limit
  (out,), new = jax.jit(fn)(params, np.zeros(5, np.float32))
  assert int(out) == 2 and int(new["c"]) == 2


def _graph(build):
  g = tf.Graph()
  with g.as_default():
    build()
  return g.as_graph_def()


def _run_graph(graph_def, inputs, outputs, params, *args, targets=()):
  prepared = pipeline.prepare(
    graph_def, inputs, outputs, options=config.read_at_conversion(), control_outputs=list(targets)
  )
  pspecs = {k: tfprims.TensorSpec(k, np.shape(v), np.asarray(v).dtype) for k, v in params.items()}
  fn = tf1.GraphFunction(
    prepared.graph, prepared.library, list(prepared.input_specs), [], pspecs, None
  )
  return fn(params, *args)


def test_session_built_in_process_trainable_flags():
  g = tf.Graph()
  with g.as_default():
    x = tf.compat.v1.placeholder(tf.float32, [2], name="x")
    w = tf.compat.v1.get_variable("w", initializer=np.float32([1.0, 2.0]), use_resource=False)
    s = tf.compat.v1.get_variable(
      "s", initializer=np.float32(3.0), use_resource=False, trainable=False
    )
    r = tf.compat.v1.get_variable("r", initializer=np.float32([0.5, 0.5]), use_resource=True)
    up = tf.compat.v1.assign_add(s, tf.reduce_sum(x * w), name="up")
    with tf.control_dependencies([up]):
      y = tf.identity(x * s + r.read_value(), name="y")
    sess = tf.compat.v1.Session(graph=g)
    sess.run(tf.compat.v1.global_variables_initializer())
  g.finalize()  # as tf.compat.v1.train.MonitoredSession leaves it: nothing may be added
  fn, params = tfprims.convert_session(sess, ["x"], ["y"])
  assert fn.param_specs["w"].trainable and fn.param_specs["r"].trainable
  assert fn.param_specs["s"].trainable is False
  xv = np.float32([1.0, -1.0])
  (out,), new = fn(params, xv)
  np.testing.assert_allclose(out, sess.run(y, {x: xv}))
  np.testing.assert_allclose(new["s"], sess.run(s))


def test_assign_validates_shape_and_temporary_variables():
  def build():
    v = tf.raw_ops.VariableV2(shape=[2], dtype=tf.float32, name="v")
    p = tf.compat.v1.placeholder(tf.float32, [None], name="p")  # TF checks known shapes
    tf.raw_ops.Assign(ref=v, value=p, validate_shape=True, name="bad")
    tf.raw_ops.Assign(ref=v, value=tf.ones([3]), validate_shape=False, name="reshape")
    t = tf.raw_ops.TemporaryVariable(shape=[2], dtype=tf.float32, name="tmp")
    a = tf.raw_ops.AssignAdd(ref=t, value=tf.constant([1.0, 2.0]))
    with tf.control_dependencies([a]):
      tf.raw_ops.DestroyTemporaryVariable(
        ref=tf.raw_ops.RefIdentity(input=t), var_name="tmp", name="final"
      )

  gd = _graph(build)
  params = {"v": np.zeros(2, np.float32)}
  with pytest.raises(errors.OpError, match="Assign requires shapes of both tensors to match"):
    _run_graph(gd, ["p"], ["bad"], params, np.zeros(3, np.float32))
  (out,), _ = _run_graph(gd, ["p"], ["bad"], params, np.float32([4.0, 5.0]))
  np.testing.assert_array_equal(out, [4.0, 5.0])
  (out,), new = _run_graph(gd, [], ["reshape"], params)
  np.testing.assert_array_equal(out, np.ones(3))
  np.testing.assert_array_equal(new["v"], np.ones(3))
  (final,), new = _run_graph(gd, [], ["final"], params)
  np.testing.assert_array_equal(final, [1.0, 2.0])
  assert set(new) == {"v"}  # a temporary variable is no param


def test_ref_select_and_resource_count_up_to():
  def build():
    a = tf.raw_ops.VariableV2(shape=[2], dtype=tf.float32, name="a")
    b = tf.raw_ops.VariableV2(shape=[2], dtype=tf.float32, name="b")
    sel = tf.raw_ops.RefSelect(index=1, inputs=[a, b])
    tf.raw_ops.Assign(ref=sel, value=tf.constant([5.0, 6.0]), name="write")

  gd = _graph(build)
  params = {"a": np.zeros(2, np.float32), "b": np.zeros(2, np.float32)}
  (out,), new = _run_graph(gd, [], ["write"], params)
  np.testing.assert_array_equal(new["b"], [5.0, 6.0])
  np.testing.assert_array_equal(new["a"], [0.0, 0.0])

  v = tf.Variable(3)

  @tf.function
  def count():
    return tf.raw_ops.ResourceCountUpTo(resource=v.handle, limit=5, T=tf.int32)

  fn, params = tfprims.convert(count)
  (key,) = params
  out, new = fn(params)
  assert int(out) == int(count()) == 3
  assert int(new[key]) == int(v.numpy()) == 4


@pytest.mark.parametrize("ext", ["pb", "pbtxt"])
def test_frozen_mobilenet(built, ext):
  ref = np.load(os.path.join(built, "mobilenet.npz"))
  fn = tfprims.load_frozen_graph(
    os.path.join(built, f"mobilenet.{ext}"), inputs=["images:0"], outputs=["probs:0"]
  )
  ops = {n.op for n in fn.graph_def.node}
  assert {
    "Conv2D",
    "DepthwiseConv2dNative",
    "FusedBatchNormV3",
    "Relu6",
    "AvgPool",
    "MatMul",
    "Softmax",
  } <= ops and "VariableV2" not in ops
  (probs,) = jax.jit(fn)(ref["images"])
  np.testing.assert_allclose(probs, ref["probs"], rtol=1e-5, atol=1e-6)
  grad = jax.grad(lambda x: jnp.sum(fn(x)[0] * ref["r"]))(ref["images"])
  np.testing.assert_allclose(grad, ref["grad"], rtol=1e-4, atol=1e-7)
  per_example = jax.vmap(lambda x: fn(x[None])[0][0])(ref["images"])
  np.testing.assert_allclose(per_example, ref["probs"], rtol=1e-5, atol=1e-6)
  jaxpr = str(jax.make_jaxpr(jax.grad(lambda x: jnp.sum(fn(x)[0])))(ref["images"]))
  assert "tf.Conv2DBackpropInput" in jaxpr and "tf.DepthwiseConv2dNativeBackpropInput" in jaxpr


def test_read_graph_def_errors(tmp_path):
  bad = tmp_path / "bad.pb"
  bad.write_bytes(b"\xff\x00not a graph")
  with pytest.raises(errors.ConversionError, match="is not a GraphDef file"):
    tf1.read_graph_def(str(bad))
  with pytest.raises(errors.ConversionError, match="no GraphDef file"):
    tf1.read_graph_def(str(tmp_path / "missing.pb"))


def test_variable_without_param_is_named():
  def build():
    v = tf.raw_ops.VariableV2(shape=[2], dtype=tf.float32, name="v")
    tf.identity(v, name="out")

  fn = tfprims.convert_graph_def(_graph(build), [], ["out"])
  with pytest.raises(errors.ConversionError, match="convert_session"):
    fn()


@pytest.mark.parametrize("ext", ["pb", "pbtxt"])
def test_cli_inspect_frozen_graph(built, ext):
  env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3", JAX_PLATFORMS="cpu")
  path = os.path.join(built, f"mobilenet.{ext}")
  proc = subprocess.run(
    [
      sys.executable,
      "-m",
      "tfprims",
      "inspect",
      path,
      "--inputs",
      "images:0",
      "--outputs",
      "probs:0",
    ],
    capture_output=True,
    text=True,
    env=env,
    timeout=300,
  )
  assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
  assert "frozen graph" in proc.stdout and "DepthwiseConv2dNative" in proc.stdout
  assert "OK: within" in proc.stdout
  proc = subprocess.run(
    [sys.executable, "-m", "tfprims", "inspect", path],
    capture_output=True,
    text=True,
    env=env,
    timeout=300,
  )
  assert proc.returncode == 2 and "--inputs and --outputs" in proc.stderr
