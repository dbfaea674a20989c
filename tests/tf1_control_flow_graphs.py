"""Builds the TF1 control-flow graphs of tests/test_tf1_control_flow.py.

Run as a script in a subprocess (``python tf1_control_flow_graphs.py OUTDIR``):
disabling eager execution and control flow v2 is process-wide and irreversible.
Each case writes ``<case>.pb`` (the GraphDef) and ``<case>.npz`` (feeds, TF's
outputs and tf.gradients of the first output's sum w.r.t. the float inputs, run
in a v1 Session), and ``cases.json`` lists inputs, outputs and gradient inputs.
"""

import json
import os
import sys

import numpy as np
import tensorflow as tf

tf.compat.v1.disable_eager_execution()
tf.compat.v1.disable_control_flow_v2()
v1 = tf.compat.v1


def cond_case():
  x = v1.placeholder(tf.float32, [3], name="x")
  p = v1.placeholder(tf.bool, [], name="p")
  y = v1.cond(p, lambda: tf.sin(x) * 2.0, lambda: x * x + 1.0, name="c")
  trigger = tf.raw_ops.ControlTrigger(name="trigger")
  with tf.control_dependencies([trigger]):
    y = tf.identity(y, name="y")
  return [x, p], [y], [x], [{"x": [0.5, -1.0, 2.0], "p": True}, {"x": [0.5, -1.0, 2.0], "p": False}]


def nested_cond_case():
  x = v1.placeholder(tf.float32, [2], name="x")
  p = v1.placeholder(tf.bool, [], name="p")
  q = v1.placeholder(tf.bool, [], name="q")

  def inner():
    return v1.cond(q, lambda: x * 3.0, lambda: tf.exp(x), name="inner")

  y = v1.cond(p, inner, lambda: x - 1.0, name="outer")
  # two outputs of one cond, one of them constant in a branch
  a, b = v1.cond(
    tf.reduce_sum(x) > 0,
    lambda: (x + 1.0, tf.constant(1.0)),
    lambda: (x * 0.5, tf.constant(2.0)),
    name="pair",
  )
  z = y + a * b
  feeds = [{"x": [0.3, 0.7], "p": pp, "q": qq} for pp in (True, False) for qq in (True, False)]
  feeds.append({"x": [-0.3, -0.7], "p": True, "q": False})
  return [x, p, q], [z], [x], feeds


def cond_in_while_case():
  x = v1.placeholder(tf.float32, [3], name="x")

  def body(i, a):
    a = v1.cond(tf.reduce_sum(a) > 1.0, lambda: a * 0.5, lambda: a + tf.cos(a), name="step")
    return i + 1, a

  _, y = v1.while_loop(lambda i, a: i < 6, body, [tf.constant(0), x], name="loop")
  return [x], [y], [x], [{"x": [0.1, 0.2, 0.3]}, {"x": [2.0, -1.0, 0.5]}]


def data_dependent_while_case():
  x = v1.placeholder(tf.float32, [3], name="x")
  n, y = v1.while_loop(
    lambda n, a: tf.reduce_sum(a) < 100.0,
    lambda n, a: (n + 1, a * 1.5 + 1.0),
    [tf.constant(0), x],
    name="dd",
  )
  return [x], [y, n], [], [{"x": [0.1, 0.2, 0.3]}, {"x": [40.0, 30.0, 20.0]}]


def nested_while_case():
  x = v1.placeholder(tf.float32, [2], name="x")

  def outer_body(i, a):
    def inner_body(j, b):
      return j + 1, b * 0.9 + tf.cast(j, tf.float32) * 0.1

    _, a = v1.while_loop(lambda j, b: j < 3, inner_body, [tf.constant(0), a], name="inner")
    return i + 1, tf.tanh(a) + a

  _, y = v1.while_loop(lambda i, a: i < 4, outer_body, [tf.constant(0), x], name="outer")
  return [x], [y], [x], [{"x": [0.5, -0.25]}]


def tensor_array_case():
  x = v1.placeholder(tf.float32, [5, 3], name="x")
  inp = tf.TensorArray(tf.float32, size=5).unstack(x)
  out = tf.TensorArray(tf.float32, size=5)

  def body(t, acc, ta):
    acc = acc * 0.5 + inp.read(t)
    return t + 1, acc, ta.write(t, tf.sin(acc))

  _, acc, ta = v1.while_loop(
    lambda t, *_: t < 5, body, [tf.constant(0), tf.zeros([3]), out], name="ta_loop"
  )
  return [x], [ta.stack(), acc], [x], [{"x": np.linspace(-1, 1, 15).reshape(5, 3)}]


class _Cell:
  """A minimal RNN cell for tf.compat.v1.nn.dynamic_rnn (Keras 3 has no v1 cells):
  ``basic`` is BasicRNNCell's tanh(W[x, h] + b), ``lstm`` an LSTM with (c, h) state."""

  def __init__(self, units, kind):
    self.units, self.kind = units, kind

  @property
  def state_size(self):
    return (self.units, self.units) if self.kind == "lstm" else self.units

  @property
  def output_size(self):
    return self.units

  def zero_state(self, batch_size, dtype):
    z = tf.zeros([batch_size, self.units], dtype)
    return (z, z) if self.kind == "lstm" else z

  def __call__(self, x, state, scope=None):
    init = v1.random_uniform_initializer(-0.5, 0.5, seed=1)
    with v1.variable_scope(scope or "cell", reuse=v1.AUTO_REUSE):
      if self.kind == "lstm":
        c, h = state
        w = v1.get_variable("w", [x.shape[-1] + self.units, 4 * self.units], initializer=init)
        b = v1.get_variable("b", [4 * self.units], initializer=init)
        i, j, f, o = tf.split(tf.matmul(tf.concat([x, h], 1), w) + b, 4, axis=1)
        c = tf.sigmoid(f + 1.0) * c + tf.sigmoid(i) * tf.tanh(j)
        h = tf.sigmoid(o) * tf.tanh(c)
        return h, (c, h)
      w = v1.get_variable("w", [x.shape[-1] + self.units, self.units], initializer=init)
      b = v1.get_variable("b", [self.units], initializer=init)
      h = tf.tanh(tf.matmul(tf.concat([x, state], 1), w) + b)
      return h, h


def while_in_cond_case():
  x = v1.placeholder(tf.float32, [3], name="x")
  p = v1.placeholder(tf.bool, [], name="p")

  def looped():
    return v1.while_loop(
      lambda i, a: i < 4,
      lambda i, a: (i + 1, tf.sin(a) + a),
      [tf.constant(0), x],
      name="inner_loop",
    )[1]

  y = v1.cond(p, looped, lambda: x * 2.0, name="c")
  # tf.compat.v1.case: a chain of nested conds on data-dependent predicates
  s = tf.reduce_sum(x)
  z = v1.case(
    [(s > 1.0, lambda: y * 3.0), (s < -1.0, lambda: y - 1.0)],
    default=lambda: tf.exp(y),
    name="case",
  )
  feeds = [
    {"x": v, "p": pp}
    for v in ([0.5, 0.25, 0.75], [-1.0, -0.5, 0.0], [0.1, 0.2, -0.1])
    for pp in (True, False)
  ]
  return [x, p], [z], [x], feeds


def unsupported_case():
  """Ops tfprims does not convert, inside a loop body and outside it."""
  x = v1.placeholder(tf.float32, [3], name="x")
  stack = tf.raw_ops.StackV2(max_size=10, elem_type=tf.float32, name="stack")

  def body(i, a):
    a = tf.raw_ops.StackPushV2(handle=stack, elem=a, name="push")
    return i + 1, a * 2.0

  _, y = v1.while_loop(lambda i, a: i < 3, body, [tf.constant(0), x], name="loop")
  ta = tf.TensorArray(tf.float32, size=2).write(0, y).write(1, y)
  return [x], [ta.concat(name="concat") + 0.0], [], []


def dynamic_rnn_case(kind):
  def build():
    x = v1.placeholder(tf.float32, [2, 4, 3], name="x")
    outputs, state = v1.nn.dynamic_rnn(_Cell(5, kind), x, dtype=tf.float32, scope="rnn")
    last = state[1] if kind == "lstm" else state
    return [x], [outputs, last], [x], [{"x": np.linspace(-1, 1, 24).reshape(2, 4, 3)}]

  return build


CASES = {
  "cond": cond_case,
  "nested_cond": nested_cond_case,
  "cond_in_while": cond_in_while_case,
  "data_dependent_while": data_dependent_while_case,
  "nested_while": nested_while_case,
  "tensor_array": tensor_array_case,
  "while_in_cond": while_in_cond_case,
  "unsupported": unsupported_case,
  "dynamic_rnn_basic": dynamic_rnn_case("basic"),
  "dynamic_rnn_lstm": dynamic_rnn_case("lstm"),
}


def main(outdir):
  meta = {}
  for name, build in CASES.items():
    g = tf.Graph()
    with g.as_default():
      inputs, outputs, wrt, feeds = build()
      grads = tf.gradients(tf.reduce_sum(outputs[0]), wrt) if wrt else []
      with v1.Session() as sess:
        sess.run(v1.global_variables_initializer())
        # Variables (RNN weights) are frozen into constants: the graph converts as is.
        gd = v1.graph_util.convert_variables_to_constants(
          sess, g.as_graph_def(), [t.op.name for t in outputs]
        )
        arrays = {}
        for k, feed in enumerate(feeds):
          fd = {t: np.asarray(feed[t.op.name], t.dtype.as_numpy_dtype) for t in inputs}
          outs = sess.run(list(outputs) + list(grads), fd)
          for t in inputs:
            arrays[f"{k}/in/{t.op.name}"] = fd[t]
          for j, o in enumerate(outs):
            arrays[f"{k}/out/{j}"] = np.asarray(o)
    with open(os.path.join(outdir, f"{name}.pb"), "wb") as f:
      f.write(gd.SerializeToString())
    np.savez(os.path.join(outdir, f"{name}.npz"), **arrays)
    meta[name] = {
      "inputs": [t.name for t in inputs],
      "outputs": [t.name for t in outputs],
      "wrt": [t.op.name for t in wrt],
      "n_feeds": len(feeds),
    }
  with open(os.path.join(outdir, "cases.json"), "w") as f:
    json.dump(meta, f)


if __name__ == "__main__":
  main(sys.argv[1])
