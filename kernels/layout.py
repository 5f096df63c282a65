"""Every code, column and bit layout the kernel stages share, and the stages' named results.

Numba reads module globals as compile-time constants, so these cost nothing at run time; the
host (ubepsim.sweep.kernel_io, ubepsim.sweep.costs) builds the kernel's input matrices and reads
its output rows by the same names.
"""

from collections import namedtuple

# Protocol, sync, schedule and routing codes: the values of ubepsim.sweep.params' IntEnums
# (tests/test_costs.py holds them equal).
BSP, UBEP = 0, 1
SW, TFF, DC, SP = 0, 1, 2, 3
EXPERT_BLOCK, BALANCED, HOMOGENIZED = 0, 1, 2
UNIFORM, ZIPF, HOT, TRACE = 0, 1, 2, 3
DISPATCH, COMBINE, LAYER = 0, 1, 2

# Hop classes, by the code schedule.hop_classes gives a (source, destination) pair: the die
# itself, the other die of its NPU, then one more per switch tier climbed (paper Table 2). The
# host's hop classes are these (ubepsim.sweep.profile: one latency_ns key per class).
HOP_CLASSES = ("local", "intra_npu", "one_hop", "two_hop", "three_hop")
N_HOPS = len(HOP_CLASSES)

# Store kinds: the low two bits of a program word, a flag and a checksum (the signals) odd.
K_COPY, K_FLAG, K_COUNT, K_CHECKSUM = 0, 1, 2, 3
# Per-AIV time buckets: the phase each cycle of an AIV is spent in (B_REDUCE: combine's).
B_INIT, B_SEND, B_SYNC, B_CUMSUM, B_REORDER, B_REDUCE = 0, 1, 2, 3, 4, 5
N_BUCKETS = 6

# Phase marks: each AIV's clock at the boundaries of its phases, appended in this order (the
# timeline's intervals, ubepsim.sweep.model.TIMELINE_PHASES). Every AIV starts at 0 and ends
# Init.
MARK_START, MARK_INIT = 0, 1
# A bsp AIV then (paper Figure 2): Token-Sending, SyncAll, SendFlag & Count, Flag verification,
# SyncAll, CalCumSum, SyncAll, Token-Reordering. A ubep AIV has fewer marks: sending and
# polling (its counts', or the offsets and then Token-Reordering).
(MARK_BSP_SENT, MARK_BSP_SYNC_SENT, MARK_BSP_COUNTED, MARK_BSP_VERIFIED, MARK_BSP_SYNC_VERIFIED,
 MARK_BSP_CUMSUM, MARK_BSP_SYNC_CUMSUM, MARK_BSP_REORDERED) = range(2, 10)
N_MARKS = MARK_BSP_REORDERED + 1
# Combine's marks, in an array of their own (a layer's timeline puts them after dispatch's):
# start (the die's combine start), Init, Token-Sending; a bsp AIV then its fence and statuses,
# its status polls, the SyncAll and the reduction (CANN's V1); a ubep AIV its reduction.
CMARK_START, CMARK_INIT, CMARK_SENT = 0, 1, 2
CMARK_BSP_STATUS, CMARK_BSP_POLLED, CMARK_BSP_SYNC, CMARK_BSP_REDUCED = 3, 4, 5, 6
CMARK_UBEP_REDUCED = 3
N_CMARKS = CMARK_BSP_REDUCED + 1

# Columns of the parameter matrix (ubepsim.sweep.kernel_io.prepare builds it).
(P_RANKS, P_BATCH, P_TOPK, P_EXPERTS, P_AIVS, P_CUMSUM, P_PROTOCOL, P_SYNC, P_SCHEDULE,
 P_ROUTING, P_SEED, P_WKEY, P_CDF_START, P_CDF_LEN, P_TRACE, P_OP) = range(16)
N_PARAMS = 16

# Columns of the cost matrix (ubepsim.sweep.costs.lower fills them by these names): integer
# cycles, bytes or blocks per configuration. Column "x" is C_X below, made from this tuple so
# that the two never part; the hop latencies follow in hop class order, from C_LAT_LOCAL.
COSTS = (
    "token_bytes", "copy_blocks", "count_blocks",
    "copy_issue", "copy_egress", "copy_ingress",
    "count_issue", "count_egress", "count_ingress",
    "signal_issue", "signal_egress", "signal_ingress",
    "local_copy", "copy_verify", "count_verify", "copy_reset", "count_reset",
    "vcount", "prefix", "init", "syncall", "blocks_in_flight", "timeout", "poll",
    "dest_switch", "count_chain", "status_poll",
    "npu_dies", "tier1", "tier2",
    *(f"lat_{h}" for h in HOP_CLASSES),
    # combine (docs/model.md, "Combine"): a returned copy's bytes, blocks and store costs, the
    # sender's read of the expert's output into UBuf, the int8 quantization, the reducer's
    # check and re-arm of its blocks; the reduction of a token's copy and of the token itself
    # over the elements of one AIV (bsp splits a token's hidden dimension over reduce_split
    # AIVs: the first parts ..., the last part ..._last); a die's expert time in a layer:
    # fixed cycles, and per copy received in 1/1024 cycles (EXPERT_SHIFT)
    "return_bytes", "return_blocks", "return_issue", "return_egress", "return_ingress",
    "return_load", "quant", "return_verify", "return_reset",
    "reduce_copy", "reduce_token", "reduce_copy_last", "reduce_token_last", "reduce_split",
    "expert", "expert_copy",
)
globals().update({f"C_{name.upper()}": i for i, name in enumerate(COSTS)})
N_COSTS = len(COSTS)
EXPERT_SHIFT = 10   # expert_copy is in 1/1024 cycles per copy

# Columns of the output row.
(O_LATENCY, O_LATENCY_MEAN, O_COPIES_TOTAL, O_COPIES_HOP0) = (0, 1, 2, 3)
O_SEND_MAX = O_COPIES_HOP0 + N_HOPS
(O_SEND_MEAN, O_SEND_SPREAD, O_WAIT, O_PH_INIT, O_PH_SEND, O_PH_SYNC, O_PH_CUMSUM, O_PH_REORDER,
 O_QSTEPS, O_COLLISIONS, O_SENT, O_DELIVERED, O_VIOLATIONS, O_BOUND) = range(O_SEND_MAX + 1,
                                                                              O_SEND_MAX + 15)
# Combine's reduction phase on the critical path; a layer's split of it: the last die's dispatch
# (until its last AIV finished), its experts' time and its combine.
O_PH_REDUCE, O_DISPATCH, O_EXPERT, O_COMBINE = range(O_BOUND + 1, O_BOUND + 5)
N_OUT = O_COMBINE + 1

# Egress requests are ordered by (time, AIV): both packed in one key, the AIV in the low bits.
AIV_BITS = 13   # aivs <= 4096
MAX_TIME = 1 << (63 - AIV_BITS)   # times stay below it: ubepsim.sweep.kernel_io.check_time_bound
# A program word: the store id above SID_SHIFT, then the new-destination bit (the store goes to
# another die than its AIV's store before it: it first loads that die's window address), then
# the destination (ranks <= 16384), then the kind in the low two bits.
SWITCH_BIT = 16
SID_SHIFT = SWITCH_BIT + 1
DEST_MASK = (1 << (SWITCH_BIT - 2)) - 1
RADIX_BITS = 13   # widest digit of the ingress radix sort
KEY_BITS = 62     # bits an ingress sort key may use: arrival << slot_bits | slot, non-negative
NEVER = 9223372036854775807   # a time after every time
# A store's arrival word (Stores.arr): arrival at the ingress port << 2 | kind; of a store to
# its own die, LOCAL - kind (below every arrival << 2 | kind); of a copy a receiver has taken,
# TAKEN, which is no copy's value, so that a second take is no delivery.
LOCAL = -1
TAKEN = LOCAL - 4

# Per-AIV state of the egress event loop: one row per AIV of the die being simulated.
(S_T, S_SIG, S_SW, S_HEAD, S_N, S_OUT, S_MAX_ACK, S_PC, S_END, S_FIRST, S_LAST_ACK,
 S_COPIES) = range(12)
S_WIDTH = 16   # a row per AIV, two whole cache lines
# Per-kind costs of a store: a row of the kind table per kind. The table is flat, so that the
# event loop indexes it with a constant stride (a power of two) rather than a runtime shape.
KC_PRE, KC_ISSUE, KC_BLOCKS, KC_EGRESS, KC_FENCE, KC_SWITCH = range(6)
KC_WIDTH = 8

# Stage results. Numba builds and unpacks these in compiled code (the classes are module
# globals), so a stage hands its arrays on by name rather than by position.

# schedule.schedule: what a configuration's sync variants share. R ranks, M copies per die,
# NS token AIVs. ecnt[e]: where expert e's received copies start in receive order (expert,
# source, copy); hops[s * R + d]: the hop class from die s to die d; xdest, xslot[s * M + x]:
# die s's AIV lists, position by position: the copy's destination and its slot in the receive
# order; aoff[s * (NS + 1) + j]: where token AIV j's list starts; loads, searches[s * NS + j]:
# its Init's token loads and VectorCount steps; copies_hop[h]: copies of hop class h; max_in,
# max_out: the most remote copies into one die and out of one die; qsteps_max: the longest
# quaternary search.
Schedule = namedtuple("Schedule", ("ecnt", "hops", "xdest", "xslot", "aoff", "loads", "searches",
                                   "copies_hop", "max_in", "max_out", "qsteps_max"))

# Every AIV's state across the stages, [die, aiv]: its clock, its time per bucket (B_*), its
# waiting, its first copy's issue and last copy's ack (its send latency), its phase marks.
Aivs = namedtuple("Aivs", ("t", "bucket", "wait", "first_copy", "last_copy_ack", "marks",
                           "nmarks"))

# Every store of a configuration, destination-major: destination d's stores (its bucket) are
# the ids bstart[d] .. bfill[d], source by source. arr[sid]: the arrival word (LOCAL, TAKEN);
# vis[sid]: when the store is visible at its destination; copy_ref[g]: per received copy g in
# receive order, the store carrying it and the store a receiver polls for it;
# count_signal[d * R + s]: the store polled for source s's counts to die d.
Stores = namedtuple("Stores", ("arr", "vis", "bstart", "bfill", "copy_ref", "count_signal"))

