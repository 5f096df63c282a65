"""bsp: CANN EP's MoE dispatch and combine, the paper's baseline (Figures 2 and 5(a)): every
core (AIV) runs every phase, SyncAll between phases; its combine is CANN's V1. Beside its
mechanisms, the code it alone runs: CalCumSum between two SyncAlls (`bsp_cumsum`), which its
receive (kernels/receive.py) calls where RECEIVE says RECEIVE_CUMSUM."""

from ..jit import njit
from ..layout import (B_CUMSUM, C_PREFIX, C_SYNCALL, EXPERT_BLOCK, READ, RECEIVE_CUMSUM,
                      THEN_FENCE, THEN_SYNCALL)
from ..sync import syncall

# The mechanisms it uses (kernels/protocols: what each means), each with its source.
MECHANISMS = {
    "receive": RECEIVE_CUMSUM,         # Flag verification, SyncAll, CalCumSum, SyncAll (Fig. 2)
    "counts_after": THEN_SYNCALL,      # SyncAll before SendFlag & Count (Fig. 2; Section 2.3)
    "per_expert": 0,                   # a count message and a status per destination
    "signalled_copies": 0,             # what is polled is the counts, behind the SyncAll
    "ordered": 0,                      # ordered by the barrier, not by a queue
    "sync": READ,                      # the counts' flags: any Data-as-Flag variant (Section 3.4)
    "token_preload": 0,                # CANN's send loop loads and counts each copy's token
    "deal": READ,                      # `schedule` (CANN's own: expert_block, Section 3.3)
    "header_bytes": 0,                 # a copy is its token
    "expert_cores": 0,                 # the profile's AIVs
    "return_deal": EXPERT_BLOCK,       # V1 splits the returns by destination
    "return_status": 1,                # V1's SetStatus to each destination, then WaitDispatch
    "status_after": THEN_FENCE,        # V1's PipeBarrier before each status
    "hidden_split": 1,                 # V1's reduce splits a token's hidden over spare AIVs
}


@njit(inline="always")
def bsp_cumsum(cores, c, entries):
    """RECEIVE_CUMSUM's middle (CANN EP), on every die: SyncAll, CalCumSum over the `entries`
    counts (ranks x experts per die) split evenly over every AIV, SyncAll."""
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
