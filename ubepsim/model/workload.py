"""Workload inputs the kernels consume: expert popularity weights and tokens per die.

Routing itself is drawn inside the kernels (per die, from the counter-based generator); this module
prepares what they need: the cumulative popularity weights of a generated routing (routings.py)
and the tokens each die holds where they are not all `batch` (a trace's own: traces.py).
"""

from __future__ import annotations

import functools

import numpy as np
import scipy.special

from ..kernels import rng
from . import routings
from .traces import trace_routing
from .params import ENUMS, BatchSpread, Routing, int_list, workload_keys

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
