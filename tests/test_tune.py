"""`ubepsim tune`: the best CalCumSum group size per workload, its neighbours, Appendix A's
prediction, the lookup table files, and bad input."""

from __future__ import annotations

import json
import math
import re
import tomllib
from pathlib import Path

import polars as pl
import pyarrow.parquet as pq
import pytest

from conftest import run_cli, write_grid
from ubepsim.model import api
from ubepsim.model.params import make_config
from ubepsim.model.profile import load_profile

SMALL = ("--ranks", "4,8", "--batch", "4,32", "--topk", "2", "--cores", "8",
         "--max-cumsum-cores", "4")
KEYS = {"ranks", "batch", "experts", "topk", "best_cumsum_cores", "latency_us",
        "analytic_cumsum_cores"}


def tune_json(*args):
    code, out, err = run_cli("tune", *args, "--json")
    assert code == 0, err
    return json.loads(out)


def latency(**values) -> float:
    return api.simulate(make_config(values, 8), load_profile())["latency_us"]


def test_each_row_reports_the_best_group_size_and_its_neighbours():
    rows = tune_json(*SMALL)
    assert [(r["ranks"], r["batch"]) for r in rows] == [(4, 4), (4, 32), (8, 4), (8, 32)]
    for row in rows:
        assert KEYS <= set(row)
        lat = [latency(ranks=row["ranks"], batch=row["batch"], topk=2, cores=8, cumsum_cores=c)
               for c in range(1, 5)]
        best = row["best_cumsum_cores"]
        assert lat[best - 1] == min(lat) and lat.index(min(lat)) == best - 1  # first minimum
        assert row["latency_us"] == pytest.approx(lat[best - 1])
        below, above = row["latency_below_us"], row["latency_above_us"]
        assert below == (pytest.approx(lat[best - 2]) if best > 1 else None)
        assert above == (pytest.approx(lat[best]) if best < 4 else None)


def test_a_layer_is_tuned_on_its_round_trip():
    """--op layer: the best group size is the one of least layer latency (dispatch, the
    experts' time, combine), which a late dispatch on one die delays."""
    rows = tune_json("--op", "layer", "--expert-fixed-us", "2", "--ranks", "8", "--batch", "32",
                     "--topk", "2", "--cores", "8", "--max-cumsum-cores", "4")
    lat = [latency(ranks=8, batch=32, topk=2, cores=8, cumsum_cores=c, op="layer",
                   expert_fixed_us=2.0) for c in range(1, 5)]
    assert rows[0]["best_cumsum_cores"] == lat.index(min(lat)) + 1
    assert rows[0]["latency_us"] == pytest.approx(min(lat))
    code, out, err = run_cli("tune", "--op", "layer", "--ranks", "8", "--batch", "32",
                             "--topk", "2", "--cores", "8", "--max-cumsum-cores", "4")
    assert code == 0, err
    assert "latency_us: the layer's latency (its dispatch, experts and combine)" in out


def test_analytic_prediction_follows_appendix_a_with_a_fitted_ratio():
    rows = tune_json(*SMALL)
    ratio = rows[0]["beta_over_alpha"]
    x = [8 * r["experts"] / (r["topk"] * r["batch"]) for r in rows]
    # least squares on logarithms: the fitted ratio is the geometric mean of best / x
    logs = [math.log(r["best_cumsum_cores"]) - math.log(v) for r, v in zip(rows, x)]
    assert ratio == pytest.approx(math.exp(sum(logs) / len(logs)))
    for r, v in zip(rows, x):
        assert r["analytic_raw"] == pytest.approx(ratio * v)
        assert r["analytic_cumsum_cores"] == min(max(round(ratio * v), 1), 4)


def test_seeds_are_averaged_and_counted_where_they_agree():
    # a workload where one seed of the six has a best of its own (found by trying a few)
    seeds, sizes = range(6), range(1, 7)
    one = tune_json("--ranks", "32", "--batch", "16", "--topk", "2", "--cores", "48",
                    "--max-cumsum-cores", "6", "--seed", ",".join(map(str, seeds)))[0]
    lat = [[latency(ranks=32, batch=16, topk=2, cores=48, cumsum_cores=c, seed=s) for c in sizes]
           for s in seeds]
    mean = [sum(x[c] for x in lat) / len(lat) for c in range(len(sizes))]
    assert one["latency_us"] == pytest.approx(min(mean))
    best = one["best_cumsum_cores"] - 1
    assert one["best_seeds"] == sum(x.index(min(x)) == best for x in lat) < len(seeds)


def test_lookup_table_as_toml_and_parquet(tmp_path):
    rows = tune_json(*SMALL)
    toml_path, parquet_path = tmp_path / "cumsum.toml", tmp_path / "cumsum.parquet"
    for path in (toml_path, parquet_path):
        code, out, err = run_cli("tune", *SMALL, "--out", path)
        assert code == 0, err
        assert f"wrote {path}" in out and "beta/alpha" in out
    doc = tomllib.loads(toml_path.read_text())
    assert doc["tune"]["max_cumsum_cores"] == 4 and doc["tune"]["cores"] == 8
    assert [r["best_cumsum_cores"] for r in doc["row"]] == [r["best_cumsum_cores"] for r in rows]
    table = pl.read_parquet(parquet_path)
    assert table["best_cumsum_cores"].to_list() == [r["best_cumsum_cores"] for r in rows]
    meta = pq.read_metadata(parquet_path).metadata
    assert b"beta_over_alpha" in meta[b"ubepsim.tune"]
    assert not list(tmp_path.glob(".*"))      # no temporary file left
    # the hardware the rows ran on, resolved, in both forms (as a sweep's parts record it)
    assert doc["hardware"] == tomllib.loads(meta[b"ubepsim.profile"].decode())["hardware"]
    assert doc["hardware"] == tomllib.loads(load_profile().to_toml())["hardware"]


def test_a_grids_hardware_overrides_are_recorded(tmp_path):
    grid = write_grid(tmp_path, """\
        [sweep]
        name = "t"
        [grid]
        ranks = 8
        cores = 8
        [profile]
        latency_ns.two_hop = 9000.0
        """)
    out = tmp_path / "t.toml"
    assert run_cli("tune", "--grid", grid, "--max-cumsum-cores", "2", "--out", out)[0] == 0
    doc = tomllib.loads(out.read_text())
    assert doc["tune"]["profile"] == "cm384" and doc["hardware"]["latency_ns"]["two_hop"] == 9000


def test_a_grid_file_gives_the_same_rows(tmp_path):
    grid = write_grid(tmp_path, """\
        [sweep]
        name = "t"
        [grid]
        ranks = [4, 8]
        batch = [4, 32]
        topk = 2
        cores = 8
        cumsum_cores = [1, 2]
        """)
    from_grid = tune_json("--grid", grid, "--max-cumsum-cores", "4")
    assert from_grid == tune_json(*SMALL)
    # --profile replaces the grid's base profile, as in `ubepsim sweep`
    hw = tmp_path / "slow.toml"
    hw.write_text("takes = { cm384 = \"*\" }\n[hardware]\negress_gbps = 10.0\ningress_gbps = 10.0\n")
    slow = tune_json("--grid", grid, "--max-cumsum-cores", "4", "--profile", hw)
    assert slow == tune_json(*SMALL, "--profile", hw) != from_grid


@pytest.mark.parametrize("args, words", [
    (("--ranks", "8", "--cores", "8", "--max-cumsum-cores", "8"), ["--max-cumsum-cores", "below"]),
    (("--ranks", "8", "--max-cumsum-cores", "0"), ["--max-cumsum-cores"]),
    (("--ranks", "8", "--batch", "4,x"), ["batch", "'x'"]),
    (("--ranks", "8", "--batch", "4,,8"), ["batch", "comma"]),
    (("--ranks", "8", "--topk", "9"), ["topk", "exceeds"]),
    (("--ranks", "8", "--batch", "4,4"), ["batch", "twice"]),
    (("--ranks", "8", "--seed", "1,1"), ["seed", "twice"]),
    (("--ranks", "8", "--protocol", "bsp"), ["protocol", "ubep"]),
    (("--ranks", "8", "--op", "combine"), ["op (--op): tune sizes UBEP's CalCumSum group, "
                                           "which combine does not have", "dispatch or layer"]),
    (("--ranks", "8", "--cumsum-cores", "2"), ["cumsum_cores", "--max-cumsum-cores"]),
    (("--ranks", "8", "--out", "t.csv"), ["--out", ".toml"]),
    (("--ranks", "8", "--out", "missing/t.toml"), ["--out", "does not exist"]),
    (("--grid", "nowhere.toml"), ["nowhere.toml"]),
    (("--grid", "g.toml", "--ranks", "8"), ["--grid", "--ranks"]),
    (("--ranks", "8", "--workers", "0"), ["--workers"]),
    (("--ranks", "8", "--workers", "4096"), ["--workers", "must lie in [1, "]),
    (("--ranks", "8", "--seed", "0,-5"), ["seed", "below the minimum 0"]),
    (("--ranks", "8", "--seed", "99999999999999999999"), ["seed", "above the maximum"]),
    (("--ranks", "8", "--out", "/proc/t.toml"), ["--out", "cannot write in /proc"]),
    (("--grid", "bin.toml"), ["--grid", "bin.toml is not a text file"]),
    (("--grid", ""), ["--grid: is empty; give a grid file"]),
])
def test_bad_input_exits_2_with_one_message(tmp_path, monkeypatch, args, words):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "g.toml").write_text('[sweep]\nname = "g"\n[grid]\nranks = 8\n')
    (tmp_path / "bin.toml").write_bytes(bytes(range(128, 256)))
    code, out, err = run_cli("tune", *args)
    assert code == 2
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error:"), err
    for w in words:
        assert w in lines[0]
    assert not out and not list(tmp_path.glob("t.*"))


def test_help_lists_the_flags_tune_takes_with_their_true_defaults():
    code, out, _ = run_cli("tune", "--help")
    assert code == 0 and "--max-cumsum-cores" in out
    assert "--protocol" not in out and "--cumsum-cores" not in out  # tune sets both itself
    assert re.search(r"--seed INT +Seed of the counter-based routing generator\.\s+\(default: 0\)",
                     out)


def test_default_largest_group_fits_a_profile_with_few_cores(tmp_path):
    """Without --max-cumsum-cores, a 6-AIV profile tries sizes 1-5 (cores - 1) rather than being
    refused for a flag the user never gave; given explicitly, 6 is still refused."""
    p6 = tmp_path / "p6.toml"
    p6.write_text("takes = { cm384 = \"*\" }\n[hardware]\ncores = 6\n")
    rows = tune_json("--ranks", "16", "--batch", "8", "--profile", p6)
    assert [r["best_cumsum_cores"] in range(1, 6) for r in rows] == [True]
    code, out, err = run_cli("tune", "--ranks", "16", "--batch", "8", "--profile", p6,
                             "--max-cumsum-cores", "6")
    assert code == 2 and "--max-cumsum-cores: 6 must be below cores (6)" in err
    code, out, err = run_cli("tune", "--ranks", "16", "--batch", "8", "--profile", p6)
    assert code == 0 and "group sizes 1-5" in out
    # the 48-AIV default profile keeps Figure 14's 16
    code, out, err = run_cli("tune", "--ranks", "8", "--batch", "4", "--topk", "2")
    assert code == 0 and "group sizes 1-16" in out, err
    code, out, _ = run_cli("tune", "--help")
    assert "16, or one below the workloads' cores if fewer" in " ".join(out.split())


def test_the_default_group_size_is_what_tune_picks():
    """docs/tune.md: the default cumsum_cores is "tuned", the size this command picks
    for the configuration's workload at its seed, so that `ubepsim run` starts from a tuned UBEP
    (tests/test_tuned.py holds the two equal)."""
    from ubepsim.model.params import PARAM_BY_NAME
    doc = " ".join((Path(__file__).resolve().parent.parent / "docs" / "tune.md")
                   .read_text().split())
    assert PARAM_BY_NAME["cumsum_cores"].default == "tuned"
    assert 'The default `cumsum_cores = "tuned"` runs each UBEP dispatch or layer at the size ' \
           'this command picks' in doc


def test_ubep_on_a_fabric_that_refuses_sp_is_tuned_with_dc():
    """h800's fabric refuses sp: workloads that name no sync take dc there, as `ubepsim run`
    does, and the best size's latency is that configuration's."""
    (row,) = tune_json("--profile", "h800", "--ranks", "8", "--batch", "4", "--topk", "2",
                       "--max-cumsum-cores", "2")
    config = {"ranks": 8, "batch": 4, "topk": 2, "cumsum_cores": row["best_cumsum_cores"]}
    h800 = load_profile("h800")
    assert row["latency_us"] == pytest.approx(api.simulate(
        make_config({**config, "sync": "dc"}, h800.cores), h800)["latency_us"], rel=1e-9)


def test_v2s_formula_as_published():
    """DeepEP V2's get_theoretical_num_sms by hand, one 8-GPU node (no RDMA): the NVLink writes
    bound, 160 / (1 - 1/8) GB/s over 50 GB/s an SM = 3.66 SMs, x1.25 = 4.57, up to 5, even: 6;
    capped by the device's SMs, at least 4."""
    from ubepsim.fit.tune import v2_sms
    assert v2_sms(256, 8, 8, 8, 50.0, 160.0, 132) == 6
    assert v2_sms(256, 8, 8, 8, 50.0, 160.0, 4) == 4
    assert v2_sms(256, 8, 8, 8, 50.0, 1.0, 132) == 4


def test_sms_finds_the_fewest_within_five_percent():
    code, out, err = run_cli("tune", "--sms", "--profile", "h800", "--ranks", "16", "--batch",
                             "16", "--experts", "32", "--max-sms", "12", "--json")
    assert code == 0, err
    (row,) = json.loads(out)
    assert row["best_sms"] in range(2, 13, 2) and row["fewest_sms"] <= row["best_sms"]
    assert row["fewest_latency_us"] <= 1.05 * row["latency_us"]
    assert row["v2_sms"] >= 4 and row["v2_sms"] % 2 == 0
    code, _, err = run_cli("tune", "--sms", "--profile", "h800", "--ranks", "16", "--cores", "9")
    assert code == 2 and "--cores" in err and "--sms" in err


def test_sms_from_a_grid_into_a_lookup_table(tmp_path):
    """tune --sms takes its workloads from a grid of deepep_ll points (each op a row, its seeds
    averaged) and writes the table as TOML or Parquet; the same workloads from the flags give
    the same SMs. A grid of another protocol is refused before any work."""
    grid = write_grid(tmp_path, """
        [sweep]
        name = "sms"
        profile = "h800"
        seeds = [0, 1]
        [grid]
        protocol = "deepep_ll"
        ranks = 16
        batch = 16
        experts = 32
        op = ["dispatch", "combine"]
        """)
    code, out, err = run_cli("tune", "--sms", "--grid", grid, "--max-sms", "8", "--out",
                             tmp_path / "sms.toml", "--json")
    assert code == 0, err
    rows = json.loads(out)
    assert [r["op"] for r in rows] == ["dispatch", "combine"]
    written = tomllib.loads((tmp_path / "sms.toml").read_text())
    assert written["tune"]["max_sms"] == 8 and written["tune"]["seeds"] == [0, 1]
    assert written["tune"]["protocol"] == "deepep_ll" and "hardware" in written
    assert [{k: r[k] for k in ("op", "best_sms", "fewest_sms", "v2_sms")} for r in rows] == \
        [{k: r[k] for k in ("op", "best_sms", "fewest_sms", "v2_sms")} for r in written["row"]]
    flags = tune_json("--sms", "--profile", "h800", "--ranks", "16", "--batch", "16",
                      "--experts", "32", "--op", "combine", "--seed", "0,1", "--max-sms", "8")
    assert flags[0]["best_sms"] == rows[1]["best_sms"]
    assert flags[0]["latency_us"] == pytest.approx(rows[1]["latency_us"])
    code, _, err = run_cli("tune", "--sms", "--grid", grid, "--max-sms", "8", "--out",
                           tmp_path / "sms.parquet")
    assert code == 0, err
    assert pl.read_parquet(tmp_path / "sms.parquet")["fewest_sms"].to_list() == \
        [r["fewest_sms"] for r in rows]
    other = write_grid(tmp_path, "[sweep]\nname = \"x\"\nprofile = \"h800\"\n[grid]\nranks = 16\n"
                       "protocol = [\"ubep\", \"deepep_ll\"]\nsync = \"dc\"\n", "other.toml")
    code, _, err = run_cli("tune", "--sms", "--grid", other, "--out", tmp_path / "no.toml")
    assert code == 2 and "protocol must be deepep_ll" in err
    assert not (tmp_path / "no.toml").exists()
