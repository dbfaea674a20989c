"""tfprims.compare: node-by-node comparison with TF (docs/compare.md).

A wrong op planted with ``register_op(..., replace=True)`` must be named as the first
divergence (at top level, inside a function call, inside a while loop body at the
right iteration) with every node upstream agreeing; clean models (Keras CNN, LSTM,
BERT-shaped encoder, control flow, SavedModels, frozen graphs) report none; the CLI's
exit status says which; errors are typed and name the node; the statistics, the
JSON, HTML and Model Explorer outputs say what they should. The Keras applications
and the HTML in headless Chromium are ``slow``.
"""

import contextlib
import json
import os
import shutil
import subprocess

import jax
import jax.numpy as jnp
import keras
import numpy as np
import pytest
import tensorflow as tf

import tfprims
from tfprims import cli, core, examples, progress
from tfprims.comparison import records, stats


@contextlib.contextmanager
def planted(op_type, impl, **kwargs):
  """A wrong implementation of ``op_type`` while the block runs."""
  original = core.lookup(op_type)
  tfprims.register_op(op_type, impl, family="elementwise", replace=True, **kwargs)
  try:
    yield
  finally:
    core.install_op(original)


def assert_upstream_agrees(report):
  """Every node output recorded before the first divergence agrees with TF."""
  first = report.first_divergence
  assert first is not None
  before = report.nodes[: report.nodes.index(first)]
  assert before and not any(r.diverged for r in before), [r.node for r in before if r.diverged]
  assert first.inputs_agree


def _x(*shape, seed=0):
  return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


@tf.function(autograph=False)
def _double_tanh(x):
  return tf.tanh(x) * 2.0


@tf.function(autograph=False)
def loop_model(x):
  """A matmul, a call of a tf.function, and a while loop whose body has a sigmoid."""
  y = tf.matmul(x, tf.ones((3, 3))) + _double_tanh(x)

  def body(i, a):
    return i + 1, tf.sigmoid(a, name="loop_sigmoid") * 1.5

  _, z = tf.while_loop(lambda i, a: i < 4, body, [tf.constant(0), y])
  return tf.reduce_sum(z, axis=1)


# --- the first divergence ---------------------------------------------------------------


def test_clean_keras_model_reports_no_divergence():
  ex = examples.build("cnn")
  report = tfprims.compare(ex.tf_fn, *ex.inputs)
  assert report.ok and report.first_divergence is None
  compared = [r for r in report.nodes if r.max_rel_err is not None]
  assert len(compared) > 30 and {"Conv2D", "MaxPool", "Softmax"} <= {r.op for r in compared}
  assert all(r.status in ("ok", "input") for r in report.nodes)
  assert report.outputs and report.outputs[0].max_rel_err < 1e-5


def test_planted_op_at_top_level_is_the_first_divergence():
  ex = examples.build("mlp")  # Dense+ReLU, Dense+tanh, Dense
  with planted("Tanh", lambda x: jnp.tanh(x) * 1.01):
    report = tfprims.compare(ex.tf_fn, *ex.inputs)
  first = report.first_divergence
  assert first.op == "Tanh" and first.node.endswith("dense2_1/Tanh")
  assert_upstream_agrees(report)
  assert first.max_rel_err == pytest.approx(0.01, rel=0.3) and first.ulp > 1000
  assert first.iteration is None and report.first_divergence_iteration is None
  assert not report.ok and all(r.diverged for r in report.outputs)
  assert "first divergence: " + first.node in report.summary()


def test_planted_op_in_a_while_loop_body_names_the_node_and_iteration():
  x = _x(2, 3)
  assert tfprims.compare(loop_model, x).ok
  with planted("Sigmoid", lambda v: jax.nn.sigmoid(v) * 1.001):
    report = tfprims.compare(loop_model, x)
  first = report.first_divergence
  assert (first.node, first.op, first.output) == ("while/body/loop_sigmoid", "Sigmoid", 0)
  assert report.first_divergence_iteration == (0,) and first.iteration == (0,)
  assert first.calls == 4  # one record per call site, merged over the iterations
  assert_upstream_agrees(report)
  assert report.scopes["while/body"].endswith("While body")
  assert report.scopes["PartitionedCall"].startswith("call of ")


def test_divergence_starting_at_a_later_iteration():
  @tf.function(autograph=False)
  def f(x):
    def body(i, a):  # the op only sees large values from the third iteration on
      return i + 1, tf.exp(a, name="grow") + 1.0

    return tf.while_loop(lambda i, a: i < 4, body, [tf.constant(0), x])[1]

  with planted("Exp", lambda v: jnp.where(v > 2.5, jnp.exp(v) * 1.01, jnp.exp(v))):
    report = tfprims.compare(f, np.full((3,), -3.0, np.float32))
  assert report.first_divergence.node == "while/body/grow"
  assert report.first_divergence_iteration == (2,)


def test_function_bodies_are_compared_per_call_site():
  @tf.function(autograph=False)
  def f(x):
    return _double_tanh(x) + _double_tanh(x * 3.0)

  with planted("Tanh", lambda v: jnp.where(v > 2.0, jnp.tanh(v) - 0.1, jnp.tanh(v))):
    report = tfprims.compare(f, np.linspace(0, 1, 6, dtype=np.float32))
  tanhs = [r for r in report.nodes if r.op == "Tanh"]
  assert len(tanhs) == 2 and len({r.node.split("/")[0] for r in tanhs}) == 2
  assert [r.diverged for r in tanhs] == [False, True]  # only the second call sees x > 2
  assert report.first_divergence is tanhs[1]


def test_isolate_judges_each_op_on_tf_inputs():
  ex = examples.build("mlp")
  with planted("Tanh", lambda x: jnp.tanh(x) * 1.01):
    carried = tfprims.compare(ex.tf_fn, *ex.inputs)
    isolated = tfprims.compare(ex.tf_fn, *ex.inputs, isolate=True)
  assert len(carried.diverged) > 1  # the error flows downstream
  assert [r.op for r in isolated.diverged] == ["Tanh"]  # only the wrong op is off
  assert isolated.first_divergence.node == carried.first_divergence.node


def test_amplified_small_errors_are_not_a_first_divergence():
  @tf.function(autograph=False)
  def f(x):
    return tf.math.log(tf.exp(x * 1e-3)) * 5.0  # log(1 + small): relative errors grow

  with planted("Exp", lambda v: jnp.exp(v) * (1 + 3e-6)):  # within tolerance
    report = tfprims.compare(f, _x(4, 8))
  assert report.diverged and report.first_divergence is None
  assert all(records.PROPAGATED_NOTE in r.note for r in report.diverged if r.inputs_agree)


def test_random_ops_are_not_compared_and_tf_draws_are_fed_forward():
  @tf.function(autograph=False)
  def f(x):
    return tf.nn.relu(x + tf.random.normal(tf.shape(x)))

  report = tfprims.compare(f, np.ones((2, 3), np.float32))
  random = [r for r in report.nodes if r.op == "RandomStandardNormal"]
  assert [r.status for r in random] == ["random"] and random[0].max_abs_err is None
  assert report.ok and report.outputs[0].max_abs_err == 0.0


def test_tolerances_can_be_set():
  ex = examples.build("mlp")
  with planted("Tanh", lambda x: jnp.tanh(x) * 1.01):
    assert tfprims.compare(ex.tf_fn, *ex.inputs, rtol=0.1).ok
  report = tfprims.compare(ex.tf_fn, *ex.inputs, rtol=0.0, atol=0.0)
  assert report.rtol == 0.0 and not report.ok  # XLA's and TF's dots round differently


# --- real models ---------------------------------------------------------------------------


def test_keras_lstm_and_gru_with_masking():
  keras.utils.set_random_seed(0)
  inp = keras.Input((7, 5))
  h = keras.layers.Masking(mask_value=0.0)(inp)
  h = keras.layers.LSTM(6, return_sequences=True)(h)
  model = keras.Model(inp, keras.layers.GRU(4)(h))
  x = _x(2, 7, 5)
  x[0, 5:] = 0.0
  report = tfprims.compare(tf.function(lambda x: model(x, training=False)), x)
  assert report.ok
  bodies = [p for p in report.scopes if p.endswith("/body")]
  assert len(bodies) == 2
  assert any(r.node.startswith(bodies[0] + "/") and r.calls == 7 for r in report.nodes)


def test_bert_shaped_encoder_with_planted_gelu_error():
  keras.utils.set_random_seed(0)
  tokens = keras.Input((10,), dtype="int32")
  h = keras.layers.Embedding(40, 32, mask_zero=True)(tokens)
  for _ in range(2):
    att = keras.layers.MultiHeadAttention(num_heads=4, key_dim=8)(h, h)
    h = keras.layers.LayerNormalization(epsilon=1e-12)(h + att)
    ff = keras.layers.Dense(32)(keras.layers.Dense(64, activation="gelu")(h))
    h = keras.layers.LayerNormalization(epsilon=1e-12)(h + ff)
  model = keras.Model(tokens, h)
  ids = np.random.default_rng(1).integers(1, 40, (2, 10)).astype(np.int32)
  ids[0, 7:] = 0
  tf_fn = tf.function(lambda t: model(t, training=False))
  assert tfprims.compare(tf_fn, ids).ok
  with planted("Erfc", lambda v: jax.lax.erfc(v) + 1e-3):  # in Keras' exact GELU
    report = tfprims.compare(tf_fn, ids)
  assert report.first_divergence.op == "Erfc"
  assert_upstream_agrees(report)


def test_control_flow_cond_case_and_for_loop():
  @tf.function
  def f(x, k):
    if tf.reduce_sum(x) > 0:
      y = tf.exp(x)
    else:
      y = tf.sin(x)
    z = tf.switch_case(k, [lambda: y * 2, lambda: tf.tanh(y)])
    for i in tf.range(3):
      z = z + tf.cast(i, tf.float32) * tf.sigmoid(z)
    return z

  report = tfprims.compare(f, np.ones((2, 3), np.float32), np.int32(1))
  assert report.ok
  assert {"cond/then", "switch_case/indexed_case/branch1", "while/body"} <= set(report.scopes)
  with planted("Tanh", lambda v: jnp.tanh(v) + 1e-2):
    report = tfprims.compare(f, np.ones((2, 3), np.float32), np.int32(1))
  assert report.first_divergence.node.startswith("switch_case/indexed_case/branch1/")


def test_saved_models_tf2_and_tf1(tmp_path):
  class Model(tf.Module):
    def __init__(self):
      self.w = tf.Variable(_x(3, 4))

    @tf.function(input_signature=[tf.TensorSpec([None, 3])])
    def __call__(self, x):
      return {"y": tf.nn.softmax(tf.matmul(x, self.w))}

  model = Model()
  tf.saved_model.save(model, str(tmp_path / "tf2"), signatures=model.__call__)
  report = tfprims.compare_saved_model(str(tmp_path / "tf2"))  # example inputs
  assert report.ok and {"MatMul", "Softmax"} <= {r.op for r in report.nodes}
  assert tfprims.compare_saved_model(str(tmp_path / "tf2"), {"x": _x(5, 3)}).ok

  with tf.Graph().as_default(), tf.compat.v1.Session() as sess:
    x = tf.compat.v1.placeholder(tf.float32, [None, 3], name="x")
    v = tf.compat.v1.get_variable("v", initializer=_x(3, 2), use_resource=False)
    y = tf.nn.relu(tf.matmul(x, v), name="y")
    sess.run(tf.compat.v1.global_variables_initializer())
    builder = tf.compat.v1.saved_model.Builder(str(tmp_path / "tf1"))
    builder.add_meta_graph_and_variables(
      sess,
      ["serve"],
      signature_def_map={
        "serving_default": tf.compat.v1.saved_model.predict_signature_def({"x": x}, {"y": y})
      },
    )
    builder.save()
  report = tfprims.compare_saved_model(str(tmp_path / "tf1"))
  assert report.ok
  assert [r.status for r in report.nodes if r.op == "VariableV2"] == ["ok"]


def _tf1_loop_graph_def():
  g = tf.Graph()
  with g.as_default():
    x = tf.compat.v1.placeholder(tf.float32, [None, 3], name="x")
    y = tf.nn.relu(tf.matmul(x, tf.constant(_x(3, 2))), name="y")
    loop = tf.compat.v1.while_loop(
      lambda i, a: i < 3,
      lambda i, a: (i + 1, tf.sigmoid(a, name="loop_sigmoid")),
      [tf.constant(0), y],
    )
    tf.identity(loop[1], name="out")
  return g.as_graph_def()


def test_frozen_graph_with_tf1_loop():
  graph_def = _tf1_loop_graph_def()
  report = tfprims.compare_graph_def(graph_def, ["x:0"], ["out:0"], [_x(2, 3)])
  assert report.ok and any(p.endswith("/body") for p in report.scopes)
  with planted("Sigmoid", lambda v: jax.nn.sigmoid(v) + 1e-3):
    report = tfprims.compare_graph_def(graph_def, ["x:0"], ["out:0"], [_x(2, 3)])
  assert report.first_divergence.op == "Sigmoid"
  assert "/body/loop_sigmoid" in report.first_divergence.node


def test_variables_assigned_by_the_graph_are_left_as_they_were():
  v = tf.Variable(np.ones((3,), np.float32))

  @tf.function(autograph=False)
  def f(x):
    v.assign_add(x)
    return v * 2.0

  report = tfprims.compare(f, np.full((3,), 0.5, np.float32))
  assert report.ok and report.outputs[0].max_abs_err == 0.0
  np.testing.assert_array_equal(v.numpy(), np.ones(3))


# --- errors ------------------------------------------------------------------------------------


def test_unsupported_op_is_a_typed_error_naming_the_node():
  ex = examples.build("mlp")
  original = core.unregister_op("Tanh")
  try:
    with pytest.raises(tfprims.UnsupportedOpError, match="Tanh: .*dense2_1/Tanh"):
      tfprims.compare(ex.tf_fn, *ex.inputs)
  finally:
    core.install_op(original)


def test_string_inputs_and_bad_paths_are_typed_errors(tmp_path):
  @tf.function(input_signature=[tf.TensorSpec([2], tf.string)])
  def f(s):
    return tf.strings.length(s)

  with pytest.raises(tfprims.UnsupportedInputError, match="input 's'.*string"):
    tfprims.compare(f, np.array([b"a", b"bc"]))
  with pytest.raises(tfprims.ConversionError, match="no SavedModel directory"):
    tfprims.compare_saved_model(str(tmp_path / "missing"))
  with pytest.raises(tfprims.ConversionError, match="'nope' is not a node"):
    tfprims.compare_graph_def(_tf1_loop_graph_def(), ["nope:0"], ["out:0"], [_x(2, 3)])


# --- statistics ----------------------------------------------------------------------------------


def test_statistics_of_one_tensor():
  e = np.array([1.0, -2.0, 0.0, np.nan, np.inf, 3.0], np.float32)
  a = np.array([1.0, -2.0, 0.0, np.nan, np.inf, np.nextafter(np.float32(3), 4)], np.float32)
  d = stats.compare(e, a)
  assert (d.ulp, d.nan_mismatch, d.inf_mismatch, d.within, d.exact) == (1, 0, 0, True, False)
  assert d.max_abs_err == pytest.approx(2.4e-7, rel=0.01) and d.scale == 3.0
  bad = stats.compare(e, np.array([1, -2, 0, 0, -np.inf, np.nan], np.float32))
  assert (bad.nan_mismatch, bad.inf_mismatch, bad.within) == (2, 1, False)
  assert not stats.compare(e, np.zeros(3, np.float32)).within  # shape
  assert stats.compare(np.array([-0.0], np.float32), np.array([0.0], np.float32)).ulp == 1
  ints = stats.compare(np.array([1, 2, 3]), np.array([1, 2, 4]))
  assert (ints.within, ints.max_abs_err, ints.note) == (False, 1.0, "1 of 3 values differ")


def test_large_tensors_get_the_same_statistics_from_the_fused_pass():
  e = _x(stats.FUSED_FROM + 7)
  a = e * np.float32(1 + 3e-7) + np.float32(1e-9)
  small = stats.judge(stats.measure_later(e[:1000], a[:1000])())
  fused, numpy_only = (
    stats.compare(e, jnp.asarray(a)),
    stats.judge(stats.Measured(*stats._float_stats(e, a), dtype="float32")),
  )
  assert fused == numpy_only and small.within
  a[5] = np.nan  # non-finite values: numpy's full statistics
  assert stats.compare(e, jnp.asarray(a)).nan_mismatch == 1


def test_sums_are_judged_against_their_operands_scale():
  x = np.array([1000.0, -1000.0, 1e-3], np.float32)
  mean_tf, mean_ours = np.float32(x.mean()), np.float32(x.mean() + 2e-3)
  alone = stats.compare(np.array(mean_tf), np.array(mean_ours))
  summed = stats.compare(np.array(mean_tf), np.array(mean_ours), operand_scale=1000.0)
  assert not alone.within and summed.within
  assert stats.operand_scaled("Mean") and stats.operand_scaled("AddV2")
  assert not stats.operand_scaled("Exp")


# --- reports -------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def loop_report():
  with planted("Sigmoid", lambda v: jax.nn.sigmoid(v) * 1.001):
    return tfprims.compare(loop_model, _x(2, 3))


def test_json_report(tmp_path, loop_report):
  path = tmp_path / "report.json"
  loop_report.to_json(str(path))
  data = json.loads(path.read_text())
  assert data["ok"] is False and data["first_divergence"]["node"] == "while/body/loop_sigmoid"
  assert data["first_divergence"]["iteration"] == [0]
  assert data["tolerances"] == {"float32": [1e-4, 1e-5]}
  assert len(data["nodes"]) == len(loop_report.nodes)
  node = next(n for n in data["nodes"] if n["node"] == "while/body/loop_sigmoid")
  assert set(node) >= {
    "op",
    "output",
    "shape",
    "dtype",
    "max_abs_err",
    "max_rel_err",
    "ulp",
    "nan_mismatch",
    "inf_mismatch",
    "inputs_agree",
    "status",
    "inputs",
  }


def test_summary_lists_worst_nodes_and_op_types(loop_report):
  text = loop_report.summary()
  assert "first divergence: while/body/loop_sigmoid (Sigmoid, output 0, iteration 0)" in text
  assert "worst nodes:" in text and "error per op type:" in text
  assert loop_report.by_op()[0].diverged > 0


def test_html_report_is_self_contained(tmp_path, loop_report):
  path = tmp_path / "report.html"
  loop_report.to_html(str(path))
  page = path.read_text()
  assert (
    "dagre" in page
    and "src=" not in page
    and "http" not in page.split("<footer>")[0].replace("http://www.w3.org/2000/svg", "")
  )
  data = page.split('id="report-data">')[1].split("</script>")[0]
  assert (
    json.loads(data.replace("<\\/", "</"))["first_divergence"]["node"] == "while/body/loop_sigmoid"
  )


def test_model_explorer_graph_follows_its_schema(tmp_path, loop_report):
  path = tmp_path / "graph.json"
  loop_report.to_model_explorer(str(path))
  data = json.loads(path.read_text())
  node_data = json.loads((tmp_path / "graph.json.node_data.json").read_text())
  nodes = {n["id"]: n for n in data["graphs"][0]["nodes"]}
  sigmoid = nodes["while/body/loop_sigmoid"]
  assert sigmoid["namespace"] == "while/body" and sigmoid["label"] == "Sigmoid"
  assert {"key": "first_divergence", "value": "true"} in sigmoid["attrs"]
  assert all(e["sourceNodeId"] in nodes for n in nodes.values() for e in n["incomingEdges"])
  graph_builder = pytest.importorskip("model_explorer.graph_builder")
  node_data_builder = pytest.importorskip("model_explorer.node_data_builder")
  dacite = pytest.importorskip("dacite")
  strict = dacite.Config(strict=True)
  collection = dacite.from_dict(graph_builder.GraphCollection, data, config=strict)
  assert len(collection.graphs[0].nodes) == len(nodes)
  for graph_data in node_data.values():
    dacite.from_dict(node_data_builder.GraphNodeData, graph_data, config=strict)


def test_progress_is_shown_on_stderr_for_long_comparisons(monkeypatch, capsys):
  monkeypatch.setattr(progress, "DELAY_S", 0.0)
  monkeypatch.setattr(progress, "EVERY_S", 0.0)
  tfprims.compare(loop_model, _x(2, 3))
  assert capsys.readouterr().err == ""  # stderr is no terminal here
  monkeypatch.setenv("TFPRIMS_PROGRESS", "1")
  tfprims.compare(loop_model, _x(2, 3))
  err = capsys.readouterr().err
  assert "tfprims compare function loop_model: 1/" in err and "- done" in err


# --- the command line ----------------------------------------------------------------------------


def test_cli_example_cnn_json_exits_0(tmp_path, capsys):
  out = tmp_path / "out.json"
  assert cli.main(["compare", "--example", "cnn", "--json", str(out)]) == 0
  assert json.loads(out.read_text())["ok"] is True
  text = capsys.readouterr().out
  assert "first divergence: none" in text and f"wrote {out}" in text


def test_cli_diverging_model_exits_1(tmp_path, capsys):
  with planted("Tanh", lambda x: jnp.tanh(x) + 0.01):
    status = cli.main(
      [
        "compare",
        "--example",
        "mlp",
        "--html",
        str(tmp_path / "r.html"),
        "--model-explorer",
        str(tmp_path / "me.json"),
      ]
    )
  assert status == 1
  assert "first divergence: mlp_1/dense2_1/Tanh" in capsys.readouterr().out
  assert (tmp_path / "r.html").exists() and (tmp_path / "me.json.node_data.json").exists()


def test_cli_frozen_graph_and_errors(tmp_path, capsys):
  pb = tmp_path / "loop.pb"
  pb.write_bytes(_tf1_loop_graph_def().SerializeToString())
  assert cli.main(["compare", str(pb), "--inputs", "x:0", "--outputs", "out:0"]) == 0
  capsys.readouterr()
  assert cli.main(["compare", str(tmp_path / "nothing")]) == 2
  assert "does not exist" in capsys.readouterr().err
  assert cli.main(["compare", str(pb)]) == 2
  err = capsys.readouterr().err
  assert "needs --inputs and --outputs" in err and "Traceback" not in err
  assert cli.main(["compare", str(tmp_path)]) == 2  # a directory without a SavedModel
  assert "SavedModel" in capsys.readouterr().err


# --- slow: Keras applications and the HTML in a browser ----------------------------------------


@pytest.mark.slow
@pytest.mark.parametrize("name", ["ResNet50", "MobileNetV2"])
def test_keras_application_is_clean(name):
  keras.utils.set_random_seed(0)
  model = getattr(keras.applications, name)(weights=None, input_shape=(32, 32, 3), classes=10)
  report = tfprims.compare(
    tf.function(lambda x: model(x, training=False)), _x(2, 32, 32, 3) * 50 + 100
  )
  assert report.ok and len(report.nodes) > 500


def _chromium():
  return next(
    (shutil.which(n) for n in ("chromium", "chromium-browser", "google-chrome") if shutil.which(n)),
    None,
  )


@pytest.mark.slow
def test_html_report_renders_in_headless_chromium(tmp_path, loop_report):
  browser = _chromium()
  if browser is None:
    pytest.skip("no Chromium (apt-get install chromium)")
  page = tmp_path / "report.html"
  loop_report.to_html(str(page))
  run = subprocess.run(
    [
      browser,
      "--headless",
      "--no-sandbox",
      "--disable-gpu",
      "--disable-background-networking",
      "--no-first-run",
      f"--user-data-dir={tmp_path / 'profile'}",
      "--enable-logging=stderr",
      "--v=0",
      "--virtual-time-budget=5000",
      "--dump-dom",
      page.as_uri(),
    ],
    capture_output=True,
    text=True,
    timeout=120,
  )
  dom = run.stdout
  console = [line for line in run.stderr.splitlines() if ":CONSOLE" in line]
  assert console == [], console
  assert 'data-rendered="true"' in dom and "data-error" not in dom
  assert 'id="first-divergence" data-node="while/body/loop_sigmoid"' in dom
  assert 'class="node diverged first-divergence' in dom  # drawn in the graph
  assert dom.count('<tr data-node=') == len(loop_report.nodes)  # the table
  assert dom.count('class="histogram"') >= 5


def test_docs_worked_example_runs(tmp_path, monkeypatch, capsys):
  """The worked example of docs/compare.md, as written there."""
  doc = open(os.path.join(os.path.dirname(__file__), "..", "docs", "compare.md")).read()
  code = doc.split("## Worked example")[1].split("```python\n")[1].split("```")[0]
  monkeypatch.chdir(tmp_path)
  exec(compile(code, "docs/compare.md", "exec"), {})
  out = capsys.readouterr().out
  assert out.startswith("None\n")
  assert "first divergence: while/body/gate (Sigmoid, output 0, iteration 0)" in out
  assert (tmp_path / "report.html").exists()
  assert (
    core.lookup("Sigmoid") is not None
    and tfprims.compare(tf.function(lambda x: tf.sigmoid(x)), np.ones(3, np.float32)).ok
  )
