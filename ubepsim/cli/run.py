"""`ubepsim run`: one configuration, as a table, as JSON, and optionally its per-AIV timeline."""

from __future__ import annotations

import json
from pathlib import Path

import click

from . import cli
from .options import config_from_flags, model_options
from ..sweep.files import check_out, write_parquet
from ..sweep.params import NAMES
from ..sweep.result_fields import RESULTS


@cli.command()
@model_options()
@click.option("--json", "as_json", is_flag=True,
              help="Print one JSON object with every parameter and result.")
@click.option("--timeline", type=click.Path(path_type=Path), default=None,
              help="Write the per-AIV timeline (die, aiv, role, phase, start_us, end_us) "
                   "to this Parquet file (its phases: docs/model.md, Timelines).")
def run(as_json: bool, timeline: Path | None, **flags) -> None:
    """Simulate one dispatch configuration and print its results."""
    from ..sweep.model import simulate

    config, profile = config_from_flags(flags)
    if timeline is not None:
        check_out(timeline, (".parquet",), "--timeline")
    row = simulate(config, profile, timeline=timeline is not None)
    if timeline is not None:   # with what it is the timeline of
        write_parquet(timeline, row.pop("timeline"), {
            "config": json.dumps({n: row[n] for n in (*NAMES, "config_id")}),
            "profile": profile.to_toml()})
    if as_json:
        click.echo(json.dumps({"profile": profile.name, **row}, indent=2))
        return
    click.echo(_table(row, profile.name, timeline))


def _table(row: dict, profile: str, timeline: Path | None) -> str:
    params = "  ".join(f"{n}={row[n]}" for n in NAMES if row[n] not in ("", None))
    lines = [f"configuration  {params}  profile={profile}", f"config_id      {row['config_id']}",
             ""]
    width = max(len(f.name) for f in RESULTS)
    for f in RESULTS:
        v = row[f.name]
        text = f"{v:12.3f}" if isinstance(v, float) else f"{v:12d}"
        lines.append(f"{f.name:<{width}}  {text}   {f.help}")
    if timeline is not None:
        lines.append(f"\ntimeline written to {timeline}")
    return "\n".join(lines)
