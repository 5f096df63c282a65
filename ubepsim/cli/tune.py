"""`ubepsim tune`: the best CalCumSum group size per workload, and Appendix A's prediction."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import click

from .group import cli
from .options import (WORKERS, check_threads, list_values, model_options, parse_value,
                      workers_option)
from ..errors import InputError
from ..model.params import GATED, config_columns, default_sync

LISTS = ("ranks", "batch", "experts", "topk", "seed")


@cli.command()
@model_options(lists=LISTS, hidden=("protocol", "cumsum_cores"))  # tune sets both
@click.option("--grid", "grid_file", default=None, metavar="GRID.toml",
              help="Take the workloads from a grid file instead of the flags: its points "
                   "without cumsum_cores (swept here; with --sms, cores) and seed (its seeds "
                   "are averaged), on its profile (--profile, if given, replaces its base "
                   "profile).")
@click.option("--max-cumsum-cores", type=int, default=None,
              show_default="16, or one below the workloads' cores if fewer",
              help="Largest CalCumSum group size tried (from 1); must be below cores.")
@click.option("--sms", is_flag=True,
              help="Size deepep_ll's SMs instead (use with --profile h800, or a grid of "
                   "deepep_ll points on it): per workload, the SMs of least latency and the "
                   "fewest within 5% of it, beside DeepEP V2's formula; every even SM count up "
                   "to --max-sms, 3 warp groups per SM.")
@click.option("--max-sms", type=int, default=None, show_default="the profile's cores",
              help="With --sms: the most SMs tried.")
@click.option("--out", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="Write the lookup table to FILE.toml or FILE.parquet.")
@click.option("--json", "as_json", is_flag=True,
              help="Print a JSON list, one object per workload.")
@workers_option()
def tune(grid_file: str | None, max_cumsum_cores: int | None, sms: bool, max_sms: int | None,
         out: Path | None, as_json: bool, threads: int | None, **flags) -> None:
    """Find the best CalCumSum group size (cumsum_cores) for UBEP, per (ranks, batch, experts,
    topk): the size of least latency of the op, a dispatch or (--op layer) a whole layer.

    Each workload is simulated with 1..--max-cumsum-cores CalCumSum cores (protocol ubep, the
    other flags as in `ubepsim run`; --ranks, --batch, --experts, --topk and --seed take
    comma-separated lists, and latencies are averaged over the seeds). Prints per workload the
    best size, its latency and that of one fewer and one more core, how many seeds have it as
    their own best (best_seeds: near a flat optimum, average many seeds), beside Appendix A's
    prediction (beta/alpha) * cores * experts / (topk * batch), beta/alpha fitted over the rows.

    Example: ubepsim tune --ranks 64,128,256 --batch 8,16,32,64,128 --out cumsum.toml
    """
    from ..fit import tune as engine
    from ..files import check_out
    from ..model.profile import load_profile

    if max_cumsum_cores is not None and max_cumsum_cores < 1:
        raise InputError("--max-cumsum-cores", f"must be at least 1, got {max_cumsum_cores}")
    check_threads(WORKERS, threads)
    if sms:
        _tune_sms(grid_file, max_cumsum_cores, max_sms, out, as_json, threads, flags)
        return
    if max_sms is not None:
        raise InputError("--max-sms", "only with --sms")
    if out is not None:
        check_out(out, engine.OUT_FORMATS)
    if grid_file is not None:
        rows, seeds, profile = _grid_rows(grid_file, flags, "ubep", "cumsum_cores")
    else:
        profile = load_profile(flags.pop("profile"), key="--profile")
        if flags.get("protocol") not in (None, "ubep"):
            raise InputError("protocol", "tune sizes UBEP's CalCumSum group: protocol must "
                             "be ubep")
        if flags.get("cumsum_cores") is not None:
            raise InputError("cumsum_cores", "is what tune sweeps; set --max-cumsum-cores")
        lists = {k: list_values(k, flags.pop(k)) for k in LISTS if flags.get(k) is not None}
        seeds = engine.distinct("seed", lists.pop("seed", [0]))
        fixed = {k: parse_value(k, v) for k, v in flags.items() if v is not None}
        rows = engine.rows_from_lists(lists, fixed, profile.cores,
                                      sync_default=default_sync(profile))
    _check_ops(rows, grid_file)
    result = engine.tune(rows, seeds, profile, max_cumsum_cores, threads)
    if out is not None:
        engine.write(result, out)
    if as_json:
        click.echo(json.dumps(engine.to_records(result), indent=2))
    else:
        click.echo(_table(result))
    if out is not None:
        click.echo(f"wrote {out}", err=as_json)


def _tune_sms(grid_file, max_cumsum_cores, max_sms, out, as_json, threads, flags) -> None:
    """`tune --sms`: deepep_ll's SMs per workload, from the flags or a grid."""
    from ..fit import tune as engine
    from ..files import check_out
    from ..model.profile import load_profile

    for name, given in (("--max-cumsum-cores", max_cumsum_cores), ("--cores", flags.get("cores"))):
        if given is not None:
            raise InputError(name, "not with --sms, which sizes deepep_ll's SMs (--max-sms: "
                             "the most tried)")
    if out is not None:
        check_out(out, engine.OUT_FORMATS)
    if grid_file is not None:
        rows, seeds, profile = _grid_rows(grid_file, flags, "deepep_ll", "cores")
    else:
        if flags.get("protocol") not in (None, "deepep_ll"):
            raise InputError("protocol", "tune --sms sizes deepep_ll's SMs: protocol must be "
                             "deepep_ll")
        profile = load_profile(flags.pop("profile"), key="--profile")
        lists = {k: list_values(k, flags.pop(k)) for k in LISTS if flags.get(k) is not None}
        seeds = engine.distinct("seed", lists.pop("seed", [0]))
        fixed = {k: parse_value(k, v) for k, v in flags.items() if v is not None}
        rows = engine.rows_from_lists(lists, fixed, profile.cores, "deepep_ll")
    result = engine.tune_sms(rows, seeds, profile, max_sms, threads)
    if out is not None:
        engine.write(result, out)
    if as_json:
        click.echo(json.dumps(result.table.to_dicts(), indent=2))
    else:
        table = result.table
        lines = ["  ".join(f"{k:>8}" for k in table.columns)]
        for row in table.iter_rows(named=True):
            lines.append("  ".join(f"{_cell(row[k]):>{max(8, len(k))}}" for k in table.columns))
        lines.append(f"fewest_sms: the fewest SMs within {engine.SMS_SLACK:.0%} of the best "
                     f"latency ({engine.WARP_GROUPS} warp groups each); v2_sms: DeepEP V2's "
                     f"get_theoretical_num_sms at the profile's NIC and NVLink bandwidths; "
                     f"{len(seeds)} seed(s), SMs 2-{result.max_sms}")
        click.echo("\n".join(lines))
    if out is not None:
        click.echo(f"wrote {out}", err=as_json)


def _check_ops(rows: list[dict[str, Any]], grid_file: str | None) -> None:
    """Only dispatch and a layer (its dispatch) have a CalCumSum group to size."""
    gate = GATED["cumsum_cores"]
    unread = [r["op"] for r in rows if not gate.reads(config_columns([r]))[0]]
    if unread:
        raise InputError("op", f"tune sizes UBEP's CalCumSum group, which {unread[0]} does "
                         f"not have (cumsum_cores is read only where {gate.says()}): op must "
                         f"be dispatch or layer", grid_file)


def _grid_rows(path: str, flags: dict[str, Any], protocol: str, swept: str):
    """A grid's workloads for tune: its distinct points without `swept` (what tune varies) and
    seed (its seeds, averaged), each of `protocol`, on its profile (a --profile given replaces
    its base profile, as in `ubepsim sweep`). Returns (rows, seeds, profile)."""
    from ..sweep.grid import load_grid
    from ..fit.tune import resolved_row

    given = [k for k, v in flags.items() if v is not None and k != "profile"]
    if given:
        raise InputError("--grid", "takes its parameters from the grid file; drop "
                         + ", ".join("--" + k.replace("_", "-") for k in given))
    source = click.get_current_context().get_parameter_source("profile")
    grid = load_grid(path, key="--grid", base_profile=None if source is
                     click.core.ParameterSource.DEFAULT else flags["profile"])
    points = grid.frame(0, grid.size)
    if (points["protocol"] != protocol).any():
        what = "UBEP's CalCumSum group" if protocol == "ubep" else "deepep_ll's SMs"
        raise InputError("protocol", f"tune sizes {what}: the grid's protocol must be "
                         f"{protocol}", path)
    seeds = sorted(set(points["seed"].to_list()))
    rows, seen = [], set()
    for point in points.drop(swept, "seed").iter_rows(named=True):
        key = tuple(point.values())
        if key not in seen:
            seen.add(key)
            rows.append(resolved_row({**point, "cumsum_cores": 1}, grid.profile.cores))
    return rows, seeds, grid.profile


def _table(result) -> str:
    t = result.table
    results = ["best_cumsum_cores", "latency_us", "latency_below_us", "latency_above_us",
               "best_seeds", "analytic_cumsum_cores"]
    keys = [c for c in t.columns if c not in results + ["analytic_raw"]]
    shown = keys + results    # headed by the names the --json, TOML and Parquet forms use
    lines = ["  ".join(f"{k:>8}" for k in shown)]
    for row in t.iter_rows(named=True):
        lines.append("  ".join(f"{_cell(row[k]):>{max(8, len(k))}}" for k in shown))
    lines.append(f"beta/alpha = {result.beta_over_alpha:.4g} (Appendix A: n_count ~ "
                 f"(beta/alpha) * cores * experts / (topk * batch), fitted over the rows); "
                 f"{len(result.seeds)} seed(s), group sizes 1-{result.max_cumsum_cores}")
    op = result.constants.get("op")
    lines.append("latency_us: " + (f"the {op}'s latency" if op else "each row's op's latency")
                 + (" (its dispatch, experts and combine)" if op == "layer" else ""))
    return "\n".join(lines)


def _cell(v: Any) -> str:
    """A latency to the nanosecond, a missing one (no size beyond the ends) as -."""
    return "-" if v is None else f"{v:.3f}" if isinstance(v, float) else str(v)
