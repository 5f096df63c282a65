"""Each AIV's instruction stream up to its receiving: Init, then its program of stores.

A program is the list of stores the AIV issues in order, each with the work before it. Building
one also tells the receivers what to poll: for each copy the store carrying it and the store
that signals it, for each destination the store that signals this die's counts.
"""

from __future__ import annotations

from typing import NamedTuple

from ..kernels.layout import ADDRESS, MARKED, NEW_DEST, PER_EXPERT, PRECEDED, STORE_WORK
from .rng import LAUNCH, stream, unit
from .schedule import DieSchedule
from .state import CHECKSUM, COPY, COUNT, FLAG, RETURN, Die, Run, Store, share
from .sync import DataAsFlag


class Entry(NamedTuple):
    """One store of a program."""

    store: Store
    work: int       # cycles of work before it
    fence: bool     # it waits until every earlier store of its AIV is acknowledged
    bucket: str     # where its work, issue and waits for credits are counted


def launch_starts(run: Run) -> list[int]:
    """When each die's kernel starts, in cycles from the first launch: die d at a uniform draw
    in [0, launch_skew) of its own stream, less the earliest die's (launch_skew 0: every die
    at 0). Ranks launched without a barrier between them do not start together, and a
    receiver waits for its last sender."""
    skew = run.c["launch_skew"]
    if skew == 0:
        return [0] * run.ranks
    draws = [int(unit(stream(run.cfg.seed, run.cfg.workload_key, d, LAUNCH), 0) * skew)
             for d in range(run.ranks)]
    return [x - min(draws) for x in draws]


def init_phase(run: Run, plan: DieSchedule, die: Die, first: int,
               combine: bool = False) -> None:
    """Init: every AIV's setup and, in dispatch, its load of the die's expert ids; a sending AIV
    (AIVs `first` on: dispatch's token group, every AIV in combine) also searches for where its
    list starts (one VectorCount per step and one for the offset) and loads its tokens into
    UBuf (in dispatch under UBEP, each with its quantization: init_load)."""
    c = run.c
    setup = c["init"] + (0 if combine else c["ids_load"])
    for j in range(run.cores - first):
        a = die.cores[first + j]
        steps = plan.steps[j]
        search = 0 if steps is None else (steps + 1) * c["vcount"]
        a.spend("init", setup + search + plan.loads[j] * (0 if combine else c["init_load"]))
        a.mark("init")
    for a in die.cores[:first]:
        a.spend("init", setup)
        a.mark("init")


def store_work(run: Run, at: str, marker: bool = False, experts: int = 0) -> tuple[int, int]:
    """What an AIV pays before a store of work kind `at` (layout.WORK_KINDS), from its
    layout.STORE_WORK charges: (the work before every such store: EACH, per expert it counts,
    dc's marker work where `marker`; what a store to a new destination adds: NEW_DEST, and
    ADDRESS where the protocol preloads its tokens, CANN's send loop paying it per copy)."""
    work = switch = 0
    for w in STORE_WORK:
        if w.at != at or w.per == PRECEDED:   # (PRECEDED: a copy's own, count_cycles)
            continue
        x = run.c[w.cost] * (experts if w.per == PER_EXPERT else
                             int(marker) if w.per == MARKED else 1)
        if w.per == NEW_DEST or (w.per == ADDRESS and run.mech.token_preload):
            switch += x
        else:
            work += x
    return work, switch


def count_cycles(c: dict, n: int) -> int:
    """CANN's CalTokenSendExpertCnt over n expert ids: its fixed cycles (layout.STORE_WORK's
    PRECEDED charges) and five vector instructions over n int32 (Duplicate, Sub, Abs, Mins,
    ReduceSum), at the vector unit's bytes a cycle."""
    fixed = sum(c[w.cost] for w in STORE_WORK if w.at == "copy" and w.per == PRECEDED)
    return fixed + 5 * (c["vector_op"] + -(-4 * n // c["vector_bytes"]))


def signal(policy: DataAsFlag, st: Store, last_to_dest: bool) -> Entry | None:
    """The store, if any, that the Data-as-Flag variant sends apart to signal `st`: a flag
    after every signalled store, or a checksum after an AIV's last one to a destination."""
    if policy.flag_per_store:
        flag = Store(st.src, st.dst, FLAG, st.ref, st.core, st.hop)
        return Entry(flag, 0, policy.fence_before_flag, "sync")
    if policy.checksum_per_destination and last_to_dest:
        return Entry(Store(st.src, st.dst, CHECKSUM, st.ref, st.core, st.hop), 0, False, "sync")
    return None


def token_program(run: Run, s: int, plan: DieSchedule, die: Die, core: int, j: int, work: int,
                  costs: str) -> list[Entry]:
    """Sending AIV j of die s (AIV `core`): its copies in its list's order, each with `work`
    cycles before it and charged as `costs` (a dispatched copy, or a returned one), each
    signalled as run.copy_sync says. A store's ref is its copy's index at the die sending
    it in dispatch (a returned copy's at its source)."""
    policy = run.copy_sync
    mine = plan.lists[j]
    dest = {i: plan.dests[i] for i in mine}
    last_to = {dest[i]: i for i in mine}
    prog = []
    for i in mine:
        st = Store(s, dest[i], COPY, plan.copies[i][1] if costs == RETURN else i, core,
                   plan.hops[i], costs)
        die.copy_store[i] = die.signal_of[i] = st
        # CANN's send loop counts the copies before this one (its index i) to its expert
        counted = count_cycles(run.c, i) if costs != RETURN and run.c["copy_count"] and i else 0
        prog.append(Entry(st, work + counted, False, "send"))
        sig = signal(policy, st, last_to[dest[i]] == i)
        if sig is None:
            continue
        prog.append(sig)
        if sig.store.kind == FLAG:
            die.signal_of[i] = sig.store
        else:   # a checksum signals every copy of the AIV to its destination
            for i2 in mine:
                if dest[i2] == dest[i]:
                    die.signal_of[i2] = sig.store
    return prog


def count_program(run: Run, s: int, plan: DieSchedule, die: Die, j: int, share_: range,
                  bucket: str) -> list[Entry]:
    """Counting AIV j of die s: a count message for each (destination, message) pair q of its
    share, destination q // run.per_dest (a VectorCount per expert it counts before it), each
    signalled as run.count_sync says."""
    prog = []
    for q in share_:
        d = q // run.per_dest
        st = Store(s, d, COUNT, q, j, plan.die_hop[d])   # ref: its pair q
        die.count_signal[q] = st
        # per expert it counts: its VectorCount and the vector chain that turns it into a
        # count (CANN's CalTokenSendExpertCnt)
        prog.append(Entry(st, store_work(run, "count", experts=run.e_local // run.per_dest)[0],
                          False, bucket))
        sig = signal(run.count_sync, st, True)
        if sig:
            prog.append(sig)
            die.count_signal[q] = sig.store
    return prog


def mark_switch(run: Run, prog: list[Entry]) -> list[Entry]:
    """The program with each store to a new destination marked by its address chain (the
    kernel's new-destination bit, whose cycles its kind table holds): a store to another die
    than the store before it in the program (the first store included) first loads that die's
    window address, two dependent scalar loads (CANN's GetWindAddrByRankId), the work its
    kind's STORE_WORK charges add there (store_work; none for a copy of CANN's send loop,
    which loads the address for every copy)."""
    out, last = [], None
    for e in prog:
        if e.store.dst != last:
            e = e._replace(work=e.work + store_work(run, e.store.costs)[1])
            last = e.store.dst
        out.append(e)
    return out


def token_programs(run: Run, s: int, plan: DieSchedule, die: Die,
                   combine: bool = False) -> dict[int, list[Entry]]:
    """Every sending AIV's program on die s, by AIV: dispatch's token group, each copy with
    dc's marker work and (CANN's send loop) its token's load before it; or (combine) every AIV,
    each returned copy with its read into UBuf, its quantization (int8) and the marker work
    before it."""
    first = 0 if combine else run.cumsum_cores
    work = store_work(run, RETURN if combine else "copy", run.copy_sync.marker_work_per_copy)[0]
    return {first + j: mark_switch(run, token_program(run, s, plan, die, first + j, j, work,
                                                      RETURN if combine else "copy"))
            for j in range(run.cores - first)}


def status_programs(run: Run, s: int, plan: DieSchedule, die: Die) -> dict[int, list[Entry]]:
    """CANN's V1 combine (SetStatus): each AIV's statuses to the destinations it owns,
    run.per_dest to each (DeepEP's flag per expert), at positions y = r x per_dest + e of the
    walk with y x cores / (ranks x per_dest) = its index (its block under expert_block on the
    plain walk: also those it had no copies for), each a one-block flag that the destination
    polls for this die's copies."""
    R, A, G = run.ranks, run.cores, run.per_dest
    order = [(s + 1 + r) % R for r in range(R)]
    progs = {}
    for j in range(A):
        prog = []
        for y in range(-(-j * R * G // A), -(-(j + 1) * R * G // A)):
            d = order[y // G]
            st = Store(s, d, FLAG, d * G + y % G, j, plan.die_hop[d])   # ref: its key
            die.count_signal[d * G + y % G] = st
            prog.append(Entry(st, 0, False, "sync"))
        progs[j] = mark_switch(run, prog)
    return progs


def count_programs(run: Run, s: int, plan: DieSchedule, die: Die, n: int,
                   bucket: str) -> dict[int, list[Entry]]:
    """The programs of AIVs 0 .. n - 1, each counting for its share of the (destination,
    message) pairs."""
    return {j: mark_switch(run, count_program(run, s, plan, die, j,
                                              share(j, n, run.ranks * run.per_dest), bucket))
            for j in range(n)}
