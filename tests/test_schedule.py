"""Token-to-AIV schedules and Algorithm 1's quaternary search (paper Section 3.3)."""

from __future__ import annotations

import bisect
import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ubepsim.kernels.polls import poll as kernel_poll
from ubepsim.kernels.schedule import qsteps_table
from ubepsim.kernels.schedule import quaternary_search as kernel_search
from ubepsim.reference.polls import poll
from ubepsim.reference.schedule import hop_of, quaternary_search, schedule_die, walk
from ubepsim.reference.state import Core
from ubepsim.model.params import make_config


@st.composite
def copies_and_hops(draw):
    """A die's copies (token, k, expert) with each die's hop class, and the AIV count."""
    ranks = draw(st.integers(1, 16))
    experts = ranks * draw(st.integers(1, 4))
    topk = draw(st.integers(1, min(experts, 8)))
    batch = draw(st.integers(1, 40))
    rows = []
    for t in range(batch):
        chosen = draw(st.lists(st.integers(0, experts - 1), min_size=topk, max_size=topk,
                               unique=True))
        rows += [(t, k, e) for k, e in enumerate(chosen)]
    die_hop = draw(st.lists(st.integers(0, 4), min_size=ranks, max_size=ranks))
    n = draw(st.integers(1, 48))
    return rows, die_hop, n, ranks, experts, topk, batch


def _cfg(schedule, ranks, experts, topk, batch):
    return make_config({"ranks": ranks, "experts": experts, "topk": topk, "batch": batch,
                        "schedule": schedule}, 48)


def _hop(rows, die_hop, experts):
    """Each copy's hop class."""
    e_local = experts // len(die_hop)
    return [die_hop[e // e_local] for _, _, e in rows]


@settings(max_examples=200, deadline=None)
@given(copies_and_hops())
def test_homogenized_per_hop_bound_and_load_balance(case):
    rows, die_hop, n, ranks, experts, topk, batch = case
    lists = schedule_die(_cfg("homogenized", ranks, experts, topk, batch), rows, die_hop,
                         n).lists
    hops = _hop(rows, die_hop, experts)
    assigned = sorted(i for lst in lists for i in lst)
    assert assigned == list(range(len(rows)))                  # each copy exactly once
    loads = [len(lst) for lst in lists]
    assert max(loads) - min(loads) <= 1                        # load difference <= 1 token
    for h in range(5):
        total = hops.count(h)
        for lst in lists:
            mine = sum(1 for i in lst if hops[i] == h)
            assert mine <= math.ceil(total / n)                # v_jh <= ceil(V_h / n)


@settings(max_examples=200, deadline=None)
@given(copies_and_hops())
def test_balanced_slices_and_expert_blocks(case):
    rows, die_hop, n, ranks, experts, topk, batch = case
    lists = schedule_die(_cfg("balanced", ranks, experts, topk, batch), rows, die_hop,
                         n).lists
    loads = [len(lst) for lst in lists]
    assert max(loads) - min(loads) <= 1
    # die 0's walk starts at die 1's experts and ends with its own: r is an expert's place
    e_local = experts // ranks
    r = [(e - e_local) % experts for e in range(experts)]
    flat = [r[rows[i][2]] for lst in lists for i in lst]
    assert flat == sorted(flat)                                  # contiguous in walk order
    blocks = schedule_die(_cfg("expert_block", ranks, experts, topk, batch), rows, die_hop,
                          n).lists
    # expert blocks are not rotated: every die walks from expert 0, so AIV j owns the same
    # block of experts on every die (CANN EP's hot spots)
    for j, lst in enumerate(blocks):                            # AIV j owns whole experts
        assert all(rows[i][2] * n // experts == j for i in lst)
    assert sorted(i for lst in blocks for i in lst) == list(range(len(rows)))


@settings(max_examples=200, deadline=None)
@given(copies_and_hops())
def test_token_order_slices_the_copies_as_the_routing_drew_them(case):
    """CANN's SplitToCore: equal contiguous slices of the copies in (token, k) order, whatever
    their experts or hop classes."""
    rows, die_hop, n, ranks, experts, topk, batch = case
    lists = schedule_die(_cfg("token_order", ranks, experts, topk, batch), rows, die_hop,
                         n).lists
    assert [i for lst in lists for i in lst] == list(range(len(rows)))
    loads = [len(lst) for lst in lists]
    assert max(loads) - min(loads) <= 1


@pytest.mark.parametrize("tiers", [[16], [16, 64]])
@pytest.mark.parametrize("ranks", [16, 32, 64, 128, 256])
@pytest.mark.parametrize("homogenized", [False, True])
def test_walks_spread_the_senders_over_the_dies(ranks, tiers, homogenized):
    """Each die's walk takes every die once (homogenized: farthest hop class first), and at
    every step of the walks no two senders are on one die, when the switch domains are equal
    (ranks a multiple of each tier's size or below it): no incast from the schedule itself."""
    walks = []
    for s in range(ranks):
        die_hop = [hop_of(s, d, 2, tiers) for d in range(ranks)]
        w = walk(die_hop, s, homogenized)
        assert sorted(w) == list(range(ranks))
        if homogenized:
            hops = [die_hop[d] for d in w]
            assert hops == sorted(hops, reverse=True)
        walks.append(w)
    for step in range(ranks):
        assert len({w[step] for w in walks}) == ranks


@settings(max_examples=300, deadline=None)
@given(st.lists(st.integers(0, 299), min_size=1, max_size=400), st.integers(1, 300),
       st.data())
def test_quaternary_search_finds_the_covering_expert(ids, n_experts, data):
    ids = sorted(x % n_experts for x in ids)
    target = data.draw(st.integers(0, len(ids) - 1))
    expert, offset, steps = quaternary_search(ids, target, n_experts)
    assert expert == ids[target]
    assert offset == target - bisect.bisect_left(ids, expert)
    # four-way narrowing: the window shrinks at least fourfold (rounded up) per step
    assert steps <= max(0, math.ceil(math.log(n_experts, 4))) + 1
    # the kernel's version on cumulative counts agrees, step for step
    cum = np.searchsorted(np.asarray(ids), np.arange(n_experts + 1), side="left")
    k_expert, k_steps = kernel_search(cum.astype(np.int64), target, n_experts)
    assert (k_expert, k_steps) == (expert, steps)
    # and the kernel's table of steps by the expert a search ends on
    assert qsteps_table(n_experts)[expert] == steps


def test_quaternary_search_takes_four_to_five_steps_at_typical_expert_counts():
    """The paper reports 4-5 steps for typical expert counts; here it is counted, not assumed."""
    for n_experts in (128, 160, 256):
        ids = list(range(n_experts))
        worst = max(quaternary_search(ids, t, n_experts)[2] for t in ids)
        assert worst in (4, 5)


@settings(max_examples=300, deadline=None)
@given(st.integers(0, 10**12), st.integers(0, 10**12), st.integers(1, 5000))
def test_closed_form_poll_equals_polling_loop(t, visible, period):
    visible = t + (visible - t) % (2000 * period) - 1000 * period   # huge times, near t
    core = Core(())
    core.t = t
    poll(core, visible, period, "sync")
    assert kernel_poll(t, visible, period, 1.0 / period) == core.t
    # the first poll issued at or after the value is visible returns it, a period later
    assert max(t, visible) + period <= core.t < max(t, visible) + 2 * period
