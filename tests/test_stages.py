"""Each kernel stage against the twin's function of the same name, on Hypothesis-generated inputs
(in the manner of stumpy's naive twins), beside the end-to-end comparison of test_twin.py
(test_schedule.py pairs the quaternary search and the poll the same way).

The kernel's stages work on flat arrays and the twin's on lists and objects, so each test feeds
both the same input in their own form and compares what they mean.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ubepsim.kernels import fabric as k_fabric, layout, programs as k_programs
from ubepsim.kernels import results as k_results, rng as k_rng
from ubepsim.kernels import routing as k_routing, schedule as k_schedule, sync as k_sync
from ubepsim.reference import programs as t_programs, results as t_results, rng as t_rng
from ubepsim.reference import routing as t_routing, schedule as t_schedule, sync as t_sync
from ubepsim.reference.rng import stream
from ubepsim.reference.state import FLAG, Core, Die, Run
from ubepsim.model import kernel_io
from ubepsim.model.costs import COST_INDEX
from ubepsim.model.params import Sync, make_config
from ubepsim.model.profile import load_profile
SETTINGS = settings(max_examples=60, deadline=None)


def cost_row(**values: int) -> np.ndarray:
    """A kernel cost row with the given columns set (the others 0)."""
    c = np.zeros(layout.N_COSTS, np.int64)
    for name, v in values.items():
        c[COST_INDEX[name]] = v
    return c


# --- Data-as-Flag ------------------------------------------------------------------------------

# The kernel's POLICY column of each of the twin's effects.
EFFECT_COLUMN = {
    "flag_per_store": k_sync.FLAG, "checksum_per_destination": k_sync.CHECKSUM,
    "fence_before_flag": k_sync.FENCE, "marker_work_per_copy": k_sync.MARKER,
    "in_block_flag": k_sync.IN_BLOCK, "verify_per_block": k_sync.VERIFY,
    "rearm_sentinel": k_sync.REARM, "timeout_on_collision": k_sync.COLLIDES,
}


def test_the_kernels_data_as_flag_table_is_the_twins():
    assert set(EFFECT_COLUMN) == set(t_sync.EFFECTS)
    assert len(EFFECT_COLUMN) == k_sync.POLICY.shape[1]
    for sync in Sync:
        for effect, column in EFFECT_COLUMN.items():
            assert bool(k_sync.POLICY[int(sync), column]) == getattr(t_sync.POLICY[sync], effect), \
                (sync.name, effect)


@pytest.mark.parametrize("sync", list(Sync))
@pytest.mark.parametrize("ubep", [0, 1])
def test_the_decoded_effects_follow_the_table(sync, ubep):
    """What the kernel's stages read (sync.effects) is the table's row, copies signalled under
    ubep only."""
    fx = k_sync.effects(int(sync), ubep)
    row = t_sync.POLICY[sync]
    signal = (layout.K_FLAG if row.flag_per_store else
              layout.K_CHECKSUM if row.checksum_per_destination else k_sync.NO_SIGNAL)
    assert fx.count_signal == signal
    assert fx.copy_signal == (signal if ubep else k_sync.NO_SIGNAL)
    assert fx.fence == row.fence_before_flag
    assert fx.copy_marker == (row.marker_work_per_copy and ubep)
    assert fx.count_verify == row.verify_per_block and fx.count_rearm == row.rearm_sentinel
    assert fx.copy_verify == (row.verify_per_block and ubep)
    assert fx.copy_rearm == (row.rearm_sentinel and ubep)


# --- the generator -----------------------------------------------------------------------------

@SETTINGS
@given(x=st.integers(0, 2**64 - 1), seed=st.integers(0, 2**63 - 1),
       key=st.integers(0, 2**63 - 1), die=st.integers(0, 255), domain=st.integers(0, 3),
       counter=st.integers(0, 2**40))
def test_the_generator(x, seed, key, die, domain, counter):
    """splitmix64's mix, a die's stream and a draw from it, the twin's on Python integers."""
    assert int(k_rng.mix64(np.uint64(x))) == t_rng.mix64(x)
    s = t_rng.stream(seed, key, die, domain)
    assert int(k_rng.stream(seed, key, die, domain)) == s
    assert k_rng.unit(np.uint64(s), counter) == t_rng.unit(s, counter)


# --- routing -----------------------------------------------------------------------------------

@SETTINGS
@given(batch=st.integers(1, 12), topk=st.integers(1, 8), experts=st.integers(8, 64),
       seed=st.integers(0, 2**40), die=st.integers(0, 7), weighted=st.booleans(),
       data=st.data())
def test_route_die(batch, topk, experts, seed, die, weighted, data):
    topk = min(topk, experts)
    cfg = make_config({"ranks": 8, "experts": experts - experts % 8, "batch": batch,
                       "topk": min(topk, experts - experts % 8), "seed": seed}, 48)
    if weighted:   # some experts never drawn: the exact fallback's path
        w = data.draw(st.lists(st.sampled_from([0.0, 0.5, 1.0, 3.0]), min_size=cfg.experts,
                               max_size=cfg.experts).filter(lambda w: sum(x > 0 for x in w)
                                                            >= cfg.topk))
        cdf = list(np.cumsum(w))
    else:
        cdf = []
    twin = t_routing.route_die(cfg, die, cdf, cfg.batch)
    out = np.empty(cfg.batch * cfg.topk, np.int64)
    key = stream(cfg.seed, cfg.workload_key, die, 0)
    k_routing.route_die(out, np.uint64(key), cfg.batch, cfg.topk, cfg.experts,
                        np.asarray(cdf, np.float64), np.empty(cfg.topk, np.int64))
    assert out.reshape(cfg.batch, cfg.topk).tolist() == twin


# --- schedule ----------------------------------------------------------------------------------

@SETTINGS
@given(ranks=st.integers(1, 80), npu=st.sampled_from([1, 2, 4]), t1=st.sampled_from([0, 1, 2, 4]),
       t2=st.sampled_from([0, 2, 3]), on_rails=st.booleans())
def test_hop_classes(ranks, npu, t1, t2, on_rails):
    tier1 = npu * t1
    tier2 = tier1 * t2 if tier1 else 0
    rails = tier1 if on_rails else 0
    c = cost_row(npu_dies=npu, tier1_dies=tier1, tier2_dies=tier2, rails=rails)
    kernel = k_schedule.hop_classes(c, ranks).reshape(ranks, ranks)
    twin = t_schedule.hop_classes(ranks, npu, [t for t in (tier1, tier2) if t], rails)
    assert kernel.tolist() == twin


def test_rails_send_other_rails_a_tier_higher():
    """8-die nodes in 32-die leaf groups: on rails, die 0 reaches die 8 (rail 0 of the next
    node) through its leaf, die 9 (rail 1) only through the tier above; without rails both
    through the leaf."""
    hops = t_schedule.hop_classes(32, 1, [8, 32], rails=8)
    assert (hops[0][1], hops[0][8], hops[0][9]) == (2, 3, 4)
    assert t_schedule.hop_classes(32, 1, [8, 32])[0][9] == 3


@st.composite
def key_lists(draw):
    """A sorted list of keys (remapped experts) of a die's copies, and the expert count."""
    n_experts = draw(st.integers(1, 300))
    keys = sorted(draw(st.lists(st.integers(0, n_experts - 1), min_size=1, max_size=400)))
    return keys, n_experts


def cumulative(keys: list[int], n_experts: int) -> np.ndarray:
    """cum[p] = VectorCount(keys < p), as the kernel's schedule keeps it."""
    return np.searchsorted(np.asarray(keys), np.arange(n_experts + 1), side="left")


def kernel_lists(aoff: np.ndarray, place: np.ndarray | None, m: int) -> list[list[int]]:
    """The kernel's AIV lists as key positions: AIV j's list is positions aoff[j] .. aoff[j+1]
    of the lists, and key position q sits at place[q] (identity but for homogenized)."""
    at = np.arange(m) if place is None else place[:m]
    where = {int(x): q for q, x in enumerate(at)}
    return [[where[x] for x in range(aoff[j], aoff[j + 1])] for j in range(len(aoff) - 1)]


@SETTINGS
@given(key_lists(), st.integers(1, 48))
def test_expert_block_slices(kl, n):
    keys, n_experts = kl
    aoff = np.empty(n + 1, np.int64)
    k_schedule.expert_block_slices(aoff, cumulative(keys, n_experts), n, n_experts)
    twin = t_schedule.expert_block_slices(list(range(len(keys))), keys, n, n_experts)
    assert kernel_lists(aoff, None, len(keys)) == twin


@SETTINGS
@given(st.integers(0, 500), st.integers(1, 48))
def test_balanced_slices(m, n):
    aoff = np.empty(n + 1, np.int64)
    k_schedule.balanced_slices(aoff, m, n)
    assert kernel_lists(aoff, None, m) == t_schedule.balanced_slices(list(range(m)), n)


@SETTINGS
@given(st.integers(0, 500), st.integers(1, 48))
def test_homogenized_deal(m, n):
    aoff = np.empty(n + 1, np.int64)
    place = np.empty(max(m, 1), np.int64)
    k_schedule.homogenized_deal(aoff, place, m, n)
    assert kernel_lists(aoff, place, m) == t_schedule.homogenized_deal(list(range(m)), n)


# --- receive -----------------------------------------------------------------------------------

@SETTINGS
@given(clocks=st.lists(st.integers(0, 10**6), min_size=1, max_size=16),
       ready=st.integers(0, 10**6), cost=st.integers(0, 10**4))
def test_syncall(clocks, ready, cost):
    cores_t = [Core(("init", "syncall")) for _ in clocks]
    for a, t in zip(cores_t, clocks):
        a.t = t
        a.marks = [0, t]   # START and INIT ended: the barrier ends mark 2
    t_sync.syncall(cores_t, max([ready] + clocks), cost)
    A = len(clocks)
    k = layout.Cores(np.array([clocks], np.int64), np.zeros((1, A, layout.N_BUCKETS), np.int64),
                    np.zeros((1, A), np.int64), np.full((1, A), -1, np.int64),
                    np.full((1, A), -1, np.int64), np.zeros((1, A, layout.N_MARKS), np.int64),
                    np.full((1, A), 2, np.int64))
    barrier = k_sync.syncall(0, ready, cost, k.t, k.bucket, k.wait, k.marks, k.nmarks)
    assert barrier == max([ready] + clocks) + cost
    assert k.t[0].tolist() == [a.t for a in cores_t]
    assert k.wait[0].tolist() == [a.wait for a in cores_t]
    assert k.bucket[0, :, layout.B_SYNC].tolist() == [a.buckets["sync"] for a in cores_t]
    assert k.marks[0, :, 2].tolist() == [a.marks[2] for a in cores_t]


# --- results -----------------------------------------------------------------------------------

@SETTINGS
@given(lat=st.lists(st.integers(0, 10**5), min_size=layout.N_HOPS, max_size=layout.N_HOPS),
       copies=st.lists(st.integers(0, 3), min_size=layout.N_HOPS, max_size=layout.N_HOPS),
       fixed=st.lists(st.integers(0, 10**4), min_size=6, max_size=6),
       egress=st.integers(0, 10**7), ingress=st.integers(0, 10**7))
def test_latency_bound(lat, copies, fixed, egress, ingress):
    if not any(copies):
        copies[0] = 1
    names = ("init", "copy_issue", "copy_egress", "copy_ingress", "local_copy", "poll")
    values = dict(zip(names, fixed), **{f"lat_{h}": v for h, v in zip(layout.HOP_CLASSES, lat)})
    c = cost_row(**values)
    twin = t_results.latency_bound({**dict.fromkeys(COST_INDEX, 0), **values}, copies, egress,
                                   ingress)
    assert k_results.latency_bound(c, np.asarray(copies, np.int64), egress, ingress) == twin


# --- combine -----------------------------------------------------------------------------------

def kernel_inputs(cfg, profile):
    """The kernel's parameter and cost rows of cfg, its routing and its dies' copy starts."""
    cols = cfg.columns()
    params, costs, _, cdf, trace, batches = kernel_io.prepare(cols, profile)
    p = params[0]
    cdf = cdf[p[layout.P_CDF_START]:p[layout.P_CDF_START] + p[layout.P_CDF_LEN]]
    cfirst = k_routing.copy_starts(p, batches)
    return p, costs[0], k_routing.route(p, cdf, trace[:0], cfirst), cfirst


@SETTINGS
@given(ranks=st.sampled_from([1, 2, 3, 5, 8, 16]), per_die=st.integers(1, 3),
       batch=st.integers(1, 9), topk=st.integers(1, 4), cores=st.integers(2, 11),
       protocol=st.sampled_from(["bsp", "ubep"]),
       schedule=st.sampled_from(["expert_block", "balanced", "homogenized"]),
       routing=st.sampled_from(["uniform", "hot"]), seed=st.integers(0, 50),
       spread=st.sampled_from(["equal", "cv", "zero"]))
def test_return_schedule(ranks, per_die, batch, topk, cores, protocol, schedule, routing, seed,
                         spread):
    """Each die's returned copies, AIV by AIV: the destination and the dispatch copy of each,
    the search before each list, and the counts the bound takes (bsp: V1's split whatever the
    schedule)."""
    topk = min(topk, ranks * per_die)
    cfg = make_config({"ranks": ranks, "experts": ranks * per_die, "batch": batch,
                       "topk": topk, "cores": cores, "op": "combine", "protocol": protocol,
                       "schedule": schedule, "routing": routing, "hot_experts": 1,
                       "hot_share": 0.9, "seed": seed, "batch_spread": spread,
                       "zero_token_share": 0.5}, 48)
    profile = load_profile()
    p, c, experts_of, cfirst = kernel_inputs(cfg, profile)
    kernel = k_schedule.return_schedule(p, c, experts_of, cfirst)
    run = Run.of(cfg, profile)
    twin = t_schedule.return_schedule(run, t_routing.route(cfg))
    EL = per_die
    for d, die in enumerate(twin.dies):
        base = kernel.ecnt[d * EL]
        assert kernel.ecnt[(d + 1) * EL] - base == len(die.copies)
        for j in range(cores):
            lo = kernel.aoff[d * (cores + 1) + j]
            hi = kernel.aoff[d * (cores + 1) + j + 1]
            got = [(kernel.xdest[base + x], kernel.xslot[base + x]) for x in range(lo, hi)]
            assert got == [(die.copies[i][0], cfirst[die.copies[i][0]] + die.copies[i][1])
                           for i in die.lists[j]]
            steps = die.steps[j]
            assert kernel.searches[d * cores + j] == (0 if steps is None else steps + 1)
    assert kernel.copies_hop.tolist() == twin.copies_hop
    assert (kernel.max_in, kernel.max_out, kernel.qsteps_max) == \
        (twin.max_in, twin.max_out, twin.qsteps_max)


@SETTINGS
@given(ranks=st.integers(1, 40), cores=st.integers(2, 48), s=st.integers(0, 39),
       per_die=st.integers(1, 3), protocol=st.sampled_from(["bsp", "deepep_ll"]))
def test_status_programs(ranks, cores, s, per_die, protocol):
    """V1's statuses (deepep_ll: a flag per expert, per_die to each destination): core by core,
    the destinations it owns, each a flag, the first to a new destination (or the core's first)
    after its address chain; each the store its destination polls for s."""
    s %= ranks
    cfg = make_config({"ranks": ranks, "experts": ranks * per_die, "cores": cores,
                       "op": "combine", "protocol": protocol, "batch": 1, "topk": 1}, 48)
    run = Run.of(cfg, load_profile())
    G = run.per_dest
    assert G == (per_die if protocol == "deepep_ll" else 1)
    die = Die(run, s, [])
    plan = t_schedule.DieSchedule([], [], [0] * ranks, [], [], [], [])
    twin = t_programs.status_programs(run, s, plan, die)
    n = ranks * G
    prog = np.empty(n, np.int64)
    pre = np.full(n, -1, np.int64)
    bounds = np.zeros((cores, 2), np.int64)
    bfill = np.zeros(ranks, np.int64)
    signal = np.full(ranks * ranks * G, -1, np.int32)
    assert k_programs.status_programs(s, prog, pre, 0, bounds, bfill, signal, G) == n
    assert pre.tolist() == [0] * n                     # no work of CANN's count before a status
    for a in range(cores):
        words = prog[bounds[a, 0]:bounds[a, 1]]
        assert [(w >> 2) & layout.DEST_MASK for w in words] == \
            [e.store.dst for e in twin[a]]
        assert all(w & 3 == layout.K_FLAG for w in words)
        switch = [(w >> layout.SWITCH_BIT) & 1 for w in words]
        assert switch == [int(k == 0 or e.store.dst != twin[a][k - 1].store.dst)
                          for k, e in enumerate(twin[a])]
        assert all(e.work == run.c["dest_switch"] * sw and e.store.kind == FLAG
                   for e, sw in zip(twin[a], switch))
    # per_die statuses to every die, each the one that die polls for s
    assert bfill.tolist() == [G] * ranks
    assert [signal[(d * ranks + s) * G + e] for d in range(ranks) for e in range(G)] == \
        [e for _ in range(ranks) for e in range(G)]


@SETTINGS
@given(acks=st.lists(st.one_of(st.integers(0, 10**6), st.none()), min_size=0, max_size=12),
       retired=st.integers(0, 10**6), head=st.integers(0, 11))
def test_an_cores_outstanding_acknowledgements(acks, retired, head):
    """What a fence or a SyncAll waits for: the latest acknowledgement of every store the AIV
    issued (those it retired, and those in its in-flight ring, where it may wrap round), or, if
    one is not known yet (None: its slot holds the earliest it can be), the earliest time the
    last of the unknown can be. A slot holds its store's kind beside either (any kind here)."""
    cap = 12
    st_ = np.zeros((1, layout.S_WIDTH), np.int64)
    st_[0, layout.S_MAX_ACK] = retired
    st_[0, layout.S_HEAD] = head
    st_[0, layout.S_N] = len(acks)
    fifo = np.full(cap, -999, np.int64)
    earliest = []
    for x, ack in enumerate(acks):
        at = (head + x) % cap
        kind = x % 4
        if ack is None:
            earliest.append(1000 + 7 * x)
            fifo[at] = k_fabric.unknown_until(earliest[-1], kind)
        else:
            fifo[at] = k_fabric.acked(ack, kind)
    latest, unknown = k_fabric.outstanding(0, st_, fifo, cap)
    assert latest == max([retired] + [a for a in acks if a is not None])
    assert unknown == (max(earliest) if earliest else -1)


@SETTINGS
@given(lat=st.lists(st.integers(0, 10**5), min_size=layout.N_HOPS, max_size=layout.N_HOPS),
       copies=st.lists(st.integers(0, 3), min_size=layout.N_HOPS, max_size=layout.N_HOPS),
       fixed=st.lists(st.integers(0, 10**4), min_size=8, max_size=8),
       egress=st.integers(0, 10**7), ingress=st.integers(0, 10**7), topk=st.integers(1, 8))
def test_return_bound(lat, copies, fixed, egress, ingress, topk):
    if not any(copies):
        copies[0] = 1
    names = ("init", "return_load", "return_quant", "return_issue", "return_egress", "return_ingress",
             "reduce_copy", "reduce_token")
    values = dict(zip(names, fixed), **{f"lat_{h}": v for h, v in zip(layout.HOP_CLASSES, lat)})
    twin = t_results.return_bound({**dict.fromkeys(COST_INDEX, 0), **values}, copies, egress,
                                  ingress, topk)
    assert k_results.return_bound(cost_row(**values), np.asarray(copies, np.int64), egress,
                                  ingress, topk) == twin
