"""Shared helpers: the CLI as a user calls it, and small grids that run in a fraction of a second."""

from __future__ import annotations

import os
import textwrap
from pathlib import Path

import polars as pl
import pytest
from click.testing import CliRunner

# Two kernel threads even on a one-core machine (Numba's default there is one), so that the
# rows are compared across thread counts everywhere; read when Numba is first imported, below.
os.environ.setdefault("NUMBA_NUM_THREADS", "2")

from ubepsim.cli import main  # noqa: E402

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
