"""A configuration's output row (layout.O_*): latency, phases on the critical path, send
latencies, waits, and the counts the host checks its invariants on (ubepsim.model.kernel_io),
for a dispatch (`result_row`), a combine (`combine_row`) or a layer (`layer_row`)."""

import numpy as np

from .jit import njit
from .routing import most_copies
from .protocols import by_core, v1_phases
from .schedule import busiest
from .layout import (ADDRESS, C_COPY_EGRESS, C_COPY_INGRESS, C_EXPERT, C_LAT_LOCAL,
                     C_RETURN_EGRESS, C_RETURN_INGRESS, C_SYNCALL, COMBINE, CUMSUM_MARK, DISPATCH,
                     EACH, FLOOR_ROWS, MARK_INIT, MARK_START, N_BUCKETS,
                     N_HOPS, NEVER, NEW_DEST, O_BOUND, O_COMBINE, O_COPIES_HOP0, O_COPIES_TOTAL,
                     O_DELIVERED, O_INGRESS_QUEUE, O_DISPATCH, O_EXPERT, O_LATENCY, O_LATENCY_MEAN,
                     O_PHASE0, O_PHASE_CUMSUM, O_PHASE_INIT, O_PHASE_REDUCE, O_PHASE_REORDER,
                     O_PHASE_SEND, O_PHASE_SYNC, O_QSEARCH_STEPS, O_SEND_MAX_CORE,
                     O_SEND_MEAN_CORE, O_SEND_SPREAD_CORE, O_SENT, O_SENTINEL_COLLISIONS,
                     O_VIOLATIONS, O_WAIT, O_SLOWEST_DIE, O_MEDIAN_DIE, O_RECV_MAX, O_SEND_MAX,
                     SYNCALL_MARKS, TOPK, V1_SYNCALL_MARK, W_COPY, W_RETURN, WORK_ISSUE, WORK_ROWS)


@njit(inline="always")
def last_core(t_core, crit):
    """The AIV of die crit that ends last, the lowest-numbered on a tie."""
    ca = 0
    for a in range(t_core.shape[1]):
        if t_core[crit, a] > t_core[crit, ca]:
            ca = a
    return ca


@njit
def phases(out, cores, crit, latency, by_core, c):
    """The time of each phase of a dispatch on the critical path, through die `crit`, which
    ends at `latency`; `by_core`: whether no SyncAll splits the die's AIVs into shared phases
    (protocols.by_core)."""
    t_core, bucket, marks = cores.t, cores.bucket, cores.marks
    A = t_core.shape[1]
    if by_core:
        # the last AIV of the last die: its own time, bucket by bucket (a phase column per
        # bucket, in order), its die's launch offset (programs.launch_starts) in Init
        ca = last_core(t_core, crit)
        for b in range(N_BUCKETS):
            out[O_PHASE0 + b] = bucket[crit, ca, b]
        out[O_PHASE_INIT] += marks[crit, ca, MARK_START]
        return
    # the last die, phase by phase: its SyncAlls and what they wait for count as sync. The
    # barriers' times are every AIV's; Init and CalCumSum end per AIV, the last of them counts
    init_end = 0
    cumsum_end = 0
    for a in range(A):
        init_end = max(init_end, marks[crit, a, MARK_INIT])
        cumsum_end = max(cumsum_end, marks[crit, a, CUMSUM_MARK])
    # the SyncAlls after sending, after the count polls and after CalCumSum: every AIV's ends
    # the same
    after_send, after_polls, after_cumsum = SYNCALL_MARKS
    send_end = marks[crit, 0, after_send] - c[C_SYNCALL]
    verified = marks[crit, 0, after_polls]
    summed = marks[crit, 0, after_cumsum]
    out[O_PHASE_INIT] = init_end
    out[O_PHASE_SEND] = send_end - init_end
    out[O_PHASE_SYNC] = (verified - send_end) + (summed - cumsum_end)
    out[O_PHASE_CUMSUM] = cumsum_end - verified
    out[O_PHASE_REORDER] = latency - summed
    out[O_PHASE_REDUCE] = 0


@njit
def combine_phases(out, cores, crit, start, end, v1):
    """The time of each phase of a combine on the critical path, through die `crit` from its
    start to its end, added to out's phase columns (a layer's dispatch wrote them first).
    Unless `v1` (protocols.v1_phases): the die's last AIV, bucket by bucket. CANN's V1: Init
    until the die's last AIV's Init ends, Token-Sending until its last copy completed,
    synchronization (fences, statuses, status polls) until its SyncAll ends, then the
    reduction."""
    t_core, bucket, marks = cores.t, cores.bucket, cores.marks
    first_copy, last_copy_ack = cores.first_copy, cores.last_copy_ack
    if not v1:
        ca = last_core(t_core, crit)
        for b in range(N_BUCKETS):
            out[O_PHASE0 + b] += bucket[crit, ca, b]
        return
    init_end = 0
    send_end = 0
    for a in range(t_core.shape[1]):
        init_end = max(init_end, marks[crit, a, MARK_INIT])
        if first_copy[crit, a] >= 0:     # (an AIV that sent nothing holds no ack of its own)
            send_end = max(send_end, last_copy_ack[crit, a])
    send_end = max(send_end, init_end)
    synced = marks[crit, 0, V1_SYNCALL_MARK]
    out[O_PHASE_INIT] += init_end - start
    out[O_PHASE_SEND] += send_end - init_end
    out[O_PHASE_SYNC] += synced - send_end
    out[O_PHASE_REDUCE] += end - synced


@njit
def reach(c, copies_hop, egress_max, ingress_max, egress, ingress):
    """How soon after its issue the last copy can be visible, in cycles. The last remote copy
    of a die leaves its egress port after all of that die's remote copies (egress_max: the
    most of any die's, at `egress` cycles each), the last to reach a die's ingress port waits
    for all of that port's (ingress_max, at `ingress` each), each travels at least half the
    shortest hop its class could take (a local copy: the local latency)."""
    r = c[C_LAT_LOCAL] if copies_hop[0] else 0
    half = NEVER
    for h in range(1, N_HOPS):
        if copies_hop[h]:
            half = min(half, c[C_LAT_LOCAL + h] >> 1)
    if half < NEVER:
        r = max(r, egress_max + half + ingress, egress + half + ingress_max)
    return r


@njit(inline="always")
def op_floor(c, op, K):
    """What every configuration of `op` (DISPATCH, COMBINE) pays at the least on its way to its
    end beside its last copy's store and `reach`: its layout.FLOOR charges (TOPK's K times)."""
    x = 0
    for at, col, per in FLOOR_ROWS:
        if at == op:
            x += c[col] * (K if per == TOPK else 1)
    return x


@njit(inline="always")
def store_floor(c, at):
    """What a store of work kind `at` (layout.W_*) costs its AIV at the least: its STORE_WORK
    charges every such store pays (EACH) and its AIV's first window address (NEW_DEST,
    ADDRESS), each once, and its issue."""
    x = c[WORK_ISSUE[at]]
    for w, col, per in WORK_ROWS:
        if w == at and (per == EACH or per == NEW_DEST or per == ADDRESS):
            x += c[col]
    return x


@njit
def latency_bound(c, copies_hop, egress_max, ingress_max):
    """A dispatch latency no configuration can beat, in cycles: no copy is requested before
    Init and its store's own work (op_floor, store_floor), then `reach`, and the last is
    reordered."""
    return op_floor(c, DISPATCH, 1) + store_floor(c, W_COPY) + \
        reach(c, copies_hop, egress_max, ingress_max, c[C_COPY_EGRESS], c[C_COPY_INGRESS])


@njit
def return_bound(c, copies_hop, egress_max, ingress_max, K):
    """A combine latency no configuration can beat, in cycles: no returned copy is stored
    before Init and its store's own work (its read into UBuf, its quantization, its issue),
    then `reach`; the token whose copy is visible last is reduced after it, its K copies and
    itself (the smallest part of a split token)."""
    return op_floor(c, COMBINE, K) + store_floor(c, W_RETURN) + \
        reach(c, copies_hop, egress_max, ingress_max, c[C_RETURN_EGRESS], c[C_RETURN_INGRESS])


@njit(inline="always")
def core_stats(acc, cores):
    """Adds every AIV's send latency (its first copy's issue to its last copy's completion, if
    it sent one) and waiting to acc: [most, least, sum, AIVs that sent, waiting]."""
    wait, first_copy, last_copy_ack = cores.wait, cores.first_copy, cores.last_copy_ack
    R, A = wait.shape
    for d in range(R):
        for a in range(A):
            acc[4] += wait[d, a]
            if first_copy[d, a] >= 0:
                v = last_copy_ack[d, a] - first_copy[d, a]
                acc[0] = max(acc[0], v)
                acc[1] = min(acc[1], v)
                acc[2] += v
                acc[3] += 1


@njit
def put_marks(marks_out, marks, at):
    """Every AIV's phase marks into marks_out[die, core, at:] (a timeline's), element by element:
    a slice assignment would compile numpy's shape checks and their messages, seconds of a
    first run's compile."""
    R, A, n = marks.shape
    for d in range(R):
        for a in range(A):
            for x in range(n):
                marks_out[d, a, at + x] = marks[d, a, x]


@njit(inline="always")
def write_row(out, ends, acc, n_cores, copies_hop, qsteps, copies, sent, delivered, violations,
              collisions, bound, queued, recv_max, send_max):
    """The columns every op writes alike: ends[d], when die d is done; acc: core_stats'; n_cores:
    the AIVs of every die; recv_max, send_max: the most token copies a die takes in and
    sends."""
    latency = ends.max()
    out[O_LATENCY] = latency
    out[O_LATENCY_MEAN] = ends.sum() / ends.shape[0]
    out[O_SLOWEST_DIE] = critical(ends)
    out[O_MEDIAN_DIE] = np.median(ends)
    out[O_RECV_MAX] = recv_max
    out[O_SEND_MAX] = send_max
    out[O_COPIES_TOTAL] = copies
    for h in range(N_HOPS):
        out[O_COPIES_HOP0 + h] = copies_hop[h]
    n_send = acc[3]
    out[O_SEND_MAX_CORE] = acc[0]
    out[O_SEND_MEAN_CORE] = acc[2] / n_send if n_send else 0.0
    out[O_SEND_SPREAD_CORE] = acc[0] - acc[1] if n_send else 0
    out[O_WAIT] = acc[4] / n_cores
    out[O_INGRESS_QUEUE] = queued
    out[O_QSEARCH_STEPS] = qsteps
    out[O_SENTINEL_COLLISIONS] = collisions
    out[O_SENT] = sent
    out[O_DELIVERED] = delivered
    out[O_VIOLATIONS] = violations
    out[O_BOUND] = bound


@njit(inline="always")
def critical(ends):
    """The die on the critical path: the last to end, the lowest-numbered on a tie."""
    crit = 0
    for d in range(ends.shape[0]):
        if ends[d] > ends[crit]:
            crit = d
    return crit


@njit
def new_stats():
    acc = np.zeros(5, np.int64)
    acc[1] = NEVER
    return acc


@njit
def result_row(out, cores, ends, sched, c, by_core, sent, delivered, violations, collisions,
               queued):
    """Writes out[N_OUT]: every result of a dispatch. sent, delivered, violations: copy stores
    the egress ports served, copies the receivers took once, copies read before visible (for
    the host's invariant checks)."""
    crit = critical(ends)
    phases(out, cores, crit, ends[crit], by_core, c)
    out[O_DISPATCH] = ends[crit]
    out[O_EXPERT] = out[O_COMBINE] = 0
    acc = new_stats()
    core_stats(acc, cores)
    R = ends.shape[0]
    write_row(out, ends, acc, cores.wait.size, sched.copies_hop, sched.qsteps_max,
              sched.cfirst[R], sent, delivered, violations, collisions,
              latency_bound(c, sched.copies_hop, sched.max_out * c[C_COPY_EGRESS],
                            sched.max_in * c[C_COPY_INGRESS]), queued,
              busiest(sched.ecnt, R), most_copies(sched.cfirst))


@njit
def combine_row(out, cores, ends, starts, rsched, c, v1, K, sent, delivered, violations,
                collisions, queued):
    """Writes out[N_OUT]: every result of a combine on its return schedule (rsched), die d
    launched at starts[d] (programs.launch_starts: the critical die's offset counts in its
    Init)."""
    crit = critical(ends)
    for b in range(N_BUCKETS):
        out[O_PHASE0 + b] = 0
    combine_phases(out, cores, crit, starts[crit], ends[crit], v1)
    out[O_PHASE_INIT] += starts[crit]
    out[O_DISPATCH] = out[O_EXPERT] = 0
    out[O_COMBINE] = ends[crit]
    acc = new_stats()
    core_stats(acc, cores)
    R = ends.shape[0]
    write_row(out, ends, acc, cores.wait.size, rsched.copies_hop, rsched.qsteps_max,
              rsched.cfirst[R], sent, delivered, violations, collisions,
              bound_of_return(c, rsched, K), queued, most_copies(rsched.cfirst),
              busiest(rsched.ecnt, R))


@njit(inline="always")
def bound_of_return(c, rsched, K):
    return return_bound(c, rsched.copies_hop, rsched.max_out * c[C_RETURN_EGRESS],
                        rsched.max_in * c[C_RETURN_INGRESS], K)


@njit
def layer_row(out, dcores, dends, sched, ccores, ends, starts, experts, rsched, c, m, K,
              sent, delivered, violations, collisions, queued):
    """Writes out[N_OUT]: every result of a layer. The critical path runs through the die that
    ends its combine last: its dispatch (dends: when each die's dispatch ended), its experts'
    time and its combine, each split into its phases (added up, expert time apart)."""
    crit = critical(ends)
    phases(out, dcores, crit, dends[crit], by_core(m), c)
    combine_phases(out, ccores, crit, starts[crit], ends[crit], v1_phases(m))
    out[O_DISPATCH] = dends[crit]
    out[O_EXPERT] = experts[crit]
    out[O_COMBINE] = ends[crit] - starts[crit]
    acc = new_stats()
    core_stats(acc, dcores)
    core_stats(acc, ccores)
    # the die that starts its combine last does so after the dispatch could end and its
    # experts' least time, and then runs at least its Init and a token's reduction
    first = latency_bound(c, sched.copies_hop, sched.max_out * c[C_COPY_EGRESS],
                          sched.max_in * c[C_COPY_INGRESS]) + c[C_EXPERT] + \
        op_floor(c, COMBINE, K)
    # a die takes in and sends, over both ops, its received copies and its own
    most = max(busiest(sched.ecnt, ends.shape[0]), most_copies(sched.cfirst))
    write_row(out, ends, acc, dcores.wait.size, sched.copies_hop,
              max(sched.qsteps_max, rsched.qsteps_max), sched.cfirst[ends.shape[0]], sent,
              delivered, violations, collisions, max(first, bound_of_return(c, rsched, K)),
              queued, most, most)
