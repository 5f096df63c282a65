"""`ubepsim run`: one configuration, as a table, as JSON, and optionally its per-core timeline."""

from __future__ import annotations

import json
from pathlib import Path

import click

from .group import cli
from .options import config_from_flags, model_options
from ..files import check_out, write_parquet
from ..model.params import GATED, NAMES, PARAM_BY_NAME, TUNED, TUNED_COLUMN, Config, Op
from ..model.result_fields import EXPERT_COLUMN, RESULTS, phase_column, phase_title, phases_of


@cli.command()
@model_options()
@click.option("--json", "as_json", is_flag=True,
              help="Print one JSON object with every parameter and result.")
@click.option("--timeline", type=click.Path(path_type=Path), default=None,
              help="Write the per-core timeline (die, core, role, phase, start_us, end_us) "
                   "to this Parquet file (its phases: docs/model.md, Timelines).")
def run(as_json: bool, timeline: Path | None, **flags) -> None:
    """Simulate one configuration (a dispatch, a combine or a layer: --op) and print its
    critical path phase by phase, and its results."""
    from ..model.api import simulate

    config, profile = config_from_flags(flags)
    if timeline is not None:
        check_out(timeline, (".parquet",), "--timeline")
    row = simulate(config, profile, timeline=timeline is not None)
    if timeline is not None:   # with what it is the timeline of
        write_parquet(timeline, row.pop("timeline"), {
            "config": json.dumps({n: row[n] for n in (*NAMES, "config_id", TUNED_COLUMN)}),
            "profile": profile.to_toml()})
    if as_json:
        click.echo(json.dumps({"profile": profile.name, **row}, indent=2))
        return
    click.echo(_table(row, config, profile.name, timeline))


def _table(row: dict, config: Config, profile: str, timeline: Path | None) -> str:
    cols = config.columns()
    unread = [n for n, gate in GATED.items() if not gate.reads(cols)[0]]
    params = "  ".join(f"{n}={row[n]}" + (f" ({TUNED})" if n == "cumsum_cores"
                                           and row[TUNED_COLUMN] else "")
                       for n in NAMES if row[n] not in ("", None) and n not in unread)
    lines = [f"configuration  {params}  profile={profile}",
             f"not read here  {', '.join(unread)} (recorded at their defaults{_as(unread)})",
             f"config_id      {row['config_id']}", ""]
    op = Op[row["op"]]
    lines += _breakdown(row, op)
    shown = {phase_column(p.name) for p in phases_of(op)}
    given = [f for f in RESULTS if f.given_by(op) and f.name not in shown]
    width = max(len(f.name) for f in RESULTS)
    lines.append(f"\nresults of the {op.name}:")
    for f in given:
        v = row[f.name]
        text = f"{v:12.3f}" if isinstance(v, float) else f"{v:12d}"
        lines.append(f"{f.name:<{width}}  {text}   {f.help}")
    absent = [f.name for f in RESULTS if not f.given_by(op)]
    if absent:
        lines.append(f"(0 in a {op.name}, as --json shows: {', '.join(absent)})")
    if timeline is not None:
        lines.append(f"\ntimeline written to {timeline}")
    return "\n".join(lines)


def _as(unread: list[str]) -> str:
    """The unread parameters recorded at a value other than their default (Param.unread)."""
    return "".join(f"; {n} as {PARAM_BY_NAME[n].unread}" for n in unread
                   if PARAM_BY_NAME[n].unread is not None)


def _breakdown(row: dict, op: Op) -> list[str]:
    """The critical path, phase by phase (and a layer's experts' time): parts that sum to the
    latency, each with its share."""
    parts = [(phase_column(p.name), phase_title(p.name)) for p in phases_of(op)]
    if op is Op.layer:
        parts.append((EXPERT_COLUMN, "Experts, between dispatch and combine"))
    latency = row["latency_us"]
    lines = [f"critical path of the {op.name}, part by part (they sum to latency_us):"]
    for name, title in parts:
        share = row[name] / latency if latency else 0.0
        lines.append(f"  {name:<18} {row[name]:12.3f} us  {share:6.1%}  {title}")
    total = sum(row[name] for name, _ in parts)
    lines.append(f"  {'sum':<18} {total:12.3f} us          = latency_us {latency:.3f} us")
    return lines
