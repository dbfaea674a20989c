"""Factorizations: Svd, Qr, SelfAdjointEigV2, Lu.

Where a factor is unique only up to a phase (the singular vectors of Svd, the
eigenvectors of SelfAdjointEigV2) we return it in one documented gauge: each
column of ``v`` (and the matching column of ``u``) is scaled by the unit scalar
that makes its largest-magnitude entry (the first of equal ones) real and
positive. TF's CPU kernels (Eigen) leave these phases as their algorithms make
them; the property specs apply the same normalisation to TF's outputs
(:func:`tf_fix_phase`), which is what compares: singular values, eigenvalues and
the normalised vectors, for well-separated spectra. Qr matches TF's Householder
convention as is (LAPACK and Eigen agree), Lu too (partial pivoting by modulus,
as Eigen; for complex input LAPACK's pivoting by |re| + |im| differs, so complex
Lu runs its own elimination loop).

Rules: derived (``jax.jvp`` of the impl: JAX's SVD/eigh/QR/LU derivatives,
differentiated through the normalisation), which are the mathematical
derivatives of these gauge-fixed outputs; batching re-binds the same op with the
batch axis in front (``rules.leading_batching``). docs/semantics/reductions_linalg.md says
what differs from TF.
"""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np
from jax import lax

from tfprims import dtypes as tfdtypes
from tfprims import rules
from tfprims.core import register_op
from tfprims.ops.linalg._common import FAMILY
from tfprims.errors import import_tensorflow

# ---------------------------------------------------------------------------
# The phase gauge


def fix_phase(v, *others):
  """``v`` (and each array of ``others``, column by column) scaled so that the
  largest-magnitude entry of each column of ``v`` (the first of equal ones) is
  real and positive. Returns a tuple."""
  if v.shape[-2] == 0 or v.shape[-1] == 0:
    return (v,) + others
  idx = jnp.argmax(jnp.abs(v), axis=-2)[..., None, :]
  pivot = jnp.take_along_axis(v, idx, axis=-2)
  if jnp.issubdtype(v.dtype, jnp.complexfloating):
    mag = jnp.abs(pivot)
    safe = jnp.where(mag == 0, jnp.ones((), mag.dtype), mag)
    phase = jnp.where(mag == 0, jnp.ones((), v.dtype), jnp.conj(pivot) / safe.astype(v.dtype))
  else:
    phase = jnp.where(pivot < 0, -jnp.ones((), v.dtype), jnp.ones((), v.dtype))
  return (v * phase,) + tuple(o * phase for o in others)


def tf_fix_phase(v, *others):
  """:func:`fix_phase` with TF ops (for oracles: TF differentiates through it)."""
  tf = import_tensorflow()
  n = v.shape[-2]
  if n == 0 or v.shape[-1] == 0:
    return (v,) + others
  idx = tf.argmax(tf.abs(v), axis=-2)
  mask = tf.cast(tf.one_hot(idx, n, axis=len(v.shape) - 2), v.dtype)
  pivot = tf.reduce_sum(v * mask, axis=-2, keepdims=True)
  if v.dtype.is_complex:
    mag = tf.abs(pivot)
    safe = tf.where(mag == 0, tf.ones_like(mag), mag)
    phase = tf.where(mag == 0, tf.ones_like(pivot), tf.math.conj(pivot) / tf.cast(safe, v.dtype))
  else:
    phase = tf.where(pivot < 0, -tf.ones_like(pivot), tf.ones_like(pivot))
  return (v * phase,) + tuple(o * phase for o in others)


def _real(dtype):
  return np.finfo(dtype).dtype


# ---------------------------------------------------------------------------
# Impls


def _svd(x, *, compute_uv, full_matrices):
  """Singular values (descending, of the input dtype) and, with ``compute_uv``,
  ``u`` and ``v`` (not ``v^H``) with ``x = u diag(s) v^H``, in the phase gauge of
  :func:`fix_phase` on ``v``. Without ``compute_uv``, ``u`` and ``v`` are scalar
  zeros, as TF's eager kernel returns them."""
  m, n = x.shape[-2:]
  k, batch = min(m, n), x.shape[:-2]
  if not compute_uv:
    s = jnp.linalg.svd(x, compute_uv=False) if k else jnp.zeros(batch + (0,), _real(x.dtype))
    zero = jnp.zeros((), x.dtype)
    return s.astype(x.dtype), zero, zero
  if k == 0:  # the full factors of an empty matrix are identities
    mu, nv = (m, n) if full_matrices else (0, 0)
    eye = lambda r, c: jnp.broadcast_to(jnp.eye(r, c, dtype=x.dtype), batch + (r, c))
    return jnp.zeros(batch + (0,), x.dtype), eye(m, mu), eye(n, nv)
  u, s, vh = jnp.linalg.svd(x, full_matrices=full_matrices)
  v = jnp.conj(jnp.swapaxes(vh, -1, -2))
  v1, u1 = fix_phase(v[..., :k], u[..., :k])
  u = jnp.concatenate([u1, u[..., k:]], axis=-1)
  v = jnp.concatenate([v1, v[..., k:]], axis=-1)
  return s.astype(x.dtype), u, v


def _qr(x, *, full_matrices):
  """Householder QR (R's diagonal as LAPACK/Eigen make it). A wide matrix
  ``[X | Y]`` (m < n) is ``Q [R1 | Q^H Y]`` with ``X = Q R1``: the same factors
  as Householder on the whole matrix, and differentiable where JAX's wide QR is
  not."""
  if x.dtype == np.float16:  # no half-precision LAPACK: computed in float32
    return tuple(f.astype(x.dtype) for f in _qr(x.astype(np.float32), full_matrices=full_matrices))
  m, n = x.shape[-2:]
  if 0 < m < n:
    q, r1 = jnp.linalg.qr(x[..., :m])
    r2 = jnp.matmul(jnp.conj(jnp.swapaxes(q, -1, -2)), x[..., m:])
    return q, jnp.concatenate([r1, r2], axis=-1)
  if m == 0 or n == 0:
    batch, c = x.shape[:-2], (m if full_matrices else min(m, n))
    q = jnp.broadcast_to(jnp.eye(m, c, dtype=x.dtype), batch + (m, c))
    return q, jnp.zeros(batch + (c, n), x.dtype)
  return jnp.linalg.qr(x, mode="complete" if full_matrices else "reduced")


def _hermitian_from_lower(x):
  """The Hermitian matrix whose strict lower triangle is ``x``'s, with the real
  part of ``x``'s diagonal: all that TF's kernel (Eigen) reads."""
  low = jnp.tril(x, -1)
  diag = jnp.real(jnp.diagonal(x, axis1=-2, axis2=-1)).astype(x.dtype)
  eye = jnp.eye(x.shape[-1], dtype=bool)
  return (
    low
    + jnp.conj(jnp.swapaxes(low, -1, -2))
    + jnp.where(eye, diag[..., None, :], jnp.zeros((), x.dtype))
  )


def _self_adjoint_eig_v2(x, *, compute_v):
  """Eigenvalues (ascending, of the input dtype) and, with ``compute_v``,
  eigenvectors in the phase gauge of :func:`fix_phase`, of the Hermitian matrix
  that the lower triangle of ``x`` defines (the strict upper triangle and the
  imaginary part of the diagonal are not read, as in TF). Without ``compute_v``
  ``v`` is a scalar zero, as TF's eager kernel returns it."""
  n, batch = x.shape[-1], x.shape[:-2]
  if n == 0:
    return (
      jnp.zeros(batch + (0,), x.dtype),
      jnp.zeros(batch + (0, 0), x.dtype) if compute_v else jnp.zeros((), x.dtype),
    )
  herm = _hermitian_from_lower(x)
  if not compute_v:
    return jnp.linalg.eigvalsh(herm).astype(x.dtype), jnp.zeros((), x.dtype)
  w, v = jnp.linalg.eigh(herm)
  return w.astype(x.dtype), fix_phase(v)[0]


def _lu_by_modulus(x):
  """LU with partial pivoting on |a| (Eigen's PartialPivLU, which TF's Lu runs);
  a zero pivot column is left as it is. Returns (lu, perm)."""
  n = x.shape[-1]
  rows = jnp.arange(n)
  perm0 = jnp.broadcast_to(rows, x.shape[:-1]).astype(np.int32)

  def step(k, carry):
    a, perm = carry
    col = jnp.where(rows >= k, jnp.abs(a[..., :, k]), -1)
    p = jnp.argmax(col, axis=-1)
    is_k, is_p = rows == k, rows == p[..., None]
    row_k = a[..., k, :]
    row_p = jnp.take_along_axis(a, p[..., None, None], axis=-2)[..., 0, :]
    a = jnp.where(
      is_k[:, None], row_p[..., None, :], jnp.where(is_p[..., None], row_k[..., None, :], a)
    )
    perm_k, perm_p = perm[..., k], jnp.take_along_axis(perm, p[..., None], axis=-1)[..., 0]
    perm = jnp.where(is_k, perm_p[..., None], jnp.where(is_p, perm_k[..., None], perm))
    pivot = a[..., k, k]
    safe = jnp.where(pivot == 0, jnp.ones((), a.dtype), pivot)
    below = rows > k
    mult = jnp.where(below, a[..., :, k] / safe[..., None], jnp.zeros((), a.dtype))
    update = mult[..., :, None] * a[..., k, :][..., None, :]
    a = jnp.where(below[:, None] & (rows > k)[None, :], a - update, a)
    a = jnp.where(below[:, None] & is_k[None, :], mult[..., :, None], a)
    return a, perm

  return lax.fori_loop(0, n, step, (x, perm0))


def _lu(x, *, output_idx_type):
  """``lu`` (unit-lower L below the diagonal, U on and above) and ``p`` with
  ``x[..., p, :] = L U``. Real input uses LAPACK (the same pivots as TF's
  Eigen kernel); complex input pivots on |a| as Eigen does. A singular matrix:
  TF raises; ours gives the factorization with a zero on U's diagonal."""
  idx = tfdtypes.canonical_dtype(output_idx_type)
  if x.shape[-1] == 0:
    return x, jnp.zeros(x.shape[:-1], idx)
  if jnp.issubdtype(x.dtype, jnp.complexfloating):
    lu, perm = _lu_by_modulus(x)
  else:
    lu, _, perm = lax.linalg.lu(x)
  return lu, perm.astype(idx)


def _lu_check(x, *, output_idx_type):
  """TF's kernel rejects singular input (an exact zero on U's diagonal)."""
  if x.shape[-1] == 0:
    return None
  lu = _lu(x, output_idx_type=output_idx_type)[0]
  return jnp.any(jnp.diagonal(lu, axis1=-2, axis2=-1) == 0), "Input is not invertible."


# ---------------------------------------------------------------------------
# Specs

_DTYPES = ("float32", "float64", "complex64", "complex128")


def random_unitary(rng, batch, n, dtype):
  """Haar-ish random unitary matrices ``batch + (n, n)`` (numpy, complex or real)."""
  a = rng.standard_normal(batch + (n, n))
  if np.dtype(dtype).kind == "c":
    a = a + 1j * rng.standard_normal(batch + (n, n))
  q, r = np.linalg.qr(a)
  d = np.diagonal(r, axis1=-2, axis2=-1)
  return q * np.where(d == 0, 1, d / np.maximum(np.abs(d), 1e-300))[..., None, :]


def separated_spectrum(rng, batch, k, lo=1.0, sign=False):
  """``k`` values >= ``lo`` (random signs with ``sign``), consecutive ones at
  least 0.5 apart in magnitude, in random order."""
  vals = (
    lo + 0.5 * np.arange(k) + rng.uniform(0, 0.3, batch + (k,)) + rng.uniform(0, 1.0, batch + (1,))
  )
  vals = rng.permuted(vals, axis=-1)
  if sign:
    vals = vals * rng.choice([-1.0, 1.0], batch + (k,))
  return vals


def _matrix_calls(st, kind, square=False):
  """Seeded random matrices (no ties among singular-vector entries): ``kind``
  "svd" (well-separated singular values), "eigh" (Hermitian lower triangle with
  well-separated eigenvalues, noise above the diagonal), "lu" (invertible) or
  "any" (Gaussian)."""

  @st.composite
  def draw(draw):
    dtype = st.np_dtype(draw(st.sampled_from(_DTYPES)))
    batch = tuple(draw(st.shapes(max_rank=2, max_side=3)))
    m = draw(st.integers(0, 4))
    n = m if square else draw(st.integers(0, 4))
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    if kind == "svd":
      k = min(m, n)
      s = separated_spectrum(rng, batch, k)
      u = random_unitary(rng, batch, m, dtype)[..., :k]
      v = random_unitary(rng, batch, n, dtype)[..., :k]
      x = (u * s[..., None, :]) @ np.conj(np.swapaxes(v, -1, -2))
    elif kind == "eigh":
      w = separated_spectrum(rng, batch, n, lo=0.5, sign=True)
      q = random_unitary(rng, batch, n, dtype)
      x = (q * w[..., None, :]) @ np.conj(np.swapaxes(q, -1, -2))
      noise = rng.standard_normal(batch + (n, n)) * 3
      x = np.where(np.triu(np.ones((n, n), bool), 1), noise, x)  # TF reads the lower part
      if dtype.kind == "c":
        x = x + 1j * np.eye(n) * rng.standard_normal(batch + (n, n))
    else:
      x = rng.standard_normal(batch + (m, n))
      if dtype.kind == "c":
        x = x + 1j * rng.standard_normal(batch + (m, n))
      if kind == "lu":
        x = x + 3 * np.eye(n)
    return {"input": x.astype(dtype)}

  return draw()


def _tf_real_part(x):
  """A real-valued output of a complex dtype (singular values, eigenvalues) as
  the real part: the same values, but TF's gradient then drops an imaginary
  cotangent, which TF's own Svd/SelfAdjointEigV2 gradients pass on (the
  derivative of a real-valued function is real: ours)."""
  tf = import_tensorflow()
  if not x.dtype.is_complex:
    return x
  return tf.cast(tf.math.real(x), x.dtype)


def _svd_oracle(input, compute_uv=True, full_matrices=False):  # TF arg name
  """TF's Svd with its vectors put in our phase gauge (:func:`tf_fix_phase`)."""
  tf = import_tensorflow()
  s, u, v = tf.raw_ops.Svd(input=input, compute_uv=compute_uv, full_matrices=full_matrices)
  s = _tf_real_part(s)
  if not compute_uv:  # TF's placeholders are uninitialised scalars
    return s, tf.zeros_like(u), tf.zeros_like(v)
  k = min(input.shape[-2:])
  v1, u1 = tf_fix_phase(v[..., :k], u[..., :k])
  return s, tf.concat([u1, u[..., k:]], -1), tf.concat([v1, v[..., k:]], -1)


def _eigh_oracle(input, compute_v=True):  # TF arg name
  """TF's SelfAdjointEigV2 with its eigenvectors in our phase gauge."""
  tf = import_tensorflow()
  e, v = tf.raw_ops.SelfAdjointEigV2(input=input, compute_v=compute_v)
  e = _tf_real_part(e)
  # Without compute_v, TF's placeholder v is an uninitialised scalar.
  return (e, tf_fix_phase(v)[0]) if compute_v else (e, tf.zeros_like(v))


def _svd_calls(st):
  @st.composite
  def draw(draw):
    call = draw(_matrix_calls(st, "svd"))
    m, n = call["input"].shape[-2:]
    compute_uv = draw(st.booleans())
    # Full factors of a non-square matrix have non-unique extra columns (and no
    # derivative, in TF or JAX): tests/test_linalg_decompositions.py checks them.
    full = draw(st.booleans()) and (m == n or not compute_uv)
    return dict(call, compute_uv=compute_uv, full_matrices=full)

  return draw()


def _qr_calls(st):
  @st.composite
  def draw(draw):
    call = draw(_matrix_calls(st, "any"))
    m, n = call["input"].shape[-2:]
    if draw(st.booleans()):  # float16 too (TF has a CPU kernel)
      call["input"] = call["input"].real.astype(np.float16)
    # Tall full Q: its extra columns have no derivative (TF and JAX refuse);
    # values tested in tests/test_linalg_decompositions.py.
    return dict(call, full_matrices=draw(st.booleans()) and m <= n)

  return draw()


_GAUGE = (
  "vectors compared in a fixed phase gauge (largest entry of each column of v "
  "real positive), applied to TF's too"
)

# ---------------------------------------------------------------------------
# Ops

Svd = register_op(
  "Svd",
  _svd,
  family=FAMILY,
  multiple_results=True,
  attrs=("compute_uv", "full_matrices"),
  batching=rules.per_op(rules.leading_batching),
  spec=lambda st: st.Spec(
    _svd_calls(st),
    oracle=_svd_oracle,
    vmap_variation="scale",
    examples=0.5,
    note=_GAUGE + "; drawn with well-separated singular values",
  ),
)

Qr = register_op(
  "Qr",
  _qr,
  family=FAMILY,
  multiple_results=True,
  attrs=("full_matrices",),
  batching=rules.per_op(rules.leading_batching),
  spec=lambda st: st.Spec(
    _qr_calls(st),
    rtol={"float16": 2e-2},
    atol={"float16": 2e-2},
    grad_rtol={"float16": 5e-2},
    grad_atol={"float16": 5e-2},
  ),
)

SelfAdjointEigV2 = register_op(
  "SelfAdjointEigV2",
  _self_adjoint_eig_v2,
  family=FAMILY,
  multiple_results=True,
  attrs=("compute_v",),
  batching=rules.per_op(rules.leading_batching),
  spec=lambda st: st.Spec(
    st.tuples(_matrix_calls(st, "eigh", square=True), st.booleans()).map(
      lambda c: dict(c[0], compute_v=c[1])
    ),
    oracle=_eigh_oracle,
    vmap_variation="scale",
    note=_GAUGE + "; reads the lower triangle and the real part of the diagonal, "
    "as TF; drawn with well-separated eigenvalues",
  ),
)

Lu = register_op(
  "Lu",
  _lu,
  family=FAMILY,
  multiple_results=True,
  attrs=("output_idx_type",),
  check=_lu_check,
  batching=rules.per_op(rules.leading_batching),
  spec=lambda st: st.Spec(
    st.tuples(
      _matrix_calls(st, "lu", square=True), st.sampled_from([np.dtype("int32"), np.dtype("int64")])
    ).map(lambda c: dict(c[0], output_idx_type=c[1])),
    vmap_variation="scale",
    grad_oracle="fd",
    note="TF raises on singular input (runtime check); complex input pivots by modulus; "
    "TF registers no gradient: derivatives checked against central differences",
  ),
)
