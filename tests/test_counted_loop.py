"""tf.While (tfprims/ops/control_flow/counted.py) against lax.scan, which it means:
values eager and jitted, jvp, grad, vmap of any operand, and when it falls back to
lax.scan. The TF loops that become tf.While are tested against TF in
test_control_flow.py, test_rnn.py and test_tf1_control_flow.py."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from helpers import jaxpr_primitives
from tfprims.ops.control_flow import counted

W = np.array([[0.5, -0.2, 0.1], [0.3, 0.8, -0.4], [0.0, 0.2, 0.6]], np.float32)
H0 = np.array([0.3, -0.7, 1.1], np.float32)


def _loop(scan, length=6):
  """A loop with a closed-over weight, float/int/bool carries and ys of each kind."""

  def f(w, h0):
    def step(carry, _):
      i, h, flag = carry
      h = jnp.tanh(h @ w + i.astype(h.dtype) * 0.1)
      flag = flag ^ (h[0] > 0)
      return (i + 1, h, flag), {"h": h, "i": i * 2, "flag": flag, "s": h.sum()}

    return scan(step, (jnp.int32(0), h0, jnp.bool_(False)), length)

  return f


def _lax_scan(step, init, length):
  return jax.lax.scan(step, init, length=length)


OURS, THEIRS = _loop(counted.scan), _loop(_lax_scan)


def _close(a, b):
  for x, y in zip(jax.tree_util.tree_leaves(a), jax.tree_util.tree_leaves(b)):
    assert x.shape == y.shape and x.dtype == y.dtype
    if x.dtype == jax.dtypes.float0:  # the tangent of an integer output
      continue
    np.testing.assert_allclose(x, y, rtol=1e-6, atol=1e-6)


def test_values_eager_and_jitted():
  jaxpr = jax.make_jaxpr(OURS)(W, H0)
  assert "tf.While" in jaxpr_primitives(jaxpr) and "scan" not in jaxpr_primitives(jaxpr)
  (loop,) = [e for e in jaxpr.eqns if e.primitive.name == "tf.While"]
  assert loop.params["length"] == 6 and loop.params["num_consts"] == 1  # the weight
  _close(OURS(W, H0), THEIRS(W, H0))
  _close(jax.jit(OURS)(W, H0), THEIRS(W, H0))


def test_zero_trips():
  _close(jax.jit(_loop(counted.scan, 0))(W, H0), _loop(_lax_scan, 0)(W, H0))


def _loss(f):
  return lambda w, h0: (f(w, h0)[1]["h"] ** 2).sum() + f(w, h0)[0][1].sum()


def test_jvp_and_grad_are_the_scans():
  tw, th = np.ones_like(W), np.linspace(-1, 1, 3).astype(np.float32)
  _close(jax.jvp(OURS, (W, H0), (tw, th)), jax.jvp(THEIRS, (W, H0), (tw, th)))
  _close(jax.grad(_loss(OURS), (0, 1))(W, H0), jax.grad(_loss(THEIRS), (0, 1))(W, H0))
  _close(jax.jit(jax.grad(_loss(OURS)))(W, H0), jax.grad(_loss(THEIRS))(W, H0))


@pytest.mark.parametrize("in_axes", [(0, None), (None, 0), (0, 0), (None, 1)])
def test_vmap_rebinds_tf_while(in_axes):
  ws = np.stack([W, W * 0.5, -W])
  hs = np.stack([H0, -H0, H0 * 2])
  args = (ws if in_axes[0] == 0 else W, hs.T if in_axes[1] == 1 else hs if in_axes[1] == 0 else H0)
  got = jax.vmap(OURS, in_axes=in_axes)(*args)
  _close(got, jax.vmap(THEIRS, in_axes=in_axes)(*args))
  jaxpr = jax.make_jaxpr(jax.vmap(OURS, in_axes=in_axes))(*args)
  (loop,) = [e for e in jaxpr.eqns if e.primitive.name == "tf.While"]
  # The counter stays unbatched: only what depends on a batched operand is batched.
  counter = loop.outvars[0]
  assert counter.aval.shape == ()
  _close(
    jax.vmap(jax.grad(_loss(OURS)), in_axes=in_axes)(*args),
    jax.vmap(jax.grad(_loss(THEIRS)), in_axes=in_axes)(*args),
  )


def test_effects_and_weak_types_fall_back_to_lax_scan():
  def printing(h0):
    def step(h, _):
      jax.debug.print("{}", h[0])
      return h * 2, h

    return counted.scan(step, h0, 2)

  prims = jaxpr_primitives(jax.make_jaxpr(printing)(H0))
  assert "scan" in prims and "tf.While" not in prims

  def weak(h0):  # a weakly typed carry the step makes float32: lax.scan promotes it
    return counted.scan(lambda c, _: (c + h0.sum(), None), 1.0, 3)

  prims = jaxpr_primitives(jax.make_jaxpr(weak)(H0))
  assert "scan" in prims and "tf.While" not in prims
  np.testing.assert_allclose(weak(H0)[0], 1.0 + 3 * H0.sum(), rtol=1e-6)
