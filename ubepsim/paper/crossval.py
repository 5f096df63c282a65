"""Cross-validation of a calibration: each source of measurements left out in turn, the keys
refitted to the others, the left-out source predicted, beside its in-sample errors (the fit with
every source). A model change is judged by what it predicts where it was not fitted
(docs/calibration.md, "Cross-validation").

Two kinds of problem fold the same way:

- the paper's (`ubepsim calibrate --paper --cv`): a fold leaves out Table 4's CANN EP latencies,
  Figure 3(b)'s efficiencies or a Figure 14 panel; Table 2's latencies and the SyncAll share stay
  in every fold (the first are the profile's own keys, the second one number that separates the
  SyncAll's cost from the rest of CANN EP's). Each source is scored in its own terms: a
  latency's relative error (and Table 4's growth from 16 to 256 ranks), an efficiency's error in
  points, and for a Figure 14 panel `ubepsim tune`'s regret: the paper's extra latency at the
  group size the model picks per batch row (averaged over REGRET_SEEDS), its mean over the rows
  and its worst row. Beside a panel, three rules fitted on the other panel, no simulation:
  copying its best group per row, its best constant group, and Appendix A's law
  n_count = (beta/alpha) n N_exp / (K B) with beta/alpha fitted on its best groups;
- a user's measurement file (`ubepsim calibrate FILE --cv`): its rows fold on their `source`
  column, or on `group` if it has none (rows without one stay in every fold); a fold's rows
  are scored by their errors in tolerances, as the fit weighs them.

Every fit starts from the same profile (the paper's provisional values, or --profile), so that
no fold starts from values fitted to what it leaves out. Folds, and the fit with every source,
run in parallel processes, each simulating on one thread.
"""

from __future__ import annotations

import dataclasses
import math
import multiprocessing
import os
from collections.abc import Sequence
from concurrent.futures import ProcessPoolExecutor
from typing import Any

import numpy as np
import polars as pl

from ..errors import InputError
from ..sweep.params import default_sync
from . import calibrate as cal
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
    from .tune import rows_from_lists, tune
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
    from ..sweep.model import simulate_columns
    from ..sweep.params import config_columns

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


# --- scores: a measurement file's folds -----------------------------------------------------

def fold_column(frame: pl.DataFrame, source: str | None = None) -> str:
    """The column a measurement file folds on: `source`, else `group`; refused if it has
    neither, fewer than two values of it, or (folding on source) a group split over sources."""
    column = next((c for c in (cal.SOURCE, cal.GROUP) if c in frame.columns), None)
    if column is None:
        raise InputError("--cv", f"the measurements fold on a {cal.SOURCE} column, or on "
                         f"{cal.GROUP}: the file has neither", source)
    values = frame[column].drop_nulls().unique()
    if values.len() < 2:
        raise InputError("--cv", f"the {column} column holds {values.len()} value(s); a fold "
                         f"leaves one out and fits the rest: give at least two", source)
    if column == cal.SOURCE and cal.GROUP in frame.columns:
        split = (frame.filter(pl.col(cal.GROUP).is_not_null())
                 .group_by(cal.GROUP).agg(pl.col(cal.SOURCE).n_unique().alias("n"))
                 .filter(pl.col("n") > 1))
        if split.height:
            raise InputError(cal.SOURCE, f"group {split[cal.GROUP][0]!r} lies in several "
                             f"sources; a group's extra latencies are measured against its own "
                             f"best row, so a fold leaves it out whole", source)
    return column


def fold_values(frame: pl.DataFrame, column: str) -> list[str]:
    """The folds of a measurement file: the values of its fold column, in file order."""
    return [str(v) for v in frame[column].drop_nulls().unique(maintain_order=True)]


def _fold_mask(frame: pl.DataFrame, column: str, value: str) -> np.ndarray:
    return (frame[column].cast(pl.String) == value).fill_null(False).to_numpy()


def score_file(profile: Any, frame: pl.DataFrame, column: str, cores: int,
               source: str | None = None, threads: int | None = None) -> dict[str, dict]:
    """Each fold's rows at a profile: their errors in their own terms and in tolerances."""
    out = {}
    for value in fold_values(frame, column):
        rows = frame.filter(pl.Series(_fold_mask(frame, column, value)))
        problem = cal.measurement_problem(rows, cores, source, default_sync(profile))
        table = problem.table(problem.simulate(profile, threads))
        out[value] = {"points": table["point"].to_list(), "error": table["error"].to_list(),
                      "relative": table["relative"].to_list(),
                      "in_tolerances": table["in_tolerances"].to_list(),
                      "rms_in_tolerances": cal.rms_in_tolerances(table)}
    return out


# --- folds ------------------------------------------------------------------------------------

@dataclasses.dataclass
class FoldSpec:
    """One fit of a cross-validation: what it leaves out, and how it fits and scores."""

    left_out: str | None              # the source left out; None: the fit with every source
    keys: tuple[str, ...]             # the keys fitted
    max_evaluations: int
    measurements: str | None = None   # a measurement file; None: the paper's problem
    profile: str = "cm384"            # the file's fit starts from this profile
    fit_seeds: tuple[int, ...] = cm384.FIG14_FIT_SEEDS
    score_seeds: tuple[int, ...] = REGRET_SEEDS


@dataclasses.dataclass
class FoldResult:
    left_out: str | None
    values: dict[str, Any]            # the fitted keys
    rms_error: float                  # of the fit, over its own points
    evaluations: int
    seconds: float
    scores: dict[str, dict[str, Any]]   # each source's (fold's) errors at the fitted values


def run_fold(spec: FoldSpec, threads: int | None = 1) -> FoldResult:
    """Fit everything but the left-out source from the common start, then score every source."""
    if spec.measurements is None and spec.profile == "h800":
        sources = [x for x in h800.SOURCES if x != spec.left_out]
        result = h800.calibrate_paper(threads, spec.max_evaluations, sources=sources)
        scores = h800.score_paper(result.profile, threads)
    elif spec.measurements is None:
        sources = [x for x in cm384.SOURCES if x != spec.left_out]
        result = cal.fit(cm384.paper_problem(spec.fit_seeds, sources), cm384.paper_start(),
                         spec.keys, grid=cm384.paper_grid(), threads=threads,
                         max_evaluations=spec.max_evaluations, bounds=cm384.PAPER_BOUNDS)
        scores = score_paper(result.profile, spec.score_seeds, threads)
    else:
        from ..sweep.profile import load_profile
        start = load_profile(spec.profile, key="--profile")
        frame = cal.read_measurements(spec.measurements)
        column = fold_column(frame, spec.measurements)
        keep = ~_fold_mask(frame, column, spec.left_out) if spec.left_out is not None \
            else np.ones(frame.height, bool)
        problem = cal.measurement_problem(frame.filter(pl.Series(keep)), start.cores,
                                          spec.measurements, default_sync(start))
        result = cal.fit(problem, start, spec.keys, threads=threads,
                         max_evaluations=spec.max_evaluations)
        scores = score_file(result.profile, frame, column, start.cores, spec.measurements,
                            threads)
    return FoldResult(spec.left_out, result.values, result.rms_error, result.evaluations,
                      result.seconds, scores)


def _run_nice(spec: FoldSpec) -> FoldResult:
    os.nice(NICE)
    return run_fold(spec)


def cross_validate(specs: Sequence[FoldSpec], workers: int) -> list[FoldResult]:
    """Every fold's fit, in `workers` processes (spawned: a forked Numba is not safe), each
    simulating on one thread; in this process when workers is 1."""
    if workers <= 1:
        return [run_fold(s) for s in specs]
    with ProcessPoolExecutor(workers, mp_context=multiprocessing.get_context("spawn")) as pool:
        return list(pool.map(_run_nice, specs))


def paper_specs(max_evaluations: int, keys: Sequence[str] = cm384.PAPER_KEYS,
                folds: Sequence[str] = FOLDS, profile: str = "cm384") -> list[FoldSpec]:
    """The paper fit with every source, then one fold per source left out (h800: its own
    keys, a fold per EP size of the DeepEP column)."""
    if profile == "h800":
        keys, folds = h800.PAPER_KEYS, h800.SOURCES
    return [FoldSpec(f, tuple(keys), max_evaluations, profile=profile) for f in (None, *folds)]


def file_specs(measurements: str, keys: Sequence[str], profile: str,
               max_evaluations: int) -> list[FoldSpec]:
    """A measurement file's fit with every row, then one fold per value of its fold column."""
    frame = cal.read_measurements(measurements)
    folds = fold_values(frame, fold_column(frame, measurements))
    return [FoldSpec(f, tuple(keys), max_evaluations, measurements, profile)
            for f in (None, *folds)]


# --- the table --------------------------------------------------------------------------------

def summary(results: Sequence[FoldResult]) -> list[dict[str, Any]]:
    """Per source: its in-sample errors (the fit with every source) beside its out-of-sample
    ones (the fold that left it out); for a Figure 14 panel the rules' regrets too."""
    by = {r.left_out: r for r in results}
    rows = []
    for source in (r.left_out for r in results if r.left_out is not None):
        row = {"source": source, "in_sample": by[None].scores.get(source) if None in by else None,
               "out_of_sample": by[source].scores.get(source)}
        ranks = panel_of(source)
        if ranks is not None and by[source].scores.get(source, {}).get("picks") is not None:
            row["rules"] = rule_regrets(ranks)
        rows.append(row)
    return rows


def _brief(source: str, s: dict[str, Any] | None) -> str:
    if s is None:
        return "-"
    if source in h800.SOURCES:
        return f"{s['latency_us'][0]:.1f} us, {s['error'][0]:+.1%}"
    if source == TABLE4:
        return (" ".join(f"{e:+.1%}" for e in s["error"]) + f"  (max {s['max_abs_error']:.1%};"
                f" 16 -> 256 ranks {s['growth']:+.0%}" + ("" if s["rising"] else ", not rising")
                + ")")
    if source == FIG3B:
        return (" ".join(f"{100 * e:+.1f}" for e in s["error"])
                + f" points  (max {100 * s['max_abs_error']:.1f})")
    if "picks" in s:
        return (f"mean {s['mean_regret']:.1f} us, worst row {s['max_regret']:.1f}  (picks "
                f"{','.join(map(str, s['picks']))}; " + " ".join(f"{r:.1f}" for r in s["regret"])
                + ")")
    return (f"rms {s['rms_in_tolerances']:.2f} tolerances  ("
            + " ".join(f"{e:+.1%}" if rel else f"{e:+.3g}"
                       for e, rel in zip(s["error"], s["relative"])) + ")")


def format_summary(rows: Sequence[dict[str, Any]]) -> str:
    """The cross-validation table as text: per source, in sample and out of sample."""
    out = []
    for row in rows:
        out.append(row["source"])
        out.append(f"  in sample      {_brief(row['source'], row['in_sample'])}")
        out.append(f"  out of sample  {_brief(row['source'], row['out_of_sample'])}")
        for name, r in row.get("rules", {}).items():
            out.append(f"  rule: {name}: mean {r['mean_regret']:.1f} us, worst row "
                       f"{r['max_regret']:.1f}  (picks {','.join(map(str, r['picks']))})")
    return "\n".join(out)


def format_fits(results: Sequence[FoldResult]) -> str:
    """Each fit's keys, so that a fold whose keys moved far can be seen."""
    lines = []
    for r in results:
        what = "with every source" if r.left_out is None else f"without {r.left_out}"
        lines.append(f"fit {what}: rms {r.rms_error:.2f} tolerances, {r.evaluations} "
                     f"simulations in {r.seconds:.0f} s")
        lines.append("  " + ", ".join(f"{k} {v:.4g}" for k, v in r.values.items()))
    return "\n".join(lines)
