"""Elementwise math and activations: behaviour the generic property runner does
not cover (TF names in grad/vmap jaxprs, edge cases pinned against TF, choices
documented in docs/semantics/elementwise.md)."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import tensorflow as tf

import tfprims.ops  # noqa: F401  (registers the ops)
from tfprims.core import get_op
from tfprims.testing.tf_kernels import onednn

from helpers import non_tf_primitives

ALLOWED = {
  "add_any",  # JAX's cotangent accumulation for values used twice
  "broadcast_in_dim",  # zeros/ones, tangent broadcast, batching rank padding
  "reduce_sum",  # unbroadcast: transpose of TF's implicit broadcasting
  "reshape",  # unbroadcast / rank padding
}


def op(name):
  return get_op(name)


def call(name, *args, **params):
  o = op(name)
  return o(*args, **params)


def tf_call(name, **kwargs):
  return getattr(tf.raw_ops, name)(**kwargs).numpy()


# ---------------------------------------------------------------------------
# TF names in grad and vmap jaxprs.


def _composite(x, b, w):
  return call("Sigmoid", call("Mul", call("AddV2", x, b), w))


def test_grad_and_vmap_jaxprs_keep_tf_names():
  x = np.linspace(-1, 1, 6, dtype=np.float32).reshape(2, 3)
  b = np.array([0.1, -0.2, 0.3], np.float32)
  w = np.array(1.5, np.float32)

  loss = lambda x, b, w: jnp.sum(_composite(x, b, w))
  grad_jaxpr = jax.make_jaxpr(jax.grad(loss, argnums=(0, 1, 2)))(x, b, w)
  assert non_tf_primitives(grad_jaxpr, ALLOWED) == set(), grad_jaxpr
  names = {e.primitive.name for e in grad_jaxpr.jaxpr.eqns}
  assert {"tf.SigmoidGrad", "tf.Mul", "tf.AddV2"} <= names

  vmap_jaxpr = jax.make_jaxpr(jax.vmap(_composite, in_axes=(0, None, None)))(
    np.stack([x, -x]), b, w
  )
  assert non_tf_primitives(vmap_jaxpr, ALLOWED) == set(), vmap_jaxpr

  # and the gradients are TF's
  gx, gb, gw = jax.grad(loss, argnums=(0, 1, 2))(x, b, w)
  tx, tb, tw = (tf.constant(v) for v in (x, b, w))
  with tf.GradientTape() as tape:
    tape.watch([tx, tb, tw])
    y = tf.reduce_sum(tf.raw_ops.Sigmoid(x=tf.raw_ops.Mul(x=tf.raw_ops.AddV2(x=tx, y=tb), y=tw)))
  want = tape.gradient(y, [tx, tb, tw])
  for g, t in zip((gx, gb, gw), want):
    np.testing.assert_allclose(g, t.numpy(), rtol=1e-5, atol=1e-6)


# Ops whose JVP (and the transposes it needs) are written with TF ops.
TF_NAMED = {
  "Abs": 1,
  "Neg": 1,
  "Square": 1,
  "Sqrt": 1,
  "Rsqrt": 1,
  "Exp": 1,
  "Log": 1,
  "Log1p": 1,
  "Expm1": 1,
  "Sin": 1,
  "Cos": 1,
  "Tan": 1,
  "Tanh": 1,
  "Asinh": 1,
  "Reciprocal": 1,
  "Erf": 1,
  "Sigmoid": 1,
  "Relu": 1,
  "Relu6": 1,
  "Elu": 1,
  "Selu": 1,
  "Softplus": 1,
  "Softsign": 1,
  "Softmax": 1,
  "LogSoftmax": 1,
  "AddV2": 2,
  "Add": 2,
  "Sub": 2,
  "Mul": 2,
  "Div": 2,
  "RealDiv": 2,
  "DivNoNan": 2,
  "MulNoNan": 2,
  "Maximum": 2,
  "Minimum": 2,
  "Pow": 2,
  "SquaredDifference": 2,
  "Atan2": 2,
  "Xlogy": 2,
  "Xdivy": 2,
  "Xlog1py": 2,
  "FloorMod": 2,
}


@pytest.mark.parametrize("name", sorted(TF_NAMED))
def test_grad_jaxpr_is_tf_named(name):
  arity = TF_NAMED[name]
  x = np.array([[0.3, 0.7, 1.2]], np.float32)  # shape (1, 3)
  y = np.array([[1.1], [0.4]], np.float32)  # shape (2, 1): broadcasting
  args = (x, y)[:arity]
  f = lambda *a: jnp.sum(call(name, *a))
  jaxpr = jax.make_jaxpr(jax.grad(f, argnums=tuple(range(arity))))(*args)
  assert non_tf_primitives(jaxpr, ALLOWED) == set(), jaxpr
  vjaxpr = jax.make_jaxpr(jax.vmap(lambda *a: call(name, *a)))(*(np.stack([a, a]) for a in args))
  assert non_tf_primitives(vjaxpr, ALLOWED | {"transpose"}) == set(), vjaxpr


def test_leaky_relu_grad_keeps_alpha():
  x = np.array([-2.0, 0.0, 3.0], np.float32)
  f = lambda x: jnp.sum(call("LeakyRelu", x, alpha=0.3))
  jaxpr = jax.make_jaxpr(jax.grad(f))(x)
  assert "tf.LeakyReluGrad" in str(jaxpr) and "alpha=0.3" in str(jaxpr)
  np.testing.assert_allclose(jax.grad(f)(x), [0.3, 0.3, 1.0])


# ---------------------------------------------------------------------------
# Broadcasting binary ops: gradients vs tf.GradientTape.

SHAPES = [((2, 1, 3), (4, 1)), ((3,), ()), ((), (2, 3)), ((1, 3), (2, 1))]
BINARY = [
  "AddV2",
  "Add",
  "Sub",
  "Mul",
  "Div",
  "RealDiv",
  "DivNoNan",
  "MulNoNan",
  "Maximum",
  "Minimum",
  "Pow",
  "SquaredDifference",
  "Atan2",
  "Xlogy",
  "Xdivy",
  "Xlog1py",
  "FloorMod",
]


@pytest.mark.parametrize("name", BINARY)
def test_broadcasting_grads_match_tf(name):
  rng = np.random.default_rng(0)
  names = ("y", "x") if name == "Atan2" else ("x", "y")
  for sa, sb in SHAPES:
    a = rng.uniform(0.5, 2.0, sa).astype(np.float32)
    b = rng.uniform(0.5, 2.0, sb).astype(np.float32)
    if name in ("Maximum", "Minimum") and a.size and b.size:
      a.flat[0] = b.flat[0]  # a tie
    ct = rng.standard_normal(np.broadcast_shapes(sa, sb)).astype(np.float32)
    _, pull = jax.vjp(lambda a, b: call(name, a, b), a, b)
    ga, gb = pull(ct)
    ta, tb = tf.constant(a), tf.constant(b)
    with tf.GradientTape() as tape:
      tape.watch([ta, tb])
      out = getattr(tf.raw_ops, name)(**{names[0]: ta, names[1]: tb})
    wa, wb = tape.gradient(
      out,
      [ta, tb],
      output_gradients=tf.constant(ct),
      unconnected_gradients=tf.UnconnectedGradients.ZERO,
    )
    np.testing.assert_allclose(ga, wa.numpy(), rtol=2e-5, atol=1e-6, err_msg=f"{name} {sa} {sb}")
    np.testing.assert_allclose(gb, wb.numpy(), rtol=2e-5, atol=1e-6, err_msg=f"{name} {sa} {sb}")


# ---------------------------------------------------------------------------
# TF's derivative conventions at kinks and singular points.


def _tf_grad(name, x, **kwargs):
  tx = tf.constant(x)
  with tf.GradientTape() as tape:
    tape.watch(tx)
    y = getattr(tf.raw_ops, name)(**{_first_arg(name): tx}, **kwargs)
  return tape.gradient(y, tx, unconnected_gradients=tf.UnconnectedGradients.ZERO).numpy()


def _first_arg(name):
  from tfprims import opdefs

  return opdefs.input_arg_names(name)[0]


@pytest.mark.parametrize(
  "name,x,kwargs",
  [
    ("Abs", [-1.0, 0.0, -0.0, 2.0], {}),
    ("Relu", [-1.0, 0.0, 2.0], {}),
    ("Relu6", [-1.0, 0.0, 3.0, 6.0, 7.0], {}),
    ("LeakyRelu", [-1.0, 0.0, 2.0], {"alpha": 0.1}),
    ("Elu", [-1.0, 0.0, 2.0], {}),
    ("Selu", [-1.0, 0.0, 2.0], {}),
    ("Sign", [-1.0, 0.0, 2.0], {}),
    ("Floor", [-1.5, 0.0, 2.0], {}),
    ("Round", [-1.5, 0.5, 2.0], {}),
    ("Sqrt", [0.0, 4.0], {}),
    ("Rsqrt", [0.0, 4.0], {}),
    ("Reciprocal", [0.0, 4.0], {}),
    ("Softplus", [-100.0, 0.0, 100.0], {}),
  ],
)
def test_unary_grad_conventions_match_tf(name, x, kwargs):
  x = np.array(x, np.float32)
  ours = jax.grad(lambda v: jnp.sum(call(name, v, **kwargs)))(x)
  np.testing.assert_allclose(ours, _tf_grad(name, x, **kwargs), rtol=1e-6)


def _tf_grads2(name, a, b):
  ta, tb = tf.constant(a), tf.constant(b)
  names = ("y", "x") if name == "Atan2" else ("x", "y")
  with tf.GradientTape() as tape:
    tape.watch([ta, tb])
    out = getattr(tf.raw_ops, name)(**{names[0]: ta, names[1]: tb})
  return [
    g.numpy()
    for g in tape.gradient(out, [ta, tb], unconnected_gradients=tf.UnconnectedGradients.ZERO)
  ]


@pytest.mark.parametrize(
  "name,a,b",
  [
    ("Maximum", [1.0, 2.0, 3.0], [1.0, 1.0, 4.0]),  # tie goes to x
    ("Minimum", [1.0, 2.0, 3.0], [1.0, 1.0, 4.0]),
    ("Maximum", [np.nan, 1.0], [1.0, np.nan]),  # NaN: gradient to y
    ("Pow", [0.0, 0.0, -2.0, 2.0], [0.0, 2.0, 3.0, 0.5]),  # 0*inf = nan at x=y=0; dy = 0 for x <= 0
    ("Xlogy", [0.0, 0.0, 2.0], [0.0, 3.0, 3.0]),
    ("Xdivy", [0.0, 0.0, 2.0], [0.0, 3.0, 3.0]),
    ("Xlog1py", [0.0, 0.0, 2.0], [-1.0, 3.0, 3.0]),
    ("DivNoNan", [1.0, 0.0, 2.0], [0.0, 0.0, 4.0]),
    ("MulNoNan", [np.inf, np.nan, 2.0], [0.0, 0.0, 4.0]),
    ("FloorMod", [7.0, -7.0, 7.5], [2.0, 2.0, -2.0]),
    ("FloorDiv", [7.0, -7.0, 7.5], [2.0, 2.0, -2.0]),
    ("TruncateDiv", [7.0, -7.0, 7.5], [2.0, 2.0, -2.0]),
  ],
)
def test_binary_grad_conventions_match_tf(name, a, b):
  a, b = np.array(a, np.float32), np.array(b, np.float32)
  ours = jax.grad(lambda u, v: jnp.sum(call(name, u, v)), argnums=(0, 1))(a, b)
  for g, w in zip(ours, _tf_grads2(name, a, b)):
    np.testing.assert_allclose(g, w, rtol=1e-6, equal_nan=True)


@pytest.mark.parametrize(
  "name",
  [
    "Tanh",
    "Sigmoid",
    "Elu",
    "Selu",
    "Softplus",
    "Sqrt",
    "Rsqrt",
    "Reciprocal",
    "Relu",
    "LeakyRelu",
    "Exp",
    "Log",
    "Square",
    "Abs",
  ],
)
def test_second_derivatives_match_tf(name):
  """Second order goes through the gradient ops' own JVPs (TanhGrad, EluGrad...)."""
  x = np.array([-1.5, -0.3, 0.4, 2.0], np.float32)
  if name in ("Sqrt", "Rsqrt", "Log"):
    x = np.abs(x)
  kw = {"alpha": 0.2} if name == "LeakyRelu" else {}
  d1 = lambda v: jax.grad(lambda u: jnp.sum(call(name, u, **kw)))(v)
  ours = jax.grad(lambda v: jnp.sum(d1(v)))(x)
  tx = tf.constant(x)
  with tf.GradientTape() as t2:
    t2.watch(tx)
    with tf.GradientTape() as t1:
      t1.watch(tx)
      y = getattr(tf.raw_ops, name)(**{_first_arg(name): tx}, **kw)
    g = t1.gradient(y, tx)
  want = t2.gradient(g, tx, unconnected_gradients=tf.UnconnectedGradients.ZERO).numpy()
  np.testing.assert_allclose(ours, want, rtol=1e-5, atol=1e-6)


def test_softsign_second_derivative():
  # TF has no gradient for SoftsignGrad; compare with -2 sign(x) / (1 + |x|)^3.
  x = np.array([-1.5, -0.3, 0.4, 2.0], np.float32)
  d1 = lambda v: jax.grad(lambda u: jnp.sum(call("Softsign", u)))(v)
  ours = jax.grad(lambda v: jnp.sum(d1(v)))(x)
  np.testing.assert_allclose(ours, -2 * np.sign(x) / (1 + np.abs(x)) ** 3, rtol=1e-5)


def test_clip_by_value_grads_match_tf():
  t = np.array([-2.0, 0.0, 0.5, 1.0, 3.0], np.float32)
  lo, hi = np.array(0.0, np.float32), np.array(1.0, np.float32)
  ours = jax.grad(lambda *a: jnp.sum(call("ClipByValue", *a)), argnums=(0, 1, 2))(t, lo, hi)
  tt, tl, th = (tf.constant(v) for v in (t, lo, hi))
  with tf.GradientTape() as tape:
    tape.watch([tt, tl, th])
    y = tf.raw_ops.ClipByValue(t=tt, clip_value_min=tl, clip_value_max=th)
  for g, w in zip(ours, tape.gradient(y, [tt, tl, th])):
    np.testing.assert_allclose(g, w.numpy())


def test_softmax_second_order_matches_tf():
  x = np.array([[0.5, -1.0, 2.0], [0.0, 0.0, 0.0]], np.float32)
  w = np.array([1.0, 2.0, -1.0], np.float32)
  for name in ("Softmax", "LogSoftmax"):
    f = lambda v: jnp.sum(call(name, v) * w)
    hess_jaxpr = jax.make_jaxpr(jax.hessian(f))(x)
    hess = jax.hessian(f)(x)
    tx = tf.constant(x)
    with tf.GradientTape() as t2:
      t2.watch(tx)
      with tf.GradientTape() as t1:
        t1.watch(tx)
        y = tf.reduce_sum(getattr(tf.raw_ops, name)(logits=tx) * w)
      g = t1.gradient(y, tx)
    want = t2.jacobian(g, tx).numpy()
    np.testing.assert_allclose(hess, want, rtol=1e-4, atol=1e-5)
    assert "tf.Sum" in str(hess_jaxpr) or "reduce_sum" in str(hess_jaxpr)


_SOFTMAX_ROWS = [
  [np.nan, 1, 2, 3],
  [np.inf, 1, 2, -np.inf],
  [np.inf, np.inf, 1, 0],
  [-np.inf] * 4,
  [-np.inf, 1, 2, 3],
  [1e30, 1, -1e30, 2],
  [1e30, 1e30, 1, 0],
  [3e38, -3e38, 0, np.nan],
  [np.nan, np.inf, 1, 0],
  [-np.inf, np.nan, -np.inf, 1],
  [-np.inf, np.nan, -np.inf, np.nan],
  [0.5, -1, 2, 0],
]


@pytest.mark.parametrize("name", ["Softmax", "LogSoftmax"])
def test_softmax_special_rows_match_tf_kernels_per_dtype(name, x64):
  # float32/float16/bfloat16 Softmax (oneDNN): NaN at NaN/+inf logits, 0 for the rest of
  # their row; float64 Softmax and LogSoftmax (Eigen): NaN for the row.
  import ml_dtypes

  if not onednn():
    pytest.skip("TF's oneDNN kernels are off")
  for dtype in (np.float32, np.float16, ml_dtypes.bfloat16, np.float64):
    if dtype in (np.float16, ml_dtypes.bfloat16) and not onednn(np.dtype(dtype).name):
      continue  # no oneDNN half kernel on this CPU (no AVX512-FP16/BF16): Eigen's
    with np.errstate(over="ignore"):
      x = np.array(_SOFTMAX_ROWS, np.float64).astype(dtype).reshape(6, 2, 4)
    want = tf_call(name, logits=tf.constant(x)).astype(np.float64)
    for ours in (call(name, x), jax.jit(lambda v: call(name, v))(x)):
      ours = np.asarray(ours).astype(np.float64)
      np.testing.assert_allclose(ours, want, rtol=1e-2, atol=1e-3, err_msg=str(dtype))
      num = ~np.isnan(want)
      np.testing.assert_array_equal(
        np.signbit(ours[num]), np.signbit(want[num]), err_msg=str(dtype)
      )


def test_softmax_nan_in_long_rows_is_lane_independent():
  # In rows longer than 8, oneDNN's SIMD max also makes some other lanes of a row holding
  # NaN NaN (which ones depends on the position and the ISA); tfprims gives NaN at the NaN
  # logits only, and agrees with TF wherever TF is not NaN.
  if not onednn():
    pytest.skip("TF's oneDNN kernels are off")
  x = np.tile(np.linspace(-1, 1, 9, dtype=np.float32), (9, 1))
  np.fill_diagonal(x, np.nan)
  want = tf_call("Softmax", logits=tf.constant(x))
  for ours in (np.asarray(call("Softmax", x)), np.asarray(jax.jit(op("Softmax"))(x))):
    np.testing.assert_array_equal(np.isnan(ours), np.eye(9, dtype=bool))
    np.testing.assert_array_equal(ours[~np.isnan(want)], want[~np.isnan(want)])


# ---------------------------------------------------------------------------
# Integer division and modulo: TF's rounding, INT_MIN / -1, and division by zero.


def _int_cases(dtype):
  info = np.iinfo(dtype)
  if info.min < 0:
    xs = [7, -7, 7, -7, 0, info.min, info.min, info.max, info.min, 5, -5, info.max]
    ys = [2, 2, -2, -2, -3, -1, 3, -1, info.min, info.min, info.min, info.min]
  else:
    xs = [7, 200 % (info.max + 1), 0, info.max, info.max, 5]
    ys = [2, 3, 3, 2, info.max, info.max]
  return np.array(xs, dtype), np.array(ys, dtype)


@pytest.mark.parametrize(
  "name", ["Div", "FloorDiv", "FloorMod", "TruncateDiv", "TruncateMod", "Mod"]
)
@pytest.mark.parametrize(
  "dtype", ["int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64"]
)
def test_integer_division_matches_tf(x64, name, dtype):
  x, y = _int_cases(np.dtype(dtype))
  try:
    want = tf_call(name, x=tf.constant(x), y=tf.constant(y))
  except (tf.errors.InvalidArgumentError, tf.errors.NotFoundError):
    pytest.skip(f"no TF CPU kernel for {name} {dtype}")
  ours = np.asarray(call(name, x, y))
  np.testing.assert_array_equal(ours, want)
  assert ours.dtype == want.dtype


@pytest.mark.parametrize(
  "name,quotient",
  [
    ("Div", True),
    ("FloorDiv", True),
    ("TruncateDiv", True),
    ("FloorMod", False),
    ("TruncateMod", False),
    ("Mod", False),
  ],
)
def test_integer_division_by_zero_is_documented(name, quotient):
  """TF raises; tfprims returns -1 (all bits set) for quotients and x for
  remainders, eagerly and under jit (docs/semantics/elementwise.md)."""
  x = np.array([7, -7, 0, np.iinfo(np.int32).min], np.int32)
  y = np.zeros_like(x)
  with pytest.raises((tf.errors.InvalidArgumentError, tf.errors.InternalError)):
    tf_call(name, x=tf.constant(x), y=tf.constant(y))
  want = np.full_like(x, -1) if quotient else x
  np.testing.assert_array_equal(call(name, x, y), want)
  np.testing.assert_array_equal(jax.jit(lambda a, b: call(name, a, b))(x, y), want)
  if name in ("Div", "FloorDiv", "TruncateDiv", "FloorMod"):
    u = np.array([7, 255], np.uint8)
    np.testing.assert_array_equal(call(name, u, np.zeros_like(u)), [255, 255] if quotient else u)


@pytest.mark.parametrize(
  "f, message",
  [
    (lambda x, y: tf.math.floordiv(x, y), "Integer division by zero"),
    (lambda x, y: tf.math.floormod(x, y), "Integer division by zero"),
    (lambda x, y: tf.raw_ops.TruncateDiv(x=x, y=y), "Integer division by zero"),
    (lambda x, y: tf.raw_ops.TruncateMod(x=x, y=y), "Integer division by zero"),
    (lambda x, y: tf.raw_ops.Div(x=x, y=y), "Integer division by zero"),
    (lambda x, y: tf.raw_ops.Mod(x=x, y=y), "Integer division by zero"),
    (lambda x, y: tf.math.pow(x, y), "Integers to negative integer powers are not allowed"),
  ],
)
def test_integer_errors_raise_in_eager_calls_and_in_checked_jit(f, message):
  import tfprims

  fn = tfprims.convert_functional(
    tf.function(f), tf.TensorSpec([2], tf.int32), tf.TensorSpec([2], tf.int32)
  )
  x, good = np.array([7, -7], np.int32), np.array([2, 3], np.int32)
  bad = np.array([2, 0], np.int32) if "division" in message else np.array([2, -1], np.int32)
  with pytest.raises(
    tf.errors.InvalidArgumentError
    if "negative" in message
    else (tf.errors.InvalidArgumentError, tf.errors.InternalError)
  ):
    f(tf.constant(x), tf.constant(bad))
  np.testing.assert_array_equal(fn(x, good), f(x, good))
  with pytest.raises(tfprims.RuntimeCheckError, match=f"node '.*': {message}"):
    fn(x, bad)  # known values: raise like TF
  jitted = jax.jit(lambda a, b: fn(a, b))
  jitted(x, bad).block_until_ready()  # the documented value, no error
  with tfprims.override_config("runtime_checks", True):
    checked = jax.jit(lambda a, b: fn(a, b))
    np.testing.assert_array_equal(checked(x, good), f(x, good))
    with pytest.raises(Exception, match=message):
      checked(x, bad).block_until_ready()


def test_float_floor_div_and_mod_match_tf():
  x = np.array(
    [7.5, -7.5, 7.5, -7.5, 0.0, -0.0, 5.0, np.inf, 5.0, np.nan, 3.0, -3.0, 1e30], np.float32
  )
  y = np.array(
    [2.0, 2.0, -2.0, -2.0, 3.0, 3.0, 0.0, 2.0, np.inf, 1.0, -np.inf, np.inf, 3e-30], np.float32
  )
  for name in ("FloorDiv", "FloorMod", "TruncateDiv", "TruncateMod", "Mod", "Div", "RealDiv"):
    for b in (y, -y):
      want = tf_call(name, x=tf.constant(x), y=tf.constant(b))
      ours = np.asarray(call(name, x, b))
      np.testing.assert_array_equal(ours, want, err_msg=name)
      np.testing.assert_array_equal(np.signbit(ours), np.signbit(want), err_msg=name)


def test_integer_pow_matches_tf_and_negative_exponents_are_documented():
  x = np.array([2, 3, -2, 0, 1, -1, 7], np.int32)
  y = np.array([30, 21, 31, 0, 5, 3, 13], np.int32)  # wraps like TF
  np.testing.assert_array_equal(
    call("Pow", x, y), tf_call("Pow", x=tf.constant(x), y=tf.constant(y))
  )
  # TF raises for negative exponents; tfprims: 1 / x**-y truncated toward zero.
  with pytest.raises(tf.errors.InvalidArgumentError):
    tf_call("Pow", x=tf.constant(np.array([2], np.int32)), y=tf.constant(np.array([-1], np.int32)))
  xn = np.array([2, 1, -1, -1, 0, -3], np.int32)
  yn = np.array([-1, -4, -3, -2, -1, -2], np.int32)
  np.testing.assert_array_equal(call("Pow", xn, yn), [0, 1, -1, 1, 0, 0])


@pytest.mark.parametrize("dtype", ["int8", "int16", "int32", "int64"])
def test_integer_pow_squares_over_every_exponent_bit_like_tf(dtype, x64):
  # jnp.power stops after 6 bits of the exponent (2 ** 64 was 1, TF's is 0; 3 ** 65 differs).
  info = np.iinfo(dtype)
  xs = np.array([2, -2, 3, -3, 5, 7, 1, -1, 0, info.max, info.min], dtype)
  ys = np.array([63, 64, 65, 66, 70, 100, info.max], dtype)
  x, y = (a.ravel() for a in np.meshgrid(xs, ys, indexing="ij"))
  want = tf_call("Pow", x=tf.constant(x), y=tf.constant(y))
  np.testing.assert_array_equal(call("Pow", x, y), want)
  np.testing.assert_array_equal(jax.jit(op("Pow"))(x, y), want)


def test_pow_and_atan2_of_subnormals_are_tf_scalar_and_xla_results(x64):
  # TF's CPU kernels treat a subnormal as 0 inside SIMD packets and as itself in the
  # scalar tail (pow(0, 1e-40) is 1 for 16 elements, 0 for one); TF-XLA and tfprims give
  # the scalar results (docs/semantics/elementwise.md).
  for dtype, d in ((np.float32, 1e-40), (np.float64, 1e-310)):
    cases = {
      "Pow": (dict(x=[0.0, -0.0, -2.0, 2.0, 0.0], y=[d, -d, d, d, 2 * d])),
      "Atan2": (dict(y=[0.0, d, d, -1.0, -0.0], x=[d, d, 0.0, d, d])),
    }
    for name, kw in cases.items():
      kw = {k: np.array(v, dtype) for k, v in kw.items()}
      scalar = np.array(
        [
          tf_call(name, **{k: tf.constant(v[i : i + 1]) for k, v in kw.items()})[0]
          for i in range(5)
        ]
      )
      xla = tf.function(lambda **a: getattr(tf.raw_ops, name)(**a), jit_compile=True)(
        **{k: tf.constant(v) for k, v in kw.items()}
      ).numpy()
      np.testing.assert_array_equal(scalar, xla, err_msg=name)
      args = [kw[k] for k in (("x", "y") if name == "Pow" else ("y", "x"))]
      np.testing.assert_array_equal(call(name, *args), scalar, err_msg=name)
      np.testing.assert_array_equal(jax.jit(op(name))(*args), scalar, err_msg=name)


def test_lgamma_is_exactly_zero_at_one_and_two_like_tf(x64):
  # XLA's float32 lgamma(1) is 4.8e-7; FloorDiv by a huge negative turned it into -1.
  for dtype in (np.float16, np.float32, np.float64):
    x = np.array([1.0, 2.0, 3.0, 0.5, 1.5, -0.5], dtype)
    want = tf_call("Lgamma", x=tf.constant(x))
    got = np.asarray(call("Lgamma", x))
    np.testing.assert_array_equal(got[:2], want[:2])
    np.testing.assert_array_equal(np.signbit(got[:2]), np.signbit(want[:2]))
    np.testing.assert_allclose(got, want, rtol=1e-3, atol=1e-5)
    y = np.full(6, -1e30 if dtype != np.float16 else -6e4, dtype)
    lg = jax.jit(op("Lgamma"))(x)
    np.testing.assert_array_equal(
      call("FloorDiv", lg, y)[:2], tf_call("FloorDiv", x=tf.constant(want), y=tf.constant(y))[:2]
    )


def test_erfinv_next_to_one_is_tf_xlas(x64):
  # TF's kernel computes ndtri(x / 2 + 1/2): the float next to 1 rounds to ndtri(1) = inf
  # on both sides, and float64 loses accuracy near 1; tfprims uses XLA's erf_inv, as
  # TF-XLA does (docs/semantics/elementwise.md).
  xla = tf.function(lambda v: tf.raw_ops.Erfinv(x=v), jit_compile=True)
  for dtype in (np.float32, np.float64):
    eps = np.finfo(dtype).eps
    x = np.array([1 + eps, 1 - eps / 2, -1 - eps, 1e-10, 1 - 1e-12, 1.0], dtype)
    want = xla(tf.constant(x)).numpy()
    for got in (call("Erfinv", x), jax.jit(op("Erfinv"))(x)):
      np.testing.assert_allclose(np.asarray(got), want, rtol=1e-6)
    eager = tf_call("Erfinv", x=tf.constant(x))
    assert eager[0] == np.inf and np.isnan(want[0])
    zeros = np.array([-0.0, 0.0], dtype)  # TF's ndtri(1/2) is +0.0 for both
    np.testing.assert_array_equal(
      np.signbit(call("Erfinv", zeros)), np.signbit(tf_call("Erfinv", x=tf.constant(zeros)))
    )


@pytest.mark.parametrize("dtype", ["int8", "int32", "uint8", "uint32"])
def test_shifts_match_tf(dtype):
  dtype = np.dtype(dtype)
  bits = 8 * dtype.itemsize
  info = np.iinfo(dtype)
  x = np.array([1, 5, 100, info.max, info.min, 3, 3, 3, 3, info.max // 3], dtype)
  amounts = [0, 1, 3, 1, 1, bits - 1, bits, bits + 1, 100, bits // 2]
  if info.min < 0:
    amounts[-1] = -3
  y = np.array(amounts, dtype)
  for name in ("LeftShift", "RightShift"):
    np.testing.assert_array_equal(
      call(name, x, y), tf_call(name, x=tf.constant(x), y=tf.constant(y))
    )


def test_int64_shifts_match_tf(x64):
  x = np.array([1, -8, 2**40, -(2**50), 3], np.int64)
  y = np.array([40, 70, 23, 63, -2], np.int64)
  for name in ("LeftShift", "RightShift"):
    np.testing.assert_array_equal(
      call(name, x, y), tf_call(name, x=tf.constant(x), y=tf.constant(y))
    )


# ---------------------------------------------------------------------------
# Cast.

_BAD = np.array(
  [
    np.nan,
    np.inf,
    -np.inf,
    3e9,
    -3e9,
    1e20,
    -1e20,
    2.7,
    -2.7,
    300.0,
    -300.0,
    2147483520.0,
    2147483648.0,
    -2147483648.0,
    -2147483904.0,
    4294967040.0,
    5e9,
    9.3e18,
    -9.2233715e18,
  ],
  np.float32,
)


def test_cast_float_to_int32_matches_tf_for_nan_inf_and_out_of_range():
  for src in (np.float32, np.float16, np.float64):
    with np.errstate(over="ignore"):
      x = _BAD.astype(src)
    want = tf_call("Cast", x=tf.constant(x), DstT=tf.int32)
    np.testing.assert_array_equal(call("Cast", x, DstT=np.dtype("int32"), Truncate=False), want)
    np.testing.assert_array_equal(
      jax.jit(lambda v: call("Cast", v, DstT=np.dtype("int32"), Truncate=False))(x), want
    )


@pytest.mark.parametrize("dst", ["int64", "uint64", "uint32"])
def test_cast_float_to_wide_ints_matches_tf(x64, dst):
  x = _BAD
  if dst == "uint32":  # TF's result outside (-2**31, 2**32) depends on the tensor size
    t = np.trunc(x)
    x = x[(t > -(2.0**31)) & (t < 2.0**32)]
  want = tf_call("Cast", x=tf.constant(x), DstT=tf.as_dtype(dst))
  np.testing.assert_array_equal(call("Cast", x, DstT=np.dtype(dst), Truncate=False), want)


@pytest.mark.parametrize("dst", ["int8", "uint8", "int16", "uint16"])
def test_cast_float_to_narrow_ints(dst):
  """In range: TF's value. Out of range TF's result depends on the tensor size
  (vectorised: the int32 result saturated; scalar tail: its low bits);
  tfprims always saturates, which is TF's vectorised result."""
  info = np.iinfo(dst)
  x = np.array([2.7, -2.7, info.max + 0.5, float(info.min), 0.0, -0.9], np.float32)
  x = x[(np.trunc(x) >= info.min) & (np.trunc(x) <= info.max)]
  want = tf_call("Cast", x=tf.constant(x), DstT=tf.as_dtype(dst))
  np.testing.assert_array_equal(call("Cast", x, DstT=np.dtype(dst), Truncate=False), want)
  bad = np.repeat(_BAD[:, None], 64, axis=1)  # big enough for TF's vectorised path
  want = tf_call("Cast", x=tf.constant(bad), DstT=tf.as_dtype(dst))[:, 0]
  ours = np.asarray(call("Cast", bad, DstT=np.dtype(dst), Truncate=False))[:, 0]
  np.testing.assert_array_equal(ours, want)


def test_cast_truncate_and_other_pairs_match_tf():
  f = np.array(
    [
      1.00048828125,
      1.25122,
      65520.0,
      1e-8,
      3.4e38,
      np.nan,
      -1.00146484375,
      1.0 + 2**-9 + 2**-12,
      -np.inf,
    ],
    np.float32,
  )
  import ml_dtypes

  for dst in (np.float16, ml_dtypes.bfloat16):
    for truncate in (False, True):
      want = tf_call("Cast", x=tf.constant(f), DstT=dst, Truncate=truncate)
      ours = np.asarray(call("Cast", f, DstT=np.dtype(dst), Truncate=truncate))
      np.testing.assert_array_equal(ours.astype(np.float32), want.astype(np.float32))
  c = np.array([2.7 + 5j, complex(np.nan, 1), 1j, -3.5 + 0j, 0j], np.complex64)  # bool: real part
  for dst in ("float32", "int32", "bool", "complex128", "float16"):
    want = tf_call("Cast", x=tf.constant(c), DstT=tf.as_dtype(dst))
    ours = np.asarray(call("Cast", c, DstT=np.dtype(dst), Truncate=False))
    np.testing.assert_array_equal(ours, want.astype(ours.dtype))
  i = np.array([300, -300, 70000, -1, 2**31 - 1, -(2**31)], np.int32)
  for dst in ("int8", "uint8", "uint16", "float16", "bool", "uint32"):
    want = tf_call("Cast", x=tf.constant(i), DstT=tf.as_dtype(dst))
    np.testing.assert_array_equal(call("Cast", i, DstT=np.dtype(dst), Truncate=False), want)


def test_cast_x64_off_gives_32_bit_dtypes_without_warnings():
  import warnings

  x = np.array([1.5, -2.5], np.float32)
  with warnings.catch_warnings():
    warnings.simplefilter("error")
    assert call("Cast", x, DstT=np.dtype("int64"), Truncate=False).dtype == jnp.int32
    assert call("Cast", x, DstT=np.dtype("float64"), Truncate=False).dtype == jnp.float32
    assert call("Cast", x, DstT=np.dtype("complex128"), Truncate=False).dtype == jnp.complex64


def test_cast_grads_match_tf():
  x = np.array([1.5, -2.0], np.float32)
  for dst in ("float16", "float64", "complex64"):
    f = lambda v: jnp.sum(jnp.real(call("Cast", v, DstT=np.dtype(dst), Truncate=False)))
    tx = tf.constant(x)
    with tf.GradientTape() as tape:
      tape.watch(tx)
      y = tf.reduce_sum(tf.math.real(tf.raw_ops.Cast(x=tx, DstT=tf.as_dtype(dst))))
    np.testing.assert_allclose(jax.grad(f)(x), tape.gradient(y, tx).numpy())
  # to an integer: zero derivative (TF: no gradient)
  assert (
    jax.jvp(lambda v: call("Cast", v, DstT=np.dtype("int32"), Truncate=False), (x,), (x,))[1].dtype
    == jax.dtypes.float0
  )


# ---------------------------------------------------------------------------
# Other choices.


def test_round_half_to_even_and_integers():
  x = np.array([0.5, 1.5, 2.5, -0.5, -1.5, -2.5, 0.49999997, np.nan], np.float32)
  np.testing.assert_array_equal(call("Round", x), tf_call("Round", x=tf.constant(x)))
  # TF 2.21's CPU kernel returns 0 for integer Round; tf.round returns x (documented).
  i = np.array([5, -3, 7], np.int32)
  np.testing.assert_array_equal(call("Round", i), tf.round(tf.constant(i)).numpy())


def test_approximate_equal_uses_less_equal_like_tf():
  x = np.array([1.0, 1.0, 1.0, np.nan, np.inf], np.float32)
  y = np.array([1.0, 1.5, 2.0, np.nan, np.inf], np.float32)
  for tol in (0.0, 0.5, 1.0):
    np.testing.assert_array_equal(
      call("ApproximateEqual", x, y, tolerance=tol),
      tf_call("ApproximateEqual", x=tf.constant(x), y=tf.constant(y), tolerance=tol),
    )


def test_equal_incompatible_shapes():
  x = np.array([1, 2], np.int32)
  y = np.array([1, 2, 3], np.int32)
  for name in ("Equal", "NotEqual"):
    want = tf_call(name, x=tf.constant(x), y=tf.constant(y), incompatible_shape_error=False)
    ours = call(name, x, y, incompatible_shape_error=False)
    np.testing.assert_array_equal(ours, want)
    assert ours.shape == want.shape == ()
    batched = jax.vmap(lambda a, b: call(name, a, b, incompatible_shape_error=False))(
      np.stack([x, x]), np.stack([y, y])
    )
    np.testing.assert_array_equal(batched, [want, want])
    with pytest.raises((ValueError, TypeError)):
      call(name, x, y, incompatible_shape_error=True)


def test_clip_by_value_nan_bounds_and_complex_match_tf():
  t = np.array([np.nan, 1.0, 5.0, -3.0], np.float32)
  for lo, hi in ((0.0, 2.0), (3.0, 2.0), (np.nan, 2.0), (0.0, np.nan)):
    lo, hi = np.array(lo, np.float32), np.array(hi, np.float32)
    want = tf_call(
      "ClipByValue",
      t=tf.constant(t),
      clip_value_min=tf.constant(lo),
      clip_value_max=tf.constant(hi),
    )
    np.testing.assert_array_equal(call("ClipByValue", t, lo, hi), want)
  c = np.array([1 + 5j, 3 - 1j, -2 + 0j, 0.5 + 0.5j], np.complex64)
  lo, hi = np.array(0 + 1j, np.complex64), np.array(2 + 0j, np.complex64)
  want = tf_call(
    "ClipByValue", t=tf.constant(c), clip_value_min=tf.constant(lo), clip_value_max=tf.constant(hi)
  )
  np.testing.assert_array_equal(call("ClipByValue", c, lo, hi), want)


@pytest.mark.parametrize("name", ["MulNoNan", "SquaredDifference", "Xdivy", "Xlogy", "Xlog1py"])
def test_complex_values_and_derivatives(name):
  """Values vs TF; derivatives vs central differences (TF's complex gradients
  of these ops lack the conjugations its convention needs)."""
  rng = np.random.default_rng(3)
  x = (rng.uniform(-2, 2, (3,)) + 1j * rng.uniform(-2, 2, (3,))).astype(np.complex128)
  y = (rng.uniform(-2, 2, (2, 1)) + 1j * rng.uniform(-2, 2, (2, 1))).astype(np.complex128)
  x[0] = 0
  with jax.enable_x64(True):
    np.testing.assert_allclose(
      call(name, x, y), tf_call(name, x=tf.constant(x), y=tf.constant(y)), rtol=1e-12, atol=1e-12
    )
    tx = rng.standard_normal(3) + 1j * rng.standard_normal(3)
    ty = rng.standard_normal((2, 1)) + 1j * rng.standard_normal((2, 1))
    f = lambda a, b: call(name, a, b)
    _, jvp = jax.jvp(f, (x, y), (tx, ty))
    h = 1e-6
    fd = (np.asarray(f(x + h * tx, y + h * ty)) - np.asarray(f(x - h * tx, y - h * ty))) / (2 * h)
    mask = np.broadcast_to(x != 0, fd.shape)  # x == 0 is a kink (TF's 0 there)
    np.testing.assert_allclose(np.asarray(jvp)[mask], fd[mask], rtol=1e-6, atol=1e-8)


def test_relu_grad_ops_propagate_nan_like_tf_kernels():
  g = np.array([np.nan, np.inf, 1.0, 1.0], np.float32)
  f = np.array([-1.0, -1.0, 0.0, np.nan], np.float32)
  for name in ("ReluGrad", "Relu6Grad"):
    want = tf_call(name, gradients=tf.constant(g), features=tf.constant(f))
    np.testing.assert_array_equal(call(name, g, f), want)
    np.testing.assert_array_equal(jax.jit(lambda a, b: call(name, a, b))(g, f), want)


def test_relu_keeps_negative_zero_and_nan_as_tf_scalar_formula():
  # TF's CPU kernel gives -0.0 outside full SIMD packets (3 floats, any half type) and
  # +0.0 inside them; tfprims keeps -0.0 everywhere (docs/semantics/elementwise.md).
  import ml_dtypes

  for dtype in (np.float32, np.float16, ml_dtypes.bfloat16):
    for values in ([-0.0, -1.0, np.nan], [7.0, 0.0, 3.0]):
      x = np.array(values, dtype)
      for name in ("Relu", "Relu6"):
        want = tf_call(name, features=tf.constant(x)).astype(np.float32)
        for ours in (call(name, x), jax.jit(lambda v: call(name, v))(x)):
          ours = np.asarray(ours).astype(np.float32)
          np.testing.assert_array_equal(ours, want, err_msg=name)
          np.testing.assert_array_equal(np.signbit(ours), np.signbit(want), err_msg=name)
  long = np.full(64, -0.0, np.float32)
  for name in ("Relu", "Relu6"):
    assert np.signbit(jax.jit(lambda v: call(name, v))(long)).all(), name


def test_softplus_thresholds_match_tf():
  import ml_dtypes

  x = np.array([-20, -16, -15, -10, -3, -2.5, 0, 2.5, 3, 10, 15, 16, 20], np.float32)
  for dtype in (np.float32, np.float16, ml_dtypes.bfloat16):
    xd = x.astype(dtype)
    want = tf_call("Softplus", features=tf.constant(xd)).astype(np.float32)
    ours = np.asarray(call("Softplus", xd)).astype(np.float32)
    np.testing.assert_allclose(ours, want, rtol=1e-2 if dtype != np.float32 else 1e-6)


def test_erf_float64_of_huge_values_is_one_where_tf_cpu_gives_nan(x64):
  from tfprims.ops.elementwise import unary as E

  x = np.array([np.inf, -np.inf, 1e200, -2e154, 1e10], np.float64)
  np.testing.assert_array_equal(np.asarray(E.Erf(x)), [1, -1, 1, -1, 1])
  # The documented difference: TF's CPU double kernel is NaN from 1.34e154 on.
  tf_out = tf.raw_ops.Erf(x=x).numpy()
  assert np.isnan(tf_out[:4]).all() and tf_out[4] == 1
  below = np.nextafter(E._TF_ERF_F64_NAN_FROM, 0)
  assert tf.raw_ops.Erf(x=np.array([below])).numpy()[0] == 1
  # float32 agrees with TF everywhere, infinities included.
  x32 = np.array([np.inf, -np.inf, 3e38], np.float32)
  np.testing.assert_array_equal(np.asarray(E.Erf(x32)), tf.raw_ops.Erf(x=x32).numpy())


# ---------------------------------------------------------------------------
# Boundary values found by the property runner's edge grid (docs/semantics/elementwise.md).
# TF runs its kernels with subnormals flushed (as XLA does): 0.75 * tiny is 0 in both.


def _same_bits(got, want, msg=""):
  got, want = np.asarray(got), np.asarray(want)
  np.testing.assert_array_equal(got, want, err_msg=msg)
  both_zero = (got == 0) & (want == 0)
  np.testing.assert_array_equal(
    np.signbit(got)[both_zero], np.signbit(want)[both_zero], err_msg=f"{msg}: sign of zero"
  )


def _tf_scalar(name, **kw):
  """TF's kernel on one element at a time (its scalar code)."""
  n = len(next(iter(kw.values())))
  return np.array(
    [tf_call(name, **{k: tf.constant(v[i : i + 1]) for k, v in kw.items()})[0] for i in range(n)]
  )


def _tf_packets(name, **kw):
  """TF's kernel on each element repeated 32 times (inside SIMD packets)."""
  return tf_call(name, **{k: tf.constant(np.repeat(v, 32)) for k, v in kw.items()})[::32]


def _tf_forward(name, kw, tangents):
  xs = {k: tf.constant(v) for k, v in kw.items()}
  with tf.autodiff.ForwardAccumulator(
    [xs[k] for k in tangents], [tf.constant(t) for t in tangents.values()]
  ) as acc:
    out = getattr(tf.raw_ops, name)(**xs)
  return acc.jvp(out).numpy()


def _tf_backward(name, kw, ct):
  xs = {k: tf.constant(v) for k, v in kw.items()}
  with tf.GradientTape() as tape:
    tape.watch(list(xs.values()))
    out = getattr(tf.raw_ops, name)(**xs)
  grads = tape.gradient(out, list(xs.values()), output_gradients=tf.constant(ct))
  return [g.numpy() for g in grads]


def _ours_jvp_vjp(name, args, tangents, ct, jit):
  f = lambda *a: call(name, *a)
  jvp = lambda a, t: jax.jvp(f, a, t)[1]
  vjp = lambda a, c: jax.vjp(f, *a)[1](c)
  if jit:
    jvp, vjp = jax.jit(jvp), jax.jit(vjp)
  return np.asarray(jvp(args, tangents)), [np.asarray(g) for g in vjp(args, ct)]


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_pow_derivatives_multiply_in_tfs_order(x64, dtype):
  # TF: (grad * y) * pow(x, y - 1) and (grad * z) * log(x): grad * tiny flushes to 0
  # before the other factor, so 0 * pow(0, tiny - 1) = 0 * inf is NaN and 0.5**tiny
  # gives 0, where y * pow(...) first gives inf and tiny.
  tiny = np.finfo(dtype).tiny
  x = np.array([0.0, -0.0, 0.5, -0.5, tiny, tiny, tiny, 2.0], dtype)
  y = np.array([tiny, -tiny, tiny, -tiny, 2.0, -1.0, 1.0, 3.0], dtype)
  t = np.full_like(x, 0.75)
  want_jvp = _tf_forward("Pow", dict(x=x, y=y), dict(x=t, y=t))
  want_vjp = _tf_backward("Pow", dict(x=x, y=y), t)
  for jit in (False, True):
    got_jvp, got_vjp = _ours_jvp_vjp("Pow", [x, y], [t, t], t, jit)
    _same_bits(got_jvp, want_jvp, f"jvp jit={jit}")
    for g, w, arg in zip(got_vjp, want_vjp, "xy"):
      _same_bits(g, w, f"vjp d/d{arg} jit={jit}")


@pytest.mark.parametrize("name", ["Div", "RealDiv"])
def test_div_derivative_divides_twice_like_tf(x64, name):
  # TF's d/dy is grad * (-x / y / y); XLA rewrites (a / b) / c into a / (b * c), whose
  # b * c underflows to 0 (0 / 0 = NaN at x = 0, inf where TF's is finite).
  for dtype in (np.float32, np.float64):
    tiny = np.finfo(dtype).tiny
    x = np.array([0.0, 1e-30, -3.0, 2.0, 1.0], dtype)
    y = np.array([tiny, tiny, 1e-30, 1e-20, 4.0], dtype)
    tx = np.array([0.3, -1.2, 0.7, 1.0, 2.0], dtype)
    ty = np.array([1.1, 0.4, -0.9, 1.0, 1.0], dtype)
    want_jvp = _tf_forward(name, dict(x=x, y=y), dict(x=tx, y=ty))
    want_vjp = _tf_backward(name, dict(x=x, y=y), ty)
    for jit in (False, True):
      got_jvp, got_vjp = _ours_jvp_vjp(name, [x, y], [tx, ty], ty, jit)
      np.testing.assert_allclose(got_jvp, want_jvp, rtol=1e-6, err_msg=f"jvp jit={jit}")
      for g, w in zip(got_vjp, want_vjp):
        np.testing.assert_allclose(g, w, rtol=1e-6, err_msg=f"vjp jit={jit}")


def test_maximum_minimum_ties_of_signed_zeros_and_nan(x64):
  # TF returns x for a tie of -0.0 and +0.0 in its scalar code and its half kernels,
  # y inside float32/float64 SIMD packets; NaN if either operand is NaN everywhere.
  # tfprims returns x (XLA's max/min gave +0.0/-0.0 whatever the order).
  import ml_dtypes

  x = [0.0, -0.0, -0.0, 0.0, np.nan, 1.0, -np.nan, 2.0]
  y = [-0.0, 0.0, -0.0, 0.0, 1.0, np.nan, 3.0, 2.0]
  for dtype in (np.float32, np.float64, np.float16, ml_dtypes.bfloat16):
    kw = dict(x=np.array(x, dtype), y=np.array(y, dtype))
    for name in ("Maximum", "Minimum"):
      want = _tf_scalar(name, **kw).astype(np.float32)
      _same_bits(want[:4], [0.0, -0.0, -0.0, 0.0], name)  # x
      packets = _tf_packets(name, **kw).astype(np.float32)
      if dtype in (np.float32, np.float64):
        _same_bits(packets[:4], [-0.0, 0.0, -0.0, 0.0], name)  # y
      else:
        _same_bits(packets, want, name)
      for ours in (call(name, kw["x"], kw["y"]), jax.jit(op(name))(kw["x"], kw["y"])):
        _same_bits(np.asarray(ours).astype(np.float32), want, f"{name} {dtype}")


def test_bessel_i1_of_negative_zero_is_positive_zero_like_tf(x64):
  # Cephes negates the result for x < 0 only.
  for dtype in (np.float16, np.float32, np.float64):
    x = np.array([-0.0, 0.0, -1.0, 1.0], dtype)
    for name in ("BesselI1", "BesselI1e"):
      want = tf_call(name, x=tf.constant(x))
      assert not np.signbit(want[0])
      for ours in (call(name, x), jax.jit(op(name))(x)):
        _same_bits(ours[:2], want[:2], name)
        np.testing.assert_allclose(ours, want, rtol=1e-3)


def test_relu_of_negative_zero_is_tfs_scalar_result_not_its_packets():
  # Pins the documented inconsistency the property spec avoids (it draws no -0.0).
  x = np.array([-0.0, -1.0, 0.0], np.float32)
  for name in ("Relu", "Relu6"):
    _same_bits(_tf_scalar(name, features=x), [-0.0, 0.0, 0.0], name)
    _same_bits(_tf_packets(name, features=x), [0.0, 0.0, 0.0], name)
    _same_bits(call(name, x), [-0.0, 0.0, 0.0], name)


@pytest.mark.parametrize("name", ["Xdivy", "Xlogy", "Xlog1py"])
def test_x_functions_of_negative_zero_x_are_tfs_scalar_and_xla_results(name):
  # TF's scalar code returns 0 where x == 0, its SIMD packets return x (-0.0);
  # TF-XLA and tfprims +0.0.
  x = np.array([-0.0, 0.0, -0.0], np.float32)
  y = np.array([2.0, 2.0, -3.0], np.float32)
  _same_bits(_tf_scalar(name, x=x, y=y), [0.0, 0.0, 0.0], name)
  _same_bits(_tf_packets(name, x=x, y=y), [-0.0, 0.0, -0.0], name)
  xla = tf.function(lambda a, b: getattr(tf.raw_ops, name)(x=a, y=b), jit_compile=True)(x, y)
  _same_bits(xla.numpy(), [0.0, 0.0, 0.0], name)
  for ours in (call(name, x, y), jax.jit(op(name))(x, y)):
    _same_bits(ours, [0.0, 0.0, 0.0], name)


def test_sqrt_grad_and_rsqrt_grad_are_tfs_scalar_formulas(x64):
  # SqrtGrad: scalar (0.5 * dy) / y, packets dy * (0.5 / y). RsqrtGrad: scalar
  # -0.5 * (dy * y) * (y * y), packets mul_no_nan (+0.0 where y * dy is 0).
  tiny, big = np.finfo(np.float32).tiny, np.finfo(np.float32).max
  y = np.array([0.0, 0.5, big, 2.0], np.float32)
  dy = np.array([tiny, tiny, big, 0.0], np.float32)
  want = [np.nan, 0.0, 0.5, 0.0]
  _same_bits(_tf_scalar("SqrtGrad", y=y, dy=dy), want)
  np.testing.assert_array_equal(_tf_packets("SqrtGrad", y=y, dy=dy), [np.inf, tiny, 0.0, 0.0])
  for ours in (call("SqrtGrad", y, dy), jax.jit(op("SqrtGrad"))(y, dy)):
    _same_bits(ours, want, "SqrtGrad")
  y = np.array([0.0, -0.0, 0.5, 2.0], np.float32)
  dy = np.array([1.0, 1.0, tiny, 0.0], np.float32)
  want = [-0.0, 0.0, -0.0, 0.0]  # -0.5 * (1 * -0) * (-0 * -0) is +0.0
  _same_bits(_tf_scalar("RsqrtGrad", y=y, dy=dy), want)
  _same_bits(_tf_packets("RsqrtGrad", y=y, dy=dy), [0.0, 0.0, 0.0, 0.0])
  for ours in (call("RsqrtGrad", y, dy), jax.jit(op("RsqrtGrad"))(y, dy)):
    _same_bits(ours, want, "RsqrtGrad")


def test_documented_flush_differences_lgamma_and_atan2_jvp(x64):
  # XLA reads a subnormal input as 0 (Lgamma(1e-45) is inf; TF's kernel 103.97). XLA
  # fuses Atan2's JVP numerator t_y x - t_x y into an FMA and flushes its subnormal
  # result (0 / 0 = NaN, as TF-XLA), where TF rounds each product first (-inf).
  x = np.array([1e-45, 1.0], np.float32)
  np.testing.assert_allclose(tf_call("Lgamma", x=tf.constant(x)), [103.972, 0.0], atol=1e-3)
  np.testing.assert_array_equal(call("Lgamma", x), [np.inf, 0.0])
  tiny = np.finfo(np.float32).tiny
  y, x = np.full(2, tiny, np.float32), np.full(2, -tiny, np.float32)
  ty, tx = np.full(2, -0.5496224, np.float32), np.full(2, 1.4087894, np.float32)
  assert np.isneginf(_tf_forward("Atan2", dict(y=y, x=x), dict(y=ty, x=tx))).all()
  jvp = jax.jit(lambda *a: jax.jvp(op("Atan2"), a[:2], a[2:])[1])
  xla = tf.function(jit_compile=True)(lambda *a: _tf_forward_in_graph(*a))
  assert np.isnan(jvp(y, x, ty, tx)).all() and np.isnan(xla(y, x, ty, tx).numpy()).all()


def _tf_forward_in_graph(y, x, ty, tx):
  with tf.autodiff.ForwardAccumulator([y, x], [ty, tx]) as acc:
    out = tf.raw_ops.Atan2(y=y, x=x)
  return acc.jvp(out)


@pytest.mark.parametrize("name", ["Div", "RealDiv", "DivNoNan", "Xdivy", "FloorDiv", "TruncateDiv"])
def test_division_by_a_broadcast_or_constant_divides_like_tf(name):
  # XLA rewrites x / broadcast(y) (and x / 255.0) into x * (1 / y): 1 ulp off, and
  # inf * 0 = NaN where 1 / y is subnormal; TF divides.
  x = np.array([[3.0], [np.inf], [1.0], [5.0]], np.float32)
  y = np.array([7.0, 3.4e38, 3.0], np.float32)
  want = tf_call(name, x=tf.constant(x), y=tf.constant(y))
  for f in (op(name), jax.jit(op(name)), jax.vmap(op(name), in_axes=(0, None))):
    _same_bits(f(x, y), want, name)
  const = jax.jit(lambda v: call(name, v, np.float32(7.0)))(x[:, 0])
  _same_bits(const, tf_call(name, x=tf.constant(x[:, 0]), y=tf.constant(np.float32(7.0))), name)
