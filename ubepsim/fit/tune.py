"""The best CalCumSum group size per workload, beside Appendix A's analytic prediction.

For each row (a UBEP configuration without its `cumsum_cores`), every group size from 1 to
`max_cumsum_cores` is simulated, for every seed; the row's best size is the one of least mean
latency (the smaller on a tie), and `best_seeds` counts the seeds whose own best it is. The
sizes, the simulation and the pick are ubepsim.model.groups', which `cumsum_cores = "tuned"`
shares: a tuned configuration runs the size tune picks for its workload at its seed.
Appendix A balances the two AIV groups,
T_count = beta N_exp / n_count against T_token = alpha K B / (n - n_count), and with
n - n_count ~ n predicts n_count ~ (beta / alpha) n N_exp / (K B); beta / alpha is fitted over
the rows, by least squares on the logarithms (group sizes from 1 to 16 count alike).
"""

from __future__ import annotations

import dataclasses
import itertools
import math
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl

from ..errors import InputError
from ..files import toml_value, write_parquet, write_text
from ..model.groups import group_latencies, max_groups, pick
from ..model.params import NAMES, config_columns, make_config
from ..model.profile import Profile
from ..version import __version__

KEYS = ("ranks", "batch", "experts", "topk")
OUT_FORMATS = (".toml", ".parquet")


@dataclasses.dataclass
class Tuning:
    table: pl.DataFrame          # one row per workload (see `tune`)
    beta_over_alpha: float
    constants: dict[str, Any]    # parameters shared by every row
    seeds: list[int]
    max_cumsum_cores: int
    profile: str                 # the profile's name (built-in or file)
    hardware: str                # the resolved profile as TOML, overrides included


@dataclasses.dataclass
class SmTuning:
    table: pl.DataFrame          # one row per workload (see `tune_sms`)
    constants: dict[str, Any]    # parameters shared by every row
    seeds: list[int]
    max_sms: int
    profile: str
    hardware: str


def rows_from_lists(lists: dict[str, list[Any]], fixed: dict[str, Any],
                    cores_default: int, protocol: str = "ubep",
                    sync_default: str | None = None) -> list[dict[str, Any]]:
    """Every combination of the listed values (ranks slowest), with the fixed parameters;
    each checked as a configuration of `protocol` (experts default to one per rank; cores and
    sync to the profile's, as make_config takes them)."""
    names = [n for n in KEYS if n in lists]
    for n in names:
        distinct(n, lists[n])
    rows = []
    for combo in itertools.product(*(lists[n] for n in names)):
        values = {**fixed, **dict(zip(names, combo)), "protocol": protocol, "cumsum_cores": 1}
        rows.append(resolved_row(values, cores_default, sync_default))
    return rows


def distinct(name: str, values: list[Any]) -> list[Any]:
    """The values of a listed flag, refused if one appears twice (a workload tuned twice)."""
    if len(set(values)) != len(values):
        raise InputError(name, f"a value appears twice in {', '.join(map(str, values))}")
    return values


def resolved_row(values: dict[str, Any], cores_default: int,
                 sync_default: str | None = None) -> dict[str, Any]:
    """A checked configuration without the two parameters tune varies itself."""
    row = make_config(values, cores_default, sync_default=sync_default).as_dict()
    row.pop("cumsum_cores")
    row.pop("seed")
    return row


def default_max_cumsum_cores(rows: list[dict[str, Any]]) -> int:
    """The group sizes every row can run (max_groups of the fewest AIVs)."""
    return max_groups(min(r["cores"] for r in rows))


def tune(rows: list[dict[str, Any]], seeds: list[int], profile: Profile,
         max_cumsum_cores: int | None = None, threads: int | None = None) -> Tuning:
    """Simulate every row at group sizes 1..max_cumsum_cores (default: default_max_cumsum_cores)
    and every seed; pick the best (groups.pick). A maximum the caller chose that some row cannot
    run is an error, never quietly lowered."""
    if max_cumsum_cores is None:
        max_cumsum_cores = default_max_cumsum_cores(rows)
    for row in rows:
        if max_cumsum_cores >= row["cores"]:
            raise InputError("--max-cumsum-cores", f"{max_cumsum_cores} must be below cores "
                             f"({row['cores']}); at least one AIV must send tokens")
    sizes = range(1, max_cumsum_cores + 1)
    workloads = config_columns([{**row, "cumsum_cores": 1, "seed": s}
                                for row in rows for s in seeds])
    per_seed = group_latencies(workloads, sizes, profile, threads).reshape(
        len(rows), len(seeds), len(sizes))
    # (workloads, sizes, seeds), laid out so that each mean adds the seeds in one order
    per_seed = np.ascontiguousarray(per_seed.transpose(0, 2, 1))
    best, latency = pick(per_seed)    # the first minimum: the smaller group on a tie
    # how decisive the best is: near it the latency is flat, and each seed may pick its own
    agreeing = (per_seed.argmin(axis=1) == best[:, None]).sum(axis=1)
    x = np.array([r["cores"] * r["experts"] / (r["topk"] * r["batch"]) for r in rows])
    ratio = float(np.exp(np.mean(np.log(best + 1.0) - np.log(x))))
    varying, constants = _split(rows, "cumsum_cores")

    def at(i: int, c: int) -> float | None:
        return float(latency[i, c - 1]) if 1 <= c <= max_cumsum_cores else None

    table = pl.DataFrame({
        **{n: [r[n] for r in rows] for n in varying},
        "best_cumsum_cores": [int(b) + 1 for b in best],
        "latency_us": [float(latency[i, b]) for i, b in enumerate(best)],
        "latency_below_us": [at(i, int(b)) for i, b in enumerate(best)],
        "latency_above_us": [at(i, int(b) + 2) for i, b in enumerate(best)],
        "best_seeds": agreeing.astype(np.int64),
        "analytic_cumsum_cores": [int(min(max(round(ratio * v), 1), max_cumsum_cores))
                                 for v in x],
        "analytic_raw": ratio * x,
    }, schema_overrides={"latency_below_us": pl.Float64, "latency_above_us": pl.Float64})
    return Tuning(table, ratio, constants, list(seeds), max_cumsum_cores, profile.name,
                  profile.to_toml())


def _split(rows: list[dict[str, Any]], swept: str) -> tuple[list[str], dict[str, Any]]:
    """The parameters a table shows per row (KEYS, and any other that varies over the rows)
    and those every row shares, neither holding `swept` (what tune varies), the seed or what a
    row leaves out (resolved_row: the group size)."""
    kept = [n for n in NAMES if n in rows[0] and n not in (swept, "seed")]
    varying = list(KEYS) + [n for n in kept if n not in KEYS and len({r[n] for r in rows}) > 1]
    constants = {n: rows[0][n] for n in kept if n not in varying}
    return varying, constants


def to_records(t: Tuning) -> list[dict[str, Any]]:
    """One object per row (the --json form), with beta/alpha repeated in each."""
    return [{**row, "beta_over_alpha": t.beta_over_alpha} for row in t.table.to_dicts()]


def write(t: Tuning | SmTuning, path: Path) -> None:
    """A lookup table (the group sizes', or --sms's) as TOML or Parquet, written whole or not
    at all."""
    if path.suffix != ".parquet":
        write_text(path, toml_text(t))
        return
    write_parquet(path, t.table, {"profile": t.hardware, "tune": _header_toml(t)})


def _header_toml(t: Tuning | SmTuning) -> str:
    lines = ["[tune]", f"ubepsim_version = {toml_value(__version__)}",
             f"profile = {toml_value(t.profile)}"]
    if isinstance(t, Tuning):
        lines += [f"max_cumsum_cores = {t.max_cumsum_cores}", f"seeds = {toml_value(t.seeds)}",
                  f"beta_over_alpha = {toml_value(round(t.beta_over_alpha, 6))}"]
    else:
        lines += [f"max_sms = {t.max_sms}", f"seeds = {toml_value(t.seeds)}",
                  f"warp_groups_per_sm = {WARP_GROUPS}", f"slack = {SMS_SLACK}"]
    lines += [f"{k} = {toml_value(v)}" for k, v in t.constants.items() if v != ""]
    return "\n".join(lines)


def toml_text(t: Tuning | SmTuning) -> str:
    """[tune]: what the rows share; [[row]]: one per workload (no latency beyond the ends)."""
    if isinstance(t, Tuning):
        out = ["# Best CalCumSum group size per workload (ubepsim tune): latency_us at the best",
               "# size, at one fewer (below) and one more (above) core, the seeds whose own best",
               "# it is (best_seeds), and Appendix A's prediction (beta/alpha) * cores * experts",
               "# / (topk * batch) with beta/alpha fitted over the rows."]
    else:
        out = ["# deepep_ll's SMs per workload (ubepsim tune --sms): the SMs of least latency",
               "# (best_sms, latency_us), the fewest within the slack of it (fewest_sms,",
               "# fewest_latency_us: what compute can have back), and DeepEP V2's",
               "# get_theoretical_num_sms (v2_sms) at the profile's bandwidths."]
    out.append(_header_toml(t))
    for row in t.table.to_dicts():
        out += ["", "[[row]]"]
        out += [f"{k} = {toml_value(_short(v))}" for k, v in row.items() if v is not None]
    out += ["", "# the hardware profile the rows ran on, resolved (a grid's overrides included)",
            t.hardware.rstrip("\n")]
    return "\n".join(out) + "\n"


def _short(v: Any) -> Any:
    return round(v, 4) if isinstance(v, float) else v


# --- SMs for DeepEP's low-latency kernels -----------------------------------------------------

WARP_GROUPS = 3       # DeepEP's June 2025 LL kernels: warp groups per SM (kNumWarpGroups)
SMS_SLACK = 0.05      # the fewest SMs within 5% of the best latency: what compute gets back


def v2_sms(experts: int, topk: int, ranks: int, nvlink_ranks: int, rdma_gbs: float,
           nvlink_gbs: float, device_sms: int, scaleout_ranks: int = 1,
           sm_read_gbs: float = 200, sm_write_gbs: float = 50,
           prefer_overlap_with_compute: bool = True) -> int:
    """DeepEP V2's `get_theoretical_num_sms` (deep_ep/buffers/elastic.py at dd758ca, L728-834),
    as published, its buffer's fields as arguments: the SMs that move a dispatch's traffic
    over the bottleneck link (RDMA only with scale-out ranks, else NVLink) at 200 GB/s of reads
    and 50 GB/s of writes per SM, with 25% headroom, even, at least 4. It sizes V2's kernels, not
    the LL ones; `ubepsim tune --sms` shows it beside the model's advice."""
    def expected_topk(groups: int) -> float:
        return groups * (1 - math.comb(experts - experts // groups, topk)
                         / math.comb(experts, topk))

    rdma_ranks = -(-ranks // nvlink_ranks)
    sm_read = sm_write = rdma_traffic = nvlink_traffic = 0.0
    scaleout_topk = expected_topk(scaleout_ranks) if scaleout_ranks > 1 else 0
    topk_ranks = expected_topk(ranks)
    sm_read += 1 / topk_ranks
    if scaleout_ranks > 1:
        scaleup_ranks = ranks // scaleout_ranks
        sm_write += 1 / topk_ranks
        sm_write += (1 / topk_ranks) * (scaleout_topk / scaleout_ranks)
        rdma_traffic += (1 / topk_ranks) * (scaleout_topk * (1 - 1 / scaleout_ranks))
        sm_read += scaleout_topk / topk_ranks
        sm_write += 1
        nvlink_traffic += 1 - 1 / scaleup_ranks
    else:
        if rdma_ranks > 1:
            sm_write += 1 / topk_ranks
        sm_write += nvlink_ranks / ranks
        nvlink_traffic += nvlink_ranks / ranks * (1 - 1 / nvlink_ranks)
        rdma_traffic += (ranks - nvlink_ranks) / ranks
    if scaleout_ranks > 1 and rdma_traffic / rdma_gbs > nvlink_traffic / nvlink_gbs:
        traffic, gbs = rdma_traffic, rdma_gbs
    else:
        traffic, gbs = nvlink_traffic, nvlink_gbs
    sms: float = device_sms
    if traffic > 0:
        sms = max(gbs / traffic * sm_read / sm_read_gbs, gbs / traffic * sm_write / sm_write_gbs)
    sms = max(4, math.ceil(sms * 1.25))
    sms += sms % 2
    sms = sms if prefer_overlap_with_compute else max(sms, 64)
    return int(min(sms, device_sms))


def tune_sms(rows: list[dict[str, Any]], seeds: list[int], profile: Profile,
             most_sms: int | None = None, threads: int | None = None) -> SmTuning:
    """deepep_ll's SMs per workload (rows: resolved deepep_ll configurations): every even SM
    count from 2 to most_sms (default: the profile's cores, an SM each), WARP_GROUPS warp groups
    per SM, every seed. Per row: the SMs of least mean latency, the fewest SMs within SMS_SLACK
    of it (what a user can give back to compute) and their latencies, beside v2_sms with the
    profile's NIC and NVLink bandwidths."""
    from ..model.api import simulate_columns

    most = profile.cores if most_sms is None else most_sms
    if most < 2:
        raise InputError("--max-sms", f"must be at least 2, got {most}")
    counts = list(range(2, most + 1, 2))
    points = [{**row, "cores": WARP_GROUPS * n, "cumsum_cores": 1, "seed": s}
              for row in rows for n in counts for s in seeds]
    latency = simulate_columns(config_columns(points), profile, threads)["latency_us"]
    latency = latency.reshape(len(rows), len(counts), len(seeds)).mean(axis=2)
    best = latency.argmin(axis=1)
    fewest = (latency <= latency.min(axis=1, keepdims=True) * (1 + SMS_SLACK)).argmax(axis=1)
    node = profile.tier_sizes[0] if profile.tier_sizes else profile.dies
    varying, constants = _split(rows, "cores")
    table = pl.DataFrame({
        **{k: [r[k] for r in rows] for k in varying},
        "best_sms": [counts[b] for b in best],
        "latency_us": [float(latency[i, b]) for i, b in enumerate(best)],
        "fewest_sms": [counts[f] for f in fewest],
        "fewest_latency_us": [float(latency[i, f]) for i, f in enumerate(fewest)],
        "v2_sms": [v2_sms(r["experts"], r["topk"], r["ranks"], min(node, r["ranks"]),
                          profile.nic_gbps, profile.egress_gbps, profile.cores) for r in rows],
    })
    return SmTuning(table, constants, list(seeds), most, profile.name, profile.to_toml())
