"""TF's CPU selection kernels step by step, for the rows where ``<`` is not an order.

TF's CPU ``TopKV2`` and ``NthElement`` kernels order with ``<`` and ``>``, which NaN
answers ``false`` to: a row with NaN comes out in the order the algorithm leaves it,
and the algorithms are libstdc++'s (``std::sort``, ``std::nth_element``, the
``std::*_heap`` functions) and tsl's ``gtl::TopN``. This module runs those
algorithms, as written in those libraries, with ``lax`` loops on one row (the
elements are (id, value) pairs, moved together), so that tfprims gives TF's result
on every input (docs/semantics/nn.md, "NaN"):

* ``top_k_row(x, k)``: TopKV2's ids for ``1 < k``: ``k == n`` is ``std::sort`` of
  ``0..n-1`` by ``x[b] < x[a]`` (introsort, then insertion sort), then each run of
  adjacent ``==`` values sorted by id; ``k < n`` is ``gtl::TopN`` (a heap of ``k``)
  fed ``0..n-1`` with the comparator "larger value, or neither larger nor smaller
  and the lower id", then ``std::sort_heap``.
* ``top_1(x)``: TopKV2's ``k == 1`` path, Eigen's row maximum (packets of
  :data:`PACKET` lanes ignore NaN, the scalar tail restarts after a NaN and a NaN
  last gives NaN), then the first element ``==`` to it (element 0 when none is).
* ``nth_row(x, n)``: NthElement's ``std::nth_element`` of the row's values by ``<``.

The loops run one row at a time (``lax.map``) and are meant for the rows that need
them: the callers use them under a ``lax.cond`` on "some row has NaN", so rows
without NaN cost one reduction. Guards stop the scans at the row's ends where
libstdc++ relies on a sentinel (unguarded loops), which NaN can remove; TF would
read out of bounds there.
"""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np
from jax import lax

#: Lanes of Eigen's packets in TF's x86-64 CPU build (AVX: 8 floats, 4 doubles; half
#: and bfloat16 packets hold 8), which decide where the k == 1 path ignores NaN.
PACKET = {"float64": 4}
_DEFAULT_PACKET = 8
_THRESHOLD = 16  # libstdc++'s _S_threshold: introsort leaves ranges this short


def _get(a, i):
  """Element ``i`` of ``a`` (a tuple of arrays moved together: ids, values)."""
  return tuple(lax.dynamic_index_in_dim(t, i, keepdims=False) for t in a)


def _put(a, i, v):
  return tuple(
    lax.dynamic_update_index_in_dim(t, jnp.asarray(u, t.dtype), i, 0) for t, u in zip(a, v)
  )


def _where(c, x, y):
  return tuple(jnp.where(c, p, q) for p, q in zip(x, y))


def _swap(a, i, j):
  ai, aj = _get(a, i), _get(a, j)
  return _put(_put(a, i, aj), j, ai)


def _rotate(a, lo, hi):
  """``a[lo..hi]`` rotated right by one (``a[hi]`` moves to ``lo``)."""
  pos = lax.iota(np.int32, a[0].shape[0])
  moved = (pos > lo) & (pos <= hi)
  out = tuple(jnp.where(moved, jnp.concatenate([t[:1], t[:-1]]), t) for t in a)
  return _put(out, lo, _get(a, hi))


def _log2(n: int) -> int:
  return max(int(n).bit_length() - 1, 0)


class Algorithms:
  """libstdc++'s algorithms on a sequence ``a`` of elements (a tuple of arrays of one
  length: ids, values), ordered by ``before(p, q)`` (the comparator: element ``p``
  goes before ``q``; elements are tuples of scalars or of arrays). Positions may be
  traced int32 scalars; every method returns the new sequence. Insertion sorts and
  partitions scan with vector operations or one step per loop iteration, to keep
  loop nests shallow (XLA compiles them slowly)."""

  def __init__(self, before, size: int):
    self.before = before
    self.size = size  # the sequence's length

  def _at_before(self, a, p, q):
    return self.before(_get(a, p), _get(a, q))

  # --- heaps (std::push_heap, std::pop_heap, std::make_heap, std::sort_heap) ---------

  def _push_up(self, a, first, hole, top, value):
    """__push_heap: ``value`` moved up from ``hole`` while its parent goes before it."""

    def cond(s):
      a, hole = s
      parent = (hole - 1) // 2
      return (hole > top) & self.before(_get(a, first + jnp.maximum(parent, 0)), value)

    def body(s):
      a, hole = s
      parent = (hole - 1) // 2
      return _put(a, first + hole, _get(a, first + parent)), parent

    a, hole = lax.while_loop(cond, body, (a, hole))
    return _put(a, first + hole, value)

  def _adjust(self, a, first, hole, length, value):
    """__adjust_heap: the hole sifted down to a leaf along the children that go
    first, then ``value`` pushed up from there."""
    top = hole

    def body(s):
      a, hole, second = s
      child = 2 * (second + 1)
      child = jnp.where(self._at_before(a, first + child, first + child - 1), child - 1, child)
      return _put(a, first + hole, _get(a, first + child)), child, child

    a, hole, second = lax.while_loop(lambda s: s[2] < (length - 1) // 2, body, (a, hole, hole))
    last_child = ((length & 1) == 0) & (second == (length - 2) // 2)
    child = 2 * (second + 1) - 1
    at_hole = first + hole
    a = _put(a, at_hole, _where(last_child, _get(a, first + child), _get(a, at_hole)))
    hole = jnp.where(last_child, child, hole)
    return self._push_up(a, first, hole, top, value)

  def make_heap(self, a, first, last):
    length = last - first

    def body(j, a):
      parent = (length - 2) // 2 - j
      return self._adjust(a, first, parent, length, _get(a, first + parent))

    count = jnp.where(length >= 2, (length - 2) // 2 + 1, 0)
    return lax.fori_loop(0, count, body, a)

  def _pop_to(self, a, first, last, result):
    """__pop_heap: the top moved to ``result``, the element there sifted in."""
    value = _get(a, result)
    a = _put(a, result, _get(a, first))
    return self._adjust(a, first, jnp.int32(0), last - first, value)

  def pop_heap(self, a, first, last):
    return _where(last - first > 1, self._pop_to(a, first, last - 1, last - 1), a)

  def push_heap(self, a, first, last):
    return self._push_up(a, first, last - first - 1, jnp.int32(0), _get(a, last - 1))

  def sort_heap(self, a, first, last):
    def body(j, a):
      end = last - 1 - j
      return self._pop_to(a, first, end, end)

    return lax.fori_loop(0, jnp.maximum(last - first - 1, 0), body, a)

  def heap_select(self, a, first, middle, last):
    """__heap_select: a heap of ``[first, middle)``, each later element that goes
    before its top swapped in."""
    a = self.make_heap(a, first, middle)

    def body(i, a):
      return _where(self._at_before(a, i, first), self._pop_to(a, first, middle, i), a)

    return lax.fori_loop(middle, last, body, a)

  # --- insertion sorts ------------------------------------------------------------------

  def insertion_sort(self, a, first, last, most: int):
    """__insertion_sort of ``[first, last)``, at most ``most`` elements long: an
    element going before ``a[first]`` moves to the front, any other goes after the
    nearest element below it that it does not go before."""
    window = lax.iota(np.int32, most)
    at = jnp.minimum(first + window, self.size - 1)

    def body(t, a):
      i = first + t
      val = _get(a, i)
      stops = ~self.before(val, tuple(jnp.take(x, at) for x in a)) & (window < t)
      after = jnp.max(jnp.where(stops, window, -1)) + 1
      to = jnp.where(self._at_before(a, i, first), first, first + after)
      return _where(i < last, _rotate(a, to, i), a)

    return lax.fori_loop(1, most, body, a)

  def _linear_inserts(self, a, start):
    """__unguarded_insertion_sort of ``[start, n)``: each element moved down past
    the elements it goes before (the scan stopped at position 0), one step per
    iteration."""
    n = self.size

    def body(s):
      a, i, j = s
      val = _get(a, i)
      more = (j >= 0) & self.before(val, _get(a, jnp.maximum(j, 0)))
      moved = _rotate(a, j + 1, i)
      return (_where(more, a, moved), jnp.where(more, i, i + 1), jnp.where(more, j - 1, i))

    a, _, _ = lax.while_loop(lambda s: s[1] < n, body, (a, jnp.int32(start), jnp.int32(start - 1)))
    return a

  # --- std::sort and std::nth_element ----------------------------------------------------

  def _median_to_first(self, a, result, x, y, z):
    """__move_median_to_first."""
    b = lambda p, q: self._at_before(a, p, q)
    bxy, byz, bxz = b(x, y), b(y, z), b(x, z)
    pick = jnp.where(
      bxy, jnp.where(byz, y, jnp.where(bxz, z, x)), jnp.where(bxz, x, jnp.where(byz, z, y))
    )
    return _swap(a, result, pick)

  def _partition_pivot(self, a, first, last):
    """__unguarded_partition_pivot: the median of three moved to ``first``, then
    __unguarded_partition of ``[first + 1, last)`` around it, one scan step per
    iteration (scanning up, then down, then a swap)."""
    n = self.size
    mid = first + (last - first) // 2
    a = self._median_to_first(a, first, first + 1, mid, last - 1)
    pv = _get(a, first)

    def body(s):
      a, f, l, down, _ = s
      up_more = ~down & (f < n - 1) & self.before(_get(a, f), pv)
      down_more = down & (l > 0) & self.before(pv, _get(a, l))
      done = down & ~down_more & (f >= l)
      swap = down & ~down_more & ~done
      a = _where(swap, _swap(a, f, l), a)
      f = jnp.where(up_more | swap, f + 1, f)
      l = jnp.where(down_more | (~down & ~up_more), l - 1, l)
      return a, f, l, down ^ ((~down & ~up_more) | swap), done

    a, cut, _, _, _ = lax.while_loop(
      lambda s: ~s[4], body, (a, first + 1, last, jnp.bool_(False), jnp.bool_(False))
    )
    return a, cut

  def sort(self, a):
    """std::sort of the whole sequence: introsort (ranges longer than 16
    partitioned, heapsort past 2*log2(n) levels), then the final insertion sort."""
    n = self.size
    zero = jnp.int32(0)
    if n <= _THRESHOLD:
      return self.insertion_sort(a, zero, jnp.int32(n), n)
    a = self._introsort(a, 2 * _log2(n))
    a = self.insertion_sort(a, zero, jnp.int32(_THRESHOLD), _THRESHOLD)
    return self._linear_inserts(a, _THRESHOLD)

  def _introsort(self, a, depth):
    """__introsort_loop with a stack of (first, last, depth) ranges: the ranges it
    leaves to the recursion are disjoint, so their order does not matter."""
    n = self.size
    stack = jnp.zeros((2 * depth + 4, 3), np.int32).at[0].set(jnp.array([0, n, depth], np.int32))

    def body(s):
      a, stack, sp = s
      first, last, d = stack[sp - 1, 0], stack[sp - 1, 1], stack[sp - 1, 2]
      sp = sp - 1

      def heapsort(args):
        a, stack, sp = args
        return self.sort_heap(self.make_heap(a, first, last), first, last), stack, sp

      def split(args):
        a, stack, sp = args
        a, cut = self._partition_pivot(a, first, last)
        stack = lax.dynamic_update_index_in_dim(stack, jnp.stack([cut, last, d - 1]), sp, 0)
        stack = lax.dynamic_update_index_in_dim(stack, jnp.stack([first, cut, d - 1]), sp + 1, 0)
        return a, stack, sp + 2

      branch = jnp.where(last - first > _THRESHOLD, jnp.where(d == 0, 1, 2), 0)
      return lax.switch(branch, [lambda args: args, heapsort, split], (a, stack, sp))

    a, _, _ = lax.while_loop(lambda s: s[2] > 0, body, (a, stack, jnp.int32(1)))
    return a

  def nth_element(self, a, nth):
    """std::nth_element (introselect; heap select past 2*log2(n) levels; insertion
    sort of the last range of at most 3)."""
    n = self.size
    if n <= 3:
      return self.insertion_sort(a, jnp.int32(0), jnp.int32(n), n)

    def body(s):
      a, first, last, depth, _ = s

      def heap_select(args):
        a, first, last = args
        a = self.heap_select(a, first, nth + 1, last)
        return _swap(a, first, nth), first, last, jnp.bool_(True)

      def split(args):
        a, first, last = args
        a, cut = self._partition_pivot(a, first, last)
        first, last = jnp.where(cut <= nth, cut, first), jnp.where(cut <= nth, last, cut)
        return a, first, last, jnp.bool_(False)

      a, first, last, done = lax.cond(depth == 0, heap_select, split, (a, first, last))
      return a, first, last, depth - 1, done

    a, first, last, _, done = lax.while_loop(
      lambda s: (s[2] - s[1] > 3) & ~s[4],
      body,
      (a, jnp.int32(0), jnp.int32(n), jnp.int32(2 * _log2(n)), jnp.bool_(False)),
    )
    return _where(done, a, self.insertion_sort(a, first, last, 3))


# --- the kernels -------------------------------------------------------------------------


def packet(dtype) -> int:
  return PACKET.get(np.dtype(dtype).name, _DEFAULT_PACKET)


def top_1(x):
  """TopKV2's ``k == 1`` index along the last axis (floats): Eigen's maximum (packets
  of :func:`packet` lanes skip NaN; the scalar tail keeps ``t`` unless ``t < acc``, so
  it restarts after a NaN and ends NaN when the last element is; the two combined with
  ``std::max(tail, packets)``), then the first element equal to it, else 0."""
  n = x.shape[-1]
  p = packet(x.dtype)
  vec = n // p * p
  neg_inf = jnp.array(-np.inf, x.dtype)
  head = x[..., :vec]
  hmax = (
    jnp.max(jnp.where(jnp.isnan(head), neg_inf, head), axis=-1)
    if vec
    else jnp.full(x.shape[:-1], neg_inf)
  )
  acc = jnp.full(x.shape[:-1], neg_inf)
  for j in range(vec, n):
    t = x[..., j]
    acc = jnp.where(t < acc, acc, t)
  m = jnp.where(acc < hmax, hmax, acc)
  return jnp.argmax(x == m[..., None], axis=-1).astype(np.int32)


def _sort_row(x):
  """TopKV2 with ``k == n``: std::sort of ids by ``x[b] < x[a]``, then runs of ``==``
  values sorted by id."""
  n = x.shape[0]
  idx, v = Algorithms(lambda p, q: q[1] < p[1], n).sort((lax.iota(np.int32, n), x))
  starts = jnp.concatenate([jnp.ones((1,), bool), v[1:] != v[:-1]])
  run = jnp.cumsum(starts.astype(np.int32))
  return lax.sort((run, idx), num_keys=2)[1]


def _top_n_before(p, q):
  """gtl::TopN's comparator in TF's kernel: larger value, or the lower id when
  neither value is larger."""
  return (q[1] < p[1]) | (~(q[1] > p[1]) & (p[0] < q[0]))


def _heap_row(x, k):
  """TopKV2 with ``1 < k < n``: gtl::TopN fed ``0..n-1``, then std::sort_heap."""
  n = x.shape[0]
  algo = Algorithms(_top_n_before, k + 1)
  zero = jnp.int32(0)
  # The first k + 1 elements: a heap of all, its top (the last) popped and dropped.
  el = algo.make_heap((lax.iota(np.int32, k + 1), x[: k + 1]), zero, jnp.int32(k + 1))
  el = tuple(t[:k] for t in algo.pop_heap(el, zero, jnp.int32(k + 1)))

  def push(c, el):
    new = (jnp.asarray(c, np.int32), _get((x,), c)[0])
    taken = algo.pop_heap(el, zero, jnp.int32(k))
    taken = algo.push_heap(_put(taken, k - 1, new), zero, jnp.int32(k))
    return _where(_top_n_before(new, _get(el, 0)), taken, el)

  el = lax.fori_loop(k + 1, n, push, el)
  return algo.sort_heap(el, zero, jnp.int32(k))[0]


def _nth_row(x, n):
  _, v = Algorithms(lambda p, q: p[1] < q[1], x.shape[0]).nth_element(
    (lax.iota(np.int32, x.shape[0]), x), jnp.int32(n)
  )
  return v[n]


def _rows_where(row, x, fast, need):
  """``row`` of each row of ``x`` (the last axis) where ``need`` is set, one row at a
  time, ``fast`` elsewhere; nothing runs when no row needs it."""

  def one(args):
    r, f, needed = args
    return lax.cond(needed, row, lambda r: f, r)

  def slow(args):
    x, fast, need = args
    rows = x.reshape((-1, x.shape[-1]))
    out = lax.map(
      one, (rows, fast.reshape((rows.shape[0],) + fast.shape[x.ndim - 1 :]), need.reshape(-1))
    )
    return out.reshape(fast.shape)

  return lax.cond(jnp.any(need), slow, lambda args: args[1], (x, fast, need))


def top_k_rows(x, k, fast, need):
  """TopKV2's indices for ``1 < k <= n`` where row mask ``need`` is set, ``fast``
  (the indices where ``<`` is an order) elsewhere."""
  row = _sort_row if k == x.shape[-1] else (lambda r: _heap_row(r, k))
  return _rows_where(row, x, fast, need)


def nth_rows(x, n, fast, need):
  """NthElement (``n`` already reversed for ``reverse``): std::nth_element of each
  row's values by ``<`` where ``need`` is set, ``fast`` elsewhere."""
  return _rows_where(lambda r: _nth_row(r, n), x, fast, need)
