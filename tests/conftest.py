"""Shared helpers: the CLI as a user calls it, and small grids that run in a fraction of a second."""

from __future__ import annotations

import contextlib
import hashlib
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import polars as pl
import pytest
from click.testing import CliRunner

# Two kernel threads even on a one-core machine (Numba's default there is one), so that the
# rows are compared across thread counts everywhere; read when Numba is first imported, below.
os.environ.setdefault("NUMBA_NUM_THREADS", "2")

import numba  # noqa: E402

from ubepsim.cli import main  # noqa: E402

# The suite runs on two workers (`-n 2` in pyproject.toml), a module at a time, so that a
# module's fixtures run once. The modules whose fixtures run longest come first, so that the
# workers start one each: the documented commands (test_docs.py, and sweeps.md's in
# test_docs_sweeps.py), then `validate` on two profiles (test_validate.py), which the first
# worker to be nearly done takes (pytest-xdist hands a worker more once two of its tests are
# left: so in the first two modules the tests that use the documented run, `ran`, go first).
# (Not --dist loadgroup, which could keep test_query.py's sweep of the ready combine grid
# beside sweeps.md's: pytest-xdist 3.8 cannot name a group's tests under pytest 9.2.)
FIRST = ("test_docs.py", "test_docs_sweeps.py", "test_validate.py")

# One configuration of each op, each run in a process of its own: the kernels' first compile.
WARM_UP = ("import sys, ubepsim; "
           "ubepsim.simulate({'ranks': 4, 'experts': 8, 'batch': 4, 'op': sys.argv[1]})")


def pytest_collection_modifyitems(items):
    # stable: FIRST's modules in that order, then the others as collected
    items.sort(key=lambda item: (FIRST.index(item.path.name) if item.path.name in FIRST
                                 else len(FIRST), "ran" not in item.fixturenames))


@pytest.hookimpl(tryfirst=True)
def pytest_sessionstart(session):
    """Before the workers start: compile the three batch kernels (dispatch, combine, layer), each
    in a process of its own, side by side. From an empty cache each takes the better part of a
    minute of one core; left to the tests, each worker would compile the same kernels at once.
    Compiled here they are on disk (Numba's cache) when the first test asks for them, and every
    worker loads them. Nothing is asserted here: a kernel that does not compile fails its tests."""
    config = session.config
    if (hasattr(config, "workerinput") or not getattr(config.option, "numprocesses", None)
            or config.option.collectonly or numba.config.DISABLE_JIT):
        return
    procs = [subprocess.Popen([sys.executable, "-c", WARM_UP, op], stdout=subprocess.DEVNULL,
                              stderr=subprocess.PIPE)
             for op in ("dispatch", "combine", "layer")]
    for proc in procs:
        _, err = proc.communicate()
        if proc.returncode:
            print(f"warm-up of the kernels failed:\n{err.decode()}", file=sys.stderr)


# Small enough to simulate in well under a second, varied enough to exercise every mode.
TINY_GRID = """\
[sweep]
name = "tiny"
out = "tiny-results"
seeds = [0, 1]
filter = "batch * topk <= 32"

[grid]
batch = [4, 16]
topk = [1, 4]
hidden = [64, 512]
cores = 8
cumsum_cores = [1, 2, 3]
protocol = ["bsp", "ubep"]
sync = ["sw", "sp"]

[[zip]]
ranks = [4, 8, 16]
experts = [8, 8, 16]
"""
# (batch, topk) pairs the filter keeps x hidden x ranks x sync x cumsum_cores x protocol x seeds
TINY_FILTERED = 3 * 2 * 3 * 2 * 3 * 2 * 2
# bsp does not read cumsum_cores: its three values are one configuration
TINY_SIZE = 3 * 2 * 3 * 2 * (3 + 1) * 2


def run_cli(*args: object) -> tuple[int, str, str]:
    """`ubepsim ARGS` through the real entry point: (exit code, stdout, stderr)."""
    with CliRunner().isolation() as (out, err, _):
        code = main([str(a) for a in args])
    return code, out.getvalue().decode(), err.getvalue().decode()


def write_grid(directory: Path, text: str, name: str = "grid.toml") -> Path:
    path = directory / name
    path.write_text(textwrap.dedent(text))
    return path


def read_rows(dataset: Path) -> pl.DataFrame:
    """A dataset's rows in a canonical order, for comparing runs."""
    return pl.scan_parquet(dataset / "*.parquet").sort("config_id").collect()


@pytest.fixture
def tiny_grid(tmp_path: Path) -> Path:
    return write_grid(tmp_path, TINY_GRID)


class KernelRows:
    """The kernel's rows by their inputs, so that a configuration the session has simulated is
    not simulated again: `ubepsim validate` runs some 11,000 configurations a profile, and the
    suite runs it four times (JSON and text, two profiles) and the documented commands run
    some of its configurations again (`tune --sms` on Table 4's DeepEP workload).

    Inside `shared()`, layer.simulate_batch gives each row from this store if it was computed
    before, and runs the kernel on the other rows only. That is the kernel's contract: row i of
    its output from row i of its inputs only (and the arrays its rows share), which the sweep's
    batches rely on and tests/test_api.py and tests/test_sweep.py check. A row is keyed by its
    inputs' bytes and the shared arrays' digest, so nothing about the profile or the
    configuration is assumed: what `prepare` makes differently is simulated again. Only
    tests/test_validate.py and the documented commands of tests/test_docs.py use it; the tests
    of the kernel itself never do."""

    def __init__(self) -> None:
        self.rows: dict[tuple[bytes, ...], np.ndarray] = {}
        self.computed = self.reused = 0

    @contextlib.contextmanager
    def shared(self):
        from ubepsim.kernels import layer

        with pytest.MonkeyPatch.context() as mp:
            mp.setattr(layer, "simulate_batch", self._once(layer.simulate_batch))
            yield self

    def _once(self, simulate_batch):
        def once(params, costs, chances, cdf, trace, batches, out, marks_out=None):
            if marks_out is not None:    # a timeline's marks: one configuration, run as asked
                return simulate_batch(params, costs, chances, cdf, trace, batches, out,
                                      marks_out)
            digest = hashlib.sha256()
            for a in (cdf, trace, batches):
                digest.update(str(a.dtype).encode() + b"\0" + np.ascontiguousarray(a).tobytes())
            shared = digest.digest()
            keys = [(shared, params[i].tobytes(), costs[i].tobytes(), chances[i].tobytes())
                    for i in range(len(params))]
            missing = np.array([i for i, key in enumerate(keys) if key not in self.rows],
                               dtype=np.int64)
            if missing.size == len(keys):
                simulate_batch(params, costs, chances, cdf, trace, batches, out)
            elif missing.size:
                part = np.zeros((missing.size, out.shape[1]), dtype=out.dtype)
                simulate_batch(params[missing], costs[missing], chances[missing], cdf, trace,
                               batches, part)
                out[missing] = part
            for i, key in enumerate(keys):
                if key in self.rows:
                    out[i] = self.rows[key]
                else:
                    self.rows[key] = out[i].copy()
            self.computed += missing.size
            self.reused += len(keys) - missing.size
        return once


@pytest.fixture(scope="session")
def kernel_rows() -> KernelRows:
    return KernelRows()
