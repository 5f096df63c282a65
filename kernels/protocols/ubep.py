"""ubep: UBEP's kernel decomposition (the paper's Figure 5(b), Sections 3.1-3.4): a CalCumSum
group of cores beside the token group, point-to-point Data-as-Flag signals, no SyncAll. Beside
its mechanisms, the code it alone runs: the count group's offsets (`publish_offsets`), which its
receive (kernels/receive.py) calls after the group's polls."""

import numpy as np

from ..jit import njit
from ..layout import C_LAT_LOCAL, C_SIGNAL_ISSUE, READ, RECEIVE_GROUP

# The mechanisms it uses (kernels/protocols: what each means), each with its source.
MECHANISMS = {
    "receive": RECEIVE_GROUP,  # the CalCumSum group, `cumsum_cores` (Fig. 5(b), Section 3.1)
    "counts_after": 0,         # the group counts beside the token group, in one phase
    "per_expert": 0,           # a count message per destination
    "signalled_copies": 1,     # each copy is its own flag, polled before it is taken (Section 3.4)
    "ordered": 0,              # each copy's signal is polled, in any order
    "sync": READ,              # any Data-as-Flag variant: sw, tff, dc, sp (Section 3.4)
    "token_preload": 1,        # the token group loads its tokens into UBuf once, at Init
    "deal": READ,              # `schedule`: homogenized is the paper's (Section 3.3)
    "header_bytes": 0,         # a copy is its token (a tff flag is in its blocks)
    "expert_cores": 0,         # the profile's AIVs
    "return_deal": READ,       # combine deals its returns by `schedule`, as dispatch
    "return_status": 0,        # each token reduced once its copies' signals are seen
    "status_after": 0,         # (no statuses)
    "hidden_split": 0,         # a token is reduced whole
}


@njit(inline="always")
def publish_offsets(cores, C, c):
    """A count group: each die's (AIVs below C, UBEP's CalCumSum group) publishes the offsets
    with one local store once its last AIV is done. Returns when they are visible to the token
    AIVs, per die."""
    t_core = cores.t
    offsets = np.empty(t_core.shape[0], np.int64)
    for d in range(t_core.shape[0]):
        last = 0
        for j in range(C):
            last = max(last, t_core[d, j])
        offsets[d] = last + c[C_SIGNAL_ISSUE] + c[C_LAT_LOCAL]
    return offsets
