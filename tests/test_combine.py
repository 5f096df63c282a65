"""Combine and the layer: the Numba kernel against its plain-Python twin on random small
configurations of every op, protocol, sync variant and schedule, and the invariants of the
return path (docs/model.md, "Combine"): every copy returns to its source exactly once, no token
is reduced before all its copies are visible, the latency is never below its bound.

test_twin.py holds dispatch to the twin the same way; the profiles are its four.
"""

from __future__ import annotations

import random
from collections import Counter

import polars as pl
import pytest

from test_twin import PROFILES, differences, random_configs, twins  # noqa: F401 (a fixture)
from test_twin import PROTOCOLS, ROUTINGS
# test_twin's checks, run here on this file's configurations: the kernel checks the twin's
# latency bound; costs.time_bound is above every time of every op; every AIV's phase
# boundaries (a layer's dispatch's, then its combine's) are the twin's
from test_twin import (test_kernel_and_twin_check_the_same_bound,  # noqa: F401
                       test_no_time_passes_the_time_bound, test_timeline_marks_match_the_twin)
from ubepsim.kernels import layout
from ubepsim.model import api
from ubepsim.model.result_fields import PHASE_NAMES, RESULTS, phase_column
from ubepsim.model.workload import config_batches

N_CONFIGS = 360
CHUNK = 40
OPS = ("dispatch", "combine", "layer")


def combine_modes(i):
    """Configuration i's op and modes: cycled through so that every combination shows up."""
    return dict(op=OPS[i % 3], protocol=PROTOCOLS[(i // 3) % 3],
                sync=["sw", "tff", "dc", "sp"][(i // 9) % 4],
                schedule=["expert_block", "balanced", "homogenized"][(i // 36) % 3],
                routing=ROUTINGS[i % len(ROUTINGS)])


def combine_draws(rnd):
    """The parameters only combine and a layer read, drawn."""
    return dict(combine_dtype=rnd.choice(["bf16", "int8"]),
                expert_fixed_us=rnd.choice([0.0, 0.5, 3.0]),
                expert_ns_per_copy=rnd.choice([0.0, 0.7, 40.0]))


@pytest.fixture(scope="module")
def configs(tmp_path_factory):
    """(configuration, profile) pairs; test_twin's `twins` fixture simulates them in the twin."""
    return random_configs(N_CONFIGS, 4040, tmp_path_factory.mktemp("traces"), combine_modes,
                          combine_draws)


def test_random_configurations_cover_every_op_protocol_sync_and_schedule(configs):
    """As asked for: a bsp combine records sync and schedule at their defaults (it reads
    neither), so the modes are those the generator gave."""
    asked = [combine_modes(i) for i in range(len(configs))]
    assert len({(v["op"], v["protocol"], v["sync"], v["schedule"]) for v in asked}) == 108
    assert all(c.op.name == v["op"] and c.protocol.name == v["protocol"]
               for (c, _), v in zip(configs, asked))
    assert {v["routing"] for v in asked} == set(ROUTINGS)
    assert {c.combine_dtype.name for c, _ in configs if c.op.name != "dispatch"} == \
        {"bf16", "int8"}
    assert {p for _, p in configs} == set(PROFILES)
    # bsp's split of a token's hidden dimension happens
    assert any(c.op.name != "dispatch" and c.protocol.name == "bsp" and c.batch < c.cores
               and c.combine_dtype.name == "bf16" for c, _ in configs)


@pytest.mark.parametrize("chunk", range(N_CONFIGS // CHUNK))
def test_kernel_matches_twin_exactly(configs, twins, chunk):
    for i in range(chunk * CHUNK, (chunk + 1) * CHUNK):
        cfg, prof = configs[i]
        kernel = api.simulate(cfg, PROFILES[prof])
        assert not differences(twins(i), kernel), (cfg, prof, differences(twins(i), kernel))


def test_the_batch_kernel_matches_the_twin_row_by_row(configs, twins):
    """A sweep's path: each profile's configurations, ops mixed, in one shuffled table."""
    order = random.Random(9).sample(range(len(configs)), len(configs))
    for prof in PROFILES:
        rows = [i for i in order if configs[i][1] == prof]
        table = api.simulate_table(pl.DataFrame([configs[i][0].as_dict() for i in rows]),
                                     PROFILES[prof])
        for i, kernel in zip(rows, table.iter_rows(named=True)):
            assert not differences(twins(i), kernel), (configs[i], differences(twins(i), kernel))
            assert kernel["config_id"] == configs[i][0].config_id


def test_the_invariants_hold_in_the_twin(configs, twins):
    """Every copy sent and taken once per kernel; nothing read before it is visible; latency
    above the bound; the phases (with a layer's expert time) add up to the latency, and the
    split into dispatch, experts and combine does too."""
    for i, (cfg, prof) in enumerate(configs):
        out = twins(i)
        d = out["_detail"]
        copies = cfg.ranks * cfg.batch * cfg.topk
        kernels = 2 if cfg.op.name == "layer" else 1
        assert d["sent"] == d["delivered"] == kernels * copies
        assert out["copies_total"] == copies
        assert d["violations"] == 0
        assert d["latency_cycles"] >= d["bound_cycles"]
        total = sum(out[phase_column(p)] for p in PHASE_NAMES) + out["expert_us"]
        assert total == pytest.approx(out["latency_us"], rel=1e-12)
        # ... each part of it a time (V1's attribution gave deepep_ll's unfenced statuses a
        # negative one)
        assert all(out[phase_column(p)] >= 0 for p in PHASE_NAMES), (cfg, prof)
        split = out["dispatch_us"] + out["expert_us"] + out["combine_us"]
        assert split == pytest.approx(out["latency_us"], rel=1e-12)
        # a result the op does not give (result_fields: its declaration's ops) is 0
        assert [f.name for f in RESULTS if not f.given_by(cfg.op) and out[f.name] != 0] == []
        for die in d["marks"]:
            for marks in die:
                assert marks == sorted(marks)


def test_every_copy_returns_to_its_source_exactly_once(configs, twins):
    """Combine's stores: each die's returned copies are exactly those it received in dispatch
    (the same routing), and each source gets each of its token copies back once, from the die
    of its expert, in a store of a copy to it."""
    for i, (cfg, prof) in enumerate(configs):
        if cfg.op.name == "dispatch":
            continue
        d = twins(i)["_detail"]
        batches = config_batches(cfg)
        back = Counter()
        for src, stores in enumerate(d["returns"]):
            for st in stores:
                if st["kind"] == "copy":
                    assert st["src"] == src and st["costs"] == "return"
                    back[st["dst"], st["ref"]] += 1
        assert sorted(back) == [(s, x) for s in range(cfg.ranks)
                                for x in range(batches[s] * cfg.topk)] and \
            set(back.values()) == {1}, (cfg, prof)


def test_no_token_is_reduced_before_all_its_copies_are_visible(configs, twins):
    for i, (cfg, prof) in enumerate(configs):
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
            assert {t for t, _ in reduced} == set(range(config_batches(cfg)[s]))
            for t, start in reduced:
                assert start >= ready[s, t], (cfg, prof, s, t)


def test_v1_sends_a_status_to_each_die_after_its_cores_stores_completed(configs, twins):
    """bsp combine (CANN's V1): one status from each die to each die, from the AIV that owns the
    destination, issued after every store of that AIV completed; none under ubep; under
    deepep_ll its flags, one to each die per expert of the sender, issued right behind the
    AIV's copies, no sooner."""
    for i, (cfg, prof) in enumerate(configs):
        if cfg.op.name == "dispatch":
            continue
        d = twins(i)["_detail"]
        for s, stores in enumerate(d["returns"]):
            statuses = [st for st in stores if st["kind"] == "flag"]
            if cfg.protocol.name == "ubep":   # a flag per copy under sw, else none
                assert len(statuses) == (sum(x["kind"] == "copy" for x in stores)
                                         if cfg.sync.name == "sw" else 0)
                continue
            per_dest = cfg.experts // cfg.ranks if cfg.protocol.name == "deepep_ll" else 1
            assert sorted(st["dst"] for st in statuses) == [d for d in range(cfg.ranks)
                                                            for _ in range(per_dest)]
            for st in statuses:
                owner = [x for x in stores if x["core"] == st["core"] and x["kind"] == "copy"]
                issued = st["issue_end"] - d["costs"]["signal_issue"]
                done = "issue_end" if cfg.protocol.name == "deepep_ll" else "ack"
                assert issued >= max((x[done] for x in owner), default=0)


def test_bsp_combine_phases_follow_v1(configs, twins):
    """Under bsp every AIV runs V1's phases in order: Init, the copies, its fence and statuses,
    its status polls, the SyncAll (one time on every AIV of a die), the reduction."""
    for i, (cfg, prof) in enumerate(configs):
        if cfg.op.name != "combine" or cfg.protocol.name != "bsp":
            continue
        steps = layout.COMBINE_TIMELINE["statuses"]
        assert steps == ("init", "send", "status_send", "status_poll", "syncall", "reduce")
        for die in twins(i)["_detail"]["marks"]:
            assert len({m[layout.V1_SYNCALL_MARK] for m in die}) == 1
            for m in die:
                assert len(m) == 1 + len(steps)
                assert m == sorted(m)


def test_unfenced_statuses_keep_every_phase_a_time():
    """deepep_ll's statuses follow their copies without a fence, so its combine's phases are its
    last core's buckets, each a time. V1's attribution (the die's marks, Token-Sending until its
    last copy's acknowledgement) goes negative where acknowledgements come back long after the
    statuses were seen: here, a 50 us hop."""
    from ubepsim.paper.numbers import DEEPEP_LL
    from ubepsim.model.profile import load_profile
    slow = load_profile("h800", overrides={"latency_ns": {"one_hop": 50000.0,
                                                          "two_hop": 50000.0}})
    out = api.simulate({**DEEPEP_LL, "ranks": 16, "op": "combine"}, slow)
    assert all(out[phase_column(p)] >= 0 for p in PHASE_NAMES)
    assert sum(out[phase_column(p)] for p in PHASE_NAMES) == pytest.approx(out["latency_us"])
