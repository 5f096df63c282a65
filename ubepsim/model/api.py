"""Public entry points of the model: one configuration, or many.

    simulate(config, profile) -> dict            one configuration (results + parameters)
    simulate_many(configs, profile) -> frame     many, each checked, through the parallel kernel
    simulate_table(points, profile) -> frame     many, already resolved (the sweep engine's)
    die_frame(config, profile) -> frame          one configuration die by die: loads, finish

A configuration is a Config or a dict of parameters (the others at their defaults, as in
`ubepsim run`), made canonical by params.make_config; `points` is a frame of configurations as
a grid gives them (Grid.frame: one column per parameter, canonical, an enum as a pl.Enum or as
its names). The result frame has the same rows in the same order: every parameter, `config_id`,
`cumsum_tuned`, then every field of result_fields: a sweep's rows. A tuned CalCumSum group
(cumsum_cores = "tuned", params.TUNED_CODE in a frame) is resolved to its size first
(ubepsim.model.groups), and the row records that size, `cumsum_tuned` true and the config_id of
"tuned". A row depends only on its own parameters (never on the rest of the batch or on
threads). The kernel's inputs and outputs are packed and read in kernel_io, the memory a
simulation needs is checked in memory.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl

from . import groups, memory
from ..errors import InputError
from .kernel_io import KernelFailure, admit, prepare, result_columns, run_batch
from ..kernels import layer, protocols
from ..kernels import layout as k
from .params import (LATER_NAMES, NAMES, PARAM_BY_NAME, PARAMS, SCHEMA, TUNED_COLUMN,
                     Config, Op, columns, config_frame, default_sync, make_config, stable_id)
from .profile import Profile, load_profile
from .result_fields import RESULTS

# Bytes per row of a timeline frame: two int32, two float64 and two short strings (16-byte
# views). bench/bench_memory.py --timeline measures the whole timeline below it.
TIMELINE_ROW_BYTES = 56


def simulate_columns(cols: dict[str, np.ndarray], profile: Profile, threads: int | None = None,
                     memory_checked: bool = False) -> dict[str, np.ndarray]:
    """Result columns for configurations' columns (params.columns), through the parallel batch
    kernel, with the group each row ran (`cumsum_cores`: a tuned one's size, groups.resolve)
    and whether it was tuned (TUNED_COLUMN).
    Refuses (InputError) configurations that could not fit in memory together, unless the
    caller has checked that already (a sweep, once for its whole grid)."""
    admit(cols, profile, threads, memory_checked)
    cols, tuned = groups.resolve(cols, profile, threads, memory_checked=True)
    return {**run_batch(cols, profile, memory_checked=True),
            "cumsum_cores": cols["cumsum_cores"], TUNED_COLUMN: tuned}


def simulate_table(points: pl.DataFrame, profile: Profile, threads: int | None = None,
                   memory_checked: bool = False) -> pl.DataFrame:
    """Every parameter, config_id, cumsum_tuned and every result for each row of `points` (same
    order; a tuned group's size in cumsum_cores).
    Parameters added after 0.7.0 that `points` lacks (params.LATER_NAMES) are at their
    defaults, where every configuration 0.7.0 could express is canonical as it was."""
    points = points.with_columns(pl.lit(PARAM_BY_NAME[n].default, SCHEMA[n]).alias(n)
                                 for n in LATER_NAMES if n not in points.columns)
    cols = columns(points)
    try:
        res = simulate_columns(cols, profile, threads, memory_checked)
    except KernelFailure as e:   # a row's place in a sweep's batch tells its user nothing
        point = points.row(e.row, named=True)
        # (a parameter added after 0.7.0 only where it is not at its default)
        given = ", ".join(f"{n} = {point[n]}" for n in NAMES if point[n] not in (None, "")
                          and not (n in LATER_NAMES and point[n] == PARAM_BY_NAME[n].default))
        raise KernelFailure(e.row, f"{e}; its configuration: {given}") from None
    # config_id of the configuration as given: a tuned one's is "tuned"'s (params.Config)
    frame = points.select(NAMES).with_columns(
        pl.Series("cumsum_cores", res["cumsum_cores"], dtype=pl.Int64),
        pl.Series("config_id", stable_id(cols, NAMES), dtype=pl.Int64),
        pl.Series(TUNED_COLUMN, res[TUNED_COLUMN], dtype=pl.Boolean))
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
    return make_config(dict(config), profile.cores, name, sync_default=default_sync(profile))


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
    return simulate_table(config_frame(rows), profile, threads)


def simulate(config: Config | Mapping[str, Any], profile: Profile | str | Path | None = None,
             timeline: bool = False) -> dict:
    """One configuration (a Config, or a dict of parameters, the others at their defaults): a
    dict of every parameter, config_id and every result.

    With timeline=True, the key "timeline" holds a polars DataFrame with one row per
    (die, core, phase): die, core, role, phase, start_us, end_us.
    """
    profile = _profile(profile)
    config = _config(config, profile, "config")
    need = memory.working_memory(config.columns(), profile) + \
        (timeline_bytes(config) if timeline else 0)
    memory.check_memory(need, config.as_dict(), memory.available_memory())
    ran = groups.resolve_config(config, profile)   # a tuned group as it runs
    cols = ran.columns()
    memory.keep_freed_memory()
    inputs = prepare(cols, profile)
    costs = inputs[1]
    out = np.zeros(k.N_OUT)
    marks = np.zeros((ran.ranks, ran.cores, MARKS) if timeline else (0, 0, 0),
                     dtype=np.int64)
    out = out[None, :]
    # a batch of one, through the kernels a sweep runs (compiled once for both)
    layer.simulate_batch(*inputs, out, marks)
    res = result_columns(out, cols, costs, profile)
    row = {**ran.as_dict(), "config_id": config.config_id, TUNED_COLUMN: config.tuned,
           **{name: v[0].item() for name, v in res.items()}}
    if timeline:
        row["timeline"] = timeline_frame(ran, marks, profile)
    return row


def die_frame(config: Config | Mapping[str, Any],
              profile: Profile | str | Path | None = None) -> pl.DataFrame:
    """Each die of one configuration, in die order: its tokens, the token copies it sends in
    dispatch (copies_sent) and those its experts take in (copies_taken; combine returns both
    the other way), and when its last core finishes (finish_us: the latest end of its phases
    in simulate's timeline, so the largest is the row's latency_us)."""
    profile = _profile(profile)
    config = _config(config, profile, "config")
    finish = simulate(config, profile, timeline=True)["timeline"].group_by("die").agg(
        pl.col("end_us").max()).sort("die")["end_us"]
    params, _, _, *shared = prepare(groups.resolve_config(config, profile).columns(), profile)
    experts_of, cfirst = layer.routed(params[0], *shared)
    sent = np.diff(cfirst)
    return pl.DataFrame({
        "die": np.arange(config.ranks), "tokens": sent // config.topk, "copies_sent": sent,
        "copies_taken": np.bincount(experts_of // (config.experts // config.ranks),
                                    minlength=config.ranks),
        "finish_us": finish})


MARKS = k.N_MARKS + k.N_CMARKS   # a timeline's marks per core: dispatch's, then combine's


def timeline_phases(config: Config, role: str) -> list[tuple[str, int, int]]:
    """A core's timeline under `config` (role: its dispatch role, bsp, cumsum, token or
    fixed): each phase with the marks (in a row of MARKS) it starts and ends at, as
    kernels/layout.py declares them (DISPATCH_TIMELINE, LAYER_GAP, COMBINE_TIMELINE)."""
    out = []
    dispatch = k.DISPATCH_TIMELINE[role]
    combine = k.COMBINE_TIMELINE[protocols.combine_steps(config.protocol)]
    if config.op is not Op.combine:
        out += [(p, x, x + 1) for x, p in enumerate(dispatch)]
    if config.op is Op.layer:
        out.append((k.LAYER_GAP, len(dispatch), k.N_MARKS))
    if config.op is not Op.dispatch:
        out += [(p, k.N_MARKS + x, k.N_MARKS + x + 1) for x, p in enumerate(combine)]
    return out


def _roles(config: Config) -> list[tuple[int, str]]:
    """(cores, role) of a die, in core order: its dispatch roles (combine: the last one's)."""
    return protocols.roles(config.protocol, config.cores, config.cumsum_cores,
                           config.op is Op.combine)


def timeline_bytes(config: Config) -> int:
    """What a timeline adds to simulate's memory: the marks, and the frame's rows (a tuned
    group's: the most of any size it may resolve to)."""
    if config.tuned:
        return max(timeline_bytes(dataclasses.replace(config, cumsum_cores=c))
                   for c in range(1, groups.max_groups(config.cores) + 1))
    rows = config.ranks * sum(n * len(timeline_phases(config, role))
                              for n, role in _roles(config))
    return 8 * config.ranks * config.cores * MARKS + TIMELINE_ROW_BYTES * rows


def timeline_frame(config: Config, marks: np.ndarray, profile: Profile) -> pl.DataFrame:
    """A row per (die, core, phase), die by die and core by core, each core's phases in order:
    the intervals between its marks, in microseconds."""
    clock = profile.values["clock_ghz"] * 1000.0
    # one die's rows; every die has the same
    roles = [role for n, role in _roles(config) for _ in range(n)]
    rows = [(a, role, phase, lo, hi) for a, role in enumerate(roles)
            for phase, lo, hi in timeline_phases(config, role)]
    core, role, phase, lo, hi = zip(*rows)
    start = np.array(core) * MARKS + np.array(lo)     # its start's column in a die's marks
    end = np.array(core) * MARKS + np.array(hi)
    per_die = marks.reshape(config.ranks, -1)
    of_die = np.tile(np.arange(len(rows), dtype=np.uint32), config.ranks)
    return pl.DataFrame({
        "die": np.repeat(np.arange(config.ranks, dtype=np.int32), len(rows)),
        "core": np.array(core, dtype=np.int32)[of_die],
        "role": pl.Series(role, dtype=pl.Utf8).gather(of_die),
        "phase": pl.Series(phase, dtype=pl.Utf8).gather(of_die),
        "start_us": (per_die[:, start] / clock).ravel(),
        "end_us": (per_die[:, end] / clock).ravel()})


__all__ = ["InputError", "PARAMS", "die_frame", "simulate", "simulate_columns", "simulate_many",
           "simulate_table"]
