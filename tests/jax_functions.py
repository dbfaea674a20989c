"""JAX functions covering what StableHLO modules exported from JAX contain (for the
StableHLO reader's tests and the jax2tf round trips).

Each entry: name -> (function, example arguments, what to check). ``tol``: a looser
tolerance of values (bfloat16: XLA may keep excess precision in a fusion, so the
original and the module read back may round differently). ``grad``: reverse
mode of the module read as JAX operations equals the original's (False where the
module's lowering has no derivative of its own: LAPACK's QR, special functions
whose JAX derivative is a custom rule while the module holds their expansion).
"""

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

RNG = np.random.default_rng(0)


def _normal(*shape, dtype=np.float32):
  return RNG.normal(size=shape).astype(dtype)


X34, Y42 = _normal(3, 4), _normal(4, 2)
A33 = _normal(2, 3, 3)
IMG, KER = _normal(2, 8, 8, 3), _normal(3, 3, 3, 4)
SEQ = _normal(5, 3)


def _mlp(x, w):
  h = jnp.tanh(x @ w)
  return jax.nn.log_softmax(h, axis=-1)


def _cnn(x, k):
  y = lax.conv_general_dilated(
    x, k, (1, 1), "SAME", rhs_dilation=(2, 2), dimension_numbers=("NHWC", "HWIO", "NHWC")
  )
  y = jax.nn.relu(y)
  y = lax.reduce_window(y, -jnp.inf, lax.max, (1, 2, 2, 1), (1, 2, 2, 1), "VALID")
  return jnp.mean(y, axis=(1, 2))


def _depthwise(x, k):
  return lax.conv_general_dilated(
    x,
    k[..., :1].repeat(1, axis=-1).reshape(3, 3, 1, 3),
    (2, 2),
    ((1, 1), (0, 1)),
    feature_group_count=3,
    dimension_numbers=("NHWC", "HWIO", "NHWC"),
  )


def _scan_rnn(xs, h0):
  w = jnp.arange(9.0).reshape(3, 3) / 10

  def step(h, x):
    h = jnp.tanh(h @ w + x)
    return h, h.sum()

  return lax.scan(step, h0, xs)


def _while_data(x):
  def body(c):
    i, v = c
    return i + 1, v * 1.5 + 0.1

  return lax.while_loop(lambda c: jnp.sum(jnp.abs(c[1])) < 50.0, body, (0, x))


def _fori(x):
  return lax.fori_loop(0, 4, lambda i, v: jnp.sin(v) * (i + 1), x)


def _cond_switch(x):
  a = lax.cond(jnp.sum(x) > 0, lambda v: v * 2.0, lambda v: jnp.cos(v), x)
  b = lax.switch(jnp.argmax(x[0]), [jnp.sin, jnp.tanh, jnp.exp, lambda v: -v], x)
  return a + b


def _sorting(x):
  return (
    jnp.sort(x, axis=0),
    jnp.argsort(x, axis=-1),
    lax.top_k(x, 2)[0],
    lax.top_k(x, 2)[1],
    jnp.argmax(x, axis=0),
    jnp.argmin(x, axis=1),
  )


def _gather_scatter(x):
  x, i = jnp.asarray(x), jnp.array([2, 0, 2])
  return (
    x[i],
    x[:, jnp.array([3, 1])],
    x.at[i].add(1.0),
    x.at[1, 2].set(9.0),
    x.at[i].max(0.5),
    x.at[jnp.array([5])].get(mode="fill", fill_value=-1.0),
    jnp.take_along_axis(x, jnp.argsort(x, axis=1), axis=1),
  )


def _cumulative(x):
  return (
    jnp.cumsum(x, axis=1),
    jnp.cumprod(x, axis=0),
    lax.cummax(x, axis=1),
    jax.nn.logsumexp(x, axis=0),
  )


def _fft(x):
  return jnp.fft.rfft(x), jnp.abs(jnp.fft.ifft(jnp.fft.fft(x.astype(jnp.complex64))))


def _linalg(a):
  sym = a @ jnp.swapaxes(a, -1, -2) + 3 * jnp.eye(3)
  return (
    jnp.linalg.inv(a),
    jnp.linalg.cholesky(sym),
    jnp.linalg.eigh(sym)[0],
    jnp.linalg.svd(a, compute_uv=False),
    jnp.linalg.slogdet(a)[1],
    jax.scipy.linalg.solve_triangular(a, a[..., :1], lower=True),
  )


def _qr(a):
  return jnp.linalg.qr(a)


def _special(x):
  return (
    jax.scipy.special.erfinv(jnp.tanh(x)),
    lax.lgamma(jnp.abs(x) + 1.0),
    jax.nn.gelu(x),
    jnp.round(x * 3),
    jnp.abs(x) ** 2.5,
  )


def _smooth(x):
  return (
    jax.nn.softmax(x),
    jax.nn.gelu(x, approximate=False),
    jnp.clip(x, -0.5, 0.5),
    jnp.where(x > 0, jnp.sqrt(jnp.abs(x) + 1), x**3),
    jnp.arctan2(x, 1.0 + x * x),
  )


def _random(key, x):
  k = jax.random.wrap_key_data(key)
  return jax.random.normal(k, (3,)) + x[0, :3], jax.random.randint(k, (4,), 0, 10)


def _integer(x):
  n = (x * 10).astype(jnp.int32)
  return n // 3, n % 3, n >> 1, jnp.bitwise_xor(n, 5), lax.population_count(n)


def _transformer(x, w):
  q = x @ w[:, :4]
  k = x @ w[:, 4:8]
  att = jax.nn.softmax(q @ k.T / 2.0, axis=-1)
  y = att @ x
  mu = y.mean(-1, keepdims=True)
  return (y - mu) / jnp.sqrt(((y - mu) ** 2).mean(-1, keepdims=True) + 1e-5)


def _shapes(x):
  return (
    jnp.pad(x, ((1, 0), (2, 1)), mode="reflect"),
    jnp.flip(x, 0),
    x.T.reshape(2, 6),
    jnp.concatenate([x, x[:1]], 0),
    jnp.tile(x[:1], (2, 1)),
    x[::2, 1:3],
    lax.dynamic_slice(x, (1, jnp.argmax(x[0])), (2, 2)),
    lax.dynamic_update_slice(x, jnp.ones((1, 2)), (2, 1)),
    lax.reduce_precision(x, 5, 10),
  )


def _half(x):
  y = x.astype(jnp.bfloat16)
  return (y * jnp.bfloat16(1.5)).astype(jnp.float32), x.astype(jnp.float16) ** 2


def _pooling(x):
  avg = lax.reduce_window(x, 0.0, lax.add, (1, 3, 3, 1), (1, 2, 2, 1), "SAME") / 9.0
  return avg, lax.reduce_window(x, -jnp.inf, lax.max, (1, 3, 3, 1), (1, 2, 2, 1), "SAME")


def _flax_like(x, w):
  h = x @ w[:, :6]
  h = (h - h.mean(0)) / (h.std(0) + 1e-3)
  return jax.nn.silu(h) @ w[:, :6].T


def _einsum(a, b):
  return jnp.einsum("ij,jk,kl->il", a, b, b.T @ a.T), jnp.einsum("bij,bjk->bik", A33, A33)


def _segments(x):
  ids = jnp.array([0, 2, 0])
  return (
    jax.nn.one_hot(jnp.argmax(x, 1), 4) * x,
    jax.ops.segment_sum(x, ids, 3),
    jax.ops.segment_max(x, ids, 3),
  )


def _complex(x, y):
  z = lax.complex(x, y)
  return jnp.abs(z * z + 1j), jnp.angle(z), jnp.real(jnp.conj(z) * jnp.exp(z))


def _remat(x):
  f = jax.checkpoint(lambda v: jax.nn.relu(v) * jax.nn.softplus(v) + jax.nn.sigmoid(v))
  return f(x) @ x.T


def _nested_loops(x):
  def outer(c, row):
    inner = lax.fori_loop(0, 3, lambda i, v: v * 0.9 + jnp.sin(row), c)
    return inner, inner.sum()

  return lax.scan(outer, jnp.zeros(4), x)


def _flax(x):
  import flax.linen as nn

  class Block(nn.Module):
    @nn.compact
    def __call__(self, v):
      v = nn.Dense(6)(v)
      v = nn.LayerNorm()(v)
      return nn.Dense(2)(nn.gelu(v))

  block = Block()
  params = block.init(jax.random.key(0), jnp.zeros((1, 4)))
  return block.apply(params, x)


def _logical(x):
  y = jnp.where(x > 1, jnp.nan, x)
  return (
    jnp.any(x > 1, 0),
    jnp.all(x < 2, 1),
    jnp.isnan(y),
    jnp.nan_to_num(y, nan=-1.0),
    jnp.logical_xor(x > 0, x < 0.5),
  )


def _search(x):
  grid = jnp.linspace(-2.0, 2.0, 7)
  return (jnp.searchsorted(grid, x.reshape(-1)), jnp.interp(x.reshape(-1), grid, grid**2))


FUNCTIONS = {
  "mlp": (_mlp, (X34, _normal(4, 5)), {}),
  "cnn": (_cnn, (IMG, KER), {}),
  "depthwise": (_depthwise, (IMG, KER), {}),
  "scan_rnn": (_scan_rnn, (SEQ, _normal(3)), {}),
  "while_data": (_while_data, (X34,), {"grad": False}),
  "fori": (_fori, (X34,), {}),
  "cond_switch": (_cond_switch, (X34,), {}),
  "sorting": (_sorting, (X34,), {}),
  "gather_scatter": (_gather_scatter, (X34,), {}),
  "cumulative": (_cumulative, (X34,), {}),
  "fft": (_fft, (X34,), {}),
  "linalg": (_linalg, (A33,), {}),
  "qr": (_qr, (A33,), {"grad": False}),
  "special": (_special, (X34,), {"grad": False}),
  "smooth": (_smooth, (X34,), {}),
  "random": (_random, (np.array([0, 42], np.uint32), X34), {}),
  "integer": (_integer, (X34,), {"grad": False}),
  "transformer": (_transformer, (_normal(5, 8), _normal(8, 8)), {}),
  "shapes": (_shapes, (X34,), {}),
  "half": (_half, (X34,), {"grad": False, "tol": 1e-2}),  # bf16: XLA's excess precision
  "pooling": (_pooling, (IMG,), {}),
  "flax_like": (_flax_like, (X34, _normal(4, 10)), {}),
  "einsum": (_einsum, (_normal(2, 3), _normal(3, 2)), {}),
  "segments": (_segments, (X34,), {}),
  "complex": (_complex, (X34, _normal(3, 4)), {}),
  "remat": (_remat, (X34,), {}),
  "nested_loops": (_nested_loops, (X34,), {}),
  "flax": (_flax, (X34,), {}),
  "logical": (_logical, (X34,), {}),
  "search": (_search, (X34,), {}),
}
