"""tfprims.split_host_prefix: the string nodes run in a TF prefix, the numeric rest is
converted; prefix then rest equals the TF function, eagerly, under jit and in grad."""

import re

import jax
import numpy as np
import pytest
import tensorflow as tf

import tfprims

keras = pytest.importorskip("keras")


def _split(fn, *specs):
  # int64 ids cross the boundary; with x64 off they are int32 in JAX (values fit).
  with tfprims.override_config("x64_narrowing", "ignore"):
    return tfprims.split_host_prefix(fn, *specs)


def _keras_grads(model, fn, *args):
  with tf.GradientTape() as tape:
    loss = tf.reduce_sum(fn(*args) ** 2)
  grads = tape.gradient(loss, model.trainable_variables)
  return {v.path: tf.convert_to_tensor(g).numpy() for v, g in zip(model.trainable_variables, grads)}


def test_string_lookup_embedding_dense_model():
  keras.utils.set_random_seed(0)
  inp = keras.Input(shape=(3,), dtype="string")
  x = keras.layers.StringLookup(vocabulary=["a", "b", "c"])(inp)
  x = keras.layers.Embedding(5, 4)(x)
  out = keras.layers.Dense(2)(keras.layers.Flatten()(x))
  model = keras.Model(inp, out)
  fn = tf.function(lambda s: model(s))
  prefix, jax_fn, params = _split(fn, tf.TensorSpec([None, 3], tf.string))

  # The table lookup runs in TF; the embedding and the dense layer are converted.
  assert "LookupTableFindV2" in prefix.ops
  assert not {"GatherV2", "MatMul", "ReadVariableOp"} & set(prefix.ops)
  assert [s.dtype for s in prefix.output_specs] == [np.dtype("int64")]
  assert set(params) == {v.path for v in model.weights}

  # out-of-vocabulary, empty, duplicate keys; an empty batch
  for strings in (
    np.array([["a", "b", "zz"], ["c", "c", ""], ["b", "OOV", "a"]]),
    np.zeros((0, 3), dtype=object),
  ):
    numeric = prefix(strings)
    want = fn(tf.constant(strings, tf.string)).numpy()
    got, new_params = jax_fn(params, *numeric)
    np.testing.assert_allclose(np.asarray(got), want, rtol=1e-6, atol=1e-7)
    np.testing.assert_allclose(
      np.asarray(jax.jit(jax_fn)(params, *numeric)[0]), want, rtol=1e-6, atol=1e-7
    )
    assert set(new_params) == set(params)

  strings = tf.constant([["a", "b", "zz"], ["c", "c", ""]])
  numeric = prefix(strings)
  grads = jax.grad(lambda p: (jax_fn(p, *numeric)[0] ** 2).sum())(params)
  want = _keras_grads(model, fn, strings)
  for name, g in want.items():
    np.testing.assert_allclose(np.asarray(grads[name]), g, rtol=1e-5, atol=1e-6)


def test_text_vectorization_then_numeric_model():
  keras.utils.set_random_seed(1)
  vectorize = keras.layers.TextVectorization(
    max_tokens=12,
    output_mode="int",
    output_sequence_length=4,
    vocabulary=["the", "cat", "sat", "on", "mat"],
  )
  embed, dense = keras.layers.Embedding(12, 3), keras.layers.Dense(2)

  @tf.function
  def fn(text):
    return dense(tf.reduce_mean(embed(vectorize(text)), axis=1))

  prefix, jax_fn, params = _split(fn, tf.TensorSpec([None], tf.string))
  # Lower-casing, splitting, the lookup and the ragged-to-dense padding run in TF.
  assert {"StringLower", "StringSplitV2", "LookupTableFindV2", "RaggedTensorToTensor"} <= set(
    prefix.ops
  )
  assert [s.shape for s in prefix.output_specs] == [(None, 4)]
  text = np.array(["The cat sat on the mat!", "", "dog dog THE cat", "a b c d e f g"])
  numeric = prefix(text)
  np.testing.assert_array_equal(numeric[0], vectorize(text).numpy())
  want = fn(tf.constant(text)).numpy()
  np.testing.assert_allclose(np.asarray(jax_fn(params, *numeric)[0]), want, rtol=1e-6, atol=1e-7)
  np.testing.assert_allclose(
    np.asarray(jax.jit(jax_fn)(params, *numeric)[0]), want, rtol=1e-6, atol=1e-7
  )


def test_string_and_float_inputs_through_a_nested_function():
  scale = tf.Variable([1.5, -2.0], name="scale")

  @tf.function
  def lengths(s):  # a nested call (PartitionedCall) that handles strings
    return tf.cast(tf.strings.length(s), tf.float32)

  @tf.function
  def fn(s, x):
    return {"y": lengths(s) * x * scale + tf.sin(x), "z": x * 2.0}

  specs = (tf.TensorSpec([2], tf.string), tf.TensorSpec([2], tf.float32))
  prefix, jax_fn, params = _split(fn, *specs)
  # x goes straight to the rest: passed through first, then the lengths.
  assert [s.name for s in prefix.output_specs][0] == "x"
  assert "StringLength" in prefix.ops and "Sin" not in prefix.ops
  assert any(n.endswith("PartitionedCall/StringLength") for n in prefix.nodes)  # inlined
  assert list(params) == ["scale"]
  s, x = np.array(["héllo", ""]), np.array([0.5, -3.0], np.float32)
  numeric = prefix(s, x=x)
  np.testing.assert_array_equal(numeric[0], x)
  want = fn(tf.constant(s), tf.constant(x))
  for call in (jax_fn, jax.jit(jax_fn)):
    got = call(params, *numeric)[0]
    assert set(got) == {"y", "z"}
    for k in got:
      np.testing.assert_allclose(np.asarray(got[k]), want[k].numpy(), rtol=1e-6)

  # d/dx and d/dscale against TF's
  xt = tf.constant(x)
  with tf.GradientTape() as tape:
    tape.watch(xt)
    loss = tf.reduce_sum(fn(tf.constant(s), xt)["y"])
  want_dx, want_dscale = tape.gradient(loss, [xt, scale])
  dp, dx = jax.grad(lambda p, x: jax_fn(p, x, *numeric[1:])[0]["y"].sum(), argnums=(0, 1))(
    params, numeric[0]
  )
  np.testing.assert_allclose(np.asarray(dx), want_dx.numpy(), rtol=1e-6)
  np.testing.assert_allclose(np.asarray(dp["scale"]), want_dscale.numpy(), rtol=1e-6)


def test_tables_and_a_variable_read_in_the_prefix():
  v = tf.Variable([1.0, 2.0], name="v")
  keys, vals = tf.constant(["a", "b", "c"]), tf.constant([10, 2**40, -(2**62)], tf.int64)
  table = tf.lookup.StaticHashTable(tf.lookup.KeyValueTensorInitializer(keys, vals), -1)

  @tf.function
  def fn(s, x):
    label = tf.strings.join([s, tf.strings.as_string(v[0])])  # v read in TF and in JAX
    # a table initialized inside the function (its initializer runs in the prefix)
    inner = tf.lookup.StaticHashTable(tf.lookup.KeyValueTensorInitializer(keys, vals), 0)
    found = tf.cast(table.lookup(s) == inner.lookup(s), tf.float32)
    size = tf.cast(table.size(), tf.float32)  # a table's user that takes no string
    return found * v[1] + size * x + tf.cast(tf.strings.length(label), tf.float32)

  prefix, jax_fn, params = _split(
    fn, tf.TensorSpec([None], tf.string), tf.TensorSpec([], tf.float32)
  )
  assert {"LookupTableImportV2", "LookupTableSizeV2", "ReadVariableOp"} <= set(prefix.ops)
  assert list(params) == ["v"]
  # the lookups' shapes come from the function's graph
  assert [s.shape for s in prefix.output_specs if s.dtype == np.int64][:2] == [(None,)] * 2
  s, x = np.array(["a", "zz", "c", "", "a"]), np.float32(0.5)
  numeric = prefix(s, x)
  tf_numeric = prefix.tf_function(tf.constant(s), tf.constant(x))
  for a, b in zip(numeric, tf_numeric):
    np.testing.assert_array_equal(a, b.numpy())
  # int64 ids past int32 cross the boundary: with x64 off that is a typed error naming them
  with pytest.raises(tfprims.errors.Int64OverflowError, match="lookuptablefindv2"):
    jax_fn(params, *numeric)
  want = fn(s, x).numpy()
  with jax.enable_x64(True):
    np.testing.assert_allclose(np.asarray(jax_fn(params, *numeric)[0]), want)
    np.testing.assert_allclose(np.asarray(jax.jit(jax_fn)(params, *numeric)[0]), want)


def test_ops_tfprims_cannot_run_join_the_prefix_only_below_strings_alone():
  @tf.function
  def fn(s):  # ragged ops on string lengths: preprocessing, run in TF
    ragged = tf.ragged.range(tf.strings.length(s))
    return tf.reduce_sum(tf.cast(ragged.to_tensor(), tf.float32) ** 2, axis=1)

  prefix, jax_fn, params = _split(fn, tf.TensorSpec([None], tf.string))
  assert {"RaggedRange", "RaggedTensorToTensor"} <= set(prefix.ops)
  assert "Pow" not in prefix.ops
  s = np.array(["abc", "", "hello"])
  np.testing.assert_allclose(np.asarray(jax_fn(params, *prefix(s))[0]), fn(s).numpy())

  @tf.function
  def model(s, n):  # the same op reading a numeric input too is the model's: not moved
    return tf.reduce_sum(tf.ragged.range(tf.strings.length(s) * n).to_tensor())

  prefix, jax_fn, params = _split(
    model, tf.TensorSpec([None], tf.string), tf.TensorSpec([None], tf.int32)
  )
  assert "RaggedRange" not in prefix.ops
  n = np.int32([2, 1, 3])
  # eagerly the rest computes the data-dependent size; traced, it names the node
  np.testing.assert_array_equal(np.asarray(jax_fn(params, *prefix(s, n))[0]), model(s, n).numpy())
  with pytest.raises(tfprims.DynamicShapeError, match="RaggedRange"):
    jax.jit(lambda *a: jax_fn(params, *a)[0])(*prefix(s, n))


def test_no_strings_is_the_identity_and_convert():
  w = tf.Variable([[1.0, -1.0], [0.5, 2.0]], name="w")
  fn = tf.function(lambda x: tf.nn.relu(tf.matmul(x, w)))
  spec = tf.TensorSpec([None, 2], tf.float32)
  prefix, jax_fn, params = tfprims.split_host_prefix(fn, spec)
  assert prefix.is_identity and prefix.nodes == ()
  ref_fn, ref_params = tfprims.convert(fn, spec)
  assert params.keys() == ref_params.keys()
  x = np.array([[1.0, 2.0], [-3.0, 0.25]], np.float32)
  assert prefix(x) == (x,)
  np.testing.assert_array_equal(
    np.asarray(jax_fn(params, *prefix(x))[0]), np.asarray(ref_fn(ref_params, x)[0])
  )
  np.testing.assert_allclose(np.asarray(jax_fn(params, x)[0]), fn(x).numpy())


def test_a_string_output_is_a_typed_error_naming_it():
  fn = tf.function(lambda s, x: (tf.strings.upper(s), x + 1.0))
  with pytest.raises(tfprims.UnsupportedInputError, match=r"Identity:0.*StringUpper"):
    tfprims.split_host_prefix(fn, tf.TensorSpec([None], tf.string), tf.TensorSpec([], tf.float32))


def test_the_prefix_checks_its_inputs():
  fn = tf.function(lambda s: tf.strings.length(s, unit="UTF8_CHAR"))
  prefix, jax_fn, params = tfprims.split_host_prefix(fn, tf.TensorSpec([2], tf.string, name="text"))
  for value in (["héllo", b""], np.array(["a", "bc"], dtype=object)):
    np.testing.assert_array_equal(
      np.asarray(jax_fn(params, *prefix(value))[0]), fn(tf.constant(value)).numpy()
    )
  with pytest.raises(tfprims.InputDtypeError, match="'text' must be string"):
    prefix([1, 2])
  with pytest.raises(tfprims.InputShapeError, match="'text' has shape \\[3\\]"):
    prefix(["a", "b", "c"])
  with pytest.raises(tfprims.InputStructureError):
    prefix(["a", "b"], ["c", "d"])


class _Tagger(tf.Module):
  """A SavedModel whose input is a string: lookup, one-hot, a variable."""

  def __init__(self):
    self.lookup = keras.layers.StringLookup(vocabulary=["a", "b"])
    self.w = tf.Variable([[1.0], [2.0], [3.0]])

  @tf.function(input_signature=[tf.TensorSpec([None], tf.string, name="text")])
  def __call__(self, text):
    return tf.matmul(tf.one_hot(self.lookup(text), 3), self.w)


def test_cli_inspect_and_ops_report_the_split(capsys, tmp_path):
  import json

  from tfprims import cli

  module = _Tagger()
  tf.saved_model.save(module, str(tmp_path))
  for argv in (["inspect", str(tmp_path)], ["ops", str(tmp_path)]):
    code = cli.main(argv)
    out, err = capsys.readouterr()
    assert code == 0, err
    assert "Traceback" not in out + err
    prefix_line = re.search(r"^  TF host prefix: (\d+) nodes \((.*)\)$", out, re.M)
    assert prefix_line and int(prefix_line.group(1)) >= 2
    assert "LookupTableFindV2 x1" in prefix_line.group(2)
    assert "OneHot" not in prefix_line.group(2) and "MatMul" not in prefix_line.group(2)
    assert re.search(r"^  boundary \(inputs of the converted rest\): \S+: int64", out, re.M)
    assert re.search(r"^  converted rest: 1 params", out, re.M)
  cli.main(["ops", str(tmp_path), "--json"])
  split = json.loads(capsys.readouterr().out)["host_prefix"]
  assert split["inputs"] == ["text: string[None]"] and split["rest_params"] == 1

  # The restored signature (nested StatefulPartitionedCalls) split in Python agrees with TF.
  restored = tf.saved_model.load(str(tmp_path))
  sig = restored.signatures["serving_default"]
  prefix, jax_fn, params = _split(sig)
  text = np.array(["b", "zz", "", "a", "b"])
  want = sig(text=tf.constant(text))
  got = jax_fn(params, *prefix(text=text))[0]
  np.testing.assert_allclose(np.asarray(got["output_0"]), want["output_0"].numpy())
