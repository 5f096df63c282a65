"""One fabric for every die (docs/model.md, "Fabric"): every AIV's program of stores, every
port and every switch link, in one event loop over all dies, the plain way.

A store occupies its AIV for its work and issue, then requests its die's egress port (or its
NIC, for the hop classes from nic_from up), which serves requests first come first served, ties
by AIV. It leaves after its egress cost and climbs the switch tiers: over each tier whose link
is oversubscribed, it queues on its source domain's uplink, then on its destination domain's
downlink (top tier first), each a first-come-first-served link, ties by source die and port.
Half its hop latency after the last of them it reaches the destination's ingress port (or NIC),
served in order of arrival, ties by source die; it is visible once the port has taken it, and
its acknowledgement reaches the sender the other half of the hop later. That acknowledgement
returns the store's credits: an AIV holds at most blocks_in_flight blocks in flight, so a
congested receiver holds back every sender writing to it. A store to the die itself skips the
ports and is visible, and acknowledged, after the local latency.

An AIV's program comes in phases. Between two phases a die's AIVs either meet in a SyncAll,
which also waits until every store of the die was acknowledged (bsp's dispatch), or each waits
until its own stores were (CANN's combine, PipeBarrier<PIPE_ALL> before SetStatus).
"""

from __future__ import annotations

import heapq
import itertools
from dataclasses import dataclass
from typing import Callable

from ..kernels.layout import DIE_PORT, NIC
from ..model.profile import HOP_CLASSES
from .programs import Entry
from .state import COPY, Die, Run, Store
from .sync import syncall

# Event kinds, in the order a tie in time is broken: what each event's key holds after its time
REQUEST = 0   # (die, AIV): a store asks its die's egress port
LINK = 1      # (source die, port, link): a store reaches a tier link
ARRIVAL = 2   # (destination die, port, source die): a store reaches an ingress port


@dataclass
class Phase:
    """What a die's AIVs run in one phase: each AIV's program (programs[core]), the step it
    ends (a count group's AIVs: `group_step`), and what comes between it and the next phase, a
    step of its own: "syncall" (the die's AIVs meet once every store of the die was
    acknowledged), "finish_counter" (they meet once each issued its last store, one local
    latency later: DeepEP's finish counters), "fence" (each AIV waits for its own stores) or
    "next" (each AIV goes straight on, its stores in flight keeping their credits)."""

    programs: dict[int, list[Entry]]
    step: str
    then: str | None = None
    group_step: str | None = None

    def step_of(self, core: int, group: int) -> str:
        """The step AIV `core` ends, of a die whose first `group` AIVs are its count group."""
        return self.group_step if self.group_step is not None and core < group else self.step


class Sender:
    """Where one AIV is in its programs: its phase, its next entry, what it did of it."""

    def __init__(self, die: int, core: int):
        self.die, self.core = die, core
        self.phase = 0
        self.cursor = 0
        self.worked = False     # the next entry's work is done
        self.fenced = False     # ... and its fence passed


class Fabric:
    """Every die's AIVs, ports and links in one loop over events in time order."""

    def __init__(self, run: Run, dies: list[Die], phases: list[list[Phase]]):
        self.run, self.dies, self.phases = run, dies, phases
        c = run.c
        self.heap: list[tuple] = []
        self.order = itertools.count()   # never reached: no two events share time, kind and key
        self.senders = [[Sender(s, j) for j in range(run.cores)] for s in range(run.ranks)]
        self.done = [0] * run.ranks                    # AIVs of each die done with its phase
        self.waiting: dict[int, list[Callable]] = {}   # per store (id): who waits for its ack
        self.link_free: dict[tuple, int] = {}          # per tier link: when it is next free
        self.nic_from = c["nic_from"]
        self.tier_dies = run.tiers
        self.queues = [k for k in range(len(run.tiers)) if c[f"copy_tier{k + 1}"]]

    # --- the loop -----------------------------------------------------------------------------

    def run_all(self) -> None:
        for senders in self.senders:     # each AIV's first phase
            for sender in senders:
                self.advance(sender)
        while self.heap:
            event = heapq.heappop(self.heap)
            event[-1]()

    def push(self, time: int, kind: int, key: tuple, action: Callable) -> None:
        heapq.heappush(self.heap, (time, kind, *key, next(self.order), action))

    # --- the AIVs -----------------------------------------------------------------------------

    def program(self, sender: Sender) -> list[Entry]:
        return self.phases[sender.die][sender.phase].programs.get(sender.core, [])

    def advance(self, sender: Sender) -> None:
        """Take AIV `sender` as far as it goes: its next store's work, fence and credits, then
        its request to the egress port; or, at the end of its phase, the phase's end. It stops
        where it waits for an acknowledgement not yet known, and goes on once it is."""
        c = self.run.c
        a = self.dies[sender.die].cores[sender.core]
        prog = self.program(sender)
        if sender.cursor == len(prog):
            self.turn(sender)
            return
        entry = prog[sender.cursor]
        st = entry.store
        if not sender.worked:
            a.spend(entry.bucket, entry.work)
            sender.worked = True
        if entry.fence and not sender.fenced:
            if not self.acknowledged(a.issued, lambda: self.advance(sender)):
                return
            if a.issued:
                a.spend("sync", max(0, max(x.ack for x in a.issued) - a.t), waiting=True)
            sender.fenced = True
        # credits come back in issue order: wait for the oldest stores until this one's fit
        blocks = st.blocks(c)
        while a.in_flight and a.in_flight_blocks + blocks > c["blocks_in_flight"]:
            oldest = a.in_flight[0]
            if not self.acknowledged([oldest], lambda: self.advance(sender)):
                return
            a.in_flight.popleft()
            a.in_flight_blocks -= oldest.blocks(c)
            a.spend(entry.bucket, max(0, oldest.ack - a.t))
        if st.kind == COPY and a.first_copy < 0:
            a.first_copy = a.t
        a.spend(entry.bucket, st.cost(c, "issue"))
        self.push(a.t, REQUEST, (sender.die, sender.core), lambda: self.serve(sender, st))

    def acknowledged(self, stores: list[Store], then: Callable) -> bool:
        """Whether every store's acknowledgement is known; if not, `then` runs once the first
        unknown one is."""
        for x in stores:
            if x.ack < 0:
                self.waiting.setdefault(id(x), []).append(then)
                return False
        return True

    def turn(self, sender: Sender) -> None:
        """AIV `sender` is done with its phase's program: it marks the phase's end, then what
        comes before the next phase, if there is one: its fence, the die's barrier, or (next)
        nothing."""
        s = sender.die
        die = self.dies[s]
        a = die.cores[sender.core]
        phase = self.phases[s][sender.phase]
        a.mark(phase.step_of(sender.core, self.run.cumsum_cores))
        if phase.then == "fence":
            self.fence(sender)
        elif phase.then == "next":
            self.begin_phase(sender, drained=False)
        elif phase.then in ("syncall", "finish_counter"):
            self.done[s] += 1
            if self.done[s] == self.run.cores:
                self.barrier(s, acked=phase.then == "syncall")

    def fence(self, sender: Sender) -> None:
        """The AIV waits, idle, until every store it issued was acknowledged, then starts its
        next phase."""
        a = self.dies[sender.die].cores[sender.core]
        if not self.acknowledged(a.issued, lambda: self.fence(sender)):
            return
        if a.issued:
            a.spend("sync", max(0, max(x.ack for x in a.issued) - a.t), waiting=True)
        self.begin_phase(sender)

    def barrier(self, s: int, acked: bool) -> None:
        """The die's barrier once every AIV is done: if `acked` (a SyncAll), once every store
        of the die was acknowledged too, its cost later every AIV starts its next phase; else
        (finish counters) one local latency after the last AIV."""
        die = self.dies[s]
        issued = [x for a in die.cores for x in a.issued] if acked else []
        if not self.acknowledged(issued, lambda: self.barrier(s, acked)):
            return
        ready = max([a.t for a in die.cores] + [x.ack for x in issued])
        syncall(die.cores, ready, self.run.c["syncall" if acked else "lat_local"],
                "syncall" if acked else "finish_counter")
        self.done[s] = 0
        for sender in self.senders[s]:
            self.begin_phase(sender, drained=acked)

    def begin_phase(self, sender: Sender, drained: bool = True) -> None:
        """AIV `sender` begins its next phase: if `drained`, nothing in flight; else its stores
        in flight keep their credits."""
        a = self.dies[sender.die].cores[sender.core]
        if drained:
            # every credit came back: the fence or SyncAll saw to it
            a.in_flight.clear()
            a.in_flight_blocks = 0
        sender.phase += 1
        sender.cursor = 0
        sender.worked = sender.fenced = False
        self.advance(sender)

    # --- ports and links ----------------------------------------------------------------------

    def serve(self, sender: Sender, st: Store) -> None:
        """The egress port takes the AIV's store (its request is the earliest, ties by AIV);
        the AIV then goes on to its next."""
        c = self.run.c
        s = sender.die
        die = self.dies[s]
        a = die.cores[sender.core]
        t = a.t
        st.issue_end = t
        st.seq = len(die.stores)
        die.stores.append(st)
        self.dies[st.dst].inbox.append(st)
        if st.dst == s:
            st.depart = t
            st.ack = st.visible = t + c["lat_local"]
        else:
            st.port = NIC if st.hop >= self.nic_from else DIE_PORT
            st.depart = max(t, die.egress_free[st.port]) + \
                st.cost(c, "nic" if st.port == NIC else "egress")
            die.egress_free[st.port] = st.depart
            self.climb(st, st.depart, 0)
        a.issued.append(st)
        a.in_flight.append(st)
        a.in_flight_blocks += st.blocks(c)
        sender.cursor += 1
        sender.worked = sender.fenced = False
        self.advance(sender)

    def links(self, st: Store) -> list[tuple[int, int, int]]:
        """The tier links the store queues on, in order: (tier, up or down, domain), its source
        domain's uplinks climbing, then its destination domain's downlinks descending; only
        the tiers that queue."""
        climbed = [k for k in range(st.hop - 2) if k in self.queues]
        return [(k, 0, st.src // self.tier_dies[k]) for k in climbed] + \
            [(k, 1, st.dst // self.tier_dies[k]) for k in reversed(climbed)]

    def climb(self, st: Store, t: int, step: int) -> None:
        """The store at `t` before the step-th link of its path, or past them all, on its way to
        the destination's ingress port half its hop later."""
        path = self.links(st)
        if step < len(path):
            link = path[step]
            self.push(t, LINK, (st.src, st.port, link), lambda: self.cross(st, link, t, step))
            return
        c = self.run.c
        st.arrival = t + c[f"lat_{HOP_CLASSES[st.hop]}"] // 2
        self.push(st.arrival, ARRIVAL, (st.dst, st.port, st.src), lambda: self.land(st))

    def cross(self, st: Store, link: tuple[int, int, int], t: int, step: int) -> None:
        """A tier link takes the store, first come first served, at its tier's cost."""
        out = max(t, self.link_free.get(link, 0)) + st.cost(self.run.c, f"tier{link[0] + 1}")
        self.link_free[link] = out
        self.climb(st, out, step + 1)

    def land(self, st: Store) -> None:
        """The destination's ingress port takes the store: visible then, acknowledged half a hop
        later; whoever waited for the acknowledgement goes on."""
        c = self.run.c
        die = self.dies[st.dst]
        start = max(st.arrival, die.ingress_free[st.port])
        st.queued = start - st.arrival
        st.visible = start + st.cost(c, "nic" if st.port == NIC else "ingress")
        die.ingress_free[st.port] = st.visible
        lat = c[f"lat_{HOP_CLASSES[st.hop]}"]
        st.ack = st.visible + lat - lat // 2
        for then in self.waiting.pop(id(st), []):
            then()


def fabric(run: Run, dies: list[Die], phases: list[list[Phase]]) -> None:
    """Every die's phases (phases[die]) on one fabric, until every store is visible; then each
    AIV's last copy's acknowledgement (the end of its send latency)."""
    Fabric(run, dies, phases).run_all()
    for die in dies:
        for a in die.cores:
            copies = [x for x in a.issued if x.kind == COPY]
            if copies:
                a.last_copy_ack = copies[-1].ack
