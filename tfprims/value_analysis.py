"""Value analysis: runtime integers whose values are known after all.

Under ``jit`` a shape-deciding input computed from runtime data is refused, unless
its value does not depend on the data: ``end - begin`` of two runtime slice bounds
(``x[a:a + h]``), ``min(max(max(v) + 1, n), n) = n`` (bincount with ``minlength ==
maxlength``), ``select(p, c, c) = c``. To find those, the interpreter keeps a
*form* for each small traced integer (or boolean) value a primitive op computes:
per element, an affine expression ``c0 + sum(ci * ai)`` in *atoms* (elements of
traced values it knows nothing about) with an interval. A node's forms come from
evaluating its op's own impl jaxpr on its inputs' forms (tfprims.folding's
evaluator with the rules below), so every op is covered by what it computes, with no
per-op rules. A node whose output forms are all constants folds: its output is the
constant, and the ops reading it see a static value.

Sound by construction: affine arithmetic is exact modulo 2**bits, so cancellations
hold with wrap-around; intervals decide max/min/comparisons only within the dtype's
range (an interval that could wrap is widened to the whole range). Products and
quotients of two runtime values, float values and ops outside the evaluator's
primitives give fresh atoms (nothing known). Ops with an interpret hook
(:func:`record` is called where nodes bind) can ask :func:`forms` themselves
(StridedSlice's ``end - begin``).
"""

from __future__ import annotations

import itertools
from typing import Any, Optional, Sequence

import numpy as np

from tfprims import folding

# Forms are kept for traced values of at most this many elements (shape vectors,
# indices, counters), not for data.
MAX_ELEMENTS = 64

_atom_ids = itertools.count()


class Unknown(folding._NotFoldable):
  """The forms cannot decide this (a comparison, a product of two runtime values)."""


def _add_bounds(a, b):
  return None if a is None or b is None else a + b


class Lin:
  """``const + sum(coeff * atom)`` with the interval ``[lo, hi]`` (None: unbounded)."""

  __slots__ = ("const", "terms", "lo", "hi")

  def __init__(self, const: int, terms: tuple, lo: Optional[int], hi: Optional[int]):
    self.const, self.terms, self.lo, self.hi = int(const), terms, lo, hi

  @staticmethod
  def make(const, terms, lo, hi):
    """A Lin, or a Python int when no atom is left."""
    terms = tuple(sorted((a, c) for a, c in terms if c))
    if not terms:
      return int(const)
    return Lin(const, terms, lo, hi)

  @staticmethod
  def atom(lo=None, hi=None) -> "Lin":
    return Lin(0, ((next(_atom_ids), 1),), lo, hi)

  def __add__(self, other):
    if isinstance(other, (int, np.integer)):
      other = int(other)
      return Lin.make(
        self.const + other, self.terms, _add_bounds(self.lo, other), _add_bounds(self.hi, other)
      )
    if not isinstance(other, Lin):
      return NotImplemented
    terms = dict(self.terms)
    for a, c in other.terms:
      terms[a] = terms.get(a, 0) + c
    return Lin.make(
      self.const + other.const,
      terms.items(),
      _add_bounds(self.lo, other.lo),
      _add_bounds(self.hi, other.hi),
    )

  __radd__ = __add__

  def __neg__(self):
    return Lin.make(
      -self.const,
      tuple((a, -c) for a, c in self.terms),
      None if self.hi is None else -self.hi,
      None if self.lo is None else -self.lo,
    )

  def __sub__(self, other):
    return self + (-other)

  def __rsub__(self, other):
    return (-self) + other

  def __mul__(self, other):
    if not isinstance(other, (int, np.integer)):
      raise Unknown("a product of two runtime values")
    k = int(other)
    bounds = [None if b is None else b * k for b in (self.lo, self.hi)]
    lo, hi = bounds if k >= 0 else bounds[::-1]
    return Lin.make(self.const * k, tuple((a, c * k) for a, c in self.terms), lo, hi)

  __rmul__ = __mul__

  def _compare(self, other, test):
    d = self - other
    return test(d if isinstance(d, int) else _sign_or_unknown(d))

  def __lt__(self, other):
    return self._compare(other, lambda s: _decide(s, lambda v: v < 0))

  def __le__(self, other):
    return self._compare(other, lambda s: _decide(s, lambda v: v <= 0))

  def __gt__(self, other):
    return self._compare(other, lambda s: _decide(s, lambda v: v > 0))

  def __ge__(self, other):
    return self._compare(other, lambda s: _decide(s, lambda v: v >= 0))

  def __eq__(self, other):
    return self._compare(other, lambda s: _decide(s, lambda v: v == 0))

  def __ne__(self, other):
    return self._compare(other, lambda s: _decide(s, lambda v: v != 0))

  __hash__ = object.__hash__

  def __bool__(self):
    raise Unknown("the truth of a runtime value")

  def __index__(self):
    raise Unknown("a runtime value used as an index")

  def __repr__(self):
    terms = " + ".join(f"{c}*a{a}" for a, c in self.terms)
    return f"Lin({self.const} + {terms} in [{self.lo}, {self.hi}])"


class _UnknownBool:
  """A boolean the forms cannot decide: logic with it stays undecided unless the
  other side decides (``False & u`` is False)."""

  def __bool__(self):
    raise Unknown("the truth of a runtime condition")

  def __and__(self, other):
    return False if other is False or other is np.False_ else UNKNOWN_BOOL

  def __or__(self, other):
    return True if other is True or other is np.True_ else UNKNOWN_BOOL

  __rand__, __ror__ = __and__, __or__

  def __invert__(self):
    return UNKNOWN_BOOL

  def __xor__(self, other):
    return UNKNOWN_BOOL

  __rxor__ = __xor__

  def __repr__(self):
    return "UNKNOWN_BOOL"


UNKNOWN_BOOL = _UnknownBool()


class _Sign:
  """The sign of a difference, possibly undecided (a range of signs)."""

  def __init__(self, lo, hi):
    self.lo, self.hi = lo, hi


def _sign_or_unknown(d: Lin) -> _Sign:
  lo = -1 if d.lo is None else int(np.sign(d.lo))
  hi = 1 if d.hi is None else int(np.sign(d.hi))
  return _Sign(lo, hi)


def _decide(s, test):
  """``test(v)`` for the difference ``v`` (an int, or a :class:`_Sign` range): a bool
  when every sign in the range agrees, UNKNOWN_BOOL otherwise."""
  if isinstance(s, int):
    return bool(test(s))
  results = {bool(test(v)) for v in range(s.lo, s.hi + 1)}
  return results.pop() if len(results) == 1 else UNKNOWN_BOOL


# --- the evaluator's rules on forms ------------------------------------------------------


def _bounds(v):
  if isinstance(v, Lin):
    return v.lo, v.hi
  return int(v), int(v)


def _max2(a, b):
  decided = a >= b if isinstance(a, Lin) else b <= a
  if decided is True:
    return a
  if decided is False:
    return b
  (alo, ahi), (blo, bhi) = _bounds(a), _bounds(b)
  lo = max((x for x in (alo, blo) if x is not None), default=None)
  hi = None if ahi is None or bhi is None else max(ahi, bhi)
  return Lin.atom(lo, hi)


def _min2(a, b):
  return -_max2(-a, -b) if isinstance(a, Lin) or isinstance(b, Lin) else min(a, b)


def _elementwise(fn):
  def rule(a, b, **_):
    return np.frompyfunc(fn, 2, 1)(a, b)

  return rule


def _reduce_extreme(fn):
  def rule(x, *, axes, **_):
    out = np.frompyfunc(fn, 2, 1).reduce(x, axis=tuple(axes)) if x.size else None
    if out is None:
      raise Unknown("an empty reduction")
    return out

  return rule


def _select_n(which, *cases):
  def pick(w, *vals):
    if all(_same(v, vals[0]) for v in vals[1:]):
      return vals[0]
    if w is UNKNOWN_BOOL or isinstance(w, Lin):
      raise Unknown("a select on a runtime condition")
    return vals[int(w)]

  return np.frompyfunc(pick, len(cases) + 1, 1)(which, *cases)


def _same(a, b) -> bool:
  if isinstance(a, Lin) and isinstance(b, Lin):
    return a.const == b.const and a.terms == b.terms
  return not isinstance(a, Lin) and not isinstance(b, Lin) and int(a) == int(b)


def _convert(x, *, new_dtype, **params):
  if x.dtype != object:
    return folding._RULES["convert_element_type"](x, new_dtype=new_dtype, **params)
  if np.dtype(new_dtype).kind not in "iub":
    raise Unknown("a runtime value converted to a non-integer")
  if np.dtype(new_dtype).kind == "b":
    return np.frompyfunc(lambda v: v != 0, 1, 1)(x)
  return x  # the dtype's range is applied to the result (see _fit)


def _nested(name):
  """A ``tf.*`` primitive inside an impl: its own op's impl on the forms."""
  from tfprims import core

  op = core.lookup(name[3:])

  def rule(*ins, **params):
    if op is None or not hasattr(op, "impl"):
      raise Unknown(name)
    out = folding.fold(op.impl, list(ins), params, RULES)  # objects as the default int
    if out is None:
      raise Unknown(name)
    return out if op.multiple_results else out[0]

  return rule


class _Rules(dict):
  """The evaluator's rules on forms; ``fit`` bounds every intermediate result by its
  dtype (a narrow integer wraps inside an impl as between nodes)."""

  @staticmethod
  def fit(form, dtype):
    return _fit(form, dtype)

  def get(self, name, default=None):
    if name in self:
      return self[name]
    return _nested(name) if name.startswith("tf.") else default


RULES = _Rules(folding._RULES)
RULES.update(
  {
    "max": _elementwise(_max2),
    "min": _elementwise(_min2),
    "clamp": lambda lo, x, hi, **_: _elementwise(_min2)(_elementwise(_max2)(x, lo), hi),
    "reduce_max": _reduce_extreme(_max2),
    "reduce_min": _reduce_extreme(_min2),
    "select_n": lambda which, *cases, **_: _select_n(which, *cases),
    "convert_element_type": _convert,
  }
)
for _name in ("div", "rem", "integer_pow", "abs", "sign", "and", "or", "xor", "not"):
  _numeric = folding._RULES[_name]

  def _only_numbers(*xs, _numeric=_numeric, **params):
    if any(x.dtype == object and any(isinstance(v, Lin) for v in x.flat) for x in xs):
      raise Unknown("a non-affine op on a runtime value")
    return _numeric(*xs, **params)

  RULES[_name] = _only_numbers


# --- the interpreter's side --------------------------------------------------------------


def _small_int(value) -> bool:
  dtype = getattr(value, "dtype", None)
  shape = np.shape(value)
  return (
    dtype is not None
    and np.dtype(dtype).kind in "iub"
    and all(type(d) is int for d in shape)  # not a symbolic dim (jax.export)
    and int(np.prod(shape)) <= MAX_ELEMENTS
  )


def _fit(form: np.ndarray, dtype) -> np.ndarray:
  """Forms of an output of ``dtype``: constants wrapped into its range, intervals that
  leave it widened to it."""
  dtype = np.dtype(dtype)
  if dtype.kind not in "iu":
    return form
  info = np.iinfo(dtype)

  def fit(v):
    if not isinstance(v, Lin):
      return (
        v
        if isinstance(v, _UnknownBool)
        else int(
          np.asarray(int(v)).astype(np.int64 if dtype.kind == "i" else np.uint64).astype(dtype)
        )
      )
    if v.lo is None or v.hi is None or v.lo < info.min or v.hi > info.max:
      return Lin(v.const, v.terms, int(info.min), int(info.max))
    return v

  return _objects(np.frompyfunc(fit, 1, 1)(form))


def _objects(x) -> np.ndarray:
  """An object array (np.frompyfunc gives a bare element for 0-d inputs)."""
  out = np.empty(np.shape(x), dtype=object)
  out[...] = x
  return out


def _form_of(table: dict, value) -> Optional[np.ndarray]:
  """The forms of an operand: its numpy value, its recorded forms, or fresh atoms."""
  known = folding.known_value(value)
  if known is not None:
    return np.asarray(known)
  entry = table.get(id(value))
  if entry is not None and entry[0] is value:
    return entry[1]
  dtype = np.dtype(value.dtype)
  if dtype.kind == "b":
    return np.full(np.shape(value), UNKNOWN_BOOL, dtype=object)
  info = np.iinfo(dtype)
  atoms = [Lin.atom(int(info.min), int(info.max)) for _ in range(int(np.prod(value.shape)))]
  form = np.empty(len(atoms), dtype=object)
  form[:] = atoms
  form = form.reshape(value.shape)
  table[id(value)] = (value, form)
  return form


def forms(ctx, value) -> Optional[np.ndarray]:
  """The forms of a traced small integer ``value`` (an object array of ints and
  :class:`Lin`), or None for other values."""
  if folding.known_value(value) is not None or not _small_int(value):
    return None
  return _form_of(ctx.value_forms, value)


def bind(ctx, op, operands: Sequence[Any], params: dict, apply) -> list:
  """Runs a node of ``op`` (``apply()`` binds it, returning its list of outputs),
  through the analysis when its traced operands are small integers: outputs proven
  constant are returned as numpy without binding; the others' forms are recorded."""
  results = _analyse(ctx, op, operands, params)
  if results is not None and not any(_open(r) for r in results):
    return [np.asarray(r) for r in results]  # proven constant: folded
  outs = apply()
  if results is not None and len(results) == len(outs):
    for out, form in zip(outs, results):
      if _open(form) and form.shape == tuple(np.shape(out)) and _small_int(out):
        ctx.value_forms[id(out)] = (out, _fit(form, out.dtype))
  return outs


def _open(form) -> bool:
  return np.asarray(form).dtype == object and any(
    isinstance(v, (Lin, _UnknownBool)) for v in np.asarray(form).flat
  )


def _analyse(ctx, op, operands, params) -> Optional[list]:
  if op.uses_rng or op.reads_state or op.writes_state or op.calls_functions:
    return None
  traced = [o for o in operands if folding.known_value(o) is None]
  if not traced or not all(_small_int(o) for o in traced):
    return None
  ins = [_form_of(ctx.value_forms, o) for o in operands]
  try:
    with np.errstate(all="ignore"):
      results = folding.fold(
        op.impl, ins, params, RULES, dtypes=[np.dtype(o.dtype) for o in operands]
      )
  except Unknown:
    return None
  if results is None or any(np.size(r) > MAX_ELEMENTS for r in results):
    return None
  return [np.asarray(r) for r in results]


def elements(ctx, value) -> Optional[np.ndarray]:
  """What is known of ``value``'s elements: its numpy value, its forms (ints where
  proven, :class:`Lin` otherwise), or None when it is not a small integer."""
  known = folding.known_value(value)
  return np.asarray(known) if known is not None else forms(ctx, value)
