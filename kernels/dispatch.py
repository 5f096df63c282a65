"""The dispatch kernel's driver: one configuration, every AIV of every die, in integer cycles.

`dispatch` runs the stages of one configuration in order, route -> schedule -> programs ->
egress -> ingress -> receive -> results, each a module of this package; `simulate_batch` runs
many configurations in parallel (one run of configurations that share a schedule per prange
iteration, rows written only by their own iteration). The model is the one of the plain-Python
twin (ubepsim.reference), which these stages must match exactly, cycle for cycle.

How it compiles, measured in paired runs (bench/compare_kernels.py): the stages after the
schedule are compiled into `dispatch` (inline="always"), one function; compiled apart, with
their arrays handed over as arguments, the same loops took 6% longer. The egress event loop is
the exception, compiled apart and called per die and phase (egress.egress_phase says why); the
schedule's per-die steps are calls (no slower).
"""

import numba
import numpy as np

from .egress import account_phase, egress_phase, kind_table, start_phase
from .ingress import ingress
from .jit import njit
from .layout import (B_CUMSUM, B_SYNC, C_BLOCKS_IN_FLIGHT, C_LAT_LOCAL, C_NPU_DIES, C_SYNCALL,
                     C_TIER1, C_TIER2, N_BUCKETS, N_HOPS, N_MARKS, N_PARAMS, P_AIVS, P_BATCH,
                     P_CDF_LEN, P_CDF_START, P_CUMSUM, P_EXPERTS, P_PROTOCOL, P_RANKS, P_ROUTING,
                     P_SYNC, P_TOPK, P_TRACE, S_MAX_ACK, S_WIDTH, TRACE, UBEP, Aivs, Stores)
from .programs import count_program, init_phase, token_program
from .receive import receive
from .results import result_row
from .routing import route
from .schedule import schedule
from .sync import NO_SIGNAL, effects, signal_stores, syncall


@njit
def new_stores(sched, R, M, EL, fx):
    """Every store's slot, destination-major (layout.Stores), sized before the dies issue them:
    each destination's bucket holds its copies, each with at most one signal store (fx:
    sync.Effects), and every source's count message with its own. The ingress port then sorts a
    small bucket and receivers read their own bucket only."""
    per_copy = 2 if fx.copy_signal != NO_SIGNAL else 1
    per_count = 2 if fx.count_signal != NO_SIGNAL else 1
    ecnt = sched.ecnt
    bfill = np.empty(R, np.int64)
    bstart = np.empty(R + 1, np.int64)
    x = 0
    for d in range(R):
        bstart[d] = x
        bfill[d] = x
        x += (ecnt[(d + 1) * EL] - ecnt[d * EL]) * per_copy + R * per_count
    bstart[R] = x
    max_stores = R * M * per_copy + R * R * per_count
    return Stores(np.empty(max_stores, np.int64), np.empty(max_stores, np.int64), bstart, bfill,
                  np.empty((R * M, 2), np.int32), np.empty(R * R, np.int32))


@njit
def dispatch(p, c, chance, sched, out, marks_out):
    """One configuration on its schedule (schedule.schedule). p: parameter row, c: cost row,
    chance: sentinel collision chances (copy, count message). Writes out[N_OUT]; if marks_out
    has shape [ranks, aivs, N_MARKS], every AIV's phase boundaries too."""
    R, B, K, E, A = p[P_RANKS], p[P_BATCH], p[P_TOPK], p[P_EXPERTS], p[P_AIVS]
    ubep = p[P_PROTOCOL] == UBEP
    fx = effects(p[P_SYNC], ubep)      # the Data-as-Flag variant, decoded once
    C = p[P_CUMSUM] if ubep else 0
    M = B * K
    EL = E // R
    cap = c[C_BLOCKS_IN_FLIGHT]
    lat = c[C_LAT_LOCAL:C_LAT_LOCAL + N_HOPS]

    aivs = Aivs(np.zeros((R, A), np.int64), np.zeros((R, A, N_BUCKETS), np.int64),
                np.zeros((R, A), np.int64), np.full((R, A), -1, np.int64),
                np.full((R, A), -1, np.int64), np.empty((R, A, N_MARKS), np.int64),
                np.empty((R, A), np.int64))
    stores = new_stores(sched, R, M, EL, fx)

    # Per-die scratch of the sending side.
    cur_sig = np.empty(R, np.int64)    # dc: per destination, the checksum an AIV sends there
    seen_dest = np.full(R, -1, np.int64)
    prog = np.empty(2 * M + 2 * R, np.int64)   # an AIV's program for a phase, a word a store
    st = np.zeros((A, S_WIDTH), np.int64)      # per-AIV state of the event loop (S_*)
    fifo = np.zeros(2 * A * cap, np.int64)     # outstanding stores per AIV, in issue order:
                                               # (ack, blocks) pairs, a ring of cap per AIV
    lat_row = np.empty(R, np.int64)            # per destination of the die: hop latency
    kc = kind_table(c, fx, EL)
    qsize = 1
    while qsize < A:
        qsize *= 2
    queue = np.empty((2, qsize), np.int64)   # the egress requests: two rings kept sorted
    count_bucket = B_CUMSUM if ubep else B_SYNC
    # The stage results' arrays, taken out once for the per-die stages: each array a stage is
    # handed, or read out of a named tuple in a loop, costs a reference count up and down.
    t_aiv, bucket, wait, first_copy, last_copy_ack, marks, nmarks = aivs
    st_arr, st_vis, _, bfill, copy_ref, count_signal = stores
    hops, aoff, xdest, xslot = sched.hops, sched.aoff, sched.xdest, sched.xslot

    # ---- the sending side: Init, then each die's phases, programs replayed on its port -------
    init_phase(aivs, c, C, sched.loads, sched.searches)
    sent = 0                           # copy stores the egress loops served
    for s in range(R):
        for d in range(R):
            lat_row[d] = lat[hops[s * R + d]]
        egress = 0
        for phase in range(1 if ubep else 2):
            if phase == 0:
                n = count_program(s, prog, 0, st, C, bfill, count_signal, fx.count_signal)
                token_program(s, prog, n, st, C, aoff, xdest, xslot, bfill, copy_ref,
                              fx.copy_signal, seen_dest, cur_sig)
            else:
                # bsp: SyncAll after Token-Sending (it waits for every store's completion too),
                # then SendFlag & Count on every AIV
                acked = 0
                for a in range(A):
                    acked = max(acked, st[a, S_MAX_ACK])
                syncall(s, acked, c[C_SYNCALL], t_aiv, bucket, wait, marks, nmarks)
                count_program(s, prog, 0, st, A, bfill, count_signal, fx.count_signal)
            start_phase(s, phase, t_aiv, st)
            egress = egress_phase(s, egress, st, prog, fifo, kc, cap, st_arr, st_vis, lat_row,
                                  lat[0], queue, C if phase == 0 else 0)
            sent += account_phase(s, phase, st, C, count_bucket, t_aiv, bucket, wait, first_copy,
                                  last_copy_ack, marks, nmarks)

    ingress(stores, c)
    delivered, violations, collisions, ends = receive(p, c, chance, fx, sched, aivs, stores, C,
                                                      ubep)
    result_row(out, aivs, ends, sched, c, ubep, R * M, sent, delivered, violations, collisions)
    if marks_out.shape[0] == R:
        marks_out[:, :, :] = marks


@njit
def simulate_dispatch(p, c, chance, cdf, trace, out, marks_out):
    """One configuration on its own schedule. cdf: cumulative expert weights (empty: uniform),
    trace: routing [ranks * batch * topk] (empty unless routing = trace)."""
    dispatch(p, c, chance, schedule(p, c, route(p, cdf, trace)), out, marks_out)


# What the schedule reads besides the parameters (all of them but sync).
SCHEDULE_COSTS = (C_NPU_DIES, C_TIER1, C_TIER2)


@njit
def same_schedule(params, costs, i, j):
    """Whether rows i and j have one schedule: they differ in nothing route and schedule
    read."""
    for col in range(N_PARAMS):
        if col != P_SYNC and params[i, col] != params[j, col]:
            return False
    for col in SCHEDULE_COSTS:
        if costs[i, col] != costs[j, col]:
            return False
    return True


@njit(parallel=True)
def simulate_batch(params, costs, chances, cdf_values, trace_values, out):
    """Many configurations: row i of `out` from row i of the inputs only. Consecutive rows with
    one schedule (same_schedule: a configuration's sync variants, which a caller puts side by
    side) share its computation, a sixth of a configuration's time; one prange iteration runs
    each such run of rows and writes only theirs."""
    n = params.shape[0]
    starts = np.empty(n + 1, np.int64)
    runs = 0
    for i in range(n):
        if i == 0 or not same_schedule(params, costs, i - 1, i):
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
        sched = schedule(p, costs[lo], route(p, cdf, tr))
        for i in range(lo, starts[r + 1]):
            dispatch(params[i], costs[i], chances[i], sched, out[i], no_marks)


def working_bytes(ranks, batch, topk, experts, aivs, ubep, sync):
    """The bytes `simulate_dispatch` allocates for a configuration, as numbers or numpy
    columns: its arrays whose sizes grow with the configuration (keep in step with the
    allocations of the stages), the ingress sort's at their largest (every copy a die can
    receive sent to one die). Left out: what stays under a megabyte at every size (per-AIV
    event state, kind tables, radix counts), and the comparison sort's buffers that only
    absurdly slow profiles need. Measured against the resident set: bench/bench_memory.py."""
    R, B, K, E, A = (np.asarray(x, dtype=np.int64) for x in (ranks, batch, topk, experts, aivs))
    M = B * K
    own_copy, own_count = signal_stores(np.asarray(sync), np.asarray(ubep))
    per_copy, per_count = 1 + own_copy, 1 + own_count
    stores = R * M * per_copy + R * R * per_count                  # new_stores
    bucket = R * B * np.minimum(K, E // R) * per_copy + R * per_count   # one die's stores
    return (16 * stores                 # Stores.arr, Stores.vis
            + 20 * R * M                # experts_of, copy_ref, the AIV lists (int32)
            + 5 * R * R                 # count_signal (int32), hop classes (int8)
            + 8 * R * A * (N_MARKS + 13)   # per-AIV state across passes, marks, Init
            + 8 * (10 * M + 16 * R + 5 * E)   # per-die scratch, programs, expert tables
            + 16 * bucket)              # the ingress sort's keys and buffer
