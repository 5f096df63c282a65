"""Configurations that could not fit in memory are refused before any work, naming what to
lower: one configuration too large, or too many at once for the threads asked for.

The estimate itself (kernels/dispatch.py and kernels/combine.py working_bytes, each term beside
the allocation it counts) is held to the resident set of a fresh process here, on two
configurations, and measured on more by bench/bench_memory.py; elsewhere the machine's available
memory is set by the test."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import numba
import pytest

import ubepsim
from conftest import run_cli, write_grid
from ubepsim.errors import InputError
from ubepsim.model import memory
from ubepsim.sweep.grid import load_grid
from ubepsim.model.params import make_config
from ubepsim.model.profile import load_profile

MIB = 1 << 20
ROOT = Path(__file__).resolve().parent.parent
# a built-in profile whose machine has the 1,024 dies these tests take (cm384 has 256)
BIG = "three_tier"


def need(**params) -> int:
    """The model's estimate for one configuration (others at their defaults)."""
    profile = load_profile()
    config = make_config(params, profile.cores)
    return int(memory.working_memory(config.columns(), profile)[0])


@pytest.fixture
def available(monkeypatch):
    """Set the memory this process may take, in bytes."""
    def set_to(n: int) -> None:
        monkeypatch.setattr(memory, "available_memory", lambda: n)
    return set_to


def test_the_estimate_grows_with_count_messages_and_token_copies():
    # ranks^2 count messages (their growth more than doubles as ranks double, where the
    # cores' rings grow with ranks alone), ranks x batch x topk copies, each signal of sw a
    # store more
    assert need(ranks=2048, batch=1, topk=1) - need(ranks=1024, batch=1, topk=1) > \
        2.5 * (need(ranks=1024, batch=1, topk=1) - need(ranks=512, batch=1, topk=1))
    assert need(ranks=256, batch=2048, topk=8) > 1.8 * need(ranks=256, batch=1024, topk=8)
    # (a store's arrival and visibility, 16 bytes, for each copy's flag and each count's)
    assert need(ranks=256, batch=1024, topk=8, sync="sw") - \
        need(ranks=256, batch=1024, topk=8, sync="sp") >= 16 * (256 * 1024 * 8 + 256 * 256)
    # bsp signals its counts with a flag under sw, but not its copies
    assert need(ranks=256, batch=1024, topk=8, sync="sw", protocol="bsp") < \
        need(ranks=256, batch=1024, topk=8, sync="sw")


@pytest.mark.skipif(numba.config.DISABLE_JIT, reason="NUMBA_DISABLE_JIT: nothing is compiled")
@pytest.mark.parametrize("config", [
    {"ranks": 64, "batch": 1024, "topk": 8, "sync": "sw", "cumsum_cores": 4},
    {"ranks": 64, "batch": 1024, "topk": 8, "op": "combine", "protocol": "bsp"},
], ids=["dispatch", "combine"])
def test_the_estimate_holds_the_kernels_allocations(config):
    """What a fresh process's resident set grows by while simulating it (bench/bench_memory.py's
    child, after a warm-up of its op) is at most the estimate, and at least half of it: an
    allocation grown, or a term left stale beside it, shows (the estimate counts pages the
    kernel allocates but need not touch, the ports' heaps sized for every store)."""
    bench = ROOT / "bench" / "bench_memory.py"
    child = [sys.executable, str(bench), "--child", json.dumps(config)]
    subprocess.run(child, check=True, capture_output=True)   # its kernels into the cache
    out = subprocess.run(child, check=True, capture_output=True, text=True).stdout
    grown = json.loads(out.splitlines()[-1])["grown"]
    # (5% for the allocator's own: the estimate is 8-25% above on these)
    assert 0.95 * grown <= need(**config) <= 2 * grown, (grown, need(**config))


def test_one_configuration_larger_than_the_memory_is_refused_naming_ranks(available):
    config = {"ranks": 1024, "batch": 1, "topk": 1}
    available(need(**config) - 1)
    with pytest.raises(InputError, match=r"^ranks: ranks = 1024, batch = 1, topk = 1, protocol "
                       r"= ubep, sync = sp needs about [\d.]+ MiB of memory to simulate, more "
                       r"than the [\d.]+ MiB available to this process; lower ranks or batch x "
                       r"topk$"):
        ubepsim.simulate(config, BIG)
    available(need(**config))
    assert ubepsim.simulate(config, BIG)["copies_total"] == 1024


def test_a_tuned_group_is_tuned_on_the_threads_whose_copies_fit(available):
    """A configuration that fits once, not twice, tunes its group (16 sizes, the model's
    batch) on one thread, and leaves the process's thread count as it was."""
    import numba

    config = {"ranks": 512, "batch": 1, "topk": 1}
    available(need(**config) + need(**config) // 2)
    threads = numba.get_num_threads()
    row = ubepsim.simulate(config, BIG)
    assert row["cumsum_tuned"] and numba.get_num_threads() == threads
    assert row == ubepsim.simulate({**config, "cumsum_cores": row["cumsum_cores"]}, BIG) | {
        "config_id": row["config_id"], "cumsum_tuned": True}


def test_a_timeline_counts_toward_the_memory(available):
    config = {"ranks": 512, "batch": 1, "topk": 1}
    available(need(**config))
    assert ubepsim.simulate(config, BIG)["copies_total"] == 512
    with pytest.raises(InputError, match="^ranks: "):
        ubepsim.simulate(config, BIG, timeline=True)


def test_too_many_at_once_is_refused_naming_threads(available):
    big, small = {"ranks": 1024, "batch": 1, "topk": 1}, {"ranks": 16, "batch": 1, "topk": 1}
    available(2 * need(**big) - 1)
    with pytest.raises(InputError, match=r"^threads: 2 configurations simulated at once could "
                       r"need [\d.]+ MiB of memory \(ranks = 1024, .*: [\d.]+ MiB alone\), "
                       r"more than the [\d.]+ MiB available to this process; at most 1 fit at "
                       r"once$"):
        ubepsim.simulate_many([big, big, small], BIG, threads=2)
    # the largest two are what run at once: one large beside small ones fits, and so does one
    # thread
    assert ubepsim.simulate_many([big, small, small], BIG, threads=2).height == 3
    assert ubepsim.simulate_many([big, big, small], BIG, threads=1).height == 3


def test_the_cli_refuses_with_exit_2_naming_the_flag(available, tmp_path):
    available(need(ranks=1024, batch=1, topk=1) - 1)
    code, stdout, stderr = run_cli("run", "--ranks", 1024, "--batch", 1, "--topk", 1,
                                   "--profile", BIG)
    assert code == 2 and stdout == ""
    assert stderr.startswith("error: ranks (--ranks): ranks = 1024, batch = 1")
    available(2 * need(ranks=1024, batch=1, topk=1) - 1)
    code, stdout, stderr = run_cli("tune", "--ranks", 1024, "--batch", 1, "--topk", 1,
                                   "--max-cumsum-cores", 2, "--workers", 2, "--profile", BIG)
    assert code == 2 and stdout == ""
    assert stderr.startswith("error: threads (--workers): 2 configurations simulated at once")


GRID = """\
    [sweep]
    name = "big"
    seeds = [0, 1, 2]
    profile = "three_tier"

    [[zip]]
    ranks = [16, 1024]
    batch = [4096, 1]
    topk = [1, 1]
"""


def test_a_sweep_is_refused_before_it_writes_anything(available, tmp_path):
    grid = write_grid(tmp_path, GRID)
    out = tmp_path / "out"
    largest = need(ranks=1024, batch=1, topk=1)
    available(largest - 1)
    for args in ((), ("--dry-run",)):
        code, _, stderr = run_cli("sweep", grid, "--out", out, "--workers", 1, *args)
        assert code == 2, stderr
        assert stderr.startswith(f"error: {grid}: ranks: ranks = 1024, batch = 1, topk = 1, ")
        assert stderr.rstrip().endswith("; drop such points with a [sweep] filter")
        assert not out.exists()
    available(2 * largest - 1)
    code, _, stderr = run_cli("sweep", grid, "--out", out, "--workers", 2)
    assert code == 2 and stderr.startswith("error: --workers: 2 configurations simulated at "
                                           "once") and "at most 1 fit at once" in stderr
    assert not out.exists()
    code, _, stderr = run_cli("sweep", grid, "--out", out, "--workers", 1)
    assert code == 0, stderr


def test_a_grid_is_checked_point_by_point_when_its_corner_does_not_fit(available, tmp_path):
    # The corner (ranks 1024 with batch 4096) bounds every point, and is larger than any point
    # of the zip: the grid's own points decide.
    grid = load_grid(write_grid(tmp_path, GRID))
    largest = need(ranks=1024, batch=1, topk=1)
    corner = need(ranks=1024, batch=4096, topk=1)
    assert corner > 2 * largest
    grid.check_memory([(1, largest, "here")])
    with pytest.raises(InputError, match="^.*: ranks: ranks = 1024, batch = 1, "):
        grid.check_memory([(1, largest - 1, "here")])
    # three seeds of the largest: three at once need three of them; one walk serves every limit
    grid.check_memory([(3, 3 * largest, "here"), (1, largest, "there")])
    with pytest.raises(InputError, match="available to there; at most 2 fit at once"):
        grid.check_memory([(1, largest, "here"), (3, 3 * largest - 1, "there")])


def test_a_clusters_workers_are_held_to_their_memory_limit(tmp_path):
    from distributed import LocalCluster

    grid = write_grid(tmp_path, GRID)
    out = tmp_path / "out"
    largest = need(ranks=1024, batch=1, topk=1)
    # workers in this process, reached over TCP as a remote cluster would be
    with LocalCluster(n_workers=1, threads_per_worker=1, processes=False, protocol="tcp",
                      host="127.0.0.1", memory_limit=int(1.5 * largest),
                      dashboard_address=None) as cluster:
        sweep = ("sweep", grid, "--out", out, "--scheduler", cluster.scheduler_address)
        for args in ((), ("--dry-run",)):
            code, _, stderr = run_cli(*sweep, "--workers", 2, *args)
            assert code == 2, stderr
            error = stderr.splitlines()[-1]   # after the wait's announcement
            assert error.startswith("error: --workers: 2 configurations simulated at once")
            assert re.search(r"available to Dask worker tcp://127\.0\.0\.1:\d+ \(its "
                             r"memory_limit\); at most 1 fit at once$", error)
        code, stdout, stderr = run_cli(*sweep, "--workers", 1, "--dry-run")
        assert code == 0, stderr
        assert stdout.startswith("big: ")
    assert not out.exists()


@pytest.mark.parametrize("version", ["v2", "v1"])
def test_a_containers_limit_bounds_the_memory_available(tmp_path, monkeypatch, version):
    """Inside a container or a batch job the machine's memory is not the process's: each limit
    of its cgroup and the cgroups above it, less their usage (reclaimable page cache aside),
    is what it can take. Here the job's cgroup has the limit and the process sits in a step
    below it, as under Slurm."""
    v2 = version == "v2"
    mount = tmp_path / version
    limit, usage, inactive = (("memory.max", "memory.current", "inactive_file") if v2 else
                              ("memory.limit_in_bytes", "memory.usage_in_bytes",
                               "total_inactive_file"))
    job, step = mount / "job", mount / "job" / "step"
    step.mkdir(parents=True)
    monkeypatch.setattr(memory, "CGROUPS", ((str(mount), "" if v2 else "memory", limit, usage,
                                             inactive),))
    proc = tmp_path / "cgroup"
    proc.write_text("0::/job/step\n" if v2 else "5:cpu,cpuacct:/\n4:memory:/job/step\n")
    monkeypatch.setattr(memory, "PROC_CGROUP", proc)
    for cgroup, limit_value in ((job, f"{300 * MIB}"), (step, "max" if v2 else f"{1 << 62}")):
        (cgroup / limit).write_text(limit_value + "\n")
        (cgroup / usage).write_text(f"{200 * MIB}\n")
        (cgroup / "memory.stat").write_text(f"active_file {90 * MIB}\n{inactive} {50 * MIB}\n"
                                            f"anon {60 * MIB}\n")
    assert memory.available_memory() == 150 * MIB
    (job / limit).write_text(f"{100 * MIB}\n")   # over its limit: nothing more to take
    assert memory.available_memory() == 0
    # no limit anywhere: the machine's available memory, far above what the cgroups use
    (job / limit).write_text("max\n" if v2 else f"{(1 << 63) - 4096}\n")
    assert memory.available_memory() > 300 * MIB
    # another process's cgroup is not this one's
    proc.write_text("0::/\n" if v2 else "4:memory:/\n")
    (job / limit).write_text(f"{100 * MIB}\n")
    assert memory.available_memory() > 300 * MIB
