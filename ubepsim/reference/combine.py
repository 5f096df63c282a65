"""Combine's driver: the return all-to-all on one configuration, as the kernel's
kernels/combine.py runs it (docs/model.md, "Combine"): every die returns each copy it received
to the copy's source die, which reduces each token's copies."""

from __future__ import annotations

from ..kernels.layout import THEN_FENCE
from ..kernels.protocols import STATUS_SYNC
from .fabric import Phase, fabric
from .programs import init_phase, status_programs, token_programs
from .reduce import reduce
from .schedule import Schedule
from .state import Die, Run
from .sync import POLICY

# CANN's V1 status: a flag behind its AIV's fence, read out, never re-armed or verified
V1_STATUS = POLICY[STATUS_SYNC]


def combine(run: Run, plan: Schedule, starts: list[int],
            ports: list[tuple[list[int], list[int]]] | None = None) -> list[Die]:
    """Every die's combine on its return schedule (schedule.return_schedule), die d starting at
    starts[d] with its egress and ingress ports (per port) free at ports[d] (a layer: when its
    dispatch's last stores left and landed; else at once). Returns the dies."""
    dies = [Die(run, d, plan.dies[d].copies, starts[d],
                ([*ports[d][0]], [*ports[d][1]]) if ports else None, combine=True)
            for d in range(run.ranks)]
    phases = []
    for d, (die, dealt) in enumerate(zip(dies, plan.dies)):
        init_phase(run, dealt, die, 0, combine=True)
        copies = token_programs(run, d, dealt, die, combine=True)
        if run.mech.return_status:
            # V1's SetStatus: behind PipeBarrier<PIPE_ALL>, each AIV's status to each
            # destination it owns
            phases.append([Phase(copies, "send",
                                 "fence" if run.mech.status_after == THEN_FENCE else "next"),
                           Phase(status_programs(run, d, dealt, die), "status_send")])
        else:
            phases.append([Phase(copies, "send")])
    fabric(run, dies, phases)
    # each source's copies come back: its copy i as (the store carrying it, the store polled)
    returned = [dict() for _ in range(run.ranks)]
    for die in dies:
        for (s, i), st, sig in zip(die.copies, die.copy_store, die.signal_of):
            returned[s][i] = (st, sig)
    for s in range(run.ranks):
        reduce(run, dies, s, returned[s], V1_STATUS)
    return dies
