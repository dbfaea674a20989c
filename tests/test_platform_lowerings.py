"""Per-platform lowerings (tfprims.register_platform_lowering, tfprims/ops/nn/conv_cpu.py
and pool_cpu.py).

Each CPU lowering must compute what the default lowering computes (and what TF
computes) on the op's property-spec draws and on a grid of strides, paddings,
dilations, layouts, channel multipliers and dtypes; grad and vmap go through it; the
``fast_lowerings`` config switches it off (the compiled program then has the
default's convolution); other platforms keep the default.
"""

from __future__ import annotations

import itertools
import re

import jax
import numpy as np
import pytest
import tensorflow as tf

import tfprims
from tfprims import emit
from tfprims.core import get_op, tfops
from tfprims.ops.nn import conv_cpu
from tfprims.ops.nn.conv import _CONV_TOL
from helpers import on_spec_draws

FAST_OPS = (
  "DepthwiseConv2dNative",
  "DepthwiseConv2dNativeBackpropInput",
  "DepthwiseConv2dNativeBackpropFilter",
  "Conv2D",
  "Conv2DBackpropInput",
  "Conv2DBackpropFilter",
  "Conv3D",
  "MaxPool",
  "MaxPoolV2",
  "MaxPool3D",
)


@pytest.fixture(autouse=True)
def _small_channels_too(monkeypatch):
  """The filter backprop keeps XLA's convolution below 64 channels (measured); these
  tests draw a few channels, so they lower it as tap sums at every size."""
  monkeypatch.setattr(conv_cpu, "_MIN_FILTER_BACKPROP_CHANNELS", 0)


def _tol(dtype):
  """The spec's tolerance for float dtypes; integer convolutions must agree exactly."""
  name = np.dtype(dtype).name
  if name not in _CONV_TOL["rtol"]:
    return dict(rtol=0, atol=0)
  return dict(rtol=_CONV_TOL["rtol"][name], atol=_CONV_TOL["atol"][name])


def _both(fn, *args):
  """fn's jitted results with the fast lowerings on and off, and the two HLO texts."""
  out = {}
  for fast in (True, False):
    with tfprims.override_config("fast_lowerings", fast):
      lowered = jax.jit(fn).lower(*args)
      out[fast] = (np.asarray(lowered.compile()(*args), np.float64), lowered.as_text())
  return out[True], out[False]


def _assert_same(fn, args, dtype):
  (fast, _), (default, _) = _both(fn, *args)
  np.testing.assert_allclose(fast, default, **_tol(dtype))
  return fast


def test_every_fast_op_declares_a_cpu_lowering():
  for op_type in FAST_OPS:
    assert "cpu" in get_op(op_type).platform_lowerings, op_type
  assert tfprims.get_config("fast_lowerings") is True
  # AvgPool's default already sums each window in TF's order, as fast as a CPU lowering.
  for op_type in ("AvgPool", "AvgPool3D"):
    assert "cpu" not in get_op(op_type).platform_lowerings, op_type


# --------------------------------------------------------------------------
# The ops' property-spec draws: fast == default
# --------------------------------------------------------------------------


@pytest.mark.parametrize("op_type", FAST_OPS)
def test_fast_lowering_equals_default_on_spec_draws(op_type):
  def check(call):
    _assert_same(lambda *a: op(*a, **call.params), call.operands, call.operands[0].dtype)

  op = get_op(op_type)
  on_spec_draws(op, check, max_examples=8)


def test_stem_tap_sums_equal_default_on_conv2d_spec_draws(monkeypatch):
  monkeypatch.setattr(conv_cpu, "_MIN_STEM_OUTPUTS", 0)  # the draws are small
  test_fast_lowering_equals_default_on_spec_draws("Conv2D")


# --------------------------------------------------------------------------
# Depthwise: a grid of geometries, fast == default == TF
# --------------------------------------------------------------------------

_DW_GRID = [
  # fmt, (h, w), k, strides, padding, explicit, dilations, multiplier
  ("NHWC", (7, 6), (3, 3), (1, 1), "SAME", None, (1, 1), 1),
  ("NHWC", (7, 6), (3, 3), (2, 2), "SAME", None, (1, 1), 2),
  ("NHWC", (8, 9), (3, 2), (2, 3), "VALID", None, (1, 1), 1),
  ("NHWC", (6, 7), (3, 3), (1, 1), "SAME", None, (2, 2), 1),
  ("NHWC", (6, 7), (2, 3), (1, 1), "VALID", None, (2, 1), 3),
  ("NHWC", (5, 6), (3, 3), (2, 1), "EXPLICIT", ((1, 2), (0, 1)), (1, 1), 1),
  ("NHWC", (5, 5), (5, 5), (1, 1), "SAME", None, (1, 1), 1),
  ("NHWC", (4, 4), (1, 1), (3, 3), "SAME", None, (1, 1), 2),
  ("NCHW", (7, 6), (3, 3), (1, 1), "SAME", None, (1, 1), 1),
  ("NCHW", (8, 7), (3, 3), (2, 2), "VALID", None, (1, 1), 2),
  ("NCHW", (6, 6), (3, 2), (1, 2), "EXPLICIT", ((2, 0), (1, 1)), (2, 1), 1),
]
_DTYPES = ("float32", "float64", "float16", "bfloat16")


def _dw_case(case, dtype, seed=0):
  fmt, (h, w), k, s, padding, explicit, d, m = case
  rng = np.random.default_rng(seed)
  n, c = 2, 3
  x_shape = (n, h, w, c) if fmt == "NHWC" else (n, c, h, w)
  lay = (
    (lambda a, b, fill=1: (fill, a, b, fill))
    if fmt == "NHWC"
    else (lambda a, b, fill=1: (fill, fill, a, b))
  )
  flat = ()
  if explicit:
    flat = tuple(v for pair in lay(explicit[0], explicit[1], (0, 0)) for v in pair)
  attrs = dict(
    strides=lay(*s), padding=padding, explicit_paddings=flat, data_format=fmt, dilations=lay(*d)
  )
  cast = lambda a: np.asarray(a, np.float32).astype(jax.numpy.dtype(dtype))
  x = cast(rng.uniform(-2, 2, x_shape))
  f = cast(rng.uniform(-2, 2, k + (c, m)))
  return x, f, attrs


def _tf_or_none(op_type, **kwargs):
  try:
    return getattr(tf.raw_ops, op_type)(**kwargs).numpy()
  except (tf.errors.OpError, ValueError, TypeError):
    return None  # no TF CPU kernel for this layout/dtype/attr combination


@pytest.mark.parametrize("dtype", _DTYPES)
@pytest.mark.parametrize("case", _DW_GRID, ids=lambda c: "-".join(map(str, c[:5])))
def test_depthwise_and_backprops_fast_equal_default_and_tf(case, dtype):
  x, f, attrs = _dw_case(case, dtype)
  with jax.enable_x64(dtype == "float64"):
    y = _assert_same(lambda x, f: tfops.DepthwiseConv2dNative(x, f, **attrs), (x, f), dtype)
    g = np.asarray(np.random.default_rng(1).uniform(-2, 2, y.shape), np.float32).astype(x.dtype)
    dx = _assert_same(
      lambda f, g: tfops.DepthwiseConv2dNativeBackpropInput(f, g, input_sizes=x.shape, **attrs),
      (f, g),
      dtype,
    )
    df = _assert_same(
      lambda x, g: tfops.DepthwiseConv2dNativeBackpropFilter(x, g, filter_sizes=f.shape, **attrs),
      (x, g),
      dtype,
    )
  if dtype != "float32":
    return
  _assert_equal_to_tf("DepthwiseConv2dNative", x, f, g, (y, dx, df), attrs)


def _assert_equal_to_tf(forward, x, f, g, ours, attrs):
  """Ours (forward, input backprop, filter backprop) against TF's ``forward`` op and its
  two backprop ops, where TF has CPU kernels for the call."""
  y, dx, df = ours
  ref = _tf_or_none(forward, input=x, filter=f, **attrs)
  if ref is not None:
    np.testing.assert_allclose(y, ref, **_tol(x.dtype))
  # TF's CPU backprop kernels ignore dilations (docs/semantics/nn.md): compare undilated.
  if attrs["dilations"] == (1, 1, 1, 1) and attrs["data_format"] == "NHWC":
    ref = _tf_or_none(
      forward + "BackpropInput", input_sizes=x.shape, filter=f, out_backprop=g, **attrs
    )
    if ref is not None:
      np.testing.assert_allclose(dx, ref, **_tol(x.dtype))
    ref = _tf_or_none(
      forward + "BackpropFilter", input=x, filter_sizes=f.shape, out_backprop=g, **attrs
    )
    if ref is not None:
      np.testing.assert_allclose(df, ref, rtol=1e-4, atol=1e-3)


# --------------------------------------------------------------------------
# Conv2D with one group per input channel: the depthwise tap sums
# --------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", ("float32", "float64", "bfloat16"))
@pytest.mark.parametrize("case", _DW_GRID, ids=lambda c: "-".join(map(str, c[:5])))
def test_depthwise_grouped_conv2d_and_backprops_are_tap_sums_equal_to_default_and_tf(case, dtype):
  x, f, attrs = _dw_case(case, dtype)
  kh, kw, c, m = f.shape
  grouped = f.reshape(kh, kw, 1, c * m)  # output channel g * m + k reads input channel g
  with jax.enable_x64(dtype == "float64"):
    (y, fast_hlo), (y0, default_hlo) = _both(lambda x, w: tfops.Conv2D(x, w, **attrs), x, grouped)
    np.testing.assert_allclose(y, y0, **_tol(dtype))
    assert "convolution" not in fast_hlo and "convolution" in default_hlo
    g = np.asarray(np.random.default_rng(1).uniform(-2, 2, y.shape), np.float32).astype(x.dtype)
    dx = _assert_same(
      lambda w, g: tfops.Conv2DBackpropInput(w, g, input_sizes=x.shape, **attrs),
      (grouped, g),
      dtype,
    )
    df = _assert_same(
      lambda x, g: tfops.Conv2DBackpropFilter(x, g, filter_sizes=grouped.shape, **attrs),
      (x, g),
      dtype,
    )
    if dtype != "bfloat16":  # (bfloat16 sums of squares differ in their rounding)
      # The gradient of a grouped Conv2D runs through both backprops' tap sums.
      loss = lambda x, w: (tfops.Conv2D(x, w, **attrs) ** 2).sum()
      grads = lambda: [np.asarray(v) for v in jax.jit(jax.grad(loss, (0, 1)))(x, grouped)]
      gx, gw = grads()
      with tfprims.override_config("fast_lowerings", False):
        gx0, gw0 = grads()
      np.testing.assert_allclose(gx, gx0, rtol=1e-4, atol=1e-4)
      np.testing.assert_allclose(gw, gw0, rtol=1e-4, atol=1e-4)
  if dtype != "float32" or attrs["data_format"] != "NHWC":
    return  # TF's CPU Conv2D takes NHWC only
  _assert_equal_to_tf("Conv2D", x, grouped, g, (y, dx, df), attrs)


# --------------------------------------------------------------------------
# 1x1 Conv2D / Conv3D: fast == default == TF
# --------------------------------------------------------------------------


def _assert_conv2d_is_fast_equal_to_default_and_tf(
  fmt, hw, filter_shape, strides, padding, explicit, dilations, dtype, seed
):
  """Conv2D of a [2, h, w, in] input (in ``fmt``'s layout) and a filter of
  ``filter_shape``: the fast lowering has no convolution and equals the default, which
  has one, and TF's Conv2D (float32 and int32, where TF's CPU kernel runs)."""
  rng = np.random.default_rng(seed)
  lay = (
    (lambda a, b, fill=1: (fill, a, b, fill))
    if fmt == "NHWC"
    else (lambda a, b, fill=1: (fill, fill, a, b))
  )
  c_in = filter_shape[2]
  x_shape = (2, *hw, c_in) if fmt == "NHWC" else (2, c_in, *hw)
  flat = tuple(v for pair in lay(*explicit, (0, 0)) for v in pair) if explicit else ()
  attrs = dict(
    strides=lay(*strides),
    padding=padding,
    explicit_paddings=flat,
    data_format=fmt,
    dilations=lay(*dilations),
  )
  draw = (
    (lambda sh: rng.integers(-5, 5, sh).astype(np.int32))
    if dtype == "int32"
    else (lambda sh: np.asarray(rng.uniform(-2, 2, sh), np.float32).astype(jax.numpy.dtype(dtype)))
  )
  x, f = draw(x_shape), draw(filter_shape)
  with jax.enable_x64(dtype == "float64"):
    (y, fast_hlo), (y0, default_hlo) = _both(lambda x, f: tfops.Conv2D(x, f, **attrs), x, f)
  tol = dict(rtol=0, atol=0) if dtype == "int32" else _tol(dtype)
  np.testing.assert_allclose(y, y0, **tol)
  assert "convolution" not in fast_hlo and "convolution" in default_hlo
  if dtype in ("float32", "int32"):
    ref = _tf_or_none("Conv2D", input=x, filter=f, **attrs)
    if ref is not None:
      np.testing.assert_allclose(y, ref, **tol)


_PW_GRID = [
  ("NHWC", (1, 1), "SAME", None, (1, 1)),
  ("NHWC", (2, 3), "SAME", None, (1, 1)),
  ("NHWC", (2, 2), "VALID", None, (2, 2)),
  ("NHWC", (1, 2), "EXPLICIT", ((1, 0), (2, 1)), (1, 1)),
  ("NCHW", (1, 1), "SAME", None, (1, 1)),
  ("NCHW", (3, 2), "EXPLICIT", ((0, 2), (1, 1)), (1, 1)),
]


@pytest.mark.parametrize("dtype", _DTYPES + ("int32",))
@pytest.mark.parametrize("case", _PW_GRID, ids=lambda c: "-".join(map(str, c[:3])))
def test_pointwise_conv2d_fast_equals_default_and_tf(case, dtype):
  fmt, s, padding, explicit, d = case
  _assert_conv2d_is_fast_equal_to_default_and_tf(
    fmt, (5, 6), (1, 1, 4, 3), s, padding, explicit, d, dtype, seed=2
  )


_WIDE_GRID = [
  # fmt, (h, w), k, strides, padding, explicit, dilations
  ("NHWC", (2, 2), (3, 3), (1, 1), "SAME", None, (1, 1)),
  ("NHWC", (1, 1), (3, 3), (1, 1), "SAME", None, (1, 1)),
  ("NHWC", (2, 2), (3, 3), (2, 2), "SAME", None, (1, 1)),
  ("NHWC", (2, 2), (2, 2), (1, 1), "SAME", None, (2, 2)),
  ("NHWC", (2, 1), (3, 2), (1, 1), "EXPLICIT", ((1, 1), (0, 2)), (1, 1)),
  ("NCHW", (2, 2), (3, 3), (1, 1), "SAME", None, (1, 1)),
  ("NCHW", (2, 2), (3, 1), (1, 2), "EXPLICIT", ((2, 1), (0, 0)), (1, 1)),
]


@pytest.mark.parametrize("dtype", ("float32", "float16", "int32"))
@pytest.mark.parametrize("case", _WIDE_GRID, ids=lambda c: "-".join(map(str, c[:3])))
def test_conv2d_with_a_filter_wider_than_its_input_is_one_dot(case, dtype):
  """XLA:CPU's convolution is 3-55x slower there (ResNet50's last stage at 64 px)."""
  fmt, hw, k, s, padding, explicit, d = case
  _assert_conv2d_is_fast_equal_to_default_and_tf(
    fmt, hw, k + (5, 3), s, padding, explicit, d, dtype, seed=4
  )


_STEM_GRID = [
  # fmt, (h, w), (kh, kw, in channels), strides, padding, explicit, dilations
  ("NHWC", (9, 8), (3, 3, 3), (2, 2), "SAME", None, (1, 1)),  # an RGB stem
  ("NHWC", (7, 7), (3, 3, 1), (1, 1), "VALID", None, (1, 1)),
  ("NHWC", (8, 9), (5, 5, 1), (1, 2), "SAME", None, (2, 1)),
  ("NHWC", (6, 7), (3, 2, 3), (1, 1), "EXPLICIT", ((1, 2), (0, 1)), (1, 1)),
  ("NCHW", (9, 8), (3, 3, 3), (2, 2), "SAME", None, (1, 1)),
  ("NCHW", (6, 6), (3, 3, 2), (1, 1), "EXPLICIT", ((2, 0), (1, 1)), (1, 2)),
]


@pytest.mark.parametrize("dtype", _DTYPES + ("int32",))
@pytest.mark.parametrize("case", _STEM_GRID, ids=lambda c: "-".join(map(str, c[:3])))
def test_conv2d_of_few_input_channels_is_tap_sums_equal_to_default_and_tf(case, dtype, monkeypatch):
  monkeypatch.setattr(conv_cpu, "_MIN_STEM_OUTPUTS", 0)  # the grid's maps are small
  fmt, hw, (kh, kw, c_in), s, padding, explicit, d = case
  _assert_conv2d_is_fast_equal_to_default_and_tf(
    fmt, hw, (kh, kw, c_in, 5), s, padding, explicit, d, dtype, seed=6
  )


def test_only_large_stems_are_tap_sums():
  """Below ``_MIN_STEM_OUTPUTS`` outputs (MobileNetV2's stem at batch 1) the tap sums'
  compile time would not be repaid; a filter of more products (ResNet50's 7x7x3) and a
  symbolic batch keep XLA's convolution."""
  attrs = dict(_NHWC, strides=(1, 2, 2, 1))
  for batch, k, tap_sums in [(1, 3, False), (8, 3, True), (8, 7, False)]:
    x = jax.ShapeDtypeStruct((batch, 224, 224, 3), np.float32)
    f = jax.ShapeDtypeStruct((k, k, 3, 32), np.float32)
    hlo = jax.jit(lambda x, f: tfops.Conv2D(x, f, **attrs)).lower(x, f).as_text()
    assert ("convolution" not in hlo) == tap_sums, (batch, k)
  # A symbolic batch could be 1 or 8: the convolution stays.
  (b,) = jax.export.symbolic_shape("b")
  x = jax.ShapeDtypeStruct((b, 224, 224, 3), np.float32)
  f = jax.ShapeDtypeStruct((3, 3, 3, 32), np.float32)
  exported = jax.export.export(jax.jit(lambda x, f: tfops.Conv2D(x, f, **attrs)))(x, f)
  assert "convolution" in exported.mlir_module()


def test_taps_that_read_only_padding_are_left_out():
  # On a 1x1 map a SAME 3x3 filter reads the input with its centre tap only: Conv2D is
  # one dot over the input channels, DepthwiseConv2dNative one product.
  rng = np.random.default_rng(8)
  x, f = rng.normal(size=(2, 1, 1, 5)).astype(np.float32), rng.normal(size=(3, 3, 5, 4))
  (y, hlo), (y0, _) = _both(lambda x, f: tfops.Conv2D(x, f, **_NHWC), x, f.astype(np.float32))
  assert "concatenate" not in hlo and hlo.count("stablehlo.dot_general") == 1
  np.testing.assert_allclose(y, y0, rtol=1e-6, atol=1e-6)
  np.testing.assert_allclose(
    y, np.einsum("nc,co->no", x[:, 0, 0], f[1, 1])[:, None, None], rtol=1e-5, atol=1e-5
  )
  fd = rng.normal(size=(3, 3, 5, 1)).astype(np.float32)
  (y, hlo), (y0, _) = _both(lambda x, f: tfops.DepthwiseConv2dNative(x, f, **_NHWC), x, fd)
  assert hlo.count("stablehlo.multiply") == 1
  np.testing.assert_allclose(y, x * fd[1, 1, :, 0], rtol=1e-6)
  # Explicit padding that puts every output window in the padding: zeros.
  attrs = dict(
    _NHWC, padding="EXPLICIT", explicit_paddings=(0, 0, 5, 5, 5, 5, 0, 0), strides=(1, 8, 8, 1)
  )
  (y, _), (y0, _) = _both(lambda x, f: tfops.DepthwiseConv2dNative(x, f, **attrs), x, fd)
  assert y.shape == (2, 2, 2, 5) and not y.any() and not y0.any()


@pytest.mark.parametrize("fmt", ["NDHWC", "NCDHW"])
@pytest.mark.parametrize("strides", [1, 2])
def test_pointwise_conv3d_fast_equals_default_and_tf(fmt, strides):
  rng = np.random.default_rng(3)
  x_shape = (2, 3, 4, 5, 4) if fmt == "NDHWC" else (2, 4, 3, 4, 5)
  sp = (1, strides, strides, strides, 1) if fmt == "NDHWC" else (1, 1) + (strides,) * 3
  attrs = dict(strides=sp, padding="SAME", data_format=fmt, dilations=(1,) * 5)
  x = rng.uniform(-2, 2, x_shape).astype(np.float32)
  f = rng.uniform(-2, 2, (1, 1, 1, 4, 3)).astype(np.float32)
  (y, fast_hlo), (y0, default_hlo) = _both(lambda x, f: tfops.Conv3D(x, f, **attrs), x, f)
  np.testing.assert_allclose(y, y0, rtol=1e-5, atol=1e-5)
  assert "convolution" not in fast_hlo and "convolution" in default_hlo
  ref = _tf_or_none("Conv3D", input=x, filter=f, **attrs)
  if ref is not None:
    np.testing.assert_allclose(y, ref, rtol=1e-5, atol=1e-5)


def test_a_pointwise_conv_with_one_output_position_keeps_the_convolution():
  """Batch 1 on a 1x1 map (squeeze-excite blocks, classifier heads): the dot would be a
  matrix-vector product, which XLA:CPU compiles slower than its convolution."""
  rng = np.random.default_rng(9)
  f = rng.uniform(-2, 2, (1, 1, 6, 4)).astype(np.float32)
  pads = dict(_NHWC, padding="EXPLICIT", explicit_paddings=(0, 0, 1, 0, 0, 0, 0, 0))
  for shape, attrs, dot in [
    ((1, 1, 1, 6), _NHWC, False),
    ((2, 1, 1, 6), _NHWC, True),
    ((1, 2, 1, 6), _NHWC, True),
    ((1, 3, 3, 6), dict(_NHWC, strides=(1, 3, 3, 1)), False),
    ((1, 1, 1, 6), pads, True),
  ]:  # padding: 2 output positions
    x = rng.uniform(-2, 2, shape).astype(np.float32)
    (y, fast), (y0, default) = _both(lambda x, f: tfops.Conv2D(x, f, **attrs), x, f)
    assert ("convolution" not in fast) == dot, (shape, attrs)
    np.testing.assert_allclose(y, y0, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(
      y, _tf_or_none("Conv2D", input=x, filter=f, **attrs), rtol=1e-5, atol=1e-5
    )
  attrs3 = dict(strides=(1,) * 5, padding="SAME", data_format="NDHWC", dilations=(1,) * 5)
  x3, f3 = np.ones((1, 1, 1, 1, 6), np.float32), np.ones((1, 1, 1, 6, 4), np.float32)
  (y, fast), _ = _both(lambda x, f: tfops.Conv3D(x, f, **attrs3), x3, f3)
  assert "convolution" in fast
  np.testing.assert_allclose(y, np.full((1, 1, 1, 1, 4), 6.0))
  # A symbolic batch may be larger than 1: the dot.
  (b,) = jax.export.symbolic_shape("b")
  exported = jax.export.export(jax.jit(lambda x, f: tfops.Conv2D(x, f, **_NHWC)))(
    jax.ShapeDtypeStruct((b, 1, 1, 6), np.float32), f
  )
  text = exported.mlir_module()
  assert "stablehlo.dot_general" in text and "stablehlo.convolution" not in text


_POLY_CASES = [
  # name, filter shape (None: a pool), fn(x, f, strides, padding)
  ("Conv2D 1x1", (1, 1, 6, 4), lambda x, f, a: tfops.Conv2D(x, f, **a)),
  ("Conv2D 3x3", (3, 3, 6, 4), lambda x, f, a: tfops.Conv2D(x, f, **a)),
  ("Conv2D groups=C", (3, 3, 1, 6), lambda x, f, a: tfops.Conv2D(x, f, **a)),
  ("DepthwiseConv2dNative", (3, 3, 6, 1), lambda x, f, a: tfops.DepthwiseConv2dNative(x, f, **a)),
  (
    "MaxPool",
    None,
    lambda x, f, a: tfops.MaxPool(
      x, ksize=(1, 3, 3, 1), strides=a["strides"], padding=a["padding"]
    ),
  ),
  (
    "AvgPool",
    None,
    lambda x, f, a: tfops.AvgPool(
      x, ksize=(1, 3, 3, 1), strides=a["strides"], padding=a["padding"]
    ),
  ),
]


@pytest.mark.parametrize("fast", [True, False], ids=["fast", "default"])
@pytest.mark.parametrize("case", _POLY_CASES, ids=lambda c: c[0])
def test_a_symbolic_image_size_exports(case, fast):
  """jax.export with symbolic batch and image size (one artifact for every input size):
  the CPU lowerings choose by the maps' sizes, so they decline and the op lowers its
  default; TF's SAME pads become symbolic (their parity depends on the size). With a
  symbolic batch alone the CPU lowerings stay. The artifact equals TF's op at two
  sizes."""
  name, f_shape, fn = case
  rng = np.random.default_rng(10)
  f = rng.uniform(-1, 1, f_shape or (1,)).astype(np.float32)
  tfprims.update_config("fast_lowerings", fast)
  try:
    for (padding, s), (dims, shapes) in itertools.product(
      [("SAME", 1), ("SAME", 2), ("VALID", 2)],
      [("b, h, w, 6", [(2, 7, 9, 6), (1, 8, 8, 6)]), ("b, 7, 9, 6", [(1, 7, 9, 6), (3, 7, 9, 6)])],
    ):
      attrs = dict(_NHWC, strides=(1, s, s, 1), padding=padding)
      spec = jax.ShapeDtypeStruct(jax.export.symbolic_shape(dims), np.float32)
      exported = jax.export.export(jax.jit(lambda x, f: fn(x, f, attrs)))(spec, f)
      for shape in shapes:
        x = rng.uniform(-2, 2, shape).astype(np.float32)
        if f_shape is None:
          arg = "input" if name == "MaxPool" else "value"
          ref = getattr(tf.raw_ops, name)(
            **{arg: x}, ksize=(1, 3, 3, 1), strides=attrs["strides"], padding=padding
          )
        else:
          op = "DepthwiseConv2dNative" if name.startswith("Depthwise") else "Conv2D"
          ref = getattr(tf.raw_ops, op)(
            input=x, filter=f, strides=attrs["strides"], padding=padding
          )
        np.testing.assert_allclose(
          exported.call(x, f), ref, rtol=1e-5, atol=1e-5, err_msg=f"{padding} s{s} {dims} {shape}"
        )
  finally:
    tfprims.update_config("fast_lowerings", True)


@pytest.mark.parametrize("fast", [True, False], ids=["fast", "default"])
def test_gradients_export_with_a_symbolic_batch(fast):
  """A training step exported for every batch size: the backprop ops' input_sizes and
  orig_input_shape params hold the symbolic batch (they were read with int()), and
  MaxPoolGrad's "no element" index is a constant (it was the input's size)."""
  rng = np.random.default_rng(11)
  cases = [
    (lambda x, f, a: tfops.Conv2D(x, f, **a), (3, 3, 64, 8)),
    (lambda x, f, a: tfops.Conv2D(x, f, **a), (3, 3, 1, 64)),  # groups = C
    (lambda x, f, a: tfops.DepthwiseConv2dNative(x, f, **a), (3, 3, 64, 1)),
    (
      lambda x, f, a: (
        tfops.AvgPool(x, ksize=(1, 3, 3, 1), strides=a["strides"], padding="SAME") * f
      ),
      (64,),
    ),
    (
      lambda x, f, a: (
        tfops.MaxPool(x, ksize=(1, 3, 3, 1), strides=a["strides"], padding="SAME") * f
      ),
      (64,),
    ),
  ]
  (b,) = jax.export.symbolic_shape("b")
  tfprims.update_config("fast_lowerings", fast)
  try:
    for (fn, f_shape), s in itertools.product(cases, (1, 2)):
      attrs = dict(_NHWC, strides=(1, s, s, 1))
      grad = jax.jit(jax.grad(lambda x, f: (fn(x, f, attrs) ** 2).sum(), argnums=(0, 1)))
      f = rng.uniform(-1, 1, f_shape).astype(np.float32)
      exported = jax.export.export(grad)(jax.ShapeDtypeStruct((b, 7, 9, 64), np.float32), f)
      x = rng.uniform(-1, 1, (3, 7, 9, 64)).astype(np.float32)
      for got, want in zip(exported.call(x, f), grad(x, f)):
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-4)
  finally:
    tfprims.update_config("fast_lowerings", True)


# --------------------------------------------------------------------------
# The switch, the platforms, the fallbacks
# --------------------------------------------------------------------------

_NHWC = dict(
  strides=(1, 1, 1, 1),
  padding="SAME",
  explicit_paddings=(),
  data_format="NHWC",
  dilations=(1, 1, 1, 1),
)


def test_the_config_switch_changes_the_compiled_program():
  x, f = np.ones((1, 6, 6, 4), np.float32), np.ones((3, 3, 4, 1), np.float32)
  fn = lambda x, f: tfops.DepthwiseConv2dNative(x, f, **_NHWC)
  (_, fast), (_, default) = _both(fn, x, f)
  assert "convolution" not in fast and "convolution" in default
  # update_config clears JAX's caches: a jitted function already lowered is lowered again.
  jitted = jax.jit(fn)
  assert "convolution" not in jitted.lower(x, f).as_text()
  jitted(x, f)
  tfprims.update_config("fast_lowerings", False)
  try:
    assert "convolution" in jitted.lower(x, f).as_text()
  finally:
    tfprims.update_config("fast_lowerings", True)
  assert "convolution" not in jitted.lower(x, f).as_text()


def test_ops_without_a_gain_keep_xla_convolutions():
  x = np.ones((1, 12, 12, 4), np.float32)
  big = np.ones((conv_cpu._MAX_TAPS // 7 + 1, 7 + 1, 4, 1), np.float32)  # > _MAX_TAPS taps
  dense = np.ones((3, 3, 4, 2), np.float32)
  grouped = np.ones((1, 1, 2, 4), np.float32)
  strided = {**_NHWC, "strides": (1, 2, 2, 1)}  # a dense filter off the Eigen route
  for fn, w, attrs in [
    (tfops.DepthwiseConv2dNative, big, _NHWC),
    (tfops.Conv2D, dense, strided),
    (tfops.Conv2D, grouped, _NHWC),
  ]:
    (y, fast), (y0, default) = _both(lambda x, w: fn(x, w, **attrs), x, w)
    assert "convolution" in fast and fast == default
    np.testing.assert_array_equal(y, y0)


def test_the_filter_backprop_keeps_the_convolution_below_its_channel_threshold(monkeypatch):
  monkeypatch.setattr(conv_cpu, "_MIN_FILTER_BACKPROP_CHANNELS", 64)
  for c, tap_sums in [(32, False), (64, True)]:
    x, g = np.ones((1, 5, 5, c), np.float32), np.ones((1, 5, 5, c), np.float32)
    (y, fast), (y0, _) = _both(
      lambda x, g: tfops.DepthwiseConv2dNativeBackpropFilter(
        x, g, filter_sizes=(3, 3, c, 1), **_NHWC
      ),
      x,
      g,
    )
    assert ("convolution" not in fast) == tap_sums
    np.testing.assert_allclose(y, y0, rtol=1e-6)


def test_other_platforms_keep_the_default_lowering():
  x, f = np.ones((1, 6, 6, 4), np.float32), np.ones((3, 3, 4, 1), np.float32)
  fn = jax.jit(lambda x, f: tfops.DepthwiseConv2dNative(x, f, **_NHWC))
  for platforms, has_conv in [(("cpu",), False), (("cuda",), True), (("tpu",), True)]:
    text = jax.export.export(fn, platforms=platforms)(x, f).mlir_module()
    assert ("convolution" in text) == has_conv, platforms
  # A multi-platform export holds both lowerings, and its CPU branch runs here.
  exported = jax.export.export(fn, platforms=("cpu", "cuda"))(x, f)
  assert "convolution" in exported.mlir_module()
  np.testing.assert_allclose(exported.call(x, f), fn(x, f), rtol=1e-6)


# --------------------------------------------------------------------------
# grad, vmap, eager and a converted Keras block
# --------------------------------------------------------------------------


@pytest.mark.parametrize("fmt", ["NHWC", "NCHW"])
def test_grad_and_vmap_through_the_fast_lowerings(fmt):
  x, f, attrs = _dw_case((fmt, (6, 7), (3, 3), (2, 2), "SAME", None, (1, 1), 2), "float32")
  pw = np.random.default_rng(4).uniform(-1, 1, (1, 1, 6, 5)).astype(np.float32)
  p2 = dict(attrs, dilations=(1, 1, 1, 1))

  def loss(x, f, pw):
    h = tfops.DepthwiseConv2dNative(x, f, **attrs)
    return (tfops.Conv2D(h, pw, **p2) ** 2).sum()

  grads = {}
  for fast in (True, False):
    with tfprims.override_config("fast_lowerings", fast):
      g = jax.jit(jax.grad(loss, argnums=(0, 1, 2)))(x, f, pw)
      v = jax.jit(jax.vmap(loss, in_axes=(0, None, 0)))(
        np.stack([x, -x]), f, np.stack([pw, 2 * pw])
      )
      grads[fast] = [np.asarray(a) for a in g] + [np.asarray(v)]
  for a, b in zip(grads[True], grads[False]):
    np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-4)
  # The gradient still binds TF's backprop ops (the lowering is below the jaxpr).
  jaxpr = str(jax.make_jaxpr(jax.grad(loss, argnums=(0, 1)))(x, f, pw))
  assert "tf.DepthwiseConv2dNativeBackpropInput" in jaxpr
  assert "tf.DepthwiseConv2dNativeBackpropFilter" in jaxpr
  # Eager calls compile the primitive with the same lowering.
  np.testing.assert_allclose(
    np.asarray(tfops.DepthwiseConv2dNative(x, f, **attrs)),
    np.asarray(jax.jit(lambda x, f: tfops.DepthwiseConv2dNative(x, f, **attrs))(x, f)),
    rtol=1e-6,
    atol=1e-6,
  )


def test_converted_mobilenet_block_matches_tf_with_and_without_fast_lowerings():
  import keras

  keras.utils.set_random_seed(0)
  model = keras.Sequential(
    [
      keras.Input((12, 12, 8)),
      keras.layers.Conv2D(16, 1, activation="relu"),
      keras.layers.DepthwiseConv2D(3, strides=2, padding="same", depth_multiplier=2),
      keras.layers.Conv2D(8, 1),
    ]
  )
  tf_fn = tf.function(lambda x: model(x))
  fn, params = tfprims.convert(tf_fn, tf.TensorSpec((None, 12, 12, 8), tf.float32))
  x = np.random.default_rng(5).normal(size=(3, 12, 12, 8)).astype(np.float32)
  xt = tf.constant(x)
  with tf.GradientTape() as tape:
    tape.watch(xt)
    y = tf.reduce_sum(tf_fn(xt) ** 2)
  tf_grad = tape.gradient(y, xt).numpy()
  for fast in (True, False):
    with tfprims.override_config("fast_lowerings", fast):
      out = jax.jit(lambda p, x: fn(p, x)[0])(params, x)
      grad = jax.jit(jax.grad(lambda x: (fn(params, x)[0] ** 2).sum()))(x)
      text = jax.jit(lambda p, x: fn(p, x)[0]).lower(params, x).as_text()
    np.testing.assert_allclose(out, tf_fn(x).numpy(), rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(grad, tf_grad, rtol=1e-4, atol=1e-3)
    assert ("convolution" in text) != fast


def test_every_op_of_a_grid_uses_all_taps():
  # A kernel one-hot in each tap picks exactly the shifted input (catches tap offsets).
  x = np.arange(1 * 5 * 6 * 2, dtype=np.float32).reshape(1, 5, 6, 2)
  for i, j in itertools.product(range(3), range(3)):
    f = np.zeros((3, 3, 2, 1), np.float32)
    f[i, j] = 1
    (y, _), (y0, _) = _both(lambda x, f: tfops.DepthwiseConv2dNative(x, f, **_NHWC), x, f)
    np.testing.assert_array_equal(y, y0)


# --------------------------------------------------------------------------
# Pooling: one reduce_window per pooled axis (pool_cpu.py)
# --------------------------------------------------------------------------

_POOL_GRID = [
  # fmt, spatial shape, ksize, strides, padding
  ("NHWC", (7, 6), (3, 3), (2, 2), "SAME"),
  ("NHWC", (8, 9), (3, 2), (2, 3), "VALID"),
  ("NHWC", (5, 5), (5, 5), (1, 1), "SAME"),
  ("NHWC", (6, 6), (1, 3), (2, 1), "SAME"),
  ("NHWC", (6, 6), (1, 3), (1, 1), "VALID"),  # one pooled axis: the default
  ("NCHW", (7, 8), (2, 2), (2, 2), "VALID"),
  ("NDHWC", (4, 5, 6), (2, 3, 3), (1, 2, 2), "SAME"),
]


def _pool_case(case, dtype):
  fmt, spatial, k, s, padding = case
  channels_last = fmt.endswith("C")
  lay = (lambda v: (1,) + tuple(v) + (1,)) if channels_last else (lambda v: (1, 1) + tuple(v))
  shape = (2,) + tuple(spatial) + (3,) if channels_last else (2, 3) + tuple(spatial)
  x = np.random.default_rng(6).uniform(-50, 50, shape)
  if jax.numpy.issubdtype(dtype, jax.numpy.floating):
    # TF's max never lets NaN win; windows of NaNs (rows, or channels for NCHW) give the
    # lowest finite value, -inf too.
    x[0, :2], x[(1,) * x.ndim] = np.nan, -np.inf
  x = x.astype(jax.numpy.dtype(dtype))
  return x, dict(ksize=lay(k), strides=lay(s), padding=padding, data_format=fmt)


@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16", "int32"])
@pytest.mark.parametrize("case", _POOL_GRID, ids=lambda c: "-".join(map(str, c)))
def test_pools_reduce_one_axis_at_a_time_equal_to_default_and_tf(case, dtype):
  x, attrs = _pool_case(case, dtype)
  ops = ("MaxPool3D", "AvgPool3D") if x.ndim == 5 else ("MaxPool", "MaxPoolV2", "AvgPool")
  if dtype == "int32":  # TF's integer pools: MaxPool and MaxPoolV2
    ops = ops[:2] if x.ndim == 4 else ()
  pooled = sum(k > 1 or s > 1 for k, s in zip(attrs["ksize"], attrs["strides"]))
  for op_type in ops:
    fn = lambda x, op_type=op_type: getattr(tfops, op_type)(x, **attrs)
    (fast, fast_hlo), (default, default_hlo) = _both(fn, x)
    if op_type.startswith("Max"):
      assert fast_hlo.count("reduce_window") == pooled
      assert default_hlo.count("reduce_window") == 1
    else:  # one strided slice per window offset, summed in TF's order
      assert fast_hlo == default_hlo and "reduce_window" not in default_hlo
    if op_type.startswith("Max"):
      np.testing.assert_array_equal(fast, default)  # max is exact in any order
    else:
      np.testing.assert_allclose(fast, default, **_tol(dtype), equal_nan=True)
    if dtype in ("float16", "bfloat16"):
      continue  # TF's half kernels on windows of NaNs differ from the default already
    expected = (
      _tf_or_none(op_type, input=x, **attrs)
      if op_type != "AvgPool"
      else (_tf_or_none(op_type, value=x, **attrs))
    )
    if expected is not None:
      np.testing.assert_allclose(
        fast, np.asarray(expected, np.float64), **_tol(dtype), equal_nan=True
      )


def test_max_pool_with_windows_of_padding_alone_keeps_the_default():
  # The default leaves such a window at -inf (its clamp is on the input): declined.
  x = np.random.default_rng(9).normal(size=(1, 4, 4, 2)).astype(np.float32)
  attrs = dict(
    ksize=(1, 2, 2, 1),
    strides=(1, 3, 3, 1),
    padding="EXPLICIT",
    explicit_paddings=(0, 0, 3, 0, 3, 0, 0, 0),
    data_format="NHWC",
  )
  (y, hlo), (y0, default_hlo) = _both(lambda x: tfops.MaxPool(x, **attrs), x)
  assert hlo == default_hlo and y[0, 0, 0, 0] == -np.inf
  np.testing.assert_array_equal(y, y0)


def test_pool_gradients_and_vmap_through_the_fast_lowerings():
  x = np.random.default_rng(7).normal(size=(2, 7, 6, 3)).astype(np.float32)
  attrs = dict(ksize=(1, 3, 3, 1), strides=(1, 2, 2, 1), padding="SAME", data_format="NHWC")
  loss = lambda x: (tfops.MaxPool(x, **attrs) ** 2).sum() + (tfops.AvgPool(x, **attrs) ** 3).sum()
  out = {}
  for fast in (True, False):
    with tfprims.override_config("fast_lowerings", fast):
      out[fast] = (
        np.asarray(jax.jit(jax.grad(loss))(x)),
        np.asarray(jax.jit(jax.vmap(loss))(np.stack([x, -x]))),
      )
  for a, b in zip(out[True], out[False]):
    np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-5)


def test_resnet_stem_gradient_with_tied_windows_is_tfs():
  """ResNet50's stem (strided conv, ReLU, zero padding, 3x3/2 max pool) on integer
  pixels and weights: windows tie exactly (ReLU's zeros, the padding's, equal
  positives). The input gradient is TF's (up to the convolutions' rounding), eager and
  jitted, with the fast lowerings on and off: MaxPoolGrad routes each window's
  gradient to its first max."""
  rng = np.random.default_rng(0)
  kernel = tf.constant(np.round(rng.normal(size=(3, 3, 3, 8)) * 2).astype(np.float32))

  @tf.function
  def stem(x):
    y = tf.nn.relu(tf.nn.conv2d(x, kernel, 2, "SAME"))
    y = tf.pad(y, [[0, 0], [1, 1], [1, 1], [0, 0]])
    return tf.nn.max_pool2d(y, 3, 2, "VALID")

  x = np.round(rng.uniform(-2, 2, (2, 24, 24, 3))).astype(np.float32)
  w = rng.normal(size=stem(x).shape).astype(np.float32)
  xt = tf.constant(x)
  with tf.GradientTape() as tape:
    tape.watch(xt)
    loss = tf.reduce_sum(stem(xt) * w)
  want = tape.gradient(loss, xt).numpy()
  fn, params = tfprims.convert(stem, tf.TensorSpec(x.shape))
  grad = jax.grad(lambda x: (fn(params, x)[0] * w).sum())
  for fast in (True, False):
    with tfprims.override_config("fast_lowerings", fast):
      for got in (grad(x), jax.jit(grad)(x)):
        np.testing.assert_allclose(np.asarray(got), want, rtol=0, atol=1e-5)


def _without_eigen(monkeypatch):
  """Keeps float32 convolutions off the Eigen route, for the tests of the lowerings the
  other dtypes and strides take."""
  monkeypatch.setattr(conv_cpu, "_on_eigen", lambda *args, **kwargs: None)


def _nhwc_attrs(strides, padding, explicit, dilations):
  """An NHWC Conv2D's attrs from a grid case's spatial strides, padding, explicit
  (rows, columns) pads or None, and dilations."""
  return dict(
    strides=(1, *strides, 1),
    padding=padding,
    explicit_paddings=(0, 0, *explicit[0], *explicit[1], 0, 0) if explicit else (),
    data_format="NHWC",
    dilations=(1, *dilations, 1),
  )


_UNPADDED_GRID = [
  # fmt, (h, w), (kh, kw), strides, dilations
  ("NHWC", (7, 8), (3, 3), (1, 1), (1, 1)),  # the extra column's output sliced off
  ("NHWC", (9, 9), (3, 3), (2, 2), (1, 1)),  # the extra column adds no output
  ("NHWC", (8, 9), (3, 2), (1, 3), (1, 1)),
  ("NHWC", (9, 8), (2, 3), (1, 1), (2, 2)),
  ("NCHW", (7, 8), (3, 3), (1, 2), (1, 1)),
]


@pytest.mark.parametrize("dtype", ("float32", "int32"))
@pytest.mark.parametrize("case", _UNPADDED_GRID, ids=lambda c: "-".join(map(str, c[:4])))
def test_unpadded_conv2d_gets_a_zero_column_equal_to_default_and_tf(case, dtype, monkeypatch):
  """XLA:CPU runs an unpadded convolution by a path 2-6x slower than a padded one: the
  CPU lowering pads the last spatial axis by one column and slices its output off."""
  _without_eigen(monkeypatch)
  fmt, hw, k, s, d = case
  lay = (lambda a, b: (1, a, b, 1)) if fmt == "NHWC" else (lambda a, b: (1, 1, a, b))
  attrs = dict(strides=lay(*s), padding="VALID", data_format=fmt, dilations=lay(*d))
  rng = np.random.default_rng(5)
  x_shape = (2, *hw, 8) if fmt == "NHWC" else (2, 8, *hw)
  draw = (
    (lambda sh: rng.integers(-5, 5, sh).astype(np.int32))
    if dtype == "int32"
    else (lambda sh: rng.uniform(-2, 2, sh).astype(np.float32))
  )
  x, f = draw(x_shape), draw(k + (8, 5))
  (y, fast_hlo), (y0, default_hlo) = _both(lambda x, f: tfops.Conv2D(x, f, **attrs), x, f)
  tol = dict(rtol=0, atol=0) if dtype == "int32" else _tol(dtype)
  np.testing.assert_allclose(y, y0, **tol)
  assert "[0, 1]]" in fast_hlo and "[0, 1]]" not in default_hlo  # the column's padding
  ref = _tf_or_none("Conv2D", input=x, filter=f, **attrs)
  if ref is not None:
    np.testing.assert_allclose(y, ref, **tol)
  elif fmt == "NHWC":
    raise AssertionError("TF's CPU kernel runs NHWC Conv2D: compared against it")


# --------------------------------------------------------------------------
# Ungrouped Conv2D: the batch's images (or bands of rows) side by side
# --------------------------------------------------------------------------

_SIDE_BY_SIDE_GRID = [
  # batch, (h, w), (kh, kw), strides, padding, explicit, dilations, convolution's input
  (8, (9, 8), (3, 3), (1, 1), "SAME", None, (1, 1), "1x9x80"),  # 8 images of 10 columns
  (16, (9, 8), (3, 3), (1, 1), "SAME", None, (1, 1), "2x9x80"),  # two rows of 8
  (3, (7, 9), (3, 2), (2, 3), "VALID", None, (1, 1), "1x7x27"),  # slots of 9: the stride
  (2, (9, 9), (5, 3), (1, 1), "SAME", None, (2, 1), "1x9x22"),
  (6, (8, 7), (1, 7), (1, 1), "EXPLICIT", ((1, 0), (2, 3)), (1, 1), "1x8x72"),
  (4, (9, 6), (7, 1), (1, 1), "VALID", None, (1, 1), "1x9x24"),  # a column of padding
  (1, (17, 9), (3, 3), (1, 1), "SAME", None, (1, 1), "1x7x44"),  # 4 bands of 5 rows
  (1, (16, 8), (3, 3), (2, 2), "SAME", None, (1, 1), "1x9x20"),  # 2 bands of 4 rows
  (1, (15, 10), (2, 3), (1, 1), "VALID", None, (1, 2), "1x6x30"),  # a row below the map
  (11, (8, 5), (3, 3), (1, 1), "SAME", None, (1, 1), "11x6x14"),  # a prime batch: bands
  (1, (3, 3), (3, 3), (1, 1), "SAME", None, (1, 1), None),  # too few rows for bands
]


@pytest.mark.parametrize("dtype", ("float32", "float16", "int32"))
@pytest.mark.parametrize("case", _SIDE_BY_SIDE_GRID, ids=lambda c: "-".join(map(str, c[:5])))
def test_conv2d_of_pieces_side_by_side_equals_default_and_tf(case, dtype, monkeypatch):
  """XLA:CPU's convolution shares its work between threads along the output's width
  and channels, so the CPU lowering lays a batch's images (batch 1 to 3: bands of rows)
  side by side in one row, each in a slot of its padded width, and cuts the output back:
  a row of the expected width reaches the convolution, and the result is the default's
  and TF's at every batch, stride, padding, dilation and band split."""
  _without_eigen(monkeypatch)
  monkeypatch.setattr(conv_cpu, "_MIN_SIDE_BY_SIDE_POSITIONS", 0)  # small maps here
  n, hw, k, s, padding, explicit, d, row = case
  rng = np.random.default_rng(12)
  draw = (
    (lambda sh: rng.integers(-5, 5, sh).astype(np.int32))
    if dtype == "int32"
    else (lambda sh: np.asarray(rng.uniform(-2, 2, sh), np.float32).astype(dtype))
  )
  x, f = draw((n, *hw, 3)), draw(k + (3, 5))
  attrs = _nhwc_attrs(s, padding, explicit, d)
  (y, fast_hlo), (y0, default_hlo) = _both(lambda x, f: tfops.Conv2D(x, f, **attrs), x, f)
  tol = dict(rtol=0, atol=0) if dtype == "int32" else _tol(dtype)
  np.testing.assert_allclose(y, y0, **tol)
  conv = next(line for line in fast_hlo.splitlines() if "stablehlo.convolution" in line)
  assert f": (tensor<{row or 'x'.join(map(str, x.shape))}x" in conv
  assert ("stablehlo.transpose" in fast_hlo) == bool(row)
  if row and dtype == "float32":  # the builder traced on lax (symbolic, sharded shapes)
    traced = jax.jit(lambda x, f: conv_cpu._side_by_side(emit.LAX, x, f, **attrs))(x, f)
    np.testing.assert_allclose(traced, y0, **tol)
  if dtype != "float16":
    ref = _tf_or_none("Conv2D", input=x, filter=f, **attrs)
    assert ref is not None
    np.testing.assert_allclose(y, ref, **tol)


def test_side_by_side_equals_default_on_conv2d_spec_draws(monkeypatch):
  _without_eigen(monkeypatch)
  monkeypatch.setattr(conv_cpu, "_MIN_SIDE_BY_SIDE_POSITIONS", 0)  # the draws are small
  test_fast_lowering_equals_default_on_spec_draws("Conv2D")


def test_which_convolutions_go_side_by_side(monkeypatch):
  """Below 14x14 output positions (InceptionV3's 12x12 and 5x5 maps at 224) the layout
  changes cost about what they save (measured in the model); above 96 columns of more
  than 32 input channels XLA:CPU splits the map between threads already; an image is
  cut into bands only for at most 64 output channels (it splits wider outputs by
  channel): XLA's convolution stays."""
  _without_eigen(monkeypatch)
  attrs = dict(strides=(1, 1, 1, 1), padding="SAME", data_format="NHWC", dilations=(1,) * 4)
  for n, hw, c, out, side in (
    (8, (13, 15), 4, 4, False),
    (8, (14, 14), 4, 4, True),
    (8, (14, 14), 4, 65, True),
    (1, (16, 16), 4, 64, True),
    (1, (16, 16), 4, 65, False),
    (2, (14, 96), 33, 4, True),
    (2, (14, 97), 33, 4, False),  # a wide map of many channels runs on every core
    (2, (14, 97), 32, 4, True),
  ):
    x, f = np.ones((n, *hw, c), np.float32), np.ones((3, 3, c, out), np.float32)
    (_, fast_hlo), _ = _both(lambda x, f: tfops.Conv2D(x, f, **attrs), x, f)
    assert ("stablehlo.transpose" in fast_hlo) == side, (n, hw, out)


def test_grad_and_vmap_through_side_by_side(monkeypatch):
  """The gradient and vmap of a Conv2D whose forward pass runs side by side (batch 3:
  three images in a row; batch 1: bands) equal TF's gradient and the default lowering's."""
  _without_eigen(monkeypatch)
  monkeypatch.setattr(conv_cpu, "_MIN_SIDE_BY_SIDE_POSITIONS", 0)
  attrs = dict(strides=(1, 1, 1, 1), padding="SAME", data_format="NHWC", dilations=(1,) * 4)
  rng = np.random.default_rng(13)
  f = rng.uniform(-1, 1, (3, 3, 4, 5)).astype(np.float32)

  def loss(x, f):
    return (tfops.Relu(tfops.Conv2D(x, f, **attrs)) ** 2).sum()

  for n in (3, 1):
    x = rng.uniform(-1, 1, (n, 16, 9, 4)).astype(np.float32)
    xt, ft = tf.constant(x), tf.constant(f)
    with tf.GradientTape() as tape:
      tape.watch([xt, ft])
      want = tf.reduce_sum(tf.nn.relu(tf.nn.conv2d(xt, ft, 1, "SAME")) ** 2)
    want_grads = tape.gradient(want, [xt, ft])
    results = {}
    for fast in (True, False):
      with tfprims.override_config("fast_lowerings", fast):
        value, grads = jax.jit(jax.value_and_grad(loss, argnums=(0, 1)))(x, f)
        batched = jax.jit(jax.vmap(loss, in_axes=(0, None)))(np.stack([x, -2 * x]), f)
        hlo = jax.jit(loss).lower(x, f).as_text()
      results[fast] = (np.asarray(value), *map(np.asarray, grads), np.asarray(batched))
      assert ("stablehlo.transpose" in hlo) == fast
    for a, b in zip(results[True], results[False]):
      np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(results[True][0], want.numpy(), rtol=1e-5)
    for got, ref in zip(results[True][1:3], want_grads):
      np.testing.assert_allclose(got, ref.numpy(), rtol=1e-4, atol=1e-4)


def test_a_symbolic_batch_exports_bands_side_by_side(monkeypatch):
  """One artifact for every batch size (a symbolic batch, as `tfprims export` writes):
  which numbers of images divide the batch is unknown, so each image's rows go side by
  side as bands; the artifact equals TF's Conv2D at batch 1, 3 and 8."""
  _without_eigen(monkeypatch)
  attrs = dict(strides=(1, 1, 1, 1), padding="SAME", data_format="NHWC", dilations=(1,) * 4)
  rng = np.random.default_rng(14)
  f = rng.uniform(-1, 1, (3, 3, 4, 5)).astype(np.float32)
  spec = jax.ShapeDtypeStruct(jax.export.symbolic_shape("b, 16, 16, 4"), np.float32)
  for fast in (True, False):
    with tfprims.override_config("fast_lowerings", fast):
      exported = jax.export.export(jax.jit(lambda x, f: tfops.Conv2D(x, f, **attrs)))(spec, f)
    assert ("stablehlo.transpose" in exported.mlir_module()) == fast
    for n in (1, 3, 8):
      x = rng.uniform(-1, 1, (n, 16, 16, 4)).astype(np.float32)
      want = tf.raw_ops.Conv2D(input=x, filter=f, **attrs).numpy()
      np.testing.assert_allclose(exported.call(x, f), want, rtol=1e-5, atol=1e-5)


# --------------------------------------------------------------------------
# Ungrouped float32 Conv2D on Eigen: an output one column wider than the input
# --------------------------------------------------------------------------

_EIGEN_GRID = [
  # batch, (h, w), (kh, kw), strides, padding, explicit, dilations, columns added
  (3, (9, 8), (3, 3), (1, 1), "SAME", None, (1, 1), 1),
  (1, (9, 8), (3, 3), (1, 1), "VALID", None, (1, 1), 3),
  (2, (8, 9), (5, 5), (1, 1), "SAME", None, (1, 1), 1),
  (2, (9, 9), (3, 2), (2, 1), "SAME", None, (2, 3), 1),  # stride 2 down the rows
  (2, (8, 7), (7, 1), (1, 1), "SAME", None, (1, 1), 1),
  (2, (8, 7), (2, 3), (1, 1), "EXPLICIT", ((1, 0), (2, 3)), (1, 1), 0),  # wider already
  (2, (8, 7), (1, 7), (1, 1), "SAME", None, (1, 1), "rows"),  # one row: 1-D
  (3, (5, 9), (1, 3), (1, 1), "VALID", None, (1, 2), "rows"),
  (2, (8, 7), (1, 3), (1, 1), "EXPLICIT", ((1, 1), (1, 1)), (1, 1), None),  # rows padded
  (2, (9, 9), (3, 3), (1, 2), "SAME", None, (1, 1), None),  # stride 2 along the width
]


@pytest.mark.parametrize("case", _EIGEN_GRID, ids=lambda c: "-".join(map(str, c[:5])))
def test_conv2d_wider_than_its_input_equals_default_and_tf(case, monkeypatch):
  """XLA:CPU runs a convolution with an output wider than its input on Eigen (threads
  share the batch) rather than as a YNNPACK fusion: the CPU lowering pads the width
  until the output has one column more than the input (none where it has already) and
  slices the extra columns off; filters of one row and strides along the width keep the
  other lowerings. A filter of one row (without row padding) is a 1-D convolution of
  the rows folded into the batch, which YNNPACK does not take either. Equal to the
  default lowering and TF, and the compiled program has no YNNPACK convolution where
  the route was taken."""
  monkeypatch.setattr(conv_cpu, "_MIN_SIDE_BY_SIDE_POSITIONS", 0)
  n, hw, k, s, padding, explicit, d, added = case
  rng = np.random.default_rng(15)
  x = rng.uniform(-2, 2, (n, *hw, 24)).astype(np.float32)
  f = rng.uniform(-2, 2, (*k, 24, 20)).astype(np.float32)
  attrs = _nhwc_attrs(s, padding, explicit, d)
  (y, fast_hlo), (y0, _) = _both(lambda x, f: tfops.Conv2D(x, f, **attrs), x, f)
  np.testing.assert_allclose(y, y0, **_tol("float32"))
  np.testing.assert_allclose(
    y, _tf_or_none("Conv2D", input=x, filter=f, **attrs), **_tol("float32")
  )
  if added is not None:  # the builder traced on lax (symbolic, sharded shapes)
    traced = jax.jit(lambda x, f: conv_cpu._on_eigen(emit.LAX, x, f, **attrs))(x, f)
    np.testing.assert_allclose(traced, y0, **_tol("float32"))
  conv = next(line for line in fast_hlo.splitlines() if "stablehlo.convolution" in line)
  if added == "rows":
    assert f"tensor<{n * hw[0]}x{hw[1]}x24xf32>" in conv  # rows x width x channels
  else:
    shapes = re.findall(r"tensor<(\d+)x(\d+)x(\d+)x\d+xf32>", conv)
    width, out_width = int(shapes[0][2]), int(shapes[-1][2])
    if added is None:
      assert out_width <= width
      return
    assert width == hw[1] and out_width == y.shape[2] + added and out_width > width
  with tfprims.override_config("fast_lowerings", True):
    compiled = jax.jit(lambda x, f: tfops.Conv2D(x, f, **attrs)).lower(x, f).compile().as_text()
  assert "ynn_fusion" not in compiled and "convolution(" in compiled


def test_conv2d_on_eigen_keeps_a_symbolic_batch_and_its_gradient(monkeypatch):
  """The Eigen route under an exported symbolic batch (one artifact for every batch
  size) and under grad and vmap: TF's values and gradients."""
  attrs = dict(strides=(1, 1, 1, 1), padding="VALID", data_format="NHWC", dilations=(1,) * 4)
  rng = np.random.default_rng(16)
  f = rng.uniform(-1, 1, (3, 3, 4, 5)).astype(np.float32)
  spec = jax.ShapeDtypeStruct(jax.export.symbolic_shape("b, 9, 8, 4"), np.float32)
  exported = jax.export.export(jax.jit(lambda x, f: tfops.Conv2D(x, f, **attrs)))(spec, f)
  assert "[0, 3]]" in exported.mlir_module()  # VALID: three columns make it wider
  for n in (1, 3):
    x = rng.uniform(-1, 1, (n, 9, 8, 4)).astype(np.float32)
    want = tf.raw_ops.Conv2D(input=x, filter=f, **attrs).numpy()
    np.testing.assert_allclose(exported.call(x, f), want, rtol=1e-5, atol=1e-5)

  def loss(x, f):
    return (tfops.Relu(tfops.Conv2D(x, f, **attrs)) ** 2).sum()

  x = rng.uniform(-1, 1, (2, 9, 8, 4)).astype(np.float32)
  xt, ft = tf.constant(x), tf.constant(f)
  with tf.GradientTape() as tape:
    tape.watch([xt, ft])
    want = tf.reduce_sum(tf.nn.relu(tf.nn.conv2d(xt, ft, 1, "VALID")) ** 2)
  value, grads = jax.jit(jax.value_and_grad(loss, argnums=(0, 1)))(x, f)
  np.testing.assert_allclose(value, want.numpy(), rtol=1e-5)
  for got, ref in zip(grads, tape.gradient(want, [xt, ft])):
    np.testing.assert_allclose(got, ref.numpy(), rtol=1e-4, atol=1e-4)
  batched = jax.jit(jax.vmap(loss, in_axes=(0, None)))(np.stack([x, -x]), f)
  np.testing.assert_allclose(batched[0], want.numpy(), rtol=1e-5)


def test_conv2d_on_eigen_on_edge_values_and_empty_dims():
  """NaN, ±inf and -0.0 in the input go through the widened and the 1-D forms as
  through the default lowering and TF (the extra column's windows read the last columns;
  their outputs are dropped); empty batches, maps and channels keep the default."""
  rng = np.random.default_rng(17)
  x = rng.uniform(-2, 2, (2, 6, 7, 4)).astype(np.float32)
  x[0, 2, 6] = np.nan  # the last column, which the extra column's window reads
  x[1, 0, 0, 0], x[1, 5, 6, 1] = np.inf, -np.inf  # in windows of their own
  x[1, 5, 3] = -0.0
  for k, padding in (((3, 3), "SAME"), ((3, 3), "VALID"), ((1, 3), "SAME")):
    f = rng.uniform(0.5, 1.5, (*k, 4, 3)).astype(np.float32)  # no zero weight times inf
    attrs = _nhwc_attrs((1, 1), padding, None, (1, 1))
    (y, fast_hlo), (y0, _) = _both(lambda x, f: tfops.Conv2D(x, f, **attrs), x, f)
    assert "stablehlo.transpose" not in fast_hlo  # neither side by side nor default: Eigen
    np.testing.assert_array_equal(np.isnan(y), np.isnan(y0))
    np.testing.assert_allclose(y, y0, **_tol("float32"), equal_nan=True)
    want = tf.raw_ops.Conv2D(input=x, filter=f, **attrs).numpy()
    np.testing.assert_allclose(y, want, **_tol("float32"), equal_nan=True)
    assert np.isnan(y).any() and np.isinf(y).any()
  attrs = _nhwc_attrs((1, 1), "SAME", None, (1, 1))
  for shape, f_shape in (
    ((0, 6, 7, 4), (3, 3, 4, 3)),
    ((2, 6, 0, 4), (3, 3, 4, 3)),
    ((2, 6, 7, 4), (3, 3, 4, 0)),
  ):
    x, f = np.ones(shape, np.float32), np.ones(f_shape, np.float32)
    (y, fast_hlo), (y0, default_hlo) = _both(lambda x, f: tfops.Conv2D(x, f, **attrs), x, f)
    assert y.shape == y0.shape and fast_hlo == default_hlo
    np.testing.assert_array_equal(y, y0)
