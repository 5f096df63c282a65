"""Working memory: the model's estimate against what a configuration really takes.

    python bench/bench_memory.py [--timeline] [--config '{"ranks": 16384, "sync": "sw"}']

`ubepsim` refuses, before any work, configurations that could not fit in the memory a machine
has available together (ubepsim.model.memory.check_memory), from an estimate of what the kernel
allocates (kernels/dispatch.py and kernels/combine.py working_bytes; with --timeline, simulate's
marks and frame too).
This measures each configuration of a fixed set in a fresh process: its peak resident set
(VmHWM, the kernel's high-water mark, so no peak between samples is missed) after
simulating it, less the peak after a 16-rank warm-up of its op (interpreter, libraries, JIT;
with the compiled kernels in the cache, else their compile's peak hides the growth). Prints the
estimate, the measured growth and their ratio: the estimate should be at or above it (the
ingress ports' heaps are sized for every store, and the schedule's scratch for the worst
routing, pages the kernel allocates but may never touch). tests/test_memory.py runs the same
child on two configurations and holds the estimate within twice the growth.
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys

CONFIGS = (
    {"ranks": 1024, "batch": 1, "topk": 1, "sync": "sw"},
    {"ranks": 2048, "batch": 1, "topk": 1, "sync": "sw"},
    {"ranks": 4096, "batch": 1, "topk": 1, "sync": "sp"},
    {"ranks": 4096, "batch": 1, "topk": 1, "sync": "sp", "protocol": "bsp"},
    {"ranks": 256, "batch": 4096, "topk": 8, "sync": "sp"},
    {"ranks": 256, "batch": 4096, "topk": 8, "sync": "sw"},
    {"ranks": 256, "batch": 4096, "topk": 8, "sync": "sw", "protocol": "bsp"},
    {"ranks": 1024, "batch": 256, "topk": 8, "sync": "dc", "routing": "hot"},
    {"ranks": 128, "batch": 8192, "topk": 8, "experts": 1024, "sync": "tff"},
)


def child(config: dict, timeline: bool) -> None:
    import ubepsim

    # the warm-up runs the config's op, protocol and sync variant, so that its kernels are
    # compiled (or loaded from the cache) before the baseline, not counted in the growth
    ubepsim.simulate({**{k: config[k] for k in ("op", "protocol", "sync") if k in config},
                      "ranks": 16, "batch": 1, "topk": 1}, timeline=timeline)
    base = peak_rss()
    ubepsim.simulate(config, timeline=timeline)
    print(json.dumps({"grown": peak_rss() - base}))


def peak_rss() -> int:
    """This process's peak resident set, in bytes: VmHWM, its memory's own high-water mark.
    ru_maxrss keeps its parent's across the exec too (a test run's, larger than any growth
    here); it stands in where /proc is not there."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024   # KiB on Linux


def estimate(config: dict, timeline: bool) -> int:
    from ubepsim.model import memory, api
    from ubepsim.model.params import make_config
    from ubepsim.model.profile import load_profile

    from ubepsim.model.groups import resolve_config

    profile = load_profile()
    c = resolve_config(make_config(dict(config), profile.cores), profile)   # as simulate runs it
    return int(memory.working_memory(c.columns(), profile)[0]) + \
        (api.timeline_bytes(c) if timeline else 0)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--timeline", action="store_true", help="simulate with timeline=True")
    ap.add_argument("--config", type=json.loads, help="measure this configuration (a JSON "
                    "object of parameters) instead of the fixed set")
    ap.add_argument("--child", type=json.loads, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        child(args.child, args.timeline)
        return
    print(f"{'configuration':70s} {'estimate':>10s} {'measured':>10s} {'ratio':>6s}")
    for config in [args.config] if args.config else CONFIGS:
        cmd = [sys.executable, __file__, "--child", json.dumps(config)]
        out = subprocess.run(cmd + (["--timeline"] if args.timeline else []), check=True,
                             capture_output=True, text=True).stdout
        grown = json.loads(out.splitlines()[-1])["grown"]
        want = estimate(config, args.timeline)
        shown = ", ".join(f"{k} {v}" for k, v in config.items())
        print(f"{shown:70s} {want / 2**20:8.1f} MiB {grown / 2**20:8.1f} MiB "
              f"{want / grown:6.2f}", flush=True)


if __name__ == "__main__":
    main()
