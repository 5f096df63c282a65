"""Public entry points of the model: one configuration, or many.

    simulate(config, profile) -> dict            one configuration (results + parameters)
    simulate_many(configs, profile) -> frame     many, each checked, through the parallel kernel
    simulate_table(points, profile) -> frame     many, already resolved (the sweep engine's)

A configuration is a Config or a dict of parameters (the others at their defaults, as in
`ubepsim run`); `points` is a polars DataFrame with one column per parameter
(ubepsim.params.NAMES), values resolved (experts and aivs filled in, enums as their names). The
result frame has the same rows in the same order: every parameter, `config_id`, then every
field of ubepsim.results: a sweep's rows (whose Parquet gives the enums back as strings). A row
depends only on its own parameters (never on the rest of the batch or on threads).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl

from .costs import lower, time_bound
from .errors import InputError
from .kernels import dispatch
from .kernels import layout as k
from .params import (ENUMS, GATED, NAMES, PARAMS, Config, Protocol, Routing, canonical,
                     codes, make_config, polars_dtype, stable_id, workload_keys)
from .profile import HOP_CLASSES, Profile, load_profile
from .results import RESULT_NAMES, RESULTS
from .workload import expert_cdf, read_trace

# Kernel output columns, in the order of RESULTS where they are cycles or counts.
_CYCLE_FIELDS = {
    "latency_us": k.O_LATENCY, "latency_mean_us": k.O_LATENCY_MEAN,
    "send_max_aiv_us": k.O_SEND_MAX, "send_mean_aiv_us": k.O_SEND_MEAN,
    "send_spread_aiv_us": k.O_SEND_SPREAD, "wait_us": k.O_WAIT,
    "phase_init_us": k.O_PH_INIT, "phase_send_us": k.O_PH_SEND, "phase_sync_us": k.O_PH_SYNC,
    "phase_cumsum_us": k.O_PH_CUMSUM, "phase_reorder_us": k.O_PH_REORDER,
}
_COUNT_FIELDS = {
    "copies_total": k.O_COPIES_TOTAL, "qsearch_steps": k.O_QSTEPS,
    "sentinel_collisions": k.O_COLLISIONS,
    **{f"copies_{h}": k.O_COPIES_HOP0 + i for i, h in enumerate(HOP_CLASSES)},
}
# Timeline phases per AIV role, in the order of their boundaries (kernels/layout.py MARK_*).
# One name per piece of work whichever protocol does it: bsp's SendFlag & Count and flag
# verification are the same count_send and count_poll as UBEP's CalCumSum group's.
TIMELINE_PHASES = {
    "bsp": ("init", "send", "syncall", "count_send", "count_poll", "syncall", "cumsum",
            "syncall", "reorder"),
    "cumsum": ("init", "count_send", "count_poll"),
    "token": ("init", "send", "offset_poll", "reorder"),
}
# Bytes per row of a timeline frame: two int32, two float64 and two short strings (16-byte
# views). bench/bench_memory.py --timeline measures the whole timeline below it.
TIMELINE_ROW_BYTES = 56


def _codes(cols: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Enum columns (names, members or codes) as integer codes."""
    return {**cols, **{name: codes(name, cols[name]) for name in ENUMS}}


def prepare(cols: dict[str, np.ndarray], profile: Profile):
    """Kernel inputs for resolved parameter columns: (params, costs, chances, cdf, trace)."""
    cols = canonical(cols)
    coded = _codes(cols)
    n = len(coded["ranks"])
    params = np.zeros((n, k.N_PARAMS), dtype=np.int64)
    for col, name in ((k.P_RANKS, "ranks"), (k.P_BATCH, "batch"), (k.P_TOPK, "topk"),
                      (k.P_EXPERTS, "experts"), (k.P_AIVS, "aivs"), (k.P_CUMSUM, "cumsum_aivs"),
                      (k.P_PROTOCOL, "protocol"), (k.P_SYNC, "sync"), (k.P_SCHEDULE, "schedule"),
                      (k.P_ROUTING, "routing"), (k.P_SEED, "seed")):
        params[:, col] = np.asarray(coded[name], dtype=np.int64)
    wkeys = workload_keys(cols)
    params[:, k.P_WKEY] = wkeys
    costs, chances = lower(coded, profile)
    check_time_bound(coded, costs, profile)
    # Popularity weights and traces are shared by every row of the same workload.
    cdf_parts, trace_parts = [np.zeros(0)], [np.zeros(0, dtype=np.int64)]
    cdf_at: dict[tuple, tuple[int, int]] = {}
    trace_at: dict[tuple, int] = {}
    cdf_end, trace_end = 0, 0
    routing = coded["routing"]
    for i in np.flatnonzero(routing != Routing.uniform):
        if routing[i] == Routing.trace:
            tkey = (str(cols["trace"][i]), *(int(coded[x][i]) for x in
                                             ("ranks", "batch", "topk", "experts")))
            if tkey not in trace_at:
                trace_at[tkey] = trace_end
                arr = read_trace(*tkey).ravel()
                trace_parts.append(arr)
                trace_end += len(arr)
            params[i, k.P_TRACE] = trace_at[tkey]
            continue
        ckey = (int(routing[i]), int(coded["experts"][i]), float(coded["zipf_s"][i]),
                int(coded["hot_experts"][i]), float(coded["hot_share"][i]),
                int(coded["seed"][i]), int(wkeys[i]))
        if ckey not in cdf_at:
            cdf = expert_cdf(*ckey)
            cdf_at[ckey] = (cdf_end, len(cdf))
            cdf_parts.append(cdf)
            cdf_end += len(cdf)
        params[i, k.P_CDF_START], params[i, k.P_CDF_LEN] = cdf_at[ckey]
    return (params, costs, chances, np.concatenate(cdf_parts),
            np.concatenate(trace_parts).astype(np.int64))


def working_memory(cols: dict[str, np.ndarray]) -> np.ndarray:
    """Bytes the kernel works in while it simulates each configuration of resolved columns
    (enums as names, members or codes): kernels.dispatch.working_bytes."""
    return dispatch.working_bytes(cols["ranks"], cols["batch"], cols["topk"], cols["experts"],
                                  cols["aivs"],
                                  codes("protocol", cols["protocol"]) == Protocol.ubep,
                                  codes("sync", cols["sync"]))


# A container's or batch job's memory: per cgroup version (v2, then v1's memory hierarchy),
# where Linux mounts it, the controller /proc/self/cgroup names it by, and each cgroup's limit
# and usage files and the reclaimable page cache in its memory.stat.
CGROUPS = (("/sys/fs/cgroup", "", "memory.max", "memory.current", "inactive_file"),
           ("/sys/fs/cgroup/memory", "memory", "memory.limit_in_bytes", "memory.usage_in_bytes",
            "total_inactive_file"))
PROC_CGROUP = Path("/proc/self/cgroup")


def available_memory() -> int:
    """Bytes this process can take now without swapping: the machine's available memory
    (psutil's, what free(1) calls available), and no more than the memory limits of its
    container or batch job leave: those of its cgroup and of each cgroup above it, less their
    usage, not counting the page cache the kernel reclaims first (inactive files)."""
    import psutil

    available = psutil.virtual_memory().available
    try:
        lines = PROC_CGROUP.read_text().splitlines()
    except OSError:
        return available                # not Linux
    where = {}                          # controller -> this process's cgroup
    for line in lines:                  # ID:CONTROLLERS:PATH, v2's controllers empty
        _, controllers, path = line.split(":", 2)
        where.update((c, path) for c in controllers.split(","))
    for mount, controller, limit, usage, inactive in CGROUPS:
        if controller not in where:
            continue
        group = Path(mount + where[controller])
        for cgroup in (group, *group.parents[:len(group.relative_to(mount).parts)]):
            try:
                left = int((cgroup / limit).read_text()) - int((cgroup / usage).read_text())
                stat = (cgroup / "memory.stat").read_text().split()
            except (OSError, ValueError):   # not mounted there, or no limit ("max")
                continue
            cache = dict(zip(stat[::2], stat[1::2])).get(inactive, "0")
            available = min(available, max(0, left + int(cache)))
    return available


def check_memory(top: np.ndarray, largest: Mapping[str, Any], available: int,
                 where: str = "this process", threads: str = "threads",
                 source: str | None = None) -> None:
    """An InputError, before any work, if the configurations simulated at once could need
    more than `available` bytes. `top`: the working memory of as many configurations as run
    at once, the largest first; `largest`: the parameters of that one; `threads`: the key
    that sets how many run at once."""
    top = np.asarray(top, dtype=np.int64)
    if top.sum() <= available:
        return
    shown = ", ".join(f"{n} = {largest[n]}" for n in ("ranks", "batch", "topk", "protocol",
                                                      "sync"))
    if top[0] > available:
        # ranks: the count messages grow with its square, the token copies with it
        raise InputError("ranks", f"{shown} needs about {_gib(top[0])} of memory to simulate, "
                         f"more than the {_gib(available)} available to {where}; lower ranks "
                         f"or batch x topk" + ("; drop such points with a [sweep] filter"
                                                if source else ""), source)
    fit = int(np.searchsorted(np.cumsum(top), available, side="right"))
    raise InputError(threads, f"{len(top)} configurations simulated at once could need "
                     f"{_gib(top.sum())} of memory ({shown}: {_gib(top[0])} alone), more than "
                     f"the {_gib(available)} available to {where}; at most {fit} fit at once")


def _gib(n: float) -> str:
    return f"{n / (1 << 30):.1f} GiB" if n >= 1 << 30 else f"{n / (1 << 20):.1f} MiB"


def check_time_bound(cols: dict[str, np.ndarray], costs: np.ndarray, profile: Profile,
                     source: str | None = None) -> None:
    """An InputError for the first configuration (columns resolved, enums as codes; `costs`
    lowered from them) whose times could reach the kernel's MAX_TIME: the egress queue packs a
    time with an AIV in one 64-bit key. Only a profile far slower than any fabric's meets it."""
    over = time_bound(cols, costs) >= k.MAX_TIME
    if over.any():
        i = int(np.flatnonzero(over)[0])
        point = ", ".join(f"{n} = {int(cols[n][i])}" for n in ("ranks", "batch", "topk",
                                                                 "experts", "hidden", "aivs"))
        days = k.MAX_TIME / (profile.clock_ghz * 1e9 * 86400)
        raise InputError("profile", f"at {point}, simulated times could reach 2^"
                         f"{k.MAX_TIME.bit_length() - 1} cycles ({days:.1f} days at clock_ghz "
                         f"{profile.clock_ghz:g}), more than the model's 64-bit event keys "
                         f"hold; its bandwidths, latencies and cycle costs are too slow for a "
                         f"configuration this large", source)


class KernelFailure(RuntimeError):
    """A row the kernel did not finish, or one that breaks an invariant: a bug of the model, or
    an error Numba did not report (out of memory?). `row` is its index in the batch."""

    def __init__(self, row: int, message: str):
        super().__init__(message)
        self.row = row

    def __reduce__(self):   # as a Dask worker sends it back: pickled with its row
        return KernelFailure, (self.row, str(self))


def results_from_kernel(out: np.ndarray, cols: dict[str, np.ndarray], costs: np.ndarray,
                        profile: Profile) -> dict[str, np.ndarray]:
    """Result columns from kernel rows, after checking the invariants every row must hold."""
    # the copies a row must account for, from its parameters rather than from the row: Numba
    # does not report an exception raised on a worker thread of the parallel loop, and the row
    # it left unfinished would otherwise pass (all zero)
    copies = (np.asarray(cols["ranks"], dtype=np.int64) * np.asarray(cols["batch"], dtype=np.int64)
              * np.asarray(cols["topk"], dtype=np.int64))
    bad = (out[:, k.O_COPIES_TOTAL] != copies) | (out[:, k.O_SENT] != copies) | \
        (out[:, k.O_DELIVERED] != copies) | (out[:, k.O_VIOLATIONS] != 0) | \
        (out[:, k.O_LATENCY] < out[:, k.O_BOUND])
    if bad.any():
        i = int(np.flatnonzero(bad)[0])
        if out[i, k.O_COPIES_TOTAL] != copies[i]:   # written once the configuration is done
            raise KernelFailure(i, f"the kernel did not finish row {i}: an error on a worker "
                                f"thread, which Numba does not report (out of memory?); "
                                f"`ubepsim run` with its parameters shows it")
        raise KernelFailure(i, f"model invariant violated ({out[i, k.O_SENT]:.0f} of "
                            f"{copies[i]} copies sent, {out[i, k.O_DELIVERED]:.0f} delivered "
                            f"once, {out[i, k.O_VIOLATIONS]:.0f} read before visible, latency "
                            f"{out[i, k.O_LATENCY]:.0f} cycles against a bound of "
                            f"{out[i, k.O_BOUND]:.0f}) at row {i}")
    clock = profile.values["clock_ghz"] * 1000.0   # cycles per microsecond
    res: dict[str, np.ndarray] = {}
    for name, col in _CYCLE_FIELDS.items():
        res[name] = out[:, col] / clock
    for name, col in _COUNT_FIELDS.items():
        res[name] = out[:, col].astype(np.int64)
    token_bytes = costs[:, k.C_TOKEN_BYTES]
    res["bytes_per_rank"] = (np.asarray(cols["batch"], dtype=np.int64)
                             * np.asarray(cols["topk"], dtype=np.int64) * token_bytes)
    res["bw_gbps"] = res["bytes_per_rank"] / (res["latency_us"] * 1000.0)
    return {name: res[name] for name in RESULT_NAMES}


def _keep_freed_memory() -> None:
    """Ask glibc to keep freed memory instead of returning it to the kernel.

    Each configuration allocates tens of MB of scratch arrays; with glibc's defaults they are
    mmap'd and unmapped every time and the page faults cost ~15% of a simulation.
    """
    global _MALLOC_TUNED
    if _MALLOC_TUNED:
        return
    _MALLOC_TUNED = True
    try:
        import ctypes
        libc = ctypes.CDLL("libc.so.6")
        libc.mallopt(-1, 1 << 30)   # M_TRIM_THRESHOLD
        libc.mallopt(-3, 1 << 30)   # M_MMAP_THRESHOLD
    except (OSError, AttributeError):
        pass                        # not glibc: slower, same results


_MALLOC_TUNED = False


def simulate_columns(cols: dict[str, np.ndarray], profile: Profile, threads: int | None = None,
                     memory_checked: bool = False) -> dict[str, np.ndarray]:
    """Result columns for resolved parameter columns, through the parallel batch kernel.
    Refuses (InputError) configurations that could not fit in memory together, unless the
    caller has checked that already (a sweep, once for its whole grid)."""
    import numba

    if threads is not None:
        numba.set_num_threads(max(1, min(threads, numba.config.NUMBA_NUM_THREADS)))
    if not memory_checked and len(cols["ranks"]):
        need = working_memory(cols)
        top = np.argsort(need)[::-1][:numba.get_num_threads()]   # at most one per thread
        check_memory(need[top], {n: np.asarray(cols[n])[top[0]] for n in NAMES},
                     available_memory())
    _keep_freed_memory()
    params, costs, chances, cdf, trace = prepare(cols, profile)
    order = kernel_order(params)
    done = np.zeros((len(params), k.N_OUT))
    dispatch.simulate_batch(params[order], costs[order], chances[order], cdf, trace, done)
    out = np.empty_like(done)
    out[order] = done
    return results_from_kernel(out, cols, costs, profile)


def kernel_order(params: np.ndarray) -> np.ndarray:
    """The order in which the batch kernel takes rows: a configuration's sync variants side
    by side, where they share one schedule (kernels.dispatch.simulate_batch), and those runs
    in a fixed shuffled order. The kernel gives each thread one contiguous block of runs, and
    in the order given the large configurations may come together (a sweep's grid order, fig14:
    1.2x on 2 threads); shuffled, the blocks cost about the same. Each row depends only on its
    own inputs, so the order changes no result."""
    _, run = np.unique(np.delete(params, k.P_SYNC, axis=1), axis=0, return_inverse=True)
    run = run.ravel()
    shuffled = np.random.default_rng(len(params)).permutation(run.max() + 1 if run.size else 0)
    return np.argsort(shuffled[run], kind="stable")


def simulate_table(points: pl.DataFrame, profile: Profile, threads: int | None = None,
                   memory_checked: bool = False) -> pl.DataFrame:
    """Every parameter, config_id and every result for each row of `points` (same order).
    GATED parameters their protocol or routing does not read are given at their defaults."""
    cols = canonical({name: points[name].to_numpy() for name in NAMES})
    try:
        res = simulate_columns(cols, profile, threads, memory_checked)
    except KernelFailure as e:   # a row's place in a sweep's batch tells its user nothing
        point = points.row(e.row, named=True)
        given = ", ".join(f"{n} = {point[n]}" for n in NAMES if point[n] not in (None, ""))
        raise KernelFailure(e.row, f"{e}; its configuration: {given}") from None
    frame = points.select(NAMES).with_columns(
        *(pl.Series(name, cols[name], dtype=points[name].dtype) for name in GATED),
        pl.Series("config_id", stable_id(cols, NAMES), dtype=pl.Int64))
    return frame.with_columns([pl.Series(f.name, res[f.name],
                                         dtype=pl.Float64 if f.dtype == "f8" else pl.Int64)
                               for f in RESULTS])


def _profile(profile: Profile | str | Path | None) -> Profile:
    """A Profile as given, else the built-in or file one it names (cm384 if None)."""
    return profile if isinstance(profile, Profile) else load_profile(profile or "cm384")


def _config(config: Config | Mapping[str, Any], profile: Profile, name: str) -> Config:
    """A Config as given, or one made (and checked) from a dict of parameters."""
    if isinstance(config, Config):
        return config
    if not isinstance(config, Mapping):
        raise InputError(name, f"expected a dict of parameters or a ubepsim.Config, got "
                         f"{type(config).__name__}")
    return make_config(dict(config), profile.aivs, name)


def simulate_many(configs: Iterable[Config | Mapping[str, Any]] | pl.DataFrame,
                  profile: Profile | str | Path | None = None,
                  threads: int | None = None) -> pl.DataFrame:
    """Many configurations through the parallel kernel: a frame of one row per configuration,
    in order, with every parameter, config_id and every result.

    `configs` holds Configs or dicts of parameters, or is a polars DataFrame whose columns are
    parameters (a null is the default). Each is checked as `ubepsim run` checks its flags; the
    first bad one raises an InputError naming it (configs[i]) and the parameter.
    """
    profile = _profile(profile)
    if isinstance(configs, pl.DataFrame):
        configs = configs.iter_rows(named=True)
    rows = [_config(c, profile, f"configs[{i}]").as_dict() for i, c in enumerate(configs)]
    points = pl.DataFrame(rows, schema={n: polars_dtype(n) for n in NAMES})
    return simulate_table(points, profile, threads)


def simulate(config: Config | Mapping[str, Any], profile: Profile | str | Path | None = None,
             timeline: bool = False) -> dict:
    """One configuration (a Config, or a dict of parameters, the others at their defaults): a
    dict of every parameter, config_id and every result.

    With timeline=True, the key "timeline" holds a polars DataFrame with one row per
    (die, AIV, phase): die, aiv, role, phase, start_us, end_us.
    """
    profile = _profile(profile)
    config = _config(config, profile, "config")
    cols = {name: np.asarray([v]) for name, v in config.as_dict().items()}
    check_memory(working_memory(cols) + (timeline_bytes(config) if timeline else 0),
                 config.as_dict(), available_memory())
    _keep_freed_memory()
    params, costs, chances, cdf, trace = prepare(cols, profile)
    out = np.zeros(k.N_OUT)
    marks = np.zeros((config.ranks, config.aivs, k.N_MARKS) if timeline else (0, 0, 0),
                     dtype=np.int64)
    tr = trace if config.routing is Routing.trace else trace[:0]
    dispatch.simulate_dispatch(params[0], costs[0], chances[0], cdf[params[0, k.P_CDF_START]:
                               params[0, k.P_CDF_START] + params[0, k.P_CDF_LEN]], tr, out,
                               marks)
    res = results_from_kernel(out[None, :], cols, costs, profile)
    row = {**config.as_dict(), "config_id": config.config_id,
           **{name: v[0].item() for name, v in res.items()}}
    if timeline:
        row["timeline"] = timeline_frame(config, marks, profile)
    return row


def timeline_bytes(config: Config) -> int:
    """What a timeline adds to simulate's memory: the marks, and the frame's rows."""
    roles = ((config.cumsum_aivs, "cumsum"), (config.aivs - config.cumsum_aivs, "token")) \
        if config.protocol.name == "ubep" else ((config.aivs, "bsp"),)
    rows = config.ranks * sum(n * len(TIMELINE_PHASES[role]) for n, role in roles)
    return 8 * config.ranks * config.aivs * k.N_MARKS + TIMELINE_ROW_BYTES * rows


def timeline_frame(config: Config, marks: np.ndarray, profile: Profile) -> pl.DataFrame:
    """A row per (die, AIV, phase), die by die and AIV by AIV, each AIV's phases in order:
    the intervals between its marks, in microseconds."""
    clock = profile.values["clock_ghz"] * 1000.0
    ubep = config.protocol.name == "ubep"
    # one die's rows; every die has the same
    rows = [(a, role, phase, x) for a in range(config.aivs)
            for role in [("cumsum" if a < config.cumsum_aivs else "token") if ubep else "bsp"]
            for x, phase in enumerate(TIMELINE_PHASES[role])]
    aiv, role, phase, x = zip(*rows)
    mark = np.array(aiv) * k.N_MARKS + np.array(x)     # its start's column in a die's marks
    per_die = marks.reshape(config.ranks, -1)
    of_die = np.tile(np.arange(len(rows), dtype=np.uint32), config.ranks)
    return pl.DataFrame({
        "die": np.repeat(np.arange(config.ranks, dtype=np.int32), len(rows)),
        "aiv": np.array(aiv, dtype=np.int32)[of_die],
        "role": pl.Series(role, dtype=pl.Utf8).gather(of_die),
        "phase": pl.Series(phase, dtype=pl.Utf8).gather(of_die),
        "start_us": (per_die[:, mark] / clock).ravel(),
        "end_us": (per_die[:, mark + 1] / clock).ravel()})


__all__ = ["InputError", "PARAMS", "simulate", "simulate_columns", "simulate_many",
           "simulate_table"]
