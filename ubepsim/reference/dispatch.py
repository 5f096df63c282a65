"""The dispatch's driver: one configuration's stages in order, as the kernel's
kernels/dispatch.py runs them (Figures 2 and 5 of the paper)."""

from __future__ import annotations

from .fabric import Phase, fabric
from .programs import count_programs, init_phase, launch_starts, token_programs
from ..kernels.layout import RECEIVE_GROUP, RECEIVE_SLOTS, THEN_SYNCALL
from .protocols.bsp import bsp_cumsum
from .protocols.deepep_ll import pair_receive
from .protocols.ubep import publish_offsets
from .receive import poll_counts, reorder
from .schedule import Schedule
from .state import Die, Run


def dispatch(run: Run, plan: Schedule) -> list[Die]:
    """Every die's dispatch on its schedule: each die from its launch, Init, every die's AIVs'
    programs on one fabric, then each die's receivers. Returns the dies, their AIVs' clocks at
    the end."""
    starts = launch_starts(run)
    dies = [Die(run, s, plan.dies[s].copies, starts[s]) for s in range(run.ranks)]
    C = run.cumsum_cores
    phases = []
    for s, (die, dealt) in enumerate(zip(dies, plan.dies)):
        init_phase(run, dealt, die, C)
        tokens = token_programs(run, s, dealt, die)
        if run.mech.receive == RECEIVE_GROUP:
            # Figure 5(b): the token group sends its copies while the CalCumSum group counts
            # and sends the counts
            counts = count_programs(run, s, dealt, die, C, "cumsum")
            phases.append([Phase(tokens | counts, "send", group_step="count_send")])
        else:
            # Figure 2: Token-Sending, SyncAll, SendFlag & Count, every AIV in every phase (or
            # DeepEP's finish counters instead of the SyncAll)
            counts = count_programs(run, s, dealt, die, run.cores, "sync")
            then = "syncall" if run.mech.counts_after == THEN_SYNCALL else "finish_counter"
            phases.append([Phase(tokens, "send", then), Phase(counts, "count_send")])
    fabric(run, dies, phases)
    for d, die in enumerate(dies):
        # the steps run.mech.receive runs (kernels/layout.py, RECEIVE_*)
        if run.mech.receive == RECEIVE_GROUP:
            # the CalCumSum group polls and sums the counts and publishes the offsets; each
            # token AIV waits for them, then reorders each copy once its signal is seen
            poll_counts(run, dies, d, die.cores[:C], "count_poll", run.count_sync, run.q_count,
                        run.c["prefix"] * run.e_local)
            offsets = publish_offsets(run, die.cores[:C])
            reorder(run, dies, d, die.cores[C:], offsets)
        elif run.mech.receive == RECEIVE_SLOTS:
            # DeepEP: each (local expert, source) pair's count polled, its copies copied out
            pair_receive(run, dies, d)
        else:
            # Flag verification, SyncAll, CalCumSum, SyncAll, Token-Reordering
            poll_counts(run, dies, d, die.cores, "count_poll", run.count_sync, run.q_count, 0)
            bsp_cumsum(run, die.cores)
            reorder(run, dies, d, die.cores, None)
    return dies
