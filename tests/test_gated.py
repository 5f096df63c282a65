"""Parameters only one protocol or routing reads (params.GATED): elsewhere the model does not
read them, so a configuration records them at their defaults and a grid simulates the points
that differ only there once."""

from __future__ import annotations

import itertools
import json

import numpy as np
import polars as pl

from conftest import run_cli, write_grid
from test_twin import write_trace
from ubepsim.kernels import layer, layout
from ubepsim.model import kernel_io, api
from ubepsim.sweep.grid import load_grid
from ubepsim.model.params import GATED, PARAM_BY_NAME, make_config
from ubepsim.model.profile import load_profile

# the kernel runs a stated group (kernel_row bypasses the model, which resolves "tuned")
SMALL = {"ranks": 8, "batch": 8, "topk": 2, "cores": 8, "cumsum_cores": 1}
CUMSUM = 1   # what a configuration that does not read cumsum_cores records


def recorded(name):
    """What a configuration that does not read parameter `name` records."""
    p = PARAM_BY_NAME[name]
    return p.default if p.unread is None else p.unread


def kernel_row(cfg, **poke):
    """The kernel's output row for cfg, with params (P_*) or cost (C_*) columns overwritten
    after canonicalization: what the kernel itself reads, bypassing the recording at
    defaults."""
    params, costs, chances, *shared = kernel_io.prepare(cfg.columns(), load_profile())
    for col, value in poke.items():
        (params if col.startswith("P_") else costs)[0, getattr(layout, col)] = value
    out = np.zeros((1, layout.N_OUT))
    layer.simulate_batch(params, costs, chances, *shared, out)
    return out[0]


def test_bsp_never_reads_cumsum_cores_and_only_weighted_routing_has_a_popularity_table():
    bsp = make_config({**SMALL, "protocol": "bsp"}, 8)
    base = kernel_row(bsp)
    for c in (1, 2, 7):
        assert np.array_equal(kernel_row(bsp, P_CUMSUM=c), base)
    ubep = make_config({**SMALL, "protocol": "ubep", "cumsum_cores": 1}, 8)
    assert not np.array_equal(kernel_row(ubep, P_CUMSUM=4), kernel_row(ubep))
    # the routing parameters reach the kernel through the popularity table, which only zipf and
    # hot routing have, and the workload key, which hashes the recorded values
    for routing in ("uniform", "zipf", "hot"):
        cfg = make_config({**SMALL, "routing": routing, "hot_experts": 2}, 8)
        params = kernel_io.prepare(cfg.columns(), load_profile())[0]
        assert (params[0, layout.P_CDF_LEN] > 0) == (routing != "uniform")
    zipf = make_config({**SMALL, "routing": "zipf", "zipf_s": 3.0}, 8)
    assert not np.array_equal(kernel_row(zipf), kernel_row(make_config(SMALL, 8)))


def test_an_op_reads_only_what_it_runs():
    """Combine has no CalCumSum group; bsp's combine (CANN's V1) has its own split and signals,
    so reads no sync or schedule; dispatch reads none of combine's costs, nor does combine the
    experts' time. Each is read where the gate says."""
    bsp = make_config({**SMALL, "op": "combine", "protocol": "bsp"}, 8)
    base = kernel_row(bsp)
    for poke in ({"P_SYNC": 0}, {"P_SYNC": 1}, {"P_SCHEDULE": 0}, {"P_SCHEDULE": 1},
                 {"P_CUMSUM": 5}):
        assert np.array_equal(kernel_row(bsp, **poke), base), poke
    ubep = make_config({**SMALL, "op": "combine", "protocol": "ubep"}, 8)
    assert np.array_equal(kernel_row(ubep, P_CUMSUM=5), kernel_row(ubep))
    assert not np.array_equal(kernel_row(ubep, P_SYNC=0), kernel_row(ubep))
    assert not np.array_equal(kernel_row(ubep, P_SCHEDULE=0), kernel_row(ubep))
    dispatch = make_config(SMALL, 8)
    assert np.array_equal(kernel_row(dispatch, C_RETURN_ISSUE=10**5, C_REDUCE_COPY=10**5,
                                     C_EXPERT=10**5), kernel_row(dispatch))
    assert np.array_equal(kernel_row(ubep, C_EXPERT=10**5, C_EXPERT_COPY=10**5),
                          kernel_row(ubep))
    assert not np.array_equal(kernel_row(ubep, C_REDUCE_COPY=10**5), kernel_row(ubep))
    both = make_config({**SMALL, "op": "layer"}, 8)
    late = kernel_row(both, C_EXPERT=10**5)
    assert late[layout.O_EXPERT] == 10**5 and late[layout.O_LATENCY] > kernel_row(both)[
        layout.O_LATENCY] + 10**5 - 1


def _other(name):
    """A value of parameter `name` other than its default."""
    p = PARAM_BY_NAME[name]
    if p.choices:
        return next(c for c in p.choices if c != p.default)
    given = {"hot_share": 0.9, "zero_experts": 0.25, "zero_token_share": 0.5,
             "batches": "1,2,3,4,5,6,7,8", "cumsum_cores": 2}
    return given[name] if name in given else p.default + 1


def test_an_unread_parameter_is_recorded_at_its_default(tmp_path):
    """Every combination of the values its gate reads: where none of the gate's clauses holds
    the parameter is recorded at its default (cumsum_cores at 1; one config_id with the
    default's), elsewhere it keeps its value."""
    trace = tmp_path / "trace.parquet"
    write_trace(trace, SMALL["ranks"], SMALL["batch"], SMALL["topk"], 16, 0)
    for name, gate in GATED.items():
        default = recorded(name)
        value = _other(name)
        combos = itertools.product(*(PARAM_BY_NAME[g].choices for g in gate.gates))
        reads = set()
        for combo in combos:
            at = dict(zip(gate.gates, combo)) | {"experts": 16, "topk": 2}
            if at.get("batch_spread") == "list" and name != "batches":
                at["batches"] = "2" + ",1" * (SMALL["ranks"] - 1)
            if at.get("routing") == "trace":
                at["trace"] = str(trace)
            read = any(all(at[g] in [r.name for r in readers] for g, readers in clause)
                       for clause in gate.clauses)
            reads.add(read)
            cfg = make_config({**SMALL, **at, name: value}, 8)
            shown = getattr(cfg, name)
            shown = shown.name if hasattr(shown, "name") else shown
            if read:
                assert shown == value, (name, at)
            else:
                assert shown == default, (name, at)
                assert cfg.config_id == make_config({**SMALL, **at}, 8).config_id
        assert reads == {True, False}, name


def test_a_frame_of_points_is_recorded_with_unread_parameters_at_their_defaults():
    """A frame enters the model through simulate_many, which makes each row a configuration
    (simulate_table, behind it, takes configurations as a grid or simulate_many makes them)."""
    profile = load_profile()
    raw = make_config({**SMALL, "protocol": "bsp"}, 8).as_dict()
    points = pl.DataFrame([{**raw, "cumsum_cores": c, "zipf_s": z}
                           for c in (1, 5) for z in (0.5, 2.0)])
    rows = api.simulate_many(points, profile)
    assert rows["cumsum_cores"].to_list() == [CUMSUM] * 4
    assert rows["zipf_s"].to_list() == [1.0] * 4
    assert rows["config_id"].n_unique() == 1
    assert rows["config_id"][0] == make_config({**SMALL, "protocol": "bsp"}, 8).config_id
    assert rows["latency_us"].n_unique() == 1


def test_a_grid_simulates_points_differing_only_in_unread_parameters_once(tmp_path):
    crossed = load_grid(write_grid(tmp_path, """
        [sweep]
        name = "g"
        [grid]
        ranks = 8
        protocol = ["bsp", "ubep"]
        cumsum_cores = [1, 2, 4]
        routing = ["uniform", "zipf"]
        zipf_s = [0.5, 1.5]
        """, "crossed.toml"))
    assert (crossed.product, crossed.filtered, crossed.size) == (24, 24, 12)
    # the first point of each configuration is kept, in expansion order: the same points and
    # fingerprint as a grid that lists them
    listed = load_grid(write_grid(tmp_path, f"""
        [sweep]
        name = "g"
        [grid]
        ranks = 8
        [[zip]]
        protocol = {["bsp"] * 3 + ["ubep"] * 9}
        cumsum_cores = {[CUMSUM] * 3 + [1] * 3 + [2] * 3 + [4] * 3}
        routing = {["uniform", "zipf", "zipf"] * 4}
        zipf_s = {[1.0, 0.5, 1.5] * 4}
        """, "listed.toml"))
    assert crossed.points.equals(listed.points)
    assert crossed.fingerprint == listed.fingerprint
    code, out, err = run_cli("sweep", tmp_path / "crossed.toml", "--dry-run")
    assert code == 0, err
    assert "24 points" in out and "12 distinct configurations" in out
    assert "the others differ only in cumsum_cores, zipf_s, which" in out
    assert crossed.unread == ("cumsum_cores", "zipf_s")


def test_a_grid_over_ops_simulates_what_each_op_reads_once(tmp_path):
    """A bsp combine reads no sync (CANN's V1 has its own signals), only a layer reads the
    expert times, a combine no dispatch dtype: the sweep says which parameters it merged."""
    path = write_grid(tmp_path, """
        [sweep]
        name = "ops"
        [grid]
        ranks = 8
        batch = 4
        op = ["dispatch", "combine", "layer"]
        protocol = "bsp"
        sync = ["sw", "sp"]
        dtype = ["bf16", "fp8"]
        expert_fixed_us = [0.0, 5.0]
        """, "ops.toml")
    grid = load_grid(path)
    # dispatch: 2 syncs x 2 dtypes; combine: 1; layer: 2 x 2 x 2 expert times
    assert (grid.product, grid.size) == (24, 4 + 1 + 8)
    assert grid.unread == ("dtype", "sync", "expert_fixed_us")
    code, out, err = run_cli("sweep", path, "--dry-run")
    assert code == 0, err
    assert "13 distinct configurations (the others differ only in dtype, sync, " \
           "expert_fixed_us, which their protocol, routing or op does not read)" in out


def test_the_run_command_says_when_a_flag_is_not_read(tmp_path):
    args = ("run", "--ranks", 8, "--batch", 8, "--topk", 2, "--json", "--protocol", "bsp")
    code, out, err = run_cli(*args, "--cumsum-cores", 5)
    assert code == 0, err
    assert "--cumsum-cores is not read under --protocol bsp" in err
    row = json.loads(out)
    assert row["cumsum_cores"] == CUMSUM
    code, plain, err = run_cli(*args)
    assert err == "" and json.loads(plain) == row
