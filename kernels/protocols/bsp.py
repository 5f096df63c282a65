"""bsp: CANN EP's MoE dispatch and combine, the paper's baseline (Figures 2 and 5(a)): every
core (AIV) runs every phase, SyncAll between phases; its combine is CANN's V1."""

from ..layout import EXPERT_BLOCK, READ, THEN_FENCE, THEN_SYNCALL

# The mechanisms it uses (kernels/protocols: what each means), each with its source.
MECHANISMS = {
    "count_group": 0,                  # every AIV counts, sends and polls (Fig. 2's phases)
    "counts_after": THEN_SYNCALL,      # SyncAll before SendFlag & Count (Fig. 2; Section 2.3)
    "fixed_slots": 0,                  # SyncAll, CalCumSum, SyncAll place the copies (Fig. 2)
    "per_expert": 0,             # a count message and a status per destination
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
