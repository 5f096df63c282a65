"""A layer, and the parallel batches of configurations: dispatch, combine, or a layer
(dispatch, each die's experts, combine), as the twin's layer.py runs them.

`layer` runs dispatch's stages, then each die's expert time, then combine's stages from each
die's own start; `simulate_batch` runs many configurations, each op's rows through that op's
batch kernel in parallel (one run of configurations that share their schedules per prange
iteration, rows written only by their own iteration). One configuration is a batch of one.
"""

import numba
import numpy as np

from .combine import combine, combine_stages
from .dispatch import dispatch, dispatch_stages
from .jit import njit
from .layout import (C_EXPERT, C_EXPERT_COPY, C_NPU_DIES, C_RAILS, C_TIER1_DIES, COMBINE, LAYER,
                     DISPATCH, EXPERT_SHIFT, N_PARAMS, N_PORTS, N_TIERS, P_CDF_LEN, P_CDF_START,
                     P_EXPERTS, P_OP, P_PROTOCOL, P_RANKS, P_ROUTING, P_SYNC, P_TOPK, P_TRACE,
                     TRACE)
from .protocols import mechanisms
from .results import layer_row
from .routing import copy_starts, route
from .schedule import return_schedule, schedule


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
    dcores, dends, dsent, ddelivered, dviolations, dcollisions, dqueued = dispatch_stages(
        p, c, chance, sched, egress_free, ingress_free, marks_out)
    experts = np.empty(R, np.int64)
    starts = np.empty(R, np.int64)
    for d in range(R):
        n = rsched.ecnt[(d + 1) * EL] - rsched.ecnt[d * EL]
        experts[d] = c[C_EXPERT] + ((n * c[C_EXPERT_COPY] + (1 << EXPERT_SHIFT) - 1)
                                    >> EXPERT_SHIFT)
        starts[d] = dends[d] + experts[d]
    ccores, ends, sent, delivered, violations, collisions, queued = combine_stages(
        p, c, chance, rsched, starts, egress_free, ingress_free, marks_out)
    layer_row(out, dcores, dends, sched, ccores, ends, starts, experts, rsched, c,
              mechanisms(p[P_PROTOCOL]), p[P_TOPK], dsent + sent, ddelivered + delivered,
              dviolations + violations, dcollisions + collisions, max(dqueued, queued))


# What the schedules read besides the parameters (all of them but sync): the fabric's shape.
SCHEDULE_COSTS = (C_NPU_DIES, C_RAILS, *(C_TIER1_DIES + k for k in range(N_TIERS)))


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


@njit(inline="always")
def runs_of(params, costs):
    """Where each run of consecutive rows with one schedule starts (same_schedule: a
    configuration's sync variants, which a caller puts side by side), and how many runs."""
    n = params.shape[0]
    starts = np.empty(n + 1, np.int64)
    runs = 0
    for i in range(n):
        if i == 0 or not same_schedule(params, costs, i - 1, i):
            starts[runs] = i
            runs += 1
    starts[runs] = n
    return starts, runs


@njit(inline="always")
def routed(p, cdf_values, trace_values, batch_values):
    """Row p's routing (routing.route) and where each die's copies start in it
    (routing.copy_starts), from its slices of the batch's weights, traces and tokens per
    die."""
    cfirst = copy_starts(p, batch_values)
    cdf = cdf_values[p[P_CDF_START]:p[P_CDF_START] + p[P_CDF_LEN]]
    if p[P_ROUTING] == TRACE:
        tr = trace_values[p[P_TRACE]:p[P_TRACE] + cfirst[p[P_RANKS]]]
    else:
        tr = trace_values[0:0]
    return route(p, cdf, tr, cfirst), cfirst


def op_batch(op):
    """The batch kernel of one op (DISPATCH, COMBINE or LAYER): row i of `out` from row i of
    the inputs only. Consecutive rows with one schedule share its computation, a sixth of a
    configuration's time; one prange iteration runs each such run of rows and writes only
    theirs. marks_out: [ranks, cores, N_MARKS + N_CMARKS] for a batch of one configuration
    whose timeline is asked for, else empty.

    One kernel per op, so that an op is compiled only when a batch first holds it: `op` is a
    constant of the kernel (a closure's integer, part of its cache key), and Numba drops the
    branches of the other ops before it types any call in them."""
    @njit(parallel=True)
    def batch(params, costs, chances, cdf_values, trace_values, batch_values, out, marks_out):
        starts, runs = runs_of(params, costs)
        for r in numba.prange(runs):
            lo = starts[r]
            experts_of, cfirst = routed(params[lo], cdf_values, trace_values, batch_values)
            if op != COMBINE:
                sched = schedule(params[lo], costs[lo], experts_of, cfirst)
            if op != DISPATCH:
                rsched = return_schedule(params[lo], costs[lo], experts_of, cfirst)
            for i in range(lo, starts[r + 1]):
                if op == DISPATCH:
                    dispatch(params[i], costs[i], chances[i], sched, out[i], marks_out)
                elif op == COMBINE:
                    combine(params[i], costs[i], chances[i], rsched, out[i], marks_out)
                else:
                    layer(params[i], costs[i], chances[i], sched, rsched, out[i], marks_out)
    return batch


BATCH = {op: op_batch(op) for op in (DISPATCH, COMBINE, LAYER)}


def simulate_batch(params, costs, chances, cdf_values, trace_values, batch_values, out,
                   marks_out=None):
    """Many configurations, each row through its op's batch kernel (BATCH: compiled when
    first asked for); row i of `out` from row i of the inputs only (kernel_io.prepare makes
    them). marks_out: every AIV's
    phase boundaries of a batch of one configuration (kernels of any op write dispatch's, then
    combine's), else None."""
    marks = np.zeros((0, 0, 0), np.int64) if marks_out is None else marks_out
    ops = params[:, P_OP]
    for op, kernel in BATCH.items():
        rows = np.flatnonzero(ops == op)
        if not rows.size:       # an op no row runs is not compiled (an empty batch runs none)
            continue
        if rows.size == params.shape[0]:
            kernel(params, costs, chances, cdf_values, trace_values, batch_values, out, marks)
        else:
            part = np.zeros((rows.size, out.shape[1]))
            kernel(params[rows], costs[rows], chances[rows], cdf_values, trace_values,
                   batch_values, part, marks)
            out[rows] = part
