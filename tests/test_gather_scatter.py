"""Gathers, scatters and variable writers: out-of-range policy and runtime checks,
duplicates, TF names in grad/vmap jaxprs, state threaded through control flow, and
real programs (beam search, scatter_nd with grad/vmap, sparse SGD on embeddings)
compared with TF."""

import jax
import jax.numpy as jnp
import keras
import numpy as np
import pytest
import tensorflow as tf

import tfprims
from tfprims.core import tfops
from helpers import jaxpr_primitives, non_tf_primitives

R = tf.raw_ops


@pytest.fixture
def checks_on():
  with tfprims.override_config("runtime_checks", True):
    yield


def _tf_raises(f, *args):
  with pytest.raises(tf.errors.InvalidArgumentError):
    f(*args)


# --- out-of-range indices: policy (eager, jit) and runtime checks --------------------------


def test_gathers_give_zeros_for_out_of_range_indices(checks_on):
  params = np.arange(12, dtype=np.float32).reshape(4, 3)

  @tf.function
  def f(p, i, j):
    return tf.gather_nd(p, i), R.Gather(params=p, indices=j)

  fn = tfprims.convert_functional(
    f, tf.TensorSpec([4, 3]), tf.TensorSpec([3, 2], tf.int32), tf.TensorSpec([3], tf.int32)
  )
  good_i, good_j = np.array([[0, 1], [3, 2], [1, 0]], np.int32), np.array([3, 0, 1], np.int32)
  bad_i, bad_j = np.array([[0, 5], [3, 2], [-1, 0]], np.int32), np.array([3, 4, -1], np.int32)
  with tfprims.override_config("runtime_checks", False):
    # Known values (an eager call) raise like TF; a jitted program gives zeros.
    with pytest.raises(tfprims.RuntimeCheckError):
      fn(params, bad_i, bad_j)
    jnd, jg = jax.jit(fn)(params, bad_i, bad_j)
    np.testing.assert_array_equal(jnd, [0, 11, 0])
    np.testing.assert_array_equal(jg, [params[3], np.zeros(3), np.zeros(3)])
  _tf_raises(f, params, bad_i, good_j)
  _tf_raises(f, params, good_i, bad_j)
  # runtime_checks: eager calls raise with TF's message, valid calls pass.
  out = fn(params, good_i, good_j)
  np.testing.assert_array_equal(out[0], f(params, good_i, good_j)[0].numpy())
  with pytest.raises(tfprims.RuntimeCheckError, match="does not index into param shape"):
    fn(params, bad_i, good_j)
  with pytest.raises(tfprims.RuntimeCheckError, match=r"is not in \[0, 4\)"):
    fn(params, good_i, bad_j)
  # Under jit the check runs when the program runs (a fresh function: jit caches the
  # trace made above with the checks off).
  fn = tfprims.convert_functional(
    f, tf.TensorSpec([4, 3]), tf.TensorSpec([3, 2], tf.int32), tf.TensorSpec([3], tf.int32)
  )
  with pytest.raises(Exception, match="does not index into param shape"):
    jax.block_until_ready(jax.jit(fn)(params, bad_i, good_j))
  np.testing.assert_array_equal(
    jax.jit(fn)(params, good_i, good_j)[1], f(params, good_i, good_j)[1].numpy()
  )


def test_gather_nd_ignore_policy_has_no_check(checks_on):
  f = tf.function(lambda p, i: R.GatherNd(params=p, indices=i, bad_indices_policy="IGNORE"))
  fn = tfprims.convert_functional(f, tf.TensorSpec([4]), tf.TensorSpec([3, 1], tf.int32))
  p, i = np.arange(4, dtype=np.float32), np.array([[1], [7], [-1]], np.int32)
  np.testing.assert_array_equal(fn(p, i), f(p, i).numpy())  # TF gives zeros too


def test_scatters_drop_out_of_range_updates(checks_on):
  @tf.function
  def f(x, i, u):
    return (
      tf.scatter_nd(i, u, [5]),
      tf.tensor_scatter_nd_add(x, i, u),
      tf.tensor_scatter_nd_update(x, i, u),
      tf.tensor_scatter_nd_max(x, i, u),
    )

  fn = tfprims.convert_functional(
    f, tf.TensorSpec([5]), tf.TensorSpec([3, 1], tf.int32), tf.TensorSpec([3])
  )
  x = np.arange(5, dtype=np.float32)
  u = np.array([10.0, 20.0, 30.0], np.float32)
  good, bad = np.array([[1], [4], [1]], np.int32), np.array([[1], [5], [-1]], np.int32)
  # Dropping the bad updates is TF's result on the good ones alone.
  expected = f(x, np.array([[1]], np.int32), u[:1])
  with tfprims.override_config("runtime_checks", False):
    with pytest.raises(tfprims.RuntimeCheckError):
      fn(x, bad, u)  # known values: raise like TF
    for g, e in zip(jax.jit(fn)(x, bad, u), expected):
      np.testing.assert_array_equal(g, e.numpy())
  _tf_raises(f, x, bad, u)
  for g, e in zip(fn(x, good, u), f(x, good, u)):
    np.testing.assert_array_equal(g, e.numpy())
  with pytest.raises(tfprims.RuntimeCheckError, match=r"does not index into shape \[5\]"):
    fn(x, bad, u)


def test_variable_writers_drop_out_of_range_updates(checks_on):
  table = tf.Variable(np.arange(8, dtype=np.float32).reshape(4, 2), name="t")

  @tf.function
  def f(i, j):
    table.scatter_add(tf.IndexedSlices(tf.ones([2, 2]), i))
    table.scatter_nd_update(j, tf.fill([2, 2], -1.0))
    return tf.gather_nd(table, j)

  fn, params = tfprims.convert(f, tf.TensorSpec([2], tf.int32), tf.TensorSpec([2, 1], tf.int32))
  bad_i, bad_j = np.array([1, 9], np.int32), np.array([[7], [2]], np.int32)
  with tfprims.override_config("runtime_checks", False):
    with pytest.raises(tfprims.RuntimeCheckError):
      fn(params, bad_i, bad_j)  # known values: raise like TF
    jout, jnew = jax.jit(fn)(params, bad_i, bad_j)
  expected = np.arange(8, dtype=np.float32).reshape(4, 2)
  expected[1] += 1
  expected[2] = -1
  np.testing.assert_array_equal(jnew["t"], expected)
  np.testing.assert_array_equal(jout, [[0, 0], [-1, -1]])
  with pytest.raises(tf.errors.InvalidArgumentError):
    f(bad_i, np.array([[0], [2]], np.int32))
  with pytest.raises(tfprims.RuntimeCheckError, match=r"is not in \[0, 4\)"):
    fn(params, bad_i, np.array([[0], [2]], np.int32))
  with pytest.raises(tfprims.RuntimeCheckError, match=r"does not index into shape \[4,2\]"):
    fn(params, np.array([0, 1], np.int32), bad_j)


def test_resource_scatter_div_checks_zero_updates(checks_on):
  v = tf.Variable([4.0, 8.0], name="v")

  @tf.function
  def f(u):
    v.value()  # marks the variable as used (a raw op on v.handle alone does not)
    R.ResourceScatterDiv(resource=v.handle, indices=[0, 1], updates=u)

  fn, params = tfprims.convert(f, tf.TensorSpec([2]))
  _, new = fn(params, np.array([2.0, 4.0], np.float32))
  np.testing.assert_array_equal(new["v"], [2.0, 2.0])
  with pytest.raises(tf.errors.InvalidArgumentError, match="must not contain 0"):
    f(np.array([0.0, 1.0], np.float32))
  with pytest.raises(tfprims.RuntimeCheckError, match="must not contain 0"):
    fn(params, np.array([0.0, 1.0], np.float32))


def test_sparse_to_dense_policy_and_checks(checks_on):
  @tf.function
  def f(i, v, validate):
    return R.SparseToDense(
      sparse_indices=i,
      output_shape=[4],
      sparse_values=v,
      default_value=-1.0,
      validate_indices=validate,
    )

  def conv(validate):
    g = tf.function(lambda i, v: f(i, v, validate))
    return g, tfprims.convert_functional(g, tf.TensorSpec([3], tf.int32), tf.TensorSpec([3]))

  v = np.array([1.0, 2.0, 3.0], np.float32)
  loose, fn_loose = conv(False)
  strict, fn_strict = conv(True)
  dup = np.array([2, 0, 2], np.int32)  # unsorted, repeated: the last write wins
  np.testing.assert_array_equal(fn_loose(dup, v), loose(dup, v).numpy())
  np.testing.assert_array_equal(fn_loose(dup, v), [2, -1, 3, -1])
  _tf_raises(strict, dup, v)
  with pytest.raises(tfprims.RuntimeCheckError, match="out of order or repeated"):
    fn_strict(dup, v)
  oor = np.array([0, 1, 6], np.int32)
  _tf_raises(loose, oor, v)
  with pytest.raises(tfprims.RuntimeCheckError, match="out of bounds"):
    fn_loose(oor, v)
  with tfprims.override_config("runtime_checks", False):
    np.testing.assert_array_equal(jax.jit(fn_strict)(oor, v), [1, 2, -1, -1])


# --- semantics TF's property specs do not draw ----------------------------------------------


def test_tensor_scatter_update_duplicates_last_write_wins():
  x = np.zeros((4, 2), np.float32)
  i = np.array([[1], [2], [1], [1]], np.int32)
  u = np.arange(8, dtype=np.float32).reshape(4, 2)
  expected = R.TensorScatterUpdate(tensor=x, indices=i, updates=u).numpy()
  op = lambda x, u: tfops.TensorScatterUpdate(x, i, u, bad_indices_policy="")
  np.testing.assert_array_equal(op(x, u), expected)
  np.testing.assert_array_equal(jax.jit(op)(x, u), expected)
  # Only the last writer of a row reaches the output: its gradient is the
  # cotangent, earlier duplicates get zero (TF's gradient gives every duplicate the
  # cotangent; central differences agree with ours).
  ct = np.arange(8, dtype=np.float32).reshape(4, 2) + 1
  gx, gu = jax.grad(lambda x, u: jnp.sum(op(x, u) * ct), argnums=(0, 1))(x, u)
  np.testing.assert_array_equal(gx, [[1, 2], [0, 0], [0, 0], [7, 8]])
  np.testing.assert_array_equal(gu, [[0, 0], [5, 6], [0, 0], [3, 4]])


def test_index_forms_tf_gradients_miss():
  # int16 GatherNd indices; SparseToDense with scalar and vector indices and a scalar value.
  p = np.arange(6, dtype=np.float32).reshape(3, 2)
  i16 = np.array([[2], [0]], np.int16)
  np.testing.assert_array_equal(
    tfops.GatherNd(p, i16, bad_indices_policy=""), R.GatherNd(params=p, indices=i16).numpy()
  )
  for idx, vals in [
    (np.int32(2), np.float32(5)),
    (np.array([0, 3], np.int64), np.array([1.0, 2.0], np.float32)),
    (np.array([1, 2], np.int32), np.float32(7)),
  ]:
    expected = R.SparseToDense(
      sparse_indices=idx, output_shape=[4], sparse_values=vals, default_value=-1.0
    ).numpy()
    got = tfops.SparseToDense(idx, vals, np.float32(-1), output_shape=(4,), validate_indices=True)
    np.testing.assert_array_equal(got, expected)


def test_inplace_ops_wrap_row_indices():
  x = np.zeros((3, 2), np.float32)
  i = np.array([3, 4, -2, -4, 7], np.int32)
  v = np.arange(10, dtype=np.float32).reshape(5, 2)
  for name in ("InplaceAdd", "InplaceSub", "InplaceUpdate"):
    expected = getattr(R, name)(x=tf.constant(x), i=i, v=v).numpy()  # TF writes x in place
    op = getattr(tfops, name)
    np.testing.assert_array_equal(op(x, i, v), expected, err_msg=name)
    np.testing.assert_array_equal(jax.jit(op)(x, i, v), expected, err_msg=name)


# --- batching: batched data only, batched indices only, both ----------------------------------


_B = 3


def _batch_cases():
  rng = np.random.default_rng(7)
  x = rng.normal(size=(_B, 4, 3)).astype(np.float32)
  nd = np.stack([rng.integers(0, 4, size=(2, 1)) for _ in range(_B)]).astype(np.int32)
  rows = np.stack([rng.integers(0, 4, size=(2,)) for _ in range(_B)]).astype(np.int32)
  rows[0, 1] = 7  # out of range: dropped / zero in every layout
  u = rng.normal(size=(_B, 2, 3)).astype(np.float32)
  return [
    ("GatherNd", lambda x, i: R.GatherNd(params=x, indices=i), (x, nd), {}),
    ("Gather", lambda x, i: R.Gather(params=x, indices=i), (x, rows), {}),
    (
      "ScatterNd",
      lambda i, u: R.ScatterNd(indices=i, updates=u, shape=[4, 3]),
      (nd, u),
      {"shape": (4, 3)},
    ),
    (
      "TensorScatterUpdate",
      lambda x, i, u: R.TensorScatterUpdate(tensor=x, indices=i, updates=u),
      (x, nd, u),
      {},
    ),
    (
      "TensorScatterMax",
      lambda x, i, u: R.TensorScatterMax(tensor=x, indices=i, updates=u),
      (x, nd, u),
      {},
    ),
    ("ResourceScatterMul", None, (x, rows, u), {}),
    ("InplaceUpdate", lambda x, i, u: R.InplaceUpdate(x=x, i=i, v=u), (x, rows, u), {}),
  ]


@pytest.mark.parametrize("case", range(7))
@pytest.mark.parametrize("batched", ["data", "indices", "both"])
def test_batching_rules_map_batched_indices(case, batched):
  name, tf_fn, args, params = _batch_cases()[case]
  op = getattr(tfops, name)
  if name in ("GatherNd", "TensorScatterUpdate", "TensorScatterMax", "ScatterNd"):
    params = dict(params, bad_indices_policy="")
  if name == "Gather":
    params = dict(validate_indices=True)
  index_pos = 0 if name == "ScatterNd" else 1
  axes = [
    0 if (k == index_pos) == (batched != "data") or batched == "both" else None
    for k in range(len(args))
  ]
  if name == "ScatterNd" and batched == "data":
    axes = [None, 0]
  call_args = [a if ax == 0 else a[1] for a, ax in zip(args, axes)]
  out = jax.vmap(lambda *a: op(*a, **params), in_axes=tuple(axes))(*call_args)
  assert out.shape[0] == _B
  for b in range(_B):
    per = [a[b] if ax == 0 else a for a, ax in zip(call_args, axes)]
    np.testing.assert_allclose(out[b], op(*per, **params), rtol=1e-6, err_msg=f"{name} {b}")
    if tf_fn is not None and not (per[index_pos] >= 4).any():  # TF raises out of range
      # tf.constant copies: TF's Inplace kernels write into their input, which is the
      # numpy array's own memory when handed an aligned array directly.
      tf_out = tf_fn(*map(tf.constant, per)).numpy()
      np.testing.assert_allclose(out[b], tf_out, rtol=1e-6)
  jaxpr = jax.make_jaxpr(jax.vmap(lambda *a: op(*a, **params), in_axes=tuple(axes)))(*call_args)
  assert f"tf.{name}" in str(jaxpr) or name == "Gather"  # Gather batches as GatherV2 too
  # (vmap's own "transpose" moves a batch axis the rule left inside to out_axes=0.)
  assert not non_tf_primitives(jaxpr, allowed={"transpose"})


# --- TF names in derivative and batched jaxprs -------------------------------------------------


def test_grad_and_vmap_jaxprs_keep_tf_names():
  @tf.function
  def f(p, i, u):
    y = tf.gather_nd(p, i) * 2.0
    z = tf.tensor_scatter_nd_add(p, i, u * y)
    return tf.reduce_sum(tf.tensor_scatter_nd_min(z, i, u) ** 2)

  fn = tfprims.convert_functional(
    f, tf.TensorSpec([4, 3]), tf.TensorSpec([2, 1], tf.int32), tf.TensorSpec([2, 3])
  )
  p = np.arange(12, dtype=np.float32).reshape(4, 3)
  i = np.array([[1], [3]], np.int32)
  u = np.ones((2, 3), np.float32)
  grad = jax.make_jaxpr(jax.grad(fn, argnums=(0, 2)))(p, i, u)
  names = jaxpr_primitives(grad)
  assert {"tf.GatherNd", "tf.ScatterNd", "tf.TensorScatterAdd", "tf.TensorScatterMin"} <= names
  assert not non_tf_primitives(
    grad,
    allowed={
      "pjit",
      "add_any",
      "mul",
      "integer_pow",
      "broadcast_in_dim",
      "reduce_sum",
      "convert_element_type",
    },
  )
  batched = jax.make_jaxpr(jax.vmap(fn, in_axes=(None, 0, 0)))(
    p, np.stack([i, i[::-1]]), np.stack([u, 2 * u])
  )
  names = jaxpr_primitives(batched)
  assert {"tf.GatherNd", "tf.TensorScatterAdd", "tf.TensorScatterMin"} <= names
  g = jax.grad(fn, argnums=(0, 2))(p, i, u)
  pt, ut = tf.constant(p), tf.constant(u)
  with tf.GradientTape() as tape:
    tape.watch([pt, ut])
    loss = f(pt, i, ut)
  for a, b in zip(g, tape.gradient(loss, [pt, ut])):
    np.testing.assert_allclose(a, tf.convert_to_tensor(b).numpy(), rtol=1e-5)


def test_resource_gather_nd_grad_matches_tf():
  table = tf.Variable(np.random.default_rng(0).normal(size=(4, 3)).astype(np.float32), name="e")
  f = tf.function(lambda i: tf.gather_nd(table, i))
  fn, params = tfprims.convert(f, tf.TensorSpec([3, 1], tf.int32))
  i = np.array([[1], [3], [1]], np.int32)
  w = np.arange(9, dtype=np.float32).reshape(3, 3)
  g = jax.grad(lambda p: jnp.sum(fn(p, i)[0] * w))(params)["e"]
  with tf.GradientTape() as tape:
    loss = tf.reduce_sum(f(i) * w)
  np.testing.assert_allclose(g, tf.convert_to_tensor(tape.gradient(loss, table)), rtol=1e-6)
  assert "tf.ResourceGatherNd" in str(jax.make_jaxpr(lambda p: fn(p, i))(params))


# --- state in control flow --------------------------------------------------------------------


def test_scatter_writers_in_cond_and_while_loop():
  def make():
    acc = tf.Variable(np.zeros((4, 2), np.float32), name="acc")
    grid = tf.Variable(np.zeros((3, 3), np.float32), name="grid")

    @tf.function
    def write(k):  # a nested function called from the loop body
      grid.scatter_nd_update([[k % 3, k % 3]], [tf.cast(k, tf.float32)])
      return k

    @tf.function
    def step(x, n):
      def body(k, s):
        acc.scatter_add(tf.IndexedSlices(tf.gather(x, [k % 2]) * tf.cast(k, tf.float32), [k % 4]))
        write(k)
        grid.scatter_nd_update([[0, 2]], [s])
        return k + 1, s + tf.reduce_sum(acc)

      _, s = tf.while_loop(lambda k, s: k < n, body, [tf.constant(0), tf.constant(0.0)])

      def yes():
        acc.scatter_add(tf.IndexedSlices(x, [3, 0]))
        grid.scatter_nd_update([[1, 0], [2, 1]], [s, -s])
        return s + 1.0

      def no():
        return s - 1.0

      return tf.cond(s > 10.0, yes, no)

    return acc, grid, step

  acc, grid, step = make()
  fn, params = tfprims.convert(step, tf.TensorSpec([2, 2]), tf.TensorSpec([], tf.int32))
  x = np.array([[1.0, 2.0], [3.0, -1.0]], np.float32)
  for n in (2, 5):
    out, new = fn(params, x, np.int32(n))
    jout, jnew = jax.jit(fn)(params, x, np.int32(n))
    acc_tf, grid_tf, step_tf = make()
    ref = step_tf(tf.constant(x), tf.constant(n))
    np.testing.assert_allclose(out, ref.numpy(), rtol=1e-6)
    np.testing.assert_allclose(jout, ref.numpy(), rtol=1e-6)
    for name, var in (("acc", acc_tf), ("grid", grid_tf)):
      np.testing.assert_allclose(new[name], var.numpy(), rtol=1e-6, err_msg=f"{name} n={n}")
      np.testing.assert_allclose(jnew[name], var.numpy(), rtol=1e-6, err_msg=f"{name} n={n}")


# --- real programs ------------------------------------------------------------------------------


def test_beam_search_step_with_gather_nd():
  vocab, beams, batch = 7, 3, 2
  rng = np.random.default_rng(1)
  emb = rng.normal(size=(vocab, 4)).astype(np.float32)
  out_w = rng.normal(size=(4, vocab)).astype(np.float32)

  @tf.function
  def step(tokens, scores, history):
    # tokens [batch, beams], scores [batch, beams], history [batch, beams, t]
    h = tf.gather(emb, tokens)  # [b, k, 4]
    logp = tf.nn.log_softmax(tf.einsum("bkd,dv->bkv", h, out_w))
    total = scores[:, :, None] + logp  # [b, k, v]
    flat = tf.reshape(total, [batch, beams * vocab])
    new_scores, picks = [], []
    for _ in range(beams):  # greedy top-k by argmax
      best = tf.math.argmax(flat, axis=1, output_type=tf.int32)
      picks.append(best)
      rows = tf.stack([tf.range(batch), best], axis=1)
      new_scores.append(tf.gather_nd(flat, rows))
      flat = tf.tensor_scatter_nd_update(flat, rows, tf.fill([batch], -1e9))
    picks = tf.stack(picks, axis=1)  # [b, k]
    parent, token = picks // vocab, picks % vocab
    idx = tf.stack([tf.repeat(tf.range(batch)[:, None], beams, axis=1), parent], axis=-1)
    history = tf.concat([tf.gather_nd(history, idx), token[:, :, None]], axis=2)
    return token, tf.stack(new_scores, axis=1), history

  fn = tfprims.convert_functional(
    step,
    tf.TensorSpec([batch, beams], tf.int32),
    tf.TensorSpec([batch, beams]),
    tf.TensorSpec([batch, beams, 2], tf.int32),
  )
  tokens = np.array([[1, 2, 3], [0, 6, 5]], np.int32)
  scores = np.array([[0.0, -0.5, -1.0], [-0.1, -0.2, -3.0]], np.float32)
  history = rng.integers(0, vocab, size=(batch, beams, 2)).astype(np.int32)
  ours = fn(tokens, scores, history)
  ref = step(tokens, scores, history)
  for a, b in zip(ours, ref):
    np.testing.assert_allclose(a, b.numpy(), rtol=1e-5, atol=1e-5)
  jaxpr = jax.make_jaxpr(fn)(tokens, scores, history)
  assert "tf.GatherNd" in str(jaxpr) and "tf.TensorScatterUpdate" in str(jaxpr)
  # vmap over independent decoding states vs one call each.
  t2, s2, h2 = tokens[::-1].copy(), scores * 2, history[::-1].copy()
  batched = jax.vmap(fn)(np.stack([tokens, t2]), np.stack([scores, s2]), np.stack([history, h2]))
  for k, args in enumerate([(tokens, scores, history), (t2, s2, h2)]):
    for a, b in zip(batched, step(*args)):
      np.testing.assert_allclose(a[k], b.numpy(), rtol=1e-5, atol=1e-5)


def test_scatter_functions_grad_and_vmap_vs_tf():
  @tf.function
  def f(x, u, i):
    a = tf.scatter_nd(i, u, [5, 3])
    b = tf.tensor_scatter_nd_update(x, i[:1], u[:1] * 3.0)
    c = tf.tensor_scatter_nd_add(x, i, tf.sin(u))
    d = tf.tensor_scatter_nd_min(x, i, u)
    e = tf.tensor_scatter_nd_max(x, i, -u)
    return tf.reduce_sum(a * b) + tf.reduce_sum(c**2) + tf.reduce_sum(d * e)

  fn = tfprims.convert_functional(
    f, tf.TensorSpec([5, 3]), tf.TensorSpec([3, 3]), tf.TensorSpec([3, 1], tf.int32)
  )
  rng = np.random.default_rng(2)
  xs = rng.normal(size=(3, 5, 3)).astype(np.float32)
  us = rng.normal(size=(3, 3, 3)).astype(np.float32)
  ids = np.array([[[0], [4], [0]], [[1], [2], [3]], [[4], [4], [4]]], np.int32)
  values = jax.vmap(fn)(xs, us, ids)
  grads = jax.vmap(jax.grad(fn, argnums=(0, 1)))(xs, us, ids)
  for k in range(3):
    x, u = tf.constant(xs[k]), tf.constant(us[k])
    with tf.GradientTape() as tape:
      tape.watch([x, u])
      y = f(x, u, ids[k])
    gx, gu = tape.gradient(y, [x, u])
    np.testing.assert_allclose(values[k], y.numpy(), rtol=1e-5)
    np.testing.assert_allclose(grads[0][k], gx.numpy(), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(grads[1][k], gu.numpy(), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(jax.jit(fn)(xs[k], us[k], ids[k]), y.numpy(), rtol=1e-5)


def test_embedding_sparse_sgd_with_scatter_sub():
  rng = np.random.default_rng(3)
  table = tf.Variable(rng.normal(size=(10, 4)).astype(np.float32), name="embeddings")
  w = tf.Variable(rng.normal(size=(4, 1)).astype(np.float32), name="w")

  @tf.function
  def train_step(ids, y, lr):
    with tf.GradientTape() as tape:
      h = tf.reduce_mean(tf.nn.embedding_lookup(table, ids), axis=1)
      loss = tf.reduce_mean((tf.matmul(h, w)[:, 0] - y) ** 2)
    g_table, g_w = tape.gradient(loss, [table, w])
    # Sparse SGD: only the looked-up rows change (ResourceScatterSub).
    table.scatter_sub(tf.IndexedSlices(lr * g_table.values, g_table.indices))
    w.assign_sub(lr * g_w)
    return loss

  fn, params = tfprims.convert(
    train_step, tf.TensorSpec([3, 2], tf.int32), tf.TensorSpec([3]), tf.TensorSpec([])
  )
  jaxpr = str(
    jax.make_jaxpr(fn)(params, np.zeros((3, 2), np.int32), np.zeros(3, np.float32), np.float32(0.1))
  )
  assert "tf.ResourceScatterSub" in jaxpr
  step = jax.jit(fn)
  p = params
  for _ in range(3):
    ids = rng.integers(0, 10, size=(3, 2)).astype(np.int32)
    ids[0, 0] = ids[1, 1]  # a repeated row: its updates accumulate
    y = rng.normal(size=3).astype(np.float32)
    loss, p = step(p, ids, y, np.float32(0.5))
    ref = train_step(ids, y, tf.constant(0.5))
    np.testing.assert_allclose(loss, ref.numpy(), rtol=1e-5)
    np.testing.assert_allclose(p["embeddings"], table.numpy(), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(p["w"], w.numpy(), rtol=1e-5, atol=1e-6)


def test_keras_embedding_train_step_with_manual_update():
  keras.utils.set_random_seed(4)
  model = keras.Sequential(
    [
      keras.Input((5,), dtype="int32"),
      keras.layers.Embedding(12, 3),
      keras.layers.GlobalAveragePooling1D(),
      keras.layers.Dense(1),
    ]
  )

  @tf.function
  def train_step(x, y):
    with tf.GradientTape() as tape:
      loss = tf.reduce_mean((model(x)[:, 0] - y) ** 2)
    grads = tape.gradient(loss, model.trainable_variables)
    for var, g in zip(model.trainable_variables, grads):
      if isinstance(g, tf.IndexedSlices):  # the embedding table: a sparse update
        var.value.scatter_sub(tf.IndexedSlices(0.1 * g.values, g.indices))
      else:
        var.assign_sub(0.1 * g)
    return loss

  fn, params = tfprims.convert(train_step, tf.TensorSpec([4, 5], tf.int32), tf.TensorSpec([4]))
  rng = np.random.default_rng(5)
  p = params
  for _ in range(2):
    x = rng.integers(0, 12, size=(4, 5)).astype(np.int32)
    y = rng.normal(size=4).astype(np.float32)
    loss, p = fn(p, x, y)
    ref = train_step(x, y)
    np.testing.assert_allclose(loss, ref.numpy(), rtol=1e-5)
    for name, var in fn.tf_variables.items():
      np.testing.assert_allclose(p[name], var.numpy(), rtol=1e-5, atol=1e-6, err_msg=name)
  assert any("embeddings" in k for k in p)
  assert not np.allclose(
    p[[k for k in p if "embeddings" in k][0]], params[[k for k in p if "embeddings" in k][0]]
  )
