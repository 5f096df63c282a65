"""`ubepsim validate`: the model against every calibration point and claim of the paper."""

from __future__ import annotations

import json
import textwrap

import click

from .group import cli
from .options import CheckFailed, WORKERS, check_threads, workers_option


@cli.command()
@click.option("--profile", "profile_spec", default="cm384", show_default=True,
              metavar="NAME|FILE.toml", help="Hardware profile to validate.")
@click.option("--json", "as_json", is_flag=True,
              help="Print a JSON list, one object per point or claim (kind, item, paper, "
                   "model, error, unit, pass, setup); with --ablation, an object of such lists "
                   "by run (model, then each mechanism's key).")
@click.option("--strict", is_flag=True, help="Exit with code 1 if a claim fails.")
@click.option("--ablation", is_flag=True,
              help="Also run every point and claim with each mechanism of the profile (the "
                   "keys with a vanishing value, docs/model.md) set to that value, one at a "
                   "time, and print the results side by side.")
@workers_option()
def validate(profile_spec: str, as_json: bool, strict: bool, ablation: bool,
             threads: int | None) -> None:
    """Run every calibration point (Table 2, Table 4, Figure 3(b), the SyncAll share, Figure
    14's panels, each with the regret of the group sizes the model picks beside three rules of
    thumb fitted on the other panel) and every qualitative claim of the paper's text (Sections
    3.2-3.4, Appendix C.3, the abstract's headline), then Table 4's DeepEP column on the h800
    preset with the SMs deepep_ll needs beside DeepEP V2's formula, and print the paper's value
    or statement beside the model's: the error of each point, pass or fail for each claim.
    Takes about a minute once the kernels are compiled (the first run of ubepsim on a machine
    compiles them); with --ablation, that again per mechanism (DeepEP's points left out).
    """
    from ..model.profile import load_profile
    from ..paper import validate as v

    check_threads(WORKERS, threads)
    profile = load_profile(profile_spec, key="--profile")
    runs = v.ablation(profile, threads) if ablation else {"model": v.validate(profile, threads)}
    checks = runs["model"]
    if as_json:
        out = {k: [c.as_dict() for c in cs] for k, cs in runs.items()}
        click.echo(json.dumps(out if ablation else out["model"], indent=2))
    elif ablation:
        click.echo(_ablation_table(runs))
    else:
        click.echo(_table(checks))
    failed = [c.item for c in checks if c.passed is False]
    if strict and failed:
        raise CheckFailed(f"{len(failed)} claim(s) fail: {'; '.join(failed)}")


def _table(checks) -> str:
    width = 58
    lines = [f"{'point or claim':<{width}}  {'paper':<24}  {'model':<24}  result"]
    for c in checks:
        item = textwrap.wrap(c.item, width) or [""]
        paper = textwrap.wrap(c.paper, 24) or [""]
        model = textwrap.wrap(c.model, 24) or [""]
        for i in range(max(len(item), len(paper), len(model))):
            cell = [x[i] if i < len(x) else "" for x in (item, paper, model)]
            lines.append(f"{cell[0]:<{width}}  {cell[1]:<24}  {cell[2]:<24}  "
                         + (c.result() if i == 0 else ""))
    lines.append(_summary(checks))
    return "\n".join(lines)


def _summary(checks) -> str:
    points = [c for c in checks if c.kind == "point" and not c.unit]
    claims = [c for c in checks if c.kind == "claim"]
    rms = (sum(c.error ** 2 for c in points) / len(points)) ** 0.5
    tested = [c for c in claims if c.passed is not None]
    untested = f"; {len(claims) - len(tested)} not testable on this profile" \
        if len(tested) < len(claims) else ""
    return (f"{len(points)} points with a relative error, rms {rms:.1%}; "
            f"{sum(c.passed for c in tested)} of {len(tested)} claims hold{untested}")


def _ablation_table(runs) -> str:
    """One line per point or claim: its result with the whole model, then without each
    mechanism; a summary line per run."""
    width = 58
    names = list(runs)
    heads = ["model"] + [f"no {k}" for k in names[1:]]
    cw = max(12, *(len(h) for h in heads))
    lines = [f"{'point or claim':<{width}}  " + "  ".join(f"{h:>{cw}}" for h in heads)]
    for i, c in enumerate(runs["model"]):
        item = textwrap.wrap(c.item, width) or [""]
        cells = "  ".join(f"{runs[n][i].result():>{cw}}" for n in names)
        lines.append(f"{item[0]:<{width}}  {cells}")
        lines += item[1:]
    for n, h in zip(names, heads):
        lines.append(f"{h}: {_summary(runs[n])}")
    return "\n".join(lines)
