"""The results of one configuration: the critical path's phases, the latency bound, the row."""

from __future__ import annotations

from ..sweep.profile import HOP_CLASSES
from .schedule import Schedule
from .state import (BSP_CUMSUM, BSP_SYNCALL_1, BSP_SYNCALL_2, BSP_SYNCALL_3, COPY, INIT, Die,
                    Run, Store)

PHASES = ("init", "send", "sync", "cumsum", "reorder")


def phases(run: Run, die: Die) -> dict[str, int]:
    """The time of each phase on the critical path, which runs through `die`, the last to end.

    ubep: the die's last AIV to end (the lowest-numbered on a tie), its own time bucket by
    bucket. bsp: the die's phases between its SyncAlls, which end on every AIV at once; its
    SyncAlls and what they wait for count as sync, Init and CalCumSum end with its last AIV.
    """
    aivs = die.aivs
    if run.ubep:
        last = max(range(len(aivs)), key=lambda j: (aivs[j].t, -j))
        return aivs[last].buckets
    m = aivs[0].marks
    init_end = max(a.marks[INIT] for a in aivs)
    cumsum_end = max(a.marks[BSP_CUMSUM] for a in aivs)
    send_end = m[BSP_SYNCALL_1] - run.c["syncall"]
    return {"init": init_end, "send": send_end - init_end,
            "sync": (m[BSP_SYNCALL_2] - send_end) + (m[BSP_SYNCALL_3] - cumsum_end),
            "cumsum": cumsum_end - m[BSP_SYNCALL_2], "reorder": die.end() - m[BSP_SYNCALL_3]}


def latency_bound(c: dict, copy_counts: list[int], egress_max: int, ingress_max: int) -> int:
    """A latency no configuration can beat, in cycles: no copy is requested before Init and its
    issue; the last remote copy of a die leaves after all of that die's remote copies
    (egress_max, the most of any die's), the last to reach a die's ingress port waits for all
    of that port's (ingress_max); each travels half the shortest hop of the classes with copies
    (a local copy, the local latency) before it is visible, then a local copy reorders it."""
    reach = [c["lat_local"]] if copy_counts[0] else []
    remote = [h for i, h in enumerate(HOP_CLASSES) if i and copy_counts[i]]
    if remote:
        half = min(c[f"lat_{h}"] for h in remote) // 2
        reach.append(max(egress_max + half + c["copy_ingress"],
                         c["copy_egress"] + half + ingress_max))
    return c["init"] + c["copy_issue"] + max(reach) + c["local_copy"]


def result_row(run: Run, plan: Schedule, dies: list[Die]) -> dict:
    """Every result of the configuration, plus `_detail` for the invariant tests."""
    c, cfg, clock = run.c, run.cfg, run.clock
    R = run.ranks
    ends = [die.end() for die in dies]
    crit = max(range(R), key=lambda d: (ends[d], -d))   # the lowest-numbered on a tie
    times = phases(run, dies[crit])
    sends = [a.last_copy_ack - a.first_copy for die in dies for a in die.aivs
             if a.first_copy >= 0]
    waits = [a.wait for die in dies for a in die.aivs]
    bytes_per_rank = cfg.batch * cfg.topk * c["token_bytes"]
    latency = max(ends)
    out = {
        "latency_us": latency / clock,
        "latency_mean_us": sum(ends) / R / clock,
        "bw_gbps": bytes_per_rank / (latency / clock * 1000.0),
        "bytes_per_rank": bytes_per_rank,
        "copies_total": sum(plan.copies_hop),
        **{f"copies_{h}": plan.copies_hop[i] for i, h in enumerate(HOP_CLASSES)},
        "send_max_aiv_us": max(sends) / clock,
        "send_mean_aiv_us": sum(sends) / len(sends) / clock,
        "send_spread_aiv_us": (max(sends) - min(sends)) / clock,
        "wait_us": sum(waits) / len(waits) / clock,
        **{f"phase_{p}_us": times[p] / clock for p in PHASES},
        "qsearch_steps": plan.qsteps_max,
        "sentinel_collisions": sum(die.collisions for die in dies),
    }
    bound = latency_bound(c, plan.copies_hop, plan.max_out * c["copy_egress"],
                          plan.max_in * c["copy_ingress"])
    out["_detail"] = {"sent": sum(st.kind == COPY for die in dies for st in die.stores),
                      "delivered": sum(die.delivered for die in dies),
                      "violations": sum(die.violations for die in dies), "ends": ends,
                      "bound_cycles": bound, "latency_cycles": latency,
                      "marks": [[a.marks for a in die.aivs] for die in dies],
                      "waits": [[a.wait for a in die.aivs] for die in dies],
                      # every die's stores as its egress port served them
                      "stores": [[{k: getattr(st, k) for k in Store.__slots__}
                                  for st in die.stores] for die in dies],
                      "costs": c}
    return out
