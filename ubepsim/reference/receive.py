"""The receiving side of a die: the counts' polls (a protocol's own step after them is in
protocols/: bsp's CalCumSum, ubep's offsets, deepep_ll's fixed slots), Token-Reordering; the
polls themselves are polls.py's."""

from __future__ import annotations

from .polls import poll, seen
from ..kernels.layout import RECEIVE_GROUP
from .state import COPY, Core, Die, Run, share
from .sync import DataAsFlag


def poll_counts(run: Run, dies: list[Die], d: int, group: list[Core], step: str,
                policy: DataAsFlag, chance: float, prefix: int) -> None:
    """Flag verification (bsp, every AIV) / the CalCumSum group's polls (ubep) / CANN's V1
    combine's status polls (WaitDispatch): each AIV of the group takes its share of the
    sources' signals, run.per_dest from each (x = source x per_dest + e); for each, it polls
    the store signalling those counts (that status), reads it out, verifies and re-arms it as
    `policy` says (collisions at `chance`), and adds `prefix` cycles of partial prefix sum
    (ubep's CalCumSum). Then it ends its step `step` (count_poll, status_poll)."""
    c, G = run.c, run.per_dest
    for j, a in enumerate(group):
        for x in share(j, len(group), run.ranks * G):
            st = dies[x // G].count_signal[d * G + x % G]
            poll(a, seen(run, dies[d], st, x, chance, policy), c["poll"], "sync")
            # the status read out once it is there: strided read, GatherMask, Sum and the
            # vector-to-scalar sync (CANN's WaitDispatch)
            a.spend("sync", c["status_poll"])
            if policy.verify_per_block:
                a.spend("sync", c["count_verify"])
            if policy.rearm_sentinel:
                a.spend("sync", c["count_reset"])
            a.spend("cumsum", prefix)
        a.mark(step)


def received(dies: list[Die], d: int) -> list[tuple[int, int]]:
    """The copies die d received, as (source, copy index), in output order: local expert,
    source, copy index."""
    got = [(st.src, st.ref) for st in dies[d].inbox if st.kind == COPY]
    return sorted(got, key=lambda si: (dies[si[0]].copies[si[1]][2], si[0], si[1]))


def reorder(run: Run, dies: list[Die], d: int, group: list[Core], offsets: int | None) -> None:
    """Token-Reordering: each AIV of the group copies its equal contiguous share of the copies
    die d received (in output order) to their places, then ends its step, reorder.

    After a count group an AIV first polls for the offsets (published at `offsets`) and, before each
    copy, polls the store signalling it, verifying it as run.copy_sync says; it re-arms each
    copy's sentinel after use. bsp's copies carry no signal: its SyncAlls ordered them.
    """
    c, policy = run.c, run.copy_sync
    die = dies[d]
    got = received(dies, d)
    for j, a in enumerate(group):
        if run.mech.receive == RECEIVE_GROUP:
            poll(a, offsets, c["poll"], "cumsum")
            a.mark("offset_poll")
        for x in share(j, len(group), len(got)):
            s, i = got[x]
            if run.mech.signalled_copies:
                st = dies[s].signal_of[i]
                poll(a, seen(run, die, st, run.ranks + x, run.q_copy, policy), c["poll"], "sync")
                if policy.verify_per_block:
                    a.spend("sync", c["copy_verify"])
            data = dies[s].copy_store[i]
            if a.t < data.visible:
                die.violations += 1
            a.spend("reorder", c["local_copy"])
            if policy.rearm_sentinel:
                a.spend("reorder", c["copy_reset"])
            die.take((s, i), data, d)
        a.mark("reorder")
