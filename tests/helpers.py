"""Small helpers shared by the tests."""

import jax


def jaxpr_primitives(closed_jaxpr) -> set:
  """Names of all primitives in a jaxpr, including those of sub-jaxprs."""
  names = set()

  def visit(jaxpr):
    for eqn in jaxpr.eqns:
      names.add(eqn.primitive.name)
      for value in eqn.params.values():
        for item in value if isinstance(value, (list, tuple)) else [value]:
          if isinstance(item, jax.extend.core.ClosedJaxpr):
            visit(item.jaxpr)
          elif isinstance(item, jax.extend.core.Jaxpr):
            visit(item)

  visit(closed_jaxpr.jaxpr)
  return names


def non_tf_primitives(closed_jaxpr, allowed=()) -> set:
  return {n for n in jaxpr_primitives(closed_jaxpr) if not n.startswith("tf.") and n not in allowed}


def tape_vjp(fn, x, ct):
  """TF's gradient of ``fn`` at ``x`` for output cotangent ``ct`` (GradientTape)."""
  import tensorflow as tf

  xt = tf.constant(x)
  with tf.GradientTape() as tape:
    tape.watch(xt)
    y = fn(xt)
  return tape.gradient(y, xt, output_gradients=tf.constant(ct)).numpy()


def on_spec_draws(op, check, max_examples):
  """Calls ``check(call)`` on ``max_examples`` derandomized draws of ``op``'s property
  spec (prepared calls, x64 on); ``check`` returns False for a draw it could not use.
  Asserts that some draw was used."""
  import hypothesis
  import hypothesis.strategies as hst

  from tfprims.testing.calls import load_spec, make_call, prepare_call

  calls = load_spec(op).calls
  used = []

  @hypothesis.settings(
    max_examples=max_examples,
    derandomize=True,
    database=None,
    deadline=None,
    suppress_health_check=list(hypothesis.HealthCheck),
  )
  @hypothesis.given(data=hst.data())
  def run(data):
    call = prepare_call(make_call(op, data.draw(calls)))
    if check(call) is not False:
      used.append(call)

  with jax.enable_x64(True):
    run()
  assert used


_JITTED_OPS = {}


def jitted_op(op, params):
  """``jax.jit`` of ``op`` with ``params`` bound, one per (op, params): calls that differ
  only in their operands' values reuse its compiled programs."""
  key = (op.op_type, tuple(sorted(params.items())))
  if key not in _JITTED_OPS:
    _JITTED_OPS[key] = jax.jit(lambda *operands: op(*operands, **params))
  return _JITTED_OPS[key]
