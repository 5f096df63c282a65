"""`ubepsim run` as a user calls it, and bad input: exit code 2, one message naming the key."""

from __future__ import annotations

import json
import sys
import time
from importlib import resources

import polars as pl
import pytest

from conftest import run_cli
from ubepsim.kernels.layout import MAX_TIME, PHASES
from ubepsim.model.params import NAMES, Op, Protocol
from ubepsim.model.profile import FIELDS, load_profile
from ubepsim.model.result_fields import RESULT_NAMES

SMALL = ("--ranks", 8, "--batch", 4, "--topk", 2, "--cores", 8, "--cumsum-cores", 1)


def test_run_prints_every_result():
    code, out, err = run_cli("run", *SMALL)
    assert code == 0, err
    for name in RESULT_NAMES:
        assert name in out


def test_run_json_has_every_parameter_and_result():
    code, out, _ = run_cli("run", *SMALL, "--json", "--protocol", "bsp")
    assert code == 0
    row = json.loads(out)
    assert set(NAMES) | set(RESULT_NAMES) | {"config_id", "profile"} <= set(row)
    assert row["protocol"] == "bsp" and row["ranks"] == 8 and row["experts"] == 8
    assert row["copies_total"] == 8 * 4 * 2


def test_run_is_deterministic():
    a = json.loads(run_cli("run", *SMALL, "--json", "--seed", "5")[1])
    b = json.loads(run_cli("run", *SMALL, "--json", "--seed", "5")[1])
    assert a == b


def test_bare_command_prints_the_help():
    code, out, err = run_cli()
    assert code == 0 and err == ""
    assert out == run_cli("--help")[1]
    assert out.startswith("Usage: ubepsim") and "\nCommands:\n" in out   # formatted, not one line


def test_a_command_module_that_fails_to_import_fails_every_command(monkeypatch):
    """Not a command missing from --help: a module that cannot be imported (blocked here, as a
    module missing from an install is) stops `ubepsim` with exit 3, naming it."""
    import ubepsim.cli
    monkeypatch.delattr(ubepsim.cli, "plot", raising=False)   # imported by an earlier run
    monkeypatch.setitem(sys.modules, "ubepsim.cli.plot", None)
    for args in (("--help",), ("run", "--help")):
        code, out, err = run_cli(*args)
        assert code == 3 and out == ""
        assert err.startswith("internal error: ModuleNotFoundError: ") and \
            "ubepsim.cli.plot" in err


def test_version_is_the_codes_the_one_datasets_record():
    """Not the install's metadata: an editable install keeps the version it was made at."""
    import ubepsim
    assert run_cli("--version") == (0, f"ubepsim, version {ubepsim.__version__}\n", "")


def test_timeline_has_a_row_per_die_core_and_phase(tmp_path):
    path = tmp_path / "tl.parquet"
    code, out, err = run_cli("run", *SMALL, "--json", "--timeline", path)
    assert code == 0, err
    row = json.loads(out)
    tl = pl.read_parquet(path)
    # ubep: 1 CalCumSum AIV with 3 phases, 7 token AIVs with 4, on each of 8 dies
    assert tl.height == 8 * (1 * 3 + 7 * 4)
    assert set(tl["role"]) == {"cumsum", "token"}
    assert (tl["end_us"] >= tl["start_us"]).all()
    assert tl["end_us"].max() == pytest.approx(row["latency_us"])
    code, _, _ = run_cli("run", *SMALL, "--protocol", "bsp", "--timeline", path)
    tl = pl.read_parquet(path)
    assert tl.height == 8 * 8 * 9 and set(tl["role"]) == {"bsp"}


def test_a_timeline_file_says_what_it_is_the_timeline_of(tmp_path):
    """Provenance, as sweep parts have it: the version, the configuration and the resolved
    profile, in the file's metadata."""
    import pyarrow.parquet as pq

    from ubepsim import __version__
    from ubepsim.model.profile import load_profile
    path, custom = tmp_path / "tl.parquet", tmp_path / "p.toml"
    custom.write_text("takes = { cm384 = \"*\" }\n[hardware]\ninit_cycles = 300\n")
    code, out, err = run_cli("run", *SMALL, "--json", "--profile", custom, "--timeline", path)
    assert code == 0, err
    meta = {k.decode(): v.decode() for k, v in pq.read_metadata(path).metadata.items()}
    assert meta["ubepsim.version"] == __version__
    config, row = json.loads(meta["ubepsim.config"]), json.loads(out)
    assert config == {n: row[n] for n in (*NAMES, "config_id", "cumsum_tuned")}
    (tmp_path / "back.toml").write_text(meta["ubepsim.profile"])
    assert load_profile(tmp_path / "back.toml").values == load_profile(custom).values
    assert load_profile(custom).values["init_cycles"] == 300


def test_timeline_phases_have_one_name_per_concept(tmp_path):
    """Sending count messages and polling the sources' counts are count_send and count_poll
    under both protocols (bsp's SendFlag & Count and flag verification, ubep's CalCumSum
    group), and each AIV's phases abut in the documented order."""
    phases = {}
    for protocol in ("bsp", "ubep"):
        path = tmp_path / f"{protocol}.parquet"
        code, _, err = run_cli("run", *SMALL, "--protocol", protocol, "--timeline", path)
        assert code == 0, err
        tl = pl.read_parquet(path)
        for (role,), rows in tl.group_by(["role"]):
            phases[role] = rows.filter((pl.col("die") == 0) & (pl.col("core") == rows["core"][0]))
        for (_, _), rows in tl.group_by(["die", "core"], maintain_order=True):
            assert (rows["start_us"][1:] == rows["end_us"][:-1]).all()
    assert phases["bsp"]["phase"].to_list() == ["init", "send", "syncall", "count_send",
                                                "count_poll", "syncall", "cumsum", "syncall",
                                                "reorder"]
    assert phases["cumsum"]["phase"].to_list() == ["init", "count_send", "count_poll"]
    assert phases["token"]["phase"].to_list() == ["init", "send", "offset_poll", "reorder"]


def test_combine_and_layer_timelines_have_the_documented_phases(tmp_path):
    """Combine's phases per protocol (CANN's V1 on every AIV; ubep's send, then reduce), and a
    layer's AIV: its dispatch role's, `expert`, then combine's; each AIV's phases abut and the
    last ends at the latency."""
    def phases(*args):
        path = tmp_path / "tl.parquet"
        code, out, err = run_cli("run", *SMALL, "--json", "--timeline", path, *args)
        assert code == 0, err
        tl = pl.read_parquet(path)
        for (_, _), rows in tl.group_by(["die", "core"], maintain_order=True):
            assert (rows["start_us"][1:] == rows["end_us"][:-1]).all()
        assert tl["end_us"].max() == pytest.approx(json.loads(out)["latency_us"])
        return {role: rows.filter((pl.col("die") == 0) & (pl.col("core") == rows["core"][0]))
                ["phase"].to_list() for (role,), rows in tl.group_by(["role"])}

    v1 = ["init", "send", "status_send", "status_poll", "syncall", "reduce"]
    assert phases("--op", "combine", "--protocol", "bsp") == {"bsp": v1}
    assert phases("--op", "combine") == {"token": ["init", "send", "reduce"]}
    assert phases("--op", "layer", "--protocol", "bsp")["bsp"] == [
        "init", "send", "syncall", "count_send", "count_poll", "syncall", "cumsum", "syncall",
        "reorder", "expert", *v1]
    assert phases("--op", "layer") == {
        "cumsum": ["init", "count_send", "count_poll", "expert", "init", "send", "reduce"],
        "token": ["init", "send", "offset_poll", "reorder", "expert", "init", "send", "reduce"]}


def _breakdown(out: str) -> dict[str, float]:
    """The parts of `ubepsim run`'s critical path, by column, and its latency."""
    block = out.split("part by part")[1].split("\n\n")[0]
    parts = {line.split()[0]: float(line.split()[1]) for line in block.splitlines()[1:]}
    parts["latency_us"] = float(block.split("= latency_us")[1].split()[0])
    return parts


@pytest.mark.parametrize("op", ["dispatch", "combine", "layer"])
@pytest.mark.parametrize("protocol", ["bsp", "ubep"])
def test_run_prints_a_breakdown_that_sums_to_the_latency(op, protocol):
    """As a new user types it: the parts are the op's phases (a layer's with its experts'
    time), each printed to the nanosecond, and they sum to the latency; a result the op does not
    give is named as 0, not printed as a value."""
    code, out, err = run_cli("run", "--op", op, "--ranks", "16", "--batch", "16", "--topk", "8",
                             "--protocol", protocol, "--expert-fixed-us", "3")
    assert code == 0, err
    parts = _breakdown(out)
    latency, total = parts.pop("latency_us"), parts.pop("sum")
    expected = [f"phase_{p.name}_us" for p in PHASES if Op[op] in p.ops]
    assert list(parts) == expected + (["expert_us"] if op == "layer" else [])
    assert total == pytest.approx(latency, abs=5e-4)
    assert sum(parts.values()) == pytest.approx(latency, abs=5e-4 * len(parts))
    if op == "combine":
        assert "0 in a combine" in out and "dispatch_us" in out.split("0 in a combine")[1]
    assert ("expert_fixed_us" in out.split("not read here")[1].splitlines()[0]) == \
        (op != "layer")


@pytest.mark.parametrize("args, key", [
    (("--op", "return"), "op (--op): 'return' is not allowed; choose one of dispatch, combine, "
                         "layer"),
    (("--op", "combine", "--combine-dtype", "fp8"), "combine_dtype (--combine-dtype): 'fp8'"),
    (("--op", "layer", "--expert-fixed-us", "-1"), "expert_fixed_us (--expert-fixed-us): -1.0 "
                                                   "is below the minimum 0"),
    (("--op", "layer", "--expert-ns-per-copy", "2e6"), "expert_ns_per_copy"),
    (("--op", "layer", "--expert-ns-per-copy", "nan"), "expert_ns_per_copy"),
    (("--protocol", "mpi"), "protocol"),
    (("--sync", "fast"), "sync"),
    (("--cumsum-cores", "8"), "cumsum_cores"),
    (("--topk", "9"), "topk"),
    (("--experts", "12"), "experts"),
    (("--batch", "0"), "batch"),
    (("--hidden", "-3"), "hidden"),
    (("--ranks", "many"), "ranks"),
    (("--routing", "trace", "--trace", "/no/such.parquet"), "trace"),
    (("--routing", "trace"), "trace"),
    (("--profile", "/no/such.toml"), "profile"),
    (("--profile", ""), "--profile: is empty; give a built-in profile (cm384, "),
    (("--routing", "zipf", "--zipf-s", "nan"), "zipf_s (--zipf-s): expected a finite number"),
    (("--routing", "hot", "--hot-share", "inf"), "hot_share (--hot-share): expected a finite"),
    (("--batch-spread", "cv", "--batch-cv", "-0.5"), "batch_cv (--batch-cv): -0.5 is below "
                                                     "the minimum 0"),
    (("--batch-spread", "zero", "--zero-token-share", "1"), "zero_token_share "
                                                           "(--zero-token-share): 1.0 leaves no "
                                                           "die with tokens"),
    (("--batch-spread", "list", "--batches", "4,4,4"), "batches (--batches): 3 entries; "
                                                       "batch_spread = list takes one per rank"),
    (("--batch-spread", "list", "--batches", "4,-1,4,4"), "batches (--batches): expected "
                                                          "integers of at least 0"),
    (("--batch-spread", "uneven"), "batch_spread (--batch-spread): 'uneven' is not allowed"),
    (("--timeline", ""), "--timeline"),
    (("--timeline", "t.csv"), "--timeline: 't.csv': expected a file name ending in .parquet"),
    (("--timeline", "/proc/t.parquet"), "--timeline: cannot write in /proc"),
])
def test_bad_input_exits_2_naming_the_parameter(args, key, tmp_path):
    code, out, err = run_cli("run", *SMALL, *args)
    assert code == 2
    assert out == ""
    assert err.startswith("error: ") and key in err
    assert len(err.strip().splitlines()) == 1


def test_a_routing_parameter_changes_only_the_routing_that_reads_it():
    def run(*args):
        return json.loads(run_cli("run", *SMALL, "--json", *args)[1])["latency_us"]
    base = run()
    assert run("--zipf-s", "2", "--hot-experts", "4", "--hot-share", "0.9") == base
    assert run("--routing", "zipf", "--zipf-s", "2") != run("--routing", "zipf")
    assert run("--routing", "hot", "--hot-share", "0.9") != run("--routing", "hot")


def test_bsp_takes_any_cumsum_cores_as_it_never_reads_it():
    def run(*args):
        code, out, err = run_cli("run", *SMALL, "--protocol", "bsp", "--cores", "4", "--json",
                                 *args)
        assert code == 0, err
        return json.loads(out)["latency_us"]
    assert run() == run("--cumsum-cores", "1") == run("--cumsum-cores", "40")


@pytest.mark.parametrize("args, note", [
    (("--op", "combine", "--protocol", "bsp", "--sync", "sw"),
     "note: --sync is not read under --op combine --protocol bsp (only where op = "
     "dispatch/layer and protocol = bsp/ubep, or protocol = ubep); recorded at its default, "
     "sp"),
    (("--op", "combine", "--dtype", "fp8"), "note: --dtype is not read under --op combine"),
    (("--expert-fixed-us", "5"), "note: --expert-fixed-us is not read under --op dispatch "
                                 "(only where op = layer); recorded at its default, 0.0"),
    (("--op", "dispatch", "--combine-dtype", "int8"), "note: --combine-dtype is not read"),
])
def test_a_parameter_the_op_does_not_read_is_noted_on_stderr(args, note):
    code, out, err = run_cli("run", *SMALL, "--json", *args)
    assert code == 0 and note in err and len(err.strip().splitlines()) == 1
    assert json.loads(out)  # the row is printed whole


@pytest.mark.parametrize("args", [
    ("--op", "layer", "--sync", "sw", "--schedule", "balanced", "--dtype", "fp8",
     "--combine-dtype", "int8", "--expert-fixed-us", "5", "--cumsum-cores", "3"),
    ("--op", "combine", "--sync", "tff", "--combine-dtype", "int8"),
    ("--op", "combine", "--protocol", "bsp", "--sync", "sp"),   # its default: nothing lost
])
def test_a_parameter_the_op_reads_is_not_noted(args):
    code, out, err = run_cli("run", *SMALL, "--json", *args)
    assert code == 0 and err == "", err


def test_unknown_flag_is_a_usage_error():
    code, _, err = run_cli("run", "--bogus", "1")
    assert code == 2 and "--bogus" in err
    for args in (("run", "--bogus", "1"), ("tune", "--workers", "x"), ("query",),
                 ("run", "extra")):
        code, _, err = run_cli(*args)
        lines = err.strip().splitlines()
        assert code == 2 and len(lines) == 1 and lines[0].startswith("error: "), err
        assert lines[0].endswith(f"(see `ubepsim {args[0]} --help`)")


def test_an_earlier_versions_names_are_refused_with_their_new_ones(tmp_path):
    # a flag, a grid's parameter, a profile key and a filter's name of 0.9.0, each refused before
    # any work with the name it has now; a name that never existed gets no such hint
    grid = tmp_path / "old.toml"
    grid.write_text("[sweep]\nname = \"old\"\n[grid]\nranks = 16\naivs = [4, 8]\n")
    filtered = tmp_path / "filtered.toml"
    filtered.write_text("[sweep]\nname = \"old\"\nfilter = \"cumsum_aivs > 1\"\n[grid]\n"
                        "ranks = 16\n")
    profile = tmp_path / "old_profile.toml"
    profile.write_text("takes = { cm384 = \"*\" }\n[hardware]\naiv_store_gbps = 20.0\n")
    for args, says in ((("run", "--cumsum-aivs", "2"), "--cumsum-aivs is now --cumsum-cores"),
                       (("sweep", grid, "--out", tmp_path / "out"), "grid.aivs: unknown "
                        "parameter (aivs is now cores, since 0.10.0)"),
                       (("run", "--profile", profile), "hardware.aiv_store_gbps: unknown "
                        "hardware key (aiv_store_gbps is now core_store_gbps"),
                       (("sweep", filtered, "--out", tmp_path / "out"),
                        "unknown name 'cumsum_aivs' (cumsum_aivs is now cumsum_cores")):
        code, _, err = run_cli(*args)
        assert code == 2 and says in err and len(err.strip().splitlines()) == 1, err
    assert not (tmp_path / "out").exists()
    code, _, err = run_cli("run", "--cumsum-aiv", "2")
    assert code == 2 and "is now" not in err


def test_profile_file_overrides_and_rejects_unknown_keys(tmp_path):
    good = tmp_path / "slow.toml"
    good.write_text("takes = { cm384 = \"*\" }\n[hardware]\negress_gbps = 20.0\ningress_gbps = 20.0\n")
    base = json.loads(run_cli("run", *SMALL, "--json")[1])
    slow = json.loads(run_cli("run", *SMALL, "--json", "--profile", good)[1])
    assert slow["latency_us"] > base["latency_us"]
    flat = tmp_path / "flat.toml"
    flat.write_text("cores = 8\n")
    code, _, err = run_cli("run", *SMALL, "--profile", flat)
    assert code == 2 and "unknown key(s) outside [hardware]: cores" in err
    bad = tmp_path / "bad.toml"
    bad.write_text("takes = { cm384 = \"*\" }\n[hardware]\negress_gpbs = 20.0\n")
    code, _, err = run_cli("run", *SMALL, "--profile", bad)
    assert code == 2 and f"{bad}: hardware.egress_gpbs: unknown hardware key" in err
    typed = tmp_path / "typed.toml"
    typed.write_text("takes = { cm384 = \"*\" }\n[hardware]\ncores = 'many'\n")
    code, _, err = run_cli("run", *SMALL, "--profile", typed)
    assert code == 2 and f"{typed}: hardware.cores: expected an integer" in err
    for text, found in (("", "no [hardware] table"), ("hardware = 3\n", "not a table")):
        typed.write_text(text)
        code, _, err = run_cli("run", *SMALL, "--profile", typed)
        assert code == 2 and f"--profile: {typed} has " in err and found in err, err
    # a file that sets some keys and names no profile for the others is refused, naming them:
    # it would inherit cm384's fitted costs without saying so
    typed.write_text("[hardware]\negress_gbps = 20.0\n")
    code, _, err = run_cli("run", *SMALL, "--profile", typed)
    assert code == 2 and "sets neither" in err and "core_store_gbps" in err and "[takes]" in err
    # one that takes every other key from cm384, and sets none: cm384's values, its own name
    typed.write_text("takes = { cm384 = \"*\" }\n[hardware]\n")
    same = json.loads(run_cli("run", *SMALL, "--json", "--profile", typed)[1])
    assert same.pop("profile") == str(typed)
    copy = tmp_path / "cm384.toml"      # a file is named by its path, never as a built-in
    copy.write_text("takes = { cm384 = \"*\" }\n[hardware]\n")
    assert json.loads(run_cli("run", *SMALL, "--json", "--profile", copy)[1])["profile"] == \
        str(copy)
    assert {k: v for k, v in base.items() if k != "profile"} == same


def test_profile_rejects_impossible_fabrics():
    from ubepsim.errors import InputError
    for overrides, key in (({"tier_sizes": [3]}, "tier_sizes"),
                           ({"tier_sizes": [16, 8]}, "tier_sizes"),
                           ({"flag_bytes": 512}, "flag_bytes"),
                           ({"latency_ns": {"four_hop": 1.0}}, "latency_ns"),
                           ({"clock_ghz": 0}, "clock_ghz"),
                           ({"clock_ghz": float("nan")}, "clock_ghz"),
                           ({"latency_ns": {"two_hop": float("nan")}}, "latency_ns.two_hop"),
                           ({"latency_ns": {"one_hop": float("inf")}}, "latency_ns.one_hop"),
                           ({"latency_ns": {"one_hop": 1e30}}, "latency_ns.one_hop")):
        with pytest.raises(InputError, match=key):
            load_profile(overrides=overrides)


def _good_trace_rows():
    """SMALL's routing: 8 ranks x 4 tokens x top-2, two distinct experts of 8 per token."""
    return [(r, t, k, (r + t + k) % 8) for r in range(8) for t in range(4) for k in range(2)]


def test_trace_routing_runs_from_a_file(tmp_path):
    path = tmp_path / "t.parquet"
    pl.DataFrame(_good_trace_rows(), schema=["rank", "token", "k", "expert"],
                 orient="row").write_parquet(path)
    code, out, err = run_cli("run", *SMALL, "--routing", "trace", "--trace", path, "--json")
    assert code == 0, err
    assert json.loads(out)["copies_total"] == 64
    dup = tmp_path / "dup.parquet"
    rows = [(r, t, k, 1) for r in range(8) for t in range(4) for k in range(2)]
    pl.DataFrame(rows, schema=["rank", "token", "k", "expert"], orient="row").write_parquet(dup)
    code, _, err = run_cli("run", *SMALL, "--routing", "trace", "--trace", dup)
    assert code == 2 and "distinct" in err
    for expert in ([0.5] * 64, [1] * 63 + [None], ["1"] * 64):
        bad = tmp_path / "bad.parquet"
        pl.DataFrame(rows, schema=["rank", "token", "k", "expert"], orient="row").with_columns(
            expert=pl.Series(expert)).write_parquet(bad)
        code, _, err = run_cli("run", *SMALL, "--routing", "trace", "--trace", bad)
        assert code == 2 and "column expert must hold integers without nulls" in err, err
        assert len(err.strip().splitlines()) == 1


def test_a_trace_carries_its_own_batches(tmp_path):
    """Rank 0 holds 8 tokens, rank 1 none, the rest 4 (mean 4 = batch): each die sends its own
    tokens' copies, and the trace's batches are the twin's too."""
    from ubepsim.reference.layer import simulate as twin
    from ubepsim.model.params import make_config
    from ubepsim.model.profile import load_profile
    tokens = [8, 0, 4, 4, 4, 4, 4, 4]
    rows = [(r, t, k, (r + t + k) % 8) for r in range(8) for t in range(tokens[r])
            for k in range(2)]
    path = tmp_path / "t.parquet"
    pl.DataFrame(rows, schema=["rank", "token", "k", "expert"], orient="row").write_parquet(path)
    code, out, err = run_cli("run", *SMALL, "--routing", "trace", "--trace", path, "--json")
    assert code == 0, err
    row = json.loads(out)
    assert row["copies_total"] == 64 and row["send_max_mean"] == 2.0
    cfg = make_config({"ranks": 8, "batch": 4, "topk": 2, "cores": 8, "cumsum_cores": 1,
                       "routing": "trace", "trace": str(path)}, 48)
    expected = twin(cfg, load_profile())
    assert {n: row[n] for n in expected if not n.startswith("_")} == \
        {n: v for n, v in expected.items() if not n.startswith("_")}
    gap = tmp_path / "gap.parquet"
    pl.DataFrame([(r, t + (r == 0), k, e) for r, t, k, e in rows],
                 schema=["rank", "token", "k", "expert"], orient="row").write_parquet(gap)
    code, _, err = run_cli("run", *SMALL, "--routing", "trace", "--trace", gap)
    assert code == 2 and "numbered from 0 without gaps" in err


@pytest.mark.parametrize("damage, message", [
    (lambda df: None, "cannot read"),                               # not Parquet at all
    (lambda df: df.drop("k"), "lacks column(s) k; a trace has rank, token, k, expert"),
    (lambda df: df.head(63), "has 63 rows; ranks x batch x topk = 64"),
    (lambda df: df.with_columns(expert=pl.col("expert") + 1),
     "column expert must lie in [0, 8)"),
    (lambda df: df.with_columns(rank=pl.col("rank").clip(0, 6)),
     "each (rank, token, k) must appear exactly once"),
])
def test_a_bad_trace_file_is_refused_saying_what_is_wrong(tmp_path, damage, message):
    path = tmp_path / "t.parquet"
    good = pl.DataFrame(_good_trace_rows(), schema=["rank", "token", "k", "expert"],
                        orient="row")
    bad = damage(good)
    if bad is None:
        path.write_bytes(b"not parquet")
    else:
        bad.write_parquet(path)
    code, out, err = run_cli("run", *SMALL, "--routing", "trace", "--trace", path)
    assert code == 2 and out == ""
    assert err.startswith("error: trace") and message in err, err
    assert len(err.strip().splitlines()) == 1
    good.write_parquet(path)   # the same file, mended, runs
    assert run_cli("run", *SMALL, "--routing", "trace", "--trace", path)[0] == 0


def test_a_trace_is_identified_by_its_content_not_its_name(tmp_path, monkeypatch):
    rows = _good_trace_rows()
    (tmp_path / "sub").mkdir()
    path = tmp_path / "sub" / "t.parquet"
    pl.DataFrame(rows, schema=["rank", "token", "k", "expert"], orient="row").write_parquet(path)
    (tmp_path / "copy.parquet").write_bytes(path.read_bytes())
    monkeypatch.chdir(tmp_path)

    def result(trace):
        code, out, err = run_cli("run", *SMALL, "--routing", "trace", "--trace", trace, "--json",
                                 "--sync", "sp")
        assert code == 0, err
        return {k: v for k, v in json.loads(out).items() if k != "trace"}
    same = [result(t) for t in ("sub/t.parquet", path, "sub/../sub/t.parquet", "copy.parquet")]
    assert all(r == same[0] for r in same)        # config_id included
    rows[0] = (0, 0, 0, 7)
    pl.DataFrame(rows, schema=["rank", "token", "k", "expert"], orient="row").write_parquet(path)
    assert result(path)["config_id"] != same[0]["config_id"]


def test_a_trace_rewritten_under_its_old_stamp_is_read_again(tmp_path):
    """The digest is cached per file stamp; a rewrite of the same size with its modification
    time set back (cp -p, rsync -t) still moves the change time."""
    import os

    from ubepsim.model.params import trace_digest

    path = tmp_path / "t.bin"
    path.write_bytes(b"a" * 64)
    before = trace_digest(str(path))
    stamp = path.stat()
    time.sleep(0.01)
    path.write_bytes(b"b" * 64)
    os.utime(path, ns=(stamp.st_atime_ns, stamp.st_mtime_ns))
    assert path.stat().st_size == stamp.st_size and path.stat().st_mtime_ns == stamp.st_mtime_ns
    assert trace_digest(str(path)) != before


def test_a_configuration_beyond_the_kernel_limits_is_refused_up_front():
    code, _, err = run_cli("run", "--ranks", 4096, "--batch", 4096, "--topk", 8)
    assert code == 2 and "batch" in err and "token copies" in err


SLOW = "takes = { cm384 = \"*\" }\n[hardware]\negress_gbps = 0.001\ningress_gbps = 0.001\ncore_store_gbps = 0.001\n"


def test_a_configuration_whose_times_could_pass_the_kernels_keys_is_refused(tmp_path):
    """Times are packed with an AIV into 64-bit keys, so they must stay below MAX_TIME
    (MAX_TIME): a profile thousands of times too slow makes a large configuration's bound
    reach it, while a small one still runs on it."""
    slow = tmp_path / "slow.toml"
    slow.write_text(SLOW)
    big = ("--ranks", 64, "--batch", 1024, "--topk", 8, "--hidden", 1 << 20)
    code, out, err = run_cli("run", *big, "--profile", slow)
    assert code == 2 and out == "" and "profile: at ranks = 64, batch = 1024" in err
    assert f"2^{MAX_TIME.bit_length() - 1} cycles" in err
    assert run_cli("run", *big)[0] == 0                     # the same on the built-in profile
    code, out, _ = run_cli("run", *SMALL, "--profile", slow, "--json")
    base = json.loads(run_cli("run", *SMALL, "--json")[1])["latency_us"]
    assert code == 0 and json.loads(out)["latency_us"] > 1000 * base


def test_the_documented_defaults_are_what_run_simulates():
    """docs/reference.md's default of every parameter is what `ubepsim run` records when given
    no flag (experts and cores follow ranks and the profile, as the table says in words)."""
    import re
    from pathlib import Path

    from ubepsim.model.params import NAMES, PARAM_BY_NAME, default_sync
    from ubepsim.model.profile import load_profile
    doc = (Path(__file__).resolve().parent.parent / "docs" / "reference.md").read_text()
    section = doc.split("## Parameters")[1].split("\n## ")[0]
    table = dict(re.findall(r"^\| `(\w+)` \| `--[\w-]+` \| [\w ]+ \| ([^|]*) \|", section, re.M))
    ran = json.loads(run_cli("run", "--json")[1])
    assert list(table) == list(NAMES)
    words = {"one per rank": ran["ranks"], "the profile's": load_profile().cores, "none": "",
             PARAM_BY_NAME["sync"].stated_default: default_sync(load_profile())}
    for name, default in table.items():
        default = default.strip().strip("`")
        if default == "tuned":   # the size tune picks, said so
            assert ran["cumsum_tuned"] and 1 <= ran[name] < ran["cores"], name
            continue
        assert str(ran[name]) == str(words.get(default, default)), name


def test_the_help_says_sync_defaults_to_the_profiles():
    """--help states sync's default as default_sync takes it: sp, or dc on a fabric that does
    not write a block whole (it said "(default: sp)" after saying dc there)."""
    import re

    from ubepsim.model.params import default_sync
    from ubepsim.model.profile import BUILTIN

    code, out, _ = run_cli("run", "--help")
    (text,) = re.findall(r"--sync NAME(.*?)\n  --", out, re.S)
    text = " ".join(text.split())
    assert code == 0 and "(default: sp)" not in text
    assert "(default: the profile's: sp, or dc where its fabric does not write a block " \
        "whole)" in text
    for name in BUILTIN:   # h800 writes no block whole
        profile = load_profile(name)
        assert default_sync(profile) == ("sp" if profile.writes_blocks_whole else "dc"), name


def test_a_profile_names_the_keys_it_takes_from_a_built_in_one(tmp_path):
    """[takes] lists keys taken from a built-in profile as they are there; a key set in
    [hardware] and taken too, a profile that is not built in, or a key that does not exist is
    refused, naming it; the built-in presets take what they take from cm384 that way."""
    listed = tmp_path / "listed.toml"
    keys = [k for k in FIELDS if k not in ("egress_gbps", "latency_ns")]
    listed.write_text(f"[takes]\ncm384 = {json.dumps(keys)}\n[hardware]\negress_gbps = 99.0\n"
                      f"[hardware.latency_ns]\nlocal = 1.0\nintra_npu = 2.0\none_hop = 3.0\n"
                      f"two_hop = 4.0\n")
    got = load_profile(listed)
    assert got.egress_gbps == 99.0 and got.latency_ns["two_hop"] == 4.0
    assert got.core_store_gbps == load_profile().core_store_gbps
    for text, named in (("[takes]\ncm384 = [\"egress_gbps\"]\n[hardware]\negress_gbps = 1.0\n",
                         "hardware.egress_gbps: is set here and taken"),
                        ("[takes]\ncm384 = [\"latency_ns\"]\n[hardware.latency_ns]\n"
                         "two_hop = 1.0\n", "hardware.latency_ns.two_hop: is set here and taken"),
                        ("[takes]\nnowhere = \"*\"\n[hardware]\n", "takes.nowhere"),
                        ("[takes]\ncm384 = [\"egress_gpbs\"]\n[hardware]\n", "egress_gpbs")):
        listed.write_text(text)
        code, _, err = run_cli("run", *SMALL, "--profile", listed)
        assert code == 2 and named in err, err
    pod, over = load_profile("cm384_pod"), load_profile("cm384_oversubscribed")
    assert pod.dies == over.dies == 768 > load_profile().dies
    assert {k: v for k, v in pod.values.items() if k != "dies"} == \
        {k: v for k, v in load_profile().values.items() if k != "dies"}
    assert over.tier_gbps == [pod.tier_sizes[0] * pod.egress_gbps / 2]
    three = load_profile("three_tier")
    assert three.tier_sizes == [16, 64] and three.dies == 1024


def test_ranks_beyond_the_machine_are_refused_naming_a_larger_profile():
    code, _, err = run_cli("run", "--ranks", "512", "--batch", "1", "--topk", "1")
    assert code == 2 and "512 is more than the 256 dies of profile cm384" in err
    assert "cm384_pod" in err
    code, out, err = run_cli("run", "--ranks", "512", "--batch", "1", "--topk", "1", "--cores",
                             "4", "--cumsum-cores", "1", "--profile", "cm384_pod", "--json")
    assert code == 0, err


def test_a_fabric_without_atomic_blocks_refuses_in_block_signals():
    """Paper Table 5: Data-as-Flag's tff and sp need blocks the fabric writes whole; h800's
    InfiniBand writes 8 bytes whole. A run that asks for either there is refused before any
    work; one that names no sync takes dc, and one that names sw keeps it."""
    for sync in ("tff", "sp"):
        code, out, err = run_cli("run", "--profile", "h800", "--protocol", "ubep", "--ranks",
                                 "16", "--sync", sync)
        assert code == 2 and out == ""
        assert f"sync (--sync): {sync} needs stores the fabric writes whole" in err
        assert "use dc or sw" in err
    for extra, sync in ((("--protocol", "ubep"), "dc"), (("--protocol", "bsp", "--sync", "sw"),
                                                         "sw")):
        code, out, err = run_cli("run", "--profile", "h800", "--ranks", "16", "--json", *extra)
        assert code == 0, err
        row = json.loads(out)
        assert row["sync"] == sync and row["latency_us"] > 0


# every file of ubepsim/profiles, not BUILTIN: a preset left out of it fails here too
PRESETS = sorted(f.name.removesuffix(".toml")
                 for f in resources.files("ubepsim").joinpath("profiles").iterdir()
                 if f.name.endswith(".toml"))


@pytest.mark.parametrize("protocol", list(Protocol.__members__))
@pytest.mark.parametrize("profile", PRESETS)
def test_every_built_in_profile_runs_each_protocol_at_its_defaults(profile, protocol):
    """A preset's defaults must run: every parameter but the sizes at its default (its sync
    the profile's: sp where the fabric writes a block whole, else dc)."""
    code, out, err = run_cli("run", "--profile", profile, "--protocol", protocol, "--ranks", 8,
                             "--batch", 4, "--json")
    assert code == 0, err
    row = json.loads(out)
    assert row["latency_us"] > 0
    hardware = load_profile(profile)
    if protocol != "deepep_ll":   # whose counts signal themselves: it reads no sync
        assert row["sync"] == ("sp" if hardware.atomic_bytes >= hardware.block_bytes else "dc")
