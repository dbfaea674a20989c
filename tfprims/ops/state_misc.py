"""Small state and placement ops, run by hooks without a primitive of their own:
GuaranteeConst, HostConst, DeviceIndex, DisableCopyOnRead, FakeParam, RngSkip.

* ``GuaranteeConst``: its input (TF's promise that the value is constant lets
  grappler fold it; for JAX a value is a value).
* ``HostConst``: ``Const`` (host memory is a placement detail).
* ``DeviceIndex``: the index of the device type JAX runs on (``jax.default_backend()``:
  CPU, GPU, TPU) in ``device_names``, else ``len(device_names)`` as TF's kernel does
  (a constant: the choice is made at trace time).
* ``DisableCopyOnRead``: nothing (TF's copy-on-read mode of a variable shared with
  sparse ops has no JAX counterpart: values are immutable).
* ``FakeParam``: zeros of its shape (TF's value is never to be read; unknown
  dimensions are 0).
* ``RngSkip``: ``RngReadAndSkip`` without its output (the generator state advanced
  by ``256 * delta``).
"""

from __future__ import annotations

import jax
import numpy as np

from tfprims import dtypes
from tfprims.core import structural
from tfprims.ops.graph_nodes import const
from tfprims.ops.variables import expect_handle, rng_read_and_skip

FAMILY = "state"


@structural(
  "GuaranteeConst",
  family=FAMILY,
  pass_through=True,
  doc="Its input (TF's promise of a constant value).",
)
def _guarantee_const(ctx, node, inputs):
  return [inputs[0]]


@structural("HostConst", family=FAMILY, doc="A constant (Const in host memory).")
def _host_const(ctx, node, inputs):
  return const(ctx, node, inputs)


def device_type() -> str:
  """TF's device type for the platform JAX computes on (``CPU``, ``GPU``, ``TPU``)."""
  platform = jax.default_backend().upper()
  return "GPU" if platform in ("CUDA", "ROCM") else platform


@structural(
  "DeviceIndex",
  family=FAMILY,
  doc="The index of JAX's device type in device_names (else their count).",
)
def _device_index(ctx, node, inputs):
  names = [n.decode() if isinstance(n, bytes) else str(n) for n in node.attr("device_names") or []]
  kind = device_type()
  return [np.int32(names.index(kind) if kind in names else len(names))]


@structural(
  "DisableCopyOnRead",
  family=FAMILY,
  reads_state=True,
  doc="Nothing (TF's copy-on-read variable mode has no JAX counterpart).",
)
def _disable_copy_on_read(ctx, node, inputs):
  expect_handle(node, inputs[0])
  return []


@structural(
  "FakeParam", family=FAMILY, doc="Zeros of its shape (a value TF never reads; unknown dims are 0)."
)
def _fake_param(ctx, node, inputs):
  shape = node.attr("shape") or ()
  dims = tuple(0 if d is None or d < 0 else int(d) for d in shape)
  return [np.zeros(dims, dtypes.from_tf(node.attr("dtype")))]


@structural(
  "RngSkip",
  family=FAMILY,
  reads_state=True,
  writes_state=True,
  doc="tf.random.Generator's state advanced by 256 * delta (no output).",
)
def _rng_skip(ctx, node, inputs):
  rng_read_and_skip(ctx, node, inputs)  # the same inputs: resource, algorithm, delta
  return []
