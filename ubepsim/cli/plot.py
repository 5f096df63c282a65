"""`ubepsim plot DATASET --kind ...`: PNG figures of sweep results and timelines."""

from __future__ import annotations

from pathlib import Path

import click

from .group import cli
from .options import warn_about
from ..errors import InputError
from ..sweep.plot import KINDS, TIMELINE_KINDS


@cli.command()
@click.argument("datasets", nargs=-1, required=True, metavar="DATASET...")
@click.option("--kind", required=True, metavar="|".join(KINDS),
              help="heatmap: extra latency over the best CalCumSum group size, batch by group "
                   "size, a panel per rank count (Figure 14; sweep results). breakdown: "
                   "stacked phase times per protocol (Figures 3(a), 8; sweep results). sync: "
                   "latency against payload per Data-as-Flag variant (Figure 10; sweep "
                   "results). skew: latency against the busiest die's load over the mean, a "
                   "line per op and protocol (sweep results over skews, sweeps/skew.toml). "
                   "dies: each die's finish time and the copies it takes in and sends, a line "
                   "per configuration (at most 6 rows of one sweep, chosen with --where, or a "
                   "timeline's one; re-simulated on the profile the file records). "
                   "core: each core's send phase (until it issued its last store), a "
                   "panel per timeline (Figure "
                   "9; one or more timelines). timeline: Gantt chart of one die's cores (one "
                   "timeline).")
@click.option("--out", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="PNG file to write (default: KIND.png).")
@click.option("--where", default=None, metavar="SQL",
              help="Keep the sweep rows matching this SQL condition, e.g. \"topk = 8 AND "
                   "sync = 'sp'\".")
@click.option("--die", type=int, default=None,
              help="core, timeline: the die to show (default: the one that finishes last).")
@click.option("--label", "labels", multiple=True,
              help="core, timeline: a title per timeline, in order (default: the file "
                   "names).")
def plot(datasets: tuple[str, ...], kind: str, out: Path | None, where: str | None,
         die: int | None, labels: tuple[str, ...]) -> None:
    """Write a PNG figure of DATASET.

    Sweep results (`ubepsim sweep`: a directory or Parquet files) feed heatmap, breakdown,
    sync and skew: seeds are averaged, and a parameter that is not an axis of the figure must
    hold one value (choose it with --where); and dies, which re-simulates a few rows die by
    die (or a timeline's configuration). Timelines (`ubepsim run --timeline
    FILE.parquet`) feed core (several, e.g. one per schedule) and timeline (one).

    Example: ubepsim plot results/fig14_cumsum_groups --kind heatmap --out fig14.png
    """
    from ..sweep import plot as figures
    from ..files import check_out

    if kind not in KINDS:
        raise InputError("--kind", f"{kind!r} is not a figure; choose one of {', '.join(KINDS)}")
    if "" in datasets:   # Path("") is the current directory: never what was meant
        raise InputError("DATASET", "is an empty string; give a sweep's output directory, a "
                         "Parquet file or a glob (core and timeline: timeline files)")
    out = out or Path(f"{kind}.png")
    check_out(out, (".png",))
    if kind in TIMELINE_KINDS:
        if where is not None:
            raise InputError("--where", "filters sweep results; core and timeline read timelines")
        if kind == "timeline" and len(datasets) != 1:
            raise InputError("DATASET", f"--kind timeline draws one timeline, got "
                             f"{len(datasets)}")
        if labels and len(labels) != len(datasets):
            raise InputError("--label", f"give one per timeline: {len(datasets)} timeline(s), "
                             f"{len(labels)} label(s)")
        frames = [figures.read_timeline(d) for d in datasets]
        picked = [figures.pick_die(f, die, d) for f, d in zip(frames, datasets)]
        names = labels or tuple(Path(d).stem for d in datasets)
        if kind == "timeline":
            fig = figures.timeline(picked[0][1], f"{names[0]} (die {picked[0][0]})")
        else:
            fig = figures.core([(f"{n} (die {d})", figures.core_sends(f, d, path))
                               for n, path, (d, f) in zip(names, datasets, picked)])
    else:
        for flag, value in (("--die", die), ("--label", labels or None)):
            if value is not None:
                raise InputError(flag, f"only for --kind core or timeline, not {kind}")
        if kind == "dies":
            if len(datasets) != 1:
                raise InputError("DATASET", f"--kind dies re-simulates rows of one sweep or a "
                                 f"timeline's configuration, got {len(datasets)} datasets")
            fig = figures.dies(figures.die_series(datasets[0], where))
        else:
            frame = figures.read_results(datasets, kind, where)
            fig = {"heatmap": figures.heatmap, "breakdown": figures.breakdown,
                   "sync": figures.sync, "skew": figures.skew}[kind](frame)
        for d in datasets:
            warn_about(d)
    figures.save(fig, out)
    click.echo(f"wrote {out}")
