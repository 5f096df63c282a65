"""Parameters only one protocol or routing reads (params.GATED): elsewhere the model does not
read them, so a configuration records them at their defaults and a grid simulates the points
that differ only there once."""

from __future__ import annotations

import json

import numpy as np
import polars as pl

from conftest import run_cli, write_grid
from ubepsim.kernels import dispatch, layout
from ubepsim.sweep import kernel_io, model
from ubepsim.sweep.grid import load_grid
from ubepsim.sweep.params import GATED, PARAM_BY_NAME, make_config
from ubepsim.sweep.profile import load_profile

SMALL = {"ranks": 8, "batch": 8, "topk": 2, "aivs": 8}
CUMSUM = PARAM_BY_NAME["cumsum_aivs"].default


def kernel_row(cfg, **poke):
    """The kernel's output row for cfg, with params columns overwritten after canonicalization:
    what the kernel itself reads, bypassing the recording at defaults."""
    params, costs, chances, cdf, trace = kernel_io.prepare(cfg.columns(), load_profile())
    for col, value in poke.items():
        params[0, getattr(layout, col)] = value
    out = np.zeros((1, layout.N_OUT))
    dispatch.simulate_batch(params, costs, chances, cdf, trace, out)
    return out[0]


def test_bsp_never_reads_cumsum_aivs_and_only_weighted_routing_has_a_popularity_table():
    bsp = make_config({**SMALL, "protocol": "bsp"}, 8)
    base = kernel_row(bsp)
    for c in (1, 2, 7):
        assert np.array_equal(kernel_row(bsp, P_CUMSUM=c), base)
    ubep = make_config({**SMALL, "protocol": "ubep", "cumsum_aivs": 1}, 8)
    assert not np.array_equal(kernel_row(ubep, P_CUMSUM=4), kernel_row(ubep))
    # the routing parameters reach the kernel through the popularity table, which only zipf and
    # hot routing have, and the workload key, which hashes the recorded values
    for routing in ("uniform", "zipf", "hot"):
        cfg = make_config({**SMALL, "routing": routing, "hot_experts": 2}, 8)
        params = kernel_io.prepare(cfg.columns(), load_profile())[0]
        assert (params[0, layout.P_CDF_LEN] > 0) == (routing != "uniform")
    zipf = make_config({**SMALL, "routing": "zipf", "zipf_s": 3.0}, 8)
    assert not np.array_equal(kernel_row(zipf), kernel_row(make_config(SMALL, 8)))


def test_an_unread_parameter_is_recorded_at_its_default():
    for name, (gate, reader) in GATED.items():
        other = next(m for m in type(reader) if m != reader)
        default = PARAM_BY_NAME[name].default
        value = default + 1 if name != "hot_share" else 0.9
        off = make_config({**SMALL, gate: other.name, name: value}, 8)
        assert getattr(off, name) == default
        assert off.config_id == make_config({**SMALL, gate: other.name}, 8).config_id
        on = make_config({**SMALL, gate: reader.name, name: value,
                          **({"experts": 16, "topk": 2} if gate == "routing" else {})}, 8)
        assert getattr(on, name) == value


def test_a_frame_of_points_is_recorded_with_unread_parameters_at_their_defaults():
    """A frame enters the model through simulate_many, which makes each row a configuration
    (simulate_table, behind it, takes configurations as a grid or simulate_many makes them)."""
    profile = load_profile()
    raw = make_config({**SMALL, "protocol": "bsp"}, 8).as_dict()
    points = pl.DataFrame([{**raw, "cumsum_aivs": c, "zipf_s": z}
                           for c in (1, 5) for z in (0.5, 2.0)])
    rows = model.simulate_many(points, profile)
    assert rows["cumsum_aivs"].to_list() == [CUMSUM] * 4
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
        cumsum_aivs = [1, 2, 4]
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
        cumsum_aivs = {[CUMSUM] * 3 + [1] * 3 + [2] * 3 + [4] * 3}
        routing = {["uniform", "zipf", "zipf"] * 4}
        zipf_s = {[1.0, 0.5, 1.5] * 4}
        """, "listed.toml"))
    assert crossed.points.equals(listed.points)
    assert crossed.fingerprint == listed.fingerprint
    code, out, err = run_cli("sweep", tmp_path / "crossed.toml", "--dry-run")
    assert code == 0, err
    assert "24 points" in out and "12 distinct configurations" in out


def test_the_run_command_says_when_a_flag_is_not_read(tmp_path):
    args = ("run", "--ranks", 8, "--batch", 8, "--topk", 2, "--json", "--protocol", "bsp")
    code, out, err = run_cli(*args, "--cumsum-aivs", 5)
    assert code == 0, err
    assert "--cumsum-aivs is not read under --protocol bsp" in err
    row = json.loads(out)
    assert row["cumsum_aivs"] == CUMSUM
    code, plain, err = run_cli(*args)
    assert err == "" and json.loads(plain) == row
