"""Sweep throughput, overhead and memory, measured on sweeps/million.toml.

    python bench/bench_sweep.py                  # sample throughput, 1 and 2 threads; overheads
    python bench/bench_sweep.py --full 600       # also run the real sweep for up to 600 s

1. Throughput: a fixed sample of the million grid through `simulate_table`, with 1 and 2
   threads, after a JIT warm-up, the best of --repeat alternating runs: configurations per
   second and token copies per second per core. The sample is stratified: --per-setting
   configurations (a seeded draw, in random order) of each setting of the axes that decide a
   configuration's cost (COST_AXES), each with its sync variants, which a sweep's batch
   simulates on one schedule. Each setting holds the same share of the grid, so the sample's
   rate estimates the whole grid's without the luck of drawing its few costliest
   configurations: a plain draw of 2,000 points overstated the whole run's rate by 15%.
2. Overheads: expanding and validating the whole grid (load_grid), and writing a full
   million-row dataset in parts (the sample's result rows repeated to the grid's size, written
   by the engine's own write_part), against the sweep time the measured rate predicts.
3. --full SECONDS: `ubepsim sweep sweeps/million.toml --workers 2` in a subprocess, stopped
   after SECONDS if it is not done (then resumed by hand with --resume). Peak resident memory is
   the child's ru_maxrss (getrusage(RUSAGE_CHILDREN) after it exits: the kernel's high-water
   mark of its resident set, sampled by nothing, so no peak is missed).
"""

from __future__ import annotations

import argparse
import os
import resource
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import polars as pl

from ubepsim.sweep.engine import PART_ROWS, metadata, provenance, write_part
from ubepsim.sweep.grid import load_grid
from ubepsim.model.api import simulate_table
from ubepsim.model.params import NAMES

ROOT = Path(__file__).resolve().parent.parent
MILLION = ROOT / "sweeps" / "million.toml"
COST_AXES = ["ranks", "experts", "batch", "topk"]   # cost grows with ranks * batch * topk
PER_SETTING = 3


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--per-setting", type=int, default=PER_SETTING,
                    help="sample configurations per setting of " + ", ".join(COST_AXES)
                    + ", each with its sync variants")
    ap.add_argument("--repeat", type=int, default=3, help="timed runs per thread count")
    ap.add_argument("--full", type=float, default=None, metavar="SECONDS",
                    help="also run the whole million grid, stopping it after SECONDS")
    args = ap.parse_args()

    print(f"load average before: {os.getloadavg()[0]:.2f} (other work skews the timings)")
    started = time.perf_counter()
    grid = load_grid(MILLION)
    expand_s = time.perf_counter() - started
    print(f"grid: {grid.size:,} configurations ({grid.product:,} points in the product), "
          f"expanded and validated in {expand_s:.2f} s")

    sample = stratified_sample(grid, args.per_setting)
    n = sample.height
    print(f"sample: {n:,} configurations: per setting of {', '.join(COST_AXES)}, "
          f"{args.per_setting} drawn, each with its sync variants")
    simulate_table(sample[:16], grid.profile, threads=1)  # JIT warm-up (or cache load)
    seconds = {1: [], 2: []}
    for _ in range(args.repeat):  # alternate, keep the best: other load only slows a run down
        for threads in seconds:
            t = time.perf_counter()
            rows = simulate_table(sample, grid.profile, threads=threads)
            seconds[threads].append(time.perf_counter() - t)
    copies = int(rows["copies_total"].sum())
    rates = {}
    for threads, runs in seconds.items():
        best = min(runs)
        rates[threads] = n / best
        print(f"{threads} thread(s): {n:,} configurations in {best:.2f} s (best of "
              f"{len(runs)}): {rates[threads]:,.1f} configurations/s, "
              f"{rates[threads] / threads:,.1f} per core; "
              f"{copies / best / threads:,.0f} token copies/s per core")
    print(f"2 threads / 1 thread: {rates[2] / rates[1]:.2f}x")

    predicted = grid.size / rates[2]
    write_s = time_writing(grid, rows)
    print(f"whole grid at the 2-thread rate: {predicted / 60:,.1f} min (target 10 min)")
    print(f"Parquet writing of {grid.size:,} rows: {write_s:.2f} s; with expansion "
          f"{100 * (expand_s + write_s) / (predicted + expand_s + write_s):.2f}% of the sweep "
          f"(target < 5%)")

    if args.full is not None:
        run_full(args.full)
    print(f"load average after: {os.getloadavg()[0]:.2f}")


def stratified_sample(grid, per_setting: int) -> pl.DataFrame:
    """per_setting configurations of each setting of COST_AXES, drawn with a fixed seed, each
    with its sync variants (the grid's points that differ from it only in sync), which a sweep's
    batch holds too and simulates on one schedule; shuffled."""
    points = grid.frame(0, grid.size).with_row_index("point")
    families = points.group_by([n for n in NAMES if n != "sync"], maintain_order=True).agg(
        "point")
    settings = families.group_by(COST_AXES, maintain_order=True).agg(pl.col("point"))["point"]
    sizes = {len(s) for s in settings}
    if len(sizes) != 1:
        raise SystemExit(f"the grid's settings of {COST_AXES} are not equal in size: {sizes}")
    if not 1 <= per_setting <= min(sizes):
        raise SystemExit(f"--per-setting must lie in [1, {min(sizes)}], got {per_setting}")
    rng = np.random.default_rng(0)
    index = np.concatenate([np.concatenate(rng.choice(s.to_numpy(), size=per_setting,
                                                      replace=False))
                            for s in settings])
    return points[rng.permutation(index)].drop("point")


def time_writing(grid, rows: pl.DataFrame) -> float:
    """Write grid.size result rows as the engine does (parts of PART_ROWS, atomic rename)."""
    reps = -(-PART_ROWS // rows.height)
    part = pl.concat([rows] * reps)[:PART_ROWS]
    meta = metadata(grid)
    with tempfile.TemporaryDirectory() as tmp:
        t = time.perf_counter()
        for first in range(0, grid.size, PART_ROWS):
            stop = min(grid.size, first + PART_ROWS)
            write_part(Path(tmp), first, stop, part[: stop - first], meta)
        seconds = time.perf_counter() - t
        size = sum(p.stat().st_size for p in Path(tmp).glob("*.parquet"))
        print(f"dataset: {size / 2**20:,.0f} MiB in {len(list(Path(tmp).glob('*.parquet')))} "
              f"parts; provenance keys {sorted(provenance(next(Path(tmp).glob('*.parquet'))))}")
    return seconds


def run_full(limit: float) -> None:
    out = Path(tempfile.mkdtemp(prefix="million-"))
    shutil.rmtree(out)
    cmd = [sys.executable, "-c", "from ubepsim.cli import entry; entry()", "sweep", str(MILLION),
           "--out", str(out), "--workers", "2", "--quiet"]
    print("running:", " ".join(cmd[3:]))
    t0 = time.time()
    proc = subprocess.Popen(cmd)
    try:
        proc.wait(timeout=limit)
    except subprocess.TimeoutExpired:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    seconds = time.time() - t0
    peak = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 2**20  # KiB -> GiB
    parts = list(out.glob("*.parquet"))
    done = pl.scan_parquet(out / "*.parquet").select(pl.len()).collect().item() if parts else 0
    # Up to the last complete part: the work of a part cut short by the stop is not counted.
    until = max((p.stat().st_mtime for p in parts), default=t0 + seconds) - t0
    state = "finished" if proc.returncode == 0 else f"stopped after {limit:.0f} s (SIGKILL)"
    print(f"full run {state}: {done:,} rows in {len(parts)} complete parts after {until:.0f} s "
          f"({done / until:,.1f} configurations/s); peak resident memory {peak:.2f} GiB; "
          f"dataset in {out} (resume with --resume)")


if __name__ == "__main__":
    main()
