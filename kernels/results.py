"""A configuration's output row (layout.O_*): latency, phases on the critical path, send
latencies, waits, and the counts the host checks its invariants on (ubepsim.sweep.kernel_io)."""

from .jit import njit
from .layout import (B_CUMSUM, B_INIT, B_REORDER, B_SEND, B_SYNC, C_COPY_EGRESS, C_COPY_INGRESS,
                     C_COPY_ISSUE, C_INIT, C_LAT_LOCAL, C_LOCAL_COPY, C_SYNCALL, MARK_BSP_CUMSUM,
                     MARK_BSP_SYNC_CUMSUM, MARK_BSP_SYNC_SENT, MARK_BSP_SYNC_VERIFIED, MARK_INIT,
                     N_HOPS, NEVER, O_BOUND, O_COLLISIONS, O_COPIES_HOP0, O_COPIES_TOTAL,
                     O_DELIVERED, O_LATENCY, O_LATENCY_MEAN, O_PH_CUMSUM, O_PH_INIT, O_PH_REORDER,
                     O_PH_SEND, O_PH_SYNC, O_QSTEPS, O_SEND_MAX, O_SEND_MEAN, O_SEND_SPREAD,
                     O_SENT, O_VIOLATIONS, O_WAIT)


@njit
def phases(out, aivs, crit, latency, ubep, c):
    """The time of each phase on the critical path of die `crit`, the last to finish."""
    t_aiv, bucket, marks = aivs.t, aivs.bucket, aivs.marks
    A = t_aiv.shape[1]
    if ubep:
        # the last AIV of the last die: its own time, bucket by bucket
        ca = 0
        for a in range(A):
            if t_aiv[crit, a] > t_aiv[crit, ca]:
                ca = a
        out[O_PH_INIT] = bucket[crit, ca, B_INIT]
        out[O_PH_SEND] = bucket[crit, ca, B_SEND]
        out[O_PH_SYNC] = bucket[crit, ca, B_SYNC]
        out[O_PH_CUMSUM] = bucket[crit, ca, B_CUMSUM]
        out[O_PH_REORDER] = bucket[crit, ca, B_REORDER]
        return
    # the last die, phase by phase: its SyncAlls and what they wait for count as sync. The
    # barriers' times are every AIV's; Init and CalCumSum end per AIV, the last of them counts
    init_end = 0
    cumsum_end = 0
    for a in range(A):
        init_end = max(init_end, marks[crit, a, MARK_INIT])
        cumsum_end = max(cumsum_end, marks[crit, a, MARK_BSP_CUMSUM])
    send_end = marks[crit, 0, MARK_BSP_SYNC_SENT] - c[C_SYNCALL]
    verified = marks[crit, 0, MARK_BSP_SYNC_VERIFIED]
    summed = marks[crit, 0, MARK_BSP_SYNC_CUMSUM]
    out[O_PH_INIT] = init_end
    out[O_PH_SEND] = send_end - init_end
    out[O_PH_SYNC] = (verified - send_end) + (summed - cumsum_end)
    out[O_PH_CUMSUM] = cumsum_end - verified
    out[O_PH_REORDER] = latency - summed


@njit
def latency_bound(c, copies_hop, egress_max, ingress_max):
    """A latency no configuration can beat, in cycles. No copy is requested before Init and its
    issue. The last remote copy of a die leaves its egress port after all of that die's remote
    copies (egress_max: the most of any die's), the last to reach a die's ingress port waits
    for all of that port's (ingress_max), each travels at least half the shortest hop its class
    could take (a local copy: the local latency) before it is visible, and it is then
    reordered by a local copy."""
    reach = c[C_LAT_LOCAL] if copies_hop[0] else 0
    half = NEVER
    for h in range(1, N_HOPS):
        if copies_hop[h]:
            half = min(half, c[C_LAT_LOCAL + h] >> 1)
    if half < NEVER:
        reach = max(reach, egress_max + half + c[C_COPY_INGRESS],
                    c[C_COPY_EGRESS] + half + ingress_max)
    return c[C_INIT] + c[C_COPY_ISSUE] + reach + c[C_LOCAL_COPY]


@njit
def result_row(out, aivs, ends, sched, c, ubep, copies, sent, delivered, violations,
               collisions):
    """Writes out[N_OUT]: every result of the configuration. copies: token copies of the
    configuration; sent, delivered, violations: copy stores the egress ports served, copies the
    receivers took once, copies read before visible (for the host's invariant checks)."""
    wait, first_copy, last_copy_ack = aivs.wait, aivs.first_copy, aivs.last_copy_ack
    copies_hop = sched.copies_hop
    R, A = wait.shape
    crit = 0
    for d in range(R):
        if ends[d] > ends[crit]:
            crit = d
    latency = ends[crit]
    phases(out, aivs, crit, latency, ubep, c)
    send_max = 0
    send_min = NEVER
    send_sum = 0
    n_send = 0
    wait_sum = 0
    for d in range(R):
        for a in range(A):
            wait_sum += wait[d, a]
            if first_copy[d, a] >= 0:
                v = last_copy_ack[d, a] - first_copy[d, a]
                send_max = max(send_max, v)
                send_min = min(send_min, v)
                send_sum += v
                n_send += 1
    out[O_LATENCY] = latency
    out[O_LATENCY_MEAN] = ends.sum() / R
    out[O_COPIES_TOTAL] = copies
    for h in range(N_HOPS):
        out[O_COPIES_HOP0 + h] = copies_hop[h]
    out[O_SEND_MAX] = send_max
    out[O_SEND_MEAN] = send_sum / n_send if n_send else 0.0
    out[O_SEND_SPREAD] = send_max - send_min if n_send else 0
    out[O_WAIT] = wait_sum / (R * A)
    out[O_QSTEPS] = sched.qsteps_max
    out[O_COLLISIONS] = collisions
    out[O_SENT] = sent
    out[O_DELIVERED] = delivered
    out[O_VIOLATIONS] = violations
    out[O_BOUND] = latency_bound(c, copies_hop, sched.max_out * c[C_COPY_EGRESS],
                                 sched.max_in * c[C_COPY_INGRESS])
