"""Hierarchical token-level scheduling (paper Section 3.3): each die's token copies dealt to
its token AIVs, and what each AIV's Init costs to find its share.

Every schedule orders a die's copies by a key: the place of their expert in the die's walk of
the destination experts (`walk`), then the copy index. The AIV lists then follow from the
cumulative counts of the keys (VectorCount(ids < r), Algorithm 1's primitive):
- `expert_block_slices`: each AIV owns a block of experts (CANN EP's hot spots);
- `balanced_slices`: equal contiguous slices of the key order, topology-blind ("UBEP w/o
  mapping"); each AIV finds its slice's first copy by the quaternary search;
- `homogenized_deal`: latency homogenization, the key order (farthest hop class first) dealt
  round-robin, a logical matrix transposition, so every AIV gets a balanced mix of hop classes;
- token order (CANN's own kernel, `SplitToCore` in ops-transformer's moe_distribute_dispatch.h):
  equal contiguous slices of the copies in (token, k) order (combine: in receive order), each
  AIV's destinations as the routing drew them; no search (a slice's start is arithmetic).
Nothing here reads `sync`, so a batch computes one schedule for a configuration's sync variants
(dispatch.same_schedule).
"""

import numpy as np

from .jit import njit, u
from .routing import most_copies
from .protocols import jit_chosen, mechanisms
from .layout import (BALANCED, C_NPU_DIES, C_RAILS, C_TIER1_DIES, EXPERT_BLOCK, HOMOGENIZED, N_HOPS,
                     N_TIERS, P_CORES, P_CUMSUM, P_EXPERTS, P_PROTOCOL, P_RANKS, P_SCHEDULE,
                     P_TOPK, RECEIVE_GROUP, TOKEN_ORDER, Schedule)


@njit
def hop_classes(c, R):
    """hops[s * R + d]: the hop class from die s to die d (layout.HOP_CLASSES): local, the
    other die of the NPU, then one more per switch tier climbed (paper Table 2): the smallest
    domain holding both dies, of the NPU and each tier of the profile's tier_sizes. On rails
    (c's rails = r > 0) a domain above the first tier holds two dies only on the same rail,
    their index in their first-tier domain the same (s mod r = d mod r)."""
    sizes = np.empty(N_TIERS + 1, np.int64)   # the domains' sizes, the NPU's first
    levels = 1
    sizes[0] = c[C_NPU_DIES]
    for k in range(N_TIERS):
        if c[C_TIER1_DIES + k]:
            sizes[levels] = c[C_TIER1_DIES + k]
            levels += 1
    rails = c[C_RAILS]
    hops = np.empty(R * R, np.int8)
    for s in range(R):
        for d in range(R):
            h = 0
            if d != s:
                h = levels + 1
                for x in range(levels):
                    if s // sizes[x] == d // sizes[x] and \
                            (x < 2 or rails == 0 or s % rails == d % rails):
                        h = x + 1
                        break
            hops[s * R + d] = h
    return hops


@njit
def walk(dkey, hops, s, homogenized, rotated, EL, classes):
    """The order in which die s walks the destination experts, as a key per destination die:
    an expert e's key is dkey[e's die] + e (a die's experts are walked together, so this is
    set per die in O(ranks) rather than per expert). hops: hop_classes' table; classes:
    scratch [3, N_HOPS + 1]. (Arrays are passed whole, with offsets, rather than sliced: a
    slice costs a reference count, and the stages run per die.)

    Rotated: from the next die on, wrapping round, so that dies do not all start on the same
    destination. Not rotated (dispatch's expert_block): every die walks from die 0, so AIV j
    of every die owns the same block of experts and writes to the same destination at once:
    CANN EP's hot spots (Figure 9; its expert split, SplitExpertNumToCore, before its stagger).
    Homogenized puts the farthest hop class first and walks each class the same way, its dies
    in index order from the (s + 1)-th on: walking the whole die order instead, every die of a
    switch domain would meet the next domain's dies in the same order at the same time, an
    incast on each in turn."""
    R = dkey.shape[0]
    hop_row = s * R                     # die s's hop classes: hops[hop_row + d]
    if homogenized:
        START, SIZE, POS = 0, 1, 2      # classes' rows
        for h in range(N_HOPS + 1):     # dies per class, farthest first, then starts
            classes[START, h] = 0
        for d in range(R):
            classes[START, N_HOPS - hops[hop_row + d]] += 1
        for h in range(N_HOPS):
            size = classes[START, h + 1]
            classes[SIZE, h] = size
            classes[START, h + 1] += classes[START, h]
            # the slot of the class's first die: the walk starts at its (s + 1)-th
            classes[POS, h] = -(s + 1) % size if size else 0
        for d in range(R):
            # slots count up, wrapping round: no division per die (a modulo per die was 2% of
            # the whole sample, paired)
            h = N_HOPS - 1 - hops[hop_row + d]
            slot = classes[POS, h]
            classes[POS, h] = slot + 1 if slot + 1 < classes[SIZE, h] else 0
            dkey[d] = (classes[START, h] + slot - d) * EL
    else:
        first = s + 1 if rotated else 0
        for dd in range(R):
            d = first + dd
            if d >= R:
                d -= R
            dkey[d] = (dd - d) * EL


@njit
def count_keys(experts_of, base, die_of, dkey, key_c, cnt, fill):
    """Each copy's key (key_c; the die's copies are experts_of's from base on), and cnt[r] =
    copies with key < r (VectorCount(ids < r)); fill starts as a copy of cnt, to hand out
    positions in key order."""
    for r in range(cnt.shape[0]):
        cnt[r] = 0
    for i in range(key_c.shape[0]):
        e = experts_of[u(base + i)]
        r = dkey[u(die_of[u(e)])] + e
        key_c[u(i)] = r
        cnt[u(r + 1)] += 1
    # The running sum is kept in a register: through memory, each step would wait for the
    # previous one's store, and this pass runs over every expert on every die (ranks x experts
    # per configuration)
    fill[0] = 0
    acc = 0
    for e in range(1, cnt.shape[0]):
        acc += cnt[e]
        cnt[e] = acc
        fill[e] = acc


@njit
def expert_block_slices(aoff, cnt, NS, E):
    """AIV j owns the keys r with r * NS // E == j: its list starts at the first such r."""
    aoff[0] = 0
    for j in range(1, NS + 1):
        aoff[j] = cnt[(j * E + NS - 1) // NS]


@njit
def balanced_slices(aoff, M, NS):
    """Equal contiguous slices of the key order."""
    for j in range(NS + 1):
        aoff[j] = j * M // NS


@njit
def homogenized_deal(aoff, place, M, NS):
    """The key order written row by row into a matrix of NS columns, AIV j reading column j:
    key position q goes to place[q] of the AIV lists, each AIV within one copy of every hop
    class's share (v_jh <= ceil(V_h / n))."""
    x = 0
    for j in range(NS):
        aoff[j] = x
        q = j
        while q < M:
            place[q] = x
            x += 1
            q += NS
    aoff[NS] = x


@njit
def deal_copies(experts_of, base, key_c, fill, place, sched, die_of, token_of, rcur, key_at,
                xdest, xslot, xcopy, xtoken):
    """Each copy of a die (experts_of's from base on) straight to its place in the AIV lists
    (xdest, xslot, xcopy from base on): its destination, its slot in the receive order, its
    index at the die; and its token; key_at[q]: the key at position q of the key order."""
    for i in range(key_c.shape[0]):
        r = key_c[u(i)]
        q = fill[u(r)]
        fill[u(r)] = q + 1
        key_at[u(q)] = r
        x = u(place_of(sched, place, q, i))
        e = experts_of[u(base + i)]
        xdest[u(base) + x] = die_of[u(e)]
        xslot[u(base) + x] = rcur[u(e)]
        xcopy[u(base) + x] = i
        rcur[u(e)] += 1
        xtoken[x] = token_of[u(i)]


@njit(inline="always")
def quaternary_search(cum, target, n_experts):
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
def qsteps_table(n_experts):
    """Steps of the quaternary search by the expert it ends on. Each comparison, target <
    cum[p], holds exactly when pivot p lies past that expert (cum is nondecreasing), so the
    search's path, and its step count, depend on that expert alone: one table per
    configuration replaces a search per AIV and die. It is built by the same search, on counts
    for which the target is its own expert (cum[p] = p)."""
    cum = np.arange(n_experts + 1)
    table = np.empty(n_experts, np.int64)
    for e in range(n_experts):
        table[e] = quaternary_search(cum, e, n_experts)[1]
    return table


@njit(inline="always")
def slices(sched, aoff, cnt, place, n, NS, n_keys, aoff_all, at):
    """A die's n copies in key order (cnt: count_keys') dealt to its NS sending AIVs by the
    schedule: AIV j's at aoff[j] .. aoff[j + 1] of its lists, in key order, except that
    homogenized deals the key order round-robin (place) and token order deals the copies in
    their own order; aoff also copied to aoff_all from `at`. n_keys: the keys (experts;
    destination dies in combine)."""
    if sched == EXPERT_BLOCK:
        expert_block_slices(aoff, cnt, NS, n_keys)
    elif sched == BALANCED or sched == TOKEN_ORDER:
        balanced_slices(aoff, n, NS)
    else:
        homogenized_deal(aoff, place, n, NS)
    for j in range(NS + 1):
        aoff_all[at + j] = aoff[j]


@njit(inline="always")
def hop_counts(hops, s, dkey, cnt, EL, copies_hop, into):
    """Die s's copies per destination (cnt: count_keys' over its walk's keys, EL keys a die,
    consecutive), added to copies_hop (per hop class) and into (remote copies per destination
    die), for the hop counts and the latency bound. Returns its copies to itself."""
    R = dkey.shape[0]
    n_local = 0
    for d in range(R):
        h = hops[s * R + d]
        r = dkey[d] + d * EL
        n_to = cnt[r + EL] - cnt[r]
        copies_hop[h] += n_to
        if h:
            into[d] += n_to
        else:
            n_local = n_to
    return n_local


@njit(inline="always")
def searched(sched):
    """Whether a sending AIV finds its slice by the quaternary search (balanced, homogenized)."""
    return sched == BALANCED or sched == HOMOGENIZED


@njit(inline="always")
def place_of(sched, place, q, i):
    """Where the copy at key order position q (its index i) goes in the AIV lists: dealt
    round-robin (homogenized), in its own order (token order), else in key order."""
    if sched == HOMOGENIZED:
        return place[u(q)]
    if sched == TOKEN_ORDER:
        return i
    return q


@njit(inline="always")
def slice_search(aoff, key_at, qsteps_of, sched, j):
    """Sending AIV j's search (balanced, homogenized) for its first copy's position in key
    order, which ends on that copy's key, and the VectorCount before its first step:
    (VectorCounts, search steps), both 0 for expert_block, token order or an empty list."""
    lo, hi = aoff[j], aoff[j + 1]
    if not searched(sched) or hi <= lo:
        return 0, 0
    steps = qsteps_of[u(key_at[u(lo if sched == BALANCED else j)])]
    return steps + 1, steps


@njit
def init_work(aoff, xtoken, key_at, qsteps_of, sched, loads, searches, at):
    """Each token AIV's Init on one die (AIV j's at loads[at + j], searches[at + j]): a token
    load into UBuf per run of its copies of one token, and slice_search. Returns the longest
    search."""
    qsteps_max = 0
    for j in range(aoff.shape[0] - 1):
        lo, hi = aoff[j], aoff[j + 1]
        n = 0
        for x in range(lo, hi):
            if x == lo or xtoken[u(x)] != xtoken[u(x - 1)]:
                n += 1
        loads[at + j] = n
        searches[at + j], steps = slice_search(aoff, key_at, qsteps_of, sched, j)
        qsteps_max = max(qsteps_max, steps)
    return qsteps_max


@njit(inline="always")
def receive_counts(experts_of, E):
    """Where each expert's received copies start in receive order (expert, source, copy
    index), ecnt[e], ecnt[E] being every copy: a die's received copies are its experts'."""
    ecnt = np.zeros(E + 1, np.int64)
    for g in range(experts_of.shape[0]):
        ecnt[experts_of[g] + 1] += 1
    for e in range(E):
        ecnt[e + 1] += ecnt[e]
    return ecnt


@njit(inline="always")
def busiest(ecnt, R):
    """The most token copies routed to one die's experts (ecnt: receive_counts)."""
    EL = (ecnt.shape[0] - 1) // R
    most = 0
    for d in range(R):
        most = max(most, ecnt[(d + 1) * EL] - ecnt[d * EL])
    return most


@njit
def schedule(p, c, experts_of, cfirst):
    """Each die's copies (experts_of: routing.route, die s's from cfirst[s]) dealt to its
    token AIVs: the stage's result, layout.Schedule. Of the costs it reads only the hop
    classes' die counts."""
    R, K, E, A = p[P_RANKS], p[P_TOPK], p[P_EXPERTS], p[P_CORES]
    m = mechanisms(p[P_PROTOCOL])
    sched = jit_chosen(m.deal, p[P_SCHEDULE])
    NS = A - (p[P_CUMSUM] if m.receive == RECEIVE_GROUP else 0)
    M = most_copies(cfirst)             # the per-die scratch's size
    EL = E // R
    # tables, so that the per-copy passes divide nothing: each expert's die, each copy's token
    die_of = np.empty(E, np.int64)
    for e in range(E):
        die_of[e] = e // EL
    token_of = np.empty(M, np.int64)
    for i in range(M):
        token_of[i] = i // K

    ecnt = receive_counts(experts_of, E)
    rcur = ecnt[:E].copy()

    hops = hop_classes(c, R)
    N = cfirst[R]
    xdest = np.empty(N, np.int32)
    xslot = np.empty(N, np.int32)
    xcopy = np.empty(N, np.int32)
    aoff_all = np.empty(R * (NS + 1), np.int64)
    loads = np.empty(R * NS, np.int64)
    searches = np.empty(R * NS, np.int64)
    copies_hop = np.zeros(N_HOPS, np.int64)
    into = np.zeros(R, np.int64)       # remote copies into each die
    max_out = 0
    qsteps_max = 0

    # Per-die scratch.
    aoff = np.empty(NS + 1, np.int64)  # where each token AIV's list starts
    place = np.empty(M, np.int64)
    key_at = np.empty(M, np.int64)     # per position in key order: the copy's key
    xtoken = np.empty(M, np.int64)     # per position of the AIV lists: the copy's token
    qsteps_of = qsteps_table(E) if searched(sched) else np.zeros(0, np.int64)
    cnt = np.zeros(E + 1, np.int64)
    fill = np.zeros(E + 1, np.int64)
    dkey = np.empty(R, np.int64)       # per die: its experts' key minus the expert id
    key_c = np.empty(M, np.int64)      # per copy: its expert's key
    classes = np.zeros((3, N_HOPS + 1), np.int64)

    for s in range(R):
        base = cfirst[s]
        n = cfirst[s + 1] - base
        walk(dkey, hops, s, sched == HOMOGENIZED, sched != EXPERT_BLOCK, EL, classes)
        count_keys(experts_of, base, die_of, dkey, key_c[:n], cnt, fill)
        slices(sched, aoff, cnt, place, n, NS, E, aoff_all, s * (NS + 1))
        deal_copies(experts_of, base, key_c[:n], fill, place, sched, die_of, token_of, rcur,
                    key_at, xdest, xslot, xcopy, xtoken)
        qsteps_max = max(qsteps_max, init_work(aoff, xtoken, key_at, qsteps_of, sched, loads,
                                               searches, s * NS))
        max_out = max(max_out, n - hop_counts(hops, s, dkey, cnt, EL, copies_hop, into))
    return Schedule(cfirst, ecnt, hops, xdest, xslot, xcopy, aoff_all, loads, searches,
                    copies_hop, into.max(), max_out, qsteps_max)


@njit
def receive_order(experts_of, ecnt, cfirst):
    """Per received copy x, in receive order: the dispatch copy g it is (copy g - cfirst[s]
    of source die s); and its source s, the die combine returns it to."""
    n = experts_of.shape[0]
    rcur = ecnt[:ecnt.shape[0] - 1].copy()
    ref_of = np.empty(n, np.int32)
    src_of = np.empty(n, np.int32)
    for s in range(cfirst.shape[0] - 1):
        for g in range(cfirst[s], cfirst[s + 1]):
            e = experts_of[g]
            x = rcur[e]
            rcur[e] = x + 1
            ref_of[x] = g
            src_of[x] = s
    return ref_of, src_of


@njit
def deal_returns(src_of, ref_of, base, key_c, fill, place, sched, key_at, xdest, xslot):
    """Each returned copy of a die (received copies base on) straight to its place in the AIV
    lists (from base on): its destination and the dispatch copy it is (its slot at the
    source); key_at[q]: the key at position q of the key order."""
    for i in range(key_c.shape[0]):
        r = key_c[u(i)]
        q = fill[u(r)]
        fill[u(r)] = q + 1
        key_at[u(q)] = r
        x = u(base + place_of(sched, place, q, i))
        xdest[x] = src_of[u(base + i)]
        xslot[x] = ref_of[u(base + i)]


@njit
def return_schedule(p, c, experts_of, cfirst):
    """Combine's schedule (docs/model.md, "Combine"), a layout.Schedule: each die's returned
    copies (the copies it received, in receive order from ecnt[die's first expert]) dealt to
    all its AIVs, keyed by their destination's place in the die's walk, a die being its own
    key (one expert per destination); xslot holds the dispatch copy each one is. The deal is
    the protocol's (protocols.RETURN_DEAL): `schedule`'s, or fixed (CANN's V1 splits by
    destination rank: expert_block on the plain walk)."""
    R, E, A = p[P_RANKS], p[P_EXPERTS], p[P_CORES]
    sched = jit_chosen(mechanisms(p[P_PROTOCOL]).return_deal, p[P_SCHEDULE])
    EL = E // R
    ecnt = receive_counts(experts_of, E)
    ref_of, src_of = receive_order(experts_of, ecnt, cfirst)
    hops = hop_classes(c, R)
    xdest = np.empty(cfirst[R], np.int32)
    xslot = np.empty(cfirst[R], np.int32)
    aoff_all = np.empty(R * (A + 1), np.int64)
    searches = np.empty(R * A, np.int64)
    copies_hop = np.zeros(N_HOPS, np.int64)
    into = np.zeros(R, np.int64)
    max_out = 0
    qsteps_max = 0
    most = busiest(ecnt, R)             # the most copies a die received
    die_of = np.arange(R)               # a destination die is its own expert
    aoff = np.empty(A + 1, np.int64)
    place = np.empty(most, np.int64)
    key_at = np.empty(most, np.int64)
    key_c = np.empty(most, np.int64)
    qsteps_of = qsteps_table(R) if searched(sched) else np.zeros(0, np.int64)
    cnt = np.zeros(R + 1, np.int64)
    fill = np.zeros(R + 1, np.int64)
    dkey = np.empty(R, np.int64)
    classes = np.zeros((3, N_HOPS + 1), np.int64)
    for d in range(R):
        base = ecnt[d * EL]
        n = ecnt[(d + 1) * EL] - base
        walk(dkey, hops, d, sched == HOMOGENIZED, True, 1, classes)
        count_keys(src_of, base, die_of, dkey, key_c[:n], cnt, fill)
        slices(sched, aoff, cnt, place, n, A, R, aoff_all, d * (A + 1))
        deal_returns(src_of, ref_of, base, key_c[:n], fill, place, sched, key_at, xdest, xslot)
        for j in range(A):
            searches[d * A + j], steps = slice_search(aoff, key_at, qsteps_of, sched, j)
            qsteps_max = max(qsteps_max, steps)
        max_out = max(max_out, n - hop_counts(hops, d, dkey, cnt, 1, copies_hop, into))
    return Schedule(cfirst, ecnt, hops, xdest, xslot, np.zeros(0, np.int32), aoff_all,
                    np.zeros(R * A, np.int64), searches, copies_hop, into.max(), max_out,
                    qsteps_max)
