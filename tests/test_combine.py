"""Combine and the layer: the Numba kernel against its plain-Python twin on random small
configurations of every op, protocol, sync variant and schedule, and the invariants of the
return path (docs/model.md, "Combine"): every copy returns to its source exactly once, no token
is reduced before all its copies are visible, the latency is never below its bound.

test_twin.py holds dispatch to the twin the same way; the profiles are its four.
"""

from __future__ import annotations

import random
from collections import Counter

import numpy as np
import polars as pl
import pytest

from test_twin import PROFILES, write_trace
from ubepsim import kernel_io, model, reference
from ubepsim.costs import time_bound
from ubepsim.errors import InputError
from ubepsim.kernels import layer, layout
from ubepsim.params import canonical, make_config
from ubepsim.reference.state import C_BSP_POLLED, C_BSP_STATUS, C_BSP_SYNCALL, C_SENT, INIT

N_CONFIGS = 360
CHUNK = 40
OPS = ("dispatch", "combine", "layer")
PHASES = ("init", "send", "sync", "cumsum", "reorder", "reduce")


def random_configs(n, seed, trace_dir):
    """n valid random configurations, every (op, protocol, sync, schedule) among them."""
    rnd = random.Random(seed)
    out = []
    while len(out) < n:
        i = len(out)
        ranks = rnd.choice([1, 2, 3, 4, 6, 8, 12, 16])
        experts = ranks * rnd.randint(1, 4)
        v = dict(ranks=ranks, experts=experts, batch=rnd.randint(1, 10),
                 aivs=rnd.randint(2, 12), hidden=rnd.choice([1, 7, 100, 240, 480, 1000]),
                 dtype=rnd.choice(["bf16", "fp8", "int8"]),
                 combine_dtype=rnd.choice(["bf16", "int8"]),
                 op=OPS[i % 3], protocol=["bsp", "ubep"][(i // 3) % 2],
                 sync=["sw", "tff", "dc", "sp"][(i // 6) % 4],
                 schedule=["expert_block", "balanced", "homogenized"][(i // 24) % 3],
                 routing=["uniform", "zipf", "hot", "trace"][(i // 72) % 4],
                 zipf_s=rnd.choice([0.5, 1.2, 3.0]), hot_share=rnd.choice([0.2, 0.9]),
                 expert_fixed_us=rnd.choice([0.0, 0.5, 3.0]),
                 expert_ns_per_copy=rnd.choice([0.0, 0.7, 40.0]), seed=rnd.randint(0, 3))
        v["topk"] = rnd.randint(1, min(6, experts))
        v["cumsum_aivs"] = rnd.randint(1, v["aivs"] - 1)
        v["hot_experts"] = rnd.randint(1, experts)
        if v["routing"] == "trace":
            path = trace_dir / f"trace{i}.parquet"
            write_trace(path, ranks, v["batch"], v["topk"], experts, i)
            v["trace"] = str(path)
        try:
            out.append((make_config(v, 48), rnd.choice(list(PROFILES)), v))
        except InputError:
            continue
    return out


@pytest.fixture(scope="module")
def configs(tmp_path_factory):
    return random_configs(N_CONFIGS, 4040, tmp_path_factory.mktemp("traces"))


@pytest.fixture(scope="module")
def twins(configs):
    cache: dict[int, dict] = {}

    def twin(i):
        if i not in cache:
            cfg, prof, _ = configs[i]
            cache[i] = reference.simulate(cfg, PROFILES[prof])
        return cache[i]
    return twin


def test_random_configurations_cover_every_op_protocol_sync_and_schedule(configs):
    """As given: a bsp combine records sync and schedule at their defaults (it reads neither),
    so the modes are those the generator asked for."""
    asked = {(v["op"], v["protocol"], v["sync"], v["schedule"]) for _, _, v in configs}
    assert len(asked) == 3 * 2 * 4 * 3
    assert {v["routing"] for _, _, v in configs} == {"uniform", "zipf", "hot", "trace"}
    assert {c.combine_dtype.name for c, _, _ in configs if c.op.name != "dispatch"} == \
        {"bf16", "int8"}
    assert {p for _, p, _ in configs} == set(PROFILES)
    # bsp's split of a token's hidden dimension happens, and a layer with a late hot die
    assert any(c.op.name != "dispatch" and c.protocol.name == "bsp" and c.batch < c.aivs
               and c.combine_dtype.name == "bf16" for c, _, _ in configs)


@pytest.mark.parametrize("chunk", range(N_CONFIGS // CHUNK))
def test_kernel_matches_twin_exactly(configs, twins, chunk):
    for i in range(chunk * CHUNK, (chunk + 1) * CHUNK):
        cfg, prof, _ = configs[i]
        twin = twins(i)
        kernel = model.simulate(cfg, PROFILES[prof])
        mismatched = {k: (twin[k], kernel[k]) for k in twin
                      if k != "_detail" and twin[k] != kernel[k]}
        assert not mismatched, (cfg, prof, mismatched)


def test_the_batch_kernel_matches_the_twin_row_by_row(configs, twins):
    """A sweep's path: each profile's configurations, ops mixed, in one shuffled table."""
    order = random.Random(9).sample(range(len(configs)), len(configs))
    for prof in PROFILES:
        rows = [i for i in order if configs[i][1] == prof]
        table = model.simulate_table(pl.DataFrame([configs[i][0].as_dict() for i in rows]),
                                     PROFILES[prof])
        for i, kernel in zip(rows, table.iter_rows(named=True)):
            twin = twins(i)
            mismatched = {k: (twin[k], kernel[k]) for k in twin
                          if k != "_detail" and twin[k] != kernel[k]}
            assert not mismatched, (configs[i][0], mismatched)
            assert kernel["config_id"] == configs[i][0].config_id


def test_timeline_marks_match_the_twin(configs, twins):
    """Every AIV's phase boundaries, a layer's dispatch's then its combine's, as the kernel's
    timeline gives them: its phases abut from 0 to its end."""
    for i in range(1, len(configs), 7):
        cfg, prof, _ = configs[i]
        twin = twins(i)["_detail"]["marks"]
        frame = model.simulate(cfg, PROFILES[prof], timeline=True)["timeline"]
        clock = PROFILES[prof].values["clock_ghz"] * 1000.0
        for (die, aiv), rows in frame.group_by(["die", "aiv"], maintain_order=True):
            assert rows["start_us"][1:].to_list() == rows["end_us"][:-1].to_list()
            kernel = [rows["start_us"][0]] + rows["end_us"].to_list()
            # (a layer's expert phase runs from the AIV's last dispatch mark to its first
            # combine mark, both the twin's)
            assert kernel == pytest.approx([m / clock for m in twin[die][aiv]], abs=1e-9), \
                (cfg, prof, die, aiv)


def test_the_invariants_hold_in_the_twin(configs, twins):
    """Every copy sent and taken once per kernel; nothing read before it is visible; latency
    above the bound; the phases (with a layer's expert time) add up to the latency, and the
    split into dispatch, experts and combine does too."""
    for i, (cfg, prof, _) in enumerate(configs):
        out = twins(i)
        d = out["_detail"]
        copies = cfg.ranks * cfg.batch * cfg.topk
        kernels = 2 if cfg.op.name == "layer" else 1
        assert d["sent"] == d["delivered"] == kernels * copies
        assert out["copies_total"] == copies
        assert d["violations"] == 0
        assert d["latency_cycles"] >= d["bound_cycles"]
        total = sum(out[f"phase_{p}_us"] for p in PHASES) + out["expert_us"]
        assert total == pytest.approx(out["latency_us"], rel=1e-12)
        split = out["dispatch_us"] + out["expert_us"] + out["combine_us"]
        assert split == pytest.approx(out["latency_us"], rel=1e-12)
        if cfg.op.name == "dispatch":
            assert out["combine_us"] == out["phase_reduce_us"] == 0
        if cfg.op.name == "combine":
            assert out["dispatch_us"] == out["phase_cumsum_us"] == out["phase_reorder_us"] == 0
        for die in d["marks"]:
            for marks in die:
                assert marks == sorted(marks)


def test_every_copy_returns_to_its_source_exactly_once(configs, twins):
    """Combine's stores: each die's returned copies are exactly those it received in dispatch
    (the same routing), and each source gets each of its token copies back once, from the die
    of its expert, in a store of a copy to it."""
    for i, (cfg, prof, _) in enumerate(configs):
        if cfg.op.name == "dispatch":
            continue
        d = twins(i)["_detail"]
        M = cfg.batch * cfg.topk
        back = Counter()
        for src, stores in enumerate(d["returns"]):
            for st in stores:
                if st["kind"] == "copy":
                    assert st["src"] == src and st["costs"] == "return"
                    back[st["dst"], st["ref"]] += 1
        assert sorted(back) == [(s, x) for s in range(cfg.ranks) for x in range(M)] and \
            set(back.values()) == {1}, (cfg, prof)


def test_no_token_is_reduced_before_all_its_copies_are_visible(configs, twins):
    for i, (cfg, prof, _) in enumerate(configs):
        if cfg.op.name == "dispatch":
            continue
        d = twins(i)["_detail"]
        K = cfg.topk
        # when each returned copy became visible at its source, by (source, token)
        ready: dict[tuple[int, int], int] = {}
        for stores in d["returns"]:
            for st in stores:
                if st["kind"] == "copy":
                    key = (st["dst"], st["ref"] // K)
                    ready[key] = max(ready.get(key, 0), st["visible"])
        for s, reduced in enumerate(d["reduced"]):
            assert {t for t, _ in reduced} == set(range(cfg.batch))
            for t, start in reduced:
                assert start >= ready[s, t], (cfg, prof, s, t)


def test_v1_sends_a_status_to_each_die_after_its_aivs_stores_completed(configs, twins):
    """bsp combine (CANN's V1): one status from each die to each die, from the AIV that owns the
    destination, issued after every store of that AIV completed; none under ubep."""
    for i, (cfg, prof, _) in enumerate(configs):
        if cfg.op.name == "dispatch":
            continue
        d = twins(i)["_detail"]
        for s, stores in enumerate(d["returns"]):
            statuses = [st for st in stores if st["kind"] == "flag"]
            if cfg.protocol.name == "ubep":   # a flag per copy under sw, else none
                assert len(statuses) == (cfg.batch * cfg.topk * 0 + sum(
                    x["kind"] == "copy" for x in stores) if cfg.sync.name == "sw" else 0)
                continue
            assert sorted(st["dst"] for st in statuses) == list(range(cfg.ranks))
            for st in statuses:
                owner = [x for x in stores if x["aiv"] == st["aiv"] and x["kind"] == "copy"]
                issued = st["issue_end"] - d["costs"]["signal_issue"]
                assert issued >= max((x["ack"] for x in owner), default=0)


def test_no_time_passes_the_time_bound(configs, twins):
    """costs.time_bound is above every phase boundary of every AIV, in every op."""
    for i, (cfg, prof, _) in enumerate(configs):
        cols = {k: np.asarray([v]) for k, v in cfg.as_dict().items()}
        costs = kernel_io.prepare(cols, PROFILES[prof])[1]
        bound = time_bound(kernel_io._codes(canonical(cols)), costs)[0]
        d = twins(i)["_detail"]
        latest = max(max(max(aiv) for aiv in die) for die in d["marks"])
        assert latest == d["latency_cycles"] < bound, (cfg, prof)


def test_kernel_and_twin_check_the_same_bound(configs, twins):
    for prof in PROFILES:
        rows = [i for i, (_, p, _) in enumerate(configs) if p == prof][::3]
        dicts = [configs[i][0].as_dict() for i in rows]
        cols = {k: np.asarray([d[k] for d in dicts]) for k in dicts[0]}
        params, costs, chances, cdf, trace = kernel_io.prepare(cols, PROFILES[prof])
        out = np.zeros((len(rows), layout.N_OUT))
        layer.simulate_batch(params, costs, chances, cdf, trace, out)
        assert out[:, layout.O_BOUND].tolist() == \
            [twins(i)["_detail"]["bound_cycles"] for i in rows]


def test_bsp_combine_phases_follow_v1(configs, twins):
    """Under bsp every AIV runs V1's phases in order: Init, the copies, its fence and statuses,
    its status polls, the SyncAll (one time on every AIV of a die), the reduction."""
    for i, (cfg, prof, _) in enumerate(configs):
        if cfg.op.name != "combine" or cfg.protocol.name != "bsp":
            continue
        for die in twins(i)["_detail"]["marks"]:
            assert len({m[C_BSP_SYNCALL] for m in die}) == 1
            for m in die:
                assert len(m) == 7
                assert m[0] <= m[INIT] <= m[C_SENT] <= m[C_BSP_STATUS] <= m[C_BSP_POLLED] \
                    <= m[C_BSP_SYNCALL] <= m[-1]
