"""Cross-validation of a calibration: each source of measurements left out in turn, the keys
refitted to the others, the left-out source predicted, beside its in-sample errors (the fit with
every source). A model change is judged by what it predicts where it was not fitted
(docs/calibration.md, "Cross-validation").

Two kinds of problem fold the same way:

- a problem of its own, fitted and scored by the spec's `runner`: the paper's
  (`ubepsim calibrate --paper --cv`, ubepsim.paper.folds: a fold leaves out Table 4's CANN EP
  latencies, Figure 3(b)'s efficiencies or a Figure 14 panel, each scored in its own terms);
- a user's measurement file (`ubepsim calibrate FILE --cv`): its rows fold on their `source`
  column, or on `group` if it has none (rows without one stay in every fold); a fold's rows
  are scored by their errors in tolerances, as the fit weighs them.

Every fit starts from the same profile (the paper's provisional values, or --profile), so that
no fold starts from values fitted to what it leaves out. Folds, and the fit with every source,
run in parallel processes, each simulating on one thread.
"""

from __future__ import annotations

import dataclasses
import multiprocessing
import os
from collections.abc import Callable, Sequence
from concurrent.futures import ProcessPoolExecutor
from typing import Any

import numpy as np
import polars as pl

from ..errors import InputError
from ..model.params import default_sync
from . import calibrate as cal

NICE = 10                                 # folds run at a lower priority than the shell


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
    measurements: str | None = None   # a measurement file; None: `runner`'s problem
    profile: str = "cm384"            # the profile the fit starts from
    fit_seeds: tuple[int, ...] = ()   # seeds a fit averages over, where its problem has them
    score_seeds: tuple[int, ...] = ()
    # a problem of its own (the paper's: ubepsim.paper.folds): fits the spec and scores every
    # source, (fit, scores); a module-level function, so that a spawned process can take it
    runner: Callable[[FoldSpec, int | None], tuple[cal.Fit, dict[str, dict[str, Any]]]] | None \
        = None


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
    if spec.runner is not None:
        result, scores = spec.runner(spec, threads)
    else:
        from ..model.profile import load_profile
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
    ones (the fold that left it out)."""
    by = {r.left_out: r for r in results}
    rows = []
    for source in (r.left_out for r in results if r.left_out is not None):
        row = {"source": source, "in_sample": by[None].scores.get(source) if None in by else None,
               "out_of_sample": by[source].scores.get(source)}
        rows.append(row)
    return rows


def _brief(s: dict[str, Any] | None) -> str:
    """A source's scores in a line, by their kind."""
    if s is None:
        return "-"
    if "growth" in s:       # a latency's rank trend (the paper's Table 4)
        return (" ".join(f"{e:+.1%}" for e in s["error"]) + f"  (max {s['max_abs_error']:.1%};"
                f" 16 -> 256 ranks {s['growth']:+.0%}" + ("" if s["rising"] else ", not rising")
                + ")")
    if "efficiency" in s:   # efficiencies, in points (Figure 3(b))
        return (" ".join(f"{100 * e:+.1f}" for e in s["error"])
                + f" points  (max {100 * s['max_abs_error']:.1f})")
    if "picks" in s:        # a group size's regret (a Figure 14 panel)
        return (f"mean {s['mean_regret']:.1f} us, worst row {s['max_regret']:.1f}  (picks "
                f"{','.join(map(str, s['picks']))}; " + " ".join(f"{r:.1f}" for r in s["regret"])
                + ")")
    if "latency_us" in s:   # one latency (an EP size of h800's DeepEP column)
        return f"{s['latency_us'][0]:.1f} us, {s['error'][0]:+.1%}"
    return (f"rms {s['rms_in_tolerances']:.2f} tolerances  ("
            + " ".join(f"{e:+.1%}" if rel else f"{e:+.3g}"
                       for e, rel in zip(s["error"], s["relative"])) + ")")


def format_summary(rows: Sequence[dict[str, Any]]) -> str:
    """The cross-validation table as text: per source, in sample and out of sample."""
    out = []
    for row in rows:
        out.append(row["source"])
        out.append(f"  in sample      {_brief(row['in_sample'])}")
        out.append(f"  out of sample  {_brief(row['out_of_sample'])}")
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
