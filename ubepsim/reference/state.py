"""What the twin's stages share: one configuration lowered (`Run`), a die, an AIV, a store, and
how work is shared out."""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass


from ..kernels import protocols
from ..kernels.layout import (COMBINE_TIMELINE, DISPATCH_TIMELINE, N_PORTS, N_TIERS,
                              RECEIVE_GROUP)
from ..kernels.protocols import Mechanisms
from ..model.costs import COST_INDEX, lower
from ..model.params import Config
from ..model.profile import Profile
from ..model.result_fields import PHASE_NAMES
from .rng import COMBINE_SENTINEL, SENTINEL, stream
from .sync import POLICY, UNSIGNALLED, DataAsFlag

# Store kinds, and the costs (costs.COSTS: <name>_issue, _egress, _ingress, _blocks) each is
# charged; a copy combine returns is a COPY charged as a "return" (its own bytes and blocks).
COPY, FLAG, COUNT, CHECKSUM = "copy", "flag", "count", "checksum"
COST_NAME = {COPY: "copy", COUNT: "count", FLAG: "signal", CHECKSUM: "signal"}
RETURN = "return"

def share(j: int, parts: int, total: int) -> range:
    """The j-th of `parts` contiguous shares of range(total), their sizes at most one apart."""
    return range(j * total // parts, (j + 1) * total // parts)


@dataclass(frozen=True)
class Run:
    """One configuration lowered to what every stage reads."""

    cfg: Config
    c: dict[str, int]           # integer costs by name (costs.COSTS), from the kernel's lowering
    q_copy: float               # sentinel collision chance of a polled copy
    q_count: float              # ... and of a polled count message
    q_return: float             # ... and of a polled copy combine returns
    copy_sync: DataAsFlag       # the Data-as-Flag row token copies follow (bsp: none)
    count_sync: DataAsFlag      # ... and count messages (either protocol)
    mech: Mechanisms            # the protocol's mechanisms (kernels/protocols.py)
    ranks: int
    cores: int
    cumsum_cores: int            # the CalCumSum group, AIVs 0 .. cumsum_cores - 1 (bsp: none)
    senders: int                # the token AIVs that follow it (bsp: every AIV)
    e_local: int                # experts per die
    per_dest: int               # count messages (statuses) a die sends each destination: one
                                # per expert under PER_EXPERT, else one
    tiers: list[int]            # sizes of the switch domains below the top tier
    clock: float                # cycles per microsecond

    @classmethod
    def of(cls, cfg: Config, profile: Profile) -> Run:
        # the lowering takes columns of values: a column of one
        costs, chances = lower(cfg.columns(), profile)
        c = {name: int(costs[0, i]) for name, i in COST_INDEX.items()}
        mech = protocols.of(cfg.protocol)
        if cfg.tuned:
            raise ValueError("the twin runs a stated CalCumSum group; give it the tuned one's "
                             "size (ubepsim.model.groups.resolve_config)")
        cumsum_cores = cfg.cumsum_cores if mech.receive == RECEIVE_GROUP else 0
        sync = POLICY[protocols.chosen(mech.sync, cfg.sync)]
        return cls(cfg=cfg, c=c, q_copy=float(chances[0, 0]), q_count=float(chances[0, 1]),
                   q_return=float(chances[0, 2]),
                   copy_sync=sync if mech.signalled_copies else UNSIGNALLED,
                   count_sync=sync, mech=mech, ranks=cfg.ranks, cores=cfg.cores,
                   cumsum_cores=cumsum_cores, senders=cfg.cores - cumsum_cores,
                   e_local=cfg.experts // cfg.ranks,
                   per_dest=int(protocols.per_dest_of(cfg.protocol, cfg.experts // cfg.ranks)),
                   tiers=[c[f"tier{k + 1}_dies"] for k in range(N_TIERS)
                          if c[f"tier{k + 1}_dies"]],
                   clock=profile.values["clock_ghz"] * 1000.0)


class Store:
    """One remote (or local) store and its times: issued, left the egress port, reached the
    destination's ingress port, acknowledged to the sender, visible to the receiver's polls;
    the port it left and entered by, and how long it waited in the ingress port's queue. A
    time not yet known is -1."""

    __slots__ = ("src", "dst", "kind", "ref", "seq", "core", "issue_end", "depart", "arrival",
                 "ack", "visible", "hop", "costs", "port", "queued")

    def __init__(self, src, dst, kind, ref, core, hop, costs=None):
        self.src, self.dst, self.kind, self.ref = src, dst, kind, ref
        self.core, self.hop = core, hop
        self.costs = costs or COST_NAME[kind]    # the costs it is charged: copy, return, ...
        self.seq = self.issue_end = self.depart = self.arrival = self.ack = self.visible = -1
        self.port = self.queued = -1

    def cost(self, c: dict, stage: str) -> int:
        """Its cost at `stage` (layout.STORE_COSTS: issue, egress, ingress, nic, tier1...)."""
        return c[f"{self.costs}_{stage}"]

    def blocks(self, c: dict) -> int:
        """The blocks it holds in flight (a flag or a checksum is one)."""
        return c.get(f"{self.costs}_blocks", 1)


class Core:
    """One AIV's clock, the stores it issued, its time per bucket and its phase marks: when each
    step of its timeline (`steps`, kernels/layout.py's) ended."""

    def __init__(self, steps: tuple[str, ...], start: int = 0):
        self.steps = steps
        self.t = start
        self.issued: list[Store] = []               # every store it issued, in order
        self.in_flight: deque[Store] = deque()      # those whose credits are out, in order
        self.in_flight_blocks = 0
        self.buckets = dict.fromkeys(PHASE_NAMES, 0)   # spent by name: a phase undeclared fails
        self.wait = 0
        self.marks: list[int] = [start]   # MARK_START
        self.first_copy = -1
        self.last_copy_ack = -1

    def spend(self, bucket: str, cycles: int, waiting: bool = False) -> None:
        self.t += cycles
        self.buckets[bucket] += cycles
        if waiting:
            self.wait += cycles

    def mark(self, step: str) -> None:
        """End step `step` now: the steps end in their timeline's order, each once."""
        assert self.steps[len(self.marks) - 1] == step, (self.steps, self.marks, step)
        self.marks.append(self.t)


class Die:
    """One die in one kernel (dispatch or combine): its AIVs, the stores its egress port served,
    what its receivers poll for its copies and counts (combine: statuses), and what its
    receivers counted."""

    def __init__(self, run: Run, die: int, copies: list, start: int = 0,
                 ports: tuple[list[int], list[int]] | None = None, combine: bool = False):
        # each AIV's steps: its role's in dispatch, the protocol's combine's
        returns = COMBINE_TIMELINE[protocols.combine_steps(run.cfg.protocol)]
        self.cores = [Core(returns if combine else DISPATCH_TIMELINE[role], start)
                      for n, role in protocols.roles(run.cfg.protocol, run.cores,
                                                     run.cumsum_cores, combine)
                      for _ in range(n)]
        self.copies = copies                 # dispatch: (token, k, expert), in (token, k) order;
                                             # combine: its returned copies, in receive order
        self.stores: list[Store] = []        # in the order its egress ports served them
        # when each of its ports (layout: die port, NIC) is next free, out and in
        self.egress_free, self.ingress_free = ports or ([0] * N_PORTS, [0] * N_PORTS)
        self.inbox: list[Store] = []         # the stores addressed to it, as they came
        self.copy_store: list[Store | None] = [None] * len(copies)   # per copy: its store
        self.signal_of: list[Store | None] = [None] * len(copies)    # ... the store polled
        self.count_signal: dict[int, Store] = {}   # per destination d and message e (key
                                                   # d * run.per_dest + e): the store polled
                                                   # for it (combine: d, its status)
        # as a receiver: the collision draws, and what it counted
        self.sentinel_key = stream(run.cfg.seed, run.cfg.workload_key, die,
                                   COMBINE_SENTINEL if combine else SENTINEL)
        self.taken: set[tuple[int, int]] = set()
        self.delivered = self.violations = self.collisions = 0
        self.reduced: list[tuple[int, int]] = []   # combine: (token, when an AIV reduces it)


    def end(self) -> int:
        return max(a.t for a in self.cores)

    def take(self, copy: tuple[int, int], store: Store, die: int) -> None:
        """A receiver of this die (`die`) takes a copy (its key: (source, index) in dispatch,
        (token, k) in combine), which `store` carried: a delivery the first time, if the store
        was addressed here."""
        if copy not in self.taken and store.dst == die:
            self.taken.add(copy)
            self.delivered += 1
