"""XlaDot, XlaDotV2, XlaConv, XlaConvV2: XLA's DotGeneral and ConvGeneralDilated.

Their ``dimension_numbers``/``precision_config`` attrs are serialized XLA protos,
parsed when a node is prepared into ``lax.dot_general``/``lax.ConvDimensionNumbers``
tuples (params printed in jaxprs). The dots' JVPs and transposes are TF-named
(``tf.XlaDotV2`` with transposed dimension numbers, as ``lax.dot_general``'s own
transpose), and so are their batching rules (a batch dimension added to the
dimension numbers). The convolutions' JVPs are ``tf.XlaConvV2`` of the tangents;
their transposes and batching are derived from the lax impl (a TF-named form
needs the feature-group reshapes of lax's convolution transpose).
"""

from __future__ import annotations

import jax
import numpy as np
from jax import lax
from jax.interpreters import ad

from tfprims import dtypes, rules
from tfprims.core import register_op, tfops
from tfprims.ops.xla import _common
from tfprims.ops.xla._common import FAMILY
from tfprims.rules import U

# --- dot -------------------------------------------------------------------------------


def _out_dtype(lhs, preferred_element_type):
  if preferred_element_type is None:
    return np.dtype(lhs.dtype)
  return dtypes.canonical_dtype(preferred_element_type)


def _dot(lhs, rhs, dimension_numbers, precision_config, preferred_element_type):
  out = _out_dtype(lhs, preferred_element_type)
  if lhs.dtype != rhs.dtype:  # mixed inputs: XLA computes in the output type
    lhs, rhs = lhs.astype(out), rhs.astype(out)
  return lax.dot_general(
    lhs,
    rhs,
    dimension_numbers,
    precision=_common.lax_precision(precision_config),
    preferred_element_type=out,
  )


def _dot_v1_impl(lhs, rhs, *, dimension_numbers, precision_config):
  """XLA DotGeneral (``lax.dot_general``) with parsed dimension numbers."""
  return _dot(lhs, rhs, dimension_numbers, precision_config, None)


def _dot_v2_impl(lhs, rhs, *, dimension_numbers, precision_config, preferred_element_type):
  """XLA DotGeneral (``lax.dot_general``) with an output type."""
  return _dot(lhs, rhs, dimension_numbers, precision_config, preferred_element_type)


def _dot_canonicalize(params, *operands):
  return dict(
    params,
    dimension_numbers=_common.dot_dimension_numbers(params["dimension_numbers"]),
    precision_config=_common.precision_config(params["precision_config"]),
  )


def _rebind(op, lhs, rhs, params, **changes):
  return op(lhs, rhs, **dict(params, **changes))


def _dot_jvp(op):
  def rule(primals, tangents, **params):
    lhs, rhs = primals
    tl, tr = tangents
    out = _rebind(op, lhs, rhs, params)
    terms = []
    if type(tl) is not ad.Zero:
      terms.append(_rebind(op, tl, rhs, params))
    if type(tr) is not ad.Zero:
      terms.append(_rebind(op, lhs, tr, params))
    if not terms:
      return out, rules.zero_tangent(out)
    return out, terms[0] if len(terms) == 1 else tfops.AddV2(terms[0], terms[1])

  return rule


def _ranges_like(*xs):
  start = 0
  for x in xs:
    yield tuple(range(start, start + len(x)))
    start += len(x)


def _remaining(n, *groups):
  used = set().union(*map(set, groups))
  return tuple(i for i in range(n) if i not in used)


def _transpose_lhs(ct, x_shape, y, dimension_numbers, precision_config, dtype, swap_ans=False):
  """``lax.dot_general``'s transpose in its left operand, as ``tf.XlaDotV2``."""
  (x_contract, y_contract), (x_batch, y_batch) = dimension_numbers
  x_kept = _remaining(len(x_shape), x_contract, x_batch)
  y_kept = _remaining(len(rules.shape_of(y)), y_contract, y_batch)
  if swap_ans:
    ans_batch, ans_y, _ = _ranges_like(x_batch, y_kept, x_kept)
  else:
    ans_batch, _, ans_y = _ranges_like(x_batch, x_kept, y_kept)
  dims = ((ans_y, y_kept), (ans_batch, tuple(y_batch)))
  x_contract_sorted_by_y = [x_contract[i] for i in np.argsort(y_contract)]
  out_axes = np.argsort(list(x_batch) + list(x_kept) + x_contract_sorted_by_y)
  out = tfops.XlaDotV2(
    ct, y, dimension_numbers=dims, precision_config=precision_config, preferred_element_type=dtype
  )
  perm = tuple(int(i) for i in out_axes)
  return rules.transpose(out, perm) if perm != tuple(range(len(perm))) else out


def _dot_transpose(
  ct, lhs, rhs, *, dimension_numbers, precision_config, preferred_element_type=None
):
  ct = rules.instantiate(ct)
  if U(lhs):
    return [
      _transpose_lhs(
        ct, rules.shape_of(lhs), rhs, dimension_numbers, precision_config, rules.dtype_of(lhs)
      ),
      None,
    ]
  (lc, rc), (lb, rb) = dimension_numbers
  swapped = ((rc, lc), (rb, lb))
  return [
    None,
    _transpose_lhs(
      ct, rules.shape_of(rhs), lhs, swapped, precision_config, rules.dtype_of(rhs), swap_ans=True
    ),
  ]


def _shift(dims):
  return tuple(d + 1 for d in dims)


def _dot_batch(op):
  """A vmapped dot is the same dot with the batch axis added to its dimension
  numbers: a batch dimension when both operands are batched, a free dimension of
  the batched operand otherwise."""

  def rule(args, dims, **params):
    (lhs, rhs), (dl, dr) = args, dims
    (lc, rc), (lb, rb) = params["dimension_numbers"]
    lhs, rhs = rules.to_front(lhs, dl), rules.to_front(rhs, dr)
    if dl is not None and dr is not None:
      dn = ((_shift(lc), _shift(rc)), ((0,) + _shift(lb), (0,) + _shift(rb)))
      return _rebind(op, lhs, rhs, params, dimension_numbers=dn), 0
    if dl is not None:
      dn = ((_shift(lc), rc), (_shift(lb), rb))
      return _rebind(op, lhs, rhs, params, dimension_numbers=dn), len(lb)
    dn = ((lc, _shift(rc)), (lb, _shift(rb)))
    n_lhs_free = np.ndim(lhs) - len(lc) - len(lb)
    return _rebind(op, lhs, rhs, params, dimension_numbers=dn), len(lb) + n_lhs_free

  return rule


# --- convolution ------------------------------------------------------------------------


def _conv(
  lhs,
  rhs,
  window_strides,
  padding,
  lhs_dilation,
  rhs_dilation,
  feature_group_count,
  dimension_numbers,
  precision_config,
  preferred_element_type=None,
  batch_group_count=1,
):
  out = _out_dtype(lhs, preferred_element_type)
  if lhs.dtype != rhs.dtype:
    lhs, rhs = lhs.astype(out), rhs.astype(out)
  return lax.conv_general_dilated(
    lhs,
    rhs,
    tuple(window_strides),
    [tuple(p) for p in padding],
    lhs_dilation=tuple(lhs_dilation),
    rhs_dilation=tuple(rhs_dilation),
    dimension_numbers=lax.ConvDimensionNumbers(*dimension_numbers),
    feature_group_count=int(feature_group_count),
    batch_group_count=int(batch_group_count),
    precision=_common.lax_precision(precision_config),
    preferred_element_type=out,
  )


def _conv_v1_impl(
  lhs,
  rhs,
  *,
  window_strides,
  padding,
  lhs_dilation,
  rhs_dilation,
  feature_group_count,
  dimension_numbers,
  precision_config,
):
  """XLA ConvGeneralDilated (``lax.conv_general_dilated``)."""
  return _conv(
    lhs,
    rhs,
    window_strides,
    padding,
    lhs_dilation,
    rhs_dilation,
    feature_group_count,
    dimension_numbers,
    precision_config,
  )


def _conv_v2_impl(
  lhs,
  rhs,
  *,
  window_strides,
  padding,
  lhs_dilation,
  rhs_dilation,
  feature_group_count,
  dimension_numbers,
  precision_config,
  preferred_element_type,
  batch_group_count,
):
  """XLA ConvGeneralDilated with an output type and batch groups."""
  return _conv(
    lhs,
    rhs,
    window_strides,
    padding,
    lhs_dilation,
    rhs_dilation,
    feature_group_count,
    dimension_numbers,
    precision_config,
    preferred_element_type,
    batch_group_count,
  )


def _conv_canonicalize(params, *operands):
  padding = params["padding"]
  padding = tuple(tuple(int(v) for v in p) for p in padding) if padding else ()
  return dict(
    params,
    window_strides=tuple(int(v) for v in np.ravel(params["window_strides"])),
    padding=padding,
    lhs_dilation=tuple(int(v) for v in np.ravel(params["lhs_dilation"])),
    rhs_dilation=tuple(int(v) for v in np.ravel(params["rhs_dilation"])),
    feature_group_count=int(np.asarray(params["feature_group_count"])),
    dimension_numbers=_common.conv_dimension_numbers(params["dimension_numbers"]),
    precision_config=_common.precision_config(params["precision_config"]),
  )


def _conv_transpose(impl):
  """The transpose of the convolution in its undefined operand, derived from the
  lax impl (``jax.linear_transpose``)."""

  def rule(ct, lhs, rhs, **params):
    ct = rules.instantiate(ct)
    if U(lhs):
      f = lambda x: impl(x, rhs, **params)
      aval = jax.ShapeDtypeStruct(lhs.aval.shape, lhs.aval.dtype)
      return [jax.linear_transpose(f, aval)(ct)[0], None]
    f = lambda w: impl(lhs, w, **params)
    aval = jax.ShapeDtypeStruct(rhs.aval.shape, rhs.aval.dtype)
    return [None, jax.linear_transpose(f, aval)(ct)[0]]

  return rule


# --- specs ------------------------------------------------------------------------------

_DOT_DTYPES = (
  "float16",
  "bfloat16",
  "float32",
  "float64",
  "complex64",
  "complex128",
  "int8",
  "int32",
  "int64",
)
_PRECISION_DRAWS = (b"", ("DEFAULT", "DEFAULT"), ("HIGHEST", "HIGHEST"))


def _draw_precision(st, draw):
  p = draw(st.sampled_from(_PRECISION_DRAWS))
  if not p:
    return p
  enum = {"DEFAULT": 0, "HIGH": 1, "HIGHEST": 2}
  return _common.serialize("PrecisionConfig", operand_precision=[enum[x] for x in p])


def _draw_values(st, draw, dtype, shape):
  if st.kind(dtype) in "iu":
    return st.draw_array(draw, dtype, shape, int_lo=-8, int_hi=8)
  return st.draw_array(draw, dtype, shape, lo=-4, hi=4)


def _dot_calls(st, v2: bool):
  @st.composite
  def calls(draw):
    nb, nc = draw(st.integers(0, 1)), draw(st.integers(0, 2))
    nl, nr = draw(st.integers(0, 2)), draw(st.integers(0, 1))
    side = lambda: draw(st.integers(0 if draw(st.booleans()) else 1, 3))
    b = [side() for _ in range(nb)]
    c = [side() for _ in range(nc)]
    lf = [side() for _ in range(nl)]
    rf = [side() for _ in range(nr)]
    lperm = draw(st.permutations(range(nb + nc + nl)))
    rperm = draw(st.permutations(range(nb + nc + nr)))
    # logical lhs dims: batch, contracting, free; lperm[i] is where logical dim i sits
    lshape, rshape = [0] * len(lperm), [0] * len(rperm)
    for i, s in enumerate(b + c + lf):
      lshape[lperm[i]] = s
    for i, s in enumerate(b + c + rf):
      rshape[rperm[i]] = s
    dn = _common.serialize(
      "DotDimensionNumbers",
      lhs_batch_dimensions=[lperm[i] for i in range(nb)],
      rhs_batch_dimensions=[rperm[i] for i in range(nb)],
      lhs_contracting_dimensions=[lperm[nb + i] for i in range(nc)],
      rhs_contracting_dimensions=[rperm[nb + i] for i in range(nc)],
    )
    dtype = draw(st.dtypes(_DOT_DTYPES))
    kw = dict(
      lhs=_draw_values(st, draw, dtype, tuple(lshape)),
      rhs=_draw_values(st, draw, dtype, tuple(rshape)),
      dimension_numbers=dn,
      precision_config=_draw_precision(st, draw),
    )
    if v2:
      wider = {"float16": "float32", "bfloat16": "float32", "int8": "int32"}
      options = [dtype] + ([st.np_dtype(wider[dtype.name])] if dtype.name in wider else [])
      kw["preferred_element_type"] = draw(st.sampled_from(options))
    return kw

  return calls()


def _dot_spec(st, op_type, v2):
  return st.Spec(
    _dot_calls(st, v2),
    oracle=_common.jit_oracle(op_type, ("lhs", "rhs")),
    grad_oracle="fd",
    rtol={"float16": 2e-2, "bfloat16": 5e-2},
    note="oracle: the op under tf.function(jit_compile=True); TF registers no "
    "gradient, so derivatives are checked against central differences",
  )


_DOT_ATTRS = ("dimension_numbers", "precision_config")

XlaDot = register_op(
  "XlaDot",
  _dot_v1_impl,
  family=FAMILY,
  attrs=_DOT_ATTRS,
  canonicalize=_dot_canonicalize,
  jvp=rules.per_op(_dot_jvp),
  transpose=_dot_transpose,
  batching=rules.per_op(_dot_batch),
  spec=rules.per_op(lambda op: lambda st: _dot_spec(st, op.op_type, False)),
)

XlaDotV2 = register_op(
  "XlaDotV2",
  _dot_v2_impl,
  family=FAMILY,
  attrs=_DOT_ATTRS + ("preferred_element_type",),
  canonicalize=_dot_canonicalize,
  jvp=rules.per_op(_dot_jvp),
  transpose=_dot_transpose,
  batching=rules.per_op(_dot_batch),
  spec=rules.per_op(lambda op: lambda st: _dot_spec(st, op.op_type, True)),
)


def _conv_calls(st, v2: bool):
  @st.composite
  def calls(draw):
    ns = draw(st.integers(1, 2))  # spatial dims
    fgc = draw(st.sampled_from([1, 1, 2]))
    bgc = draw(st.sampled_from([1, 1, 2])) if v2 and fgc == 1 else 1
    n = bgc * draw(st.integers(1, 2))
    cin = fgc * draw(st.integers(1, 2))
    cout = fgc * bgc * draw(st.integers(1, 2))
    ksize = [draw(st.integers(1, 3)) for _ in range(ns)]
    strides = [draw(st.integers(1, 2)) for _ in range(ns)]
    ldil = [draw(st.integers(1, 2)) for _ in range(ns)]
    rdil = [draw(st.integers(1, 2)) for _ in range(ns)]
    pad = [[draw(st.integers(0, 2)), draw(st.integers(0, 1))] for _ in range(ns)]
    size = []
    for k in range(ns):
      s = draw(st.integers(1, 4))
      need = (ksize[k] - 1) * rdil[k] + 1
      have = (s - 1) * ldil[k] + 1 + pad[k][0] + pad[k][1]
      pad[k][1] += max(0, need - have)
      size.append(s)
    lperm = draw(st.permutations(range(ns + 2)))
    rperm = draw(st.permutations(range(ns + 2)))
    operm = draw(st.permutations(range(ns + 2)))
    lshape, rshape = [0] * (ns + 2), [0] * (ns + 2)
    for i, s in enumerate([n, cin] + size):
      lshape[lperm[i]] = s
    for i, s in enumerate([cout, cin // fgc] + ksize):
      rshape[rperm[i]] = s
    dn = _common.serialize(
      "ConvolutionDimensionNumbers",
      input_batch_dimension=lperm[0],
      input_feature_dimension=lperm[1],
      input_spatial_dimensions=list(lperm[2:]),
      kernel_output_feature_dimension=rperm[0],
      kernel_input_feature_dimension=rperm[1],
      kernel_spatial_dimensions=list(rperm[2:]),
      output_batch_dimension=operm[0],
      output_feature_dimension=operm[1],
      output_spatial_dimensions=list(operm[2:]),
    )
    dtype = draw(st.dtypes(("float16", "bfloat16", "float32", "float64")))
    idx = draw(st.sampled_from([np.int32, np.int64]))
    kw = dict(
      lhs=_draw_values(st, draw, dtype, tuple(lshape)),
      rhs=_draw_values(st, draw, dtype, tuple(rshape)),
      window_strides=np.array(strides, idx),
      padding=np.array(pad, idx),
      lhs_dilation=np.array(ldil, idx),
      rhs_dilation=np.array(rdil, idx),
      feature_group_count=np.array(fgc, idx),
      dimension_numbers=dn,
      precision_config=_draw_precision(st, draw),
    )
    if v2:
      kw["preferred_element_type"] = dtype
      kw["batch_group_count"] = bgc
    return kw

  return calls()


def _conv_spec(st, op_type, v2):
  return st.Spec(
    _conv_calls(st, v2),
    oracle=_common.jit_oracle(op_type, ("lhs", "rhs")),
    grad_oracle="fd",
    rtol={"float16": 2e-2, "bfloat16": 5e-2},
    note="oracle: the op under tf.function(jit_compile=True); TF registers no "
    "gradient, so derivatives are checked against central differences",
  )


_CONV_STATIC = ("window_strides", "padding", "lhs_dilation", "rhs_dilation", "feature_group_count")


def _conv_jvp(op):
  return _dot_jvp(op)  # bilinear, like a dot


XlaConv = register_op(
  "XlaConv",
  _conv_v1_impl,
  family=FAMILY,
  static=_CONV_STATIC,
  attrs=_DOT_ATTRS,
  canonicalize=_conv_canonicalize,
  jvp=rules.per_op(_conv_jvp),
  transpose=_conv_transpose(_conv_v1_impl),
  spec=rules.per_op(lambda op: lambda st: _conv_spec(st, op.op_type, False)),
)

XlaConvV2 = register_op(
  "XlaConvV2",
  _conv_v2_impl,
  family=FAMILY,
  static=_CONV_STATIC,
  attrs=_DOT_ATTRS + ("preferred_element_type", "batch_group_count"),
  canonicalize=_conv_canonicalize,
  jvp=rules.per_op(_conv_jvp),
  transpose=_conv_transpose(_conv_v2_impl),
  spec=rules.per_op(lambda op: lambda st: _conv_spec(st, op.op_type, True)),
)
