"""Hardware profiles: TOML `[hardware]` tables, the built-in `cm384` and files that override it.

Every key is declared once in FIELDS with its type, bounds and help; an unknown or ill-typed key
is an error naming it. Time is simulated in integer cycles of `clock_ghz`; `cycles()` and
`transfer_cycles()` are the only conversions from nanoseconds and bytes.
"""

from __future__ import annotations

import copy
import dataclasses
import math
import tomllib
from importlib import resources
from pathlib import Path
from typing import Any

from ..errors import InputError, renamed
from ..kernels.layout import HOP_CLASSES
from ..files import toml_value

# HOP_CLASSES, nearest first, are the kernel's: a pair of dies is `local` (same die), `intra_npu`
# (same NPU), or k-hop where k is the number of switch tiers its path climbs (paper Section 2.3).
# A profile's latency_ns holds one latency per class.
MAX_TIERS = len(HOP_CLASSES) - 3  # tier_sizes lists all tiers but the top one
MAX_TIER_DIES = 1 << 20  # far above any EP size (ranks <= 16384): a larger tier is no tier
MAX_LATENCY_NS = 1e9  # one second: far above any fabric, and cycle counts stay in int64
MIN_GBPS, MAX_GBPS = 0.001, 1e6   # a port's or a link's bandwidth


@dataclasses.dataclass(frozen=True)
class Field:
    kind: type
    help: str
    minimum: float = 0.0
    maximum: float = math.inf
    # A mechanism's key: the value at which the mechanism vanishes (the model without it, as
    # `ubepsim validate --ablation` runs it), and where its physical meaning comes from.
    vanish: Any = None
    source: str = ""


FIELDS: dict[str, Field] = {
    "clock_ghz": Field(float, "core clock, cycles per nanosecond", 0.01, 100.0),
    "dies": Field(int, "dies of the machine: the most ranks it runs", 1, 16384),
    "cores": Field(int, "cores per die: instruction streams, AIVs on Ascend, warp groups on "
                   "a GPU", 2, 4096),
    "npu_dies": Field(int, "dies per NPU (1: no intra_npu class)", 1, 64),
    "tier_sizes": Field(list, "dies per switch domain of each tier below the top one, "
                        "ascending, each a multiple of the one before and of npu_dies"),
    "tier_gbps": Field(list, "bandwidth of each switch domain's uplink to the tier above it, "
                       "GB/s each way, in tier_sizes' order: a store that climbs out of a "
                       "domain queues on its source domain's uplink and its destination "
                       "domain's downlink, where the uplink is slower than the ports of the "
                       "domain's dies together (oversubscribed); a tier left out never queues"),
    "rails": Field(int, "rail-optimized switching above the first tier: the dies of a first-tier "
                   "domain (a node), each on a rail of its own; a domain above it joins two "
                   "dies only on the same rail (the same index in their nodes), others climb "
                   "one tier more (0: no rails)", 0, 4096),
    "nic_gbps": Field(float, "bandwidth of each die's NIC, GB/s each way (0: no NIC): stores of "
                      "hop class nic_from and above leave and enter through the NIC instead of "
                      "the die's egress and ingress ports", 0.0, 1e6),
    "nic_from": Field(str, "the nearest hop class whose stores use the NIC (with nic_gbps > 0); "
                      "one of " + ", ".join(HOP_CLASSES[1:])),
    "nic_message_ns": Field(float, "the NIC's fixed time per store it sends or takes in, ns, "
                            "beside its bytes (its work request, doorbell and completion)",
                            0.0, 1e6),
    "block_bytes": Field(int, "atomic remote-store unit, bytes", 64, 1 << 16),
    "flag_bytes": Field(int, "flag / marker / sentinel field inside a block, bytes", 1, 1 << 15),
    "atomic_bytes": Field(int, "the largest store the fabric writes whole, so that a receiver "
                          "never sees part of it, bytes (0: none): Data-as-Flag's tff and sp "
                          "need block_bytes (paper Table 5)", 0, 1 << 16),
    "blocks_in_flight": Field(int, "blocks of stores one core may have outstanding; credits "
                              "return in issue order", 1, 1 << 16),
    "egress_gbps": Field(float, "die egress port bandwidth, GB/s", MIN_GBPS, MAX_GBPS),
    "ingress_gbps": Field(float, "die ingress port bandwidth, GB/s", MIN_GBPS, MAX_GBPS),
    "core_store_gbps": Field(float, "rate one core issues store data from its local buffer "
                             "(an AIV's UBuf), GB/s", 0.001, 1e6),
    "core_copy_gbps": Field(float, "rate of one core's local HBM<->buffer copies, GB/s", 0.001,
                            1e6),
    "store_issue_cycles": Field(int, "fixed cycles to issue one store", 0, 1e7),
    "init_cycles": Field(int, "per-core kernel setup cycles before any work", 0, 1e9),
    "launch_skew_ns": Field(float, "the spread of the dies' kernel launches, ns: each die "
                            "starts at a uniform draw of its own in [0, launch_skew_ns), less "
                            "the earliest die's, and its receivers wait for their last sender "
                            "(0: every die starts at once)", 0.0, 1e9),
    "vector_op_cycles": Field(int, "fixed cycles of one vector instruction", 0, 1e7),
    "vector_bytes": Field(int, "bytes of elements a vector instruction handles per cycle (a "
                          "repeat)", 1, 1 << 16),
    "prefix_cycles": Field(int, "prefix-sum cycles per count entry", 0, 1e7),
    "syncall_cycles": Field(int, "cycles of one SyncAll after the last AIV arrives", 0, 1e9),
    "flag_check_cycles": Field(int, "cycles to verify one block's flag/marker/sentinel", 0, 1e7),
    "sentinel_reset_cycles": Field(int, "cycles to re-arm one block's sentinel (sp)", 0, 1e7),
    "sentinel_collision_prob": Field(float, "chance a block's payload equals the sentinel (sp)",
                                     0.0, 1.0),
    "sentinel_timeout_ns": Field(float, "polling time before a collided block is taken by the "
                                 "fallback path (sp)", 0.0, 1e9),
    # Per-destination and per-source costs of CANN's dispatch kernel (docs/model.md, "Costs per
    # destination and per source"): what makes CalCumSum's work grow as ranks / group size.
    "dest_switch_cycles": Field(
        int, "cycles a core spends on a store to another destination than its previous "
        "store's: the destination window's address, a chain of two dependent scalar loads",
        0, 1e7, vanish=0,
        source="CANN ops-transformer, moe_distribute_base.h GetBaseWindAddrByRankId: "
               "remoteRes[rankId].nextDevicePtr -> windowsIn"),
    "count_chain_cycles": Field(
        int, "cycles of the vector chain that counts one expert's token copies before its "
        "count is stored (five vector ops, four pipe barriers, a vector-to-scalar sync and a "
        "scalar read), beside the VectorCount itself", 0, 1e7, vanish=0,
        source="CANN ops-transformer, moe_distribute_dispatch.h CalTokenSendExpertCnt, "
               "called per expert by SetStatus"),
    "status_poll_cycles": Field(
        int, "cycles a polling AIV spends on each source's count status once it is there "
        "(strided read of the 32-byte status, GatherMask, Sum, vector-to-scalar sync)",
        0, 1e7, vanish=0,
        source="CANN ops-transformer, moe_distribute_dispatch.h WaitDispatch"),
    "latency_ns": Field(dict, "remote access latency by hop class, ns: keys "
                        + ", ".join(HOP_CLASSES)),
}


# Keys of mechanisms that can be switched off (their `vanish` value), in FIELDS order.
MECHANISMS = tuple(k for k, f in FIELDS.items() if f.vanish is not None)


@dataclasses.dataclass(frozen=True)
class Profile:
    """A resolved hardware profile: `values` holds every FIELDS key."""

    name: str
    values: dict[str, Any]

    def __getattr__(self, key: str) -> Any:
        try:
            return self.__dict__["values"][key]
        except KeyError:
            raise AttributeError(key) from None

    def cycles(self, ns: float) -> int:
        """Nanoseconds to whole cycles, rounded up."""
        return int(math.ceil(ns * self.values["clock_ghz"] - 1e-9))

    def transfer_cycles(self, nbytes: int, gbps: float) -> int:
        """Cycles to move `nbytes` at `gbps` GB/s (= bytes per ns), rounded up."""
        return int(math.ceil(nbytes * self.values["clock_ghz"] / gbps - 1e-9))

    @property
    def writes_blocks_whole(self) -> bool:
        """Whether the fabric writes a block whole (atomic_bytes >= block_bytes), which
        Data-as-Flag's tff and sp need (paper Table 5)."""
        return self.values["atomic_bytes"] >= self.values["block_bytes"]

    def latency_cycles(self) -> list[int]:
        return [self.cycles(self.values["latency_ns"].get(h, 0.0)) for h in HOP_CLASSES]

    def to_toml(self) -> str:
        lines = ["[hardware]"]
        for key in FIELDS:
            if key != "latency_ns":
                lines.append(f"{key} = {toml_value(self.values[key])}")
        lines.append("")
        lines.append("[hardware.latency_ns]")
        for h, v in self.values["latency_ns"].items():
            lines.append(f"{h} = {toml_value(v)}")
        return "\n".join(lines) + "\n"


# Built-in profiles (ubepsim/profiles/<name>.toml): cm384 the calibrated one; the others are
# presets of other fabrics, each naming the keys it takes from cm384.
BUILTIN = ("cm384", "cm384_pod", "three_tier", "cm384_oversubscribed", "h800")
# What a profile file may hold: its [hardware] table, and the keys it takes from a built-in
# profile ([takes]: profile = [keys], or "*" for every key the file does not set).
TABLES = ("hardware", "takes")
EVERY_OTHER = "*"


def builtin_values(name: str = "cm384") -> dict[str, Any]:
    """A built-in profile's resolved values."""
    return load_profile(name).values


def _builtin_doc(name: str) -> dict[str, Any]:
    return tomllib.loads(resources.files("ubepsim").joinpath("profiles", f"{name}.toml")
                        .read_text())


def load_profile(spec: str | Path = "cm384", overrides: dict[str, Any] | None = None,
                 source: str | None = None, key: str = "profile") -> Profile:
    """A built-in name or a TOML file with a [hardware] table, then `overrides` on top.

    A file sets every key, or names in [takes] those it takes from a built-in profile (never
    silently: a fitted cost means the machine it was fitted on). An error in the file names the
    file and its hardware.* key; one in `overrides` (a grid's [profile] table) names `source`
    and profile.*; `key` is what names the spec itself (the flag or grid key it came from).
    """
    name = str(spec)
    if name in BUILTIN:
        values = _resolve(_builtin_doc(name), f"the built-in profile {name}", key, source, (name,))
    else:
        path = Path(spec)
        what = (f"give a built-in profile ({', '.join(BUILTIN)}) or a TOML file with a "
                f"[hardware] table")
        if not name.strip():
            raise InputError(key, f"is empty; {what}", source)
        try:
            doc = tomllib.loads(path.read_text())
        except OSError as e:
            raise InputError(key, f"cannot read {path}: {e.strerror or e}; {what}",
                             source) from None
        except UnicodeDecodeError:
            raise InputError(key, f"{path} is not a text file; {what}", source) from None
        except tomllib.TOMLDecodeError as e:
            raise InputError(key, f"{path} is not valid TOML: {e}", source) from None
        values = _resolve(doc, str(path), key, source, ())
        name = str(path)   # as given: a file cm384.toml elsewhere is not the built-in cm384
    if overrides:
        _merge(values, overrides, "profile", source)
    _check(values, "profile", source)
    return Profile(name, values)


def _resolve(doc: dict[str, Any], where: str, key: str, source: str | None,
             seen: tuple[str, ...]) -> dict[str, Any]:
    """A profile document's values: its [hardware] keys, and those it takes from built-in
    profiles ([takes]); every key must come from one of them."""
    what = "a profile file holds one [hardware] table and a [takes] table"
    if set(doc) - set(TABLES):
        raise InputError(key, f"{where}: unknown key(s) outside [hardware]: "
                         f"{', '.join(sorted(set(doc) - set(TABLES)))}; {what}", source)
    hardware = doc.get("hardware")
    if not isinstance(hardware, dict):
        found = "no [hardware] table" if hardware is None else "a hardware key, not a table"
        raise InputError(key, f"{where} has {found}; give a built-in profile "
                         f"({', '.join(BUILTIN)}) or a TOML file with a [hardware] table",
                         source)
    takes = doc.get("takes", {})
    if not isinstance(takes, dict):
        raise InputError("takes", f"expected a table of built-in profile = [keys] or "
                         f"\"{EVERY_OTHER}\"", where)
    values: dict[str, Any] = {"latency_ns": {}}
    every_other = None
    for base, keys in takes.items():
        if base not in BUILTIN or base in seen:
            raise InputError(f"takes.{base}", f"not a built-in profile this one can take from; "
                             f"allowed: {', '.join(b for b in BUILTIN if b not in seen)}", where)
        taken = _resolve(_builtin_doc(base), f"the built-in profile {base}", key, source,
                         (*seen, base))
        if keys == EVERY_OTHER:
            every_other = taken
            continue
        if not isinstance(keys, list) or not all(isinstance(k, str) for k in keys):
            raise InputError(f"takes.{base}", f"expected a list of hardware keys or "
                             f"\"{EVERY_OTHER}\", got {keys!r}", where)
        for k in keys:
            field, _, hop = k.partition(".")
            if field not in FIELDS or (hop and (field != "latency_ns" or hop not in
                                                HOP_CLASSES)):
                raise InputError(f"takes.{base}", f"unknown hardware key {k!r}{renamed(k)}; "
                                 f"allowed: "
                                 f"{', '.join(FIELDS)}, or latency_ns.<hop class>", where)
            if hop:
                values["latency_ns"][hop] = taken["latency_ns"][hop]
            elif field == "latency_ns":
                values["latency_ns"].update(taken["latency_ns"])
            else:
                values[field] = copy.deepcopy(taken[field])
    twice = sorted(k for k in hardware if k in values and k != "latency_ns")
    if isinstance(hardware.get("latency_ns"), dict):
        twice += sorted(f"latency_ns.{h}" for h in hardware["latency_ns"]
                        if h in values["latency_ns"])
    if twice:
        raise InputError(f"hardware.{twice[0]}", "is set here and taken in [takes] too; "
                         "give it once", where)
    _merge(values, hardware, "hardware", where)
    if every_other is not None:
        for k, v in every_other.items():
            if k == "latency_ns":
                values["latency_ns"] = {**v, **values["latency_ns"]}
            elif k not in values:
                values[k] = copy.deepcopy(v)
    missing = [k for k in FIELDS if k not in values]
    if not values["latency_ns"]:
        missing.append("latency_ns")
    if missing:
        raise InputError("hardware", f"{where} sets neither {', '.join(missing)} nor takes "
                         f"them from a built-in profile: set them in [hardware], or name where "
                         f"they come from in [takes] (cm384 = [...], or cm384 = "
                         f"\"{EVERY_OTHER}\" for every key not set)", where)
    _check(values, "hardware", where)
    return values


def _merge(values: dict[str, Any], new: dict[str, Any], table: str, source: str | None
           ) -> None:
    for key, v in new.items():
        if key not in FIELDS:
            raise InputError(f"{table}.{key}", f"unknown hardware key{renamed(key)}; allowed: "
                             f"{', '.join(FIELDS)}", source)
        if key == "latency_ns":
            if not isinstance(v, dict):
                raise InputError(f"{table}.latency_ns", "expected a table of hop class = ns",
                                 source)
            values["latency_ns"] = {**values.get("latency_ns", {}), **v}
        else:
            values[key] = v


def _check(values: dict[str, Any], table: str, source: str | None) -> None:
    for key, f in FIELDS.items():
        v = values[key]
        name = f"{table}.{key}"
        if f.kind is str and not isinstance(v, str):
            raise InputError(name, f"expected a string ({f.help}), got {v!r}", source)
        if f.kind is int:
            if isinstance(v, bool) or not isinstance(v, int):
                raise InputError(name, f"expected an integer ({f.help}), got {v!r}", source)
        elif f.kind is float:
            if isinstance(v, bool) or not isinstance(v, (int, float)):
                raise InputError(name, f"expected a number ({f.help}), got {v!r}", source)
        # compared before any float(): an int past the floats' range would make that raise
        if f.kind in (int, float) and not (f.minimum <= v <= f.maximum):
            raise InputError(name, f"{v!r} is outside [{f.minimum:g}, {f.maximum:g}] ({f.help})",
                             source)
        if f.kind is float:
            values[key] = float(v)
    for h, ns in values["latency_ns"].items():
        if h not in HOP_CLASSES:
            raise InputError(f"{table}.latency_ns.{h}", f"unknown hop class; allowed: "
                             f"{', '.join(HOP_CLASSES)}", source)
        if isinstance(ns, bool) or not isinstance(ns, (int, float)) or \
                not 0 <= ns <= MAX_LATENCY_NS:
            raise InputError(f"{table}.latency_ns.{h}", f"expected a latency in [0, "
                             f"{MAX_LATENCY_NS:g}] ns, got {ns!r}", source)
        values["latency_ns"][h] = float(ns)
    tiers = values["tier_sizes"]
    if not isinstance(tiers, list) or len(tiers) > MAX_TIERS or not all(
            isinstance(t, int) and not isinstance(t, bool) and 1 <= t <= MAX_TIER_DIES
            for t in tiers):
        raise InputError(f"{table}.tier_sizes", f"expected a list of at most {MAX_TIERS} "
                         f"integers in [1, {MAX_TIER_DIES}], got {tiers!r}", source)
    below = values["npu_dies"]
    for t in tiers:
        if t <= below or t % below:
            raise InputError(f"{table}.tier_sizes", f"{t} must exceed and be a multiple of the "
                             f"level below ({below})", source)
        below = t
    gbps = values["tier_gbps"]
    if not isinstance(gbps, list) or len(gbps) > len(tiers) or not all(
            isinstance(g, (int, float)) and not isinstance(g, bool) and
            MIN_GBPS <= g <= MAX_GBPS for g in gbps):
        raise InputError(f"{table}.tier_gbps", f"expected a list of at most one bandwidth per "
                         f"tier of tier_sizes ({len(tiers)}), each in [{MIN_GBPS:g}, "
                         f"{MAX_GBPS:g}] GB/s, got {gbps!r}", source)
    values["tier_gbps"] = [float(g) for g in gbps]
    if values["nic_from"] not in HOP_CLASSES[1:]:
        raise InputError(f"{table}.nic_from", f"unknown hop class {values['nic_from']!r}; "
                         f"allowed: {', '.join(HOP_CLASSES[1:])}", source)
    if values["rails"] and (not tiers or values["rails"] != tiers[0]):
        raise InputError(f"{table}.rails", f"{values['rails']} must be the first tier's dies "
                         f"(tier_sizes[0]: {tiers[0] if tiers else 'none'}), one rail each, "
                         f"or 0", source)
    if values["rails"] and len(values["tier_gbps"]) > 1:
        raise InputError(f"{table}.rails", "rails with an oversubscribed tier above the first "
                         "(tier_gbps) are not modelled: a rail's uplink is not a domain's",
                         source)
    if values["nic_gbps"] and values["nic_gbps"] < MIN_GBPS:
        raise InputError(f"{table}.nic_gbps", f"{values['nic_gbps']!r} is below {MIN_GBPS:g} "
                         f"GB/s; 0 means no NIC", source)
    if values["flag_bytes"] >= values["block_bytes"]:
        raise InputError(f"{table}.flag_bytes", "must be smaller than block_bytes", source)
    needed = HOP_CLASSES[: 3 + len(tiers)]
    missing = [h for h in needed if h not in values["latency_ns"]]
    if missing:
        raise InputError(f"{table}.latency_ns", f"missing {', '.join(missing)} for this fabric",
                         source)
