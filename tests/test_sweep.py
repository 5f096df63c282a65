"""`ubepsim sweep` end to end: the dataset it writes, refusals, resume after SIGKILL,
determinism across workers and batching, and a real Dask cluster."""

from __future__ import annotations

import errno
import fcntl
import os
import re
import shutil
import signal
import subprocess
import sys
import time
import tomllib
from pathlib import Path

import numba
import polars as pl
import pyarrow.parquet as pq
import pytest
from hypothesis import given, settings, strategies as st

from conftest import TINY_FILTERED, TINY_GRID, TINY_SIZE, read_rows, run_cli, write_grid
from ubepsim import __version__
from ubepsim.sweep.engine import missing, provenance, run_sweep
from ubepsim.sweep.grid import load_grid
from ubepsim.model.api import simulate_table
from ubepsim.model.params import NAMES
from ubepsim.model.result_fields import RESULT_NAMES

TINY_KEPT = (f"the filter keeps {TINY_FILTERED}; {TINY_SIZE} distinct configurations (the others "
             f"differ only in cumsum_cores, which their protocol, routing or op does not read)")


def parts(out: Path) -> list[Path]:
    return sorted(out.glob("part-*.parquet"))


def test_sweep_writes_one_row_per_configuration_with_every_parameter_and_result(
        tiny_grid, tmp_path):
    out = tmp_path / "out"
    code, stdout, stderr = run_cli("sweep", tiny_grid, "--out", out, "--part-rows", 100)
    assert code == 0, stderr
    assert stdout.splitlines()[0] == ("tiny: 576 points (2 batch x 2 topk x 2 hidden x 3 "
                                      "cumsum_cores x 2 protocol x 2 sync x 3 ranks+experts x "
                                      f"2 seed); {TINY_KEPT}")
    assert "cfg/s" not in stderr  # no progress bar when stderr is not a terminal
    rows = pl.scan_parquet(out / "*.parquet").collect()
    assert rows.columns == [*NAMES, "config_id", "cumsum_tuned", *RESULT_NAMES]
    assert rows.height == TINY_SIZE and rows["config_id"].n_unique() == TINY_SIZE
    assert rows["config_id"].dtype == pl.Int64 and rows["protocol"].dtype == pl.String
    # The rows are the model's answer for the grid's points, whatever the batching.
    grid = load_grid(tiny_grid)
    direct = simulate_table(grid.frame(0, grid.size), grid.profile)
    assert rows.sort("config_id").equals(direct.sort("config_id"))
    # in the points' order, part by part and row by row (each batch runs shuffled)
    assert pl.concat([pl.read_parquet(p) for p in parts(out)]).equals(direct)
    # Parts of at most --part-rows points, one row group each.
    sizes = [pq.ParquetFile(p).metadata.num_rows for p in parts(out)]
    assert sizes == [100, 100, TINY_SIZE - 200]
    assert all(pq.ParquetFile(p).metadata.num_row_groups == 1 for p in parts(out))


def test_parts_carry_their_provenance(tiny_grid, tmp_path):
    out = tmp_path / "out"
    assert run_cli("sweep", tiny_grid, "--out", out, "-q")[0] == 0
    meta = provenance(parts(out)[0])
    grid = load_grid(tiny_grid)
    assert meta["version"] == __version__
    assert meta["grid"] == tiny_grid.read_text()
    assert meta["profile"] == grid.profile.to_toml()
    assert meta["sweep"] == "tiny" and meta["points"] == str(TINY_SIZE)
    assert pl.read_parquet_metadata(parts(out)[0])["ubepsim.fingerprint"] == grid.fingerprint


def test_profile_flag_replaces_the_base_profile_under_the_grids_overrides(tmp_path):
    """--profile is the base, the grid's [profile] table still applies on top, and the rows
    keep their config_ids, so the two datasets join on them."""
    grid = write_grid(tmp_path, TINY_GRID + "\n[profile]\nblocks_in_flight = 8\n")
    hw = tmp_path / "tiers.toml"
    hw.write_text("takes = { cm384 = \"*\" }\n[hardware]\ntier_sizes = [4]\nblocks_in_flight = 64\n")
    assert run_cli("sweep", grid, "--out", tmp_path / "a", "-q")[0] == 0
    assert run_cli("sweep", grid, "--profile", hw, "--out", tmp_path / "b", "-q")[0] == 0
    profile = tomllib.loads(provenance(parts(tmp_path / "b")[0])["profile"])["hardware"]
    assert profile["tier_sizes"] == [4] and profile["blocks_in_flight"] == 8
    a, b = read_rows(tmp_path / "a"), read_rows(tmp_path / "b")
    assert a["config_id"].equals(b["config_id"])
    assert (b["copies_two_hop"] > 0).any() and (a["copies_two_hop"] == 0).all()
    assert not a["latency_us"].equals(b["latency_us"])
    code, _, err = run_cli("sweep", grid, "--profile", tmp_path / "none.toml", "--out",
                           tmp_path / "c")
    assert code == 2 and err.startswith("error: --profile: cannot read")
    assert not (tmp_path / "c").exists()


def test_out_in_the_grid_is_relative_to_the_working_directory_and_dry_run_writes_nothing(
        tiny_grid, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    code, stdout, _ = run_cli("sweep", tiny_grid, "--dry-run")
    assert code == 0 and TINY_KEPT in stdout
    assert not (tmp_path / "tiny-results").exists()
    assert run_cli("sweep", tiny_grid, "-q")[0] == 0
    assert read_rows(tmp_path / "tiny-results").height == TINY_SIZE
    one = write_grid(tmp_path, '[sweep]\nname = "one"\n[grid]\nbatch = 8\n', "one.toml")
    assert run_cli("sweep", one, "--out", "x", "--dry-run")[1] == "one: 1 point\n"


def test_progress_bar_counts_configurations(tiny_grid, tmp_path, capsys):
    run_sweep(load_grid(tiny_grid), tmp_path / "out", progress=True)
    err = capsys.readouterr().err
    assert f"{TINY_SIZE}/{TINY_SIZE}" in err and "cfg/s" in err


def test_bad_grid_exits_2_before_creating_anything(tmp_path):
    grid = write_grid(tmp_path, TINY_GRID.replace("cores = 8", "cores = 3"))
    out = tmp_path / "out"
    code, stdout, stderr = run_cli("sweep", grid, "--out", out)
    assert code == 2 and stdout == ""
    assert stderr.startswith(f"error: {grid}: cumsum_cores: 3 is not allowed with cores 3 ")
    assert not out.exists()


@pytest.mark.parametrize("args, key", [
    (("--workers", 0), "--workers"),
    (("--workers", 4096), "--workers"),
    (("--batch-size", 0), "--batch-size"),
    (("--out", " "), "--out: is empty"),
    (("--scheduler", "local:x"), "--scheduler"),
    (("--scheduler", "local:0"), "--scheduler"),
    (("--scheduler", "nohost"), "--scheduler: missing port number"),
    (("--scheduler", "http://host:8786"), "--scheduler: unknown address scheme 'http'"),
])
def test_bad_options_exit_2_before_the_grid_is_read(tiny_grid, tmp_path, args, key):
    code, stdout, stderr = run_cli("sweep", tiny_grid, "--out", tmp_path / "out", *args)
    assert code == 2 and key in stderr and stdout == ""
    assert not (tmp_path / "out").exists()


def test_an_out_that_cannot_be_created_exits_2_naming_it(tiny_grid, tmp_path):
    (tmp_path / "file").write_text("")
    code, _, stderr = run_cli("sweep", tiny_grid, "--out", tmp_path / "file" / "out", "-q")
    assert code == 2 and stderr.startswith(f"error: --out: cannot write into {tmp_path}/file/out")


def test_grid_without_out_needs_the_flag_except_for_a_dry_run(tmp_path):
    grid = write_grid(tmp_path, TINY_GRID.replace('out = "tiny-results"\n', ""))
    code, _, stderr = run_cli("sweep", grid)
    assert code == 2 and "--out" in stderr
    code, stdout, _ = run_cli("sweep", grid, "--dry-run")
    assert code == 0 and TINY_KEPT in stdout


def test_another_grids_directory_is_refused_and_left_alone(tiny_grid, tmp_path):
    out = tmp_path / "out"
    assert run_cli("sweep", tiny_grid, "--out", out, "-q")[0] == 0
    before = {p.name: p.stat().st_mtime_ns for p in parts(out)}
    other = write_grid(tmp_path, TINY_GRID.replace("seeds = [0, 1]", "seeds = [7]"), "other.toml")
    for extra in ((), ("--resume",)):
        code, _, stderr = run_cli("sweep", other, "--out", out, *extra)
        assert code == 2 and "holds the results of another grid ('tiny'" in stderr
    assert {p.name: p.stat().st_mtime_ns for p in parts(out)} == before
    for old, new, change in (("seeds = [0, 1]", "seeds = [0, 2]", "points differ"),
                             ("[grid]", "[profile]\ninit_cycles = 200\n\n[grid]",
                              "hardware profile differs")):
        tiny_grid.write_text(TINY_GRID.replace(old, new))
        code, _, stderr = run_cli("sweep", tiny_grid, "--out", out, "--resume")
        assert code == 2 and (f"holds the results of an earlier version of grid 'tiny' (from "
                              f"{tiny_grid}): its {change} from this run's") in stderr


def test_another_versions_dataset_is_named_as_such(tiny_grid, tmp_path):
    out = tmp_path / "out"
    run_sweep(load_grid(tiny_grid), out, part_rows=TINY_SIZE // 2)
    part = parts(out)[0]
    table = pq.read_table(part)
    meta = {**table.schema.metadata, b"ubepsim.version": b"0.1.0", b"ubepsim.fingerprint": b"x"}
    pq.write_table(table.replace_schema_metadata(meta), part)   # and its points differ too
    code, _, stderr = run_cli("sweep", tiny_grid, "--out", out, "--resume")
    assert code == 2 and f"{out} was written by ubepsim 0.1.0, this is {__version__}" in stderr


def test_a_finished_sweep_needs_resume_and_then_does_nothing(tiny_grid, tmp_path):
    out = tmp_path / "out"
    assert run_cli("sweep", tiny_grid, "--out", out, "-q")[0] == 0
    code, _, stderr = run_cli("sweep", tiny_grid, "--out", out)
    assert code == 2 and f"already holds all {TINY_SIZE} rows of this grid: the sweep is " \
        "complete" in stderr
    code, stdout, _ = run_cli("sweep", tiny_grid, "--out", out, "--dry-run", "--resume")
    assert code == 0 and stdout.splitlines()[1] == \
        f"{out}: holds all {TINY_SIZE} rows; nothing to simulate"
    code, stdout, _ = run_cli("sweep", tiny_grid, "--out", out, "--resume", "-q")
    assert code == 0 and "simulated 0 " in stdout
    assert read_rows(out).height == TINY_SIZE


def test_a_dry_run_checks_the_directory_as_a_run_would(tiny_grid, tmp_path, monkeypatch):
    """It refuses what the run would refuse, and tells what --resume would do. A directory the
    grid's [sweep] out names is reported under that key, in the grid file, not as --out."""
    monkeypatch.chdir(tmp_path)
    out = tmp_path / "tiny-results"              # the grid's [sweep] out
    run_sweep(load_grid(tiny_grid), out, part_rows=TINY_SIZE // 2)
    parts(out)[1].unlink()
    code, stdout, stderr = run_cli("sweep", tiny_grid, "--dry-run")
    assert code == 2 and stderr.startswith(f"error: {tiny_grid}: sweep.out: tiny-results "
                                           f"already holds {TINY_SIZE // 2} of the")
    code, _, stderr = run_cli("sweep", tiny_grid, "--dry-run", "--out", out)
    assert code == 2 and stderr.startswith(f"error: --out: {out} already holds")
    code, stdout, _ = run_cli("sweep", tiny_grid, "--dry-run", "--resume")
    assert code == 0 and stdout.splitlines()[1] == \
        f"tiny-results: holds {TINY_SIZE // 2} of the {TINY_SIZE} rows; --resume simulates " \
        f"the other {TINY_SIZE - TINY_SIZE // 2}"
    assert len(parts(out)) == 1                  # and wrote nothing


def test_foreign_parquet_and_a_running_sweep_are_refused(tiny_grid, tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    pl.DataFrame({"x": [1]}).write_parquet(out / "mine.parquet")
    code, _, stderr = run_cli("sweep", tiny_grid, "--out", out)
    assert code == 2 and "not parts of a sweep (mine.parquet)" in stderr
    (out / "mine.parquet").unlink()
    with open(out / ".lock", "w") as held:
        fcntl.flock(held, fcntl.LOCK_EX)
        code, _, stderr = run_cli("sweep", tiny_grid, "--out", out)
    assert code == 2 and "another sweep is writing" in stderr
    assert not parts(out)
    # with parts there too, the running sweep is what to say, not "add --resume"
    run_sweep(load_grid(tiny_grid), out, part_rows=TINY_SIZE // 2)
    (out / parts(out)[-1]).unlink()
    with open(out / ".lock", "w") as held:
        fcntl.flock(held, fcntl.LOCK_EX)
        for extra in ((), ("--resume",)):
            code, _, stderr = run_cli("sweep", tiny_grid, "--out", out, *extra)
            assert code == 2 and stderr == f"error: --out: another sweep is writing into {out}\n"


def test_overlapping_parts_are_refused(tiny_grid, tmp_path):
    """Parts of the same grid cut at other boundaries (another --part-rows) overlap: which
    rows to keep is not for --resume to guess."""
    a, b = tmp_path / "a", tmp_path / "b"
    assert run_cli("sweep", tiny_grid, "--out", a, "--part-rows", 100, "-q")[0] == 0
    assert run_cli("sweep", tiny_grid, "--out", b, "--part-rows", 150, "-q")[0] == 0
    os.replace(parts(b)[0], a / parts(b)[0].name)          # points 0-149 beside 0-99, 100-199
    before = sorted(p.name for p in parts(a))
    code, _, err = run_cli("sweep", tiny_grid, "--out", a, "--resume", "-q")
    assert code == 2 and "overlapping parts (at point 0)" in err
    assert sorted(p.name for p in parts(a)) == before


def test_resume_fills_the_gaps_and_drops_half_written_parts(tiny_grid, tmp_path):
    ref, out = tmp_path / "ref", tmp_path / "out"
    assert run_cli("sweep", tiny_grid, "--out", ref, "-q")[0] == 0
    assert run_cli("sweep", tiny_grid, "--out", out, "--part-rows", 50, "-q")[0] == 0
    for p in parts(out)[1::3]:
        p.unlink()
    stale = out / ".part-000000050-000000100.parquet.tmp"
    stale.write_bytes(b"PAR1 half a part")
    assert read_rows(out).height < TINY_SIZE  # the stale file is never read as data
    code, stdout, _ = run_cli("sweep", tiny_grid, "--out", out, "--resume", "--part-rows", 64,
                              "-q")
    assert code == 0 and "were there already" in stdout
    assert not stale.exists()
    assert read_rows(out).equals(read_rows(ref))


def write_trace_grid(directory: Path, axes: str = "") -> Path:
    """A grid named "t" in `directory` routed by a trace file beside it (t.parquet)."""
    directory.mkdir(exist_ok=True)
    rows = [(r, t, k, (r + t + k) % 4) for r in range(4) for t in range(2) for k in range(2)]
    pl.DataFrame(rows, schema=["rank", "token", "k", "expert"], orient="row").write_parquet(
        directory / "t.parquet")
    return write_grid(directory, '[sweep]\nname = "t"\nseeds = { range = [0, 7] }\n[grid]\n'
                      'ranks = 4\nbatch = 2\ntopk = 2\nrouting = "trace"\ntrace = "t.parquet"\n'
                      + axes)


def test_a_trace_grid_resumes_from_another_working_directory(tmp_path, monkeypatch):
    sub = tmp_path / "sub"
    write_trace_grid(sub, 'sync = ["sw", "sp"]\n')
    out = tmp_path / "out"
    monkeypatch.chdir(tmp_path)
    assert run_cli("sweep", "sub/grid.toml", "--out", out, "--part-rows", 4, "-q")[0] == 0
    whole = read_rows(out)
    parts(out)[-1].unlink()
    monkeypatch.chdir(sub)       # the same grid, spelled from elsewhere
    code, _, err = run_cli("sweep", "grid.toml", "--out", out, "--resume", "-q")
    assert code == 0, err
    assert read_rows(out).equals(whole)
    assert whole["trace"].unique().to_list() == [str(sub / "t.parquet")]


def test_a_trace_grid_moved_with_its_trace_does_not_resume_the_old_rows(tmp_path):
    """Its points are the same configurations (a trace counts by its content), but the rows
    record the trace's path: resuming would mix rows naming the old and the new file."""
    old, new = tmp_path / "old", tmp_path / "new"
    write_trace_grid(old)
    out = tmp_path / "out"
    assert run_cli("sweep", old / "grid.toml", "--out", out, "--part-rows", 4, "-q")[0] == 0
    parts(out)[-1].unlink()
    shutil.copytree(old, new)
    code, _, err = run_cli("sweep", new / "grid.toml", "--out", out, "--resume", "-q")
    assert code == 2 and f"holds the results of another grid ('t', from {old / 'grid.toml'})" \
        in err
    assert run_cli("sweep", old / "grid.toml", "--out", out, "--resume", "-q")[0] == 0


def test_a_damaged_part_is_named_with_what_to_do(tiny_grid, tmp_path):
    out = tmp_path / "out"
    assert run_cli("sweep", tiny_grid, "--out", out, "--part-rows", 50, "-q")[0] == 0
    damaged = parts(out)[1]
    damaged.write_bytes(damaged.read_bytes()[:-100])  # as a disk fault might leave it
    code, _, stderr = run_cli("sweep", tiny_grid, "--out", out, "--resume", "-q")
    assert code == 2 and f"error: --out: {damaged} is not a readable part" in stderr
    assert "delete that file and run again with --resume" in stderr


KILL_GRID = TINY_GRID.replace("seeds = [0, 1]", "seeds = { range = [0, 7] }")
KILL_SIZE = TINY_SIZE * 4


def test_sigkill_at_any_moment_then_resume_gives_the_uninterrupted_rows(tmp_path):
    grid = write_grid(tmp_path, KILL_GRID)
    ref, out = tmp_path / "ref", tmp_path / "out"
    assert run_cli("sweep", grid, "--out", ref, "-q")[0] == 0
    cmd = [sys.executable, "-c", "from ubepsim.cli import entry; entry()", "sweep", str(grid),
           "--out", str(out), "--part-rows", "32", "--batch-size", "8", "--workers", "1", "-q"]
    partial = []
    for delay in (0.0, 0.05, 0.2):
        before = len(parts(out)) if out.exists() else 0
        proc = subprocess.Popen(cmd + (["--resume"] if before else []),
                                stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        deadline = time.monotonic() + 120
        while (proc.poll() is None and time.monotonic() < deadline
               and (not out.exists() or len(parts(out)) <= before)):
            time.sleep(0.005)
        time.sleep(delay)
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        assert proc.returncode in (-signal.SIGKILL, 0), proc.stderr.read().decode()
        partial.append(read_rows(out).height)
    assert 0 < partial[0] < KILL_SIZE  # the first kill really interrupted the sweep
    assert run_cli("sweep", grid, "--out", out, "--resume", "-q")[0] == 0
    rows = read_rows(out)
    assert rows.height == KILL_SIZE and rows["config_id"].n_unique() == KILL_SIZE
    assert rows.equals(read_rows(ref))
    assert not list(out.glob(".*.tmp"))


@pytest.mark.skipif(numba.config.NUMBA_NUM_THREADS < 2,
                    reason="NUMBA_NUM_THREADS is set to 1: one kernel thread to compare with")
def test_rows_do_not_depend_on_workers_batch_size_or_parts(tiny_grid, tmp_path):
    runs = [("--workers", 1, "--batch-size", 7, "--part-rows", 50),
            ("--workers", 2, "--batch-size", 1000),
            ("--workers", 2, "--batch-size", 64, "--part-rows", 100)]
    datasets = []
    for i, args in enumerate(runs):
        out = tmp_path / f"run{i}"
        assert run_cli("sweep", tiny_grid, "--out", out, "-q", *args)[0] == 0
        datasets.append(read_rows(out))
    assert datasets[0].height == TINY_SIZE
    assert all(d.equals(datasets[0]) for d in datasets[1:])
    assert len(parts(tmp_path / "run0")) != len(parts(tmp_path / "run1"))


def test_a_local_dask_cluster_gives_the_single_machine_rows(tiny_grid, tmp_path):
    local, dask = tmp_path / "local", tmp_path / "dask"
    assert run_cli("sweep", tiny_grid, "--out", local, "-q")[0] == 0
    code, _, stderr = run_cli("sweep", tiny_grid, "--out", dask, "--scheduler", "local:2",
                              "--batch-size", 32, "--part-rows", 100, "-q")
    assert code == 0, stderr
    assert read_rows(dask).equals(read_rows(local))
    assert os.path.exists(dask / "part-000000000-000000100.parquet")
    # threads per batch beyond what a worker's Numba may use: refused, not silently capped
    code, _, stderr = run_cli("sweep", tiny_grid, "--out", tmp_path / "many", "--scheduler",
                              "local:1", "--workers", 4096, "-q")
    assert code == 2 and "--workers: must lie in [1, " in stderr
    assert not parts(tmp_path / "many")


def test_a_lost_cluster_keeps_the_parts_and_says_how_to_finish(tiny_grid, tmp_path,
                                                               monkeypatch):
    """The cluster goes away once the first part is written: one line and exit code 1, that
    part kept, and --resume (here without a cluster) gives the rows of an uninterrupted run."""
    from distributed import LocalCluster

    from ubepsim.sweep import engine

    out = tmp_path / "out"
    write = engine.write_part
    with LocalCluster(n_workers=1, threads_per_worker=1, processes=False, protocol="tcp",
                      host="127.0.0.1", dashboard_address=None) as cluster:
        def write_then_lose_the_cluster(*args):
            write(*args)
            cluster.close()   # its workers, then its scheduler
        monkeypatch.setattr(engine, "write_part", write_then_lose_the_cluster)
        address = cluster.scheduler_address
        code, _, stderr = run_cli("sweep", tiny_grid, "--out", out, "--scheduler", address,
                                  "--batch-size", 25, "--part-rows", 100, "-q")
    assert code == 1, stderr
    assert stderr.strip().splitlines()[-1] == (
        f"error: the Dask cluster at {address} failed mid-sweep (scheduler-connection-lost); "
        f"the complete parts in {out} are kept (100 of {TINY_SIZE} rows); run the same command "
        f"with --resume to finish")
    assert [p.name for p in parts(out)] == ["part-000000000-000000100.parquet"]
    monkeypatch.setattr(engine, "write_part", write)
    assert_resume_finishes(tiny_grid, out, tmp_path / "whole")


def test_a_batch_that_kills_its_workers_is_named(tiny_grid, tmp_path, monkeypatch):
    """Dask gives up a batch once it has killed the workers allowed (here the first): one line
    naming its points, exit code 1."""
    import dask

    from ubepsim.sweep import engine

    # a lambda goes to the workers by value (cloudpickle): each worker that runs it dies
    monkeypatch.setattr(engine, "simulate_batch", lambda *args: os._exit(1))
    with dask.config.set({"distributed.scheduler.allowed-failures": 0}):
        code, _, stderr = run_cli("sweep", tiny_grid, "--out", tmp_path / "out", "--scheduler",
                                  "local:1", "--batch-size", 25, "--part-rows", 100, "-q")
    assert code == 1, stderr
    # whichever batch of the two in flight the worker started first
    named = re.fullmatch(
        rf"error: the batch of points (\d+)-(\d+) killed each Dask worker that ran it \(out of "
        rf"memory, say\); the complete parts in {re.escape(str(tmp_path / 'out'))} are kept \(0 "
        rf"of {TINY_SIZE} rows\); run the same command with --resume to finish",
        stderr.strip().splitlines()[-1])
    assert named and int(named[1]) in (0, 25) and int(named[2]) == int(named[1]) + 24


def test_a_full_disk_keeps_the_parts_and_frees_what_it_took(tiny_grid, tmp_path, monkeypatch):
    """The second part finds no room: one line and exit code 1, no temporary file left taking
    space, the first part kept, and --resume (with room again) finishes the dataset."""
    from ubepsim.sweep import engine

    out = tmp_path / "out"
    write_table = engine.pq.write_table

    def fill_the_disk(table, where, **kw):
        if not parts(out):
            return write_table(table, where, **kw)
        where.write(b"PAR1")   # a start, then no room
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
    monkeypatch.setattr(engine.pq, "write_table", fill_the_disk)
    code, _, stderr = run_cli("sweep", tiny_grid, "--out", out, "--part-rows", 100, "-q")
    assert code == 1, stderr
    assert stderr.strip().splitlines()[-1] == (
        f"error: cannot write part-000000100-000000200.parquet into {out}: No space left on "
        f"device; the complete parts in {out} are kept (100 of {TINY_SIZE} rows); run the same "
        f"command with --resume to finish")
    assert sorted(os.listdir(out)) == [".lock", "part-000000000-000000100.parquet"]
    monkeypatch.setattr(engine.pq, "write_table", write_table)
    assert_resume_finishes(tiny_grid, out, tmp_path / "whole")


def assert_resume_finishes(grid: Path, out: Path, whole: Path) -> None:
    """--resume completes `out` to the rows of an uninterrupted run (into `whole`)."""
    assert run_cli("sweep", grid, "--out", out, "--resume", "-q")[0] == 0
    assert run_cli("sweep", grid, "--out", whole, "-q")[0] == 0
    assert read_rows(out).equals(read_rows(whole))


def test_an_unreachable_scheduler_is_announced_then_refused(tiny_grid, tmp_path, monkeypatch):
    from ubepsim.sweep import engine

    monkeypatch.setattr(engine, "CONNECT_TIMEOUT_S", 1)
    for args in ((), ("--dry-run",)):   # a dry run tries the cluster as a run would
        code, _, stderr = run_cli("sweep", tiny_grid, "--out", tmp_path / "out", "--scheduler",
                                  "tcp://127.0.0.1:1", "-q", *args)
        assert code == 2
        lines = stderr.strip().splitlines()
        assert lines[0] == ("connecting to the Dask scheduler at tcp://127.0.0.1:1 (giving up "
                            "after 1 s)")
        assert lines[1].startswith("error: --scheduler: cannot reach a Dask scheduler at "
                                   "tcp://127.0.0.1:1")
        assert not (tmp_path / "out").exists()    # not even an empty directory with its lock


def test_ctrl_c_says_what_was_kept_and_how_to_finish(tiny_grid, tmp_path, monkeypatch):
    from ubepsim.sweep import engine

    def interrupted(*args, **kw):
        raise KeyboardInterrupt
    monkeypatch.setattr(engine, "run_sweep", interrupted)
    code, _, stderr = run_cli("sweep", tiny_grid, "--out", tmp_path / "out", "-q")
    assert code == 130
    assert stderr.split() == (f"interrupted: the complete parts in {tmp_path / 'out'} are kept; "
                              "run the same command with --resume to finish aborted").split()


@settings(deadline=None)   # correctness only: no test depends on how fast it runs
@given(st.integers(1, 300), st.lists(st.integers(0, 300), max_size=12), st.integers(1, 64))
def test_missing_parts_cover_exactly_the_gaps_within_part_boundaries(points, cuts, part_rows):
    bounds = sorted({min(c, points) for c in cuts} | {0, points})
    done = [r for r in zip(bounds, bounds[1:]) if hash(r) % 2]  # some ranges done already
    todo = missing(done, points, part_rows)
    covered = sorted(done + todo)
    assert [a for a, _ in covered[1:]] == [b for _, b in covered[:-1]]  # no gap, no overlap
    assert covered[0][0] == 0 and covered[-1][1] == points
    assert all(a < b and (b - 1) // part_rows == a // part_rows for a, b in todo)
