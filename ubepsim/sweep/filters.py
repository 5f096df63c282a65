"""The [sweep] filter: an SQL condition over parameter names, the dialect of the WHERE clauses
`ubepsim query` runs, compiled by polars (polars.sql_expr). It sees the points as the grid
gives them: an enum as its name, a trace file as the grid names it (relative to the grid file),
cumsum_cores = "tuned" as params.TUNED_CODE (0, below every size).

Here is only what polars does not do for a filter. Before any work, a filter must name
parameters only, compare an enum parameter with its own values, and give true or false; and a
filter written in 0.7.0's Python-like language is told what to write instead. While the grid
expands, a filter must decide each point by that point's parameters alone (an aggregate such as
AVG or a window such as ROW_NUMBER would see the other points of a chunk of the grid), and a
point where it is undefined is refused, never silently kept or dropped: where it is null and the
rest of it does not decide (SQL's three-valued logic; an integer division or remainder by zero
is null), and where any term of it is no finite number (polars' `/`, POWER, SQRT and LN give an
infinity or a NaN where the value is undefined, and a NaN compares above every number).
"""

from __future__ import annotations

import dataclasses
import math
import os
from pathlib import Path

import polars as pl

from ..errors import InputError, renamed
from ..model.params import ENUMS, NAMES, PARAM_BY_NAME, SCHEMA, TUNED, TUNED_CODE

EXAMPLE = "topk <= experts AND (protocol = 'ubep' OR cumsum_cores = 4)"
HELP = (f"a filter is an SQL condition over parameter names, as in a WHERE clause of `ubepsim "
        f"query`, e.g. \"{EXAMPLE}\"")
# What 0.7.0's filters, written in Python, wrote differently: (what betrays it, what to write).
PYTHON = (("**", "POWER(a, b) for a ** b"),
          ("[", "(a, b) for a list [a, b], as in sync IN ('sw', 'sp')"),
          ('"', "'ubep' for \"ubep\" (double quotes name a column)"))
ROW = "__row"   # a row's own number, over which a filter is evaluated on each point alone
# The points as a filter sees them: an enum as its name.
VIEW = {name: pl.String if name in ENUMS else dtype for name, dtype in SCHEMA.items()}


@dataclasses.dataclass(frozen=True)
class Filter:
    """A grid's filter as compile_filter checked it: its text, polars' expression, and the terms
    that must be finite numbers at every point it decides."""

    text: str
    expr: pl.Expr
    terms: tuple[pl.Expr, ...]   # its computed terms that give numbers (floats)
    source: str | None

    def keeps(self, points: pl.DataFrame) -> pl.Series:
        """Which points the filter keeps: true or false at every point, else an InputError."""
        view = _as_written(points, self.source)
        no_number = pl.any_horizontal(~t.is_finite() for t in self.terms).fill_null(False) \
            if self.terms else pl.lit(False)
        try:
            keep = view.with_row_index(ROW).select(
                self.expr.alias("keep"), self.expr.over(ROW).alias("alone"),
                no_number.alias("no_number"))
        except pl.exceptions.PolarsError as e:
            raise self._fail(f"cannot be evaluated ({_first_line(e)})") from None
        if not keep["keep"].eq_missing(keep["alone"]).all():
            raise self._fail("decides a point by other points (an aggregate such as AVG or "
                             "COUNT, or a window such as ROW_NUMBER() OVER ()): a filter keeps "
                             "or drops each point by its own parameters")
        for bad, why in ((keep["no_number"], "a term of it is no finite number there (a "
                          "division by zero, a root or logarithm of a number below zero): write "
                          "such a division with NULLIF(x, 0), whose null the rest of the filter "
                          "may decide"),
                         (keep["keep"].is_null(), "it is null there (an integer division or "
                          "remainder by zero, a NULL) and the rest of it does not decide")):
            if bad.any():
                row = view.row(int(bad.arg_max()), named=True)
                at = ", ".join(f"{k} = {row[k]!r}" for k in sorted(set(
                    self.expr.meta.root_names())))
                raise self._fail(f"is undefined at {at}: {why}", explain=False)
        return keep["keep"]

    def _fail(self, problem: str, explain: bool = True) -> InputError:
        return _error(problem, self.text, self.source, explain)


def compile_filter(text: str, source: str | None = None) -> Filter:
    """A grid's filter, compiled by polars and checked; InputError (sweep.filter) if it does not
    parse, names anything but a parameter, compares an enum with a value it lacks, cannot be
    evaluated over the parameters' columns, or gives anything but true or false."""
    try:
        expr = pl.sql_expr(text)
    except pl.exceptions.PolarsError as e:
        raise _error(f"does not parse ({_first_line(e)})", text, source) from None
    unknown = sorted(set(expr.meta.root_names()) - set(NAMES))
    if unknown:
        raise _error(f"unknown name {unknown[0]!r}{renamed(unknown[0])} (parameters: "
                     f"{', '.join(NAMES)})", text, source)
    terms = _terms(expr)
    empty = pl.DataFrame(schema=VIEW)
    try:   # types are checked on no rows: a comparison of a number with a word, say
        dtypes = [empty.select(term).to_series().dtype for term, _ in terms]
    except pl.exceptions.PolarsError as e:
        tuned = (f"; a filter sees cumsum_cores = \"{TUNED}\" as {TUNED_CODE}"
                 if f"'{TUNED}'" in text else "")
        raise _error(f"cannot be evaluated ({_first_line(e)}){tuned}", text, source) from None
    if dtypes[0] != pl.Boolean:
        raise _error(f"gives {dtypes[0]} values, not true or false", text, source)
    for term, operands in terms:
        _check_term(term, [terms[i][0] for i in operands], [dtypes[i] for i in operands], text,
                    source)
    return Filter(text, expr, tuple(term for (term, _), dtype in zip(terms, dtypes)
                                    if dtype.is_float() and not term.meta.is_column()
                                    and not term.meta.is_literal()), source)


def _terms(expr: pl.Expr) -> list[tuple[pl.Expr, list[int]]]:
    """The expression and every term under it, each with the places of its operands."""
    out: list[tuple[pl.Expr, list[int]]] = []

    def visit(term: pl.Expr) -> int:
        at = len(out)
        out.append((term, []))
        out[at][1].extend(visit(operand) for operand in term.meta.pop())
        return at
    visit(expr)
    return out


def _check_term(term: pl.Expr, children: list[pl.Expr], types: list[pl.DataType], text: str,
                source: str | None) -> None:
    """A term (with its operands and their types) whose meaning polars does not check: an enum
    tested for a value it lacks, an infinite number, a comparison compared with a number
    (Python's chained a < b < c)."""
    columns = [c.meta.output_name() for c in children if c.meta.is_column()]
    for child in children:
        if not child.meta.is_literal():
            continue
        value = pl.select(child).to_series().explode()
        for name in (c for c in columns if c in ENUMS):
            # an equality or membership test, by what it gives for each of the enum's values
            # (a pattern, LIKE 'u%', or an order, < 'tff', may name no value)
            choices = PARAM_BY_NAME[name].choices
            if pl.DataFrame({name: choices}).select(term).to_series().to_list() == \
                    [c in value.to_list() for c in choices]:
                wrong = [v for v in value.to_list() if v not in choices]
                if wrong:
                    raise _error(f"{wrong[0]!r} is not a {name}; choose one of "
                                 f"{', '.join(choices)}", text, source)
        if value.dtype.is_float() and not all(math.isfinite(v) for v in value.drop_nulls()):
            raise _error(f"{value[0]} is not a finite number", text, source)
    if len(types) == 2 and types.count(pl.Boolean) == 1 and any(t.is_numeric() for t in types):
        raise _error("compares the truth of a comparison with a number: SQL does not chain "
                     "comparisons; write a < b AND b < c for a < b < c", text, source)


def _as_written(points: pl.DataFrame, source: str | None) -> pl.DataFrame:
    """The points as a filter sees them: an enum as its name, a trace file relative to the
    grid file (as [grid] names it)."""
    view = points.with_columns(pl.col(n).cast(pl.String) for n in ENUMS)
    if source is None:
        return view
    home = Path(source).parent.resolve()
    traces = {p: os.path.relpath(p, home) for p in view["trace"].unique() if p}
    return view.with_columns(pl.col("trace").replace(traces)) if traces else view


def _error(problem: str, text: str, source: str | None, explain: bool = True) -> InputError:
    """The one message of a filter's mistake, naming the filter; with `explain`, what a filter
    is, and what to write instead of what 0.7.0's filters wrote in Python."""
    old = [write for mark, write in PYTHON if mark in text]
    hint = f"; 0.7.0's filters were Python: write {', '.join(old)}" if old else ""
    return InputError("sweep.filter", f"{text!r} {problem}" + (f"; {HELP}{hint}" if explain
                                                               else ""), source)


def _first_line(e: Exception) -> str:
    """Polars' reason in a line: its first, without the dump of a parse tree after a colon."""
    line = (str(e).strip().splitlines() or [type(e).__name__])[0]
    if len(line) > 100:
        line = line.split(": ")[0] if ": " in line[:100] else line[:100] + "..."
    return line.rstrip(".:")
