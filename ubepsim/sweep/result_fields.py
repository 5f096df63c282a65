"""Result fields of one configuration: names, Parquet types and help, in one place."""

from __future__ import annotations

import dataclasses

from .profile import HOP_CLASSES


@dataclasses.dataclass(frozen=True)
class ResultField:
    name: str
    dtype: str   # "f8" or "i8"
    help: str


RESULTS: tuple[ResultField, ...] = (
    ResultField("latency_us", "f8", "latency of the op (dispatch, combine or the whole layer): "
                "the time the last die finishes"),
    ResultField("latency_mean_us", "f8", "mean over dies of the time each die finishes"),
    ResultField("bw_gbps", "f8", "effective bandwidth: bytes_per_rank / latency (paper Table 4)"),
    ResultField("bytes_per_rank", "i8", "payload bytes each rank sends in dispatch, or gets "
                "back in combine, or both in a layer (batch x topk x a copy's bytes, scales "
                "included, flags not)"),
    ResultField("copies_total", "i8", "token copies dispatched by all dies"),
    *(ResultField(f"copies_{h}", "i8", f"token copies whose destination is {h.replace('_', ' ')}")
      for h in HOP_CLASSES),
    ResultField("send_max_aiv_us", "f8", "largest per-AIV token transmission latency: from an "
                "AIV's first token store to its last one's completion (paper Figure 9)"),
    ResultField("send_mean_aiv_us", "f8", "mean per-AIV token transmission latency over the "
                "AIVs that send at least one token copy"),
    ResultField("send_spread_aiv_us", "f8", "slowest minus fastest per-AIV token transmission "
                "latency over the AIVs that send: the imbalance of Figure 9"),
    ResultField("wait_us", "f8", "mean time an AIV spends waiting in SyncAll, fences and polls"),
    ResultField("phase_init_us", "f8", "critical path: Init (setup, token loads, slice search)"),
    ResultField("phase_send_us", "f8", "critical path: Token-Sending"),
    ResultField("phase_sync_us", "f8", "critical path: synchronization (SyncAll, flags, counts, "
                "fences, polls for data signals)"),
    ResultField("phase_cumsum_us", "f8", "critical path: CalCumSum (bsp: the prefix sums between "
                "SyncAlls, its counting being synchronization; ubep: the token AIV's wait for "
                "the CalCumSum group's counts, prefix sums and published offsets)"),
    ResultField("phase_reorder_us", "f8", "critical path: Token-Reordering"),
    ResultField("phase_reduce_us", "f8", "critical path: combine's reduction of each token's "
                "copies (0 for dispatch)"),
    ResultField("dispatch_us", "f8", "critical path: the dispatch, until the last die's last "
                "AIV finished it (the latency for dispatch, 0 for combine)"),
    ResultField("expert_us", "f8", "critical path: the last die's experts' time between its "
                "dispatch and its combine (layer; 0 otherwise)"),
    ResultField("combine_us", "f8", "critical path: the last die's combine, from its start (the "
                "latency for combine, 0 for dispatch)"),
    ResultField("qsearch_steps", "i8", "most quaternary-search iterations any AIV ran "
                "(Algorithm 1; 0 for expert_block)"),
    ResultField("sentinel_collisions", "i8", "signals (token copies or count messages) "
                "whose payload matched the sentinel (sp)"),
)

RESULT_NAMES = tuple(f.name for f in RESULTS)
