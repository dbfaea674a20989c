"""The public registry API: adding ops, looking them up, overriding rules."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import tensorflow as tf

import tfprims
from tfprims import core


def test_lookup_and_listing():
  ops = tfprims.registered_ops()
  assert ops == tuple(sorted(ops)) and len(ops) >= 120
  prim = tfprims.primitive("MatMul")
  assert prim.name == "tf.MatMul"
  assert tfprims.get_op("MatMul").primitive is prim
  with pytest.raises(KeyError, match="no TF op 'NotAnOp' is registered"):
    tfprims.primitive("NotAnOp")


def test_params_must_be_hashable():
  with pytest.raises(TypeError, match="must be hashable"):
    core.hashable({"a": 1})
  assert core.hashable([1, np.int64(2), np.array([3, 4])]) == (1, 2, (3, 4))
  assert core.hashable(np.float32) == np.dtype("float32")


@pytest.fixture
def debug_identity():
  """Registers TF's DebugIdentity (a debugger tap tfprims does not ship: it is not in
  docs/coverage/op-universe.json) the way a library author would."""
  assert "DebugIdentity" not in tfprims.registered_ops()

  def impl(x, *, tensor_name):
    return x

  op = tfprims.register_op("DebugIdentity", impl, attrs=("tensor_name",), batching="elementwise")
  yield op
  tfprims.unregister_op("DebugIdentity")
  assert "DebugIdentity" not in tfprims.registered_ops()


def test_registering_a_new_op_and_converting_a_graph_that_uses_it(debug_identity):
  @tf.function
  def f(x):
    return tf.raw_ops.DebugIdentity(input=x * 2.0, tensor_name="doubled") + 1.0

  fn, params = tfprims.convert(f, tf.TensorSpec([None], tf.float32))
  x = np.float32([-1.0, 0.0, 0.2, 0.5, 2.4, 3.0, 7.0])
  out, _ = fn(params, x)
  np.testing.assert_array_equal(out, f(x).numpy())
  jaxpr = str(jax.make_jaxpr(lambda x: fn(params, x)[0])(x))
  assert "tf.DebugIdentity[tensor_name=doubled]" in jaxpr

  # "elementwise" batching re-binds the op under vmap.
  xs = np.stack([x, -x])
  batched = jax.vmap(lambda x: fn(params, x)[0])(xs)
  np.testing.assert_array_equal(batched, np.stack([f(x).numpy(), f(-x).numpy()]))
  assert "tf.DebugIdentity" in str(jax.make_jaxpr(jax.vmap(lambda x: fn(params, x)[0]))(xs))


def test_overriding_a_batching_rule(debug_identity):
  calls = []

  def rule(args, dims, **params):
    calls.append(dims)
    (x,), (d,) = args, dims
    x = jnp.moveaxis(x, d, 0)
    # Evaluate example by example: a deliberately different but correct strategy.
    return jnp.stack([debug_identity(x[i], **params) for i in range(x.shape[0])]), 0

  tfprims.override_batching("DebugIdentity", rule)
  try:
    assert debug_identity.batching_source == "override"
    fn, params = tfprims.convert(
      tf.function(lambda x: tf.raw_ops.DebugIdentity(input=x, tensor_name="x") * 3.0),
      tf.TensorSpec([3], tf.float32),
    )
    xs = np.float32([[0, 1, 2], [1, 0, 0]])
    out = jax.vmap(lambda x: fn(params, x)[0], in_axes=1)(xs.T)
    np.testing.assert_array_equal(out, xs * 3.0)
    assert calls == [(1,)]
  finally:
    tfprims.override_batching("DebugIdentity", None)
  assert debug_identity.batching_source == "elementwise"


def test_overriding_a_jvp_rule():
  sin = tfprims.get_op("Sin")

  def scaled_jvp(primals, tangents):
    (x,), (t,) = primals, tangents
    return sin(x), 10.0 * t * jnp.cos(x)

  tfprims.override_jvp("Sin", scaled_jvp)
  try:
    g = jax.grad(lambda x: sin(x))(0.3)
    np.testing.assert_allclose(g, 10.0 * np.cos(0.3), rtol=1e-6)
  finally:
    tfprims.override_jvp("Sin", None)
  assert sin.jvp_source != "override"
  np.testing.assert_allclose(jax.grad(lambda x: sin(x))(0.3), np.cos(0.3), rtol=1e-6)


def test_registering_twice_needs_replace(debug_identity):
  with pytest.raises(ValueError, match="already registered"):
    tfprims.register_op("DebugIdentity", lambda x: x)


def test_structural_ops_are_registered_once():
  with pytest.raises(ValueError, match="already registered"):
    core.register_structural("If", lambda ctx, node, inputs: [], family="custom", doc="")
  with pytest.raises(ValueError, match="already registered"):
    tfprims.register_op("Const", lambda x: x)
  with pytest.raises(KeyError, match="has no primitive"):
    tfprims.get_op("Const")
  assert "Const" in tfprims.supported_op_types() and "Const" not in tfprims.registered_ops()


def test_ops_declare_what_they_are():
  lookup = core.lookup
  assert lookup("RngReadAndSkip").writes_state and lookup("AssignVariableOp").writes_state
  assert lookup("ReadVariableOp").reads_state and lookup("ResourceGather").reads_state
  assert lookup("RandomUniform").uses_rng and not lookup("StatelessRandomUniformV2").uses_rng
  assert lookup("Shape").shape_only and lookup("TensorListElementShape").shape_only
  assert lookup("Identity").pass_through and lookup("IdentityN").pass_through
  assert lookup("While").calls_functions and lookup("PartitionedCall").calls_functions
  assert lookup("Placeholder").graph_input and lookup("VarHandleOp").creates_variable
  assert "depends on the data" in lookup("Where").dynamic_shape
  # IdentityN is declared once: a primitive whose hook handles tf.custom_gradient.
  assert isinstance(lookup("IdentityN"), core.TFOp) and lookup("IdentityN").interpret


@pytest.fixture
def replaced():
  """Replaces registered ops for the test; restores the originals afterwards."""
  saved = {}

  def replace(op_type, **kwargs):
    saved.setdefault(op_type, core.lookup(op_type))
    if "impl" in kwargs:
      return tfprims.register_op(op_type, kwargs.pop("impl"), replace=True, **kwargs)
    return core.register_structural(op_type, kwargs.pop("interpret"), replace=True, **kwargs)

  yield replace
  for op in saved.values():
    core.install_op(op)


def test_replacing_an_op_reaches_every_rule_that_binds_it(replaced):
  new_cos = replaced("Cos", impl=jnp.cos, family="elementwise", batching="elementwise")
  sin = tfprims.get_op("Sin")
  jaxpr = jax.make_jaxpr(lambda x: jax.jvp(sin, (x,), (x,)))(np.float32(0.5))
  assert new_cos.primitive in {e.primitive for e in jaxpr.eqns}


def test_a_state_writer_declares_it_and_control_flow_threads_its_writes(replaced):
  v = tf.Variable(np.zeros(2, np.float32))
  f = tf.function(lambda x: tf.cond(x[0] > 0, lambda: v.assign_add(x), lambda: v.read_value()))
  fn, params = tfprims.convert(f, tf.TensorSpec([2], tf.float32))
  (key,) = params
  x = np.ones(2, np.float32)

  def add_twice(ctx, node, inputs):
    handle, value = inputs
    ctx.state[handle.key] = ctx.state[handle.key] + 2 * value
    return []

  # The declaration, not the op's name, decides whether a branch's writes survive.
  replaced("AssignAddVariableOp", interpret=add_twice, family="custom", doc="", writes_state=True)
  np.testing.assert_allclose(jax.jit(lambda p, x: fn(p, x))(params, x)[1][key], 2 * x)
  replaced("AssignAddVariableOp", interpret=add_twice, family="custom", doc="")
  np.testing.assert_allclose(jax.jit(lambda p, x: fn(p, x))(params, x)[1][key], 0 * x)


def test_an_rng_op_declares_it_and_gets_keys_inside_loops(replaced):
  def shifted_uniform(key, *, shape, dtype):
    k = jax.random.wrap_key_data(key, impl="threefry2x32")
    return jax.random.uniform(k, shape, dtype=dtype) + 100

  replaced(
    "RandomUniform",
    impl=shifted_uniform,
    family="custom",
    static=("shape",),
    attrs=("dtype",),
    uses_rng=True,
  )

  @tf.function(autograph=False)
  def f(x):
    return tf.while_loop(
      lambda i, a: i < 3, lambda i, a: (i + 1, a + tf.random.uniform([2])), [0, x]
    )[1]

  fn = tfprims.convert_functional(f, tf.TensorSpec([2], tf.float32))
  out = jax.jit(lambda x, k: fn(x, rng=k))(np.zeros(2, np.float32), jax.random.key(0))
  assert np.all((out >= 300) & (out <= 303))
  with pytest.raises(tfprims.MissingRngError):
    fn(np.zeros(2, np.float32))


def test_unsupported_ops_are_all_listed_including_nested_functions():
  # String ops: tfprims does not convert them.
  @tf.function
  def inner(x):
    return tf.cast(tf.strings.length(tf.strings.as_string(x)), tf.float32)

  @tf.function
  def outer(x):
    return inner(x) * tf.strings.to_number(tf.strings.as_string(2.0 * x))

  with pytest.raises(tfprims.UnsupportedOpError) as info:
    tfprims.convert(outer, tf.TensorSpec([3], tf.float32))
  err = info.value
  assert set(err.ops) == {"AsString", "StringLength", "StringToNumber"}
  assert all("/" in node for node in err.ops["StringLength"])  # only inside the nested function
  assert len(err.ops["AsString"]) == 2  # one at top level, one nested
  assert "StringLength" in str(err) and "AsString" in str(err)


_SHAPE_RULE_OPS = sorted(t for t in tfprims.registered_ops() if core.get_op(t).shape_rule)


def test_some_ops_have_shape_rules():
  assert {"Conv2D", "BiasAdd", "FusedBatchNormV3"} <= set(_SHAPE_RULE_OPS)


@pytest.mark.parametrize("op_type", _SHAPE_RULE_OPS)
def test_shape_rules_agree_with_the_impl(op_type):
  """An explicit shape rule is a shortcut: it must give exactly the avals that
  tracing the impl gives, on every call the op's property spec draws."""
  import functools
  from hypothesis import given, settings
  from tfprims.testing.calls import load_spec, make_call, prepare_call

  op = core.get_op(op_type)
  spec = load_spec(op)

  @settings(max_examples=30, deadline=None, derandomize=True, database=None)
  @given(spec.calls)
  def check(kwargs):
    call = prepare_call(make_call(op, kwargs, spec.oracle, spec))
    operands, params = call.operands, call.params
    avals = [jax.typeof(np.asarray(o)) for o in operands]
    want = jax.make_jaxpr(functools.partial(op.impl, **params))(*avals).out_avals
    got = op.shape_rule(*avals, **params)
    got = got if op.multiple_results else [got]
    assert [(tuple(g.shape), np.dtype(g.dtype)) for g in got] == [
      (tuple(w.shape), np.dtype(w.dtype)) for w in want
    ]

  check()


def test_per_op_factories_get_the_op_being_declared():
  from tfprims import rules

  got = []

  def factory(op, *args, **kwargs):
    got.append((op.op_type, args, kwargs))
    return rules.same_op_batching(op)

  op = tfprims.register_op(
    "PerOpProbe",
    jnp.negative,
    family="custom",
    jvp=(rules.per_op(lambda op: lambda t, x: op(t)),),
    batching=rules.per_op(factory, 1, k=2),
    spec=rules.per_op(lambda op: lambda st: op.op_type),
  )
  try:
    assert got == [("PerOpProbe", (1,), {"k": 2})]
    assert op.spec(None) == "PerOpProbe" and op.batching_source == "explicit"
    x = np.float32([1.0, -2.0])
    primal, tangent = jax.jvp(op, (x,), (x,))
    np.testing.assert_array_equal(tangent, -x)
    jaxpr = jax.make_jaxpr(jax.vmap(op))(np.stack([x, x]))
    assert [e.primitive for e in jaxpr.jaxpr.eqns] == [op.primitive]
  finally:
    tfprims.unregister_op("PerOpProbe")
