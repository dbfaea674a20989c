"""Random ops, one module per group:

* ``basic.py``: the stateful ops keyed by the call's ``rng=`` (RandomUniform...,
  NonDeterministicInts) and the stateless V1/V2 uniform/normal/int/shuffle/multinomial
  ops and key/counter helpers.
* ``stateful.py``: tf.random.Generator's ops (Stateful*), keyed by and advancing the
  generator's state variable.
* ``gamma_poisson.py``: gamma (and RandomGammaGrad), Poisson, binomial and parameterized
  truncated normal samplers, stateful and stateless.
* ``index_shuffle.py``: RandomIndexShuffle (TF's Simon cipher, bit for bit).
* ``samplers.py``: the uniform, log-uniform and all-classes candidate samplers.
* ``sobol.py``: SobolSample (Joe and Kuo's direction numbers, bit for bit as TF).

Semantics choices are written down in docs/semantics/random.md.
"""

from tfprims.ops.random import basic, gamma_poisson, index_shuffle, samplers, sobol, stateful
from tfprims.ops.random.basic import *  # noqa: F403  (the family's public names)
from tfprims.ops.random.basic import RandomUniform
