"""Lookup tables whose contents are known at conversion (tfprims/ops/lookup.py,
docs/semantics/lookup.md): captured StaticHashTable (tensors or a vocabulary file),
MutableHashTable(OfTensors) and DenseHashTable read-only, their anonymous forms, Keras
IntegerLookup, and the same from SavedModels and TF1 graphs, against TF; the refusals
name the node. LookupTableFindV2's property spec (tests the op on drawn tables) runs in
property_tests/test_ops.py."""

import warnings

import jax
import jax.numpy as jnp
import keras
import numpy as np
import pytest
import tensorflow as tf

import tfprims

I64 = np.iinfo(np.int64)


def _tf_grad(table_keys, table_values, default, keys, weights):
  """d sum(weights * find(keys)) / d (values, default) in TF: the lookup written as a
  gather of TF's own positions (another TF table: key -> row), which TF differentiates
  (TF registers no gradient for LookupTableFindV2)."""
  rows = tf.lookup.StaticHashTable(
    tf.lookup.KeyValueTensorInitializer(
      tf.constant(table_keys), tf.range(len(table_keys), dtype=tf.int64)
    ),
    -1,
  )
  pos = rows.lookup(tf.constant(keys))
  values, default = tf.Variable(table_values), tf.Variable(default)
  with tf.GradientTape() as tape:
    got = tf.gather(values, tf.maximum(pos, 0))
    hit = tf.reshape(pos >= 0, pos.shape + (1,) * (values.shape.rank - 1))
    out = tf.where(hit, got, default + tf.zeros_like(got))
    loss = tf.reduce_sum(out * weights)
  return [tf.convert_to_tensor(g).numpy() for g in tape.gradient(loss, [values, default])]


def test_static_table_find_size_export_jit_grad_vs_tf(x64):
  table_keys = np.asarray([7, I64.max, -1, I64.min, 0], np.int64)
  table = tf.lookup.StaticHashTable(
    tf.lookup.KeyValueTensorInitializer(
      table_keys, np.asarray([1.5, -2.0, 3.25, 4.0, -0.0], np.float32)
    ),
    -1.5,
  )

  @tf.function
  def f(k):
    keys, values = table.export()
    return table.lookup(k), table.size(), keys, values

  fn, params = tfprims.convert(f, tf.TensorSpec([None], tf.int64))
  assert sorted(params) == ["hash_table/keys", "hash_table/values"]
  np.testing.assert_array_equal(params["hash_table/keys"], np.sort(table_keys))
  queries = [
    np.asarray([I64.max, 3, 7, 7, I64.min, -1, 0, I64.max - 1, I64.min + 1]),
    np.zeros([0], np.int64),
  ]
  for k in queries:  # missing keys, duplicates, int64 extremes, no keys
    (found, size, keys, values), _ = fn(params, k)
    t_found, t_size, t_keys, t_values = (t.numpy() for t in f(tf.constant(k)))
    np.testing.assert_array_equal(found, t_found)
    assert np.signbit(found).tolist() == np.signbit(t_found).tolist()
    assert int(size) == int(t_size)
    order = np.argsort(t_keys)  # TF's export order is its hash map's: ours is sorted
    np.testing.assert_array_equal(keys, t_keys[order])
    np.testing.assert_array_equal(values, t_values[order])
  jitted = jax.jit(fn)(params, queries[0])[0][0]
  np.testing.assert_array_equal(jitted, f(tf.constant(queries[0]))[0].numpy())
  jaxpr = str(jax.make_jaxpr(lambda p: fn(p, queries[0])[0][0])(params))
  assert "tf.LookupTableFindV2" in jaxpr

  w = np.arange(1.0, 10.0, dtype=np.float32)
  grad = jax.grad(lambda v: jnp.sum(w * fn({**params, "hash_table/values": v}, queries[0])[0][0]))(
    params["hash_table/values"]
  )
  want, _ = _tf_grad(
    params["hash_table/keys"], params["hash_table/values"], np.float32(-1.5), queries[0], w
  )
  np.testing.assert_allclose(grad, want)


def test_vocabulary_file_table(tmp_path):
  path = tmp_path / "vocab.txt"
  path.write_text("40\n10\n30\n20\n")
  table = tf.lookup.StaticHashTable(
    tf.lookup.TextFileInitializer(
      str(path),
      tf.int64,
      tf.lookup.TextFileIndex.WHOLE_LINE,
      tf.int64,
      tf.lookup.TextFileIndex.LINE_NUMBER,
    ),
    -7,
  )
  f = tf.function(lambda k: table.lookup(k) * 2)
  k = np.asarray([[10, 11], [40, 20]], np.int64)
  with warnings.catch_warnings():
    warnings.simplefilter("ignore", tfprims.PrecisionWarning)  # int64 in 32 bits
    fn, params = tfprims.convert(f, tf.TensorSpec([2, 2], tf.int64))
  np.testing.assert_array_equal(fn(params, k)[0], f(k).numpy())


def test_mutable_and_dense_tables_vector_values_vmap_grad(x64):
  vec = tf.lookup.experimental.MutableHashTable(tf.int64, tf.float32, [-1.0, -2.0])
  vec.insert(tf.constant([9, -4, 2], tf.int64), tf.constant([[1.0, 2.0], [3.0, 4.0], [5.0, 6.0]]))
  dense = tf.lookup.experimental.DenseHashTable(
    tf.int64, tf.float64, default_value=0.5, empty_key=-1000, deleted_key=-1001
  )
  dense.insert(tf.constant([3, 2, 1], tf.int64), tf.constant([0.25, -8.0, 1e300], tf.float64))
  dense.erase(tf.constant([1], tf.int64))
  f = tf.function(lambda k: (vec.lookup(k), dense.lookup(k), vec.size(), dense.size()))
  fn, params = tfprims.convert(f, tf.TensorSpec([None], tf.int64))
  assert params["MutableDenseHashTable/keys"].tolist() == [2, 3]  # erased, markers dropped
  k = np.asarray([2, 9, 1, 2, -4, 5, 3], np.int64)
  ours, want = fn(params, k)[0], [t.numpy() for t in f(k)]
  for a, b in zip(ours, want):
    np.testing.assert_array_equal(a, b)
  np.testing.assert_array_equal(jax.jit(fn)(params, k)[0][0], want[0])
  batch = np.stack([k, k[::-1], np.full_like(k, 9)])
  batched = jax.vmap(lambda q: fn(params, q)[0][:2])(batch)
  for i, row in enumerate(batch):
    for a, b in zip(batched, f(row)[:2]):
      np.testing.assert_array_equal(a[i], b.numpy())

  (b,) = jax.export.symbolic_shape("b")  # a shape-polymorphic export
  exported = jax.export.export(jax.jit(lambda p, q: fn(p, q)[0][:2]))(
    params, jax.ShapeDtypeStruct((b,), np.int64)
  )
  for a, want_a in zip(exported.call(params, k[:3]), f(k[:3])[:2]):
    np.testing.assert_array_equal(a, want_a.numpy())

  w = np.arange(14.0, dtype=np.float32).reshape(7, 2)
  key = "MutableHashTable"
  grad = jax.grad(lambda v: jnp.sum(w * fn({**params, f"{key}/values": v}, k)[0][0]))(
    params[f"{key}/values"]
  )
  want, _ = _tf_grad(
    params[f"{key}/keys"], params[f"{key}/values"], np.asarray([-1.0, -2.0], np.float32), k, w
  )
  np.testing.assert_allclose(grad, want)


def test_keras_integer_lookup_modes():
  vocab = [10, 20, 30, 40]
  layers = {
    "oov_mask": keras.layers.IntegerLookup(vocabulary=vocab, num_oov_indices=2, mask_token=0),
    "invert": keras.layers.IntegerLookup(vocabulary=vocab, invert=True),
    "one_hot": keras.layers.IntegerLookup(vocabulary=vocab, output_mode="one_hot"),
    "count": keras.layers.IntegerLookup(vocabulary=vocab, output_mode="count"),
  }
  x = np.asarray([[10, 40, 7, 0], [20, 0, 10, 10]], np.int64)
  ids = np.asarray([[0, 1, 4, 3], [2, 3, 1, 1]], np.int64)

  @tf.function
  def f(x, ids):
    return {
      "oov_mask": layers["oov_mask"](x),
      "invert": layers["invert"](ids),
      "one_hot": layers["one_hot"](x[0]),
      "count": layers["count"](x),
    }

  with warnings.catch_warnings():
    warnings.simplefilter("ignore", tfprims.PrecisionWarning)  # int64 in 32 bits
    fn, params = tfprims.convert(
      f, tf.TensorSpec(x.shape, tf.int64), tf.TensorSpec(ids.shape, tf.int64)
    )
  assert len(params) == 8  # four tables, named after their layers' name scopes
  want = {k: v.numpy() for k, v in f(x, ids).items()}
  for got in (fn(params, x, ids)[0], jax.jit(fn)(params, x, ids)[0]):
    assert set(got) == set(want)
    for name in want:
      np.testing.assert_array_equal(got[name], want[name], err_msg=name)


def test_saved_model_tables(tmp_path, x64):
  class Tables(tf.Module):
    def __init__(self):
      self.static = tf.lookup.StaticHashTable(
        tf.lookup.KeyValueTensorInitializer(
          tf.constant([5, I64.min], tf.int64), tf.constant([1.0, 2.0])
        ),
        -1.0,
      )
      self.vec = tf.lookup.experimental.MutableHashTable(tf.int64, tf.float32, [-1.0, 0.0])
      self.vec.insert(tf.constant([7, 5], tf.int64), tf.constant([[3.0, 4.0], [5.0, 6.0]]))

    @tf.function(input_signature=[tf.TensorSpec([None], tf.int64)])
    def __call__(self, k):
      return {
        "static": self.static.lookup(k),
        "vec": self.vec.lookup(k),
        "size": self.static.size(),
      }

  tf.saved_model.save(Tables(), str(tmp_path / "tables"))
  restored = tf.saved_model.load(str(tmp_path / "tables"))
  k = np.asarray([5, 7, I64.min, 3, 5], np.int64)
  want = {n: t.numpy() for n, t in restored.signatures["serving_default"](k=tf.constant(k)).items()}
  fn, params = tfprims.load_saved_model(str(tmp_path / "tables"))
  assert sorted(params) == ["static/keys", "static/values", "vec/keys", "vec/values"]
  fn2, params2 = tfprims.convert(restored.signatures["serving_default"])
  for got in (fn(params, k=k)[0], fn2(params2, k=k)[0]):
    assert set(got) == set(want)
    for name in want:
      np.testing.assert_array_equal(got[name], want[name])

  inputs = keras.Input((3,), dtype="int64", name="ids")
  hot = keras.layers.IntegerLookup(vocabulary=[10, 20, 30], output_mode="multi_hot")(inputs)
  model = keras.Model(inputs, keras.layers.Dense(2)(hot))
  model.export(str(tmp_path / "keras"), verbose=False)
  x = np.asarray([[10, 30, 7], [20, 20, 10]], np.int64)
  fn, params = tfprims.load_saved_model(str(tmp_path / "keras"), "serve")
  out = fn(params, ids=x)[0]
  np.testing.assert_allclose(next(iter(out.values())), model(x).numpy(), rtol=1e-6)


def test_table_created_and_initialized_inside_the_function_is_folded():
  @tf.function
  def f(k):  # TF lifts the table out of the function; the function initializes it
    table = tf.lookup.StaticHashTable(
      tf.lookup.KeyValueTensorInitializer(
        tf.constant([3, 1, 2], tf.int32), tf.constant([1.0, 2.0, 3.0])
      ),
      -1.0,
    )
    return table.lookup(k), table.size()

  fn, params = tfprims.convert(f, tf.TensorSpec([None], tf.int32))
  assert params["table/keys"].tolist() == [1, 2, 3]
  k = np.asarray([2, 5, 3, 1, 1], np.int32)
  for ours, want in zip(fn(params, k)[0], f(k)):
    np.testing.assert_array_equal(ours, want.numpy())


def test_tables_that_do_not_convert_are_refused_naming_the_node():
  strings = tf.lookup.StaticHashTable(
    tf.lookup.KeyValueTensorInitializer(tf.constant(["a", "b"]), tf.constant([1, 2], tf.int64)), -1
  )
  f = tf.function(lambda s: strings.lookup(s))
  with pytest.raises(
    tfprims.UnsupportedInputError,
    match=r"(?s)LookupTableFindV2 node .* string keys .* must run in TF",
  ):
    tfprims.convert(f, tf.TensorSpec([2], tf.string))

  table = tf.lookup.experimental.MutableHashTable(tf.int64, tf.float32, -1.0)

  @tf.function
  def writes(k):
    table.insert(k, tf.ones_like(k, tf.float32))
    return table.lookup(k)

  with pytest.raises(
    tfprims.UnsupportedOpError, match=r"(?s)LookupTableInsertV2: .*writes a lookup table"
  ):
    tfprims.convert(writes, tf.TensorSpec([2], tf.int64))

  @tf.function
  def fills(k):  # a table filled from the function's input
    inner = tf.lookup.StaticHashTable(
      tf.lookup.KeyValueTensorInitializer(k, tf.ones_like(k, tf.float32)), -1.0
    )
    return inner.lookup(k)

  with pytest.raises(
    tfprims.UnsupportedInputError,
    match=r"'table' is written by LookupTableImportV2 node 'key_value_init",
  ):
    tfprims.convert(fills, tf.TensorSpec([2], tf.int64))

  pairs = tf.lookup.experimental.DenseHashTable(
    tf.int64, tf.float32, default_value=-1.0, empty_key=[-5, -5], deleted_key=[-6, -6]
  )
  pairs.insert(tf.constant([[3, 4]], tf.int64), tf.constant([1.0]))
  with pytest.raises(
    tfprims.UnsupportedInputError, match=r"LookupTableFindV2 node .* keys of shape \[2\]"
  ):
    tfprims.convert(tf.function(lambda k: pairs.lookup(k)), tf.TensorSpec([1, 2], tf.int64))

  reads = tf.function(lambda k: table.lookup(k))
  with pytest.raises(tfprims.UnsupportedInputError, match="convert_functional needs"):
    tfprims.convert_functional(reads, tf.TensorSpec([2], tf.int64))


def _tf1_table_graph(text_file=None):
  """A TF1 graph: int64 ids -> a HashTable (constants; or a file of numbers) -> a
  dense layer of variables; also the table's size. Returns (graph, names)."""
  g = tf.Graph()
  with g.as_default():
    x = tf.compat.v1.placeholder(tf.int64, [None, 3], name="x")
    if text_file is None:
      init = tf.lookup.KeyValueTensorInitializer(
        tf.constant([7, I64.max, -1, I64.min, 0], tf.int64),
        tf.constant([1.5, -2.0, 3.25, 4.0, -0.5], tf.float32),
      )
    else:
      init = tf.lookup.TextFileInitializer(text_file, tf.int64, 0, tf.float32, 2, delimiter=" ")
    table = tf.lookup.StaticHashTable(init, -1.25)
    w = tf.compat.v1.get_variable("w", initializer=np.float32([[1, 2], [0, -1], [3, 1]]))
    b = tf.compat.v1.get_variable("b", initializer=np.float32([0.5, -0.5]))
    out = tf.identity(tf.matmul(table.lookup(x), w) + b, name="out")
    tf.identity(table.size(), name="size")
  return g, out


def test_tf1_graph_tables_graph_def_frozen_session_vs_tf(tmp_path, x64):
  ids = np.asarray([[7, 5, I64.min], [0, I64.max, -1], [3, 3, 7]], np.int64)  # misses
  g, out = _tf1_table_graph()
  with tf.compat.v1.Session(graph=g) as sess:
    sess.run([tf.compat.v1.global_variables_initializer(), tf.compat.v1.tables_initializer()])
    want = sess.run(["out:0", "size:0"], {"x:0": ids})
    fn, params = tfprims.convert_session(sess, ["x:0"], ["out:0", "size:0"])
    frozen = tf.compat.v1.graph_util.convert_variables_to_constants(
      sess, g.as_graph_def(), ["out", "size", "init_all_tables"]
    )
  assert sorted(params) == ["b", "hash_table/keys", "hash_table/values", "w"]
  assert not fn.param_specs["hash_table/values"].trainable
  (path := tmp_path / "model.pb").write_bytes(frozen.SerializeToString())
  for got in (
    fn(params, ids)[0],
    jax.jit(fn)(params, ids)[0],
    tfprims.convert_graph_def(frozen, ["x:0"], ["out:0", "size:0"])(ids),
    jax.jit(tfprims.load_frozen_graph(str(path), ["x"], ["out", "size"]))(ids),
  ):
    np.testing.assert_allclose(got[0], want[0], rtol=1e-6)
    assert int(got[1]) == want[1]
  # d loss / d table values: TF registers none; TF's gradient of the same lookup
  # written as a gather (the documented invariant), chained through the dense layer
  c = np.float32([[1.0, -2.0], [0.5, 3.0], [-1.0, 0.25]])

  def loss(values):
    return jnp.sum(fn({**params, "hash_table/values": values}, ids)[0][0] * c)

  got = jax.jit(jax.grad(loss))(params["hash_table/values"])
  want_grad, _ = _tf_grad(
    params["hash_table/keys"],
    params["hash_table/values"],
    np.float32(-1.25),
    ids,
    c @ params["w"].T,
  )
  np.testing.assert_allclose(got, want_grad, rtol=1e-6)
  # x64 off: the table's constants are narrowed as params are, refused where that
  # changes them (keys at the int64 extremes)
  with jax.enable_x64(False):
    with pytest.raises(tfprims.Int64OverflowError, match="'hash_table/keys'"):
      tfprims.convert_graph_def(frozen, ["x:0"], ["out:0"])(np.int64([[7, 5, 0]] * 3))


def test_tf1_graph_tables_from_files_and_refusals(tmp_path, x64):
  vocab = tmp_path / "vocab.txt"
  vocab.write_text("7 a 1.5\n-1 b 3.25\n9223372036854775807 c -2\n")
  ids = np.asarray([[7, 5, -1], [9223372036854775807, 0, 7]], np.int64)
  g, out = _tf1_table_graph(str(vocab))
  with tf.compat.v1.Session(graph=g) as sess:
    sess.run([tf.compat.v1.global_variables_initializer(), tf.compat.v1.tables_initializer()])
    want = sess.run("out:0", {"x:0": ids})
    fn, params = tfprims.convert_session(sess, ["x:0"], ["out:0"])  # exported by TF
    frozen = tf.compat.v1.graph_util.convert_variables_to_constants(
      sess, g.as_graph_def(), ["out", "init_all_tables"]
    )
  np.testing.assert_allclose(fn(params, ids)[0][0], want, rtol=1e-6)
  from_file = tfprims.convert_graph_def(frozen, ["x:0"], ["out:0"])  # reads the file
  np.testing.assert_allclose(from_file(ids)[0], want, rtol=1e-6)
  np.testing.assert_array_equal(from_file.tables["hash_table/keys"], params["hash_table/keys"])
  vocab.write_text("7 a x\n")
  with pytest.raises(
    tfprims.ConversionError, match=r"InitializeTableFromTextFileV2 node .*vocab.txt.*'x' is not a"
  ):
    tfprims.convert_graph_def(frozen, ["x:0"], ["out:0"])
  vocab.unlink()
  with pytest.raises(tfprims.ConversionError, match=r"cannot read the table's file .*vocab"):
    tfprims.convert_graph_def(frozen, ["x:0"], ["out:0"])
  # string keys stay refused, with the host-prefix hint; so are written tables
  g = tf.Graph()
  with g.as_default():
    s = tf.compat.v1.placeholder(tf.string, [2], name="s")
    words = tf.lookup.StaticHashTable(
      tf.lookup.KeyValueTensorInitializer(tf.constant(["a", "b"]), tf.constant([1, 2], tf.int64)),
      -1,
    )
    tf.identity(words.lookup(s), name="ids")
    k = tf.compat.v1.placeholder(tf.int64, [2], name="k")
    mutable = tf.lookup.experimental.MutableHashTable(tf.int64, tf.float32, -1.0)
    tf.group(mutable.insert(k, tf.ones([2])), name="fill")
    tf.identity(mutable.lookup(k), name="found")
  with pytest.raises(tfprims.ConversionError, match=r"string keys.*split_host_prefix"):
    tfprims.convert_graph_def(g.as_graph_def(), ["s:0"], ["ids:0"])
  with pytest.raises(tfprims.ConversionError, match=r"written by LookupTableInsertV2 node"):
    tfprims.convert_graph_def(g.as_graph_def(), ["k:0"], ["found:0"])


def test_tf1_graph_mutable_and_dense_tables_vs_tf(x64):
  g = tf.Graph()
  with g.as_default():
    k = tf.compat.v1.placeholder(tf.int64, [4], name="k")
    m = tf.lookup.experimental.MutableHashTable(tf.int64, tf.float32, -1.0)
    tf.raw_ops.LookupTableImportV2(  # a duplicate key: the last value, as TF
      table_handle=m.resource_handle,
      keys=tf.constant([1, I64.min, 1], tf.int64),
      values=tf.constant([1.0, 2.0, 3.0]),
      name="m_import",
    )
    mv = tf.lookup.experimental.MutableHashTable(tf.int64, tf.float32, [-1.0, -2.0], name="mv")
    tf.raw_ops.LookupTableImportV2(
      table_handle=mv.resource_handle,
      keys=tf.constant([5, I64.min], tf.int64),
      values=tf.constant([[1.0, 2.0], [3.0, 4.0]]),
      name="mv_import",
    )
    d = tf.lookup.experimental.DenseHashTable(  # empty: TF exports only empty buckets
      tf.int64, tf.float32, default_value=-1.0, empty_key=-5, deleted_key=-6, name="d"
    )
    for name, t in (("a", m), ("b", mv), ("c", d)):
      tf.identity(t.lookup(k), name=name)
    tf.identity(m.size(), name="size")
  ks = np.asarray([1, I64.min, 5, 9], np.int64)
  outs = ["a:0", "b:0", "size:0", "c:0"]
  with tf.compat.v1.Session(graph=g) as sess:
    sess.run(["m_import", "mv_import"])
    want = sess.run(outs, {"k:0": ks})
    fn, params = tfprims.convert_session(sess, ["k:0"], outs)  # exported by TF
  for got in (fn(params, ks)[0], tfprims.convert_graph_def(g.as_graph_def(), ["k:0"], outs)(ks)):
    for x, w in zip(got, want):
      np.testing.assert_array_equal(x, w)


def test_tf1_saved_model_table_initialized_at_load(tmp_path, x64):
  path = str(tmp_path / "tf1")
  with tf.Graph().as_default() as g:
    x = tf.compat.v1.placeholder(tf.int64, [None], name="x")
    table = tf.lookup.StaticHashTable(
      tf.lookup.KeyValueTensorInitializer(
        tf.constant([3, I64.max, 2], tf.int64), tf.constant([0.5, 1.5, 2.5])
      ),
      -1.0,
    )
    y = tf.identity(table.lookup(x) * 2.0, name="y")
    with tf.compat.v1.Session(graph=g) as sess:
      sess.run(tf.compat.v1.tables_initializer())
      builder = tf.compat.v1.saved_model.Builder(path)
      builder.add_meta_graph_and_variables(
        sess,
        ["serve"],
        main_op=tf.compat.v1.tables_initializer(),
        signature_def_map={
          "serving_default": tf.compat.v1.saved_model.predict_signature_def({"x": x}, {"y": y})
        },
      )
      builder.save()
  ids = np.asarray([I64.max, 5, 3], np.int64)
  want = tf.saved_model.load(path).signatures["serving_default"](x=tf.constant(ids))["y"]
  # the signature's graph holds the HashTableV2 node, not its initializer (run at load):
  # its contents are exported by its shared name
  fn, params = tfprims.load_saved_model(path)
  assert sorted(params) == ["hash_table/keys", "hash_table/values"]
  np.testing.assert_array_equal(jax.jit(fn)(params, x=ids)[0]["y"], want.numpy())


@pytest.mark.parametrize(
  "columns",
  [
    dict(key_index=-2, value_index=-1),  # line -> line number
    dict(key_index=-2, value_index=-1, value_index_offset=5),
    dict(key_index=-1, value_index=-2, vocab_size=2),
  ],
)  # the first 2 lines
def test_tf1_graph_table_file_columns_vs_tf(tmp_path, x64, columns):
  (path := tmp_path / "ids.txt").write_text("10\n-3\n7\n")
  ids = np.asarray([10, -3, 7, 0, 1], np.int64)
  g = tf.Graph()
  with g.as_default():
    x = tf.compat.v1.placeholder(tf.int64, [5], name="x")
    table = tf.lookup.StaticHashTable(
      tf.lookup.TextFileInitializer(str(path), tf.int64, value_dtype=tf.int64, **columns), -1
    )
    tf.identity(table.lookup(x), name="y")
    with tf.compat.v1.Session() as sess:
      sess.run(tf.compat.v1.tables_initializer())
      want = sess.run("y:0", {x: ids})
  got = tfprims.convert_graph_def(g.as_graph_def(), ["x:0"], ["y:0"])(ids)[0]
  np.testing.assert_array_equal(got, want)


def test_anonymous_tables_captured_created_inside_saved_and_tf1_vs_tf(tmp_path, x64):
  """experimental_is_anonymous=True tables (AnonymousHashTable,
  AnonymousMutableHashTable(OfTensors), AnonymousMutableDenseHashTable): captured ones
  (created eagerly), a StaticHashTable built inside the tf.function (TF lifts it; its
  initializer is folded), mutable and dense tables created inside it (the creator in
  the graph: imported constants, or empty), a SavedModel's and a TF1 graph's, against
  TF; a table the function writes stays refused, naming the nodes."""
  table_keys, table_vals = np.asarray([7, I64.max, I64.min]), np.float32([1.5, -2.0, 3.25])
  keys, vals = tf.constant(table_keys), tf.constant(table_vals)
  anon = {"experimental_is_anonymous": True}
  static = tf.lookup.StaticHashTable(tf.lookup.KeyValueTensorInitializer(keys, vals), -1.0, **anon)
  vec = tf.lookup.experimental.MutableHashTable(tf.int64, tf.float32, [-1.0, 0.0], **anon)
  vec.insert(keys[:2], tf.constant([[1.0, 2.0], [3.0, 4.0]]))
  dense_kw = dict(empty_key=-5, deleted_key=-6, **anon)
  dense = tf.lookup.experimental.DenseHashTable(tf.int64, tf.float32, -1.0, **dense_kw)
  dense.insert(keys, vals * 2.0)

  @tf.function
  def f(k):
    inner = tf.lookup.StaticHashTable(
      tf.lookup.KeyValueTensorInitializer(tf.constant([3, 7], tf.int64), tf.constant([0.5, 0.25])),
      -2.0,
      **anon,
    )
    mut = tf.lookup.experimental.MutableHashTable(tf.int64, tf.float32, -3.0, **anon)
    tf.raw_ops.LookupTableImportV2(  # a duplicate key: the last value, as TF
      table_handle=mut.resource_handle,
      keys=tf.constant([7, 7, 0], tf.int64),
      values=tf.constant([1.0, 2.0, 4.0]),
    )
    empty = tf.lookup.experimental.DenseHashTable(tf.int64, tf.float32, -4.0, **dense_kw)
    return (
      static.lookup(k),
      vec.lookup(k),
      dense.lookup(k),
      static.size(),
      inner.lookup(k),
      mut.lookup(k),
      mut.size(),
      empty.lookup(k),
    )

  fn, params = tfprims.convert(f, tf.TensorSpec([None], tf.int64))
  assert len(params) == 12  # six tables, all params
  k = np.asarray([7, 3, I64.min, 0, 7, I64.max], np.int64)  # misses, duplicates, extremes
  want = [t.numpy() for t in f(tf.constant(k))]
  for got in (fn(params, k)[0], jax.jit(fn)(params, k)[0]):
    for x, y in zip(got, want, strict=True):
      np.testing.assert_array_equal(x, y)

  @tf.function
  def writes(k):
    t = tf.lookup.experimental.MutableHashTable(tf.int64, tf.float32, -1.0, **anon)
    t.insert(k, tf.ones_like(k, tf.float32))
    return t.lookup(k)

  with pytest.raises(
    tfprims.ConversionError,
    match=r"AnonymousMutableHashTable node .* written by LookupTableInsertV2 node",
  ):
    tfprims.convert(writes, tf.TensorSpec([2], tf.int64))

  class Tables(tf.Module):
    def __init__(self):
      self.static, self.vec, self.dense = static, vec, dense

    @tf.function(input_signature=[tf.TensorSpec([None], tf.int64)])
    def __call__(self, k):
      return {name: getattr(self, name).lookup(k) for name in ("static", "vec", "dense")}

  tf.saved_model.save(Tables(), str(tmp_path / "anon"))
  restored = tf.saved_model.load(str(tmp_path / "anon"))
  want = restored.signatures["serving_default"](k=tf.constant(k))
  fn, params = tfprims.load_saved_model(str(tmp_path / "anon"))
  assert sorted(params) == [
    f"{t}/{p}" for t in ("dense", "static", "vec") for p in ("keys", "values")
  ]
  np.testing.assert_array_equal(params["dense/keys"], np.sort(table_keys))  # no markers
  got = fn(params, k=k)[0]
  for name in ("static", "vec", "dense"):
    np.testing.assert_array_equal(got[name], want[name].numpy())

  # TF1: an anonymous table lives for one Session.run, so the run must initialize it
  g = tf.Graph()
  with g.as_default():
    x = tf.compat.v1.placeholder(tf.int64, [None], name="x")
    init = tf.lookup.KeyValueTensorInitializer(table_keys, table_vals)
    t = tf.lookup.StaticHashTable(init, -1.0, **anon)
    with tf.control_dependencies([tf.compat.v1.tables_initializer()]):
      tf.identity(t.lookup(x), name="y")
    tf.identity(t.lookup(x), name="uninitialized")
  with tf.compat.v1.Session(graph=g) as sess:
    want = sess.run("y:0", {"x:0": k})
    with pytest.raises(tf.errors.FailedPreconditionError, match="not initialized"):
      sess.run("uninitialized:0", {"x:0": k})
    fn, params = tfprims.convert_session(sess, ["x:0"], ["y:0"])
  np.testing.assert_array_equal(fn(params, k)[0][0], want)
  np.testing.assert_array_equal(
    tfprims.convert_graph_def(g.as_graph_def(), ["x"], ["y"])(k)[0], want
  )
  with pytest.raises(tfprims.ConversionError, match="AnonymousHashTable node .*not initialized"):
    tfprims.convert_graph_def(g.as_graph_def(), ["x"], ["uninitialized"])
