"""Builds the TF1 graphs of tests/test_tf1_state.py and TF's results on them.

Run as a script (``python tests/tf1_state_build.py OUT_DIR``) in its own process:
TF1 graph mode (``disable_v2_behavior``: reference variables, v1 control flow) is
process-global. Writes, for each case, the GraphDef and an ``.npz`` of inputs,
initial variable values and TF's results.
"""

import os
import sys

import numpy as np


def main(out):
  import tensorflow as tf

  tf.compat.v1.disable_v2_behavior()
  v1 = tf.compat.v1
  rng = np.random.default_rng(0)

  def save_graph(name, g):
    with open(os.path.join(out, name + ".pb"), "wb") as f:
      f.write(g.as_graph_def().SerializeToString())

  # --- a train step: linear regression with ref variables -------------------------------
  x0 = rng.standard_normal((8, 3)).astype(np.float32)
  y0 = rng.standard_normal((8, 2)).astype(np.float32)
  w0 = rng.standard_normal((3, 2)).astype(np.float32)
  for opt_name in ("sgd", "momentum"):
    g = tf.Graph()
    with g.as_default():
      x = v1.placeholder(tf.float32, [None, 3], name="x")
      y = v1.placeholder(tf.float32, [None, 2], name="y")
      w = v1.get_variable("w", initializer=w0, use_resource=False)
      b = v1.get_variable("b", initializer=np.zeros(2, np.float32), use_resource=False)
      loss = tf.reduce_mean(tf.square(tf.matmul(x, w) + b - y), name="loss")
      opt = (
        v1.train.GradientDescentOptimizer(0.1)
        if opt_name == "sgd"
        else v1.train.MomentumOptimizer(0.1, momentum=0.9)
      )
      step = v1.train.get_or_create_global_step()
      opt.minimize(loss, global_step=step, name="train")
      init = v1.variables_initializer(v1.global_variables(), name="init")
      with v1.Session(graph=g) as sess:
        sess.run(init)
        names = sorted(v.op.name for v in v1.global_variables())
        results = {}
        for i in range(3):
          xb, yb = x0 + i, y0 - i
          results[f"loss_{i}"] = sess.run(loss, {x: xb, y: yb})
          sess.run("train", {x: xb, y: yb})
          for n in names:
            results[f"var_{i}/{n}"] = sess.run(n + ":0")
    save_graph(f"train_{opt_name}", g)
    np.savez(
      os.path.join(out, f"train_{opt_name}.npz"), x=x0, y=y0, names=np.array(names), **results
    )

  # --- TF1 state ops ordered by control dependencies --------------------------------------
  g = tf.Graph()
  with g.as_default():
    x = v1.placeholder(tf.float32, [5], name="x")
    v = v1.get_variable("v", initializer=np.arange(5, dtype=np.float32), use_resource=False)
    m = v1.get_variable("m", initializer=np.ones((3, 4), np.float32), use_resource=False)
    c = v1.get_variable("c", initializer=np.int32(0), use_resource=False)
    a1 = v1.assign(v, x, name="a1")
    with tf.control_dependencies([a1]):
      a2 = v1.assign_add(v, tf.ones([5]), name="a2")
    with tf.control_dependencies([a2]):
      s1 = v1.scatter_update(v, [1, 3], [10.0, 20.0], name="s1")
    with tf.control_dependencies([s1]):
      # (not v1.scatter_nd_add: it passes its name as bad_indices_policy)
      s2 = tf.raw_ops.ScatterNdAdd(
        ref=v, indices=[[0], [4], [0]], updates=[100.0, 200.0, 1.0], name="s2"
      )
    with tf.control_dependencies([s2]):
      read = tf.identity(v * 2.0, name="read")  # reads v after every write
      s3 = v1.scatter_add(m, [0, 2, 0], x[:3, None] * tf.ones([3, 4]), name="s3")
    with tf.control_dependencies([s3]):
      s4 = v1.scatter_mul(m, [1], 3 * tf.ones([1, 4]), name="s4")
    with tf.control_dependencies([s4]):
      s5 = m[0:2, 1:3].assign(tf.reshape(x[:4], [2, 2]), name="s5")
    with tf.control_dependencies([s5]):
      s6 = v1.assign_sub(m, tf.fill([3, 4], 0.5), name="s6")
    cnt = v1.count_up_to(c, 2, name="cnt")
    with tf.control_dependencies([cnt]):
      after = tf.add(c, 100, name="after")
    with tf.control_dependencies([read, s6, after]):
      tf.identity(v, name="final_v")
    init = v1.variables_initializer([v, m, c], name="init")
    sess = v1.Session(graph=g)
    sess.run(init)
    fetches = ["a1:0", "a2:0", "read:0", "s6:0", "cnt:0", "after:0", "final_v:0"]
    xv = np.array([1.0, -2.0, 3.0, 0.5, 4.0], np.float32)
    results = {}
    for i in range(2):
      outs = sess.run(fetches, {x: xv + i})
      for f, o in zip(fetches, outs):
        results[f"run{i}/{f}"] = o
      for n in ("v", "m", "c"):
        results[f"run{i}/var/{n}"] = sess.run(n + ":0")
    sess.close()
  save_graph("state_ops", g)
  np.savez(os.path.join(out, "state_ops.npz"), x=xv, fetches=np.array(fetches), **results)

  # --- a frozen MobileNet-style classifier ----------------------------------------------
  g = tf.Graph()
  with g.as_default():
    x = v1.placeholder(tf.float32, [None, 16, 16, 3], name="images")

    def var(name, shape, scale=0.3):
      return v1.get_variable(
        name,
        initializer=(rng.standard_normal(shape) * scale).astype(np.float32),
        use_resource=False,
      )

    def bn(h, name, ch):
      gamma = var(name + "/gamma", [ch], 0.1) + 1.0
      beta = var(name + "/beta", [ch], 0.1)
      mean = var(name + "/mean", [ch], 0.1)
      variance = v1.get_variable(
        name + "/var", initializer=rng.uniform(0.5, 1.5, ch).astype(np.float32), use_resource=False
      )
      return v1.nn.fused_batch_norm(
        h, gamma, beta, mean, variance, epsilon=1e-3, is_training=False, name=name
      )[0]

    h = tf.nn.conv2d(x, var("conv1/w", [3, 3, 3, 8]), strides=2, padding="SAME")
    h = tf.nn.relu6(bn(h, "bn1", 8))
    h = tf.nn.depthwise_conv2d(h, var("dw/w", [3, 3, 8, 1]), [1, 1, 1, 1], "SAME")
    h = tf.nn.relu6(bn(h, "bn2", 8))
    h = tf.nn.conv2d(h, var("pw/w", [1, 1, 8, 16]), strides=1, padding="SAME")
    h = tf.nn.relu6(tf.nn.bias_add(h, var("pw/b", [16], 0.1)))
    h = tf.nn.avg_pool2d(h, 2, 2, "VALID")
    h = tf.reduce_mean(h, axis=[1, 2])
    logits = tf.matmul(h, var("fc/w", [16, 10])) + var("fc/b", [10], 0.1)
    probs = tf.nn.softmax(logits, name="probs")
    r = v1.placeholder(tf.float32, [None, 10], name="r")
    grad = tf.gradients(tf.reduce_sum(probs * r), x)[0]
    with v1.Session(graph=g) as sess:
      sess.run(v1.global_variables_initializer())
      frozen = v1.graph_util.convert_variables_to_constants(sess, g.as_graph_def(), ["probs"])
      images = rng.standard_normal((4, 16, 16, 3)).astype(np.float32)
      rv = rng.standard_normal((4, 10)).astype(np.float32)
      p, gx = sess.run([probs, grad], {x: images, r: rv})
  with open(os.path.join(out, "mobilenet.pb"), "wb") as f:
    f.write(frozen.SerializeToString())
  tf.io.write_graph(frozen, out, "mobilenet.pbtxt", as_text=True)
  np.savez(os.path.join(out, "mobilenet.npz"), images=images, r=rv, probs=p, grad=gx)


if __name__ == "__main__":
  main(sys.argv[1])
