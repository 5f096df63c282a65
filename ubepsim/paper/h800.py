"""The h800 preset's calibration: Table 4's DeepEP column (DeepEP's own low-latency table of June
2025) as a problem of ubepsim.fit.calibrate, one source per EP size.

Everything else in ubepsim/profiles/h800.toml is stated by a hardware source or provisional; the
fit moves only PAPER_KEYS, each shown beside its hardware figure, from its provisional start.
The column's combine latencies and its EP8 row are left out on purpose: the model is judged on
them.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from ..model.params import config_columns, make_config
from ..model.profile import Profile, load_profile
from ..fit.calibrate import Fit, Problem, fit, members, profile_toml, with_values
from .numbers import DEEPEP_LL, TABLE4_DEEPEP

NIC_GBPS = 50.0     # one ConnectX-7 at 400 Gb/s per GPU (DeepEP README; DeepEP issue 16)
CLOCK_GHZ = 1.98    # the preset's clock_ghz
SMS = 132           # an H800 SXM's SMs: the preset's cores
# The key the fit moves: the spread of the ranks' launches, a mechanism the test that measured
# the column has (each rank's dispatch starts as its previous combine ends) and no source
# states. The NIC's fixed cost per message (nic_message_ns) is its hardware figure and a core's
# setup (init_cycles) a launch's few microseconds, both stated. Fitted in the skew's place,
# the two came to 6.06 ns and 24.6 us and left 16 ranks 13% low out of sample (`git show
# 35550d0:docs/calibration.md`, "The h800 preset"); with the NIC's cost held within 1.5x of
# its figure, init_cycles came to 24.1 us and 16 ranks 6.5% low. A core's cost to issue a put
# (store_issue_cycles) was tried in the NIC's place: the fit drove it to 11,000 cycles, a put
# every 6 us, and left 16 and 256 ranks 10% and 15% off (`git show
# 9fb11d2:docs/calibration.md`).
PAPER_KEYS = ("launch_skew_ns",)
DURATION = "under a minute on 2 cores"   # a refit's time, for the CLI
LAUNCH_NS = 5000.0     # init_cycles: a kernel's launch and setup, a few microseconds
# The fit's start, and the values it sets beside it: the NIC's figure, a launch's setup.
PROVISIONAL: dict[str, Any] = {"launch_skew_ns": 10000.0, "nic_message_ns": 5.0,
                               "init_cycles": round(LAUNCH_NS * CLOCK_GHZ)}
PAPER_BOUNDS = {"launch_skew_ns": (0.0, 200000.0)}
HARDWARE_FIGURES = {
    "launch_skew_ns": "no hardware figure: it stands for the spread of the ranks' starts in "
                      "DeepEP's test loop (bench_kineto: 30 dispatch-combine pairs with no "
                      "barrier between them, each rank's dispatch launched as its combine ends)",
}


def source(ranks: int) -> str:
    return f"Table 4 DeepEP, {ranks} ranks"


SOURCES = tuple(source(r) for r in TABLE4_DEEPEP)


def deepep(ranks: int, **changes: Any) -> dict[str, Any]:
    """Table 4's DeepEP configuration at `ranks` (numbers.DEEPEP_LL), with `changes`,
    resolved."""
    return make_config({**DEEPEP_LL, "ranks": ranks, **changes}, SMS).as_dict()


def paper_start() -> Profile:
    """The h800 preset at the fit's provisional start."""
    return with_values(load_profile("h800"), PROVISIONAL)


def paper_problem(sources: Sequence[str] = SOURCES) -> Problem:
    """Each kept EP size's dispatch latency, within 3%."""
    ranks = [r for r in TABLE4_DEEPEP if source(r) in sources]
    return Problem(labels=tuple(source(r) for r in ranks), units=("us",) * len(ranks),
                   measured=np.array([TABLE4_DEEPEP[r][0] for r in ranks]),
                   cols=config_columns([deepep(r) for r in ranks]),
                   model_values=lambda res, _profile: res["latency_us"])


def calibrate_paper(threads: int | None = None, max_evaluations: int = 100,
                    progress: Callable[[str], None] | None = None,
                    sources: Sequence[str] = SOURCES) -> Fit:
    """Refit the h800 preset's PAPER_KEYS to the DeepEP column, from the provisional start."""
    return fit(paper_problem(sources), paper_start(), PAPER_KEYS, threads=threads,
               max_evaluations=max_evaluations, progress=progress, bounds=PAPER_BOUNDS)


def score_paper(profile: Profile, threads: int | None = None) -> dict[str, dict[str, Any]]:
    """Each EP size's error at a profile: what a fold that left it out is scored on."""
    problem = paper_problem()
    values = problem.simulate(profile, threads)
    errors = problem.errors(values)
    return {label: {"latency_us": [float(v)], "error": [float(e)],
                    "max_abs_error": float(abs(e))}
            for label, v, e in zip(problem.labels, values, errors)}


# Where each other value of the preset comes from (comments of h800.toml).
NOTES = {
    "clock_ghz": "assumed: the H100 SXM's boost clock (the H800 is its export part)",
    "dies": "DeepSeek-V3's H800 cluster (arXiv 2412.19437, Section 3.1)",
    "cores": "SMs of the H800 SXM (deepep_ll's default: its launch's warp groups)",
    "store_issue_cycles": "provisional: a warp building and posting one work request",
    "dest_switch_cycles": "provisional: a peer's address and QP",
    "status_poll_cycles": "provisional: an acquire load's read-out",
    "flag_check_cycles": "provisional", "sentinel_reset_cycles": "provisional",
    "sentinel_timeout_ns": "provisional",
    "sentinel_collision_prob": "a count word is never 0: no collision",
    "npu_dies": "a GPU per package: no intra_npu class",
    "tier_sizes": "8 GPUs per NVLink node; provisional: 32 nodes under one leaf group",
    "tier_gbps": "a non-blocking fat tree: no tier queues",
    "nic_gbps": "one ConnectX-7, 400 Gb/s (DeepEP README; DeepEP issue 16)",
    "nic_from": "stores leaving the node go through the NIC; within it over NVLink",
    "rails": "provisional: not rail-optimized; 8 puts each GPU's NIC on its own rail's leaf",
    "block_bytes": "provisional: an IB MTU",
    "flag_bytes": "a 64-bit flag",
    "atomic_bytes": "IB's 8-byte atomics: an RDMA write is not written whole",
    "blocks_in_flight": "provisional: 32 KB a core, 4 of its copies; a GPU's 258 cores keep "
                        "far more in flight than its NIC's bandwidth-delay product (185 KB)",
    "egress_gbps": "NVLink, ~160 GB/s usable per direction (DeepEP issue 16; arXiv 2412.19437)",
    "ingress_gbps": "NVLink, as egress_gbps",
    "core_store_gbps": "DeepEP V2's model of an SM: 50 GB/s of writes (deep_ep/buffers/elastic.py)",
    "core_copy_gbps": "DeepEP V2's model of an SM: 200 GB/s of reads",
    "init_cycles": f"provisional: a kernel's launch and setup, a few microseconds "
                   f"({LAUNCH_NS / 1000:g} us)",
    "nic_message_ns": "a CX7's small-message rate (~200 M messages/s), 5 ns a message",
    "syncall_cycles": "provisional: a grid-wide barrier (cooperative groups' grid sync)",
    "latency_ns.local": "provisional: an HBM round trip",
    "latency_ns.intra_npu": "no such class (npu_dies = 1)",
    "latency_ns.one_hop": "NVLink, 64 B, host-measured (arXiv 2505.09343, Table 5): an upper "
                          "bound",
    "latency_ns.two_hop": "IB within a leaf, 64 B (arXiv 2505.09343, Table 5)",
    "latency_ns.three_hop": "IB across leaves (arXiv 2505.09343, Table 5)",
}


def paper_profile_toml(result: Fit) -> str:
    """The text of ubepsim/profiles/h800.toml for a fit: each fitted key marked so, beside
    its hardware figure or what it stands for; keys neither stated nor fitted marked
    provisional."""
    fitted = {m: "fitted" + (f"; {HARDWARE_FIGURES[m]}" if m in HARDWARE_FIGURES else "")
              for k in PAPER_KEYS for m in members(k)}
    provisional = {k: "provisional: CANN's mechanisms only, or no point constrains it"
                   for k in result.profile.values if k not in NOTES and k not in fitted}
    ranks = list(TABLE4_DEEPEP)
    header = [
        "Built-in preset: an H800 cluster as DeepEP's low-latency tables were measured on "
        "(DeepEP",
        "README, June 2025): 8 GPUs per node over NVLink, one ConnectX-7 (400 Gb/s) per GPU "
        "into an",
        "InfiniBand fat tree. A die is a GPU; an AIV a core running one instruction stream: an "
        "SM",
        "for bsp and ubep, a warp group for deepep_ll (docs/model.md, \"DeepEP's low-latency "
        "kernels\").",
        "Generated by `ubepsim calibrate --paper --profile h800 --out "
        "ubepsim/profiles/h800.toml`: the",
        f"keys marked `fitted` are fitted to Table 4's DeepEP column ({ranks[0]}-{ranks[-1]} "
        f"ranks; rms error",
        f"{result.rms_error:.2f} tolerances over {result.table.height} points, "
        f"{result.table.height - len(PAPER_KEYS)} degrees of freedom); the others are",
        "stated by the source beside them, or provisional (docs/calibration.md, \"The h800 "
        "preset\").",
    ]
    return profile_toml(result.profile, header, {**NOTES, **provisional, **fitted})
