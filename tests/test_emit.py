"""Direct lowerings (tfprims/emit.py): emitted StableHLO computes what the traced impl
computes.

For every op whose lowering is a builder, on its property-spec draws: the jitted op
(emitted on static shapes) equals the jitted impl (lax/jnp traced). Shape
polymorphism and half-precision dtypes take the traced fallback and still agree; the
Emitter's own ops are checked against lax on odd shapes.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax import export

from tfprims import emit
from tfprims.core import get_op, registered_ops, tfops
from helpers import on_spec_draws

EMITTED = sorted(
  t for t in registered_ops() if getattr(get_op(t).lowering, "build", None) is not None
)


def test_the_hot_ops_of_networks_are_emitted():
  for op_type in (
    "Relu",
    "Relu6",
    "Sigmoid",
    "Softmax",
    "AddV2",
    "Mul",
    "Sub",
    "RealDiv",
    "BiasAdd",
    "Reshape",
    "Squeeze",
    "ExpandDims",
    "Pad",
    "Mean",
    "MatMul",
    "Rsqrt",
    "Neg",
    "Tanh",
    "SquaredDifference",
    "Conv2D",
    "Identity",
    "StopGradient",
    "Transpose",
    "ConcatV2",
    "Split",
    "Einsum",
    "BatchMatMulV2",
    "TensorListGetItem",
    "TensorListSetItem",
    "Erf",
    "Erfc",
    "StridedSlice",
    "Slice",
  ):
    assert op_type in EMITTED, op_type


def _tol(dtype):
  dtype = np.dtype(dtype)
  if dtype.kind not in "fc":
    return dict(rtol=0, atol=0)
  eps = float(np.finfo(dtype).eps)
  return dict(rtol=8 * eps, atol=8 * eps)


def _as_float64(x):
  x = np.asarray(x)
  return (
    x.astype(np.complex128 if x.dtype.kind == "c" else np.float64) if x.dtype.kind in "fc" else x
  )


# TensorList specs draw lists as their items (operands=...): compared below.
_LIST_OPS = ("TensorListGetItem", "TensorListSetItem")


@pytest.mark.parametrize("op_type", [t for t in EMITTED if t not in _LIST_OPS])
def test_emitted_lowering_equals_traced_impl_on_spec_draws(op_type):
  op = get_op(op_type)

  def check(call):
    try:
      expected = jax.jit(lambda *a: op.impl(*a, **call.params))(*call.operands)
    except Exception:  # a draw the impl rejects (TF's errors): nothing to compare
      return False
    actual = jax.jit(lambda *a: op(*a, **call.params))(*call.operands)
    for a, e in zip(jax.tree_util.tree_leaves(actual), jax.tree_util.tree_leaves(expected)):
      assert a.shape == e.shape and a.dtype == e.dtype
      np.testing.assert_allclose(_as_float64(a), _as_float64(e), **_tol(e.dtype))

  on_spec_draws(op, check, max_examples=10)


@pytest.mark.parametrize(
  "equation, shapes",
  [
    ("bqhd,bkhd->bhqk", [(2, 5, 3, 4), (2, 6, 3, 4)]),  # attention scores
    ("bhqk,bkhd->bqhd", [(2, 3, 5, 6), (2, 6, 3, 4)]),  # attention values
    ("abc,cd->abd", [(2, 3, 4), (4, 5)]),  # a dense layer
    ("ij,kj->ik", [(3, 4), (5, 4)]),
    ("i,i->", [(4,), (4,)]),
    ("ij,j->ji", [(3, 4), (4,)]),  # a free label on one side only
    ("ij,jk->ki", [(3, 4), (4, 5)]),
  ],
)
def test_einsum_as_one_dot_general_equals_jnp(equation, shapes):
  rng = np.random.default_rng(0)
  args = [rng.normal(size=s).astype(np.float32) for s in shapes]
  text = jax.jit(lambda *a: tfops.Einsum(*a, equation=equation)).lower(*args).as_text()
  assert text.count("stablehlo.dot_general") == 1
  ours = jax.jit(lambda *a: tfops.Einsum(*a, equation=equation))(*args)
  np.testing.assert_allclose(ours, np.einsum(equation, *args), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("dtype", [np.float32, np.int32, np.bool_])
def test_tensor_list_items_emitted_equal_the_impl(dtype):
  items = (np.arange(24).reshape(4, 3, 2) % 5).astype(dtype)
  item = np.ones((3, 2), dtype)
  get, put = get_op("TensorListGetItem").impl, get_op("TensorListSetItem").impl
  for index in (np.int32(0), np.int32(3), np.int32(7)):  # 7: clamped, as dynamic_slice
    np.testing.assert_array_equal(
      jax.jit(tfops.TensorListGetItem)(items, index), jax.jit(get)(items, index)
    )
    np.testing.assert_array_equal(
      jax.jit(tfops.TensorListSetItem)(items, index, item), jax.jit(put)(items, index, item)
    )


def test_symbolic_shapes_take_the_traced_lowering():
  def f(x):
    h = tfops.Relu6(tfops.BiasAdd(x, jnp.arange(3.0, dtype=x.dtype)))
    return tfops.Reshape(tfops.Mean(h, axis=(1,), keep_dims=False), shape=(-1,))

  spec = jax.ShapeDtypeStruct(export.symbolic_shape("b, 4, 3"), np.float32)
  exported = export.export(jax.jit(f))(spec)
  x = np.random.default_rng(0).normal(size=(5, 4, 3)).astype(np.float32) * 8
  np.testing.assert_allclose(exported.call(x), jax.jit(f)(x), rtol=1e-6)


def test_half_precision_mean_and_softmax_take_the_traced_lowering():
  """Their impls sum half types in float32 (jnp's reductions): the builders decline."""
  mean = get_op("Mean").impl
  for dtype in (jnp.float16, jnp.bfloat16):
    x = (np.arange(24).reshape(2, 3, 4) % 7 * 1000).astype(dtype)
    ours = jax.jit(lambda x: tfops.Mean(x, axis=(1, 2), keep_dims=True))(x)
    np.testing.assert_array_equal(ours, jax.jit(lambda x: mean(x, axis=(1, 2), keep_dims=True))(x))
    np.testing.assert_array_equal(jax.jit(tfops.Softmax)(x), jax.jit(get_op("Softmax").impl)(x))


# --------------------------------------------------------------------------
# The Emitter's ops against lax's
# --------------------------------------------------------------------------


def _emit_and_lax(build, *args):
  """build on the Emitter (through a throwaway op's lowering) and on LAX."""
  from jax.extend.core import Primitive
  from jax.interpreters import mlir

  prim = Primitive(f"test_emit_{build.__name__}")
  prim.def_impl(lambda *a: emit.traced(build)(*a))
  prim.def_abstract_eval(lambda *a: jax.make_jaxpr(emit.traced(build))(*a).out_avals[0])
  mlir.register_lowering(prim, emit.direct_lowering(build, emit.traced(build)))
  return jax.jit(prim.bind)(*args), jax.jit(emit.traced(build))(*args)


@pytest.mark.parametrize(
  "build",
  [
    lambda B, x: B.slice(x, (1, 0, 2), (4, 5, 7), (2, 3, 2)),
    lambda B, x: B.pad(x, 0, [(1, 2, 0), (0, 0, 2), (3, 0, 1)]),
    lambda B, x: B.transpose(B.reshape(x, (5, 4, 7)), (2, 0, 1)),
    lambda B, x: B.concatenate([x, B.neg(x)], 1),
    lambda B, x: B.reduce_sum(x, (0, 2)),
    lambda B, x: B.reduce_max(x, (1,)),
    lambda B, x: B.dot_general(x, x, (((2,), (2,)), ((0,), (0,)))),
    lambda B, x: B.convert_element_type(B.mul(x, x), np.float16),
    lambda B, x: B.select(B.lt(x, B.full(0.5, x.shape, x.dtype)), B.exp(x), B.tanh(x)),
    lambda B, x: B.sub(B.erf(x), B.erfc(B.neg(x))),
    lambda B, x: B.rev(x, (0, 2)),
    lambda B, x: B.reduce_window_max(x, (2, 1, 3), (1, 1, 2), [(0, 1), (0, 0), (1, 1)]),
    lambda B, x: B.reduce_window_sum(x, (1, 3, 1), (2, 1, 1), [(1, 0), (1, 1), (0, 0)]),
    lambda B, x: B.select(
      B.ge(x, B.full(0.5, x.shape, x.dtype)),
      x,
      B.broadcast_in_dim(B.asarray(np.arange(7, dtype=np.float32)), x.shape, (2,)),
    ),
    lambda B, x: B.add(
      B.broadcast_to(B.reduce_sum(x, (2,)), (3, 4, 5)), B.rsqrt(B.full(4.0, (3, 4, 5), x.dtype))
    ),
  ],
)
def test_emitter_ops_equal_lax(build):
  x = np.random.default_rng(1).uniform(size=(4, 5, 7)).astype(np.float32)
  emitted, traced = _emit_and_lax(build, x)
  assert emitted.shape == traced.shape and emitted.dtype == traced.dtype
  np.testing.assert_allclose(
    np.asarray(emitted, np.float64), np.asarray(traced, np.float64), rtol=1e-6
  )


def test_emitter_compares_by_dtype_kind():
  for dtype in (np.int32, np.uint8, np.float32):
    x = np.array([0, 1, 5, 6, 7, 200 if dtype == np.uint8 else -3], dtype)
    np.testing.assert_array_equal(
      jax.jit(tfops.Relu6)(x), np.clip(x.astype(np.int64), 0, 6).astype(dtype)
    )
