"""The built-in cm384 profile's calibration: the paper's numbers (ubepsim.paper.numbers) as a
calibration problem of the general fitter (ubepsim.fit.calibrate), the profile the fit starts
from, and the text of the shipped ubepsim/profiles/cm384.toml.

`ubepsim calibrate --paper` refits cm384 here; `ubepsim validate` shows the same points
(`paper_problem`) beside the paper's numbers.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from ..model.params import ENUMS, config_columns, make_config, token_bytes
from ..model.profile import FIELDS, HOP_CLASSES, Profile, load_profile
from ..fit.calibrate import RUN_NOISE_US, Fit, Problem, fit, members, profile_toml
from .numbers import (fig14_cells, AIVS, BLOCK_BYTES, CANN_EP, TESTBED_DIES, VECTOR_BYTES,
                      FIG3B_EFFICIENCY, FIG3B_RANKS, FIG14_EXTRA_US, FIG14_GROUPS,
                      FIG14_PANELS, FIG14_RANKS, FIG14_SETUP, FLAG_BYTES, NPU_DIES, NPU_GBPS,
                      SYNCALL_SHARE, TABLE2_LABELS, TABLE2_NS, TABLE4_CANN_EP)

def _fmt_figure(v: float) -> str:
    return f"{v:g}"


# What the paper states, set rather than fitted (Table 2, Section 2.3, Section 3.4, Section 5.1),
# and the hardware figures CANN's source and its platform files give (docs/calibration.md, "The
# calibrated cm384 profile"): the vector unit reads 256 bytes a repeat.
STATED: dict[str, Any] = {
    "dies": TESTBED_DIES, "cores": AIVS, "npu_dies": NPU_DIES, "tier_sizes": [16],
    "tier_gbps": [], "rails": 0, "nic_gbps": 0.0, "nic_message_ns": 0.0, "block_bytes": BLOCK_BYTES,
    "flag_bytes": FLAG_BYTES, "atomic_bytes": BLOCK_BYTES,
    "sentinel_collision_prob": 0.0, "vector_bytes": VECTOR_BYTES, "launch_skew_ns": 0.0,
    "latency_ns": {"local": 100.0, **TABLE2_NS, "three_hop": 5000.0},
}
# The hardware figure each fitted key should land near (a number in the key's unit, and where
# it comes from): the fit keeps a key within FIGURE_RANGE of its figure, so that a key that
# would have to go further shows, by its residuals, a mechanism the model lacks.
FIGURE_RANGE = 1.5
CLOCK = 1.8          # assumed, cycles per ns: the cycle figures below are at it
MTE_GBPS = 32 * CLOCK
FIGURES: dict[str, tuple[float, str]] = {
    "init_cycles": (3 * 1000 * CLOCK, "a kernel setup: tiling reads and the double-buffer "
                    "state word's global-memory round trips (CANN's InitWinState), a few "
                    "microseconds"),
    "core_copy_gbps": (MTE_GBPS, "an AIV's GM<->UB DataCopy: 32 B a cycle (CANN's platform "
                      "file, ddr_rate)"),
    "core_store_gbps": (MTE_GBPS, "an AIV's UB->GM DataCopy (MTE3), as its loads: 32 B a cycle"),
    "store_issue_cycles": (40, "a DataCopy's issue with its queue's EnQue/DeQue and flag pair"),
    "dest_switch_cycles": (2 * 100 * CLOCK, "two dependent global-memory loads: two local "
                           "latencies"),
    "count_chain_cycles": (100, "five vector instructions of vector_op_cycles (12) and four "
                           "pipe barriers, a vector-to-scalar sync and a scalar read"),
    "status_poll_cycles": (100 * CLOCK + 3 * 12, "a strided read of local memory (100 ns) and "
                           "three vector instructions"),
}
# The 512-byte blocks of Table 4's token (its fp8 activations and scales).
TOKEN_BLOCKS = -(-int(token_bytes(CANN_EP["hidden"], ENUMS["dtype"][CANN_EP["dtype"]]))
                 // BLOCK_BYTES)
# Hardware keys at their hardware figures, never fitted: they are shared by every protocol and
# op, so a protocol's own slowness fitted into them would become everyone's floor. The ports:
# NPU_GBPS per NPU, half per die, each way. The window: CANN stages a token in one of two UB
# buffers (BUFFER_NUM = 2), so an AIV has two copies of Table 4's token in flight.
PORT_GBPS = NPU_GBPS / NPU_DIES
HARDWARE: dict[str, Any] = {"egress_gbps": PORT_GBPS, "ingress_gbps": PORT_GBPS,
                            "blocks_in_flight": 2 * TOKEN_BLOCKS}
# The starting point of the fit (the hardware figures), and the value of every key no
# calibration point constrains.
PROVISIONAL: dict[str, Any] = {
    "clock_ghz": CLOCK, "vector_op_cycles": 12, "prefix_cycles": 2,
    "syncall_cycles": 3600, "flag_check_cycles": 8, "sentinel_reset_cycles": 8,
    "sentinel_timeout_ns": 20000.0, "nic_from": "two_hop",
    **{k: (int(v) if FIELDS[k].kind is int else v) for k, (v, _) in FIGURES.items()},
}
# Fitted to every source (Table 2, Table 4, Figure 3(b), the SyncAll share, Figure 14's panels).
# The other provisional keys act only in modes the calibration points do not run (flag checks
# of tff/dc/sp, sentinel polling) or add well under a microsecond to them (prefix sums).
DURATION = "about 10 minutes of one core"   # a refit's time, for the CLI
PAPER_KEYS = ("core_store_gbps", "store_issue_cycles", "init_cycles", "core_copy_gbps",
              "syncall_cycles", "dest_switch_cycles", "count_chain_cycles",
              "status_poll_cycles", "latency_ns.intra_npu", "latency_ns.one_hop",
              "latency_ns.two_hop")
PAPER_BOUNDS = {k: (v / FIGURE_RANGE, v * FIGURE_RANGE) for k, (v, _) in FIGURES.items()}
# The hardware figure each fitted key should land near, printed beside it (a key far from its
# figure is absorbing something the model lacks).
HARDWARE_FIGURES = {
    "syncall_cycles": f"the SyncAll share, about {SYNCALL_SHARE:.0%} of CANN EP's latency "
                      f"(Section 2.3)",
    **{k: f"{_fmt_figure(v)}: {why}" for k, (v, why) in FIGURES.items()},
    **{f"latency_ns.{h}": f"Table 2: {ns:g} ns" for h, ns in TABLE2_NS.items()},
}


def paper_start() -> Profile:
    """The profile the paper fit starts from: stated values and provisional costs."""
    return dataclasses.replace(load_profile(overrides={**PROVISIONAL, **HARDWARE, **STATED}),
                               name="cm384")


def cann_ep(ranks: int, **changes: Any) -> dict[str, Any]:
    """Table 4's CANN EP configuration at `ranks`, resolved."""
    return make_config({**CANN_EP, "ranks": ranks, **changes}, AIVS).as_dict()


def syncall_count() -> int:
    """SyncAlls in one BSP dispatch, as the model runs it (its phase list)."""
    from ..kernels.layout import DISPATCH_TIMELINE
    return DISPATCH_TIMELINE["bsp"].count("syncall")


# Seeds the fit averages Figure 14's model cells over (validate takes 20): each fit evaluation
# simulates every cell for every seed, and four keep the fit's run time in minutes.
FIG14_FIT_SEEDS = tuple(range(4))


def fig14_source(ranks: int) -> str:
    """A Figure 14 panel's name as a source of calibration points."""
    return f"Figure 14 ({ranks} ranks)"


# How each source's points are compared (docs/calibration.md, "How points are weighted"):
# (relative error?, tolerance). Latencies within 3%; an efficiency or a share within 3 points;
# Figure 14's extra latencies within a cell's noise (calibrate.RUN_NOISE_US, our reading).
# Every source weighs the same in the sum of squares whatever its number of points (weight
# 1 / sqrt(points)): a Figure 14 panel's 80 cells do not drown Table 4's five latencies.
SOURCES = {"Table 2": (True, 0.03), "Table 4": (True, 0.03), "Figure 3(b)": (False, 0.03),
           "Section 2.3": (False, 0.03),
           **{fig14_source(r): (False, RUN_NOISE_US) for r in sorted(FIG14_PANELS)}}


def fig14_config(batch: int, group: int, seed: int, ranks: int = FIG14_RANKS) -> dict[str, Any]:
    """A cell of a Figure 14 panel, resolved."""
    return make_config({**FIG14_SETUP, "ranks": ranks, "batch": batch,
                        "cumsum_cores": group, "seed": seed}, AIVS).as_dict()


def fig14_extra(latency_us: np.ndarray, seeds: int) -> np.ndarray:
    """The model's Figure 14 cells from the latencies of fig14_config rows in (batch, group,
    seed) order: each cell's mean over the seeds less its row's least."""
    mean = latency_us.reshape(len(FIG14_EXTRA_US), len(FIG14_GROUPS), seeds).mean(axis=2)
    return (mean - mean.min(axis=1, keepdims=True)).ravel()


def fig14_label(batch: int, group: int, ranks: int = FIG14_RANKS) -> str:
    return f"Figure 14: {ranks} ranks, batch {batch}, {group} CalCumSum AIVs, extra (us)"


def paper_problem(fig14_seeds: Sequence[int] = FIG14_FIT_SEEDS,
                  sources: Sequence[str] = tuple(SOURCES)) -> Problem:
    """The points of `sources` (SOURCES' names, all by default): Table 2's latencies, Table 4's
    CANN EP latencies, Figure 3(b)'s efficiencies, the SyncAll share and Figure 14's panels.

    Efficiency with n AIVs = (T_8 * 8) / (T_n * n), T the Token-Sending phase of the same work.
    The SyncAll share is the barriers' own cost (all of them, after the last AIV arrives) over
    the latency, averaged over Table 4's configurations (run whether or not their latencies are
    points). Figure 3(b)'s 8-AIV point is 100% by definition and is left out. Table 2's points
    are the profile's own latencies, in whole cycles. Figure 14's cells are numbers.fig14_cells':
    an outlier cell read as its row neighbours' mean (our reading).
    """
    unknown = [x for x in sources if x not in SOURCES]
    if unknown:
        raise ValueError(f"unknown source(s) {unknown}; known: {', '.join(SOURCES)}")
    ranks = list(TABLE4_CANN_EP)
    cores = np.array(list(FIG3B_EFFICIENCY), dtype=float)
    seeds = list(fig14_seeds)
    panels = [r for r in sorted(FIG14_PANELS) if fig14_source(r) in sources]
    cells = [(b, g) for b in FIG14_EXTRA_US for g in FIG14_GROUPS]
    n4 = len(ranks) if "Table 4" in sources or "Section 2.3" in sources else 0
    n3 = len(cores) if "Figure 3(b)" in sources else 0
    per_panel = len(cells) * len(seeds)
    rows = ([cann_ep(r) for r in ranks][:n4]
            + [cann_ep(FIG3B_RANKS, cores=int(a)) for a in cores][:n3]
            + [fig14_config(b, g, s, r) for r in panels for b, g in cells for s in seeds])

    def values(res: dict[str, np.ndarray], profile: Profile) -> np.ndarray:
        latency = res["latency_us"][:n4]
        out = []
        if "Table 2" in sources:
            out.append([profile.latency_cycles()[HOP_CLASSES.index(h)] / profile.clock_ghz
                        for h in TABLE2_NS])
        if "Table 4" in sources:
            out.append(latency)
        if n3:
            out.append(efficiency(res["phase_send_us"][n4:n4 + n3], cores)[1:])
        if "Section 2.3" in sources:
            syncall_us = syncall_count() * profile.syncall_cycles / (profile.clock_ghz * 1000.0)
            out.append([np.mean(syncall_us / latency)])
        for i in range(len(panels)):
            at = n4 + n3 + i * per_panel
            out.append(fig14_extra(res["latency_us"][at:at + per_panel], len(seeds)))
        return np.concatenate(out)

    # as `ubepsim validate` names the same points (it takes these labels)
    points = ([("Table 2", f"Table 2: {TABLE2_LABELS[h]} latency (ns)", "ns", ns, False)
               for h, ns in TABLE2_NS.items()]
              + [("Table 4", f"Table 4: CANN EP latency, {r} ranks (us)", "us",
                  TABLE4_CANN_EP[r][0], False) for r in ranks]
              + [("Figure 3(b)", fig3b_label(int(a)), "", FIG3B_EFFICIENCY[int(a)], False)
                 for a in cores[1:]]
              + [("Section 2.3", "Section 2.3: SyncAll share of CANN EP latency", "",
                  SYNCALL_SHARE, False)]
              + [(fig14_source(r), fig14_label(b, g, r), "us",
                  fig14_cells(r)[list(FIG14_PANELS[r]).index(b)][g - 1], False)
                 for r in panels for b, g in cells])
    points = [p for p in points if p[0] in sources]
    count = {name: sum(1 for p in points if p[0] == name and not p[4]) for name in SOURCES}
    return Problem(tuple(p[1] for p in points), tuple(p[2] for p in points),
                   np.array([p[3] for p in points]), config_columns(rows), values,
                   relative=np.array([SOURCES[p[0]][0] for p in points]),
                   tolerance=np.array([SOURCES[p[0]][1] for p in points]),
                   weight=np.array([0.0 if p[4] else 1.0 / math.sqrt(count[p[0]])
                                    for p in points]))


def fig3b_label(cores: int) -> str:
    return f"Figure 3(b): Token-Sending efficiency, {cores} AIVs"


def efficiency(send_us: np.ndarray, cores: np.ndarray) -> np.ndarray:
    """Figure 3(b)'s efficiency of each AIV count relative to the first: (T_1 n_1) / (T n)."""
    return send_us[0] * cores[0] / (send_us * cores)


def calibrate_paper(threads: int | None = None, max_evaluations: int = 100,
                    progress: Callable[[str], None] | None = None) -> Fit:
    """Refit cm384's free costs to the paper's numbers, from the provisional start."""
    return fit(paper_problem(), paper_start(), PAPER_KEYS, threads=threads,
               max_evaluations=max_evaluations, progress=progress, bounds=PAPER_BOUNDS)


# Where each value of the shipped profile comes from (comments of cm384.toml).
PAPER_NOTES = {
    "clock_ghz": "assumed; the fitted costs are in its cycles",
    "cores": f"paper: {AIVS}",
    "npu_dies": f"paper: {NPU_DIES}",
    "tier_sizes": "paper: a 16-die server under a first-tier switch",
    "block_bytes": f"paper: {BLOCK_BYTES} B atomic stores",
    "flag_bytes": f"paper: {FLAG_BYTES} B",
    "atomic_bytes": f"paper: {BLOCK_BYTES} B atomic writes (Table 5)",
    "nic_message_ns": "no NIC on CM384",
    "egress_gbps": f"paper: {NPU_GBPS:g} GB/s per NPU (Section 2.3), {PORT_GBPS:g} per die, one way",
    "ingress_gbps": f"paper: {NPU_GBPS:g} GB/s per NPU (Section 2.3), {PORT_GBPS:g} per die, one way",
    "blocks_in_flight": f"CANN's two UB buffers a token is staged in (BUFFER_NUM = 2): "
                        f"{2 * TOKEN_BLOCKS} blocks of Table 4's token",
    "launch_skew_ns": "0: the paper states no spread of the dies' launches; its latencies are "
                      "taken as one launch's",
    "rails": "paper: its tiers are switch domains, not rails",
    "sentinel_collision_prob": f"paper: 2^-{8 * FLAG_BYTES} for a {FLAG_BYTES} B sentinel",
    "latency_ns.local": "same die; not in Table 2 (negligible): provisional",
    "latency_ns.three_hop": "no third tier on CM384: provisional",
}


def paper_profile_toml(result: Fit) -> str:
    """The text of ubepsim/profiles/cm384.toml for a paper fit: each fitted key marked so, with
    the hardware figure it should be near."""
    fitted = {m: "fitted" + (f"; near: {HARDWARE_FIGURES[m]}" if m in HARDWARE_FIGURES else "")
              for k in PAPER_KEYS for m in members(k)}
    provisional = {k: "provisional: no calibration point constrains it" for k in PROVISIONAL
                   if k not in fitted and k not in PAPER_NOTES}
    header = [
        "Built-in hardware profile: a CloudMatrix384-like superpod (UBEP paper, Section 2).",
        "Generated by `ubepsim calibrate --paper --out ubepsim/profiles/cm384.toml`: stated",
        "values are set from the paper (the ports at its 392 GB/s per NPU), the keys marked",
        f"`fitted` are fitted to its Table 2 (latencies), Table 4 (CANN EP latency, "
        f"{min(TABLE4_CANN_EP)}-{max(TABLE4_CANN_EP)}",
        f"ranks), Figure 3(b) (Token-Sending efficiency, {min(FIG3B_EFFICIENCY)}-"
        f"{max(FIG3B_EFFICIENCY)} AIVs), the SyncAll",
        f"share (Section 2.3) and Figure 14 (CalCumSum group sizes at "
        f"{' and '.join(map(str, sorted(FIG14_PANELS)))} ranks), starting",
        "from the provisional values in ubepsim/paper/cm384.py;",
        f"rms error {result.rms_error:.2f} tolerances over the {result.table.height} points, "
        f"{result.table.height - len(PAPER_KEYS)} degrees of freedom",
        "(docs/calibration.md, \"The calibrated cm384 profile\").",
        "Every key is documented in ubepsim/model/profile.py (FIELDS); a profile file or a "
        "grid's",
        "[profile] table may override any of them.",
    ]
    return profile_toml(result.profile, header, {**PAPER_NOTES, **provisional, **fitted})
