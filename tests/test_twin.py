"""The Numba kernel against its plain-Python twin, and the invariants on every configuration.

Random small configurations cover every protocol, sync variant, schedule, routing mode (traces
included), dtype and three fabrics (two tiers, flat, three tiers with sentinel collisions).
"""

from __future__ import annotations

import random

import numpy as np
import polars as pl
import pytest

from ubepsim import model, reference
from ubepsim.errors import InputError
from ubepsim.params import make_config
from ubepsim.profile import load_profile

PROFILES = {
    "cm384": load_profile(),
    "flat": load_profile(overrides={"npu_dies": 1, "tier_sizes": []}),
    "three_tier": load_profile(overrides={"tier_sizes": [4, 8], "blocks_in_flight": 3,
                                          "sentinel_collision_prob": 0.02}),
}
N_CONFIGS = 320
CHUNK = 40


def write_trace(path, ranks, batch, topk, experts, seed):
    rnd = np.random.default_rng(seed)
    rows = {"rank": [], "token": [], "k": [], "expert": []}
    for r in range(ranks):
        for t in range(batch):
            for k, e in enumerate(rnd.choice(experts, size=topk, replace=False)):
                rows["rank"].append(r)
                rows["token"].append(t)
                rows["k"].append(k)
                rows["expert"].append(int(e))
    pl.DataFrame(rows).write_parquet(path)


def random_configs(n, seed, trace_dir):
    """n valid random configurations, with every mode represented."""
    rnd = random.Random(seed)
    out = []
    while len(out) < n:
        i = len(out)
        ranks = rnd.choice([1, 2, 3, 4, 6, 8, 12, 16])
        experts = ranks * rnd.randint(1, 4)
        v = dict(ranks=ranks, experts=experts, batch=rnd.randint(1, 10),
                 aivs=rnd.randint(2, 9), hidden=rnd.choice([1, 7, 100, 240, 480, 1000]),
                 dtype=rnd.choice(["bf16", "fp8", "int8"]),
                 # cycle through the modes so that every combination shows up
                 protocol=["bsp", "ubep"][i % 2], sync=["sw", "tff", "dc", "sp"][(i // 2) % 4],
                 schedule=["expert_block", "balanced", "homogenized"][(i // 8) % 3],
                 routing=["uniform", "zipf", "hot", "trace"][(i // 24) % 4],
                 zipf_s=rnd.choice([0.5, 1.2, 3.0]), hot_share=rnd.choice([0.2, 0.9]),
                 seed=rnd.randint(0, 3))
        v["topk"] = rnd.randint(1, min(6, experts))
        v["cumsum_aivs"] = rnd.randint(1, v["aivs"] - 1)
        v["hot_experts"] = rnd.randint(1, experts)
        if v["routing"] == "trace":
            path = trace_dir / f"trace{i}.parquet"
            write_trace(path, ranks, v["batch"], v["topk"], experts, i)
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


@pytest.mark.parametrize("chunk", range(N_CONFIGS // CHUNK))
def test_kernel_matches_twin_exactly(configs, twins, chunk):
    for i in range(chunk * CHUNK, (chunk + 1) * CHUNK):
        cfg, prof = configs[i]
        twin = twins(i)
        kernel = model.simulate(cfg, PROFILES[prof])
        mismatched = {k: (twin[k], kernel[k]) for k in twin
                      if k != "_detail" and twin[k] != kernel[k]}
        assert not mismatched, (cfg, prof, mismatched)


def test_the_batch_kernel_matches_the_twin_row_by_row(configs, twins):
    """A sweep's path: each profile's configurations in one table (every routing mixed, in a
    shuffled order) through the parallel batch kernel, which also checks the invariants of
    every row. Rows sharing a table share its weight and trace arrays, each at its offset."""
    order = random.Random(7).sample(range(len(configs)), len(configs))
    for prof in PROFILES:
        rows = [i for i in order if configs[i][1] == prof]
        table = model.simulate_table(pl.DataFrame([configs[i][0].as_dict() for i in rows]),
                                     PROFILES[prof])
        assert table.height == len(rows)
        for i, kernel in zip(rows, table.iter_rows(named=True)):
            twin = twins(i)
            mismatched = {k: (twin[k], kernel[k]) for k in twin
                      if k != "_detail" and twin[k] != kernel[k]}
            assert not mismatched, (configs[i], mismatched)
            assert kernel["config_id"] == configs[i][0].config_id


def test_random_configurations_cover_every_mode(configs, twins):
    seen = {(c.protocol.name, c.sync.name, c.schedule.name) for c, _ in configs}
    assert len(seen) == 2 * 4 * 3
    assert {c.routing.name for c, _ in configs} == {"uniform", "zipf", "hot", "trace"}
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
    assert sum(v for (p, _, h), v in hops.items() if p != "three_tier" and h != "intra_npu") == 0
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
        copies = sum(out[f"copies_{h}"] for h in ("local", "intra_npu", "one_hop", "two_hop",
                                                   "three_hop"))
        assert copies == out["copies_total"]
        # phase attribution covers the critical path exactly
        phases = sum(out[f"phase_{p}_us"] for p in ("init", "send", "sync", "cumsum", "reorder"))
        assert phases == pytest.approx(out["latency_us"], rel=1e-12)
        # every AIV's phase boundaries are ordered in time
        for die in d["marks"]:
            for marks in die:
                assert marks == sorted(marks)


# Configurations where the critical path's owner ties (found by a search, not chosen by hand): bsp,
# two dies end last together; ubep, two AIVs of the last die do. Each tied candidate has its own
# phase split, so the breakdown tells which one the rule took.
TIES = {
    "bsp": {"ranks": 4, "batch": 8, "topk": 1, "hidden": 256, "aivs": 4, "protocol": "bsp",
            "sync": "sw", "schedule": "balanced", "seed": 829},
    "ubep": {"ranks": 4, "batch": 3, "topk": 1, "hidden": 256, "aivs": 3, "cumsum_aivs": 1,
             "protocol": "ubep", "sync": "sw", "schedule": "homogenized", "seed": 555},
}


@pytest.mark.parametrize("protocol", TIES)
def test_ties_for_the_critical_path_go_to_the_lowest_index(protocol):
    """The phase split is the lowest-numbered of the last dies' (and, under ubep, of its
    AIVs ending last): the twin's explicit rule, which the kernel must follow on a tie."""
    cfg = make_config(TIES[protocol], 48)
    kernel = model.simulate(cfg, PROFILES["cm384"], timeline=True)
    ends = kernel["timeline"].group_by("die", "aiv").agg(pl.col("end_us").max())
    last = ends.filter(pl.col("end_us") == ends["end_us"].max())
    tied = last["die"].n_unique() if protocol == "bsp" else last.height
    assert tied > 1                          # the configuration does tie
    twin = reference.simulate(cfg, PROFILES["cm384"])
    for phase in ("init", "send", "sync", "cumsum", "reorder"):
        assert kernel[f"phase_{phase}_us"] == twin[f"phase_{phase}_us"], phase


def test_kernel_and_twin_check_the_same_bound(configs, twins):
    """The invariants' latency bound, which no result column shows, is the same in both."""
    for prof in PROFILES:
        rows = [i for i, (_, p) in enumerate(configs) if p == prof][::4]
        dicts = [configs[i][0].as_dict() for i in rows]
        cols = {k: np.asarray([d[k] for d in dicts]) for k in dicts[0]}
        params, costs, chances, cdf, trace = model.prepare(cols, PROFILES[prof])
        out = np.zeros((len(rows), model.k.N_OUT))
        model.k._simulate_batch(params, costs, chances, cdf, trace, out)
        assert out[:, model.k.O_BOUND].tolist() == \
            [twins(i)["_detail"]["bound_cycles"] for i in rows]


def test_bad_invariant_is_reported(monkeypatch):
    """A kernel row that delivered fewer copies than it dispatched is an error, not a result."""
    cfg = make_config({"ranks": 4, "batch": 4, "topk": 2, "aivs": 4, "cumsum_aivs": 1}, 48)
    prof = PROFILES["cm384"]
    cols = {k: np.asarray([v]) for k, v in cfg.as_dict().items()}
    params, costs, chances, cdf, trace = model.prepare(cols, prof)
    out = np.zeros((1, model.k.N_OUT))
    model.k._simulate_batch(params, costs, chances, cdf, trace, out)
    out[0, model.k.O_DELIVERED] -= 1
    with pytest.raises(RuntimeError, match="invariant"):
        model.results_from_kernel(out, cols, costs, prof)


def test_timeline_marks_match_the_twin(configs, twins):
    """Every AIV's phase boundaries, not only the summary results, agree with the twin."""
    for i in range(0, len(configs), 16):
        cfg, prof = configs[i]
        twin = twins(i)["_detail"]["marks"]
        frame = model.simulate(cfg, PROFILES[prof], timeline=True)["timeline"]
        clock = PROFILES[prof].values["clock_ghz"] * 1000.0
        for (die, aiv), rows in frame.group_by(["die", "aiv"], maintain_order=True):
            kernel = [0.0] + rows["end_us"].to_list()
            assert kernel == pytest.approx([m / clock for m in twin[die][aiv]], abs=1e-9), \
                (cfg, prof, die, aiv)


def test_compiled_kernels_are_cached_outside_the_package():
    """Numba's default, __pycache__ beside the kernels, outlives `pip uninstall` in
    site-packages and then shadows an editable install of the package."""
    from pathlib import Path

    from ubepsim.kernels import dispatch
    cache = Path(dispatch._simulate_batch._cache._cache_path)
    package = Path(dispatch.__file__).resolve().parent.parent
    assert package not in cache.resolve().parents
