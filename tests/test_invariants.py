"""The invariant checks can fail: a copy of the kernel with faults put in by hand trips each.

Every row is checked (every copy sent and delivered once, none read before it is visible,
latency not below the bandwidth bound); a check that never fires would pass a broken model as
well. The faults are text replacements in the kernel's source, compiled apart (uncached).
"""

from __future__ import annotations

import importlib
import shutil
import sys

import numpy as np
import pytest

from ubepsim import model
from ubepsim.kernels import dispatch
from ubepsim.params import make_config
from ubepsim.profile import load_profile

KERNELS = dispatch.__file__.rsplit("/", 1)[0]
FAULTS = {
    # a receiver skips the last copy of its slice
    "skip": ("for x in range(j * n_recv // n_reorder, (j + 1) * n_recv // n_reorder):",
             "for x in range(j * n_recv // n_reorder, (j + 1) * n_recv // n_reorder - 1):"),
    # a ubep receiver reads a copy without waiting for its signal
    "early": ("                    t = t2p + verify\n", "                    t = t + verify\n"),
    # the last die's end is taken a quarter of the way
    "short": ("    latency = ends[crit]\n", "    latency = ends[crit] // 4\n"),
}


@pytest.fixture(scope="module")
def faulty(tmp_path_factory):
    """The kernel module with every fault of FAULTS, each fault in its own place."""
    pkg = tmp_path_factory.mktemp("faulty") / "faulty_kernels"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    shutil.copy(f"{KERNELS}/rng.py", pkg / "rng.py")
    jit = open(f"{KERNELS}/jit.py").read()
    assert jit.count("cache=True") == 1
    (pkg / "jit.py").write_text(jit.replace("cache=True", "cache=False"))
    source = open(dispatch.__file__).read()
    for old, new in FAULTS.values():
        assert source.count(old) == 1, old
        source = source.replace(old, new)
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
    cfg = make_config({"ranks": 8, "batch": 64, "topk": 4, "aivs": 8, "cumsum_aivs": 1,
                       **values}, 48)
    cols = {k: np.asarray([v]) for k, v in cfg.as_dict().items()}
    params, costs, chances, cdf, trace = model.prepare(cols, profile)
    out = np.zeros((1, dispatch.N_OUT))
    kernel._simulate_batch(params, costs, chances, cdf, trace, out)
    return out[0], lambda: model.results_from_kernel(out, cols, costs, profile)


@pytest.mark.parametrize("protocol", ["bsp", "ubep"])
def test_each_fault_trips_its_check(faulty, protocol):
    good, _ = run(dispatch, protocol=protocol)
    bad, results = run(faulty, protocol=protocol)
    total = good[dispatch.O_COPIES_TOTAL]
    assert good[dispatch.O_SENT] == good[dispatch.O_DELIVERED] == total == 8 * 64 * 4
    assert good[dispatch.O_VIOLATIONS] == 0 and good[dispatch.O_LATENCY] >= good[dispatch.O_BOUND]
    # each receiving AIV skipped one copy: 8 dies of 7 (ubep) or 8 (bsp) reordering AIVs
    assert bad[dispatch.O_SENT] == total
    assert bad[dispatch.O_DELIVERED] == total - 8 * (7 if protocol == "ubep" else 8)
    if protocol == "ubep":   # bsp reads after the SyncAlls, not after each copy's signal
        assert bad[dispatch.O_VIOLATIONS] > 0
    assert bad[dispatch.O_LATENCY] < bad[dispatch.O_BOUND]
    with pytest.raises(RuntimeError, match="invariant violated"):
        results()
