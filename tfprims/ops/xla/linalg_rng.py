"""XlaSvd, XlaSelfAdjointEig and XlaRngBitGenerator.

XlaSvd and XlaSelfAdjointEig are XLA's Jacobi decompositions (``max_iter`` sweeps
until the off-diagonal norm is below ``epsilon``); here they are JAX's
``jnp.linalg.svd``/``eigh``, run to convergence (``max_iter``, ``epsilon`` and
``precision_config`` are kept as params but not read: where TF's iteration has
converged the results agree). Their outputs are XLA's in order and in a fixed
gauge: singular values descending, eigenvalues ascending (as XLA sorts them),
each column of ``v`` (and the matching column of ``u``) signed so that its
largest-magnitude entry is positive (``linalg.factorizations.fix_phase``; XLA's
signs are whatever its rotations make, so the specs put TF's in the same
gauge). XlaSvd returns full factors (``u`` m x m, ``v`` n x n, ``a = u[:, :k]
diag(s) v[:, :k]^T``); the extra columns of a non-square matrix are a basis of
the complement (not unique; their tangent is zero). Derivatives are JAX's
(through the gauge); TF registers none.

XlaRngBitGenerator is ``lax.rng_bit_generator``: TF's algorithm numbers (1
Philox, 2 ThreeFry, 3 auto-select = XLA's default) map to JAX's, which runs
XLA's own RngBitGenerator, so state and bits are TF's bit for bit. JAX takes a
two-word (uint64[2]) state; XLA's Philox also takes three words, which is refused
with a typed error. Signed output dtypes are the unsigned bits reinterpreted
(TF's CPU jit has no kernel for them).
"""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np
from jax import lax

from tfprims import errors, rules
from tfprims.core import register_op, tfops
from tfprims.ops.linalg.factorizations import (
  fix_phase,
  random_unitary,
  separated_spectrum,
  tf_fix_phase,
)
from tfprims.ops.xla import _common
from tfprims.ops.xla._common import FAMILY

_DTYPES = ("float32", "float64")


def _canonicalize_svd(params, *operands):
  return dict(
    params,
    max_iter=int(params["max_iter"]),
    epsilon=float(params["epsilon"]),
    precision_config=_common.precision_config(params["precision_config"]),
  )


# --- XlaSvd ------------------------------------------------------------------------


def _svd_impl(a, *, max_iter, epsilon, precision_config):
  """Singular values (descending) and full factors ``u``, ``v`` (not ``v^T``),
  ``a = u[..., :k] diag(s) v[..., :k]^H``, columns in the :func:`fix_phase` gauge."""
  m, n = a.shape[-2:]
  k, batch = min(m, n), a.shape[:-2]
  if k == 0:
    eye = lambda r: jnp.broadcast_to(jnp.eye(r, dtype=a.dtype), batch + (r, r))
    return jnp.zeros(batch + (0,), a.dtype), eye(m), eye(n)
  u, s, vh = jnp.linalg.svd(a, full_matrices=False)
  v1, u1 = fix_phase(jnp.conj(jnp.swapaxes(vh, -1, -2)), u)
  if m != n:  # the complement's basis (not unique): no tangent
    uf, _, vhf = jnp.linalg.svd(lax.stop_gradient(a), full_matrices=True)
    u1 = jnp.concatenate([u1, uf[..., k:]], axis=-1)
    v1 = jnp.concatenate([v1, jnp.conj(jnp.swapaxes(vhf, -1, -2))[..., k:]], axis=-1)
  return s.astype(a.dtype), u1, v1


def _svd_calls(st):
  @st.composite
  def calls(draw):
    dtype = st.np_dtype(draw(st.sampled_from(_DTYPES)))
    batch = tuple(draw(st.shapes(max_rank=1, max_side=2)))
    n = draw(st.integers(1, 4))  # square: full factors of other shapes are not unique
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    s = separated_spectrum(rng, batch, n)
    u, v = random_unitary(rng, batch, n, dtype), random_unitary(rng, batch, n, dtype)
    a = (u * s[..., None, :]) @ np.swapaxes(v, -1, -2)
    return dict(
      a=a.astype(dtype), max_iter=100, epsilon=float(np.finfo(dtype).eps), precision_config=b""
    )

  return calls()


def _svd_oracle():
  base = _common.jit_oracle("XlaSvd", ("a",))

  def oracle(**kwargs):
    s, u, v = base(**kwargs)
    v, u = tf_fix_phase(v, u)
    return s, u, v

  oracle.__name__ = oracle.__qualname__ = base.__name__
  return oracle


_GAUGE = (
  "oracle: the op under tf.function(jit_compile=True), its vectors put in our "
  "sign gauge (largest entry of each column of v positive); drawn square with "
  "well-separated spectra; derivatives against central differences (TF registers "
  "no gradient); max_iter/epsilon are not read (we run to convergence)"
)

_TOL = (
  "; float64 to 1e-7: XLA's Jacobi sweeps stop short of LAPACK's accuracy even "
  "with epsilon at machine precision"
)

XlaSvd = register_op(
  "XlaSvd",
  _svd_impl,
  family=FAMILY,
  multiple_results=True,
  attrs=("max_iter", "epsilon", "precision_config"),
  canonicalize=_canonicalize_svd,
  batching=rules.per_op(rules.leading_batching),
  spec=lambda st: st.Spec(
    _svd_calls(st),
    oracle=_svd_oracle(),
    grad_oracle="fd",
    examples=0.5,
    vmap_variation="scale",
    rtol={"float32": 1e-4, "float64": 1e-7},
    atol={"float32": 1e-5, "float64": 1e-8},
    note=_GAUGE + _TOL,
  ),
)

# --- XlaSelfAdjointEig --------------------------------------------------------------


def _eig_impl(a, *, lower, max_iter, epsilon):
  """Eigenvalues (ascending) and eigenvectors (the :func:`fix_phase` gauge) of the
  symmetric matrix one triangle of ``a`` defines (``lower``: the lower one)."""
  n, batch = a.shape[-1], a.shape[:-2]
  if n == 0:
    return jnp.zeros(batch + (0,), a.dtype), jnp.zeros(batch + (0, 0), a.dtype)
  tri = jnp.tril(a) if lower else jnp.triu(a)
  strict = jnp.tril(a, -1) if lower else jnp.triu(a, 1)
  sym = tri + jnp.conj(jnp.swapaxes(strict, -1, -2))
  w, v = jnp.linalg.eigh(sym, symmetrize_input=False)
  return w.astype(a.dtype), fix_phase(v)[0]


def _eig_calls(st):
  @st.composite
  def calls(draw):
    dtype = st.np_dtype(draw(st.sampled_from(_DTYPES)))
    batch = tuple(draw(st.shapes(max_rank=1, max_side=2)))
    n = draw(st.integers(1, 4))
    lower = draw(st.booleans())
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    w = separated_spectrum(rng, batch, n, lo=0.5, sign=True)
    q = random_unitary(rng, batch, n, dtype)
    a = (q * w[..., None, :]) @ np.swapaxes(q, -1, -2)
    noise = rng.standard_normal(batch + (n, n)) * 3  # in the triangle not read
    unread = np.triu(np.ones((n, n), bool), 1) if lower else np.tril(np.ones((n, n), bool), -1)
    a = np.where(unread, noise, a)
    return dict(a=a.astype(dtype), lower=lower, max_iter=100, epsilon=float(np.finfo(dtype).eps))

  return calls()


def _eig_oracle():
  base = _common.jit_oracle("XlaSelfAdjointEig", ("a",))

  def oracle(**kwargs):
    w, v = base(**kwargs)
    return w, tf_fix_phase(v)[0]

  oracle.__name__ = oracle.__qualname__ = base.__name__
  return oracle


XlaSelfAdjointEig = register_op(
  "XlaSelfAdjointEig",
  _eig_impl,
  family=FAMILY,
  multiple_results=True,
  attrs=("lower", "max_iter", "epsilon"),
  canonicalize=lambda p, *o: dict(
    p, lower=bool(p["lower"]), max_iter=int(p["max_iter"]), epsilon=float(p["epsilon"])
  ),
  batching=rules.per_op(rules.leading_batching),
  spec=lambda st: st.Spec(
    _eig_calls(st),
    oracle=_eig_oracle(),
    grad_oracle="fd",
    vmap_variation="scale",
    rtol={"float32": 1e-4, "float64": 1e-7},
    atol={"float32": 1e-5, "float64": 1e-8},
    note=_GAUGE.replace(
      "square with well-separated spectra",
      "with well-separated eigenvalues, noise in the triangle not read",
    )
    + _TOL,
  ),
)

# --- XlaRngBitGenerator --------------------------------------------------------------

#: TF's algorithm numbers (``tf.random.Algorithm``) -> JAX's.
_ALGORITHMS = {1: "RNG_PHILOX", 2: "RNG_THREE_FRY", 3: "RNG_DEFAULT"}
_UNSIGNED = {"int8": "uint8", "int32": "uint32", "int64": "uint64"}


def _rng_canonicalize(params, initial_state, *rest):
  algorithm = int(np.asarray(params["algorithm"]))
  if algorithm not in _ALGORITHMS:
    raise errors.ConversionError(
      f"XlaRngBitGenerator: unknown algorithm {algorithm} (TF's "
      "numbers: 1 Philox, 2 ThreeFry, 3 auto-select)"
    )
  if np.shape(initial_state) != (2,):
    raise errors.ConversionError(
      f"XlaRngBitGenerator: the state has shape {list(np.shape(initial_state))}; JAX's "
      "rng_bit_generator takes a two-word (uint64[2]) state (XLA's three-word Philox "
      "state is not supported)"
    )
  return dict(
    params,
    algorithm=algorithm,
    shape=tuple(int(d) for d in np.ravel(params["shape"])),
    dtype=np.dtype(params["dtype"]),
  )


def _rng_impl(initial_state, *, algorithm, shape, dtype):
  """``lax.rng_bit_generator`` with TF's algorithm number: (new state, bits)."""
  if initial_state.dtype != jnp.uint64:
    raise errors.Int64OverflowError("XlaRngBitGenerator's state is uint64: it needs jax_enable_x64")
  out = np.dtype(_UNSIGNED.get(np.dtype(dtype).name, np.dtype(dtype).name))
  state, bits = lax.rng_bit_generator(
    initial_state, shape, dtype=out, algorithm=getattr(lax.RandomAlgorithm, _ALGORITHMS[algorithm])
  )
  return state, lax.bitcast_convert_type(bits, dtype) if out != dtype else bits


def _rng_batch(args, dims, *, algorithm, shape, dtype):
  """One call per batch member (``lax.map``): JAX batches no key."""
  (state,), (d,) = args, dims
  state = rules.to_front(state, d)
  out = lax.map(
    lambda s: tuple(tfops.XlaRngBitGenerator(s, algorithm=algorithm, shape=shape, dtype=dtype)),
    state,
  )
  return list(out), [0, 0]


def _rng_calls(st):
  @st.composite
  def calls(draw):
    algorithm = draw(st.sampled_from(sorted(_ALGORITHMS)))
    words = [draw(st.integers(0, 2**64 - 1)) for _ in range(2)]
    shape = tuple(draw(st.shapes(max_rank=3, max_side=4)))
    idx = st.np_dtype(draw(st.sampled_from(("int32", "int64"))))
    return dict(
      algorithm=np.array(algorithm, np.int32),
      initial_state=np.array(words, np.uint64),
      shape=np.array(shape, idx),
      dtype=st.np_dtype(draw(st.sampled_from(("uint8", "uint32", "uint64")))),
    )

  return calls()


XlaRngBitGenerator = register_op(
  "XlaRngBitGenerator",
  _rng_impl,
  family=FAMILY,
  multiple_results=True,
  static=("algorithm", "shape"),
  attrs=("dtype",),
  canonicalize=_rng_canonicalize,
  batching=_rng_batch,
  spec=rules.per_op(
    lambda op: (
      lambda st: st.Spec(
        _rng_calls(st),
        oracle=_common.jit_oracle(op.op_type, ("initial_state",)),
        vmap_variation="permute",
        skip={
          "jvp": "integer state and bits: nothing to differentiate",
          "vjp": "integer state and bits: nothing to differentiate",
        },
        note="oracle: the op under tf.function(jit_compile=True); bits compared exactly "
        "(both run XLA's RngBitGenerator); signed dtypes (no TF CPU kernel) are not drawn",
      )
    )
  ),
)
