"""Combine's driver (docs/model.md, "Combine"): the return all-to-all on one configuration,
every AIV of every die, in integer cycles. Every die returns each copy it received to the copy's
source die, which reduces each token's copies: the stages return_schedule (schedule.py) ->
programs -> fabric -> reduce -> results, as the twin's combine.combine runs them. `bsp` is
CANN's V1 combine, `ubep` the paper's three ideas on the return path."""

import numpy as np

from .fabric import fabric, fabric_bytes, return_kinds
from .jit import njit
from .layout import (B_SYNC, C_INIT, C_LAUNCH_SKEW, C_VCOUNT, N_CMARKS, N_MARKS,
                     N_PHASES, N_PORTS, P_CORES, P_EXPERTS, P_PROTOCOL, P_RANKS, P_SYNC, P_TOPK,
                     THEN_NONE, STO_WIDTH, Stores)
from .programs import (cores_bytes, init_phase, launch_starts, new_cores, status_programs,
                       token_programs)
from .protocols import (RETURN_STATUS, SIGNALLED_COPIES, STATUS_SYNC, mechanisms, per_dest,
                        per_dest_of, uses, v1_phases)
from .reduce import reduce
from .results import combine_row, put_marks
from .sync import NO_SIGNAL, effects, signal_stores


@njit
def new_return_stores(cfirst, fx, statuses, G):
    """Every store of a combine, destination-major (layout.Stores): each destination's bucket
    holds its own copies coming back (die d's: cfirst[d] .. cfirst[d + 1]), each with at most
    one signal store (fx: sync.Effects), and where the protocol sends `statuses`
    (protocols.RETURN_STATUS) G statuses from every die (protocols.per_dest). copy_ref is
    indexed by the dispatch copy (cfirst[s] + its slot at its source s); count_signal[(d * R +
    s) * G + e] is status e that die d polls for s."""
    R = cfirst.shape[0] - 1
    per_copy = 2 if fx.copy_signal != NO_SIGNAL else 1
    bstart = np.empty(R + 1, np.int64)
    for d in range(R + 1):
        bstart[d] = cfirst[d] * per_copy + (d * R * G if statuses else 0)
    bfill = bstart[:R].copy()
    return Stores(np.empty((bstart[R], STO_WIDTH), np.int64), bstart, bfill,
                  np.empty((cfirst[R], 2), np.int32),
                  np.empty(R * R * G if statuses else 0, np.int32))


@njit(inline="always")
def combine_stages(p, c, chance, rsched, starts, egress_free, ingress_free, marks_out):
    """One configuration's combine on its return schedule (schedule.return_schedule), die d
    starting at starts[d] with its ports free at egress_free[d] and ingress_free[d] (per port;
    left there when next free). chance: the sentinel collision chances (copy, count message,
    returned copy). If marks_out has shape [ranks, cores, ...], writes every AIV's phase
    boundaries after its first N_MARKS. Returns (cores, ends, sent, delivered, violations,
    collisions, queued), as dispatch.dispatch_stages."""
    R, E, A = p[P_RANKS], p[P_EXPERTS], p[P_CORES]
    m = mechanisms(p[P_PROTOCOL])
    statuses = m.return_status == 1
    # signalled copies: the Data-as-Flag variant on every copy; V1's statuses are flags behind
    # their AIV's fence, read out, never verified or re-armed (sw), its copies unsignalled
    fx = effects(STATUS_SYNC if statuses else p[P_SYNC], m.signalled_copies)
    N = rsched.cfirst[R]
    EL = E // R
    G = per_dest(m, EL)
    ecnt = rsched.ecnt

    cores = new_cores(R, A, N_CMARKS)
    stores = new_return_stores(rsched.cfirst, fx, statuses, G)
    _, _, bfill, copy_ref, count_signal = stores
    aoff, xdest, xslot = rsched.aoff, rsched.xdest, rsched.xslot

    # every die's programs: its returned copies; with statuses (V1's SetStatus), behind each
    # AIV's own fence (PipeBarrier<PIPE_ALL>), a status to each destination it owns
    cur_sig = np.empty(R, np.int64)
    seen_dest = np.full(R, -1, np.int64)
    prog = np.empty(2 * N + R * R * G, np.int64)
    pre = np.empty(2 * N + R * R * G, np.int32)
    pb = np.zeros((R * A, N_PHASES, 2), np.int64)
    no_count = (np.int64(-1), np.int64(0), np.int64(1))
    n = 0
    for s in range(R):
        n = token_programs(s, prog, pre, n, pb[s * A:(s + 1) * A, 0], 0, aoff, xdest, xslot,
                           rsched.xcopy, no_count, bfill, copy_ref, fx.copy_signal, seen_dest,
                           cur_sig, ecnt[s * EL])
        if statuses:
            n = status_programs(s, prog, pre, n, pb[s * A:(s + 1) * A, 1], bfill, count_signal,
                                G)

    init_phase(cores, c[C_INIT], 0, c[C_VCOUNT], 0, rsched.loads, rsched.searches, starts)
    # (scalars as dispatch passes them, int64: one compiled fabric serves both)
    sent, queued = fabric(R, c, return_kinds(c, fx, m.signalled_copies), rsched.hops, stores,
                          prog, pre, pb, 2 if statuses else 1,
                          m.status_after if statuses else THEN_NONE, np.int64(0),
                          np.int64(B_SYNC), cores, egress_free, ingress_free)
    delivered, violations, collisions, ends = reduce(p, rsched.cfirst, c, chance[2], fx,
                                                     effects(STATUS_SYNC, 0), cores, stores, m,
                                                     G)
    if marks_out.shape[0] == R:
        put_marks(marks_out, cores.marks, N_MARKS)
    return cores, ends, sent, delivered, violations, collisions, queued


@njit
def combine(p, c, chance, rsched, out, marks_out):
    """One configuration's combine alone (every die from its launch, its ports free):
    combine_stages, then its row, out[N_OUT] (results.combine_row)."""
    R = p[P_RANKS]
    starts = launch_starts(p, c[C_LAUNCH_SKEW], R)
    cores, ends, sent, delivered, violations, collisions, queued = combine_stages(
        p, c, chance, rsched, starts, np.zeros((R, N_PORTS), np.int64),
        np.zeros((R, N_PORTS), np.int64), marks_out)
    combine_row(out, cores, ends, starts, rsched, c, v1_phases(mechanisms(p[P_PROTOCOL])),
                p[P_TOPK], sent, delivered, violations, collisions, queued)


def working_bytes(ranks, batch, topk, copies, most, experts, cores, protocol, sync, cap, links):
    """The bytes combine allocates beside the routing, as numbers or numpy columns (as
    dispatch.working_bytes, whose arguments it takes): its arrays whose sizes grow with the
    configuration, each term beside the allocation it counts (keep them in step;
    tests/test_memory.py holds the sum to the resident set). The return schedule's per-die
    scratch is sized for the most copies a die can receive (each token sends at most
    min(topk, experts per die) there); a die gets back at most `most` copies."""
    R, B, K, E, A = (np.asarray(x, dtype=np.int64) for x in (ranks, batch, topk, experts, cores))
    N = R * np.asarray(copies)           # every die's copies, each returned
    returned = R * B * np.minimum(K, E // R)        # the most copies one die returns
    own_copy, _ = signal_stores(np.asarray(sync), uses(protocol, SIGNALLED_COPIES))
    # the statuses: per_dest from every die to every die
    statuses = uses(protocol, RETURN_STATUS) * R * R * per_dest_of(protocol, E // R)
    stores = N * (1 + own_copy) + statuses      # new_return_stores
    # the most one ingress port's heap holds: every copy a die can get back, and its statuses
    bucket = np.asarray(most) * (1 + own_copy) + statuses // R
    return (8 * STO_WIDTH * stores      # Stores.sto
            + 12 * stores               # prog (int64), pre (int32): a word a store
            + 24 * N                    # receive order (ref_of, src_of), xdest, xslot, copy_ref
            + 4 * statuses + R * R      # count_signal (int32), hop classes (int8)
            + cores_bytes(R, A, N_CMARKS) + 16 * R * A   # the schedule's aoff, searches
            + 8 * (3 * returned + 16 * R + 4 * E)   # the schedule's per-die scratch, per-die
            # and per-expert tables
            + fabric_bytes(R, A, np.asarray(cap), bucket + np.asarray(links) * stores))
