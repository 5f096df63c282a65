"""The lowering of a configuration and a profile to cycle costs, against values worked out by
hand. Kernel and twin both run on these costs, so their agreement cannot catch a mistake here.

The profile's numbers are chosen apart from each other (ingress half the egress rate, a reset
cheaper than a check, collisions possible), so that a cost computed from the wrong key shows.
"""

from __future__ import annotations

import math

import numpy as np
import polars as pl
import pytest

from ubepsim.kernels import layout
from ubepsim.sweep.costs import COST_INDEX, lower
from ubepsim.sweep.params import ENUMS, columns, config_columns, make_config, polars_dtype
from ubepsim.sweep.profile import HOP_CLASSES, load_profile

PROFILE = load_profile(overrides={
    "clock_ghz": 2.0, "block_bytes": 512, "flag_bytes": 32, "egress_gbps": 100.0,
    "ingress_gbps": 50.0, "aiv_store_gbps": 10.0, "aiv_copy_gbps": 64.0,
    "store_issue_cycles": 18, "flag_check_cycles": 8, "sentinel_reset_cycles": 5,
    "vector_op_cycles": 12, "vector_lanes": 128, "prefix_cycles": 3,
    "sentinel_collision_prob": 0.01,
})


def costs_of(profile=PROFILE, **values):
    """(costs by name, collision chances) of one configuration: 16 ranks, 64 experts (4 per
    die), hidden 1000 in bf16 (2,000-byte tokens), batch 32, top-4, unless given."""
    cfg = make_config({"ranks": 16, "experts": 64, "hidden": 1000, "dtype": "bf16",
                       "batch": 32, "topk": 4, **values}, 48)
    costs, chances = lower(cfg.columns(), profile)
    return {name: int(costs[0, i]) for name, i in COST_INDEX.items()}, chances[0]


def test_a_token_copy_costs_its_blocks_at_each_rate():
    c, _ = costs_of(protocol="ubep", sync="sw")
    assert c["token_bytes"] == 2000 and c["copy_blocks"] == 4           # 2,000 B in 512 B blocks
    assert c["copy_issue"] == 18 + math.ceil(4 * 512 * 2.0 / 10.0)      # 428
    assert c["copy_egress"] == math.ceil(4 * 512 * 2.0 / 100.0)         # 41
    assert c["copy_ingress"] == math.ceil(4 * 512 * 2.0 / 50.0)         # 82: the ingress rate
    assert c["local_copy"] == math.ceil(2000 * 2.0 / 64.0)              # 63: the token's bytes
    assert (c["copy_verify"], c["copy_reset"]) == (8 * 4, 5 * 4)        # per block


def test_token_flag_fusion_shrinks_the_payload_of_signalling_stores_only():
    ubep, _ = costs_of(protocol="ubep", sync="tff")
    bsp, _ = costs_of(protocol="bsp", sync="tff")
    assert ubep["copy_blocks"] == math.ceil(2000 / 480) == 5           # 32 B of each block flag
    assert bsp["copy_blocks"] == 4              # bsp's copies carry no signal
    assert ubep["count_blocks"] == bsp["count_blocks"] == 1
    assert ubep["copy_egress"] == math.ceil(5 * 512 * 2.0 / 100.0)


def test_count_messages_and_signals():
    c, _ = costs_of(experts=16 * 200)           # 200 experts per die: 800 bytes of counts
    assert c["count_blocks"] == 2
    assert c["count_issue"] == 18 + math.ceil(2 * 512 * 2.0 / 10.0)
    assert (c["count_egress"], c["count_ingress"]) == (math.ceil(20.48), math.ceil(40.96))
    assert (c["count_verify"], c["count_reset"]) == (16, 10)
    assert c["signal_issue"] == 18 + math.ceil(512 * 2.0 / 10.0)       # one block
    assert (c["signal_egress"], c["signal_ingress"]) == (11, 21)


def test_vector_count_rounds_the_copies_up_to_whole_lanes():
    assert costs_of(batch=32, topk=4)[0]["vcount"] == 12 + 1          # 128 copies: one pass
    assert costs_of(batch=43, topk=3)[0]["vcount"] == 12 + 2          # 129 copies: two


def test_only_sentinel_polling_collides_and_a_signal_collides_if_any_block_does():
    for sync in ("sw", "tff", "dc"):
        assert costs_of(sync=sync)[1].tolist() == [0.0, 0.0]
    c, chance = costs_of(sync="sp")
    assert chance[0] == pytest.approx(1 - 0.99 ** c["copy_blocks"], rel=1e-12)
    assert chance[1] == pytest.approx(0.01, rel=1e-12)


def test_fabric_and_timing_constants():
    c, _ = costs_of()
    assert (c["npu_dies"], c["tier1"], c["tier2"]) == (2, 16, 0)
    three, _ = costs_of(load_profile(overrides={"tier_sizes": [4, 8]}))
    assert (three["tier1"], three["tier2"]) == (4, 8)
    assert (c["prefix"], c["blocks_in_flight"]) == (3, PROFILE.values["blocks_in_flight"])
    assert c["lat_two_hop"] == round(PROFILE.values["latency_ns"]["two_hop"] * 2.0)
    assert c["poll"] == c["lat_local"] == 200
    # the per-source costs are the profile's cycles as they are
    for name in ("dest_switch", "count_chain", "status_poll"):
        assert c[name] == PROFILE.values[f"{name}_cycles"]
    assert c["timeout"] == round(PROFILE.values["sentinel_timeout_ns"] * 2.0)


def test_the_cost_columns_name_the_profiles_hop_classes():
    """The kernel codes hop classes 0 .. N_HOPS - 1 and reads their latencies by that code from
    the columns after C_LAT_LOCAL, which the lowering fills from the profile's latencies."""
    assert layout.HOP_CLASSES == HOP_CLASSES
    assert [COST_INDEX[f"lat_{h}"] for h in HOP_CLASSES] == \
        list(range(layout.C_LAT_LOCAL, layout.C_LAT_LOCAL + layout.N_HOPS))


def test_the_kernels_codes_are_the_parameters_enumerations():
    """Each IntEnum numbers its members 0, 1, 2, ... in the order of its pl.Enum's names, so a
    frame's index of a name is its code; every enum the kernel's parameter matrix carries (a
    P_<NAME> column) has the same codes in kernels/layout.py, which repeats them as constants
    for Numba (the kernel does not import the host)."""
    for name, enum in ENUMS.items():
        assert [m.value for m in enum] == list(range(len(enum))), name
        assert polars_dtype(name).categories.to_list() == [m.name for m in enum], name
    carried = [name for name in ENUMS if hasattr(layout, f"P_{name.upper()}")]
    assert {"protocol", "sync", "schedule", "routing"} <= set(carried)
    for name in carried:
        for member in ENUMS[name]:
            assert getattr(layout, member.name.upper()) == member.value, (name, member.name)


def test_names_and_pl_enums_become_the_same_codes():
    rows = [make_config({"protocol": p, "sync": s, "routing": r}, 48).as_dict()
            for p in ("ubep", "bsp") for s in ("sp", "sw", "tff") for r in ("hot", "uniform")]
    names = columns(pl.DataFrame(rows))             # enums as strings, as a dataset holds them
    assert names["protocol"].dtype == np.int64
    for name in ENUMS:
        expected = [ENUMS[name][row[name]].value for row in rows]
        assert names[name].tolist() == config_columns(rows)[name].tolist() == expected, name
