"""tf.print (StringFormat + PrintV2) in converted functions: eager, jit and vmap."""

import re
import sys

import jax
import numpy as np
import tensorflow as tf

import tfprims


def _tf_style(text):
  """numpy prints integral floats as ``1.``; TF as ``1``."""
  return re.sub(r"(\d)\.(?=[\s\]])", r"\1", text)


@tf.function(autograph=False)
def _f(x):
  tf.print("x is", x, "and sum", tf.reduce_sum(x), summarize=2)
  tf.print("plain {} text", output_stream=sys.stdout)
  return x * 2


def test_tf_print_prints_the_same_template_and_values(capfd):
  x = np.arange(5, dtype=np.float32)
  _f(x)
  tf_out = capfd.readouterr()
  fn = tfprims.convert_functional(_f, tf.TensorSpec([5], tf.float32))
  np.testing.assert_array_equal(fn(x), 2 * x)
  ours = capfd.readouterr()
  assert ours.err == "x is [0. 1. ... 3. 4.] and sum 10.\n"
  assert _tf_style(ours.err) == tf_out.err
  assert ours.out == tf_out.out == "plain {} text\n"


def test_tf_print_under_jit_prints_at_each_run_and_under_vmap_per_example(capfd):
  fn = tfprims.convert_functional(_f, tf.TensorSpec([5], tf.float32))
  x = np.arange(5, dtype=np.float32)
  jitted = jax.jit(fn)
  capfd.readouterr()
  for _ in range(2):
    jitted(x).block_until_ready()
  jax.effects_barrier()
  out = capfd.readouterr()
  assert out.err.count("and sum 10.") == 2 and out.out.count("plain {} text") == 2
  jax.vmap(fn)(np.stack([x, -x])).block_until_ready()
  jax.effects_barrier()
  err = capfd.readouterr().err
  assert "and sum 10." in err and "and sum -10." in err
