"""Fitting hardware-profile parameters to latencies: a user's measurements or the paper's numbers.

A calibration problem is a set of points, each a configuration of the model with a measured
value; the model gives its own value for each point (a latency, or a quantity derived from
several configurations such as an efficiency). The fit changes the profile keys it is given so
that the relative errors (model / measured - 1) are small in the least-squares sense:

- scipy's `least_squares` (trust region, bounds) on the logarithm of each key, so that keys of
  very different sizes (a 40-cycle issue cost, a 2000-cycle setup) move by relative steps, with
  forward differences of about 5%: the model is piecewise constant at the scale of one cycle, and
  a step of a few percent sees its slope instead of its steps;
- integer keys rounded at every evaluation (the step is at least one unit);
- keys in GRID_KEYS searched over a list of candidates (least squares for the others at each
  candidate): `blocks_in_flight` moves the model in whole stores, so its slope is zero almost
  everywhere and a derivative-based fit cannot move it.

The paper's calibration (`paper_problem`, `calibrate_paper`) lives here too: its points are the
numbers restated under "Numbers for calibration" in the paper, and nothing else.
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

from .errors import InputError
from .files import beside, toml_value
from .params import ENUMS, NAMES, PARAM_BY_NAME, make_config
from .profile import FIELDS, HOP_CLASSES, Profile, load_profile

# Keys that describe the machine's shape rather than a cost: set from what is known, never fitted.
STRUCTURAL = ("aivs", "npu_dies", "tier_sizes", "block_bytes", "flag_bytes", "clock_ghz")
# Searched over candidates rather than by least squares (the model moves them in whole stores).
GRID_KEYS = ("blocks_in_flight",)
# What `ubepsim calibrate` fits when the user names nothing: the costs every protocol pays.
DEFAULT_KEYS = ("aiv_store_gbps", "store_issue_cycles", "init_cycles", "aiv_copy_gbps",
                "syncall_cycles")
MEASURED = "latency_us"
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
    """

    labels: tuple[str, ...]
    units: tuple[str, ...]
    measured: np.ndarray
    cols: dict[str, np.ndarray]
    model_values: Callable[[dict[str, np.ndarray], Profile], np.ndarray]

    def simulate(self, profile: Profile, threads: int | None = None) -> np.ndarray:
        from .model import simulate_columns
        return self.model_values(simulate_columns(self.cols, profile, threads), profile)

    def residuals(self, values: np.ndarray) -> np.ndarray:
        return values / self.measured - 1.0

    def table(self, values: np.ndarray) -> pl.DataFrame:
        return pl.DataFrame({"point": list(self.labels), "unit": list(self.units),
                             "measured": self.measured, "simulated": values,
                             "error": self.residuals(values)})


def read_measurements(path: str | Path) -> pl.DataFrame:
    """A measurement table (CSV or Parquet): model parameters as columns and `latency_us`.

    Refuses, before any work, a file it cannot read, a column it does not know, a missing or
    non-positive `latency_us`, and any row the model would reject.
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
    unknown = [c for c in frame.columns if c not in NAMES and c != MEASURED]
    if unknown:
        raise InputError(unknown[0], f"unknown column; a measurement file has model parameters "
                         f"({', '.join(NAMES)}) and {MEASURED}", source)
    if MEASURED not in frame.columns:
        raise InputError(MEASURED, "missing: the measured dispatch latency in microseconds",
                         source)
    if frame.height == 0:
        raise InputError(MEASURED, "the file has no rows", source)
    lat = frame[MEASURED]
    if not lat.dtype.is_numeric() or lat.null_count() or not (
            lat.cast(pl.Float64).is_finite() & (lat.cast(pl.Float64) > 0)).all():
        raise InputError(MEASURED, "every row needs a measured latency: a finite number of "
                         "microseconds above 0", source)
    for name in frame.columns:
        kind = PARAM_BY_NAME[name].kind if name in PARAM_BY_NAME else None
        if kind in (int, float):
            _check_numeric_column(frame[name], kind, source)
    if "trace" in frame.columns and frame["trace"].dtype == pl.String:
        # as in a grid: a trace named in the file is relative to the file
        frame = frame.with_columns(pl.col("trace").map_elements(
            lambda v: beside(source, v) if v else v, return_dtype=pl.String))
    return frame


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


def measurement_problem(frame: pl.DataFrame, aivs_default: int,
                        source: str | None = None) -> Problem:
    """Each row a configuration (unnamed parameters at their defaults), fitted on latency_us."""
    rows = []
    params = [c for c in frame.columns if c != MEASURED]
    for i in range(frame.height):  # (not iter_rows over params: there may be none)
        values = {k: v for k, v in frame.row(i, named=True).items()
                  if v is not None and k != MEASURED}
        try:
            rows.append(make_config(values, aivs_default, source).as_dict())
        except InputError as e:
            raise InputError(e.key, f"row {i + 1}: {str(e).split(': ', 2)[-1]}", source) \
                from None
    labels = tuple(_label(r, params) for r in rows)
    return Problem(labels, ("us",) * len(rows), frame[MEASURED].cast(pl.Float64).to_numpy(),
                   config_columns(rows), lambda res, _profile: res["latency_us"])


def _label(row: dict[str, Any], params: Sequence[str]) -> str:
    return " ".join(f"{k}={row[k]}" for k in params) or "defaults"


def config_columns(rows: list[dict[str, Any]]) -> dict[str, np.ndarray]:
    """Resolved configurations (Config.as_dict() rows) as the columns simulate_columns takes."""
    return {n: np.array([r[n] for r in rows], dtype=object if n in ENUMS or n == "trace"
                        else (np.float64 if PARAM_BY_NAME[n].kind is float else np.int64))
            for n in NAMES}


# --- the fit -------------------------------------------------------------------------------

@dataclasses.dataclass
class Fit:
    values: dict[str, float]          # fitted keys, as written into the profile
    profile: Profile                  # the start profile with the fitted values
    table: pl.DataFrame               # point, unit, measured, simulated, error
    rms_error: float                  # root mean square of the relative errors
    evaluations: int
    seconds: float
    kept: tuple[str, ...] = ()        # keys no measurement moves: left at their start values


def fit(problem: Problem, profile: Profile, keys: Sequence[str],
        grid: dict[str, Sequence[int]] | None = None, threads: int | None = None,
        max_evaluations: int = 400, significant: int = 4,
        progress: Callable[[str], None] | None = None) -> Fit:
    """Least squares over `keys` (from their values in `profile`), GRID_KEYS among them over
    `grid` candidates (default: powers of two from an eighth to eight times the start value).

    Floats are rounded to `significant` digits and integers to integers at the end; the table
    is the model at exactly those values.
    """
    started = time.perf_counter()
    keys = tuple(keys)
    gridded = [k for k in keys if k in GRID_KEYS]
    smooth = [k for k in keys if k not in GRID_KEYS]
    grid = dict(grid or {})
    for k in gridded:
        grid.setdefault(k, _powers_of_two(k, get_value(profile.values, k)))
    cache: dict[tuple, np.ndarray] = {}

    def evaluate(values: dict[str, float]) -> np.ndarray:
        trial = with_values(profile, values)
        key = tuple(get_value(trial.values, k) for k in keys)
        if key not in cache:
            cache[key] = problem.simulate(trial, threads)
        return cache[key]

    best: tuple[float, dict[str, float]] | None = None
    start = {k: get_value(profile.values, k) for k in smooth}
    for combo in itertools.product(*(grid[k] for k in gridded)):
        fixed = dict(zip(gridded, combo))
        # From the start values, and from the best fit so far: the error surface has several
        # valleys, and a neighbouring candidate's is often the right one.
        starts = [start] + ([{k: best[1][k] for k in smooth}] if best and smooth else [])
        for x0 in starts:
            values = _least_squares(problem, smooth, x0, fixed, evaluate, max_evaluations)
            cost = float(np.sum(problem.residuals(evaluate(values)) ** 2))
            if progress:
                progress(", ".join(f"{k}={_fmt(v)}" for k, v in values.items())
                         + f": rms error {math.sqrt(cost / len(problem.labels)):.2%}")
            if best is None or cost < best[0]:
                best = (cost, values)
    assert best is not None
    values = {k: _round(k, v, significant) for k, v in best[1].items()}
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
    simulated = problem.simulate(final, threads)
    err = problem.residuals(simulated)
    return Fit({m: get_value(final.values, m) for k in keys for m in members(k)}, final,
               problem.table(simulated),
               float(np.sqrt(np.mean(err ** 2))), len(cache), time.perf_counter() - started,
               tuple(kept))


def _least_squares(problem: Problem, keys: list[str], start: dict[str, float],
                   fixed: dict[str, float], evaluate: Callable,
                   max_evaluations: int) -> dict[str, float]:
    from scipy.optimize import least_squares

    if not keys:
        return dict(fixed)
    lo = np.log([_bounds(k)[0] for k in keys])
    hi = np.log([_bounds(k)[1] for k in keys])
    x0 = np.clip(np.log([max(start[k], _bounds(k)[0]) for k in keys]), lo, hi)

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


# --- the paper's numbers ("Numbers for calibration" in the paper, and nothing else) ----------

TABLE2_NS = {"intra_npu": 218.0, "one_hop": 929.0, "two_hop": 2500.0}
FIG3B_EFFICIENCY = {8: 1.000, 16: 0.767, 24: 0.576, 32: 0.456, 48: 0.311}
TABLE4_CANN_EP = {16: (103.0, 71.0), 32: (120.0, 61.0), 64: (139.0, 53.0), 128: (144.0, 51.0),
                  256: (151.0, 48.0)}            # ranks: (latency us, bandwidth GB/s)
SYNCALL_SHARE = 0.15      # "SyncAll ... can account for approximately 15%" (Section 2.3)
NPU_GBPS = 392.0          # UB bandwidth per NPU (Section 2.3), shared by its dies
AIVS, NPU_DIES, BLOCK_BYTES, FLAG_BYTES = 48, 2, 512, 32

# Table 4's workload (DeepEP's low-latency benchmark) on CANN EP: the BSP protocol with
# stop-and-wait flags and each AIV owning a block of experts, one expert per rank.
CANN_EP = {"batch": 128, "topk": 8, "hidden": 7168, "dtype": "fp8", "protocol": "bsp",
           "sync": "sw", "schedule": "expert_block"}
# Figure 3(b) states no setup; we take Table 4's at 128 ranks (the paper's default EP size),
# every AIV of the die sending, as CANN EP does.
FIG3B_RANKS = 128

# What the paper states, set rather than fitted (Table 2, Section 2.3, Section 3.4).
STATED: dict[str, Any] = {
    "aivs": AIVS, "npu_dies": NPU_DIES, "tier_sizes": [16], "block_bytes": BLOCK_BYTES,
    "flag_bytes": FLAG_BYTES, "sentinel_collision_prob": 0.0,
    "latency_ns": {"local": 100.0, **TABLE2_NS, "three_hop": 5000.0},
}
# The starting point of the fit, and the value of every key no calibration point constrains.
# The ports start from the paper's 392 GB/s per NPU, half per die; the model's ports carry
# 512 B stores one way, and the fit decides what a die gets of the NPU's bandwidth that way.
PROVISIONAL: dict[str, Any] = {
    "egress_gbps": NPU_GBPS / NPU_DIES, "ingress_gbps": NPU_GBPS / NPU_DIES,
    "clock_ghz": 1.8, "blocks_in_flight": 64, "aiv_store_gbps": 16.0, "aiv_copy_gbps": 32.0,
    "store_issue_cycles": 40, "init_cycles": 1800, "vector_op_cycles": 12, "vector_lanes": 128,
    "prefix_cycles": 2, "syncall_cycles": 1200, "flag_check_cycles": 8,
    "sentinel_reset_cycles": 8, "sentinel_timeout_ns": 20000.0,
}
# Fitted to Table 4, Figure 3(b) and the SyncAll share. The other provisional keys act only in
# modes the calibration points do not run (flag checks of tff/dc/sp, sentinel polling, UBEP's
# quaternary search) or add well under a microsecond to them (vector counts, prefix sums).
PAPER_KEYS = ("aiv_store_gbps", "store_issue_cycles", "init_cycles", "aiv_copy_gbps",
              "syncall_cycles", "egress_gbps=ingress_gbps", "blocks_in_flight")
# Copies of Table 4's token in flight per AIV: 1, 2, 3, 4, 6 or 8 (see paper_grid).
COPIES_IN_FLIGHT = (1, 2, 3, 4, 6, 8)


def paper_start() -> Profile:
    """The profile the paper fit starts from: stated values and provisional costs."""
    return dataclasses.replace(load_profile(overrides={**PROVISIONAL, **STATED}), name="cm384")


def cann_ep(ranks: int, **changes: Any) -> dict[str, Any]:
    """Table 4's CANN EP configuration at `ranks`, resolved."""
    return make_config({**CANN_EP, "ranks": ranks, **changes}, AIVS).as_dict()


def syncall_count() -> int:
    """SyncAlls in one BSP dispatch, as the model runs it (its phase list)."""
    from .model import TIMELINE_PHASES
    return TIMELINE_PHASES["bsp"].count("syncall")


def paper_problem() -> Problem:
    """Table 4's CANN EP latencies, Figure 3(b)'s efficiencies and the SyncAll share.

    Efficiency with n AIVs = (T_8 * 8) / (T_n * n), T the Token-Sending phase of the same work.
    The SyncAll share is the barriers' own cost (all of them, after the last AIV arrives) over
    the latency, averaged over Table 4's points. Figure 3(b)'s 8-AIV point is 100% by definition
    and is left out.
    """
    ranks = list(TABLE4_CANN_EP)
    aivs = np.array(list(FIG3B_EFFICIENCY), dtype=float)
    rows = [cann_ep(r) for r in ranks] + [cann_ep(FIG3B_RANKS, aivs=int(a)) for a in aivs]
    n4 = len(ranks)

    def values(res: dict[str, np.ndarray], profile: Profile) -> np.ndarray:
        latency = res["latency_us"][:n4]
        eff = efficiency(res["phase_send_us"][n4:], aivs)
        syncall_us = syncall_count() * profile.syncall_cycles / (profile.clock_ghz * 1000.0)
        return np.concatenate([latency, eff[1:], [np.mean(syncall_us / latency)]])

    # as `ubepsim validate` names the same points (it takes these labels)
    labels = ([f"Table 4: CANN EP latency, {r} ranks (us)" for r in ranks]
              + [fig3b_label(int(a)) for a in aivs[1:]]
              + ["Section 2.3: SyncAll share of CANN EP latency"])
    units = ("us",) * n4 + ("",) * (len(aivs) - 1) + ("",)
    measured = np.array([TABLE4_CANN_EP[r][0] for r in ranks]
                        + [FIG3B_EFFICIENCY[int(a)] for a in aivs[1:]] + [SYNCALL_SHARE])
    return Problem(tuple(labels), units, measured, config_columns(rows), values)


def fig3b_label(aivs: int) -> str:
    return f"Figure 3(b): Token-Sending efficiency, {aivs} AIVs"


def efficiency(send_us: np.ndarray, aivs: np.ndarray) -> np.ndarray:
    """Figure 3(b)'s efficiency of each AIV count relative to the first: (T_1 n_1) / (T n)."""
    return send_us[0] * aivs[0] / (send_us * aivs)


def paper_grid() -> dict[str, list[int]]:
    """blocks_in_flight candidates: whole copies of Table 4's token (a copy's blocks go out
    together, so values in between behave like the multiple below them)."""
    from .params import token_bytes
    blocks = -(-token_bytes(CANN_EP["hidden"], ENUMS["dtype"][CANN_EP["dtype"]]) // BLOCK_BYTES)
    return {"blocks_in_flight": [blocks * n for n in COPIES_IN_FLIGHT]}


def calibrate_paper(threads: int | None = None, max_evaluations: int = 400,
                    progress: Callable[[str], None] | None = None) -> Fit:
    """Refit cm384's free costs to the paper's numbers, from the provisional start."""
    return fit(paper_problem(), paper_start(), PAPER_KEYS, grid=paper_grid(), threads=threads,
               max_evaluations=max_evaluations, progress=progress)


# Where each value of the shipped profile comes from (comments of cm384.toml).
PAPER_NOTES = {
    "clock_ghz": "assumed; the fitted costs are in its cycles",
    "aivs": "paper: 48",
    "npu_dies": "paper: 2",
    "tier_sizes": "paper: a 16-die server under a first-tier switch",
    "block_bytes": "paper: 512 B atomic stores",
    "flag_bytes": "paper: 32 B",
    "sentinel_collision_prob": "paper: 2^-256 for a 32 B sentinel",
    "latency_ns.local": "same die; not in Table 2 (negligible): provisional",
    "latency_ns.intra_npu": "paper: Table 2",
    "latency_ns.one_hop": "paper: Table 2",
    "latency_ns.two_hop": "paper: Table 2",
    "latency_ns.three_hop": "no third tier on CM384: provisional",
}


def paper_profile_toml(result: Fit) -> str:
    """The text of ubepsim/profiles/cm384.toml for a paper fit."""
    fitted = {m: "fitted" for k in PAPER_KEYS for m in members(k)}
    fitted |= {k: f"fitted, one value for both ports; paper: {NPU_GBPS:g} GB/s per NPU"
               for k in members("egress_gbps=ingress_gbps")}
    provisional = {k: "provisional: no calibration point constrains it" for k in PROVISIONAL
                   if k not in PAPER_KEYS and k not in PAPER_NOTES}
    header = [
        "Built-in hardware profile: a CloudMatrix384-like superpod (UBEP paper, Section 2).",
        "Generated by `ubepsim calibrate --paper --out ubepsim/profiles/cm384.toml`: stated",
        "values are set from the paper, the keys marked `fitted` are fitted to its Table 4",
        "(CANN EP latency, 16-256 ranks), Figure 3(b) (Token-Sending efficiency, 8-48 AIVs) and",
        "the SyncAll share (Section 2.3), starting from the provisional values in",
        f"ubepsim/calibrate.py; rms error {result.rms_error:.2%} over the {result.table.height} "
        "points fitted (docs/calibration.md, \"The calibrated cm384 profile\").",
        "Every key is documented in ubepsim/profile.py (FIELDS); a profile file or a grid's",
        "[profile] table may override any of them.",
    ]
    return profile_toml(result.profile, header, {**PAPER_NOTES, **provisional, **fitted})


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
