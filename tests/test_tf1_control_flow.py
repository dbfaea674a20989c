"""TF1 (v1) control flow: graphs built with tf.compat.v1 and control flow v2
disabled (in a subprocess: tests/tf1_control_flow_graphs.py), converted with
tfprims.convert_graph_def and compared with TF's Session results: outputs (eager
and jit), jax.grad vs tf.gradients, jax.vmap vs per-example calls, jaxprs, and
typed errors for malformed frames and conds."""

import json
import os
import subprocess
import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import tfprims
from tfprims import errors
from helpers import jaxpr_primitives

HERE = os.path.dirname(os.path.abspath(__file__))
CASES = [
  "cond",
  "nested_cond",
  "cond_in_while",
  "data_dependent_while",
  "nested_while",
  "while_in_cond",
  "tensor_array",
  "dynamic_rnn_basic",
  "dynamic_rnn_lstm",
]
GRAD_CASES = [c for c in CASES if c != "data_dependent_while"]


@pytest.fixture(scope="session")
def built(tmp_path_factory):
  """Every case's GraphDef and TF results, built by one subprocess."""
  out = tmp_path_factory.mktemp("tf1_graphs")
  env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3", CUDA_VISIBLE_DEVICES="")
  subprocess.run(
    [sys.executable, os.path.join(HERE, "tf1_control_flow_graphs.py"), str(out)],
    check=True,
    env=env,
    capture_output=True,
  )
  with open(out / "cases.json") as f:
    meta = json.load(f)
  return out, meta


def _load(built, name):
  from tensorflow.core.framework import graph_pb2

  out, meta = built
  gd = graph_pb2.GraphDef()
  gd.ParseFromString((out / f"{name}.pb").read_bytes())
  arrays = dict(np.load(out / f"{name}.npz"))
  return gd, meta[name], arrays


def _feeds(m, arrays):
  for k in range(m["n_feeds"]):
    args = [arrays[f"{k}/in/{i.split(':')[0]}"] for i in m["inputs"]]
    expected = [arrays[f"{k}/out/{j}"] for j in range(len(m["outputs"]))]
    grads = [arrays[f"{k}/out/{len(m['outputs']) + j}"] for j in range(len(m["wrt"]))]
    yield args, expected, grads


@pytest.mark.parametrize("name", CASES)
def test_outputs_match_tf(built, name):
  gd, m, arrays = _load(built, name)
  fn = tfprims.convert_graph_def(gd, m["inputs"], m["outputs"])
  jitted = jax.jit(fn)
  for args, expected, _ in _feeds(m, arrays):
    for outs in (fn(*args), jitted(*args)):
      for o, e in zip(outs, expected):
        np.testing.assert_allclose(o, e, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("name", GRAD_CASES)
def test_grad_matches_tf_gradients(built, name):
  gd, m, arrays = _load(built, name)
  fn = tfprims.convert_graph_def(gd, m["inputs"], m["outputs"])
  assert m["wrt"] == [m["inputs"][0].split(":")[0]]
  for args, _, grads in _feeds(m, arrays):
    g = jax.grad(lambda x: jnp.sum(fn(x, *args[1:])[0]))(args[0])
    np.testing.assert_allclose(g, grads[0], rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("name", CASES)
def test_vmap_matches_per_example(built, name):
  gd, m, arrays = _load(built, name)
  fn = tfprims.convert_graph_def(gd, m["inputs"], m["outputs"])
  args, _, _ = next(_feeds(m, arrays))
  xs = np.stack([args[0], args[0] * 0.5 + 0.25, -args[0]]).astype(args[0].dtype)
  batched = jax.vmap(lambda x: fn(x, *args[1:]))(xs)
  for b in range(len(xs)):
    for o, one in zip(batched, fn(xs[b], *args[1:])):
      np.testing.assert_allclose(o[b], one, rtol=1e-5, atol=1e-6)


def test_cond_with_traced_predicate_is_lax_cond(built):
  gd, m, arrays = _load(built, "cond")
  fn = tfprims.convert_graph_def(gd, m["inputs"], m["outputs"])
  x = np.asarray([0.5, -1.0, 2.0], np.float32)
  jaxpr = jax.make_jaxpr(fn)(x, np.asarray(True))
  prims = jaxpr_primitives(jaxpr)
  assert "cond" in prims and {"tf.Sin", "tf.Mul", "tf.AddV2"} <= prims
  jitted = jax.jit(fn)
  for args, expected, _ in _feeds(m, arrays):
    np.testing.assert_allclose(jitted(*args)[0], expected[0], rtol=1e-6)
  # vmap over the predicate: both branches, selected per example
  ps = np.asarray([True, False])
  out = jax.vmap(lambda p: fn(x, p)[0])(ps)
  for b, p in enumerate(ps):
    np.testing.assert_allclose(out[b], fn(x, p)[0], rtol=1e-6)


def test_constants_without_pivot_edges(built):
  """Optimizers drop the control edges that put constants in a loop or branch (a
  Merge of two such constants cannot be told apart from two live values: refused)."""
  for name in ("cond_in_while", "cond", "nested_while"):
    gd, m, arrays = _load(built, name)
    for node in gd.node:
      if node.op == "Const":
        node.input[:] = []
    fn = tfprims.convert_graph_def(gd, m["inputs"], m["outputs"])
    for args, expected, _ in _feeds(m, arrays):
      np.testing.assert_allclose(fn(*args)[0], expected[0], rtol=1e-5, atol=1e-6)


def test_known_predicate_runs_the_taken_branch_inline(built):
  import tensorflow as tf

  gd, m, arrays = _load(built, "cond")
  p = _node(gd, "p")
  p.op = "Const"
  p.attr["value"].tensor.CopyFrom(tf.make_tensor_proto(False))
  for key in ("shape",):
    del p.attr[key]
  fn = tfprims.convert_graph_def(gd, ["x:0"], m["outputs"])
  x = np.asarray([0.5, -1.0, 2.0], np.float32)
  prims = jaxpr_primitives(jax.make_jaxpr(fn)(x))
  assert "cond" not in prims and "tf.Sin" not in prims and "tf.AddV2" in prims
  np.testing.assert_allclose(fn(x)[0], x * x + 1.0, rtol=1e-6)


def test_loops_choose_scan_or_while_like_tf2(built):
  gd, m, _ = _load(built, "cond_in_while")
  fn = tfprims.convert_graph_def(gd, m["inputs"], m["outputs"])
  prims = jaxpr_primitives(jax.make_jaxpr(fn)(np.zeros(3, np.float32)))
  assert "tf.While" in prims and "cond" in prims and "while" not in prims
  assert "tf.Cos" in prims

  gd, m, arrays = _load(built, "data_dependent_while")
  fn = tfprims.convert_graph_def(gd, m["inputs"], m["outputs"])
  x = np.asarray([0.1, 0.2, 0.3], np.float32)
  assert "tf.While.unbounded" in jaxpr_primitives(jax.make_jaxpr(fn)(x))
  # forward and reverse mode through a data-dependent loop
  _, t = jax.jvp(lambda x: fn(x)[0], (x,), (np.ones(3, np.float32),))
  eps = 1e-3
  fd = (fn(x + eps)[0] - fn(x - eps)[0]) / (2 * eps)
  np.testing.assert_allclose(t, fd, rtol=1e-2)
  g = jax.grad(lambda x: jnp.sum(fn(x)[0]))(x)
  np.testing.assert_allclose(jnp.sum(g), jnp.sum(t), rtol=1e-5)  # <grad, 1> = jvp(1)


def test_tensor_arrays_bind_tensorlist_primitives(built):
  gd, m, _ = _load(built, "dynamic_rnn_lstm")
  fn = tfprims.convert_graph_def(gd, m["inputs"], m["outputs"])
  prims = jaxpr_primitives(jax.make_jaxpr(fn)(np.zeros((2, 4, 3), np.float32)))
  assert {"tf.While", "tf.TensorListGetItem", "tf.TensorListSetItem", "tf.MatMul"} <= prims


def test_unsupported_ops_are_all_listed(built):
  gd, m, _ = _load(built, "unsupported")
  with pytest.raises(errors.UnsupportedOpError) as e:
    tfprims.convert_graph_def(gd, m["inputs"], m["outputs"])
  message = str(e.value)
  for op in ("StackV2", "StackPushV2", "TensorArrayConcatV3"):
    assert op in message


# --- malformed frames and conds ----------------------------------------------------------


def _node(gd, name):
  return next(n for n in gd.node if n.name == name)


def test_merge_without_next_iteration_is_refused(built):
  gd, m, _ = _load(built, "data_dependent_while")
  merge = _node(gd, "dd/Merge_1")
  del merge.input[1]
  with pytest.raises(errors.ConversionError, match="dd/Merge_1.*no NextIteration"):
    tfprims.convert_graph_def(gd, m["inputs"], m["outputs"])


def test_exit_outside_its_frame_is_refused(built):
  gd, m, _ = _load(built, "data_dependent_while")
  bad = gd.node.add()
  bad.CopyFrom(_node(gd, "dd/Exit_1"))
  bad.name = "stray_exit"
  bad.input[:] = ["x"]
  with pytest.raises(errors.ConversionError, match="stray_exit.*outside any while frame"):
    tfprims.convert_graph_def(gd, m["inputs"], ["stray_exit:0"])


def test_next_iteration_outside_a_loop_variable_is_refused(built):
  gd, m, _ = _load(built, "data_dependent_while")
  stray = gd.node.add()
  stray.CopyFrom(_node(gd, "dd/NextIteration_1"))
  stray.name = "stray_next"
  _node(gd, "dd/Exit_1").input.append("^stray_next")
  with pytest.raises(errors.ConversionError, match="stray_next.*feeds no loop variable"):
    tfprims.convert_graph_def(gd, m["inputs"], m["outputs"])


def test_branch_value_read_without_merge_is_refused(built):
  gd, m, _ = _load(built, "cond")
  with pytest.raises(errors.ConversionError, match="c/Sin.*true branch"):
    tfprims.convert_graph_def(gd, m["inputs"], ["c/Sin:0"])


def test_control_trigger_is_a_no_op(built):
  gd, m, arrays = _load(built, "cond")
  assert any(n.op == "ControlTrigger" for n in gd.node)
  fn = tfprims.convert_graph_def(gd, m["inputs"], m["outputs"])
  args, expected, _ = next(_feeds(m, arrays))
  np.testing.assert_allclose(fn(*args)[0], expected[0], rtol=1e-6)
