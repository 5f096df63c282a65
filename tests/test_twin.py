"""The Numba kernel against its plain-Python twin, and the invariants on every configuration.

Random small configurations cover every protocol, sync variant, schedule, routing mode (traces
included), dtype and four profiles (two tiers, flat, three tiers with sentinel collisions, and
the edges of the cost space: no latency, one block in flight, frequent collisions).
"""

from __future__ import annotations

import random

import numba
import numpy as np
import polars as pl
import pytest

from ubepsim import reference
from ubepsim.errors import InputError
from ubepsim.kernels import layer, layout
from ubepsim.kernels.layout import DISPATCH_TIMELINE, NIC, ends
from ubepsim.paper import cm384
from ubepsim.reference.state import COPY
from ubepsim.model import kernel_io, api
from ubepsim.model.costs import time_bound
from ubepsim.model.params import config_columns, make_config
from ubepsim.model.profile import HOP_CLASSES, load_profile
from ubepsim.model.workload import config_batches
from ubepsim.model.result_fields import PHASE_NAMES, RESULT_NAMES, phase_column

PROFILES = {
    "cm384": load_profile(),
    # the per-destination and per-source costs on, whatever cm384's values
    "flat": load_profile(overrides={"npu_dies": 1, "tier_sizes": [], "dest_switch_cycles": 150,
                                    "count_chain_cycles": 90, "status_poll_cycles": 200}),
    "three_tier": load_profile(overrides={"tier_sizes": [4, 8], "blocks_in_flight": 3,
                                          "sentinel_collision_prob": 0.02,
                                          "dest_switch_cycles": 40, "count_chain_cycles": 7,
                                          "status_poll_cycles": 3, "launch_skew_ns": 700.0}),
    # the edges of the cost space: no latency (arrivals tie, acks come at once), one block in
    # flight, 64 B blocks with a 1 B flag, no fixed costs, an egress port a thousand times
    # slower than the ingress one, frequent sentinel collisions
    "edge": load_profile(overrides={"npu_dies": 1, "tier_sizes": [], "blocks_in_flight": 1,
                                    "block_bytes": 64, "flag_bytes": 1, "egress_gbps": 1.0,
                                    "ingress_gbps": 1000.0, "core_store_gbps": 500.0,
                                    "store_issue_cycles": 0, "init_cycles": 0,
                                    "syncall_cycles": 0, "sentinel_collision_prob": 0.3,
                                    "sentinel_timeout_ns": 50.0,
                                    "latency_ns": dict.fromkeys(HOP_CLASSES, 0.0)}),
    # the GPU preset: 8-GPU NVLink nodes, a NIC per GPU with its per-message cost, on rails,
    # the dies' launches spread over less than these small runs take; its blocks taken as
    # written whole, so that every sync variant runs (the preset itself refuses tff and sp:
    # test_run_cli)
    "h800": load_profile("h800", overrides={"atomic_bytes": 4096, "nic_message_ns": 40.0,
                                            "rails": 8, "launch_skew_ns": 3000.0}),
}
N_CONFIGS = 320
CHUNK = 40


def write_trace(path, ranks, batch, topk, experts, seed, ragged=False):
    """A trace of `batch` tokens per rank, or (ragged) of ranks x batch tokens drawn over the
    ranks, some with none: a trace carries its own batches."""
    rnd = np.random.default_rng(seed)
    rows = {"rank": [], "token": [], "k": [], "expert": []}
    tokens = rnd.multinomial(ranks * batch, rnd.dirichlet(np.full(ranks, 0.5))) if ragged \
        else [batch] * ranks
    for r in range(ranks):
        for t in range(tokens[r]):
            for k, e in enumerate(rnd.choice(experts, size=topk, replace=False)):
                rows["rank"].append(r)
                rows["token"].append(t)
                rows["k"].append(k)
                rows["expert"].append(int(e))
    pl.DataFrame(rows).write_parquet(path)


ROUTINGS = ["uniform", "zipf", "hot", "lognormal", "trace"]
PROTOCOLS = ["bsp", "ubep", "deepep_ll"]


def dispatch_modes(i):
    """Configuration i's modes: cycled through so that every combination shows up."""
    return dict(protocol=PROTOCOLS[i % 3], sync=["sw", "tff", "dc", "sp"][(i // 3) % 4],
                schedule=["expert_block", "balanced", "homogenized"][(i // 12) % 3],
                routing=ROUTINGS[(i // 36) % len(ROUTINGS)])


def random_configs(n, seed, trace_dir, modes=dispatch_modes, extra=None):
    """n valid random configurations, with every mode represented: configuration i has
    modes(i), and the parameters extra(rnd) draws if it is given (test_combine.py's)."""
    rnd = random.Random(seed)
    out = []
    while len(out) < n:
        i = len(out)
        ranks = rnd.choice([1, 2, 3, 4, 6, 8, 12, 16])
        experts = ranks * rnd.randint(1, 4)
        v = dict(ranks=ranks, experts=experts, batch=rnd.randint(1, 10),
                 cores=rnd.randint(2, 9), hidden=rnd.choice([1, 7, 100, 240, 480, 1000]),
                 dtype=rnd.choice(["bf16", "fp8", "int8"]), **modes(i),
                 zipf_s=rnd.choice([0.5, 1.2, 3.0]), hot_share=rnd.choice([0.2, 0.9]),
                 hot_placement=rnd.choice(["spread", "ranks"]),
                 lognormal_sigma=rnd.choice([0.3, 1.0, 2.5]),
                 # zero load on some: dies that receive nothing, experts without tokens
                 zero_experts=rnd.choice([0.0, 0.0, 0.3]), zero_ranks=rnd.choice([0, 0, 1, 2]),
                 # ragged batches on some: drawn, zero-token dies, a list (1 + a draw, so
                 # that some die holds tokens)
                 batch_spread=rnd.choice(["equal", "equal", "cv", "zero", "list"]),
                 batch_cv=rnd.choice([0.3, 1.0, 2.0]), zero_token_share=rnd.choice([0.2, 0.6]),
                 batches=[1 + rnd.randint(0, 12)] + [rnd.randint(0, 12) for _ in range(ranks - 1)],
                 seed=rnd.randint(0, 3), **(extra(rnd) if extra else {}))
        v["topk"] = rnd.randint(1, min(6, experts))
        v["cumsum_cores"] = rnd.randint(1, v["cores"] - 1)
        v["hot_experts"] = rnd.randint(1, experts)
        if v["routing"] == "trace":
            path = trace_dir / f"trace{i}.parquet"
            write_trace(path, ranks, v["batch"], v["topk"], experts, i, ragged=i % 2 == 1)
            v["trace"] = str(path)
        try:
            out.append((make_config(v, 48), rnd.choice(list(PROFILES))))
        except InputError:
            continue
    return out


@pytest.fixture(scope="module")
def configs(tmp_path_factory):
    return random_configs(N_CONFIGS, 2026, tmp_path_factory.mktemp("traces"))


@pytest.fixture(scope="module")
def twins(configs):
    """The twin's results of each configuration (with its `_detail`), computed once when
    first asked for."""
    cache: dict[int, dict] = {}

    def twin(i):
        if i not in cache:
            cfg, prof = configs[i]
            cache[i] = reference.simulate(cfg, PROFILES[prof])
        return cache[i]
    return twin


def differences(twin: dict, kernel: dict) -> dict:
    """The results where kernel and twin differ, {column: (twin's, kernel's)}: every declared
    result column (a column one of them lacks differs too)."""
    extra = set(twin) - {"_detail"} - set(RESULT_NAMES)
    return {k: (twin.get(k), kernel.get(k)) for k in (*RESULT_NAMES, *extra)
            if k not in twin or k not in kernel or twin[k] != kernel[k]}


@pytest.mark.parametrize("chunk", range(N_CONFIGS // CHUNK))
def test_kernel_matches_twin_exactly(configs, twins, chunk):
    for i in range(chunk * CHUNK, (chunk + 1) * CHUNK):
        cfg, prof = configs[i]
        twin = twins(i)
        kernel = api.simulate(cfg, PROFILES[prof])
        assert not differences(twin, kernel), (cfg, prof, differences(twin, kernel))


def test_the_batch_kernel_matches_the_twin_row_by_row(configs, twins):
    """A sweep's path: each profile's configurations in one table (every routing mixed, in a
    shuffled order) through the parallel batch kernel, which also checks the invariants of
    every row. Rows sharing a table share its weight and trace arrays, each at its offset."""
    order = random.Random(7).sample(range(len(configs)), len(configs))
    for prof in PROFILES:
        rows = [i for i in order if configs[i][1] == prof]
        table = api.simulate_table(pl.DataFrame([configs[i][0].as_dict() for i in rows]),
                                     PROFILES[prof])
        assert table.height == len(rows)
        for i, kernel in zip(rows, table.iter_rows(named=True)):
            assert not differences(twins(i), kernel), (configs[i], differences(twins(i), kernel))
            assert kernel["config_id"] == configs[i][0].config_id


def test_sync_variants_on_one_schedule_equal_each_alone(configs):
    """The batch kernel computes one schedule for a run of rows that differ only in sync: every
    configuration's four sync variants, in one table per profile, equal the same configurations
    simulated one at a time (each on its own schedule, which the twin checks)."""
    for prof in PROFILES:
        # (deepep_ll reads no sync: its four variants would be one configuration)
        mine = [c for c, p in configs if p == prof and c.protocol.name != "deepep_ll"][:12]
        variants = [{**c.as_dict(), "sync": sync} for c in mine
                    for sync in ("sw", "tff", "dc", "sp")]
        params, costs, chances, *shared = kernel_io.prepare(config_columns(variants),
                                                               PROFILES[prof])
        # the variants of a configuration lie side by side (kernel_order): one run each
        order = kernel_io.kernel_order(params)
        runs = 1 + sum(not layer.same_schedule(params, costs, i, j)
                       for i, j in zip(order, order[1:]))
        assert runs == len(mine)
        table = api.simulate_table(pl.DataFrame(variants), PROFILES[prof])
        for v, row in zip(variants, table.iter_rows(named=True)):
            alone = api.simulate(make_config(v, 48), PROFILES[prof])
            assert {n: row[n] for n in alone if n != "_detail"} == \
                {n: alone[n] for n in alone if n != "_detail"}, (v, prof)


def test_random_configurations_cover_every_mode(configs, twins):
    seen = {(c.protocol.name, c.sync.name, c.schedule.name) for c, _ in configs}
    # deepep_ll reads neither (its counts' variant and its deal are its own)
    assert len(seen) == 2 * 4 * 3 + 1
    assert {c.routing.name for c, _ in configs} == set(ROUTINGS)
    assert {c.hot_placement.name for c, _ in configs if c.routing.name == "hot"} == \
        {"spread", "ranks"}
    assert any(c.zero_experts > 0 for c, _ in configs)
    assert any(c.zero_ranks > 0 for c, _ in configs)
    assert {c.batch_spread.name for c, _ in configs} == {"equal", "cv", "zero", "list"}
    # ragged batches reach the kernel: some die holds more tokens than the mean, some none
    ragged = [(config_batches(c), c) for c, _ in configs if c.batch_spread.name != "equal"]
    assert any(max(b) > c.batch for b, c in ragged) and any(0 in b for b, _ in ragged)
    traced = [config_batches(c) for c, _ in configs if c.routing.name == "trace"]
    assert any(len(set(b)) > 1 for b in traced) and any(len(set(b)) == 1 for b in traced)
    assert {p for _, p in configs} == set(PROFILES)
    # every fabric's hop classes occur, and only those its shape has: three_hop past the
    # 8-die domains of three_tier, no intra_npu on the flat fabric, no two_hop within 16 dies
    hops = {}
    for i, (cfg, prof) in enumerate(configs):
        for h in ("intra_npu", "two_hop", "three_hop"):
            key = (prof, cfg.ranks > 8, h)
            hops[key] = hops.get(key, 0) + twins(i)[f"copies_{h}"]
    assert hops["three_tier", True, "three_hop"] > 0 == hops["three_tier", False, "three_hop"]
    assert hops["three_tier", True, "two_hop"] > 0 and hops["cm384", True, "intra_npu"] > 0
    # h800's rails: past its 8-GPU nodes, another rail's GPU is three hops away, the same
    # rail's two
    assert hops["h800", True, "two_hop"] > 0 and hops["h800", True, "three_hop"] > 0
    assert sum(v for (p, _, h), v in hops.items()
               if p not in ("three_tier", "h800") and h != "intra_npu") == 0
    assert hops["flat", True, "intra_npu"] == hops["flat", False, "intra_npu"] == 0


@pytest.mark.parametrize("chunk", range(2))
def test_invariants_hold_in_the_twin(configs, twins, chunk):
    """Every copy delivered once, nothing read before it is visible, latency above the bound."""
    for i in range(chunk, len(configs), 2):   # i // 2 cycles the sync variants: all four
        cfg = configs[i][0]
        out = twins(i)
        d = out["_detail"]
        copies = cfg.ranks * cfg.batch * cfg.topk
        assert d["sent"] == d["delivered"] == out["copies_total"] == copies
        assert d["violations"] == 0
        assert d["latency_cycles"] >= d["bound_cycles"]
        # the per-hop counts are the stores' own, recounted from where each went
        v = PROFILES[configs[i][1]].values
        climbs = [_climb(src, st["dst"], v["npu_dies"], v["tier_sizes"], v["rails"])
                  for src, stores in enumerate(d["stores"]) for st in stores
                  if st["kind"] == COPY]
        assert [out[f"copies_{h}"] for h in HOP_CLASSES] == \
            [climbs.count(c) for c in range(len(HOP_CLASSES))]
        # phase attribution covers the critical path exactly
        phases = sum(out[phase_column(p)] for p in PHASE_NAMES)
        assert phases == pytest.approx(out["latency_us"], rel=1e-12)
        assert all(out[phase_column(p)] >= 0 for p in PHASE_NAMES), configs[i]
        # every AIV's phase boundaries are ordered in time
        for die in d["marks"]:
            for marks in die:
                assert marks == sorted(marks)


# Configurations where the critical path's owner ties (found by a search, not chosen by hand): bsp,
# two dies end last together; ubep, two AIVs of the last die do. Each tied candidate has its own
# phase split, so the breakdown tells which one the rule took. They run on the paper fit's start
# (hardware figures, fixed in cm384.py), not on a fitted profile: a refit moves every time.
TIE_PROFILE = cm384.paper_start()
TIES = {
    "bsp": {"ranks": 4, "batch": 3, "topk": 1, "hidden": 256, "cores": 4, "protocol": "bsp",
            "sync": "sw", "schedule": "balanced", "seed": 267},
    "ubep": {"ranks": 6, "batch": 4, "topk": 2, "hidden": 256, "cores": 5, "cumsum_cores": 1,
             "protocol": "ubep", "sync": "sp", "schedule": "balanced", "seed": 435},
}


@pytest.mark.parametrize("protocol", TIES)
def test_ties_for_the_critical_path_go_to_the_lowest_index(protocol):
    """The phase split is the lowest-numbered of the last dies' (and, under ubep, of its
    AIVs ending last): the twin's explicit rule, which the kernel must follow on a tie."""
    cfg = make_config(TIES[protocol], 48)
    kernel = api.simulate(cfg, TIE_PROFILE, timeline=True)
    ends = kernel["timeline"].group_by("die", "core").agg(pl.col("end_us").max())
    last = ends.filter(pl.col("end_us") == ends["end_us"].max())
    tied = last["die"].n_unique() if protocol == "bsp" else last.height
    assert tied > 1                          # the configuration does tie
    twin = reference.simulate(cfg, TIE_PROFILE)
    for phase in PHASE_NAMES:
        assert kernel[phase_column(phase)] == twin[phase_column(phase)], phase


def test_kernel_and_twin_check_the_same_bound(configs, twins):
    """The invariants' latency bound, which no result column shows, is the same in both."""
    for prof in PROFILES:
        rows = [i for i, (_, p) in enumerate(configs) if p == prof][::4]
        cols = config_columns([configs[i][0].as_dict() for i in rows])
        params, costs, chances, *shared = kernel_io.prepare(cols, PROFILES[prof])
        out = np.zeros((len(rows), layout.N_OUT))
        layer.simulate_batch(params, costs, chances, *shared, out)
        assert out[:, layout.O_BOUND].tolist() == \
            [twins(i)["_detail"]["bound_cycles"] for i in rows]


def test_no_time_passes_the_time_bound(configs, twins):
    """costs.time_bound, which keeps every time below the kernel's MAX_TIME, is above every
    phase boundary of every AIV (the latest of them is the latency)."""
    for i, (cfg, prof) in enumerate(configs):
        cols = cfg.columns()
        costs = kernel_io.prepare(cols, PROFILES[prof])[1]
        bound = time_bound(cols, costs)[0]
        d = twins(i)["_detail"]
        latest = max(max(max(core) for core in die) for die in d["marks"])
        assert latest == d["latency_cycles"] < bound, (cfg, prof)


def test_bad_invariant_is_reported(monkeypatch):
    """A kernel row that delivered fewer copies than it dispatched is an error, not a result."""
    cfg = make_config({"ranks": 4, "batch": 4, "topk": 2, "cores": 4, "cumsum_cores": 1}, 48)
    prof = PROFILES["cm384"]
    cols = cfg.columns()
    params, costs, chances, *shared = kernel_io.prepare(cols, prof)
    out = np.zeros((1, layout.N_OUT))
    layer.simulate_batch(params, costs, chances, *shared, out)
    out[0, layout.O_DELIVERED] -= 1
    with pytest.raises(kernel_io.KernelFailure, match="invariant"):
        kernel_io.result_columns(out, cols, costs, prof)


def test_timeline_marks_match_the_twin(configs, twins):
    """Every AIV's phase boundaries, not only the summary results, agree with the twin."""
    for i in range(0, len(configs), 16):
        cfg, prof = configs[i]
        twin = twins(i)["_detail"]["marks"]
        frame = api.simulate(cfg, PROFILES[prof], timeline=True)["timeline"]
        clock = PROFILES[prof].values["clock_ghz"] * 1000.0
        for (die, core), rows in frame.group_by(["die", "core"], maintain_order=True):
            kernel = rows["start_us"][:1].to_list() + rows["end_us"].to_list()
            assert kernel == pytest.approx([m / clock for m in twin[die][core]], abs=1e-9), \
                (cfg, prof, die, core)


@pytest.mark.skipif(numba.config.DISABLE_JIT, reason="NUMBA_DISABLE_JIT: nothing is compiled")
def test_compiled_kernels_are_cached_outside_the_package():
    """Numba's default, __pycache__ beside the kernels, outlives `pip uninstall` in
    site-packages and then shadows an editable install of the package."""
    from pathlib import Path

    cache = Path(layer.BATCH[layout.DISPATCH]._cache._cache_path)
    package = Path(layer.__file__).resolve().parent.parent
    assert package not in cache.resolve().parents


# --- properties of the twin's stores and phases: with the kernel equal to the twin, the
# kernel's too. Each says what the model must do, not how; a change made alike in both that
# breaks it (found by a mutation audit) fails here.

SIGNAL = {"copy": "copy", "count": "count", "flag": "signal", "checksum": "signal"}


def _blocks(st, c):
    return c.get(f"{st['kind']}_blocks", 1)   # a flag or checksum is one block


def _count_related(st, cfg):
    """A count message or its signal (under ubep those come from the CalCumSum group)."""
    if st["kind"] == "count":
        return True
    return st["kind"] != "copy" and (cfg.protocol.name == "bsp" or st["core"] < cfg.cumsum_cores)


def test_each_die_sends_the_stores_its_protocol_and_sync_variant_call_for(configs, twins):
    """A copy per (token, k); one count message to every die (deepep_ll: one per expert, each
    die's as many as its experts); and the signals: under ubep sw a
    flag after each copy, under ubep dc one checksum per AIV and destination of its copies; a
    flag (sw) or checksum (dc) after each count message, under either protocol."""
    from collections import Counter
    for i, (cfg, _) in enumerate(configs):
        R, sync = cfg.ranks, cfg.sync.name
        ubep = cfg.protocol.name == "ubep"
        batches = config_batches(cfg)
        for s, stores in enumerate(twins(i)["_detail"]["stores"]):
            copies = [st for st in stores if st["kind"] == "copy"]
            counts = [st for st in stores if st["kind"] == "count"]
            assert len(copies) == batches[s] * cfg.topk
            per_die = cfg.experts // R if cfg.protocol.name == "deepep_ll" else 1
            assert sorted(st["dst"] for st in counts) == [d for d in range(R)
                                                           for _ in range(per_die)]
            if ubep:
                assert all(st["core"] >= cfg.cumsum_cores for st in copies)
                assert all(st["core"] < cfg.cumsum_cores for st in counts)
            signals = [st for st in stores if st["kind"] in ("flag", "checksum")]
            count_signals = [st for st in signals if _count_related(st, cfg)]
            copy_signals = [st for st in signals if not _count_related(st, cfg)]
            kind = {"sw": "flag", "dc": "checksum"}.get(sync)
            assert sorted((st["kind"], st["dst"]) for st in count_signals) == \
                ([(kind, d) for d in range(R)] if kind else [])
            pairs = [(st["core"], st["dst"]) for st in copies]
            if ubep and sync == "sw":
                signalled = Counter((st["kind"], st["core"], st["dst"], st["ref"])
                                    for st in copy_signals)
                assert signalled == Counter(("flag", st["core"], st["dst"], st["ref"])
                                            for st in copies)
            elif ubep and sync == "dc":
                assert sorted((st["core"], st["dst"]) for st in copy_signals) == sorted(set(pairs))
                assert {st["kind"] for st in copy_signals} <= {"checksum"}
            else:
                assert copy_signals == []


def test_ports_serve_one_store_at_a_time_and_credits_return_in_issue_order(configs, twins):
    """Egress: a die's remote stores leave one after another, each after it was issued, and
    arrive half a hop later (no profile here has a tier link that queues). Ingress: a die's
    remote arrivals become visible one after another, each after it arrived, and are
    acknowledged to their sender the hop's second half later. Both at the cost of the store's
    kind. An AIV issues a store only with credits for its blocks, a credit coming back when its
    store and every older one of the AIV were acknowledged (or with nothing in flight), and a
    flag only once every earlier store of the AIV was."""
    for i, (cfg, prof) in enumerate(configs):
        d = twins(i)["_detail"]
        c = d["costs"]
        for s, stores in enumerate(d["stores"]):
            free = {}                  # per port: the die's own, its NIC
            for st in stores:
                if st["dst"] == s:
                    assert st["visible"] == st["ack"] == st["issue_end"] + c["lat_local"]
                    continue
                cost = c[SIGNAL[st["kind"]] + ("_nic" if st["port"] == NIC else "_egress")]
                assert st["depart"] >= max(st["issue_end"], free.get(st["port"], 0)) + cost
                free[st["port"]] = st["depart"]
                hop = c[f"lat_{HOP_CLASSES[st['hop']]}"]
                assert st["arrival"] == st["depart"] + hop // 2
                assert st["ack"] == st["visible"] + hop - hop // 2
            for a in range(cfg.cores):
                mine = [st for st in stores if st["core"] == a]
                acked = []      # when each store's credit can come back: in issue order
                for k, st in enumerate(mine):
                    start = st["issue_end"] - c[SIGNAL[st["kind"]] + "_issue"]
                    out = sum(_blocks(x, c) for x, back in zip(mine, acked) if back > start)
                    assert out == 0 or out + _blocks(st, c) <= c["blocks_in_flight"], (i, s, a, k)
                    if st["kind"] == "flag":
                        assert start >= max([x["ack"] for x in mine[:k]], default=0)
                    acked.append(max(acked[-1] if acked else 0, st["ack"]))
        for dst in range(cfg.ranks):
            came = sorted((st for src, stores in enumerate(d["stores"]) for st in stores
                           if st["dst"] == dst != src),
                          key=lambda st: (st["visible"], st["arrival"]))
            free = {}
            for st in came:
                cost = c[SIGNAL[st["kind"]] + ("_nic" if st["port"] == NIC else "_ingress")]
                assert st["visible"] == max(st["arrival"], free.get(st["port"], 0)) + cost
                assert st["queued"] == st["visible"] - cost - st["arrival"]
                free[st["port"]] = st["visible"]


BSP = DISPATCH_TIMELINE["bsp"]


def _at(role, step, n=0):
    """The mark that ends the n-th `step` of a dispatch role's timeline."""
    return ends(DISPATCH_TIMELINE[role], step)[n]


def _fixed_slots_wait(cfg, d):
    """deepep_ll: the counts wait for the die's last copy issued (one local latency later), not
    its acknowledgement; each AIV's pairs are received after their counts are visible (pair
    q = local expert x ranks + source; a count per expert, its store's ref destination x
    experts per die + local expert)."""
    c, R, A = d["costs"], cfg.ranks, cfg.cores
    EL = cfg.experts // R
    for dst, marks in enumerate(d["marks"]):
        sent = max(m[_at("fixed", "send")] for m in marks)
        barrier = _at("fixed", "finish_counter")
        assert all(m[barrier] >= sent + c["lat_local"] for m in marks)
        assert all(m[barrier] == marks[0][barrier] for m in marks)
        for j in range(A):
            pairs = {(q % R, dst * EL + q // R) for q in range(j * EL * R // A,
                                                              (j + 1) * EL * R // A)}
            counts = [st["visible"] for s, ref in pairs for st in d["stores"][s]
                      if st["dst"] == dst and st["kind"] == "count" and st["ref"] == ref]
            assert len(counts) == len(pairs)     # each pair's own count message
            assert marks[j][_at("fixed", "pair_receive")] >= max(counts, default=0)


def test_no_phase_ends_before_what_it_waits_for(configs, twins):
    """Count polling ends after the counts it polls are visible; ubep's token AIVs take their
    offsets only after the whole CalCumSum group is done and its one local store lands; bsp's
    phases start after their SyncAll; an AIV's count messages cost it their work and issue."""
    for i, (cfg, _) in enumerate(configs):
        d = twins(i)["_detail"]
        c = d["costs"]
        R, A = cfg.ranks, cfg.cores
        if cfg.protocol.name == "deepep_ll":
            _fixed_slots_wait(cfg, d)
            continue
        ubep = cfg.protocol.name == "ubep"
        C = cfg.cumsum_cores if ubep else A      # the AIVs that count
        # the marks ending the count polls and the sending of the count messages
        role = "cumsum" if ubep else "bsp"
        polled, sent = _at(role, "count_poll"), _at(role, "count_send")
        # when die `dst` can see source s's counts: its last count-related store to dst
        seen = [[max(st["visible"] for st in d["stores"][s] if st["dst"] == dst
                     and _count_related(st, cfg)) for s in range(R)] for dst in range(R)]
        for dst, marks in enumerate(d["marks"]):
            for j in range(C):
                sources = range(j * R // C, (j + 1) * R // C)
                assert marks[j][polled] >= max((seen[dst][s] for s in sources), default=0)
                # each count message: a vector count per local expert, then its issue, and
                # under sw and dc its signal's
                each = (cfg.experts // R) * c["vcount"] + c["count_issue"] + \
                    (c["signal_issue"] if cfg.sync.name in ("sw", "dc") else 0)
                dests = range(j * R // C, (j + 1) * R // C)
                assert marks[j][sent] - marks[j][sent - 1] >= len(dests) * each
            if ubep:
                offsets = max(marks[j][polled] for j in range(C)) + c["signal_issue"] + \
                    c["lat_local"]
                assert all(marks[a][_at("token", "offset_poll")] >= offsets for a in range(C, A))
            else:
                # (a die without tokens sends no copies)
                acks = max((st["ack"] for st in d["stores"][dst] if st["kind"] == "copy"),
                           default=0)
                for x, after in ((_at("bsp", "syncall", 0), acks),
                                 (_at("bsp", "syncall", 1), max(m[polled] for m in marks)),
                                 (_at("bsp", "syncall", 2),
                                  max(m[_at("bsp", "cumsum")] for m in marks))):
                    assert all(m[x] >= after + c["syncall"] for m in marks), (i, dst, x)


def _climb(src, dst, npu_dies, tiers, rails=0):
    """The hop class a store takes: 0 on its own die, 1 within an NPU, then one more for each
    switch tier it climbs (the smallest domain holding both dies; above the first tier, on
    rails, only both on one rail)."""
    if src == dst:
        return 0
    sizes = [npu_dies, *tiers]
    return next((i + 1 for i, n in enumerate(sizes) if src // n == dst // n
                 and (i < 2 or not rails or src % rails == dst % rails)), len(sizes) + 1)


def test_every_store_takes_the_hop_class_of_the_smallest_domain_holding_both_dies(configs,
                                                                                   twins):
    # by hand, on the three-tier fabric (2-die NPUs, 4- and 8-die switch domains)
    assert [_climb(0, d, 2, [4, 8]) for d in (0, 1, 3, 5, 9)] == [0, 1, 2, 3, 4]
    # on rails of 4: die 5 is on die 0's rail 1 of the next 4-die domain, die 4 on rail 0
    assert [_climb(0, d, 1, [4, 8], rails=4) for d in (1, 4, 5)] == [2, 3, 4]
    for i, (cfg, prof) in enumerate(configs):
        v = PROFILES[prof].values
        for src, stores in enumerate(twins(i)["_detail"]["stores"]):
            for st in stores:
                assert st["hop"] == _climb(src, st["dst"], v["npu_dies"], v["tier_sizes"],
                                           v["rails"])


def test_waiting_covers_every_poll_and_barrier(configs, twins):
    """An AIV's wait holds at least its phases that are nothing but waiting: a token AIV's
    poll for the offsets; bsp's three SyncAlls."""
    for i, (cfg, prof) in enumerate(configs):
        d = twins(i)["_detail"]
        for marks, die_waits in zip(d["marks"], d["waits"]):
            for a, (m, w) in enumerate(zip(marks, die_waits)):
                if cfg.protocol.name == "bsp":
                    # each SyncAll, from the end of the step before it
                    assert w >= sum(m[x] - m[x - 1] for x in ends(BSP, "syncall"))
                elif a >= cfg.cumsum_cores:
                    assert w >= m[_at("token", "offset_poll")] - m[_at("token", "send")]
