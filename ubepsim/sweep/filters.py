"""The [sweep] filter's language: an expression over parameter names compiled into a polars
expression (never eval'd), and the points it keeps.

A filter is undefined at a point where it divides by zero or takes a power with no real value
(Python would raise): such a term is null there, and a point the rest of the filter does not
decide without it (False and ..., True or ...) is refused with the point.
"""

from __future__ import annotations

import ast
import operator
import sys
from typing import Any, Callable

import polars as pl

from ..errors import InputError
from .files import beside, is_number
from .params import ENUMS, NAMES, PARAM_BY_NAME


def _power(base: pl.Expr, exponent: pl.Expr) -> pl.Expr:
    # a power of a parameter, in floating point: an integer power would wrap around and refuse a
    # negative exponent, where Python gives a float (powers of constants are folded exactly)
    v = base.cast(pl.Float64) ** exponent.cast(pl.Float64)
    return pl.when(~v.is_nan()).then(v)


Binary = Callable[[pl.Expr, pl.Expr], pl.Expr]


def _dividing(op: Binary) -> Binary:
    return lambda a, b: pl.when(b != 0).then(op(a, b))


_BINARY = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul,
           ast.Div: _dividing(operator.truediv), ast.FloorDiv: _dividing(operator.floordiv),
           ast.Mod: _dividing(operator.mod), ast.Pow: _power}
_PYTHON = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul,   # the same,
           ast.Div: operator.truediv, ast.FloorDiv: operator.floordiv,         # on numbers
           ast.Mod: operator.mod, ast.Pow: operator.pow}                       # (folded)
_COMPARE = {ast.Eq: operator.eq, ast.NotEq: operator.ne, ast.Lt: operator.lt,
            ast.LtE: operator.le, ast.Gt: operator.gt, ast.GtE: operator.ge}
_ORDER = (ast.Lt, ast.LtE, ast.Gt, ast.GtE)
FILTER_SYNTAX = ("parameter names, numbers, quoted enum names, + - * / // % **, comparisons "
                 "(== != < <= > >=, in [...]; enums only == != in), and, or, not, parentheses")
INT64 = (-(1 << 63), (1 << 63) - 1)


def _literal(value: Any) -> pl.Expr:
    """A filter's constant. Polars makes a Python int an Int32 literal, in which integer
    arithmetic wraps around past 2 ** 31; the parameters' columns are 64-bit, so are numbers
    (an integer beyond them, such as a folded 2 ** 64, as the nearest float)."""
    if isinstance(value, int):
        return pl.lit(value, pl.Int64) if INT64[0] <= value <= INT64[1] else \
            pl.lit(float(value), pl.Float64)
    if isinstance(value, float):
        return pl.lit(value, pl.Float64)
    return pl.lit(value)


def filter_expr(text: str, source: str | None = None) -> pl.Expr:
    """Parse a filter such as `topk <= experts and (protocol == "ubep" or cumsum_aivs == 4)`."""
    def fail(message: str) -> InputError:
        return InputError("sweep.filter", f"{message} in {text!r}; allowed: {FILTER_SYNTAX}",
                          source)

    try:
        tree = ast.parse(text, mode="eval").body
    except SyntaxError as e:
        raise fail(f"does not parse ({e.msg})") from None

    def param_of(node: ast.AST) -> str | None:
        return node.id if isinstance(node, ast.Name) and node.id in PARAM_BY_NAME else None

    def constant(node: ast.AST, param: str | None) -> Any:
        """A number or string, checked against the parameter it is compared with."""
        if not (isinstance(node, ast.Constant) and (is_number(node.value) or
                                                    isinstance(node.value, str))):
            raise fail(f"unexpected {ast.unparse(node)!r}")
        value, p = node.value, PARAM_BY_NAME.get(param)
        if p is not None and p.choices is not None:
            if value not in p.choices:
                raise fail(f"{value!r} is not a {param}; choose one of {', '.join(p.choices)}")
        elif p is not None and p.kind in (int, float) and not is_number(value):
            raise fail(f"{value!r} is not a number, as {param} is")
        elif p is not None and p.kind not in (int, float) and not isinstance(value, str):
            raise fail(f"{value!r} is not a file name, as {param} is")
        if isinstance(value, int) and abs(value) > sys.float_info.max:
            raise fail(f"{value} is too large")
        if isinstance(value, int) and not INT64[0] <= value <= INT64[1]:
            raise fail(f"{value} does not fit in 64 bits (write it as a float, e.g. "
                       f"{float(value):.0e})")
        if param == "trace" and value and source is not None:
            value = beside(source, value)   # as the grid's own trace values are
        return value

    def folded(node: ast.AST) -> int | float | None:
        """A subexpression of numbers alone, computed exactly as Python does (2 ** 62 stays an
        integer, so seed > 2 ** 62 compares exactly), or None."""
        if isinstance(node, ast.Constant):
            return node.value if is_number(node.value) else None
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)):
            v = folded(node.operand)
            return None if v is None else (-v if isinstance(node.op, ast.USub) else v)
        if isinstance(node, ast.BinOp) and type(node.op) in _BINARY:
            a, b = folded(node.left), folded(node.right)
            if a is None or b is None:
                return None
            if isinstance(node.op, ast.Pow) and abs(b) > 1024 and abs(a) > 1:
                raise fail(f"{ast.unparse(node)} is too large")   # not 10 ** 10 ** 9 digits
            try:
                v = _PYTHON[type(node.op)](a, b)
            except (ZeroDivisionError, OverflowError) as e:
                raise fail(f"{ast.unparse(node)}: {e}") from None
            if not is_number(v):   # a complex root, an infinite float
                raise fail(f"{ast.unparse(node)} is not a finite real number")
            if abs(v) > sys.float_info.max:   # an int no column value can reach or be
                raise fail(f"{ast.unparse(node)} is too large")
            return v
        return None

    def build(node: ast.AST, param: str | None = None) -> pl.Expr:
        if isinstance(node, (ast.BinOp, ast.UnaryOp)):
            v = folded(node)
            if v is not None:
                return _literal(v)
        if isinstance(node, ast.Name):
            if node.id not in PARAM_BY_NAME:
                raise fail(f"unknown name {node.id!r} (parameters: {', '.join(NAMES)})")
            return pl.col(node.id)
        if isinstance(node, ast.Constant):
            return _literal(constant(node, param))
        if isinstance(node, ast.BoolOp):
            parts = [build(v) for v in node.values]
            combine = operator.and_ if isinstance(node.op, ast.And) else operator.or_
            out = parts[0]
            for p in parts[1:]:
                out = combine(out, p)
            return out
        if isinstance(node, ast.UnaryOp):
            inner = build(node.operand)
            if isinstance(node.op, ast.Not):
                return ~inner
            if isinstance(node.op, ast.USub):
                return -inner
            if isinstance(node.op, ast.UAdd):
                return inner
        if isinstance(node, ast.BinOp) and type(node.op) in _BINARY:
            for name in map(param_of, (node.left, node.right)):
                if name and PARAM_BY_NAME[name].kind not in (int, float):
                    raise fail(f"{name} is not a number: no arithmetic on it")
            if isinstance(node.op, (ast.Div, ast.FloorDiv, ast.Mod)) and folded(node.right) == 0:
                raise fail(f"{ast.unparse(node)}: division by zero")
            return _BINARY[type(node.op)](build(node.left), build(node.right))
        if isinstance(node, ast.Compare):
            out = None
            left = node.left
            for op, right in zip(node.ops, node.comparators):
                param = param_of(left) or param_of(right)
                if isinstance(op, (ast.In, ast.NotIn)):
                    if not isinstance(right, (ast.List, ast.Tuple)):
                        raise fail("`in` needs a list such as [\"sw\", \"sp\"]")
                    # equalities, not is_in: 1 and 1.0 match alike, as they do with ==
                    term = pl.lit(False)
                    for e in right.elts:
                        term = term | (build(left) == _literal(constant(e, param)))
                    term = ~term if isinstance(op, ast.NotIn) else term
                elif type(op) in _COMPARE:
                    sides = build(left, param), build(right, param)
                    enum = next((n for n in map(param_of, (left, right)) if n in ENUMS), None)
                    if isinstance(op, _ORDER) and enum:
                        # polars would compare them in declaration order, which means nothing
                        raise fail(f"{enum}'s values have no order; compare it with ==, != or "
                                   f"in [...]")
                    term = _COMPARE[type(op)](*sides)
                else:
                    raise fail(f"unsupported comparison {type(op).__name__}")
                out = term if out is None else out & term
                left = right
            return out
        raise fail(f"unexpected {ast.unparse(node)!r}")

    return build(tree)


def filter_mask(points: pl.DataFrame, expr: pl.Expr, source: str) -> pl.Series:
    """Which points a filter keeps: true or false at every point, else an InputError."""
    compare = "compare values, e.g. \"topk <= experts\""
    try:
        keep = points.select(expr).to_series()
    except pl.exceptions.PolarsError as e:
        reason = str(e).splitlines()[0].rstrip(".")
        raise InputError("sweep.filter", f"cannot evaluate: {reason}; {compare}", source) \
            from None
    if keep.dtype != pl.Boolean:
        raise InputError("sweep.filter", f"cannot evaluate: it gives {keep.dtype} values, not "
                         f"true or false; {compare}", source)
    if keep.null_count():
        row = points.row(int(keep.is_null().arg_max()), named=True)
        at = ", ".join(f"{k} = {row[k]!r}" for k in sorted(set(expr.meta.root_names())))
        raise InputError("sweep.filter", f"undefined at {at}: a division by zero or a power "
                         f"with no real value", source)
    return keep

