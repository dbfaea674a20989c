"""A loaded artifact (``tfprims.load_exported``) is a JAX function: jit, vmap over a new
leading axis, grad (inputs and params), device-resident inputs, and typed errors naming
the input instead of casts or jax.export's ``args[1]``. Values and gradients against TF."""

import os

os.environ.setdefault("JAX_PLATFORMS", "cpu")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import tensorflow as tf

import tfprims
from tfprims import deploy


@pytest.fixture(autouse=True, scope="module")
def _no_persistent_cache():
  """Loading turns on JAX's persistent compilation cache for the whole process: not in
  the test process (tests/test_cache.py tests it in fresh interpreters)."""
  with tfprims.override_config("compilation_cache", None):
    yield


_W = tf.Variable(np.linspace(-1, 1, 12, dtype=np.float32).reshape(4, 3), name="w")
_STEPS = tf.Variable(3, dtype=tf.int32, name="steps")


@tf.function(
  input_signature=[
    tf.TensorSpec([None, 4], tf.float32, name="features"),
    tf.TensorSpec([None], tf.int32, name="ids"),
  ]
)
def _model(features, ids):
  """A float input and an int input sharing the batch, a float and an int param, a float
  output and an int output; the batch mean couples the examples (vmap must not fold
  its members into the artifact's own batch dim)."""
  h = tf.tanh(features @ _W) * tf.cast(_STEPS, tf.float32)
  h = h - tf.reduce_mean(h, axis=0) * 0.5
  return {"scores": h * tf.cast(ids, tf.float32)[:, None], "doubled": ids * 2}


@pytest.fixture(scope="module")
def artifact(tmp_path_factory):
  fn, params = tfprims.convert(_model)
  path = str(tmp_path_factory.mktemp("art"))
  manifest = deploy.export(fn, params, path)
  assert manifest["vjp"] is True and "vjp_error" not in manifest
  return tfprims.load_exported(path)


def _data(seed, batch=3):
  rng = np.random.default_rng(seed)
  return (
    rng.standard_normal((batch, 4)).astype(np.float32),
    rng.integers(1, 4, batch).astype(np.int32),
  )


# Gradients sum cancelling float32 terms: an absolute tolerance at their scale.
_GRAD_TOL = dict(rtol=1e-5, atol=1e-5)


def _tf_grads(x, ids):
  """TF's gradient of sum(scores) with respect to the features and to w."""
  tx = tf.constant(x)
  with tf.GradientTape() as tape:
    tape.watch(tx)
    loss = tf.reduce_sum(_model(tx, ids)["scores"])
  gx, gw = tape.gradient(loss, [tx, _W])
  return gx.numpy(), gw.numpy()


def test_jit_equals_tf(artifact):
  x, ids = _data(0)
  got = jax.jit(lambda x, ids: artifact(x, ids))(x, ids)
  want = _model(x, ids)
  np.testing.assert_allclose(
    np.asarray(got["scores"]), want["scores"].numpy(), rtol=1e-5, atol=1e-6
  )
  np.testing.assert_array_equal(np.asarray(got["doubled"]), want["doubled"].numpy())
  # Loaded inside the traced function (the artifact used to call np.asarray on tracers:
  # TracerArrayConversionError); its params are concrete, so the model outlives the trace.
  loaded = []

  def load_and_call(x, ids):
    loaded.append(tfprims.load_exported(artifact.path))
    return loaded[-1](x, ids)

  np.testing.assert_array_equal(
    np.asarray(jax.jit(load_and_call)(x, ids)["scores"]), np.asarray(got["scores"])
  )
  np.testing.assert_array_equal(np.asarray(loaded[0](x, ids)["scores"]), np.asarray(got["scores"]))
  # jax.jit of the model itself, inputs by name too.
  np.testing.assert_array_equal(
    np.asarray(jax.jit(artifact)(features=x, ids=ids)["scores"]), np.asarray(got["scores"])
  )


def test_vmap_over_a_new_leading_axis_equals_tf_per_member(artifact):
  xs = np.stack([_data(k)[0] for k in range(4)])
  ids = _data(0)[1]
  got = jax.vmap(lambda x: artifact(x, ids)["scores"])(xs)
  assert got.shape == (4, 3, 3)
  for k, x in enumerate(xs):
    np.testing.assert_allclose(
      np.asarray(got[k]), _model(x, ids)["scores"].numpy(), rtol=1e-5, atol=1e-6
    )
  # Batched along another axis, both inputs batched, under jit.
  idss = np.stack([_data(k)[1] for k in range(4)], axis=1)
  both = jax.jit(jax.vmap(artifact, in_axes=(1, 1)))(np.moveaxis(xs, 0, 1), idss)
  for k in range(4):
    np.testing.assert_allclose(
      np.asarray(both["scores"][k]),
      _model(xs[k], idss[:, k])["scores"].numpy(),
      rtol=1e-5,
      atol=1e-6,
    )


def test_grad_equals_tf(artifact):
  x, ids = _data(1)
  gx_want, gw_want = _tf_grads(x, ids)
  loss = lambda x: artifact(x, ids)["scores"].sum()
  np.testing.assert_allclose(np.asarray(jax.grad(loss)(x)), gx_want, **_GRAD_TOL)
  np.testing.assert_allclose(np.asarray(jax.jit(jax.grad(loss))(x)), gx_want, **_GRAD_TOL)
  # With respect to the params: model.apply(params, ...); the int param's is float0.
  grads = jax.grad(lambda p: artifact.apply(p, x, ids)["scores"].sum(), allow_int=True)(
    artifact.params
  )
  np.testing.assert_allclose(np.asarray(grads["w"]), gw_want, **_GRAD_TOL)
  assert grads["steps"].dtype == jax.dtypes.float0
  # vmap of grad and grad of vmap: the VJP batches too.
  xs = np.stack([_data(k)[0] for k in range(3)])
  per = np.stack([_tf_grads(v, ids)[0] for v in xs])
  np.testing.assert_allclose(np.asarray(jax.jit(jax.vmap(jax.grad(loss)))(xs)), per, **_GRAD_TOL)
  np.testing.assert_allclose(
    np.asarray(jax.grad(lambda xs: jax.vmap(loss)(xs).sum())(xs)), per, **_GRAD_TOL
  )


def test_device_arrays_are_not_copied(artifact):
  """Inputs on the device go in as they are, and the params were put there at load: with
  implicit transfers disallowed a call still runs (the artifact used to take np.asarray of
  every input, a host copy that went back to the device each call)."""
  x, ids = _data(2)
  xd, idsd = jax.device_put(x), jax.device_put(ids)
  with jax.transfer_guard("disallow"):
    got = artifact(xd, idsd)
    assert isinstance(got["scores"], jax.Array)
  np.testing.assert_allclose(
    np.asarray(got["scores"]), _model(x, ids)["scores"].numpy(), rtol=1e-5, atol=1e-6
  )
  assert all(isinstance(v, jax.Array) for v in artifact.params.values())


def test_dtypes_are_checked_not_cast(artifact):
  x, ids = _data(3)
  with pytest.raises(
    tfprims.InputDtypeError, match="input 'features' has dtype float64, the artifact takes float32"
  ):
    artifact(x.astype(np.float64), ids)
  with pytest.raises(tfprims.InputDtypeError, match="input 'ids' has dtype float32"):
    jax.jit(artifact)(x, ids.astype(np.float32))  # under jit too
  with pytest.raises(tfprims.InputDtypeError, match="'ids' is float64 data"):
    artifact(x, [1.5, 2.0, 3.0])
  # Python data takes the input's dtype within its kind.
  np.testing.assert_allclose(
    np.asarray(artifact(x.tolist(), ids.tolist())["scores"]),
    _model(x, ids)["scores"].numpy(),
    rtol=1e-5,
    atol=1e-6,
  )
  with pytest.raises(tfprims.InputDtypeError, match="param 'w' is float64"):
    artifact.apply(dict(artifact.params, w=np.zeros((4, 3))), x, ids)


def test_shape_errors_name_the_input(artifact):
  x, ids = _data(4)
  with pytest.raises(
    tfprims.InputShapeError,
    match=r"input 'features' has shape \[3, 5\], the artifact takes "
    r"\[batch, 4\]: dim 1 is 5, not 4",
  ) as info:
    artifact(np.zeros((3, 5), np.float32), ids)
  assert "args[" not in str(info.value)
  with pytest.raises(tfprims.InputShapeError, match=r"rank 1\), the artifact takes \[batch, 4\]"):
    artifact(np.zeros(4, np.float32), ids)
  with pytest.raises(
    tfprims.InputShapeError, match="input 'ids' has batch = 2 .* input 'features' has batch = 3"
  ):
    artifact(x, ids[:2])
  with pytest.raises(tfprims.InputShapeError, match=r"dim 1 is 5, not 4"):
    jax.vmap(lambda x: artifact(x, ids))(np.zeros((2, 3, 5), np.float32))


def test_params_first_or_not(artifact):
  """The artifact holds its params: given them first, it says so; apply takes params
  first and says so when they are missing."""
  x, ids = _data(5)
  with pytest.raises(
    tfprims.InputStructureError, match=r"holds its params .* model\(features, ids\)"
  ):
    artifact(artifact.params, x, ids)
  with pytest.raises(
    tfprims.InputStructureError,
    match=r"first argument of apply is the params .* apply\(params, features, "
    r"ids\); got ndarray",
  ):
    artifact.apply(x, ids)
  with pytest.raises(tfprims.InputStructureError, match=r"missing \['steps'\]"):
    artifact.apply({"w": artifact.params["w"]}, x, ids)
  np.testing.assert_array_equal(
    np.asarray(artifact.apply(artifact.params, x, ids)["scores"]),
    np.asarray(artifact(x, ids)["scores"]),
  )


def test_an_artifact_without_its_vjp_says_so(tmp_path):
  fn, params = tfprims.convert(_model)
  manifest = deploy.export(fn, params, str(tmp_path), differentiable=False)
  assert manifest["vjp"] is False
  model = tfprims.load_exported(str(tmp_path))
  x, ids = _data(6)
  np.testing.assert_allclose(
    np.asarray(model(x, ids)["scores"]), _model(x, ids)["scores"].numpy(), rtol=1e-5, atol=1e-6
  )
  with pytest.raises(deploy.NoVJPError, match="no VJP"):
    jax.grad(lambda x: model(x, ids)["scores"].sum())(x)
  assert isinstance(deploy.NoVJPError("x"), tfprims.TFPrimsError)
  jnp.zeros(())  # the failed trace leaves JAX usable
