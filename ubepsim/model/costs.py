"""Lowering: a configuration and a profile become the integer cycle costs the model runs on.

Written once, on numpy columns, so that one configuration (the reference model, `ubepsim run`)
and a million (the sweep kernel) are lowered by the same code. Every value is an int64 count of
cycles, bytes or blocks, except the sentinel collision chances, which are probabilities.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from ..kernels.layout import (COSTS, COUNT_CHAIN_OPS, EXPERT_SHIFT, INT32, N_HOPS, N_TIERS,
                              PER_EXPERT, PRECEDED, RECEIVE_SLOTS, STORE_WORK)
from ..kernels.sync import COLLIDES, IN_BLOCK, POLICY, on_copies
from ..kernels.protocols import (HEADER_BYTES, HIDDEN_SPLIT, RECEIVE, SIGNALLED_COPIES, SYNC,
                                 TOKEN_PRELOAD, chosen, per_dest_of, uses)
from .params import CombineDtype, Dtype, Op, combine_bytes, copies_per_die, token_bytes
from .profile import HOP_CLASSES, Profile
from .workload import batch_max


def _ceil_div(a, b):
    return -(-a // b)


# The columns of the cost matrix handed to the kernels, by name (kernels/layout.py COSTS).
COST_INDEX = {name: i for i, name in enumerate(COSTS)}


# Vector instructions, as (instructions, bytes an element) over the elements they run on.
# Dispatch's dynamic per-token quantization of a bf16 token (fp8, int8; CANN's QuantProcess):
# Cast to fp32, Abs, ReduceMax, Muls by the scale, Cast to int32 and to fp16 over fp32 elements,
# then the Cast to 8 bits over fp16 ones.
TOKEN_QUANT_OPS = ((6, 4), (1, 2))
# CANN's combine, per copy and per token (docs/model.md, "Combine"), all over fp32 elements: the
# int8 quantization (Int8QuantProcess: seven over the hidden elements, two over the scales), the
# dequantization (DequantProcess: five and one), and the reduction (per copy Cast, Muls, Add;
# per token Duplicate and the Cast back).
QUANT_OPS = (7, 2)
DEQUANT_OPS = (5, 1)
REDUCE_COPY_OPS = 3
REDUCE_TOKEN_OPS = 2
FP32 = 4


def vector_cycles(v: dict, n, width: int, times: int = 1):
    """`times` vector instructions over n elements of `width` bytes: each its fixed cycles and
    the elements' bytes at the vector unit's width (a repeat of vector_bytes a cycle)."""
    return times * (v["vector_op_cycles"] + _ceil_div(n * width, v["vector_bytes"]))


def lower(cols: dict[str, np.ndarray], profile: Profile) -> tuple[np.ndarray, np.ndarray]:
    """Integer costs [n, len(COSTS)] and sentinel collision chances [n, 3] (copy, count message,
    returned copy).

    `cols` holds resolved parameter columns with enums as integer codes.
    """
    v = profile.values
    protocol = np.asarray(cols["protocol"], dtype=np.int64)
    sync = chosen(uses(protocol, SYNC), np.asarray(cols["sync"], dtype=np.int64))
    m = copies_per_die(cols["batch"], cols["topk"])
    xfer, issue = _transfers(v)
    tb, copy_blocks, count_blocks, fused = _blocks(cols, v, protocol, sync)
    out = _dispatch(cols, profile, m, protocol, tb, copy_blocks, count_blocks, xfer)
    for kind, blocks in (("copy", copy_blocks), ("count", count_blocks),
                         ("signal", np.ones_like(m))):
        out |= _store_costs(kind, blocks * v["block_bytes"], profile, xfer, issue)
    out |= _fabric(profile)
    out |= _combine(cols, profile, m, sync, protocol, xfer, issue, fused)
    costs = np.stack([np.broadcast_to(out[name], m.shape) for name in COSTS], axis=1)
    return costs.astype(np.int64), _collision_chances(v, sync, copy_blocks, count_blocks,
                                                      out["return_blocks"])


def _transfers(v: dict):
    """xfer(nbytes, gbps): cycles to move nbytes at gbps; issue(nbytes): an AIV's store of
    nbytes, its fixed cycles and its bytes at core_store_gbps."""
    def xfer(nbytes, gbps):
        return np.ceil(nbytes * v["clock_ghz"] / gbps - 1e-9).astype(np.int64)

    def issue(nbytes):
        return v["store_issue_cycles"] + xfer(nbytes, v["core_store_gbps"])

    return xfer, issue


def _blocks(cols, v: dict, protocol, sync):
    """A token copy's bytes and blocks, a count message's blocks, and a block's payload where
    the flag rides in it."""
    hidden = np.asarray(cols["hidden"], dtype=np.int64)
    dtype = np.asarray(cols["dtype"], dtype=np.int64)
    e_local = np.asarray(cols["experts"], dtype=np.int64) // np.asarray(cols["ranks"],
                                                                        dtype=np.int64)
    block = v["block_bytes"]
    # A variant with the flag in the block (tff) gives up its leading flag_bytes to the flag
    # (paper Section 3.4), in the stores that signal their own arrival: count messages, and
    # token copies where the protocol signals them (kernels/sync.py on_copies)
    fused = block - v["flag_bytes"]
    tb = token_bytes(hidden, dtype) + uses(protocol, HEADER_BYTES)
    copy_blocks = _ceil_div(tb, np.where(on_copies(sync, uses(protocol, SIGNALLED_COPIES),
                                                   IN_BLOCK) == 1, fused, block))
    # an int32 per expert it counts: every expert of the destination, or (per expert) one
    count_blocks = _ceil_div(4 * (e_local // per_dest_of(protocol, e_local)),
                             np.where(POLICY[sync, IN_BLOCK] == 1, fused, block))
    return tb, copy_blocks, count_blocks, fused


def _dispatch(cols, profile: Profile, m, protocol, tb, copy_blocks, count_blocks,
              xfer) -> dict[str, np.ndarray]:
    """Dispatch's costs on the AIVs, beside its stores': Init's loads and search, each copy's
    work, the receivers' checks and copies, and the profile's fixed cycles the kernel reads."""
    v = profile.values
    hidden = np.asarray(cols["hidden"], dtype=np.int64)
    preload = uses(protocol, TOKEN_PRELOAD) == 1
    # a bf16 token into UBuf, then (fp8, int8) quantized: CANN's send loop does it for each
    # copy, a protocol that preloads (UBEP) for each token its AIV sends, at Init
    quantized = np.asarray(cols["dtype"], dtype=np.int64) != Dtype.bf16
    token = xfer(2 * hidden, v["core_copy_gbps"]) + np.where(
        quantized, sum(vector_cycles(v, hidden, width, n) for n, width in TOKEN_QUANT_OPS), 0)
    return {
        "token_bytes": tb,
        "copy_blocks": copy_blocks,
        "count_blocks": count_blocks,
        "local_copy": xfer(tb, v["core_copy_gbps"]),
        "ids_load": xfer(INT32 * m, v["core_copy_gbps"]),
        "init_load": np.where(preload, token, 0),
        # CANN's send loop, per copy: the token's load and quantization (and the destination
        # window's address, GetWindAddrByRankId, whatever the store before it: layout.STORE_WORK
        # charges dest_switch per copy there)
        "copy_load": np.where(preload, 0, token),
        "copy_count": np.where(preload, 0, 1),
        "vector_op": np.full_like(m, v["vector_op_cycles"]),
        "vector_bytes": np.full_like(m, v["vector_bytes"]),
        "copy_verify": v["flag_check_cycles"] * copy_blocks,
        "count_verify": v["flag_check_cycles"] * count_blocks,
        "copy_reset": v["sentinel_reset_cycles"] * copy_blocks,
        "count_reset": v["sentinel_reset_cycles"] * count_blocks,
        "vcount": vector_cycles(v, m, INT32),
        "prefix": np.full_like(m, v["prefix_cycles"]),
        "init": np.full_like(m, v["init_cycles"]),
        "launch_skew": np.full_like(m, profile.cycles(v["launch_skew_ns"])),
        "syncall": np.full_like(m, v["syncall_cycles"]),
        "blocks_in_flight": np.full_like(m, v["blocks_in_flight"]),
        "timeout": np.full_like(m, profile.cycles(v["sentinel_timeout_ns"])),
        "npu_dies": np.full_like(m, v["npu_dies"]),
        "rails": np.full_like(m, v["rails"]),
        # per window address loaded, per expert counted, per source's status read
        # (docs/model.md, "Costs per destination and per source"; how often each store pays
        # them: layout.STORE_WORK)
        "dest_switch": np.full_like(m, v["dest_switch_cycles"]),
        "count_chain": np.full_like(m, v["count_chain_cycles"]),
        "status_poll": np.full_like(m, v["status_poll_cycles"]),
    }


def _collision_chances(v: dict, sync, copy_blocks, count_blocks, return_blocks) -> np.ndarray:
    """[n, 3]: the chance that a polled copy, count message or returned copy collides: that
    any of its blocks' payload equals the sentinel, under a variant that polls a sentinel (sp);
    else 0."""
    p = v["sentinel_collision_prob"]
    chance = np.stack([1.0 - (1.0 - p) ** copy_blocks, 1.0 - (1.0 - p) ** count_blocks,
                       1.0 - (1.0 - p) ** return_blocks], axis=1)
    return np.where(POLICY[sync, COLLIDES][:, None] == 1, chance, 0.0)


def _store_costs(kind: str, wire, profile: Profile, xfer, issue) -> dict[str, np.ndarray]:
    """What a store of `kind` moving `wire` bytes costs (layout.STORE_COSTS): its issue on the
    AIV, each port (egress, ingress, the NIC's both ways) and each tier's links where they
    queue (tier_links), 0 elsewhere."""
    v = profile.values
    out = {f"{kind}_issue": issue(wire), f"{kind}_egress": xfer(wire, v["egress_gbps"]),
           f"{kind}_ingress": xfer(wire, v["ingress_gbps"]),
           f"{kind}_nic": xfer(wire, v["nic_gbps"]) + profile.cycles(v["nic_message_ns"])
           if v["nic_gbps"] else 0 * wire}
    for k, gbps in enumerate(tier_links(profile)):
        out[f"{kind}_tier{k + 1}"] = xfer(wire, gbps) if gbps else 0 * wire
    return out


def nic_from(profile: Profile) -> int:
    """The nearest hop class whose stores leave and enter by the NIC: N_HOPS with no NIC."""
    v = profile.values
    return HOP_CLASSES.index(v["nic_from"]) if v["nic_gbps"] else N_HOPS


def tier_links(profile: Profile) -> list[float]:
    """Each tier's link bandwidth where it queues, else 0: where it is below what the domain's
    dies can put onto it, its size times the fastest port its stores leave by (the NIC for the
    hop classes from nic_from up, the egress port below). A tier of tier_sizes climbed by hop
    class 3 + k and above."""
    v = profile.values
    out = [0.0] * N_TIERS
    for k, (dies, gbps) in enumerate(zip(v["tier_sizes"], v["tier_gbps"])):
        ports = {v["nic_gbps"] if h >= nic_from(profile) else v["egress_gbps"]
                 for h in range(3 + k, 3 + len(v["tier_sizes"]))}
        if gbps < dies * max(ports):
            out[k] = gbps
    return out


def _fabric(profile: Profile) -> dict[str, int]:
    """The fabric's costs, the same for every configuration: polls, tier sizes, the NIC's
    first hop class, hop latencies."""
    tiers = list(profile.values["tier_sizes"]) + [0] * N_TIERS
    # A poll is one load of the poller's own memory; at least a cycle, so polling advances time.
    out = {"poll": max(1, profile.latency_cycles()[0]), "nic_from": nic_from(profile),
           **{f"tier{k + 1}_dies": tiers[k] for k in range(N_TIERS)}}
    for h, cyc in zip(HOP_CLASSES, profile.latency_cycles()):
        out[f"lat_{h}"] = cyc
    return out


def _combine(cols, profile: Profile, m, sync, protocol, xfer, issue,
             fused) -> dict[str, np.ndarray]:
    """Combine's costs (docs/model.md, "Combine"), from the same profile keys as dispatch's:
    the vector instructions at vector_op_cycles and vector_bytes, local copies at
    core_copy_gbps, stores as a token copy's."""
    v = profile.values
    hidden = np.broadcast_to(np.asarray(cols["hidden"], dtype=np.int64), m.shape)
    combine_dtype = np.broadcast_to(np.asarray(cols["combine_dtype"]).astype(np.int64), m.shape)
    int8 = combine_dtype == CombineDtype.int8
    scales = -(-hidden // 8)
    rb = combine_bytes(hidden, combine_dtype)
    blocks = _ceil_div(rb, np.where(on_copies(sync, uses(protocol, SIGNALLED_COPIES), IN_BLOCK)
                                    == 1, fused, v["block_bytes"]))

    def vec(n, times=1):
        """`times` vector instructions over n fp32 elements each."""
        return vector_cycles(v, n, FP32, times)

    # CANN's V1 (protocols.HIDDEN_SPLIT) splits a token's hidden dimension over cores / batch AIVs
    # when the batch is smaller than the AIVs and the copies are not quantized: the first parts of
    # (hidden / 32 / p) x 32 elements, the last the rest. Where dies hold different batches, at the
    # most any die holds: that die, the straggler, splits as CANN's would; one with fewer tokens
    # splits no finer (one cost row serves every die)
    batch = batch_max(cols)
    cores = np.asarray(cols["cores"], dtype=np.int64)
    split = np.where((uses(protocol, HIDDEN_SPLIT) == 1) & ~int8 & (batch < cores), cores // batch,
                     1)
    part = np.where(split > 1, (hidden // 32) // split * 32, hidden)
    last = hidden - (split - 1) * part
    dequant = np.where(int8, vec(hidden, DEQUANT_OPS[0]) + vec(scales, DEQUANT_OPS[1]), 0)

    def reduce_copy(n):
        # the copy's read from the window (the whole quantized copy under int8), its
        # dequantization, Cast to fp32, Muls by the routing weight, Add
        return np.where(int8, xfer(rb, v["core_copy_gbps"]), xfer(2 * n, v["core_copy_gbps"])) + \
            dequant + vec(n, REDUCE_COPY_OPS)

    def reduce_token(n):
        # Duplicate (the fp32 sum set to zero), the Cast back to bf16, the token's store
        return vec(n, REDUCE_TOKEN_OPS) + xfer(2 * n, v["core_copy_gbps"])

    fixed_us = np.asarray(cols["expert_fixed_us"]).astype(np.float64)
    per_copy = np.asarray(cols["expert_ns_per_copy"]).astype(np.float64)
    return {
        "return_bytes": rb, "return_blocks": blocks,
        **_store_costs("return", blocks * v["block_bytes"], profile, xfer, issue),
        # the expert's output (bf16) read into UBuf, then quantized under int8
        "return_load": xfer(2 * hidden, v["core_copy_gbps"]),
        "return_quant": np.where(int8, vec(hidden, QUANT_OPS[0]) + vec(scales, QUANT_OPS[1]),
                                 0),
        "return_verify": v["flag_check_cycles"] * blocks,
        "return_reset": v["sentinel_reset_cycles"] * blocks,
        "reduce_copy": reduce_copy(part), "reduce_token": reduce_token(part),
        "reduce_copy_last": reduce_copy(last), "reduce_token_last": reduce_token(last),
        "reduce_split": split,
        "expert": np.ceil(fixed_us * 1000.0 * v["clock_ghz"] - 1e-9).astype(np.int64),
        "expert_copy": np.ceil(per_copy * v["clock_ghz"] * (1 << EXPERT_SHIFT)
                               - 1e-9).astype(np.int64),
    }


def time_bound(cols: dict[str, np.ndarray], costs: np.ndarray) -> np.ndarray:
    """An upper bound on every time the model reaches in each configuration, in cycles (float,
    so that it cannot overflow itself), whatever the routing.

    A time is the length of the longest chain of events leading to it, each event adding its
    cost after the latest of those it waits for (a poll overshoots by less than a poll period,
    plus a sentinel timeout on a collision). On one fabric a chain may run through any die:
    an AIV waits for an acknowledgement from any destination's ingress port, which waited for
    stores from every die. So the sending side's chain is at most every die's sending work
    (Init; per copy its work, each of its layout.STORE_WORK charges once, its issue and at most
    one signal's; per destination its count
    message and at most one signal; bsp's first SyncAll) and every store's way through the
    fabric (its ports, the tier links, its hop), added up. A receiver then polls at most
    every copy, each source's counts and the offsets, with the work after each, then bsp's two
    SyncAlls and prefix sums. Combine's chain is the same in kind (every die returning every
    copy, its reducers polling and reducing each of theirs), after the dispatch and the
    experts' time in a layer; each op's first kernel after its die's launch offset, below the
    launch skew. `cols` holds the resolved parameter columns, enums as codes.
    """
    k = _Chain.of(cols, costs)
    c = k.c
    # a layer's combine starts after the dispatch and the experts' time (every copy on one die)
    expert_time = c["expert"] + k.ranks * k.m * c["expert_copy"] / (1 << EXPERT_SHIFT) + 1
    op = np.asarray(cols["op"]).astype(np.int64)
    dispatched, combined = _dispatch_chain(k), _combine_chain(k)
    dispatched, combined = dispatched + c["launch_skew"], combined + c["launch_skew"]
    return np.where(op == Op.dispatch, dispatched,
                    np.where(op == Op.combine, combined, dispatched + expert_time + combined))


class _Chain(NamedTuple):
    """What time_bound's chains read, per configuration (float columns, so that no sum can
    overflow): the costs by name, the sizes, and the most any store, poll or search costs."""

    c: dict[str, np.ndarray]
    ranks: np.ndarray
    experts: np.ndarray
    cores: np.ndarray
    m: np.ndarray          # a die's copies at the most any die holds (workload.batch_max)
    e_local: np.ndarray
    messages: np.ndarray   # count messages (statuses) a die sends each destination
    polled: np.ndarray     # count messages a receiver polls: per (expert, source) pair with
                           # fixed slots, else per source
    hop: np.ndarray        # the longest hop's latency
    search: np.ndarray     # quaternary search steps and the final count, at most
    poll: np.ndarray       # a poll's overshoot: less than a poll period, and a timeout

    @classmethod
    def of(cls, cols: dict[str, np.ndarray], costs: np.ndarray) -> _Chain:
        c = {name: costs[:, i].astype(np.float64) for name, i in COST_INDEX.items()}
        ranks = np.asarray(cols["ranks"], dtype=np.float64)
        experts = np.asarray(cols["experts"], dtype=np.float64)
        e_local = experts / ranks
        protocol = np.asarray(cols["protocol"], dtype=np.int64)
        # every die's copies, as a bound
        m = copies_per_die(batch_max(cols), cols["topk"]).astype(np.float64)
        return cls(c, ranks, experts, np.asarray(cols["cores"], dtype=np.float64), m, e_local,
                   per_dest_of(protocol, e_local),
                   np.where(uses(protocol, RECEIVE) == RECEIVE_SLOTS, experts, ranks),
                   np.max([c[f"lat_{h}"] for h in HOP_CLASSES], axis=0),
                   np.log2(experts) + 3, c["poll"] + c["timeout"])

    def work(self, at: str) -> np.ndarray:
        """The most an AIV pays before one store of work kind `at` (layout.STORE_WORK): each
        charge once, per expert of a count message's share, PRECEDED's where the send loop
        counts (copy_count)."""
        c = self.c
        return sum(c[w.cost] * (self.e_local / self.messages if w.per == PER_EXPERT else
                                c["copy_count"] if w.per == PRECEDED else 1)
                   for w in STORE_WORK if w.at == at)

    def way(self, kind: str) -> np.ndarray:
        """A store's way through the fabric: both its ports (or the NIC's), every tier link
        twice, its hop."""
        c = self.c
        return c[f"{kind}_egress"] + c[f"{kind}_ingress"] + 2 * c[f"{kind}_nic"] + self.hop + \
            2 * sum(c[f"{kind}_tier{k + 1}"] for k in range(N_TIERS))


def _dispatch_chain(k: _Chain) -> np.ndarray:
    """Dispatch's longest chain: every die's sending work, every store's way through the
    fabric, then a receiver's polls and work."""
    c, ranks, m, messages, poll = k.c, k.ranks, k.m, k.messages, k.poll
    signal = k.work("signal") + c["signal_issue"]
    # CANN's count of a copy's predecessors: its vector instructions over at most m ids (its
    # fixed cycles are a STORE_WORK charge)
    count = COUNT_CHAIN_OPS * (c["vector_op"] + INT32 * m / c["vector_bytes"] + 1)
    sending = k.cores * (c["init"] + c["ids_load"] + k.search * c["vcount"]) + \
        m * (c["init_load"] + k.work("copy") + c["copy_count"] * count + c["copy_issue"] +
             signal) + \
        ranks * messages * (k.work("count") + c["count_issue"] + signal) + c["syncall"]
    fabric = ranks * (m * (k.way("copy") + k.way("signal")) +
                      ranks * messages * (k.way("count") + k.way("signal")))
    receiving = ranks * m * (poll + c["copy_verify"] + c["copy_reset"] + c["local_copy"]) + \
        k.polled * (poll + c["status_poll"] + c["count_verify"] + c["count_reset"]) + \
        k.experts * c["prefix"] + \
        k.cores * poll + 2 * c["syncall"] + k.experts * c["prefix"] + c["signal_issue"] + \
        c["lat_local"]
    return ranks * sending + fabric + receiving


def _combine_chain(k: _Chain) -> np.ndarray:
    """Combine's longest chain, from its start: a die may return every copy (hot experts),
    each with its read, quantization, store and a signal, and a status to every die; every
    die's returns through the fabric; its reducers poll each of its M copies and the statuses,
    reduce each copy and token (the last part of a split one is the largest), a SyncAll."""
    c, ranks, m, messages, poll = k.c, k.ranks, k.m, k.messages, k.poll
    signal = k.work("signal") + c["signal_issue"]
    returning = k.cores * (c["init"] + k.search * c["vcount"]) + \
        ranks * m * (k.work("return") + c["return_issue"] + signal) + ranks * messages * signal
    returned = ranks * (ranks * m * (k.way("return") + k.way("signal")) +
                        ranks * messages * k.way("signal"))
    reducing = m * (poll + c["return_verify"] + c["return_reset"] + c["reduce_copy_last"]) + \
        m * c["reduce_token_last"] + ranks * messages * (poll + c["status_poll"]) + c["syncall"]
    return ranks * returning + returned + reducing
