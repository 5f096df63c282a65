"""`ubepsim query DATASET SQL`: Polars SQL over a results dataset (table name `results`)."""

from __future__ import annotations

from pathlib import Path

import click

from .group import cli
from .options import warn_about
from ..errors import InputError
from ..files import check_out, replacing

OUT_FORMATS = (".parquet", ".csv")


# SQL statements that write: refused before any work
WRITES = ("INSERT", "UPDATE", "DELETE", "MERGE", "CREATE", "DROP", "ALTER", "TRUNCATE", "COPY")


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

    from ..sweep.engine import scan

    if rows == 0 or rows < -1:
        raise InputError("--rows", f"must be at least 1, or -1 for all, got {rows}")
    if out is not None:
        check_out(Path(out), OUT_FORMATS)
    # A query reads. Refused here, not left to Polars, whose SQL takes more statements from one
    # release to the next (2.2 runs INSERT into its in-memory table): one message whatever its
    # version
    verb = sql.split(None, 1)[0].upper() if sql.strip() else ""
    if verb in WRITES:
        raise InputError("SQL", f"{verb} changes a table; a query only reads: give a SELECT")
    results = scan(dataset)
    warn_about(dataset)
    try:
        answer = pl.SQLContext(results=results).execute(sql).collect()
    # Nothing runs here but the user's statement, so a Polars error is a mistake in it (a type
    # mismatch, a bad regex, a file its read_parquet names, ...). Not PanicException: a Polars
    # bug, rightly an internal error.
    except (pl.exceptions.PolarsError, OSError) as e:
        raise InputError("SQL", _one_line(e)) from None
    if answer.width == 0:   # an answer without columns: nothing to print or write
        raise InputError("SQL", "returns no columns; give a SELECT")
    if out is None:
        # never squeezed: a wide answer is read by scrolling, with its column names whole
        with pl.Config(tbl_rows=rows, tbl_cols=-1, tbl_width_chars=-1,
                       tbl_hide_dataframe_shape=True, fmt_str_lengths=60):
            click.echo(answer)
        click.echo(f"{answer.height:,} row{'' if answer.height == 1 else 's'}")
        return
    nested = [c for c, t in answer.schema.items() if t.is_nested()]
    if nested and Path(out).suffix == ".csv":
        raise InputError("--out", f"CSV cannot hold column {nested[0]} "
                         f"({answer.schema[nested[0]]}); write FILE.parquet instead")
    try:
        with replacing(Path(out)) as tmp:
            if tmp.suffix == ".csv":
                answer.write_csv(tmp)
            else:
                answer.write_parquet(tmp)
    except (pl.exceptions.PolarsError, OSError) as e:   # a full disk, a type CSV cannot hold
        raise InputError("--out", f"cannot write {out}: {_one_line(e)}") from None


def _one_line(e: Exception) -> str:
    """A Polars error as one line: its first paragraph, without the plan or expression dumps
    and the Python-API hints that follow."""
    import polars as pl

    lines = [ln.strip() for ln in str(e).strip().split("\n\n")[0].splitlines()] or [""]
    message = lines[0]
    if message.endswith(":"):   # a regex error ends with its cause; others with a parse dump
        cause = lines[-1].removeprefix("error: ") if lines[-1].startswith("error: ") else ""
        message = f"{message} {cause}" if cause else message.removesuffix(":")
    if isinstance(e, pl.exceptions.DuplicateError):
        message = message.split(". ")[0] + "; give each column its own name with AS"
    return message or type(e).__name__
