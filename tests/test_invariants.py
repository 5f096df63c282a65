"""The invariant checks can fail: a copy of the kernel with faults put in by hand trips each.

Every row is checked (every copy sent and delivered once, none read before it is visible,
latency not below the bandwidth and latency bound); a check that never fires would pass a broken model as
well. The faults are text replacements in the kernel's source, compiled apart (uncached) into
one module: fault number i is on only in configurations of seed i, so that each is checked
alone, against the real kernel on the same seed.
"""

from __future__ import annotations

import importlib
import shutil
import sys

import numpy as np
import polars as pl
import pytest

from ubepsim import kernel_io, model
from ubepsim.kernels import dispatch
from ubepsim.params import NAMES, make_config, polars_dtype
from ubepsim.profile import load_profile

KERNELS = dispatch.__file__.rsplit("/", 1)[0]
# (kernel text, the same with the fault; ON is 1 where the fault is on, else 0)
FAULTS = {
    # a receiver skips the last copy of its slice
    "skip": ("for x in range(j * n_recv // n_reorder, (j + 1) * n_recv // n_reorder):",
             "for x in range(j * n_recv // n_reorder, (j + 1) * n_recv // n_reorder - ON):"),
    # a ubep receiver reads a copy without waiting for its signal
    "early": ("                    t = t2p + verify\n",
              "                    t = (t if ON else t2p) + verify\n"),
    # the last die's end is taken a quarter of the way
    "short": ("    latency = ends[crit]\n", "    latency = ends[crit] // (4 if ON else 1)\n"),
    # each token AIV sends its last copy as a flag store: sent, but not as a copy
    "miskind": ("sid = _new_store(prog, n, bfill, d, K_COPY)",
                "sid = _new_store(prog, n, bfill, d, "
                "K_FLAG if ON and x + 1 == aoff[a - C + 1] else K_COPY)"),
    # the configuration is abandoned before its dispatch, its row left as it was (zero): what an
    # exception raised on a worker thread of the parallel loop leaves, which Numba drops
    "abandoned": ("    # ---- per-AIV state that lives across passes ---",
                  "    if ON:\n        return\n"
                  "    # ---- per-AIV state that lives across passes ---"),
}
SEED = {name: i for i, name in enumerate(FAULTS, 1)}
DIES, AIVS = 8, 8


@pytest.fixture(scope="module")
def faulty(tmp_path_factory):
    """The kernel module with every fault of FAULTS, each in its own place."""
    pkg = tmp_path_factory.mktemp("faulty") / "faulty_kernels"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    shutil.copy(f"{KERNELS}/rng.py", pkg / "rng.py")
    jit = open(f"{KERNELS}/jit.py").read()
    assert jit.count("cache=True") == 1
    (pkg / "jit.py").write_text(jit.replace("cache=True", "cache=False"))
    source = open(dispatch.__file__).read()
    for name, (old, new) in FAULTS.items():
        assert source.count(old) == 1, old
        source = source.replace(old, new.replace("ON", f"(1 if p[P_SEED] == {SEED[name]} else 0)"))
    (pkg / "dispatch.py").write_text(source)
    sys.path.insert(0, str(pkg.parent))
    try:
        yield importlib.import_module("faulty_kernels.dispatch")
    finally:
        sys.path.remove(str(pkg.parent))
        sys.modules.pop("faulty_kernels.dispatch", None)
        sys.modules.pop("faulty_kernels", None)


def run(kernel, **values):
    profile = load_profile()
    cfg = make_config({"ranks": DIES, "batch": 64, "topk": 4, "aivs": AIVS, "cumsum_aivs": 1,
                       **values}, 48)
    cols = {k: np.asarray([v]) for k, v in cfg.as_dict().items()}
    params, costs, chances, cdf, trace = kernel_io.prepare(cols, profile)
    out = np.zeros((1, dispatch.N_OUT))
    kernel._simulate_batch(params, costs, chances, cdf, trace, out)
    return out[0], lambda: kernel_io.result_columns(out, cols, costs, profile)


@pytest.mark.parametrize("protocol", ["bsp", "ubep"])
def test_faults_are_off_on_other_seeds(faulty, protocol):
    assert np.array_equal(run(faulty, protocol=protocol)[0], run(dispatch, protocol=protocol)[0])


@pytest.mark.parametrize("protocol", ["bsp", "ubep"])
@pytest.mark.parametrize("fault", list(FAULTS))
def test_each_fault_trips_its_check(faulty, fault, protocol):
    seed = SEED[fault]
    good, _ = run(dispatch, protocol=protocol, seed=seed)
    bad, results = run(faulty, protocol=protocol, seed=seed)
    total = good[dispatch.O_COPIES_TOTAL]
    assert good[dispatch.O_SENT] == good[dispatch.O_DELIVERED] == total == DIES * 64 * 4
    assert good[dispatch.O_VIOLATIONS] == 0 and good[dispatch.O_LATENCY] >= good[dispatch.O_BOUND]
    # ubep's CalCumSum group (one AIV) neither sends nor reorders copies
    token_aivs = AIVS - 1 if protocol == "ubep" else AIVS
    if fault == "skip":       # one copy per die and reordering AIV
        assert bad[dispatch.O_SENT] == total
        assert bad[dispatch.O_DELIVERED] == total - DIES * token_aivs
    elif fault == "early":
        if protocol == "bsp":   # bsp reads after the SyncAlls, not after each copy's signal
            assert np.array_equal(bad, good)
            return
        assert bad[dispatch.O_VIOLATIONS] > 0
    elif fault == "short":
        assert bad[dispatch.O_LATENCY] < bad[dispatch.O_BOUND]
    elif fault == "abandoned":   # consistent in itself: nothing dispatched, sent or late
        assert not bad.any()
    else:                       # one copy per die and sending AIV
        assert bad[dispatch.O_SENT] == total - DIES * token_aivs
        assert bad[dispatch.O_DELIVERED] == total - DIES * token_aivs
    with pytest.raises(kernel_io.KernelFailure, match="did not finish row 0" if fault == "abandoned"
                       else "invariant violated"):
        results()


def test_a_sweeps_failed_row_names_its_configuration(faulty, monkeypatch):
    """Through simulate_table, a sweep's path, the configuration of a row the kernel did not
    finish is named by its parameters: its index in the batch tells a user nothing."""
    monkeypatch.setattr(model, "k", faulty)
    seeds = (0, SEED["abandoned"], 0)
    points = pl.DataFrame([make_config({"ranks": DIES, "batch": 64, "topk": 4, "aivs": AIVS,
                                        "cumsum_aivs": 1, "seed": s}, 48).as_dict()
                           for s in seeds], schema={n: polars_dtype(n) for n in NAMES})
    with pytest.raises(kernel_io.KernelFailure, match=rf"did not finish row 1: .*; its "
                       rf"configuration: ranks = {DIES}, batch = 64, topk = 4, .*, seed = "
                       rf"{seeds[1]}$"):
        model.simulate_table(points, load_profile(), threads=1)
