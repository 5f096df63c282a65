"""One fabric for every die (paper Section 2.3; docs/model.md, "Fabric"): every AIV replays its
program of stores on its die's ports, every store crosses the switch tiers' links that queue
and its destination's ingress port, and its acknowledgement, half a hop after that port took it,
returns its sender's credits. A congested receiver so holds back every sender writing to it.

The twin (ubepsim.reference.fabric) takes one event at a time, in time order, over all dies.
Here each die runs its own events in time order as far as it can, round after round. A port
takes a store only once every store that could reach it earlier is known: each die's next
store leaves no sooner than its next event and than its egress port is free, and travels at
least half the shortest hop, so at a round's start every link and ingress port takes what
reached it before that frontier, and the acknowledgements of those stores are known. A die
then goes on until one of its AIVs (or its SyncAll) waits for an acknowledgement still
unknown: that AIV might ask the port before any later event of the die, so the die stops
there until a later round. The die whose frontier is the earliest always goes on, so every
round makes progress. Nothing depends on the order in which dies run: every port and link
serves in an order its own keys fix (an egress port by request time and AIV, a link by arrival,
source die and port, an ingress port by arrival and source die).

Speed. The dies interleave, so each event finds its AIV's state and its stores cold: the loop
prefetches the next event's state, keeps the current store's program word in the AIV's
row, and has each ingress port write a store's acknowledgement (with its kind, whose blocks its
credit returns) straight into its sender's in-flight slot, so that an AIV's credits are read
from its own ring; an ingress port, taking a store, prefetches the next one's row and slot. The
ports' heaps are 4-ary (bench/README.md has the figures).

The steps of a round: `frontier`, `drain_links`, `drain_ingress`, `run_dies`; their state is a
`Fabric` of named arrays, set up by `fabric_state`.
"""

from collections import namedtuple

import numpy as np

from .jit import njit, prefetch, u
from .layout import (CORE_BITS, B_SEND, B_SYNC, C_BLOCKS_IN_FLIGHT, C_COPY_BLOCKS, C_COPY_ISSUE,
                     C_COUNT_BLOCKS, C_COUNT_ISSUE, C_LAT_LOCAL, C_NIC_FROM, C_RETURN_BLOCKS,
                     C_RETURN_ISSUE, C_SIGNAL_ISSUE, ADDRESS, MARKED, NEW_DEST, PER_EXPERT,
                     PRECEDED, W_COPY, W_COUNT, W_RETURN, W_SIGNAL, WORK_ROWS, C_SYNCALL,
                     C_TIER1_DIES, C_COPY_EGRESS, C_COUNT_EGRESS, C_SIGNAL_EGRESS, C_RETURN_EGRESS,
                     DEST_MASK, K_CHECKSUM, K_COPY, K_COUNT, K_FLAG, KC_BLOCKS, KC_FENCE, KC_IN,
                     KC_ISSUE, KC_PORT, ARR, VIS, ACK, KC_PRE, KC_SWITCH, KC_TIER, KC_WIDTH, LOCAL,
                     N_HOPS, N_PORTS, N_TIERS, NEVER, NIC, S_COPIES, S_END, S_FIRST, S_HEAD,
                     S_LAST, S_MAX_ACK, S_N, S_OUT, S_PC, S_PHASE, S_SIG, S_STAGE, S_SW, S_T, S_T0,
                     S_WIDTH, S_WORD, SID_SHIFT, SRC_BITS, STAGE_BOUNDARY, STAGE_CREDITS,
                     STAGE_DONE, STAGE_FENCE, STAGE_REQUEST, STAGE_WORK, SWITCH_BIT, THEN_FENCE,
                     THEN_ISSUED, THEN_NEXT, THEN_SYNCALL, DIE_PORT)
from .sync import syncall

SRC_MASK = (1 << SRC_BITS) - 1
OVER = -2   # an AIV's phase's program is over
# An ingress queue's entry value: the store's id << SLOT_BITS + 2 | its sender's in-flight slot
# << 2 | its kind
SLOT_BITS = 32
SLOT_MASK = (1 << SLOT_BITS) - 1
CORE_MASK = (1 << CORE_BITS) - 1
# An in-flight slot (an AIV's ring of stores it issued, `fifo`): its store's kind in the low two
# bits, so that a credit returns its kind's blocks without a second array to miss in the cache;
# above them the store's acknowledgement once known, else -1 - (the earliest time it can be known
# << 2 | kind), below zero.
KNOWN_SHIFT = 2
# A link queue's entry: its key, arrival << LINK_SHIFT | source << 1 | port; its value, the
# store's id << LINK_SID | destination << LINK_DST | the step of its path it is at
LINK_SHIFT = SRC_BITS + 1
LINK_DST = 8
LINK_SID = LINK_DST + SRC_BITS


# --- what a store costs, by kind ---------------------------------------------------------------

@njit(inline="always")
def _set_kind(kc, kind, c, issue, blocks, first, fence):
    """A kind's row, beside its work (store_work): issue cycles, blocks, whether it waits
    behind a fence; its cost on each port and tier link, the cost columns from `first` (its
    egress column, layout.STORE_COSTS' order)."""
    row = kind * KC_WIDTH
    kc[row + KC_ISSUE] = issue
    kc[row + KC_BLOCKS] = blocks
    kc[row + KC_FENCE] = fence
    # STORE_COSTS: issue, egress, ingress, nic, tier1 ...
    kc[row + KC_PORT + 0] = c[first]
    kc[row + KC_PORT + NIC] = c[first + 2]
    kc[row + KC_IN + 0] = c[first + 1]
    kc[row + KC_IN + NIC] = c[first + 2]
    for k in range(N_TIERS):
        kc[row + KC_TIER + k] = c[first + 3 + k]


@njit(inline="always")
def store_work(kc, kind, at, c, EL, marker, preload):
    """What an AIV pays before a store of `kind`, from the layout.STORE_WORK charges of work
    kind `at` (layout.W_*): into its row's KC_PRE, the charges of every such store (EACH; per
    expert counted, EL; dc's marker work where `marker`, sync.Effects.copy_marker); into
    KC_SWITCH, what a store with the new-destination bit adds (NEW_DEST; ADDRESS where the
    protocol preloads its tokens, `preload`, else on every copy)."""
    row = kind * KC_WIDTH
    for w, col, per in WORK_ROWS:
        if w == at and per != PRECEDED:   # (PRECEDED: a copy's own, programs.copy_work)
            x = c[col] * (EL if per == PER_EXPERT else marker if per == MARKED else 1)
            if per == NEW_DEST or (per == ADDRESS and preload):
                kc[row + KC_SWITCH] += x
            else:
                kc[row + KC_PRE] += x


@njit(inline="always")
def preceded_work(c):
    """The cycles a copy of CANN's send loop pays for counting the copies before it at its
    die, beside the count's vector instructions (layout.STORE_WORK's PRECEDED charges)."""
    x = 0
    for w, col, per in WORK_ROWS:
        if w == W_COPY and per == PRECEDED:
            x += c[col]
    return x


@njit
def kind_table(c, fx, EL, preload):
    """The per-kind costs of a store (layout.KC_*): a copy's, a count message's (EL experts
    counted), a signal's (one block; a flag behind sw's fence), their work from
    layout.STORE_WORK (fx: sync.Effects, whose copy_marker is dc's marker work; preload:
    protocols.TOKEN_PRELOAD, whose copies load their window address per new destination)."""
    kc = np.zeros(4 * KC_WIDTH, np.int64)
    _set_kind(kc, K_COPY, c, c[C_COPY_ISSUE], c[C_COPY_BLOCKS], C_COPY_EGRESS, 0)
    store_work(kc, K_COPY, W_COPY, c, EL, fx.copy_marker, preload)
    _set_kind(kc, K_COUNT, c, c[C_COUNT_ISSUE], c[C_COUNT_BLOCKS], C_COUNT_EGRESS, 0)
    store_work(kc, K_COUNT, W_COUNT, c, EL, 0, preload)
    _set_kind(kc, K_FLAG, c, c[C_SIGNAL_ISSUE], 1, C_SIGNAL_EGRESS, fx.fence)
    _set_kind(kc, K_CHECKSUM, c, c[C_SIGNAL_ISSUE], 1, C_SIGNAL_EGRESS, 0)
    for kind in (K_FLAG, K_CHECKSUM):
        store_work(kc, kind, W_SIGNAL, c, EL, 0, preload)
    return kc


@njit
def return_kinds(c, fx, signalled):
    """The kind table of combine's stores: a returned copy's (its own blocks; its work from
    layout.STORE_WORK: its read into UBuf, its quantization under int8 and dc's marker work),
    the signals' (where copies are `signalled`, a flag behind sw's fence; V1's statuses are
    flags whose fence is their AIV's, before them all)."""
    kc = np.zeros(4 * KC_WIDTH, np.int64)
    _set_kind(kc, K_COPY, c, c[C_RETURN_ISSUE], c[C_RETURN_BLOCKS], C_RETURN_EGRESS, 0)
    store_work(kc, K_COPY, W_RETURN, c, 0, fx.copy_marker, 1)
    _set_kind(kc, K_FLAG, c, c[C_SIGNAL_ISSUE], 1, C_SIGNAL_EGRESS, fx.fence * signalled)
    _set_kind(kc, K_CHECKSUM, c, c[C_SIGNAL_ISSUE], 1, C_SIGNAL_EGRESS, 0)
    for kind in (K_FLAG, K_CHECKSUM):
        store_work(kc, kind, W_SIGNAL, c, 0, 0, 1)
    return kc


# --- queues ------------------------------------------------------------------------------------

@njit(inline="always")
def ring_push(queue, base, qmask, head, size, key):
    """Insert key into a sorted ring (head, size) at queue[base:base + qmask + 1] from its
    nearer end; returns the new head."""
    if size == 0 or key > queue[u(base + ((head + size - 1) & qmask))]:
        queue[u(base + ((head + size) & qmask))] = key
    elif key > queue[u(base + ((head + (size >> 1)) & qmask))]:
        x = size
        while queue[u(base + ((head + x - 1) & qmask))] > key:
            queue[u(base + ((head + x) & qmask))] = queue[u(base + ((head + x - 1) & qmask))]
            x -= 1
        queue[u(base + ((head + x) & qmask))] = key
    else:
        head = (head - 1) & qmask
        x = 0
        while x < size and queue[u(base + ((head + x + 1) & qmask))] < key:
            queue[u(base + ((head + x) & qmask))] = queue[u(base + ((head + x + 1) & qmask))]
            x += 1
        queue[u(base + ((head + x) & qmask))] = key
    return head


# The heaps are 4-ary: a node's four children share a cache line, and a pop's sift-down takes
# half the levels of a binary heap's (the ingress ports' pops were a third of the loop's time).
ARITY_BITS = 2


@njit(inline="always")
def heap_push(heap, base, step, n, key, val):
    """Push (key, val) on the 4-ary heap of n entries at heap[base + step * i] (a row: key,
    value; step 1 or -1: two heaps share a region from its two ends). Returns the new size.
    Keys are unique."""
    i = n
    while i > 0:
        parent = (i - 1) >> ARITY_BITS
        at = u(base + step * parent)
        if heap[at, 0] < key:
            break
        here = u(base + step * i)
        heap[here, 0] = heap[at, 0]
        heap[here, 1] = heap[at, 1]
        i = parent
    here = u(base + step * i)
    heap[here, 0] = key
    heap[here, 1] = val
    return n + 1


@njit(inline="always")
def heap_pop(heap, base, step, n):
    """Drop the top of the 4-ary heap of n entries at heap[base + step * i] (read it first).
    Returns the new size."""
    n -= 1
    last = u(base + step * n)
    key = heap[last, 0]
    val = heap[last, 1]
    i = 0
    while True:
        first = (i << ARITY_BITS) + 1
        if first >= n:
            break
        # the least of its children
        child = first
        least = heap[u(base + step * first), 0]
        for c in range(first + 1, min(first + (1 << ARITY_BITS), n)):
            k = heap[u(base + step * c), 0]
            if k < least:
                least = k
                child = c
        if key < least:
            break
        at = u(base + step * child)
        here = u(base + step * i)
        heap[here, 0] = least
        heap[here, 1] = heap[at, 1]
        i = child
    here = u(base + step * i)
    heap[here, 0] = key
    heap[here, 1] = val
    return n


@njit(inline="always")
def heap_at(bstart, d, p):
    """Where destination d's port-p ingress heap lives in its bucket: (base, step). The die port's
    grows from the bucket's start, the NIC's from its end."""
    if p == 0:
        return bstart[d], 1
    return bstart[d + 1] - 1, -1


@njit(inline="always")
def acked(x, kind):
    """An in-flight slot: its store of `kind` acknowledged at x."""
    return x << KNOWN_SHIFT | kind


@njit(inline="always")
def unknown_until(x, kind):
    """An in-flight slot: its store of `kind` not acknowledged before x."""
    return -1 - (x << KNOWN_SHIFT | kind)


@njit(inline="always")
def outstanding(g, st, fifo, cap):
    """The latest acknowledgement of every store AIV row g issued, (latest, -1) if each is
    known; else (latest known, the earliest time the last unknown one can be known)."""
    latest = st[u(g), S_MAX_ACK]
    unknown = -1
    base = g * cap
    hd = st[u(g), S_HEAD]
    for x in range(st[u(g), S_N]):
        v = fifo[u(base + hd)]
        hd = hd + 1 if hd + 1 < cap else 0
        if v < 0:
            unknown = max(unknown, (-1 - v) >> KNOWN_SHIFT)
        else:
            latest = max(latest, v >> KNOWN_SHIFT)
    return latest, unknown


@njit(inline="always")
def begin_phase(g, s, a, phase, st, pb, t_core, drained):
    """AIV row g (AIV a of die s) starts `phase`: its clock, its program's bounds; if
    `drained`, nothing in flight (what it had came back: a fence or SyncAll saw to it), else its
    stores in flight keep their credits; in the first phase no store acknowledged and no copy
    sent yet."""
    st[g, S_PHASE] = phase
    st[g, S_T] = t_core[s, a]
    st[g, S_SIG] = st[g, S_SW] = 0
    if drained:
        st[g, S_HEAD] = st[g, S_N] = st[g, S_OUT] = 0
    if phase == 0:
        st[g, S_MAX_ACK] = 0
        st[g, S_FIRST] = -1
        st[g, S_LAST] = -1
        st[g, S_COPIES] = 0
    st[g, S_PC] = pb[g, phase, 0]
    st[g, S_END] = pb[g, phase, 1]
    st[g, S_STAGE] = STAGE_WORK


@njit(inline="always")
def end_phase(g, s, a, st, C, other, cores):
    """AIV row g's phase is over: its time, split into its signals' (flags and checksums with
    their waits) as sync and the rest as its main work's bucket (sending copies: the AIVs from C
    on in the first phase; else `other`), and its mark at the phase's end (layout.Cores)."""
    t_core, bucket, wait = cores.t, cores.bucket, cores.wait
    marks, nmarks = cores.marks, cores.nmarks
    phase = st[g, S_PHASE]
    main = B_SEND if (phase == 0 and a >= C) else other
    bucket[s, a, main] += st[g, S_T] - t_core[s, a] - st[g, S_SIG]
    bucket[s, a, B_SYNC] += st[g, S_SIG]
    wait[s, a] += st[g, S_SW]
    t_core[s, a] = st[g, S_T]
    if phase == 0:
        cores.first_copy[s, a] = st[g, S_FIRST]
    marks[s, a, nmarks[s, a]] = t_core[s, a]
    nmarks[s, a] += 1


@njit(inline="always")
def turn(g, s, a, st, pb, fifo, cap, nph, then, C, other, cores):
    """AIV a of die s (row g) at the end of its phase's program, or waiting at a fence of its
    own before its next phase: the phase's end, then the fence. Returns the key of the AIV's
    next event (a wake where the fence waits for an acknowledgement not yet known; its next
    phase's first step), -1 once it waits for its die (a SyncAll) or is done."""
    if st[g, S_STAGE] != STAGE_BOUNDARY:
        end_phase(g, s, a, st, C, other, cores)
        if st[g, S_PHASE] + 1 < nph and then == THEN_FENCE:
            st[g, S_STAGE] = STAGE_BOUNDARY
        elif st[g, S_PHASE] + 1 < nph and then == THEN_NEXT:
            begin_phase(g, s, a, st[g, S_PHASE] + 1, st, pb, cores.t, False)
            return cores.t[s, a] << CORE_BITS | a
        else:
            st[g, S_STAGE] = STAGE_DONE
            return -1
    latest, unknown = outstanding(g, st, fifo, cap)
    if unknown >= 0:
        return max(st[g, S_T], unknown) << CORE_BITS | a
    w = latest - cores.t[s, a]
    if w > 0:
        cores.t[s, a] += w
        cores.bucket[s, a, B_SYNC] += w
        cores.wait[s, a] += w
    st[g, S_MAX_ACK] = latest
    begin_phase(g, s, a, st[g, S_PHASE] + 1, st, pb, cores.t, True)
    return cores.t[s, a] << CORE_BITS | a


@njit(inline="always")
def links_of(h, queues):
    """The tier links a store of hop class h queues on: the tiers it climbs (3 + k <= h) that
    queue, each crossed twice (up from its source's domain, down into its destination's)."""
    n = 0
    for k in range(h - 2):
        n += queues[k]
    return 2 * n


@njit(inline="always")
def link_on(h, step, queues):
    """The tier of step `step` of hop class h's path over the links that queue, and whether it
    goes up (0, from the source's domain) or down (1, into the destination's)."""
    n = links_of(h, queues) >> 1
    which = step if step < n else 2 * n - 1 - step
    for k in range(h - 2):
        if queues[k]:
            if which == 0:
                return k, 0 if step < n else 1
            which -= 1
    return 0, 0


@njit(inline="always")
def links_left(h, step, queues, kc, row):
    """The least time a store of hop class h spends on its path's links from step `step` on."""
    n = links_of(h, queues)
    t = 0
    for x in range(step, n):
        k, _ = link_on(h, x, queues)
        t += kc[u(row + KC_TIER + k)]
    return t


@njit(inline="always")
def barrier(s, A, st, fifo, cap, pb, cores, cost, acked):
    """Die s's barrier once its last AIV is done with its phase: if `acked` (a SyncAll), when
    every store of the die was acknowledged; the barrier's cost after the last of them and of
    the AIVs, every AIV starts its next phase. Returns -1 once done, or the earliest time the
    acknowledgements it still waits for can be known."""
    ready = 0
    if acked:
        unknown = -1
        for a in range(A):
            latest, later = outstanding(s * A + a, st, fifo, cap)
            st[s * A + a, S_MAX_ACK] = latest
            ready = max(ready, latest)
            unknown = max(unknown, later)
        if unknown >= 0:
            return unknown
    syncall(s, ready, cost, cores.t, cores.bucket, cores.wait, cores.marks, cores.nmarks)
    for a in range(A):
        begin_phase(s * A + a, s, a, st[s * A + a, S_PHASE] + 1, st, pb, cores.t, acked)
    return -1


# The fabric's state, set up once per configuration (`fabric_state`) and read and written by the
# rounds' steps: per AIV row its state (layout.S_*) and its ring of `cap` stores in flight (an
# in-flight slot, above); per die its events, two sorted rings of qsize (`queue`; their heads and
# sizes in `rings`), its next event's time and its AIVs not yet done with their phase; the ingress
# ports' heaps, in their destinations' buckets, and their sizes; the links' heap and when each
# link is next free [tier, up or down, domain]; per port, the earliest any store still to come can
# leave it. And per hop class: half its latency (to the far port) and the rest (the
# acknowledgement's way back), its port out, its links that queue; the tiers whose links queue
# and their domains' sizes; how far ahead of every die's next event a store can arrive (`ahead`).
Fabric = namedtuple("Fabric", (
    "st", "fifo", "queue", "rings", "dnext", "live", "heap", "hsize", "lheap", "link_free",
    "frontier", "half", "back", "port_of", "nlinks", "queues", "tier_dies", "cap", "qsize",
    "qmask", "ahead"))


@njit
def fabric_state(R, A, c, kc, hops, n_stores):
    """A configuration's fabric before its first round (Fabric): nothing in flight, no event."""
    cap = c[C_BLOCKS_IN_FLIGHT]
    lat = c[C_LAT_LOCAL:C_LAT_LOCAL + N_HOPS]
    half = np.empty(N_HOPS, np.int64)
    back = np.empty(N_HOPS, np.int64)
    port_of = np.empty(N_HOPS, np.int64)
    for h in range(N_HOPS):
        half[h] = lat[h] >> 1
        back[h] = lat[h] - (lat[h] >> 1)
        port_of[h] = NIC if h >= c[C_NIC_FROM] else DIE_PORT
    # the tiers whose links queue, their domains' sizes, and each hop class's links
    queues = np.zeros(N_TIERS, np.int64)
    tier_dies = np.ones(N_TIERS, np.int64)
    for k in range(N_TIERS):
        tier_dies[k] = max(1, c[C_TIER1_DIES + k])
        queues[k] = 1 if c[C_TIER1_DIES + k] and kc[K_COPY * KC_WIDTH + KC_TIER + k] else 0
    nlinks = np.zeros(N_HOPS, np.int64)
    for h in range(3, N_HOPS):
        nlinks[h] = links_of(h, queues)
    # how far ahead of every die's next event a store can arrive at an ingress port: half the
    # shortest hop of the classes present (with none, no store leaves its die)
    present = np.zeros(N_HOPS, np.int64)
    for x in range(R * R):
        present[hops[x]] = 1
    ahead = NEVER
    for h in range(1, N_HOPS):
        if present[h]:
            ahead = min(ahead, half[h])
    if ahead == NEVER:
        ahead = 0
    qsize = 1
    while qsize < A + 1:
        qsize *= 2
    n_linked = n_stores if queues.sum() > 0 else 0     # stores that may cross a link
    return Fabric(
        st=np.zeros((R * A, S_WIDTH), np.int64), fifo=np.empty(R * A * cap, np.int64),
        queue=np.empty(R * 2 * qsize, np.int64), rings=np.zeros((R, 4), np.int64),
        dnext=np.full(R, NEVER, np.int64), live=np.zeros(R, np.int64),
        heap=np.empty((n_stores, 2), np.int64), hsize=np.zeros((R, N_PORTS), np.int64),
        lheap=np.empty((n_linked, 2), np.int64),
        link_free=np.zeros((N_TIERS, 2, R), np.int64), frontier=np.empty(N_PORTS, np.int64),
        half=half, back=back, port_of=port_of, nlinks=nlinks, queues=queues,
        tier_dies=tier_dies, cap=cap, qsize=qsize, qmask=qsize - 1, ahead=ahead)


def fabric_bytes(R, A, cap, queued):
    """What fabric_state's arrays take for R dies of A AIVs, as numbers or numpy columns (the
    host's memory estimate, ubepsim.model.memory): per AIV its state row and its ring of `cap`
    in-flight slots, per die its two event rings (of at most 2A slots), and the entries of the
    ports' and links' heaps that can be filled at once (`queued`: they are sized for every
    store, but a page no entry reaches is never resident)."""
    return 8 * R * A * (S_WIDTH + cap + 4) + 16 * queued


@njit
def first_events(f, pb, t_core):
    """Every AIV's first event: its clock after Init, where its first phase begins."""
    R, A = t_core.shape
    st, queue, qsize, qmask = f.st, f.queue, f.qsize, f.qmask
    for s in range(R):
        f.live[s] = A
        base1 = (2 * s + 1) * qsize
        h1 = 0
        for a in range(A):
            begin_phase(s * A + a, s, a, 0, st, pb, t_core, True)
            h1 = ring_push(queue, base1, qmask, h1, a, t_core[s, a] << CORE_BITS | a)
        f.rings[s, 2] = h1
        f.rings[s, 3] = A
        f.dnext[s] = queue[base1 + h1] >> CORE_BITS


# A round's steps, from here to run_dies, are inlined into `fabric` by LLVM (forceinline):
# called, run_dies cost 2-7% of the time (R=256, B=128, K=8; bench/compare_kernels.py --config);
# inlined by Numba instead (inline="always"), as fast, the first compile took 8 s longer (55
# against 47 s). The dies' loop is inside run_dies: called per die, its arrays' reference counts
# went up and down.
@njit(forceinline=True)
def frontier(f, egress_free):
    """Every die has run its events before the returned time, `lo`: per port, the earliest any
    store still to come can leave it (a die's next store leaves a port no sooner than its next
    event and than the port is free: its earlier requests go first); `lo`, the earliest over
    both."""
    dnext, front = f.dnext, f.frontier
    lo = NEVER
    for pt in range(N_PORTS):
        front[pt] = NEVER
        for s in range(dnext.shape[0]):
            if dnext[s] < NEVER:
                front[pt] = min(front[pt], max(dnext[s], egress_free[s, pt]))
        lo = min(lo, front[pt])
    return lo


@njit(forceinline=True)
def drain_links(f, lo, lsize, hops, kc, stores):
    """Every store that reached a link before `lo` was requested before then: taken there in
    order of arrival, on to the next link or to its ingress port. Returns the links' heap's
    size."""
    R = f.dnext.shape[0]
    sto, bstart = stores.sto, stores.bstart
    fifo, lheap, heap, hsize, link_free = f.fifo, f.lheap, f.heap, f.hsize, f.link_free
    queues, tier_dies, nlinks, half, back = f.queues, f.tier_dies, f.nlinks, f.half, f.back
    while lsize > 0 and (lheap[0, 0] >> LINK_SHIFT) < lo:
        key = lheap[0, 0]
        val = lheap[0, 1]
        lsize = heap_pop(lheap, 0, 1, lsize)
        t = key >> LINK_SHIFT
        s = (key >> 1) & SRC_MASK
        pt = key & 1
        sid = val >> LINK_SID
        d = (val >> LINK_DST) & SRC_MASK
        step = val & ((1 << LINK_DST) - 1)
        h = hops[s * R + d]
        kind = sto[sid, ARR] & 3
        row = kind * KC_WIDTH
        slot = sto[sid, ACK]       # its sender's in-flight slot, kept here while it climbs
        k, down = link_on(h, step, queues)
        dom = (d if down else s) // tier_dies[k]
        out = max(t, link_free[k, down, dom]) + kc[row + KC_TIER + k]
        link_free[k, down, dom] = out
        if step + 1 < nlinks[h]:
            lsize = heap_push(lheap, 0, 1, lsize, out << LINK_SHIFT | s << 1 | pt, val + 1)
            earliest = out + links_left(h, step + 1, queues, kc, row) + half[h]
            sto[sid, ARR] = earliest << 2 | kind
            fifo[slot] = unknown_until(earliest + back[h] + 1, kind)
        else:
            arrival = out + half[h]
            fifo[slot] = unknown_until(arrival + back[h] + 1, kind)
            base, dirn = heap_at(bstart, d, pt)
            hsize[d, pt] = heap_push(heap, base, dirn, hsize[d, pt], arrival << SRC_BITS | s,
                                     sid << (SLOT_BITS + 2) | slot << 2 | kind)
    return lsize


@njit(forceinline=True)
def drain_ingress(f, longest, hops, kc, stores, ingress_free):
    """Every store that reached an ingress port before half the shortest hop after its port's
    frontier (it left before then) is taken, in order of arrival and source: visible, and its
    acknowledgement known. Returns the longest wait of a store in an ingress port's queue."""
    R = f.dnext.shape[0]
    sto, bstart = stores.sto, stores.bstart
    fifo, heap, hsize, back = f.fifo, f.heap, f.hsize, f.back
    front, ahead = f.frontier, f.ahead
    for d in range(R):
        for pt in range(N_PORTS):
            n = hsize[d, pt]
            if n == 0:
                continue
            until = front[pt] + ahead if front[pt] < NEVER else NEVER
            base, dirn = heap_at(bstart, d, pt)
            free = ingress_free[d, pt]
            while n > 0 and (heap[base, 0] >> SRC_BITS) < until:
                key = heap[base, 0]
                val = heap[base, 1]
                n = heap_pop(heap, base, dirn, n)
                if n > 0:
                    # the next store's row and its sender's slot, on their way
                    nv = heap[base, 1]
                    prefetch(sto, (nv >> (SLOT_BITS + 2)) * sto.shape[1])
                    prefetch(fifo, (nv >> 2) & SLOT_MASK)
                arrival = key >> SRC_BITS
                kind = val & 3
                begin = max(arrival, free)
                longest = max(longest, begin - arrival)
                free = begin + kc[kind * KC_WIDTH + KC_IN + pt]
                # visible; and acknowledged the hop's second half later, in the store's row
                # and in its sender's in-flight slot
                x = free + back[hops[(key & SRC_MASK) * R + d]]
                sid = val >> (SLOT_BITS + 2)
                sto[sid, ARR] = arrival << 2 | kind
                sto[sid, VIS] = free
                sto[sid, ACK] = x
                fifo[(val >> 2) & SLOT_MASK] = acked(x, kind)
            hsize[d, pt] = n
            ingress_free[d, pt] = free
    return longest


@njit(forceinline=True)
def run_dies(f, lsize, c, kc, hops, stores, prog, pre, pb, nph, then, C, other, cores,
             egress_free):
    """Every die with an event runs its events in (time, AIV) order, as far as it goes: the
    egress port taking a request, an AIV going on after it or after a wait, the die's SyncAll.
    A die stops at the first AIV (or SyncAll) still waiting for an acknowledgement not yet
    known: it cannot be known before the ports catch up with the other dies, and every later
    event of the die may depend on it (the AIV may ask the port first). The die with the
    earliest next event always goes on: what it waits for arrived before its port's frontier. A
    die's events are two sorted rings, the first C AIVs' and the others' (with the die's own
    SyncAll, AIV index A): the port takes the earlier of their heads. Returns the links' heap's
    size.

    The hot path (a port taking a store, an AIV going on to its next) is written out here: an
    inlined function's array arguments cost a reference count up and down on every call, which
    Numba does not prune across the loop's branches (measured: 36% of the time)."""
    t_core = cores.t
    R, A = t_core.shape
    sto, bstart = stores.sto, stores.bstart
    lat_local = c[C_LAT_LOCAL]
    st, fifo, queue, rings, dnext, live = f.st, f.fifo, f.queue, f.rings, f.dnext, f.live
    heap, hsize, lheap = f.heap, f.hsize, f.lheap
    half, back, port_of, nlinks, queues = f.half, f.back, f.port_of, f.nlinks, f.queues
    cap, qsize, qmask = f.cap, f.qsize, f.qmask
    for s in range(R):
        if dnext[s] == NEVER:
            continue
        base0 = 2 * s * qsize
        base1 = base0 + qsize
        h0, s0, h1, s1 = rings[s, 0], rings[s, 1], rings[s, 2], rings[s, 3]
        while True:
            if s0 > 0 and (s1 == 0 or queue[u(base0 + h0)] < queue[u(base1 + h1)]):
                top = queue[u(base0 + h0)]
                h0 = (h0 + 1) & qmask
                s0 -= 1
            elif s1 > 0:
                top = queue[u(base1 + h1)]
                h1 = (h1 + 1) & qmask
                s1 -= 1
            else:
                break
            a = top & CORE_MASK
            # the next event's AIV state, on its way while this one runs
            if s0 > 0 and (s1 == 0 or queue[u(base0 + h0)] < queue[u(base1 + h1)]):
                nb_ = (s * A + (queue[u(base0 + h0)] & CORE_MASK)) * S_WIDTH
            else:
                nb_ = (s * A + (queue[u(base1 + h1)] & CORE_MASK)) * S_WIDTH
            if s0 + s1 > 0 and nb_ < R * A * S_WIDTH:
                prefetch(st, nb_)
                prefetch(st, nb_ + 8)
            if a == A:
                key = barrier(s, A, st, fifo, cap, pb, cores,
                              c[C_SYNCALL] if then == THEN_SYNCALL else lat_local,
                              then == THEN_SYNCALL)
                if key >= 0:
                    h1 = ring_push(queue, base1, qmask, h1, s1, key << CORE_BITS | A)
                    s1 += 1
                    if key << CORE_BITS | A == top:
                        break                    # still waiting
                else:
                    for b in range(A):
                        # every AIV goes on from the barrier (no CalCumSum group queues
                        # apart after the first phase)
                        h1 = ring_push(queue, base1, qmask, h1, s1,
                                       t_core[s, b] << CORE_BITS | b)
                        s1 += 1
                    live[s] = A
                continue
            g = s * A + a
            stage = st[u(g), S_STAGE]
            # its next program word and its oldest store in flight, on their way
            prefetch(prog, st[u(g), S_PC] + 1)
            prefetch(pre, st[u(g), S_PC] + 1)
            prefetch(fifo, g * cap + st[u(g), S_HEAD])
            if stage == STAGE_REQUEST:
                # the port takes the store: its cost after the port is free, then on to the
                # tier links that queue or to the destination's ingress port, half the hop
                # later; a store to the die itself is visible and acknowledged after the
                # local latency
                t = top >> CORE_BITS
                ip = st[u(g), S_PC]
                word = st[u(g), S_WORD]
                d = (word >> 2) & DEST_MASK
                kind = word & 3
                sid = word >> SID_SHIFT
                row = kind * KC_WIDTH
                slot = st[u(g), S_HEAD] + st[u(g), S_N]
                if slot >= cap:
                    slot -= cap
                slot += g * cap
                if d == s:
                    x = t + lat_local
                    sto[u(sid), ARR] = LOCAL - kind
                    sto[u(sid), VIS] = x
                    sto[u(sid), ACK] = x
                    fifo[u(slot)] = acked(x, kind)
                else:
                    h = hops[u(s * R + d)]
                    pt = port_of[u(h)]
                    depart = max(t, egress_free[u(s), u(pt)]) + kc[u(row + KC_PORT + pt)]
                    egress_free[u(s), u(pt)] = depart
                    if nlinks[u(h)] == 0:
                        # on to the ingress port; not acknowledged before its ingress cost
                        # (at least a cycle) and the hop's second half
                        arrival = depart + half[u(h)]
                        fifo[u(slot)] = unknown_until(arrival + back[u(h)] + 1, kind)
                        val = sid << (SLOT_BITS + 2) | slot << 2 | kind
                        if pt == 0:
                            hsize[u(d), 0] = heap_push(heap, bstart[u(d)], 1, hsize[u(d), 0],
                                                       arrival << SRC_BITS | s, val)
                        else:
                            hsize[u(d), 1] = heap_push(heap, bstart[u(d + 1)] - 1, -1,
                                                       hsize[u(d), 1],
                                                       arrival << SRC_BITS | s, val)
                    else:
                        earliest = depart + links_left(h, 0, queues, kc, row) + half[u(h)]
                        sto[u(sid), ARR] = earliest << 2 | kind
                        sto[u(sid), ACK] = slot
                        fifo[u(slot)] = unknown_until(earliest + back[u(h)] + 1, kind)
                        lsize = heap_push(lheap, 0, 1, lsize,
                                          depart << LINK_SHIFT | s << 1 | pt,
                                          sid << LINK_SID | d << LINK_DST)
                if kind == K_COPY:
                    st[u(g), S_LAST] = sid
                    st[u(g), S_COPIES] += 1
                st[u(g), S_N] += 1
                st[u(g), S_OUT] += kc[u(row + KC_BLOCKS)]
                st[u(g), S_PC] = ip + 1
                stage = STAGE_WORK
            key = OVER
            if stage < STAGE_BOUNDARY and st[u(g), S_PC] < st[u(g), S_END]:
                # the AIV goes on to its next store: its work (a new destination's address
                # too), its fence, its credits, its issue; it parks where it waits for an
                # acknowledgement not yet known, until the earliest it can be known
                t = st[u(g), S_T]
                if stage == STAGE_WORK:
                    word = prog[u(st[u(g), S_PC])]
                    st[u(g), S_WORD] = word
                else:
                    word = st[u(g), S_WORD]
                row = (word & 3) * KC_WIDTH
                if stage == STAGE_WORK:
                    st[u(g), S_T0] = t
                    t += kc[u(row + KC_PRE)] + pre[u(st[u(g), S_PC])] + \
                        ((word >> SWITCH_BIT) & 1) * kc[u(row + KC_SWITCH)]
                    stage = STAGE_FENCE if kc[u(row + KC_FENCE)] else STAGE_CREDITS
                if stage == STAGE_FENCE:
                    # sw's flag: the store waits until every earlier store completed
                    latest, unknown = outstanding(g, st, fifo, cap)
                    if unknown >= 0:
                        key = max(t, unknown) << CORE_BITS | a
                    else:
                        if latest > t:
                            st[u(g), S_SW] += latest - t
                            t = latest
                        stage = STAGE_CREDITS
                if stage == STAGE_CREDITS:
                    # credits come back in issue order: the oldest stores until it fits
                    nb = kc[u(row + KC_BLOCKS)]
                    fbase = g * cap
                    while st[u(g), S_N] > 0 and st[u(g), S_OUT] + nb > cap:
                        hd = st[u(g), S_HEAD]
                        x = fifo[u(fbase + hd)]
                        if x < 0:
                            key = max(t, (-1 - x) >> KNOWN_SHIFT) << CORE_BITS | a
                            break
                        t = max(t, x >> KNOWN_SHIFT)
                        st[u(g), S_MAX_ACK] = max(st[u(g), S_MAX_ACK], x >> KNOWN_SHIFT)
                        st[u(g), S_OUT] -= kc[u((x & 3) * KC_WIDTH + KC_BLOCKS)]
                        st[u(g), S_N] -= 1
                        st[u(g), S_HEAD] = hd + 1 if hd + 1 < cap else 0
                    if key == OVER:
                        if word & 3 == K_COPY and st[u(g), S_FIRST] < 0:
                            st[u(g), S_FIRST] = t
                        t += kc[u(row + KC_ISSUE)]
                        if word & 1:                           # a flag or checksum
                            st[u(g), S_SIG] += t - st[u(g), S_T0]
                        stage = STAGE_REQUEST
                        key = t << CORE_BITS | a
                st[u(g), S_T] = t
                st[u(g), S_STAGE] = stage
            else:
                st[u(g), S_STAGE] = stage
                key = turn(g, s, a, st, pb, fifo, cap, nph, then, C, other, cores)
            if key >= 0:
                if a < C and st[u(g), S_PHASE] == 0:
                    h0 = ring_push(queue, base0, qmask, h0, s0, key)
                    s0 += 1
                else:
                    h1 = ring_push(queue, base1, qmask, h1, s1, key)
                    s1 += 1
                if key == top:
                    break                        # still waiting: the die stops here
            elif (then == THEN_SYNCALL or then == THEN_ISSUED) and \
                    st[u(g), S_PHASE] + 1 < nph:
                live[s] -= 1
                if live[s] == 0:
                    # the die's SyncAll, as soon as it can be known
                    h1 = ring_push(queue, base1, qmask, h1, s1,
                                   t_core[s, a] << CORE_BITS | A)
                    s1 += 1
        rings[s, 0], rings[s, 1], rings[s, 2], rings[s, 3] = h0, s0, h1, s1
        dnext[s] = NEVER
        if s0 > 0:
            dnext[s] = queue[base0 + h0] >> CORE_BITS
        if s1 > 0:
            dnext[s] = min(dnext[s], queue[base1 + h1] >> CORE_BITS)
    return lsize


@njit
def fabric(R, c, kc, hops, stores, prog, pre, pb, nph, then, C, other, cores, egress_free,
           ingress_free):
    """Every die's AIVs replay their programs (prog, each store's own work pre; AIV row s *
    cores + a's phase p runs pb[row, p, 0] .. pb[row, p, 1]) on one fabric, until every store is
    visible (layout.Stores' arr, vis, ack). nph phases, `then` between them (layout.THEN_*); the
    AIVs from C on send copies in the first phase, their time Token-Sending, the others' (and every
    AIV's in later phases) counting as `other`'s bucket; the first C AIVs queue apart (ubep's
    CalCumSum group). egress_free, ingress_free [ranks, ports]: when each port is next free, in and
    out. Each die's AIVs start at their clocks in `cores` (after Init). Returns (copies sent, the
    longest wait of a store in an ingress port's queue). Round after round: the frontier, the
    links and ingress ports up to it, then every die as far as it goes."""
    A = cores.t.shape[1]
    sto = stores.sto
    f = fabric_state(R, A, c, kc, hops, sto.shape[0])
    first_events(f, pb, cores.t)
    lsize = 0
    longest = 0
    while True:
        lo = frontier(f, egress_free)
        lsize = drain_links(f, lo, lsize, hops, kc, stores)
        longest = drain_ingress(f, longest, hops, kc, stores, ingress_free)
        if lo == NEVER:
            break
        lsize = run_dies(f, lsize, c, kc, hops, stores, prog, pre, pb, nph, then, C, other, cores,
                         egress_free)
    st = f.st
    sent = 0
    for s in range(R):
        for a in range(A):
            g = s * A + a
            sent += st[g, S_COPIES]
            last = st[g, S_LAST]
            cores.last_copy_ack[s, a] = sto[last, ACK] if last >= 0 else 0
    return sent, longest
