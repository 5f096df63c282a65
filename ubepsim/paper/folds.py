"""The paper's cross-validation folds (`ubepsim calibrate --paper --cv`): a fold leaves out
Table 4's CANN EP latencies, Figure 3(b)'s efficiencies or a Figure 14 panel (h800: an EP size
of Table 4's DeepEP column); Table 2's latencies and the SyncAll share stay in every fold (the
first are the profile's own keys, the second one number that separates the SyncAll's cost from
the rest of CANN EP's). Each source is scored in its own terms: a latency's relative error (and
Table 4's growth from 16 to 256 ranks), an efficiency's error in points, and for a Figure 14
panel `ubepsim tune`'s regret: the paper's extra latency at the group size the model picks per
batch row (averaged over REGRET_SEEDS), its mean over the rows and its worst row. Beside a
panel, three rules fitted on the other panel, no simulation: copying its best group per row,
its best constant group, and Appendix A's law n_count = (beta/alpha) n N_exp / (K B) with
beta/alpha fitted on its best groups. The folds run on the generic machinery of
ubepsim.fit.crossval.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from ..fit import calibrate as cal
from ..fit.crossval import FoldResult, FoldSpec
from . import cm384, h800, numbers

TABLE4, FIG3B = "Table 4", "Figure 3(b)"
PANELS = tuple(sorted(numbers.FIG14_PANELS))
FOLDS = (TABLE4, FIG3B, *(cm384.fig14_source(r) for r in PANELS))
KEPT = ("Table 2", "Section 2.3")       # in every fold of the paper's problem
# Seeds a group size is picked over, by tune here and by validate on Figure 14's cells (the fit
# takes fewer): near a row's best the latency moves by under a microsecond across group sizes,
# and the best of a mean over few seeds jumps between them.
REGRET_SEEDS = tuple(range(20))
BATCHES = tuple(numbers.FIG14_EXTRA_US)
NICE = 10                                 # folds run at a lower priority than the shell


def panel_of(source: str) -> int | None:
    """The rank count of a Figure 14 panel's source name, else None."""
    return next((r for r in PANELS if source == cm384.fig14_source(r)), None)


# --- scores: the paper's sources ------------------------------------------------------------

def paper_cells(ranks: int) -> np.ndarray:
    """A Figure 14 panel as [batch row, group size - 1], as every reader of it takes it
    (numbers.fig14_cells: an outlier cell read as its row neighbours' mean): a regret is what a
    pick costs, and that run is not what its group size costs. Every rule and the model are
    scored on the same cells."""
    return np.array(numbers.fig14_cells(ranks))


def regret(ranks: int, groups: Sequence[int]) -> np.ndarray:
    """The paper's extra latency at the group size chosen for each batch row of a panel."""
    cells = paper_cells(ranks)
    return np.array([cells[i, g - 1] for i, g in enumerate(groups)])


def appendix_a_x(ranks: int) -> np.ndarray:
    """Appendix A's n N_exp / (K B) for each batch row of a panel (one expert per die)."""
    topk = numbers.FIG14_SETUP["topk"]
    return np.array([numbers.AIVS * ranks / (topk * b) for b in BATCHES])


def rules(ranks: int, other: int) -> dict[str, list[int]]:
    """Group sizes per batch row of panel `ranks` by three rules fitted on panel `other`:
    its best group per row, its best constant group (least mean extra latency), Appendix A's
    law with beta/alpha fitted on its best groups (as `ubepsim tune` fits it: least squares on
    the logarithms)."""
    theirs = paper_cells(other)
    best = theirs.argmin(axis=1) + 1
    constant = int(theirs.mean(axis=0).argmin()) + 1
    ratio = math.exp(np.mean(np.log(best) - np.log(appendix_a_x(other))))
    law = np.clip(np.round(ratio * appendix_a_x(ranks)), 1, len(numbers.FIG14_GROUPS))
    return {"the other panel's best groups": [int(g) for g in best],
            "the other panel's best constant group": [constant] * len(BATCHES),
            "Appendix A's law, beta/alpha of the other panel": [int(g) for g in law]}


def rule_regrets(ranks: int) -> dict[str, dict[str, Any]]:
    """Each rule's picks and regret (mean and worst row) on panel `ranks`, fitted on the other
    panel."""
    other = next(r for r in PANELS if r != ranks)
    return {name: {"picks": g, "regret": regret(ranks, g).tolist(),
                   "mean_regret": float(regret(ranks, g).mean()),
                   "max_regret": float(regret(ranks, g).max())}
            for name, g in rules(ranks, other).items()}


def tune_regret(profile: Any, ranks: int, seeds: Sequence[int] = REGRET_SEEDS,
                threads: int | None = None) -> dict[str, Any]:
    """`ubepsim tune`'s picks on a Figure 14 panel's workloads and their regret."""
    from ..fit.tune import rows_from_lists, tune
    t = tune(rows_from_lists({"ranks": [ranks], "batch": list(BATCHES)}, numbers.FIG14_SETUP,
                             numbers.AIVS), list(seeds), profile, len(numbers.FIG14_GROUPS),
             threads)
    picks = t.table["best_cumsum_cores"].to_list()
    r = regret(ranks, picks)
    return {"picks": picks, "regret": r.tolist(), "mean_regret": float(r.mean()),
            "max_regret": float(r.max())}


def score_paper(profile: Any, seeds: Sequence[int] = REGRET_SEEDS,
                threads: int | None = None) -> dict[str, dict[str, Any]]:
    """Every foldable source's errors for a profile, in its own terms."""
    from ..model.api import simulate_columns
    from ..model.params import config_columns

    ranks = list(numbers.TABLE4_CANN_EP)
    cores = np.array(list(numbers.FIG3B_EFFICIENCY), dtype=float)
    res = simulate_columns(config_columns(
        [cm384.cann_ep(r) for r in ranks]
        + [cm384.cann_ep(numbers.FIG3B_RANKS, cores=int(a)) for a in cores]), profile, threads)
    lat = res["latency_us"][:len(ranks)]
    err = lat / np.array([numbers.TABLE4_CANN_EP[r][0] for r in ranks]) - 1.0
    eff = cm384.efficiency(res["phase_send_us"][len(ranks):], cores)
    points = eff - np.array(list(numbers.FIG3B_EFFICIENCY.values()))
    out = {TABLE4: {"latency_us": lat.tolist(), "error": err.tolist(),
                    "max_abs_error": float(np.abs(err).max()),
                    "growth": float(lat[-1] / lat[0] - 1.0),
                    "rising": bool(np.all(np.diff(lat) > 0))},
           FIG3B: {"efficiency": eff.tolist(), "error": points[1:].tolist(),
                   "max_abs_error": float(np.abs(points[1:]).max())}}
    for r in PANELS:
        out[cm384.fig14_source(r)] = tune_regret(profile, r, seeds, threads)
    return out


def fit_and_score(spec: FoldSpec, threads: int | None = 1) -> tuple[cal.Fit, dict]:
    """A paper fold's fit (everything but the left-out source, from the provisional start) and
    every source's scores at it: the runner of paper_specs' folds."""
    if spec.profile == "h800":
        sources = [x for x in h800.SOURCES if x != spec.left_out]
        result = h800.calibrate_paper(threads, spec.max_evaluations, sources=sources)
        return result, h800.score_paper(result.profile, threads)
    sources = [x for x in cm384.SOURCES if x != spec.left_out]
    result = cal.fit(cm384.paper_problem(spec.fit_seeds, sources), cm384.paper_start(),
                     spec.keys, threads=threads,
                     max_evaluations=spec.max_evaluations, bounds=cm384.PAPER_BOUNDS)
    return result, score_paper(result.profile, spec.score_seeds, threads)


def paper_specs(max_evaluations: int, keys: Sequence[str] = cm384.PAPER_KEYS,
                folds: Sequence[str] = FOLDS, profile: str = "cm384") -> list[FoldSpec]:
    """The paper fit with every source, then one fold per source left out (h800: its own
    keys, a fold per EP size of the DeepEP column)."""
    if profile == "h800":
        keys, folds = h800.PAPER_KEYS, h800.SOURCES
    return [FoldSpec(f, tuple(keys), max_evaluations, profile=profile,
                     fit_seeds=cm384.FIG14_FIT_SEEDS, score_seeds=REGRET_SEEDS,
                     runner=fit_and_score) for f in (None, *folds)]


def summary(results: Sequence[FoldResult]) -> list[dict[str, Any]]:
    """crossval.summary's rows, and beside each Figure 14 panel the rules' regrets."""
    from ..fit.crossval import summary as rows_of
    by = {r.left_out: r for r in results}
    rows = rows_of(results)
    for row in rows:
        ranks = panel_of(row["source"])
        if ranks is not None and by[row["source"]].scores.get(row["source"], {}).get("picks") \
                is not None:
            row["rules"] = rule_regrets(ranks)
    return rows
