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
  return {n for n in jaxpr_primitives(closed_jaxpr)
          if not n.startswith("tf.") and n not in allowed}


def tape_vjp(fn, x, ct):
  """TF's gradient of ``fn`` at ``x`` for output cotangent ``ct`` (GradientTape)."""
  import tensorflow as tf
  xt = tf.constant(x)
  with tf.GradientTape() as tape:
    tape.watch(xt)
    y = fn(xt)
  return tape.gradient(y, xt, output_gradients=tf.constant(ct)).numpy()
