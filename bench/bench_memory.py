"""Working memory: the model's estimate against what a configuration really takes.

    python bench/bench_memory.py [--timeline] [--config '{"ranks": 16384, "sync": "sw"}']

`ubepsim` refuses, before any work, configurations that could not fit in the memory a machine
has available together (ubepsim.model.memory.check_memory), from an estimate of what the kernel
allocates (kernels/dispatch.py and kernels/combine.py working_bytes; with --timeline, simulate's
marks and frame too).
This measures each configuration of a fixed set in a fresh process: its peak resident set
(ru_maxrss, the kernel's high-water mark, so no peak between samples is missed) after
simulating it, less the peak after a 16-rank warm-up (interpreter, libraries, JIT). Prints the
estimate, the measured growth and their ratio: the estimate should be at or above it (the
ingress sort is sized for the worst routing, every copy a die can receive sent to one die).
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

    ubepsim.simulate({"ranks": 16, "batch": 1, "topk": 1}, timeline=timeline)
    base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    ubepsim.simulate(config, timeline=timeline)
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    print(json.dumps({"grown": (peak - base) * 1024}))   # ru_maxrss is in KiB on Linux


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
