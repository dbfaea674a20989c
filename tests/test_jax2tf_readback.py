"""jax2tf modules whose reading once failed or crashed: ApproxTopK (its comparator is a
function of the module), rng_bit_generator's 64-bit state with x64 off,
select_and_scatter_add on integers, LAPACK calls on empty matrices. Each is read as
JAX operations and equals the original JAX function."""

import warnings

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import tensorflow as tf
from jax import lax
from jax.experimental import jax2tf

import tfprims
from helpers import jaxpr_primitives

RNG = np.random.default_rng(0)


def _read_back(f, *args, with_gradient=False):
  tf_fn = tf.function(jax2tf.convert(f, with_gradient=with_gradient), autograph=False)
  fn = tfprims.convert_functional(
    tf_fn, *[tf.TensorSpec(np.shape(a), tf.as_dtype(np.asarray(a).dtype)) for a in args]
  )
  assert "tf.XlaCallModule" not in jaxpr_primitives(jax.make_jaxpr(fn)(*args))
  return fn


def _equal(got, want):
  for g, w in zip(jax.tree.leaves(got), jax.tree.leaves(want), strict=True):
    np.testing.assert_array_equal(np.asarray(g), np.asarray(w))


@pytest.mark.parametrize("top_k, dim", [(lax.approx_max_k, -1), (lax.approx_min_k, 0)])
def test_approx_top_k_is_read_with_its_comparator(top_k, dim):
  x = RNG.normal(size=(6, 5)).astype(np.float32)
  x[1, 2] = x[3, 2] = x[0, 0]  # ties
  f = lambda x: top_k(x, 2, reduction_dimension=dim)
  fn = _read_back(f, x, with_gradient=True)
  assert "approx_top_k" in jaxpr_primitives(jax.make_jaxpr(fn)(x))
  _equal(fn(x), f(x))
  _equal(jax.jit(fn)(x), f(x))
  batch = np.stack([x, -x])
  _equal(jax.vmap(fn)(batch), jax.vmap(f)(batch))
  loss = lambda g: lambda x: jnp.sum(g(x)[0] ** 2)
  np.testing.assert_allclose(jax.grad(loss(fn))(x), jax.grad(loss(f))(x), rtol=1e-6)


def test_rng_bit_generator_with_a_uint32_key_and_x64_off():
  f = lambda k: lax.rng_bit_generator(k, (3, 2), dtype=np.uint32)
  key = np.array([1, 2, 3, 4], np.uint32)
  fn = _read_back(f, key)
  _equal(fn(key), f(key))  # the next state and the bits
  _equal(jax.jit(fn)(key), f(key))


@pytest.mark.parametrize("dtype", [np.int8, np.int16, np.int32, np.uint16, np.uint32, np.float32])
def test_select_and_scatter_add_of_every_dtype(dtype):
  # JAX's max-pool gradient primitive, written directly (it has no public wrapper).
  from jax._src.lax.windowed_reductions import _select_and_scatter_add

  x = RNG.integers(0, 4, size=(5, 6)).astype(dtype)  # many ties in each window
  source = RNG.integers(1, 5, size=(3, 6)).astype(dtype)
  f = lambda s, x: _select_and_scatter_add(s, x, lax.ge_p, (3, 2), (2, 1), ((1, 1), (0, 1)))
  fn = _read_back(f, source, x)
  _equal(fn(source, x), f(source, x))
  _equal(jax.jit(fn)(source, x), f(source, x))


def test_eig_of_empty_matrices_called_eagerly():
  f = lambda a: jnp.linalg.eig(a)
  for a in (np.zeros((0, 0), np.float32), np.zeros((3, 0, 0), np.float32)):
    fn = _read_back(f, a)
    for got, want in zip(fn(a), f(a)):
      assert got.shape == want.shape and got.dtype == want.dtype
    for got, want in zip(jax.jit(fn)(a), f(a)):
      assert got.shape == want.shape


# --- derivatives of modules the reader once could not differentiate -----------------


def _grad_close(got, want, rtol=1e-5, atol=1e-6):
  for g, w in zip(jax.tree.leaves(got), jax.tree.leaves(want), strict=True):
    np.testing.assert_allclose(np.asarray(g), np.asarray(w), rtol=rtol, atol=atol)


_A = np.array([0.5, 1.5, 3.0, 7.0], np.float32)
_X = np.array([0.7, 2.0, 4.0, 6.5], np.float32)


@pytest.mark.parametrize("with_gradient", [True, False])
@pytest.mark.parametrize("special", ["gammainc", "gammaincc"])
def test_grad_through_a_while_loop_with_a_data_dependent_trip_count(special, with_gradient):
  # igamma/igammac are series whose length depends on the data: stablehlo.while
  # loops read as tf.While.unbounded (checkpointed reverse mode). with_gradient=False:
  # the module's own derivative (PreventGradient ignored), else jax2tf's recorded one.
  g = getattr(jax.scipy.special, special)
  f = lambda a, x: jnp.sum(g(a, x) ** 2)
  with (
    tfprims.override_config("raise_on_prevent_gradient", with_gradient),
    warnings.catch_warnings(),
  ):
    warnings.simplefilter("ignore")
    fn = _read_back(f, _A, _X, with_gradient=with_gradient)
  assert "tf.While.unbounded" in jaxpr_primitives(jax.make_jaxpr(fn)(_A, _X))
  _grad_close(fn(_A, _X), f(_A, _X))
  want = jax.grad(f, 1)(_A, _X)
  _grad_close(jax.grad(fn, 1)(_A, _X), want, rtol=1e-4)
  _grad_close(jax.jit(jax.grad(fn, 1))(_A, _X), want, rtol=1e-4)


def test_grad_of_random_gamma_samples_wrt_alpha():
  key = np.asarray(jax.random.key_data(jax.random.key(0)))
  f = lambda k, a: jnp.sum(jax.random.gamma(jax.random.wrap_key_data(k), a) * a)
  fn = _read_back(f, key, _A, with_gradient=True)
  _grad_close(fn(key, _A), f(key, _A))
  want = jax.grad(f, 1)(key, _A)
  _grad_close(jax.grad(fn, 1)(key, _A), want, rtol=1e-4)
  _grad_close(jax.jit(jax.grad(fn, 1))(key, _A), want, rtol=1e-4)


def test_grad_of_cumlogsumexp():
  x = RNG.normal(size=(3, 5)).astype(np.float32)
  f = lambda x: jnp.sum(
    lax.cumlogsumexp(x, axis=1) ** 2 + lax.cumlogsumexp(x, axis=0, reverse=True)
  )
  fn = _read_back(f, x, with_gradient=True)
  _grad_close(fn(x), f(x))
  _grad_close(jax.grad(fn)(x), jax.grad(f)(x))
  _grad_close(jax.jit(jax.grad(fn))(x), jax.grad(f)(x))


def _pool(reducer, init):
  return lambda v: jnp.sum(lax.reduce_window(v, init, reducer, (2, 2), (2, 1), "SAME") ** 2)


@pytest.mark.parametrize("reducer, init", [(lax.max, -jnp.inf), (lax.min, jnp.inf)])
def test_select_and_gather_add_second_order_pool_gradients(reducer, init):
  # jax.jvp of a pool's gradient: the JVP of reduce_window max/min is
  # select_and_gather_add, a 4-operand reduce_window.
  x = RNG.normal(size=(4, 6)).astype(np.float32)
  t = np.cos(x)
  pool = _pool(reducer, init)
  f = lambda v, t: jax.jvp(jax.grad(pool), (v,), (t,))[1]
  fn = _read_back(f, x, t, with_gradient=True)
  _grad_close(fn(x, t), f(x, t))
  _grad_close(jax.jit(fn)(x, t), f(x, t))
  loss = lambda g: lambda v, t: jnp.sum(g(v, t) ** 2)
  _grad_close(jax.grad(loss(fn), (0, 1))(x, t), jax.grad(loss(f), (0, 1))(x, t))
  # the pool's gradient's gradient (hessian-vector product) read back
  h = lambda v: jax.hessian(pool)(v).reshape(v.size, v.size) @ t.ravel()
  fn = _read_back(h, x, with_gradient=True)
  _grad_close(fn(x), h(x))


# --- jax2tf's recorded gradient differentiates every input ------------------------------

_IDX = np.array([[1], [1], [3]], np.int32)  # repeated: scatter_mul has no VJP in updates
_SCATTER_DN = lax.ScatterDimensionNumbers((), (0,), (0,))
_PARTIAL = {
  "scatter_mul": (
    lambda x, u: jnp.sum(lax.scatter_mul(x, _IDX, u, _SCATTER_DN) ** 2),
    (np.array([1.0, 2.0, 3.0, 4.0], np.float32), np.array([2.0, 3.0, 0.5], np.float32)),
  ),
  "clamp_scalar_bound": (
    lambda x, lo: jnp.sum(lax.clamp(lo, x, 2.5) ** 2),
    (np.array([1.0, 2.0, 3.0, 4.0], np.float32), np.float32(1.5)),
  ),
}


@pytest.mark.parametrize("name", sorted(_PARTIAL))
def test_grad_of_only_the_requested_input(name):
  # jax2tf's gradient function takes the VJP in every input, which JAX refuses here:
  # the read-back module is differentiated natively, in the input asked for only.
  f, args = _PARTIAL[name]
  fn = _read_back(f, *args, with_gradient=True)
  _grad_close(fn(*args), f(*args))
  want = jax.grad(f, 0)(*args)
  _grad_close(jax.grad(fn, 0)(*args), want)
  _grad_close(jax.jit(jax.grad(fn, 0))(*args), want)
  xs = np.stack([args[0], args[0] * 0.5])
  _grad_close(
    jax.vmap(jax.grad(fn, 0), (0, None))(xs, args[1]),
    jax.vmap(jax.grad(f, 0), (0, None))(xs, args[1]),
  )


# --- old shape-polymorphic custom calls (written by hand: jax 0.10 no longer emits them) ---

_DYNAMIC_TOP_K = """
module @jit_f {
  func.func public @main(%arg0: tensor<?x?xf32>) -> (tensor<?x?xf32>, tensor<?x?xi32>) {
    %0 = stablehlo.get_dimension_size %arg0, dim = 1 : (tensor<?x?xf32>) -> tensor<i32>
    %1 = stablehlo.convert %0 : (tensor<i32>) -> tensor<i64>
    %c = stablehlo.constant dense<2> : tensor<i64>
    %2 = stablehlo.subtract %1, %c : tensor<i64>
    %3:2 = stablehlo.custom_call @stablehlo.dynamic_top_k(%arg0, %2) : (tensor<?x?xf32>, tensor<i64>) -> (tensor<?x?xf32>, tensor<?x?xi32>)
    return %3#0, %3#1 : tensor<?x?xf32>, tensor<?x?xi32>
  }
}
"""

_DYNAMIC_APPROX_TOP_K = """
module @jit_f {
  func.func private @top_k_gt_f32_comparator(%arg0: tensor<f32>, %arg1: tensor<f32>, %arg2: tensor<i32>, %arg3: tensor<i32>) -> tensor<i1> {
    %0 = stablehlo.compare GT, %arg0, %arg1 : (tensor<f32>, tensor<f32>) -> tensor<i1>
    stablehlo.return %0 : tensor<i1>
  }
  func.func public @main(%arg0: tensor<?x6xf32>) -> (tensor<?x2xf32>, tensor<?x2xi32>) {
    %d0 = stablehlo.get_dimension_size %arg0, dim = 0 : (tensor<?x6xf32>) -> tensor<i32>
    %d = stablehlo.reshape %d0 : (tensor<i32>) -> tensor<1xi32>
    %six = stablehlo.constant dense<6> : tensor<1xi32>
    %two = stablehlo.constant dense<2> : tensor<1xi32>
    %ishape = stablehlo.concatenate %d, %six, dim = 0 : (tensor<1xi32>, tensor<1xi32>) -> tensor<2xi32>
    %oshape = stablehlo.concatenate %d, %two, dim = 0 : (tensor<1xi32>, tensor<1xi32>) -> tensor<2xi32>
    %iota = stablehlo.dynamic_iota %ishape, dim = 1 : (tensor<2xi32>) -> tensor<?x6xi32>
    %c = stablehlo.constant dense<-1> : tensor<i32>
    %cst = stablehlo.constant dense<0xFF800000> : tensor<f32>
    %k = stablehlo.constant dense<2> : tensor<i64>
    %1:2 = stablehlo.custom_call @stablehlo.dynamic_approx_top_k(%arg0, %iota, %cst, %c, %k, %oshape, %oshape) {backend_config = "", called_computations = [@top_k_gt_f32_comparator], indices_of_shape_operands = dense<[5, 6]> : tensor<2xi64>, mhlo.backend_config = {aggregate_to_topk = true, recall_target = 0.949999988 : f32, reduction_dim = 1 : i64, reduction_input_size_override = -1 : i64}} : (tensor<?x6xf32>, tensor<?x6xi32>, tensor<f32>, tensor<i32>, tensor<i64>, tensor<2xi32>, tensor<2xi32>) -> (tensor<?x2xf32>, tensor<?x2xi32>)
    return %1#0, %1#1 : tensor<?x2xf32>, tensor<?x2xi32>
  }
}
"""

_DYNAMIC_RNG = """
module @jit_f {
  func.func public @main(%arg0: tensor<4xui32>, %arg1: tensor<?x2xf32>) -> (tensor<4xui32>, tensor<?x2xui32>) {
    %0 = stablehlo.reshape %arg0 : (tensor<4xui32>) -> tensor<2x2xui32>
    %1 = stablehlo.bitcast_convert %0 : (tensor<2x2xui32>) -> tensor<2xui64>
    %d0 = stablehlo.get_dimension_size %arg1, dim = 0 : (tensor<?x2xf32>) -> tensor<i32>
    %d = stablehlo.reshape %d0 : (tensor<i32>) -> tensor<1xi32>
    %two = stablehlo.constant dense<2> : tensor<1xi32>
    %shape = stablehlo.concatenate %d, %two, dim = 0 : (tensor<1xi32>, tensor<1xi32>) -> tensor<2xi32>
    %s, %bits = stablehlo.custom_call @stablehlo.dynamic_rng_bit_generator(%1, %shape) {rng_algorithm = #stablehlo<rng_algorithm DEFAULT>} : (tensor<2xui64>, tensor<2xi32>) -> (tensor<2xui64>, tensor<?x2xui32>)
    %2 = stablehlo.bitcast_convert %s : (tensor<2xui64>) -> tensor<2x2xui32>
    %3 = stablehlo.reshape %2 : (tensor<2x2xui32>) -> tensor<4xui32>
    return %3, %bits : tensor<4xui32>, tensor<?x2xui32>
  }
}
"""


def _call_module_fn(text, args, outs):
  """A tf.function of one XlaCallModule op holding ``text`` (a shape-polymorphic
  module), converted by tfprims for the static shapes of ``args``."""
  from jax.extend.mlir.dialects import stablehlo as hlo
  from jax.interpreters import mlir
  from tensorflow.compiler.tf2xla.ops import gen_xla_ops

  with mlir.make_ir_context():
    module = mlir.ir.Module.parse(text)
    data = hlo.serialize_portable_artifact_str(str(module), hlo.get_minimum_version())

  @tf.function(autograph=False)
  def tf_fn(*xs):
    return gen_xla_ops.xla_call_module(
      list(xs),
      version=9,
      module=data,
      Sout=[s for s, _ in outs],
      Tout=[t for _, t in outs],
      dim_args_spec=[],
      platforms=["CPU"],
    )

  fn = tfprims.convert_functional(
    tf_fn, *[tf.TensorSpec(np.shape(a), tf.as_dtype(np.asarray(a).dtype)) for a in args]
  )
  assert "tf.XlaCallModule" not in jaxpr_primitives(jax.make_jaxpr(fn)(*args))
  return fn


def test_dynamic_top_k_with_k_known_at_call_time():
  # k = (the last dimension) - 2, a value computed from the shapes
  for rows, cols in ((3, 6), (1, 4)):
    x = RNG.normal(size=(rows, cols)).astype(np.float32)
    fn = _call_module_fn(
      _DYNAMIC_TOP_K, [x], [((rows, cols - 2), tf.float32), ((rows, cols - 2), tf.int32)]
    )
    _equal(fn(x), lax.top_k(x, cols - 2))
    _equal(jax.jit(fn)(x), lax.top_k(x, cols - 2))
    loss = lambda g: lambda x: jnp.sum(g(x)[0] ** 2)
    _grad_close(jax.grad(loss(fn))(x), jax.grad(loss(lambda v: lax.top_k(v, cols - 2)))(x))


def test_dynamic_approx_top_k_with_shape_operands():
  x = RNG.normal(size=(3, 6)).astype(np.float32)
  fn = _call_module_fn(_DYNAMIC_APPROX_TOP_K, [x], [((3, 2), tf.float32), ((3, 2), tf.int32)])
  assert "approx_top_k" in jaxpr_primitives(jax.make_jaxpr(fn)(x))
  _equal(fn(x), lax.approx_max_k(x, 2))
  _equal(jax.jit(fn)(x), lax.approx_max_k(x, 2))


def test_dynamic_rng_bit_generator_with_its_shape_known_at_call_time():
  key = np.array([1, 2, 3, 4], np.uint32)
  y = np.zeros((5, 2), np.float32)  # its first dimension: the number of rows of bits
  fn = _call_module_fn(_DYNAMIC_RNG, [key, y], [((4,), tf.uint32), ((5, 2), tf.uint32)])
  want = lax.rng_bit_generator(key, (5, 2), dtype=np.uint32)
  _equal(fn(key, y), want)
  _equal(jax.jit(fn)(key, y), want)


# --- operations once called as one opaque operation -------------------------------------


@pytest.mark.parametrize("dtype", [jnp.bfloat16, np.float16])
@pytest.mark.parametrize(
  "left_side, lower, transpose_a", [(True, True, False), (False, False, True)]
)
def test_triangular_solve_in_half_precision(dtype, left_side, lower, transpose_a):
  a = np.tril(RNG.normal(size=(4, 4))) + 4 * np.eye(4)
  a = (a if lower else a.T).astype(dtype)
  b = RNG.normal(size=(4, 3) if left_side else (3, 4)).astype(dtype)
  f = lambda a, b: lax.linalg.triangular_solve(
    a, b, left_side=left_side, lower=lower, transpose_a=transpose_a
  )
  fn = _read_back(f, a, b, with_gradient=True)
  assert "triangular_solve" in jaxpr_primitives(jax.make_jaxpr(fn)(a, b))
  _equal(fn(a, b), f(a, b))
  _equal(jax.jit(fn)(a, b), f(a, b))
  loss = lambda g: lambda b: jnp.sum(g(a, b).astype(jnp.float32) ** 2)
  _grad_close(
    jax.grad(loss(fn))(b).astype(np.float32),
    jax.grad(loss(f))(b).astype(np.float32),
    rtol=2e-2,
    atol=2e-2,
  )


@pytest.mark.parametrize(
  "select, scatter, dtype",
  [
    (lax.le, lax.add, np.float32),  # a min pool's gradient
    (lax.le, lax.add, np.int32),
    (lax.ge, lax.max, np.float32),  # other scatter monoids
    (lax.le, lax.min, np.int16),
    (lax.ge, lax.mul, np.float32),
  ],
)
def test_select_and_scatter_other_forms(select, scatter, dtype):
  from jax._src.lax.windowed_reductions import _select_and_scatter

  x = RNG.integers(0, 4, size=(5, 6)).astype(dtype)  # ties
  source = RNG.integers(1, 5, size=(3, 6)).astype(dtype)
  init = np.array(1, dtype)
  x = np.pad(x, ((1, 1), (0, 0)))  # JAX pads before it (no padding of its own)
  source = source[:, :5]
  f = lambda s, x: _select_and_scatter(
    x, select, (3, 2), (2, 1), ((0, 0), (0, 0)), s, init, scatter
  )
  fn = _read_back(f, source, x)
  _equal(fn(source, x), f(source, x))
  _equal(jax.jit(fn)(source, x), f(source, x))
  assert "tf.XlaCallModule" not in jaxpr_primitives(
    jax.make_jaxpr(jax.vmap(fn))(np.stack([source] * 2), np.stack([x] * 2))
  )


def test_select_and_scatter_with_its_own_padding_is_one_operation():
  # XLA's choice among ties next to its padding is not the first element's: kept opaque
  from jax._src.lax.windowed_reductions import _select_and_scatter

  x = RNG.integers(0, 4, size=(5, 6)).astype(np.float32)
  source = RNG.integers(1, 5, size=(3, 6)).astype(np.float32)
  f = lambda s, x: _select_and_scatter(
    x, lax.le, (3, 2), (2, 1), ((1, 1), (0, 1)), s, np.float32(0), lax.add
  )
  tf_fn = tf.function(jax2tf.convert(f), autograph=False)
  with pytest.warns(UserWarning, match="select_and_scatter"):
    fn = tfprims.convert_functional(
      tf_fn, tf.TensorSpec((3, 6), tf.float32), tf.TensorSpec((5, 6), tf.float32)
    )
    _equal(fn(source, x), f(source, x))
