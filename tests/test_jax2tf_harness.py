"""jax2tf round trips of JAX's primitive harness groups (tests/jax_harness_cases.py):
JAX function -> jax2tf.convert (one XlaCallModule op) -> tf.function -> tfprims.

Each check: the jaxpr of the converted function has no ``tf.XlaCallModule`` (the
StableHLO is read as JAX operations); forward eager and under ``jax.jit`` equals the
original; ``jax.grad`` of a weighted sum of the float outputs (in every float input)
and ``jax.vmap`` over the inputs and their flipped copies equal the original's where
the case allows. CI packs the cases into a few chunks (one conversion each);
``HYPOTHESIS_PROFILE=thorough`` also converts every case alone, and checks each
refused case raises its documented typed error.
"""

import os
import warnings

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import tensorflow as tf
from jax.experimental import jax2tf

import tfprims
from tfprims import errors
from helpers import jaxpr_primitives
from jax_harness_cases import BY_ID, CASES, GROUPS, HARNESS_GROUPS, chunks

THOROUGH = os.environ.get("HYPOTHESIS_PROFILE") == "thorough"
CHUNKS = chunks(6)
GRAD_TOL = 3e-4


def _spec(a):
  return tf.TensorSpec(np.shape(a), tf.as_dtype(np.asarray(a).dtype))


def _packed(cases):
  """One function of every case's inputs returning every case's outputs (flat), and
  the span of each case's inputs and outputs."""
  arg_spans, start = [], 0
  for c in cases:
    arg_spans.append((start, start + len(c.args)))
    start += len(c.args)

  def f(*flat):
    flat = [jnp.asarray(a) for a in flat]
    return tuple(
      leaf for c, (a, b) in zip(cases, arg_spans) for leaf in jax.tree.leaves(c.fn(*flat[a:b]))
    )

  out_spans, start = [], 0
  for c in cases:
    n = len(jax.tree.leaves(jax.eval_shape(c.fn, *c.args)))
    out_spans.append((start, start + n))
    start += n
  return f, [a for c in cases for a in c.args], arg_spans, out_spans


def _compare(cases, spans, got, want, what, tol=None):
  for c, (a, b) in zip(cases, spans):
    for g, w in zip(got[a:b], want[a:b], strict=True):
      g, w = np.asarray(g), np.asarray(w)
      msg = f"{c.id}: {what}"
      assert g.shape == w.shape and g.dtype == w.dtype, (msg, g.shape, g.dtype, w.shape, w.dtype)
      if w.dtype.kind in "fcV":  # V: bfloat16
        if w.dtype.kind == "V":
          g, w = g.astype(f32), w.astype(f32)
        t = tol or c.tol
        np.testing.assert_allclose(g, w, rtol=t, atol=t, err_msg=msg)
      else:
        np.testing.assert_array_equal(g, w, err_msg=msg)


f32 = np.float32


def _convert(f, args):
  """The round trip of ``f``, and the warnings of its conversion (a module that cannot
  be read is called as one operation, with a warning naming why)."""
  tf_fn = tf.function(jax2tf.convert(f), autograph=False)
  with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    fn = tfprims.convert_functional(tf_fn, *[_spec(a) for a in args])
    jax.eval_shape(fn, *args)
  return fn, [str(w.message) for w in caught]


def _all_checks(g, cases, args, arg_spans, out_spans, dtypes):
  """One function of ``args`` returning ``g``'s forward values, its vmap over the
  batchable cases' inputs (with their flipped copies) and its gradient (of a weighted
  sum of the differentiable cases' float outputs, in their float inputs): one trace
  and one compilation for all checks."""
  axes = [None] * len(args)
  for c, (a, b) in zip(cases, arg_spans):
    if c.vmap:
      axes[a:b] = [0] * (b - a)
  pos = [
    k
    for c, (a, b) in zip(cases, arg_spans)
    if c.grad
    for k in range(a, b)
    if np.asarray(args[k]).dtype.kind == "f"
  ]
  outs = [
    k
    for c, (a, b) in zip(cases, out_spans)
    if c.grad
    for k in range(a, b)
    if dtypes[k].kind in "fc"
  ]

  def loss(*xs):
    full = list(args)
    for k, x in zip(pos, xs):
      full[k] = x
    ys = g(*full)
    return sum(jnp.sum(jnp.real(ys[k]).astype(f32)) * (1.0 + 0.25 * n) for n, k in enumerate(outs))

  def checks(*xs):
    batched = [x if ax is None else jnp.stack([x, jnp.flip(x)]) for x, ax in zip(xs, axes)]
    vmapped = jax.vmap(g, in_axes=axes)(*batched) if any(a is not None for a in axes) else ()
    grads = jax.grad(loss, tuple(range(len(pos))))(*[xs[k] for k in pos]) if pos and outs else ()
    return g(*xs), vmapped, grads

  return checks, pos


def check_round_trip(cases, eager=THOROUGH):
  f, args, arg_spans, out_spans = _packed(cases)
  fn, caught = _convert(f, args)
  dtypes = [np.dtype(o.dtype) for o in jax.eval_shape(f, *args)]
  want_checks, pos = _all_checks(f, cases, args, arg_spans, out_spans, dtypes)
  got_checks, _ = _all_checks(fn, cases, args, arg_spans, out_spans, dtypes)
  traced = jax.jit(got_checks).trace(*args)  # forward, vmap and grad: all native
  assert "tf.XlaCallModule" not in jaxpr_primitives(traced.jaxpr), ([c.id for c in cases], caught)
  got = traced.lower().compile()(*args)
  want = jax.jit(want_checks)(*args)
  _compare(cases, out_spans, got[0], want[0], "forward (jit)")
  if eager:
    _compare(cases, out_spans, fn(*args), want[0], "forward (eager)")
  vcases = [(c, s) for c, s in zip(cases, out_spans) if c.vmap]
  if vcases:
    _compare(*zip(*vcases), got[1], want[1], "vmap")
  owner = {k: c for c, (a, b) in zip(cases, arg_spans) for k in range(a, b)}
  for k, g, w in zip(pos, got[2], want[2], strict=True):
    np.testing.assert_allclose(
      np.asarray(g),
      np.asarray(w),
      rtol=GRAD_TOL,
      atol=GRAD_TOL,
      err_msg=f"{owner[k].id}: grad in input {k}",
    )


def check_no_vjp(cases):
  """Cases JAX has no reverse mode of. ``jax.grad`` of the converted function refuses
  as the original does: a typed tfprims error (jax2tf's gradient function cannot be
  traced) or, where tfprims then differentiates the read operations natively, the
  original's own exception from JAX's rule; ``vjp="zero"`` cases (the module holds a
  bit-level expansion JAX has no rule for) have a zero gradient instead."""
  f, args, _, _ = _packed(cases)
  fn, _ = _convert(f, args)
  pos = [k for k, a in enumerate(args) if np.asarray(a).dtype.kind == "f"]
  floats = [k for k, o in enumerate(jax.eval_shape(f, *args)) if o.dtype.kind == "f"]

  def grad(g):
    def loss(*xs):
      full = list(args)
      for k, x in zip(pos, xs):
        full[k] = x
      ys = g(*full)
      return sum(jnp.sum(ys[k]) for k in floats)

    return jax.grad(loss, tuple(range(len(pos))))(*[args[k] for k in pos])

  with pytest.raises(Exception) as original:
    grad(f)
  if all(c.vjp == "zero" for c in cases):
    for g in grad(fn):
      np.testing.assert_array_equal(g, np.zeros_like(g))
    return
  with pytest.raises((errors.TFPrimsError, original.type)):
    grad(fn)


def test_every_group_has_cases():
  assert set(GROUPS) == HARNESS_GROUPS


@pytest.mark.parametrize("k", range(len(CHUNKS)))
def test_chunk(k):
  check_round_trip(CHUNKS[k])
  if all(c.vjp is not True for c in CHUNKS[k]):
    check_no_vjp(CHUNKS[k])


@pytest.mark.skipif(
  not THOROUGH,
  reason="every case converted alone: "
  "HYPOTHESIS_PROFILE=thorough (CI runs them packed in test_chunk)",
)
@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_case(case):
  if case.refused is None:
    check_round_trip([case])
    if case.vjp is not True:
      check_no_vjp([case])
  else:
    with pytest.raises(case.refused):
      check_round_trip([case])


def test_native_check_fails_on_an_opaque_module():
  # the check that the module was read checks something: called as one operation
  # (config "opaque"), the same case fails it
  with (
    tfprims.override_config("xla_call_module", "opaque"),
    pytest.raises(AssertionError, match=r"\['sin:smooth'\]"),
  ):
    check_round_trip([BY_ID["sin:smooth"]])
