"""Cross-validated calibration of the paper fit: each source left out, refitted, predicted.

A model change is judged by what it predicts where it was not fitted. Each fold refits the
profile's keys to every source of "Numbers for calibration" but one and predicts that one; the
fit with every source gives the in-sample errors beside them. The sources a fold may leave out
are Table 4's CANN EP latencies, Figure 3(b)'s efficiencies and each Figure 14 panel; Table 2's
latencies and the SyncAll share stay in every fold (the first are the profile's own keys, the
second a single number that separates the SyncAll's cost from Init's).

How each source is scored, in its own terms:
- Table 4: each latency's relative error, and the growth from 16 to 256 ranks;
- Figure 3(b): each efficiency's error in points;
- a Figure 14 panel: `ubepsim tune`'s regret, the paper's extra latency at the group size the
  model picks per batch row (averaged over REGRET_SEEDS), its mean over the rows and its worst
  row. Beside it, three rules of thumb fitted on the other panel (no simulation): copying its
  best group per batch row, its best constant group, and Appendix A's law
  n_count = (beta/alpha) n N_exp / (K B) with beta/alpha fitted on its best groups.

Folds run in parallel processes, each simulating on one thread.
"""

from __future__ import annotations

import dataclasses
import math
import os
import time
from collections.abc import Sequence
from concurrent.futures import ProcessPoolExecutor
from typing import Any

import numpy as np

from . import calibrate as cal

TABLE4, FIG3B = "Table 4", "Figure 3(b)"
FOLDS = (TABLE4, FIG3B, *(cal.fig14_source(r) for r in sorted(cal.FIG14_PANELS)))
KEPT = ("Table 2", "Section 2.3")        # in every fold
ALL = KEPT + FOLDS
# Seeds tune averages when it picks a group size (validate's 20): near a row's best the latency
# moves by under a microsecond across group sizes.
REGRET_SEEDS = tuple(range(20))
BATCHES = tuple(cal.FIG14_EXTRA_US)


def panel_of(source: str) -> int | None:
    """The rank count of a Figure 14 panel source, else None."""
    for r in cal.FIG14_PANELS:
        if source == cal.fig14_source(r):
            return r
    return None


# --- scores ----------------------------------------------------------------------------------

def paper_cells(ranks: int) -> np.ndarray:
    """A Figure 14 panel as [batch row, group size - 1]."""
    return np.array([cal.FIG14_PANELS[ranks][b] for b in BATCHES])


def regret(ranks: int, groups: Sequence[int]) -> np.ndarray:
    """The paper's extra latency at the group size chosen for each batch row of a panel."""
    cells = paper_cells(ranks)
    return np.array([cells[i, g - 1] for i, g in enumerate(groups)])


def appendix_a_x(ranks: int) -> np.ndarray:
    """Appendix A's n N_exp / (K B) for each batch row of a panel (one expert per die)."""
    return np.array([cal.AIVS * ranks / (8 * b) for b in BATCHES])


def rules(ranks: int, other: int) -> dict[str, list[int]]:
    """Group sizes per batch row of panel `ranks` by three rules fitted on panel `other`."""
    theirs = paper_cells(other)
    best = theirs.argmin(axis=1) + 1
    constant = int(theirs.mean(axis=0).argmin()) + 1
    ratio = math.exp(np.mean(np.log(best) - np.log(appendix_a_x(other))))
    law = np.clip(np.round(ratio * appendix_a_x(ranks)), 1, len(cal.FIG14_GROUPS)).astype(int)
    return {"other panel's best groups": [int(g) for g in best],
            "other panel's best constant group": [constant] * len(BATCHES),
            "Appendix A's law": [int(g) for g in law]}


def score(profile: Any, sources: Sequence[str], seeds: Sequence[int] = REGRET_SEEDS,
          threads: int | None = None) -> dict[str, dict[str, Any]]:
    """Each source's errors for a profile, in its own terms (see the module's docstring)."""
    from .model import simulate_columns
    from .tune import rows_from_lists, tune

    out: dict[str, dict[str, Any]] = {}
    if TABLE4 in sources:
        ranks = list(cal.TABLE4_CANN_EP)
        lat = simulate_columns(cal.config_columns([cal.cann_ep(r) for r in ranks]), profile,
                               threads)["latency_us"]
        err = lat / np.array([cal.TABLE4_CANN_EP[r][0] for r in ranks]) - 1.0
        out[TABLE4] = {"latency_us": lat.tolist(), "error": err.tolist(),
                       "max_abs_error": float(np.abs(err).max()),
                       "growth": float(lat[-1] / lat[0] - 1.0),
                       "rising": bool(np.all(np.diff(lat) > 0))}
    if FIG3B in sources:
        aivs = np.array(list(cal.FIG3B_EFFICIENCY), dtype=float)
        send = simulate_columns(cal.config_columns(
            [cal.cann_ep(cal.FIG3B_RANKS, aivs=int(a)) for a in aivs]), profile,
            threads)["phase_send_us"]
        eff = cal.efficiency(send, aivs)
        err = eff - np.array(list(cal.FIG3B_EFFICIENCY.values()))
        out[FIG3B] = {"efficiency": eff.tolist(), "error": err[1:].tolist(),
                      "max_abs_error": float(np.abs(err[1:]).max())}
    for source in sources:
        ranks = panel_of(source)
        if ranks is None:
            continue
        t = tune(rows_from_lists({"ranks": [ranks], "batch": list(BATCHES)}, cal.FIG14_SETUP,
                                 cal.AIVS),
                 list(seeds), profile, len(cal.FIG14_GROUPS), threads)
        picks = t.table["best_cumsum_aivs"].to_list()
        r = regret(ranks, picks)
        out[source] = {"picks": picks, "regret": r.tolist(), "mean_regret": float(r.mean()),
                       "max_regret": float(r.max())}
    return out


# --- folds -----------------------------------------------------------------------------------

@dataclasses.dataclass
class FoldSpec:
    """One fit: its sources, where it starts and what it may change."""

    left_out: str | None             # None: every source (the in-sample fit)
    start: dict[str, Any]            # profile values the fit starts from (over paper_start)
    keys: tuple[str, ...]            # the keys it fits
    grid: dict[str, list[int]]       # candidates of GRID_KEYS among them
    max_evaluations: int
    fit_seeds: tuple[int, ...]
    score_seeds: tuple[int, ...]
    fig14_setup: dict[str, Any] = dataclasses.field(default_factory=dict)
    cann_ep: dict[str, Any] = dataclasses.field(default_factory=dict)
    nice: int = 10


@dataclasses.dataclass
class FoldResult:
    left_out: str | None
    values: dict[str, Any]           # the fitted keys
    rms_error: float                 # of the fit, over its own points
    evaluations: int
    seconds: float
    scores: dict[str, dict[str, Any]]   # each source's, at the fitted values


def start_profile(start: dict[str, Any]) -> Any:
    return cal.with_values(cal.paper_start(), start)


def run_fold(spec: FoldSpec, threads: int | None = 1) -> FoldResult:
    """Fit the sources of a fold from its start, then score every source at the result."""
    if spec.nice:
        os.nice(spec.nice)
    cal.FIG14_SETUP.clear()
    cal.FIG14_SETUP.update(spec.fig14_setup)
    cal.CANN_EP.update(spec.cann_ep)
    sources = [s for s in ALL if s != spec.left_out]
    problem = cal.paper_problem(spec.fit_seeds, sources)
    result = cal.fit(problem, start_profile(spec.start), spec.keys, grid=spec.grid,
                     threads=threads, max_evaluations=spec.max_evaluations)
    scores = score(result.profile, ALL, spec.score_seeds, threads)
    return FoldResult(spec.left_out, result.values, result.rms_error, result.evaluations,
                      result.seconds, scores)


def cross_validate(start: dict[str, Any], keys: Sequence[str],
                   grid: dict[str, list[int]] | None = None, max_evaluations: int = 20,
                   fit_seeds: Sequence[int] = cal.FIG14_FIT_SEEDS,
                   score_seeds: Sequence[int] = REGRET_SEEDS, workers: int = 2,
                   folds: Sequence[str | None] = (None, *FOLDS)) -> list[FoldResult]:
    """The fit with every source (None) and each fold, in `workers` processes."""
    specs = [FoldSpec(f, dict(start), tuple(keys), dict(grid or {}), max_evaluations,
                      tuple(fit_seeds), tuple(score_seeds), dict(cal.FIG14_SETUP),
                      dict(cal.CANN_EP))
             for f in folds]
    if workers <= 1:
        return [run_fold(s) for s in specs]
    import multiprocessing
    with ProcessPoolExecutor(workers, mp_context=multiprocessing.get_context("spawn")) as pool:
        return list(pool.map(run_fold, specs))


# --- the table ---------------------------------------------------------------------------------

def summary(results: list[FoldResult]) -> list[dict[str, Any]]:
    """Per source: its in-sample errors (the fit with every source) beside its out-of-sample
    ones (the fold that left it out), and for a Figure 14 panel the rules' regrets."""
    by = {r.left_out: r for r in results}
    rows = []
    for source in FOLDS:
        inside = by[None].scores[source] if None in by else None
        outside = by[source].scores[source] if source in by else None
        row = {"source": source, "in_sample": inside, "out_of_sample": outside}
        ranks = panel_of(source)
        if ranks is not None:
            other = next(r for r in cal.FIG14_PANELS if r != ranks)
            row["rules"] = {name: {"picks": g, "mean_regret": float(regret(ranks, g).mean()),
                                   "max_regret": float(regret(ranks, g).max())}
                            for name, g in rules(ranks, other).items()}
        rows.append(row)
    return rows


def format_summary(rows: list[dict[str, Any]]) -> str:
    def brief(source: str, s: dict[str, Any] | None) -> str:
        if s is None:
            return "-"
        if source == TABLE4:
            return (" ".join(f"{e:+.1%}" for e in s["error"])
                    + f" (max {s['max_abs_error']:.1%}; growth {s['growth']:.0%}"
                    + ("" if s["rising"] else ", not rising") + ")")
        if source == FIG3B:
            return (" ".join(f"{100 * e:+.1f}" for e in s["error"])
                    + f" pts (max {100 * s['max_abs_error']:.1f})")
        return (f"mean {s['mean_regret']:.1f} us, max {s['max_regret']:.1f} "
                f"(picks {','.join(map(str, s['picks']))}; regrets "
                + " ".join(f"{r:.1f}" for r in s["regret"]) + ")")

    out = []
    for row in rows:
        out.append(f"{row['source']}")
        out.append(f"  in sample:     {brief(row['source'], row['in_sample'])}")
        out.append(f"  out of sample: {brief(row['source'], row['out_of_sample'])}")
        for name, r in row.get("rules", {}).items():
            out.append(f"  rule, {name}: mean {r['mean_regret']:.1f} us, max "
                       f"{r['max_regret']:.1f} (picks {','.join(map(str, r['picks']))})")
    return "\n".join(out)


def elapsed(start: float) -> str:
    return f"{time.perf_counter() - start:.0f} s"
