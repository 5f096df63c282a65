"""The ingress side of every die: its port serves the stores arriving from other dies one at a
time, in (arrival, source, store order), and a store is visible once the port has taken it.
"""

import numpy as np

from .jit import njit, u
from .layout import (C_COUNT_INGRESS, C_SIGNAL_INGRESS, K_CHECKSUM, K_COPY,
                     K_COUNT, K_FLAG, KEY_BITS, NEVER, RADIX_BITS)


@njit(inline="always")
def bits(v):
    """Bits needed to hold the values 0 .. v - 1."""
    b = 1
    while (np.int64(1) << b) < v:
        b += 1
    return b


@njit(inline="always")
def sort_arrivals(keys, other, n, shift, bot, top, count):
    """keys[:n] (each an arrival in the bits from `shift` up, all in [bot, top]) in order of
    arrival, stable: an LSD radix sort over the arrival bits. Returns the array, keys or
    other, that holds the result; count is scratch of (1 << RADIX_BITS) + 1."""
    # the arrivals share every bit above the highest one where bot and top differ
    sort_bits = bits((top ^ bot) + 1)
    # digits of at most RADIX_BITS and no wider than the bucket needs, as few passes as that
    # allows, the bits shared evenly
    width = min(RADIX_BITS, max(4, bits(n)))
    passes = (sort_bits + width - 1) // width
    digit = (sort_bits + passes - 1) // passes
    radix = np.int64(1) << digit
    dmask = radix - 1
    kd, ko = keys, other
    for _ in range(passes):
        count[:radix + 1] = 0
        for x in range(n):
            count[u(((kd[u(x)] >> shift) & dmask) + 1)] += 1
        for b in range(radix):
            count[b + 1] += count[b]
        for x in range(n):
            key = kd[u(x)]
            b = u((key >> shift) & dmask)
            ko[u(count[b])] = key
            count[b] += 1
        kd, ko = ko, kd
        shift += digit
    return kd


@njit(inline="always")
def arrival_order(keys, other, n, slot_bits, bot, top, count, st_arr, lo, key_bits):
    """A bucket's stores in the ingress port's order: keys[:n] (arrival << slot_bits | slot,
    the bucket's remote stores in slot order, arrivals in [bot, top]) sorted stably by arrival.
    Returns the array, keys or other, whose first n entries hold them (the slot in the low
    slot_bits bits). Arrivals too late to pack beside a slot in key_bits bits (only under
    absurdly slow profiles) are sorted by a stable comparison sort instead: the same order."""
    if bits(top + 1) + slot_bits <= key_bits:
        return sort_arrivals(keys, other, n, slot_bits, bot, top, count)
    x = 0
    sid = lo
    while x < n:   # the keys wrapped: each remote store's slot and arrival again
        v = st_arr[u(sid)]
        if v >= 0:
            keys[u(x)] = sid - lo
            other[u(x)] = v >> 2
            x += 1
        sid += 1
    order = np.argsort(other[:n], kind="mergesort")
    for x in range(n):
        other[u(x)] = keys[u(order[x])]
    return other


@njit(inline="always")
def ingress_costs(c, copy_ingress):
    """Ingress cost by store kind: a copy's (copy_ingress: dispatch's or a returned copy's
    column), a count message's, a signal's."""
    ing_of = np.empty(4, np.int64)
    ing_of[K_COPY] = c[copy_ingress]
    ing_of[K_COUNT] = c[C_COUNT_INGRESS]
    ing_of[K_FLAG] = c[C_SIGNAL_INGRESS]
    ing_of[K_CHECKSUM] = c[C_SIGNAL_INGRESS]
    return ing_of


@njit(inline="always")
def ingress(stores, ing_of, free_at):
    """Every destination's ingress port: each store's visibility (stores.vis) from its arrival,
    at its kind's cost (ing_of: ingress_costs). Port d starts free at free_at[d] (a layer's
    combine: once its dispatch's last store landed) and leaves there when it is next free.

    A bucket holds its stores source by source, so a stable sort by arrival alone gives the
    port's order; keys pack arrival | slot, the slot breaking ties. Two stores from one source
    never arrive together (its egress port sends one at a time, each taking at least a cycle,
    and they travel the same hop), so their order in the bucket, program order rather than the
    port's, never decides."""
    st_arr, st_vis, bstart, bfill = stores.arr, stores.vis, stores.bstart, stores.bfill
    biggest = 0
    for d in range(bfill.shape[0]):
        biggest = max(biggest, bfill[d] - bstart[d])
    keys = np.empty(biggest, np.int64)
    other = np.empty(biggest, np.int64)
    slot_bits = bits(biggest + 1)
    slot_mask = (np.int64(1) << slot_bits) - 1
    count = np.empty((np.int64(1) << RADIX_BITS) + 1, np.int64)
    for d in range(bfill.shape[0]):
        lo = bstart[d]
        n = 0
        bot = NEVER
        top = 0
        for sid in range(lo, bfill[d]):
            v = st_arr[u(sid)]
            if v >= 0:
                arrival = v >> 2
                keys[u(n)] = (arrival << slot_bits) | (sid - lo)
                n += 1
                top = max(top, arrival)
                bot = min(bot, arrival)
        if n == 0:
            continue
        kd = arrival_order(keys, other, n, slot_bits, bot, top, count, st_arr, lo, KEY_BITS)
        free = free_at[d]
        for x in range(n):
            sid = lo + (kd[u(x)] & slot_mask)
            v = st_arr[u(sid)]
            free = max(v >> 2, free) + ing_of[u(v & 3)]
            st_vis[u(sid)] = free
        free_at[d] = free
