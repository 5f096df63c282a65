"""The model's parameters: one name per concept, shared by TOML keys, CLI flags and Parquet columns.

Each parameter carries its own help text, the single source for `--help`, docs/reference.md
(ubepsim.docs) and the validation messages. Variants are IntEnums numbered 0, 1, 2, ... in
order, their values the integer codes the kernels use (kernels/layout.py; a test holds the two
equal).

A configuration takes two forms along the sweep path, made canonical once, where it enters
(`make_config` for one, ubepsim.sweep.expand for a grid's points): a frame of configurations,
one column per parameter (SCHEMA: an enum as a pl.Enum of its names), which rows are made of;
and the columns the model computes on (`columns`: numpy, an enum as its codes). A pl.Enum
stores a value as its index among the names, which is the IntEnum's code, so the enumerations
go from names to codes through one table, ENUMS.
"""

from __future__ import annotations

import dataclasses
import enum
import functools
import hashlib
import math
import os
import re
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable

import numpy as np
import polars as pl

from ..errors import InputError
from ..kernels import protocols
from ..kernels.layout import RECEIVE_GROUP
from . import routings
from .traces import check_trace_file

if TYPE_CHECKING:
    from .profile import Profile


# bsp, ubep, deepep_ll: the protocols kernels/protocols registers, each a module there
Protocol = enum.IntEnum("Protocol", [(name, code) for code, name in enumerate(protocols.NAMES)])


class Sync(enum.IntEnum):
    sw = 0    # stop-and-wait: payload, fence, separate flag (paper Section 3.4)
    tff = 1   # token-flag fusion: 32 B flag inside each 512 B block
    dc = 2    # data-for-checksum: one checksum per batch after its blocks
    sp = 3    # sentinel polling: receiver polls the block itself, re-arms it after use


class Schedule(enum.IntEnum):
    expert_block = 0  # each AIV owns a block of experts (CANN EP hot spots)
    balanced = 1      # equal contiguous slices of the copies in expert order (topology-blind)
    homogenized = 2   # logical matrix transposition: balanced hop-class mix per AIV (Section 3.3)
    token_order = 3   # equal contiguous slices of the copies in token order (CANN's SplitToCore)


# uniform, the generators of routings.GENERATORS, and trace
Routing = enum.IntEnum("Routing", routings.CODES)


class HotPlacement(enum.IntEnum):
    spread = 0  # the hot experts drawn over the layout (Megatron's W1, W3)
    ranks = 1   # the hot experts on whole dies, a die's experts together (W2)


class BatchSpread(enum.IntEnum):
    equal = 0   # every die holds `batch` tokens
    cv = 1      # log-normal per die at a stated coefficient of variation (batch_cv)
    zero = 2    # a share of the dies hold none (zero_token_share), the rest alike
    list = 3    # the shape of an explicit list (batches)


class Dtype(enum.IntEnum):
    bf16 = 0
    fp8 = 1
    int8 = 2


class Op(enum.IntEnum):
    dispatch = 0  # the dispatch all-to-all (paper Sections 2-3)
    combine = 1   # the return all-to-all: each copy back to its source, reduced per token
    layer = 2     # dispatch, each die's expert time, then combine (docs/model.md, "Combine")


class CombineDtype(enum.IntEnum):
    bf16 = 0  # 2 B per element (CANN commQuantMode 0)
    int8 = 1  # 1 B per element + a bf16 scale per 8 elements (CANN commQuantMode 2)


ENUMS: dict[str, type[enum.IntEnum]] = {
    "protocol": Protocol,
    "sync": Sync,
    "schedule": Schedule,
    "routing": Routing,
    "dtype": Dtype,
    "op": Op,
    "combine_dtype": CombineDtype,
    "hot_placement": HotPlacement,
    "batch_spread": BatchSpread,
}


def token_bytes(hidden, dtype):
    """Bytes of one token copy: activations plus quantization scales (scalars or arrays).

    fp8 carries one fp32 scale per 128-element group (DeepEP's layout); int8 (W8A8) one fp32
    scale per token.
    """
    hidden = np.asarray(hidden, dtype=np.int64)
    dtype = np.asarray(dtype, dtype=np.int64)
    return np.select([dtype == Dtype.bf16, dtype == Dtype.fp8],
                     [2 * hidden, hidden + 4 * -(-hidden // 128)], hidden + 4)


def copies_per_die(batch, topk):
    """A die's token copies, batch x topk, as int64 (scalars or numpy columns): at the mean
    batch, or at workload.batch_max's, the most tokens any die holds. The one place the host
    multiplies them, so that every bound, estimate and count reads the same number."""
    return np.asarray(batch, dtype=np.int64) * np.asarray(topk, dtype=np.int64)


def combine_bytes(hidden, combine_dtype):
    """Bytes of one returned copy (combine): bf16, or int8 with a bf16 scale per 8 elements
    (CANN's combine quantization: a max per 32-byte block of fp32 values; docs/model.md,
    "Combine")."""
    hidden = np.asarray(hidden, dtype=np.int64)
    return np.where(np.asarray(combine_dtype, dtype=np.int64) == CombineDtype.int8,
                    hidden + 2 * -(-hidden // 8), 2 * hidden)


# A default stated in a parameter's help: the words for one the code or the profile decides
STATED_DEFAULT = re.compile(r"\s*\(default: ([^)]*)\)")

# cumsum_cores = "tuned" (a tunable parameter's word), as the model computes on it: 0, never a
# group (at least 1). ubepsim.model.groups resolves it before any kernel runs.
TUNED = "tuned"
TUNED_CODE = 0
# The result column that says a row's cumsum_cores was tuned (its value the size that ran).
TUNED_COLUMN = "cumsum_tuned"
TUNED_HELP = ("whether the row's cumsum_cores was tuned (cumsum_cores = \"tuned\", the default "
              "wherever it is read): its cumsum_cores is then the size `ubepsim tune` picks for "
              "the row's workload; false where it was given as an integer or is not read")


@dataclasses.dataclass(frozen=True)
class Param:
    name: str
    kind: type          # int, float, str (enum choice) or Path
    default: Any
    help: str
    minimum: float | None = None
    maximum: float | None = None
    unread: Any = None      # what a configuration that does not read it records (None: default)
    tunable: bool = False   # it also takes TUNED, the value `ubepsim tune` picks (cumsum_cores)

    @property
    def flag(self) -> str:
        return "--" + self.name.replace("_", "-")

    @property
    def stated_default(self) -> str | None:
        """The default its help states in words, "(default: ...)", where code or the profile
        decides it: --help and the reference show these words, not `default` (for sync, the
        one make_config takes without the profile's)."""
        stated = STATED_DEFAULT.search(self.help)
        return stated.group(1) if stated else None

    @property
    def described(self) -> str:
        """Its help, and where it is read if not everywhere (GATED): --help and the
        reference say so."""
        gate = GATED.get(self.name)
        if gate is None:
            return self.help
        recorded = "" if self.unread is None else f"; elsewhere recorded as {self.unread}"
        return f"{self.help} Read only where {gate.says()}{recorded}."

    @functools.cached_property   # read for every value checked
    def choices(self) -> tuple[str, ...] | None:
        return tuple(m.name for m in ENUMS[self.name]) if self.name in ENUMS else None


# The paper's sensitivity setup (Section 5, Figure 7): 128 ranks, batch 64, top-8, one expert per
# die, hidden 7168; full UBEP. `experts` and `cores` default to "one per rank" and the profile's.
PARAMS: tuple[Param, ...] = (
    Param("ranks", int, 128, "EP ranks (= dies).", 1, 16384),
    Param("batch", int, 64, "Tokens per rank.", 1, 1 << 20),
    Param("topk", int, 8, "Experts each token is routed to (distinct).", 1, 4096),
    Param("experts", int, None, "Routed experts in all, placed experts/ranks per die "
          "(default: one per rank).", 1, 1 << 20),
    Param("hidden", int, 7168, "Hidden size: elements per token.", 1, 1 << 24),
    Param("dtype", str, "bf16", "Token element type: bf16 (2 B), fp8 (1 B + fp32 scale per "
          "128 elements), int8 (1 B + one fp32 scale per token)."),
    Param("cores", int, None, "Cores per die, the instruction streams that run the kernels: "
          "AIVs on Ascend, warp groups on a GPU (default: the profile's); under deepep_ll, its "
          "June 2025 launch by default: 3 warp groups per SM on ceil(experts / 3) SMs.", 2,
          4096),
    # A configuration that does not read it (GATED) records 1, as before "tuned" was its
    # default, so that its config_id stays.
    Param("cumsum_cores", int, TUNED, "Cores in UBEP's CalCumSum group, its AIVs on Ascend "
          "(the rest send tokens; under bsp every core runs every phase): an integer from 1 to "
          "cores - 1, or tuned, the size `ubepsim tune` picks for the configuration's own "
          "workload (its other parameters and seed; sizes 1 to 16, or to cores - 1 if fewer; "
          "the least latency of its op, the smaller on a tie), simulated once per workload and "
          "profile. A result row records the size that ran, and cumsum_tuned whether it was "
          "tuned.", 1, 4095, unread=1, tunable=True),
    Param("protocol", str, "ubep", "bsp (CANN EP, SyncAll between phases), ubep (kernel "
          "decomposition, point-to-point signals) or deepep_ll (DeepEP's low-latency kernels: "
          "a put per copy, counts behind them, fixed slots)."),
    Param("sync", str, "sp", "Data-as-Flag variant of every signal: sw (stop-and-wait), tff "
          "(token-flag fusion), dc (data-for-checksum), sp (sentinel polling). A profile whose "
          "fabric does not write a block whole (atomic_bytes below block_bytes) refuses tff "
          "and sp (default: the profile's: sp, or dc where its fabric does not write a block "
          "whole)."),
    Param("schedule", str, "homogenized", "Token-to-core schedule: expert_block, balanced, "
          "homogenized."),
    Param("routing", str, "uniform", "Routing generator: uniform, zipf, hot, lognormal, "
          "trace."),
    Param("zipf_s", float, 1.0, "Zipf exponent of expert popularity.", 0.0, 16.0),
    Param("hot_experts", int, 8, "Number of hot experts.", 1, 1 << 20),
    Param("hot_share", float, 0.5, "The hot experts' share of the routing weight. A token's "
          "topk experts are distinct draws, so at most hot_experts of its "
          "copies go to hot experts and their share of copies is below hot_share when topk is "
          "large next to hot_experts (1 hot expert, 0.9, top-8: 0.125).", 0.0, 1.0),
    Param("trace", Path, "", "Routing trace, Parquet with columns rank, token, k, expert "
          "(routing = trace); a rank's tokens are numbered from 0, as many as it holds, "
          "batch being their mean."),
    Param("seed", int, 0, "Seed of the counter-based routing generator.", 0, (1 << 63) - 1),
    # Added after 0.7.0: at their defaults they leave a configuration's config_id as 0.7.0 gave
    # it (stable_id), so they stay last.
    Param("op", str, "dispatch", "What is simulated: dispatch (the dispatch all-to-all), "
          "combine (the return all-to-all: each token copy back to its source die, each "
          "token's copies reduced there) or layer (dispatch, each die's expert time, then "
          "combine: one MoE layer's communication round trip)."),
    Param("combine_dtype", str, "bf16", "Element type of the copies combine returns: bf16 "
          "(2 B) or int8 (1 B + a bf16 scale per 8 elements, quantized by the sender and "
          "dequantized by the reducer, as CANN's combine does)."),
    Param("expert_fixed_us", float, 0.0, "The fixed part of each die's expert time in a layer, "
          "between its dispatch and its combine: the time is expert_fixed_us plus "
          "expert_ns_per_copy per token copy the die received (the result expert_us is the "
          "critical die's).", 0.0, 1e6),
    Param("expert_ns_per_copy", float, 0.0, "The experts' time per token copy their die "
          "received, beside expert_fixed_us: hot experts make their die late.",
          0.0, 1e6),
    Param("hot_placement", str, "spread", "Where the hot experts live: spread (drawn over "
          "the layout) or ranks (on whole dies, a die's experts together: hot ranks)."),
    Param("lognormal_sigma", float, 1.0, "Sigma of the log-normal expert weights: each "
          "expert's weight is exp(sigma * z), z a standard normal drawn per expert.", 0.0, 8.0),
    Param("zero_experts", float, 0.0, "The share of experts that get no tokens: those of "
          "least weight (under uniform routing, drawn).", 0.0, 1.0),
    Param("zero_ranks", int, 0, "Dies whose experts get no tokens, drawn.", 0, 16383),
    Param("batch_spread", str, "equal", "How tokens spread over the dies, batch being their "
          "mean (every die's total ranks x batch): equal, cv (per die a log-normal draw at "
          "coefficient of variation batch_cv), zero (a zero_token_share of the dies, drawn, "
          "hold none and the rest alike) or list (the shape of batches, scaled to mean "
          "batch)."),
    Param("batch_cv", float, 0.5, "Coefficient of variation of the dies' tokens under "
          "batch_spread = cv.", 0.0, 16.0),
    Param("zero_token_share", float, 0.25, "The share of dies that hold no tokens under "
          "batch_spread = zero (rounded down to whole dies; below 1).", 0.0, 1.0),
    Param("batches", list, "", "Tokens per die, one per rank in die order (\"256,0,64,...\" or "
          "a TOML list), under batch_spread = list: scaled to mean batch, exactly these where "
          "their mean is batch."),
)

PARAM_BY_NAME = {p.name: p for p in PARAMS}
MAX_COPIES = 1 << 26
NAMES = tuple(p.name for p in PARAMS)
# Parameters that decide routing: the generator is keyed by them, so protocols, schedules and sync
# variants compared at the same seed see the same token copies. The zero-load keys are not among
# them: they take experts' tokens away, not the draws, so a configuration and its zero-load
# variant share their popularity order, die order and streams, and compare paired.
WORKLOAD_NAMES = ("ranks", "batch", "topk", "experts", "routing", "zipf_s", "hot_experts",
                  "hot_share", "trace", "seed", "hot_placement", "lognormal_sigma")
# How tokens spread over the dies. Like zero load, not in WORKLOAD_NAMES: a die draws its own
# tokens from its own stream whatever their number, so spreads compare paired.
BATCH_NAMES = ("batch_spread", "batch_cv", "zero_token_share", "batches")
# Parameters added after 0.7.0, which enter a config_id only where they differ from their
# default (stable_id): every configuration 0.7.0 could express keeps its id.
LATER_NAMES = ("op", "combine_dtype", "expert_fixed_us", "expert_ns_per_copy", "hot_placement",
               "lognormal_sigma", *routings.ZERO_LOAD, *BATCH_NAMES)


@dataclasses.dataclass(frozen=True)
class Gate:
    """Where a parameter is read: in every configuration that meets one of `clauses`, each
    clause a tuple of (parameter, the values that read it) pairs that must all hold."""

    clauses: tuple[tuple[tuple[str, tuple[enum.IntEnum, ...]], ...], ...]

    @property
    def gates(self) -> tuple[str, ...]:
        """The parameters the gate reads."""
        return tuple(dict.fromkeys(g for clause in self.clauses for g, _ in clause))

    def reads(self, cols: dict[str, Any]) -> np.ndarray:
        """Row by row, whether the parameter is read (columns with enums as codes)."""
        read = None
        for clause in self.clauses:
            holds = None
            for gate, readers in clause:
                ok = np.isin(np.asarray(cols[gate]), [int(r) for r in readers])
                holds = ok if holds is None else holds & ok
            read = holds if read is None else read | holds
        return read

    def says(self) -> str:
        """Where it is read, in words: "protocol = ubep and op = dispatch/layer"."""
        return ", or ".join(" and ".join(f"{g} = {'/'.join(r.name for r in readers)}"
                                         for g, readers in clause) for clause in self.clauses)


def _gate(*clauses: dict[str, tuple]) -> Gate:
    return Gate(tuple(tuple(c.items()) for c in clauses))


WITH_DISPATCH = (Op.dispatch, Op.layer)
WITH_COMBINE = (Op.combine, Op.layer)
DRAWN = tuple(r for r in Routing if r is not Routing.trace)
# The parameters only some configurations read (a protocol, a routing, an op), and where they
# are read. Elsewhere they change nothing, so a configuration records them at their defaults:
# points that differ only there are one configuration, with one config_id and one routing
# stream, simulated once in a sweep. (A trace file is never ignored: giving one without
# routing = trace is an error.) Combine has no CalCumSum group and reads no dispatch dtype;
# bsp's combine is CANN's V1, whose split and signals are its own (docs/model.md, "Combine").
def _using(mechanism: int, value: int = 1) -> tuple[Protocol, ...]:
    """The protocols that use a mechanism (kernels/protocols.py), or its given value."""
    return tuple(p for p in Protocol if protocols.uses(p, mechanism) == value)


def _reading(mechanism: int) -> tuple[Protocol, ...]:
    """The protocols whose `mechanism` is a parameter's (protocols.READ)."""
    return tuple(p for p in Protocol if protocols.uses(p, mechanism) == protocols.READ)


GATED: dict[str, Gate] = {
    "cumsum_cores": _gate({"protocol": _using(protocols.RECEIVE, RECEIVE_GROUP),
                            "op": WITH_DISPATCH}),
    # a generator's parameters: its signature's (routings.py)
    **{name: _gate({"routing": tuple(Routing[r] for r in readers)})
       for name, readers in routings.readers().items()},
    # zero load: on every drawn routing (a trace carries its own)
    **{name: _gate({"routing": DRAWN}) for name in routings.ZERO_LOAD},
    # the batches' spread: on every drawn routing (a trace's batches are its own), each
    # spread's key under its spread
    "batch_spread": _gate({"routing": DRAWN}),
    **{name: _gate({"batch_spread": (spread,), "routing": DRAWN})
       for name, spread in (("batch_cv", BatchSpread.cv),
                            ("zero_token_share", BatchSpread.zero),
                            ("batches", BatchSpread.list))},
    "dtype": _gate({"op": WITH_DISPATCH}),
    # where the protocol reads them: sync for its counts (dispatch) and signalled copies (both
    # ops), schedule for either op's deal
    "sync": _gate({"op": WITH_DISPATCH, "protocol": _reading(protocols.SYNC)},
                  {"protocol": _using(protocols.SIGNALLED_COPIES)}),
    "schedule": _gate({"op": WITH_DISPATCH, "protocol": _reading(protocols.DEAL)},
                      {"op": WITH_COMBINE, "protocol": _reading(protocols.RETURN_DEAL)}),
    "combine_dtype": _gate({"op": WITH_COMBINE}),
    "expert_fixed_us": _gate({"op": (Op.layer,)}),
    "expert_ns_per_copy": _gate({"op": (Op.layer,)}),
}


@dataclasses.dataclass(frozen=True)
class Config:
    """One validated configuration; every field is resolved (no None)."""

    ranks: int
    batch: int
    topk: int
    experts: int
    hidden: int
    dtype: Dtype
    cores: int
    cumsum_cores: int            # TUNED_CODE for "tuned", until groups.resolve_config
    protocol: Protocol
    sync: Sync
    schedule: Schedule
    routing: Routing
    zipf_s: float
    hot_experts: int
    hot_share: float
    trace: str
    seed: int
    op: Op = Op.dispatch
    combine_dtype: CombineDtype = CombineDtype.bf16
    expert_fixed_us: float = 0.0
    expert_ns_per_copy: float = 0.0
    hot_placement: HotPlacement = HotPlacement.spread
    lognormal_sigma: float = 1.0
    zero_experts: float = 0.0
    zero_ranks: int = 0
    batch_spread: BatchSpread = BatchSpread.equal
    batch_cv: float = 0.5
    zero_token_share: float = 0.25
    batches: str = ""

    def as_dict(self) -> dict[str, Any]:
        """Plain values, enums as their names and a tuned group as TUNED: the form of TOML and
        JSON (config_frame reads it back)."""
        return {n: (v.name if isinstance(v, enum.Enum) else
                    TUNED if n == "cumsum_cores" and v == TUNED_CODE else v)
                for n, v in dataclasses.asdict(self).items()}

    @property
    def tuned(self) -> bool:
        """Whether its CalCumSum group is to be tuned (cumsum_cores = "tuned", read here)."""
        return self.cumsum_cores == TUNED_CODE

    @property
    def token_bytes(self) -> int:
        return int(token_bytes(self.hidden, self.dtype))

    def columns(self) -> dict[str, np.ndarray]:
        """The configuration as the model computes on it: one-row columns, enums as codes."""
        return {n: np.asarray([v]) for n, v in dataclasses.asdict(self).items()}

    @property
    def config_id(self) -> int:
        """A stable 63-bit hash of every parameter (a trace by its file's content, not its
        path), the same on every run and machine. The hardware profile is not in it, so one
        grid swept on two profiles gives rows that join on it. A tuned group counts as
        "tuned", not as the size it resolved to (which the profile decides): its row's
        cumsum_tuned is true, and an explicit size keeps an id of its own."""
        return int(stable_id(self.columns(), NAMES)[0])

    @property
    def workload_key(self) -> int:
        return int(workload_keys(self.columns())[0])


def canonical(cols: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Resolved parameter columns (enums as codes) with every GATED parameter at its default
    where no configuration it is in reads it (GATED: its protocol, routing or op)."""
    out = dict(cols)
    for name, gate in GATED.items():
        unread = ~gate.reads(cols)
        if unread.any():
            out[name] = np.where(unread, recorded_value(name), np.asarray(cols[name]))
    return out


def default_value(name: str) -> Any:
    """A parameter's default as the model computes on it (an enum as its code, TUNED as
    TUNED_CODE)."""
    default = PARAM_BY_NAME[name].default
    return ENUMS[name][default].value if name in ENUMS else \
        TUNED_CODE if default == TUNED else default


def frame_default(name: str) -> Any:
    """A parameter's default as a frame of configurations holds it (SCHEMA: an enum as its
    name, TUNED as TUNED_CODE)."""
    default = PARAM_BY_NAME[name].default
    return TUNED_CODE if default == TUNED else default


def recorded_value(name: str) -> Any:
    """What a configuration that does not read a GATED parameter records, as the model
    computes on it: its default, or its Param's `unread` (cumsum_cores: 1)."""
    unread = PARAM_BY_NAME[name].unread
    return default_value(name) if unread is None else unread


def columns(points: pl.DataFrame, names: tuple[str, ...] = NAMES) -> dict[str, np.ndarray]:
    """The named columns of a frame of configurations as the model computes on them: numpy, an
    enum as its codes (its pl.Enum's physical index; a column of names is cast to it first), a
    tunable parameter's TUNED as TUNED_CODE (a column of text, as Config.as_dict rows give it,
    is read first)."""
    out = {}
    for name in names:
        col = points[name]
        if name in ENUMS:
            col = col.cast(polars_dtype(name)).to_physical().cast(pl.Int64)
        elif PARAM_BY_NAME[name].tunable and col.dtype == pl.String:
            col = col.replace(TUNED, str(TUNED_CODE)).cast(pl.Int64)
        out[name] = col.to_numpy()
    return out


def series(name: str, values: np.ndarray) -> pl.Series:
    """The inverse of `columns` for one parameter: a frame's column of SCHEMA from the values
    the model computes on (an enum's codes picked out of its pl.Enum's names)."""
    if name in ENUMS:
        return pl.Series(name, PARAM_BY_NAME[name].choices, SCHEMA[name]).gather(values)
    return pl.Series(name, values, SCHEMA[name])


def config_frame(rows: list[dict[str, Any]]) -> pl.DataFrame:
    """Resolved configurations (Config.as_dict() rows) as a frame of configurations (SCHEMA:
    a tuned group as TUNED_CODE)."""
    return pl.DataFrame([r if r.get("cumsum_cores") != TUNED else
                         {**r, "cumsum_cores": TUNED_CODE} for r in rows], schema=SCHEMA)


def config_columns(rows: list[dict[str, Any]]) -> dict[str, np.ndarray]:
    """Resolved configurations (Config.as_dict() rows) as the columns the model computes on."""
    return columns(config_frame(rows))


def workload_keys(cols: dict[str, Any]) -> np.ndarray:
    """The routing generator's key per row of canonical columns: a hash of WORKLOAD_NAMES."""
    return stable_id(cols, WORKLOAD_NAMES)


def stable_id(cols: dict[str, Any], names: tuple[str, ...]) -> np.ndarray:
    """63-bit hashes of the named columns, row by row: stable across runs, machines, versions.

    splitmix64, the kernel's own (kernels/rng.py, here over whole columns), of the values
    (integers as they are, floats by their bits, enums by name, strings by a blake2b digest), so
    a million rows hash in milliseconds.
    """
    from ..kernels.rng import mix64   # Numba, loaded once ids are needed (not for --help)

    n = len(np.atleast_1d(cols[names[0]]))
    h = np.zeros(n, dtype=np.uint64)
    for position, name in enumerate(names):
        v = as_words(name, cols[name])
        step = mix64(h ^ mix64(v + np.uint64(position)))
        # a parameter added after 0.7.0 counts only where it is not at its default
        h = np.where(v == _DEFAULT_U64[name], h, step) if name in LATER_NAMES else step
    return (h >> np.uint64(1)).astype(np.int64)


def same_config(a: dict[str, Any], b: dict[str, Any], names: tuple[str, ...]) -> np.ndarray:
    """Row by row, whether two sets of columns hold the same configuration: equal in every
    named value as stable_id hashes it (a trace by its content). Equal config_ids that are not
    the same configuration are a hash collision."""
    same = np.ones(len(np.atleast_1d(a[names[0]])), dtype=bool)
    for name in names:
        same &= as_words(name, a[name]) == as_words(name, b[name])
    return same


def as_words(name: str, values: np.ndarray) -> np.ndarray:
    """A column as the 64-bit words stable_id hashes (enums given as codes)."""
    if name in ENUMS:
        return _NAME_DIGESTS[name][np.asarray(values, dtype=np.int64)]
    kind = PARAM_BY_NAME[name].kind
    v = np.atleast_1d(np.asarray(values, dtype=object if kind in (Path, list) else None))
    if kind in (Path, list):   # a file by its content, a list by its text
        digest = trace_digest if kind is Path else _digest
        uniq = {x: digest(str(x)) for x in set(v.tolist())}
        v = np.array([uniq[x] for x in v.tolist()], dtype=np.uint64)
    elif PARAM_BY_NAME[name].kind is float:
        v = v.astype(np.float64).view(np.uint64)
    else:
        v = v.astype(np.int64).view(np.uint64)
    return v


def _digest(text: str | bytes) -> int:
    data = text.encode() if isinstance(text, str) else text
    return int.from_bytes(hashlib.blake2b(data, digest_size=8).digest(), "little")


# An enum value hashes by its name, so ids do not depend on the codes the kernels use.
_NAME_DIGESTS = {name: np.array([_digest(m.name) for m in e], dtype=np.uint64)
                 for name, e in ENUMS.items()}


_DEFAULT_U64 = {name: as_words(name, np.asarray([default_value(name)]))[0] for name in LATER_NAMES}


def trace_digest(path: str) -> int:
    """A trace by its content, not its name: the same file spelled from another directory (or
    a copy of it) is the same workload, with the same config_id and generator streams."""
    if not path:
        return _digest("")
    try:
        st = os.stat(path)
    except OSError as e:
        raise InputError("trace", f"cannot read {path}: {e.strerror or e}") from None
    return _file_digest(os.path.realpath(path), st.st_ino, st.st_size, st.st_mtime_ns,
                        st.st_ctime_ns)


# Keyed by the file's identity and stamps, so that a sweep reads each trace once; the change
# time moves on every write, even one whose modification time was set back (cp -p, rsync -t).
@functools.lru_cache(maxsize=64)
def _file_digest(path: str, inode: int, size: int, mtime_ns: int, ctime_ns: int) -> int:
    with open(path, "rb") as f:
        return _digest(hashlib.file_digest(f, "blake2b").digest())


def coerce(name: str, value: Any, source: str | None = None) -> Any:
    """One value of parameter `name`, type-checked; raises InputError naming the key."""
    if name not in PARAM_BY_NAME:
        raise InputError(name, f"unknown parameter; allowed: {', '.join(NAMES)}", source)
    p = PARAM_BY_NAME[name]
    if value is None:
        return None
    if p.tunable:
        return _tunable(p, value, source)
    if p.choices is not None:
        if not isinstance(value, str) or value not in p.choices:
            raise InputError(name, f"{value!r} is not allowed; choose one of "
                             f"{', '.join(p.choices)}", source)
        return ENUMS[name][value]
    if p.kind is int:
        if isinstance(value, bool) or not isinstance(value, int):
            if isinstance(value, float) and value.is_integer():
                value = int(value)
            else:
                raise InputError(name, f"expected an integer, got {_shown(value)}", source)
    elif p.kind is float:
        # an int past the floats' range is refused before math.isfinite, which would raise
        if isinstance(value, bool) or not isinstance(value, (int, float)) or \
                abs(value) > sys.float_info.max or not math.isfinite(value):
            raise InputError(name, f"expected a finite number, got {_shown(value)}", source)
        value = float(value)
    elif p.kind is Path:
        if not isinstance(value, (str, Path)):
            raise InputError(name, f"expected a file path, got {_shown(value)}", source)
        return str(value)
    elif p.kind is list:
        return _int_list(name, value, source)
    if p.minimum is not None and value < p.minimum:
        raise InputError(name, f"{value!r} is below the minimum {_fmt(p.minimum)}", source)
    if p.maximum is not None and value > p.maximum:
        raise InputError(name, f"{value!r} is above the maximum {_fmt(p.maximum)}", source)
    return value


# What cumsum_cores, the tunable parameter, takes (its upper bound is check_rules').
TUNABLE_ALLOWED = f"an integer from 1 to cores - 1, or \"{TUNED}\""


def _tunable(p: Param, value: Any, source: str | None) -> int:
    """A tunable parameter's value: TUNED as TUNED_CODE, else an integer within its bounds."""
    if isinstance(value, str) and value == TUNED:
        return TUNED_CODE
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int) or \
            not p.minimum <= value <= p.maximum:
        raise InputError(p.name, f"{_shown(value)} is not allowed; give {TUNABLE_ALLOWED}",
                         source)
    return value


def _int_list(name: str, value: Any, source: str | None) -> str:
    """A list of counts (a list of integers, or their text "256,0,64") in its one spelling,
    "256,0,64" ("" for none): what a frame records and config_id hashes."""
    items = value.split(",") if isinstance(value, str) else value
    if isinstance(value, str) and not value.strip():
        return ""
    if not isinstance(items, (list, tuple)):
        raise InputError(name, f"expected a list of integers (\"256,0,64\" or [256, 0, 64]), "
                         f"got {_shown(value)}", source)
    out = []
    for x in items:
        try:
            n = int(x.strip()) if isinstance(x, str) else x
        except ValueError:
            n = None
        if isinstance(n, bool) or not isinstance(n, int) or n < 0:
            raise InputError(name, f"expected integers of at least 0, got {_shown(x)}", source)
        out.append(n)
    if out and not any(out):
        raise InputError(name, "every entry is 0; some die must hold tokens", source)
    return ",".join(map(str, out))


def int_list(text: str) -> np.ndarray:
    """A list parameter's text ("256,0,64") as its integers."""
    return np.array([int(x) for x in text.split(",")] if text else [], dtype=np.int64)


def _shown(value: Any) -> str:
    """A value as the user wrote it: TOML and JSON spell booleans true and false."""
    return str(value).lower() if isinstance(value, bool) else repr(value)


def _fmt(x: float) -> str:
    return str(int(x)) if float(x).is_integer() else str(x)


def polars_dtype(name: str) -> pl.DataType:
    """A parameter's column type in frames: an enum as pl.Enum of its names, in code order (a
    dataset stores them as strings: what any Parquet reader reads)."""
    p = PARAM_BY_NAME[name]
    if p.choices is not None:
        return pl.Enum(p.choices)  # the names, each stored as its index: the IntEnum's code
    return {int: pl.Int64, float: pl.Float64}.get(p.kind, pl.String)


SCHEMA = {name: polars_dtype(name) for name in NAMES}   # a frame of configurations


def default_cores(protocol, experts, profile_cores):
    """The cores (cores) of configurations that name none (numpy columns or scalars): the
    profile's, or where the protocol sizes its launch by the experts, its own
    (protocols.EXPERT_CORES)."""
    g = protocols.uses(protocol, protocols.EXPERT_CORES)
    return np.where(g > 0, g * -(-np.asarray(experts) // np.maximum(g, 1)), profile_cores)


def default_sync(profile: Profile) -> str:
    """The sync of configurations that name none on `profile`, as sync's help states it: sp (its
    Param's default), or dc where its fabric does not write a block whole. There tff and sp are
    refused (kernel_io.check_machine), and a
    preset's defaults must run: of paper Table 5's two fallbacks without atomic writes,
    data-for-checksum and fences (sw), dc is the one that fences no signal."""
    return PARAM_BY_NAME["sync"].default if profile.writes_blocks_whole else Sync.dc.name


def make_config(values: dict[str, Any], cores_default: int, source: str | None = None,
                check_trace: bool = True, sync_default: str | None = None) -> Config:
    """Validate one point: types, ranges and the cross-parameter rules of the model. GATED
    parameters its protocol, routing or op does not read are recorded at their defaults.
    Where `values` name none, cores and sync take the profile's: `cores_default` (its cores,
    as default_cores reads them) and `sync_default` (default_sync; None: the parameter's
    default, sp)."""
    for name in values:
        if name not in PARAM_BY_NAME:
            raise InputError(name, f"unknown parameter; allowed: {', '.join(NAMES)}", source)
    defaults = {p.name: p.default for p in PARAMS} | (
        {"sync": sync_default} if sync_default is not None else {})
    resolved: dict[str, Any] = {}
    for p in PARAMS:
        v = values.get(p.name)
        resolved[p.name] = coerce(p.name, defaults[p.name] if v is None else v, source)
    if resolved["experts"] is None:
        resolved["experts"] = resolved["ranks"]
    if resolved["cores"] is None:
        resolved["cores"] = int(default_cores(int(resolved["protocol"]), resolved["experts"],
                                            cores_default))
    cols = canonical({k: np.asarray([v]) for k, v in resolved.items()})
    for name in GATED:
        kind = PARAM_BY_NAME[name].kind
        resolved[name] = (ENUMS[name](int(cols[name][0])) if name in ENUMS
                          else str(cols[name][0]) if kind is list else kind(cols[name][0]))
    check_rules(cols, source, check_trace)
    return Config(**resolved)


def check_rules(cols: dict[str, np.ndarray], source: str | None = None,
                check_trace: bool = True) -> None:
    """The cross-parameter rules, on columns of resolved values (enums as codes or members).

    Used for one point and for a whole expanded grid alike; the first violation raises an
    InputError naming the parameter and quoting the offending values (the rules in this order:
    sizes, routing, batches, trace).
    """
    c = {k: np.asarray(v) for k, v in cols.items()}
    fail = _failing(c, source)
    _check_sizes(c, fail)
    _check_routing(c, fail)
    _check_batches(c, fail)
    _check_trace(c, fail, source, check_trace)


def _failing(c: dict[str, np.ndarray], source: str | None) -> Callable:
    """fail(name, bad, message): an InputError naming the parameter `name` at the first row
    where `bad` holds, its message made by message(v), v(key) being that row's value of key."""
    def fail(name: str, bad: np.ndarray, message) -> None:
        if bad.any():
            i = int(np.flatnonzero(bad)[0])
            # (numpy scalars as Python's; a grid's text columns hold str already)
            raise InputError(name, message(lambda k: getattr(c[k][i], "item", lambda: c[k][i])()),
                             source)
    return fail


def _check_sizes(c: dict[str, np.ndarray], fail: Callable) -> None:
    """Experts placed evenly on the dies, the copies within the kernel's ids, a token's experts
    distinct, a core left to send."""
    fail("experts", c["experts"] % c["ranks"] != 0, lambda v: f"{v('experts')} is not a multiple "
         f"of ranks ({v('ranks')}); experts are placed experts/ranks per die")
    # store ids are 32-bit in the kernel: a bound far above any superpod's dispatch
    copies = c["ranks"].astype(np.int64) * copies_per_die(c["batch"], c["topk"])
    fail("batch", copies > MAX_COPIES, lambda v: f"ranks x batch x topk = "
         f"{v('ranks') * v('batch') * v('topk')} token copies; at most {MAX_COPIES} are supported")
    fail("topk", c["topk"] > c["experts"], lambda v: f"{v('topk')} exceeds experts "
         f"({v('experts')}); a token's experts are distinct")
    # only ubep's dispatch reads cumsum_cores
    fail("cumsum_cores", GATED["cumsum_cores"].reads(c) & (c["cumsum_cores"] >= c["cores"]),
         lambda v: f"{v('cumsum_cores')} is not allowed with cores {v('cores')} (at least one "
         f"core must send tokens); give {TUNABLE_ALLOWED}")


def _check_routing(c: dict[str, np.ndarray], fail: Callable) -> None:
    """At least topk experts with traffic, after the hot experts' share and the zero-load
    experts and ranks."""
    routing = c["routing"].astype(np.int64)
    hot = routing == Routing.hot
    fail("hot_experts", hot & (c["hot_experts"] > c["experts"]), lambda v: f"{v('hot_experts')} "
         f"exceeds experts ({v('experts')})")
    cold = c["experts"] - c["hot_experts"]
    with_traffic = np.where(c["hot_share"] > 0, c["hot_experts"], 0) + \
        np.where(c["hot_share"] < 1, cold, 0)
    fail("hot_share", hot & (c["topk"] > with_traffic), lambda v: f"{v('hot_share')} leaves "
         f"fewer experts with traffic than topk ({v('topk')})")
    # zero load: at least topk experts keep some (the hot experts' rule's count, less every
    # expert the zero-load keys could take)
    drawn = routing != Routing.trace
    fail("zero_ranks", drawn & (c["zero_ranks"] >= c["ranks"]), lambda v: f"{v('zero_ranks')} "
         f"must be below ranks ({v('ranks')}); some die must hold experts with tokens")
    loaded = np.where(hot, with_traffic, c["experts"]) - \
        routings.zero_count(c["zero_experts"], c["experts"]) - \
        c["zero_ranks"] * (c["experts"] // c["ranks"])
    fail("zero_experts", drawn & (loaded < c["topk"]), lambda v: f"{v('zero_experts')} with "
         f"zero_ranks {v('zero_ranks')} leaves fewer experts with tokens than topk ({v('topk')})")


def _check_batches(c: dict[str, np.ndarray], fail: Callable) -> None:
    """The batches' spread, where it is read (GATED): some die holds tokens, and a list gives
    one token count per rank."""
    fail("zero_token_share", GATED["zero_token_share"].reads(c) & (c["zero_token_share"] >= 1),
         lambda v: f"{v('zero_token_share')} leaves no die with tokens; it must be below 1")
    listed = GATED["batches"].reads(c)
    texts, at = np.unique(c["batches"].astype(str).ravel(), return_inverse=True)
    lengths = np.array([len(int_list(t)) for t in texts])[at]
    fail("batches", listed & (lengths == 0), lambda v: f"none given; batch_spread = list takes "
         f"one token count per rank ({v('ranks')})")
    fail("batches", listed & (lengths != c["ranks"]), lambda v: f"{len(int_list(v('batches')))} "
         f"entries; batch_spread = list takes one per rank ({v('ranks')})")


def _check_trace(c: dict[str, np.ndarray], fail: Callable, source: str | None,
                 check_trace: bool) -> None:
    """A trace file exactly where routing = trace reads one; and (check_trace) each file once,
    against its configuration's sizes."""
    routing = c["routing"].astype(np.int64)
    has_trace = np.array([bool(t) for t in c["trace"].ravel()])
    fail("trace", (routing == Routing.trace) & ~has_trace,
         lambda v: "routing = trace needs a trace file")
    fail("trace", (routing != Routing.trace) & has_trace,
         lambda v: "a trace file is only read with routing = trace")
    if check_trace:
        seen = set()
        for i in np.flatnonzero(routing == Routing.trace):
            key = (str(c["trace"][i]), *(int(c[k][i]) for k in ("ranks", "batch", "topk",
                                                                   "experts")))
            if key not in seen:
                seen.add(key)
                check_trace_file(*key, source)
