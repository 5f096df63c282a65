"""One fabric for every die (docs/model.md, "Fabric"): the kernel against its twin where the
fabric is congested (an ingress port slower than the egress ports, oversubscribed switch tiers,
NICs), at the paper's scale, and what back-pressure, tier links and NICs must do.

test_twin.py and test_combine.py hold the kernel to the twin on cm384-like fabrics; here the
profiles are those where receivers and links hold senders back.
"""

from __future__ import annotations

import pytest

from test_combine import combine_draws, combine_modes
from test_twin import differences, random_configs
from ubepsim import reference
from ubepsim.kernels.layout import NIC
from ubepsim.model import api
from ubepsim.model.params import make_config
from ubepsim.model.profile import load_profile

CONGESTED = {
    # every die's ingress port at a tenth of its egress port, a narrow window
    "slow_ingress": load_profile(overrides={"ingress_gbps": 19.6, "blocks_in_flight": 30}),
    # two tiers oversubscribed 2:1 and 4:1 above 4- and 8-die domains
    "oversubscribed": load_profile(overrides={
        "tier_sizes": [4, 8], "tier_gbps": [392.0, 392.0], "blocks_in_flight": 20,
        "latency_ns": {"three_hop": 3000.0}}),
    # GPU-like: 4-die nodes, a NIC per die for every other node, its tier oversubscribed
    "nic": load_profile(overrides={"npu_dies": 1, "tier_sizes": [4], "tier_gbps": [60.0],
                                   "nic_gbps": 25.0, "nic_from": "two_hop",
                                   "blocks_in_flight": 40}),
    # the NIC from the third tier only: two_hop over the die's ports, both kinds over a tier
    "nic_mixed": load_profile(overrides={
        "tier_sizes": [4, 8], "tier_gbps": [100.0, 40.0], "nic_gbps": 50.0,
        "nic_from": "three_hop", "latency_ns": {"three_hop": 3000.0}}),
}
N_CONFIGS = 360
CHUNK = 40


@pytest.fixture(scope="module")
def congested(tmp_path_factory):
    """(configuration, profile) pairs of every op, protocol, sync variant and schedule on the
    congested profiles, with hot experts among the routings."""
    configs = random_configs(N_CONFIGS, 5150, tmp_path_factory.mktemp("traces"), combine_modes,
                             combine_draws)
    names = list(CONGESTED)
    return [(cfg, names[i % len(names)]) for i, (cfg, _) in enumerate(configs)]


@pytest.mark.parametrize("chunk", range(N_CONFIGS // CHUNK))
def test_kernel_matches_twin_on_congested_fabrics(congested, chunk):
    queued = 0
    for cfg, prof in congested[chunk * CHUNK:(chunk + 1) * CHUNK]:
        twin = reference.simulate(cfg, CONGESTED[prof])
        kernel = api.simulate(cfg, CONGESTED[prof])
        assert not differences(twin, kernel), (cfg, prof, differences(twin, kernel))
        queued += kernel["ingress_queue_us"] > 0
    assert queued > CHUNK // 4          # congested indeed: stores wait at ingress ports


PAPER_SCALE = [
    # the default 48 AIVs, cm384's two-hop stores, hundreds of dies
    ({"ranks": 64, "batch": 4, "topk": 2, "protocol": "bsp", "sync": "sw",
      "schedule": "token_order"}, {}),
    # (the twin runs a stated group: UBEP's of one AIV)
    ({"ranks": 128, "batch": 2, "topk": 4, "protocol": "ubep", "sync": "sp", "cumsum_cores": 1},
     {"ingress_gbps": 98.0}),                             # an ingress port slower than egress
    ({"ranks": 256, "batch": 1, "topk": 2, "protocol": "ubep", "sync": "tff", "cumsum_cores": 1,
      "routing": "hot", "hot_experts": 4, "hot_share": 0.8}, {"ingress_gbps": 98.0}),
]


@pytest.mark.parametrize("values, overrides", PAPER_SCALE)
def test_kernel_matches_twin_at_the_papers_scale(values, overrides):
    cfg = make_config(values, 48)
    profile = load_profile(overrides=overrides)
    twin = reference.simulate(cfg, profile)
    assert twin["copies_two_hop"] > 0
    assert not differences(twin, api.simulate(cfg, profile))


def test_a_slow_receiver_holds_its_senders_back():
    """Hot experts on a slow ingress port: the senders' copies are acknowledged only once the
    hot die's port took them, so the senders' own send latency grows, not only the latency of
    visibility; and the hottest receiver's queue shows in ingress_queue_us."""
    cfg = make_config({"ranks": 16, "batch": 64, "topk": 4, "protocol": "ubep",
                       "routing": "hot", "hot_experts": 1, "hot_share": 0.9}, 48)
    fast = api.simulate(cfg, load_profile(overrides={"blocks_in_flight": 30}))
    slow = api.simulate(cfg, load_profile(overrides={"blocks_in_flight": 30,
                                                       "ingress_gbps": 49.0}))
    assert slow["send_max_core_us"] > 1.5 * fast["send_max_core_us"]
    assert slow["ingress_queue_us"] > 2 * fast["ingress_queue_us"] > 0
    # the bytes the hot port took bound the time: the latency covers them at its rate
    hot_bytes = cfg.batch * cfg.ranks * 0.9 * cfg.token_bytes / 1.25    # a lower estimate
    assert slow["latency_us"] > hot_bytes / (49.0 * 1000.0)


def test_a_tier_queues_only_where_it_is_oversubscribed():
    """A tier link fast enough for its domain's dies changes nothing; an oversubscribed one
    slows the stores that cross it, and only those: on dies of one domain, nothing."""
    cfg = make_config({"ranks": 32, "batch": 32, "topk": 8, "protocol": "bsp"}, 48)
    plain = api.simulate(cfg, load_profile())
    even = api.simulate(cfg, load_profile(overrides={"tier_gbps": [16 * 196.0]}))
    over = api.simulate(cfg, load_profile(overrides={"tier_gbps": [196.0]}))
    assert {k: v for k, v in even.items() if k != "profile"} == \
        {k: v for k, v in plain.items() if k != "profile"}
    assert over["latency_us"] > 1.2 * plain["latency_us"]
    inside = make_config({"ranks": 16, "batch": 32, "topk": 8, "protocol": "bsp"}, 48)
    assert api.simulate(inside, load_profile(overrides={"tier_gbps": [196.0]}))[
        "latency_us"] == api.simulate(inside, load_profile())["latency_us"]


def test_stores_beyond_the_nics_first_hop_class_use_the_nic():
    """Every remote store of hop class nic_from and above leaves and enters by the NIC, the
    others by the die's ports; a slower NIC slows only the configurations that use it."""
    profile = CONGESTED["nic"]
    cfg = make_config({"ranks": 8, "batch": 8, "topk": 2, "cores": 4, "cumsum_cores": 1}, 48)
    twin = reference.simulate(cfg, profile)
    for stores in twin["_detail"]["stores"]:
        for st in stores:
            if st["dst"] != st["src"]:
                assert (st["port"] == NIC) == (st["hop"] >= 3), st
    slower = load_profile(overrides={**profile.values, "nic_gbps": 5.0})
    assert api.simulate(cfg, slower)["latency_us"] > api.simulate(cfg, profile)["latency_us"]
    inside = make_config({"ranks": 4, "batch": 8, "topk": 2, "cores": 4, "cumsum_cores": 1}, 48)
    assert api.simulate(inside, slower)["latency_us"] == \
        api.simulate(inside, profile)["latency_us"]
