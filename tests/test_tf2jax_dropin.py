"""The last tf2jax drop-in gaps: shape arithmetic of shape-polymorphic graphs
through BroadcastArgs/BroadcastTo, tf2jax's param and spec types, the TF check of
resize attributes, and tf2jax's error phrases next to tfprims' own."""

import functools
import warnings

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import tensorflow as tf
from jax import export

from tfprims.compat import tf2jax

F32 = tf.float32


@tf.function(input_signature=[tf.TensorSpec([None, 4], F32), tf.TensorSpec([4], F32)])
def _broadcast_dynamic(x, y):
  return tf.broadcast_to(y, tf.broadcast_dynamic_shape(tf.shape(x), tf.shape(y))) + x


def test_broadcast_args_and_broadcast_to_of_symbolic_dims_jit_and_export():
  fn = tf2jax.convert_functional(
    _broadcast_dynamic, tf.TensorSpec([None, 4], F32), tf.TensorSpec([4], F32)
  )
  x = np.arange(12, dtype=np.float32).reshape(3, 4)
  y = np.arange(4, dtype=np.float32)
  want = _broadcast_dynamic(x, y).numpy()
  np.testing.assert_allclose(jax.jit(fn)(x, y), want)
  (b,) = export.symbolic_shape("b")
  exp = export.export(jax.jit(fn))(
    jax.ShapeDtypeStruct((b, 4), jnp.float32), jax.ShapeDtypeStruct((4,), jnp.float32)
  )
  assert str(exp.out_avals[0].shape) == "(b, 4)"
  np.testing.assert_allclose(exp.call(x, y), want)
  x5 = np.ones((5, 4), np.float32)
  np.testing.assert_allclose(exp.call(x5, y), _broadcast_dynamic(x5, y).numpy())


def test_broadcast_args_of_two_symbolic_shapes():
  @tf.function(input_signature=[tf.TensorSpec([None, 1], F32), tf.TensorSpec([None], F32)])
  def f(x, y):
    shape = tf.broadcast_dynamic_shape(tf.shape(x), tf.shape(y))
    return tf.broadcast_to(x, shape) * tf.broadcast_to(y, shape)

  fn = tf2jax.convert_functional(f, tf.TensorSpec([None, 1], F32), tf.TensorSpec([None], F32))
  a, c = export.symbolic_shape("a, c")
  exp = export.export(jax.jit(fn))(
    jax.ShapeDtypeStruct((a, 1), jnp.float32), jax.ShapeDtypeStruct((c,), jnp.float32)
  )
  x = np.arange(3, dtype=np.float32).reshape(3, 1)
  y = np.arange(5, dtype=np.float32)
  np.testing.assert_allclose(exp.call(x, y), f(x, y).numpy())


# --- tf2jax's types: params, specs, bfloat16 runs, round trips ---------------------------------


class _Dense(tf.Module):
  def __init__(self):
    super().__init__()
    self.w = tf.Variable(np.arange(6, dtype=np.float32).reshape(3, 2), name="w")
    self.c = tf.Variable(np.ones((2,), np.float32), trainable=False, name="c")

  @tf.function(input_signature=[tf.TensorSpec([None, 3], F32, name="x")])
  def __call__(self, x):
    return tf.matmul(x, self.w) + self.c


def _trainables(params):
  return {k: (type(v).__name__, v.trainable) for k, v in params.items()}


def test_params_trainable_and_output_specs_as_tf2jax_in_every_path(tmp_path):
  m = _Dense()
  x = np.ones((2, 3), np.float32)
  tf.saved_model.save(m, str(tmp_path))
  restored = tf.saved_model.load(str(tmp_path))
  want_out = tf.TensorSpec([None, 2], F32, name="Identity")  # what tf2jax 0.3.8 gives
  for fn, params in (
    tf2jax.convert(m.__call__, x),
    tf2jax.convert_from_restored(restored.__call__),
  ):
    assert _trainables(params) == {"w": ("Variable", True), "c": ("Variable", False)}
    assert fn.structured_outputs == want_out
    assert fn.structured_outputs.name == "Identity"
    assert fn.structured_inputs == ((tf.TensorSpec([None, 3], F32, name="x"),), {})
    assert list(fn.signature.parameters) == ["x"]
    np.testing.assert_allclose(fn(params, x)[0], m(x).numpy())
  fn = tf2jax.convert_functional(tf.function(lambda x: {"y": x * 2}), x)
  assert fn.structured_outputs["y"].name == "Identity"
  assert isinstance(fn.structured_outputs["y"], tf.TensorSpec)


@pytest.mark.parametrize(
  "dtype,option",
  [
    (tf.float32, "force_const_float32_to_bfloat16"),
    (tf.float64, "force_const_float64_to_bfloat16"),
  ],
)
def test_force_const_to_bfloat16_accepts_bfloat16_inputs(dtype, option):
  @tf.function
  def forward(x):
    return x * tf.constant(3.14, dtype=dtype) + tf.constant(1.0, dtype=dtype)

  with tf2jax.override_config(option, True):
    fn = tf2jax.convert_functional(forward, tf.TensorSpec([4, 3], dtype))
    fn_p, _ = tf2jax.convert(forward, tf.TensorSpec([4, 3], dtype))
  x16 = jnp.ones((4, 3), jnp.bfloat16)
  assert tf2jax.get_config("strict_dtype_check")  # tfprims' default, and still accepted
  for out in (fn(x16), jax.jit(fn)(x16), fn_p({}, x16)[0]):
    assert out.dtype == jnp.bfloat16
    np.testing.assert_allclose(np.asarray(out, np.float32), 4.140625, rtol=1e-2)
  with pytest.raises(TypeError):  # other dtypes are still checked
    fn(np.ones((4, 3), np.int32))


def test_jax2tf_saved_model_round_trip(tmp_path):
  from jax.experimental import jax2tf

  m = _Dense()
  x = np.ones((2, 3), np.float32)
  jax_func, jax_params = tf2jax.convert(m.__call__, np.zeros_like(x))
  jax_fn_no_rng = functools.partial(jax_func, rng=jax.random.PRNGKey(0))
  tf_fn = tf.function(jax2tf.convert(jax_fn_no_rng, with_gradient=True), autograph=False)
  module = tf.Module()
  module.params = tf.nest.map_structure(tf.Variable, jax_params)
  module.f = tf.function(
    lambda x: tf_fn(module.params, x)[0],
    autograph=False,
    input_signature=[tf.TensorSpec([2, 3], F32)],
  )
  tf.saved_model.save(module, str(tmp_path))
  restored = tf.saved_model.load(str(tmp_path))
  np.testing.assert_allclose(restored.f(x).numpy(), m(x).numpy())
  with warnings.catch_warnings():
    warnings.simplefilter("ignore")  # jax2tf's custom gradient is not in TF's registry
    fn, params = tf2jax.convert_from_restored(restored.f)
    out = fn(params, x)[0]
  np.testing.assert_allclose(out, m(x).numpy())
  assert all(type(v).__name__ == "Variable" and v.trainable for v in params.values())


# --- resize attributes TF rejects --------------------------------------------------------------


@pytest.mark.parametrize("op", [tf.raw_ops.ResizeBilinear, tf.raw_ops.ResizeNearestNeighbor])
def test_resize_align_corners_and_half_pixel_centers_both_true_is_a_value_error(op):
  @tf.function
  def f(x):
    return op(images=x, size=[8, 8], align_corners=True, half_pixel_centers=True)

  x = np.ones((1, 4, 4, 1), np.float32)
  with pytest.raises(tf.errors.InvalidArgumentError, match="half_pixel_centers is True"):
    f(x)
  fn = tf2jax.convert_functional(f, tf.TensorSpec([1, 4, 4, 1], F32))
  for call in (fn, jax.jit(fn)):
    with pytest.raises(
      ValueError, match="If half_pixel_centers is True, align_corners must be False"
    ):
      call(x)
  with pytest.raises(ValueError, match="are not supported"):  # tf2jax's phrase
    fn(x)


# --- tf2jax's error phrases beside tfprims' own ---------------------------------------------


def test_check_numerics_says_found_inf_or_nan_values():
  import tfprims

  @tf.function
  def f(x):
    return tf.debugging.check_numerics(x, "x is bad") * 2

  fn = tf2jax.convert_functional(f, tf.TensorSpec([3], F32))
  with pytest.raises(tfprims.RuntimeCheckError, match="Found Inf values"):
    fn(np.float32([1, np.inf, 3]))
  with pytest.raises(tfprims.RuntimeCheckError, match="Found NaN values") as info:
    fn(np.float32([1, np.nan, 3]))
  assert "x is bad : Tensor had NaN values" in str(info.value)  # TF's message too
  with pytest.raises(ValueError, match="Found Inf values.*Found NaN values"):
    fn(np.float32([np.inf, np.nan, 3]))


def test_ensure_shape_says_expected_shape():
  import tfprims

  @tf.function(input_signature=[tf.TensorSpec(None, F32)])
  def f(x):
    return tf.raw_ops.EnsureShape(input=x, shape=[2, 3])

  fn = tf2jax.convert_functional(f, tf.TensorSpec(None, F32))
  with pytest.raises(tfprims.OpError, match=r"Expected shape=\(2, 3\), found \(2, 4\)"):
    fn(np.ones((2, 4), np.float32))


def test_missing_params_say_some_parameters_are_missing():
  import tfprims

  v = tf.Variable(np.ones(3, np.float32), name="v")
  fn, params = tf2jax.convert(tf.function(lambda x: x * v), np.ones(3, np.float32))
  with pytest.raises(tfprims.InputStructureError, match="Some parameters are missing"):
    fn({}, np.ones(3, np.float32))
  with pytest.raises(ValueError, match=r"Some parameters are missing, \['v'\]"):
    jax.jit(fn)({}, np.ones(3, np.float32))


def test_several_concrete_functions_say_found_n_concrete_functions(tmp_path):
  from tfprims import saved_model

  module = tf.Module()
  module.f = tf.function(lambda x: x * 2)
  module.f(tf.ones([2]))
  module.f(tf.ones([3, 2]))
  tf.saved_model.save(module, str(tmp_path))
  restored = tf.saved_model.load(str(tmp_path))
  with pytest.raises(saved_model.AmbiguousSignatureError, match="Found 2 concrete functions"):
    tf2jax.convert_from_restored(restored.f)
  with pytest.raises(ValueError, match="Found 2 concrete functions"):
    tf2jax.convert_functional_from_restored(restored.f)


def test_resource_output_says_cannot_be_evaluated():
  import tfprims

  v = tf.Variable(1.0)

  @tf.function
  def f(x):
    del x
    return v.handle

  with pytest.raises(tfprims.UnsupportedInputError, match="cannot be evaluated"):
    tf2jax.convert(f, np.ones(3, np.float32))


def test_broadcast_gradient_args_of_symbolic_dims():
  @tf.function(input_signature=[tf.TensorSpec([None, 4], F32), tf.TensorSpec([4], F32)])
  def f(x, y):
    r0, r1 = tf.raw_ops.BroadcastGradientArgs(s0=tf.shape(x), s1=tf.shape(y))
    return tf.reduce_sum(x, r1) + tf.cast(tf.size(r0), F32)

  fn = tf2jax.convert_functional(f, tf.TensorSpec([None, 4], F32), tf.TensorSpec([4], F32))
  (b,) = export.symbolic_shape("b")
  exp = export.export(jax.jit(fn))(
    jax.ShapeDtypeStruct((b, 4), jnp.float32), jax.ShapeDtypeStruct((4,), jnp.float32)
  )
  x = np.arange(12, dtype=np.float32).reshape(3, 4)
  y = np.ones(4, np.float32)
  np.testing.assert_allclose(exp.call(x, y), f(x, y).numpy())
