"""Every entry point goes through one conversion pipeline (tfprims.pipeline): a graph
with TF1 control flow (Switch/Merge, Enter/Exit/NextIteration) and the same graph
with TF2 control flow (If/While) convert and match TF through each of them."""

import os
import subprocess
import sys

import numpy as np
import pytest
import tensorflow as tf

import tfprims

v1 = tf.compat.v1
F32 = tf.float32
FEEDS = [
  (np.float32([0.5, -1.0, 2.0]), np.bool_(True)),
  (np.float32([0.3, 0.2, -0.7]), np.bool_(False)),
]


def _build(control_flow_v1: bool, with_variable: bool = False) -> tf.Graph:
  """``out = cond(p, sin(x) * 2, x * x + 1) + while(i < 4: a = a * w + cos(a))``."""
  if control_flow_v1:
    v1.disable_control_flow_v2()
  try:
    g = tf.Graph()
    with g.as_default():
      x = v1.placeholder(F32, [3], name="x")
      p = v1.placeholder(tf.bool, [], name="p")
      w = (
        v1.get_variable("w", initializer=np.float32([0.5, 0.25, -0.5]), use_resource=False)
        if with_variable
        else tf.constant([0.5, 0.25, -0.5])
      )
      y = tf.cond(p, lambda: tf.sin(x) * 2.0, lambda: x * x + 1.0)
      _, a = tf.while_loop(
        lambda i, a: i < 4, lambda i, a: (i + 1, a * w + tf.cos(a)), [tf.constant(0), x]
      )
      tf.identity(y + a, name="out")
  finally:
    v1.enable_control_flow_v2()
  ops = {op.type for op in g.get_operations()}
  assert ({"Switch", "Merge", "Enter", "Exit"} <= ops) == control_flow_v1
  return g


def _tf_outputs(g: tf.Graph, init: bool = False) -> list:
  with v1.Session(graph=g) as sess:
    if init:
      sess.run(v1.global_variables_initializer())
    return [sess.run("out:0", {"x:0": x, "p:0": p}) for x, p in FEEDS]


KINDS = {"v1": True, "v2": False}


@pytest.fixture(scope="module", params=sorted(KINDS))
def graph(request):
  g = _build(KINDS[request.param])
  return g, _tf_outputs(g)


def test_convert_graph_def(graph):
  g, want = graph
  fn = tfprims.convert_graph_def(g.as_graph_def(), ["x:0", "p:0"], ["out:0"])
  for (x, p), w in zip(FEEDS, want):
    np.testing.assert_allclose(fn(x, p)[0], w, rtol=1e-6)


def test_load_frozen_graph(graph, tmp_path):
  g, want = graph
  path = str(tmp_path / "model.pb")
  tf.io.write_graph(g.as_graph_def(), str(tmp_path), "model.pb", as_text=False)
  fn = tfprims.load_frozen_graph(path, ["x:0", "p:0"], ["out:0"])
  for (x, p), w in zip(FEEDS, want):
    np.testing.assert_allclose(fn(x, p)[0], w, rtol=1e-6)


def test_compare_graph_def(graph):
  g, _ = graph
  for x, p in FEEDS:
    report = tfprims.compare_graph_def(g.as_graph_def(), ["x:0", "p:0"], ["out:0"], [x, p])
    assert report.ok, report.summary()


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_convert_session(kind):
  g = _build(KINDS[kind], with_variable=True)
  want = _tf_outputs(g, init=True)
  with v1.Session(graph=g) as sess:
    sess.run(v1.global_variables_initializer())
    fn, params = tfprims.convert_session(sess, ["x:0", "p:0"], ["out:0"])
  assert set(params) == {"w"}
  for (x, p), w in zip(FEEDS, want):
    np.testing.assert_allclose(fn(params, x, p)[0][0], w, rtol=1e-6)


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_wrapped_concrete_function_and_tf1_saved_model(kind, tmp_path):
  g = _build(KINDS[kind])
  want = _tf_outputs(g)
  cf = v1.wrap_function(lambda: v1.import_graph_def(g.as_graph_def(), name=""), [])
  cf = cf.prune(["x:0", "p:0"], ["out:0"])
  fn = tfprims.convert_functional(cf)
  for (x, p), w in zip(FEEDS, want):
    np.testing.assert_allclose(fn(x, p)[0], w, rtol=1e-6)  # fetches as a list

  path = str(tmp_path / "saved")
  with v1.Session(graph=g) as sess:
    builder = v1.saved_model.Builder(path)
    sig = v1.saved_model.predict_signature_def(
      {"x": g.get_tensor_by_name("x:0"), "p": g.get_tensor_by_name("p:0")},
      {"out": g.get_tensor_by_name("out:0")},
    )
    builder.add_meta_graph_and_variables(sess, ["serve"], {"serving_default": sig})
    builder.save()
  sm_fn, params = tfprims.load_saved_model(path)
  for (x, p), w in zip(FEEDS, want):
    np.testing.assert_allclose(sm_fn(params, x=x, p=p)[0]["out"], w, rtol=1e-6)
  # The signature called from a tf.function: its TF1 control flow is in a library
  # function's body.
  signature = tf.saved_model.load(path).signatures["serving_default"]
  caller = tf.function(lambda x, p: signature(x=x, p=p)["out"] * 2.0)
  fn = tfprims.convert_functional(caller, tf.TensorSpec([3], F32), tf.TensorSpec([], tf.bool))
  for (x, p), w in zip(FEEDS, want):
    np.testing.assert_allclose(fn(x, p), 2.0 * w, rtol=1e-6)


def test_cli_inspects_a_frozen_graph_with_tf1_control_flow(tmp_path):
  g = _build(control_flow_v1=True)
  tf.io.write_graph(g.as_graph_def(), str(tmp_path), "model.pb", as_text=False)
  env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3", JAX_PLATFORMS="cpu")
  res = subprocess.run(
    [
      sys.executable,
      "-m",
      "tfprims",
      "inspect",
      str(tmp_path / "model.pb"),
      "--inputs",
      "x:0,p:0",
      "--outputs",
      "out:0",
    ],
    capture_output=True,
    text=True,
    env=env,
    timeout=600,
  )
  assert res.returncode == 0, res.stdout + res.stderr
  assert "Traceback" not in res.stderr
  assert "tf.While" in res.stdout or "tf.If" in res.stdout, res.stdout
