"""`ubepsim query DATASET SQL`: Polars SQL over a results dataset (table name `results`)."""

from __future__ import annotations

from pathlib import Path

import click

from . import cli
from ..errors import InputError
from ..outputs import check_out, replacing

OUT_FORMATS = (".parquet", ".csv")


@cli.command()
@click.argument("dataset")
@click.argument("sql")
@click.option("--out", "out", default=None, metavar="FILE",
              help="Write the answer to FILE.parquet or FILE.csv instead of printing it.")
@click.option("--rows", type=int, default=50, show_default=True,
              help="Rows to print at most (-1: all).")
def query(dataset: str, sql: str, out: str | None, rows: int) -> None:
    """Run SQL over DATASET, a sweep's output directory or Parquet file(s), as table `results`.

    Example: ubepsim query results/quickstart "SELECT protocol, avg(latency_us) FROM results
    GROUP BY protocol"
    """
    import polars as pl

    from ..sweep import scan, shortfall

    if rows == 0 or rows < -1:
        raise InputError("--rows", f"must be at least 1, or -1 for all, got {rows}")
    if out is not None:
        check_out(Path(out), OUT_FORMATS)
    results = scan(dataset)
    warning = shortfall(dataset)
    if warning:
        click.echo(f"warning: {warning}", err=True)
    try:
        answer = pl.SQLContext(results=results).execute(sql).collect()
    except (pl.exceptions.SQLInterfaceError, pl.exceptions.SQLSyntaxError,
            pl.exceptions.ColumnNotFoundError, pl.exceptions.InvalidOperationError,
            pl.exceptions.SchemaError) as e:
        raise InputError("SQL", str(e).splitlines()[0]) from None
    if out is None:
        with pl.Config(tbl_rows=rows, tbl_cols=-1, tbl_width_chars=200,
                       tbl_hide_dataframe_shape=True, fmt_str_lengths=60):
            click.echo(answer)
        click.echo(f"{answer.height:,} rows")
        return
    with replacing(Path(out)) as tmp:
        if tmp.suffix == ".csv":
            answer.write_csv(tmp)
        else:
            answer.write_parquet(tmp)
