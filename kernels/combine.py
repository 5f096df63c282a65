"""Combine's driver (docs/model.md, "Combine"): the return all-to-all on one configuration,
every AIV of every die, in integer cycles. Every die returns each copy it received to the copy's
source die, which reduces each token's copies: the stages return_schedule (schedule.py) ->
programs -> egress -> ingress -> reduce -> results, as the twin's combine.combine runs them.
`bsp` is CANN's V1 combine, `ubep` the paper's three ideas on the return path."""

import numpy as np

from .egress import account_phase, egress_phase, return_kinds, start_phase
from .ingress import ingress, ingress_costs
from .jit import njit
from .layout import (B_SYNC, C_BLOCKS_IN_FLIGHT, C_LAT_LOCAL, C_RETURN_INGRESS, N_BUCKETS,
                     N_CMARKS, N_HOPS, N_MARKS, P_AIVS, P_BATCH, P_EXPERTS, P_PROTOCOL, P_RANKS,
                     P_SYNC, P_TOPK, S_WIDTH, SW, UBEP, Aivs, Stores)
from .programs import init_phase, status_programs, token_programs
from .reduce import reduce
from .results import combine_row
from .sync import NO_SIGNAL, effects, fence_all, signal_stores


@njit
def new_return_stores(R, M, fx, ubep):
    """Every store of a combine, destination-major (layout.Stores): each destination's bucket
    holds its own M copies coming back, each with at most one signal store (fx: sync.Effects),
    and under bsp a status from every die. copy_ref is indexed by the dispatch copy, s * M + i
    (its slot at its source s); count_signal[d * R + s] is the status die d polls for s."""
    per_copy = 2 if fx.copy_signal != NO_SIGNAL else 1
    per_die = M * per_copy + (0 if ubep else R)
    bstart = np.arange(R + 1) * per_die
    bfill = bstart[:R].copy()
    return Stores(np.empty(R * per_die, np.int64), np.empty(R * per_die, np.int64), bstart, bfill,
                  np.empty((R * M, 2), np.int32), np.empty(0 if ubep else R * R, np.int32))


@njit(inline="always")
def combine_stages(p, c, chance, rsched, starts, egress_free, ingress_free, marks_out):
    """One configuration's combine on its return schedule (schedule.return_schedule), die d
    starting at starts[d] with its ports free at egress_free[d] and ingress_free[d] (left
    there when next free). chance: the sentinel collision chances (copy, count message,
    returned copy). If marks_out has shape [ranks, aivs, ...], writes every AIV's phase
    boundaries after its first N_MARKS. Returns (aivs, ends, sent, delivered, violations,
    collisions), as dispatch.dispatch_stages."""
    R, B, K, E, A = p[P_RANKS], p[P_BATCH], p[P_TOPK], p[P_EXPERTS], p[P_AIVS]
    ubep = p[P_PROTOCOL] == UBEP
    # ubep: the Data-as-Flag variant on every copy; bsp: V1's copies carry no signal, its
    # statuses are flags behind their AIV's fence, read out, never verified or re-armed (sw)
    fx = effects(p[P_SYNC] if ubep else SW, ubep)
    M = B * K
    EL = E // R
    cap = c[C_BLOCKS_IN_FLIGHT]
    lat = c[C_LAT_LOCAL:C_LAT_LOCAL + N_HOPS]
    ecnt = rsched.ecnt

    aivs = Aivs(np.zeros((R, A), np.int64), np.zeros((R, A, N_BUCKETS), np.int64),
                np.zeros((R, A), np.int64), np.full((R, A), -1, np.int64),
                np.full((R, A), -1, np.int64), np.empty((R, A, N_CMARKS), np.int64),
                np.empty((R, A), np.int64))
    stores = new_return_stores(R, M, fx, ubep)
    most = 0                           # the most copies a die returns
    for d in range(R):
        most = max(most, ecnt[(d + 1) * EL] - ecnt[d * EL])
    cur_sig = np.empty(R, np.int64)
    seen_dest = np.full(R, -1, np.int64)
    prog = np.empty(2 * most + R, np.int64)
    st = np.zeros((A, S_WIDTH), np.int64)
    fifo = np.zeros(2 * A * cap, np.int64)
    lat_row = np.empty(R, np.int64)
    kc = return_kinds(c, fx, ubep)
    qsize = 1
    while qsize < A:
        qsize *= 2
    queue = np.empty((2, qsize), np.int64)
    t_aiv, bucket, wait, first_copy, last_copy_ack, marks, nmarks = aivs
    st_arr, st_vis, _, bfill, copy_ref, count_signal = stores
    hops, aoff, xdest, xslot = rsched.hops, rsched.aoff, rsched.xdest, rsched.xslot

    init_phase(aivs, c, 0, rsched.loads, rsched.searches, starts)
    sent = 0
    for s in range(R):
        for d in range(R):
            lat_row[d] = lat[hops[s * R + d]]
        egress = egress_free[s]
        token_programs(s, prog, 0, st, 0, aoff, xdest, xslot, bfill, copy_ref, fx.copy_signal,
                       seen_dest, cur_sig, ecnt[s * EL])
        start_phase(s, 0, t_aiv, st)
        egress = egress_phase(s, egress, st, prog, fifo, kc, cap, st_arr, st_vis, lat_row, lat[0],
                              queue, 0)
        sent += account_phase(s, 0, st, 0, B_SYNC, t_aiv, bucket, wait, first_copy,
                              last_copy_ack, marks, nmarks)
        if not ubep:
            # V1's SetStatus: behind PipeBarrier<PIPE_ALL>, a status to each destination
            fence_all(s, st, t_aiv, bucket, wait)
            status_programs(s, prog, 0, st, bfill, count_signal)
            start_phase(s, 1, t_aiv, st)
            egress = egress_phase(s, egress, st, prog, fifo, kc, cap, st_arr, st_vis, lat_row,
                                  lat[0], queue, 0)
            account_phase(s, 1, st, 0, B_SYNC, t_aiv, bucket, wait, first_copy, last_copy_ack,
                          marks, nmarks)
        egress_free[s] = egress

    ingress(stores, ingress_costs(c, C_RETURN_INGRESS), ingress_free)
    delivered, violations, collisions, ends = reduce(p, c, chance[2], fx, effects(SW, False),
                                                     aivs, stores, ubep)
    if marks_out.shape[0] == R:
        marks_out[:, :, N_MARKS:N_MARKS + N_CMARKS] = marks
    return aivs, ends, sent, delivered, violations, collisions


@njit
def combine(p, c, chance, rsched, out, marks_out):
    """One configuration's combine alone (every die from 0, its ports free): combine_stages,
    then its row, out[N_OUT] (results.combine_row)."""
    R = p[P_RANKS]
    starts = np.zeros(R, np.int64)
    aivs, ends, sent, delivered, violations, collisions = combine_stages(
        p, c, chance, rsched, starts, np.zeros(R, np.int64), np.zeros(R, np.int64), marks_out)
    combine_row(out, aivs, ends, starts, rsched, c, p[P_PROTOCOL] == UBEP, p[P_TOPK],
                R * p[P_BATCH] * p[P_TOPK], sent, delivered, violations, collisions)


def working_bytes(ranks, batch, topk, experts, aivs, ubep, sync):
    """The bytes combine allocates beside the routing, as numbers or numpy columns: its arrays
    whose sizes grow with the configuration (keep in step with the allocations of
    return_schedule, combine_stages and the stages they run), a die's scratch at its largest
    (every copy a die can receive: each token sends at most min(topk, experts per die) there).
    Left out: what stays under a megabyte at every size. Measured against the resident set:
    bench/bench_memory.py."""
    R, B, K, E, A = (np.asarray(x, dtype=np.int64) for x in (ranks, batch, topk, experts, aivs))
    M = B * K
    most = R * B * np.minimum(K, E // R)            # the most copies one die returns
    own_copy, _ = signal_stores(np.asarray(sync), np.asarray(ubep))
    per_die = M * (1 + own_copy) + np.where(np.asarray(ubep), 0, R)   # a die's bucket
    return (16 * R * per_die             # Stores.arr, Stores.vis
            + 8 * R * M                  # copy_ref (int32 pairs)
            + 16 * R * M                 # receive order (ref_of, src_of), xdest, xslot (int32)
            + 5 * R * R                  # statuses (int32), hop classes (int8)
            + 8 * R * A * (N_BUCKETS + N_CMARKS + 8)   # per-AIV state, marks, Init
            + 8 * 5 * most               # the schedule's per-die scratch, a die's program
            + 16 * per_die)              # the ingress sort's keys and buffer
