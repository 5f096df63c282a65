"""deepep_ll: DeepEP's low-latency kernels as its June 2025 table was measured (commit d8dd185,
`csrc/kernels/internode_ll.cu`, lines below): a put per copy, a count per expert behind its
copies on the expert's queue pair, fixed slots per (local expert, source); the combine's puts
with a flag per expert behind them, a grid sync, then each token reduced (docs/model.md,
"DeepEP's low-latency kernels")."""

from ..layout import BALANCED, SP, THEN_ISSUED, THEN_NEXT, TOKEN_ORDER

# The mechanisms it uses (kernels/protocols: what each means), each with its source line.
MECHANISMS = {
    "count_group": 0,             # no count group: every warp group sends and receives
    "counts_after": THEN_ISSUED,  # L164 finish counter += 1 per put; L217 count once all issued
    "fixed_slots": 1,             # L143 slot = atomicAdd(expert's counter); L266-290 receive
    "per_expert": 1,              # L217-221 a count per (expert, rank); L440 a flag per expert
    "signalled_copies": 0,        # L266 the receiver spins on the count alone
    "ordered": 1,                 # L154 puts and L221 the count on the expert's QP, in order
    "sync": SP,                   # L221 count sent as -n-1, never 0; L266 spins while 0
    "token_preload": 1,           # L92-130 a token read and cast to FP8 once, copies sent after
    "deal": TOKEN_ORDER,          # L92 an SM per token (warp k sends its copy k)
    "header_bytes": 16,           # L71 an int4 before the payload: the source token's index
    "expert_cores": 3,            # L316-320 3 warp groups per SM on ceil(experts / 3) SMs
    "return_deal": BALANCED,      # L395-411 a warp group per (local expert, destination)
    "return_status": 1,           # L440 a flag per expert; L458 spin on every flag; L461 grid sync
    "status_after": THEN_NEXT,    # L440 the flag on the same QP as L425's puts, unfenced
    "hidden_split": 0,            # L466 an SM reduces whole tokens, its threads over hidden
}
