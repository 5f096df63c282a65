"""`ubepsim validate`: the model against every calibration point and claim of the paper."""

from __future__ import annotations

import json
import textwrap

import click

from . import cli
from .options import CheckFailed, WORKERS, check_threads, workers_option


@cli.command()
@click.option("--profile", "profile_spec", default="cm384", show_default=True,
              metavar="NAME|FILE.toml", help="Hardware profile to validate.")
@click.option("--json", "as_json", is_flag=True,
              help="Print a JSON list, one object per point or claim (kind, item, paper, "
                   "model, error, pass, setup).")
@click.option("--strict", is_flag=True, help="Exit with code 1 if a claim fails.")
@workers_option()
def validate(profile_spec: str, as_json: bool, strict: bool, threads: int | None) -> None:
    """Run every calibration point (Table 2, Table 4, Figure 3(b), the SyncAll share) and every
    qualitative claim of the paper's text (Sections 3.2-3.4, Appendix C.3, ...), and print
    the paper's value or statement beside the model's: the relative error of each point, pass
    or fail for each claim. Takes a few seconds once the kernel is compiled (the first run of
    ubepsim on a machine compiles it, about 25 s).
    """
    from ..profile import load_profile
    from ..validate import validate as run

    check_threads(WORKERS, threads)
    checks = run(load_profile(profile_spec, key="--profile"), threads)
    if as_json:
        click.echo(json.dumps([c.as_dict() for c in checks], indent=2))
    else:
        click.echo(_table(checks))
    failed = [c.item for c in checks if c.passed is False]
    if strict and failed:
        raise CheckFailed(f"{len(failed)} claim(s) fail: {'; '.join(failed)}")


def _table(checks) -> str:
    width = 58
    lines = [f"{'point or claim':<{width}}  {'paper':<24}  {'model':<24}  result"]
    for c in checks:
        result = (f"{c.error:+.1%}" if c.kind == "point" else
                  {True: "pass", False: "FAIL", None: "n/a"}[c.passed])
        item = textwrap.wrap(c.item, width) or [""]
        paper = textwrap.wrap(c.paper, 24) or [""]
        model = textwrap.wrap(c.model, 24) or [""]
        for i in range(max(len(item), len(paper), len(model))):
            cell = [x[i] if i < len(x) else "" for x in (item, paper, model)]
            lines.append(f"{cell[0]:<{width}}  {cell[1]:<24}  {cell[2]:<24}  "
                         + (result if i == 0 else ""))
    points = [c for c in checks if c.kind == "point"]
    claims = [c for c in checks if c.kind == "claim"]
    rms = (sum(c.error ** 2 for c in points) / len(points)) ** 0.5
    tested = [c for c in claims if c.passed is not None]
    untested = f"; {len(claims) - len(tested)} not testable on this profile" \
        if len(tested) < len(claims) else ""
    lines.append(f"{len(points)} points, rms error {rms:.1%}; "
                 f"{sum(c.passed for c in tested)} of {len(tested)} claims hold{untested}")
    return "\n".join(lines)
