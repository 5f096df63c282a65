"""Kernel speed: nanoseconds per token copy on one core, and the speed-up over the twin.

    python bench/bench_kernel.py [--ranks 256 --batch 128 --topk 8 --experts 256] [--repeat 7]
    python bench/bench_kernel.py --no-twin --skew '{"routing": "lognormal", "lognormal_sigma": 1}'
    python bench/bench_kernel.py --no-twin --profile h800      # every protocol on GPUs (sync dc)

For each protocol: the kernel's time for one configuration (one thread, after JIT warm-up, kernel
only: inputs are prepared once), the best of --repeat runs (other load on the machine only ever
slows a run down, so the best is the least disturbed; the median is printed beside it), and the
plain-Python twin's time for the same configuration, measured in the same run. Prints one line
per protocol. --skew JSON adds parameters (a routing's) and times the skewed configuration beside
the uniform one, alternating, with their ratio: the per-copy cost of skew at the same copies.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

import numba
import numpy as np

from ubepsim import reference
from ubepsim.kernels.layer import simulate_batch
from ubepsim.kernels.layout import N_OUT
from ubepsim.model import kernel_io, memory
from ubepsim.model.params import Protocol, default_sync, make_config
from ubepsim.model.profile import load_profile


def kernel_seconds(config, profile, repeat: int) -> tuple[float, float]:
    """(best, median) of `repeat` timed runs."""
    params, costs, chances, *shared = kernel_io.prepare(config.columns(), profile)
    out = np.zeros((1, N_OUT))
    memory.keep_freed_memory()
    simulate_batch(params, costs, chances, *shared, out)    # warm-up (JIT)
    times = []
    for _ in range(repeat):
        t = time.perf_counter()
        simulate_batch(params, costs, chances, *shared, out)
        times.append(time.perf_counter() - t)
    return min(times), statistics.median(times)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ranks", type=int, default=256)
    ap.add_argument("--batch", type=int, default=128)
    ap.add_argument("--topk", type=int, default=8)
    ap.add_argument("--experts", type=int, default=256)
    ap.add_argument("--repeat", type=int, default=15)
    ap.add_argument("--no-twin", action="store_true", help="skip the twin (slow)")
    ap.add_argument("--skew", type=json.loads, default=None,
                    help="parameters of a skewed routing (JSON), timed beside uniform's")
    ap.add_argument("--profile", default="cm384", help="a built-in profile or a TOML file")
    ap.add_argument("--sync", default=None,
                    help="the Data-as-Flag variant where a protocol reads it (default: the "
                         "profile's, sp, or dc where its fabric refuses sp as h800's does)")
    args = ap.parse_args()
    numba.set_num_threads(1)
    profile = load_profile(args.profile)
    print(f"ranks {args.ranks}, batch {args.batch}, top-{args.topk}, {args.experts} experts, "
          f"1 thread")
    for protocol in (p.name for p in Protocol):
        # UBEP at a group of one AIV, as every earlier figure of bench/README.md ran it (the
        # kernel's time per copy, not a tuned size's)
        cfg = make_config({"ranks": args.ranks, "batch": args.batch, "topk": args.topk,
                           "experts": args.experts, "protocol": protocol, "sync": args.sync,
                           "cumsum_cores": 1}, profile.cores, sync_default=default_sync(profile))
        copies = cfg.ranks * cfg.batch * cfg.topk
        k, median = kernel_seconds(cfg, profile, args.repeat)
        line = (f"{protocol:9s} kernel {k * 1e3:8.2f} ms  {k / copies * 1e9:7.1f} ns/copy"
                f"  (median {median / copies * 1e9:.1f})")
        if args.skew is not None:
            skewed = make_config({**cfg.as_dict(), **args.skew}, profile.cores)
            s, s_median = kernel_seconds(skewed, profile, args.repeat)
            k, median = kernel_seconds(cfg, profile, args.repeat)    # again, after it
            line = (f"{protocol:9s} uniform {k / copies * 1e9:7.1f} ns/copy, skewed "
                    f"{s / copies * 1e9:7.1f} (medians {median / copies * 1e9:.1f}, "
                    f"{s_median / copies * 1e9:.1f}): {s / k:.2f}x")
        if not args.no_twin:
            t = time.perf_counter()
            reference.simulate(cfg, profile)
            twin = time.perf_counter() - t
            line += f"  twin {twin:7.2f} s  speed-up {twin / k:7.0f}x"
        print(line, flush=True)


if __name__ == "__main__":
    main()
