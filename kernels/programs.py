"""Each AIV's program: Init, then the stores it issues in a phase, in order (paper Section 2.3,
Figure 5). Built in plain passes, every die's before any store moves, so that the fabric's event
loop (fabric.fabric) only replays them. A phase's programs on a die are regions of one array,
AIV a's from bounds[a, 0] to bounds[a, 1].

A store's id is its slot in its destination's bucket (layout.Stores), handed out as the program
is built, so that the receivers' references are known before the event loop runs: per copy the
store carrying it and the one a receiver polls, per (destination, source) the store that
signals the counts.
"""

import numpy as np

from . import rng
from .jit import njit, u
from .layout import (B_INIT, COUNT_CHAIN_OPS, DEST_MASK, INT32, K_CHECKSUM, K_COPY, K_COUNT,
                     K_FLAG, MARK_INIT, MARK_START, N_BUCKETS, N_PHASES, P_SEED, P_WKEY,
                     SID_SHIFT, SWITCH_BIT, Cores)
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


@njit(inline="always")
def new_cores(R, A, n_marks):
    """Every AIV's state before Init (layout.Cores), R dies of A AIVs: no time yet in any
    bucket or waiting, no copy issued or acknowledged (-1), room for n_marks phase marks."""
    return Cores(np.zeros((R, A), np.int64), np.zeros((R, A, N_BUCKETS), np.int64),
                 np.zeros((R, A), np.int64), np.full((R, A), -1, np.int64),
                 np.full((R, A), -1, np.int64), np.empty((R, A, n_marks), np.int64),
                 np.empty((R, A), np.int64))


@njit
def launch_starts(p, skew, R):
    """When each die's kernel starts, in cycles from the first launch: die d at a uniform draw
    in [0, skew) of its own stream (rng.DOMAIN_LAUNCH), less the earliest die's, so that one
    die starts at 0 (skew 0: every die at 0). Ranks launched without a barrier between them
    (DeepEP's test loop) do not start together, and a receiver waits for its last sender."""
    starts = np.zeros(R, np.int64)
    if skew == 0:
        return starts
    first = skew
    for d in range(R):
        starts[d] = np.int64(rng.unit(rng.stream(p[P_SEED], p[P_WKEY], d, rng.DOMAIN_LAUNCH), 0)
                             * skew)
        first = min(first, starts[d])
    for d in range(R):
        starts[d] -= first
    return starts


def cores_bytes(R, A, n_marks):
    """What new_cores allocates, and a driver's program bounds beside it (pb: N_PHASES pairs
    per AIV), as numbers or numpy columns (the host's memory estimate)."""
    return 8 * R * A * (5 + N_BUCKETS + n_marks + 2 * N_PHASES)


@njit(inline="always")
def init_phase(cores, setup, load, vcount, C, loads, searches, starts):
    """Init on every die, die s from starts[s]: every AIV's setup (`setup` cycles); sending AIV
    j of die s (AIV C + j: dispatch's token group, every AIV in combine) also loads its tokens
    into UBuf (loads[s * NS + j] of them, `load` cycles each) and runs its slice's quaternary
    search (searches[s * NS + j] VectorCounts of `vcount` cycles)."""
    t_core, bucket, marks, nmarks = cores.t, cores.bucket, cores.marks, cores.nmarks
    R, A = t_core.shape
    NS = A - C
    for s in range(R):
        for a in range(A):
            cyc = setup
            if a >= C:
                x = s * NS + a - C
                cyc += searches[x] * vcount + loads[x] * load
            t_core[s, a] = starts[s] + cyc
            bucket[s, a, B_INIT] = cyc
            marks[s, a, MARK_START] = starts[s]
            marks[s, a, MARK_INIT] = starts[s] + cyc
            nmarks[s, a] = MARK_INIT + 1


@njit(inline="always")
def count_cycles(fixed, op, vector_bytes, n):
    """CANN's CalTokenSendExpertCnt over n expert ids: its fixed cycles (count_chain_cycles)
    and five vector instructions over n int32 (Duplicate, Sub, Abs, Mins, ReduceSum)."""
    return fixed + COUNT_CHAIN_OPS * (op + (INT32 * n + vector_bytes - 1) // vector_bytes)


@njit(inline="always")
def token_programs(s, prog, pre, n, bounds, C, aoff, xdest, xslot, xcopy, count, bfill,
                   copy_ref, copy_signal, seen_dest, cur_sig, base):
    """The sending AIVs' programs on die s (AIVs C on: dispatch's token group, every AIV in
    combine; their AIV lists: layout.Schedule's aoff, xdest, xslot, xcopy, die s's from base
    on), from program word n: each copy with the signal store of the Data-as-Flag variant
    (sync.Effects.copy_signal), a flag after it, or the checksum after the AIV's last copy to
    its destination. copy_ref[slot]: the stores carrying and signalling the copy of that slot
    at the receiver. pre[word]: a store's own work before it, beside its kind's: with `count`
    = (fixed cycles, vector_op_cycles, vector_bytes), a tuple, CANN's count of a copy's
    predecessors to its expert (the copies before it at its die, if any); else nothing. Sets
    each AIV's program bounds; returns where the programs end. (The AIVs' loop is inside,
    called once per die: every array a function is handed, and every slice, costs a reference
    count up and down.)"""
    A = bounds.shape[0]
    NS = A - C
    counted = count[0] >= 0     # xcopy is read only then: combine's schedules hold none
    for j in range(NS):
        a = C + j
        lo = base + aoff[s * (NS + 1) + j]
        hi = base + aoff[s * (NS + 1) + j + 1]
        if copy_signal == K_CHECKSUM:
            # built backwards, so that each copy meets the checksum that follows its AIV's
            # last copy to the same destination before the copy itself: filled from the end of
            # a region of two words per copy, the program starts where the filling stopped
            n += 2 * (hi - lo)
            start = n
            owner = s * A + a
            for x in range(hi - 1, lo - 1, -1):
                d = np.int64(xdest[u(x)])
                if start < n:   # the store after this copy (and its checksum) in program order
                    mark_switch(prog, start, d)
                if seen_dest[u(d)] != owner:
                    seen_dest[u(d)] = owner
                    start -= 1
                    cur_sig[u(d)] = new_store(prog, start, bfill, d, K_CHECKSUM, 0)
                    pre[u(start)] = 0
                start -= 1
                sid = new_store(prog, start, bfill, d, K_COPY, 0)
                pre[u(start)] = copy_work(count, xcopy[u(x)]) if counted else 0
                g = u(xslot[u(x)])
                copy_ref[g, 0] = sid
                copy_ref[g, 1] = cur_sig[u(d)]
            if start < n:
                mark_switch(prog, start, -1)      # the first store: no store before it
        else:
            start = n
            last = -1
            for x in range(lo, hi):
                d = np.int64(xdest[u(x)])
                sid = new_store(prog, n, bfill, d, K_COPY, np.int64(d != last))
                pre[u(n)] = copy_work(count, xcopy[u(x)]) if counted else 0
                last = d
                n += 1
                g = u(xslot[u(x)])
                copy_ref[g, 0] = sid
                if copy_signal == K_FLAG:
                    sid = new_store(prog, n, bfill, d, K_FLAG, 0)
                    pre[u(n)] = 0
                    n += 1
                copy_ref[g, 1] = sid
        bounds[a, 0] = start
        bounds[a, 1] = n
    return n


@njit(inline="always")
def copy_work(count, i):
    """The work of a copy beyond its kind's, i copies before it at its die to its expert (its
    xcopy): count = (fixed, op, vector_bytes) of CANN's count of its predecessors (fixed >= 0).
    Scalars only: an array handed to an inlined function with a branch costs a reference count
    up and down on every copy (bench/README.md)."""
    if i <= 0:
        return 0
    return count_cycles(count[0], count[1], count[2], i)


@njit(inline="always")
def count_programs(s, prog, pre, n, bounds, n_count, bfill, count_signal, signal, G):
    """The counting AIVs' programs on die s (AIVs below n_count: ubep's CalCumSum group, every
    AIV in bsp's SendFlag & Count), from program word n: each AIV's count messages to its share
    of the R x G (destination, message) pairs q = d x G + e (G: protocols.per_dest; each
    of DeepEP's for one expert), each followed by the variant's signal store if it has one, the
    store die d polls for it (count_signal[(d * R + s) * G + e]). Sets each AIV's program
    bounds; returns where the programs end."""
    R = bfill.shape[0]
    for a in range(n_count):
        bounds[a, 0] = n
        lo = a * R * G // n_count
        d, e = lo // G, lo % G           # pair q = d x G + e, stepped without a division
        for q in range(lo, (a + 1) * R * G // n_count):
            # a new destination: its first message, or the AIV's first
            sid = new_store(prog, n, bfill, d, K_COUNT, 1 if q == lo or e == 0 else 0)
            pre[u(n)] = 0
            n += 1
            if signal != NO_SIGNAL:
                sid = new_store(prog, n, bfill, d, signal, 0)
                pre[u(n)] = 0
                n += 1
            count_signal[u((d * R + s) * G + e)] = sid
            e += 1
            if e == G:
                d, e = d + 1, 0
        bounds[a, 1] = n
    return n


@njit(inline="always")
def status_programs(s, prog, pre, n, bounds, bfill, count_signal, G):
    """CANN's V1 combine (SetStatus) on die s: each AIV's statuses to the destinations it owns,
    G to each (protocols.per_dest: DeepEP's flag per expert), those at positions y = r x G + e
    of the walk with y x cores / (ranks x G) = its index (expert_block on the plain walk: also
    the destinations it had no copies for), each a one-block flag to another die, the store
    that destination polls for this die (count_signal[(d * R + s) * G + e]). Sets each AIV's
    program bounds; returns where the programs end."""
    R = bfill.shape[0]
    A = bounds.shape[0]
    for a in range(A):
        bounds[a, 0] = n
        lo = (a * R * G + A - 1) // A
        d, e = s + 1 + lo // G, lo % G   # position y = r x G + e, stepped without a division
        if d >= R:
            d -= R
        for y in range(lo, ((a + 1) * R * G + A - 1) // A):
            # a new destination: its first status, or the AIV's first
            count_signal[u((d * R + s) * G + e)] = new_store(
                prog, n, bfill, d, K_FLAG, 1 if y == lo or e == 0 else 0)
            pre[u(n)] = 0
            n += 1
            e += 1
            if e == G:
                d, e = d + 1, 0
                if d == R:
                    d = 0
        bounds[a, 1] = n
    return n
