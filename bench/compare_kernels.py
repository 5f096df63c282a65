"""A kernel change, measured: this checkout's kernels against another copy, paired in one run.

    git worktree add /tmp/base HEAD~1                          # the kernels before a change
    python bench/compare_kernels.py /tmp/base/kernels [--per-setting 3] [--rounds 5]
    python bench/compare_kernels.py /tmp/base/kernels --config '{"ranks": 256, "batch": 128}'

Both kernels run bench_sweep's fixed sample of sweeps/million.toml on one thread, from the
same prepared inputs, in alternating order (A B, B A, ...), after a JIT warm-up of each. A
host's speed drifts by tens of percent within the hour, so only runs this close together
compare fairly; the best of each side is the least disturbed, the median is printed beside it.
The rows of the two kernels are compared too: a change for speed must leave them identical.
--config JSON compares them on one configuration instead (its parameters, as `ubepsim run` takes
them), repeated --rounds times: a change's effect on one size, with less noise than the sample's.
"""

from __future__ import annotations

import argparse
import dataclasses
import atexit
import importlib.util
import inspect
import json
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numba
import numpy as np
import polars as pl

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_sweep import MILLION, PER_SETTING, stratified_sample  # noqa: E402

from ubepsim.kernels import dispatch as ours  # noqa: E402
from ubepsim.kernels import layout as our_layout  # noqa: E402
from ubepsim.kernels.layout import COSTS, N_OUT, OUTPUTS  # noqa: E402
from ubepsim.model import kernel_io
from ubepsim.model import memory  # noqa: E402
from ubepsim.sweep.grid import load_grid  # noqa: E402
from ubepsim.model.groups import resolve_config  # noqa: E402
from ubepsim.model.params import NAMES, columns, default_sync, make_config  # noqa: E402
from ubepsim.model.profile import FIELDS, MECHANISMS  # noqa: E402


def load_kernels(directory: Path):
    """The dispatch module of a kernels package at `directory`, as a package of its own (its
    relative imports resolve inside it), compiled into an empty Numba cache of its own: a cache
    entry names the module it was compiled in, and the directory may have been imported under
    another name before (Numba picks the cache directory when a function is decorated)."""
    init = directory / "__init__.py"
    if not (directory / "dispatch.py").is_file() or not init.is_file():
        raise SystemExit(f"{directory} is not a kernels package (no __init__.py and dispatch.py)")
    name = "other_kernels"
    spec = importlib.util.spec_from_file_location(name, init,
                                                  submodule_search_locations=[str(directory)])
    package = importlib.util.module_from_spec(spec)
    sys.modules[name] = package
    cache = tempfile.mkdtemp(prefix="ubepsim-compare-")
    atexit.register(shutil.rmtree, cache, True)
    saved, numba.config.CACHE_DIR = numba.config.CACHE_DIR, cache
    try:
        spec.loader.exec_module(package)
        return importlib.import_module(f"{name}.dispatch")
    finally:
        numba.config.CACHE_DIR = saved


# The cost columns of checkouts from before the per-source costs (docs/model.md), which kept
# them in ubepsim.model.costs rather than in kernels/layout.py.
PER_SOURCE_COSTS = ("dest_switch", "count_chain", "status_poll")


def their_costs(dispatch, costs: np.ndarray) -> np.ndarray:
    """Our cost matrix as another kernel reads it: the columns of its layout.COSTS, or for a
    checkout without kernels/layout.py ours less the per-source costs. A checkout from before
    the table of charges (layout.STORE_WORK) priced a copy's window address into copy_load
    (every copy of CANN's send loop) and copy_switch (per new destination elsewhere): both are
    made from ours."""
    layout = sys.modules.get(dispatch.__name__.rsplit(".", 1)[0] + ".layout")
    names = layout.COSTS if layout is not None else [n for n in COSTS
                                                     if n not in PER_SOURCE_COSTS]
    col = {n: costs[:, i] for i, n in enumerate(COSTS)}
    if "copy_switch" in names:
        counted = col["copy_count"]           # 1 where the send loop loads per copy
        col = {**col, "copy_load": col["copy_load"] + counted * col["dest_switch"],
               "copy_switch": (1 - counted) * col["dest_switch"]}
    return np.stack([col[n] for n in names], axis=1)


def batch_kernel(dispatch):
    """A kernels package's parallel batch kernel, found from its dispatch module:
    layer.simulate_batch (since combine), or the dispatch module's `simulate_batch`, or
    `_simulate_batch` in checkouts from before the kernel was split into stage modules."""
    package = dispatch.__name__.rsplit(".", 1)[0]
    try:
        return importlib.import_module(f"{package}.layer").simulate_batch
    except ImportError:
        pass
    for name in ("simulate_batch", "_simulate_batch"):
        if hasattr(dispatch, name):
            return getattr(dispatch, name)
    raise SystemExit(f"{dispatch.__file__} has no batch kernel (simulate_batch)")


# The output slots only the host's invariant checks read (layout.OUTPUTS): a change to the
# latency bound shows here, apart from the rows.
INVARIANT_SLOTS = ("sent", "delivered", "violations", "bound")

# Output slots renamed when the results came to be declared once (kernels/layout.py RESULTS):
# another checkout's slot names, as ours name the same result.
RENAMED_SLOTS = {"O_PH_INIT": "O_PHASE_INIT", "O_PH_SEND": "O_PHASE_SEND",
                 "O_PH_SYNC": "O_PHASE_SYNC", "O_PH_CUMSUM": "O_PHASE_CUMSUM",
                 "O_PH_REORDER": "O_PHASE_REORDER", "O_PH_REDUCE": "O_PHASE_REDUCE",
                 "O_SEND_MAX": "O_SEND_MAX_AIV", "O_SEND_MEAN": "O_SEND_MEAN_AIV",
                 "O_SEND_SPREAD": "O_SEND_SPREAD_AIV", "O_QSTEPS": "O_QSEARCH_STEPS",
                 "O_COLLISIONS": "O_SENTINEL_COLLISIONS", "O_SEND_MAX_AIV": "O_SEND_MAX_CORE",
                 "O_SEND_MEAN_AIV": "O_SEND_MEAN_CORE", "O_SEND_SPREAD_AIV": "O_SEND_SPREAD_CORE"}


def common_slots(dispatch) -> tuple[list[int], list[int]]:
    """The output slots both kernels write, as (ours, theirs): matched by name (the copies per
    hop class by their offset from O_COPIES_HOP0); for a checkout without kernels/layout.py,
    ours."""
    layout = sys.modules.get(dispatch.__name__.rsplit(".", 1)[0] + ".layout")
    if layout is None:
        return list(range(N_OUT)), list(range(N_OUT))
    # an old name means its new one only in a layout without the new one (O_SEND_MAX was
    # send_max_core's slot before it was the busiest sender's)
    slots = vars(layout)

    def now(name: str) -> str:
        """A slot's name today: renamed, step by step, while the name it took is not theirs."""
        while name in RENAMED_SLOTS and RENAMED_SLOTS[name] not in slots:
            name = RENAMED_SLOTS[name]
        return name

    pairs = {(getattr(our_layout, now(name)), i)
             for name, i in slots.items()
             if name.startswith("O_") and name not in ("O_COPIES_HOP0", "O_PHASE0")
             and isinstance(i, int) and hasattr(our_layout, now(name))}
    pairs |= {(our_layout.O_COPIES_HOP0 + h, layout.O_COPIES_HOP0 + h)
              for h in range(layout.N_HOPS)}
    ours, theirs = zip(*sorted(pairs))
    return list(ours), list(theirs)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("kernels", type=Path, help="another copy of the kernels/ directory")
    ap.add_argument("--per-setting", type=int, default=PER_SETTING,
                    help="sample configurations per setting of the cost axes (as bench_sweep)")
    ap.add_argument("--rounds", type=int, default=5, help="runs of each kernel")
    ap.add_argument("--config", type=json.loads, default=None,
                    help="one configuration (JSON) instead of the sample")
    args = ap.parse_args()
    theirs = load_kernels(args.kernels.resolve())
    numba.set_num_threads(1)
    grid = load_grid(MILLION)
    if args.config is None:
        sample = stratified_sample(grid, args.per_setting)
    else:
        # a tuned group as it runs: the kernels compare on one stated size
        config = resolve_config(make_config(args.config, grid.profile.cores,
                                            sync_default=default_sync(grid.profile)),
                                grid.profile)
        sample = pl.DataFrame([config.as_dict()]).select(NAMES)
    memory.keep_freed_memory()
    # the mechanisms at their vanishing values, so that a kernel without them gives the same
    # rows (and the comparison checks that it does)
    profile = dataclasses.replace(grid.profile, values={
        **grid.profile.values, **{k: FIELDS[k].vanish for k in MECHANISMS}})
    params, costs, chances, *shared = kernel_io.prepare(columns(sample), profile)
    order = kernel_io.kernel_order(params)        # as the model hands rows to the kernel
    sample = sample[order]
    kernels = {"A": batch_kernel(ours), "B": batch_kernel(theirs)}
    # a kernel from before tokens per die takes no batches (the sample's are all equal)
    takes = {side: len(shared) if "batch_values" in inspect.signature(k).parameters else 2
             for side, k in kernels.items()}
    inputs = {side: (params[order], cols, chances[order], *shared[:takes[side]])
              for side, cols in (("A", costs[order]), ("B", their_costs(theirs, costs[order])))}
    outs = {side: np.zeros((sample.height, n)) for side, n in
            (("A", N_OUT), ("B", getattr(sys.modules.get(theirs.__name__.rsplit(".", 1)[0]
                                                         + ".layout"), "N_OUT", N_OUT)))}
    for side, k in kernels.items():   # JIT warm-up (B always compiles: 30 s or so)
        k(*(x[:4] for x in inputs[side][:3]), *inputs[side][3:], outs[side][:4])
    times: dict[str, list[float]] = {side: [] for side in kernels}
    for r in range(args.rounds):
        for side in ("A", "B") if r % 2 == 0 else ("B", "A"):
            t = time.perf_counter()
            kernels[side](*inputs[side], outs[side])
            times[side].append(time.perf_counter() - t)
    print(f"{sample.height:,} configurations, {args.rounds} runs each, 1 thread")
    for side, where in (("A", "this checkout"), ("B", args.kernels)):
        print(f"{side} ({where}): best {min(times[side]):.3f} s, "
              f"median {statistics.median(times[side]):.3f} s")
    print(f"B / A: best {min(times['B']) / min(times['A']):.3f}, "
          f"median {statistics.median(times['B']) / statistics.median(times['A']):.3f}")
    a, b = common_slots(theirs)
    # the results, and apart the invariants' counts and bound (only the host's checks read them)
    checks = [OUTPUTS.index(n) for n in INVARIANT_SLOTS]
    results = [i for i, x in enumerate(a) if x not in checks]
    differ = np.flatnonzero((outs["A"][:, a][:, results] != outs["B"][:, b][:, results])
                            .any(axis=1))
    if len(differ):
        print(f"rows differ: {len(differ):,} of {sample.height:,} (first: sample row "
              f"{differ[0]}, {sample.row(int(differ[0]), named=True)})")
    else:
        print("rows identical")
    for i, x in enumerate(a):
        n = int((outs["A"][:, x] != outs["B"][:, b[i]]).sum()) if x in checks else 0
        if n:
            print(f"  the invariants' {OUTPUTS[x]} differs in {n:,} rows")


if __name__ == "__main__":
    main()
