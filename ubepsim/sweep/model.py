"""Public entry points of the model: one configuration, or many.

    simulate(config, profile) -> dict            one configuration (results + parameters)
    simulate_many(configs, profile) -> frame     many, each checked, through the parallel kernel
    simulate_table(points, profile) -> frame     many, already resolved (the sweep engine's)

A configuration is a Config or a dict of parameters (the others at their defaults, as in
`ubepsim run`), made canonical by params.make_config; `points` is a frame of configurations as
a grid gives them (Grid.frame: one column per parameter, canonical, an enum as a pl.Enum or as
its names). The result frame has the same rows in the same order: every parameter, `config_id`,
then every field of result_fields: a sweep's rows. A row depends only on its own parameters
(never on the rest of the batch or on threads). The kernel's inputs and outputs are packed and
read in kernel_io, the memory a simulation needs is checked in memory.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl

from . import memory
from ..errors import InputError
from .kernel_io import KernelFailure, kernel_order, prepare, result_columns
from ..kernels import dispatch
from ..kernels import layout as k
from .params import NAMES, PARAMS, SCHEMA, Config, Routing, columns, make_config, stable_id
from .profile import Profile, load_profile
from .result_fields import RESULTS

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


def simulate_columns(cols: dict[str, np.ndarray], profile: Profile, threads: int | None = None,
                     memory_checked: bool = False) -> dict[str, np.ndarray]:
    """Result columns for configurations' columns (params.columns), through the parallel batch
    kernel.
    Refuses (InputError) configurations that could not fit in memory together, unless the
    caller has checked that already (a sweep, once for its whole grid)."""
    import numba

    if threads is not None:
        numba.set_num_threads(max(1, min(threads, numba.config.NUMBA_NUM_THREADS)))
    if not memory_checked and len(cols["ranks"]):
        need = memory.working_memory(cols)
        top = np.argsort(need)[::-1][:numba.get_num_threads()]   # at most one per thread
        memory.check_memory(need[top], {n: np.asarray(cols[n])[top[0]] for n in NAMES},
                            memory.available_memory())
    memory.keep_freed_memory()
    params, costs, chances, cdf, trace = prepare(cols, profile)
    order = kernel_order(params)
    done = np.zeros((len(params), k.N_OUT))
    dispatch.simulate_batch(params[order], costs[order], chances[order], cdf, trace, done)
    out = np.empty_like(done)
    out[order] = done
    return result_columns(out, cols, costs, profile)


def simulate_table(points: pl.DataFrame, profile: Profile, threads: int | None = None,
                   memory_checked: bool = False) -> pl.DataFrame:
    """Every parameter, config_id and every result for each row of `points` (same order)."""
    cols = columns(points)
    try:
        res = simulate_columns(cols, profile, threads, memory_checked)
    except KernelFailure as e:   # a row's place in a sweep's batch tells its user nothing
        point = points.row(e.row, named=True)
        given = ", ".join(f"{n} = {point[n]}" for n in NAMES if point[n] not in (None, ""))
        raise KernelFailure(e.row, f"{e}; its configuration: {given}") from None
    frame = points.select(NAMES).with_columns(
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
    points = pl.DataFrame(rows, schema=SCHEMA)
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
    cols = config.columns()
    memory.check_memory(memory.working_memory(cols) + (timeline_bytes(config) if timeline else 0),
                        config.as_dict(), memory.available_memory())
    memory.keep_freed_memory()
    params, costs, chances, cdf, trace = prepare(cols, profile)
    out = np.zeros(k.N_OUT)
    marks = np.zeros((config.ranks, config.aivs, k.N_MARKS) if timeline else (0, 0, 0),
                     dtype=np.int64)
    tr = trace if config.routing is Routing.trace else trace[:0]
    dispatch.simulate_dispatch(params[0], costs[0], chances[0], cdf[params[0, k.P_CDF_START]:
                               params[0, k.P_CDF_START] + params[0, k.P_CDF_LEN]], tr, out,
                               marks)
    res = result_columns(out[None, :], cols, costs, profile)
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
