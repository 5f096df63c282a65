"""cumsum_cores = "tuned", UBEP's default: the size `ubepsim tune` picks for a configuration's own
workload (ubepsim.model.groups), computed once per workload, recorded with cumsum_tuned, in
grids, `ubepsim run` and the Python API alike; bad values refused before any work."""

from __future__ import annotations

import json

import numpy as np
import polars as pl
import pytest

from conftest import read_rows, run_cli, write_grid
from ubepsim import InputError, make_config, simulate, simulate_many
from ubepsim.paper import numbers
from ubepsim.fit.tune import resolved_row, tune
from ubepsim.model import groups
from ubepsim.sweep import engine
from ubepsim.sweep.grid import load_grid
from ubepsim.model.params import PARAM_BY_NAME, TUNED_COLUMN
from ubepsim.model.profile import load_profile

# cores 8: sizes 1-7
SMALL = {"ranks": 8, "batch": 4, "topk": 2, "cores": 8}
ALLOWED = 'an integer from 1 to cores - 1, or "tuned"'


@pytest.fixture(autouse=True)
def fresh_cache():
    """Each test tunes from an empty cache (and leaves none to the next)."""
    groups.clear_cache()
    yield
    groups.clear_cache()


@pytest.fixture
def counted(monkeypatch):
    """The workloads group_latencies simulates, one entry per configuration tuned."""
    seen = []
    real = groups.group_latencies

    def counting(cols, sizes, *args, **kwargs):
        seen.extend(zip(np.asarray(cols["ranks"]).tolist(), np.asarray(cols["seed"]).tolist()))
        return real(cols, sizes, *args, **kwargs)

    monkeypatch.setattr(groups, "group_latencies", counting)
    return seen


@pytest.mark.parametrize("values", [
    {}, {"seed": 3, "batch": 32}, {"op": "layer", "expert_fixed_us": 2.0},
    {"sync": "sw", "schedule": "balanced", "routing": "hot", "hot_experts": 2}])
def test_tuned_is_the_first_least_latency_over_every_size(values):
    """The tuned row ran the size an explicit loop over 1..cores-1 finds best (the smaller on
    a tie), and its results are that size's."""
    config = {**SMALL, **values}
    loop = [simulate({**config, "cumsum_cores": c}) for c in range(1, SMALL["cores"])]
    latency = [r["latency_us"] for r in loop]
    best = int(np.argmin(latency)) + 1
    row = simulate(config)
    assert row["cumsum_cores"] == best and row[TUNED_COLUMN] is True
    assert row["latency_us"] == latency[best - 1]
    explicit = loop[best - 1]
    assert {k: v for k, v in row.items() if k not in ("config_id", TUNED_COLUMN)} == \
        {k: v for k, v in explicit.items() if k not in ("config_id", TUNED_COLUMN)}
    assert explicit[TUNED_COLUMN] is False


def test_tuned_is_what_tune_picks_for_the_workload_at_its_seed():
    """One code path: `tune` of the row's own workload and seed picks the size the row ran."""
    profile = load_profile()
    for seed in (0, 5):
        config = {**SMALL, "batch": 16, "seed": seed}
        table = tune([resolved_row(config, profile.cores)], [seed], profile).table
        assert simulate(config, profile)["cumsum_cores"] == table["best_cumsum_cores"][0]


def test_the_sizes_tried_are_figure_14s_or_below_cores():
    assert groups.MOST_GROUPS == numbers.FIG14_GROUPS[-1] and numbers.FIG14_GROUPS[0] == 1
    assert groups.max_groups(48) == 16 and groups.max_groups(8) == 7 and groups.max_groups(2) == 1
    assert groups.max_groups(np.array([3, 48])).tolist() == [2, 16]
    row = simulate({"ranks": 4, "batch": 4, "topk": 2, "cores": 2})   # one size to try
    assert row["cumsum_cores"] == 1 and row[TUNED_COLUMN]


def test_the_cache_tunes_each_workload_once(counted):
    profile = load_profile()
    a, b = {**SMALL, "seed": 1}, {**SMALL, "seed": 2}
    frame = simulate_many([a, b, a, {**a, "cumsum_cores": 3}, {**a, "protocol": "bsp"}],
                          profile)
    assert sorted(counted) == [(8, 1), (8, 2)]       # a once, b once; neither 3 nor bsp
    assert frame[TUNED_COLUMN].to_list() == [True, True, True, False, False]
    assert frame["cumsum_cores"][0] == frame["cumsum_cores"][2]
    again = simulate_many([b, a], profile)
    simulate(a, profile)
    assert len(counted) == 2                          # kept
    assert again.equals(frame[[1, 0]])
    # the key holds every parameter but cumsum_cores: another hidden size is another workload
    simulate({**a, "hidden": 512}, profile)
    assert len(counted) == 3
    # and the profile: the same workload on another fabric is tuned again
    simulate(a, load_profile("cm384_pod"))
    assert len(counted) == 4
    groups.clear_cache()
    simulate(a, profile)
    assert len(counted) == 5


def test_a_sweep_tunes_each_workload_once_whatever_its_threads_and_batches(tmp_path, counted):
    """The same grid and seeds give the same rows on 1 thread in batches of 3 (parts of 5) as
    on 2 threads in one batch, each tuned row's workload tuned once per run."""
    grid = load_grid(write_grid(tmp_path, """
        [sweep]
        name = "tuned"
        seeds = [0, 1, 2]
        [grid]
        ranks = [4, 8]
        batch = [4, 16]
        topk = 2
        cores = 8
        protocol = ["bsp", "ubep"]
        cumsum_cores = ["tuned", 2]
        op = ["dispatch", "combine", "layer"]
        """))
    one = engine.run_sweep(grid, tmp_path / "one", threads=1, batch_rows=3, part_rows=5)
    # the ubep dispatches and layers at "tuned": 2 ranks x 2 batch x 2 ops x 3 seeds, each its
    # own workload, tuned once
    assert read_rows(tmp_path / "one").filter(pl.col(TUNED_COLUMN)).height == 24
    assert len(counted) == 24
    groups.clear_cache()
    counted.clear()
    two = engine.run_sweep(grid, tmp_path / "two", threads=2)
    assert len(counted) == 24 and one.simulated == two.simulated == grid.size
    a, b = read_rows(tmp_path / "one"), read_rows(tmp_path / "two")
    assert a.equals(b)
    # a tuned row and its explicit twin: one simulation, two config_ids
    tuned = a.filter(pl.col(TUNED_COLUMN))
    assert tuned["cumsum_cores"].min() >= 1 and tuned["cumsum_cores"].max() <= 7
    assert a.filter(pl.col("protocol") == "bsp")[TUNED_COLUMN].not_().all()
    assert a.filter(pl.col("protocol") == "bsp")["cumsum_cores"].unique().to_list() == [1]


def test_config_id_hashes_tuned_not_the_size_and_keeps_every_other_id():
    """A tuned configuration's id is its own (not an explicit size's, which may coincide);
    explicit sizes and configurations that do not read the group keep the ids they had when
    the default was 1 (values of ubepsim 0.10.0)."""
    assert make_config({"ranks": 16, "protocol": "bsp"}, 48).config_id == 5850844709990984816
    assert make_config({"ranks": 16, "protocol": "bsp", "op": "layer"}, 48).config_id == \
        9117604513952640917
    assert make_config({"ranks": 16, "cumsum_cores": 4}, 48).config_id == 5478721955996697934
    tuned = make_config({"ranks": 16}, 48)
    assert tuned.tuned and tuned.as_dict()["cumsum_cores"] == "tuned"
    assert tuned.config_id == make_config({"ranks": 16, "cumsum_cores": "tuned"}, 48).config_id
    row = simulate({**SMALL})
    assert row["config_id"] == make_config(SMALL, 48).config_id
    assert row["config_id"] != make_config({**SMALL, "cumsum_cores": row["cumsum_cores"]},
                                           48).config_id


def test_tuned_is_the_default_wherever_ubep_reads_the_group():
    assert PARAM_BY_NAME["cumsum_cores"].default == "tuned"
    for values, tuned in (({}, True), ({"op": "layer"}, True), ({"op": "combine"}, False),
                          ({"protocol": "bsp"}, False), ({"cumsum_cores": 2}, False)):
        config = make_config({**SMALL, **values}, 48)
        assert config.tuned is tuned, values
        if not tuned:
            assert config.cumsum_cores == values.get("cumsum_cores", 1)


@pytest.mark.parametrize("value, shown", [("fast", "'fast'"), (0, "0"), (-3, "-3"),
                                          (2.5, "2.5"), (True, "true"), (4096, "4096")])
def test_a_bad_group_is_refused_with_what_is_allowed(value, shown):
    with pytest.raises(InputError) as e:
        make_config({**SMALL, "cumsum_cores": value}, 48)
    assert e.value.key == "cumsum_cores"
    assert str(e.value) == f"cumsum_cores: {shown} is not allowed; give {ALLOWED}"


def test_a_bad_group_stops_run_and_sweep_before_any_work(tmp_path):
    for value in ("fast", "0", "8"):
        code, out, err = run_cli("run", "--ranks", "8", "--cores", "8", "--cumsum-cores", value)
        assert code == 2 and out == "", (value, out)
        assert "cumsum_cores (--cumsum-cores): " in err and ALLOWED in err, err
    path = write_grid(tmp_path, """
        [sweep]
        name = "bad"
        [grid]
        ranks = 8
        cumsum_cores = [2, "fast"]
        """)
    code, out, err = run_cli("sweep", path, "--out", tmp_path / "out")
    assert code == 2 and not (tmp_path / "out").exists()
    assert f"grid.cumsum_cores: 'fast' is not allowed; give {ALLOWED}" in err


def test_run_reports_the_group_it_tuned():
    code, out, err = run_cli("run", "--protocol", "ubep")
    assert code == 0, err
    line = out.splitlines()[0]
    group = int(line.split("cumsum_cores=")[1].split()[0])
    assert f"cumsum_cores={group} (tuned)" in line and 1 <= group <= 16
    code, out, err = run_cli("run", "--protocol", "ubep", "--json")
    row = json.loads(out)
    assert row["cumsum_cores"] == group and row[TUNED_COLUMN] is True
    code, out, err = run_cli("run", "--cumsum-cores", "3", "--ranks", "16")
    assert "cumsum_cores=3 " in out and "(tuned)" not in out
    # given under bsp: not read, recorded as 1, said so
    code, out, err = run_cli("run", "--protocol", "bsp", "--ranks", "16", "--cumsum-cores",
                             "tuned", "--json")
    assert code == 0 and "recorded as 1" in err
    assert json.loads(out)["cumsum_cores"] == 1 and json.loads(out)[TUNED_COLUMN] is False
