"""The Python API: ubepsim.simulate and ubepsim.simulate_many, as a notebook user calls them."""

from __future__ import annotations

import polars as pl
import pytest

import ubepsim
from conftest import read_rows, run_cli
from ubepsim.sweep.grid import load_grid
from ubepsim.model.params import NAMES

CONFIGS = [
    {"ranks": 8, "batch": 4, "topk": 2},
    {"ranks": 8, "batch": 4, "topk": 2, "protocol": "bsp", "sync": "sw"},
    {"ranks": 16, "experts": 32, "batch": 8, "routing": "hot", "hot_experts": 2,
     "schedule": "balanced", "seed": 3},
    {"ranks": 4, "batch": 16, "topk": 1, "cores": 8, "cumsum_cores": 3, "sync": "dc"},
]


def test_simulate_takes_a_dict_with_the_rest_at_their_defaults():
    profile = ubepsim.load_profile()
    row = ubepsim.simulate({"ranks": 16, "batch": 8})
    assert row == ubepsim.simulate(ubepsim.make_config({"ranks": 16, "batch": 8}, profile.cores))
    assert row["experts"] == 16 and row["cores"] == profile.cores and row["topk"] == 8
    assert ubepsim.simulate({"ranks": 16, "batch": 8}, "cm384") == row
    with pytest.raises(ubepsim.InputError) as e:
        ubepsim.simulate({"ranks": 16, "topk": 17})
    assert e.value.key == "topk"


def test_a_dict_without_sync_takes_the_profiles_as_run_does():
    """sp where the fabric writes a block whole (cm384), dc where it does not (h800, which
    refuses sp): a preset's defaults run. A sync given is kept, and refused there as by run."""
    small = {"ranks": 8, "batch": 4, "topk": 2}
    assert ubepsim.simulate(small, "cm384")["sync"] == "sp"
    assert ubepsim.simulate(small, "h800")["sync"] == "dc"
    assert ubepsim.simulate_many([small, {**small, "sync": "sw"}], "h800")["sync"].to_list() \
        == ["dc", "sw"]
    assert ubepsim.die_frame(small, "h800").height == 8
    with pytest.raises(ubepsim.InputError) as e:
        ubepsim.simulate({**small, "sync": "sp"}, "h800")
    assert e.value.key == "sync" and "sp needs stores the fabric writes whole" in str(e.value)


def test_simulate_many_gives_the_rows_of_simulate_in_order():
    frame = ubepsim.simulate_many(CONFIGS)
    assert frame.height == len(CONFIGS)
    for got, config in zip(frame.iter_rows(named=True), CONFIGS):
        assert got == ubepsim.simulate(config)
    # Configs, dicts and a frame of parameters (a null is the default) give the same rows
    profile = ubepsim.load_profile()
    configs = [ubepsim.make_config(c, profile.cores) for c in CONFIGS]
    assert ubepsim.simulate_many(configs).equals(frame)
    assert ubepsim.simulate_many(pl.DataFrame(CONFIGS)).equals(frame)


def test_simulate_many_rows_are_a_sweeps_rows(tiny_grid, tmp_path):
    """The rows a sweep writes, column for column (enums are pl.Enum in memory; a dataset
    read back gives them as strings)."""
    out = tmp_path / "out"
    assert run_cli("sweep", tiny_grid, "--out", out, "-q")[0] == 0
    swept = read_rows(out)
    points = load_grid(tiny_grid).points.select(NAMES)
    mine = ubepsim.simulate_many(points.with_columns(pl.col(pl.Enum).cast(pl.String)))
    mine = mine.with_columns(pl.col(pl.Enum).cast(pl.String))
    assert mine.schema == swept.schema
    assert mine.sort("config_id").equals(swept)


def test_simulate_many_does_not_depend_on_threads():
    configs = [{**c, "seed": s} for c in CONFIGS for s in range(5)]
    assert ubepsim.simulate_many(configs, threads=1).equals(
        ubepsim.simulate_many(configs, threads=2))


def test_a_bad_configuration_is_named_by_its_place():
    with pytest.raises(ubepsim.InputError) as e:
        ubepsim.simulate_many([{"ranks": 8}, {"ranks": 8, "sync": "fast"}])
    assert e.value.key == "sync" and str(e.value).startswith("configs[1]: sync: 'fast'")
    with pytest.raises(ubepsim.InputError) as e:
        ubepsim.simulate_many(pl.DataFrame({"ranks": [8, 8], "batchsize": [4, 4]}))
    assert e.value.key == "batchsize" and "configs[0]" in str(e.value)
    with pytest.raises(ubepsim.InputError) as e:      # a pandas frame iterates its names
        ubepsim.simulate_many(["ranks", "batch"])
    assert str(e.value) == "configs[0]: expected a dict of parameters or a ubepsim.Config, " \
        "got str"


def test_no_configurations_give_an_empty_frame_with_every_column():
    frame = ubepsim.simulate_many([])
    assert frame.height == 0
    assert frame.columns == ubepsim.simulate_many(CONFIGS[:1]).columns


def test_only_the_ops_a_batch_runs_are_called(monkeypatch):
    """Each op's batch kernel compiles when first called: an empty batch calls none (it used
    to call all three, a minute's compile for no row), a dispatch-only batch dispatch's alone."""
    import numpy as np
    from ubepsim.kernels import layer
    from ubepsim.kernels.layout import DISPATCH, N_OUT
    from ubepsim.model.kernel_io import prepare
    from ubepsim.model.params import make_config
    from ubepsim.model.profile import load_profile
    called = []
    monkeypatch.setattr(layer, "BATCH", {op: (lambda *a, op=op: called.append(op))
                                         for op in layer.BATCH})
    assert ubepsim.simulate_many([]).height == 0 and called == []
    profile = load_profile()
    inputs = prepare(make_config(CONFIGS[1], profile.cores).columns(), profile)
    layer.simulate_batch(*inputs, np.zeros((1, N_OUT)))
    assert called == [DISPATCH]
