"""TF Probability special functions whose values come from while loops run to
convergence (a trip count known only at run time): values and gradients vs TF, under
jit (reverse mode through tf.While.unbounded, docs/control_flow.md)."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import tensorflow as tf

import tfprims
from helpers import jaxpr_primitives

tfp = pytest.importorskip("tensorflow_probability")

CASES = {
  "igammainv": (
    lambda a, p: tfp.math.igammainv(a, p),
    np.float32([0.5, 2.0, 5.0, 11.0]),
    np.float32([0.2, 0.5, 0.9, 0.03]),
  ),
  "lambertw": (
    lambda a, b: tfp.math.lambertw(a * b),
    np.float32([0.5, 2.0, 5.0, 0.1]),
    np.float32([1.0, 1.0, 2.0, -2.0]),
  ),
  # TF has no gradient for the order v (None, zero here). Its custom gradient for z
  # bypasses the loop, whose own partials are NaN at some points: no cotangent
  # may flow back through it (0 * NaN).
  "bessel_ive": (
    lambda v, z: tfp.math.bessel_ive(v, z),
    np.float32([1.5, 0.5, 3.0, 0.0]),
    np.float32([2.0, 1.0, 10.0, 0.3]),
  ),
  "bessel_kve": (
    lambda v, z: tfp.math.bessel_kve(v, z),
    np.float32([1.5, 0.5, 3.0, 0.0]),
    np.float32([2.0, 1.0, 10.0, 0.3]),
  ),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_gradients_through_loops_run_to_convergence_are_tfs(name):
  f, a, b = CASES[name]
  tf_f = tf.function(f)
  fn = tfprims.convert_functional(tf_f, tf.TensorSpec(a.shape), tf.TensorSpec(b.shape))
  assert "tf.While.unbounded" in jaxpr_primitives(jax.make_jaxpr(fn)(a, b))
  np.testing.assert_allclose(jax.jit(fn)(a, b), tf_f(a, b).numpy(), rtol=2e-6, atol=1e-7)
  grads = jax.jit(jax.grad(lambda a, b: jnp.sum(fn(a, b)), (0, 1)))(a, b)
  at, bt = tf.constant(a), tf.constant(b)
  with tf.GradientTape() as tape:
    tape.watch([at, bt])
    y = tf.reduce_sum(tf_f(at, bt))
  for got, want in zip(grads, tape.gradient(y, [at, bt])):
    want = np.zeros_like(got) if want is None else want.numpy()
    np.testing.assert_allclose(got, want, rtol=2e-5, atol=1e-6)
