"""The results of one configuration: the critical path's phases, the latency bound, the row."""

from __future__ import annotations

import statistics
from collections import Counter

from ..kernels.layout import (ADDRESS, CUMSUM_MARK, EACH, FLOOR, MARK_INIT, MARK_START, NEW_DEST,
                              STORE_WORK, SYNCALL_MARKS, TOPK, V1_SYNCALL_MARK)
from ..kernels.protocols import by_core, v1_phases
from ..model.params import copies_per_die
from ..model.profile import HOP_CLASSES
from ..model.result_fields import PHASE_NAMES, phase_column
from .schedule import Schedule
from .state import COPY, Die, Run, Store


def phases(run: Run, die: Die) -> dict[str, int]:
    """The time of each phase of a dispatch on the critical path, which runs through `die`.

    ubep: the die's last AIV to end (the lowest-numbered on a tie), its own time bucket by
    bucket. bsp: the die's phases between its SyncAlls, which end on every AIV at once; its
    SyncAlls and what they wait for count as sync, Init and CalCumSum end with its last AIV.
    """
    cores = die.cores
    if by_core.py_func(run.mech):
        # the last AIV's buckets, its die's launch offset (programs.launch_starts) in Init
        last = cores[max(range(len(cores)), key=lambda j: (cores[j].t, -j))]
        return {**last.buckets, "init": last.buckets["init"] + last.marks[MARK_START]}
    # the SyncAlls after sending, after the count polls and after CalCumSum
    sent, verified, summed = (cores[0].marks[x] for x in SYNCALL_MARKS)
    init_end = max(a.marks[MARK_INIT] for a in cores)
    cumsum_end = max(a.marks[CUMSUM_MARK] for a in cores)
    send_end = sent - run.c["syncall"]
    return {"init": init_end, "send": send_end - init_end,
            "sync": (verified - send_end) + (summed - cumsum_end),
            "cumsum": cumsum_end - verified, "reorder": die.end() - summed, "reduce": 0}


def combine_phases(run: Run, die: Die, start: int) -> dict[str, int]:
    """The time of each phase of a combine on the critical path, which runs through `die`,
    from its start.

    ubep: the die's last AIV to end (the lowest-numbered on a tie), bucket by bucket. bsp
    (CANN's V1): the die's phases: Init until its last AIV's Init ends, Token-Sending until
    its last copy completed, synchronization (fences, statuses, status polls) until its
    SyncAll ends, then the reduction."""
    cores = die.cores
    if not v1_phases.py_func(run.mech):
        last = max(range(len(cores)), key=lambda j: (cores[j].t, -j))
        return cores[last].buckets
    init_end = max(a.marks[MARK_INIT] for a in cores)
    send_end = max([init_end] + [a.last_copy_ack for a in cores])
    synced = cores[0].marks[V1_SYNCALL_MARK]
    return {"init": init_end - start, "send": send_end - init_end, "sync": synced - send_end,
            "cumsum": 0, "reorder": 0, "reduce": die.end() - synced}


def reach(c: dict, copy_counts: list[int], egress_max: int, ingress_max: int, egress: int,
          ingress: int) -> int:
    """How soon after its issue the last copy can be visible: the last remote copy of a die
    leaves after all of that die's remote copies (egress_max, the most of any die's, at
    `egress` cycles each), the last to reach a die's ingress port waits for all of that port's
    (ingress_max, at `ingress` each); each travels half the shortest hop of the classes with
    copies (a local copy: the local latency)."""
    times = [c["lat_local"]] if copy_counts[0] else []
    remote = [h for i, h in enumerate(HOP_CLASSES) if i and copy_counts[i]]
    if remote:
        half = min(c[f"lat_{h}"] for h in remote) // 2
        times.append(max(egress_max + half + ingress, egress + half + ingress_max))
    return max(times)


def op_floor(c: dict, op: str, topk: int = 1) -> int:
    """What every configuration of `op` (dispatch, combine) pays at the least on its way to
    its end beside its last copy's store and reach(): its layout.FLOOR charges (TOPK's topk
    times)."""
    return sum(c[f.cost] * (topk if f.per == TOPK else 1) for f in FLOOR if f.at == op)


def store_floor(c: dict, at: str) -> int:
    """What a store of work kind `at` costs its AIV at the least: its STORE_WORK charges every
    such store pays (EACH) and its AIV's first window address (NEW_DEST, ADDRESS), each once,
    and its issue."""
    return c[f"{at}_issue"] + sum(c[w.cost] for w in STORE_WORK
                                  if w.at == at and w.per in (EACH, NEW_DEST, ADDRESS))


def latency_bound(c: dict, copy_counts: list[int], egress_max: int, ingress_max: int) -> int:
    """A dispatch latency no configuration can beat, in cycles: no copy is requested before Init
    and its store's own work (op_floor, store_floor), then reach(), and the last is
    reordered."""
    return op_floor(c, "dispatch") + store_floor(c, "copy") + \
        reach(c, copy_counts, egress_max, ingress_max, c["copy_egress"], c["copy_ingress"])


def return_bound(c: dict, copy_counts: list[int], egress_max: int, ingress_max: int,
                 topk: int) -> int:
    """A combine latency no configuration can beat, in cycles: no returned copy is stored
    before Init and its store's own work (its read into UBuf, its quantization, its issue),
    then reach(); the token whose copy is visible last is reduced after it, its copies and
    itself (the smallest part of a split token)."""
    return op_floor(c, "combine", topk) + store_floor(c, "return") + \
        reach(c, copy_counts, egress_max, ingress_max, c["return_egress"], c["return_ingress"])


def result_row(run: Run, plan: Schedule, dies: list[Die]) -> dict:
    """Every result of a dispatch, plus `_detail` for the invariant tests."""
    ends = [die.end() for die in dies]
    crit = _critical(ends)
    bound = latency_bound(run.c, plan.copies_hop, plan.max_out * run.c["copy_egress"],
                          plan.max_in * run.c["copy_ingress"])
    return _row(run, ends, phases(run, dies[crit]), (ends[crit], 0, 0), [dies], plan,
                run.c["token_bytes"], plan.qsteps_max, bound, _loads(plan))


def combine_row(run: Run, plan: Schedule, dies: list[Die], starts: list[int]) -> dict:
    """Every result of a combine (plan: schedule.return_schedule), plus `_detail`."""
    ends = [die.end() for die in dies]
    crit = _critical(ends)
    times = combine_phases(run, dies[crit], starts[crit])
    # the die's launch offset (programs.launch_starts) in its Init
    times = {**times, "init": times["init"] + starts[crit]}
    return _row(run, ends, times, (0, 0, ends[crit]), [dies], plan, run.c["return_bytes"],
                plan.qsteps_max, _return_bound(run, plan), _loads(plan), returned=dies)


def layer_row(run: Run, plan: Schedule, dispatched: list[Die], returns: Schedule,
              combined: list[Die], experts: list[int], starts: list[int]) -> dict:
    """Every result of a layer, plus `_detail`: the critical path runs through the die that
    ends its combine last, its dispatch, its experts' time and its combine, each split into
    its phases (the phase columns add the two kernels' up, and expert_us beside them)."""
    ends = [die.end() for die in combined]
    crit = _critical(ends)
    times = phases(run, dispatched[crit])
    more = combine_phases(run, combined[crit], starts[crit])
    times = {p: times[p] + more[p] for p in PHASE_NAMES}
    c = run.c
    # the die that starts its combine last does so after the dispatch could end and its
    # experts' least time, and then runs at least its Init and a token's reduction
    first = latency_bound(c, plan.copies_hop, plan.max_out * c["copy_egress"],
                          plan.max_in * c["copy_ingress"]) + c["expert"] + \
        op_floor(c, "combine", run.cfg.topk)
    return _row(run, ends, times,
                (dispatched[crit].end(), experts[crit], ends[crit] - starts[crit]),
                [dispatched, combined], plan, c["token_bytes"] + c["return_bytes"],
                max(plan.qsteps_max, returns.qsteps_max),
                max(first, _return_bound(run, returns)),
                tuple(map(max, _loads(plan), _loads(returns))), returned=combined)


def _return_bound(run: Run, plan: Schedule) -> int:
    c = run.c
    return return_bound(c, plan.copies_hop, plan.max_out * c["return_egress"],
                        plan.max_in * c["return_ingress"], run.cfg.topk)


def _loads(plan: Schedule) -> tuple[int, int]:
    """The most token copies one die takes in and the most one die sends, on a schedule (a
    return schedule's copies go back to their sources)."""
    taken = Counter(d for die in plan.dies for d in die.dests)
    return max(taken.values(), default=0), max(len(die.dests) for die in plan.dies)


def _critical(ends: list[int]) -> int:
    """The die on the critical path: the last to end, the lowest-numbered on a tie."""
    return max(range(len(ends)), key=lambda d: (ends[d], -d))


def _row(run: Run, ends: list[int], times: dict[str, int], split: tuple[int, int, int],
         kernels: list[list[Die]], plan: Schedule, copy_bytes: int, qsteps: int, bound: int,
         loads: tuple[int, int], returned: list[Die] | None = None) -> dict:
    """A row from the kernels' dies (dispatch's, combine's, or both in a layer's order): the
    latency (ends: each die's end), the phases on the critical path (times), its split into
    dispatch, experts and combine, the per-AIV send latencies and waits of every kernel."""
    c, cfg, clock = run.c, run.cfg, run.clock
    R = run.ranks
    sends = [a.last_copy_ack - a.first_copy for dies in kernels for die in dies
             for a in die.cores if a.first_copy >= 0]
    waits = [sum(dies[d].cores[j].wait for dies in kernels) for d in range(R)
             for j in range(run.cores)]
    bytes_per_rank = int(copies_per_die(cfg.batch, cfg.topk)) * copy_bytes
    latency = max(ends)
    out = {
        "latency_us": latency / clock,
        "latency_mean_us": sum(ends) / R / clock,
        "bw_gbps": bytes_per_rank / (latency / clock * 1000.0),
        "bytes_per_rank": bytes_per_rank,
        "copies_total": sum(plan.copies_hop),
        **{f"copies_{h}": plan.copies_hop[i] for i, h in enumerate(HOP_CLASSES)},
        "send_max_core_us": max(sends, default=0) / clock,
        "send_mean_core_us": sum(sends) / len(sends) / clock if sends else 0.0,
        "send_spread_core_us": (max(sends) - min(sends)) / clock if sends else 0.0,
        "wait_us": sum(waits) / len(waits) / clock,
        "ingress_queue_us": max([st.queued for dies in kernels for die in dies
                                 for st in die.stores] + [0]) / clock,
        "slowest_die": _critical(ends),
        "median_die_us": statistics.median(ends) / clock,
        "recv_max_mean": loads[0] * R / sum(plan.copies_hop),
        "send_max_mean": loads[1] * R / sum(plan.copies_hop),
        **{phase_column(p): times[p] / clock for p in PHASE_NAMES},
        "dispatch_us": split[0] / clock, "expert_us": split[1] / clock,
        "combine_us": split[2] / clock,
        "qsearch_steps": qsteps,
        "sentinel_collisions": sum(die.collisions for dies in kernels for die in dies),
    }
    every = [die for dies in kernels for die in dies]
    out["_detail"] = {"sent": sum(st.kind == COPY for die in every for st in die.stores),
                      "delivered": sum(die.delivered for die in every),
                      "violations": sum(die.violations for die in every), "ends": ends,
                      "bound_cycles": bound, "latency_cycles": latency,
                      # every AIV's phase boundaries, a layer's dispatch's then its combine's
                      "marks": [[sum((dies[d].cores[j].marks for dies in kernels), [])
                                 for j in range(run.cores)] for d in range(R)],
                      "waits": [[w for w in waits[d * run.cores:(d + 1) * run.cores]]
                                for d in range(R)],
                      # every die's stores as its egress port served them: the dispatch's,
                      # and combine's returns
                      "stores": [_stores(die) for die in kernels[0]] if returned is None
                      or len(kernels) > 1 else [],
                      "returns": [_stores(die) for die in returned] if returned else [],
                      "reduced": [die.reduced for die in returned] if returned else [],
                      "costs": c}
    return out


def _stores(die: Die) -> list[dict]:
    return [{k: getattr(st, k) for k in Store.__slots__} for st in die.stores]
