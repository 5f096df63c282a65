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

from ubepsim.kernels import layout, protocols
from ubepsim.model.costs import COST_INDEX, lower
from ubepsim.model.params import (ENUMS, Protocol, columns, config_columns, make_config,
                                   polars_dtype)
from ubepsim.model.profile import HOP_CLASSES, load_profile

PROFILE = load_profile(overrides={
    "clock_ghz": 2.0, "block_bytes": 512, "flag_bytes": 32, "egress_gbps": 100.0,
    "ingress_gbps": 50.0, "core_store_gbps": 10.0, "core_copy_gbps": 64.0,
    "store_issue_cycles": 18, "flag_check_cycles": 8, "sentinel_reset_cycles": 5,
    "vector_op_cycles": 12, "vector_bytes": 256, "prefix_cycles": 3,
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


def test_vector_count_rounds_the_copies_up_to_whole_repeats():
    # int32 expert ids, 256 bytes a repeat: 64 ids a cycle
    assert costs_of(batch=32, topk=4)[0]["vcount"] == 12 + 2          # 128 copies: two repeats
    assert costs_of(batch=43, topk=3)[0]["vcount"] == 12 + 3          # 129 copies: three


def test_only_sentinel_polling_collides_and_a_signal_collides_if_any_block_does():
    for sync in ("sw", "tff", "dc"):
        assert costs_of(sync=sync)[1].tolist() == [0.0, 0.0, 0.0]
    c, chance = costs_of(sync="sp")
    assert chance[0] == pytest.approx(1 - 0.99 ** c["copy_blocks"], rel=1e-12)
    assert chance[1] == pytest.approx(0.01, rel=1e-12)
    assert chance[2] == pytest.approx(1 - 0.99 ** c["return_blocks"], rel=1e-12)


# --- combine (docs/model.md, "Combine") ------------------------------------------------------

def vec(n, times=1):
    """`times` vector instructions over n fp32 elements: 12 cycles and 256 bytes (64 elements)
    a cycle."""
    return times * (12 + math.ceil(n / 64))


def test_a_returned_copy_costs_its_blocks_and_its_reads():
    c, _ = costs_of(op="combine", protocol="ubep", sync="sw")
    assert c["return_bytes"] == 2000 and c["return_blocks"] == 4       # bf16, like dispatch's
    assert c["return_issue"] == c["copy_issue"] and c["return_egress"] == c["copy_egress"]
    assert c["return_ingress"] == c["copy_ingress"]
    assert c["return_load"] == math.ceil(2000 * 2.0 / 64.0)            # the expert's output
    assert c["return_quant"] == 0                                             # bf16: nothing to do
    assert (c["return_verify"], c["return_reset"]) == (8 * 4, 5 * 4)
    tff, _ = costs_of(op="combine", protocol="ubep", sync="tff")
    assert tff["return_blocks"] == 5                                   # 480 B of payload a block
    bsp, _ = costs_of(op="combine", protocol="bsp", sync="tff")
    assert bsp["return_blocks"] == 4                                   # V1: no in-block flag


def test_int8_combine_quantizes_each_copy_and_dequantizes_it_at_the_reducer():
    c, _ = costs_of(op="combine", combine_dtype="int8", protocol="ubep", hidden=1000)
    assert c["return_bytes"] == 1000 + 2 * 125                         # a bf16 scale per 8
    assert c["return_blocks"] == 3
    assert c["return_load"] == math.ceil(2000 * 2.0 / 64.0)            # the bf16 output read
    assert c["return_quant"] == vec(1000, 7) + vec(125, 2)                    # Int8QuantProcess
    read = math.ceil(1250 * 2.0 / 64.0)                                # the whole quantized copy
    assert c["reduce_copy"] == c["reduce_copy_last"] == read + vec(1000, 5) + vec(125) + \
        vec(1000, 3)                                                   # dequantize, Cast Muls Add
    assert c["reduce_split"] == 1


def test_a_token_is_reduced_by_its_copies_instructions():
    # ubep: one AIV a token; batch 32 < 48 AIVs but no split
    c, _ = costs_of(op="combine", protocol="ubep")
    assert c["reduce_split"] == 1
    assert c["reduce_copy"] == c["reduce_copy_last"] == math.ceil(2000 * 2.0 / 64.0) + \
        vec(1000, 3)
    assert c["reduce_token"] == c["reduce_token_last"] == vec(1000, 2) + \
        math.ceil(2000 * 2.0 / 64.0)                                   # Duplicate, Cast, store
    # bsp (CANN's V1): 32 tokens on 48 AIVs, one AIV a token, the hidden dimension not split
    # (48 / 32 = 1); on 8 tokens 6 AIVs a token: 1000 / 32 / 6 = 5 blocks of 32 for the first
    # five, the last 1000 - 5 x 160 = 200 elements
    one, _ = costs_of(op="combine", protocol="bsp")
    assert one["reduce_split"] == 1 and one["reduce_copy"] == c["reduce_copy"]
    six, _ = costs_of(op="combine", protocol="bsp", batch=8)
    assert six["reduce_split"] == 6
    assert six["reduce_copy"] == math.ceil(160 * 2 * 2.0 / 64.0) + vec(160, 3)
    assert six["reduce_copy_last"] == math.ceil(200 * 2 * 2.0 / 64.0) + vec(200, 3)
    assert six["reduce_token"] == vec(160, 2) + math.ceil(160 * 2 * 2.0 / 64.0)
    assert six["reduce_token_last"] == vec(200, 2) + math.ceil(200 * 2 * 2.0 / 64.0)
    # int8 copies are not split (CANN: aivNumPerToken = 1 when quantized)
    assert costs_of(op="combine", protocol="bsp", batch=8,
                    combine_dtype="int8")[0]["reduce_split"] == 1


def test_the_expert_time_is_in_cycles_and_1024ths_of_a_cycle_per_copy():
    c, _ = costs_of(op="layer", expert_fixed_us=1.5, expert_ns_per_copy=0.3)
    assert c["expert"] == 3000                                         # 1.5 us at 2 GHz
    assert c["expert_copy"] == math.ceil(0.3 * 2.0 * 1024)             # 0.6 cycles


def test_fabric_and_timing_constants():
    c, _ = costs_of()
    assert (c["npu_dies"], c["tier1_dies"], c["tier2_dies"]) == (2, 16, 0)
    three, _ = costs_of(load_profile(overrides={"tier_sizes": [4, 8]}))
    assert (three["tier1_dies"], three["tier2_dies"]) == (4, 8)
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
    # a protocol's code is its place in the registry, which the enumeration is made of
    assert [m.name for m in Protocol] == list(protocols.NAMES)
    for name in set(carried) - {"protocol"}:
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


def test_a_tier_link_queues_only_where_its_domain_can_outrun_it():
    """A tier's link costs its bandwidth where it is below what the domain's dies put onto it
    (its size times the port its stores leave by), and nothing where it keeps up: a
    uniform-bandwidth fabric has no tier queue."""
    def profile(**values):
        return load_profile(overrides={"clock_ghz": 2.0, "tier_sizes": [4, 8],
                                       "egress_gbps": 100.0, **values})

    even, _ = costs_of(profile(tier_gbps=[400.0, 800.0]))
    assert even["copy_tier1"] == even["copy_tier2"] == 0
    over, _ = costs_of(profile(tier_gbps=[399.0, 200.0]))
    assert over["copy_tier1"] == math.ceil(4 * 512 * 2.0 / 399.0)      # a copy's four blocks
    assert over["copy_tier2"] == math.ceil(4 * 512 * 2.0 / 200.0)
    assert over["signal_tier2"] == math.ceil(512 * 2.0 / 200.0)
    # a tier left out of tier_gbps never queues
    assert costs_of(profile(tier_gbps=[10.0]))[0]["copy_tier2"] == 0
    # above the NIC, the domain offers its NICs' bandwidth, not its ports'
    nic, _ = costs_of(profile(tier_gbps=[300.0], nic_gbps=50.0, nic_from="two_hop"))
    assert nic["copy_tier1"] == 0                                       # 4 x 50 < 300
    assert nic["copy_nic"] == math.ceil(4 * 512 * 2.0 / 50.0)
    assert nic["nic_from"] == HOP_CLASSES.index("two_hop")
    plain, _ = costs_of()
    assert plain["nic_from"] == layout.N_HOPS and plain["copy_nic"] == 0
