"""The StableHLO reader (tfprims.stablehlo): modules exported from JAX functions, read
back as JAX operations, equal the original functions in values (eager and jit), vmap,
jvp and grad; shape-polymorphic modules run at any size; what cannot be read says so.
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax import export

from tfprims import stablehlo
from tfprims.stablehlo import custom_calls, reader
from helpers import jaxpr_primitives
from jax_functions import FUNCTIONS

TOL = dict(rtol=3e-5, atol=3e-5)


def _exported(f, args):
  specs = [jax.ShapeDtypeStruct(np.shape(a), np.asarray(a).dtype) for a in args]
  return export.export(jax.jit(f), platforms=["cpu"])(*specs).mlir_module_serialized


def _read(data):
  return lambda *a: stablehlo.call_module(data, a)


def _close(got, want, **tol):
  for g, w in zip(jax.tree.leaves(got), jax.tree.leaves(want), strict=True):
    np.testing.assert_allclose(
      np.asarray(g, np.float64 if np.asarray(g).dtype.kind == "V" else None),
      np.asarray(w),
      **(tol or TOL),
    )


def _float_arg(args):
  return next((i for i, a in enumerate(args) if np.asarray(a).dtype.kind == "f"), None)


def _sum_floats(outs):
  return sum(
    jnp.sum(jnp.real(o).astype(jnp.float32) * (k + 1) * 0.3)
    for k, o in enumerate(jax.tree.leaves(outs))
    if jnp.issubdtype(o.dtype, jnp.inexact)
  )


@pytest.mark.parametrize("name", sorted(FUNCTIONS))
def test_module_read_as_jax_equals_the_function(name):
  f, args, checks = FUNCTIONS[name]
  data = _exported(f, args)
  assert stablehlo.unreadable(data, args) is None
  read = _read(data)
  want = jax.jit(f)(*args)
  tol = dict(rtol=checks["tol"], atol=checks["tol"]) if "tol" in checks else {}
  _close(read(*args), want, **tol)
  _close(jax.jit(read)(*args), want, **tol)
  i = _float_arg(args)
  if i is None:
    return
  with_arg = lambda fn: lambda v: fn(*args[:i], v, *args[i + 1 :])
  batch = np.stack([args[i], args[i] * 0.5 + 0.1])
  _close(jax.vmap(with_arg(read))(batch), jax.vmap(with_arg(f))(batch), **tol)
  if checks.get("grad", True):
    loss = lambda fn: lambda v: _sum_floats(with_arg(fn)(v))
    _close(jax.grad(loss(read))(args[i]), jax.grad(loss(f))(args[i]), rtol=2e-4, atol=2e-4)
    t = np.ones_like(args[i])
    _close(
      jax.jvp(loss(read), (args[i],), (t,))[1],
      jax.jvp(loss(f), (args[i],), (t,))[1],
      rtol=2e-4,
      atol=2e-4,
    )


def test_jaxpr_shows_the_operations():
  f, args, _ = FUNCTIONS["cnn"]
  names = jaxpr_primitives(jax.make_jaxpr(_read(_exported(f, args)))(*args))
  assert {"conv_general_dilated", "max", "reduce_window_max", "reduce_sum"} <= names
  # A counted loop (lax.scan in the original) is a scan again: reverse mode works.
  f, args, _ = FUNCTIONS["scan_rnn"]
  assert "scan" in jaxpr_primitives(jax.make_jaxpr(_read(_exported(f, args)))(*args))
  # A loop with a data-dependent trip count: tf.While.unbounded (reverse mode by
  # checkpointed recomputation).
  f, args, _ = FUNCTIONS["while_data"]
  assert "tf.While.unbounded" in jaxpr_primitives(jax.make_jaxpr(_read(_exported(f, args)))(*args))


def test_symbolic_batch_runs_at_any_size():
  (b,) = export.symbolic_shape("b")

  def f(x, w):
    h = jnp.tanh(x @ w)
    return jnp.sum(h, 0) / x.shape[0], jnp.arange(x.shape[0]) * 2, h.reshape(-1)

  data = export.export(jax.jit(f), platforms=["cpu"])(
    jax.ShapeDtypeStruct((b, 4), jnp.float32), jax.ShapeDtypeStruct((4, 3), jnp.float32)
  ).mlir_module_serialized
  w = np.linspace(-1, 1, 12, dtype=np.float32).reshape(4, 3)
  for n in (1, 6):
    x = np.linspace(0, 1, 4 * n, dtype=np.float32).reshape(n, 4)
    _close(jax.jit(_read(data))(x, w), f(x, w))
  with pytest.raises(Exception, match="dimension variable 'b'"):
    stablehlo.call_module(data, [np.zeros((0, 4), np.float32), w])


def test_custom_call_without_equivalent_runs_and_refuses_derivatives():
  f, args, _ = FUNCTIONS["qr"]
  read = _read(_exported(f, args))
  _close(jax.jit(read)(*args), f(*args))
  assert "stablehlo.custom_call" in jaxpr_primitives(jax.make_jaxpr(read)(*args))
  batch = np.stack([args[0], args[0] + 1.0])
  _close(jax.vmap(read)(batch), jax.vmap(f)(batch))
  with pytest.raises(custom_calls.NoDerivativeError, match="lapack_sgeqrf"):
    jax.grad(lambda a: jnp.sum(read(a)[1]))(args[0])


@pytest.mark.parametrize(
  "dtype", ["bfloat16", "float16", "complex64", "bool", "uint32", "float32", "int64"]
)
def test_constants_of_every_dtype(dtype):
  values = np.array([1.5, np.nan, -np.inf, 0.0, -2.0, 3.25, 7.0, 1e-3] * 16)
  if dtype == "complex64":
    const = (values + 1j * values[::-1]).astype(dtype)
  elif dtype in ("bool", "uint32", "int64"):
    const = np.nan_to_num(values, posinf=9, neginf=3).astype(dtype)
  else:
    const = values.astype(jnp.dtype(dtype))
  const = jnp.asarray(const)
  for c in (const[:3], const):  # a literal list, and a hex blob (long constants)
    data = _exported(lambda x, c=c: (x, c), [np.zeros(2, np.float32)])
    got = stablehlo.call_module(data, [np.zeros(2, np.float32)])[1]
    assert np.asarray(got).dtype == np.asarray(c).dtype
    # numpy's NaN-aware comparison needs a numpy float kind (bfloat16 is not one before
    # ml_dtypes 0.7): bfloat16 compared as float32, which holds every value exactly.
    wide = (lambda a: np.asarray(a, np.float32)) if dtype == "bfloat16" else np.asarray
    np.testing.assert_array_equal(wide(got), wide(c))


def test_unreadable_modules_say_why():
  bad = reader.StableHLOError
  assert issubclass(bad, Exception)
  data = _exported(lambda x: jnp.sort(x), [np.zeros(3, np.float32)])
  assert stablehlo.unreadable(data, [np.zeros(3, np.float32)]) is None
  with pytest.raises(bad, match="cannot read"):
    reader.load(b"not a module")


# Sorts whose comparators compare with TOTALORDER (-NaN < -inf < ... < -0 < +0 < ... <
# inf < +NaN): lax.top_k's chlo.top_k composite compares raw values; jnp.sort,
# jnp.argsort and lax.sort canonicalize first (-0 as +0, every NaN +NaN).
NAN_ROW = np.array(
  [np.inf, np.nan, np.copysign(np.nan, -1.0), -np.inf, 3.0, 0.0, -0.0, 1.0, 1.0], np.float32
)
SORTS = {
  "top_k": lambda x: jax.lax.top_k(x, 5),
  "top_k_all": lambda x: jax.lax.top_k(x, 9),
  "sort": jnp.sort,
  "argsort": jnp.argsort,
  "argsort_descending": lambda x: jnp.argsort(x, descending=True),
  "sort_two_keys": lambda x: jax.lax.sort((x, x[::-1], jnp.arange(9)), num_keys=2),
  "sort_three_operands": lambda x: jax.lax.sort((x[::-1], -x, jnp.arange(9)), num_keys=1),
}


def _same_bits(got, want):
  for g, w in zip(jax.tree.leaves(got), jax.tree.leaves(want), strict=True):
    g, w = np.asarray(g), np.asarray(w)
    assert (g.dtype, g.shape, g.tobytes()) == (w.dtype, w.shape, w.tobytes()), (g, w)


@pytest.mark.parametrize("name", sorted(SORTS))
def test_sort_comparators_keep_their_comparison_type(name):
  f = SORTS[name]
  read = _read(_exported(f, [NAN_ROW]))
  want = jax.jit(f)(NAN_ROW)
  _same_bits(read(NAN_ROW), want)
  _same_bits(jax.jit(read)(NAN_ROW), want)
  rows = np.stack([NAN_ROW, NAN_ROW[::-1]])
  _same_bits(jax.vmap(read)(rows), jax.vmap(f)(rows))
