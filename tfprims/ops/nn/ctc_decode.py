"""CTC decoders: CTCGreedyDecoder and CTCBeamSearchDecoder.

Their outputs are SparseTensors whose sizes depend on the data, so they have no
primitive: they are computed with numpy when their inputs are known at trace time
(constants, or concrete arrays in an eager call) and raise
:class:`~tfprims.errors.DynamicShapeError` naming the node when an input is traced
(``tfprims.interpreter.check_supported`` reports them at conversion).

Both follow TF's CPU kernels (``ctc_decoder_ops.cc``, ``ctc_beam_search.h``) step
for step, ties and float rounding included:

* greedy: the first maximum of each frame (TF's ``RowMax``: a NaN never wins, unless
  it is the first class), blanks dropped, repeats merged with ``merge_repeated``;
  ``log_probability`` is minus the sum of the frames' maxima, accumulated in the
  input dtype.
* beam search: TF's prefix beam search with the blank last, each frame's logits
  normalised by their log-sum-exp, log-probabilities added with TF's float
  ``LogSumExp``, and the beam kept in a ``gtl::TopN`` whose order (including ties)
  is that of libstdc++'s heap and sort algorithms, emulated here.
"""

from __future__ import annotations

import jax
import numpy as np

from tfprims import dtypes, errors
from tfprims.core import structural

FAMILY = "nn"
_WHY = "its decoded SparseTensor's size depends on the data"


def _known(node, inputs) -> list:
  """The inputs as numpy arrays, or a DynamicShapeError naming the node."""
  if any(isinstance(v, jax.core.Tracer) for v in inputs):
    raise errors.DynamicShapeError(
      f"{node.op} node '{node.name}': {_WHY}; under jit/vmap/grad its inputs are "
      "traced, so its output shape is unknown. Decode outside the traced function "
      "(on concrete logits), or call the converted function eagerly."
    )
  return [np.asarray(v) for v in inputs]


def _validate(node, x, seq_len):
  """TF's CTCDecodeHelper checks."""

  def fail(message):
    raise errors.RuntimeCheckError(node.op, node.name, message)

  if x.ndim != 3:
    fail("inputs is not a 3-Tensor")
  if x.size == 0:
    fail("inputs must not be empty")
  if seq_len.ndim != 1:
    fail("sequence_length is not a vector")
  if seq_len.shape[0] != x.shape[1]:
    fail(
      f"len(sequence_length) != batch_size.  len(sequence_length):  {seq_len.shape[0]} "
      f"batch_size: {x.shape[1]}"
    )
  for b, n in enumerate(seq_len.tolist()):
    if not n <= x.shape[0]:
      fail(f"sequence_length({b}) <= {x.shape[0]}")


def _sparse(node, paths, batch):
  """TF's StoreAllDecodedSequences for one path: indices, values, dense shape."""
  indices = [[b, t] for b, p in enumerate(paths) for t in range(len(p))]
  values = [v for p in paths for v in p]
  longest = max((len(p) for p in paths), default=0)
  what = f"{node.op} node '{node.name}'"
  return [
    dtypes.canonicalize_value(np.array(indices, np.int64).reshape(-1, 2), what),
    dtypes.canonicalize_value(np.array(values, np.int64), what),
    dtypes.canonicalize_value(np.array([batch, longest], np.int64), what),
  ]


# ---------------------------------------------------------------------------
# Greedy


def _row_max(row):
  """TF's RowMax: the first strict maximum scanning from class 0."""
  c, p = 0, row[0]
  for i in range(1, row.shape[0]):
    if row[i] > p:
      c, p = i, row[i]
  return c, p


@structural(
  "CTCGreedyDecoder",
  family=FAMILY,
  dynamic_shape=_WHY,
  doc="Best-path CTC decoding: each frame's most likely class, blanks dropped "
  "and (merge_repeated) repeats merged.",
)
def _greedy(ctx, node, inputs):
  x, seq_len = _known(node, inputs)
  _validate(node, x, seq_len)
  t_max, batch, num_classes = x.shape
  blank = node.attr("blank_index", -1)
  blank_index = num_classes + blank if blank < 0 else blank
  if not 0 <= blank_index < num_classes:
    raise errors.RuntimeCheckError(
      node.op,
      node.name,
      f"blank_index expected to be between {-num_classes} and {num_classes - 1} but was {blank}",
    )
  merge = node.attr("merge_repeated", False)
  log_prob = np.zeros((batch, 1), x.dtype)
  paths = []
  for b in range(batch):
    seq, prev = [], -1
    for t in range(int(seq_len[b])):
      c, p = _row_max(x[t, b])
      log_prob[b, 0] = log_prob[b, 0] + (-p)
      if c != blank_index and not (merge and c == prev):
        seq.append(c)
      prev = c
    paths.append(seq)
  return _sparse(node, paths, batch) + [
    dtypes.canonicalize_value(log_prob, f"{node.op} node '{node.name}'")
  ]


# ---------------------------------------------------------------------------
# Beam search: libstdc++'s heap and sort algorithms (gtl::TopN's order, ties included)


def _push_heap(a, hole, top, value, comp):
  parent = (hole - 1) // 2
  while hole > top and comp(a[parent], value):
    a[hole] = a[parent]
    hole = parent
    parent = (hole - 1) // 2
  a[hole] = value


def _adjust_heap(a, hole, length, value, comp):
  top, child = hole, hole
  while child < (length - 1) // 2:
    child = 2 * (child + 1)
    if comp(a[child], a[child - 1]):
      child -= 1
    a[hole] = a[child]
    hole = child
  if length % 2 == 0 and child == (length - 2) // 2:
    child = 2 * (child + 1)
    a[hole] = a[child - 1]
    hole = child - 1
  _push_heap(a, hole, top, value, comp)


def _make_heap(a, first, last, comp):
  view = a[first:last]
  n = len(view)
  if n >= 2:
    parent = (n - 2) // 2
    while True:
      _adjust_heap(view, parent, n, view[parent], comp)
      if parent == 0:
        break
      parent -= 1
  a[first:last] = view


def _pop_heap(a, last, comp):
  """std::pop_heap on a[:last] (the heap's first element goes to a[last - 1])."""
  if last > 1:
    last -= 1
    value = a[last]
    a[last] = a[0]
    _adjust_heap(a, 0, last, value, comp)


def _sort_heap(a, first, last, comp):
  view = a[first:last]
  n = len(view)
  while n > 1:
    n -= 1
    value = view[n]
    view[n] = view[0]
    _adjust_heap(view, 0, n, value, comp)
  a[first:last] = view


def _linear_insert(a, last, comp):
  value, nxt = a[last], last - 1
  while comp(value, a[nxt]):
    a[last] = a[nxt]
    last, nxt = nxt, nxt - 1
  a[last] = value


def _insertion_sort(a, first, last, comp):
  for i in range(first + 1, last):
    if comp(a[i], a[first]):
      value = a[i]
      a[first + 1 : i + 1] = a[first:i]
      a[first] = value
    else:
      _linear_insert(a, i, comp)


def _introsort_loop(a, first, last, depth, comp):
  while last - first > 16:
    if depth == 0:
      _make_heap(a, first, last, comp)
      _sort_heap(a, first, last, comp)
      return
    depth -= 1
    mid = first + (last - first) // 2
    x, y, z = first + 1, mid, last - 1
    if comp(a[x], a[y]):
      pick = y if comp(a[y], a[z]) else (z if comp(a[x], a[z]) else x)
    else:
      pick = x if comp(a[x], a[z]) else (z if comp(a[y], a[z]) else y)
    a[first], a[pick] = a[pick], a[first]
    lo, hi = first + 1, last
    while True:
      while comp(a[lo], a[first]):
        lo += 1
      hi -= 1
      while comp(a[first], a[hi]):
        hi -= 1
      if not lo < hi:
        break
      a[lo], a[hi] = a[hi], a[lo]
      lo += 1
    _introsort_loop(a, lo, last, depth, comp)
    last = lo


def _std_sort(a, comp):
  n = len(a)
  if n > 1:
    _introsort_loop(a, 0, n, 2 * (n.bit_length() - 1), comp)
    if n > 16:
      _insertion_sort(a, 0, 16, comp)
      for i in range(16, n):
        _linear_insert(a, i, comp)
    else:
      _insertion_sort(a, 0, n, comp)


class _TopN:
  """gtl::TopN with a "greater" comparator: the ``limit`` largest pushed elements."""

  def __init__(self, limit, comp):
    self.limit, self.comp = limit, comp
    self.reset()

  def reset(self):
    self.items, self.state = [], "unordered"

  def size(self):
    return len(self.items)

  def push(self, v):
    a, comp = self.items, self.comp
    if self.state != "heap":
      a.append(v)
      if len(a) == self.limit + 1:
        # to a heap of the limit largest: the smallest is dropped
        _make_heap(a, 0, len(a), comp)
        _pop_heap(a, len(a), comp)
        a.pop()
        self.state = "heap"
      elif self.state != "unordered" and not comp(a[-1], a[0]):
        a[0], a[-1] = a[-1], a[0]
    elif comp(v, a[0]):
      _pop_heap(a, len(a), comp)
      a[-1] = v
      _push_heap(a, len(a) - 1, 0, v, comp)

  def peek_bottom(self):
    a = self.items
    if self.state == "unordered":
      m = 0
      for i in range(1, len(a)):
        if self.comp(a[m], a[i]):
          m = i
      a[0], a[m] = a[m], a[0]
      self.state = "bottom_known"
    return a[0]

  def extract(self):
    out, self.items = self.items, []
    if self.state != "heap":
      _std_sort(out, self.comp)
    else:
      _sort_heap(out, 0, len(out), self.comp)
    return out

  def unsorted(self):
    return list(self.items)


# ---------------------------------------------------------------------------
# Beam search


# libm's float functions are correctly rounded (glibc: within 0.502 ulp): computed in
# float64 and rounded, not with numpy's float32 SIMD approximations.
def _expf(v):
  return np.float32(np.exp(np.float64(v)))


def _log1pf(v):
  return np.float32(np.log1p(np.float64(v)))


def _exp(v):
  return _expf(v) if v.dtype == np.float32 else np.exp(v)


def _log(v):
  return np.float32(np.log(np.float64(v))) if v.dtype == np.float32 else np.log(v)


class _Prob:
  __slots__ = ("total", "blank", "label")

  def __init__(self, ninf):
    self.total = self.blank = self.label = ninf

  def copy(self):
    p = _Prob(self.total)
    p.blank, p.label = self.blank, self.label
    return p


class _Entry:
  __slots__ = ("parent", "label", "children", "oldp", "newp")

  def __init__(self, parent, label, ninf):
    self.parent, self.label, self.children = parent, label, {}
    self.oldp, self.newp = _Prob(ninf), _Prob(ninf)

  def label_seq(self, merge):
    labels, prev, c = [], -1, self
    while c.parent is not None:
      if not merge or c.label != prev:
        labels.append(c.label)
      prev, c = c.label, c.parent
    return labels[::-1]


def _greater(a, b):
  return a.newp.total > b.newp.total


class _BeamSearch:
  """TF's CTCBeamSearchDecoder with its default (no-op) scorer, for one sequence."""

  def __init__(self, num_classes, beam_width, dtype):
    self.num_classes, self.width = num_classes, beam_width
    self.t = dtype.type
    self.ninf = self.t(-np.inf)
    self.leaves = _TopN(beam_width, _greater)
    self.root = _Entry(None, -1, self.ninf)
    self.root.newp.total = self.root.newp.blank = self.t(0)
    self.leaves.push(self.root)

  def lse(self, a, b):
    # TF's LogSumExp: log1pf(expf(...)) in float, whatever the dtype.
    if a == self.ninf:
      return b
    if b == self.ninf:
      return a
    hi, lo = (a, b) if a > b else (b, a)
    with np.errstate(all="ignore"):
      return self.t(hi + self.t(_log1pf(_expf(np.float32(lo - hi)))))

  def step(self, x):
    t, ninf = self.t, self.ninf
    with np.errstate(all="ignore"):
      top = x.max()
      total = t(0)
      for v in x:
        total = t(total + _exp(t(v - top)))
      norm = t(top + _log(total))
    blank = self.num_classes - 1
    branches = self.leaves.extract()
    self.leaves.reset()
    for b in branches:
      b.oldp = b.newp.copy()
    for b in branches:
      if b.parent is not None:
        if b.parent.newp.total != ninf:
          prev = b.parent.oldp.blank if b.label == b.parent.label else b.parent.oldp.total
          b.newp.label = self.lse(b.newp.label, prev)
        b.newp.label = t(b.newp.label + t(x[b.label] - norm))
      b.newp.blank = t(t(b.oldp.total + x[blank]) - norm)
      b.newp.total = self.lse(b.newp.blank, b.newp.label)
      self.leaves.push(b)

    def candidate(p):
      return p.total > ninf and (
        self.leaves.size() < self.width or p.total > self.leaves.peek_bottom().newp.total
      )

    for b in branches:
      if not candidate(b.oldp):
        continue
      for label in range(self.num_classes - 1):
        c = b.children.get(label)
        if c is None:
          c = b.children[label] = _Entry(b, label, ninf)
        if c.newp.total != ninf:
          continue
        c.newp.blank = ninf
        prev = b.oldp.blank if c.label == b.label else b.oldp.total
        c.newp.label = c.newp.total = t(t(x[label] - norm) + prev)
        if candidate(c.newp):
          if self.leaves.size() == self.width:
            self.leaves.peek_bottom().newp = _Prob(ninf)
          self.leaves.push(c)
        else:
          c.oldp, c.newp = _Prob(ninf), _Prob(ninf)

  def top_paths(self, n, merge):
    if n > self.width:
      return None, "requested more paths than the beam width."
    if n > self.leaves.size():
      return None, "Less leaves in the beam search than requested."
    best = _TopN(n, _greater)
    for e in self.leaves.unsorted():
      best.push(e)
    entries = best.extract()
    return [(e.label_seq(merge), e.newp.total) for e in entries], None


@structural(
  "CTCBeamSearchDecoder",
  family=FAMILY,
  dynamic_shape=_WHY,
  doc="CTC prefix beam search (blank = the last class): the top_paths most "
  "likely label sequences and their log-probabilities.",
)
def _beam_search(ctx, node, inputs):
  x, seq_len = _known(node, inputs)
  _validate(node, x, seq_len)
  t_max, batch, num_classes = x.shape
  width, top = node.attr("beam_width"), node.attr("top_paths")
  merge = node.attr("merge_repeated", True)
  log_prob = np.zeros((batch, top), x.dtype)
  paths = [[None] * batch for _ in range(top)]
  for b in range(batch):
    search = _BeamSearch(num_classes, width, x.dtype)
    for t in range(int(seq_len[b])):
      search.step(x[t, b])
    found, message = search.top_paths(top, merge)
    if found is None:
      raise errors.RuntimeCheckError(node.op, node.name, message)
    for p, (seq, score) in enumerate(found):
      paths[p][b] = seq
      log_prob[b, p] = score
  out = [_sparse(node, paths[p], batch) for p in range(top)]
  return (
    [o[0] for o in out]
    + [o[1] for o in out]
    + [o[2] for o in out]
    + [dtypes.canonicalize_value(log_prob, f"{node.op} node '{node.name}'")]
  )
