"""Result fields of one configuration, as the host reads them.

Each result is declared once, in kernels/layout.py (RESULTS and PHASES: its name, unit, the ops that
give it, and so its slot in the kernel's output row), since the kernel cannot import the host; here
each gets what the host adds: its help (HELP; a phase's title and help, PHASE_TEXT), its Parquet
type, its slot, its ops as params.Op. The twin, kernel_io, `ubepsim run`, the docs generator and the
plots read these.
"""

from __future__ import annotations

import dataclasses

from ..kernels import layout
from .params import Op

# A unit's Parquet type: the kernel's cycles and the bandwidth are reported as floats (us,
# GB/s), counts and bytes as integers.
DTYPES = {layout.US: "f8", layout.GBPS: "f8", layout.RATIO: "f8", layout.COUNT: "i8",
          layout.BYTES: "i8"}


# Each phase's title in a breakdown (`ubepsim run`, `ubepsim plot --kind breakdown`) and its
# help, by layout.PHASES' names: the host's text, so that editing it recompiles no kernel.
PHASE_TEXT = {
    "init": ("Init", "Init (setup, token loads, slice search)"),
    "send": ("Token-Sending", "Token-Sending"),
    "sync": ("Synchronization", "synchronization (SyncAll, flags, counts, fences, polls for data "
                                "signals; combine's statuses and their polls)"),
    "cumsum": ("CalCumSum", "CalCumSum (bsp: the prefix sums between SyncAlls, its counting being"
                            " synchronization; ubep: the token AIV's wait for the CalCumSum "
                            "group's counts, prefix sums and published offsets)"),
    "reorder": ("Token-Reordering", "Token-Reordering"),
    "reduce": ("Reduction", "combine's reduction of each token's copies"),
}

# Each result's help, by layout.RESULTS' names (the per-hop and per-phase columns are made
# below): the host's text, as PHASE_TEXT.
HELP = {
    "latency_us": "latency of the op (dispatch, combine or the whole layer): the time the last "
                  "die finishes",
    "latency_mean_us": "mean over dies of the time each die finishes",
    "bw_gbps": "effective bandwidth: bytes_per_rank / latency (paper Table 4)",
    "bytes_per_rank": "payload bytes each rank sends in dispatch, or gets back in combine, or "
                      "both in a layer (batch x topk x a copy's bytes, scales included, flags "
                      "not)",
    "copies_total": "token copies of all dies (ranks x batch x topk), each counted once: "
                    "dispatched, returned, or both in a layer",
    "send_max_core_us": "largest per-core token transmission latency: from a core's first token "
                        "store to its last one's completion (paper Figure 9)",
    "send_mean_core_us": "mean per-core token transmission latency over the cores that send at "
                         "least one token copy",
    "send_spread_core_us": "slowest minus fastest per-core token transmission latency over the "
                           "cores that send: the imbalance of Figure 9",
    "wait_us": "mean time a core spends waiting in SyncAll, fences and polls",
    "ingress_queue_us": "longest a store waited in an ingress port's queue, from its arrival "
                        "until the port began taking it: the hottest receiver's queue",
    "slowest_die": "the die that finishes last (the lowest-numbered on a tie): the straggler, "
                   "latency_us its finish",
    "median_die_us": "the median over dies of the time each die finishes: the straggler's lead is"
                     " latency_us minus this",
    "recv_max_mean": "the most token copies one die takes in against the mean: dispatch's copies "
                     "to its experts, combine's own tokens' copies back (a layer: the larger of "
                     "its two ops')",
    "send_max_mean": "the most token copies one die sends against the mean: dispatch's its "
                     "tokens' copies, combine's the copies its experts took (a layer: the larger "
                     "of its two ops')",
    "dispatch_us": "critical path: the dispatch of the die that finishes last, until its last AIV"
                   " finished it (a dispatch's latency; in a layer, that die's dispatch, which a "
                   "hot die's may outlast)",
    "expert_us": "critical path: the last die's experts' time between its dispatch and its combine",
    "combine_us": "critical path: the last die's combine, from its start (a combine's latency)",
    "qsearch_steps": "most quaternary-search iterations any AIV ran (Algorithm 1; 0 for "
                     "expert_block)",
    "sentinel_collisions": "signals (token copies, count messages or returned copies) whose "
                           "payload matched the sentinel (sp)",
    **{f"copies_{h}": f"token copies whose destination is {h.replace('_', ' ')} (in combine, "
                      f"whose source: a copy returns over the hop it went)"
       for h in layout.HOP_CLASSES},
    **{f"phase_{name}_us": f"critical path: {text[1]}" for name, text in PHASE_TEXT.items()},
}


@dataclasses.dataclass(frozen=True)
class ResultField:
    name: str
    dtype: str                 # "f8" or "i8"
    unit: str                  # layout.US, COUNT (the kernel's), BYTES, GBPS or RATIO (the host's)
    ops: tuple[Op, ...]        # the ops that give it; elsewhere it is 0
    help: str
    slot: int | None           # its column of the kernel's output row; None: the host's

    def given_by(self, op: Op) -> bool:
        return op in self.ops


def _field(r: layout.Result) -> ResultField:
    slot = getattr(layout, f"O_{r.name.removesuffix('_us').upper()}") \
        if r.unit in layout.KERNEL_UNITS else None
    return ResultField(r.name, DTYPES[r.unit], r.unit, tuple(Op(o) for o in r.ops), HELP[r.name],
                       slot)


RESULTS: tuple[ResultField, ...] = tuple(_field(r) for r in layout.RESULTS)
RESULT_NAMES = tuple(f.name for f in RESULTS)
FIELD_BY_NAME = {f.name: f for f in RESULTS}

# The phases of the critical path (layout.PHASES): each a result column, and a time bucket the
# twin's AIVs spend their cycles in by name.
PHASES = layout.PHASES
PHASE_NAMES = tuple(p.name for p in PHASES)


def phase_column(name: str) -> str:
    """The result column of phase `name`."""
    return f"phase_{name}_us"


def phase_title(name: str) -> str:
    """Phase `name`'s title in a breakdown."""
    return PHASE_TEXT[name][0]


def phases_of(op: Op) -> tuple[layout.Phase, ...]:
    """The phases on `op`'s critical path, in order."""
    return tuple(p for p in PHASES if op in p.ops)


# The split of a layer's critical path beside the phases: its experts' time, which no phase
# holds (a layer's phase columns and expert_us sum to its latency).
EXPERT_COLUMN = "expert_us"
