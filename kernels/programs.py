"""Each AIV's program: Init, then the stores it issues in a phase, in order (paper Section 2.3,
Figure 5). Built in plain passes, so that the egress event loop (egress.egress_phase) only
replays them.

A store's id is its slot in its destination's bucket (layout.Stores), handed out as the program
is built, so that the receivers' references are known before the event loop runs: per copy the
store carrying it and the one a receiver polls, per (destination, source) the store that
signals the counts.
"""

import numpy as np

from .jit import njit, u
from .layout import (B_INIT, C_INIT, C_LOCAL_COPY, C_VCOUNT, DEST_MASK, K_CHECKSUM, K_COPY,
                     K_COUNT, K_FLAG, MARK_INIT, MARK_START, S_COPIES, S_END, S_FIRST, S_HEAD,
                     S_MAX_ACK, S_N, S_OUT, S_PC, S_SIG, S_SW, S_T, SID_SHIFT, SWITCH_BIT)
from .sync import NO_SIGNAL


@njit(inline="always")
def new_store(prog, n, bfill, d, kind, switch):
    """Store n of a program: a store of `kind` to destination d, whose id is the next slot of
    d's bucket (returned). One word per store, so the event loop loads one: the id above
    SID_SHIFT, the new-destination bit (switch: 1 if the AIV's store before it went to another
    die), the destination, the kind in the low two bits."""
    sid = bfill[u(d)]
    bfill[u(d)] = sid + 1
    prog[u(n)] = sid << SID_SHIFT | switch << SWITCH_BIT | d << 2 | kind
    return sid


@njit(inline="always")
def mark_switch(prog, n, d):
    """Program word n gets the new-destination bit if the store before it (to die d) went
    elsewhere: for a program built backwards, whose words learn their predecessor last."""
    if (prog[u(n)] >> 2) & DEST_MASK != d:
        prog[u(n)] |= 1 << SWITCH_BIT


@njit
def init_phase(s, aivs, c, C, loads, searches):
    """Init on die s: every AIV's setup; a token AIV j (AIV C + j) also loads its tokens into
    UBuf (loads[j]) and runs its slice's quaternary search (searches[j] VectorCounts)."""
    t_aiv, bucket, marks, nmarks = aivs.t, aivs.bucket, aivs.marks, aivs.nmarks
    for j in range(loads.shape[0]):
        a = C + j
        cyc = c[C_INIT] + searches[j] * c[C_VCOUNT] + loads[j] * c[C_LOCAL_COPY]
        t_aiv[s, a] = cyc
        bucket[s, a, B_INIT] = cyc
        marks[s, a, MARK_START] = 0
        marks[s, a, MARK_INIT] = cyc
        nmarks[s, a] = MARK_INIT + 1
    for j in range(C):
        t_aiv[s, j] = c[C_INIT]
        bucket[s, j, B_INIT] = c[C_INIT]
        marks[s, j, MARK_START] = 0
        marks[s, j, MARK_INIT] = c[C_INIT]
        nmarks[s, j] = MARK_INIT + 1


@njit(inline="always")
def token_program(prog, n, xd, xs, bfill, copy_ref, copy_signal, owner, seen_dest, cur_sig):
    """A token AIV's copies (destinations xd, receive slots xs), from program word n, each with
    the signal store of the Data-as-Flag variant (sync.Effects.copy_signal): a flag after it,
    or the checksum after the AIV's last copy to its destination. Returns the program's
    (start, end). owner: the AIV's number across the configuration, for seen_dest."""
    if copy_signal == K_CHECKSUM:
        # built backwards, so that each copy meets the checksum that follows its AIV's last copy
        # to the same destination before the copy itself: filled from the end of a region of
        # two words per copy, the program starts where the filling stopped
        n += 2 * xd.shape[0]
        start = n
        for x in range(xd.shape[0] - 1, -1, -1):
            d = np.int64(xd[u(x)])
            if start < n:   # the store after this copy (and its checksum) in program order
                mark_switch(prog, start, d)
            if seen_dest[u(d)] != owner:
                seen_dest[u(d)] = owner
                start -= 1
                cur_sig[u(d)] = new_store(prog, start, bfill, d, K_CHECKSUM, 0)
            start -= 1
            sid = new_store(prog, start, bfill, d, K_COPY, 0)
            g = u(xs[u(x)])
            copy_ref[g, 0] = sid
            copy_ref[g, 1] = cur_sig[u(d)]
        if start < n:
            mark_switch(prog, start, -1)      # the first store: no store before it
        return start, n
    start = n
    last = -1
    for x in range(xd.shape[0]):
        d = np.int64(xd[u(x)])
        sid = new_store(prog, n, bfill, d, K_COPY, np.int64(d != last))
        last = d
        n += 1
        g = u(xs[u(x)])
        copy_ref[g, 0] = sid
        if copy_signal == K_FLAG:
            sid = new_store(prog, n, bfill, d, K_FLAG, 0)
            n += 1
        copy_ref[g, 1] = sid
    return start, n


@njit(inline="always")
def count_program(prog, n, s, d_lo, d_hi, R, bfill, count_signal, signal):
    """A counting AIV's count messages to dies d_lo .. d_hi (ubep's CalCumSum group; every AIV
    in bsp's SendFlag & Count), each followed by the variant's signal store if it has one.
    Returns the program's end."""
    for d in range(d_lo, d_hi):
        sid = new_store(prog, n, bfill, d, K_COUNT, 1)   # each to another die
        n += 1
        if signal != NO_SIGNAL:
            sid = new_store(prog, n, bfill, d, signal, 0)
            n += 1
        count_signal[u(d * R + s)] = sid
    return n


@njit
def phase_programs(s, phase, aivs, C, sched, stores, fx, prog, st, seen_dest, cur_sig):
    """Every AIV's program for one phase of die s, and its event-loop state (st) reset: phase 0
    sends the copies from the token AIVs (AIVs C on) and, in ubep, the counts from the
    CalCumSum group (AIVs below C); bsp's phase 1 is SendFlag & Count on every AIV."""
    t_aiv = aivs.t
    A = t_aiv.shape[1]
    R = t_aiv.shape[0]
    NS = A - C
    M = sched.xdest.shape[0] // R
    aoff = sched.aoff[s * (NS + 1):(s + 1) * (NS + 1)]
    xd = sched.xdest[s * M:(s + 1) * M]
    xs = sched.xslot[s * M:(s + 1) * M]
    n_count = C if phase == 0 else A    # the AIVs that count, each for a share of the dies
    n = 0
    for a in range(A):
        start = n
        if phase == 0 and a >= C:
            lo, hi = aoff[a - C], aoff[a - C + 1]
            start, n = token_program(prog, n, xd[lo:hi], xs[lo:hi], stores.bfill, stores.copy_ref,
                                     fx.copy_signal, s * A + a, seen_dest, cur_sig)
        else:
            n = count_program(prog, n, s, a * R // n_count, (a + 1) * R // n_count, R,
                              stores.bfill, stores.count_signal, fx.count_signal)
        st[a, S_T] = t_aiv[s, a]
        st[a, S_SIG] = st[a, S_SW] = 0
        st[a, S_HEAD] = st[a, S_N] = st[a, S_OUT] = 0
        st[a, S_PC] = start
        st[a, S_END] = n
        if phase == 0:
            st[a, S_MAX_ACK] = 0
            st[a, S_FIRST] = -1
            st[a, S_COPIES] = 0
