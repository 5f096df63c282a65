"""Fitting hardware-profile keys to measurements: a user's, or the paper's numbers (whose
problem is ubepsim.paper.cm384's).

A calibration problem is a set of points, each a configuration of the model with a measured
value; the model gives its own value for each point (a latency, or a quantity derived from
several configurations: an efficiency, a share, a latency above the best of its group). Each
point's error is taken in its own terms (relative, model / measured - 1, for a latency; a
difference for a share or an extra latency), divided by the point's tolerance (the error it may
have) and multiplied by its weight; the fit changes the profile keys it is given so that the sum
of the squares of these residuals is least (docs/calibration.md, "How points are weighted"):

- scipy's `least_squares` (trust region, bounds) on the logarithm of each key, so that keys of
  very different sizes (a 40-cycle issue cost, a 2000-cycle setup) move by relative steps, with
  forward differences of about 5%: the model is piecewise constant at the scale of one cycle, and
  a step of a few percent sees its slope instead of its steps;
- integer keys rounded at every evaluation (the step is at least one unit);
- keys in GRID_KEYS searched over a list of candidates (least squares for the others at each
  candidate): `blocks_in_flight` moves the model in whole stores, so its slope is zero almost
  everywhere and a derivative-based fit cannot move it.

A user's measurements become a problem here (`read_measurements`, `measurement_problem`); the
paper's numbers become one in ubepsim.paper.cm384, which refits the built-in profile.
"""

from __future__ import annotations

import copy
import dataclasses
import itertools
import math
import textwrap
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl

from ..errors import InputError
from ..files import beside, toml_value
from ..model.params import NAMES, PARAM_BY_NAME, TUNED, config_columns, make_config
from ..model.profile import FIELDS, HOP_CLASSES, Profile, load_profile

# Keys that describe the machine's shape rather than a cost: set from what is known, never fitted.
STRUCTURAL = ("cores", "npu_dies", "tier_sizes", "block_bytes", "flag_bytes", "clock_ghz")
# Searched over candidates rather than by least squares (the model moves them in whole stores).
GRID_KEYS = ("blocks_in_flight",)
# What `ubepsim calibrate` fits when the user names nothing: the costs every protocol pays.
DEFAULT_KEYS = ("core_store_gbps", "store_issue_cycles", "init_cycles", "core_copy_gbps",
                "syncall_cycles")
MEASURED = "latency_us"          # a measured latency (a point of its own)
EXTRA = "extra_latency_us"        # a latency above the best of its group (a relative point)
GROUP = "group"                   # the group an extra latency is measured against
TOLERANCE, WEIGHT = "tolerance", "weight"   # optional per-row columns of a measurement file
SOURCE = "source"                 # where a row was measured: what --cv folds on (else group)
TARGETS = (MEASURED, EXTRA)
OPTIONAL = (GROUP, TOLERANCE, WEIGHT, SOURCE)
# A row's tolerance unless its file gives one: 3% of a latency; an extra latency's, the noise
# of a single run on real hardware: the middle of the 1-3 us between neighbouring cells of the
# paper's Figure 14, as we read them (ubepsim.paper.numbers).
RUN_NOISE_US = 2.0
DEFAULT_TOLERANCE = {MEASURED: 0.03, EXTRA: RUN_NOISE_US}
STEP = 0.05   # relative forward-difference step of the Jacobian


def fittable_keys() -> tuple[str, ...]:
    """Every profile key a fit may change: numeric scalars and the per-hop latencies."""
    scalar = tuple(k for k, f in FIELDS.items()
                   if f.kind in (int, float) and k not in STRUCTURAL)
    return scalar + tuple(f"latency_ns.{h}" for h in HOP_CLASSES)


def check_keys(keys: Sequence[str], source: str | None = None) -> tuple[str, ...]:
    """The keys a user named, checked: each once, each fittable. `a=b` ties keys: one value
    is fitted for both (e.g. egress_gbps=ingress_gbps, one port bandwidth)."""
    allowed = fittable_keys()
    seen: list[str] = []
    for key in keys:
        for member in members(key):
            if member in STRUCTURAL:
                raise InputError("--fit", f"{member} describes the machine's shape; set it in "
                                 f"a profile file instead of fitting it", source)
            if member not in allowed:
                raise InputError("--fit", f"unknown profile key {member!r}; allowed: "
                                 f"{', '.join(allowed)}", source)
            if member in seen:
                raise InputError("--fit", f"{member} is named twice", source)
            seen.append(member)
        if len({_kind(m) for m in members(key)}) > 1:
            raise InputError("--fit", f"{key} ties an integer key to a real one", source)
    if not keys:
        raise InputError("--fit", "name at least one profile key to fit", source)
    return tuple(keys)


def members(key: str) -> list[str]:
    """The profile keys behind a fitted key: itself, or the keys it ties (`a=b`)."""
    return key.split("=")


def get_value(values: dict[str, Any], key: str) -> float:
    first = members(key)[0]
    if first.startswith("latency_ns."):
        return float(values["latency_ns"].get(first.split(".", 1)[1], 0.0))
    return values[first]


def _kind(key: str) -> type:
    first = members(key)[0]
    return float if first.startswith("latency_ns.") else FIELDS[first].kind


def _bounds(key: str) -> tuple[float, float]:
    """Bounds of a key in its own units, from FIELDS (all of a tie's), kept finite and above
    zero (the fit works on logarithms)."""
    lo, hi = 0.0, 1e12
    for m in members(key):
        if not m.startswith("latency_ns."):
            lo, hi = max(lo, FIELDS[m].minimum), min(hi, FIELDS[m].maximum)
    floor = 0.5 if _kind(key) is int else 1e-6   # an integer key may still round down to 0
    return max(lo, floor), hi


def with_values(profile: Profile, values: dict[str, Any]) -> Profile:
    """`profile` with some keys replaced (integer keys rounded), checked like any profile."""
    new = copy.deepcopy(profile.values)
    for key, v in ((m, v) for k, v in values.items() for m in members(k)):
        if key.startswith("latency_ns."):
            new["latency_ns"][key.split(".", 1)[1]] = float(v)
        elif FIELDS[key].kind is int:
            new[key] = int(round(v))
        elif FIELDS[key].kind is float:
            new[key] = float(v)
        else:
            new[key] = copy.deepcopy(v)
    # Every key given as an override replaces the base's: the result is `profile`, changed.
    return dataclasses.replace(load_profile(overrides=new), name=profile.name)


# --- problems ------------------------------------------------------------------------------

@dataclasses.dataclass(frozen=True)
class Problem:
    """Points to fit: configurations, and how the model's results become one value per point.

    `cols` are resolved parameter columns (one row per configuration simulated); `model_values`
    maps the result columns (and the profile) to one value per point, in the order of `labels`.
    Per point: `relative` (its error is model / measured - 1; else model - measured, in its
    unit), `tolerance` (the error it may have, in the same terms) and `weight` (its share of the
    sum of squares). By default every point is a latency, within 3%, of weight 1.
    """

    labels: tuple[str, ...]
    units: tuple[str, ...]
    measured: np.ndarray
    cols: dict[str, np.ndarray]
    model_values: Callable[[dict[str, np.ndarray], Profile], np.ndarray]
    relative: np.ndarray | None = None
    tolerance: np.ndarray | None = None
    weight: np.ndarray | None = None

    def __post_init__(self) -> None:
        n = len(self.labels)
        for name, default in (("relative", True), ("tolerance", DEFAULT_TOLERANCE[MEASURED]),
                              ("weight", 1.0)):
            value = getattr(self, name)
            object.__setattr__(self, name, np.broadcast_to(
                np.asarray(default if value is None else value), (n,)).copy())

    def simulate(self, profile: Profile, threads: int | None = None) -> np.ndarray:
        from ..model.api import simulate_columns
        return self.model_values(simulate_columns(self.cols, profile, threads), profile)

    def errors(self, values: np.ndarray) -> np.ndarray:
        """Each point's error in its own terms: relative for a latency, else a difference."""
        return np.where(self.relative, values / np.where(self.relative, self.measured, 1.0)
                        - 1.0, values - self.measured)

    def residuals(self, values: np.ndarray) -> np.ndarray:
        """What the fit squares and sums: each error in tolerances, times its point's weight."""
        return self.weight * self.errors(values) / self.tolerance

    def table(self, values: np.ndarray) -> pl.DataFrame:
        errors = self.errors(values)
        return pl.DataFrame({"point": list(self.labels), "unit": list(self.units),
                             "measured": self.measured, "simulated": values,
                             "relative": self.relative, "error": errors,
                             "tolerance": self.tolerance,
                             "in_tolerances": errors / self.tolerance, "weight": self.weight})


def rms_in_tolerances(table: pl.DataFrame) -> float:
    """The root mean square of the points' errors in tolerances (unweighted): below 1, the
    points are within their tolerances on average."""
    return float(np.sqrt(np.mean(table["in_tolerances"].to_numpy() ** 2)))


def read_measurements(path: str | Path) -> pl.DataFrame:
    """A measurement table (CSV or Parquet): model parameters as columns, and per row either
    `latency_us` (a measured latency) or `extra_latency_us` with a `group` (a latency above the
    best of the rows of its group, as Figure 14 of the paper gives them); optionally
    `tolerance` and `weight` per row, and the `source` it was measured in (what
    cross-validation leaves out, ubepsim.fit.crossval).

    Refuses, before any work, a file it cannot read, a column it does not know, a row with no
    target or two, a non-positive latency, a negative extra latency, an extra latency without
    a group, a group of one row or without its best row (0), a tolerance not above 0, a negative
    weight, and any row the model would reject.
    """
    path = Path(path)
    source = str(path)
    if path.suffix.lower() not in (".csv", ".parquet"):
        raise InputError("MEASUREMENTS", f"{path}: expected a .csv or .parquet file")
    if not path.is_file():
        state = "is not a file" if path.exists() else "does not exist"
        raise InputError("MEASUREMENTS", f"{path} {state}")
    try:  # the name as it is: a file name with [ or * in it is not a pattern
        frame = (pl.read_csv(path, glob=False) if path.suffix.lower() == ".csv"
                 else pl.read_parquet(path, glob=False))
    except (OSError, pl.exceptions.PolarsError) as e:
        raise InputError("MEASUREMENTS", f"cannot read {path}: {str(e).splitlines()[0]}") \
            from None
    twice = [c for c in frame.columns if "_duplicated_" in c and
             c.rsplit("_duplicated_", 1)[0] in frame.columns]   # polars' name for a repeat
    if twice:
        raise InputError(twice[0].rsplit("_duplicated_", 1)[0], "a column given twice", source)
    unknown = [c for c in frame.columns if c not in NAMES + TARGETS + OPTIONAL]
    if unknown:
        raise InputError(unknown[0], f"unknown column; a measurement file has model parameters "
                         f"({', '.join(NAMES)}), {MEASURED} or {EXTRA} with {GROUP}, and "
                         f"optionally {TOLERANCE}, {WEIGHT} and {SOURCE}", source)
    if not any(t in frame.columns for t in TARGETS):
        raise InputError(MEASURED, f"missing: the measured dispatch latency in microseconds "
                         f"({MEASURED}), or the latency above the best of a group ({EXTRA})",
                         source)
    if frame.height == 0:
        raise InputError(MEASURED, "the file has no rows", source)
    for name in (*TARGETS, TOLERANCE, WEIGHT):
        if name in frame.columns:
            _check_numeric_column(frame[name], float, source)
    frame = frame.with_columns(pl.col(c).cast(pl.Float64) for c in (*TARGETS, TOLERANCE, WEIGHT)
                               if c in frame.columns)
    _check_targets(frame, source)
    for name in frame.columns:
        kind = PARAM_BY_NAME[name].kind if name in PARAM_BY_NAME else None
        if kind in (int, float):
            _check_numeric_column(frame[name], kind, source)
    if "trace" in frame.columns and frame["trace"].dtype == pl.String:
        # as in a grid: a trace named in the file is relative to the file
        frame = frame.with_columns(pl.col("trace").map_elements(
            lambda v: beside(source, v, "trace") if v else v, return_dtype=pl.String))
    return frame


def _check_targets(frame: pl.DataFrame, source: str) -> None:
    """Each row one target; values in range; each group of extra latencies a whole group."""
    def column(name: str) -> pl.Series:
        return frame[name] if name in frame.columns else pl.Series(name, [None] * frame.height,
                                                                   pl.Float64)

    def first(bad: pl.Series) -> int | None:
        return int(bad.arg_true()[0]) + 1 if bad.any() else None

    latency, extra = column(MEASURED), column(EXTRA)
    given = latency.is_not_null().cast(pl.Int8) + extra.is_not_null().cast(pl.Int8)
    if (row := first(given != 1)) is not None:
        raise InputError(MEASURED, f"row {row}: give {MEASURED} or {EXTRA}, one of them",
                         source)
    checks = (
        (MEASURED, latency.is_not_null() & ~(latency.is_finite() & (latency > 0)),
         "a measured latency is a finite number of microseconds above 0"),
        (EXTRA, extra.is_not_null() & ~(extra.is_finite() & (extra >= 0)),
         "an extra latency is a finite number of microseconds, 0 or more"),
        (TOLERANCE, column(TOLERANCE).is_not_null() & ~(column(TOLERANCE).is_finite()
                                                         & (column(TOLERANCE) > 0)),
         "a tolerance is a finite number above 0"),
        (WEIGHT, column(WEIGHT).is_not_null() & ~(column(WEIGHT).is_finite()
                                                   & (column(WEIGHT) >= 0)),
         "a weight is a finite number, 0 or more"),
    )
    for name, bad, what in checks:
        if (row := first(bad)) is not None:
            raise InputError(name, f"row {row}: {what}", source)
    if extra.is_null().all():
        return
    if GROUP not in frame.columns or (row := first(extra.is_not_null()
                                                   & frame[GROUP].is_null())) is not None:
        raise InputError(GROUP, f"row {row or 1}: an {EXTRA} is measured against the best row "
                         f"of its {GROUP}; name the group", source)
    if (row := first(latency.is_not_null() & frame[GROUP].is_not_null())) is not None:
        raise InputError(GROUP, f"row {row}: only an {EXTRA} belongs to a group", source)
    groups = frame.filter(extra.is_not_null()).group_by(GROUP, maintain_order=True).agg(
        pl.len().alias("rows"), pl.col(EXTRA).min().alias("best"))
    for name, rows, best in groups.rows():
        if rows < 2 or best != 0.0:
            raise InputError(GROUP, f"group {name!r}: an extra latency needs its group's best "
                             f"row (0) and at least one other; it has {rows} row(s), the least "
                             f"{best:g}", source)


def _check_numeric_column(col: pl.Series, kind: type, source: str) -> None:
    """A column of a numeric parameter holds numbers of its kind (a CSV column with one word in
    it is read as text): the first row that does not is named."""
    target = pl.Int64 if kind is int else pl.Float64
    parsed = col.cast(target, strict=False)
    if kind is int and col.dtype.is_float():
        bad = parsed.is_null() | (col != parsed.cast(pl.Float64))
    else:
        bad = parsed.is_null()
    bad = bad & col.is_not_null()
    if bad.any():
        i = int(bad.arg_true()[0])
        expected = "an integer" if kind is int else "a number"
        raise InputError(col.name, f"row {i + 1}: expected {expected}, got {col[i]!r}", source)


def measurement_problem(frame: pl.DataFrame, cores_default: int, source: str | None = None,
                        sync_default: str | None = None) -> Problem:
    """Each row a configuration (unnamed parameters at their defaults; cores and sync the
    profile's, as make_config takes them): a latency, fitted on its relative error, or a
    latency above its group's best, fitted on the difference."""
    rows = []
    params = [c for c in frame.columns if c in NAMES]
    for i in range(frame.height):  # (not iter_rows over params: there may be none)
        values = {k: v for k, v in frame.row(i, named=True).items()
                  if v is not None and k in NAMES}
        try:
            config = make_config(values, cores_default, source, sync_default=sync_default)
            if config.tuned:
                raise InputError("cumsum_cores", f"a measured UBEP dispatch states the "
                                 f"CalCumSum group it ran with (an integer from 1 to cores - "
                                 f"1); \"{TUNED}\", the default, would be the model's pick, "
                                 f"which moves with the profile being fitted", source)
            rows.append(config.as_dict())
        except InputError as e:
            raise InputError(e.key, f"row {i + 1}: {str(e).split(': ', 2)[-1]}", source) \
                from None
    n = frame.height
    extra = frame[EXTRA].is_not_null().to_numpy() if EXTRA in frame.columns else np.zeros(n, bool)
    measured = np.where(extra, frame[EXTRA].to_numpy() if EXTRA in frame.columns else 0.0,
                        frame[MEASURED].to_numpy() if MEASURED in frame.columns else 0.0)
    group_of = (frame[GROUP].cast(pl.String).to_numpy() if GROUP in frame.columns
                else np.full(n, None))
    members_of = [np.flatnonzero(extra & (group_of == g)) for g in group_of[extra]]

    def values(res: dict[str, np.ndarray], _profile: Profile) -> np.ndarray:
        latency = np.asarray(res["latency_us"], dtype=float).copy()
        out = latency.copy()
        for i, rows_of_group in zip(np.flatnonzero(extra), members_of):
            out[i] = latency[i] - latency[rows_of_group].min()
        return out

    tolerance = np.where(extra, DEFAULT_TOLERANCE[EXTRA], DEFAULT_TOLERANCE[MEASURED])
    if TOLERANCE in frame.columns:
        tolerance = frame[TOLERANCE].fill_null(pl.Series(tolerance)).to_numpy()
    weight = frame[WEIGHT].fill_null(1.0).to_numpy() if WEIGHT in frame.columns else 1.0
    labels = tuple(_label(r, params) + (f" [{g}]" if e else "")
                   for r, e, g in zip(rows, extra, group_of))
    return Problem(labels, ("us",) * n, measured.astype(float), config_columns(rows), values,
                   relative=~extra, tolerance=tolerance, weight=weight)


def _label(row: dict[str, Any], params: Sequence[str]) -> str:
    return " ".join(f"{k}={row[k]}" for k in params) or "defaults"


# --- the fit -------------------------------------------------------------------------------

@dataclasses.dataclass
class Fit:
    values: dict[str, float]          # fitted keys, as written into the profile
    profile: Profile                  # the start profile with the fitted values
    table: pl.DataFrame               # Problem.table: each point's measured, simulated, error
    rms_error: float                  # rms_in_tolerances of the table
    evaluations: int
    seconds: float
    kept: tuple[str, ...] = ()        # keys no measurement moves: left at their start values
    support: dict[str, int] = dataclasses.field(default_factory=dict)  # key -> points it moves

    @property
    def dof(self) -> int:
        """Degrees of freedom: points less the keys fitted (`support` holds each of them, not
        those kept at their start values)."""
        return self.table.height - len(self.support)


def fit(problem: Problem, profile: Profile, keys: Sequence[str],
        grid: dict[str, Sequence[int]] | None = None, threads: int | None = None,
        max_evaluations: int = 400, significant: int = 4,
        progress: Callable[[str], None] | None = None,
        bounds: dict[str, tuple[float, float]] | None = None) -> Fit:
    """Least squares over `keys` (from their values in `profile`), GRID_KEYS among them over
    `grid` candidates (default: powers of two from an eighth to eight times the start value),
    each within `bounds` where given (a key's hardware figure and how far from it a fit may
    take it) and within its field's.

    Floats are rounded to `significant` digits and integers to integers at the end; the table
    is the model at exactly those values.
    """
    started = time.perf_counter()
    keys = tuple(keys)
    grid = dict(grid or {})
    for k in keys:
        if k in GRID_KEYS:
            grid.setdefault(k, _powers_of_two(k, get_value(profile.values, k)))
    cache: dict[tuple, np.ndarray] = {}

    def evaluate(values: dict[str, float]) -> np.ndarray:
        trial = with_values(profile, values)
        key = tuple(get_value(trial.values, k) for k in keys)
        if key not in cache:
            cache[key] = problem.simulate(trial, threads)
        return cache[key]

    values = {k: _round(k, v, significant)
              for k, v in _search(problem, profile, keys, grid, evaluate, max_evaluations,
                                  progress, bounds or {}).items()}
    # Where a key's start value gives the same results as its fitted one, the measurements
    # hold nothing for the move (a key no point depends on would be written at its bound, or
    # wherever the search stopped): it keeps its start value.
    kept = []
    for k in keys:
        v0 = get_value(profile.values, k)
        if values[k] != v0 and np.array_equal(evaluate({**values, k: v0}), evaluate(values)):
            values[k] = v0
            kept.append(k)
    final = with_values(profile, values)
    simulated = evaluate(values)
    support = {k: _support(k, values, grid[k] if k in GRID_KEYS else None, simulated, evaluate)
               for k in keys if k not in kept}
    table = problem.table(simulated)
    return Fit({m: get_value(final.values, m) for k in keys for m in members(k)}, final, table,
               rms_in_tolerances(table), len(cache), time.perf_counter() - started, tuple(kept),
               support)


def _search(problem: Problem, profile: Profile, keys: tuple[str, ...],
            grid: dict[str, Sequence[int]], evaluate: Callable, max_evaluations: int,
            progress: Callable[[str], None] | None,
            bounds: dict[str, tuple[float, float]]) -> dict[str, float]:
    """The best values of `keys`: least squares over the smooth ones at every combination of
    the gridded ones' candidates."""
    gridded = [k for k in keys if k in GRID_KEYS]
    smooth = [k for k in keys if k not in GRID_KEYS]
    best: tuple[float, dict[str, float]] | None = None
    start = {k: get_value(profile.values, k) for k in smooth}
    for combo in itertools.product(*(grid[k] for k in gridded)):
        fixed = dict(zip(gridded, combo))
        # From the start values, and from the best fit so far: the error surface has several
        # valleys, and a neighbouring candidate's is often the right one.
        starts = [start] + ([{k: best[1][k] for k in smooth}] if best and smooth else [])
        for x0 in starts:
            values = _least_squares(problem, smooth, x0, fixed, evaluate, max_evaluations,
                                    bounds)
            cost = float(np.sum(problem.residuals(evaluate(values)) ** 2))
            if progress:
                progress(", ".join(f"{k}={_fmt(v)}" for k, v in values.items())
                         + f": rms weighted residual {math.sqrt(cost / len(problem.labels)):.3g}")
            if best is None or cost < best[0]:
                best = (cost, values)
    assert best is not None
    return best[1]


def _support(key: str, values: dict[str, float], candidates: Sequence[int] | None,
             simulated: np.ndarray, evaluate: Callable) -> int:
    """How many points a fitted key moves one step away from its value: a key that moves one
    point (or none) is set by that point alone, not fitted to the measurements."""
    v = values[key]
    if candidates is not None:   # its neighbouring candidate: a smaller step may move nothing
        at = list(candidates).index(v) if v in candidates else 0
        step = candidates[at + 1] if at + 1 < len(candidates) else candidates[max(at - 1, 0)]
    elif _kind(key) is int:
        step = max(v * (1 + STEP), round(v) + 1)
    else:
        step = v * (1 + STEP)
    return int(np.count_nonzero(evaluate({**values, key: step}) != simulated))


def _least_squares(problem: Problem, keys: list[str], start: dict[str, float],
                   fixed: dict[str, float], evaluate: Callable, max_evaluations: int,
                   bounds: dict[str, tuple[float, float]]) -> dict[str, float]:
    from scipy.optimize import least_squares

    if not keys:
        return dict(fixed)
    limits = [(max(_bounds(k)[0], bounds.get(k, (0, 0))[0]),
               min(_bounds(k)[1], bounds.get(k, (0, math.inf))[1])) for k in keys]
    lo = np.log([a for a, _ in limits])
    hi = np.log([b for _, b in limits])
    x0 = np.clip(np.log([max(start[k], a) for k, (a, _) in zip(keys, limits)]), lo, hi)

    def values_at(x: np.ndarray) -> dict[str, float]:
        return {**fixed, **{k: float(np.exp(v)) for k, v in zip(keys, x)}}

    def fun(x: np.ndarray) -> np.ndarray:
        return problem.residuals(evaluate(values_at(x)))

    def jac(x: np.ndarray) -> np.ndarray:
        f0 = fun(x)
        cols = []
        for i, k in enumerate(keys):
            v = math.exp(x[i])
            target = v * (1 + STEP)
            if _kind(k) is int:
                target = max(target, round(v) + 1)
            h = math.log(target / v)
            if x[i] + h > hi[i]:
                h = -h
            xs = x.copy()
            xs[i] += h
            cols.append((fun(xs) - f0) / h)
        return np.stack(cols, axis=1)

    sol = least_squares(fun, x0, jac=jac, bounds=(lo, hi), method="trf",
                        max_nfev=max_evaluations, xtol=1e-4, ftol=1e-6)
    return values_at(sol.x)


def _powers_of_two(key: str, start: float) -> list[int]:
    lo, hi = _bounds(key)
    centre = 2 ** round(math.log2(max(start, 1)))
    return [c for c in (centre >> 3, centre >> 2, centre >> 1, centre, centre << 1,
                        centre << 2, centre << 3) if lo <= c <= hi]


def _round(key: str, v: float, significant: int) -> float:
    if _kind(key) is int:
        return int(round(v))
    return float(f"{v:.{significant}g}")


def _fmt(v: float) -> str:
    return str(int(v)) if float(v).is_integer() else f"{v:.4g}"


# --- writing a profile ---------------------------------------------------------------------

def profile_toml(profile: Profile, header: Sequence[str], notes: dict[str, str]) -> str:
    """A complete [hardware] table: every key under its help, with a note on where its value
    comes from (`notes`, by key or latency_ns.<class>)."""
    def line(key: str, value: Any, note: str | None) -> str:
        text = f"{key} = {toml_value(value)}"
        return f"{text:<30} # {note}" if note else text

    out = [f"# {h}" if h else "#" for h in header] + ["", "[hardware]"]
    for key, f in FIELDS.items():
        if key == "latency_ns":
            continue
        out += [f"# {h}" for h in textwrap.wrap(f.help, 96)]
        out.append(line(key, profile.values[key], notes.get(key)))
    out += ["", f"# {FIELDS['latency_ns'].help.split(':')[0]}", "[hardware.latency_ns]"]
    for h, v in profile.values["latency_ns"].items():
        out.append(line(h, v, notes.get(f"latency_ns.{h}")))
    return "\n".join(out) + "\n"
