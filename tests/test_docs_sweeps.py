"""sweeps.md as written: its commands in order in a working directory of their own, then its
Python blocks, which read what they wrote (the other documents: tests/test_docs.py)."""

from __future__ import annotations

import polars as pl
import pytest

from test_docs import APART, make_workspace, python_blocks, run_documented


@pytest.fixture(scope="module")
def ran(tmp_path_factory, kernel_rows):
    """APART's documents, run: {Python block: its variables}."""
    return run_documented(set(APART), make_workspace(tmp_path_factory), kernel_rows)


def test_every_python_block_of_sweeps_md_runs(ran):
    assert len(ran) == len([b for d, b in python_blocks() if d in APART]) >= 5


def test_a_third_tier_costs_nothing_within_a_pod_and_latency_beyond(ran):
    """sweeps.md's "Another fabric": 64-die pods under a third tier change nothing at 64 ranks,
    and beyond cost CANN EP far more than UBEP."""
    (scope,) = [s for block, s in ran.items() if "three_tier_us" in block]
    cost = scope["cost"]
    assert sorted(set(cost["ranks"])) == [64, 128, 256]
    assert (cost.filter(pl.col("ranks") == 64)["cost_pct"] == 0).all()
    beyond = cost.filter(pl.col("ranks") > 64)
    bsp = beyond.filter(pl.col("protocol") == "bsp")["cost_pct"]
    ubep = beyond.filter(pl.col("protocol") == "ubep")["cost_pct"]
    # CANN EP pays the third tier's latency; UBEP's pipelined sending hides most of it
    assert (bsp > 5).all() and (ubep.abs() < bsp).all()


def test_the_round_trip_query_gives_each_op_per_protocol_and_ranks(ran):
    """sweeps.md's combine query: every protocol and rank count of the ready grid, each op's
    latency, a layer longer than its dispatch (it runs one, then its experts and combine)."""
    (scope,) = [s for block, s in ran.items() if "results/combine" in block]
    frame = scope["answer"]
    assert frame.select("protocol", "ranks").rows() == [
        (p, r) for p in ("bsp", "ubep") for r in (16, 32, 64, 128)]
    assert frame.null_count().sum_horizontal().item() == 0
    assert (frame["layer_us"] > frame["dispatch_us"]).all()
