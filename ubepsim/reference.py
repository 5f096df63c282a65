"""The plain-Python twin of the model: slow, written for clarity, the specification in code.

The Numba kernels (kernels/dispatch.py) must agree with it exactly, cycle for cycle; the tests
compare them on hundreds of random small configurations. Nothing here is shared with the kernels
except the lowering of parameters to cycle costs (ubepsim.costs) and the popularity weights
(ubepsim.workload): the generator, routing, schedules, search, egress arbitration, ingress queues,
polls and phases are written again, the obvious way (a heap of events, a loop per poll).

The model in short (README, "The model"):
- Each die's AIVs run instruction streams. A store occupies its AIV for its issue cost, then
  queues on the die's egress port (FIFO by request time, ties by AIV), is in flight for half the
  hop latency, queues on the destination's ingress port (FIFO by arrival, ties by source die and
  that die's store order) and becomes visible when the ingress port has taken it. The sender sees
  it complete (fences, in-flight slots) a full hop latency after it left the egress port. Stores
  to the die itself skip both ports and are visible after the local latency.
- A poll reads the poller's own memory: each costs the local latency and sees a value only if it
  was visible when the poll was issued.
- bsp: Init, Token-Sending, SyncAll, SendFlag & Count, Flag verification, SyncAll, CalCumSum,
  SyncAll, Token-Reordering, all AIVs in every phase.
- ubep: CalCumSum AIVs count, send counts, poll every source's counts and publish offsets; token
  AIVs search their slice, send, poll the offsets and reorder each copy once its signal is seen.
"""

from __future__ import annotations

import heapq
from collections import deque

import numpy as np

from .costs import COST_INDEX, lower
from .params import Config, Protocol, Routing, Schedule, Sync
from .profile import HOP_CLASSES, Profile
from .workload import expert_cdf, read_trace

MASK = (1 << 64) - 1
MAX_REJECTS = 8   # redraws for a distinct expert before the exact fallback draw

# Store kinds.
COPY, FLAG, COUNT, CHECKSUM = "copy", "flag", "count", "checksum"


# --- counter-based generator (splitmix64), as in kernels/rng.py ------------------------------

def _mix(x: int) -> int:
    z = (x + 0x9E3779B97F4A7C15) & MASK
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & MASK
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & MASK
    return z ^ (z >> 31)


def stream(seed: int, workload_key: int, die: int, domain: int) -> int:
    h = _mix(seed & MASK)
    h = _mix(h ^ workload_key)
    h = _mix(h ^ die)
    return _mix(h ^ domain)


def unit(key: int, counter: int) -> float:
    return (_mix(key ^ ((counter * 0x9E3779B97F4A7C15) & MASK)) >> 11) * (1.0 / (1 << 53))


# --- workload -------------------------------------------------------------------------------

def route_die(cfg: Config, die: int, cdf: list[float]) -> list[list[int]]:
    """The experts of each of the die's tokens: `topk` distinct draws per token."""
    key = stream(cfg.seed, cfg.workload_key, die, 0)
    counter = 0
    weights = [cdf[0]] + [cdf[e] - cdf[e - 1] for e in range(1, len(cdf))] if cdf else []
    tokens = []
    for _ in range(cfg.batch):
        chosen: list[int] = []
        for _ in range(cfg.topk):
            expert = -1
            for _ in range(MAX_REJECTS):
                u = unit(key, counter)
                counter += 1
                if not cdf:
                    e = int(u * cfg.experts)
                else:
                    x = u * cdf[-1]
                    e = 0
                    while e < cfg.experts - 1 and not x < cdf[e]:
                        e += 1
                if e not in chosen:
                    expert = e
                    break
            if expert < 0:
                # Exact fallback: one draw over the experts not yet chosen, by weight.
                u = unit(key, counter)
                counter += 1
                free = [e for e in range(cfg.experts)
                        if e not in chosen and (not cdf or weights[e] > 0.0)]
                mass = 0.0
                for e in free:
                    mass += weights[e] if cdf else 1.0
                x = u * mass
                acc = 0.0
                expert = free[-1]
                for e in free:
                    acc += weights[e] if cdf else 1.0
                    if x < acc:
                        expert = e
                        break
            chosen.append(expert)
        tokens.append(chosen)
    return tokens


def hop_of(src: int, dst: int, npu_dies: int, tiers: list[int]) -> int:
    """Hop class index: 0 local, 1 intra-NPU, then one more per switch tier climbed."""
    if src == dst:
        return 0
    domains = [npu_dies] + tiers
    for level, size in enumerate(domains):
        if src // size == dst // size:
            return level + 1
    return len(domains) + 1


# --- schedules and the quaternary search (paper Section 3.3, Algorithm 1) ---------------------

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


def walk(die_hop: list[int], src: int, homogenized: bool) -> list[int]:
    """The order in which die src's schedule walks the destination dies (die_hop[d]: the hop
    class from src to d).

    From the next die on, wrapping round, so that the dies do not all send to the same
    destination at the same time. Homogenized puts the farthest hop class first and walks each
    class the same way, its dies in index order from the (src + 1)-th on: walking the whole
    order instead, every die of a switch domain would meet the next domain's dies in the same
    order at the same time, an incast on each in turn.
    """
    R = len(die_hop)
    if not homogenized:
        return [(src + 1 + i) % R for i in range(R)]
    members = {h: [d for d in range(R) if die_hop[d] == h] for h in set(die_hop)}
    return [ds[(src + 1 + i) % len(ds)] for h in sorted(members, reverse=True)
            for ds in [members[h]] for i in range(len(ds))]


def schedule_copies(cfg: Config, copies: list[tuple[int, int, int]], die_hop: list[int],
                    n: int, src: int = 0) -> tuple[list[list[int]], list[int]]:
    """Copy indices per sending AIV, in sending order, and each AIV's search steps.

    copies[i] = (token, k, expert), in (token, k) order; die_hop[d] the hop class from the
    sending die src to die d. Every schedule takes the experts in the order `walk` takes their
    dies, a die's experts in index order (the remapped expert order under homogenized).
    """
    m = len(copies)
    e_local = cfg.experts // cfg.ranks
    lists: list[list[int]] = [[] for _ in range(n)]
    steps = [0] * n
    remap = [d * e_local + x for d in walk(die_hop, src, cfg.schedule is Schedule.homogenized)
             for x in range(e_local)]
    rid = [0] * cfg.experts
    for r, e in enumerate(remap):
        rid[e] = r
    order = sorted(range(m), key=lambda i: (rid[copies[i][2]], i))
    ids = [rid[copies[i][2]] for i in order]          # the remapped expert list, sorted
    if cfg.schedule is Schedule.expert_block:
        for i in order:                               # AIV j owns a block of experts
            lists[rid[copies[i][2]] * n // cfg.experts].append(i)
        return lists, steps
    if cfg.schedule is Schedule.balanced:             # equal contiguous slices
        for j in range(n):
            lo, hi = j * m // n, (j + 1) * m // n
            lists[j] = order[lo:hi]
            if hi > lo:
                expert, offset, steps[j] = quaternary_search(ids, lo, cfg.experts)
                assert ids[lo] == expert and lo - ids.index(expert) == offset
        return lists, steps
    # homogenized: the copies in remapped order are written row by row into a matrix of n
    # columns and AIV j reads column j, so every AIV gets floor or ceil of each class's share
    # (logical matrix transposition)
    for j in range(min(n, m)):
        lists[j] = order[j::n]
        expert, offset, steps[j] = quaternary_search(ids, j, cfg.experts)
        assert ids[j] == expert
    return lists, steps


# --- the simulation ------------------------------------------------------------------------

class Store:
    __slots__ = ("src", "dst", "kind", "ref", "seq", "aiv", "issue_end", "depart", "arrival",
                 "ack", "visible", "hop")

    def __init__(self, src, dst, kind, ref, aiv, hop):
        self.src, self.dst, self.kind, self.ref, self.aiv, self.hop = src, dst, kind, ref, aiv, hop
        self.seq = self.issue_end = self.depart = self.arrival = self.ack = self.visible = -1


class Aiv:
    """One AIV's clock, its completed stores and its time per bucket."""

    def __init__(self):
        self.t = 0
        self.acks: list[int] = []
        self.in_flight: deque[tuple[int, int]] = deque()   # (completion, blocks), issue order
        self.in_flight_blocks = 0
        self.buckets = {"init": 0, "send": 0, "sync": 0, "cumsum": 0, "reorder": 0}
        self.wait = 0
        self.marks: list[int] = [0]
        self.first_copy = -1
        self.last_copy_ack = -1

    def spend(self, bucket: str, cycles: int, waiting: bool = False) -> None:
        self.t += cycles
        self.buckets[bucket] += cycles
        if waiting:
            self.wait += cycles


def poll(aiv: Aiv, visible: int, period: int, bucket: str) -> None:
    """Poll own memory until `visible` is seen: one load per `period`, issued back to back."""
    start = aiv.t
    while True:
        issued = aiv.t
        aiv.t += period
        if visible <= issued:
            break
    aiv.buckets[bucket] += aiv.t - start
    aiv.wait += aiv.t - start


def run_stores(die: int, aivs: list[Aiv], programs: dict[int, list[tuple]], c: dict,
               egress: list[int], stores: list[Store], seq: list[int]) -> None:
    """Issue every AIV's program of stores, arbitrating the die's egress port in time order.

    A program entry is (store, pre_cycles, pre_bucket, fence, bucket). An AIV requests the port
    when it has finished issuing; the port serves requests in time order, ties by AIV index.
    """
    heap = []
    cursor = {j: 0 for j in programs}

    def request(j: int) -> None:
        a = aivs[j]
        st, pre, pre_bucket, fence, bucket = programs[j][cursor[j]]
        a.spend(pre_bucket, pre)
        if fence and a.acks:
            a.spend("sync", max(0, max(a.acks) - a.t), waiting=True)
        # Credits come back in issue order: wait for the oldest stores until this one fits.
        blocks = _blocks(st, c)
        while a.in_flight and a.in_flight_blocks + blocks > c["blocks_in_flight"]:
            ack, b = a.in_flight.popleft()
            a.in_flight_blocks -= b
            a.spend(bucket, max(0, ack - a.t))
        if st.kind == COPY and a.first_copy < 0:
            a.first_copy = a.t
        a.spend(bucket, c[f"{_cost_kind(st)}_issue"])
        heapq.heappush(heap, (a.t, j))

    for j in sorted(programs):
        if programs[j]:
            request(j)
    while heap:
        t, j = heapq.heappop(heap)
        st = programs[j][cursor[j]][0]
        st.issue_end = t
        st.seq = seq[0]
        seq[0] += 1
        lat = c[f"lat_{HOP_CLASSES[st.hop]}"]
        if st.dst == die:
            st.depart = t
            st.ack = st.visible = t + c["lat_local"]
        else:
            st.depart = max(t, egress[0]) + c[f"{_cost_kind(st)}_egress"]
            egress[0] = st.depart
            st.arrival = st.depart + lat // 2
            st.ack = st.depart + lat
        aivs[j].acks.append(st.ack)
        aivs[j].in_flight.append((st.ack, _blocks(st, c)))
        aivs[j].in_flight_blocks += _blocks(st, c)
        if st.kind == COPY:
            aivs[j].last_copy_ack = st.ack
        stores.append(st)
        cursor[j] += 1
        if cursor[j] < len(programs[j]):
            request(j)


def _blocks(st: Store, c: dict) -> int:
    return {COPY: c["copy_blocks"], COUNT: c["count_blocks"]}.get(st.kind, 1)


def _cost_kind(st: Store) -> str:
    return {COPY: "copy", COUNT: "count", FLAG: "signal", CHECKSUM: "signal"}[st.kind]


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


def simulate(cfg: Config, profile: Profile) -> dict:
    """Every result of one configuration, plus `_detail` for the invariant tests."""
    # the costs come from the lowering the kernels use, which takes columns of values
    costs, chances = lower({k: np.asarray([v]) for k, v in cfg.__dict__.items()}, profile)
    c = {name: int(costs[0, i]) for name, i in COST_INDEX.items()}
    q_copy, q_count = float(chances[0, 0]), float(chances[0, 1])
    R, A, E = cfg.ranks, cfg.aivs, cfg.experts
    e_local = E // R
    ubep = cfg.protocol is Protocol.ubep
    sync = cfg.sync
    C = cfg.cumsum_aivs if ubep else 0
    n_send = A - C                       # AIVs that send tokens (all of them under bsp)
    tiers = [t for t in (c["tier1"], c["tier2"]) if t]
    poll_period = c["poll"]

    if cfg.routing is Routing.trace:
        trace = read_trace(cfg.trace, R, cfg.batch, cfg.topk, E)
        routing = [[list(map(int, trace[s, t])) for t in range(cfg.batch)] for s in range(R)]
    else:
        cdf = list(expert_cdf(int(cfg.routing), E, cfg.zipf_s, cfg.hot_experts, cfg.hot_share,
                              cfg.seed, cfg.workload_key))
        routing = [route_die(cfg, s, cdf) for s in range(R)]

    dies = []
    stores_to: list[list[Store]] = [[] for _ in range(R)]
    copy_counts = [0] * len(HOP_CLASSES)
    steps_max = 0
    bound = 0
    ingress_load = [0] * R
    for s in range(R):
        copies = [(t, k, routing[s][t][k]) for t in range(cfg.batch) for k in range(cfg.topk)]
        hops = [hop_of(s, e // e_local, c["npu_dies"], tiers) for (_, _, e) in copies]
        for h in hops:
            copy_counts[h] += 1
        bound = max(bound, sum(c["copy_egress"] for h in hops if h))
        for (_, _, e), h in zip(copies, hops):
            if h:
                ingress_load[e // e_local] += c["copy_ingress"]
        die_hop = [hop_of(s, d, c["npu_dies"], tiers) for d in range(R)]
        lists, steps = schedule_copies(cfg, copies, die_hop, n_send, s)
        steps_max = max(steps_max, max(steps))
        aivs = [Aiv() for _ in range(A)]
        copy_store = [None] * len(copies)
        signal_of = [None] * len(copies)      # the store a receiver polls for this copy
        count_signal = {}                      # destination die -> store polled for counts
        egress, seq, stores = [0], [0], []
        programs: dict[int, list[tuple]] = {}
        # Token senders: Init (setup, slice search, token loads), then their copies.
        for j in range(n_send):
            a = aivs[C + j]
            loads = sum(1 for x, i in enumerate(lists[j])
                        if x == 0 or copies[i][0] != copies[lists[j][x - 1]][0])
            search = (steps[j] + 1) * c["vcount"] if steps[j] or (
                cfg.schedule is not Schedule.expert_block and lists[j]) else 0
            a.spend("init", c["init"] + search + loads * c["local_copy"])
            a.marks.append(a.t)
            last_to = {copies[i][2] // e_local: i for i in lists[j]}
            prog = []
            for i in lists[j]:
                d = copies[i][2] // e_local
                st = Store(s, d, COPY, i, C + j, hops[i])
                copy_store[i] = signal_of[i] = st
                pre = c["copy_verify"] if (ubep and sync is Sync.dc) else 0
                prog.append((st, pre, "send", False, "send"))
                if ubep and sync is Sync.sw:
                    flag = Store(s, d, FLAG, i, C + j, hops[i])
                    signal_of[i] = flag
                    prog.append((flag, 0, "sync", True, "sync"))
                if ubep and sync is Sync.dc and last_to[d] == i:
                    check = Store(s, d, CHECKSUM, i, C + j, hops[i])
                    prog.append((check, 0, "sync", False, "sync"))
                    for i2 in lists[j]:
                        if copies[i2][2] // e_local == d:
                            signal_of[i2] = check
            programs[C + j] = prog

        def count_program(j: int, dests: range, bucket: str) -> list[tuple]:
            prog = []
            for d in dests:
                h = hop_of(s, d, c["npu_dies"], tiers)
                st = Store(s, d, COUNT, d, j, h)
                count_signal[d] = st
                prog.append((st, e_local * c["vcount"], bucket, False, bucket))
                if sync is Sync.sw:
                    flag = Store(s, d, FLAG, d, j, h)
                    count_signal[d] = flag
                    prog.append((flag, 0, "sync", True, "sync"))
                elif sync is Sync.dc:
                    check = Store(s, d, CHECKSUM, d, j, h)
                    count_signal[d] = check
                    prog.append((check, 0, "sync", False, "sync"))
            return prog

        if ubep:
            for j in range(C):
                aivs[j].spend("init", c["init"])
                aivs[j].marks.append(aivs[j].t)
                programs[j] = count_program(j, range(j * R // C, (j + 1) * R // C), "cumsum")
            run_stores(s, aivs, programs, c, egress, stores, seq)
            for j in range(A):
                aivs[j].marks.append(aivs[j].t)        # end of sending (tokens or counts)
        else:
            run_stores(s, aivs, programs, c, egress, stores, seq)
            for a in aivs:
                a.marks.append(a.t)                    # end of Token-Sending
            done = max(max([a.t] + a.acks) for a in aivs)
            barrier = done + c["syncall"]
            for a in aivs:
                a.spend("sync", barrier - a.t, waiting=True)
                a.marks.append(a.t)
            programs = {j: count_program(j, range(j * R // A, (j + 1) * R // A), "sync")
                        for j in range(A)}
            run_stores(s, aivs, programs, c, egress, stores, seq)
            for a in aivs:
                a.marks.append(a.t)                    # end of SendFlag & Count
        for st in stores:
            stores_to[st.dst].append(st)
        dies_entry = {"aivs": aivs, "copies": copies, "signal_of": signal_of, "stores": stores,
                      "count_signal": count_signal, "lists": lists, "copy_store": copy_store,
                      "done_send": max(max([a.t] + a.acks) for a in aivs)}
        dies.append(dies_entry)

    # Ingress ports: each destination serves its arrivals in order (arrival, source, store seq).
    for d in range(R):
        free = 0
        for st in sorted((x for x in stores_to[d] if x.src != d),
                         key=lambda x: (x.arrival, x.src, x.seq)):
            st.visible = max(st.arrival, free) + c[f"{_cost_kind(st)}_ingress"]
            free = st.visible

    # Receivers: the copy stores each die got, in output order (local expert, source, token
    # order), each to be taken once.
    sent = sum(1 for d in range(R) for st in stores_to[d] if st.kind == COPY)
    received: list[list[tuple[int, int]]] = [[] for _ in range(R)]
    for d in range(R):
        received[d] = sorted(((st.src, st.ref) for st in stores_to[d] if st.kind == COPY),
                             key=lambda si: (dies[si[0]]["copies"][si[1]][2], si[0], si[1]))
    taken: set[tuple[int, int]] = set()

    delivered = 0
    violations = 0
    collisions = 0
    ends = []
    for d in range(R):
        aivs = dies[d]["aivs"]
        sent_key = stream(cfg.seed, cfg.workload_key, d, 1)

        def seen(st: Store, index: int, q: float) -> int:
            """When a poll can see `st`: its visible time, or after the timeout if it collided."""
            nonlocal collisions
            if q > 0.0 and unit(sent_key, index) < q:
                collisions += 1
                return st.visible + c["timeout"]
            return st.visible

        def verify_counts(a: Aiv, sources: range, bucket_after: str) -> None:
            for s in sources:
                sig = dies[s]["count_signal"][d]
                poll(a, seen(sig, s, q_count), poll_period, "sync")
                if sync is not Sync.sw:
                    a.spend("sync", c["count_verify"])
                if sync is Sync.sp:
                    a.spend("sync", c["count_reset"])
                if bucket_after:
                    a.spend(bucket_after, c["prefix"] * e_local)

        def reorder(a: Aiv, items: list[tuple[int, int]], first_index: int, check: bool) -> None:
            nonlocal delivered, violations
            for x, (s, i) in enumerate(items):
                if check:
                    sig = dies[s]["signal_of"][i]
                    poll(a, seen(sig, R + first_index + x, q_copy), poll_period, "sync")
                    if sync is not Sync.sw:
                        a.spend("sync", c["copy_verify"])
                if a.t < dies[s]["copy_store"][i].visible:
                    violations += 1
                a.spend("reorder", c["local_copy"])
                if ubep and sync is Sync.sp:   # re-arm the sentinel this copy was polled by
                    a.spend("reorder", c["copy_reset"])
                if (s, i) not in taken and dies[s]["copy_store"][i].dst == d:
                    taken.add((s, i))
                    delivered += 1

        n_recv = len(received[d])
        if ubep:
            for j in range(C):
                verify_counts(aivs[j], range(j * R // C, (j + 1) * R // C), "cumsum")
                aivs[j].marks.append(aivs[j].t)
            # The group publishes the offsets with one local store once its last AIV is done.
            offsets = max(aivs[j].t for j in range(C)) + c["signal_issue"] + c["lat_local"]
            for j in range(n_send):
                a = aivs[C + j]
                poll(a, offsets, poll_period, "cumsum")
                a.marks.append(a.t)
                lo, hi = j * n_recv // n_send, (j + 1) * n_recv // n_send
                reorder(a, received[d][lo:hi], lo, True)
                a.marks.append(a.t)
        else:
            for j, a in enumerate(aivs):
                verify_counts(a, range(j * R // A, (j + 1) * R // A), "")
                a.marks.append(a.t)
            for phase, work in (("sync", None), ("cumsum", "prefix"), ("sync", None),
                                ("reorder", None)):
                if work == "prefix":
                    entries = R * e_local
                    for j, a in enumerate(aivs):
                        a.spend("cumsum", c["prefix"] * ((j + 1) * entries // A
                                                         - j * entries // A))
                        a.marks.append(a.t)
                elif phase == "sync":
                    barrier = max(a.t for a in aivs) + c["syncall"]
                    for a in aivs:
                        a.spend("sync", barrier - a.t, waiting=True)
                        a.marks.append(a.t)
                else:
                    for j, a in enumerate(aivs):
                        lo, hi = j * n_recv // A, (j + 1) * n_recv // A
                        reorder(a, received[d][lo:hi], lo, False)
                        a.marks.append(a.t)
        ends.append(max(a.t for a in aivs))

    clock = profile.values["clock_ghz"] * 1000.0
    crit = max(range(R), key=lambda d: (ends[d], -d))
    aivs = dies[crit]["aivs"]
    if ubep:
        a = max(aivs, key=lambda x: (x.t, -aivs.index(x)))
        phases = a.buckets
    else:
        m = aivs[0].marks  # barrier times are shared; init and CalCumSum ends are per AIV
        init_end = max(x.marks[1] for x in aivs)
        cumsum_end = max(x.marks[7] for x in aivs)
        send_end = m[3] - c["syncall"]
        phases = {"init": init_end, "send": send_end - init_end,
                  "sync": (m[6] - send_end) + (m[8] - cumsum_end),
                  "cumsum": cumsum_end - m[6], "reorder": ends[crit] - m[8]}
    sends = [a.last_copy_ack - a.first_copy for d in range(R) for a in dies[d]["aivs"]
             if a.first_copy >= 0]
    waits = [a.wait for d in range(R) for a in dies[d]["aivs"]]
    bytes_per_rank = cfg.batch * cfg.topk * c["token_bytes"]
    latency = max(ends)
    out = {
        "latency_us": latency / clock,
        "latency_mean_us": sum(ends) / R / clock,
        "bw_gbps": bytes_per_rank / (latency / clock * 1000.0),
        "bytes_per_rank": bytes_per_rank,
        "copies_total": sum(copy_counts),
        **{f"copies_{h}": copy_counts[i] for i, h in enumerate(HOP_CLASSES)},
        "send_max_aiv_us": max(sends) / clock,
        "send_mean_aiv_us": sum(sends) / len(sends) / clock,
        "send_spread_aiv_us": (max(sends) - min(sends)) / clock,
        "wait_us": sum(waits) / len(waits) / clock,
        **{f"phase_{p}_us": phases[p] / clock for p in ("init", "send", "sync", "cumsum",
                                                         "reorder")},
        "qsearch_steps": steps_max,
        "sentinel_collisions": collisions,
    }
    out["_detail"] = {"sent": sent, "delivered": delivered, "violations": violations, "ends": ends,
                      "bound_cycles": latency_bound(c, copy_counts, bound, max(ingress_load)),
                      "latency_cycles": latency,
                      "marks": [[a.marks for a in dies[d]["aivs"]] for d in range(R)],
                      "waits": [[a.wait for a in dies[d]["aivs"]] for d in range(R)],
                      # every die's stores as its egress port served them
                      "stores": [[{k: getattr(st, k) for k in Store.__slots__}
                                  for st in dies[d]["stores"]] for d in range(R)],
                      "costs": c}
    return out
