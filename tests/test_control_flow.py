"""If/Case/While vs TF: outputs, jax.grad vs tf.GradientTape, vmap vs per-example, jit."""

import jax
import jax.numpy as jnp
import keras
import numpy as np
import pytest
import tensorflow as tf

import tfprims
from helpers import jaxpr_primitives

RTOL = ATOL = 1e-5
X = np.array([0.5, -1.0, 2.0], np.float32)
XS = np.arange(12, dtype=np.float32).reshape(4, 3) / 10


def _spec(a):
  a = np.asarray(a)
  return tf.TensorSpec(a.shape, tf.as_dtype(a.dtype))


def _convert(f, *args):
  # A fresh tf.function: TF rewrites a function's graph (adding outputs) once
  # tf.GradientTape has differentiated it.
  if hasattr(f, "python_function"):
    f = tf.function(f.python_function, autograph=False)
  return tfprims.convert_functional(f, *map(_spec, args))


def _leaf(out):
  return jax.tree_util.tree_leaves(out)[-1]


def _tf_grad(f, *args):
  """Gradient of sum(last output) w.r.t. the first argument, with tf.GradientTape."""
  ts = [tf.constant(a) for a in args]
  with tf.GradientTape() as tape:
    tape.watch(ts[0])
    y = tf.reduce_sum(tf.nest.flatten(f(*ts))[-1])
  return tape.gradient(y, ts[0]).numpy()


def _jax_loss(fn):
  return lambda a, *rest: jnp.sum(_leaf(fn(a, *rest)))


def _check_all(f, *args, grad=True, batch=None):
  """Values, jit, grad and vmap of the converted function against TF."""
  fn = _convert(f, *args)
  want = [np.asarray(t) for t in tf.nest.flatten(f(*args))]
  got = jax.tree_util.tree_leaves(fn(*args))
  assert len(got) == len(want)
  for g, w in zip(got, want):
    np.testing.assert_allclose(g, w, rtol=RTOL, atol=ATOL)
  for g, w in zip(jax.tree_util.tree_leaves(jax.jit(fn)(*args)), want):
    np.testing.assert_allclose(g, w, rtol=RTOL, atol=ATOL)
  if grad:
    g = jax.grad(_jax_loss(fn))(*args)
    np.testing.assert_allclose(g, _tf_grad(f, *args), rtol=1e-4, atol=1e-4)
    gj = jax.jit(jax.grad(_jax_loss(fn)))(*args)
    np.testing.assert_allclose(gj, g, rtol=1e-5, atol=1e-6)
  batch = batch if batch is not None else np.stack([args[0], args[0] * 0.5 - 0.2, -args[0]])
  rest = args[1:]
  vm = jax.vmap(lambda a: _leaf(fn(a, *rest)))(batch)
  for k in range(batch.shape[0]):
    np.testing.assert_allclose(
      vm[k], np.asarray(tf.nest.flatten(f(batch[k], *rest))[-1]), rtol=RTOL, atol=ATOL
    )
  return fn


# --- While ----------------------------------------------------------------------------------


@tf.function(autograph=False)
def counter_loop(x):
  return tf.while_loop(lambda i, x: i < 5, lambda i, x: (i + 1, tf.sin(x) * 1.5), [0, x])


@tf.function(autograph=False)
def max_iter_loop(x):
  return tf.while_loop(
    lambda x: tf.reduce_sum(x) > 0, lambda x: tf.sin(x) - 0.3, [x], maximum_iterations=5
  )


@tf.function(autograph=False)
def dynamic_loop(x):
  return tf.while_loop(lambda x: tf.reduce_sum(x) > -1, lambda x: x - 0.3, [x])


def test_while_with_counter_is_a_tf_while_with_tf_ops_inside():
  fn = _check_all(counter_loop, X)
  jaxpr = jax.make_jaxpr(fn)(X)
  prims = jaxpr_primitives(jaxpr)
  assert "tf.While" in prims and "scan" not in prims and "while" not in prims
  assert {"tf.Sin", "tf.Mul", "tf.AddV2"} <= prims
  eqn = next(e for e in jaxpr.jaxpr.eqns if e.primitive.name == "tf.While")
  assert eqn.params["length"] == 5
  # The counter's final value is known at trace time.
  assert isinstance(fn(X)[0], jax.Array) and int(fn(X)[0]) == 5


def test_while_with_maximum_iterations_keeps_the_early_exit():
  fn = _check_all(max_iter_loop, X)
  prims = jaxpr_primitives(jax.make_jaxpr(fn)(X))
  assert "tf.While" in prims and "cond" in prims and "while" not in prims
  # An early exit: the sum becomes negative before 5 iterations.
  x = np.array([0.2, 0.1, 0.1], np.float32)
  np.testing.assert_allclose(fn(x)[0], max_iter_loop(x)[0], rtol=RTOL, atol=ATOL)
  np.testing.assert_allclose(
    jax.grad(_jax_loss(fn))(x), _tf_grad(max_iter_loop, x), rtol=1e-4, atol=1e-4
  )


def test_dynamic_while_has_forward_and_reverse_mode():
  fn = _check_all(dynamic_loop, X)  # grad (eager and jit) against TF's
  assert "tf.While.unbounded" in jaxpr_primitives(jax.make_jaxpr(fn)(X))
  t = np.ones(3, np.float32)
  _, tangent = jax.jvp(lambda a: fn(a)[0], (X,), (t,))
  np.testing.assert_allclose(tangent, t)
  np.testing.assert_allclose(jax.jacfwd(lambda a: fn(a)[0])(X), np.eye(3), atol=1e-6)
  np.testing.assert_allclose(jax.jacrev(lambda a: fn(a)[0])(X), np.eye(3), atol=1e-6)


def _newton(w):
  @tf.function(autograph=False)
  def f(a):
    def body(x, it):
      return 0.5 * (x + a * w / x), it + 1

    x, it = tf.while_loop(
      lambda x, it: tf.reduce_max(tf.abs(x * x - a * w)) > 1e-5, body, (tf.ones_like(a), 0)
    )
    return it, tf.reduce_sum(x * tf.sin(a))

  return f


@pytest.mark.parametrize("checkpoints", [128, 2, 1])
def test_gradient_of_a_loop_run_to_convergence_is_tfs(checkpoints):
  # A Newton iteration stops when it converges: its trip count is known only at run
  # time. Reverse mode recomputes the states from checkpoints (loop_checkpoints: one
  # snapshot per ceil(n / B) steps): any budget gives TF's gradient.
  w = tf.Variable(np.float32([0.5, 1.5, 3.0]))
  f = _newton(w)
  a = np.float32([2.0, 3.0, 5.0])
  fn, params = tfprims.convert(f, tf.TensorSpec([3], tf.float32))
  loss = lambda p, a: fn(p, a)[0][1]
  at = tf.constant(a)
  with tf.GradientTape() as tape:
    tape.watch(at)
    trips, y = f(at)
  want_a, want_w = tape.gradient(y, [at, w])
  assert int(trips) > 2
  with tfprims.override_config("loop_checkpoints", checkpoints):
    g_params, g_a = jax.jit(jax.grad(loss, argnums=(0, 1)))(params, a)
  np.testing.assert_allclose(g_a, want_a.numpy(), rtol=1e-5, atol=1e-6)
  np.testing.assert_allclose(list(g_params.values())[0], want_w.numpy(), rtol=1e-5, atol=1e-6)
  # batched: the examples converge after different numbers of steps
  batch = np.stack([a, 4 * a, a / 3])
  with tfprims.override_config("loop_checkpoints", checkpoints):
    per_example = jax.jit(jax.grad(lambda b: jnp.sum(jax.vmap(lambda x: loss(params, x))(b))))(
      batch
    )
    vmapped = jax.jit(jax.vmap(jax.grad(loss, argnums=1), in_axes=(None, 0)))(params, batch)
  for k in range(3):
    xt = tf.constant(batch[k])
    with tf.GradientTape() as tape:
      tape.watch(xt)
      y = f(xt)[1]
    np.testing.assert_allclose(per_example[k], tape.gradient(y, xt).numpy(), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(vmapped[k], per_example[k], rtol=1e-5, atol=1e-6)


def test_reverse_mode_through_a_loop_with_print_ops_raises_typed_error():
  # A body with effects (tf.print) stays a plain lax.while_loop: forward mode only.
  @tf.function(autograph=False)
  def f(x):
    def body(v):
      with tf.control_dependencies([tf.print("step")]):
        return v - 0.3

    return tf.while_loop(lambda v: tf.reduce_sum(v) > -1, body, [x])

  fn = _convert(f, X)
  with pytest.raises(tfprims.ReverseModeLoopError, match="maximum_iterations") as e:
    jax.grad(_jax_loss(fn))(X)
  assert isinstance(e.value, tfprims.TFPrimsError)
  assert "While node" in str(e.value)


def _data_dependent_while(x):
  return tf.while_loop(lambda n: n < 10.0, lambda n: n + tf.reduce_max(x), [0.0])[0]


def _python_while_on_a_tensor(x):
  n = tf.constant(0.0)
  while n < 10.0:  # autograph: a tf.while_loop whose condition becomes data-dependent
    n += tf.reduce_max(x)
  return n


@pytest.mark.parametrize(
  "f",
  [
    tf.function(_data_dependent_while, autograph=False),
    tf.function(_python_while_on_a_tensor),
  ],
)
def test_loop_whose_condition_becomes_data_dependent_is_a_real_loop(f):
  # The condition is known at trace time on the first iteration only (n starts
  # at the constant 0): this used to raise ControlFlowError ("its condition became
  # data-dependent") even under jit.
  x = np.array([1.5, 3.0, -2.0], np.float32)
  fn = tfprims.convert_functional(f, _spec(x))
  want = f(x).numpy()
  np.testing.assert_allclose(fn(x), want)
  np.testing.assert_allclose(jax.jit(fn)(x), want)
  np.testing.assert_allclose(fn(2 * x), f(2 * x).numpy())
  assert "tf.While.unbounded" in jaxpr_primitives(jax.make_jaxpr(fn)(x))
  # Forward and reverse mode: d n / d x = trip count at the argmax.
  _, tangent = jax.jvp(fn, (x,), (np.array([0.0, 1.0, 0.0], np.float32),))
  np.testing.assert_allclose(tangent, np.ceil(10.0 / 3.0))
  np.testing.assert_allclose(jax.grad(fn)(x), _tf_grad(f, x))


def test_loop_counter_compared_with_a_tensor_shape():
  @tf.function(autograph=False)
  def f(x):
    n = tf.shape(x)[0]
    return tf.while_loop(
      lambda i, a: i < n, lambda i, a: (i + 1, a * x[0] + 1.0), [0, tf.zeros_like(x[0])]
    )[1]

  fn = _check_all(f, XS)
  assert "while" not in jaxpr_primitives(jax.make_jaxpr(fn)(XS))


@pytest.mark.parametrize(
  "start,limit,step,cmp",
  [
    (0, 7, 1, tf.less),
    (0, 7, 3, tf.less),
    (2, 7, 2, tf.less_equal),
    (10, 3, -2, tf.greater),
    (10, 4, -3, tf.greater_equal),
    (5, 5, 1, tf.less),
    (5, 5, 1, tf.less_equal),
    (-4, 9, 5, tf.less),
    (0, 100, 0, None),
  ],
)
def test_trip_count_of_counted_loops(start, limit, step, cmp):
  """The closed-form trip count (counters v + c compared with bounds) agrees with TF;
  `None` uses a non-affine update (i * 2 + 1), computed by iterating."""
  if cmp is None:

    def f(x):
      return tf.while_loop(
        lambda i, a: i < limit, lambda i, a: (i * 2 + 1, a * x + 1.0), [start, x]
      )
  else:

    def f(x):
      return tf.while_loop(
        lambda i, a: cmp(i, limit), lambda i, a: (i + step, a * x + 1.0), [start, x]
      )

  f = tf.function(f, autograph=False)
  x = np.float32(0.9)
  fn = _convert(f, x)
  i, a = fn(x)
  want_i, want_a = f(x)
  assert int(i) == int(want_i)
  np.testing.assert_allclose(a, want_a, rtol=RTOL)


@pytest.mark.parametrize(
  "body,init",
  [
    (lambda i, j, a, x: (i + j, j + 1, a * x + 1.0), (0, 1)),  # step changes: not affine
    (lambda i, j, a, x: (i + i, j, a * x + 1.0), (1, 0)),  # i + i doubles: not affine
    (lambda i, j, a, x: (j + i, j, a * x + 1.0), (-3, 2)),  # c + v with invariant c
    (lambda i, j, a, x: (i - j, j, a * x + 1.0), (15, 4)),
  ],
)
def test_trip_count_when_counters_depend_on_other_loop_variables(body, init):
  def f(x):
    return tf.while_loop(
      lambda i, j, a: tf.logical_and(i < 20, i > -10), lambda i, j, a: body(i, j, a, x), [*init, x]
    )

  f = tf.function(f, autograph=False)
  x = np.float32(0.9)
  fn = _convert(f, x)
  got, want = fn(x), f(x)
  assert [int(v) for v in got[:2]] == [int(v) for v in want[:2]]
  np.testing.assert_allclose(got[2], want[2], rtol=RTOL)


def test_counted_loop_trip_count_folds_nothing(monkeypatch):
  """The closed-form trip count reads the step constants: nothing is evaluated
  through XLA at trace time (the first such fold of a dtype compiles a program)."""
  fn = _convert(counter_loop, X)
  folded = []
  original = tfprims.core.TFOp.fold
  monkeypatch.setattr(
    tfprims.core.TFOp,
    "fold",
    lambda self, *a, **p: folded.append(self.op_type) or original(self, *a, **p),
  )
  jax.make_jaxpr(fn)(X)
  assert folded == []


def test_zero_trip_loop_returns_inputs():
  @tf.function(autograph=False)
  def f(x):
    return tf.while_loop(lambda i, a: i < 0, lambda i, a: (i + 1, a * 2.0), [0, x])[1]

  fn = _convert(f, X)
  np.testing.assert_allclose(fn(X), X)


def test_nested_loops_and_loop_inside_cond_inside_loop():
  @tf.function(autograph=False)
  def f(x):
    def outer_body(i, acc):
      def inner_body(j, a):
        return j + 1, a + tf.sin(a) * tf.cast(j, tf.float32)

      acc = tf.cond(
        tf.reduce_sum(acc) > 0,
        lambda: tf.while_loop(lambda j, a: j < 3, inner_body, [0, acc])[1],
        lambda: acc * 0.5,
      )
      return i + 1, acc

    return tf.while_loop(lambda i, a: i < 4, outer_body, [0, x])[1]

  fn = _check_all(f, X)
  jaxpr = jax.make_jaxpr(fn)(X)
  assert {"tf.While", "cond", "tf.Sin"} <= jaxpr_primitives(jaxpr)


def test_loops_in_nested_tf_functions_called_from_branches():
  @tf.function(autograph=False)
  def inner(x):
    return tf.while_loop(lambda i, a: i < 3, lambda i, a: (i + 1, tf.nn.silu(a) * 1.1), [0, x])[1]

  @tf.function(autograph=False)
  def outer(x):
    return tf.cond(tf.reduce_sum(x) > 0, lambda: inner(x), lambda: inner(-x) * 2.0)

  fn = _check_all(outer, X)
  jaxpr = jax.make_jaxpr(fn)(X)
  assert {"cond", "tf.While", "tf.CustomGradient", "tf.Sigmoid"} <= jaxpr_primitives(jaxpr)


def test_doubly_nested_counted_loops():
  @tf.function(autograph=False)
  def f(x):
    def outer(i, a):
      inner = tf.while_loop(lambda j, b: j < i, lambda j, b: (j + 1, b * 0.9 + tf.cos(b)), [0, a])[
        1
      ]
      return i + 1, inner

    return tf.while_loop(lambda i, a: i < 3, outer, [0, x])[1]

  # The inner trip count depends on the outer counter: the outer loop is unrolled
  # (its counter is then concrete), the inner loops become scans.
  _check_all(f, X)


# --- If / Case -------------------------------------------------------------------------------


@tf.function(autograph=False)
def cond_fn(x, p):
  return tf.cond(p > 0, lambda: tf.sin(x) * p, lambda: tf.cos(x) - p)


@pytest.mark.parametrize("p", [1.5, -0.5])
def test_cond_traced_predicate(p):
  p = np.float32(p)
  fn = _check_all(cond_fn, X, p)
  assert "cond" in jaxpr_primitives(jax.make_jaxpr(fn)(X, p))


def test_cond_batched_predicate_under_vmap():
  fn = _convert(cond_fn, X, np.float32(1))
  ps = np.array([1.0, -1.0, 2.0], np.float32)
  out = jax.vmap(fn, in_axes=(None, 0))(X, ps)
  for k, p in enumerate(ps):
    np.testing.assert_allclose(out[k], cond_fn(X, p), rtol=RTOL, atol=ATOL)
  g = jax.vmap(jax.grad(lambda x, p: jnp.sum(fn(x, p))), in_axes=(None, 0))(X, ps)
  for k, p in enumerate(ps):
    np.testing.assert_allclose(g[k], _tf_grad(cond_fn, X, p), rtol=1e-4, atol=1e-4)


def test_cond_with_concrete_predicate_runs_the_taken_branch_only():
  @tf.function(autograph=False)
  def f(x):
    return tf.cond(tf.shape(x)[0] > 2, lambda: tf.sin(x), lambda: tf.cos(x))

  fn = _convert(f, X)
  prims = jaxpr_primitives(jax.make_jaxpr(fn)(X))
  assert "cond" not in prims and "tf.Sin" in prims and "tf.Cos" not in prims
  np.testing.assert_allclose(fn(X), f(X), rtol=RTOL)


@tf.function(autograph=False)
def case_fn(x, i):
  return tf.switch_case(i, [lambda: tf.sin(x), lambda: tf.cos(x) * 2.0, lambda: x * x])


@pytest.mark.parametrize("i", [0, 1, 2, 7, -3])
def test_case_including_out_of_range_index(i):
  i = np.int32(i)
  fn = _convert(case_fn, X, i)
  np.testing.assert_allclose(fn(X, i), case_fn(X, i), rtol=RTOL, atol=ATOL)
  np.testing.assert_allclose(
    jax.grad(lambda x: jnp.sum(fn(x, i)))(X), _tf_grad(case_fn, X, i), rtol=1e-5, atol=1e-5
  )
  assert "cond" in jaxpr_primitives(jax.make_jaxpr(fn)(X, i))


def test_case_vmap_over_index():
  fn = _convert(case_fn, X, np.int32(0))
  idx = np.array([0, 1, 2, 5], np.int32)
  out = jax.vmap(fn, in_axes=(None, 0))(X, idx)
  for k, i in enumerate(idx):
    np.testing.assert_allclose(out[k], case_fn(X, i), rtol=RTOL, atol=ATOL)


# --- variables, rng, errors ---------------------------------------------------------------------


def test_variable_assignments_in_loops_and_branches_come_back_in_new_params():
  acc = tf.Variable(np.zeros(3, np.float32), name="acc")
  cnt = tf.Variable(0.0, name="cnt")

  @tf.function
  def f(x):
    for i in tf.range(3):
      acc.assign_add(x * tf.cast(i, tf.float32))
    if tf.reduce_sum(x) > 0:
      cnt.assign_add(1.0)
    else:
      cnt.assign_sub(1.0)
    return acc.read_value() * 2.0

  fn, params = tfprims.convert(f, tf.TensorSpec((3,)))
  for x in (X, -X):
    out, new = jax.jit(fn)(params, x)
    want = f(x).numpy()
    np.testing.assert_allclose(out, want, rtol=RTOL)
    np.testing.assert_allclose(new["acc"], acc.numpy(), rtol=RTOL)
    np.testing.assert_allclose(new["cnt"], cnt.numpy(), rtol=RTOL)
    params = new


@pytest.mark.parametrize("x0", [1.0, -1.0])
def test_generator_state_written_inside_cond_comes_back_in_new_params(x0):
  # RngReadAndSkip writes the generator's state: inside a branch the write used to
  # be dropped (the op matched no list of state-writing op names).
  g = tf.random.Generator.from_seed(1)
  f = tf.function(lambda x: tf.cond(x[0] > 0, lambda: x + g.normal([3]), lambda: x))
  fn, params = tfprims.convert(f, tf.TensorSpec([3], tf.float32))
  (key,) = [k for k, v in fn.tf_variables.items() if v is g.state]
  x = np.full(3, x0, np.float32)
  for call in (fn, jax.jit(fn)):
    _, new = call(params, x)
    assert (np.asarray(new[key]) != np.asarray(params[key])).any() == (x0 > 0)
  f(x)  # TF advances its generator only when the branch runs
  np.testing.assert_array_equal(new[key], g.state.numpy())


def test_state_written_in_a_while_body_inside_a_nested_function():
  g = tf.random.Generator.from_seed(3)

  @tf.function
  def draw(a):
    return a + g.uniform([2])

  @tf.function
  def f(x):
    for _ in tf.range(tf.cast(x[0], tf.int32)):
      x = draw(x)
    return x

  fn, params = tfprims.convert(f, tf.TensorSpec([2], tf.float32))
  (key,) = [k for k, v in fn.tf_variables.items() if v is g.state]
  x = np.array([3.0, 0.0], np.float32)
  _, new = jax.jit(fn)(params, x)
  f(x)
  np.testing.assert_array_equal(new[key], g.state.numpy())


def test_random_ops_inside_loops_use_the_rng_key():
  @tf.function(autograph=False)
  def f(x):
    return tf.while_loop(
      lambda i, a: i < 3, lambda i, a: (i + 1, a + tf.random.uniform(tf.shape(a))), [0, x]
    )[1]

  fn = _convert(f, X)
  key = jax.random.key(0)
  a, b = fn(X, rng=key), fn(X, rng=key)
  np.testing.assert_array_equal(a, b)
  assert not np.array_equal(a, fn(X, rng=jax.random.key(1)))
  assert np.all((a - X >= 0) & (a - X <= 3))
  with pytest.raises(tfprims.MissingRngError):
    fn(X)


def test_unsupported_op_inside_a_loop_body_is_reported_at_conversion():
  @tf.function(autograph=False)
  def f(x):
    return tf.while_loop(
      lambda i, a: i < 3,
      lambda i, a: (i + 1, tf.strings.to_number(tf.strings.as_string(a))),
      [0, x],
    )[1]

  with pytest.raises(tfprims.UnsupportedOpError) as e:
    _convert(f, X)
  assert "AsString" in e.value.ops
  assert any("while_body" in n for n in e.value.ops["AsString"])


def test_loop_carrying_a_changing_shape_is_a_clear_error():
  @tf.function(autograph=False)
  def f(x):
    return tf.while_loop(
      lambda a: tf.reduce_sum(a) < 100.0,
      lambda a: tf.concat([a, a], 0),
      [x],
      shape_invariants=[tf.TensorShape([None])],
    )

  fn = _convert(f, X)
  with pytest.raises(tfprims.TFPrimsError, match="changes a loop variable"):
    fn(X)


def test_graph_rewritten_by_tf_gradients_converts():
  """After tf.GradientTape differentiates a function, TF rewrites its loops (list
  accumulators pushed to in the body) and conds (intermediates as optionals)."""

  @tf.function(autograph=False)
  def f(x):
    def body(i, acc):
      acc = tf.cond(tf.reduce_sum(acc) > 0, lambda: tf.sin(acc) * acc, lambda: acc * 0.5)
      return i + 1, acc

    return tf.while_loop(lambda i, a: i < 4, body, [0, x])[1]

  xt = tf.constant(X)
  with tf.GradientTape() as tape:
    tape.watch(xt)
    y = tf.reduce_sum(f(xt))
  want_grad = tape.gradient(y, xt).numpy()
  cf = f.get_concrete_function(tf.TensorSpec((3,)))
  ops = {n.op for fn in cf.graph.as_graph_def().library.function for n in fn.node_def}
  assert "TensorListPushBack" in ops  # the rewrite happened
  fn = tfprims.convert_graph_def(cf.graph.as_graph_def(), [cf.inputs[0].name], [cf.outputs[0].name])
  np.testing.assert_allclose(fn(X)[0], f(X), rtol=RTOL, atol=ATOL)
  np.testing.assert_allclose(
    jax.grad(lambda a: jnp.sum(fn(a)[0]))(X), want_grad, rtol=1e-4, atol=1e-5
  )
  assert "while" not in jaxpr_primitives(jax.make_jaxpr(lambda a: fn(a)[0])(X))


# --- tf.scan / map_fn / foldl, and a Keras model ------------------------------------------


@tf.function(autograph=False)
def scan_fn(x):
  return tf.scan(lambda a, b: a * b + tf.sin(a), x)


@tf.function(autograph=False)
def map_fn_fn(x):
  return tf.map_fn(lambda r: tf.reduce_sum(r * r) + tf.sin(r[0]), x)


@tf.function(autograph=False)
def foldl_fn(x):
  return tf.foldl(lambda a, r: a * 0.5 + tf.tanh(r), x)


@tf.function(autograph=False)
def foldr_fn(x):
  return tf.foldr(lambda a, r: a * 0.5 + tf.tanh(r), x, initializer=tf.ones(3))


@pytest.mark.parametrize(
  "f", [scan_fn, map_fn_fn, foldl_fn, foldr_fn], ids=["scan", "map_fn", "foldl", "foldr"]
)
def test_functional_ops(f):
  fn = _check_all(f, XS, batch=np.stack([XS, XS * 0.5, -XS]))
  prims = jaxpr_primitives(jax.make_jaxpr(fn)(XS))
  assert "tf.While" in prims and "while" not in prims


class LoopModel(keras.Model):
  """A Keras model with tf.while_loop, tf.cond and a dynamic-size TensorArray in call."""

  def __init__(self):
    super().__init__()
    self.dense = keras.layers.Dense(3, activation="tanh")

  def call(self, x):
    ta = tf.TensorArray(tf.float32, size=0, dynamic_size=True)

    def body(i, h, ta):
      h = self.dense(h + x[:, i % 3][:, None] * 0.1)
      h = tf.cond(tf.reduce_mean(h) > 0, lambda: h * 0.9, lambda: h + 0.1)
      return i + 1, h, ta.write(i, h)

    _, h, ta = tf.while_loop(lambda i, h, ta: i < 4, body, [0, x, ta])
    return h + tf.reduce_sum(ta.stack(), axis=0)


def test_keras_model_with_while_cond_and_dynamic_tensor_array():
  keras.utils.set_random_seed(0)
  model = LoopModel()
  x = np.random.default_rng(0).normal(size=(2, 3)).astype(np.float32)
  model(x)
  f = tf.function(lambda x: model(x))
  fn, params = tfprims.convert(f, tf.TensorSpec((None, 3)))
  np.testing.assert_allclose(fn(params, x)[0], f(x), rtol=RTOL, atol=ATOL)
  np.testing.assert_allclose(jax.jit(fn)(params, x)[0], f(x), rtol=RTOL, atol=ATOL)
  # grad w.r.t. the kernel vs TF
  kernel = next(k for k in params if "kernel" in k)
  g = jax.grad(lambda p: jnp.sum(fn(p, x)[0]))(params)[kernel]
  with tf.GradientTape() as tape:
    y = tf.reduce_sum(f(x))
  want = tape.gradient(y, fn.tf_variables[kernel]).numpy()
  np.testing.assert_allclose(g, want, rtol=1e-4, atol=1e-5)
  # per-example vmap
  vm = jax.vmap(lambda r: fn(params, r[None])[0][0])(x)
  np.testing.assert_allclose(vm, f(x), rtol=RTOL, atol=ATOL)


def test_optionals_are_values_with_a_flag_through_branches():
  @tf.function
  def f(x):
    some = tf.experimental.Optional.from_value(x * 2.0)
    none = tf.experimental.Optional.empty(tf.TensorSpec([3], tf.float32))
    picked = tf.cond(x[0] > 0, lambda: some, lambda: none)
    return tf.cond(picked.has_value(), picked.get_value, lambda: -x)

  fn = tfprims.convert_functional(f, tf.TensorSpec([3], tf.float32))
  for x in (X, -X):
    np.testing.assert_allclose(fn(x), f(x))
    np.testing.assert_allclose(jax.jit(fn)(x), f(x))
  # An Optional returned from the function has no array form: refused at conversion.
  with pytest.raises(tfprims.UnsupportedInputError, match="_OptionalImpl"):
    tfprims.convert_functional(
      tf.function(tf.experimental.Optional.from_value), tf.TensorSpec([3], tf.float32)
    )
