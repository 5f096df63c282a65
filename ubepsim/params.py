"""The model's parameters: one name per concept, shared by TOML keys, CLI flags and Parquet columns.

Each parameter carries its own help text, the single source for `--help`, the README and the
validation messages. Variants are IntEnums whose values are the integer codes the kernels use.
"""

from __future__ import annotations

import dataclasses
import enum
import hashlib
from pathlib import Path
from typing import Any

from .errors import InputError


class Protocol(enum.IntEnum):
    bsp = 0   # CANN EP: every AIV in every phase, SyncAll between phases (paper Fig. 2, 5(a))
    ubep = 1  # kernel decomposition: CalCumSum group beside the token group (paper Fig. 5(b))


class Sync(enum.IntEnum):
    sw = 0    # stop-and-wait: payload, fence, separate flag (paper Section 3.4)
    tff = 1   # token-flag fusion: 32 B flag inside each 512 B block
    dc = 2    # data-for-checksum: one checksum per batch after its blocks
    sp = 3    # sentinel polling: receiver polls the block itself, re-arms it after use


class Schedule(enum.IntEnum):
    expert_block = 0  # each AIV owns a block of experts (CANN EP hot spots)
    balanced = 1      # equal contiguous slices of the copies in expert order (topology-blind)
    homogenized = 2   # logical matrix transposition: balanced hop-class mix per AIV (Section 3.3)


class Routing(enum.IntEnum):
    uniform = 0
    zipf = 1
    hot = 2
    trace = 3


class Dtype(enum.IntEnum):
    bf16 = 0
    fp8 = 1
    int8 = 2


ENUMS: dict[str, type[enum.IntEnum]] = {
    "protocol": Protocol,
    "sync": Sync,
    "schedule": Schedule,
    "routing": Routing,
    "dtype": Dtype,
}


def token_bytes(hidden: int, dtype: Dtype | int) -> int:
    """Bytes of one token copy: activations plus quantization scales.

    fp8 carries one fp32 scale per 128-element group (DeepEP's layout); int8 (W8A8) one fp32
    scale per token.
    """
    dtype = Dtype(dtype)
    if dtype is Dtype.bf16:
        return 2 * hidden
    if dtype is Dtype.fp8:
        return hidden + 4 * -(-hidden // 128)
    return hidden + 4


@dataclasses.dataclass(frozen=True)
class Param:
    name: str
    kind: type          # int, float, str (enum choice) or Path
    default: Any
    help: str
    minimum: float | None = None
    maximum: float | None = None

    @property
    def flag(self) -> str:
        return "--" + self.name.replace("_", "-")

    @property
    def choices(self) -> list[str] | None:
        return [m.name for m in ENUMS[self.name]] if self.name in ENUMS else None


# The paper's sensitivity setup (Section 5, Figure 7): 128 ranks, batch 64, top-8, one expert per
# die, hidden 7168; full UBEP. `experts` and `aivs` default to "one per rank" and the profile's.
PARAMS: tuple[Param, ...] = (
    Param("ranks", int, 128, "EP ranks (= dies).", 1, 65536),
    Param("batch", int, 64, "Tokens per rank.", 1, 1 << 20),
    Param("topk", int, 8, "Experts each token is routed to (distinct).", 1, 4096),
    Param("experts", int, None, "Routed experts in all, placed experts/ranks per die "
          "(default: one per rank).", 1, 1 << 20),
    Param("hidden", int, 7168, "Hidden size: elements per token.", 1, 1 << 24),
    Param("dtype", str, "bf16", "Token element type: bf16 (2 B), fp8 (1 B + fp32 scale per "
          "128 elements), int8 (1 B + one fp32 scale per token)."),
    Param("aivs", int, None, "AIVs per die (default: the profile's).", 2, 4096),
    Param("cumsum_aivs", int, 4, "AIVs in UBEP's CalCumSum group (the rest send tokens); "
          "bsp ignores it, every AIV runs every phase.", 1, 4095),
    Param("protocol", str, "ubep", "bsp (CANN EP, SyncAll between phases) or ubep "
          "(kernel decomposition, point-to-point signals)."),
    Param("sync", str, "sp", "Data-as-Flag variant of every signal: sw (stop-and-wait), tff "
          "(token-flag fusion), dc (data-for-checksum), sp (sentinel polling)."),
    Param("schedule", str, "homogenized", "Token-to-AIV schedule: expert_block, balanced, "
          "homogenized."),
    Param("routing", str, "uniform", "Routing generator: uniform, zipf, hot, trace."),
    Param("zipf_s", float, 1.0, "Zipf exponent of expert popularity (routing = zipf).", 0.0, 16.0),
    Param("hot_experts", int, 8, "Number of hot experts (routing = hot).", 1, 1 << 20),
    Param("hot_share", float, 0.5, "Share of token copies the hot experts take (routing = hot).",
          0.0, 1.0),
    Param("trace", Path, "", "Routing trace, Parquet with columns rank, token, k, expert "
          "(routing = trace)."),
    Param("seed", int, 0, "Seed of the counter-based routing generator.", 0, (1 << 63) - 1),
)

PARAM_BY_NAME = {p.name: p for p in PARAMS}
NAMES = tuple(p.name for p in PARAMS)
# Parameters that decide routing: the generator is keyed by them, so protocols, schedules and sync
# variants compared at the same seed see the same token copies.
WORKLOAD_NAMES = ("ranks", "batch", "topk", "experts", "routing", "zipf_s", "hot_experts",
                  "hot_share", "trace", "seed")


@dataclasses.dataclass(frozen=True)
class Config:
    """One validated configuration; every field is resolved (no None)."""

    ranks: int
    batch: int
    topk: int
    experts: int
    hidden: int
    dtype: Dtype
    aivs: int
    cumsum_aivs: int
    protocol: Protocol
    sync: Sync
    schedule: Schedule
    routing: Routing
    zipf_s: float
    hot_experts: int
    hot_share: float
    trace: str
    seed: int

    def as_dict(self) -> dict[str, Any]:
        """Plain values, enums as their names: the form of TOML, JSON and Parquet."""
        return {n: (v.name if isinstance(v, enum.Enum) else v)
                for n, v in dataclasses.asdict(self).items()}

    @property
    def token_bytes(self) -> int:
        return token_bytes(self.hidden, self.dtype)

    @property
    def config_id(self) -> int:
        return stable_id(self.as_dict(), NAMES)

    @property
    def workload_key(self) -> int:
        return stable_id(self.as_dict(), WORKLOAD_NAMES)


def stable_id(values: dict[str, Any], names: tuple[str, ...]) -> int:
    """A 63-bit hash of the named values, stable across runs, machines and Python versions."""
    text = "|".join(f"{n}={_canonical(values[n])}" for n in names)
    return int.from_bytes(hashlib.blake2b(text.encode(), digest_size=8).digest(), "little") >> 1


def _canonical(v: Any) -> str:
    if isinstance(v, enum.Enum):
        return v.name
    if isinstance(v, float):
        return repr(float(v))
    return str(v)


def coerce(name: str, value: Any, source: str | None = None) -> Any:
    """One value of parameter `name`, type-checked; raises InputError naming the key."""
    if name not in PARAM_BY_NAME:
        raise InputError(name, f"unknown parameter; allowed: {', '.join(NAMES)}", source)
    p = PARAM_BY_NAME[name]
    if value is None:
        return None
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
                raise InputError(name, f"expected an integer, got {value!r}", source)
    elif p.kind is float:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise InputError(name, f"expected a number, got {value!r}", source)
        value = float(value)
    elif p.kind is Path:
        if not isinstance(value, (str, Path)):
            raise InputError(name, f"expected a file path, got {value!r}", source)
        return str(value)
    if p.minimum is not None and value < p.minimum:
        raise InputError(name, f"{value!r} is below the minimum {_fmt(p.minimum)}", source)
    if p.maximum is not None and value > p.maximum:
        raise InputError(name, f"{value!r} is above the maximum {_fmt(p.maximum)}", source)
    return value


def _fmt(x: float) -> str:
    return str(int(x)) if float(x).is_integer() else str(x)


def make_config(values: dict[str, Any], aivs_default: int, source: str | None = None,
                check_trace: bool = True) -> Config:
    """Validate one point: types, ranges and the cross-parameter rules of the model."""
    resolved: dict[str, Any] = {}
    for name in values:
        if name not in PARAM_BY_NAME:
            raise InputError(name, f"unknown parameter; allowed: {', '.join(NAMES)}", source)
    for p in PARAMS:
        v = values.get(p.name, p.default)
        resolved[p.name] = coerce(p.name, v if v is not None else p.default, source)
    if resolved["experts"] is None:
        resolved["experts"] = resolved["ranks"]
    if resolved["aivs"] is None:
        resolved["aivs"] = aivs_default
    r = resolved
    if r["experts"] % r["ranks"]:
        raise InputError("experts", f"{r['experts']} is not a multiple of ranks ({r['ranks']}); "
                         "experts are placed experts/ranks per die", source)
    if r["topk"] > r["experts"]:
        raise InputError("topk", f"{r['topk']} exceeds experts ({r['experts']}); a token's "
                         "experts are distinct", source)
    if r["cumsum_aivs"] >= r["aivs"]:
        raise InputError("cumsum_aivs", f"{r['cumsum_aivs']} must be below aivs ({r['aivs']}); "
                         "at least one AIV must send tokens", source)
    if r["routing"] is Routing.hot:
        if r["hot_experts"] > r["experts"]:
            raise InputError("hot_experts", f"{r['hot_experts']} exceeds experts "
                             f"({r['experts']})", source)
        cold = r["experts"] - r["hot_experts"]
        with_traffic = (r["hot_experts"] if r["hot_share"] > 0 else 0) + \
            (cold if r["hot_share"] < 1 else 0)
        if r["topk"] > with_traffic:
            raise InputError("hot_share", f"{r['hot_share']} leaves {with_traffic} experts with "
                             f"traffic, fewer than topk ({r['topk']})", source)
    if r["routing"] is Routing.trace:
        if not r["trace"]:
            raise InputError("trace", "routing = trace needs a trace file", source)
        if check_trace:
            from .workload import check_trace_file
            check_trace_file(r["trace"], r["ranks"], r["batch"], r["topk"], r["experts"], source)
    elif r["trace"]:
        raise InputError("trace", "a trace file is only read with routing = trace", source)
    return Config(**r)
