"""The fabric's queues against Python's: the ingress ports' 4-ary heaps (two sharing one
bucket from its two ends, as a die's port and its NIC do) against heapq, and the AIVs' sorted
event rings against a sorted list, on sequences of pushes and pops built to hit their edges
(ties of time, wrap-around, a ring filled to the brim)."""

from __future__ import annotations

import heapq

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from ubepsim.kernels.fabric import heap_at, heap_pop, heap_push, ring_push
from ubepsim.kernels.jit import njit


@njit
def _run_heaps(ops, size):
    """Replay ops on two heaps in one region of `size` rows: (which heap, key) pushes a key, a
    key of -1 pops that heap's top. Returns the popped keys in order."""
    heap = np.full((size, 2), -7, np.int64)
    bstart = np.array([0, size])
    n = np.zeros(2, np.int64)
    popped = np.empty(ops.shape[0], np.int64)
    k = 0
    for i in range(ops.shape[0]):
        which, key = ops[i, 0], ops[i, 1]
        base, step = heap_at(bstart, 0, which)
        if key < 0:
            popped[k] = heap[base, 0]
            if heap[base, 1] != heap[base, 0] * 3:      # a value travels with its key
                popped[k] = -99
            k += 1
            n[which] = heap_pop(heap, base, step, n[which])
        else:
            n[which] = heap_push(heap, base, step, n[which], key, key * 3)
    return popped[:k]


@st.composite
def heap_ops(draw):
    """Pushes of unique keys on two heaps and pops of non-empty ones, and the region's size."""
    keys = draw(st.lists(st.integers(0, 2 ** 50), min_size=1, max_size=200, unique=True))
    ops, sizes = [], [0, 0]
    for key in keys:
        which = draw(st.integers(0, 1))
        ops.append((which, key))
        sizes[which] += 1
        while draw(st.booleans()) and any(sizes):
            which = draw(st.sampled_from([w for w in (0, 1) if sizes[w]]))
            ops.append((which, -1))
            sizes[which] -= 1
    return ops, len(keys)


@settings(max_examples=300, deadline=None)
@given(heap_ops())
def test_two_heaps_in_one_bucket_pop_in_key_order(case):
    ops, size = case
    got = _run_heaps(np.array(ops, np.int64), size).tolist()
    want, heaps = [], ([], [])
    for which, key in ops:
        if key < 0:
            want.append(heapq.heappop(heaps[which]))
        else:
            heapq.heappush(heaps[which], key)
    assert got == want


@njit
def _run_ring(keys, pops, qsize):
    """Push keys into a sorted ring of qsize slots at an offset in a larger array, popping the
    head pops[i] times after push i. Returns the popped keys and what is left, in order."""
    base = 3
    queue = np.full(base + qsize + 5, -1, np.int64)
    qmask = qsize - 1
    head = size = 0
    out = []
    for i in range(keys.shape[0]):
        head = ring_push(queue, base, qmask, head, size, keys[i])
        size += 1
        for _ in range(pops[i]):
            if size:
                out.append(queue[base + head])
                head = (head + 1) & qmask
                size -= 1
    while size:
        out.append(queue[base + head])
        head = (head + 1) & qmask
        size -= 1
    return np.array(out), queue[:base], queue[base + qsize:]


@settings(max_examples=300, deadline=None)
@given(st.integers(2, 5).flatmap(lambda bits: st.tuples(
    st.just(1 << bits),
    st.lists(st.tuples(st.integers(0, 40), st.integers(0, 3)), min_size=1, max_size=60))))
def test_the_event_ring_pops_in_order_and_stays_in_its_slots(case):
    """The ring never holds more than its slots (a die's AIVs, each with one event): pushes that
    would overflow it are dropped from the case, as the fabric never makes them."""
    qsize, steps = case
    keys, pops, held = [], [], 0
    for key, n in steps:
        if held == qsize:
            break
        keys.append(key * 8 + len(keys) % 8)          # unique, ties of time broken by AIV
        held += 1
        pops.append(min(n, held))
        held -= pops[-1]
    out, before, after = _run_ring(np.array(keys, np.int64), np.array(pops, np.int64), qsize)
    # a reference: a sorted list popped from its front
    want, pending = [], []
    for key, n in zip(keys, pops):
        pending = sorted(pending + [key])
        want += pending[:n]
        pending = pending[n:]
    assert out.tolist() == want + pending
    assert (before == -1).all() and (after == -1).all()
