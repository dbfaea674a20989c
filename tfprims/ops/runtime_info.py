"""Ops that report on the running program rather than compute on data: ``Timestamp`` and
``IsTensorFloat32Enabled``; and, declared with the reason, the ops of TF's "other" group
tfprims cannot convert (``GetDeadline``, the ``CompositeTensorVariant*`` pair).

Both converted ops take no inputs, which would let the interpreter fold them at trace time;
their hook binds the primitive instead, so they are evaluated when the converted function
runs (each eager call, each run of a jitted program).

* ``Timestamp``: the host's time in seconds since the epoch (``time.time()``), read by a
  ``jax.pure_callback`` each time the compiled program runs (under ``jit`` too: at run
  time, not at trace time). TF's output is float64; with x64 off it is float32, whose
  resolution at today's timestamps is about two minutes. The callback is pure to XLA,
  so two Timestamp nodes of one jitted program may be merged, and an unused one dropped.
* ``IsTensorFloat32Enabled``: whether tfprims' own float32 matmuls and convolutions may
  run in TensorFloat-32: never on CPU (False, whatever TF's global setting says), and on
  GPU unless ``jax_default_matmul_precision`` asks for full float32 precision. TF's op
  reports TF's global switch instead (on by default, even on CPU-only hosts).
"""

from __future__ import annotations

import time

import jax
import jax.numpy as jnp
import numpy as np

from tfprims import dtypes as tf_dtypes
from tfprims import core
from tfprims.core import declare_unsupported, register_op
from tfprims.errors import import_tensorflow

FAMILY = "runtime info"


def _at_run_time(ctx, node, inputs):
  """Binds the op's primitive (never folded: its value is the running program's)."""
  return [core.get_op(node.op).primitive.bind()]


def _now():
  dtype = tf_dtypes.canonical_dtype(np.dtype(np.float64))
  return np.asarray(time.time(), dtype)


def _timestamp():
  """The host time in seconds since the epoch, read when the program runs."""
  dtype = tf_dtypes.canonical_dtype(np.dtype(np.float64))
  return jax.pure_callback(_now, jax.ShapeDtypeStruct((), dtype))


def _timestamp_oracle():
  from tensorflow.python.ops import gen_logging_ops

  return gen_logging_ops.timestamp()


Timestamp = register_op(
  "Timestamp",
  _timestamp,
  family=FAMILY,
  interpret=_at_run_time,
  spec=lambda st: st.Spec(
    st.call(),
    oracle=_timestamp_oracle,
    skip={
      "values": "the time of each call differs; tests/test_other_ops.py checks it lies "
      "between two host clock readings and that jit reads it at run time",
      "jit": "eager and jitted calls read the clock at different moments (the jitted "
      "reading is checked in tests/test_other_ops.py)",
    },
    note="a host callback: the time when the program runs",
  ),
)


_FULL_PRECISION = ("highest", "float32")


def _tf32_enabled():
  """Whether float32 dot products may use TensorFloat-32 here: False on CPU; on GPU
  unless jax_default_matmul_precision asks for full float32."""
  precision = jax.config.jax_default_matmul_precision
  gpu = jax.default_backend() == "gpu"
  return jnp.asarray(gpu and str(precision).lower() not in _FULL_PRECISION)


def _tf32_oracle():
  tf = import_tensorflow()

  @tf.function(autograph=False)
  def f():
    graph = tf.compat.v1.get_default_graph()
    return graph.create_op("IsTensorFloat32Enabled", [], [tf.bool]).outputs[0]

  return f()


IsTensorFloat32Enabled = register_op(
  "IsTensorFloat32Enabled",
  _tf32_enabled,
  family=FAMILY,
  interpret=_at_run_time,
  spec=lambda st: st.Spec(
    st.call(),
    oracle=_tf32_oracle,
    skip={
      "values": "TF reports its global TF32 switch (on by default, even on CPU hosts); "
      "tfprims reports whether its own float32 dot products may use TF32 "
      "(never on CPU), checked in tests/test_other_ops.py"
    },
    note="False on CPU; on GPU, per jax_default_matmul_precision",
  ),
)


declare_unsupported(
  "GetDeadline",
  hint="GetDeadline reads the deadline of the TF session run or function call it runs "
  "in (TF raises 'Deadline has not been set' outside one); a converted function has "
  "no such deadline. Remove the deadline check from the function, or pass the "
  "deadline in as an input",
)
declare_unsupported(
  "CompositeTensorVariantFromComponents",
  "CompositeTensorVariantToComponents",
  hint="these pack a composite tensor (an ExtensionType, a RaggedTensor...) into a "
  "scalar DT_VARIANT and back, so it can cross tf.data or a TensorArray; tfprims "
  "has no variant values for them. Pass the composite tensor's component tensors "
  "(tf.nest.flatten(x, expand_composites=True)) into and out of the function "
  "instead",
)
