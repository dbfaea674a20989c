"""The last tf2jax drop-in gaps: shape arithmetic of shape-polymorphic graphs
through BroadcastArgs/BroadcastTo, tf2jax's param and spec types, the TF check of
resize attributes, and tf2jax's error phrases next to tfprims' own."""

import jax
import jax.numpy as jnp
import numpy as np
import tensorflow as tf
from jax import export

from tfprims.compat import tf2jax

F32 = tf.float32


@tf.function(input_signature=[tf.TensorSpec([None, 4], F32), tf.TensorSpec([4], F32)])
def _broadcast_dynamic(x, y):
  return tf.broadcast_to(y, tf.broadcast_dynamic_shape(tf.shape(x), tf.shape(y))) + x


def test_broadcast_args_and_broadcast_to_of_symbolic_dims_jit_and_export():
  fn = tf2jax.convert_functional(_broadcast_dynamic, tf.TensorSpec([None, 4], F32),
                                 tf.TensorSpec([4], F32))
  x = np.arange(12, dtype=np.float32).reshape(3, 4)
  y = np.arange(4, dtype=np.float32)
  want = _broadcast_dynamic(x, y).numpy()
  np.testing.assert_allclose(jax.jit(fn)(x, y), want)
  b, = export.symbolic_shape("b")
  exp = export.export(jax.jit(fn))(jax.ShapeDtypeStruct((b, 4), jnp.float32),
                                   jax.ShapeDtypeStruct((4,), jnp.float32))
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
  exp = export.export(jax.jit(fn))(jax.ShapeDtypeStruct((a, 1), jnp.float32),
                                   jax.ShapeDtypeStruct((c,), jnp.float32))
  x = np.arange(3, dtype=np.float32).reshape(3, 1)
  y = np.arange(5, dtype=np.float32)
  np.testing.assert_allclose(exp.call(x, y), f(x, y).numpy())
