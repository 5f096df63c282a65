"""The receiving side of every die (paper Sections 2.3 and 3.2): polls of its own memory, the
counts from every source with the prefix sum (CalCumSum), the offsets, and Token-Reordering.

Polls are in closed form (`poll`): the twin polls in a loop, one load per period.
"""

import numpy as np

from . import rng
from .jit import njit, u
from .layout import (B_CUMSUM, B_REORDER, B_SYNC, C_COPY_RESET, C_COPY_VERIFY, C_COUNT_RESET,
                     C_COUNT_VERIFY, C_LAT_LOCAL, C_LOCAL_COPY, C_POLL, C_PREFIX, C_SIGNAL_ISSUE,
                     C_STATUS_POLL, C_SYNCALL, C_TIMEOUT, K_COPY, LOCAL, P_SEED, P_WKEY, TAKEN, ARR,
                     VIS)
from .protocols import per_dest
from .sync import syncall


@njit(inline="always")
def poll(t, visible, period, inv_period):
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


@njit(inline="always")
def take(sto, sid, b_lo, b_hi):
    """A receiver takes copy `sid` out of its die's bucket (ids b_lo .. b_hi): 1 if this is
    the copy's first take (a copy store that arrived, or a local one, and in the bucket: a
    delivery), 0 for a second take or anything else; a taken copy is marked TAKEN."""
    w = sto[u(sid), ARR]
    if (w == LOCAL - K_COPY or (w >= 0 and w & 3 == K_COPY)) and b_lo <= sid < b_hi:
        sto[u(sid), ARR] = TAKEN
        return 1
    return 0


@njit(inline="always")
def seen(visible, skey, index, chance, timeout):
    """When a poll can see a signal visible at `visible`: then, or after the sentinel's timeout
    if its payload collided with the sentinel (draw `index` of the die's sentinel stream, with
    probability `chance`; zero unless the variant collides). Returns (time, collisions)."""
    if chance > 0.0 and rng.unit(skey, index) < chance:
        return visible + timeout, 1
    return visible, 0


@njit(inline="always")
def close_step(d, a, t, polled, checked, work_bucket, work, t_core, bucket, wait, marks, nmarks):
    """AIV a of die d ends a step of polls at t: the polls' cycles (polled, spent waiting) and
    the checks after them (checked) count as sync, `work` as work_bucket's; its clock moves to
    t, which marks the step's end."""
    bucket[d, a, B_SYNC] += polled + checked
    bucket[d, a, work_bucket] += work
    wait[d, a] += polled
    t_core[d, a] = t
    marks[d, a, nmarks[d, a]] = t
    nmarks[d, a] += 1


@njit(inline="always")
def poll_counts(p, cores, stores, c, fx, chance, n_poll, prefix, G):
    """Every die's count polls: each of its first n_poll AIVs (a count group, UBEP's CalCumSum
    group; or every AIV, in CANN's Flag verification and combine's status polls) polls its share
    of the R x G signals, G from each source (protocols.per_dest), x = source x G + e, checks
    and re-arms each as the variant asks (fx: sync.Effects), and adds `prefix` cycles of partial
    prefix sum per signal. Returns the sentinel collisions."""
    t_core, bucket, wait = cores.t, cores.bucket, cores.wait
    marks, nmarks = cores.marks, cores.nmarks
    sto, count_signal = stores.sto, stores.count_signal
    R = t_core.shape[0]
    period = c[C_POLL]
    inv_period = 1.0 / period
    timeout = c[C_TIMEOUT]
    # per source, once its status is seen: reading it out (strided read, GatherMask, Sum,
    # vector-to-scalar sync), then the variant's check and re-arm
    after = c[C_STATUS_POLL] + fx.count_verify * c[C_COUNT_VERIFY] + \
        fx.count_rearm * c[C_COUNT_RESET]
    collisions = 0
    for d in range(R):
        skey = rng.stream(p[P_SEED], p[P_WKEY], d, rng.DOMAIN_SENTINEL)
        for j in range(n_poll):
            t = t_core[d, j]
            polled = 0
            x_lo = j * R * G // n_poll
            x_hi = (j + 1) * R * G // n_poll
            for x in range(x_lo, x_hi):
                v, hit = seen(sto[u(count_signal[u(d * R * G + x)]), VIS], skey, x, chance,
                              timeout)
                collisions += hit
                t2p = poll(t, v, period, inv_period)
                polled += t2p - t
                t = t2p + after + prefix
            n_src = x_hi - x_lo
            close_step(d, j, t, polled, n_src * after, B_CUMSUM, n_src * prefix, t_core, bucket,
                       wait, marks, nmarks)
    return collisions


@njit(inline="always")
def publish_offsets(cores, C, c):
    """A count group: each die's (AIVs below C, UBEP's CalCumSum group) publishes the offsets
    with one local store once its last AIV is done. Returns when they are visible to the token
    AIVs, per die."""
    t_core = cores.t
    offsets = np.empty(t_core.shape[0], np.int64)
    for d in range(t_core.shape[0]):
        last = 0
        for j in range(C):
            last = max(last, t_core[d, j])
        offsets[d] = last + c[C_SIGNAL_ISSUE] + c[C_LAT_LOCAL]
    return offsets


@njit(inline="always")
def bsp_cumsum(cores, c, entries):
    """Without a count group (CANN EP), on every die: SyncAll, CalCumSum over the `entries` counts
    (ranks x experts per die) split evenly over every AIV, SyncAll."""
    t_core, bucket, wait = cores.t, cores.bucket, cores.wait
    marks, nmarks = cores.marks, cores.nmarks
    R, A = t_core.shape
    for d in range(R):
        syncall(d, 0, c[C_SYNCALL], t_core, bucket, wait, marks, nmarks)
        for a in range(A):
            work = c[C_PREFIX] * ((a + 1) * entries // A - a * entries // A)
            bucket[d, a, B_CUMSUM] += work
            t_core[d, a] += work
            marks[d, a, nmarks[d, a]] = t_core[d, a]
            nmarks[d, a] += 1
        syncall(d, 0, c[C_SYNCALL], t_core, bucket, wait, marks, nmarks)


@njit(inline="always")
def reorder(p, cores, stores, ecnt, c, fx, chance, first_core, m, offsets):
    """Token-Reordering on every die: AIVs first_core on, each an equal contiguous slice of the
    die's received copies (receive order: ecnt, layout.Schedule), a local copy each (m:
    protocols.Mechanisms). After a count group, an AIV first polls the offsets (offsets[d]);
    where copies signal their own arrival, it polls each copy's signal and checks it (fx:
    sync.Effects), and the variant may re-arm the sentinel after the copy. Returns (delivered,
    violations, collisions): copies taken for the first time from their die's bucket, copies read
    before they were visible, sentinel collisions."""
    t_core, bucket, wait = cores.t, cores.bucket, cores.wait
    marks, nmarks = cores.marks, cores.nmarks
    sto, copy_ref = stores.sto, stores.copy_ref
    bstart, bfill = stores.bstart, stores.bfill
    R, A = t_core.shape
    EL = (ecnt.shape[0] - 1) // R
    n_reorder = A - first_core
    period = c[C_POLL]
    inv_period = 1.0 / period
    timeout = c[C_TIMEOUT]
    verify = fx.copy_verify * c[C_COPY_VERIFY]
    work = c[C_LOCAL_COPY] + fx.copy_rearm * c[C_COPY_RESET]
    delivered = violations = collisions = 0
    for d in range(R):
        skey = rng.stream(p[P_SEED], p[P_WKEY], d, rng.DOMAIN_SENTINEL)
        r_lo = ecnt[d * EL]
        n_recv = ecnt[(d + 1) * EL] - r_lo
        b_lo, b_hi = bstart[d], bfill[d]
        for j in range(n_reorder):
            a = first_core + j
            t = t_core[d, a]
            if m.count_group:
                t2p = poll(t, offsets[d], period, inv_period)
                bucket[d, a, B_CUMSUM] += t2p - t
                wait[d, a] += t2p - t
                t = t2p
                marks[d, a, nmarks[d, a]] = t
                nmarks[d, a] += 1
            polled = 0
            for x in range(j * n_recv // n_reorder, (j + 1) * n_recv // n_reorder):
                g = r_lo + x
                data_sid = copy_ref[u(g), 0]
                data = sto[u(data_sid), VIS]
                # delivered: a copy's store (remote or local), in this die's bucket, taken for
                # the first time
                delivered += take(sto, data_sid, b_lo, b_hi)
                if m.signalled_copies:
                    sig = copy_ref[u(g), 1]
                    v, hit = seen(data if sig == data_sid else sto[u(sig), VIS], skey, R + x,
                                  chance, timeout)
                    collisions += hit
                    t2p = poll(t, v, period, inv_period)
                    polled += t2p - t
                    t = t2p + verify
                if t < data:
                    violations += 1
                t += work
            n_copies = (j + 1) * n_recv // n_reorder - j * n_recv // n_reorder
            close_step(d, a, t, polled, n_copies * verify, B_REORDER, n_copies * work, t_core,
                       bucket, wait, marks, nmarks)
    return delivered, violations, collisions


@njit   # compiled apart: inlined, its loops grew the dispatch function and slowed the others'
def pair_receive(p, cores, stores, sched, c, fx, chance, ordered, G):
    """Fixed slots (protocols.FIXED_SLOTS, DeepEP's receive): on every die, each AIV takes an
    equal contiguous share of the (local expert, source) pairs, pair q = e * ranks + s (DeepEP's
    responsible expert index); per pair it polls the source's count message (of G a die sends
    it: the pair's own where there is one per expert), reads it out and checks it as the
    variant asks (fx), then copies the pair's copies out of their slots, each
    taken once it is there where the count came behind them on their queue (`ordered`,
    protocols.ORDERED). Returns (delivered, violations, collisions), as reorder's."""
    t_core, bucket, wait = cores.t, cores.bucket, cores.wait
    marks, nmarks = cores.marks, cores.nmarks
    sto, copy_ref, count_signal = stores.sto, stores.copy_ref, stores.count_signal
    bstart, bfill = stores.bstart, stores.bfill
    ecnt, cfirst, xslot = sched.ecnt, sched.cfirst, sched.xslot
    R, A = t_core.shape
    EL = (ecnt.shape[0] - 1) // R
    P = EL * R
    period = c[C_POLL]
    inv_period = 1.0 / period
    timeout = c[C_TIMEOUT]
    after = c[C_STATUS_POLL] + fx.count_verify * c[C_COUNT_VERIFY] + \
        fx.count_rearm * c[C_COUNT_RESET]
    work = c[C_LOCAL_COPY]
    # each received copy's source: copy x of source s's lists lands at slot xslot[x]
    src_of = np.empty(cfirst[R], np.int32)
    for s in range(R):
        for x in range(cfirst[s], cfirst[s + 1]):
            src_of[u(xslot[u(x)])] = s
    pstart = np.empty(P + 1, np.int64)
    delivered = violations = collisions = 0
    for d in range(R):
        skey = rng.stream(p[P_SEED], p[P_WKEY], d, rng.DOMAIN_SENTINEL)
        b_lo, b_hi = bstart[d], bfill[d]
        # where each pair's copies start in receive order (an expert's, source by source)
        pstart[:] = 0
        for e in range(EL):
            for g in range(ecnt[d * EL + e], ecnt[d * EL + e + 1]):
                pstart[e * R + src_of[u(g)] + 1] += 1
        pstart[0] = ecnt[d * EL]
        for q in range(P):
            pstart[q + 1] += pstart[q]
        for a in range(A):
            t = t_core[d, a]
            polled = 0
            copied = 0
            for q in range(a * P // A, (a + 1) * P // A):
                s = q % R
                v, hit = seen(sto[u(count_signal[u((d * R + s) * G + q // R % G)]), VIS], skey,
                              q, chance,
                              timeout)
                collisions += hit
                t2p = poll(t, v, period, inv_period)
                polled += t2p - t
                t = t2p + after
                for g in range(pstart[q], pstart[q + 1]):
                    data_sid = copy_ref[u(g), 0]
                    v = sto[u(data_sid), VIS]
                    if ordered and v > t:
                        polled += v - t
                        t = v
                    if t < v:
                        violations += 1
                    delivered += take(sto, data_sid, b_lo, b_hi)
                    t += work
                copied += pstart[q + 1] - pstart[q]
            n_pairs = (a + 1) * P // A - a * P // A
            close_step(d, a, t, polled, n_pairs * after, B_REORDER, copied * work, t_core, bucket,
                       wait, marks, nmarks)
    return delivered, violations, collisions


@njit(inline="always")
def receive(p, c, chance, fx, sched, cores, stores, C, m):
    """Every die's receivers (m: protocols.Mechanisms): count polls, then a count group's
    offsets or CANN's SyncAll-CalCumSum-SyncAll, then Token-Reordering. A die's receivers touch
    nothing of another's, so each step runs over every die before the next. chance: the sentinel
    collision chances (copy, count message). Returns (delivered, violations, collisions, ends):
    ends[d] is when die d's last AIV is done."""
    t_core = cores.t
    R, A = t_core.shape
    EL = (sched.ecnt.shape[0] - 1) // R
    if m.fixed_slots:
        delivered, violations, collisions = pair_receive(p, cores, stores, sched, c, fx,
                                                         chance[1], m.ordered,
                                                         per_dest(m, EL))
        return delivered, violations, collisions, die_ends(t_core)
    # polling every source's counts: by the count group, with its partial prefix sum per
    # source; or by every AIV (CANN's Flag verification)
    grouped = m.count_group == 1
    collisions = poll_counts(p, cores, stores, c, fx, chance[1], C if grouped else A,
                             c[C_PREFIX] * EL if grouped else 0, 1)
    if grouped:
        offsets = publish_offsets(cores, C, c)
    else:
        bsp_cumsum(cores, c, R * EL)
        offsets = np.zeros(0, np.int64)
    delivered, violations, hits = reorder(p, cores, stores, sched.ecnt, c, fx, chance[0],
                                          C if grouped else 0, m, offsets)
    return delivered, violations, collisions + hits, die_ends(t_core)


@njit(inline="always")
def die_ends(t_core):
    """When each die's last AIV is done."""
    R, A = t_core.shape
    ends = np.zeros(R, np.int64)
    for d in range(R):
        for a in range(A):
            ends[d] = max(ends[d], t_core[d, a])
    return ends
