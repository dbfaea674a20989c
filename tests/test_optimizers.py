"""Training ops in real programs: TF1-style optimizer train steps (resource
variables: ResourceApply*), Keras 3 optimizer steps, sparse (embedding) updates, an
optimizer step inside tf.cond; every ResourceApply*/ResourceSparseApply* op against
TF on variables; the out-of-range index policy of the sparse ops; Apply* on TF1
reference variables."""

import jax
import keras
import numpy as np
import pytest
import tensorflow as tf

import tfprims
from tfprims import opdefs
from tfprims.core import lookup
from helpers import jaxpr_primitives

V1 = tf.compat.v1.train
RNG = np.random.default_rng(0)
X = RNG.normal(size=(4, 3)).astype(np.float32)
Y = RNG.normal(size=(4, 2)).astype(np.float32)
BATCHES = [(X * (k + 1) * 0.5, Y - 0.1 * k) for k in range(3)]


def _compare_state(new, fn, rtol=2e-5, atol=1e-6):
  for name, var in fn.tf_variables.items():
    np.testing.assert_allclose(
      np.asarray(new[name]), var.numpy(), rtol=rtol, atol=atol, err_msg=name
    )


def _run_steps(step, args_list, rtol=2e-5, atol=1e-6):
  """Converts ``step`` (its variables created by tracing it), then runs the converted
  step and TF's in turn, feeding new_params back; outputs and every variable agree."""
  fn, params = tfprims.convert(step, *args_list[0])
  jitted = jax.jit(fn)
  p = params
  for args in args_list:
    out, p = jitted(p, *args)
    expected = step(*args)
    np.testing.assert_allclose(np.asarray(out), expected.numpy(), rtol=rtol, atol=atol)
    _compare_state(p, fn, rtol, atol)
  return fn, params


def _linear_model():
  w = tf.Variable(RNG.normal(size=(3, 2)).astype(np.float32), name="w")
  b = tf.Variable(np.zeros(2, np.float32), name="b")
  return w, b


def _slots_created(optimizer, minimize, *specs):
  """Traces a throwaway ``minimize`` so the optimizer creates its slots first: the
  variables a tf.function creates while tracing are not among those its concrete
  function lists (so a step traced afterwards captures them as variables)."""

  def trace(*args):
    minimize(*args)
    return tf.constant(0.0)

  tf.function(trace).get_concrete_function(*specs)


def _v1_step(optimizer):
  w, b = _linear_model()

  def step(x, y):
    loss = lambda: tf.reduce_mean((tf.matmul(x, w) + b - y) ** 2)
    value = loss()
    optimizer.minimize(loss, var_list=[w, b])
    return value

  _slots_created(optimizer, step, tf.TensorSpec([4, 3]), tf.TensorSpec([4, 2]))
  return tf.function(step)


V1_CASES = {
  "adam": (lambda: V1.AdamOptimizer(0.1), "ApplyAdam"),
  "momentum": (lambda: V1.MomentumOptimizer(0.1, 0.9), "ApplyMomentum"),
  "nesterov": (lambda: V1.MomentumOptimizer(0.1, 0.9, use_nesterov=True), "ApplyMomentum"),
  "rmsprop": (lambda: V1.RMSPropOptimizer(0.05, momentum=0.5), "ApplyRMSProp"),
  "centered_rmsprop": (
    lambda: V1.RMSPropOptimizer(0.05, momentum=0.5, centered=True),
    "ApplyCenteredRMSProp",
  ),
  "adagrad": (lambda: V1.AdagradOptimizer(0.1), "ApplyAdagrad"),
  "ftrl": (
    lambda: V1.FtrlOptimizer(0.1, l1_regularization_strength=0.01, l2_regularization_strength=0.1),
    "ApplyFtrl",
  ),
  "ftrl_v2": (
    lambda: V1.FtrlOptimizer(
      0.1, l1_regularization_strength=0.01, l2_shrinkage_regularization_strength=0.1
    ),
    "ApplyFtrlV2",
  ),
  "sgd": (lambda: V1.GradientDescentOptimizer(0.1), "ApplyGradientDescent"),
}


@pytest.mark.parametrize("case", sorted(V1_CASES))
def test_v1_optimizer_train_step_matches_tf_over_three_steps(case):
  make, primitive = V1_CASES[case]
  step = _v1_step(make())
  fn, params = _run_steps(step, BATCHES)
  # The slots (and Adam's beta powers) are params and come back updated.
  assert len(params) > 2 or case == "sgd"
  jaxpr = jax.make_jaxpr(fn)(params, *BATCHES[0])
  assert f"tf.{primitive}" in jaxpr_primitives(jaxpr)


def test_keras_optimizers_apply_gradients_match_tf():
  for make in (
    lambda: keras.optimizers.Adam(0.1),
    lambda: keras.optimizers.SGD(0.1, momentum=0.9, nesterov=True),
  ):
    w, b = _linear_model()
    opt = make()
    opt.build([w, b])

    @tf.function
    def step(x, y):
      with tf.GradientTape() as tape:
        loss = tf.reduce_mean((tf.matmul(x, w) + b - y) ** 2)
      opt.apply_gradients(zip(tape.gradient(loss, [w, b]), [w, b]))
      return loss

    fn, params = _run_steps(step, BATCHES, rtol=1e-5, atol=1e-6)
    assert len(params) > 2  # the optimizer's slots and iteration count
    # Keras 3 writes its updates with assign ops, not the training ops.
    cf = step.get_concrete_function(*BATCHES[0])
    gd = cf.graph.as_graph_def()
    ops = {n.op for n in gd.node} | {n.op for f in gd.library.function for n in f.node_def}
    assert "AssignVariableOp" in ops and not any("Apply" in op for op in ops)


def test_sparse_embedding_update_with_adagrad():
  emb = tf.Variable(RNG.normal(size=(6, 3)).astype(np.float32), name="emb")
  opt = V1.AdagradOptimizer(0.2)

  def step(y):
    ids = tf.constant([1, 4, 1, 0])  # a duplicate: summed before the update by TF
    loss = lambda: tf.reduce_sum((tf.gather(emb, ids) - y) ** 2)
    value = loss()
    opt.minimize(loss, var_list=[emb])
    return value

  _slots_created(opt, step, tf.TensorSpec([4, 3]))
  step = tf.function(step)

  ys = [(RNG.normal(size=(4, 3)).astype(np.float32),) for _ in range(3)]
  fn, params = _run_steps(step, ys)
  prims = jaxpr_primitives(jax.make_jaxpr(fn)(params, *ys[0]))
  assert "tf.SparseApplyAdagrad" in prims
  # Rows the ids never name are untouched.
  out, new = fn(params, *ys[0])
  np.testing.assert_array_equal(np.asarray(new["emb"])[[2, 3, 5]], params["emb"][[2, 3, 5]])


def test_optimizer_step_inside_cond_threads_the_state():
  w, b = _linear_model()
  opt = V1.AdamOptimizer(0.1)

  def loss_fn(x, y):
    return lambda: tf.reduce_mean((tf.matmul(x, w) + b - y) ** 2)

  _slots_created(
    opt,
    lambda x, y: opt.minimize(loss_fn(x, y), var_list=[w, b]),
    tf.TensorSpec([4, 3]),
    tf.TensorSpec([4, 2]),
  )

  @tf.function
  def step(x, y, train):
    def do():
      with tf.control_dependencies([opt.minimize(loss_fn(x, y), var_list=[w, b])]):
        return tf.identity(loss_fn(x, y)())

    return tf.cond(train, do, lambda: loss_fn(x, y)())

  args = [(x, y, np.bool_(k != 1)) for k, (x, y) in enumerate(BATCHES)]
  fn, params = _run_steps(step, args)
  assert "tf.ApplyAdam" in str(jax.make_jaxpr(fn)(params, *args[0]))
  # A false condition leaves every variable as it was.
  _, same = fn(params, *args[1])
  for k in params:
    np.testing.assert_array_equal(np.asarray(same[k]), np.asarray(params[k]), err_msg=k)


# --- every resource op against TF on variables ---------------------------------------------

RESOURCE_OPS = sorted(
  t
  for t in tfprims.supported_op_types()
  if t.startswith(("ResourceApply", "ResourceSparseApply")) and lookup(t).family == "training"
)


def _raw_call(op_type):
  """float32 inputs for ``tf.raw_ops.<op_type>`` valid for every optimizer: var and
  slots in [0.1, 0.9] (mg smaller, so centered RMSProp's ms - mg**2 stays positive),
  scalars 0.3 (lr_power -0.5, global_step 3), sparse indices with a duplicate."""
  rng = np.random.default_rng(len(op_type))
  names = opdefs.input_arg_names(op_type)
  sparse = "indices" in names
  kw = {}
  for arg in opdefs.op_def(op_type).input_arg:
    name = arg.name
    if arg.type == tf.resource:
      kw[name] = rng.uniform(0.1, 0.9, (4, 2)).astype(np.float32) * (0.1 if name == "mg" else 1.0)
    elif name == "indices":
      kw[name] = np.array([0, 2, 0], np.int32)
    elif name in ("grad", "delta"):
      kw[name] = rng.uniform(-1, 1, (3, 2) if sparse else (4, 2)).astype(np.float32)
    elif name == "global_step":
      kw[name] = np.int64(3)
    else:
      kw[name] = np.float32(-0.5 if name == "lr_power" else 0.3)
  return kw


@pytest.mark.parametrize("op_type", RESOURCE_OPS)
def test_resource_op_updates_variables_like_tf(op_type):
  kw = _raw_call(op_type)
  n_state = sum(1 for a in opdefs.op_def(op_type).input_arg if a.type == tf.resource)
  names = opdefs.input_arg_names(op_type)
  state, rest = names[:n_state], {k: v for k, v in kw.items() if k not in names[:n_state]}
  variables = {n: tf.Variable(kw[n], name=n) for n in state}
  feeds = {n: v for n, v in rest.items() if n in names}
  attrs = {n: v for n, v in rest.items() if n not in names}

  @tf.function
  def step(*args):
    getattr(tf.raw_ops, op_type)(
      **{n: variables[n].handle for n in state}, **dict(zip(feeds, args)), **attrs
    )
    return tf.constant(0.0)

  fn, params = tfprims.convert(step, *feeds.values())
  _, new = fn(params, *feeds.values())
  step(*feeds.values())
  assert lookup(op_type).writes_state
  _compare_state(new, fn, rtol=1e-5, atol=1e-6)


# --- sparse ops: out-of-range indices ------------------------------------------------------


def test_sparse_out_of_range_indices_raise_eagerly_and_are_skipped_under_jit():
  emb = tf.Variable(np.ones((3, 2), np.float32), name="emb")
  accum = tf.Variable(np.full((3, 2), 0.1, np.float32), name="accum")

  @tf.function
  def step(grad, indices):
    tf.raw_ops.ResourceSparseApplyAdagrad(
      var=emb.handle, accum=accum.handle, lr=0.5, grad=grad, indices=indices
    )
    return tf.constant(0.0)

  grad = np.ones((2, 2), np.float32)
  bad = np.array([1, 5], np.int32)
  with pytest.raises(tf.errors.InvalidArgumentError, match="out of range"):
    step(grad, bad)
  fn, params = tfprims.convert(step, grad, bad)
  with pytest.raises(tfprims.errors.RuntimeCheckError, match="out of range"):
    fn(params, grad, bad)
  _, new = jax.jit(fn)(params, grad, bad)
  # Row 1 updated as TF updates it for index 1 alone; the index 5 dropped.
  step(grad[:1], bad[:1])
  _compare_state(new, fn)
  tfprims.update_config("runtime_checks", True)
  try:  # read at conversion
    checked, _ = tfprims.convert(step, grad, bad)
    with pytest.raises(Exception, match="out of range"):
      jax.block_until_ready(jax.jit(checked)(params, grad, bad))
  finally:
    tfprims.update_config("runtime_checks", False)


# --- TF1 reference variables ----------------------------------------------------------------


def test_apply_on_a_ref_variable_returns_and_writes_the_updated_value():
  from tfprims import graph as graph_lib, interpreter

  g = tf.Graph()
  with g.as_default():
    w = tf.compat.v1.Variable(np.array([1.0, 2.0], np.float32), name="w", use_resource=False)
    m = tf.compat.v1.Variable(np.array([0.5, 0.5], np.float32), name="m", use_resource=False)
    grad = tf.compat.v1.placeholder(tf.float32, [2], name="grad")
    out = tf.raw_ops.ApplyMomentum(var=w, accum=m, lr=0.1, grad=grad, momentum=0.9, name="apply")
    init = tf.compat.v1.global_variables_initializer()
  gd = g.as_graph_def()
  graph = graph_lib.from_graph_def(gd, ["grad"], ["apply"])
  state = {"w": np.array([1.0, 2.0], np.float32), "m": np.array([0.5, 0.5], np.float32)}
  ctx = interpreter.Context(graph_lib.Library(gd.library.function), state)
  g_value = np.array([1.0, -1.0], np.float32)
  (result,) = interpreter.run(ctx, graph, {"grad": g_value})
  with tf.compat.v1.Session(graph=g) as sess:
    sess.run(init)
    expected = sess.run(out, {grad: g_value})
    expected_m = sess.run(m)
  np.testing.assert_allclose(result, expected, rtol=1e-6)
  np.testing.assert_allclose(ctx.state["w"], expected, rtol=1e-6)
  np.testing.assert_allclose(ctx.state["m"], expected_m, rtol=1e-6)


def test_vmap_of_a_train_step_over_param_sets_matches_each_step():
  step = _v1_step(V1_CASES["centered_rmsprop"][0]())
  fn, params = tfprims.convert(step, *BATCHES[0])
  sets = [{k: np.asarray(v) * (1 + 0.5 * i) for k, v in params.items()} for i in range(3)]
  stacked = {k: np.stack([s[k] for s in sets]) for k in params}
  x, y = BATCHES[1]
  outs, news = jax.vmap(fn, in_axes=(0, None, None))(stacked, x, y)
  jaxpr = jax.make_jaxpr(jax.vmap(fn, in_axes=(0, None, None)))(stacked, x, y)
  assert "tf.ApplyCenteredRMSProp" in jaxpr_primitives(jaxpr)
  for i, s in enumerate(sets):
    out, new = fn(s, x, y)
    np.testing.assert_allclose(outs[i], out, rtol=1e-5)
    for k in params:
      np.testing.assert_allclose(news[k][i], new[k], rtol=1e-5, atol=1e-6, err_msg=k)


def test_optimizer_steps_inside_a_while_loop_thread_the_state():
  w, b = _linear_model()
  opt = V1.MomentumOptimizer(0.05, 0.9)

  def loss_fn(x, y):
    return lambda: tf.reduce_mean((tf.matmul(x, w) + b - y) ** 2)

  _slots_created(
    opt,
    lambda x, y: opt.minimize(loss_fn(x, y), var_list=[w, b]),
    tf.TensorSpec([4, 3]),
    tf.TensorSpec([4, 2]),
  )

  @tf.function
  def steps(x, y, n):
    for _ in tf.range(n):
      opt.minimize(loss_fn(x, y), var_list=[w, b])
    return loss_fn(x, y)()

  fn, params = _run_steps(steps, [(x, y, np.int32(3)) for x, y in BATCHES[:2]])
  assert "tf.ApplyMomentum" in str(jax.make_jaxpr(fn)(params, *BATCHES[0], np.int32(3)))


# --- edge values as TF's kernels ------------------------------------------------------------


def _tf_on_variables(op_type, state, rest):
  """TF's ResourceApply*/ResourceSparseApply* on tf.Variables holding ``state`` (a
  dict in input order); the variables' values afterwards."""
  variables = {n: tf.Variable(v) for n, v in state.items()}
  getattr(tf.raw_ops, op_type)(**{n: v.handle for n, v in variables.items()}, **rest)
  return [v.numpy() for v in variables.values()]


def _ours(op_type, state, rest):
  names = opdefs.input_arg_names(op_type)
  kw = dict(state, **rest)
  return [
    np.asarray(o) for o in lookup(op_type.replace("Resource", "", 1))(*[kw[n] for n in names])
  ]


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("inner", [1, 5])
@pytest.mark.parametrize(
  "op_type",
  [
    "ResourceApplyProximalGradientDescent",
    "ResourceSparseApplyProximalGradientDescent",
    "ResourceApplyProximalAdagrad",
    "ResourceSparseApplyProximalAdagrad",
  ],
)
def test_proximal_step_zero_signs_like_tf(op_type, inner, dtype):
  """Eigen's sign (and TF's scalar sgn) of -0.0 is +0.0: a zero proximal point gives
  +0.0, one shrunk to zero by l1 keeps its sign (jnp.sign(-0.0) is -0.0)."""
  var = np.repeat(np.array([-0.0, 0.0, -1e-3, 1e-3], dtype)[:, None], inner, 1)
  grad = np.zeros((4, inner), dtype)  # var - lr * (+0.0) keeps var's zero sign
  scalars = dict(l1=dtype(0.1), l2=dtype(0.01))
  scalars["alpha" if "GradientDescent" in op_type else "lr"] = dtype(0.5)
  state = {"var": var}
  if "Adagrad" in op_type:
    state["accum"] = np.ones_like(var)
  rest = dict(
    scalars, **{"delta" if op_type == "ResourceApplyProximalGradientDescent" else "grad": grad}
  )
  if "Sparse" in op_type:
    rest["indices"] = np.arange(4, dtype=np.int32)
  expected = _tf_on_variables(op_type, state, rest)[0]
  got = _ours(op_type, state, rest)[0]
  np.testing.assert_array_equal(got, expected)
  np.testing.assert_array_equal(np.signbit(got), np.signbit(expected))
  np.testing.assert_array_equal(np.signbit(expected[:, 0]), [False, False, True, False])


def _rmsprop_call(rng, centered, inner, rows=2, k=3):
  h = np.float16
  state = {"var": rng.uniform(-2, 2, (rows, inner)).astype(h)}
  if centered:
    state["mg"] = rng.uniform(-0.2, 0.2, (rows, inner)).astype(h)
  state["ms"] = rng.uniform(0.1, 2, (rows, inner)).astype(h)
  state["mom"] = rng.uniform(-2, 2, (rows, inner)).astype(h)
  rest = dict(
    lr=h(rng.uniform(0.01, 1)),
    rho=h(rng.uniform(0.1, 0.99)),
    momentum=h(rng.uniform(0, 0.99)),
    epsilon=h(rng.uniform(1e-3, 0.1)),
    grad=rng.uniform(-2, 2, (k, inner)).astype(h),
    indices=rng.integers(0, rows, k).astype(np.int32),
  )
  return state, rest


def test_sparse_centered_rmsprop_float16_like_tf():
  """TF's sparse (Centered)RMSProp kernels write their own formula (ms * rho + grad**2
  * (1 - rho), denominator ms + epsilon - mg**2) and round every float16 operation;
  ms - mg**2 cancels, so the dense rule's float32 intermediates were 6 ulps off."""
  h = np.float16
  state = dict(var=np.zeros(1, h), mg=np.zeros(1, h), ms=np.array([0.125], h), mom=np.zeros(1, h))
  rest = dict(
    lr=h(1),
    rho=h(0.125),
    momentum=h(0),
    epsilon=h(0.00390625),
    grad=np.ones(2, h),
    indices=np.array([0, 0], np.int32),
  )
  op = "ResourceSparseApplyCenteredRMSProp"
  expected = _tf_on_variables(op, state, rest)
  assert expected[3][0] == h(6.8203125)
  for g, e in zip(_ours(op, state, rest), expected):
    np.testing.assert_array_equal(g, e)
  # Random calls: rows shorter than a packet of 8 halves, whole packets, and both.
  rng = np.random.default_rng(0)
  for centered in (True, False):
    op = "ResourceSparseApply" + ("Centered" if centered else "") + "RMSProp"
    exact = total = 0
    for inner in (1, 3, 8, 11):
      for _ in range(10):
        state, rest = _rmsprop_call(rng, centered, inner)
        expected = _tf_on_variables(op, state, rest)
        got = _ours(op, state, rest)
        exact += all(np.array_equal(g, e) for g, e in zip(got, expected))
        total += 1
        for g, e in zip(got, expected):  # at most one float16 ulp
          np.testing.assert_allclose(
            g.astype(np.float64), e.astype(np.float64), rtol=2**-10, atol=2**-14
          )
    assert exact >= 0.9 * total, (op, exact, total)
