"""A catalogue of bad inputs: every one raises a TFPrimsError subclass at the right
stage (conversion or call), naming what is wrong (the argument, the op type and the
node)."""

import os

import jax
import numpy as np
import pytest
import tensorflow as tf

import tfprims

F32 = tf.float32
X = np.ones((2, 3), np.float32)


@tf.function
def _matmul(x, w):
  return tf.matmul(x, w)


def _converted():
  return tfprims.convert(_matmul, tf.TensorSpec([None, 3], F32), tf.TensorSpec([3, 4], F32))


def _expect(kind, match, fn, *args, **kwargs):
  with pytest.raises(kind, match=match) as e:
    fn(*args, **kwargs)
  assert isinstance(e.value, tfprims.TFPrimsError)
  return e.value


# --- at the call: inputs, params, rng -------------------------------------------------------

CALL_CASES = [
  # (name, call(fn, params), error type, words the message must contain)
  ("missing argument", lambda fn, p: fn(p, X), tfprims.MissingInputError, "'w'"),
  ("extra argument", lambda fn, p: fn(p, X, X, X), tfprims.InputStructureError, "too many"),
  ("unknown keyword", lambda fn, p: fn(p, X, v=X), tfprims.InputStructureError, "'v'"),
  (
    "wrong rank",
    lambda fn, p: fn(p, X[0], np.ones((3, 4), np.float32)),
    tfprims.InputShapeError,
    r"'x'.*\[3\].*\[None, 3\]",
  ),
  (
    "wrong dim",
    lambda fn, p: fn(p, X, np.ones((3, 5), np.float32)),
    tfprims.InputShapeError,
    r"'w'.*\[3, 5\].*\[3, 4\]",
  ),
  (
    "wrong dtype",
    lambda fn, p: fn(p, X.astype(np.int32), np.ones((3, 4), np.float32)),
    tfprims.InputDtypeError,
    "'x'.*int32.*float32",
  ),
  (
    "not an array",
    lambda fn, p: fn(p, "text", np.ones((3, 4), np.float32)),
    tfprims.InputDtypeError,
    "'x'",
  ),
  (
    "string array",
    lambda fn, p: fn(p, np.array([["a"] * 3]), np.ones((3, 4), np.float32)),
    tfprims.UnsupportedInputError,
    "'x'",
  ),
  (
    "params not a mapping",
    lambda fn, p: fn([1], X, np.ones((3, 4), np.float32)),
    tfprims.InputStructureError,
    "mapping",
  ),
  (
    "extra param",
    lambda fn, p: fn({"w2": X}, X, np.ones((3, 4), np.float32)),
    tfprims.InputStructureError,
    "unexpected.*w2",
  ),
  (
    "bad rng",
    lambda fn, p: fn(p, X, np.ones((3, 4), np.float32), rng=7),
    tfprims.InvalidRngError,
    "rng",
  ),
]


@pytest.mark.parametrize("name, call, kind, words", CALL_CASES, ids=[c[0] for c in CALL_CASES])
def test_bad_calls_raise_typed_errors_naming_the_argument(name, call, kind, words):
  fn, params = _converted()  # converting succeeds: these are call-time errors
  _expect(kind, words, call, fn, params)
  _expect(kind, words, lambda: jax.jit(lambda p: call(fn, p))(params))


def test_params_of_the_wrong_shape_or_dtype_name_the_param():
  v = tf.Variable(np.ones((3, 4), np.float32), name="kernel")
  fn, params = tfprims.convert(tf.function(lambda x: tf.matmul(x, v)), tf.TensorSpec([2, 3], F32))
  _expect(
    tfprims.InputShapeError,
    r"param 'kernel'.*\[4, 3\]",
    fn,
    {"kernel": np.ones((4, 3), np.float32)},
    X,
  )
  _expect(
    tfprims.InputDtypeError, "param 'kernel'.*int32", fn, {"kernel": np.ones((3, 4), np.int32)}, X
  )
  _expect(tfprims.InputStructureError, "missing.*kernel", fn, {}, X)


def test_missing_rng_names_the_random_node():
  fn = tfprims.convert_functional(
    tf.function(lambda x: x + tf.random.uniform([3])), tf.TensorSpec([3], F32)
  )
  _expect(tfprims.MissingRngError, "RandomUniform node '.*'.*rng=", fn, np.ones(3, np.float32))


def test_static_input_computed_from_data_names_the_node_and_input():
  fn = tfprims.convert_functional(
    tf.function(lambda x, n: tf.reshape(x, tf.stack([n, -1]))),
    tf.TensorSpec([6], F32),
    tf.TensorSpec([], tf.int32),
  )
  _expect(
    tfprims.StaticInputError,
    "Reshape node 'Reshape': input 'shape'",
    jax.jit(fn),
    np.ones(6, np.float32),
    np.int32(2),
  )


# --- at conversion: ops, inputs, graphs -------------------------------------------------------


def _string_ops(x):
  return tf.strings.to_number(tf.strings.as_string(x))


@pytest.mark.parametrize("where", ["top", "nested function", "cond branch", "while body"])
def test_unsupported_ops_in_every_nesting_are_named_at_conversion(where):
  inner = tf.function(_string_ops)
  bodies = {
    "top": _string_ops,
    "nested function": lambda x: inner(x) * 2.0,
    "cond branch": lambda x: tf.cond(x[0] > 0, lambda: _string_ops(x), lambda: x),
    "while body": lambda x: tf.while_loop(
      lambda i, a: i < 2, lambda i, a: (i + 1, _string_ops(a)), [0, x]
    )[1],
  }
  err = _expect(
    tfprims.UnsupportedOpError,
    "AsString",
    tfprims.convert,
    tf.function(bodies[where]),
    tf.TensorSpec([3], F32),
  )
  assert set(err.ops) == {"AsString", "StringToNumber"}
  nodes = err.ops["AsString"]
  assert nodes and all(isinstance(n, str) for n in nodes)
  if where != "top":
    assert all("/" in n for n in nodes)  # named inside the function that holds it


def test_data_dependent_shapes_are_named_under_jit():
  fn = tfprims.convert_functional(
    tf.function(lambda x: tf.boolean_mask(x, x > 0)), tf.TensorSpec([3], F32)
  )
  np.testing.assert_array_equal(fn(np.float32([1, -1, 2])), [1, 2])  # eager: TF's result
  _expect(
    tfprims.DynamicShapeError,
    "Where node 'boolean_mask/Where'.*dynamic_shape_bounds",
    jax.jit(fn),
    np.float32([1, -1, 2]),
  )


@pytest.mark.parametrize(
  "spec, words",
  [
    (tf.TensorSpec([2], tf.string), "'s' has dtype string"),
    (tf.IndexedSlicesSpec([2, 2], F32), "'s' is a IndexedSlices"),
    (tf.TensorSpec([], tf.variant), "'s' has dtype variant"),
  ],
)
def test_unsupported_input_kinds_are_named_at_conversion(spec, words):
  f = tf.function(lambda s: tf.zeros([1]))
  _expect(tfprims.UnsupportedInputError, words, tfprims.convert, f, spec)


def test_malformed_graph_defs_are_refused_at_conversion():
  g = tf.Graph()
  with g.as_default():
    x = tf.compat.v1.placeholder(F32, [2], name="x")
    tf.identity(x * 2.0, name="y")
  gd = g.as_graph_def()
  _expect(tfprims.ConversionError, "'nope'", tfprims.convert_graph_def, gd, ["nope:0"], ["y:0"])
  broken = tf.compat.v1.GraphDef()
  broken.CopyFrom(gd)
  broken.node[-1].input[0] = "missing_node"
  err = _expect(
    tfprims.ConversionError, "missing_node", tfprims.convert_graph_def, broken, ["x:0"], ["y:0"]
  )
  assert "y" in str(err)
  looped = tf.compat.v1.GraphDef()
  looped.CopyFrom(gd)
  (mul,) = [n for n in looped.node if n.op == "Mul"]
  mul.input[0] = "y"
  _expect(tfprims.ConversionError, "cycle", tfprims.convert_graph_def, looped, ["x:0"], ["y:0"])


# --- SavedModels ------------------------------------------------------------------------------


class _Module(tf.Module):
  @tf.function(input_signature=[tf.TensorSpec([None, 3], F32)])
  def __call__(self, x):
    return {"y": x * 2.0}


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
  path = str(tmp_path_factory.mktemp("sm"))
  tf.saved_model.save(_Module(), path)
  return path


def test_unknown_signature_lists_the_available_ones(saved):
  _expect(
    tfprims.ConversionError,
    r"no signature 'predict'.*\['serving_default'\]",
    tfprims.load_saved_model,
    saved,
    "predict",
  )


def test_missing_truncated_and_corrupt_saved_models_are_refused(saved, tmp_path):
  _expect(
    tfprims.ConversionError, "no SavedModel", tfprims.load_saved_model, str(tmp_path / "absent")
  )
  empty = tmp_path / "empty"
  empty.mkdir()
  _expect(
    tfprims.ConversionError, "cannot load the SavedModel", tfprims.load_saved_model, str(empty)
  )
  import shutil

  for damage in ("truncate", "garbage"):
    copy = tmp_path / damage
    shutil.copytree(saved, copy)
    pb = copy / "saved_model.pb"
    data = pb.read_bytes()
    pb.write_bytes(data[: len(data) // 3] if damage == "truncate" else os.urandom(len(data)))
    _expect(
      tfprims.ConversionError, "cannot load the SavedModel", tfprims.load_saved_model, str(copy)
    )
