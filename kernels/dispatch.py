"""The dispatch kernel: one configuration, every AIV of every die, in integer cycles.

`_simulate_dispatch` runs one configuration; `_simulate_batch` runs many in parallel (one
configuration per prange iteration, rows written only by their own iteration). The model is the
one of ubepsim/reference.py, which this file must match exactly; it is organised for speed
instead of clarity:

1. per die: routing (counter-based draws), schedule of copies to AIVs, and every store the die
   issues, through an event loop over its AIVs that arbitrates the egress port in time order;
2. per destination: the ingress port, serving arrivals in (arrival, source, store order);
3. per die: receivers (polls in closed form, counts, CalCumSum, reordering) and the phases.
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
(O_SEND_MEAN, O_WAIT, O_PH_INIT, O_PH_SEND, O_PH_SYNC, O_PH_CUMSUM, O_PH_REORDER, O_QSTEPS,
 O_COLLISIONS, O_DELIVERED, O_VIOLATIONS, O_BOUND) = range(O_SEND_MAX + 1, O_SEND_MAX + 13)
N_OUT = O_BOUND + 1


@njit
def hop_class(src, dst, npu_dies, tier1, tier2):
    if src == dst:
        return 0
    if src // npu_dies == dst // npu_dies:
        return 1
    if tier1 == 0 or src // tier1 == dst // tier1:
        return 2
    if tier2 == 0 or src // tier2 == dst // tier2:
        return 3
    return 4


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


@njit
def _weight(e, cdf, weighted):
    if not weighted:
        return 1.0
    return cdf[0] if e == 0 else cdf[e] - cdf[e - 1]


@njit
def _free(e, chosen, k, cdf, weighted):
    for k2 in range(k):
        if chosen[k2] == e:
            return False
    return (not weighted) or _weight(e, cdf, weighted) > 0.0


@njit
def _qsearch(cum, target, n_experts):
    """Algorithm 1 on per-expert cumulative counts: cum[p] = VectorCount(ids < p).

    Returns (expert, steps). A pivot past the window's right end counts as the end.
    """
    lo, hi, c_lo, steps = 0, n_experts, 0, 0
    while hi - lo > 1:
        gap = (hi - lo + 3) // 4
        p1 = min(lo + gap, hi)
        p2 = min(lo + 2 * gap, hi)
        p3 = min(lo + 3 * gap, hi)
        steps += 1
        if target < cum[p1]:
            lo, hi = lo, p1
        elif target < cum[p2]:
            lo, hi, c_lo = p1, p2, cum[p1]
        elif target < cum[p3]:
            lo, hi, c_lo = p2, p3, cum[p2]
        else:
            lo, hi, c_lo = p3, hi, cum[p3]
    return lo, steps


@njit
def _poll(t, visible, period):
    """Back-to-back polls from t: (time the poll that sees `visible` returns)."""
    if visible <= t:
        return t + period
    n = (visible - t + period - 1) // period
    return t + (n + 1) * period


@njit
def _heap_push(ht, hj, size, t, j):
    i = size
    ht[i] = t
    hj[i] = j
    while i > 0:
        p = (i - 1) >> 1
        if ht[p] > ht[i] or (ht[p] == ht[i] and hj[p] > hj[i]):
            ht[p], ht[i] = ht[i], ht[p]
            hj[p], hj[i] = hj[i], hj[p]
            i = p
        else:
            break
    return size + 1


@njit
def _heap_pop(ht, hj, size):
    t, j = ht[0], hj[0]
    size -= 1
    ht[0] = ht[size]
    hj[0] = hj[size]
    i = 0
    while True:
        l = 2 * i + 1
        if l >= size:
            break
        c = l
        r = l + 1
        if r < size and (ht[r] < ht[l] or (ht[r] == ht[l] and hj[r] < hj[l])):
            c = r
        if ht[c] < ht[i] or (ht[c] == ht[i] and hj[c] < hj[i]):
            ht[c], ht[i] = ht[i], ht[c]
            hj[c], hj[i] = hj[i], hj[c]
            i = c
        else:
            break
    return t, j, size


@njit
def _simulate_dispatch(p, c, chance, cdf, trace, out, marks_out):
    """One configuration. p: parameter row, c: cost row, chance: sentinel collision chances
    (copy, count message), cdf: cumulative expert weights (empty: uniform), trace: routing
    [ranks * batch * topk] (empty unless routing = trace). Writes out[N_OUT]; if marks_out has
    shape [ranks, aivs, N_MARKS], every AIV's phase boundaries too."""
    R, B, K, E, A = p[P_RANKS], p[P_BATCH], p[P_TOPK], p[P_EXPERTS], p[P_AIVS]
    ubep = p[P_PROTOCOL] == UBEP
    sync = p[P_SYNC]
    sched = p[P_SCHEDULE]
    C = p[P_CUMSUM] if ubep else 0
    NS = A - C
    M = B * K
    EL = E // R
    F = c[C_IN_FLIGHT]
    npu, t1, t2 = c[C_NPU_DIES], c[C_TIER1], c[C_TIER2]
    lat = c[C_LAT0:C_LAT0 + N_HOPS]
    lat_local = lat[0]
    period = c[C_POLL]
    q_copy, q_count = chance[0], chance[1]
    want_marks = marks_out.shape[0] == R

    # ---- routing of every die ---------------------------------------------------------------
    experts_of = np.empty(R * M, np.int64)
    if p[P_ROUTING] == TRACE:
        experts_of[:] = trace
    else:
        chosen = np.empty(K, np.int64)
        for s in range(R):
            key = rng.stream(p[P_SEED], p[P_WKEY], s, rng.DOMAIN_ROUTING)
            _route_die(experts_of[s * M:(s + 1) * M], key, B, K, E, cdf, chosen)

    # ---- per-die state that lives across passes ----------------------------------------------
    t_aiv = np.zeros((R, A), np.int64)
    bucket = np.zeros((R, A, 5), np.int64)
    wait = np.zeros((R, A), np.int64)
    first_copy = np.full((R, A), -1, np.int64)
    last_copy_ack = np.full((R, A), -1, np.int64)
    marks = np.zeros((R, A, N_MARKS), np.int64)
    nmarks = np.ones((R, A), np.int64)
    die_done_send = np.zeros(R, np.int64)

    extra = 1 if (ubep and (sync == SW or sync == DC)) else 0
    two = 1 if (sync == SW or sync == DC) else 0
    max_stores = R * M * (1 + extra) + R * R * (1 + two)
    st_dst = np.empty(max_stores, np.int64)
    st_kind = np.empty(max_stores, np.int64)
    st_arr = np.empty(max_stores, np.int64)
    st_vis = np.empty(max_stores, np.int64)
    n_st = 0
    copy_store = np.empty(R * M, np.int64)     # store carrying each copy (global id s * M + i)
    copy_signal = np.empty(R * M, np.int64)    # store a receiver polls for it
    count_signal = np.empty(R * R, np.int64)   # [s * R + d]: store polled for s's counts to d

    copies_hop = np.zeros(N_HOPS, np.int64)
    qsteps_max = 0
    bound = 0
    ingress_load = np.zeros(R, np.int64)

    # Per-die scratch.
    dest = np.empty(M, np.int64)
    hop = np.empty(M, np.int64)
    order = np.empty(M, np.int64)
    alist = np.empty(M, np.int64)
    aoff = np.zeros(NS + 1, np.int64)
    steps = np.zeros(NS, np.int64)
    cnt = np.zeros(E + 1, np.int64)
    key_of = np.empty(E, np.int64)
    last_to = np.zeros(M, np.bool_)
    chk_of = np.empty(M, np.int64)
    cur_sig = np.empty(R, np.int64)
    seen_dest = np.full(R, -1, np.int64)
    ring = np.zeros((A, F), np.int64)
    nstore = np.zeros(A, np.int64)
    max_ack = np.zeros(A, np.int64)
    pos = np.zeros(A, np.int64)
    sub = np.zeros(A, np.int64)
    mode = np.zeros(A, np.int64)       # 0 token list, 1 count destinations, -1 nothing
    d_lo = np.zeros(A, np.int64)
    d_hi = np.zeros(A, np.int64)
    ht = np.empty(A, np.int64)
    hj = np.empty(A, np.int64)
    hcounts = np.zeros(N_HOPS + 1, np.int64)

    for s in range(R):
        base = s * M
        # copies of die s: destination and hop class
        eg = 0
        for i in range(M):
            e = experts_of[base + i]
            d = e // EL
            h = hop_class(s, d, npu, t1, t2)
            dest[i] = d
            hop[i] = h
            copies_hop[h] += 1
            if h:
                eg += c[C_COPY_EGRESS]
                ingress_load[d] += c[C_COPY_INGRESS]
        bound = max(bound, eg)

        # ---- schedule: order of copies by (key of expert, copy index), then AIV lists --------
        if sched == HOMOGENIZED:
            # remapped expert order: nearest hop class first, then expert id
            hcounts[:] = 0
            for e in range(E):
                hcounts[hop_class(s, e // EL, npu, t1, t2) + 1] += 1
            for h in range(N_HOPS):
                hcounts[h + 1] += hcounts[h]
            for e in range(E):
                h = hop_class(s, e // EL, npu, t1, t2)
                key_of[e] = hcounts[h]
                hcounts[h] += 1
        else:
            for e in range(E):
                key_of[e] = e
        cnt[:] = 0
        for i in range(M):
            cnt[key_of[experts_of[base + i]] + 1] += 1
        for e in range(E):
            cnt[e + 1] += cnt[e]        # cnt[r] = copies with key < r (VectorCount(ids < r))
        fill = cnt[:E].copy()
        for i in range(M):
            r = key_of[experts_of[base + i]]
            order[fill[r]] = i
            fill[r] += 1
        steps[:] = 0
        if sched == EXPERT_BLOCK:
            j = 0
            aoff[0] = 0
            for e in range(E):
                owner = e * NS // E
                while j < owner:
                    j += 1
                    aoff[j] = cnt[e]
            while j < NS:
                j += 1
                aoff[j] = M
            alist[:] = order
        elif sched == BALANCED:
            for j in range(NS + 1):
                aoff[j] = j * M // NS
            alist[:] = order
            for j in range(NS):
                if aoff[j + 1] > aoff[j]:
                    ex, steps[j] = _qsearch(cnt, aoff[j], E)
        else:
            x = 0
            for j in range(NS):
                aoff[j] = x
                q = j
                while q < M:
                    alist[x] = order[q]
                    x += 1
                    q += NS
                if j < M:
                    ex, steps[j] = _qsearch(cnt, j, E)
            aoff[NS] = x
        for j in range(NS):
            if steps[j] > qsteps_max:
                qsteps_max = steps[j]

        # dc: which copy is each AIV's last to its destination
        if ubep and sync == DC:
            for j in range(NS):
                for x in range(aoff[j + 1] - 1, aoff[j] - 1, -1):
                    i = alist[x]
                    if seen_dest[dest[i]] != s * A + j:
                        seen_dest[dest[i]] = s * A + j
                        last_to[x] = True
                    else:
                        last_to[x] = False

        # ---- Init -----------------------------------------------------------------------------
        for j in range(A):
            ring[j, :] = 0
            nstore[j] = 0
            max_ack[j] = 0
            pos[j] = 0
            sub[j] = 0
        for j in range(NS):
            a = C + j
            lo, hi = aoff[j], aoff[j + 1]
            loads = 0
            for x in range(lo, hi):
                if x == lo or alist[x] // K != alist[x - 1] // K:
                    loads += 1
            search = 0
            if sched != EXPERT_BLOCK and hi > lo:
                search = (steps[j] + 1) * c[C_VCOUNT]
            cyc = c[C_INIT] + search + loads * c[C_LOCAL_COPY]
            t_aiv[s, a] = cyc
            bucket[s, a, B_INIT] = cyc
            mode[a] = 0 if hi > lo else -1
            marks[s, a, 1] = cyc
            nmarks[s, a] = 2
        for j in range(C):
            t_aiv[s, j] = c[C_INIT]
            bucket[s, j, B_INIT] = c[C_INIT]
            marks[s, j, 1] = c[C_INIT]
            nmarks[s, j] = 2
            d_lo[j] = j * R // C
            d_hi[j] = (j + 1) * R // C
            mode[j] = 1 if d_hi[j] > d_lo[j] else -1
            pos[j] = d_lo[j]

        egress = 0
        n_phases = 1 if ubep else 2
        for phase in range(n_phases):
            if phase == 1:
                # BSP: SyncAll after Token-Sending, then SendFlag & Count on every AIV
                for a in range(A):
                    marks[s, a, nmarks[s, a]] = t_aiv[s, a]
                    nmarks[s, a] += 1
                done = 0
                for a in range(A):
                    done = max(done, max(t_aiv[s, a], max_ack[a]))
                barrier = done + c[C_SYNCALL]
                for a in range(A):
                    w = barrier - t_aiv[s, a]
                    bucket[s, a, B_SYNC] += w
                    wait[s, a] += w
                    t_aiv[s, a] = barrier
                    marks[s, a, nmarks[s, a]] = barrier
                    nmarks[s, a] += 1
                    d_lo[a] = a * R // A
                    d_hi[a] = (a + 1) * R // A
                    mode[a] = 1 if d_hi[a] > d_lo[a] else -1
                    pos[a] = d_lo[a]
                    sub[a] = 0
            # ---- egress event loop over the die's AIVs ----------------------------------------
            size = 0
            for a in range(A):
                if mode[a] >= 0:
                    size = _request(a, s, size, ht, hj, mode, pos, sub, alist, aoff, C, dest,
                                    ubep, sync, last_to, c, EL, F, t_aiv, bucket, wait, ring,
                                    nstore, max_ack, first_copy)
            while size > 0:
                t, a, size = _heap_pop(ht, hj, size)
                # which store is it
                if mode[a] == 0:
                    x = aoff[a - C] + pos[a]
                    i = alist[x]
                    d = dest[i]
                    h = hop[i]
                    kind = K_COPY if sub[a] == 0 else (K_FLAG if sync == SW else K_CHECKSUM)
                else:
                    d = pos[a]
                    h = hop_class(s, d, npu, t1, t2)
                    kind = K_COUNT if sub[a] == 0 else (K_FLAG if sync == SW else K_CHECKSUM)
                sid = n_st
                n_st += 1
                st_dst[sid] = d
                st_kind[sid] = kind
                if d == s:
                    ack = t + lat_local
                    st_arr[sid] = -1
                    st_vis[sid] = ack
                else:
                    if kind == K_COPY:
                        eg_c = c[C_COPY_EGRESS]
                    elif kind == K_COUNT:
                        eg_c = c[C_COUNT_EGRESS]
                    else:
                        eg_c = c[C_SIGNAL_EGRESS]
                    depart = max(t, egress) + eg_c
                    egress = depart
                    st_arr[sid] = depart + lat[h] // 2
                    ack = depart + lat[h]
                ring[a, nstore[a] % F] = ack
                nstore[a] += 1
                if ack > max_ack[a]:
                    max_ack[a] = ack
                # record signals and advance the AIV's program
                if mode[a] == 0:
                    if sub[a] == 0:
                        copy_store[base + i] = sid
                        copy_signal[base + i] = sid
                        last_copy_ack[s, a] = ack
                        if ubep and sync == SW:
                            sub[a] = 1
                        elif ubep and sync == DC and last_to[x]:
                            sub[a] = 1
                        else:
                            pos[a] += 1
                    else:
                        if sync == SW:
                            copy_signal[base + i] = sid
                        else:
                            chk_of[x] = sid    # dc: the checksum, assigned to copies below
                        sub[a] = 0
                        pos[a] += 1
                    more = pos[a] < aoff[a - C + 1] - aoff[a - C]
                else:
                    count_signal[s * R + d] = sid
                    if sub[a] == 0 and (sync == SW or sync == DC):
                        sub[a] = 1
                    else:
                        sub[a] = 0
                        pos[a] += 1
                    more = pos[a] < d_hi[a]
                if more:
                    size = _request(a, s, size, ht, hj, mode, pos, sub, alist, aoff, C, dest,
                                    ubep, sync, last_to, c, EL, F, t_aiv, bucket, wait, ring,
                                    nstore, max_ack, first_copy)
        # dc: every copy's signal is its (AIV, destination) checksum
        if ubep and sync == DC:
            for j in range(NS):
                for x in range(aoff[j + 1] - 1, aoff[j] - 1, -1):
                    i = alist[x]
                    if last_to[x]:
                        cur_sig[dest[i]] = chk_of[x]
                    copy_signal[base + i] = cur_sig[dest[i]]
        done = 0
        for a in range(A):
            marks[s, a, nmarks[s, a]] = t_aiv[s, a]
            nmarks[s, a] += 1
            done = max(done, max(t_aiv[s, a], max_ack[a]))
        die_done_send[s] = done

    # ---- ingress ports --------------------------------------------------------------------------
    icnt = np.zeros(R + 1, np.int64)
    for sid in range(n_st):
        if st_arr[sid] >= 0:
            icnt[st_dst[sid] + 1] += 1
    for d in range(R):
        icnt[d + 1] += icnt[d]
    ifill = icnt[:R].copy()
    ilist = np.empty(icnt[R], np.int64)
    for sid in range(n_st):
        if st_arr[sid] >= 0:
            ilist[ifill[st_dst[sid]]] = sid
            ifill[st_dst[sid]] += 1
    for d in range(R):
        ids = ilist[icnt[d]:icnt[d + 1]]
        arr = st_arr[ids]
        o = np.argsort(arr, kind="mergesort")
        free = 0
        for x in range(ids.shape[0]):
            sid = ids[o[x]]
            k = st_kind[sid]
            if k == K_COPY:
                ing = c[C_COPY_INGRESS]
            elif k == K_COUNT:
                ing = c[C_COUNT_INGRESS]
            else:
                ing = c[C_SIGNAL_INGRESS]
            v = max(st_arr[sid], free) + ing
            st_vis[sid] = v
            free = v

    # ---- receivers --------------------------------------------------------------------------------
    # received copies of every die in output order (expert, source, copy index): counting sort
    ecnt = np.zeros(E + 1, np.int64)
    for g in range(R * M):
        ecnt[experts_of[g] + 1] += 1
    for e in range(E):
        ecnt[e + 1] += ecnt[e]
    efill = ecnt[:E].copy()
    recv = np.empty(R * M, np.int64)
    for g in range(R * M):
        e = experts_of[g]
        recv[efill[e]] = g
        efill[e] += 1

    delivered = 0
    violations = 0
    collisions = 0
    ends = np.zeros(R, np.int64)
    for d in range(R):
        skey = rng.stream(p[P_SEED], p[P_WKEY], d, rng.DOMAIN_SENTINEL)
        r_lo = ecnt[d * EL]
        n_recv = ecnt[(d + 1) * EL] - r_lo
        n_verify = C if ubep else A
        for j in range(n_verify):
            t = t_aiv[d, j]
            s_lo = j * R // n_verify
            s_hi = (j + 1) * R // n_verify
            for s in range(s_lo, s_hi):
                v = st_vis[count_signal[s * R + d]]
                if q_count > 0.0 and rng.unit(skey, s) < q_count:
                    collisions += 1
                    v += c[C_TIMEOUT]
                t2p = _poll(t, v, period)
                bucket[d, j, B_SYNC] += t2p - t
                wait[d, j] += t2p - t
                t = t2p
                if sync != SW:
                    t += c[C_COUNT_VERIFY]
                    bucket[d, j, B_SYNC] += c[C_COUNT_VERIFY]
                if sync == SP:
                    t += c[C_COUNT_RESET]
                    bucket[d, j, B_SYNC] += c[C_COUNT_RESET]
                if ubep:
                    t += c[C_PREFIX] * EL
                    bucket[d, j, B_CUMSUM] += c[C_PREFIX] * EL
            t_aiv[d, j] = t
            marks[d, j, nmarks[d, j]] = t
            nmarks[d, j] += 1
        if ubep:
            offsets = 0
            for j in range(C):
                offsets = max(offsets, t_aiv[d, j])
            offsets += c[C_SIGNAL_ISSUE] + lat_local
            first_aiv = C
            n_reorder = NS
        else:
            for a in range(n_verify, A):
                marks[d, a, nmarks[d, a]] = t_aiv[d, a]
                nmarks[d, a] += 1
            # SyncAll, CalCumSum, SyncAll
            barrier = 0
            for a in range(A):
                barrier = max(barrier, t_aiv[d, a])
            barrier += c[C_SYNCALL]
            entries = R * EL
            for a in range(A):
                w = barrier - t_aiv[d, a]
                bucket[d, a, B_SYNC] += w
                wait[d, a] += w
                marks[d, a, nmarks[d, a]] = barrier
                work = c[C_PREFIX] * ((a + 1) * entries // A - a * entries // A)
                bucket[d, a, B_CUMSUM] += work
                t_aiv[d, a] = barrier + work
                marks[d, a, nmarks[d, a] + 1] = t_aiv[d, a]
                nmarks[d, a] += 2
            barrier = 0
            for a in range(A):
                barrier = max(barrier, t_aiv[d, a])
            barrier += c[C_SYNCALL]
            for a in range(A):
                w = barrier - t_aiv[d, a]
                bucket[d, a, B_SYNC] += w
                wait[d, a] += w
                t_aiv[d, a] = barrier
                marks[d, a, nmarks[d, a]] = barrier
                nmarks[d, a] += 1
            first_aiv = 0
            n_reorder = A
        for j in range(n_reorder):
            a = first_aiv + j
            t = t_aiv[d, a]
            if ubep:
                t2p = _poll(t, offsets, period)
                bucket[d, a, B_CUMSUM] += t2p - t
                wait[d, a] += t2p - t
                t = t2p
                marks[d, a, nmarks[d, a]] = t
                nmarks[d, a] += 1
            lo = j * n_recv // n_reorder
            hi = (j + 1) * n_recv // n_reorder
            for x in range(lo, hi):
                g = recv[r_lo + x]
                if ubep:
                    v = st_vis[copy_signal[g]]
                    if q_copy > 0.0 and rng.unit(skey, R + x) < q_copy:
                        collisions += 1
                        v += c[C_TIMEOUT]
                    t2p = _poll(t, v, period)
                    bucket[d, a, B_SYNC] += t2p - t
                    wait[d, a] += t2p - t
                    t = t2p
                    if sync != SW:
                        t += c[C_COPY_VERIFY]
                        bucket[d, a, B_SYNC] += c[C_COPY_VERIFY]
                if t < st_vis[copy_store[g]]:
                    violations += 1
                t += c[C_LOCAL_COPY]
                bucket[d, a, B_REORDER] += c[C_LOCAL_COPY]
                if sync == SP:
                    t += c[C_COPY_RESET]
                    bucket[d, a, B_REORDER] += c[C_COPY_RESET]
                delivered += 1
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
        ca = 0
        for a in range(A):
            if t_aiv[crit, a] > t_aiv[crit, ca]:
                ca = a
        ph = bucket[crit, ca]
        out[O_PH_INIT] = ph[B_INIT]
        out[O_PH_SEND] = ph[B_SEND]
        out[O_PH_SYNC] = ph[B_SYNC]
        out[O_PH_CUMSUM] = ph[B_CUMSUM]
        out[O_PH_REORDER] = ph[B_REORDER]
    else:
        init_end = 0
        for a in range(A):
            init_end = max(init_end, marks[crit, a, 1])
        send_end = marks[crit, 0, 3] - c[C_SYNCALL]
        out[O_PH_INIT] = init_end
        out[O_PH_SEND] = send_end - init_end
        out[O_PH_SYNC] = marks[crit, 0, 6] - send_end
        out[O_PH_CUMSUM] = marks[crit, 0, 8] - marks[crit, 0, 6]
        out[O_PH_REORDER] = latency - marks[crit, 0, 8]
    send_max = 0
    send_sum = 0
    n_send = 0
    wait_sum = 0
    for d in range(R):
        for a in range(A):
            wait_sum += wait[d, a]
            if first_copy[d, a] >= 0:
                v = last_copy_ack[d, a] - first_copy[d, a]
                send_max = max(send_max, v)
                send_sum += v
                n_send += 1
    out[O_LATENCY] = latency
    out[O_LATENCY_MEAN] = ends.sum() / R
    out[O_COPIES_TOTAL] = R * M
    for h in range(N_HOPS):
        out[O_COPIES_HOP0 + h] = copies_hop[h]
    out[O_SEND_MAX] = send_max
    out[O_SEND_MEAN] = send_sum / n_send if n_send else 0.0
    out[O_WAIT] = wait_sum / (R * A)
    out[O_QSTEPS] = qsteps_max
    out[O_COLLISIONS] = collisions
    out[O_DELIVERED] = delivered
    out[O_VIOLATIONS] = violations
    out[O_BOUND] = max(bound, ingress_load.max()) + c[C_INIT]
    if want_marks:
        marks_out[:, :, :] = marks


@njit
def _request(a, s, size, ht, hj, mode, pos, sub, alist, aoff, C, dest, ubep, sync, last_to, c,
             EL, F, t_aiv, bucket, wait, ring, nstore, max_ack, first_copy):
    """AIV a's next store: pre-work, fence, in-flight slot, issue; then it requests the port."""
    if mode[a] == 0:
        if sub[a] == 0:
            kind = K_COPY
            pre = c[C_COPY_VERIFY] if (ubep and sync == DC) else 0
            pre_b = B_SEND
            b = B_SEND
            fence = False
            issue = c[C_COPY_ISSUE]
        else:
            kind = K_FLAG
            pre = 0
            pre_b = B_SYNC
            b = B_SYNC
            fence = sync == SW
            issue = c[C_SIGNAL_ISSUE]
    else:
        if sub[a] == 0:
            kind = K_COUNT
            pre = EL * c[C_VCOUNT]
            pre_b = B_CUMSUM if ubep else B_SYNC
            b = pre_b
            fence = False
            issue = c[C_COUNT_ISSUE]
        else:
            kind = K_FLAG
            pre = 0
            pre_b = B_SYNC
            b = B_SYNC
            fence = sync == SW
            issue = c[C_SIGNAL_ISSUE]
    t = t_aiv[s, a] + pre
    bucket[s, a, pre_b] += pre
    if fence and nstore[a] > 0:
        w = max_ack[a] - t
        if w > 0:
            t += w
            bucket[s, a, B_SYNC] += w
            wait[s, a] += w
    if nstore[a] >= F:
        w = ring[a, nstore[a] % F] - t
        if w > 0:
            t += w
            bucket[s, a, b] += w
    if kind == K_COPY and first_copy[s, a] < 0:
        first_copy[s, a] = t
    t += issue
    bucket[s, a, b] += issue
    t_aiv[s, a] = t
    return _heap_push(ht, hj, size, t, a)


@njit(parallel=True)
def _simulate_batch(params, costs, chances, cdf_values, trace_values, out):
    """Many configurations: row i of `out` from row i of the inputs only."""
    n = params.shape[0]
    no_marks = np.zeros((0, 0, 0), np.int64)
    for i in numba.prange(n):
        p = params[i]
        cdf = cdf_values[p[P_CDF_START]:p[P_CDF_START] + p[P_CDF_LEN]]
        if p[P_ROUTING] == TRACE:
            m = p[P_RANKS] * p[P_BATCH] * p[P_TOPK]
            tr = trace_values[p[P_TRACE]:p[P_TRACE] + m]
        else:
            tr = trace_values[0:0]
        _simulate_dispatch(p, costs[i], chances[i], cdf, tr, out[i], no_marks)
