"""The dispatch kernel: one configuration, every AIV of every die, in integer cycles.

`_simulate_dispatch` runs one configuration; `_simulate_batch` runs many in parallel (one run of
configurations that share a schedule per prange iteration, rows written only by their own
iteration). The model is the one of ubepsim/reference.py, which this file must match exactly; it
is organised for speed instead of clarity:

1. `_schedule`, what the sync variants of a configuration share: routing (counter-based draws)
   and each die's copies dealt to its AIVs;
2. `_dispatch`, per die: each AIV's program of stores, and an event loop over its AIVs replaying
   them (`_egress_phase`) that arbitrates the egress port in time order;
3. per destination: the ingress port, serving arrivals in (arrival, source, store order);
4. per die: receivers (polls in closed form, counts, CalCumSum, reordering) and the phases.
"""

import numpy as np
import numba

from .jit import njit
from . import rng

# Protocol, sync, schedule and routing codes (ubepsim.params enums).
BSP, UBEP = 0, 1
SW, TFF, DC, SP = 0, 1, 2, 3
EXPERT_BLOCK, BALANCED, HOMOGENIZED = 0, 1, 2
UNIFORM, ZIPF, HOT, TRACE = 0, 1, 2, 3

# Store kinds and per-AIV time buckets.
K_COPY, K_FLAG, K_COUNT, K_CHECKSUM = 0, 1, 2, 3
B_INIT, B_SEND, B_SYNC, B_CUMSUM, B_REORDER = 0, 1, 2, 3, 4
N_MARKS = 10
MAX_REJECTS = 8

# Columns of the parameter matrix (ubepsim.model builds it).
P_RANKS, P_BATCH, P_TOPK, P_EXPERTS, P_AIVS, P_CUMSUM, P_PROTOCOL, P_SYNC, P_SCHEDULE, \
    P_ROUTING, P_SEED, P_WKEY, P_CDF_START, P_CDF_LEN, P_TRACE = range(15)
N_PARAMS = 15

# Columns of the cost matrix (must follow ubepsim.costs.COSTS).
(C_TOKEN_BYTES, C_COPY_BLOCKS, C_COUNT_BLOCKS, C_COPY_ISSUE, C_COPY_EGRESS, C_COPY_INGRESS,
 C_COUNT_ISSUE, C_COUNT_EGRESS, C_COUNT_INGRESS, C_SIGNAL_ISSUE, C_SIGNAL_EGRESS,
 C_SIGNAL_INGRESS, C_LOCAL_COPY, C_COPY_VERIFY, C_COUNT_VERIFY, C_COPY_RESET, C_COUNT_RESET,
 C_VCOUNT, C_PREFIX, C_INIT, C_SYNCALL, C_IN_FLIGHT, C_TIMEOUT, C_POLL, C_NPU_DIES, C_TIER1,
 C_TIER2, C_LAT0) = range(28)
N_HOPS = 5

# Columns of the output row.
(O_LATENCY, O_LATENCY_MEAN, O_COPIES_TOTAL, O_COPIES_HOP0) = (0, 1, 2, 3)
O_SEND_MAX = O_COPIES_HOP0 + N_HOPS
(O_SEND_MEAN, O_SEND_SPREAD, O_WAIT, O_PH_INIT, O_PH_SEND, O_PH_SYNC, O_PH_CUMSUM, O_PH_REORDER,
 O_QSTEPS, O_COLLISIONS, O_SENT, O_DELIVERED, O_VIOLATIONS, O_BOUND) = range(O_SEND_MAX + 1,
                                                                              O_SEND_MAX + 15)
N_OUT = O_BOUND + 1


@njit
def _route_die(out, key, batch, topk, experts, cdf, chosen):
    """Fill out[batch * topk] with each token's distinct experts (see reference.route_die)."""
    counter = 0
    weighted = cdf.shape[0] > 0
    for t in range(batch):
        for k in range(topk):
            expert = -1
            for _ in range(MAX_REJECTS):
                u = rng.unit(key, counter)
                counter += 1
                if not weighted:
                    e = int(u * experts)
                else:
                    x = u * cdf[experts - 1]
                    lo, hi = 0, experts - 1   # first e with x < cdf[e], at most experts - 1
                    while lo < hi:
                        mid = (lo + hi) // 2
                        if x < cdf[mid]:
                            hi = mid
                        else:
                            lo = mid + 1
                    e = lo
                dup = False
                for k2 in range(k):
                    if chosen[k2] == e:
                        dup = True
                        break
                if not dup:
                    expert = e
                    break
            if expert < 0:
                u = rng.unit(key, counter)
                counter += 1
                mass = 0.0
                last = -1
                for e in range(experts):
                    if _free(e, chosen, k, cdf, weighted):
                        mass += _weight(e, cdf, weighted)
                        last = e
                x = u * mass
                acc = 0.0
                expert = last
                for e in range(experts):
                    if _free(e, chosen, k, cdf, weighted):
                        acc += _weight(e, cdf, weighted)
                        if x < acc:
                            expert = e
                            break
            chosen[k] = expert
            out[t * topk + k] = expert


@njit(inline="always")
def _weight(e, cdf, weighted):
    if not weighted:
        return 1.0
    return cdf[0] if e == 0 else cdf[e] - cdf[e - 1]


@njit(inline="always")
def _free(e, chosen, k, cdf, weighted):
    for k2 in range(k):
        if chosen[k2] == e:
            return False
    return (not weighted) or _weight(e, cdf, weighted) > 0.0


@njit(inline="always")
def _qsearch(cum, target, n_experts):
    """Algorithm 1 on per-expert cumulative counts: cum[p] = VectorCount(ids < p).

    Returns (expert, steps). A pivot past the window's right end counts as the end.
    """
    lo, hi, steps = 0, n_experts, 0
    while hi - lo > 1:
        gap = (hi - lo + 3) // 4
        p1 = min(lo + gap, hi)
        p2 = min(lo + 2 * gap, hi)
        p3 = min(lo + 3 * gap, hi)
        steps += 1
        if target < cum[p1]:
            hi = p1
        elif target < cum[p2]:
            lo, hi = p1, p2
        elif target < cum[p3]:
            lo, hi = p2, p3
        else:
            lo = p3
    return lo, steps


@njit
def _qsteps_table(n_experts):
    """Steps of the quaternary search by the expert it ends on. Each comparison, target <
    cum[p], holds exactly when pivot p lies past that expert (cum is nondecreasing), so the
    search's path, and its step count, depend on that expert alone: one table per
    configuration replaces a search per AIV and die. It is built by the same search, on counts
    for which the target is its own expert (cum[p] = p)."""
    cum = np.arange(n_experts + 1)
    table = np.empty(n_experts, np.int64)
    for e in range(n_experts):
        table[e] = _qsearch(cum, e, n_experts)[1]
    return table


@njit(inline="always")
def _poll(t, visible, period, inv_period):
    """Back-to-back polls from t: the time the first poll issued at or after `visible`
    returns. inv_period = 1 / period replaces a division per poll; the quotient is corrected
    to the exact ceiling."""
    if visible <= t:
        return t + period
    gap = visible - t
    n = np.int64(gap * inv_period)
    if n * period < gap:
        n += 1
    elif (n - 1) * period >= gap:
        n -= 1
    return t + (n + 1) * period


# Egress requests are ordered by (time, AIV): both packed in one key, the AIV in the low bits.
AIV_BITS = 13   # aivs <= 4096
MAX_TIME = 1 << (63 - AIV_BITS)   # times stay below it: ubepsim.model.check_time_bound
SID_SHIFT = 16  # a program word's store id lies above its destination (ranks <= 16384) and kind
DEST_MASK = (1 << (SID_SHIFT - 2)) - 1
RADIX_BITS = 13   # widest digit of the ingress radix sort
KEY_BITS = 62     # bits an ingress sort key may use: arrival << slot_bits | slot, non-negative
NEVER = 9223372036854775807   # a time after every time
# st_arr of a store to its own die: LOCAL - kind (below every arrival << 2 | kind); of a copy
# a receiver has taken: TAKEN, which is no copy's value, so that a second take is no delivery
LOCAL = -1
TAKEN = LOCAL - 4


@njit
def _release(die, barrier, t_aiv, bucket, wait, marks, nmarks):
    """SyncAll: every AIV of `die` waits until `barrier` (once per die and barrier, so a call
    with array arguments costs nothing that matters)."""
    for a in range(t_aiv.shape[1]):
        w = barrier - t_aiv[die, a]
        bucket[die, a, B_SYNC] += w
        wait[die, a] += w
        t_aiv[die, a] = barrier
        marks[die, a, nmarks[die, a]] = barrier
        nmarks[die, a] += 1


# Per-AIV state of the egress event loop: one row per AIV of the die being simulated.
(S_T, S_SIG, S_SW, S_HEAD, S_N, S_OUT, S_MAX_ACK, S_PC, S_END, S_FIRST, S_LAST_ACK,
 S_COPIES) = range(12)
S_WIDTH = 16   # a row per AIV, two whole cache lines
# Per-kind costs of a store: a row of the kind table per kind. The table is flat, so that the
# event loop indexes it with a constant stride rather than a multiply by a runtime shape.
KC_PRE, KC_ISSUE, KC_BLOCKS, KC_EGRESS = range(4)
KC_WIDTH = 4


@njit(inline="always")
def _set_kind(kc, kind, pre, issue, blocks, egress):
    """A kind's row: pre-work cycles, issue cycles, blocks, egress port cycles."""
    row = kind * KC_WIDTH
    kc[row + KC_PRE] = pre
    kc[row + KC_ISSUE] = issue
    kc[row + KC_BLOCKS] = blocks
    kc[row + KC_EGRESS] = egress


@njit(inline="always")
def u(i):
    """An index as unsigned: Numba then skips the wraparound of negative indices, a few
    instructions on every dependent load of the event loops (indices there are never negative)."""
    return np.uint64(i)


@njit(inline="always")
def _new_store(prog, n, bfill, d, kind):
    """Store n of a program: a store of `kind` to destination d, whose id is the next slot of
    d's bucket (returned). One word per store, so the event loop loads one: the id above
    SID_SHIFT, then the destination, then the kind in the low two bits."""
    sid = bfill[u(d)]
    bfill[u(d)] = sid + 1
    prog[u(n)] = sid << SID_SHIFT | d << 2 | kind
    return sid


@njit(inline="always")
def _ring_push(ring, head, size, key):
    """Insert key into a sorted ring (head, size) from its nearer end; returns the new head."""
    qmask = ring.shape[0] - 1
    if size == 0 or key > ring[u((head + size - 1) & qmask)]:
        ring[u((head + size) & qmask)] = key
    elif key > ring[u((head + (size >> 1)) & qmask)]:
        x = size
        while ring[u((head + x - 1) & qmask)] > key:
            ring[u((head + x) & qmask)] = ring[u((head + x - 1) & qmask)]
            x -= 1
        ring[u((head + x) & qmask)] = key
    else:
        head = (head - 1) & qmask
        x = 0
        while x < size and ring[u((head + x + 1) & qmask)] < key:
            ring[u((head + x) & qmask)] = ring[u((head + x + 1) & qmask)]
            x += 1
        ring[u((head + x) & qmask)] = key
    return head


@njit
def _egress_phase(s, egress, st, prog, fifo, kc, cap, st_arr, st_vis, lat_row,
                  lat_local, queue, split):
    """One phase of die s: its AIVs replay their programs (prog[pc]: see _new_store), the
    egress port serving their requests in (time, AIV) order. AIVs below `split` are ubep's
    CalCumSum group in the sending phase (else split is 0).
    Returns the port's free time.

    A function of its own, called once per die and phase, so that its loop is compiled apart
    from the whole kernel. One loop body serves both the AIVs' first requests and the stores
    taken from the queue, so the request code is written once. Every AIV has at most one request
    waiting; the queue is two rings kept sorted, the CalCumSum group's requests in one and the
    other AIVs' in the other, the port taking the earlier of their heads. A new request is
    inserted from its ring's nearer end: O(1) for almost every request, since a copy waiting for
    credits or a flag waiting for its copy goes last among the token AIVs, and a counting AIV,
    issuing count messages back-to-back at the pace of the others, mostly goes last in its. In
    one ring, each count message would go ahead of most of the copies, shifting them: the split
    measured about 5% faster at 256 ranks in paired runs, 0-6% on samples of every size. A
    tournament tree over the AIVs costs a replay of log2(aivs) levels on every store, and a min
    over every AIV's pending request 34% more: both were slower.
    """
    A = st.shape[0]
    amask = (1 << AIV_BITS) - 1
    ring0 = queue[0]
    ring1 = queue[1]
    qmask = ring0.shape[0] - 1
    h0 = s0 = h1 = s1 = 0
    first = 0
    while True:
        if first < A:
            a = first
            first += 1
            ip = st[u(a), S_PC]
            if ip >= st[u(a), S_END]:
                continue
        else:
            if s0 > 0 and (s1 == 0 or ring0[u(h0)] < ring1[u(h1)]):
                top = ring0[u(h0)]
                h0 = (h0 + 1) & qmask
                s0 -= 1
            elif s1 > 0:
                top = ring1[u(h1)]
                h1 = (h1 + 1) & qmask
                s1 -= 1
            else:
                break
            t = top >> AIV_BITS
            a = top & amask
            # serve AIV a's store
            ip = st[u(a), S_PC]
            word = prog[u(ip)]
            d = (word >> 2) & DEST_MASK
            kind = word & 3
            sid = word >> SID_SHIFT
            if d == s:
                ack = t + lat_local
                st_arr[u(sid)] = LOCAL - kind
                st_vis[u(sid)] = ack
            else:
                depart = max(t, egress) + kc[u(kind * KC_WIDTH + KC_EGRESS)]
                egress = depart
                hop = lat_row[u(d)]              # the first half of it: egress to ingress
                st_arr[u(sid)] = ((depart + (hop >> 1)) << 2) | kind
                ack = depart + hop
            if kind == K_COPY:
                st[u(a), S_LAST_ACK] = ack
                st[u(a), S_COPIES] += 1
            slot = st[u(a), S_HEAD] + st[u(a), S_N]
            if slot >= cap:
                slot -= cap
            nb = kc[u(kind * KC_WIDTH + KC_BLOCKS)]
            f = 2 * (a * cap + slot)
            fifo[u(f)] = ack
            fifo[u(f + 1)] = nb
            st[u(a), S_N] += 1
            st[u(a), S_OUT] += nb
            st[u(a), S_MAX_ACK] = max(st[u(a), S_MAX_ACK], ack)
            ip += 1
            st[u(a), S_PC] = ip
            if ip >= st[u(a), S_END]:
                continue                       # AIV a is done
        # AIV a's next store: pre-work, fence, in-flight credits, issue
        kind = prog[u(ip)] & 3
        nb = kc[u(kind * KC_WIDTH + KC_BLOCKS)]
        t0 = st[u(a), S_T]
        t = t0 + kc[u(kind * KC_WIDTH + KC_PRE)]
        if kind == K_FLAG:
            # stop-and-wait: the flag waits until every earlier store completed
            w = st[u(a), S_MAX_ACK] - t
            if w > 0:
                t += w
                st[u(a), S_SW] += w
        # credits come back in issue order: wait for the oldest stores until it fits
        while st[u(a), S_N] > 0 and st[u(a), S_OUT] + nb > cap:
            hd = st[u(a), S_HEAD]
            f = 2 * (a * cap + hd)
            t = max(t, fifo[u(f)])
            st[u(a), S_OUT] -= fifo[u(f + 1)]
            st[u(a), S_N] -= 1
            st[u(a), S_HEAD] = hd + 1 if hd + 1 < cap else 0
        if kind == K_COPY and st[u(a), S_FIRST] < 0:
            st[u(a), S_FIRST] = t
        t += kc[u(kind * KC_WIDTH + KC_ISSUE)]
        st[u(a), S_T] = t
        if kind & 1:                           # a flag or checksum
            st[u(a), S_SIG] += t - t0
        key = (t << AIV_BITS) | a
        if a < split:
            h0 = _ring_push(ring0, h0, s0, key)
            s0 += 1
        else:
            h1 = _ring_push(ring1, h1, s1, key)
            s1 += 1
    return egress


@njit(inline="always")
def _sort_arrivals(keys, other, n, shift, bot, top, count):
    """keys[:n] (each an arrival in the bits from `shift` up, all in [bot, top]) in order of
    arrival, stable: an LSD radix sort over the arrival bits. Returns the array, keys or
    other, that holds the result; count is scratch of (1 << RADIX_BITS) + 1."""
    # the arrivals share every bit above the highest one where bot and top differ
    sort_bits = _bits((top ^ bot) + 1)
    # digits of at most RADIX_BITS and no wider than the bucket needs, as few passes as that
    # allows, the bits shared evenly
    width = min(RADIX_BITS, max(4, _bits(n)))
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
def _arrival_order(keys, other, n, slot_bits, bot, top, count, st_arr, lo, key_bits):
    """A bucket's stores in the ingress port's order: keys[:n] (arrival << slot_bits | slot,
    the bucket's remote stores in slot order, arrivals in [bot, top]) sorted stably by arrival.
    Returns the array, keys or other, whose first n entries hold them (the slot in the low
    slot_bits bits). Arrivals too late to pack beside a slot in key_bits bits (only under
    absurdly slow profiles) are sorted by a stable comparison sort instead: the same order."""
    if _bits(top + 1) + slot_bits <= key_bits:
        return _sort_arrivals(keys, other, n, slot_bits, bot, top, count)
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


def working_bytes(ranks, batch, topk, experts, aivs, ubep, sync):
    """The bytes `_simulate_dispatch` (_schedule and _dispatch) allocates for a configuration,
    as numbers or numpy columns: its arrays whose sizes grow with the configuration (keep in
    step with the allocations there), the ingress sort's at their largest (every copy a die can
    receive sent to one die). Left out: what stays under a megabyte at every size (per-AIV
    event state, kind tables, radix counts), and the comparison sort's buffers that only
    absurdly slow profiles need. Measured against the resident set: bench/bench_memory.py."""
    R, B, K, E, A = (np.asarray(x, dtype=np.int64) for x in (ranks, batch, topk, experts, aivs))
    M = B * K
    signalled = (np.asarray(sync) == SW) | (np.asarray(sync) == DC)
    per_copy = np.where(np.asarray(ubep) & signalled, 2, 1)
    per_count = np.where(signalled, 2, 1)
    stores = R * M * per_copy + R * R * per_count                  # max_stores
    bucket = R * B * np.minimum(K, E // R) * per_copy + R * per_count   # one die's stores
    return (16 * stores                 # st_arr, st_vis
            + 20 * R * M                # experts_of, copy_ref, the AIV lists (int32)
            + 5 * R * R                 # count_signal (int32), hop classes (int8)
            + 8 * R * A * (N_MARKS + 13)   # per-AIV state across passes, marks, Init
            + 8 * (10 * M + 16 * R + 5 * E)   # per-die scratch, programs, expert tables
            + 16 * bucket)              # the ingress sort's keys and buffer


@njit
def _schedule(p, c, cdf, trace):
    """What a configuration's sync variants share: routing, and each die's copies dealt to its
    token AIVs in order. Nothing here reads `sync`, and of the costs only the hop classes' die
    counts, so a batch computes it once for consecutive rows that differ in nothing else
    (_same_schedule). Returns, with R ranks, M copies per die and NS token AIVs:
    ecnt[e]: where expert e's received copies start in receive order (expert, source, copy);
    hops[s * R + d]: the hop class from die s to die d;
    xdest, xslot[s * M + x]: die s's AIV lists, position by position: the copy's destination and
    its slot in the receive order; aoff[s * (NS + 1) + j]: where token AIV j's list starts;
    loads, searches[s * NS + j]: its Init's token loads and VectorCount steps;
    copies_hop[h]: copies of hop class h; the most remote copies into one die and out of one
    die; the longest quaternary search."""
    R, B, K, E, A = p[P_RANKS], p[P_BATCH], p[P_TOPK], p[P_EXPERTS], p[P_AIVS]
    ubep = p[P_PROTOCOL] == UBEP
    sched = p[P_SCHEDULE]
    NS = A - (p[P_CUMSUM] if ubep else 0)
    M = B * K
    EL = E // R

    # ---- routing of every die ---------------------------------------------------------------
    experts_of = np.empty(R * M, np.int32)
    if p[P_ROUTING] == TRACE:
        experts_of[:] = trace
    else:
        chosen = np.empty(K, np.int64)
        for s in range(R):
            key = rng.stream(p[P_SEED], p[P_WKEY], s, rng.DOMAIN_ROUTING)
            _route_die(experts_of[s * M:(s + 1) * M], key, B, K, E, cdf, chosen)
    # tables, so that the per-copy passes divide nothing: each expert's die, each copy's token
    die_of = np.empty(E, np.int64)
    for e in range(E):
        die_of[e] = e // EL
    token_of = np.empty(M, np.int64)
    for i in range(M):
        token_of[i] = i // K

    # received copies of every die in output order (expert, source, copy index): ecnt[e] is
    # where expert e's start; each copy's slot there is handed out as its source is scheduled
    ecnt = np.zeros(E + 1, np.int64)
    for g in range(R * M):
        ecnt[experts_of[g] + 1] += 1
    for e in range(E):
        ecnt[e + 1] += ecnt[e]
    rcur = ecnt[:E].copy()

    hops = np.empty(R * R, np.int8)
    xdest = np.empty(R * M, np.int32)
    xslot = np.empty(R * M, np.int32)
    aoff_all = np.empty(R * (NS + 1), np.int64)
    loads = np.empty(R * NS, np.int64)
    searches = np.empty(R * NS, np.int64)
    copies_hop = np.zeros(N_HOPS, np.int64)
    into = np.zeros(R, np.int64)       # remote copies into each die
    max_out = 0
    qsteps_max = 0

    # Per-die scratch.
    place = np.empty(M, np.int64)
    key_at = np.empty(M, np.int64)     # per position in key order: the copy's key
    xtoken = np.empty(M, np.int64)     # per position of the AIV lists: the copy's token
    qsteps_of = _qsteps_table(E) if sched != EXPERT_BLOCK else np.zeros(0, np.int64)
    cnt = np.zeros(E + 1, np.int64)
    fill = np.zeros(E + 1, np.int64)
    dkey = np.empty(R, np.int64)       # per die: its experts' key minus the expert id
    key_c = np.empty(M, np.int64)      # per copy: its expert's key
    hcounts = np.zeros(N_HOPS + 1, np.int64)
    hsize = np.zeros(N_HOPS, np.int64)
    hpos = np.zeros(N_HOPS, np.int64)

    # each die's NPU and switch domains, so that a hop class is a few comparisons
    npu_of = np.empty(R, np.int64)
    dom1 = np.empty(R, np.int64)
    dom2 = np.empty(R, np.int64)
    for d in range(R):
        npu_of[d] = d // c[C_NPU_DIES]
        dom1[d] = d // c[C_TIER1] if c[C_TIER1] else 0
        dom2[d] = d // c[C_TIER2] if c[C_TIER2] else 0
    for s in range(R):
        base = s * M
        hop_row = hops[s * R:(s + 1) * R]
        aoff = aoff_all[s * (NS + 1):(s + 1) * (NS + 1)]
        for d in range(R):
            if d == s:
                hop_row[d] = 0
            elif npu_of[d] == npu_of[s]:
                hop_row[d] = 1
            elif dom1[d] == dom1[s]:
                hop_row[d] = 2
            elif dom2[d] == dom2[s]:
                hop_row[d] = 3
            else:
                hop_row[d] = 4

        # ---- schedule: copies ordered by (key of their expert, copy index), then AIV lists ----
        # experts walked from the next die's on, wrapping round: dies do not all start on the
        # same destination. homogenized puts the farthest hop class first and walks each class
        # the same way, its dies in index order from the (s + 1)-th on: walking the whole die
        # order instead, every die of a switch domain would meet the next domain's dies in the
        # same order at the same time, an incast on each in turn. A die's experts are walked
        # together, so an expert's key is its die's first key plus its place in the die:
        # dkey[d] + e, set per die in O(ranks) instead of per expert
        if sched == HOMOGENIZED:
            hcounts[:] = 0                     # dies per class, farthest first, then starts
            for d in range(R):
                hcounts[N_HOPS - hop_row[d]] += 1
            for h in range(N_HOPS):
                hsize[h] = hcounts[h + 1]
                hcounts[h + 1] += hcounts[h]
                # the slot of the class's first die: the walk starts at its (s + 1)-th
                hpos[h] = -(s + 1) % hsize[h] if hsize[h] else 0
            for d in range(R):
                # slots count up, wrapping round: no division per die (a modulo per die was 2%
                # of the whole sample, paired)
                h = N_HOPS - 1 - hop_row[d]
                slot = hpos[h]
                hpos[h] = slot + 1 if slot + 1 < hsize[h] else 0
                dkey[d] = (hcounts[h] + slot - d) * EL
        else:
            for dd in range(R):
                d = s + 1 + dd
                if d >= R:
                    d -= R
                dkey[d] = (dd - d) * EL
        cnt[:] = 0
        for i in range(M):
            e = experts_of[u(base + i)]
            r = dkey[u(die_of[u(e)])] + e
            key_c[u(i)] = r
            cnt[u(r + 1)] += 1
        # cnt[r] = copies with key < r (VectorCount(ids < r)). The running sum is kept in a
        # register: through memory, each step would wait for the previous one's store, and
        # this pass runs over every expert on every die (ranks x experts per configuration)
        fill[0] = 0
        acc = 0
        for e in range(1, E + 1):
            acc += cnt[e]
            cnt[e] = acc
            fill[e] = acc
        # AIV lists: AIV j's copies at aoff[j] .. aoff[j + 1], in key order, except that
        # homogenized deals the key order round-robin: key position q goes to place place[q]
        homog = sched == HOMOGENIZED
        if sched == EXPERT_BLOCK:
            # AIV j owns the keys r with r * NS // E == j: its list starts at the first such r
            aoff[0] = 0
            for j in range(1, NS + 1):
                aoff[j] = cnt[(j * E + NS - 1) // NS]
        elif sched == BALANCED:
            for j in range(NS + 1):
                aoff[j] = j * M // NS
        else:
            x = 0
            for j in range(NS):
                aoff[j] = x
                q = j
                while q < M:
                    place[q] = x
                    x += 1
                    q += NS
            aoff[NS] = x
        # each copy straight to its place: destination, slot in the receive order, token
        for i in range(M):
            r = key_c[u(i)]
            q = fill[u(r)]
            fill[u(r)] = q + 1
            key_at[u(q)] = r
            x = u(place[u(q)] if homog else q)
            e = experts_of[u(base + i)]
            xdest[u(base) + x] = die_of[u(e)]
            xslot[u(base) + x] = rcur[u(e)]
            rcur[u(e)] += 1
            xtoken[x] = token_of[u(i)]
        # each AIV's Init: a token load per run of its copies of one token, and (balanced,
        # homogenized) the search for its first copy's position in key order, which ends on
        # that copy's key
        for j in range(NS):
            lo, hi = aoff[j], aoff[j + 1]
            n = 0
            for x in range(lo, hi):
                if x == lo or xtoken[u(x)] != xtoken[u(x - 1)]:
                    n += 1
            loads[s * NS + j] = n
            steps = 0
            if sched != EXPERT_BLOCK and hi > lo:
                steps = qsteps_of[u(key_at[u(lo if sched == BALANCED else j)])]
                qsteps_max = max(qsteps_max, steps)
                steps += 1                     # the VectorCount before the first step
            searches[s * NS + j] = steps

        # per destination: the copies sent there (a die's experts have consecutive keys), for
        # the hop counts and the latency bound
        n_local = 0
        for d in range(R):
            h = hop_row[d]
            r = dkey[d] + d * EL
            n_to = cnt[r + EL] - cnt[r]
            copies_hop[h] += n_to
            if h:
                into[d] += n_to
            else:
                n_local = n_to
        max_out = max(max_out, M - n_local)
    return (ecnt, hops, xdest, xslot, aoff_all, loads, searches, copies_hop, into.max(),
            max_out, qsteps_max)


@njit
def _dispatch(p, c, chance, schedule, out, marks_out):
    """One configuration on its schedule (_schedule). p: parameter row, c: cost row, chance:
    sentinel collision chances (copy, count message). Writes out[N_OUT]; if marks_out has
    shape [ranks, aivs, N_MARKS], every AIV's phase boundaries too."""
    (ecnt, hops, xdest, xslot, aoff_all, loads, searches, copies_hop, max_in, max_out,
     qsteps_max) = schedule
    R, B, K, E, A = p[P_RANKS], p[P_BATCH], p[P_TOPK], p[P_EXPERTS], p[P_AIVS]
    ubep = p[P_PROTOCOL] == UBEP
    sync = p[P_SYNC]
    C = p[P_CUMSUM] if ubep else 0
    NS = A - C
    M = B * K
    EL = E // R
    cap = c[C_IN_FLIGHT]
    lat = c[C_LAT0:C_LAT0 + N_HOPS]
    lat_local = lat[0]
    period = c[C_POLL]
    inv_period = 1.0 / period
    q_copy, q_count = chance[0], chance[1]

    # ---- per-AIV state that lives across passes ----------------------------------------------
    t_aiv = np.zeros((R, A), np.int64)
    bucket = np.zeros((R, A, 5), np.int64)
    wait = np.zeros((R, A), np.int64)
    first_copy = np.full((R, A), -1, np.int64)
    last_copy_ack = np.full((R, A), -1, np.int64)
    marks = np.empty((R, A, N_MARKS), np.int64)     # every AIV's phase boundaries
    nmarks = np.empty((R, A), np.int64)

    per_copy = 2 if (ubep and (sync == SW or sync == DC)) else 1
    per_count = 2 if (sync == SW or sync == DC) else 1
    max_stores = R * M * per_copy + R * R * per_count

    # Stores are kept destination-major: each destination's stores in one bucket, source by
    # source, sized before the dies issue them (its copies, each with at most one flag or
    # checksum, and the count messages with theirs). The ingress port then sorts a small bucket
    # and receivers read their own bucket only. A store id is its slot, handed out as the
    # programs are built, so that the receivers' references are known before the event loop.
    bfill = np.empty(R, np.int64)
    bstart = np.empty(R + 1, np.int64)
    x = 0
    for d in range(R):
        bstart[d] = x
        bfill[d] = x
        x += (ecnt[(d + 1) * EL] - ecnt[d * EL]) * per_copy + R * per_count
    bstart[R] = x
    # arrival at the ingress port << 2 | store kind; LOCAL - kind: a local store
    st_arr = np.empty(max_stores, np.int64)
    st_vis = np.empty(max_stores, np.int64)
    # per copy, in receive order: the store carrying it, and the store a receiver polls
    copy_ref = np.empty((R * M, 2), np.int32)
    count_signal = np.empty(R * R, np.int32)   # [d * R + s]: store polled for s's counts to d
    sent = 0                           # copy stores the egress loops served

    # Per-die scratch.
    cur_sig = np.empty(R, np.int64)    # dc: per destination, the checksum an AIV sends there
    seen_dest = np.full(R, -1, np.int64)
    # Each AIV's program for a phase: the stores it issues, in order, a word each (_new_store).
    n_prog = 2 * M + 2 * R
    prog = np.empty(n_prog, np.int64)
    st = np.zeros((A, S_WIDTH), np.int64)      # per-AIV state of the event loop (S_*)
    fifo = np.zeros(2 * A * cap, np.int64)     # outstanding stores per AIV, in issue order:
                                               # (ack, blocks) pairs, a ring of cap per AIV
    lat_row = np.empty(R, np.int64)            # per destination of the die: hop latency
    kc = np.zeros(4 * KC_WIDTH, np.int64)
    _set_kind(kc, K_COPY, c[C_COPY_VERIFY] if (ubep and sync == DC) else 0,   # dc: markers
              c[C_COPY_ISSUE], c[C_COPY_BLOCKS], c[C_COPY_EGRESS])
    _set_kind(kc, K_COUNT, EL * c[C_VCOUNT],   # VectorCount per expert of the destination
              c[C_COUNT_ISSUE], c[C_COUNT_BLOCKS], c[C_COUNT_EGRESS])
    for kind in (K_FLAG, K_CHECKSUM):
        _set_kind(kc, kind, 0, c[C_SIGNAL_ISSUE], 1, c[C_SIGNAL_EGRESS])
    signal_kind = K_FLAG if sync == SW else K_CHECKSUM
    signalled = sync == SW or sync == DC       # count messages carry a flag or checksum
    qsize = 1
    while qsize < A:
        qsize *= 2
    queue = np.empty((2, qsize), np.int64)   # the egress requests: two rings kept sorted
    count_bucket = B_CUMSUM if ubep else B_SYNC

    for s in range(R):
        for d in range(R):
            lat_row[d] = lat[hops[s * R + d]]
        aoff = aoff_all[s * (NS + 1):(s + 1) * (NS + 1)]
        xd = xdest[s * M:(s + 1) * M]
        xs = xslot[s * M:(s + 1) * M]

        # ---- Init -----------------------------------------------------------------------------
        for j in range(NS):
            a = C + j
            cyc = c[C_INIT] + searches[s * NS + j] * c[C_VCOUNT] + \
                loads[s * NS + j] * c[C_LOCAL_COPY]
            t_aiv[s, a] = cyc
            bucket[s, a, B_INIT] = cyc
            marks[s, a, 0] = 0
            marks[s, a, 1] = cyc
            nmarks[s, a] = 2
        for j in range(C):
            t_aiv[s, j] = c[C_INIT]
            bucket[s, j, B_INIT] = c[C_INIT]
            marks[s, j, 0] = 0
            marks[s, j, 1] = c[C_INIT]
            nmarks[s, j] = 2

        egress = 0
        for phase in range(1 if ubep else 2):
            if phase == 1:
                # BSP: SyncAll after Token-Sending, then SendFlag & Count on every AIV
                done = 0
                for a in range(A):
                    marks[s, a, nmarks[s, a]] = t_aiv[s, a]
                    nmarks[s, a] += 1
                    done = max(done, max(t_aiv[s, a], st[a, S_MAX_ACK]))
                _release(s, done + c[C_SYNCALL], t_aiv, bucket, wait, marks, nmarks)
            # ---- programs: built in plain passes, so that the event loop only replays them ----
            # Token AIV j sends its copies, each followed by its flag (sw) or, after its last
            # copy to a destination, the checksum (dc). A counting AIV (ubep's CalCumSum group;
            # every AIV in bsp's second phase) sends a count message to each destination of its
            # share, each followed by a flag (sw) or checksum (dc). Each store gets its id here,
            # and the receivers their references: per copy the store carrying it and the one
            # they poll, per (destination, source) the store that signals the counts.
            n = 0
            for a in range(A):
                start = n
                if phase == 0 and a >= C and ubep and sync == DC:
                    # built backwards, so that each copy meets the checksum that follows its
                    # AIV's last copy to the same destination before the copy itself: filled
                    # from the end of a region of two slots per copy, the program starts where
                    # the filling stopped
                    lo, hi = aoff[a - C], aoff[a - C + 1]
                    n += 2 * (hi - lo)
                    start = n
                    for x in range(hi - 1, lo - 1, -1):
                        d = np.int64(xd[u(x)])
                        if seen_dest[u(d)] != s * A + a:
                            seen_dest[u(d)] = s * A + a
                            start -= 1
                            cur_sig[u(d)] = _new_store(prog, start, bfill, d, K_CHECKSUM)
                        start -= 1
                        sid = _new_store(prog, start, bfill, d, K_COPY)
                        g = u(xs[u(x)])
                        copy_ref[g, 0] = sid
                        copy_ref[g, 1] = cur_sig[u(d)]
                elif phase == 0 and a >= C:
                    for x in range(aoff[a - C], aoff[a - C + 1]):
                        d = np.int64(xd[u(x)])
                        sid = _new_store(prog, n, bfill, d, K_COPY)
                        n += 1
                        g = u(xs[u(x)])
                        copy_ref[g, 0] = sid
                        if ubep and sync == SW:
                            sid = _new_store(prog, n, bfill, d, K_FLAG)
                            n += 1
                        copy_ref[g, 1] = sid
                elif phase == 1 or a < C:
                    nc = C if ubep else A
                    for d in range(a * R // nc, (a + 1) * R // nc):
                        sid = _new_store(prog, n, bfill, d, K_COUNT)
                        n += 1
                        if signalled:
                            sid = _new_store(prog, n, bfill, d, signal_kind)
                            n += 1
                        count_signal[u(d * R + s)] = sid
                st[a, S_T] = t_aiv[s, a]
                st[a, S_SIG] = st[a, S_SW] = 0
                st[a, S_HEAD] = st[a, S_N] = st[a, S_OUT] = 0
                st[a, S_PC] = start
                st[a, S_END] = n
                if phase == 0:
                    st[a, S_MAX_ACK] = 0
                    st[a, S_FIRST] = -1
                    st[a, S_COPIES] = 0
            egress = _egress_phase(s, egress, st, prog, fifo, kc, cap, st_arr, st_vis,
                                   lat_row, lat_local, queue,
                                   C if phase == 0 else 0)
            # ---- the phase's time per AIV -------------------------------------------------------
            # An AIV's time in the phase is its signals' (flags and checksums with their waits)
            # plus its main work's: sending copies, or counting (ubep's CalCumSum, bsp's sync)
            for a in range(A):
                main = B_SEND if (phase == 0 and a >= C) else count_bucket
                bucket[s, a, main] += st[a, S_T] - t_aiv[s, a] - st[a, S_SIG]
                bucket[s, a, B_SYNC] += st[a, S_SIG]
                wait[s, a] += st[a, S_SW]
                t_aiv[s, a] = st[a, S_T]
                if phase == 0:
                    first_copy[s, a] = st[a, S_FIRST]
                    last_copy_ack[s, a] = st[a, S_LAST_ACK]
                    sent += st[a, S_COPIES]
        for a in range(A):
            marks[s, a, nmarks[s, a]] = t_aiv[s, a]
            nmarks[s, a] += 1

    # ---- ingress ports: arrivals served in (arrival, source, store order) ------------------------
    # A bucket holds its stores source by source, so a stable sort by arrival alone gives the
    # port's order; keys pack arrival | slot, the slot breaking ties. Two stores from one source
    # never arrive together (its egress port sends one at a time, each taking at least a cycle,
    # and they travel the same hop), so their order in the bucket, program order rather than
    # the port's, never decides.
    biggest = 0
    for d in range(R):
        biggest = max(biggest, bfill[d] - bstart[d])
    keys = np.empty(biggest, np.int64)
    other = np.empty(biggest, np.int64)
    slot_bits = _bits(biggest + 1)
    slot_mask = (np.int64(1) << slot_bits) - 1
    ing_of = np.empty(4, np.int64)   # ingress cost by store kind
    ing_of[K_COPY] = c[C_COPY_INGRESS]
    ing_of[K_COUNT] = c[C_COUNT_INGRESS]
    ing_of[K_FLAG] = c[C_SIGNAL_INGRESS]
    ing_of[K_CHECKSUM] = c[C_SIGNAL_INGRESS]
    count = np.empty((np.int64(1) << RADIX_BITS) + 1, np.int64)
    for d in range(R):
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
        kd = _arrival_order(keys, other, n, slot_bits, bot, top, count, st_arr, lo, KEY_BITS)
        free = 0
        for x in range(n):
            sid = lo + (kd[u(x)] & slot_mask)
            v = st_arr[u(sid)]
            free = max(v >> 2, free) + ing_of[u(v & 3)]
            st_vis[u(sid)] = free

    # ---- receivers --------------------------------------------------------------------------------
    delivered = 0
    violations = 0
    collisions = 0
    ends = np.zeros(R, np.int64)
    n_verify = C if ubep else A
    entries = R * EL
    for d in range(R):
        skey = rng.stream(p[P_SEED], p[P_WKEY], d, rng.DOMAIN_SENTINEL)
        r_lo = ecnt[d * EL]
        b_lo, b_hi = bstart[d], bfill[d]
        n_recv = ecnt[(d + 1) * EL] - r_lo
        # Flag verification (bsp) / polling every source's counts (ubep CalCumSum group)
        after_count = (c[C_COUNT_VERIFY] if sync != SW else 0) + \
            (c[C_COUNT_RESET] if sync == SP else 0)           # check and re-arm, per source
        prefix = c[C_PREFIX] * EL if ubep else 0              # partial prefix sum, per source
        for j in range(n_verify):
            t = t_aiv[d, j]
            polled = 0
            s_lo = j * R // n_verify
            s_hi = (j + 1) * R // n_verify
            for s in range(s_lo, s_hi):
                v = st_vis[u(count_signal[u(d * R + s)])]
                if q_count > 0.0 and rng.unit(skey, s) < q_count:
                    collisions += 1
                    v += c[C_TIMEOUT]
                t2p = _poll(t, v, period, inv_period)
                polled += t2p - t
                t = t2p + after_count + prefix
            n_src = s_hi - s_lo
            bucket[d, j, B_SYNC] += polled + n_src * after_count
            bucket[d, j, B_CUMSUM] += n_src * prefix
            wait[d, j] += polled
            t_aiv[d, j] = t
            marks[d, j, nmarks[d, j]] = t
            nmarks[d, j] += 1
        if ubep:
            # the group publishes the offsets with one local store once its last AIV is done
            offsets = 0
            for j in range(C):
                offsets = max(offsets, t_aiv[d, j])
            offsets += c[C_SIGNAL_ISSUE] + lat_local
            first_aiv = C
            n_reorder = NS
        else:
            # SyncAll, CalCumSum over the ranks x experts-per-die counts, SyncAll
            for step in range(2):
                barrier = 0
                for a in range(A):
                    barrier = max(barrier, t_aiv[d, a])
                _release(d, barrier + c[C_SYNCALL], t_aiv, bucket, wait, marks, nmarks)
                for a in range(A if step == 0 else 0):
                    work = c[C_PREFIX] * ((a + 1) * entries // A - a * entries // A)
                    bucket[d, a, B_CUMSUM] += work
                    t_aiv[d, a] += work
                    marks[d, a, nmarks[d, a]] = t_aiv[d, a]
                    nmarks[d, a] += 1
            first_aiv = 0
            n_reorder = A
        # Token-Reordering: each AIV an equal contiguous slice of the received copies; per copy
        # a local copy and, under ubep (where copies signal their own arrival), a check of its
        # flag (not in sw) and the sentinel's reset (sp)
        verify = c[C_COPY_VERIFY] if (ubep and sync != SW) else 0
        reorder = c[C_LOCAL_COPY] + (c[C_COPY_RESET] if (ubep and sync == SP) else 0)
        for j in range(n_reorder):
            a = first_aiv + j
            t = t_aiv[d, a]
            if ubep:
                t2p = _poll(t, offsets, period, inv_period)
                bucket[d, a, B_CUMSUM] += t2p - t
                wait[d, a] += t2p - t
                t = t2p
                marks[d, a, nmarks[d, a]] = t
                nmarks[d, a] += 1
            polled = 0
            for x in range(j * n_recv // n_reorder, (j + 1) * n_recv // n_reorder):
                g = r_lo + x
                data_sid = copy_ref[u(g), 0]
                data = st_vis[u(data_sid)]
                # delivered: a copy's store (remote or local), in this die's bucket, taken for
                # the first time
                v = st_arr[u(data_sid)]
                if (v == LOCAL - K_COPY or (v >= 0 and v & 3 == K_COPY)) and \
                        b_lo <= data_sid < b_hi:
                    delivered += 1
                    st_arr[u(data_sid)] = TAKEN
                if ubep:
                    sig = copy_ref[u(g), 1]
                    v = data if sig == data_sid else st_vis[u(sig)]
                    if q_copy > 0.0 and rng.unit(skey, R + x) < q_copy:
                        collisions += 1
                        v += c[C_TIMEOUT]
                    t2p = _poll(t, v, period, inv_period)
                    polled += t2p - t
                    t = t2p + verify
                if t < data:
                    violations += 1
                t += reorder
            n_copies = (j + 1) * n_recv // n_reorder - j * n_recv // n_reorder
            bucket[d, a, B_SYNC] += polled + n_copies * verify
            bucket[d, a, B_REORDER] += n_copies * reorder
            wait[d, a] += polled
            t_aiv[d, a] = t
            marks[d, a, nmarks[d, a]] = t
            nmarks[d, a] += 1
        end = 0
        for a in range(A):
            end = max(end, t_aiv[d, a])
        ends[d] = end

    # ---- results ----------------------------------------------------------------------------------
    crit = 0
    for d in range(R):
        if ends[d] > ends[crit]:
            crit = d
    latency = ends[crit]
    if ubep:
        # the last AIV of the last die: its own time, bucket by bucket
        ca = 0
        for a in range(A):
            if t_aiv[crit, a] > t_aiv[crit, ca]:
                ca = a
        out[O_PH_INIT] = bucket[crit, ca, B_INIT]
        out[O_PH_SEND] = bucket[crit, ca, B_SEND]
        out[O_PH_SYNC] = bucket[crit, ca, B_SYNC]
        out[O_PH_CUMSUM] = bucket[crit, ca, B_CUMSUM]
        out[O_PH_REORDER] = bucket[crit, ca, B_REORDER]
    else:
        # the last die, phase by phase: its SyncAlls and what they wait for count as sync
        init_end = 0
        cumsum_end = 0
        for a in range(A):
            init_end = max(init_end, marks[crit, a, 1])
            cumsum_end = max(cumsum_end, marks[crit, a, 7])
        send_end = marks[crit, 0, 3] - c[C_SYNCALL]
        out[O_PH_INIT] = init_end
        out[O_PH_SEND] = send_end - init_end
        out[O_PH_SYNC] = (marks[crit, 0, 6] - send_end) + (marks[crit, 0, 8] - cumsum_end)
        out[O_PH_CUMSUM] = cumsum_end - marks[crit, 0, 6]
        out[O_PH_REORDER] = latency - marks[crit, 0, 8]
    send_max = 0
    send_min = NEVER
    send_sum = 0
    n_send = 0
    wait_sum = 0
    for d in range(R):
        for a in range(A):
            wait_sum += wait[d, a]
            if first_copy[d, a] >= 0:
                v = last_copy_ack[d, a] - first_copy[d, a]
                send_max = max(send_max, v)
                send_min = min(send_min, v)
                send_sum += v
                n_send += 1
    out[O_LATENCY] = latency
    out[O_LATENCY_MEAN] = ends.sum() / R
    out[O_COPIES_TOTAL] = R * M
    for h in range(N_HOPS):
        out[O_COPIES_HOP0 + h] = copies_hop[h]
    out[O_SEND_MAX] = send_max
    out[O_SEND_MEAN] = send_sum / n_send if n_send else 0.0
    out[O_SEND_SPREAD] = send_max - send_min if n_send else 0
    out[O_WAIT] = wait_sum / (R * A)
    out[O_QSTEPS] = qsteps_max
    out[O_COLLISIONS] = collisions
    out[O_SENT] = sent
    out[O_DELIVERED] = delivered
    out[O_VIOLATIONS] = violations
    out[O_BOUND] = _latency_bound(c, copies_hop, max_out * c[C_COPY_EGRESS],
                                  max_in * c[C_COPY_INGRESS])
    if marks_out.shape[0] == R:
        marks_out[:, :, :] = marks


@njit
def _simulate_dispatch(p, c, chance, cdf, trace, out, marks_out):
    """One configuration: _dispatch on its own schedule. cdf: cumulative expert weights
    (empty: uniform), trace: routing [ranks * batch * topk] (empty unless routing = trace)."""
    _dispatch(p, c, chance, _schedule(p, c, cdf, trace), out, marks_out)


# What _schedule reads besides the parameters (all of them but sync).
SCHEDULE_COSTS = (C_NPU_DIES, C_TIER1, C_TIER2)


@njit
def _same_schedule(params, costs, i, j):
    """Whether rows i and j have one schedule: they differ in nothing _schedule reads."""
    for col in range(N_PARAMS):
        if col != P_SYNC and params[i, col] != params[j, col]:
            return False
    for col in SCHEDULE_COSTS:
        if costs[i, col] != costs[j, col]:
            return False
    return True


@njit
def _latency_bound(c, copies_hop, egress_max, ingress_max):
    """A latency no configuration can beat, in cycles. No copy is requested before Init and its
    issue. The last remote copy of a die leaves its egress port after all of that die's remote
    copies (egress_max: the most of any die's), the last to reach a die's ingress port waits
    for all of that port's (ingress_max), each travels at least half the shortest hop its class
    could take (a local copy: the local latency) before it is visible, and it is then
    reordered by a local copy."""
    reach = c[C_LAT0] if copies_hop[0] else 0
    half = NEVER
    for h in range(1, N_HOPS):
        if copies_hop[h]:
            half = min(half, c[C_LAT0 + h] >> 1)
    if half < NEVER:
        reach = max(reach, egress_max + half + c[C_COPY_INGRESS],
                    c[C_COPY_EGRESS] + half + ingress_max)
    return c[C_INIT] + c[C_COPY_ISSUE] + reach + c[C_LOCAL_COPY]


@njit(inline="always")
def _bits(v):
    """Bits needed to hold the values 0 .. v - 1."""
    b = 1
    while (np.int64(1) << b) < v:
        b += 1
    return b


@njit(parallel=True)
def _simulate_batch(params, costs, chances, cdf_values, trace_values, out):
    """Many configurations: row i of `out` from row i of the inputs only. Consecutive rows with
    one schedule (_same_schedule: a configuration's sync variants, which a caller puts side by
    side) share its computation, a sixth of a configuration's time; one prange iteration runs
    each such run of rows and writes only theirs."""
    n = params.shape[0]
    starts = np.empty(n + 1, np.int64)
    runs = 0
    for i in range(n):
        if i == 0 or not _same_schedule(params, costs, i - 1, i):
            starts[runs] = i
            runs += 1
    starts[runs] = n
    no_marks = np.zeros((0, 0, 0), np.int64)
    for r in numba.prange(runs):
        lo = starts[r]
        p = params[lo]
        cdf = cdf_values[p[P_CDF_START]:p[P_CDF_START] + p[P_CDF_LEN]]
        if p[P_ROUTING] == TRACE:
            m = p[P_RANKS] * p[P_BATCH] * p[P_TOPK]
            tr = trace_values[p[P_TRACE]:p[P_TRACE] + m]
        else:
            tr = trace_values[0:0]
        schedule = _schedule(p, costs[lo], cdf, tr)
        for i in range(lo, starts[r + 1]):
            _dispatch(params[i], costs[i], chances[i], schedule, out[i], no_marks)
