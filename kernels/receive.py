"""The receiving side of every die (paper Sections 2.3 and 3.2): the counts polled from every
source (with a count group's partial prefix sums), then a protocol's own step (bsp's CalCumSum
between SyncAlls, ubep's offsets, deepep_ll's fixed slots: kernels/protocols), then
Token-Reordering. A receiver's polls and takes are kernels/polls.py's.
"""

import numpy as np

from . import rng
from .jit import njit, u
from .layout import (B_CUMSUM, B_REORDER, C_COPY_RESET, C_COPY_VERIFY, C_COUNT_RESET,
                     C_COUNT_VERIFY, C_LOCAL_COPY, C_POLL, C_PREFIX, C_STATUS_POLL, C_TIMEOUT,
                     P_SEED, P_WKEY, RECEIVE_GROUP, RECEIVE_SLOTS, VIS)
from .polls import close_step, die_ends, poll, seen, take
from .protocols import per_dest
from .protocols.bsp import bsp_cumsum
from .protocols.deepep_ll import pair_receive
from .protocols.ubep import publish_offsets


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
            if m.receive == RECEIVE_GROUP:
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


@njit(inline="always")
def receive(p, c, chance, fx, sched, cores, stores, C, m):
    """Every die's receivers (m: protocols.Mechanisms), by the steps m.receive runs
    (layout.RECEIVE_*): fixed slots' pairs; or the counts polled, then a count group's offsets
    or CANN's SyncAll-CalCumSum-SyncAll, then Token-Reordering. A die's receivers touch nothing
    of another's, so each step runs over every die before the next. chance: the sentinel
    collision chances (copy, count message). Returns (delivered, violations, collisions, ends):
    ends[d] is when die d's last AIV is done."""
    t_core = cores.t
    R, A = t_core.shape
    EL = (sched.ecnt.shape[0] - 1) // R
    if m.receive == RECEIVE_SLOTS:
        delivered, violations, collisions = pair_receive(p, cores, stores, sched, c, fx,
                                                         chance[1], m.ordered,
                                                         per_dest(m, EL))
        return delivered, violations, collisions, die_ends(t_core)
    # polling every source's counts: by the count group, with its partial prefix sum per
    # source; or by every AIV (CANN's Flag verification)
    grouped = m.receive == RECEIVE_GROUP
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


