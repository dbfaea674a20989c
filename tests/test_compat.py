"""tf2jax's API through ``from tfprims.compat import tf2jax``: every public name and
every configuration option of tf2jax 0.3.x, checked against TF.

Written from tf2jax's documented behaviour (its README and the meaning of its
options), not from its tests; tf2jax itself is not imported.
"""

import importlib
import inspect
import warnings

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import tensorflow as tf
from jax.experimental import checkify
from tensorflow.python.framework import ops as tf_ops

import tfprims
from tfprims import config as tfprims_config
from tfprims.compat import tf2jax

F32 = tf.float32
RNG = np.random.default_rng(0)
X = RNG.normal(size=(4, 3)).astype(np.float32)

# tf2jax 0.3.x's options and their defaults (its README and config module).
TF2JAX_OPTIONS = {
  "strict_shape_check": True,
  "strict_dtype_check": False,
  "force_const_float32_to_bfloat16": False,
  "force_const_float64_to_bfloat16": False,
  "convert_custom_gradient": True,
  "infer_relu_from_jax2tf": True,
  "infer_cumulative_reduction_from_jax2tf": True,
  "raise_on_prevent_gradient": True,
  "resize_bilinear_precision": "highest",
  "enable_checkify_for_asserts": False,
  "xlacallmodule_strict_checks": True,
  "disable_assert_in_tensor_list_get_item": False,
  "skip_variables_evaluation_inside_tf_tracing": False,
}
# Deliberate differences in default (docs/migrating-from-tf2jax.md).
TFPRIMS_DEFAULTS = {"strict_dtype_check": True}


def _close(got, want, **tol):
  for g, w in zip(jax.tree.leaves(got), jax.tree.leaves(want), strict=True):
    np.testing.assert_allclose(
      np.asarray(g, np.float32), np.asarray(w, np.float32), **(tol or dict(rtol=1e-5, atol=1e-6))
    )


def _tf_grad(f, x):
  x = tf.constant(x)
  with tf.GradientTape() as tape:
    tape.watch(x)
    y = tf.reduce_sum(f(x))
  return tape.gradient(y, x).numpy()


@pytest.fixture(autouse=True)
def _fresh_jit_caches():
  # Options read at call time take effect when a function is traced; tests that
  # change them must not reuse another test's traces.
  jax.clear_caches()
  yield


# --- public names ------------------------------------------------------------------


def test_every_tf2jax_public_name_is_there():
  for name in (
    "convert",
    "convert_functional",
    "convert_from_restored",
    "convert_functional_from_restored",
    "get_config",
    "update_config",
    "override_config",
    "AnnotatedFunction",
    "MissingInputError",
  ):
    assert callable(getattr(tf2jax, name)), name
  assert tf2jax.__version__.startswith("0.3")
  assert tf2jax.config.override_config is tf2jax.override_config  # README spelling
  import tfprims.compat

  assert tfprims.compat.tf2jax is tf2jax


def test_importing_the_compat_module_changes_no_default():
  before = {name: tfprims.get_config(name) for name in tfprims_config.OPTIONS}
  importlib.reload(tf2jax)
  assert {name: tfprims.get_config(name) for name in tfprims_config.OPTIONS} == before
  assert before == {n: o.default for n, o in tfprims_config.OPTIONS.items()}


def test_every_tf2jax_option_is_accepted_with_its_default():
  for name, default in TF2JAX_OPTIONS.items():
    assert tf2jax.get_config(name) == TFPRIMS_DEFAULTS.get(name, default), name
    other = "default" if isinstance(default, str) else (not default)
    with warnings.catch_warnings():
      warnings.simplefilter("ignore")
      with tf2jax.override_config(name, other):
        assert tf2jax.get_config(name) == other
      assert tf2jax.get_config(name) == TFPRIMS_DEFAULTS.get(name, default)
      tf2jax.update_config(name, other)
      tf2jax.update_config(name, TFPRIMS_DEFAULTS.get(name, default))


def test_unknown_options_raise_value_and_key_errors():
  with pytest.raises(ValueError, match="not found in config"):
    tf2jax.update_config("no_such_option", True)
  with pytest.raises(KeyError):
    tf2jax.get_config("no_such_option")
  with pytest.raises(KeyError):
    with tf2jax.override_config("no_such_option", True):
      pass
  with pytest.raises(tfprims.UnknownConfigError, match="no_such_option"):
    tfprims.update_config("no_such_option", 1)


def test_noop_options_say_so_once():
  tfprims_config._noted.discard("infer_cumulative_reduction_from_jax2tf")
  with pytest.warns(UserWarning, match="no effect: tfprims does not convert XlaReduceWindow"):
    with tf2jax.override_config("infer_cumulative_reduction_from_jax2tf", False):
      pass
  with warnings.catch_warnings():
    warnings.simplefilter("error")
    with tf2jax.override_config("infer_cumulative_reduction_from_jax2tf", False):
      pass


# --- convert and its params -----------------------------------------------------------


def _dense_model():
  w = tf.Variable(RNG.normal(size=(3, 2)).astype(np.float32), name="kernel")
  b = tf.Variable(np.zeros(2, np.float32), name="bias")
  steps = tf.Variable(0, name="steps", trainable=False)

  @tf.function
  def forward(x):
    steps.assign_add(1)
    return tf.nn.relu(tf.matmul(x, w) + b)

  return forward, (w, b, steps)


def test_convert_params_carry_trainable_and_name():
  forward, (w, b, steps) = _dense_model()
  jax_fn, params = tf2jax.convert(forward, np.zeros_like(X))
  assert set(params) == {"kernel", "bias", "steps"}
  for key, var in zip(("kernel", "bias", "steps"), (w, b, steps)):
    p = params[key]
    assert isinstance(p, tf2jax.Variable) and isinstance(p, np.ndarray)
    assert p.trainable == var.trainable and p.name == var.name
    np.testing.assert_array_equal(p, var.numpy())
    assert not p.flags.writeable  # a view of tfprims' read-only params
  trainable = {k for k, v in params.items() if v.trainable}
  assert trainable == {"kernel", "bias"}
  # tfprims' own convert keeps plain arrays and param_specs.
  _, plain = tfprims.convert(forward, np.zeros_like(X))
  assert type(plain["kernel"]) is np.ndarray and not plain["kernel"].flags.writeable

  out, new_params = jax_fn(params, X)
  _close(out, forward(X))
  assert int(new_params["steps"]) == int(steps.numpy()) == 1
  # jit and grad take the Variable params as they are.
  _close(jax.jit(lambda p, x: jax_fn(p, x)[0])(params, X), forward(X))
  trainable = {k: v for k, v in params.items() if v.trainable}
  grads = jax.grad(lambda t: jnp.sum(jax_fn(t | {"steps": params["steps"]}, X)[0]))(trainable)
  with tf.GradientTape() as tape:
    y = tf.reduce_sum(tf.nn.relu(tf.matmul(X, w) + b))
  _close(grads["kernel"], tape.gradient(y, w))
  assert params["kernel"].assign(np.zeros((3, 2), np.float32)).name == w.name


def test_convert_takes_jax_tracers_as_example_args():
  @tf.function
  def f(x):
    return tf.sin(x) * 2.0

  def jax_side(x):
    fn, params = tf2jax.convert(f, x)  # x is a tracer here
    assert fn.input_specs[0].shape == (4, 3)
    return fn(params, x)[0]

  _close(jax.jit(jax_side)(X), f(X))


def test_convert_functional_and_its_refusal_of_variables():
  f = tf.function(lambda x: tf.tanh(x) - x)
  jax_fn = tf2jax.convert_functional(f, np.zeros_like(X))
  _close(jax_fn(X), f(X))
  assert isinstance(jax_fn, tf2jax.AnnotatedFunction) and jax_fn.fn is jax_fn
  assert list(inspect.signature(jax_fn).parameters) == ["x", "rng"]
  forward, _ = _dense_model()
  with pytest.raises(ValueError, match="captures variable"):
    tf2jax.convert_functional(forward, np.zeros_like(X))


def test_annotated_function_attributes_and_signatures():
  @tf.function
  def f(x, y, *, scale=2.0):
    return {"out": x * y * scale}

  jax_fn, params = tf2jax.convert(f, tf.TensorSpec([None, 3], F32), tf.TensorSpec([3], F32))
  assert isinstance(jax_fn, tf2jax.AnnotatedFunction)
  assert jax_fn.fn is jax_fn and callable(jax_fn.fn)
  assert list(jax_fn.signature.parameters) == ["x", "y", "scale"]
  sig = inspect.signature(jax_fn)
  assert list(sig.parameters) == ["params", "x", "y", "scale", "rng"]
  assert sig.parameters["rng"].kind == inspect.Parameter.KEYWORD_ONLY
  assert sig.parameters["rng"].default is None
  args, kwargs = jax_fn.structured_inputs
  assert args[0].shape.as_list() == [None, 3] and kwargs == {"scale": 2.0}
  assert set(jax_fn.structured_outputs) == {"out"}
  y = np.float32([1, 2, 3])
  _close(jax_fn(params, X, y)[0], f(X, y))
  # A constructed AnnotatedFunction wraps any callable, as tf2jax's does.
  wrapped = tf2jax.AnnotatedFunction(
    lambda a: a + 1,
    None,
    None,
    inspect.Signature([inspect.Parameter("a", inspect.Parameter.POSITIONAL_OR_KEYWORD)]),
  )
  assert wrapped(1) == 2 and list(wrapped.signature.parameters) == ["a"]


def test_keyword_only_arguments_with_defaults():
  @tf.function
  def f(x, *, shift=1.0, training=False):
    return x + shift if not training else x - shift

  jax_fn = tf2jax.convert_functional(f, tf.TensorSpec([3], F32))
  x = np.float32([1, 2, 3])
  _close(jax_fn(x), f(x))  # defaults as traced
  _close(jax_fn(x, shift=1.0, training=False), f(x))
  with pytest.raises(ValueError, match="unexpected literal value 2.0"):
    jax_fn(x, shift=2.0)


def test_rng_keyword_and_its_missing_error():
  f = tf.function(lambda x: x + tf.random.uniform([3]))
  jax_fn = tf2jax.convert_functional(f, tf.TensorSpec([3], F32))
  x = np.zeros(3, np.float32)
  a = jax_fn(x, rng=jax.random.PRNGKey(42))
  np.testing.assert_array_equal(a, jax_fn(x, rng=jax.random.PRNGKey(42)))
  assert np.all((0 <= np.asarray(a)) & (np.asarray(a) < 1))
  assert not np.array_equal(a, jax_fn(x, rng=jax.random.PRNGKey(0)))
  with pytest.raises(ValueError, match="PRNG key required"):
    jax_fn(x)
  with pytest.raises(TypeError):
    jax_fn(x, jax.random.PRNGKey(42))  # rng is keyword-only


# --- errors ------------------------------------------------------------------------


def test_user_mistakes_raise_the_builtin_errors_tf2jax_raises():
  jax_fn = tf2jax.convert_functional(
    tf.function(lambda x, d: x * d["a"]), tf.TensorSpec([2, 3], F32), {"a": tf.TensorSpec([3], F32)}
  )
  d = {"a": np.ones(3, np.float32)}
  with pytest.raises(ValueError, match="incompatible input shape"):
    jax_fn(np.ones((2, 4), np.float32), d)
  with pytest.raises(ValueError, match="incompatible input dtype"):
    jax_fn(np.ones((2, 3), np.int32), d)  # tfprims checks dtypes by default
  with pytest.raises(tf2jax.MissingInputError, match="missing"):
    jax_fn(np.ones((2, 3), np.float32))
  with pytest.raises(tf2jax.MissingInputError, match=r"missing inputs: d\['a'\]"):
    jax_fn(np.ones((2, 3), np.float32), {"b": np.ones(3, np.float32)})
  with pytest.raises(TypeError):  # a call that does not match the signature
    jax_fn(np.ones((2, 3), np.float32), d, d)

  v = tf.Variable(np.ones(3, np.float32), name="v")
  fn, params = tf2jax.convert(tf.function(lambda x: x * v), tf.TensorSpec([3], F32))
  with pytest.raises(ValueError, match="missing"):
    fn({}, np.ones(3, np.float32))

  @tf.function
  def unsupported(x):  # a converted function has no deadline
    deadline = tf_ops.get_default_graph().create_op("GetDeadline", [], [tf.int64]).outputs[0]
    return x[0] + tf.cast(deadline, F32)

  with pytest.raises(ValueError, match="Unsupported operations in graph"):
    tf2jax.convert_functional(unsupported, tf.TensorSpec([3], F32))


# --- SavedModels ---------------------------------------------------------------------


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
  module = tf.Module()
  module.w = tf.Variable(RNG.normal(size=(3, 2)).astype(np.float32), name="w")
  module.f = tf.function(lambda x: tf.matmul(x, module.w))
  module.f(tf.zeros([4, 3]))
  module.g = tf.function(lambda x: tf.sin(x))
  module.g(tf.zeros([4, 3]))
  module.g(tf.zeros([2], tf.float32))
  module.h = tf.function(lambda x: tf.cos(x) * 2.0)
  module.h(tf.zeros([5]))
  path = str(tmp_path_factory.mktemp("saved") / "model")
  tf.saved_model.save(module, path)
  return tf.saved_model.load(path)


def test_convert_from_restored(saved):
  jax_fn, params = tf2jax.convert_from_restored(saved.f)
  assert isinstance(jax_fn, tf2jax.AnnotatedFunction)
  assert set(params) == {"w"} and params["w"].trainable and params["w"].name == "w:0"
  out, new_params = jax_fn(params, X)
  _close(out, saved.f(X))
  _close(new_params["w"], saved.w.numpy())
  assert list(jax_fn.signature.parameters) == ["x"]
  assert list(inspect.signature(jax_fn).parameters) == ["params", "x", "rng"]

  pure = tf2jax.convert_functional_from_restored(saved.h)
  x = np.arange(5, dtype=np.float32)
  _close(pure(x), saved.h(x))
  with pytest.raises(ValueError, match="variable"):
    tf2jax.convert_functional_from_restored(saved.f)


def test_ambiguous_restored_signature_is_a_value_error(saved):
  with pytest.raises(ValueError, match="2 concrete functions"):
    tf2jax.convert_from_restored(saved.g)
  # tf2jax's advice: pick one with example args (tfprims takes them here too).
  fn = tf2jax.convert_functional_from_restored(saved.g, tf.TensorSpec([2], F32))
  x = np.float32([0.5, 1.5])
  _close(fn(x), saved.g(x))


# --- options: input checks -------------------------------------------------------------


def test_strict_shape_check():
  f = tf.function(lambda x: x * 2.0)
  jax_fn = tf2jax.convert_functional(f, np.zeros((10, 5), np.float32))
  x = RNG.normal(size=(20, 5)).astype(np.float32)
  with pytest.raises(ValueError, match="shape"):
    jax_fn(x)
  with tf2jax.override_config("strict_shape_check", False):
    _close(jax_fn(x), f(x))


def test_strict_dtype_check():
  f = tf.function(lambda x: tf.sin(x) * x)
  jax_fn = tf2jax.convert_functional(f, np.zeros(4, np.float32))
  with pytest.raises((ValueError, TypeError), match="dtype"):
    jax_fn(np.arange(4, dtype=np.int32))
  want = f(np.arange(4, dtype=np.float32))
  with tf2jax.override_config("strict_dtype_check", False):
    out = jax_fn(np.arange(4, dtype=np.int32))  # non-float: cast to the signature's
    assert out.dtype == jnp.float32
    _close(out, want)
    half = jax_fn(jnp.arange(4, dtype=jnp.bfloat16))  # floats keep their precision
    assert half.dtype == jnp.bfloat16
    _close(half, want, rtol=2e-2, atol=2e-2)


# --- options: constants to bfloat16 ----------------------------------------------------------


@pytest.mark.parametrize(
  "dtype,option",
  [
    (tf.float32, "force_const_float32_to_bfloat16"),
    (tf.float64, "force_const_float64_to_bfloat16"),
  ],
)
def test_force_const_to_bfloat16(dtype, option):
  @tf.function
  def forward(x):
    return x * tf.constant(3.14, dtype=dtype) + tf.constant(1.0, dtype=dtype)

  spec = tf.TensorSpec([4, 3], dtype)
  with tf2jax.override_config(option, True):
    jax_fn = tf2jax.convert_functional(forward, spec)
  plain = tf2jax.convert_functional(forward, spec)
  x16 = jnp.asarray(X, jnp.bfloat16)
  want = forward(tf.constant(X, dtype)).numpy()
  with tf2jax.override_config("strict_dtype_check", False):
    out = jax_fn(x16)  # the option was read when converting
    promoted = plain(x16)
    jaxpr = jax.make_jaxpr(jax_fn)(x16)
  assert out.dtype == jnp.bfloat16
  assert promoted.dtype != jnp.bfloat16  # without it, float constants promote
  _close(out, want, rtol=2e-2, atol=2e-2)
  assert [e.primitive.name for e in jaxpr.eqns] == ["tf.Mul", "tf.AddV2"]
  assert all(v.aval.dtype == jnp.bfloat16 for e in jaxpr.eqns for v in e.outvars)


# --- options: gradients -------------------------------------------------------------------


def _deliberately_wrong_gradient():
  @tf.function
  @tf.custom_gradient
  def forward(x):
    e = tf.exp(x)

    def grad(dy):
      return dy * tf.sin(x) + e  # deliberately not the derivative

    return tf.reduce_sum(e), grad

  return forward


def test_convert_custom_gradient():
  forward = _deliberately_wrong_gradient()
  x = X[0]
  with tf2jax.override_config("convert_custom_gradient", True):
    custom = tf2jax.convert_functional(forward, np.zeros_like(x))
  with tf2jax.override_config("convert_custom_gradient", False):
    plain = tf2jax.convert_functional(forward, np.zeros_like(x))
  _close(custom(x), forward(x))
  _close(plain(x), forward(x))
  # Read when converting: each keeps its setting whatever the config is now.
  _close(jax.grad(custom)(x), _tf_grad(forward, x))  # TF's custom one
  _close(jax.grad(plain)(x), _tf_grad(lambda t: tf.reduce_sum(tf.exp(t)), x))
  _close(jax.jit(jax.grad(plain))(x), np.exp(x))
  names = {e.primitive.name for e in jax.make_jaxpr(plain)(x).eqns}
  assert "tf.CustomGradient" not in names


def test_raise_on_prevent_gradient():
  @tf.function
  def prevent(x):
    return tf.raw_ops.PreventGradient(input=x * x, message="prevented")

  # (A Python float example would make TF trace a literal: use a numpy scalar.)
  jax_fn = tf2jax.convert_functional(prevent, np.float32(0.0))
  with pytest.raises(LookupError, match="prevented"):
    jax.grad(jax_fn)(3.14)
  with pytest.raises(LookupError):
    _tf_grad(prevent, np.float32(3.14))  # TF refuses too
  with tf2jax.override_config("raise_on_prevent_gradient", False):
    allowed = tf2jax.convert_functional(prevent, np.float32(0.0))
  with pytest.warns(UserWarning, match="PreventGradient node .* is ignored.*prevented"):
    _close(allowed(3.14), prevent(np.float32(3.14)))
  with pytest.warns(UserWarning, match="is ignored"):
    g = jax.grad(allowed)(3.14)
  np.testing.assert_allclose(g, 6.28, rtol=1e-6)
  _close(g, _tf_grad(lambda t: t * t, np.float32(3.14)))


def _graph_serialized_relu():
  """What jax2tf's graph serialization made of jax.nn.relu: max(x, 0) in a
  '_relu_' scope (current jax2tf serializes natively; the graph is built by hand)."""

  @tf.function
  def f(x):
    with tf.name_scope("jax2tf_fn_"):
      with tf.name_scope("pjit_relu_"):
        y = tf.maximum(x, tf.constant(0.0))
      return tf.identity(y * 3.0, name="jax2tf_out")

  return f


def test_infer_relu_from_jax2tf():
  f = _graph_serialized_relu()
  x = np.float32([-1.0, 0.0, 2.0])
  relu = tf2jax.convert_functional(f, tf.TensorSpec([3], F32))  # on by default
  with tf2jax.override_config("infer_relu_from_jax2tf", False):
    maximum = tf2jax.convert_functional(f, tf.TensorSpec([3], F32))
  _close(relu(x), f(x))
  _close(maximum(x), f(x))
  assert "tf.Relu" in {e.primitive.name for e in jax.make_jaxpr(relu)(x).eqns}
  assert "tf.Maximum" in {e.primitive.name for e in jax.make_jaxpr(maximum)(x).eqns}
  grad = lambda fn: jax.grad(lambda t: jnp.sum(fn(t)))(x)
  _close(grad(maximum), _tf_grad(f, x))  # TF: 3 at the tie
  _close(grad(relu), jax.grad(lambda t: jnp.sum(jax.nn.relu(t) * 3.0))(x))  # JAX: 0
  assert float(grad(relu)[1]) == 0.0 and float(_tf_grad(f, x)[1]) == 3.0
  # Ordinary graphs (no jax2tf scope) are left alone.
  plain = tf.function(lambda t: tf.maximum(t, 0.0))
  fn = tf2jax.convert_functional(plain, tf.TensorSpec([3], F32))
  assert "tf.Maximum" in {e.primitive.name for e in jax.make_jaxpr(fn)(x).eqns}


def test_infer_cumulative_reduction_from_jax2tf_is_a_noop():
  f = tf.function(lambda x: tf.cumsum(x, axis=1))
  for value in (True, False):
    with warnings.catch_warnings():
      warnings.simplefilter("ignore")
      with tf2jax.override_config("infer_cumulative_reduction_from_jax2tf", value):
        fn = tf2jax.convert_functional(f, tf.TensorSpec([4, 3], F32))
    _close(fn(X), f(X))
  from tensorflow.compiler.tf2xla.python import xla as tf2xla

  @tf.function(input_signature=[tf.TensorSpec([], F32)] * 2)
  def add(a, b):
    return a + b

  @tf.function
  def reduce_window(x):  # how jax2tf's graph serialization wrote cumsum
    return tf2xla.reduce_window(
      x,
      0.0,
      add.get_concrete_function(),
      window_dimensions=[1, 3],
      window_strides=[1, 1],
      padding=[[0, 0], [2, 0]],
    )

  # The window sum is read as XlaReduceWindow whatever the option says.
  fn = tf2jax.convert_functional(reduce_window, tf.TensorSpec([4, 3], F32))
  assert "tf.XlaReduceWindow" in {e.primitive.name for e in jax.make_jaxpr(fn)(X).eqns}
  _close(fn(X), np.cumsum(np.asarray(X), axis=1))


# --- options: asserts ------------------------------------------------------------------


def _asserting():
  @tf.function
  def f(x):
    tf.debugging.assert_positive(x, message="x must be positive")
    return x * 2.0

  return f


def _checking_numerics():
  return tf.function(lambda x: tf.debugging.check_numerics(x, "x has NaNs") * 2.0)


def _tf_error(f, x) -> str:
  with pytest.raises(tf.errors.InvalidArgumentError) as info:
    f(x)
  return info.value.message


def test_assert_raises_tf_message_on_known_values_and_with_runtime_checks():
  f = _asserting()
  jax_fn = tf2jax.convert_functional(f, tf.TensorSpec([3], F32))
  good, bad = np.float32([1, 2, 3]), np.float32([1, -2, 3])
  _close(jax_fn(good), f(good))
  tf_message = _tf_error(f, bad)
  expected = (
    "assertion failed: [x must be positive.  ] [Condition x > 0 did not hold "
    "element-wise:] [x (x:0) = ] [1 -2 3]"
  )
  assert expected in tf_message
  with pytest.raises(tfprims.RuntimeCheckError) as info:  # an eager call: like TF
    jax_fn(bad)
  assert expected in str(info.value)
  _close(jax.jit(jax_fn)(bad), 2 * bad)  # jit: not checked by default
  with tfprims.override_config("runtime_checks", True):
    checked = jax.jit(tf2jax.convert_functional(f, tf.TensorSpec([3], F32)))
    with pytest.raises(Exception, match=r"assertion failed: \[x must be positive"):
      jax.block_until_ready(checked(bad))


def test_check_numerics_raises_tf_message_on_known_values():
  f = _checking_numerics()
  nan = np.float32([1, np.nan, 3])
  assert "x has NaNs : Tensor had NaN values" in _tf_error(f, nan)
  jax_fn = tf2jax.convert_functional(f, tf.TensorSpec([3], F32))
  with pytest.raises(tfprims.RuntimeCheckError, match="x has NaNs : Tensor had NaN"):
    jax_fn(nan)
  np.testing.assert_array_equal(jax.jit(jax_fn)(nan), 2 * nan)


def test_enable_checkify_for_asserts():
  f, g = _asserting(), _checking_numerics()
  good, bad, nan = np.float32([1, 2, 3]), np.float32([1, -2, 3]), np.float32([1, np.nan, 3])
  with tf2jax.override_config("enable_checkify_for_asserts", True):
    checked_f = jax.jit(checkify.checkify(tf2jax.convert_functional(f, tf.TensorSpec([3], F32))))
    checked_g = jax.jit(checkify.checkify(tf2jax.convert_functional(g, tf.TensorSpec([3], F32))))
    for checked, fn in ((checked_f, f), (checked_g, g)):
      err, out = checked(good)
      assert err.get() is None
      _close(out, fn(good))
    err, _ = checked_f(bad)
    assert "assertion failed: [x must be positive.  ]" in err.get()
    assert "assertion failed: [x must be positive.  ]" in _tf_error(f, bad)
    err, _ = checked_g(nan)
    assert "x has NaNs : Tensor had NaN" in err.get()
  # Off (the default), a jitted function checks nothing.
  jax.clear_caches()
  for fn, x in ((f, bad), (g, nan)):
    plain = jax.jit(checkify.checkify(tf2jax.convert_functional(fn, tf.TensorSpec([3], F32))))
    assert plain(x)[0].get() is None


# --- options: XlaCallModule, resize, TensorList, tracing ---------------------------------------


def test_xlacallmodule_strict_checks():
  from jax.experimental import jax2tf

  def f(x):
    return jnp.sin(x) * jnp.exp(-x * x)

  tf_fn = tf.function(jax2tf.convert(f, native_serialization_platforms=("tpu",)), autograph=False)
  jax_fn = tf2jax.convert_functional(tf_fn, tf.TensorSpec(X.shape, F32))
  with pytest.raises(ValueError, match="Unsupported backend: 'cpu' not in"):
    jax_fn(X)
  with tf2jax.override_config("xlacallmodule_strict_checks", False):
    with pytest.warns(UserWarning, match="running it anyway"):
      out = jax_fn(X)
  _close(out, f(X))  # TF cannot run a TPU module on CPU: compare with the JAX original


@pytest.mark.parametrize("precision", ["highest", "default"])
def test_resize_bilinear_precision_is_a_noop(precision):
  f = tf.function(lambda im: tf.compat.v1.image.resize_bilinear(im, [7, 5]))
  images = RNG.normal(size=(2, 4, 3, 2)).astype(np.float32)
  with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    with tf2jax.override_config("resize_bilinear_precision", precision):
      jax_fn = tf2jax.convert_functional(f, tf.TensorSpec(images.shape, F32))
  _close(jax_fn(images), f(images))


def test_disable_assert_in_tensor_list_get_item_is_a_noop():
  @tf.function
  def f(x):
    ta = tf.TensorArray(tf.float32, size=3)
    for i in tf.range(3):
      ta = ta.write(i, x * tf.cast(i, tf.float32))
    return ta.read(2) + ta.stack()[1]

  for value in (False, True):
    with warnings.catch_warnings():
      warnings.simplefilter("ignore")
      with tf2jax.override_config("disable_assert_in_tensor_list_get_item", value):
        jax_fn = tf2jax.convert_functional(f, tf.TensorSpec([3], F32))
    _close(jax_fn(X[0]), f(X[0]))


def test_skip_variables_evaluation_inside_tf_tracing():
  v = tf.Variable(np.float32([1, 2, 3]), name="scale")
  f = tf.function(lambda x: x * v)
  converted = {}

  @tf.function
  def traced(x):
    try:
      tf2jax.convert(f, tf.TensorSpec([3], F32))
    except ValueError as e:
      converted["error"] = str(e)
    with tf2jax.override_config("skip_variables_evaluation_inside_tf_tracing", True):
      converted["fn"], converted["params"] = tf2jax.convert(f, tf.TensorSpec([3], F32))
    return x

  traced(tf.zeros([3]))
  assert "inside a TF tracing context" in converted["error"]
  fn, params = converted["fn"], converted["params"]
  assert params == {} and set(fn.param_specs) == {"scale"}
  x = np.float32([4, 5, 6])
  _close(fn({"scale": v.numpy()}, x)[0], f(x))
