"""Recurrent block ops (TF1 ``LSTMBlockCell``/``GRUBlockCell``, ``BlockLSTM`` over time,
Keras 2's ``BlockLSTMV2``) and their grad ops.

Values follow TF's CPU kernels (lstm_ops.h, gru_ops.h): LSTM gates from
``[x, h_prev] @ w + b`` in TF's column order (``i, ci, f, o`` for LSTMBlockCell and
BlockLSTM, ``i, f, ci, o`` for BlockLSTMV2), optional peepholes, ``cs`` clipped to
``[-cell_clip, cell_clip]`` when ``cell_clip > 0``. BlockLSTM runs the cell over time
with ``lax.scan``; ``seq_len_max`` is a data input (steps at or past it give zeros).

Derivatives are TF's (its registered gradients call the Grad ops): only the ``cs`` and
``h`` outputs carry derivatives, and the cell clip passes derivatives straight through.
The JVPs are written with TF ops (MatMul, Mul, SigmoidGrad, TanhGrad, ConcatV2, Split),
so grad jaxprs keep TF names; BlockLSTM's JVP scans that tangent over time. The Grad
ops have no TF gradient and use the derived rules. Batching folds the vmapped axis
into the batch axis when the weights (and ``seq_len_max``) are shared, and otherwise
falls back to ``jax.vmap`` of the impl (per-example weights have no TF-op form).
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from tfprims import derived, rules
from tfprims.core import register_op, tfops

# --------------------------------------------------------------------------
# Forward cells
# --------------------------------------------------------------------------


def _gates(g, layout):
  """Pre-activations split in (i, ci, f, o) order from TF's column layout."""
  gi, g1, g2, go = jnp.split(g, 4, axis=1)
  return (gi, g1, g2, go) if layout == "icfo" else (gi, g2, g1, go)


def _lstm_step(
  x, cs_prev, h_prev, w, wci, wcf, wco, b, *, forget_bias, cell_clip, use_peephole, layout
):
  xh = jnp.concatenate([x, h_prev], axis=1)
  gi, gc, gf, go = _gates(jnp.matmul(xh, w) + b, layout)
  if use_peephole:
    gi = gi + cs_prev * wci
    gf = gf + cs_prev * wcf
  i = jax.nn.sigmoid(gi)
  f = jax.nn.sigmoid(gf + np.array(forget_bias, x.dtype))
  ci = jnp.tanh(gc)
  cs = ci * i + cs_prev * f
  if cell_clip > 0:
    cs = jnp.clip(cs, -np.array(cell_clip, x.dtype), np.array(cell_clip, x.dtype))
  o = jax.nn.sigmoid(go + cs * wco if use_peephole else go)
  co = jnp.tanh(cs)
  return i, cs, f, o, ci, co, co * o


def _lstm_block_cell(
  x, cs_prev, h_prev, w, wci, wcf, wco, b, *, forget_bias=1.0, cell_clip=3.0, use_peephole=False
):
  """TF LSTMBlockCell: one LSTM step, outputs (i, cs, f, o, ci, co, h) (gate columns
  i, ci, f, o; forget_bias added to f; cs clipped when cell_clip > 0)."""
  return _lstm_step(
    x,
    cs_prev,
    h_prev,
    w,
    wci,
    wcf,
    wco,
    b,
    forget_bias=forget_bias,
    cell_clip=cell_clip,
    use_peephole=use_peephole,
    layout="icfo",
  )


def _steps(seq_len_max, t):
  """Per-step validity mask (t < seq_len_max)."""
  return jnp.arange(t) < jnp.clip(seq_len_max.astype(jnp.int32), 0, t)


def _block_lstm(
  seq_len_max,
  x,
  cs_prev,
  h_prev,
  w,
  wci,
  wcf,
  wco,
  b,
  *,
  forget_bias,
  cell_clip,
  use_peephole,
  layout,
):
  t = x.shape[0]
  valid = _steps(seq_len_max, t)
  step = functools.partial(
    _lstm_step,
    w=w,
    wci=wci,
    wcf=wcf,
    wco=wco,
    b=b,
    forget_bias=forget_bias,
    cell_clip=cell_clip,
    use_peephole=use_peephole,
    layout=layout,
  )

  def body(carry, inp):
    cs_p, h_p = carry
    xt, ok = inp
    outs = step(xt, cs_p, h_p)
    outs = tuple(jnp.where(ok, o, jnp.zeros_like(o)) for o in outs)
    return (outs[1], outs[6]), outs

  _, outs = lax.scan(body, (cs_prev, h_prev), (x, valid))
  return tuple(outs)


def _block_lstm_v1(
  seq_len_max,
  x,
  cs_prev,
  h_prev,
  w,
  wci,
  wcf,
  wco,
  b,
  *,
  forget_bias=1.0,
  cell_clip=3.0,
  use_peephole=False,
):
  """TF BlockLSTM: LSTMBlockCell over time ([time, batch, input]); steps at or past
  seq_len_max give zeros."""
  return _block_lstm(
    seq_len_max,
    x,
    cs_prev,
    h_prev,
    w,
    wci,
    wcf,
    wco,
    b,
    forget_bias=forget_bias,
    cell_clip=cell_clip,
    use_peephole=use_peephole,
    layout="icfo",
  )


def _block_lstm_v2(
  seq_len_max, x, cs_prev, h_prev, w, wci, wcf, wco, b, *, cell_clip=0.0, use_peephole=False
):
  """TF BlockLSTMV2: BlockLSTM with Keras' gate columns (i, f, ci, o) and no forget
  bias."""
  return _block_lstm(
    seq_len_max,
    x,
    cs_prev,
    h_prev,
    w,
    wci,
    wcf,
    wco,
    b,
    forget_bias=0.0,
    cell_clip=cell_clip,
    use_peephole=use_peephole,
    layout="ifco",
  )


def _gru_block_cell(x, h_prev, w_ru, w_c, b_ru, b_c):
  """TF GRUBlockCell: (r, u, c, h) with r, u = sigmoid([x, h_prev] @ w_ru + b_ru),
  c = tanh([x, r * h_prev] @ w_c + b_c), h = u * h_prev + (1 - u) * c."""
  ru = jax.nn.sigmoid(jnp.matmul(jnp.concatenate([x, h_prev], 1), w_ru) + b_ru)
  r, u = jnp.split(ru, 2, axis=1)
  c = jnp.tanh(jnp.matmul(jnp.concatenate([x, r * h_prev], 1), w_c) + b_c)
  return r, u, c, u * h_prev + (1 - u) * c


# --------------------------------------------------------------------------
# Grad ops (what TF's registered gradients call)
# --------------------------------------------------------------------------


def _lstm_cell_grad(
  cs_prev, i, cs, f, o, ci, co, cs_grad, h_grad, wci, wcf, wco, *, use_peephole, layout
):
  """(cs_prev_grad, dicfo, wci_grad, wcf_grad, wco_grad) of one step (lstm_ops.h)."""
  do = o * (1 - o) * (h_grad * co)
  dcs = (1 - co * co) * h_grad * o + cs_grad
  if use_peephole:
    dcs = dcs + do * wco
  dci = (1 - ci * ci) * (dcs * i)
  df = f * (1 - f) * (dcs * cs_prev)
  di = i * (1 - i) * (dcs * ci)
  dicfo = jnp.concatenate([di, dci, df, do] if layout == "icfo" else [di, df, dci, do], 1)
  cs_prev_grad = dcs * f
  if use_peephole:
    cs_prev_grad = cs_prev_grad + di * wci + df * wcf
    return (
      cs_prev_grad,
      dicfo,
      jnp.sum(di * cs_prev, 0),
      jnp.sum(df * cs_prev, 0),
      jnp.sum(do * cs, 0),
    )
  zeros = jnp.zeros_like(wci)
  return cs_prev_grad, dicfo, zeros, zeros, zeros


def _lstm_block_cell_grad(
  x, cs_prev, h_prev, w, wci, wcf, wco, b, i, cs, f, o, ci, co, cs_grad, h_grad, *, use_peephole
):
  """TF LSTMBlockCellGrad: (cs_prev_grad, dicfo, wci_grad, wcf_grad, wco_grad) from the
  forward outputs and the cs/h gradients (the cell clip is passed straight through)."""
  del x, h_prev, w, b
  return _lstm_cell_grad(
    cs_prev,
    i,
    cs,
    f,
    o,
    ci,
    co,
    cs_grad,
    h_grad,
    wci,
    wcf,
    wco,
    use_peephole=use_peephole,
    layout="icfo",
  )


def _block_lstm_grad(
  seq_len_max,
  x,
  cs_prev,
  h_prev,
  w,
  wci,
  wcf,
  wco,
  b,
  i,
  cs,
  f,
  o,
  ci,
  co,
  h,
  cs_grad,
  h_grad,
  *,
  use_peephole,
  layout,
):
  del b
  t, n = x.shape[0], x.shape[2]
  valid = _steps(seq_len_max, t)
  cs_prevs = jnp.concatenate([cs_prev[None], cs[:-1]], 0)
  h_prevs = jnp.concatenate([h_prev[None], h[:-1]], 0)

  def body(carry, inp):
    dcs_next, dh_next, dw, dwci, dwcf, dwco, db = carry
    xt, csp, hp, it, cst, ft, ot, cit, cot, csg, hg, ok = inp
    csp_grad, dicfo, gci, gcf, gco = _lstm_cell_grad(
      csp,
      it,
      cst,
      ft,
      ot,
      cit,
      cot,
      csg + dcs_next,
      hg + dh_next,
      wci,
      wcf,
      wco,
      use_peephole=use_peephole,
      layout=layout,
    )
    dicfo = jnp.where(ok, dicfo, 0)
    xh = jnp.concatenate([xt, hp], 1)
    xh_grad = jnp.matmul(dicfo, w.T)
    new = (
      jnp.where(ok, csp_grad, dcs_next),
      jnp.where(ok, xh_grad[:, n:], dh_next),
      dw + jnp.matmul(xh.T, dicfo),
      dwci + jnp.where(ok, gci, 0),
      dwcf + jnp.where(ok, gcf, 0),
      dwco + jnp.where(ok, gco, 0),
      db + jnp.sum(dicfo, 0),
    )
    return new, xh_grad[:, :n]

  zeros = lambda a: jnp.zeros_like(a)
  init = (
    zeros(cs_prev),
    zeros(h_prev),
    zeros(w),
    zeros(wci),
    zeros(wcf),
    zeros(wco),
    jnp.zeros((w.shape[1],), w.dtype),
  )
  carry, x_grad = lax.scan(
    body, init, (x, cs_prevs, h_prevs, i, cs, f, o, ci, co, cs_grad, h_grad, valid), reverse=True
  )
  dcs, dh, dw, dwci, dwcf, dwco, db = carry
  # TF's kernel accumulates these from +0.0 (gemm, zeroed sums): an exact zero is +0.0,
  # where XLA keeps a one-term -0.0 product (steps past seq_len_max, -0.0 inputs)
  plus = lambda a: jnp.where(a == 0, jnp.zeros((), a.dtype), a)
  return (plus(x_grad), dcs, plus(dh), plus(dw), plus(dwci), plus(dwcf), plus(dwco), plus(db))


def _block_lstm_grad_v1(*args, use_peephole):
  """TF BlockLSTMGrad: gradients of BlockLSTM's inputs from its outputs and the cs/h
  gradients of every step (TF's backward loop over steps before seq_len_max)."""
  return _block_lstm_grad(*args, use_peephole=use_peephole, layout="icfo")


def _block_lstm_grad_v2(*args, use_peephole):
  """TF BlockLSTMGradV2: BlockLSTMGrad for BlockLSTMV2's gate columns (i, f, ci, o)."""
  return _block_lstm_grad(*args, use_peephole=use_peephole, layout="ifco")


def _gru_block_cell_grad(x, h_prev, w_ru, w_c, b_ru, b_c, r, u, c, d_h):
  """TF GRUBlockCellGrad: (d_x, d_h_prev, d_c_bar, d_r_bar_u_bar) (gru_ops.h)."""
  del b_ru, b_c
  n = x.shape[1]
  d_c_bar = d_h * (1 - u) * (1 - c * c)
  d_u_bar = d_h * (h_prev - c) * u * (1 - u)
  d_rh = jnp.matmul(d_c_bar, w_c.T)[:, n:]
  d_r_bar = d_rh * h_prev * r * (1 - r)
  d_r_bar_u_bar = jnp.concatenate([d_r_bar, d_u_bar], 1)
  d_xh_ru = jnp.matmul(d_r_bar_u_bar, w_ru.T)
  d_x_c = jnp.matmul(d_c_bar, w_c.T)[:, :n]
  d_x = d_xh_ru[:, :n] + d_x_c
  d_h_prev = d_xh_ru[:, n:] + d_rh * r + d_h * u
  return d_x, d_h_prev, d_c_bar, d_r_bar_u_bar


# --------------------------------------------------------------------------
# JVPs (TF's derivatives, with TF ops)
# --------------------------------------------------------------------------


def _zeros_like(v):
  return rules.zeros(rules.shape_of(v), rules.dtype_of(v))


def _lstm_tangent(
  x, cs_prev, h_prev, w, wci, wcf, wco, b, i, cs, f, o, ci, co, tans, *, use_peephole, layout
):
  """(dcs, dh) of one LSTM step: the transpose of TF's LSTMBlockCellGrad and the
  MatMuls of its registered gradient (the clip passes tangents straight through)."""
  dx, dcs_prev, dh_prev, dw, dwci, dwcf, dwco, db = tans
  xh = tfops.ConcatV2(x, h_prev, axis=1)
  dxh = tfops.ConcatV2(dx, dh_prev, axis=1)
  mm = lambda a, c: tfops.MatMul(a, c, transpose_a=False, transpose_b=False)
  dg = tfops.AddV2(tfops.AddV2(mm(dxh, w), mm(xh, dw)), db)
  dgi, d1, d2, dgo = tfops.Split(dg, axis=1, num_split=4)
  dgc, dgf = (d1, d2) if layout == "icfo" else (d2, d1)
  add, mul = tfops.AddV2, tfops.Mul
  if use_peephole:
    dgi = add(dgi, add(mul(dcs_prev, wci), mul(cs_prev, dwci)))
    dgf = add(dgf, add(mul(dcs_prev, wcf), mul(cs_prev, dwcf)))
  di, df = tfops.SigmoidGrad(i, dgi), tfops.SigmoidGrad(f, dgf)
  dci = tfops.TanhGrad(ci, dgc)
  dcs = add(add(mul(dci, i), mul(ci, di)), add(mul(dcs_prev, f), mul(cs_prev, df)))
  if use_peephole:
    dgo = add(dgo, add(mul(dcs, wco), mul(cs, dwco)))
  do = tfops.SigmoidGrad(o, dgo)
  dh = add(mul(tfops.TanhGrad(co, dcs), o), mul(co, do))
  return dcs, dh


def _lstm_cell_jvp(primals, tangents, **p):
  outs = tfops.LSTMBlockCell(*primals, **p)
  tans = [rules.instantiate(t) for t in tangents]
  dcs, dh = _lstm_tangent(*primals, *outs[:6], tans, use_peephole=p["use_peephole"], layout="icfo")
  z = rules.zero_tangent
  return outs, [z(outs[0]), dcs, z(outs[2]), z(outs[3]), z(outs[4]), z(outs[5]), dh]


def _block_lstm_jvp(op, layout):
  def rule(primals, tangents, **p):
    outs = op(*primals, **p)
    seq_len_max, x, cs_prev, h_prev, *weights = primals
    _, dx, dcs0, dh0, *dweights = [rules.instantiate(t) for t in tangents]
    i, cs, f, o, ci, co, h = outs
    valid = _steps(seq_len_max, x.shape[0])
    cs_prevs = tfops.ConcatV2(tfops.ExpandDims(cs_prev, axis=0), cs[:-1], axis=0)
    h_prevs = tfops.ConcatV2(tfops.ExpandDims(h_prev, axis=0), h[:-1], axis=0)

    def body(carry, inp):
      dcs_p, dh_p = carry
      xt, csp, hp, it, cst, ft, ot, cit, cot, dxt, ok = inp
      dcs, dh = _lstm_tangent(
        xt,
        csp,
        hp,
        *weights,
        it,
        cst,
        ft,
        ot,
        cit,
        cot,
        [dxt, dcs_p, dh_p, *dweights],
        use_peephole=p["use_peephole"],
        layout=layout,
      )
      dcs = tfops.SelectV2(ok, dcs, _zeros_like(dcs))
      dh = tfops.SelectV2(ok, dh, _zeros_like(dh))
      return (dcs, dh), (dcs, dh)

    _, (dcs, dh) = lax.scan(
      body, (dcs0, dh0), (x, cs_prevs, h_prevs, i, cs, f, o, ci, co, dx, valid)
    )
    z = rules.zero_tangent
    return outs, [z(i), dcs, z(f), z(o), z(ci), z(co), dh]

  return rule


def _gru_tangent(x, h_prev, w_ru, w_c, b_ru, b_c, r, u, c, tans):
  """(dr, du, dc, dh) of one GRU step, with TF ops."""
  dx, dh_prev, dw_ru, dw_c, db_ru, db_c = tans
  mm = lambda a, m: tfops.MatMul(a, m, transpose_a=False, transpose_b=False)
  add, mul = tfops.AddV2, tfops.Mul
  xh = tfops.ConcatV2(x, h_prev, axis=1)
  dxh = tfops.ConcatV2(dx, dh_prev, axis=1)
  dru = add(add(mm(dxh, w_ru), mm(xh, dw_ru)), db_ru)
  dr_bar, du_bar = tfops.Split(dru, axis=1, num_split=2)
  dr, du = tfops.SigmoidGrad(r, dr_bar), tfops.SigmoidGrad(u, du_bar)
  rh = tfops.ConcatV2(x, mul(r, h_prev), axis=1)
  drh = tfops.ConcatV2(dx, add(mul(dr, h_prev), mul(r, dh_prev)), axis=1)
  dc = tfops.TanhGrad(c, add(add(mm(drh, w_c), mm(rh, dw_c)), db_c))
  # h = u * h_prev + (1 - u) * c
  dh = add(add(mul(du, tfops.Sub(h_prev, c)), mul(u, dh_prev)), tfops.Sub(dc, mul(u, dc)))
  return dr, du, dc, dh


def _gru_cell_jvp(primals, tangents):
  outs = tfops.GRUBlockCell(*primals)
  tans = [rules.instantiate(t) for t in tangents]
  return outs, list(_gru_tangent(*primals, *outs[:3], tans))


# --------------------------------------------------------------------------
# Batching
# --------------------------------------------------------------------------


def _fold_batching(op, impl, batch_axes, out_axis):
  """vmap of a forward op: with shared weights (operands whose ``batch_axes`` entry is
  None unbatched) the vmapped axis is merged into the examples' batch axis around one
  call of the op; per-example weights fall back to ``jax.vmap`` of the impl."""
  fallback = derived.vmap_batching(impl, True)

  def rule(args, dims, **p):
    if any(d is not None for d, ax in zip(dims, batch_axes) if ax is None):
      return fallback(args, dims, **p)
    size = rules.batch_size(args, dims)
    merged = []
    for a, d, ax in zip(args, dims, batch_axes):
      if ax is not None:
        a = rules.with_batch_axis(a, d, size)
        shape = rules.shape_of(a)
        if ax:
          a = rules.move_axes(a, [0], [ax])
          shape = rules.shape_of(a)
        a = rules.reshape(a, shape[:ax] + (size * shape[ax + 1],) + shape[ax + 2 :])
      merged.append(a)
    outs = op(*merged, **p)
    split = []
    for o in outs:
      shape = rules.shape_of(o)
      split.append(
        rules.reshape(
          o,
          shape[:out_axis] + (size, shape[out_axis] // size if size else 0) + shape[out_axis + 1 :],
        )
      )
    return split, [out_axis] * len(outs)

  return rule


# --------------------------------------------------------------------------
# Specs
# --------------------------------------------------------------------------

_LSTM_DTYPES = ("float32", "float16")
_TOL = dict(rtol={"float16": 2e-2}, atol={"float16": 2e-2})


def _arr(st, dtype, shape, bound=1.5):
  return st.arrays(dtype, shape, special=False, min_value=-bound, max_value=bound)


def _lstm_inputs(draw, st, dtype, time=None):
  b, n, hsz = (draw(st.integers(1, 3)) for _ in range(3))
  xshape = (b, n) if time is None else (time, b, n)
  return dict(
    x=draw(_arr(st, dtype, xshape)),
    cs_prev=draw(_arr(st, dtype, (b, hsz))),
    h_prev=draw(_arr(st, dtype, (b, hsz))),
    w=draw(_arr(st, dtype, (n + hsz, 4 * hsz), 1.0)),
    wci=draw(_arr(st, dtype, (hsz,))),
    wcf=draw(_arr(st, dtype, (hsz,))),
    wco=draw(_arr(st, dtype, (hsz,))),
    b=draw(_arr(st, dtype, (4 * hsz,))),
  )


def _lstm_attrs(draw, st, v2=False):
  attrs = dict(
    cell_clip=draw(st.sampled_from([3.0, 0.0, 0.5] if not v2 else [0.0, 3.0, 0.5])),
    use_peephole=draw(st.booleans()),
  )
  if not v2:
    attrs["forget_bias"] = draw(st.sampled_from([1.0, 0.0, 0.5]))
  return attrs


def _cell_calls(st, grad):
  @st.composite
  def draw_call(draw):
    dtype = draw(st.sampled_from(_LSTM_DTYPES))
    call = _lstm_inputs(draw, st, dtype)
    attrs = _lstm_attrs(draw, st)
    if not grad:
      return dict(call, **attrs)
    from tfprims.ops.nn._specs import _tf_call

    outs = _tf_call("LSTMBlockCell", dict(call, **attrs))
    shape = call["cs_prev"].shape
    call.update(zip(("i", "cs", "f", "o", "ci", "co"), (t.numpy() for t in outs[:6])))
    return dict(
      call,
      cs_grad=draw(_arr(st, dtype, shape)),
      h_grad=draw(_arr(st, dtype, shape)),
      use_peephole=attrs["use_peephole"],
    )

  return draw_call()


def _block_calls(st, v2, grad):
  @st.composite
  def draw_call(draw):
    dtype = draw(st.sampled_from(_LSTM_DTYPES))
    time = draw(st.integers(1, 3))
    call = _lstm_inputs(draw, st, dtype, time)
    attrs = _lstm_attrs(draw, st, v2)
    # TF leaves i, f, o, ci, co uninitialised past seq_len_max (tests/test_rnn_blocks.py)
    steps = draw(st.integers(0, time)) if grad else time
    call = dict(seq_len_max=np.array(steps, np.int64), **call)
    if not grad:
      return dict(call, **attrs)
    from tfprims.ops.nn._specs import _tf_call

    outs = _tf_call("BlockLSTMV2" if v2 else "BlockLSTM", dict(call, **attrs))
    for name, out in zip(("i", "cs", "f", "o", "ci", "co", "h"), outs):
      out = out.numpy().copy()
      out[steps:] = 0
      call[name] = out
    shape = call["h"].shape
    return dict(
      call,
      cs_grad=draw(_arr(st, dtype, shape)),
      h_grad=draw(_arr(st, dtype, shape)),
      use_peephole=attrs["use_peephole"],
    )

  return draw_call()


def _gru_calls(st, grad):
  @st.composite
  def draw_call(draw):
    b, n, hsz = (draw(st.integers(1, 3)) for _ in range(3))
    d = "float32"
    call = dict(
      x=draw(_arr(st, d, (b, n))),
      h_prev=draw(_arr(st, d, (b, hsz))),
      w_ru=draw(_arr(st, d, (n + hsz, 2 * hsz), 1.0)),
      w_c=draw(_arr(st, d, (n + hsz, hsz), 1.0)),
      b_ru=draw(_arr(st, d, (2 * hsz,))),
      b_c=draw(_arr(st, d, (hsz,))),
    )
    if grad:
      from tfprims.ops.nn._specs import _tf_call

      r, u, c, _ = _tf_call("GRUBlockCell", call)
      call.update(r=r.numpy(), u=u.numpy(), c=c.numpy(), d_h=draw(_arr(st, d, (b, hsz))))
    return call

  return draw_call()


_DERIV_NOTE = (
  "Derivatives are TF's registered gradient: only cs and h carry them and "
  "the cell clip passes them straight through."
)

_CELL_NOTE = (
  " TF 2 registers no gradient for LSTMBlockCell: ours is TF 1's (tf.contrib's, "
  "LSTMBlockCellGrad and MatMuls), checked in tests/test_rnn_blocks.py."
)
_V2_SKIP = (
  "TF's registered gradient of BlockLSTMV2 calls BlockLSTMGrad, which reads the "
  "weights in BlockLSTM's gate order (i, ci, f, o), not V2's (i, f, ci, o); ours is "
  "BlockLSTMGradV2's: tests/test_rnn_blocks.py checks it against TF's kernel."
)

# --------------------------------------------------------------------------
# Declarations
# --------------------------------------------------------------------------

_LSTM_ATTRS = ("forget_bias", "cell_clip", "use_peephole")
_CELL_AXES = (0, 0, 0, None, None, None, None, None)
_BLOCK_AXES = (None, 1, 0, 0, None, None, None, None, None)

LSTMBlockCell = register_op(
  "LSTMBlockCell",
  _lstm_block_cell,
  family="nn",
  attrs=_LSTM_ATTRS,
  multiple_results=True,
  jvp=_lstm_cell_jvp,
  batching=rules.per_op(_fold_batching, _lstm_block_cell, _CELL_AXES, 0),
  spec=lambda st: st.Spec(_cell_calls(st, False), note=_DERIV_NOTE + _CELL_NOTE, **_TOL),
)

BlockLSTM = register_op(
  "BlockLSTM",
  _block_lstm_v1,
  family="nn",
  attrs=_LSTM_ATTRS,
  multiple_results=True,
  jvp=rules.per_op(_block_lstm_jvp, "icfo"),
  batching=rules.per_op(_fold_batching, _block_lstm_v1, _BLOCK_AXES, 1),
  spec=lambda st: st.Spec(_block_calls(st, False, False), note=_DERIV_NOTE, **_TOL),
)

BlockLSTMV2 = register_op(
  "BlockLSTMV2",
  _block_lstm_v2,
  family="nn",
  attrs=("cell_clip", "use_peephole"),
  multiple_results=True,
  jvp=rules.per_op(_block_lstm_jvp, "ifco"),
  batching=rules.per_op(_fold_batching, _block_lstm_v2, _BLOCK_AXES, 1),
  spec=lambda st: st.Spec(
    _block_calls(st, True, False), note=_DERIV_NOTE, skip={"jvp": _V2_SKIP, "vjp": _V2_SKIP}, **_TOL
  ),
)

GRUBlockCell = register_op(
  "GRUBlockCell",
  _gru_block_cell,
  family="nn",
  multiple_results=True,
  jvp=_gru_cell_jvp,
  batching=rules.per_op(_fold_batching, _gru_block_cell, (0, 0, None, None, None, None), 0),
  spec=lambda st: st.Spec(
    _gru_calls(st, False),
    grad_oracle="fd",
    note="TF has no gradient for GRUBlockCell: derivatives are "
    "checked against central differences.",
  ),
)

LSTMBlockCellGrad = register_op(
  "LSTMBlockCellGrad",
  _lstm_block_cell_grad,
  family="nn",
  attrs=("use_peephole",),
  multiple_results=True,
  spec=lambda st: st.Spec(_cell_calls(st, True), **_TOL),
)

BlockLSTMGrad = register_op(
  "BlockLSTMGrad",
  _block_lstm_grad_v1,
  family="nn",
  attrs=("use_peephole",),
  multiple_results=True,
  spec=lambda st: st.Spec(_block_calls(st, False, True), **_TOL),
)

BlockLSTMGradV2 = register_op(
  "BlockLSTMGradV2",
  _block_lstm_grad_v2,
  family="nn",
  attrs=("use_peephole",),
  multiple_results=True,
  spec=lambda st: st.Spec(_block_calls(st, True, True), **_TOL),
)

GRUBlockCellGrad = register_op(
  "GRUBlockCellGrad",
  _gru_block_cell_grad,
  family="nn",
  multiple_results=True,
  spec=lambda st: st.Spec(_gru_calls(st, True)),
)
