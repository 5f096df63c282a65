"""One configuration of any op, and the parallel batch of configurations: dispatch, combine,
or a layer (dispatch, each die's experts, combine), as the twin's layer.py runs them.

`layer` runs dispatch's stages, then each die's expert time, then combine's stages from each
die's own start; `simulate` routes and schedules one configuration and runs its op;
`simulate_batch` runs many configurations in parallel (one run of configurations that share
their schedules per prange iteration, rows written only by their own iteration).
"""

import numba
import numpy as np

from .combine import combine, combine_stages
from .dispatch import dispatch, dispatch_stages
from .jit import njit
from .layout import (C_EXPERT, C_EXPERT_COPY, C_NIC_FROM, C_NPU_DIES, C_TIER1_DIES, COMBINE,
                     DISPATCH, EXPERT_SHIFT, N_PARAMS, N_PORTS, N_TIERS, P_BATCH, P_CDF_LEN, P_CDF_START, P_EXPERTS, P_OP,
                     P_PROTOCOL, P_RANKS, P_ROUTING, P_SYNC, P_TOPK, P_TRACE, TRACE, UBEP)
from .results import layer_row
from .routing import route
from .schedule import no_schedule, return_schedule, schedule


@njit
def layer(p, c, chance, sched, rsched, out, marks_out):
    """One configuration's layer: dispatch on its schedule; each die's experts for c's expert
    cycles and expert_copy per copy it received (in 1/1024 cycles, the sum rounded up), from
    when its last AIV finished the dispatch; then its combine from then (rsched: the return
    schedule), its ports taking combine's stores after the dispatch's. Writes out[N_OUT]."""
    R, E = p[P_RANKS], p[P_EXPERTS]
    EL = E // R
    egress_free = np.zeros((R, N_PORTS), np.int64)
    ingress_free = np.zeros((R, N_PORTS), np.int64)
    daivs, dends, dsent, ddelivered, dviolations, dcollisions, dqueued = dispatch_stages(
        p, c, chance, sched, egress_free, ingress_free, marks_out)
    experts = np.empty(R, np.int64)
    starts = np.empty(R, np.int64)
    for d in range(R):
        n = rsched.ecnt[(d + 1) * EL] - rsched.ecnt[d * EL]
        experts[d] = c[C_EXPERT] + ((n * c[C_EXPERT_COPY] + (1 << EXPERT_SHIFT) - 1)
                                    >> EXPERT_SHIFT)
        starts[d] = dends[d] + experts[d]
    caivs, ends, sent, delivered, violations, collisions, queued = combine_stages(
        p, c, chance, rsched, starts, egress_free, ingress_free, marks_out)
    K = p[P_TOPK]
    layer_row(out, daivs, dends, sched, caivs, ends, starts, experts, rsched, c,
              p[P_PROTOCOL] == UBEP, K, R * p[P_BATCH] * K, dsent + sent,
              ddelivered + delivered, dviolations + violations, dcollisions + collisions,
              max(dqueued, queued))


@njit(inline="always")
def run_op(p, c, chance, sched, rsched, out, marks_out):
    """One configuration's op on its schedules (sched: dispatch's, rsched: combine's; the one
    an op does not run may be schedule.no_schedule's)."""
    op = p[P_OP]
    if op == DISPATCH:
        dispatch(p, c, chance, sched, out, marks_out)
    elif op == COMBINE:
        combine(p, c, chance, rsched, out, marks_out)
    else:
        layer(p, c, chance, sched, rsched, out, marks_out)


@njit(inline="always")
def schedules(p, c, experts_of):
    """The schedules p's op runs on: dispatch's (schedule.schedule) unless it is combine alone,
    combine's (schedule.return_schedule) unless it is dispatch alone."""
    op = p[P_OP]
    sched = schedule(p, c, experts_of) if op != COMBINE else no_schedule()
    rsched = return_schedule(p, c, experts_of) if op != DISPATCH else no_schedule()
    return sched, rsched


@njit
def simulate(p, c, chance, cdf, trace, out, marks_out):
    """One configuration on its own schedules. cdf: cumulative expert weights (empty: uniform),
    trace: routing [ranks * batch * topk] (empty unless routing = trace). If marks_out has shape
    [ranks, aivs, N_MARKS + N_CMARKS], every AIV's phase boundaries: dispatch's, then
    combine's."""
    sched, rsched = schedules(p, c, route(p, cdf, trace))
    run_op(p, c, chance, sched, rsched, out, marks_out)


# What the schedules read besides the parameters (all of them but sync): the fabric's shape.
SCHEDULE_COSTS = (C_NPU_DIES, *(C_TIER1_DIES + k for k in range(N_TIERS)))


@njit
def same_schedule(params, costs, i, j):
    """Whether rows i and j have the same schedules: they differ in nothing route and the
    schedules read."""
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
        sched, rsched = schedules(p, costs[lo], route(p, cdf, tr))
        for i in range(lo, starts[r + 1]):
            run_op(params[i], costs[i], chances[i], sched, rsched, out[i], no_marks)
