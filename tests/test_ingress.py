"""The ingress port's order: the kernel's radix sort of a destination's arrivals against
Python's sort, on arrival sets built to hit its edges (one value, spreads that are exact powers
of two, several passes, ties)."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from ubepsim.kernels.ingress import arrival_order, bits, sort_arrivals
from ubepsim.kernels.layout import KEY_BITS, LOCAL, RADIX_BITS


@st.composite
def arrivals(draw):
    """(arrival, kind) per store of a bucket, in the bucket's (slot) order."""
    n = draw(st.integers(1, 300))
    bot = draw(st.integers(0, 2 ** 40))
    spread = draw(st.one_of(st.just(0), st.integers(0, 12).map(lambda b: 2 ** b),
                            st.integers(0, 40).map(lambda b: 2 ** b - 1),
                            st.integers(1, 2 ** 36)))
    times = draw(st.lists(st.integers(bot, bot + spread), min_size=n, max_size=n))
    times[draw(st.integers(0, n - 1))] = bot + spread     # the spread is reached
    kinds = draw(st.lists(st.integers(0, 3), min_size=n, max_size=n))
    return list(zip(times, kinds))


@settings(max_examples=400, deadline=None)
@given(arrivals())
def test_the_ingress_sort_orders_by_arrival_then_slot(stores):
    n = len(stores)
    slot_bits = bits(n + 1)
    kind_shift = slot_bits + 2
    # keys as the kernel packs them: arrival | kind | slot
    keys = np.array([(a << kind_shift) | (k << slot_bits) | s for s, (a, k) in enumerate(stores)],
                    dtype=np.int64)
    times = [a for a, _ in stores]
    count = np.empty((1 << RADIX_BITS) + 1, np.int64)
    out = sort_arrivals(keys.copy(), np.empty(n, np.int64), n, kind_shift,
                        min(times), max(times), count)
    expected = sorted(range(n), key=lambda s: (stores[s][0], s))   # stable by arrival
    assert [int(k) & ((1 << slot_bits) - 1) for k in out[:n]] == expected
    assert sorted(out[:n].tolist()) == sorted(keys.tolist())       # the same keys, each once


@settings(max_examples=200, deadline=None)
@given(arrivals(), st.lists(st.booleans(), min_size=1, max_size=300), st.integers(0, 50))
def test_arrivals_too_late_to_pack_are_ordered_alike(stores, local, lo):
    """The ingress order from a bucket of st_arr values (local stores, negative, are not the
    port's): with keys packed for the radix sort, and with too few key bits for them (the
    comparison sort that takes over under absurdly slow profiles), the same stable order."""
    st_arr = [-1] * lo
    remote = []
    for slot, (arrival, kind) in enumerate(stores):
        if local[slot % len(local)]:
            st_arr.append(LOCAL - kind)
        else:
            st_arr.append(arrival << 2 | kind)
            remote.append(slot)
    if not remote:
        return
    st_arr = np.array(st_arr, dtype=np.int64)
    n = len(remote)
    slot_bits = bits(len(stores) + 1)
    times = [stores[s][0] for s in remote]
    expected = sorted(remote, key=lambda s: stores[s][0])    # stable: ties in slot order
    count = np.empty((1 << RADIX_BITS) + 1, np.int64)
    for key_bits in (KEY_BITS, bits(max(times) + 1) + slot_bits - 1):
        keys = np.array([(stores[s][0] << slot_bits | s) & ((1 << 63) - 1) for s in remote],
                        dtype=np.int64)
        out = arrival_order(keys, np.empty(n, np.int64), n, slot_bits, min(times),
                            max(times), count, st_arr, lo, key_bits)
        assert [int(k) & ((1 << slot_bits) - 1) for k in out[:n]] == expected, key_bits
