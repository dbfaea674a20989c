"""nn ops: behaviour the generic property runner does not cover.

TF-named gradient/vmap jaxprs, gradients against tf.GradientTape (including cases the
specs cannot draw), TF's SAME-padding edge windows, max-pool NaN and tie conventions,
FusedBatchNormV3 training outputs, and HLO parity with hand-written lax code.
"""

import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import tensorflow as tf

import tfprims  # registers the ops
from tfprims.ops import image, nn
from tfprims.testing.tf_kernels import onednn

RNG = np.random.default_rng(0)


def _randn(*shape, dtype=np.float32):
  return RNG.normal(size=shape).astype(dtype)


def _prims(jaxpr):
  """Primitive names of a closed jaxpr, sub-jaxprs included."""
  names = set()

  def visit(j):
    for eqn in j.eqns:
      names.add(eqn.primitive.name)
      for value in eqn.params.values():
        for sub in value if isinstance(value, (tuple, list)) else (value,):
          if hasattr(sub, "eqns"):
            visit(sub)
          elif hasattr(getattr(sub, "jaxpr", None), "eqns"):
            visit(sub.jaxpr)

  visit(jaxpr.jaxpr)
  return names


needs_onednn = pytest.mark.skipif("not onednn()", reason="needs TF's oneDNN CPU kernels")


def _tf(op, **kw):
  return getattr(tf.raw_ops, op)(
    **{k: tf.constant(v) if isinstance(v, np.ndarray) else v for k, v in kw.items()}
  )


# ---------------------------------------------------------------------------
# Conv2D gradients vs TF
# ---------------------------------------------------------------------------

CONV_CASES = [
  # data_format, x shape, w shape, strides, padding, explicit_paddings, dilations
  ("NHWC", (2, 5, 6, 3), (3, 2, 3, 4), (1, 1, 1, 1), "SAME", (), (1, 1, 1, 1)),
  ("NHWC", (1, 6, 5, 2), (2, 3, 2, 3), (1, 2, 3, 1), "SAME", (), (1, 1, 1, 1)),
  ("NHWC", (2, 5, 5, 2), (3, 3, 2, 2), (1, 2, 2, 1), "VALID", (), (1, 1, 1, 1)),
  ("NHWC", (1, 6, 6, 2), (2, 2, 2, 3), (1, 2, 2, 1), "SAME", (), (1, 2, 2, 1)),
  (
    "NHWC",
    (1, 4, 5, 2),
    (2, 3, 2, 2),
    (1, 2, 1, 1),
    "EXPLICIT",
    (0, 0, 1, 2, 0, 1, 0, 0),
    (1, 1, 1, 1),
  ),
  ("NCHW", (2, 3, 5, 6), (3, 2, 3, 4), (1, 1, 2, 2), "SAME", (), (1, 1, 1, 1)),
  ("NCHW", (1, 2, 6, 5), (2, 2, 2, 3), (1, 1, 1, 2), "VALID", (), (1, 1, 2, 1)),
]


@pytest.mark.parametrize("fmt,xs,ws,strides,padding,epads,dil", CONV_CASES)
def test_conv2d_values_and_grads_match_tf(fmt, xs, ws, strides, padding, epads, dil):
  if fmt == "NCHW" and not onednn():
    pytest.skip("TF has no NCHW CPU kernel without oneDNN")
  x, w = _randn(*xs), _randn(*ws)
  attrs = dict(
    strides=strides, padding=padding, explicit_paddings=epads, data_format=fmt, dilations=dil
  )
  y_tf = _tf(
    "Conv2D",
    input=x,
    filter=w,
    **{k: list(v) if isinstance(v, tuple) else v for k, v in attrs.items()},
  )
  ct = _randn(*y_tf.shape)
  xv, wv = tf.Variable(x), tf.Variable(w)
  with tf.GradientTape() as tape:
    y = tf.raw_ops.Conv2D(
      input=xv, filter=wv, **{k: list(v) if isinstance(v, tuple) else v for k, v in attrs.items()}
    )
    loss = tf.reduce_sum(y * ct)
  gx_tf, gw_tf = tape.gradient(loss, [xv, wv])

  f = lambda x, w: jnp.sum(nn.Conv2D(x, w, **attrs) * ct)
  np.testing.assert_allclose(nn.Conv2D(x, w, **attrs), y_tf, rtol=1e-4, atol=1e-4)
  gx, gw = jax.grad(f, argnums=(0, 1))(x, w)
  np.testing.assert_allclose(gx, gx_tf, rtol=1e-4, atol=1e-4)
  np.testing.assert_allclose(gw, gw_tf, rtol=1e-4, atol=1e-4)
  gx_j, gw_j = jax.jit(jax.grad(f, argnums=(0, 1)))(x, w)
  np.testing.assert_allclose(gx_j, gx_tf, rtol=1e-4, atol=1e-4)
  np.testing.assert_allclose(gw_j, gw_tf, rtol=1e-4, atol=1e-4)


def test_conv2d_second_derivative_matches_tf():
  """Transposes of the backprop ops (Hessian-vector products) agree with TF's nested tapes."""
  x, w = _randn(1, 5, 5, 2), _randn(3, 3, 2, 2)
  attrs = dict(
    strides=(1, 2, 2, 1),
    padding="SAME",
    explicit_paddings=(),
    data_format="NHWC",
    dilations=(1, 1, 1, 1),
  )
  xv, wv = tf.Variable(x), tf.Variable(w)
  with tf.GradientTape() as outer:
    with tf.GradientTape() as inner:
      y = tf.raw_ops.Conv2D(input=xv, filter=wv, strides=[1, 2, 2, 1], padding="SAME")
      loss = tf.reduce_sum(tf.sin(y))
    gx, gw = inner.gradient(loss, [xv, wv])
    second = tf.reduce_sum(gx * gx) + tf.reduce_sum(gw * gw)
  hx_tf, hw_tf = outer.gradient(second, [xv, wv])

  def first(x, w):
    return jax.grad(lambda x, w: jnp.sum(jnp.sin(nn.Conv2D(x, w, **attrs))), (0, 1))(x, w)

  def second_j(x, w):
    gx, gw = first(x, w)
    return jnp.sum(gx * gx) + jnp.sum(gw * gw)

  hx, hw = jax.grad(second_j, (0, 1))(x, w)
  np.testing.assert_allclose(hx, hx_tf, rtol=1e-3, atol=1e-3)
  np.testing.assert_allclose(hw, hw_tf, rtol=1e-3, atol=1e-3)


def _convnet(params, x):
  w1, b1, w2, b2 = params
  h = nn.BiasAdd(
    nn.Conv2D(
      x,
      w1,
      strides=(1, 1, 1, 1),
      padding="SAME",
      explicit_paddings=(),
      data_format="NHWC",
      dilations=(1, 1, 1, 1),
    ),
    b1,
    data_format="NHWC",
  )
  h = nn.BiasAdd(
    nn.Conv2D(
      h,
      w2,
      strides=(1, 2, 2, 1),
      padding="VALID",
      explicit_paddings=(),
      data_format="NHWC",
      dilations=(1, 1, 1, 1),
    ),
    b2,
    data_format="NHWC",
  )
  return jnp.sum(h)


def test_convnet_grad_jaxpr_reads_like_a_tf_gradient_graph():
  params = (_randn(3, 3, 2, 4), _randn(4), _randn(2, 2, 4, 3), _randn(3))
  x = _randn(2, 6, 6, 2)
  jaxpr = jax.make_jaxpr(jax.grad(_convnet))(params, x)
  names = _prims(jaxpr)
  assert {
    "tf.Conv2D",
    "tf.BiasAdd",
    "tf.Conv2DBackpropInput",
    "tf.Conv2DBackpropFilter",
    "tf.BiasAddGrad",
  } <= names, names
  assert "conv_general_dilated" not in names
  # and the values are TF's
  tparams = [tf.Variable(p) for p in params]
  with tf.GradientTape() as tape:
    h = tf.nn.bias_add(tf.nn.conv2d(x, tparams[0], 1, "SAME"), tparams[1])
    h = tf.nn.bias_add(tf.nn.conv2d(h, tparams[2], 2, "VALID"), tparams[3])
    loss = tf.reduce_sum(h)
  for g, g_tf in zip(jax.grad(_convnet)(params, x), tape.gradient(loss, tparams)):
    np.testing.assert_allclose(g, g_tf, rtol=1e-4, atol=1e-4)


def test_grad_of_nchw_conv_and_bias_add_keeps_names():
  x, w, b = _randn(1, 2, 4, 4), _randn(2, 2, 2, 3), _randn(3)
  attrs = dict(
    strides=(1, 1, 1, 1),
    padding="SAME",
    explicit_paddings=(),
    data_format="NCHW",
    dilations=(1, 1, 1, 1),
  )
  f = lambda x, w, b: jnp.sum(nn.BiasAdd(nn.Conv2D(x, w, **attrs), b, data_format="NCHW") ** 2)
  names = _prims(jax.make_jaxpr(jax.grad(f, (0, 1, 2)))(x, w, b))
  assert {"tf.Conv2DBackpropInput", "tf.Conv2DBackpropFilter", "tf.BiasAddGrad"} <= names


def test_conv_jit_hlo_matches_hand_written_lax():
  """Conv2D (and its gradients) compile to what lax.conv_general_dilated code gives."""
  x, w = _randn(2, 7, 6, 3), _randn(3, 2, 3, 4)
  attrs = dict(
    strides=(1, 2, 2, 1),
    padding="SAME",
    explicit_paddings=(),
    data_format="NHWC",
    dilations=(1, 1, 1, 1),
  )
  ours = lambda x, w: jnp.sum(jnp.sin(nn.Conv2D(x, w, **attrs)))
  ref = lambda x, w: jnp.sum(
    jnp.sin(
      jax.lax.conv_general_dilated(x, w, (2, 2), "SAME", dimension_numbers=("NHWC", "HWIO", "NHWC"))
    )
  )

  def hlo(f):
    text = jax.jit(f).lower(x, w).compile().as_text()
    lines = re.sub(r", metadata=\{[^}]*\}", "", text).splitlines()
    # skip the debug tables before the first computation
    start = next(i for i, l in enumerate(lines) if l.startswith(("%", "ENTRY")))
    # Instruction names come from the op that emitted them (tf_Conv2D when lowered
    # directly, conv_general_dilated in lax code): number them by first appearance.
    names = {}
    return [
      re.sub(r"%[\w.\-]+", lambda m: names.setdefault(m.group(0), f"%v{len(names)}"), l)
      for l in lines[start:]
      if l.strip()
    ]

  assert hlo(ours) == hlo(ref)
  assert hlo(jax.grad(ours, (0, 1))) == hlo(jax.grad(ref, (0, 1)))


def test_conv2d_backprop_ops_match_tf_with_spatial_input_sizes():
  w, dy = _randn(3, 3, 2, 4), _randn(1, 3, 3, 4)
  ours = nn.Conv2DBackpropInput(
    w,
    dy,
    input_sizes=(5, 6),
    strides=(1, 2, 2, 1),
    padding="SAME",
    explicit_paddings=(),
    data_format="NHWC",
    dilations=(1, 1, 1, 1),
  )
  ref = _tf(
    "Conv2DBackpropInput",
    input_sizes=np.array([5, 6], np.int32),
    filter=w,
    out_backprop=dy,
    strides=[1, 2, 2, 1],
    padding="SAME",
  )
  np.testing.assert_allclose(ours, ref, rtol=1e-4, atol=1e-4)
  with pytest.raises(ValueError, match="out_backprop has shape"):
    nn.Conv2DBackpropInput(
      w,
      dy,
      input_sizes=(1, 9, 9, 2),
      strides=(1, 2, 2, 1),
      padding="SAME",
      explicit_paddings=(),
      data_format="NHWC",
      dilations=(1, 1, 1, 1),
    )


def test_conv2d_int32_wraps_like_tf():
  x = np.full((1, 2, 2, 1), 2**30, np.int32)
  w = np.full((2, 2, 1, 1), 3, np.int32)
  attrs = dict(strides=[1, 1, 1, 1], padding="VALID")
  np.testing.assert_array_equal(
    nn.Conv2D(
      x, w, strides=(1, 1, 1, 1), padding="VALID", data_format="NHWC", dilations=(1, 1, 1, 1)
    ),
    _tf("Conv2D", input=x, filter=w, **attrs),
  )


@needs_onednn
def test_grouped_conv2d_matches_tf():
  x, w = _randn(1, 5, 5, 4), _randn(2, 2, 2, 6)  # 2 groups
  ref = _tf("Conv2D", input=x, filter=w, strides=[1, 1, 1, 1], padding="SAME")
  ours = nn.Conv2D(
    x, w, strides=(1, 1, 1, 1), padding="SAME", data_format="NHWC", dilations=(1, 1, 1, 1)
  )
  np.testing.assert_allclose(ours, ref, rtol=1e-4, atol=1e-4)


@needs_onednn
def test_depthwise_dilated_forward_matches_tf():
  x, w = _randn(1, 6, 7, 3), _randn(2, 3, 3, 2)
  for dil, fmt in [((1, 2, 2, 1), "NHWC"), ((1, 1, 2, 1), "NCHW")]:
    xx = x if fmt == "NHWC" else np.ascontiguousarray(x.transpose(0, 3, 1, 2))
    ref = _tf(
      "DepthwiseConv2dNative",
      input=xx,
      filter=w,
      strides=[1, 1, 1, 1],
      padding="SAME",
      dilations=list(dil),
      data_format=fmt,
    )
    ours = nn.DepthwiseConv2dNative(
      xx, w, strides=(1, 1, 1, 1), padding="SAME", data_format=fmt, dilations=dil
    )
    np.testing.assert_allclose(ours, ref, rtol=1e-4, atol=1e-4)


def test_depthwise_grads_match_tf():
  x, w = _randn(2, 5, 5, 3), _randn(3, 3, 3, 2)
  xv, wv = tf.Variable(x), tf.Variable(w)
  with tf.GradientTape() as tape:
    y = tf.raw_ops.DepthwiseConv2dNative(input=xv, filter=wv, strides=[1, 2, 2, 1], padding="SAME")
    loss = tf.reduce_sum(tf.sin(y))
  gx_tf, gw_tf = tape.gradient(loss, [xv, wv])
  f = lambda x, w: jnp.sum(
    jnp.sin(
      nn.DepthwiseConv2dNative(
        x, w, strides=(1, 2, 2, 1), padding="SAME", data_format="NHWC", dilations=(1, 1, 1, 1)
      )
    )
  )
  jaxpr_names = _prims(jax.make_jaxpr(jax.grad(f, (0, 1)))(x, w))
  assert {
    "tf.DepthwiseConv2dNativeBackpropInput",
    "tf.DepthwiseConv2dNativeBackpropFilter",
  } <= jaxpr_names
  gx, gw = jax.grad(f, (0, 1))(x, w)
  np.testing.assert_allclose(gx, gx_tf, rtol=1e-4, atol=1e-4)
  np.testing.assert_allclose(gw, gw_tf, rtol=1e-4, atol=1e-4)


# ---------------------------------------------------------------------------
# vmap keeps TF names
# ---------------------------------------------------------------------------


def test_vmap_of_conv_pool_bias_keeps_tf_names():
  attrs = dict(
    strides=(1, 1, 1, 1),
    padding="SAME",
    explicit_paddings=(),
    data_format="NHWC",
    dilations=(1, 1, 1, 1),
  )
  xs, w, ws, x = (
    _randn(3, 2, 4, 4, 2),
    _randn(2, 2, 2, 3),
    _randn(3, 2, 2, 2, 3),
    _randn(2, 4, 4, 2),
  )
  b = _randn(3)
  net = lambda x, w: nn.MaxPool(
    nn.BiasAdd(nn.Conv2D(x, w, **attrs), b, data_format="NHWC"),
    ksize=(1, 2, 2, 1),
    strides=(1, 2, 2, 1),
    padding="VALID",
    explicit_paddings=(),
    data_format="NHWC",
  )
  for in_axes, args in [((0, None), (xs, w)), ((None, 0), (x, ws))]:
    jaxpr = jax.make_jaxpr(jax.vmap(net, in_axes=in_axes))(*args)
    names = _prims(jaxpr)
    assert {"tf.Conv2D", "tf.BiasAdd", "tf.MaxPool"} <= names, (in_axes, names)
    assert "conv_general_dilated" not in names
    out = jax.vmap(net, in_axes=in_axes)(*args)
    for i in range(3):
      ex = [a[i] if ax == 0 else a for a, ax in zip(args, in_axes)]
      np.testing.assert_allclose(out[i], net(*ex), rtol=1e-5, atol=1e-5)


def test_per_example_gradients_keep_tf_names():
  """vmap(grad): batched Conv2DBackpropFilter/Input and BiasAddGrad become grouped
  (one group per example) TF ops instead of lax code."""
  params = (_randn(3, 3, 2, 4), _randn(4), _randn(2, 2, 4, 3), _randn(3))
  xs = _randn(3, 1, 6, 6, 2)
  per_example = jax.vmap(jax.grad(_convnet), in_axes=(None, 0))
  names = _prims(jax.make_jaxpr(per_example)(params, xs))
  assert {
    "tf.Conv2D",
    "tf.Conv2DBackpropFilter",
    "tf.Conv2DBackpropInput",
    "tf.BiasAddGrad",
  } <= names, names
  assert "conv_general_dilated" not in names
  grads = per_example(params, xs)
  for k in range(3):
    for g, ref in zip(grads, jax.grad(_convnet)(params, xs[k])):
      np.testing.assert_allclose(g[k], ref, rtol=1e-4, atol=1e-4)


def test_vmap_nchw_bias_add_and_backprop_input():
  v, b = _randn(4, 2, 3, 2, 2), _randn(3)
  out = jax.vmap(lambda v: nn.BiasAdd(v, b, data_format="NCHW"), in_axes=0)(v)
  assert "tf.BiasAdd" in _prims(
    jax.make_jaxpr(jax.vmap(lambda v: nn.BiasAdd(v, b, data_format="NCHW")))(v)
  )
  np.testing.assert_allclose(out, v + b[None, None, :, None, None], rtol=1e-6)
  w, dys = _randn(2, 2, 2, 3), _randn(2, 1, 4, 4, 3)
  f = lambda dy: nn.Conv2DBackpropInput(
    w,
    dy,
    input_sizes=(1, 4, 4, 2),
    strides=(1, 1, 1, 1),
    padding="SAME",
    explicit_paddings=(),
    data_format="NHWC",
    dilations=(1, 1, 1, 1),
  )
  assert "tf.Conv2DBackpropInput" in _prims(jax.make_jaxpr(jax.vmap(f))(dys))
  out = jax.vmap(f)(dys)
  for i in range(2):
    np.testing.assert_allclose(out[i], f(dys[i]), rtol=1e-5, atol=1e-5)


# ---------------------------------------------------------------------------
# Pooling
# ---------------------------------------------------------------------------


@pytest.mark.parametrize(
  "size,k,s",
  [
    ((5, 6), (3, 2), (2, 2)),
    ((4, 7), (2, 3), (3, 2)),
    ((3, 3), (3, 3), (1, 1)),
    ((1, 5), (2, 4), (2, 3)),
  ],
)
def test_pools_same_edge_windows_match_tf(size, k, s):
  x = (np.arange(2 * size[0] * size[1] * 2, dtype=np.float32) - 7.0).reshape(2, *size, 2)
  x = x * np.where(np.arange(x.size).reshape(x.shape) % 3 == 0, -1, 1).astype(np.float32)
  for op, fn in [("MaxPool", nn.MaxPool), ("AvgPool", nn.AvgPool)]:
    attrs = dict(ksize=(1,) + k + (1,), strides=(1,) + s + (1,), padding="SAME", data_format="NHWC")
    kw = dict(input=x) if op == "MaxPool" else dict(value=x)
    ref = _tf(op, **kw, **{a: list(v) if isinstance(v, tuple) else v for a, v in attrs.items()})
    extra = dict(explicit_paddings=()) if op == "MaxPool" else {}
    np.testing.assert_allclose(fn(x, **attrs, **extra), ref, rtol=1e-6, atol=1e-6)
    # and their gradients
    ct = _randn(*ref.shape)
    xv = tf.Variable(x)
    with tf.GradientTape() as tape:
      loss = tf.reduce_sum(
        getattr(tf.raw_ops, op)(
          **{("input" if op == "MaxPool" else "value"): xv},
          **{a: list(v) if isinstance(v, tuple) else v for a, v in attrs.items()},
        )
        * ct
      )
    g_tf = tape.gradient(loss, xv)
    g = jax.grad(lambda x: jnp.sum(fn(x, **attrs, **extra) * ct))(x)
    np.testing.assert_allclose(g, g_tf, rtol=1e-5, atol=1e-5)


def test_avg_pool_same_averages_only_real_elements():
  x = np.ones((1, 3, 3, 1), np.float32)
  out = nn.AvgPool(x, ksize=(1, 2, 2, 1), strides=(1, 2, 2, 1), padding="SAME", data_format="NHWC")
  np.testing.assert_array_equal(out, np.ones((1, 2, 2, 1), np.float32))


@pytest.mark.parametrize(
  "dtype",
  [
    "float32",
    "float16",
    "bfloat16",
    pytest.param(
      "float64",
      marks=pytest.mark.skipif(
        not jax.config.jax_enable_x64, reason="float64 computes in float32 with x64 off"
      ),
    ),
  ],
)
def test_max_pool_nan_and_minus_inf_like_tf(dtype):
  nan, inf = np.nan, np.inf
  windows = [
    [nan, 1, 2, 3],
    [1, nan, 2, 0],
    [nan, nan, nan, nan],
    [-inf, nan, -inf, nan],
    [-inf, -inf, -inf, -inf],
    [1, 2, 3, nan],
  ]
  x = tf.cast(np.array(windows, np.float32).reshape(6, 2, 2, 1), dtype)
  window = dict(ksize=[1, 2, 2, 1], strides=[1, 1, 1, 1], padding="VALID")
  ref = tf.raw_ops.MaxPool(input=x, **window)
  ours = nn.MaxPool(
    x.numpy(),
    ksize=(1, 2, 2, 1),
    strides=(1, 1, 1, 1),
    padding="VALID",
    explicit_paddings=(),
    data_format="NHWC",
  )
  assert ours.dtype == ref.dtype.as_numpy_dtype
  # On CPUs with AVX512-FP16/BF16 TF runs half-precision MaxPool (not V2, not EXPLICIT
  # padding) through oneDNN, whose windows of NaN/-inf give -inf; tfprims keeps the lowest
  # finite value of TF's other kernels (docs/semantics/nn.md).
  if dtype not in ("float16", "bfloat16") or not onednn(dtype):
    np.testing.assert_array_equal(np.asarray(ours, np.float64), ref.numpy().astype(np.float64))
  ref = tf.raw_ops.MaxPoolV2(input=x, **window)
  ours = nn.MaxPoolV2(
    x.numpy(), ksize=(1, 2, 2, 1), strides=(1, 1, 1, 1), padding="VALID", data_format="NHWC"
  )
  np.testing.assert_array_equal(np.asarray(ours, np.float64), ref.numpy().astype(np.float64))


@pytest.mark.parametrize("dtype", ["float32", "float64", "float16", "bfloat16"])
def test_max_pool_keeps_the_first_of_equal_zeros_like_tf(dtype, x64):
  # TF's reducer is `x > acc ? x : acc`: -0.0 before +0.0 stays (lax.max gives +0.0).
  x = tf.cast(
    np.array(
      [[-0.0, 0.0], [0.0, -0.0], [-0.0, -0.0], [-1.0, -0.0], [np.nan, -0.0]], np.float32
    ).reshape(5, 1, 2, 1),
    dtype,
  )
  kw = dict(ksize=[1, 1, 2, 1], strides=[1, 1, 1, 1], padding="VALID")
  x3 = tf.reshape(x, (5, 1, 1, 2, 1))
  for name, v, k in (
    ("MaxPool", x, kw),
    ("MaxPoolV2", x, kw),
    ("MaxPool3D", x3, dict(kw, ksize=[1, 1, 1, 2, 1], strides=[1] * 5)),
  ):
    if name == "MaxPool3D" and dtype in ("float64", "float16"):
      continue  # no TF CPU kernel
    if name == "MaxPool3D" and not onednn(dtype):
      continue  # Eigen's MaxPool3D keeps the last of equal values (docs/semantics/nn.md)
    want = getattr(tf.raw_ops, name)(input=v, **k).numpy().astype(np.float64)
    f = lambda a: getattr(tfprims.core.tfops, name)(
      a, ksize=tuple(k["ksize"]), strides=tuple(k["strides"]), padding="VALID"
    )
    for fast in (True, False):
      with tfprims.override_config("fast_lowerings", fast):
        for got in (f(v.numpy()), jax.jit(f)(v.numpy())):
          got = np.asarray(got).astype(np.float64)
          np.testing.assert_array_equal(got, want, err_msg=name)
          np.testing.assert_array_equal(np.signbit(got), np.signbit(want), err_msg=name)


@pytest.mark.parametrize("dtype", ["float32", "float64", "float16", "bfloat16"])
def test_avg_pool_sums_windows_in_tf_order(dtype, x64):
  # TF adds a window's elements row-major from +0.0 (bfloat16 in float32, float16 in
  # float16): where huge values cancel, the order decides the average.
  big = 6e4 if dtype == "float16" else 1e30
  rows = [
    [big, 2, -big, 8],
    [2, big, 8, -big],
    [big, -big, 3, 5],
    [4, 8, big, -big],
    [-0.0, -0.0, -0.0, -0.0],
    [4e4, 4e4, -4e4, 1],
  ]
  x = tf.cast(np.array(rows, np.float32).reshape(6, 2, 2, 1), dtype)
  x5 = tf.reshape(x, (6, 1, 2, 2, 1))
  for name, v, k in (("AvgPool", x, (1, 2, 2, 1)), ("AvgPool3D", x5, (1, 1, 2, 2, 1))):
    if name == "AvgPool3D" and dtype in ("float64", "float16"):
      continue  # no TF CPU kernel
    arg = "value" if name == "AvgPool" else "input"
    want = (
      getattr(tf.raw_ops, name)(**{arg: v}, ksize=k, strides=[1] * len(k), padding="VALID")
      .numpy()
      .astype(np.float64)
    )
    f = lambda a: getattr(tfprims.core.tfops, name)(
      a, ksize=k, strides=(1,) * len(k), padding="VALID"
    )
    for fast in (True, False):
      with tfprims.override_config("fast_lowerings", fast):
        for got in (f(v.numpy()), jax.jit(f)(v.numpy())):
          got = np.asarray(got).astype(np.float64)
          np.testing.assert_array_equal(got, want, err_msg=name)
          np.testing.assert_array_equal(np.signbit(got), np.signbit(want), err_msg=name)


def test_max_pool_gradient_goes_to_first_max_like_tf():
  x = np.array([[1, 3, 3], [3, 0, 2], [3, 3, 1]], np.float32).reshape(1, 3, 3, 1)
  ct = np.array([1, 10, 100, 1000], np.float32).reshape(1, 2, 2, 1)
  attrs = dict(
    ksize=(1, 2, 2, 1),
    strides=(1, 1, 1, 1),
    padding="VALID",
    explicit_paddings=(),
    data_format="NHWC",
  )
  xv = tf.Variable(x)
  with tf.GradientTape() as tape:
    loss = tf.reduce_sum(
      tf.raw_ops.MaxPool(input=xv, ksize=[1, 2, 2, 1], strides=[1, 1, 1, 1], padding="VALID") * ct
    )
  g_tf = tape.gradient(loss, xv)
  f = lambda x: jnp.sum(nn.MaxPool(x, **attrs) * ct)
  np.testing.assert_array_equal(jax.grad(f)(x), g_tf)
  names = _prims(jax.make_jaxpr(jax.grad(f))(x))
  assert "tf.MaxPoolGrad" in names and "tf.MaxPoolGradGrad" not in names
  # forward mode: the tangent is read at the same (first) max
  t = np.arange(1, 10, dtype=np.float32).reshape(1, 3, 3, 1)
  with tf.autodiff.ForwardAccumulator(xv, tf.constant(t)) as acc:
    y = tf.raw_ops.MaxPool(input=xv, ksize=[1, 2, 2, 1], strides=[1, 1, 1, 1], padding="VALID")
  _, jvp = jax.jvp(lambda x: nn.MaxPool(x, **attrs), (x,), (t,))
  np.testing.assert_array_equal(jvp, acc.jvp(y))
  np.testing.assert_array_equal(jvp.ravel(), [2, 2, 4, 8])


@pytest.mark.parametrize("seed", range(4))
def test_max_pool_ties_grad_and_tangent_match_tf(seed):
  """Tie-heavy inputs (0/1 values), SAME windows: reverse mode (MaxPoolGrad) and forward
  mode (MaxPoolGradGrad) pick TF's element; XLA's own max-pool JVP does not always."""
  rng = np.random.default_rng(seed)
  x = rng.integers(0, 2, (2, 4, 5, 2)).astype(np.float32)
  t = rng.normal(size=x.shape).astype(np.float32)
  attrs = dict(
    ksize=(1, 2, 3, 1),
    strides=(1, 1, 2, 1),
    padding="SAME",
    explicit_paddings=(),
    data_format="NHWC",
  )
  xv = tf.Variable(x)
  with tf.autodiff.ForwardAccumulator(xv, tf.constant(t)) as acc:
    y = tf.raw_ops.MaxPool(input=xv, ksize=[1, 2, 3, 1], strides=[1, 1, 2, 1], padding="SAME")
  ct = rng.normal(size=y.shape).astype(np.float32)
  with tf.GradientTape() as tape:
    loss = tf.reduce_sum(
      tf.raw_ops.MaxPool(input=xv, ksize=[1, 2, 3, 1], strides=[1, 1, 2, 1], padding="SAME") * ct
    )
  f = lambda x: nn.MaxPool(x, **attrs)
  np.testing.assert_array_equal(jax.jvp(f, (x,), (t,))[1], acc.jvp(y))
  np.testing.assert_array_equal(
    jax.jit(jax.grad(lambda x: jnp.sum(f(x) * ct)))(x), tape.gradient(loss, xv)
  )


def test_max_pool_gradient_and_tangent_in_nan_windows_match_tf():
  """TF's MaxPoolGrad routes a window's gradient to its first element when that is
  NaN (all-NaN windows included); its MaxPoolGradGrad reads nothing in NaN/-inf-only
  windows. A converted function's grad and jvp follow each."""
  nan, inf = np.nan, np.inf
  windows = [
    [nan, nan, nan, nan],
    [nan, 5, 3, 2],
    [1, nan, 3, 2],
    [-inf, -inf, -inf, -inf],
    [-inf, nan, -inf, 2],
    [2, 2, 1, 2],
  ]
  x = np.array(windows, np.float32).reshape(6, 2, 2, 1)
  f = tf.function(lambda x: tf.nn.max_pool2d(x, 2, 2, "VALID"))
  fn = tfprims.convert_functional(f, tf.TensorSpec(x.shape, tf.float32))
  xv = tf.constant(x)
  with tf.GradientTape() as tape:
    tape.watch(xv)
    y = f(xv)
  np.testing.assert_array_equal(jax.grad(lambda a: jnp.sum(fn(a)))(x), tape.gradient(y, xv))
  t = np.arange(1, x.size + 1, dtype=np.float32).reshape(x.shape)
  with tf.autodiff.ForwardAccumulator(xv, tf.constant(t)) as acc:
    y = f(xv)
  np.testing.assert_array_equal(jax.jvp(fn, (x,), (t,))[1], acc.jvp(y))
  np.testing.assert_array_equal(jax.grad(lambda a: jnp.sum(fn(a)))(x)[0].ravel(), [1, 0, 0, 0])


def test_max_pool_explicit_padding_grad_matches_tf():
  x = _randn(1, 4, 5, 2)
  ep = [0, 0, 1, 0, 0, 1, 0, 0]
  xv = tf.Variable(x)
  with tf.GradientTape() as tape:
    y = tf.raw_ops.MaxPool(
      input=xv, ksize=[1, 2, 2, 1], strides=[1, 2, 1, 1], padding="EXPLICIT", explicit_paddings=ep
    )
    loss = tf.reduce_sum(tf.sin(y))
  attrs = dict(
    ksize=(1, 2, 2, 1),
    strides=(1, 2, 1, 1),
    padding="EXPLICIT",
    explicit_paddings=tuple(ep),
    data_format="NHWC",
  )
  np.testing.assert_allclose(nn.MaxPool(x, **attrs), y, rtol=1e-6)
  g = jax.grad(lambda x: jnp.sum(jnp.sin(nn.MaxPool(x, **attrs))))(x)
  np.testing.assert_allclose(g, tape.gradient(loss, xv), rtol=1e-5, atol=1e-6)


def test_avg_pool_grad_jaxpr_uses_avg_pool_grad():
  x = _randn(1, 4, 4, 2)
  f = lambda x: jnp.sum(
    nn.AvgPool(x, ksize=(1, 3, 3, 1), strides=(1, 2, 2, 1), padding="SAME", data_format="NHWC") ** 2
  )
  assert "tf.AvgPoolGrad" in _prims(jax.make_jaxpr(jax.grad(f))(x))


# ---------------------------------------------------------------------------
# FusedBatchNormV3
# ---------------------------------------------------------------------------


@pytest.mark.parametrize("fmt", ["NHWC", "NCHW"])
@pytest.mark.parametrize("factor", [1.0, 0.3])
def test_fused_batch_norm_v3_training_outputs_match_tf(fmt, factor):
  x = _randn(3, 2, 4, 3) if fmt == "NHWC" else _randn(3, 3, 2, 4)
  scale, offset = _randn(3), _randn(3)
  mean, var = _randn(3), np.abs(_randn(3)) + 0.5
  attrs = dict(epsilon=0.001, exponential_avg_factor=factor, data_format=fmt, is_training=True)
  ref = _tf("FusedBatchNormV3", x=x, scale=scale, offset=offset, mean=mean, variance=var, **attrs)
  ours = nn.FusedBatchNormV3(x, scale, offset, mean, var, **attrs)
  assert len(ours) == 6
  for a, b in zip(ours, ref):
    assert a.shape == tuple(b.shape) and a.dtype == b.dtype.as_numpy_dtype
    np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-5)
  # batch_variance is Bessel-corrected, reserve_space_2 is the biased batch variance
  n = x.size // 3
  axes = (0, 1, 2) if fmt == "NHWC" else (0, 2, 3)
  np.testing.assert_allclose(ours[4], x.var(axes), rtol=1e-5)
  expected = x.var(axes) * n / (n - 1)
  if factor != 1.0:
    expected = (1 - factor) * var + factor * expected
  np.testing.assert_allclose(ours[2], expected, rtol=1e-5)


def test_fused_batch_norm_v3_half_input_and_edge_batches():
  x = _randn(2, 2, 2, 3).astype(np.float16)
  scale, offset, mean, var = _randn(3), _randn(3), _randn(3), np.abs(_randn(3)) + 0.5
  for training in (True, False):
    kw = dict(epsilon=1e-3, is_training=training)
    ref = _tf("FusedBatchNormV3", x=x, scale=scale, offset=offset, mean=mean, variance=var, **kw)
    ours = nn.FusedBatchNormV3(
      x, scale, offset, mean, var, exponential_avg_factor=1.0, data_format="NHWC", **kw
    )
    assert ours[0].dtype == np.float16
    for a, b in zip(ours[:3], ref[:3]):  # reserve spaces: uninitialised in TF's half kernel
      np.testing.assert_allclose(np.float32(a), np.float32(b), rtol=2e-3, atol=2e-3)
  # one element per channel: the corrected variance divides by max(n - 1, 1)
  x1 = _randn(1, 1, 1, 3)
  ref = _tf(
    "FusedBatchNormV3",
    x=x1,
    scale=scale,
    offset=offset,
    mean=mean,
    variance=var,
    epsilon=1e-3,
    is_training=True,
  )
  ours = nn.FusedBatchNormV3(
    x1,
    scale,
    offset,
    mean,
    var,
    epsilon=1e-3,
    exponential_avg_factor=1.0,
    data_format="NHWC",
    is_training=True,
  )
  for a, b in zip(ours, ref):
    np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-6)
  # empty batch: NaN statistics, zero reserve spaces
  x0 = np.zeros((0, 1, 1, 3), np.float32)
  ref = _tf(
    "FusedBatchNormV3",
    x=x0,
    scale=scale,
    offset=offset,
    mean=mean,
    variance=var,
    epsilon=1e-3,
    is_training=True,
  )
  ours = nn.FusedBatchNormV3(
    x0,
    scale,
    offset,
    mean,
    var,
    epsilon=1e-3,
    exponential_avg_factor=1.0,
    data_format="NHWC",
    is_training=True,
  )
  for a, b in zip(ours, ref):
    np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize("training", [True, False])
def test_fused_batch_norm_v3_y_gradients_match_tf(training):
  x = _randn(2, 3, 2, 3)
  scale, offset, mean, var = _randn(3), _randn(3), _randn(3), np.abs(_randn(3)) + 0.5
  ct = _randn(*x.shape)
  vs = [tf.Variable(v) for v in (x, scale, offset)]
  with tf.GradientTape() as tape:
    y = tf.raw_ops.FusedBatchNormV3(
      x=vs[0],
      scale=vs[1],
      offset=vs[2],
      mean=mean,
      variance=var,
      epsilon=1e-3,
      is_training=training,
    )[0]
    loss = tf.reduce_sum(y * ct)
  g_tf = tape.gradient(loss, vs)
  f = lambda x, s, o: jnp.sum(
    nn.FusedBatchNormV3(
      x,
      s,
      o,
      mean,
      var,
      epsilon=1e-3,
      exponential_avg_factor=1.0,
      data_format="NHWC",
      is_training=training,
    )[0]
    * ct
  )
  for a, b in zip(jax.grad(f, (0, 1, 2))(x, scale, offset), g_tf):
    np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-4)


# (dy, x, scale, mean, variance): zero signs where TF's oneDNN and Eigen kernels differ
_FBN_GRAD_ZERO_CASES = [
  ([-0.0], [-0.0], 1.0, 0.0, 0.0),  # one-term sums of -0.0
  ([0.0], [1.0], 0.0, 2.0, 2.0),  # dy * x_c = 0 * -1
  ([0.0, 0.0, 0.0, -0.0], [0.0, 0.0, -0.0, -1.0], 1.0, -0.0, 2.0),
  ([0.0, 1.0, -1.0, -0.0], [1.0, 2.0, -1.0, -0.0], 0.0, 0.0, 0.0),
  ([-0.0, -0.0], [1.0, 2.0], 1.0, 1.0, 0.0),
  ([1.0, -1.0, np.inf, 2.0], [0.5, -0.0, 2.0, np.nan], -1.0, 0.5, 1.0),
]


@pytest.mark.parametrize(
  "dtype,fmt",
  [
    (np.float32, "NHWC"),
    (np.float32, "NCHW"),
    ("bfloat16", "NHWC"),
    (np.float16, "NHWC"),
    (np.float32, "NDHWC"),
  ],
)
@pytest.mark.parametrize("training", [True, False])
@needs_onednn
def test_fused_batch_norm_grad_zero_signs_follow_tfs_kernel(dtype, fmt, training):
  # TF's CPU kernel is oneDNN for 4-D float32/bfloat16 (its sums start from +0.0, its
  # training x_backprop is dy - (mean(dy) + x_c * ...)) and Eigen for float16 and 5-D
  # (a one-term sum is its term, dy - mean(dy) - x_c * ...): docs/semantics/nn.md.
  dtype = jnp.dtype(dtype)
  if dtype == jnp.bfloat16 and not onednn("bfloat16"):
    pytest.skip("TF runs bfloat16 through Eigen on this CPU (no AVX512-BF16)")
  for dy, x, scale, mean, var in _FBN_GRAD_ZERO_CASES:
    shape = {
      "NHWC": (1, len(dy), 1, 1),
      "NCHW": (1, 1, len(dy), 1),
      "NDHWC": (1, len(dy), 1, 1, 1),
    }[fmt]
    args = [np.array(v, np.float32).astype(dtype).reshape(shape) for v in (dy, x)]
    args += [np.array([v], np.float32) for v in (scale, mean, var)]
    attrs = dict(epsilon=0.5, data_format=fmt, is_training=training)
    want = _tf(
      "FusedBatchNormGradV3",
      y_backprop=args[0],
      x=args[1],
      scale=args[2],
      reserve_space_1=args[3],
      reserve_space_2=args[4],
      reserve_space_3=np.zeros((0,), np.float32),
      **attrs,
    )
    f = lambda *a: nn.FusedBatchNormGradV3(*a, np.zeros((0,), np.float32), **attrs)
    for got in (f(*args), jax.jit(f)(*args)):
      for k in range(3):
        a, b = np.float32(got[k]), want[k].numpy().astype(np.float32)
        np.testing.assert_allclose(a, b, rtol=1e-2, err_msg=f"output {k}: {dy} {x}")
        assert (np.signbit(a) == np.signbit(b))[a == 0].all(), (k, dy, x, a, b)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_conv_padding_zeros_with_inf_filter_taps_are_tf_xlas(dtype, x64):
  # 0 * inf where a non-finite tap meets padding (or a strided backprop's inserted zero):
  # NaN in some TF kernels, skipped in others (docs/semantics/nn.md); tfprims computes
  # XLA's convolutions, so it agrees with TF-XLA in each case, lowerings and jit alike.
  from tfprims.core import get_op

  ones = lambda *s: np.ones(s, dtype)
  w3, w2 = ones(3, 3, 1, 1), ones(2, 2, 1, 1)
  w3[0, 0] = w2[0, 0] = np.inf
  cases = [
    ("Conv2D", dict(input=ones(1, 3, 3, 1), filter=w3, strides=[1, 1, 1, 1], padding="SAME"))
  ]
  for s, g in ((1, ones(1, 2, 2, 1)), (2, ones(1, 1, 1, 1))):
    cases.append(
      (
        "Conv2DBackpropInput",
        dict(
          input_sizes=np.array([1, 3, 3, 1], np.int32),
          filter=w2,
          out_backprop=g,
          strides=[1, s, s, 1],
          padding="VALID",
        ),
      )
    )
  for name, kw in cases:
    tf_kw = {k: tf.constant(v) if isinstance(v, np.ndarray) else v for k, v in kw.items()}
    want = tf.function(lambda **a: getattr(tf.raw_ops, name)(**a), jit_compile=True)(**tf_kw)
    op = get_op(name)
    operands, params = op.prepare(
      {k: v for k, v in kw.items() if isinstance(v, np.ndarray)},
      {k: v for k, v in kw.items() if not isinstance(v, np.ndarray)},
    )
    for fast in (True, False):
      with tfprims.override_config("fast_lowerings", fast):
        for got in (op(*operands, **params), jax.jit(lambda *a: op(*a, **params))(*operands)):
          np.testing.assert_array_equal(np.asarray(got), want.numpy(), err_msg=f"{name}")


# ---------------------------------------------------------------------------
# LRN
# ---------------------------------------------------------------------------


def _lrn_both(x, **attrs):
  from tfprims.core import get_op

  f = lambda v: get_op("LRN")(v, **attrs)
  return np.asarray(f(x)).astype(np.float32), np.asarray(jax.jit(f)(x)).astype(np.float32)


@pytest.mark.parametrize("beta", [0.5, 0.75, 1.0])
def test_lrn_non_finite_squares_match_tf_band_sums(beta):
  # TF sums squares by a matmul with a 0/1 band matrix: an inf/NaN square outside a
  # position's window reaches it as inf * 0 = NaN (within it, inf gives x / inf = 0).
  # float16 is computed in float16 (300 ** 2 is inf there).
  rows = [
    [1e30, 1, 2, 3, 4, 5],
    [np.inf, 1, 2, 3, 4, 5],
    [1, 2, np.nan, 3, 4, 5],
    [-1e30, 1, 2, 3, 4, -np.inf],
    [300, 1, 2, 3, 4, 5],
    [0.5, -1, 2, 0, -0.0, 1],
  ]
  for dtype in (np.float32, np.float16):
    with np.errstate(over="ignore"):
      x = np.array(rows, np.float32).astype(dtype).reshape(2, 1, 3, 6)
    for r in (0, 1, 2, 5):
      attrs = dict(depth_radius=r, bias=1.0, alpha=0.5, beta=beta)
      want = _tf("LRN", input=x, **attrs).numpy().astype(np.float32)
      for ours in _lrn_both(x, **attrs):
        np.testing.assert_allclose(ours, want, rtol=1e-2, atol=1e-3, err_msg=f"{dtype} {r}")
        num = ~np.isnan(want)
        np.testing.assert_array_equal(np.signbit(ours[num]), np.signbit(want[num]))


@pytest.mark.parametrize("beta", [0.5, 1.0, 0.75])
def test_lrn_deep_inputs_take_tf_running_sums(beta):
  # Depth > 384 with beta 0.5 or 1: TF's running sums (acc += new; acc -= old) make
  # the row NaN once an inf leaves the window, and a huge square leaving it cancels what
  # was added beside it. beta 0.75 keeps the band sums.
  x = np.tile(np.linspace(-1, 1, 400, dtype=np.float32), (4, 1)).reshape(4, 1, 1, 400)
  x[0, ..., 100] = np.inf
  x[1, ..., 100] = 1e18
  x[2, ..., 7] = np.nan
  x[3, ..., 100:102] = 200  # float16: 40000 + 40000 overflows the running sum
  attrs = dict(depth_radius=2, bias=1.0, alpha=1.0, beta=beta)
  for dtype, tol in ((np.float32, 1e-5), (np.float16, 1e-2)):
    with np.errstate(over="ignore"):
      xd = x.astype(dtype)
    want = _tf("LRN", input=xd, **attrs).numpy().astype(np.float32)
    for ours in _lrn_both(xd, **attrs):
      np.testing.assert_allclose(ours, want, rtol=tol, atol=tol, err_msg=str(dtype))


# ---------------------------------------------------------------------------
# Resize (image ops)
# ---------------------------------------------------------------------------


@pytest.mark.parametrize("align,half", [(False, False), (True, False), (False, True)])
def test_resize_ops_match_tf_on_upsample_and_downsample(align, half):
  img = _randn(1, 5, 3, 2)
  for size in [(9, 7), (2, 2), (1, 4)]:
    for op, fn in [
      ("ResizeBilinear", image.ResizeBilinear),
      ("ResizeNearestNeighbor", image.ResizeNearestNeighbor),
    ]:
      ref = _tf(
        op, images=img, size=np.array(size, np.int32), align_corners=align, half_pixel_centers=half
      )
      np.testing.assert_allclose(
        fn(img, size=size, align_corners=align, half_pixel_centers=half), ref, rtol=1e-6, atol=1e-6
      )
