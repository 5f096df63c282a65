"""Every code, column and bit layout the kernel stages share, and the stages' named results.

Numba reads module globals as compile-time constants, so these cost nothing at run time; the
host (ubepsim.model.kernel_io, ubepsim.model.costs) builds the kernel's input matrices and reads
its output rows by the same names.
"""

from collections import namedtuple

# Sync, schedule, routing and op codes: the values of ubepsim.model.params' IntEnums
# (tests/test_costs.py holds them equal; a protocol's code is its place in kernels/protocols'
# registry).
SW, TFF, DC, SP = 0, 1, 2, 3
EXPERT_BLOCK, BALANCED, HOMOGENIZED, TOKEN_ORDER = 0, 1, 2, 3
UNIFORM, ZIPF, HOT, TRACE, LOGNORMAL = 0, 1, 2, 3, 4
DISPATCH, COMBINE, LAYER = 0, 1, 2
# The ops that give a result or run a phase.
ALL_OPS, WITH_DISPATCH, WITH_COMBINE = (DISPATCH, COMBINE, LAYER), (DISPATCH, LAYER), \
    (COMBINE, LAYER)

# Hop classes, by the code schedule.hop_classes gives a (source, destination) pair: the die
# itself, the other die of its NPU, then one more per switch tier climbed (paper Table 2). The
# host's hop classes are these (ubepsim.model.profile: one latency_ns key per class).
HOP_CLASSES = ("local", "intra_npu", "one_hop", "two_hop", "three_hop")
N_HOPS = len(HOP_CLASSES)
# Switch tiers below the top one (a profile's tier_sizes): hop class 3 + k climbs out of a tier-k
# domain (k from 0), over its uplink. A deeper fabric is one more hop class.
N_TIERS = N_HOPS - 3
# A die's ports: its own (UB, NVLink) and its NIC; a hop class leaves and enters by one of them.
DIE_PORT, NIC = 0, 1
N_PORTS = 2
# What each store kind is charged on the fabric, per kind of cost (layout.COSTS "<kind>_<cost>"):
# its issue on the AIV, then each port and link it crosses.
STORE_COSTS = ("issue", "egress", "ingress", "nic",
               *(f"tier{k + 1}" for k in range(N_TIERS)))

# CANN's CalTokenSendExpertCnt: five vector instructions over the int32 expert ids it counts
# in (the host's lowering prices the same chain: ubepsim.model.costs)
COUNT_CHAIN_OPS, INT32 = 5, 4

# Store kinds: the low two bits of a program word, a flag and a checksum (the signals) odd.
K_COPY, K_FLAG, K_COUNT, K_CHECKSUM = 0, 1, 2, 3

# --- Results, declared once -------------------------------------------------------------------
# Every reader of a result takes it from the tables below: the kernel's output row (the O_*
# slots), the twin's rows (ubepsim/reference/results.py), the host's frames, types and units
# (ubepsim.model.result_fields, kernel_io), `ubepsim run`, the docs generator (ubepsim.docs) and
# the plots. A new column is a line here plus the code that computes it: kernels/results.py and
# the twin's, or kernel_io.HOST_RESULTS for a unit computed on the host, and its help in
# ubepsim.model.result_fields.HELP: the texts are the host's, since the kernels' cache is keyed by
# every kernel module's source and a help text's edit would recompile them.

# The phases of the critical path, in order: phase i is the per-AIV time bucket i, B_<NAME> (the
# cycles an AIV spends on it), and the result column phase_<name>_us (docs/model.md, "Results");
# with the ops whose critical path runs through it (its title and help: the host's,
# ubepsim.model.result_fields.PHASE_TEXT).
Phase = namedtuple("Phase", ("name", "ops"))
PHASES = (
    Phase("init", ALL_OPS),
    Phase("send", ALL_OPS),
    Phase("sync", ALL_OPS),
    Phase("cumsum", WITH_DISPATCH),
    Phase("reorder", WITH_DISPATCH),
    Phase("reduce", WITH_COMBINE),
)
# B_X, phase x's bucket: kernels/slots.py, generated from this table
N_BUCKETS = len(PHASES)

# A result's unit: US, cycles in the kernel's row, reported in microseconds; COUNT, a count in
# the kernel's row; BYTES, GBPS and RATIO are computed on the host (kernel_io.HOST_RESULTS).
US, COUNT, BYTES, GBPS, RATIO = "us", "count", "bytes", "GB/s", "ratio"
KERNEL_UNITS = (US, COUNT)
# (name, unit, the ops that give it: elsewhere it is 0); each one's help is the host's
# (ubepsim.model.result_fields.HELP), so that editing it recompiles no kernel
Result = namedtuple("Result", ("name", "unit", "ops"), defaults=(ALL_OPS,))
RESULTS = (
    Result("latency_us", US),
    Result("latency_mean_us", US),
    Result("bw_gbps", GBPS),
    Result("bytes_per_rank", BYTES),
    Result("copies_total", COUNT),
    *(Result(f"copies_{h}", COUNT) for h in HOP_CLASSES),
    Result("send_max_core_us", US),
    Result("send_mean_core_us", US),
    Result("send_spread_core_us", US),
    Result("wait_us", US),
    Result("ingress_queue_us", US),
    Result("slowest_die", COUNT),
    Result("median_die_us", US),
    Result("recv_max_mean", RATIO),
    Result("send_max_mean", RATIO),
    *(Result(f"phase_{p.name}_us", US, ops=p.ops) for p in PHASES),
    Result("dispatch_us", US, ops=WITH_DISPATCH),
    Result("expert_us", US, ops=(LAYER,)),
    Result("combine_us", US, ops=WITH_COMBINE),
    Result("qsearch_steps", COUNT),
    Result("sentinel_collisions", COUNT),
)
# The output row: a slot per result in a kernel unit, in the order above, O_<NAME> (the name
# without _us), then what only the host reads: copy stores sent, copies taken once, copies read
# before they were visible, the latency bound (its invariant checks); the most token copies a die
# takes in and sends (its ratios).
OUTPUTS = (*(r.name.removesuffix("_us") for r in RESULTS if r.unit in KERNEL_UNITS),
           "sent", "delivered", "violations", "bound", "recv_max", "send_max")
# O_X, output x's column: kernels/slots.py, generated from this table
N_OUT = len(OUTPUTS)
O_COPIES_HOP0 = OUTPUTS.index(f"copies_{HOP_CLASSES[0]}")   # then one per hop class, in order
O_PHASE0 = OUTPUTS.index(f"phase_{PHASES[0].name}")          # then one per phase, in order

# --- Timelines ---------------------------------------------------------------------------------
# The timeline's phases (`ubepsim run --timeline`), declared once: what each is (the docs
# generator lists them), in order of first appearance (the plots' colours follow it); then
# each AIV's phases in order, phase x running from its mark x to mark x + 1: under dispatch by
# the AIV's role (every AIV under bsp; UBEP's CalCumSum and token groups; every AIV under fixed
# slots, DeepEP's), under combine by whether it returns statuses (CANN's V1, DeepEP's flags
# behind the copies) or sends and then reduces. A layer's AIV runs its
# dispatch role's, then LAYER_GAP until its die's combine starts, then combine's. One name
# means the same work in either protocol and either kernel.
TIMELINE_PHASES = {
    "init": "setup, the slice search (balanced, homogenized) and, in dispatch, loading its "
            "tokens into UBuf",
    "send": "Token-Sending: from the end of Init until it issued its last store (copies, and "
            "under ubep their flags or checksums and sw's fences); stores may still be in "
            "flight",
    "syncall": "a SyncAll: waiting for the die's other cores (dispatch's first one also until "
               "every token store completed), then the barrier",
    "count_send": "VectorCount and a count message (with its flag or checksum under sw, dc) to "
                  "each destination of its share, until it issued the last",
    "count_poll": "polling the counts of its share of sources, with the flag checks (not sw) "
                  "and sentinel re-arming (sp); under ubep also the partial prefix sums",
    "cumsum": "CalCumSum: its share of the prefix sums over the ranks x experts-per-die counts",
    "reorder": "Token-Reordering: its slice of the received copies into expert order (under "
               "ubep, polling each copy's signal first)",
    "offset_poll": "waiting for the CalCumSum group's offsets (one local store once the "
                   "group's last core is done)",
    "finish_counter": "deepep_ll: waiting until every core of its die issued its last copy "
                      "(the experts' finish counters), then one local latency",
    "pair_receive": "deepep_ll: per (local expert, source) pair of its share, polling the "
                    "count, then copying the pair's copies out of their slots once there",
    "status_send": "combine, bsp (V1's SetStatus): waiting until every store it issued "
                   "completed, then a status to each destination it owns; deepep_ll: a flag "
                   "to each right behind its copies",
    "status_poll": "combine, bsp and deepep_ll (V1's WaitDispatch): polling the statuses of "
                   "its share of the sources, each read out",
    "reduce": "combine: its share of the die's tokens reduced (under ubep, polling and checking "
              "each token's copies first)",
    "expert": "a layer: from the core's end of dispatch until its die's combine starts (its "
              "die's last core, then the experts' time)",
}
DISPATCH_TIMELINE = {
    "bsp": ("init", "send", "syncall", "count_send", "count_poll", "syncall", "cumsum",
            "syncall", "reorder"),
    "cumsum": ("init", "count_send", "count_poll"),
    "token": ("init", "send", "offset_poll", "reorder"),
    "fixed": ("init", "send", "finish_counter", "count_send", "pair_receive"),
}
# A combine's phases follow whether it returns statuses (protocols.RETURN_STATUS: V1's, and
# DeepEP's flags) or takes each token once its copies are there.
COMBINE_TIMELINE = {"statuses": ("init", "send", "status_send", "status_poll", "syncall",
                                 "reduce"),
                    "direct": ("init", "send", "reduce")}
LAYER_GAP = "expert"


def ends(timeline, step):
    """The marks at which each `step` of a timeline ends (its phase x ends at mark x + 1)."""
    return tuple(x + 1 for x, s in enumerate(timeline) if s == step)


# Phase marks, named by the step they end: each AIV's clock at the boundaries of its phases,
# appended as its steps end, in its timeline's order (a combine's in an array of their own, which
# a layer's timeline puts after dispatch's). Every AIV starts at MARK_START (its die's launch,
# or its combine's start) and ends Init at MARK_INIT; the marks a result reads are where CANN's
# steps end among every AIV's (the SyncAlls, CalCumSum; V1's SyncAll).
MARK_START, MARK_INIT = 0, 1
N_MARKS = 1 + max(map(len, DISPATCH_TIMELINE.values()))
N_CMARKS = 1 + max(map(len, COMBINE_TIMELINE.values()))
SYNCALL_MARKS = ends(DISPATCH_TIMELINE["bsp"], "syncall")
CUMSUM_MARK, = ends(DISPATCH_TIMELINE["bsp"], "cumsum")
V1_SYNCALL_MARK, = ends(COMBINE_TIMELINE["statuses"], "syncall")

# Columns of the parameter matrix (ubepsim.model.kernel_io.prepare builds it).
# P_BATCHES: where the row's tokens per die start in the batches array, or EQUAL_BATCHES (every
# die holds P_BATCH).
(P_RANKS, P_BATCH, P_TOPK, P_EXPERTS, P_CORES, P_CUMSUM, P_PROTOCOL, P_SYNC, P_SCHEDULE,
 P_ROUTING, P_SEED, P_WKEY, P_CDF_START, P_CDF_LEN, P_TRACE, P_OP, P_BATCHES) = range(17)
N_PARAMS = 17
EQUAL_BATCHES = -1

# Columns of the cost matrix (ubepsim.model.costs.lower fills them by these names): integer
# cycles, bytes or blocks per configuration. Column "x" is C_X (kernels/slots.py, generated from
# this tuple and held to it by tests/test_slots.py); the hop latencies follow in hop class order,
# from C_LAT_LOCAL.
COSTS = (
    "token_bytes", "copy_blocks", "count_blocks",
    *(f"{kind}_{cost}" for kind in ("copy", "count", "signal") for cost in STORE_COSTS),
    "local_copy", "copy_verify", "count_verify", "copy_reset", "count_reset",
    "vcount", "prefix", "init", "syncall", "blocks_in_flight", "timeout", "poll",
    # the spread of the dies' launches (programs.launch_starts)
    "launch_skew",
    "dest_switch", "count_chain", "status_poll",
    # the sending AIVs' work on tokens (docs/model.md, "The sending AIVs' work"): every AIV's
    # load of the die's expert ids at Init; a token's load and quantization at Init (per token
    # a sending AIV loads) or per copy in the send loop; whether the send loop counts each
    # copy's predecessors to its expert, and the vector unit's fixed cycles and bytes a cycle
    # that count is priced at
    "ids_load", "init_load", "copy_load", "copy_count", "vector_op",
    "vector_bytes",
    "npu_dies", *(f"tier{k + 1}_dies" for k in range(N_TIERS)), "rails", "nic_from",
    *(f"lat_{h}" for h in HOP_CLASSES),
    # combine (docs/model.md, "Combine"): a returned copy's bytes, blocks and store costs, the
    # sender's read of the expert's output into UBuf, the int8 quantization, the reducer's
    # check and re-arm of its blocks; the reduction of a token's copy and of the token itself
    # over the elements of one AIV (bsp splits a token's hidden dimension over reduce_split
    # AIVs: the first parts ..., the last part ..._last); a die's expert time in a layer:
    # fixed cycles, and per copy received in 1/1024 cycles (EXPERT_SHIFT)
    "return_bytes", "return_blocks", *(f"return_{cost}" for cost in STORE_COSTS),
    "return_load", "return_quant", "return_verify", "return_reset",
    "reduce_copy", "reduce_token", "reduce_copy_last", "reduce_token_last", "reduce_split",
    "expert", "expert_copy",
)
# C_X, cost x's column: kernels/slots.py, generated from this table
N_COSTS = len(COSTS)
EXPERT_SHIFT = 10   # expert_copy is in 1/1024 cycles per copy

# --- What a store costs its AIV, and what no op can skip: declared once --------------------------
# A charge: a cost column, where it is paid, and how often. Before issuing a store, its AIV pays
# the STORE_WORK charges of the store's kind (W_*: a dispatched copy, a count message, a signal,
# a copy combine returns), each as often as `per` says:
# EACH store;
# PER_EXPERT it counts (a count message: per expert of its share of the destination's, a
#   VectorCount and the vector chain that turns it into a count, CANN's CalTokenSendExpertCnt);
# MARKED where the Data-as-Flag variant marks each copy (dc's marker work, sync.Effects);
# NEW_DEST where the store goes to another die than its AIV's store before it (the first one
#   included): it first loads that die's window address (the program word's new-destination
#   bit, SWITCH_BIT);
# ADDRESS: as NEW_DEST, but on every copy where the send loop loads each copy's window address
#   whatever the store before it (CANN's: a protocol without protocols.TOKEN_PRELOAD);
# PRECEDED: each copy with copies before it at its die, where the send loop counts those to its
#   expert (CANN's, `copy_count`: beside the count's vector instructions over them, which
#   programs.count_cycles prices by the copy's index).
# Its issue and its way through the fabric are STORE_COSTS'. The kernel's kind tables
# (fabric.kind_table, return_kinds), the twin's programs (ubepsim.reference.programs.store_work)
# and the host's time bound (ubepsim.model.costs.time_bound) read these rows; so do the latency
# lower bounds (results.latency_bound, return_bound and the twin's), with FLOOR.
W_COPY, W_COUNT, W_SIGNAL, W_RETURN = range(4)
WORK_KINDS = ("copy", "count", "signal", "return")   # W_X's name; a cost's <kind>_ prefix
EACH, PER_EXPERT, MARKED, NEW_DEST, ADDRESS, PRECEDED = range(6)
Charge = namedtuple("Charge", ("at", "cost", "per"))
STORE_WORK = (
    Charge("copy", "copy_load", EACH),         # CANN's send loop: the token's load, quantization
    Charge("copy", "copy_verify", MARKED),
    Charge("copy", "dest_switch", ADDRESS),
    Charge("copy", "count_chain", PRECEDED),
    Charge("count", "vcount", PER_EXPERT),
    Charge("count", "count_chain", PER_EXPERT),
    Charge("count", "dest_switch", NEW_DEST),
    Charge("signal", "dest_switch", NEW_DEST),
    Charge("return", "return_load", EACH),     # the expert's output read into UBuf
    Charge("return", "return_quant", EACH),    # int8: its quantization
    Charge("return", "return_verify", MARKED),
    Charge("return", "dest_switch", NEW_DEST),
)
# What an op pays at the least on its way to its end (the latency lower bounds), beside its last
# copy's own store and `reach`: at Init, and after the copy is visible, ONCE or per copy of the
# token reduced last (TOPK). The store's own: its EACH charges and its first window address
# (every AIV's first store goes to a new destination: NEW_DEST, ADDRESS), each once, and its
# issue.
ONCE, TOPK = 0, 1
FLOOR = (
    Charge("dispatch", "init", ONCE),
    Charge("dispatch", "ids_load", ONCE),
    Charge("dispatch", "init_load", ONCE),      # UBEP: a token's load at Init
    Charge("dispatch", "local_copy", ONCE),     # the last copy reordered
    Charge("combine", "init", ONCE),
    Charge("combine", "reduce_copy", TOPK),     # the last token's reduction: its copies
    Charge("combine", "reduce_token", ONCE),    # ... and itself
)
# The kernel's view of both tables: integer rows (where: a W_ kind or an op code; the cost's
# column; per), frozen as constants at compile time; and each work kind's issue column.
WORK_ROWS = tuple((WORK_KINDS.index(w.at), COSTS.index(w.cost), w.per) for w in STORE_WORK)
FLOOR_ROWS = tuple((("dispatch", "combine").index(f.at), COSTS.index(f.cost), f.per)
                   for f in FLOOR)
WORK_ISSUE = tuple(COSTS.index(f"{kind}_issue") for kind in WORK_KINDS)

# Egress requests are ordered by (time, AIV): both packed in one key, the AIV in the low bits
# (one more index than the AIVs: a die's own wait for its SyncAll).
CORE_BITS = 13   # cores <= 4096
# A program word: the store id above SID_SHIFT, then the new-destination bit (the store goes to
# another die than its AIV's store before it: it first loads that die's window address), then
# the destination (ranks <= 16384), then the kind in the low two bits.
SWITCH_BIT = 16
SID_SHIFT = SWITCH_BIT + 1
DEST_MASK = (1 << (SWITCH_BIT - 2)) - 1
NEVER = 9223372036854775807   # a time after every time
# A store's arrival word (Stores.sto[sid, ARR]): arrival at the ingress port << 2 | kind; of a
# store to its own die, LOCAL - kind (below every arrival << 2 | kind); of a copy a receiver
# has taken, TAKEN, which is no copy's value, so that a second take is no delivery.
LOCAL = -1
TAKEN = LOCAL - 4

# Per-AIV state of the fabric's event loop (kernels/fabric.py): one row per AIV of every die:
# its stage in its current store, its clock (after the store's work), its program counter and
# the store's program word, its ring of stores in flight (head, count, blocks), the latest
# acknowledgement of the stores it retired (what every store touches, in the row's first cache
# line); its clock before the store's work, its signal time and fence waits this phase, its
# program's end, its first copy's issue, its last copy's store, its copies, and its phase.
(S_STAGE, S_T, S_PC, S_WORD, S_HEAD, S_N, S_OUT, S_MAX_ACK, S_T0, S_SIG, S_SW, S_END, S_FIRST,
 S_LAST, S_COPIES, S_PHASE) = range(16)
S_WIDTH = 16   # a row per AIV, two whole cache lines
# An AIV's stage in its current store (S_STAGE): its work to do; its fence to pass; its credits
# to wait for; its request at the egress port; its phase over, waiting at a fence of its own
# before the next; its phase over, waiting for its die (a SyncAll), or its last phase over.
STAGE_WORK, STAGE_FENCE, STAGE_CREDITS, STAGE_REQUEST, STAGE_BOUNDARY, STAGE_DONE = range(6)
# What lies between two phases of a die: nothing (one phase), a SyncAll once every store of the
# die was acknowledged (bsp's dispatch), each AIV's own fence (CANN's combine), a barrier once
# every AIV of the die issued its last store, one local latency later (DeepEP's finish counters),
# or nothing: each AIV goes straight on (stores that follow their data on one queue).
THEN_NONE, THEN_SYNCALL, THEN_FENCE, THEN_ISSUED, THEN_NEXT = range(5)
# A protocol's mechanism whose value is a parameter's code may instead read the configuration's
# parameter (kernels/protocols).
READ = -1
# How a dispatch's receivers place the copies they take (protocols.RECEIVE): each value runs
# its own steps (protocols.RECEIVE_ROLES names each one's AIV roles, whose timelines list them).
# RECEIVE_CUMSUM, every AIV: the counts polled (Flag verification), SyncAll, CalCumSum, SyncAll,
# Token-Reordering (CANN EP); RECEIVE_GROUP, a CalCumSum group of cores polls the counts with
# partial prefix sums and publishes the offsets, which the token group polls before reordering
# (UBEP); RECEIVE_SLOTS, every AIV takes a share of the (local expert, source) pairs, polls each
# pair's count and copies its copies out of fixed slots (DeepEP).
RECEIVE_CUMSUM, RECEIVE_GROUP, RECEIVE_SLOTS = range(3)
N_PHASES = 2
# Per-kind costs of a store: a row of the kind table per kind. The table is flat, so that the
# event loop indexes it with a constant stride (a power of two) rather than a runtime shape.
# KC_PORT + port: its cost on a port out (the die's egress port, the NIC), KC_IN + port: in;
# KC_TIER + k: on tier k's links where they queue.
KC_PRE, KC_ISSUE, KC_BLOCKS, KC_FENCE, KC_SWITCH = range(5)
KC_PORT = 5
KC_IN = KC_PORT + N_PORTS
KC_TIER = KC_IN + N_PORTS
KC_WIDTH = 16
# Ingress and link queues are heaps keyed by arrival, then source die (and port): two stores
# from one source never tie (its ports take them one at a time, each at least a cycle, and they
# travel the same path), so the key is unique. A die fits in SRC_BITS (ranks <= 16384).
SRC_BITS = 14
# Times stay below MAX_TIME (ubepsim.model.kernel_io.check_time_bound): a link's queue packs a
# time with a die and a port into one 63-bit key.
MAX_TIME = 1 << (63 - SRC_BITS - 1)
# Stage results. Numba builds and unpacks these in compiled code (the classes are module
# globals), so a stage hands its arrays on by name rather than by position.

# schedule.schedule: what a configuration's sync variants share. R ranks, NS token AIVs;
# cfirst[s]: where die s's token copies start (routing.copy_starts; a die's copies are its
# tokens', token x topk + k, in die order). ecnt[e]: where expert e's received copies start in
# receive order (expert, source, copy); hops[s * R + d]: the hop class from die s to die d;
# xdest, xslot[cfirst[s] + x]: die s's AIV lists, position by position: the copy's
# destination, its slot in the receive order, and (dispatch) its index at its die;
# aoff[s * (NS + 1) + j]: where token AIV j's list starts; loads, searches[s * NS + j]: its
# Init's token loads and VectorCount steps; copies_hop[h]: copies of hop class h; max_in,
# max_out: the most remote copies into one die and out of one die; qsteps_max: the longest
# quaternary search. The return schedule is one of these over the received copies (ecnt's
# order), xslot holding the dispatch copy each returns.
Schedule = namedtuple("Schedule", ("cfirst", "ecnt", "hops", "xdest", "xslot", "xcopy", "aoff",
                                   "loads", "searches", "copies_hop", "max_in", "max_out",
                                   "qsteps_max"))

# Every AIV's state across the stages, [die, core]: its clock, its time per bucket (B_*), its
# waiting, its first copy's issue and last copy's ack (its send latency), its phase marks.
Cores = namedtuple("Cores", ("t", "bucket", "wait", "first_copy", "last_copy_ack", "marks",
                           "nmarks"))

# Every store of a configuration, destination-major: destination d's stores (its bucket) are
# the ids bstart[d] .. bfill[d], source by source. sto[sid] is a store's row (what the fabric
# touches of a store lies together): ARR, its arrival word (LOCAL, TAKEN; while it crosses tier
# links, its earliest arrival); VIS, when it is visible at its destination (-1 until its port
# took it); ACK, when its sender sees it acknowledged (until then, the second half of its hop).
# copy_ref[g]: per received copy g in receive order, the store carrying it and the store a
# receiver polls for it; count_signal[d * R + s]: the store polled for source s's counts to die
# d.
ARR, VIS, ACK = 0, 1, 2
STO_WIDTH = 4   # a row of 32 bytes: two to a cache line
Stores = namedtuple("Stores", ("sto", "bstart", "bfill", "copy_ref", "count_signal"))

from .slots import *  # noqa: E402,F401,F403 - the B_, O_ and C_ slots, literal lines
