"""Combine's kernel time per token copy against dispatch's, paired in one run.

    python bench/compare_ops.py [--per-setting 3] [--rounds 5] [--op combine]

The bench sample of sweeps/million.toml (bench_sweep's stratified sample), simulated as
dispatch and as --op (combine by default, or layer), on one thread, from prepared inputs, in
alternating order (A B, B A, ...) after a JIT warm-up: the same configurations and token copies
on both sides, so the ratio of the times is the ratio per copy. The best of each side is the
least disturbed run; the median is printed beside it. Only a paired run compares fairly: a
host's speed drifts by tens of percent within the hour (bench/README.md).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import numba
import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_sweep import MILLION, PER_SETTING, stratified_sample  # noqa: E402

from ubepsim.kernels.layer import simulate_batch  # noqa: E402
from ubepsim.kernels.layout import N_OUT  # noqa: E402
from ubepsim.model import kernel_io
from ubepsim.model import memory  # noqa: E402
from ubepsim.sweep.grid import load_grid  # noqa: E402
from ubepsim.model.params import Op, canonical, columns  # noqa: E402


def inputs(sample, op: str, profile):
    """The kernel's inputs for the sample run as `op`, in the order the model hands them."""
    cols = columns(sample)
    cols["op"] = np.full(sample.height, Op[op].value)
    # the sample's points made configurations of `op` (what it does not read at its defaults)
    params, costs, chances, *shared = kernel_io.prepare(canonical(cols), profile)
    order = kernel_io.kernel_order(params)
    return params[order], costs[order], chances[order], *shared


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--per-setting", type=int, default=PER_SETTING,
                    help="sample configurations per setting of the cost axes (as bench_sweep)")
    ap.add_argument("--rounds", type=int, default=5, help="runs of each op")
    ap.add_argument("--op", choices=("combine", "layer"), default="combine",
                    help="the op timed against dispatch")
    args = ap.parse_args()
    numba.set_num_threads(1)
    grid = load_grid(MILLION)
    sample = stratified_sample(grid, args.per_setting)
    memory.keep_freed_memory()
    copies = int((sample["ranks"].cast(int) * sample["batch"] * sample["topk"]).sum())
    sides = {"A": "dispatch", "B": args.op}
    data = {side: inputs(sample, op, grid.profile) for side, op in sides.items()}
    outs = {side: np.zeros((sample.height, N_OUT)) for side in sides}
    for side in sides:   # JIT warm-up
        simulate_batch(*(x[:4] for x in data[side][:3]), *data[side][3:], outs[side][:4])
    times: dict[str, list[float]] = {side: [] for side in sides}
    for r in range(args.rounds):
        for side in ("A", "B") if r % 2 == 0 else ("B", "A"):
            t = time.perf_counter()
            simulate_batch(*data[side], outs[side])
            times[side].append(time.perf_counter() - t)
    print(f"{sample.height:,} configurations, {copies:,} token copies, {args.rounds} runs each, "
          f"1 thread")
    for side, op in sides.items():
        best, median = min(times[side]), statistics.median(times[side])
        print(f"{side} ({op}): best {best:.3f} s ({best / copies * 1e9:.1f} ns per copy), "
              f"median {median:.3f} s")
    print(f"B / A per copy: best {min(times['B']) / min(times['A']):.3f}, "
          f"median {statistics.median(times['B']) / statistics.median(times['A']):.3f}")


if __name__ == "__main__":
    main()
