"""Shared machinery of the optimizer ops: one update rule per optimizer, declared as
the dense primitive (``tf.ApplyAdam``: the new var and slots from var, slots,
hyperparameters and grad), the sparse primitive (``tf.SparseApplyAdagrad``: the
same rule on the rows ``indices`` names, in turn), and the variable forms that
bind them.

* ``Apply*`` / ``SparseApply*`` (TF1 reference variables) are the primitives. A
  graph node of them returns the updated var (TF's ``out``) and, where an input is
  a ``VariableV2`` node whose value is a param, writes the new var and slots back
  to that param (so ``new_params`` carries them).
* ``ResourceApply*`` / ``ResourceSparseApply*`` read the variables through their
  handles (``ctx.state[handle.key]``), bind the primitive and write every result
  back (``writes_state``: control flow threads them and ``new_params`` carries
  them). Ops TF only has in resource form (``ResourceApplyAdamWithAmsgrad``,
  ``ResourceApplyKerasMomentum``, ``ResourceSparseApplyKerasMomentum``) are
  themselves the primitive, over the variables' values, with the same hook.

The sparse primitive applies the dense rule to one row per index with a loop (TF's
CPU kernels update the rows in index order, so a duplicated index is updated twice,
the second time from the first update's result); out-of-range indices are skipped
(TF raises: a ``check``; docs/semantics/training.md).

The property tests compare the primitives with TF's resource ops on tf.Variables
holding the drawn values (TF's ref ops cannot run eagerly); TF has no gradient
through variable updates, so derivatives are checked against central differences.
"""

from __future__ import annotations

import inspect

from typing import Callable, Mapping, Sequence

import jax.numpy as jnp
import numpy as np
from jax import lax

from tfprims import opdefs
from tfprims.core import register_op, register_structural, tfops
from tfprims.interpreter import RefHandle, bind_node, deref
from tfprims.ops.variables import expect_handle
from tfprims.errors import import_tensorflow

FAMILY = "training"

ALL_DTYPES = ("float16", "bfloat16", "float32", "float64", "complex64", "complex128")
REAL_DTYPES = ("float16", "bfloat16", "float32", "float64")
F32_F64 = ("float32", "float64")

_NOTE = (
  "var and slots are drawn as values; the oracle puts them in tf.Variables, runs "
  "TF's {} and returns the variables' values (var, then the slots). TF has no "
  "gradient through variable updates: derivatives are checked against central "
  "differences"
)


def _state_names(op_type: str, n_state: int) -> tuple[str, ...]:
  return opdefs.input_arg_names(op_type)[:n_state]


# --- hooks ------------------------------------------------------------------------------


def _resource_hook(prim_type: str, n_state: int):
  """ResourceApply*: the variables' values replace the handles, the primitive runs (its
  checks included) and its results are the variables' new values."""

  def interpret(ctx, node, inputs):
    handles = [expect_handle(node, h) for h in inputs[:n_state]]
    values = [ctx.state[h.key] for h in handles]
    outs = bind_node(ctx, getattr(tfops, prim_type), node, values + list(inputs[n_state:]))
    for h, new in zip(handles, outs):
      ctx.state[h.key] = new
    return []

  return interpret


def _ref_hook(prim_type: str, n_state: int):
  """Apply* on TF1 reference variables: the var and slots that are ref tensors
  (``RefHandle``: a ``VariableV2`` node, whose value is a param) get their new values
  written back; the node's output is the var's ref (or the new var, for values)."""

  def interpret(ctx, node, inputs):
    values = [deref(ctx, v) for v in inputs]
    outs = bind_node(ctx, getattr(tfops, prim_type), node, values)
    for ref, new in zip(inputs[:n_state], outs):
      if isinstance(ref, RefHandle):
        ctx.state[ref.key] = new
    return [inputs[0] if isinstance(inputs[0], RefHandle) else outs[0]]

  return interpret


def _oracle(resource_type: str, state: Sequence[str]):
  """TF oracle for the property runner: the drawn var and slots become tf.Variables,
  TF's resource op updates them, and their values are the outputs."""

  def oracle(**kwargs):
    tf = import_tensorflow()
    variables = [tf.Variable(kwargs.pop(n)) for n in state]
    getattr(tf.raw_ops, resource_type)(**{n: v.handle for n, v in zip(state, variables)}, **kwargs)
    return [v.read_value() for v in variables]

  oracle.__name__ = f"{resource_type}_on_variables"
  return oracle


# --- property-test calls ----------------------------------------------------------------


def _draw_input(st, draw, name, dtype, shape, ranges):
  """One input: a list in ``ranges`` is a set of scalar choices, a pair bounds the
  values; var/slots/grad default to [-2, 2]."""
  from hypothesis import strategies as hst

  spec = ranges.get(name, (-2.0, 2.0))
  if name == "global_step":
    return np.asarray(draw(hst.integers(*spec)), np.int64)
  if isinstance(spec, list):
    return np.asarray(draw(hst.sampled_from(spec)), dtype)
  return draw(st.arrays(dtype, shape, min_value=spec[0], max_value=spec[1], special=False))


def _dense_calls(st, op_type, n_state, dtype_names, ranges, bool_attrs):
  from hypothesis import strategies as hst

  names = opdefs.input_arg_names(op_type)
  wide = set(names[:n_state]) | {"grad", "delta"}

  @st.composite
  def calls(draw):
    dtype = st.np_dtype(draw(st.dtypes(dtype_names)))
    shape = tuple(draw(st.shapes(max_rank=3, max_side=3)))
    kw = {n: _draw_input(st, draw, n, dtype, shape if n in wide else (), ranges) for n in names}
    kw.update({a: draw(hst.booleans()) for a in bool_attrs})
    return kw

  return calls()


def _sparse_calls(st, op_type, n_state, dtype_names, ranges, bool_attrs):
  from hypothesis import strategies as hst

  names = opdefs.input_arg_names(op_type)
  state = set(names[:n_state])

  @st.composite
  def calls(draw):
    dtype = st.np_dtype(draw(st.dtypes(dtype_names)))
    n = draw(hst.integers(1, 4))
    # TF's sparse kernels refuse an empty row ("Inner dimension should be greater than zero").
    tail = tuple(draw(st.shapes(max_rank=2, min_side=1, max_side=3)))
    k = draw(hst.integers(0, 4))
    kw = {}
    for name in names:
      if name == "indices":
        kw[name] = draw(
          st.arrays(
            st.np_dtype(draw(st.dtypes(("int32", "int64")))), (k,), min_value=0, max_value=n - 1
          )
        )
      else:
        shape = (n,) + tail if name in state else (k,) + tail if name == "grad" else ()
        kw[name] = _draw_input(st, draw, name, dtype, shape, ranges)
    kw.update({a: draw(hst.booleans()) for a in bool_attrs})
    return kw

  return calls()


def _spec(
  calls_fn, op_type, resource_type, n_state, dtype_names, ranges, bool_attrs, nondiff, spec_kw
):
  def spec(st):
    names = opdefs.input_arg_names(op_type)
    diff = [n for n in names if n not in nondiff and n not in ("indices", "global_step")]
    return st.Spec(
      calls_fn(st, op_type, n_state, dtype_names, ranges, bool_attrs),
      oracle=_oracle(resource_type, _state_names(resource_type, n_state)),
      grad_oracle="fd",
      diff_args=diff,
      note=_NOTE.format(resource_type),
      **spec_kw,
    )

  return spec


# --- declarations -----------------------------------------------------------------------


def _dense_impl(op_type, n_state, update):
  def impl(*operands, **params):
    # Input names from TF's op def, looked up when first traced (importing tfprims
    # must not import TensorFlow).
    kw = dict(zip(opdefs.input_arg_names(op_type), operands))
    dtype = jnp.result_type(operands[0])
    outs = update(**kw, **params)
    # Under vmap a batched hyperparameter broadcasts: every result takes the full shape.
    shape = jnp.broadcast_shapes(*(jnp.shape(o) for o in operands))
    return tuple(jnp.broadcast_to(jnp.asarray(o).astype(dtype), shape) for o in outs)

  impl.__doc__ = update.__doc__
  return impl


def _sparse_impl(op_type, n_state, update, grad_name="grad"):
  def impl(*operands, **params):
    names = opdefs.input_arg_names(op_type)  # when first traced, as above
    state_names = names[:n_state]
    kw = dict(zip(names, operands))
    indices, grad = kw.pop("indices"), kw.pop("grad")
    state = tuple(jnp.asarray(kw.pop(n)) for n in state_names)
    n = state[0].shape[0]

    def row(i, st):
      # One index at a time, in order (duplicates update the row again, like TF's CPU
      # kernel); an out-of-range index changes nothing.
      r = indices[i]
      valid = (r >= 0) & (r < n)
      safe = jnp.where(valid, r, 0)
      rows = {name: s[safe] for name, s in zip(state_names, st)}
      new = update(**rows, **{grad_name: grad[i]}, **kw, **params)
      target = jnp.where(valid, r, n)
      return tuple(
        s.at[target].set(jnp.asarray(v).astype(s.dtype), mode="drop") for s, v in zip(st, new)
      )

    if not indices.shape[0]:  # no rows to update (the loop body could not be traced)
      return state
    return lax.fori_loop(0, indices.shape[0], row, state)

  impl.__doc__ = (update.__doc__ or "").split("\n")[0].rstrip(".") + (
    ", on the rows indices names (in order; out-of-range rows skipped)."
  )
  return impl


def _sparse_check(op_type, n_state):
  def check(*operands, **params):
    var, indices = operands[0], operands[opdefs.input_arg_names(op_type).index("indices")]
    n = var.shape[0]
    if not indices.size:
      return None
    bad = jnp.any((indices < 0) | (indices >= n))
    return bad, f"Index at some offset in indices is out of range [0, {n})"

  return check


def define_optimizer(
  name: str,
  update: Callable,
  *,
  n_state: int,
  dtypes: Sequence[str],
  ranges: Mapping[str, object],
  bool_attrs: Sequence[str] = (),
  attrs: Sequence[str] = (),
  nondiff: Sequence[str] = (),
  sparse: bool = False,
  sparse_dtypes: Sequence[str] = (),
  resource_only: bool = False,
  sparse_update: Callable = None,
  spec_kw: Mapping[str, object] = None,
) -> None:
  """Declares ``Apply<name>`` and ``ResourceApply<name>`` (and with ``sparse`` the
  ``SparseApply<name>``/``ResourceSparseApply<name>`` pair) from one update rule
  ``update(**tf_inputs, **attrs) -> (new var, new slots...)``.

  ``n_state``: how many leading inputs are variables (var and slots); ``dtypes``:
  those TF's CPU kernels take; ``ranges``: property-test values per input (a pair of
  bounds or a list of scalar choices); ``bool_attrs``: drawn boolean attrs; ``attrs``:
  kept attrs; ``nondiff``: inputs whose derivative central differences cannot check
  (thresholds); ``resource_only``: TF has no ref form, the resource op is the primitive;
  ``sparse_update``: the sparse kernel's own rule, where TF's sparse kernel writes the
  update with another formula than its dense one (the roundings differ).
  """
  spec_kw = dict(spec_kw or {})
  forms = [("Apply", "ResourceApply", dtypes, _dense_impl, _dense_calls, "elementwise")]
  if sparse:
    # Derived batching (jax.vmap of the row loop): the rows are updated in turn, which
    # no single TF op formulates for a batch of variables.
    forms.append(
      ("SparseApply", "ResourceSparseApply", sparse_dtypes, _sparse_impl, _sparse_calls, None)
    )
  # The sparse ops call the gradient 'grad' where GradientDescent's call it 'delta' (the
  # update rule takes it under the dense op's name). Not read from TF's op defs: importing
  # tfprims must not import TensorFlow.
  grad_name = "delta" if "delta" in inspect.signature(update).parameters else "grad"
  for ref_prefix, res_prefix, dts, make_impl, calls_fn, batching in forms:
    resource_type = res_prefix + name
    prim_type = resource_type if resource_only else ref_prefix + name
    impl = (
      make_impl(prim_type, n_state, sparse_update or update, grad_name)
      if make_impl is _sparse_impl
      else make_impl(prim_type, n_state, update)
    )
    hook = (_resource_hook if resource_only else _ref_hook)(prim_type, n_state)
    register_op(
      prim_type,
      impl,
      family=FAMILY,
      attrs=tuple(attrs),
      multiple_results=True,
      batching=batching,
      check=_sparse_check(prim_type, n_state) if ref_prefix == "SparseApply" else None,
      interpret=hook,
      writes_state=True,
      reads_state=resource_only,
      spec=_spec(
        calls_fn, prim_type, resource_type, n_state, dts, ranges, bool_attrs, nondiff, spec_kw
      ),
    )
    if not resource_only:
      register_structural(
        resource_type,
        _resource_hook(prim_type, n_state),
        family=FAMILY,
        writes_state=True,
        reads_state=True,
        doc=f"tf.{prim_type} on the variables' values, written back to them.",
      )
