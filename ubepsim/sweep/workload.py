"""Workload inputs the kernels consume: expert popularity weights and routing traces.

Routing itself is drawn inside the kernels (per die, from the counter-based generator); this module
prepares what they need: the cumulative popularity weights of zipf and hot routing, and the routing
array of a trace.
"""

from __future__ import annotations

import functools
from pathlib import Path

import numpy as np

from ..errors import InputError
from ..kernels import rng
from ..kernels.layout import TRACE, UNIFORM, ZIPF

TRACE_COLUMNS = ("rank", "token", "k", "expert")


def popularity_order(seed: int, workload_key: int, experts: int) -> np.ndarray:
    """Experts from most to least popular: a permutation drawn once per (seed, workload)."""
    key = np.uint64(rng.stream(seed, workload_key, 0, rng.DOMAIN_POPULARITY))
    draws = np.array([rng.unit(key, e) for e in range(experts)])
    return np.argsort(draws, kind="stable")


@functools.lru_cache(maxsize=4096)
def expert_cdf(routing: int, experts: int, zipf_s: float, hot_experts: int, hot_share: float,
               seed: int, workload_key: int) -> np.ndarray:
    """Cumulative popularity weights in expert-id order (empty for uniform and trace routing).

    `routing` is the kernel's code (kernels/layout.py). zipf: the r-th most popular expert has
    weight 1 / (r + 1)^zipf_s. hot: the `hot_experts` most popular share `hot_share` of the
    weight evenly, the others the rest.
    """
    if routing in (UNIFORM, TRACE):
        return np.zeros(0)
    rank = np.empty(experts, dtype=np.int64)
    rank[popularity_order(seed, workload_key, experts)] = np.arange(experts)
    if routing == ZIPF:
        weights = 1.0 / (rank + 1.0) ** zipf_s
    else:
        cold = experts - hot_experts
        weights = np.where(rank < hot_experts, hot_share / hot_experts,
                           (1.0 - hot_share) / cold if cold else 0.0)
    return np.cumsum(weights)


def read_trace(path: str, ranks: int, batch: int, topk: int, experts: int,
               source: str | None = None) -> np.ndarray:
    """Routing from a Parquet trace: an int64 array [ranks, batch, topk] of expert ids."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    if not Path(path).is_file():
        raise InputError("trace", f"{path} is not a file" if Path(path).exists()
                         else f"no such file {path}", source)
    try:
        table = pq.read_table(path)
    except Exception as e:  # noqa: BLE001 - pyarrow raises several types for unreadable files
        raise InputError("trace", f"cannot read {path} as Parquet: {e}", source) from None
    missing = [c for c in TRACE_COLUMNS if c not in table.column_names]
    if missing:
        raise InputError("trace", f"{path} lacks column(s) {', '.join(missing)}; a trace has "
                         f"{', '.join(TRACE_COLUMNS)}", source)
    for c in TRACE_COLUMNS:  # ids, taken as they are: never rounded, parsed or filled in
        column = table.column(c)
        if not pa.types.is_integer(column.type) or column.null_count:
            raise InputError("trace", f"{path}: column {c} must hold integers without nulls, "
                             f"got {column.type}" + (f" with {column.null_count} null(s)"
                                                     if column.null_count else ""), source)
    cols = {c: table.column(c).to_numpy().astype(np.int64) for c in TRACE_COLUMNS}
    n = ranks * batch * topk
    if len(cols["rank"]) != n:
        raise InputError("trace", f"{path} has {len(cols['rank'])} rows; ranks x batch x topk "
                         f"= {n}", source)
    for c, hi in (("rank", ranks), ("token", batch), ("k", topk), ("expert", experts)):
        v = cols[c]
        if v.min() < 0 or v.max() >= hi:
            raise InputError("trace", f"{path}: column {c} must lie in [0, {hi})", source)
    flat = (cols["rank"] * batch + cols["token"]) * topk + cols["k"]
    if len(np.unique(flat)) != n:
        raise InputError("trace", f"{path}: each (rank, token, k) must appear exactly once",
                         source)
    routing = np.empty(n, dtype=np.int64)
    routing[flat] = cols["expert"]
    routing = routing.reshape(ranks, batch, topk)
    s = np.sort(routing, axis=2)
    if topk > 1 and (s[:, :, 1:] == s[:, :, :-1]).any():
        raise InputError("trace", f"{path}: a token's experts must be distinct", source)
    return routing


def check_trace_file(path: str, ranks: int, batch: int, topk: int, experts: int,
                     source: str | None = None) -> None:
    read_trace(path, ranks, batch, topk, experts, source)
