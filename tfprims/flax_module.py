"""A converted TF function as a Flax NNX module (``pip install -e '.[flax]'``).

    fn, params = tfprims.convert(tf.function(lambda x: model(x, training=True)), spec)
    module = TFModule(fn, params)
    optimizer = nnx.Optimizer(module, optax.adam(1e-3), wrt=nnx.Param)

    @nnx.jit
    def train_step(module, optimizer, x, y):
      loss, grads = nnx.value_and_grad(lambda m: loss_fn(m(x), y))(module)
      optimizer.update(module, grads)
      return loss

The TF variables that are trainable become ``nnx.Param``s (in ``module.params``, by
TF variable name); the others (BatchNorm moving statistics, Keras seed-generator
states...) become ``nnx.BatchStat``s (``module.state``), which each call updates
from the converted function's ``new_params``, as TF would update the variables.
``module.tf_params()`` is the params dict of :func:`tfprims.convert` again (for
:func:`tfprims.assign_variables` or a checkpoint).
"""

from __future__ import annotations

from typing import Any, Mapping, Optional

import jax.numpy as jnp
from flax import nnx


class TFModule(nnx.Module):
  """A :class:`~tfprims.ConvertedFunction` with its params as NNX variables.

  Args:
    fn, params: what :func:`tfprims.convert` returned.
    rngs: for functions with stateful random ops (``tf.random.uniform``,
      ``tf.nn.dropout``): each call draws their key from ``rngs``' default stream.
  """

  def __init__(self, fn, params: Mapping[str, Any], *, rngs: Optional[nnx.Rngs] = None):
    self.fn = fn
    specs = fn.param_specs
    self.params = nnx.Dict(
      {k: nnx.Param(jnp.asarray(v)) for k, v in params.items() if specs[k].trainable}
    )
    self.state = nnx.Dict(
      {k: nnx.BatchStat(jnp.asarray(v)) for k, v in params.items() if not specs[k].trainable}
    )
    self.rngs = rngs

  def tf_params(self) -> dict:
    """Every param by TF variable name, as :func:`tfprims.convert` returns them."""
    return {
      **{k: v[...] for k, v in self.params.items()},
      **{k: v[...] for k, v in self.state.items()},
    }

  def __call__(self, *args, **kwargs):
    rng = self.rngs() if self.rngs is not None else None
    outputs, new_params = self.fn(self.tf_params(), *args, rng=rng, **kwargs)
    for k, v in self.state.items():
      v[...] = new_params[k]
    return outputs
