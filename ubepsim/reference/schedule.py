"""Token-to-AIV schedules and Algorithm 1's quaternary search (paper Section 3.3).

Every schedule takes a die's copies in one order, the key order: the experts in the order `walk`
takes their dies, a die's experts in index order (the remapped expert order under homogenized),
then copy index. `expert_block_slices` gives each AIV whole experts, `balanced_slices` equal
contiguous slices, `homogenized_deal` deals the order out like cards; `slices` takes the
schedule's (token order: equal contiguous slices of the copies' own order).
"""

from __future__ import annotations

from typing import NamedTuple

from ..kernels.protocols import chosen
from ..model import params
from ..model.params import Config
from ..model.profile import HOP_CLASSES
from .state import Run, share


class DieSchedule(NamedTuple):
    """One die's copies dealt to its sending AIVs (dispatch's token AIVs, every AIV in
    combine)."""

    copies: list[tuple]                  # dispatch: (token, k, expert), in (token, k) order;
                                         # combine: (source, copy index there), receive order
    hops: list[int]                      # each copy's hop class
    die_hop: list[int]                   # the hop class to each die
    lists: list[list[int]]               # each sending AIV's copies, in sending order
    loads: list[int]                     # each sending AIV's token loads at Init
    steps: list[int | None]              # each sending AIV's search steps (None: no search)
    dests: list[int]                     # each copy's destination die


class Schedule(NamedTuple):
    """Every die's schedule, and what the results and the latency bound take from it."""

    dies: list[DieSchedule]
    copies_hop: list[int]    # copies of each hop class, over all dies
    max_out: int             # the most remote copies out of one die
    max_in: int              # the most remote copies into one die
    qsteps_max: int          # the longest quaternary search

    @classmethod
    def of(cls, dies: list[DieSchedule], ranks: int) -> Schedule:
        """Every die's schedule, with what the results and the latency bound take from
        them."""
        copies_hop = [0] * len(HOP_CLASSES)
        into = [0] * ranks
        for die in dies:
            for d, h in zip(die.dests, die.hops):
                copies_hop[h] += 1
                if h:
                    into[d] += 1
        max_out = max((sum(1 for h in die.hops if h) for die in dies), default=0)
        qsteps = max((n for die in dies for n in die.steps if n is not None), default=0)
        return cls(dies, copies_hop, max_out, max(into), qsteps)


def hop_of(src: int, dst: int, npu_dies: int, tiers: list[int], rails: int = 0) -> int:
    """Hop class index: 0 local, 1 intra-NPU, then one more per switch tier climbed. On rails
    (rails > 0), a domain above the first tier joins two dies only on the same rail."""
    if src == dst:
        return 0
    domains = [npu_dies] + tiers
    for level, size in enumerate(domains):
        if src // size == dst // size and (level < 2 or not rails
                                            or src % rails == dst % rails):
            return level + 1
    return len(domains) + 1


def hop_classes(ranks: int, npu_dies: int, tiers: list[int],
                rails: int = 0) -> list[list[int]]:
    """[src][dst]: the hop class of every pair of dies."""
    return [[hop_of(s, d, npu_dies, tiers, rails) for d in range(ranks)]
            for s in range(ranks)]


def walk(die_hop: list[int], src: int, homogenized: bool, rotated: bool = True) -> list[int]:
    """The order in which die src's schedule walks the destination dies (die_hop[d]: the hop
    class from src to d).

    Rotated: from the next die on, wrapping round, so that the dies do not all send to the same
    destination at the same time. Not rotated (dispatch's expert_block, CANN EP's hot spots):
    every die walks from die 0, so AIV j of every die writes to the same destination at once.
    Homogenized puts the farthest hop class first and walks each class the same way, its dies
    in index order from the (src + 1)-th on: walking the whole order instead, every die of a
    switch domain would meet the next domain's dies in the same order at the same time, an
    incast on each in turn.
    """
    R = len(die_hop)
    if not homogenized:
        first = src + 1 if rotated else 0
        return [(first + i) % R for i in range(R)]
    members = {h: [d for d in range(R) if die_hop[d] == h] for h in set(die_hop)}
    return [ds[(src + 1 + i) % len(ds)] for h in sorted(members, reverse=True)
            for ds in [members[h]] for i in range(len(ds))]


def key_order(cfg: Config, copies: list[tuple[int, int, int]], die_hop: list[int],
              src: int, kind: params.Schedule) -> tuple[list[int], list[int]]:
    """The copy indices in key order, and their keys (remapped experts) in that order: the
    sorted list the quaternary search counts in."""
    e_local = cfg.experts // cfg.ranks
    remap = [d * e_local + x
             for d in walk(die_hop, src, kind is params.Schedule.homogenized,
                           kind is not params.Schedule.expert_block)
             for x in range(e_local)]
    key = [0] * cfg.experts
    for r, e in enumerate(remap):
        key[e] = r
    order = sorted(range(len(copies)), key=lambda i: (key[copies[i][2]], i))
    return order, [key[copies[i][2]] for i in order]


def expert_block_slices(order: list[int], keys: list[int], n: int,
                        n_experts: int) -> list[list[int]]:
    """AIV j owns a block of experts: those whose key r has r * n // n_experts == j."""
    lists: list[list[int]] = [[] for _ in range(n)]
    for i, r in zip(order, keys):
        lists[r * n // n_experts].append(i)
    return lists


def balanced_slices(order: list[int], n: int) -> list[list[int]]:
    """Equal contiguous slices of the key order, topology-blind ("UBEP w/o mapping")."""
    return [[order[q] for q in share(j, n, len(order))] for j in range(n)]


def homogenized_deal(order: list[int], n: int) -> list[list[int]]:
    """Latency homogenization: the key order (farthest hop class first) written row by row into
    a matrix of n columns, AIV j reading column j (logical matrix transposition), so that every
    AIV gets the floor or ceiling of each hop class's share."""
    return [order[j::n] for j in range(n)]


def quaternary_search(ids: list[int], target: int, n_experts: int) -> tuple[int, int, int]:
    """(expert, offset, steps): the expert whose range of the sorted `ids` holds `target`."""
    def vector_count(p: int) -> int:
        return sum(1 for x in ids if x < p)

    lo, hi, c_lo, steps = 0, n_experts, 0, 0
    while hi - lo > 1:
        gap = -(-(hi - lo) // 4)
        pivots = [lo] + [min(lo + i * gap, hi) for i in (1, 2, 3)] + [hi]
        counts = [c_lo] + [vector_count(p) for p in pivots[1:4]]
        steps += 1
        q = next((i for i in (1, 2, 3) if target < counts[i]), 4)
        lo, hi, c_lo = pivots[q - 1], pivots[q], counts[q - 1]
    return lo, target - vector_count(lo), steps


def init_work(copies: list[tuple[int, int, int]], lists: list[list[int]], order: list[int],
              keys: list[int], n_experts: int, search: bool) -> tuple[list[int], list[int | None]]:
    """Each token AIV's Init: its token loads into UBuf, one per run of its copies of one token;
    and (search: balanced, homogenized) the steps of its quaternary search for where its list
    starts in the key order."""
    loads = [sum(1 for x, i in enumerate(lst) if x == 0 or copies[i][0] != copies[lst[x - 1]][0])
             for lst in lists]
    return loads, search_steps(lists, order, keys, n_experts, search)


def search_steps(lists: list[list[int]], order: list[int], keys: list[int], n_experts: int,
                 search: bool) -> list[int | None]:
    """Each sending AIV's slice_search: its steps, or None."""
    place = {i: q for q, i in enumerate(order)}
    return [slice_search(lst, place, keys, n_experts, search) for lst in lists]


def slice_search(lst: list[int], place: dict[int, int], keys: list[int], n_experts: int,
                 search: bool) -> int | None:
    """A sending AIV's quaternary search (search: balanced, homogenized) for where its list
    starts in the key order (place[i]: copy i's position there): its steps, or None (no search,
    or an empty list)."""
    if not (search and lst):
        return None
    target = place[lst[0]]
    expert, offset, n = quaternary_search(keys, target, n_experts)
    assert keys[target] == expert and target - keys.index(expert) == offset
    return n


def slices(order: list[int], keys: list[int], kind: params.Schedule, n: int,
           n_keys: int) -> list[list[int]]:
    """The key order dealt to n AIVs by the schedule `kind` (n_keys: the keys there are); token
    order deals the copies in their own order instead (CANN's SplitToCore)."""
    if kind is params.Schedule.expert_block:
        return expert_block_slices(order, keys, n, n_keys)
    if kind is params.Schedule.balanced:
        return balanced_slices(order, n)
    if kind is params.Schedule.token_order:
        return balanced_slices(sorted(order), n)
    return homogenized_deal(order, n)


def searched(kind: params.Schedule) -> bool:
    """Whether a sending AIV finds where its list starts by the quaternary search."""
    return kind in (params.Schedule.balanced, params.Schedule.homogenized)


def schedule_die(cfg: Config, copies: list[tuple[int, int, int]], die_hop: list[int], n: int,
                 src: int = 0, kind: params.Schedule | None = None) -> DieSchedule:
    """Die src's copies (token, k, expert), in (token, k) order, dealt to its n token AIVs
    (die_hop[d]: the hop class from src to die d) by `kind` (default: cfg's schedule)."""
    kind = cfg.schedule if kind is None else kind
    order, keys = key_order(cfg, copies, die_hop, src, kind)
    lists = slices(order, keys, kind, n, cfg.experts)
    loads, steps = init_work(copies, lists, order, keys, cfg.experts, searched(kind))
    e_local = cfg.experts // cfg.ranks
    dests = [e // e_local for _, _, e in copies]
    return DieSchedule(copies, [die_hop[d] for d in dests], die_hop, lists, loads, steps, dests)


def schedule(run: Run, tokens: list[list[list[int]]]) -> Schedule:
    """Every die's schedule, from its routing tokens[die][token][k]."""
    cfg = run.cfg
    kind = params.Schedule(chosen(run.mech.deal, cfg.schedule))
    hops = hop_classes(run.ranks, run.c["npu_dies"], run.tiers, run.c["rails"])
    dies = []
    for s in range(run.ranks):
        copies = [(t, k, e) for t, experts in enumerate(tokens[s]) for k, e in enumerate(experts)]
        dies.append(schedule_die(cfg, copies, hops[s], run.senders, s, kind))
    return Schedule.of(dies, run.ranks)


def receive_order(run: Run, tokens: list[list[list[int]]]) -> list[list[tuple[int, int]]]:
    """The copies each die received in dispatch, in its receive order (expert, source, copy
    index): (source, copy index there), the copy index being token * topk + k."""
    got: list[list[tuple[int, int, int]]] = [[] for _ in range(run.ranks)]
    for s, die in enumerate(tokens):
        for t, experts in enumerate(die):
            for k, e in enumerate(experts):
                got[e // run.e_local].append((e, s, t * len(experts) + k))
    return [[(s, i) for _, s, i in sorted(die)] for die in got]


def return_schedule(run: Run, tokens: list[list[list[int]]]) -> Schedule:
    """Combine's schedule: each die's returned copies (the copies it received, in receive
    order) dealt to all its AIVs, keyed by their destination's place in the die's walk (a
    destination die for an expert: one key per die). bsp is CANN's V1, which splits by
    destination rank whatever the configuration: expert_block on the plain walk."""
    cfg = run.cfg
    kind = params.Schedule(chosen(run.mech.return_deal, cfg.schedule))
    hops = hop_classes(run.ranks, run.c["npu_dies"], run.tiers, run.c["rails"])
    dies = []
    for d, copies in enumerate(receive_order(run, tokens)):
        key = {x: r for r, x in enumerate(walk(hops[d], d,
                                               kind is params.Schedule.homogenized))}
        order = sorted(range(len(copies)), key=lambda x: (key[copies[x][0]], x))
        keys = [key[copies[x][0]] for x in order]
        lists = slices(order, keys, kind, run.cores, run.ranks)
        steps = search_steps(lists, order, keys, run.ranks, searched(kind))
        dests = [s for s, _ in copies]
        dies.append(DieSchedule(copies, [hops[d][s] for s in dests], hops[d], lists,
                                [0] * run.cores, steps, dests))
    return Schedule.of(dies, run.ranks)
