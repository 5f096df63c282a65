"""`ubepsim sweep GRID.toml`: expand a grid, simulate every point, stream rows into Parquet."""

from __future__ import annotations

import sys
from pathlib import Path

import click

from .group import cli
from .options import WORKERS, check_threads, workers_option
from ..errors import InputError


@cli.command()
@click.argument("grid_file", metavar="GRID.toml", type=click.Path(dir_okay=False))
@click.option("--out", "out", type=click.Path(file_okay=False), default=None,
              help="Output directory of the Parquet dataset, created with its parents if missing "
                   "(overrides [sweep] out).")
@click.option("--profile", "profile", default=None, metavar="NAME|FILE.toml",
              help="Base hardware profile, a built-in name or a TOML file with [hardware] "
                   "(overrides [sweep] profile; the grid's [profile] table still applies on "
                   "top).")
@click.option("--resume", is_flag=True,
              help="Finish a sweep that was interrupted: keep its complete parts, simulate the "
                   "rest.")
@workers_option("; with --scheduler, threads per batch on a Dask worker (default 1)")
@click.option("--scheduler", default=None, metavar="ADDRESS",
              help="Run the batches on a Dask cluster: a scheduler address "
                   "(tcp://host:8786), or local:N to start N local worker processes.")
@click.option("--batch-size", "batch_rows", type=int, default=None,
              help="Configurations per kernel call (default 4096); not the `batch` parameter "
                   "(tokens per rank).")
@click.option("--part-rows", type=int, default=None,
              help="Configurations per Parquet part file, one row group each (default 65536).")
@click.option("--dry-run", is_flag=True,
              help="Expand and check the grid, the output directory and the memory as a "
                   "run would (with --scheduler, on the cluster: it connects, or starts a "
                   "local:N cluster), print the grid's size (and the rows already there), "
                   "stop.")
@click.option("--quiet", "-q", is_flag=True, help="No progress bar.")
def sweep(grid_file: str, out: str | None, profile: str | None, resume: bool,
          threads: int | None, scheduler: str | None, batch_rows: int | None,
          part_rows: int | None, dry_run: bool, quiet: bool) -> None:
    """Simulate every configuration of a grid file into a resumable Parquet dataset.

    The dataset (one row per configuration: every parameter, config_id, every result) is a
    directory of part files; read it with `ubepsim query DIR SQL` or
    polars.scan_parquet("DIR/part-*.parquet"). Points that differ only in a parameter their
    protocol, routing or op does not read (cumsum_cores under bsp, zipf_s under uniform routing,
    sync under a bsp combine, expert times outside a layer, ...) are one configuration,
    simulated once.
    """
    from ..sweep import engine
    from ..sweep.grid import load_grid, shape

    threads = _threads(threads, scheduler)
    for flag, value in (("--batch-size", batch_rows), ("--part-rows", part_rows)):
        if value is not None and value < 1:
            raise InputError(flag, f"must be at least 1, got {value}")
    if out is not None and not out.strip():
        raise InputError("--out", "is empty; give a directory")
    grid = load_grid(grid_file, base_profile=profile)
    target = Path(out) if out else grid.out
    if target is None and not dry_run:
        raise InputError("--out", f"{grid_file} sets no [sweep] out; give --out DIR")
    axes = shape(grid.axes)
    size = f"{grid.product:,} points ({axes})" if axes else "1 point"
    kept = "" if grid.filtered == grid.product else f"; the filter keeps {grid.filtered:,}"
    if grid.size < grid.filtered:
        kept += (f"; {grid.size:,} distinct configurations (the others differ only in "
                 f"{', '.join(grid.unread)}, which their protocol, routing or op does not "
                 f"read)")
    click.echo(f"{grid.name}: {size}{kept}")
    if dry_run:
        have = _naming_out(lambda: engine.check_out(grid, target, resume), out, grid_file) \
            if target else 0
        if scheduler:
            _connecting(scheduler)
            engine.check_cluster(grid, scheduler, threads)
        else:
            engine.check_local_memory(grid, threads)
        if have == grid.size:
            click.echo(f"{target}: holds all {have:,} rows; nothing to simulate")
        elif have:
            click.echo(f"{target}: holds {have:,} of the {grid.size:,} rows; --resume "
                       f"simulates the other {grid.size - have:,}")
        return
    if scheduler:
        _connecting(scheduler)
    try:
        summary = _naming_out(lambda: engine.run_sweep(
            grid, target, resume=resume, threads=threads, scheduler=scheduler,
            batch_rows=batch_rows or engine.BATCH_ROWS, part_rows=part_rows or engine.PART_ROWS,
            progress=not quiet and sys.stderr.isatty()), out, grid_file)
    except KeyboardInterrupt:
        # parts are written whole or not at all, so what is there is good
        click.echo(f"\ninterrupted: the complete parts in {target} are kept; run the same "
                   f"command with --resume to finish", err=True)
        raise click.exceptions.Abort() from None
    except engine.SweepStopped as e:   # neither bad input nor a bug of ours: exit code 1
        have = sum(b - a for a, b in engine.existing_parts(target, grid))
        raise click.ClickException(
            f"{e}; the complete parts in {target} are kept ({have:,} of {grid.size:,} rows); "
            f"run the same command with --resume to finish") from None
    rate = summary.simulated / summary.seconds if summary.seconds else 0.0
    before = f" ({summary.done_before:,} were there already)" if summary.done_before else ""
    click.echo(f"{target}: {summary.done_before + summary.simulated:,} rows{before}; simulated "
               f"{summary.simulated:,} in {summary.seconds:.1f} s ({rate:,.0f}/s) into "
               f"{summary.parts} part(s), Parquet writing {summary.write_s:.2f} s")


def _connecting(scheduler: str) -> None:
    """Announce the wait for a remote scheduler (a local:N cluster is started, not waited
    for)."""
    from ..sweep import engine

    if engine.local_workers(scheduler) is None:
        click.echo(f"connecting to the Dask scheduler at {scheduler} (giving up after "
                   f"{engine.CONNECT_TIMEOUT_S} s)", err=True)


def _naming_out(run, out: str | None, grid_file: str):
    """run(); a complaint about the output directory names [sweep] out, in the grid file, when
    that is where the directory came from, rather than a --out the user did not give."""
    try:
        return run()
    except InputError as e:
        if e.key != "--out" or out is not None:
            raise
        raise InputError("sweep.out", str(e).removeprefix("--out: "), grid_file) from None


def _threads(threads: int | None, scheduler: str | None) -> int | None:
    if scheduler:
        from ..sweep.engine import local_workers

        local_workers(scheduler)  # refuses a malformed address before any work
        if threads is not None and threads < 1:
            raise InputError(WORKERS, f"must be at least 1, got {threads}")
        return threads or 1
    return check_threads(WORKERS, threads)
