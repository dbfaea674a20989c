"""The public conversion API: structure, signature checks and typed errors."""

import warnings

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import tensorflow as tf

import tfprims

F32 = tf.float32


def _x(*shape, dtype=np.float32, seed=0):
  return np.random.default_rng(seed).normal(size=shape).astype(dtype)


# --- structure -------------------------------------------------------------------


def test_nested_inputs_and_outputs_keep_their_structure():
  @tf.function
  def f(x, d):
    return {"sum": x + d["a"], "pair": (d["b"] * 2.0, [x * d["b"]])}

  specs = (
    tf.TensorSpec([None, 3], F32),
    {"a": tf.TensorSpec([3], F32), "b": tf.TensorSpec([], F32)},
  )
  fn, params = tfprims.convert(f, *specs)
  assert params == {}
  x, d = _x(2, 3), {"a": _x(3, seed=1), "b": np.float32(1.5)}
  out, new_params = fn(params, x, d)
  ref = f(x, d)
  assert set(out) == {"sum", "pair"} and isinstance(out["pair"], tuple)
  assert isinstance(out["pair"][1], list)
  np.testing.assert_allclose(out["sum"], ref["sum"], rtol=1e-6)
  np.testing.assert_allclose(out["pair"][0], ref["pair"][0], rtol=1e-6)
  np.testing.assert_allclose(out["pair"][1][0], ref["pair"][1][0], rtol=1e-6)
  assert new_params == {}


def test_keyword_arguments_and_signature():
  @tf.function
  def f(x, y):
    return x - y

  fn, params = tfprims.convert(f, tf.TensorSpec([2], F32), tf.TensorSpec([2], F32))
  assert list(fn.signature.parameters) == ["x", "y"]
  a, b = np.float32([1, 2]), np.float32([5, 7])
  np.testing.assert_array_equal(fn(params, y=b, x=a)[0], a - b)
  np.testing.assert_array_equal(fn(params, a, y=b)[0], a - b)
  assert [s.name for s in fn.input_specs] == ["x", "y"]
  assert fn.output_specs[0].shape == (2,)


def test_convert_accepts_example_values_and_concrete_functions():
  f = tf.function(lambda x: tf.sin(x) * x)
  x = _x(4)
  fn1, _ = tfprims.convert(f, x)
  fn2, _ = tfprims.convert(f.get_concrete_function(tf.TensorSpec([4], F32)))
  fn3, _ = tfprims.convert(lambda x: tf.sin(x) * x, tf.TensorSpec([4], F32))
  for fn in (fn1, fn2, fn3):
    np.testing.assert_allclose(fn({}, x)[0], f(x), rtol=1e-6)


def test_convert_functional_returns_outputs_only_and_refuses_variables():
  f = tf.function(lambda x: x * 3.0)
  fn = tfprims.convert_functional(f, tf.TensorSpec([2], F32))
  np.testing.assert_allclose(fn(np.float32([1, 2])), [3, 6])

  v = tf.Variable([1.0, 2.0], name="scale")
  g = tf.function(lambda x: x * v)
  with pytest.raises(tfprims.ConversionError, match="captures variable 'scale'"):
    tfprims.convert_functional(g, tf.TensorSpec([2], F32))


def test_variables_become_params_and_assignments_come_back():
  v = tf.Variable([1.0, 2.0], name="acc")
  w = tf.Variable([10.0, 20.0], name="untouched")

  @tf.function
  def step(x):
    v.assign_add(x)
    return v.read_value() * w

  fn, params = tfprims.convert(step, tf.TensorSpec([2], F32))
  assert set(params) == {"acc", "untouched"}
  assert fn.param_specs["acc"].trainable is True
  out, new_params = fn(params, np.float32([1, 1]))
  np.testing.assert_allclose(out, [20.0, 60.0])
  np.testing.assert_allclose(new_params["acc"], [2.0, 3.0])
  np.testing.assert_allclose(new_params["untouched"], [10.0, 20.0])
  np.testing.assert_allclose(params["acc"], [1.0, 2.0])  # the input params are not mutated


def test_captured_constants_are_folded_into_the_function():
  c = tf.constant([1.0, 2.0, 3.0])
  f = tf.function(lambda x: x + c)
  fn, params = tfprims.convert(f, tf.TensorSpec([3], F32))
  np.testing.assert_allclose(fn(params, np.zeros(3, np.float32))[0], [1, 2, 3])


def test_graph_def_entry_point():
  f = tf.function(lambda x: tf.sin(x) * 2.0)
  cf = f.get_concrete_function(tf.TensorSpec([3], F32, name="inp"))
  gd = cf.graph.as_graph_def()
  out_name = cf.outputs[0].name
  fn = tfprims.convert_graph_def(gd, inputs=["inp:0"], outputs=[out_name])
  x = _x(3)
  np.testing.assert_allclose(fn(x)[0], f(x), rtol=1e-6)
  with pytest.raises(tfprims.InputStructureError, match="expected 1 inputs"):
    fn(x, x)


# --- config ----------------------------------------------------------------------


def test_config_get_update_override():
  assert tfprims.get_config("strict_shape_check") is True
  with tfprims.override_config("strict_shape_check", False):
    assert tfprims.get_config("strict_shape_check") is False
  assert tfprims.get_config("strict_shape_check") is True
  with pytest.raises(KeyError, match="unknown tfprims config option"):
    tfprims.get_config("nope")


def test_strict_shape_check_can_be_disabled():
  f = tf.function(lambda x: x * 2.0)
  fn, params = tfprims.convert(f, tf.TensorSpec([2], F32))
  with pytest.raises(tfprims.InputShapeError):
    fn(params, np.ones(3, np.float32))
  with tfprims.override_config("strict_shape_check", False):
    np.testing.assert_allclose(fn(params, np.ones(3, np.float32))[0], [2, 2, 2])


def test_strict_dtype_check_off_casts_inputs():
  f = tf.function(lambda x: x * 2.0)
  fn, params = tfprims.convert(f, tf.TensorSpec([2], F32))
  with pytest.raises(tfprims.InputDtypeError, match="'x' has dtype int32, expected float32"):
    fn(params, np.int32([1, 2]))
  with tfprims.override_config("strict_dtype_check", False):
    out = fn(params, np.int32([1, 2]))[0]
  assert out.dtype == jnp.float32
  np.testing.assert_allclose(out, [2, 4])
  # Python scalars and lists are weakly typed: always converted.
  np.testing.assert_allclose(fn(params, [1, 2])[0], [2, 4])


# --- section 6: inputs, params and errors ----------------------------------------


@pytest.fixture
def mul_fn():
  f = tf.function(lambda x, y: x * y)
  return tfprims.convert(f, tf.TensorSpec([None, 3], F32), tf.TensorSpec([3], F32))


@pytest.mark.parametrize(
  "x, y, err, msg",
  [
    (
      np.ones((2, 4), np.float32),
      np.ones(3, np.float32),
      tfprims.InputShapeError,
      r"input 'x' has shape \[2, 4\], expected \[None, 3\]",
    ),
    (
      np.ones((3,), np.float32),
      np.ones(3, np.float32),
      tfprims.InputShapeError,
      r"input 'x' has shape \[3\], expected \[None, 3\]",
    ),
    (
      np.ones((2, 3), np.float32),
      np.ones(3, np.int32),
      tfprims.InputDtypeError,
      r"input 'y' has dtype int32, expected float32",
    ),
    (np.ones((2, 3), np.float32), "abc", tfprims.InputDtypeError, r"input 'y'"),
  ],
)
def test_bad_inputs_raise_typed_errors_naming_the_argument(mul_fn, x, y, err, msg):
  fn, params = mul_fn
  with pytest.raises(err, match=msg):
    fn(params, x, y)


def test_missing_and_extra_arguments(mul_fn):
  fn, params = mul_fn
  with pytest.raises(tfprims.InputStructureError, match="missing a required argument: 'y'"):
    fn(params, np.ones((1, 3), np.float32))
  with pytest.raises(tfprims.InputStructureError, match="too many positional"):
    fn(params, np.ones((1, 3), np.float32), np.ones(3, np.float32), np.ones(3))
  with pytest.raises(
    tfprims.InputStructureError, match=r"unexpected keyword argument\(s\) \['z'\]"
  ):
    fn(params, np.ones((1, 3), np.float32), np.ones(3, np.float32), z=1)


def test_wrong_pytree_structure():
  f = tf.function(lambda d: d["a"] * d["b"])
  fn, params = tfprims.convert(f, {"a": tf.TensorSpec([2], F32), "b": tf.TensorSpec([2], F32)})
  with pytest.raises(tfprims.InputStructureError, match="input structure does not match"):
    fn(params, {"a": np.ones(2, np.float32)})
  with pytest.raises(tfprims.InputStructureError, match="input structure does not match"):
    fn(params, [np.ones(2, np.float32), np.ones(2, np.float32)])


def test_params_are_validated_exactly():
  v = tf.Variable(np.ones((2, 3), np.float32), name="w")
  fn, params = tfprims.convert(tf.function(lambda x: x * v), tf.TensorSpec([2, 3], F32))
  x = np.ones((2, 3), np.float32)
  # A [1, 3] array would broadcast; it must be refused.
  with pytest.raises(
    tfprims.InputShapeError, match=r"param 'w' has shape \[1, 3\], expected \[2, 3\]"
  ):
    fn({"w": np.ones((1, 3), np.float32)}, x)
  with pytest.raises(tfprims.InputDtypeError, match="param 'w' has dtype int32"):
    fn({"w": np.ones((2, 3), np.int32)}, x)
  with pytest.raises(tfprims.InputStructureError, match=r"missing \['w'\]"):
    fn({}, x)
  with pytest.raises(tfprims.InputStructureError, match=r"unexpected \['v'\]"):
    fn({"w": params["w"], "v": params["w"]}, x)
  # Forgetting the params: the message says what the first argument is.
  with pytest.raises(tfprims.InputStructureError, match="first argument .* is its params"):
    fn(x)
  functional = tfprims.convert(tf.function(lambda x: x * 2.0), tf.TensorSpec([2, 3], F32))[0]
  with pytest.raises(tfprims.InputStructureError, match=r"\{\} where it has no variables"):
    functional(x)
  # Even with the shape check off, params must match exactly.
  with tfprims.override_config("strict_shape_check", False):
    with pytest.raises(tfprims.InputShapeError):
      fn({"w": np.ones((1, 3), np.float32)}, x)


# --- 64-bit policy ---------------------------------------------------------------


def test_int64_constant_that_fits_is_narrowed_faithfully():
  c = tf.constant(2**31 - 1, tf.int64)
  f = tf.function(lambda x: x + c)
  fn, params = tfprims.convert(f, tf.TensorSpec([], tf.int64))
  out = fn(params, np.int64(0))[0]
  assert out.dtype == jnp.int32 and int(out) == 2**31 - 1


def test_int64_value_that_does_not_fit_raises_with_x64_off():
  f = tf.function(lambda x: x + tf.constant(2**40, tf.int64))
  fn, params = tfprims.convert(f, tf.TensorSpec([], tf.int64))
  with pytest.raises(tfprims.Int64OverflowError, match="enable_x64"):
    fn(params, np.int64(1))
  with pytest.raises(tfprims.Int64OverflowError, match="input 'x'"):
    fn(params, np.int64(2**40))


def test_float64_input_beyond_float32_range_raises_with_x64_off():
  fn, params = tfprims.convert(tf.function(lambda x: x * 2.0), tf.TensorSpec([2], tf.float64))
  np.testing.assert_allclose(fn(params, np.float64([1.5, 2.5]))[0], [3.0, 5.0])
  with pytest.raises(tfprims.Int64OverflowError, match="would become inf"):
    fn(params, np.float64([1e300, 1.0]))


def test_with_x64_on_dtypes_match_tf_exactly(x64):
  f = tf.function(lambda x, i: (x * 2.0, i + tf.constant(2**40, tf.int64)))
  fn, params = tfprims.convert(f, tf.TensorSpec([2], tf.float64), tf.TensorSpec([], tf.int64))
  (y, j), _ = fn(params, np.float64([1.0, 2.0]), np.int64(3))
  assert y.dtype == jnp.float64 and j.dtype == jnp.int64
  assert int(j) == 2**40 + 3


# --- unsupported inputs and data-dependent shapes ----------------------------------


def test_string_input_is_refused_at_conversion():
  f = tf.function(lambda s: tf.strings.length(s))
  with pytest.raises(tfprims.UnsupportedInputError, match="input 's' has dtype string"):
    tfprims.convert(f, tf.TensorSpec([2], tf.string))


def test_other_composite_inputs_are_refused_at_conversion():
  # Sparse and ragged inputs convert (tests/test_sparse.py); other composites do not.
  f = tf.function(lambda s: tf.zeros([1]))
  with pytest.raises(tfprims.UnsupportedInputError, match="IndexedSlicesSpec"):
    tfprims.convert(f, tf.IndexedSlicesSpec([2, 2], F32))


def test_string_lookup_table_is_refused_at_conversion():
  # numeric tables convert (tests/test_lookup_tables.py); string ones must run in TF
  table = tf.lookup.StaticHashTable(
    tf.lookup.KeyValueTensorInitializer(tf.constant(["a", "b"]), tf.constant([10, 20], tf.int64)),
    -1,
  )
  f = tf.function(lambda k: table.lookup(k))
  with pytest.raises(tfprims.UnsupportedInputError, match="lookup table .* string keys"):
    tfprims.convert(f, tf.TensorSpec([2], tf.string))


def test_tf1_switch_merge_graph_converts():
  tf.compat.v1.disable_control_flow_v2()
  try:
    g = tf.Graph()
    with g.as_default():
      x = tf.compat.v1.placeholder(F32, [2], name="x")
      p = tf.compat.v1.placeholder(tf.bool, [], name="p")
      y = tf.compat.v1.cond(p, lambda: x * 2.0, lambda: x + 1.0)
  finally:
    tf.compat.v1.enable_control_flow_v2()
  # rebuilt as an If (tests/test_tf1_control_flow.py tests TF1 control flow fully)
  fn = tfprims.convert_graph_def(g.as_graph_def(), ["x:0", "p:0"], [y.name])
  x = np.asarray([1.0, 2.0], np.float32)
  np.testing.assert_allclose(fn(x, np.asarray(True))[0], x * 2.0)
  np.testing.assert_allclose(fn(x, np.asarray(False))[0], x + 1.0)


@pytest.mark.parametrize(
  "body",
  [
    lambda x: tf.where(x > 0.0),
    lambda x: tf.boolean_mask(x, x > 0.0),
  ],
)
def test_data_dependent_output_shapes_run_eagerly_and_are_refused_under_jit(body):
  f = tf.function(body)
  fn, params = tfprims.convert(f, tf.TensorSpec([4], F32))
  x = np.float32([1, -2, 3, 0])
  np.testing.assert_array_equal(fn(params, x)[0], f(x).numpy())  # TF eager's result
  with pytest.raises(tfprims.DynamicShapeError, match="Where node '.*'.*depends on the data"):
    jax.jit(lambda x: fn(params, x)[0])(x)


_STRING_OPS = (
  "AsString",
  "StringLength",
  "StringUpper",
  "StringJoin",
  "Substr",
  "StaticRegexReplace",
  "StringToNumber",
)


def test_conversion_reports_every_blocker_in_one_error():
  # Seven unsupported ops beside a data-dependent shape (which converts: it runs
  # eagerly).
  @tf.function
  def f(x):
    s = tf.strings.as_string(x)
    n = tf.strings.length(tf.strings.upper(s))
    joined = tf.strings.join([tf.strings.substr(s, 0, 1), tf.strings.regex_replace(s, "1", "2")])
    back = tf.strings.to_number(joined)
    return tf.cast(tf.where(x > 0.0), F32)[:, 0] * 0.0, back + tf.cast(n, F32)

  with pytest.raises(tfprims.ConversionError) as e:
    tfprims.convert(f, tf.TensorSpec([4], F32))
  err = e.value
  assert isinstance(err, tfprims.UnsupportedOpError)
  assert not isinstance(err, tfprims.DynamicShapeError)
  assert set(_STRING_OPS) <= set(err.ops)
  assert "Where" not in err.ops and not err.dynamic_shapes
  for op in _STRING_OPS:
    assert op in str(err)


def test_unsupported_input_and_op_in_a_branch_are_reported_together():
  @tf.function
  def f(s, x):
    y = tf.cond(x[0] > 0.0, lambda: tf.strings.to_number(tf.strings.as_string(x)), lambda: x)
    return y + tf.cast(tf.strings.length(s), F32)

  with pytest.raises(tfprims.ConversionError) as e:
    tfprims.convert(f, tf.TensorSpec([], tf.string), tf.TensorSpec([2], F32))
  err = e.value
  assert isinstance(err, tfprims.UnsupportedInputError)
  assert isinstance(err, tfprims.UnsupportedOpError)
  assert not isinstance(err, tfprims.DynamicShapeError)
  assert any("'s' has dtype string" in m for m in err.inputs)
  assert any("cond_true" in node for node in err.ops["AsString"])
  assert "StringLength" in err.ops


def test_one_kind_of_blocker_keeps_its_error_type_name():
  # a string op between numeric tensors: one kind of blocker, one class name
  with pytest.raises(tfprims.UnsupportedOpError) as e:
    tfprims.convert(
      tf.function(lambda x: tf.strings.to_number(tf.strings.as_string(x))), tf.TensorSpec([4], F32)
    )
  assert type(e.value).__name__ == "UnsupportedOpError"
  assert not isinstance(e.value, (tfprims.DynamicShapeError, tfprims.UnsupportedInputError))
  assert set(e.value.ops) == {"AsString", "StringToNumber"} and e.value.inputs == ()


def test_data_dependent_op_on_constants_is_computed_at_trace_time():
  @tf.function
  def f(x):
    mask = tf.constant([True, False, True, True])
    idx = tf.where(mask)[:, 0]
    vals, pos = tf.unique(tf.constant([3, 1, 3, 2, 1]))
    return tf.gather(x, idx), vals, pos

  fn = tfprims.convert_functional(f, tf.TensorSpec([4], F32))
  x = np.arange(4, dtype=np.float32)
  for got, want in zip(jax.jit(fn)(x), f(x)):
    np.testing.assert_array_equal(got, want)


def test_a_call_of_a_function_missing_from_the_library_is_found_at_conversion():
  @tf.function
  def inner(x):
    return x * 2.0

  @tf.function
  def outer(x):
    return inner(x) + 1.0

  cf = outer.get_concrete_function(tf.TensorSpec([2], F32))
  gd = cf.graph.as_graph_def()
  called = [f.signature.name for f in gd.library.function]
  del gd.library.function[:]
  with pytest.raises(tfprims.ConversionError, match="not in the graph's function library") as e:
    tfprims.convert_graph_def(gd, [cf.inputs[0].name], [cf.outputs[0].name])
  assert any(name in str(e.value) for name in called)


def test_a_placeholder_that_is_not_an_input_is_found_at_conversion():
  g = tf.Graph()
  with g.as_default():
    x = tf.compat.v1.placeholder(F32, [2], name="x")
    y = tf.compat.v1.placeholder(F32, [2], name="y")
    z = tf.identity(x + y, name="z")
  gd = g.as_graph_def()
  with pytest.raises(tfprims.InputStructureError, match="not listed as inputs: \\['y'\\]"):
    tfprims.convert_graph_def(gd, ["x:0"], [z.name])

  # Inside a library function: a Placeholder in a body can never be fed either.
  @tf.function
  def inner(a):
    return a * 2.0

  @tf.function
  def outer(a):
    return inner(a) + 1.0

  cf = outer.get_concrete_function(tf.TensorSpec([2], F32))
  gd = cf.graph.as_graph_def()
  (body,) = [f for f in gd.library.function if "inner" in f.signature.name]
  (mul,) = [n for n in body.node_def if n.op == "Mul"]
  ph = body.node_def.add(name="ph", op="Placeholder")
  ph.attr["dtype"].type = tf.float32.as_datatype_enum
  mul.input[1] = "ph:output:0"
  with pytest.raises(
    tfprims.ConversionError, match="Placeholder node '.*inner.*/ph' is not an input of the function"
  ):
    tfprims.convert_graph_def(gd, [cf.inputs[0].name], [cf.outputs[0].name])


def test_reshape_to_a_computed_shape_names_the_node():
  @tf.function
  def f(x, n):
    return tf.reshape(x, tf.stack([n, -1]))

  fn, params = tfprims.convert(f, tf.TensorSpec([6], F32), tf.TensorSpec([], tf.int32))
  x = np.arange(6, dtype=np.float32)
  # an eager call knows n: the shape is computed as TF's eager run computes it
  np.testing.assert_array_equal(fn(params, x, np.int32(2))[0], f(x, np.int32(2)).numpy())
  with pytest.raises(tfprims.StaticInputError, match="Reshape node 'Reshape': input 'shape'"):
    jax.jit(lambda x, n: fn(params, x, n)[0])(x, np.int32(2))


def test_shapes_of_traced_values_are_static():
  @tf.function
  def f(x):
    return tf.reshape(x, tf.stack([tf.shape(x)[0] * 2, -1]))

  fn, params = tfprims.convert(f, tf.TensorSpec([None, 4], F32))
  x = _x(3, 4)
  jaxpr = jax.make_jaxpr(lambda x: fn(params, x)[0])(x)
  assert "tf.Reshape[shape=(6, -1)]" in str(jaxpr)
  np.testing.assert_allclose(fn(params, x)[0], f(x))


def test_params_share_the_variables_memory_without_copies():
  rng = np.random.default_rng(0)
  w = tf.Variable(rng.normal(size=(64, 32)).astype(np.float32))
  b = tf.Variable(np.zeros(32, np.float32))

  @tf.function
  def f(x):
    return tf.matmul(x, w) + b

  fn, params = tfprims.convert(f, tf.TensorSpec([2, 64], tf.float32))
  p = next(v for v in params.values() if v.shape == (64, 32))
  # A read-only view of TF's buffer: no copy of the weights was made ...
  assert isinstance(p, np.ndarray) and not p.flags.writeable
  assert np.shares_memory(p, np.from_dlpack(w.value()))
  before = p.copy()
  # ... and TF copies on write, so assigning the variable leaves the params alone.
  w.assign_add(tf.ones_like(w))
  np.testing.assert_array_equal(p, before)
  x = rng.normal(size=(2, 64)).astype(np.float32)
  np.testing.assert_allclose(fn(params, x)[0], x @ before, rtol=1e-5, atol=1e-5)
  # Updated params (e.g. after a training step) are plain arrays again.
  out, _ = fn({k: jnp.asarray(v) + 0 for k, v in params.items()}, x)
  np.testing.assert_allclose(out, x @ before, rtol=1e-5, atol=1e-5)


def test_float64_with_x64_off_warns_at_conversion_naming_the_values():
  if jax.config.jax_enable_x64:
    pytest.skip("x64 is on")
  v = tf.Variable(np.full(3, 0.1), dtype=tf.float64, name="w64")  # 0.1: not a float32
  seed = tf.Variable(np.int64(7), name="seed")  # fits in 32 bits
  f = tf.function(lambda x, n: ((x - 1) * 1e10 + v * 1e-3, n + seed))
  specs = (tf.TensorSpec([3], tf.float64), tf.TensorSpec([], tf.int64))
  with pytest.warns(
    tfprims.PrecisionWarning,
    match=r"inputs: x \(float64\), n \(int64\); "
    r"params: w64 \(float64\); constants: .*",
  ) as w:
    fn, params = tfprims.convert(f, *specs)
  message = str(w[0].message)
  assert "jax_enable_x64" in message and "seed" not in message
  # Constants are named only where float32 changes them: 1e-3, not 1e10 nor 1.
  assert message.count("/y") + message.count("Const") == 1, message
  x = 1 + 1e-9 * np.arange(1, 4)
  np.testing.assert_allclose(fn(params, x, 2)[0][0], 1e-4, rtol=1e-6)  # TF: 10.0001...
  with tfprims.override_config("x64_narrowing", "error"):
    with pytest.raises(tfprims.PrecisionError):
      tfprims.convert(f, *specs)
  with tfprims.override_config("x64_narrowing", "ignore"):
    with warnings.catch_warnings():
      warnings.simplefilter("error")
      tfprims.convert(f, *specs)
  with warnings.catch_warnings():
    warnings.simplefilter("error")
    tfprims.convert(tf.function(lambda x: x * 2.0), tf.TensorSpec([3], tf.float32))


def test_new_params_hold_every_variable_and_no_later_tf_write_changes_them():
  read_only = tf.Variable(np.full(3, 2.0, np.float32), name="read_only")
  written = tf.Variable(np.zeros(3, np.float32), name="written")
  unused = tf.Variable(np.ones(2, np.float32), name="unused")  # read, result unused

  @tf.function
  def f(x):
    unused.read_value()
    written.assign(x * read_only)
    return written.read_value() + 1.0

  fn, params = tfprims.convert(f, tf.TensorSpec([3], F32))
  assert set(params) == {"read_only", "written", "unused"}
  x = np.arange(3, dtype=np.float32)
  for call in (fn, jax.jit(fn)):
    out, new = call(params, x)
    assert set(new) == set(params)
    np.testing.assert_array_equal(new["written"], x * 2.0)
    np.testing.assert_array_equal(new["read_only"], params["read_only"])
    np.testing.assert_array_equal(new["unused"], params["unused"])
    kept = {k: np.array(v) for k, v in new.items()}
    # TF writes to the variables after the call do not reach the returned arrays.
    for v in (read_only, written, unused):
      v.assign(v + 100.0)
    for k, v in new.items():
      np.testing.assert_array_equal(v, kept[k])
    for v in (read_only, written, unused):
      v.assign(v - 100.0)


def test_node_scopes_put_tf_node_names_in_the_compiled_program():
  import re

  from tfprims import examples

  ex = examples.build("cnn")
  cf = ex.tf_fn.get_concrete_function(*ex.inputs)
  fn, params = tfprims.convert(cf)
  by_op = {}
  for node in cf.graph.as_graph_def().node:
    by_op.setdefault(node.op, []).append(node.name)
  x = np.zeros((2, 28, 28, 1), np.float32)

  def op_names(on):
    with tfprims.override_config("node_scopes", on):
      compiled = jax.jit(lambda p, x: fn(p, x)[0]).lower(params, x).compile()
    return set(re.findall(r'op_name="([^"]*)"', compiled.as_text()))

  named = op_names(True)
  # Each Conv2D / MatMul node of the TF graph names the XLA op it became (emitted
  # directly by the op's lowering, so named by its primitive).
  for op, lowered in [("Conv2D", "tf.Conv2D"), ("MatMul", "tf.MatMul")]:
    assert by_op[op]
    for node in by_op[op]:
      assert f"jit(<lambda>)/{node}/{lowered}" in named, (node, sorted(named))
  # Off (the default), the metadata names only the primitives.
  assert not any(node in name for name in op_names(False) for node in by_op["Conv2D"])


def test_a_string_output_names_the_node_computing_it():
  f = tf.function(lambda x: (x * 2.0, tf.constant("label", name="my_label")))
  with pytest.raises(
    tfprims.UnsupportedInputError,
    match=r"output Identity_1:0, from Const node 'my_label' is a string",
  ):
    tfprims.convert(f, tf.TensorSpec([2], F32))
