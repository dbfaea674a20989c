"""``tfprims ops``: what a model asks of tfprims, found without converting it."""

import json
import os

os.environ.setdefault("JAX_PLATFORMS", "cpu")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import numpy as np
import pytest
import tensorflow as tf
from tensorflow.python.framework import ops as tf_ops

import tfprims
from tfprims import cli, op_report


def run(capsys, *argv):
  code = cli.main(list(argv))
  captured = capsys.readouterr()
  return code, captured.out, captured.err


def _deadline():
  """A GetDeadline node (not in tf.raw_ops)."""
  return tf_ops.get_default_graph().create_op("GetDeadline", [], [tf.int64]).outputs[0]


class _Mixed(tf.Module):
  """Supported ops, a data-dependent one, and an unsupported op at top level and in a
  nested function (GetDeadline: a converted function has no deadline)."""

  def __init__(self):
    super().__init__()
    self.w = tf.Variable(np.ones((2, 2), np.float32))

  @tf.function
  def nested(self, x):
    return tf.cast(_deadline(), tf.float32)

  @tf.function(input_signature=[tf.TensorSpec([None, 2], tf.float32, name="x")])
  def __call__(self, x):
    near = _deadline()
    return {
      "y": tf.matmul(x, self.w) + self.nested(x),
      "near": near,
      "u": tf.unique(tf.reshape(x, [-1])).y,
    }


class _Dense(tf.Module):
  def __init__(self):
    super().__init__()
    self.w = tf.Variable(np.ones((3, 4), np.float32))

  @tf.function(input_signature=[tf.TensorSpec([None, 3], tf.float32)])
  def __call__(self, x):
    return tf.nn.relu(tf.matmul(x, self.w))


class _StringInput(tf.Module):
  @tf.function(input_signature=[tf.TensorSpec([None], tf.float32)])
  def __call__(self, x):
    return tf.identity(tf.strings.as_string(x))


@pytest.fixture(scope="module")
def mixed(tmp_path_factory):
  path = str(tmp_path_factory.mktemp("mixed"))
  tf.saved_model.save(_Mixed(), path)
  return path


def test_unsupported_ops_listed_with_nodes_exit_1(capsys, mixed):
  code, out, err = run(capsys, "ops", mixed)
  assert code == 1, err
  assert "Traceback" not in err
  unsupported = out[out.index("unsupported (1):") : out.index("data-dependent")]
  assert "GetDeadline" in unsupported and "x2" in unsupported
  assert "data-dependent (1):" in out and "Unique" in out
  assert "verdict: does not convert" in out
  # Conversion agrees: the same op types block it.
  with pytest.raises(tfprims.BlockedConversionError) as info:
    tfprims.load_saved_model(mixed)
  assert set(info.value.ops) == {"GetDeadline"}


def test_json_report_names_every_node_and_function(capsys, mixed):
  code, out, _ = run(capsys, "ops", mixed, "--json")
  assert code == 1
  data = json.loads(out)
  assert data["convertible"] is False
  ops = {o["op"]: o for o in data["ops"]}
  nn = ops["GetDeadline"]
  assert nn["status"] == "unsupported" and nn["count"] == 2
  # One at the signature function's top level, one inside the nested tf.function.
  fns = [n.split("/")[0] for n in nn["nodes"]]
  assert len(set(fns)) == 2 and all("__inference" in f for f in fns)
  assert ops["Unique"]["status"] == "data-dependent"
  assert ops["MatMul"]["status"] == "supported" and ops["MatMul"]["dtypes"] == ["float32"]
  # Counts per function add up to the listed nodes (calls are counted per function).
  listed = sum(o["count"] for o in data["ops"])
  calls = sum(n for c in data["functions"].values() for op, n in c.items() if op not in ops)
  assert sum(sum(c.values()) for c in data["functions"].values()) == listed + calls


def test_supported_saved_model_exits_0(capsys, tmp_path):
  tf.saved_model.save(_Dense(), str(tmp_path))
  code, out, err = run(capsys, "ops", str(tmp_path))
  assert code == 0, err
  assert "verdict: converts" in out and "unsupported" not in out
  # The saver's string ops (SaveV2, RestoreV2...) are not part of the signature.
  assert "SaveV2" not in out and "RestoreV2" not in out
  assert "MatMul" in out and "Relu" in out


def test_string_tensors_are_problems(capsys, tmp_path):
  tf.saved_model.save(_StringInput(), str(tmp_path))
  code, out, _ = run(capsys, "ops", str(tmp_path), "--json")
  assert code == 1
  ops = {o["op"]: o for o in json.loads(out)["ops"]}
  assert ops["AsString"]["status"] == "unsupported"
  # Identity is supported, but not on strings.
  assert ops["Identity"]["problems"] and "string" in ops["Identity"]["problems"][0]


def test_frozen_graph_and_outputs(capsys, tmp_path):
  @tf.function
  def f(x):
    return tf.nn.softmax(x), _deadline()

  graph_def = f.get_concrete_function(tf.TensorSpec([2, 2], tf.float32)).graph.as_graph_def()
  pb, pbtxt = tmp_path / "g.pb", tmp_path / "g.pbtxt"
  pb.write_bytes(graph_def.SerializeToString())
  tf.io.write_graph(graph_def, str(tmp_path), "g.pbtxt", as_text=True)
  for path in (pb, pbtxt):
    code, out, _ = run(capsys, "ops", str(path))
    assert code == 1 and "GetDeadline" in out
  # Only what the softmax output needs: converts.
  softmax = [n.name for n in graph_def.node if n.op == "Softmax"][0]
  code, out, _ = run(capsys, "ops", str(pb), "--outputs", softmax)
  assert code == 0, out
  report = op_report.report_graph_def(graph_def, [softmax])
  assert set(report.ops) == {"Placeholder", "Softmax"}


def test_example_and_errors(capsys, tmp_path):
  code, out, _ = run(capsys, "ops", "--example", "cnn")
  assert code == 0 and "Conv2D" in out
  code, _, err = run(capsys, "ops")
  assert code == 2 and "either SRC or --example" in err
  code, _, err = run(capsys, "ops", str(tmp_path / "missing"))
  assert code == 2 and "does not exist" in err and "Traceback" not in err
  bad = tmp_path / "bad.pb"
  bad.write_bytes(b"not a graph")
  code, _, err = run(capsys, "ops", str(bad))
  assert code == 2 and "not a GraphDef" in err
  code, _, err = run(capsys, "ops", str(tmp_path))
  assert code == 2 and "not a SavedModel" in err
