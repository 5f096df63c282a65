"""A grid's expansion: its axes into points, checked, deduplicated and fingerprinted.

The expansion is the cartesian product of the axes (file order, first axis slowest, the seeds
innermost), then the filter drops points, then points that differ from an earlier one only in a
parameter their protocol, routing or op does not read (`params.GATED`: that parameter is recorded at
its default) are dropped as the same configuration. Everything is checked before any work: the
cross-parameter rules with `params.check_rules` over whole columns of a chunk of points at a time,
the kernel's time limit (`kernel_io.check_time_bound`) on the grid's corner and, only if that fails,
on every point, so a million-point grid expands and validates in about a second. The points are then
built on demand, a batch at a time, from the axes and the kept indices.
"""

from __future__ import annotations

import hashlib
import math

import numpy as np
import polars as pl

from ..model.costs import lower, time_bound
from ..errors import InputError
from .filters import Filter
from ..model.kernel_io import check_machine, check_time_bound
from ..kernels.layout import MAX_TIME
from ..model.params import (ENUMS, GATED, NAMES, PARAMS, canonical, check_rules, columns, default_cores,
                     default_sync, frame_default, polars_dtype, same_config, series,
                     stable_id)
from ..model.profile import Profile

CHUNK = 1 << 18   # points built at a time while expanding (larger chunks measured slower)
INDEX = "__index"   # a point's index in the product, beside the parameters while filtering
GATES = tuple(dict.fromkeys((*GATED, *(g for gate in GATED.values() for g in gate.gates))))
# (what params.canonical reads)


def expand(values: list[list[pl.Series]], profile: Profile, filters: list[Filter],
           product: int, source: str) -> tuple[np.ndarray | None, int, str, tuple[str, ...]]:
    """One pass over the product, a chunk of points at a time: the filter (over the values as
    the grid gives them), each kept point checked against the model's rules, its config_id.
    Returns the product index of each point kept (None if all are), how many the filter kept,
    the fingerprint, and the parameters in which dropped points differ from those kept. A
    point that differs from an earlier one only in parameters its protocol, routing or op does
    not read (params.GATED) is the same configuration and is dropped; two configurations with
    one config_id (a hash collision) are an InputError.
    Memory follows the points kept (8 bytes each, 16 with a filter, and 16 more while their
    config_ids are sorted), not the product."""
    # filled in place: pages past the points kept are never touched, so never resident
    ids = np.empty(product, dtype=np.int64)
    kept = np.empty(product, dtype=np.int64) if filters else None
    filtered = 0
    # every point's time bound (kernel_io.check_time_bound), only if the grid's corner fails it:
    # lowering every point's costs would take twice as long as the rest of the expansion
    slow = bool(np.any(time_bound(largest := corner(values, profile),
                                  lower(largest, profile)[0]) >= MAX_TIME))
    for lo in range(0, product, CHUNK):
        index = np.arange(lo, min(lo + CHUNK, product))
        points = _build(values, index, profile)
        if filters:
            points = points.with_columns(pl.Series(INDEX, index))
            for flt in filters:
                points = points.filter(flt.keeps(points))
            kept[filtered:filtered + points.height] = points[INDEX].to_numpy()
            points = points.drop(INDEX)
        cols = canonical(columns(points))
        _check_points(cols, source)
        check_machine(cols, profile, source)
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
    unread: tuple[str, ...] = ()
    if len(repeat):
        earlier, later = order[repeat], order[repeat + 1]
        del order
        unread = _check_repeats(values, profile, *(x if kept is None else kept[x]
                                                   for x in (earlier, later)), source)
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
    return kept, filtered, fingerprint.hexdigest(), unread


def corner(values: list[list[pl.Series]], profile: Profile) -> dict[str, np.ndarray]:
    """Columns no point of the grid has a larger time bound (costs.time_bound) or working
    memory (memory.working_memory) than, both growing with each size: ranks, batch, topk,
    hidden and cores at their largest, experts per die at its largest (an experts axis over the
    fewest ranks), each combination of the dtypes, syncs, protocols, ops and combine dtypes the
    grid has, the expert times at their largest, and the most tokens a die holds
    (workload.batch_max) bounded by every die's tokens where batches may spread (a spread, or
    a trace, which carries its own)."""
    axis = {s.name: s for cols in values for s in cols}
    defaults = _defaults(profile)

    def largest(name: str) -> int:
        return int(axis[name].max()) if name in axis else defaults[name]

    ranks = largest("ranks")
    per_die = -(-int(axis["experts"].max()) // (int(axis["ranks"].min()) if "ranks" in axis
                                                else ranks)) if "experts" in axis else 1
    # the most cores a point defaults to: the profile's, or a protocol's at the most experts
    protocols = columns((axis["protocol"] if "protocol" in axis else pl.Series(
        "protocol", [defaults["protocol"]])).unique().to_frame(), ("protocol",))["protocol"]
    defaults["cores"] = int(default_cores(protocols, per_die * ranks, profile.cores).max())
    names = ("dtype", "sync", "protocol", "op", "combine_dtype")
    enums = [columns(axis[n].unique().to_frame(), (n,))[n] if n in axis else
             np.array([ENUMS[n][defaults[n]].value]) for n in names]
    combos = np.array(np.meshgrid(*enums)).reshape(len(names), -1)
    n = combos.shape[1]
    cols = {name: np.full(n, largest(name), dtype=np.int64)
            for name in ("batch", "topk", "hidden", "cores")}
    floats = {name: np.full(n, float(axis[name].max()) if name in axis else defaults[name])
              for name in ("expert_fixed_us", "expert_ns_per_copy")}
    def holds(name, value):
        return name in axis and (axis[name].cast(pl.String) == value).any()

    spread = holds("routing", "trace") or (
        "batch_spread" in axis and not (axis["batch_spread"].cast(pl.String) == "equal").all())
    most = cols["batch"] * (ranks if spread else 1)
    return cols | floats | {"ranks": np.full(n, ranks), "experts": np.full(n, per_die * ranks),
                            "batch_max": most} | dict(zip(names, combos))


def _check_repeats(values: list[list[pl.Series]], profile: Profile, earlier: np.ndarray,
                   later: np.ndarray, source: str) -> tuple[str, ...]:
    """Points at product indices earlier[i] and later[i] share a config_id: unless they are one
    configuration (differing only in parameters their protocol, routing or op does not read),
    an InputError. Rows are keyed on config_id, so two configurations may never share one.
    Returns the parameters in which such points differ, in NAMES order."""
    unread: set[str] = set()
    for lo in range(0, len(earlier), CHUNK):
        raw = [_build(values, x[lo:lo + CHUNK], profile) for x in (earlier, later)]
        a, b = (_canonical(r) for r in raw)
        same = same_config(columns(a), columns(b), NAMES)
        if not same.all():
            i = int(np.argmin(same))
            ra, rb = a.row(i, named=True), b.row(i, named=True)
            differ = ", ".join(f"{n} = {ra[n]!r} and {rb[n]!r}" for n in NAMES if ra[n] != rb[n])
            config_id = stable_id(columns(a.slice(i, 1)), NAMES)[0]
            raise InputError("config_id", f"two configurations of the grid ({differ}) have the "
                             f"same config_id, {config_id}: a collision of its 63-bit hash, which "
                             f"rows are keyed on; sweep them in separate grids", source)
        unread |= {n for n in GATED if not raw[0][n].equals(raw[1][n])}
    return tuple(n for n in NAMES if n in unread)


def _build(values: list[list[pl.Series]], index: np.ndarray, profile: Profile) -> pl.DataFrame:
    """The resolved points at product indices `index`: point i takes value (i // inner) % n of
    an axis of n values with `inner` points per value (the first axis varies slowest)."""
    sizes = [len(axis[0]) for axis in values]
    inners = [math.prod(sizes[i + 1:]) for i in range(len(sizes))]
    columns = [s.gather((index // inner) % n)
               for axis, n, inner in zip(values, sizes, inners) for s in axis]
    return _resolve(pl.DataFrame(columns, height=len(index)), profile)


def configurations(values: list[list[pl.Series]], index: np.ndarray,
                   profile: Profile) -> pl.DataFrame:
    """The configurations at product indices `index` (a frame of params.SCHEMA)."""
    return _canonical(_build(values, index, profile))


def _canonical(points: pl.DataFrame) -> pl.DataFrame:
    """Points made configurations, where a grid's points enter the sweep path: each parameter
    its protocol, routing or op does not read at its default (params.GATED)."""
    cols = canonical(columns(points, GATES))
    return points.with_columns(series(n, cols[n]) for n in GATED)


def _resolve(frame: pl.DataFrame, profile: Profile) -> pl.DataFrame:
    """A frame of every parameter: the axes, and defaults elsewhere (experts = ranks, cores =
    params.default_cores: the profile's, or its protocol's; sync = params.default_sync)."""
    defaults = _defaults(profile)
    frame = frame.with_columns(pl.lit(defaults[name], polars_dtype(name)).alias(name)
                               for name in NAMES if name not in frame.columns
                               and name not in ("experts", "cores"))
    if "experts" not in frame.columns:
        frame = frame.with_columns(experts=pl.col("ranks"))
    if "cores" not in frame.columns:
        protocol = columns(frame.select("protocol"), ("protocol",))["protocol"]
        frame = frame.with_columns(pl.Series("cores", default_cores(
            protocol, frame["experts"].to_numpy(), profile.cores), polars_dtype("cores")))
    return frame.select(NAMES)


def _defaults(profile: Profile) -> dict[str, object]:
    """Each parameter's default on `profile`, where a grid has no axis of it (experts and
    cores aside: they follow other parameters)."""
    return {p.name: frame_default(p.name) for p in PARAMS} | {"sync": default_sync(profile)}


def _check_points(cols: dict[str, np.ndarray], source: str) -> None:
    if len(cols["ranks"]) == 0:
        return
    try:
        check_rules(cols, source)
    except InputError as e:
        raise InputError(e.key, str(e).removeprefix(f"{source}: {e.key}: ")
                         + "; drop such points with a [sweep] filter", source) from None
