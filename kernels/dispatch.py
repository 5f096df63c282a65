"""The dispatch's driver: one configuration, every AIV of every die, in integer cycles.

`dispatch` runs the stages of one configuration on its schedule in order, programs -> fabric
-> receive -> results, each a module of this package (routing and the schedule come before it:
layer.simulate_batch and its kernels, which run every op). The model is the one of the
plain-Python twin (ubepsim.reference), which these stages must match exactly, cycle for cycle.

How it compiles, measured in paired runs (bench/compare_kernels.py): the stages after the
schedule are compiled into `dispatch` (inline="always"), one function; compiled apart, with
their arrays handed over as arguments, the same loops took 6% longer. The fabric's event loop
is the exception, compiled apart (fabric.fabric); the schedule's per-die steps are calls (no
slower).
"""

import numpy as np

from .fabric import fabric, fabric_bytes, kind_table, preceded_work
from .jit import njit
from .layout import (B_CUMSUM, B_SYNC, C_COPY_COUNT, C_IDS_LOAD, C_INIT, C_INIT_LOAD,
                     C_LAUNCH_SKEW, C_VCOUNT, C_VECTOR_BYTES, C_VECTOR_OP, N_MARKS, N_PHASES,
                     N_PORTS, P_CORES, P_CUMSUM, P_EXPERTS, P_PROTOCOL, P_RANKS, P_SYNC,
                     RECEIVE_GROUP, RECEIVE_SLOTS, STO_WIDTH, THEN_NONE, Stores)
from .programs import (cores_bytes, count_programs, init_phase, launch_starts, new_cores,
                       token_programs)
from .protocols import (RECEIVE, SIGNALLED_COPIES, SYNC, by_core, chosen, jit_chosen,
                        mechanisms, per_dest, per_dest_of, uses)
from .receive import receive
from .results import put_marks, result_row
from .sync import NO_SIGNAL, effects, signal_stores


@njit
def new_stores(sched, R, EL, fx, G):
    """Every store's slot, destination-major (layout.Stores), sized before the dies issue them:
    each destination's bucket holds its copies, each with at most one signal store (fx:
    sync.Effects), and every source's G count messages (protocols.per_dest) with theirs.
    Receivers read their own bucket only, and the bucket holds its ingress ports' queues."""
    per_copy = 2 if fx.copy_signal != NO_SIGNAL else 1
    per_count = 2 if fx.count_signal != NO_SIGNAL else 1
    ecnt = sched.ecnt
    bfill = np.empty(R, np.int64)
    bstart = np.empty(R + 1, np.int64)
    x = 0
    for d in range(R):
        bstart[d] = x
        bfill[d] = x
        x += (ecnt[(d + 1) * EL] - ecnt[d * EL]) * per_copy + R * G * per_count
    bstart[R] = x
    copies = sched.cfirst[R]
    max_stores = copies * per_copy + R * R * G * per_count
    return Stores(np.empty((max_stores, STO_WIDTH), np.int64), bstart, bfill,
                  np.empty((copies, 2), np.int32), np.empty(R * R * G, np.int32))


@njit(inline="always")
def dispatch_stages(p, c, chance, sched, egress_free, ingress_free, marks_out):
    """One configuration's dispatch on its schedule (schedule.schedule). p: parameter row, c:
    cost row, chance: sentinel collision chances (copy, count message, ...). Its ports start
    free at egress_free[d] and ingress_free[d] (per port: layout.N_PORTS) and are left there
    when next free; if marks_out has shape [ranks, cores, ...], writes every AIV's phase
    boundaries into its first N_MARKS. Returns (cores, ends, sent, delivered, violations,
    collisions, queued): every AIV's state (layout.Cores), when each die's last AIV is done, the
    counts result_row takes, and the longest wait in an ingress port's queue."""
    R, E, A = p[P_RANKS], p[P_EXPERTS], p[P_CORES]
    m = mechanisms(p[P_PROTOCOL])      # the protocol and its Data-as-Flag variant, decoded once
    fx = effects(jit_chosen(m.sync, p[P_SYNC]), m.signalled_copies)
    grouped = m.receive == RECEIVE_GROUP
    C = p[P_CUMSUM] if grouped else 0
    EL = E // R
    G = per_dest(m, EL)
    cfirst = sched.cfirst

    cores = new_cores(R, A, N_MARKS)
    stores = new_stores(sched, R, EL, fx, G)
    _, _, bfill, copy_ref, count_signal = stores
    aoff, xdest, xslot = sched.aoff, sched.xdest, sched.xslot

    # every die's programs: a count group beside the token group in one phase (UBEP, Figure
    # 5(b)); or Token-Sending, then the counts on every AIV after what they wait for (CANN's
    # SyncAll, Figure 2; DeepEP's finish counters)
    cur_sig = np.empty(R, np.int64)    # dc: per destination, the checksum an AIV sends there
    seen_dest = np.full(R, -1, np.int64)
    prog = np.empty(2 * cfirst[R] + 2 * R * R * G, np.int64)
    pre = np.empty(2 * cfirst[R] + 2 * R * R * G, np.int32)
    pb = np.zeros((R * A, N_PHASES, 2), np.int64)
    # the send loop's count of each copy's predecessors to its expert (CANN), or none
    count = (preceded_work(c) if c[C_COPY_COUNT] else -1, c[C_VECTOR_OP], c[C_VECTOR_BYTES])
    n = 0
    for s in range(R):
        first = pb[s * A:(s + 1) * A, 0]
        n = count_programs(s, prog, pre, n, first, C, bfill, count_signal, fx.count_signal, G)
        n = token_programs(s, prog, pre, n, first, C, aoff, xdest, xslot, sched.xcopy, count,
                           bfill, copy_ref, fx.copy_signal, seen_dest, cur_sig, cfirst[s])
        if not grouped:
            n = count_programs(s, prog, pre, n, pb[s * A:(s + 1) * A, 1], A, bfill,
                               count_signal, fx.count_signal, G)

    # Init: every AIV's setup and its load of the die's expert ids; a token AIV's token loads
    # and search (each die from its launch)
    init_phase(cores, c[C_INIT] + c[C_IDS_LOAD], c[C_INIT_LOAD], c[C_VCOUNT], C, sched.loads,
               sched.searches, launch_starts(p, c[C_LAUNCH_SKEW], R))
    kinds = kind_table(c, fx, EL // G, m.token_preload)
    sent, queued = fabric(R, c, kinds, sched.hops, stores, prog, pre, pb,
                          1 if grouped else 2, THEN_NONE if grouped else m.counts_after, C,
                          B_CUMSUM if grouped else B_SYNC, cores, egress_free, ingress_free)
    delivered, violations, collisions, ends = receive(p, c, chance, fx, sched, cores, stores, C,
                                                      m)
    if marks_out.shape[0] == R:
        put_marks(marks_out, cores.marks, 0)
    return cores, ends, sent, delivered, violations, collisions, queued


@njit
def dispatch(p, c, chance, sched, out, marks_out):
    """One configuration's dispatch on its schedule: dispatch_stages, then its row, out[N_OUT]
    (results.result_row)."""
    R = p[P_RANKS]
    cores, ends, sent, delivered, violations, collisions, queued = dispatch_stages(
        p, c, chance, sched, np.zeros((R, N_PORTS), np.int64),
        np.zeros((R, N_PORTS), np.int64), marks_out)
    result_row(out, cores, ends, sched, c, by_core(mechanisms(p[P_PROTOCOL])), sent, delivered,
               violations, collisions, queued)


def working_bytes(ranks, batch, topk, copies, most, experts, cores, protocol, sync, cap, links):
    """The bytes a dispatch allocates for a configuration, as numbers or numpy columns: its
    arrays whose sizes grow with the configuration, each term beside the allocation it counts
    (keep them in step; tests/test_memory.py holds the sum to the resident set): `copies` a
    die's copies on average, `most` at the most any die holds (ubepsim.model.params.
    copies_per_die), `cap` blocks_in_flight, `links` 1 where tier links queue. What the kernel
    allocates but may never touch counts as far as it can be filled (a page never touched is
    never resident): the program's room for a second word a store, the heaps' entries beyond a
    port's fullest queue. Left out: what stays under a megabyte at every size."""
    R, E, A = (np.asarray(x, dtype=np.int64) for x in (ranks, experts, cores))
    N = R * np.asarray(copies)           # every die's copies
    sync = chosen(uses(protocol, SYNC), np.asarray(sync))
    own_copy, own_count = signal_stores(sync, uses(protocol, SIGNALLED_COPIES))
    counts = R * R * per_dest_of(protocol, E // R)              # count messages
    stores = N * (1 + own_copy) + counts * (1 + own_count)      # new_stores
    # the most one ingress port's heap holds: every copy a die can receive, and its counts
    bucket = R * np.asarray(batch) * np.minimum(topk, E // R) * (1 + own_copy) + \
        counts // R * (1 + own_count)
    return (8 * STO_WIDTH * stores      # Stores.sto
            + 12 * stores               # prog (int64), pre (int32): a word a store (room for two)
            + 24 * N                    # experts_of, xdest, xslot, xcopy, copy_ref (int32)
            + 4 * N * (uses(protocol, RECEIVE) == RECEIVE_SLOTS)   # pair_receive's sources
            + 4 * counts + R * R        # count_signal (int32), hop classes (int8)
            + cores_bytes(R, A, N_MARKS) + 24 * R * A   # the schedule's aoff, loads, searches
            + 8 * (5 * np.asarray(most) + 16 * R + 6 * E)   # the schedule's per-die scratch,
            # per-die and per-expert tables
            + fabric_bytes(R, A, np.asarray(cap), bucket + np.asarray(links) * stores))
