"""cuDNN RNN ops (``CudnnRNN``, V2, V3, their Backprop ops and the params layout ops),
computed in JAX on any backend (TF has GPU kernels only; Keras 2's LSTM/GRU export
``CudnnRNNV3`` in their GPU function).

Values follow cuDNN's equations (docs/semantics/nn.md, cuDNN RNNs): ``rnn_mode`` lstm
(gates i, f, c, o; ``c' = f c + i c~``, ``h' = o tanh(c')``), gru (gates r, z, h;
``h~ = tanh(W x + b_W + r (R h + b_R))``, ``h' = (1 - z) h~ + z h``), rnn_tanh and
rnn_relu. The params blob is the canonical layout: every weight matrix (per layer, per
direction: the input matrices of each gate, then the recurrent ones; each
``[num_units, width]``, row-major) and then every bias (input biases, then recurrent
biases), which is what Keras builds for cuDNN. Bidirectional layers concatenate the
forward and backward outputs; ``output_h``/``output_c`` are indexed ``layer * dirs +
dir``. ``sequence_lengths`` (V3): outputs past a sequence's length are zero, the
backward direction starts at each sequence's last valid step and the final states are
those of the last valid step. Dropout is ignored (inference); ``reserve_space`` and
``host_reserved`` are empty (the Backprop ops recompute). Non-LSTM modes give a scalar
zero ``output_c``. ``input_mode`` skip_input (and auto_select when input_size ==
num_units) and ``num_proj`` > 0 raise :class:`tfprims.errors.ConversionError`.

Derivatives are TF's: CudnnRNN's VJP is CudnnRNNBackprop (its registered gradient),
reached through the transpose of the linear ``tf.CudnnRNN.tangent`` primitive (whose
value is ``jax.jvp`` of the impl). The Backprop ops are ``jax.vjp`` of the impl and use
the derived rules. The layout ops are pure reshapes/slices of static layout.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax
from jax.extend.core import Primitive
from jax.interpreters import ad, batching, mlir

from tfprims import derived, errors, rules
from tfprims.core import register_op, tfops
from tfprims.dtypes import canonical_dtype
from tfprims.errors import import_tensorflow

_GATES = {"lstm": 4, "gru": 3, "rnn_tanh": 1, "rnn_relu": 1}


def _dirs(direction):
  if direction not in ("unidirectional", "bidirectional"):
    raise errors.ConversionError(f"CudnnRNN: unknown direction {direction!r}")
  return 2 if direction == "bidirectional" else 1


def _validate(rnn_mode, input_mode, input_size, num_units, num_proj=0):
  if rnn_mode not in _GATES:
    raise errors.ConversionError(f"CudnnRNN: unknown rnn_mode {rnn_mode!r}")
  skip = input_mode == "skip_input" or (input_mode == "auto_select" and input_size == num_units)
  if skip:
    raise errors.ConversionError(
      "CudnnRNN: input_mode skip_input (auto_select with input_size == num_units) is "
      "not supported: its params layout has no first-layer input weights"
    )
  if input_mode not in ("linear_input", "auto_select"):
    raise errors.ConversionError(f"CudnnRNN: unknown input_mode {input_mode!r}")
  if num_proj:
    raise errors.ConversionError("CudnnRNN: LSTM projection (num_proj > 0) is not supported")


def canonical_shapes(rnn_mode, direction, num_layers, num_units, input_size):
  """Shapes of the canonical weights and biases, in params order."""
  g, d = _GATES[rnn_mode], _dirs(direction)
  weights, biases = [], []
  for layer in range(num_layers):
    width = input_size if layer == 0 else num_units * d
    for _ in range(d):
      weights += [(num_units, width)] * g + [(num_units, num_units)] * g
      biases += [(num_units,)] * (2 * g)
  return weights, biases


def _unpack(params, rnn_mode, direction, num_layers, num_units, input_size):
  """Per (layer, direction): (W [g*H, width], R [g*H, H], b_W [g*H], b_R [g*H])."""
  g = _GATES[rnn_mode]
  wshapes, bshapes = canonical_shapes(rnn_mode, direction, num_layers, num_units, input_size)
  offset, mats = 0, []
  for shape in wshapes:
    size = int(np.prod(shape))
    mats.append(params[offset : offset + size].reshape(shape))
    offset += size
  vecs = []
  for shape in bshapes:
    vecs.append(params[offset : offset + shape[0]])
    offset += shape[0]
  cells = []
  for k in range(len(wshapes) // (2 * g)):
    m, v = mats[2 * g * k : 2 * g * (k + 1)], vecs[2 * g * k : 2 * g * (k + 1)]
    cells.append(
      (
        jnp.concatenate(m[:g], 0),
        jnp.concatenate(m[g:], 0),
        jnp.concatenate(v[:g], 0),
        jnp.concatenate(v[g:], 0),
      )
    )
  return cells


def _cell(rnn_mode, xw, h, c, r, b_r):
  """One step from the input projection ``xw = W x + b_W``: (h', c')."""
  hr = jnp.matmul(h, r.T) + b_r
  if rnn_mode == "lstm":
    gi, gf, gc, go = jnp.split(xw + hr, 4, axis=-1)
    c = jax.nn.sigmoid(gf) * c + jax.nn.sigmoid(gi) * jnp.tanh(gc)
    return jax.nn.sigmoid(go) * jnp.tanh(c), c
  if rnn_mode == "gru":
    xr, xz, xh = jnp.split(xw, 3, axis=-1)
    hr_, hz, hh = jnp.split(hr, 3, axis=-1)
    reset, update = jax.nn.sigmoid(xr + hr_), jax.nn.sigmoid(xz + hz)
    cand = jnp.tanh(xh + reset * hh)
    return (1 - update) * cand + update * h, c
  pre = xw + hr
  # tf.Relu: NaN kept, and derivative 0 at 0 (TF's ReluGrad; jnp.maximum's is 1/2).
  return (jnp.tanh(pre) if rnn_mode == "rnn_tanh" else tfops.Relu(pre)), c


def _run(rnn_mode, x, h0, c0, cell, valid):
  """One direction over time ([T, B, I]); steps with ``valid`` False keep the state
  and output zeros."""
  w, r, b_w, b_r = cell
  xw = jnp.einsum("tbi,gi->tbg", x, w) + b_w

  def body(carry, inp):
    h, c = carry
    xt, ok = inp
    h2, c2 = _cell(rnn_mode, xt, h, c, r, b_r)
    ok = ok[:, None]
    return (jnp.where(ok, h2, h), jnp.where(ok, c2, c)), jnp.where(ok, h2, 0)

  (h, c), ys = lax.scan(body, (h0, c0), (xw, valid))
  return ys, h, c


def _reverse_index(lengths, t):
  """[T, B] time index reversing each sequence within its length (an involution)."""
  steps = jnp.arange(t)[:, None]
  return jnp.where(steps < lengths[None, :], lengths[None, :] - 1 - steps, steps)


def _rnn(x, h0, c0, params, lengths, *, rnn_mode, direction, input_mode):
  """The RNN over time-major ``x``: (output, output_h, output_c)."""
  t, _, input_size = x.shape
  num_units, d = h0.shape[-1], _dirs(direction)
  num_layers = h0.shape[0] // d
  _validate(rnn_mode, input_mode, input_size, num_units)
  cells = _unpack(params, rnn_mode, direction, num_layers, num_units, input_size)
  lengths = jnp.clip(lengths.astype(jnp.int32), 0, t)
  valid = jnp.arange(t)[:, None] < lengths[None, :]
  rev = _reverse_index(lengths, t)
  lstm = rnn_mode == "lstm"
  hs, cs, inp = [], [], x
  for layer in range(num_layers):
    outs = []
    for k in range(d):
      i = layer * d + k
      c_init = c0[i] if lstm else jnp.zeros_like(h0[i])
      if k == 0:
        ys, h, c = _run(rnn_mode, inp, h0[i], c_init, cells[i], valid)
      else:
        xr = jnp.take_along_axis(inp, rev[:, :, None], axis=0)
        ys, h, c = _run(rnn_mode, xr, h0[i], c_init, cells[i], valid)
        ys = jnp.take_along_axis(ys, rev[:, :, None], axis=0)
      outs.append(ys)
      hs.append(h)
      cs.append(c)
    inp = jnp.concatenate(outs, -1) if d > 1 else outs[0]
  out_c = jnp.stack(cs) if lstm else jnp.zeros((), x.dtype)
  return inp, jnp.stack(hs), out_c


def _forward(
  x,
  h0,
  c0,
  params,
  lengths=None,
  *,
  rnn_mode="lstm",
  input_mode="linear_input",
  direction="unidirectional",
  time_major=True,
  num_proj=0,
):
  if num_proj:
    _validate(rnn_mode, input_mode, x.shape[-1], h0.shape[-1], num_proj)
  if not time_major:
    x = jnp.swapaxes(x, 0, 1)
  if lengths is None:
    lengths = jnp.full((x.shape[1],), x.shape[0], jnp.int32)
  out, h, c = _rnn(
    x, h0, c0, params, lengths, rnn_mode=rnn_mode, direction=direction, input_mode=input_mode
  )
  return (out if time_major else jnp.swapaxes(out, 0, 1)), h, c


def _empty(dtype):
  return jnp.zeros((0,), dtype)


def _cudnn_rnn(
  input,
  input_h,
  input_c,
  params,
  *,
  rnn_mode="lstm",
  input_mode="linear_input",
  direction="unidirectional",
):
  """TF CudnnRNN: (output, output_h, output_c, reserve_space) of a time-major RNN
  (reserve_space empty)."""
  out = _forward(
    input, input_h, input_c, params, rnn_mode=rnn_mode, input_mode=input_mode, direction=direction
  )
  return (*out, _empty(input.dtype))


def _cudnn_rnn_v2(input, input_h, input_c, params, **attrs):
  """TF CudnnRNNV2: CudnnRNN plus an (empty) int8 host_reserved."""
  return (*_cudnn_rnn(input, input_h, input_c, params, **attrs), _empty(jnp.int8))


def _cudnn_rnn_v3(
  input,
  input_h,
  input_c,
  params,
  sequence_lengths,
  *,
  rnn_mode="lstm",
  input_mode="linear_input",
  direction="unidirectional",
  num_proj=0,
  time_major=True,
):
  """TF CudnnRNNV3: CudnnRNNV2 with per-example ``sequence_lengths`` and ``time_major``."""
  out = _forward(
    input,
    input_h,
    input_c,
    params,
    sequence_lengths,
    rnn_mode=rnn_mode,
    input_mode=input_mode,
    direction=direction,
    time_major=time_major,
    num_proj=num_proj,
  )
  return (*out, _empty(input.dtype), _empty(jnp.int8))


def _backprop(x, h0, c0, params, lengths, dout, dh, dc, **attrs):
  """(input, input_h, input_c, params) cotangents of the forward RNN (recomputed)."""
  f = lambda *a: _forward(*a, lengths, **attrs)
  _, vjp = jax.vjp(f, x, h0, c0, params)
  return tuple(vjp((dout, dh, dc)))


def _cudnn_rnn_backprop(
  input,
  input_h,
  input_c,
  params,
  output,
  output_h,
  output_c,
  output_backprop,
  output_h_backprop,
  output_c_backprop,
  reserve_space,
  *,
  rnn_mode="lstm",
  input_mode="linear_input",
  direction="unidirectional",
):
  """TF CudnnRNNBackprop: gradients of CudnnRNN's inputs given its output gradients
  (reserve_space unused: the forward pass is recomputed)."""
  del output, output_h, output_c, reserve_space
  return _backprop(
    input,
    input_h,
    input_c,
    params,
    None,
    output_backprop,
    output_h_backprop,
    output_c_backprop,
    rnn_mode=rnn_mode,
    input_mode=input_mode,
    direction=direction,
  )


def _cudnn_rnn_backprop_v2(*args, **attrs):
  """TF CudnnRNNBackpropV2: CudnnRNNBackprop with host_reserved (unused)."""
  return _cudnn_rnn_backprop(*args[:-1], **attrs)


def _cudnn_rnn_backprop_v3(
  input,
  input_h,
  input_c,
  params,
  sequence_lengths,
  output,
  output_h,
  output_c,
  output_backprop,
  output_h_backprop,
  output_c_backprop,
  reserve_space,
  host_reserved,
  **attrs,
):
  """TF CudnnRNNBackpropV3: CudnnRNNBackprop with sequence_lengths and time_major."""
  del output, output_h, output_c, reserve_space, host_reserved
  return _backprop(
    input,
    input_h,
    input_c,
    params,
    sequence_lengths,
    output_backprop,
    output_h_backprop,
    output_c_backprop,
    **attrs,
  )


# --------------------------------------------------------------------------
# CudnnRNN's derivative: a linear tangent primitive transposed by the Backprop ops
# --------------------------------------------------------------------------

_FORWARD = {"CudnnRNN": _cudnn_rnn, "CudnnRNNV2": _cudnn_rnn_v2, "CudnnRNNV3": _cudnn_rnn_v3}
_BACKPROP = {
  "CudnnRNN": "CudnnRNNBackprop",
  "CudnnRNNV2": "CudnnRNNBackpropV2",
  "CudnnRNNV3": "CudnnRNNBackpropV3",
}

tangent_p = Primitive("tf.CudnnRNN.tangent")
tangent_p.multiple_results = True


def _tangent_impl(tx, th, tc, tp, *primals, op_type, **params):
  """Tangents of (output, output_h, output_c), linear in (tx, th, tc, tp)."""
  fwd = functools.partial(_FORWARD[op_type], **params)
  rest = primals[4:]
  f = lambda *a: fwd(*a, *rest)[:3]
  return list(jax.jvp(f, tuple(primals[:4]), (tx, th, tc, tp))[1])


tangent_p.def_impl(_tangent_impl)
tangent_p.def_abstract_eval(derived.abstract_eval(_tangent_impl, True))
mlir.register_lowering(tangent_p, mlir.lower_fun(_tangent_impl, multiple_results=True))
ad.primitive_jvps[tangent_p] = derived.jvp(tangent_p, _tangent_impl)
batching.primitive_batchers[tangent_p] = derived.vmap_batching(_tangent_impl, True)


def _tangent_transpose(cts, *operands, op_type, **params):
  primals = operands[4:]
  outs = getattr(tfops, op_type)(*primals, **params)
  cts = [rules.instantiate(ct) if type(ct) is ad.Zero else ct for ct in cts]
  attrs = {k: v for k, v in params.items() if k != "is_training"}
  grads = getattr(tfops, _BACKPROP[op_type])(*primals, *outs[:3], *cts, *outs[3:], **attrs)
  return [*grads, *[None] * len(primals)]


ad.primitive_transposes[tangent_p] = _tangent_transpose


def _forward_jvp(op):
  def rule(primals, tangents, **params):
    outs = op(*primals, **params)
    ts = [rules.instantiate(t) for t in tangents[:4]]
    touts = tangent_p.bind(*ts, *primals, op_type=op.op_type, **params)
    return outs, [*touts, *(rules.zero_tangent(o) for o in outs[3:])]

  return rule


# --------------------------------------------------------------------------
# Params layout ops
# --------------------------------------------------------------------------


def _layout(num_layers, num_units, input_size, rnn_mode, input_mode, direction, num_proj=0):
  _validate(rnn_mode, input_mode, input_size, num_units, num_proj)
  return canonical_shapes(rnn_mode, direction, int(num_layers), int(num_units), int(input_size))


def _params_size(
  *,
  num_layers,
  num_units,
  input_size,
  S,
  rnn_mode="lstm",
  input_mode="linear_input",
  direction="unidirectional",
  num_proj=0,
):
  """TF CudnnRNNParamsSize: the number of elements of the params blob."""
  w, b = _layout(num_layers, num_units, input_size, rnn_mode, input_mode, direction, num_proj)
  return jnp.asarray(sum(int(np.prod(s)) for s in w + b), canonical_dtype(S))


def _check_count(op, expected, got, what):
  if expected != got:
    raise errors.ConversionError(f"{op}: {what} is {got}, but the layout has {expected}")


def _params_to_canonical(
  params,
  *,
  num_layers,
  num_units,
  input_size,
  num_params=None,
  num_params_weights=None,
  num_params_biases=None,
  rnn_mode="lstm",
  input_mode="linear_input",
  direction="unidirectional",
  num_proj=0,
):
  """TF CudnnRNNParamsToCanonical(V2): the params blob cut into weight matrices
  ([num_units, width]) and bias vectors, in canonical order."""
  w, b = _layout(num_layers, num_units, input_size, rnn_mode, input_mode, direction, num_proj)
  nw = num_params if num_params is not None else num_params_weights
  nb = num_params if num_params is not None else num_params_biases
  _check_count("CudnnRNNParamsToCanonical", len(w), nw, "the number of weights")
  _check_count("CudnnRNNParamsToCanonical", len(b), nb, "the number of biases")
  total = sum(int(np.prod(s)) for s in w + b)
  _check_count("CudnnRNNParamsToCanonical", total, params.shape[0], "the params size")
  outs, offset = [], 0
  for shape in w + b:
    size = int(np.prod(shape))
    outs.append(params[offset : offset + size].reshape(shape))
    offset += size
  return tuple(outs)


def _canonical_to_params(
  *weights_biases,
  num_layers,
  num_units,
  input_size,
  num_params=None,
  num_params_weights=None,
  num_params_biases=None,
  rnn_mode="lstm",
  input_mode="linear_input",
  direction="unidirectional",
  num_proj=0,
):
  """TF CudnnRNNCanonicalToParams(V2): canonical weights then biases, flattened
  (row-major) and concatenated into the params blob."""
  w, b = _layout(num_layers, num_units, input_size, rnn_mode, input_mode, direction, num_proj)
  nw = num_params if num_params is not None else num_params_weights
  _check_count(
    "CudnnRNNCanonicalToParams",
    len(w) + len(b),
    len(weights_biases),
    "the number of weights and biases",
  )
  del nw
  for s, a in zip(w + b, weights_biases):
    _check_count(
      "CudnnRNNCanonicalToParams", int(np.prod(s)), int(np.size(a)), "a canonical tensor's size"
    )
  return jnp.concatenate([jnp.reshape(a, (-1,)) for a in weights_biases])


# --------------------------------------------------------------------------
# Oracles (TF has no CPU kernels): the cuDNN equations as a TF program
# --------------------------------------------------------------------------


def tf_cudnn_rnn(
  input,
  input_h,
  input_c,
  params,
  sequence_lengths=None,
  *,
  rnn_mode="lstm",
  direction="unidirectional",
  time_major=True,
  **_,
):
  """cuDNN's documented RNN equations written with TF CPU ops, one gate matrix at a time
  (tf.reverse_sequence for the backward direction): (output, output_h, output_c)."""
  tf = import_tensorflow()
  x = input if time_major else tf.transpose(input, [1, 0, 2])
  steps, batch = int(x.shape[0]), int(x.shape[1])
  units, d = int(input_h.shape[-1]), _dirs(direction)
  layers, g = int(input_h.shape[0]) // d, _GATES[rnn_mode]
  lengths = (
    tf.fill([batch], steps) if sequence_lengths is None else tf.cast(sequence_lengths, tf.int32)
  )
  flat, pos = tf.reshape(params, [-1]), [0]

  def take(shape):
    n = int(np.prod(shape))
    out = tf.reshape(flat[pos[0] : pos[0] + n], shape)
    pos[0] += n
    return out

  mats = [
    [take([units, int(x.shape[-1]) if layer == 0 else units * d]) for _ in range(g)]
    + [take([units, units]) for _ in range(g)]
    for layer in range(layers)
    for _ in range(d)
  ]
  vecs = [[take([units]) for _ in range(2 * g)] for _ in range(layers * d)]
  lin = lambda v, m, b: tf.matmul(v, m, transpose_b=True) + b
  hs, cs, seq = [], [], x
  for layer in range(layers):
    outs = []
    for k in range(d):
      i = layer * d + k
      m, v = mats[i], vecs[i]
      xs = seq if k == 0 else tf.reverse_sequence(seq, lengths, seq_axis=0, batch_axis=1)
      h, c, ys = input_h[i], input_c[i] if rnn_mode == "lstm" else None, []
      for t in range(steps):
        xt = xs[t]
        a = [lin(xt, m[j], v[j]) for j in range(g)]
        r = [lin(h, m[g + j], v[g + j]) for j in range(g)]
        if rnn_mode == "lstm":
          c_new = tf.sigmoid(a[1] + r[1]) * c + tf.sigmoid(a[0] + r[0]) * tf.tanh(a[2] + r[2])
          h_new = tf.sigmoid(a[3] + r[3]) * tf.tanh(c_new)
        elif rnn_mode == "gru":
          reset, upd = tf.sigmoid(a[0] + r[0]), tf.sigmoid(a[1] + r[1])
          h_new, c_new = (1 - upd) * tf.tanh(a[2] + reset * r[2]) + upd * h, None
        else:
          act = tf.tanh if rnn_mode == "rnn_tanh" else tf.nn.relu
          h_new, c_new = act(a[0] + r[0]), None
        ok = tf.expand_dims(t < lengths, 1)
        h = tf.where(ok, h_new, h)
        c = tf.where(ok, c_new, c) if c is not None else None
        ys.append(tf.where(ok, h_new, tf.zeros_like(h_new)))
      ys = tf.stack(ys)
      if k == 1:
        ys = tf.reverse_sequence(ys, lengths, seq_axis=0, batch_axis=1)
      outs.append(ys)
      hs.append(h)
      cs.append(c)
    seq = tf.concat(outs, -1)
  out = seq if time_major else tf.transpose(seq, [1, 0, 2])
  out_c = tf.stack(cs) if rnn_mode == "lstm" else tf.zeros([], input.dtype)
  return out, tf.stack(hs), out_c


def _forward_oracle(op_type):
  def oracle(input, input_h, input_c, params, sequence_lengths=None, **attrs):
    tf = import_tensorflow()
    outs = tf_cudnn_rnn(input, input_h, input_c, params, sequence_lengths, **attrs)
    extra = [tf.zeros([0], input.dtype)] + (
      [tf.zeros([0], tf.int8)] if op_type != "CudnnRNN" else []
    )
    return (*outs, *extra)

  oracle.__name__ = f"tf_{op_type}_equations"
  return oracle


def _backprop_oracle(op_type):
  def oracle(
    input,
    input_h,
    input_c,
    params,
    output_backprop,
    output_h_backprop,
    output_c_backprop,
    sequence_lengths=None,
    **attrs,
  ):
    tf = import_tensorflow()
    for k in ("output", "output_h", "output_c", "reserve_space", "host_reserved"):
      attrs.pop(k, None)
    xs = [input, input_h, input_c, params]
    with tf.GradientTape() as tape:
      tape.watch(xs)
      outs = tf_cudnn_rnn(*xs, sequence_lengths, **attrs)
    return tape.gradient(
      list(outs),
      xs,
      output_gradients=[output_backprop, output_h_backprop, output_c_backprop],
      unconnected_gradients=tf.UnconnectedGradients.ZERO,
    )

  oracle.__name__ = f"tf_{op_type}_by_gradient_tape"
  return oracle


# --------------------------------------------------------------------------
# Specs
# --------------------------------------------------------------------------

_DTYPES = ("float32", "float64")


def _arr(st, dtype, shape, bound=1.0):
  return st.arrays(dtype, shape, special=False, min_value=-bound, max_value=bound)


def _layout_attrs(draw, st):
  rnn_mode = draw(st.sampled_from(list(_GATES)))
  direction = draw(st.sampled_from(["unidirectional", "bidirectional"]))
  layers, units, size = draw(st.integers(1, 2)), draw(st.integers(1, 3)), draw(st.integers(1, 3))
  input_mode = (
    "linear_input" if size == units else draw(st.sampled_from(["linear_input", "auto_select"]))
  )
  return dict(rnn_mode=rnn_mode, direction=direction, input_mode=input_mode), layers, units, size


def _rnn_calls(st, op_type, backprop=False):
  v3 = op_type.endswith("V3")

  @st.composite
  def draw_call(draw):
    dtype = draw(st.sampled_from(_DTYPES))
    attrs, layers, units, size = _layout_attrs(draw, st)
    steps, batch = draw(st.integers(1, 3)), draw(st.integers(1, 2))
    w, b = canonical_shapes(attrs["rnn_mode"], attrs["direction"], layers, units, size)
    time_major = draw(st.booleans()) if v3 else True
    xshape = (steps, batch, size) if time_major else (batch, steps, size)
    hshape = (layers * _dirs(attrs["direction"]), batch, units)
    call = dict(
      input=draw(_arr(st, dtype, xshape, 1.5)),
      input_h=draw(_arr(st, dtype, hshape)),
      input_c=draw(_arr(st, dtype, hshape)),
      params=draw(_arr(st, dtype, (sum(int(np.prod(s)) for s in w + b),))),
      **attrs,
    )
    if v3:
      call["sequence_lengths"] = np.array(
        draw(st.lists(st.integers(1, steps), min_size=batch, max_size=batch)), np.int32
      )
      call["time_major"] = time_major
    if not backprop:
      return dict(call, is_training=draw(st.booleans()))
    outs = [np.asarray(o) for o in tf_cudnn_rnn(**call)]
    call.update(
      output=outs[0],
      output_h=outs[1],
      output_c=outs[2],
      output_backprop=draw(_arr(st, dtype, outs[0].shape)),
      output_h_backprop=draw(_arr(st, dtype, outs[1].shape)),
      output_c_backprop=draw(_arr(st, dtype, outs[2].shape)),
      reserve_space=np.zeros((0,), dtype),
    )
    if op_type != "CudnnRNNBackprop":
      call["host_reserved"] = np.zeros((0,), np.int8)
    return call

  return draw_call()


_RNN_NOTE = (
  "TF has CUDA kernels only: the oracle is cuDNN's documented equations written "
  "with TF CPU ops (tf_cudnn_rnn: per-gate matmuls from the canonical params, "
  "tf.reverse_sequence for the backward direction), and its TF autodiff for the "
  "derivatives; tests/test_cudnn_rnn.py also checks against Keras' LSTM/GRU. "
  "reserve_space and host_reserved are empty (implementation-defined in TF)."
)
_BACKPROP_NOTE = (
  "TF has CUDA kernels only: the oracle is tf.GradientTape of tf_cudnn_rnn "
  "(cuDNN's equations with TF CPU ops); reserve_space is not read."
)
_TOL = dict(rtol={"float32": 1e-4}, atol={"float32": 1e-5})
# Every drawn call compiles new scans (one per layer and direction) in each check:
# half the profile's examples keep the CI's share of these six ops near a minute.
_SPEC_COST = dict(examples=0.5)


def _layout_calls(st, op_type):
  v2 = op_type.endswith("V2")

  @st.composite
  def draw_call(draw):
    attrs, layers, units, size = _layout_attrs(draw, st)
    static = dict(
      num_layers=np.array(layers, np.int32),
      num_units=np.array(units, np.int32),
      input_size=np.array(size, np.int32),
    )
    w, b = canonical_shapes(attrs["rnn_mode"], attrs["direction"], layers, units, size)
    counts = (
      dict(num_params_weights=len(w), num_params_biases=len(b)) if v2 else dict(num_params=len(w))
    )
    dtype = draw(st.sampled_from(_DTYPES))
    if op_type == "CudnnRNNParamsSize":
      return dict(
        static, T=np.dtype(dtype), S=np.dtype(draw(st.sampled_from(["int32", "int64"]))), **attrs
      )
    if op_type.startswith("CudnnRNNParamsToCanonical"):
      n = sum(int(np.prod(s)) for s in w + b)
      return dict(static, params=draw(_arr(st, dtype, (n,))), **counts, **attrs)
    return dict(
      static,
      weights=[draw(_arr(st, dtype, s)) for s in w],
      biases=[draw(_arr(st, dtype, s)) for s in b],
      **counts,
      **attrs,
    )

  return draw_call()


def _tf_params_size(num_layers, num_units, input_size, S, rnn_mode, direction, **_):
  """Parameter count from TF's docs: per layer and direction, g input matrices
  [units, width], g recurrent [units, units] and 2g biases [units]."""
  g, d, n = _GATES[rnn_mode], _dirs(direction), int(num_units)
  widths = [int(input_size)] + [n * d] * (int(num_layers) - 1)
  return np.array(sum(d * g * (n * wd + n * n + 2 * n) for wd in widths), np.dtype(S))


def _tf_params_to_canonical(num_layers, num_units, input_size, params, rnn_mode, direction, **_):
  """tf.split of the blob at the canonical sizes, each weight reshaped [units, width]."""
  tf = import_tensorflow()
  g, d, n = _GATES[rnn_mode], _dirs(direction), int(num_units)
  shapes = []
  for layer in range(int(num_layers)):
    wd = int(input_size) if layer == 0 else n * d
    shapes += d * (g * [(n, wd)] + g * [(n, n)])
  shapes += [(n,)] * (2 * g * d * int(num_layers))
  parts = tf.split(params, [int(np.prod(s)) for s in shapes])
  return [tf.reshape(p, s) for p, s in zip(parts, shapes)]


def _tf_canonical_to_params(weights, biases, **_):
  """tf.concat of the flattened weights, then biases."""
  tf = import_tensorflow()
  return tf.concat([tf.reshape(a, [-1]) for a in list(weights) + list(biases)], 0)


_LAYOUT_NOTE = (
  "TF has CUDA kernels only: the oracle is the canonical layout (all weights "
  "[num_units, width] per layer and direction, input then recurrent, then all "
  "biases) cut or joined with TF ops (a count for ParamsSize); "
  "tests/test_cudnn_rnn.py checks round trips."
)

# --------------------------------------------------------------------------
# Declarations
# --------------------------------------------------------------------------

_ATTRS = ("rnn_mode", "input_mode", "direction")
_V3_ATTRS = _ATTRS + ("num_proj", "time_major")
_LAYOUT_STATIC = ("num_layers", "num_units", "input_size")


def _forward_spec(op):
  return lambda st: st.Spec(
    _rnn_calls(st, op.op_type),
    oracle=_forward_oracle(op.op_type),
    note=_RNN_NOTE,
    **_TOL,
    **_SPEC_COST,
  )


def _backprop_spec(op):
  return lambda st: st.Spec(
    _rnn_calls(st, op.op_type, True),
    oracle=_backprop_oracle(op.op_type),
    note=_BACKPROP_NOTE,
    **_TOL,
    **_SPEC_COST,
  )


CudnnRNN = register_op(
  "CudnnRNN",
  _cudnn_rnn,
  family="nn",
  attrs=_ATTRS,
  multiple_results=True,
  jvp=rules.per_op(_forward_jvp),
  spec=rules.per_op(_forward_spec),
)

CudnnRNNV2 = register_op(
  "CudnnRNNV2",
  _cudnn_rnn_v2,
  family="nn",
  attrs=_ATTRS,
  multiple_results=True,
  jvp=rules.per_op(_forward_jvp),
  spec=rules.per_op(_forward_spec),
)

CudnnRNNV3 = register_op(
  "CudnnRNNV3",
  _cudnn_rnn_v3,
  family="nn",
  attrs=_V3_ATTRS,
  multiple_results=True,
  jvp=rules.per_op(_forward_jvp),
  spec=rules.per_op(_forward_spec),
)

CudnnRNNBackprop = register_op(
  "CudnnRNNBackprop",
  _cudnn_rnn_backprop,
  family="nn",
  attrs=_ATTRS,
  multiple_results=True,
  spec=rules.per_op(_backprop_spec),
)

CudnnRNNBackpropV2 = register_op(
  "CudnnRNNBackpropV2",
  _cudnn_rnn_backprop_v2,
  family="nn",
  attrs=_ATTRS,
  multiple_results=True,
  spec=rules.per_op(_backprop_spec),
)

CudnnRNNBackpropV3 = register_op(
  "CudnnRNNBackpropV3",
  _cudnn_rnn_backprop_v3,
  family="nn",
  attrs=_V3_ATTRS,
  multiple_results=True,
  spec=rules.per_op(_backprop_spec),
)

CudnnRNNParamsSize = register_op(
  "CudnnRNNParamsSize",
  _params_size,
  family="nn",
  static=_LAYOUT_STATIC,
  attrs=("S",) + _ATTRS + ("num_proj",),
  spec=rules.per_op(
    lambda op: (
      lambda st: st.Spec(
        _layout_calls(st, op.op_type),
        oracle=_tf_params_size,
        note=_LAYOUT_NOTE,
        skip=dict(
          vmap="no non-static inputs to batch",
          jvp="an integer output of static inputs only",
          vjp="an integer output of static inputs only",
        ),
      )
    )
  ),
)


def _layout_op(op_type, impl, counts, v2):
  return register_op(
    op_type,
    impl,
    family="nn",
    static=_LAYOUT_STATIC,
    attrs=counts + _ATTRS + (("num_proj",) if v2 else ()),
    multiple_results=op_type.startswith("CudnnRNNParamsToCanonical"),
    spec=lambda st: st.Spec(
      _layout_calls(st, op_type),
      note=_LAYOUT_NOTE,
      oracle=(
        _tf_params_to_canonical
        if op_type.startswith("CudnnRNNParamsToCanonical")
        else _tf_canonical_to_params
      ),
    ),
  )


_V1_COUNTS, _V2_COUNTS = ("num_params",), ("num_params_weights", "num_params_biases")
CudnnRNNParamsToCanonical = _layout_op(
  "CudnnRNNParamsToCanonical", _params_to_canonical, _V1_COUNTS, False
)
CudnnRNNParamsToCanonicalV2 = _layout_op(
  "CudnnRNNParamsToCanonicalV2", _params_to_canonical, _V2_COUNTS, True
)
CudnnRNNCanonicalToParams = _layout_op(
  "CudnnRNNCanonicalToParams", _canonical_to_params, _V1_COUNTS, False
)
CudnnRNNCanonicalToParamsV2 = _layout_op(
  "CudnnRNNCanonicalToParamsV2", _canonical_to_params, _V2_COUNTS, True
)
