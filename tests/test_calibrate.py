"""`ubepsim calibrate`: recovering known parameters from synthetic measurements, bad input, and
the paper's calibration set-up (the full paper fit is too slow for the suite)."""

from __future__ import annotations

import tomllib

import numpy as np
import polars as pl
import pytest

from conftest import run_cli
from ubepsim import InputError
from ubepsim.fit import calibrate as cal
from ubepsim.paper import cm384, h800, numbers
from ubepsim.model.api import simulate_table
from ubepsim.model.params import make_config
from ubepsim.model.profile import FIELDS, load_profile


@pytest.fixture(scope="module", autouse=True)
def _simulated_once(kernel_rows):
    """Each configuration simulated once in the session (conftest.KernelRows): the paper's
    problem runs on the shipped profile in four tests below, and `validate` runs it again."""
    with kernel_rows.shared():
        yield


TRUTH = {"core_store_gbps": 24.0, "init_cycles": 3000, "syncall_cycles": 2500,
         "blocks_in_flight": 8}


def synthetic(truth: dict, rows: int | None = None) -> pl.DataFrame:
    """Latencies of small configurations simulated with `truth` over the built-in profile:
    few AIVs with many copies (issue-bound), one-hop stores (window-bound), both protocols."""
    profile = cal.with_values(load_profile(), truth)
    points = [make_config({"ranks": r, "batch": b, "topk": 2, "cores": 8, "cumsum_cores": 2,
                           "hidden": h,
                           "protocol": p, "sync": "sw" if p == "bsp" else "sp"},
                          profile.cores).as_dict()
              for r in (4, 8) for b in (4, 32) for h in (256, 1024) for p in ("bsp", "ubep")]
    frame = simulate_table(pl.DataFrame(points[:rows]), profile)
    return frame.select("ranks", "batch", "topk", "cores", "cumsum_cores", "hidden", "protocol",
                        "sync", "latency_us")


def fitted_values(path) -> dict:
    return tomllib.loads(path.read_text())["hardware"]


@pytest.mark.parametrize("suffix", [".csv", ".parquet"])
def test_recovers_known_parameters_from_synthetic_measurements(tmp_path, suffix):
    data = tmp_path / f"measured{suffix}"
    frame = synthetic(TRUTH)
    frame.write_csv(data) if suffix == ".csv" else frame.write_parquet(data)
    out = tmp_path / "fitted.toml"
    code, stdout, err = run_cli("calibrate", data, "--fit", ",".join(TRUTH), "--out", out)
    assert code == 0, err
    got = fitted_values(out)
    assert got["blocks_in_flight"] == TRUTH["blocks_in_flight"]   # from powers of two
    for key in ("core_store_gbps", "init_cycles", "syncall_cycles"):
        assert got[key] == pytest.approx(TRUTH[key], rel=0.03), key
    # the fit table: every point with its measured and simulated latency
    assert len([ln for ln in stdout.splitlines() if ln.startswith("ranks=")]) == frame.height
    assert "rms error" in stdout
    # everything else comes from the start profile, and the file is a valid profile
    start = load_profile().values
    assert all(got[k] == start[k] for k in FIELDS if k not in TRUTH and k != "latency_ns")
    assert load_profile(out).values["init_cycles"] == got["init_cycles"]
    lines = out.read_text().splitlines()
    assert all(any(ln.startswith(f"{k} =") and ln.endswith("# fitted") for ln in lines)
               for k in TRUTH)


def test_fit_engine_reports_the_model_at_the_rounded_values():
    problem = cal.measurement_problem(synthetic(TRUTH, rows=6), 48)
    result = cal.fit(problem, load_profile(), ["init_cycles"])
    again = problem.simulate(result.profile)
    assert np.array_equal(result.table["simulated"].to_numpy(), again)
    assert isinstance(result.values["init_cycles"], int)


def test_a_key_no_measurement_depends_on_keeps_its_start_value(tmp_path):
    """sentinel_collision_prob acts in sp only: fitted to bsp sw rows, it stays at its start (0,
    below the fit's log-scale floor), and the report and the written profile say so."""
    data = tmp_path / "m.csv"
    synthetic({"init_cycles": 3000}, rows=6).filter(pl.col("sync") == "sw").write_csv(data)
    out = tmp_path / "fitted.toml"
    code, stdout, err = run_cli("calibrate", data, "--fit", "init_cycles,sentinel_collision_prob",
                                "--out", out)
    assert code == 0, err
    got = fitted_values(out)
    assert got["sentinel_collision_prob"] == 0.0
    assert got["init_cycles"] == pytest.approx(3000, rel=0.03)
    assert "sentinel_collision_prob" in stdout and "kept: no measurement depends" in stdout
    lines = out.read_text().splitlines()
    assert any(ln.startswith("sentinel_collision_prob =") and ln.endswith("no measurement "
                                                                          "depends on it")
               for ln in lines)
    assert any(ln.startswith("init_cycles =") and ln.endswith("# fitted") for ln in lines)


def test_unnamed_parameters_take_their_defaults(tmp_path):
    data = tmp_path / "m.csv"
    # but UBEP's group: what the hardware ran, not the model's pick ("tuned")
    pl.DataFrame({"ranks": [8], "cumsum_cores": [1], "latency_us": [50.0]}).write_csv(data)
    problem = cal.measurement_problem(cal.read_measurements(data), 48, str(data))
    assert problem.cols["batch"][0] == 64 and problem.cols["experts"][0] == 8
    (tmp_path / "m[1].csv").write_text("latency_us\n50\n")  # no parameter at all; [ is no glob
    with pytest.raises(InputError, match="cumsum_cores: row 1: a measured UBEP dispatch"):
        cal.measurement_problem(cal.read_measurements(tmp_path / "m[1].csv"), 48)
    (tmp_path / "m[2].csv").write_text("protocol,latency_us\nbsp,50\n")
    problem = cal.measurement_problem(cal.read_measurements(tmp_path / "m[2].csv"), 48)
    assert problem.cols["ranks"][0] == 128


def test_rows_without_sync_take_the_profiles_and_fit_on_h800(tmp_path):
    """h800's fabric refuses sp: rows that name no sync take dc there, as `ubepsim run` does,
    in a fit and in a cross-validation's folds alike; a row that names sp is refused."""
    data = tmp_path / "m.csv"
    data.write_text("ranks,batch,topk,cumsum_cores,source,latency_us\n8,4,2,1,a,40\n"
                    "16,4,2,1,b,50\n")
    code, _, err = run_cli("calibrate", data, "--profile", "h800", "--fit", "init_cycles",
                           "--max-evaluations", "4", "--out", tmp_path / "fitted.toml")
    assert code == 0, err
    code, _, err = run_cli("calibrate", data, "--profile", "h800", "--cv", "--fit",
                           "init_cycles", "--max-evaluations", "4", "--workers", "1")
    assert code == 0, err
    data.write_text("ranks,batch,topk,sync,cumsum_cores,latency_us\n8,4,2,sp,1,40\n")
    code, _, err = run_cli("calibrate", data, "--profile", "h800", "--out", tmp_path / "x.toml")
    assert code == 2 and "sp needs stores the fabric writes whole" in err


def test_a_trace_in_a_measurement_file_is_relative_to_that_file(tmp_path, monkeypatch):
    (tmp_path / "sub").mkdir()
    rows = [(r, t, k, (r + t + k) % 4) for r in range(4) for t in range(2) for k in range(2)]
    pl.DataFrame(rows, schema=["rank", "token", "k", "expert"], orient="row").write_parquet(
        tmp_path / "sub" / "tr.parquet")
    data = tmp_path / "sub" / "m.csv"
    pl.DataFrame({"ranks": [4, 4], "batch": [2, 2], "topk": [2, 2], "routing": ["trace"] * 2,
                  "trace": ["tr.parquet", None], "latency_us": [10.0, 11.0]}).write_csv(data)
    monkeypatch.chdir(tmp_path)          # not the measurement file's directory
    frame = cal.read_measurements("sub/m.csv")
    assert frame["trace"].to_list() == [str(tmp_path / "sub" / "tr.parquet"), None]


def _one_error(code, err, *words):
    assert code == 2
    lines = [ln for ln in err.strip().splitlines() if ln]
    assert len(lines) == 1 and lines[0].startswith("error:"), err
    for w in words:
        assert w in lines[0], (w, lines[0])


def test_a_column_given_twice_is_named(tmp_path):
    data = tmp_path / "m.csv"
    data.write_text("ranks,latency_us,ranks\n8,10.0,8\n")
    code, _, err = run_cli("calibrate", data, "--out", tmp_path / "fitted.toml")
    _one_error(code, err, "ranks", "a column given twice")


@pytest.mark.parametrize("frame, words", [
    ({"ranks": [8], "warp_size": [32], "latency_us": [10.0]}, ["warp_size", "unknown column"]),
    ({"ranks": [8], "batch": [4]}, ["latency_us", "missing"]),
    ({"ranks": [8], "latency_us": [0.0]}, ["latency_us", "above 0"]),
    ({"ranks": [8], "latency_us": ["fast"]}, ["latency_us"]),
    ({"ranks": [8, 8], "topk": [2, 9], "cumsum_cores": [1, 1], "latency_us": [1.0, 2.0]},
     ["topk", "row 2"]),
    ({"ranks": [8, 8], "protocol": ["bsp", "ubep"], "latency_us": [1.0, 2.0]},
     ["cumsum_cores", "row 2: a measured UBEP dispatch states the CalCumSum group it ran with"]),
    ({"ranks": [8], "protocol": ["mpi"], "latency_us": [1.0]}, ["protocol", "row 1"]),
    ({"ranks": [8], "latency_us": [float("inf")]}, ["latency_us", "finite"]),
    ({"ranks": [8, 8], "batch": ["8", "abc"], "latency_us": [1.0, 2.0]},
     ["batch", "row 2: expected an integer, got 'abc'"]),
])
def test_bad_measurement_files_are_refused_with_one_message(tmp_path, frame, words):
    data = tmp_path / "m.csv"
    pl.DataFrame(frame).write_csv(data)
    out = tmp_path / "fitted.toml"
    code, _, err = run_cli("calibrate", data, "--out", out)
    _one_error(code, err, *words)
    assert not out.exists()


@pytest.mark.parametrize("args, words", [
    (("nowhere.csv",), ["nowhere.csv", "does not exist"]),
    (("m.txt",), ["csv or .parquet"]),
    (("m.csv", "--fit", "warp_cycles"), ["--fit", "warp_cycles"]),
    (("m.csv", "--fit", "cores"), ["--fit", "cores", "shape"]),
    (("m.csv", "--fit", "init_cycles,init_cycles"), ["--fit", "twice"]),
    (("m.csv", "--fit", "init_cycles,,syncall_cycles"), ["--fit", "comma"]),
    (("m.csv", "--out", "p.json"), ["--out", ".toml"]),
    (("m.csv", "--out", "missing/p.toml"), ["--out", "does not exist"]),
    (("m.csv", "--check"), ["--check", "--paper"]),
    (("m.csv", "--paper"), ["--paper"]),
    ((), ["MEASUREMENTS"]),
    (("m.csv", "--profile", "nope.toml"), ["profile", "nope.toml"]),
    (("m.csv", "--fit", ""), ["--fit", "comma", "such as init_cycles,syncall_cycles"]),
    (("m.csv", "--out", "/proc/p.toml"), ["--out", "cannot write in /proc"]),
    (("m.csv", "--workers", "4096"), ["--workers", "must lie in [1, "]),
    (("--paper", "--out", "/proc/p.toml"), ["--out", "cannot write in /proc"]),
])
def test_bad_arguments_are_refused_with_one_message(tmp_path, monkeypatch, args, words):
    monkeypatch.chdir(tmp_path)
    pl.DataFrame({"ranks": [8], "latency_us": [10.0]}).write_csv("m.csv")
    (tmp_path / "m.txt").write_text("ranks,latency_us\n8,10\n")
    code, _, err = run_cli("calibrate", *args)
    _one_error(code, err, *words)
    assert not (tmp_path / "calibrated.toml").exists()


# --- the paper's calibration -----------------------------------------------------------------

def test_paper_start_sets_every_key_from_the_paper_or_the_provisional_costs():
    """The refit never reads the shipped profile: every key is stated, a hardware figure or
    provisional, and the hardware keys are at their figures and never fitted."""
    parts = (set(cm384.STATED), set(cm384.HARDWARE), set(cm384.PROVISIONAL))
    assert set.union(*parts) == set(FIELDS) and sum(map(len, parts)) == len(FIELDS)
    start = cm384.paper_start().values
    assert start["latency_ns"]["two_hop"] == 2500.0 and start["cores"] == 48
    # the ports at 392 GB/s per NPU, half per die; two copies of an fp8 token in flight (7392 B
    # in 15 blocks of 512 B: CANN's two UB buffers)
    assert start["egress_gbps"] == start["ingress_gbps"] == 196.0
    assert start["blocks_in_flight"] == 2 * 15
    fitted = {m for k in cm384.PAPER_KEYS for m in cal.members(k)}
    assert not fitted & set(cm384.HARDWARE)
    # Table 2's latencies are fitted from the paper's own values; every other fitted key from a
    # provisional one
    assert {m for m in fitted if not m.startswith("latency_ns.")} <= set(cm384.PROVISIONAL)
    assert all(start["latency_ns"][m.split(".")[1]] == numbers.TABLE2_NS[m.split(".")[1]]
               for m in fitted if m.startswith("latency_ns."))


def test_paper_problem_holds_every_calibration_number():
    problem = cm384.paper_problem()
    cells = len(numbers.FIG14_EXTRA_US) * len(numbers.FIG14_GROUPS)
    panels = sorted(numbers.FIG14_PANELS)
    assert panels == [64, 128]
    assert len(problem.labels) == (len(numbers.TABLE2_NS) + len(numbers.TABLE4_CANN_EP)
                                   + len(numbers.FIG3B_EFFICIENCY) - 1 + 1 + 2 * cells)
    assert list(problem.measured[:3]) == [218.0, 929.0, 2500.0]
    assert list(problem.measured[3:8]) == [103.0, 120.0, 139.0, 144.0, 151.0]
    # Figure 14's cells as numbers.fig14_cells reads them: the 64-rank outlier as its row
    # neighbours' mean (our reading), every other cell as printed
    assert list(problem.measured[-2 * cells:]) == [x for r in panels
                                                   for row in numbers.fig14_cells(r)
                                                   for x in row]
    outlier = problem.labels.index(cm384.fig14_label(8, 16, 64))
    assert problem.measured[outlier] == 0.2     # its one neighbour, group 15 (not 37.3)
    # latencies are compared relatively; efficiencies, the share and Figure 14's cells (extra
    # latencies over their row's best) by difference, each cell within its noise; every source
    # weighs the same in all
    for source, n in (("Table 4", 5), ("Figure 14: 128", cells), ("Figure 14: 64", cells)):
        rows = [i for i, label in enumerate(problem.labels) if label.startswith(source)]
        assert len(rows) == n and np.allclose(problem.weight[rows], 1 / np.sqrt(n))
    assert (problem.tolerance[-2 * cells:] == cal.RUN_NOISE_US).all()
    assert problem.relative[:8].all() and not problem.relative[8:].any()
    values = problem.simulate(load_profile())
    assert values.shape == problem.measured.shape and np.all(np.isfinite(values))


def test_a_paper_problem_of_some_sources_is_those_sources_points():
    """What a cross-validation fold fits: the points of the sources it keeps, the same values
    and weights as in the whole problem; Table 4's configurations still run for the SyncAll
    share."""
    whole = cm384.paper_problem()
    kept = [x for x in cm384.SOURCES if x != "Table 4"]
    part = cm384.paper_problem(sources=kept)
    assert not any(label.startswith("Table 4") for label in part.labels)
    assert set(part.labels) == set(whole.labels) - {l for l in whole.labels
                                                     if l.startswith("Table 4")}
    at = {label: i for i, label in enumerate(whole.labels)}
    values, whole_values = part.simulate(load_profile()), whole.simulate(load_profile())
    for i, label in enumerate(part.labels):
        assert part.measured[i] == whole.measured[at[label]]
        assert values[i] == pytest.approx(whole_values[at[label]])
    with pytest.raises(ValueError, match="Figure 15"):
        cm384.paper_problem(sources=["Figure 15"])


def test_paper_check_compares_the_refit_with_the_shipped_profile(monkeypatch, tmp_path):
    """`calibrate --paper --check` (the fit itself is replaced by the shipped values here)."""
    shipped = load_profile()
    problem = cm384.paper_problem()

    def fake(values):
        profile = cal.with_values(shipped, values)
        return lambda threads=None, max_evaluations=400, progress=None: cal.Fit(
            values, profile, problem.table(problem.simulate(profile)), 0.05, 1, 0.0)

    monkeypatch.setattr(cm384, "calibrate_paper", fake({"init_cycles": shipped.init_cycles}))
    code, out, err = run_cli("calibrate", "--paper", "--check")
    assert code == 0, err
    assert "shipped cm384 profile is the fit's" in out
    monkeypatch.setattr(cm384, "calibrate_paper", fake({"init_cycles": shipped.init_cycles + 1}))
    code, _, err = run_cli("calibrate", "--paper", "--check")
    assert code == 1 and "init_cycles" in err
    target = tmp_path / "cm384.toml"
    code, _, _ = run_cli("calibrate", "--paper", "--out", target)
    assert code == 0 and load_profile(target).init_cycles == shipped.init_cycles + 1
    assert "fitted" in target.read_text() and "near: Table 2: 929 ns" in target.read_text()


@pytest.mark.parametrize("name", ["cm384", "h800"])
def test_the_shipped_profile_is_the_generators_text(name):
    """cm384.toml and h800.toml are exactly what `calibrate --paper --out` writes for their
    values: their comments (stated, fitted, provisional) and rms errors are the generator's."""
    module = {"cm384": cm384, "h800": h800}[name]
    shipped = load_profile(name)
    problem = module.paper_problem()
    table = problem.table(problem.simulate(shipped))
    text = module.paper_profile_toml(cal.Fit({}, shipped, table, cal.rms_in_tolerances(table), 0,
                                           0.0))
    assert (cal.Path(cal.__file__).parent.parent / "profiles" / f"{name}.toml").read_text() \
        == text
