"""Converted functions under sharding: jit with sharded inputs, Explicit meshes and
shard_map (with its varying-axes check), on 8 simulated CPU devices.

Each case runs in a subprocess because the device count is fixed when JAX starts.
"""

import os
import subprocess
import sys
import textwrap

import pytest

_PRELUDE = textwrap.dedent("""
    import numpy as np, tensorflow as tf, jax, jax.numpy as jnp
    from jax.sharding import AxisType, NamedSharding, PartitionSpec as P
    import tfprims

    rng = np.random.default_rng(0)
    w1 = tf.Variable(rng.normal(size=(6, 8)).astype(np.float32))
    b1 = tf.Variable(rng.normal(size=(8,)).astype(np.float32))
    w2 = tf.Variable(rng.normal(size=(8, 4)).astype(np.float32))

    @tf.function
    def model(x):
      h = tf.nn.relu(tf.nn.bias_add(tf.matmul(x, w1), b1))
      return tf.tanh(tf.matmul(h, w2)) * 2.0 + h[:, :4]

    fn, params = tfprims.convert(model, tf.TensorSpec([None, 6], tf.float32))
    f = lambda p, x: fn(p, x)[0]
    x = rng.normal(size=(16, 6)).astype(np.float32)
    expected = model(x).numpy()
    with tf.GradientTape() as tape:
      loss = tf.reduce_sum(model(x) ** 2)
    expected_grad = tape.gradient(loss, w1).numpy()
    loss_fn = lambda p, x: jnp.sum(f(p, x) ** 2)
    w1_name = [k for k in params if params[k].shape == (6, 8)][0]
    assert len(jax.devices()) == 8
""")

_CASES = {
  "jit_sharded_inputs": """
        mesh = jax.make_mesh((4, 2), ("data", "model"), axis_types=(AxisType.Auto,) * 2)
        xs = jax.device_put(x, NamedSharding(mesh, P("data")))
        ps = {k: jax.device_put(v, NamedSharding(mesh, P())) for k, v in params.items()}
        out = jax.jit(f)(ps, xs)
        np.testing.assert_allclose(out, expected, rtol=1e-5, atol=1e-5)
        g = jax.jit(jax.grad(loss_fn))(ps, xs)[w1_name]
        np.testing.assert_allclose(g, expected_grad, rtol=1e-4, atol=1e-4)
    """,
  "explicit_mesh_propagates": """
        mesh = jax.make_mesh((4, 2), ("data", "model"), axis_types=(AxisType.Explicit,) * 2)
        with jax.sharding.set_mesh(mesh):
          xs = jax.device_put(x, NamedSharding(mesh, P("data")))
          out = jax.jit(f)(params, xs)
          # Like the same model in jnp: the batch sharding flows through every op.
          assert out.sharding.spec == P("data", None), out.sharding
          np.testing.assert_allclose(out, expected, rtol=1e-5, atol=1e-5)
    """,
  "shard_map_grad": """
        mesh = jax.make_mesh((8,), ("i",), axis_types=(AxisType.Auto,))
        def local_loss(p, xb):
          return jax.lax.psum(loss_fn(p, xb), "i")
        sm = jax.shard_map(jax.grad(local_loss), mesh=mesh, in_specs=(P(), P("i")),
                           out_specs=P(), check_vma=True)
        g = jax.jit(sm)(params, x)[w1_name]
        np.testing.assert_allclose(g, expected_grad, rtol=1e-4, atol=1e-4)
        out = jax.jit(jax.shard_map(f, mesh=mesh, in_specs=(P(), P("i")),
                                    out_specs=P("i"), check_vma=True))(params, x)
        np.testing.assert_allclose(out, expected, rtol=1e-5, atol=1e-5)
    """,
}


@pytest.mark.parametrize("case", sorted(_CASES))
def test_sharding(case):
  env = dict(
    os.environ,
    XLA_FLAGS="--xla_force_host_platform_device_count=8",
    JAX_PLATFORMS="cpu",
    TF_CPP_MIN_LOG_LEVEL="3",
  )
  code = _PRELUDE + textwrap.dedent(_CASES[case]) + "\nprint('OK')\n"
  proc = subprocess.run(
    [sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300
  )
  assert proc.returncode == 0 and proc.stdout.strip().endswith("OK"), proc.stderr[-3000:]
