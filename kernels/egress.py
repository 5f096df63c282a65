"""The egress side of a die (paper Section 2.3): its AIVs replay their programs, each store
occupying its AIV for its issue cost and the die's egress port for its transfer, an AIV holding
at most `blocks_in_flight` blocks in flight. Stores to the die itself skip the ports.
"""

import numpy as np

from .jit import njit, u
from .layout import (AIV_BITS, B_SEND, B_SYNC, C_COPY_BLOCKS, C_COPY_EGRESS, C_COPY_ISSUE,
                     C_COPY_VERIFY, C_COUNT_BLOCKS, C_COUNT_CHAIN, C_COUNT_EGRESS, C_COUNT_ISSUE,
                     C_DEST_SWITCH, C_QUANT, C_RETURN_BLOCKS, C_RETURN_EGRESS, C_RETURN_ISSUE,
                     C_RETURN_LOAD, C_RETURN_VERIFY, C_SIGNAL_EGRESS, C_SIGNAL_ISSUE, C_VCOUNT,
                     DEST_MASK,
                     K_CHECKSUM, K_COPY, K_COUNT, K_FLAG, KC_BLOCKS, KC_EGRESS, KC_FENCE,
                     KC_ISSUE, KC_PRE, KC_SWITCH, KC_WIDTH, LOCAL, S_COPIES, S_END, S_FIRST,
                     S_HEAD, S_LAST_ACK, S_MAX_ACK, S_N, S_OUT, S_PC, S_SIG, S_SW, S_T, SID_SHIFT,
                     SWITCH_BIT)


@njit(inline="always")
def _set_kind(kc, kind, pre, issue, blocks, egress, fence, switch):
    """A kind's row: pre-work cycles, issue cycles, blocks, egress port cycles, whether it
    waits behind a fence, and the pre-work a store with the new-destination bit adds."""
    row = kind * KC_WIDTH
    kc[row + KC_PRE] = pre
    kc[row + KC_ISSUE] = issue
    kc[row + KC_BLOCKS] = blocks
    kc[row + KC_EGRESS] = egress
    kc[row + KC_FENCE] = fence
    kc[row + KC_SWITCH] = switch


@njit
def kind_table(c, fx, EL):
    """The per-kind costs of a store, read by the event loop (layout.KC_*): a copy's (with
    dc's marker work, fx: sync.Effects), a count message's (per expert of the destination a
    VectorCount and the vector chain that makes it a count), a signal's (one block; a flag
    behind sw's fence); any store to a new destination first loads its window address."""
    kc = np.zeros(4 * KC_WIDTH, np.int64)
    switch = c[C_DEST_SWITCH]
    _set_kind(kc, K_COPY, fx.copy_marker * c[C_COPY_VERIFY], c[C_COPY_ISSUE], c[C_COPY_BLOCKS],
              c[C_COPY_EGRESS], 0, switch)
    _set_kind(kc, K_COUNT, EL * (c[C_VCOUNT] + c[C_COUNT_CHAIN]), c[C_COUNT_ISSUE],
              c[C_COUNT_BLOCKS], c[C_COUNT_EGRESS], 0, switch)
    _set_kind(kc, K_FLAG, 0, c[C_SIGNAL_ISSUE], 1, c[C_SIGNAL_EGRESS], fx.fence, switch)
    _set_kind(kc, K_CHECKSUM, 0, c[C_SIGNAL_ISSUE], 1, c[C_SIGNAL_EGRESS], 0, switch)
    return kc


@njit
def return_kinds(c, fx, ubep):
    """The kind table of combine's stores: a returned copy's (its read into UBuf, its
    quantization under int8 and dc's marker work before it; its own blocks), the signals'
    (under ubep a flag behind sw's fence; bsp's statuses are flags whose fence is their AIV's,
    sync.fence_all, once before them all); any store to a new destination first loads its
    window address."""
    kc = np.zeros(4 * KC_WIDTH, np.int64)
    switch = c[C_DEST_SWITCH]
    _set_kind(kc, K_COPY, c[C_RETURN_LOAD] + c[C_QUANT] + fx.copy_marker * c[C_RETURN_VERIFY],
              c[C_RETURN_ISSUE], c[C_RETURN_BLOCKS], c[C_RETURN_EGRESS], 0, switch)
    _set_kind(kc, K_FLAG, 0, c[C_SIGNAL_ISSUE], 1, c[C_SIGNAL_EGRESS], fx.fence if ubep else 0,
              switch)
    _set_kind(kc, K_CHECKSUM, 0, c[C_SIGNAL_ISSUE], 1, c[C_SIGNAL_EGRESS], 0, switch)
    return kc


@njit(inline="always")
def ring_push(ring, head, size, key):
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
def egress_phase(s, egress, st, prog, fifo, kc, cap, st_arr, st_vis, lat_row, lat_local, queue,
                 split):
    """One phase of die s: its AIVs replay their programs (prog[pc]: see programs.new_store),
    the egress port serving their requests in (time, AIV) order. st: the AIVs' state (S_*),
    fifo: their stores in flight, kc: the kind table (kind_table), cap: blocks in flight,
    st_arr, st_vis: layout.Stores' arr and vis, lat_row: the hop latency to each destination.
    AIVs below `split` are ubep's CalCumSum group in the sending phase (else split is 0).
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
        # AIV a's next store: pre-work (a new destination's address too), fence, in-flight
        # credits, issue
        word = prog[u(ip)]
        kind = word & 3
        nb = kc[u(kind * KC_WIDTH + KC_BLOCKS)]
        t0 = st[u(a), S_T]
        t = t0 + kc[u(kind * KC_WIDTH + KC_PRE)] + \
            ((word >> SWITCH_BIT) & 1) * kc[u(kind * KC_WIDTH + KC_SWITCH)]
        if kc[u(kind * KC_WIDTH + KC_FENCE)]:
            # a fence (sw's flag): the store waits until every earlier store completed
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
            h0 = ring_push(ring0, h0, s0, key)
            s0 += 1
        else:
            h1 = ring_push(ring1, h1, s1, key)
            s1 += 1
    return egress


@njit(inline="always")
def start_phase(s, phase, t_aiv, st):
    """Each AIV's event-loop state (st) at the start of a phase of die s: its clock, nothing in
    flight; in the first phase, no store acked and no copy sent yet."""
    for a in range(st.shape[0]):
        st[a, S_T] = t_aiv[s, a]
        st[a, S_SIG] = st[a, S_SW] = 0
        st[a, S_HEAD] = st[a, S_N] = st[a, S_OUT] = 0
        if phase == 0:
            st[a, S_MAX_ACK] = 0
            st[a, S_FIRST] = -1
            st[a, S_COPIES] = 0


@njit(inline="always")
def account_phase(s, phase, st, C, count_bucket, t_aiv, bucket, wait, first_copy,
                  last_copy_ack, marks, nmarks):
    """The phase's time per AIV of die s (layout.Aivs' arrays), from its event-loop state: its
    signals' (flags and checksums with their waits) as sync, the rest as its main work's
    bucket, sending copies (token AIVs in phase 0) or counting (count_bucket: ubep's CalCumSum,
    bsp's sync). Returns the copy stores the phase sent; each AIV marks the phase's end."""
    sent = 0
    for a in range(t_aiv.shape[1]):
        main = B_SEND if (phase == 0 and a >= C) else count_bucket
        bucket[s, a, main] += st[a, S_T] - t_aiv[s, a] - st[a, S_SIG]
        bucket[s, a, B_SYNC] += st[a, S_SIG]
        wait[s, a] += st[a, S_SW]
        t_aiv[s, a] = st[a, S_T]
        if phase == 0:
            first_copy[s, a] = st[a, S_FIRST]
            last_copy_ack[s, a] = st[a, S_LAST_ACK]
            sent += st[a, S_COPIES]
        marks[s, a, nmarks[s, a]] = t_aiv[s, a]
        nmarks[s, a] += 1
    return sent
