"""The UBEP paper's numbers, written here once: what its "Numbers for calibration" restate
(Table 2, Figure 3(b), Table 4, Figure 14, the hardware facts and claims of its text), with the
setups they were measured on, and the abstract's headline that `ubepsim validate` checks.

The paper's calibration of cm384 (ubepsim.paper.cm384) fits to them, `ubepsim validate` holds the
model against them, `ubepsim tune` tries Figure 14's group sizes. A setup the paper leaves open is
ours, and says so.
"""

from __future__ import annotations

# Hardware facts of CM384 (Section 2.3): AIVs per die, dies per NPU, the atomic store and the
# flag inside it (Section 3.4), the UB bandwidth per NPU, shared by its dies.
AIVS, NPU_DIES, BLOCK_BYTES, FLAG_BYTES = 48, 2, 512, 32
NPU_GBPS = 392.0
# Section 5.1: the testbed, 16 servers of the superpod, 256 NPU dies.
TESTBED_DIES = 256
# CANN's vector unit: a repeat reads 8 datablocks of 32 bytes (the Ascend C API's Duplicate and
# its kin).
VECTOR_BYTES = 256

# Table 2: memory-access latency by distance, ns (one-hop: through a first-tier switch, the same
# server; two-hop: through the second tier), by the model's hop classes.
TABLE2_NS = {"intra_npu": 218.0, "one_hop": 929.0, "two_hop": 2500.0}
TABLE2_LABELS = {"intra_npu": "Intra-NPU", "one_hop": "One-Hop", "two_hop": "Two-Hop"}

# Table 4: CANN EP's dispatch on CM384 by EP size, ranks: (latency us, bandwidth GB/s). Its
# workload, which the paper does not state, is inferred from the bytes per latency and DeepEP's
# low-latency benchmark; on CANN EP it is the BSP protocol with stop-and-wait flags and each AIV
# owning a block of experts, one expert per rank.
TABLE4_CANN_EP = {16: (103.0, 71.0), 32: (120.0, 61.0), 64: (139.0, 53.0), 128: (144.0, 51.0),
                  256: (151.0, 48.0)}
CANN_EP = {"batch": 128, "topk": 8, "hidden": 7168, "dtype": "fp8", "protocol": "bsp",
           "sync": "sw", "schedule": "expert_block"}

# Table 4's DeepEP column: its low-latency dispatch on H800 by EP size, ranks: (latency us,
# bandwidth GB/s), DeepEP's own README table of June 2025 (commit d8dd185, "We follow a typical
# DeepSeek-V3/R1 production setting (128 tokens per batch, 7168 hidden, top-8 experts, FP8
# dispatching and BF16 combining)"). Its expert count is not stated: ours is DeepSeek-V3's 256
# routed experts, and its launch the June kernel's: 3 warp groups per SM on ceil(256 / 3) SMs.
TABLE4_DEEPEP = {16: (118.0, 63.0), 32: (155.0, 48.0), 64: (173.0, 43.0), 128: (192.0, 39.0),
                 256: (194.0, 39.0)}
DEEPEP_EXPERTS = 256
DEEPEP_LL = {"batch": 128, "topk": 8, "hidden": 7168, "dtype": "fp8", "protocol": "deepep_ll",
             "experts": DEEPEP_EXPERTS, "cores": 3 * -(-DEEPEP_EXPERTS // 3)}

# Figure 3(b): the Token-Sending phase's efficiency by AIV count, relative to 8 AIVs, the same
# work. The paper states no setup: ours is Table 4's CANN EP at 16 ranks, where CANN's expert
# split gives 16 AIVs an expert each and leaves the others waiting at the SyncAlls (the paper:
# "the extra cores spend most of their time waiting at barriers"). Cross-validation (`ubepsim
# calibrate --paper --cv`) chose 16 over 64 and 128 (docs/calibration.md, "Cross-validation").
FIG3B_EFFICIENCY = {8: 1.000, 16: 0.767, 24: 0.576, 32: 0.456, 48: 0.311}
FIG3B_RANKS = 16

# Section 2.3: "SyncAll ... can account for approximately 15%" of CANN EP's execution time.
SYNCALL_SHARE = 0.15

# Figure 14 (Appendix C.3): per batch, the extra latency (us) of each CalCumSum group size over
# the best of its row, a panel per rank count (the 256-rank panel is withheld). Its setup is
# Figure 7's: UBEP with its
# full design (the model's defaults: sp, homogenized), one expert per die, top-8, hidden 7168.
# The paper states no payload type; ours is Table 4's fp8 (hidden 7168 and top-8 are
# DeepSeek-R1/V3.2's, W8A8 in Table 3, and Table 4's DeepEP-like workload is fp8), which
# Figures 7, 8 and 12 share with it.
FIG14_RANKS = 128
FIG14_SETUP = {"protocol": "ubep", "topk": 8, "hidden": 7168, "dtype": "fp8"}
FIG14_GROUPS = tuple(range(1, 17))
FIG14_EXTRA_US = {
    8: (46.0, 24.1, 17.0, 12.3, 9.6, 7.5, 11.5, 4.8, 3.0, 1.5, 2.0, 2.7, 0.5, 1.5, 0.0, 0.2),
    16: (38.7, 16.6, 11.7, 8.2, 8.0, 7.6, 6.0, 4.5, 2.8, 2.7, 2.5, 3.9, 2.6, 0.8, 0.0, 1.2),
    32: (20.4, 8.9, 5.6, 5.1, 4.0, 4.6, 2.9, 2.8, 2.3, 1.6, 1.7, 4.9, 3.2, 3.9, 0.0, 1.7),
    64: (15.2, 3.7, 2.8, 0.2, 0.0, 1.0, 1.7, 2.5, 2.3, 1.8, 1.6, 2.1, 1.8, 1.4, 3.0, 4.7),
    128: (2.9, 0.0, 0.3, 0.4, 3.1, 7.9, 5.7, 3.5, 7.6, 6.2, 6.3, 6.5, 7.9, 9.3, 10.9, 14.2),
}
FIG14_PANELS = {
    64: {
        8: (17.4, 15.7, 6.7, 5.8, 4.4, 4.6, 12.6, 3.1, 0.5, 0.2, 0.1, 3.1, 0.0, 0.5, 0.2, 37.3),
        16: (16.3, 12.2, 7.8, 5.1, 4.1, 3.9, 8.3, 3.6, 3.4, 3.3, 3.7, 2.5, 0.2, 3.3, 0.0, 3.1),
        32: (12.3, 11.4, 3.6, 4.8, 2.7, 1.7, 2.2, 4.7, 1.0, 0.4, 0.0, 3.2, 1.5, 1.3, 1.1, 0.9),
        64: (11.5, 0.0, 0.5, 3.5, 1.8, 2.2, 2.1, 1.4, 0.8, 1.9, 1.8, 1.5, 2.9, 2.7, 3.9, 4.4),
        128: (0.0, 1.1, 0.5, 0.3, 5.4, 4.4, 3.8, 4.8, 4.4, 3.7, 4.2, 2.7, 4.5, 6.2, 8.1, 8.8),
    },
    FIG14_RANKS: FIG14_EXTRA_US,
}
# Our reading of Figure 14, not the paper's (Appendix C.3 states only its two trends): its cells
# look like single runs on real hardware, each carrying noise of about 1-3 us; the middle of
# that is the tolerance of a cell in a fit (ubepsim.fit.calibrate.RUN_NOISE_US, also that of any
# extra latency a measurement file gives without one). A cell that stands far from its
# neighbours reads as one run's outlier, not as what its group size costs (FIG14_OUTLIERS: the
# 64-rank panel's batch 8, group 16, 37.3 us among neighbours under 1): fig14_cells reads it as
# its row neighbours' mean, for the fit, the regrets and `ubepsim validate` alike.
FIG14_OUTLIERS = {(64, 8, 16)}


def fig14_cells(ranks: int) -> tuple[tuple[float, ...], ...]:
    """A Figure 14 panel's rows (batch order), each outlier cell read as the mean of its row
    neighbours."""
    rows = {b: list(row) for b, row in FIG14_PANELS[ranks].items()}
    for r, b, g in FIG14_OUTLIERS:
        if r == ranks:
            row = rows[b]
            row[g - 1] = sum(row[i] for i in (g - 2, g) if 0 <= i < len(row)) / \
                sum(1 for i in (g - 2, g) if 0 <= i < len(row))
    return tuple(tuple(row) for row in rows.values())

# Section 3.3: the quaternary search converges in 4-5 steps and stays under 1 us.
QSEARCH_STEPS = (4, 5)
QSEARCH_US = 1.0

# The abstract: "UBEP reduces All-to-All latency by up to 52.4%" against CANN EP. A claim that
# validate checks (never a calibration target).
HEADLINE = 0.524
