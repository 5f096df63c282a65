"""Sweep grids: a TOML file expanded into numbered, resolved configurations.

    [sweep]    name, out, seeds, filter, profile     what to run and where
    [grid]     parameter = value | [values] | { range = [first, last], step = s | factor = f }
    [[zip]]    parameters that move together: lists (or ranges) of equal length, one axis
    [profile]  hardware overrides on top of the base profile

The expansion is the cartesian product of the axes (file order, first axis slowest, the seeds
innermost), then the filter drops points, then points that differ from an earlier one only in a
parameter their protocol or routing does not read (`params.GATED`: that parameter is recorded at
its default) are dropped as the same configuration. Everything is checked before any work: each
value with `params.coerce`, the cross-parameter rules with `params.check_rules` over whole
columns of a chunk of points at a time, the kernel's time limit (`kernel_io.check_time_bound`) on
the grid's corner and, only if that fails, on every point, so a million-point grid expands and
validates in about a second. The points are then built on demand, a batch at a time, from the
axes and the kept indices. Every error is an InputError naming the grid file and the key.
"""

from __future__ import annotations

import ast
import dataclasses
import hashlib
import math
import operator
import sys
import tomllib
from pathlib import Path
from typing import Any, Callable

import numpy as np
import polars as pl

from .costs import lower, time_bound
from .errors import InputError
from .kernel_io import check_time_bound
from .kernels.dispatch import MAX_TIME
from .memory import check_memory, working_memory
from .params import (ENUMS, GATED, NAMES, PARAM_BY_NAME, PARAMS, canonical, check_rules, coerce,
                     polars_dtype, same_config, stable_id, trace_digest)
from .profile import BUILTIN, Profile, load_profile

TABLES = ("sweep", "grid", "zip", "profile")
SWEEP_KEYS = {
    "name": "the sweep's name (a string), recorded with the results",
    "out": "the output directory (a string); `--out DIR` overrides it",
    "seeds": "the replicate seeds: an integer, a list of integers or { range = [first, last] }",
    "filter": "an expression over parameter names that keeps a point, e.g. \"topk <= experts\" "
              "(or a list of them, all must hold)",
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
CHUNK = 1 << 18   # points built at a time while expanding (larger chunks measured slower)
INDEX = "__index"   # a point's index in the product, beside the parameters while filtering
GATES = (*GATED, *{gate for gate, _ in GATED.values()})   # what params.canonical reads


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
    values: list[list[pl.Series]] = dataclasses.field(repr=False)   # per axis, its columns
    kept: np.ndarray | None = dataclasses.field(repr=False)  # product index of each point
                                                              # (None: every point is kept)

    @property
    def size(self) -> int:
        return self.product if self.kept is None else len(self.kept)

    def frame(self, start: int, stop: int) -> pl.DataFrame:
        """Points [start, stop), resolved: one column per parameter, enums as pl.Enum."""
        index = np.arange(start, stop) if self.kept is None else self.kept[start:stop]
        return _configs(self.values, index, self.profile)

    def batch(self, start: int, stop: int) -> pl.DataFrame:
        """Points [start, stop) in the form simulate_table takes: enums as their names."""
        return self.frame(start, stop).with_columns(pl.col(n).cast(pl.String) for n in ENUMS)

    def check_memory(self, limits: list[tuple[int, int, str]],
                     threads: str = "--workers") -> None:
        """An InputError (memory.check_memory) if, for some (at_once, available, where) of
        `limits`, any `at_once` of the grid's configurations could need more than `available`
        bytes simulated together. The grid's corner bounds them all, so only a grid whose
        corner does not fit somewhere is walked point by point, once for every limit."""
        limits = [(min(n, self.size), available, where) for n, available, where in limits]
        corner = working_memory(_corner(self.values, self.profile)).max()
        if all(corner * n <= available for n, available, _ in limits):
            return
        most = max(n for n, _, _ in limits)
        top = np.zeros(0, dtype=np.int64)
        largest: dict[str, Any] = {}
        for lo in range(0, self.size, CHUNK):
            points = self.frame(lo, min(lo + CHUNK, self.size))
            need = working_memory(_columns(points, NAMES))
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
        spec = beside(source, spec)
    profile = load_profile(spec, _table(doc, "profile", source), source, key=spec_key)

    axes = _axes(doc, sweep, source)
    sizes = {label: len(next(iter(cols.values()))) for label, cols in axes}
    _check_size(sizes, source)
    filters = sweep.get("filter", [])
    filters = [filters] if isinstance(filters, str) else filters
    if not isinstance(filters, list) or not all(isinstance(f, str) for f in filters):
        raise InputError("sweep.filter", f"expected a string or a list of strings "
                         f"({SWEEP_KEYS['filter']})", source)
    filters = [filter_expr(f, source) for f in filters]
    values = [[pl.Series(name, v, polars_dtype(name)) for name, v in cols.items()]
              for _, cols in axes]
    product = math.prod(sizes.values())
    kept, filtered, fingerprint = _expand(values, profile, filters, product, source)
    return Grid(path, text, name, Path(out) if out else None, profile, sizes, product,
                filtered, fingerprint, values, kept)


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
            raise InputError(key, f"unknown parameter; allowed: {allowed} (the seeds are the "
                             "[sweep] seeds axis)", source)
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
    if isinstance(spec, dict):
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
                and PARAM_BY_NAME[name].kind is int:   # as [profile] refuses aivs = 40.0
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


def beside(source: str, value: str) -> str:
    """A file named in a grid (a trace, a profile) or in a measurement file: relative to that
    file, as an absolute path, so that the points (the rows' `trace`, the fingerprint a resume
    checks) do not depend on the directory the sweep was started from."""
    return str((Path(source).parent / value).resolve())


def _trace_path(value: str, key: str, source: str) -> str:
    """A trace file named in a grid, which must exist."""
    path = Path(beside(source, value))
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
    p = PARAM_BY_NAME.get(name)
    if p is not None and p.kind not in (int, float):
        raise InputError(key, f"a range needs a numeric parameter; {name} takes a list of "
                         f"{', '.join(p.choices or ['file names'])}", source)
    unknown = set(spec) - {"range", "step", "factor"}
    bounds = spec.get("range")
    if unknown or not (isinstance(bounds, list) and len(bounds) == 2 and all(
            _is_number(b) for b in bounds)):
        raise InputError(key, "expected { range = [first, last] } with an optional step = s "
                         "or factor = f" + (f"; unknown key {sorted(unknown)[0]}" if unknown
                                              else ""), source)
    if "step" in spec and "factor" in spec:
        raise InputError(key, "give step or factor, not both", source)
    first, last = bounds
    shown = f"range [{_show(first)}, {_show(last)}]"
    for end in bounds if p is not None else ():  # before counting, which they could overflow
        if p.minimum is not None and end < p.minimum:
            raise InputError(key, f"{shown}: {_show(end)} is below the minimum "
                             f"{_show(p.minimum)}", source)
        if p.maximum is not None and end > p.maximum:
            raise InputError(key, f"{shown}: {_show(end)} is above the maximum "
                             f"{_show(p.maximum)}", source)
    geometric = "factor" in spec
    stride = spec["factor"] if geometric else spec.get("step", 1)
    if geometric:
        if not _is_number(stride) or stride <= 1 or first <= 0:
            raise InputError(key, "factor must be a number above 1, and the range must start "
                             "above 0", source)
    elif not _is_number(stride) or stride <= 0:
        raise InputError(key, f"step must be a number above 0, got {stride!r}", source)
    if stride > sys.float_info.max:   # no range of values a float can hold takes such a step
        raise InputError(key, f"{'factor' if geometric else 'step'} {stride} is too large",
                         source)
    whole = p is not None and p.kind is int
    if whole:
        # before counting, so that a fractional step is refused without building its values; a
        # fractional factor can still give integers (4, 6, 9), checked on the values below
        ends = [first, last] + [stride] * (not geometric)
        if not all(isinstance(v, int) or v.is_integer() for v in ends):
            raise InputError(key, f"an integer parameter needs integer range ends and steps, "
                             f"got {spec!r}", source)
        if any(isinstance(v, float) for v in ends):   # as a value 16.0 is refused
            raise InputError(key, f"expected integers, got {spec!r}: TOML writes integers "
                             f"without a point", source)
        first, last = int(first), int(last)
        stride = int(stride) if float(stride).is_integer() else stride
    if first > last:
        raise InputError(key, f"{shown}: first is above last; a range counts up from first to "
                         f"last: write [{_show(last)}, {_show(first)}]", source)

    def reach(i: int) -> float:
        if not geometric:
            return first + stride * i
        try:
            return first * stride ** i
        except OverflowError:  # a float power past 1e308 raises, where a product gives inf
            return math.inf

    # the number of steps, computed before any value is built: integers exactly
    exact = all(isinstance(v, int) for v in (first, last, stride))
    if geometric and exact:   # a few dozen multiplications at most: integers only grow
        steps, v = 0, first
        while v * stride <= last:
            v *= stride
            steps += 1
    elif geometric:
        steps = (math.log(last) - math.log(first)) / math.log(stride)  # no last / first overflow
    else:
        steps = (last - first) // stride if exact else (last - first) / stride
    # counted as the values will be (a float count a hair above a whole number is that number)
    if math.floor(steps + 1e-9) + 1 > MAX_POINTS:
        count = f"{math.floor(steps) + 1:,}" if steps < 1e15 else "more than 10^15"
        raise InputError(key, f"{shown} has {count} values; a grid holds at most "
                         f"{MAX_POINTS:,} points: narrow the range or split the grid into "
                         f"several files", source)
    k = round(steps)
    if not (reach(k) == last if exact else math.isclose(
            reach(k), last, rel_tol=1e-9, abs_tol=0 if geometric else 1e-9 * stride)):
        k = math.floor(steps)
        word = "factor" if geometric else "step"
        raise InputError(key, f"{shown} with {word} {_show(stride)} ends at {_show(reach(k))}, "
                         f"not {_show(last)}: make last {_show(reach(k))}, or choose a {word} "
                         f"that reaches {_show(last)}", source)
    values = [reach(i) for i in range(k + 1)]
    values[-1] = last  # the end as written, not its float approximation (0.30000000000000004)
    if whole:
        fraction = next((v for v in values if not float(v).is_integer()), None)
        if fraction is not None:
            raise InputError(key, f"an integer parameter needs integer values; {shown} with "
                             f"factor {_show(stride)} gives {_show(fraction)}", source)
        return [int(v) for v in values]
    return [round(float(v), 12) for v in values]


def _show(v: float) -> str:
    """A number in a message: integers exactly, 0.30000000000000004 as 0.3, 1e300 as 1e+300."""
    return str(v) if isinstance(v, int) else f"{v:.12g}"


def _is_number(v: Any) -> bool:
    # an int is finite however large (math.isfinite would raise past the floats' range)
    return isinstance(v, (int, float)) and not isinstance(v, bool) and (
        isinstance(v, int) or math.isfinite(v))


def _expand(values: list[list[pl.Series]], profile: Profile, filters: list[pl.Expr],
            product: int, source: str) -> tuple[np.ndarray | None, int, str]:
    """One pass over the product, a chunk of points at a time: the filter (over the values as
    the grid gives them), each kept point checked against the model's rules, its config_id.
    Returns the product index of each point kept (None if all are), how many the filter kept,
    and the fingerprint. A point that differs from an earlier one only in parameters its
    protocol or routing does not read (params.GATED) is the same configuration and is dropped;
    two configurations with one config_id (a hash collision) are an InputError.
    Memory follows the points kept (8 bytes each, 16 with a filter, and 16 more while their
    config_ids are sorted), not the product."""
    # filled in place: pages past the points kept are never touched, so never resident
    ids = np.empty(product, dtype=np.int64)
    kept = np.empty(product, dtype=np.int64) if filters else None
    filtered = 0
    # every point's time bound (kernel_io.check_time_bound), only if the grid's corner fails it:
    # lowering every point's costs would take twice as long as the rest of the expansion
    slow = bool(np.any(time_bound(corner := _corner(values, profile),
                                  lower(corner, profile)[0]) >= MAX_TIME))
    for lo in range(0, product, CHUNK):
        index = np.arange(lo, min(lo + CHUNK, product))
        points = _build(values, index, profile)
        if filters:
            points = points.with_columns(pl.Series(INDEX, index))
            for expr in filters:
                points = points.filter(_keep(points, expr, source))
            kept[filtered:filtered + points.height] = points[INDEX].to_numpy()
            points = points.drop(INDEX)
        cols = canonical(_columns(points, NAMES))
        _check_points(cols, source)
        if slow:
            check_time_bound(cols, lower(cols, profile)[0], profile, source)
        ids[filtered:filtered + points.height] = stable_id(cols, NAMES)
        filtered += points.height
    if filtered == 0:
        raise InputError("sweep.filter", f"keeps none of the {product:,} points", source)
    ids = ids[:filtered]
    if kept is not None:
        kept = kept[:filtered]
    # Points of one config_id: one configuration, of which the first is kept, or else a hash
    # collision. Each point is checked against the one before it in config_id order, which
    # covers every group of them (sameness is transitive).
    order = np.argsort(ids, kind="stable")
    sorted_ids = ids[order]
    repeat = np.flatnonzero(sorted_ids[1:] == sorted_ids[:-1])
    del sorted_ids
    if len(repeat):
        earlier, later = order[repeat], order[repeat + 1]
        del order
        _check_repeats(values, profile, *(x if kept is None else kept[x] for x in (earlier, later)),
                       source)
        first = np.ones(filtered, dtype=bool)
        first[later] = False
        first = np.flatnonzero(first)
        ids = ids[first]
        kept = first if kept is None else kept[first]
    fingerprint = hashlib.sha256(profile.to_toml().encode())
    fingerprint.update(memoryview(ids))   # not ids.tobytes(): a copy of them all
    # rows record a trace's absolute path, which its config_id does not hold (it knows a trace
    # by its content): a moved grid must not resume a dataset whose rows name the old paths
    for path in sorted({p for axis in values for s in axis if s.name == "trace" for p in s}):
        fingerprint.update(path.encode() + b"\0")
    return kept, filtered, fingerprint.hexdigest()


def _corner(values: list[list[pl.Series]], profile: Profile) -> dict[str, np.ndarray]:
    """Columns no point of the grid has a larger time bound (costs.time_bound) or working
    memory (memory.working_memory) than, both growing with each size: ranks, batch, topk,
    hidden and aivs at their largest, experts per die at its largest (an experts axis over the
    fewest ranks), each combination of the dtypes, syncs and protocols the grid has."""
    axis = {s.name: s for cols in values for s in cols}
    defaults = {p.name: p.default for p in PARAMS} | {"aivs": profile.aivs}

    def largest(name: str) -> int:
        return int(axis[name].max()) if name in axis else defaults[name]

    ranks = largest("ranks")
    per_die = -(-int(axis["experts"].max()) // (int(axis["ranks"].min()) if "ranks" in axis
                                                else ranks)) if "experts" in axis else 1
    enums = [_codes(n, axis[n].unique()) if n in axis else
             np.array([ENUMS[n][defaults[n]].value]) for n in ("dtype", "sync", "protocol")]
    combos = np.array(np.meshgrid(*enums)).reshape(3, -1)
    n = combos.shape[1]
    cols = {name: np.full(n, largest(name), dtype=np.int64)
            for name in ("batch", "topk", "hidden", "aivs")}
    return cols | {"ranks": np.full(n, ranks), "experts": np.full(n, per_die * ranks),
                   "dtype": combos[0], "sync": combos[1], "protocol": combos[2]}


def _check_repeats(values: list[list[pl.Series]], profile: Profile, earlier: np.ndarray,
                   later: np.ndarray, source: str) -> None:
    """Points at product indices earlier[i] and later[i] share a config_id: unless they are one
    configuration (differing only in parameters their protocol or routing does not read), an
    InputError. Rows are keyed on config_id, so two configurations may never share one."""
    for lo in range(0, len(earlier), CHUNK):
        a, b = (_configs(values, x[lo:lo + CHUNK], profile) for x in (earlier, later))
        same = same_config(_columns(a, NAMES), _columns(b, NAMES), NAMES)
        if not same.all():
            i = int(np.argmin(same))
            ra, rb = a.row(i, named=True), b.row(i, named=True)
            differ = ", ".join(f"{n} = {ra[n]!r} and {rb[n]!r}" for n in NAMES if ra[n] != rb[n])
            config_id = stable_id(_columns(a.slice(i, 1), NAMES), NAMES)[0]
            raise InputError("config_id", f"two configurations of the grid ({differ}) have the "
                             f"same config_id, {config_id}: a collision of its 63-bit hash, which "
                             f"rows are keyed on; sweep them in separate grids", source)


def _keep(points: pl.DataFrame, expr: pl.Expr, source: str) -> pl.Series:
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


def _build(values: list[list[pl.Series]], index: np.ndarray, profile: Profile) -> pl.DataFrame:
    """The resolved points at product indices `index`: point i takes value (i // inner) % n of
    an axis of n values with `inner` points per value (the first axis varies slowest)."""
    sizes = [len(axis[0]) for axis in values]
    inners = [math.prod(sizes[i + 1:]) for i in range(len(sizes))]
    columns = [s.gather((index // inner) % n)
               for axis, n, inner in zip(values, sizes, inners) for s in axis]
    return _resolve(pl.DataFrame(columns, height=len(index)), profile)


def _configs(values: list[list[pl.Series]], index: np.ndarray, profile: Profile) -> pl.DataFrame:
    """The configurations at product indices `index`: the points, each parameter its protocol
    or routing does not read at its default (params.GATED)."""
    points = _build(values, index, profile)
    cols = canonical(_columns(points, GATES))
    return points.with_columns(pl.Series(n, cols[n], polars_dtype(n)) for n in GATED)


def _resolve(frame: pl.DataFrame, profile: Profile) -> pl.DataFrame:
    """A frame of every parameter: the axes, and defaults elsewhere (experts = ranks, aivs =
    the profile's)."""
    defaults = {p.name: p.default for p in PARAMS} | {"aivs": profile.aivs}
    frame = frame.with_columns(pl.lit(defaults[name], polars_dtype(name)).alias(name)
                               for name in NAMES if name not in frame.columns
                               and name != "experts")
    if "experts" not in frame.columns:
        frame = frame.with_columns(experts=pl.col("ranks"))
    return frame.select(NAMES)


def _codes(name: str, col: pl.Series) -> np.ndarray:
    """A column as numpy; enum names as the IntEnum codes the kernels and check_rules use."""
    if name in ENUMS:
        values = np.array([ENUMS[name][c].value for c in col.dtype.categories], dtype=np.int64)
        return values[col.to_physical().to_numpy()]
    return col.to_numpy()


def _columns(points: pl.DataFrame, names) -> dict[str, np.ndarray]:
    """Columns of a frame of points as numpy, enums as their codes."""
    return {name: _codes(name, points[name]) for name in names}


def _check_points(cols: dict[str, np.ndarray], source: str) -> None:
    if len(cols["ranks"]) == 0:
        return
    try:
        check_rules(cols, source)
    except InputError as e:
        raise InputError(e.key, str(e).removeprefix(f"{source}: {e.key}: ")
                         + "; drop such points with a [sweep] filter", source) from None


# --- filters: a small expression language turned into a polars expression, never eval'd -------

# A filter is undefined at a point where it divides by zero or takes a power with no real value
# (Python would raise): such a term is null there, and a point the rest of the filter does not
# decide without it (False and ..., True or ...) is refused with the point.

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
        if not (isinstance(node, ast.Constant) and (_is_number(node.value) or
                                                    isinstance(node.value, str))):
            raise fail(f"unexpected {ast.unparse(node)!r}")
        value, p = node.value, PARAM_BY_NAME.get(param)
        if p is not None and p.choices is not None:
            if value not in p.choices:
                raise fail(f"{value!r} is not a {param}; choose one of {', '.join(p.choices)}")
        elif p is not None and p.kind in (int, float) and not _is_number(value):
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
            return node.value if _is_number(node.value) else None
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
            if not _is_number(v):   # a complex root, an infinite float
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
