"""The receiving side of a die: polls, the counts and CalCumSum, the offsets, Token-Reordering.

A poll reads the poller's own memory: each costs a poll period (the local latency) and sees a
value only if it was visible when the poll was issued.
"""

from __future__ import annotations

from .rng import unit
from .state import (BSP_CUMSUM, BSP_SYNCALL_2, BSP_SYNCALL_3, COPY, UBEP_OFFSETS, Core, Die,
                    Run, Store, share)
from .sync import DataAsFlag, syncall


def poll(core: Core, visible: int, period: int, bucket: str) -> None:
    """Poll own memory until `visible` is seen: one load per `period`, issued back to back."""
    start = core.t
    while True:
        issued = core.t
        core.t += period
        if visible <= issued:
            break
    core.buckets[bucket] += core.t - start
    core.wait += core.t - start


def seen(run: Run, die: Die, st: Store, index: int, chance: float, policy: DataAsFlag) -> int:
    """When die's polls can see `st`: when it became visible or, if its payload collided with
    the sentinel (draw `index` of the die's stream, with this chance), a timeout later."""
    if policy.timeout_on_collision and unit(die.sentinel_key, index) < chance:
        die.collisions += 1
        return st.visible + run.c["timeout"]
    return st.visible


def poll_counts(run: Run, dies: list[Die], d: int, group: list[Core], mark: int,
                policy: DataAsFlag, chance: float, prefix: int) -> None:
    """Flag verification (bsp, every AIV) / the CalCumSum group's polls (ubep) / CANN's V1
    combine's status polls (WaitDispatch): each AIV of the group takes its share of the
    sources' signals, run.per_dest from each (x = source x per_dest + e); for each, it polls
    the store signalling those counts (that status), reads it out, verifies and re-arms it as
    `policy` says (collisions at `chance`), and adds `prefix` cycles of partial prefix sum
    (ubep's CalCumSum). Then it ends its phase `mark`."""
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
        a.mark(mark)


def publish_offsets(run: Run, group: list[Core]) -> int:
    """When the token AIVs can see the offsets: the CalCumSum group publishes them with one
    local store once its last AIV is done."""
    return max(a.t for a in group) + run.c["signal_issue"] + run.c["lat_local"]


def bsp_cumsum(run: Run, cores: list[Core]) -> None:
    """bsp's SyncAll, CalCumSum (each AIV an equal share of the ranks x experts-per-die
    counts' prefix sum), SyncAll."""
    syncall(cores, max(a.t for a in cores), run.c["syncall"], BSP_SYNCALL_2)
    entries = run.ranks * run.e_local
    for j, a in enumerate(cores):
        a.spend("cumsum", run.c["prefix"] * len(share(j, len(cores), entries)))
        a.mark(BSP_CUMSUM)
    syncall(cores, max(a.t for a in cores), run.c["syncall"], BSP_SYNCALL_3)


def received(dies: list[Die], d: int) -> list[tuple[int, int]]:
    """The copies die d received, as (source, copy index), in output order: local expert,
    source, copy index."""
    got = [(st.src, st.ref) for st in dies[d].inbox if st.kind == COPY]
    return sorted(got, key=lambda si: (dies[si[0]].copies[si[1]][2], si[0], si[1]))


def pair_receive(run: Run, dies: list[Die], d: int, mark: int) -> None:
    """Fixed slots (DeepEP's receive): each AIV of die d takes its equal contiguous share of
    the (local expert, source) pairs, pair q = expert * ranks + source; per pair it polls the
    source's count message (verified and re-armed as run.count_sync says), then copies the
    pair's copies out of their slots, each once it is there where the count came behind them
    on their queue (ORDERED). Then it ends its phase `mark`."""
    c, policy = run.c, run.count_sync
    die = dies[d]
    R, EL = run.ranks, run.e_local
    pairs: list[list[tuple[int, int]]] = [[] for _ in range(EL * R)]
    for s, i in received(dies, d):
        pairs[dies[s].copies[i][2] % EL * R + s].append((s, i))
    for j, a in enumerate(die.cores):
        for q in share(j, run.cores, EL * R):
            st = dies[q % R].count_signal[d * run.per_dest + q // R % run.per_dest]
            poll(a, seen(run, die, st, q, run.q_count, policy), c["poll"], "sync")
            a.spend("sync", c["status_poll"])
            if policy.verify_per_block:
                a.spend("sync", c["count_verify"])
            if policy.rearm_sentinel:
                a.spend("sync", c["count_reset"])
            for s, i in pairs[q]:
                data = dies[s].copy_store[i]
                if run.mech.ordered:
                    a.spend("sync", max(0, data.visible - a.t), waiting=True)
                if a.t < data.visible:
                    die.violations += 1
                a.spend("reorder", c["local_copy"])
                die.take((s, i), data, d)
        a.mark(mark)


def reorder(run: Run, dies: list[Die], d: int, group: list[Core], offsets: int | None,
            mark: int) -> None:
    """Token-Reordering: each AIV of the group copies its equal contiguous share of the copies
    die d received (in output order) to their places, then ends its phase `mark`.

    After a count group an AIV first polls for the offsets (published at `offsets`) and, before each
    copy, polls the store signalling it, verifying it as run.copy_sync says; it re-arms each
    copy's sentinel after use. bsp's copies carry no signal: its SyncAlls ordered them.
    """
    c, policy = run.c, run.copy_sync
    die = dies[d]
    got = received(dies, d)
    for j, a in enumerate(group):
        if run.mech.count_group:
            poll(a, offsets, c["poll"], "cumsum")
            a.mark(UBEP_OFFSETS)
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
        a.mark(mark)
