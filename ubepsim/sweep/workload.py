"""Workload inputs the kernels consume: expert popularity weights, tokens per die and routing
traces.

Routing itself is drawn inside the kernels (per die, from the counter-based generator); this module
prepares what they need: the cumulative popularity weights of a generated routing (routings.py),
the tokens each die holds where they are not all `batch`, and the routing array of a trace.
"""

from __future__ import annotations

import functools
import os
from pathlib import Path

import numpy as np
import scipy.special

from ..errors import InputError
from ..kernels import rng
from . import routings
from .params import ENUMS, BatchSpread, Routing, int_list, workload_keys

TRACE_COLUMNS = ("rank", "token", "k", "expert")


def popularity_order(seed: int, workload_key: int, experts: int) -> np.ndarray:
    """Experts from most to least popular: a permutation drawn once per (seed, workload)."""
    return _order(seed, workload_key, 0, experts)


def _order(seed: int, workload_key: int, which: int, n: int) -> np.ndarray:
    """A permutation of n drawn once per (seed, workload), one stream of the popularity domain
    per use (0: the experts, 1: the dies)."""
    return np.argsort(_units(seed, workload_key, which, n), kind="stable")


def _units(seed: int, workload_key: int, which: int, n: int) -> np.ndarray:
    key = np.uint64(rng.stream(seed, workload_key, which, rng.DOMAIN_POPULARITY))
    return np.array([rng.unit(key, e) for e in range(n)])


def drawn_inputs(experts: int, ranks: int, seed: int, workload_key: int,
                 reads: tuple[str, ...]) -> dict[str, np.ndarray]:
    """What a generator reads per expert (routings.INPUTS), drawn per (seed, workload)."""
    out = {}
    if "rank" in reads:
        out["rank"] = _rank_of(popularity_order(seed, workload_key, experts))
    if "die_rank" in reads:
        # the dies in a drawn order, each die's experts (experts / ranks, by id) together
        per_die = experts // ranks
        dies = _order(seed, workload_key, 1, ranks)
        out["die_rank"] = _rank_of((dies[:, None] * per_die + np.arange(per_die)).ravel())
    if "normal" in reads:
        # a draw of exactly 0 would be an infinite weight's opposite: the least unit above it
        units = np.maximum(_units(seed, workload_key, 2, experts), rng.TWO_M53)
        out["normal"] = scipy.special.ndtri(units)
    return out


def batches_key(value, workload_key: int) -> tuple | None:
    """The key of a configuration's tokens per die (what die_batches reads), None where every
    die holds `batch`. `value(name)` gives a parameter's value (an enum as its code or
    member)."""
    spread = BatchSpread(int(value("batch_spread")))
    if spread is BatchSpread.equal:
        return None
    return (int(spread), int(value("batch")), int(value("ranks")), int(value("seed")),
            int(workload_key), float(value("batch_cv")), float(value("zero_token_share")),
            str(value("batches")))


@functools.lru_cache(maxsize=4096)
def die_batches(spread: int, batch: int, ranks: int, seed: int, workload_key: int,
                batch_cv: float, zero_token_share: float, batches: str) -> np.ndarray:
    """Each die's tokens, ranks x batch in all (batches_key builds the arguments): weights
    per die (cv: log-normal at that coefficient of variation, drawn; zero: 0 for the first
    floor(share x ranks) dies of a drawn order, 1 for the rest; list: the list) apportioned
    by largest remainder, a tie to the lower die. The draws are one stream of the popularity
    domain (3) per (seed, workload)."""
    spread = BatchSpread(spread)
    if spread is BatchSpread.cv:
        sigma = np.sqrt(np.log1p(batch_cv ** 2))   # a log-normal's CV is sqrt(e^sigma^2 - 1)
        units = np.maximum(_units(seed, workload_key, 3, ranks), rng.TWO_M53)
        weights = np.exp(sigma * scipy.special.ndtri(units))
    elif spread is BatchSpread.zero:
        weights = np.ones(ranks)
        weights[_order(seed, workload_key, 3, ranks)[:int(zero_token_share * ranks)]] = 0.0
    else:
        weights = int_list(batches).astype(np.float64)
    total = ranks * batch
    exact = total * weights / weights.sum()
    out = np.floor(exact).astype(np.int64)
    out[np.lexsort((np.arange(ranks), out - exact))[:total - out.sum()]] += 1
    out.setflags(write=False)   # cached: shared by every caller
    return out


def config_batches(cfg) -> list[int]:
    """A configuration's (params.Config) tokens on each die: its spread's, or its trace's."""
    if cfg.routing is Routing.trace:
        return trace_routing(cfg.trace, cfg.ranks, cfg.batch, cfg.topk, cfg.experts)[1].tolist()
    key = batches_key(lambda name: getattr(cfg, name), cfg.workload_key)
    return [cfg.batch] * cfg.ranks if key is None else die_batches(*key).tolist()


def batch_max(cols: dict[str, np.ndarray]) -> np.ndarray:
    """Per row of canonical columns, the most tokens one die holds (`batch` where all hold
    it); a bound on it where the columns carry one (`batch_max`: expand.corner's)."""
    if "batch_max" in cols:
        return np.asarray(cols["batch_max"], dtype=np.int64)
    out = np.asarray(cols["batch"], dtype=np.int64).copy()
    spread = np.asarray(cols["batch_spread"])
    if (spread != BatchSpread.equal).any():
        wkeys = workload_keys(cols)
        for i in np.flatnonzero(spread != BatchSpread.equal):
            out[i] = die_batches(*batches_key(lambda n: cols[n][i], wkeys[i])).max()
    for i in np.flatnonzero(np.asarray(cols["routing"]) == Routing.trace):
        out[i] = trace_routing(*trace_key(cols, i))[1].max()
    return out


def trace_key(cols: dict[str, np.ndarray], i: int) -> tuple:
    """Row i's trace as read_trace takes it: (path, ranks, batch, topk, experts)."""
    return (str(cols["trace"][i]), *(int(cols[x][i]) for x in ("ranks", "batch", "topk",
                                                                 "experts")))


def _rank_of(order: np.ndarray) -> np.ndarray:
    rank = np.empty(len(order), dtype=np.int64)
    rank[order] = np.arange(len(order))
    return rank


def cdf_key(routing: int, experts: int, ranks: int, seed: int, workload_key: int,
            value) -> tuple:
    """The key of a configuration's popularity weights: what expert_cdf reads. `value(name)`
    gives a parameter's value (an enum as its code or member)."""
    values = tuple((p, _plain(p, value(p))) for p in routings.reads(Routing(routing).name))
    return (int(routing), int(experts), int(ranks), int(seed), int(workload_key), values)


def has_weights(routing, zero_experts, zero_ranks):
    """Whether a routing draws by weights (arrays or scalars; routing by code): a generator's,
    or uniform's with zero load. A trace draws nothing, plain uniform reads no weights."""
    routing = np.asarray(routing)
    return (routing != Routing.trace) & ((routing != Routing.uniform) |
                                         (np.asarray(zero_experts) > 0) |
                                         (np.asarray(zero_ranks) > 0))


def config_cdf(cfg) -> np.ndarray:
    """A configuration's (params.Config) cumulative popularity weights."""
    return expert_cdf(*cdf_key(cfg.routing, cfg.experts, cfg.ranks, cfg.seed, cfg.workload_key,
                               lambda name: getattr(cfg, name)))


def _plain(name: str, v):
    """A parameter's value as a generator reads it: an enum by name, a number as Python's."""
    if name in ENUMS:
        return ENUMS[name](int(v)).name
    return v.item() if isinstance(v, np.generic) else v


@functools.lru_cache(maxsize=4096)
def expert_cdf(routing: int, experts: int, ranks: int, seed: int, workload_key: int,
               values: tuple) -> np.ndarray:
    """Cumulative popularity weights in expert-id order (empty for trace routing and uniform
    without zero load): the generator of routings.GENERATORS at its parameters' values ((name,
    value) pairs, enums by name; cdf_key builds them), the zero-load experts' weights 0."""
    name = Routing(routing).name
    values = dict(values)
    if name == "trace" or not has_weights(routing, values["zero_experts"], values["zero_ranks"]):
        return np.zeros(0)
    zero = values["zero_experts"] > 0 or values["zero_ranks"] > 0
    reads = ("rank", "die_rank") if zero else ()
    if name in routings.GENERATORS:
        reads += routings.inputs(name)
    inputs = drawn_inputs(experts, ranks, seed, workload_key, reads)
    w = (routings.weights(name, inputs, values) if name in routings.GENERATORS
         else np.ones(experts))
    if zero:
        w = np.where(routings.zeroed(w, inputs["rank"], inputs["die_rank"], ranks,
                                     values["zero_experts"], values["zero_ranks"]), 0.0, w)
    return np.cumsum(w)


def read_trace(path: str, ranks: int, batch: int, topk: int, experts: int,
               source: str | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Routing from a Parquet trace: (experts, tokens), experts an int64 array [ranks x batch,
    topk] of each token's expert ids, rank by rank and token by token, and tokens each rank's
    token count. A rank's tokens are 0 .. n - 1, n its own (a trace carries its batches:
    `batch` is their mean)."""
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
                         f"= {n} (batch: the mean tokens per rank)", source)
    for c, hi in (("rank", ranks), ("token", ranks * batch), ("k", topk), ("expert", experts)):
        v = cols[c]
        if v.min() < 0 or v.max() >= hi:
            raise InputError("trace", f"{path}: column {c} must lie in [0, {hi})", source)
    # each rank's tokens: one more than its largest token id (0 without rows)
    tokens = np.zeros(ranks, dtype=np.int64)
    np.maximum.at(tokens, cols["rank"], cols["token"] + 1)
    first = np.concatenate([[0], np.cumsum(tokens)[:-1]])   # where each rank's tokens start
    at = first[cols["rank"]] + cols["token"]
    flat = at * topk + cols["k"]
    # (rank, token, k) once each, and as many rows as the ranks' tokens need: every token of
    # every rank, 0 .. n - 1, has all topk of its copies
    if len(np.unique(flat)) != len(flat) or tokens.sum() * topk != len(flat):
        raise InputError("trace", f"{path}: each (rank, token, k) must appear exactly once, "
                         f"each rank's tokens numbered from 0 without gaps", source)
    routing = np.empty(n, dtype=np.int64)
    routing[flat] = cols["expert"]
    routing = routing.reshape(ranks * batch, topk)
    s = np.sort(routing, axis=1)
    if topk > 1 and (s[:, 1:] == s[:, :-1]).any():
        raise InputError("trace", f"{path}: a token's experts must be distinct", source)
    return routing, tokens


def check_trace_file(path: str, ranks: int, batch: int, topk: int, experts: int,
                     source: str | None = None) -> None:
    read_trace(path, ranks, batch, topk, experts, source)


def trace_routing(path: str, ranks: int, batch: int, topk: int,
                  experts: int) -> tuple[np.ndarray, np.ndarray]:
    """read_trace's, read once per file as it stands (a sweep asks for it per row)."""
    st = os.stat(path)
    return _trace_routing(os.path.realpath(path), ranks, batch, topk, experts, st.st_ino,
                          st.st_size, st.st_mtime_ns, st.st_ctime_ns)


@functools.lru_cache(maxsize=16)
def _trace_routing(path, ranks, batch, topk, experts, *stamps):
    out = read_trace(path, ranks, batch, topk, experts)
    for a in out:
        a.setflags(write=False)   # cached: shared by every caller
    return out
