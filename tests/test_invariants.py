"""The invariant checks can fail: the kernel with a fault put into one of its stages trips each.

Every row is checked (every copy sent and delivered once, none read before it is visible,
latency not below the bandwidth and latency bound, the row written at all); a check that never
fires would pass a broken model as well. The faults are put in without touching the kernel's
source: the kernel package is loaded a second time uncompiled (Numba's DISABLE_JIT), where each
stage looks up the stages it calls in its own module when it runs, and one stage is swapped
there for a faulty wrapper of itself. Uncompiled, a small configuration takes a fraction of a
second.
"""

from __future__ import annotations

import importlib.util
import inspect
import sys
from pathlib import Path
from types import SimpleNamespace

import numba
import numpy as np
import polars as pl
import pytest

from ubepsim.kernels import layer
from ubepsim.kernels.layout import (K_COPY, K_FLAG, N_OUT, O_BOUND, O_COPIES_TOTAL, O_DELIVERED,
                                    O_LATENCY, O_SENT, O_VIOLATIONS, P_SEED, RECEIVE_CUMSUM)
from ubepsim.model import kernel_io, api
from ubepsim.model.params import NAMES, make_config, polars_dtype
from ubepsim.model.profile import load_profile

PROTOCOLS = ("bsp", "ubep", "deepep_ll")

DIES, AIVS, BATCH, TOPK = 8, 8, 64, 4
# the modules in which a fault swaps a stage it calls
STAGES = ("dispatch", "receive", "layer", "combine", "reduce")


@pytest.fixture(scope="module")
def python_kernels():
    """The kernel package loaded again as plain Python (its relative imports inside it): its
    stage modules by name."""
    directory = Path(layer.__file__).resolve().parent
    name = "python_kernels"
    spec = importlib.util.spec_from_file_location(name, directory / "__init__.py",
                                                  submodule_search_locations=[str(directory)])
    sys.modules[name] = importlib.util.module_from_spec(spec)
    saved = numba.config.DISABLE_JIT
    # read as each function is decorated; on only while the copy is imported, since Numba's
    # compiler reads it too (the compiled kernel may be compiled during these tests)
    numba.config.DISABLE_JIT = True
    try:
        spec.loader.exec_module(sys.modules[name])
        stages = SimpleNamespace(**{m: importlib.import_module(f"{name}.{m}") for m in STAGES})
    finally:
        numba.config.DISABLE_JIT = saved
    try:
        yield stages
    finally:
        for module in [m for m in sys.modules if m == name or m.startswith(name + ".")]:
            del sys.modules[module]


def before(module, name, change):
    """A fault: `module.name` called with its arguments (by name) changed by `change` first."""
    real = getattr(module, name)

    def faulty(*args):
        bound = inspect.signature(real).bind(*args)
        change(bound.arguments)
        return real(*bound.args)
    return module, name, faulty


def after(module, name, change):
    """A fault: `module.name` as it is, then `change(its arguments, its result)` returned."""
    real = getattr(module, name)

    def faulty(*args):
        return change(inspect.signature(real).bind(*args).arguments, real(*args))
    return module, name, faulty


def unless_seed_1(module, name):
    """A fault: `module.name` skipped for a configuration of seed 1, its row left as it was
    (zero): what an exception raised on a worker thread of the parallel loop leaves, which
    Numba drops."""
    real = getattr(module, name)

    def faulty(p, *rest):
        if p[P_SEED] != 1:
            real(p, *rest)
    return module, name, faulty


def read_from_the_copy_before(lasts):
    """A change of a receiver's arguments: the copies at slots lasts(its arguments) read from
    the store of the copy before each."""
    def change(args):
        stores = args["stores"]
        copy_ref = stores.copy_ref.copy()
        for last in lasts(args, len(stores.bfill)):
            copy_ref[last, 0] = copy_ref[last - 1, 0]
        args["stores"] = stores._replace(copy_ref=copy_ref)
    return change


def receiver(protocol):
    """The stage that takes a die's received copies: Token-Reordering, or fixed slots' pair
    receive (deepep_ll)."""
    return "pair_receive" if protocol == "deepep_ll" else "reorder"


def ecnt(args):
    """The receive counts a receiving stage is handed (pair_receive: in its schedule)."""
    return args["ecnt"] if "ecnt" in args else args["sched"].ecnt


def unpolled(args):
    """Copies read without polling their signals (and the offsets), as bsp reads after its
    SyncAlls, or without waiting for them behind their counts or statuses (ordered): reorder's
    mechanisms, pair_receive's and reduce_tokens' flags."""
    if "m" in args:
        args["m"] = args["m"]._replace(receive=RECEIVE_CUMSUM, signalled_copies=0)
    else:
        args["signalled"] = args["ordered"] = 0


def early_ends(args, result):
    """Each reduction ends at a sixteenth of its time: a quarter was not enough once the ports
    ran at their hardware figure, where the reduction is a small part of the latency."""
    delivered, violations, collisions, ends = result
    return delivered, violations, collisions, ends // 16


def last_copy_a_flag(args, end):
    """Each sending AIV's last copy made a flag store: sent, but not as a copy."""
    prog, bounds = args["prog"], args["bounds"]
    for a in range(args["C"], len(bounds)):
        for x in range(bounds[a, 1] - 1, bounds[a, 0] - 1, -1):
            if prog[x] & 3 == K_COPY:
                prog[x] += K_FLAG - K_COPY
                break
    return end


# Faults of dispatch: each die's receivers read its last received copy from the store of the
# copy before it (the last copy is never taken); receivers read each copy without polling its
# signal (or, under ubep, the offsets); every die's end is taken a quarter of the way; each
# token AIV sends its last copy as a flag; a configuration of seed 1 is abandoned before its
# dispatch.
FAULTS = {
    "skip": lambda k, p: before(k.receive, receiver(p), read_from_the_copy_before(
        lambda args, dies: [ecnt(args)[(d + 1) * (len(ecnt(args)) - 1) // dies] - 1
                            for d in range(dies)])),
    "early": lambda k, p: before(k.receive, receiver(p), unpolled),
    "short": lambda k, p: after(k.dispatch, "receive", early_ends),
    "miskind": lambda k, p: after(k.dispatch, "token_programs", last_copy_a_flag),
    "abandoned": lambda k, p: unless_seed_1(k.layer, "dispatch"),
}
abandoned = FAULTS["abandoned"]

# The same faults on combine's return path (and a layer's): each source's last token's last
# copy read from the store of the copy before it; tokens reduced unpolled; combine's ends taken
# a quarter of the way; each AIV's last returned copy a flag; seed 1's combine or layer
# abandoned.
RETURN_FAULTS = {
    "skip_return": lambda k: before(k.reduce, "reduce_tokens", read_from_the_copy_before(
        lambda args, dies: [(d + 1) * (len(args["stores"].copy_ref) // dies) - 1
                            for d in range(dies)])),
    "early_return": lambda k: before(k.reduce, "reduce_tokens", unpolled),
    "short_return": lambda k: after(k.combine, "reduce", early_ends),
    "miskind_return": lambda k: after(k.combine, "token_programs", last_copy_a_flag),
    "abandoned_return": lambda k: [unless_seed_1(k.layer, "combine"),
                                   unless_seed_1(k.layer, "layer")],
}


def config(protocol, seed=1, op="dispatch"):
    return make_config({"ranks": DIES, "batch": BATCH, "topk": TOPK, "cores": AIVS,
                        "cumsum_cores": 1, "protocol": protocol, "seed": seed, "op": op}, 48)


def run(kernel, protocol, op="dispatch"):
    """A configuration's output row through `kernel` (a layer module), and its host check."""
    profile = load_profile()
    cols = config(protocol, op=op).columns()
    params, costs, chances, *shared = kernel_io.prepare(cols, profile)
    out = np.zeros((1, N_OUT))
    with np.errstate(over="ignore"):   # uncompiled, the generator's uint64 products wrap
        kernel.simulate_batch(params, costs, chances, *shared, out)
    return out[0], lambda: kernel_io.result_columns(out, cols, costs, profile)


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_the_uncompiled_kernel_is_the_kernel(python_kernels, protocol):
    good, check = run(python_kernels.layer, protocol)
    check()
    assert np.array_equal(good, run(layer, protocol)[0])


@pytest.mark.parametrize("protocol", PROTOCOLS)
@pytest.mark.parametrize("fault", list(FAULTS))
def test_each_fault_trips_its_check(python_kernels, monkeypatch, fault, protocol):
    good, _ = run(layer, protocol)
    monkeypatch.setattr(*FAULTS[fault](python_kernels, protocol))
    bad, results = run(python_kernels.layer, protocol)
    total = good[O_COPIES_TOTAL]
    assert good[O_SENT] == good[O_DELIVERED] == total == DIES * BATCH * TOPK
    assert good[O_VIOLATIONS] == 0 and good[O_LATENCY] >= good[O_BOUND]
    # ubep's CalCumSum group (one AIV) neither sends nor reorders copies
    token_cores = AIVS - 1 if protocol == "ubep" else AIVS
    if fault == "skip":         # one copy per die
        assert bad[O_SENT] == total
        assert bad[O_DELIVERED] == total - DIES
    elif fault == "early":
        # bsp reads after the SyncAlls, not after each copy's signal; deepep_ll's counts leave
        # their port behind its copies, and come later: read without waiting, they are there
        if protocol in ("bsp", "deepep_ll"):
            assert np.array_equal(bad, good)
            return
        assert bad[O_VIOLATIONS] > 0
    elif fault == "short":
        assert bad[O_LATENCY] < bad[O_BOUND]
    elif fault == "abandoned":   # consistent in itself: nothing dispatched, sent or late
        assert not bad.any()
    else:                       # one copy per die and sending AIV
        assert bad[O_SENT] == total - DIES * token_cores
        assert bad[O_DELIVERED] == total - DIES * token_cores
    with pytest.raises(kernel_io.KernelFailure, match="did not finish row 0" if fault == "abandoned"
                       else "invariant violated"):
        results()


@pytest.mark.parametrize("op", ["combine", "layer"])
@pytest.mark.parametrize("protocol", PROTOCOLS)
@pytest.mark.parametrize("fault", list(RETURN_FAULTS))
def test_each_return_fault_trips_its_check(python_kernels, monkeypatch, fault, protocol, op):
    good, _ = run(layer, protocol, op)
    patched = RETURN_FAULTS[fault](python_kernels)
    for patch in patched if isinstance(patched, list) else [patched]:
        monkeypatch.setattr(*patch)
    bad, results = run(python_kernels.layer, protocol, op)
    copies = DIES * BATCH * TOPK
    moved = copies * (2 if op == "layer" else 1)
    assert good[O_COPIES_TOTAL] == copies and good[O_SENT] == good[O_DELIVERED] == moved
    assert good[O_VIOLATIONS] == 0 and good[O_LATENCY] >= good[O_BOUND]
    if fault == "skip_return":        # one copy per die
        assert bad[O_SENT] == moved
        assert bad[O_DELIVERED] == moved - DIES
    elif fault == "early_return":
        # bsp reduces after its SyncAll, polling no copy; deepep_ll's flags come behind its
        # copies on their port
        if protocol in ("bsp", "deepep_ll"):
            assert np.array_equal(bad, good)
            return
        assert bad[O_VIOLATIONS] > 0
    elif fault == "short_return":
        assert bad[O_LATENCY] < bad[O_BOUND]
    elif fault == "abandoned_return":
        assert not bad.any()
    else:                             # one copy per die and AIV: every AIV returns copies
        assert bad[O_SENT] == bad[O_DELIVERED] == moved - DIES * AIVS
    with pytest.raises(kernel_io.KernelFailure, match="did not finish row 0"
                       if fault == "abandoned_return" else "invariant violated"):
        results()


def test_a_sweeps_failed_row_names_its_configuration(python_kernels, monkeypatch):
    """Through simulate_table, a sweep's path, the configuration of a row the kernel did not
    finish is named by its parameters: its index in the batch tells a user nothing."""
    monkeypatch.setattr(*abandoned(python_kernels, "ubep"))
    monkeypatch.setattr(kernel_io, "layer", python_kernels.layer)   # run_batch's
    seeds = (0, 1, 0)
    points = pl.DataFrame([config("ubep", s).as_dict() for s in seeds],
                          schema={n: polars_dtype(n) for n in NAMES})
    with pytest.raises(kernel_io.KernelFailure, match=rf"did not finish row 1: .*; its configuration: "
                       rf"ranks = {DIES}, batch = {BATCH}, topk = {TOPK}, .*, seed = 1$"):
        with np.errstate(over="ignore"):
            api.simulate_table(points, load_profile(), threads=1)
