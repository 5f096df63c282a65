"""Sweep grids: a TOML file read, checked and expanded into numbered, resolved configurations.

    [sweep]    name, out, seeds, filter, profile     what to run and where
    [grid]     parameter = value | [values] | { range = [first, last], step = s | factor = f }
    [[zip]]    parameters that move together: lists (or ranges) of equal length, one axis
    [profile]  hardware overrides on top of the base profile

Here: the file's tables and keys, each axis's values (each checked with `params.coerce`) and
the Grid they make. The expansion of the axes into points, with their deduplication and the
grid's fingerprint, is expand; the [sweep] filter, an SQL condition, is filters. Every
error is an InputError naming the grid file and the key.
"""

from __future__ import annotations

import dataclasses
import math
import sys
import tomllib
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl

from ..errors import InputError, renamed
from .expand import CHUNK, configurations, corner, expand
from ..files import beside, is_number
from .filters import compile_filter
from ..model.memory import check_memory, working_memory
from ..model.params import ENUMS, NAMES, PARAM_BY_NAME, coerce, columns, polars_dtype, trace_digest
from ..model.profile import BUILTIN, Profile, load_profile

TABLES = ("sweep", "grid", "zip", "profile")
SWEEP_KEYS = {
    "name": "the sweep's name (a string), recorded with the results",
    "out": "the output directory (a string); `--out DIR` overrides it",
    "seeds": "the replicate seeds: an integer, a list of integers or { range = [first, last] }",
    "filter": "an SQL condition over parameter names that keeps a point, e.g. \"topk <= "
              "experts AND protocol = 'ubep'\" (or a list of them, all must hold)",
    "profile": "the base hardware profile: \"cm384\" or a TOML file (relative to the grid file)",
}
AXIS_FORMS = ("a value, a list of values, or { range = [first, last] } with an optional "
              "step = s or factor = f (both ends included)")
# The most points a grid may expand to (before the filter), and so the longest axis. The client
# expands the product once, a chunk at a time, and holds the config_id of each point kept and,
# with a filter, its index (8 bytes each; the points themselves are built a batch at a time).
# A hundred million points, measured: 49 s and 2.6 GB resident (most of both the sort of their
# config_ids); 61 s and 3.4 GB with a filter and 30% of them dropped as one configuration. That
# many points are days of work on one 2-core machine (about 1,000 a second) and hours on a
# cluster. A bigger study is several grid files.
MAX_POINTS = 10**8


@dataclasses.dataclass(frozen=True)
class Grid:
    """A loaded, validated and expanded grid. Its points are numbered 0 .. size - 1 in
    expansion order and built on demand from the axes (batch), never held all at once."""

    path: Path
    text: str                 # the grid file as written (provenance)
    name: str
    out: Path | None          # from [sweep] out; the CLI's --out wins
    profile: Profile
    axes: dict[str, int]      # axis label -> number of values, in expansion order
    product: int              # points in the cartesian product, before the filter
    filtered: int             # points the filter keeps (product if there is none)
    # A hash of exactly what gets simulated: the profile and the points' config_ids in order,
    # and the trace files' paths the rows record.
    # Grid files that expand to the same points (comments, key order in a zip group, `out`) are
    # the same sweep; a resumed run must present the same fingerprint.
    fingerprint: str
    unread: tuple[str, ...]   # the parameters in which points dropped as repeats differ
    values: list[list[pl.Series]] = dataclasses.field(repr=False)   # per axis, its columns
    kept: np.ndarray | None = dataclasses.field(repr=False)  # product index of each point
                                                              # (None: every point is kept)

    @property
    def size(self) -> int:
        return self.product if self.kept is None else len(self.kept)

    def frame(self, start: int, stop: int) -> pl.DataFrame:
        """Configurations [start, stop): a frame of params.SCHEMA, as simulate_table takes it."""
        index = np.arange(start, stop) if self.kept is None else self.kept[start:stop]
        return configurations(self.values, index, self.profile)

    def check_memory(self, limits: list[tuple[int, int, str]],
                     threads: str = "--workers") -> None:
        """An InputError (memory.check_memory) if, for some (at_once, available, where) of
        `limits`, any `at_once` of the grid's configurations could need more than `available`
        bytes simulated together. The grid's corner bounds them all, so only a grid whose
        corner does not fit somewhere is walked point by point, once for every limit."""
        limits = [(min(n, self.size), available, where) for n, available, where in limits]
        at_corner = working_memory(corner(self.values, self.profile), self.profile).max()
        if all(at_corner * n <= available for n, available, _ in limits):
            return
        most = max(n for n, _, _ in limits)
        top = np.zeros(0, dtype=np.int64)
        largest: dict[str, Any] = {}
        for lo in range(0, self.size, CHUNK):
            points = self.frame(lo, min(lo + CHUNK, self.size))
            need = working_memory(columns(points), self.profile)
            i = int(need.argmax())
            if not top.size or need[i] > top[0]:
                largest = points.row(i, named=True)
            top = np.sort(np.concatenate([top, need]))[::-1][:most]
        for n, available, where in limits:
            check_memory(top[:n], largest, available, where, threads, str(self.path))

    @property
    def points(self) -> pl.DataFrame:
        """Every point at once: for small grids and tests (a sweep goes batch by batch)."""
        return self.frame(0, self.size)


def load_grid(path: str | Path, key: str = "GRID.toml", base_profile: str | None = None) -> Grid:
    """Read, check and expand a grid file; raises InputError naming the file and the key
    (`key` names the file itself: the argument or flag it came from). `base_profile` (the
    --profile flag: a built-in name or a file relative to the working directory) replaces the
    file's [sweep] profile as the base under its [profile] table."""
    if not str(path).strip():
        raise InputError(key, "is empty; give a grid file (TOML)")
    path = Path(path)
    source = str(path)
    try:
        text = path.read_text()
    except OSError as e:
        raise InputError(key, f"cannot read {path}: {e.strerror or e}") from None
    except UnicodeDecodeError:
        raise InputError(key, f"{path} is not a text file; a grid is TOML") from None
    try:
        doc = tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        raise InputError(key, f"not valid TOML: {e}", source) from None
    for table in doc:
        if table not in TABLES:
            raise InputError(table, f"unknown table; allowed: {', '.join(TABLES)}", source)
    sweep = _table(doc, "sweep", source)
    for key in sweep:
        if key not in SWEEP_KEYS:
            raise InputError(f"sweep.{key}", "unknown key; allowed: "
                             + "; ".join(f"{k} ({h})" for k, h in SWEEP_KEYS.items()), source)
    name = sweep.get("name")
    if not isinstance(name, str) or not name:
        raise InputError("sweep.name", f"expected a non-empty string ({SWEEP_KEYS['name']})",
                         source)
    out = sweep.get("out")
    if out is not None and (not isinstance(out, str) or not out):
        raise InputError("sweep.out", f"expected a directory name ({SWEEP_KEYS['out']})", source)
    spec = sweep.get("profile", "cm384")
    if not isinstance(spec, str):
        raise InputError("sweep.profile", f"expected a string ({SWEEP_KEYS['profile']})", source)
    spec_key = "sweep.profile"
    if base_profile is not None:
        # its own mistakes are the flag's, not the grid file's
        load_profile(base_profile, key="--profile")
        spec, spec_key = base_profile, "--profile"
    elif spec not in BUILTIN:
        spec = beside(source, spec, "sweep.profile")
    profile = load_profile(spec, _table(doc, "profile", source), source, key=spec_key)

    axes = _axes(doc, sweep, source)
    sizes = {label: len(next(iter(cols.values()))) for label, cols in axes}
    _check_size(sizes, source)
    filters = sweep.get("filter", [])
    filters = [filters] if isinstance(filters, str) else filters
    if not isinstance(filters, list) or not all(isinstance(f, str) for f in filters):
        raise InputError("sweep.filter", f"expected a string or a list of strings "
                         f"({SWEEP_KEYS['filter']})", source)
    filters = [compile_filter(f, source) for f in filters]
    values = [[pl.Series(name, v, polars_dtype(name)) for name, v in cols.items()]
              for _, cols in axes]
    product = math.prod(sizes.values())
    kept, filtered, fingerprint, unread = expand(values, profile, filters, product, source)
    return Grid(path, text, name, Path(out) if out else None, profile, sizes, product,
                filtered, fingerprint, unread, values, kept)


def shape(sizes: dict[str, int]) -> str:
    """The axes that vary, as the product they span: "5 batch x 7 seed"."""
    return " x ".join(f"{n:,} {label}" for label, n in sizes.items() if n > 1)


def _check_size(sizes: dict[str, int], source: str) -> None:
    """The product, from the axis lengths alone: refused before any of it is built."""
    product = math.prod(sizes.values())
    if product > MAX_POINTS:
        raise InputError("grid", f"{product:,} points ({shape(sizes)}); a grid holds at most "
                         f"{MAX_POINTS:,}: narrow an axis or split the grid into several files",
                         source)


def _table(doc: dict, name: str, source: str) -> dict:
    t = doc.get(name, {})
    if not isinstance(t, dict):
        raise InputError(name, "expected a table ([" + name + "])", source)
    return t


def _axes(doc: dict, sweep: dict, source: str) -> list[tuple[str, dict[str, list]]]:
    """The axes in expansion order: (label, {parameter: values}); one parameter per [grid] key,
    several per [[zip]] group, the seeds last."""
    grid = _table(doc, "grid", source)
    zips = doc.get("zip", [])
    if not isinstance(zips, list) or not all(isinstance(z, dict) for z in zips):
        raise InputError("zip", "expected tables [[zip]], each of parameter = list", source)
    axes: list[tuple[str, dict[str, list]]] = []
    owner: dict[str, str] = {}

    def claim(name: str, key: str) -> None:
        if name == "seed":
            raise InputError(key, "the seeds are the [sweep] seeds axis; set them there", source)
        if name not in PARAM_BY_NAME:
            allowed = ", ".join(n for n in NAMES if n != "seed")
            raise InputError(key, f"unknown parameter{renamed(name)}; allowed: {allowed} (the "
                             "seeds are the [sweep] seeds axis)", source)
        if name in owner:
            raise InputError(key, f"{name} is already an axis at {owner[name]}", source)
        owner[name] = key

    for name, spec in grid.items():
        key = f"grid.{name}"
        claim(name, key)
        values = _values(name, spec, key, source)
        _check_distinct([name], [(v,) for v in values], key, source)
        axes.append((name, {name: values}))
    for i, group in enumerate(zips):
        label = f"zip[{i}]"
        if len(group) < 2:
            raise InputError(label, "a zipped group needs two or more parameters", source)
        cols = {}
        for name, spec in group.items():
            key = f"{label}.{name}"
            claim(name, key)
            cols[name] = _values(name, spec, key, source, scalar=False)
        lengths = {n: len(v) for n, v in cols.items()}
        if len(set(lengths.values())) > 1:
            raise InputError(label, "zipped lists must have equal lengths; got "
                             + ", ".join(f"{n} {k}" for n, k in lengths.items()), source)
        _check_distinct(list(cols), list(zip(*cols.values())), label, source)
        axes.append(("+".join(cols), cols))
    seeds = _values("seed", sweep.get("seeds", [0]), "sweep.seeds", source)
    _check_distinct(["seed"], [(v,) for v in seeds], "sweep.seeds", source)
    axes.append(("seed", {"seed": seeds}))
    return axes


def _values(name: str, spec: Any, key: str, source: str, scalar: bool = True) -> list:
    """One parameter's values, each coerced to its type and checked against its bounds.

    A lone value is an axis of one point, except in a zipped group (`scalar` False).
    """
    forms = AXIS_FORMS if scalar else AXIS_FORMS.replace("a value, ", "")
    listed = (p := PARAM_BY_NAME.get(name)) is not None and p.kind is list
    if listed:
        # a list parameter's value is a list of integers or their text: a list of those is
        # an axis
        forms = ("a list of integers (or their text, \"256,0,64\"), or a list of such "
                 "lists: an axis")
        if isinstance(spec, list) and spec and all(isinstance(v, (list, str)) for v in spec):
            spec = [",".join(map(str, v)) if isinstance(v, list) else v for v in spec]
        elif isinstance(spec, (list, str)):
            spec = [",".join(map(str, spec)) if isinstance(spec, list) else spec]
    if isinstance(spec, dict) and not listed:
        values = _range(name, spec, key, source)
    elif isinstance(spec, list):
        values = spec
    elif scalar:
        values = [spec]
    else:
        raise InputError(key, f"expected {forms}", source)
    if not values:
        raise InputError(key, f"empty axis; expected {forms}", source)
    out = []
    for v in values:
        if isinstance(v, (list, dict)):
            raise InputError(key, f"expected {forms}; got a nested {type(v).__name__}", source)
        if isinstance(v, float) and v.is_integer() and PARAM_BY_NAME.get(name) is not None \
                and PARAM_BY_NAME[name].kind is int:   # as [profile] refuses cores = 40.0
            raise InputError(key, f"expected an integer, got {v!r}: TOML writes integers without "
                             f"a point ({int(v)})", source)
        try:
            v = coerce(name, v)
        except InputError as e:
            raise InputError(key, str(e).removeprefix(f"{name}: "), source) from None
        if name == "trace" and v:
            v = _trace_path(v, key, source)
        out.append(v.name if name in ENUMS else v)
    return out


def _trace_path(value: str, key: str, source: str) -> str:
    """A trace file named in a grid, which must exist."""
    path = Path(beside(source, value, key))
    if not path.is_file():
        raise InputError(key, f"no such file {path} (a grid's trace files are relative to the "
                         f"grid file)", source)
    return str(path)


def _check_distinct(names: list[str], points: list[tuple], key: str, source: str) -> None:
    """Every point of an axis (a tuple of the values of `names`) distinct. A trace counts by its
    content, as its config_id does: two copies of one file would be one configuration twice."""
    seen: dict[tuple, tuple] = {}
    for point in points:
        same = tuple(trace_digest(v) if n == "trace" and v else v for n, v in zip(names, point))
        first = seen.setdefault(same, point)
        if first is point:
            continue
        first, point = (repr(p[0] if len(p) == 1 else p) for p in (first, point))
        if first == point:
            raise InputError(key, f"{point} appears twice; each point must be distinct", source)
        raise InputError(key, f"{first} and {point} are one configuration (their traces hold "
                         f"the same routing); each point must be distinct", source)


def _range(name: str, spec: dict, key: str, source: str) -> list:
    """first, first + step, ... (or first, first * factor, ...) up to last, which the steps must
    land on: both ends are included, so a range that would stop short of last is refused."""
    r = _range_of(name, spec, key, source)
    steps = r.steps()   # before any value is built
    # counted as the values will be (a float count a hair above a whole number is that number)
    if math.floor(steps + 1e-9) + 1 > MAX_POINTS:
        count = f"{math.floor(steps) + 1:,}" if steps < 1e15 else "more than 10^15"
        raise InputError(key, f"{r.shown} has {count} values; a grid holds at most "
                         f"{MAX_POINTS:,} points: narrow the range or split the grid into "
                         f"several files", source)
    k = round(steps)
    if not (r.reach(k) == r.last if r.exact else math.isclose(
            r.reach(k), r.last, rel_tol=1e-9, abs_tol=0 if r.geometric else 1e-9 * r.stride)):
        k = math.floor(steps)
        word = "factor" if r.geometric else "step"
        raise InputError(key, f"{r.shown} with {word} {_show(r.stride)} ends at "
                         f"{_show(r.reach(k))}, not {_show(r.last)}: make last "
                         f"{_show(r.reach(k))}, or choose a {word} that reaches {_show(r.last)}",
                         source)
    values = [r.reach(i) for i in range(k + 1)]
    values[-1] = r.last  # the end as written, not its float approximation (0.30000000000000004)
    if (p := PARAM_BY_NAME.get(name)) is not None and p.kind is int:
        fraction = next((v for v in values if not float(v).is_integer()), None)
        if fraction is not None:
            raise InputError(key, f"an integer parameter needs integer values; {r.shown} with "
                             f"factor {_show(r.stride)} gives {_show(fraction)}", source)
        return [int(v) for v in values]
    return [round(float(v), 12) for v in values]


@dataclasses.dataclass(frozen=True)
class _Range:
    """first, first + stride, ... (first, first * stride, ... if geometric) up to last."""

    first: int | float
    last: int | float
    stride: int | float
    geometric: bool

    @property
    def exact(self) -> bool:
        return all(isinstance(v, int) for v in (self.first, self.last, self.stride))

    @property
    def shown(self) -> str:
        return f"range [{_show(self.first)}, {_show(self.last)}]"

    def reach(self, i: int) -> float:
        """The i-th value."""
        if not self.geometric:
            return self.first + self.stride * i
        try:
            return self.first * self.stride ** i
        except OverflowError:  # a float power past 1e308 raises, where a product gives inf
            return math.inf

    def steps(self) -> float:
        """The steps from first to last: integers exactly."""
        first, last, stride = self.first, self.last, self.stride
        if self.geometric and self.exact:   # a few dozen multiplications: integers only grow
            steps, v = 0, first
            while v * stride <= last:
                v *= stride
                steps += 1
            return steps
        if self.geometric:
            return (math.log(last) - math.log(first)) / math.log(stride)  # no last / first
        return (last - first) // stride if self.exact else (last - first) / stride


def _range_of(name: str, spec: dict, key: str, source: str) -> _Range:
    """A range's table checked: its form, its ends within the parameter's bounds and in order,
    its step or factor, integers for an integer parameter."""
    p = PARAM_BY_NAME.get(name)
    if p is not None and p.kind not in (int, float):
        raise InputError(key, f"a range needs a numeric parameter; {name} takes a list of "
                         f"{', '.join(p.choices or ['file names'])}", source)
    unknown = set(spec) - {"range", "step", "factor"}
    bounds = spec.get("range")
    if unknown or not (isinstance(bounds, list) and len(bounds) == 2 and all(
            is_number(b) for b in bounds)):
        raise InputError(key, "expected { range = [first, last] } with an optional step = s "
                         "or factor = f" + (f"; unknown key {sorted(unknown)[0]}" if unknown
                                              else ""), source)
    if "step" in spec and "factor" in spec:
        raise InputError(key, "give step or factor, not both", source)
    shown = _Range(*bounds, 1, False).shown
    for end in bounds if p is not None else ():  # before counting, which they could overflow
        if p.minimum is not None and end < p.minimum:
            raise InputError(key, f"{shown}: {_show(end)} is below the minimum "
                             f"{_show(p.minimum)}", source)
        if p.maximum is not None and end > p.maximum:
            raise InputError(key, f"{shown}: {_show(end)} is above the maximum "
                             f"{_show(p.maximum)}", source)
    r = _Range(*bounds, spec.get("factor", spec.get("step", 1)), "factor" in spec)
    if r.geometric and (not is_number(r.stride) or r.stride <= 1 or r.first <= 0):
        raise InputError(key, "factor must be a number above 1, and the range must start "
                         "above 0", source)
    if not r.geometric and (not is_number(r.stride) or r.stride <= 0):
        raise InputError(key, f"step must be a number above 0, got {r.stride!r}", source)
    if r.stride > sys.float_info.max:   # no range of values a float can hold takes such a step
        raise InputError(key, f"{'factor' if r.geometric else 'step'} {r.stride} is too large",
                         source)
    if p is not None and p.kind is int:
        # before counting, so that a fractional step is refused without building its values; a
        # fractional factor can still give integers (4, 6, 9), checked on the values
        ends = [r.first, r.last] + [r.stride] * (not r.geometric)
        if not all(isinstance(v, int) or v.is_integer() for v in ends):
            raise InputError(key, f"an integer parameter needs integer range ends and steps, "
                             f"got {spec!r}", source)
        if any(isinstance(v, float) for v in ends):   # as a value 16.0 is refused
            raise InputError(key, f"expected integers, got {spec!r}: TOML writes integers "
                             f"without a point", source)
        r = _Range(int(r.first), int(r.last), int(r.stride) if float(r.stride).is_integer()
                   else r.stride, r.geometric)
    if r.first > r.last:
        raise InputError(key, f"{shown}: first is above last; a range counts up from first to "
                         f"last: write [{_show(r.last)}, {_show(r.first)}]", source)
    return r


def _show(v: float) -> str:
    """A number in a message: integers exactly, 0.30000000000000004 as 0.3, 1e300 as 1e+300."""
    return str(v) if isinstance(v, int) else f"{v:.12g}"
