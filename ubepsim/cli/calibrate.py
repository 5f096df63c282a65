"""`ubepsim calibrate`: fit a hardware profile to measured latencies, or refit cm384 to the paper."""

from __future__ import annotations

from pathlib import Path

import click

from .group import cli
from .options import CheckFailed, WORKERS, check_threads, split_list, workers_option
from ..errors import InputError
from ..files import check_out, write_text
from ..model.params import default_sync

PAPER_COMMAND = "ubepsim calibrate --paper --out ubepsim/profiles/cm384.toml"
PAPER_PROFILES = ("cm384", "h800")   # the built-in profiles the paper's numbers refit


@cli.command()
@click.argument("measurements", required=False, metavar="[MEASUREMENTS]")
@click.option("--fit", "keys", default=None, metavar="KEY,KEY",
              help="Profile keys to fit, comma-separated: latency_ns.<hop class> for a "
                   "latency, a=b for one value shared by two keys (egress_gbps=ingress_gbps). "
                   "Default: core_store_gbps, store_issue_cycles, init_cycles, core_copy_gbps, "
                   "syncall_cycles. blocks_in_flight is searched over powers of two around "
                   "its start value.")
@click.option("--profile", "profile_spec", default="cm384", show_default=True,
              metavar="NAME|FILE.toml", help="Profile the fit starts from; every key not "
                                             "fitted keeps its value.")
@click.option("--out", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="Write the fitted profile here (default: calibrated.toml; with --paper, "
                   "print it).")
@click.option("--paper", is_flag=True,
              help="Refit the built-in cm384 profile to the paper's numbers (Table 2, Table 4, "
                   "Figure 3(b), the SyncAll share, Figure 14's 64- and 128-rank panels) from "
                   "its provisional start values; with --profile h800, the h800 preset to Table "
                   "4's DeepEP column.")
@click.option("--check", is_flag=True,
              help="With --paper: compare the refit with the shipped cm384 profile; exit 1 if "
                   "they differ.")
@click.option("--cv", is_flag=True,
              help="Cross-validate instead of writing a profile: refit with each source left "
                   "out in turn and print, per source, its out-of-sample errors beside its "
                   "in-sample ones. With --paper the sources are Table 4, Figure 3(b) and each "
                   "Figure 14 panel (h800: each EP size of the DeepEP column); a measurement "
                   "file folds on its source column, or on group.")
@workers_option("; with --cv, the processes the fits run in, one thread each")
@click.option("--max-evaluations", type=int, default=100, show_default=True,
              help="Model evaluations per least-squares run at most.")
def calibrate(measurements: str | None, keys: str | None, profile_spec: str, out: Path | None,
              paper: bool, check: bool, cv: bool, threads: int | None,
              max_evaluations: int) -> None:
    """Fit profile parameters to MEASUREMENTS (CSV or Parquet: model parameters as columns,
    unnamed ones at their defaults, and the measured latency_us) and write a new profile.

    Least squares on the relative errors, within each key's bounds; prints every point's
    measured and simulated latency and the error. `--paper` refits the built-in profile
    instead; `ubepsim calibrate --paper --check` shows the shipped values are the fit's.
    `--cv` cross-validates either fit (docs/calibration.md, "Cross-validation").
    """
    from ..fit import calibrate as cal
    from ..model.profile import load_profile

    if max_evaluations < 1:
        raise InputError("--max-evaluations", f"must be at least 1, got {max_evaluations}")
    check_threads(WORKERS, threads)
    if cv and (check or out is not None):
        raise InputError("--cv", f"writes no profile and checks none: without "
                         f"{'--check' if check else '--out'}, or run it without --cv")
    if paper:
        if measurements is not None or keys is not None or profile_spec not in PAPER_PROFILES:
            raise InputError("--paper", "takes no MEASUREMENTS or --fit, and --profile only "
                             f"as {' or '.join(PAPER_PROFILES)}: it refits that profile's free "
                             "keys to the paper's numbers")
        if cv:
            from ..paper import folds
            _cross_validate(folds.paper_specs(max_evaluations, profile=profile_spec), threads,
                            folds.summary)
            return
        if out is not None:
            check_out(out, (".toml",))
        _paper(profile_spec, out, check, threads, max_evaluations)
        return
    if check:
        raise InputError("--check", "only with --paper")
    if measurements is None:
        raise InputError("MEASUREMENTS", "give a CSV or Parquet file of measurements, or "
                         "--paper")
    fit_keys = cal.check_keys(cal.DEFAULT_KEYS if keys is None else
                              split_list("--fit", keys, "init_cycles,syncall_cycles"))
    if cv:
        from ..fit import crossval
        # every row checked before any fit, as without --cv
        start = load_profile(profile_spec, key="--profile")
        cal.measurement_problem(cal.read_measurements(measurements), start.cores, measurements,
                                default_sync(start))
        _cross_validate(crossval.file_specs(measurements, fit_keys, profile_spec,
                                            max_evaluations), threads, crossval.summary)
        return
    _fit_file(measurements, fit_keys, profile_spec, out, threads, max_evaluations)


def _fit_file(measurements: str, fit_keys: list[str], profile_spec: str, out: Path | None,
              threads: int | None, max_evaluations: int) -> None:
    """Fit `fit_keys` to a measurement file from `profile_spec` and write the profile to `out`
    (calibrated.toml by default), printing each point."""
    from ..fit import calibrate as cal
    from ..model.profile import load_profile

    target = out or Path("calibrated.toml")
    check_out(target, (".toml",))
    profile = load_profile(profile_spec, key="--profile")
    frame = cal.read_measurements(measurements)
    problem = cal.measurement_problem(frame, profile.cores, measurements,
                                      default_sync(profile))
    click.echo(f"fitting {', '.join(fit_keys)} to {len(problem.labels)} measurements",
               err=True)
    result = cal.fit(problem, profile, fit_keys, threads=threads,
                     max_evaluations=max_evaluations, progress=_progress)
    click.echo(_report(result, profile))
    fitted = [k for k in fit_keys if k not in result.kept]
    header = [f"Hardware profile fitted by `ubepsim calibrate {measurements}` from "
              f"{profile.name}:", f"{len(problem.labels)} measurements, rms error "
              f"{result.rms_error:.2f} tolerances; fitted: {', '.join(fitted) or 'none'}"
              + (f"; no measurement depends on {', '.join(result.kept)}." if result.kept
                 else ".")]
    notes = {m: "fitted" if k in fitted else "kept: no measurement depends on it"
             for k in fit_keys for m in cal.members(k)}
    write_text(target, cal.profile_toml(result.profile, header, notes))
    click.echo(f"wrote {target}")


def _paper(name: str, out: Path | None, check: bool, threads: int | None,
           max_evaluations: int) -> None:
    """Refit built-in profile `name` to the paper's numbers (its module in ubepsim.paper)."""
    import importlib
    from ..model.profile import load_profile

    module = importlib.import_module(f"ubepsim.paper.{name}")
    click.echo(f"refitting {name}: {', '.join(module.PAPER_KEYS)} ({module.DURATION})",
               err=True)
    result = module.calibrate_paper(threads=threads, max_evaluations=max_evaluations,
                                    progress=_progress)
    click.echo(_report(result, module.paper_start(), module.HARDWARE_FIGURES))
    text = module.paper_profile_toml(result)
    if check:
        shipped = load_profile(name).values
        differ = {k: (shipped[k], v) for k, v in result.profile.values.items()
                  if shipped[k] != v}
        if differ:
            raise CheckFailed(f"the refit differs from the shipped {name} profile: " + "; ".join(
                f"{k} shipped {old}, refit {new}" for k, (old, new) in differ.items()))
        click.echo(f"the shipped {name} profile is the fit's")
    if out is not None:
        write_text(out, text)
        click.echo(f"wrote {out}")
    elif not check:
        click.echo(text)


def _cross_validate(specs, threads: int | None, summary) -> None:
    """The fits of a cross-validation in parallel processes, then its table (summary: its
    rows, the paper's with its rules beside each Figure 14 panel)."""
    import numba

    from ..fit import crossval

    workers = min(len(specs), threads or numba.config.NUMBA_NUM_THREADS)
    names = ", ".join(s.left_out or "every source" for s in specs)
    click.echo(f"cross-validating: {len(specs)} fits ({names}) in {workers} "
               f"process{'es' * (workers != 1)}", err=True)
    results = crossval.cross_validate(specs, workers)
    click.echo(crossval.format_fits(results), err=True)
    click.echo(crossval.format_summary(summary(results)))


def _progress(line: str) -> None:
    click.echo(f"  {line}", err=True)


def _report(result, start, figures: dict[str, str] | None = None) -> str:
    """Every point (measured, simulated, its error and that error in tolerances), the degrees
    of freedom, and every fitted key: start -> fitted value, the points it moves, and the
    hardware figure it should be near where one is known."""
    from ..fit.calibrate import get_value, members

    t = result.table
    width = max(len(p) for p in t["point"])
    lines = [f"{'point':<{width}}  {'measured':>10}  {'simulated':>10}  {'error':>9}  "
             f"{'tolerances':>10}"]
    for row in t.iter_rows(named=True):
        error = (f"{row['error']:+.1%}" if row["relative"] else
                 f"{row['error']:+.3g}{' ' + row['unit'] if row['unit'] else ''}")
        lines.append(f"{row['point']:<{width}}  {_num(row['measured']):>10}  "
                     f"{_num(row['simulated']):>10}  {error:>9}  "
                     f"{row['in_tolerances']:>+10.2f}")
    lines.append(f"rms error {result.rms_error:.2f} tolerances over {t.height} points, "
                 f"{result.dof} degrees of freedom; {result.evaluations} simulations of the "
                 f"point set in {result.seconds:.0f} s")
    kept = {m for k in result.kept for m in members(k)}
    support = {m: n for k, n in result.support.items() for m in members(k)}
    figures = figures or {}
    for k, v in result.values.items():
        note = ("  (kept: no measurement depends on it)" if k in kept else
                f"  moves {support[k]} point{'s' * (support[k] != 1)}"
                + (": set by one point, not fitted" if support[k] < 2 else "")
                if k in support else "")
        if k in figures:
            note += f"; near: {figures[k]}"
        lines.append(f"  {k:<24} {_num(get_value(start.values, k)):>10} -> {_num(v)}{note}")
    return "\n".join(lines)


def _num(v: float) -> str:
    return f"{v:.4g}" if abs(v) < 1e5 else f"{v:.0f}"
