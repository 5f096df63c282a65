"""Where the kernel's time goes: Linux perf samples attributed to its compiled functions.

    perf record -e cpu-clock -F 999 -o perf.data python bench/profile_kernel.py
    perf report -i perf.data --sort sym

Numba's machine code lives in anonymous memory with no symbols, so perf shows it as bare
addresses. This script compiles the batch kernel afresh (in a temporary Numba cache: functions
loaded from a cache carry no list of what they hold), writes /tmp/perf-PID.map, the file in
which perf looks up the names of JIT code (one line per function: start, size, name), and then
runs bench_sweep's fixed sample of sweeps/million.toml on one thread --repeat times. The samples
of the first compilation land in libllvmlite and Python, apart from the kernel's.

--config JSON profiles one configuration instead (its parameters, as `ubepsim run` takes them),
run --repeat times: one configuration's instruction-level profile is cleaner than the sample's,
whose costliest points dominate anyway.

--dump DIR also writes each kernel function's machine code (NAME.bin) with its start address,
for an instruction-level view: `objdump -D -b binary -m i386:x86-64 --adjust-vma=START NAME.bin`
beside the sample addresses of `perf script -F ip,sym`.
"""

from __future__ import annotations

import argparse
import atexit
import ctypes
import json
import os
import re
import shutil
import sys
import tempfile
import time
from pathlib import Path

# before Numba is imported: a cache of our own, empty, so that the kernel is compiled here
os.environ["NUMBA_CACHE_DIR"] = tempfile.mkdtemp(prefix="ubepsim-profile-")
atexit.register(shutil.rmtree, os.environ["NUMBA_CACHE_DIR"], True)

import numba  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_sweep import MILLION, PER_SETTING, stratified_sample  # noqa: E402

import polars as pl  # noqa: E402

from ubepsim.kernels import layer  # noqa: E402
from ubepsim.sweep.grid import load_grid  # noqa: E402
from ubepsim.model.api import simulate_table  # noqa: E402
from ubepsim.model.groups import resolve_config  # noqa: E402
from ubepsim.model.params import SCHEMA, make_config  # noqa: E402

MAX_SIZE = 1 << 20   # no function is this long: a longer gap holds code not ours


def short_name(symbol: str) -> str:
    """The qualified name in an Itanium-mangled Numba symbol (`_ZN7ubepsim7kernels6egress12
    egress_phaseB4v217...` -> ubepsim.kernels.egress.egress_phase); others as they are."""
    if not symbol.startswith("_ZN"):
        return symbol
    parts, i = [], 3
    while (m := re.match(r"\d+", symbol[i:])):
        n = int(m.group())
        i += len(m.group())
        parts.append(symbol[i:i + n])
        i += n
    return ".".join(parts) or symbol


def kernel_functions() -> list[tuple[int, int, str]]:
    """(start, size, name) of every function compiled into the batch kernel, by address. A
    function ends where the next begins, at the end of its mapping, or MAX_SIZE on."""
    starts = []
    for cres in (c for kernel in layer.BATCH.values() for c in kernel.overloads.values()):
        library = cres.library
        for f in library._final_module.functions:
            if not f.is_declaration and (addr := library.get_pointer_to_function(f.name)):
                starts.append((addr, short_name(f.name)))
    starts.sort()
    ends = [a for a, _ in starts[1:]] + [starts[-1][0] + MAX_SIZE]
    mapped = [tuple(int(x, 16) for x in line.split()[0].split("-"))
              for line in open("/proc/self/maps")]
    return [(a, min(end, a + MAX_SIZE, *(hi for lo, hi in mapped if lo <= a < hi)) - a, name)
            for (a, name), end in zip(starts, ends)]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--per-setting", type=int, default=PER_SETTING,
                    help="sample configurations per setting of the cost axes (as bench_sweep)")
    ap.add_argument("--repeat", type=int, default=10, help="runs of the sample")
    ap.add_argument("--dump", type=Path, help="write each kernel function's machine code here")
    ap.add_argument("--config", type=json.loads, help="profile this configuration instead of "
                    "the sample (a JSON object of parameters)")
    args = ap.parse_args()
    numba.set_num_threads(1)
    grid = load_grid(MILLION)
    if args.config is not None:
        # a tuned group resolved first: the kernel's profile, not the tuning's
        row = resolve_config(make_config(args.config, grid.profile.cores), grid.profile)
        sample = pl.DataFrame([row.as_dict()], schema=SCHEMA)
    else:
        sample = stratified_sample(grid, args.per_setting)
    t = time.perf_counter()
    simulate_table(sample[:16], grid.profile, threads=1)      # compiles the kernel
    print(f"compiled in {time.perf_counter() - t:.1f} s", flush=True)
    functions = kernel_functions()
    with open(f"/tmp/perf-{os.getpid()}.map", "w") as f:
        f.writelines(f"{a:x} {size:x} {name}\n" for a, size, name in functions)
    if args.dump:
        args.dump.mkdir(parents=True, exist_ok=True)
        for a, size, name in functions:
            if ".kernels." in name:
                (args.dump / f"{name}.bin").write_bytes(ctypes.string_at(a, size))
                (args.dump / f"{name}.start").write_text(f"{a:#x}\n")
    print(f"{len(functions)} functions mapped in /tmp/perf-{os.getpid()}.map; "
          f"{sample.height:,} configurations x {args.repeat}", flush=True)
    t = time.perf_counter()
    for _ in range(args.repeat):
        simulate_table(sample, grid.profile, threads=1)
    took = time.perf_counter() - t
    print(f"{took:.1f} s: {sample.height * args.repeat / took:,.0f} configurations/s on 1 thread")


if __name__ == "__main__":
    main()
